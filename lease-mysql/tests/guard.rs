//! The transaction guard: verify first, end with the lease context, and
//! fence as far as InnoDB allows.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lease_core::CancellationToken;
use lease_core::GuardError;
use lease_core::{
    ClaimRequest, EndCause, LeaseContext, LeaseStore, Leases, LostCause, Timings, Token,
};
use lease_mysql::mysql_async::prelude::Queryable;
use lease_mysql::{MySqlError, MySqlStore};

/// A store on `table` with a business table `<table>_biz` beside it.
async fn setup(url: &str, table: &str) -> MySqlStore {
    let store = common::fresh(url, table).await;
    let biz = format!("{table}_biz");
    common::drop_table(&store, &biz).await;
    let mut conn = store.pool().get_conn().await.unwrap();
    conn.query_drop(format!(
        "CREATE TABLE {biz} (id INT PRIMARY KEY, term BIGINT UNSIGNED)"
    ))
    .await
    .unwrap();
    store
}

async fn teardown(store: &MySqlStore, table: &str) {
    common::drop_table(store, &format!("{table}_biz")).await;
    common::drop_table(store, table).await;
}

async fn biz_rows(store: &MySqlStore, table: &str) -> Vec<(i32, u64)> {
    let mut conn = store.pool().get_conn().await.unwrap();
    conn.query(format!("SELECT id, term FROM {table}_biz ORDER BY id"))
        .await
        .unwrap()
}

async fn context(leases: &Leases, name: &str) -> LeaseContext {
    let handle = leases.claim(name).await.unwrap().expect("free name");
    LeaseContext::new(handle, CancellationToken::new())
}

#[tokio::test]
async fn work_commits_under_a_held_lease() {
    let Some(url) = common::url() else { return };
    let table = "lm_guard_commit";
    let store = setup(&url, table).await;
    let leases = Leases::new(store.clone());
    let ctx = context(&leases, "commit").await;
    let term = ctx.term();
    let sql = format!("INSERT INTO {table}_biz VALUES (1, ?)");
    let out = store
        .transaction(&ctx, |tx| {
            Box::pin(async move {
                tx.exec_drop(sql, (term,)).await?;
                Ok::<_, MySqlError>("done")
            })
        })
        .await
        .unwrap();
    assert_eq!(out, "done");
    assert_eq!(biz_rows(&store, table).await, vec![(1, 1)]);
    teardown(&store, table).await;
}

#[tokio::test]
async fn a_lost_lease_refuses_the_transaction_before_its_first_statement() {
    let Some(url) = common::url() else { return };
    let table = "lm_guard_lost";
    let store = setup(&url, table).await;
    let leases = Leases::new(store.clone());
    let ctx = context(&leases, "lost").await;
    ctx.handle().release().await.unwrap();
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    let sql = format!("INSERT INTO {table}_biz VALUES (1, 0)");
    let err = store
        .transaction(&ctx, |tx| {
            flag.store(true, Ordering::SeqCst);
            Box::pin(async move {
                tx.query_drop(sql).await?;
                Ok::<_, MySqlError>(())
            })
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&err, GuardError::Lost(e) if e.lost_cause() == Some(LostCause::NotHolder)),
        "{err:?}"
    );
    assert!(err.is_lost());
    assert!(!ran.load(Ordering::SeqCst), "the work must not even start");
    assert!(biz_rows(&store, table).await.is_empty());

    // A successor holds it now: still refused.
    let successor = leases.claim("lost").await.unwrap().unwrap();
    let err = store
        .transaction(&ctx, |_tx| Box::pin(async { Ok::<_, MySqlError>(()) }))
        .await
        .unwrap_err();
    assert!(err.is_lost(), "{err:?}");
    successor.release().await.unwrap();
    teardown(&store, table).await;
}

#[tokio::test]
async fn a_context_already_ended_refuses_the_transaction() {
    let Some(url) = common::url() else { return };
    let table = "lm_guard_ended";
    let store = setup(&url, table).await;
    let leases = Leases::new(store.clone());
    let ctx = context(&leases, "ended").await;
    ctx.end(EndCause::Lost(LostCause::DeadlineExceeded));
    let err = store
        .transaction(&ctx, |_tx| Box::pin(async { Ok::<_, MySqlError>(()) }))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, GuardError::Lost(e) if e.lost_cause() == Some(LostCause::DeadlineExceeded)),
        "{err:?}"
    );
    assert!(err.is_lost());
    teardown(&store, table).await;
}

