//! The transaction guard: work in a transaction under a lease, verified
//! first and fenced against the next holder.

use std::time::Duration;

use deadpool_postgres::{Object, Transaction};
use lease_core::{
    BoxError, BoxFuture, Dialect, GuardError, GuardStatement, LeaseContext, LeaseStore,
};
use tokio_postgres::types::Type;
use tokio_postgres::{CancelToken, NoTls};

use crate::sql::{StatementMode, TokenParam};
use crate::store::PostgresStore;
use crate::tls::CancelTls;

/// How long a cancel request for an abandoned transaction may take.
const CANCEL_BOUND: Duration = Duration::from_secs(5);

impl PostgresStore {
    /// Runs `work` in a transaction on the store's pool, under the lease
    /// `ctx` carries: the transaction guard.
    ///
    /// 1. `BEGIN`, then, as the first statement, the verification of the
    ///    lease: `SELECT term ... WHERE name = :name AND holder = :holder
    ///    AND term = :term AND expires_at_ms > :now FOR KEY SHARE`. When the
    ///    name is no longer this holder's at the handle's term, the
    ///    transaction is rolled back and
    ///    [`GuardError::Lost`] returned: not one statement of the
    ///    work runs.
    /// 2. `work` runs on the transaction. An `Err` rolls it back, an `Ok`
    ///    commits it.
    /// 3. Should `ctx` end first (the lease is lost, or the process shuts
    ///    down), the work is dropped at its next `.await`, the transaction
    ///    rolled back, and the call returns at once with
    ///    [`GuardError::Lost`] or [`GuardError::Ended`]. Its
    ///    connection leaves the pool; a statement still running on the
    ///    server is cancelled (a cancel request, for the store's own pool)
    ///    and the connection closed, which rolls the transaction back.
    ///
    /// **Fencing.** The verification keeps a `FOR KEY SHARE` lock on the
    /// lease row until the transaction ends, and every claim of this crate
    /// locks the row it takes `FOR UPDATE`, which conflicts with it: a
    /// successor's claim waits until this transaction has committed or
    /// rolled back. So a holder that froze between its verification and its
    /// commit, past its lease, still commits before its successor holds the
    /// name, never after. The holder's own renewals take `FOR NO KEY
    /// UPDATE`, which does not conflict: the transaction never holds them up.
    /// Keep guarded transactions short all the same: a successor's claim
    /// waits at most the store's statement timeout, then fails (and
    /// retries).
    ///
    /// **A frozen holder.** The verification also sets
    /// `idle_in_transaction_session_timeout` for the transaction to the
    /// lease's local deadline ([`Timings::deadline`](lease_core::Timings::deadline)):
    /// should the holder freeze inside the transaction (a stopped process,
    /// a partition), the server ends its session once it has been idle that
    /// long, which rolls the transaction back and lets the claims of the
    /// name through, instead of making them wait for as long as the holder
    /// stays frozen. So the work must not sit idle inside the transaction
    /// for the local deadline either; a work statement that runs longer is
    /// not idle time.
    ///
    /// The handle of `ctx` must have been claimed on this store's table.
    /// Its round trips: `BEGIN`, the verification, `COMMIT`, plus the
    /// work's own (the first use of a pool connection also prepares the
    /// verification once).
    ///
    /// This is the contract of [`lease_core::guard`], which every backend
    /// keeps: the same error type, the same rollback rules.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use lease_core::LeaseContext;
    /// use lease_core::GuardError;
    /// use lease_postgres::PostgresStore;
    ///
    /// # async fn example(store: PostgresStore, ctx: LeaseContext) -> Result<(), GuardError<tokio_postgres::Error>> {
    /// let term = ctx.term() as i64;
    /// let rows = store
    ///     .transaction(&ctx, |tx| {
    ///         Box::pin(async move {
    ///             tx.execute("UPDATE invoices SET sent = true, term = $1 WHERE NOT sent", &[&term])
    ///                 .await
    ///         })
    ///     })
    ///     .await?;
    /// println!("{rows} invoices sent under term {term}");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`GuardError::Lost`] when the lease is lost (found so by the
    /// verification, or by `ctx`); [`GuardError::Ended`] when `ctx`
    /// ended otherwise; [`GuardError::Database`] when the database
    /// does not answer; [`GuardError::Work`] with the work's error.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before the work has returned rolls the
    /// transaction back (the driver sends `ROLLBACK` when a transaction is
    /// dropped). Dropping it while `COMMIT` is in flight leaves the outcome
    /// unknown, as with any commit whose answer is lost.
    pub async fn transaction<T, E, F>(
        &self,
        ctx: &LeaseContext,
        work: F,
    ) -> Result<T, GuardError<E>>
    where
        F: for<'a, 't> FnOnce(&'a mut Transaction<'t>) -> BoxFuture<'a, Result<T, E>> + Send,
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
        F: for<'a, 't> FnOnce(&'a mut Transaction<'t>) -> BoxFuture<'a, Result<T, E>> + Send,
        T: Send,
        E: Send,
    {
        let handle = ctx.handle();
        let name = handle.name();
        if ctx.is_cancelled() {
            return Err(GuardError::ended(ctx));
        }
        let db = |e: BoxError| self.db_error(name, e);
        let mut client = tokio::select! {
            biased;
            () = ctx.cancelled() => return Err(GuardError::ended(ctx)),
            got = self.inner.pool.get() => got.map_err(|e| db(e.into()))?,
        };
        let cancel = client.cancel_token();
        let verify = self.inner.sql.verify_locked.as_str();
        let idle_ms = idle_bound_ms(handle.leases().timings().deadline());
        let term = i64::try_from(handle.term()).unwrap_or(i64::MAX);
        let raced = {
            let open = verify_then_work(
                &mut client,
                self.inner.statement_mode,
                verify,
                (name, handle.token().expose(), term),
                &idle_ms,
                db,
                work,
            );
            tokio::select! {
                biased;
                () = ctx.cancelled() => None,
                done = open => Some(done),
            }
        };
        let raced = match raced {
            Some(raced) => raced,
            None => {
                // Nothing holds the connection any more: take it.
                drop(raced);
                tracing::debug!(
                    name,
                    term = handle.term(),
                    cause = ?ctx.cause(),
                    "guarded transaction abandoned: the lease context ended"
                );
                self.abandon(client, cancel);
                return Err(GuardError::ended(ctx));
            }
        };
        let bound = self.inner.commit_bound;
        match raced {
            Err(e) => Err(e),
            Ok((tx, Ok(value))) => match tokio::time::timeout(bound, tx.commit()).await {
                Ok(Ok(())) => Ok(value),
                Ok(Err(e)) => Err(db(e.into())),
                Err(_) => Err(db(format!(
                    "COMMIT got no answer within {bound:?}; its outcome is unknown"
                )
                .into())),
            },
            Ok((tx, Err(e))) => {
                // The work's error is what the caller needs; a rollback that
                // fails leaves the transaction to end with its connection.
                let _ = tokio::time::timeout(bound, tx.rollback()).await;
                Err(GuardError::Work(e))
            }
        }
    }

