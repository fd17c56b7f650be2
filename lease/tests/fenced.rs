//! Fenced transactions through the facade: the same program on SQLite,
//! PostgreSQL and MariaDB, only the URL and the business SQL differing; and
//! each dialect's guard statement run by hand in a raw driver transaction.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a panic is its failure report

use std::sync::{Arc, Mutex};
use std::time::Duration;

mod common;

use dblease::{
    Backend, BoxError, CancellationToken, EndCause, GuardError, LeaseContext, LostCause, Timings,
};

/// The business SQL, the one part of the program that differs by database.
struct Sql {
    create: String,
    insert: String,
    count: String,
    drop: String,
}

fn sql_for(backend: &Backend, table: &str) -> Sql {
    let (create, insert) = match backend.name() {
        "postgres" => (
            format!("CREATE TABLE {table} (id serial PRIMARY KEY, term bigint NOT NULL)"),
            format!("INSERT INTO {table} (term) VALUES ($1)"),
        ),
        "mysql" => (
            format!(
                "CREATE TABLE {table} (id INT AUTO_INCREMENT PRIMARY KEY, term BIGINT NOT NULL)"
            ),
            format!("INSERT INTO {table} (term) VALUES (?)"),
        ),
        _ => (
            format!("CREATE TABLE {table} (id INTEGER PRIMARY KEY, term INTEGER NOT NULL)"),
            format!("INSERT INTO {table} (term) VALUES (?1)"),
        ),
    };
    Sql {
        create,
        insert,
        count: format!("SELECT count(*) FROM {table}"),
        drop: format!("DROP TABLE {table}"),
    }
}

/// One statement in a guarded transaction, with the term as its one
/// parameter when given; the rows it changed, or the count it read.
async fn guarded(
    backend: &Backend,
    ctx: &LeaseContext,
    sql: &str,
    term: Option<i64>,
    read: bool,
) -> Result<i64, GuardError<BoxError>> {
    let sql = sql.to_owned();
    match backend {
        #[cfg(feature = "sqlite")]
        Backend::Sqlite(store) => {
            store
                .transaction(ctx, move |tx| {
                    let n = match (read, term) {
                        (true, _) => tx.query_row(&sql, [], |r| r.get::<_, i64>(0))?,
                        (false, Some(t)) => i64::try_from(tx.execute(&sql, [t])?)?,
                        (false, None) => i64::try_from(tx.execute(&sql, [])?)?,
                    };
                    Ok::<_, BoxError>(n)
                })
                .await
        }
        #[cfg(feature = "postgres")]
        Backend::Postgres(store) => {
            store
                .transaction(ctx, move |tx| {
                    Box::pin(async move {
                        let n = match (read, term) {
                            (true, _) => tx.query_one(&sql, &[]).await?.try_get::<_, i64>(0)?,
                            (false, Some(t)) => i64::try_from(tx.execute(&sql, &[&t]).await?)?,
                            (false, None) => i64::try_from(tx.execute(&sql, &[]).await?)?,
                        };
                        Ok::<_, BoxError>(n)
                    })
                })
                .await
        }
        #[cfg(feature = "mysql")]
        Backend::MySql(store) => {
            use dblease::mysql::mysql_async::prelude::Queryable;
            store
                .transaction(ctx, move |tx| {
                    Box::pin(async move {
                        let n = match (read, term) {
                            (true, _) => tx.query_first::<i64, _>(&sql).await?.unwrap_or(0),
                            (false, Some(t)) => {
                                tx.exec_drop(&sql, (t,)).await?;
                                i64::try_from(tx.affected_rows())?
                            }
                            (false, None) => {
                                tx.query_drop(&sql).await?;
                                i64::try_from(tx.affected_rows())?
                            }
                        };
                        Ok::<_, BoxError>(n)
                    })
                })
                .await
        }
        #[allow(unreachable_patterns)]
        _ => unreachable!("a backend this build has"),
    }
}

fn unique(tag: &str) -> String {
    lease_testkit::unique(&format!("{tag}_"))
}

