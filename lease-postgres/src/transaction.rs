//! The transaction guard: work in a transaction under a lease, verified
//! first and fenced against the next holder.

use std::time::Duration;

use deadpool_postgres::{Object, Transaction};
use lease_core::guard::{self, GuardDriver};
use lease_core::{
    BoxError, BoxFuture, DbErrorKind, Dialect, GuardError, GuardParams, GuardStatement,
    LeaseContext, LeaseStore,
};
use tokio_postgres::error::Severity;
use tokio_postgres::types::Type;
use tokio_postgres::{CancelToken, NoTls};

use crate::conn::{StatementMode, TokenParam};
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
    ///    commits it (within the store's statement timeout).
    /// 3. Should `ctx` end first (the lease is lost, or the process shuts
    ///    down), the work is dropped at its next `.await`, and the call
    ///    returns at once with [`GuardError::Lost`] or [`GuardError::Ended`].
    ///    Its connection leaves the pool and is closed, which rolls the
    ///    transaction back; a statement still running on the server is
    ///    cancelled first with a cancel request, except behind a pooler
    ///    (`statement_mode=unnamed`: PgBouncer 1.18 can crash on a cancel
    ///    request), where closing the connection makes the pooler close its
    ///    server connection, and the statement stops within 500 ms
    ///    (`client_connection_check_interval`, which the verification sets
    ///    for the transaction on PostgreSQL 14 and later; an older server
    ///    runs it to its end, the row locked until then). A work that
    ///    panics, or a call dropped, leaves its connection the same way:
    ///    it never goes back to the pool, where the next transaction could
    ///    get a session the server is ending.
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
    /// does not answer before `COMMIT` is sent, or refuses the `COMMIT`;
    /// [`GuardError::OutcomeUnknown`] when `COMMIT` was sent and no answer
    /// came (the connection failed, or the statement timeout passed): it
    /// may have committed, so it is not retryable; [`GuardError::Work`]
    /// with the work's error.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before `COMMIT` is sent rolls the transaction
    /// back (its connection is closed, as when `ctx` ends). Dropping it
    /// while `COMMIT` is in flight leaves the outcome unknown, as with any
    /// commit whose answer is lost.
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
        let driver = Driver {
            store: self,
            idle_ms: idle_bound_ms(ctx.handle().leases().timings().deadline()),
        };
        guard::drive(ctx, &driver, work).await
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
        GuardStatement::new(
            Dialect::Postgres,
            "BEGIN",
            self.inner.sql.guard.text().to_owned(),
        )
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

/// A connection of the store's pool for one guarded transaction, with what
/// it takes to cancel its statements.
struct Conn {
    client: Object,
    cancel: CancelToken,
}

/// [`PostgresStore::transaction`]'s mechanics, for [`guard::drive`].
struct Driver<'s> {
    store: &'s PostgresStore,
    /// The transaction's `idle_in_transaction_session_timeout`.
    idle_ms: String,
}

impl GuardDriver for Driver<'_> {
    type Conn = Conn;
    type Tx<'c> = Transaction<'c>;
    type Error = BoxError;

    async fn connect(&self) -> Result<Conn, BoxError> {
        let client = self.store.inner.pool.get().await?;
        Ok(Conn {
            cancel: client.cancel_token(),
            client,
        })
    }

    /// `BEGIN`, then the verification under `FOR KEY SHARE`.
    async fn open<'c>(
        &self,
        conn: &'c mut Conn,
        params: GuardParams<'_>,
    ) -> Result<(Transaction<'c>, Option<u64>), BoxError> {
        let verify = self.store.inner.sql.verify_locked.text();
        let (name, token, term) = (params.name, TokenParam(params.token.expose()), params.term);
        let idle_ms = self.idle_ms.as_str();
        let tx = conn.client.transaction().await?;
        let row = match self.store.inner.statement_mode {
            // Behind a transaction-pooling PgBouncer: no named statement.
            StatementMode::Unnamed => {
                tx.query_typed_opt(
                    verify,
                    &[
                        (&name, Type::TEXT),
                        (&token, Type::TEXT),
                        (&idle_ms, Type::TEXT),
                        (&term, Type::INT8),
                    ],
                )
                .await?
            }
            StatementMode::Prepared => {
                let stmt = tx.prepare_cached(verify).await?;
                tx.query_opt(&stmt, &[&name, &token, &idle_ms, &term])
                    .await?
            }
        };
        let found = match row {
            Some(row) => Some(lease_core::term_from_db(row.try_get::<_, i64>(0)?)?),
            None => None,
        };
        Ok((tx, found))
    }

    async fn commit<'c>(&self, tx: Self::Tx<'c>) -> Result<(), BoxError> {
        Ok(tx.commit().await?)
    }

    async fn rollback<'c>(&self, tx: Self::Tx<'c>) -> Result<(), BoxError> {
        Ok(tx.rollback().await?)
    }

    /// Takes the connection out of the pool and closes it (its task is
    /// aborted, its socket closed): the server rolls the transaction back.
    /// On a direct connection a cancel request goes first, on a task of its
    /// own bounded by [`CANCEL_BOUND`], so that a statement still running
    /// stops at once rather than when the server next notices the closed
    /// socket. Behind a pooler (`statement_mode=unnamed`) no cancel request
    /// is sent (PgBouncer 1.18 can crash on one): closing the connection
    /// makes the pooler close its server connection, and the statement
    /// stops within `client_connection_check_interval` (set by the
    /// verification on PostgreSQL 14 and later; an older server runs it to
    /// its end).
    fn abandon(&self, conn: Conn) {
        let Conn { client, cancel } = conn;
        let client = Object::take(client);
        let tls = match self.store.inner.statement_mode {
            StatementMode::Unnamed => None,
            StatementMode::Prepared => Some(self.store.inner.cancel.clone()),
        };
        let Some(tls) = tls.filter(|tls| !matches!(tls, CancelTls::Unknown)) else {
            drop(client);
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            drop(client);
            return;
        };
        drop(runtime.spawn(async move {
            let request = async {
                match tls {
                    CancelTls::Plain | CancelTls::Unknown => cancel.cancel_query(NoTls).await,
                    CancelTls::Rustls(tls) => cancel.cancel_query(tls).await,
                }
            };
            if let Ok(Err(e)) = tokio::time::timeout(CANCEL_BOUND, request).await {
                tracing::debug!(error = %e, "cancel request for an abandoned guarded transaction failed");
            }
            drop(client);
        }));
    }

    /// The store's own: its statement timeout.
    fn bound(&self) -> Option<Duration> {
        Some(self.store.inner.commit_bound)
    }

    fn classify(&self, error: &BoxError) -> DbErrorKind {
        self.store.classify(error.as_ref())
    }

    /// The server's `ERROR` in answer to the statement. A `FATAL` (the
    /// session terminated) or no answer at all says nothing of a `COMMIT`'s
    /// outcome.
    fn refused(&self, error: &BoxError) -> bool {
        error
            .downcast_ref::<tokio_postgres::Error>()
            .and_then(tokio_postgres::Error::as_db_error)
            .is_some_and(|db| db.parsed_severity() == Some(Severity::Error))
    }
}
