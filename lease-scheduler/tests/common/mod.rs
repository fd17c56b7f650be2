//! Shared by the paused-time tests: an in-memory store whose clock is Tokio's
//! (so that paused time moves it), with faults to inject and a record of the
//! statements, and a tracing subscriber that keeps every event.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use lease_core::{
    BoxError, ClaimRequest, Finished, LeaseStore, SlotClaim, SlotRecord, UnfinishedRow,
};
use tokio::time::Instant;

/// 2025-12-01T10:00:00Z: where the store's clock starts.
pub const T0: i64 = 1_764_583_200_000;

/// A row of the lease table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Row {
    pub holder: String,
    pub instance: String,
    pub term: u64,
    pub expires_at_ms: i64,
    pub slot_ms: i64,
    pub unfinished_slot_ms: i64,
    pub rerun_slot_ms: i64,
}

impl Row {
    fn record(&self) -> SlotRecord {
        SlotRecord {
            slot_ms: self.slot_ms,
            unfinished_slot_ms: self.unfinished_slot_ms,
            rerun_slot_ms: self.rerun_slot_ms,
        }
    }
}

/// A statement the store answered (or failed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    ClaimSlot {
        name: String,
        slot: i64,
        at: i64,
        claimed: bool,
    },
    ClaimSlotFailed {
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
    LastSlot {
        name: String,
    },
}

#[derive(Debug, Default)]
struct State {
    rows: HashMap<String, Row>,
    calls: Vec<Call>,
    failing_claims: u32,
    lost_names: Vec<String>,
}

/// The protocol in memory, on Tokio's clock: `T0` plus the time elapsed
/// since the store was made.
#[derive(Debug, Clone)]
pub struct TestStore {
    start: Instant,
    state: Arc<Mutex<State>>,
}

impl TestStore {
    pub fn new() -> Self {
        TestStore {
            start: Instant::now(),
            state: Arc::default(),
        }
    }

    /// The store's now, in UTC ms.
    pub fn now(&self) -> i64 {
        T0 + i64::try_from(self.start.elapsed().as_millis()).unwrap()
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
        self.state.lock().unwrap().rows.get(name).cloned()
    }

    pub fn set_row(&self, name: &str, row: Row) {
        let _ = self.state.lock().unwrap().rows.insert(name.to_owned(), row);
    }

    pub fn calls(&self) -> Vec<Call> {
        self.state.lock().unwrap().calls.clone()
    }

    fn record(&self, call: Call) {
        self.state.lock().unwrap().calls.push(call);
    }
}

fn info(name: &str, r: &Row, now: i64) -> lease_core::LeaseInfo {
    lease_core::LeaseInfo {
        name: name.to_owned(),
        instance: r.instance.clone(),
        term: r.term,
        expires_at_ms: r.expires_at_ms,
        now_ms: now,
        slot_ms: r.slot_ms,
        unfinished_slot_ms: r.unfinished_slot_ms,
        rerun_slot_ms: r.rerun_slot_ms,
    }
}

fn io_error(what: &str) -> BoxError {
    Box::new(std::io::Error::new(
        std::io::ErrorKind::ConnectionRefused,
        what.to_owned(),
    ))
}

#[async_trait]
impl LeaseStore for TestStore {
    async fn claim(&self, claim: ClaimRequest<'_>) -> Result<Option<u64>, BoxError> {
        let ClaimRequest {
            name,
            holder,
            instance,
            lease_ms,
        } = claim;
        let now = self.now();
        let mut s = self.state.lock().unwrap();
        let row = s.rows.entry(name.to_owned()).or_default();
        if row.term > 0 && row.expires_at_ms > now {
            return Ok(None);
        }
        row.holder = holder.to_owned();
        row.instance = instance.to_owned();
        row.term += 1;
        row.expires_at_ms = now + lease_ms;
        Ok(Some(row.term))
    }

