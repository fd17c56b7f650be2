//! The scheduler's metrics, through the [`metrics`] facade (as
//! `lease_core::metrics` does for the leases): the process installs whichever
//! recorder it wants, or none, and then these cost nothing. The table is in
//! the crate docs (*Metrics*).
//!
//! No metric carries the job's name: a scheduler may run thousands of jobs
//! (one per tenant, say), and each name would make a series per label
//! combination. Which job did what is in the events (`job` field).

use std::sync::Arc;
use std::time::Duration;

/// The metric names, as constants for dashboards and tests.
pub mod names {
    /// Rounds that ended, by `round` and `outcome`.
    pub const ROUNDS: &str = "lease_scheduler_rounds_total";
    /// What became of each claim the scheduler tried, by `round` and `outcome`.
    pub const CLAIMS: &str = "lease_scheduler_claims_total";
    /// Instants skipped because a round of the job overran them.
    pub const OVERRUN_SKIPPED: &str = "lease_scheduler_overrun_skipped_total";
    /// Instants no round ran: missed while the scheduler did not wake in
    /// time, or older than a backfill's look-back.
    pub const MISSED: &str = "lease_scheduler_missed_total";
    /// Rounds cut short that a later instant's claim gave up (never run again).
    pub const SUPERSEDED: &str = "lease_scheduler_superseded_total";
    /// Rerun sweeps, by `outcome`.
    pub const SWEEPS: &str = "lease_scheduler_sweeps_total";
    /// How late scheduled rounds started after their instant, in seconds.
    pub const START_DELAY: &str = "lease_scheduler_start_delay_seconds";
    /// The same, by `job`, for the jobs registered with
    /// [`Job::per_job_metrics`](crate::Job::per_job_metrics) only.
    pub const JOB_START_DELAY: &str = "lease_scheduler_job_start_delay_seconds";
    /// Instants that came while a round of their job still ran, counted as
    /// they came, by `then` = `skipped` or `deferred` (a backfill runs them
    /// after it).
    pub const STILL_RUNNING: &str = "lease_scheduler_still_running_total";
    /// How long rounds ran, in seconds.
    pub const ROUND_DURATION: &str = "lease_scheduler_round_duration_seconds";
    /// Rounds running in this process now.
    pub const RUNNING: &str = "lease_scheduler_rounds_running";
}

/// The `round` label: what a round is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RoundLabel {
    /// A job's instant, as it came.
    Scheduled,
    /// The start-up catch-up of the last instant missed.
    CatchUp,
    /// A round cut short, run again.
    Rerun,
    /// A per-instance job's round (no lease).
    PerInstance,
}

impl RoundLabel {
    fn as_str(self) -> &'static str {
        match self {
            RoundLabel::Scheduled => "scheduled",
            RoundLabel::CatchUp => "catch_up",
            RoundLabel::Rerun => "rerun",
            RoundLabel::PerInstance => "per_instance",
        }
    }
}

/// How a round ended, as counted: `ran`, `failed` or `cut_short`.
pub(crate) fn round(round: RoundLabel, outcome: &'static str, took: Duration) {
    metrics::counter!(names::ROUNDS, "round" => round.as_str(), "outcome" => outcome).increment(1);
    metrics::histogram!(names::ROUND_DURATION).record(took.as_secs_f64());
}

/// What a claim came to: `claimed`, `skipped`, `gave_up` or `error`.
pub(crate) fn claim(round: RoundLabel, outcome: &'static str) {
    metrics::counter!(names::CLAIMS, "round" => round.as_str(), "outcome" => outcome).increment(1);
}

pub(crate) fn overrun(skipped: u64) {
    metrics::counter!(names::OVERRUN_SKIPPED).increment(skipped);
}

pub(crate) fn missed(n: u64) {
    metrics::counter!(names::MISSED).increment(n);
}

pub(crate) fn superseded() {
    metrics::counter!(names::SUPERSEDED).increment(1);
}

pub(crate) fn sweep(ok: bool) {
    let outcome = if ok { "ok" } else { "error" };
    metrics::counter!(names::SWEEPS, "outcome" => outcome).increment(1);
}

/// How late a round started; also by job for a job that asked for it.
pub(crate) fn start_delay(late_ms: i64, job: Option<&Arc<str>>) {
    let late = Duration::from_millis(u64::try_from(late_ms).unwrap_or(0));
    metrics::histogram!(names::START_DELAY).record(late.as_secs_f64());
    if let Some(job) = job {
        metrics::histogram!(names::JOB_START_DELAY, "job" => job.to_string())
            .record(late.as_secs_f64());
    }
}

/// An instant came while a round of its job still ran.
pub(crate) fn still_running(then: &'static str) {
    metrics::counter!(names::STILL_RUNNING, "then" => then).increment(1);
}

pub(crate) fn running(delta: f64) {
    metrics::gauge!(names::RUNNING).increment(delta);
}
