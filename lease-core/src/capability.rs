//! What the capabilities (lock, leader) share: jitter, and giving a name back
//! on a call of its own.

use std::time::Duration;

use tracing::Instrument as _;

use crate::error::Chain;
use crate::handle::Handle;

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
}
