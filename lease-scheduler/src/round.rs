//! A round: a claimed instant run under hold + run, and settled by how it
//! ended (finished with the instant passed, released for a rerun, or left
//! to expire), or a per-instance job's round, which has no lease. How a
//! round is settled is the pure [`settle`], pinned by a table.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use lease_core::{Chain, Handle, UtcMillis};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument as _;

use crate::job::{JobResult, Round};
use crate::log::{Escaped, TARGET};
use crate::metrics::{self, RoundLabel};
use crate::schedule::Rfc3339;
use crate::task::{JobTask, Kind};

/// The jobs with a round in flight, watched: the shutdown waits for them.
pub(crate) type Running = Arc<watch::Sender<BTreeSet<Arc<str>>>>;

/// Marks a job as running a round until dropped.
struct RunningGuard {
    running: Running,
    job: Arc<str>,
}

impl RunningGuard {
    fn new(running: &Running, job: &Arc<str>) -> Self {
        running.send_modify(|jobs| {
            let _ = jobs.insert(job.clone());
        });
        metrics::running(1.0);
        RunningGuard {
            running: running.clone(),
            job: job.clone(),
        }
    }
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.running.send_modify(|jobs| {
            let _ = jobs.remove(&self.job);
        });
        metrics::running(-1.0);
    }
}

/// Aborts a spawned task when dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How a claimed round is settled, once it has ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Settle {
    /// It ran to its end (its work done, or failed): record the end, taking
    /// the schedule's instants that came meanwhile along (`passed`, never
    /// before the round's own instant), and give the name back. Also when
    /// its lease was lost: the end is recorded without the lease.
    Finish {
        /// The instant to record as the last one handled.
        passed: UtcMillis,
    },
    /// It was cut short with its lease still held: give the name back at
    /// once, the instant unfinished, so that a peer's sweep runs it again.
    Release,
    /// It was cut short and its lease lost: settle nothing. The lease runs
    /// out by itself, and the instant stays unfinished.
    Leave,
}

/// How a claimed round of `instant` that ended as `ending`, its lease
/// `lost` or not, is settled; `latest` is the schedule's latest instant at
/// or before the round's end.
fn settle(ending: Ending, lost: bool, instant: UtcMillis, latest: Option<UtcMillis>) -> Settle {
    match ending {
        Ending::Ran | Ending::Failed => Settle::Finish {
            passed: latest.unwrap_or(instant).max(instant),
        },
        Ending::CutShort if lost => Settle::Leave,
        Ending::CutShort => Settle::Release,
    }
}

/// A round that ran: its instant, and when it ended.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ran {
    pub(crate) instant: UtcMillis,
    pub(crate) end: UtcMillis,
    /// Whether it was cut short (and so runs again once).
    pub(crate) cut_short: bool,
}

/// How a round ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// It returned `Ok(())`.
    Ran,
    /// It returned an error while its context was still alive, or panicked:
    /// it ran to its end, and failed.
    Failed,
    /// It ended only because its context ended.
    CutShort,
}

impl Ending {
    /// How a round whose function returned (`returned_ok` when it returned
    /// `Ok(())`) ended; `context_ended` tells whether its context had ended
    /// by then. A round that returns `Ok(())` ran, whenever it returns; an
    /// error is a failure while the context runs, and a stop once it has
    /// ended.
    fn of(returned_ok: bool, context_ended: bool) -> Ending {
        match (returned_ok, context_ended) {
            (true, _) => Ending::Ran,
            (false, true) => Ending::CutShort,
            (false, false) => Ending::Failed,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Ending::Ran => "ran",
            Ending::Failed => "failed",
            Ending::CutShort => "cut_short",
        }
    }
}

impl JobTask {
    /// Runs a claimed round under hold + run, settles it, and returns when it
    /// ended; all of it in the span `round` (the lease's span, and so the
    /// job's own events, nested in it).
    pub(crate) async fn round(&self, handle: Handle, instant: UtcMillis, kind: Kind) -> Ran {
        let span = tracing::info_span!(target: TARGET,
            "round",
            job = ?self.job.name,
            instant = %Rfc3339(instant),
            term = handle.term(),
            rerun = kind.rerun,
            catch_up = kind.catch_up,
            late_ms = tracing::field::Empty,
        );
        self.claimed_round(handle, instant, kind, &span)
            .instrument(span.clone())
            .await
    }

    /// Awaits `work`, a round of `instant`, warning at each instant of the
    /// job that comes while it still runs.
    async fn watching<T>(&self, instant: UtcMillis, work: impl Future<Output = T>) -> T {
        tokio::select! {
            biased;
            out = work => out,
            never = self.watch_overrun(instant) => match never {},
        }
    }

    /// Warns at each instant of the job that comes from now on; never ends.
    async fn watch_overrun(&self, instant: UtcMillis) -> Infallible {
        let mut after = self.clock.now();
        loop {
            let Some(next) = self.job.schedule.next_after(after) else {
                return std::future::pending().await;
            };
            self.clock.sleep_until(next).await;
            let then = if self.job.policy.backfills() {
                "deferred"
            } else {
                "skipped"
            };
            metrics::still_running(then);
            tracing::warn!(target: TARGET,
                job = ?self.job.name,
                instant = %Rfc3339(instant),
                next = %Rfc3339(next),
                then,
                "round still running at the job's next instant"
            );
            after = next;
        }
    }

