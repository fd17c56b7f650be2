//! Building a [`MySqlStore`]: its URL, its builder, its pool, and the
//! first connection's check of the server.

use std::fmt;
use std::ops::Deref;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Opts, OptsBuilder, Pool, PoolConstraints, SslOpts};

use crate::conn::{MyConn, driver_error};
use crate::error::MySqlError;
use lease_core::{TableName, Timings};
use lease_sql::mysql::{self as sql, Statements};
use lease_sql::{DEFAULT_TABLE, Found};

use crate::store::MySqlStore;

/// The URL schemes this backend opens (`mariadb://` is read as `mysql://`).
pub const SCHEMES: &[&str] = &["mysql", "mariadb"];

/// Builds a [`MySqlStore`]: from a URL ([`MySqlStore::builder`]) or from
/// an application's pool ([`MySqlStoreBuilder::from_pool`]), then `with_*`
/// setters (table name, pool and session settings, TLS), then
/// [`connect`](Self::connect) (which checks the server) or
/// [`build`](Self::build) (which sends nothing).
///
/// The pool and session settings apply to the pool the builder creates
/// from a URL; a pool given with [`from_pool`](Self::from_pool) keeps its
/// own, and only the table applies to it.
///
/// ```no_run
/// # async fn example() -> Result<(), lease_mysql::MySqlError> {
/// use std::time::Duration;
/// use lease_mysql::MySqlStore;
///
/// let store = MySqlStore::builder("mariadb://app:secret@db.internal:3306/app?require_ssl=true")?
///     .with_table("app.leases")
///     .with_pool_constraints(1, 8)
///     .with_lock_wait_timeout(Duration::from_secs(2))
///     .connect()
///     .await?;
/// store.migrate().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
#[must_use = "a builder does nothing until connect() or build() is called"]
pub struct MySqlStoreBuilder {
    source: Source,
    table: String,
    pool_constraints: Option<(usize, usize)>,
    lock_wait_timeout: Duration,
    statement_timeout: Option<Duration>,
    idle_transaction_timeout: Option<Duration>,
    /// The timings the three bounds above came from (see `with_timings`).
    timings: Timings,
    connect_timeout: Duration,
    tls: Option<SslOpts>,
    prefer_socket: Option<bool>,
    stmt_cache_size: usize,
}

impl fmt::Debug for MySqlStoreBuilder {
    /// Shows whether TLS options are set, never their contents (a client
    /// identity may hold a private key).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MySqlStoreBuilder")
            .field("table", &self.table)
            .field("pool_constraints", &self.pool_constraints)
            .field("lock_wait_timeout", &self.lock_wait_timeout)
            .field("statement_timeout", &self.statement_timeout)
            .field("idle_transaction_timeout", &self.idle_transaction_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("tls", &self.tls.is_some())
            .field("prefer_socket", &self.prefer_socket)
            .field("stmt_cache_size", &self.stmt_cache_size)
            .finish()
    }
}

/// Where a builder's connections come from.
#[derive(Clone)]
enum Source {
    Url(Box<Opts>),
    Pool(Pool),
}

impl MySqlStoreBuilder {
    fn new(source: Source) -> Self {
        MySqlStoreBuilder {
            source,
            table: DEFAULT_TABLE.to_owned(),
            pool_constraints: None,
            lock_wait_timeout: Duration::ZERO,
            statement_timeout: None,
            idle_transaction_timeout: None,
            timings: Timings::default(),
            connect_timeout: MySqlStoreBuilder::DEFAULT_CONNECT_TIMEOUT,
            tls: None,
            prefer_socket: None,
            stmt_cache_size: MySqlStoreBuilder::DEFAULT_STMT_CACHE_SIZE,
        }
        .with_timings(&Timings::default())
    }
}

impl MySqlStoreBuilder {
    /// A builder for a store on `pool`, an application's own pool: see
    /// [`build`](Self::build) for what its sessions need. Only
    /// [`with_table`](Self::with_table) applies to it.
    pub fn from_pool(pool: Pool) -> Self {
        Self::new(Source::Pool(pool))
    }

