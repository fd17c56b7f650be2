//! A holder that loses the database steps down at its local deadline, well
//! before MySQL or MariaDB frees its name: shown through an in-process TCP
//! proxy that stops forwarding bytes (connections stay open, statements hang,
//! as across a network partition). The holder's store connects with
//! `prefer_socket=false`: mysql_async would otherwise switch to the server's
//! UNIX socket and bypass the proxy. The scenarios are
//! [`lease_conformance::network`]'s; this file only builds the stores.
//!
//! The margin, how long before the database would let anyone else claim the
//! name the holder's token ended, is read by the database's clock on a direct
//! connection, and printed (`cargo test -- --nocapture` shows it).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] functions fail loudly"
)]

use std::time::Duration;

/// A table of this test's own; the `lmc_` prefix lets the conformance
/// suite's sweep drop it should this test die before dropping it.
fn unique_table() -> String {
    format!("{}_stepdown", lease_testkit::unique("lmc_"))
}

use lease_conformance::network;
use lease_core::{CancellationToken, Leases};
use lease_mysql::mysql_async::prelude::Queryable;
use lease_mysql::{MySqlError, MySqlStore, MySqlStoreBuilder};
use tokio::time::{Instant, sleep, timeout};

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
    let direct = MySqlStore::builder(url)
        .unwrap()
        .with_table(&table)
        .with_pool_constraints(0, 4)
        .connect()
        .await
        .expect("connect to LEASE_TEST_MYSQL_URL");
    let (proxy, proxied_url) = network::proxy_for_url(url, 3306).await.unwrap();
    let proxied = configure(MySqlStore::builder(&proxied_url).unwrap())
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
}

/// The stores for one network scenario. For the late renewals, the proxied
/// pool keeps its connections, as a production pool does (mysql_async's
/// default keeps 10): a renewal sent on a new connection would stall in the
/// handshake, before its statement left.
async fn connect(url: &str, scenario: network::Scenario) -> Stores {
    let min = match scenario {
        network::Scenario::LateRenewals => 2,
        _ => 0,
    };
    connect_with(url, min, |builder| builder).await
}

lease_conformance::network_tests!(
    backend: "MySQL/MariaDB",
    url: "LEASE_TEST_MYSQL_URL",
    connect: connect,
);

/// Issue 16, item 7: a holder frozen inside a guarded transaction (here cut
/// off by the paused proxy: nothing of it reaches the server) kept its
/// shared lock on the lease row, so every claim of the name failed after
/// the lock-wait bound for as long as it stayed frozen. With
/// `idle_transaction_timeout` at the local deadline (1.5 s, so 2 s), MariaDB
/// ends the frozen session, and a rival claims the name once the lease has
/// expired, the holder still frozen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_frozen_in_a_guarded_transaction_does_not_keep_the_name() {
    let Some(url) = lease_conformance::env_url("LEASE_TEST_MYSQL_URL") else {
        return;
    };
    let timings = network::timings();
    let stores = connect_with(&url, 2, |builder| {
        builder.with_idle_transaction_timeout(Some(timings.deadline()))
    })
    .await;
    let rival = Leases::new(stores.direct.clone())
        .with_timings(timings)
        .with_instance("frozen-rival")
        .unwrap();
    rival.migrate().await.unwrap();
    let name = format!("frozen:{}", stores.table);
    let handle = Leases::new(stores.proxied.clone())
        .with_timings(timings)
        .with_instance("frozen-holder")
        .unwrap()
        .claim(&name)
        .await
        .unwrap()
        .unwrap();
    let holder = handle.hold(&CancellationToken::new());
    let (inside, entered) = tokio::sync::oneshot::channel();
    let store = stores.proxied.clone();
    let ctx = holder.context().clone();
    let guarded = tokio::spawn(async move {
        store
            .transaction(&ctx, move |_tx| {
                Box::pin(async move {
                    let _ = inside.send(());
                    std::future::pending::<Result<(), MySqlError>>().await
                })
            })
            .await
    });
    entered.await.unwrap();
    stores.proxy.pause();
    let frozen = Instant::now();

    // A rival claims until it gets the name, as a replica would.
    let limit = timings.lease() * 3;
    let claimed = timeout(limit, async {
        loop {
            if let Ok(Some(successor)) = rival.claim(&name).await {
                return successor;
            }
            sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let waited = frozen.elapsed();
    stores.proxy.resume();
    let abandoned = guarded.await.unwrap();
    holder.stop().await;
    let Ok(successor) = claimed else {
        network::NetworkStores::close(stores).await;
        panic!(
            "no rival claimed the name within {limit:?} of the holder freezing inside its \
             guarded transaction (lease {:?}): the transaction's row lock held every claim \
             back for as long as the holder stayed frozen",
            timings.lease()
        );
    };
    eprintln!(
        "MySQL/MariaDB frozen guarded transaction: a rival claimed {waited:?} after the freeze"
    );
    assert!(
        abandoned.is_err(),
        "the frozen transaction cannot have committed"
    );
    assert_eq!(successor.term(), 2);
    successor.release().await.unwrap();
    network::NetworkStores::close(stores).await;
}

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
