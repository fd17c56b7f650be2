//! One process holding many leases at once (100,000 on PostgreSQL, 10,000
//! on MariaDB and SQLite): whether every lease is renewed on time, and what
//! their renewals cost the database and the process.
//!
//! ```sh
//! cargo run --release -p lease-bench --bin scale -- \
//!     --leases 100000 --seconds 60 --pool 4 postgres://postgres@127.0.0.1:5432/test
//! cargo run --release -p lease-bench --bin scale -- \
//!     --leases 10000 --seconds 60 --pool 4 mysql://root@127.0.0.1:3306/test
//! cargo run --release -p lease-bench --bin scale -- \
//!     --leases 10000 --seconds 60 sqlite:///tmp/lease-scale.db
//! ```
//!
//! `--leases N` (default 10,000), `--seconds S` (the measured window,
//! default 20), `--pool N` (the store's pool; default 4; SQLite has its one
//! connection), `--claim-concurrency N` (claims in flight at once, default
//! 32), `--mode batched|per-lease|both` (default `batched`: renewals
//! through [`Leases::with_renewal_batching`]; `per-lease`: one renewal
//! statement per lease; `both`: the two, one after the other),
//! `--figures FILE` (also write the figures to FILE, a `measure<TAB>value`
//! line each, which `lease-bench/record.sh` lays side by side in a
//! markdown table).
//!
//! 1. Claims the leases (`--claim-concurrency` at a time) through `Leases`
//!    on the backend's store (table `lease_scale`, created afresh and
//!    dropped at the end), and holds each one (`Handle::hold`: one renewal
//!    task per lease, a renewal every 2 s, the default timings): the time to
//!    claim them all, and the process's resident memory per held lease.
//! 2. Over the window, measures:
//!    - whether each lease is renewed on time: every renewal's duration,
//!      from the start of its attempt (when it was due, and queued) to its
//!      answer, as `lease-core` records it in its
//!      `lease_renewal_duration_seconds` histogram (a metrics recorder of
//!      this tool's own keeps it): a renewal not answered within its renew
//!      interval (before the next was due) is late. Also the store is
//!      wrapped by one that records, for every lease, when each of its
//!      renewals answered (the claim counting as the first), so the gaps
//!      between a lease's successive renewals, and the statements' own
//!      latencies; and the database's own view, sampled every 5 s: the least
//!      time left on any held lease (`expires_at_ms` − the database's now),
//!      which stays above lease − renew interval − latency when every lease
//!      is renewed on time; and (PostgreSQL) the oldest snapshot another
//!      client holds, which makes every UPDATE dearer;
//!    - the leases lost (must be 0);
//!    - the cost to the database: rows updated and transactions committed
//!      (PostgreSQL: `pg_stat_user_tables` / `pg_stat_database`; MariaDB:
//!      `Handler_update` / `Handler_commit`; SQLite: counted by the
//!      wrapper), and the CPU of the server (PostgreSQL: the store's backend
//!      processes, found by the pool's `application_name`; MariaDB: the
//!      whole `mariadbd` process; SQLite: in the process);
//!    - the cost to this process: its CPU time, from `/proc`.
//! 3. Stops the holders and releases every lease (`--claim-concurrency` at a
//!    time).
//!
//! The exit status is non-zero when a lease was lost or a renewal was late.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::collections::HashMap;
use std::error::Error;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use dblease::mysql::MySqlStore;
use dblease::mysql::mysql_async::{self, prelude::Queryable as _};
use dblease::postgres::PostgresStore;
use dblease::postgres::deadpool_postgres::Pool;
use dblease::sqlite::SqliteStoreBuilder;
use dblease::sqlite::rusqlite;
use dblease::{CancellationToken, ClaimRequest, Handle, Holder, LeaseStore, Leases, Token};
use lease_bench::cpu::cpu_time;
use lease_bench::stats::{Latency, Summary};
use lease_bench::url::Backend;
use lease_core::ForwardingStore;
use tokio::sync::Semaphore;
use tokio::time::{Instant, sleep};

type BoxError = Box<dyn Error + Send + Sync>;
type BoxResult<T> = Result<T, BoxError>;

const TABLE: &str = "lease_scale";
const USAGE: &str = "usage: scale [--leases N] [--seconds S] [--pool N] [--claim-concurrency N] \
                     [--mode batched|per-lease|both] [--figures FILE] URL";

/// The run's figures, in the order measured, for `--figures FILE`: one
/// `measure<TAB>value` line each, the first naming the backend, so that
/// `lease-bench/record.sh` puts the runs on several backends side by side
/// in one markdown table.
#[derive(Default)]
struct Figures {
    /// Put before each measure: which renewals (`--mode both` measures two).
    prefix: Mutex<String>,
    lines: Mutex<Vec<(String, String)>>,
}

