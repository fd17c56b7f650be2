//! Holding a lease: renewing it on a task of its own until it is lost or
//! stopped.

use std::fmt;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::context::LeaseContext;
use crate::error::{Chain, Error, LostCause, Result};
use crate::handle::Handle;
use crate::state::EndCause;
use crate::store::Renewed;
use crate::timings::Timings;

/// A lease being kept: its renewals run on a task of their own until the
/// lease is lost or [`stop`](Holder::stop) ends them. Returned by
/// [`Handle::hold`].
///
/// Dropping a holder only signals its renewals to stop; call
/// [`stop`](Holder::stop) to know they have.
#[must_use = "the renewals stop when the holder is dropped"]
pub struct Holder {
    context: LeaseContext,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl fmt::Debug for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Holder")
            .field("context", &self.context)
            .field("stopped", &self.stop.is_cancelled())
            .finish()
    }
}

impl Holder {
    /// Starts the renewals of the lease `context` was made for by
    /// [`LeaseContext::held`].
    pub(crate) fn start(context: LeaseContext) -> Self {
        let stop = CancellationToken::new();
        let span = context.span().clone();
        let task = tokio::spawn(renewals(context.clone(), stop.clone()).instrument(span));
        Holder {
            context,
            stop,
            task: Some(task),
        }
    }

    /// The context the work under the lease runs on: it ends at the loss, or
    /// when the parent ends, or at [`stop`](Holder::stop).
    #[must_use]
    pub fn context(&self) -> &LeaseContext {
        &self.context
    }

    /// The handle held.
    pub fn handle(&self) -> &Handle {
        self.context.handle()
    }

    /// Runs `work` on this holder's context: [`run`](crate::run).
    ///
    /// # Errors
    ///
    /// As [`run`](crate::run): [`Error::Panicked`] when the work panicked,
    /// [`Error::Lost`] when the lease was lost and the work was aborted.
    ///
    /// # Cancel safety
    ///
    /// As [`run`](crate::run): dropping the future aborts the work.
    pub async fn run<F, Fut, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(LeaseContext) -> Fut,
        Fut: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        crate::run::run(&self.context, work).await
    }

    /// Ends the renewals, cutting one in flight, and returns once they have
    /// ended. It does not release the lease: the holder calls it once its
    /// work has returned, then releases (unless the handle is
    /// [`lost`](Handle::lost)). The context ends with
    /// [`EndCause::Stopped`] if it had not ended yet.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the renewals signalled to stop: they end at
    /// their next turn on the runtime.
    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            // The renewal task has nothing to return; a panic in it (there is
            // no code path to one) would have been reported by the runtime.
            let _ = task.await;
        }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The renewal loop of one held lease.
