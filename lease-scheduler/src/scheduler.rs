//! The scheduler: its builder, which checks every job before anything runs,
//! and [`Scheduler::run`], which starts one task per job
//! ([`task`](crate::task)) and the rerun sweep ([`sweep`](crate::sweep)),
//! and at the shutdown waits for the rounds in flight
//! ([`round`](crate::round)).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lease_core::{CancellationToken, Chain, Leases, MAX_NAME_BYTES, validate_name};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::Instrument as _;

use crate::clock::Clock;
use crate::error::Error;
use crate::job::{Job, JobFn, MissedRuns};
use crate::log::Escaped;
use crate::round::Running;
use crate::schedule::{Rfc3339, Schedule};
use crate::sweep::Sweep;
use crate::task::JobTask;

/// The prefix of every job's lease name.
pub const PREFIX: &str = "cron:";

/// How far back a start-up catch-up looks by default: 24 hours.
pub const DEFAULT_LOOK_BACK: Duration = Duration::from_secs(24 * 3600);

/// How often the rerun sweep looks for rounds cut short by default: every
/// 15 s, plus a random part of up to a fifteenth of it (1 s).
pub const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(15);

/// Cron jobs on a [`Leases`] coordinator: each instant of each job runs once
/// across the replicas that run the same scheduler, a round cut short runs
/// once more, and the last instant missed while no replica ran is caught up
/// once as the scheduler starts (each job may choose otherwise, see
/// [`MissedRuns`]). See the crate docs for the whole contract.
///
/// Built with [`Scheduler::builder`]; driven by [`Scheduler::run`].
///
/// # Examples
///
/// Two replicas (two coordinators on one in-memory SQLite database) run a
/// job every 200 ms for a second: each instant runs once, on one of them.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use std::time::Duration;
/// use lease_core::{CancellationToken, Leases};
/// use lease_scheduler::{Job, Round, Scheduler};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
/// let store = Arc::new(lease_sqlite::SqliteStore::open_in_memory()?);
/// let ran = Arc::new(Mutex::new(Vec::new()));
/// let shutdown = CancellationToken::new();
/// let mut replicas = Vec::new();
/// for instance in ["a", "b"] {
///     let leases = Leases::from_arc(store.clone()).with_instance(instance)?;
///     leases.migrate().await?;
///     let ran = ran.clone();
///     let scheduler = Scheduler::builder(leases)
///         .job(Job::new("tick", "@every 200ms", move |round: Round| {
///             ran.lock().unwrap().push(round.instant());
///             async { Ok(()) }
///         }))
///         .build()?;
///     let shutdown = shutdown.clone();
///     replicas.push(tokio::spawn(async move {
///         scheduler.run(&shutdown, Duration::from_secs(5)).await
///     }));
/// }
/// tokio::time::sleep(Duration::from_millis(1_050)).await;
/// shutdown.cancel();
/// for replica in replicas {
///     replica.await??;
/// }
/// let ran = ran.lock().unwrap();
/// assert!(ran.len() >= 4, "{ran:?}");
/// assert!(ran.windows(2).all(|w| w[0] < w[1]), "each instant once: {ran:?}");
/// # Ok::<(), Box<dyn std::error::Error>>(()) })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Scheduler {
    inner: Arc<Inner>,
}

struct Inner {
    leases: Leases,
    jobs: Vec<Arc<JobState>>,
    look_back: Duration,
    sweep_interval: Duration,
}

/// A registered job, checked.
pub(crate) struct JobState {
    pub(crate) name: Arc<str>,
    pub(crate) lease_name: String,
    pub(crate) schedule: Schedule,
    pub(crate) per_instance: bool,
    pub(crate) policy: Policy,
    pub(crate) per_job_metrics: bool,
    pub(crate) run: JobFn,
}

/// A job's [`MissedRuns`], with the look-back it uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Policy {
    /// Nothing missed runs (also `Latest` with a zero look-back, and every
    /// per-instance job).
    Skip,
    /// The latest instant missed runs once.
    Latest { look_back: Duration },
    /// Every instant missed within the look-back runs, oldest first.
    Backfill { look_back: Duration },
}

impl Policy {
    /// Whether the job runs every missed instant, overruns' included.
    pub(crate) fn backfills(self) -> bool {
        matches!(self, Policy::Backfill { .. })
    }

    fn of(missed: Option<MissedRuns>, per_instance: bool, look_back: Duration) -> Policy {
        match missed.unwrap_or(MissedRuns::Latest) {
            _ if per_instance => Policy::Skip,
            MissedRuns::Skip => Policy::Skip,
            MissedRuns::Latest if look_back.is_zero() => Policy::Skip,
            MissedRuns::Latest => Policy::Latest { look_back },
            MissedRuns::Backfill { look_back } => Policy::Backfill { look_back },
        }
    }
}

impl fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let jobs: Vec<_> = self
            .inner
            .jobs
            .iter()
            .map(|j| (&*j.name, j.schedule.source(), j.per_instance))
            .collect();
        f.debug_struct("Scheduler")
            .field("instance", &self.inner.leases.instance())
            .field("jobs", &jobs)
            .field("look_back", &self.inner.look_back)
            .field("sweep_interval", &self.inner.sweep_interval)
            .finish()
    }
}

