//! The seam to a database: one method per protocol statement.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::error::{BoxError, DbErrorKind};
use crate::guard::GuardStatement;
use crate::info::LeaseInfo;

/// The protocol's statements, implemented once per database.
///
/// A lease is one row of the lease table (default `gst_leases`):
///
/// | column | meaning |
/// | --- | --- |
/// | `name` | the name, compared byte for byte, primary key |
/// | `holder` | the token of the current holder, minted per claim, never reused |
/// | `instance` | the process that holds it, for reading logs |
/// | `term` | incremented every time the name changes hands; 1 for the first claim |
/// | `expires_at_ms` | when the lease expires, in UTC ms by the database clock; 0 once released |
/// | `slot_ms` | the last instant on record (never decreasing); 0 if none |
/// | `unfinished_slot_ms` | that instant again while its round has not run to its end, else 0 |
/// | `rerun_slot_ms` | the last instant claimed a second time; 0 if none |
///
/// Every method is one protocol statement of the specification, run with the
/// **database's** clock (`:now` below, UTC milliseconds read in the statement
/// itself, never a process clock). Each should take as few round trips as the
/// database's SQL allows. Nothing that is not SQL belongs here: holder tokens,
/// name checks, timings, renewing on a cadence and the bounds on each
/// statement all live in [`Leases`](crate::Leases) and [`Handle`](crate::Handle),
/// once for every backend. The coordinator validates names before calling any
/// method, and bounds every call with a timeout, dropping the future when it
/// passes: implementations must be cancel safe in that sense (a dropped call
/// may or may not have taken effect, and must leave the store usable).
///
/// A refused claim or a lease found gone is a value (`None`, `false`, a
/// refusal); `Err` means the database could not answer. The coordinator wraps
/// each `Err` in [`Error::Database`](crate::Error::Database) naming the
/// operation and the lease, so implementations return the driver's error as
/// it is.
///
/// A backend that offers a guarded transaction (one that verifies the lease
/// as its first statement and locks the lease row while it runs) must make
/// every claim (`claim`, `claim_slot`, `claim_rerun`) take a lock that
/// conflicts with the guard's, so that a successor's claim waits for a stale
/// holder's transaction to end. The conformance suite cannot see this; the
/// backend's own tests must (PostgreSQL: the guard takes `FOR KEY SHARE`,
/// claims lock the row `FOR UPDATE` first; renewals take `FOR NO KEY UPDATE`
/// and so are not blocked).
///
/// The trait is object safe: a program picks its database at run time and
/// holds an `Arc<dyn LeaseStore>`. The
/// `lease-conformance` crate runs the
/// whole protocol against an implementation.
#[async_trait]
pub trait LeaseStore: Send + Sync + fmt::Debug + 'static {
    /// Claims `name` for `holder` if it is free, inserting the row if there
    /// is none, and returns the new term, or `None` when someone holds it.
    ///
    /// ```sql
    /// UPDATE t SET holder = :holder, instance = :instance, term = term + 1,
    ///        expires_at_ms = :now + :lease_ms
    ///  WHERE name = :name AND expires_at_ms <= :now
    /// -- no row yet: insert (name, holder, instance, 1, :now + :lease_ms, 0, 0, 0),
    /// -- doing nothing when the name is there (someone was first)
    /// ```
    async fn claim(&self, claim: ClaimRequest<'_>) -> Result<Option<u64>, BoxError>;

    /// Extends the lease by `lease_ms` from the database's now, and returns
    /// that now (`Some(now_ms)`) if `holder` still held it, `None` if not
    /// (lost).
    ///
    /// ```sql
    /// UPDATE t SET expires_at_ms = :now + :lease_ms
    ///  WHERE name = :name AND holder = :holder AND expires_at_ms > :now
    /// RETURNING :now
    /// ```
    ///
    /// A renewal that writes the same expiry as the one before (two renewals
    /// in one millisecond) still counts as held. The now returned is the
    /// one the statement compared and wrote with: the holder compares the
    /// database's elapsed time between two renewals with its own, and steps
    /// down when the database's clock jumped ahead
    /// ([`LostCause::ClockJump`](crate::LostCause::ClockJump)).
    async fn renew(&self, name: &str, holder: &str, lease_ms: i64)
    -> Result<Option<i64>, BoxError>;

    /// Renews many leases at once: for each `(name, holder)` of `leases`, in
    /// order, the database's now if that holder still held the name (and so
    /// had its lease extended by `lease_ms` from that now), `None` if not,
    /// exactly as [`renew`](LeaseStore::renew) would answer for it. The now
    /// may be read once for the whole batch, or once per lease, inside the
    /// call.
    ///
    /// [`Leases::with_renewal_batching`](crate::Leases::with_renewal_batching)
    /// sends the renewals of every lease held through one coordinator here,
    /// gathered while the previous batch was in flight. Every backend
    /// declares how it renews a batch: one statement for the whole batch
    /// where its SQL allows, or one lease after the other with
    /// [`renew_each`] (a backend that batches nothing says so in one line):
    ///
    /// ```sql
    /// UPDATE t SET expires_at_ms = :now + :lease_ms
    ///   FROM unnest(:names, :holders) AS r(name, holder)
    ///  WHERE t.name = r.name AND t.holder = r.holder AND t.expires_at_ms > :now
    /// RETURNING t.name, t.holder, :now
    /// ```
    async fn renew_many(
        &self,
        leases: &[(&str, &str)],
        lease_ms: i64,
    ) -> Result<Vec<Option<i64>>, BoxError>;

    /// Returns the term if `holder` still holds `name`, `None` if it does not
    /// (taken, released, or expired with no one to take it yet).
    ///
    /// ```sql
    /// SELECT term FROM t WHERE name = :name AND holder = :holder AND expires_at_ms > :now
    /// ```
    async fn verify(&self, name: &str, holder: &str) -> Result<Option<u64>, BoxError>;

    /// Gives the name up at once, and returns whether `holder` still had it
    /// to give (`false`: it was already gone).
    ///
    /// ```sql
    /// UPDATE t SET expires_at_ms = 0 WHERE name = :name AND holder = :holder
    /// ```
    async fn release(&self, name: &str, holder: &str) -> Result<bool, BoxError>;

    /// Claims the instant `slot_ms` of a schedule under `name`: the lease must
    /// have expired (or have been released, or the row not exist) and
    /// `slot_ms` must be later than the row's `slot_ms`.
    ///
    /// ```sql
    /// SELECT term, slot_ms, unfinished_slot_ms, rerun_slot_ms, expires_at_ms <= :now
    ///   FROM t WHERE name = :name
    /// -- then, when expired and :slot > slot_ms:
    /// UPDATE t SET holder = :holder, instance = :instance, term = term + 1,
    ///        expires_at_ms = :now + :lease_ms, slot_ms = :slot, unfinished_slot_ms = :slot
    ///  WHERE name = :name AND term = :term AND expires_at_ms <= :now
    /// -- no row yet: the insert of `claim`, with both slots set to :slot
    /// ```
    ///
    /// On success it reports the instant the claim gave up: the row's
    /// `slot_ms` as read, when its `unfinished_slot_ms` was equal to it (and
    /// not 0), with `rerun` telling whether `rerun_slot_ms` was equal to it
    /// too. A backend may do this in one statement if it keeps these
    /// semantics: of claimants racing for one row, exactly one succeeds, and
    /// the winner learns what the row held before its write.
    async fn claim_slot(
        &self,
        claim: ClaimRequest<'_>,
        slot_ms: i64,
    ) -> Result<SlotClaim, BoxError>;

    /// Records that the round for instant `slot_ms` ran to its end.
    ///
    /// With `holder` given, first tries to give the name back as well, taking
    /// `passed_ms` along as the last instant on record when it is later than
    /// the row's `slot_ms` and not in the database's future:
    ///
    /// ```sql
    /// UPDATE t SET expires_at_ms = 0, unfinished_slot_ms = 0,
    ///        slot_ms = CASE WHEN :passed > slot_ms AND :passed <= :now
    ///                       THEN :passed ELSE slot_ms END
    ///  WHERE name = :name AND holder = :holder
    /// ```
    ///
    /// When that matched no row, or no `holder` was given (the handle is
    /// known lost), it records the end without the lease, unless a later
    /// instant has been claimed since; `passed_ms` is not taken along:
    ///
    /// ```sql
    /// UPDATE t SET unfinished_slot_ms = 0 WHERE name = :name AND unfinished_slot_ms = :slot
    /// ```
    ///
    /// A backend may fold both into one statement.
    async fn finish(
        &self,
        name: &str,
        holder: Option<&str>,
        slot_ms: i64,
        passed_ms: i64,
    ) -> Result<Finished, BoxError>;

    /// Finds, among `names`, the instants whose round was cut short and that
    /// are free to claim a second time, in one statement for all the names.
    /// The order of the result is unspecified.
    ///
    /// ```sql
    /// SELECT name, term, slot_ms FROM t
    ///  WHERE name IN (:names) AND unfinished_slot_ms = slot_ms
    ///    AND rerun_slot_ms < slot_ms AND expires_at_ms <= :now
    /// ```
    ///
    /// `names` is never empty and holds no duplicates.
    async fn find_unfinished(&self, names: &[&str]) -> Result<Vec<UnfinishedRow>, BoxError>;

    /// Claims the cut-short instant found under `name` with `term` a second
    /// time, and returns whether it did. The new term is `term + 1`.
    ///
    /// ```sql
    /// UPDATE t SET holder = :holder, instance = :instance, term = term + 1,
    ///        expires_at_ms = :now + :lease_ms, rerun_slot_ms = slot_ms
    ///  WHERE name = :name AND term = :term AND unfinished_slot_ms = slot_ms
    ///    AND rerun_slot_ms < slot_ms AND expires_at_ms <= :now
    /// ```
    async fn claim_rerun(&self, claim: ClaimRequest<'_>, term: u64) -> Result<bool, BoxError>;

    /// Returns the row's `slot_ms`, or `None` when there is no row.
    ///
    /// ```sql
    /// SELECT slot_ms FROM t WHERE name = :name
    /// ```
    async fn last_slot(&self, name: &str) -> Result<Option<i64>, BoxError>;

    /// Frees `name` now whoever holds it, provided its term is still `term`
    /// and it is held: an operator's forced release (the `lease release
    /// --force` of the command-line tool). The holder learns of it at its
    /// next renewal and steps down. Returns whether it freed the name
    /// (`false`: the name changed hands since `term` was read, or is free).
    ///
    /// ```sql
    /// UPDATE t SET expires_at_ms = 0
    ///  WHERE name = :name AND term = :term AND expires_at_ms > :now
    /// ```
    async fn force_release(&self, name: &str, term: u64) -> Result<bool, BoxError>;

    /// Reads `name`'s row with the database's clock, or `None` when the name
    /// was never claimed. One round trip; the holder token is not read.
    ///
    /// ```sql
    /// SELECT name, instance, term, expires_at_ms, :now,
    ///        slot_ms, unfinished_slot_ms, rerun_slot_ms
    ///   FROM t WHERE name = :name
    /// ```
    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>, BoxError>;

    /// Reads the rows whose name starts with `prefix` (every row for `""`),
    /// ordered by name byte by byte, at most `limit` of them, with the
    /// database's clock, in one round trip. The holder token is not read.
    ///
    /// ```sql
    /// SELECT name, instance, term, expires_at_ms, :now,
    ///        slot_ms, unfinished_slot_ms, rerun_slot_ms
    ///   FROM t WHERE name >= :prefix ORDER BY name LIMIT :limit
    /// -- keeping the rows that start with :prefix (they come first, in a
    /// -- byte-wise order), or any equivalent statement
    /// ```
    async fn list(&self, prefix: &str, limit: u32) -> Result<Vec<LeaseInfo>, BoxError>;

    /// The database's clock: UTC milliseconds since the UNIX epoch, read
    /// without going through any session time zone.
    async fn now_ms(&self) -> Result<i64, BoxError>;

    /// Creates the lease table if it does not exist. Idempotent, and safe
    /// when many replicas run it at once against a database without the table.
    async fn migrate(&self) -> Result<(), BoxError>;

    /// What kind of failure `error`, returned by one of this store's
    /// methods, is: whether trying again may help, and whether the table is
    /// missing. The coordinator asks it for every `Err` it wraps, so that
    /// [`Error::is_retryable`](crate::Error::is_retryable) is true only for
    /// what a retry can fix, and a missing table says to run `migrate`.
    ///
    /// The default, [`DbErrorKind::Unclassified`], counts as retryable: a
    /// backend that cannot tell should override it (the three in this
    /// workspace do, by the driver's error codes).
    fn classify(&self, error: &(dyn std::error::Error + 'static)) -> DbErrorKind {
        let _ = error;
        DbErrorKind::Unclassified
    }

    /// The guard statement of this store's dialect and table, for fencing a
    /// transaction of another driver: see [`crate::guard`]. What
    /// [`Handle::guard_statement`](crate::Handle::guard_statement) answers.
    /// The default, `None`, says the store offers no guard (a store whose
    /// claims take no lock a guard could conflict with).
    fn guard_statement(&self) -> Option<GuardStatement> {
        None
    }
}

/// What a claim asks for: `name`, for the holder token `holder` of the
/// process `instance`, for `lease_ms` from the database's now. The three
/// strings travel as named fields, so that a swap cannot compile as a claim
/// for the wrong name or token.
///
/// Its `Debug` output leaves the holder token out: it is the tenure's
/// credential.
///
/// ```
/// use lease_core::ClaimRequest;
///
/// let claim = ClaimRequest { name: "job", holder: "t0k3n", instance: "host-1", lease_ms: 15_000 };
/// assert!(!format!("{claim:?}").contains("t0k3n"));
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ClaimRequest<'a> {
    /// The lease's name.
    pub name: &'a str,
    /// The claimant's holder token.
    pub holder: &'a str,
    /// The claimant process's instance id, recorded on the row.
    pub instance: &'a str,
    /// How long the lease lasts from the database's now, in milliseconds.
    pub lease_ms: i64,
}

impl fmt::Debug for ClaimRequest<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClaimRequest")
            .field("name", &self.name)
            .field("instance", &self.instance)
            .field("lease_ms", &self.lease_ms)
            .finish_non_exhaustive()
    }
}

