//! A store wrapper that counts the statements reaching the store under test.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use lease_core::{BoxError, Finished, LeaseStore, SlotClaim, UnfinishedRow};

/// Forwards every call to the store under test, counting them, so that a case
/// can tell whether anything reached the database.
#[derive(Debug)]
pub(crate) struct CountingStore {
    inner: Arc<dyn LeaseStore>,
    calls: AtomicU64,
}

impl CountingStore {
    pub(crate) fn new(inner: Arc<dyn LeaseStore>) -> Self {
        CountingStore {
            inner,
            calls: AtomicU64::new(0),
        }
    }

    pub(crate) fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    fn count(&self) {
        self.calls.fetch_add(1, Ordering::SeqCst);
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl LeaseStore for CountingStore {
    async fn claim(
        &self,
        name: &str,
        holder: &str,
        instance: &str,
        lease_ms: i64,
    ) -> Result<Option<u64>, BoxError> {
        self.count();
        self.inner.claim(name, holder, instance, lease_ms).await
    }

    async fn renew(&self, name: &str, holder: &str, lease_ms: i64) -> Result<bool, BoxError> {
        self.count();
        self.inner.renew(name, holder, lease_ms).await
    }

    async fn verify(&self, name: &str, holder: &str) -> Result<Option<u64>, BoxError> {
        self.count();
        self.inner.verify(name, holder).await
    }

    async fn release(&self, name: &str, holder: &str) -> Result<bool, BoxError> {
        self.count();
        self.inner.release(name, holder).await
    }

    async fn claim_slot(
        &self,
        name: &str,
        holder: &str,
        instance: &str,
        slot_ms: i64,
        lease_ms: i64,
    ) -> Result<SlotClaim, BoxError> {
        self.count();
        self.inner
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
        self.count();
        self.inner.finish(name, holder, slot_ms, passed_ms).await
    }

    async fn find_unfinished(&self, names: &[&str]) -> Result<Vec<UnfinishedRow>, BoxError> {
        self.count();
        self.inner.find_unfinished(names).await
    }

    async fn claim_rerun(
        &self,
        name: &str,
        term: u64,
        holder: &str,
        instance: &str,
        lease_ms: i64,
    ) -> Result<bool, BoxError> {
        self.count();
        self.inner
            .claim_rerun(name, term, holder, instance, lease_ms)
            .await
    }

    async fn last_slot(&self, name: &str) -> Result<Option<i64>, BoxError> {
        self.count();
        self.inner.last_slot(name).await
    }

    async fn now_ms(&self) -> Result<i64, BoxError> {
        self.count();
        self.inner.now_ms().await
    }

    async fn migrate(&self) -> Result<(), BoxError> {
        self.count();
        self.inner.migrate().await
    }
}
