//! [`PostgresStore`]: the protocol's statements on a deadpool of
//! tokio-postgres connections.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Object, Pool};
use lease_core::{
    BoxError, ClaimRequest, DbErrorKind, FinishRequest, Finished, InstantClaim, LeaseInfo,
    LeaseStore, Renewed, Timings, Token, Unfinished,
};
use lease_sql::postgres::{self, Statements};

use crate::builder::Target;
use crate::conn::{PgConn, StatementMode};
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
    /// The timings the server-side bound came from, when it did (see
    /// [`LeaseStore::timings`]).
    pub(crate) timings: Option<Timings>,
    /// Whether the replication check has run (at `connect`, or else at the
    /// first `migrate`), see the `replication` module.
    pub(crate) replication_checked: std::sync::atomic::AtomicBool,
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
            .field("table", &self.inner.sql.table().name())
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
        timings: Timings,
        target: Option<Target>,
        cancel: CancelTls,
        statement_mode: StatementMode,
    ) -> Self {
        let commit_bound = timings.statement_timeout();
        // The store's bounds are the timings' only when its statement
        // timeout is theirs (not turned off, not set by hand, not a pool
        // of the application's).
        let timings = (statement_timeout == Some(commit_bound)).then_some(timings);
        PostgresStore {
            inner: Arc::new(Inner {
                pool,
                sql,
                statement_timeout,
                commit_bound,
                timings,
                replication_checked: std::sync::atomic::AtomicBool::new(false),
                target,
                cancel,
                statement_mode,
            }),
        }
    }

    /// The lease table's name, as given.
    #[must_use]
    pub fn table(&self) -> &str {
        self.inner.sql.table().name()
    }

    /// The pool the store takes its connections from.
    #[must_use]
    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// `client` as the flows of [`lease_sql::postgres`] run on it.
    fn conn<'c>(&self, client: &'c Object) -> PgConn<'c> {
        PgConn {
            client,
            mode: self.inner.statement_mode,
        }
    }
}

#[async_trait]
impl LeaseStore for PostgresStore {
    async fn claim(&self, claim: ClaimRequest<'_>) -> Result<Option<u64>, BoxError> {
        let client = self.client().await?;
        postgres::claim(&mut self.conn(&client), &self.inner.sql, &claim).await
    }

    async fn renew(
        &self,
        name: &str,
        token: Token<'_>,
        lease_ms: i64,
    ) -> Result<Option<Renewed>, BoxError> {
        let client = self.client().await?;
        let sql = &self.inner.sql;
        postgres::renew(&mut self.conn(&client), sql, name, token, lease_ms).await
    }

    async fn renew_many(
        &self,
        leases: &[(&str, Token<'_>)],
        lease_ms: i64,
    ) -> Result<Vec<Option<Renewed>>, BoxError> {
        let client = self.client().await?;
        let sql = &self.inner.sql;
        postgres::renew_many(&mut self.conn(&client), sql, leases, lease_ms).await
    }

    async fn verify(&self, name: &str, token: Token<'_>) -> Result<Option<u64>, BoxError> {
        let client = self.client().await?;
        postgres::verify(&mut self.conn(&client), &self.inner.sql, name, token).await
    }

    async fn release(&self, name: &str, token: Token<'_>) -> Result<bool, BoxError> {
        let client = self.client().await?;
        postgres::release(&mut self.conn(&client), &self.inner.sql, name, token).await
    }

    async fn claim_instant(
        &self,
        claim: ClaimRequest<'_>,
        instant_ms: i64,
    ) -> Result<InstantClaim, BoxError> {
        let client = self.client().await?;
        let sql = &self.inner.sql;
        postgres::claim_instant(&mut self.conn(&client), sql, &claim, instant_ms).await
    }

    async fn finish(&self, finish: FinishRequest<'_>) -> Result<Finished, BoxError> {
        let client = self.client().await?;
        postgres::finish(&mut self.conn(&client), &self.inner.sql, &finish).await
    }

    async fn find_unfinished(&self, names: &[&str]) -> Result<Vec<Unfinished>, BoxError> {
        let client = self.client().await?;
        postgres::find_unfinished(&mut self.conn(&client), &self.inner.sql, names).await
    }

    async fn claim_rerun(&self, claim: ClaimRequest<'_>, term: u64) -> Result<bool, BoxError> {
        let client = self.client().await?;
        postgres::claim_rerun(&mut self.conn(&client), &self.inner.sql, &claim, term).await
    }

    async fn last_instant(&self, name: &str) -> Result<Option<i64>, BoxError> {
        let client = self.client().await?;
        postgres::last_instant(&mut self.conn(&client), &self.inner.sql, name).await
    }

    async fn force_release(&self, name: &str, term: u64) -> Result<bool, BoxError> {
        let client = self.client().await?;
        postgres::force_release(&mut self.conn(&client), &self.inner.sql, name, term).await
    }

    async fn request_resign(&self, name: &str, term: u64) -> Result<bool, BoxError> {
        let client = self.client().await?;
        postgres::request_resign(&mut self.conn(&client), &self.inner.sql, name, term).await
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>, BoxError> {
        let client = self.client().await?;
        postgres::get(&mut self.conn(&client), &self.inner.sql, name).await
    }

    async fn list(&self, prefix: &str, limit: u32) -> Result<Vec<LeaseInfo>, BoxError> {
        let client = self.client().await?;
        postgres::list(&mut self.conn(&client), &self.inner.sql, prefix, limit).await
    }

    async fn now_ms(&self) -> Result<i64, BoxError> {
        let client = self.client().await?;
        postgres::now_ms(&mut self.conn(&client), &self.inner.sql).await
    }

    async fn migrate(&self) -> Result<(), BoxError> {
        crate::schema::migrate(&self.inner.pool, &self.inner.sql, self.inner.statement_mode)
            .await?;
        // A store from `build()` or `from_pool` has not connected yet: its
        // replication is checked here, once (as in the inherent `migrate`).
        crate::replication::warn_once(self).await;
        Ok(())
    }

    fn classify(&self, error: &(dyn std::error::Error + 'static)) -> DbErrorKind {
        crate::error::classify(error)
    }

    fn guard_statement(&self) -> Option<lease_core::GuardStatement> {
        Some(Self::guard_statement(self))
    }

    fn timings(&self) -> Option<Timings> {
        self.inner.timings
    }
}