/// What [`LeaseStore::claim_slot`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum SlotClaim {
    /// The instant is claimed.
    Claimed {
        /// The new term.
        term: u64,
        /// The instant given up by this claim, if any.
        superseded: Option<SupersededSlot>,
    },
    /// Someone holds the name, or the instant is not later than the one on
    /// record, or another claimant was first.
    Refused,
}

/// An instant given up by an instant claim: its round had not run to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SupersededSlot {
    /// The instant, in UTC milliseconds.
    pub slot_ms: i64,
    /// Whether it had been claimed a second time already (and that round was
    /// cut short too).
    pub rerun: bool,
}

/// [`LeaseStore::renew_many`] one lease after the other, each with
/// [`LeaseStore::renew`]: for a backend whose SQL cannot renew a batch in
/// one statement, which then declares so:
///
/// ```ignore
/// async fn renew_many(&self, leases: &[(&str, &str)], lease_ms: i64)
///     -> Result<Vec<Option<i64>>, BoxError> {
///     lease_core::renew_each(self, leases, lease_ms).await
/// }
/// ```
///
/// # Errors
///
/// The first renewal's error; the renewals after it are not sent.
pub async fn renew_each<S: LeaseStore + ?Sized>(
    store: &S,
    leases: &[(&str, &str)],
    lease_ms: i64,
) -> Result<Vec<Option<i64>>, BoxError> {
    let mut held = Vec::with_capacity(leases.len());
    for (name, holder) in leases {
        held.push(store.renew(name, holder, lease_ms).await?);
    }
    Ok(held)
}

