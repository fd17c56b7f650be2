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

fn command(url: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    let _ = cmd
        .args(args)
        .env("LEASE_DATABASE_URL", url)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    cmd
}

/// Runs `lease ARGS` against `url` to its end.
async fn lease(url: &str, args: &[&str]) -> Output {
    command(url, args).output().await.unwrap()
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

/// A coordinator playing the replica `instance`, with the table migrated
/// by the binary.
async fn replica(url: &str, instance: &str) -> Leases {
    dblease::connect(url)
        .await
        .unwrap()
        .with_instance(instance)
        .unwrap()
}

async fn migrated(url: &str) {
    let out = lease(url, &["migrate"]).await;
    assert_code(&out, 0);
    assert!(stdout(&out).contains("is ready"), "{}", stdout(&out));
}

// ---------------------------------------------------------------- cases

async fn ls_prints_a_table_and_json(url: &str) {
    migrated(url).await;
    let prefix = unique("ls");
    let (held, released, odd) = (
        format!("{prefix}a-held"),
        format!("{prefix}b-released"),
        // The library refuses control characters in names; a space and a
        // quote still need quoting to keep one lease on one line.
        format!("{prefix}c \"quoted\" row"),
    );
    let a = replica(url, "replica-a").await;
    let h1 = a.claim(&held).await.unwrap().unwrap();
    let h2 = a.claim(&released).await.unwrap().unwrap();
    h2.release().await.unwrap();
    let h3 = a.claim(&odd).await.unwrap().unwrap();

    let out = lease(url, &["ls", &prefix, "--json"]).await;
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

    let out = lease(url, &["ls", &prefix]).await;
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

    let out = lease(url, &["ls", &prefix, "--limit", "1", "--json"]).await;
    assert_code(&out, 0);
    let rows: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 1);
    assert!(stderr(&out).contains("--limit"), "{}", stderr(&out));

    h1.release().await.unwrap();
    h3.release().await.unwrap();
}

async fn show_prints_one_lease_and_exits_3_for_none(url: &str) {
    migrated(url).await;
    let name = format!("{}job", unique("show"));
    let a = replica(url, "replica-a").await;
    let h = a.claim(&name).await.unwrap().unwrap();

    let out = lease(url, &["show", &name]).await;
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

    let out = lease(url, &["show", &name, "--json"]).await;
    assert_code(&out, 0);
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["name"], name.as_str());
    assert_eq!(v["term"], 1);

    let out = lease(url, &["show", &format!("{name}-missing")]).await;
    assert_code(&out, 3);
    assert!(stdout(&out).is_empty());
    assert!(stderr(&out).contains("no lease named"), "{}", stderr(&out));
    h.release().await.unwrap();
}

async fn release_needs_force_then_frees_the_term(url: &str) {
    migrated(url).await;
    let name = format!("{}lock", unique("release"));
    let a = replica(url, "replica-a").await;
    let held = a.claim(&name).await.unwrap().unwrap();

    let out = lease(url, &["release", &name]).await;
    assert_code(&out, 2);
    assert!(stderr(&out).contains("--force"), "{}", stderr(&out));
    let _ = held
        .verify()
        .await
        .expect("still held after a refused release");

    let out = lease(url, &["release", &name, "--force"]).await;
    assert_code(&out, 0);
    assert!(
        stdout(&out).contains("at term 1"),
        "prints the term freed: {}",
        stdout(&out)
    );
    let err = held.renew().await.unwrap_err();
    assert!(err.is_lost(), "the holder finds the lease gone: {err}");
    let b = replica(url, "replica-b").await;
    let next = b.claim(&name).await.unwrap().expect("the lease is free");
    assert_eq!(next.term(), 2);

    // Not held any more: nothing to free, and the new holder keeps it
    // when the release is run again after it released.
    next.release().await.unwrap();
    let out = lease(url, &["release", &name, "--force"]).await;
    assert_code(&out, 0);
    assert!(stdout(&out).contains("nothing to free"), "{}", stdout(&out));

    let out = lease(url, &["release", &format!("{name}-missing"), "--force"]).await;
    assert_code(&out, 3);
}

