//! [`PostgresStore`]: the protocol's statements on a deadpool of
//! tokio-postgres connections.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use futures_util::StreamExt;
use lease_core::{
    BoxError, DbErrorKind, Finished, LeaseInfo, LeaseStore, SlotClaim, SupersededSlot,
    UnfinishedRow,
};
use rustls::RootCertStore;
use tokio_postgres::config::Host;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{NoTls, Row};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::error::PostgresError;
use crate::schema;
use crate::sql::{self, DEFAULT_TABLE, Statements, Table};
use crate::tls::{self, SslMode};
use crate::token::Token;

/// The bound on every statement of the store's own connections, unless the
/// builder says otherwise: half the default local deadline, the bound
/// [`Leases`](lease_core::Leases) itself puts on each call.
pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long opening a connection may take (TCP, TLS and authentication),
/// unless the URL's `connect_timeout` or the builder says otherwise.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The most connections the store's own pool opens, unless the builder says
/// otherwise.
pub const DEFAULT_POOL_SIZE: usize = 8;

/// The `application_name` the store's connections show in
/// `pg_stat_activity`, unless the URL gives one.
const DEFAULT_APPLICATION_NAME: &str = "lease-postgres";

/// A [`LeaseStore`] on PostgreSQL.
///
/// Every protocol statement is one statement, sent as one round trip (see
/// the crate docs for the table), prepared once per connection and cached.
/// Expiry is judged by PostgreSQL's `clock_timestamp()`, read once in each
/// statement.
///
/// Build it with [`connect`](Self::connect) from a URL, with
/// [`builder`](Self::builder) to choose the table, the pool size, the
/// timeouts or the TLS roots, or with [`from_pool`](Self::from_pool) on an
/// application's own deadpool. Cloning is cheap: clones share the pool.
///
/// Besides the protocol, it offers the guarded transaction,
/// [`transaction`](Self::transaction): work in a transaction that first
/// verifies the lease, and fences it against the next holder.
///
/// # Examples
///
/// ```no_run
/// use lease_core::Leases;
/// use lease_postgres::PostgresStore;
///
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// let store = PostgresStore::builder("postgres://app:secret@db.internal/app?sslmode=verify-full")?
///     .with_table("app_leases")
///     .with_pool_size(4)
///     .build()?;
/// let leases = Leases::new(store);
/// leases.migrate().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PostgresStore {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) pool: Pool,
    pub(crate) sql: Statements,
    /// The server-side bound set on the store's own connections; `None` for
    /// a pool given by the application, or when turned off.
    pub(crate) statement_timeout: Option<Duration>,
    /// Where the store's own connections go, for `Debug`; `None` for a pool
    /// given by the application.
    target: Option<Target>,
    /// How to reach the server to cancel a statement of an abandoned
    /// guarded transaction.
    pub(crate) cancel: CancelTls,
    /// How the store's own protocol statements are sent.
    pub(crate) statement_mode: StatementMode,
}

/// How a [`PostgresStore`] sends its protocol statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum StatementMode {
    /// Named prepared statements, prepared once per connection and cached
    /// (the default): each later use is one round trip with the statement's
    /// name. They live on the server connection that prepared them, so they
    /// break behind a pooler that hands each transaction another server
    /// connection (PgBouncer in transaction pooling mode before 1.21).
    #[default]
    Prepared,
    /// Unnamed statements with typed parameters (`query_typed`): parse,
    /// bind and execute in one round trip, nothing left on the server
    /// connection, so the store works behind PgBouncer in transaction
    /// pooling mode. The server parses and plans every statement. URL
    /// parameter `statement_mode=unnamed`.
    Unnamed,
}

/// The TLS of a cancel request: the same as the connection's.
#[derive(Clone)]
pub(crate) enum CancelTls {
    Plain,
    Rustls(MakeRustlsConnect),
    /// A pool given by the application: its TLS is unknown, so no cancel
    /// request is sent (the connection is closed instead).
    Unknown,
}

/// What `Debug` shows of a connection target: never the password.
#[derive(Clone)]
struct Target {
    hosts: Vec<String>,
    ports: Vec<u16>,
    user: Option<String>,
    dbname: Option<String>,
    ssl_mode: SslMode,
}

