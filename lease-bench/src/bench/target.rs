//! The backend under test: its store through `lease-core`, raw access to
//! the same database for the floors, and the hand-written statements.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use dblease::mysql::MySqlStore;
use dblease::mysql::mysql_async::{self, prelude::Queryable};
use dblease::postgres::PostgresStore;
use dblease::postgres::deadpool_postgres;
use dblease::postgres::tokio_postgres::types::{ToSql, Type};
use dblease::sqlite::{SqliteStore, SqliteStoreBuilder, Synchronous};
use dblease::{LeaseContext, Leases};

use super::{BoxResult, COUNTERS, LEASE_MS, POOL, TABLE};
use crate::url::{Backend, sqlite_path};

/// Parameters of a hand-written statement.
pub(crate) enum Params {
    None,
    Two(String, String),
    Three(String, String, String),
    /// holder, instance, slot, name.
    Slot(String, String, i64, String),
}

/// The backend's raw access, beside its store.
#[derive(Clone)]
pub(crate) enum Raw {
    /// The pool, and whether statements go unnamed (`query_typed`: safe
    /// behind PgBouncer in transaction pooling mode) rather than prepared
    /// and cached per connection.
    Postgres(deadpool_postgres::Pool, bool),
    MySql(mysql_async::Pool),
    Sqlite(Arc<Mutex<rusqlite::Connection>>),
    /// A connection per worker (an application's own pool): worker `w`
    /// uses connection `w` (modulo their number).
    SqlitePool(Arc<Vec<Mutex<rusqlite::Connection>>>),
}

impl Raw {
    /// Runs statements that return nothing.
    pub(crate) async fn batch(&self, sql: &str) -> BoxResult<()> {
        match self {
            Raw::Postgres(pool, _) => {
                pool.get().await?.batch_execute(sql).await?;
            }
            Raw::MySql(pool) => pool.get_conn().await?.query_drop(sql).await?,
            Raw::Sqlite(conn) => {
                let conn = conn.clone();
                let sql = sql.to_owned();
                tokio::task::spawn_blocking(move || {
                    conn.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .execute_batch(&sql)
                })
                .await??;
            }
            Raw::SqlitePool(conns) => {
                let conns = conns.clone();
                let sql = sql.to_owned();
                tokio::task::spawn_blocking(move || {
                    conns
                        .first()
                        .ok_or_else(|| rusqlite::Error::InvalidQuery)?
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .execute_batch(&sql)
                })
                .await??;
            }
        }
        Ok(())
    }

    /// A connection per worker to the SQLite file at `path`, `n` of them,
    /// each as the one-connection floor is opened (busy timeout, pragmas).
    pub(crate) fn sqlite_pool(
        path: &std::path::Path,
        n: usize,
        synchronous: Synchronous,
    ) -> BoxResult<Raw> {
        let mut conns = Vec::with_capacity(n);
        for _ in 0..n {
            conns.push(Mutex::new(sqlite_floor_connection(path, synchronous)?));
        }
        Ok(Raw::SqlitePool(Arc::new(conns)))
    }