/// Registers the jobs of a [`Scheduler`] and its options; [`build`](SchedulerBuilder::build)
/// checks them all before anything runs.
#[must_use]
pub struct SchedulerBuilder {
    leases: Leases,
    jobs: Vec<Job>,
    look_back: Duration,
    sweep_interval: Duration,
}

impl fmt::Debug for SchedulerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchedulerBuilder")
            .field("jobs", &self.jobs)
            .field("look_back", &self.look_back)
            .field("sweep_interval", &self.sweep_interval)
            .finish()
    }
}

impl SchedulerBuilder {
    /// Registers a job.
    pub fn job(mut self, job: Job) -> Self {
        self.jobs.push(job);
        self
    }

    /// How far back the catch-up of [`MissedRuns::Latest`] (every job's
    /// default) looks (default 24 h): as the scheduler starts, a job that has
    /// run before and whose schedule's most recent instant came within this
    /// long, with no replica claiming it, runs that instant once.
    /// [`Duration::ZERO`] turns catch-up off: those jobs then
    /// [`Skip`](MissedRuns::Skip). A [`MissedRuns::Backfill`] has its own.
    pub fn catch_up_look_back(mut self, look_back: Duration) -> Self {
        self.look_back = look_back;
        self
    }

    /// How often the rerun sweep looks for rounds cut short (default 15 s);
    /// a random part of up to a fifteenth of it is added each time, so that
    /// replicas started together do not sweep together. A round cut short
    /// runs again about this long after its lease is given back or expires.
    /// Tests shorten it; a zero interval is taken as 1 ms.
    pub fn sweep_interval(mut self, interval: Duration) -> Self {
        self.sweep_interval = interval.max(Duration::from_millis(1));
        self
    }

    /// Checks every job and builds the scheduler.
    ///
    /// # Errors
    ///
    /// The first problem found, in registration order:
    /// [`Error::EmptyName`], [`Error::BlankName`] (only whitespace),
    /// [`Error::DuplicateName`], [`Error::NameTooLong`] (`cron:` and the
    /// name over [`MAX_NAME_BYTES`] bytes), [`Error::InvalidName`] (a
    /// control character, a newline or an escape say: the lease name is
    /// refused as [`validate_name`](lease_core::validate_name) refuses it,
    /// and [`Leader::run`](lease_core::Leader::run) refuses a leader's) or
    /// [`Error::InvalidSchedule`].
    pub fn build(self) -> Result<Scheduler, Error> {
        let mut seen = HashSet::new();
        let mut jobs = Vec::with_capacity(self.jobs.len());
        for job in self.jobs {
            if job.name.is_empty() {
                return Err(Error::EmptyName);
            }
            if job.name.trim().is_empty() {
                return Err(Error::BlankName { job: job.name });
            }
            if !seen.insert(job.name.clone()) {
                return Err(Error::DuplicateName { job: job.name });
            }
            let lease_name = format!("{PREFIX}{}", job.name);
            if lease_name.len() > MAX_NAME_BYTES {
                let mut end = 40;
                while !lease_name.is_char_boundary(end) {
                    end -= 1;
                }
                return Err(Error::NameTooLong {
                    lease_name: format!("{}...", &lease_name[..end]),
                    len: lease_name.len(),
                    max: MAX_NAME_BYTES,
                    job: job.name,
                });
            }
            if let Err(source) = validate_name(&lease_name) {
                return Err(Error::InvalidName {
                    job: job.name,
                    source,
                });
            }
            let schedule =
                Schedule::parse(&job.schedule, job.time_zone.as_deref()).map_err(|source| {
                    Error::InvalidSchedule {
                        job: job.name.clone(),
                        schedule: job.schedule.clone(),
                        source,
                    }
                })?;
            jobs.push(Arc::new(JobState {
                name: Arc::from(job.name),
                lease_name,
                schedule,
                per_instance: job.per_instance,
                policy: Policy::of(job.missed, job.per_instance, self.look_back),
                per_job_metrics: job.per_job_metrics,
                run: job.run,
            }));
        }
        Ok(Scheduler {
            inner: Arc::new(Inner {
                leases: self.leases,
                jobs,
                look_back: self.look_back,
                sweep_interval: self.sweep_interval,
            }),
        })
    }
}

impl Scheduler {
    /// A builder for a scheduler whose jobs claim their instants through
    /// `leases` (and log its instance id).
    pub fn builder(leases: Leases) -> SchedulerBuilder {
        SchedulerBuilder {
            leases,
            jobs: Vec::new(),
            look_back: DEFAULT_LOOK_BACK,
            sweep_interval: DEFAULT_SWEEP_INTERVAL,
        }
    }

    /// The registered jobs' names, in registration order.
    pub fn jobs(&self) -> impl Iterator<Item = &str> {
        self.inner.jobs.iter().map(|j| &*j.name)
    }

