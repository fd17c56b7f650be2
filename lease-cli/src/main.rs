#![doc = include_str!("../README.md")]
// A command-line tool's output is its interface: printing is what it is for.
// Stdout goes through `emit` (which ends quietly on a closed pipe) rather
// than `println!`; errors and notes go to stderr with `eprintln!`.
#![allow(clippy::print_stderr)]

#[cfg(not(any(feature = "sqlite", feature = "postgres", feature = "mysql")))]
compile_error!("lease-cli needs at least one backend feature: sqlite, postgres or mysql");

mod db;
mod output;

use std::io::Write as _;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use clap::{Parser, Subcommand};
use dblease::{Chain, LeaseInfo, LeaseState, UtcMillis};

use crate::db::{Access, Db};
use crate::output::{escape, rfc3339};

/// The exit codes, as `--help` (of the tool and of each command) and the
/// README give them.
macro_rules! exit_codes {
    () => {
        "Exit codes:
  0    success
  1    error: the database could not be reached or refused, or a check failed
  2    usage error, or a command refused (release without --force)
  3    no such lease (show, release, resign)
  101  a bug in lease (it panicked): please report it"
    };
}

/// A command's own help, then the exit codes.
macro_rules! command_help {
    ($text:expr) => {
        concat!($text, "\n\n", exit_codes!())
    };
}

/// Inspect and operate the leases in a lease table.
#[derive(Debug, Parser)]
#[command(
    name = "lease",
    version,
    after_help = concat!(
        "Examples:
  export LEASE_DATABASE_URL=postgres://app@db.internal/app
  lease migrate
  lease ls leader:
  lease show leader:billing
  lease watch leader:billing
  lease resign leader:billing
  lease release lock:nightly-report --force
  lease ls --table app_leases

ls, show, watch and check only read: an SQLite file is opened read-only, and
no command but migrate creates one.

",
        exit_codes!()
    )
)]
struct Cli {
    /// The database: postgres://…, mysql://…, mariadb://…, sqlite://PATH.
    #[arg(
        long,
        global = true,
        env = "LEASE_DATABASE_URL",
        hide_env_values = true
    )]
    url: Option<String>,
    /// The lease table, for a service that names its own (with_table(..)):
    /// a plain identifier, or schema.table on PostgreSQL and MySQL (default
    /// gst_leases).
    #[arg(long, global = true, value_name = "NAME")]
    table: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List the leases whose name starts with PREFIX, ordered by name.
    #[command(after_help = command_help!("\
Columns: NAME, STATE (held, expired or released), INSTANCE (the process that
claimed it last), TERM, LEFT (time left while held, by the database clock),
LAST INSTANT (a scheduler's last instant, RFC 3339 UTC).

Names that hold spaces, quotes or control characters are printed quoted, with
escapes. --json prints one JSON array of objects (see the crate README).

Examples:
  lease ls
  lease ls leader: --limit 50
  lease ls job: --json | jq '.[] | select(.state == \"held\")'"))]
    Ls {
        /// Only names starting with this (every lease when omitted).
        #[arg(default_value = "")]
        prefix: String,
        /// One JSON array instead of a table.
        #[arg(long)]
        json: bool,
        /// At most this many leases.
        #[arg(long, default_value_t = 1000)]
        limit: u32,
    },
    /// Show one lease in detail (exit code 3 when there is no such lease).
    #[command(after_help = command_help!("\
Examples:
  lease show leader:billing
  lease show job:nightly --json"))]
    Show {
        /// The lease's name.
        name: String,
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print a line each time a lease changes hands, expires or is released,
    /// until Ctrl-C.
    #[command(after_help = command_help!("\
Polls the lease every --interval ms and prints a line when its holder, term or
state changed: the first line is the lease as found. The term grows by one at
each change of hands, so when a lease changed hands more than once between
two reads the line says how many changes it did not see (terms_skipped in
JSON). A poll that fails prints the error on stderr and the watch goes on.

Examples:
  lease watch leader:billing
  lease watch leader:billing --interval 200 --json"))]
    Watch {
        /// The lease's name.
        name: String,
        /// Milliseconds between two reads.
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..))]
        interval: u64,
        /// One JSON object per line instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Free a held lease now; prints the term it freed. Needs --force (see
    /// `resign` for a lease whose work is still running).
    #[command(after_help = command_help!("\
