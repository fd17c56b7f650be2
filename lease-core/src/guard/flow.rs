//! The guarded transaction's flow, written once for every backend: what
//! [`drive`] does, and the [`GuardDriver`] a backend gives it.
//!
//! The flow owns everything the contract of [`crate::guard`] says: the
//! races with the lease context, the term check, the rollbacks, which error
//! reaches the caller, the log events and the
//! `lease_guarded_transactions_total` metric. A driver owns only how its
//! database does each step: how a connection is taken, how a transaction is
//! opened and its first statement run, how `COMMIT` and `ROLLBACK` are sent,
//! and how a connection whose transaction was left unsettled is taken out of
//! use (PostgreSQL's cancel request and close, MySQL's `KILL`, SQLite's
//! interrupt, sqlx's drop). It is the shape of sqlx's `TransactionManager`.

use std::future::Future;
use std::time::Duration;

use crate::context::LeaseContext;
use crate::error::{BoxError, Chain, DbErrorKind};
use crate::guard::{BoxFuture, GuardError};
use crate::guard_statement::GuardParams;
use crate::handle::Handle;

/// A backend's mechanics for a guarded transaction, run by [`drive`]. For
/// backends: `lease-postgres`, `lease-mysql`, `lease-sqlite` and
/// `lease-sqlx` implement it on a type of their own and call [`drive`] from
/// their `transaction` methods.
///
/// In an impl, write the transaction of `commit` and `rollback` as
/// `Self::Tx<'c>`, as the trait does: a lifetime that only a projection
/// names is early-bound, and the impl's must be too.
///
/// Every future a driver returns may be dropped before it completes
/// ([`drive`] races the connection, the opening and the work with the lease
/// context, and bounds the commit): dropping it must leave the connection
/// to [`abandon`](Self::abandon), which `drive` then calls.
///
/// # Examples
///
/// A driver over a pretend database, whose guard finds the lease at the
/// term it is asked about:
///
/// ```
/// use lease_core::guard::{GuardDriver, drive};
/// use lease_core::{CancellationToken, DbErrorKind, GuardParams, LeaseContext, Leases};
///
/// struct Pretend;
///
/// impl GuardDriver for Pretend {
///     type Conn = ();
///     type Tx<'c> = Vec<String>;
///     type Error = std::io::Error;
///
///     async fn connect(&self) -> Result<(), std::io::Error> {
///         Ok(())
///     }
///     async fn open(
///         &self,
///         _conn: &mut (),
///         params: GuardParams<'_>,
///     ) -> Result<(Vec<String>, Option<u64>), std::io::Error> {
///         Ok((Vec::new(), u64::try_from(params.term).ok()))
///     }
///     async fn commit<'c>(&self, tx: Self::Tx<'c>) -> Result<(), std::io::Error> {
///         println!("committed {tx:?}");
///         Ok(())
///     }
///     async fn rollback<'c>(&self, _tx: Self::Tx<'c>) -> Result<(), std::io::Error> {
///         Ok(())
///     }
///     fn abandon(&self, _conn: ()) {}
///     fn classify(&self, _error: &std::io::Error) -> DbErrorKind {
///         DbErrorKind::Connection
///     }
///     fn refused(&self, _error: &std::io::Error) -> bool {
///         false
///     }
/// }
///
/// # async fn example(leases: Leases) -> Result<(), lease_core::BoxError> {
/// let handle = leases.claim("job").await?.expect("free");
/// let ctx = LeaseContext::new(handle, CancellationToken::new());
/// let n = drive(&ctx, &Pretend, |tx: &mut Vec<String>| {
///     Box::pin(async move {
///         tx.push("INSERT ...".to_owned());
///         Ok::<_, std::io::Error>(tx.len())
///     })
/// })
/// .await
/// .map_err(|e| e.into_boxed())?;
/// assert_eq!(n, 1);
/// # Ok(()) }
/// ```
pub trait GuardDriver: Sync {
    /// What one transaction runs on: a connection of a pool, a session of
    /// SQLite's connection thread, a transaction begun by the caller.
    type Conn: Send;

    /// The open transaction, as the work receives it (`&mut`): it may
    /// borrow the connection.
    type Tx<'c>: Send;

    /// What the driver reports.
    type Error: Into<BoxError> + Send;

    /// Takes a connection for one guarded transaction (from a pool, say).
    fn connect(&self) -> impl Future<Output = Result<Self::Conn, Self::Error>> + Send;

