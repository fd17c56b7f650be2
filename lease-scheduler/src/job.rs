//! Jobs and the rounds they run.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::SystemTime;

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
    pub(crate) run: JobFn,
}

impl fmt::Debug for Job {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Job")
            .field("name", &self.name)
            .field("schedule", &self.schedule)
            .field("time_zone", &self.time_zone)
            .field("per_instance", &self.per_instance)
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

    /// Whether this round runs, as the scheduler started, the last instant
    /// that came while no replica ran the job.
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
