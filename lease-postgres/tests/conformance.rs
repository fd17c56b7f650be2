//! The shared protocol suite of `lease-conformance`, run against PostgreSQL
//! (`LEASE_TEST_POSTGRES_URL`): each case on a fresh table of its own,
//! dropped when the case lets go of its store. Tables an interrupted run
//! left (prefix `lpt_`, older than ten minutes) are dropped once per run.

mod common;

use std::sync::Arc;

use lease_conformance::intercept::{Intercepted, PassThrough};
use lease_core::LeaseStore;
use lease_postgres::PostgresStore;

/// A store on a fresh, not yet migrated table (the suite migrates), which
/// drops its table when the last clone of it goes.
async fn fresh_store() -> Option<Arc<dyn LeaseStore>> {
    let url = common::url()?;
    let store = common::store_on_new_table(&url).await;
    let table = store.table().to_owned();
    let cleanup = lease_testkit::Cleanup::new(move || async move {
        if let Ok(builder) = PostgresStore::builder(&url) {
            if let Ok(store) = builder.with_table(table).build() {
                common::drop_table(&store).await;
            }
        }
    });
    Some(Arc::new(
        Intercepted::new(Arc::new(store), PassThrough).keeping(cleanup),
    ))
}

lease_conformance::conformance_tests!(fresh_store);