Reads the lease, then frees it only if it is still held at the term read, so a
lease that changed hands in between is left alone (exit code 1, run again).
The holder finds the lease gone at its next renewal and stops its work; the
next claim takes the next term. A lease already free is left as it is.

Until then the holder's work may still be running, beside a successor's: for
anything whose work is still running, use `lease resign NAME` instead, which
lets the holder wind its work down before it gives the name back.

So: 0 when freed (or already free), 1 on an error or when it changed hands,
2 without --force, 3 when there is no such lease.

Examples:
  lease release lock:nightly-report --force"))]
    Release {
        /// The lease's name.
        name: String,
        /// Confirm: the holder loses the lease while its work may be running.
        #[arg(long)]
        force: bool,
    },
    /// Ask a lease's holder to step down gracefully; prints the term asked.
    #[command(after_help = command_help!("\
Reads the lease, then records a resign request for the term read only, so a
lease that changed hands in between is left alone (exit code 1, run again).
The holder learns of the request at its next renewal: its work's context ends
(not a loss), the work winds down while the holder keeps the lease, then the
name is given back and a follower takes it at the next term. A leader sits
out one campaign attempt; a scheduler's round is cut short and runs again
once. Unlike `release --force`, no successor starts while the work runs.

So: 0 when asked (or nothing held), 1 on an error or when it changed hands,
3 when there is no such lease.

Examples:
  lease resign leader:billing
  lease resign cron:nightly-report"))]
    Resign {
        /// The lease's name.
        name: String,
    },
    /// Create the lease table if it does not exist.
    #[command(after_help = command_help!("\
Idempotent, and safe to run while replicas run it too.

Examples:
  lease migrate --url sqlite:///var/lib/app/leases.db"))]
    Migrate,
    /// Check the database can carry leases.
    #[command(after_help = command_help!("\
Checks, without writing anything:
  database    it answers, and its kind and version
  table       the lease table exists with every column (a read of a name)
  clock       the database clock against this machine's, in ms
  privileges  SELECT, INSERT and UPDATE on the table, as far as the database
              tells without writing: PostgreSQL has_table_privilege(); MySQL
              and MariaDB the direct grants in information_schema (roles are
              not followed, so a missing grant there is a warning); SQLite
              whether the file opens for writing.
A check that cannot run (the database did not answer, or the table check
failed) is printed as skipped, with the reason. Exits with 1 when a check
fails.

Examples:
  lease check
  LEASE_DATABASE_URL=mariadb://app@db/app lease check"))]
    Check,
}

/// What ends the program: an exit code, and what to say on stderr.
struct Exit {
    code: u8,
    message: String,
}

impl Exit {
    fn error(message: impl Into<String>) -> Self {
        Exit {
            code: 1,
            message: message.into(),
        }
    }
}

/// Writes `text` to stdout. A reader that went away (`lease ls | head`) ends
/// the command quietly, with success, as it does other tools.
fn emit(text: &str) -> Result<(), Exit> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(Exit {
            code: 0,
            message: String::new(),
        }),
        Err(e) => Err(Exit::error(format!(
            "could not write to stdout: {}",
            Chain(&e)
        ))),
    }
}

/// `println!` through [`emit`], returning from the command on a closed
/// stdout.
macro_rules! say {
    ($($arg:tt)*) => {
        emit(&format!("{}\n", format_args!($($arg)*)))?
    };
}

impl<E: std::error::Error + 'static> From<E> for Exit {
    fn from(e: E) -> Self {
        let missing_table = (&e as &dyn std::error::Error)
            .downcast_ref::<dblease::Error>()
            .is_some_and(|e| e.db_kind() == Some(dblease::DbErrorKind::MissingTable));
        if missing_table {
            // The library's message names the code call; say the command.
            return Exit::error(MISSING_TABLE);
        }
        Exit::error(Chain(&e).to_string())
    }
}

/// What to do about a lease table that does not exist, in this tool's terms.
const MISSING_TABLE: &str = "the lease table does not exist: run `lease migrate` to create it, \
                             or name the service's table with --table";

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: could not start the runtime: {}", Chain(&e));
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(exit) => {
            if !exit.message.is_empty() {
                eprintln!("error: {}", exit.message);
            }
            ExitCode::from(exit.code)
        }
    }
}

