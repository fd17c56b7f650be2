//! What the capabilities (lock, leader) share: jitter, and giving a name back
//! on a call of its own.

use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument as _;

use crate::error::Chain;
use crate::handle::Handle;
use crate::info::LeaseInfo;

/// How long a capability's release may take. It runs detached from the
/// caller's cancellation (a caller shutting down still gives the name back),
/// and a release that does not answer in time is only a warning: the lease
/// then runs out by itself.
pub const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// A random duration in `[0, max]`, from the OS random number generator (0
/// if it fails: jitter is a courtesy, not a guarantee).
pub(crate) fn jitter(max: Duration) -> Duration {
    let mut bytes = [0u8; 8];
    if max.is_zero() || getrandom::fill(&mut bytes).is_err() {
        return Duration::ZERO;
    }
    let nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(u64::from_le_bytes(bytes) % nanos.saturating_add(1))
}

/// How long after the holder's lease runs out (by the database's clock, as
/// last read) a waiting claimant asks again: the claim must reach the
/// database after the expiry, not before.
pub(crate) const EXPIRY_MARGIN: Duration = Duration::from_millis(10);

/// The most added at random to [`EXPIRY_MARGIN`], so that the followers of
/// one name do not all ask in the same millisecond.
pub(crate) const EXPIRY_JITTER: Duration = Duration::from_millis(10);

/// When a name held elsewhere can be claimed at the earliest: what a
/// waiting claimant (a follower's campaign, a waiting lock) learns from the
/// row read after a refused claim, so that it asks again at the moment the
/// holder's lease runs out rather than at its next poll when that is sooner.
///
/// A lease's expiry only moves later (a renewal) or to 0 (a release), never
/// earlier: so the expiry read at one refusal stays a lower bound on when
/// the holder's lease can run out, and the row need not be read again until
/// that moment comes within one poll ([`wants_read`](Self::wants_read)). A
/// live holder thus costs its waiting locks one read per lease, not one per
/// poll. A release is still found by the polls (or sooner, by a wake-up).
#[derive(Debug, Default)]
pub(crate) struct Expiry {
    /// When the holder's lease runs out at the earliest, on this process's
    /// clock: when the read answered, plus the time it had left.
    at: Option<Instant>,
    /// Whether the next attempt is the one scheduled for the expiry.
    early: bool,
}

impl Expiry {
    /// Whether a refused claim should read the row: no expiry is known, or
    /// the one known comes before `horizon` (the next poll), and may have
    /// been pushed back by renewals since it was read.
    pub(crate) fn wants_read(&self, horizon: Instant) -> bool {
        self.at.is_none_or(|at| at <= horizon)
    }

    /// Takes in the row read (at `read_at`, when its answer came) after a
    /// refused claim: `None` when it could not be read or there is none.
    /// A row read free (given back, or run out, between the claim and the
    /// read) is asked for again at once, unless the refused attempt was
    /// already the early one: then the polls take over, so that a name
    /// refused and read free again and again is not asked for in a loop.
    pub(crate) fn learn(&mut self, info: Option<&LeaseInfo>, read_at: Instant) {
        self.at = match info {
            Some(info) if info.held() => Some(read_at + info.time_left()),
            Some(_) if !self.early => Some(read_at),
            _ => None,
        };
    }

    /// Forgets the expiry (the database did not answer the claim).
    pub(crate) fn forget(&mut self) {
        self.at = None;
    }

    /// When to ask next: at `poll`, or just after the expiry known when that
    /// is sooner.
    pub(crate) fn next(&mut self, poll: Instant) -> Instant {
        let early = self
            .at
            .map(|at| at + EXPIRY_MARGIN + jitter(EXPIRY_JITTER))
            .filter(|&at| at < poll);
        self.early = early.is_some();
        early.unwrap_or(poll)
    }
}

/// What giving a name back found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GaveBack {
    /// The name was still this holder's, and is free now.
    Released,
    /// The name was no longer this holder's: it ran out, was released by
    /// force, or was taken, while the holder still believed it held it.
    AlreadyGone,
    /// The database did not answer, or not in time: the lease runs out by
    /// itself.
    Unknown,
}

