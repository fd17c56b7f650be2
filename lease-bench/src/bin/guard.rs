//! The guarded transaction beside the same transaction written by hand,
//! on each backend, natively and through sqlx.
//!
//! ```sh
//! cargo run --release -p lease-bench --bin guard -- \
//!     sqlite:///tmp/lease-guard.db \
//!     postgres://postgres@127.0.0.1:5432/test \
//!     mysql://root@127.0.0.1:3306/test
//! ```
//!
//! With no URL it runs on an SQLite file in a temp dir. `--seconds N` sets
//! how long each cell runs (default 2), `--concurrency 1,8` the
//! concurrencies. Each worker holds a lease of its own (claimed on the
//! default table, released at the end) and updates a counter row of its own
//! in `lease_bench_guard_counters`, one `UPDATE` a transaction:
//!
//! - **hand, verify in tx**: `BEGIN`, the dialect's guard statement
//!   ([`Handle::guard_statement`](dblease::Handle::guard_statement)), the
//!   `UPDATE`, `COMMIT`, written with the driver, every statement prepared
//!   once per connection: the floor of a fenced transaction;
//! - **hand, no verify**: `BEGIN`, the `UPDATE`, `COMMIT`;
//! - **guarded**: the store's `transaction`, the work running the same
//!   prepared `UPDATE`;
//! - on PostgreSQL also **guarded, work unprepared**: the work passing the
//!   `UPDATE` as a string (`tx.execute(sql, ..)`), which tokio-postgres
//!   prepares anew on every call: one more round trip;
//! - **sqlx hand, verify in tx** and **sqlx guarded**
//!   (`lease_sqlx::transaction`): the same through a sqlx pool.
//!
//! The ratio column compares each row with the first of its backend.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::error::Error;
use std::sync::Arc;
use std::time::Duration;

use dblease::mysql::mysql_async::{self, prelude::Queryable};
use dblease::{Backend, CancellationToken, GuardStatement, LeaseContext, Timings};
use lease_bench::bench::cell::cell;
use lease_bench::stats::{Latency, Summary, ratio};

type BoxError = Box<dyn Error + Send + Sync>;
type BoxResult<T> = Result<T, BoxError>;

/// The table the transactions write to, one row per worker.
const COUNTERS: &str = "lease_bench_guard_counters";

struct Args {
    urls: Vec<String>,
    seconds: u64,
    concurrency: Vec<usize>,
}

fn args() -> BoxResult<Args> {
    let mut args = Args {
        urls: Vec::new(),
        seconds: 2,
        concurrency: vec![1, 8],
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--seconds" => args.seconds = it.next().ok_or("--seconds N")?.parse()?,
            "--concurrency" => {
                args.concurrency = it
                    .next()
                    .ok_or("--concurrency 1,8")?
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()?;
            }
            "-h" | "--help" => {
                println!("guard [--seconds N] [--concurrency 1,8] [URL...]");
                std::process::exit(0);
            }
            url => args.urls.push(url.to_owned()),
        }
    }
    Ok(args)
}

/// One backend's run: the native store, the sqlx pool beside it, and a
/// context per worker.
struct Target {
    backend: Backend,
    ctxs: Vec<LeaseContext>,
    guard: GuardStatement,
    update: String,
    sqlx: SqlxPool,
}

enum SqlxPool {
    Postgres(sqlx::PgPool),
    MySql(sqlx::MySqlPool),
    Sqlite(sqlx::SqlitePool),
}

/// A long lease, never renewed here: it outlasts the run.
fn long() -> BoxResult<Timings> {
    Ok(Timings::builder()
        .lease(Duration::from_secs(3_600))
        .deadline(Duration::from_secs(1_800))
        .build()?)
}

