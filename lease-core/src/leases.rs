//! The types users hold: the coordinator, handles and unfinished instants.

use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::time::Instant;

use crate::batch::Batcher;
use crate::error::{BoxError, Error, LostCause, Op, Result};
use crate::info::LeaseInfo;
use crate::name::validate_name;
use crate::run::FailHook;
use crate::store::{ClaimRequest, Finished, LeaseStore, SlotClaim};
use crate::time::UtcMillis;
use crate::timings::Timings;
use crate::token::{holder_token, instance_id};

/// The coordinator: a [`LeaseStore`], this process's instance id and the
/// [`Timings`]. Cheap to clone; every clone shares the store.
///
/// # Examples
///
/// ```
/// # async fn example(store: std::sync::Arc<dyn lease_core::LeaseStore>) -> lease_core::Result<()> {
/// use lease_core::Leases;
///
/// let leases = Leases::from_arc(store);
/// leases.migrate().await?;
/// match leases.claim("lock:nightly-report").await? {
///     Some(handle) => {
///         println!("holding {} at term {}", handle.name(), handle.term());
///         // ... the work ...
///         handle.release().await?;
///     }
///     None => println!("someone else is on it"),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Leases {
    shared: Arc<Shared>,
}

#[derive(Clone)]
struct Shared {
    store: Arc<dyn LeaseStore>,
    instance: String,
    timings: Timings,
    fail_hook: FailHook,
    /// Whether renewals go through one batch statement, see
    /// [`Leases::with_renewal_batching`].
    batching: bool,
    /// The batcher, started with the first batched renewal.
    batcher: Arc<OnceLock<Batcher>>,
}

impl fmt::Debug for Leases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leases")
            .field("store", &self.shared.store)
            .field("instance", &self.shared.instance)
            .field("timings", &self.shared.timings)
            .finish()
    }
}

impl Leases {
    /// A coordinator on `store`, with the default timings and this process's
    /// [`instance_id`].
    pub fn new<S: LeaseStore>(store: S) -> Self {
        Self::from_arc(Arc::new(store))
    }

    /// A coordinator on a store shared as `Arc<dyn LeaseStore>`, for a
    /// program that picks its database at run time.
    pub fn from_arc(store: Arc<dyn LeaseStore>) -> Self {
        Leases {
            shared: Arc::new(Shared {
                store,
                instance: instance_id().to_owned(),
                timings: Timings::default(),
                fail_hook: FailHook::default(),
                batching: false,
                batcher: Arc::default(),
            }),
        }
    }

    /// The same coordinator with other timings.
    ///
    /// The store's server-side bounds (statement timeout, lock wait) were
    /// set when it was built: build it with the same timings (each
    /// backend's builder has `with_timings`, and `dblease::connect_with`
    /// does both), or a tightened deadline leaves statements running on
    /// the server after the coordinator gave up on them.
    #[must_use]
    pub fn with_timings(mut self, timings: Timings) -> Self {
        let shared = Arc::make_mut(&mut self.shared);
        shared.timings = timings;
        shared.batcher = Arc::default();
        self
    }

    /// The same coordinator renewing every lease it holds through one
    /// [`LeaseStore::renew_many`] statement per batch instead of one
    /// statement per lease: for a process that holds many leases at once.
    ///
    /// A renewal waits at most a short window (a fortieth of the renew
    /// interval, at most 50 ms, counted from when it was queued) for others
    /// to join it; a batch goes at once when it is full (5,000 renewals),
    /// and up to four batches are in flight at once, the next one gathering
    /// while they are. So with thousands of leases renewed every 2 s the
    /// database sees a few statements a second instead of thousands, and
    /// with 100,000 (50,000 renewals a second) the batches keep up with the
    /// leases rather than with a window. Nothing about a lease changes: its attempts keep
    /// their cadence and their bounds (the window is spent inside them),
    /// each attempt counts from the moment it is queued,
    /// and it is lost exactly when the batch's answer says its holder no
    /// longer held it. The gain depends on the backend: PostgreSQL renews a
    /// batch in one statement; the others renew its leases one after the
    /// other (see [`LeaseStore::renew_many`]).
    ///
    /// ```
    /// # fn example(store: std::sync::Arc<dyn lease_core::LeaseStore>) {
    /// let leases = lease_core::Leases::from_arc(store).with_renewal_batching(true);
    /// # }
    /// ```
    #[must_use]
    pub fn with_renewal_batching(mut self, batching: bool) -> Self {
        let shared = Arc::make_mut(&mut self.shared);
        shared.batching = batching;
        shared.batcher = Arc::default();
        self
    }