    /// Sets the server-side bounds of the store's sessions from the timings
    /// of the [`Leases`](lease_core::Leases) that will use the store, so that
    /// they follow a tightened deadline:
    ///
    /// | session setting | from the timings | default timings |
    /// | --- | --- | --- |
    /// | `innodb_lock_wait_timeout` | [`lock_wait_timeout`](Timings::lock_wait_timeout) | 3 s |
    /// | `max_statement_time` (MariaDB), `max_execution_time` (MySQL 8) | [`statement_timeout`](Timings::statement_timeout) | 5 s |
    /// | `idle_transaction_timeout` (MariaDB) | [`deadline`](Timings::deadline) | 10 s |
    ///
    /// Without it the default timings apply (InnoDB's own lock wait of 50 s
    /// would hold a claim far past the protocol's bound on a statement).
    /// The `with_*_timeout` setters below override one setting each.
    ///
    /// A coordinator on the store takes these timings
    /// ([`Leases::new`](lease_core::Leases::new)), and one given shorter
    /// timings refuses to claim (see
    /// [`Leases::with_timings`](lease_core::Leases::with_timings)).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use lease_core::Timings;
    /// use lease_mysql::MySqlStore;
    ///
    /// let timings = Timings::builder()
    ///     .lease(Duration::from_secs(6))
    ///     .renew(Duration::from_secs(1))
    ///     .deadline(Duration::from_secs(4))
    ///     .grace(Duration::from_secs(2))
    ///     .build()?;
    /// let builder = MySqlStore::builder("mysql://app@db.internal/app")?.with_timings(&timings);
    /// let setup = builder.session_setup()?;
    /// assert!(setup.contains("innodb_lock_wait_timeout = 1"), "{setup}");
    /// assert!(setup.contains("max_statement_time = 2.000"), "{setup}");
    /// assert!(setup.contains("idle_transaction_timeout = 4 "), "{setup}");
    /// # Ok(()) }
    /// ```
    pub fn with_timings(mut self, timings: &Timings) -> Self {
        (
            self.lock_wait_timeout,
            self.statement_timeout,
            self.idle_transaction_timeout,
        ) = sql::timings_bounds(timings);
        self.timings = *timings;
        self
    }

    /// The default bound on the first connection: 10 s.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
    /// The default number of prepared statements cached per connection: 32,
    /// room for every statement of the protocol so each costs one round trip.
    pub const DEFAULT_STMT_CACHE_SIZE: usize = 32;

    /// Sets the lease table: `table` or `schema.table`, ASCII letters,
    /// digits, `_` and `$` only (checked when the store is built). Default
    /// `gst_leases`.
    pub fn with_table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// Sets the pool's bounds: at least `min` idle connections kept, at most
    /// `max` open. Without it, the URL's `pool_min` / `pool_max` apply
    /// (mysql_async's defaults: 10 and 100). Checked when the store is built.
    pub fn with_pool_constraints(mut self, min: usize, max: usize) -> Self {
        self.pool_constraints = Some((min, max));
        self
    }

    /// Sets `innodb_lock_wait_timeout` for the store's sessions, in whole
    /// seconds, at least 1 (default: the [timings](Self::with_timings)'
    /// lock wait, 3 s by default). Keep it under the protocol's bound
    /// on a statement ([`lease_core::Timings::statement_timeout`]).
    pub fn with_lock_wait_timeout(mut self, timeout: Duration) -> Self {
        self.lock_wait_timeout = timeout;
        self
    }