    /// Begins a transaction on `conn` and runs the guard as its first
    /// statement with `params` (name, token, term), keeping its lock:
    /// the transaction, and the term of the lease row the guard found
    /// (`None`: no row, the lease is not this holder's). [`drive`] compares
    /// the term with the handle's.
    ///
    /// On an error the driver drops whatever transaction it began: the
    /// connection is settled ([`refused`](Self::refused)) or abandoned.
    fn open<'c>(
        &self,
        conn: &'c mut Self::Conn,
        params: GuardParams<'_>,
    ) -> impl Future<Output = Result<(Self::Tx<'c>, Option<u64>), Self::Error>> + Send;

    /// Sends `COMMIT`. [`drive`] bounds it by [`bound`](Self::bound).
    fn commit<'c>(&self, tx: Self::Tx<'c>) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Sends `ROLLBACK`. [`drive`] bounds it by [`bound`](Self::bound); a
    /// rollback that fails or takes longer abandons the connection.
    fn rollback<'c>(
        &self,
        tx: Self::Tx<'c>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Called once a transaction has committed, before `conn` goes back
    /// where it came from: puts back what the work may have changed in
    /// the session, say. Nothing, unless the driver says otherwise.
    fn committed(&self, conn: &mut Self::Conn) -> impl Future<Output = ()> + Send {
        let _ = conn;
        async {}
    }

    /// Takes `conn` out of use at once: its transaction was left
    /// unsettled (the context ended under the work, the work panicked, the
    /// caller dropped the future, a `COMMIT` or `ROLLBACK` went unanswered),
    /// a statement may still run on it. Whatever it runs is stopped and its
    /// transaction rolled back by the backend's means (in the background,
    /// if that takes a round trip); the connection never serves another
    /// transaction as it is. Called from `Drop` too: it must not block.
    fn abandon(&self, conn: Self::Conn);

    /// How long a `COMMIT` or a `ROLLBACK` may take, when the driver has a
    /// bound of its own: past it, a commit's outcome is unknown, and either
    /// abandons the connection. `None`, unless the driver says otherwise:
    /// the lease's [statement timeout](crate::Timings::statement_timeout).
    fn bound(&self) -> Option<Duration> {
        None
    }

    /// What kind of failure `error` is.
    fn classify(&self, error: &Self::Error) -> DbErrorKind;

    /// Whether `error` is the database's answer refusing the statement (it
    /// was heard, and took no effect), rather than a failure to reach the
    /// database or to hear its answer. After `COMMIT` was sent, only a
    /// refusal tells that the transaction did not commit.
    fn refused(&self, error: &Self::Error) -> bool;
}

/// Runs `work` in a guarded transaction of `driver`, under the lease `ctx`
/// carries: the flow of [`crate::guard`], the same on every backend.
///
/// 1. `ctx` ended already: nothing is sent; [`GuardError::Ended`] (or
///    [`GuardError::Lost`]).
/// 2. A connection ([`GuardDriver::connect`]), then the transaction and its
///    guard ([`GuardDriver::open`]), each raced with `ctx`: should it end
///    first, the connection is abandoned.
/// 3. The guard found no row, or one of another term: rolled back,
///    [`GuardError::Lost`] ([`LostCause::NotHolder`](crate::LostCause::NotHolder)),
///    and `work` is never called.
/// 4. `work`, raced with `ctx`: should it end first, the work is dropped
///    where it is and the connection abandoned. `Err` rolls back
///    ([`GuardError::Work`]); a panic abandons the connection and goes on
///    unwinding to the caller.
/// 5. `Ok`, and `ctx` still open: `COMMIT`, within
///    [`GuardDriver::bound`]. Refused by the database:
///    [`GuardError::Database`], nothing committed. No answer (the
///    connection failed, or the bound passed): [`GuardError::OutcomeUnknown`],
///    and the connection is abandoned.
///
/// Every call is counted in `lease_guarded_transactions_total` (`outcome`
/// `committed`, `failed` or `unknown`).
///
/// # Errors
///
/// As above.
///
/// # Cancel safety
///
/// Dropping the future before `COMMIT` is sent abandons the connection
/// (nothing commits); dropped while `COMMIT` is in flight, the outcome is
/// unknown, as with any commit whose answer is lost.
pub async fn drive<D, T, E, W>(ctx: &LeaseContext, driver: &D, work: W) -> Result<T, GuardError<E>>
where
    D: GuardDriver,
    W: for<'a, 'c> FnOnce(&'a mut D::Tx<'c>) -> BoxFuture<'a, Result<T, E>> + Send,
    T: Send,
    E: Send,
{
    let result = flow(ctx, driver, work).await;
    let outcome = match &result {
        Ok(_) => "committed",
        Err(GuardError::OutcomeUnknown { .. }) => "unknown",
        Err(_) => "failed",
    };
    crate::metrics::guarded_transaction(outcome);
    result
}

