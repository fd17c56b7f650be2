//! [`MySqlStore::transaction`]: the guarded transaction, and the guard
//! statement for other drivers.

use std::time::Duration;

use lease_core::{BoxFuture, Dialect, GuardError, GuardStatement, LeaseContext};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Transaction, TxOpts, params};

use crate::store::MySqlStore;

/// How long a guarded transaction's rollback may take before its connection
/// is killed instead.
const ROLLBACK_BOUND: Duration = Duration::from_secs(1);

impl MySqlStore {
    /// Runs `work` in a transaction guarded by the lease `ctx` runs under.
    ///
    /// This is the contract of [`lease_core::guard`], which every backend
    /// keeps: the same error type, the same rollback rules.
    ///
    /// The transaction's first statement verifies the lease and takes a
    /// shared lock on its row (`SELECT term ... LOCK IN SHARE MODE`), and the
    /// term it reads is compared with the handle's: when the lease is no
    /// longer this holder's at that term, the transaction is rolled back
    /// and not one statement of `work` runs. While the transaction is open,
    /// the lock makes every write to the lease row wait, so a successor's
    /// claim cannot take the name until the transaction has ended: a holder
    /// frozen between its verification and its commit cannot commit after a
    /// successor claimed.
    ///
    /// InnoDB has no key-share lock, so the holder's own renewals wait for
    /// the transaction too: a guarded transaction must stay shorter than the
    /// local deadline minus the renew interval (8 s with the default
    /// timings), and shorter than the lock-wait bound for a renewal that
    /// falls due during it to succeed at its first attempt.
    ///
    /// The transaction ends with the lease context: when `ctx` is cancelled
    /// (the lease lost, the parent cancelled, the renewals stopped) before
    /// the commit is sent, `work` is dropped where it is and the transaction
    /// rolled back (its connection killed, if the rollback does not go
    /// through within a second). `work` commits nothing itself: returning
    /// `Ok` commits, `Err` rolls back, and a panic rolls back (the
    /// transaction is dropped, and the driver rolls it back as its
    /// connection returns to the pool) and resumes on the caller.
    ///
    /// ```no_run
    /// # async fn example(store: lease_mysql::MySqlStore, ctx: lease_core::LeaseContext)
    /// # -> Result<(), lease_core::GuardError<lease_mysql::mysql_async::Error>> {
    /// use lease_mysql::mysql_async::prelude::Queryable;
    ///
    /// let term = ctx.term();
    /// store
    ///     .transaction(&ctx, |tx| {
    ///         Box::pin(async move {
    ///             tx.exec_drop(
    ///                 "UPDATE reports SET done = 1, fenced_by = ? WHERE id = 7",
    ///                 (term,),
    ///             )
    ///             .await
    ///         })
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`GuardError::Lost`] when the verification finds the lease gone (or
    /// `ctx` ends with a loss before the commit); [`GuardError::Ended`] when
    /// `ctx` ends otherwise before the commit; [`GuardError::Database`]
    /// (its source the driver's `mysql_async::Error`) when a statement of the guard
    /// fails; [`GuardError::Work`] with what `work` returned.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before the commit is sent drops the transaction:
    /// it is rolled back as its connection returns to the pool (or, if the
    /// connection is broken, by the server when it closes). Dropped while
    /// the commit is in flight, the transaction may or may not have
    /// committed.
    pub async fn transaction<T, E, F>(
        &self,
        ctx: &LeaseContext,
        work: F,
    ) -> Result<T, GuardError<E>>
    where
        F: for<'t, 'c> FnOnce(&'t mut Transaction<'c>) -> BoxFuture<'t, Result<T, E>> + Send,
        T: Send,
        E: Send,
    {
        lease_core::metrics::guarded_transaction(self.guarded_transaction(ctx, work).await)
    }

    async fn guarded_transaction<T, E, F>(
        &self,
        ctx: &LeaseContext,
        work: F,
    ) -> Result<T, GuardError<E>>
    where
        F: for<'t, 'c> FnOnce(&'t mut Transaction<'c>) -> BoxFuture<'t, Result<T, E>> + Send,
        T: Send,
        E: Send,
    {
        let name = ctx.handle().name();
        if ctx.is_cancelled() {
            return Err(GuardError::ended(ctx));
        }
        let got = tokio::select! {
            biased;
            () = ctx.cancelled() => None,
            conn = self.inner.pool.get_conn() => Some(conn),
        };
        let mut conn: Conn = match got {
            None => return Err(GuardError::ended(ctx)),
            Some(conn) => conn.map_err(|e| self.db_error(name, e))?,
        };
        // The work may change the session: until the session setup has been
        // run again after it, the connection is reset as it returns to the
        // pool (which also empties its statement cache and runs the pool's
        // own setup statements).
        conn.reset_connection(true);
        let (result, committed) = self.guarded(&mut conn, ctx, work).await;
        if committed {
            // On a pool of the store's own, put back what the work may have
            // changed, keeping the prepared statements; a failure leaves the
            // reset to the pool.
            if let Some(setup) = &self.inner.setup {
                if conn.query_drop(setup.as_str()).await.is_ok() {
                    conn.reset_connection(false);
                }
            }
        } else {
            tracing::debug!(name, term = ctx.term(), cause = ?ctx.cause(), "guarded transaction not committed");
        }
        result
    }

    /// The transaction of [`transaction`](Self::transaction) on `conn`, and
    /// whether it committed.
    async fn guarded<T, E, F>(
        &self,
        conn: &mut Conn,
        ctx: &LeaseContext,
        work: F,
    ) -> (Result<T, GuardError<E>>, bool)
    where
        F: for<'t, 'c> FnOnce(&'t mut Transaction<'c>) -> BoxFuture<'t, Result<T, E>> + Send,
        T: Send,
        E: Send,
    {
        let name = ctx.handle().name();
        let conn_id = conn.id();
        let begin = async {
            let mut tx = conn.start_transaction(TxOpts::default()).await?;
            let term: Option<u64> = tx
                .exec_first(
                    self.inner.sql.verify_locked.as_str(),
                    params! { "name" => name, "holder" => ctx.handle().token().expose() },
                )
                .await?;
            Ok::<_, mysql_async::Error>((tx, term))
        };
        let begun = tokio::select! {
            biased;
            () = ctx.cancelled() => None,
            begun = begin => Some(begun),
        };
        let (mut tx, term) = match begun {
            // Dropped mid-statement: the connection is not reused as it is.
            None => {
                self.kill(conn_id).await;
                return (Err(GuardError::ended(ctx)), false);
            }
            Some(Err(err)) => return (Err(self.db_error(name, err)), false),
            Some(Ok(begun)) => begun,
        };
        if term != Some(ctx.term()) {
            let _ = tx.rollback().await;
            tracing::debug!(
                name,
                term = ctx.term(),
                "guarded transaction refused: lease lost"
            );
            return (Err(GuardError::not_holder(name)), false);
        }
        let outcome = {
            let run = work(&mut tx);
            tokio::select! {
                biased;
                () = ctx.cancelled() => None,
                done = run => Some(done),
            }
        };
        match outcome {
            None => {
                self.abort(tx, conn_id).await;
                (Err(GuardError::ended(ctx)), false)
            }
            Some(Err(err)) => {
                self.abort(tx, conn_id).await;
                (Err(GuardError::Work(err)), false)
            }
            Some(Ok(_)) if ctx.is_cancelled() => {
                self.abort(tx, conn_id).await;
                (Err(GuardError::ended(ctx)), false)
            }
            Some(Ok(value)) => match tx.commit().await {
                Ok(()) => (Ok(value), true),
                Err(err) => (Err(self.db_error(name, err)), false),
            },
        }
    }

    /// A failed statement of the guard: the driver's error, classified as
    /// the store classifies its own errors.
    fn db_error<E>(&self, name: &str, err: mysql_async::Error) -> GuardError<E> {
        let kind = crate::error::classify(&err);
        GuardError::database(name, kind, err)
    }

    /// The guard statement, for running the fence by hand in a transaction
    /// of another driver: see [`GuardStatement`] and [`lease_core::guard`].
    ///
    /// Open the transaction with `START TRANSACTION`, then run `SELECT term
    /// FROM {table} WHERE name = ? AND holder = ? AND term = ? AND
    /// expires_at_ms > {now_ms} LOCK IN SHARE MODE` as its
    /// first statement: one row, the lease is still the handle's. The shared
    /// record lock makes every write to the row wait until the transaction
    /// ends, the holder's own renewals included: keep the transaction
    /// shorter than the local deadline minus the renew interval.
    #[must_use]
    pub fn guard_statement(&self) -> GuardStatement {
        GuardStatement::new(
            Dialect::MySql,
            "START TRANSACTION",
            self.inner.sql.guard.clone(),
        )
    }

    /// Rolls `tx` back; if that does not go through promptly (the work was
    /// dropped mid-statement, or the statement waits on a lock), kills the
    /// connection, which rolls the transaction back on the server.
    async fn abort(&self, tx: Transaction<'_>, conn_id: u32) {
        match tokio::time::timeout(ROLLBACK_BOUND, tx.rollback()).await {
            Ok(Ok(())) => {}
            _ => self.kill(conn_id).await,
        }
    }

    /// Kills connection `id` from another connection of the pool. Best
    /// effort: a connection that is gone needs no killing.
    async fn kill(&self, id: u32) {
        let killed = async {
            let mut conn = self.inner.pool.get_conn().await?;
            conn.query_drop(format!("KILL CONNECTION {id}")).await
        };
        if let Err(err) = tokio::time::timeout(ROLLBACK_BOUND, killed)
            .await
            .unwrap_or(Ok(()))
        {
            tracing::debug!(id, error = %err, "killing a guarded transaction's connection failed");
        }
    }
}