#[tokio::test]
async fn work_that_fails_is_rolled_back() {
    let Some(url) = common::url() else { return };
    let table = "lm_guard_fail";
    let store = setup(&url, table).await;
    let leases = Leases::new(store.clone());
    let ctx = context(&leases, "fail").await;
    let sql = format!("INSERT INTO {table}_biz VALUES (1, 0)");
    let err = store
        .transaction(&ctx, |tx| {
            Box::pin(async move {
                tx.query_drop(sql).await?;
                Err::<(), _>(MySqlError::InvalidSetting("the work gave up".into()))
            })
        })
        .await
        .unwrap_err();
    assert!(
        matches!(err, GuardError::Work(MySqlError::InvalidSetting(_))),
        "{err:?}"
    );
    assert!(biz_rows(&store, table).await.is_empty());
    teardown(&store, table).await;
}

#[tokio::test]
async fn the_transaction_is_rolled_back_when_the_context_ends_between_statements() {
    let Some(url) = common::url() else { return };
    let table = "lm_guard_cancel";
    let store = setup(&url, table).await;
    let leases = Leases::new(store.clone());
    let ctx = context(&leases, "cancel").await;
    let ender = ctx.clone();
    drop(tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        ender.end(EndCause::Lost(LostCause::NotHolder));
    }));
    let sql = format!("INSERT INTO {table}_biz VALUES (1, 0)");
    let err = store
        .transaction(&ctx, |tx| {
            Box::pin(async move {
                tx.query_drop(sql).await?;
                std::future::pending::<()>().await;
                Ok::<_, MySqlError>(())
            })
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&err, GuardError::Lost(e) if e.lost_cause() == Some(LostCause::NotHolder)),
        "{err:?}"
    );
    assert!(biz_rows(&store, table).await.is_empty(), "rolled back");
    teardown(&store, table).await;
}

/// An abandoned transaction's connection is killed before the pool has it
/// back: no caller is handed it afterwards (where the late `KILL` would end
/// that caller's own statements).
#[tokio::test]
async fn an_abandoned_connection_is_never_handed_out_again() {
    let Some(url) = common::url() else { return };
    let table = "lm_guard_abandon_reuse";
    let store = setup(&url, table).await;
    let leases = Leases::new(store.clone());
    let ctx = context(&leases, "abandon-reuse").await;
    let ender = ctx.clone();
    let used = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let seen = used.clone();
    let sql = format!("INSERT INTO {table}_biz VALUES (1, 0)");
    let err = store
        .transaction(&ctx, |tx| {
            Box::pin(async move {
                tx.query_drop(sql).await?;
                let id: Option<u64> = tx.query_first("SELECT CONNECTION_ID()").await?;
                seen.store(id.unwrap_or(0), Ordering::SeqCst);
                ender.end(EndCause::Lost(LostCause::NotHolder));
                std::future::pending::<()>().await;
                Ok::<_, MySqlError>(())
            })
        })
        .await
        .unwrap_err();
    assert!(matches!(&err, GuardError::Lost(_)), "{err:?}");
    let abandoned = used.load(Ordering::SeqCst);
    assert_ne!(abandoned, 0, "the work read its connection's id");
    // Whatever the pool hands out from now on works, and is not the
    // abandoned connection.
    for round in 0..20 {
        let mut conns = Vec::new();
        for _ in 0..4 {
            let mut conn = store.pool().get_conn().await.expect("connection");
            let id: Option<u64> = conn
                .query_first("SELECT CONNECTION_ID()")
                .await
                .unwrap_or_else(|e| {
                    panic!("round {round}: a pooled connection failed its first statement: {e}")
                });
            assert_ne!(
                id,
                Some(abandoned),
                "round {round}: the pool handed out the abandoned transaction's connection"
            );
            conns.push(conn);
        }
        drop(conns);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(biz_rows(&store, table).await.is_empty(), "rolled back");
    teardown(&store, table).await;
}

#[tokio::test]
async fn the_transaction_is_rolled_back_when_the_context_ends_mid_statement() {
    let Some(url) = common::url() else { return };
    let table = "lm_guard_cancel_mid";
    let store = setup(&url, table).await;
    let leases = Leases::new(store.clone());
    let ctx = context(&leases, "cancel-mid").await;
    let ender = ctx.clone();
    drop(tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        ender.end(EndCause::ParentCancelled);
    }));
    let sql = format!("INSERT INTO {table}_biz VALUES (1, 0)");
    let started = Instant::now();
    let err = store
        .transaction(&ctx, |tx| {
            Box::pin(async move {
                tx.query_drop(sql).await?;
                // Still running on the server when the context ends.
                tx.query_drop("DO SLEEP(4)").await?;
                Ok::<_, MySqlError>(())
            })
        })
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(
            err,
            GuardError::Ended {
                cause: Some(EndCause::ParentCancelled),
                ..
            }
        ),
        "{err:?}"
    );
    assert!(!err.is_lost());
    assert!(
        took < Duration::from_secs(3),
        "ended without waiting for the statement: {took:?}"
    );
    assert!(biz_rows(&store, table).await.is_empty(), "rolled back");
    teardown(&store, table).await;
}