impl Target {
    fn of(config: &tokio_postgres::Config, ssl_mode: SslMode) -> Self {
        Target {
            hosts: config
                .get_hosts()
                .iter()
                .map(|host| match host {
                    Host::Tcp(name) => name.clone(),
                    #[cfg(unix)]
                    Host::Unix(path) => path.display().to_string(),
                })
                .collect(),
            ports: config.get_ports().to_vec(),
            user: config.get_user().map(str::to_owned),
            dbname: config.get_dbname().map(str::to_owned),
            ssl_mode,
        }
    }
}

impl Target {
    /// `host:port` for each host, comma separated: what a connection error
    /// names (never the user's password).
    fn servers(&self) -> String {
        let port = |i: usize| {
            self.ports
                .get(i)
                .or(self.ports.first())
                .copied()
                .unwrap_or(5432)
        };
        if self.hosts.is_empty() {
            return format!("localhost:{}", port(0));
        }
        self.hosts
            .iter()
            .enumerate()
            .map(|(i, host)| format!("{host}:{}", port(i)))
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("hosts", &self.hosts)
            .field("ports", &self.ports)
            .field("user", &self.user)
            .field("dbname", &self.dbname)
            .field("sslmode", &self.ssl_mode.as_str())
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for PostgresStore {
    /// Shows where the store connects (never the password), its table,
    /// timeouts and pool status.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = self.inner.pool.status();
        f.debug_struct("PostgresStore")
            .field("target", &self.inner.target)
            .field("table", &self.inner.sql.table.name())
            .field("statement_timeout", &self.inner.statement_timeout)
            .field("pool_max_size", &status.max_size)
            .field("pool_size", &status.size)
            .finish()
    }
}

/// Where a builder's connections come from.
enum Source {
    Url(Box<UrlConfig>),
    Pool(Pool),
}

/// A parsed URL: the driver's configuration, and what the driver cannot
/// parse itself (`sslmode=verify-ca|verify-full`, `sslrootcert`).
struct UrlConfig {
    config: tokio_postgres::Config,
    ssl_mode: SslMode,
    root_cert: Option<PathBuf>,
    statement_mode: Option<StatementMode>,
}

/// Builds a [`PostgresStore`]: from a URL ([`PostgresStore::builder`]) or
/// from an application's pool ([`PostgresStoreBuilder::from_pool`]), then
/// `with_*` setters, then [`build`](Self::build) or
/// [`connect`](Self::connect).
///
/// The pool size, timeouts and TLS settings apply to the pool the builder
/// creates from a URL; a pool given with
/// [`from_pool`](PostgresStoreBuilder::from_pool) keeps its own, and only
/// the table applies to it.
#[must_use = "a builder does nothing until build() or connect() is called"]
pub struct PostgresStoreBuilder {
    source: Source,
    table: String,
    pool_size: usize,
    statement_timeout: Option<Duration>,
    connect_timeout: Option<Duration>,
    ssl_mode: Option<SslMode>,
    roots: Option<RootCertStore>,
    statement_mode: Option<StatementMode>,
}

impl fmt::Debug for PostgresStoreBuilder {
    /// Shows the settings and where the pool would connect, never the password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let target = match &self.source {
            Source::Url(url) => Some(Target::of(&url.config, url.ssl_mode)),
            Source::Pool(_) => None,
        };
        f.debug_struct("PostgresStoreBuilder")
            .field("target", &target)
            .field("table", &self.table)
            .field("pool_size", &self.pool_size)
            .field("statement_timeout", &self.statement_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("ssl_mode", &self.ssl_mode)
            .field("custom_roots", &self.roots.as_ref().map(RootCertStore::len))
            .field("statement_mode", &self.statement_mode)
            .finish()
    }
}

impl PostgresStoreBuilder {
    fn new(source: Source) -> Self {
        PostgresStoreBuilder {
            source,
            table: DEFAULT_TABLE.to_owned(),
            pool_size: DEFAULT_POOL_SIZE,
            statement_timeout: Some(DEFAULT_STATEMENT_TIMEOUT),
            connect_timeout: None,
            ssl_mode: None,
            roots: None,
            statement_mode: None,
        }
    }

    /// Sets how the store sends its protocol statements (default
    /// [`StatementMode::Prepared`], or the URL's `statement_mode`
    /// parameter). Behind PgBouncer in transaction pooling mode, use
    /// [`StatementMode::Unnamed`]. It applies to a pool given with
    /// [`from_pool`](Self::from_pool) too.
    pub fn with_statement_mode(mut self, mode: StatementMode) -> Self {
        self.statement_mode = Some(mode);
        self
    }