    /// Sets the server-side bound on each statement of the store's sessions,
    /// or `None` for the server's own. MariaDB applies it to every statement
    /// (`max_statement_time`), MySQL 8 to `SELECT`s only
    /// (`max_execution_time`). It bounds the business statements of a
    /// guarded transaction too. Default: the [timings](Self::with_timings)'
    /// statement timeout, 5 s by default.
    pub fn with_statement_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.statement_timeout = timeout;
        self
    }

    /// Sets, on MariaDB, how long a session of the store may sit idle inside
    /// a transaction before the server ends it (`idle_transaction_timeout`,
    /// whole seconds, rounded up), or `None` for the server's own (no bound,
    /// by default). Default: the [timings](Self::with_timings)' local
    /// deadline, 10 s by default: keep it at the [local deadline](lease_core::Timings::deadline) of the
    /// leases the store carries.
    ///
    /// It is what ends a [guarded transaction](MySqlStore::transaction)
    /// whose holder froze inside it (a stopped process, a partition): its
    /// shared lock on the lease row would otherwise hold every claim of the
    /// name back for as long as the holder stays frozen. The store's own
    /// statements never sit idle in a transaction. MySQL 8 has no such
    /// setting: there a frozen holder's lock lasts until the server drops
    /// its connection (`wait_timeout`, TCP keepalive), each claim failing
    /// after the lock-wait bound meanwhile.
    pub fn with_idle_transaction_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.idle_transaction_timeout = timeout;
        self
    }

    /// Sets the bound on the first connection [`connect`](Self::connect)
    /// makes. Default 10 s.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Requires TLS with these options, whatever the URL says. The URL's own
    /// `require_ssl=true`, `verify_ca`, `verify_identity` and
    /// `built_in_roots` parameters are the other way to ask for it.
    pub fn with_tls(mut self, tls: SslOpts) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Sets whether the driver, after connecting over TCP to the local host,
    /// reconnects through the server's UNIX socket (mysql_async's default,
    /// `prefer_socket=true`). Anything placed between the library and the
    /// server (a proxy, a fault injector, a TLS terminator) needs `false`,
    /// or it only sees the first handshake.
    pub fn with_prefer_socket(mut self, prefer: bool) -> Self {
        self.prefer_socket = Some(prefer);
        self
    }

    /// Sets how many prepared statements each connection caches (default
    /// 32). Below the number of statements the protocol uses, statements are
    /// prepared again, an extra round trip each.
    pub fn with_stmt_cache_size(mut self, size: usize) -> Self {
        self.stmt_cache_size = size;
        self
    }

    /// The session setup statement the store runs on every connection of
    /// the pool it builds: strict SQL mode, the lock-wait bound, the
    /// statement bound and, on MariaDB, the idle-in-transaction bound. A
    /// pool handed to [`from_pool`](Self::from_pool) is
    /// the caller's: give its `OptsBuilder::setup` this statement.
    ///
    /// # Errors
    ///
    /// [`MySqlError::InvalidSetting`] when the lock-wait bound is under 1 s.
    pub fn session_setup(&self) -> Result<String, MySqlError> {
        sql::session_setup_for(
            self.lock_wait_timeout,
            self.statement_timeout,
            self.idle_transaction_timeout,
        )
        .map_err(MySqlError::InvalidSetting)
    }

    /// Builds the store and makes one connection to check the server: reachable, credentials accepted, TLS
    /// as asked, MariaDB 10.6+ or MySQL 8+; and the table, when it exists
    /// already, as [`migrate`](MySqlStore::migrate) checks it (no `AUTO_INCREMENT`
    /// column, no trigger, every column there, a binary `name`).
    ///
    /// On a pool given with [`from_pool`](Self::from_pool), the same check
    /// runs on one of its connections.
    ///
    /// # Errors
    ///
    /// As [`build`](Self::build) before any connection; [`MySqlError::Connect`]
    /// (the server refused, did not answer in time, or refused the login),
    /// [`MySqlError::TlsUnavailable`],
    /// [`MySqlError::UnsupportedServer`] or [`MySqlError::IncompatibleTable`]
    /// from the first connection. None of them carries the password.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future drops the pool being built.
    pub async fn connect(self) -> Result<MySqlStore, MySqlError> {
        let connect_timeout = self.connect_timeout;
        let store = self.build()?;
        let server = store.inner.server.clone();
        let table = store.inner.sql.table();
        let pool: &Pool = &store.inner.pool;
        let checked =
            tokio::time::timeout(connect_timeout, check_server(pool, &store.inner.sql)).await;
        let failure = match checked {
            Ok(Ok(())) => None,
            Ok(Err(CheckError::Table(reason))) => Some(MySqlError::IncompatibleTable {
                table: table.quoted().to_owned(),
                reason,
            }),
            Ok(Err(CheckError::Driver(source))) => Some(connect_error(&server, source)),
            Ok(Err(CheckError::Version(version))) => Some(MySqlError::UnsupportedServer {
                server: server.clone(),
                version,
            }),
            Err(_) => Some(MySqlError::Connect {
                server: server.clone(),
                failure: lease_core::ConnectFailure::TimedOut {
                    after: connect_timeout,
                    setting: "MySqlStoreBuilder::with_connect_timeout",
                },
                source: None,
            }),
        };
        if let Some(err) = failure {
            if store.inner.setup.is_some() {
                // The store's own pool: close what the check opened.
                let _ = pool.clone().disconnect().await;
            }
            return Err(err);
        }
        tracing::debug!(%server, table = %table, tls = store.inner.tls, "lease store connected");
        Ok(store)
    }

    /// Builds the store without sending anything: the pool connects at the
    /// first statement. See [`connect`](Self::connect) to check the server
    /// first.
    ///
    /// The URL is `mysql://user:password@host:port/database?params` or the
    /// same with `mariadb://`; the parameters are mysql_async's
    /// (`require_ssl`, `verify_ca`, `verify_identity`, `built_in_roots`,
    /// `prefer_socket`, `pool_min`, `pool_max`, `socket`, ...). The store's
    /// pool does not reset connections as they return (its statements leave
    /// no session state) except those of guarded transactions.
    ///
    /// On a pool given with [`from_pool`](Self::from_pool), the pool's
    /// sessions are the caller's: for the store's guarantees (strict SQL
    /// mode, the lock-wait bound) build the pool's options with
    /// [`session_setup`](Self::session_setup) as a setup statement, and a
    /// statement cache of at least 16. The store reads its outcomes from
    /// the OK packet, so the pool's `client_found_rows` setting does not
    /// matter. Run [`migrate`](MySqlStore::migrate) as the process starts,
    /// which refuses a table the statements cannot use (with an
    /// `AUTO_INCREMENT` column or a trigger, say) before any claim.
    ///
    /// # Errors
    ///
    /// [`MySqlError::InvalidTable`] for a bad table name;
    /// [`MySqlError::InvalidSetting`] for pool constraints or a lock-wait
    /// bound that cannot be used.
    pub fn build(self) -> Result<MySqlStore, MySqlError> {
        let table = table(&self.table)?;
        let opts = match self.source {
            Source::Pool(pool) => {
                return Ok(MySqlStore::assemble(
                    pool,
                    table,
                    "(caller's pool)".to_owned(),
                    false,
                    None,
                    None,
                ));
            }
            Source::Url(ref opts) => (**opts).clone(),
        };
        let setup = self.session_setup()?;
        let mut pool_opts = opts.pool_opts().clone().with_reset_connection(false);
        if let Some((min, max)) = self.pool_constraints {
            let constraints = PoolConstraints::new(min, max).ok_or_else(|| {
                MySqlError::InvalidSetting(format!(
                    "pool constraints need 0 < max and min <= max, not min {min}, max {max}"
                ))
            })?;
            pool_opts = pool_opts.with_constraints(constraints);
        }
        let mut builder = OptsBuilder::from_opts(opts)
            .setup(vec![setup.clone()])
            .pool_opts(pool_opts)
            .stmt_cache_size(self.stmt_cache_size);
        if let Some(prefer) = self.prefer_socket {
            builder = builder.prefer_socket(prefer);
        }
        if let Some(tls) = self.tls {
            builder = builder.ssl_opts(tls);
        }
        let opts = Opts::from(builder);
        let server = describe_server(&opts);
        let tls = opts.ssl_opts().is_some();
        let pool = Pool::new(opts);
        // The store's bounds are the timings' only when none was set by
        // hand since (see `LeaseStore::timings`).
        let bounds = (
            self.lock_wait_timeout,
            self.statement_timeout,
            self.idle_transaction_timeout,
        );
        let timings = (bounds == sql::timings_bounds(&self.timings)).then_some(self.timings);
        Ok(MySqlStore::assemble(
            pool,
            table,
            server,
            tls,
            Some(setup),
            timings,
        ))
    }
}

