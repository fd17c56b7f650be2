//! Jobs and the rounds they run.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use lease_core::{BoxError, CancellationToken, LeaseContext, UtcMillis};
use tokio_util::sync::WaitForCancellationFuture;

use crate::schedule::Rfc3339;

/// What a job's function returns: `Ok(())` when the round did its work,
/// an error when it failed or stopped early (see [`Round::check`]).
pub type JobResult = Result<(), BoxError>;

type BoxFuture = Pin<Box<dyn Future<Output = JobResult> + Send + 'static>>;
pub(crate) type JobFn = Arc<dyn Fn(Round) -> BoxFuture + Send + Sync + 'static>;

/// A job to register on a [`Scheduler`](crate::Scheduler): a name, a
/// schedule and an async function run once per instant.
///
/// ```
/// use lease_scheduler::{Job, Round};
///
/// let report = Job::new("nightly-report", "CRON_TZ=Europe/Berlin 0 30 2 * * *", |round: Round| async move {
///     // ... the work, on `round` (it ends at shutdown or when the lease is lost) ...
///     round.check()?; // stop early, as cut short, once the round's context has ended
///     Ok(())
/// });
/// let warm = Job::new("warm-cache", "@every 5m", |_round| async { Ok(()) }).per_instance();
/// # let _ = (report, warm);
/// ```
#[must_use = "a job runs only once registered on a scheduler"]
pub struct Job {
    pub(crate) name: String,
    pub(crate) schedule: String,
    pub(crate) time_zone: Option<String>,
    pub(crate) per_instance: bool,
    pub(crate) missed: Option<MissedRuns>,
    pub(crate) per_job_metrics: bool,
    pub(crate) run: JobFn,
}

/// What a job does about the instants of its schedule that no replica ran
/// when they came: the whole cluster was down, its processes stalled, or the
/// database did not answer until a later instant was due. Set per job with
/// [`Job::missed`]; the crate docs (*Missed runs*) draw each as a timeline.
///
/// Instants skipped because a round of the job still ran when they came (an
/// overrun) are not missed: the round that overran covered them, under
/// [`Skip`](MissedRuns::Skip) and [`Latest`](MissedRuns::Latest). Under
/// [`Backfill`](MissedRuns::Backfill) they are run afterwards, one by one.
///
/// ```
/// use std::time::Duration;
/// use lease_scheduler::{Job, MissedRuns};
///
/// // An instant missed is lost: the job waits for the next one.
/// let heartbeat = Job::new("heartbeat", "@every 1m", |_round| async { Ok(()) })
///     .missed(MissedRuns::Skip);
/// // The default: the latest instant missed runs once, as soon as a replica can.
/// let report = Job::new("report", "@daily", |_round| async { Ok(()) })
///     .missed(MissedRuns::Latest);
/// // Every instant missed in the last 6 hours runs, oldest first, one at a time.
/// let billing = Job::new("billing", "@hourly", |_round| async { Ok(()) })
///     .missed(MissedRuns::Backfill { look_back: Duration::from_secs(6 * 3600) });
/// # let _ = (heartbeat, report, billing);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MissedRuns {
    /// An instant missed is lost: as the scheduler starts the job waits for
    /// its next instant, and after a stall it runs only the latest instant
    /// that came, as late as it is (its successor has not come yet), never
    /// the older ones.
    Skip,
    /// The default. As [`Skip`](MissedRuns::Skip), and in addition, as the
    /// scheduler starts, the latest instant missed runs once (a catch-up,
    /// [`Round::is_catch_up`]) when the job has run before, no replica has
    /// claimed that instant, and it came within the scheduler's
    /// [`catch_up_look_back`](crate::SchedulerBuilder::catch_up_look_back)
    /// (24 h by default; zero makes this [`Skip`](MissedRuns::Skip)). After a
    /// stall the latest instant that came also runs as a catch-up.
    Latest,
    /// Every instant missed within `look_back` of now runs, oldest first, one
    /// round at a time (a catch-up, [`Round::is_catch_up`]), and so does
    /// every instant an overrun covered; then the job goes on with its
    /// instants as they come. The replicas claim the instants in order
    /// through the database, so each still runs at most once in the cluster,
    /// and a round cut short is run again before any later instant is
    /// claimed. A job that has never run backfills nothing. Each instant
    /// costs two more reads (the job's unfinished round and last instant).
    Backfill {
        /// How far back missed instants are run; older ones are lost.
        look_back: Duration,
    },
}

