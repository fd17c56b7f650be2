//! The shared protocol suite of `lease-conformance`, run against
//! [`lease_sqlx::PgLeaseStore`] on PostgreSQL (`LEASE_TEST_POSTGRES_URL`):
//! each case on a fresh table of its own (prefix `lsq_`; a later run drops
//! those older than ten minutes).

#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use lease_core::LeaseStore;

/// A store on a fresh, not yet migrated table (the suite migrates); nothing
/// to clean up (a later run drops the tables).
async fn fresh_store() -> Option<(Arc<dyn LeaseStore>, ())> {
    static SWEPT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let url = lease_conformance::env_url("LEASE_TEST_POSTGRES_URL")?;
    if url.contains("statement_mode=unnamed") {
        // A transaction pooler: not for sqlx (see `PgLeaseStore`).
        eprintln!("PgLeaseStore is not for a transaction-pooling PgBouncer: skipped");
        return None;
    }
    let options: sqlx::postgres::PgConnectOptions = url.parse().unwrap();
    // A pool per case: each test has a runtime of its own.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .connect_with(options)
        .await
        .expect("connect to LEASE_TEST_POSTGRES_URL");
    if !SWEPT.swap(true, Ordering::SeqCst) {
        sweep(&pool).await;
    }
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let table = format!("lsq_{secs}_{}_{n}", std::process::id());
    let store = lease_sqlx::PgLeaseStore::with_table(pool, &table).unwrap();
    Some((Arc::new(store), ()))
}

/// Drops the tables of runs older than ten minutes.
async fn sweep(pool: &sqlx::PgPool) {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT tablename::text FROM pg_tables \
         WHERE schemaname = current_schema() AND tablename LIKE 'lsq\\_%'",
    )
    .persistent(false)
    .fetch_all(pool)
    .await
    .unwrap();
    for table in tables {
        if lease_testkit::is_stale(&table, "lsq_", std::time::Duration::from_secs(600)) {
            let drop = format!("DROP TABLE IF EXISTS \"{}\"", table.replace('"', "\"\""));
            let _ = sqlx::query(sqlx::AssertSqlSafe(drop))
                .persistent(false)
                .execute(pool)
                .await;
        }
    }
}

lease_conformance::conformance_tests!(fresh_store);
