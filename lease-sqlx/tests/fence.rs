//! Fenced sqlx transactions on real servers (`LEASE_TEST_POSTGRES_URL`,
//! `LEASE_TEST_MYSQL_URL`) and a SQLite file: the same scenarios on each
//! dialect, the leases kept by the backend crate's store on the same
//! database (its guard statement reached through the handle).
//!
//! - a stale holder's guarded transaction stalled past its lease never
//!   commits after a successor's claim (20 trials, 0 stale commits), and the
//!   successor's claim waits for it, then wins with term + 1;
//! - a guard on a lost lease runs no business statement;
//! - on PostgreSQL, the holder's own renewals pass its guarded transaction;
//! - rollback on the work's error, on its panic, on the context's end;
//! - `fenced` (a transaction the caller began) and `guard` (the bare fence).
//!
//! On every database the holder's leases are on the sqlx pool itself
//! ([`lease_sqlx::PgLeaseStore`], [`lease_sqlx::MySqlLeaseStore`],
//! [`lease_sqlx::SqliteLeaseStore`]) and its rival's on the backend crate's
//! store, sharing the table.

#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lease_core::{
    BoxError, CancellationToken, Dialect, GuardError, GuardStatement, LeaseContext, LeaseStore,
    Leases, LostCause, Timings,
};

/// A lease of 800 ms, not renewed by these tests: it runs out on its own.
fn short() -> Timings {
    lease_conformance::fence_timings()
}

/// A name no other test, process or run uses.
fn unique(tag: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    format!(
        "lsx_{tag}_{}_{}_{n}",
        now.as_secs() % 100_000,
        std::process::id()
    )
}

/// A context on `leases`' claim of a new name, not tied to renewals: it
/// ends only when the test cancels `token`.
async fn context(leases: &Leases, name: &str, token: CancellationToken) -> LeaseContext {
    let handle = leases.claim(name).await.unwrap().expect("a new name");
    LeaseContext::new(handle, token)
}

/// What a dialect's scenarios need: the business SQL, and how to stall
/// inside a transaction (busy on the server where the database can).
struct Sql {
    create: String,
    insert: String,
    count_term: String,
    drop: String,
    /// A statement taking `$1` seconds (a float), or `None` to stall on
    /// the client (SQLite: the transaction holds the write lock meanwhile).
    sleep: Option<&'static str>,
}

