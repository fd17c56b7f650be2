//! `migrate()` on a table that already exists: it is inspected before
//! anything is created, and refused when it cannot carry leases.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] functions fail loudly"
)]

use std::path::PathBuf;

use lease_core::Leases;
use lease_sqlite::{SqliteError, SqliteStore};
use rusqlite::Connection;

fn db_file() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("leases.db");
    (dir, path)
}

/// The lease table's columns, with `name` declared by `name_column` and the
/// table's constraints `constraints`.
fn create(path: &PathBuf, name_column: &str, constraints: &str) {
    let conn = Connection::open(path).unwrap();
    conn.execute_batch(&format!(
        "CREATE TABLE gst_leases (\
         {name_column}, holder TEXT NOT NULL, instance TEXT NOT NULL, \
         term INTEGER NOT NULL, expires_at_ms INTEGER NOT NULL, \
         slot_ms INTEGER NOT NULL DEFAULT 0, unfinished_slot_ms INTEGER NOT NULL DEFAULT 0, \
         rerun_slot_ms INTEGER NOT NULL DEFAULT 0{constraints})"
    ))
    .unwrap();
}

async fn migrate_error(path: &PathBuf) -> String {
    let store = SqliteStore::open(path).unwrap();
    let err = store.migrate().await.unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, SqliteError::IncompatibleTable { .. }),
        "expected IncompatibleTable, got {err:?}"
    );
    msg
}

#[tokio::test]
async fn a_nocase_name_column_is_refused() {
    let (_dir, path) = db_file();
    create(&path, "name TEXT NOT NULL COLLATE NOCASE PRIMARY KEY", "");
    let msg = migrate_error(&path).await;
    assert!(msg.contains("\"gst_leases\""), "{msg}");
    assert!(msg.contains("COLLATE NOCASE"), "{msg}");
    assert!(msg.contains("byte for byte"), "{msg}");
    // Through the coordinator: a database error of the table's creation,
    // with the reason as its source.
    let leases = Leases::new(SqliteStore::open(&path).unwrap());
    let err = leases.migrate().await.unwrap_err();
    let source = std::error::Error::source(&err).unwrap().to_string();
    assert!(source.contains("COLLATE NOCASE"), "{source}");
}

#[tokio::test]
async fn a_name_column_compared_with_rtrim_is_refused() {
    let (_dir, path) = db_file();
    create(&path, "name TEXT NOT NULL COLLATE RTRIM PRIMARY KEY", "");
    assert!(migrate_error(&path).await.contains("COLLATE RTRIM"));
}

#[tokio::test]
async fn a_nocase_primary_key_on_a_binary_column_is_refused() {
    let (_dir, path) = db_file();
    create(
        &path,
        "name TEXT NOT NULL",
        ", PRIMARY KEY (name COLLATE NOCASE)",
    );
    let msg = migrate_error(&path).await;
    assert!(msg.contains("index"), "{msg}");
    assert!(msg.contains("COLLATE NOCASE"), "{msg}");
}

#[tokio::test]
async fn a_table_without_a_unique_name_is_refused() {
    let (_dir, path) = db_file();
    create(&path, "name TEXT NOT NULL", "");
    assert!(migrate_error(&path).await.contains("primary key"));
}

#[tokio::test]
async fn a_table_missing_a_column_is_refused_and_left_as_it_is() {
    let (_dir, path) = db_file();
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch(
        "CREATE TABLE gst_leases (name TEXT NOT NULL PRIMARY KEY, holder TEXT NOT NULL, \
         instance TEXT NOT NULL, term INTEGER NOT NULL, expires_at_ms INTEGER NOT NULL)",
    )
    .unwrap();
    let msg = migrate_error(&path).await;
    assert!(
        msg.contains("slot_ms, unfinished_slot_ms, rerun_slot_ms"),
        "{msg}"
    );
    let columns: i64 = conn
        .query_row(
            "SELECT count(*) FROM pragma_table_info('gst_leases')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(columns, 5);
}

/// A table made by hand the way the README shows, with an extra column and
/// without `WITHOUT ROWID`, carries leases; so does the one `migrate()`
/// creates, migrated again.
#[tokio::test]
async fn compatible_tables_are_accepted() {
    let (_dir, path) = db_file();
    create(
        &path,
        "name TEXT NOT NULL PRIMARY KEY COLLATE BINARY",
        ", note TEXT",
    );
    let store = SqliteStore::open(&path).unwrap();
    store.migrate().await.unwrap();
    let leases = Leases::new(store);
    let upper = leases.claim("JOB").await.unwrap().unwrap();
    let lower = leases.claim("job").await.unwrap();
    assert!(lower.is_some(), "JOB and job are two names");
    upper.release().await.unwrap();

    let (_dir2, fresh) = db_file();
    let store = SqliteStore::open(&fresh).unwrap();
    store.migrate().await.unwrap();
    store.migrate().await.unwrap();
}

/// Issue 25, item 4: a table created by the previous schema (without
/// `resign_term`) is given the column by `migrate`, keeps its leases, and
/// carries resign requests after it; a second `migrate` changes nothing.
#[tokio::test]
async fn migrate_adds_the_resign_column_to_a_table_of_the_previous_schema() {
    let (_dir, path) = db_file();
    let conn = Connection::open(&path).unwrap();
    // The DDL of the previous version, and a lease held in it.
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS \"gst_leases\" (\n\
         \x20   name TEXT NOT NULL PRIMARY KEY,\n\
         \x20   holder TEXT NOT NULL,\n\
         \x20   instance TEXT NOT NULL,\n\
         \x20   term INTEGER NOT NULL,\n\
         \x20   expires_at_ms INTEGER NOT NULL,\n\
         \x20   slot_ms INTEGER NOT NULL DEFAULT 0,\n\
         \x20   unfinished_slot_ms INTEGER NOT NULL DEFAULT 0,\n\
         \x20   rerun_slot_ms INTEGER NOT NULL DEFAULT 0\n\
         ) WITHOUT ROWID;\n\
         INSERT INTO gst_leases (name, holder, instance, term, expires_at_ms) \
           VALUES ('old', 'old-token', 'old-host', 7, 9223372036854775807);",
    )
    .unwrap();
    let store = SqliteStore::open(&path).unwrap();
    let old_token = lease_core::Token::new("old-token");
    let renew = |store: &SqliteStore| {
        let store = store.clone();
        async move { lease_core::LeaseStore::renew(&store, "old", old_token, 15_000).await }
    };
    assert!(
        renew(&store).await.is_err(),
        "a renewal on the previous schema worked before migrate"
    );
    store.migrate().await.unwrap();
    store.migrate().await.unwrap();
    let leases = Leases::new(store.clone());
    let old = leases.get("old").await.unwrap().unwrap();
    assert_eq!(
        (old.term, old.instance.as_str(), old.held()),
        (7, "old-host", true)
    );
    assert_eq!(leases.request_resign("old").await.unwrap(), Some(7));
    let renewed = renew(&store).await.unwrap().unwrap();
    assert!(renewed.resign, "{renewed:?}");
    let handle = leases.claim("job").await.unwrap().unwrap();
    handle.renew().await.unwrap();
    handle.release().await.unwrap();
    let columns: i64 = conn
        .query_row(
            "SELECT count(*) FROM pragma_table_info('gst_leases') WHERE name = 'resign_term'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(columns, 1);
}
