//! The crate's error type.

// What kind of failure a server error number is: the one table of the
// MySQL and MariaDB codes, shared with `lease-sqlx`'s store on a sqlx pool,
// so the two classify alike.
use lease_sql::mysql::server_error_kind;

/// What can go wrong building a [`MySqlStore`](crate::MySqlStore), or in a
/// statement. A guarded transaction fails with
/// [`GuardError`](lease_core::GuardError), whose `Database` variant carries
/// the driver's error.
///
/// No variant carries the connection URL or the driver's options: the
/// password never reaches `Debug`, `Display` or a log line. The driver's
/// error, when there is one, is the [`source`](std::error::Error::source),
/// never repeated in the message.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum MySqlError {
    /// The URL's scheme is neither `mysql` nor `mariadb`.
    #[error("unsupported URL scheme {scheme:?}: expected mysql:// or mariadb://")]
    UnsupportedScheme {
        /// The scheme given.
        scheme: String,
    },

    /// The connection URL could not be parsed, or one of its parameters is
    /// unknown or has a bad value.
    #[error("invalid MySQL connection URL")]
    InvalidUrl {
        /// What the driver objected to (it never quotes the password).
        #[source]
        source: mysql_async::UrlError,
    },

    /// The URL's user information holds a `/`, `?` or `#` that was not
    /// percent-encoded, most likely in the password: the URL parser would
    /// end the server's address there and take the rest for a path. The
    /// message never quotes the URL.
    #[error(
        "invalid MySQL connection URL: a '/', '?' or '#' is left in the user information; \
         percent-encode the password (%2F, %3F, %23)"
    )]
    UnencodedPassword,

    /// The URL's port is not a number from 1 to 65535.
    #[error(
        "invalid MySQL connection URL: invalid port in the URL (a number from 1 to 65535 \
         after the host, as in db:3306)"
    )]
    InvalidPort,

    /// The lease table name cannot be used as an identifier.
    #[error("invalid lease table name {table:?}: {reason}")]
    InvalidTable {
        /// The name given.
        table: String,
        /// Why it is refused.
        reason: &'static str,
    },

    /// A setting of the builder is out of range.
    #[error("invalid setting: {0}")]
    InvalidSetting(String),

    /// The first connection failed: server unreachable or too slow to
    /// answer, credentials refused, TLS handshake failed. The message says
    /// which, in the library's words, with what to try (see
    /// [`ConnectFailure`](lease_core::ConnectFailure)).
    #[error("{}", failure.describe("the MySQL server", server))]
    Connect {
        /// `host:port` (or the socket path).
        server: String,
        /// What went wrong, as far as the library can tell.
        failure: lease_core::ConnectFailure,
        /// What the driver reported, when it says more than `failure` does:
        /// the server's message for refused credentials
        /// (`mysql_async::ServerError`), the driver's error
        /// (`mysql_async::Error`) for any other failure. `None` for a
        /// refused connection and a timeout, which the message says all of.
        #[source]
        source: Option<lease_core::BoxError>,
    },

    /// TLS is required (`require_ssl=true` or
    /// [`with_tls`](crate::MySqlStoreBuilder::with_tls)) and the server does
    /// not offer it: the connection is refused rather than made in the clear.
    #[error(
        "the MySQL server at {server} does not offer TLS, which this connection requires; \
         nothing was sent in the clear"
    )]
    TlsUnavailable {
        /// `host:port`.
        server: String,
    },

    /// The server is older than the protocol supports.
    #[error(
        "the server at {server} runs {version}: leases need MariaDB 10.6 or later, or MySQL 8.0 or later"
    )]
    UnsupportedServer {
        /// `host:port`.
        server: String,
        /// What `VERSION()` returned.
        version: String,
    },

    /// The lease table exists with a shape the protocol cannot use.
    #[error("the lease table {table} cannot be used: {reason}")]
    IncompatibleTable {
        /// The quoted table name.
        table: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A statement failed: the server did not answer, or refused it.
    #[error("a MySQL statement failed")]
    Database(#[from] mysql_async::Error),
}

impl MySqlError {
    /// Whether trying again later may succeed: the server could not be
    /// reached or did not answer (a lock wait or deadlock included).
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        match self {
            MySqlError::Connect {
                failure, source, ..
            } => match failure.kind() {
                Some(kind) => kind.is_retryable(),
                None => source
                    .as_deref()
                    .and_then(|e| e.downcast_ref::<mysql_async::Error>())
                    .is_none_or(retryable),
            },
            MySqlError::Database(source) => retryable(source),
            _ => false,
        }
    }
}