async fn run(cli: Cli) -> Result<(), Exit> {
    // Refused before connecting: a refusal needs no database.
    if let Command::Release { force: false, name } = &cli.command {
        return Err(Exit {
            code: 2,
            message: format!(
                "refusing to release {} without --force: its holder loses the lease \
                 while its work may still be running (`lease resign {}` asks it to step \
                 down once its work has wound down)",
                escape(name),
                escape(name)
            ),
        });
    }
    let Some(url) = cli.url.filter(|u| !u.is_empty()) else {
        return Err(Exit {
            code: 2,
            message: format!("no database: pass --url or set {}", dblease::ENV_VAR),
        });
    };
    let access = match cli.command {
        Command::Migrate => Access::Create,
        Command::Release { .. } | Command::Resign { .. } => Access::Write,
        Command::Ls { .. } | Command::Show { .. } | Command::Watch { .. } | Command::Check => {
            Access::Read
        }
    };
    let db = match db::open(&url, cli.table.as_deref(), access).await {
        Ok(db) => db,
        // The facade names its own feature; this binary's has the same name.
        Err(dblease::ConnectError::FeatureDisabled { scheme, feature }) => {
            return Err(Exit::error(format!(
                "{scheme} URLs need a `lease` built with the `{feature}` feature \
                 (cargo install lease-cli --features {feature})"
            )));
        }
        Err(e) => return Err(open_error(e)),
    };
    match cli.command {
        Command::Ls {
            prefix,
            json,
            limit,
        } => ls(&db, &prefix, json, limit).await,
        Command::Show { name, json } => show(&db, &name, json).await,
        Command::Watch {
            name,
            interval,
            json,
        } => watch(&db, &name, Duration::from_millis(interval), json).await,
        Command::Release { name, .. } => release(&db, &name).await,
        Command::Resign { name } => resign(&db, &name).await,
        Command::Migrate => {
            db.leases.migrate().await?;
            say!(
                "the lease table {} is ready ({})",
                db.backend.table(),
                db.backend.kind()
            );
            Ok(())
        }
        Command::Check => check(&db).await,
    }
}

/// The error of a database that could not be opened: an SQLite file that
/// is not there says so in this tool's terms.
fn open_error(e: dblease::ConnectError) -> Exit {
    #[cfg(feature = "sqlite")]
    if let dblease::ConnectError::Backend { source, .. } = &e {
        if let Some(dblease::sqlite::SqliteError::Missing { path }) = source.downcast_ref() {
            return Exit::error(format!(
                "no SQLite database at {}: the file does not exist (this command never \
                 creates one; `lease migrate` does)",
                path.display()
            ));
        }
    }
    e.into()
}

async fn ls(db: &Db, prefix: &str, json: bool, limit: u32) -> Result<(), Exit> {
    let infos = db.leases.list(prefix, limit).await?;
    if json {
        let array: Vec<_> = infos.iter().map(output::json).collect();
        say!("{}", serde_json::Value::Array(array));
    } else {
        emit(&output::table(&infos))?;
    }
    if limit > 0 && infos.len() == limit as usize {
        eprintln!("note: showing the first {limit} leases; there may be more (--limit)");
    }
    Ok(())
}

fn not_found(name: &str) -> Exit {
    Exit {
        code: 3,
        message: format!("no lease named {}", escape(name)),
    }
}

async fn show(db: &Db, name: &str, json: bool) -> Result<(), Exit> {
    let info = db.leases.get(name).await?.ok_or_else(|| not_found(name))?;
    if json {
        say!("{}", output::json(&info));
    } else {
        emit(&output::detail(&info))?;
    }
    Ok(())
}

/// What a change is judged by: who, which term, and in what state.
fn key(info: Option<&LeaseInfo>) -> Option<(String, u64, LeaseState)> {
    info.map(|i| (i.instance.clone(), i.term, i.state()))
}

/// The line `watch` prints for a lease read. `skipped` counts the changes
/// of hands that happened between two reads and so were not seen: the term
/// grows by one at each.
fn watch_line(name: &str, info: Option<&LeaseInfo>, skipped: u64, json: bool) -> String {
    match (info, json) {
        (Some(info), true) => {
            let mut v = output::json(info);
            if let Some(object) = v.as_object_mut() {
                let _ = object.insert("terms_skipped".to_owned(), skipped.into());
            }
            v.to_string()
        }
        (Some(info), false) if skipped > 0 => format!(
            "{} {info} [{skipped} earlier change(s) of hands between two reads]",
            rfc3339(info.now_ms)
        ),
        (Some(info), false) => format!("{} {info}", rfc3339(info.now_ms)),
        (None, true) => serde_json::json!({ "name": name, "state": "absent" }).to_string(),
        (None, false) => format!("{name:?} does not exist"),
    }
}

