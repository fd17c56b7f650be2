//! The one error type of the protocol.

use std::fmt;
use std::time::Duration;

/// The error a [`LeaseStore`](crate::LeaseStore) method returns: whatever the
/// driver reported, boxed. The coordinator wraps it in [`Error::Database`],
/// which names the operation and the lease.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong with a lease.
///
/// A refused claim is not an error: [`Leases::claim`](crate::Leases::claim)
/// returns `Ok(None)` for it. An `Err` means either that the database could not
/// answer ([`is_retryable`](Error::is_retryable)), or that the lease is lost and
/// the work under it must stop ([`is_lost`](Error::is_lost)), or that the caller
/// asked for something that can never work (a bad name, impossible timings).
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lease is no longer held by this holder.
    #[error("lease {name:?} lost: {cause}")]
    Lost {
        /// The name the lease was held under.
        name: String,
        /// What happened to it.
        cause: LostCause,
    },

    /// The database cannot carry leases (ClickHouse, for example, has neither
    /// row-level updates nor unique keys).
    #[error("leases need a MySQL, PostgreSQL or SQLite database, not {database}")]
    UnsupportedDatabase {
        /// The database that was offered, as named by its URL scheme.
        database: String,
    },

    /// The name can never be claimed.
    #[error("invalid lease name: {reason}")]
    InvalidName {
        /// Why the name is refused.
        reason: NameError,
    },

    /// The instance id cannot be written beside a claim: it is empty,
    /// longer than [`MAX_INSTANCE_CHARS`](crate::MAX_INSTANCE_CHARS), or
    /// holds a control character (which would forge log lines and terminal
    /// output). See [`Leases::with_instance`](crate::Leases::with_instance).
    #[error("invalid instance id {instance:?} ({origin}): {reason}")]
    InvalidInstance {
        /// The instance id as given. The message shows it escaped, as
        /// `Debug` does; log it the same way.
        instance: String,
        /// Where it came from: `Leases::with_instance`, or the environment
        /// variable `LEASE_INSTANCE`.
        origin: &'static str,
        /// Why it is refused.
        reason: String,
    },

    /// The timings cannot keep the protocol's promises.
    #[error("invalid lease timings: {0}")]
    InvalidTimings(String),

    /// The coordinator's timings are out of step with its store's
    /// server-side bounds: the store would keep a statement going at the
    /// server after the coordinator gave up on it. Every claim refuses
    /// (see [`Leases::with_timings`](crate::Leases::with_timings)).
    #[error(
        "the lease timings are out of step with the store's server-side bounds ({reason}): \
         build the store with the same timings (`with_timings` on its builder, or \
         `dblease::connect_with`), or take the store's timings (`Leases::new` does)"
    )]
    TimingsOutOfStep {
        /// Which of the store's bounds outlast the coordinator's, and by how
        /// much.
        reason: String,
    },

    /// An instant of a schedule that cannot be claimed: it is not after the
    /// UNIX epoch, or it does not fit in milliseconds.
    #[error("invalid instant for lease {name:?}: {reason}")]
    InvalidInstant {
        /// The name the instant was to be claimed under.
        name: String,
        /// Why the instant is refused.
        reason: &'static str,
    },

    /// [`Handle::finish`](crate::Handle::finish) on a handle that was claimed
    /// with [`Leases::claim`](crate::Leases::claim): only an instant's round
    /// can be finished.
    #[error("lease {name:?} was not claimed for an instant, so there is no round to finish")]
    NoInstant {
        /// The lease's name.
        name: String,
    },

    /// The database did not answer the statement, or refused it: connection
    /// refused or cut, a deadlock, a refused privilege, any other server
    /// error. [`kind`](Error::db_kind) tells which, as the backend classified
    /// it.
    #[error("{op} of lease {name} failed ({kind})", name = LeaseName(name.as_deref()))]
    Database {
        /// The protocol statement that failed.
        op: Op,
        /// The lease it was for; `None` for statements about no single lease.
        name: Option<String>,
        /// What kind of failure it is.
        kind: DbErrorKind,
        /// What the driver reported.
        #[source]
        source: BoxError,
    },

    /// The lease table does not exist: run [`Leases::migrate`](crate::Leases::migrate)
    /// (or `lease migrate`) once, as the process starts. Not retryable.
    #[error(
        "{op} of lease {name} failed: the lease table does not exist; run `migrate()` \
         (or `lease migrate`) first",
        name = LeaseName(name.as_deref())
    )]
    MissingTable {
        /// The protocol statement that failed.
        op: Op,
        /// The lease it was for; `None` for statements about no single lease.
        name: Option<String>,
        /// What the driver reported.
        #[source]
        source: BoxError,
    },

    /// The database did not answer within the protocol's bound on its own
    /// statements (see [`Timings::statement_timeout`](crate::Timings::statement_timeout)).
    #[error("{op} of lease {name} got no answer within {after:?}", name = LeaseName(name.as_deref()))]
    Timeout {
        /// The protocol statement that timed out.
        op: Op,
        /// The lease it was for; `None` for statements about no single lease.
        name: Option<String>,
        /// The bound that passed.
        after: Duration,
    },

    /// The OS random number generator failed to provide a holder token.
    #[error("the operating system's random number generator failed")]
    Entropy(#[source] getrandom::Error),

    /// Work run under a lease panicked.
    #[error("work under lease {name:?} panicked at {location}: {message}")]
    Panicked {
        /// The lease the work ran under.
        name: String,
        /// Where the panic happened (`file:line:column`), when known.
        location: String,
        /// The panic's message.
        message: String,
    },
}

