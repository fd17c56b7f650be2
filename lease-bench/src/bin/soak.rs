//! The safety soak: contenders in several processes claim, hold and run
//! under faults, every tenure is recorded by the database's clock, and the
//! checker judges the history.
//!
//! ```sh
//! cargo run --release -p lease-bench --bin soak -- --seconds 30                 # SQLite file
//! cargo run --release -p lease-bench --bin soak -- --seconds 30 postgres://postgres@127.0.0.1:5432/test
//! cargo run --release -p lease-bench --bin soak -- --seconds 30 mysql://root@127.0.0.1:3306/test
//! cargo run --release -p lease-bench --bin soak -- --seconds 20 --plant skip-deadline --expect-violations
//! ```
//!
//! The orchestrator (this process) starts `--procs` contender processes (the
//! same binary, `--child`), each with its own TCP proxy in front of a
//! PostgreSQL or MariaDB server, and injects faults until `--seconds` have
//! passed:
//!
//! - **kill**: a contender is killed with `SIGKILL` (no release, no last
//!   word) and a new one started in its place;
//! - **pause** (servers): a contender's proxy holds every byte back for up to
//!   4 s, its connections open, as across a partition;
//! - **cut** (servers): every connection of a contender's proxy is closed;
//! - **stall** (SQLite): the orchestrator holds SQLite's write lock for up to
//!   4 s, so that no statement that writes gets through.
//!
//! Each contender leads two names (claim, hold for a while, release) and
//! runs the instants of a job falling due every 400 ms by the database's
//! clock (claim the instant, run the round, finish; run a round cut short a
//! second time). The timings are the protocol's scaled down: lease 3 s,
//! renewals every 500 ms, local deadline 2 s, grace 300 ms.
//!
//! Every attempt, tenure and end goes to the history (JSON lines, see
//! `lease_bench::history`), and the checker (`lease_bench::check`) runs on
//! it at the end. The exit status is 0 when there is no violation (with
//! `--expect-violations`: when there is at least one), 1 otherwise.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::collections::BTreeMap;
use std::error::Error;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use dblease::{CancellationToken, Handle, LeaseStore, Leases, Timings, Unfinished, UtcMillis};
use lease_bench::check::{self, Report};
use lease_bench::clock::DbClock;
use lease_bench::history::{Event, StopCause, parse_history};
use lease_bench::plant::{PhantomClaimStore, Plant};
use lease_bench::url::{Backend, host_port, through};
use lease_conformance::proxy::Proxy;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep, timeout};

type BoxError = Box<dyn Error + Send + Sync>;
type BoxResult<T> = Result<T, BoxError>;

/// Names each contender leads.
const LEADERS: usize = 2;
/// How often an instant of the job falls due, by the database's clock.
const EVERY_MS: i64 = 400;
/// How long a read of the database's clock may take before it is given up.
const CLOCK_READ_BOUND: Duration = Duration::from_millis(1_000);

fn timings() -> dblease::Result<Timings> {
    Timings::builder()
        .lease(Duration::from_millis(3_000))
        .renew(Duration::from_millis(500))
        .deadline(Duration::from_millis(2_000))
        .grace(Duration::from_millis(300))
        .build()
}

/// How often the soak prints a progress line while it runs.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

const USAGE: &str = "usage: soak [--seconds N] [--procs N] [--plant NAME] [--history FILE] \
[--expect-violations] [URL]\n  URL: sqlite://PATH (default: a file in a temp dir), postgres://..., mysql://...\n  \
plants: none, skip-deadline, phantom-claim, rerun-finished";

#[derive(Debug)]
struct Args {
    seconds: u64,
    procs: usize,
    plant: Plant,
    history: Option<PathBuf>,
    expect_violations: bool,
    url: Option<String>,
    child: Option<(String, String)>,
}

