//! Runs the `lease` binary against SQLite (a temporary file), PostgreSQL and
//! MariaDB/MySQL (`LEASE_TEST_POSTGRES_URL`, `LEASE_TEST_MYSQL_URL`: skipped
//! with a note when unset, failing when unset under `CI=true`), with leases
//! claimed and released through the library beside it.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::process::{Output, Stdio};
use std::time::Duration;

use dblease::Leases;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_lease");

/// How long a test waits for a line of `watch` before it fails, rather
/// than hang: a bound, not a timing assertion.
const PATIENCE: Duration = Duration::from_secs(30);

/// A prefix no other test (nor another run) uses.
fn unique(case: &str) -> String {
    format!("cli-test:{case}:{}:", lease_testkit::unique(""))
}

/// `lease ARGS` against `url`, the URL in the environment.
fn command_url(url: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    let _ = cmd
        .args(args)
        .env("LEASE_DATABASE_URL", url)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    cmd
}

/// `lease ARGS --table TABLE` against the test's database and table.
fn command(db: &Db, args: &[&str]) -> Command {
    let mut cmd = command_url(&db.url, args);
    let _ = cmd.args(["--table", &db.table]);
    cmd
}

/// Runs `lease ARGS --table TABLE` against the test's database to its end.
async fn lease(db: &Db, args: &[&str]) -> Output {
    command(db, args).output().await.unwrap()
}

/// Runs `lease ARGS` against `url` (its default table) to its end.
async fn lease_url(url: &str, args: &[&str]) -> Output {
    command_url(url, args).output().await.unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).unwrap()
}

#[track_caller]
fn assert_code(out: &Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout: {}\nstderr: {}",
        stdout(out),
        stderr(out)
    );
}

/// A coordinator playing the replica `instance`, on the test's table
/// (migrated by the binary).
async fn replica(db: &Db, instance: &str) -> Leases {
    store(db).await.with_instance(instance).unwrap()
}

/// A coordinator on the test's database and table.
async fn store(db: &Db) -> Leases {
    let url = db.url.as_str();
    let table = db.table.as_str();
    #[cfg(feature = "sqlite")]
    if url.starts_with("sqlite:") {
        let store = dblease::sqlite::SqliteStore::builder(url).unwrap();
        return Leases::new(store.with_table(table).connect().await.unwrap());
    }
    #[cfg(feature = "postgres")]
    if url.starts_with("postgres") {
        let store = dblease::postgres::PostgresStore::builder(url).unwrap();
        return Leases::new(store.with_table(table).connect().await.unwrap());
    }
    #[cfg(feature = "mysql")]
    if url.starts_with("mysql") || url.starts_with("mariadb") {
        let store = dblease::mysql::MySqlStore::builder(url).unwrap();
        return Leases::new(store.with_table(table).connect().await.unwrap());
    }
    panic!("no backend for {url}")
}

async fn migrated(db: &Db) {
    let out = lease(db, &["migrate"]).await;
    assert_code(&out, 0);
    assert!(
        stdout(&out).contains(&format!("the lease table {} is ready", db.table)),
        "{}",
        stdout(&out)
    );
}

// ---------------------------------------------------------------- cases