macro_rules! scenarios {
    ($db:ty, $open:ident) => {
        use super::*;

        type Db = $db;

        /// A stale holder's guarded transaction, stalled past its lease,
        /// never commits after its successor's claim: 20 trials.
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn a_stale_transaction_never_commits_after_the_successors_claim() {
            const TRIALS: usize = 20;
            let Some(env) = $open("stale").await else {
                return;
            };
            let (pool, sql) = (&env.pool, &env.sql);
            let leases = Leases::from_arc(env.store.clone()).with_timings(short());
            // The default timings: each claim may wait up to 5 s for the
            // fence (the stalled transaction's end), room for a loaded
            // machine; the successors release at the end of each trial.
            let rivals = Leases::from_arc(env.rival.clone());
            let mut stale_commits = 0;
            for trial in 0..TRIALS {
                let name = format!("job:{trial}");
                let ctx = context(&leases, &name, CancellationToken::new()).await;
                let stale_term = ctx.term();
                // Every trial's first term is 1: count from the rows so far.
                let before = env.count(stale_term).await;
                let (started, work_started) = tokio::sync::oneshot::channel();
                let stalled = {
                    let (pool, ctx) = (pool.clone(), ctx.clone());
                    let (insert, sleep) = (sql.insert.clone(), sql.sleep);
                    tokio::spawn(async move {
                        let term = i64::try_from(ctx.term()).unwrap();
                        lease_sqlx::transaction(&pool, &ctx, move |tx| {
                            Box::pin(async move {
                                let _ = started.send(());
                                match sleep {
                                    Some(sleep) => {
                                        let _ = sqlx::query::<Db>(sleep)
                                            .bind(1.4_f64)
                                            .execute(&mut **tx)
                                            .await?;
                                    }
                                    None => tokio::time::sleep(Duration::from_millis(1_400)).await,
                                }
                                let _ = sqlx::query::<Db>(sqlx::AssertSqlSafe(insert))
                                    .bind(term)
                                    .execute(&mut **tx)
                                    .await?;
                                Ok::<_, sqlx::Error>(())
                            })
                        })
                        .await
                    })
                };
                work_started.await.unwrap();
                tokio::time::sleep(Duration::from_millis(1_000)).await; // past the lease
                let successor = rivals
                    .claim(&name)
                    .await
                    .unwrap()
                    .expect("the successor claims once the stale transaction ended");
                assert_eq!(successor.term(), stale_term + 1, "trial {trial}");
                let seen_at_claim = env.count(stale_term).await;
                let outcome = stalled.await.unwrap();
                let seen_after = env.count(stale_term).await;
                if seen_after > seen_at_claim {
                    stale_commits += 1;
                }
                // The claim waited for the stale transaction: it committed
                // (its lease was verified before it ran out) and is seen.
                assert!(outcome.is_ok(), "trial {trial}: {outcome:?}");
                assert_eq!(
                    seen_at_claim,
                    before + 1,
                    "trial {trial}: the claim did not wait"
                );
                successor.release().await.unwrap();
            }
            assert_eq!(
                stale_commits, 0,
                "stale commits after the successor's claim"
            );
            env.teardown().await;
        }

        /// A lease that was taken over: the guard refuses, and not one
        /// statement of the work runs.
        #[tokio::test]
        async fn a_lost_lease_runs_no_statement_of_the_work() {
            let Some(env) = $open("lost").await else {
                return;
            };
            let leases = Leases::from_arc(env.store.clone()).with_timings(short());
            // The rival's store (a backend crate's) keeps the default
            // bounds; its claim comes after the expiry and waits for nothing.
            let rivals = Leases::from_arc(env.rival.clone()).with_timings_unchecked(short());
            let ctx = context(&leases, "job", CancellationToken::new()).await;
            tokio::time::sleep(Duration::from_millis(900)).await;
            let successor = rivals.claim("job").await.unwrap().expect("expired");
            let ran = Arc::new(AtomicBool::new(false));
            let flag = ran.clone();
            let insert = env.sql.insert.clone();
            let term = i64::try_from(ctx.term()).unwrap();
            let err = lease_sqlx::transaction(&env.pool, &ctx, move |tx| {
                Box::pin(async move {
                    flag.store(true, Ordering::SeqCst);
                    sqlx::query::<Db>(sqlx::AssertSqlSafe(insert))
                        .bind(term)
                        .execute(&mut **tx)
                        .await
                })
            })
            .await
            .unwrap_err();
            assert!(
                matches!(
                    &err,
                    GuardError::Lost(lease_core::Error::Lost {
                        cause: LostCause::NotHolder,
                        ..
                    })
                ),
                "{err:?}"
            );
            assert!(!ran.load(Ordering::SeqCst), "the work ran");
            assert_eq!(env.count(ctx.term()).await, 0);
            // The bare fence, on a transaction of the caller's: refused too.
            let mut tx = env.pool.begin().await.unwrap();
            let bare = lease_sqlx::guard(&mut tx, ctx.handle()).await.unwrap_err();
            assert!(bare.is_lost(), "{bare:?}");
            drop(tx);
            // The successor's own guard passes.
            let mut tx = env.pool.begin().await.unwrap();
            lease_sqlx::guard(&mut tx, &successor).await.unwrap();
            tx.commit().await.unwrap();
            env.teardown().await;
        }

        /// `Err` from the work rolls back; a panic rolls back and reaches
        /// the caller; `Ok` commits (through `fenced` as well).
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn the_works_error_and_panic_roll_back() {
            let Some(env) = $open("rollback").await else {
                return;
            };
            let leases = Leases::from_arc(env.store.clone());
            let ctx = context(&leases, "job", CancellationToken::new()).await;
            let term = i64::try_from(ctx.term()).unwrap();

            let insert = env.sql.insert.clone();
            let err = lease_sqlx::transaction(&env.pool, &ctx, move |tx| {
                Box::pin(async move {
                    let _ = sqlx::query::<Db>(sqlx::AssertSqlSafe(insert))
                        .bind(term)
                        .execute(&mut **tx)
                        .await
                        .map_err(BoxError::from)?;
                    Err::<(), BoxError>("refused by the business rule".into())
                })
            })
            .await
            .unwrap_err();
            assert_eq!(
                err.into_work().unwrap().to_string(),
                "refused by the business rule"
            );
            assert_eq!(env.count(ctx.term()).await, 0, "rolled back on Err");

            let panicked = {
                let (pool, ctx, insert) = (env.pool.clone(), ctx.clone(), env.sql.insert.clone());
                tokio::spawn(async move {
                    lease_sqlx::transaction(&pool, &ctx, move |tx| {
                        Box::pin(async move {
                            let _ = sqlx::query::<Db>(sqlx::AssertSqlSafe(insert))
                                .bind(term)
                                .execute(&mut **tx)
                                .await?;
                            if term > 0 {
                                panic!("the work panics");
                            }
                            Ok::<(), sqlx::Error>(())
                        })
                    })
                    .await
                })
                .await
            };
            assert!(panicked.unwrap_err().is_panic());
            assert_eq!(env.count(ctx.term()).await, 0, "rolled back on panic");

            // A transaction the caller began, fenced: commits on Ok.
            let tx = env.pool.begin().await.unwrap();
            let insert = env.sql.insert.clone();
            let _ = lease_sqlx::fenced(tx, &ctx, move |tx| {
                Box::pin(async move {
                    sqlx::query::<Db>(sqlx::AssertSqlSafe(insert))
                        .bind(term)
                        .execute(&mut **tx)
                        .await
                })
            })
            .await
            .unwrap();
            assert_eq!(env.count(ctx.term()).await, 1, "committed on Ok");
            env.teardown().await;
        }

        /// The context ending mid-transaction: the call returns at once with
        /// the context's cause, and the write is rolled back.
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn the_context_ending_rolls_back() {
            let Some(env) = $open("ended").await else {
                return;
            };
            let leases = Leases::from_arc(env.store.clone());
            let token = CancellationToken::new();
            let ctx = context(&leases, "job", token.clone()).await;
            let term = i64::try_from(ctx.term()).unwrap();
            let (wrote, written) = tokio::sync::oneshot::channel();
            let insert = env.sql.insert.clone();
            let call = {
                let (pool, ctx) = (env.pool.clone(), ctx.clone());
                tokio::spawn(async move {
                    lease_sqlx::transaction(&pool, &ctx, move |tx| {
                        Box::pin(async move {
                            let _ = sqlx::query::<Db>(sqlx::AssertSqlSafe(insert))
                                .bind(term)
                                .execute(&mut **tx)
                                .await?;
                            let _ = wrote.send(());
                            // Idle inside the transaction, far past the test.
                            tokio::time::sleep(Duration::from_secs(60)).await;
                            Ok::<(), sqlx::Error>(())
                        })
                    })
                    .await
                })
            };
            written.await.unwrap();
            let at = tokio::time::Instant::now();
            token.cancel();
            let err = tokio::time::timeout(Duration::from_secs(2), call)
                .await
                .expect("returns at once")
                .unwrap()
                .unwrap_err();
            assert!(at.elapsed() < Duration::from_secs(1));
            assert!(matches!(err, GuardError::Ended { .. }), "{err:?}");
            // Rolled back, and the pool gives working connections again.
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert_eq!(env.count(ctx.term()).await, 0);
            // An ended context sends nothing.
            let err = lease_sqlx::transaction(&env.pool, &ctx, |_tx| {
                Box::pin(async move { Ok::<(), sqlx::Error>(()) })
            })
            .await
            .unwrap_err();
            assert!(matches!(err, GuardError::Ended { .. }), "{err:?}");
            env.teardown().await;
        }

        /// A handle whose store is of another dialect (here, an in-memory
        /// store with no guard at all) is refused before anything is sent.
        #[tokio::test]
        async fn a_store_without_a_guard_of_this_dialect_is_refused() {
            let Some(env) = $open("nostore").await else {
                return;
            };
            let other: Arc<dyn LeaseStore> =
                Arc::new(lease_conformance::reference::MemoryStore::new());
            let leases = Leases::from_arc(other);
            leases.migrate().await.unwrap();
            let ctx = context(&leases, "job", CancellationToken::new()).await;
            assert!(ctx.handle().guard_statement().is_none());
            let err = lease_sqlx::transaction(&env.pool, &ctx, |_tx| {
                Box::pin(async move { Ok::<(), sqlx::Error>(()) })
            })
            .await
            .unwrap_err();
            assert!(matches!(err, GuardError::Database { .. }), "{err:?}");
            assert!(err.to_string().contains("\"job\""), "{err}");
            // A statement of another dialect is refused by the bare fence.
            let foreign = if lease_sqlx::dialect_of::<Db>() == Dialect::Postgres {
                Dialect::MySql
            } else {
                Dialect::Postgres
            };
            let statement = GuardStatement::new(foreign, "BEGIN", "SELECT 1".into());
            let mut tx = env.pool.begin().await.unwrap();
            let err = lease_sqlx::guard_with(&mut tx, &statement, ctx.handle())
                .await
                .unwrap_err();
            let GuardError::Database { kind, source, .. } = err else {
                panic!("{err:?}");
            };
            assert_eq!(kind, lease_core::DbErrorKind::Other);
            assert!(source.to_string().contains("fences only"), "{source}");
            drop(tx);
            env.teardown().await;
        }
    };
}