/// A lease row's record of instants, as an instant claim reads it before it
/// writes: the rules of [`LeaseStore::claim_slot`] in one place, for
/// backends that decide in code rather than in one statement.
///
/// ```
/// use lease_core::{SlotRecord, SupersededSlot};
///
/// // The round of instant 1000 was claimed and never finished.
/// let row = SlotRecord { slot_ms: 1_000, unfinished_slot_ms: 1_000, rerun_slot_ms: 0 };
/// assert!(row.claimable(true, 2_000));
/// assert!(!row.claimable(false, 2_000), "held: refused");
/// assert!(!row.claimable(true, 1_000), "not a later instant: refused");
/// assert_eq!(row.superseded(), Some(SupersededSlot { slot_ms: 1_000, rerun: false }));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotRecord {
    /// The last instant claimed (0: none).
    pub slot_ms: i64,
    /// The instant whose round has not finished (equal to `slot_ms` while it
    /// runs or after it was cut short).
    pub unfinished_slot_ms: i64,
    /// The instant claimed a second time, if any.
    pub rerun_slot_ms: i64,
}

impl SlotRecord {
    /// Whether an instant claim for `slot_ms` takes this row: the lease has
    /// expired by the database's clock, and the instant is later than the
    /// one on record.
    #[must_use]
    pub fn claimable(&self, expired: bool, slot_ms: i64) -> bool {
        expired && slot_ms > self.slot_ms
    }