    async fn renew(
        &self,
        name: &str,
        holder: &str,
        lease_ms: i64,
    ) -> Result<Option<i64>, BoxError> {
        let now = self.now();
        let mut s = self.state.lock().unwrap();
        if s.lost_names.iter().any(|n| n == name) {
            return Ok(None);
        }
        match s.rows.get_mut(name) {
            Some(row) if row.holder == holder && row.expires_at_ms > now => {
                row.expires_at_ms = now + lease_ms;
                Ok(Some(now))
            }
            _ => Ok(None),
        }
    }

    /// One renewal after the other: this store has no batch statement.
    async fn renew_many(
        &self,
        leases: &[(&str, &str)],
        lease_ms: i64,
    ) -> Result<Vec<Option<i64>>, BoxError> {
        lease_core::renew_each(self, leases, lease_ms).await
    }

    async fn verify(&self, name: &str, holder: &str) -> Result<Option<u64>, BoxError> {
        let now = self.now();
        let s = self.state.lock().unwrap();
        Ok(s.rows
            .get(name)
            .filter(|r| r.holder == holder && r.expires_at_ms > now)
            .map(|r| r.term))
    }

    async fn release(&self, name: &str, holder: &str) -> Result<bool, BoxError> {
        let released = {
            let mut s = self.state.lock().unwrap();
            match s.rows.get_mut(name) {
                Some(row) if row.holder == holder => {
                    row.expires_at_ms = 0;
                    true
                }
                _ => false,
            }
        };
        self.record(Call::Release {
            name: name.to_owned(),
            released,
        });
        Ok(released)
    }

    async fn claim_slot(
        &self,
        claim: ClaimRequest<'_>,
        slot_ms: i64,
    ) -> Result<SlotClaim, BoxError> {
        let ClaimRequest {
            name,
            holder,
            instance,
            lease_ms,
        } = claim;
        let now = self.now();
        let outcome = {
            let mut s = self.state.lock().unwrap();
            if s.failing_claims > 0 {
                s.failing_claims -= 1;
                s.calls.push(Call::ClaimSlotFailed {
                    name: name.to_owned(),
                    slot: slot_ms,
                    at: now,
                });
                return Err(io_error("connection refused"));
            }
            match s.rows.get_mut(name) {
                None => {
                    let _ = s.rows.insert(
                        name.to_owned(),
                        Row {
                            holder: holder.to_owned(),
                            instance: instance.to_owned(),
                            term: 1,
                            expires_at_ms: now + lease_ms,
                            slot_ms,
                            unfinished_slot_ms: slot_ms,
                            rerun_slot_ms: 0,
                        },
                    );
                    SlotClaim::Claimed {
                        term: 1,
                        superseded: None,
                    }
                }
                Some(row) if row.record().claimable(row.expires_at_ms <= now, slot_ms) => {
                    let superseded = row.record().superseded();
                    row.holder = holder.to_owned();
                    row.instance = instance.to_owned();
                    row.term += 1;
                    row.expires_at_ms = now + lease_ms;
                    row.slot_ms = slot_ms;
                    row.unfinished_slot_ms = slot_ms;
                    SlotClaim::Claimed {
                        term: row.term,
                        superseded,
                    }
                }
                Some(_) => SlotClaim::Refused,
            }
        };
        self.record(Call::ClaimSlot {
            name: name.to_owned(),
            slot: slot_ms,
            at: now,
            claimed: matches!(outcome, SlotClaim::Claimed { .. }),
        });
        Ok(outcome)
    }

    async fn finish(
        &self,
        name: &str,
        holder: Option<&str>,
        slot_ms: i64,
        passed_ms: i64,
    ) -> Result<Finished, BoxError> {
        let now = self.now();
        let outcome = {
            let mut s = self.state.lock().unwrap();
            match s.rows.get_mut(name) {
                Some(row) if holder.is_some_and(|h| h == row.holder) => {
                    row.expires_at_ms = 0;
                    row.unfinished_slot_ms = 0;
                    if passed_ms > row.slot_ms && passed_ms <= now {
                        row.slot_ms = passed_ms;
                    }
                    Finished::Released
                }
                Some(row) if row.unfinished_slot_ms == slot_ms => {
                    row.unfinished_slot_ms = 0;
                    Finished::RecordedWithoutLease
                }
                _ => Finished::NotRecorded,
            }
        };
        self.record(Call::Finish {
            name: name.to_owned(),
            slot: slot_ms,
            passed: passed_ms,
            outcome,
        });
        Ok(outcome)
    }

