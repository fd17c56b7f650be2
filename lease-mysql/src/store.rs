//! `MySqlStore`: the protocol's statements on mysql_async's pool.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
pub use lease_core::BoxFuture;
use lease_core::{
    BoxError, Finished, GuardError, GuardStatement, LeaseContext, LeaseInfo, LeaseStore, SlotClaim,
    SupersededSlot, UnfinishedRow,
};
use mysql_async::prelude::Queryable;
use mysql_async::{
    Conn, Opts, OptsBuilder, Params, Pool, PoolConstraints, SslOpts, Transaction, TxOpts, Value,
    params,
};

use crate::error::MySqlError;
use crate::pool::MySqlPool;
use crate::schema::{self, DEFAULT_TABLE, Found, TableName};
use crate::sql::{self, Statements};

/// The most names one search for unfinished instants binds; more are
/// searched in several statements.
const MAX_NAMES_PER_SEARCH: usize = 4096;

/// The most renewals one batch statement carries (three placeholders
/// each); more are renewed in several transactions.
const MAX_RENEWALS_PER_BATCH: usize = 1024;

/// How often a write that InnoDB chose as a deadlock victim is tried again
/// within the same call. The victim's statement was rolled back whole.
const DEADLOCK_RETRIES: usize = 2;

/// How long a guarded transaction's rollback may take before its connection
/// is killed instead.
const ROLLBACK_BOUND: Duration = Duration::from_secs(1);

/// Builds a [`MySqlStore`]: table name, pool and session settings, TLS.
///
/// ```no_run
/// # async fn example() -> Result<(), lease_mysql::MySqlError> {
/// use std::time::Duration;
/// use lease_mysql::MySqlStore;
///
/// let store = MySqlStore::builder()
///     .with_table("app.leases")
///     .with_pool_constraints(1, 8)
///     .with_lock_wait_timeout(Duration::from_secs(2))
///     .connect("mariadb://app:secret@db.internal:3306/app?require_ssl=true")
///     .await?;
/// store.migrate().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
#[must_use]
pub struct MySqlStoreBuilder {
    table: String,
    pool_constraints: Option<(usize, usize)>,
    lock_wait_timeout: Duration,
    statement_timeout: Option<Duration>,
    idle_transaction_timeout: Option<Duration>,
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

impl Default for MySqlStoreBuilder {
    fn default() -> Self {
        MySqlStoreBuilder {
            table: DEFAULT_TABLE.to_owned(),
            pool_constraints: None,
            lock_wait_timeout: MySqlStoreBuilder::DEFAULT_LOCK_WAIT_TIMEOUT,
            statement_timeout: Some(MySqlStoreBuilder::DEFAULT_STATEMENT_TIMEOUT),
            idle_transaction_timeout: Some(MySqlStoreBuilder::DEFAULT_IDLE_TRANSACTION_TIMEOUT),
            connect_timeout: MySqlStoreBuilder::DEFAULT_CONNECT_TIMEOUT,
            tls: None,
            prefer_socket: None,
            stmt_cache_size: MySqlStoreBuilder::DEFAULT_STMT_CACHE_SIZE,
        }
    }
}

impl MySqlStoreBuilder {
    /// The default InnoDB lock-wait bound of the store's sessions: 3 s, under
    /// the protocol's 5 s bound on each statement (InnoDB's own default of
    /// 50 s would hold a claim far past it).
    pub const DEFAULT_LOCK_WAIT_TIMEOUT: Duration = Duration::from_secs(3);
    /// The default server-side bound on each statement: 5 s, the protocol's
    /// bound on its own statements.
    pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(5);
    /// The default bound, on MariaDB, on how long a session may sit idle
    /// inside a transaction: 10 s, the protocol's default local deadline.
    pub const DEFAULT_IDLE_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(10);
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
    /// seconds, at least 1 (default 3 s). Keep it under the protocol's bound
    /// on a statement ([`lease_core::Timings::statement_timeout`]).
    pub fn with_lock_wait_timeout(mut self, timeout: Duration) -> Self {
        self.lock_wait_timeout = timeout;
        self
    }

    /// Sets the server-side bound on each statement of the store's sessions,
    /// or `None` for the server's own. MariaDB applies it to every statement
    /// (`max_statement_time`), MySQL 8 to `SELECT`s only
    /// (`max_execution_time`). It bounds the business statements of a
    /// guarded transaction too. Default 5 s.
    pub fn with_statement_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.statement_timeout = timeout;
        self
    }

