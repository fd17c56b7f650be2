//! The crate's error type.

use std::path::PathBuf;

/// What can go wrong opening a [`SqliteStore`](crate::SqliteStore). A
/// [guarded transaction](crate::SqliteStore::transaction) fails with
/// [`GuardError`](lease_core::GuardError), whose `Database` variant carries
/// the driver's `rusqlite::Error`.
///
/// The protocol's statements ([`LeaseStore`](lease_core::LeaseStore)
/// methods) report the driver's error as it is, and
/// [`Leases`](lease_core::Leases) wraps it in
/// [`lease_core::Error::Database`], naming the operation and the lease.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum SqliteError {
    /// The table name is not a plain SQL identifier.
    #[error("invalid lease table name {table:?}: {reason}")]
    InvalidTable {
        /// The name that was refused.
        table: String,
        /// Why it was refused.
        reason: &'static str,
    },

    /// The existing lease table cannot carry leases: a column is missing, or
    /// its names do not compare byte for byte (a `COLLATE NOCASE` name
    /// column, say). [`migrate`](lease_core::LeaseStore::migrate) leaves
    /// such a table as it is.
    #[error("the lease table {table:?} cannot carry leases: {reason}")]
    IncompatibleTable {
        /// The table.
        table: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The URL is not one of `sqlite://path`, `sqlite:path` or `sqlite::memory:`.
    #[error("invalid SQLite URL: {reason}")]
    InvalidUrl {
        /// Why it was refused.
        reason: &'static str,
    },

    /// A call did not complete: the runtime shut down before it ran (or
    /// before [`connect`](crate::SqliteStoreBuilder::connect) opened the
    /// database), or it was abandoned.
    #[error("the SQLite call did not complete: the runtime shut down or the call was abandoned")]
    Cancelled,

    /// SQLite could not open the database, or refused to configure the
    /// connection (busy timeout, journal mode).
    #[error("cannot open the SQLite database at {}", path.display())]
    Open {
        /// The database file (`:memory:` for an in-memory database).
        path: PathBuf,
        /// What SQLite reported.
        #[source]
        source: rusqlite::Error,
    },

    /// The database file does not exist, and the store was asked not to
    /// create it ([`OpenMode::Existing`](crate::OpenMode::Existing) or
    /// [`OpenMode::ReadOnly`](crate::OpenMode::ReadOnly)).
    #[error("no SQLite database at {}: the file does not exist", path.display())]
    Missing {
        /// The path given.
        path: PathBuf,
    },

    /// The database file could not be switched to write-ahead logging (some
    /// file systems cannot share the memory WAL needs).
    #[error("the SQLite database at {} stays in journal mode {mode:?}, not WAL", path.display())]
    WalUnavailable {
        /// The database file.
        path: PathBuf,
        /// The journal mode SQLite kept.
        mode: String,
    },

    /// The thread that runs the store's calls on its connection could not
    /// be started.
    #[error("cannot start the SQLite store's connection thread")]
    Thread(#[source] std::io::Error),

    /// A statement failed.
    #[error("an SQLite statement failed")]
    Database(#[from] rusqlite::Error),
}

impl SqliteError {
    /// The error of a call on the connection thread: SQLite's own, or
    /// the call did not complete.
    pub(crate) fn from_call(error: lease_core::BoxError) -> Self {
        match error.downcast::<rusqlite::Error>() {
            Ok(error) => SqliteError::Database(*error),
            Err(_) => SqliteError::Cancelled,
        }
    }

    /// Whether trying again later may succeed: another connection held the
    /// file's lock past the busy timeout.
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        let source = match self {
            SqliteError::Database(source) | SqliteError::Open { source, .. } => source,
            _ => return false,
        };
        matches!(
            source.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
        )
    }
}

impl std::fmt::Debug for SqliteError {
    /// The message and its causes on one line, as
    /// [`Chain`](lease_core::Chain) shows them: what a `main` returning the
    /// error prints.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&lease_core::Chain(self), f)
    }
}

/// What kind of failure a statement's error is, by SQLite's result code:
/// see [`LeaseStore::classify`](lease_core::LeaseStore::classify).
pub(crate) fn classify(error: &(dyn std::error::Error + 'static)) -> lease_core::DbErrorKind {
    use lease_core::DbErrorKind;
    use rusqlite::ErrorCode;

    let Some(e) = error.downcast_ref::<rusqlite::Error>() else {
        return DbErrorKind::Unclassified;
    };
    // A missing table is SQLITE_ERROR with this message, from the prepare.
    if e.to_string().contains("no such table") {
        return DbErrorKind::MissingTable;
    }
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => DbErrorKind::Conflict,
        Some(
            ErrorCode::ReadOnly
            | ErrorCode::PermissionDenied
            | ErrorCode::AuthorizationForStatementDenied,
        ) => DbErrorKind::Permission,
        Some(ErrorCode::CannotOpen | ErrorCode::SystemIoFailure) => DbErrorKind::Connection,
        _ => DbErrorKind::Other,
    }
}
