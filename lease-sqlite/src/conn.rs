//! The store's one connection, on a thread of its own: every use of the
//! connection goes to one queue, which that thread serves first come, first
//! served and back to back. The thread owns the connection: nothing else
//! can reach it.
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
//! Guarded transactions queue in the same line: each is one job that holds
//! the connection from `BEGIN IMMEDIATE` to its end, taking its steps
//! (the guard, the work, `COMMIT` or `ROLLBACK`) from its caller as they
//! come (see the transaction module). So a renewal that falls due during a
//! transaction runs as soon as that transaction ends, ahead of the next
//! one the work asks for: it waits out one transaction, never two (the
//! specification's rule for SQLite; guarded transactions once took the
//! connection's mutex from tokio's blocking pool instead, and could take it
//! again and again before a renewal that was waiting for it).

use std::sync::Arc;
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
        self.queue(Box::new(move |conn| {
            if abandoned.load(Ordering::SeqCst) {
                return;
            }
            let _ = reply.send(f(conn, &inner.sql));
        }))?;
        match answer.await {
            Ok(result) => result.map_err(Into::into),
            Err(_) => Err("the SQLite call was abandoned before it ran, or panicked".into()),
        }
    }

    /// Puts `job` at the end of the connection's queue.
    pub(crate) fn queue(&self, job: Job) -> Result<(), BoxError> {
        self.inner
            .queue
            .send(job)
            .map_err(|_| BoxError::from("the SQLite store's connection thread has stopped"))
    }
}

/// A use of the connection, run by the store's connection thread.
pub(crate) type Job = Box<dyn FnOnce(&mut Connection) + Send>;

/// Starts the thread that owns `conn` and runs the store's jobs on it in
/// the order they came; it ends when the store (the queue's sender) is
/// dropped, closing the connection.
pub(crate) fn spawn_connection_thread(
    mut conn: Connection,
) -> std::io::Result<std::sync::mpsc::Sender<Job>> {
    let (queue, jobs) = std::sync::mpsc::channel::<Job>();
    let _thread = std::thread::Builder::new()
        .name("lease-sqlite".to_owned())
        .spawn(move || {
            for job in jobs {
                // A panicking job drops its reply (the caller gets an
                // error) and leaves the thread serving the others.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    if !conn.is_autocommit() {
                        // Only a panic in the middle of a job could leave
                        // one open; a failed rollback leaves it to the
                        // job's own `BEGIN` to fail.
                        let _ = conn.execute_batch("ROLLBACK");
                    }
                    job(&mut conn);
                }));
            }
        })?;
    Ok(queue)
}

/// Marks a call abandoned when its future is dropped (or has returned, when
/// the mark no longer matters).
struct AbandonOnDrop(Arc<AtomicBool>);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}
