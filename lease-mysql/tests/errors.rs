//! Each kind of database failure, as the store classifies it on the real
//! MariaDB: whether a retry can fix it is what `Error::is_retryable` says.
//! (A missing table is a conformance case.)

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] functions fail loudly"
)]

mod common;

use std::time::Duration;

use common::{Restricted, admin, exec, unique};
use lease_conformance::network::{server_of, url_via};
use lease_conformance::proxy::Proxy;
use lease_core::{DbErrorKind, Leases};
use lease_mysql::MySqlStore;
use lease_mysql::mysql_async::prelude::Queryable;

/// A user that may read the table but not write it: the claim is refused by
/// the server as a missing privilege (error 1142), which no retry can fix.
#[tokio::test]
async fn a_missing_privilege_is_a_permission_error_and_not_retryable() {
    let Some(url) = common::url() else { return };
    let table = unique("ro");
    let root = common::fresh(&url, &table).await;
    let admin = admin(&url);
    let restricted = Restricted::create(&url, &admin, &table, "SELECT").await;
    let outcome = async {
        let store = MySqlStore::builder(&restricted.url)
            .unwrap()
            .with_table(&table)
            .connect()
            .await
            .unwrap();
        Leases::new(store).claim("privs").await
    }
    .await;
    restricted.drop_user(&admin).await;
    common::drop_table(&root, &table).await;
    let err = outcome.expect_err("a read-only user claimed a lease");
    assert_eq!(err.db_kind(), Some(DbErrorKind::Permission), "{err}");
    assert!(!err.is_retryable(), "{err}");
}

/// A connection the network cut: a retry (on a new connection) can fix it.
#[tokio::test]
async fn a_cut_connection_is_a_connection_error_and_retryable() {
    let Some(url) = common::url() else { return };
    let table = unique("cut");
    let root = common::fresh(&url, &table).await;
    let proxy = Proxy::start(server_of(&url, 3306).unwrap()).await.unwrap();
    let via = common::with_param(&url_via(&url, proxy.addr()).unwrap(), "prefer_socket=false");
    let store = MySqlStore::builder(&via)
        .unwrap()
        .with_table(&table)
        .with_connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .unwrap();
    let leases = Leases::new(store);
    assert!(leases.claim("cut").await.unwrap().is_some());
    proxy.shutdown().await; // the connection is cut and nothing listens
    let err = leases
        .claim("cut-2")
        .await
        .expect_err("claimed with no server");
    common::drop_table(&root, &table).await;
    assert_eq!(err.db_kind(), Some(DbErrorKind::Connection), "{err}");
    assert!(err.is_retryable(), "{err}");
}

/// A statement that waits on a row lock past the lock wait timeout (or the
/// statement timeout) is refused by the server: a retry may well succeed.
#[tokio::test]
async fn a_lock_wait_timeout_is_a_conflict_and_retryable() {
    let Some(url) = common::url() else { return };
    let table = unique("locked");
    let root = common::fresh(&url, &table).await;
    let store = MySqlStore::builder(&url)
        .unwrap()
        .with_table(&table)
        .with_lock_wait_timeout(Duration::from_secs(1))
        .connect()
        .await
        .unwrap();
    let leases = Leases::new(store);
    let handle = leases.claim("locked").await.unwrap().unwrap();
    // Another session locks the row and keeps its transaction open.
    let admin = admin(&url);
    let mut blocker = admin.get_conn().await.unwrap();
    blocker.query_drop("START TRANSACTION").await.unwrap();
    blocker
        .query_drop(format!(
            "SELECT 1 FROM `{table}` WHERE name = 'locked' FOR UPDATE"
        ))
        .await
        .unwrap();
    let err = handle
        .renew()
        .await
        .expect_err("renewed through a row lock");
    blocker.query_drop("ROLLBACK").await.unwrap();
    drop(blocker);
    exec(&admin, &format!("DROP TABLE IF EXISTS `{table}`")).await;
    drop(root);
    assert_eq!(err.db_kind(), Some(DbErrorKind::Conflict), "{err}");
    assert!(err.is_retryable(), "{err}");
}
