//! The benchmark: the lease protocol's operations beside the database's
//! floor, measured in the same run on the same pool.
//!
//! ```sh
//! cargo run --release -p lease-bench --bin bench -- \
//!     sqlite:///tmp/lease-bench.db \
//!     postgres://postgres@127.0.0.1:5432/test \
//!     mysql://root@127.0.0.1:3306/test
//! ```
//!
//! With no URL it runs on an SQLite file in a temp dir. `--seconds N` sets
//! how long each cell runs (default 2), `--concurrency 1,8,32` the
//! concurrencies.
//!
//! For each backend and concurrency it measures, each over the same time:
//!
//! - the **operation** through `lease-core` (`Leases`, `Handle`) and the
//!   backend's store: claim + release of distinct names (one per worker),
//!   renew (each worker cycling over 32 leases, so every renewal writes),
//!   a contended claim of one name (released at once when won), an
//!   instant claim + finish, and a guarded transaction (one business
//!   `UPDATE`);
//! - the **hand-written SQL** of the same operation: the specification's
//!   statements written plainly, one per protocol statement (the unguarded
//!   transaction: `BEGIN`, the same `UPDATE`, `COMMIT`), on the store's own
//!   pool;
//! - **`SELECT 1`** on the same pool.
//!
//! SQLite's store runs on one connection of its own, which nothing outside
//! it can reach: its floor runs on a second connection to the same file,
//! used the same way (one connection, off the runtime). SQLite's guarded
//! transaction (`SqliteStore::transaction`) is not measured yet, so that row
//! says so.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::error::Error;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use dblease::mysql::MySqlStore;
use dblease::mysql::mysql_async::{self, prelude::Queryable};
use dblease::postgres::PostgresStore;
use dblease::postgres::deadpool_postgres;
use dblease::sqlite::{SqliteStoreBuilder, Synchronous};
use dblease::{CancellationToken, LeaseContext, Leases, UtcMillis};
use lease_bench::stats::{Latency, Summary, ratio};
use lease_bench::url::Backend;
use tokio::time::Instant;

type BoxError = Box<dyn Error + Send + Sync>;
type BoxResult<T> = Result<T, BoxError>;

/// The benchmark's own lease table, emptied as each run starts.
const TABLE: &str = "lease_bench";
/// The table the guarded transactions write to.
const COUNTERS: &str = "lease_bench_counters";
/// The pool size for the servers: the highest concurrency measured.
const POOL: usize = 32;
/// The lease the hand-written statements grant, like the protocol's.
const LEASE_MS: i64 = 15_000;

/// The leases each worker of the renew cell cycles over.
const RENEW_ROWS: usize = 32;

const USAGE: &str =
    "usage: bench [--seconds N] [--concurrency 1,8,32] [--sqlite-synchronous full|normal] [URL...]";

fn main() -> std::process::ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("bench: no runtime: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    match runtime.block_on(bench()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e}");
            std::process::ExitCode::from(1)
        }
    }
}

async fn bench() -> BoxResult<()> {
    let mut seconds = 2.0f64;
    let mut concurrency = vec![1usize, 8, 32];
    let mut urls = Vec::new();
    let mut synchronous = Synchronous::Full;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--seconds" => seconds = it.next().ok_or(USAGE)?.parse()?,
            "--concurrency" => {
                concurrency = it
                    .next()
                    .ok_or(USAGE)?
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()?;
            }
            "--sqlite-synchronous" => {
                synchronous = match it.next().ok_or(USAGE)?.as_str() {
                    "full" => Synchronous::Full,
                    "normal" => Synchronous::Normal,
                    other => return Err(format!("unknown synchronous {other}\n{USAGE}").into()),
                };
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            s if s.starts_with("--") => return Err(format!("unknown flag {s}\n{USAGE}").into()),
            _ => urls.push(arg),
        }
    }
    let dir = tempfile::tempdir()?;
    if urls.is_empty() {
        urls.push(format!(
            "sqlite://{}",
            dir.path().join("bench.db").display()
        ));
    }
    let cell = Duration::from_secs_f64(seconds);
    println!(
        "lease bench: {seconds} s per cell, concurrency {concurrency:?}; p50 / p99 latency and ops/s\n\
         floors measured in the same run on the same pool: the operation's statements written by hand, and SELECT 1"
    );
    for url in &urls {
        let target = Target::open(url, synchronous).await?;
        run_backend(target, &concurrency, cell).await?;
    }
    Ok(())
}

