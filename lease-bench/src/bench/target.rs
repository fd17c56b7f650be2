//! The backend under test: its store through `lease-core`, raw access to
//! the same database for the floors, and the hand-written statements.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use dblease::mysql::MySqlStore;
use dblease::mysql::mysql_async::{self, prelude::Queryable};
use dblease::postgres::PostgresStore;
use dblease::postgres::deadpool_postgres;
use dblease::sqlite::{SqliteStoreBuilder, Synchronous};
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
    Postgres(deadpool_postgres::Pool),
    MySql(mysql_async::Pool),
    Sqlite(Arc<Mutex<rusqlite::Connection>>),
}

impl Raw {
    /// Runs statements that return nothing.
    pub(crate) async fn batch(&self, sql: &str) -> BoxResult<()> {
        match self {
            Raw::Postgres(pool) => {
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
        }
        Ok(())
    }

    /// Runs one hand-written statement (prepared, as the stores do) and
    /// returns the rows it changed, or returned.
    pub(crate) async fn exec(&self, sql: &str, params: Params) -> BoxResult<u64> {
        match self {
            Raw::Postgres(pool) => {
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
                    let mut stmt = conn.prepare_cached(&sql)?;
                    match params {
                        Params::None => stmt.query_row([], |_| Ok(1usize)),
                        Params::Two(a, b) => stmt.execute(rusqlite::params![a, b]),
                        Params::Three(a, b, c) => stmt.execute(rusqlite::params![a, b, c]),
                        Params::Slot(a, b, c, d) => stmt.execute(rusqlite::params![a, b, c, d]),
                    }
                })
                .await??;
                Ok(n as u64)
            }
        }
    }
}

/// Which transaction guard the backend has.
pub(crate) enum Guard {
    Postgres(PostgresStore),
    MySql(MySqlStore),
    None,
}

/// The backend under test: the store through `lease-core`, and raw access
/// to the same database (the store's own pool) for the floors.
pub(crate) struct Target {
    pub(crate) backend: Backend,
    pub(crate) leases: Leases,
    pub(crate) raw: Raw,
    pub(crate) guard: Guard,
    pub(crate) sql: Sql,
    pub(crate) note: String,
}

/// The specification's statements, written by hand, plainly: the clock
/// expression inline, one statement per protocol statement, on a row that
/// exists (the store's own claims made it).
pub(crate) struct Sql {
    pub(crate) claim: String,
    pub(crate) release: String,
    pub(crate) renew: String,
    pub(crate) slot_claim: String,
    pub(crate) finish: String,
    pub(crate) update_counter: String,
}

impl Sql {
    pub(crate) fn of(backend: Backend) -> Sql {
        let now = match backend {
            Backend::Postgres => "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint",
            Backend::MySql => "(UNIX_TIMESTAMP() * 1000 + MICROSECOND(NOW(3)) DIV 1000)",
            Backend::Sqlite => "CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER)",
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
            slot_claim: format!(
                "UPDATE {TABLE} SET holder = {t1}, instance = {t2}, term = term + 1, \
                 expires_at_ms = {now} + {LEASE_MS}, slot_ms = {slot}, unfinished_slot_ms = {slot} \
                 WHERE name = {job} AND expires_at_ms <= {now} AND slot_ms < {slot}"
            ),
            finish: format!(
                "UPDATE {TABLE} SET expires_at_ms = 0, unfinished_slot_ms = 0 \
                 WHERE name = {t1} AND holder = {t2}"
            ),
            update_counter: format!("UPDATE {COUNTERS} SET n = n + 1 WHERE id = {}", p(1, "int")),
        }
    }
}

impl Target {
    pub(crate) async fn open(url: &str, synchronous: Synchronous) -> BoxResult<Target> {
        let backend = Backend::of(url).ok_or("unrecognised URL scheme")?;
        let (leases, raw, guard, note) = match backend {
            Backend::Postgres => {
                let store = PostgresStore::builder(url)?
                    .with_table(TABLE)
                    .with_pool_size(POOL)
                    .build()?;
                (
                    Leases::new(store.clone()),
                    Raw::Postgres(store.pool().clone()),
                    Guard::Postgres(store),
                    format!("PostgresStore, pool of {POOL} connections"),
                )
            }
            Backend::MySql => {
                let store = MySqlStore::builder(url)?
                    .with_table(TABLE)
                    .with_pool_constraints(1, POOL)
                    .connect()
                    .await?;
                (
                    Leases::new(store.clone()),
                    Raw::MySql(store.pool().clone().into_inner()),
                    Guard::MySql(store),
                    format!("MySqlStore, pool of up to {POOL} connections"),
                )
            }
            Backend::Sqlite => {
                let path = sqlite_path(url).ok_or("the benchmark needs an SQLite file")?;
                let store = SqliteStoreBuilder::from_path(&path)
                    .with_table(TABLE)
                    .with_synchronous(synchronous)
                    .build()?;
                let conn = rusqlite::Connection::open(&path)?;
                conn.busy_timeout(Duration::from_secs(5))?;
                // The floor runs at the store's durability.
                conn.execute_batch(match synchronous {
                    Synchronous::Normal => "PRAGMA synchronous = NORMAL",
                    _ => "PRAGMA synchronous = FULL",
                })?;
                (
                    Leases::new(store),
                    Raw::Sqlite(Arc::new(Mutex::new(conn))),
                    Guard::None,
                    format!(
                        "SqliteStore, one connection, synchronous {synchronous:?}; \
                         floors on a second connection to the same file, same pragmas"
                    ),
                )
            }
        };
        let target = Target {
            backend,
            leases,
            raw,
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

    pub(crate) async fn exec(&self, sql: &str, params: Params) -> BoxResult<u64> {
        self.raw.exec(sql, params).await
    }

    pub(crate) async fn guarded_update(&self, ctx: &LeaseContext, w: usize) -> BoxResult<()> {
        let id = i32::try_from(w)?;
        let sql = self.sql.update_counter.clone();
        match &self.guard {
            Guard::Postgres(store) => {
                store
                    .transaction(ctx, move |tx| {
                        Box::pin(async move { tx.execute(sql.as_str(), &[&id]).await })
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
            Guard::None => return Err("no transaction guard".into()),
        }
        Ok(())
    }

    pub(crate) async fn unguarded_update(&self, w: usize) -> BoxResult<()> {
        let id = i32::try_from(w)?;
        match &self.raw {
            Raw::Postgres(pool) => {
                let mut client = pool.get().await?;
                let tx = client.transaction().await?;
                let stmt = tx.prepare_cached(&self.sql.update_counter).await?;
                tx.execute(&stmt, &[&id]).await?;
                tx.commit().await?;
            }
            Raw::MySql(pool) => {
                let mut conn = pool.get_conn().await?;
                let mut tx = conn
                    .start_transaction(mysql_async::TxOpts::default())
                    .await?;
                tx.exec_drop(self.sql.update_counter.as_str(), (id,))
                    .await?;
                tx.commit().await?;
            }
            Raw::Sqlite(_) => return Err("no transaction guard on SQLite".into()),
        }
        Ok(())
    }

    pub(crate) async fn cleanup(&self) {
        if let Err(e) = self.raw.batch(&format!("DELETE FROM {TABLE}")).await {
            eprintln!("bench: cleanup failed: {e}");
        }
    }
}
