//! A lease table in memory on tokio's clock, for the capabilities' tests on
//! paused time: the protocol's claim, renew, release and get, with knobs to
//! take the database down and to hand a name to someone else.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::error::BoxError;
use crate::info::LeaseInfo;
use crate::store::{ClaimRequest, FinishRequest, Finished, InstantClaim, LeaseStore, Unfinished};
use crate::token::Token;

#[derive(Debug, Clone)]
struct Row {
    holder: String,
    instance: String,
    term: u64,
    expires_at_ms: i64,
}

#[derive(Debug, Default)]
struct State {
    rows: HashMap<String, Row>,
    down: bool,
    /// (when, instance, claimed?) of every claim attempt.
    claims: Vec<(Instant, String, bool)>,
    releases: usize,
}

#[derive(Debug)]
pub(crate) struct MemTable {
    base: Instant,
    state: Mutex<State>,
}

impl MemTable {
    pub(crate) fn new() -> Self {
        MemTable {
            base: Instant::now(),
            state: Mutex::default(),
        }
    }

    fn now(&self) -> i64 {
        1_000_000 + i64::try_from(self.base.elapsed().as_millis()).unwrap()
    }

    fn with<T>(&self, f: impl FnOnce(&mut State, i64) -> T) -> Result<T, BoxError> {
        let mut state = self.state.lock().unwrap();
        if state.down {
            return Err("the database is down".into());
        }
        let now = self.now();
        Ok(f(&mut state, now))
    }

    /// Every statement fails while `down`.
    pub(crate) fn set_down(&self, down: bool) {
        self.state.lock().unwrap().down = down;
    }

    /// Someone else claims `name` now, whatever holds it: a takeover.
    pub(crate) fn steal(&self, name: &str, instance: &str, lease_ms: i64) -> u64 {
        let now = self.now();
        let mut state = self.state.lock().unwrap();
        let row = state.rows.entry(name.to_owned()).or_insert(Row {
            holder: String::new(),
            instance: String::new(),
            term: 0,
            expires_at_ms: 0,
        });
        row.holder = "stolen".into();
        row.instance = instance.into();
        row.term += 1;
        row.expires_at_ms = now + lease_ms;
        row.term
    }

    /// The claim attempts so far: (ms since the table was made, instance,
    /// claimed?).
    pub(crate) fn claims(&self) -> Vec<(u64, String, bool)> {
        let state = self.state.lock().unwrap();
        state
            .claims
            .iter()
            .map(|(at, who, won)| {
                (
                    u64::try_from((*at - self.base).as_millis()).unwrap(),
                    who.clone(),
                    *won,
                )
            })
            .collect()
    }

    pub(crate) fn releases(&self) -> usize {
        self.state.lock().unwrap().releases
    }

    /// The row as `get` reads it.
    pub(crate) fn info(&self, name: &str) -> Option<LeaseInfo> {
        let now = self.now();
        let state = self.state.lock().unwrap();
        state.rows.get(name).map(|r| to_info(name, r, now))
    }
}

fn to_info(name: &str, row: &Row, now: i64) -> LeaseInfo {
    LeaseInfo {
        name: name.to_owned(),
        instance: row.instance.clone(),
        term: row.term,
        expires_at_ms: row.expires_at_ms,
        now_ms: now,
        slot_ms: 0,
        unfinished_slot_ms: 0,
        rerun_slot_ms: 0,
    }
}

#[async_trait]
impl LeaseStore for MemTable {
    async fn claim(&self, claim: ClaimRequest<'_>) -> Result<Option<u64>, BoxError> {
        let ClaimRequest {
            name,
            token,
            instance,
            lease_ms,
        } = claim;
        let holder = token.expose();
        let claimed = self.with(|state, now| {
            let term = match state.rows.get_mut(name) {
                None => {
                    let row = Row {
                        holder: holder.into(),
                        instance: instance.into(),
                        term: 1,
                        expires_at_ms: now + lease_ms,
                    };
                    let _ = state.rows.insert(name.to_owned(), row);
                    Some(1)
                }
                Some(row) if row.expires_at_ms <= now => {
                    row.holder = holder.into();
                    row.instance = instance.into();
                    row.term += 1;
                    row.expires_at_ms = now + lease_ms;
                    Some(row.term)
                }
                Some(_) => None,
            };
            state
                .claims
                .push((Instant::now(), instance.to_owned(), term.is_some()));
            term
        })?;
        Ok(claimed)
    }

