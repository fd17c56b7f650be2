//! Each kind of database failure SQLite can give, as the store classifies
//! it: whether a retry can fix it is what `Error::is_retryable` says. (A
//! missing table is a conformance case; an embedded database has no
//! connection to lose and no users to refuse.)

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] functions fail loudly"
)]

use std::time::Duration;

use lease_core::{DbErrorKind, LeaseStore, Leases};
use lease_sqlite::{SqliteStore, SqliteStoreBuilder};
use rusqlite::Connection;

/// Another process holds the write lock past the busy timeout: SQLite
/// answers "database is locked", and a retry may well succeed.
#[tokio::test]
async fn a_write_lock_held_elsewhere_is_a_conflict_and_retryable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.db");
    let store = SqliteStoreBuilder::from_path(&path)
        .with_busy_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    LeaseStore::migrate(&store).await.unwrap();
    let other = Connection::open(&path).unwrap();
    other.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let err = Leases::new(store)
        .claim("busy")
        .await
        .expect_err("claimed while another connection held the write lock");
    other.execute_batch("ROLLBACK").unwrap();
    assert_eq!(err.db_kind(), Some(DbErrorKind::Conflict), "{err}");
    assert!(err.is_retryable(), "{err}");
}

/// A table whose shape changed under the store (a column dropped): the
/// statement is refused, and retrying it will not help.
#[tokio::test]
async fn a_table_of_the_wrong_shape_is_not_retryable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.db");
    let store = SqliteStore::open(&path).unwrap();
    LeaseStore::migrate(&store).await.unwrap();
    let other = Connection::open(&path).unwrap();
    other
        .execute_batch("ALTER TABLE gst_leases DROP COLUMN rerun_slot_ms")
        .unwrap();
    let err = Leases::new(store)
        .claim("shape")
        .await
        .expect_err("claimed on a table without rerun_slot_ms");
    assert_eq!(err.db_kind(), Some(DbErrorKind::Other), "{err}");
    assert!(!err.is_retryable(), "{err}");
}