async fn ls_prints_a_table_and_json(db: &Db) {
    migrated(db).await;
    let prefix = unique("ls");
    let (held, released, odd) = (
        format!("{prefix}a-held"),
        format!("{prefix}b-released"),
        // The library refuses control characters in names; a space and a
        // quote still need quoting to keep one lease on one line.
        format!("{prefix}c \"quoted\" row"),
    );
    let a = replica(db, "replica-a").await;
    let h1 = a.claim(&held).await.unwrap().unwrap();
    let h2 = a.claim(&released).await.unwrap().unwrap();
    h2.release().await.unwrap();
    let h3 = a.claim(&odd).await.unwrap().unwrap();

    let out = lease(db, &["ls", &prefix, "--json"]).await;
    assert_code(&out, 0);
    let rows: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!(rows[0]["name"], held.as_str());
    assert_eq!(rows[0]["state"], "held");
    assert_eq!(rows[0]["instance"], "replica-a");
    assert_eq!(rows[0]["term"], 1);
    assert!(rows[0]["time_left_ms"].as_u64().unwrap() > 0, "{rows:?}");
    assert!(rows[0]["expires_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(rows[0]["last_instant"], Value::Null);
    assert_eq!(rows[1]["name"], released.as_str());
    assert_eq!(rows[1]["state"], "released");
    assert_eq!(rows[1]["time_left_ms"], 0);
    assert_eq!(rows[1]["expires_at"], Value::Null);
    assert_eq!(
        rows[2]["name"],
        odd.as_str(),
        "JSON carries the name as it is"
    );

    let out = lease(db, &["ls", &prefix]).await;
    assert_code(&out, 0);
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "a header and one line per lease:\n{text}");
    let cells =
        |line: &str| -> Vec<String> { line.split_whitespace().map(str::to_owned).collect() };
    assert_eq!(
        cells(lines[0]),
        [
            "NAME", "STATE", "INSTANCE", "TERM", "LEFT", "LAST", "INSTANT"
        ]
    );
    let row = cells(lines[1]);
    assert_eq!(
        row[..4],
        [held.clone(), "held".into(), "replica-a".into(), "1".into()]
    );
    assert!(row[4].ends_with('s'), "time left: {text}");
    assert_eq!(row[5], "-");
    let row = cells(lines[2]);
    assert_eq!(
        row[..5],
        [
            released.clone(),
            "released".into(),
            "replica-a".into(),
            "1".into(),
            "-".into()
        ]
    );
    assert!(
        lines[3].starts_with(&format!("{:?}", odd)),
        "a name with a space or a quote is printed quoted and escaped:\n{text}"
    );

    let out = lease(db, &["ls", &prefix, "--limit", "1", "--json"]).await;
    assert_code(&out, 0);
    let rows: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 1);
    assert!(stderr(&out).contains("--limit"), "{}", stderr(&out));

    h1.release().await.unwrap();
    h3.release().await.unwrap();
}

async fn show_prints_one_lease_and_exits_3_for_none(db: &Db) {
    migrated(db).await;
    let name = format!("{}job", unique("show"));
    let a = replica(db, "replica-a").await;
    let h = a.claim(&name).await.unwrap().unwrap();

    let out = lease(db, &["show", &name]).await;
    assert_code(&out, 0);
    let text = stdout(&out);
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_owned()))
            .unwrap_or_else(|| panic!("no {key} in:\n{text}"))
    };
    assert_eq!(field("name:"), name);
    assert_eq!(field("state:"), "held");
    assert_eq!(field("instance:"), "replica-a");
    assert_eq!(field("term:"), "1");

    let out = lease(db, &["show", &name, "--json"]).await;
    assert_code(&out, 0);
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["name"], name.as_str());
    assert_eq!(v["term"], 1);

    let out = lease(db, &["show", &format!("{name}-missing")]).await;
    assert_code(&out, 3);
    assert!(stdout(&out).is_empty());
    assert!(stderr(&out).contains("no lease named"), "{}", stderr(&out));
    h.release().await.unwrap();
}

async fn release_needs_force_then_frees_the_term(db: &Db) {
    migrated(db).await;
    let name = format!("{}lock", unique("release"));
    let a = replica(db, "replica-a").await;
    let held = a.claim(&name).await.unwrap().unwrap();

    let out = lease(db, &["release", &name]).await;
    assert_code(&out, 2);
    assert!(stderr(&out).contains("--force"), "{}", stderr(&out));
    let _ = held
        .verify()
        .await
        .expect("still held after a refused release");

    let out = lease(db, &["release", &name, "--force"]).await;
    assert_code(&out, 0);
    assert!(
        stdout(&out).contains("at term 1"),
        "prints the term freed: {}",
        stdout(&out)
    );
    let err = held.renew().await.unwrap_err();
    assert!(err.is_lost(), "the holder finds the lease gone: {err}");
    let b = replica(db, "replica-b").await;
    let next = b.claim(&name).await.unwrap().expect("the lease is free");
    assert_eq!(next.term(), 2);

    // Not held any more: nothing to free, and the new holder keeps it
    // when the release is run again after it released.
    next.release().await.unwrap();
    let out = lease(db, &["release", &name, "--force"]).await;
    assert_code(&out, 0);
    assert!(stdout(&out).contains("nothing to free"), "{}", stdout(&out));

    let out = lease(db, &["release", &format!("{name}-missing"), "--force"]).await;
    assert_code(&out, 3);
}

