//! The task of one job: its loop over the schedule's instants, the
//! start-up catch-up, the claim of each instant (retried within the
//! instant), and the claim of a round cut short found by the sweep. How a
//! claimed round runs and is settled is [`round`](crate::round)'s.

use std::sync::Arc;
use std::time::Duration;

use lease_core::{CancellationToken, Chain, Error as LeaseError, Leases, Unfinished, UtcMillis};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::clock::Clock;
use crate::log::{Escaped, TARGET};
use crate::metrics::{self, RoundLabel};
use crate::round::{Ran, Running};
use crate::schedule::Rfc3339;
use crate::scheduler::JobState;

/// What a round is: the identity the job's function receives.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Kind {
    pub(crate) rerun: bool,
    pub(crate) catch_up: bool,
}

impl Kind {
    pub(crate) fn label(self) -> RoundLabel {
        if self.rerun {
            RoundLabel::Rerun
        } else if self.catch_up {
            RoundLabel::CatchUp
        } else {
            RoundLabel::Scheduled
        }
    }
}

/// The loop of one job.
pub(crate) struct JobTask {
    pub(crate) job: Arc<JobState>,
    pub(crate) leases: Leases,
    pub(crate) clock: Arc<Clock>,
    pub(crate) shutdown: CancellationToken,
    pub(crate) running: Running,
    pub(crate) look_back: Duration,
}

impl JobTask {
    /// Runs the job until the shutdown: each instant of its schedule, and
    /// each round cut short the sweep offers it.
    pub(crate) async fn run(self, mut offers: mpsc::Receiver<Unfinished>) {
        if self.shutdown.is_cancelled() {
            return;
        }
        // The next instant is the first one after `cursor`.
        let mut cursor = self.clock.now();
        if !self.job.per_instance && !self.look_back.is_zero() {
            let from = cursor;
            if let Some(ran) = self.catch_up(cursor).await {
                self.warn_overrun(ran, from);
                cursor = cursor.max(ran.end);
            }
        }
        loop {
            if self.shutdown.is_cancelled() {
                return;
            }
            let Some(next) = self.job.schedule.next_after(cursor) else {
                tracing::info!(target: TARGET, job = ?self.job.name, "the schedule has no instant left");
                self.shutdown.cancelled().await;
                return;
            };
            tokio::select! {
                biased;
                () = self.shutdown.cancelled() => return,
                Some(offer) = offers.recv() => {
                    // No instant came while waiting: those that come while
                    // the rerun holds the name are skipped.
                    let from = cursor;
                    if let Some(ran) = self.rerun(offer).await {
                        self.warn_overrun(ran, from);
                        cursor = cursor.max(ran.end);
                    }
                    continue;
                }
                () = self.clock.sleep_until(next) => {}
            }
            cursor = next;
            let ended = if self.job.per_instance {
                self.local_round(next).await
            } else {
                self.claim(
                    next,
                    Kind {
                        rerun: false,
                        catch_up: false,
                    },
                )
                .await
            };
            if let Some(ran) = ended {
                self.warn_overrun(ran, next);
                cursor = cursor.max(ran.end);
            }
        }
    }

    /// The start-up catch-up: the schedule's most recent instant, when it
    /// came within the look-back and the job has run before but not since.
    async fn catch_up(&self, now: UtcMillis) -> Option<Ran> {
        let job = &self.job;
        let latest = job.schedule.latest_at_or_before(now)?;
        let age = u64::try_from(now.as_millis() - latest.as_millis()).unwrap_or(u64::MAX);
        if Duration::from_millis(age) > self.look_back {
            return None;
        }
        let give_up = self.next_due(latest);
        let last = loop {
            match self.leases.last_instant(&job.lease_name).await {
                Ok(last) => break last,
                Err(error) => {
                    if !self
                        .retry_or_give_up(latest, give_up, &error, "catch-up", RoundLabel::CatchUp)
                        .await
                    {
                        return None;
                    }
                }
            }
        };
        match last {
            None => {
                tracing::debug!(target: TARGET, job = ?job.name, "no catch-up: the job has never run");
                None
            }
            Some(last) if last >= latest => None,
            Some(last) => {
                tracing::info!(target: TARGET,
                    job = ?job.name,
                    instant = %Rfc3339(latest),
                    last = %Rfc3339(last),
                    "catching up the last instant missed"
                );
                self.claim(
                    latest,
                    Kind {
                        rerun: false,
                        catch_up: true,
                    },
                )
                .await
            }
        }
    }

    /// When the instant after `instant` is due, by the monotonic clock.
    fn next_due(&self, instant: UtcMillis) -> Option<Instant> {
        self.job
            .schedule
            .next_after(instant)
            .map(|next| self.clock.deadline(next))
    }

