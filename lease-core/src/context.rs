//! The lease context: a handle and the cancellation that ends the work under it.

use std::fmt;
use std::sync::Arc;

use tokio::time::Instant;

use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::error::LostCause;
use crate::handle::Handle;
use crate::state::{EndCause, Event, HoldState};

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
/// Cheap to clone; clones share the token and the cause: one state, which
/// the handle reads to tell whether its lease is [lost](Handle::lost).
#[derive(Clone)]
pub struct LeaseContext {
    handle: Handle,
    /// The phase, cause, deadline and token, shared with the handle.
    state: Arc<HoldState>,
    /// The holder's span: name, term and instance.
    span: tracing::Span,
}

impl fmt::Debug for LeaseContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseContext")
            .field("handle", &self.handle)
            .field("cancelled", &self.state.token().is_cancelled())
            .field("cause", &self.cause())
            .finish()
    }
}

impl LeaseContext {
    /// A context for `handle` that ends when `cancel` is cancelled: for a
    /// short lock held without renewals, its work run in guarded
    /// transactions on the context. To keep the lease, [`Handle::hold`] it
    /// instead, which returns a context whose token also ends at the loss.
    ///
    /// ```
    /// # async fn example(leases: lease_core::Leases) -> lease_core::Result<()> {
    /// use lease_core::{CancellationToken, LeaseContext};
    ///
    /// if let Some(handle) = leases.claim("lock:migration").await? {
    ///     let ctx = LeaseContext::new(handle.clone(), CancellationToken::new());
    ///     assert_eq!(ctx.term(), handle.term());
    ///     // ... guarded transactions on `ctx` ...
    ///     handle.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn new(handle: Handle, cancel: CancellationToken) -> Self {
        Self::build(handle, HoldState::new(cancel, None, None))
    }

    /// A context for a held lease: its token is a child of `parent`, and
    /// its local deadline `deadline`.
    pub(crate) fn held(handle: Handle, parent: &CancellationToken, deadline: Instant) -> Self {
        let state = HoldState::new(parent.child_token(), Some(parent.clone()), Some(deadline));
        Self::build(handle, state)
    }

    fn build(handle: Handle, state: HoldState) -> Self {
        let state = Arc::new(state);
        handle.keep(&state);
        // At ERROR level so that the fields reach every event logged in it,
        // whatever level a subscriber filters at: a warning without the
        // lease's name would say little.
        let span = tracing::error_span!(
            "lease",
            name = ?handle.name(),
            term = handle.term(),
            instance = ?handle.leases().instance(),
        );
        LeaseContext {
            handle,
            state,
            span,
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
        self.state.token()
    }

    /// Waits until the context ends.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.state.token().cancelled()
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
        if self.state.token().is_cancelled() {
            return true;
        }
        let past = self
            .deadline()
            .is_some_and(|deadline| Instant::now() >= deadline);
        if past {
            let _ = self.state().apply(Event::Lose(LostCause::DeadlineExceeded));
        }
        past
    }

    fn state(&self) -> &HoldState {
        &self.state
    }

    /// The local deadline of a held context, `None` for another.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.state().deadline()
    }

    /// Moves the local deadline of a held context (after each successful
    /// renewal).
    pub(crate) fn set_deadline(&self, deadline: Instant) {
        self.state().set_deadline(deadline);
    }

    /// Why the context ended, once it has and the cause is known: the first
    /// cause it ended with. A held context ended by its parent reports
    /// [`EndCause::ParentCancelled`], and keeps reporting it if the lease is
    /// lost afterwards (see [`Handle::lost`] for that). A token cancelled
    /// from outside (not through the lease's end nor a parent) has no cause.
    #[must_use]
    pub fn cause(&self) -> Option<EndCause> {
        self.state().record().cause
    }

    /// Ends the context with `cause`, unless it already has a cause. For a
    /// loss, marks the handle lost before the token ends, and tells
    /// [`run`](crate::run) even when the context had already ended for
    /// another reason.
    ///
    /// What the renewals do when the lease is lost or they stop; public for
    /// the tests of the backends' guarded transactions only, which end a
    /// context in the middle of one. Not part of the API.
    #[doc(hidden)]
    pub fn end(&self, cause: EndCause) {
        let _ = self.state().apply(Event::ending(cause));
    }

    /// Resolves once the lease is known lost, through this context.
    pub(crate) fn lost(&self) -> WaitForCancellationFuture<'_> {
        self.state().lost()
    }

    /// How the lease was lost, once it is known lost.
    pub(crate) fn lost_cause(&self) -> Option<LostCause> {
        self.state().record().lost_cause()
    }

    /// The holder's span, with the lease's name, term and instance.
    pub(crate) fn span(&self) -> &tracing::Span {
        &self.span
    }
}