fn parse_args() -> BoxResult<Args> {
    let mut args = Args {
        seconds: 30,
        procs: 3,
        plant: Plant::None,
        history: None,
        expect_violations: false,
        url: None,
        child: None,
    };
    let mut it = std::env::args().skip(1);
    let mut child_instance = None;
    let mut run = None;
    while let Some(arg) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| format!("{arg} needs a value\n{USAGE}"))
        };
        match arg.as_str() {
            "--seconds" => args.seconds = value()?.parse()?,
            "--procs" => args.procs = value()?.parse()?,
            "--plant" => args.plant = value()?.parse()?,
            "--history" => args.history = Some(value()?.into()),
            "--expect-violations" => args.expect_violations = true,
            "--child" => child_instance = Some(value()?),
            "--run" => run = Some(value()?),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            s if s.starts_with("--") => return Err(format!("unknown flag {s}\n{USAGE}").into()),
            _ => args.url = Some(arg),
        }
    }
    if args.procs < 2 {
        return Err("--procs must be at least 2: the soak is about processes contending".into());
    }
    if let (Some(instance), Some(run)) = (child_instance, run) {
        args.child = Some((instance, run));
    }
    Ok(args)
}

fn main() -> std::process::ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("soak: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("soak: no runtime: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let outcome = runtime.block_on(async {
        match (&args.child, &args.url) {
            (Some((instance, run)), Some(url)) => contender(instance, run, args.plant, url)
                .await
                .map(|()| true),
            (Some(_), None) => Err("--child needs a URL".into()),
            (None, _) => orchestrate(&args).await,
        }
    });
    match outcome {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::from(1),
        Err(e) => {
            eprintln!("soak: {e}");
            std::process::ExitCode::from(2)
        }
    }
}

/// A small, seeded xorshift generator: faults and plans need no more.
struct Rng(u64);

impl Rng {
    fn seeded() -> Rng {
        let mut bytes = [0u8; 8];
        let seed = match getrandom::fill(&mut bytes) {
            Ok(()) => u64::from_le_bytes(bytes),
            Err(_) => u64::from(std::process::id()).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        };
        Rng(seed | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform in `lo..hi` (milliseconds).
    fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.next() % (hi - lo).max(1))
    }

    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % (n.max(1) as u64)).unwrap_or(0)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

// ---------------------------------------------------------------- contender

/// One contender process.
struct Contender {
    leases: Leases,
    clock: DbClock,
    instance: String,
    plant: Plant,
    seq: AtomicU64,
    rng: Mutex<Rng>,
    shutdown: CancellationToken,
}

/// What a claim is for.
enum Kind {
    Plain,
    Slot(i64),
    Rerun(Unfinished),
    /// The planted bug: a plain claim of a job's name to run `slot` again.
    PlantedRerun(i64),
}

fn emit(event: &Event) {
    let mut out = std::io::stdout().lock();
    // A closed pipe means the orchestrator is gone: nothing left to tell.
    let _ = writeln!(out, "{}", event.to_line());
    let _ = out.flush();
}

impl Contender {
    fn ms(&self, lo: u64, hi: u64) -> Duration {
        self.rng
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .ms(lo, hi)
    }

    fn chance(&self, percent: u64) -> bool {
        self.rng
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .chance(percent)
    }

    /// Reads the database's clock (bounded), calibrating [`DbClock`].
    async fn now(&self) -> Option<i64> {
        let sent = Instant::now();
        match timeout(CLOCK_READ_BOUND, self.leases.now()).await {
            Ok(Ok(now)) => {
                self.clock.observe(sent, Instant::now(), now.as_millis());
                Some(now.as_millis())
            }
            _ => None,
        }
    }

    /// Sleeps `d`, or until shutdown; whether the whole sleep passed.
    async fn pause(&self, d: Duration) -> bool {
        tokio::select! {
            () = self.shutdown.cancelled() => false,
            () = sleep(d) => true,
        }
    }