    /// After a database error: waits the retry interval and returns true,
    /// or returns false when the next instant is due first (or the
    /// scheduler shuts down).
    async fn retry_or_give_up(
        &self,
        instant: UtcMillis,
        give_up: Option<Instant>,
        error: &LeaseError,
        what: &'static str,
        round: RoundLabel,
    ) -> bool {
        let job = &self.job.name;
        if !error.is_retryable() {
            metrics::claim(round, "error");
            tracing::error!(target: TARGET, job = ?job, instant = %Rfc3339(instant), error = %Escaped(Chain(error)), what, "round not run: the claim was refused");
            return false;
        }
        let retry_at = Instant::now() + self.leases.timings().retry_interval();
        if give_up.is_some_and(|at| retry_at >= at) {
            metrics::claim(round, "gave_up");
            tracing::warn!(target: TARGET,
                job = ?job,
                instant = %Rfc3339(instant),
                error = %Escaped(Chain(error)),
                what,
                "gave up the instant: the database did not answer before the next instant was due"
            );
            return false;
        }
        tracing::warn!(target: TARGET,
            job = ?job,
            instant = %Rfc3339(instant),
            error = %Escaped(Chain(error)),
            what,
            retry_in = ?self.leases.timings().retry_interval(),
            "the database did not answer; trying again"
        );
        tokio::select! {
            biased;
            () = self.shutdown.cancelled() => {
                metrics::claim(round, "gave_up");
                false
            }
            () = tokio::time::sleep_until(retry_at) => true,
        }
    }

    /// Claims `instant` (retrying a database error until the next instant is
    /// due) and runs its round; returns when the round ended, if one ran.
    async fn claim(&self, instant: UtcMillis, kind: Kind) -> Option<Ran> {
        let job = &self.job;
        let give_up = self.next_due(instant);
        loop {
            match self.leases.claim_instant(&job.lease_name, instant).await {
                Ok(None) => {
                    metrics::claim(kind.label(), "skipped");
                    tracing::debug!(target: TARGET,
                        job = ?job.name,
                        instant = %Rfc3339(instant),
                        catch_up = kind.catch_up,
                        "instant skipped: claimed elsewhere, or the name is held"
                    );
                    return None;
                }
                Ok(Some(handle)) => {
                    metrics::claim(kind.label(), "claimed");
                    if let Some(given_up) = handle.superseded() {
                        metrics::superseded();
                        tracing::warn!(target: TARGET,
                            job = ?job.name,
                            instant = %Rfc3339(instant),
                            superseded = %Rfc3339(given_up.instant),
                            superseded_rerun = given_up.rerun,
                            term = handle.term(),
                            "gave up a round cut short: its instant never runs again"
                        );
                    }
                    return Some(self.round(handle, instant, kind).await);
                }
                Err(error) => {
                    if !self
                        .retry_or_give_up(instant, give_up, &error, "claim", kind.label())
                        .await
                    {
                        return None;
                    }
                }
            }
        }
    }

    /// Claims an instant found cut short a second time and runs it again.
    async fn rerun(&self, offer: Unfinished) -> Option<Ran> {
        let job = &self.job;
        match self.leases.claim_rerun(&offer).await {
            Ok(Some(handle)) => {
                metrics::claim(RoundLabel::Rerun, "claimed");
                tracing::info!(target: TARGET,
                    job = ?job.name,
                    instant = %Rfc3339(offer.instant),
                    term = handle.term(),
                    "running a round cut short again"
                );
                Some(
                    self.round(
                        handle,
                        offer.instant,
                        Kind {
                            rerun: true,
                            catch_up: false,
                        },
                    )
                    .await,
                )
            }
            Ok(None) => {
                metrics::claim(RoundLabel::Rerun, "skipped");
                tracing::debug!(target: TARGET,
                    job = ?job.name,
                    instant = %Rfc3339(offer.instant),
                    "rerun skipped: claimed again elsewhere, finished, or superseded"
                );
                None
            }
            Err(error) => {
                metrics::claim(RoundLabel::Rerun, "error");
                tracing::warn!(target: TARGET,
                    job = ?job.name,
                    instant = %Rfc3339(offer.instant),
                    error = %Escaped(Chain(&error)),
                    "rerun claim failed: the next sweep tries again"
                );
                None
            }
        }
    }

    /// Warns of the instants after `from` that came by the end of a round:
    /// they are skipped. `from` is the round's instant, or for a rerun or a
    /// catch-up, when the job was last waiting for an instant.
    fn warn_overrun(&self, ran: Ran, from: UtcMillis) {
        let Ran { instant, end } = ran;
        let schedule = &self.job.schedule;
        let skipped = schedule.count_between(from, end);
        if skipped > 0 {
            metrics::overrun(skipped);
            let first = schedule.next_after(from).unwrap_or(end);
            let last = schedule.latest_at_or_before(end).unwrap_or(end);
            tracing::warn!(target: TARGET,
                job = ?self.job.name,
                instant = %Rfc3339(instant),
                skipped,
                first_skipped = %Rfc3339(first),
                last_skipped = %Rfc3339(last),
                "the round overran: instants skipped"
            );
        }
    }
}
