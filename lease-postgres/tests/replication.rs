//! `PostgresStore::replication` on the test server: it reads, and a server
//! with no standby (the local one) gives no concern. The failover trials
//! (`failover.sh`) check it against real standbys, asynchronous and
//! synchronous.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] functions fail loudly"
)]

use lease_postgres::PostgresStore;

#[tokio::test]
async fn the_replication_check_reads_the_server() {
    let Some(url) = lease_conformance::env_url("LEASE_TEST_POSTGRES_URL") else {
        return;
    };
    let store = PostgresStore::connect(&url).await.expect("connect");
    let report = store.replication().await.expect("the check runs");
    assert!(!report.in_recovery, "{report}");
    assert!(!report.synchronous_commit.is_empty(), "{report}");
    if report.sync_standbys + report.async_standbys + report.unknown_standbys == 0 {
        assert!(report.concerns().is_empty(), "{:?}", report.concerns());
    }
}
