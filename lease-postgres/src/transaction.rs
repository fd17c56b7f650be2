//! The transaction guard: work in a transaction under a lease, verified
//! first and fenced against the next holder.

use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use deadpool_postgres::{Object, Transaction};
use lease_core::{BoxError, EndCause, LeaseContext, LostCause};
use tokio_postgres::{CancelToken, NoTls};

use crate::store::{CancelTls, DEFAULT_STATEMENT_TIMEOUT, PostgresStore};
use crate::token::Token;

/// A boxed future that is `Send`: what the work of a guarded transaction
/// returns, so that it may borrow the transaction.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How long a cancel request for an abandoned transaction may take.
const CANCEL_BOUND: Duration = Duration::from_secs(5);

/// Why a guarded transaction did not commit.
///
/// In every case but [`Database`](TransactionError::Database) during the
/// commit itself, nothing of the transaction was committed.
#[derive(Debug)]
#[non_exhaustive]
pub enum TransactionError<E> {
    /// The lease is lost: always a [`lease_core::Error::Lost`]. Either the
    /// verification that opens the transaction found the name no longer
    /// this holder's, and not one statement of the work ran; or the lease
    /// context ended with a loss while the transaction was open, and it was
    /// rolled back.
    Lost(lease_core::Error),

    /// The lease context ended for another reason than a loss (the process
    /// is shutting down, the holder stopped its renewals) before the
    /// transaction was done: it was rolled back.
    Ended {
        /// The lease's name.
        name: String,
        /// Why the context ended, when it says.
        cause: Option<EndCause>,
    },

    /// The database did not answer: no connection, or `BEGIN`, the
    /// verification, `COMMIT` or `ROLLBACK` failed or got no answer in
    /// time. A failed `COMMIT` leaves the outcome unknown, as with any
    /// database.
    Database {
        /// The lease's name.
        name: String,
        /// What the driver or the pool reported.
        source: BoxError,
    },

    /// The work returned this error: the transaction was rolled back.
    Work(E),
}

impl<E> TransactionError<E> {
    /// Whether the lease is lost: the work under it must stop.
    #[must_use]
    pub fn is_lost(&self) -> bool {
        matches!(self, TransactionError::Lost(_))
    }

    /// Whether trying again later may succeed: the database did not answer.
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        matches!(self, TransactionError::Database { .. })
    }

    /// The work's own error, if that is what this is.
    pub fn into_work(self) -> Option<E> {
        match self {
            TransactionError::Work(e) => Some(e),
            _ => None,
        }
    }

    fn database(name: &str, source: impl Into<BoxError>) -> Self {
        TransactionError::Database {
            name: name.to_owned(),
            source: source.into(),
        }
    }

    fn lost(name: &str, cause: LostCause) -> Self {
        TransactionError::Lost(lease_core::Error::Lost {
            name: name.to_owned(),
            cause,
        })
    }

    /// The error for a context that ended: a loss when it says so.
    fn ended(ctx: &LeaseContext) -> Self {
        let name = ctx.handle().name();
        match ctx.cause() {
            Some(EndCause::Lost(cause)) => Self::lost(name, cause),
            cause => TransactionError::Ended {
                name: name.to_owned(),
                cause,
            },
        }
    }
}

impl<E> fmt::Display for TransactionError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransactionError::Lost(e) => fmt::Display::fmt(e, f),
            TransactionError::Ended {
                name,
                cause: Some(cause),
            } => write!(
                f,
                "guarded transaction under lease {name:?} rolled back: {cause}"
            ),
            TransactionError::Ended { name, cause: None } => write!(
                f,
                "guarded transaction under lease {name:?} rolled back: the lease context ended"
            ),
            TransactionError::Database { name, .. } => {
                write!(f, "guarded transaction under lease {name:?} failed")
            }
            TransactionError::Work(_) => {
                f.write_str("the work of a guarded transaction failed; rolled back")
            }
        }
    }
}

impl<E: StdError + 'static> StdError for TransactionError<E> {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            TransactionError::Lost(e) => e.source(),
            TransactionError::Ended { .. } => None,
            TransactionError::Database { source, .. } => Some(source.as_ref()),
            TransactionError::Work(e) => Some(e),
        }
    }
}