async fn target(url: &str, workers: usize) -> BoxResult<Target> {
    let backend = dblease::connect_backend(url).await?;
    let leases = backend.leases().with_timings(long()?);
    leases.migrate().await?;
    let (create, update, sqlx) = match &backend {
        Backend::Postgres(_) => (
            format!(
                "CREATE TABLE IF NOT EXISTS {COUNTERS} (id int PRIMARY KEY, n bigint NOT NULL)"
            ),
            format!("UPDATE {COUNTERS} SET n = n + 1 WHERE id = $1"),
            SqlxPool::Postgres(
                sqlx::postgres::PgPoolOptions::new()
                    .max_connections(32)
                    .connect(url)
                    .await?,
            ),
        ),
        Backend::MySql(_) => (
            format!(
                "CREATE TABLE IF NOT EXISTS {COUNTERS} (id INT PRIMARY KEY, n BIGINT NOT NULL)"
            ),
            format!("UPDATE {COUNTERS} SET n = n + 1 WHERE id = ?"),
            SqlxPool::MySql(
                sqlx::mysql::MySqlPoolOptions::new()
                    .max_connections(32)
                    .connect(url)
                    .await?,
            ),
        ),
        Backend::Sqlite(store) => {
            let path = store.path().ok_or("an SQLite file, not :memory:")?;
            let options = sqlx::sqlite::SqliteConnectOptions::new()
                .filename(path)
                .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                .busy_timeout(Duration::from_secs(10));
            (
                format!(
                    "CREATE TABLE IF NOT EXISTS {COUNTERS} (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)"
                ),
                format!("UPDATE {COUNTERS} SET n = n + 1 WHERE id = ?1"),
                SqlxPool::Sqlite(
                    sqlx::sqlite::SqlitePoolOptions::new()
                        .max_connections(4)
                        .connect_with(options)
                        .await?,
                ),
            )
        }
        _ => return Err("a backend this build lacks".into()),
    };
    let mut ctxs = Vec::with_capacity(workers);
    let pid = std::process::id();
    for w in 0..workers {
        let h = leases
            .claim(&format!("bench:guard:{pid}:{w}"))
            .await?
            .ok_or("refused")?;
        ctxs.push(LeaseContext::new(h, CancellationToken::new()));
    }
    let guard = backend.guard_statement();
    let target = Target {
        backend,
        ctxs,
        guard,
        update,
        sqlx,
    };
    target.sqlx_exec(&create).await?;
    for id in 0..workers {
        let insert = match target.sqlx {
            SqlxPool::MySql(_) => format!("INSERT IGNORE INTO {COUNTERS} (id, n) VALUES ({id}, 0)"),
            _ => format!("INSERT INTO {COUNTERS} (id, n) VALUES ({id}, 0) ON CONFLICT DO NOTHING"),
        };
        target.sqlx_exec(&insert).await?;
    }
    Ok(target)
}

impl Target {
    async fn sqlx_exec(&self, sql: &str) -> BoxResult<()> {
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        match &self.sqlx {
            SqlxPool::Postgres(p) => {
                let _ = sqlx::query(sql).execute(p).await?;
            }
            SqlxPool::MySql(p) => {
                let _ = sqlx::query(sql).execute(p).await?;
            }
            SqlxPool::Sqlite(p) => {
                let _ = sqlx::query(sql).execute(p).await?;
            }
        }
        Ok(())
    }

    fn id(w: usize) -> BoxResult<i32> {
        Ok(i32::try_from(w)?)
    }