    async fn find_unfinished(&self, names: &[&str]) -> Result<Vec<UnfinishedRow>, BoxError> {
        let now = self.now();
        let found = {
            let s = self.state.lock().unwrap();
            names
                .iter()
                .filter_map(|n| s.rows.get(*n).map(|r| (*n, r)))
                .filter(|(_, r)| {
                    r.unfinished_slot_ms == r.slot_ms
                        && r.rerun_slot_ms < r.slot_ms
                        && r.expires_at_ms <= now
                })
                .map(|(n, r)| UnfinishedRow {
                    name: n.to_owned(),
                    term: r.term,
                    slot_ms: r.slot_ms,
                })
                .collect()
        };
        self.record(Call::FindUnfinished { at: now });
        Ok(found)
    }

    async fn claim_rerun(&self, claim: ClaimRequest<'_>, term: u64) -> Result<bool, BoxError> {
        let ClaimRequest {
            name,
            holder,
            instance,
            lease_ms,
        } = claim;
        let now = self.now();
        let claimed = {
            let mut s = self.state.lock().unwrap();
            match s.rows.get_mut(name) {
                Some(row)
                    if row.term == term
                        && row.unfinished_slot_ms == row.slot_ms
                        && row.rerun_slot_ms < row.slot_ms
                        && row.expires_at_ms <= now =>
                {
                    row.holder = holder.to_owned();
                    row.instance = instance.to_owned();
                    row.term += 1;
                    row.expires_at_ms = now + lease_ms;
                    row.rerun_slot_ms = row.slot_ms;
                    true
                }
                _ => false,
            }
        };
        self.record(Call::ClaimRerun {
            name: name.to_owned(),
            claimed,
        });
        Ok(claimed)
    }

    async fn last_slot(&self, name: &str) -> Result<Option<i64>, BoxError> {
        self.record(Call::LastSlot {
            name: name.to_owned(),
        });
        let s = self.state.lock().unwrap();
        Ok(s.rows.get(name).map(|r| r.slot_ms))
    }

    async fn force_release(&self, name: &str, term: u64) -> Result<bool, BoxError> {
        let now = self.now();
        let mut s = self.state.lock().unwrap();
        Ok(match s.rows.get_mut(name) {
            Some(r) if r.term == term && r.expires_at_ms > now => {
                r.expires_at_ms = 0;
                true
            }
            _ => false,
        })
    }

    async fn get(&self, name: &str) -> Result<Option<lease_core::LeaseInfo>, BoxError> {
        let now = self.now();
        let s = self.state.lock().unwrap();
        Ok(s.rows.get(name).map(|r| info(name, r, now)))
    }

    async fn list(&self, prefix: &str, limit: u32) -> Result<Vec<lease_core::LeaseInfo>, BoxError> {
        let now = self.now();
        let s = self.state.lock().unwrap();
        let mut names: Vec<&String> = s.rows.keys().filter(|n| n.starts_with(prefix)).collect();
        names.sort();
        Ok(names
            .into_iter()
            .take(limit as usize)
            .map(|n| info(n, &s.rows[n], now))
            .collect())
    }

    async fn now_ms(&self) -> Result<i64, BoxError> {
        Ok(self.now())
    }

    async fn migrate(&self) -> Result<(), BoxError> {
        Ok(())
    }
}

/// Every event logged while it is the default subscriber: level, message
/// and fields, one line each.
#[derive(Debug, Clone, Default)]
pub struct Logs {
    lines: Arc<Mutex<Vec<String>>>,
    next_span: Arc<AtomicU64>,
}

impl Logs {
    /// Installs a new one as this thread's default subscriber (the paused
    /// tests run on one thread) until the guard is dropped.
    pub fn capture() -> (Logs, tracing::subscriber::DefaultGuard) {
        let logs = Logs::default();
        let guard = tracing::subscriber::set_default(logs.clone());
        (logs, guard)
    }

    pub fn lines(&self) -> Vec<String> {
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
        self.lines.lock().unwrap().push(line.0);
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
