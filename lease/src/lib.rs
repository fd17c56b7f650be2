#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::fmt;
use std::sync::Arc;

pub use lease_core::*;

#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub use lease_mysql as mysql;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use lease_postgres as postgres;
/// Run-once cron jobs across replicas (the lease-scheduler crate).
pub use lease_scheduler as scheduler;
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use lease_sqlite as sqlite;
/// Fenced sqlx transactions (the `lease-sqlx` crate), for the backends
/// enabled beside it, and the leases on a sqlx pool (`PgLeaseStore`,
/// `MySqlLeaseStore`, `SqliteLeaseStore`).
#[cfg(feature = "sqlx")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlx")))]
pub use lease_sqlx as sqlx;

/// The workspace's README, whose examples are compiled (and the runnable
/// ones run) as this crate's doctests, so that they stay true. Left out of
/// every other build: the file is outside this package.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
mod workspace_readme {}

/// The environment variable [`from_env`] reads the database URL from.
pub const ENV_VAR: &str = "LEASE_DATABASE_URL";

/// Why [`connect`] could not give a coordinator.
///
/// Its `Display` is one line with each distinct cause once, in the
/// library's words where the driver's are jargon, saying what to try
/// (`could not connect to PostgreSQL: connection refused: is the server
/// running on db:5432?`; the crate docs have a table of them), and so is its
/// `Debug`, so that a `main` returning it prints something a person can
/// read; never a password.
#[non_exhaustive]
pub enum ConnectError {
    /// The URL names a database this build was compiled without.
    FeatureDisabled {
        /// The URL's scheme.
        scheme: String,
        /// The cargo feature that would enable it.
        feature: &'static str,
    },
    /// The URL names a database that cannot carry leases
    /// ([`Error::UnsupportedDatabase`]).
    Unsupported(Error),
    /// The URL's scheme names no database this crate knows.
    UnknownScheme {
        /// The scheme, or the start of the URL if it has none (never a password).
        scheme: String,
    },
    /// [`from_env`] found no URL.
    MissingEnv(&'static str),
    /// The backend refused the URL or could not connect. The backend's
    /// error is the message (its whole cause chain, on one line, as
    /// [`Chain`] shows it), so [`source`](std::error::Error::source) does
    /// not repeat it; downcast `source` (this field) to the backend's error
    /// type (`PostgresError`, `MySqlError`, `SqliteError`) to match on it.
    Backend {
        /// The backend: `sqlite`, `postgres` or `mysql`.
        backend: &'static str,
        /// What the backend reported (never with the password).
        source: BoxError,
    },
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectError::FeatureDisabled { scheme, feature } => write!(
                f,
                "{scheme} URLs need the `{feature}` cargo feature of the dblease crate"
            ),
            ConnectError::Unsupported(e) => fmt::Display::fmt(e, f),
            ConnectError::UnknownScheme { scheme } => write!(
                f,
                "unrecognised database URL scheme {scheme:?}: expected postgres://, \
                 postgresql://, mysql://, mariadb://, sqlite://PATH or sqlite::memory:"
            ),
            ConnectError::MissingEnv(var) => write!(f, "the environment variable {var} is not set"),
            // Every backend's errors name their database ("could not
            // connect to PostgreSQL", "invalid MySQL connection URL",
            // "cannot open the SQLite database").
            ConnectError::Backend { source, .. } => fmt::Display::fmt(&Chain(&**source), f),
        }
    }
}

impl fmt::Debug for ConnectError {
    /// The message and its causes on one line, as [`Chain`] shows them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&Chain(self), f)
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConnectError::Unsupported(e) => e.source(),
            _ => None,
        }
    }
}

impl ConnectError {
    /// Whether the database is one the protocol cannot run on.
    #[must_use]
    pub fn is_unsupported(&self) -> bool {
        matches!(self, ConnectError::Unsupported(_))
    }
}

/// The URL schemes of SQLite, PostgreSQL and MySQL, as their crates'
/// `SCHEMES` say: named here too for a build without the crate, so that a
/// URL of a backend left out says which feature to turn on.
const DISABLED_SCHEMES: (&[&str], &[&str], &[&str]) = (
    &["sqlite"],
    &["postgres", "postgresql"],
    &["mysql", "mariadb"],
);

/// The database a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UrlDialect {
    Sqlite,
    Postgres,
    MySql,
    ClickHouse,
}