async fn check_reports_every_check(url: &str) {
    migrated(url).await;
    let out = lease(url, &["check"]).await;
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

async fn watch_prints_each_change_of_hands(url: &str) {
    migrated(url).await;
    let name = format!("{}leader", unique("watch"));
    let a = replica(url, "replica-a").await;
    let b = replica(url, "replica-b").await;
    let first = a.claim(&name).await.unwrap().unwrap();

    let mut child = command(url, &["watch", &name, "--interval", "20", "--json"])
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
                    super::ls_prints_a_table_and_json(&db.url).await;
                }
            }

            #[tokio::test]
            async fn show_prints_one_lease_and_exits_3_for_none() {
                if let Some(db) = $url {
                    super::show_prints_one_lease_and_exits_3_for_none(&db.url).await;
                }
            }

            #[tokio::test]
            async fn release_needs_force_then_frees_the_term() {
                if let Some(db) = $url {
                    super::release_needs_force_then_frees_the_term(&db.url).await;
                }
            }

            #[tokio::test]
            async fn check_reports_every_check() {
                if let Some(db) = $url {
                    super::check_reports_every_check(&db.url).await;
                }
            }

            #[tokio::test]
            async fn watch_prints_each_change_of_hands() {
                if let Some(db) = $url {
                    super::watch_prints_each_change_of_hands(&db.url).await;
                }
            }
        }
    };
}

/// A database for one test: a URL, and the temporary directory of an
/// SQLite file, removed when the test ends.
struct Db {
    url: String,
    _dir: Option<tempfile::TempDir>,
}

#[cfg(feature = "sqlite")]
fn sqlite_db() -> Option<Db> {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("leases.db").display());
    Some(Db {
        url,
        _dir: Some(dir),
    })
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
fn server_db(var: &str) -> Option<Db> {
    lease_conformance::env_url(var).map(|url| Db { url, _dir: None })
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
    let out = lease("postgres://app:s3cret-pw@db/app", &["ls", "--help"]).await;
    assert_code(&out, 0);
    assert!(
        stdout(&out).contains("LEASE_DATABASE_URL"),
        "{}",
        stdout(&out)
    );
    assert!(!stdout(&out).contains("s3cret-pw"), "{}", stdout(&out));
}

#[tokio::test]
async fn a_bad_argument_is_a_usage_error() {
    let out = lease("sqlite::memory:", &["ls", "--limit", "many"]).await;
    assert_code(&out, 2);
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn a_connection_error_is_one_line_without_the_password() {
    // Port 1: nothing listens there.
    let out = lease("postgres://app:s3cret-pw@127.0.0.1:1/app", &["ls"]).await;
    assert_code(&out, 1);
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: could not open the postgres lease store: "),
        "{err}"
    );
    assert!(!err.contains("s3cret-pw"), "{err}");
    assert!(
        !err.contains("Error {") && !err.contains("kind:"),
        "no Debug dump: {err}"
    );
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn a_closed_stdout_ends_ls_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("leases.db").display());
    migrated(&url).await;
    let leases = replica(&url, "replica-a").await;
    for i in 0..2_000 {
        let _ = leases
            .claim(&format!("pipe:{i:04}"))
            .await
            .unwrap()
            .unwrap();
    }
    // A reader that reads one line and goes away, as `| head -1` does.
    let mut child = command(&url, &["ls", "--limit", "2000"])
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
    let out = run(&["check"]).await;
    assert_code(&out, 1);
    assert!(
        stdout(&out).contains("table       FAILED") && stdout(&out).contains("lease migrate"),
        "{}",
        stdout(&out)
    );
    assert_code(&run(&["migrate"]).await, 0);
    let out = run(&["check"]).await;
    assert_code(&out, 0);
    assert!(stdout(&out).contains("table       ok"), "{}", stdout(&out));
    assert_code(&run(&["migrate"]).await, 0);
}

#[cfg(not(feature = "mysql"))]
#[tokio::test]
async fn a_backend_left_out_of_the_build_names_the_feature() {
    let out = lease("mariadb://app@db/app", &["ls"]).await;
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("built with the `mysql` feature"),
        "{}",
        stderr(&out)
    );
}
