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
//! concurrencies, `--label NAME` the heading of the next URL's table (e.g.
//! `--label 'PostgreSQL via PgBouncer'`), `--batch N` the leases of one
//! batch renewal (default 1,000; 0: no batch row), `--scheduler-jobs N`
//! the scheduler row's jobs (default 200), `--no-capabilities` skips the
//! lock, leader and scheduler rows, `--leader-crash` adds the leader's
//! failover after a crash (a lease, 15 s, per backend). The tables are
//! markdown; `lease-bench/record.sh` makes the whole record with it.
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
//!   pool; on PostgreSQL with `statement_mode=unnamed` in the URL (behind
//!   PgBouncer in transaction pooling mode) they go unnamed too
//!   (`query_typed`), as the store's do;
//! - **`SELECT 1`** on the same pool;
//! - the **capabilities**, beside the floor they build on: `Lock::try_run`
//!   of an empty body (beside the hand-written claim + release, at each
//!   concurrency); at concurrency 1, the leader's hand-over (`Leader::run`:
//!   from the leader stepping down to the follower, campaigning every
//!   10 ms, leading; beside the hand-written claim + release) and, with
//!   `--leader-crash`, its failover after a crash (beside the lease, its
//!   floor by the protocol); the scheduler's rounds (`--scheduler-jobs`
//!   jobs `@every 1s`, beside the hand-written instant claim + finish);
//! - at concurrency 1, a **batch renewal**: `LeaseStore::renew_many` of
//!   `--batch` held leases per call, beside the same batch statement by
//!   hand (PostgreSQL's `UPDATE ... FROM unnest(..) RETURNING`, SQLite's
//!   `UPDATE ... WHERE (name, holder) IN (VALUES ..) RETURNING`, MariaDB's
//!   `UPDATE`, and a read of the rows held only when it matched fewer rows
//!   than the batch has leases); latency per call, ops/s in
//!   leases renewed per second.
//!
//! SQLite's store runs on one connection of its own, which nothing outside
//! it can reach: its floor runs on a second connection to the same file,
//! used the same way (one connection, off the runtime), and again on a
//! connection per worker (an application's own pool; rows marked ⁵).
//!
//! Each row also says, for the contended claim, the claims won per second
//! on each side, and, on the servers, the round trips of one operation of
//! each side counted on the wire (through a TCP proxy that parses what the
//! client sends: [`crate::wire`]). The guarded
//! transaction's floor is the same transaction unguarded, its `UPDATE`
//! prepared as the guarded work prepares it (SQLite: `BEGIN IMMEDIATE`, as
//! `SqliteStore::transaction` begins).
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "the benchmark prints its table, and its progress on stderr"
)]

mod capability;
pub mod cell;
mod ops;
mod table;
mod target;
mod trips;

use std::error::Error;
use std::time::Duration;

use dblease::sqlite::Synchronous;

use ops::{Extra, run_backend};
use target::Target;

/// What the benchmark's functions fail with.
pub type BoxError = Box<dyn Error + Send + Sync>;
/// A result with a [`BoxError`].
pub type BoxResult<T> = Result<T, BoxError>;

/// The benchmark's own lease table, emptied as each run starts.
pub(crate) const TABLE: &str = "lease_bench";
/// The table the guarded transactions write to.
pub(crate) const COUNTERS: &str = "lease_bench_counters";
/// The pool size for the servers: the highest concurrency measured.
pub(crate) const POOL: usize = 32;
/// The lease the hand-written statements grant, like the protocol's.
pub(crate) const LEASE_MS: i64 = 15_000;

/// The leases each worker of the renew cell cycles over.
pub(crate) const RENEW_ROWS: usize = 32;

/// The command line.
const USAGE: &str = "usage: bench [--seconds N] [--concurrency 1,8,32] \
     [--sqlite-synchronous full|normal] [--batch N] [--scheduler-jobs N] [--no-capabilities] \
     [--leader-crash] [[--label NAME] URL...]";

/// The benchmark's `main`: exit status 0, or 1 on an error (2 without a
/// runtime or with a command line it cannot read).
#[must_use]
pub fn main() -> std::process::ExitCode {
    let options = match parse_args(std::env::args().skip(1)) {
        Ok(options) => options,
        Err(e) => {
            eprintln!("bench: {e}");
            return std::process::ExitCode::from(2);
        }
    };
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
    match runtime.block_on(bench(options)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e}");
            std::process::ExitCode::from(1)
        }
    }
}

