//! The whole suite against the reference store: every case passes on a
//! correct implementation of the protocol.

use std::sync::Arc;

use lease_conformance::reference::MemoryStore;
use lease_core::LeaseStore;

async fn fresh_store() -> Option<Arc<dyn LeaseStore>> {
    Some(Arc::new(MemoryStore::new()))
}

lease_conformance::conformance_tests!(fresh_store);