    /// A builder for a store on `pool`, an application's own deadpool: the
    /// store borrows its connections for single statements and guarded
    /// transactions. Only [`with_table`](Self::with_table) applies; the
    /// pool's own configuration decides the rest. Give its connections a
    /// `statement_timeout` (for example `options=-c statement_timeout=5000`
    /// in its URL), or a statement stuck on the server outlives the call
    /// that gave up on it, and its connection stays busy until it ends.
    pub fn from_pool(pool: Pool) -> Self {
        Self::new(Source::Pool(pool))
    }

    /// The lease table (default `gst_leases`): `table` or `schema.table`,
    /// each part ASCII letters, digits and underscores, not starting with a
    /// digit, at most 63 bytes. It is quoted, so its case is kept. Checked
    /// by [`build`](Self::build).
    pub fn with_table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// The most connections the pool opens (default 8, at least 1).
    /// Renewals take a connection of their own for a moment; a guarded
    /// transaction holds one until it ends, so leave room for both.
    pub fn with_pool_size(mut self, size: usize) -> Self {
        self.pool_size = size.max(1);
        self
    }

    /// The server-side bound on every statement of the pool's connections
    /// (default 5 s; `None` turns it off), set as `statement_timeout` when
    /// each connection starts, so it costs no round trip. It also bounds
    /// how long a claim waits for a guarded transaction's row lock, and
    /// applies to the statements of guarded transactions: a transaction
    /// that needs longer statements sets `SET LOCAL statement_timeout`
    /// itself. Keep it within the protocol's bound on its own statements
    /// ([`Timings::statement_timeout`](lease_core::Timings::statement_timeout),
    /// half the local deadline), so a statement abandoned by the
    /// coordinator does not keep running on the server. Poolers that do not
    /// pass startup options (PgBouncer) need `None` here and the setting on
    /// the role instead (`ALTER ROLE ... SET statement_timeout`).
    pub fn with_statement_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.statement_timeout = timeout;
        self
    }

    /// How long opening a connection may take, TCP, TLS and authentication
    /// together (default: the URL's `connect_timeout`, else 5 s).
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// The TLS mode, in place of the URL's `sslmode` (default `prefer`).
    pub fn with_ssl_mode(mut self, mode: SslMode) -> Self {
        self.ssl_mode = Some(mode);
        self
    }

    /// The roots `verify-ca` and `verify-full` trust, in place of the
    /// Mozilla roots of `webpki-roots` (and of the URL's `sslrootcert`).
    pub fn with_root_certificates(mut self, roots: RootCertStore) -> Self {
        self.roots = Some(roots);
        self
    }

    /// Builds the store. It does not connect: the pool opens connections as
    /// the store needs them (see [`connect`](Self::connect) to open one
    /// now), and it does not create the table (see
    /// [`LeaseStore::migrate`]).
    ///
    /// # Errors
    ///
    /// [`PostgresError::InvalidTable`] for a table name that is not a plain
    /// identifier; [`PostgresError::RootCertificates`] when the URL's
    /// `sslrootcert` cannot be read; [`PostgresError::Tls`] or
    /// [`PostgresError::Pool`] when the TLS configuration or the pool cannot
    /// be built.
    pub fn build(self) -> Result<PostgresStore, PostgresError> {
        let sql = Statements::new(Table::new(&self.table)?);
        let url = match self.source {
            Source::Pool(pool) => {
                return Ok(PostgresStore::assemble(
                    pool,
                    sql,
                    None,
                    None,
                    CancelTls::Unknown,
                    self.statement_mode.unwrap_or_default(),
                ));
            }
            Source::Url(url) => url,
        };
        let UrlConfig {
            mut config,
            ssl_mode: url_mode,
            root_cert,
            statement_mode: url_statement_mode,
        } = *url;
        let statement_mode = self
            .statement_mode
            .or(url_statement_mode)
            .unwrap_or_default();
        let mode = self.ssl_mode.unwrap_or(url_mode);
        config.ssl_mode(mode.driver_mode());
        let connect_timeout = self
            .connect_timeout
            .or_else(|| config.get_connect_timeout().copied())
            .unwrap_or(DEFAULT_CONNECT_TIMEOUT);
        config.connect_timeout(connect_timeout);
        if let Some(timeout) = self.statement_timeout {
            let setting = format!("-c statement_timeout={}", timeout.as_millis().max(1));
            let options = match config.get_options() {
                Some(existing) if !existing.trim().is_empty() => format!("{existing} {setting}"),
                _ => setting,
            };
            config.options(options);
        }
        if config.get_application_name().is_none() {
            config.application_name(DEFAULT_APPLICATION_NAME);
        }
        let roots = match (self.roots, root_cert) {
            (Some(roots), _) => Some(roots),
            (None, Some(path)) => Some(tls::read_root_certificates(&path)?),
            (None, None) => None,
        };
        let target = Target::of(&config, mode);
        let manager_config = ManagerConfig {
            // No query on checkout: a protocol statement stays one round
            // trip. A closed connection is still noticed and replaced.
            recycling_method: RecyclingMethod::Fast,
        };
        let (manager, cancel) = match tls::client_config(mode, roots)? {
            None => (
                Manager::from_config(config, NoTls, manager_config),
                CancelTls::Plain,
            ),
            Some(client_config) => {
                let connector = MakeRustlsConnect::new(client_config);
                (
                    Manager::from_config(config, connector.clone(), manager_config),
                    CancelTls::Rustls(connector),
                )
            }
        };
        let pool = Pool::builder(manager)
            .max_size(self.pool_size)
            .runtime(Runtime::Tokio1)
            .create_timeout(Some(connect_timeout))
            .wait_timeout(Some(
                self.statement_timeout.unwrap_or(DEFAULT_STATEMENT_TIMEOUT),
            ))
            .build()
            .map_err(PostgresError::Pool)?;
        Ok(PostgresStore::assemble(
            pool,
            sql,
            self.statement_timeout,
            Some(target),
            cancel,
            statement_mode,
        ))
    }

    /// Builds the store and opens one connection, so that a wrong address,
    /// credentials or TLS setting fails now rather than at the first claim.
    ///
    /// # Errors
    ///
    /// As [`build`](Self::build), and [`PostgresError::Connect`] when the
    /// connection cannot be opened.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped call leaves nothing behind but, at most, an
    /// idle connection in the dropped store's pool.
    pub async fn connect(self) -> Result<PostgresStore, PostgresError> {
        let store = self.build()?;
        let server = store
            .inner
            .target
            .as_ref()
            .map_or_else(|| "the given pool's server".to_owned(), Target::servers);
        drop(
            store
                .inner
                .pool
                .get()
                .await
                .map_err(|source| PostgresError::Connect { server, source })?,
        );
        Ok(store)
    }
}

