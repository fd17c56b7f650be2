//! Running work under a lease: the protocol's last line.

use std::any::Any;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::task::{JoinError, JoinHandle};
use tracing::Instrument as _;

use crate::context::LeaseContext;
use crate::error::{Chain, Error, LostCause, Result};

/// How long an aborted task has to end before its work counts as one that
/// will not stop (it blocks without yielding, so the abort cannot take
/// effect). An abort takes effect at the task's next turn on the runtime,
/// which for a task that yields is a matter of microseconds.
pub(crate) const ABORT_WAIT: Duration = Duration::from_millis(100);

/// Runs `work` on its own task under the lease `ctx` carries, and returns
/// what the work returned.
///
/// `ctx` is the context [`Handle::hold`](crate::Handle::hold) returned (or a
/// clone of it); the work receives a clone, carrying the handle and its term
/// (the Rust form of the Go package's `WithHandle` / `FromContext`), and
/// runs until it returns. It should return once the context ends.
///
/// It is the protocol's last line. The local deadline stops the renewals,
/// the context ends the work and the guarded transactions refuse to open;
/// work that ignores all three and runs on once the lease is lost would run
/// beside its successor's. So once the lease is lost the work has the grace
/// ([`Timings::grace`](crate::Timings::grace)) to return; past it, its task is
/// aborted (dropped at its next `.await`), and `run` returns
/// [`Error::Lost`]. Work that does not end even then (it blocks without
/// yielding: the abort has not taken effect within 100 ms) is logged
/// at error level in the holder's span and reaches the coordinator's fail
/// hook (see [`Leases::with_fail_hook`](crate::Leases::with_fail_hook)),
/// whose default ends the process; `run` then goes on waiting for the work,
/// so that the caller never claims again beside work of its own still
/// running.
///
/// The parent's cancellation (the process shutting down) is not a loss: `run`
/// waits for the work however long it takes, and whoever stops the process
/// bounds that wait. The renewals go on meanwhile, and a loss they find then
/// leaves the work the grace like any other loss.
///
/// # Errors
///
/// - [`Error::Panicked`] when the work panicked, naming the lease, the panic
///   site (`file:line:column`) and the message;
/// - [`Error::Lost`] when the lease was lost and the work had to be aborted
///   after the grace.
///
/// Work that returns by itself, before a loss or within its grace, has its
/// output returned unchanged: check [`Handle::lost`](crate::Handle::lost) to
/// tell. Past the grace, `run` returns [`Error::Lost`] whatever the work did
/// (unless it panicked).
///
/// # Cancel safety
///
/// Dropping the future aborts the work's task: work under a lease is never
/// left running unwatched.
///
/// # Panic sites
///
/// The standard library tells where a panic happened only to the panic hook.
/// The first call of `run` therefore installs a process-wide hook that
/// records the site of panics raised while the work is being polled, and
/// passes every panic on to the hook that was installed before it (which
/// still prints the usual message). A hook installed later that does not
/// chain to the one it replaces leaves the site unknown.
///
/// # Examples
///
/// ```
/// use lease_core::{CancellationToken, Handle};
///
/// async fn round(handle: &Handle, shutdown: &CancellationToken) -> lease_core::Result<u32> {
///     let holder = handle.hold(shutdown);
///     let steps = lease_core::run(holder.context(), |ctx| async move {
///         let _term = ctx.term(); // stamp it on whatever leaves the database
///         let mut done = 0;
///         while done < 10 && !ctx.is_cancelled() {
///             // ... one step, in a guarded transaction on `ctx` ...
///             done += 1;
///         }
///         done
///     })
///     .await;
///     holder.stop().await; // the renewals end; the name is still held
///     if !handle.lost() {
///         handle.release().await?; // the next claimant need not wait
///     }
///     steps // Err(Lost) when aborted past the grace, Err(Panicked) on a panic
/// }
/// ```
pub async fn run<F, Fut, T>(ctx: &LeaseContext, work: F) -> Result<T>
where
    F: FnOnce(LeaseContext) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    panic_site::install();
    let span = ctx.span().clone();
    let fut = work(ctx.clone());
    let task = AbortOnDrop(tokio::spawn(
        CatchPanic(Box::pin(fut)).instrument(span.clone()),
    ));
    watch(ctx, task).instrument(span).await
}

