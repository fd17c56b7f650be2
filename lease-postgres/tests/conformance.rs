//! The shared protocol suite of `lease-conformance`, run against PostgreSQL
//! (`LEASE_TEST_POSTGRES_URL`): each case on a fresh table of its own,
//! dropped once the case is over. Tables an interrupted run
//! left (prefix `lpt_`, older than ten minutes) are dropped once per run.

mod common;

use std::sync::Arc;

use lease_core::LeaseStore;
use lease_postgres::PostgresStore;
use lease_testkit::Cleanup;

/// A store on a fresh, not yet migrated table (the suite migrates), and the
/// guard that drops the table once the case is over.
async fn fresh_store() -> Option<(Arc<dyn LeaseStore>, Cleanup)> {
    let url = common::url()?;
    let store = common::store_on_new_table(&url).await;
    let table = store.table().to_owned();
    let cleanup = Cleanup::new(move || async move {
        if let Ok(builder) = PostgresStore::builder(&url) {
            if let Ok(store) = builder.with_table(table).build() {
                common::drop_table(&store).await;
            }
        }
    });
    Some((Arc::new(store), cleanup))
}

lease_conformance::conformance_tests!(fresh_store);