impl Figures {
    fn add(&self, measure: &str, value: String) {
        let prefix = self
            .prefix
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        self.lines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((format!("{prefix}{measure}"), value));
    }

    fn write(&self, path: &std::path::Path) -> std::io::Result<()> {
        let lines = self
            .lines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let text: String = lines
            .iter()
            .map(|(m, v)| format!("{}\t{}\n", m.replace('\t', " "), v.replace('\t', " ")))
            .collect();
        std::fs::write(path, text)
    }
}

/// Gaps and latencies are counted in 1 ms buckets up to this many ms.
const BUCKETS: usize = 20_000;

fn main() -> std::process::ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("scale: no runtime: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    match runtime.block_on(scale()) {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("scale: leases were lost or renewed late");
            std::process::ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("scale: {e}");
            std::process::ExitCode::from(1)
        }
    }
}

/// A histogram of milliseconds.
struct Histogram {
    buckets: Vec<u64>,
    count: u64,
    max: u64,
}

impl Histogram {
    fn new() -> Self {
        Histogram {
            buckets: vec![0; BUCKETS + 1],
            count: 0,
            max: 0,
        }
    }

    fn record(&mut self, d: Duration) {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        self.buckets[usize::try_from(ms).unwrap_or(BUCKETS).min(BUCKETS)] += 1;
        self.count += 1;
        self.max = self.max.max(ms);
    }

    fn percentile(&self, p: f64) -> u64 {
        let rank = ((p / 100.0) * self.count as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (ms, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return ms as u64;
            }
        }
        self.max
    }

    fn above(&self, ms: u64) -> u64 {
        self.buckets
            .iter()
            .skip(usize::try_from(ms).unwrap_or(BUCKETS) + 1)
            .sum()
    }
}

/// Each renewal's duration, from the start of its attempt (when it was
/// due, and queued) to its answer, as `lease-core` records it in the
/// `lease_renewal_duration_seconds` histogram: a renewal is within its
/// interval when it answered before the next one was due.
struct RenewalDurations {
    measuring: std::sync::atomic::AtomicBool,
    histogram: Mutex<Histogram>,
}