    /// Sets, on MariaDB, how long a session of the store may sit idle inside
    /// a transaction before the server ends it (`idle_transaction_timeout`,
    /// whole seconds, rounded up), or `None` for the server's own (no bound,
    /// by default). Default 10 s, the protocol's default local deadline:
    /// keep it at the [local deadline](lease_core::Timings::deadline) of the
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
        let lock_wait = self.lock_wait_timeout.as_secs();
        if lock_wait < 1 {
            return Err(MySqlError::InvalidSetting(format!(
                "the lock-wait timeout ({:?}) must be at least 1 s: InnoDB counts it in whole seconds",
                self.lock_wait_timeout
            )));
        }
        let statement_ms = self
            .statement_timeout
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1));
        let mut setup = sql::session_setup(lock_wait, statement_ms);
        if let Some(idle) = self.idle_transaction_timeout {
            // MariaDB 10.3+ runs it; MySQL ignores the comment. Whole
            // seconds, rounded up: never shorter than asked.
            let secs = idle.as_secs() + u64::from(idle.subsec_nanos() > 0);
            setup.push_str(&format!(
                " /*M!100300 , idle_transaction_timeout = {} */",
                secs.max(1)
            ));
        }
        Ok(setup)
    }

    /// Builds the store on a pool of its own for `url`, and makes one
    /// connection to check the server: reachable, credentials accepted, TLS
    /// as asked, MariaDB 10.6+ or MySQL 8+; and the table, when it exists
    /// already, as [`migrate`](MySqlStore::migrate) checks it (no `AUTO_INCREMENT`
    /// column, no trigger, every column there, a binary `name`).
    ///
    /// `url` is `mysql://user:password@host:port/database?params` or the same
    /// with `mariadb://`; the parameters are mysql_async's (`require_ssl`,
    /// `verify_ca`, `verify_identity`, `built_in_roots`, `prefer_socket`,
    /// `pool_min`, `pool_max`, `socket`, ...). The store's pool does not
    /// reset connections as they return (its statements leave no session
    /// state) except those of guarded transactions.
    ///
    /// # Errors
    ///
    /// [`MySqlError::UnsupportedScheme`], [`MySqlError::InvalidUrl`],
    /// [`MySqlError::UnencodedPassword`], [`MySqlError::InvalidTableName`]
    /// or [`MySqlError::InvalidSetting`] before any connection; [`MySqlError::Connect`],
    /// [`MySqlError::TlsUnavailable`], [`MySqlError::ConnectTimeout`],
    /// [`MySqlError::UnsupportedServer`] or [`MySqlError::IncompatibleTable`]
    /// from the first connection. None of them carries the password.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future drops the pool being built.
    pub async fn connect(self, url: &str) -> Result<MySqlStore, MySqlError> {
        let table = TableName::parse(&self.table)?;
        let setup = self.session_setup()?;
        let opts = parse_url(url)?;
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
        let checked = tokio::time::timeout(self.connect_timeout, check_server(&pool, &table)).await;
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
            Err(_) => Some(MySqlError::ConnectTimeout {
                server: server.clone(),
                after: self.connect_timeout,
            }),
        };
        if let Some(err) = failure {
            let _ = pool.disconnect().await;
            return Err(err);
        }
        tracing::debug!(%server, table = %table, tls, "lease store connected");
        Ok(MySqlStore::assemble(pool, table, server, tls, Some(setup)))
    }

    /// Builds the store on a pool the caller made. Nothing is sent.
    ///
    /// The pool's sessions are the caller's: for the store's guarantees
    /// (strict SQL mode, the lock-wait bound) build the pool's options with
    /// [`session_setup`](Self::session_setup) as a setup statement, and a
    /// statement cache of at least 16. The store reads its outcomes from the
    /// OK packet, so the pool's `client_found_rows` setting does not matter.
    ///
    /// As nothing is sent, the table is not checked here: run
    /// [`migrate`](MySqlStore::migrate) as the process starts, which refuses
    /// a table the statements cannot use (with an `AUTO_INCREMENT` column or
    /// a trigger, say) before any claim.
    ///
    /// # Errors
    ///
    /// [`MySqlError::InvalidTableName`] for a bad table name.
    pub fn from_pool(self, pool: Pool) -> Result<MySqlStore, MySqlError> {
        let table = TableName::parse(&self.table)?;
        Ok(MySqlStore::assemble(
            pool,
            table,
            "(caller's pool)".to_owned(),
            false,
            None,
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
async fn check_server(pool: &Pool, table: &TableName) -> Result<(), CheckError> {
    let mut conn = pool.get_conn().await.map_err(CheckError::Driver)?;
    let version: Option<String> = conn
        .query_first("SELECT VERSION()")
        .await
        .map_err(CheckError::Driver)?;
    let version = version.unwrap_or_default();
    if !supported_version(&version) {
        return Err(CheckError::Version(version));
    }
    match schema::inspect(&mut conn, table)
        .await
        .map_err(CheckError::Driver)?
    {
        Found::Incompatible(reason) => Err(CheckError::Table(reason)),
        Found::Missing | Found::Usable => Ok(()),
    }
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
    Opts::from_url(&format!("mysql://{rest}")).map_err(|source| MySqlError::InvalidUrl { source })
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
        source => MySqlError::Connect {
            server: server.to_owned(),
            source,
        },
    }
}

/// The lease protocol on MySQL 8 or MariaDB 10.6+, through mysql_async's
/// pool, with the server's clock.
///
/// Cheap to clone: clones share the pool. `Debug` shows the server, the
/// table and whether TLS is required, never the credentials.
#[derive(Clone)]
pub struct MySqlStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: MySqlPool,
    table: TableName,
    sql: Statements,
    server: String,
    tls: bool,
    /// The session setup of a pool the store built, run again after each
    /// guarded transaction; `None` on a caller's pool, whose sessions the
    /// store leaves to the pool's own reset.
    setup: Option<String>,
}

impl fmt::Debug for MySqlStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MySqlStore")
            .field("server", &self.inner.server)
            .field("table", &self.inner.table)
            .field("tls", &self.inner.tls)
            .finish_non_exhaustive()
    }
}