    /// The lease name a job's instants are claimed under: `cron:<job>`.
    #[must_use]
    pub fn lease_name(job: &str) -> String {
        format!("{PREFIX}{job}")
    }

    /// Runs every job until `shutdown` is cancelled, then waits for the
    /// rounds in flight to end, at most `wait`, and returns.
    ///
    /// As it starts it reads the database's clock (the scheduler's clock, see
    /// the crate docs; a scheduler of per-instance jobs alone falls back on
    /// the process's clock when the database does not answer); then each job catches
    /// up (when its look-back allows) and waits for its instants, and the
    /// rerun sweep runs at once and then every sweep interval.
    ///
    /// Cancelling `shutdown` ends every round's context: a round that then
    /// stops early (returns an error) counts as cut short and is released,
    /// so that a peer runs it again within about one sweep; one that returns
    /// `Ok(())` is finished as usual. `wait` bounds the rounds only: a job
    /// with no round in flight (waiting for its next instant, or for the
    /// database to answer a claim, each statement bounded by the timings)
    /// ends once it has seen the shutdown, and is waited for whatever
    /// `wait` is, zero included. A `shutdown` cancelled before the call
    /// starts nothing: the jobs end at once, without a catch-up.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] when the database does not answer as the
    /// scheduler starts (nothing has run); [`Error::ShutdownTimedOut`] when
    /// rounds were still running `wait` after the shutdown: they were aborted
    /// and their leases left to expire, so their instants run again once
    /// elsewhere.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future aborts every job's task and the work of every
    /// round in flight without settling it: their leases expire, and their
    /// instants run again once on a peer, as after a crash.
    pub async fn run(&self, shutdown: &CancellationToken, wait: Duration) -> Result<(), Error> {
        let inner = &self.inner;
        let clock = Arc::new(Clock::from_process());
        let cluster: Vec<_> = inner.jobs.iter().filter(|j| !j.per_instance).collect();
        if let Err(error) = clock.sync(&inner.leases).await {
            if !cluster.is_empty() {
                return Err(Error::Unavailable(error));
            }
            tracing::warn!(
                error = %Escaped(Chain(&error)),
                "could not read the database's clock: per-instance jobs run by this process's clock"
            );
        }
        tracing::info!(
            jobs = inner.jobs.len(),
            instance = ?inner.leases.instance(),
            now = %Rfc3339(clock.now()),
            "scheduler started"
        );
        // At ERROR level, like the lease's own span, so that its field
        // reaches every event whatever level a subscriber filters at.
        let span = tracing::error_span!("scheduler", instance = ?inner.leases.instance());
        let running: Running = Arc::new(watch::channel(BTreeSet::new()).0);
        let mut tasks = JoinSet::new();
        let mut offers = HashMap::new();
        for job in &inner.jobs {
            let (tx, rx) = mpsc::channel(1);
            if !job.per_instance {
                let _ = offers.insert(job.lease_name.clone(), tx);
            }
            let ctx = JobTask {
                job: job.clone(),
                leases: inner.leases.clone(),
                clock: clock.clone(),
                shutdown: shutdown.clone(),
                running: running.clone(),
            };
            let _ = tasks.spawn(ctx.run(rx).instrument(span.clone()));
        }
        if !offers.is_empty() {
            let sweep = Sweep {
                leases: inner.leases.clone(),
                clock: clock.clone(),
                shutdown: shutdown.clone(),
                interval: inner.sweep_interval,
                offers,
            };
            let _ = tasks.spawn(sweep.run().instrument(span.clone()));
        }
        shutdown.cancelled().await;
        tracing::info!(
            ?wait,
            "scheduler stopping: waiting for the rounds in flight"
        );
        let jobs = drain(&mut tasks, &running, Instant::now() + wait).await;
        if jobs.is_empty() {
            tracing::info!("scheduler stopped");
            return Ok(());
        }
        tracing::error!(
            ?jobs,
            ?wait,
            "rounds still running after the shutdown wait: aborting them; their leases expire and \
             a peer runs their instants again"
        );
        tasks.shutdown().await;
        Err(Error::ShutdownTimedOut { jobs, waited: wait })
    }
}

/// Waits for every task to end after the shutdown: for as long as it takes
/// while no round runs, and until `deadline` while one does. Returns the
/// jobs whose rounds still ran once the deadline had passed, sorted; none
/// when every task ended.
async fn drain(tasks: &mut JoinSet<()>, running: &Running, deadline: Instant) -> Vec<String> {
    let mut rounds = running.subscribe();
    let mut past = false;
    loop {
        if past {
            let jobs = rounds.borrow_and_update();
            if !jobs.is_empty() {
                return jobs.iter().map(|job| job.to_string()).collect();
            }
        }
        tokio::select! {
            biased;
            joined = tasks.join_next() => {
                if joined.is_none() {
                    return Vec::new();
                }
            }
            () = tokio::time::sleep_until(deadline), if !past => past = true,
            // `running` outlives this call: a change is a round that began
            // or ended.
            _ = rounds.changed(), if past => {}
        }
    }
}