async fn renewals(ctx: LeaseContext, stop: CancellationToken) {
    let handle = ctx.handle();
    let _held = crate::metrics::Held::new(handle.name());
    let timings = *handle.leases().timings();
    let mut last_attempt = handle.claimed_at();
    let mut last_success = last_attempt;
    // When the last renewal that succeeded (the claim, at first) had
    // answered, at the latest: the database set its expiry before then.
    let mut last_answered = Instant::now();
    // The last successful renewal on both clocks, to catch the database's
    // clock jumping between two renewals.
    let mut last_seen: Option<Observation> = None;
    loop {
        let deadline = last_success + timings.deadline();
        let start = Instant::now();
        let bound = match next_attempt(last_attempt, last_success, start, &timings) {
            Next::Wait(due) => {
                tokio::select! {
                    biased;
                    () = stop.cancelled() => break,
                    () = sleep_until(due) => continue,
                }
            }
            Next::StepDown => {
                lose(&ctx, LostCause::DeadlineExceeded);
                give_back(&ctx, last_answered);
                return;
            }
            Next::Renew { bound } => bound,
        };
        // The work may have found the deadline passed first
        // (`LeaseContext::is_cancelled`), and ended the context.
        if ctx.lost_cause().is_some() {
            lose(&ctx, LostCause::DeadlineExceeded);
            give_back(&ctx, last_answered);
            return;
        }
        let outcome = tokio::select! {
            biased;
            () = stop.cancelled() => break,
            outcome = handle.renew_within(bound) => outcome,
        };
        last_attempt = start;
        match outcome {
            Ok(Renewed {
                now_ms: db_ms,
                resign,
            }) => {
                if resign && ctx.cause().is_none() {
                    tracing::info!("asked to resign; the work winds down while the lease is kept");
                    crate::metrics::resigned(handle.name());
                    ctx.end_with(EndCause::Resigned);
                }
                last_success = start;
                last_answered = Instant::now();
                ctx.set_deadline(start + timings.deadline());
                let seen = Observation {
                    start,
                    end: last_answered,
                    db_ms,
                };
                let step = last_seen.map(|prev| clock_step(prev, seen, timings.clock_jump_bound()));
                last_seen = Some(seen);
                match step {
                    Some(ClockStep::Ahead(ahead)) => {
                        tracing::warn!(
                            ahead = ?ahead,
                            bound = ?timings.clock_jump_bound(),
                            "the database's clock jumped ahead between two renewals; stepping down"
                        );
                        lose(&ctx, LostCause::ClockJump);
                        give_back(&ctx, last_answered);
                        return;
                    }
                    Some(ClockStep::Behind(behind)) => tracing::warn!(
                        behind = ?behind,
                        "the database's clock stepped back between two renewals: the lease \
                         stays held (the local deadline does not move), but the name outlives \
                         a crash of this holder by as much"
                    ),
                    Some(ClockStep::Steady) | None => tracing::trace!("lease renewed"),
                }
            }
            Err(Error::Lost { cause, .. }) => {
                lose(&ctx, cause);
                return;
            }
            Err(error) => {
                tracing::warn!(
                    error = %Chain(&error),
                    left = ?deadline.saturating_duration_since(Instant::now()),
                    "lease renewal failed; trying again until the local deadline"
                );
            }
        }
    }
    tracing::debug!("lease renewals stopped");
    ctx.end_with(EndCause::Stopped);
}

/// What the renewal loop does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Nothing until this instant, when the next attempt is due.
    Wait(Instant),
    /// An attempt now, bounded by this much.
    Renew { bound: Duration },
    /// The local deadline has passed with no renewal succeeding: step down.
    StepDown,
}

/// The cadence rule, at `now`, for a lease whose last renewal attempt
/// started at `last_attempt` and whose last successful one (the claim, at
/// first) at `last_success`:
///
/// - the local deadline is `last_success` + [`Timings::deadline`]: at it or
///   past it, the holder steps down;
/// - an attempt is due [`Timings::renew`] after the last one started, and
///   never later than the deadline;
/// - an attempt is bounded by half the deadline, and never runs past the
///   deadline itself.
pub(crate) fn next_attempt(
    last_attempt: Instant,
    last_success: Instant,
    now: Instant,
    timings: &Timings,
) -> Next {
    let deadline = last_success + timings.deadline();
    if now >= deadline {
        return Next::StepDown;
    }
    let due = (last_attempt + timings.renew()).min(deadline);
    if now < due {
        return Next::Wait(due);
    }
    Next::Renew {
        bound: (timings.deadline() / 2).min(deadline - now),
    }
}

/// A successful renewal, seen on both clocks: the holder's monotonic clock
/// before and after the attempt, and the database's now that the statement
/// read in between.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Observation {
    pub(crate) start: Instant,
    pub(crate) end: Instant,
    pub(crate) db_ms: i64,
}

/// What the database's clock did between two renewals, judged by the
/// holder's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClockStep {
    /// Within the bound of the holder's clock.
    Steady,
    /// The database's clock ran ahead by this much beyond what any latency
    /// explains.
    Ahead(Duration),
    /// The database's clock fell behind by this much beyond what any
    /// latency explains.
    Behind(Duration),
}

/// Compares the database's elapsed time between `prev` and `next` with the
/// holder's. Each database now lies between its attempt's start and end, so
/// the database's elapsed time lies between `next.start - prev.end` and
/// `next.end - prev.start` when both clocks run at one rate: only what falls
/// outside that interval by more than `bound` is a jump.
pub(crate) fn clock_step(prev: Observation, next: Observation, bound: Duration) -> ClockStep {
    let db = next.db_ms.saturating_sub(prev.db_ms);
    let millis = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    let most = millis(next.end.saturating_duration_since(prev.start));
    let least = millis(next.start.saturating_duration_since(prev.end));
    let bound = millis(bound);
    let by = |ms: i64| Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    if db.saturating_sub(most) > bound {
        ClockStep::Ahead(by(db - most))
    } else if least.saturating_sub(db) > bound {
        ClockStep::Behind(by(least - db))
    } else {
        ClockStep::Steady
    }
}