/// The program, written once: a guarded write under a held lease commits;
/// the same write under a released lease, or a lease a successor took, is
/// refused as `Lost` before it runs; under an ended context it is refused
/// as `Ended`; the work's own error comes back as `Work`. The error
/// handling is the same code on every database.
async fn program(url: &str, tag: &str) {
    // The leases on a table of the test's own, never a server's gst_leases.
    let lease_table = common::own_table(url);
    let backend = common::backend_on(url, &lease_table.name, &Timings::default()).await;
    let leases = backend.leases();
    leases.migrate().await.unwrap();
    let table = unique(&format!("fenced_{tag}"));
    let sql = sql_for(&backend, &table);
    let name = format!("lock:{table}");

    let handle = leases
        .claim(&name)
        .await
        .unwrap()
        .expect("a new name is free");
    let ctx = LeaseContext::new(handle.clone(), CancellationToken::new());
    let term = i64::try_from(ctx.term()).unwrap();
    let _ = guarded(&backend, &ctx, &sql.create, None, false)
        .await
        .unwrap();
    let written = guarded(&backend, &ctx, &sql.insert, Some(term), false).await;
    assert_eq!(written.unwrap(), 1, "{tag}: the held lease writes");

    // The work's own error: rolled back, returned as Work.
    let missing = format!("INSERT INTO {table}_missing (term) VALUES (1)");
    let err = guarded(&backend, &ctx, &missing, None, false)
        .await
        .unwrap_err();
    assert!(matches!(err, GuardError::Work(_)), "{tag}: {err:?}");
    assert!(!err.is_lost() && !err.is_retryable(), "{tag}: {err:?}");

    // Released, then taken by a successor: refused as lost, nothing written.
    handle.release().await.unwrap();
    let err = guarded(&backend, &ctx, &sql.insert, Some(term), false)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, GuardError::Lost(e) if e.lost_cause() == Some(LostCause::NotHolder)),
        "{tag}: {err:?}"
    );
    let successor = leases.claim(&name).await.unwrap().expect("released");
    assert_eq!(successor.term(), 2);
    let err = guarded(&backend, &ctx, &sql.insert, Some(term), false)
        .await
        .unwrap_err();
    assert!(err.is_lost(), "{tag}: {err:?}");

    // An ended context: refused as Ended, nothing sent.
    let ended = LeaseContext::new(successor.clone(), CancellationToken::new());
    ended.end(EndCause::ParentCancelled);
    let err = guarded(&backend, &ended, &sql.insert, Some(2), false)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            GuardError::Ended {
                cause: Some(EndCause::ParentCancelled),
                ..
            }
        ),
        "{tag}: {err:?}"
    );

    let ctx2 = LeaseContext::new(successor.clone(), CancellationToken::new());
    let rows = guarded(&backend, &ctx2, &sql.count, None, true)
        .await
        .unwrap();
    assert_eq!(rows, 1, "{tag}: only the held lease's write landed");
    let _ = guarded(&backend, &ctx2, &sql.drop, None, false)
        .await
        .unwrap();
    successor.release().await.unwrap();
}

/// A lease of 800 ms, not renewed by these tests: it runs out on its own.
fn short() -> Timings {
    lease_conformance::fence_timings()
}

/// A raw driver transaction, fenced by hand with the dialect's guard
/// statement: begun, guarded (`Some(term)` when the lease verified), then
/// committed.
enum RawTx {
    #[cfg(feature = "sqlite")]
    Sqlite(dblease::sqlite::rusqlite::Connection),
    #[cfg(feature = "postgres")]
    Postgres(dblease::postgres::deadpool_postgres::Object),
    #[cfg(feature = "mysql")]
    MySql(dblease::mysql::mysql_async::Conn),
}

