//! A store that forwards every call to another, through a hook: for counting
//! statements, making a database unreachable, or keeping something alive as
//! long as the store, without writing the eleven forwarding methods again.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use lease_core::{
    BoxError, ClaimRequest, DbErrorKind, Finished, LeaseInfo, LeaseStore, Op, SlotClaim,
    UnfinishedRow,
};

/// What an [`Intercepted`] store does before each call it forwards.
#[async_trait]
pub trait Intercept: Send + Sync + fmt::Debug + 'static {
    /// Runs before the protocol statement `op` is forwarded. An error fails
    /// the call without forwarding it; a future that never completes holds
    /// the call, as a database that no longer answers would.
    async fn before(&self, op: Op) -> Result<(), BoxError>;
}

/// Forwards nothing extra: an [`Intercepted`] store with this hook only
/// keeps its [`kept`](Intercepted::keeping) value alive.
#[derive(Debug, Clone, Copy, Default)]
pub struct PassThrough;

#[async_trait]
impl Intercept for PassThrough {
    async fn before(&self, _op: Op) -> Result<(), BoxError> {
        Ok(())
    }
}

/// A store forwarding every call to `inner` after its hook's
/// [`before`](Intercept::before).
///
/// ```
/// use std::sync::Arc;
/// use lease_conformance::intercept::{Intercepted, PassThrough};
/// use lease_conformance::reference::MemoryStore;
///
/// // A store that owns a value (a temporary directory, say) for its lifetime.
/// let store = Intercepted::new(Arc::new(MemoryStore::new()), PassThrough).keeping("anything");
/// # let _ = store;
/// ```
pub struct Intercepted<I> {
    inner: Arc<dyn LeaseStore>,
    hook: I,
    kept: Option<Box<dyn Any + Send + Sync>>,
}

impl<I: fmt::Debug> fmt::Debug for Intercepted<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Intercepted")
            .field("inner", &self.inner)
            .field("hook", &self.hook)
            .finish_non_exhaustive()
    }
}

impl<I: Intercept> Intercepted<I> {
    /// Forwards to `inner` through `hook`.
    pub fn new(inner: Arc<dyn LeaseStore>, hook: I) -> Self {
        Intercepted {
            inner,
            hook,
            kept: None,
        }
    }

    /// The same store, keeping `value` alive for as long as it lives.
    #[must_use]
    pub fn keeping(mut self, value: impl Any + Send + Sync) -> Self {
        self.kept = Some(Box::new(value));
        self
    }

    /// The hook.
    pub fn hook(&self) -> &I {
        &self.hook
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl<I: Intercept> LeaseStore for Intercepted<I> {
    async fn claim(&self, claim: ClaimRequest<'_>) -> Result<Option<u64>, BoxError> {
        self.hook.before(Op::Claim).await?;
        self.inner.claim(claim).await
    }

    async fn renew(
        &self,
        name: &str,
        holder: &str,
        lease_ms: i64,
    ) -> Result<Option<i64>, BoxError> {
        self.hook.before(Op::Renew).await?;
        self.inner.renew(name, holder, lease_ms).await
    }

    async fn renew_many(
        &self,
        leases: &[(&str, &str)],
        lease_ms: i64,
    ) -> Result<Vec<Option<i64>>, BoxError> {
        self.hook.before(Op::Renew).await?;
        self.inner.renew_many(leases, lease_ms).await
    }

    async fn verify(&self, name: &str, holder: &str) -> Result<Option<u64>, BoxError> {
        self.hook.before(Op::Verify).await?;
        self.inner.verify(name, holder).await
    }

    async fn release(&self, name: &str, holder: &str) -> Result<bool, BoxError> {
        self.hook.before(Op::Release).await?;
        self.inner.release(name, holder).await
    }

    async fn claim_slot(
        &self,
        claim: ClaimRequest<'_>,
        slot_ms: i64,
    ) -> Result<SlotClaim, BoxError> {
        self.hook.before(Op::ClaimSlot).await?;
        self.inner.claim_slot(claim, slot_ms).await
    }

    async fn finish(
        &self,
        name: &str,
        holder: Option<&str>,
        slot_ms: i64,
        passed_ms: i64,
    ) -> Result<Finished, BoxError> {
        self.hook.before(Op::Finish).await?;
        self.inner.finish(name, holder, slot_ms, passed_ms).await
    }

    async fn find_unfinished(&self, names: &[&str]) -> Result<Vec<UnfinishedRow>, BoxError> {
        self.hook.before(Op::FindUnfinished).await?;
        self.inner.find_unfinished(names).await
    }

    async fn claim_rerun(&self, claim: ClaimRequest<'_>, term: u64) -> Result<bool, BoxError> {
        self.hook.before(Op::ClaimRerun).await?;
        self.inner.claim_rerun(claim, term).await
    }

    async fn last_slot(&self, name: &str) -> Result<Option<i64>, BoxError> {
        self.hook.before(Op::LastSlot).await?;
        self.inner.last_slot(name).await
    }

    async fn force_release(&self, name: &str, term: u64) -> Result<bool, BoxError> {
        self.hook.before(Op::ForceRelease).await?;
        self.inner.force_release(name, term).await
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>, BoxError> {
        self.hook.before(Op::Get).await?;
        self.inner.get(name).await
    }

    async fn list(&self, prefix: &str, limit: u32) -> Result<Vec<LeaseInfo>, BoxError> {
        self.hook.before(Op::List).await?;
        self.inner.list(prefix, limit).await
    }

    async fn now_ms(&self) -> Result<i64, BoxError> {
        self.hook.before(Op::Now).await?;
        self.inner.now_ms().await
    }

    async fn migrate(&self) -> Result<(), BoxError> {
        self.hook.before(Op::Migrate).await?;
        self.inner.migrate().await
    }

    fn classify(&self, error: &(dyn std::error::Error + 'static)) -> DbErrorKind {
        self.inner.classify(error)
    }
    fn guard_statement(&self) -> Option<lease_core::GuardStatement> {
        self.inner.guard_statement()
    }
}
