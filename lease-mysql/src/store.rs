//! [`MySqlStore`]: the protocol's statements on mysql_async's pool.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use lease_core::{
    BoxError, ClaimRequest, FinishRequest, Finished, InstantClaim, InstantRecord, LeaseInfo,
    LeaseStore, Token, Unfinished, UtcMillis,
};
use mysql_async::prelude::Queryable;
use mysql_async::{Params, Pool, Value, params};

use crate::builder::MySqlPool;
use crate::sql::{self, Statements, claim_on};
use lease_core::TableName;

/// The most names one search for unfinished instants binds; more are
/// searched in several statements.
pub(crate) const MAX_NAMES_PER_SEARCH: usize = 4096;

/// The most renewals one batch statement carries (three placeholders
/// each); more are renewed in several transactions.
pub(crate) const MAX_RENEWALS_PER_BATCH: usize = 1024;

/// The lease protocol on MySQL 8 or MariaDB 10.6+, through mysql_async's
/// pool, with the server's clock.
///
/// Cheap to clone: clones share the pool. `Debug` shows the server, the
/// table and whether TLS is required, never the credentials.
#[derive(Clone)]
pub struct MySqlStore {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) pool: MySqlPool,
    pub(crate) table: TableName,
    pub(crate) sql: Statements,
    pub(crate) server: String,
    pub(crate) tls: bool,
    /// The session setup of a pool the store built, run again after each
    /// guarded transaction; `None` on a caller's pool, whose sessions the
    /// store leaves to the pool's own reset.
    pub(crate) setup: Option<String>,
}

impl fmt::Debug for MySqlStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MySqlStore")
            .field("server", &self.inner.server)
            .field("table", &self.inner.table)
            .field("tls", &self.inner.tls)
            .finish_non_exhaustive()
    }
}

impl MySqlStore {
    pub(crate) fn assemble(
        pool: Pool,
        table: TableName,
        server: String,
        tls: bool,
        setup: Option<String>,
    ) -> MySqlStore {
        let sql = Statements::new(table.quoted());
        MySqlStore {
            inner: Arc::new(Inner {
                pool: MySqlPool::new(pool, server.clone()),
                table,
                sql,
                server,
                tls,
                setup,
            }),
        }
    }

    /// The pool the store runs on, for the application's own statements.
    ///
    /// mysql_async's [`Pool`] prints the password in its `Debug` output, so
    /// the pool comes wrapped in a [`MySqlPool`], whose `Debug` shows the
    /// server alone and which dereferences to the [`Pool`]
    /// (`store.pool().get_conn()`). Log the store or this wrapper, never
    /// the [`Pool`] behind it.
    #[must_use]
    pub fn pool(&self) -> &MySqlPool {
        &self.inner.pool
    }

    /// The lease table's name, quoted as the statements use it.
    #[must_use]
    pub fn table(&self) -> &str {
        self.inner.table.quoted()
    }

    /// Whether the store's connections require TLS.
    #[must_use]
    pub fn tls_required(&self) -> bool {
        self.inner.tls
    }
}

#[async_trait]
impl LeaseStore for MySqlStore {
    async fn claim(&self, claim: ClaimRequest<'_>) -> Result<Option<u64>, BoxError> {
        let ClaimRequest {
            name,
            token,
            instance,
            lease_ms,
        } = claim;
        let holder = token.expose();
        let mut conn = self.conn().await?;
        let term = claim_on(&mut conn, &self.inner.sql, name, holder, instance, lease_ms).await?;
        Ok(term)
    }

    /// The statement's `LAST_INSERT_ID(now)` carries the database's now
    /// back in the OK packet when the row matched (0, `None`, when not).
    async fn renew(
        &self,
        name: &str,
        token: Token<'_>,
        lease_ms: i64,
    ) -> Result<Option<i64>, BoxError> {
        let holder = token.expose();
        let now = self
            .write(
                &self.inner.sql.renew,
                params! { "name" => name, "holder" => holder, "lease_ms" => lease_ms },
            )
            .await?;
        Ok(now.map(i64::try_from).transpose()?)
    }