fn backend_of(url: &str) -> Result<(UrlDialect, String), ConnectError> {
    let scheme = match url.split_once(':') {
        Some((scheme, _)) if !scheme.is_empty() => scheme.to_ascii_lowercase(),
        _ => {
            return Err(ConnectError::UnknownScheme {
                scheme: url.chars().take(16).collect(),
            });
        }
    };
    let backend = match scheme.as_str() {
        #[cfg(feature = "sqlite")]
        s if lease_sqlite::SCHEMES.contains(&s) => UrlDialect::Sqlite,
        #[cfg(feature = "postgres")]
        s if lease_postgres::SCHEMES.contains(&s) => UrlDialect::Postgres,
        #[cfg(feature = "mysql")]
        s if lease_mysql::SCHEMES.contains(&s) => UrlDialect::MySql,
        // The schemes of the backends this build leaves out, to say which
        // feature turns them on (a test checks they are the crates' own).
        s if DISABLED_SCHEMES.0.contains(&s) => UrlDialect::Sqlite,
        s if DISABLED_SCHEMES.1.contains(&s) => UrlDialect::Postgres,
        s if DISABLED_SCHEMES.2.contains(&s) => UrlDialect::MySql,
        "clickhouse" | "clickhouses" => UrlDialect::ClickHouse,
        _ => return Err(ConnectError::UnknownScheme { scheme }),
    };
    Ok((backend, scheme))
}

/// Opens the lease store a URL names, picking the backend by the scheme:
///
/// | URL | backend | feature |
/// | --- | --- | --- |
/// | `postgres://…`, `postgresql://…` | [`postgres`] (lease-postgres) | `postgres` |
/// | `mysql://…`, `mariadb://…` | [`mysql`] (lease-mysql) | `mysql` |
/// | `sqlite://PATH`, `sqlite:PATH`, `sqlite::memory:` | [`sqlite`] (lease-sqlite) | `sqlite` (default) |
///
/// # Errors
///
/// [`ConnectError::FeatureDisabled`] for a known scheme whose feature is off;
/// [`ConnectError::Unsupported`] for `clickhouse://`;
/// [`ConnectError::UnknownScheme`] for anything else;
/// [`ConnectError::Backend`] when the backend refuses the URL or cannot connect.
///
/// # Cancel safety
///
/// Cancel safe: nothing is kept until it returns.
pub async fn connect_store(url: &str) -> Result<Arc<dyn LeaseStore>, ConnectError> {
    connect_backend(url).await.map(|backend| backend.store())
}

/// The store a URL names, as its backend's own type: what a program that
/// chooses its database by URL needs for the backend-specific parts of the
/// API, first of all the [guarded transaction](lease_core::guard).
///
/// [`connect`] gives a [`Leases`] and hides the store behind
/// `Arc<dyn LeaseStore>`; a guarded transaction cannot go through that
/// trait, because its work sees the driver's own transaction type. So open
/// the database with [`connect_backend`] instead, take the coordinator
/// from [`Backend::leases`], and match on the backend where the work is
/// written: the SQL is the only part that differs, and every backend's
/// `transaction` returns the same [`GuardError`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use dblease::{Backend, BoxError, GuardError, LeaseContext};
///
/// let backend = dblease::connect_backend("sqlite::memory:").await?;
/// let leases = backend.leases();
/// leases.migrate().await?;
/// let handle = leases.claim("report:7").await?.expect("a new name is free");
/// let holder = handle.hold(&Default::default());
/// let ctx: &LeaseContext = holder.context();
/// let term = i64::try_from(ctx.term())?;
/// let written: Result<usize, GuardError<BoxError>> = match &backend {
///     Backend::Sqlite(store) => {
///         store
///             .transaction(ctx, move |tx| {
///                 tx.execute_batch("CREATE TABLE IF NOT EXISTS reports (term INTEGER)")?;
///                 tx.execute("INSERT INTO reports (term) VALUES (?1)", [term])
///                     .map_err(BoxError::from)
///             })
///             .await
///     }
///     // Backend::Postgres(store) => store.transaction(ctx, |tx| Box::pin(async move { .. })).await,
///     // Backend::MySql(store) => store.transaction(ctx, |tx| Box::pin(async move { .. })).await,
///     _ => unreachable!("this example runs on SQLite"),
/// };
/// match written {
///     Ok(rows) => assert_eq!(rows, 1),
///     Err(e) if e.is_lost() => { /* stop the work under this lease */ }
///     // `into_boxed` gives an `Error`, which converts into `Box<dyn Error>`.
///     Err(e) => return Err(e.into_boxed().into()),
/// }
/// holder.stop().await;
/// handle.release().await?;
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// As [`connect_store`].
///
/// # Cancel safety
///
/// Cancel safe: nothing is kept until it returns.
pub async fn connect_backend(url: &str) -> Result<Backend, ConnectError> {
    connect_backend_with(url, &Timings::default()).await
}