fn lose(ctx: &LeaseContext, cause: LostCause) {
    tracing::warn!(%cause, "lease lost");
    crate::metrics::loss(ctx.handle().name(), cause);
    ctx.end_with(EndCause::Lost(cause));
}

/// Gives the name back after a step-down at the local deadline, on a task of
/// its own, once the lease has run out: a release by the holder's token,
/// tried at the renewal cadence until one answers.
///
/// Renewals sent before the step-down may still be on their way: abandoned
/// by their timeout on this side, held back by a network that stalled
/// rather than failed. One that reaches the database before the lease has
/// expired there renews it for a whole lease, held by nobody. The release
/// undoes that, and a renewal that reaches the database after it finds the
/// lease expired (`expires_at_ms = 0`) and changes nothing. A release cannot
/// take the name from anyone else: it matches this holder's token only.
///
/// The release waits until the database has expired the lease in any case
/// (the last renewal that succeeded answered at `last_answered`, so the
/// database had set its expiry by then: `last_answered` + lease on the
/// process's clock), and until the work's grace after the step-down has
/// passed: it never frees the name sooner than the database would have, so
/// the step-down margin and the grace keep their meaning. Renewals that
/// reach the database later still find the lease expired. The attempts go
/// on for one more lease, the longest a late renewal can have extended it;
/// then the task ends by itself. [`Holder::stop`] does not wait for it.
fn give_back(ctx: &LeaseContext, last_answered: Instant) {
    let handle = ctx.handle().clone();
    let timings = *handle.leases().timings();
    let from = (Instant::now() + timings.grace()).max(last_answered + timings.lease());
    let until = from + timings.lease();
    let task = async move {
        sleep_until(from).await;
        loop {
            let start = Instant::now();
            if start >= until {
                tracing::debug!("lease not given back: the database did not answer");
                return;
            }
            // Bounded by the statement timeout, as every release.
            match handle.release().await {
                Ok(()) => {
                    tracing::debug!("lease given back after stepping down");
                    return;
                }
                Err(error) if error.is_lost() => {
                    tracing::debug!("lease found expired or taken: nothing to give back");
                    return;
                }
                Err(error) => tracing::debug!(
                    error = %Chain(&error),
                    "giving the lease back after stepping down failed; trying again"
                ),
            }
            sleep_until((start + timings.retry_interval()).min(until)).await;
        }
    };
    // Detached on purpose: the release must outlive the holder and its
    // renewals (it starts after them), and it holds the coordinator through
    // the handle, so nothing that could own it outlives it. It ends by
    // itself at `until`.
    drop(tokio::spawn(task.instrument(ctx.span().clone())));
}

#[cfg(test)]
mod tests {
    use tokio::time::sleep;

    use super::*;
    use crate::testing::{Attempt, Outcome, ScriptedStore, Step, after, claimed, elapsed, ms};