    /// One claim attempt, recorded: the handle and the attempt's number
    /// when it succeeded.
    async fn attempt(&self, name: &str, kind: &Kind) -> Option<(Handle, u64)> {
        // Without a recent sample of the database's clock there is no bound
        // to record: calibrate first.
        let sent_ms = match self.clock.lower(Instant::now()) {
            Some(ms) => ms,
            None => {
                self.now().await;
                return None;
            }
        };
        let seq = self.seq.fetch_add(1, Ordering::SeqCst);
        emit(&Event::Try {
            name: name.to_owned(),
            instance: self.instance.clone(),
            seq,
            sent_ms,
        });
        let claimed = match kind {
            Kind::Plain | Kind::PlantedRerun(_) => self.leases.claim(name).await,
            Kind::Slot(slot) => {
                self.leases
                    .claim_slot(name, UtcMillis::from_millis(*slot))
                    .await
            }
            Kind::Rerun(u) => self.leases.claim_rerun(u).await,
        };
        let instance = self.instance.clone();
        match claimed {
            Ok(Some(handle)) => Some((handle, seq)),
            Ok(None) => {
                emit(&Event::Refused { instance, seq });
                None
            }
            Err(_) => {
                emit(&Event::Failed { instance, seq });
                None
            }
        }
    }

    /// A tenure: hold the lease, run the work for `planned` (or until the
    /// context ends), record the end, then give the name back (or finish
    /// the instant). Returns whether the instant's end was recorded.
    async fn tenure(&self, handle: Handle, seq: u64, kind: &Kind, planned: Duration) -> bool {
        let holder = handle.hold(&self.shutdown);
        // Two lower bounds on when the work starts (it starts after both):
        // the calibration at the claim's return, and a read of the clock.
        let returned = Instant::now();
        let read = self.now().await;
        let lower = self.clock.lower(returned);
        let claim_ms = read.max(lower).unwrap_or(i64::MIN);
        let (slot, rerun) = match kind {
            Kind::Plain => (None, false),
            Kind::Slot(s) => (Some(*s), false),
            Kind::Rerun(u) => (Some(u.slot.as_millis()), true),
            Kind::PlantedRerun(s) => (Some(*s), true),
        };
        let name = handle.name().to_owned();
        emit(&Event::Claim {
            name: name.clone(),
            instance: self.instance.clone(),
            seq,
            term: handle.term(),
            slot,
            rerun,
            claim_ms,
        });

        let completed = if self.plant == Plant::SkipDeadline {
            // The planted bug: the work runs its course beside the lease,
            // whatever happens to the lease (it does stop for a shutdown).
            self.pause(planned).await
        } else {
            let ran = holder
                .run(move |ctx| async move {
                    tokio::select! {
                        () = sleep(planned) => true,
                        () = ctx.cancelled() => false,
                    }
                })
                .await;
            matches!(ran, Ok(true))
        };
        holder.stop().await;
        // Two upper bounds on when the work ended (it ended before both).
        let ended = Instant::now();
        let upper = self.clock.upper(ended);
        let read = self.now().await;
        let stop_ms = match (read, upper) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => i64::MAX,
        };
        let lost = handle.lost();
        let cause = if lost {
            StopCause::Lost
        } else if self.shutdown.is_cancelled() {
            StopCause::Shutdown
        } else {
            StopCause::Done
        };
        emit(&Event::Stop {
            name,
            instance: self.instance.clone(),
            seq,
            term: handle.term(),
            stop_ms,
            cause,
        });
        if lost {
            return false;
        }
        // The database reports whole milliseconds: a successor that claimed
        // within the millisecond of the read above would tie with it, and a
        // tie proves no order. Give the name back a little later.
        sleep(Duration::from_millis(2)).await;
        match (slot, completed) {
            (Some(slot), true) if !matches!(kind, Kind::PlantedRerun(_)) => {
                let passed = self
                    .now()
                    .await
                    .map_or(slot, |now| (now - now % EVERY_MS).max(slot));
                let finished = handle.finish(UtcMillis::from_millis(passed)).await;
                if finished.is_ok() && !handle.lost() {
                    emit(&Event::Finished {
                        instance: self.instance.clone(),
                        seq,
                    });
                    return true;
                }
                false
            }
            _ => {
                let _ = handle.release().await;
                false
            }
        }
    }

    /// Leads `name` whenever it can.
    async fn lead(self: Arc<Self>, name: String) {
        while self.pause(self.ms(50, 300)).await {
            if let Some((handle, seq)) = self.attempt(&name, &Kind::Plain).await {
                // Planted work long enough that a lease lost under it is
                // taken over while it still runs.
                let planned = if self.plant == Plant::SkipDeadline {
                    self.ms(6_000, 12_000)
                } else {
                    self.ms(500, 5_000)
                };
                self.tenure(handle, seq, &Kind::Plain, planned).await;
            }
        }
    }

    /// Runs the instants of `job`.
    async fn schedule(self: Arc<Self>, job: String) {
        let mut last_tried = 0;
        loop {
            if let Ok(found) = self.leases.unfinished_slots(&[&job]).await {
                for u in found {
                    let kind = Kind::Rerun(u);
                    if let Some((handle, seq)) = self.attempt(&job, &kind).await {
                        let planned = self.round_length();
                        self.tenure(handle, seq, &kind, planned).await;
                    }
                }
            }
            if let Some(now) = self.now().await {
                let instant = now - now % EVERY_MS;
                if instant > last_tried {
                    last_tried = instant;
                    let kind = Kind::Slot(instant);
                    if let Some((handle, seq)) = self.attempt(&job, &kind).await {
                        let planned = self.round_length();
                        let finished = self.tenure(handle, seq, &kind, planned).await;
                        if finished && self.plant == Plant::RerunFinished {
                            let kind = Kind::PlantedRerun(instant);
                            if let Some((handle, seq)) = self.attempt(&job, &kind).await {
                                self.tenure(handle, seq, &kind, self.ms(50, 100)).await;
                            }
                        }
                    }
                }
            }
            if !self.pause(self.ms(20, 120)).await {
                break;
            }
        }
    }

    fn round_length(&self) -> Duration {
        if self.plant == Plant::SkipDeadline {
            self.ms(5_000, 9_000)
        } else if self.chance(10) {
            self.ms(800, 1_500)
        } else {
            self.ms(50, 500)
        }
    }
}

