//! Shared by the integration tests: the server URL policy and fresh tables.
#![allow(dead_code, unreachable_pub)]

use lease_mysql::MySqlStore;
use lease_mysql::mysql_async::prelude::Queryable;

/// The test server's URL from `LEASE_TEST_MYSQL_URL`. Unset: under `CI=true`
/// a failure, otherwise a skip note on stderr and `None`.
pub fn url() -> Option<String> {
    match std::env::var("LEASE_TEST_MYSQL_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("LEASE_TEST_MYSQL_URL is required when CI=true");
            }
            eprintln!("skipped: set LEASE_TEST_MYSQL_URL (e.g. mysql://root@127.0.0.1:3306/test)");
            None
        }
    }
}

/// The URL with a query parameter added.
pub fn with_param(url: &str, param: &str) -> String {
    if url.contains('?') {
        format!("{url}&{param}")
    } else {
        format!("{url}?{param}")
    }
}

/// A store on `table`, dropped first and migrated.
pub async fn fresh(url: &str, table: &str) -> MySqlStore {
    let store = MySqlStore::builder()
        .with_table(table)
        .connect(url)
        .await
        .expect("connect to the test server");
    drop_table(&store, table).await;
    store.migrate().await.expect("migrate");
    store
}

/// Drops `table` if it exists.
pub async fn drop_table(store: &MySqlStore, table: &str) {
    let mut conn = store.pool().get_conn().await.expect("connection");
    conn.query_drop(format!("DROP TABLE IF EXISTS `{table}`"))
        .await
        .expect("drop table");
}
