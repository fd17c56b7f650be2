//! The lease context: a handle and the cancellation that ends the work under it.

use std::fmt;
use std::sync::{Arc, OnceLock};

use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::error::LostCause;
use crate::leases::Handle;

/// Why a [`LeaseContext`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EndCause {
    /// The lease is lost: the work must stop, and has the grace to do so.
    Lost(LostCause),
    /// The parent was cancelled (the process is shutting down). Not a loss:
    /// the renewals go on while the work winds down.
    ParentCancelled,
    /// The holder stopped the renewals.
    Stopped,
}

impl fmt::Display for EndCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EndCause::Lost(cause) => write!(f, "lease lost: {cause}"),
            EndCause::ParentCancelled => f.write_str("parent cancelled"),
            EndCause::Stopped => f.write_str("renewals stopped"),
        }
    }
}

/// The context work under a lease runs on: the [`Handle`] it runs under, and
/// a cancellation token that ends when the work must stop, with its
/// [`EndCause`].
///
/// It is the Rust form of the Go package's `WithHandle` / `FromContext` /
/// `TermFromContext`: the work receives it, reads the handle and the term
/// from it, and passes it to the guarded transactions of the backends, which
/// verify the lease first and end when the context ends.
///
/// Cheap to clone; clones share the token and the cause.
#[derive(Clone)]
pub struct LeaseContext {
    handle: Handle,
    cancel: CancellationToken,
    cause: Arc<OnceLock<EndCause>>,
}

impl fmt::Debug for LeaseContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseContext")
            .field("handle", &self.handle)
            .field("cancelled", &self.cancel.is_cancelled())
            .field("cause", &self.cause())
            .finish()
    }
}

impl LeaseContext {
    /// A context for `handle` that ends when `cancel` is cancelled. Holding a
    /// lease returns one whose token ends at the loss; this constructor is
    /// for a short lock held without renewals, or for tests.
    pub fn new(handle: Handle, cancel: CancellationToken) -> Self {
        LeaseContext {
            handle,
            cancel,
            cause: Arc::new(OnceLock::new()),
        }
    }

    /// The handle the work runs under.
    #[must_use]
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// The term of the lease the work runs under.
    #[must_use]
    pub fn term(&self) -> u64 {
        self.handle.term()
    }

    /// The token that is cancelled when the work must stop.
    #[must_use]
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Waits until the context ends.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.cancel.cancelled()
    }

    /// Whether the context has ended.
    #[must_use]
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Why the context ended, once it has and the cause is known. A token
    /// cancelled from outside (not through [`end`](LeaseContext::end)) has
    /// no cause.
    #[must_use]
    pub fn cause(&self) -> Option<EndCause> {
        self.cause.get().copied()
    }

    /// Ends the context with `cause`, unless it already has a cause. For a
    /// loss, marks the handle lost before the token ends.
    pub fn end(&self, cause: EndCause) {
        if let EndCause::Lost(_) = cause {
            self.handle.mark_lost();
        }
        let _ = self.cause.set(cause);
        self.cancel.cancel();
    }
}