/// The command line.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// How long each cell runs.
    pub cell: Duration,
    /// The concurrencies measured.
    pub concurrency: Vec<usize>,
    /// The URLs, in order, each with the label its table is headed with
    /// (`--label` before it; the backend's name without); none for an
    /// SQLite file in a temp dir.
    pub urls: Vec<(String, Option<String>)>,
    /// The leases of one `renew_many` call in the batch row; 0: no row.
    pub batch: usize,
    /// The scheduler row's jobs, each `@every 1s`.
    pub scheduler_jobs: usize,
    /// Whether to measure the lock, the leader and the scheduler.
    pub capabilities: bool,
    /// Whether to measure the leader's failover after a crash (a lease,
    /// 15 s, per backend).
    pub leader_crash: bool,
    /// SQLite's `synchronous` pragma, for the store and the floor.
    pub synchronous: Synchronous,
    /// `--help`: print the usage and do nothing.
    pub help: bool,
}

/// Reads the command line (without the program's name).
///
/// # Errors
///
/// An unknown flag, a flag without its value, or a value that does not parse.
pub fn parse_args(line: impl IntoIterator<Item = String>) -> BoxResult<Options> {
    let mut seconds = 2.0f64;
    let mut concurrency = vec![1usize, 8, 32];
    let mut urls = Vec::new();
    let mut synchronous = Synchronous::Full;
    let mut help = false;
    let mut batch = 1_000usize;
    let mut scheduler_jobs = 200usize;
    let mut capabilities = true;
    let mut leader_crash = false;
    let mut label = None;
    let mut it = line.into_iter();
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
            "--batch" => batch = it.next().ok_or(USAGE)?.parse()?,
            "--scheduler-jobs" => scheduler_jobs = it.next().ok_or(USAGE)?.parse()?,
            "--no-capabilities" => capabilities = false,
            "--leader-crash" => leader_crash = true,
            "--label" => label = Some(it.next().ok_or(USAGE)?),
            "-h" | "--help" => help = true,
            s if s.starts_with("--") => return Err(format!("unknown flag {s}\n{USAGE}").into()),
            _ => urls.push((arg, label.take())),
        }
    }
    if label.is_some() {
        return Err(format!("--label names the URL after it\n{USAGE}").into());
    }
    Ok(Options {
        cell: Duration::try_from_secs_f64(seconds)?,
        concurrency,
        urls,
        synchronous,
        help,
        batch,
        scheduler_jobs,
        capabilities,
        leader_crash,
    })
}

/// Runs the benchmark.
async fn bench(options: Options) -> BoxResult<()> {
    let Options {
        cell,
        concurrency,
        mut urls,
        synchronous,
        help,
        batch,
        scheduler_jobs,
        capabilities,
        leader_crash,
    } = options;
    let extra = Extra {
        batch,
        capabilities,
        scheduler_jobs,
        leader_crash,
    };
    if help {
        println!("{USAGE}");
        return Ok(());
    }
    let seconds = cell.as_secs_f64();
    let dir = tempfile::tempdir()?;
    if urls.is_empty() {
        urls.push((
            format!("sqlite://{}", dir.path().join("bench.db").display()),
            None,
        ));
    }
    println!(
        "lease bench: {seconds} s per cell, concurrency {concurrency:?}; p50 / p99 latency and ops/s.\n\
         Floors measured in the same run on the same pool: the operation's statements written by hand, and SELECT 1."
    );
    for (url, label) in &urls {
        let target = Target::open(url, label.as_deref(), synchronous, POOL).await?;
        let trips = trips::measure(url, synchronous, batch).await?;
        run_backend(target, &concurrency, cell, &extra, trips.as_ref()).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> BoxResult<Options> {
        parse_args(line.split_whitespace().map(str::to_owned))
    }

    #[test]
    fn the_command_line() {
        let o = args("--seconds 0.5 --concurrency 1,4 --sqlite-synchronous normal a b").unwrap();
        assert_eq!(o.cell, Duration::from_millis(500));
        assert_eq!(o.concurrency, vec![1, 4]);
        assert_eq!(o.urls, vec![("a".to_owned(), None), ("b".to_owned(), None)]);
        assert_eq!(o.synchronous, Synchronous::Normal);
        assert_eq!((o.batch, o.scheduler_jobs), (1_000, 200));
        assert!(o.capabilities && !o.leader_crash);
        let o =
            args("--batch 10 --scheduler-jobs 5 --no-capabilities --leader-crash a --label 'x' b")
                .unwrap();
        assert_eq!((o.batch, o.scheduler_jobs), (10, 5));
        assert!(!o.capabilities && o.leader_crash);
        assert_eq!(
            o.urls,
            vec![
                ("a".to_owned(), None),
                ("b".to_owned(), Some("'x'".to_owned()))
            ]
        );
        assert!(
            args("a --label x").is_err(),
            "a label names the URL after it"
        );
        assert!(args("--batch").is_err());
        assert!(args("--sqlite-synchronous off").is_err());
        assert!(args("--concurrency 1,x").is_err());
        assert!(args("--nope").is_err());
        assert!(args("--help").unwrap().help);
    }
}
