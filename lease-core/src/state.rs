//! The hold state, written down in one place.
//!
//! Every [`LeaseContext`](crate::LeaseContext) carries one [`HoldState`],
//! shared by its clones and kept by its [`Handle`](crate::Handle): the
//! [`Phase`] of the lease as the context knows it, the cause the context
//! ended with, the local deadline of a held lease and the context's token.
//! Every change goes through one transition function ([`Record::next`],
//! pure, and [`HoldState::apply`], which stores what it returns and only
//! then ends the tokens). So a loss is observable through
//! [`Handle::lost`](crate::Handle::lost), which reads the states its
//! contexts share with it, before the token ends: the token can only be
//! ended (but by its parent, or from outside) by `apply`, after the store.

use std::fmt;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::error::LostCause;

/// Why a [`LeaseContext`](crate::LeaseContext) ended: the cause the hold
/// state machine records.
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
    /// The holder was asked to resign
    /// ([`Leases::request_resign`](crate::Leases::request_resign)), and
    /// learnt of it with a renewal. Not a loss: the renewals go on while
    /// the work winds down, then the name is given back.
    Resigned,
}

impl fmt::Display for EndCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EndCause::Lost(cause) => write!(f, "lease lost: {cause}"),
            EndCause::ParentCancelled => f.write_str("parent cancelled"),
            EndCause::Stopped => f.write_str("renewals stopped"),
            EndCause::Resigned => f.write_str("asked to resign"),
        }
    }
}

/// Where a lease stands for the process holding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Claimed, and not ended: the work may act under it.
    Held,
    /// The parent ended (the process is shutting down), or the holder was
    /// asked to resign: the work winds down while the renewals go on. Not a
    /// loss.
    WindingDown,
    /// Known lost, and how. Final.
    Lost(LostCause),
    /// The renewals stopped ([`Holder::stop`](crate::Holder::stop)), or the
    /// context was ended so. Final.
    Stopped,
}

/// What happens to a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    /// The parent token of the held context ended.
    ParentEnded,
    /// The lease is known lost.
    Lose(LostCause),
    /// The renewals stopped.
    Stop,
    /// A renewal reported a request to resign.
    Resign,
}

impl Event {
    /// The event [`LeaseContext::end`](crate::LeaseContext::end) with
    /// `cause` stands for.
    pub(crate) fn ending(cause: EndCause) -> Self {
        match cause {
            EndCause::Lost(lost) => Event::Lose(lost),
            EndCause::ParentCancelled => Event::ParentEnded,
            EndCause::Stopped => Event::Stop,
            EndCause::Resigned => Event::Resign,
        }
    }
}

/// The phase, and the cause the context ended with: the first one, kept
/// when the phase moves on (a loss found while winding down leaves the
/// cause [`EndCause::ParentCancelled`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) phase: Phase,
    pub(crate) cause: Option<EndCause>,
}

impl Record {
    /// A lease just claimed.
    pub(crate) const HELD: Record = Record {
        phase: Phase::Held,
        cause: None,
    };

    /// The transition function: the record after `event`, or `None` when
    /// the event is refused in this phase (and changes nothing).
    ///
    /// - a loss is final: nothing follows it, a second loss included (the
    ///   first cause stays);
    /// - so is a stop;
    /// - winding down can still end in a loss (the renewals go on) or a
    ///   stop, keeping [`EndCause::ParentCancelled`] as the cause.
    pub(crate) fn next(self, event: Event) -> Option<Record> {
        let phase = match (self.phase, event) {
            (Phase::Held, Event::ParentEnded | Event::Resign) => Phase::WindingDown,
            (Phase::Held | Phase::WindingDown, Event::Lose(cause)) => Phase::Lost(cause),
            (Phase::Held | Phase::WindingDown, Event::Stop) => Phase::Stopped,
            (
                Phase::WindingDown | Phase::Lost(_) | Phase::Stopped,
                Event::ParentEnded | Event::Resign,
            )
            | (Phase::Lost(_) | Phase::Stopped, Event::Lose(_) | Event::Stop) => return None,
        };
        let cause = self.cause.unwrap_or(match event {
            Event::ParentEnded => EndCause::ParentCancelled,
            Event::Lose(cause) => EndCause::Lost(cause),
            Event::Stop => EndCause::Stopped,
            Event::Resign => EndCause::Resigned,
        });
        Some(Record {
            phase,
            cause: Some(cause),
        })
    }

