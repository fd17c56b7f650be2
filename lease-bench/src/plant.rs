//! Bugs planted on purpose: the soak must catch each of them.
//!
//! - [`Plant::SkipDeadline`]: the contender runs its work beside the lease
//!   instead of under [`run`](lease_core::run), and lets it run its course
//!   after the lease is lost (no local deadline, no grace): caught as an
//!   overlap and a late step-down once the database stalls or the network
//!   fails for longer than the local deadline.
//! - [`Plant::PhantomClaim`]: the store takes every name twice per claim
//!   ([`PlantedStore`]), so the term moves by two per change of hands:
//!   caught by the term rule.
//! - [`Plant::RerunFinished`]: the scheduler runs an instant a second time
//!   after its first run finished (under a plain claim of the job's name):
//!   caught by the instant rule.
//!
//! And in the capabilities (the lock, the leader, the scheduler):
//!
//! - [`Plant::LyingLock`]: the lock's store says a claim of a lock held
//!   elsewhere succeeded ([`PlantedStore`]), so the lock runs beside its
//!   holder: caught by the overlap rule (and the term rule: the lie reuses
//!   the holder's term).
//! - [`Plant::DeafLeader`]: the leader's duty runs on a task of its own and
//!   carries on after the lease is lost: caught as an overlap and a late
//!   step-down once a fault costs the leader its lease.
//! - [`Plant::LostFinish`]: the scheduler's store loses the record of a
//!   round's end (it only gives the name back) and says it recorded it
//!   ([`PlantedStore`]), so the rerun sweep runs the finished instant again:
//!   caught by the instant rule. The contenders note on standard error each
//!   first run's end lost ([`LOST_END`]) and each second run ([`RAN_AGAIN`]),
//!   so a test can tell whether the bug fired at all
//!   ([`lost_finish_firings`]).

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use async_trait::async_trait;
use lease_core::{BoxError, ClaimRequest, FinishRequest, Finished, ForwardingStore, LeaseStore};

/// Which bug, if any, a soak's contenders carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Plant {
    /// None: the library as it is.
    #[default]
    None,
    /// Work that outlives its lease.
    SkipDeadline,
    /// A store whose claims move the term by two.
    PhantomClaim,
    /// A scheduler that runs a finished instant again.
    RerunFinished,
    /// A lock whose store lies about a claim.
    LyingLock,
    /// A leader that carries on after its lease is lost.
    DeafLeader,
    /// A scheduler's store that loses the record of a round's end.
    LostFinish,
}

impl Plant {
    /// Every plant, for help texts.
    pub const ALL: [Plant; 7] = [
        Plant::None,
        Plant::SkipDeadline,
        Plant::PhantomClaim,
        Plant::RerunFinished,
        Plant::LyingLock,
        Plant::DeafLeader,
        Plant::LostFinish,
    ];

    /// The plant's name on the command line.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Plant::None => "none",
            Plant::SkipDeadline => "skip-deadline",
            Plant::PhantomClaim => "phantom-claim",
            Plant::RerunFinished => "rerun-finished",
            Plant::LyingLock => "lying-lock",
            Plant::DeafLeader => "deaf-leader",
            Plant::LostFinish => "lost-finish",
        }
    }

    /// Whether the bug is work that outlives its lease: the soak then aims
    /// its faults at costing holders their leases (long pauses and stalls).
    #[must_use]
    pub fn outlives_lease(self) -> bool {
        matches!(self, Plant::SkipDeadline | Plant::DeafLeader)
    }

    /// The store the soak's raw leases use over `base`.
    #[must_use]
    pub fn raw_store(self, base: Arc<dyn LeaseStore>) -> Arc<dyn LeaseStore> {
        match self {
            Plant::PhantomClaim => Arc::new(PlantedStore::new(base, self)),
            _ => base,
        }
    }

    /// The store the soak's capabilities use over `base`.
    #[must_use]
    pub fn capability_store(self, base: Arc<dyn LeaseStore>) -> Arc<dyn LeaseStore> {
        match self {
            Plant::LyingLock | Plant::LostFinish => Arc::new(PlantedStore::new(base, self)),
            _ => base,
        }
    }
}

impl fmt::Display for Plant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Plant {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Plant::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Plant::ALL.iter().map(|p| p.as_str()).collect();
                format!("unknown plant {s:?}: one of {}", names.join(", "))
            })
    }
}

/// A store with a planted bug; every statement the bug does not touch is
/// forwarded.
///
/// - [`Plant::PhantomClaim`]: every successful claim is made twice (the name
///   is taken, given back and taken again), so the term moves by two while
///   the caller sees one change of hands.
/// - [`Plant::LyingLock`]: a claim of a lock's name (`lock:`) that is held
///   elsewhere "succeeds" with the holder's term, and nothing is written.
/// - [`Plant::LostFinish`]: `finish` only gives the name back, leaving the
///   round unfinished in the table, and reports the end recorded.
#[derive(Debug)]
pub struct PlantedStore {
    inner: Arc<dyn LeaseStore>,
    plant: Plant,
}

impl PlantedStore {
    /// Wraps `inner` with `plant`'s bug (none for the plants that are not
    /// in a store).
    #[must_use]
    pub fn new(inner: Arc<dyn LeaseStore>, plant: Plant) -> Self {
        PlantedStore { inner, plant }
    }
}

#[async_trait]
impl ForwardingStore for PlantedStore {
    fn inner(&self) -> &dyn LeaseStore {
        &*self.inner
    }

