//! A claimed lease: [`Handle`].

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::context::LeaseContext;
use crate::error::{Error, LostCause, Op, Result};
use crate::guard_statement::{GuardParams, GuardStatement};
use crate::hold::Holder;
use crate::leases::{Leases, bounded};
use crate::state::HoldState;
use crate::store::{FinishRequest, Finished, Renewed, Unfinished};
use crate::time::UtcMillis;
use crate::token::Token;

/// A claimed lease: the proof of holding a name from the claim until the
/// release, or the loss.
///
/// Cheap to clone: clones share one lease (one token, one lost flag). Dropping
/// a handle does not release the name; the lease then runs out by itself.
/// Call [`release`](Handle::release) or [`finish`](Handle::finish) so that
/// the next claimant need not wait.
#[derive(Clone)]
#[must_use = "a claimed lease should be released, or finished, when its work is done"]
pub struct Handle {
    inner: Arc<HandleState>,
}

struct HandleState {
    leases: Leases,
    /// Shared with the batcher's queue, not copied per renewal.
    name: Arc<str>,
    token: Arc<str>,
    term: u64,
    claimed_at: Instant,
    instant: Option<UtcMillis>,
    superseded: Option<Unfinished>,
    /// The hold states of the contexts on this handle that can still tell
    /// of a loss: those still in use, and those lost.
    states: Mutex<Vec<Arc<HoldState>>>,
}

/// What a claim learned, for [`Handle::new`].
pub(crate) struct Claimed<'a> {
    pub(crate) name: &'a str,
    pub(crate) token: String,
    pub(crate) term: u64,
    /// When the claim was sent.
    pub(crate) sent: Instant,
    pub(crate) instant: Option<UtcMillis>,
    pub(crate) superseded: Option<Unfinished>,
}

impl fmt::Debug for Handle {
    /// Shows the name, term and instant, never the token.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("name", &self.inner.name)
            .field("term", &self.inner.term)
            .field("instant", &self.inner.instant)
            .field("superseded", &self.inner.superseded)
            .field("lost", &self.lost())
            .finish_non_exhaustive()
    }
}

impl Handle {
    /// The handle of a claim made through `leases`.
    pub(crate) fn new(leases: &Leases, claimed: Claimed<'_>) -> Self {
        Handle {
            inner: Arc::new(HandleState {
                leases: leases.clone(),
                name: claimed.name.into(),
                token: claimed.token.into(),
                term: claimed.term,
                claimed_at: claimed.sent,
                instant: claimed.instant,
                superseded: claimed.superseded,
                states: Mutex::default(),
            }),
        }
    }

    /// Keeps the state of a context made on this handle, for
    /// [`lost`](Handle::lost); drops those no context uses any more and that
    /// were not lost, which can change no more.
    pub(crate) fn keep(&self, state: &Arc<HoldState>) {
        let mut states = self.states();
        states.retain(|s| Arc::strong_count(s) > 1 || s.is_lost());
        states.push(state.clone());
    }

    fn states(&self) -> MutexGuard<'_, Vec<Arc<HoldState>>> {
        self.inner
            .states
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The name held.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The term the claim started: the number the world outside the database
    /// can refuse stale holders by. It grows by one each time the name
    /// changes hands.
    #[must_use]
    pub fn term(&self) -> u64 {
        self.inner.term
    }

    /// The instant this handle was claimed for, for a handle of
    /// [`Leases::claim_instant`] or [`Leases::claim_rerun`].
    #[must_use]
    pub fn instant(&self) -> Option<UtcMillis> {
        self.inner.instant
    }

    /// The instant the claim of this handle gave up, if it gave one up: the
    /// instant claimed before under the name, whose round had not run to its
    /// end (cut short and not run a second time yet, or cut short the second
    /// time too), and that never runs again now. Only a handle of
    /// [`Leases::claim_instant`] gives one up.
    #[must_use]
    pub fn superseded(&self) -> Option<&Unfinished> {
        self.inner.superseded.as_ref()
    }

    /// Whether the lease is known lost: a renewal found it gone, or none
    /// succeeded before the local deadline. Only holding learns of a loss, so
    /// a handle never held is never lost.
    #[must_use]
    pub fn lost(&self) -> bool {
        self.states().iter().any(|s| s.is_lost())
    }

