//! The shared protocol suite of `lease-conformance`, run against SQLite: each
//! case on a fresh database file of its own, in a temporary directory that
//! lives as long as the store.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] functions fail loudly"
)]

use std::sync::Arc;

use lease_core::LeaseStore;
use lease_sqlite::SqliteStore;

/// A store on a fresh, not yet migrated database file (the suite migrates).
/// The temporary directory is leaked so that it outlives the store, which the
/// suite may keep until the end of its case; the OS cleans the temp dir.
async fn fresh_store() -> Option<Arc<dyn LeaseStore>> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("leases.db");
    std::mem::forget(dir);
    let store = tokio::task::spawn_blocking(move || SqliteStore::open(path))
        .await
        .expect("open task")
        .expect("open a fresh SQLite file");
    Some(Arc::new(store))
}

lease_conformance::conformance_tests!(fresh_store);