impl MySqlStore {
    /// A builder with the defaults: table `gst_leases`, lock-wait bound 3 s,
    /// statement bound 5 s.
    pub fn builder() -> MySqlStoreBuilder {
        MySqlStoreBuilder::default()
    }

    /// Connects with the defaults; see [`MySqlStoreBuilder::connect`].
    ///
    /// # Errors
    ///
    /// As [`MySqlStoreBuilder::connect`]: a bad URL, or a first connection
    /// that fails or finds an unsupported server.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn connect(url: &str) -> Result<MySqlStore, MySqlError> {
        MySqlStore::builder().connect(url).await
    }

    /// A store on `pool` with the default table; see
    /// [`MySqlStoreBuilder::from_pool`] for what the pool's sessions need.
    pub fn from_pool(pool: Pool) -> MySqlStore {
        MySqlStore::assemble(
            pool,
            TableName::default_table(),
            "(caller's pool)".to_owned(),
            false,
            None,
        )
    }

    fn assemble(
        pool: Pool,
        table: TableName,
        server: String,
        tls: bool,
        setup: Option<String>,
    ) -> MySqlStore {
        let sql = Statements::new(table.quoted());
        MySqlStore {
            inner: Arc::new(Inner {
                pool: MySqlPool::new(pool, server.clone()),
                table,
                sql,
                server,
                tls,
                setup,
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

    /// The lease table's name, quoted as the statements use it.
    #[must_use]
    pub fn table(&self) -> &str {
        self.inner.table.quoted()
    }

    /// Whether the store's connections require TLS.
    #[must_use]
    pub fn tls_required(&self) -> bool {
        self.inner.tls
    }

    /// Creates the lease table if it does not exist, and checks that an
    /// existing one can carry leases. The table is looked for first, in
    /// `information_schema`, so a user with only `SELECT`, `INSERT` and
    /// `UPDATE` on an existing table can migrate; `CREATE` is needed only
    /// to create it. Safe when many replicas run it at once: `CREATE TABLE
    /// IF NOT EXISTS` takes the table name's metadata lock, and the others
    /// find the table there.
    ///
    /// # Errors
    ///
    /// [`MySqlError::Database`] when the server refuses (missing `CREATE`
    /// privilege for a missing table) or does not answer;
    /// [`MySqlError::IncompatibleTable`] when the table exists without a
    /// column the statements use, with a `name` column that is not binary,
    /// with an `AUTO_INCREMENT` column or with a trigger (see the crate
    /// docs).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the table is either created or not.
    pub async fn migrate(&self) -> Result<(), MySqlError> {
        let mut conn = self.inner.pool.get_conn().await?;
        let table = &self.inner.table;
        let mut found = schema::inspect(&mut conn, table).await?;
        if found == Found::Missing {
            conn.query_drop(self.inner.sql.create_table.as_str())
                .await?;
            found = schema::inspect(&mut conn, table).await?;
        }
        match found {
            Found::Usable => Ok(()),
            Found::Missing => Err(MySqlError::IncompatibleTable {
                table: table.quoted().to_owned(),
                reason: "it is not in information_schema after its creation".to_owned(),
            }),
            Found::Incompatible(reason) => Err(MySqlError::IncompatibleTable {
                table: table.quoted().to_owned(),
                reason,
            }),
        }
    }

    /// Runs `work` in a transaction guarded by the lease `ctx` runs under.
    ///
    /// This is the contract of [`lease_core::guard`], which every backend
    /// keeps: the same error type, the same rollback rules.
    ///
    /// The transaction's first statement verifies the lease and takes a
    /// shared lock on its row (`SELECT term ... LOCK IN SHARE MODE`), and the
    /// term it reads is compared with the handle's: when the lease is no
    /// longer this holder's at that term, the transaction is rolled back
    /// and not one statement of `work` runs. While the transaction is open,
    /// the lock makes every write to the lease row wait, so a successor's
    /// claim cannot take the name until the transaction has ended: a holder
    /// frozen between its verification and its commit cannot commit after a
    /// successor claimed.
    ///
    /// InnoDB has no key-share lock, so the holder's own renewals wait for
    /// the transaction too: a guarded transaction must stay shorter than the
    /// local deadline minus the renew interval (8 s with the default
    /// timings), and shorter than the lock-wait bound for a renewal that
    /// falls due during it to succeed at its first attempt.
    ///
    /// The transaction ends with the lease context: when `ctx` is cancelled
    /// (the lease lost, the parent cancelled, the renewals stopped) before
    /// the commit is sent, `work` is dropped where it is and the transaction
    /// rolled back (its connection killed, if the rollback does not go
    /// through within a second). `work` commits nothing itself: returning
    /// `Ok` commits, `Err` rolls back, and a panic rolls back (the
    /// transaction is dropped, and the driver rolls it back as its
    /// connection returns to the pool) and resumes on the caller.
    ///
    /// ```no_run
    /// # async fn example(store: lease_mysql::MySqlStore, ctx: lease_core::LeaseContext)
    /// # -> Result<(), lease_core::GuardError<lease_mysql::mysql_async::Error>> {
    /// use lease_mysql::mysql_async::prelude::Queryable;
    ///
    /// let term = ctx.term();
    /// store
    ///     .transaction(&ctx, |tx| {
    ///         Box::pin(async move {
    ///             tx.exec_drop(
    ///                 "UPDATE reports SET done = 1, fenced_by = ? WHERE id = 7",
    ///                 (term,),
    ///             )
    ///             .await
    ///         })
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`GuardError::Lost`] when the verification finds the lease gone (or
    /// `ctx` ends with a loss before the commit); [`GuardError::Ended`] when
    /// `ctx` ends otherwise before the commit; [`GuardError::Database`]
    /// (its source the driver's `mysql_async::Error`) when a statement of the guard
    /// fails; [`GuardError::Work`] with what `work` returned.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before the commit is sent drops the transaction:
    /// it is rolled back as its connection returns to the pool (or, if the
    /// connection is broken, by the server when it closes). Dropped while
    /// the commit is in flight, the transaction may or may not have
    /// committed.
    pub async fn transaction<T, E, F>(
        &self,
        ctx: &LeaseContext,
        work: F,
    ) -> Result<T, GuardError<E>>
    where
        F: for<'t, 'c> FnOnce(&'t mut Transaction<'c>) -> BoxFuture<'t, Result<T, E>> + Send,
        T: Send,
        E: Send,
    {
        lease_core::metrics::guarded_transaction(self.guarded_transaction(ctx, work).await)
    }

    async fn guarded_transaction<T, E, F>(
        &self,
        ctx: &LeaseContext,
        work: F,
    ) -> Result<T, GuardError<E>>
    where
        F: for<'t, 'c> FnOnce(&'t mut Transaction<'c>) -> BoxFuture<'t, Result<T, E>> + Send,
        T: Send,
        E: Send,
    {
        let name = ctx.handle().name();
        if ctx.is_cancelled() {
            return Err(GuardError::ended(ctx));
        }
        let got = tokio::select! {
            biased;
            () = ctx.cancelled() => None,
            conn = self.inner.pool.get_conn() => Some(conn),
        };
        let mut conn: Conn = match got {
            None => return Err(GuardError::ended(ctx)),
            Some(conn) => conn.map_err(|e| self.db_error(name, e))?,
        };
        // The work may change the session: until the session setup has been
        // run again after it, the connection is reset as it returns to the
        // pool (which also empties its statement cache and runs the pool's
        // own setup statements).
        conn.reset_connection(true);
        let (result, committed) = self.guarded(&mut conn, ctx, work).await;
        if committed {
            // On a pool of the store's own, put back what the work may have
            // changed, keeping the prepared statements; a failure leaves the
            // reset to the pool.
            if let Some(setup) = &self.inner.setup {
                if conn.query_drop(setup.as_str()).await.is_ok() {
                    conn.reset_connection(false);
                }
            }
        } else {
            tracing::debug!(name, term = ctx.term(), cause = ?ctx.cause(), "guarded transaction not committed");
        }
        result
    }

    /// The transaction of [`transaction`](Self::transaction) on `conn`, and
    /// whether it committed.
    async fn guarded<T, E, F>(
        &self,
        conn: &mut Conn,
        ctx: &LeaseContext,
        work: F,
    ) -> (Result<T, GuardError<E>>, bool)
    where
        F: for<'t, 'c> FnOnce(&'t mut Transaction<'c>) -> BoxFuture<'t, Result<T, E>> + Send,
        T: Send,
        E: Send,
    {
        let name = ctx.handle().name();
        let conn_id = conn.id();
        let begin = async {
            let mut tx = conn.start_transaction(TxOpts::default()).await?;
            let term: Option<u64> = tx
                .exec_first(
                    self.inner.sql.verify_locked.as_str(),
                    params! { "name" => name, "holder" => ctx.handle().holder() },
                )
                .await?;
            Ok::<_, mysql_async::Error>((tx, term))
        };
        let begun = tokio::select! {
            biased;
            () = ctx.cancelled() => None,
            begun = begin => Some(begun),
        };
        let (mut tx, term) = match begun {
            // Dropped mid-statement: the connection is not reused as it is.
            None => {
                self.kill(conn_id).await;
                return (Err(GuardError::ended(ctx)), false);
            }
            Some(Err(err)) => return (Err(self.db_error(name, err)), false),
            Some(Ok(begun)) => begun,
        };
        if term != Some(ctx.term()) {
            let _ = tx.rollback().await;
            tracing::debug!(
                name,
                term = ctx.term(),
                "guarded transaction refused: lease lost"
            );
            return (Err(GuardError::not_holder(name)), false);
        }
        let outcome = {
            let run = work(&mut tx);
            tokio::select! {
                biased;
                () = ctx.cancelled() => None,
                done = run => Some(done),
            }
        };
        match outcome {
            None => {
                self.abort(tx, conn_id).await;
                (Err(GuardError::ended(ctx)), false)
            }
            Some(Err(err)) => {
                self.abort(tx, conn_id).await;
                (Err(GuardError::Work(err)), false)
            }
            Some(Ok(_)) if ctx.is_cancelled() => {
                self.abort(tx, conn_id).await;
                (Err(GuardError::ended(ctx)), false)
            }
            Some(Ok(value)) => match tx.commit().await {
                Ok(()) => (Ok(value), true),
                Err(err) => (Err(self.db_error(name, err)), false),
            },
        }
    }

    /// A failed statement of the guard: the driver's error, classified as
    /// the store classifies its own errors.
    fn db_error<E>(&self, name: &str, err: mysql_async::Error) -> GuardError<E> {
        let kind = crate::error::classify(&err);
        GuardError::database(name, kind, err)
    }

    /// The guard statement, for running the fence by hand in a transaction
    /// of another driver: see [`GuardStatement`] and [`lease_core::guard`].
    ///
    /// Open the transaction with `START TRANSACTION`, then run `SELECT term
    /// FROM {table} WHERE name = ? AND holder = ? AND term = ? AND
    /// expires_at_ms > {now_ms} LOCK IN SHARE MODE` as its
    /// first statement: one row, the lease is still the handle's. The shared
    /// record lock makes every write to the row wait until the transaction
    /// ends, the holder's own renewals included: keep the transaction
    /// shorter than the local deadline minus the renew interval.
    #[must_use]
    pub fn guard_statement(&self) -> GuardStatement {
        GuardStatement::new("START TRANSACTION", self.inner.sql.guard.clone())
    }

    /// Rolls `tx` back; if that does not go through promptly (the work was
    /// dropped mid-statement, or the statement waits on a lock), kills the
    /// connection, which rolls the transaction back on the server.
    async fn abort(&self, tx: Transaction<'_>, conn_id: u32) {
        match tokio::time::timeout(ROLLBACK_BOUND, tx.rollback()).await {
            Ok(Ok(())) => {}
            _ => self.kill(conn_id).await,
        }
    }

    /// Kills connection `id` from another connection of the pool. Best
    /// effort: a connection that is gone needs no killing.
    async fn kill(&self, id: u32) {
        let killed = async {
            let mut conn = self.inner.pool.get_conn().await?;
            conn.query_drop(format!("KILL CONNECTION {id}")).await
        };
        if let Err(err) = tokio::time::timeout(ROLLBACK_BOUND, killed)
            .await
            .unwrap_or(Ok(()))
        {
            tracing::debug!(id, error = %err, "killing a guarded transaction's connection failed");
        }
    }

    async fn conn(&self) -> Result<Conn, mysql_async::Error> {
        self.inner.pool.get_conn().await
    }

    /// Runs a write, trying again when InnoDB picked it as a deadlock victim
    /// (its statement was rolled back whole), and returns the OK packet's
    /// `last_insert_id`.
    async fn write(&self, stmt: &str, params: Params) -> Result<Option<u64>, mysql_async::Error> {
        let mut conn = self.conn().await?;
        write_on(&mut conn, stmt, params).await
    }

    /// The renewals of `leases` (at most [`MAX_RENEWALS_PER_BATCH`]) in one
    /// transaction: one `UPDATE` of every row still held, then one read of
    /// which are held now. Within the transaction the rows the update
    /// renewed stay locked, so the read sees exactly them: a row of one of
    /// these holders that the update did not renew had expired, and only
    /// its holder (this batch) could have extended it. A row the update
    /// renewed reads as not held only when the read came more than the
    /// lease after the update, and it has then expired indeed.
    async fn renew_chunk(
        &self,
        leases: &[(&str, &str)],
        lease_ms: i64,
    ) -> Result<Vec<bool>, mysql_async::Error> {
        let Some(last) = leases.last() else {
            return Ok(Vec::new());
        };
        // Round up to a power of two, repeating the last pair, so that a few
        // prepared statements serve every count.
        let slots = leases.len().next_power_of_two();
        let mut names: Vec<Value> = Vec::with_capacity(3 * slots);
        for (name, _) in leases
            .iter()
            .chain(std::iter::repeat_n(last, slots - leases.len()))
        {
            names.push(Value::from(*name));
        }
        let mut pairs: Vec<Value> = Vec::with_capacity(2 * slots);
        for (name, holder) in leases
            .iter()
            .chain(std::iter::repeat_n(last, slots - leases.len()))
        {
            pairs.push(Value::from(*name));
            pairs.push(Value::from(*holder));
        }
        let mut update = Vec::with_capacity(1 + 3 * slots);
        update.push(Value::from(lease_ms));
        update.extend(names.iter().cloned());
        update.extend(pairs.iter().cloned());
        let mut read = names;
        read.extend(pairs);
        let (update_sql, read_sql) = self.inner.sql.renew_many(slots);
        let mut conn = self.conn().await?;
        let mut tries = 0;
        let held = loop {
            let attempt = async {
                let mut tx = conn.start_transaction(TxOpts::default()).await?;
                tx.exec_drop(update_sql.as_str(), Params::Positional(update.clone()))
                    .await?;
                let held: Vec<(Vec<u8>, Vec<u8>)> = tx
                    .exec(read_sql.as_str(), Params::Positional(read.clone()))
                    .await?;
                tx.commit().await?;
                Ok::<_, mysql_async::Error>(held)
            };
            match attempt.await {
                Ok(held) => break held,
                Err(mysql_async::Error::Server(e))
                    if e.code == 1213 && tries < DEADLOCK_RETRIES =>
                {
                    tries += 1;
                    tracing::debug!(tries, "deadlock victim: trying the batch again");
                }
                Err(e) => return Err(e),
            }
        };
        Ok(leases
            .iter()
            .map(|(name, holder)| {
                held.iter()
                    .any(|(n, h)| n == name.as_bytes() && h == holder.as_bytes())
            })
            .collect())
    }
}

/// Runs a write on `conn`, trying again when InnoDB picked it as a deadlock
/// victim (its statement was rolled back whole), and returns the OK
/// packet's `last_insert_id`.
async fn write_on(
    conn: &mut Conn,
    stmt: &str,
    params: Params,
) -> Result<Option<u64>, mysql_async::Error> {
    let mut tries = 0;
    loop {
        match conn.exec_drop(stmt, params.clone()).await {
            Ok(()) => return Ok(conn.last_insert_id()),
            Err(mysql_async::Error::Server(e)) if e.code == 1213 && tries < DEADLOCK_RETRIES => {
                tries += 1;
                tracing::debug!(tries, "deadlock victim: trying the statement again");
            }
            Err(e) => return Err(e),
        }
    }
}

/// How many times a claim reads the row again after a rival inserted the
/// name between its read and its insert.
const CLAIM_ROUNDS: usize = 2;

/// A claim on `conn`: a plain read first, so a claim refused because the
/// name is held locks nothing and waits on nothing; then, for a free row,
/// an update checked against the term read (and the expiry, by the
/// statement's clock), or, for a missing row, an insert that does nothing
/// when a rival inserted first (the row is then read again).
async fn claim_on(
    conn: &mut Conn,
    sql: &Statements,
    name: &str,
    holder: &str,
    instance: &str,
    lease_ms: i64,
) -> Result<Option<u64>, mysql_async::Error> {
    for _ in 0..CLAIM_ROUNDS {
        let row: Option<(u64, i64)> = conn
            .exec_first(sql.claim_read.as_str(), params! { "name" => name })
            .await?;
        match row {
            Some((_, 0)) => return Ok(None),
            Some((term, _)) => {
                return write_on(
                    conn,
                    &sql.claim_take,
                    params! {
                        "name" => name,
                        "holder" => holder,
                        "instance" => instance,
                        "lease_ms" => lease_ms,
                        "term" => term,
                    },
                )
                .await;
            }
            None => {
                let inserted = write_on(
                    conn,
                    &sql.claim_insert,
                    params! {
                        "name" => name,
                        "holder" => holder,
                        "instance" => instance,
                        "lease_ms" => lease_ms,
                    },
                )
                .await?;
                if inserted == Some(1) {
                    return Ok(Some(1));
                }
            }
        }
    }
    Ok(None)
}

#[async_trait]
impl LeaseStore for MySqlStore {
    async fn claim(
        &self,
        name: &str,
        holder: &str,
        instance: &str,
        lease_ms: i64,
    ) -> Result<Option<u64>, BoxError> {
        let mut conn = self.conn().await?;
        let term = claim_on(&mut conn, &self.inner.sql, name, holder, instance, lease_ms).await?;
        Ok(term)
    }

    async fn renew(&self, name: &str, holder: &str, lease_ms: i64) -> Result<bool, BoxError> {
        let term = self
            .write(
                &self.inner.sql.renew,
                params! { "name" => name, "holder" => holder, "lease_ms" => lease_ms },
            )
            .await?;
        Ok(term.is_some())
    }

    async fn renew_many(
        &self,
        leases: &[(&str, &str)],
        lease_ms: i64,
    ) -> Result<Vec<bool>, BoxError> {
        let mut held = Vec::with_capacity(leases.len());
        for chunk in leases.chunks(MAX_RENEWALS_PER_BATCH) {
            held.extend(self.renew_chunk(chunk, lease_ms).await?);
        }
        Ok(held)
    }

    async fn verify(&self, name: &str, holder: &str) -> Result<Option<u64>, BoxError> {
        let mut conn = self.conn().await?;
        let term: Option<u64> = conn
            .exec_first(
                self.inner.sql.verify.as_str(),
                params! { "name" => name, "holder" => holder },
            )
            .await?;
        Ok(term)
    }

    async fn release(&self, name: &str, holder: &str) -> Result<bool, BoxError> {
        let term = self
            .write(
                &self.inner.sql.release,
                params! { "name" => name, "holder" => holder },
            )
            .await?;
        Ok(term.is_some())
    }

    async fn claim_slot(
        &self,
        name: &str,
        holder: &str,
        instance: &str,
        slot_ms: i64,
        lease_ms: i64,
    ) -> Result<SlotClaim, BoxError> {
        let mut conn = self.conn().await?;
        let row: Option<(u64, i64, i64, i64, i64)> = conn
            .exec_first(
                self.inner.sql.slot_read.as_str(),
                params! { "name" => name },
            )
            .await?;
        drop(conn);
        let Some((term, slot, unfinished, rerun, expired)) = row else {
            let inserted = self
                .write(
                    &self.inner.sql.slot_insert,
                    params! {
                        "name" => name,
                        "holder" => holder,
                        "instance" => instance,
                        "lease_ms" => lease_ms,
                        "slot" => slot_ms,
                    },
                )
                .await?;
            return Ok(match inserted {
                Some(1) => SlotClaim::Claimed {
                    term: 1,
                    superseded: None,
                },
                _ => SlotClaim::Refused,
            });
        };
        if expired == 0 || slot_ms <= slot {
            return Ok(SlotClaim::Refused);
        }
        let claimed = self
            .write(
                &self.inner.sql.slot_update,
                params! {
                    "name" => name,
                    "holder" => holder,
                    "instance" => instance,
                    "lease_ms" => lease_ms,
                    "slot" => slot_ms,
                    "term" => term,
                },
            )
            .await?;
        Ok(match claimed {
            Some(new_term) => SlotClaim::Claimed {
                term: new_term,
                superseded: (unfinished == slot && slot != 0).then_some(SupersededSlot {
                    slot_ms: slot,
                    rerun: rerun == slot,
                }),
            },
            None => SlotClaim::Refused,
        })
    }

    async fn finish(
        &self,
        name: &str,
        holder: Option<&str>,
        slot_ms: i64,
        passed_ms: i64,
    ) -> Result<Finished, BoxError> {
        let outcome = self
            .write(
                &self.inner.sql.finish,
                params! {
                    "name" => name,
                    "holder" => holder,
                    "slot" => slot_ms,
                    "passed" => passed_ms,
                },
            )
            .await?;
        Ok(match outcome {
            Some(sql::FINISH_RELEASED) => Finished::Released,
            Some(sql::FINISH_WITHOUT_LEASE) => Finished::RecordedWithoutLease,
            _ => Finished::NotRecorded,
        })
    }

    async fn find_unfinished(&self, names: &[&str]) -> Result<Vec<UnfinishedRow>, BoxError> {
        let mut conn = self.conn().await?;
        let mut found = Vec::new();
        for chunk in names.chunks(MAX_NAMES_PER_SEARCH) {
            let Some(last) = chunk.last() else { continue };
            // Round up to a power of two, repeating the last name, so that a
            // few prepared statements serve every count.
            let slots = chunk.len().next_power_of_two();
            let mut values: Vec<Value> = chunk.iter().map(|n| Value::from(*n)).collect();
            values.resize(slots, Value::from(*last));
            let rows: Vec<(Vec<u8>, u64, i64)> = conn
                .exec(
                    self.inner.sql.find_unfinished(slots),
                    Params::Positional(values),
                )
                .await?;
            for (name, term, slot_ms) in rows {
                let name = String::from_utf8(name)?;
                found.push(UnfinishedRow {
                    name,
                    term,
                    slot_ms,
                });
            }
        }
        Ok(found)
    }

    async fn claim_rerun(
        &self,
        name: &str,
        term: u64,
        holder: &str,
        instance: &str,
        lease_ms: i64,
    ) -> Result<bool, BoxError> {
        let claimed = self
            .write(
                &self.inner.sql.claim_rerun,
                params! {
                    "name" => name,
                    "term" => term,
                    "holder" => holder,
                    "instance" => instance,
                    "lease_ms" => lease_ms,
                },
            )
            .await?;
        Ok(claimed.is_some())
    }

    async fn last_slot(&self, name: &str) -> Result<Option<i64>, BoxError> {
        let mut conn = self.conn().await?;
        let slot: Option<i64> = conn
            .exec_first(
                self.inner.sql.last_slot.as_str(),
                params! { "name" => name },
            )
            .await?;
        Ok(slot)
    }

    async fn force_release(&self, name: &str, term: u64) -> Result<bool, BoxError> {
        let freed = self
            .write(
                &self.inner.sql.force_release,
                params! { "name" => name, "term" => term },
            )
            .await?;
        Ok(freed.is_some())
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>, BoxError> {
        let mut conn = self.conn().await?;
        let row: Option<InfoRow> = conn
            .exec_first(self.inner.sql.get.as_str(), params! { "name" => name })
            .await?;
        row.map(info).transpose()
    }

    async fn list(&self, prefix: &str, limit: u32) -> Result<Vec<LeaseInfo>, BoxError> {
        let mut conn = self.conn().await?;
        let rows: Vec<InfoRow> = conn
            .exec(
                self.inner.sql.list.as_str(),
                params! { "prefix" => prefix, "row_limit" => limit },
            )
            .await?;
        let mut infos = Vec::with_capacity(rows.len());
        for row in rows {
            let info = info(row)?;
            if !info.name.starts_with(prefix) {
                break;
            }
            infos.push(info);
        }
        Ok(infos)
    }

    async fn now_ms(&self) -> Result<i64, BoxError> {
        let mut conn = self.conn().await?;
        let now: Option<i64> = conn.exec_first(sql::NOW, ()).await?;
        now.ok_or_else(|| "the clock read returned no row".into())
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
}

/// The columns of `get` and `list`, as the driver reads them.
type InfoRow = (Vec<u8>, Vec<u8>, u64, i64, i64, i64, i64, i64);

/// A row of `get` or `list`.
fn info(row: InfoRow) -> Result<LeaseInfo, BoxError> {
    let (name, instance, term, expires_at_ms, now_ms, slot_ms, unfinished, rerun) = row;
    Ok(LeaseInfo {
        name: String::from_utf8(name)?,
        instance: String::from_utf8_lossy(&instance).into_owned(),
        term,
        expires_at_ms,
        now_ms,
        slot_ms,
        unfinished_slot_ms: unfinished,
        rerun_slot_ms: rerun,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rival's refused claims, many and concurrent, each left inside an
    /// open transaction (so any row lock it took would still be held), do
    /// not hold up the holder's renewal, nor each other. With a claim that
    /// locks the held row to refuse it (`INSERT ... ON DUPLICATE KEY
    /// UPDATE`), the rivals queue on the row and the renewal waits for the
    /// lock until InnoDB's lock-wait bound fails it.
    #[tokio::test]
    async fn refused_claims_in_open_transactions_do_not_hold_up_the_renewal() {
        let Some(url) = lease_conformance::env_url("LEASE_TEST_MYSQL_URL") else {
            return;
        };
        let table = "lm_refused_claim_locks";
        let store = MySqlStore::builder()
            .with_table(table)
            .with_lock_wait_timeout(Duration::from_secs(1))
            .connect(&url)
            .await
            .unwrap();
        let mut setup = store.inner.pool.get_conn().await.unwrap();
        setup
            .query_drop(format!("DROP TABLE IF EXISTS `{table}`"))
            .await
            .unwrap();
        store.migrate().await.unwrap();
        let term = LeaseStore::claim(&store, "held", "holder", "a", 60_000)
            .await
            .unwrap();
        assert_eq!(term, Some(1));

        let rivals: Vec<_> = (0..8)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    let mut conn = store.inner.pool.get_conn().await?;
                    conn.query_drop("START TRANSACTION").await?;
                    let rival = format!("rival-{i}");
                    let claimed =
                        claim_on(&mut conn, &store.inner.sql, "held", &rival, "b", 60_000).await?;
                    Ok::<_, mysql_async::Error>((conn, claimed))
                })
            })
            .collect();
        let mut settled = Vec::new();
        for rival in rivals {
            settled.push(rival.await.unwrap());
        }
        // Every rival's transaction is still open here.
        let renewed = LeaseStore::renew(&store, "held", "holder", 60_000).await;
        let mut refused = Vec::new();
        for rival in settled {
            match rival {
                Ok((mut conn, claimed)) => {
                    let _ = conn.query_drop("ROLLBACK").await;
                    refused.push(format!("{claimed:?}"));
                }
                Err(e) => refused.push(format!("error: {e}")),
            }
        }
        // Best effort: a rival that failed left its transaction to the pool.
        let _ = setup
            .query_drop(format!("DROP TABLE IF EXISTS `{table}`"))
            .await;
        assert!(
            matches!(renewed, Ok(true)),
            "the holder renews while the rivals' transactions are open: {renewed:?}"
        );
        assert!(
            refused.iter().all(|r| r == "None"),
            "every rival's claim is refused at once, none waits on another: {refused:?}"
        );
    }

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
