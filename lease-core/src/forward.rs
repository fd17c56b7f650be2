//! Wrapping a store: change one method, forward the rest.

use std::fmt;

use async_trait::async_trait;

use crate::error::{BoxError, DbErrorKind, Op};
use crate::guard_statement::GuardStatement;
use crate::info::LeaseInfo;
use crate::store::{
    ClaimRequest, FinishRequest, Finished, InstantClaim, LeaseStore, Renewed, Unfinished,
};
use crate::timings::Timings;
use crate::token::Token;

/// A store that wraps another and changes only what it names: every
/// [`LeaseStore`] method has a default here that runs [`before`](Self::before)
/// and then forwards the call to [`inner`](Self::inner) unchanged, and every
/// type implementing this trait is a [`LeaseStore`]. A wrapper (one that
/// plants a fault, records the calls, counts them, delays them) writes
/// `inner`, then only the methods it changes.
///
/// Both traits have methods of the same names: where both are in scope,
/// call the store's as `LeaseStore::claim(&store, ..)`.
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU64, Ordering};
///
/// use lease_core::{BoxError, ClaimRequest, ForwardingStore, LeaseStore, Op};
///
/// /// Counts the claims that reach the database; refuses migrations.
/// #[derive(Debug)]
/// struct Counted {
///     inner: Arc<dyn LeaseStore>,
///     claims: AtomicU64,
/// }
///
/// #[lease_core::async_trait]
/// impl ForwardingStore for Counted {
///     fn inner(&self) -> &dyn LeaseStore {
///         &*self.inner
///     }
///
///     async fn before(&self, op: Op) -> Result<(), BoxError> {
///         match op {
///             Op::Migrate => Err("migrations are the operator's".into()),
///             _ => Ok(()),
///         }
///     }
///
///     async fn claim(&self, claim: ClaimRequest<'_>) -> Result<Option<u64>, BoxError> {
///         self.claims.fetch_add(1, Ordering::Relaxed);
///         self.inner.claim(claim).await
///     }
/// }
///
/// fn wrap(inner: Arc<dyn LeaseStore>) -> Arc<dyn LeaseStore> {
///     Arc::new(Counted { inner, claims: AtomicU64::new(0) })
/// }
/// ```
///
/// An override is the whole method: it calls `before` itself if it wants
/// the hook. Each call through a wrapper costs one more boxed future than a
/// direct call; wrappers are for tests, benchmarks and instrumentation.
#[async_trait]
pub trait ForwardingStore: Send + Sync + fmt::Debug + 'static {
    /// The store the calls go to.
    fn inner(&self) -> &dyn LeaseStore;

    /// Runs before each call a default method forwards, with the call's
    /// operation ([`Op::Renew`] for a batch too). An error fails the call
    /// without forwarding it; a future that never completes holds the call,
    /// as a database that no longer answers would. The default does nothing.
    async fn before(&self, op: Op) -> Result<(), BoxError> {
        let _ = op;
        Ok(())
    }

    /// [`LeaseStore::claim`], forwarded.
    async fn claim(&self, claim: ClaimRequest<'_>) -> Result<Option<u64>, BoxError> {
        self.before(Op::Claim).await?;
        self.inner().claim(claim).await
    }

    /// [`LeaseStore::renew`], forwarded.
    async fn renew(
        &self,
        name: &str,
        token: Token<'_>,
        lease_ms: i64,
    ) -> Result<Option<Renewed>, BoxError> {
        self.before(Op::Renew).await?;
        self.inner().renew(name, token, lease_ms).await
    }

    /// [`LeaseStore::renew_many`], forwarded.
    async fn renew_many(
        &self,
        leases: &[(&str, Token<'_>)],
        lease_ms: i64,
    ) -> Result<Vec<Option<Renewed>>, BoxError> {
        self.before(Op::Renew).await?;
        self.inner().renew_many(leases, lease_ms).await
    }

    /// [`LeaseStore::verify`], forwarded.
    async fn verify(&self, name: &str, token: Token<'_>) -> Result<Option<u64>, BoxError> {
        self.before(Op::Verify).await?;
        self.inner().verify(name, token).await
    }

    /// [`LeaseStore::release`], forwarded.
    async fn release(&self, name: &str, token: Token<'_>) -> Result<bool, BoxError> {
        self.before(Op::Release).await?;
        self.inner().release(name, token).await
    }

    /// [`LeaseStore::claim_instant`], forwarded.
    async fn claim_instant(
        &self,
        claim: ClaimRequest<'_>,
        instant_ms: i64,
    ) -> Result<InstantClaim, BoxError> {
        self.before(Op::ClaimInstant).await?;
        self.inner().claim_instant(claim, instant_ms).await
    }

    /// [`LeaseStore::finish`], forwarded.
    async fn finish(&self, finish: FinishRequest<'_>) -> Result<Finished, BoxError> {
        self.before(Op::Finish).await?;
        self.inner().finish(finish).await
    }

    /// [`LeaseStore::find_unfinished`], forwarded.
    async fn find_unfinished(&self, names: &[&str]) -> Result<Vec<Unfinished>, BoxError> {
        self.before(Op::FindUnfinished).await?;
        self.inner().find_unfinished(names).await
    }

    /// [`LeaseStore::claim_rerun`], forwarded.
    async fn claim_rerun(&self, claim: ClaimRequest<'_>, term: u64) -> Result<bool, BoxError> {
        self.before(Op::ClaimRerun).await?;
        self.inner().claim_rerun(claim, term).await
    }

    /// [`LeaseStore::last_instant`], forwarded.
    async fn last_instant(&self, name: &str) -> Result<Option<i64>, BoxError> {
        self.before(Op::LastInstant).await?;
        self.inner().last_instant(name).await
    }

    /// [`LeaseStore::force_release`], forwarded.
    async fn force_release(&self, name: &str, term: u64) -> Result<bool, BoxError> {
        self.before(Op::ForceRelease).await?;
        self.inner().force_release(name, term).await
    }

    /// [`LeaseStore::request_resign`], forwarded.
    async fn request_resign(&self, name: &str, term: u64) -> Result<bool, BoxError> {
        self.before(Op::RequestResign).await?;
        self.inner().request_resign(name, term).await
    }

    /// [`LeaseStore::get`], forwarded.
    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>, BoxError> {
        self.before(Op::Get).await?;
        self.inner().get(name).await
    }

    /// [`LeaseStore::list`], forwarded.
    async fn list(&self, prefix: &str, limit: u32) -> Result<Vec<LeaseInfo>, BoxError> {
        self.before(Op::List).await?;
        self.inner().list(prefix, limit).await
    }

    /// [`LeaseStore::now_ms`], forwarded.
    async fn now_ms(&self) -> Result<i64, BoxError> {
        self.before(Op::Now).await?;
        self.inner().now_ms().await
    }

    /// [`LeaseStore::migrate`], forwarded.
    async fn migrate(&self) -> Result<(), BoxError> {
        self.before(Op::Migrate).await?;
        self.inner().migrate().await
    }

    /// [`LeaseStore::classify`], forwarded (no hook: it sends nothing).
    fn classify(&self, error: &(dyn std::error::Error + 'static)) -> DbErrorKind {
        self.inner().classify(error)
    }

    /// [`LeaseStore::guard_statement`], forwarded (no hook: it sends
    /// nothing).
    fn guard_statement(&self) -> Option<GuardStatement> {
        self.inner().guard_statement()
    }

    /// [`LeaseStore::timings`], forwarded (no hook: it sends nothing).
    fn timings(&self) -> Option<Timings> {
        self.inner().timings()
    }
}

/// Every wrapper is a store: each method is the wrapper's.
#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl<T: ForwardingStore> LeaseStore for T {
    async fn claim(&self, claim: ClaimRequest<'_>) -> Result<Option<u64>, BoxError> {
        ForwardingStore::claim(self, claim).await
    }

    async fn renew(
        &self,
        name: &str,
        token: Token<'_>,
        lease_ms: i64,
    ) -> Result<Option<Renewed>, BoxError> {
        ForwardingStore::renew(self, name, token, lease_ms).await
    }

    async fn renew_many(
        &self,
        leases: &[(&str, Token<'_>)],
        lease_ms: i64,
    ) -> Result<Vec<Option<Renewed>>, BoxError> {
        ForwardingStore::renew_many(self, leases, lease_ms).await
    }

    async fn verify(&self, name: &str, token: Token<'_>) -> Result<Option<u64>, BoxError> {
        ForwardingStore::verify(self, name, token).await
    }

    async fn release(&self, name: &str, token: Token<'_>) -> Result<bool, BoxError> {
        ForwardingStore::release(self, name, token).await
    }

    async fn claim_instant(
        &self,
        claim: ClaimRequest<'_>,
        instant_ms: i64,
    ) -> Result<InstantClaim, BoxError> {
        ForwardingStore::claim_instant(self, claim, instant_ms).await
    }

    async fn finish(&self, finish: FinishRequest<'_>) -> Result<Finished, BoxError> {
        ForwardingStore::finish(self, finish).await
    }

    async fn find_unfinished(&self, names: &[&str]) -> Result<Vec<Unfinished>, BoxError> {
        ForwardingStore::find_unfinished(self, names).await
    }

    async fn claim_rerun(&self, claim: ClaimRequest<'_>, term: u64) -> Result<bool, BoxError> {
        ForwardingStore::claim_rerun(self, claim, term).await
    }

    async fn last_instant(&self, name: &str) -> Result<Option<i64>, BoxError> {
        ForwardingStore::last_instant(self, name).await
    }

    async fn force_release(&self, name: &str, term: u64) -> Result<bool, BoxError> {
        ForwardingStore::force_release(self, name, term).await
    }

    async fn request_resign(&self, name: &str, term: u64) -> Result<bool, BoxError> {
        ForwardingStore::request_resign(self, name, term).await
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>, BoxError> {
        ForwardingStore::get(self, name).await
    }

    async fn list(&self, prefix: &str, limit: u32) -> Result<Vec<LeaseInfo>, BoxError> {
        ForwardingStore::list(self, prefix, limit).await
    }

    async fn now_ms(&self) -> Result<i64, BoxError> {
        ForwardingStore::now_ms(self).await
    }

    async fn migrate(&self) -> Result<(), BoxError> {
        ForwardingStore::migrate(self).await
    }

    fn classify(&self, error: &(dyn std::error::Error + 'static)) -> DbErrorKind {
        ForwardingStore::classify(self, error)
    }

    fn guard_statement(&self) -> Option<GuardStatement> {
        ForwardingStore::guard_statement(self)
    }

    fn timings(&self) -> Option<Timings> {
        ForwardingStore::timings(self)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;
    use crate::testing::Table;

    /// Counts `before` calls, refuses verification, and doubles every
    /// claim's term (to show an override is the wrapper's own method).
    #[derive(Debug)]
    struct Wrapper {
        inner: Arc<dyn LeaseStore>,
        before: AtomicU64,
    }

    #[async_trait]
    impl ForwardingStore for Wrapper {
        fn inner(&self) -> &dyn LeaseStore {
            &*self.inner
        }

        async fn before(&self, op: Op) -> Result<(), BoxError> {
            let _ = self.before.fetch_add(1, Ordering::SeqCst);
            match op {
                Op::Verify => Err("verification refused by the wrapper".into()),
                _ => Ok(()),
            }
        }

        async fn claim(&self, claim: ClaimRequest<'_>) -> Result<Option<u64>, BoxError> {
            Ok(self.inner.claim(claim).await?.map(|term| term * 2))
        }
    }

    fn request(name: &str) -> ClaimRequest<'_> {
        ClaimRequest {
            name,
            token: Token::new("h"),
            instance: "i",
            lease_ms: 15_000,
        }
    }

    #[tokio::test]
    async fn a_wrapper_changes_what_it_names_and_forwards_the_rest_through_before() {
        let inner: Arc<dyn LeaseStore> = Arc::new(Table::new());
        let wrapper = Wrapper {
            inner: inner.clone(),
            before: AtomicU64::new(0),
        };
        let store: &dyn LeaseStore = &wrapper;
        // The override: no hook, the wrapper's own answer.
        assert_eq!(store.claim(request("a")).await.unwrap(), Some(2));
        assert_eq!(wrapper.before.load(Ordering::SeqCst), 0);
        // Forwarded: through the hook, the inner store's answer.
        assert!(
            store
                .renew("a", Token::new("h"), 15_000)
                .await
                .unwrap()
                .is_some()
        );
        assert!(store.release("a", Token::new("h")).await.unwrap());
        assert_eq!(wrapper.before.load(Ordering::SeqCst), 2);
        // The hook's error fails the call before it reaches the inner store.
        let refused = store.verify("a", Token::new("h")).await.unwrap_err();
        assert_eq!(refused.to_string(), "verification refused by the wrapper");
        assert_eq!(inner.get("a").await.unwrap().map(|l| l.term), Some(1));
        assert_eq!(store.guard_statement(), inner.guard_statement());
    }
}
