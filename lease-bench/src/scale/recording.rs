//! The store under the scale run: it forwards every call, and records when
//! each lease's renewals answered, the statements' latencies, the batches,
//! and the writes sent.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use dblease::{ClaimRequest, LeaseStore, Renewed, Token};
use lease_core::ForwardingStore;
use tokio::time::Instant;

use super::BoxError;
use super::histogram::Histogram;

/// What the recording store saw.
pub(crate) struct Record {
    /// When each lease's last renewal (or its claim) answered.
    pub(crate) last: HashMap<String, Instant>,
    /// Whether the window is on: gaps and latencies are counted only then.
    pub(crate) measuring: bool,
    /// Gaps between a lease's successive renewals, over the window.
    pub(crate) gaps: Histogram,
    /// Latency of each renewal statement (a batch, or one renewal), over
    /// the window.
    pub(crate) statements: Histogram,
    /// Size of each batch, over the window.
    pub(crate) batch_rows: u64,
    pub(crate) batches: u64,
    pub(crate) max_batch: usize,
    /// Store calls that write (claims, renewals, batches, releases): each
    /// is one transaction.
    pub(crate) writes: u64,
    /// Rows renewed.
    pub(crate) renewed: u64,
    /// Batches in flight now, and the most at once over the window.
    pub(crate) in_flight: usize,
    pub(crate) max_in_flight: usize,
}

/// A store that forwards every call and records the renewals' timing.
pub(crate) struct Recording {
    inner: Arc<dyn LeaseStore>,
    record: Mutex<Record>,
}

impl std::fmt::Debug for Recording {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recording").finish_non_exhaustive()
    }
}

impl Recording {
    pub(crate) fn new(inner: Arc<dyn LeaseStore>) -> Self {
        Recording {
            inner,
            record: Mutex::new(Record {
                last: HashMap::new(),
                measuring: false,
                gaps: Histogram::new(),
                statements: Histogram::new(),
                batch_rows: 0,
                batches: 0,
                max_batch: 0,
                writes: 0,
                renewed: 0,
                in_flight: 0,
                max_in_flight: 0,
            }),
        }
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Record> {
        self.record
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts (or stops) counting, clearing what was counted.
    pub(crate) fn measure(&self, on: bool) {
        let mut r = self.lock();
        r.measuring = on;
        if on {
            r.gaps = Histogram::new();
            r.statements = Histogram::new();
            r.batch_rows = 0;
            r.batches = 0;
            r.max_batch = 0;
            r.max_in_flight = r.in_flight;
        }
    }

    fn renewed<'a>(&self, names: impl Iterator<Item = &'a str>, sent: Instant) {
        let now = Instant::now();
        let mut r = self.lock();
        r.writes += 1;
        let measuring = r.measuring;
        if measuring {
            r.statements.record(now - sent);
        }
        let mut renewed = 0;
        let mut gaps = Vec::new();
        for name in names {
            renewed += 1;
            if let Some(last) = r.last.get_mut(name) {
                if measuring {
                    gaps.push(now - *last);
                }
                *last = now;
            }
        }
        r.renewed += renewed;
        for gap in gaps {
            r.gaps.record(gap);
        }
    }
}

#[async_trait]
impl ForwardingStore for Recording {
    fn inner(&self) -> &dyn LeaseStore {
        &*self.inner
    }

    async fn claim(&self, claim: ClaimRequest<'_>) -> Result<Option<u64>, BoxError> {
        let ClaimRequest { name, .. } = claim;
        let claimed = self.inner.claim(claim).await?;
        let mut r = self.lock();
        r.writes += 1;
        if claimed.is_some() {
            let _ = r.last.insert(name.to_owned(), Instant::now());
        }
        Ok(claimed)
    }

    async fn renew(
        &self,
        name: &str,
        token: Token<'_>,
        lease_ms: i64,
    ) -> Result<Option<Renewed>, BoxError> {
        let sent = Instant::now();
        let held = self.inner.renew(name, token, lease_ms).await?;
        if held.is_some() {
            self.renewed(std::iter::once(name), sent);
        }
        Ok(held)
    }

    async fn renew_many(
        &self,
        leases: &[(&str, Token<'_>)],
        lease_ms: i64,
    ) -> Result<Vec<Option<Renewed>>, BoxError> {
        {
            let mut r = self.lock();
            r.in_flight += 1;
            r.max_in_flight = r.max_in_flight.max(r.in_flight);
            if r.measuring {
                r.batches += 1;
                r.batch_rows += leases.len() as u64;
                r.max_batch = r.max_batch.max(leases.len());
            }
        }
        let sent = Instant::now();
        let held = self.inner.renew_many(leases, lease_ms).await;
        self.lock().in_flight -= 1;
        let held = held?;
        self.renewed(
            leases
                .iter()
                .zip(&held)
                .filter(|(_, held)| held.is_some())
                .map(|((name, _), _)| *name),
            sent,
        );
        Ok(held)
    }

    async fn release(&self, name: &str, token: Token<'_>) -> Result<bool, BoxError> {
        let released = self.inner.release(name, token).await?;
        let mut r = self.lock();
        r.writes += 1;
        let _ = r.last.remove(name);
        Ok(released)
    }
}