    /// A failed statement of the guard, classified as the store classifies
    /// its own errors.
    fn db_error<E>(&self, name: &str, source: BoxError) -> GuardError<E> {
        let kind = self.classify(source.as_ref());
        GuardError::database(name, kind, source)
    }

    /// The guard statement, for running the fence by hand in a transaction
    /// of another driver: see [`GuardStatement`] and [`lease_core::guard`].
    ///
    /// Open the transaction with `BEGIN` (any isolation level), then run
    /// `SELECT l.term FROM {table} AS l WHERE l.name = $1::text AND
    /// l.holder = $2::text AND l.term = $3::bigint AND l.expires_at_ms >
    /// {now_ms} FOR KEY SHARE OF l` as its first statement:
    /// one row, the lease is still the handle's. The row's `FOR KEY SHARE`
    /// lock makes this crate's claims (which take `FOR UPDATE`) wait until
    /// the transaction ends, and leaves the holder's renewals free. Unlike
    /// [`transaction`](Self::transaction), it sets no
    /// `idle_in_transaction_session_timeout`: set one yourself, so that a
    /// frozen holder does not keep the claims waiting.
    #[must_use]
    pub fn guard_statement(&self) -> GuardStatement {
        GuardStatement::new(Dialect::Postgres, "BEGIN", self.inner.sql.guard.clone())
    }

