//! Shared by the integration tests: the server URL policy, fresh tables and
//! their clean-up.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use lease_postgres::PostgresStore;

/// The prefix of every table the tests create: `lpt_<unix secs>_<pid>_<n>`.
pub const PREFIX: &str = "lpt_";

/// Tables of earlier runs older than this are dropped.
const STALE_AFTER: Duration = Duration::from_secs(600);

/// The test server's URL from `LEASE_TEST_POSTGRES_URL`, under the suite's
/// policy: set, the URL (a server that then cannot be reached fails the
/// test); unset with `CI=true`, a failure; unset otherwise, a note on stderr
/// and `None` (the test returns, skipped).
pub fn url() -> Option<String> {
    lease_conformance::env_url("LEASE_TEST_POSTGRES_URL")
}

#[allow(
    unused_imports,
    reason = "each test binary uses its own part of the helpers"
)]
pub use lease_testkit::url::{url_as, with_param};

/// A table name no other test, process or run uses; its creation time is in
/// the name, so that a later run can drop it once stale.
pub fn unique_table() -> String {
    lease_testkit::unique(PREFIX)
}

/// A store on a fresh table (not created yet), with `sslmode=disable`
/// unless the URL says otherwise. Drops stale tables of earlier runs, once
/// per process.
pub async fn store_on_new_table(url: &str) -> PostgresStore {
    store_on_new_table_with(url, &lease_core::Timings::default()).await
}

/// [`store_on_new_table`] with its server-side bounds from `timings`, which
/// a coordinator on it (`Leases::new`) takes.
pub async fn store_on_new_table_with(url: &str, timings: &lease_core::Timings) -> PostgresStore {
    let store = PostgresStore::builder(url)
        .unwrap()
        .with_table(unique_table())
        .with_timings(timings)
        .connect()
        .await
        .expect("connect to LEASE_TEST_POSTGRES_URL");
    sweep(&store).await;
    store
}

/// [`store_on_new_table`], migrated.
pub async fn fresh(url: &str) -> PostgresStore {
    let store = store_on_new_table(url).await;
    lease_core::LeaseStore::migrate(&store).await.unwrap();
    store
}

/// Drops the store's table.
pub async fn drop_table(store: &PostgresStore) {
    let client = store.pool().get().await.unwrap();
    client
        .batch_execute(&format!("DROP TABLE IF EXISTS \"{}\"", store.table()))
        .await
        .unwrap();
}

/// Drops the tables earlier runs left behind (once per process).
pub async fn sweep(store: &PostgresStore) {
    static SWEPT: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    let _ = SWEPT
        .get_or_init(|| async {
            let client = store.pool().get().await.unwrap();
            // An unnamed statement: behind a transaction pooler (PgBouncer),
            // a named one would stay on a server connection that other
            // clients then share.
            let rows = client
                .query_typed(
                    "SELECT tablename::text FROM pg_tables \
                     WHERE schemaname = current_schema() AND tablename LIKE 'lpt\\_%'",
                    &[],
                )
                .await
                .unwrap();
            for row in rows {
                let table: String = row.get(0);
                if lease_testkit::is_stale(&table, PREFIX, STALE_AFTER) {
                    // The name matched the prefix and came from the catalog;
                    // quoted all the same.
                    let _ = client
                        .batch_execute(&format!(
                            "DROP TABLE IF EXISTS \"{}\"",
                            table.replace('"', "\"\"")
                        ))
                        .await;
                }
            }
        })
        .await;
}

/// Runs `statement` (one or more, `;`-separated) as the store's user.
pub async fn exec(store: &PostgresStore, statement: &str) {
    let client = store.pool().get().await.unwrap();
    client
        .batch_execute(statement)
        .await
        .unwrap_or_else(|e| panic!("{statement}: {e}"));
}