fn leader_name(run: &str, i: usize) -> String {
    format!("soak:{run}:leader:{i}")
}

fn job_name(run: &str) -> String {
    format!("soak:{run}:cron")
}

async fn contender(instance: &str, run: &str, plant: Plant, url: &str) -> BoxResult<()> {
    let store = dblease::connect_store(url).await?;
    let store: Arc<dyn LeaseStore> = if plant == Plant::PhantomClaim {
        Arc::new(PhantomClaimStore::new(store))
    } else {
        store
    };
    let leases = Leases::from_arc(store)
        .with_timings(timings()?)
        .with_instance(instance);
    let me = Arc::new(Contender {
        leases,
        clock: DbClock::new(),
        instance: instance.to_owned(),
        plant,
        seq: AtomicU64::new(1),
        rng: Mutex::new(Rng::seeded()),
        shutdown: CancellationToken::new(),
    });
    for _ in 0..3 {
        me.now().await;
    }
    // Keeps the calibration fresh while the database answers.
    let calibrate = {
        let me = me.clone();
        tokio::spawn(async move {
            while me.pause(Duration::from_millis(200)).await {
                me.now().await;
            }
        })
    };
    let mut tasks = vec![calibrate];
    for i in 0..LEADERS {
        tasks.push(tokio::spawn(me.clone().lead(leader_name(run, i))));
    }
    tasks.push(tokio::spawn(me.clone().schedule(job_name(run))));

    // The orchestrator closes our stdin to say the soak is over.
    let mut stdin = tokio::io::stdin();
    let mut sink = [0u8; 64];
    while matches!(stdin.read(&mut sink).await, Ok(n) if n > 0) {}
    me.shutdown.cancel();
    for task in tasks {
        let _ = timeout(Duration::from_secs(10), task).await;
    }
    Ok(())
}

// ------------------------------------------------------------- orchestrator

