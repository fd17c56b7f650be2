//! The faults the orchestrator injects, and what it needs to inject them.

use std::path::Path;
use std::time::Duration;

use dblease::Leases;
use tokio::process::Command;
use tokio::time::{sleep, timeout};

use super::CLOCK_READ_BOUND;

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

/// How long a freeze lasts (ms): `SIGSTOP`, then `SIGCONT` after this long.
///
/// A frozen process notices nothing, so no lease can keep a holder frozen
/// for longer than its margin from acting beside its successor (the
/// library's docs say so): with the soak's timings a holder whose renewals
/// already fail steps down at its deadline (2 s after the last renewal that
/// succeeded), 1 s before the database frees the name (3 s). A freeze kept
/// well under that margin must cost nothing: the holder, thawed, sees its
/// deadline passed and stops before anyone can claim.
pub const FREEZE: (u64, u64) = (100, 600);

/// Freezes process `pid` for `d`: `kill -STOP`, then `kill -CONT`.
pub(crate) async fn freeze(pid: u32, d: Duration) -> std::io::Result<()> {
    let signal = |sig: &'static str| {
        let pid = pid.to_string();
        async move {
            let status = Command::new("kill").args([sig, &pid]).status().await?;
            if status.success() {
                Ok(())
            } else {
                Err(std::io::Error::other(format!("kill {sig} {pid}: {status}")))
            }
        }
    };
    signal("-STOP").await?;
    sleep(d).await;
    // It may have been killed meanwhile: nothing left to thaw then.
    let _ = signal("-CONT").await;
    Ok(())
}
