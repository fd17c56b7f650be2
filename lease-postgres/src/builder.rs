//! Building a [`PostgresStore`]: its URL, its builder, its pool.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use rustls::RootCertStore;
use tokio_postgres::NoTls;
use tokio_postgres::config::Host;
use tokio_postgres_rustls::MakeRustlsConnect;

use lease_core::Timings;

use crate::conn::StatementMode;
use crate::error::PostgresError;
use crate::store::PostgresStore;
use crate::tls::{self, CancelTls, SslMode};
use lease_sql::DEFAULT_TABLE;
use lease_sql::postgres::Statements;

/// The URL schemes this backend opens.
pub const SCHEMES: &[&str] = &["postgres", "postgresql"];

/// How long opening a connection may take (TCP, TLS and authentication),
/// unless the URL's `connect_timeout` or the builder says otherwise.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The most connections the store's own pool opens, unless the builder says
/// otherwise.
pub const DEFAULT_POOL_SIZE: usize = 8;

/// The `application_name` the store's connections show in
/// `pg_stat_activity`, unless the URL gives one.
const DEFAULT_APPLICATION_NAME: &str = "lease-postgres";

/// What `Debug` shows of a connection target: never the password.
#[derive(Clone)]
pub(crate) struct Target {
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
    pub(crate) fn servers(&self) -> String {
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
    timings: Timings,
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
            .field("timings", &self.timings)
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
            statement_timeout: Some(Timings::default().statement_timeout()),
            timings: Timings::default(),
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

    /// The server-side bounds of the store's connections, from the timings
    /// of the [`Leases`](lease_core::Leases) that will use the store: the
    /// `statement_timeout` of every connection is the coordinator's
    /// [statement timeout](Timings::statement_timeout) (half its local
    /// deadline), so a statement the coordinator gave up on does not keep
    /// running on the server, and a guarded transaction's `COMMIT` is
    /// awaited as long. Without it, the default timings apply (5 s). On a
    /// pool given with [`from_pool`](Self::from_pool) only the `COMMIT`
    /// bound applies; the pool's own connections keep their settings.
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
    /// use lease_postgres::PostgresStore;
    ///
    /// let timings = Timings::builder()
    ///     .lease(Duration::from_secs(6))
    ///     .renew(Duration::from_secs(1))
    ///     .deadline(Duration::from_secs(4))
    ///     .grace(Duration::from_secs(2))
    ///     .build()?;
    /// let builder = PostgresStore::builder("postgres://app@db.internal/app")?
    ///     .with_timings(&timings); // statement_timeout = 2 s
    /// // let leases = lease_core::Leases::new(builder.connect().await?); // takes them
    /// # drop(builder);
    /// # Ok(()) }
    /// ```
    pub fn with_timings(mut self, timings: &Timings) -> Self {
        self.timings = *timings;
        self.statement_timeout = Some(timings.statement_timeout());
        self
    }

    /// The server-side bound on every statement of the pool's connections
    /// (default: the [timings](Self::with_timings)' statement timeout, 5 s
    /// by default; `None` turns it off), set as `statement_timeout` when
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
    /// [`LeaseStore::migrate`](lease_core::LeaseStore::migrate)).
    ///
    /// # Errors
    ///
    /// [`PostgresError::InvalidTable`] for a table name that is not a plain
    /// identifier; [`PostgresError::RootCertificates`] when the URL's
    /// `sslrootcert` cannot be read; [`PostgresError::Tls`] or
    /// [`PostgresError::Pool`] when the TLS configuration or the pool cannot
    /// be built.
    pub fn build(self) -> Result<PostgresStore, PostgresError> {
        let sql = Statements::new(table(&self.table)?);
        let url = match self.source {
            Source::Pool(pool) => {
                return Ok(PostgresStore::assemble(
                    pool,
                    sql,
                    None,
                    self.timings,
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
        let _ = config.ssl_mode(mode.driver_mode());
        let connect_timeout = self
            .connect_timeout
            .or_else(|| config.get_connect_timeout().copied())
            .unwrap_or(DEFAULT_CONNECT_TIMEOUT);
        let _ = config.connect_timeout(connect_timeout);
        if let Some(timeout) = self.statement_timeout {
            let setting = format!("-c statement_timeout={}", timeout.as_millis().max(1));
            let options = match config.get_options() {
                Some(existing) if !existing.trim().is_empty() => format!("{existing} {setting}"),
                _ => setting,
            };
            let _ = config.options(options);
        }
        if config.get_application_name().is_none() {
            let _ = config.application_name(DEFAULT_APPLICATION_NAME);
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
            .wait_timeout(Some(self.timings.statement_timeout()))
            .build()
            .map_err(PostgresError::Pool)?;
        Ok(PostgresStore::assemble(
            pool,
            sql,
            self.statement_timeout,
            self.timings,
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
        let (server, setting) = match store.inner.target.as_ref() {
            Some(target) => (target.servers(), "connect_timeout"),
            None => (
                "the given pool's server".to_owned(),
                "the pool's create timeout",
            ),
        };
        let pool = &store.inner.pool;
        drop(pool.get().await.map_err(|error| {
            crate::error::connect_error(server, error, pool.timeouts(), setting)
        })?);
        crate::replication::warn_once(&store).await;
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
        let sql = Statements::new(lease_sql::postgres::default_table());
        Self::assemble(
            pool,
            sql,
            None,
            Timings::default(),
            None,
            CancelTls::Unknown,
            StatementMode::default(),
        )
    }
}

/// Splits what the driver cannot parse (`sslmode=verify-ca|verify-full`,
/// `sslrootcert`) off the URL, and lets the driver parse the rest.
/// Validates `name` as the lease table.
fn table(name: &str) -> Result<lease_core::TableName, PostgresError> {
    lease_sql::postgres::table(name).map_err(|e| PostgresError::InvalidTable {
        table: e.name,
        reason: e.reason,
    })
}

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
        .map_err(|e| invalid(driver_reason(&e)))?;
    Ok(UrlConfig {
        config,
        ssl_mode,
        root_cert,
        statement_mode,
    })
}

/// Why the driver refused a URL, in words a person can act on: its own
/// message ("invalid connection string") says nothing of which part; its
/// source names the option (`unknown option `x``).
fn driver_reason(e: &tokio_postgres::Error) -> String {
    match std::error::Error::source(e).map(ToString::to_string) {
        Some(option) if option == "invalid value for option `port`" => {
            "invalid port in the URL (a number from 1 to 65535 after the host, as in db:5432)"
                .to_owned()
        }
        Some(option) => option,
        None => e.to_string(),
    }
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
