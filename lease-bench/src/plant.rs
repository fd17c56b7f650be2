//! Bugs planted on purpose: the soak must catch each of them.
//!
//! - [`Plant::SkipDeadline`]: the contender runs its work beside the lease
//!   instead of under [`run`](lease_core::run), and lets it run its course
//!   after the lease is lost (no local deadline, no grace): caught as an
//!   overlap and a late step-down once the database stalls or the network
//!   fails for longer than the local deadline.
//! - [`Plant::PhantomClaim`]: the store takes every name twice per claim
//!   ([`PhantomClaimStore`]), so the term moves by two per change of hands:
//!   caught by the term rule.
//! - [`Plant::RerunFinished`]: the scheduler runs an instant a second time
//!   after its first run finished (under a plain claim of the job's name):
//!   caught by the instant rule.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use async_trait::async_trait;
use lease_core::{BoxError, Finished, LeaseStore, SlotClaim, UnfinishedRow};

/// Which bug, if any, a soak's contenders carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Plant {
    /// None: the library as it is.
    #[default]
    None,
    /// Work that outlives its lease.
    SkipDeadline,
    /// A store whose claims move the term by two.
    PhantomClaim,
    /// A scheduler that runs a finished instant again.
    RerunFinished,
}

impl Plant {
    /// Every plant, for help texts.
    pub const ALL: [Plant; 4] = [
        Plant::None,
        Plant::SkipDeadline,
        Plant::PhantomClaim,
        Plant::RerunFinished,
    ];

    /// The plant's name on the command line.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Plant::None => "none",
            Plant::SkipDeadline => "skip-deadline",
            Plant::PhantomClaim => "phantom-claim",
            Plant::RerunFinished => "rerun-finished",
        }
    }
}

impl fmt::Display for Plant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Plant {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Plant::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Plant::ALL.iter().map(|p| p.as_str()).collect();
                format!("unknown plant {s:?}: one of {}", names.join(", "))
            })
    }
}

/// A store whose every successful claim is made twice: the name is taken,
/// given back and taken again, so the term moves by two while the caller
/// sees one change of hands. Every other statement is forwarded.
#[derive(Debug)]
pub struct PhantomClaimStore {
    inner: Arc<dyn LeaseStore>,
}

impl PhantomClaimStore {
    /// Wraps `inner`.
    #[must_use]
    pub fn new(inner: Arc<dyn LeaseStore>) -> Self {
        PhantomClaimStore { inner }
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl LeaseStore for PhantomClaimStore {
    async fn claim(
        &self,
        name: &str,
        holder: &str,
        instance: &str,
        lease_ms: i64,
    ) -> Result<Option<u64>, BoxError> {
        match self.inner.claim(name, holder, instance, lease_ms).await? {
            Some(_) => {
                self.inner.release(name, holder).await?;
                self.inner.claim(name, holder, instance, lease_ms).await
            }
            None => Ok(None),
        }
    }

    async fn renew(&self, name: &str, holder: &str, lease_ms: i64) -> Result<bool, BoxError> {
        self.inner.renew(name, holder, lease_ms).await
    }

    async fn renew_many(
        &self,
        leases: &[(&str, &str)],
        lease_ms: i64,
    ) -> Result<Vec<bool>, BoxError> {
        self.inner.renew_many(leases, lease_ms).await
    }

    async fn verify(&self, name: &str, holder: &str) -> Result<Option<u64>, BoxError> {
        self.inner.verify(name, holder).await
    }

    async fn release(&self, name: &str, holder: &str) -> Result<bool, BoxError> {
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
        self.inner.finish(name, holder, slot_ms, passed_ms).await
    }

    async fn find_unfinished(&self, names: &[&str]) -> Result<Vec<UnfinishedRow>, BoxError> {
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
        self.inner
            .claim_rerun(name, term, holder, instance, lease_ms)
            .await
    }

    async fn last_slot(&self, name: &str) -> Result<Option<i64>, BoxError> {
        self.inner.last_slot(name).await
    }

    async fn force_release(&self, name: &str, term: u64) -> Result<bool, BoxError> {
        self.inner.force_release(name, term).await
    }

    async fn get(&self, name: &str) -> Result<Option<lease_core::LeaseInfo>, BoxError> {
        self.inner.get(name).await
    }

    async fn list(&self, prefix: &str, limit: u32) -> Result<Vec<lease_core::LeaseInfo>, BoxError> {
        self.inner.list(prefix, limit).await
    }

    async fn now_ms(&self) -> Result<i64, BoxError> {
        self.inner.now_ms().await
    }

    async fn migrate(&self) -> Result<(), BoxError> {
        self.inner.migrate().await
    }

    fn classify(&self, error: &(dyn std::error::Error + 'static)) -> lease_core::DbErrorKind {
        self.inner.classify(error)
    }
    fn guard_statement(&self) -> Option<lease_core::GuardStatement> {
        self.inner.guard_statement()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lease_core::Leases;

    #[test]
    fn plants_by_name() {
        for p in Plant::ALL {
            assert_eq!(p.as_str().parse::<Plant>(), Ok(p));
        }
        assert!(
            "nope"
                .parse::<Plant>()
                .unwrap_err()
                .contains("skip-deadline")
        );
    }

    #[tokio::test]
    async fn a_phantom_claim_moves_the_term_by_two() {
        let inner: Arc<dyn LeaseStore> =
            Arc::new(dblease::sqlite::SqliteStore::open_in_memory().unwrap());
        let leases = Leases::new(PhantomClaimStore::new(inner));
        leases.migrate().await.unwrap();
        let first = leases.claim("n").await.unwrap().unwrap();
        assert_eq!(first.term(), 2);
        first.release().await.unwrap();
        let second = leases.claim("n").await.unwrap().unwrap();
        assert_eq!(second.term(), 4);
        assert_eq!(second.verify().await.unwrap(), 4);
    }
}