/// The backend's raw access, beside its store.
#[derive(Clone)]
enum Raw {
    Postgres(deadpool_postgres::Pool),
    MySql(mysql_async::Pool),
    Sqlite(Arc<Mutex<rusqlite::Connection>>),
}

impl Raw {
    /// Runs statements that return nothing.
    async fn batch(&self, sql: &str) -> BoxResult<()> {
        match self {
            Raw::Postgres(pool) => {
                pool.get().await?.batch_execute(sql).await?;
            }
            Raw::MySql(pool) => pool.get_conn().await?.query_drop(sql).await?,
            Raw::Sqlite(conn) => {
                let conn = conn.clone();
                let sql = sql.to_owned();
                tokio::task::spawn_blocking(move || {
                    conn.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .execute_batch(&sql)
                })
                .await??;
            }
        }
        Ok(())
    }

    /// Runs one hand-written statement (prepared, as the stores do) and
    /// returns the rows it changed, or returned.
    async fn exec(&self, sql: &str, params: Params) -> BoxResult<u64> {
        match self {
            Raw::Postgres(pool) => {
                let client = pool.get().await?;
                let stmt = client.prepare_cached(sql).await?;
                let n = match params {
                    Params::None => client.query(&stmt, &[]).await?.len() as u64,
                    Params::Two(a, b) => client.execute(&stmt, &[&a, &b]).await?,
                    Params::Three(a, b, c) => client.execute(&stmt, &[&a, &b, &c]).await?,
                    Params::Slot(a, b, c, d) => client.execute(&stmt, &[&a, &b, &c, &d]).await?,
                };
                Ok(n)
            }
            Raw::MySql(pool) => {
                let mut conn = pool.get_conn().await?;
                match params {
                    Params::None => conn.exec_drop(sql, ()).await?,
                    Params::Two(a, b) => conn.exec_drop(sql, (a, b)).await?,
                    Params::Three(a, b, c) => conn.exec_drop(sql, (a, b, c)).await?,
                    // Positional: the slot appears three times, in order.
                    Params::Slot(a, b, c, d) => conn.exec_drop(sql, (a, b, c, c, d, c)).await?,
                }
                Ok(conn.affected_rows())
            }
            Raw::Sqlite(conn) => {
                let conn = conn.clone();
                let sql = sql.to_owned();
                let n = tokio::task::spawn_blocking(move || {
                    let conn = conn.lock().unwrap_or_else(PoisonError::into_inner);
                    let mut stmt = conn.prepare_cached(&sql)?;
                    match params {
                        Params::None => stmt.query_row([], |_| Ok(1usize)),
                        Params::Two(a, b) => stmt.execute(rusqlite::params![a, b]),
                        Params::Three(a, b, c) => stmt.execute(rusqlite::params![a, b, c]),
                        Params::Slot(a, b, c, d) => stmt.execute(rusqlite::params![a, b, c, d]),
                    }
                })
                .await??;
                Ok(n as u64)
            }
        }
    }
}

/// Which transaction guard the backend has.
enum Guard {
    Postgres(PostgresStore),
    MySql(MySqlStore),
    None,
}

/// The backend under test: the store through `lease-core`, and raw access
/// to the same database (the store's own pool) for the floors.
struct Target {
    backend: Backend,
    leases: Leases,
    raw: Raw,
    guard: Guard,
    sql: Sql,
    note: String,
}

/// The specification's statements, written by hand, plainly: the clock
/// expression inline, one statement per protocol statement, on a row that
/// exists (the store's own claims made it).
struct Sql {
    claim: String,
    release: String,
    renew: String,
    slot_claim: String,
    finish: String,
    update_counter: String,
}

