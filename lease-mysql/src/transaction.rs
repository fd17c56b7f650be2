//! [`MySqlStore::transaction`]: the guarded transaction, and the guard
//! statement for other drivers.

use std::time::Duration;

use lease_core::guard::{self, GuardDriver};
use lease_core::{
    BoxFuture, DbErrorKind, Dialect, GuardError, GuardParams, GuardStatement, LeaseContext,
};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Transaction, TxOpts};

use crate::store::MySqlStore;

/// How long killing an abandoned transaction's connection may take.
const KILL_BOUND: Duration = Duration::from_secs(1);

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
    /// the commit is sent, `work` is dropped where it is, the call returns at
    /// once, and the transaction is rolled back: its connection is killed
    /// (`KILL CONNECTION`, from another connection of the pool, in the
    /// background), so a statement still running stops too. `work` commits
    /// nothing itself: returning `Ok` commits (within the store's statement
    /// timeout), `Err` rolls back, and a panic kills the connection the
    /// same way and resumes on the caller.
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
    /// (its source the driver's `mysql_async::Error`) when a statement of
    /// the guard fails before `COMMIT` is sent, or the server refuses the
    /// `COMMIT`; [`GuardError::OutcomeUnknown`] when `COMMIT` was sent and
    /// no answer came (the connection failed, or the statement timeout
    /// passed): it may have committed, so it is not retryable;
    /// [`GuardError::Work`] with what `work` returned.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before the commit is sent kills the
    /// transaction's connection, as when `ctx` ends. Dropped while the
    /// commit is in flight, the transaction may or may not have committed.
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
        guard::drive(ctx, &Driver(self), work).await
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
            self.inner.sql.guard.text().to_owned(),
        )
    }
}

/// [`MySqlStore::transaction`]'s mechanics, for [`guard::drive`].
struct Driver<'s>(&'s MySqlStore);

impl GuardDriver for Driver<'_> {
    type Conn = Conn;
    type Tx<'c> = Transaction<'c>;
    type Error = mysql_async::Error;

    async fn connect(&self) -> Result<Conn, mysql_async::Error> {
        let mut conn = self.0.inner.pool.get_conn().await?;
        // The work may change the session: until the session setup has been
        // run again after it, the connection is reset as it returns to the
        // pool (which also empties its statement cache and runs the pool's
        // own setup statements).
        conn.reset_connection(true);
        Ok(conn)
    }

    /// `START TRANSACTION`, then `SELECT term ... LOCK IN SHARE MODE`.
    async fn open<'c>(
        &self,
        conn: &'c mut Conn,
        params: GuardParams<'_>,
    ) -> Result<(Transaction<'c>, Option<u64>), mysql_async::Error> {
        let verify = self.0.inner.sql.verify_locked.text();
        let mut tx = conn.start_transaction(TxOpts::default()).await?;
        let term: Option<u64> = tx
            .exec_first(verify, (params.name, params.token.expose()))
            .await?;
        Ok((tx, term))
    }

    async fn commit<'c>(&self, tx: Self::Tx<'c>) -> Result<(), mysql_async::Error> {
        tx.commit().await
    }

    async fn rollback<'c>(&self, tx: Self::Tx<'c>) -> Result<(), mysql_async::Error> {
        tx.rollback().await
    }

    /// On a pool of the store's own, puts back what the work may have
    /// changed, keeping the prepared statements; a failure leaves the reset
    /// to the pool.
    async fn committed(&self, conn: &mut Conn) {
        if let Some(setup) = &self.0.inner.setup {
            if conn.query_drop(setup.as_str()).await.is_ok() {
                conn.reset_connection(false);
            }
        }
    }

    /// Kills the connection from another connection of the pool, in the
    /// background and within [`KILL_BOUND`]: the server rolls the
    /// transaction back and stops whatever statement it still runs.
    ///
    /// The connection is held until the `KILL` has been answered, and only
    /// then goes back to the pool, whose clean-up finds it dead and drops
    /// it. Given back first, it could be cleaned, handed to another caller
    /// and killed under that caller's own statements. When the pool gives
    /// no other connection within the bound (a pool of one, or every
    /// connection busy), the connection goes back unkilled, and the pool's
    /// clean-up (waiting for the statement's end, then a rollback) ends the
    /// transaction.
    fn abandon(&self, conn: Conn) {
        let id = conn.id();
        let pool = self.0.inner.pool.clone();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        drop(runtime.spawn(async move {
            let killed = async {
                let mut killer = pool.get_conn().await?;
                killer.query_drop(format!("KILL CONNECTION {id}")).await
            };
            match tokio::time::timeout(KILL_BOUND, killed).await {
                Ok(Ok(())) => {}
                // A connection that is gone needs no killing.
                Ok(Err(err)) => tracing::debug!(
                    id,
                    error = %err,
                    "killing a guarded transaction's connection failed"
                ),
                Err(_) => tracing::debug!(
                    id,
                    bound = ?KILL_BOUND,
                    "no connection to kill a guarded transaction's connection from; \
                     the pool's clean-up rolls it back"
                ),
            }
            drop(conn);
        }));
    }

    fn classify(&self, error: &mysql_async::Error) -> DbErrorKind {
        crate::error::classify(error)
    }

    /// The server's error packet in answer to the statement, unless it says
    /// the connection is going (killed, shutting down): that says nothing of
    /// a `COMMIT`'s outcome.
    fn refused(&self, error: &mysql_async::Error) -> bool {
        matches!(error, mysql_async::Error::Server(_))
            && crate::error::classify(error) != DbErrorKind::Connection
    }
}