async fn watch<T>(ctx: &LeaseContext, mut task: AbortOnDrop<T>) -> Result<T> {
    let handle = ctx.handle();
    let name = handle.name();
    tokio::select! {
        biased;
        out = &mut task.0 => return settle(name, out, ctx.lost_cause(), false),
        () = ctx.lost() => {}
    }
    let grace = handle.leases().timings().grace();
    let cause = ctx.lost_cause().unwrap_or(LostCause::NotHolder);
    tracing::debug!(%cause, ?grace, "lease lost: the work has the grace to return");
    if let Ok(out) = tokio::time::timeout(grace, &mut task.0).await {
        return settle(name, out, Some(cause), false);
    }
    tracing::warn!(%cause, ?grace, "work did not return within the grace of the loss: aborting it");
    task.0.abort();
    if let Ok(out) = tokio::time::timeout(ABORT_WAIT, &mut task.0).await {
        return settle(name, out, Some(cause), true);
    }
    let error = Error::lost(name, cause);
    tracing::error!(
        %cause,
        ?grace,
        "work under a lost lease will not stop: it blocks without yielding, so even \
         aborting its task did not end it; failing"
    );
    handle.leases().fail_hook().call(&error);
    // The hook returned (a test's): wait for the work as long as the process
    // lasts, so the caller never claims again beside it.
    let out = (&mut task.0).await;
    settle(name, out, Some(cause), true)
}

/// The work's task outcome as `run` returns it. Past the grace (`lost` is
/// then the loss), the work had no more right to run: whatever it returned is
/// dropped for [`Error::Lost`], unless it panicked.
fn settle<T>(
    name: &str,
    out: std::result::Result<std::result::Result<T, Panic>, JoinError>,
    lost: Option<LostCause>,
    past_grace: bool,
) -> Result<T> {
    let lost = || Error::lost(name, lost.unwrap_or(LostCause::NotHolder));
    match out {
        Ok(Ok(_)) if past_grace => Err(lost()),
        Ok(Ok(value)) => Ok(value),
        Ok(Err(panic)) => Err(panic.into_error(name)),
        Err(join) if join.is_panic() => {
            Err(Panic::from_payload(join.into_panic(), None).into_error(name))
        }
        // Only `watch` aborts the task, after the grace.
        Err(_) => Err(lost()),
    }
}

/// Aborts the task when dropped: `run` dropped leaves no work unwatched.
struct AbortOnDrop<T>(JoinHandle<std::result::Result<T, Panic>>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A panic caught while polling the work.
struct Panic {
    location: Option<String>,
    message: String,
}

impl Panic {
    fn from_payload(payload: Box<dyn Any + Send>, location: Option<String>) -> Self {
        let message = if let Some(s) = payload.downcast_ref::<&'static str>() {
            (*s).to_owned()
        } else if let Some(s) = payload.downcast_ref::<String>() {
            s.clone()
        } else {
            "Box<dyn Any>".to_owned()
        };
        Panic { location, message }
    }

    fn into_error(self, name: &str) -> Error {
        Error::Panicked {
            name: name.to_owned(),
            location: self
                .location
                .unwrap_or_else(|| "an unknown location".to_owned()),
            message: self.message,
        }
    }
}

/// The work's future, with its panics caught where they happen, so that the
/// panic hook's record of the site is read on the thread that panicked.
struct CatchPanic<F>(Pin<Box<F>>);

impl<F: Future> Future for CatchPanic<F> {
    type Output = std::result::Result<F::Output, Panic>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = self.0.as_mut();
        match panic_site::recording(|| catch_unwind(AssertUnwindSafe(|| inner.poll(cx)))) {
            (Ok(Poll::Ready(value)), _) => Poll::Ready(Ok(value)),
            (Ok(Poll::Pending), _) => Poll::Pending,
            (Err(payload), site) => Poll::Ready(Err(Panic::from_payload(payload, site))),
        }
    }
}