/// Issue 25, item 4: `lease resign NAME` asks the holder at the term read;
/// its context ends with `Resigned` at its next renewal, not a loss; a
/// name not held has nobody to ask, and a missing one is exit code 3.
async fn resign_asks_the_holder_to_step_down(db: &Db) {
    migrated(db).await;
    let name = format!("{}leader", unique("resign"));
    let a = replica(db, "replica-a").await;
    let held = a.claim(&name).await.unwrap().unwrap();
    let holder = held.hold(&dblease::CancellationToken::new());
    let ctx = holder.context().clone();

    let out = lease(db, &["resign", &name]).await;
    assert_code(&out, 0);
    assert!(
        stdout(&out).contains("asked replica-a to resign") && stdout(&out).contains("at term 1"),
        "prints who was asked and the term: {}",
        stdout(&out)
    );
    tokio::time::timeout(PATIENCE, ctx.cancelled())
        .await
        .expect("the holder was not told within its renewals");
    assert_eq!(ctx.cause(), Some(dblease::EndCause::Resigned));
    assert!(!held.lost(), "a resign is no loss");
    holder.stop().await;
    held.release().await.unwrap();
    let b = replica(db, "replica-b").await;
    let next = b.claim(&name).await.unwrap().expect("given back");
    assert_eq!(next.term(), 2);
    next.release().await.unwrap();

    let out = lease(db, &["resign", &name]).await;
    assert_code(&out, 0);
    assert!(stdout(&out).contains("nobody to ask"), "{}", stdout(&out));
    let out = lease(db, &["resign", &format!("{name}-missing")]).await;
    assert_code(&out, 3);
}

async fn check_reports_every_check(db: &Db) {
    migrated(db).await;
    let out = lease(db, &["check"]).await;
    assert_code(&out, 0);
    let text = stdout(&out);
    for check in [
        "database    ok",
        "table       ok",
        "clock       ok",
        "privileges  ok",
    ] {
        assert!(text.contains(check), "{check} missing from:\n{text}");
    }
    assert!(text.contains(" ms"), "the clock offset in ms:\n{text}");
}

