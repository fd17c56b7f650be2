//! The lease context: a handle and the cancellation that ends the work under it.

use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use tokio::time::Instant;

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
/// [`Handle::hold`] returns one whose token is a child of the parent token
/// and ends at the loss; [`run`](crate::run) hands a clone to the work.
///
/// Cheap to clone; clones share the token and the cause.
#[derive(Clone)]
pub struct LeaseContext {
    handle: Handle,
    cancel: CancellationToken,
    shared: Arc<Shared>,
}

struct Shared {
    /// The cause recorded by [`LeaseContext::end`].
    cause: OnceLock<EndCause>,
    /// The parent token of a held context: a token ended by its parent has
    /// [`EndCause::ParentCancelled`] as its cause without anyone recording it.
    parent: Option<CancellationToken>,
    /// The local deadline of a held context: the start of the last
    /// successful renewal (the claim, at first) plus the deadline. Past it,
    /// [`LeaseContext::is_cancelled`] answers true even if the renewal task
    /// has not run yet to end the context (a starved runtime, a process
    /// stopped and resumed).
    deadline: Mutex<Option<Instant>>,
    /// Cancelled when the handle is known lost, whether or not the token had
    /// already ended for another reason: what [`run`](crate::run) watches.
    lost: CancellationToken,
    /// How the lease was lost, once it is.
    lost_cause: OnceLock<LostCause>,
    /// The holder's span: name, term and instance.
    span: tracing::Span,
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
        Self::build(handle, cancel, None)
    }

    /// A context for a held lease: its token is a child of `parent`.
    pub(crate) fn held(handle: Handle, parent: &CancellationToken) -> Self {
        Self::build(handle, parent.child_token(), Some(parent.clone()))
    }

    fn build(handle: Handle, cancel: CancellationToken, parent: Option<CancellationToken>) -> Self {
        // At ERROR level so that the fields reach every event logged in it,
        // whatever level a subscriber filters at: a warning without the
        // lease's name would say little.
        let span = tracing::error_span!(
            "lease",
            name = ?handle.name(),
            term = handle.term(),
            instance = %handle.leases().instance(),
        );
        LeaseContext {
            handle,
            cancel,
            shared: Arc::new(Shared {
                cause: OnceLock::new(),
                parent,
                deadline: Mutex::new(None),
                lost: CancellationToken::new(),
                lost_cause: OnceLock::new(),
                span,
            }),
        }
    }

    /// The handle the work runs under.
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

    /// Whether the context has ended: check it right before each step that
    /// acts under the lease.
    ///
    /// For a held context this also reads the holder's local deadline on
    /// the clock: past it, the context ends here and now (lost,
    /// [`LostCause::DeadlineExceeded`]) even if the renewal task has not run
    /// yet to end it, as when the runtime is starved of CPU or the process
    /// was stopped and resumed. [`cancelled`](Self::cancelled) resolves when
    /// the renewal task ends the context, at the deadline at the latest.
    #[must_use]
    pub fn is_cancelled(&self) -> bool {
        if self.cancel.is_cancelled() {
            return true;
        }
        let past = self
            .deadline()
            .is_some_and(|deadline| Instant::now() >= deadline);
        if past {
            self.end(EndCause::Lost(LostCause::DeadlineExceeded));
        }
        past
    }

    /// The local deadline of a held context, `None` for another.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        *self
            .shared
            .deadline
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Moves the local deadline of a held context (after each successful
    /// renewal).
    pub(crate) fn set_deadline(&self, deadline: Instant) {
        *self
            .shared
            .deadline
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(deadline);
    }

    /// Why the context ended, once it has and the cause is known: the first
    /// cause it ended with. A held context ended by its parent reports
    /// [`EndCause::ParentCancelled`], and keeps reporting it if the lease is
    /// lost afterwards (see [`Handle::lost`] for that). A token cancelled
    /// from outside (not through [`end`](LeaseContext::end) nor a parent) has
    /// no cause.
    #[must_use]
    pub fn cause(&self) -> Option<EndCause> {
        self.shared
            .cause
            .get()
            .copied()
            .or_else(|| self.ended_by_parent().then_some(EndCause::ParentCancelled))
    }

    /// Ends the context with `cause`, unless it already has a cause. For a
    /// loss, marks the handle lost before the token ends, and tells
    /// [`run`](crate::run) even when the context had already ended for
    /// another reason.
    pub fn end(&self, cause: EndCause) {
        if let EndCause::Lost(lost) = cause {
            self.handle.mark_lost();
            let _ = self.shared.lost_cause.set(lost);
            self.shared.lost.cancel();
        }
        if self.ended_by_parent() {
            let _ = self.shared.cause.set(EndCause::ParentCancelled);
        }
        let _ = self.shared.cause.set(cause);
        self.cancel.cancel();
    }

    fn ended_by_parent(&self) -> bool {
        self.cancel.is_cancelled()
            && self
                .shared
                .parent
                .as_ref()
                .is_some_and(CancellationToken::is_cancelled)
    }

    /// Resolves once the lease is known lost, through this context.
    pub(crate) fn lost(&self) -> WaitForCancellationFuture<'_> {
        self.shared.lost.cancelled()
    }

    /// How the lease was lost, once it is known lost through this context.
    pub(crate) fn lost_cause(&self) -> Option<LostCause> {
        self.shared.lost_cause.get().copied()
    }

    /// The holder's span, with the lease's name, term and instance.
    pub(crate) fn span(&self) -> &tracing::Span {
        &self.shared.span
    }
}