/// Issue 23, item 11, through sqlx: the answer to a guarded transaction's
/// `COMMIT` is lost (a proxy forwards the `COMMIT`, the server commits, the
/// client never hears). The error says the outcome is unknown and is not
/// retryable; the work is in the database, so a caller that retried would
/// have written it twice. `$url` names the server (`$port` its default
/// port), `$plain` the URL parameter that turns TLS off (the proxy reads
/// the statements), `$pool` the pool options of `$db`.
macro_rules! lost_commit {
    ($db:ty, $url:literal, $port:literal, $plain:literal, $pool:expr) => {
        #[tokio::test]
        async fn a_lost_answer_to_commit_is_an_unknown_outcome_not_a_retryable_error() {
            use lease_conformance::proxy::{Proxy, Verdict};

            let Some(url) = lease_conformance::env_url($url) else {
                return;
            };
            let Some(env) = open("lost_commit").await else {
                return;
            };
            let armed = Arc::new(AtomicBool::new(false));
            let trigger = armed.clone();
            let upstream = lease_conformance::network::server_of(&url, $port).unwrap();
            let proxy = Proxy::start_intercepted(upstream, move || {
                let trigger = trigger.clone();
                move |bytes: &[u8]| {
                    let commit = bytes.windows(6).any(|w| w == b"COMMIT");
                    if commit && trigger.swap(false, Ordering::SeqCst) {
                        Verdict::LoseTheAnswer
                    } else {
                        Verdict::Forward
                    }
                }
            })
            .await
            .unwrap();
            let proxied = lease_testkit::url::with_param(
                &lease_conformance::network::url_via(&url, proxy.addr()).unwrap(),
                $plain,
            );
            let pool: sqlx::Pool<$db> = $pool.max_connections(1).connect(&proxied).await.unwrap();
            let leases = Leases::from_arc(env.store.clone());
            let ctx = context(&leases, "lost-commit", CancellationToken::new()).await;
            let term = i64::try_from(ctx.term()).unwrap();
            let insert = env.sql.insert.clone();
            armed.store(true, Ordering::SeqCst);
            let err = lease_sqlx::transaction(&pool, &ctx, move |tx| {
                Box::pin(async move {
                    sqlx::query::<$db>(sqlx::AssertSqlSafe(insert))
                        .bind(term)
                        .execute(&mut **tx)
                        .await
                })
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
                env.count(ctx.term()).await,
                1,
                "the server committed the work whose answer was lost"
            );
            pool.close().await;
            env.teardown().await;
        }
    };
}

/// One dialect's test environment: the sqlx pool, the lease store and a
/// rival store (two replicas) on one database, the business table.
struct Env<DB: sqlx::Database> {
    pool: sqlx::Pool<DB>,
    store: Arc<dyn LeaseStore>,
    rival: Arc<dyn LeaseStore>,
    sql: Sql,
    _dir: Option<tempfile::TempDir>,
}

macro_rules! env_impl {
    ($db:ty) => {
        impl Env<$db> {
            async fn count(&self, term: u64) -> i64 {
                let term = i64::try_from(term).unwrap();
                sqlx::query_scalar::<$db, i64>(sqlx::AssertSqlSafe(self.sql.count_term.clone()))
                    .bind(term)
                    .fetch_one(&self.pool)
                    .await
                    .unwrap()
            }

            async fn teardown(self) {
                let _ = sqlx::query::<$db>(sqlx::AssertSqlSafe(self.sql.drop.clone()))
                    .execute(&self.pool)
                    .await
                    .unwrap();
                self.pool.close().await;
            }

            async fn create(&self) {
                let _ = sqlx::query::<$db>(sqlx::AssertSqlSafe(self.sql.create.clone()))
                    .execute(&self.pool)
                    .await
                    .unwrap();
            }
        }
    };
}

/// A guarded transaction on `pool` under `ctx`, its guard run and held
/// open until the sender is used (or dropped).
async fn hold_guarded<DB: lease_sqlx::FenceDatabase>(
    pool: &sqlx::Pool<DB>,
    ctx: LeaseContext,
) -> (
    tokio::task::JoinHandle<Result<(), GuardError<sqlx::Error>>>,
    tokio::sync::oneshot::Sender<()>,
) {
    let (open_tx, opened) = tokio::sync::oneshot::channel();
    let (done_tx, done) = tokio::sync::oneshot::channel::<()>();
    let pool = pool.clone();
    let guarded = tokio::spawn(async move {
        lease_sqlx::transaction(&pool, &ctx, move |_tx| {
            Box::pin(async move {
                let _ = open_tx.send(());
                let _ = done.await;
                Ok::<_, sqlx::Error>(())
            })
        })
        .await
    });
    opened.await.unwrap();
    (guarded, done_tx)
}

fn sql(
    table: &str,
    create: String,
    insert: String,
    sleep: Option<&'static str>,
    drop_lease_table: &str,
) -> Sql {
    Sql {
        create,
        insert,
        count_term: String::new(),
        drop: format!("DROP TABLE {table}{drop_lease_table}"),
        sleep,
    }
}

mod postgres {
    use super::*;

    env_impl!(sqlx::Postgres);

    pub(super) async fn open(tag: &str) -> Option<Env<sqlx::Postgres>> {
        let url = lease_conformance::env_url("LEASE_TEST_POSTGRES_URL")?;
        let table = unique(&format!("pg_{tag}"));
        let leases_table = format!("{table}_leases");
        let connect = || async {
            lease_postgres::PostgresStore::builder(&url)
                .unwrap()
                .with_table(leases_table.clone())
                .connect()
                .await
                .unwrap()
        };
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(8)
            .connect(&url)
            .await
            .unwrap();
        // The holder keeps its leases on the sqlx pool (PgLeaseStore), the
        // rival replica on lease-postgres's store: one table, one fence.
        let store = lease_sqlx::PgLeaseStore::with_table(pool.clone(), &leases_table).unwrap();
        store.migrate().await.unwrap();
        let rival = connect().await;
        let mut sql = sql(
            &table,
            format!("CREATE TABLE {table} (id serial PRIMARY KEY, term bigint NOT NULL)"),
            format!("INSERT INTO {table} (term) VALUES ($1)"),
            Some("SELECT pg_sleep($1)"),
            &format!(", \"{leases_table}\""),
        );
        sql.count_term = format!("SELECT count(*) FROM {table} WHERE term = $1");
        let env = Env {
            pool,
            store: Arc::new(store),
            rival: Arc::new(rival),
            sql,
            _dir: None,
        };
        env.create().await;
        Some(env)
    }

    mod scenarios {
        use super::open;
        scenarios!(sqlx::Postgres, open);
    }

    lost_commit!(
        sqlx::Postgres,
        "LEASE_TEST_POSTGRES_URL",
        5432,
        "sslmode=disable",
        sqlx::postgres::PgPoolOptions::new()
    );

    /// On PostgreSQL a sqlx-guarded transaction holds `FOR KEY SHARE`: the
    /// holder's own renewals and release (through `PgLeaseStore`, on the
    /// same pool) pass it, and a rival's refused claim is not held up.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_holders_own_renewals_are_not_held_up() {
        let Some(env) = open("renewals").await else {
            return;
        };
        let leases = Leases::from_arc(env.store.clone());
        let rivals = Leases::from_arc(env.rival.clone());
        let h = leases.claim("busy").await.unwrap().unwrap();
        let ctx = LeaseContext::new(h.clone(), CancellationToken::new());
        let (guarded, done_tx) = hold_guarded(&env.pool, ctx).await;
        let bound = Duration::from_millis(500);
        for _ in 0..3 {
            tokio::time::timeout(bound, h.renew())
                .await
                .expect("a renewal waited for the holder's own transaction")
                .unwrap();
        }
        let rival = tokio::time::timeout(bound, rivals.claim("busy"))
            .await
            .expect("a refused claim waited for the holder's transaction")
            .unwrap();
        assert!(rival.is_none());
        tokio::time::timeout(bound, h.release())
            .await
            .expect("the release waited for the holder's own transaction")
            .unwrap();
        done_tx.send(()).unwrap();
        guarded.await.unwrap().unwrap();
        env.teardown().await;
    }
}