/// How many terms began and ended unseen between `before` and `now`.
fn skipped(before: Option<&(String, u64, LeaseState)>, now: Option<&LeaseInfo>) -> u64 {
    match (before, now) {
        (Some((_, term, _)), Some(now)) => now.term.saturating_sub(*term).saturating_sub(1),
        (None, Some(now)) => now.term.saturating_sub(1),
        (_, None) => 0,
    }
}

async fn watch(db: &Db, name: &str, interval: Duration, json: bool) -> Result<(), Exit> {
    // The first read must work: a missing table or a bad name ends the watch.
    let first = db.leases.get(name).await?;
    say!("{}", watch_line(name, first.as_ref(), 0, json));
    let mut last = key(first.as_ref());
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let _ = ticks.tick().await;
    loop {
        tokio::select! {
            _ = &mut ctrl_c => return Ok(()),
            _ = ticks.tick() => {}
        }
        match db.leases.get(name).await {
            Ok(info) => {
                let now = key(info.as_ref());
                if now != last {
                    let skipped = skipped(last.as_ref(), info.as_ref());
                    say!("{}", watch_line(name, info.as_ref(), skipped, json));
                    last = now;
                }
            }
            Err(e) => eprintln!("error: {}", Chain(&e)),
        }
    }
}

async fn release(db: &Db, name: &str) -> Result<(), Exit> {
    let info = db.leases.get(name).await?.ok_or_else(|| not_found(name))?;
    if !info.held() {
        say!(
            "{} is not held ({}, term {}): nothing to free",
            escape(name),
            info.state(),
            info.term
        );
        return Ok(());
    }
    let freed = db.leases.force_release(name, info.term).await?;
    match freed {
        true => {
            say!(
                "released {} at term {} (held by {})",
                escape(name),
                info.term,
                escape(&info.instance)
            );
            Ok(())
        }
        false => {
            let now = db.leases.get(name).await?;
            match now {
                Some(now) if now.term != info.term => Err(Exit::error(format!(
                    "{} changed hands while it was being released (term {} is now {}, held by {}): \
                     not freed; run again to free the new term",
                    escape(name),
                    info.term,
                    now.term,
                    escape(&now.instance)
                ))),
                Some(now) => {
                    say!(
                        "{} is not held ({}, term {}): nothing to free",
                        escape(name),
                        now.state(),
                        now.term
                    );
                    Ok(())
                }
                None => Err(not_found(name)),
            }
        }
    }
}

async fn resign(db: &Db, name: &str) -> Result<(), Exit> {
    let info = db.leases.get(name).await?.ok_or_else(|| not_found(name))?;
    if !info.held() {
        say!(
            "{} is not held ({}, term {}): nobody to ask",
            escape(name),
            info.state(),
            info.term
        );
        return Ok(());
    }
    if db.leases.request_resign_at(name, info.term).await? {
        say!(
            "asked {} to resign {} at term {}: it gives the name back once its work has wound \
             down",
            escape(&info.instance),
            escape(name),
            info.term
        );
        return Ok(());
    }
    match db.leases.get(name).await? {
        Some(now) if now.term != info.term => Err(Exit::error(format!(
            "{} changed hands while its holder was being asked to resign (term {} is now {}, \
             held by {}): nobody asked; run again to ask the new holder",
            escape(name),
            info.term,
            now.term,
            escape(&now.instance)
        ))),
        Some(now) => {
            say!(
                "{} is not held ({}, term {}): nobody to ask",
                escape(name),
                now.state(),
                now.term
            );
            Ok(())
        }
        None => Err(not_found(name)),
    }
}