    /// [`round`](Self::round), in its span.
    async fn claimed_round(
        &self,
        handle: Handle,
        instant: UtcMillis,
        kind: Kind,
        span: &tracing::Span,
    ) -> Ran {
        let job = &self.job;
        let _running = RunningGuard::new(&self.running, &job.name);
        let term = handle.term();
        let holder = handle.hold(&self.rounds);
        tracing::info!(target: TARGET,
            job = ?job.name,
            instant = %Rfc3339(instant),
            term,
            rerun = kind.rerun,
            catch_up = kind.catch_up,
            "round started"
        );
        let late = self.clock.now().as_millis() - instant.as_millis();
        let _ = span.record("late_ms", late);
        if kind.label() == RoundLabel::Scheduled {
            metrics::start_delay(late, job.per_job_metrics.then_some(&job.name));
        }
        let started = Instant::now();
        let f = job.run.clone();
        let name = job.name.clone();
        let work = lease_core::run(holder.context(), move |ctx| async move {
            let round = Round {
                job: name,
                instant,
                rerun: kind.rerun,
                catch_up: kind.catch_up,
                cancel: ctx.cancellation().clone(),
                lease: Some(ctx.clone()),
            };
            let result = f(round).await;
            (result, ctx.is_cancelled())
        });
        let out = self.watching(instant, work).await;
        holder.stop().await;
        let end = self.clock.now();
        let lost = handle.lost();
        let ending = match &out {
            Ok((result, ended)) => self.ending(instant, result, *ended),
            Err(error) if error.is_lost() => Ending::CutShort,
            Err(error) => {
                tracing::error!(target: TARGET,
                    job = ?job.name,
                    instant = %Rfc3339(instant),
                    term,
                    error = %Escaped(Chain(error)),
                    "round failed"
                );
                Ending::Failed
            }
        };
        metrics::round(kind.label(), ending.label(), started.elapsed());
        let fields = Fields {
            job: &job.name,
            instant,
            term,
            kind,
            elapsed: started.elapsed(),
        };
        // A backfill runs the instants an overrun covered: none is taken
        // along.
        let latest = if job.policy.backfills() {
            Some(instant)
        } else {
            job.schedule.latest_at_or_before(end)
        };
        match settle(ending, lost, instant, latest) {
            Settle::Finish { passed } => match handle.finish(passed).await {
                Ok(()) => fields.log_finished(lost),
                Err(error) if error.is_lost() => fields.log_finished(true),
                Err(error) => tracing::warn!(target: TARGET,
                    job = ?job.name,
                    instant = %Rfc3339(instant),
                    term,
                    error = %Escaped(Chain(&error)),
                    "could not record the round's end: its lease expires, and the instant \
                     runs again once"
                ),
            },
            Settle::Release => fields.log_cut_short(lost, Some(handle.release().await.is_ok())),
            Settle::Leave => fields.log_cut_short(lost, None),
        }
        Ran {
            instant,
            end,
            cut_short: ending == Ending::CutShort,
        }
    }

    /// A round of a per-instance job: no lease, no settling; in the span
    /// `round`.
    pub(crate) async fn local_round(&self, instant: UtcMillis) -> Option<Ran> {
        let span = tracing::info_span!(target: TARGET,
            "round",
            job = ?self.job.name,
            instant = %Rfc3339(instant),
            term = tracing::field::Empty,
            rerun = false,
            catch_up = false,
            late_ms = tracing::field::Empty,
        );
        self.local_round_in_span(instant, &span)
            .instrument(span.clone())
            .await
    }

    /// [`local_round`](Self::local_round), in its span.
    async fn local_round_in_span(&self, instant: UtcMillis, span: &tracing::Span) -> Option<Ran> {
        let job = &self.job;
        let _running = RunningGuard::new(&self.running, &job.name);
        let cancel = self.rounds.child_token();
        let round = Round {
            job: job.name.clone(),
            instant,
            rerun: false,
            catch_up: false,
            lease: None,
            cancel: cancel.clone(),
        };
        tracing::info!(target: TARGET, job = ?job.name, instant = %Rfc3339(instant), "round started");
        let late = self.clock.now().as_millis() - instant.as_millis();
        let _ = span.record("late_ms", late);
        metrics::start_delay(late, job.per_job_metrics.then_some(&job.name));
        let started = Instant::now();
        let run = job.run.clone();
        // The function is called on the task, so that a panic in it, before
        // its future, is caught there too.
        let mut task = AbortOnDrop(tokio::spawn(
            async move {
                let result = run(round).await;
                (result, cancel.is_cancelled())
            }
            .in_current_span(),
        ));
        let out = self.watching(instant, &mut task.0).await;
        let end = self.clock.now();
        let ending = match &out {
            Ok((result, ended)) => self.ending(instant, result, *ended),
            Err(join) => {
                tracing::error!(target: TARGET, job = ?job.name, instant = %Rfc3339(instant), error = %Escaped(join), "round failed");
                Ending::Failed
            }
        };
        metrics::round(RoundLabel::PerInstance, ending.label(), started.elapsed());
        match ending {
            Ending::CutShort => tracing::warn!(target: TARGET,
                job = ?job.name,
                instant = %Rfc3339(instant),
                "round cut short (a per-instance job's round is not run again)"
            ),
            Ending::Ran | Ending::Failed => tracing::info!(target: TARGET,
                job = ?job.name,
                instant = %Rfc3339(instant),
                elapsed = ?started.elapsed(),
                "round finished"
            ),
        }
        Some(Ran {
            instant,
            end,
            cut_short: ending == Ending::CutShort,
        })
    }