    /// Runs one hand-written statement (prepared, as the stores do) for
    /// worker `w` and returns the rows it changed, or returned.
    pub(crate) async fn exec(&self, w: usize, sql: &str, params: Params) -> BoxResult<u64> {
        match self {
            Raw::Postgres(pool, true) => {
                let client = pool.get().await?;
                let n = match params {
                    Params::None => client.query_typed(sql, &[]).await?.len() as u64,
                    Params::Two(a, b) => {
                        client
                            .execute_typed(sql, &[(&a, Type::TEXT), (&b, Type::TEXT)])
                            .await?
                    }
                    Params::Three(a, b, c) => {
                        client
                            .execute_typed(
                                sql,
                                &[(&a, Type::TEXT), (&b, Type::TEXT), (&c, Type::TEXT)],
                            )
                            .await?
                    }
                    Params::Slot(a, b, c, d) => {
                        client
                            .execute_typed(
                                sql,
                                &[
                                    (&a, Type::TEXT),
                                    (&b, Type::TEXT),
                                    (&c, Type::INT8),
                                    (&d, Type::TEXT),
                                ],
                            )
                            .await?
                    }
                };
                Ok(n)
            }
            Raw::Postgres(pool, false) => {
                let client = pool.get().await?;
                let stmt = client.prepare_cached(sql).await?;
                let n = match params {
                    Params::None => client.query(&stmt, &[]).await?.len() as u64,
                    Params::Two(a, b) => client.execute(&stmt, &[&a, &b]).await?,
                    Params::Three(a, b, c) => client.execute(&stmt, &[&a, &b, &c]).await?,
                    Params::Slot(a, b, c, d) => client.execute(&stmt, &[&a, &b, &c, &d]).await?,
                };
                Ok(n)
            }
            Raw::MySql(pool) => {
                let mut conn = pool.get_conn().await?;
                match params {
                    Params::None => conn.exec_drop(sql, ()).await?,
                    Params::Two(a, b) => conn.exec_drop(sql, (a, b)).await?,
                    Params::Three(a, b, c) => conn.exec_drop(sql, (a, b, c)).await?,
                    // Positional: the slot appears three times, in order.
                    Params::Slot(a, b, c, d) => conn.exec_drop(sql, (a, b, c, c, d, c)).await?,
                }
                Ok(conn.affected_rows())
            }
            Raw::Sqlite(conn) => {
                let conn = conn.clone();
                let sql = sql.to_owned();
                let n = tokio::task::spawn_blocking(move || {
                    let conn = conn.lock().unwrap_or_else(PoisonError::into_inner);
                    sqlite_exec(&conn, &sql, params)
                })
                .await??;
                Ok(n as u64)
            }
            Raw::SqlitePool(conns) => {
                let conns = conns.clone();
                let sql = sql.to_owned();
                let n = tokio::task::spawn_blocking(move || {
                    let conn = conns
                        .get(w % conns.len().max(1))
                        .ok_or(rusqlite::Error::InvalidQuery)?
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner);
                    sqlite_exec(&conn, &sql, params)
                })
                .await??;
                Ok(n as u64)
            }
        }
    }
}

/// One hand-written statement on an SQLite connection.
fn sqlite_exec(conn: &rusqlite::Connection, sql: &str, params: Params) -> rusqlite::Result<usize> {
    let mut stmt = conn.prepare_cached(sql)?;
    match params {
        Params::None => stmt.query_row([], |_| Ok(1usize)),
        Params::Two(a, b) => stmt.execute(rusqlite::params![a, b]),
        Params::Three(a, b, c) => stmt.execute(rusqlite::params![a, b, c]),
        Params::Slot(a, b, c, d) => stmt.execute(rusqlite::params![a, b, c, d]),
    }
}

/// A connection to the SQLite file at `path` as the floors use it: the
/// store's busy timeout (5 s, SQLite's own busy handler) and durability.
fn sqlite_floor_connection(
    path: &std::path::Path,
    synchronous: Synchronous,
) -> BoxResult<rusqlite::Connection> {
    let conn = rusqlite::Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.execute_batch(match synchronous {
        Synchronous::Normal => "PRAGMA synchronous = NORMAL",
        _ => "PRAGMA synchronous = FULL",
    })?;
    Ok(conn)
}

