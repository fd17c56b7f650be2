//! The scheduler: its builder, which checks every job before anything runs,
//! and [`Scheduler::run`], which starts one task per job
//! ([`task`](crate::task)) and the rerun sweep ([`sweep`](crate::sweep)),
//! and at the shutdown waits for the rounds in flight
//! ([`round`](crate::round)).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use lease_core::{CancellationToken, Chain, Leases, MAX_NAME_BYTES, Unfinished, validate_name};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::Instrument as _;

use crate::clock::Clock;
use crate::error::Error;
use crate::job::{Job, JobFn, MissedRuns};
use crate::log::{Escaped, TARGET};
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
/// Built with [`Scheduler::builder`]; driven by [`Scheduler::run`]; its
/// jobs added, replaced and removed, before or while it runs, through
/// [`Scheduler::handle`].
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
    look_back: Duration,
    sweep_interval: Duration,
    registry: Mutex<Registry>,
}

impl Inner {
    fn registry(&self) -> MutexGuard<'_, Registry> {
        // Nothing panics while holding it; a poisoned lock's data is whole.
        self.registry.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The jobs, as registered and changed through [`JobsHandle`], and the
/// calls of [`Scheduler::run`] going on, each told of every change.
struct Registry {
    jobs: Vec<Arc<JobState>>,
    runs: Vec<mpsc::UnboundedSender<Change>>,
}

impl Registry {
    /// Tells every run going on of `change`, forgetting the runs that ended.
    fn tell(&mut self, change: &Change) {
        self.runs.retain(|run| run.send(change.clone()).is_ok());
    }
}

/// A change of the jobs, told to a run going on.
#[derive(Clone)]
enum Change {
    /// Start the job's task (once the task of a job of that name removed
    /// or replaced ended).
    Start(Arc<JobState>),
    /// Stop the job's task, its round in flight as `removal` says.
    Stop { name: Arc<str>, removal: Removal },
}

/// What becomes of the round in flight of a job removed or replaced through
/// a [`JobsHandle`] while [`Scheduler::run`] is going.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// The round runs to its end and is settled as usual (finished); no
    /// instant of the job is claimed after it.
    Finish,
    /// The round's context ends at once, as at the shutdown
    /// ([`Round::cancelled`](crate::Round::cancelled) fires): a round that
    /// then stops early (returns an error) is cut short, its lease given
    /// back and its instant left unfinished, so that a replica that still
    /// runs the job runs it again within about one sweep. A round that
    /// returns `Ok(())` anyway ran to its end and is finished.
    CutShort,
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
        let registry = self.inner.registry();
        let jobs: Vec<_> = registry
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
            jobs.push(Arc::new(check(job, self.look_back, |name| {
                !seen.insert(name.to_owned())
            })?));
        }
        Ok(Scheduler {
            inner: Arc::new(Inner {
                leases: self.leases,
                look_back: self.look_back,
                sweep_interval: self.sweep_interval,
                registry: Mutex::new(Registry {
                    jobs,
                    runs: Vec::new(),
                }),
            }),
        })
    }
}

