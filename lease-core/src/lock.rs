//! A lock for the span of a call: run this only if no other replica is.

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::capability::{Expiry, GaveBack, jitter, release_detached};
use crate::context::LeaseContext;
use crate::error::{Error, LostCause};
use crate::handle::Handle;
use crate::info::LeaseInfo;
use crate::leases::Leases;
use crate::name::validate_name;

/// The prefix of every lock's name: `leases.lock("report")` holds
/// `lock:report`, as in the Go package the protocol comes from.
pub const LOCK_PREFIX: &str = "lock:";

impl Leases {
    /// The lock `lock:<name>`: run a call only if no other replica is running
    /// it, with the lease held (renewed) for the whole call.
    ///
    /// Nothing is claimed until [`Lock::try_run`] (or a waiting form) is
    /// called; the name is checked then.
    ///
    /// ```
    /// # async fn example(leases: lease_core::Leases) -> Result<(), Box<dyn std::error::Error>> {
    /// let report = leases.lock("nightly-report");
    /// match report.try_run(|ctx| async move {
    ///     // ... the work; stamp ctx.term() on what leaves the database ...
    ///     42
    /// }).await {
    ///     Ok(rows) => println!("wrote {rows} rows"),
    ///     Err(e) if e.is_held() => println!("another replica is on it: {e}"),
    ///     Err(e) => return Err(e.into()),
    /// }
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn lock(&self, name: &str) -> Lock {
        Lock {
            leases: self.clone(),
            name: format!("{LOCK_PREFIX}{name}"),
            cancel: CancellationToken::new(),
        }
    }
}

/// A lock for the span of a call, from [`Leases::lock`].
///
/// # What it guarantees
///
/// While the database answers, at most one replica runs the work of a lock
/// at a time: the work runs only after a claim of `lock:<name>` succeeded,
/// under a lease kept renewed for as long as it runs ([`Handle::hold`]), and
/// the name is given back as soon as it returns. When the lease is lost
/// while the work runs (renewals could not reach the database before the
/// local deadline, or found the name taken), the work's context ends, it has
/// the grace to return, and the call reports [`LockError::Lost`] **even if
/// the work returned successfully**: another replica may have run the same
/// work meanwhile, and the caller must know.
///
/// # What it does not
///
/// A process that is frozen (a stop-the-world pause, `SIGSTOP`) cannot notice
/// anything: its successor may start once the lease expired by the
/// database's clock. Writes to the same database are fenced by the backends'
/// guarded transactions (they verify the lease first and refuse once it is
/// lost); for anything outside the database, stamp the term
/// ([`LeaseContext::term`]) on what the work writes and have the other side
/// refuse a term lower than one it has seen.
///
/// # Logs
///
/// | event | level | fields |
/// | --- | --- | --- |
/// | `lock taken` | debug | `name`, `term`, `instance` |
/// | `lock held elsewhere` | debug | `name`, `held_by` (instance), `term` |
/// | `lock lost while its work ran` | warn | `name`, `term`, `cause` |
/// | `waiting for the lock: the database did not answer` | warn | `name`, `error` |
#[derive(Clone)]
pub struct Lock {
    leases: Leases,
    name: String,
    cancel: CancellationToken,
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.name)
            .field("cancelled", &self.cancel.is_cancelled())
            .finish_non_exhaustive()
    }
}

impl Lock {
    /// The name claimed: `lock:<name>`.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The same lock, whose work's context also ends when `token` is
    /// cancelled (the process shutting down), and whose waiting forms stop
    /// waiting then ([`LockError::Cancelled`]). A cancellation is not a loss:
    /// the lease stays held while the work winds down, and is given back
    /// once it returns.
    #[must_use]
    pub fn with_cancellation(mut self, token: &CancellationToken) -> Self {
        self.cancel = token.clone();
        self
    }

    /// Who holds the lock now, as the database sees it: `None` when nobody
    /// does. One statement.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`], [`Error::Database`] or [`Error::Timeout`].
    pub async fn held_by(&self) -> crate::Result<Option<LeaseInfo>> {
        Ok(self.leases.get(&self.name).await?.filter(LeaseInfo::held))
    }

