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
//! The orchestrator (the process started) starts `--procs` contender
//! processes (the same binary, `--child`), each with its own TCP proxy in
//! front of a PostgreSQL or MariaDB server, and injects a fault every
//! 0.7–2 s until `--seconds` have passed, aimed at a process holding
//! something three times in four:
//!
//! - **kill**: a contender is killed with `SIGKILL` (no release, no last
//!   word) and a new one started in its place;
//! - **freeze**: a contender is stopped with `SIGSTOP` for 100–600 ms, then
//!   resumed: shorter than the margin the timings leave (see
//!   [`faults::FREEZE`]), since no lease protects a process frozen longer;
//! - **pause** (servers): a contender's proxy holds every byte back for up to
//!   4.5 s, its connections open, as across a partition;
//! - **cut** (servers): every connection of a contender's proxy is closed;
//! - **stall** (SQLite): the orchestrator holds SQLite's write lock for up to
//!   4.5 s, so that no statement that writes gets through.
//!
//! Each contender runs, side by side on names of the run:
//!
//! - the raw lease API: it leads two names (claim, hold for a while,
//!   release) and runs the instants of a job falling due every 400 ms by the
//!   database's clock (claim the instant, run the round, finish; run a round
//!   cut short a second time), writing each attempt itself;
//! - the capabilities (see [`capabilities`]): a [`Lock`](dblease::Lock)
//!   (`try_run`, `run_within`), a [`Leader`](dblease::Leader) (`run`) and a
//!   [`Scheduler`](dblease::scheduler::Scheduler) job `@every 1s`, whose
//!   claims a recording store writes (see [`recorder`]).
//!
//! The timings are the protocol's scaled down: lease 3 s, renewals every
//! 500 ms, local deadline 2 s, grace 300 ms.
//!
//! Every attempt, tenure and end goes to the history (JSON lines, see
//! [`history`](lease_testkit::history)), and the checker ([`check`](lease_testkit::check))
//! runs on it at the end, with the same rules for every name: no two tenures
//! overlap (never two runs of a lock at once, never two leaders, never two
//! rounds of a job), terms +1 per change of hands, a holder that lost steps
//! down before its successor's claim, each instant at most twice and the
//! second only after a round cut short. The run fails, too, when the lock,
//! the leader or the scheduler never held their name: the soak would not
//! have tested them.
//!
//! # The clock of the history, and its uncertainty
//!
//! Every time in the history is the **database's** clock, the one the
//! protocol's expiry is judged by, or a bound on it that leans the way that
//! can only add violations ([`clock`](crate::clock)): an attempt's `sent_ms`
//! and a tenure's start are lower bounds (the calibration's lower bound when
//! the claim was sent, or a read of the database's clock that returned
//! before the work started), a tenure's end an upper bound (the
//! calibration's upper bound when the work had ended, or a read sent after
//! it). The calibration holds the database's clock between
//! `db_ms + (t - received)` and `db_ms + 1 + (t - sent)` for each recent read
//! (`+ 1`: whole milliseconds), widened by 2 ms of slew, and is refreshed
//! every 200 ms while the database answers; so the uncertainty of a bound is
//! the round trip of the best recent read plus 3 ms, and a holder cut off
//! from the database still bounds its end at once, without a statement. A
//! name is given back only after the database's clock has passed the end
//! recorded for it, so that a successor's start cannot tie with it. The
//! checker may thus call a violation a finer clock would clear, never clear
//! one that happened; a clean run with tens of changes of hands per name is
//! evidence that the bounds are tight enough to mean something, and each
//! planted bug ([`plant`](crate::plant)) shows that the rules can fail.
//!
//! The exit status is 0 when there is no violation (with
//! `--expect-violations`: when there is at least one), 1 otherwise, 2 on an
//! error.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "the soak reports on its standard streams"
)]

pub mod capabilities;
mod contender;
pub mod faults;
mod orchestrator;
mod procs;
pub mod recorder;
mod report;
mod rng;

