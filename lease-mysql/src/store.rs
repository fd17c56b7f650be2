//! [`MySqlStore`]: the protocol's statements on mysql_async's pool.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use lease_core::{
    BoxError, ClaimRequest, FinishRequest, Finished, InstantClaim, LeaseInfo, LeaseStore, Renewed,
    TableName, Timings, Token, Unfinished,
};
use lease_sql::mysql::{self, Statements};
use mysql_async::Pool;

use crate::builder::MySqlPool;
use crate::conn::MyConn;

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
    pub(crate) sql: Statements,
    pub(crate) server: String,
    pub(crate) tls: bool,
    /// The session setup of a pool the store built, run again after each
    /// guarded transaction; `None` on a caller's pool, whose sessions the
    /// store leaves to the pool's own reset.
    pub(crate) setup: Option<String>,
    /// The timings the sessions' bounds came from, when they did (see
    /// [`LeaseStore::timings`]).
    pub(crate) timings: Option<Timings>,
}

impl fmt::Debug for MySqlStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MySqlStore")
            .field("server", &self.inner.server)
            .field("table", self.inner.sql.table())
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
        timings: Option<Timings>,
    ) -> MySqlStore {
        MySqlStore {
            inner: Arc::new(Inner {
                pool: MySqlPool::new(pool, server.clone()),
                sql: Statements::new(table),
                server,
                tls,
                setup,
                timings,
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

    /// The lease table's name, as given.
    #[must_use]
    pub fn table(&self) -> &str {
        self.inner.sql.table().name()
    }

    /// Whether the store's connections require TLS.
    #[must_use]
    pub fn tls_required(&self) -> bool {
        self.inner.tls
    }
}

/// Each method runs on one connection of the pool: the flows of
/// [`lease_sql::mysql`] (a claim's read and its write, a batch's
/// transaction, a search's statements) all on it.
#[async_trait]
impl LeaseStore for MySqlStore {
    async fn claim(&self, claim: ClaimRequest<'_>) -> Result<Option<u64>, BoxError> {
        let mut conn = self.conn().await?;
        mysql::claim(&mut MyConn(&mut conn), &self.inner.sql, &claim).await
    }

    async fn renew(
        &self,
        name: &str,
        token: Token<'_>,
        lease_ms: i64,
    ) -> Result<Option<Renewed>, BoxError> {
        let mut conn = self.conn().await?;
        let sql = &self.inner.sql;
        mysql::renew(&mut MyConn(&mut conn), sql, name, token, lease_ms).await
    }

    async fn renew_many(
        &self,
        leases: &[(&str, Token<'_>)],
        lease_ms: i64,
    ) -> Result<Vec<Option<Renewed>>, BoxError> {
        let mut conn = self.conn().await?;
        let sql = &self.inner.sql;
        mysql::renew_many(&mut MyConn(&mut conn), sql, leases, lease_ms).await
    }

    async fn verify(&self, name: &str, token: Token<'_>) -> Result<Option<u64>, BoxError> {
        let mut conn = self.conn().await?;
        mysql::verify(&mut MyConn(&mut conn), &self.inner.sql, name, token).await
    }

    async fn release(&self, name: &str, token: Token<'_>) -> Result<bool, BoxError> {
        let mut conn = self.conn().await?;
        mysql::release(&mut MyConn(&mut conn), &self.inner.sql, name, token).await
    }

    async fn claim_instant(
        &self,
        claim: ClaimRequest<'_>,
        instant_ms: i64,
    ) -> Result<InstantClaim, BoxError> {
        let mut conn = self.conn().await?;
        let sql = &self.inner.sql;
        mysql::claim_instant(&mut MyConn(&mut conn), sql, &claim, instant_ms).await
    }

    async fn finish(&self, finish: FinishRequest<'_>) -> Result<Finished, BoxError> {
        let mut conn = self.conn().await?;
        mysql::finish(&mut MyConn(&mut conn), &self.inner.sql, &finish).await
    }

    async fn find_unfinished(&self, names: &[&str]) -> Result<Vec<Unfinished>, BoxError> {
        let mut conn = self.conn().await?;
        mysql::find_unfinished(&mut MyConn(&mut conn), &self.inner.sql, names).await
    }

    async fn claim_rerun(&self, claim: ClaimRequest<'_>, term: u64) -> Result<bool, BoxError> {
        let mut conn = self.conn().await?;
        mysql::claim_rerun(&mut MyConn(&mut conn), &self.inner.sql, &claim, term).await
    }

    async fn last_instant(&self, name: &str) -> Result<Option<i64>, BoxError> {
        let mut conn = self.conn().await?;
        mysql::last_instant(&mut MyConn(&mut conn), &self.inner.sql, name).await
    }

    async fn force_release(&self, name: &str, term: u64) -> Result<bool, BoxError> {
        let mut conn = self.conn().await?;
        mysql::force_release(&mut MyConn(&mut conn), &self.inner.sql, name, term).await
    }

    async fn request_resign(&self, name: &str, term: u64) -> Result<bool, BoxError> {
        let mut conn = self.conn().await?;
        mysql::request_resign(&mut MyConn(&mut conn), &self.inner.sql, name, term).await
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>, BoxError> {
        let mut conn = self.conn().await?;
        mysql::get(&mut MyConn(&mut conn), &self.inner.sql, name).await
    }

    async fn list(&self, prefix: &str, limit: u32) -> Result<Vec<LeaseInfo>, BoxError> {
        let mut conn = self.conn().await?;
        mysql::list(&mut MyConn(&mut conn), &self.inner.sql, prefix, limit).await
    }

    async fn now_ms(&self) -> Result<i64, BoxError> {
        let mut conn = self.conn().await?;
        mysql::now_ms(&mut MyConn(&mut conn), &self.inner.sql).await
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

    fn timings(&self) -> Option<Timings> {
        self.inner.timings
    }
}
