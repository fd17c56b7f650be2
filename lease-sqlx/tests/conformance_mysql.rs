//! The shared protocol suite of `lease-conformance`, run against
//! [`lease_sqlx::MySqlLeaseStore`] on MySQL or MariaDB
//! (`LEASE_TEST_MYSQL_URL`): each case on a fresh table of its own, dropped
//! once the case is over; tables an interrupted run left
//! (prefix `lsm_`, older than ten minutes) are dropped once per run. The
//! pool is built with the store's session bounds
//! (`MySqlLeaseStore::pool_options`), as `lease-mysql` builds its own.

#![cfg(feature = "mysql")]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use std::sync::Arc;
use std::time::Duration;

use lease_core::{LeaseStore, Leases};
use lease_sqlx::MySqlLeaseStore;
use sqlx::{Connection, Executor};

/// The prefix of this file's tables.
const PREFIX: &str = "lsm_";

/// A pool with `lease-mysql`'s default bounds: lock wait 3 s, statement
/// 5 s, idle transaction 10 s.
async fn pool(url: &str) -> sqlx::MySqlPool {
    MySqlLeaseStore::pool_options(&lease_core::Timings::default())
        .max_connections(16)
        .connect(url)
        .await
        .expect("connect to LEASE_TEST_MYSQL_URL")
}

/// Drops `table` when the guard goes, on a connection of its own.
fn dropping(url: String, table: String) -> lease_testkit::Cleanup {
    lease_testkit::Cleanup::new(move || async move {
        if let Ok(mut conn) = sqlx::MySqlConnection::connect(&url).await {
            let drop = format!("DROP TABLE IF EXISTS `{}`", table.replace('`', "``"));
            let _ = conn.execute(sqlx::AssertSqlSafe(drop)).await;
            let _ = conn.close().await;
        }
    })
}

/// A store on a fresh, not yet migrated table (the suite migrates), and the
/// guard that drops the table once the case is over.
async fn fresh_store() -> Option<(Arc<dyn LeaseStore>, lease_testkit::Cleanup)> {
    static SWEPT: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    let url = lease_conformance::env_url("LEASE_TEST_MYSQL_URL")?;
    let pool = pool(&url).await;
    let _ = SWEPT.get_or_init(|| sweep(&pool)).await;
    let table = lease_testkit::unique(PREFIX);
    let store = MySqlLeaseStore::with_table(pool, &table).unwrap();
    Some((Arc::new(store), dropping(url, table)))
}

/// Drops the tables earlier runs left behind.
async fn sweep(pool: &sqlx::MySqlPool) {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT TABLE_NAME FROM information_schema.TABLES \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE 'lsm\\_%'",
    )
    .fetch_all(pool)
    .await
    .expect("list stale tables");
    for table in tables {
        if lease_testkit::is_stale(&table, PREFIX, Duration::from_secs(600)) {
            let drop = format!("DROP TABLE IF EXISTS `{}`", table.replace('`', "``"));
            let _ = pool
                .execute(sqlx::AssertSqlSafe(drop))
                .await
                .expect("drop a stale table");
        }
    }
}

lease_conformance::conformance_tests!(fresh_store);

/// Every connection of a pool from `pool_options` runs the session setup:
/// the lock-wait bound the store's claims and guards rely on is the one the
/// timings derive (a 20 s deadline: statements 10 s, lock wait 6 s), not the
/// server's default (50 s), and the SQL mode is strict.
#[tokio::test]
async fn pool_options_set_the_session_bounds() {
    let Some(url) = lease_conformance::env_url("LEASE_TEST_MYSQL_URL") else {
        return;
    };
    let timings = lease_core::Timings::builder()
        .lease(Duration::from_secs(40))
        .deadline(Duration::from_secs(20))
        .build()
        .unwrap();
    let pool = MySqlLeaseStore::pool_options(&timings)
        .max_connections(2)
        .connect(&url)
        .await
        .unwrap();
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut conn = pool.acquire().await.unwrap();
        let (wait, mode): (u64, String) =
            sqlx::query_as("SELECT @@SESSION.innodb_lock_wait_timeout, @@SESSION.sql_mode")
                .fetch_one(&mut *conn)
                .await
                .unwrap();
        assert_eq!(wait, 6);
        assert!(mode.contains("STRICT_ALL_TABLES"), "{mode}");
        held.push(conn);
    }
    let err = MySqlLeaseStore::session_setup(Duration::from_millis(200), None, None).unwrap_err();
    assert!(
        matches!(err, lease_sqlx::StoreError::InvalidSetting(_)),
        "{err}"
    );
}

