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
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "the benchmark prints its table, and its progress on stderr"
)]

pub mod cell;
mod ops;
mod table;
mod target;

use std::error::Error;
use std::time::Duration;

use dblease::sqlite::Synchronous;

use ops::run_backend;
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
const USAGE: &str =
    "usage: bench [--seconds N] [--concurrency 1,8,32] [--sqlite-synchronous full|normal] [URL...]";

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
    /// The URLs, in order; none for an SQLite file in a temp dir.
    pub urls: Vec<String>,
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
            "-h" | "--help" => help = true,
            s if s.starts_with("--") => return Err(format!("unknown flag {s}\n{USAGE}").into()),
            _ => urls.push(arg),
        }
    }
    Ok(Options {
        cell: Duration::try_from_secs_f64(seconds)?,
        concurrency,
        urls,
        synchronous,
        help,
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
    } = options;
    if help {
        println!("{USAGE}");
        return Ok(());
    }
    let seconds = cell.as_secs_f64();
    let dir = tempfile::tempdir()?;
    if urls.is_empty() {
        urls.push(format!(
            "sqlite://{}",
            dir.path().join("bench.db").display()
        ));
    }
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
        assert_eq!(o.urls, vec!["a".to_owned(), "b".to_owned()]);
        assert_eq!(o.synchronous, Synchronous::Normal);
        assert!(args("--sqlite-synchronous off").is_err());
        assert!(args("--concurrency 1,x").is_err());
        assert!(args("--nope").is_err());
        assert!(args("--help").unwrap().help);
    }
}
