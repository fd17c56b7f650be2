//! A store that forwards every call to another, through a hook: for counting
//! statements, making a database unreachable, or keeping something alive as
//! long as the store. A wrapper that changes what a call answers rather
//! than whether it runs implements [`lease_core::ForwardingStore`] itself.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use lease_core::{BoxError, ForwardingStore, LeaseStore, Op};

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

#[async_trait]
impl<I: Intercept> ForwardingStore for Intercepted<I> {
    fn inner(&self) -> &dyn LeaseStore {
        &*self.inner
    }

    async fn before(&self, op: Op) -> Result<(), BoxError> {
        self.hook.before(op).await
    }
}