    /// Runs `work` if the lock is free, without waiting: claims it, keeps it
    /// renewed while `work` runs on its own task ([`crate::run`]), then gives
    /// it back and returns what `work` returned.
    ///
    /// The work receives the [`LeaseContext`]: it ends when the lease is lost
    /// (or the cancellation of [`with_cancellation`](Lock::with_cancellation)
    /// fires, or the holder is asked to resign:
    /// [`Leases::request_resign`], [`EndCause::Resigned`](crate::EndCause::Resigned),
    /// no loss: the lease is kept while the work winds down and the call
    /// returns its output), carries the term, and is what the guarded
    /// transactions of the backends take.
    ///
    /// # Errors
    ///
    /// - [`LockError::Held`] when another replica holds the lock, saying who
    ///   (instance, term, time left) when the database could tell: an HTTP
    ///   handler can answer 409 with it;
    /// - [`LockError::Lost`] when the lease was lost while the work ran, with
    ///   the work's output when it returned (within the grace), even a
    ///   successful one: another replica may have started the same work;
    /// - [`LockError::Lease`] for the rest: an invalid name, the database not
    ///   answering the claim ([`Error::is_retryable`]), or the work panicking
    ///   ([`Error::Panicked`], naming the lock and the panic site).
    ///
    /// The name is given back (on a call of its own, bounded by 5 s, so a
    /// caller shutting down still gives it back) unless the lease was lost; a
    /// failed release is only a warning in the log.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future aborts the work's task and stops the renewals; the
    /// name is then not given back, and runs out by itself.
    pub async fn try_run<F, Fut, T>(&self, work: F) -> Result<T, LockError<T>>
    where
        F: FnOnce(LeaseContext) -> Fut,
        Fut: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        self.run_waiting_until(Some(Instant::now()), work).await
    }

    /// Counts the call's outcome in `lease_lock_runs_total`.
    fn counted<T>(result: Result<T, LockError<T>>) -> Result<T, LockError<T>> {
        crate::metrics::lock_run(match &result {
            Ok(_) => "ran",
            Err(LockError::Held { .. }) => "held",
            Err(LockError::Lost { .. }) => "lost",
            Err(_) => "error",
        });
        result
    }

    /// Runs `work` under the lock, waiting for it as long as it takes:
    /// while another replica holds it, the claim is tried again every
    /// [`retry_interval`](crate::Timings::retry_interval) plus a random
    /// quarter of it, until it succeeds or the cancellation of
    /// [`with_cancellation`](Lock::with_cancellation) fires. For jobs that
    /// must run, but one at a time. A database that does not answer is
    /// waited out the same way (logged as a warning).
    ///
    /// When the holder's lease runs out (by the database's clock) before
    /// the next try would come, the claim is tried again 10 to 20 ms after
    /// the expiry instead: a holder that died is replaced within its lease
    /// and a few milliseconds, not its lease plus a retry interval. To know
    /// the expiry, a refused claim reads the lock's row (one more
    /// statement), but only when the expiry it read last may come before
    /// the next try: with a live holder renewing, about once per lease.
    ///
    /// # Errors
    ///
    /// As [`try_run`](Lock::try_run), with [`LockError::Cancelled`] when the
    /// cancellation fired before the lock was taken, and never
    /// [`LockError::Held`].
    ///
    /// # Cancel safety
    ///
    /// As [`try_run`](Lock::try_run); while still waiting, nothing is held.
    pub async fn run_waiting<F, Fut, T>(&self, work: F) -> Result<T, LockError<T>>
    where
        F: FnOnce(LeaseContext) -> Fut,
        Fut: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        self.run_waiting_until(None, work).await
    }

    /// [`run_waiting`](Lock::run_waiting), giving up after `wait`: the claim
    /// is tried one last time when `wait` has passed, and if the lock is
    /// still held elsewhere the call returns [`LockError::Held`].
    ///
    /// # Errors
    ///
    /// As [`run_waiting`](Lock::run_waiting), and [`LockError::Held`] once
    /// `wait` passed.
    ///
    /// # Cancel safety
    ///
    /// As [`run_waiting`](Lock::run_waiting).
    pub async fn run_within<F, Fut, T>(&self, wait: Duration, work: F) -> Result<T, LockError<T>>
    where
        F: FnOnce(LeaseContext) -> Fut,
        Fut: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        self.run_waiting_until(Some(Instant::now() + wait), work)
            .await
    }

    async fn run_waiting_until<F, Fut, T>(
        &self,
        deadline: Option<Instant>,
        work: F,
    ) -> Result<T, LockError<T>>
    where
        F: FnOnce(LeaseContext) -> Fut,
        Fut: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        Self::counted(self.claim_and_run(deadline, work).await)
    }

    async fn claim_and_run<F, Fut, T>(
        &self,
        deadline: Option<Instant>,
        work: F,
    ) -> Result<T, LockError<T>>
    where
        F: FnOnce(LeaseContext) -> Fut,
        Fut: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        validate_name(&self.name)?;
        let retry = self.leases.timings().retry_interval();
        let mut expiry = Expiry::default();
        loop {
            if self.cancel.is_cancelled() {
                return Err(self.cancelled());
            }
            match self.leases.claim(&self.name).await {
                Ok(Some(handle)) => return self.run_held(handle, work).await,
                // Refused while waiting: when the holder's lease may run out
                // before the next attempt, read the row for its time left
                // (one more statement, only then), to ask at the expiry.
                Ok(None)
                    if deadline.is_none_or(|d| Instant::now() < d)
                        && expiry.wants_read(Instant::now() + retry) =>
                {
                    let info = self.leases.get(&self.name).await.ok().flatten();
                    expiry.learn(info.as_ref(), Instant::now());
                }
                Ok(None) => {}
                // The database did not answer: a waiting caller waits it
                // out; a caller that does not wait is told.
                Err(e) if e.is_retryable() && deadline.is_none_or(|d| Instant::now() < d) => {
                    expiry.forget();
                    tracing::warn!(
                        name = ?self.name,
                        error = %crate::error::Chain(&e),
                        "waiting for the lock: the database did not answer"
                    );
                }
                Err(e) => return Err(LockError::Lease(e)),
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Err(self.held().await);
            }
            let mut next = expiry.next(now + retry + jitter(retry / 4));
            if let Some(d) = deadline {
                next = next.min(d);
            }
            tokio::select! {
                biased;
                () = self.cancel.cancelled() => return Err(self.cancelled()),
                () = tokio::time::sleep_until(next) => {}
            }
        }
    }

    /// The refusal, saying who holds the lock when the database can tell.
    async fn held<T>(&self) -> LockError<T> {
        let by = self.leases.get(&self.name).await.ok().flatten();
        tracing::debug!(
            name = ?self.name,
            held_by = by.as_ref().map(|i| tracing::field::debug(&i.instance)),
            term = by.as_ref().map(|i| i.term),
            "lock held elsewhere"
        );
        LockError::Held {
            name: self.name.clone(),
            by,
        }
    }

    fn cancelled<T>(&self) -> LockError<T> {
        LockError::Cancelled {
            name: self.name.clone(),
        }
    }

    async fn run_held<F, Fut, T>(&self, handle: Handle, work: F) -> Result<T, LockError<T>>
    where
        F: FnOnce(LeaseContext) -> Fut,
        Fut: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        tracing::debug!(
            name = ?self.name,
            term = handle.term(),
            instance = ?self.leases.instance(),
            "lock taken"
        );
        let holder = handle.hold(&self.cancel);
        let context = holder.context().clone();
        let out = holder.run(work).await;
        holder.stop().await;
        let cause = if handle.lost() {
            context.lost_cause().unwrap_or(LostCause::NotHolder)
        } else if release_detached(&handle).await == GaveBack::AlreadyGone {
            // The renewals never saw it, but the name was no longer this
            // holder's when the work ended (released by force, or run out
            // after the last renewal): another replica may have run the
            // same work meanwhile. As much a loss as one seen by a renewal.
            LostCause::NotHolder
        } else {
            return out.map_err(LockError::Lease);
        };
        tracing::warn!(
            name = ?self.name,
            term = handle.term(),
            %cause,
            "lock lost while its work ran"
        );
        match out {
            Ok(output) => Err(LockError::Lost {
                name: self.name.clone(),
                cause,
                output: Some(output),
            }),
            Err(e) if e.is_lost() => Err(LockError::Lost {
                name: self.name.clone(),
                cause,
                output: None,
            }),
            Err(e) => Err(LockError::Lease(e)),
        }
    }
}