/// [`connect_backend`], with the store's server-side bounds (statement
/// timeout, lock wait; see each backend's `with_timings`) derived from
/// `timings`, the timings the coordinator on it takes:
/// [`backend.leases()`](Backend::leases).
///
/// # Errors
///
/// As [`connect_store`].
///
/// # Cancel safety
///
/// Cancel safe: nothing is kept until it returns.
pub async fn connect_backend_with(url: &str, timings: &Timings) -> Result<Backend, ConnectError> {
    open(url, None, timings).await
}

/// [`connect_backend_with`], on the lease table `table` rather than the
/// backend's default (`gst_leases`): for a service that keeps its leases in
/// a table of its own (each backend's `with_table`: a plain identifier, or
/// `schema.table` on PostgreSQL and MySQL).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let timings = dblease::Timings::default();
/// let backend = dblease::connect_backend_on("sqlite::memory:", "billing_leases", &timings).await?;
/// let leases = backend.leases(); // with the store's timings
/// assert_eq!(leases.timings(), &timings);
/// leases.migrate().await?; // creates billing_leases
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// As [`connect_store`]; [`ConnectError::Backend`] for a table name the
/// backend refuses.
///
/// # Cancel safety
///
/// Cancel safe: nothing is kept until it returns.
pub async fn connect_backend_on(
    url: &str,
    table: &str,
    timings: &Timings,
) -> Result<Backend, ConnectError> {
    open(url, Some(table), timings).await
}

async fn open(url: &str, table: Option<&str>, timings: &Timings) -> Result<Backend, ConnectError> {
    let (backend, scheme) = backend_of(url)?;
    match backend {
        UrlDialect::ClickHouse => Err(ConnectError::Unsupported(Error::UnsupportedDatabase {
            database: "ClickHouse".to_owned(),
        })),
        UrlDialect::Sqlite => open_sqlite(url, scheme, table, timings).await,
        UrlDialect::Postgres => open_postgres(url, scheme, table, timings).await,
        UrlDialect::MySql => open_mysql(url, scheme, table, timings).await,
    }
}

/// A lease store of one of the backends this build has, as its own type:
/// from [`connect_backend`]. Each store is a cheap handle on its pool or
/// connection (cloning shares it).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Backend {
    /// SQLite (`sqlite://PATH`, `sqlite::memory:`).
    #[cfg(feature = "sqlite")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
    Sqlite(lease_sqlite::SqliteStore),
    /// PostgreSQL (`postgres://`, `postgresql://`).
    #[cfg(feature = "postgres")]
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    Postgres(lease_postgres::PostgresStore),
    /// MySQL or MariaDB (`mysql://`, `mariadb://`).
    #[cfg(feature = "mysql")]
    #[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
    MySql(lease_mysql::MySqlStore),
}

impl Backend {
    /// The store behind the [`LeaseStore`] trait, as [`connect_store`]
    /// gives it.
    #[must_use]
    pub fn store(&self) -> Arc<dyn LeaseStore> {
        match *self {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(ref s) => Arc::new(s.clone()),
            #[cfg(feature = "postgres")]
            Backend::Postgres(ref s) => Arc::new(s.clone()),
            #[cfg(feature = "mysql")]
            Backend::MySql(ref s) => Arc::new(s.clone()),
        }
    }

    /// A coordinator on this store, as [`connect`] gives it, with the
    /// timings the store was opened with (the defaults, or those given to
    /// [`connect_backend_with`]); it shares the store's pool or connection.
    #[must_use]
    pub fn leases(&self) -> Leases {
        Leases::from_arc(self.store())
    }

    /// The backend's name: `sqlite`, `postgres` or `mysql`.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match *self {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(_) => "sqlite",
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => "postgres",
            #[cfg(feature = "mysql")]
            Backend::MySql(_) => "mysql",
        }
    }

    /// The dialect's guard statement, for fencing a transaction of another
    /// driver by hand: see [`GuardStatement`] and [`lease_core::guard`].
    #[must_use]
    pub fn guard_statement(&self) -> GuardStatement {
        match *self {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(ref s) => s.guard_statement(),
            #[cfg(feature = "postgres")]
            Backend::Postgres(ref s) => s.guard_statement(),
            #[cfg(feature = "mysql")]
            Backend::MySql(ref s) => s.guard_statement(),
        }
    }
}

