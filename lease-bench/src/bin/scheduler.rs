//! What the scheduler costs: N jobs `@every 1s` on one replica for S
//! seconds, with the protocol's default timings. Prints the rounds run per
//! second (each one claim and one finish), how late rounds started after
//! their instant (p50, p99, max), and the CPU the process used.
//!
//! ```text
//! cargo run --release -p lease-bench --bin scheduler -- [URL] [--jobs N] [--seconds S]
//! cargo run --release -p lease-bench --bin scheduler -- failover [URL] [--samples N]
//! ```
//!
//! `failover` measures, with the default timings, the time from a SIGKILL of
//! the process running a round to its rerun starting on a peer: two replica
//! processes (this binary run again) run a job `@every 40s` whose rounds
//! last 20 s; the one that claims an instant is killed half a second into
//! its round. About a minute per sample.
//!
//! URL: `postgres://…`, `mysql://…` or `sqlite://PATH` (default: a SQLite
//! file in a temporary directory). Each run uses a table of its own, dropped
//! at the end on PostgreSQL and MariaDB.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    reason = "a benchmark that prints its figures and fails loudly"
)]

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dblease::scheduler::{Job, Round, Scheduler};
use lease_bench::stats::percentile;
use lease_core::{CancellationToken, LeaseStore, Leases};

fn wall_ms() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

fn main() {
    let all: Vec<String> = std::env::args().collect();
    if all.get(1).map(String::as_str) == Some("child") {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(failover_child(&all[2], &all[3], &all[4], &all[5]));
        return;
    }
    if all.get(1).map(String::as_str) == Some("failover") {
        let mut url = None;
        let mut samples = 3usize;
        let mut args = all.into_iter().skip(2);
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--samples" => samples = args.next().unwrap().parse().unwrap(),
                other => url = Some(other.to_owned()),
            }
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(failover(url, samples));
        return;
    }
    let mut url = None;
    let (mut jobs, mut seconds) = (1_000usize, 30u64);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--jobs" => jobs = args.next().unwrap().parse().unwrap(),
            "--seconds" => seconds = args.next().unwrap().parse().unwrap(),
            other => url = Some(other.to_owned()),
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(bench(url, jobs, seconds));
}

/// The store `url` names, on `table`, and the database's name.
async fn open(url: &str, table: &str) -> (Arc<dyn LeaseStore>, &'static str) {
    if let Some(path) = url.strip_prefix("sqlite://") {
        let store = dblease::sqlite::SqliteStoreBuilder::from_path(path)
            .with_table(table)
            .build()
            .unwrap();
        (Arc::new(store), "SQLite")
    } else if url.starts_with("postgres") {
        let store = dblease::postgres::PostgresStore::builder(url)
            .unwrap()
            .with_table(table)
            .connect()
            .await
            .unwrap();
        (Arc::new(store), "PostgreSQL")
    } else {
        let store = dblease::mysql::MySqlStore::builder(url)
            .unwrap()
            .with_table(table)
            .connect()
            .await
            .unwrap();
        (Arc::new(store), "MySQL/MariaDB")
    }
}

async fn bench(url: Option<String>, jobs: usize, seconds: u64) {
    let dir = tempfile::tempdir().unwrap();
    let table = format!("lsbench_{}_{}", std::process::id(), wall_ms() % 1_000_000);
    let url = url.unwrap_or_else(|| format!("sqlite://{}", dir.path().join("bench.db").display()));
    let (store, backend) = open(&url, &table).await;
    let leases = Leases::from_arc(store.clone());
    leases.migrate().await.unwrap();

    let r = lease_bench::rounds::run(leases, "bench", jobs, Duration::from_secs(seconds))
        .await
        .unwrap();
    println!("{backend}: {jobs} jobs @every 1s on one replica for {seconds} s");
    println!(
        "  rounds: {} ({:.0}/s; each one claim and one finish), expected {}",
        r.rounds,
        r.per_second(),
        r.expected
    );
    println!(
        "  started after the instant: p50 {} ms, p99 {} ms, max {} ms",
        percentile(&r.late, 50.0).as_millis(),
        percentile(&r.late, 99.0).as_millis(),
        r.late.last().map_or(0, Duration::as_millis)
    );
    if let Some(used) = r.cpu {
        println!(
            "  CPU of the process: {:.2} s over {:.1} s ({:.0}% of one core)",
            used.as_secs_f64(),
            r.elapsed.as_secs_f64(),
            100.0 * used.as_secs_f64() / r.elapsed.as_secs_f64()
        );
    }
    drop(store);
    if backend != "SQLite" {
        drop_table(&url, &table).await;
    }
}