    /// The batcher, when renewals are batched; started on first use.
    fn batcher(&self) -> Option<&Batcher> {
        let shared = &self.shared;
        shared.batching.then(|| {
            shared.batcher.get_or_init(|| {
                Batcher::start(
                    shared.store.clone(),
                    shared.timings.lease_ms(),
                    crate::batch::Config::new(
                        shared.timings.renew(),
                        shared.timings.statement_timeout(),
                    ),
                )
            })
        })
    }

    /// The same coordinator claiming under another instance id: what the
    /// `instance` column and the logs show. Tests that play several
    /// processes in one use it; a deployment keeps the default.
    #[must_use]
    pub fn with_instance(mut self, instance: impl Into<String>) -> Self {
        Arc::make_mut(&mut self.shared).instance = instance.into();
        self
    }

    /// The same coordinator with another fail hook: what
    /// [`run`](crate::run) does once work under a lost lease will not stop
    /// (the grace passed, its task was aborted, and it still runs: it blocks
    /// without yielding). The hook receives the [`Error::Lost`] of the lease;
    /// `run` has already logged it at error level.
    ///
    /// The default ends the process at once with a non-zero status
    /// ([`std::process::abort`]), so that the orchestrator restarts it. Tests
    /// record the failure instead: ending the test process is one-way. A hook
    /// that returns leaves `run` waiting for the work.
    ///
    /// ```
    /// # fn example(leases: lease_core::Leases) {
    /// let leases = leases.with_fail_hook(|error| eprintln!("would fail the process: {error}"));
    /// # }
    /// ```
    #[must_use]
    pub fn with_fail_hook(mut self, hook: impl Fn(&Error) + Send + Sync + 'static) -> Self {
        Arc::make_mut(&mut self.shared).fail_hook = FailHook::new(hook);
        self
    }

    /// What `run` does once work under a lost lease will not stop.
    pub(crate) fn fail_hook(&self) -> &FailHook {
        &self.shared.fail_hook
    }

    /// The store.
    #[must_use]
    pub fn store(&self) -> &Arc<dyn LeaseStore> {
        &self.shared.store
    }

    /// The timings.
    #[must_use]
    pub fn timings(&self) -> &Timings {
        &self.shared.timings
    }

    /// The instance id written beside every claim.
    #[must_use]
    pub fn instance(&self) -> &str {
        &self.shared.instance
    }

    /// Reports whether the database can carry leases: it answers, and reads
    /// its clock. A capability built on leases checks this as it starts, so a
    /// deployment that cannot coordinate fails at startup instead of running
    /// every replica as if it were alone.
    ///
    /// # Errors
    ///
    /// [`Error::Database`] or [`Error::Timeout`] when the database does not
    /// answer. (An unsupported database is refused earlier, when the store is
    /// built from its URL.)
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn available(&self) -> Result<()> {
        self.now().await.map(|_| ())
    }

    /// Creates the lease table if it does not exist.
    ///
    /// # Errors
    ///
    /// [`Error::Database`] or [`Error::Timeout`] when the database does not
    /// answer or refuses (missing privileges).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the table is either created or not.
    pub async fn migrate(&self) -> Result<()> {
        self.bounded(Op::Migrate, None, self.shared.store.migrate())
            .await
    }

