//! [`PostgresStore`]: the protocol's statements on a deadpool of
//! tokio-postgres connections.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::Pool;
use lease_core::{
    BoxError, ClaimRequest, DbErrorKind, FinishRequest, Finished, InstantClaim, InstantRecord,
    LeaseInfo, LeaseStore, Token, Unfinished, UtcMillis,
};
use tokio_postgres::types::Type;

use crate::builder::Target;
use crate::sql::{self, StatementMode, Statements, TokenParam, term};
use crate::tls::CancelTls;

/// A [`LeaseStore`] on PostgreSQL.
///
/// Every protocol statement is one statement, sent as one round trip (see
/// the crate docs for the table), prepared once per connection and cached.
/// Expiry is judged by PostgreSQL's `clock_timestamp()`, read once in each
/// statement.
///
/// Build it with [`connect`](Self::connect) from a URL, with
/// [`builder`](Self::builder) to choose the table, the pool size, the
/// timeouts or the TLS roots, or with [`from_pool`](Self::from_pool) on an
/// application's own deadpool. Cloning is cheap: clones share the pool.
///
/// Besides the protocol, it offers the guarded transaction,
/// [`transaction`](Self::transaction): work in a transaction that first
/// verifies the lease, and fences it against the next holder.
///
/// # Examples
///
/// ```no_run
/// use lease_core::Leases;
/// use lease_postgres::PostgresStore;
///
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// let store = PostgresStore::builder("postgres://app:secret@db.internal/app?sslmode=verify-full")?
///     .with_table("app_leases")
///     .with_pool_size(4)
///     .build()?;
/// let leases = Leases::new(store);
/// leases.migrate().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PostgresStore {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) pool: Pool,
    pub(crate) sql: Statements,
    /// The server-side bound set on the store's own connections; `None` for
    /// a pool given by the application, or when turned off.
    pub(crate) statement_timeout: Option<Duration>,
    /// The client-side bound on a guarded transaction's `COMMIT`: the
    /// coordinator's statement timeout ([`lease_core::Timings`]).
    pub(crate) commit_bound: Duration,
    /// Where the store's own connections go, for `Debug`; `None` for a pool
    /// given by the application.
    pub(crate) target: Option<Target>,
    /// How to reach the server to cancel a statement of an abandoned
    /// guarded transaction.
    pub(crate) cancel: CancelTls,
    /// How the store's own protocol statements are sent.
    pub(crate) statement_mode: StatementMode,
}

impl fmt::Debug for PostgresStore {
    /// Shows where the store connects (never the password), its table,
    /// timeouts and pool status.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = self.inner.pool.status();
        f.debug_struct("PostgresStore")
            .field("target", &self.inner.target)
            .field("table", &self.inner.sql.table.name())
            .field("statement_timeout", &self.inner.statement_timeout)
            .field("pool_max_size", &status.max_size)
            .field("pool_size", &status.size)
            .finish()
    }
}

impl PostgresStore {
    pub(crate) fn assemble(
        pool: Pool,
        sql: Statements,
        statement_timeout: Option<Duration>,
        commit_bound: Duration,
        target: Option<Target>,
        cancel: CancelTls,
        statement_mode: StatementMode,
    ) -> Self {
        PostgresStore {
            inner: Arc::new(Inner {
                pool,
                sql,
                statement_timeout,
                commit_bound,
                target,
                cancel,
                statement_mode,
            }),
        }
    }

    /// The lease table's name, as given.
    #[must_use]
    pub fn table(&self) -> &str {
        self.inner.sql.table.name()
    }

    /// The pool the store takes its connections from.
    #[must_use]
    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }
}

#[async_trait]
impl LeaseStore for PostgresStore {
    async fn claim(&self, claim: ClaimRequest<'_>) -> Result<Option<u64>, BoxError> {
        let ClaimRequest {
            name,
            token,
            instance,
            lease_ms,
        } = claim;
        let holder = token.expose();
        let holder = TokenParam(holder);
        let row = self
            .row(
                &self.inner.sql.claim,
                &[
                    (&name, Type::TEXT),
                    (&holder, Type::TEXT),
                    (&instance, Type::TEXT),
                    (&lease_ms, Type::INT8),
                ],
            )
            .await?;
        row.map(|row| term(row.try_get(0)?)).transpose()
    }