#[cfg(feature = "sqlite")]
async fn open_sqlite(
    url: &str,
    _scheme: String,
    table: Option<&str>,
    timings: &Timings,
) -> Result<Backend, ConnectError> {
    let opened = match lease_sqlite::SqliteStore::builder(url) {
        Ok(builder) => {
            let builder = match table {
                Some(table) => builder.with_table(table),
                None => builder,
            };
            builder.with_timings(timings).connect().await
        }
        Err(e) => Err(e),
    };
    opened
        .map(Backend::Sqlite)
        .map_err(|e| ConnectError::Backend {
            backend: "sqlite",
            source: Box::new(e),
        })
}

#[cfg(not(feature = "sqlite"))]
async fn open_sqlite(
    _url: &str,
    scheme: String,
    _table: Option<&str>,
    _timings: &Timings,
) -> Result<Backend, ConnectError> {
    Err(ConnectError::FeatureDisabled {
        scheme,
        feature: "sqlite",
    })
}

#[cfg(feature = "postgres")]
async fn open_postgres(
    url: &str,
    _scheme: String,
    table: Option<&str>,
    timings: &Timings,
) -> Result<Backend, ConnectError> {
    let opened = match lease_postgres::PostgresStore::builder(url) {
        Ok(builder) => {
            let builder = match table {
                Some(table) => builder.with_table(table),
                None => builder,
            };
            builder.with_timings(timings).connect().await
        }
        Err(e) => Err(e),
    };
    opened
        .map(Backend::Postgres)
        .map_err(|e| ConnectError::Backend {
            backend: "postgres",
            source: Box::new(e),
        })
}

#[cfg(not(feature = "postgres"))]
async fn open_postgres(
    _url: &str,
    scheme: String,
    _table: Option<&str>,
    _timings: &Timings,
) -> Result<Backend, ConnectError> {
    Err(ConnectError::FeatureDisabled {
        scheme,
        feature: "postgres",
    })
}

#[cfg(feature = "mysql")]
async fn open_mysql(
    url: &str,
    _scheme: String,
    table: Option<&str>,
    timings: &Timings,
) -> Result<Backend, ConnectError> {
    let opened = match lease_mysql::MySqlStore::builder(url) {
        Ok(builder) => {
            let builder = match table {
                Some(table) => builder.with_table(table),
                None => builder,
            };
            builder.with_timings(timings).connect().await
        }
        Err(e) => Err(e),
    };
    opened
        .map(Backend::MySql)
        .map_err(|e| ConnectError::Backend {
            backend: "mysql",
            source: Box::new(e),
        })
}

#[cfg(not(feature = "mysql"))]
async fn open_mysql(
    _url: &str,
    scheme: String,
    _table: Option<&str>,
    _timings: &Timings,
) -> Result<Backend, ConnectError> {
    Err(ConnectError::FeatureDisabled {
        scheme,
        feature: "mysql",
    })
}

/// The coordinator on the database a URL names (see [`connect_store`] for
/// the URL forms), with the default timings. Call
/// [`migrate`](Leases::migrate) once as the process starts.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let leases = dblease::connect("sqlite::memory:").await?;
/// leases.migrate().await?;
/// let lock = leases.claim("lock:example").await?.expect("a new name is free");
/// assert_eq!(lock.term(), 1);
/// lock.release().await?;
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// As [`connect_store`].
///
/// # Cancel safety
///
/// Cancel safe.
pub async fn connect(url: &str) -> Result<Leases, ConnectError> {
    connect_store(url).await.map(Leases::from_arc)
}

