//! [`SqliteStore::transaction`]: the guarded transaction, and the guard
//! statement for other drivers.
//!
//! A guarded transaction is a session: one job in the connection's queue
//! (see the `conn` module) that holds the connection from `BEGIN IMMEDIATE`
//! to its end, and takes its steps from the async side as
//! [`lease_core::guard::drive`] asks for them, through a channel of its
//! own: the guard, then `COMMIT` or `ROLLBACK`. The work is synchronous and
//! goes with the guard: the session runs it as the guard's answer goes back
//! (only when the guard found the handle's term, the condition `drive` then
//! checks), so the connection waits one round trip with the async side,
//! for the commit, not three. An abandoned session (its caller gone) rolls
//! back and ends; the statement it runs is interrupted.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError};

use lease_core::guard::{self, GuardDriver};
use lease_core::{
    BoxFuture, DbErrorKind, Dialect, GuardError, GuardParams, GuardStatement, LeaseContext,
};
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};
use tokio::sync::oneshot;

use crate::sql::term_at;
use crate::store::SqliteStore;

impl SqliteStore {
    /// Runs `work` in a transaction guarded by the lease `ctx` runs under,
    /// on the store's connection.
    ///
    /// The transaction is `BEGIN IMMEDIATE`: it takes the file's write lock
    /// at once, and its first statement verifies the lease. When the lease
    /// is no longer this holder's, the transaction is rolled back and
    /// `work` does not run. While the transaction is open, no other
    /// connection can write to the file, so a successor's claim waits for it
    /// to end: a holder frozen between its verification and its commit
    /// cannot commit after a successor claimed.
    ///
    /// The transaction ends with the lease context: when `ctx` is cancelled
    /// (the lease lost, the parent cancelled, the renewals stopped) before
    /// the commit, the statement `work` is running is interrupted, the
    /// transaction rolled back, and the call returns at once. `work` commits
    /// nothing itself: returning `Ok` commits, `Err` rolls back. A panic in
    /// `work` rolls back and resumes on the caller.
    ///
    /// This is the contract of [`lease_core::guard`], which every backend
    /// keeps: the same method, the same error type, the same rollback rules,
    /// the term compared with the handle's (the flow is
    /// [`lease_core::guard::drive`], as on every backend). Only the closure
    /// differs: it is synchronous, and runs on the store's connection
    /// thread. rusqlite is a blocking driver: its `Transaction` borrows a
    /// `Connection` that is not `Sync`, so an async closure would hold the
    /// connection across `.await`s on a runtime thread, blocking it on every
    /// statement. The context ending interrupts the statement the work is
    /// running instead of dropping a future.
    ///
    /// The store has one connection, and every use of it waits its turn in
    /// one queue: the holder's own renewals wait for the transaction to end,
    /// and a renewal that falls due during it runs before the next
    /// transaction the work asks for. Keep each guarded transaction shorter
    /// than half the local deadline (5 s with the default timings), the
    /// bound on each renewal attempt: then transactions back to back cannot
    /// cost the lease. One longer than the local deadline always does. See
    /// the crate documentation.
    ///
    /// ```
    /// use lease_core::Leases;
    /// use lease_sqlite::{SqliteError, SqliteStore};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # tokio::runtime::Runtime::new()?.block_on(async {
    /// let store = SqliteStore::open_in_memory()?;
    /// let leases = Leases::new(store.clone());
    /// leases.migrate().await?;
    /// # store.transaction(&lease_core::LeaseContext::new(leases.claim("setup").await?.unwrap(), Default::default()), |tx| {
    /// #     tx.execute_batch("CREATE TABLE reports (id INTEGER PRIMARY KEY, done INTEGER, term INTEGER); INSERT INTO reports VALUES (7, 0, 0)")?;
    /// #     Ok::<_, rusqlite::Error>(())
    /// # }).await?;
    /// let Some(handle) = leases.claim("report:7").await? else {
    ///     return Ok(());
    /// };
    /// // In a program, the parent is the process's shutdown token.
    /// let holder = handle.hold(&Default::default());
    /// let term = i64::try_from(handle.term())?;
    /// store
    ///     .transaction(holder.context(), move |tx| {
    ///         tx.execute("UPDATE reports SET done = 1, term = ?1 WHERE id = 7", [term])
    ///     })
    ///     .await?;
    /// holder.stop().await;
    /// handle.release().await?;
    /// # Ok(()) })
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`GuardError::Lost`] when the verification finds the lease gone (or
    /// `ctx` ends with a loss before the commit); [`GuardError::Ended`] when
    /// `ctx` ends otherwise before the commit (or had ended already);
    /// [`GuardError::Database`] (its source the `rusqlite::Error`) when a
    /// statement of the guard fails (another connection holding the write
    /// lock past the busy timeout, for one), `COMMIT` included: SQLite is
    /// in the process, so its answer is never lost, and a failed `COMMIT`
    /// committed nothing; [`GuardError::OutcomeUnknown`] only when the
    /// `COMMIT` did not end within the statement timeout;
    /// [`GuardError::Work`] with what `work` returned.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before the commit rolls the transaction back: the
    /// statement `work` is running is interrupted, and the commit is not
    /// sent. Dropped while the commit is in flight, the transaction may or
    /// may not have committed.
    pub async fn transaction<T, E, F>(
        &self,
        ctx: &LeaseContext,
        work: F,
    ) -> Result<T, GuardError<E>>
    where
        F: FnOnce(&Transaction<'_>) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        let (done, result) = oneshot::channel();
        let work: Work = Box::new(move |tx| {
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(tx)));
            let _ = done.send(outcome);
        });
        let driver = Driver {
            store: self,
            work: Mutex::new(Some(work)),
        };
        match guard::drive(ctx, &driver, move |_tx| worked(result)).await {
            Ok(value) => Ok(value),
            Err(GuardError::Work(Step::Work(e))) => Err(GuardError::Work(e)),
            Err(GuardError::Work(Step::Gone(e))) => Err(GuardError::database(
                ctx.handle().name(),
                DbErrorKind::Other,
                e,
            )),
            Err(e) => Err(e.map_work(|_| unreachable_work())),
        }
    }

    /// The guard statement, for running the fence by hand in a transaction
    /// of another driver on the same file: see [`GuardStatement`] and
    /// [`lease_core::guard`].
    ///
    /// Open the transaction with `BEGIN IMMEDIATE`, then run `UPDATE
    /// {table} SET term = term WHERE name = ?1 AND holder = ?2 AND term = ?3
    /// AND expires_at_ms > {now_ms} RETURNING term` as its first
    /// statement: one row, the lease is still the handle's. It writes
    /// nothing, but as a write it takes the file's write lock even in a
    /// deferred `BEGIN`, so every other writer (a successor's claim
    /// included) waits until the transaction ends, up to its busy timeout.
    #[must_use]
    pub fn guard_statement(&self) -> GuardStatement {
        GuardStatement::new(
            Dialect::Sqlite,
            "BEGIN IMMEDIATE",
            self.inner.sql.guard.text().to_owned(),
        )
    }
}

