//! The blocking bridge: every call of the store goes to a queue that one
//! thread of the store's own serves, first come, first served and back to
//! back, on the store's one connection.
//!
//! Why a thread of its own. Sent to tokio's blocking pool at once, each call
//! waited there on the connection's mutex, which wakes waiters in no order:
//! at concurrency 32, 32 blocking threads parked on one lock, and a caller
//! could starve behind later ones (a p99 of 180–330 ms measured from
//! outside, against 0.3–0.5 ms for the same statements by hand). A fair
//! queue awaited before the hop to the blocking pool (a one-permit
//! semaphore) cured the tail but left the connection idle for a wake-up
//! and a thread hop between calls: the contended claim at c=32 measured
//! 8x its floor. The thread runs the next call as soon as the last one
//! ends. A call dropped while it waits in the queue never runs.
//!
//! Guarded transactions run the application's own closure, for as long as
//! it takes: they take the connection's lock from tokio's blocking pool
//! instead, between two calls of the queue.

use std::sync::Arc;
use std::sync::PoisonError;
use std::sync::atomic::{AtomicBool, Ordering};

use lease_core::BoxError;
use rusqlite::Connection;

use crate::sql::Statements;
use crate::store::SqliteStore;

impl SqliteStore {
    /// Runs `f` on the connection, on the store's connection thread, after
    /// the calls queued before it.
    ///
    /// Cancel safety: once queued, the call cannot be taken back, so a
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
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            if abandoned.load(Ordering::SeqCst) {
                return;
            }
            let mut conn = inner.conn.lock().unwrap_or_else(PoisonError::into_inner);
            let _ = reply.send(run_on(&mut conn, &inner.sql, f));
        });
        self.inner
            .queue
            .send(job)
            .map_err(|_| BoxError::from("the SQLite store's connection thread has stopped"))?;
        match answer.await {
            Ok(result) => result.map_err(Into::into),
            Err(_) => Err("the SQLite call was abandoned before it ran, or panicked".into()),
        }
    }
}

/// A call on the connection, run by the store's connection thread.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

/// Starts the thread that runs a store's calls in the order they came; it
/// ends when the store (the queue's sender) is dropped.
pub(crate) fn spawn_connection_thread() -> std::io::Result<std::sync::mpsc::Sender<Job>> {
    let (queue, jobs) = std::sync::mpsc::channel::<Job>();
    let _thread = std::thread::Builder::new()
        .name("lease-sqlite".to_owned())
        .spawn(move || {
            for job in jobs {
                // A panicking call drops its reply (the caller gets an
                // error) and leaves the thread serving the others.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
            }
        })?;
    Ok(queue)
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
