//! The protocol in memory: a reference store, and the faults that break it
//! on purpose. Behind the `test-util` cargo feature (as Tokio's test
//! utilities are): a dev-dependency, never a production dependency.
//!
//! [`MemoryStore`] implements the protocol in plain Rust over a mutex: the
//! model the conformance suite (`lease-conformance`) is checked against, and
//! the one in-memory store of this workspace's tests. Built with a [`Fault`],
//! it breaks one rule of the protocol, the way a backend might by mistake;
//! the suite's own tests show that the matching cases then fail. It keeps
//! nothing across processes, so it is no backend for production.
//!
//! It also serves as a store for tests of code built on the protocol: on
//! Tokio's clock ([`MemoryStore::on_tokio_clock`]) paused time moves its
//! expiries, and [`MemoryStore::row`] / [`MemoryStore::set_row`] read and
//! plant rows directly. A test wrapper that injects faults or records the
//! calls is a [`ForwardingStore`](crate::ForwardingStore) over it.
//!
//! ```toml
//! [dev-dependencies]
//! lease-core = { version = "0.1", features = ["test-util"] }
//! ```

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;

use crate::error::{BoxError, DbErrorKind};
use crate::info::LeaseInfo;
use crate::store::{
    ClaimRequest, FinishRequest, Finished, InstantClaim, InstantRecord, LeaseStore, Renewed,
    Unfinished,
};
use crate::time::UtcMillis;
use crate::token::Token;

/// A rule of the protocol that a [`MemoryStore`] breaks on purpose.
/// (`lease_conformance::reference::CAUGHT_BY` names the cases of the suite
/// each one fails.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Fault {
    /// Claims ignore expiry: a held name is taken.
    IgnoresExpiry,
    /// The term never moves past 1.
    FrozenTerm,
    /// A claim reads, yields, then writes: concurrent claimants can all win.
    RacyClaim,
    /// A renewal matches the name only, not the holder.
    RenewIgnoresHolder,
    /// A renewal matches an expired lease.
    RenewIgnoresExpiry,
    /// A renewal does not move the expiry.
    RenewDoesNotExtend,
    /// A renewal answers a now other than the one it wrote with (a minute
    /// behind: the claim's, a cached one, the process's).
    RenewReturnsStaleNow,
    /// verify matches an expired lease.
    VerifyIgnoresExpiry,
    /// A release reports success but leaves the lease to run out.
    ReleaseKeepsLease,
    /// Names compare without case.
    CaseInsensitiveNames,
    /// Trailing spaces are ignored when names compare (SQL's PAD SPACE).
    PadSpaceNames,
    /// The clock counts seconds, not milliseconds.
    ClockInSeconds,
    /// An instant claim does not require a later instant.
    InstantOrderIgnored,
    /// An instant claim reports nothing given up.
    SupersededNotReported,
    /// finish takes `passed` along even when it is in the database's future.
    FinishTakesFuturePassed,
    /// finish's fallback records the end whatever instant is unfinished.
    FinishFallbackIgnoresInstant,
    /// finish without the lease records nothing.
    FinishWithoutLeaseRecordsNothing,
    /// find ignores expiry: instants of rounds still running are found.
    FindIgnoresExpiry,
    /// Claim again does not compare the term.
    RerunIgnoresTerm,
    /// Claim again does not mark the instant as rerun.
    RerunNotRecorded,
    /// migrate fails when the table exists already.
    MigrateNotIdempotent,
    /// A claim over an existing row leaves its instance as it was.
    InstanceNotRecorded,
    /// get and list read the row without the database's now (0), so an
    /// expired lease reads as held.
    InfoWithoutClock,
    /// list ignores the prefix and the limit.
    ListIgnoresPrefix,
    /// A forced release frees the name whatever its term.
    ForceReleaseIgnoresTerm,
    /// A missing table is not told apart from a passing failure.
    MissingTableUnclassified,
    /// A resign request asks whoever holds the name, whatever its term.
    ResignIgnoresTerm,
    /// A renewal never reports the resign request.
    RenewHidesResign,
    /// A resign request outlives its term: the renewals of the holders
    /// after it report it too (a flag, where the column must hold a term).
    ResignOutlivesTerm,
}