impl PostgresStore {
    /// Runs `work` in a transaction on the store's pool, under the lease
    /// `ctx` carries: the transaction guard.
    ///
    /// 1. `BEGIN`, then, as the first statement, the verification of the
    ///    lease: `SELECT term ... WHERE name = :name AND holder = :holder
    ///    AND expires_at_ms > :now FOR KEY SHARE`. When the name is no
    ///    longer this holder's, the transaction is rolled back and
    ///    [`TransactionError::Lost`] returned: not one statement of the
    ///    work runs.
    /// 2. `work` runs on the transaction. An `Err` rolls it back, an `Ok`
    ///    commits it.
    /// 3. Should `ctx` end first (the lease is lost, or the process shuts
    ///    down), the work is dropped at its next `.await`, the transaction
    ///    rolled back, and the call returns at once with
    ///    [`TransactionError::Lost`] or [`TransactionError::Ended`]. Its
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
    /// # Examples
    ///
    /// ```no_run
    /// use lease_core::LeaseContext;
    /// use lease_postgres::{PostgresStore, TransactionError};
    ///
    /// # async fn example(store: PostgresStore, ctx: LeaseContext) -> Result<(), TransactionError<tokio_postgres::Error>> {
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
    /// [`TransactionError::Lost`] when the lease is lost (found so by the
    /// verification, or by `ctx`); [`TransactionError::Ended`] when `ctx`
    /// ended otherwise; [`TransactionError::Database`] when the database
    /// does not answer; [`TransactionError::Work`] with the work's error.
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
    ) -> Result<T, TransactionError<E>>
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
    ) -> Result<T, TransactionError<E>>
    where
        F: for<'a, 't> FnOnce(&'a mut Transaction<'t>) -> BoxFuture<'a, Result<T, E>> + Send,
        T: Send,
        E: Send,
    {
        let handle = ctx.handle();
        let name = handle.name();
        if ctx.is_cancelled() {
            return Err(TransactionError::ended(ctx));
        }
        let mut client = tokio::select! {
            biased;
            () = ctx.cancelled() => return Err(TransactionError::ended(ctx)),
            got = self.inner.pool.get() => got.map_err(|e| TransactionError::database(name, e))?,
        };
        let cancel = client.cancel_token();
        let verify = self.inner.sql.verify_locked.as_str();
        let idle_ms = idle_bound_ms(handle.leases().timings().deadline());
        let raced = {
            let open = verify_then_work(&mut client, verify, name, handle.holder(), &idle_ms, work);
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
                return Err(TransactionError::ended(ctx));
            }
        };
        let bound = self
            .inner
            .statement_timeout
            .unwrap_or(DEFAULT_STATEMENT_TIMEOUT);
        match raced {
            Err(e) => Err(e),
            Ok((tx, Ok(value))) => match tokio::time::timeout(bound, tx.commit()).await {
                Ok(Ok(())) => Ok(value),
                Ok(Err(e)) => Err(TransactionError::database(name, e)),
                Err(_) => Err(TransactionError::database(
                    name,
                    format!("COMMIT got no answer within {bound:?}; its outcome is unknown"),
                )),
            },
            Ok((tx, Err(e))) => {
                // The work's error is what the caller needs; a rollback that
                // fails leaves the transaction to end with its connection.
                let _ = tokio::time::timeout(bound, tx.rollback()).await;
                Err(TransactionError::Work(e))
            }
        }
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
    verify: &str,
    name: &str,
    holder: &str,
    idle_ms: &str,
    work: F,
) -> Result<(Transaction<'c>, Result<T, E>), TransactionError<E>>
where
    F: for<'a, 't> FnOnce(&'a mut Transaction<'t>) -> BoxFuture<'a, Result<T, E>>,
{
    let db = |e| TransactionError::database(name, e);
    let mut tx = client.transaction().await.map_err(db)?;
    let stmt = tx.prepare_cached(verify).await.map_err(db)?;
    let verified = tx
        .query_opt(&stmt, &[&name, &Token(holder), &idle_ms])
        .await
        .map_err(db)?;
    if verified.is_none() {
        tracing::debug!(
            name,
            "guarded transaction refused: the lease is no longer this holder's"
        );
        let _ = tx.rollback().await;
        return Err(TransactionError::lost(name, LostCause::NotHolder));
    }
    let outcome = work(&mut tx).await;
    Ok((tx, outcome))
}
