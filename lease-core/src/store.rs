//! The seam to a database: one method per protocol statement.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::error::{BoxError, DbErrorKind};
use crate::guard_statement::GuardStatement;
use crate::info::LeaseInfo;
use crate::time::UtcMillis;
use crate::timings::Timings;
use crate::token::Token;

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
/// | `resign_term` | the term whose holder was asked to resign ([`request_resign`](LeaseStore::request_resign)); 0 if none |
///
/// The API says *instant* for a time a scheduler's job is due
/// ([`claim_instant`](LeaseStore::claim_instant), [`Unfinished::instant`]);
/// `slot_ms` and its two siblings are the specification's column names for
/// the instants on record, kept as they are in the table and in
/// [`LeaseInfo`], which mirrors the row. The secret a claim mints is the
/// *token* ([`Token`]), kept in the `holder` column.
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
/// **A lost reply.** An `Err` (or a call dropped at its bound) after the
/// statement reached the database says nothing of what the statement did:
/// the database may have carried it out and its answer been lost on the
/// way back. So a claim whose reply was lost may have taken the name: it
/// is then held, for a lease, by a token nobody has (no handle was
/// returned, nobody renews or releases it), and nobody can claim it until
/// it expires by the database's clock. A release whose reply was lost may
/// have freed the name, and a renewal whose reply was lost may have
/// extended the lease. The protocol stays safe (a token nobody has can
/// commit nothing), but a claim tried again after such an error can find
/// the name held by its own lost claim. A guarded transaction's `COMMIT`
/// whose reply was lost is [`GuardError::OutcomeUnknown`](crate::GuardError::OutcomeUnknown).
///
/// A backend that offers a guarded transaction (one that verifies the lease
/// as its first statement and locks the lease row while it runs) must make
/// every claim (`claim`, `claim_instant`, `claim_rerun`) take a lock that
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
    /// Claims the claim's name for its token if the name is free, inserting
    /// the row if there is none, and returns the new term, or `None` when
    /// someone holds it.
    ///
    /// ```sql
    /// UPDATE t SET holder = :token, instance = :instance, term = term + 1,
    ///        expires_at_ms = :now + :lease_ms
    ///  WHERE name = :name AND expires_at_ms <= :now
    /// -- no row yet: insert (:name, :token, :instance, 1, :now + :lease_ms, 0, 0, 0),
    /// -- doing nothing when the name is there (someone was first)
    /// ```
    async fn claim(&self, claim: ClaimRequest<'_>) -> Result<Option<u64>, BoxError>;

    /// Extends the lease by `lease_ms` from the database's now, and returns
    /// that now, with whether the holder was asked to resign at its term
    /// ([`Renewed`]), if `token` still held it, `None` if not (lost).
    ///
    /// ```sql
    /// UPDATE t SET expires_at_ms = :now + :lease_ms
    ///  WHERE name = :name AND holder = :token AND expires_at_ms > :now
    /// RETURNING :now, resign_term = term
    /// ```
    ///
    /// A renewal that writes the same expiry as the one before (two renewals
    /// in one millisecond) still counts as held. The now returned is the
    /// one the statement compared and wrote with: the holder compares the
    /// database's elapsed time between two renewals with its own, and steps
    /// down when the database's clock jumped ahead
    /// ([`LostCause::ClockJump`](crate::LostCause::ClockJump)). The resign
    /// request comes back with the renewal, so that the holder learns of it
    /// at no extra round trip; a renewal asked to resign extends the lease
    /// all the same (the holder winds its work down under it).
    async fn renew(
        &self,
        name: &str,
        token: Token<'_>,
        lease_ms: i64,
    ) -> Result<Option<Renewed>, BoxError>;

    /// Renews many leases at once: for each `(name, token)` of `leases`, in
    /// order, the database's now and the resign request ([`Renewed`]) if
    /// that token still held the name (and so had its lease extended by
    /// `lease_ms` from that now), `None` if not, exactly as
    /// [`renew`](LeaseStore::renew) would answer for it. The now
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
    ///   FROM unnest(:names, :tokens) AS r(name, token)
    ///  WHERE t.name = r.name AND t.holder = r.token AND t.expires_at_ms > :now
    /// RETURNING t.name, t.holder, :now, t.resign_term = t.term
    /// ```
    async fn renew_many(
        &self,
        leases: &[(&str, Token<'_>)],
        lease_ms: i64,
    ) -> Result<Vec<Option<Renewed>>, BoxError>;

    /// Returns the term if `token` still holds `name`, `None` if it does not
    /// (taken, released, or expired with no one to take it yet).
    ///
    /// ```sql
    /// SELECT term FROM t WHERE name = :name AND holder = :token AND expires_at_ms > :now
    /// ```
    async fn verify(&self, name: &str, token: Token<'_>) -> Result<Option<u64>, BoxError>;

    /// Gives the name up at once, and returns whether `token` still had it
    /// to give (`false`: it was already gone).
    ///
    /// ```sql
    /// UPDATE t SET expires_at_ms = 0 WHERE name = :name AND holder = :token
    /// ```
    async fn release(&self, name: &str, token: Token<'_>) -> Result<bool, BoxError>;

    /// Claims the instant `instant_ms` (`:slot` below) of a schedule under
    /// the claim's name: the lease must have expired (or have been
    /// released, or the row not exist) and the instant must be later than
    /// the row's `slot_ms`.
    ///
    /// ```sql
    /// SELECT term, slot_ms, unfinished_slot_ms, rerun_slot_ms, expires_at_ms <= :now
    ///   FROM t WHERE name = :name
    /// -- then, when expired and :slot > slot_ms:
    /// UPDATE t SET holder = :token, instance = :instance, term = term + 1,
    ///        expires_at_ms = :now + :lease_ms, slot_ms = :slot, unfinished_slot_ms = :slot
    ///  WHERE name = :name AND term = :term AND expires_at_ms <= :now
    /// -- no row yet: the insert of `claim`, with both slots set to :slot
    /// ```
    ///
    /// On success it reports the instant the claim gave up
    /// ([`InstantRecord::superseded`] of the row as read, with the term
    /// read): the row's `slot_ms`, when its `unfinished_slot_ms` was equal
    /// to it (and not 0), with `rerun` telling whether `rerun_slot_ms` was
    /// equal to it too. A backend may do this in one statement if it keeps
    /// these semantics: of claimants racing for one row, exactly one
    /// succeeds, and the winner learns what the row held before its write.
    async fn claim_instant(
        &self,
        claim: ClaimRequest<'_>,
        instant_ms: i64,
    ) -> Result<InstantClaim, BoxError>;

    /// Records that the round for the instant `finish.instant_ms` (`:slot`
    /// below) ran to its end.
    ///
    /// With a `token` given, first tries to give the name back as well,
    /// taking `passed_ms` along as the last instant on record when it is
    /// later than the row's `slot_ms` and not in the database's future:
    ///
    /// ```sql
    /// UPDATE t SET expires_at_ms = 0, unfinished_slot_ms = 0,
    ///        slot_ms = CASE WHEN :passed > slot_ms AND :passed <= :now
    ///                       THEN :passed ELSE slot_ms END
    ///  WHERE name = :name AND holder = :token
    /// ```
    ///
    /// When that matched no row, or no `token` was given (the handle is
    /// known lost), it records the end without the lease, unless a later
    /// instant has been claimed since; `passed_ms` is not taken along:
    ///
    /// ```sql
    /// UPDATE t SET unfinished_slot_ms = 0 WHERE name = :name AND unfinished_slot_ms = :slot
    /// ```
    ///
    /// A backend may fold both into one statement.
    async fn finish(&self, finish: FinishRequest<'_>) -> Result<Finished, BoxError>;

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
    /// `names` is never empty and holds no duplicates. Every instant found
    /// has `rerun` false and carries the term read.
    async fn find_unfinished(&self, names: &[&str]) -> Result<Vec<Unfinished>, BoxError>;

    /// Claims the cut-short instant found under `name` with `term` a second
    /// time, and returns whether it did. The new term is `term + 1`.
    ///
    /// ```sql
    /// UPDATE t SET holder = :token, instance = :instance, term = term + 1,
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
    async fn last_instant(&self, name: &str) -> Result<Option<i64>, BoxError>;

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

    /// Asks the holder of `name` to resign, provided its term is still
    /// `term` and it is held: an operator's graceful hand-over (the `lease
    /// resign` of the command-line tool). The holder learns of it with its
    /// next renewal ([`Renewed::resign`]), winds its work down while it
    /// still holds the name, then gives it back. A later holder (another
    /// term) is never asked. Returns whether the holder at `term` is asked
    /// now (`false`: the name changed hands since `term` was read, or is
    /// free); asking twice is asking once.
    ///
    /// ```sql
    /// UPDATE t SET resign_term = term
    ///  WHERE name = :name AND term = :term AND expires_at_ms > :now
    /// ```
    async fn request_resign(&self, name: &str, term: u64) -> Result<bool, BoxError>;

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

    /// The timings this store derived its server-side bounds from (the
    /// statement timeout, the lock wait, SQLite's busy timeout: each
    /// backend's builder takes them with `with_timings`, the defaults
    /// otherwise), or `None` for a store that sets no bounds of its own
    /// (the default; a store on a pool the caller configured).
    ///
    /// A coordinator on the store takes these timings as its own
    /// ([`Leases::new`](crate::Leases::new)), and refuses to claim with
    /// timings whose bounds the store's would outlast (see
    /// [`Leases::with_timings`](crate::Leases::with_timings)), so that the
    /// two cannot get out of step.
    fn timings(&self) -> Option<Timings> {
        None
    }
}

/// What a claim asks for: `name`, for the token `token` of the process
/// `instance`, for `lease_ms` from the database's now. The strings travel
/// as named fields, so that a swap cannot compile as a claim for the wrong
/// name or token.
///
/// Its `Debug` output leaves the token out: it is the tenure's credential.
///
/// ```
/// use lease_core::{ClaimRequest, Token};
///
/// let claim = ClaimRequest {
///     name: "job",
///     token: Token::new("t0k3n"),
///     instance: "host-1",
///     lease_ms: 15_000,
/// };
/// assert!(!format!("{claim:?}").contains("t0k3n"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimRequest<'a> {
    /// The lease's name.
    pub name: &'a str,
    /// The claimant's token, new for this claim.
    pub token: Token<'a>,
    /// The claimant process's instance id, recorded on the row.
    pub instance: &'a str,
    /// How long the lease lasts from the database's now, in milliseconds.
    pub lease_ms: i64,
}

/// What a renewal answers when the token still held the name
/// ([`LeaseStore::renew`], [`LeaseStore::renew_many`]).
///
/// ```
/// use lease_core::Renewed;
///
/// let renewed = Renewed::at(1_764_583_200_000);
/// assert!(!renewed.resign);
/// let asked = Renewed { resign: true, ..renewed };
/// assert_eq!(asked.now_ms, 1_764_583_200_000);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct Renewed {
    /// The database's now the renewal compared and wrote with, in UTC ms.
    pub now_ms: i64,
    /// Whether the holder was asked to resign at its term
    /// ([`LeaseStore::request_resign`]): the row's `resign_term` equals its
    /// `term`.
    pub resign: bool,
}

impl Renewed {
    /// A renewal at `now_ms`, with no resign request.
    pub fn at(now_ms: i64) -> Self {
        Renewed {
            now_ms,
            resign: false,
        }
    }
}

/// What [`LeaseStore::finish`] records: the round of the instant
/// `instant_ms` under `name` ran to its end; `passed_ms` is the last instant
/// of its schedule to have come by then. `token` is the handle's, or `None`
/// when the handle is known lost (the name is then not given back). Named
/// fields, so that the two instants cannot be swapped.
///
/// ```
/// use lease_core::{FinishRequest, Token};
///
/// let finish = FinishRequest {
///     name: "cron:report",
///     token: Some(Token::new("t0k3n")),
///     instant_ms: 1_000,
///     passed_ms: 61_000,
/// };
/// assert!(!format!("{finish:?}").contains("t0k3n"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FinishRequest<'a> {
    /// The lease's name.
    pub name: &'a str,
    /// The handle's token; `None` when the handle is known lost.
    pub token: Option<Token<'a>>,
    /// The instant the round was claimed for, in UTC milliseconds.
    pub instant_ms: i64,
    /// The last instant of the schedule to have come by the round's end.
    pub passed_ms: i64,
}

/// What [`LeaseStore::claim_instant`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum InstantClaim {
    /// The instant is claimed.
    Claimed {
        /// The new term.
        term: u64,
        /// The instant given up by this claim, if any, with the term the
        /// row had before the claim.
        superseded: Option<Unfinished>,
    },
    /// Someone holds the name, or the instant is not later than the one on
    /// record, or another claimant was first.
    Refused,
}

/// [`LeaseStore::renew_many`] one lease after the other, each with
/// [`LeaseStore::renew`]: for a backend whose SQL cannot renew a batch in
/// one statement, which then declares so:
///
/// ```ignore
/// async fn renew_many(&self, leases: &[(&str, Token<'_>)], lease_ms: i64)
///     -> Result<Vec<Option<Renewed>>, BoxError> {
///     lease_core::renew_each(self, leases, lease_ms).await
/// }
/// ```
///
/// # Errors
///
/// The first renewal's error; the renewals after it are not sent.
pub async fn renew_each<S: LeaseStore + ?Sized>(
    store: &S,
    leases: &[(&str, Token<'_>)],
    lease_ms: i64,
) -> Result<Vec<Option<Renewed>>, BoxError> {
    let mut held = Vec::with_capacity(leases.len());
    for (name, token) in leases {
        held.push(store.renew(name, *token, lease_ms).await?);
    }
    Ok(held)
}

/// A lease row's record of instants (its `slot_ms`, `unfinished_slot_ms`
/// and `rerun_slot_ms` columns), as an instant claim reads it before it
/// writes: the rules of [`LeaseStore::claim_instant`] in one place.
///
/// ```
/// use lease_core::{InstantRecord, UtcMillis};
///
/// // The round of instant 1000 was claimed and never finished.
/// let row = InstantRecord { slot_ms: 1_000, unfinished_slot_ms: 1_000, rerun_slot_ms: 0 };
/// assert!(row.claimable(true, 2_000));
/// assert!(!row.claimable(false, 2_000), "held: refused");
/// assert!(!row.claimable(true, 1_000), "not a later instant: refused");
/// let given_up = row.superseded("cron:job", 4).unwrap();
/// assert_eq!(given_up.instant, UtcMillis::from_millis(1_000));
/// assert!(!given_up.rerun);
/// assert_eq!(given_up.term(), 4);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InstantRecord {
    /// The last instant on record (0: none).
    pub slot_ms: i64,
    /// The instant whose round has not finished (equal to `slot_ms` while it
    /// runs or after it was cut short).
    pub unfinished_slot_ms: i64,
    /// The instant claimed a second time, if any.
    pub rerun_slot_ms: i64,
}

impl InstantRecord {
    /// Whether an instant claim for `instant_ms` takes this row: the lease
    /// has expired by the database's clock, and the instant is later than
    /// the one on record.
    #[must_use]
    pub fn claimable(&self, expired: bool, instant_ms: i64) -> bool {
        expired && instant_ms > self.slot_ms
    }

    /// What a claim that takes this row, read under `name` with `term`,
    /// gives up: the instant on record, if its round never finished.
    #[must_use]
    pub fn superseded(&self, name: &str, term: u64) -> Option<Unfinished> {
        (self.slot_ms != 0 && self.unfinished_slot_ms == self.slot_ms).then(|| {
            Unfinished::new(
                name,
                UtcMillis::from_millis(self.slot_ms),
                self.rerun_slot_ms == self.slot_ms,
                term,
            )
        })
    }
}

/// An instant claimed under a scheduler's name whose round has not run to
/// its end: the process running it shut down or died, or its lease was
/// lost, before the round returned. What
/// [`Leases::unfinished_instants`](crate::Leases::unfinished_instants)
/// finds (and [`LeaseStore::find_unfinished`] returns), and what an instant
/// claim gives up ([`Handle::superseded`](crate::Handle::superseded)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unfinished {
    /// The name the instant was claimed under.
    pub name: String,
    /// The instant.
    pub instant: UtcMillis,
    /// Whether the instant had been claimed a second time already, and that
    /// round was cut short too.
    /// [`Leases::unfinished_instants`](crate::Leases::unfinished_instants)
    /// never returns such an instant.
    pub rerun: bool,
    /// The term found: a second claim must find it unchanged.
    term: u64,
}

impl Unfinished {
    /// The instant `instant` under `name`, found with the lease at `term`.
    #[must_use]
    pub fn new(name: impl Into<String>, instant: UtcMillis, rerun: bool, term: u64) -> Self {
        Unfinished {
            name: name.into(),
            instant,
            rerun,
            term,
        }
    }

    /// The term the lease had when the instant was found: a second claim
    /// succeeds only if the name has not changed hands since.
    #[must_use]
    pub fn term(&self) -> u64 {
        self.term
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
    /// The name was no longer the holder's (or no token was given): the end
    /// is recorded without the lease.
    RecordedWithoutLease,
    /// The name was no longer the holder's and a later instant has been
    /// claimed since (or the end was already recorded): nothing changed.
    NotRecorded,
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
        token: Token<'_>,
        lease_ms: i64,
    ) -> Result<Option<Renewed>, BoxError> {
        (**self).renew(name, token, lease_ms).await
    }

    async fn renew_many(
        &self,
        leases: &[(&str, Token<'_>)],
        lease_ms: i64,
    ) -> Result<Vec<Option<Renewed>>, BoxError> {
        (**self).renew_many(leases, lease_ms).await
    }

    async fn verify(&self, name: &str, token: Token<'_>) -> Result<Option<u64>, BoxError> {
        (**self).verify(name, token).await
    }

    async fn release(&self, name: &str, token: Token<'_>) -> Result<bool, BoxError> {
        (**self).release(name, token).await
    }

    async fn claim_instant(
        &self,
        claim: ClaimRequest<'_>,
        instant_ms: i64,
    ) -> Result<InstantClaim, BoxError> {
        (**self).claim_instant(claim, instant_ms).await
    }

    async fn finish(&self, finish: FinishRequest<'_>) -> Result<Finished, BoxError> {
        (**self).finish(finish).await
    }

    async fn find_unfinished(&self, names: &[&str]) -> Result<Vec<Unfinished>, BoxError> {
        (**self).find_unfinished(names).await
    }

    async fn claim_rerun(&self, claim: ClaimRequest<'_>, term: u64) -> Result<bool, BoxError> {
        (**self).claim_rerun(claim, term).await
    }

    async fn last_instant(&self, name: &str) -> Result<Option<i64>, BoxError> {
        (**self).last_instant(name).await
    }

    async fn force_release(&self, name: &str, term: u64) -> Result<bool, BoxError> {
        (**self).force_release(name, term).await
    }

    async fn request_resign(&self, name: &str, term: u64) -> Result<bool, BoxError> {
        (**self).request_resign(name, term).await
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

    fn timings(&self) -> Option<Timings> {
        (**self).timings()
    }
}