/// Why the first connection's check failed.
enum CheckError {
    Driver(mysql_async::Error),
    Version(String),
    /// The table exists and cannot carry leases, for this reason.
    Table(String),
}

/// Connects once and checks the server's version, and the table if it
/// exists already (a missing one is `migrate`'s to create).
async fn check_server(pool: &Pool, sql: &Statements) -> Result<(), CheckError> {
    let mut conn = pool.get_conn().await.map_err(CheckError::Driver)?;
    let version: Option<String> = conn
        .query_first("SELECT VERSION()")
        .await
        .map_err(CheckError::Driver)?;
    let version = version.unwrap_or_default();
    if !supported_version(&version) {
        return Err(CheckError::Version(version));
    }
    match lease_sql::mysql::inspect(&mut MyConn(&mut conn), sql)
        .await
        .map_err(|e| CheckError::Driver(driver_error(e)))?
    {
        Found::Incompatible(reason) => Err(CheckError::Table(reason)),
        // A missing table, or one without the columns added since, is
        // `migrate`'s to create or complete.
        Found::Missing | Found::Outdated | Found::Usable => Ok(()),
    }
}

/// Validates `name` as the lease table.
fn table(name: &str) -> Result<TableName, MySqlError> {
    sql::table(name).map_err(|e| MySqlError::InvalidTable {
        table: e.name,
        reason: e.reason,
    })
}

