//! [`SqliteStore`]: the protocol's statements on one SQLite connection.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lease_core::{
    BoxError, ClaimRequest, FinishRequest, Finished, InstantClaim, LeaseInfo, LeaseStore, Token,
    Unfinished,
};
use rusqlite::{InterruptHandle, OptionalExtension, params};

use crate::builder::MEMORY;
use crate::sql::{
    self, Statements, claim_instant_in, find_unfinished_in, info, renew_many_in, term_at,
};

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
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let database = match &self.inner.path {
            Some(path) => path.display().to_string(),
            None => MEMORY.to_owned(),
        };
        f.debug_struct("SqliteStore")
            .field("database", &database)
            .field("table", &self.inner.sql.table.name())
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

    /// The lease table's name.
    #[must_use]
    pub fn table(&self) -> &str {
        self.inner.sql.table.name()
    }
}

/// Every method is one call on the connection, and one statement, except
/// [`claim_instant`](LeaseStore::claim_instant): a `BEGIN IMMEDIATE` transaction
/// of a read and a write.
///
/// # Cancel safety
///
/// Every method is cancel safe in the sense the trait asks: a dropped call
/// either took effect or did not, and leaves the store usable. A call dropped
/// while still queued for the connection does not run.
#[async_trait]
impl LeaseStore for SqliteStore {
    async fn claim(&self, claim: ClaimRequest<'_>) -> Result<Option<u64>, BoxError> {
        let ClaimRequest {
            name,
            token,
            instance,
            lease_ms,
        } = claim;
        let holder = token.expose();
        let (name, holder, instance) = (name.to_owned(), holder.to_owned(), instance.to_owned());
        self.run(move |conn, sql| {
            returning(
                &mut *conn.prepare_cached(&sql.claim)?,
                params![name, holder, instance, lease_ms],
                |row| term_at(row, 0),
            )
        })
        .await
    }

    async fn renew(
        &self,
        name: &str,
        token: Token<'_>,
        lease_ms: i64,
    ) -> Result<Option<i64>, BoxError> {
        let holder = token.expose();
        let (name, holder) = (name.to_owned(), holder.to_owned());
        self.run(move |conn, sql| {
            returning(
                &mut *conn.prepare_cached(&sql.renew)?,
                params![name, holder, lease_ms],
                |row| row.get(0),
            )
        })
        .await
    }

