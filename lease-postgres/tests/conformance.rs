//! The shared protocol suite of `lease-conformance`, run against PostgreSQL
//! (`LEASE_TEST_POSTGRES_URL`): each case on a fresh table of its own. Tables
//! of earlier runs (prefix `lpt_`, older than ten minutes) are dropped once
//! per run.

mod common;

use std::sync::Arc;

use lease_core::LeaseStore;

/// A store on a fresh, not yet migrated table (the suite migrates).
async fn fresh_store() -> Option<Arc<dyn LeaseStore>> {
    let url = common::url()?;
    Some(Arc::new(common::store_on_new_table(&url).await))
}

lease_conformance::conformance_tests!(fresh_store);