impl Sql {
    fn of(backend: Backend) -> Sql {
        let now = match backend {
            Backend::Postgres => "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint",
            Backend::MySql => "(UNIX_TIMESTAMP() * 1000 + MICROSECOND(NOW(3)) DIV 1000)",
            Backend::Sqlite => "CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER)",
        };
        // Placeholder `i` of type `ty`; MySQL binds in order of appearance.
        let p = |i: usize, ty: &str| match backend {
            Backend::Postgres => format!("${i}::{ty}"),
            Backend::MySql => "?".to_owned(),
            Backend::Sqlite => format!("?{i}"),
        };
        let (t1, t2, t3) = (p(1, "text"), p(2, "text"), p(3, "text"));
        let (slot, job) = (p(3, "bigint"), p(4, "text"));
        Sql {
            claim: format!(
                "UPDATE {TABLE} SET holder = {t1}, instance = {t2}, term = term + 1, \
                 expires_at_ms = {now} + {LEASE_MS} WHERE name = {t3} AND expires_at_ms <= {now}"
            ),
            release: format!(
                "UPDATE {TABLE} SET expires_at_ms = 0 WHERE name = {t1} AND holder = {t2}"
            ),
            renew: format!(
                "UPDATE {TABLE} SET expires_at_ms = {now} + {LEASE_MS} \
                 WHERE name = {t1} AND holder = {t2} AND expires_at_ms > {now}"
            ),
            slot_claim: format!(
                "UPDATE {TABLE} SET holder = {t1}, instance = {t2}, term = term + 1, \
                 expires_at_ms = {now} + {LEASE_MS}, slot_ms = {slot}, unfinished_slot_ms = {slot} \
                 WHERE name = {job} AND expires_at_ms <= {now} AND slot_ms < {slot}"
            ),
            finish: format!(
                "UPDATE {TABLE} SET expires_at_ms = 0, unfinished_slot_ms = 0 \
                 WHERE name = {t1} AND holder = {t2}"
            ),
            update_counter: format!("UPDATE {COUNTERS} SET n = n + 1 WHERE id = {}", p(1, "int")),
        }
    }
}

impl Target {
    async fn open(url: &str, synchronous: Synchronous) -> BoxResult<Target> {
        let backend = Backend::of(url).ok_or("unrecognised URL scheme")?;
        let (leases, raw, guard, note) = match backend {
            Backend::Postgres => {
                let store = PostgresStore::builder(url)?
                    .with_table(TABLE)
                    .with_pool_size(POOL)
                    .build()?;
                (
                    Leases::new(store.clone()),
                    Raw::Postgres(store.pool().clone()),
                    Guard::Postgres(store),
                    format!("PostgresStore, pool of {POOL} connections"),
                )
            }
            Backend::MySql => {
                let store = MySqlStore::builder(url)?
                    .with_table(TABLE)
                    .with_pool_constraints(1, POOL)
                    .connect()
                    .await?;
                (
                    Leases::new(store.clone()),
                    Raw::MySql(store.pool().clone().into_inner()),
                    Guard::MySql(store),
                    format!("MySqlStore, pool of up to {POOL} connections"),
                )
            }
            Backend::Sqlite => {
                let path = sqlite_path(url).ok_or("the benchmark needs an SQLite file")?;
                let store = SqliteStoreBuilder::from_path(&path)
                    .with_table(TABLE)
                    .with_synchronous(synchronous)
                    .build()?;
                let conn = rusqlite::Connection::open(&path)?;
                conn.busy_timeout(Duration::from_secs(5))?;
                // The floor runs at the store's durability.
                conn.execute_batch(match synchronous {
                    Synchronous::Normal => "PRAGMA synchronous = NORMAL",
                    _ => "PRAGMA synchronous = FULL",
                })?;
                (
                    Leases::new(store),
                    Raw::Sqlite(Arc::new(Mutex::new(conn))),
                    Guard::None,
                    format!(
                        "SqliteStore, one connection, synchronous {synchronous:?}; \
                         floors on a second connection to the same file, same pragmas"
                    ),
                )
            }
        };
        let target = Target {
            backend,
            leases,
            raw,
            guard,
            sql: Sql::of(backend),
            note,
        };
        target.leases.migrate().await?;
        target.setup().await?;
        Ok(target)
    }

    /// Empties the lease table and creates the counters.
    async fn setup(&self) -> BoxResult<()> {
        let engine = if self.backend == Backend::MySql {
            " ENGINE = InnoDB"
        } else {
            ""
        };
        self.raw.batch(&format!("DELETE FROM {TABLE}")).await?;
        self.raw
            .batch(&format!(
                "CREATE TABLE IF NOT EXISTS {COUNTERS} (id INT PRIMARY KEY, n BIGINT NOT NULL){engine}"
            ))
            .await?;
        self.raw.batch(&format!("DELETE FROM {COUNTERS}")).await?;
        for id in 0..POOL {
            self.raw
                .batch(&format!("INSERT INTO {COUNTERS} (id, n) VALUES ({id}, 0)"))
                .await?;
        }
        Ok(())
    }

    async fn exec(&self, sql: &str, params: Params) -> BoxResult<u64> {
        self.raw.exec(sql, params).await
    }