/// Checks a job as [`SchedulerBuilder::build`] documents; `taken` tells
/// whether its name is already a job's.
fn check(
    job: Job,
    look_back: Duration,
    taken: impl FnOnce(&str) -> bool,
) -> Result<JobState, Error> {
    if job.name.is_empty() {
        return Err(Error::EmptyName);
    }
    if job.name.trim().is_empty() {
        return Err(Error::BlankName { job: job.name });
    }
    if taken(&job.name) {
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
    let schedule = Schedule::parse(&job.schedule, job.time_zone.as_deref()).map_err(|source| {
        Error::InvalidSchedule {
            job: job.name.clone(),
            schedule: job.schedule.clone(),
            source,
        }
    })?;
    Ok(JobState {
        name: Arc::from(job.name),
        lease_name,
        schedule,
        per_instance: job.per_instance,
        policy: Policy::of(job.missed, job.per_instance, look_back),
        per_job_metrics: job.per_job_metrics,
        run: job.run,
    })
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

    /// The jobs' names, in registration order (a job added through
    /// [`JobsHandle::add`] comes last; one replaced keeps its place).
    #[must_use]
    pub fn jobs(&self) -> Vec<String> {
        self.handle().names()
    }

    /// A handle that adds, replaces and removes jobs, before
    /// [`run`](Self::run) or while it is going (see [`JobsHandle`]).
    #[must_use]
    pub fn handle(&self) -> JobsHandle {
        JobsHandle {
            inner: self.inner.clone(),
        }
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
    /// It runs the jobs registered as it starts, and follows the changes
    /// made through [`JobsHandle`] while it goes on.
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
        // The jobs as the run starts, and from then on each change of them.
        let (jobs, mut changes) = {
            let mut registry = inner.registry();
            let (tx, rx) = mpsc::unbounded_channel();
            registry.runs.push(tx);
            (registry.jobs.clone(), rx)
        };
        let cluster = jobs.iter().filter(|j| !j.per_instance).count();
        if let Err(error) = clock.sync(&inner.leases).await {
            if cluster > 0 {
                return Err(Error::Unavailable(error));
            }
            tracing::warn!(
                error = %Escaped(Chain(&error)),
                "could not read the database's clock: per-instance jobs run by this process's clock"
            );
        }
        tracing::info!(
            jobs = jobs.len(),
            instance = ?inner.leases.instance(),
            now = %Rfc3339(clock.now()),
            "scheduler started"
        );
        // At ERROR level, like the lease's own span, so that its field
        // reaches every event whatever level a subscriber filters at.
        let span = tracing::error_span!("scheduler", instance = ?inner.leases.instance());
        let mut live = Live {
            leases: inner.leases.clone(),
            clock: clock.clone(),
            shutdown: shutdown.clone(),
            running: Arc::new(watch::channel(BTreeSet::new()).0),
            tasks: JoinSet::new(),
            offers: Arc::default(),
            jobs: HashMap::new(),
            span: span.clone(),
        };
        for job in jobs {
            live.start(job);
        }
        let sweep = Sweep {
            leases: inner.leases.clone(),
            clock: clock.clone(),
            shutdown: shutdown.clone(),
            interval: inner.sweep_interval,
            offers: live.offers.clone(),
        };
        let _ = live.tasks.spawn(sweep.run().instrument(span.clone()));
        loop {
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                Some(change) = changes.recv() => match change {
                    Change::Start(job) => live.start(job),
                    Change::Stop { name, removal } => live.stop(&name, removal),
                },
                // Reaps the tasks of the jobs removed.
                Some(_) = live.tasks.join_next() => {}
            }
        }
        drop(changes);
        let Live {
            mut tasks, running, ..
        } = live;
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

/// The tasks of a run going on, and how to stop each job's.
struct Live {
    leases: Leases,
    clock: Arc<Clock>,
    shutdown: CancellationToken,
    running: Running,
    tasks: JoinSet<()>,
    /// Where the sweep offers each job claiming its instants the rounds cut
    /// short it finds, by lease name.
    offers: Offers,
    /// The tokens of the tasks started under each name, oldest first: a
    /// job replaced may still run its last round while its successor
    /// waits.
    jobs: HashMap<Arc<str>, Vec<Tokens>>,
    span: tracing::Span,
}

/// The sweep's offers, shared with the run that adds and removes jobs.
pub(crate) type Offers = Arc<Mutex<HashMap<String, mpsc::Sender<Unfinished>>>>;

/// What stops the task of one job, and tells it ended.
struct Tokens {
    /// Ends its rounds' context ([`Removal::CutShort`]), and stops the loop.
    rounds: CancellationToken,
    /// Stops its loop ([`Removal::Finish`]): a child of `rounds`.
    stop: CancellationToken,
    /// Cancelled once the task ended.
    done: CancellationToken,
}

impl Live {
    /// Starts the task of `job`, once the task of a job of the same name
    /// (removed or replaced) ended: never two rounds of one name at once.
    fn start(&mut self, job: Arc<JobState>) {
        let previous = self
            .jobs
            .get(&job.name)
            .and_then(|tasks| tasks.last())
            .map(|t| t.done.clone());
        let rounds = self.shutdown.child_token();
        let stop = rounds.child_token();
        let done = CancellationToken::new();
        let (tx, rx) = mpsc::channel(1);
        if !job.per_instance {
            let _ = offers(&self.offers).insert(job.lease_name.clone(), tx);
        }
        self.jobs.entry(job.name.clone()).or_default().push(Tokens {
            rounds: rounds.clone(),
            stop: stop.clone(),
            done: done.clone(),
        });
        let task = JobTask {
            job,
            leases: self.leases.clone(),
            clock: self.clock.clone(),
            shutdown: stop.clone(),
            rounds,
            running: self.running.clone(),
        };
        let _ = self.tasks.spawn(
            async move {
                let _done = done.drop_guard();
                if let Some(previous) = previous {
                    tokio::select! {
                        biased;
                        () = stop.cancelled() => return,
                        () = previous.cancelled() => {}
                    }
                }
                task.run(rx).await;
            }
            .instrument(self.span.clone()),
        );
    }

    /// Stops the task of the job `name`, its round in flight as `removal`
    /// says.
    fn stop(&mut self, name: &str, removal: Removal) {
        let _ = offers(&self.offers).remove(&Scheduler::lease_name(name));
        self.jobs.retain(|_, tasks| {
            tasks.retain(|t| !t.done.is_cancelled());
            !tasks.is_empty()
        });
        // Every task still under the name: a job replaced with `Finish` and
        // then removed with `CutShort` has its last round cut short too.
        for tokens in self.jobs.get(name).into_iter().flatten() {
            match removal {
                Removal::Finish => tokens.stop.cancel(),
                Removal::CutShort => tokens.rounds.cancel(),
            }
        }
    }
}

/// The offers, locked.
pub(crate) fn offers(offers: &Offers) -> MutexGuard<'_, HashMap<String, mpsc::Sender<Unfinished>>> {
    offers.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Adds, replaces and removes the jobs of a [`Scheduler`], before
/// [`Scheduler::run`] or while it is going; from
/// [`Scheduler::handle`]. Cheap to clone; every clone changes the same
/// jobs.
///
/// A change takes effect at once on every run going on (and the next run
/// starts with the jobs as they are then). A job is checked as
/// [`SchedulerBuilder::build`] checks it, with the same errors.
///
/// - An added job claims its instants from its registration on, by its
///   [`MissedRuns`] as when a scheduler starts: a job that never ran (no
///   record under its name) runs nothing missed, a job of a name with a
///   record (it runs on other replicas, or ran before) catches up or
///   backfills what its policy says.
/// - A removed job claims no instant after the call; its round in flight
///   finishes or is cut short, as [`Removal`] says. A round cut short is
///   left unfinished in the database: a replica that still runs the job
///   runs it again within about one sweep; when no replica runs it any
///   more, nothing does, unless the job is added again (its sweep reruns
///   it, if no later instant was claimed first).
/// - A replaced job (same name) is the old one removed as [`Removal`] says
///   and the new one added; the new one starts once the old one's round in
///   flight ended, so that two rounds of one job never run at once on the
///   replica (nor across the cluster: a claim holds the job's name).
///
/// Not yet: the same name registered with different schedules on several
/// replicas is not detected. Each replica claims the instants of its own
/// schedule; give every replica the same jobs.
#[derive(Clone)]
pub struct JobsHandle {
    inner: Arc<Inner>,
}

impl fmt::Debug for JobsHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobsHandle")
            .field("jobs", &self.names())
            .finish()
    }
}