/// A contender process and what stands between it and the database.
struct Proc {
    instance: String,
    child: Child,
    stdin: Option<ChildStdin>,
    proxy: Option<Arc<Proxy>>,
}

/// The faults the orchestrator injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Kill,
    Pause,
    Cut,
    Stall,
}

#[derive(Default)]
struct Faults {
    kills: usize,
    pauses: usize,
    cuts: usize,
    stalls: usize,
}

struct Orchestra {
    url: String,
    backend: Backend,
    run: String,
    plant: Plant,
    exe: PathBuf,
    lines: mpsc::UnboundedSender<String>,
    next: usize,
}

impl Orchestra {
    async fn spawn(&mut self) -> BoxResult<Proc> {
        self.next += 1;
        let instance = format!("p{}", self.next);
        let (url, proxy) = match host_port(&self.url) {
            Some(target) if self.backend != Backend::Sqlite => {
                let proxy = Proxy::start(target.as_str()).await?;
                let url = through(&self.url, &proxy.addr().to_string())
                    .ok_or("cannot point the URL at the proxy")?;
                (url, Some(Arc::new(proxy)))
            }
            _ => (self.url.clone(), None),
        };
        let mut child = Command::new(&self.exe)
            .args(["--child", &instance, "--run", &self.run, "--plant"])
            .arg(self.plant.as_str())
            .arg(&url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let lines = self.lines.clone();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Proc {
            instance,
            stdin: child.stdin.take(),
            child,
            proxy,
        })
    }
}

/// The SQLite file a URL names.
fn sqlite_path(url: &str) -> Option<PathBuf> {
    let rest = url.get(7..)?;
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    (rest != ":memory:" && !rest.is_empty()).then(|| PathBuf::from(rest))
}

/// Holds SQLite's write lock on `path` for `d`: no write gets through.
fn stall(path: &Path, d: Duration) -> rusqlite::Result<()> {
    let conn = rusqlite::Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(10))?;
    conn.execute_batch("BEGIN IMMEDIATE")?;
    std::thread::sleep(d);
    conn.execute_batch("ROLLBACK")
}

async fn db_now(leases: &Leases) -> i64 {
    match timeout(CLOCK_READ_BOUND, leases.now()).await {
        Ok(Ok(now)) => now.as_millis(),
        _ => i64::MAX,
    }
}