    /// What a claim that takes this row gives up: the instant on record, if
    /// its round never finished.
    #[must_use]
    pub fn superseded(&self) -> Option<SupersededSlot> {
        (self.slot_ms != 0 && self.unfinished_slot_ms == self.slot_ms).then_some(SupersededSlot {
            slot_ms: self.slot_ms,
            rerun: self.rerun_slot_ms == self.slot_ms,
        })
    }
}

/// A term as a database column holds it (a signed 64-bit integer) to the
/// protocol's `u64`: the lease table never holds a negative one.
///
/// # Errors
///
/// A negative value, which only a table written by something else holds.
pub fn term_from_db(value: i64) -> Result<u64, BoxError> {
    u64::try_from(value)
        .map_err(|_| format!("the lease table holds a negative term ({value})").into())
}

/// What [`LeaseStore::finish`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Finished {
    /// The holder still held the name: the end is recorded and the name given
    /// back (with `passed_ms` taken along where it applies).
    Released,
    /// The name was no longer the holder's (or no holder was given): the end
    /// is recorded without the lease.
    RecordedWithoutLease,
    /// The name was no longer the holder's and a later instant has been
    /// claimed since (or the end was already recorded): nothing changed.
    NotRecorded,
}

/// A row found by [`LeaseStore::find_unfinished`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnfinishedRow {
    /// The name.
    pub name: String,
    /// The term found: a second claim must find it unchanged.
    pub term: u64,
    /// The cut-short instant, in UTC milliseconds.
    pub slot_ms: i64,
}

