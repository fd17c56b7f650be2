//! The hold state of one handle, written down in one place.
//!
//! A [`Handle`](crate::Handle) carries one [`LeaseState`], shared by its
//! clones and by every [`LeaseContext`](crate::LeaseContext) on it: the
//! [`Phase`] of the lease, the cause its contexts ended with, the local
//! deadline of a held lease, and the tokens that end when the phase leaves
//! [`Phase::Held`]. Every change goes through one transition function
//! ([`Record::next`], pure, and [`LeaseState::apply`], which stores what it
//! returns and only then ends the tokens): so a loss is observable through
//! [`Handle::lost`](crate::Handle::lost) and
//! [`LeaseContext::lost_cause`](crate::LeaseContext) before any token ends,
//! because the tokens can only be cancelled by `apply`, after the store.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::context::EndCause;
use crate::error::LostCause;

/// Where a lease stands for the process holding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Claimed, and not ended: the work may act under it.
    Held,
    /// The parent ended (the process is shutting down): the work winds down
    /// while the renewals go on. Not a loss.
    WindingDown,
    /// Known lost, and how. Final.
    Lost(LostCause),
    /// The renewals stopped ([`Holder::stop`](crate::Holder::stop)). Final,
    /// unless the handle is held again.
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
    /// The handle is held (again): a context attached to it.
    Hold,
}

impl Event {
    /// The event [`LeaseContext::end`](crate::LeaseContext::end) with
    /// `cause` stands for.
    pub(crate) fn ending(cause: EndCause) -> Self {
        match cause {
            EndCause::Lost(lost) => Event::Lose(lost),
            EndCause::ParentCancelled => Event::ParentEnded,
            EndCause::Stopped => Event::Stop,
        }
    }
}

/// The phase, and the cause the contexts ended with: the first one, kept
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
    /// - stopping is final but for holding again, which starts afresh;
    /// - winding down can still end in a loss (the renewals go on) or a
    ///   stop, keeping [`EndCause::ParentCancelled`] as the cause.
    pub(crate) fn next(self, event: Event) -> Option<Record> {
        let phase = match (self.phase, event) {
            (Phase::Held, Event::Hold) => return Some(self),
            (Phase::Stopped, Event::Hold) => return Some(Record::HELD),
            (Phase::Held, Event::ParentEnded) => Phase::WindingDown,
            (Phase::Held | Phase::WindingDown, Event::Lose(cause)) => Phase::Lost(cause),
            (Phase::Held | Phase::WindingDown, Event::Stop) => Phase::Stopped,
            (Phase::WindingDown | Phase::Lost(_), Event::Hold)
            | (Phase::WindingDown | Phase::Lost(_) | Phase::Stopped, Event::ParentEnded)
            | (Phase::Lost(_) | Phase::Stopped, Event::Lose(_) | Event::Stop) => return None,
        };
        let cause = self.cause.or(match event {
            Event::ParentEnded => Some(EndCause::ParentCancelled),
            Event::Lose(cause) => Some(EndCause::Lost(cause)),
            Event::Stop => Some(EndCause::Stopped),
            Event::Hold => None,
        });
        Some(Record { phase, cause })
    }

    /// The cause of the loss, once the lease is known lost.
    pub(crate) fn lost_cause(self) -> Option<LostCause> {
        match self.phase {
            Phase::Lost(cause) => Some(cause),
            _ => None,
        }
    }
}

/// The state of one handle's lease. See the module's documentation.
#[derive(Debug)]
pub(crate) struct LeaseState {
    inner: Mutex<Inner>,
    /// Cancelled on entering [`Phase::Lost`], whatever the cause the
    /// contexts ended with: what [`run`](crate::run) watches.
    lost: CancellationToken,
}

#[derive(Debug)]
struct Inner {
    record: Record,
    /// The parent token of the held context: its ending is
    /// [`Event::ParentEnded`], observed whenever the state is read.
    parent: Option<CancellationToken>,
    /// The local deadline of a held lease: the start of the last successful
    /// renewal (the claim, at first) plus the deadline.
    deadline: Option<Instant>,
    /// The tokens of the contexts on the handle: ended when the phase leaves
    /// [`Phase::Held`]. Weak, so that a context dropped unended leaves
    /// nothing behind but a dead entry, swept at the next attach.
    tokens: Vec<Weak<CancellationToken>>,
}

impl Default for LeaseState {
    fn default() -> Self {
        LeaseState {
            inner: Mutex::new(Inner {
                record: Record::HELD,
                parent: None,
                deadline: None,
                tokens: Vec::new(),
            }),
            lost: CancellationToken::new(),
        }
    }
}