    async fn guarded_update(&self, ctx: &LeaseContext, w: usize) -> BoxResult<()> {
        let id = i32::try_from(w)?;
        let sql = self.sql.update_counter.clone();
        match &self.guard {
            Guard::Postgres(store) => {
                store
                    .transaction(ctx, move |tx| {
                        Box::pin(async move { tx.execute(sql.as_str(), &[&id]).await })
                    })
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Guard::MySql(store) => {
                store
                    .transaction(ctx, move |tx| {
                        Box::pin(async move {
                            tx.exec_drop(sql.as_str(), (id,))
                                .await
                                .map_err(dblease::mysql::MySqlError::from)
                        })
                    })
                    .await?;
            }
            Guard::None => return Err("no transaction guard".into()),
        }
        Ok(())
    }

    async fn unguarded_update(&self, w: usize) -> BoxResult<()> {
        let id = i32::try_from(w)?;
        match &self.raw {
            Raw::Postgres(pool) => {
                let mut client = pool.get().await?;
                let tx = client.transaction().await?;
                let stmt = tx.prepare_cached(&self.sql.update_counter).await?;
                tx.execute(&stmt, &[&id]).await?;
                tx.commit().await?;
            }
            Raw::MySql(pool) => {
                let mut conn = pool.get_conn().await?;
                let mut tx = conn
                    .start_transaction(mysql_async::TxOpts::default())
                    .await?;
                tx.exec_drop(self.sql.update_counter.as_str(), (id,))
                    .await?;
                tx.commit().await?;
            }
            Raw::Sqlite(_) => return Err("no transaction guard on SQLite".into()),
        }
        Ok(())
    }

    async fn cleanup(&self) {
        if let Err(e) = self.raw.batch(&format!("DELETE FROM {TABLE}")).await {
            eprintln!("bench: cleanup failed: {e}");
        }
    }
}

/// Parameters of a hand-written statement.
enum Params {
    None,
    Two(String, String),
    Three(String, String, String),
    /// holder, instance, slot, name.
    Slot(String, String, i64, String),
}

fn sqlite_path(url: &str) -> Option<PathBuf> {
    let rest = url.get(7..)?;
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    (rest != ":memory:" && !rest.is_empty()).then(|| PathBuf::from(rest))
}

/// Runs `op` on `workers` workers for `time`; each call gets its worker's
/// index.
async fn cell<F, Fut>(workers: usize, time: Duration, op: F) -> Summary
where
    F: Fn(usize) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = BoxResult<()>> + Send,
{
    let start = Instant::now();
    let end = start + time;
    let mut tasks = Vec::with_capacity(workers);
    for w in 0..workers {
        let op = op.clone();
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut errors = 0usize;
            let mut first_error = None;
            while Instant::now() < end {
                let t = Instant::now();
                match op(w).await {
                    Ok(()) => samples.push(t.elapsed()),
                    Err(e) => {
                        errors += 1;
                        first_error.get_or_insert_with(|| e.to_string());
                    }
                }
            }
            (samples, errors, first_error)
        }));
    }
    let mut all = Vec::new();
    let mut errors = 0;
    for task in tasks {
        if let Ok((samples, e, first)) = task.await {
            all.extend(samples);
            errors += e;
            if let Some(first) = first {
                eprintln!("  (an operation failed: {first})");
            }
        }
    }
    let summary = Summary::of(all, errors, start.elapsed());
    // Progress on stderr while the table builds up on stdout.
    eprintln!(
        "  cell done: {workers} workers, {:.0} ops/s, p50 {}",
        summary.throughput,
        Latency(summary.p50)
    );
    summary
}

/// One row of the table.
struct Row {
    op: &'static str,
    c: usize,
    lease: Option<Summary>,
    hand: Option<Summary>,
    select1: Summary,
    note: &'static str,
}

fn fmt_summary(s: Option<&Summary>) -> String {
    match s {
        Some(s) => format!(
            "{:>8} {:>8} {:>7.0}",
            Latency(s.p50),
            Latency(s.p99),
            s.throughput
        ),
        None => format!("{:>8} {:>8} {:>7}", "-", "-", "-"),
    }
}

