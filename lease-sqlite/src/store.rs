//! [`SqliteStore`]: the protocol's statements on one SQLite connection.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lease_core::{
    BoxError, ClaimRequest, FinishRequest, Finished, InstantClaim, LeaseInfo, LeaseStore, Renewed,
    Timings, Token, Unfinished,
};
use lease_sql::sqlite;
use rusqlite::InterruptHandle;

use crate::builder::MEMORY;
use crate::sql::{Statements, blocking};

/// A [`LeaseStore`] on an SQLite database: a file, or memory.
///
/// The store owns **one** connection, used off the async runtime: calls
/// queue for it first come, first served, and a thread of the store's own
/// runs them back to back. Several
/// stores, in one process or in many, can share a file: each statement that
/// writes takes SQLite's write lock, waiting up to the
/// [busy timeout](crate::SqliteStoreBuilder::with_busy_timeout) for it, and the instant
/// claim reads and writes inside one `BEGIN IMMEDIATE` transaction.
///
/// Files are opened in WAL journal mode, so readers never wait for the
/// writer. Expiry is judged by SQLite's clock, read in each statement:
/// `unixepoch('subsec')`, in UTC milliseconds.
///
/// Cloning is cheap: clones share the connection.
///
/// # Examples
///
/// ```
/// use lease_sqlite::SqliteStore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lease_sqlite::SqliteError> {
/// let dir = tempfile::tempdir().expect("a temporary directory");
/// let url = format!("sqlite://{}", dir.path().join("leases.db").display());
/// let store = SqliteStore::builder(&url)?
///     .with_table("app_leases")
///     .with_busy_timeout(std::time::Duration::from_secs(2))
///     .connect()
///     .await?;
/// store.migrate().await?;
/// assert_eq!(store.table(), "app_leases");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SqliteStore {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    /// The queue for the connection, which the store's connection thread
    /// owns and serves: see the `conn` module.
    pub(crate) queue: std::sync::mpsc::Sender<crate::conn::Job>,
    /// Interrupts the statement running on the connection: only ever used
    /// while a guarded transaction holds it (see the transaction module).
    pub(crate) interrupt: InterruptHandle,
    pub(crate) sql: Statements,
    /// `None` for an in-memory database.
    pub(crate) path: Option<PathBuf>,
    pub(crate) busy_timeout: Duration,
    /// The timings the busy timeout came from, when it did (see
    /// [`LeaseStore::timings`]).
    pub(crate) timings: Option<Timings>,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let database = match &self.inner.path {
            Some(path) => path.display().to_string(),
            None => MEMORY.to_owned(),
        };
        f.debug_struct("SqliteStore")
            .field("database", &database)
            .field("table", &self.inner.sql.table().name())
            .field("busy_timeout", &self.inner.busy_timeout)
            .finish()
    }
}

impl SqliteStore {
    pub(crate) fn from_inner(inner: Inner) -> Self {
        SqliteStore {
            inner: Arc::new(inner),
        }
    }

    /// The database file, or `None` for an in-memory database.
    #[must_use]
    pub fn path(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }

    /// The lease table's name, as given.
    #[must_use]
    pub fn table(&self) -> &str {
        self.inner.sql.table().name()
    }
}

/// Every method is one call on the connection, and one statement, except
/// [`claim_instant`](LeaseStore::claim_instant): a `BEGIN IMMEDIATE` transaction
/// of a read and a write. Each runs the flow of [`lease_sql::sqlite`] on the
/// connection thread (see the crate's `sql.rs`), with its own copy of the call's
/// values.
///
/// # Cancel safety
///
/// Every method is cancel safe in the sense the trait asks: a dropped call
/// either took effect or did not, and leaves the store usable. A call dropped
/// while still queued for the connection does not run.
#[async_trait]
impl LeaseStore for SqliteStore {
    async fn claim(&self, claim: ClaimRequest<'_>) -> Result<Option<u64>, BoxError> {
        let claim = OwnedClaim::from(claim);
        self.flow(move |conn, sql| blocking(sqlite::claim(conn, sql, &claim.request())))
            .await
    }

    async fn renew(
        &self,
        name: &str,
        token: Token<'_>,
        lease_ms: i64,
    ) -> Result<Option<Renewed>, BoxError> {
        let (name, token) = (name.to_owned(), token.expose().to_owned());
        self.flow(move |conn, sql| {
            blocking(sqlite::renew(
                conn,
                sql,
                &name,
                Token::new(&token),
                lease_ms,
            ))
        })
        .await
    }

