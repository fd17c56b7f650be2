//! A holder that loses the database steps down at its local deadline, well
//! before PostgreSQL frees its name: shown through an in-process TCP proxy
//! that stops forwarding bytes (connections stay open, statements hang, as
//! across a network partition). The scenarios are
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

mod common;

use common::unique_table;
use lease_conformance::network;
use lease_core::{CancellationToken, Leases};
use lease_postgres::PostgresStore;
use tokio::time::{Instant, sleep, timeout};

/// A store connected to the server and one connected through a proxy,
/// both on one fresh table.
type Stores = network::Pair<PostgresStore>;

/// The stores for one network scenario (the same for each on PostgreSQL).
async fn connect(url: &str, _scenario: network::Scenario) -> Stores {
    let table = unique_table();
    let direct = PostgresStore::builder(url)
        .unwrap()
        .with_table(&table)
        .connect()
        .await
        .expect("connect to LEASE_TEST_POSTGRES_URL");
    let (proxy, proxied_url) = network::proxy_for_url(url, 5432).await.unwrap();
    let proxied = PostgresStore::builder(&proxied_url)
        .unwrap()
        .with_table(&table)
        .with_pool_size(2)
        .connect()
        .await
        .expect("connect through the proxy");
    network::Pair::new(direct, proxied, proxy, table, |direct, table| async move {
        let client = direct.pool().get().await.unwrap();
        client
            .batch_execute(&format!("DROP TABLE IF EXISTS \"{table}\""))
            .await
            .unwrap();
    })
}

lease_conformance::network_tests!(
    backend: "PostgreSQL",
    url: "LEASE_TEST_POSTGRES_URL",
    connect: connect,
);

/// Issue 16, item 7: a holder frozen inside a guarded transaction (here cut
/// off by the paused proxy: nothing of it reaches the server) kept the row
/// locked `FOR KEY SHARE`, so every claim of the name waited for as long as
/// it stayed frozen. The server now ends its session once it has been idle
/// in the transaction for the local deadline, and a rival claims the name
/// once the lease has expired, the holder still frozen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_frozen_in_a_guarded_transaction_does_not_keep_the_name() {
    let Some(url) = lease_conformance::env_url("LEASE_TEST_POSTGRES_URL") else {
        return;
    };
    let stores = connect(&url, network::Scenario::StepDown).await;
    let timings = network::timings();
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
                    std::future::pending::<Result<(), std::io::Error>>().await
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
    eprintln!("PostgreSQL frozen guarded transaction: a rival claimed {waited:?} after the freeze");
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
    let url = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable";
    assert_eq!(
        network::server_of(url, 5432).as_deref(),
        Some("127.0.0.1:5432")
    );
    assert_eq!(
        network::url_via(url, via).as_deref(),
        Some("postgres://postgres@127.0.0.1:40000/test?sslmode=disable")
    );
    let url = "postgresql://u:p@db/x";
    assert_eq!(network::server_of(url, 5432).as_deref(), Some("db:5432"));
    assert_eq!(
        network::url_via(url, via).as_deref(),
        Some("postgresql://u:p@127.0.0.1:40000/x")
    );
}