impl Error {
    /// Whether the lease is lost: the work under it must stop.
    #[must_use]
    pub fn is_lost(&self) -> bool {
        matches!(self, Error::Lost { .. })
    }

    /// Whether trying again later may succeed: the database did not answer
    /// in time, the connection failed, or the statement lost a deadlock or a
    /// lock wait ([`DbErrorKind::is_retryable`]). A missing table, a refused
    /// privilege or a bad name are not. A caller waits
    /// [`Timings::retry_interval`](crate::Timings::retry_interval) before it
    /// tries again.
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Database { kind, .. } => kind.is_retryable(),
            Error::Timeout { .. } => true,
            _ => false,
        }
    }

    /// The kind of a database failure: [`Error::Database`]'s kind, or
    /// [`DbErrorKind::MissingTable`].
    #[must_use]
    pub fn db_kind(&self) -> Option<DbErrorKind> {
        match self {
            Error::Database { kind, .. } => Some(*kind),
            Error::MissingTable { .. } => Some(DbErrorKind::MissingTable),
            _ => None,
        }
    }

    /// The error of a store call that failed, as its store classified it.
    pub(crate) fn from_store(
        kind: DbErrorKind,
        op: Op,
        name: Option<&str>,
        source: BoxError,
    ) -> Self {
        let name = name.map(str::to_owned);
        match kind {
            DbErrorKind::MissingTable => Error::MissingTable { op, name, source },
            kind => Error::Database {
                op,
                name,
                kind,
                source,
            },
        }
    }

    /// The cause of a loss, if this is one.
    #[must_use]
    pub fn lost_cause(&self) -> Option<LostCause> {
        match self {
            Error::Lost { cause, .. } => Some(*cause),
            _ => None,
        }
    }

    pub(crate) fn lost(name: &str, cause: LostCause) -> Self {
        Error::Lost {
            name: name.to_owned(),
            cause,
        }
    }
}

impl fmt::Debug for Error {
    /// The message and its causes on one line, so that a `main` returning
    /// the error prints something a person can read (never a driver's
    /// internal structure).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", Chain(self))
    }
}

/// An error and its sources on one line, `error: source: source ...`: what
/// a log line or a command's message shows.
///
/// Each distinct cause is shown once: a source whose message is already
/// part of its parent's (a driver error that repeats its source's message
/// in its own, `Server error: `ERROR 1045 ...'` over `ERROR 1045 ...`), or
/// that the line already ends with, is left out. Line breaks a driver put
/// in a message become spaces.
///
/// ```
/// use std::error::Error;
/// use std::fmt;
///
/// use lease_core::Chain;
///
/// #[derive(Debug)]
/// struct Claim(std::io::Error);
///
/// impl fmt::Display for Claim {
///     fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
///         f.write_str("claim of \"leader:billing\" failed")
///     }
/// }
///
/// impl Error for Claim {
///     fn source(&self) -> Option<&(dyn Error + 'static)> {
///         Some(&self.0)
///     }
/// }
///
/// let err = Claim(std::io::Error::other("connection\nrefused"));
/// assert_eq!(
///     Chain(&err).to_string(),
///     "claim of \"leader:billing\" failed: connection refused"
/// );
/// ```
#[derive(Clone, Copy)]
pub struct Chain<'a>(pub &'a (dyn std::error::Error + 'static));

impl fmt::Debug for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Chain").field(&self.to_string()).finish()
    }
}

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_chain(f, &self.0.to_string(), self.0.source())
    }
}