/// MariaDB 10.6 or later, or MySQL 8.0 or later, from `VERSION()`.
pub(crate) fn supported_version(version: &str) -> bool {
    let numbers = |s: &str| -> Option<(u32, u32)> {
        let mut it = s.split(|c: char| !c.is_ascii_digit());
        let major = it.next()?.parse().ok()?;
        let minor = it.next()?.parse().ok()?;
        Some((major, minor))
    };
    if version.contains("MariaDB") {
        let v = version.strip_prefix("5.5.5-").unwrap_or(version);
        numbers(v).is_some_and(|v| v >= (10, 6))
    } else {
        numbers(version).is_some_and(|v| v >= (8, 0))
    }
}

/// Parses the URL, `mariadb://` read as `mysql://`.
fn parse_url(url: &str) -> Result<Opts, MySqlError> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(MySqlError::InvalidUrl {
            source: mysql_async::UrlError::Invalid,
        });
    };
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "mysql" && scheme != "mariadb" {
        return Err(MySqlError::UnsupportedScheme { scheme });
    }
    if unencoded_userinfo(rest) {
        return Err(MySqlError::UnencodedPassword);
    }
    Opts::from_url(&format!("mysql://{rest}")).map_err(|source| match source {
        // The `url` crate's `ParseError::InvalidPort` (not re-exported).
        mysql_async::UrlError::Parse(e) if e.to_string() == "invalid port number" => {
            MySqlError::InvalidPort
        }
        source => MySqlError::InvalidUrl { source },
    })
}

/// Whether `rest` (the URL after `://`) looks like a password with a `/`,
/// `?` or `#` that was not percent-encoded: the authority ends at the first
/// of them, so it holds no `@`, and the `@` that ended the user information
/// shows up after it, before any query parameter's `=` or `&`. (An `@` in a
/// password the URL parser takes in its stride: the last `@` of the
/// authority ends the user information.)
fn unencoded_userinfo(rest: &str) -> bool {
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    if rest[..end].contains('@') {
        return false;
    }
    rest.get(end + 1..)
        .and_then(|tail| tail.split(['&', '=']).next())
        .is_some_and(|first| first.contains('@'))
}

/// `host:port`, or the socket path: what errors and `Debug` name.
fn describe_server(opts: &Opts) -> String {
    match opts.socket() {
        Some(socket) => format!("{socket} (socket)"),
        None => format!("{}:{}", opts.ip_or_hostname(), opts.tcp_port()),
    }
}

