//! A holder that loses the database steps down at its local deadline, well
//! before MySQL or MariaDB frees its name: shown through an in-process TCP
//! proxy that stops forwarding bytes (connections stay open, statements hang,
//! as across a network partition). The holder's store connects with
//! `prefer_socket=false`: mysql_async would otherwise switch to the server's
//! UNIX socket and bypass the proxy. The scenarios are
//! [`lease_conformance::network`]'s, a holder frozen inside a guarded
//! transaction among them; this file only builds the stores.
//!
//! The margin, how long before the database would let anyone else claim the
//! name the holder's token ended, is read by the database's clock on a direct
//! connection, and printed (`cargo test -- --nocapture` shows it).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] functions fail loudly"
)]

/// A table of this test's own; the `lmc_` prefix lets the conformance
/// suite's sweep drop it should this test die before dropping it.
fn unique_table() -> String {
    format!("{}_stepdown", lease_testkit::unique("lmc_"))
}

use lease_conformance::network;
use lease_core::BoxError;
use lease_mysql::mysql_async::prelude::Queryable;
use lease_mysql::{MySqlError, MySqlStore, MySqlStoreBuilder};

/// A store connected to the server, one connected through a proxy (without
/// the UNIX socket), both on one fresh table.
type Stores = network::Pair<MySqlStore>;

/// The stores, the proxied pool keeping `min` idle connections (with none,
/// mysql_async closes each connection as it comes back, and every statement
/// connects anew), and its builder passed through `configure`.
async fn connect_with(
    url: &str,
    min: usize,
    configure: impl FnOnce(MySqlStoreBuilder) -> MySqlStoreBuilder,
) -> Stores {
    let table = unique_table();
    // Both stores' server-side bounds from the scenarios' timings, which
    // their coordinators use.
    let direct = MySqlStore::builder(url)
        .unwrap()
        .with_table(&table)
        .with_timings(&network::timings())
        .with_pool_constraints(0, 4)
        .connect()
        .await
        .expect("connect to LEASE_TEST_MYSQL_URL");
    let (proxy, proxied_url) = network::proxy_for_url(url, 3306).await.unwrap();
    let proxied = configure(
        MySqlStore::builder(&proxied_url)
            .unwrap()
            .with_timings(&network::timings()),
    )
    .with_table(&table)
    .with_pool_constraints(min, 2)
    .with_prefer_socket(false)
    .connect()
    .await
    .expect("connect through the proxy");
    network::Pair::new(direct, proxied, proxy, table, |direct, table| async move {
        let mut conn = direct.pool().get_conn().await.unwrap();
        conn.query_drop(format!("DROP TABLE IF EXISTS `{table}`"))
            .await
            .unwrap();
    })
    .with_guarded(|store, ctx, work| async move {
        store
            .transaction(&ctx, move |_tx| {
                Box::pin(async move {
                    work.await;
                    Ok::<(), MySqlError>(())
                })
            })
            .await
            .map_err(BoxError::from)
    })
}

/// The stores for one network scenario. For the late renewals and the
/// frozen guarded transaction, the proxied pool keeps its connections, as a
/// production pool does (mysql_async's default keeps 10): a renewal sent on
/// a new connection would stall in the handshake, before its statement
/// left. The frozen guarded transaction (issue 16, item 7: its shared lock
/// on the lease row failed every claim after the lock-wait bound for as long
/// as it stayed frozen) is ended by MariaDB at `idle_transaction_timeout`,
/// which the scenarios' timings set to their local deadline (1.5 s, so
/// 2 s): a rival then claims the name once the lease has expired.
async fn connect(url: &str, scenario: network::Scenario) -> Stores {
    match scenario {
        network::Scenario::LateRenewals | network::Scenario::FrozenTransaction => {
            connect_with(url, 2, |builder| builder).await
        }
        _ => connect_with(url, 0, |builder| builder).await,
    }
}

lease_conformance::network_tests!(
    backend: "MySQL/MariaDB",
    url: "LEASE_TEST_MYSQL_URL",
    connect: connect,
);

#[test]
fn split_server_rewrites_only_the_host_and_port() {
    let via: std::net::SocketAddr = "127.0.0.1:40000".parse().unwrap();
    let url = "mysql://root@127.0.0.1:3306/test";
    assert_eq!(
        network::server_of(url, 3306).as_deref(),
        Some("127.0.0.1:3306")
    );
    assert_eq!(
        network::url_via(url, via).as_deref(),
        Some("mysql://root@127.0.0.1:40000/test")
    );
    let url = "mariadb://u:p@db/x?prefer_socket=false";
    assert_eq!(network::server_of(url, 3306).as_deref(), Some("db:3306"));
    assert_eq!(
        network::url_via(url, via).as_deref(),
        Some("mariadb://u:p@127.0.0.1:40000/x?prefer_socket=false")
    );
}