/// `migrate` checks an existing table as `lease-mysql`'s does: an
/// `AUTO_INCREMENT` column would replace the terms the writes read back
/// from the insert id, so the table is refused, and nothing is claimed on
/// it.
#[tokio::test]
async fn migrate_refuses_a_table_whose_insert_ids_would_lie() {
    let Some(url) = lease_conformance::env_url("LEASE_TEST_MYSQL_URL") else {
        return;
    };
    let pool = pool(&url).await;
    let table = lease_testkit::unique(PREFIX);
    let _cleanup = dropping(url, table.clone());
    let create = format!(
        "CREATE TABLE `{table}` (id BIGINT AUTO_INCREMENT UNIQUE, \
         name VARBINARY(191) NOT NULL PRIMARY KEY, holder VARBINARY(64) NOT NULL, \
         instance VARCHAR(255) NOT NULL, term BIGINT UNSIGNED NOT NULL, \
         expires_at_ms BIGINT NOT NULL, slot_ms BIGINT NOT NULL DEFAULT 0, \
         unfinished_slot_ms BIGINT NOT NULL DEFAULT 0, rerun_slot_ms BIGINT NOT NULL DEFAULT 0)"
    );
    let _ = pool.execute(sqlx::AssertSqlSafe(create)).await.unwrap();
    let store = MySqlLeaseStore::with_table(pool.clone(), &table).unwrap();
    let err = store.migrate().await.unwrap_err();
    // Classified as lease-mysql classifies its own refusal: not retryable.
    assert_eq!(store.classify(&*err), lease_core::DbErrorKind::Other);
    let err = err
        .downcast_ref::<lease_sqlx::StoreError>()
        .unwrap_or_else(|| panic!("{err}"));
    assert!(
        matches!(err, lease_sqlx::StoreError::IncompatibleTable { reason, .. } if reason.contains("AUTO_INCREMENT")),
        "{err:?}"
    );
    // The table lease-mysql's migrate accepts, it accepts too.
    let fine = lease_testkit::unique(PREFIX);
    let _fine_cleanup = dropping(
        lease_conformance::env_url("LEASE_TEST_MYSQL_URL").unwrap(),
        fine.clone(),
    );
    let store = MySqlLeaseStore::with_table(pool.clone(), &fine).unwrap();
    store.migrate().await.unwrap();
    store.migrate().await.unwrap();
    let leases = Leases::new(store);
    let h = leases.claim("x").await.unwrap().unwrap();
    assert_eq!(h.term(), 1);
    h.release().await.unwrap();
    pool.close().await;
}

/// The store's guard statement is `lease-mysql`'s for the same table, so a
/// guard run under either store's handle locks the same row the same way.
#[tokio::test]
async fn the_guard_statement_is_lease_mysqls() {
    let Some(url) = lease_conformance::env_url("LEASE_TEST_MYSQL_URL") else {
        return;
    };
    let pool = sqlx::MySqlPool::connect_lazy(&url).unwrap();
    let ours = MySqlLeaseStore::with_table(pool, "app.leases")
        .unwrap()
        .guard_statement();
    let theirs = lease_mysql::MySqlStore::builder(&url)
        .unwrap()
        .with_table("app.leases")
        .build()
        .unwrap()
        .guard_statement();
    assert_eq!(
        (ours.dialect(), ours.begin(), ours.sql()),
        (theirs.dialect(), theirs.begin(), theirs.sql())
    );
    assert!(ours.sql().contains("`app`.`leases`"), "{}", ours.sql());
    assert!(
        MySqlLeaseStore::with_table(sqlx::MySqlPool::connect_lazy(&url).unwrap(), "le`ases")
            .is_err()
    );
}
