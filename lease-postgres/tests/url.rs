//! URLs whose password was not percent-encoded: refused before any
//! connection, with advice, and without echoing the password.

#![allow(clippy::unwrap_used, reason = "tests")]

use lease_postgres::{PostgresError, PostgresStore};

/// Issue 16, item 9: an `@` left in the password made the driver take the
/// rest of the password as the host, which then showed up in errors.
#[test]
fn an_unencoded_at_sign_in_the_password_is_refused_without_echoing_it() {
    for url in [
        "postgres://app:s3cr@tPart@127.0.0.1:5432/test",
        "postgresql://app:s3cr@tPart@db.internal/test?sslmode=disable",
        "postgres://app:a/b@tPart@127.0.0.1/test",
    ] {
        let err = PostgresStore::builder(url).err().unwrap();
        assert!(
            matches!(err, PostgresError::InvalidUrl { .. }),
            "{url}: {err:?}"
        );
        let shown = format!("{err} {err:?}");
        assert!(shown.contains("percent-encode the password"), "{shown}");
        for secret in ["s3cr", "tPart", "a/b"] {
            assert!(!shown.contains(secret), "{shown}");
        }
    }
}

/// Encoded, the same password is accepted; so are URLs without one, or
/// with `@` where it belongs.
#[test]
fn encoded_passwords_and_plain_urls_are_accepted() {
    for url in [
        "postgres://app:s3cr%40tPart@127.0.0.1:5432/test",
        "postgres://app:a/b%40tPart@127.0.0.1/test",
        "postgres://app@127.0.0.1/test",
        "postgres://127.0.0.1/test",
        "postgres:///test?host=/run/postgresql",
        "postgres://app:pw@h1:5432,h2:5433/test?target_session_attrs=read-write",
    ] {
        let _builder = PostgresStore::builder(url).unwrap_or_else(|e| panic!("{url}: {e}"));
    }
}

/// The pool the store hands out, and the store, show no password in
/// `Debug` (tokio-postgres redacts it in its `Config`).
#[test]
fn the_pool_the_store_hands_out_does_not_show_the_password() {
    use lease_postgres::deadpool_postgres::{Manager, Pool};
    use lease_postgres::tokio_postgres::{Config, NoTls};

    let mut config = Config::new();
    let _ = config
        .host("127.0.0.1")
        .port(1)
        .user("app")
        .password("Pw-s3cret-7");
    let pool = Pool::builder(Manager::new(config, NoTls)).build().unwrap();
    let store = PostgresStore::from_pool(pool);
    let shown = format!("{:?} {:#?} {store:?}", store.pool(), store.pool());
    assert!(!shown.contains("Pw-s3cret-7"), "{shown}");
}