    /// The database's clock.
    ///
    /// # Errors
    ///
    /// [`Error::Database`] or [`Error::Timeout`] when the database does not answer.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn now(&self) -> Result<UtcMillis> {
        self.bounded(Op::Now, None, self.shared.store.now_ms())
            .await
            .map(UtcMillis::from_millis)
    }

    /// Tries to take `name` for this process, once, without waiting: a
    /// handle when the name was free (never claimed, expired or released),
    /// `None` when someone holds it.
    ///
    /// Each claim mints a new holder token; the handle's
    /// [`term`](Handle::term) is one more than the last holder's.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] before any SQL for an empty or over-long name;
    /// [`Error::Database`] or [`Error::Timeout`] when the database does not
    /// answer.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the name claimed by a token nobody
    /// knows; it is then free again when the lease expires.
    pub async fn claim(&self, name: &str) -> Result<Option<Handle>> {
        validate_name(name)?;
        let holder = holder_token()?;
        let sent = Instant::now();
        let claimed = self
            .bounded(
                Op::Claim,
                Some(name),
                self.shared.store.claim(ClaimRequest {
                    name,
                    holder: &holder,
                    instance: &self.shared.instance,
                    lease_ms: self.shared.timings.lease_ms(),
                }),
            )
            .await;
        crate::metrics::claim(name, claim_outcome(&claimed, Option::is_some));
        let claimed = claimed?;
        Ok(claimed.map(|term| {
            tracing::debug!(name, term, instance = %self.shared.instance, "lease claimed");
            self.handle(name, holder, term, sent, None, None)
        }))
    }

    /// Claims the instant `slot` of a scheduler's job under `name`: the name
    /// must be free and `slot` later than the last instant on record under it
    /// (the last claimed, or the last a round that ran to its end took along,
    /// see [`Handle::finish`]). The claim records `slot` as the last instant
    /// claimed, and as unfinished until [`Handle::finish`].
    ///
    /// A cluster thus claims each instant of a job once, whichever replica
    /// gets there first; an instant already claimed, or skipped while a
    /// round held the name, is refused everywhere. Only a round cut short is
    /// claimed a second time, see [`Leases::claim_rerun`].
    ///
    /// The instant claimed before under `name`, when its round had not run to
    /// its end, is given up by the claim and never runs again; the handle
    /// names it, see [`Handle::superseded`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] before any SQL; [`Error::InvalidInstant`] for an
    /// instant not after the UNIX epoch; [`Error::Database`] or
    /// [`Error::Timeout`] when the database does not answer.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the instant claimed by a token nobody
    /// knows: it then counts as a round cut short, and runs again once.
    pub async fn claim_slot(&self, name: &str, slot: UtcMillis) -> Result<Option<Handle>> {
        validate_name(name)?;
        if slot.as_millis() <= 0 {
            return Err(Error::InvalidInstant {
                name: name.to_owned(),
                reason: "an instant must be after the UNIX epoch",
            });
        }
        let holder = holder_token()?;
        let sent = Instant::now();
        let outcome = self
            .bounded(
                Op::ClaimSlot,
                Some(name),
                self.shared.store.claim_slot(
                    ClaimRequest {
                        name,
                        holder: &holder,
                        instance: &self.shared.instance,
                        lease_ms: self.shared.timings.lease_ms(),
                    },
                    slot.as_millis(),
                ),
            )
            .await;
        crate::metrics::claim(
            name,
            claim_outcome(&outcome, |o| matches!(o, SlotClaim::Claimed { .. })),
        );
        let outcome = outcome?;
        Ok(match outcome {
            SlotClaim::Refused => None,
            SlotClaim::Claimed { term, superseded } => {
                let superseded = superseded.map(|s| Unfinished {
                    name: name.to_owned(),
                    slot: UtcMillis::from_millis(s.slot_ms),
                    rerun: s.rerun,
                    term: term.saturating_sub(1),
                });
                tracing::debug!(
                    name,
                    term,
                    slot = slot.as_millis(),
                    superseded = superseded.as_ref().map(|u| u.slot.as_millis()),
                    instance = %self.shared.instance,
                    "instant claimed"
                );
                Some(self.handle(name, holder, term, sent, Some(slot), superseded))
            }
        })
    }

    /// Finds the instants, under the names given, whose round was cut short
    /// and that are free to claim a second time: the round has not run to
    /// its end, the instant has not been claimed a second time already, no
    /// later instant has been claimed since, and the lease has expired or
    /// been released. One statement answers for all the names.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] before any SQL if any name is invalid;
    /// [`Error::Database`] or [`Error::Timeout`] when the database does not
    /// answer.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn unfinished_slots<S: AsRef<str>>(&self, names: &[S]) -> Result<Vec<Unfinished>> {
        let mut seen = HashSet::with_capacity(names.len());
        let mut unique = Vec::with_capacity(names.len());
        for name in names {
            let name = name.as_ref();
            validate_name(name)?;
            if seen.insert(name) {
                unique.push(name);
            }
        }
        if unique.is_empty() {
            return Ok(Vec::new());
        }
        let rows = self
            .bounded(
                Op::FindUnfinished,
                None,
                self.shared.store.find_unfinished(&unique),
            )
            .await?;
        Ok(rows
            .into_iter()
            .map(|row| Unfinished {
                name: row.name,
                slot: UtcMillis::from_millis(row.slot_ms),
                rerun: false,
                term: row.term,
            })
            .collect())
    }

    /// Claims `u`'s instant a second time, `u` as
    /// [`unfinished_slots`](Leases::unfinished_slots) found it: a handle when
    /// the instant is still free to claim a second time (the name has not
    /// changed hands since it was found), `None` when it was claimed again
    /// elsewhere, its first round was recorded finished after all, a later
    /// instant was claimed, or the name is held.
    ///
    /// The round runs under the handle like any other and ends with
    /// [`Handle::finish`], or with [`Handle::release`] when it is cut short
    /// again, which leaves the instant unfinished for good.
    ///
    /// # Errors
    ///
    /// [`Error::Database`] or [`Error::Timeout`] when the database does not answer.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the instant claimed a second time by a
    /// token nobody knows: it is then unfinished for good.
    pub async fn claim_rerun(&self, u: &Unfinished) -> Result<Option<Handle>> {
        validate_name(&u.name)?;
        let holder = holder_token()?;
        let sent = Instant::now();
        let claimed = self
            .bounded(
                Op::ClaimRerun,
                Some(&u.name),
                self.shared.store.claim_rerun(
                    ClaimRequest {
                        name: &u.name,
                        holder: &holder,
                        instance: &self.shared.instance,
                        lease_ms: self.shared.timings.lease_ms(),
                    },
                    u.term,
                ),
            )
            .await;
        crate::metrics::claim(&u.name, claim_outcome(&claimed, |c| *c));
        let claimed = claimed?;
        Ok(claimed.then(|| {
            let term = u.term + 1;
            tracing::debug!(
                name = ?u.name,
                term,
                slot = u.slot.as_millis(),
                instance = %self.shared.instance,
                "instant claimed a second time"
            );
            self.handle(&u.name, holder, term, sent, Some(u.slot), None)
        }))
    }

    /// The last instant on record under `name` (the last claimed, or the last
    /// a round that ran to its end took along, see [`Handle::finish`]), or
    /// `None` when no instant was ever claimed under it. A scheduler reads it
    /// as it starts, to tell an instant no replica claimed from a job that
    /// has never run.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] before any SQL; [`Error::Database`] or
    /// [`Error::Timeout`] when the database does not answer.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn last_slot(&self, name: &str) -> Result<Option<UtcMillis>> {
        validate_name(name)?;
        let slot = self
            .bounded(Op::LastSlot, Some(name), self.shared.store.last_slot(name))
            .await?;
        Ok(slot.filter(|&ms| ms != 0).map(UtcMillis::from_millis))
    }

    /// Reads `name`'s lease as the database sees it now: who holds it (the
    /// instance, never the token), the term, the time left by the database's
    /// clock and the scheduler's instants; `None` when the name was never
    /// claimed. One statement.
    ///
    /// ```
    /// # async fn example(leases: lease_core::Leases) -> lease_core::Result<()> {
    /// if let Some(info) = leases.get("leader:billing").await? {
    ///     println!("{info}"); // "leader:billing" held by "web-2" (term 7, 13.2s left)
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] before any SQL; [`Error::Database`] or
    /// [`Error::Timeout`] when the database does not answer.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn get(&self, name: &str) -> Result<Option<LeaseInfo>> {
        validate_name(name)?;
        self.bounded(Op::Get, Some(name), self.shared.store.get(name))
            .await
    }

    /// Frees `name` now, whoever holds it, if its term is still `term` (read
    /// with [`get`](Leases::get) just before) and it is held: an operator's
    /// tool for a stuck lease. Returns whether it freed it; `false` when the
    /// name changed hands since, or is free. One statement.
    ///
    /// The holder is not told at once: its next renewal finds the name gone
    /// and it steps down ([`LostCause::NotHolder`]), its work's context
    /// ending. Until then it still believes it holds the name, so a forced
    /// release does not fence it; its guarded transactions do refuse at once.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] before any SQL; [`Error::Database`] or
    /// [`Error::Timeout`] when the database does not answer.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped call either freed the name or did not.
    pub async fn force_release(&self, name: &str, term: u64) -> Result<bool> {
        validate_name(name)?;
        let freed = self
            .bounded(
                Op::ForceRelease,
                Some(name),
                self.shared.store.force_release(name, term),
            )
            .await?;
        if freed {
            tracing::info!(name = ?name, term, "lease released by force");
        }
        Ok(freed)
    }

    /// Reads the leases whose name starts with `prefix` (all of them for
    /// `""`), ordered by name, at most `limit`, as [`get`](Leases::get) reads
    /// one. One statement.
    ///
    /// # Errors
    ///
    /// [`Error::Database`] or [`Error::Timeout`] when the database does not
    /// answer.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn list(&self, prefix: &str, limit: u32) -> Result<Vec<LeaseInfo>> {
        self.bounded(Op::List, None, self.shared.store.list(prefix, limit))
            .await
    }

    fn handle(
        &self,
        name: &str,
        holder: String,
        term: u64,
        sent: Instant,
        slot: Option<UtcMillis>,
        superseded: Option<Unfinished>,
    ) -> Handle {
        Handle {
            state: Arc::new(HandleState {
                leases: self.clone(),
                name: name.to_owned(),
                holder,
                term,
                claimed_at: sent,
                slot,
                superseded,
                lost: AtomicBool::new(false),
            }),
        }
    }

    /// Runs one store call under the statement timeout, naming the operation
    /// and the lease in any error.
    async fn bounded<T>(
        &self,
        op: Op,
        name: Option<&str>,
        call: impl Future<Output = std::result::Result<T, BoxError>>,
    ) -> Result<T> {
        let bound = self.shared.timings.statement_timeout();
        bounded(&*self.shared.store, op, name, bound, call).await
    }
}