    async fn renew_many(
        &self,
        leases: &[(&str, Token<'_>)],
        lease_ms: i64,
    ) -> Result<Vec<Option<i64>>, BoxError> {
        let mut held = Vec::with_capacity(leases.len());
        for chunk in leases.chunks(MAX_RENEWALS_PER_BATCH) {
            held.extend(self.renew_chunk(chunk, lease_ms).await?);
        }
        Ok(held)
    }

    async fn verify(&self, name: &str, token: Token<'_>) -> Result<Option<u64>, BoxError> {
        let holder = token.expose();
        let mut conn = self.conn().await?;
        let term: Option<u64> = conn
            .exec_first(
                self.inner.sql.verify.as_str(),
                params! { "name" => name, "holder" => holder },
            )
            .await?;
        Ok(term)
    }

    async fn release(&self, name: &str, token: Token<'_>) -> Result<bool, BoxError> {
        let holder = token.expose();
        let term = self
            .write(
                &self.inner.sql.release,
                params! { "name" => name, "holder" => holder },
            )
            .await?;
        Ok(term.is_some())
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
        let mut conn = self.conn().await?;
        let row: Option<(u64, i64, i64, i64, i64)> = conn
            .exec_first(
                self.inner.sql.slot_read.as_str(),
                params! { "name" => name },
            )
            .await?;
        drop(conn);
        let Some((term, slot, unfinished, rerun, expired)) = row else {
            let inserted = self
                .write(
                    &self.inner.sql.slot_insert,
                    params! {
                        "name" => name,
                        "holder" => holder,
                        "instance" => instance,
                        "lease_ms" => lease_ms,
                        "slot" => slot_ms,
                    },
                )
                .await?;
            return Ok(match inserted {
                Some(1) => InstantClaim::Claimed {
                    term: 1,
                    superseded: None,
                },
                _ => InstantClaim::Refused,
            });
        };
        let record = InstantRecord {
            slot_ms: slot,
            unfinished_slot_ms: unfinished,
            rerun_slot_ms: rerun,
        };
        if !record.claimable(expired != 0, slot_ms) {
            return Ok(InstantClaim::Refused);
        }
        let claimed = self
            .write(
                &self.inner.sql.slot_update,
                params! {
                    "name" => name,
                    "holder" => holder,
                    "instance" => instance,
                    "lease_ms" => lease_ms,
                    "slot" => slot_ms,
                    "term" => term,
                },
            )
            .await?;
        Ok(match claimed {
            Some(new_term) => InstantClaim::Claimed {
                term: new_term,
                superseded: record.superseded(name, term),
            },
            None => InstantClaim::Refused,
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
        let outcome = self
            .write(
                &self.inner.sql.finish,
                params! {
                    "name" => name,
                    "holder" => holder,
                    "slot" => slot_ms,
                    "passed" => passed_ms,
                },
            )
            .await?;
        Ok(match outcome {
            Some(sql::FINISH_RELEASED) => Finished::Released,
            Some(sql::FINISH_WITHOUT_LEASE) => Finished::RecordedWithoutLease,
            _ => Finished::NotRecorded,
        })
    }

    async fn find_unfinished(&self, names: &[&str]) -> Result<Vec<Unfinished>, BoxError> {
        let mut conn = self.conn().await?;
        let mut found = Vec::new();
        for chunk in names.chunks(MAX_NAMES_PER_SEARCH) {
            let Some(last) = chunk.last() else { continue };
            // Round up to a power of two, repeating the last name, so that a
            // few prepared statements serve every count.
            let slots = chunk.len().next_power_of_two();
            let mut values: Vec<Value> = chunk.iter().map(|n| Value::from(*n)).collect();
            values.resize(slots, Value::from(*last));
            let rows: Vec<(Vec<u8>, u64, i64)> = conn
                .exec(
                    self.inner.sql.find_unfinished(slots),
                    Params::Positional(values),
                )
                .await?;
            for (name, term, slot_ms) in rows {
                let name = String::from_utf8(name)?;
                found.push(Unfinished::new(
                    name,
                    UtcMillis::from_millis(slot_ms),
                    false,
                    term,
                ));
            }
        }
        Ok(found)
    }

    async fn claim_rerun(&self, claim: ClaimRequest<'_>, term: u64) -> Result<bool, BoxError> {
        let ClaimRequest {
            name,
            token,
            instance,
            lease_ms,
        } = claim;
        let holder = token.expose();
        let claimed = self
            .write(
                &self.inner.sql.claim_rerun,
                params! {
                    "name" => name,
                    "term" => term,
                    "holder" => holder,
                    "instance" => instance,
                    "lease_ms" => lease_ms,
                },
            )
            .await?;
        Ok(claimed.is_some())
    }

    async fn last_instant(&self, name: &str) -> Result<Option<i64>, BoxError> {
        let mut conn = self.conn().await?;
        let slot: Option<i64> = conn
            .exec_first(
                self.inner.sql.last_instant.as_str(),
                params! { "name" => name },
            )
            .await?;
        Ok(slot)
    }

    async fn force_release(&self, name: &str, term: u64) -> Result<bool, BoxError> {
        let freed = self
            .write(
                &self.inner.sql.force_release,
                params! { "name" => name, "term" => term },
            )
            .await?;
        Ok(freed.is_some())
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>, BoxError> {
        let mut conn = self.conn().await?;
        let row: Option<InfoRow> = conn
            .exec_first(self.inner.sql.get.as_str(), params! { "name" => name })
            .await?;
        row.map(info).transpose()
    }

    async fn list(&self, prefix: &str, limit: u32) -> Result<Vec<LeaseInfo>, BoxError> {
        let mut conn = self.conn().await?;
        let rows: Vec<InfoRow> = conn
            .exec(
                self.inner.sql.list.as_str(),
                params! { "prefix" => prefix, "row_limit" => limit },
            )
            .await?;
        let mut infos = Vec::with_capacity(rows.len());
        for row in rows {
            let info = info(row)?;
            if !info.name.starts_with(prefix) {
                break;
            }
            infos.push(info);
        }
        Ok(infos)
    }

    async fn now_ms(&self) -> Result<i64, BoxError> {
        let mut conn = self.conn().await?;
        let now: Option<i64> = conn.exec_first(sql::NOW, ()).await?;
        now.ok_or_else(|| "the clock read returned no row".into())
    }

    async fn migrate(&self) -> Result<(), BoxError> {
        MySqlStore::migrate(self).await.map_err(Into::into)
    }

    fn classify(&self, error: &(dyn std::error::Error + 'static)) -> lease_core::DbErrorKind {
        crate::error::classify(error)
    }

    fn guard_statement(&self) -> Option<lease_core::GuardStatement> {
        Some(Self::guard_statement(self))
    }
}

/// The columns of `get` and `list`, as the driver reads them.
type InfoRow = (Vec<u8>, Vec<u8>, u64, i64, i64, i64, i64, i64);

/// A row of `get` or `list`.
fn info(row: InfoRow) -> Result<LeaseInfo, BoxError> {
    let (name, instance, term, expires_at_ms, now_ms, slot_ms, unfinished, rerun) = row;
    Ok(LeaseInfo {
        name: String::from_utf8(name)?,
        instance: String::from_utf8_lossy(&instance).into_owned(),
        term,
        expires_at_ms,
        now_ms,
        slot_ms,
        unfinished_slot_ms: unfinished,
        rerun_slot_ms: rerun,
    })
}