    /// `BEGIN`, the guard by hand (or not), the `UPDATE`, `COMMIT`.
    async fn hand(&self, w: usize, verify: bool) -> BoxResult<()> {
        let id = Self::id(w)?;
        let p = self.ctxs[w].handle().guard_params();
        match &self.backend {
            Backend::Postgres(store) => {
                let mut client = store.pool().get().await?;
                let tx = client.transaction().await?;
                if verify {
                    let stmt = tx.prepare_cached(self.guard.sql()).await?;
                    let _ = tx
                        .query_opt(&stmt, &[&p.name, &p.token.expose(), &p.term])
                        .await?
                        .ok_or("lost")?;
                }
                let stmt = tx.prepare_cached(&self.update).await?;
                let _ = tx.execute(&stmt, &[&id]).await?;
                tx.commit().await?;
            }
            Backend::MySql(store) => {
                let mut conn = store.pool().get_conn().await?;
                let mut tx = conn
                    .start_transaction(mysql_async::TxOpts::default())
                    .await?;
                if verify {
                    let row: Option<i64> = tx
                        .exec_first(self.guard.sql(), (p.name, p.token.expose(), p.term))
                        .await?;
                    let _ = row.ok_or("lost")?;
                }
                tx.exec_drop(self.update.as_str(), (id,)).await?;
                tx.commit().await?;
            }
            Backend::Sqlite(store) => {
                let path = store.path().ok_or("a file")?.to_owned();
                let (guard, update) = (self.guard.sql().to_owned(), self.update.clone());
                let (name, holder, term) = (p.name.to_owned(), p.token.expose().to_owned(), p.term);
                tokio::task::spawn_blocking(move || -> BoxResult<()> {
                    thread_local! {
                        static CONN: std::cell::RefCell<Option<rusqlite::Connection>> =
                            const { std::cell::RefCell::new(None) };
                    }
                    CONN.with(|cell| {
                        let mut slot = cell.borrow_mut();
                        if slot.is_none() {
                            let conn = rusqlite::Connection::open(&path)?;
                            conn.busy_timeout(Duration::from_secs(10))?;
                            *slot = Some(conn);
                        }
                        let conn = slot.as_mut().ok_or("no connection")?;
                        let tx = conn
                            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
                        if verify {
                            let mut stmt = tx.prepare_cached(&guard)?;
                            let mut rows = stmt.query(rusqlite::params![name, holder, term])?;
                            let _ = rows.next()?.ok_or("lost")?;
                        }
                        let _ = tx.prepare_cached(&update)?.execute([id])?;
                        tx.commit()?;
                        Ok(())
                    })
                })
                .await??;
            }
            _ => return Err("a backend this build lacks".into()),
        }
        Ok(())
    }