/// The `outcome` label of a claim's metric.
fn claim_outcome<T>(result: &Result<T>, claimed: impl Fn(&T) -> bool) -> &'static str {
    match result {
        Ok(value) if claimed(value) => "claimed",
        Ok(_) => "refused",
        Err(_) => "error",
    }
}

/// Runs `call` for at most `bound`, mapping its failure to the protocol's errors.
/// A failure is classified by `store` ([`LeaseStore::classify`]): a missing
/// table is [`Error::MissingTable`], anything else [`Error::Database`] with
/// its kind.
pub(crate) async fn bounded<T>(
    store: &dyn LeaseStore,
    op: Op,
    name: Option<&str>,
    bound: Duration,
    call: impl Future<Output = std::result::Result<T, BoxError>>,
) -> Result<T> {
    match tokio::time::timeout(bound, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(source)) => Err(Error::from_store(
            store.classify(&*source),
            op,
            name,
            source,
        )),
        Err(_) => Err(Error::Timeout {
            op,
            name: name.map(str::to_owned),
            after: bound,
        }),
    }
}

/// A claimed lease: the proof of holding a name from the claim until the
/// release, or the loss.
///
/// Cheap to clone: clones share one lease (one token, one lost flag). Dropping
/// a handle does not release the name; the lease then runs out by itself.
/// Call [`release`](Handle::release) or [`finish`](Handle::finish) so that
/// the next claimant need not wait.
#[derive(Clone)]
#[must_use = "a claimed lease should be released, or finished, when its work is done"]
pub struct Handle {
    state: Arc<HandleState>,
}