    /// How a round whose function returned `result` ended (see
    /// [`Ending::of`]), logging a failure; `ended` tells whether its context
    /// had ended by then.
    fn ending(&self, instant: UtcMillis, result: &JobResult, ended: bool) -> Ending {
        let ending = Ending::of(result.is_ok(), ended);
        if let (Ending::Failed, Err(error)) = (ending, result) {
            tracing::warn!(target: TARGET,
                job = ?self.job.name,
                instant = %Rfc3339(instant),
                error = %Escaped(Chain(&**error)),
                "round failed"
            );
        }
        ending
    }
}

/// The fields of a finished round's log line.
struct Fields<'a> {
    job: &'a str,
    instant: UtcMillis,
    term: u64,
    kind: Kind,
    elapsed: Duration,
}

impl Fields<'_> {
    /// A round cut short: `released` tells whether the name was given back
    /// (`None`: not tried, the lease was lost).
    fn log_cut_short(&self, lost: bool, released: Option<bool>) {
        if self.kind.rerun {
            tracing::warn!(target: TARGET,
                job = ?self.job,
                instant = %Rfc3339(self.instant),
                term = self.term,
                rerun = self.kind.rerun,
                catch_up = self.kind.catch_up,
                lost,
                released,
                "rerun cut short too: the instant stays unfinished for good"
            );
        } else {
            tracing::warn!(target: TARGET,
                job = ?self.job,
                instant = %Rfc3339(self.instant),
                term = self.term,
                rerun = self.kind.rerun,
                catch_up = self.kind.catch_up,
                lost,
                released,
                "round cut short: a replica's sweep runs it again once"
            );
        }
    }

    fn log_finished(&self, lost: bool) {
        tracing::info!(target: TARGET,
            job = ?self.job,
            instant = %Rfc3339(self.instant),
            term = self.term,
            rerun = self.kind.rerun,
            catch_up = self.kind.catch_up,
            elapsed = ?self.elapsed,
            lost,
            "round finished"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> UtcMillis {
        UtcMillis::from_millis(ms)
    }

    #[test]
    fn how_a_round_ended_is_read_from_what_it_returned_and_when() {
        let cases = [
            // (returned Ok, context ended) -> ending
            ((true, false), Ending::Ran),
            // Ok after the shutdown or the loss: it ran to its end.
            ((true, true), Ending::Ran),
            ((false, false), Ending::Failed),
            // An error once the context ended: it stopped early.
            ((false, true), Ending::CutShort),
        ];
        for ((ok, ended), ending) in cases {
            assert_eq!(
                Ending::of(ok, ended),
                ending,
                "returned ok {ok}, ended {ended}"
            );
        }
    }

    #[test]
    fn a_round_is_finished_released_or_left_by_how_it_ended() {
        let instant = at(60_000);
        let (earlier, later) = (at(30_000), at(180_000));
        let finish = |ms| Settle::Finish { passed: at(ms) };
        let cases = [
            // (ending, lost, latest instant by the end) -> settle
            ((Ending::Ran, false, Some(instant)), finish(60_000)),
            // An overrun takes the instants it covered along.
            ((Ending::Ran, false, Some(later)), finish(180_000)),
            // The end is recorded without the lease, too.
            ((Ending::Ran, true, Some(later)), finish(180_000)),
            ((Ending::Failed, false, Some(later)), finish(180_000)),
            ((Ending::Failed, true, Some(instant)), finish(60_000)),
            // Never before the round's own instant (a clock read back).
            ((Ending::Ran, false, Some(earlier)), finish(60_000)),
            ((Ending::Failed, false, None), finish(60_000)),
            // Cut short: released for a rerun while held, else left to expire.
            ((Ending::CutShort, false, Some(later)), Settle::Release),
            ((Ending::CutShort, false, None), Settle::Release),
            ((Ending::CutShort, true, Some(later)), Settle::Leave),
            ((Ending::CutShort, true, None), Settle::Leave),
        ];
        for ((ending, lost, latest), settled) in cases {
            assert_eq!(
                settle(ending, lost, instant, latest),
                settled,
                "{ending:?}, lost {lost}, latest {latest:?}"
            );
        }
    }
}