/// [`connect`] with timings of your own: the coordinator uses `timings`,
/// and the store's server-side bounds are derived from the same timings
/// (a statement the coordinator gave up on stops on the server too; see
/// [`Timings::statement_timeout`] and [`Timings::lock_wait_timeout`]).
/// `connect(url).await?.with_timings(t)` would leave the store's bounds at
/// the defaults': a coordinator with timings shorter than those refuses
/// every claim ([`Error::TimingsOutOfStep`]).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use dblease::Timings;
///
/// let timings = Timings::builder()
///     .lease(Duration::from_secs(6))
///     .renew(Duration::from_secs(1))
///     .deadline(Duration::from_secs(4))
///     .grace(Duration::from_secs(2))
///     .build()?;
/// let leases = dblease::connect_with("sqlite::memory:", timings).await?;
/// assert_eq!(leases.timings(), &timings);
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// As [`connect_store`].
///
/// # Cancel safety
///
/// Cancel safe.
pub async fn connect_with(url: &str, timings: Timings) -> Result<Leases, ConnectError> {
    Ok(connect_backend_with(url, &timings).await?.leases())
}

/// [`connect`] to the URL in the environment variable `LEASE_DATABASE_URL`.
///
/// # Errors
///
/// [`ConnectError::MissingEnv`] when it is not set; otherwise as [`connect_store`].
///
/// # Cancel safety
///
/// Cancel safe.
pub async fn from_env() -> Result<Leases, ConnectError> {
    from_var(ENV_VAR).await
}

async fn from_var(var: &'static str) -> Result<Leases, ConnectError> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => connect(&url).await,
        _ => Err(ConnectError::MissingEnv(var)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The schemes named for a build without a backend are the backend's
    /// own, so turning its feature on changes no URL's meaning.
    #[cfg(all(feature = "sqlite", feature = "postgres", feature = "mysql"))]
    #[test]
    fn the_schemes_named_for_disabled_backends_are_the_crates_own() {
        assert_eq!(DISABLED_SCHEMES.0, lease_sqlite::SCHEMES);
        assert_eq!(DISABLED_SCHEMES.1, lease_postgres::SCHEMES);
        assert_eq!(DISABLED_SCHEMES.2, lease_mysql::SCHEMES);
    }

    #[tokio::test]
    async fn clickhouse_is_the_unsupported_database_error() {
        let err = connect("clickhouse://default@localhost:9000/db")
            .await
            .unwrap_err();
        assert!(err.is_unsupported());
        assert!(
            matches!(&err, ConnectError::Unsupported(Error::UnsupportedDatabase { database }) if database == "ClickHouse")
        );
        assert_eq!(
            err.to_string(),
            "leases need a MySQL, PostgreSQL or SQLite database, not ClickHouse"
        );
    }

    #[tokio::test]
    async fn unknown_scheme_is_named_and_the_rest_of_the_url_is_not() {
        let err = connect("redis://user:secret@localhost").await.unwrap_err();
        assert!(matches!(&err, ConnectError::UnknownScheme { scheme } if scheme == "redis"));
        assert!(!err.to_string().contains("secret"), "{err}");
        let err = connect("not a url").await.unwrap_err();
        assert!(matches!(err, ConnectError::UnknownScheme { .. }));
    }

    #[tokio::test]
    async fn schemes_are_case_insensitive() {
        assert_eq!(
            backend_of("PostgreSQL://x").unwrap().0,
            UrlDialect::Postgres
        );
        assert_eq!(backend_of("MariaDB://x").unwrap().0, UrlDialect::MySql);
        assert_eq!(backend_of("sqlite::memory:").unwrap().0, UrlDialect::Sqlite);
    }

    #[cfg(not(feature = "postgres"))]
    #[tokio::test]
    async fn postgres_without_its_feature_names_the_feature() {
        let err = connect("postgres://localhost/db").await.unwrap_err();
        assert!(
            matches!(
                &err,
                ConnectError::FeatureDisabled {
                    feature: "postgres",
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("`postgres` cargo feature"),
            "{err}"
        );
    }

    #[cfg(not(feature = "mysql"))]
    #[tokio::test]
    async fn mysql_without_its_feature_names_the_feature() {
        let err = connect("mariadb://localhost/db").await.unwrap_err();
        assert!(
            matches!(
                &err,
                ConnectError::FeatureDisabled {
                    feature: "mysql",
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[cfg(not(feature = "sqlite"))]
    #[tokio::test]
    async fn sqlite_without_its_feature_names_the_feature() {
        let err = connect("sqlite::memory:").await.unwrap_err();
        assert!(
            matches!(
                &err,
                ConnectError::FeatureDisabled {
                    feature: "sqlite",
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn a_missing_variable_is_named() {
        let err = from_var("LEASE_TEST_SURELY_UNSET_VARIABLE")
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "the environment variable LEASE_TEST_SURELY_UNSET_VARIABLE is not set"
        );
    }
}
