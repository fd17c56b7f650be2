//! The errors of configuring and connecting a store.

use std::path::PathBuf;

/// Why a [`PostgresStore`](crate::PostgresStore) could not be built or
/// connected.
///
/// Only configuring and connecting a store, and `migrate` finding a table
/// it cannot use, fail with this type. The
/// protocol's statements report the driver's error as it is, and
/// [`Leases`](lease_core::Leases) wraps it in
/// [`lease_core::Error::Database`], naming the operation and the lease. A
/// guarded transaction fails with
/// [`GuardError`](lease_core::GuardError).
///
/// No message, `Debug` output or source of this type ever contains the
/// connection's password.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum PostgresError {
    /// The URL is not a `postgres://` or `postgresql://` URL, or one of its
    /// parameters is not understood.
    #[error("invalid PostgreSQL URL: {reason}")]
    InvalidUrl {
        /// Why it was refused (never the URL itself, which may hold a password).
        reason: String,
    },

    /// The table name is not a plain SQL identifier.
    #[error("invalid lease table name {table:?}: {reason}")]
    InvalidTable {
        /// The name that was refused.
        table: String,
        /// Why it was refused.
        reason: &'static str,
    },

    /// The existing lease table cannot carry leases: a column the
    /// statements use is missing, or `name` compares under a
    /// nondeterministic collation. `migrate` leaves such a table as it is.
    #[error("the lease table {table:?} cannot carry leases: {reason}")]
    IncompatibleTable {
        /// The table.
        table: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The TLS configuration could not be built (for example no protocol
    /// version in common with the crypto provider).
    #[error("cannot configure TLS for PostgreSQL")]
    Tls(#[source] rustls::Error),

    /// The root certificates named by `sslrootcert` could not be read.
    #[error("cannot read the root certificates at {}", path.display())]
    RootCertificates {
        /// The file named by `sslrootcert`.
        path: PathBuf,
        /// What reading or parsing it reported.
        #[source]
        source: std::io::Error,
    },

    /// The connection pool could not be built.
    #[error("cannot build the PostgreSQL connection pool")]
    Pool(#[source] deadpool_postgres::BuildError),

    /// The first connection could not be opened: the server is unreachable
    /// or did not answer in time, refused the credentials, or the TLS
    /// handshake failed. The message says which, in the library's words,
    /// with what to try (see [`ConnectFailure`](lease_core::ConnectFailure)).
    #[error("{}", failure.describe("PostgreSQL", server))]
    Connect {
        /// The servers tried: `host:port` (or the socket directory), comma
        /// separated; never the password.
        server: String,
        /// What went wrong, as far as the library can tell.
        failure: lease_core::ConnectFailure,
        /// What the driver or the pool reported, when it says more than
        /// `failure` does: the server's message for refused credentials,
        /// the driver's error for any other failure. `None` for a refused
        /// connection and a timeout, which the message says all of.
        #[source]
        source: Option<lease_core::BoxError>,
    },

    /// A statement failed, or no connection could be had for it: see
    /// [`is_retryable`](Self::is_retryable).
    #[error("a PostgreSQL statement failed")]
    Database(#[source] lease_core::BoxError),
}

impl PostgresError {
    /// Whether trying again later may succeed: the error of a statement
    /// that the server may accept next time (a timeout, a lost
    /// connection, a conflict), by
    /// [`LeaseStore::classify`](lease_core::LeaseStore::classify)'s rules.
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        match self {
            PostgresError::Connect {
                failure, source, ..
            } => match failure.kind() {
                Some(kind) => kind.is_retryable(),
                None => source.as_deref().is_none_or(|e| classify(e).is_retryable()),
            },
            PostgresError::Database(source) => classify(&**source).is_retryable(),
            _ => false,
        }
    }

    /// The error of a statement run on the store's behalf: this crate's
    /// own when it is one, [`Database`](Self::Database) otherwise.
    pub(crate) fn from_statement(error: lease_core::BoxError) -> Self {
        match error.downcast::<PostgresError>() {
            Ok(own) => *own,
            Err(other) => PostgresError::Database(other),
        }
    }
}

impl std::fmt::Debug for PostgresError {
    /// The message and its causes on one line, as
    /// [`Chain`](lease_core::Chain) shows them: what a `main` returning the
    /// error prints.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&lease_core::Chain(self), f)
    }
}

/// The error of the first connection, from what the pool reported: a
/// refused connection, a timeout and refused credentials in the library's
/// words ([`ConnectFailure`]), anything else as the driver said it.
pub(crate) fn connect_error(
    server: String,
    error: deadpool_postgres::PoolError,
    timeouts: deadpool_postgres::Timeouts,
    setting: &'static str,
) -> PostgresError {
    use deadpool_postgres::{PoolError, TimeoutType};
    use lease_core::ConnectFailure;
    use tokio_postgres::error::SqlState;

    let timed_out = |after: Option<std::time::Duration>| PostgresError::Connect {
        server: server.clone(),
        failure: ConnectFailure::TimedOut {
            after: after.unwrap_or(crate::DEFAULT_CONNECT_TIMEOUT),
            setting,
        },
        source: None,
    };
    let error = match error {
        PoolError::Timeout(TimeoutType::Create) => return timed_out(timeouts.create),
        PoolError::Timeout(TimeoutType::Wait) => return timed_out(timeouts.wait),
        PoolError::Timeout(TimeoutType::Recycle) => return timed_out(timeouts.recycle),
        PoolError::Backend(e) => e,
        other => {
            return PostgresError::Connect {
                server,
                failure: ConnectFailure::Other,
                source: Some(Box::new(other)),
            };
        }
    };
    let credentials = [
        SqlState::INVALID_PASSWORD,
        SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
    ];
    if error.code().is_some_and(|code| credentials.contains(code)) {
        return PostgresError::Connect {
            server,
            failure: ConnectFailure::Credentials,
            // The server's message, without the driver's "db error" over it.
            source: error.into_source(),
        };
    }
    let io_kind = std::iter::successors(std::error::Error::source(&error), |e| e.source())
        .find_map(|e| e.downcast_ref::<std::io::Error>())
        .map(std::io::Error::kind);
    let failure = match io_kind {
        Some(std::io::ErrorKind::ConnectionRefused) => ConnectFailure::Refused,
        Some(std::io::ErrorKind::TimedOut) => {
            return timed_out(timeouts.create);
        }
        _ => ConnectFailure::Other,
    };
    let source: Option<lease_core::BoxError> = match failure {
        ConnectFailure::Other => Some(Box::new(error)),
        _ => None,
    };
    PostgresError::Connect {
        server,
        failure,
        source,
    }
}

/// What kind of failure a statement's error is, by its SQLSTATE: see
/// [`LeaseStore::classify`](lease_core::LeaseStore::classify).
pub(crate) fn classify(error: &(dyn std::error::Error + 'static)) -> lease_core::DbErrorKind {
    use lease_core::DbErrorKind;
    use tokio_postgres::error::SqlState;

    if let Some(pool) = error.downcast_ref::<deadpool_postgres::PoolError>() {
        return match pool {
            deadpool_postgres::PoolError::Backend(e) => classify(e),
            _ => DbErrorKind::Connection,
        };
    }
    let Some(e) = error.downcast_ref::<tokio_postgres::Error>() else {
        return DbErrorKind::Unclassified;
    };
    let Some(code) = e.code() else {
        // No SQLSTATE: the connection failed or was closed.
        return DbErrorKind::Connection;
    };
    match code {
        c if *c == SqlState::UNDEFINED_TABLE => DbErrorKind::MissingTable,
        c if *c == SqlState::T_R_SERIALIZATION_FAILURE
            || *c == SqlState::T_R_DEADLOCK_DETECTED
            || *c == SqlState::LOCK_NOT_AVAILABLE
            || *c == SqlState::QUERY_CANCELED
            || *c == SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT =>
        {
            DbErrorKind::Conflict
        }
        c if *c == SqlState::INSUFFICIENT_PRIVILEGE
            || *c == SqlState::INVALID_PASSWORD
            || *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION =>
        {
            DbErrorKind::Permission
        }
        c if c.code().starts_with("08")
            || *c == SqlState::ADMIN_SHUTDOWN
            || *c == SqlState::CRASH_SHUTDOWN
            || *c == SqlState::CANNOT_CONNECT_NOW
            || *c == SqlState::TOO_MANY_CONNECTIONS =>
        {
            DbErrorKind::Connection
        }
        _ => DbErrorKind::Other,
    }
}