impl fmt::Debug for Job {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Job")
            .field("name", &self.name)
            .field("schedule", &self.schedule)
            .field("time_zone", &self.time_zone)
            .field("per_instance", &self.per_instance)
            .field("missed", &self.missed)
            .field("per_job_metrics", &self.per_job_metrics)
            .finish_non_exhaustive()
    }
}

impl Job {
    /// A job named `name` (its lease is `cron:<name>`) that runs `run` at
    /// every instant of `schedule` (see [`Schedule`](crate::Schedule) for the
    /// forms), once across every replica of the cluster.
    ///
    /// Nothing is checked here: [`SchedulerBuilder::build`](crate::SchedulerBuilder::build)
    /// refuses an empty, blank, duplicate or over-long name, a name with a
    /// control character, and a schedule it cannot read, before anything
    /// runs.
    pub fn new<F, Fut>(name: impl Into<String>, schedule: impl Into<String>, run: F) -> Self
    where
        F: Fn(Round) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = JobResult> + Send + 'static,
    {
        Job {
            name: name.into(),
            schedule: schedule.into(),
            time_zone: None,
            per_instance: false,
            missed: None,
            per_job_metrics: false,
            run: Arc::new(move |round| Box::pin(run(round))),
        }
    }

    /// Reads the schedule's cron fields in the IANA time zone `zone`
    /// (`Europe/Berlin`) instead of UTC. The same as a `CRON_TZ=<zone>`
    /// prefix; giving both with different zones is refused when the
    /// scheduler is built.
    pub fn time_zone(mut self, zone: impl Into<String>) -> Self {
        self.time_zone = Some(zone.into());
        self
    }

    /// What the job does about instants no replica ran when they came (see
    /// [`MissedRuns`]); [`MissedRuns::Latest`] unless set. A per-instance job
    /// ignores it: it never catches up.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lease_scheduler::{Job, MissedRuns};
    ///
    /// let job = Job::new("invoices", "@hourly", |_round| async { Ok(()) })
    ///     .missed(MissedRuns::Backfill { look_back: Duration::from_secs(24 * 3600) });
    /// # let _ = job;
    /// ```
    pub fn missed(mut self, policy: MissedRuns) -> Self {
        self.missed = Some(policy);
        self
    }

    /// Also records how late this job's scheduled rounds start in the
    /// histogram `lease_scheduler_job_start_delay_seconds`, labelled `job` =
    /// its name ([`metrics::names::JOB_START_DELAY`](crate::metrics::names::JOB_START_DELAY)).
    /// Off by default: a series per job multiplies with the jobs, and a
    /// scheduler may run thousands; turn it on for the few jobs whose
    /// lateness is watched. Every job's lateness is also on its rounds'
    /// spans (`late_ms`).
    ///
    /// ```
    /// use lease_scheduler::Job;
    ///
    /// let job = Job::new("settlement", "0 0 17 * * MON-FRI", |_round| async { Ok(()) })
    ///     .per_job_metrics();
    /// # let _ = job;
    /// ```
    pub fn per_job_metrics(mut self) -> Self {
        self.per_job_metrics = true;
        self
    }

    /// Runs the job on every replica at every instant, without a lease: for
    /// work local to each process (a cache to refresh, a local file to
    /// rotate). Its rounds have no term, are never rerun and never caught
    /// up; the rest (schedules, overruns, shutdown) is the same.
    pub fn per_instance(mut self) -> Self {
        self.per_instance = true;
        self
    }
}