/// Writes `top` and then each of the sources from `source` on, as
/// [`Chain`] does: for the `Debug` of error types that are not `'static`
/// (a generic one), which cannot be a [`Chain`] themselves.
pub(crate) fn write_chain(
    f: &mut fmt::Formatter<'_>,
    top: &str,
    mut source: Option<&(dyn std::error::Error + 'static)>,
) -> fmt::Result {
    let mut line = top.to_owned();
    let mut parent = top.to_owned();
    while let Some(s) = source {
        let text = s.to_string();
        if !parent.contains(&text) && !line.ends_with(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        parent = text;
        source = s.source();
    }
    if line.contains(['\n', '\r']) {
        line = line.replace(['\n', '\r'], " ");
    }
    f.write_str(&line)
}

/// What kind of failure a database error is, as the store's backend
/// classifies it ([`LeaseStore::classify`](crate::LeaseStore::classify)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DbErrorKind {
    /// The connection failed: refused, cut, the pool could not give one, the
    /// server shutting down or out of connections. Retryable.
    Connection,
    /// The statement lost a deadlock, a serialization conflict or a lock
    /// wait, or hit a server-side statement timeout. Retryable.
    Conflict,
    /// The lease table does not exist: run `migrate()`. Not retryable.
    MissingTable,
    /// The database user lacks a privilege, or the credentials were refused.
    /// Not retryable.
    Permission,
    /// Any other server error (a table of the wrong shape, a constraint):
    /// retrying the same statement will not help. Not retryable.
    Other,
    /// The backend could not tell: counted as retryable.
    Unclassified,
}

impl DbErrorKind {
    /// Whether trying again later may succeed.
    #[must_use]
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            DbErrorKind::Connection | DbErrorKind::Conflict | DbErrorKind::Unclassified
        )
    }
}

impl fmt::Display for DbErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DbErrorKind::Connection => "connection failed",
            DbErrorKind::Conflict => "lock conflict or statement timeout",
            DbErrorKind::MissingTable => "the lease table does not exist",
            DbErrorKind::Permission => "permission denied",
            DbErrorKind::Other => "refused by the database",
            DbErrorKind::Unclassified => "database error",
        })
    }
}

/// Why a store could not make its first connection, in the library's
/// words, each with what to try: the part of the server backends'
/// connection errors (`PostgresError::Connect`, `MySqlError::Connect`)
/// that reads the same on every backend. The driver's own error, when it
/// adds something (the server's message for refused credentials), is the
/// backend error's source.
///
/// ```
/// use std::time::Duration;
///
/// use lease_core::ConnectFailure;
///
/// assert_eq!(
///     ConnectFailure::Refused.describe("PostgreSQL", "db:5432").to_string(),
///     "could not connect to PostgreSQL: connection refused: is the server running on db:5432?"
/// );
/// let slow = ConnectFailure::TimedOut { after: Duration::from_secs(5), setting: "connect_timeout" };
/// assert_eq!(
///     slow.describe("PostgreSQL", "db:5432").to_string(),
///     "could not connect to PostgreSQL at db:5432 within 5 s (connect_timeout): \
///      check the address and any firewall, or raise connect_timeout for a slow server"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConnectFailure {
    /// Nothing accepted the connection at the host and port: the server is
    /// not running, listens on another port or address, or a firewall
    /// rejects the connection.
    Refused,
    /// The connection (TCP, TLS and the login) did not complete within the
    /// bound: a wrong address that drops packets, a firewall that does, or
    /// a server too busy to answer.
    TimedOut {
        /// The bound that passed.
        after: Duration,
        /// The setting that sets it (`connect_timeout` in a PostgreSQL URL).
        setting: &'static str,
    },
    /// The server refused the login: a wrong password, or no such user.
    Credentials,
    /// Anything else: the backend error's source says what.
    Other,
}

impl ConnectFailure {
    /// The message of a connection error to `database` (`PostgreSQL`,
    /// `the MySQL server`) at `server` (`host:port`): what the backends'
    /// `Connect` errors display.
    #[must_use]
    pub fn describe<'a>(&'a self, database: &'a str, server: &'a str) -> impl fmt::Display + 'a {
        struct Describe<'a>(&'a ConnectFailure, &'a str, &'a str);

        impl fmt::Display for Describe<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let Describe(failure, database, server) = *self;
                match failure {
                    ConnectFailure::Refused => write!(
                        f,
                        "could not connect to {database}: connection refused: \
                         is the server running on {server}?"
                    ),
                    ConnectFailure::TimedOut { after, setting } => write!(
                        f,
                        "could not connect to {database} at {server} within {} ({setting}): \
                         check the address and any firewall, or raise {setting} for a slow server",
                        Seconds(*after)
                    ),
                    ConnectFailure::Credentials => write!(
                        f,
                        "could not connect to {database} at {server}: the server refused the \
                         login (check the user name and password in the URL)"
                    ),
                    ConnectFailure::Other => {
                        write!(f, "could not connect to {database} at {server}")
                    }
                }
            }
        }

        Describe(self, database, server)
    }

    /// The kind of failure it is; `None` for [`Other`](Self::Other), which
    /// the backend classifies by its driver's error.
    #[must_use]
    pub fn kind(&self) -> Option<DbErrorKind> {
        match self {
            ConnectFailure::Refused | ConnectFailure::TimedOut { .. } => {
                Some(DbErrorKind::Connection)
            }
            ConnectFailure::Credentials => Some(DbErrorKind::Permission),
            ConnectFailure::Other => None,
        }
    }
}