/// What every statement on a table not yet migrated fails with.
const NO_TABLE: &str = "no such table: the lease table was not migrated";

/// A row of a [`MemoryStore`]'s lease table: the columns of the protocol's
/// table, read with [`MemoryStore::row`] and planted with
/// [`MemoryStore::set_row`]. The default is a row no one holds and no
/// instant was ever claimed on (term 0, every time 0).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Row {
    /// The holder's token.
    pub holder: String,
    /// The holding instance.
    pub instance: String,
    /// The term: 1 for the first claim, one more for each claim after.
    pub term: u64,
    /// When the lease runs out, in UTC ms of the store's clock (0: released).
    pub expires_at_ms: i64,
    /// The last instant claimed (0: none).
    pub slot_ms: i64,
    /// The instant whose round has not finished (0: none).
    pub unfinished_slot_ms: i64,
    /// The instant claimed a second time (0: none).
    pub rerun_slot_ms: i64,
    /// The term whose holder was asked to resign (0: none).
    pub resign_term: u64,
}

#[derive(Debug, Default)]
struct Table {
    created: bool,
    rows: HashMap<String, Row>,
}

/// Where a [`MemoryStore`] reads its now.
#[derive(Debug, Clone, Copy, Default)]
enum Clock {
    /// The system's clock, as a database's.
    #[default]
    System,
    /// `start_ms` plus the time Tokio's clock has moved since `base`.
    Tokio {
        base: tokio::time::Instant,
        start_ms: i64,
    },
}

/// The protocol in memory: a reference model, optionally with a [`Fault`].
///
/// Like a database, it answers nothing before [`migrate`](LeaseStore::migrate)
/// (or [`migrated`](Self::migrated)), and reads the system's clock unless
/// put [`on_tokio_clock`](Self::on_tokio_clock).
#[derive(Debug, Default)]
pub struct MemoryStore {
    fault: Option<Fault>,
    clock: Clock,
    table: Mutex<Table>,
}

impl MemoryStore {
    /// A correct store.
    pub fn new() -> Self {
        Self::default()
    }

    /// A store that breaks one rule.
    pub fn with_fault(fault: Fault) -> Self {
        MemoryStore {
            fault: Some(fault),
            ..Self::default()
        }
    }

    /// This store with its table created, as after
    /// [`migrate`](LeaseStore::migrate): for tests that build it outside
    /// async code.
    ///
    /// ```
    /// use lease_core::memory::{MemoryStore, Row};
    ///
    /// let store = MemoryStore::new().migrated();
    /// store.set_row("job", Row { term: 3, ..Row::default() });
    /// assert_eq!(store.row("job").map(|r| r.term), Some(3));
    /// ```
    #[must_use]
    pub fn migrated(mut self) -> Self {
        self.table
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .created = true;
        self
    }

    /// This store on Tokio's clock: its now is `start_ms` (UTC ms) plus the
    /// time [`tokio::time::Instant`] has moved since this call. On paused
    /// time (`#[tokio::test(start_paused = true)]`) leases then expire as
    /// the test advances time, not as the wall clock runs, and a test knows
    /// the store's clock to the millisecond.
    ///
    /// Call it in the runtime whose clock the store should follow (outside
    /// one, Tokio's clock is the system's monotonic clock).
    ///
    /// ```
    /// use lease_core::memory::MemoryStore;
    ///
    /// // 2025-12-01T10:00:00Z
    /// let store = MemoryStore::new().on_tokio_clock(1_764_583_200_000);
    /// let now = store.now();
    /// assert!((1_764_583_200_000..1_764_583_260_000).contains(&now));
    /// ```
    #[must_use]
    pub fn on_tokio_clock(mut self, start_ms: i64) -> Self {
        self.clock = Clock::Tokio {
            base: tokio::time::Instant::now(),
            start_ms,
        };
        self
    }