impl Raw {
    /// Renews a batch of `(name, holder)` leases by hand, one batch
    /// statement as the backend's store sends it ([`Sql::renew_many`]), and
    /// returns how many were renewed.
    pub(crate) async fn renew_many(
        &self,
        backend: Backend,
        leases: Arc<Vec<(String, String)>>,
    ) -> BoxResult<usize> {
        let (update, read) = Sql::renew_many(backend, leases.len());
        match self {
            Raw::Postgres(pool, unnamed) => {
                let client = pool.get().await?;
                let names: Vec<&str> = leases.iter().map(|(n, _)| n.as_str()).collect();
                let holders: Vec<&str> = leases.iter().map(|(_, h)| h.as_str()).collect();
                let rows = if *unnamed {
                    client
                        .query_typed(
                            &update,
                            &[(&names, Type::TEXT_ARRAY), (&holders, Type::TEXT_ARRAY)],
                        )
                        .await?
                } else {
                    let stmt = client.prepare_cached(&update).await?;
                    let params: [&(dyn ToSql + Sync); 2] = [&names, &holders];
                    client.query(&stmt, &params).await?
                };
                Ok(rows.len())
            }
            Raw::MySql(pool) => {
                let mut values: Vec<mysql_async::Value> = Vec::with_capacity(3 * leases.len());
                values.extend(leases.iter().map(|(n, _)| n.as_str().into()));
                for (n, h) in leases.iter() {
                    values.push(n.as_str().into());
                    values.push(h.as_str().into());
                }
                let mut conn = pool.get_conn().await?;
                conn.exec_drop(
                    update.as_str(),
                    mysql_async::Params::Positional(values.clone()),
                )
                .await?;
                // The OK packet says how many rows matched (whatever
                // CLIENT_FOUND_ROWS says): all of them, and the batch is
                // done in one round trip; fewer, and a read says which.
                let distinct: std::collections::HashSet<&str> =
                    leases.iter().map(|(n, _)| n.as_str()).collect();
                if lease_sql::mysql::rows_matched(&conn.info()) == Some(distinct.len() as u64) {
                    return Ok(distinct.len());
                }
                let held: Vec<String> = conn
                    .exec(read.as_str(), mysql_async::Params::Positional(values))
                    .await?;
                Ok(held.len())
            }
            Raw::SqlitePool(_) => Err("the batch renewal's floor runs on one connection".into()),
            Raw::Sqlite(conn) => {
                let conn = conn.clone();
                let n = tokio::task::spawn_blocking(move || {
                    let conn = conn.lock().unwrap_or_else(PoisonError::into_inner);
                    let mut stmt = conn.prepare_cached(&update)?;
                    let params = leases.iter().flat_map(|(n, h)| [n, h]);
                    let mut rows = stmt.query(rusqlite::params_from_iter(params))?;
                    let mut n = 0usize;
                    while rows.next()?.is_some() {
                        n += 1;
                    }
                    Ok::<_, rusqlite::Error>(n)
                })
                .await??;
                Ok(n)
            }
        }
    }
}

/// Which transaction guard the backend has.
pub(crate) enum Guard {
    Postgres(PostgresStore),
    MySql(MySqlStore),
    Sqlite(SqliteStore),
}

/// The backend under test: the store through `lease-core`, and raw access
/// to the same database (the store's own pool) for the floors.
pub(crate) struct Target {
    pub(crate) backend: Backend,
    pub(crate) label: String,
    pub(crate) leases: Leases,
    pub(crate) raw: Raw,
    /// SQLite's second floor: the same statements on a connection per
    /// worker (an application's own pool); `None` on the servers, whose
    /// floor already runs on a pool.
    pub(crate) per_worker: Option<Raw>,
    pub(crate) guard: Guard,
    pub(crate) sql: Sql,
    pub(crate) note: String,
}

/// The mark of the rows whose floor runs on a connection per worker
/// (SQLite), explained under the table.
pub(crate) const PER_WORKER: &str = " ⁵";

/// What a guarded transaction's work does to its worker's counter: write
/// it (an `UPDATE`), or only read it (a `SELECT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Work {
    Write,
    Read,
}

/// The work's one statement on counter `id`, in `tx`.
fn sqlite_work(
    tx: &rusqlite::Transaction<'_>,
    sql: &str,
    id: i32,
    work: Work,
) -> rusqlite::Result<()> {
    let mut stmt = tx.prepare_cached(sql)?;
    match work {
        Work::Write => stmt.execute([id]).map(drop),
        Work::Read => stmt.query_row([id], |row| row.get::<_, i64>(0)).map(drop),
    }
}