/// One round of a job: which job, which instant, under which term, and the
/// cancellation the work stops on.
///
/// The round's context ends when the scheduler shuts down, when the
/// round's lease is lost (the database stopped answering its renewals, or
/// someone took the name), or when its holder is asked to resign
/// ([`Leases::request_resign`](lease_core::Leases::request_resign): the
/// cause is [`EndCause::Resigned`](lease_core::EndCause::Resigned)). Work that sees it end should stop, and return an
/// error (such as the one [`check`](Round::check) returns): the round then
/// counts as cut short, and is given back to run once more (see the crate
/// docs' *Settling*). Returning `Ok(())` says the round ran to its end.
///
/// Cheap to clone.
#[derive(Clone)]
pub struct Round {
    pub(crate) job: Arc<str>,
    pub(crate) instant: UtcMillis,
    pub(crate) rerun: bool,
    pub(crate) catch_up: bool,
    pub(crate) lease: Option<LeaseContext>,
    pub(crate) cancel: CancellationToken,
}

impl fmt::Debug for Round {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Round")
            .field("job", &self.job)
            .field("instant", &Rfc3339(self.instant))
            .field("term", &self.term())
            .field("rerun", &self.rerun)
            .field("catch_up", &self.catch_up)
            .field("cancelled", &self.cancel.is_cancelled())
            .finish()
    }
}

impl Round {
    /// The job's name, as registered (without the `cron:` prefix).
    #[must_use]
    pub fn job(&self) -> &str {
        &self.job
    }

    /// The instant this round runs for, in UTC milliseconds: the same on
    /// every replica, and for a rerun the instant of the round cut short.
    /// It displays as the scheduler's events write instants, an RFC 3339
    /// time in UTC with milliseconds.
    ///
    /// ```
    /// use lease_scheduler::{Job, Round};
    ///
    /// let job = Job::new("report", "@hourly", |round: Round| async move {
    ///     println!("report for {}", round.instant()); // report for 2026-12-01T10:00:00.000Z
    ///     let _ms: i64 = round.instant().as_millis();
    ///     Ok(())
    /// });
    /// # let _ = job;
    /// ```
    #[must_use]
    pub fn instant(&self) -> UtcMillis {
        self.instant
    }

    /// [`instant`](Round::instant) as a [`SystemTime`].
    #[must_use]
    pub fn instant_time(&self) -> SystemTime {
        self.instant.to_system_time()
    }

    /// The term of the round's lease: stamp it on whatever leaves the
    /// database so that the outside world can refuse a stale round. `None`
    /// for a per-instance job.
    #[must_use]
    pub fn term(&self) -> Option<u64> {
        self.lease.as_ref().map(LeaseContext::term)
    }

    /// Whether this round runs an instant a second time, its first round
    /// having been cut short.
    #[must_use]
    pub fn is_rerun(&self) -> bool {
        self.rerun
    }

    /// Whether this round runs an instant that no replica ran when it came:
    /// the latest one, as the scheduler started or after a stall
    /// ([`MissedRuns::Latest`]), or one of those a backfill runs
    /// ([`MissedRuns::Backfill`]).
    #[must_use]
    pub fn is_catch_up(&self) -> bool {
        self.catch_up
    }

    /// The lease context the round runs under: pass it to a backend's guarded
    /// transaction so that the transaction verifies the lease first. `None`
    /// for a per-instance job.
    #[must_use]
    pub fn lease(&self) -> Option<&LeaseContext> {
        self.lease.as_ref()
    }

    /// The token that is cancelled when the round must stop.
    #[must_use]
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Waits until the round's context ends.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.cancel.cancelled()
    }

    /// Whether the round's context has ended.
    #[must_use]
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// `Ok(())` while the round may go on; once its context has ended, a
    /// [`CutShort`] error to return with `?`, so that the round counts as cut
    /// short and runs once more.
    ///
    /// # Errors
    ///
    /// [`CutShort`] once the context has ended.
    pub fn check(&self) -> Result<(), CutShort> {
        if self.cancel.is_cancelled() {
            Err(CutShort {
                job: self.job.to_string(),
                instant: self.instant,
            })
        } else {
            Ok(())
        }
    }
}

/// A round stopped before its end because its context ended: what
/// [`Round::check`] returns.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[error("round of job {job:?} for {instant} cut short", instant = Rfc3339(*instant))]
pub struct CutShort {
    /// The job.
    pub job: String,
    /// The round's instant.
    pub instant: UtcMillis,
}

impl fmt::Debug for CutShort {
    /// The message, on one line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