/// Opens a guarded transaction on `ctx` and keeps it open (holding the
/// shared lock on the lease row) until `hold` is notified.
fn hold_open(
    store: &MySqlStore,
    ctx: &LeaseContext,
    table: &str,
    locked: Arc<tokio::sync::Notify>,
    hold: Arc<tokio::sync::Notify>,
) -> tokio::task::JoinHandle<Result<(), GuardError<MySqlError>>> {
    let store = store.clone();
    let ctx = ctx.clone();
    let sql = format!("INSERT INTO {table}_biz VALUES (1, ?)");
    tokio::spawn(async move {
        let term = ctx.term();
        store
            .transaction(&ctx, move |tx| {
                Box::pin(async move {
                    tx.exec_drop(sql, (term,)).await?;
                    locked.notify_one();
                    hold.notified().await;
                    Ok::<_, MySqlError>(())
                })
            })
            .await
    })
}

#[tokio::test]
async fn a_successors_claim_waits_for_the_guarded_transaction() {
    let Some(url) = common::url() else { return };
    let table = "lm_guard_fence";
    let store = setup(&url, table).await;
    let short = Timings::builder()
        .lease(Duration::from_millis(400))
        .renew(Duration::from_millis(50))
        .deadline(Duration::from_millis(250))
        .grace(Duration::from_millis(100))
        .build()
        .unwrap();
    let leases = Leases::new(store.clone()).with_timings_unchecked(short);
    let ctx = context(&leases, "fenced").await;
    let (locked, hold) = (
        Arc::new(tokio::sync::Notify::new()),
        Arc::new(tokio::sync::Notify::new()),
    );
    let tx = hold_open(&store, &ctx, table, locked.clone(), hold.clone());
    locked.notified().await;
    // The lease expires by the database clock while the transaction is open.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let claimer = store.clone();
    let successor = tokio::spawn(async move {
        claimer
            .claim(ClaimRequest {
                name: "fenced",
                token: Token::new("successor"),
                instance: "b",
                lease_ms: 10_000,
            })
            .await
            .unwrap()
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        !successor.is_finished(),
        "the successor's claim waits on the shared lock"
    );
    hold.notify_one();
    tx.await.unwrap().unwrap();
    assert_eq!(successor.await.unwrap(), Some(2), "then takes the name");
    // The business write committed while the row was still the holder's.
    assert_eq!(biz_rows(&store, table).await, vec![(1, 1)]);
    teardown(&store, table).await;
}

#[tokio::test]
async fn a_guarded_transaction_delays_the_holders_own_renewal_until_it_ends() {
    let Some(url) = common::url() else { return };
    let table = "lm_guard_renew";
    let store = setup(&url, table).await;
    let leases = Leases::new(store.clone());
    let ctx = context(&leases, "renewed").await;
    let (locked, hold) = (
        Arc::new(tokio::sync::Notify::new()),
        Arc::new(tokio::sync::Notify::new()),
    );
    let tx = hold_open(&store, &ctx, table, locked.clone(), hold.clone());
    locked.notified().await;
    let handle = ctx.handle().clone();
    let renewal = tokio::spawn(async move {
        let started = Instant::now();
        handle.renew().await.map(|()| started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !renewal.is_finished(),
        "InnoDB has no key-share lock: the renewal waits"
    );
    hold.notify_one();
    tx.await.unwrap().unwrap();
    let waited = renewal.await.unwrap().unwrap();
    eprintln!("the renewal waited {waited:?} for the guarded transaction");
    assert!(waited >= Duration::from_millis(500));
    teardown(&store, table).await;
}

#[tokio::test]
async fn a_guarded_transaction_longer_than_the_lock_wait_bound_fails_the_renewal_attempt() {
    let Some(url) = common::url() else { return };
    let table = "lm_guard_lock_wait";
    let store = setup(&url, table).await;
    let impatient = MySqlStore::builder(&url)
        .unwrap()
        .with_table(table)
        .with_lock_wait_timeout(Duration::from_secs(1))
        .connect()
        .await
        .unwrap();
    let leases = Leases::new(store.clone());
    let ctx = context(&leases, "impatient").await;
    let (locked, hold) = (
        Arc::new(tokio::sync::Notify::new()),
        Arc::new(tokio::sync::Notify::new()),
    );
    let tx = hold_open(&store, &ctx, table, locked.clone(), hold.clone());
    locked.notified().await;
    let err = impatient
        .renew("impatient", ctx.handle().token(), 15_000)
        .await
        .unwrap_err();
    let err = err.downcast::<lease_mysql::mysql_async::Error>().unwrap();
    assert!(
        matches!(&*err, lease_mysql::mysql_async::Error::Server(e) if e.code == 1205),
        "lock wait timeout: {err:?}"
    );
    hold.notify_one();
    tx.await.unwrap().unwrap();
    assert!(
        impatient
            .renew("impatient", ctx.handle().token(), 15_000)
            .await
            .unwrap()
            .is_some()
    );
    teardown(&store, table).await;
}

#[tokio::test]
async fn session_changes_made_by_the_work_do_not_outlive_the_transaction() {
    let Some(url) = common::url() else { return };
    let table = "lm_guard_session";
    let store = setup(&url, table).await;
    // One connection: the guarded transaction's is the one the next
    // statements run on.
    let one = MySqlStore::builder(&url)
        .unwrap()
        .with_table(table)
        .with_pool_constraints(1, 1)
        .connect()
        .await
        .unwrap();
    let leases = Leases::new(one.clone());
    let ctx = context(&leases, "session").await;
    let sessions = |one: MySqlStore| async move {
        let mut conn = one.pool().get_conn().await.unwrap();
        let row: (u64, u64, String) = conn
            .query_first("SELECT @@SESSION.autocommit, @@SESSION.innodb_lock_wait_timeout, @@SESSION.sql_mode")
            .await
            .unwrap()
            .unwrap();
        row
    };
    for fail in [false, true] {
        let result = one
            .transaction(&ctx, move |tx| {
                Box::pin(async move {
                    tx.query_drop(
                        "SET SESSION autocommit = 0, innodb_lock_wait_timeout = 50, sql_mode = ''",
                    )
                    .await?;
                    if fail {
                        return Err(MySqlError::InvalidSetting("fail".into()));
                    }
                    Ok::<_, MySqlError>(())
                })
            })
            .await;
        assert_eq!(result.is_err(), fail);
        // Committed: the setup ran again. Failed: the pool reset the session.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (autocommit, lock_wait, mode) = sessions(one.clone()).await;
        assert_eq!((autocommit, lock_wait), (1, 3), "after fail={fail}");
        assert!(
            mode.contains("STRICT_ALL_TABLES"),
            "after fail={fail}: {mode}"
        );
        assert!(
            one.renew("session", ctx.handle().token(), 15_000)
                .await
                .unwrap()
                .is_some()
        );
    }
    teardown(&store, table).await;
}

/// The verification compares the term: a row with the holder's token but
/// another term does not verify, and the work never runs.
#[tokio::test]
async fn a_row_of_another_term_does_not_verify() {
    let Some(url) = common::url() else { return };
    let table = "lm_guard_term";
    let store = setup(&url, table).await;
    let leases = Leases::new(store.clone());
    let ctx = context(&leases, "term").await;
    let mut conn = store.pool().get_conn().await.unwrap();
    conn.query_drop(format!(
        "UPDATE {table} SET term = term + 1 WHERE name = 'term'"
    ))
    .await
    .unwrap();
    drop(conn);
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    let sql = format!("INSERT INTO {table}_biz VALUES (1, 0)");
    let err = store
        .transaction(&ctx, |tx| {
            flag.store(true, Ordering::SeqCst);
            Box::pin(async move { tx.query_drop(sql).await })
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&err, GuardError::Lost(e) if e.lost_cause() == Some(LostCause::NotHolder)),
        "{err:?}"
    );
    assert!(
        !ran.load(Ordering::SeqCst),
        "the work ran under another term"
    );
    assert!(biz_rows(&store, table).await.is_empty());
    teardown(&store, table).await;
}

/// A panic in the work rolls the transaction back and reaches the caller;
/// the store works after it.
#[tokio::test]
async fn work_that_panics_is_rolled_back() {
    let Some(url) = common::url() else { return };
    let table = "lm_guard_panic";
    let store = setup(&url, table).await;
    let leases = Leases::new(store.clone());
    let ctx = context(&leases, "panic").await;
    let panicked = {
        let (store, ctx) = (store.clone(), ctx.clone());
        let sql = format!("INSERT INTO {table}_biz VALUES (1, 0)");
        tokio::spawn(async move {
            store
                .transaction(&ctx, |tx| {
                    Box::pin(async move {
                        tx.query_drop(sql).await.unwrap();
                        panic!("in the work");
                        #[allow(unreachable_code)]
                        Ok::<(), MySqlError>(())
                    })
                })
                .await
        })
        .await
    };
    assert!(panicked.unwrap_err().is_panic());
    let sql = format!("INSERT INTO {table}_biz VALUES (2, 0)");
    store
        .transaction(&ctx, |tx| Box::pin(async move { tx.query_drop(sql).await }))
        .await
        .unwrap();
    assert_eq!(biz_rows(&store, table).await, vec![(2, 0)]);
    teardown(&store, table).await;
}

/// Issue 23, item 11: the answer to a guarded transaction's `COMMIT` is lost
/// (a proxy forwards the `COMMIT`, the server commits, the client never
/// hears): the error says the outcome is unknown and is not retryable. The
/// work is in the database: a caller that retried would have written it
/// twice.
#[tokio::test]
async fn a_lost_answer_to_commit_is_an_unknown_outcome_not_a_retryable_error() {
    use lease_conformance::proxy::{Proxy, Verdict};

    let Some(url) = common::url() else { return };
    let table = &common::unique("guard_lost_commit");
    let store = setup(&url, table).await;
    let armed = Arc::new(AtomicBool::new(false));
    let trigger = armed.clone();
    let proxy = Proxy::start_intercepted(common::upstream(&url), move || {
        let trigger = trigger.clone();
        move |bytes: &[u8]| {
            // A COM_QUERY packet (length, sequence, 0x03) of `COMMIT`.
            let commit = bytes.len() >= 11 && bytes[4] == 3 && &bytes[5..11] == b"COMMIT";
            if commit && trigger.swap(false, Ordering::SeqCst) {
                Verdict::LoseTheAnswer
            } else {
                Verdict::Forward
            }
        }
    })
    .await
    .unwrap();
    let proxied = MySqlStore::builder(&common::with_param(
        &lease_conformance::network::url_via(&url, proxy.addr()).unwrap(),
        "prefer_socket=false",
    ))
    .unwrap()
    .with_table(table)
    .with_pool_constraints(1, 1)
    .connect()
    .await
    .unwrap();
    let leases = Leases::new(store.clone());
    let ctx = context(&leases, "lost-commit").await;
    let term = ctx.term();
    let sql = format!("INSERT INTO {table}_biz VALUES (1, ?)");
    armed.store(true, Ordering::SeqCst);
    let err = proxied
        .transaction(&ctx, |tx| {
            Box::pin(async move { tx.exec_drop(sql, (term,)).await })
        })
        .await
        .unwrap_err();
    assert!(!armed.load(Ordering::SeqCst), "the COMMIT never went out");
    assert!(
        !err.is_retryable(),
        "a lost answer to COMMIT must not read as retryable: {err:?}"
    );
    assert!(err.is_outcome_unknown(), "{err:?}");
    assert_eq!(
        biz_rows(&store, table).await,
        vec![(1, term)],
        "the server committed the work whose answer was lost"
    );
    // The store serves the next transaction on a new connection.
    let sql = format!("INSERT INTO {table}_biz VALUES (2, ?)");
    proxied
        .transaction(&ctx, |tx| {
            Box::pin(async move { tx.exec_drop(sql, (term,)).await })
        })
        .await
        .unwrap();
    teardown(&store, table).await;
}