async fn orchestrate(args: &Args) -> BoxResult<bool> {
    let dir = tempfile::tempdir()?;
    let url = match &args.url {
        Some(url) => url.clone(),
        None => format!("sqlite://{}", dir.path().join("soak.db").display()),
    };
    let backend = Backend::of(&url).ok_or("unrecognised URL scheme")?;
    let sqlite = match backend {
        Backend::Sqlite => {
            Some(sqlite_path(&url).ok_or("the soak needs an SQLite file, not memory")?)
        }
        _ => None,
    };
    let setup = dblease::connect(&url).await?;
    setup.migrate().await?;
    let mut rng = Rng::seeded();
    let run = format!("{:08x}", rng.next() & 0xffff_ffff);
    let history_path = args.history.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("lease-soak-{}-{run}.jsonl", backend.label()))
    });
    println!(
        "soak: {} processes on {} for {} s, plant {}, run {run}\n  history: {}",
        args.procs,
        backend.label(),
        args.seconds,
        args.plant,
        history_path.display()
    );

    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    // Who holds something right now, from the contenders' own lines: faults
    // aim at holders more often than not.
    let holding: Arc<Mutex<BTreeMap<String, i64>>> = Arc::default();
    let writer = {
        let mut file = std::io::BufWriter::new(std::fs::File::create(&history_path)?);
        let holding = holding.clone();
        tokio::spawn(async move {
            let mut all = String::new();
            while let Some(line) = rx.recv().await {
                let delta = match Event::from_line(&line) {
                    Ok(Event::Claim { instance, .. }) => Some((instance, 1)),
                    Ok(Event::Stop { instance, .. }) => Some((instance, -1)),
                    _ => None,
                };
                if let Some((instance, d)) = delta {
                    *holding
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .entry(instance)
                        .or_default() += d;
                }
                let _ = writeln!(file, "{line}");
                all.push_str(&line);
                all.push('\n');
            }
            let _ = file.flush();
            all
        })
    };
    let mut orchestra = Orchestra {
        url: url.clone(),
        backend,
        run: run.clone(),
        plant: args.plant,
        exe: std::env::current_exe()?,
        lines: tx.clone(),
        next: 0,
    };
    let mut procs = Vec::new();
    for _ in 0..args.procs {
        procs.push(orchestra.spawn().await?);
    }
    let record = |kind: &str, instance: &str, at_ms: i64| {
        let _ = tx.send(
            Event::Fault {
                kind: kind.to_owned(),
                instance: instance.to_owned(),
                at_ms,
            }
            .to_line(),
        );
    };

    let mut faults = Faults::default();
    let mut background = Vec::new();
    let stalling = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let end = Instant::now() + Duration::from_secs(args.seconds);
    // Let the contenders settle before the first fault.
    sleep(Duration::from_millis(1_500).min(Duration::from_secs(args.seconds))).await;
    let started = Instant::now();
    let mut next_progress = started + PROGRESS_EVERY;
    while Instant::now() < end {
        if Instant::now() >= next_progress {
            next_progress += PROGRESS_EVERY;
            println!(
                "  {:>3} s of {}: {} kills, {} pauses, {} cuts, {} stalls so far",
                started.elapsed().as_secs(),
                args.seconds,
                faults.kills,
                faults.pauses,
                faults.cuts,
                faults.stalls
            );
        }
        let gap = rng.ms(700, 2_000);
        sleep(gap.min(end.saturating_duration_since(Instant::now()))).await;
        if Instant::now() >= end {
            break;
        }
        let holders: Vec<usize> = {
            let holding = holding.lock().unwrap_or_else(PoisonError::into_inner);
            (0..procs.len())
                .filter(|&i| {
                    procs
                        .get(i)
                        .and_then(|p| holding.get(&p.instance))
                        .is_some_and(|&n| n > 0)
                })
                .collect()
        };
        let victim = if !holders.is_empty() && rng.chance(75) {
            holders.get(rng.below(holders.len())).copied().unwrap_or(0)
        } else {
            rng.below(procs.len())
        };
        // The planted work that outlives its lease is exposed by the faults
        // that cost a holder its lease while it lives on: long pauses and
        // stalls. The others get the usual mix.
        let (kill_pct, pause_pct, long) = if args.plant == Plant::SkipDeadline {
            (5, 85, (3_000, 5_000))
        } else {
            (15, 55, (1_000, 4_500))
        };
        let roll = rng.below(100);
        let now = db_now(&setup).await;
        let fault = if roll < kill_pct {
            Fault::Kill
        } else if sqlite.is_some() {
            Fault::Stall
        } else if roll < kill_pct + pause_pct {
            Fault::Pause
        } else {
            Fault::Cut
        };
        match (&sqlite, fault) {
            (_, Fault::Kill) => {
                let mut proc = procs.remove(victim);
                let _ = proc.child.kill().await;
                let at_ms = db_now(&setup).await;
                let _ = tx.send(
                    Event::Killed {
                        instance: proc.instance.clone(),
                        at_ms,
                    }
                    .to_line(),
                );
                faults.kills += 1;
                procs.push(orchestra.spawn().await?);
            }
            (Some(path), _) => {
                if stalling.swap(true, Ordering::SeqCst) {
                    continue;
                }
                let d = rng.ms(long.0, long.1);
                let path = path.clone();
                record("stall", "*", now);
                faults.stalls += 1;
                let stalling = stalling.clone();
                background.push(tokio::task::spawn_blocking(move || {
                    if let Err(e) = stall(&path, d) {
                        eprintln!("soak: stall failed: {e}");
                    }
                    stalling.store(false, Ordering::SeqCst);
                }));
            }
            (None, Fault::Pause) => {
                let Some(proxy) = procs.get(victim).and_then(|p| p.proxy.clone()) else {
                    continue;
                };
                let instance = procs
                    .get(victim)
                    .map(|p| p.instance.clone())
                    .unwrap_or_default();
                if proxy.is_paused() {
                    continue;
                }
                let d = rng.ms(long.0, long.1);
                proxy.pause();
                record("pause", &instance, now);
                faults.pauses += 1;
                let tx = tx.clone();
                background.push(tokio::spawn(async move {
                    sleep(d).await;
                    proxy.resume();
                    let _ = tx.send(
                        Event::Fault {
                            kind: "resume".to_owned(),
                            instance,
                            at_ms: 0,
                        }
                        .to_line(),
                    );
                }));
            }
            (None, _) => {
                if let Some(p) = procs.get(victim) {
                    if let Some(proxy) = &p.proxy {
                        proxy.cut();
                        record("cut", &p.instance, now);
                        faults.cuts += 1;
                    }
                }
            }
        }
    }

    // Wind down: every fault lifted, then the contenders told to stop.
    for task in background {
        let _ = task.await;
    }
    for p in &procs {
        if let Some(proxy) = &p.proxy {
            proxy.resume();
        }
    }
    for p in &mut procs {
        drop(p.stdin.take());
    }
    for p in &mut procs {
        if timeout(Duration::from_secs(15), p.child.wait())
            .await
            .is_err()
        {
            let _ = p.child.kill().await;
            let at_ms = db_now(&setup).await;
            let _ = tx.send(
                Event::Killed {
                    instance: p.instance.clone(),
                    at_ms,
                }
                .to_line(),
            );
            eprintln!("soak: {} did not stop within 15 s: killed", p.instance);
        }
    }
    drop(procs);
    drop(orchestra);
    drop(tx);
    let text = writer.await?;
    let events = match parse_history(&text) {
        Ok(events) => events,
        Err((line, e)) => return Err(format!("history line {line}: {e}").into()),
    };
    let report = check::check(&events);
    print_report(&report, &faults, args);
    let violated = !report.violations.is_empty();
    if !violated && args.history.is_none() {
        // A clean history in the temp dir is not worth keeping (CI runs this
        // on every push); `--history FILE` keeps it.
        let _ = std::fs::remove_file(&history_path);
        println!("  (clean: history removed; --history FILE keeps it)");
    }
    if report.tenures.is_empty() {
        println!("  no tenure at all: the soak tested nothing");
        return Ok(false);
    }
    Ok(violated == args.expect_violations)
}

