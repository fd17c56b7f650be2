//! [`SqliteStore::transaction`]: the guarded transaction, and the guard
//! statement for other drivers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use lease_core::{Dialect, GuardError, GuardStatement, LeaseContext};
use rusqlite::{OptionalExtension, Transaction, TransactionBehavior, params};

use crate::sql::{self, term_at};
use crate::store::{Inner, SqliteStore};

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
    /// the commit, the statement `work` is running is interrupted and the
    /// transaction rolled back. `work` commits nothing itself: returning
    /// `Ok` commits, `Err` rolls back. A panic in `work` rolls back and
    /// resumes on the caller.
    ///
    /// This is the contract of [`lease_core::guard`], which every backend
    /// keeps: the same method, the same error type, the same rollback rules,
    /// the term compared with the handle's. Only the closure differs: it is
    /// synchronous, and runs on tokio's blocking pool, on the thread that
    /// holds the store's connection. rusqlite is a blocking driver: its
    /// `Transaction` borrows a `Connection` that is not `Sync`, so an async
    /// closure would hold the connection across `.await`s on a runtime
    /// thread, blocking it on every statement. The context ending
    /// interrupts the statement the work is running instead of dropping a
    /// future.
    ///
    /// The store has one connection: the holder's own renewals wait for the
    /// transaction to end. Keep each guarded transaction shorter than half
    /// the local deadline (5 s with the default timings), the bound on each
    /// renewal attempt; one longer than the local deadline always costs the
    /// lease. See the crate documentation.
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
    /// lock past the busy timeout, for one); [`GuardError::Work`] with what
    /// `work` returned.
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
        lease_core::metrics::guarded_transaction(self.guarded_transaction(ctx, work).await)
    }

    async fn guarded_transaction<T, E, F>(
        &self,
        ctx: &LeaseContext,
        work: F,
    ) -> Result<T, GuardError<E>>
    where
        F: FnOnce(&Transaction<'_>) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        let control = Arc::new(TxControl {
            running: Mutex::new(false),
            stop: AtomicBool::new(false),
        });
        let _stop_on_drop = StopOnDrop {
            control: Arc::clone(&control),
            inner: Arc::clone(&self.inner),
        };
        let inner = Arc::clone(&self.inner);
        let task = {
            let (ctx, control) = (ctx.clone(), Arc::clone(&control));
            tokio::task::spawn_blocking(move || guarded(&inner, &ctx, &control, work))
        };
        tokio::pin!(task);
        let joined = tokio::select! {
            biased;
            joined = &mut task => joined,
            () = ctx.cancelled() => {
                control.stop(&self.inner);
                task.await
            }
        };
        match joined {
            Ok(result) => result,
            Err(join) => match join.try_into_panic() {
                Ok(panic) => std::panic::resume_unwind(panic),
                // Cancelled: the runtime shut down before the task started,
                // so nothing ran.
                Err(_) => Err(GuardError::ended(ctx)),
            },
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
            sql::guard(self.inner.sql.table.quoted()),
        )
    }
}

/// How the async side of a guarded transaction stops its blocking side.
struct TxControl {
    /// Whether the blocking side holds the connection: only then may the
    /// connection be interrupted, or the interrupt would hit the next call.
    running: Mutex<bool>,
    /// The context ended, or the future was dropped: do not commit.
    stop: AtomicBool,
}

impl TxControl {
    fn stop(&self, inner: &Inner) {
        self.stop.store(true, Ordering::SeqCst);
        let running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if *running {
            inner.interrupt.interrupt();
        }
    }

    fn stopped(&self, ctx: &LeaseContext) -> bool {
        self.stop.load(Ordering::SeqCst) || ctx.is_cancelled()
    }

    fn set_running(&self, running: bool) {
        *self.running.lock().unwrap_or_else(PoisonError::into_inner) = running;
    }
}

/// Marks the blocking side no longer running when dropped, panics included.
struct Running<'a>(&'a TxControl);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.set_running(false);
    }
}

/// Stops a guarded transaction whose future is dropped (or has returned,
/// when there is nothing left to stop).
struct StopOnDrop {
    control: Arc<TxControl>,
    inner: Arc<Inner>,
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.control.stop(&self.inner);
    }
}

/// The blocking side of [`SqliteStore::transaction`].
fn guarded<T, E, F>(
    inner: &Inner,
    ctx: &LeaseContext,
    control: &TxControl,
    work: F,
) -> Result<T, GuardError<E>>
where
    F: FnOnce(&Transaction<'_>) -> Result<T, E>,
{
    let name = ctx.handle().name();
    let ended = || GuardError::ended(ctx);
    let db = |e: rusqlite::Error| {
        let kind = crate::error::classify(&e);
        GuardError::database(name, kind, e)
    };
    let mut conn = inner.conn.lock().unwrap_or_else(PoisonError::into_inner);
    control.set_running(true);
    // Declared after `conn`, so dropped before it: not running any more
    // once the connection is free for the next call.
    let _running = Running(control);
    if control.stopped(ctx) {
        return Err(ended());
    }
    if !conn.is_autocommit() {
        conn.execute_batch("ROLLBACK").map_err(db)?;
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(db)?;
    let term: Option<u64> = tx
        .query_row(
            &inner.sql.verify,
            params![name, ctx.handle().token().expose()],
            |row| term_at(row, 0),
        )
        .optional()
        .map_err(db)?;
    if term != Some(ctx.term()) {
        tracing::debug!(
            name,
            term = ctx.term(),
            "guarded transaction refused: lease lost"
        );
        return Err(GuardError::not_holder(name));
    }
    let value = work(&tx);
    if control.stopped(ctx) {
        tracing::debug!(name, term = ctx.term(), cause = ?ctx.cause(), "guarded transaction rolled back: context ended");
        return Err(ended());
    }
    let value = value.map_err(GuardError::Work)?;
    tx.commit().map_err(db)?;
    Ok(value)
}
