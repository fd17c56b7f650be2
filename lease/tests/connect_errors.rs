//! The messages of a connection that fails, produced for real (a closed
//! port, a listener that never answers, a refused login, a bad URL) and
//! compared with the table in the crate's README ("When it cannot
//! connect"), so that the table stays true.
//!
//! The server cases read `LEASE_TEST_POSTGRES_URL` and `LEASE_TEST_MYSQL_URL`
//! (skipped with a note when unset, failing under `CI=true`); the others
//! need no server.
#![cfg(all(feature = "postgres", feature = "mysql"))]
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a panic is its failure report

use std::collections::BTreeMap;

use dblease::ConnectFailure;
use dblease::mysql::MySqlError;
use dblease::mysql::mysql_async::prelude::Queryable;
use dblease::postgres::PostgresError;
use tokio::net::TcpListener;

const README: &str = include_str!("../README.md");

/// The table's rows: case, message (the cell's text between backticks).
fn readme_table() -> BTreeMap<String, String> {
    let section = README
        .split("## When it cannot connect")
        .nth(1)
        .expect("the README has the section")
        .split("\n## ")
        .next()
        .unwrap();
    section
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split(" | ").collect();
            match cells.as_slice() {
                [case, message] if message.starts_with('`') => Some((
                    case.trim_start_matches("| ").to_owned(),
                    message.trim_end_matches(" |").trim_matches('`').to_owned(),
                )),
                _ => None,
            }
        })
        .collect()
}

/// A port on the loopback interface that nothing listens on.
async fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().port()
}

/// The message of the error `connect(url)` fails with, and the error.
async fn refused(url: &str) -> (String, dblease::ConnectError) {
    let err = dblease::connect(url)
        .await
        .err()
        .unwrap_or_else(|| panic!("{url} connected"));
    let shown = err.to_string();
    assert_eq!(format!("{err:?}"), shown, "Debug is the same one line");
    assert!(!shown.contains('\n'), "{shown}");
    (shown, err)
}

fn postgres_failure(err: &dblease::ConnectError) -> Option<&ConnectFailure> {
    match err {
        dblease::ConnectError::Backend { source, .. } => match source.downcast_ref() {
            Some(PostgresError::Connect { failure, .. }) => Some(failure),
            _ => None,
        },
        _ => None,
    }
}

fn mysql_failure(err: &dblease::ConnectError) -> Option<&ConnectFailure> {
    match err {
        dblease::ConnectError::Backend { source, .. } => match source.downcast_ref() {
            Some(MySqlError::Connect { failure, .. }) => Some(failure),
            _ => None,
        },
        _ => None,
    }
}

/// `message` with this run's addresses and names replaced by the README's.
fn as_in_readme(message: &str, replacements: &[(&str, &str)]) -> String {
    let mut out = message.to_owned();
    for (from, to) in replacements {
        out = out.replace(from, to);
    }
    out
}

/// `host:port` of a server URL (`scheme://user@host:port/...`).
fn server(url: &str) -> String {
    let after = url.split_once("://").unwrap().1;
    let authority = after.split(['/', '?']).next().unwrap();
    authority.rsplit('@').next().unwrap().to_owned()
}

