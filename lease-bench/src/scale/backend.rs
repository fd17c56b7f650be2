//! The backend under the scale run: its store (on the table
//! [`TABLE`], dropped first), the meter's own connection, a line that
//! describes them, and how to clean up at the end.

use std::path::PathBuf;
use std::sync::Arc;

use dblease::LeaseStore;
use dblease::mysql::MySqlStore;
use dblease::mysql::mysql_async::{self, prelude::Queryable as _};
use dblease::postgres::PostgresStore;
use dblease::postgres::deadpool_postgres::Pool;
use dblease::sqlite::SqliteStoreBuilder;

use super::meter::Meter;
use super::{BoxResult, TABLE};
use crate::url::Backend;

/// What the run measures on: the store, the meter, a description, the
/// clean-up.
pub(crate) struct Setup {
    pub(crate) store: Arc<dyn LeaseStore>,
    pub(crate) meter: Meter,
    pub(crate) describe: String,
    pub(crate) cleanup: Cleanup,
}

/// Opens the store `url` names with a pool of `pool_size` (SQLite: its one
/// connection), and the meter's own connection; drops the table of an
/// earlier run.
pub(crate) async fn open(url: &str, pool_size: usize) -> BoxResult<Setup> {
    let backend = Backend::of(url).ok_or("unrecognised URL scheme")?;
    Ok(match backend {
        Backend::Postgres => {
            let app = format!("lease-scale-{}", std::process::id());
            let sep = if url.contains('?') { '&' } else { '?' };
            let store = PostgresStore::builder(&format!("{url}{sep}application_name={app}"))?
                .with_table(TABLE)
                .with_pool_size(pool_size)
                .build()?;
            // The meter's own connection, under another name: its
            // statements are not counted as the store's.
            let meter_store = PostgresStore::builder(&format!(
                "{url}{sep}application_name=lease-scale-meter-{}",
                std::process::id()
            ))?
            .with_table(TABLE)
            .with_pool_size(1)
            .build()?;
            let pool = meter_store.pool().clone();
            pool.get()
                .await?
                .batch_execute(&format!("DROP TABLE IF EXISTS {TABLE}"))
                .await?;
            Setup {
                store: Arc::new(store),
                meter: Meter::Postgres {
                    pool: pool.clone(),
                    app,
                },
                describe: format!("PostgreSQL (pool of {pool_size} connections)"),
                cleanup: Cleanup::Postgres(pool),
            }
        }
        Backend::MySql => {
            let store = MySqlStore::builder(url)?
                .with_table(TABLE)
                .with_pool_constraints(1, pool_size)
                .connect()
                .await?;
            let meter_store = MySqlStore::builder(url)?
                .with_table(TABLE)
                .with_pool_constraints(1, 1)
                .connect()
                .await?;
            let pool = meter_store.pool().clone().into_inner();
            pool.get_conn()
                .await?
                .query_drop(format!("DROP TABLE IF EXISTS {TABLE}"))
                .await?;
            Setup {
                store: Arc::new(store),
                meter: Meter::MySql { pool: pool.clone() },
                describe: format!("MariaDB/MySQL (pool of up to {pool_size} connections)"),
                cleanup: Cleanup::MySql(pool),
            }
        }
        Backend::Sqlite => {
            let path = sqlite_path(url).ok_or("the scale run needs an SQLite file")?;
            for suffix in ["", "-wal", "-shm"] {
                let mut p = path.clone().into_os_string();
                p.push(suffix);
                let _ = std::fs::remove_file(p);
            }
            let store = SqliteStoreBuilder::from_path(&path)
                .with_table(TABLE)
                .build()?;
            Setup {
                store: Arc::new(store),
                meter: Meter::Sqlite { path: path.clone() },
                describe: format!("SQLite (one connection, {})", path.display()),
                cleanup: Cleanup::Sqlite(path),
            }
        }
    })
}

/// The file of an `sqlite://` URL; `None` for memory.
fn sqlite_path(url: &str) -> Option<PathBuf> {
    let rest = url.get(7..)?;
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    (rest != ":memory:" && !rest.is_empty()).then(|| PathBuf::from(rest))
}

/// Drops the table (and the SQLite file) at the end.
pub(crate) enum Cleanup {
    Postgres(Pool),
    MySql(mysql_async::Pool),
    Sqlite(PathBuf),
}

impl Cleanup {
    /// Drops the table (removes the files).
    pub(crate) async fn run(self) -> BoxResult<()> {
        match self {
            Cleanup::Postgres(pool) => {
                pool.get()
                    .await?
                    .batch_execute(&format!("DROP TABLE IF EXISTS {TABLE}"))
                    .await?;
            }
            Cleanup::MySql(pool) => {
                pool.get_conn()
                    .await?
                    .query_drop(format!("DROP TABLE IF EXISTS {TABLE}"))
                    .await?;
            }
            Cleanup::Sqlite(path) => {
                for suffix in ["", "-wal", "-shm"] {
                    let mut p = path.clone().into_os_string();
                    p.push(suffix);
                    let _ = std::fs::remove_file(p);
                }
            }
        }
        Ok(())
    }
}
