//! The stores of lease-core's own tests on paused time: a scriptable store
//! for the hold/run state machine (each renewal plays a step of a script),
//! and the capabilities' lease table ([`Table`], the reference
//! [`MemoryStore`](crate::memory::MemoryStore) with knobs).

mod table;

pub(crate) use table::Table;

use std::collections::VecDeque;
use std::future::pending;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::{Instant, sleep};

use crate::error::BoxError;
use crate::store::{
    ClaimRequest, FinishRequest, Finished, InstantClaim, LeaseStore, Renewed, Unfinished,
};
use crate::token::Token;
use crate::{Handle, Leases, Timings};

/// What one renewal does.
#[derive(Debug, Clone)]
pub(crate) enum Step {
    /// Answers at once: renewed.
    Renew,
    /// Answers at once: renewed, and asked to resign.
    Resign,
    /// Answers at once: the database failed.
    Fail,
    /// Answers at once: the lease is no longer this holder's.
    Gone,
    /// Never answers.
    Hang,
    /// Waits `ms`, then does the step.
    After(u64, Box<Step>),
    /// Moves the database's clock by `ms` (forward if positive), then does
    /// the step.
    Jump(i64, Box<Step>),
}

pub(crate) fn after(ms: u64, step: Step) -> Step {
    Step::After(ms, Box::new(step))
}

/// How one renewal ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Renewed,
    Failed,
    Gone,
    /// The caller dropped the call before it answered.
    Cut,
}

/// One renewal attempt, in milliseconds since the claim was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Attempt {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) outcome: Outcome,
}

#[derive(Debug, Default)]
struct Inner {
    script: VecDeque<Step>,
    /// start, and end with outcome once it ended.
    attempts: Vec<(Instant, Option<(Instant, Outcome)>)>,
    releases: usize,
    /// The size of each `renew_many` batch.
    batches: Vec<usize>,
    /// The database's clock: milliseconds on the runtime's clock since the
    /// first renewal, plus `jumped_ms`.
    origin: Option<Instant>,
    jumped_ms: i64,
}

impl Inner {
    fn db_now_ms(&mut self) -> i64 {
        let origin = *self.origin.get_or_insert_with(Instant::now);
        i64::try_from(origin.elapsed().as_millis()).unwrap_or(i64::MAX) + self.jumped_ms
    }
}

/// A store whose renewals play a script (renewed once the script runs out).
#[derive(Debug, Default, Clone)]
pub(crate) struct ScriptedStore {
    inner: Arc<Mutex<Inner>>,
}

impl ScriptedStore {
    pub(crate) fn new(script: impl IntoIterator<Item = Step>) -> Self {
        let store = ScriptedStore::default();
        store.inner.lock().unwrap().script = script.into_iter().collect();
        store
    }

    /// The attempts so far, relative to `since` (the claim).
    pub(crate) fn attempts(&self, since: Instant) -> Vec<Attempt> {
        let ms = |t: Instant| u64::try_from((t - since).as_millis()).unwrap();
        self.inner
            .lock()
            .unwrap()
            .attempts
            .iter()
            .map(|&(start, end)| {
                let (end, outcome) = end.expect("an attempt still in flight");
                Attempt {
                    start: ms(start),
                    end: ms(end),
                    outcome,
                }
            })
            .collect()
    }

    /// When each attempt started, relative to `since`.
    pub(crate) fn starts(&self, since: Instant) -> Vec<u64> {
        self.inner
            .lock()
            .unwrap()
            .attempts
            .iter()
            .map(|&(start, _)| u64::try_from((start - since).as_millis()).unwrap())
            .collect()
    }

    /// The size of each batch `renew_many` was called with.
    pub(crate) fn batches(&self) -> Vec<usize> {
        self.inner.lock().unwrap().batches.clone()
    }

    pub(crate) fn releases(&self) -> usize {
        self.inner.lock().unwrap().releases
    }
}

/// Records how an attempt ended, `Cut` if its future was dropped.
struct Record<'a> {
    store: &'a ScriptedStore,
    index: usize,
    outcome: Outcome,
}

impl Drop for Record<'_> {
    fn drop(&mut self) {
        self.store.inner.lock().unwrap().attempts[self.index].1 =
            Some((Instant::now(), self.outcome));
    }
}

#[async_trait]
impl LeaseStore for ScriptedStore {
    async fn claim(&self, claim: ClaimRequest<'_>) -> Result<Option<u64>, BoxError> {
        let _ = claim;
        Ok(Some(1))
    }