async fn drop_table(url: &str, table: &str) {
    if url.starts_with("postgres") {
        let store = dblease::postgres::PostgresStore::builder(url)
            .unwrap()
            .with_table(table)
            .connect()
            .await
            .unwrap();
        let client = store.pool().get().await.unwrap();
        client
            .batch_execute(&format!("DROP TABLE IF EXISTS \"{table}\""))
            .await
            .unwrap();
    } else {
        use dblease::mysql::mysql_async::prelude::Queryable as _;
        let store = dblease::mysql::MySqlStore::builder(url)
            .unwrap()
            .with_table(table)
            .connect()
            .await
            .unwrap();
        let mut conn = store.pool().get_conn().await.unwrap();
        conn.query_drop(format!("DROP TABLE IF EXISTS `{table}`"))
            .await
            .unwrap();
    }
}

/// A replica of the failover measurement: one job, `@every 40s`, whose
/// rounds last 20 s; says `START <instant> <rerun> <wall ms>` as each starts.
async fn failover_child(url: &str, table: &str, job: &str, instance: &str) {
    let (store, _) = open(url, table).await;
    let leases = Leases::from_arc(store).with_instance(instance).unwrap();
    let scheduler = Scheduler::builder(leases)
        .job(Job::new(job, "@every 40s", |round: Round| async move {
            println!(
                "START {} {} {}",
                round.instant().as_millis(),
                round.is_rerun(),
                wall_ms()
            );
            tokio::select! {
                () = tokio::time::sleep(Duration::from_secs(20)) => Ok(()),
                () = round.cancelled() => Err(round.check().unwrap_err().into()),
            }
        }))
        .build()
        .unwrap();
    scheduler
        .run(&CancellationToken::new(), Duration::from_secs(1))
        .await
        .unwrap();
}

async fn failover(url: Option<String>, samples: usize) {
    use tokio::io::{AsyncBufReadExt as _, BufReader};

    let dir = tempfile::tempdir().unwrap();
    let table = format!("lsfail_{}_{}", std::process::id(), wall_ms() % 1_000_000);
    let url = url.unwrap_or_else(|| format!("sqlite://{}", dir.path().join("bench.db").display()));
    let (store, backend) = open(&url, &table).await;
    Leases::from_arc(store.clone()).migrate().await.unwrap();
    println!("{backend}: failover of a round whose process is killed, default timings");
    let exe = std::env::current_exe().unwrap();
    let mut measured = Vec::new();
    for sample in 0..samples {
        let job = format!("failover-{sample}");
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut children = Vec::new();
        for replica in 0..2usize {
            let mut child = tokio::process::Command::new(&exe)
                .args(["child", &url, &table, &job, &format!("replica-{replica}")])
                .stdout(std::process::Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .unwrap();
            let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
            let tx = tx.clone();
            drop(tokio::spawn(async move {
                while let Ok(Some(line)) = lines.next_line().await {
                    let _ = tx.send((replica, line));
                }
            }));
            children.push(child);
        }
        let mut killed: Option<(usize, i64, i64)> = None;
        while let Some((replica, line)) = rx.recv().await {
            let f: Vec<&str> = line.split(' ').collect();
            let (instant, rerun, at): (i64, bool, i64) = (
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
                f[3].parse().unwrap(),
            );
            match killed {
                None if !rerun => {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    children[replica].kill().await.unwrap();
                    killed = Some((replica, instant, wall_ms()));
                }
                Some((victim, cut, kill)) if rerun && replica != victim && instant == cut => {
                    let after = Duration::from_millis(u64::try_from(at - kill).unwrap());
                    println!(
                        "  sample {sample}: the rerun started {:.1} s after the kill",
                        after.as_secs_f64()
                    );
                    measured.push(after);
                    break;
                }
                _ => {}
            }
        }
        for child in &mut children {
            let _ = child.kill().await;
        }
    }
    measured.sort();
    if let (Some(min), Some(max)) = (measured.first(), measured.last()) {
        println!(
            "  {} samples: {:.1} to {:.1} s (lease 15 s after the last renewal, then a sweep every 15 s + up to 1 s)",
            measured.len(),
            min.as_secs_f64(),
            max.as_secs_f64()
        );
    }
    drop(store);
    if backend != "SQLite" {
        drop_table(&url, &table).await;
    }
}
