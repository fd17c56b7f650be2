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
//! through
//! [`Leases::with_renewal_batching`](dblease::Leases::with_renewal_batching);
//! `per-lease`: one renewal statement per lease; `both`: the two, one after
//! the other),
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
//!
//! The modules: `backend` opens the store and the meter, `measure` runs
//! one measured run (claim and hold, the window, the report, the
//! releases), `recording` is the store wrapper that records the renewals,
//! `durations` the metrics recorder that keeps lease-core's renewal
//! durations, `meter` the database's and the process's costs, `histogram`
//! the 1 ms buckets, `figures` the report's figures.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a command-line tool: the report is its output"
)]

mod backend;
mod durations;
mod figures;
mod histogram;
mod measure;
mod meter;
mod recording;

use std::error::Error;
use std::path::PathBuf;
use std::sync::Arc;

use dblease::Leases;

use self::durations::Recorder;
use self::figures::Figures;
use self::measure::{Run, hold_and_measure};
use self::recording::Recording;

type BoxError = Box<dyn Error + Send + Sync>;
type BoxResult<T> = Result<T, BoxError>;

/// The table the run creates afresh and drops at the end.
const TABLE: &str = "lease_scale";
const USAGE: &str = "usage: scale [--leases N] [--seconds S] [--pool N] [--claim-concurrency N] \
                     [--mode batched|per-lease|both] [--figures FILE] URL";

/// The `scale` binary: runs the scale run on a runtime of its own.
pub fn main() -> std::process::ExitCode {
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

/// The command line.
struct Args {
    leases: usize,
    seconds: u64,
    pool: usize,
    concurrency: usize,
    mode: String,
    figures: Option<PathBuf>,
    url: String,
}

impl Args {
    /// The arguments, or `None` after printing the usage for `--help`.
    fn parse(args: impl IntoIterator<Item = String>) -> BoxResult<Option<Args>> {
        let mut parsed = Args {
            leases: 10_000,
            seconds: 20,
            pool: 4,
            concurrency: 32,
            mode: "batched".to_owned(),
            figures: None,
            url: String::new(),
        };
        let mut url = None;
        let mut it = args.into_iter();
        while let Some(arg) = it.next() {
            match arg.as_str() {
                "--leases" => parsed.leases = it.next().ok_or(USAGE)?.parse()?,
                "--seconds" => parsed.seconds = it.next().ok_or(USAGE)?.parse()?,
                "--pool" => parsed.pool = it.next().ok_or(USAGE)?.parse()?,
                "--claim-concurrency" => parsed.concurrency = it.next().ok_or(USAGE)?.parse()?,
                "--mode" => parsed.mode = it.next().ok_or(USAGE)?,
                "--figures" => parsed.figures = Some(PathBuf::from(it.next().ok_or(USAGE)?)),
                "-h" | "--help" => {
                    println!("{USAGE}");
                    return Ok(None);
                }
                s if s.starts_with("--") => return Err(format!("unknown flag {s}\n{USAGE}").into()),
                _ => url = Some(arg),
            }
        }
        parsed.url = url.ok_or(USAGE)?;
        Ok(Some(parsed))
    }
}

async fn scale() -> BoxResult<bool> {
    let Some(args) = Args::parse(std::env::args().skip(1))? else {
        return Ok(true);
    };
    metrics::set_global_recorder(Recorder).map_err(|e| e.to_string())?;
    let setup = backend::open(&args.url, args.pool).await?;
    let describe = setup.describe;
    let recording = Arc::new(Recording::new(setup.store));
    let leases = Leases::from_arc(recording.clone());
    leases.migrate().await?;
    let timings = *leases.timings();
    let leases_n = args.leases;
    println!(
        "scale: {leases_n} leases held by one process on {describe}, renewals every {:?}, lease {:?}",
        timings.renew(),
        timings.lease()
    );
    let mode = args.mode.as_str();
    if !matches!(mode, "per-lease" | "batched" | "both") {
        return Err(format!("unknown mode {mode}\n{USAGE}").into());
    }
    let figures = Figures::default();
    figures.add(
        "backend",
        format!("{describe}, {leases_n} leases, {} s", args.seconds),
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
                meter: &setup.meter,
                n: leases_n,
                seconds: args.seconds,
                concurrency: args.concurrency,
                figures: &figures,
            };
            ok &= hold_and_measure(&run, label).await?;
        }
    }
    setup.cleanup.run().await?;
    if let Some(path) = args.figures {
        figures.write(&path)?;
    }
    Ok(ok)
}
