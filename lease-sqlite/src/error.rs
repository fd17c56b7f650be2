//! The errors of opening and configuring a store.

use std::path::PathBuf;

/// Why a [`SqliteStore`](crate::SqliteStore) could not be opened.
///
/// Only opening and configuring a store fails with this type. The protocol's
/// statements report the driver's error as it is, and
/// [`Leases`](lease_core::Leases) wraps it in
/// [`lease_core::Error::Database`], naming the operation and the lease.
#[derive(Debug, thiserror::Error)]
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

    /// The URL is not one of `sqlite://path`, `sqlite:path` or `sqlite::memory:`.
    #[error("invalid SQLite URL: {reason}")]
    InvalidUrl {
        /// Why it was refused.
        reason: &'static str,
    },

    /// The builder was given neither a path nor
    /// [`in_memory`](crate::SqliteStoreBuilder::in_memory).
    #[error("no SQLite database given: call path() or in_memory() on the builder")]
    MissingDatabase,

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

    /// The database file could not be switched to write-ahead logging (some
    /// file systems cannot share the memory WAL needs).
    #[error("the SQLite database at {} stays in journal mode {mode:?}, not WAL", path.display())]
    WalUnavailable {
        /// The database file.
        path: PathBuf,
        /// The journal mode SQLite kept.
        mode: String,
    },
}
