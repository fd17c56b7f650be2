//! Shared by the paused-time tests: an in-memory store whose clock is Tokio's
//! (so that paused time moves it), with faults to inject and a record of the
//! statements, and a tracing subscriber that keeps every event.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use lease_core::memory::MemoryStore;
pub use lease_core::memory::Row;
use lease_core::{
    BoxError, ClaimRequest, DbErrorKind, FinishRequest, Finished, ForwardingStore, InstantClaim,
    LeaseStore, Renewed, Token, Unfinished,
};

/// 2025-12-01T10:00:00Z: where the store's clock starts.
pub const T0: i64 = 1_764_583_200_000;

/// A statement the store answered (or failed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    ClaimInstant {
        name: String,
        slot: i64,
        at: i64,
        claimed: bool,
    },
    ClaimInstantFailed {
        name: String,
        slot: i64,
        at: i64,
    },
    Finish {
        name: String,
        slot: i64,
        passed: i64,
        outcome: Finished,
    },
    Release {
        name: String,
        released: bool,
    },
    FindUnfinished {
        at: i64,
    },
    ClaimRerun {
        name: String,
        claimed: bool,
    },
    LastInstant {
        name: String,
    },
}

#[derive(Debug, Default)]
struct State {
    calls: Vec<Call>,
    failing_claims: u32,
    lost_names: Vec<String>,
}

/// The reference store on Tokio's clock (`T0` plus the time elapsed since
/// the store was made), with faults to inject and a record of the
/// scheduler's statements.
#[derive(Debug, Clone)]
pub struct TestStore {
    inner: Arc<MemoryStore>,
    state: Arc<Mutex<State>>,
}

impl TestStore {
    pub fn new() -> Self {
        Self::starting_at(T0)
    }

    /// A store whose clock starts at `t0` (UTC ms) instead of `T0`.
    pub fn starting_at(t0: i64) -> Self {
        TestStore {
            inner: Arc::new(MemoryStore::new().migrated().on_tokio_clock(t0)),
            state: Arc::default(),
        }
    }

    /// The store's now, in UTC ms.
    pub fn now(&self) -> i64 {
        self.inner.now()
    }

    /// The next `n` instant claims fail as if the database did not answer.
    pub fn fail_claims(&self, n: u32) {
        self.state.lock().unwrap().failing_claims = n;
    }

    /// From now on, renewals of `name` find it gone (someone took it).
    pub fn lose(&self, name: &str) {
        self.state.lock().unwrap().lost_names.push(name.to_owned());
    }

    /// Renewals of `name` work again.
    pub fn unlose(&self, name: &str) {
        self.state.lock().unwrap().lost_names.retain(|n| n != name);
    }

    pub fn row(&self, name: &str) -> Option<Row> {
        self.inner.row(name)
    }

    pub fn set_row(&self, name: &str, row: Row) {
        self.inner.set_row(name, row);
    }

    pub fn calls(&self) -> Vec<Call> {
        self.state.lock().unwrap().calls.clone()
    }

    fn record(&self, call: Call) {
        self.state.lock().unwrap().calls.push(call);
    }
}

fn io_error(what: &str) -> BoxError {
    Box::new(std::io::Error::new(
        std::io::ErrorKind::ConnectionRefused,
        what.to_owned(),
    ))
}

#[async_trait]
impl ForwardingStore for TestStore {
    fn inner(&self) -> &dyn LeaseStore {
        &*self.inner
    }

    async fn renew(
        &self,
        name: &str,
        token: Token<'_>,
        lease_ms: i64,
    ) -> Result<Option<Renewed>, BoxError> {
        if self
            .state
            .lock()
            .unwrap()
            .lost_names
            .iter()
            .any(|n| n == name)
        {
            return Ok(None);
        }
        self.inner.renew(name, token, lease_ms).await
    }

