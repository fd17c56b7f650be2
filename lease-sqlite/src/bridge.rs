//! The blocking bridge: every call of the store runs on tokio's blocking
//! pool, on the store's one connection.

use std::sync::Arc;
use std::sync::PoisonError;
use std::sync::atomic::{AtomicBool, Ordering};

use lease_core::BoxError;
use rusqlite::Connection;

use crate::sql::Statements;
use crate::store::SqliteStore;

impl SqliteStore {
    /// Runs `f` on the connection, on tokio's blocking pool.
    ///
    /// Cancel safety: once spawned, the blocking task cannot be stopped, so a
    /// dropped call may still run. Dropping the future marks the call
    /// abandoned, and an abandoned call that has not reached the connection
    /// yet (it was queued behind others) does not run at all. A call that did
    /// run left no transaction open: `f` commits or drops (rolls back) its
    /// own, and the connection is checked for one left open before each call.
    pub(crate) async fn run<T, F>(&self, f: F) -> Result<T, BoxError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection, &Statements) -> rusqlite::Result<T> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        let abandoned = Arc::new(AtomicBool::new(false));
        let _abandon_on_drop = AbandonOnDrop(Arc::clone(&abandoned));
        let task = tokio::task::spawn_blocking(move || {
            let mut conn = inner.conn.lock().unwrap_or_else(PoisonError::into_inner);
            if abandoned.load(Ordering::SeqCst) {
                return None;
            }
            Some(run_on(&mut conn, &inner.sql, f))
        });
        match task.await {
            Ok(Some(result)) => result.map_err(Into::into),
            Ok(None) => Err("the SQLite call was abandoned before it ran".into()),
            Err(join) => Err(join.into()),
        }
    }
}

/// Runs `f` on a connection with no transaction open.
fn run_on<T>(
    conn: &mut Connection,
    sql: &Statements,
    f: impl FnOnce(&mut Connection, &Statements) -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    if !conn.is_autocommit() {
        // Only a panic in the middle of a call could leave one open.
        conn.execute_batch("ROLLBACK")?;
    }
    f(conn, sql)
}

/// Marks a call abandoned when its future is dropped (or has returned, when
/// the mark no longer matters).
struct AbandonOnDrop(Arc<AtomicBool>);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}