fn print_rows(rows: &[Row]) {
    println!(
        "| {:<22} | {:>2} | {:>25} | {:>25} | {:>25} | {:>17} | {:>17} |",
        "operation (lease)",
        "c",
        "lease p50 p99 ops/s",
        "hand SQL p50 p99 ops/s",
        "SELECT 1 p50 p99 ops/s",
        "p50 vs hand, vs S1",
        "ops/s vs hand"
    );
    println!(
        "|{:-<24}|{:->4}|{:->27}|{:->27}|{:->27}|{:->19}|{:->19}|",
        "", "", "", "", "", "", ""
    );
    for r in rows {
        let (vs_hand, vs_s1, tput) = match (&r.lease, &r.hand) {
            (Some(l), Some(h)) => (
                ratio(l.p50.as_secs_f64(), h.p50.as_secs_f64()),
                ratio(l.p50.as_secs_f64(), r.select1.p50.as_secs_f64()),
                ratio(l.throughput, h.throughput),
            ),
            _ => ("-".to_owned(), "-".to_owned(), r.note.to_owned()),
        };
        println!(
            "| {:<22} | {:>2} | {} | {} | {} | {:>17} | {:>17} |",
            r.op,
            r.c,
            fmt_summary(r.lease.as_ref()),
            fmt_summary(r.hand.as_ref()),
            fmt_summary(Some(&r.select1)),
            format!("{vs_hand}, {vs_s1}"),
            tput
        );
    }
}