    /// The cause of the loss, once the lease is known lost.
    pub(crate) fn lost_cause(self) -> Option<LostCause> {
        match self.phase {
            Phase::Lost(cause) => Some(cause),
            _ => None,
        }
    }
}

/// The state of one context's lease. See the module's documentation.
#[derive(Debug)]
pub(crate) struct HoldState {
    inner: Mutex<Inner>,
    /// The context's token: ended when the phase leaves [`Phase::Held`].
    token: CancellationToken,
    /// The parent token of a held context: its ending is
    /// [`Event::ParentEnded`], taken into the record whenever it is read.
    parent: Option<CancellationToken>,
    /// Cancelled on entering [`Phase::Lost`], whatever the cause the
    /// context ended with: what [`run`](crate::run) watches.
    lost: CancellationToken,
}

#[derive(Debug)]
struct Inner {
    record: Record,
    /// The local deadline of a held lease: the start of the last successful
    /// renewal (the claim, at first) plus the deadline.
    deadline: Option<Instant>,
}

impl HoldState {
    /// The state of a context ended by `token`; for a held one, a child of
    /// `parent`, with the local deadline `deadline`.
    pub(crate) fn new(
        token: CancellationToken,
        parent: Option<CancellationToken>,
        deadline: Option<Instant>,
    ) -> Self {
        HoldState {
            inner: Mutex::new(Inner {
                record: Record::HELD,
                deadline,
            }),
            token,
            parent,
            lost: CancellationToken::new(),
        }
    }