    /// The store's now in UTC ms, as its statements read it (and as
    /// [`now_ms`](LeaseStore::now_ms) answers it).
    pub fn now(&self) -> i64 {
        let ms = match self.clock {
            Clock::System => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
                .unwrap_or(0),
            Clock::Tokio { base, start_ms } => start_ms
                .saturating_add(i64::try_from(base.elapsed().as_millis()).unwrap_or(i64::MAX)),
        };
        if self.has(Fault::ClockInSeconds) {
            ms / 1000
        } else {
            ms
        }
    }

    /// The row of `name`, if it has one: read directly, not through a
    /// statement (so also before the table is migrated).
    pub fn row(&self, name: &str) -> Option<Row> {
        self.table().rows.get(&self.key(name)).cloned()
    }

    /// Plants `row` as the row of `name`, replacing any: the state a test
    /// starts from (a round cut short, an instant claimed long ago).
    pub fn set_row(&self, name: &str, row: Row) {
        let _ = self.table().rows.insert(self.key(name), row);
    }

    /// The table for [`row`](Self::row) and [`set_row`](Self::set_row),
    /// even after a panic elsewhere: a test wants to see the rows then too.
    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn has(&self, fault: Fault) -> bool {
        self.fault == Some(fault)
    }

    fn key(&self, name: &str) -> String {
        if self.has(Fault::CaseInsensitiveNames) {
            name.to_lowercase()
        } else if self.has(Fault::PadSpaceNames) {
            name.trim_end_matches(' ').to_owned()
        } else {
            name.to_owned()
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut Table) -> Result<T, BoxError>) -> Result<T, BoxError> {
        let mut table = self
            .table
            .lock()
            .map_err(|_| BoxError::from("the memory store's lock is poisoned"))?;
        if !table.created {
            return Err(NO_TABLE.into());
        }
        f(&mut table)
    }

    fn info(&self, name: &str, row: &Row) -> LeaseInfo {
        LeaseInfo {
            name: name.to_owned(),
            instance: row.instance.clone(),
            term: row.term,
            expires_at_ms: row.expires_at_ms,
            now_ms: if self.has(Fault::InfoWithoutClock) {
                0
            } else {
                self.now()
            },
            slot_ms: row.slot_ms,
            unfinished_slot_ms: row.unfinished_slot_ms,
            rerun_slot_ms: row.rerun_slot_ms,
        }
    }

    fn next_term(&self, term: u64) -> u64 {
        if self.has(Fault::FrozenTerm) {
            1
        } else {
            term + 1
        }
    }

    fn new_row(holder: &str, instance: &str, expires_at_ms: i64, slot_ms: i64) -> Row {
        Row {
            holder: holder.to_owned(),
            instance: instance.to_owned(),
            term: 1,
            expires_at_ms,
            slot_ms,
            unfinished_slot_ms: slot_ms,
            rerun_slot_ms: 0,
            resign_term: 0,
        }
    }

    /// Whether the renewal of `row` reports a resign request.
    fn resign_asked(&self, row: &Row) -> bool {
        if self.has(Fault::RenewHidesResign) {
            false
        } else if self.has(Fault::ResignOutlivesTerm) {
            row.resign_term != 0
        } else {
            row.resign_term == row.term
        }
    }
}