    async fn renew(
        &self,
        name: &str,
        token: Token<'_>,
        lease_ms: i64,
    ) -> Result<Option<i64>, BoxError> {
        let holder = token.expose();
        self.with(|state, now| match state.rows.get_mut(name) {
            Some(row) if row.holder == holder && row.expires_at_ms > now => {
                row.expires_at_ms = now + lease_ms;
                Some(now)
            }
            _ => None,
        })
    }

    /// One renewal after the other: this store has no batch statement.
    async fn renew_many(
        &self,
        leases: &[(&str, Token<'_>)],
        lease_ms: i64,
    ) -> Result<Vec<Option<i64>>, BoxError> {
        crate::store::renew_each(self, leases, lease_ms).await
    }

    async fn verify(&self, name: &str, token: Token<'_>) -> Result<Option<u64>, BoxError> {
        let holder = token.expose();
        self.with(|state, now| {
            state
                .rows
                .get(name)
                .filter(|r| r.holder == holder && r.expires_at_ms > now)
                .map(|r| r.term)
        })
    }

    async fn release(&self, name: &str, token: Token<'_>) -> Result<bool, BoxError> {
        let holder = token.expose();
        self.with(|state, now| {
            state.releases += 1;
            match state.rows.get_mut(name) {
                // Only a lease still held is given back: one released by
                // force, or run out, was already gone.
                Some(row) if row.holder == holder && row.expires_at_ms > now => {
                    row.expires_at_ms = 0;
                    true
                }
                _ => false,
            }
        })
    }

    async fn claim_instant(
        &self,
        claim: ClaimRequest<'_>,
        _: i64,
    ) -> Result<InstantClaim, BoxError> {
        let _ = claim;
        Err("not part of the capabilities' table".into())
    }

    async fn finish(&self, _: FinishRequest<'_>) -> Result<Finished, BoxError> {
        Err("not part of the capabilities' table".into())
    }

    async fn find_unfinished(&self, _: &[&str]) -> Result<Vec<Unfinished>, BoxError> {
        Err("not part of the capabilities' table".into())
    }

    async fn claim_rerun(&self, claim: ClaimRequest<'_>, _: u64) -> Result<bool, BoxError> {
        let _ = claim;
        Err("not part of the capabilities' table".into())
    }

    async fn last_instant(&self, _: &str) -> Result<Option<i64>, BoxError> {
        Err("not part of the capabilities' table".into())
    }

    async fn force_release(&self, name: &str, term: u64) -> Result<bool, BoxError> {
        self.with(|state, now| match state.rows.get_mut(name) {
            Some(row) if row.term == term && row.expires_at_ms > now => {
                row.expires_at_ms = 0;
                true
            }
            _ => false,
        })
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>, BoxError> {
        self.with(|state, now| state.rows.get(name).map(|r| to_info(name, r, now)))
    }

    async fn list(&self, prefix: &str, limit: u32) -> Result<Vec<LeaseInfo>, BoxError> {
        self.with(|state, now| {
            let mut names: Vec<&String> = state
                .rows
                .keys()
                .filter(|n| n.starts_with(prefix))
                .collect();
            names.sort();
            names
                .into_iter()
                .take(limit as usize)
                .map(|n| to_info(n, &state.rows[n], now))
                .collect()
        })
    }

    async fn now_ms(&self) -> Result<i64, BoxError> {
        self.with(|_, now| now)
    }

    async fn migrate(&self) -> Result<(), BoxError> {
        Ok(())
    }
}