/// The work of a guarded transaction, run on the connection thread; it
/// sends its own outcome.
type Work = Box<dyn FnOnce(&Transaction<'_>) + Send>;

/// What the async side of a guarded transaction asks of its session.
enum Command {
    /// `BEGIN IMMEDIATE` and the verification: the term of the row found.
    /// When it is `term`, the session then runs `work`.
    Open {
        name: String,
        token: String,
        term: u64,
        work: Option<Work>,
        reply: oneshot::Sender<rusqlite::Result<Option<u64>>>,
    },
    /// `COMMIT`, and the session ends.
    Commit(oneshot::Sender<rusqlite::Result<()>>),
    /// `ROLLBACK`, and the session ends.
    Rollback(oneshot::Sender<rusqlite::Result<()>>),
}

/// The async side's handle on a session queued for the connection.
struct Session {
    commands: Sender<Command>,
    control: Arc<Control>,
}

/// The open transaction of a session, as the flow hands it to the work.
struct Tx<'c>(&'c Session);

/// How the async side of a guarded transaction stops its session.
struct Control {
    /// Whether the session holds the connection: only then may the
    /// connection be interrupted, or the interrupt would hit the next job.
    running: Mutex<bool>,
    /// The session was abandoned: run nothing more, roll back.
    stop: AtomicBool,
}

impl Control {
    fn stop(&self, store: &SqliteStore) {
        self.stop.store(true, Ordering::SeqCst);
        let running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if *running {
            store.inner.interrupt.interrupt();
        }
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    fn set_running(&self, running: bool) {
        *self.running.lock().unwrap_or_else(PoisonError::into_inner) = running;
    }
}

/// Marks the session no longer running when dropped, panics included.
struct Running<'a>(&'a Control);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.set_running(false);
    }
}

/// What went wrong with a step of a session.
#[derive(Debug, thiserror::Error)]
enum SessionError {
    /// SQLite refused the statement.
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    /// The session ended before it answered: the connection thread stopped.
    #[error("the SQLite store's connection thread ended the guarded transaction")]
    Gone,
}

/// The work's own error, or the session gone under it.
enum Step<E> {
    Work(E),
    Gone(SessionError),
}

/// A work that returned neither: [`SqliteStore::transaction`] maps every
/// `GuardError::Work` itself, so [`GuardError::map_work`] never calls this.
fn unreachable_work<E>() -> E {
    unreachable!("GuardError::Work is mapped before map_work")
}