async fn run_backend(target: Target, concurrency: &[usize], time: Duration) -> BoxResult<()> {
    let target = Arc::new(target);
    println!("\n## {} ({})\n", target.backend.label(), target.note);
    let mut rows = Vec::new();
    let slots = Arc::new(AtomicI64::new(1));
    for &c in concurrency {
        let t = target.clone();
        let select1 = cell(c, time, move |_| {
            let t = t.clone();
            async move { t.exec("SELECT 1", Params::None).await.map(drop) }
        })
        .await;

        // claim + release on distinct names
        let t = target.clone();
        let lease = cell(c, time, move |w| {
            let t = t.clone();
            async move {
                let name = format!("bench:distinct:{w}");
                let h = t.leases.claim(&name).await?.ok_or("refused")?;
                h.release().await?;
                Ok(())
            }
        })
        .await;
        let t = target.clone();
        let hand = cell(c, time, move |w| {
            let t = t.clone();
            async move {
                let name = format!("bench:distinct:{w}");
                let holder = format!("hand-{w}");
                let n = t
                    .exec(
                        &t.sql.claim,
                        Params::Three(holder.clone(), "bench".into(), name.clone()),
                    )
                    .await?;
                if n != 1 {
                    return Err("hand claim refused".into());
                }
                t.exec(&t.sql.release, Params::Two(name, holder)).await?;
                Ok(())
            }
        })
        .await;
        rows.push(Row {
            op: "claim + release",
            c,
            lease: Some(lease),
            hand: Some(hand),
            select1,
            note: "",
        });

        // renew: each worker cycles over RENEW_ROWS leases of its own, so
        // that a row is renewed again only after the others (milliseconds
        // later): a second renewal of one row in the same millisecond
        // writes the same expiry, which SQLite and MariaDB do not write at
        // all, and would measure nothing.
        let mut handles = Vec::new();
        for w in 0..c {
            for r in 0..RENEW_ROWS {
                let name = format!("bench:renew:{w}:{r}");
                handles.push(target.leases.claim(&name).await?.ok_or("refused")?);
            }
        }
        let handles = Arc::new(handles);
        let turns: Arc<Vec<AtomicUsize>> = Arc::new((0..c).map(|_| AtomicUsize::new(0)).collect());
        let next = move |turns: &[AtomicUsize], w: usize| -> usize {
            let turn = turns
                .get(w)
                .map_or(0, |t| t.fetch_add(1, Ordering::Relaxed));
            w * RENEW_ROWS + turn % RENEW_ROWS
        };
        let hs = handles.clone();
        let ts = turns.clone();
        let lease = cell(c, time, move |w| {
            let hs = hs.clone();
            let i = next(&ts, w);
            async move {
                hs.get(i).ok_or("no handle")?.renew().await?;
                Ok(())
            }
        })
        .await;
        let t = target.clone();
        let hs = handles.clone();
        let ts = turns.clone();
        let hand = cell(c, time, move |w| {
            let t = t.clone();
            let hs = hs.clone();
            let i = next(&ts, w);
            async move {
                let h = hs.get(i).ok_or("no handle")?;
                // Not checked: without CLIENT_FOUND_ROWS, MySQL counts a
                // renewal in the same millisecond as changing nothing.
                t.exec(
                    &t.sql.renew,
                    Params::Two(h.name().to_owned(), h.holder().to_owned()),
                )
                .await?;
                Ok(())
            }
        })
        .await;
        for h in handles.iter() {
            h.release().await?;
        }
        rows.push(Row {
            op: "renew",
            c,
            lease: Some(lease),
            hand: Some(hand),
            select1,
            note: "",
        });

        // contended claim of one name (released at once when won)
        let t = target.clone();
        let lease = cell(c, time, move |_| {
            let t = t.clone();
            async move {
                if let Some(h) = t.leases.claim("bench:contended").await? {
                    h.release().await?;
                }
                Ok(())
            }
        })
        .await;
        let t = target.clone();
        let hand = cell(c, time, move |w| {
            let t = t.clone();
            async move {
                let holder = format!("hand-{w}");
                let name = "bench:contended".to_owned();
                let n = t
                    .exec(
                        &t.sql.claim,
                        Params::Three(holder.clone(), "bench".into(), name.clone()),
                    )
                    .await?;
                if n == 1 {
                    t.exec(&t.sql.release, Params::Two(name, holder)).await?;
                }
                Ok(())
            }
        })
        .await;
        rows.push(Row {
            op: "contended claim",
            c,
            lease: Some(lease),
            hand: Some(hand),
            select1,
            note: "",
        });

        // instant claim + finish
        let t = target.clone();
        let s = slots.clone();
        let lease = cell(c, time, move |w| {
            let t = t.clone();
            let slot = s.fetch_add(1, Ordering::SeqCst);
            async move {
                let name = format!("bench:job:{w}");
                let h = t
                    .leases
                    .claim_slot(&name, UtcMillis::from_millis(slot))
                    .await?
                    .ok_or("instant refused")?;
                h.finish(UtcMillis::from_millis(slot)).await?;
                Ok(())
            }
        })
        .await;
        let t = target.clone();
        let s = slots.clone();
        let hand = cell(c, time, move |w| {
            let t = t.clone();
            let slot = s.fetch_add(1, Ordering::SeqCst);
            async move {
                let name = format!("bench:job:{w}");
                let holder = format!("hand-{w}");
                let n = t
                    .exec(
                        &t.sql.slot_claim,
                        Params::Slot(holder.clone(), "bench".into(), slot, name.clone()),
                    )
                    .await?;
                if n != 1 {
                    return Err("hand instant claim refused".into());
                }
                t.exec(&t.sql.finish, Params::Two(name, holder)).await?;
                Ok(())
            }
        })
        .await;
        rows.push(Row {
            op: "instant claim + finish",
            c,
            lease: Some(lease),
            hand: Some(hand),
            select1,
            note: "",
        });

        // guarded transaction vs the same transaction unguarded
        match target.guard {
            Guard::None => rows.push(Row {
                op: "guarded transaction",
                c,
                lease: None,
                hand: None,
                select1,
                note: "not measured on SQLite",
            }),
            _ => {
                let mut ctxs = Vec::new();
                for w in 0..c {
                    let name = format!("bench:guard:{w}");
                    let h = target.leases.claim(&name).await?.ok_or("refused")?;
                    ctxs.push(LeaseContext::new(h, CancellationToken::new()));
                }
                let ctxs = Arc::new(ctxs);
                let t = target.clone();
                let cs = ctxs.clone();
                let lease = cell(c, time, move |w| {
                    let t = t.clone();
                    let cs = cs.clone();
                    async move {
                        let ctx = cs.get(w).ok_or("no context")?;
                        t.guarded_update(ctx, w).await
                    }
                })
                .await;
                let t = target.clone();
                let hand = cell(c, time, move |w| {
                    let t = t.clone();
                    async move { t.unguarded_update(w).await }
                })
                .await;
                for ctx in ctxs.iter() {
                    ctx.handle().release().await?;
                }
                rows.push(Row {
                    op: "guarded transaction",
                    c,
                    lease: Some(lease),
                    hand: Some(hand),
                    select1,
                    note: "",
                });
            }
        }
    }
    // Sorted by operation, then concurrency.
    let order = |op: &str| {
        [
            "claim + release",
            "renew",
            "contended claim",
            "instant claim + finish",
            "guarded transaction",
        ]
        .iter()
        .position(|o| *o == op)
        .unwrap_or(9)
    };
    rows.sort_by_key(|r| (order(r.op), r.c));
    print_rows(&rows);
    target.cleanup().await;
    Ok(())
}