fn connect_error(server: &str, source: mysql_async::Error) -> MySqlError {
    match source {
        mysql_async::Error::Driver(mysql_async::DriverError::NoClientSslFlagFromServer) => {
            MySqlError::TlsUnavailable {
                server: server.to_owned(),
            }
        }
        source => crate::error::connect_failure(server, source),
    }
}

impl MySqlStore {
    /// A builder for a store on the database `url` names (see
    /// [`MySqlStoreBuilder::build`] for the URL), with the defaults: table
    /// `gst_leases`, lock-wait bound 3 s, statement bound 5 s.
    ///
    /// # Errors
    ///
    /// [`MySqlError::UnsupportedScheme`], [`MySqlError::InvalidUrl`] or
    /// [`MySqlError::UnencodedPassword`]; none of them quotes the URL.
    pub fn builder(url: &str) -> Result<MySqlStoreBuilder, MySqlError> {
        Ok(MySqlStoreBuilder::new(Source::Url(Box::new(parse_url(
            url,
        )?))))
    }

    /// Connects with the defaults; see [`MySqlStoreBuilder::connect`].
    ///
    /// # Errors
    ///
    /// As [`builder`](Self::builder) and [`MySqlStoreBuilder::connect`]: a
    /// bad URL, or a first connection that fails or finds an unsupported
    /// server.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn connect(url: &str) -> Result<MySqlStore, MySqlError> {
        MySqlStore::builder(url)?.connect().await
    }

    /// A store on `pool` with the default table; see
    /// [`MySqlStoreBuilder::build`] for what the pool's sessions need.
    pub fn from_pool(pool: Pool) -> MySqlStore {
        MySqlStore::assemble(
            pool,
            sql::default_table(),
            "(caller's pool)".to_owned(),
            false,
            None,
            None,
        )
    }
}

/// The pool a [`MySqlStore`](crate::MySqlStore) runs on, as
/// [`MySqlStore::pool`](crate::MySqlStore::pool) hands it out.
///
/// mysql_async's [`Pool`] prints its connection options in its `Debug`
/// output, **the password included**. This wrapper's `Debug` shows the
/// server alone, so the value the accessor returns can be logged. It
/// dereferences to the [`Pool`] for every method (`get_conn`, ...), and
/// [`into_inner`](Self::into_inner) gives the [`Pool`] itself, for an
/// API that takes one: never log that `Pool` (or `*pool`) with `Debug`.
#[derive(Clone)]
pub struct MySqlPool {
    pool: Pool,
    server: String,
}

impl MySqlPool {
    pub(crate) fn new(pool: Pool, server: String) -> Self {
        MySqlPool { pool, server }
    }

    /// The mysql_async [`Pool`], sharing its connections with the store.
    /// Its `Debug` output shows the password: do not log it.
    #[must_use]
    pub fn into_inner(self) -> Pool {
        self.pool
    }
}

impl Deref for MySqlPool {
    type Target = Pool;

    fn deref(&self) -> &Pool {
        &self.pool
    }
}

impl fmt::Debug for MySqlPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MySqlPool")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert!(supported_version("10.11.19-MariaDB-0+deb12u1"));
        assert!(supported_version("5.5.5-10.6.2-MariaDB"));
        assert!(supported_version("11.4.2-MariaDB"));
        assert!(!supported_version("10.5.9-MariaDB"));
        assert!(supported_version("8.0.36"));
        assert!(supported_version("8.4.0-log"));
        assert!(!supported_version("5.7.44"));
        assert!(!supported_version(""));
    }

    #[test]
    fn schemes() {
        assert!(parse_url("mysql://root@127.0.0.1:3306/test").is_ok());
        assert!(parse_url("MariaDB://root@127.0.0.1/test").is_ok());
        assert!(matches!(
            parse_url("postgres://x@y/z"),
            Err(MySqlError::UnsupportedScheme { .. })
        ));
        assert!(matches!(
            parse_url("nonsense"),
            Err(MySqlError::InvalidUrl { .. })
        ));
    }
}