impl JobsHandle {
    /// Adds a job.
    ///
    /// # Errors
    ///
    /// As [`SchedulerBuilder::build`]: [`Error::EmptyName`],
    /// [`Error::BlankName`], [`Error::DuplicateName`] (a job of that name
    /// is registered: [`replace`](Self::replace) it),
    /// [`Error::NameTooLong`], [`Error::InvalidName`] or
    /// [`Error::InvalidSchedule`]; nothing changed.
    pub fn add(&self, job: Job) -> Result<(), Error> {
        let mut registry = self.inner.registry();
        let job = Arc::new(check(job, self.inner.look_back, |name| {
            registry.jobs.iter().any(|j| &*j.name == name)
        })?);
        tracing::info!(target: TARGET, job = ?job.name, schedule = ?job.schedule.source(), "job added");
        registry.jobs.push(job.clone());
        registry.tell(&Change::Start(job));
        Ok(())
    }

    /// Replaces the job of the same name (its round in flight as `removal`
    /// says), or adds it when there is none; returns whether one was
    /// replaced.
    ///
    /// # Errors
    ///
    /// As [`add`](Self::add), except that a job of the name is replaced
    /// instead of refused; nothing changed.
    pub fn replace(&self, job: Job, removal: Removal) -> Result<bool, Error> {
        let mut registry = self.inner.registry();
        let job = Arc::new(check(job, self.inner.look_back, |_| false)?);
        let replaced = match registry.jobs.iter().position(|j| j.name == job.name) {
            Some(at) => {
                registry.jobs[at] = job.clone();
                registry.tell(&Change::Stop {
                    name: job.name.clone(),
                    removal,
                });
                true
            }
            None => {
                registry.jobs.push(job.clone());
                false
            }
        };
        tracing::info!(target: TARGET, job = ?job.name, schedule = ?job.schedule.source(), replaced, ?removal, "job replaced");
        registry.tell(&Change::Start(job));
        Ok(replaced)
    }

    /// Removes the job `name`, its round in flight as `removal` says;
    /// returns whether there was one.
    #[must_use = "false: no job of that name"]
    pub fn remove(&self, name: &str, removal: Removal) -> bool {
        let mut registry = self.inner.registry();
        let Some(at) = registry.jobs.iter().position(|j| &*j.name == name) else {
            return false;
        };
        let job = registry.jobs.remove(at);
        tracing::info!(target: TARGET, job = ?job.name, ?removal, "job removed");
        registry.tell(&Change::Stop {
            name: job.name.clone(),
            removal,
        });
        true
    }

    /// The jobs' names, in registration order.
    #[must_use]
    pub fn names(&self) -> Vec<String> {
        self.inner
            .registry()
            .jobs
            .iter()
            .map(|j| j.name.to_string())
            .collect()
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
