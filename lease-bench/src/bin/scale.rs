//! One process holding 10,000 leases at once on PostgreSQL: what their
//! renewals cost the database and the process.
//!
//! ```sh
//! cargo run --release -p lease-bench --bin scale -- postgres://postgres@127.0.0.1:5432/test
//! ```
//!
//! `--leases N` (default 10,000), `--seconds S` (the measured window,
//! default 20), `--pool N` (the store's pool, default the store's own
//! default).
//!
//! 1. Claims the leases (32 at a time) through `Leases` on a
//!    `PostgresStore` (table `lease_scale`, created afresh and dropped at the
//!    end), and holds each one
//!    (`Handle::hold`): one renewal task per lease, a renewal every 2 s.
//! 2. Over the window, measures the renewals' cost to the database
//!    (statements: rows updated in the table and transactions committed in
//!    the database, from `pg_stat_user_tables` / `pg_stat_database`; CPU of
//!    the store's server processes, from `/proc`, found by the pool's
//!    `application_name`) and to this process (its CPU time, from `/proc`).
//! 3. Releases them, claims them again through the same coordinator with
//!    [`Leases::with_renewal_batching`], holds them, and measures the same
//!    figures: renewals gathered into `LeaseStore::renew_many` batches, one
//!    `UPDATE ... FROM unnest($names, $holders) ... RETURNING` statement each
//!    on PostgreSQL.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::error::Error;
use std::sync::Arc;
use std::time::Duration;

use dblease::postgres::PostgresStore;
use dblease::postgres::deadpool_postgres::Pool;
use dblease::{CancellationToken, Handle, Holder, Leases};
use lease_bench::cpu::cpu_time;
use lease_bench::stats::{Latency, Summary};
use tokio::sync::Semaphore;
use tokio::time::{Instant, sleep};

type BoxError = Box<dyn Error + Send + Sync>;
type BoxResult<T> = Result<T, BoxError>;

const TABLE: &str = "lease_scale";
const USAGE: &str = "usage: scale [--leases N] [--seconds S] [--pool N] postgres://...";

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
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("scale: {e}");
            std::process::ExitCode::from(1)
        }
    }
}

/// What the database and this process had spent at one moment.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Instant,
    rows_updated: i64,
    commits: i64,
    server_cpu: Duration,
    process_cpu: Duration,
}

struct Meter {
    pool: Pool,
    app: String,
}

impl Meter {
    async fn sample(&self) -> BoxResult<Sample> {
        let client = self.pool.get().await?;
        // Statistics are flushed by each backend at most once a second: ask
        // for a fresh snapshot of what has been flushed.
        client
            .batch_execute("SELECT pg_stat_clear_snapshot()")
            .await?;
        let rows_updated: i64 = client
            .query_opt(
                "SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = $1::text",
                &[&TABLE],
            )
            .await?
            .map_or(Ok(0), |r| r.try_get(0))?;
        let commits: i64 = client
            .query_one(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()",
                &[],
            )
            .await?
            .try_get(0)?;
        let pids: Vec<i32> = client
            .query(
                "SELECT pid FROM pg_stat_activity WHERE application_name = $1::text",
                &[&self.app],
            )
            .await?
            .iter()
            .map(|r| r.try_get(0))
            .collect::<Result<_, _>>()?;
        let mut server_cpu = Duration::ZERO;
        for pid in pids {
            if let Ok(t) = cpu_time(u32::try_from(pid).ok()) {
                server_cpu += t;
            }
        }
        Ok(Sample {
            at: Instant::now(),
            rows_updated,
            commits,
            server_cpu,
            process_cpu: cpu_time(None)?,
        })
    }
}

fn report(label: &str, a: &Sample, b: &Sample, held: usize, demanded: f64) {
    let secs = (b.at - a.at).as_secs_f64();
    let per_s = |x: i64, y: i64| (y - x) as f64 / secs;
    let pct = |x: Duration, y: Duration| 100.0 * (y.saturating_sub(x)).as_secs_f64() / secs;
    let rows = per_s(a.rows_updated, b.rows_updated);
    println!("  {label} ({secs:.1} s window)");
    println!("    lease renewals the protocol asks for:     {demanded:>9.1} /s");
    println!("    lease rows renewed (pg_stat_user_tables): {rows:>9.1} /s");
    if rows > 0.0 {
        println!(
            "    so each lease renewed every:              {:>9.2} s",
            held as f64 / rows
        );
    }
    println!(
        "    commits in the whole database:            {:>9.1} /s  (every client, others' tests included)",
        per_s(a.commits, b.commits)
    );
    println!(
        "    CPU of the pool's server processes:       {:>9.1} % of one core",
        pct(a.server_cpu, b.server_cpu)
    );
    println!(
        "    CPU of this process:                      {:>9.1} % of one core",
        pct(a.process_cpu, b.process_cpu)
    );
}