    async fn renew_many(
        &self,
        leases: &[(&str, Token<'_>)],
        lease_ms: i64,
    ) -> Result<Vec<Option<i64>>, BoxError> {
        let leases: Vec<(String, String)> = leases
            .iter()
            .map(|(name, token)| ((*name).to_owned(), token.expose().to_owned()))
            .collect();
        self.run(move |conn, sql| renew_many_in(conn, sql, &leases, lease_ms))
            .await
    }

    async fn verify(&self, name: &str, token: Token<'_>) -> Result<Option<u64>, BoxError> {
        let holder = token.expose();
        let (name, holder) = (name.to_owned(), holder.to_owned());
        self.run(move |conn, sql| {
            conn.prepare_cached(&sql.verify)?
                .query_row(params![name, holder], |row| term_at(row, 0))
                .optional()
        })
        .await
    }

    async fn release(&self, name: &str, token: Token<'_>) -> Result<bool, BoxError> {
        let holder = token.expose();
        let (name, holder) = (name.to_owned(), holder.to_owned());
        self.run(move |conn, sql| {
            conn.prepare_cached(&sql.release)?
                .execute(params![name, holder])
                .map(|changed| changed > 0)
        })
        .await
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
        let (name, holder, instance) = (name.to_owned(), holder.to_owned(), instance.to_owned());
        self.run(move |conn, sql| {
            claim_instant_in(conn, sql, (&name, &holder, &instance, slot_ms, lease_ms))
        })
        .await
    }

    async fn finish(&self, finish: FinishRequest<'_>) -> Result<Finished, BoxError> {
        let FinishRequest {
            name,
            token,
            instant_ms: slot_ms,
            passed_ms,
        } = finish;
        let holder = token.map(Token::expose);
        let (name, holder) = (name.to_owned(), holder.map(str::to_owned));
        self.run(move |conn, sql| {
            let released: Option<bool> = returning(
                &mut *conn.prepare_cached(&sql.finish)?,
                params![name, holder, slot_ms, passed_ms],
                |row| row.get(0),
            )?;
            Ok(match released {
                Some(true) => Finished::Released,
                Some(false) => Finished::RecordedWithoutLease,
                None => Finished::NotRecorded,
            })
        })
        .await
    }

    async fn find_unfinished(&self, names: &[&str]) -> Result<Vec<Unfinished>, BoxError> {
        let names: Vec<String> = names.iter().map(|&name| name.to_owned()).collect();
        if names.is_empty() {
            return Ok(Vec::new());
        }
        self.run(move |conn, sql| find_unfinished_in(conn, sql, &names))
            .await
    }

    async fn claim_rerun(&self, claim: ClaimRequest<'_>, term: u64) -> Result<bool, BoxError> {
        let ClaimRequest {
            name,
            token,
            instance,
            lease_ms,
        } = claim;
        let holder = token.expose();
        let Ok(term) = i64::try_from(term) else {
            return Ok(false); // no row has a term SQLite cannot store
        };
        let (name, holder, instance) = (name.to_owned(), holder.to_owned(), instance.to_owned());
        self.run(move |conn, sql| {
            conn.prepare_cached(&sql.claim_rerun)?
                .execute(params![name, term, holder, instance, lease_ms])
                .map(|changed| changed > 0)
        })
        .await
    }

    async fn last_instant(&self, name: &str) -> Result<Option<i64>, BoxError> {
        let name = name.to_owned();
        self.run(move |conn, sql| {
            conn.prepare_cached(&sql.last_instant)?
                .query_row([name], |row| row.get(0))
                .optional()
        })
        .await
    }

    async fn force_release(&self, name: &str, term: u64) -> Result<bool, BoxError> {
        // A term past i64::MAX cannot be in the table: nothing to free.
        let Ok(term) = i64::try_from(term) else {
            return Ok(false);
        };
        let name = name.to_owned();
        self.run(move |conn, sql| {
            conn.prepare_cached(&sql.force_release)?
                .execute(params![name, term])
                .map(|changed| changed > 0)
        })
        .await
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>, BoxError> {
        let name = name.to_owned();
        self.run(move |conn, sql| {
            conn.prepare_cached(&sql.get)?
                .query_row([name], info)
                .optional()
        })
        .await
    }

    async fn list(&self, prefix: &str, limit: u32) -> Result<Vec<LeaseInfo>, BoxError> {
        let prefix = prefix.to_owned();
        self.run(move |conn, sql| {
            let mut stmt = conn.prepare_cached(&sql.list)?;
            let rows = stmt.query_map(params![prefix, limit], info)?;
            let mut infos = Vec::new();
            for row in rows {
                let info = row?;
                if !info.name.starts_with(prefix.as_str()) {
                    break;
                }
                infos.push(info);
            }
            Ok(infos)
        })
        .await
    }

    async fn now_ms(&self) -> Result<i64, BoxError> {
        self.run(|conn, _| {
            conn.prepare_cached(sql::SELECT_NOW)?
                .query_row([], |row| row.get(0))
        })
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
}

/// Runs a write whose `RETURNING` answers one row or none, and returns that
/// row (through `read`), stepping the statement to its end.
///
/// Why to its end: SQLite runs its WAL hook, the automatic checkpoint, only
/// when a statement's step returns `SQLITE_DONE`. `query_row` reads the
/// row and resets the statement, which commits the write but skips the
/// hook: with only such writes on the file (a holder renewing), the WAL was
/// never checkpointed and grew without bound (tens of MB in seconds), every
/// commit extending the file, and a renewal cost twice the same statement
/// written by hand (issue 17).
fn returning<T>(
    stmt: &mut rusqlite::Statement<'_>,
    params: impl rusqlite::Params,
    read: impl FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<Option<T>> {
    let mut rows = stmt.query(params)?;
    let first = match rows.next()? {
        Some(row) => Some(read(row)?),
        None => None,
    };
    while rows.next()?.is_some() {}
    Ok(first)
}