/// The unguarded transaction of `work` on counter `id`: a write begins
/// `IMMEDIATE`, as the store's guarded transaction does (the write lock
/// first); a read is a deferred transaction, which takes no write lock.
fn sqlite_unguarded(
    conn: &mut rusqlite::Connection,
    sql: &str,
    id: i32,
    work: Work,
) -> rusqlite::Result<()> {
    let behavior = match work {
        Work::Write => rusqlite::TransactionBehavior::Immediate,
        Work::Read => rusqlite::TransactionBehavior::Deferred,
    };
    let tx = conn.transaction_with_behavior(behavior)?;
    sqlite_work(&tx, sql, id, work)?;
    tx.commit()
}

/// Each database's clock in milliseconds, as the hand-written statements
/// read it.
const PG_NOW: &str = "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint";
const MYSQL_NOW: &str = "(UNIX_TIMESTAMP() * 1000 + MICROSECOND(NOW(3)) DIV 1000)";
const SQLITE_NOW: &str = "CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER)";

/// The specification's statements, written by hand, plainly: the clock
/// expression inline, one statement per protocol statement, on a row that
/// exists (the store's own claims made it).
pub(crate) struct Sql {
    pub(crate) claim: String,
    pub(crate) release: String,
    pub(crate) renew: String,
    pub(crate) instant_claim: String,
    pub(crate) finish: String,
    pub(crate) update_counter: String,
    pub(crate) read_counter: String,
}

impl Sql {
    pub(crate) fn of(backend: Backend) -> Sql {
        let now = match backend {
            Backend::Postgres => PG_NOW,
            Backend::MySql => MYSQL_NOW,
            Backend::Sqlite => SQLITE_NOW,
        };
        // Placeholder `i` of type `ty`; MySQL binds in order of appearance.
        let p = |i: usize, ty: &str| match backend {
            Backend::Postgres => format!("${i}::{ty}"),
            Backend::MySql => "?".to_owned(),
            Backend::Sqlite => format!("?{i}"),
        };
        let (t1, t2, t3) = (p(1, "text"), p(2, "text"), p(3, "text"));
        let (slot, job) = (p(3, "bigint"), p(4, "text"));
        Sql {
            claim: format!(
                "UPDATE {TABLE} SET holder = {t1}, instance = {t2}, term = term + 1, \
                 expires_at_ms = {now} + {LEASE_MS} WHERE name = {t3} AND expires_at_ms <= {now}"
            ),
            release: format!(
                "UPDATE {TABLE} SET expires_at_ms = 0 WHERE name = {t1} AND holder = {t2}"
            ),
            renew: format!(
                "UPDATE {TABLE} SET expires_at_ms = {now} + {LEASE_MS} \
                 WHERE name = {t1} AND holder = {t2} AND expires_at_ms > {now}"
            ),
            instant_claim: format!(
                "UPDATE {TABLE} SET holder = {t1}, instance = {t2}, term = term + 1, \
                 expires_at_ms = {now} + {LEASE_MS}, slot_ms = {slot}, unfinished_slot_ms = {slot} \
                 WHERE name = {job} AND expires_at_ms <= {now} AND slot_ms < {slot}"
            ),
            finish: format!(
                "UPDATE {TABLE} SET expires_at_ms = 0, unfinished_slot_ms = 0 \
                 WHERE name = {t1} AND holder = {t2}"
            ),
            update_counter: format!("UPDATE {COUNTERS} SET n = n + 1 WHERE id = {}", p(1, "int")),
            read_counter: format!("SELECT n FROM {COUNTERS} WHERE id = {}", p(1, "int")),
        }
    }
}