    /// The store's guarded transaction, the same `UPDATE` as its work.
    async fn guarded(&self, w: usize, prepared: bool) -> BoxResult<()> {
        let id = Self::id(w)?;
        let ctx = &self.ctxs[w];
        let update = self.update.clone();
        match &self.backend {
            Backend::Postgres(store) => {
                let _ = store
                    .transaction(ctx, move |tx| {
                        Box::pin(async move {
                            if prepared {
                                let stmt = tx.prepare_cached(&update).await?;
                                tx.execute(&stmt, &[&id]).await
                            } else {
                                tx.execute(update.as_str(), &[&id]).await
                            }
                        })
                    })
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Backend::MySql(store) => {
                store
                    .transaction(ctx, move |tx| {
                        Box::pin(async move { tx.exec_drop(update.as_str(), (id,)).await })
                    })
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Backend::Sqlite(store) => {
                store
                    .transaction(ctx, move |tx| {
                        let _ = tx.prepare_cached(&update)?.execute([id])?;
                        Ok::<_, rusqlite::Error>(())
                    })
                    .await
                    .map_err(|e| e.to_string())?;
            }
            _ => return Err("a backend this build lacks".into()),
        }
        Ok(())
    }

    /// Through sqlx: the guard by hand, or `lease_sqlx::transaction`.
    async fn sqlx(&self, w: usize, guarded: bool) -> BoxResult<()> {
        let id = Self::id(w)?;
        let ctx = &self.ctxs[w];
        let p = ctx.handle().guard_params();
        macro_rules! run {
            ($db:ty, $pool:expr) => {{
                let update = sqlx::AssertSqlSafe(self.update.clone());
                if guarded {
                    let _ = lease_sqlx::transaction($pool, ctx, move |tx| {
                        Box::pin(async move {
                            sqlx::query::<$db>(update).bind(id).execute(&mut **tx).await
                        })
                    })
                    .await
                    .map_err(|e| e.to_string())?;
                } else {
                    let mut tx = $pool.begin_with(self.guard.begin()).await?;
                    let _ = sqlx::query::<$db>(sqlx::AssertSqlSafe(self.guard.sql().to_owned()))
                        .bind(p.name)
                        .bind(p.token.expose())
                        .bind(p.term)
                        .fetch_optional(&mut *tx)
                        .await?
                        .ok_or("lost")?;
                    let _ = sqlx::query::<$db>(update)
                        .bind(id)
                        .execute(&mut *tx)
                        .await?;
                    tx.commit().await?;
                }
            }};
        }
        match &self.sqlx {
            SqlxPool::Postgres(pool) => run!(sqlx::Postgres, pool),
            SqlxPool::MySql(pool) => run!(sqlx::MySql, pool),
            SqlxPool::Sqlite(pool) => run!(sqlx::Sqlite, pool),
        }
        Ok(())
    }
}

/// The rows measured, in order: (label, what it runs).
#[derive(Clone, Copy)]
enum Kind {
    HandVerify,
    HandPlain,
    Guarded,
    GuardedUnprepared,
    SqlxHand,
    SqlxGuarded,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::HandVerify => "hand, verify in tx",
            Kind::HandPlain => "hand, no verify",
            Kind::Guarded => "guarded",
            Kind::GuardedUnprepared => "guarded, work unprepared",
            Kind::SqlxHand => "sqlx hand, verify in tx",
            Kind::SqlxGuarded => "sqlx guarded",
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> BoxResult<()> {
    let args = args()?;
    let dir = tempfile::tempdir()?;
    let urls = if args.urls.is_empty() {
        vec![format!(
            "sqlite://{}",
            dir.path().join("lease-guard.db").display()
        )]
    } else {
        args.urls.clone()
    };
    let time = Duration::from_secs(args.seconds);
    let max = args.concurrency.iter().copied().max().unwrap_or(1);
    for url in &urls {
        let target = Arc::new(target(url, max).await?);
        let name = target.backend.name();
        println!("\n### {name}\n");
        println!(
            "| transaction               |  c |       p50       p99   ops/s | p50 vs hand verify | ops/s vs hand verify |"
        );
        println!(
            "|---------------------------|----|-------------------------------|--------------------|----------------------|"
        );
        let mut kinds = vec![Kind::HandVerify, Kind::HandPlain, Kind::Guarded];
        if name == "postgres" {
            kinds.push(Kind::GuardedUnprepared);
        }
        kinds.extend([Kind::SqlxHand, Kind::SqlxGuarded]);
        for &c in &args.concurrency {
            let mut base: Option<Summary> = None;
            for &kind in &kinds {
                let t = target.clone();
                let s = cell(c, time, move |w| {
                    let t = t.clone();
                    async move {
                        match kind {
                            Kind::HandVerify => t.hand(w, true).await,
                            Kind::HandPlain => t.hand(w, false).await,
                            Kind::Guarded => t.guarded(w, true).await,
                            Kind::GuardedUnprepared => t.guarded(w, false).await,
                            Kind::SqlxHand => t.sqlx(w, false).await,
                            Kind::SqlxGuarded => t.sqlx(w, true).await,
                        }
                    }
                })
                .await;
                let b = *base.get_or_insert(s);
                println!(
                    "| {:<25} | {c:>2} | {:>9} {:>9} {:>7.0} | {:>18} | {:>20} |{}",
                    kind.label(),
                    Latency(s.p50),
                    Latency(s.p99),
                    s.throughput,
                    ratio(s.p50.as_secs_f64(), b.p50.as_secs_f64()),
                    ratio(s.throughput, b.throughput),
                    if s.errors > 0 {
                        format!(" {} errors", s.errors)
                    } else {
                        String::new()
                    },
                );
            }
        }
        for ctx in &target.ctxs {
            ctx.handle().release().await?;
        }
        target.sqlx_exec(&format!("DROP TABLE {COUNTERS}")).await?;
    }
    Ok(())
}
