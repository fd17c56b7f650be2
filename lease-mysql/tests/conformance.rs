//! The shared protocol suite of `lease-conformance`, run against MySQL or
//! MariaDB (`LEASE_TEST_MYSQL_URL`): each case on a fresh table of its own,
//! dropped once the case is over. Tables an interrupted run
//! left (prefix `lmc_`, older than ten minutes) are dropped once per run.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] functions fail loudly"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use lease_core::LeaseStore;
use lease_mysql::MySqlStore;
use lease_mysql::mysql_async::prelude::Queryable;
use lease_testkit::Cleanup;

/// The prefix of this suite's tables.
const PREFIX: &str = "lmc_";

/// A store on a fresh, not yet migrated table (the suite migrates), and the
/// guard that drops the table once the case is over.
async fn fresh_store() -> Option<(Arc<dyn LeaseStore>, Cleanup)> {
    static SWEPT: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let url = lease_conformance::env_url("LEASE_TEST_MYSQL_URL")?;
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let table = format!("{PREFIX}{:x}_{nanos:x}_{n}", std::process::id());
    let store = MySqlStore::builder(&url)
        .unwrap()
        .with_table(&table)
        .with_pool_constraints(0, 16)
        .connect()
        .await
        .expect("connect to LEASE_TEST_MYSQL_URL");
    let _ = SWEPT.get_or_init(|| sweep(&store)).await;
    let cleanup = Cleanup::new(move || async move {
        let Ok(builder) = MySqlStore::builder(&url) else {
            return;
        };
        let Ok(store) = builder.with_pool_constraints(0, 1).build() else {
            return;
        };
        if let Ok(mut conn) = store.pool().get_conn().await {
            let quoted = table.replace('`', "``");
            let _ = conn
                .query_drop(format!("DROP TABLE IF EXISTS `{quoted}`"))
                .await;
            let _ = conn.disconnect().await;
        }
    });
    Some((Arc::new(store), cleanup))
}

/// Drops the tables earlier runs left behind.
async fn sweep(store: &MySqlStore) {
    let mut conn = store.pool().get_conn().await.expect("a connection");
    let stale: Vec<String> = conn
        .exec(
            "SELECT TABLE_NAME FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE ? \
             AND CREATE_TIME < NOW() - INTERVAL 10 MINUTE",
            (format!("{PREFIX}%"),),
        )
        .await
        .expect("list stale tables");
    for table in stale {
        // Names come from information_schema and match the prefix; quote anyway.
        let quoted = table.replace('`', "``");
        conn.query_drop(format!("DROP TABLE IF EXISTS `{quoted}`"))
            .await
            .expect("drop a stale table");
    }
}

lease_conformance::conformance_tests!(fresh_store);
