//! The store against a real server: names, sessions, the clock, outcomes
//! read from the OK packet, migrations, secrets and TLS refusals.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::time::Duration;

use lease_testkit::chain;

use lease_core::{ClaimRequest, LeaseStore, Leases, MAX_NAME_BYTES, Renewed, Token};
use lease_mysql::mysql_async::prelude::Queryable;
use lease_mysql::mysql_async::{Opts, OptsBuilder, Pool, PoolConstraints, PoolOpts, SslOpts};
use lease_mysql::{MySqlError, MySqlStore, MySqlStoreBuilder};

#[tokio::test]
async fn job_upper_job_and_job_space_are_three_names() {
    let Some(url) = common::url() else { return };
    let store = common::fresh(&url, "lm_names").await;
    let leases = Leases::new(store.clone());
    let a = leases.claim("job").await.unwrap().expect("job is free");
    let b = leases
        .claim("JOB")
        .await
        .unwrap()
        .expect("JOB is another name");
    let c = leases
        .claim("job ")
        .await
        .unwrap()
        .expect("`job ` is another name");
    assert_eq!((a.term(), b.term(), c.term()), (1, 1, 1));
    assert!(leases.claim("job").await.unwrap().is_none());
    assert!(leases.claim("jöb").await.unwrap().is_some());
    let mut conn = store.pool().get_conn().await.unwrap();
    let rows: u64 = conn
        .query_first("SELECT COUNT(*) FROM lm_names")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rows, 4);
    drop(conn);
    common::drop_table(&store, "lm_names").await;
}

#[tokio::test]
async fn a_192_byte_name_is_refused_before_any_sql_and_191_bytes_are_kept_whole() {
    let Some(url) = common::url() else { return };
    let table = "lm_long_names";
    let setup = common::fresh(&url, table).await;
    let proxy = common::Proxy::start(common::upstream(&url)).await;
    let store = common::proxied_store(&url, &proxy, table, false).await;
    let leases = Leases::new(store.clone());
    let _ = store.now_ms().await.unwrap();
    proxy.reset();
    let err = leases
        .claim(&"x".repeat(MAX_NAME_BYTES + 1))
        .await
        .unwrap_err();
    assert!(
        matches!(err, lease_core::Error::InvalidName { .. }),
        "{err:?}"
    );
    assert_eq!(proxy.round_trips(), 0, "no statement reached the server");
    // 191 bytes of four-byte characters and ASCII: stored whole.
    let name = format!("{}{}", "𝄞".repeat(47), "abc");
    assert_eq!(name.len(), MAX_NAME_BYTES);
    let h = leases.claim(&name).await.unwrap().unwrap();
    let mut conn = setup.pool().get_conn().await.unwrap();
    let stored: Vec<u8> = conn
        .exec_first(format!("SELECT name FROM {table}"), ())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored, name.as_bytes());
    drop(conn);
    h.release().await.unwrap();
    common::drop_table(&setup, table).await;
}

#[tokio::test]
async fn sessions_are_strict_with_bounded_lock_waits_and_statements() {
    let Some(url) = common::url() else { return };
    let store = MySqlStore::builder(&url)
        .unwrap()
        .with_lock_wait_timeout(Duration::from_secs(2))
        .with_statement_timeout(Some(Duration::from_millis(4_500)))
        .connect()
        .await
        .unwrap();
    let mut conn = store.pool().get_conn().await.unwrap();
    let (mode, lock_wait, autocommit): (String, u64, u64) = conn
        .query_first(
            "SELECT @@SESSION.sql_mode, @@SESSION.innodb_lock_wait_timeout, @@SESSION.autocommit",
        )
        .await
        .unwrap()
        .unwrap();
    assert!(mode.contains("STRICT_ALL_TABLES"), "{mode}");
    assert_eq!((lock_wait, autocommit), (2, 1));
    let version: String = conn.query_first("SELECT VERSION()").await.unwrap().unwrap();
    let bound: String = if version.contains("MariaDB") {
        conn.query_first("SELECT @@SESSION.max_statement_time")
            .await
            .unwrap()
            .unwrap()
    } else {
        conn.query_first("SELECT @@SESSION.max_execution_time")
            .await
            .unwrap()
            .unwrap()
    };
    assert!(
        bound.starts_with("4.5") || bound == "4500",
        "{version}: {bound}"
    );
    // Strict: a value too long for its column is an error, not truncated.
    conn.query_drop("CREATE TEMPORARY TABLE lm_strict (v VARBINARY(3))")
        .await
        .unwrap();
    assert!(
        conn.query_drop("INSERT INTO lm_strict VALUES ('abcd')")
            .await
            .is_err()
    );
}