    async fn renew(&self, _: &str, _: Token<'_>, _: i64) -> Result<Option<Renewed>, BoxError> {
        let (index, mut step) = {
            let mut inner = self.inner.lock().unwrap();
            inner.attempts.push((Instant::now(), None));
            let step = inner.script.pop_front().unwrap_or(Step::Renew);
            (inner.attempts.len() - 1, step)
        };
        let mut record = Record {
            store: self,
            index,
            outcome: Outcome::Cut,
        };
        loop {
            match step {
                Step::After(ms, next) => {
                    sleep(Duration::from_millis(ms)).await;
                    step = *next;
                }
                Step::Jump(ms, next) => {
                    self.inner.lock().unwrap().jumped_ms += ms;
                    step = *next;
                }
                Step::Renew => {
                    record.outcome = Outcome::Renewed;
                    return Ok(Some(Renewed::at(self.inner.lock().unwrap().db_now_ms())));
                }
                Step::Resign => {
                    record.outcome = Outcome::Renewed;
                    return Ok(Some(Renewed {
                        now_ms: self.inner.lock().unwrap().db_now_ms(),
                        resign: true,
                    }));
                }
                Step::Fail => {
                    record.outcome = Outcome::Failed;
                    return Err("scripted failure".into());
                }
                Step::Gone => {
                    record.outcome = Outcome::Gone;
                    return Ok(None);
                }
                Step::Hang => pending::<()>().await,
            }
        }
    }

    async fn renew_many(
        &self,
        leases: &[(&str, Token<'_>)],
        lease_ms: i64,
    ) -> Result<Vec<Option<Renewed>>, BoxError> {
        self.inner.lock().unwrap().batches.push(leases.len());
        let mut held = Vec::with_capacity(leases.len());
        for (name, token) in leases {
            held.push(self.renew(name, *token, lease_ms).await?);
        }
        Ok(held)
    }

    async fn verify(&self, _: &str, _: Token<'_>) -> Result<Option<u64>, BoxError> {
        Err("not scripted".into())
    }

    async fn release(&self, _: &str, _: Token<'_>) -> Result<bool, BoxError> {
        self.inner.lock().unwrap().releases += 1;
        Ok(true)
    }

    async fn claim_instant(
        &self,
        claim: ClaimRequest<'_>,
        _: i64,
    ) -> Result<InstantClaim, BoxError> {
        let _ = claim;
        Err("not scripted".into())
    }

    async fn finish(&self, _: FinishRequest<'_>) -> Result<Finished, BoxError> {
        Err("not scripted".into())
    }

    async fn find_unfinished(&self, _: &[&str]) -> Result<Vec<Unfinished>, BoxError> {
        Err("not scripted".into())
    }

    async fn claim_rerun(&self, claim: ClaimRequest<'_>, _: u64) -> Result<bool, BoxError> {
        let _ = claim;
        Err("not scripted".into())
    }

    async fn last_instant(&self, _: &str) -> Result<Option<i64>, BoxError> {
        Err("not scripted".into())
    }

    async fn force_release(&self, _: &str, _: u64) -> Result<bool, BoxError> {
        Err("not scripted".into())
    }

    async fn request_resign(&self, _: &str, _: u64) -> Result<bool, BoxError> {
        Err("not scripted".into())
    }

    async fn get(&self, _: &str) -> Result<Option<crate::LeaseInfo>, BoxError> {
        Err("not scripted".into())
    }

    async fn list(&self, _: &str, _: u32) -> Result<Vec<crate::LeaseInfo>, BoxError> {
        Err("not scripted".into())
    }

    async fn now_ms(&self) -> Result<i64, BoxError> {
        Err("not scripted".into())
    }

    async fn migrate(&self) -> Result<(), BoxError> {
        Ok(())
    }
}

pub(crate) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Lease 1000 ms, renew every 100 ms, deadline 500 ms, grace 100 ms.
pub(crate) fn timings() -> Timings {
    Timings::builder()
        .lease(ms(1000))
        .renew(ms(100))
        .deadline(ms(500))
        .grace(ms(100))
        .build()
        .unwrap()
}

/// A coordinator on `store` with [`timings`], and a handle claimed now.
pub(crate) async fn claimed(store: &ScriptedStore) -> (Leases, Handle) {
    let leases = Leases::new(store.clone())
        .with_timings(timings())
        .with_instance("test")
        .unwrap();
    let handle = leases.claim("leader:test").await.unwrap().unwrap();
    (leases, handle)
}

/// Milliseconds since `since`.
pub(crate) fn elapsed(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap()
}

/// The failures a fail hook was called with.
#[derive(Debug, Default, Clone)]
pub(crate) struct Failures(Arc<Mutex<Vec<String>>>);

impl Failures {
    pub(crate) fn get(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// A coordinator on `store` with [`timings`] whose fail hook records into
/// the returned [`Failures`], and a handle claimed now.
pub(crate) async fn claimed_recording(
    store: &ScriptedStore,
    timings: Timings,
) -> (Handle, Failures) {
    let failures = Failures::default();
    let record = failures.clone();
    let leases = Leases::new(store.clone())
        .with_timings(timings)
        .with_instance("test")
        .unwrap()
        .with_fail_hook(move |error| record.0.lock().unwrap().push(error.to_string()));
    let handle = leases.claim("leader:test").await.unwrap().unwrap();
    (handle, failures)
}