impl PostgresStore {
    /// A builder for a store on the database `url` names:
    /// `postgres://` or `postgresql://`, with the parameters the crate docs
    /// list.
    ///
    /// # Errors
    ///
    /// [`PostgresError::InvalidUrl`] for another scheme, a malformed URL or
    /// an unknown parameter; the message never quotes the URL.
    pub fn builder(url: &str) -> Result<PostgresStoreBuilder, PostgresError> {
        Ok(PostgresStoreBuilder::new(Source::Url(Box::new(parse_url(
            url,
        )?))))
    }

    /// A store on the database `url` names, with the default table
    /// `gst_leases` and settings; one connection is opened to check that
    /// the server answers.
    ///
    /// # Errors
    ///
    /// As [`builder`](Self::builder) and [`PostgresStoreBuilder::connect`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn connect(url: &str) -> Result<Self, PostgresError> {
        Self::builder(url)?.connect().await
    }

    /// A store on an application's own pool, with the default table
    /// `gst_leases`. See [`PostgresStoreBuilder::from_pool`] for another
    /// table, and for the `statement_timeout` such a pool should set.
    pub fn from_pool(pool: Pool) -> Self {
        let sql = Statements::new(Table::default_table());
        Self::assemble(
            pool,
            sql,
            None,
            None,
            CancelTls::Unknown,
            StatementMode::default(),
        )
    }

    fn assemble(
        pool: Pool,
        sql: Statements,
        statement_timeout: Option<Duration>,
        target: Option<Target>,
        cancel: CancelTls,
        statement_mode: StatementMode,
    ) -> Self {
        PostgresStore {
            inner: Arc::new(Inner {
                pool,
                sql,
                statement_timeout,
                target,
                cancel,
                statement_mode,
            }),
        }
    }

    /// Creates the lease table if it does not exist: idempotent, and safe
    /// when many replicas run it at once on a database without the table
    /// (see the crate docs). The same as
    /// [`Leases::migrate`](lease_core::Leases::migrate), without the
    /// coordinator's client-side bound (the server's statement timeout
    /// bounds each statement).
    ///
    /// # Errors
    ///
    /// [`lease_core::Error::Database`] when the server refuses (no `CREATE`
    /// privilege on the schema while the table is missing) or does not
    /// answer.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the table is either created or not.
    pub async fn migrate(&self) -> lease_core::Result<()> {
        schema::migrate(&self.inner.pool, &self.inner.sql, self.inner.statement_mode)
            .await
            .map_err(|source| lease_core::Error::Database {
                op: lease_core::Op::Migrate,
                name: None,
                kind: crate::error::classify(&*source),
                source,
            })
    }

    /// The lease table's name, as given.
    #[must_use]
    pub fn table(&self) -> &str {
        self.inner.sql.table.name()
    }

    /// The pool the store takes its connections from.
    #[must_use]
    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    async fn client(&self) -> Result<Object, BoxError> {
        Ok(self.inner.pool.get().await?)
    }

    /// Runs `sql` with typed `params` and returns its rows, as the
    /// [statement mode](StatementMode) says.
    async fn rows(
        &self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>, BoxError> {
        let client = self.client().await?;
        Ok(query(&client, self.inner.statement_mode, sql, params).await?)
    }

    /// The first row of [`rows`](Self::rows), if any (the protocol's
    /// statements return at most one where this is used).
    async fn row(
        &self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Option<Row>, BoxError> {
        Ok(self.rows(sql, params).await?.into_iter().next())
    }

    /// Runs `sql` with typed `params` and returns the rows it changed.
    async fn affected(
        &self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<u64, BoxError> {
        let client = self.client().await?;
        match self.inner.statement_mode {
            StatementMode::Unnamed => {
                let stream = client
                    .query_typed_raw(sql, params.iter().map(|(v, t)| (*v, t.clone())))
                    .await?;
                let mut stream = std::pin::pin!(stream);
                while let Some(row) = stream.next().await {
                    row?;
                }
                Ok(stream.rows_affected().unwrap_or(0))
            }
            StatementMode::Prepared => {
                let stmt = client.prepare_cached(sql).await?;
                let values: Vec<&(dyn ToSql + Sync)> = params.iter().map(|(v, _)| *v).collect();
                Ok(client.execute(&stmt, &values).await?)
            }
        }
    }
}

/// Runs `sql` on `client` with typed `params`, as `mode` says: a named
/// statement prepared once and cached, or an unnamed one.
pub(crate) async fn query(
    client: &deadpool_postgres::ClientWrapper,
    mode: StatementMode,
    sql: &str,
    params: &[(&(dyn ToSql + Sync), Type)],
) -> Result<Vec<Row>, tokio_postgres::Error> {
    match mode {
        StatementMode::Unnamed => client.query_typed(sql, params).await,
        StatementMode::Prepared => {
            let stmt = client.prepare_cached(sql).await?;
            let values: Vec<&(dyn ToSql + Sync)> = params.iter().map(|(v, _)| *v).collect();
            client.query(&stmt, &values).await
        }
    }
}

/// A term as the database stores it (`bigint`) to the protocol's `u64`.
fn term(value: i64) -> Result<u64, BoxError> {
    u64::try_from(value)
        .map_err(|_| format!("the lease table holds a negative term ({value})").into())
}

#[async_trait]
impl LeaseStore for PostgresStore {
    async fn claim(
        &self,
        name: &str,
        holder: &str,
        instance: &str,
        lease_ms: i64,
    ) -> Result<Option<u64>, BoxError> {
        let holder = Token(holder);
        let row = self
            .row(
                &self.inner.sql.claim,
                &[
                    (&name, Type::TEXT),
                    (&holder, Type::TEXT),
                    (&instance, Type::TEXT),
                    (&lease_ms, Type::INT8),
                ],
            )
            .await?;
        row.map(|row| term(row.try_get(0)?)).transpose()
    }

    async fn renew(&self, name: &str, holder: &str, lease_ms: i64) -> Result<bool, BoxError> {
        let holder = Token(holder);
        let renewed = self
            .affected(
                &self.inner.sql.renew,
                &[
                    (&name, Type::TEXT),
                    (&holder, Type::TEXT),
                    (&lease_ms, Type::INT8),
                ],
            )
            .await?;
        Ok(renewed == 1)
    }

    async fn renew_many(
        &self,
        leases: &[(&str, &str)],
        lease_ms: i64,
    ) -> Result<Vec<bool>, BoxError> {
        let names: Vec<&str> = leases.iter().map(|(name, _)| *name).collect();
        let holders: Vec<Token<'_>> = leases.iter().map(|(_, holder)| Token(holder)).collect();
        let rows = self
            .rows(
                &self.inner.sql.renew_many,
                &[
                    (&names, Type::TEXT_ARRAY),
                    (&holders, Type::TEXT_ARRAY),
                    (&lease_ms, Type::INT8),
                ],
            )
            .await?;
        let mut renewed = std::collections::HashSet::with_capacity(rows.len());
        for row in &rows {
            let name: &str = row.try_get(0)?;
            let holder: &str = row.try_get(1)?;
            renewed.insert((name, holder));
        }
        Ok(leases.iter().map(|lease| renewed.contains(lease)).collect())
    }

    async fn verify(&self, name: &str, holder: &str) -> Result<Option<u64>, BoxError> {
        let holder = Token(holder);
        let row = self
            .row(
                &self.inner.sql.verify,
                &[(&name, Type::TEXT), (&holder, Type::TEXT)],
            )
            .await?;
        row.map(|row| term(row.try_get(0)?)).transpose()
    }

    async fn release(&self, name: &str, holder: &str) -> Result<bool, BoxError> {
        let holder = Token(holder);
        let released = self
            .affected(
                &self.inner.sql.release,
                &[(&name, Type::TEXT), (&holder, Type::TEXT)],
            )
            .await?;
        Ok(released == 1)
    }

    async fn claim_slot(
        &self,
        name: &str,
        holder: &str,
        instance: &str,
        slot_ms: i64,
        lease_ms: i64,
    ) -> Result<SlotClaim, BoxError> {
        let holder = Token(holder);
        let Some(row) = self
            .row(
                &self.inner.sql.claim_slot,
                &[
                    (&name, Type::TEXT),
                    (&holder, Type::TEXT),
                    (&instance, Type::TEXT),
                    (&slot_ms, Type::INT8),
                    (&lease_ms, Type::INT8),
                ],
            )
            .await?
        else {
            return Ok(SlotClaim::Refused);
        };
        let new_term = term(row.try_get(0)?)?;
        let old_slot: Option<i64> = row.try_get(1)?;
        let old_unfinished: Option<i64> = row.try_get(2)?;
        let old_rerun: Option<i64> = row.try_get(3)?;
        let superseded = match (old_slot, old_unfinished) {
            (Some(slot), Some(unfinished)) if slot != 0 && unfinished == slot => {
                Some(SupersededSlot {
                    slot_ms: slot,
                    rerun: old_rerun == Some(slot),
                })
            }
            _ => None,
        };
        Ok(SlotClaim::Claimed {
            term: new_term,
            superseded,
        })
    }

    async fn finish(
        &self,
        name: &str,
        holder: Option<&str>,
        slot_ms: i64,
        passed_ms: i64,
    ) -> Result<Finished, BoxError> {
        let holder = holder.map(Token);
        let row = self
            .row(
                &self.inner.sql.finish,
                &[
                    (&name, Type::TEXT),
                    (&holder, Type::TEXT),
                    (&slot_ms, Type::INT8),
                    (&passed_ms, Type::INT8),
                ],
            )
            .await?;
        Ok(match row {
            None => Finished::NotRecorded,
            Some(row) if row.try_get::<_, bool>(0)? => Finished::Released,
            Some(_) => Finished::RecordedWithoutLease,
        })
    }

    async fn find_unfinished(&self, names: &[&str]) -> Result<Vec<UnfinishedRow>, BoxError> {
        let rows = self
            .rows(
                &self.inner.sql.find_unfinished,
                &[(&names, Type::TEXT_ARRAY)],
            )
            .await?;
        rows.iter()
            .map(|row| {
                Ok(UnfinishedRow {
                    name: row.try_get(0)?,
                    term: term(row.try_get(1)?)?,
                    slot_ms: row.try_get(2)?,
                })
            })
            .collect()
    }

    async fn claim_rerun(
        &self,
        name: &str,
        term: u64,
        holder: &str,
        instance: &str,
        lease_ms: i64,
    ) -> Result<bool, BoxError> {
        // A term past i64::MAX cannot be in the table: nothing to claim.
        let Ok(term) = i64::try_from(term) else {
            return Ok(false);
        };
        let holder = Token(holder);
        let claimed = self
            .affected(
                &self.inner.sql.claim_rerun,
                &[
                    (&name, Type::TEXT),
                    (&term, Type::INT8),
                    (&holder, Type::TEXT),
                    (&instance, Type::TEXT),
                    (&lease_ms, Type::INT8),
                ],
            )
            .await?;
        Ok(claimed == 1)
    }

    async fn last_slot(&self, name: &str) -> Result<Option<i64>, BoxError> {
        let row = self
            .row(&self.inner.sql.last_slot, &[(&name, Type::TEXT)])
            .await?;
        Ok(row.map(|row| row.try_get(0)).transpose()?)
    }

    async fn force_release(&self, name: &str, term: u64) -> Result<bool, BoxError> {
        // A term past i64::MAX cannot be in the table: nothing to free.
        let Ok(term) = i64::try_from(term) else {
            return Ok(false);
        };
        let freed = self
            .affected(
                &self.inner.sql.force_release,
                &[(&name, Type::TEXT), (&term, Type::INT8)],
            )
            .await?;
        Ok(freed == 1)
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>, BoxError> {
        let row = self
            .row(&self.inner.sql.get, &[(&name, Type::TEXT)])
            .await?;
        row.as_ref().map(info).transpose()
    }

    async fn list(&self, prefix: &str, limit: u32) -> Result<Vec<LeaseInfo>, BoxError> {
        let rows = self
            .rows(
                &self.inner.sql.list,
                &[(&prefix, Type::TEXT), (&i64::from(limit), Type::INT8)],
            )
            .await?;
        let mut infos = Vec::with_capacity(rows.len());
        for row in &rows {
            let info = info(row)?;
            if !info.name.starts_with(prefix) {
                break;
            }
            infos.push(info);
        }
        Ok(infos)
    }

    async fn now_ms(&self) -> Result<i64, BoxError> {
        let row = self
            .row(sql::NOW, &[])
            .await?
            .ok_or("the clock read returned no row")?;
        Ok(row.try_get(0)?)
    }

    async fn migrate(&self) -> Result<(), BoxError> {
        schema::migrate(&self.inner.pool, &self.inner.sql, self.inner.statement_mode).await
    }

    fn classify(&self, error: &(dyn std::error::Error + 'static)) -> DbErrorKind {
        crate::error::classify(error)
    }

    fn guard_statement(&self) -> Option<lease_core::GuardStatement> {
        Some(Self::guard_statement(self))
    }
}

/// A row of `get` or `list`.
fn info(row: &tokio_postgres::Row) -> Result<LeaseInfo, BoxError> {
    Ok(LeaseInfo {
        name: row.try_get(0)?,
        instance: row.try_get(1)?,
        term: term(row.try_get(2)?)?,
        expires_at_ms: row.try_get(3)?,
        now_ms: row.try_get(4)?,
        slot_ms: row.try_get(5)?,
        unfinished_slot_ms: row.try_get(6)?,
        rerun_slot_ms: row.try_get(7)?,
    })
}

/// Splits what the driver cannot parse (`sslmode=verify-ca|verify-full`,
/// `sslrootcert`) off the URL, and lets the driver parse the rest.
fn parse_url(url: &str) -> Result<UrlConfig, PostgresError> {
    let invalid = |reason: String| PostgresError::InvalidUrl { reason };
    let scheme_end = url.find("://").map(|i| &url[..i]);
    match scheme_end {
        Some(scheme)
            if scheme.eq_ignore_ascii_case("postgres")
                || scheme.eq_ignore_ascii_case("postgresql") => {}
        _ => {
            return Err(invalid(
                "the URL must start with postgres:// or postgresql://".to_owned(),
            ));
        }
    }
    // The driver ends the user information at the first `@`: one left in
    // the password makes the rest of it part of the host, which errors
    // would then show. The host can hold no `@`.
    let after_credentials = url
        .split_once("://")
        .and_then(|(_, rest)| rest.split_once('@'));
    if let Some((_, after)) = after_credentials {
        let host = after.split(['/', '?']).next().unwrap_or_default();
        if host.contains('@') {
            return Err(invalid(
                "an '@' is left in the user information: percent-encode the password (%40)"
                    .to_owned(),
            ));
        }
    }
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut kept = Vec::new();
    let mut ssl_mode = SslMode::default();
    let mut root_cert = None;
    let mut statement_mode = None;
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match percent_decode(key).as_deref() {
            Some("sslmode") => {
                let value = percent_decode(value)
                    .ok_or_else(|| invalid("sslmode is not valid percent-encoded UTF-8".into()))?;
                ssl_mode = value.parse()?;
            }
            Some("sslrootcert") => {
                let value = percent_decode(value).ok_or_else(|| {
                    invalid("sslrootcert is not valid percent-encoded UTF-8".into())
                })?;
                root_cert = Some(PathBuf::from(value));
            }
            Some("statement_mode") => {
                statement_mode = Some(match percent_decode(value).as_deref() {
                    Some("prepared") => StatementMode::Prepared,
                    Some("unnamed") => StatementMode::Unnamed,
                    _ => {
                        return Err(invalid(
                            "statement_mode must be prepared or unnamed".to_owned(),
                        ));
                    }
                });
            }
            _ => kept.push(pair),
        }
    }
    let rest = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    let config = rest
        .parse::<tokio_postgres::Config>()
        // The driver's messages name an option or a value's kind, never
        // the URL (so never its password).
        .map_err(|e| invalid(e.to_string()))?;
    Ok(UrlConfig {
        config,
        ssl_mode,
        root_cert,
        statement_mode,
    })
}

/// Decodes `%XX` escapes; `None` for a malformed escape or invalid UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_statement_mode_comes_from_the_url_and_is_not_passed_on() {
        let url =
            parse_url("postgres://u@h:6432/d?statement_mode=unnamed&application_name=svc").unwrap();
        assert_eq!(url.statement_mode, Some(StatementMode::Unnamed));
        assert_eq!(url.config.get_application_name(), Some("svc"));
        let url = parse_url("postgres://u@h/d?statement_mode=prepared").unwrap();
        assert_eq!(url.statement_mode, Some(StatementMode::Prepared));
        assert_eq!(parse_url("postgres://u@h/d").unwrap().statement_mode, None);
        assert!(matches!(
            parse_url("postgres://u@h/d?statement_mode=simple"),
            Err(PostgresError::InvalidUrl { .. })
        ));
    }

    #[test]
    fn urls_of_both_schemes_parse_with_the_usual_parameters() {
        let url = parse_url(
            "postgresql://app:pw@db.example:6543/leases?sslmode=verify-full&application_name=svc&connect_timeout=3",
        )
        .unwrap();
        assert_eq!(url.ssl_mode, SslMode::VerifyFull);
        assert_eq!(url.config.get_user(), Some("app"));
        assert_eq!(url.config.get_dbname(), Some("leases"));
        assert_eq!(url.config.get_ports(), &[6543]);
        assert_eq!(url.config.get_application_name(), Some("svc"));
        assert_eq!(
            url.config.get_connect_timeout(),
            Some(&Duration::from_secs(3))
        );
        let url =
            parse_url("postgres://u@h/d?sslmode=verify-ca&sslrootcert=%2Fetc%2Fca.pem").unwrap();
        assert_eq!(url.ssl_mode, SslMode::VerifyCa);
        assert_eq!(url.root_cert, Some(PathBuf::from("/etc/ca.pem")));
        assert_eq!(parse_url("postgres://h").unwrap().ssl_mode, SslMode::Prefer);
    }

    #[test]
    fn other_urls_are_refused_without_quoting_them() {
        for url in [
            "mysql://u:hunter2@h/d",
            "host=h password=hunter2",
            "postgres://u:hunter2@h/d?sslmode=allow",
            "postgres://u:hunter2@h/d?frobnicate=1",
            "postgres://u:hunter2@h:notaport/d",
        ] {
            let err = parse_url(url).err().unwrap();
            let shown = format!("{err} {err:?}");
            assert!(!shown.contains("hunter2"), "{shown}");
        }
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%20b").as_deref(), Some("a b"));
        assert_eq!(percent_decode("%2"), None);
        assert_eq!(percent_decode("%zz"), None);
        assert_eq!(percent_decode("%C3%A9").as_deref(), Some("é"));
    }
}