    async fn claim(&self, claim: ClaimRequest<'_>) -> Result<Option<u64>, BoxError> {
        let ClaimRequest { name, token, .. } = claim;
        match (self.plant, self.inner.claim(claim).await?) {
            (Plant::PhantomClaim, Some(_)) => {
                let _ = self.inner.release(name, token).await?;
                self.inner.claim(claim).await
            }
            (Plant::LyingLock, None) if name.starts_with("lock:") => {
                Ok(self.inner.get(name).await?.map(|held| held.term))
            }
            (_, claimed) => Ok(claimed),
        }
    }

    async fn finish(&self, finish: FinishRequest<'_>) -> Result<Finished, BoxError> {
        match (self.plant, finish.token) {
            (Plant::LostFinish, Some(token)) => {
                // A first run's end lost is what the bug needs; a rerun's
                // (the instant already run twice) leads to no third run.
                let first_run = self
                    .inner
                    .get(finish.name)
                    .await?
                    .is_some_and(|row| row.rerun_slot_ms != finish.instant_ms);
                Ok(if self.inner.release(finish.name, token).await? {
                    if first_run {
                        note(&format!(
                            "{LOST_END}{}",
                            instant_key(finish.name, finish.instant_ms)
                        ));
                    }
                    Finished::Released
                } else {
                    Finished::NotRecorded
                })
            }
            _ => self.inner.finish(finish).await,
        }
    }
}

/// The note, on a contender's standard error, of a first run's end that
/// [`Plant::LostFinish`] lost (and reported recorded).
pub const LOST_END: &str = "soak: plant lost-finish: lost the recorded end of the first run of ";

/// The note, on a contender's standard error, of a second run of an instant
/// under [`Plant::LostFinish`], written once its claim is in the history.
pub const RAN_AGAIN: &str = "soak: plant lost-finish: ran again: ";

/// An instant of a job's name, as the notes name it.
#[must_use]
pub fn instant_key(name: &str, instant_ms: i64) -> String {
    format!("instant {instant_ms} of {name}")
}

/// Writes `line` to standard error in one write, so that the notes of
/// processes sharing the stream do not interleave.
pub fn note(line: &str) {
    use std::io::Write as _;
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}

/// How many times [`Plant::LostFinish`] fired in a soak whose contenders'
/// standard error is `stderr`: instants whose first run's end the plant
/// lost and which ran again (what the instant rule must then catch).
#[must_use]
pub fn lost_finish_firings(stderr: &str) -> usize {
    let keys = |prefix: &str| -> std::collections::BTreeSet<&str> {
        stderr
            .lines()
            .filter_map(|line| line.strip_prefix(prefix))
            .collect()
    };
    keys(LOST_END).intersection(&keys(RAN_AGAIN)).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use lease_core::Leases;

    #[test]
    fn plants_by_name() {
        for p in Plant::ALL {
            assert_eq!(p.as_str().parse::<Plant>(), Ok(p));
        }
        assert!(
            "nope"
                .parse::<Plant>()
                .unwrap_err()
                .contains("skip-deadline")
        );
    }

    #[tokio::test]
    async fn a_phantom_claim_moves_the_term_by_two() {
        let inner: Arc<dyn LeaseStore> =
            Arc::new(dblease::sqlite::SqliteStore::open_in_memory().unwrap());
        let leases = Leases::new(PlantedStore::new(inner, Plant::PhantomClaim));
        leases.migrate().await.unwrap();
        let first = leases.claim("n").await.unwrap().unwrap();
        assert_eq!(first.term(), 2);
        first.release().await.unwrap();
        let second = leases.claim("n").await.unwrap().unwrap();
        assert_eq!(second.term(), 4);
        assert_eq!(second.verify().await.unwrap(), 4);
    }
}

#[cfg(test)]
mod capability_tests {
    use super::*;
    use lease_core::Leases;

    fn sqlite() -> Arc<dyn LeaseStore> {
        Arc::new(dblease::sqlite::SqliteStore::open_in_memory().unwrap())
    }

    #[tokio::test]
    async fn a_lying_lock_store_claims_a_lock_held_elsewhere() {
        let inner = sqlite();
        let honest = Leases::from_arc(inner.clone());
        honest.migrate().await.unwrap();
        let liar = Leases::new(PlantedStore::new(inner, Plant::LyingLock));
        let held = honest.claim("lock:x").await.unwrap().unwrap();
        let lie = liar.claim("lock:x").await.unwrap().unwrap();
        assert_eq!(lie.term(), held.term());
        // Other names are left alone.
        let _other = honest.claim("y").await.unwrap().unwrap();
        assert!(liar.claim("y").await.unwrap().is_none());
    }

    #[test]
    fn a_lost_finish_fires_when_the_instant_whose_end_it_lost_runs_again() {
        let lost = format!("{LOST_END}{}", instant_key("cron:j", 1_000));
        let again = format!("{RAN_AGAIN}{}", instant_key("cron:j", 1_000));
        let other = format!("{RAN_AGAIN}{}", instant_key("cron:j", 2_000));
        assert_eq!(lost_finish_firings(&format!("{lost}\nnoise\n{other}\n")), 0);
        assert_eq!(
            lost_finish_firings(&format!("{again}\n{other}\n{lost}\n")),
            1
        );
    }

    #[tokio::test]
    async fn a_lost_finish_leaves_the_instant_to_run_again() {
        let inner = sqlite();
        let leases = Leases::new(PlantedStore::new(inner, Plant::LostFinish));
        leases.migrate().await.unwrap();
        let slot = lease_core::UtcMillis::from_millis(1_000);
        let round = leases.claim_instant("cron:j", slot).await.unwrap().unwrap();
        round.finish(slot).await.unwrap();
        let found = leases.unfinished_instants(&["cron:j"]).await.unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
    }
}
