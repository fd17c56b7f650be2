//! The same program, unchanged, on every configured database: only the URL
//! differs.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a panic is its failure report

mod common;

use dblease::{Leases, UtcMillis};

/// What a service does with leases, written once.
async fn scenario(leases: &Leases, tag: &str) {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let tag = format!("{tag}:{}:{nanos}", std::process::id());
    leases.migrate().await.unwrap();
    leases.available().await.unwrap();
    let name = format!("lock:by-url:{tag}");
    let lock = leases
        .claim(&name)
        .await
        .unwrap()
        .expect("a new name is free");
    assert_eq!(lock.term(), 1);
    assert!(
        leases.claim(&name).await.unwrap().is_none(),
        "a held name is refused"
    );
    lock.renew().await.unwrap();
    assert_eq!(lock.verify().await.unwrap(), 1);
    lock.release().await.unwrap();
    let next = leases
        .claim(&name)
        .await
        .unwrap()
        .expect("a released name is free");
    assert_eq!(next.term(), 2);
    next.release().await.unwrap();

    let job = format!("cron:by-url:{tag}");
    let now = leases.now().await.unwrap().as_millis();
    let slot = UtcMillis::from_millis(now - now % 1000 - 60_000);
    let round = leases
        .claim_instant(&job, slot)
        .await
        .unwrap()
        .expect("the first instant");
    round.finish(slot).await.unwrap();
    assert!(
        leases.claim_instant(&job, slot).await.unwrap().is_none(),
        "an instant runs once"
    );
    assert_eq!(leases.last_instant(&job).await.unwrap(), Some(slot));
}

#[tokio::test]
async fn sqlite_by_url() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("leases.db").display());
    scenario(&dblease::connect(&url).await.unwrap(), "sqlite").await;
    scenario(
        &dblease::connect("sqlite::memory:").await.unwrap(),
        "memory",
    )
    .await;
}

/// The scenario on a server, by each of its URL schemes, on a lease table
/// of the test's own (a server's `gst_leases` is left alone); `connect`
/// itself, the same URL on the default table, only reads.
#[cfg(any(feature = "postgres", feature = "mysql"))]
async fn on_server(url: &str, scheme: &str, other: &str) {
    dblease::connect(url)
        .await
        .unwrap()
        .available()
        .await
        .unwrap();
    let table = common::own_table(url);
    for url in [url.to_owned(), url.replacen(scheme, other, 1)] {
        let leases = common::leases_on(&url, &table.name, dblease::Timings::default()).await;
        scenario(&leases, &url[..url.find(':').unwrap()]).await;
    }
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres_by_url() {
    if let Some(url) = lease_conformance::env_url("LEASE_TEST_POSTGRES_URL") {
        on_server(&url, "postgres://", "postgresql://").await;
    }
}

#[cfg(feature = "mysql")]
#[tokio::test]
async fn mysql_by_url() {
    if let Some(url) = lease_conformance::env_url("LEASE_TEST_MYSQL_URL") {
        on_server(&url, "mysql://", "mariadb://").await;
    }
}

/// A connection error names the backend and the server tried, on one line,
/// in `Display` and in `Debug` (what a `main` returning it prints), and
/// never the password.
#[tokio::test]
async fn connection_errors_name_the_server_on_one_line_without_the_password() {
    let mut urls = vec![(
        "SQLite",
        "sqlite:///nonexistent-dir-for-lease-tests/sub/leases.db".to_owned(),
        "nonexistent-dir-for-lease-tests",
    )];
    if cfg!(feature = "postgres") {
        urls.push((
            "PostgreSQL",
            "postgres://app:s3cret-pw@127.0.0.1:1/db?connect_timeout=2".to_owned(),
            "127.0.0.1:1",
        ));
    }
    if cfg!(feature = "mysql") {
        urls.push((
            "MySQL",
            "mysql://app:s3cret-pw@127.0.0.1:1/db?prefer_socket=false&conn_ttl=1".to_owned(),
            "127.0.0.1:1",
        ));
    }
    for (backend, url, server) in urls {
        let err = match dblease::connect(&url).await {
            Ok(_) => panic!("{backend}: connecting to {server} succeeded"),
            Err(e) => e,
        };
        let shown = err.to_string();
        let debug = format!("{err:?}");
        for text in [&shown, &debug] {
            assert!(
                text.contains(backend),
                "{backend}: names the backend: {text}"
            );
            assert!(text.contains(server), "{backend}: names the server: {text}");
            assert!(!text.contains('\n'), "{backend}: one line: {text}");
            assert!(
                !text.contains("s3cret"),
                "{backend}: never the password: {text}"
            );
        }
        assert!(
            !debug.contains("DbError {"),
            "{backend}: no driver dump: {debug}"
        );
    }
}

/// Timings with a 4 s local deadline: statement timeout 2 s, lock wait 1 s.
#[cfg(any(feature = "postgres", feature = "mysql"))]
fn tight() -> dblease::Timings {
    dblease::Timings::builder()
        .lease(std::time::Duration::from_secs(6))
        .renew(std::time::Duration::from_secs(1))
        .deadline(std::time::Duration::from_secs(4))
        .grace(std::time::Duration::from_secs(2))
        .build()
        .unwrap()
}

/// `connect_with` gives the coordinator the timings, and the store the
/// server-side bounds derived from them: PostgreSQL's `statement_timeout`
/// follows the 4 s deadline (2 s), where `connect` keeps the default 5 s.
#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres_connect_with_derives_the_server_bounds() {
    let Some(url) = lease_conformance::env_url("LEASE_TEST_POSTGRES_URL") else {
        return;
    };
    async fn statement_timeout(backend: &dblease::Backend) -> String {
        let dblease::Backend::Postgres(store) = backend else {
            panic!("a postgres URL opened {}", backend.name());
        };
        let client = store.pool().get().await.unwrap();
        client
            .query_one("SHOW statement_timeout", &[])
            .await
            .unwrap()
            .get(0)
    }
    let timings = tight();
    let tightened = dblease::connect_backend_with(&url, &timings).await.unwrap();
    assert_eq!(statement_timeout(&tightened).await, "2s");
    let default = dblease::connect_backend(&url).await.unwrap();
    assert_eq!(statement_timeout(&default).await, "5s");
    let leases = dblease::connect_with(&url, timings).await.unwrap();
    assert_eq!(leases.timings(), &timings);
    // The same on a lease table of the test's own, where it writes.
    let table = common::own_table(&url);
    let own = common::backend_on(&url, &table.name, &timings).await;
    assert_eq!(statement_timeout(&own).await, "2s");
    scenario(&own.leases().with_timings(timings), "postgres-with").await;
}

/// The same on MariaDB: the sessions' lock wait is the timings' (1 s).
#[cfg(feature = "mysql")]
#[tokio::test]
async fn mysql_connect_with_derives_the_server_bounds() {
    use dblease::mysql::mysql_async::prelude::Queryable;
    let Some(url) = lease_conformance::env_url("LEASE_TEST_MYSQL_URL") else {
        return;
    };
    let backend = dblease::connect_backend_with(&url, &tight()).await.unwrap();
    let dblease::Backend::MySql(store) = &backend else {
        panic!("a mysql URL opened {}", backend.name());
    };
    let mut conn = store.pool().get_conn().await.unwrap();
    let lock_wait: u64 = conn
        .query_first("SELECT @@SESSION.innodb_lock_wait_timeout")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lock_wait, 1);
}