#[async_trait]
impl LeaseStore for MemoryStore {
    async fn claim(&self, claim: ClaimRequest<'_>) -> Result<Option<u64>, BoxError> {
        let ClaimRequest {
            name,
            token,
            instance,
            lease_ms,
        } = claim;
        let holder = token.expose();
        let key = self.key(name);
        if self.has(Fault::RacyClaim) {
            let free = self.with(|t| {
                let now = self.now();
                Ok(t.rows.get(&key).is_none_or(|r| r.expires_at_ms <= now))
            })?;
            if !free {
                return Ok(None);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
            return self.with(|t| {
                let now = self.now();
                let term = t.rows.get(&key).map_or(1, |r| r.term + 1);
                let row = t
                    .rows
                    .entry(key.clone())
                    .or_insert_with(|| Self::new_row(holder, instance, now + lease_ms, 0));
                row.holder = holder.to_owned();
                if !self.has(Fault::InstanceNotRecorded) {
                    row.instance = instance.to_owned();
                }
                row.term = term;
                row.expires_at_ms = now + lease_ms;
                Ok(Some(term))
            });
        }
        self.with(|t| {
            let now = self.now();
            match t.rows.get_mut(&key) {
                None => {
                    let _ = t
                        .rows
                        .insert(key, Self::new_row(holder, instance, now + lease_ms, 0));
                    Ok(Some(1))
                }
                Some(row) if row.expires_at_ms <= now || self.has(Fault::IgnoresExpiry) => {
                    row.holder = holder.to_owned();
                    if !self.has(Fault::InstanceNotRecorded) {
                        row.instance = instance.to_owned();
                    }
                    row.term = self.next_term(row.term);
                    row.expires_at_ms = now + lease_ms;
                    Ok(Some(row.term))
                }
                Some(_) => Ok(None),
            }
        })
    }

    async fn renew(
        &self,
        name: &str,
        token: Token<'_>,
        lease_ms: i64,
    ) -> Result<Option<Renewed>, BoxError> {
        let holder = token.expose();
        self.with(|t| {
            let now = self.now();
            match t.rows.get_mut(&self.key(name)) {
                Some(row)
                    if (row.holder == holder || self.has(Fault::RenewIgnoresHolder))
                        && (row.expires_at_ms > now || self.has(Fault::RenewIgnoresExpiry)) =>
                {
                    if !self.has(Fault::RenewDoesNotExtend) {
                        row.expires_at_ms = now + lease_ms;
                    }
                    let now_ms = if self.has(Fault::RenewReturnsStaleNow) {
                        now - 60_000
                    } else {
                        now
                    };
                    Ok(Some(Renewed {
                        now_ms,
                        resign: self.resign_asked(row),
                    }))
                }
                _ => Ok(None),
            }
        })
    }

    /// One renewal after the other: this store has no batch statement.
    async fn renew_many(
        &self,
        leases: &[(&str, Token<'_>)],
        lease_ms: i64,
    ) -> Result<Vec<Option<Renewed>>, BoxError> {
        crate::store::renew_each(self, leases, lease_ms).await
    }

    async fn verify(&self, name: &str, token: Token<'_>) -> Result<Option<u64>, BoxError> {
        let holder = token.expose();
        self.with(|t| {
            let now = self.now();
            Ok(t.rows.get(&self.key(name)).and_then(|row| {
                (row.holder == holder
                    && (row.expires_at_ms > now || self.has(Fault::VerifyIgnoresExpiry)))
                .then_some(row.term)
            }))
        })
    }

    async fn release(&self, name: &str, token: Token<'_>) -> Result<bool, BoxError> {
        let holder = token.expose();
        self.with(|t| match t.rows.get_mut(&self.key(name)) {
            // Only a lease still held is given back: one released by force,
            // or run out, was already gone.
            Some(row) if row.holder == holder && row.expires_at_ms > self.now() => {
                if !self.has(Fault::ReleaseKeepsLease) {
                    row.expires_at_ms = 0;
                }
                Ok(true)
            }
            _ => Ok(false),
        })
    }

    async fn claim_instant(
        &self,
        claim: ClaimRequest<'_>,
        slot_ms: i64,
    ) -> Result<InstantClaim, BoxError> {
        let ClaimRequest {
            name,
            token,
            instance,
            lease_ms,
        } = claim;
        let holder = token.expose();
        self.with(|t| {
            let now = self.now();
            let key = self.key(name);
            let Some(row) = t.rows.get_mut(&key) else {
                let _ = t.rows.insert(
                    key,
                    Self::new_row(holder, instance, now + lease_ms, slot_ms),
                );
                return Ok(InstantClaim::Claimed {
                    term: 1,
                    superseded: None,
                });
            };
            let later = slot_ms > row.slot_ms || self.has(Fault::InstantOrderIgnored);
            if row.expires_at_ms > now || !later {
                return Ok(InstantClaim::Refused);
            }
            let superseded = InstantRecord {
                slot_ms: row.slot_ms,
                unfinished_slot_ms: row.unfinished_slot_ms,
                rerun_slot_ms: row.rerun_slot_ms,
            }
            .superseded(name, row.term)
            .filter(|_| !self.has(Fault::SupersededNotReported));
            row.holder = holder.to_owned();
            if !self.has(Fault::InstanceNotRecorded) {
                row.instance = instance.to_owned();
            }
            row.term = self.next_term(row.term);
            row.expires_at_ms = now + lease_ms;
            row.slot_ms = slot_ms;
            row.unfinished_slot_ms = slot_ms;
            Ok(InstantClaim::Claimed {
                term: row.term,
                superseded,
            })
        })
    }

    async fn finish(&self, finish: FinishRequest<'_>) -> Result<Finished, BoxError> {
        let FinishRequest {
            name,
            token,
            instant_ms: slot_ms,
            passed_ms,
        } = finish;
        let holder = token.map(Token::expose);
        self.with(|t| {
            let now = self.now();
            let Some(row) = t.rows.get_mut(&self.key(name)) else {
                return Ok(Finished::NotRecorded);
            };
            if holder.is_some_and(|h| h == row.holder) {
                row.expires_at_ms = 0;
                row.unfinished_slot_ms = 0;
                let in_reach = passed_ms <= now || self.has(Fault::FinishTakesFuturePassed);
                if passed_ms > row.slot_ms && in_reach {
                    row.slot_ms = passed_ms;
                }
                return Ok(Finished::Released);
            }
            if self.has(Fault::FinishWithoutLeaseRecordsNothing) {
                return Ok(Finished::NotRecorded);
            }
            if row.unfinished_slot_ms == slot_ms || self.has(Fault::FinishFallbackIgnoresInstant) {
                row.unfinished_slot_ms = 0;
                Ok(Finished::RecordedWithoutLease)
            } else {
                Ok(Finished::NotRecorded)
            }
        })
    }

    async fn find_unfinished(&self, names: &[&str]) -> Result<Vec<Unfinished>, BoxError> {
        self.with(|t| {
            let now = self.now();
            Ok(names
                .iter()
                .filter_map(|name| {
                    let row = t.rows.get(&self.key(name))?;
                    (row.unfinished_slot_ms == row.slot_ms
                        && row.rerun_slot_ms < row.slot_ms
                        && (row.expires_at_ms <= now || self.has(Fault::FindIgnoresExpiry)))
                    .then(|| {
                        let instant = UtcMillis::from_millis(row.slot_ms);
                        Unfinished::new(*name, instant, false, row.term)
                    })
                })
                .collect())
        })
    }

    async fn claim_rerun(&self, claim: ClaimRequest<'_>, term: u64) -> Result<bool, BoxError> {
        let ClaimRequest {
            name,
            token,
            instance,
            lease_ms,
        } = claim;
        let holder = token.expose();
        self.with(|t| {
            let now = self.now();
            match t.rows.get_mut(&self.key(name)) {
                Some(row)
                    if (row.term == term || self.has(Fault::RerunIgnoresTerm))
                        && row.unfinished_slot_ms == row.slot_ms
                        && row.rerun_slot_ms < row.slot_ms
                        && row.expires_at_ms <= now =>
                {
                    row.holder = holder.to_owned();
                    if !self.has(Fault::InstanceNotRecorded) {
                        row.instance = instance.to_owned();
                    }
                    row.term = self.next_term(row.term);
                    row.expires_at_ms = now + lease_ms;
                    if !self.has(Fault::RerunNotRecorded) {
                        row.rerun_slot_ms = row.slot_ms;
                    }
                    Ok(true)
                }
                _ => Ok(false),
            }
        })
    }

    async fn last_instant(&self, name: &str) -> Result<Option<i64>, BoxError> {
        self.with(|t| Ok(t.rows.get(&self.key(name)).map(|row| row.slot_ms)))
    }

    async fn force_release(&self, name: &str, term: u64) -> Result<bool, BoxError> {
        let key = self.key(name);
        self.with(|t| {
            let now = self.now();
            Ok(match t.rows.get_mut(&key) {
                Some(row)
                    if (row.term == term || self.has(Fault::ForceReleaseIgnoresTerm))
                        && row.expires_at_ms > now =>
                {
                    row.expires_at_ms = 0;
                    true
                }
                _ => false,
            })
        })
    }

    async fn request_resign(&self, name: &str, term: u64) -> Result<bool, BoxError> {
        let key = self.key(name);
        self.with(|t| {
            let now = self.now();
            Ok(match t.rows.get_mut(&key) {
                Some(row)
                    if (row.term == term || self.has(Fault::ResignIgnoresTerm))
                        && row.expires_at_ms > now =>
                {
                    row.resign_term = row.term;
                    true
                }
                _ => false,
            })
        })
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>, BoxError> {
        let key = self.key(name);
        self.with(|t| Ok(t.rows.get(&key).map(|row| self.info(&key, row))))
    }

    async fn list(&self, prefix: &str, limit: u32) -> Result<Vec<LeaseInfo>, BoxError> {
        self.with(|t| {
            let mut names: Vec<&String> = t.rows.keys().collect();
            names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
            let ignore = self.has(Fault::ListIgnoresPrefix);
            Ok(names
                .into_iter()
                .filter(|name| ignore || name.starts_with(prefix))
                .take(if ignore { usize::MAX } else { limit as usize })
                .map(|name| self.info(name, &t.rows[name]))
                .collect())
        })
    }

    async fn now_ms(&self) -> Result<i64, BoxError> {
        Ok(self.now())
    }

    fn classify(&self, error: &(dyn std::error::Error + 'static)) -> DbErrorKind {
        if self.has(Fault::MissingTableUnclassified) {
            DbErrorKind::Unclassified
        } else if error.to_string().starts_with(NO_TABLE) {
            DbErrorKind::MissingTable
        } else {
            DbErrorKind::Other
        }
    }

    async fn migrate(&self) -> Result<(), BoxError> {
        let mut table = self
            .table
            .lock()
            .map_err(|_| BoxError::from("the memory store's lock is poisoned"))?;
        if table.created && self.has(Fault::MigrateNotIdempotent) {
            return Err("table already exists".into());
        }
        table.created = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(name: &str, lease_ms: i64) -> ClaimRequest<'_> {
        ClaimRequest {
            name,
            token: Token::new("token"),
            instance: "web-1",
            lease_ms,
        }
    }

    #[tokio::test]
    async fn on_tokio_clock_counts_from_its_start_and_expires_leases_by_it() {
        let store = MemoryStore::new().migrated().on_tokio_clock(1_000);
        let start = store.now();
        assert!((1_000..61_000).contains(&start), "{start}");
        assert_eq!(store.now_ms().await.unwrap(), store.now());
        assert_eq!(store.claim(request("a", 30)).await.unwrap(), Some(1));
        let row = store.row("a").unwrap();
        assert!(row.expires_at_ms >= start + 30, "{row:?}");
        tokio::time::sleep(Duration::from_millis(80)).await;
        assert!(store.now() >= start + 80);
        assert_eq!(
            store.verify("a", Token::new("token")).await.unwrap(),
            None,
            "expired by the store's clock"
        );
    }

    #[tokio::test]
    async fn a_planted_row_is_what_the_statements_find() {
        let store = MemoryStore::new().migrated();
        let now = store.now();
        store.set_row(
            "job",
            Row {
                term: 3,
                slot_ms: now - 60_000,
                unfinished_slot_ms: now - 60_000,
                ..Row::default()
            },
        );
        let found = store.find_unfinished(&["job"]).await.unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(
            (found[0].term(), found[0].instant.as_millis()),
            (3, now - 60_000)
        );
        assert!(store.claim_rerun(request("job", 15_000), 3).await.unwrap());
        let row = store.row("job").unwrap();
        assert_eq!((row.term, row.rerun_slot_ms), (4, now - 60_000));
        assert_eq!(
            (row.holder.as_str(), row.instance.as_str()),
            ("token", "web-1")
        );
        assert_eq!(store.row("other"), None);
    }

    #[tokio::test]
    async fn without_migrate_statements_fail_as_on_a_missing_table() {
        let store = MemoryStore::new();
        let err = store.last_instant("job").await.unwrap_err();
        assert_eq!(store.classify(&*err), DbErrorKind::MissingTable);
        assert_eq!(
            MemoryStore::new()
                .migrated()
                .last_instant("job")
                .await
                .unwrap(),
            None
        );
    }
}