impl RenewalDurations {
    fn get() -> &'static Arc<RenewalDurations> {
        static DURATIONS: std::sync::OnceLock<Arc<RenewalDurations>> = std::sync::OnceLock::new();
        DURATIONS.get_or_init(|| {
            Arc::new(RenewalDurations {
                measuring: std::sync::atomic::AtomicBool::new(false),
                histogram: Mutex::new(Histogram::new()),
            })
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Histogram> {
        self.histogram
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn measure(&self, on: bool) {
        if on {
            *self.lock() = Histogram::new();
        }
        self.measuring
            .store(on, std::sync::atomic::Ordering::SeqCst);
    }
}

impl metrics::HistogramFn for RenewalDurations {
    fn record(&self, value: f64) {
        if self.measuring.load(std::sync::atomic::Ordering::Relaxed) {
            self.lock().record(Duration::from_secs_f64(value.max(0.0)));
        }
    }
}

/// A metrics recorder that keeps the renewal durations and drops the rest.
struct Recorder;

impl metrics::Recorder for Recorder {
    fn describe_counter(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn register_counter(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        metrics::Counter::noop()
    }
    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }
    fn register_histogram(
        &self,
        key: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        if key.name() == "lease_renewal_duration_seconds" {
            metrics::Histogram::from_arc(RenewalDurations::get().clone())
        } else {
            metrics::Histogram::noop()
        }
    }
}

/// What the recording store saw.
struct Record {
    /// When each lease's last renewal (or its claim) answered.
    last: HashMap<String, Instant>,
    /// Whether the window is on: gaps and latencies are counted only then.
    measuring: bool,
    /// Gaps between a lease's successive renewals, over the window.
    gaps: Histogram,
    /// Latency of each renewal statement (a batch, or one renewal), over
    /// the window.
    statements: Histogram,
    /// Size of each batch, over the window.
    batch_rows: u64,
    batches: u64,
    max_batch: usize,
    /// Store calls that write (claims, renewals, batches, releases): each
    /// is one transaction.
    writes: u64,
    /// Rows renewed.
    renewed: u64,
    /// Batches in flight now, and the most at once over the window.
    in_flight: usize,
    max_in_flight: usize,
}

/// A store that forwards every call and records the renewals' timing.
struct Recording {
    inner: Arc<dyn LeaseStore>,
    record: Mutex<Record>,
}

impl std::fmt::Debug for Recording {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recording").finish_non_exhaustive()
    }
}

impl Recording {
    fn new(inner: Arc<dyn LeaseStore>) -> Self {
        Recording {
            inner,
            record: Mutex::new(Record {
                last: HashMap::new(),
                measuring: false,
                gaps: Histogram::new(),
                statements: Histogram::new(),
                batch_rows: 0,
                batches: 0,
                max_batch: 0,
                writes: 0,
                renewed: 0,
                in_flight: 0,
                max_in_flight: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Record> {
        self.record
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts (or stops) counting, clearing what was counted.
    fn measure(&self, on: bool) {
        let mut r = self.lock();
        r.measuring = on;
        if on {
            r.gaps = Histogram::new();
            r.statements = Histogram::new();
            r.batch_rows = 0;
            r.batches = 0;
            r.max_batch = 0;
            r.max_in_flight = r.in_flight;
        }
    }

    fn renewed<'a>(&self, names: impl Iterator<Item = &'a str>, sent: Instant) {
        let now = Instant::now();
        let mut r = self.lock();
        r.writes += 1;
        let measuring = r.measuring;
        if measuring {
            r.statements.record(now - sent);
        }
        let mut renewed = 0;
        let mut gaps = Vec::new();
        for name in names {
            renewed += 1;
            if let Some(last) = r.last.get_mut(name) {
                if measuring {
                    gaps.push(now - *last);
                }
                *last = now;
            }
        }
        r.renewed += renewed;
        for gap in gaps {
            r.gaps.record(gap);
        }
    }
}

#[async_trait]
impl ForwardingStore for Recording {
    fn inner(&self) -> &dyn LeaseStore {
        &*self.inner
    }

    async fn claim(&self, claim: ClaimRequest<'_>) -> Result<Option<u64>, BoxError> {
        let ClaimRequest { name, .. } = claim;
        let claimed = self.inner.claim(claim).await?;
        let mut r = self.lock();
        r.writes += 1;
        if claimed.is_some() {
            let _ = r.last.insert(name.to_owned(), Instant::now());
        }
        Ok(claimed)
    }

    async fn renew(
        &self,
        name: &str,
        token: Token<'_>,
        lease_ms: i64,
    ) -> Result<Option<i64>, BoxError> {
        let sent = Instant::now();
        let held = self.inner.renew(name, token, lease_ms).await?;
        if held.is_some() {
            self.renewed(std::iter::once(name), sent);
        }
        Ok(held)
    }

    async fn renew_many(
        &self,
        leases: &[(&str, Token<'_>)],
        lease_ms: i64,
    ) -> Result<Vec<Option<i64>>, BoxError> {
        {
            let mut r = self.lock();
            r.in_flight += 1;
            r.max_in_flight = r.max_in_flight.max(r.in_flight);
            if r.measuring {
                r.batches += 1;
                r.batch_rows += leases.len() as u64;
                r.max_batch = r.max_batch.max(leases.len());
            }
        }
        let sent = Instant::now();
        let held = self.inner.renew_many(leases, lease_ms).await;
        self.lock().in_flight -= 1;
        let held = held?;
        self.renewed(
            leases
                .iter()
                .zip(&held)
                .filter(|(_, held)| held.is_some())
                .map(|((name, _), _)| *name),
            sent,
        );
        Ok(held)
    }

    async fn release(&self, name: &str, token: Token<'_>) -> Result<bool, BoxError> {
        let released = self.inner.release(name, token).await?;
        let mut r = self.lock();
        r.writes += 1;
        let _ = r.last.remove(name);
        Ok(released)
    }
}

/// The database's side of the measurement: counters, and the least time
/// left on any held lease.
enum Meter {
    Postgres { pool: Pool, app: String },
    MySql { pool: mysql_async::Pool },
    Sqlite { path: PathBuf },
}

/// What the database and this process had spent at one moment.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Instant,
    /// Rows updated in the table (`None`: counted by the wrapper).
    rows_updated: Option<i64>,
    /// Transactions committed in the database (`None`: counted by the
    /// wrapper).
    commits: Option<i64>,
    server_cpu: Option<Duration>,
    process_cpu: Duration,
    writes: u64,
    renewed: u64,
}

/// The CPU time of the first process whose command is `mariadbd` or
/// `mysqld`.
fn mariadbd_cpu() -> Option<Duration> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if matches!(comm.trim(), "mariadbd" | "mysqld") {
            return cpu_time(Some(pid)).ok();
        }
    }
    None
}

/// The resident memory of this process, in bytes.
fn rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

impl Meter {
    async fn sample(&self, recording: &Recording) -> BoxResult<Sample> {
        let (rows_updated, commits, server_cpu) = match self {
            Meter::Postgres { pool, app } => {
                let client = pool.get().await?;
                // Statistics are flushed by each backend at most once a
                // second: ask for a fresh snapshot of what has been flushed.
                client
                    .batch_execute("SELECT pg_stat_clear_snapshot()")
                    .await?;
                let rows: i64 = client
                    .query_opt(
                        "SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = $1::text",
                        &[&TABLE],
                    )
                    .await?
                    .map_or(Ok(0), |r| r.try_get(0))?;
                let commits: i64 = client
                    .query_one(
                        "SELECT xact_commit FROM pg_stat_database \
                         WHERE datname = current_database()",
                        &[],
                    )
                    .await?
                    .try_get(0)?;
                let pids: Vec<i32> = client
                    .query(
                        "SELECT pid FROM pg_stat_activity WHERE application_name = $1::text",
                        &[app],
                    )
                    .await?
                    .iter()
                    .map(|r| r.try_get(0))
                    .collect::<Result<_, _>>()?;
                let mut cpu = Duration::ZERO;
                for pid in pids {
                    if let Ok(t) = cpu_time(u32::try_from(pid).ok()) {
                        cpu += t;
                    }
                }
                (Some(rows), Some(commits), Some(cpu))
            }
            Meter::MySql { pool } => {
                let mut conn = pool.get_conn().await?;
                let status: Vec<(String, String)> = conn
                    .query(
                        "SHOW GLOBAL STATUS WHERE Variable_name IN \
                         ('Handler_update', 'Handler_commit')",
                    )
                    .await?;
                let get = |name: &str| {
                    status
                        .iter()
                        .find(|(n, _)| n.eq_ignore_ascii_case(name))
                        .and_then(|(_, v)| v.parse::<i64>().ok())
                };
                (get("Handler_update"), get("Handler_commit"), mariadbd_cpu())
            }
            Meter::Sqlite { .. } => (None, None, None),
        };
        let r = recording.lock();
        Ok(Sample {
            at: Instant::now(),
            rows_updated,
            commits,
            server_cpu,
            process_cpu: cpu_time(None)?,
            writes: r.writes,
            renewed: r.renewed,
        })
    }

    /// PostgreSQL: how long the oldest snapshot of another client has been
    /// held, in s (it keeps VACUUM and HOT pruning from removing the dead
    /// rows the renewals leave, so every renewal costs the server more).
    async fn oldest_other_snapshot(&self) -> BoxResult<Option<f64>> {
        match self {
            Meter::Postgres { pool, .. } => {
                let row = pool
                    .get()
                    .await?
                    .query_one(
                        "SELECT coalesce(extract(epoch FROM max(clock_timestamp() - xact_start)), 0)::float8 \
                           FROM pg_stat_activity \
                          WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid() \
                            AND application_name NOT LIKE 'lease-scale-%'",
                        &[],
                    )
                    .await?;
                Ok(Some(row.try_get(0)?))
            }
            _ => Ok(None),
        }
    }

    /// The held leases in the table, and the least time left on any of
    /// them by the database's clock, in ms.
    async fn least_left(&self) -> BoxResult<(i64, i64)> {
        match self {
            Meter::Postgres { pool, .. } => {
                let row = pool
                    .get()
                    .await?
                    .query_one(
                        &format!(
                            "SELECT count(*), coalesce(min(expires_at_ms), 0) \
                               - floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint \
                             FROM {TABLE} WHERE expires_at_ms > 0"
                        ),
                        &[],
                    )
                    .await?;
                Ok((row.try_get(0)?, row.try_get(1)?))
            }
            Meter::MySql { pool } => {
                let mut conn = pool.get_conn().await?;
                let row: Option<(i64, i64)> = conn
                    .query_first(format!(
                        "SELECT count(*), CAST(coalesce(min(expires_at_ms), 0) \
                           - CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) AS SIGNED) \
                         FROM {TABLE} WHERE expires_at_ms > 0"
                    ))
                    .await?;
                row.ok_or_else(|| "no answer".into())
            }
            Meter::Sqlite { path } => {
                let path = path.clone();
                tokio::task::spawn_blocking(move || {
                    let conn = rusqlite::Connection::open(path)?;
                    conn.busy_timeout(Duration::from_secs(5))?;
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)?
                        .as_millis();
                    let now = i64::try_from(now)?;
                    let (n, min): (i64, Option<i64>) = conn.query_row(
                        &format!(
                            "SELECT count(*), min(expires_at_ms) FROM {TABLE} \
                             WHERE expires_at_ms > 0"
                        ),
                        [],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )?;
                    Ok::<_, BoxError>((n, min.unwrap_or(0) - now))
                })
                .await?
            }
        }
    }
}

fn report(label: &str, a: &Sample, b: &Sample, held: usize, demanded: f64, figures: &Figures) {
    let secs = (b.at - a.at).as_secs_f64();
    let per_s = |x: i64, y: i64| (y - x) as f64 / secs;
    let pct = |x: Duration, y: Duration| 100.0 * (y.saturating_sub(x)).as_secs_f64() / secs;
    let renewed = (b.renewed - a.renewed) as f64 / secs;
    println!("  {label} ({secs:.1} s window)");
    println!("    lease renewals the protocol asks for:     {demanded:>9.0} /s");
    println!("    leases renewed (answers to this process): {renewed:>9.0} /s");
    figures.add(
        "renewals asked / answered",
        format!("{demanded:.0} / {renewed:.0} /s"),
    );
    if let (Some(x), Some(y)) = (a.rows_updated, b.rows_updated) {
        println!(
            "    rows updated in the table (server stats): {:>9.0} /s",
            per_s(x, y)
        );
    }
    if renewed > 0.0 {
        println!(
            "    so each lease renewed every:              {:>9.2} s",
            held as f64 / renewed
        );
    }
    println!(
        "    write transactions sent by this process:  {:>9.1} /s",
        (b.writes - a.writes) as f64 / secs
    );
    figures.add(
        "write transactions from this process",
        format!("{:.1} /s", (b.writes - a.writes) as f64 / secs),
    );
    if let (Some(x), Some(y)) = (a.commits, b.commits) {
        println!(
            "    commits in the whole database:            {:>9.1} /s  (every client, others' included)",
            per_s(x, y)
        );
        figures.add(
            "commits in the whole database (every client)",
            format!("{:.1} /s", per_s(x, y)),
        );
    }
    if let (Some(x), Some(y)) = (a.server_cpu, b.server_cpu) {
        println!(
            "    CPU of the server:                        {:>9.1} % of one core",
            pct(x, y)
        );
        figures.add("server CPU", format!("{:.1} % of a core", pct(x, y)));
    }
    println!(
        "    CPU of this process:                      {:>9.1} % of one core",
        pct(a.process_cpu, b.process_cpu)
    );
    figures.add(
        "process CPU",
        format!("{:.1} % of a core", pct(a.process_cpu, b.process_cpu)),
    );
}

struct Run<'a> {
    leases: &'a Leases,
    recording: &'a Recording,
    meter: &'a Meter,
    n: usize,
    seconds: u64,
    concurrency: usize,
    figures: &'a Figures,
}

/// Claims `n` leases (`concurrency` at a time) and holds each one,
/// measures their renewals over `seconds`, then stops and releases them
/// all: whether none was lost and every one was renewed on time.
async fn hold_and_measure(run: &Run<'_>, label: &str) -> BoxResult<bool> {
    let Run {
        leases,
        recording,
        meter,
        n,
        seconds,
        concurrency,
        figures,
    } = *run;
    let timings = *leases.timings();
    let shutdown = CancellationToken::new();
    let rss_before = rss();
    // The renewals of the leases claimed first go on while the others are
    // claimed: they are measured too.
    recording.measure(true);
    let started = Instant::now();
    let gate = Arc::new(Semaphore::new(concurrency));
    let mut claims = Vec::with_capacity(n);
    for i in 0..n {
        let leases = leases.clone();
        let gate = gate.clone();
        let shutdown = shutdown.clone();
        claims.push(tokio::spawn(async move {
            let _permit = gate.acquire_owned().await?;
            let t = Instant::now();
            let handle = leases
                .claim(&format!("scale:{i}"))
                .await?
                .ok_or("a free name was refused")?;
            let holder = handle.hold(&shutdown);
            Ok::<_, BoxError>((handle, holder, t.elapsed()))
        }));
    }
    let mut held: Vec<(Handle, Holder)> = Vec::with_capacity(n);
    let mut latencies = Vec::with_capacity(n);
    for claim in claims {
        let (handle, holder, took) = claim.await??;
        held.push((handle, holder));
        latencies.push(took);
    }
    let claim_time = started.elapsed();
    let claimed = Summary::of(latencies, 0, claim_time);
    println!(
        "  {label}: claimed and holding {} leases in {:.1} s ({:.0} claims/s, {concurrency} in flight, p50 {}, p99 {})",
        held.len(),
        claim_time.as_secs_f64(),
        claimed.throughput,
        Latency(claimed.p50),
        Latency(claimed.p99)
    );
    figures.add(
        &format!("time to claim all ({concurrency} in flight)"),
        format!(
            "{:.1} s ({:.0} claims/s, p50 {})",
            claim_time.as_secs_f64(),
            claimed.throughput,
            Latency(claimed.p50)
        ),
    );
    {
        let r = recording.lock();
        println!(
            "    meanwhile, gap between a lease's renewals: p50 {} ms, p99 {} ms, max {} ms ({} gaps), {} statements p99 {} ms",
            r.gaps.percentile(50.0),
            r.gaps.percentile(99.0),
            r.gaps.max,
            r.gaps.count,
            r.statements.count,
            r.statements.percentile(99.0),
        );
    }
    // Two renewal rounds for every lease before the window: the renewals
    // of the last leases claimed settle into their cadence.
    sleep(timings.renew() * 2).await;
    let rss_held = rss();
    if let (Some(before), Some(after)) = (rss_before, rss_held) {
        println!(
            "    resident memory: {:.1} MiB before the claims, {:.1} MiB holding them: {:.2} KiB per held lease",
            before as f64 / 1048576.0,
            after as f64 / 1048576.0,
            after.saturating_sub(before) as f64 / 1024.0 / n as f64
        );
        figures.add(
            "resident memory per held lease",
            format!(
                "{:.2} KiB",
                after.saturating_sub(before) as f64 / 1024.0 / n as f64
            ),
        );
    }
    recording.measure(true);
    RenewalDurations::get().measure(true);
    let a = meter.sample(recording).await?;
    let mut least_left = i64::MAX;
    let mut oldest_snapshot = 0.0f64;
    // A line every 5 s of the window (on stderr: the report is stdout),
    // with the database's view of the least time left on any lease.
    let window_end = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < window_end {
        sleep(
            window_end
                .saturating_duration_since(Instant::now())
                .min(Duration::from_secs(5)),
        )
        .await;
        let lost = held.iter().filter(|(h, _)| h.lost()).count();
        let (in_table, left) = meter.least_left().await?;
        least_left = least_left.min(left);
        if let Some(age) = meter.oldest_other_snapshot().await? {
            oldest_snapshot = oldest_snapshot.max(age);
        }
        eprintln!(
            "    ... {:>3.0} s left in the window, {lost} of {} leases lost, {in_table} held in the table, least time left on one {left} ms",
            window_end
                .saturating_duration_since(Instant::now())
                .as_secs_f64(),
            held.len()
        );
    }
    let b = meter.sample(recording).await?;
    recording.measure(false);
    RenewalDurations::get().measure(false);
    let lost = held.iter().filter(|(h, _)| h.lost()).count();
    report(
        label,
        &a,
        &b,
        held.len(),
        held.len() as f64 / timings.renew().as_secs_f64(),
        figures,
    );
    let renew_ms = u64::try_from(timings.renew().as_millis())?;
    // Late: a renewal that had not answered when the next one was due
    // (its duration counts from the start of its attempt, when it was due).
    let (late, on_time) = {
        let durations = RenewalDurations::get().lock();
        println!(
            "    renewal duration (due -> answered):       p50 {} ms, p99 {} ms, max {} ms ({} renewals)",
            durations.percentile(50.0),
            durations.percentile(99.0),
            durations.max,
            durations.count
        );
        figures.add(
            "renewal duration, due → answered, p50 / p99 / max",
            format!(
                "{} / {} / {} ms",
                durations.percentile(50.0),
                durations.percentile(99.0),
                durations.max
            ),
        );
        let late = durations.above(renew_ms.saturating_sub(1));
        println!("    renewals not answered within their {renew_ms} ms interval: {late:>5}");
        figures.add(
            &format!("renewals not answered within their {renew_ms} ms interval"),
            format!("**{late}** of {}", durations.count),
        );
        let measured = durations.count > 0;
        drop(durations);
        let r = recording.lock();
        println!(
            "    gap between a lease's renewals:           p50 {} ms, p99 {} ms, max {} ms ({} gaps), {} over {} ms",
            r.gaps.percentile(50.0),
            r.gaps.percentile(99.0),
            r.gaps.max,
            r.gaps.count,
            r.gaps.above(renew_ms + renew_ms / 4),
            renew_ms + renew_ms / 4
        );
        figures.add(
            "gap between a lease's renewals p50 / p99 / max",
            format!(
                "{} / {} / {} ms",
                r.gaps.percentile(50.0),
                r.gaps.percentile(99.0),
                r.gaps.max
            ),
        );
        figures.add(
            "renewal statement p50 / p99 / max",
            format!(
                "{} / {} / {} ms",
                r.statements.percentile(50.0),
                r.statements.percentile(99.0),
                r.statements.max
            ),
        );
        println!(
            "    renewal statement latency:                p50 {} ms, p99 {} ms, max {} ms ({} statements)",
            r.statements.percentile(50.0),
            r.statements.percentile(99.0),
            r.statements.max,
            r.statements.count
        );
        if r.batches > 0 {
            println!(
                "    batches: {} ({:.1} /s), {:.0} renewals each on average, {} at most, up to {} in flight at once",
                r.batches,
                r.batches as f64 / (b.at - a.at).as_secs_f64(),
                r.batch_rows as f64 / r.batches as f64,
                r.max_batch,
                r.max_in_flight
            );
            figures.add(
                "batches",
                format!(
                    "{:.1} /s, {:.0} renewals each (≤ {}), ≤ {} in flight",
                    r.batches as f64 / (b.at - a.at).as_secs_f64(),
                    r.batch_rows as f64 / r.batches as f64,
                    r.max_batch,
                    r.max_in_flight
                ),
            );
        }
        (late, measured && r.gaps.count > 0)
    };
    println!(
        "    least time left on a lease (database):    {least_left:>9} ms  (lease {} ms)",
        timings.lease().as_millis()
    );
    if matches!(meter, Meter::Postgres { .. }) {
        println!(
            "    oldest snapshot held by another client:   {oldest_snapshot:>9.0} s  (sampled every 5 s; it holds back HOT pruning and VACUUM)"
        );
    }
    figures.add(
        "least time left on a lease (database)",
        format!(
            "{:.2} s of {}",
            least_left as f64 / 1000.0,
            timings.lease().as_secs_f64()
        ),
    );
    println!("    leases lost meanwhile:                    {lost:>9}");
    figures.add("leases lost", format!("**{lost}**"));
    let released_at = Instant::now();
    shutdown.cancel();
    let gate = Arc::new(Semaphore::new(concurrency));
    let mut releases = Vec::with_capacity(n);
    for (handle, holder) in held {
        let gate = gate.clone();
        releases.push(tokio::spawn(async move {
            let _permit = gate.acquire_owned().await?;
            holder.stop().await;
            if !handle.lost() {
                handle.release().await?;
            }
            Ok::<_, BoxError>(())
        }));
    }
    for release in releases {
        release.await??;
    }
    println!(
        "    released them all in {:.1} s",
        released_at.elapsed().as_secs_f64()
    );
    Ok(lost == 0 && late == 0 && on_time)
}

fn sqlite_path(url: &str) -> Option<PathBuf> {
    let rest = url.get(7..)?;
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    (rest != ":memory:" && !rest.is_empty()).then(|| PathBuf::from(rest))
}

async fn scale() -> BoxResult<bool> {
    let mut leases_n = 10_000usize;
    let mut seconds = 20u64;
    let mut pool_size = 4usize;
    let mut concurrency = 32usize;
    let mut mode = "batched".to_owned();
    let mut figures_file = None;
    let mut url = None;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--leases" => leases_n = it.next().ok_or(USAGE)?.parse()?,
            "--seconds" => seconds = it.next().ok_or(USAGE)?.parse()?,
            "--pool" => pool_size = it.next().ok_or(USAGE)?.parse()?,
            "--claim-concurrency" => concurrency = it.next().ok_or(USAGE)?.parse()?,
            "--mode" => mode = it.next().ok_or(USAGE)?,
            "--figures" => figures_file = Some(PathBuf::from(it.next().ok_or(USAGE)?)),
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(true);
            }
            s if s.starts_with("--") => return Err(format!("unknown flag {s}\n{USAGE}").into()),
            _ => url = Some(arg),
        }
    }
    let url = url.ok_or(USAGE)?;
    metrics::set_global_recorder(Recorder).map_err(|e| e.to_string())?;
    let backend = Backend::of(&url).ok_or("unrecognised URL scheme")?;
    let (store, meter, describe, cleanup): (Arc<dyn LeaseStore>, Meter, String, Cleanup) =
        match backend {
            Backend::Postgres => {
                let app = format!("lease-scale-{}", std::process::id());
                let sep = if url.contains('?') { '&' } else { '?' };
                let store = PostgresStore::builder(&format!("{url}{sep}application_name={app}"))?
                    .with_table(TABLE)
                    .with_pool_size(pool_size)
                    .build()?;
                // The meter's own connection, under another name: its
                // statements are not counted as the store's.
                let meter_store = PostgresStore::builder(&format!(
                    "{url}{sep}application_name=lease-scale-meter-{}",
                    std::process::id()
                ))?
                .with_table(TABLE)
                .with_pool_size(1)
                .build()?;
                let pool = meter_store.pool().clone();
                pool.get()
                    .await?
                    .batch_execute(&format!("DROP TABLE IF EXISTS {TABLE}"))
                    .await?;
                (
                    Arc::new(store),
                    Meter::Postgres {
                        pool: pool.clone(),
                        app,
                    },
                    format!("PostgreSQL (pool of {pool_size} connections)"),
                    Cleanup::Postgres(pool),
                )
            }
            Backend::MySql => {
                let store = MySqlStore::builder(&url)?
                    .with_table(TABLE)
                    .with_pool_constraints(1, pool_size)
                    .connect()
                    .await?;
                let meter_store = MySqlStore::builder(&url)?
                    .with_table(TABLE)
                    .with_pool_constraints(1, 1)
                    .connect()
                    .await?;
                let pool = meter_store.pool().clone().into_inner();
                pool.get_conn()
                    .await?
                    .query_drop(format!("DROP TABLE IF EXISTS {TABLE}"))
                    .await?;
                (
                    Arc::new(store),
                    Meter::MySql { pool: pool.clone() },
                    format!("MariaDB/MySQL (pool of up to {pool_size} connections)"),
                    Cleanup::MySql(pool),
                )
            }
            Backend::Sqlite => {
                let path = sqlite_path(&url).ok_or("the scale run needs an SQLite file")?;
                for suffix in ["", "-wal", "-shm"] {
                    let mut p = path.clone().into_os_string();
                    p.push(suffix);
                    let _ = std::fs::remove_file(p);
                }
                let store = SqliteStoreBuilder::from_path(&path)
                    .with_table(TABLE)
                    .build()?;
                (
                    Arc::new(store),
                    Meter::Sqlite { path: path.clone() },
                    format!("SQLite (one connection, {})", path.display()),
                    Cleanup::Sqlite(path),
                )
            }
        };
    let recording = Arc::new(Recording::new(store));
    let leases = Leases::from_arc(recording.clone());
    leases.migrate().await?;
    let timings = *leases.timings();
    println!(
        "scale: {leases_n} leases held by one process on {describe}, renewals every {:?}, lease {:?}",
        timings.renew(),
        timings.lease()
    );
    if !matches!(mode.as_str(), "per-lease" | "batched" | "both") {
        return Err(format!("unknown mode {mode}\n{USAGE}").into());
    }
    let figures = Figures::default();
    figures.add(
        "backend",
        format!("{describe}, {leases_n} leases, {seconds} s"),
    );
    let per_lease = leases.clone();
    let batched = leases.clone().with_renewal_batching(true);
    let mut ok = true;
    for (run_it, leases, label) in [
        (
            mode == "per-lease" || mode == "both",
            &per_lease,
            "per-lease renewals",
        ),
        (
            mode == "batched" || mode == "both",
            &batched,
            "batched renewals (Leases::with_renewal_batching)",
        ),
    ] {
        if run_it {
            *figures
                .prefix
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = if mode == "both" {
                format!("{label}: ")
            } else {
                String::new()
            };
            let run = Run {
                leases,
                recording: &recording,
                meter: &meter,
                n: leases_n,
                seconds,
                concurrency,
                figures: &figures,
            };
            ok &= hold_and_measure(&run, label).await?;
        }
    }
    cleanup.run().await?;
    if let Some(path) = figures_file {
        figures.write(&path)?;
    }
    Ok(ok)
}

/// Drops the table (and the SQLite file) at the end.
enum Cleanup {
    Postgres(Pool),
    MySql(mysql_async::Pool),
    Sqlite(PathBuf),
}

impl Cleanup {
    async fn run(self) -> BoxResult<()> {
        match self {
            Cleanup::Postgres(pool) => {
                pool.get()
                    .await?
                    .batch_execute(&format!("DROP TABLE IF EXISTS {TABLE}"))
                    .await?;
            }
            Cleanup::MySql(pool) => {
                pool.get_conn()
                    .await?
                    .query_drop(format!("DROP TABLE IF EXISTS {TABLE}"))
                    .await?;
            }
            Cleanup::Sqlite(path) => {
                for suffix in ["", "-wal", "-shm"] {
                    let mut p = path.clone().into_os_string();
                    p.push(suffix);
                    let _ = std::fs::remove_file(p);
                }
            }
        }
        Ok(())
    }
}