use std::error::Error;
use std::path::PathBuf;
use std::time::Duration;

use dblease::Timings;

use crate::plant::Plant;

/// What the soak's functions fail with.
pub type BoxError = Box<dyn Error + Send + Sync>;
/// A result with a [`BoxError`].
pub type BoxResult<T> = Result<T, BoxError>;

/// Names each contender leads.
pub(crate) const LEADERS: usize = 2;
/// How often an instant of the job falls due, by the database's clock.
pub(crate) const EVERY_MS: i64 = 400;
/// How long a read of the database's clock may take before it is given up.
pub(crate) const CLOCK_READ_BOUND: Duration = Duration::from_millis(1_000);

pub(crate) fn timings() -> dblease::Result<Timings> {
    Timings::builder()
        .lease(Duration::from_millis(3_000))
        .renew(Duration::from_millis(500))
        .deadline(Duration::from_millis(2_000))
        .grace(Duration::from_millis(300))
        .build()
}

/// How often the soak prints a progress line while it runs.
pub(crate) const PROGRESS_EVERY: Duration = Duration::from_secs(5);

const USAGE: &str = "usage: soak [--seconds N] [--procs N] [--plant NAME] [--history FILE] \
[--expect-violations] [URL]\n  URL: sqlite://PATH (default: a file in a temp dir), postgres://..., mysql://...\n  \
plants: none, skip-deadline, phantom-claim, rerun-finished, lying-lock, deaf-leader, lost-finish";

/// The command line.
#[derive(Debug)]
pub struct Args {
    pub(crate) seconds: u64,
    pub(crate) procs: usize,
    pub(crate) plant: Plant,
    pub(crate) history: Option<PathBuf>,
    pub(crate) expect_violations: bool,
    pub(crate) url: Option<String>,
    pub(crate) child: Option<(String, String)>,
}

/// Reads the command line (without the program's name).
///
/// # Errors
///
/// An unknown flag, a flag without its value, a value that does not parse,
/// or fewer than two processes.
pub fn parse_args(line: impl IntoIterator<Item = String>) -> BoxResult<Args> {
    let mut args = Args {
        seconds: 30,
        procs: 3,
        plant: Plant::None,
        history: None,
        expect_violations: false,
        url: None,
        child: None,
    };
    let mut it = line.into_iter();
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

/// The soak's `main`: reads the command line, then runs the orchestrator,
/// or a contender when started as one (`--child`). The exit status: 0 when
/// the history held what was expected (no violation, or with
/// `--expect-violations` at least one), 1 when it did not, 2 on an error.
#[must_use]
pub fn main() -> std::process::ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
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
            (Some((instance, run)), Some(url)) => contender::run(instance, run, args.plant, url)
                .await
                .map(|()| true),
            (Some(_), None) => Err("--child needs a URL".into()),
            (None, _) => orchestrator::orchestrate(&args).await,
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

/// The name the `i`th raw leader of run `run` claims.
pub(crate) fn leader_name(run: &str, i: usize) -> String {
    format!("soak:{run}:leader:{i}")
}

/// The name the raw job of run `run` claims its instants under.
pub(crate) fn job_name(run: &str) -> String {
    format!("soak:{run}:cron")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> BoxResult<Args> {
        parse_args(line.split_whitespace().map(str::to_owned))
    }

    #[test]
    fn the_command_line() {
        let a = args("--seconds 5 --procs 4 --plant phantom-claim sqlite:///tmp/x.db")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((a.seconds, a.procs, a.plant), (5, 4, Plant::PhantomClaim));
        assert_eq!(a.url.as_deref(), Some("sqlite:///tmp/x.db"));
        assert!(a.child.is_none() && !a.expect_violations);
        let a = args("--child p3 --run abc postgres://x").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(a.child, Some(("p3".to_owned(), "abc".to_owned())));
        assert!(args("--procs 1").is_err());
        assert!(args("--seconds").is_err());
        assert!(args("--nope").is_err());
    }
}