/// The sessions' bounds follow the coordinator's timings: by default 3 s
/// lock wait, 5 s statements, 10 s idle in a transaction; with a 4 s
/// deadline 1 s, 2 s and 4 s.
#[tokio::test]
async fn session_bounds_are_derived_from_the_timings() {
    let Some(url) = common::url() else { return };
    async fn bounds(store: &MySqlStore) -> (u64, String) {
        let mut conn = store.pool().get_conn().await.unwrap();
        let lock_wait: u64 = conn
            .query_first("SELECT @@SESSION.innodb_lock_wait_timeout")
            .await
            .unwrap()
            .unwrap();
        let version: String = conn.query_first("SELECT VERSION()").await.unwrap().unwrap();
        let statement: String = if version.contains("MariaDB") {
            let (statement, idle): (String, String) = conn
                .query_first(
                    "SELECT @@SESSION.max_statement_time, @@SESSION.idle_transaction_timeout",
                )
                .await
                .unwrap()
                .unwrap();
            format!("{statement} {idle}")
        } else {
            conn.query_first("SELECT @@SESSION.max_execution_time")
                .await
                .unwrap()
                .unwrap()
        };
        (lock_wait, statement)
    }
    let default = MySqlStore::connect(&url).await.unwrap();
    let (lock_wait, statement) = bounds(&default).await;
    assert_eq!(lock_wait, 3);
    assert!(
        statement.starts_with("5.000000 10") || statement == "5000",
        "{statement}"
    );
    let timings = lease_core::Timings::builder()
        .lease(Duration::from_secs(6))
        .renew(Duration::from_secs(1))
        .deadline(Duration::from_secs(4))
        .grace(Duration::from_secs(2))
        .build()
        .unwrap();
    let tight = MySqlStore::builder(&url)
        .unwrap()
        .with_timings(&timings)
        .connect()
        .await
        .unwrap();
    let (lock_wait, statement) = bounds(&tight).await;
    assert_eq!(lock_wait, 1);
    assert!(
        statement.starts_with("2.000000 4") || statement == "2000",
        "{statement}"
    );
    // What the store tells a coordinator its bounds came from (issue 23,
    // item 9): the timings, unless a bound was set by hand.
    assert_eq!(LeaseStore::timings(&tight), Some(timings));
    assert_eq!(Leases::new(tight).timings(), &timings);
    let by_hand = MySqlStore::builder(&url)
        .unwrap()
        .with_timings(&timings)
        .with_lock_wait_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    assert_eq!(LeaseStore::timings(&by_hand), None);
}

#[tokio::test]
async fn lock_wait_under_one_second_is_refused() {
    let err = MySqlStore::builder("mysql://root@127.0.0.1:1/test")
        .unwrap()
        .with_lock_wait_timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(err, MySqlError::InvalidSetting(_)), "{err:?}");
}