/// A duration as a person writes it: `5 s`, `2.5 s`, `500 ms`.
struct Seconds(Duration);

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        if d < Duration::from_secs(1) {
            write!(f, "{} ms", d.as_millis())
        } else if d.subsec_millis() == 0 {
            write!(f, "{} s", d.as_secs())
        } else {
            write!(f, "{:.1} s", d.as_secs_f64())
        }
    }
}

/// How a lease was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LostCause {
    /// The database says the name is no longer this holder's: it expired and
    /// someone else claimed it, it expired and nobody claimed it yet, or it was
    /// released.
    NotHolder,
    /// No renewal succeeded within the local deadline of the start of the last
    /// one that did: the holder stepped down before the database would let
    /// anyone else claim the name.
    DeadlineExceeded,
    /// The database's clock ran ahead of the holder's between two renewals
    /// by more than [`Timings::clock_jump_bound`](crate::Timings::clock_jump_bound)
    /// (a clock stepped forward on the server, a failover to a server whose
    /// clock is ahead): every expiry the database judges came that much
    /// sooner, eating the step-down margin, so the holder steps down at
    /// once rather than trust the next deadline.
    ClockJump,
}

impl fmt::Display for LostCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LostCause::NotHolder => "no longer this holder's",
            LostCause::DeadlineExceeded => "no renewal within the local deadline",
            LostCause::ClockJump => "the database's clock jumped ahead",
        })
    }
}

/// Why a name is refused.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NameError {
    /// The name is the empty string.
    Empty,
    /// The name is longer than the name column.
    TooLong {
        /// The name's length in bytes.
        len: usize,
        /// The limit, [`MAX_NAME_BYTES`](crate::MAX_NAME_BYTES).
        max: usize,
        /// The start of the name, to recognise it by.
        prefix: String,
    },
    /// The name holds a control character: C0 (NUL, newline, escape...),
    /// DEL or C1 (see [`char::is_control`]).
    ControlCharacter {
        /// The first control character in the name.
        character: char,
        /// Its offset in the name, in bytes.
        at: usize,
        /// The name. The error's message shows it escaped, as `Debug`
        /// does; log it the same way (`?name`), never with `Display`.
        name: String,
    },
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameError::Empty => f.write_str("the name is empty"),
            NameError::TooLong { len, max, prefix } => write!(
                f,
                "the name {prefix:?}... is {len} bytes long, over the limit of {max} bytes"
            ),
            NameError::ControlCharacter {
                character,
                at,
                name,
            } => write!(
                f,
                "the name {name:?} holds the control character U+{:04X} at byte {at}",
                u32::from(*character)
            ),
        }
    }
}

/// The protocol statement an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    /// Claiming a name (with its insert-if-absent).
    Claim,
    /// Renewing a lease.
    Renew,
    /// Verifying that a lease is still held.
    Verify,
    /// Releasing a lease.
    Release,
    /// Claiming an instant of a schedule.
    ClaimInstant,
    /// Finishing an instant's round.
    Finish,
    /// Finding the instants whose round was cut short.
    FindUnfinished,
    /// Claiming a cut-short instant a second time.
    ClaimRerun,
    /// Reading the last instant on record.
    LastInstant,
    /// Reading the database's clock.
    Now,
    /// Creating the lease table.
    Migrate,
    /// Reading one lease.
    Get,
    /// Listing leases.
    List,
    /// Freeing a lease whoever holds it.
    ForceRelease,
    /// Asking a lease's holder to resign.
    RequestResign,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Claim => "claim",
            Op::Renew => "renewal",
            Op::Verify => "verification",
            Op::Release => "release",
            Op::ClaimInstant => "instant claim",
            Op::Finish => "finish",
            Op::FindUnfinished => "search for unfinished instants",
            Op::ClaimRerun => "second claim",
            Op::LastInstant => "last-instant read",
            Op::Now => "clock read",
            Op::Migrate => "table creation",
            Op::Get => "read",
            Op::List => "listing",
            Op::ForceRelease => "forced release",
            Op::RequestResign => "resign request",
        })
    }
}