async fn raw_guard(backend: &Backend, handle: &dblease::Handle) -> (RawTx, Option<i64>) {
    // The handle answers its store's statement: a driver that has only the
    // handle needs nothing else.
    let stmt = handle
        .guard_statement()
        .expect("the backends' stores offer a guard statement");
    assert_eq!(stmt, backend.guard_statement());
    let expected = match backend.name() {
        "postgres" => dblease::Dialect::Postgres,
        "mysql" => dblease::Dialect::MySql,
        _ => dblease::Dialect::Sqlite,
    };
    assert_eq!(stmt.dialect(), expected);
    let p = handle.guard_params();
    match backend {
        #[cfg(feature = "sqlite")]
        Backend::Sqlite(store) => {
            use dblease::sqlite::rusqlite::{self, OptionalExtension};
            let conn = rusqlite::Connection::open(store.path().unwrap()).unwrap();
            conn.busy_timeout(Duration::from_secs(5)).unwrap();
            conn.execute_batch(stmt.begin()).unwrap();
            let term = conn
                .query_row(
                    stmt.sql(),
                    rusqlite::params![p.name, p.token.expose(), p.term],
                    |r| r.get(0),
                )
                .optional()
                .unwrap();
            (RawTx::Sqlite(conn), term)
        }
        #[cfg(feature = "postgres")]
        Backend::Postgres(store) => {
            let client = store.pool().get().await.unwrap();
            client.batch_execute(stmt.begin()).await.unwrap();
            let term = client
                .query_opt(stmt.sql(), &[&p.name, &p.token.expose(), &p.term])
                .await
                .unwrap()
                .map(|row| row.get(0));
            (RawTx::Postgres(client), term)
        }
        #[cfg(feature = "mysql")]
        Backend::MySql(store) => {
            use dblease::mysql::mysql_async::prelude::Queryable;
            let mut conn = store.pool().get_conn().await.unwrap();
            conn.query_drop(stmt.begin()).await.unwrap();
            let term = conn
                .exec_first::<i64, _, _>(stmt.sql(), (p.name, p.token.expose(), p.term))
                .await
                .unwrap();
            (RawTx::MySql(conn), term)
        }
        #[allow(unreachable_patterns)]
        _ => unreachable!("a backend this build has"),
    }
}

async fn raw_commit(tx: RawTx) {
    match tx {
        #[cfg(feature = "sqlite")]
        RawTx::Sqlite(conn) => conn.execute_batch("COMMIT").unwrap(),
        #[cfg(feature = "postgres")]
        RawTx::Postgres(client) => client.batch_execute("COMMIT").await.unwrap(),
        #[cfg(feature = "mysql")]
        RawTx::MySql(mut conn) => {
            use dblease::mysql::mysql_async::prelude::Queryable;
            conn.query_drop("COMMIT").await.unwrap();
        }
    }
}