#[tokio::test]
async fn the_clock_is_read_once_per_statement_and_needs_no_time_zone() {
    let Some(url) = common::url() else { return };
    let store = MySqlStore::connect(&url).await.unwrap();
    let mut conn = store.pool().get_conn().await.unwrap();
    // UNIX_TIMESTAMP() and NOW(3) both read the statement's start time: a
    // second passing during the statement changes neither.
    let (a, _, b, micro_a, micro_b): (i64, i64, i64, i64, i64) = conn
        .query_first(
            "SELECT UNIX_TIMESTAMP(), SLEEP(1.1), UNIX_TIMESTAMP(), MICROSECOND(NOW(3)), MICROSECOND(NOW(6))",
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(a, b);
    assert_eq!(micro_a / 1000, micro_b / 1000);
    drop(conn);

    // A session in another time zone reads the same clock.
    let opts = Opts::from_url(&url.replacen("mariadb://", "mysql://", 1)).unwrap();
    let shifted = Pool::new(OptsBuilder::from_opts(opts).init(vec!["SET time_zone = '+05:30'"]));
    let shifted = MySqlStore::from_pool(shifted);
    let before = store.now_ms().await.unwrap();
    let there = shifted.now_ms().await.unwrap();
    let after = store.now_ms().await.unwrap();
    assert!(
        before <= there && there <= after,
        "{before} {there} {after}"
    );
    let local = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert!(
        (there - local).abs() < 60_000,
        "database {there}, process {local}"
    );
}

#[tokio::test]
async fn outcomes_do_not_leak_from_one_statement_to_the_next_on_a_connection() {
    let Some(url) = common::url() else { return };
    let table = "lm_ok_packet";
    let setup = common::fresh(&url, table).await;
    // One connection, so every statement runs on the same session.
    let opts = Opts::from_url(&url.replacen("mariadb://", "mysql://", 1)).unwrap();
    let pool = Pool::new(
        OptsBuilder::from_opts(opts)
            .pool_opts(PoolOpts::default().with_constraints(PoolConstraints::new(1, 1).unwrap())),
    );
    let store = MySqlStoreBuilder::from_pool(pool)
        .with_table(table)
        .build()
        .unwrap();
    assert_eq!(
        store
            .claim(ClaimRequest {
                name: "n",
                token: Token::new("h1"),
                instance: "i",
                lease_ms: 10_000
            })
            .await
            .unwrap(),
        Some(1)
    );
    assert_eq!(
        store
            .claim(ClaimRequest {
                name: "n",
                token: Token::new("h2"),
                instance: "i",
                lease_ms: 10_000
            })
            .await
            .unwrap(),
        None
    );
    assert!(
        store
            .renew("n", Token::new("h1"), 10_000)
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        store
            .renew("n", Token::new("h2"), 10_000)
            .await
            .unwrap()
            .is_none()
    );
    assert!(store.release("n", Token::new("h1")).await.unwrap());
    assert!(store.verify("n", Token::new("h1")).await.unwrap().is_none());
    assert!(
        store
            .renew("n", Token::new("h1"), 10_000)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        !store
            .claim_rerun(
                ClaimRequest {
                    name: "n",
                    token: Token::new("h3"),
                    instance: "i",
                    lease_ms: 10_000
                },
                1
            )
            .await
            .unwrap()
    );
    common::drop_table(&setup, table).await;
}

#[tokio::test]
async fn a_renewal_writing_the_same_expiry_in_the_same_millisecond_is_held() {
    let Some(url) = common::url() else { return };
    let table = "lm_same_ms";
    let setup = common::fresh(&url, table).await;
    // A session whose clock stands still: every renewal writes the expiry
    // the row already has. With CLIENT_FOUND_ROWS off (the default) the
    // server reports 0 rows changed; the store still reads it as held.
    //
    // The clock is pinned to one literal second, read once here. The pool
    // resets a connection each time it comes back (`COM_RESET_CONNECTION`,
    // on by default, which also clears the session's `timestamp`) and runs
    // the setup again: a setup of `timestamp = UNIX_TIMESTAMP()` re-pinned
    // the same connection to the current second after every call, and a
    // second boundary between two calls moved its clock by 1000 ms (and the
    // renewals then wrote a new expiry, missing the case under test).
    let frozen_ms = setup.now_ms().await.unwrap() / 1000 * 1000;
    let pin = format!("SET SESSION timestamp = {}", frozen_ms / 1000);
    for found_rows in [false, true] {
        let opts = Opts::from_url(&url.replacen("mariadb://", "mysql://", 1)).unwrap();
        let pool = Pool::new(
            OptsBuilder::from_opts(opts)
                .client_found_rows(found_rows)
                .setup(vec![pin.clone()])
                .pool_opts(
                    PoolOpts::default().with_constraints(PoolConstraints::new(1, 1).unwrap()),
                ),
        );
        let store = MySqlStoreBuilder::from_pool(pool)
            .with_table(table)
            .build()
            .unwrap();
        let name = format!("frozen-{found_rows}");
        assert!(
            store
                .claim(ClaimRequest {
                    name: &name,
                    token: Token::new("h"),
                    instance: "i",
                    lease_ms: 10_000
                })
                .await
                .unwrap()
                .is_some()
        );
        assert_eq!(
            store.now_ms().await.unwrap(),
            frozen_ms,
            "the session's clock stands still"
        );
        for renewal in 0..2 {
            assert_eq!(
                store.renew(&name, Token::new("h"), 10_000).await.unwrap(),
                Some(Renewed::at(frozen_ms)),
                "found_rows {found_rows}, renewal {renewal}: held, at the pinned now"
            );
        }
        assert_eq!(
            store
                .get(&name)
                .await
                .unwrap()
                .map(|info| info.expires_at_ms),
            Some(frozen_ms + 10_000),
            "the renewals wrote the expiry the row already had"
        );
    }
    common::drop_table(&setup, table).await;
}

#[tokio::test]
async fn eight_replicas_migrating_a_new_table_at_once_all_succeed() {
    let Some(url) = common::url() else { return };
    let table = "lm_migrate_race";
    let first = MySqlStore::builder(&url)
        .unwrap()
        .with_table(table)
        .connect()
        .await
        .unwrap();
    common::drop_table(&first, table).await;
    let mut stores = Vec::new();
    for _ in 0..8 {
        stores.push(
            MySqlStore::builder(&url)
                .unwrap()
                .with_table(table)
                .with_pool_constraints(0, 2)
                .connect()
                .await
                .unwrap(),
        );
    }
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(8));
    let tasks: Vec<_> = stores
        .into_iter()
        .map(|s| {
            let barrier = barrier.clone();
            tokio::spawn(async move {
                let _ = barrier.wait().await;
                s.migrate().await
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    assert_eq!(
        first
            .claim(ClaimRequest {
                name: "x",
                token: Token::new("h"),
                instance: "i",
                lease_ms: 1_000
            })
            .await
            .unwrap(),
        Some(1)
    );
    first.migrate().await.unwrap();
    assert_eq!(
        first
            .claim(ClaimRequest {
                name: "x",
                token: Token::new("h2"),
                instance: "i",
                lease_ms: 1_000
            })
            .await
            .unwrap(),
        None,
        "kept"
    );
    common::drop_table(&first, table).await;
}

#[tokio::test]
async fn a_table_whose_names_are_not_binary_is_refused() {
    let Some(url) = common::url() else { return };
    let table = "lm_text_names";
    let store = MySqlStore::builder(&url)
        .unwrap()
        .with_table(table)
        .connect()
        .await
        .unwrap();
    common::drop_table(&store, table).await;
    let mut conn = store.pool().get_conn().await.unwrap();
    conn.query_drop(format!(
        "CREATE TABLE {table} (name VARCHAR(191) CHARACTER SET utf8mb4 NOT NULL PRIMARY KEY, \
         holder VARBINARY(64) NOT NULL, instance VARCHAR(255) NOT NULL, term BIGINT UNSIGNED NOT NULL, \
         expires_at_ms BIGINT NOT NULL, slot_ms BIGINT NOT NULL DEFAULT 0, \
         unfinished_slot_ms BIGINT NOT NULL DEFAULT 0, rerun_slot_ms BIGINT NOT NULL DEFAULT 0)"
    ))
    .await
    .unwrap();
    drop(conn);
    let err = store.migrate().await.unwrap_err();
    assert!(
        matches!(err, MySqlError::IncompatibleTable { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("varchar"), "{err}");
    common::drop_table(&store, table).await;
}

#[tokio::test]
async fn a_qualified_table_name_works() {
    let Some(url) = common::url() else { return };
    let probe = MySqlStore::connect(&url).await.unwrap();
    let mut conn = probe.pool().get_conn().await.unwrap();
    let db: String = conn
        .query_first("SELECT DATABASE()")
        .await
        .unwrap()
        .unwrap();
    drop(conn);
    let table = format!("{db}.lm_qualified");
    let store = MySqlStore::builder(&url)
        .unwrap()
        .with_table(&table)
        .connect()
        .await
        .unwrap();
    common::drop_table(&store, "lm_qualified").await;
    store.migrate().await.unwrap();
    assert_eq!(
        store
            .claim(ClaimRequest {
                name: "q",
                token: Token::new("h"),
                instance: "i",
                lease_ms: 1_000
            })
            .await
            .unwrap(),
        Some(1)
    );
    // The name as given, as every store's `table()` answers it.
    assert_eq!(store.table(), table);
    assert!(
        format!("{store:?}").contains(&format!("`{db}`.`lm_qualified`")),
        "{store:?}"
    );
    common::drop_table(&store, "lm_qualified").await;
}

const SECRET: &str = "s3cr3t-Pa55word";

fn assert_no_secret(what: &str, text: &str) {
    assert!(!text.contains(SECRET), "{what} shows the password: {text}");
}

#[tokio::test]
async fn the_password_stays_out_of_debug_display_and_errors() {
    // Nothing listens on port 1: the connection is refused.
    let url = format!("mysql://app:{SECRET}@127.0.0.1:1/test?prefer_socket=false");
    let err = MySqlStore::connect(&url).await.unwrap_err();
    assert!(matches!(err, MySqlError::Connect { .. }), "{err:?}");
    assert!(err.is_retryable());
    assert_no_secret("a refused connection's error", &chain(&err));
    assert!(err.to_string().contains("127.0.0.1:1"), "{err}");

    for bad in [
        format!("mysql://app:{SECRET}@127.0.0.1:1/test?no_such_param=1"),
        format!("mysql://app:{SECRET}@127.0.0.1:1/test?pool_min=x"),
        format!("postgres://app:{SECRET}@127.0.0.1:1/test"),
        format!("mysql://app:{SECRET}@[::1/test"),
    ] {
        let err = MySqlStore::connect(&bad).await.unwrap_err();
        assert_no_secret("a bad URL's error", &chain(&err));
    }

    let builder = MySqlStore::builder(&format!("mysql://app:{SECRET}@127.0.0.1/test"))
        .unwrap()
        .with_tls(SslOpts::default());
    assert_no_secret("the builder", &format!("{builder:?}"));

    let Some(server) = common::url() else { return };
    // The server refuses the password.
    let opts = Opts::from_url(&server.replacen("mariadb://", "mysql://", 1)).unwrap();
    let wrong = format!(
        "mysql://{}:{SECRET}@{}:{}/test?prefer_socket=false",
        opts.user().unwrap_or("root"),
        opts.ip_or_hostname(),
        opts.tcp_port()
    );
    let err = MySqlStore::connect(&wrong).await.unwrap_err();
    assert_no_secret("a refused password's error", &chain(&err));

    // A store built from a URL with a password, and from a pool of one.
    let store = MySqlStore::connect(&server).await.unwrap();
    assert_no_secret("the store", &format!("{store:?}"));
    let pool = Pool::new(OptsBuilder::from_opts(opts).pass(Some(SECRET)));
    let store = MySqlStore::from_pool(pool);
    let shown = format!("{store:?}");
    assert_no_secret("a store on a caller's pool", &shown);
    let leases = Leases::new(store);
    assert_no_secret("the coordinator", &format!("{leases:?}"));
    let err = leases.claim("x").await.unwrap_err();
    assert_no_secret("a failed claim's error", &chain(&err));
}

#[tokio::test]
async fn tls_options_in_the_url_are_refused_by_a_server_without_tls() {
    let Some(url) = common::url() else { return };
    let store = MySqlStore::connect(&url).await.unwrap();
    let mut conn = store.pool().get_conn().await.unwrap();
    let have_ssl: Option<(String, String)> = conn
        .query_first("SHOW VARIABLES LIKE 'have_ssl'")
        .await
        .unwrap();
    drop(conn);
    let tls_on_server = have_ssl.is_some_and(|(_, v)| v == "YES");
    for params in [
        "require_ssl=true",
        "require_ssl=true&verify_ca=false&verify_identity=false",
        "require_ssl=true&built_in_roots=false",
    ] {
        let tls_url = common::with_param(&url, params);
        match MySqlStore::connect(&tls_url).await {
            Ok(store) => {
                assert!(tls_on_server, "TLS was required and the server has none");
                assert!(store.tls_required());
            }
            Err(err) => {
                if !tls_on_server {
                    assert!(
                        matches!(err, MySqlError::TlsUnavailable { .. }),
                        "{params}: {err:?}"
                    );
                    assert!(err.to_string().contains("does not offer TLS"), "{err}");
                    assert!(!err.is_retryable());
                }
            }
        }
    }
    // The builder's TLS options, whatever the URL says.
    let err = MySqlStore::builder(&url)
        .unwrap()
        .with_tls(SslOpts::default().with_danger_accept_invalid_certs(true))
        .connect()
        .await;
    if !tls_on_server {
        assert!(
            matches!(err, Err(MySqlError::TlsUnavailable { .. })),
            "{err:?}"
        );
    }
    // A bad TLS parameter is a URL error, before any connection.
    let err = MySqlStore::connect(&common::with_param(&url, "verify_ca=maybe"))
        .await
        .unwrap_err();
    assert!(matches!(err, MySqlError::InvalidUrl { .. }), "{err:?}");
}

#[tokio::test]
async fn mariadb_scheme_connects_like_mysql() {
    let Some(url) = common::url() else { return };
    let maria = url.replacen("mysql://", "mariadb://", 1);
    let store = MySqlStore::connect(&maria).await.unwrap();
    assert!(store.now_ms().await.unwrap() > 0);
}

#[tokio::test]
async fn racing_claims_have_one_winner_and_no_errors() {
    let Some(url) = common::url() else { return };
    let table = "lm_race";
    let setup = common::fresh(&url, table).await;
    let store = MySqlStore::builder(&url)
        .unwrap()
        .with_table(table)
        .with_pool_constraints(0, 16)
        .connect()
        .await
        .unwrap();
    for round in 0..30 {
        // A fresh name (racing inserts), then the same name once released
        // (racing takeovers).
        let name = format!("race-{round}");
        for expect_term in [1, 2] {
            let tasks: Vec<_> = (0..12)
                .map(|i| {
                    let store = store.clone();
                    let name = name.clone();
                    tokio::spawn(async move {
                        let holder = format!("h{i}");
                        let term = store
                            .claim(ClaimRequest {
                                name: &name,
                                token: Token::new(&holder),
                                instance: "i",
                                lease_ms: 10_000,
                            })
                            .await;
                        (holder, term)
                    })
                })
                .collect();
            let mut winners = Vec::new();
            for task in tasks {
                let (holder, term) = task.await.unwrap();
                if let Some(term) = term.expect("no claim fails") {
                    winners.push((holder, term));
                }
            }
            assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
            assert_eq!(winners[0].1, expect_term, "round {round}");
            assert!(
                store
                    .release(&name, Token::new(&winners[0].0))
                    .await
                    .unwrap()
            );
        }
    }
    common::drop_table(&setup, table).await;
}