    async fn renew_many(
        &self,
        leases: &[(&str, Token<'_>)],
        lease_ms: i64,
    ) -> Result<Vec<Option<Renewed>>, BoxError> {
        let leases: Vec<(String, String)> = leases
            .iter()
            .map(|(name, token)| ((*name).to_owned(), token.expose().to_owned()))
            .collect();
        self.flow(move |conn, sql| {
            let leases: Vec<(&str, Token<'_>)> = leases
                .iter()
                .map(|(name, token)| (name.as_str(), Token::new(token)))
                .collect();
            blocking(sqlite::renew_many(conn, sql, &leases, lease_ms))
        })
        .await
    }

    async fn verify(&self, name: &str, token: Token<'_>) -> Result<Option<u64>, BoxError> {
        let (name, token) = (name.to_owned(), token.expose().to_owned());
        self.flow(move |conn, sql| blocking(sqlite::verify(conn, sql, &name, Token::new(&token))))
            .await
    }

    async fn release(&self, name: &str, token: Token<'_>) -> Result<bool, BoxError> {
        let (name, token) = (name.to_owned(), token.expose().to_owned());
        self.flow(move |conn, sql| blocking(sqlite::release(conn, sql, &name, Token::new(&token))))
            .await
    }

    async fn claim_instant(
        &self,
        claim: ClaimRequest<'_>,
        instant_ms: i64,
    ) -> Result<InstantClaim, BoxError> {
        let claim = OwnedClaim::from(claim);
        self.flow(move |conn, sql| {
            blocking(sqlite::claim_instant(
                conn,
                sql,
                &claim.request(),
                instant_ms,
            ))
        })
        .await
    }

    async fn finish(&self, finish: FinishRequest<'_>) -> Result<Finished, BoxError> {
        let FinishRequest {
            name,
            token,
            instant_ms,
            passed_ms,
        } = finish;
        let (name, token) = (name.to_owned(), token.map(|t| t.expose().to_owned()));
        self.flow(move |conn, sql| {
            let finish = FinishRequest {
                name: &name,
                token: token.as_deref().map(Token::new),
                instant_ms,
                passed_ms,
            };
            blocking(sqlite::finish(conn, sql, &finish))
        })
        .await
    }

    async fn find_unfinished(&self, names: &[&str]) -> Result<Vec<Unfinished>, BoxError> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let names: Vec<String> = names.iter().map(|&name| name.to_owned()).collect();
        self.flow(move |conn, sql| {
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            blocking(sqlite::find_unfinished(conn, sql, &names))
        })
        .await
    }

    async fn claim_rerun(&self, claim: ClaimRequest<'_>, term: u64) -> Result<bool, BoxError> {
        let claim = OwnedClaim::from(claim);
        self.flow(move |conn, sql| blocking(sqlite::claim_rerun(conn, sql, &claim.request(), term)))
            .await
    }

    async fn last_instant(&self, name: &str) -> Result<Option<i64>, BoxError> {
        let name = name.to_owned();
        self.flow(move |conn, sql| blocking(sqlite::last_instant(conn, sql, &name)))
            .await
    }

    async fn force_release(&self, name: &str, term: u64) -> Result<bool, BoxError> {
        let name = name.to_owned();
        self.flow(move |conn, sql| blocking(sqlite::force_release(conn, sql, &name, term)))
            .await
    }

    async fn request_resign(&self, name: &str, term: u64) -> Result<bool, BoxError> {
        let name = name.to_owned();
        self.flow(move |conn, sql| blocking(sqlite::request_resign(conn, sql, &name, term)))
            .await
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>, BoxError> {
        let name = name.to_owned();
        self.flow(move |conn, sql| blocking(sqlite::get(conn, sql, &name)))
            .await
    }

    async fn list(&self, prefix: &str, limit: u32) -> Result<Vec<LeaseInfo>, BoxError> {
        let prefix = prefix.to_owned();
        self.flow(move |conn, sql| blocking(sqlite::list(conn, sql, &prefix, limit)))
            .await
    }

    async fn now_ms(&self) -> Result<i64, BoxError> {
        self.flow(|conn, sql| blocking(sqlite::now_ms(conn, sql)))
            .await
    }

    /// As [`SqliteStore::migrate`].
    async fn migrate(&self) -> Result<(), BoxError> {
        SqliteStore::migrate(self).await.map_err(Into::into)
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

/// A claim's values, owned, for the connection thread.
struct OwnedClaim {
    name: String,
    token: String,
    instance: String,
    lease_ms: i64,
}

impl From<ClaimRequest<'_>> for OwnedClaim {
    fn from(claim: ClaimRequest<'_>) -> Self {
        OwnedClaim {
            name: claim.name.to_owned(),
            token: claim.token.expose().to_owned(),
            instance: claim.instance.to_owned(),
            lease_ms: claim.lease_ms,
        }
    }
}

impl OwnedClaim {
    fn request(&self) -> ClaimRequest<'_> {
        ClaimRequest {
            name: &self.name,
            token: Token::new(&self.token),
            instance: &self.instance,
            lease_ms: self.lease_ms,
        }
    }
}