struct LeaseName<'a>(Option<&'a str>);

impl fmt::Display for LeaseName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(name) => write!(f, "{name:?}"),
            None => f.write_str("table"),
        }
    }
}

/// A shorthand for `Result<T, lease_core::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_error_names_operation_and_lease_but_not_its_cause() {
        let err = Error::Database {
            op: Op::Renew,
            name: Some("leader:api".into()),
            kind: DbErrorKind::Connection,
            source: "connection reset".into(),
        };
        assert_eq!(
            err.to_string(),
            r#"renewal of lease "leader:api" failed (connection failed)"#
        );
        assert_eq!(
            format!("{err:?}"),
            r#"renewal of lease "leader:api" failed (connection failed): connection reset"#,
            "Debug is the one-line chain"
        );
        let source = std::error::Error::source(&err).map(ToString::to_string);
        assert_eq!(source.as_deref(), Some("connection reset"));
        assert!(err.is_retryable());
        assert!(!err.is_lost());
    }

    #[test]
    fn only_what_a_retry_can_fix_is_retryable() {
        let err = |kind| Error::from_store(kind, Op::Claim, Some("x"), "boom".into());
        assert!(err(DbErrorKind::Connection).is_retryable());
        assert!(err(DbErrorKind::Conflict).is_retryable());
        assert!(err(DbErrorKind::Unclassified).is_retryable());
        assert!(!err(DbErrorKind::Permission).is_retryable());
        assert!(!err(DbErrorKind::Other).is_retryable());
        let missing = err(DbErrorKind::MissingTable);
        assert!(matches!(missing, Error::MissingTable { .. }));
        assert!(!missing.is_retryable());
        assert_eq!(missing.db_kind(), Some(DbErrorKind::MissingTable));
        assert!(missing.to_string().contains("run `migrate()`"), "{missing}");
    }

    #[test]
    fn lost_is_matchable_and_says_why() {
        let err = Error::lost("cron:report", LostCause::NotHolder);
        assert!(err.is_lost());
        assert!(!err.is_retryable());
        assert_eq!(err.lost_cause(), Some(LostCause::NotHolder));
        assert_eq!(
            err.to_string(),
            r#"lease "cron:report" lost: no longer this holder's"#
        );
    }

    #[test]
    fn table_statements_name_the_table() {
        let err = Error::Timeout {
            op: Op::Migrate,
            name: None,
            after: Duration::from_secs(5),
        };
        assert_eq!(
            err.to_string(),
            "table creation of lease table got no answer within 5s"
        );
    }

    #[test]
    fn chain_is_one_line_with_every_cause_once() {
        #[derive(Debug)]
        struct E(&'static str, Option<Box<E>>);
        impl fmt::Display for E {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.0)
            }
        }
        impl std::error::Error for E {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                self.1.as_deref().map(|e| e as _)
            }
        }
        let e = E(
            "get of lease \"x\" failed",
            Some(Box::new(E(
                "db error",
                Some(Box::new(E("line\nbreak", None))),
            ))),
        );
        assert_eq!(
            Chain(&e).to_string(),
            "get of lease \"x\" failed: db error: line break"
        );
        // An error repeating its source's message shows it once.
        let e = E(
            "connect failed: refused",
            Some(Box::new(E("refused", None))),
        );
        assert_eq!(Chain(&e).to_string(), "connect failed: refused");
        assert_eq!(Chain(&E("alone", None)).to_string(), "alone");
        // A driver error quoting its source inside its own message (MariaDB's
        // `Server error: `ERROR 1045 ...'`), two levels deep: each once.
        let e = E(
            "could not connect",
            Some(Box::new(E(
                "Input/output error: Input/output error: refused (os error 111)",
                Some(Box::new(E(
                    "Input/output error: refused (os error 111)",
                    Some(Box::new(E("refused (os error 111)", None))),
                ))),
            ))),
        );
        assert_eq!(
            Chain(&e).to_string(),
            "could not connect: Input/output error: Input/output error: refused (os error 111)"
        );
        let e = E(
            "Server error: `ERROR 1045 (28000): Access denied'",
            Some(Box::new(E("ERROR 1045 (28000): Access denied", None))),
        );
        assert_eq!(
            Chain(&e).to_string(),
            "Server error: `ERROR 1045 (28000): Access denied'"
        );
    }
}
