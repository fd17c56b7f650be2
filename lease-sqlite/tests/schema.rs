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