impl LeaseState {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies `event`: stores the record [`Record::next`] gives, then (the
    /// lock released, the new record visible) cancels the lost token on
    /// entering [`Phase::Lost`] and every context's token on leaving
    /// [`Phase::Held`]. The only place these tokens are cancelled. Returns
    /// whether the event was taken.
    pub(crate) fn apply(&self, event: Event) -> bool {
        let (taken, phase, tokens) = {
            let mut inner = self.lock();
            inner.observe_parent();
            let next = inner.record.next(event);
            if let Some(next) = next {
                inner.record = next;
            }
            let tokens: Vec<_> = match inner.record.phase {
                Phase::Held => Vec::new(),
                _ => inner.tokens.iter().filter_map(Weak::upgrade).collect(),
            };
            (next.is_some(), inner.record.phase, tokens)
        };
        if matches!(phase, Phase::Lost(_)) {
            self.lost.cancel();
        }
        for token in tokens {
            token.cancel();
        }
        taken
    }

    /// Attaches a context's token, holding the lease ([`Event::Hold`]) with
    /// `parent` when it is held by [`Handle::hold`](crate::Handle::hold). On
    /// a handle whose lease is lost, or winding down, the token ends at once.
    pub(crate) fn attach(
        &self,
        token: &Arc<CancellationToken>,
        parent: Option<&CancellationToken>,
        deadline: Option<Instant>,
    ) {
        {
            let mut inner = self.lock();
            inner.observe_parent();
            let was = inner.record.phase;
            if let Some(next) = inner.record.next(Event::Hold) {
                inner.record = next;
                // Held afresh, or by `hold`: its parent and deadline.
                if parent.is_some() || was != Phase::Held {
                    inner.parent = parent.cloned();
                    inner.deadline = deadline;
                }
            }
            inner
                .tokens
                .retain(|t| t.upgrade().is_some_and(|t| !t.is_cancelled()));
            inner.tokens.push(Arc::downgrade(token));
        }
        // Ends the token at once when the lease is not held.
        let _ = self.apply(Event::Hold);
    }

    /// The phase and cause, the parent's ending observed.
    pub(crate) fn record(&self) -> Record {
        let mut inner = self.lock();
        inner.observe_parent();
        inner.record
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

impl Inner {
    /// Takes the parent's ending into the record, once it has happened.
    fn observe_parent(&mut self) {
        let ended = self
            .parent
            .as_ref()
            .is_some_and(CancellationToken::is_cancelled);
        if let Some(next) = self.record.next(Event::ParentEnded).filter(|_| ended) {
            self.record = next;
        }
    }
}

#[cfg(test)]
mod tests {
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
            (held, Event::Hold, held),
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
            // Held again after a stop: afresh.
            (stopped, Event::Hold, held),
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
            (lost, Event::Hold),
            // A stop is final but for holding again.
            (stopped, Event::Lose(NOT_HOLDER)),
            (stopped, Event::Stop),
            (stopped, Event::ParentEnded),
            // Winding down once; a lease winding down is not held afresh.
            (winding, Event::ParentEnded),
            (winding, Event::Hold),
        ];
        for (i, (from, event)) in cases.into_iter().enumerate() {
            assert_eq!(from.next(event), None, "case {i}: {from:?} on {event:?}");
        }
    }

    #[test]
    fn a_loss_is_stored_before_any_token_ends() {
        let state = Arc::new(LeaseState::default());
        let token = Arc::new(CancellationToken::new());
        state.attach(&token, None, None);
        assert!(!token.is_cancelled());
        // Whoever sees the token ended sees the loss: the token is cancelled
        // by `apply` only, after the store.
        let seen = Arc::new(Mutex::new(None));
        let (watcher, s, t) = (seen.clone(), state.clone(), (*token).clone());
        let watch = std::thread::spawn(move || {
            while !t.is_cancelled() {
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
    fn the_parents_ending_is_observed_on_reading() {
        let state = LeaseState::default();
        let parent = CancellationToken::new();
        let token = Arc::new(parent.child_token());
        state.attach(&token, Some(&parent), None);
        assert_eq!(state.record(), Record::HELD);
        parent.cancel();
        assert_eq!(
            state.record(),
            record(Phase::WindingDown, Some(EndCause::ParentCancelled))
        );
        assert!(!state.is_lost());
        assert!(state.apply(Event::Lose(DEADLINE)));
        assert!(state.is_lost());
        assert_eq!(state.record().cause, Some(EndCause::ParentCancelled));
    }

    #[test]
    fn a_context_attached_to_a_lost_lease_ends_at_once() {
        let state = LeaseState::default();
        let first = Arc::new(CancellationToken::new());
        state.attach(&first, None, None);
        assert!(state.apply(Event::Lose(NOT_HOLDER)));
        let second = Arc::new(CancellationToken::new());
        state.attach(&second, None, None);
        assert!(second.is_cancelled());
        assert!(state.is_lost());
    }

    #[test]
    fn a_lease_held_again_after_a_stop_starts_afresh() {
        let state = LeaseState::default();
        let first = Arc::new(CancellationToken::new());
        state.attach(&first, None, None);
        assert!(state.apply(Event::Stop));
        assert!(first.is_cancelled());
        let second = Arc::new(CancellationToken::new());
        state.attach(&second, None, None);
        assert!(!second.is_cancelled());
        assert_eq!(state.record(), Record::HELD);
    }

    #[test]
    fn a_context_dropped_unended_is_swept_and_never_ended() {
        let state = LeaseState::default();
        for _ in 0..100 {
            let dropped = Arc::new(CancellationToken::new());
            state.attach(&dropped, None, None);
        }
        let kept = Arc::new(CancellationToken::new());
        state.attach(&kept, None, None);
        assert_eq!(
            state.lock().tokens.len(),
            1,
            "the dropped contexts are swept"
        );
        assert!(state.apply(Event::Stop));
        assert!(kept.is_cancelled());
    }
}
