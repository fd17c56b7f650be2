//! A holder that loses the database steps down at its local deadline, well
//! before PostgreSQL frees its name: shown through an in-process TCP proxy
//! that stops forwarding bytes (connections stay open, statements hang, as
//! across a network partition).
//!
//! The margin, how long before the database would let anyone else claim the
//! name the holder's token ended, is read by the database's clock on a direct
//! connection, and printed (`cargo test -- --nocapture` shows it).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] functions fail loudly"
)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lease_conformance::proxy::Proxy;
use lease_core::{CancellationToken, EndCause, Leases, LostCause, Timings};
use lease_postgres::PostgresStore;
use tokio::time::{Instant, sleep, timeout};

/// Lease 4 s, renew every 200 ms, local deadline 1.5 s: a required margin of
/// 2.25 s against the 2.5 s the protocol gives, 250 ms of slack for the
/// measurement itself on a loaded machine.
fn timings() -> Timings {
    Timings::builder()
        .lease(Duration::from_millis(4_000))
        .renew(Duration::from_millis(200))
        .deadline(Duration::from_millis(1_500))
        .grace(Duration::from_millis(500))
        .build()
        .unwrap()
}

/// A table of this test's own; the `lpt_<secs>_` prefix lets the other
/// tests' sweep drop it should this test die before dropping it.
fn unique_table() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    format!("lpt_{}_{}_{n}_stepdown", now.as_secs(), std::process::id())
}