/// A connection whose transaction is not settled yet: abandoned when
/// dropped, unless [`settle`](Unsettled::settle) took it back first.
struct Unsettled<'d, D: GuardDriver> {
    driver: &'d D,
    conn: Option<D::Conn>,
}

impl<D: GuardDriver> Unsettled<'_, D> {
    /// The connection, its transaction settled: it goes back to where it
    /// came from as it is.
    fn settle(mut self) -> Option<D::Conn> {
        self.conn.take()
    }
}

impl<D: GuardDriver> Drop for Unsettled<'_, D> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.driver.abandon(conn);
        }
    }
}

/// How the transaction on a connection ended.
enum Ended<T, E> {
    /// Settled: committed, rolled back, or refused by the database; the
    /// connection may serve again.
    Settled(Result<T, GuardError<E>>),
    /// Committed: the connection may serve again, once the driver has seen
    /// to it ([`GuardDriver::committed`]).
    Committed(T),
    /// Unsettled: the connection is abandoned.
    Unsettled(GuardError<E>),
}

async fn flow<D, T, E, W>(ctx: &LeaseContext, driver: &D, work: W) -> Result<T, GuardError<E>>
where
    D: GuardDriver,
    W: for<'a, 'c> FnOnce(&'a mut D::Tx<'c>) -> BoxFuture<'a, Result<T, E>> + Send,
    T: Send,
    E: Send,
{
    let name = ctx.handle().name();
    if ctx.is_cancelled() {
        return Err(GuardError::ended(ctx));
    }
    let conn = tokio::select! {
        biased;
        () = ctx.cancelled() => return Err(GuardError::ended(ctx)),
        conn = driver.connect() => conn.map_err(|e| database(driver, name, e))?,
    };
    let mut unsettled = Unsettled {
        driver,
        conn: Some(conn),
    };
    let Some(conn) = unsettled.conn.as_mut() else {
        // Only `settle` empties it.
        return Err(GuardError::ended(ctx));
    };
    // Boxed, so that the future of every backend's `transaction` is `Send`
    // (https://github.com/rust-lang/rust/issues/100013: the transaction's
    // borrow of the connection would otherwise make it unprovable).
    let on_conn: BoxFuture<'_, Ended<T, E>> = Box::pin(on_connection(ctx, driver, conn, work));
    let ended = on_conn.await;
    match ended {
        Ended::Committed(value) => {
            if let Some(mut conn) = unsettled.settle() {
                driver.committed(&mut conn).await;
            }
            Ok(value)
        }
        Ended::Settled(result) => {
            drop(unsettled.settle());
            result
        }
        // Dropping `unsettled` abandons the connection.
        Ended::Unsettled(e) => Err(e),
    }
}

/// The transaction on `conn`: opened, verified, worked, and committed or
/// rolled back.
async fn on_connection<D, T, E, W>(
    ctx: &LeaseContext,
    driver: &D,
    conn: &mut D::Conn,
    work: W,
) -> Ended<T, E>
where
    D: GuardDriver,
    W: for<'a, 'c> FnOnce(&'a mut D::Tx<'c>) -> BoxFuture<'a, Result<T, E>> + Send,
    T: Send,
    E: Send,
{
    let handle = ctx.handle();
    let (name, term) = (handle.name(), handle.term());
    let opened = tokio::select! {
        biased;
        () = ctx.cancelled() => None,
        opened = driver.open(conn, handle.guard_params()) => Some(opened),
    };
    let (mut tx, found) = match opened {
        None => {
            tracing::debug!(name = ?name, term, cause = ?ctx.cause(), "guarded transaction abandoned: the lease context ended");
            return Ended::Unsettled(GuardError::ended(ctx));
        }
        Some(Err(e)) => {
            let refused = driver.refused(&e);
            let e = database(driver, name, e);
            if let GuardError::Database { source, .. } = &e {
                tracing::debug!(name = ?name, term, error = %Chain(source.as_ref()), "guarded transaction not begun: the database did not answer");
            }
            return if refused {
                Ended::Settled(Err(e))
            } else {
                Ended::Unsettled(e)
            };
        }
        Some(Ok(opened)) => opened,
    };
    if let Err(refused) = check_found(handle, found) {
        return rolled_back(ctx, driver, tx, refused).await;
    }
    let done = {
        let run = work(&mut tx);
        tokio::select! {
            biased;
            () = ctx.cancelled() => None,
            done = run => Some(done),
        }
    };
    let value = match done {
        None => {
            tracing::debug!(name = ?name, term, cause = ?ctx.cause(), "guarded transaction abandoned: the lease context ended");
            return Ended::Unsettled(GuardError::ended(ctx));
        }
        Some(Err(e)) => {
            tracing::debug!(name = ?name, term, "guarded transaction rolled back: the work failed");
            return rolled_back(ctx, driver, tx, GuardError::Work(e)).await;
        }
        // The context ended as the work returned: too late to commit.
        Some(Ok(_)) if ctx.is_cancelled() => {
            tracing::debug!(name = ?name, term, cause = ?ctx.cause(), "guarded transaction rolled back: the lease context ended");
            return rolled_back(ctx, driver, tx, GuardError::ended(ctx)).await;
        }
        Some(Ok(value)) => value,
    };
    let bound = bound(ctx, driver);
    match tokio::time::timeout(bound, driver.commit(tx)).await {
        Ok(Ok(())) => Ended::Committed(value),
        Ok(Err(e)) if driver.refused(&e) => {
            let e = database(driver, name, e);
            if let GuardError::Database { source, .. } = &e {
                tracing::debug!(name = ?name, term, error = %Chain(source.as_ref()), "guarded transaction's COMMIT refused: nothing committed");
            }
            Ended::Settled(Err(e))
        }
        Ok(Err(e)) => Ended::Unsettled(unknown(name, term, e.into())),
        Err(_) => Ended::Unsettled(unknown(
            name,
            term,
            format!("COMMIT got no answer within {bound:?}").into(),
        )),
    }
}