fn print_report(report: &Report, faults: &Faults, args: &Args) {
    println!(
        "  faults: {} kills, {} pauses, {} cuts, {} stalls",
        faults.kills, faults.pauses, faults.cuts, faults.stalls
    );
    println!(
        "  claims: {} attempted, {} refused, {} of unknown outcome",
        report.attempts, report.refused, report.unknown
    );
    let mut terms: BTreeMap<&str, (usize, u64)> = BTreeMap::new();
    for t in &report.tenures {
        let e = terms.entry(t.name.as_str()).or_default();
        e.0 += 1;
        e.1 = e.1.max(t.id.term);
    }
    println!(
        "  tenures: {} ({} ended by a lost lease, {} by a kill)",
        report.tenures.len(),
        report.lost(),
        report.killed()
    );
    for (name, (count, max)) in &terms {
        println!("    {name}: {count} tenures, last term {max}");
    }
    println!(
        "  instants: {} run, {} run a second time after a round cut short",
        report.instants(),
        report.reruns()
    );
    println!("  violations: {}", report.violations.len());
    for v in report.violations.iter().take(20) {
        println!("    {v}");
    }
    if report.violations.len() > 20 {
        println!("    ... and {} more", report.violations.len() - 20);
    }
    if args.expect_violations {
        println!(
            "  planted bug {}: {}",
            args.plant,
            if report.violations.is_empty() {
                "NOT caught"
            } else {
                "caught"
            }
        );
    }
}