impl Sql {
    /// The batch renewal of `count` leases written by hand: PostgreSQL one
    /// `UPDATE ... FROM unnest(..) RETURNING` (`$1` names, `$2` holders);
    /// SQLite one `UPDATE ... WHERE (name, holder) IN (VALUES ..)
    /// RETURNING` (the pairs, in order); MySQL the `UPDATE` (no `RETURNING`
    /// on MariaDB's `UPDATE`), and the read of the rows held only when the
    /// update matched fewer rows than the batch has leases, both bound to
    /// the names and then the pairs (`name IN` lets MariaDB use the key).
    /// The second string is MySQL's read (empty elsewhere).
    pub(crate) fn renew_many(backend: Backend, count: usize) -> (String, String) {
        let pairs = |first: usize| {
            (0..count)
                .map(|i| match backend {
                    Backend::Sqlite => format!("(?{}, ?{})", first + 2 * i, first + 2 * i + 1),
                    _ => "(?, ?)".to_owned(),
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        match backend {
            Backend::Postgres => (
                format!(
                    "WITH now AS (SELECT {PG_NOW} AS ms) \
                     UPDATE {TABLE} AS l SET expires_at_ms = now.ms + {LEASE_MS} \
                       FROM now, unnest($1::text[], $2::text[]) AS r(name, holder) \
                      WHERE l.name = r.name AND l.holder = r.holder AND l.expires_at_ms > now.ms \
                     RETURNING l.name"
                ),
                String::new(),
            ),
            Backend::Sqlite => (
                format!(
                    "UPDATE {TABLE} SET expires_at_ms = {SQLITE_NOW} + {LEASE_MS} \
                      WHERE (name, holder) IN (VALUES {}) AND expires_at_ms > {SQLITE_NOW} \
                     RETURNING name",
                    pairs(1)
                ),
                String::new(),
            ),
            Backend::MySql => {
                let names = vec!["?"; count].join(", ");
                let filter = format!(
                    "WHERE name IN ({names}) AND (name, holder) IN ({}) AND expires_at_ms > {MYSQL_NOW}",
                    pairs(1)
                );
                (
                    format!("UPDATE {TABLE} SET expires_at_ms = {MYSQL_NOW} + {LEASE_MS} {filter}"),
                    format!("SELECT name FROM {TABLE} {filter}"),
                )
            }
        }
    }
}

impl Target {
    /// Opens the backend `url` names; `label` names its table (the
    /// backend's name when `None`).
    pub(crate) async fn open(
        url: &str,
        label: Option<&str>,
        synchronous: Synchronous,
        pool: usize,
    ) -> BoxResult<Target> {
        let backend = Backend::of(url).ok_or("unrecognised URL scheme")?;
        let mut per_worker = None;
        let (leases, raw, guard, note) = match backend {
            Backend::Postgres => {
                let store = PostgresStore::builder(url)?
                    .with_table(TABLE)
                    .with_pool_size(pool)
                    .build()?;
                // The URL's parameter the store reads; the floors follow it.
                let unnamed = url.contains("statement_mode=unnamed");
                (
                    Leases::new(store.clone()),
                    Raw::Postgres(store.pool().clone(), unnamed),
                    Guard::Postgres(store),
                    format!(
                        "PostgresStore, pool of {pool} connections, {}",
                        if unnamed {
                            "unnamed statements (the floors too)"
                        } else {
                            "prepared statements (the floors too)"
                        }
                    ),
                )
            }
            Backend::MySql => {
                let store = MySqlStore::builder(url)?
                    .with_table(TABLE)
                    // Every connection kept: with fewer kept idle than
                    // are in use at once, mysql_async closes the extras as
                    // they come back and opens new ones (a handshake each),
                    // which measured the pool's churn, not the statements.
                    .with_pool_constraints(pool, pool)
                    .connect()
                    .await?;
                (
                    Leases::new(store.clone()),
                    Raw::MySql(store.pool().clone().into_inner()),
                    Guard::MySql(store),
                    format!("MySqlStore, pool of {pool} connections, all kept"),
                )
            }
            Backend::Sqlite => {
                let path = sqlite_path(url).ok_or("the benchmark needs an SQLite file")?;
                let store = SqliteStoreBuilder::from_path(&path)
                    .with_table(TABLE)
                    .with_synchronous(synchronous)
                    .build()?;
                let guard = Guard::Sqlite(store.clone());
                // The floors run at the store's durability.
                let conn = sqlite_floor_connection(&path, synchronous)?;
                per_worker = Some(Raw::sqlite_pool(&path, pool, synchronous)?);
                (
                    Leases::new(store),
                    Raw::Sqlite(Arc::new(Mutex::new(conn))),
                    guard,
                    format!(
                        "SqliteStore, one connection, synchronous {synchronous:?}; \
                         floors on a second connection to the same file, same pragmas, \
                         and on a connection per worker ({pool})"
                    ),
                )
            }
        };
        let target = Target {
            label: label.map_or_else(|| backend.label().to_owned(), str::to_owned),
            backend,
            leases,
            raw,
            per_worker,
            guard,
            sql: Sql::of(backend),
            note,
        };
        target.leases.migrate().await?;
        target.setup().await?;
        Ok(target)
    }

    /// Empties the lease table and creates the counters.
    pub(crate) async fn setup(&self) -> BoxResult<()> {
        let engine = if self.backend == Backend::MySql {
            " ENGINE = InnoDB"
        } else {
            ""
        };
        self.raw.batch(&format!("DELETE FROM {TABLE}")).await?;
        self.raw
            .batch(&format!(
                "CREATE TABLE IF NOT EXISTS {COUNTERS} (id INT PRIMARY KEY, n BIGINT NOT NULL){engine}"
            ))
            .await?;
        self.raw.batch(&format!("DELETE FROM {COUNTERS}")).await?;
        for id in 0..POOL {
            self.raw
                .batch(&format!("INSERT INTO {COUNTERS} (id, n) VALUES ({id}, 0)"))
                .await?;
        }
        Ok(())
    }

    /// The statement of a guarded transaction's `work`, on worker `w`'s
    /// counter.
    fn work_sql(&self, work: Work) -> String {
        match work {
            Work::Write => self.sql.update_counter.clone(),
            Work::Read => self.sql.read_counter.clone(),
        }
    }

    /// A guarded transaction whose work is `work` on worker `w`'s counter.
    pub(crate) async fn guarded(&self, ctx: &LeaseContext, w: usize, work: Work) -> BoxResult<()> {
        let id = i32::try_from(w)?;
        let sql = self.work_sql(work);
        match &self.guard {
            Guard::Postgres(store) => {
                // The work's statement sent as the floor sends it: prepared
                // once per connection, or unnamed behind PgBouncer.
                let unnamed = matches!(self.raw, Raw::Postgres(_, true));
                let _ = store
                    .transaction(ctx, move |tx| {
                        Box::pin(async move {
                            if unnamed {
                                tx.query_typed(sql.as_str(), &[(&id, Type::INT4)])
                                    .await
                                    .map(|rows| rows.len())
                            } else {
                                let stmt = tx.prepare_cached(sql.as_str()).await?;
                                tx.query(&stmt, &[&id]).await.map(|rows| rows.len())
                            }
                        })
                    })
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Guard::MySql(store) => {
                store
                    .transaction(ctx, move |tx| {
                        Box::pin(async move {
                            tx.exec_drop(sql.as_str(), (id,))
                                .await
                                .map_err(dblease::mysql::MySqlError::from)
                        })
                    })
                    .await?;
            }
            Guard::Sqlite(store) => {
                store
                    .transaction(ctx, move |tx| {
                        sqlite_work(tx, &sql, id, work).map_err(dblease::BoxError::from)
                    })
                    .await
                    .map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    }

    /// The guarded transaction's floor: the same transaction unguarded,
    /// for worker `w` on the floor `raw`.
    pub(crate) async fn unguarded(&self, raw: &Raw, w: usize, work: Work) -> BoxResult<()> {
        let id = i32::try_from(w)?;
        let sql = self.work_sql(work);
        match raw {
            Raw::Postgres(pool, unnamed) => {
                let mut client = pool.get().await?;
                let tx = client.transaction().await?;
                if *unnamed {
                    let _ = tx.query_typed(&sql, &[(&id, Type::INT4)]).await?;
                } else {
                    let stmt = tx.prepare_cached(&sql).await?;
                    let _ = tx.query(&stmt, &[&id]).await?;
                }
                tx.commit().await?;
            }
            Raw::MySql(pool) => {
                let mut conn = pool.get_conn().await?;
                let mut tx = conn
                    .start_transaction(mysql_async::TxOpts::default())
                    .await?;
                tx.exec_drop(sql.as_str(), (id,)).await?;
                tx.commit().await?;
            }
            Raw::Sqlite(conn) => {
                let conn = conn.clone();
                tokio::task::spawn_blocking(move || -> rusqlite::Result<()> {
                    let mut conn = conn.lock().unwrap_or_else(PoisonError::into_inner);
                    sqlite_unguarded(&mut conn, &sql, id, work)
                })
                .await??;
            }
            Raw::SqlitePool(conns) => {
                let conns = conns.clone();
                tokio::task::spawn_blocking(move || -> rusqlite::Result<()> {
                    let mut conn = conns
                        .get(w % conns.len().max(1))
                        .ok_or(rusqlite::Error::InvalidQuery)?
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner);
                    sqlite_unguarded(&mut conn, &sql, id, work)
                })
                .await??;
            }
        }
        Ok(())
    }

    /// The floors of an operation: the hand-written statements on the
    /// store's pool (SQLite: a second connection), and, on SQLite, on a
    /// connection per worker; each with the mark its rows carry.
    pub(crate) fn floors(&self) -> Vec<(&Raw, &'static str)> {
        let mut floors = vec![(&self.raw, "")];
        if let Some(per_worker) = &self.per_worker {
            floors.push((per_worker, PER_WORKER));
        }
        floors
    }

    pub(crate) async fn cleanup(&self) {
        if let Err(e) = self.raw.batch(&format!("DELETE FROM {TABLE}")).await {
            eprintln!("bench: cleanup failed: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hand-written batch renewal on SQLite renews exactly the pairs
    /// still held (the placeholders of every pair in order), as the store's
    /// `renew_many` must, on a connection as the floor runs it.
    #[tokio::test]
    async fn the_hand_batch_renewal_renews_the_pairs_held() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch(&format!(
            "CREATE TABLE {TABLE} (name TEXT PRIMARY KEY, holder TEXT NOT NULL, \
             expires_at_ms INTEGER NOT NULL)"
        ))
        .unwrap();
        for (name, holder, expires) in [("a", "h", i64::MAX), ("b", "h", i64::MAX), ("c", "h", 0)] {
            let _ = conn
                .execute(
                    &format!("INSERT INTO {TABLE} VALUES (?1, ?2, ?3)"),
                    rusqlite::params![name, holder, expires],
                )
                .unwrap();
        }
        let raw = Raw::Sqlite(Arc::new(Mutex::new(conn)));
        let batch = |pairs: &[(&str, &str)]| {
            Arc::new(
                pairs
                    .iter()
                    .map(|(n, h)| ((*n).to_owned(), (*h).to_owned()))
                    .collect::<Vec<_>>(),
            )
        };
        // a and b held; b by another holder in the batch; c expired; d absent.
        let renewed = raw
            .renew_many(
                Backend::Sqlite,
                batch(&[("a", "h"), ("b", "x"), ("c", "h"), ("d", "h"), ("b", "h")]),
            )
            .await
            .unwrap();
        assert_eq!(renewed, 2, "a and b by their holder, nothing else");
    }

    /// MySQL binds positionally: the names once, then the pairs, in the
    /// update and in the read alike.
    #[test]
    fn the_hand_batch_renewal_binds_three_values_a_lease_on_mysql() {
        let (update, read) = Sql::renew_many(Backend::MySql, 5);
        assert_eq!(update.matches('?').count(), 15);
        assert_eq!(read.matches('?').count(), 15);
        let (update, read) = Sql::renew_many(Backend::Postgres, 5);
        assert!(update.contains("unnest($1::text[], $2::text[])"));
        assert!(read.is_empty());
    }
}
