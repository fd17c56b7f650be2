//! The shared protocol suite of `lease-conformance`, run against
//! [`lease_sqlx::SqliteLeaseStore`]: each case on a fresh SQLite file of its
//! own, through a sqlx pool of four connections (WAL, a busy timeout).

#![cfg(feature = "sqlite")]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lease_core::{LeaseStore, Token};

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

/// Renewals are `UPDATE ... RETURNING`: a statement read for its one row
/// and then dropped before it ran to its end never triggers SQLite's
/// automatic checkpoint, and while renewals are the only writes the log
/// then grows by a frame per renewal without bound (the fault lease-sqlite
/// had). 2,500 renewals must leave the log near SQLite's 1,000-page
/// checkpoint threshold.
#[tokio::test]
async fn the_log_is_checkpointed_while_only_renewals_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("renewals.db");
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .synchronous(sqlx::sqlite::SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(10));
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .unwrap();
    let store = lease_sqlx::SqliteLeaseStore::new(pool.clone());
    store.migrate().await.unwrap();
    let names: Vec<String> = (0..32).map(|i| format!("renewed-{i}")).collect();
    for name in &names {
        let claim = lease_core::ClaimRequest {
            name,
            token: Token::new("h"),
            instance: "i",
            lease_ms: 15_000,
        };
        assert_eq!(store.claim(claim).await.unwrap(), Some(1));
    }
    let page: i64 = sqlx::query_scalar("PRAGMA page_size")
        .fetch_one(&pool)
        .await
        .unwrap();
    let frame = lease_testkit::sqlite_wal_frame(u64::try_from(page).unwrap());
    let mut most = 0;
    for i in 0..2_500 {
        let name = &names[i % names.len()];
        assert!(
            store
                .renew(name, Token::new("h"), 15_000)
                .await
                .unwrap()
                .is_some()
        );
        most = most.max(lease_testkit::sqlite_wal_bytes(&path) / frame);
    }
    assert!(
        most <= 1_100,
        "the log reached {most} frames over 2,500 renewals: it was not checkpointed"
    );
}