mod mysql {
    use super::*;

    env_impl!(sqlx::MySql);

    pub(super) async fn open(tag: &str) -> Option<Env<sqlx::MySql>> {
        let url = lease_conformance::env_url("LEASE_TEST_MYSQL_URL")?;
        let table = unique(&format!("my_{tag}"));
        let leases_table = format!("{table}_leases");
        let connect = || async {
            lease_mysql::MySqlStore::builder(&url)
                .unwrap()
                .with_table(leases_table.clone())
                .connect()
                .await
                .unwrap()
        };
        // As on PostgreSQL: the holder's leases on the sqlx pool
        // (MySqlLeaseStore, with lease-mysql's session bounds), the rival's
        // on lease-mysql's store, one table.
        let pool = lease_sqlx::MySqlLeaseStore::pool_options(&Timings::default())
            .max_connections(8)
            .connect(&url)
            .await
            .unwrap();
        let store = lease_sqlx::MySqlLeaseStore::with_table(pool.clone(), &leases_table).unwrap();
        store.migrate().await.unwrap();
        let rival = connect().await;
        let mut sql = sql(
            &table,
            format!(
                "CREATE TABLE {table} (id INT AUTO_INCREMENT PRIMARY KEY, term BIGINT NOT NULL)"
            ),
            format!("INSERT INTO {table} (term) VALUES (?)"),
            Some("DO SLEEP(?)"),
            &format!(", `{leases_table}`"),
        );
        sql.count_term = format!("SELECT count(*) FROM {table} WHERE term = ?");
        let env = Env {
            pool,
            store: Arc::new(store),
            rival: Arc::new(rival),
            sql,
            _dir: None,
        };
        env.create().await;
        Some(env)
    }