async fn watch_prints_each_change_of_hands(db: &Db) {
    migrated(db).await;
    let name = format!("{}leader", unique("watch"));
    let a = replica(db, "replica-a").await;
    let b = replica(db, "replica-b").await;
    let first = a.claim(&name).await.unwrap().unwrap();

    let mut child = command(db, &["watch", &name, "--interval", "20", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = async || -> Value {
        let line = tokio::time::timeout(PATIENCE, lines.next_line())
            .await
            .expect("watch printed no line in time")
            .unwrap()
            .expect("watch ended");
        serde_json::from_str(&line).unwrap()
    };

    let seen = next().await;
    assert_eq!(
        (seen["instance"].as_str(), seen["term"].as_u64()),
        (Some("replica-a"), Some(1))
    );
    assert_eq!(seen["state"], "held");
    assert_eq!(seen["terms_skipped"], 0);
    // Each change waits for its line before the next, so none is missed
    // between two polls.
    first.release().await.unwrap();
    let seen = next().await;
    assert_eq!(seen["state"], "released");
    assert_eq!(seen["term"], 1);
    let second = b.claim(&name).await.unwrap().unwrap();
    let seen = next().await;
    assert_eq!(
        (seen["instance"].as_str(), seen["term"].as_u64()),
        (Some("replica-b"), Some(2))
    );
    assert_eq!(seen["state"], "held");
    second.release().await.unwrap();
    let seen = next().await;
    assert_eq!(
        (seen["state"].as_str(), seen["term"].as_u64()),
        (Some("released"), Some(2))
    );

    // Ctrl-C ends the watch, with success.
    let pid = child.id().unwrap().to_string();
    let kill = Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .await
        .unwrap();
    assert!(kill.success());
    let status = tokio::time::timeout(PATIENCE, child.wait())
        .await
        .expect("watch did not stop on SIGINT")
        .unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
}

// ------------------------------------------------- cases on each backend

macro_rules! cases {
    ($backend:ident, $url:expr) => {
        mod $backend {
            use super::*;

            #[tokio::test]
            async fn ls_prints_a_table_and_json() {
                if let Some(db) = $url {
                    super::ls_prints_a_table_and_json(&db).await;
                }
            }

            #[tokio::test]
            async fn show_prints_one_lease_and_exits_3_for_none() {
                if let Some(db) = $url {
                    super::show_prints_one_lease_and_exits_3_for_none(&db).await;
                }
            }

            #[tokio::test]
            async fn release_needs_force_then_frees_the_term() {
                if let Some(db) = $url {
                    super::release_needs_force_then_frees_the_term(&db).await;
                }
            }

            #[tokio::test]
            async fn resign_asks_the_holder_to_step_down() {
                if let Some(db) = $url {
                    super::resign_asks_the_holder_to_step_down(&db).await;
                }
            }

            #[tokio::test]
            async fn check_reports_every_check() {
                if let Some(db) = $url {
                    super::check_reports_every_check(&db).await;
                }
            }

            #[tokio::test]
            async fn watch_prints_each_change_of_hands() {
                if let Some(db) = $url {
                    super::watch_prints_each_change_of_hands(&db).await;
                }
            }
        }
    };
}

/// A database for one test: a URL, the lease table of its own the test
/// passes with `--table`, and what to remove when the test ends (the
/// temporary directory of an SQLite file; the table, on a server, so that
/// no test writes into the server's default table).
struct Db {
    url: String,
    table: String,
    _dir: Option<tempfile::TempDir>,
    _cleanup: Option<lease_testkit::Cleanup>,
}

#[cfg(feature = "sqlite")]
fn sqlite_db() -> Option<Db> {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("leases.db").display());
    Some(Db {
        url,
        table: lease_testkit::unique("cli_"),
        _dir: Some(dir),
        _cleanup: None,
    })
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
fn server_db(var: &str) -> Option<Db> {
    let url = lease_conformance::env_url(var)?;
    let table = lease_testkit::unique("cli_");
    let cleanup = {
        let (url, table) = (url.clone(), table.clone());
        lease_testkit::Cleanup::new(move || async move { drop_table(&url, &table).await })
    };
    Some(Db {
        url,
        table,
        _dir: None,
        _cleanup: Some(cleanup),
    })
}

/// Drops a test's own lease table on a server.
#[cfg(any(feature = "postgres", feature = "mysql"))]
async fn drop_table(url: &str, table: &str) {
    #[cfg(feature = "postgres")]
    if url.starts_with("postgres") {
        let store = dblease::postgres::PostgresStore::builder(url)
            .unwrap()
            .build()
            .unwrap();
        let client = store.pool().get().await.unwrap();
        client
            .batch_execute(&format!("DROP TABLE IF EXISTS \"{table}\""))
            .await
            .unwrap();
    }
    #[cfg(feature = "mysql")]
    if url.starts_with("mysql") || url.starts_with("mariadb") {
        use dblease::mysql::mysql_async::prelude::Queryable;
        let store = dblease::mysql::MySqlStore::builder(url)
            .unwrap()
            .build()
            .unwrap();
        let mut conn = store.pool().get_conn().await.unwrap();
        conn.query_drop(format!("DROP TABLE IF EXISTS `{table}`"))
            .await
            .unwrap();
    }
}

#[cfg(feature = "sqlite")]
cases!(sqlite, sqlite_db());
#[cfg(feature = "postgres")]
cases!(postgres, server_db("LEASE_TEST_POSTGRES_URL"));
#[cfg(feature = "mysql")]
cases!(mysql, server_db("LEASE_TEST_MYSQL_URL"));

// ------------------------------------------------- without a database

#[tokio::test]
async fn no_url_is_a_usage_error() {
    let out = Command::new(BIN)
        .arg("ls")
        .env_remove("LEASE_DATABASE_URL")
        .output()
        .await
        .unwrap();
    assert_code(&out, 2);
    assert!(
        stderr(&out).contains("LEASE_DATABASE_URL"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test]
async fn help_hides_the_url_in_the_environment() {
    let out = lease_url("postgres://app:s3cret-pw@db/app", &["ls", "--help"]).await;
    assert_code(&out, 0);
    assert!(
        stdout(&out).contains("LEASE_DATABASE_URL"),
        "{}",
        stdout(&out)
    );
    assert!(!stdout(&out).contains("s3cret-pw"), "{}", stdout(&out));
}

/// `--help`, of the tool and of each command, lists every exit code the
/// tool can end with, and says `--table` is there.
#[tokio::test]
async fn every_help_lists_every_exit_code() {
    let readme = include_str!("../README.md");
    for args in [
        &["--help"][..],
        &["ls", "--help"],
        &["show", "--help"],
        &["watch", "--help"],
        &["release", "--help"],
        &["resign", "--help"],
        &["migrate", "--help"],
        &["check", "--help"],
    ] {
        let out = lease_url("sqlite::memory:", args).await;
        assert_code(&out, 0);
        let help = stdout(&out);
        for code in [
            "  0    success",
            "  1    error",
            "  2    usage error",
            "  3    no such lease",
            "  101  a bug in lease",
        ] {
            assert!(help.contains(code), "{args:?}: no {code:?} in:\n{help}");
            assert!(readme.contains(code), "the README lacks {code:?}");
        }
        assert!(help.contains("--table <NAME>"), "{args:?}:\n{help}");
    }
}

#[tokio::test]
async fn a_bad_argument_is_a_usage_error() {
    let out = lease_url("sqlite::memory:", &["ls", "--limit", "many"]).await;
    assert_code(&out, 2);
}

/// What the tool prints for a server that cannot be reached is the
/// library's message (the table in dblease's README), after `error: `.
#[cfg(feature = "postgres")]
#[tokio::test]
async fn a_connection_error_is_one_line_without_the_password() {
    // Port 1: nothing listens there.
    let out = lease_url("postgres://app:s3cret-pw@127.0.0.1:1/app", &["ls"]).await;
    assert_code(&out, 1);
    let err = stderr(&out);
    assert_eq!(
        err,
        "error: could not connect to PostgreSQL: connection refused: is the server running \
         on 127.0.0.1:1?\n"
    );
    assert!(!err.contains("s3cret-pw"), "{err}");
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn a_closed_stdout_ends_ls_quietly() {
    let db = sqlite_db().unwrap();
    migrated(&db).await;
    let leases = replica(&db, "replica-a").await;
    for i in 0..2_000 {
        let _ = leases
            .claim(&format!("pipe:{i:04}"))
            .await
            .unwrap()
            .unwrap();
    }
    // A reader that reads one line and goes away, as `| head -1` does.
    let mut child = command(&db, &["ls", "--limit", "2000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(
        lines
            .next_line()
            .await
            .unwrap()
            .unwrap()
            .starts_with("NAME")
    );
    drop(lines);
    let out = child.wait_with_output().await.unwrap();
    assert_code(&out, 0);
    assert!(
        stderr(&out).is_empty(),
        "no panic, no message: {}",
        stderr(&out)
    );
}

/// `check` on a file without the table: the advice once, in the tool's
/// terms, and the check it could not run said to be skipped; then the
/// default table, made by `migrate`, passes.
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn check_fails_until_migrate_creates_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("empty.db").display());
    // --url, with nothing in the environment.
    let run = async |args: &[&str]| {
        Command::new(BIN)
            .args(args)
            .args(["--url", &url])
            .env_remove("LEASE_DATABASE_URL")
            .output()
            .await
            .unwrap()
    };
    // A file with no table in it.
    assert_code(&run(&["migrate", "--table", "other_leases"]).await, 0);
    let out = run(&["check"]).await;
    assert_code(&out, 1);
    let text = stdout(&out);
    assert!(
        text.contains("table       FAILED: gst_leases does not exist"),
        "{text}"
    );
    assert_eq!(text.matches("lease migrate").count(), 1, "{text}");
    assert!(!text.contains("migrate()"), "{text}");
    assert!(
        text.contains("privileges  skipped: the table check failed"),
        "{text}"
    );
    assert_eq!(stderr(&out), "error: check failed\n");

    // Another command on the missing table: the same advice, once.
    let out = run(&["ls"]).await;
    assert_code(&out, 1);
    let err = stderr(&out);
    assert_eq!(err.matches("lease migrate").count(), 1, "{err}");
    assert!(!err.contains("migrate()"), "{err}");

    assert_code(&run(&["migrate"]).await, 0);
    let out = run(&["check"]).await;
    assert_code(&out, 0);
    assert!(stdout(&out).contains("table       ok"), "{}", stdout(&out));
    assert_code(&run(&["migrate"]).await, 0);
}

/// Issue 28: `lease ls` on a mistyped path made an empty database. No
/// command but `migrate` creates a file; the error names the path.
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn no_command_but_migrate_creates_an_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("typo.db");
    let url = format!("sqlite://{}", path.display());
    for args in [
        &["ls"][..],
        &["show", "job"],
        &["watch", "job"],
        &["check"],
        &["release", "job", "--force"],
        &["resign", "job"],
    ] {
        let out = lease_url(&url, args).await;
        assert_code(&out, 1);
        assert_eq!(
            stderr(&out),
            format!(
                "error: no SQLite database at {}: the file does not exist (this command never \
                 creates one; `lease migrate` does)\n",
                path.display()
            ),
            "{args:?}"
        );
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "{args:?} created a file"
        );
    }
    assert_code(&lease_url(&url, &["migrate"]).await, 0);
    assert!(path.is_file());
}

/// The reading commands open the file read-only: a store that writes
/// switches the file to WAL as it opens it, so a file left in rollback
/// journal mode stays in it only if nothing opened it for writing.
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn reading_commands_leave_the_file_as_it_was() {
    use dblease::sqlite::rusqlite::Connection;

    let db = sqlite_db().unwrap();
    migrated(&db).await;
    let name = format!("{}job", unique("read-only"));
    let leases = replica(&db, "replica-a").await;
    let held = leases.claim(&name).await.unwrap().unwrap();
    held.release().await.unwrap();
    drop((held, leases));
    let path = db.url.strip_prefix("sqlite://").unwrap().to_owned();
    let mode = |path: &str| -> String {
        Connection::open(path)
            .unwrap()
            .query_row("PRAGMA journal_mode", [], |row| row.get(0))
            .unwrap()
    };
    // The store closes its connection on its own thread once the last
    // reference is gone, which may be a moment after the drop above; the
    // file leaves WAL mode only when no other connection has it open.
    let conn = Connection::open(&path).unwrap();
    let switched = std::time::Instant::now();
    loop {
        match conn.query_row("PRAGMA journal_mode = DELETE", [], |row| {
            row.get::<_, String>(0)
        }) {
            Ok(mode) if mode == "delete" => break,
            Ok(mode) => panic!("PRAGMA journal_mode = DELETE answered {mode}"),
            Err(e) if switched.elapsed() < std::time::Duration::from_secs(30) => {
                eprintln!("the store's connection is still open ({e}); trying again");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Err(e) => panic!("the file stayed in use for 30 s after the store was dropped: {e}"),
        }
    }
    drop(conn);
    assert_eq!(mode(&path), "delete");
    let before = std::fs::read(&path).unwrap();
    for args in [&["ls"][..], &["show", &name], &["check"]] {
        let out = lease(&db, args).await;
        assert_code(&out, 0);
        assert_eq!(
            mode(&path),
            "delete",
            "{args:?} opened the file for writing"
        );
    }
    assert_eq!(std::fs::read(&path).unwrap(), before, "the file changed");
    // `release` writes, and so switches it.
    let out = lease(&db, &["release", &name, "--force"]).await;
    assert_code(&out, 0);
    assert_eq!(mode(&path), "wal");
}

#[cfg(not(feature = "mysql"))]
#[tokio::test]
async fn a_backend_left_out_of_the_build_names_the_feature() {
    let out = lease_url("mariadb://app@db/app", &["ls"]).await;
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("built with the `mysql` feature"),
        "{}",
        stderr(&out)
    );
}
