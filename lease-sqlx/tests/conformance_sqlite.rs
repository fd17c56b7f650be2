//! The shared protocol suite of `lease-conformance`, run against
//! [`lease_sqlx::SqliteLeaseStore`]: each case on a fresh SQLite file of its
//! own, through a sqlx pool of four connections (WAL, a busy timeout).

#![cfg(feature = "sqlite")]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lease_core::LeaseStore;

/// A store on a fresh file (the suite migrates), under the target's
/// temporary directory: the store outlives this function, so the files stay
/// until the next run of this test binary removes them.
async fn fresh_store() -> Option<Arc<dyn LeaseStore>> {
    static CLEARED: std::sync::Once = std::sync::Once::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let base = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("lease-sqlx-conformance");
    CLEARED.call_once(|| {
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
    });
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(base.join(format!("{}-{n}.db", std::process::id())))
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(10));
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await
        .unwrap();
    Some(Arc::new(lease_sqlx::SqliteLeaseStore::new(pool)))
}

lease_conformance::conformance_tests!(fresh_store);