    mod scenarios {
        use super::open;
        scenarios!(sqlx::MySql, open);
    }

    lost_commit!(
        sqlx::MySql,
        "LEASE_TEST_MYSQL_URL",
        3306,
        "ssl-mode=disabled",
        sqlx::mysql::MySqlPoolOptions::new()
    );

    /// `MySqlLeaseStore`'s claim is `lease-mysql`'s: a plain read first, so
    /// a claim refused because the name is held takes no lock and does not
    /// wait for the holder's guarded transaction (whose shared lock a
    /// locking claim would queue behind until the lock-wait bound, 3 s);
    /// once the holder's transaction ends and the lease is released, the
    /// same claim wins with term + 1.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_refused_claim_does_not_wait_for_the_guarded_transaction() {
        let Some(env) = open("refused").await else {
            return;
        };
        // Here the holder is lease-mysql's store (its guard statement is
        // the same), and the claimant under test the sqlx store.
        let leases = Leases::from_arc(env.rival.clone());
        let rivals = Leases::from_arc(env.store.clone());
        let h = leases.claim("busy").await.unwrap().unwrap();
        let ctx = LeaseContext::new(h.clone(), CancellationToken::new());
        let (guarded, done_tx) = hold_guarded(&env.pool, ctx).await;
        let bound = Duration::from_millis(1_000);
        for _ in 0..3 {
            let refused = tokio::time::timeout(bound, rivals.claim("busy"))
                .await
                .expect("a refused claim waited for the holder's guarded transaction")
                .unwrap();
            assert!(refused.is_none());
        }
        done_tx.send(()).unwrap();
        guarded.await.unwrap().unwrap();
        h.release().await.unwrap();
        let next = rivals
            .claim("busy")
            .await
            .unwrap()
            .expect("a released name");
        assert_eq!(next.term(), h.term() + 1);
        next.release().await.unwrap();
        env.teardown().await;
    }
}

