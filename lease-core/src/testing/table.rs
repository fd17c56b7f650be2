//! The capabilities' lease table for their tests on paused time: the
//! reference [`MemoryStore`] on Tokio's clock, seen through a wrapper with
//! the knobs those tests turn (a database that is down, a log of the claims,
//! a count of the releases, a name handed to someone else).

use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use async_trait::async_trait;
use tokio::time::Instant;

use crate::error::{BoxError, DbErrorKind, Op};
use crate::forward::ForwardingStore;
use crate::info::LeaseInfo;
use crate::memory::{MemoryStore, Row};
use crate::store::{ClaimRequest, LeaseStore};
use crate::token::Token;

/// Where the table's clock starts, in UTC ms.
const START_MS: i64 = 1_000_000;

/// What every statement fails with while the table is down.
#[derive(Debug)]
struct Down;

impl fmt::Display for Down {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the database is down")
    }
}

impl std::error::Error for Down {}

/// The reference store on Tokio's clock (from [`START_MS`]), migrated, with
/// knobs.
#[derive(Debug)]
pub(crate) struct Table {
    inner: MemoryStore,
    base: Instant,
    down: AtomicBool,
    /// (when, instance, claimed?) of every claim that reached the table.
    claims: Mutex<Vec<(Instant, String, bool)>>,
    /// Every release that reached the table, given back or not.
    releases: AtomicUsize,
    /// Every read of one row (`get`) that reached the table.
    gets: AtomicUsize,
}

impl Table {
    pub(crate) fn new() -> Self {
        Table {
            inner: MemoryStore::new().migrated().on_tokio_clock(START_MS),
            base: Instant::now(),
            down: AtomicBool::new(false),
            claims: Mutex::default(),
            releases: AtomicUsize::new(0),
            gets: AtomicUsize::new(0),
        }
    }

    /// Every statement fails while `down` (a connection failure: retryable).
    pub(crate) fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// Someone else claims `name` now, whatever holds it: a takeover.
    /// Returns the new term.
    pub(crate) fn steal(&self, name: &str, instance: &str, lease_ms: i64) -> u64 {
        let row = self.inner.row(name).unwrap_or_default();
        let term = row.term + 1;
        self.inner.set_row(
            name,
            Row {
                holder: "stolen".into(),
                instance: instance.into(),
                term,
                expires_at_ms: self.inner.now() + lease_ms,
                ..row
            },
        );
        term
    }

    /// The claim attempts so far: (ms since the table was made, instance,
    /// claimed?).
    pub(crate) fn claims(&self) -> Vec<(u64, String, bool)> {
        self.claims
            .lock()
            .unwrap()
            .iter()
            .map(|(at, who, won)| {
                let ms = u64::try_from((*at - self.base).as_millis()).unwrap();
                (ms, who.clone(), *won)
            })
            .collect()
    }

    /// How many releases reached the table.
    pub(crate) fn releases(&self) -> usize {
        self.releases.load(Ordering::SeqCst)
    }

    /// How many reads of one row (`get`) reached the table.
    pub(crate) fn gets(&self) -> usize {
        self.gets.load(Ordering::SeqCst)
    }

    /// The row as `get` reads it, read directly (also while down).
    pub(crate) fn info(&self, name: &str) -> Option<LeaseInfo> {
        let now_ms = self.inner.now();
        self.inner.row(name).map(|row| LeaseInfo {
            name: name.to_owned(),
            instance: row.instance,
            term: row.term,
            expires_at_ms: row.expires_at_ms,
            now_ms,
            slot_ms: row.slot_ms,
            unfinished_slot_ms: row.unfinished_slot_ms,
            rerun_slot_ms: row.rerun_slot_ms,
        })
    }
}

#[async_trait]
impl ForwardingStore for Table {
    fn inner(&self) -> &dyn LeaseStore {
        &self.inner
    }

    async fn before(&self, _op: Op) -> Result<(), BoxError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(Box::new(Down));
        }
        Ok(())
    }

    async fn claim(&self, claim: ClaimRequest<'_>) -> Result<Option<u64>, BoxError> {
        self.before(Op::Claim).await?;
        let instance = claim.instance.to_owned();
        let claimed = self.inner.claim(claim).await?;
        self.claims
            .lock()
            .unwrap()
            .push((Instant::now(), instance, claimed.is_some()));
        Ok(claimed)
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>, BoxError> {
        self.before(Op::Get).await?;
        let _ = self.gets.fetch_add(1, Ordering::SeqCst);
        self.inner.get(name).await
    }

    async fn release(&self, name: &str, token: Token<'_>) -> Result<bool, BoxError> {
        self.before(Op::Release).await?;
        let _ = self.releases.fetch_add(1, Ordering::SeqCst);
        self.inner.release(name, token).await
    }

    fn classify(&self, error: &(dyn std::error::Error + 'static)) -> DbErrorKind {
        if error.is::<Down>() {
            DbErrorKind::Connection
        } else {
            self.inner.classify(error)
        }
    }
}