/// Gives `handle`'s name back on a task of its own, bounded by
/// [`RELEASE_TIMEOUT`], and waits for it: dropping the caller's future does
/// not cut the release. A failed release is logged as a warning; the lease
/// then runs out by itself.
pub(crate) async fn release_detached(handle: &Handle) -> GaveBack {
    let handle = handle.clone();
    let span = tracing::Span::current();
    let task = tokio::spawn(
        async move {
            match tokio::time::timeout(RELEASE_TIMEOUT, handle.release()).await {
                Ok(Ok(())) => GaveBack::Released,
                Ok(Err(e)) if e.is_lost() => {
                    tracing::warn!(
                        name = ?handle.name(),
                        term = handle.term(),
                        "the name was already gone when it was given back"
                    );
                    GaveBack::AlreadyGone
                }
                Ok(Err(e)) => {
                    tracing::warn!(
                        name = ?handle.name(),
                        term = handle.term(),
                        error = %Chain(&e),
                        "could not give the name back; it runs out by itself"
                    );
                    GaveBack::Unknown
                }
                Err(_) => {
                    tracing::warn!(
                        name = ?handle.name(),
                        term = handle.term(),
                        after = ?RELEASE_TIMEOUT,
                        "giving the name back got no answer; it runs out by itself"
                    );
                    GaveBack::Unknown
                }
            }
        }
        .instrument(span),
    );
    // The task only logs; a panic in it (or a runtime shutting down) leaves
    // the lease to run out by itself, like a failed release.
    task.await.unwrap_or(GaveBack::Unknown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_its_bound() {
        let max = Duration::from_secs(1);
        let draws: Vec<Duration> = (0..200).map(|_| jitter(max)).collect();
        assert!(draws.iter().all(|d| *d <= max));
        assert!(
            draws.iter().any(|d| *d > Duration::from_millis(10)),
            "{draws:?}"
        );
        assert_eq!(jitter(Duration::ZERO), Duration::ZERO);
    }

    fn row(expires_at_ms: i64, now_ms: i64) -> LeaseInfo {
        LeaseInfo {
            name: "lock:x".into(),
            instance: "web-2".into(),
            term: 4,
            expires_at_ms,
            now_ms,
            slot_ms: 0,
            unfinished_slot_ms: 0,
            rerun_slot_ms: 0,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_next_attempt_is_just_after_the_expiry_when_that_is_sooner_than_the_poll() {
        let t0 = Instant::now();
        let poll = t0 + Duration::from_secs(2);
        let mut expiry = Expiry::default();
        assert!(expiry.wants_read(poll), "nothing known yet");
        assert_eq!(expiry.next(poll), poll, "nothing known: the poll");

        // 700 ms left: asked again 10 to 20 ms after the expiry.
        expiry.learn(Some(&row(10_700, 10_000)), t0);
        let next = expiry.next(poll);
        let after = next - (t0 + Duration::from_millis(700));
        assert!(
            (EXPIRY_MARGIN..=EXPIRY_MARGIN + EXPIRY_JITTER).contains(&after),
            "{after:?}"
        );

        // 15 s left: the poll comes first, and the row need not be read
        // again until the expiry comes within a poll.
        expiry.learn(Some(&row(25_000, 10_000)), t0);
        assert_eq!(expiry.next(poll), poll);
        assert!(!expiry.wants_read(poll));
        assert!(expiry.wants_read(t0 + Duration::from_secs(15)));

        // Read free after a refused poll: asked again at once; read free
        // again after that early attempt: the polls take over.
        expiry.learn(Some(&row(0, 10_000)), t0);
        assert!(expiry.next(poll) < t0 + Duration::from_millis(21));
        expiry.learn(Some(&row(0, 10_000)), t0);
        assert_eq!(expiry.next(poll), poll, "no loop of early attempts");

        // Unknown: the poll.
        expiry.learn(Some(&row(10_700, 10_000)), t0);
        expiry.forget();
        assert_eq!(expiry.next(poll), poll);
        expiry.learn(None, t0);
        assert_eq!(expiry.next(poll), poll);
    }
}
