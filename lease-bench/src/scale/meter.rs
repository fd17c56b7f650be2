//! The database's side of the measurement (its counters, the CPU of its
//! server, the least time left on any held lease) and this process's.

use std::path::PathBuf;
use std::time::Duration;

use dblease::mysql::mysql_async::{self, prelude::Queryable as _};
use dblease::postgres::deadpool_postgres::Pool;
use dblease::sqlite::rusqlite;
use tokio::time::Instant;

use super::recording::Recording;
use super::{BoxError, BoxResult, TABLE};
use crate::cpu::cpu_time;

/// The database's side of the measurement: counters, and the least time
/// left on any held lease.
pub(crate) enum Meter {
    Postgres { pool: Pool, app: String },
    MySql { pool: mysql_async::Pool },
    Sqlite { path: PathBuf },
}

/// What the database and this process had spent at one moment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sample {
    pub(crate) at: Instant,
    /// Rows updated in the table (`None`: counted by the wrapper).
    pub(crate) rows_updated: Option<i64>,
    /// Transactions committed in the database (`None`: counted by the
    /// wrapper).
    pub(crate) commits: Option<i64>,
    pub(crate) server_cpu: Option<Duration>,
    pub(crate) process_cpu: Duration,
    pub(crate) writes: u64,
    pub(crate) renewed: u64,
}

/// The CPU time of the first process whose command is `mariadbd` or
/// `mysqld`.
fn mariadbd_cpu() -> Option<Duration> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if matches!(comm.trim(), "mariadbd" | "mysqld") {
            return cpu_time(Some(pid)).ok();
        }
    }
    None
}

/// The resident memory of this process, in bytes.
pub(crate) fn rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

impl Meter {
    pub(crate) async fn sample(&self, recording: &Recording) -> BoxResult<Sample> {
        let (rows_updated, commits, server_cpu) = match self {
            Meter::Postgres { pool, app } => {
                let client = pool.get().await?;
                // Statistics are flushed by each backend at most once a
                // second: ask for a fresh snapshot of what has been flushed.
                client
                    .batch_execute("SELECT pg_stat_clear_snapshot()")
                    .await?;
                let rows: i64 = client
                    .query_opt(
                        "SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = $1::text",
                        &[&TABLE],
                    )
                    .await?
                    .map_or(Ok(0), |r| r.try_get(0))?;
                let commits: i64 = client
                    .query_one(
                        "SELECT xact_commit FROM pg_stat_database \
                         WHERE datname = current_database()",
                        &[],
                    )
                    .await?
                    .try_get(0)?;
                let pids: Vec<i32> = client
                    .query(
                        "SELECT pid FROM pg_stat_activity WHERE application_name = $1::text",
                        &[app],
                    )
                    .await?
                    .iter()
                    .map(|r| r.try_get(0))
                    .collect::<Result<_, _>>()?;
                let mut cpu = Duration::ZERO;
                for pid in pids {
                    if let Ok(t) = cpu_time(u32::try_from(pid).ok()) {
                        cpu += t;
                    }
                }
                (Some(rows), Some(commits), Some(cpu))
            }
            Meter::MySql { pool } => {
                let mut conn = pool.get_conn().await?;
                let status: Vec<(String, String)> = conn
                    .query(
                        "SHOW GLOBAL STATUS WHERE Variable_name IN \
                         ('Handler_update', 'Handler_commit')",
                    )
                    .await?;
                let get = |name: &str| {
                    status
                        .iter()
                        .find(|(n, _)| n.eq_ignore_ascii_case(name))
                        .and_then(|(_, v)| v.parse::<i64>().ok())
                };
                (get("Handler_update"), get("Handler_commit"), mariadbd_cpu())
            }
            Meter::Sqlite { .. } => (None, None, None),
        };
        let r = recording.lock();
        Ok(Sample {
            at: Instant::now(),
            rows_updated,
            commits,
            server_cpu,
            process_cpu: cpu_time(None)?,
            writes: r.writes,
            renewed: r.renewed,
        })
    }

    /// PostgreSQL: how long the oldest snapshot of another client has been
    /// held, in s (it keeps VACUUM and HOT pruning from removing the dead
    /// rows the renewals leave, so every renewal costs the server more).
    pub(crate) async fn oldest_other_snapshot(&self) -> BoxResult<Option<f64>> {
        match self {
            Meter::Postgres { pool, .. } => {
                let row = pool
                    .get()
                    .await?
                    .query_one(
                        "SELECT coalesce(extract(epoch FROM max(clock_timestamp() - xact_start)), 0)::float8 \
                           FROM pg_stat_activity \
                          WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid() \
                            AND application_name NOT LIKE 'lease-scale-%'",
                        &[],
                    )
                    .await?;
                Ok(Some(row.try_get(0)?))
            }
            _ => Ok(None),
        }
    }

    /// The held leases in the table, and the least time left on any of
    /// them by the database's clock, in ms.
    pub(crate) async fn least_left(&self) -> BoxResult<(i64, i64)> {
        match self {
            Meter::Postgres { pool, .. } => {
                let row = pool
                    .get()
                    .await?
                    .query_one(
                        &format!(
                            "SELECT count(*), coalesce(min(expires_at_ms), 0) \
                               - floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint \
                             FROM {TABLE} WHERE expires_at_ms > 0"
                        ),
                        &[],
                    )
                    .await?;
                Ok((row.try_get(0)?, row.try_get(1)?))
            }
            Meter::MySql { pool } => {
                let mut conn = pool.get_conn().await?;
                let row: Option<(i64, i64)> = conn
                    .query_first(format!(
                        "SELECT count(*), CAST(coalesce(min(expires_at_ms), 0) \
                           - CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) AS SIGNED) \
                         FROM {TABLE} WHERE expires_at_ms > 0"
                    ))
                    .await?;
                row.ok_or_else(|| "no answer".into())
            }
            Meter::Sqlite { path } => {
                let path = path.clone();
                tokio::task::spawn_blocking(move || {
                    let conn = rusqlite::Connection::open(path)?;
                    conn.busy_timeout(Duration::from_secs(5))?;
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)?
                        .as_millis();
                    let now = i64::try_from(now)?;
                    let (n, min): (i64, Option<i64>) = conn.query_row(
                        &format!(
                            "SELECT count(*), min(expires_at_ms) FROM {TABLE} \
                             WHERE expires_at_ms > 0"
                        ),
                        [],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )?;
                    Ok::<_, BoxError>((n, min.unwrap_or(0) - now))
                })
                .await?
            }
        }
    }
}