    fn attempt(start: u64, end: u64, outcome: Outcome) -> Attempt {
        Attempt {
            start,
            end,
            outcome,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn renewals_are_due_every_interval_from_the_claim() {
        let store = ScriptedStore::new([after(10, Step::Renew), after(30, Step::Renew)]);
        let (_, handle) = claimed(&store).await;
        let t0 = handle.claimed_at();
        let holder = handle.hold(&CancellationToken::new());
        sleep(ms(550)).await;
        holder.stop().await;
        assert_eq!(store.starts(t0), [100, 200, 300, 400, 500]);
        assert_eq!(
            store.attempts(t0)[..2],
            [
                attempt(100, 110, Outcome::Renewed),
                attempt(200, 230, Outcome::Renewed),
            ]
        );
        assert!(!handle.lost());
    }

    /// Issue 25, item 4: a renewal that reports a resign request ends the
    /// context with its own cause, not a loss, and the renewals go on
    /// while the work winds down.
    #[tokio::test(start_paused = true)]
    async fn a_resign_request_ends_the_context_and_the_renewals_go_on() {
        let store = ScriptedStore::new([Step::Renew, Step::Resign]);
        let (_, handle) = claimed(&store).await;
        let t0 = handle.claimed_at();
        let holder = handle.hold(&CancellationToken::new());
        let ctx = holder.context().clone();
        sleep(ms(150)).await;
        assert!(!ctx.is_cancelled(), "no request yet");
        sleep(ms(100)).await;
        assert!(ctx.is_cancelled(), "asked at the second renewal, 200 ms in");
        assert_eq!(ctx.cause(), Some(EndCause::Resigned));
        sleep(ms(600)).await; // past the deadline: the renewals went on
        assert!(!handle.lost(), "a resign is no loss");
        holder.stop().await;
        assert_eq!(store.starts(t0), [100, 200, 300, 400, 500, 600, 700, 800]);
        assert_eq!(
            ctx.cause(),
            Some(EndCause::Resigned),
            "the first cause stays"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_renewal_is_retried_at_the_same_cadence_and_the_lease_kept() {
        // Four failures in a row: the fifth attempt, at 500 ms, would be at the
        // deadline; the one at 400 ms succeeds and moves the deadline to 900 ms.
        let store =
            ScriptedStore::new([Step::Fail, after(20, Step::Fail), Step::Fail, Step::Renew]);
        let (_, handle) = claimed(&store).await;
        let t0 = handle.claimed_at();
        let holder = handle.hold(&CancellationToken::new());
        sleep(ms(850)).await;
        assert!(!holder.context().is_cancelled(), "{:?}", holder.context());
        holder.stop().await;
        assert_eq!(store.starts(t0), [100, 200, 300, 400, 500, 600, 700, 800]);
        assert_eq!(
            store.attempts(t0)[..4],
            [
                attempt(100, 100, Outcome::Failed),
                attempt(200, 220, Outcome::Failed),
                attempt(300, 300, Outcome::Failed),
                attempt(400, 400, Outcome::Renewed),
            ]
        );
        assert!(!handle.lost());
    }

    #[tokio::test(start_paused = true)]
    async fn slow_but_successful_renewals_keep_the_lease() {
        // Each renewal takes 240 ms, longer than the interval and just under
        // the 250 ms bound: the next is due at once when one returns.
        let slow = || after(240, Step::Renew);
        let store = ScriptedStore::new([slow(), slow(), slow(), slow(), slow()]);
        let (_, handle) = claimed(&store).await;
        let t0 = handle.claimed_at();
        let holder = handle.hold(&CancellationToken::new());
        sleep(ms(1_300)).await;
        assert!(!holder.context().is_cancelled(), "{:?}", holder.context());
        holder.stop().await;
        assert_eq!(
            store.attempts(t0)[..5],
            [
                attempt(100, 340, Outcome::Renewed),
                attempt(340, 580, Outcome::Renewed),
                attempt(580, 820, Outcome::Renewed),
                attempt(820, 1_060, Outcome::Renewed),
                attempt(1_060, 1_300, Outcome::Cut),
            ]
        );
        assert!(!handle.lost());
    }

    #[tokio::test(start_paused = true)]
    async fn no_renewal_within_the_deadline_loses_the_lease_at_the_deadline() {
        let store =
            ScriptedStore::new([Step::Fail, Step::Fail, Step::Fail, Step::Fail, Step::Fail]);
        let (_, handle) = claimed(&store).await;
        let t0 = handle.claimed_at();
        let holder = handle.hold(&CancellationToken::new());
        let ctx = holder.context().clone();
        ctx.cancelled().await;
        assert!(handle.lost(), "lost() must be set before the token ends");
        assert_eq!(elapsed(t0), 500);
        assert_eq!(
            ctx.cause(),
            Some(EndCause::Lost(LostCause::DeadlineExceeded))
        );
        sleep(ms(1_000)).await;
        assert_eq!(
            store.starts(t0),
            [100, 200, 300, 400],
            "no renewal after the loss"
        );
        holder.stop().await;
        assert_eq!(
            ctx.cause(),
            Some(EndCause::Lost(LostCause::DeadlineExceeded))
        );
        assert_eq!(
            store.releases(),
            1,
            "a holder that stepped down gives the name back, once"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_holder_that_stepped_down_gives_the_name_back_once_the_lease_has_run_out() {
        // Lost at the 500 ms deadline; the claim answered at 0, so the
        // database expires the lease by 1000 ms: the release waits for it.
        let store = ScriptedStore::new(std::iter::repeat_n(Step::Fail, 5));
        let (_, handle) = claimed(&store).await;
        let t0 = handle.claimed_at();
        let holder = handle.hold(&CancellationToken::new());
        holder.context().cancelled().await;
        assert_eq!(elapsed(t0), 500);
        holder.stop().await;
        sleep(ms(490)).await;
        assert_eq!(store.releases(), 0, "given back before the lease ran out");
        sleep(ms(20)).await;
        assert_eq!(store.releases(), 1, "not given back once the lease ran out");
        sleep(ms(5_000)).await;
        assert_eq!(store.releases(), 1, "given back once only");
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_failing_just_short_of_its_bound_still_loses_at_the_deadline() {
        // The attempt at 400 ms is bounded by the 100 ms left to the deadline;
        // it fails at 499 ms, and no attempt has time left after it.
        let store = ScriptedStore::new([Step::Fail, Step::Fail, Step::Fail, after(99, Step::Fail)]);
        let (_, handle) = claimed(&store).await;
        let t0 = handle.claimed_at();
        let holder = handle.hold(&CancellationToken::new());
        holder.context().cancelled().await;
        assert_eq!(elapsed(t0), 500);
        assert!(handle.lost());
        assert_eq!(
            holder.context().cause(),
            Some(EndCause::Lost(LostCause::DeadlineExceeded))
        );
        assert_eq!(store.attempts(t0)[3], attempt(400, 499, Outcome::Failed));
        assert_eq!(store.starts(t0).len(), 4);
        holder.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_that_would_answer_after_the_deadline_is_cut_at_it() {
        // The attempt at 300 ms may wait 200 ms (the time left), not 250 ms.
        let store = ScriptedStore::new([Step::Fail, Step::Fail, after(210, Step::Renew)]);
        let (_, handle) = claimed(&store).await;
        let t0 = handle.claimed_at();
        let holder = handle.hold(&CancellationToken::new());
        holder.context().cancelled().await;
        assert_eq!(elapsed(t0), 500);
        assert_eq!(store.attempts(t0)[2], attempt(300, 500, Outcome::Cut));
        assert_eq!(
            holder.context().cause(),
            Some(EndCause::Lost(LostCause::DeadlineExceeded))
        );
        holder.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_renewal_is_cut_at_half_the_deadline_and_the_next_one_keeps_the_lease() {
        let store = ScriptedStore::new([Step::Hang]);
        let (_, handle) = claimed(&store).await;
        let t0 = handle.claimed_at();
        let holder = handle.hold(&CancellationToken::new());
        sleep(ms(500)).await;
        holder.stop().await;
        assert_eq!(
            store.attempts(t0)[..3],
            [
                attempt(100, 350, Outcome::Cut),
                attempt(350, 350, Outcome::Renewed),
                attempt(450, 450, Outcome::Renewed),
            ]
        );
        assert!(!handle.lost());
    }

    /// The work checks the context right before it acts; a renewal task
    /// starved of the runtime (here: the one runtime thread blocked past the
    /// deadline) cannot end it in time, so the check reads the deadline
    /// itself.
    #[tokio::test(flavor = "current_thread")]
    async fn a_context_past_its_deadline_reads_as_ended_before_the_renewals_run() {
        let store = ScriptedStore::default();
        let (_, handle) = claimed(&store).await;
        let holder = handle.hold(&CancellationToken::new());
        let ctx = holder.context().clone();
        assert!(!ctx.is_cancelled(), "within the deadline");
        // Blocks the runtime's only thread: the renewal task cannot run.
        std::thread::sleep(std::time::Duration::from_millis(600));
        assert!(
            store.starts(handle.claimed_at()).is_empty(),
            "no renewal could run"
        );
        assert!(
            ctx.is_cancelled(),
            "600 ms after the claim, past the 500 ms deadline"
        );
        assert_eq!(
            ctx.cause(),
            Some(EndCause::Lost(LostCause::DeadlineExceeded))
        );
        assert!(handle.lost());
        holder.stop().await;
        assert!(
            store.starts(handle.claimed_at()).is_empty(),
            "no renewal after the context ended"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_database_clock_jumping_ahead_ends_the_context_at_the_renewal_that_shows_it() {
        // The bound is half the margin: (1000 - 500) / 2 = 250 ms. Between
        // the renewals at 100 and 200 ms the database's clock moves 300 ms
        // further than the holder's.
        let store = ScriptedStore::new([Step::Renew, Step::Jump(300, Box::new(Step::Renew))]);
        let (_, handle) = claimed(&store).await;
        let t0 = handle.claimed_at();
        let holder = handle.hold(&CancellationToken::new());
        let ctx = holder.context().clone();
        ctx.cancelled().await;
        assert_eq!(
            elapsed(t0),
            200,
            "stepped down at the renewal that showed the jump"
        );
        assert_eq!(ctx.cause(), Some(EndCause::Lost(LostCause::ClockJump)));
        assert!(handle.lost());
        sleep(ms(3_000)).await;
        assert_eq!(
            store.starts(t0),
            [100, 200],
            "no renewal after the step-down"
        );
        assert_eq!(store.releases(), 1, "the name is given back");
        holder.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_database_clock_jump_within_the_bound_or_backwards_keeps_the_lease() {
        for jump in [240, -400, -5_000] {
            let store = ScriptedStore::new([Step::Renew, Step::Jump(jump, Box::new(Step::Renew))]);
            let (_, handle) = claimed(&store).await;
            let holder = handle.hold(&CancellationToken::new());
            sleep(ms(1_000)).await;
            assert!(!handle.lost(), "a jump of {jump} ms cost the lease");
            holder.stop().await;
        }
    }

    #[test]
    fn the_next_attempt_follows_the_cadence_within_the_deadline() {
        // renew 100 ms, deadline 500 ms.
        let timings = crate::testing::timings();
        let t0 = Instant::now();
        let at = |n: u64| t0 + ms(n);
        let renew = |n: u64| Next::Renew { bound: ms(n) };
        // (last attempt, last success, now, next)
        let cases = [
            // Right after the claim: the first renewal is due at 100 ms.
            (0, 0, 0, Next::Wait(at(100))),
            (0, 0, 99, Next::Wait(at(100))),
            // Due: bounded by half the deadline.
            (0, 0, 100, renew(250)),
            // Late (a slow attempt, a busy runtime): due at once.
            (100, 100, 340, renew(250)),
            // Failed attempts keep the cadence from the last start, and the
            // deadline from the last success.
            (300, 0, 350, Next::Wait(at(400))),
            (300, 0, 400, renew(100)),
            // Never due after the deadline, never bounded past it.
            (450, 0, 460, Next::Wait(at(500))),
            (300, 0, 499, renew(1)),
            // At the deadline, or past it: step down.
            (400, 0, 500, Next::StepDown),
            (0, 0, 10_000, Next::StepDown),
            // A success moves the deadline.
            (400, 400, 500, renew(250)),
            (400, 400, 700, renew(200)),
        ];
        for (i, (last_attempt, last_success, now, expected)) in cases.into_iter().enumerate() {
            assert_eq!(
                next_attempt(at(last_attempt), at(last_success), at(now), &timings),
                expected,
                "case {i}"
            );
        }
    }

    #[test]
    fn clock_steps_allow_for_latency_and_catch_jumps() {
        let t0 = Instant::now();
        let at = |start: u64, end: u64, db_ms: i64| Observation {
            start: t0 + ms(start),
            end: t0 + ms(end),
            db_ms,
        };
        let bound = ms(250);
        let cases = [
            // Renewals 100 ms apart, the database's now anywhere within each.
            (at(0, 10, 5), at(100, 110, 105), ClockStep::Steady),
            // Slow attempts: the first read late, the second early, and the
            // other way round: latency, not a jump.
            (at(0, 240, 0), at(100, 340, 340), ClockStep::Steady),
            (at(0, 240, 240), at(300, 540, 300), ClockStep::Steady),
            // Ahead by just the bound beyond the widest interval: steady.
            (at(0, 10, 0), at(100, 110, 110 + 250), ClockStep::Steady),
            (
                at(0, 10, 0),
                at(100, 110, 110 + 251),
                ClockStep::Ahead(ms(251)),
            ),
            (
                at(0, 10, 0),
                at(100, 110, 10_110),
                ClockStep::Ahead(ms(10_000)),
            ),
            // Behind: the database's elapsed time under the narrowest
            // interval (90 ms) by more than the bound.
            (
                at(0, 10, 1_000),
                at(100, 110, 1_000 + 90 - 250),
                ClockStep::Steady,
            ),
            (
                at(0, 10, 1_000),
                at(100, 110, 1_000 + 90 - 251),
                ClockStep::Behind(ms(251)),
            ),
        ];
        for (i, (prev, next, expected)) in cases.into_iter().enumerate() {
            assert_eq!(clock_step(prev, next, bound), expected, "case {i}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_finding_the_name_gone_ends_the_context_as_not_this_holders() {
        let store = ScriptedStore::new([Step::Renew, after(5, Step::Gone)]);
        let (_, handle) = claimed(&store).await;
        let t0 = handle.claimed_at();
        let holder = handle.hold(&CancellationToken::new());
        let ctx = holder.context().clone();
        ctx.cancelled().await;
        assert!(handle.lost(), "lost() must be set before the token ends");
        assert_eq!(elapsed(t0), 205);
        assert_eq!(ctx.cause(), Some(EndCause::Lost(LostCause::NotHolder)));
        sleep(ms(1_000)).await;
        assert_eq!(store.starts(t0), [100, 200], "no renewal after the loss");
        holder.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn stop_cuts_a_renewal_in_flight_returns_and_does_not_release() {
        let store = ScriptedStore::new([Step::Renew, Step::Hang]);
        let (_, handle) = claimed(&store).await;
        let t0 = handle.claimed_at();
        let holder = handle.hold(&CancellationToken::new());
        let ctx = holder.context().clone();
        sleep(ms(250)).await;
        holder.stop().await;
        assert_eq!(elapsed(t0), 250, "stop waits for nothing but the cut");
        assert_eq!(
            store.attempts(t0),
            [
                attempt(100, 100, Outcome::Renewed),
                attempt(200, 250, Outcome::Cut),
            ]
        );
        assert_eq!(ctx.cause(), Some(EndCause::Stopped));
        assert!(!handle.lost());
        assert_eq!(store.releases(), 0);
        sleep(ms(1_000)).await;
        assert_eq!(store.starts(t0).len(), 2, "no renewal after stop");
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_the_holder_stops_the_renewals() {
        let store = ScriptedStore::new([]);
        let (_, handle) = claimed(&store).await;
        let t0 = handle.claimed_at();
        let holder = handle.hold(&CancellationToken::new());
        let ctx = holder.context().clone();
        sleep(ms(150)).await;
        drop(holder);
        ctx.cancelled().await;
        assert_eq!(ctx.cause(), Some(EndCause::Stopped));
        sleep(ms(1_000)).await;
        assert_eq!(store.starts(t0), [100]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_parent_ends_the_context_but_not_the_renewals() {
        let store = ScriptedStore::new([]);
        let (_, handle) = claimed(&store).await;
        let t0 = handle.claimed_at();
        let parent = CancellationToken::new();
        let holder = handle.hold(&parent);
        sleep(ms(150)).await;
        parent.cancel();
        assert!(holder.context().is_cancelled());
        assert_eq!(holder.context().cause(), Some(EndCause::ParentCancelled));
        sleep(ms(1_000)).await;
        assert_eq!(store.starts(t0).len(), 11, "renewals outlive the parent");
        assert!(!handle.lost());
        let ctx = holder.context().clone();
        holder.stop().await;
        assert_eq!(ctx.cause(), Some(EndCause::ParentCancelled));
        assert_eq!(store.releases(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_loss_found_after_the_parent_ended_still_marks_the_handle_lost() {
        let store = ScriptedStore::new([Step::Renew, Step::Renew, Step::Gone]);
        let (_, handle) = claimed(&store).await;
        let parent = CancellationToken::new();
        let holder = handle.hold(&parent);
        let ctx = holder.context().clone();
        parent.cancel();
        sleep(ms(250)).await;
        assert!(!handle.lost());
        sleep(ms(100)).await;
        assert!(handle.lost());
        assert_eq!(ctx.cause(), Some(EndCause::ParentCancelled));
        assert_eq!(ctx.lost_cause(), Some(LostCause::NotHolder));
        holder.stop().await;
        assert_eq!(ctx.cause(), Some(EndCause::ParentCancelled));
    }
}