    /// Locks the record, the parent's ending taken into it.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let ended = self
            .parent
            .as_ref()
            .is_some_and(CancellationToken::is_cancelled);
        if let Some(next) = inner.record.next(Event::ParentEnded).filter(|_| ended) {
            inner.record = next;
        }
        inner
    }

    /// Applies `event`: stores the record [`Record::next`] gives, then (the
    /// lock released, the new record visible) cancels the lost token on
    /// entering [`Phase::Lost`] and the context's token on leaving
    /// [`Phase::Held`]. The only place in the crate these tokens are
    /// cancelled. Returns whether the event was taken.
    pub(crate) fn apply(&self, event: Event) -> bool {
        let (taken, phase) = {
            let mut inner = self.lock();
            let next = inner.record.next(event);
            if let Some(next) = next {
                inner.record = next;
            }
            (next.is_some(), inner.record.phase)
        };
        if matches!(phase, Phase::Lost(_)) {
            self.lost.cancel();
        }
        if phase != Phase::Held {
            self.token.cancel();
        }
        taken
    }

    /// The context's token.
    pub(crate) fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// The phase and cause.
    pub(crate) fn record(&self) -> Record {
        self.lock().record
    }

    /// Whether the lease is known lost.
    pub(crate) fn is_lost(&self) -> bool {
        self.record().lost_cause().is_some()
    }

    /// Resolves once the lease is known lost.
    pub(crate) fn lost(&self) -> WaitForCancellationFuture<'_> {
        self.lost.cancelled()
    }

    /// The local deadline of a held lease.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.lock().deadline
    }

    /// Moves the local deadline (after each successful renewal).
    pub(crate) fn set_deadline(&self, deadline: Instant) {
        self.lock().deadline = Some(deadline);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    const NOT_HOLDER: LostCause = LostCause::NotHolder;
    const DEADLINE: LostCause = LostCause::DeadlineExceeded;

    fn record(phase: Phase, cause: Option<EndCause>) -> Record {
        Record { phase, cause }
    }

    #[test]
    fn allowed_transitions_move_the_phase_and_keep_the_first_cause() {
        let held = Record::HELD;
        let winding = record(Phase::WindingDown, Some(EndCause::ParentCancelled));
        let stopped = record(Phase::Stopped, Some(EndCause::Stopped));
        let cases = [
            (held, Event::ParentEnded, winding),
            (
                held,
                Event::Lose(NOT_HOLDER),
                record(Phase::Lost(NOT_HOLDER), Some(EndCause::Lost(NOT_HOLDER))),
            ),
            (held, Event::Stop, stopped),
            // Winding down: a loss found by the renewals that go on, or the
            // stop, keep the parent as the cause.
            (
                winding,
                Event::Lose(DEADLINE),
                record(Phase::Lost(DEADLINE), Some(EndCause::ParentCancelled)),
            ),
            (
                winding,
                Event::Stop,
                record(Phase::Stopped, Some(EndCause::ParentCancelled)),
            ),
            // Asked to resign: winding down, not a loss; the renewals go
            // on, and can still find it lost.
            (
                held,
                Event::Resign,
                record(Phase::WindingDown, Some(EndCause::Resigned)),
            ),
            (
                record(Phase::WindingDown, Some(EndCause::Resigned)),
                Event::Lose(NOT_HOLDER),
                record(Phase::Lost(NOT_HOLDER), Some(EndCause::Resigned)),
            ),
            // A context ended from outside (a cause-less cancel) then lost.
            (
                held,
                Event::Lose(DEADLINE),
                record(Phase::Lost(DEADLINE), Some(EndCause::Lost(DEADLINE))),
            ),
        ];
        for (i, (from, event, to)) in cases.into_iter().enumerate() {
            assert_eq!(
                from.next(event),
                Some(to),
                "case {i}: {from:?} on {event:?}"
            );
        }
    }

    #[test]
    fn refused_transitions_change_nothing() {
        let lost = record(Phase::Lost(NOT_HOLDER), Some(EndCause::Lost(NOT_HOLDER)));
        let winding = record(Phase::WindingDown, Some(EndCause::ParentCancelled));
        let stopped = record(Phase::Stopped, Some(EndCause::Stopped));
        let cases = [
            // A loss is final: the first cause stays.
            (lost, Event::Lose(DEADLINE)),
            (lost, Event::Stop),
            (lost, Event::ParentEnded),
            // So is a stop.
            (stopped, Event::Lose(NOT_HOLDER)),
            (stopped, Event::Stop),
            (stopped, Event::ParentEnded),
            // Winding down once.
            (winding, Event::ParentEnded),
            (winding, Event::Resign),
            (lost, Event::Resign),
            (stopped, Event::Resign),
        ];
        for (i, (from, event)) in cases.into_iter().enumerate() {
            assert_eq!(from.next(event), None, "case {i}: {from:?} on {event:?}");
        }
    }

    #[test]
    fn a_loss_is_stored_before_the_token_ends() {
        let state = Arc::new(HoldState::new(CancellationToken::new(), None, None));
        // Whoever sees the token ended sees the loss: the token is cancelled
        // by `apply` only, after the store.
        let seen = Arc::new(Mutex::new(None));
        let (watcher, s) = (seen.clone(), state.clone());
        let watch = std::thread::spawn(move || {
            while !s.token().is_cancelled() {
                std::hint::spin_loop();
            }
            *watcher.lock().unwrap() = Some(s.is_lost());
        });
        assert!(state.apply(Event::Lose(NOT_HOLDER)));
        watch.join().unwrap();
        assert_eq!(*seen.lock().unwrap(), Some(true));
        assert!(state.lost.is_cancelled());
        assert!(!state.apply(Event::Stop), "nothing follows a loss");
        assert_eq!(state.record().cause, Some(EndCause::Lost(NOT_HOLDER)));
    }

    #[test]
    fn the_parents_ending_is_taken_in_on_reading() {
        let parent = CancellationToken::new();
        let state = HoldState::new(parent.child_token(), Some(parent.clone()), None);
        assert_eq!(state.record(), Record::HELD);
        parent.cancel();
        assert_eq!(
            state.record(),
            record(Phase::WindingDown, Some(EndCause::ParentCancelled))
        );
        assert!(!state.is_lost());
        assert!(!state.lost.is_cancelled());
        assert!(state.apply(Event::Lose(DEADLINE)));
        assert!(state.is_lost());
        assert!(state.lost.is_cancelled());
        assert_eq!(state.record().cause, Some(EndCause::ParentCancelled));
    }

    #[test]
    fn a_stop_ends_the_token_but_is_no_loss() {
        let state = HoldState::new(CancellationToken::new(), None, None);
        assert!(state.apply(Event::Stop));
        assert!(state.token().is_cancelled());
        assert!(!state.lost.is_cancelled());
        assert!(!state.apply(Event::Lose(NOT_HOLDER)), "a stop is final");
        assert!(!state.is_lost());
    }
}