/// What [`run`] does once work under a lost lease will not stop.
#[derive(Clone)]
pub(crate) struct FailHook(Arc<dyn Fn(&Error) + Send + Sync>);

impl FailHook {
    pub(crate) fn new(hook: impl Fn(&Error) + Send + Sync + 'static) -> Self {
        FailHook(Arc::new(hook))
    }

    pub(crate) fn call(&self, error: &Error) {
        (self.0)(error);
    }
}

impl Default for FailHook {
    /// Ends the process at once with a non-zero status (`SIGABRT`). Not
    /// `exit`: it runs exit handlers and flushes standard output, which the
    /// very work that will not stop may hold locked.
    fn default() -> Self {
        FailHook::new(|error| {
            tracing::error!(error = %Chain(error), "ending the process");
            std::process::abort();
        })
    }
}

impl fmt::Debug for FailHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FailHook")
    }
}

/// The record of panic sites: the one process-wide piece of `run`, because
/// the standard library tells a panic's location to the panic hook alone.
mod panic_site {
    use std::cell::{Cell, RefCell};
    use std::panic;
    use std::sync::Once;

    thread_local! {
        /// Whether the work of a `run` is being polled on this thread.
        static RECORDING: Cell<bool> = const { Cell::new(false) };
        /// The site of the last panic raised while recording.
        static SITE: RefCell<Option<String>> = const { RefCell::new(None) };
    }

    static INSTALL: Once = Once::new();

    /// Installs the hook, chained to the one before it, once per process.
    pub(super) fn install() {
        INSTALL.call_once(|| {
            let previous = panic::take_hook();
            panic::set_hook(Box::new(move |info| {
                if RECORDING.try_with(Cell::get).unwrap_or(false) {
                    if let Some(location) = info.location() {
                        let _ = SITE.try_with(|site| {
                            if let Ok(mut site) = site.try_borrow_mut() {
                                *site = Some(location.to_string());
                            }
                        });
                    }
                }
                previous(info);
            }));
        });
    }

