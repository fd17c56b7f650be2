//! Issue 25, item 4: `migrate` gives a table created by the previous schema
//! (without `resign_term`) the column, keeps its leases, and the table
//! carries resign requests after it; a second `migrate` changes nothing. On
//! SQLite always, on PostgreSQL and MariaDB when their URLs are set.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use lease_core::{LeaseStore, Leases, Token};

/// The checks on `store`, whose table was created by the previous DDL and
/// holds the lease `old` (token `old-token`, instance `old-host`, term 7,
/// never expiring).
async fn migrates_the_previous_schema(store: impl LeaseStore + Clone) {
    let old_token = Token::new("old-token");
    assert!(
        store.renew("old", old_token, 15_000).await.is_err(),
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
    let renewed = store
        .renew("old", old_token, 15_000)
        .await
        .unwrap()
        .unwrap();
    assert!(renewed.resign, "{renewed:?}");
    let handle = leases.claim("job").await.unwrap().unwrap();
    handle.renew().await.unwrap();
    handle.release().await.unwrap();
}

/// A table name of this run's own.
fn table(prefix: &str) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    format!("{prefix}{secs}_{}_old", std::process::id())
}

const INSERT: &str = "(name, holder, instance, term, expires_at_ms) \
                      VALUES ('old', 'old-token', 'old-host', 7, 9223372036854775807)";

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sqlite_migrate_adds_the_resign_column() {
    let dir = tempfile::tempdir().unwrap();
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(dir.path().join("leases.db"))
        .create_if_missing(true);
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(2)
        .connect_with(options)
        .await
        .unwrap();
    let ddl = "CREATE TABLE gst_leases (name TEXT NOT NULL PRIMARY KEY, \
               holder TEXT NOT NULL, instance TEXT NOT NULL, term INTEGER NOT NULL, \
               expires_at_ms INTEGER NOT NULL, slot_ms INTEGER NOT NULL DEFAULT 0, \
               unfinished_slot_ms INTEGER NOT NULL DEFAULT 0, \
               rerun_slot_ms INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID";
    let _ = sqlx::query(ddl).execute(&pool).await.unwrap();
    let insert = format!("INSERT INTO gst_leases {INSERT}");
    let _ = sqlx::query(sqlx::AssertSqlSafe(insert))
        .execute(&pool)
        .await
        .unwrap();
    migrates_the_previous_schema(lease_sqlx::SqliteLeaseStore::new(pool)).await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres_migrate_adds_the_resign_column() {
    let Some(url) = lease_conformance::env_url("LEASE_TEST_POSTGRES_URL") else {
        return;
    };
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(&url)
        .await
        .unwrap();
    let table = table("lsq_");
    let ddl = format!(
        "CREATE TABLE \"{table}\" (name text COLLATE \"C\" NOT NULL PRIMARY KEY, \
         holder text NOT NULL, instance text NOT NULL, term bigint NOT NULL, \
         expires_at_ms bigint NOT NULL, slot_ms bigint NOT NULL DEFAULT 0, \
         unfinished_slot_ms bigint NOT NULL DEFAULT 0, rerun_slot_ms bigint NOT NULL DEFAULT 0)"
    );
    let _ = sqlx::query(sqlx::AssertSqlSafe(ddl))
        .execute(&pool)
        .await
        .unwrap();
    let insert = format!("INSERT INTO \"{table}\" {INSERT}");
    let _ = sqlx::query(sqlx::AssertSqlSafe(insert))
        .execute(&pool)
        .await
        .unwrap();
    let store = lease_sqlx::PgLeaseStore::with_table(pool.clone(), &table).unwrap();
    migrates_the_previous_schema(store).await;
    let drop = format!("DROP TABLE IF EXISTS \"{table}\"");
    let _ = sqlx::query(sqlx::AssertSqlSafe(drop))
        .execute(&pool)
        .await
        .unwrap();
}

#[cfg(feature = "mysql")]
#[tokio::test]
async fn mysql_migrate_adds_the_resign_column() {
    let Some(url) = lease_conformance::env_url("LEASE_TEST_MYSQL_URL") else {
        return;
    };
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(2)
        .connect(&url.replacen("mariadb://", "mysql://", 1))
        .await
        .unwrap();
    let table = table("lsq_");
    let ddl = format!(
        "CREATE TABLE `{table}` (name VARBINARY(191) NOT NULL, holder VARBINARY(64) NOT NULL, \
         instance VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, \
         term BIGINT UNSIGNED NOT NULL, expires_at_ms BIGINT NOT NULL, \
         slot_ms BIGINT NOT NULL DEFAULT 0, unfinished_slot_ms BIGINT NOT NULL DEFAULT 0, \
         rerun_slot_ms BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (name)) ENGINE = InnoDB"
    );
    let _ = sqlx::query(sqlx::AssertSqlSafe(ddl))
        .execute(&pool)
        .await
        .unwrap();
    let insert = format!("INSERT INTO `{table}` {INSERT}");
    let _ = sqlx::query(sqlx::AssertSqlSafe(insert))
        .execute(&pool)
        .await
        .unwrap();
    let store = lease_sqlx::MySqlLeaseStore::with_table(pool.clone(), &table).unwrap();
    migrates_the_previous_schema(store).await;
    let drop = format!("DROP TABLE IF EXISTS `{table}`");
    let _ = sqlx::query(sqlx::AssertSqlSafe(drop))
        .execute(&pool)
        .await
        .unwrap();
}
