//! The faults the orchestrator injects, and what it needs to inject them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use dblease::Leases;
use tokio::time::timeout;

use super::CLOCK_READ_BOUND;

/// The SQLite file a URL names.
pub(crate) fn sqlite_path(url: &str) -> Option<PathBuf> {
    let rest = url.get(7..)?;
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    (rest != ":memory:" && !rest.is_empty()).then(|| PathBuf::from(rest))
}

/// Holds SQLite's write lock on `path` for `d`: no write gets through.
pub(crate) fn stall(path: &Path, d: Duration) -> rusqlite::Result<()> {
    let conn = rusqlite::Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(10))?;
    conn.execute_batch("BEGIN IMMEDIATE")?;
    std::thread::sleep(d);
    conn.execute_batch("ROLLBACK")
}

/// The database's clock, or `i64::MAX` when it does not answer in time:
/// an upper bound either way.
pub(crate) async fn db_now(leases: &Leases) -> i64 {
    match timeout(CLOCK_READ_BOUND, leases.now()).await {
        Ok(Ok(now)) => now.as_millis(),
        _ => i64::MAX,
    }
}