    /// Runs `f` recording the site of a panic raised in it, and returns the
    /// site recorded, if any.
    pub(super) fn recording<R>(f: impl FnOnce() -> R) -> (R, Option<String>) {
        let outer = RECORDING.with(|r| r.replace(true));
        let result = f();
        RECORDING.with(|r| r.set(outer));
        let site = SITE.with(|site| site.borrow_mut().take());
        (result, site)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use tokio::time::{Instant, sleep};
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::state::EndCause;
    use crate::testing::{ScriptedStore, Step, after, claimed_recording, elapsed, ms, timings};

    /// Sets its flag when dropped: the work's future was dropped.
    struct Dropped(Arc<AtomicBool>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    /// The public futures and types are `Send`, so that they can be spawned.
    #[allow(dead_code)]
    fn futures_are_send(ctx: &LeaseContext, holder: crate::Holder) {
        fn send<T: Send>(_: &T) {}
        let running = run(ctx, |_| async {});
        send(&running);
        send(&holder);
        let stopping = holder.stop();
        send(&stopping);
    }

    #[tokio::test(start_paused = true)]
    async fn run_returns_what_the_work_returned() {
        let store = ScriptedStore::new([]);
        let (handle, failures) = claimed_recording(&store, timings()).await;
        let holder = handle.hold(&CancellationToken::new());
        let out = run(holder.context(), |ctx| async move {
            sleep(ms(1_000)).await;
            (ctx.term(), ctx.handle().name().to_owned())
        })
        .await
        .unwrap();
        assert_eq!(out, (1, "leader:test".to_owned()));
        assert!(!holder.context().is_cancelled());
        holder.stop().await;
        assert!(failures.get().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_panic_becomes_an_error_naming_the_lease_and_the_site() {
        let store = ScriptedStore::new([]);
        let (handle, _) = claimed_recording(&store, timings()).await;
        let holder = handle.hold(&CancellationToken::new());
        let line = line!() + 3;
        let err = run(holder.context(), |_| async {
            sleep(ms(10)).await;
            panic!("the {} went wrong", "round");
        })
        .await
        .unwrap_err();
        let Error::Panicked {
            name,
            location,
            message,
        } = &err
        else {
            panic!("expected Panicked, got {err:?}");
        };
        assert_eq!(name, "leader:test");
        assert!(
            location.starts_with(&format!("lease-core/src/run.rs:{line}:")),
            "{location}"
        );
        assert_eq!(message, "the round went wrong");
        assert!(err.to_string().contains("leader:test"), "{err}");
        holder.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_is_not_a_loss_and_run_waits_for_the_work() {
        let store = ScriptedStore::new([]);
        let (handle, failures) = claimed_recording(&store, timings()).await;
        let t0 = handle.claimed_at();
        let parent = CancellationToken::new();
        let holder = handle.hold(&parent);
        let shutdown = parent.clone();
        drop(tokio::spawn(async move {
            sleep(ms(50)).await;
            shutdown.cancel();
        }));
        let out = run(holder.context(), |ctx| async move {
            ctx.cancelled().await;
            // A long wind-down: a hundred times the grace.
            sleep(ms(10_000)).await;
            ctx.cause()
        })
        .await
        .unwrap();
        assert_eq!(out, Some(EndCause::ParentCancelled));
        assert_eq!(elapsed(t0), 10_050);
        assert!(!handle.lost());
        assert_eq!(
            store.starts(t0).len(),
            100,
            "renewals go on while the work winds down"
        );
        holder.stop().await;
        assert!(failures.get().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn work_that_returns_within_the_grace_of_a_loss_has_its_output_returned() {
        let store = ScriptedStore::new([Step::Renew, Step::Gone]);
        let (handle, failures) = claimed_recording(&store, timings()).await;
        let t0 = handle.claimed_at();
        let holder = handle.hold(&CancellationToken::new());
        let out = run(holder.context(), |ctx| async move {
            ctx.cancelled().await;
            sleep(ms(90)).await;
            "wound down"
        })
        .await
        .unwrap();
        assert_eq!(out, "wound down");
        assert_eq!(elapsed(t0), 290);
        assert!(handle.lost());
        holder.stop().await;
        assert!(failures.get().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn work_ignoring_a_loss_is_aborted_when_the_grace_passes() {
        let store = ScriptedStore::new([Step::Renew, Step::Gone]);
        let (handle, failures) = claimed_recording(&store, timings()).await;
        let t0 = handle.claimed_at();
        let holder = handle.hold(&CancellationToken::new());
        let dropped = Arc::new(AtomicBool::new(false));
        let guard = Dropped(dropped.clone());
        let err = run(holder.context(), |_| async move {
            let _guard = guard;
            sleep(ms(3_600_000)).await;
        })
        .await
        .unwrap_err();
        assert_eq!(err.lost_cause(), Some(LostCause::NotHolder), "{err:?}");
        assert_eq!(
            elapsed(t0),
            300,
            "the loss at 200 ms, and the grace of 100 ms"
        );
        assert!(
            dropped.load(Ordering::SeqCst),
            "the work's task was aborted"
        );
        assert!(
            failures.get().is_empty(),
            "an abort that took effect is no failure"
        );
        holder.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn work_ignoring_a_deadline_loss_is_aborted_when_the_grace_passes() {
        let store = ScriptedStore::new([Step::Hang, Step::Hang]);
        let (handle, _) = claimed_recording(&store, timings()).await;
        let t0 = handle.claimed_at();
        let holder = handle.hold(&CancellationToken::new());
        let err = run(holder.context(), |_| std::future::pending::<()>())
            .await
            .unwrap_err();
        assert_eq!(
            err.lost_cause(),
            Some(LostCause::DeadlineExceeded),
            "{err:?}"
        );
        assert_eq!(elapsed(t0), 600);
        holder.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_loss_while_the_work_winds_down_after_shutdown_leaves_it_the_grace() {
        let store = ScriptedStore::new([Step::Renew, Step::Renew, after(20, Step::Gone)]);
        let (handle, failures) = claimed_recording(&store, timings()).await;
        let t0 = handle.claimed_at();
        let parent = CancellationToken::new();
        let holder = handle.hold(&parent);
        parent.cancel();
        let dropped = Arc::new(AtomicBool::new(false));
        let guard = Dropped(dropped.clone());
        let err = run(holder.context(), |ctx| async move {
            let _guard = guard;
            ctx.cancelled().await;
            // Winds down for ever.
            sleep(ms(3_600_000)).await;
        })
        .await
        .unwrap_err();
        assert_eq!(err.lost_cause(), Some(LostCause::NotHolder), "{err:?}");
        assert_eq!(
            elapsed(t0),
            420,
            "the loss at 320 ms, and the grace of 100 ms"
        );
        assert!(dropped.load(Ordering::SeqCst));
        assert!(handle.lost());
        assert_eq!(holder.context().cause(), Some(EndCause::ParentCancelled));
        assert!(failures.get().is_empty());
        holder.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_run_aborts_the_work() {
        let store = ScriptedStore::new([]);
        let (handle, _) = claimed_recording(&store, timings()).await;
        let holder = handle.hold(&CancellationToken::new());
        let dropped = Arc::new(AtomicBool::new(false));
        let guard = Dropped(dropped.clone());
        let cut = tokio::time::timeout(
            ms(50),
            run(holder.context(), |_| async move {
                let _guard = guard;
                std::future::pending::<()>().await;
            }),
        )
        .await;
        assert!(cut.is_err());
        tokio::task::yield_now().await;
        assert!(dropped.load(Ordering::SeqCst));
        holder.stop().await;
    }

    /// Work that blocks its thread cannot be shown on paused time (which
    /// needs the single-threaded runtime the work would block), so this test
    /// runs on real time with two workers, asserting only the order of
    /// events, never a duration's upper bound.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn work_that_will_not_stop_reaches_the_fail_hook_and_run_waits_for_it() {
        let store = ScriptedStore::new([]);
        let (handle, failures) = claimed_recording(&store, timings()).await;
        let ctx = LeaseContext::new(handle.clone(), CancellationToken::new());
        let release = Arc::new(AtomicBool::new(false));
        let blocked = Arc::new(AtomicBool::new(false));
        let (r, b) = (release.clone(), blocked.clone());
        let started = Instant::now();
        let watching = ctx.clone();
        let lose = tokio::spawn(async move {
            sleep(ms(20)).await;
            watching.end(EndCause::Lost(LostCause::NotHolder));
        });
        let release_after_failure = {
            let failures = failures.clone();
            let release = release.clone();
            tokio::spawn(async move {
                while failures.get().is_empty() {
                    sleep(ms(5)).await;
                }
                release.store(true, Ordering::SeqCst);
            })
        };
        let err = run(&ctx, move |_| async move {
            b.store(true, Ordering::SeqCst);
            // Blocks its worker thread without ever yielding to the runtime.
            while !r.load(Ordering::SeqCst) {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        })
        .await
        .unwrap_err();
        assert!(blocked.load(Ordering::SeqCst));
        assert_eq!(err.lost_cause(), Some(LostCause::NotHolder), "{err:?}");
        assert!(
            started.elapsed() >= ms(20) + timings().grace() + ABORT_WAIT,
            "the hook only runs after the grace and the abort's wait"
        );
        assert_eq!(
            failures.get(),
            [r#"lease "leader:test" lost: no longer this holder's"#]
        );
        assert!(
            release.load(Ordering::SeqCst),
            "run returned only once the work ended"
        );
        lose.await.unwrap();
        release_after_failure.await.unwrap();
    }
}