/// The guard statement by hand: it verifies the handle's lease and locks
/// its row, so a successor's claim made once the lease has run out waits
/// for the raw transaction to commit, then wins with the next term; and the
/// old handle's guard finds no row afterwards.
async fn guard_by_hand(url: &str, tag: &str) {
    let lease_table = common::own_table(url);
    // The store keeps the default bounds: the raw transaction by hand runs
    // on one of its connections and stays open past the short lease (on
    // MariaDB the short timings' idle bound would end it). The holder's
    // short timings are taken unchecked against them.
    let backend = common::backend_on(url, &lease_table.name, &Timings::default()).await;
    let leases = backend.leases().with_timings_unchecked(short());
    leases.migrate().await.unwrap();
    let name = format!("lock:{}", unique(&format!("by_hand_{tag}")));
    let stale = leases
        .claim(&name)
        .await
        .unwrap()
        .expect("a new name is free");

    let (tx, verified) = raw_guard(&backend, &stale).await;
    assert_eq!(
        verified,
        Some(1),
        "{tag}: the guard verifies the held lease"
    );
    // Past the lease, not renewed: only the raw transaction's lock keeps the
    // name from a successor now.
    tokio::time::sleep(Duration::from_millis(1_200)).await;

    let events = Arc::new(Mutex::new(Vec::new()));
    let claim = {
        let (leases, name, events) = (leases.clone(), name.clone(), Arc::clone(&events));
        tokio::spawn(async move {
            let got = leases.claim(&name).await;
            events.lock().unwrap().push("claimed");
            got
        })
    };
    // Generous: an unfenced claim returns within milliseconds.
    tokio::time::sleep(Duration::from_millis(700)).await;
    events.lock().unwrap().push("committing");
    raw_commit(tx).await;
    let successor = claim
        .await
        .unwrap()
        .unwrap()
        .expect("the successor claims once the transaction ended");
    assert_eq!(
        *events.lock().unwrap(),
        ["committing", "claimed"],
        "{tag}: the successor's claim did not wait for the guarded transaction"
    );
    assert_eq!(successor.term(), 2, "{tag}");

    let (tx, verified) = raw_guard(&backend, &stale).await;
    assert_eq!(verified, None, "{tag}: the stale handle no longer verifies");
    raw_commit(tx).await;
    successor.release().await.unwrap();
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_fenced_write() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("leases.db").display());
    program(&url, "sqlite").await;
    guard_by_hand(&url, "sqlite").await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_fenced_write() {
    if let Some(url) = lease_conformance::env_url("LEASE_TEST_POSTGRES_URL") {
        program(&url, "postgres").await;
        guard_by_hand(&url, "postgres").await;
    }
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_fenced_write() {
    if let Some(url) = lease_conformance::env_url("LEASE_TEST_MYSQL_URL") {
        program(&url, "mariadb").await;
        guard_by_hand(&url, "mariadb").await;
    }
}

/// The work of a stale holder: verified, it says so on `started`, stalls
/// (busy on the server, not idle) for `stall_ms`, then writes its term.
async fn stalled_write(
    backend: &Backend,
    ctx: &LeaseContext,
    table: &str,
    stall_ms: u64,
    started: tokio::sync::oneshot::Sender<()>,
) -> Result<(), GuardError<BoxError>> {
    let term = i64::try_from(ctx.term()).unwrap();
    match backend {
        #[cfg(feature = "sqlite")]
        Backend::Sqlite(store) => {
            let insert = format!("INSERT INTO {table} (term) VALUES (?1)");
            store
                .transaction(ctx, move |tx| {
                    let _ = started.send(());
                    std::thread::sleep(Duration::from_millis(stall_ms));
                    let _ = tx.execute(&insert, [term])?;
                    Ok::<_, BoxError>(())
                })
                .await
        }
        #[cfg(feature = "postgres")]
        Backend::Postgres(store) => {
            let insert = format!("INSERT INTO {table} (term) VALUES ($1)");
            let secs = Duration::from_millis(stall_ms).as_secs_f64();
            store
                .transaction(ctx, move |tx| {
                    Box::pin(async move {
                        let _ = started.send(());
                        let _ = tx.execute("SELECT pg_sleep($1)", &[&secs]).await?;
                        let _ = tx.execute(&insert, &[&term]).await?;
                        Ok::<_, BoxError>(())
                    })
                })
                .await
        }
        #[cfg(feature = "mysql")]
        Backend::MySql(store) => {
            use dblease::mysql::mysql_async::prelude::Queryable;
            let insert = format!("INSERT INTO {table} (term) VALUES (?)");
            let secs = Duration::from_millis(stall_ms).as_secs_f64();
            store
                .transaction(ctx, move |tx| {
                    Box::pin(async move {
                        let _ = started.send(());
                        tx.exec_drop("DO SLEEP(?)", (secs,)).await?;
                        tx.exec_drop(&insert, (term,)).await?;
                        Ok::<_, BoxError>(())
                    })
                })
                .await
        }
        #[allow(unreachable_patterns)]
        _ => unreachable!("a backend this build has"),
    }
}

/// A stale holder's guarded transaction, stalled past its lease, never
/// commits after its successor's claim: 20 trials. In each, the successor
/// (another store on the same database) claims once the lease has run out
/// by the database clock, while the stale transaction stalls; the claim
/// waits for it, wins with the next term, and by the time it returns the
/// stale write is either there already or never comes.
async fn no_stale_commit(url: &str, tag: &str) {
    const TRIALS: usize = 20;
    let lease_table = common::own_table(url);
    // The stale holder's store is built with the tests' timings, and its
    // coordinator takes them. The rival's has the defaults: its claims may
    // wait up to 5 s for the fence (the stalled transaction's end), room
    // for a loaded machine.
    let backend = common::backend_on(url, &lease_table.name, &short()).await;
    let rival = common::backend_on(url, &lease_table.name, &Timings::default()).await;
    let leases = backend.leases();
    let rivals = rival.leases();
    leases.migrate().await.unwrap();
    let table = unique(&format!("stale_{tag}"));
    let sql = sql_for(&backend, &table);
    // Setup, reads and cleanup under leases of the default timings (whose
    // bounds the store's, shorter, fit).
    let plain = backend.leases().with_timings(Timings::default());
    let setup = plain
        .claim(&format!("lock:{table}"))
        .await
        .unwrap()
        .unwrap();
    let setup_ctx = LeaseContext::new(setup.clone(), CancellationToken::new());
    let _ = guarded(&backend, &setup_ctx, &sql.create, None, false)
        .await
        .unwrap();
    setup.release().await.unwrap();
    let count_term =
        |term: u64| format!("SELECT count(*) FROM {table} WHERE term = {term} AND id > 0");

    let mut stale_commits = 0;
    for trial in 0..TRIALS {
        let name = format!("lock:{table}:{trial}");
        let stale = leases.claim(&name).await.unwrap().expect("a new name");
        let ctx = LeaseContext::new(stale.clone(), CancellationToken::new());
        let (started, work_started) = tokio::sync::oneshot::channel();
        let tx = {
            let (backend, ctx, table) = (backend.clone(), ctx.clone(), table.clone());
            // Stalls well past the 800 ms lease and the rival's claim.
            tokio::spawn(async move { stalled_write(&backend, &ctx, &table, 1_400, started).await })
        };
        work_started.await.unwrap();
        tokio::time::sleep(Duration::from_millis(1_000)).await; // past the lease
        let successor = rivals
            .claim(&name)
            .await
            .unwrap()
            .expect("the successor claims once the stale transaction ended");
        assert_eq!(successor.term(), stale.term() + 1, "{tag}: trial {trial}");
        let read = plain
            .claim(&format!("lock:{table}:read:{trial}"))
            .await
            .unwrap()
            .unwrap();
        let reader = LeaseContext::new(read.clone(), CancellationToken::new());
        let seen_at_claim = guarded(&backend, &reader, &count_term(stale.term()), None, true)
            .await
            .unwrap();
        let outcome = tx.await.unwrap();
        let seen_after = guarded(&backend, &reader, &count_term(stale.term()), None, true)
            .await
            .unwrap();
        if seen_after > seen_at_claim {
            stale_commits += 1;
        }
        // Each trial's stale row is told apart by deleting it.
        if outcome.is_ok() {
            let clear = format!("DELETE FROM {table} WHERE id > 0");
            let _ = guarded(&backend, &reader, &clear, None, false)
                .await
                .unwrap();
        }
        successor.release().await.unwrap();
        read.release().await.unwrap();
    }
    let setup = plain
        .claim(&format!("lock:{table}:drop"))
        .await
        .unwrap()
        .unwrap();
    let setup_ctx = LeaseContext::new(setup.clone(), CancellationToken::new());
    assert_eq!(
        stale_commits, 0,
        "{tag}: stale commits after the successor's claim"
    );
    let _ = guarded(&backend, &setup_ctx, &sql.drop, None, false)
        .await
        .unwrap();
    setup.release().await.unwrap();
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_no_stale_commit() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("leases.db").display());
    no_stale_commit(&url, "sqlite").await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_no_stale_commit() {
    if let Some(url) = lease_conformance::env_url("LEASE_TEST_POSTGRES_URL") {
        no_stale_commit(&url, "postgres").await;
    }
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_no_stale_commit() {
    if let Some(url) = lease_conformance::env_url("LEASE_TEST_MYSQL_URL") {
        no_stale_commit(&url, "mariadb").await;
    }
}