/// The term check of the guard: `Ok` when the guard found the lease row of
/// `handle` at its term (`found`, the term the guard's row holds; `None`,
/// no row), [`GuardError::Lost`] with [`LostCause::NotHolder`](crate::LostCause::NotHolder)
/// otherwise. [`drive`] runs it on what [`GuardDriver::open`] found; a
/// driver integration that runs the guard in a transaction of the caller's
/// (`lease_sqlx::guard`) runs it too.
///
/// ```
/// # async fn example(leases: lease_core::Leases) -> lease_core::Result<()> {
/// use lease_core::guard::check_found;
///
/// let handle = leases.claim("job").await?.expect("free");
/// assert!(check_found::<()>(&handle, Some(handle.term())).is_ok());
/// assert!(check_found::<()>(&handle, Some(handle.term() + 1)).unwrap_err().is_lost());
/// assert!(check_found::<()>(&handle, None).unwrap_err().is_lost());
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// As above.
pub fn check_found<E>(handle: &Handle, found: Option<u64>) -> Result<(), GuardError<E>> {
    let (name, term) = (handle.name(), handle.term());
    if found == Some(term) {
        return Ok(());
    }
    tracing::debug!(name = ?name, term, found, "guarded transaction refused: the lease is no longer this holder's");
    Err(GuardError::not_holder(name))
}

/// Rolls `tx` back, within the driver's bound, and ends with `error`: the
/// connection settled if the rollback went through, abandoned if not.
async fn rolled_back<D: GuardDriver, T, E>(
    ctx: &LeaseContext,
    driver: &D,
    tx: D::Tx<'_>,
    error: GuardError<E>,
) -> Ended<T, E> {
    match tokio::time::timeout(bound(ctx, driver), driver.rollback(tx)).await {
        Ok(Ok(())) => Ended::Settled(Err(error)),
        Ok(Err(e)) => {
            let e: BoxError = e.into();
            tracing::debug!(error = %Chain(e.as_ref()), "guarded transaction's ROLLBACK failed: its connection is abandoned");
            Ended::Unsettled(error)
        }
        Err(_) => Ended::Unsettled(error),
    }
}

/// The bound on `COMMIT` and `ROLLBACK`: the driver's, or the lease's
/// statement timeout.
fn bound<D: GuardDriver>(ctx: &LeaseContext, driver: &D) -> Duration {
    driver
        .bound()
        .unwrap_or_else(|| ctx.handle().leases().timings().statement_timeout())
}

fn database<D: GuardDriver, E>(driver: &D, name: &str, error: D::Error) -> GuardError<E> {
    let kind = driver.classify(&error);
    GuardError::database(name, kind, error)
}

/// `COMMIT` was sent, and its answer never came.
fn unknown<E>(name: &str, term: u64, source: BoxError) -> GuardError<E> {
    tracing::warn!(name = ?name, term, error = %Chain(source.as_ref()), "guarded transaction's outcome unknown: COMMIT was sent and its answer lost");
    GuardError::OutcomeUnknown {
        name: name.to_owned(),
        source,
    }
}

#[cfg(test)]
mod tests;
