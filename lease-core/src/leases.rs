//! The coordinator: [`Leases`].

use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::time::Instant;

use crate::batch::Batcher;
use crate::error::{BoxError, Error, Op, Result};
use crate::handle::{Claimed, Handle};
use crate::info::LeaseInfo;
use crate::name::validate_name;
use crate::run::FailHook;
use crate::store::{ClaimRequest, InstantClaim, LeaseStore, Unfinished};
use crate::time::UtcMillis;
use crate::timings::Timings;
use crate::token::{Token, default_instance, new_token, validate_instance};

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
    /// Why the timings are out of step with the store's bounds, when they
    /// are: every claim refuses with it (see [`Leases::with_timings`]).
    out_of_step: Option<String>,
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
    /// A coordinator on `store`, with the store's timings (those its
    /// server-side bounds came from: see [`LeaseStore::timings`]; the
    /// defaults for a store that has none) and this process's
    /// [`instance_id`](crate::instance_id) (or `LEASE_INSTANCE`: see
    /// [`with_instance`](Self::with_instance)).
    pub fn new<S: LeaseStore>(store: S) -> Self {
        Self::from_arc(Arc::new(store))
    }

    /// A coordinator on a store shared as `Arc<dyn LeaseStore>`, for a
    /// program that picks its database at run time.
    pub fn from_arc(store: Arc<dyn LeaseStore>) -> Self {
        let timings = store.timings().unwrap_or_default();
        Leases {
            shared: Arc::new(Shared {
                store,
                instance: default_instance(),
                timings,
                out_of_step: None,
                fail_hook: FailHook::default(),
                batching: false,
                batcher: Arc::default(),
            }),
        }
    }

    /// The same coordinator with other timings.
    ///
    /// The store's server-side bounds (statement timeout, lock wait, idle
    /// guarded transactions) were set when it was built, from the timings
    /// its builder was given ([`LeaseStore::timings`]). A store whose bounds
    /// outlast these timings' would keep a statement going at the server
    /// after this coordinator gave up on it, so such a coordinator refuses
    /// every claim with [`Error::TimingsOutOfStep`], which says which bound
    /// outlasts which ([`Timings::bounds_outlast`]). Build the store with the
    /// same timings (each backend's builder has `with_timings`, and
    /// `dblease::connect_with` does both), or leave them out here:
    /// [`Leases::new`] takes the store's. A store with bounds within these
    /// timings' (the server gives up first) or with none of its own is
    /// never refused.
    ///
    /// ```
    /// use std::time::Duration;
    /// # use lease_core::{Error, Leases, LeaseStore, Timings};
    /// # async fn example(store: std::sync::Arc<dyn LeaseStore>) -> lease_core::Result<()> {
    /// // A store built with the default timings, a coordinator with a
    /// // shorter deadline: its claims refuse, naming the bounds.
    /// let fast = Timings::builder()
    ///     .lease(Duration::from_secs(3))
    ///     .renew(Duration::from_millis(250))
    ///     .deadline(Duration::from_secs(2))
    ///     .grace(Duration::from_millis(500))
    ///     .build()?;
    /// let leases = Leases::from_arc(store).with_timings(fast);
    /// match leases.claim("lock:report").await {
    ///     Err(Error::TimingsOutOfStep { reason }) => eprintln!("{reason}"),
    ///     other => { let _ = other?; }
    /// }
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn with_timings(self, timings: Timings) -> Self {
        let out_of_step = self
            .shared
            .store
            .timings()
            .and_then(|store| store.bounds_outlast(&timings));
        if let Some(reason) = &out_of_step {
            tracing::error!(
                reason = %reason,
                "lease timings out of step with the store's server-side bounds: every claim \
                 will refuse"
            );
        }
        let mut leases = self.with_timings_unchecked(timings);
        Arc::make_mut(&mut leases.shared).out_of_step = out_of_step;
        leases
    }

    /// [`with_timings`](Self::with_timings) without comparing the timings
    /// with the store's server-side bounds: for tests that run coordinators
    /// of several timings over one store (the conformance suite's short
    /// leases on a store built with the defaults), where a statement left
    /// running at the server after its coordinator gave up is understood.
    #[must_use]
    pub fn with_timings_unchecked(mut self, timings: Timings) -> Self {
        let shared = Arc::make_mut(&mut self.shared);
        shared.timings = timings;
        shared.out_of_step = None;
        shared.batcher = Arc::default();
        self
    }

    /// [`Error::TimingsOutOfStep`] when this coordinator's timings are out
    /// of step with its store's bounds: what every claim checks first.
    fn in_step(&self) -> Result<()> {
        match &self.shared.out_of_step {
            Some(reason) => Err(Error::TimingsOutOfStep {
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
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
    pub(crate) fn batcher(&self) -> Option<&Batcher> {
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
    /// `instance` column, `lease ls` and the logs show of this process, for
    /// a person to tell the replicas apart (`web-1`, a pod's name). It is
    /// never a credential: each claim's holder token is.
    ///
    /// Without it a coordinator takes the environment variable
    /// `LEASE_INSTANCE` ([`INSTANCE_VAR`](crate::INSTANCE_VAR)) when it is
    /// set, and otherwise [`instance_id`](crate::instance_id), the host
    /// name and the process id (`web-1:4242`). A `LEASE_INSTANCE` that this
    /// method would refuse is not used: the default stands in, with a
    /// warning.
    ///
    /// ```
    /// # fn example(leases: lease_core::Leases) -> lease_core::Result<()> {
    /// let leases = leases.with_instance("web-1")?;
    /// assert_eq!(leases.instance(), "web-1");
    /// assert!(leases.clone().with_instance("web-1\nFORGED").is_err());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInstance`] for an empty id, one longer than
    /// [`MAX_INSTANCE_CHARS`](crate::MAX_INSTANCE_CHARS) (the `instance`
    /// column of MySQL), or one with a control character (a newline or an
    /// escape sequence would forge log lines and terminal output). The
    /// instance id is logged escaped, as `Debug` formats it, so what
    /// remains allowed (quotes, spaces) cannot forge a field either.
    pub fn with_instance(mut self, instance: impl Into<String>) -> Result<Self> {
        let instance = instance.into();
        validate_instance(&instance, "Leases::with_instance")?;
        Arc::make_mut(&mut self.shared).instance = instance;
        Ok(self)
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
    /// Each claim mints a new token; the handle's
    /// [`term`](Handle::term) is one more than the last holder's.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] before any SQL for an empty or over-long name;
    /// [`Error::TimingsOutOfStep`] before any SQL when the coordinator's
    /// timings are out of step with the store's bounds (see
    /// [`with_timings`](Self::with_timings)); [`Error::Database`] or
    /// [`Error::Timeout`] when the database does not answer.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the name claimed by a token nobody
    /// knows; it is then free again when the lease expires.
    pub async fn claim(&self, name: &str) -> Result<Option<Handle>> {
        validate_name(name)?;
        self.in_step()?;
        let token = new_token()?;
        let sent = Instant::now();
        let claimed = self
            .bounded(
                Op::Claim,
                Some(name),
                self.shared.store.claim(ClaimRequest {
                    name,
                    token: Token::new(&token),
                    instance: &self.shared.instance,
                    lease_ms: self.shared.timings.lease_ms(),
                }),
            )
            .await;
        crate::metrics::claim(name, claim_outcome(&claimed, Option::is_some));
        let claimed = claimed?;
        Ok(claimed.map(|term| {
            tracing::debug!(name, term, instance = ?self.shared.instance, "lease claimed");
            self.handle(name, token, term, sent, None, None)
        }))
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
    /// and it steps down ([`LostCause::NotHolder`](crate::LostCause::NotHolder)), its work's context
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

    /// Asks whoever holds `name` now to resign: gracefully, unlike
    /// [`force_release`](Leases::force_release). The request is recorded in
    /// the lease's row for the holder's current term only; the holder learns
    /// of it with its next renewal (within one renew interval, at no extra
    /// round trip), its work's context ends with [`EndCause::Resigned`]
    /// (not a loss: the renewals go on while the work winds down), and once
    /// the work has returned the name is given back, for a follower to take
    /// at the next term. A [`Leader`](crate::Leader) then sits out one
    /// campaign attempt, so that another replica leads; a
    /// [`Lock`](crate::Lock)'s run returns the work's output; a scheduler's
    /// round is cut short, and runs again once elsewhere.
    ///
    /// Returns the term asked to resign, or `None` when nobody holds the
    /// name. Two statements: [`get`](Leases::get), then
    /// [`request_resign_at`](Leases::request_resign_at) that term (read
    /// again, up to three times, should the name change hands between the
    /// two).
    ///
    /// ```
    /// # async fn example(leases: lease_core::Leases) -> lease_core::Result<()> {
    /// // Before maintenance: move the leadership off whichever node has it.
    /// match leases.request_resign("leader:billing").await? {
    ///     Some(term) => println!("the leader at term {term} will step down"),
    ///     None => println!("nobody leads now"),
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
    /// Cancel safe: a dropped call either recorded the request or did not.
    ///
    /// [`EndCause::Resigned`]: crate::EndCause::Resigned
    pub async fn request_resign(&self, name: &str) -> Result<Option<u64>> {
        for _ in 0..3 {
            let Some(info) = self.get(name).await?.filter(LeaseInfo::held) else {
                return Ok(None);
            };
            if self.request_resign_at(name, info.term).await? {
                return Ok(Some(info.term));
            }
        }
        Ok(None)
    }

    /// Asks the holder of `name` to resign if its term is still `term` (read
    /// with [`get`](Leases::get) just before) and it is held: see
    /// [`request_resign`](Leases::request_resign). Returns whether the
    /// holder at `term` is asked; `false` when the name changed hands since
    /// (a later holder is never asked), or is free. One statement.
    ///
    /// ```
    /// # async fn example(leases: lease_core::Leases) -> lease_core::Result<()> {
    /// if let Some(info) = leases.get("lock:report").await? {
    ///     if leases.request_resign_at("lock:report", info.term).await? {
    ///         println!("asked {} to resign", info.instance);
    ///     }
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
    /// Cancel safe: a dropped call either recorded the request or did not.
    pub async fn request_resign_at(&self, name: &str, term: u64) -> Result<bool> {
        validate_name(name)?;
        let asked = self
            .bounded(
                Op::RequestResign,
                Some(name),
                self.shared.store.request_resign(name, term),
            )
            .await;
        crate::metrics::resign_request(match &asked {
            Ok(true) => "asked",
            Ok(false) => "not_held",
            Err(_) => "error",
        });
        let asked = asked?;
        if asked {
            tracing::info!(name = ?name, term, "resign requested");
        }
        Ok(asked)
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

    /// Claims the instant `instant` of a scheduler's job under `name`: the name
    /// must be free and `instant` later than the last instant on record under it
    /// (the last claimed, or the last a round that ran to its end took along,
    /// see [`Handle::finish`]). The claim records `instant` as the last instant
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
    /// instant not after the UNIX epoch; [`Error::TimingsOutOfStep`] (see
    /// [`claim`](Self::claim)); [`Error::Database`] or [`Error::Timeout`]
    /// when the database does not answer.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the instant claimed by a token nobody
    /// knows: it then counts as a round cut short, and runs again once.
    pub async fn claim_instant(&self, name: &str, instant: UtcMillis) -> Result<Option<Handle>> {
        validate_name(name)?;
        self.in_step()?;
        if instant.as_millis() <= 0 {
            return Err(Error::InvalidInstant {
                name: name.to_owned(),
                reason: "an instant must be after the UNIX epoch",
            });
        }
        let token = new_token()?;
        let sent = Instant::now();
        let outcome = self
            .bounded(
                Op::ClaimInstant,
                Some(name),
                self.store().claim_instant(
                    ClaimRequest {
                        name,
                        token: Token::new(&token),
                        instance: self.instance(),
                        lease_ms: self.timings().lease_ms(),
                    },
                    instant.as_millis(),
                ),
            )
            .await;
        crate::metrics::claim(
            name,
            claim_outcome(&outcome, |o| matches!(o, InstantClaim::Claimed { .. })),
        );
        let outcome = outcome?;
        Ok(match outcome {
            InstantClaim::Refused => None,
            InstantClaim::Claimed { term, superseded } => {
                tracing::debug!(
                    name,
                    term,
                    instant = instant.as_millis(),
                    superseded = superseded.as_ref().map(|u| u.instant.as_millis()),
                    instance = ?self.instance(),
                    "instant claimed"
                );
                Some(self.handle(name, token, term, sent, Some(instant), superseded))
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
    pub async fn unfinished_instants<S: AsRef<str> + Sync>(
        &self,
        names: &[S],
    ) -> Result<Vec<Unfinished>> {
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
                self.store().find_unfinished(&unique),
            )
            .await?;
        Ok(rows)
    }

    /// Claims `u`'s instant a second time, `u` as
    /// [`unfinished_instants`](Leases::unfinished_instants) found it: a handle when
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
    /// [`Error::TimingsOutOfStep`] (see [`claim`](Self::claim));
    /// [`Error::Database`] or [`Error::Timeout`] when the database does not answer.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the instant claimed a second time by a
    /// token nobody knows: it is then unfinished for good.
    pub async fn claim_rerun(&self, u: &Unfinished) -> Result<Option<Handle>> {
        validate_name(&u.name)?;
        self.in_step()?;
        let token = new_token()?;
        let sent = Instant::now();
        let claimed = self
            .bounded(
                Op::ClaimRerun,
                Some(&u.name),
                self.store().claim_rerun(
                    ClaimRequest {
                        name: &u.name,
                        token: Token::new(&token),
                        instance: self.instance(),
                        lease_ms: self.timings().lease_ms(),
                    },
                    u.term(),
                ),
            )
            .await;
        crate::metrics::claim(&u.name, claim_outcome(&claimed, |c| *c));
        let claimed = claimed?;
        Ok(claimed.then(|| {
            let term = u.term() + 1;
            tracing::debug!(
                name = ?u.name,
                term,
                instant = u.instant.as_millis(),
                instance = ?self.instance(),
                "instant claimed a second time"
            );
            self.handle(&u.name, token, term, sent, Some(u.instant), None)
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
    pub async fn last_instant(&self, name: &str) -> Result<Option<UtcMillis>> {
        validate_name(name)?;
        let last = self
            .bounded(Op::LastInstant, Some(name), self.store().last_instant(name))
            .await?;
        Ok(last.filter(|&ms| ms != 0).map(UtcMillis::from_millis))
    }

    /// The handle of a claim of `name` with `token`, sent at `sent`.
    pub(crate) fn handle(
        &self,
        name: &str,
        token: String,
        term: u64,
        sent: Instant,
        instant: Option<UtcMillis>,
        superseded: Option<Unfinished>,
    ) -> Handle {
        Handle::new(
            self,
            Claimed {
                name,
                token,
                term,
                sent,
                instant,
                superseded,
            },
        )
    }

    /// Runs one store call under the statement timeout, naming the operation
    /// and the lease in any error.
    pub(crate) async fn bounded<T>(
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
pub(crate) fn claim_outcome<T>(result: &Result<T>, claimed: impl Fn(&T) -> bool) -> &'static str {
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::error::Error;
    use crate::forward::ForwardingStore;
    use crate::memory::MemoryStore;
    use crate::store::LeaseStore;
    use crate::time::UtcMillis;
    use crate::timings::Timings;

    use super::Leases;

    /// A store whose server-side bounds came from `timings` (as a backend
    /// built with `with_timings` reports), over the reference store.
    #[derive(Debug)]
    struct Bounded {
        inner: MemoryStore,
        timings: Option<Timings>,
    }

    impl ForwardingStore for Bounded {
        fn inner(&self) -> &dyn LeaseStore {
            &self.inner
        }

        fn timings(&self) -> Option<Timings> {
            self.timings
        }
    }

    fn bounded(timings: Option<Timings>) -> Arc<Bounded> {
        Arc::new(Bounded {
            inner: MemoryStore::new().migrated(),
            timings,
        })
    }

    fn fast() -> Timings {
        Timings::builder()
            .lease(Duration::from_secs(3))
            .renew(Duration::from_millis(250))
            .deadline(Duration::from_secs(2))
            .grace(Duration::from_millis(500))
            .build()
            .unwrap()
    }

    /// Issue 23, item 9: a coordinator whose timings are shorter than its
    /// store's bounds refuses every claim, before any statement, naming
    /// the bounds; the store's own timings (taken by `Leases::new`), longer
    /// ones and unchecked ones claim.
    #[tokio::test]
    async fn timings_out_of_step_with_the_stores_bounds_refuse_every_claim() {
        let store = bounded(Some(Timings::default()));
        let leases = Leases::from_arc(store.clone());
        assert_eq!(leases.timings(), &Timings::default(), "the store's timings");

        let out = leases.clone().with_timings(fast());
        for refused in [
            out.claim("job").await.map(|_| ()),
            out.claim_instant("cron:job", UtcMillis::from_millis(60_000))
                .await
                .map(|_| ()),
        ] {
            match refused {
                Err(Error::TimingsOutOfStep { reason }) => {
                    assert!(reason.contains("statement timeout 5s > 1s"), "{reason}");
                }
                other => panic!("expected TimingsOutOfStep, got {other:?}"),
            }
        }
        assert!(
            store.get("job").await.unwrap().is_none(),
            "a refused coordinator sends nothing"
        );
        let err = out.claim("job").await.unwrap_err();
        assert!(!err.is_retryable(), "{err:?}");
        assert!(err.to_string().contains("with_timings"), "{err}");

        // The store's own timings, longer ones, and unchecked ones claim.
        let slow = Timings::builder()
            .lease(Duration::from_secs(60))
            .deadline(Duration::from_secs(40))
            .build()
            .unwrap();
        for ok in [
            leases.clone(),
            leases.clone().with_timings(slow),
            leases
                .clone()
                .with_timings(fast())
                .with_timings(Timings::default()),
            leases.clone().with_timings_unchecked(fast()),
        ] {
            let h = ok.claim("ok").await.unwrap().expect("a free name");
            h.release().await.unwrap();
        }
        // A store with no bounds of its own takes any timings.
        let free = Leases::from_arc(bounded(None)).with_timings(fast());
        assert_eq!(free.timings(), &fast());
        assert!(free.claim("job").await.unwrap().is_some());
    }

    /// A store built with timings gives them to the coordinator on it.
    #[test]
    fn a_coordinator_takes_its_stores_timings() {
        let leases = Leases::from_arc(bounded(Some(fast())));
        assert_eq!(leases.timings(), &fast());
        assert_eq!(
            Leases::from_arc(bounded(None)).timings(),
            &Timings::default()
        );
    }
}