/// Why a [`Lock`] call did not return its work's output as it is.
///
/// `T` is the work's output, kept in [`LockError::Lost`] so that nothing the
/// work did is thrown away.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum LockError<T> {
    /// Another replica holds the lock.
    #[error("{}", HeldDisplay { name, by: by.as_ref() })]
    Held {
        /// The lock's name (`lock:<name>`).
        name: String,
        /// Who holds it, as read right after the refused claim; `None` when
        /// the read failed.
        by: Option<LeaseInfo>,
    },
    /// The lease was lost while the work ran: another replica may have
    /// started the same work meanwhile.
    #[error(
        "lock {name:?} was lost while its work ran ({cause}): another replica may have run \
         the same work"
    )]
    Lost {
        /// The lock's name.
        name: String,
        /// How it was lost.
        cause: LostCause,
        /// What the work returned, when it returned within the grace of the
        /// loss (even a success); `None` when it had to be aborted.
        output: Option<T>,
    },
    /// The cancellation fired while waiting for the lock.
    #[error("stopped waiting for lock {name:?}: cancelled")]
    Cancelled {
        /// The lock's name.
        name: String,
    },
    /// An invalid name, a database that did not answer, or work that
    /// panicked.
    #[error(transparent)]
    Lease(#[from] Error),
}

