//! Shared by the integration tests: the server URL policy and fresh tables.
#![allow(
    dead_code,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs
)]

use lease_mysql::MySqlStore;
use lease_mysql::mysql_async::prelude::Queryable;
use lease_mysql::mysql_async::{Opts, Pool};

/// The test server's URL from `LEASE_TEST_MYSQL_URL`, under the suite's
/// policy: unset, a failure when `CI` is `true`, otherwise a skip note on
/// stderr and `None`.
pub fn url() -> Option<String> {
    lease_conformance::env_url("LEASE_TEST_MYSQL_URL")
}

#[allow(
    unused_imports,
    reason = "each test binary uses its own part of the helpers"
)]
pub use lease_testkit::url::with_param;

/// A store on `table`, dropped first and migrated.
pub async fn fresh(url: &str, table: &str) -> MySqlStore {
    let store = MySqlStore::builder(url)
        .unwrap()
        .with_table(table)
        .connect()
        .await
        .expect("connect to the test server");
    drop_table(&store, table).await;
    store.migrate().await.expect("migrate");
    store
}

/// Drops `table` if it exists.
pub async fn drop_table(store: &MySqlStore, table: &str) {
    let mut conn = store.pool().get_conn().await.expect("connection");
    conn.query_drop(format!("DROP TABLE IF EXISTS `{table}`"))
        .await
        .expect("drop table");
}

/// A proxy in front of the server that counts the commands the client
/// sends (MySQL packets with sequence id 0), by command byte.
pub struct Proxy {
    proxy: lease_conformance::proxy::Proxy,
    commands: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}

impl Proxy {
    /// Starts a proxy to `upstream`.
    pub async fn start(upstream: String) -> Proxy {
        let commands = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = commands.clone();
        let proxy = lease_conformance::proxy::Proxy::start_observed(upstream, move || {
            let seen = seen.clone();
            let mut pending: Vec<u8> = Vec::new();
            move |bytes: &[u8]| {
                pending.extend_from_slice(bytes);
                while pending.len() >= 4 {
                    let len = usize::from(pending[0])
                        | usize::from(pending[1]) << 8
                        | usize::from(pending[2]) << 16;
                    if pending.len() < 4 + len {
                        break;
                    }
                    if pending[3] == 0 && len > 0 {
                        seen.lock().unwrap().push(pending[4]);
                    }
                    let _ = pending.drain(..4 + len);
                }
            }
        })
        .await
        .unwrap();
        Proxy { proxy, commands }
    }

    /// Where clients connect.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.proxy.addr()
    }

    /// Forgets the commands counted so far.
    pub fn reset(&self) {
        self.commands.lock().unwrap().clear();
    }

    /// The commands since the last reset that wait for an answer (all but
    /// `COM_STMT_CLOSE` and `COM_QUIT`): the round trips.
    pub fn round_trips(&self) -> usize {
        self.commands
            .lock()
            .unwrap()
            .iter()
            .filter(|&&c| c != 0x19 && c != 0x01)
            .count()
    }

    /// The command bytes since the last reset.
    pub fn commands(&self) -> Vec<u8> {
        self.commands.lock().unwrap().clone()
    }
}

/// `host:port` of the server `url` names.
pub fn upstream(url: &str) -> String {
    lease_conformance::network::server_of(url, 3306).unwrap()
}

/// A store through `proxy`, on one connection, built by `connect` (with
/// `prefer_socket=false`, or the driver would move to the server's UNIX
/// socket and bypass the proxy, unless `prefer_socket` is asked for).
pub async fn proxied_store(
    url: &str,
    proxy: &Proxy,
    table: &str,
    prefer_socket: bool,
) -> MySqlStore {
    let proxied = with_param(
        &lease_conformance::network::url_via(url, proxy.addr()).unwrap(),
        &format!("prefer_socket={prefer_socket}"),
    );
    MySqlStore::builder(&proxied)
        .unwrap()
        .with_table(table)
        .with_pool_constraints(1, 1)
        .connect()
        .await
        .unwrap()
}

/// A name of this test's own; the `lmc_` prefix lets the conformance
/// suite's sweep drop a table should this test die before dropping it.
pub fn unique(kind: &str) -> String {
    format!("{}_{kind}", lease_testkit::unique("lmc_"))
}

/// A pool of the test's own, as the server's administrator (`url`'s user).
pub fn admin(url: &str) -> Pool {
    Pool::new(Opts::from_url(&url.replacen("mariadb://", "mysql://", 1)).unwrap())
}

pub async fn exec(pool: &Pool, statement: &str) {
    let mut conn = pool.get_conn().await.unwrap();
    conn.query_drop(statement)
        .await
        .unwrap_or_else(|e| panic!("{statement}: {e}"));
}

/// `url` with another user and password, over TCP.
pub fn url_as(url: &str, user: &str, password: &str) -> String {
    with_param(
        &lease_testkit::url::url_as(url, user, password),
        "prefer_socket=false",
    )
}

/// A user created for the test, with only `privileges` on `table`; dropped
/// by [`Restricted::drop_user`].
pub struct Restricted {
    pub user: String,
    pub url: String,
}

impl Restricted {
    pub async fn create(url: &str, admin: &Pool, table: &str, privileges: &str) -> Restricted {
        let user = unique("u");
        let password = "lease-test-pw";
        for host in ["%", "localhost"] {
            exec(
                admin,
                &format!("CREATE USER '{user}'@'{host}' IDENTIFIED BY '{password}'"),
            )
            .await;
            exec(
                admin,
                &format!("GRANT {privileges} ON `{table}` TO '{user}'@'{host}'"),
            )
            .await;
        }
        Restricted {
            url: url_as(url, &user, password),
            user,
        }
    }

    pub async fn drop_user(self, admin: &Pool) {
        for host in ["%", "localhost"] {
            exec(
                admin,
                &format!("DROP USER IF EXISTS '{}'@'{host}'", self.user),
            )
            .await;
        }
    }
}