impl std::fmt::Debug for MySqlError {
    /// The message and its causes on one line, as
    /// [`Chain`](lease_core::Chain) shows them: what a `main` returning the
    /// error prints.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&lease_core::Chain(self), f)
    }
}

/// The error of the first connection, from what the driver reported: a
/// refused connection and refused credentials in the library's words
/// ([`ConnectFailure`](lease_core::ConnectFailure)), anything else as the
/// driver said it.
pub(crate) fn connect_failure(server: &str, error: mysql_async::Error) -> MySqlError {
    use lease_core::ConnectFailure;

    let (failure, source): (_, Option<lease_core::BoxError>) = match error {
        mysql_async::Error::Io(mysql_async::IoError::Io(e))
            if e.kind() == std::io::ErrorKind::ConnectionRefused =>
        {
            (ConnectFailure::Refused, None)
        }
        // Access denied (a wrong password, no such user), or to the database.
        mysql_async::Error::Server(e) if matches!(e.code, 1044 | 1045 | 1698) => {
            (ConnectFailure::Credentials, Some(Box::new(e)))
        }
        other => (ConnectFailure::Other, Some(Box::new(other))),
    };
    MySqlError::Connect {
        server: server.to_owned(),
        failure,
        source,
    }
}

/// What kind of failure a statement's error is, by the server's error code:
/// see [`LeaseStore::classify`](lease_core::LeaseStore::classify).
pub(crate) fn classify(error: &(dyn std::error::Error + 'static)) -> lease_core::DbErrorKind {
    use lease_core::DbErrorKind;

    let driver = match error.downcast_ref::<MySqlError>() {
        Some(MySqlError::Database(e)) => e,
        Some(MySqlError::Connect {
            failure, source, ..
        }) => {
            if let Some(kind) = failure.kind() {
                return kind;
            }
            match source
                .as_deref()
                .and_then(|e| e.downcast_ref::<mysql_async::Error>())
            {
                Some(e) => e,
                None => return DbErrorKind::Connection,
            }
        }
        Some(_) => return DbErrorKind::Other,
        None => match error.downcast_ref::<mysql_async::Error>() {
            Some(e) => e,
            None => return DbErrorKind::Unclassified,
        },
    };
    match driver {
        mysql_async::Error::Server(e) => server_error_kind(e.code),
        e if retryable(e) => DbErrorKind::Connection,
        _ => DbErrorKind::Other,
    }
}

/// Connection trouble, lock waits, deadlocks and statement timeouts are
/// worth another try; other server errors (a missing table, a refused
/// privilege) are not.
fn retryable(err: &mysql_async::Error) -> bool {
    match err {
        mysql_async::Error::Server(e) => matches!(
            server_error_kind(e.code),
            lease_core::DbErrorKind::Conflict | lease_core::DbErrorKind::Connection
        ),
        mysql_async::Error::Io(_) => true,
        mysql_async::Error::Driver(e) => matches!(
            e,
            mysql_async::DriverError::ConnectionClosed | mysql_async::DriverError::PacketOutOfOrder
        ),
        mysql_async::Error::Other(_) => true,
        mysql_async::Error::Url(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_waits_are_retryable_missing_tables_are_not() {
        let server = |code| {
            MySqlError::Database(mysql_async::Error::Server(mysql_async::ServerError {
                code,
                message: String::new(),
                state: "HY000".into(),
            }))
        };
        assert!(server(1205).is_retryable());
        assert!(server(1213).is_retryable());
        assert!(server(2013).is_retryable());
        assert!(!server(1146).is_retryable());
        assert!(!server(1049).is_retryable());
    }

    /// `classify` reads a server's error number by lease-sql's one table,
    /// the one lease-sqlx's store reads too.
    #[test]
    fn server_codes_classify_by_the_one_table() {
        for code in [1205, 1317, 1146, 1049, 1142, 1927, 1159, 1062] {
            let err = MySqlError::Database(mysql_async::Error::Server(mysql_async::ServerError {
                code,
                message: String::new(),
                state: "HY000".into(),
            }));
            assert_eq!(classify(&err), server_error_kind(code), "error {code}");
        }
        assert_eq!(
            server_error_kind(1146),
            lease_core::DbErrorKind::MissingTable
        );
    }
}