    /// Takes the connection of an abandoned transaction out of the pool,
    /// cancels whatever statement it still runs, and closes it: the server
    /// rolls the transaction back. The cancel request goes first, on a task
    /// of its own so the caller returns at once; the task owns nothing but
    /// the connection and ends within [`CANCEL_BOUND`], closing it.
    fn abandon(&self, client: Object, cancel: CancelToken) {
        let client = Object::take(client);
        let tls = self.inner.cancel.clone();
        drop(tokio::spawn(async move {
            let request = async {
                match tls {
                    CancelTls::Plain => cancel.cancel_query(NoTls).await,
                    CancelTls::Rustls(tls) => cancel.cancel_query(tls).await,
                    CancelTls::Unknown => Ok(()),
                }
            };
            if let Ok(Err(e)) = tokio::time::timeout(CANCEL_BOUND, request).await {
                tracing::debug!(error = %e, "cancel request for an abandoned guarded transaction failed");
            }
            drop(client);
        }));
    }
}

/// The server-side bound on how long a guarded transaction may sit idle
/// (`idle_in_transaction_session_timeout`), in milliseconds as text: the
/// local deadline, at least 1 ms. A holder idle that long inside its
/// transaction, between two statements or after its last, has frozen (its
/// renewals with it, most likely) or is about to step down: the server ends
/// the session, which rolls the transaction back and frees the row for the
/// claims waiting on it.
fn idle_bound_ms(deadline: std::time::Duration) -> String {
    deadline.as_millis().max(1).to_string()
}

/// `BEGIN`, the verification under `FOR KEY SHARE`, then the work; the
/// transaction is handed back open, for the caller to commit or roll back
/// outside the race with the context.
async fn verify_then_work<'c, T, E, F>(
    client: &'c mut Object,
    mode: StatementMode,
    verify: &str,
    (name, holder, term): (&str, &str, i64),
    idle_ms: &str,
    db: impl Fn(BoxError) -> GuardError<E> + Send + Sync,
    work: F,
) -> Result<(Transaction<'c>, Result<T, E>), GuardError<E>>
where
    F: for<'a, 't> FnOnce(&'a mut Transaction<'t>) -> BoxFuture<'a, Result<T, E>> + Send,
    T: Send,
    E: Send,
{
    let db = |e: tokio_postgres::Error| db(e.into());
    let mut tx = client.transaction().await.map_err(db)?;
    let token = TokenParam(holder);
    let verified = match mode {
        // Behind a transaction-pooling PgBouncer: no named statement.
        StatementMode::Unnamed => tx
            .query_typed_opt(
                verify,
                &[
                    (&name, Type::TEXT),
                    (&token, Type::TEXT),
                    (&idle_ms, Type::TEXT),
                    (&term, Type::INT8),
                ],
            )
            .await
            .map_err(db)?,
        StatementMode::Prepared => {
            let stmt = tx.prepare_cached(verify).await.map_err(db)?;
            tx.query_opt(&stmt, &[&name, &token, &idle_ms, &term])
                .await
                .map_err(db)?
        }
    };
    if verified.is_none() {
        tracing::debug!(
            name,
            "guarded transaction refused: the lease is no longer this holder's"
        );
        let _ = tx.rollback().await;
        return Err(GuardError::not_holder(name));
    }
    let outcome = work(&mut tx).await;
    Ok((tx, outcome))
}