struct HandleState {
    leases: Leases,
    name: String,
    holder: String,
    term: u64,
    claimed_at: Instant,
    slot: Option<UtcMillis>,
    superseded: Option<Unfinished>,
    lost: AtomicBool,
}

impl fmt::Debug for Handle {
    /// Shows the name, term and instant, never the holder token.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("name", &self.state.name)
            .field("term", &self.state.term)
            .field("slot", &self.state.slot)
            .field("superseded", &self.state.superseded)
            .field("lost", &self.lost())
            .finish_non_exhaustive()
    }
}

impl Handle {
    /// The name held.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.state.name
    }

    /// The term the claim started: the number the world outside the database
    /// can refuse stale holders by. It grows by one each time the name
    /// changes hands.
    #[must_use]
    pub fn term(&self) -> u64 {
        self.state.term
    }

    /// The instant this handle was claimed for, for a handle of
    /// [`Leases::claim_slot`] or [`Leases::claim_rerun`].
    #[must_use]
    pub fn slot(&self) -> Option<UtcMillis> {
        self.state.slot
    }

    /// The instant the claim of this handle gave up, if it gave one up: the
    /// instant claimed before under the name, whose round had not run to its
    /// end (cut short and not run a second time yet, or cut short the second
    /// time too), and that never runs again now. Only a handle of
    /// [`Leases::claim_slot`] gives one up.
    #[must_use]
    pub fn superseded(&self) -> Option<&Unfinished> {
        self.state.superseded.as_ref()
    }

    /// Whether the lease is known lost: a renewal found it gone, or none
    /// succeeded before the local deadline. Only holding learns of a loss, so
    /// a handle never held is never lost.
    #[must_use]
    pub fn lost(&self) -> bool {
        self.state.lost.load(Ordering::SeqCst)
    }

    /// The coordinator this handle was claimed through.
    #[must_use]
    pub fn leases(&self) -> &Leases {
        &self.state.leases
    }

    /// When the claim was sent, by the monotonic clock: the claim counts as
    /// the first renewal attempt.
    #[must_use]
    pub fn claimed_at(&self) -> Instant {
        self.state.claimed_at
    }

    /// The holder token of this claim: 32 hex digits, new for every claim.
    /// Backends read it to run the verify statement inside their guarded
    /// transactions. It is what proves holding the name: never log it.
    #[must_use]
    pub fn holder(&self) -> &str {
        &self.state.holder
    }

    /// Marks the lease known lost. Called by the holder that learns of the
    /// loss, before it tells the work.
    pub(crate) fn mark_lost(&self) {
        self.state.lost.store(true, Ordering::SeqCst);
    }

    /// Extends the lease by the lease duration from the database's now.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] with [`LostCause::NotHolder`] when the lease expired
    /// (claimed by someone else since, or not yet) or was released; any other
    /// error means the database could not answer, which is not yet a loss:
    /// a holder keeps trying until its local deadline.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped renewal either extended the lease or did not.
    pub async fn renew(&self) -> Result<()> {
        self.renew_within(self.state.leases.timings().statement_timeout())
            .await
            .map(drop)
    }

    /// [`renew`](Handle::renew), bounded by `bound` instead of the statement
    /// timeout.
    /// The database's now at the renewal, in UTC milliseconds.
    pub(crate) async fn renew_within(&self, bound: Duration) -> Result<i64> {
        let name = &self.state.name;
        let started = Instant::now();
        let renewed = self.renew_bounded(bound).await;
        let outcome = match &renewed {
            Ok(Some(_)) => "renewed",
            Ok(None) => "lost",
            Err(_) => "error",
        };
        crate::metrics::renewal(outcome, started.elapsed());
        renewed?.ok_or_else(|| Error::lost(name, LostCause::NotHolder))
    }

    async fn renew_bounded(&self, bound: Duration) -> Result<Option<i64>> {
        let leases = &self.state.leases;
        let (name, holder) = (&self.state.name, &self.state.holder);
        let renewed = match leases.batcher() {
            Some(batcher) => {
                let renew = batcher.renew(name, holder);
                bounded(&**leases.store(), Op::Renew, Some(name), bound, renew).await?
            }
            None => {
                let renew = leases
                    .store()
                    .renew(name, holder, leases.timings().lease_ms());
                bounded(&**leases.store(), Op::Renew, Some(name), bound, renew).await?
            }
        };
        Ok(renewed)
    }

    /// Checks with the database that this holder still holds the name, and
    /// returns the term. The transaction guards of the backends run the same
    /// statement as the first of a guarded transaction.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] with [`LostCause::NotHolder`] when the name was taken,
    /// released, or expired with no one to take it yet; [`Error::Database`]
    /// or [`Error::Timeout`] when the database does not answer.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn verify(&self) -> Result<u64> {
        let leases = &self.state.leases;
        let term = leases
            .bounded(
                Op::Verify,
                Some(&self.state.name),
                leases.store().verify(&self.state.name, &self.state.holder),
            )
            .await?;
        term.ok_or_else(|| Error::lost(&self.state.name, LostCause::NotHolder))
    }

    /// Gives the name up at once instead of letting the lease run out, so the
    /// next claimant need not wait.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when the lease was already gone: the work it protected
    /// is done either way, so a caller logs it and moves on.
    /// [`Error::Database`] or [`Error::Timeout`] when the database does not
    /// answer; the lease then runs out by itself.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped release either freed the name or did not.
    pub async fn release(&self) -> Result<()> {
        let leases = &self.state.leases;
        let released = leases
            .bounded(
                Op::Release,
                Some(&self.state.name),
                leases.store().release(&self.state.name, &self.state.holder),
            )
            .await?;
        if released {
            tracing::debug!(name = ?self.state.name, term = self.state.term, "lease released");
            Ok(())
        } else {
            Err(Error::lost(&self.state.name, LostCause::NotHolder))
        }
    }

    /// Records that the round for the instant this handle was claimed for ran
    /// to its end, so the instant never runs again, and gives the name back
    /// the way [`release`](Handle::release) does.
    ///
    /// `passed` is the last instant of the round's schedule to have come by
    /// the time the round ended. When it is later than the round's own
    /// instant, the round overran the instants up to it: none of them was
    /// claimed (the round's lease refused every claim while it held the
    /// name), and the record takes `passed` along as the last instant on
    /// record, so they stay skipped, every later claim of them refused. An
    /// instant the database clock has yet to reach is not taken along, so a
    /// caller whose clock runs ahead does not skip an instant the other
    /// replicas are still to claim.
    ///
    /// When the name is no longer this holder's the end is recorded all the
    /// same, unless a later instant has been claimed since, and `passed` is
    /// not taken along: other replicas may have claimed the name meanwhile.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when the name was no longer this holder's, so it was
    /// not given back; not when the handle is known [`lost`](Handle::lost),
    /// in which case giving it back is not tried. [`Error::NoInstant`] for a
    /// handle of [`Leases::claim`]. [`Error::Database`] or [`Error::Timeout`]
    /// when the database does not answer.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped finish either recorded the end or did not.
    pub async fn finish(&self, passed: UtcMillis) -> Result<()> {
        let state = &self.state;
        let Some(slot) = state.slot else {
            return Err(Error::NoInstant {
                name: state.name.clone(),
            });
        };
        let known_lost = self.lost();
        let holder = (!known_lost).then_some(state.holder.as_str());
        let finished = state
            .leases
            .bounded(
                Op::Finish,
                Some(&state.name),
                state.leases.store().finish(
                    &state.name,
                    holder,
                    slot.as_millis(),
                    passed.as_millis(),
                ),
            )
            .await?;
        tracing::debug!(
            name = ?state.name,
            term = state.term,
            slot = slot.as_millis(),
            outcome = ?finished,
            "round finished"
        );
        match finished {
            Finished::Released => Ok(()),
            Finished::RecordedWithoutLease | Finished::NotRecorded if known_lost => Ok(()),
            Finished::RecordedWithoutLease | Finished::NotRecorded => {
                Err(Error::lost(&state.name, LostCause::NotHolder))
            }
        }
    }
}

/// An instant claimed under a scheduler's name whose round has not run to its
/// end: the process running it shut down or died, or its lease was lost,
/// before the round returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unfinished {
    /// The name the instant was claimed under.
    pub name: String,
    /// The instant.
    pub slot: UtcMillis,
    /// Whether the instant had been claimed a second time already, and that
    /// round was cut short too. [`Leases::unfinished_slots`] never returns
    /// such an instant.
    pub rerun: bool,
    /// The term found: a second claim must find it unchanged.
    term: u64,
}

impl Unfinished {
    /// The term the lease had when the instant was found: a second claim
    /// succeeds only if the name has not changed hands since.
    #[must_use]
    pub fn term(&self) -> u64 {
        self.term
    }
}