mod sqlite {
    use super::*;

    env_impl!(sqlx::Sqlite);

    pub(super) async fn open(tag: &str) -> Option<Env<sqlx::Sqlite>> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("leases.db");
        let table = unique(&format!("sl_{tag}"));
        let open = || {
            lease_sqlite::SqliteStoreBuilder::from_path(&path)
                .build()
                .unwrap()
        };
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(5));
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .unwrap();
        // As on PostgreSQL: the holder's leases on the sqlx pool, the
        // rival's on lease-sqlite's store, one table.
        let store = lease_sqlx::SqliteLeaseStore::new(pool.clone());
        store.migrate().await.unwrap();
        let rival = open();
        let mut sql = sql(
            &table,
            format!("CREATE TABLE {table} (id INTEGER PRIMARY KEY, term INTEGER NOT NULL)"),
            format!("INSERT INTO {table} (term) VALUES (?1)"),
            None,
            "",
        );
        sql.count_term = format!("SELECT count(*) FROM {table} WHERE term = ?1");
        let env = Env {
            pool,
            store: Arc::new(store),
            rival: Arc::new(rival),
            sql,
            _dir: Some(dir),
        };
        env.create().await;
        Some(env)
    }

    mod scenarios {
        use super::open;
        scenarios!(sqlx::Sqlite, open);
    }
}