impl<T> LockError<T> {
    /// Whether another replica holds the lock.
    #[must_use]
    pub fn is_held(&self) -> bool {
        matches!(self, LockError::Held { .. })
    }

    /// Whether the lease was lost while the work ran.
    #[must_use]
    pub fn is_lost(&self) -> bool {
        matches!(self, LockError::Lost { .. })
    }

    /// Whether trying again later may succeed: the lock was held, or the
    /// database did not answer.
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        match self {
            LockError::Held { .. } => true,
            LockError::Lease(e) => e.is_retryable(),
            _ => false,
        }
    }

    /// Who held the lock, for [`LockError::Held`].
    #[must_use]
    pub fn held_by(&self) -> Option<&LeaseInfo> {
        match self {
            LockError::Held { by, .. } => by.as_ref(),
            _ => None,
        }
    }

    /// The work's output, for [`LockError::Lost`] when the work returned.
    pub fn into_output(self) -> Option<T> {
        match self {
            LockError::Lost { output, .. } => output,
            _ => None,
        }
    }
}

impl<T> fmt::Debug for LockError<T> {
    /// The message and its causes on one line, as [`Error`]'s `Debug`, so
    /// that a `main` returning the error prints something a person can
    /// read. The work's output kept in [`LockError::Lost`] is not shown:
    /// `T` need not be `Debug` (take it with [`into_output`](Self::into_output)).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockError::Lease(e) => fmt::Debug::fmt(e, f),
            other => fmt::Display::fmt(other, f),
        }
    }
}

struct HeldDisplay<'a> {
    name: &'a str,
    by: Option<&'a LeaseInfo>,
}