/// The `host:port` of `url`'s server, and `url` pointing at `via` instead.
fn split_server(url: &str, via: Option<std::net::SocketAddr>) -> (String, String) {
    let (scheme, rest) = url.split_once("://").expect("a URL with a scheme");
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((user, hp)) => (format!("{user}@"), hp),
        None => (String::new(), authority),
    };
    let server = if hostport.contains(':') {
        hostport.to_owned()
    } else {
        format!("{hostport}:5432")
    };
    let rewritten = match via {
        Some(addr) => format!("{scheme}://{userinfo}{addr}{tail}"),
        None => url.to_owned(),
    };
    (server, rewritten)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_steps_down_well_before_the_database_frees_the_name() {
    let Some(url) = lease_conformance::env_url("LEASE_TEST_POSTGRES_URL") else {
        return;
    };
    let timings = timings();
    let table = unique_table();
    let direct = PostgresStore::builder(&url)
        .unwrap()
        .with_table(&table)
        .connect()
        .await
        .expect("connect to LEASE_TEST_POSTGRES_URL");
    let rival = Leases::new(direct.clone()).with_instance("stepdown-rival");
    rival.migrate().await.unwrap();

    let (server, _) = split_server(&url, None);
    let proxy = Proxy::start(server.as_str()).await.unwrap();
    let (_, proxied_url) = split_server(&url, Some(proxy.addr()));
    let proxied = PostgresStore::builder(&proxied_url)
        .unwrap()
        .with_table(&table)
        .with_pool_size(2)
        .connect()
        .await
        .expect("connect through the proxy");
    let leases = Leases::new(proxied)
        .with_timings(timings)
        .with_instance("stepdown-holder");

    let name = "leader:stepdown";
    let handle = leases
        .claim(name)
        .await
        .unwrap()
        .expect("a fresh table's name is free");
    let holder = handle.hold(&CancellationToken::new());
    // Renew through the proxy for longer than lease - deadline, so that the
    // name is held by the renewals, not by the claim.
    sleep(timings.lease() - timings.deadline() + Duration::from_millis(500)).await;
    let ctx = holder.context().clone();
    assert!(
        !ctx.is_cancelled(),
        "the lease ended while the proxy forwarded: {:?}",
        ctx.cause()
    );

    proxy.pause();
    let paused = Instant::now();
    timeout(timings.deadline() * 2, ctx.cancelled())
        .await
        .expect("the holder must step down within its local deadline of losing the database");
    let stepped_down = paused.elapsed();
    assert_eq!(
        ctx.cause(),
        Some(EndCause::Lost(LostCause::DeadlineExceeded))
    );
    assert!(handle.lost());

    // By the database's clock, on a direct connection: how long the name
    // stays held after the holder stepped down.
    let client = direct.pool().get().await.unwrap();
    let row = client
        .query_one(
            &format!(
                "SELECT expires_at_ms - (extract(epoch FROM clock_timestamp()) * 1000)::bigint \
                 FROM \"{table}\" WHERE name = $1"
            ),
            &[&name],
        )
        .await
        .unwrap();
    let margin_ms: i64 = row.get(0);
    let required = (timings.lease() - timings.deadline()).mul_f64(0.9);
    eprintln!(
        "PostgreSQL step-down: the holder's token ended {stepped_down:?} after the proxy paused, \
         {margin_ms} ms before the database frees the name (required: at least {required:?}; \
         lease {:?}, local deadline {:?})",
        timings.lease(),
        timings.deadline()
    );
    assert!(
        u128::try_from(margin_ms).is_ok_and(|m| m >= required.as_millis()),
        "the holder stepped down only {margin_ms} ms before the database freed the name; \
         at least {required:?} is required"
    );
    assert!(
        rival.claim(name).await.unwrap().is_none(),
        "the database must still hold the name for the old holder"
    );

    // And the database does free it, at its expiry.
    let freed = timeout(timings.lease() * 2, async {
        loop {
            if let Some(successor) = rival.claim(name).await.unwrap() {
                return successor;
            }
            sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the name must be free once the lease ran out");
    assert_eq!(freed.term(), 2);

    holder.stop().await;
    proxy.shutdown().await;
    client
        .batch_execute(&format!("DROP TABLE IF EXISTS \"{table}\""))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_cut_under_the_holder_cost_it_nothing() {
    let Some(url) = lease_conformance::env_url("LEASE_TEST_POSTGRES_URL") else {
        return;
    };
    let timings = timings();
    let table = unique_table();
    let direct = PostgresStore::builder(&url)
        .unwrap()
        .with_table(&table)
        .connect()
        .await
        .expect("connect to LEASE_TEST_POSTGRES_URL");
    let rival = Leases::new(direct.clone()).with_instance("cut-rival");
    rival.migrate().await.unwrap();

    let (server, _) = split_server(&url, None);
    let proxy = Proxy::start(server.as_str()).await.unwrap();
    let (_, proxied_url) = split_server(&url, Some(proxy.addr()));
    let proxied = PostgresStore::builder(&proxied_url)
        .unwrap()
        .with_table(&table)
        .with_pool_size(2)
        .connect()
        .await
        .expect("connect through the proxy");
    let leases = Leases::new(proxied)
        .with_timings(timings)
        .with_instance("cut-holder");

    let name = "leader:cut";
    let handle = leases
        .claim(name)
        .await
        .unwrap()
        .expect("a fresh table's name is free");
    let holder = handle.hold(&CancellationToken::new());
    // Every connection dropped, three times over a local deadline: the
    // renewals that fail are tried again, on new connections.
    let before = proxy.accepted();
    for _ in 0..3 {
        sleep(timings.deadline() / 3).await;
        proxy.cut();
    }
    sleep(timings.deadline()).await;
    assert!(
        proxy.accepted() >= before + 3,
        "the holder's store should have reconnected after each cut ({} connections before, \
         {} after)",
        before,
        proxy.accepted()
    );
    let ctx = holder.context();
    assert!(
        !ctx.is_cancelled(),
        "the holder lost its lease to connections cut under it: {:?}",
        ctx.cause()
    );
    assert!(!handle.lost());
    assert!(
        rival.claim(name).await.unwrap().is_none(),
        "the name must still be held"
    );
    holder.stop().await;
    handle.release().await.unwrap();
    proxy.shutdown().await;
    let client = direct.pool().get().await.unwrap();
    client
        .batch_execute(&format!("DROP TABLE IF EXISTS \"{table}\""))
        .await
        .unwrap();
}

#[test]
fn split_server_rewrites_only_the_host_and_port() {
    let via: std::net::SocketAddr = "127.0.0.1:40000".parse().unwrap();
    assert_eq!(
        split_server(
            "postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
            Some(via)
        ),
        (
            "127.0.0.1:5432".to_owned(),
            "postgres://postgres@127.0.0.1:40000/test?sslmode=disable".to_owned()
        )
    );
    assert_eq!(
        split_server("postgresql://u:p@db/x", Some(via)),
        (
            "db:5432".to_owned(),
            "postgresql://u:p@127.0.0.1:40000/x".to_owned()
        )
    );
}
