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
use crate::scheduler::{JobState, Policy};

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
    /// Stops the loop: no instant is claimed once it is cancelled (the
    /// scheduler's shutdown, or the job removed or replaced).
    pub(crate) shutdown: CancellationToken,
    /// Ends the context of the job's rounds: the scheduler's shutdown, or
    /// the job removed or replaced with [`Removal::CutShort`](crate::Removal).
    /// `shutdown` is its child.
    pub(crate) rounds: CancellationToken,
    pub(crate) running: Running,
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
        match self.job.policy {
            Policy::Latest { look_back } => {
                let from = cursor;
                if let Some(ran) = self.catch_up(cursor, look_back).await {
                    self.warn_overrun(ran, from);
                    cursor = cursor.max(ran.end);
                }
            }
            Policy::Backfill { look_back } => {
                cursor = cursor.max(self.backfill(None, look_back).await);
            }
            Policy::Skip => {}
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
                    // the rerun holds the name are skipped (or backfilled).
                    let from = cursor;
                    if let Some(ran) = self.rerun(offer).await {
                        cursor = cursor.max(ran.end);
                        match self.job.policy {
                            // What came meanwhile runs now.
                            Policy::Backfill { look_back } if !ran.cut_short => {
                                cursor = cursor.max(self.backfill(None, look_back).await);
                            }
                            Policy::Backfill { .. } => {}
                            Policy::Skip | Policy::Latest { .. } => self.warn_overrun(ran, from),
                        }
                    }
                    continue;
                }
                () = self.clock.sleep_until(next) => {}
            }
            cursor = next;
            if self.job.per_instance {
                if let Some(ran) = self.local_round(next).await {
                    self.warn_overrun(ran, next);
                    cursor = cursor.max(ran.end);
                }
                continue;
            }
            if let Policy::Backfill { look_back } = self.job.policy {
                cursor = cursor.max(self.backfill(Some(next), look_back).await);
                continue;
            }
            // Several instants came at once (the process or its runtime
            // stalled): the older ones are missed, the latest is still due.
            let now = self.clock.now();
            let latest = self
                .job
                .schedule
                .latest_at_or_before(now)
                .map_or(next, |l| l.max(next));
            if latest > next {
                self.log_missed(next, latest, "the scheduler did not wake in time");
            }
            cursor = latest;
            let kind = Kind {
                rerun: false,
                catch_up: latest > next && matches!(self.job.policy, Policy::Latest { .. }),
            };
            if let Some(ran) = self.claim(latest, kind).await {
                self.warn_overrun(ran, latest);
                cursor = cursor.max(ran.end);
            }
        }
    }

    /// The instants from `first` to before `latest` were missed: warns and
    /// counts them.
    fn log_missed(&self, first: UtcMillis, latest: UtcMillis, why: &'static str) {
        let schedule = &self.job.schedule;
        let before = UtcMillis::from_millis(first.as_millis() - 1);
        let missed = schedule.count_between(before, latest).saturating_sub(1);
        if missed == 0 {
            return;
        }
        metrics::missed(missed);
        tracing::warn!(target: TARGET,
            job = ?self.job.name,
            missed,
            first_missed = %Rfc3339(first),
            next = %Rfc3339(latest),
            why,
            "instants missed: no round ran them"
        );
    }

    /// The start-up catch-up: the schedule's most recent instant, when it
    /// came within the look-back and the job has run before but not since.
    async fn catch_up(&self, now: UtcMillis, look_back: Duration) -> Option<Ran> {
        let job = &self.job;
        let latest = job.schedule.latest_at_or_before(now)?;
        let age = u64::try_from(now.as_millis() - latest.as_millis()).unwrap_or(u64::MAX);
        if Duration::from_millis(age) > look_back {
            return None;
        }
        let last = self.last_instant(latest, "catch-up").await?;
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

    /// The job's last instant on record, retried until the instant after
    /// `instant` is due; `None` when given up.
    async fn last_instant(
        &self,
        instant: UtcMillis,
        what: &'static str,
    ) -> Option<Option<UtcMillis>> {
        let give_up = self.next_due(instant);
        loop {
            match self.leases.last_instant(&self.job.lease_name).await {
                Ok(last) => return Some(last),
                Err(error) => {
                    if !self
                        .retry_or_give_up(instant, give_up, &error, what, RoundLabel::CatchUp)
                        .await
                    {
                        return None;
                    }
                }
            }
        }
    }

    /// A backfill ([`MissedRuns::Backfill`](crate::MissedRuns::Backfill)):
    /// runs the instants due after the last one on record (none older than
    /// the look-back), oldest first, one at a time, each claimed through the
    /// database so that the replicas take them in order and once each. A
    /// round cut short and free to claim again is run again first, so that
    /// no claim of a later instant gives it up. `came` is the instant whose
    /// coming woke the job (`None` as the scheduler starts): what runs when
    /// the job has no record yet. Stops when nothing more is due, or a claim
    /// was refused (a peer runs the job: the next instant tries again), or a
    /// round was cut short; returns the time to wait for the next instant
    /// from.
    async fn backfill(&self, came: Option<UtcMillis>, look_back: Duration) -> UtcMillis {
        let job = &self.job;
        // Instants that came before the scheduler started, or before a
        // rerun ended, were missed, as are those older than the latest due.
        let missed_up_to = if came.is_none() {
            self.clock.now()
        } else {
            UtcMillis::EPOCH
        };
        let mut first = came;
        let mut told = false;
        loop {
            let now = self.clock.now();
            if self.shutdown.is_cancelled() {
                return now;
            }
            let Some(current) = job.schedule.latest_at_or_before(now) else {
                return now;
            };
            // A round cut short comes first: claiming a later instant would
            // give it up.
            match self.leases.unfinished_instants(&[&job.lease_name]).await {
                Ok(found) => {
                    if let Some(u) = found.into_iter().next() {
                        match self.rerun(u).await {
                            Some(ran) if ran.cut_short => return self.clock.now(),
                            Some(_) => continue,
                            None => {}
                        }
                    }
                }
                Err(error) => tracing::debug!(target: TARGET,
                    job = ?job.name,
                    error = %Escaped(Chain(&error)),
                    "could not look for a round cut short before backfilling"
                ),
            }
            let Some(last) = self.last_instant(current, "backfill").await else {
                return self.clock.now();
            };
            let floor = UtcMillis::from_millis(
                now.as_millis()
                    .saturating_sub(i64::try_from(look_back.as_millis()).unwrap_or(i64::MAX)),
            );
            let candidate = match (last, first.take()) {
                (Some(last), _) => {
                    let before_floor = UtcMillis::from_millis(floor.as_millis().saturating_sub(1));
                    if last < before_floor && !told {
                        told = true;
                        if let Some(oldest) = job.schedule.next_after(last) {
                            let kept = job.schedule.next_after(before_floor).unwrap_or(now);
                            self.log_missed(oldest, kept, "older than the backfill's look-back");
                        }
                    }
                    job.schedule.next_after(last.max(before_floor))
                }
                // The job has never run: nothing to backfill, only the
                // instant that came, if one did.
                (None, came) => came,
            };
            let Some(instant) = candidate.filter(|&c| c <= now) else {
                return now;
            };
            let kind = Kind {
                rerun: false,
                catch_up: instant < current || instant <= missed_up_to,
            };
            if kind.catch_up {
                tracing::info!(target: TARGET,
                    job = ?job.name,
                    instant = %Rfc3339(instant),
                    last = last.map(|l| Rfc3339(l).to_string()),
                    "backfilling an instant missed"
                );
            }
            match self.claim(instant, kind).await {
                None => return self.clock.now(),
                Some(ran) if ran.cut_short => return self.clock.now(),
                Some(ran) => {
                    // Nothing more due: no need to read the record again.
                    if job
                        .schedule
                        .next_after(instant)
                        .is_none_or(|n| n > ran.end.max(self.clock.now()))
                    {
                        return self.clock.now();
                    }
                }
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
        let Ran { instant, end, .. } = ran;
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