    async fn renew(
        &self,
        name: &str,
        token: Token<'_>,
        lease_ms: i64,
    ) -> Result<Option<i64>, BoxError> {
        let holder = token.expose();
        let holder = TokenParam(holder);
        let row = self
            .row(
                &self.inner.sql.renew,
                &[
                    (&name, Type::TEXT),
                    (&holder, Type::TEXT),
                    (&lease_ms, Type::INT8),
                ],
            )
            .await?;
        Ok(row.map(|row| row.try_get(0)).transpose()?)
    }

    async fn renew_many(
        &self,
        leases: &[(&str, Token<'_>)],
        lease_ms: i64,
    ) -> Result<Vec<Option<i64>>, BoxError> {
        let names: Vec<&str> = leases.iter().map(|(name, _)| *name).collect();
        let holders: Vec<TokenParam<'_>> = leases
            .iter()
            .map(|(_, token)| TokenParam(token.expose()))
            .collect();
        let rows = self
            .rows(
                &self.inner.sql.renew_many,
                &[
                    (&names, Type::TEXT_ARRAY),
                    (&holders, Type::TEXT_ARRAY),
                    (&lease_ms, Type::INT8),
                ],
            )
            .await?;
        let mut renewed = std::collections::HashMap::with_capacity(rows.len());
        for row in &rows {
            let name: &str = row.try_get(0)?;
            let holder: &str = row.try_get(1)?;
            let now: i64 = row.try_get(2)?;
            let _ = renewed.insert((name, holder), now);
        }
        Ok(leases
            .iter()
            .map(|(name, token)| renewed.get(&(*name, token.expose())).copied())
            .collect())
    }

    async fn verify(&self, name: &str, token: Token<'_>) -> Result<Option<u64>, BoxError> {
        let holder = token.expose();
        let holder = TokenParam(holder);
        let row = self
            .row(
                &self.inner.sql.verify,
                &[(&name, Type::TEXT), (&holder, Type::TEXT)],
            )
            .await?;
        row.map(|row| term(row.try_get(0)?)).transpose()
    }

    async fn release(&self, name: &str, token: Token<'_>) -> Result<bool, BoxError> {
        let holder = token.expose();
        let holder = TokenParam(holder);
        let released = self
            .affected(
                &self.inner.sql.release,
                &[(&name, Type::TEXT), (&holder, Type::TEXT)],
            )
            .await?;
        Ok(released == 1)
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
        let holder = TokenParam(holder);
        let Some(row) = self
            .row(
                &self.inner.sql.claim_instant,
                &[
                    (&name, Type::TEXT),
                    (&holder, Type::TEXT),
                    (&instance, Type::TEXT),
                    (&slot_ms, Type::INT8),
                    (&lease_ms, Type::INT8),
                ],
            )
            .await?
        else {
            return Ok(InstantClaim::Refused);
        };
        let new_term = term(row.try_get(0)?)?;
        // The row as the claim found it; NULL when the claim inserted it.
        let old: Option<i64> = row.try_get(1)?;
        let superseded = match old {
            None => None,
            Some(slot_ms) => InstantRecord {
                slot_ms,
                unfinished_slot_ms: row.try_get(2)?,
                rerun_slot_ms: row.try_get(3)?,
            }
            .superseded(name, new_term.saturating_sub(1)),
        };
        Ok(InstantClaim::Claimed {
            term: new_term,
            superseded,
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
        let holder = holder.map(TokenParam);
        let row = self
            .row(
                &self.inner.sql.finish,
                &[
                    (&name, Type::TEXT),
                    (&holder, Type::TEXT),
                    (&slot_ms, Type::INT8),
                    (&passed_ms, Type::INT8),
                ],
            )
            .await?;
        Ok(match row {
            None => Finished::NotRecorded,
            Some(row) if row.try_get::<_, bool>(0)? => Finished::Released,
            Some(_) => Finished::RecordedWithoutLease,
        })
    }

    async fn find_unfinished(&self, names: &[&str]) -> Result<Vec<Unfinished>, BoxError> {
        let rows = self
            .rows(
                &self.inner.sql.find_unfinished,
                &[(&names, Type::TEXT_ARRAY)],
            )
            .await?;
        rows.iter()
            .map(|row| {
                Ok(Unfinished::new(
                    row.try_get::<_, String>(0)?,
                    UtcMillis::from_millis(row.try_get(2)?),
                    false,
                    term(row.try_get(1)?)?,
                ))
            })
            .collect()
    }

    async fn claim_rerun(&self, claim: ClaimRequest<'_>, term: u64) -> Result<bool, BoxError> {
        let ClaimRequest {
            name,
            token,
            instance,
            lease_ms,
        } = claim;
        let holder = token.expose();
        // A term past i64::MAX cannot be in the table: nothing to claim.
        let Ok(term) = i64::try_from(term) else {
            return Ok(false);
        };
        let holder = TokenParam(holder);
        let claimed = self
            .affected(
                &self.inner.sql.claim_rerun,
                &[
                    (&name, Type::TEXT),
                    (&term, Type::INT8),
                    (&holder, Type::TEXT),
                    (&instance, Type::TEXT),
                    (&lease_ms, Type::INT8),
                ],
            )
            .await?;
        Ok(claimed == 1)
    }

    async fn last_instant(&self, name: &str) -> Result<Option<i64>, BoxError> {
        let row = self
            .row(&self.inner.sql.last_instant, &[(&name, Type::TEXT)])
            .await?;
        Ok(row.map(|row| row.try_get(0)).transpose()?)
    }

    async fn force_release(&self, name: &str, term: u64) -> Result<bool, BoxError> {
        // A term past i64::MAX cannot be in the table: nothing to free.
        let Ok(term) = i64::try_from(term) else {
            return Ok(false);
        };
        let freed = self
            .affected(
                &self.inner.sql.force_release,
                &[(&name, Type::TEXT), (&term, Type::INT8)],
            )
            .await?;
        Ok(freed == 1)
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>, BoxError> {
        let row = self
            .row(&self.inner.sql.get, &[(&name, Type::TEXT)])
            .await?;
        row.as_ref().map(info).transpose()
    }

    async fn list(&self, prefix: &str, limit: u32) -> Result<Vec<LeaseInfo>, BoxError> {
        let rows = self
            .rows(
                &self.inner.sql.list,
                &[(&prefix, Type::TEXT), (&i64::from(limit), Type::INT8)],
            )
            .await?;
        let mut infos = Vec::with_capacity(rows.len());
        for row in &rows {
            let info = info(row)?;
            if !info.name.starts_with(prefix) {
                break;
            }
            infos.push(info);
        }
        Ok(infos)
    }

    async fn now_ms(&self) -> Result<i64, BoxError> {
        let row = self
            .row(sql::NOW, &[])
            .await?
            .ok_or("the clock read returned no row")?;
        Ok(row.try_get(0)?)
    }

    async fn migrate(&self) -> Result<(), BoxError> {
        crate::schema::migrate(&self.inner.pool, &self.inner.sql, self.inner.statement_mode).await
    }

    fn classify(&self, error: &(dyn std::error::Error + 'static)) -> DbErrorKind {
        crate::error::classify(error)
    }

    fn guard_statement(&self) -> Option<lease_core::GuardStatement> {
        Some(Self::guard_statement(self))
    }
}

/// A row of `get` or `list`.
fn info(row: &tokio_postgres::Row) -> Result<LeaseInfo, BoxError> {
    Ok(LeaseInfo {
        name: row.try_get(0)?,
        instance: row.try_get(1)?,
        term: term(row.try_get(2)?)?,
        expires_at_ms: row.try_get(3)?,
        now_ms: row.try_get(4)?,
        slot_ms: row.try_get(5)?,
        unfinished_slot_ms: row.try_get(6)?,
        rerun_slot_ms: row.try_get(7)?,
    })
}
