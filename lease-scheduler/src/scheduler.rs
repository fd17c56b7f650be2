//! The scheduler: one task per job, one rerun sweep, and the settling of
//! every round.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_core::{
    CancellationToken, Chain, Error as LeaseError, Handle, Leases, MAX_NAME_BYTES, Unfinished,
    UtcMillis,
};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::Instrument as _;

use crate::clock::Clock;
use crate::error::Error;
use crate::job::{Job, JobFn, JobResult, Round};
use crate::metrics::{self, RoundLabel};
use crate::schedule::{Rfc3339, Schedule};

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
/// once as the scheduler starts. See the crate docs for the whole contract.
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

struct JobState {
    name: Arc<str>,
    lease_name: String,
    schedule: Schedule,
    per_instance: bool,
    run: JobFn,
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

    /// How far back the start-up catch-up looks (default 24 h): as the
    /// scheduler starts, a job that has run before and whose schedule's most
    /// recent instant came within this long, with no replica claiming it,
    /// runs that instant once. [`Duration::ZERO`] turns catch-up off.
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
    /// [`Error::EmptyName`], [`Error::DuplicateName`], [`Error::NameTooLong`]
    /// (`cron:` and the name over [`MAX_NAME_BYTES`] bytes) or
    /// [`Error::InvalidSchedule`].
    pub fn build(self) -> Result<Scheduler, Error> {
        let mut seen = HashSet::new();
        let mut jobs = Vec::with_capacity(self.jobs.len());
        for job in self.jobs {
            if job.name.is_empty() {
                return Err(Error::EmptyName);
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
    /// `Ok(())` is finished as usual.
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
                error = %Chain(&error),
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
        let running: Running = Arc::default();
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
                look_back: inner.look_back,
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
        let drained =
            tokio::time::timeout(wait, async { while tasks.join_next().await.is_some() {} }).await;
        if drained.is_ok() {
            tracing::info!("scheduler stopped");
            return Ok(());
        }
        let mut jobs: Vec<String> = lock(&running).iter().map(|j| j.to_string()).collect();
        jobs.sort();
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

/// The jobs with a round in flight.
type Running = Arc<Mutex<HashSet<Arc<str>>>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Marks a job as running a round until dropped.
struct RunningGuard {
    running: Running,
    job: Arc<str>,
}

impl RunningGuard {
    fn new(running: &Running, job: &Arc<str>) -> Self {
        let _ = lock(running).insert(job.clone());
        metrics::running(1.0);
        RunningGuard {
            running: running.clone(),
            job: job.clone(),
        }
    }
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        let _ = lock(&self.running).remove(&self.job);
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

/// A round that ran: its instant, and when it ended.
#[derive(Debug, Clone, Copy)]
struct Ran {
    instant: UtcMillis,
    end: UtcMillis,
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

/// What a round is: the identity the job's function receives.
#[derive(Debug, Clone, Copy)]
struct Kind {
    rerun: bool,
    catch_up: bool,
}

impl Kind {
    fn label(self) -> RoundLabel {
        if self.rerun {
            RoundLabel::Rerun
        } else if self.catch_up {
            RoundLabel::CatchUp
        } else {
            RoundLabel::Scheduled
        }
    }
}

impl Ending {
    fn label(self) -> &'static str {
        match self {
            Ending::Ran => "ran",
            Ending::Failed => "failed",
            Ending::CutShort => "cut_short",
        }
    }
}

/// The loop of one job.
struct JobTask {
    job: Arc<JobState>,
    leases: Leases,
    clock: Arc<Clock>,
    shutdown: CancellationToken,
    running: Running,
    look_back: Duration,
}

impl JobTask {
    async fn run(self, mut offers: mpsc::Receiver<Unfinished>) {
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
                tracing::info!(job = %self.job.name, "the schedule has no instant left");
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
                tracing::debug!(job = %job.name, "no catch-up: the job has never run");
                None
            }
            Some(last) if last >= latest => None,
            Some(last) => {
                tracing::info!(
                    job = %job.name,
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
            tracing::error!(job = %job, instant = %Rfc3339(instant), error = %Chain(error), what, "round not run: the claim was refused");
            return false;
        }
        let retry_at = Instant::now() + self.leases.timings().retry_interval();
        if give_up.is_some_and(|at| retry_at >= at) {
            metrics::claim(round, "gave_up");
            tracing::warn!(
                job = %job,
                instant = %Rfc3339(instant),
                error = %Chain(error),
                what,
                "gave up the instant: the database did not answer before the next instant was due"
            );
            return false;
        }
        tracing::warn!(
            job = %job,
            instant = %Rfc3339(instant),
            error = %Chain(error),
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
                    tracing::debug!(
                        job = %job.name,
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
                        tracing::warn!(
                            job = %job.name,
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
                tracing::info!(
                    job = %job.name,
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
                tracing::debug!(
                    job = %job.name,
                    instant = %Rfc3339(offer.instant),
                    "rerun skipped: claimed again elsewhere, finished, or superseded"
                );
                None
            }
            Err(error) => {
                metrics::claim(RoundLabel::Rerun, "error");
                tracing::warn!(
                    job = %job.name,
                    instant = %Rfc3339(offer.instant),
                    error = %Chain(&error),
                    "rerun claim failed: the next sweep tries again"
                );
                None
            }
        }
    }

    /// Runs a claimed round under hold + run, settles it, and returns when it
    /// ended.
    async fn round(&self, handle: Handle, instant: UtcMillis, kind: Kind) -> Ran {
        let job = &self.job;
        let _running = RunningGuard::new(&self.running, &job.name);
        let term = handle.term();
        let holder = handle.hold(&self.shutdown);
        tracing::info!(
            job = %job.name,
            instant = %Rfc3339(instant),
            term,
            rerun = kind.rerun,
            catch_up = kind.catch_up,
            "round started"
        );
        if kind.label() == RoundLabel::Scheduled {
            metrics::start_delay(self.clock.now().as_millis() - instant.as_millis());
        }
        let started = Instant::now();
        let f = job.run.clone();
        let name = job.name.clone();
        let out = lease_core::run(holder.context(), move |ctx| async move {
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
        })
        .await;
        holder.stop().await;
        let end = self.clock.now();
        let lost = handle.lost();
        let ending = match &out {
            Ok((result, ended)) => self.ending(instant, result, *ended),
            Err(error) if error.is_lost() => Ending::CutShort,
            Err(error) => {
                tracing::error!(
                    job = %job.name,
                    instant = %Rfc3339(instant),
                    term,
                    error = %Chain(error),
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
        match ending {
            Ending::Ran | Ending::Failed => {
                let passed = job
                    .schedule
                    .latest_at_or_before(end)
                    .unwrap_or(instant)
                    .max(instant);
                match handle.finish(passed).await {
                    Ok(()) => fields.log_finished(lost),
                    Err(error) if error.is_lost() => fields.log_finished(true),
                    Err(error) => tracing::warn!(
                        job = %job.name,
                        instant = %Rfc3339(instant),
                        term,
                        error = %Chain(&error),
                        "could not record the round's end: its lease expires, and the instant \
                         runs again once"
                    ),
                }
            }
            Ending::CutShort => {
                // A round cut short and lost settles nothing: the lease runs
                // out by itself, and the instant stays unfinished.
                let released = if lost {
                    None
                } else {
                    Some(handle.release().await.is_ok())
                };
                if kind.rerun {
                    tracing::warn!(
                        job = %job.name,
                        instant = %Rfc3339(instant),
                        term,
                        rerun = kind.rerun,
                        catch_up = kind.catch_up,
                        lost,
                        released,
                        "rerun cut short too: the instant stays unfinished for good"
                    );
                } else {
                    tracing::warn!(
                        job = %job.name,
                        instant = %Rfc3339(instant),
                        term,
                        rerun = kind.rerun,
                        catch_up = kind.catch_up,
                        lost,
                        released,
                        "round cut short: a replica's sweep runs it again once"
                    );
                }
            }
        }
        Ran { instant, end }
    }

    /// A round of a per-instance job: no lease, no settling.
    async fn local_round(&self, instant: UtcMillis) -> Option<Ran> {
        let job = &self.job;
        let _running = RunningGuard::new(&self.running, &job.name);
        let cancel = self.shutdown.child_token();
        let round = Round {
            job: job.name.clone(),
            instant,
            rerun: false,
            catch_up: false,
            lease: None,
            cancel: cancel.clone(),
        };
        tracing::info!(job = %job.name, instant = %Rfc3339(instant), "round started");
        metrics::start_delay(self.clock.now().as_millis() - instant.as_millis());
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
        let out = (&mut task.0).await;
        let end = self.clock.now();
        let ending = match &out {
            Ok((result, ended)) => self.ending(instant, result, *ended),
            Err(join) => {
                tracing::error!(job = %job.name, instant = %Rfc3339(instant), error = %join, "round failed");
                Ending::Failed
            }
        };
        metrics::round(RoundLabel::PerInstance, ending.label(), started.elapsed());
        match ending {
            Ending::CutShort => tracing::warn!(
                job = %job.name,
                instant = %Rfc3339(instant),
                "round cut short (a per-instance job's round is not run again)"
            ),
            Ending::Ran | Ending::Failed => tracing::info!(
                job = %job.name,
                instant = %Rfc3339(instant),
                elapsed = ?started.elapsed(),
                "round finished"
            ),
        }
        Some(Ran { instant, end })
    }

    /// How a round whose function returned `result` ended; `ended` tells
    /// whether its context had ended by then.
    fn ending(&self, instant: UtcMillis, result: &JobResult, ended: bool) -> Ending {
        match result {
            Ok(()) => Ending::Ran,
            Err(_) if ended => Ending::CutShort,
            Err(error) => {
                tracing::warn!(
                    job = %self.job.name,
                    instant = %Rfc3339(instant),
                    error = %Chain(&**error),
                    "round failed"
                );
                Ending::Failed
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
            tracing::warn!(
                job = %self.job.name,
                instant = %Rfc3339(instant),
                skipped,
                first_skipped = %Rfc3339(first),
                last_skipped = %Rfc3339(last),
                "the round overran: instants skipped"
            );
        }
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
    fn log_finished(&self, lost: bool) {
        tracing::info!(
            job = %self.job,
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

/// The rerun sweep: every interval (plus a random part), one query for all
/// the jobs' rounds cut short, each offered to its job.
struct Sweep {
    leases: Leases,
    clock: Arc<Clock>,
    shutdown: CancellationToken,
    interval: Duration,
    offers: HashMap<String, mpsc::Sender<Unfinished>>,
}

impl Sweep {
    async fn run(self) {
        let names: Vec<&str> = self.offers.keys().map(String::as_str).collect();
        loop {
            match self.leases.unfinished_instants(&names).await {
                Ok(found) => {
                    metrics::sweep(true);
                    for u in found {
                        tracing::debug!(
                            job = %u.name.strip_prefix(PREFIX).unwrap_or(&u.name),
                            instant = %Rfc3339(u.instant),
                            "rerun sweep found a round cut short"
                        );
                        if let Some(tx) = self.offers.get(&u.name) {
                            // A job busy with a round gets it at the next sweep.
                            let _ = tx.try_send(u);
                        }
                    }
                }
                Err(error) => {
                    metrics::sweep(false);
                    tracing::warn!(
                        error = %Chain(&error),
                        "rerun sweep failed: the next one tries again"
                    );
                }
            }
            let pause = self.interval + jitter(self.interval / 15);
            tokio::select! {
                biased;
                () = self.shutdown.cancelled() => return,
                () = tokio::time::sleep(pause) => {}
            }
            if let Err(error) = self.clock.sync(&self.leases).await {
                tracing::debug!(error = %Chain(&error), "could not read the database's clock");
            }
        }
    }
}

/// A random duration from zero to `max`.
fn jitter(max: Duration) -> Duration {
    let max_us = u64::try_from(max.as_micros()).unwrap_or(u64::MAX);
    if max_us == 0 {
        return Duration::ZERO;
    }
    let r = getrandom::u64().unwrap_or(max_us / 2);
    Duration::from_micros(r % (max_us + 1))
}