#[tokio::test]
async fn each_failure_reads_as_the_readme_table_says() {
    let table = readme_table();
    let mut seen: BTreeMap<String, String> = BTreeMap::new();

    // PostgreSQL: a closed port.
    let port = closed_port().await;
    let (shown, err) = refused(&format!("postgres://app@127.0.0.1:{port}/app")).await;
    assert_eq!(postgres_failure(&err), Some(&ConnectFailure::Refused));
    let _ = seen.insert(
        "PostgreSQL, nothing listening".into(),
        as_in_readme(&shown, &[(&format!("127.0.0.1:{port}"), "db:5432")]),
    );

    // PostgreSQL: a listener that accepts and never answers. The test
    // shortens the bound to 1 s; the README shows the default's 5 s.
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port();
    let (shown, err) = refused(&format!(
        "postgres://app@127.0.0.1:{port}/app?connect_timeout=1"
    ))
    .await;
    assert!(
        matches!(
            postgres_failure(&err),
            Some(ConnectFailure::TimedOut { .. })
        ),
        "{shown}"
    );
    let _ = seen.insert(
        "PostgreSQL, a server that never answers".into(),
        as_in_readme(
            &shown,
            &[
                (&format!("127.0.0.1:{port}"), "db:5432"),
                ("within 1 s", "within 5 s"),
            ],
        ),
    );

    // A bad port, in both URL forms.
    let (shown, _) = refused("postgres://app@db:99999/app").await;
    let _ = seen.insert("PostgreSQL, a bad port".into(), shown);
    let (shown, err) = refused("mysql://app@db:99999/app").await;
    assert!(
        matches!(
            &err,
            dblease::ConnectError::Backend { source, .. }
                if matches!(source.downcast_ref(), Some(MySqlError::InvalidPort))
        ),
        "{shown}"
    );
    let _ = seen.insert("MariaDB, a bad port".into(), shown);
    let (shown, _) = refused("redis://app:secret@db:6379").await;
    let _ = seen.insert("an unknown scheme".into(), shown);

    // MariaDB: a closed port, and a listener that never answers (the
    // default bound of 10 s).
    let port = closed_port().await;
    let (shown, err) = refused(&format!("mysql://app@127.0.0.1:{port}/app")).await;
    assert_eq!(mysql_failure(&err), Some(&ConnectFailure::Refused));
    let _ = seen.insert(
        "MariaDB, nothing listening".into(),
        as_in_readme(&shown, &[(&format!("127.0.0.1:{port}"), "db:3306")]),
    );
    let port = silent.local_addr().unwrap().port();
    let (shown, err) = refused(&format!("mysql://app@127.0.0.1:{port}/app")).await;
    assert!(
        matches!(mysql_failure(&err), Some(ConnectFailure::TimedOut { .. })),
        "{shown}"
    );
    let _ = seen.insert(
        "MariaDB, a server that never answers".into(),
        as_in_readme(&shown, &[(&format!("127.0.0.1:{port}"), "db:3306")]),
    );
    drop(silent);

    // PostgreSQL: a user the server does not know.
    if let Some(url) = lease_conformance::env_url("LEASE_TEST_POSTGRES_URL") {
        let at = server(&url);
        let role = format!("lease_no_such_role_{}", std::process::id());
        let (shown, err) = refused(&format!("postgres://{role}:pw@{at}/test")).await;
        assert_eq!(postgres_failure(&err), Some(&ConnectFailure::Credentials));
        let _ = seen.insert(
            "PostgreSQL, no such user".into(),
            as_in_readme(&shown, &[(&at, "db:5432"), (&role, "app")]),
        );
    }

    // MariaDB: a throwaway user, and the wrong password for it.
    if let Some(url) = lease_conformance::env_url("LEASE_TEST_MYSQL_URL") {
        let at = server(&url);
        let user = format!("lease_wrong_pw_{}", std::process::id());
        let admin = dblease::mysql::mysql_async::Pool::new(url.as_str());
        let mut conn = admin.get_conn().await.unwrap();
        conn.query_drop(format!(
            "CREATE USER IF NOT EXISTS '{user}'@'%' IDENTIFIED BY 'the-right-one'"
        ))
        .await
        .unwrap();
        let (shown, err) = refused(&format!("mysql://{user}:a-wrong-one@{at}/test")).await;
        conn.query_drop(format!("DROP USER IF EXISTS '{user}'@'%'"))
            .await
            .unwrap();
        drop(conn);
        admin.disconnect().await.unwrap();
        assert_eq!(mysql_failure(&err), Some(&ConnectFailure::Credentials));
        let _ = seen.insert(
            "MariaDB, a wrong password".into(),
            as_in_readme(
                &shown,
                &[
                    (&at, "db:3306"),
                    (&format!("'{user}'@'localhost'"), "'app'@'10.0.0.7'"),
                    (&format!("'{user}'@'127.0.0.1'"), "'app'@'10.0.0.7'"),
                ],
            ),
        );
    }

    for (case, message) in &seen {
        assert_eq!(
            table.get(case),
            Some(message),
            "the README's row for {case:?} (left) is not what the case prints (right)"
        );
    }
    for case in table.keys() {
        let server =
            case.starts_with("PostgreSQL, no such") || case.starts_with("MariaDB, a wrong");
        assert!(
            seen.contains_key(case) || server,
            "no test produces the README's row {case:?}"
        );
    }
}

/// A cause whose text its parent's already holds is printed once: the
/// MariaDB driver's error quotes the server's, which is its source.
#[tokio::test]
async fn no_cause_is_printed_twice() {
    let port = closed_port().await;
    for url in [
        format!("mysql://app@127.0.0.1:{port}/app"),
        format!("postgres://app@127.0.0.1:{port}/app"),
    ] {
        let (shown, _) = refused(&url).await;
        let parts: Vec<&str> = shown.split(": ").collect();
        for (i, part) in parts.iter().enumerate() {
            assert!(
                !parts[i + 1..].contains(part),
                "{part:?} twice in {shown:?}"
            );
        }
        assert!(!shown.contains("Input/output error"), "{shown}");
        assert!(!shown.contains("creating a new object"), "{shown}");
    }
}