    /// One renewal after the other, each through `renew` above (so a lost
    /// name is lost in a batch too).
    async fn renew_many(
        &self,
        leases: &[(&str, Token<'_>)],
        lease_ms: i64,
    ) -> Result<Vec<Option<Renewed>>, BoxError> {
        lease_core::renew_each(self, leases, lease_ms).await
    }

    async fn release(&self, name: &str, token: Token<'_>) -> Result<bool, BoxError> {
        let released = self.inner.release(name, token).await?;
        self.record(Call::Release {
            name: name.to_owned(),
            released,
        });
        Ok(released)
    }

    async fn claim_instant(
        &self,
        claim: ClaimRequest<'_>,
        slot_ms: i64,
    ) -> Result<InstantClaim, BoxError> {
        let (name, at) = (claim.name, self.now());
        {
            let mut s = self.state.lock().unwrap();
            if s.failing_claims > 0 {
                s.failing_claims -= 1;
                s.calls.push(Call::ClaimInstantFailed {
                    name: name.to_owned(),
                    slot: slot_ms,
                    at,
                });
                return Err(io_error("connection refused"));
            }
        }
        let outcome = self.inner.claim_instant(claim, slot_ms).await?;
        self.record(Call::ClaimInstant {
            name: name.to_owned(),
            slot: slot_ms,
            at,
            claimed: matches!(outcome, InstantClaim::Claimed { .. }),
        });
        Ok(outcome)
    }

    async fn finish(&self, finish: FinishRequest<'_>) -> Result<Finished, BoxError> {
        let FinishRequest {
            name,
            instant_ms: slot_ms,
            passed_ms,
            ..
        } = finish;
        let outcome = self.inner.finish(finish).await?;
        self.record(Call::Finish {
            name: name.to_owned(),
            slot: slot_ms,
            passed: passed_ms,
            outcome,
        });
        Ok(outcome)
    }

    async fn find_unfinished(&self, names: &[&str]) -> Result<Vec<Unfinished>, BoxError> {
        let at = self.now();
        let found = self.inner.find_unfinished(names).await?;
        self.record(Call::FindUnfinished { at });
        Ok(found)
    }

    async fn claim_rerun(&self, claim: ClaimRequest<'_>, term: u64) -> Result<bool, BoxError> {
        let name = claim.name;
        let claimed = self.inner.claim_rerun(claim, term).await?;
        self.record(Call::ClaimRerun {
            name: name.to_owned(),
            claimed,
        });
        Ok(claimed)
    }

    async fn last_instant(&self, name: &str) -> Result<Option<i64>, BoxError> {
        self.record(Call::LastInstant {
            name: name.to_owned(),
        });
        self.inner.last_instant(name).await
    }

    /// The injected failures are a database that did not answer (retryable);
    /// the rest is the reference store's to classify.
    fn classify(&self, error: &(dyn std::error::Error + 'static)) -> DbErrorKind {
        match error.downcast_ref::<std::io::Error>() {
            Some(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => DbErrorKind::Connection,
            _ => self.inner.classify(error),
        }
    }
}

/// Every event logged while it is the default subscriber: level, message
/// and fields, one line each.
#[derive(Debug, Clone, Default)]
pub struct Logs {
    /// (target, line) of each event.
    lines: Arc<Mutex<Vec<(String, String)>>>,
    next_span: Arc<AtomicU64>,
}

impl Logs {
    /// Installs a new one as this thread's default subscriber (the paused
    /// tests run on one thread) until the guard is dropped.
    pub fn capture() -> (Logs, tracing::subscriber::DefaultGuard) {
        let logs = Logs::default();
        lease_testkit::logs::every_callsite_interesting();
        let guard = tracing::subscriber::set_default(logs.clone());
        (logs, guard)
    }

    pub fn lines(&self) -> Vec<String> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .map(|(_, line)| line.clone())
            .collect()
    }

    /// Each event's target and line.
    pub fn with_targets(&self) -> Vec<(String, String)> {
        self.lines.lock().unwrap().clone()
    }

    /// The lines that contain every one of `parts`.
    pub fn matching(&self, parts: &[&str]) -> Vec<String> {
        self.lines()
            .into_iter()
            .filter(|l| parts.iter().all(|p| l.contains(p)))
            .collect()
    }
}

struct Line(String);

impl tracing::field::Visit for Line {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, " {value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            let _ = write!(self.0, " {value}");
        } else {
            let _ = write!(self.0, " {}={value}", field.name());
        }
    }
}

impl tracing::Subscriber for Logs {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(self.next_span.fetch_add(1, Ordering::Relaxed) + 1)
    }

    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        let mut line = Line(event.metadata().level().to_string());
        event.record(&mut line);
        let target = event.metadata().target().to_owned();
        self.lines.lock().unwrap().push((target, line.0));
    }

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}

/// `d` in milliseconds.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `d` in seconds.
pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}