/// Claims `n` leases through `leases` (32 at a time) and holds each one,
/// measures what their renewals cost over `seconds`, then stops and
/// releases them all.
async fn hold_and_measure(
    leases: &Leases,
    n: usize,
    seconds: u64,
    meter: &Meter,
    label: &str,
) -> BoxResult<()> {
    let timings = *leases.timings();
    let shutdown = CancellationToken::new();
    let started = Instant::now();
    let gate = Arc::new(Semaphore::new(32));
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
    let claimed = Summary::of(latencies, 0, started.elapsed());
    println!(
        "  {label}: claimed and holding {} leases in {:.1} s ({:.0} claims/s, p50 {}, p99 {})",
        held.len(),
        started.elapsed().as_secs_f64(),
        claimed.throughput,
        Latency(claimed.p50),
        Latency(claimed.p99)
    );
    sleep(timings.renew() * 2).await;
    let a = meter.sample().await?;
    // A progress line every 5 s of the window (on stderr: the report is stdout).
    let window_end = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < window_end {
        sleep(
            window_end
                .saturating_duration_since(Instant::now())
                .min(Duration::from_secs(5)),
        )
        .await;
        let lost = held.iter().filter(|(h, _)| h.lost()).count();
        eprintln!(
            "    ... {:.0} s left in the window, {lost} of {} leases lost so far",
            window_end
                .saturating_duration_since(Instant::now())
                .as_secs_f64(),
            held.len()
        );
    }
    let b = meter.sample().await?;
    let lost = held.iter().filter(|(h, _)| h.lost()).count();
    report(
        label,
        &a,
        &b,
        held.len(),
        held.len() as f64 / timings.renew().as_secs_f64(),
    );
    println!("    leases lost meanwhile:                    {lost:>9}");
    for (handle, holder) in held {
        holder.stop().await;
        if !handle.lost() {
            handle.release().await?;
        }
    }
    Ok(())
}

async fn scale() -> BoxResult<()> {
    let mut leases_n = 10_000usize;
    let mut seconds = 20u64;
    let mut pool_size = None;
    let mut url = None;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--leases" => leases_n = it.next().ok_or(USAGE)?.parse()?,
            "--seconds" => seconds = it.next().ok_or(USAGE)?.parse()?,
            "--pool" => pool_size = Some(it.next().ok_or(USAGE)?.parse()?),
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            s if s.starts_with("--") => return Err(format!("unknown flag {s}\n{USAGE}").into()),
            _ => url = Some(arg),
        }
    }
    let url = url.ok_or(USAGE)?;
    let app = format!("lease-scale-{}", std::process::id());
    let sep = if url.contains('?') { '&' } else { '?' };
    let mut builder =
        PostgresStore::builder(&format!("{url}{sep}application_name={app}"))?.with_table(TABLE);
    if let Some(size) = pool_size {
        builder = builder.with_pool_size(size);
    }
    let store = builder.build()?;
    let pool = store.pool().clone();
    let leases = Leases::new(store);
    // A fresh table: the dead rows of an earlier run would weigh on this one.
    pool.get()
        .await?
        .batch_execute(&format!("DROP TABLE IF EXISTS {TABLE}"))
        .await?;
    leases.migrate().await?;
    let meter = Meter {
        pool: pool.clone(),
        app,
    };
    let timings = *leases.timings();
    println!(
        "scale: {leases_n} leases held by one process on PostgreSQL (pool of {} connections), \
         renewals every {:?}, lease {:?}",
        pool.status().max_size,
        timings.renew(),
        timings.lease()
    );

    // 1 and 2: one renewal statement per lease per interval.
    let per_lease = leases.clone();
    hold_and_measure(&per_lease, leases_n, seconds, &meter, "per-lease renewals").await?;
    // 3: the same, with the renewals gathered into batches.
    let batched = leases.with_renewal_batching(true);
    hold_and_measure(
        &batched,
        leases_n,
        seconds,
        &meter,
        "batched renewals (Leases::with_renewal_batching)",
    )
    .await?;

    pool.get()
        .await?
        .batch_execute(&format!("DROP TABLE IF EXISTS {TABLE}"))
        .await?;
    Ok(())
}
