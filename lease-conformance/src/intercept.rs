//! A store that forwards every call to another, through a hook: for counting
//! statements or making a database unreachable. A wrapper that changes what
//! a call answers rather than whether it runs implements
//! [`lease_core::ForwardingStore`] itself. (What cleans up after a case's
//! store is the guard its factory returns beside it: see
//! [`factory`](crate::factory).)

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

/// A store forwarding every call to `inner` after its hook's
/// [`before`](Intercept::before).
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU64, Ordering};
///
/// use lease_conformance::intercept::{Intercept, Intercepted};
/// use lease_conformance::reference::MemoryStore;
/// use lease_core::{BoxError, Op};
///
/// /// Counts the statements sent.
/// #[derive(Debug, Default)]
/// struct Count(AtomicU64);
///
/// #[async_trait::async_trait]
/// impl Intercept for Count {
///     async fn before(&self, _op: Op) -> Result<(), BoxError> {
///         self.0.fetch_add(1, Ordering::Relaxed);
///         Ok(())
///     }
/// }
///
/// let store = Intercepted::new(Arc::new(MemoryStore::new()), Count::default());
/// assert_eq!(store.hook().0.load(Ordering::Relaxed), 0);
/// ```
pub struct Intercepted<I> {
    inner: Arc<dyn LeaseStore>,
    hook: I,
}

impl<I: fmt::Debug> fmt::Debug for Intercepted<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Intercepted")
            .field("inner", &self.inner)
            .field("hook", &self.hook)
            .finish()
    }
}

impl<I: Intercept> Intercepted<I> {
    /// Forwards to `inner` through `hook`.
    pub fn new(inner: Arc<dyn LeaseStore>, hook: I) -> Self {
        Intercepted { inner, hook }
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