/// Forwards every method to the store behind the `Arc`.
#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl<S: LeaseStore + ?Sized> LeaseStore for Arc<S> {
    async fn claim(&self, claim: ClaimRequest<'_>) -> Result<Option<u64>, BoxError> {
        (**self).claim(claim).await
    }

    async fn renew(
        &self,
        name: &str,
        holder: &str,
        lease_ms: i64,
    ) -> Result<Option<i64>, BoxError> {
        (**self).renew(name, holder, lease_ms).await
    }

    async fn renew_many(
        &self,
        leases: &[(&str, &str)],
        lease_ms: i64,
    ) -> Result<Vec<Option<i64>>, BoxError> {
        (**self).renew_many(leases, lease_ms).await
    }

    async fn verify(&self, name: &str, holder: &str) -> Result<Option<u64>, BoxError> {
        (**self).verify(name, holder).await
    }

    async fn release(&self, name: &str, holder: &str) -> Result<bool, BoxError> {
        (**self).release(name, holder).await
    }

    async fn claim_slot(
        &self,
        claim: ClaimRequest<'_>,
        slot_ms: i64,
    ) -> Result<SlotClaim, BoxError> {
        (**self).claim_slot(claim, slot_ms).await
    }

    async fn finish(
        &self,
        name: &str,
        holder: Option<&str>,
        slot_ms: i64,
        passed_ms: i64,
    ) -> Result<Finished, BoxError> {
        (**self).finish(name, holder, slot_ms, passed_ms).await
    }

    async fn find_unfinished(&self, names: &[&str]) -> Result<Vec<UnfinishedRow>, BoxError> {
        (**self).find_unfinished(names).await
    }

    async fn claim_rerun(&self, claim: ClaimRequest<'_>, term: u64) -> Result<bool, BoxError> {
        (**self).claim_rerun(claim, term).await
    }

    async fn last_slot(&self, name: &str) -> Result<Option<i64>, BoxError> {
        (**self).last_slot(name).await
    }

    async fn force_release(&self, name: &str, term: u64) -> Result<bool, BoxError> {
        (**self).force_release(name, term).await
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>, BoxError> {
        (**self).get(name).await
    }

    async fn list(&self, prefix: &str, limit: u32) -> Result<Vec<LeaseInfo>, BoxError> {
        (**self).list(prefix, limit).await
    }

    async fn now_ms(&self) -> Result<i64, BoxError> {
        (**self).now_ms().await
    }

    async fn migrate(&self) -> Result<(), BoxError> {
        (**self).migrate().await
    }

    fn classify(&self, error: &(dyn std::error::Error + 'static)) -> DbErrorKind {
        (**self).classify(error)
    }

    fn guard_statement(&self) -> Option<GuardStatement> {
        (**self).guard_statement()
    }
}
