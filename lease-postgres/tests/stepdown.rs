//! A holder that loses the database steps down at its local deadline, well
//! before PostgreSQL frees its name, and a holder frozen inside a guarded
//! transaction does not keep it (issue 16, item 7: its `FOR KEY SHARE` row
//! lock held every claim back; the server now ends a session idle in a
//! transaction for the local deadline): shown through an in-process TCP
//! proxy that stops forwarding bytes (connections stay open, statements
//! hang, as across a network partition). The scenarios are
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

mod common;

use common::unique_table;
use lease_conformance::network;
use lease_core::BoxError;
use lease_postgres::PostgresStore;

/// A store connected to the server and one connected through a proxy,
/// both on one fresh table.
type Stores = network::Pair<PostgresStore>;

/// The stores for one network scenario (the same for each on PostgreSQL).
async fn connect(url: &str, _scenario: network::Scenario) -> Stores {
    let table = unique_table();
    // Both stores' server-side bounds from the scenarios' timings, which
    // their coordinators use.
    let direct = PostgresStore::builder(url)
        .unwrap()
        .with_table(&table)
        .with_timings(&network::timings())
        .connect()
        .await
        .expect("connect to LEASE_TEST_POSTGRES_URL");
    let (proxy, proxied_url) = network::proxy_for_url(url, 5432).await.unwrap();
    let proxied = PostgresStore::builder(&proxied_url)
        .unwrap()
        .with_table(&table)
        .with_timings(&network::timings())
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
    .with_guarded(|store, ctx, work| async move {
        store
            .transaction(&ctx, move |_tx| {
                Box::pin(async move {
                    work.await;
                    Ok::<(), std::io::Error>(())
                })
            })
            .await
            .map_err(BoxError::from)
    })
}

lease_conformance::network_tests!(
    backend: "PostgreSQL",
    url: "LEASE_TEST_POSTGRES_URL",
    connect: connect,
);

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
