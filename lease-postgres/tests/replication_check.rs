//! When the store checks the server's replication (issue 23, item 10):
//! at `connect`, or, for a store that did not connect, at its first
//! `migrate`. Read from its log events, in a test binary of its own: a
//! test of another thread that hits the same event first would leave it
//! cached as uninteresting to this test's subscriber.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] functions fail loudly"
)]

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use lease_postgres::{PostgresStore, PostgresStoreBuilder};

/// What the store logs, formatted, into a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// How many times the store checked the replication (whether or not
    /// the check could read it in time).
    fn checks(&self) -> usize {
        let text = self.text();
        text.matches("PostgreSQL replication checked").count()
            + text.matches("PostgreSQL replication not checked").count()
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// Issue 23, item 10: a store that never connected (`build()`, or
/// `from_pool`) checks the replication at its first `migrate`, once; a
/// store that connected checked it then, and not again.
#[tokio::test]
async fn a_store_that_did_not_connect_checks_the_replication_at_its_first_migrate() {
    let Some(url) = common::url() else { return };
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(move || writer.clone())
        .finish();
    // The test's runtime is on this thread: every event of the test is seen.
    lease_testkit::logs::every_callsite_interesting();
    let _default = tracing::subscriber::set_default(subscriber);

    let connected = common::store_on_new_table(&url).await;
    assert_eq!(
        captured.checks(),
        1,
        "connect checks the replication: {}",
        captured.text()
    );
    connected.migrate().await.unwrap();
    assert_eq!(captured.checks(), 1, "and migrate does not check it again");

    let built = PostgresStore::builder(&url)
        .unwrap()
        .with_table(connected.table())
        .build()
        .unwrap();
    assert_eq!(captured.checks(), 1, "build() opens no connection");
    built.migrate().await.unwrap();
    assert_eq!(captured.checks(), 2, "the first migrate of a built store");
    built.clone().migrate().await.unwrap();
    assert_eq!(captured.checks(), 2, "once per store, clones included");

    let pooled = PostgresStoreBuilder::from_pool(connected.pool().clone())
        .with_table(connected.table())
        .build()
        .unwrap();
    pooled.migrate().await.unwrap();
    assert_eq!(
        captured.checks(),
        3,
        "the first migrate of a store on a pool"
    );
    common::drop_table(&connected).await;
}
