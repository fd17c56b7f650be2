//! URLs whose password was not percent-encoded: refused before any
//! connection, with advice, and without echoing the password.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use lease_mysql::{MySqlError, MySqlStore, MySqlStoreBuilder};

/// Issue 16, item 9: a `/`, `?` or `#` left in the password ends the
/// URL's authority early, and the driver mis-parses what follows.
#[tokio::test]
async fn an_unencoded_slash_in_the_password_is_refused_without_echoing_it() {
    for url in [
        "mysql://app:s3cr/tPart@127.0.0.1:3306/test",
        "mariadb://app:s3cr/tPart@127.0.0.1/test?prefer_socket=false",
        "mysql://app:s3cr?tPart@127.0.0.1:3306/test",
        "mysql://app:s3cr#tPart@127.0.0.1:3306/test",
    ] {
        let err = MySqlStore::connect(url).await.err().unwrap();
        let shown = format!("{err} {err:?}");
        assert!(
            shown.contains("percent-encode the password"),
            "{url}: {shown}"
        );
        for secret in ["s3cr", "tPart"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        assert!(matches!(err, MySqlError::UnencodedPassword), "{err:?}");
    }
}

/// The same characters, percent-encoded, reach the server as the password:
/// a user created with it connects.
#[tokio::test]
async fn an_encoded_password_with_those_characters_connects() {
    use lease_mysql::mysql_async::prelude::Queryable;
    use lease_mysql::mysql_async::{Opts, Pool};

    let Some(url) = common::url() else { return };
    let opts = Opts::from_url(&url.replacen("mariadb://", "mysql://", 1)).unwrap();
    let admin = Pool::new(opts.clone());
    let user = format!("lmc_url_{:x}", std::process::id());
    let password = "a/b@c?d#e";
    let mut conn = admin.get_conn().await.unwrap();
    for host in ["%", "localhost"] {
        conn.query_drop(format!(
            "CREATE USER '{user}'@'{host}' IDENTIFIED BY '{password}'"
        ))
        .await
        .unwrap();
    }
    // No database: the user may use none, and authentication is the point.
    let encoded = format!(
        "mysql://{user}:a%2Fb%40c%3Fd%23e@{}:{}?prefer_socket=false",
        opts.ip_or_hostname(),
        opts.tcp_port(),
    );
    let connected = MySqlStore::builder(&encoded).unwrap().connect().await;
    for host in ["%", "localhost"] {
        conn.query_drop(format!("DROP USER IF EXISTS '{user}'@'{host}'"))
            .await
            .unwrap();
    }
    drop(conn);
    admin.disconnect().await.unwrap();
    let _ = connected.unwrap();
}

/// Issue 16, item 6: `MySqlStore::pool()` handed out mysql_async's `Pool`,
/// whose `Debug` prints the password.
#[test]
fn the_pool_the_store_hands_out_does_not_show_the_password() {
    use lease_mysql::mysql_async::{Opts, Pool};

    let opts = Opts::from_url("mysql://app:Pw-s3cret-7@127.0.0.1:1/test").unwrap();
    let store = MySqlStoreBuilder::from_pool(Pool::new(opts))
        .build()
        .unwrap();
    let shown = format!("{:?} {:#?} {store:?}", store.pool(), store.pool());
    assert!(!shown.contains("Pw-s3cret-7"), "{shown}");
    assert!(shown.contains("MySqlPool"), "{shown}");
    // What the accessor used to return, and still derefs to, does show it.
    let inner = format!("{:?}", **store.pool());
    assert!(
        inner.contains("Pw-s3cret-7"),
        "mysql_async's Pool Debug changed: {inner}"
    );
    // The wrapper is the pool: its methods are there.
    let _conn = store.pool().get_conn();
}
