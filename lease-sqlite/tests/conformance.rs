//! The shared protocol suite of `lease-conformance`, run against SQLite: each
//! case on a fresh database file of its own, in a temporary directory
//! removed once the case is over.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] functions fail loudly"
)]

use std::sync::Arc;

use lease_core::LeaseStore;
use lease_sqlite::SqliteStore;

/// A store on a fresh, not yet migrated database file (the suite migrates),
/// and its temporary directory, which goes once the case is over.
async fn fresh_store() -> Option<(Arc<dyn LeaseStore>, tempfile::TempDir)> {
    let (store, dir) = tokio::task::spawn_blocking(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = SqliteStore::open(dir.path().join("leases.db")).expect("a fresh SQLite file");
        (store, dir)
    })
    .await
    .expect("open task");
    Some((Arc::new(store), dir))
}

lease_conformance::conformance_tests!(fresh_store);
