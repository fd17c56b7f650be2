//! Each kind of database failure, as the store classifies it on a real
//! server: whether a retry can fix it is what `Error::is_retryable` says.
//! (A missing table is a conformance case.)

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] functions fail loudly"
)]

mod common;

use common::{exec, url_as};

use std::time::Duration;

use lease_conformance::network::url_via;
use lease_conformance::proxy::Proxy;
use lease_core::{DbErrorKind, Error, Leases};
use lease_postgres::PostgresStore;

fn kind_of(err: &Error) -> Option<DbErrorKind> {
    err.db_kind()
}

/// A role that may read the table but not write it: a claim is refused by
/// the server as a missing privilege, which no retry can fix.
#[tokio::test]
async fn a_missing_privilege_is_a_permission_error_and_not_retryable() {
    let Some(url) = common::url() else { return };
    let admin = common::fresh(&url).await;
    let table = admin.table().to_owned();
    let role = format!("{table}_ro");
    exec(
        &admin,
        &format!(
            "CREATE ROLE \"{role}\" LOGIN PASSWORD 'lease-test-pw'; \
             GRANT SELECT ON \"{table}\" TO \"{role}\""
        ),
    )
    .await;
    let outcome = async {
        let store = PostgresStore::builder(&url_as(&url, &role, "lease-test-pw"))
            .unwrap()
            .with_table(&table)
            .connect()
            .await
            .unwrap();
        Leases::new(store).claim("privs").await
    }
    .await;
    common::drop_table(&admin).await;
    exec(&admin, &format!("DROP ROLE IF EXISTS \"{role}\"")).await;
    let err = outcome.expect_err("a read-only role claimed a lease");
    assert_eq!(kind_of(&err), Some(DbErrorKind::Permission), "{err}");
    assert!(!err.is_retryable(), "{err}");
}

/// A connection the network cut: a retry (on a new connection) can fix it.
#[tokio::test]
async fn a_cut_connection_is_a_connection_error_and_retryable() {
    let Some(url) = common::url() else { return };
    let admin = common::fresh(&url).await;
    let target = lease_conformance::network::server_of(&url, 5432).unwrap();
    let proxy = Proxy::start(target).await.unwrap();
    let via = url_via(&url, proxy.addr()).unwrap();
    let store = PostgresStore::builder(&common::with_param(&via, "connect_timeout=2"))
        .unwrap()
        .with_table(admin.table())
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
    common::drop_table(&admin).await;
    assert_eq!(kind_of(&err), Some(DbErrorKind::Connection), "{err}");
    assert!(err.is_retryable(), "{err}");
}

/// A statement that waits on a lock past the server's statement timeout is
/// cancelled by the server: a retry may well succeed.
#[tokio::test]
async fn a_statement_cancelled_by_the_server_timeout_is_a_conflict_and_retryable() {
    let Some(url) = common::url() else { return };
    let admin = common::fresh(&url).await;
    let store = PostgresStore::builder(&url)
        .unwrap()
        .with_table(admin.table())
        .with_statement_timeout(Some(Duration::from_millis(300)))
        .connect()
        .await
        .unwrap();
    let leases = Leases::new(store);
    let handle = leases.claim("locked").await.unwrap().unwrap();
    // Another session locks the row and keeps its transaction open.
    let mut blocker = admin.pool().get().await.unwrap();
    let tx = blocker.transaction().await.unwrap();
    let _ = tx
        .execute(
            &format!(
                "SELECT 1 FROM \"{}\" WHERE name = 'locked' FOR UPDATE",
                admin.table()
            ),
            &[],
        )
        .await
        .unwrap();
    let err = handle
        .renew()
        .await
        .expect_err("renewed through a row lock");
    tx.rollback().await.unwrap();
    drop(blocker);
    common::drop_table(&admin).await;
    assert_eq!(kind_of(&err), Some(DbErrorKind::Conflict), "{err}");
    assert!(err.is_retryable(), "{err}");
}
