//! The shared protocol suite of `lease-conformance`, run against SQLite: each
//! case on a fresh database file of its own, in a temporary directory that
//! lives exactly as long as the store.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] functions fail loudly"
)]

use std::sync::Arc;

use async_trait::async_trait;
use lease_core::{BoxError, Finished, LeaseStore, SlotClaim, UnfinishedRow};
use lease_sqlite::SqliteStore;
use tempfile::TempDir;

/// A store on a fresh, not yet migrated database file (the suite migrates).
async fn fresh_store() -> Option<Arc<dyn LeaseStore>> {
    let store = tokio::task::spawn_blocking(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = SqliteStore::open(dir.path().join("leases.db")).expect("a fresh SQLite file");
        TempStore { store, _dir: dir }
    })
    .await
    .expect("open task");
    Some(Arc::new(store))
}

lease_conformance::conformance_tests!(fresh_store);

/// A [`SqliteStore`] that owns its temporary directory: the directory goes
/// when the suite drops the store.
#[derive(Debug)]
struct TempStore {
    store: SqliteStore,
    _dir: TempDir,
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl LeaseStore for TempStore {
    async fn claim(
        &self,
        name: &str,
        holder: &str,
        instance: &str,
        lease_ms: i64,
    ) -> Result<Option<u64>, BoxError> {
        self.store.claim(name, holder, instance, lease_ms).await
    }

    async fn renew(&self, name: &str, holder: &str, lease_ms: i64) -> Result<bool, BoxError> {
        self.store.renew(name, holder, lease_ms).await
    }

    async fn verify(&self, name: &str, holder: &str) -> Result<Option<u64>, BoxError> {
        self.store.verify(name, holder).await
    }

    async fn release(&self, name: &str, holder: &str) -> Result<bool, BoxError> {
        self.store.release(name, holder).await
    }

    async fn claim_slot(
        &self,
        name: &str,
        holder: &str,
        instance: &str,
        slot_ms: i64,
        lease_ms: i64,
    ) -> Result<SlotClaim, BoxError> {
        self.store
            .claim_slot(name, holder, instance, slot_ms, lease_ms)
            .await
    }

    async fn finish(
        &self,
        name: &str,
        holder: Option<&str>,
        slot_ms: i64,
        passed_ms: i64,
    ) -> Result<Finished, BoxError> {
        self.store.finish(name, holder, slot_ms, passed_ms).await
    }

    async fn find_unfinished(&self, names: &[&str]) -> Result<Vec<UnfinishedRow>, BoxError> {
        self.store.find_unfinished(names).await
    }

    async fn claim_rerun(
        &self,
        name: &str,
        term: u64,
        holder: &str,
        instance: &str,
        lease_ms: i64,
    ) -> Result<bool, BoxError> {
        self.store
            .claim_rerun(name, term, holder, instance, lease_ms)
            .await
    }

    async fn last_slot(&self, name: &str) -> Result<Option<i64>, BoxError> {
        self.store.last_slot(name).await
    }

    async fn now_ms(&self) -> Result<i64, BoxError> {
        self.store.now_ms().await
    }

    async fn migrate(&self) -> Result<(), BoxError> {
        self.store.migrate().await
    }
}