impl fmt::Display for HeldDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.by {
            Some(info) if info.held() => write!(
                f,
                "lock {:?} is held by {:?} (term {}, {:.1?} left)",
                self.name,
                info.instance,
                info.term,
                info.time_left()
            ),
            _ => write!(
                f,
                "lock {:?} was held when claimed (it may be free now)",
                self.name
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::time::sleep;

    use super::*;
    use crate::LeaseState;
    use crate::testing::Table;

    fn setup() -> (Arc<Table>, Leases) {
        let table = Arc::new(Table::new());
        let leases = Leases::from_arc(table.clone())
            .with_instance("me")
            .unwrap()
            .with_fail_hook(|e| panic!("the fail hook was reached: {e}"));
        (table, leases)
    }

    /// What `Err(e.into())` out of a `main` returning `Box<dyn Error>`
    /// prints: one line, no struct dump.
    #[test]
    fn debug_through_a_box_is_the_message_on_one_line() {
        let lost: LockError<String> = LockError::Lost {
            name: "lock:nightly-report".into(),
            cause: LostCause::NotHolder,
            output: Some("..".into()),
        };
        let boxed: Box<dyn std::error::Error> = lost.into();
        assert_eq!(
            format!("{boxed:?}"),
            "lock \"lock:nightly-report\" was lost while its work ran (no longer this \
             holder's): another replica may have run the same work"
        );
        let held: LockError<()> = LockError::Held {
            name: "lock:x".into(),
            by: None,
        };
        assert_eq!(format!("{held:?}"), held.to_string());
        let db: LockError<()> = LockError::Lease(Error::Database {
            op: crate::Op::Claim,
            name: Some("lock:x".into()),
            kind: crate::DbErrorKind::Connection,
            source: "connection reset".into(),
        });
        assert_eq!(
            format!("{db:?}"),
            r#"claim of lease "lock:x" failed (connection failed): connection reset"#
        );
    }

    #[tokio::test(start_paused = true)]
    async fn free_lock_runs_the_work_under_the_prefixed_name_then_gives_it_back() {
        let (table, leases) = setup();
        let lock = leases.lock("report");
        assert_eq!(lock.name(), "lock:report");
        let out = lock
            .try_run(|ctx| async move {
                assert_eq!(ctx.handle().name(), "lock:report");
                // Long past the lease: the renewals keep it.
                sleep(Duration::from_secs(40)).await;
                assert!(!ctx.is_cancelled());
                ctx.term()
            })
            .await;
        assert_eq!(out.unwrap(), 1);
        let info = table.info("lock:report").unwrap();
        assert_eq!(info.state(), LeaseState::Released, "given back: {info:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn held_lock_is_refused_at_once_saying_who_holds_it() {
        let (table, leases) = setup();
        let _ = table.steal("lock:report", "web-2", 15_000);
        let ran = AtomicUsize::new(0);
        let started = Instant::now();
        let err = leases
            .lock("report")
            .try_run(|_| {
                let _ = ran.fetch_add(1, Ordering::SeqCst);
                async {}
            })
            .await
            .unwrap_err();
        assert_eq!(started.elapsed(), Duration::ZERO, "try_run never waits");
        assert_eq!(ran.load(Ordering::SeqCst), 0, "the work must not run");
        assert!(err.is_held() && err.is_retryable(), "{err:?}");
        let by = err.held_by().expect("who holds it");
        assert_eq!((by.instance.as_str(), by.term), ("web-2", 1));
        assert_eq!(by.time_left(), Duration::from_secs(15));
        assert_eq!(
            err.to_string(),
            r#"lock "lock:report" is held by "web-2" (term 1, 15.0s left)"#
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_lock_released_by_force_after_its_last_renewal_is_lost_though_the_work_succeeded() {
        let (table, leases) = setup();
        let t = table.clone();
        let err = leases
            .lock("report")
            .try_run(|ctx| async move {
                // Before the first renewal (due at 2 s), an operator frees
                // the name: the renewals never learn of it.
                sleep(Duration::from_millis(500)).await;
                let term = ctx.term();
                assert!(
                    crate::LeaseStore::force_release(&*t, "lock:report", term)
                        .await
                        .unwrap()
                );
                sleep(Duration::from_millis(300)).await;
                assert!(!ctx.is_cancelled(), "no renewal ran since");
                Ok::<u32, String>(7)
            })
            .await
            .unwrap_err();
        assert!(err.is_lost(), "{err:?}");
        match err {
            LockError::Lost { cause, output, .. } => {
                assert_eq!(cause, LostCause::NotHolder);
                assert_eq!(output, Some(Ok(7)), "the work's output is kept");
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn lost_during_the_work_is_an_error_even_when_the_work_succeeded() {
        let (table, leases) = setup();
        let t = table.clone();
        let err = leases
            .lock("report")
            .try_run(|ctx| async move {
                sleep(Duration::from_secs(1)).await;
                let _ = t.steal("lock:report", "web-2", 15_000);
                ctx.cancelled().await; // the next renewal finds it gone
                Ok::<u32, String>(7)
            })
            .await
            .unwrap_err();
        assert!(err.is_lost(), "{err:?}");
        assert!(matches!(
            err,
            LockError::Lost {
                cause: LostCause::NotHolder,
                ..
            }
        ));
        assert_eq!(err.into_output(), Some(Ok(7)), "the work's output is kept");
        assert_eq!(table.releases(), 0, "a lost lock is not given back");
        assert_eq!(table.info("lock:report").unwrap().instance, "web-2");
    }

    #[tokio::test(start_paused = true)]
    async fn work_that_ignores_the_loss_is_aborted_after_the_grace() {
        let (table, leases) = setup();
        let t = table.clone();
        let started = Instant::now();
        let err = leases
            .lock("report")
            .try_run(|_| async move {
                let _ = t.steal("lock:report", "web-2", 15_000);
                sleep(Duration::from_secs(3600)).await;
            })
            .await
            .unwrap_err();
        assert!(
            matches!(err, LockError::Lost { output: None, .. }),
            "{err:?}"
        );
        let grace = leases.timings().grace();
        let took = started.elapsed();
        assert!(
            took >= grace && took < grace + leases.timings().renew() * 2,
            "aborted after the grace: {took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_panic_names_the_lock_and_the_site_and_the_lock_is_given_back() {
        let (table, leases) = setup();
        let err = leases
            .lock("report")
            .try_run(|_| async move {
                panic!("boom");
            })
            .await
            .unwrap_err();
        match &err {
            LockError::Lease(Error::Panicked {
                name,
                location,
                message,
            }) => {
                assert_eq!(name, "lock:report");
                assert!(location.contains("lock.rs"), "{location}");
                assert_eq!(message, "boom");
            }
            other => panic!("expected a panic error, got {other:?}"),
        }
        assert_eq!(
            table.info("lock:report").unwrap().state(),
            LeaseState::Released
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_database_that_does_not_answer_fails_try_run_with_a_retryable_error() {
        let (table, leases) = setup();
        table.set_down(true);
        let err = leases
            .lock("report")
            .try_run(|_| async {})
            .await
            .unwrap_err();
        assert!(
            matches!(err, LockError::Lease(Error::Database { .. })),
            "{err:?}"
        );
        assert!(err.is_retryable());
    }

    #[tokio::test(start_paused = true)]
    async fn an_invalid_name_is_refused_before_any_statement() {
        let (table, leases) = setup();
        let err = leases
            .lock(&"x".repeat(300))
            .try_run(|_| async {})
            .await
            .unwrap_err();
        assert!(
            matches!(err, LockError::Lease(Error::InvalidName { .. })),
            "{err:?}"
        );
        assert!(!err.is_retryable());
        assert!(table.claims().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn run_within_retries_at_the_retry_interval_with_jitter_then_gives_up() {
        let (table, leases) = setup();
        let _ = table.steal("lock:report", "web-2", 60_000);
        let started = Instant::now();
        let err = leases
            .lock("report")
            .run_within(Duration::from_secs(20), |_| async {})
            .await
            .unwrap_err();
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(20),
            "gave up at the wait"
        );
        assert!(err.is_held(), "{err:?}");
        let times: Vec<u64> = table.claims().iter().map(|c| c.0).collect();
        let retry = 2_000;
        for pair in times.windows(2) {
            let gap = pair[1] - pair[0];
            // The last attempt is cut to the wait's end.
            if pair[1] < 20_000 {
                assert!(
                    (retry..=retry + retry / 4).contains(&gap),
                    "attempts {gap} ms apart: {times:?}"
                );
            }
        }
        assert_eq!(
            times.last(),
            Some(&20_000),
            "one last attempt at the end: {times:?}"
        );
        assert!(times.len() >= 9 && times.len() <= 11, "{times:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn run_waiting_takes_the_lock_once_its_holder_gives_it_back() {
        let (table, leases) = setup();
        let other = Leases::from_arc(table.clone())
            .with_instance("web-2")
            .unwrap();
        let theirs = other.claim("lock:report").await.unwrap().unwrap();
        let release = tokio::spawn(async move {
            sleep(Duration::from_secs(7)).await;
            theirs.release().await.unwrap();
        });
        let started = Instant::now();
        let term = leases
            .lock("report")
            .run_waiting(|ctx| async move { ctx.term() })
            .await
            .unwrap();
        release.await.unwrap();
        assert_eq!(term, 2, "the next term after the other holder's");
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_secs(7) && waited <= Duration::from_millis(9_500),
            "taken at the first attempt after the release: {waited:?}"
        );
    }

    /// Issue 25, item 2: a waiting lock whose holder died asks again just
    /// after the holder's lease runs out, not at its next retry (2 s on).
    #[tokio::test(start_paused = true)]
    async fn run_waiting_claims_just_after_a_dead_holders_lease_runs_out() {
        let (table, leases) = setup();
        let _ = table.steal("lock:report", "web-2", 1_000);
        let expires_at_ms = table.info("lock:report").unwrap().expires_at_ms;
        let started = Instant::now();
        let term = leases
            .lock("report")
            .run_waiting(|ctx| async move { ctx.term() })
            .await
            .unwrap();
        assert_eq!(term, 2);
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(1_010) && waited <= Duration::from_millis(1_020),
            "taken 10 to 20 ms after the expiry, not at the retry 2 s on: {waited:?}"
        );
        let claims: Vec<(u64, bool)> = table.claims().iter().map(|c| (c.0, c.2)).collect();
        assert_eq!(claims.len(), 2, "refused at once, then taken: {claims:?}");
        assert_eq!(claims[0], (0, false));
        // The work returned at once, and no time passed since.
        let row = table.info("lock:report").unwrap();
        assert!(
            (expires_at_ms + 10..=expires_at_ms + 20).contains(&row.now_ms),
            "claimed by the store's clock 10 to 20 ms after the expiry: {row:?}"
        );
    }

    /// `run_within` asks at the expiry too, when it comes within the wait.
    #[tokio::test(start_paused = true)]
    async fn run_within_claims_at_the_expiry_within_its_wait() {
        let (table, leases) = setup();
        let _ = table.steal("lock:report", "web-2", 3_300);
        let started = Instant::now();
        let out = leases
            .lock("report")
            .run_within(Duration::from_secs(10), |_| async { 1 })
            .await;
        assert_eq!(out.unwrap(), 1);
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(3_310) && waited <= Duration::from_millis(3_320),
            "{waited:?}"
        );
        // An expiry after the wait: the last attempt is at the wait's end,
        // and refused.
        let _ = table.steal("lock:late", "web-2", 30_000);
        let started = Instant::now();
        let err = leases
            .lock("late")
            .run_within(Duration::from_secs(5), |_| async {})
            .await
            .unwrap_err();
        assert!(err.is_held(), "{err:?}");
        assert_eq!(started.elapsed(), Duration::from_secs(5));
    }

    /// Waiting on a live holder reads the row about once per lease, not at
    /// every retry: its expiry only moves later.
    #[tokio::test(start_paused = true)]
    async fn waiting_on_a_live_holder_reads_its_row_about_once_per_lease() {
        let (table, leases) = setup();
        let other = Leases::from_arc(table.clone())
            .with_instance("web-2")
            .unwrap();
        let theirs = other.claim("lock:report").await.unwrap().unwrap();
        let shutdown = CancellationToken::new();
        let holder = theirs.hold(&shutdown);
        let release = tokio::spawn(async move {
            sleep(Duration::from_secs(45)).await;
            holder.stop().await;
            theirs.release().await.unwrap();
        });
        let started = Instant::now();
        let term = leases
            .lock("report")
            .run_waiting(|ctx| async move { ctx.term() })
            .await
            .unwrap();
        release.await.unwrap();
        assert_eq!(term, 2);
        assert!(started.elapsed() >= Duration::from_secs(45));
        let refused = table.claims().iter().filter(|c| !c.2).count();
        assert!(refused >= 17, "retried every 2 to 2.5 s: {refused}");
        // Each read finds 13 to 15 s left; the next is due once that comes
        // within a retry: 4 or 5 reads in 45 s.
        let gets = table.gets();
        assert!(
            (3..=5).contains(&gets),
            "{gets} reads for {refused} refusals"
        );
    }

    /// Issue 25, item 4: a lock's run asked to resign: the work's context
    /// ends with `Resigned`, the work winds down under the lease and its
    /// output is returned, the name is given back, and a waiting lock takes
    /// it at the next term.
    #[tokio::test(start_paused = true)]
    async fn a_run_asked_to_resign_winds_down_and_hands_the_lock_over() {
        let (table, leases) = setup();
        let other = Leases::from_arc(table.clone())
            .with_instance("web-2")
            .unwrap();
        let running = tokio::spawn(async move {
            other
                .lock("report")
                .try_run(|ctx| async move {
                    ctx.cancelled().await;
                    let cause = ctx.cause();
                    sleep(Duration::from_secs(1)).await;
                    (cause, ctx.handle().lost(), Instant::now())
                })
                .await
        });
        sleep(Duration::from_millis(100)).await;
        let waiting = tokio::spawn({
            let leases = leases.clone();
            async move {
                leases
                    .lock("report")
                    .run_waiting(|ctx| async move { (ctx.term(), Instant::now()) })
                    .await
            }
        });
        sleep(Duration::from_millis(100)).await;
        assert_eq!(leases.request_resign("lock:report").await.unwrap(), Some(1));
        let (cause, lost, ended) = running.await.unwrap().unwrap();
        assert_eq!(cause, Some(crate::EndCause::Resigned));
        assert!(!lost, "a resign is no loss");
        let (term, started) = waiting.await.unwrap().unwrap();
        assert_eq!(term, 2);
        assert!(
            started >= ended,
            "the successor started after the work ended"
        );
        assert_eq!(
            leases.request_resign("lock:report").await.unwrap(),
            None,
            "nobody holds it now"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn run_waiting_outlasts_a_database_that_does_not_answer() {
        let (table, leases) = setup();
        table.set_down(true);
        let t = table.clone();
        let up = tokio::spawn(async move {
            sleep(Duration::from_secs(9)).await;
            t.set_down(false);
        });
        let out = leases.lock("report").run_waiting(|_| async { 5 }).await;
        up.await.unwrap();
        assert_eq!(out.unwrap(), 5);
    }

    #[tokio::test(start_paused = true)]
    async fn cancelling_stops_the_wait() {
        let (table, leases) = setup();
        let _ = table.steal("lock:report", "web-2", 600_000);
        let token = CancellationToken::new();
        let cancel = token.clone();
        drop(tokio::spawn(async move {
            sleep(Duration::from_secs(5)).await;
            cancel.cancel();
        }));
        let started = Instant::now();
        let err = leases
            .lock("report")
            .with_cancellation(&token)
            .run_waiting(|_| async {})
            .await
            .unwrap_err();
        assert!(matches!(err, LockError::Cancelled { .. }), "{err:?}");
        assert_eq!(started.elapsed(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn cancelling_during_the_work_ends_its_context_but_is_no_loss() {
        let (table, leases) = setup();
        let token = CancellationToken::new();
        let cancel = token.clone();
        let out = leases
            .lock("report")
            .with_cancellation(&token)
            .try_run(|ctx| async move {
                cancel.cancel();
                ctx.cancelled().await;
                sleep(Duration::from_secs(20)).await; // winding down, still held
                "wound down"
            })
            .await;
        assert_eq!(out.unwrap(), "wound down");
        assert_eq!(
            table.info("lock:report").unwrap().state(),
            LeaseState::Released
        );
    }

    #[tokio::test(start_paused = true)]
    async fn sixteen_lockers_at_once_run_the_work_once() {
        let (table, leases) = setup();
        let ran = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for i in 0..16 {
            let leases = Leases::from_arc(table.clone())
                .with_instance(format!("r{i}"))
                .unwrap();
            let ran = ran.clone();
            tasks.push(tokio::spawn(async move {
                leases
                    .lock("report")
                    .try_run(move |_| async move {
                        let _ = ran.fetch_add(1, Ordering::SeqCst);
                        sleep(Duration::from_secs(1)).await;
                    })
                    .await
                    .map_err(|e| e.is_held())
            }));
        }
        let mut held = 0;
        for t in tasks {
            if t.await.unwrap() == Err(true) {
                held += 1;
            }
        }
        drop(leases);
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        assert_eq!(held, 15);
    }
}