    /// The coordinator this handle was claimed through.
    #[must_use]
    pub fn leases(&self) -> &Leases {
        &self.inner.leases
    }

    /// When the claim was sent, by the monotonic clock: the claim counts as
    /// the first renewal attempt.
    pub(crate) fn claimed_at(&self) -> Instant {
        self.inner.claimed_at
    }

    /// The token of this claim: 32 hex digits, new for every claim.
    /// Backends read it to run the verify statement inside their guarded
    /// transactions. It is what proves holding the name: never log it (its
    /// `Debug` shows nothing secret).
    #[must_use]
    pub fn token(&self) -> Token<'_> {
        Token::new(&self.inner.token)
    }

    /// The guard statement of the store this handle was claimed on, for
    /// fencing a transaction of another driver (diesel, sqlx, a raw
    /// driver) under this lease: `None` when the store offers none
    /// ([`LeaseStore::guard_statement`](crate::LeaseStore::guard_statement);
    /// the three backends of this workspace and `lease-sqlx`'s stores do).
    /// Bind this handle's [`guard_params`](Handle::guard_params):
    ///
    /// ```no_run
    /// # fn example(handle: &lease_core::Handle) {
    /// if let Some(guard) = handle.guard_statement() {
    ///     let p = handle.guard_params();
    ///     // your driver: guard.begin(), then guard.sql() with
    ///     // (p.name, p.token.expose(), p.term) as the first statement;
    ///     // no row: stop.
    ///     let _ = (guard.sql(), p.name, p.token.expose(), p.term);
    /// }
    /// # }
    /// ```
    ///
    /// The statement names the store's own table, so it must run on the
    /// database that holds the lease table: a fence on another database
    /// fences nothing.
    #[must_use]
    pub fn guard_statement(&self) -> Option<GuardStatement> {
        self.leases().store().guard_statement()
    }

    /// The parameters of this handle's [`guard_statement`](Handle::guard_statement),
    /// in the order they bind: name, token, term.
    #[must_use]
    pub fn guard_params(&self) -> GuardParams<'_> {
        GuardParams {
            name: self.name(),
            token: self.token(),
            // Terms start at 1 and grow by one a claim: far from i64::MAX.
            term: i64::try_from(self.term()).unwrap_or(i64::MAX),
        }
    }

    /// Extends the lease by the lease duration from the database's now.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] with [`LostCause::NotHolder`] when the lease expired
    /// (claimed by someone else since, or not yet) or was released; any other
    /// error means the database could not answer, which is not yet a loss:
    /// a holder keeps trying until its local deadline.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped renewal either extended the lease or did not.
    pub async fn renew(&self) -> Result<()> {
        self.renew_within(self.inner.leases.timings().statement_timeout())
            .await
            .map(drop)
    }

    /// [`renew`](Handle::renew), bounded by `bound` instead of the statement
    /// timeout.
    /// The database's now at the renewal, in UTC milliseconds, and whether
    /// the holder was asked to resign.
    pub(crate) async fn renew_within(&self, bound: Duration) -> Result<Renewed> {
        let name = &self.inner.name;
        let started = Instant::now();
        let renewed = self.renew_bounded(bound).await;
        let outcome = match &renewed {
            Ok(Some(_)) => "renewed",
            Ok(None) => "lost",
            Err(_) => "error",
        };
        crate::metrics::renewal(outcome, started.elapsed());
        renewed?.ok_or_else(|| Error::lost(name, LostCause::NotHolder))
    }

    async fn renew_bounded(&self, bound: Duration) -> Result<Option<Renewed>> {
        let leases = &self.inner.leases;
        let (name, token) = (&self.inner.name, &self.inner.token);
        let renewed = match leases.batcher() {
            Some(batcher) => {
                let renew = batcher.renew(name, token);
                bounded(&**leases.store(), Op::Renew, Some(name), bound, renew).await?
            }
            None => {
                let renew =
                    leases
                        .store()
                        .renew(name, Token::new(token), leases.timings().lease_ms());
                bounded(&**leases.store(), Op::Renew, Some(name), bound, renew).await?
            }
        };
        Ok(renewed)
    }

    /// Checks with the database that this holder still holds the name, and
    /// returns the term. The transaction guards of the backends run the same
    /// statement as the first of a guarded transaction.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] with [`LostCause::NotHolder`] when the name was taken,
    /// released, or expired with no one to take it yet; [`Error::Database`]
    /// or [`Error::Timeout`] when the database does not answer.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn verify(&self) -> Result<u64> {
        let leases = &self.inner.leases;
        let term = leases
            .bounded(
                Op::Verify,
                Some(self.name()),
                leases.store().verify(&self.inner.name, self.token()),
            )
            .await?;
        term.ok_or_else(|| Error::lost(&self.inner.name, LostCause::NotHolder))
    }

    /// Gives the name up at once instead of letting the lease run out, so the
    /// next claimant need not wait.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when the lease was already gone: the work it protected
    /// is done either way, so a caller logs it and moves on.
    /// [`Error::Database`] or [`Error::Timeout`] when the database does not
    /// answer; the lease then runs out by itself.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped release either freed the name or did not.
    pub async fn release(&self) -> Result<()> {
        let leases = &self.inner.leases;
        let released = leases
            .bounded(
                Op::Release,
                Some(self.name()),
                leases.store().release(&self.inner.name, self.token()),
            )
            .await?;
        if released {
            tracing::debug!(name = ?self.inner.name, term = self.inner.term, "lease released");
            Ok(())
        } else {
            Err(Error::lost(&self.inner.name, LostCause::NotHolder))
        }
    }

    /// Records that the round for the instant this handle was claimed for ran
    /// to its end, so the instant never runs again, and gives the name back
    /// the way [`release`](Handle::release) does.
    ///
    /// `passed` is the last instant of the round's schedule to have come by
    /// the time the round ended. When it is later than the round's own
    /// instant, the round overran the instants up to it: none of them was
    /// claimed (the round's lease refused every claim while it held the
    /// name), and the record takes `passed` along as the last instant on
    /// record, so they stay skipped, every later claim of them refused. An
    /// instant the database clock has yet to reach is not taken along, so a
    /// caller whose clock runs ahead does not skip an instant the other
    /// replicas are still to claim.
    ///
    /// When the name is no longer this holder's the end is recorded all the
    /// same, unless a later instant has been claimed since, and `passed` is
    /// not taken along: other replicas may have claimed the name meanwhile.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when the name was no longer this holder's, so it was
    /// not given back; not when the handle is known [`lost`](Handle::lost),
    /// in which case giving it back is not tried. [`Error::NoInstant`] for a
    /// handle of [`Leases::claim`]. [`Error::Database`] or [`Error::Timeout`]
    /// when the database does not answer.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped finish either recorded the end or did not.
    pub async fn finish(&self, passed: UtcMillis) -> Result<()> {
        let state = &self.inner;
        let Some(instant) = state.instant else {
            return Err(Error::NoInstant {
                name: state.name.to_string(),
            });
        };
        let known_lost = self.lost();
        let finished = state
            .leases
            .bounded(
                Op::Finish,
                Some(self.name()),
                state.leases.store().finish(FinishRequest {
                    name: &state.name,
                    token: (!known_lost).then(|| self.token()),
                    instant_ms: instant.as_millis(),
                    passed_ms: passed.as_millis(),
                }),
            )
            .await?;
        tracing::debug!(
            name = ?state.name,
            term = state.term,
            instant = instant.as_millis(),
            outcome = ?finished,
            "round finished"
        );
        match finished {
            Finished::Released => Ok(()),
            Finished::RecordedWithoutLease | Finished::NotRecorded if known_lost => Ok(()),
            Finished::RecordedWithoutLease | Finished::NotRecorded => {
                Err(Error::lost(&state.name, LostCause::NotHolder))
            }
        }
    }

    /// Keeps the lease renewed on a task of its own, and returns the
    /// [`Holder`] whose [`context`](Holder::context) the work under the lease
    /// runs on.
    ///
    /// The context's token is a child of `parent`, and ends the moment the
    /// lease is known lost, with [`EndCause::Lost`](crate::EndCause::Lost) as its cause:
    ///
    /// - a renewal finds the name no longer this holder's
    ///   ([`LostCause::NotHolder`]), or
    /// - no renewal succeeded within the local deadline
    ///   ([`Timings::deadline`](crate::Timings::deadline)) of the start of the
    ///   last one that did, the claim counting as the first
    ///   ([`LostCause::DeadlineExceeded`]). That is before the database lets
    ///   anyone else claim the name.
    ///
    /// [`lost`](Handle::lost) is set before the token ends. `parent` ending
    /// ends the token too ([`EndCause::ParentCancelled`](crate::EndCause::ParentCancelled)), but not the
    /// renewals: until the work has wound down the name must stay this
    /// holder's, or another process could start the same work while it is
    /// still in flight. A loss found then still marks the handle lost, and
    /// [`run`](crate::run) gives the work its grace. [`Holder::stop`] ends
    /// the renewals ([`EndCause::Stopped`](crate::EndCause::Stopped) if the context had not ended yet).
    ///
    /// # Cadence
    ///
    /// A renewal is due [`renew`](crate::Timings::renew) after the previous
    /// attempt started (the claim counts as the first, from the moment it
    /// was sent), and never later than the deadline; a renewal
    /// that failed is tried again at the same cadence, so a database that
    /// stalls or drops a statement for a few seconds costs the holder
    /// nothing. Each attempt, waiting for a pool connection included, is
    /// bounded by half the local deadline and never runs past the deadline
    /// itself: an attempt that hangs leaves room for another, and cannot carry
    /// the holder past its deadline. A failed renewal that is not a loss is
    /// logged as a warning in the holder's span (fields `name`, `term`,
    /// `instance`).
    ///
    /// Hold right after the claim: the deadline runs from the claim.
    ///
    /// # After a step-down at the deadline
    ///
    /// Renewals abandoned by their bound may still reach the database when a
    /// stalled path heals, and renew the lease for nobody. So a holder that
    /// stepped down at its deadline gives the name back: once the lease has
    /// run out by the database's expiry (never sooner, and never within the
    /// work's grace), a task of its own releases it with the holder's token,
    /// at the renewal cadence until the database answers, for at most one
    /// more lease. That undoes a late renewal, and one arriving after it
    /// finds the lease expired. The task ends by itself; [`Holder::stop`]
    /// does not wait for it.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime, like [`tokio::spawn`].
    ///
    /// # Examples
    ///
    /// ```
    /// use lease_core::{CancellationToken, Leases, run};
    ///
    /// async fn lead(leases: &Leases, shutdown: &CancellationToken) -> lease_core::Result<()> {
    ///     let Some(handle) = leases.claim("leader:billing").await? else {
    ///         return Ok(()); // someone else leads
    ///     };
    ///     let holder = handle.hold(shutdown);
    ///     let outcome = run(holder.context(), |ctx| async move {
    ///         // ... lead until the context ends: shutdown, or the lease lost ...
    ///         ctx.cancelled().await;
    ///     })
    ///     .await;
    ///     holder.stop().await;
    ///     if !handle.lost() {
    ///         handle.release().await?;
    ///     }
    ///     outcome
    /// }
    /// ```
    pub fn hold(&self, parent: &CancellationToken) -> Holder {
        let deadline = self.claimed_at() + self.leases().timings().deadline();
        Holder::start(LeaseContext::held(self.clone(), parent, deadline))
    }
}

#[cfg(test)]
mod tests {
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::state::EndCause;
    use crate::testing::{ScriptedStore, claimed};

    #[tokio::test(start_paused = true)]
    async fn a_handle_keeps_the_states_of_its_contexts_in_use_and_of_a_loss() {
        let store = ScriptedStore::default();
        let (_, handle) = claimed(&store).await;
        for _ in 0..100 {
            drop(LeaseContext::new(handle.clone(), CancellationToken::new()));
        }
        let kept = LeaseContext::new(handle.clone(), CancellationToken::new());
        assert_eq!(handle.states().len(), 1, "the dropped contexts are swept");
        assert!(!handle.lost());
        let lost = LeaseContext::new(handle.clone(), CancellationToken::new());
        lost.end(EndCause::Lost(LostCause::NotHolder));
        drop(lost);
        assert!(handle.lost(), "a loss outlives the context that learned it");
        assert!(
            !kept.is_cancelled(),
            "another context on the handle runs on"
        );
        drop(LeaseContext::new(handle.clone(), CancellationToken::new()));
        assert_eq!(handle.states().len(), 3);
        assert!(handle.lost());
    }
}