async fn check(db: &Db) -> Result<(), Exit> {
    let mut failed = false;
    let backend = &db.backend;
    let table = backend.table();
    // The database answers.
    let sent = SystemTime::now();
    let db_now = db.leases.now().await;
    let received = SystemTime::now();
    let db_now = match db_now {
        Ok(now) => now,
        Err(e) => {
            say!("database    FAILED: {}", Chain(&e));
            for check in ["table     ", "clock     ", "privileges"] {
                say!("{check}  skipped: the database did not answer");
            }
            return Err(check_failed());
        }
    };
    let version = backend
        .version()
        .await
        .unwrap_or_else(|e| format!("version unknown: {}", Chain(&*e)));
    say!("database    ok: {} ({version})", backend.kind());

    // The table, with every column the protocol reads (all but the token,
    // which `get` never reads; the conformance suite covers the writes).
    let table_ok = match db.leases.get("lease-cli:check:absent").await {
        Ok(_) => {
            say!("table       ok: {table} answers a read of every column");
            true
        }
        Err(e) if e.db_kind() == Some(dblease::DbErrorKind::MissingTable) => {
            say!(
                "table       FAILED: {table} does not exist: run `lease migrate` to create it, \
                 or name the service's table with --table"
            );
            false
        }
        Err(e) => {
            say!("table       FAILED: {table}: {}", Chain(&e));
            false
        }
    };
    failed |= !table_ok;

    // The clock: the database's against this machine's, at the middle of
    // the round trip.
    let ms = |t: SystemTime| {
        UtcMillis::try_from(t)
            .map(UtcMillis::as_millis)
            .unwrap_or(0)
    };
    let (sent, received) = (ms(sent), ms(received));
    let mid = sent + (received - sent) / 2;
    let ahead = db_now.as_millis() - mid;
    let ahead_text = match ahead {
        0 => "in step with this machine's".to_owned(),
        a if a > 0 => format!("{a} ms ahead of this machine's"),
        a => format!("{} ms behind this machine's", -a),
    };
    // Leases are timed by the database clock alone, so an offset is no
    // failure; past a second it is worth a look (logs will not line up, and
    // a scheduler judges which instants have passed by this machine's clock).
    let verdict = if ahead.abs() > 1_000 { "warning" } else { "ok" };
    say!(
        "clock       {verdict}: the database clock is {ahead_text} (± {} ms, half the round \
         trip); leases are timed by the database clock alone",
        (received - sent + 1) / 2
    );

    // The privileges, on a table that is there.
    if table_ok {
        match backend.privileges().await {
            Ok(p) if p.missing.is_empty() => {
                say!(
                    "privileges  ok: SELECT, INSERT, UPDATE on {table} ({})",
                    p.how
                );
            }
            Ok(p) if p.conclusive => {
                failed = true;
                say!(
                    "privileges  FAILED: missing {} on {table} ({})",
                    p.missing.join(", "),
                    p.how
                );
            }
            Ok(p) => say!(
                "privileges  warning: {} on {table} not found ({})",
                p.missing.join(", "),
                p.how
            ),
            Err(e) => say!("privileges  unknown: {}", Chain(&*e)),
        }
    } else {
        say!("privileges  skipped: the table check failed");
    }
    if failed { Err(check_failed()) } else { Ok(()) }
}

/// The end of a `check` that found a failure.
fn check_failed() -> Exit {
    Exit {
        code: 1,
        message: "check failed".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use clap::CommandFactory;

    fn info(term: u64) -> LeaseInfo {
        LeaseInfo {
            name: "leader:x".to_owned(),
            instance: "web-2".to_owned(),
            term,
            expires_at_ms: 2_000,
            now_ms: 1_000,
            slot_ms: 0,
            unfinished_slot_ms: 0,
            rerun_slot_ms: 0,
        }
    }

    #[test]
    fn watch_counts_the_changes_of_hands_it_did_not_see() {
        let seen = Some(("web-1".to_owned(), 3, LeaseState::Held));
        assert_eq!(skipped(seen.as_ref(), Some(&info(4))), 0);
        assert_eq!(skipped(seen.as_ref(), Some(&info(6))), 2);
        assert_eq!(
            skipped(seen.as_ref(), Some(&info(3))),
            0,
            "released, same term"
        );
        assert_eq!(skipped(None, Some(&info(1))), 0, "the first claim");
        assert_eq!(skipped(None, Some(&info(5))), 4);
        assert_eq!(skipped(seen.as_ref(), None), 0);
        let line = watch_line("leader:x", Some(&info(6)), 2, false);
        assert!(
            line.ends_with("[2 earlier change(s) of hands between two reads]"),
            "{line}"
        );
        let v: serde_json::Value =
            serde_json::from_str(&watch_line("leader:x", Some(&info(6)), 2, true)).unwrap();
        assert_eq!(v["terms_skipped"], 2);
        assert_eq!(v["term"], 6);
    }

    #[test]
    fn the_cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_exit_codes_in_the_help_are_the_documented_ones() {
        let help = Cli::command().render_long_help().to_string();
        assert!(help.contains(exit_codes!()), "{help}");
        assert!(
            include_str!("../README.md").contains(exit_codes!()),
            "the README lists the exit codes as --help does"
        );
    }
}