/// The outcome of the synchronous work, which the session ran after the
/// guard, as the flow's asynchronous work: awaited, its panic resumed here.
fn worked<'a, T, E>(
    result: oneshot::Receiver<std::thread::Result<Result<T, E>>>,
) -> BoxFuture<'a, Result<T, Step<E>>>
where
    T: Send + 'a,
    E: Send + 'a,
{
    Box::pin(async move {
        match result.await {
            Ok(Ok(done)) => done.map_err(Step::Work),
            Ok(Err(panic)) => std::panic::resume_unwind(panic),
            Err(_) => Err(Step::Gone(SessionError::Gone)),
        }
    })
}

impl Session {
    /// Sends `command` and waits for its answer.
    async fn ask<T>(
        &self,
        command: impl FnOnce(oneshot::Sender<rusqlite::Result<T>>) -> Command,
    ) -> Result<T, SessionError> {
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(command(reply))
            .map_err(|_| SessionError::Gone)?;
        Ok(answer.await.map_err(|_| SessionError::Gone)??)
    }
}

/// [`SqliteStore::transaction`]'s mechanics, for [`guard::drive`].
struct Driver<'s> {
    store: &'s SqliteStore,
    /// The work, until it goes to the session with the guard.
    work: Mutex<Option<Work>>,
}

impl GuardDriver for Driver<'_> {
    type Conn = Session;
    type Tx<'c> = Tx<'c>;
    type Error = SessionError;

    /// Queues the session for the connection: it starts once the jobs
    /// queued before it have run, and waits for its first command.
    async fn connect(&self) -> Result<Session, SessionError> {
        let (commands, received) = std::sync::mpsc::channel();
        let control = Arc::new(Control {
            running: Mutex::new(false),
            stop: AtomicBool::new(false),
        });
        let inner = Arc::clone(&self.store.inner);
        let on_thread = Arc::clone(&control);
        self.store
            .queue(Box::new(move |conn| {
                session(conn, inner.sql.verify.text(), &received, &on_thread);
            }))
            .map_err(|_| SessionError::Gone)?;
        Ok(Session { commands, control })
    }

    async fn open<'c>(
        &self,
        conn: &'c mut Session,
        params: GuardParams<'_>,
    ) -> Result<(Tx<'c>, Option<u64>), SessionError> {
        let (name, token) = (params.name.to_owned(), params.token.expose().to_owned());
        let term = u64::try_from(params.term).unwrap_or(u64::MAX);
        let work = self
            .work
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let found = conn
            .ask(|reply| Command::Open {
                name,
                token,
                term,
                work,
                reply,
            })
            .await?;
        Ok((Tx(conn), found))
    }

    async fn commit<'c>(&self, tx: Self::Tx<'c>) -> Result<(), SessionError> {
        tx.0.ask(Command::Commit).await
    }

    async fn rollback<'c>(&self, tx: Self::Tx<'c>) -> Result<(), SessionError> {
        tx.0.ask(Command::Rollback).await
    }

    /// Interrupts the statement the session runs, if any, and ends it: the
    /// session rolls back at its next step, or as soon as the work returns.
    fn abandon(&self, conn: Session) {
        conn.control.stop(self.store);
    }

    fn classify(&self, error: &SessionError) -> DbErrorKind {
        match error {
            SessionError::Sqlite(e) => crate::error::classify(e),
            SessionError::Gone => DbErrorKind::Other,
        }
    }

    /// SQLite runs in the process: every answer of its own is heard.
    fn refused(&self, error: &SessionError) -> bool {
        matches!(error, SessionError::Sqlite(_))
    }
}

/// A guarded transaction's session, on the connection thread: the guard,
/// the work where the guard found the handle's term, then `COMMIT` or
/// `ROLLBACK` as the caller asks, or nothing once the caller is gone (the
/// transaction then rolls back as it is dropped).
fn session(conn: &mut Connection, verify: &str, commands: &Receiver<Command>, control: &Control) {
    control.set_running(true);
    // Declared first, so dropped last: not running any more once the
    // transaction has rolled back and the connection is free for the next
    // job.
    let _running = Running(control);
    if control.stopped() {
        return;
    }
    let Ok(Command::Open {
        name,
        token,
        term,
        work,
        reply,
    }) = commands.recv()
    else {
        return;
    };
    let tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => {
            let _ = reply.send(Err(e));
            return;
        }
    };
    let found = tx
        .query_row(verify, params![name, token], |row| term_at(row, 0))
        .optional();
    // The work runs only where `drive` will let it: the guard found the
    // handle's term (`drive` refuses, and rolls back, otherwise).
    let verified = matches!(found, Ok(Some(found)) if found == term);
    let failed = found.is_err();
    let _ = reply.send(found);
    if failed {
        return;
    }
    if verified && !control.stopped() {
        if let Some(work) = work {
            work(&tx);
        }
    }
    match commands.recv() {
        Ok(Command::Commit(reply)) if !control.stopped() => {
            let _ = reply.send(tx.commit());
        }
        Ok(Command::Rollback(reply)) => {
            let _ = reply.send(tx.rollback());
        }
        // Abandoned: `tx` rolls back as it is dropped.
        _ => {}
    }
}
