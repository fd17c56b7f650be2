//! Fencing a sqlx transaction: the guard of [`lease_core::guard`], run first
//! in the caller's own `sqlx::Transaction`.

use std::convert::Infallible;

use lease_core::{
    BoxError, BoxFuture, DbErrorKind, Dialect, GuardError, GuardStatement, Handle, LeaseContext,
};
use sqlx::{Pool, Transaction};

use crate::dialect::FenceDatabase;

/// Runs the guard of `handle`'s lease as the next statement of `tx`, which
/// must be its **first**: the lease row is then locked as the native
/// guarded transaction locks it (see the lock table of
/// [`lease_core::guard`]) until `tx` ends, so a successor's claim waits for
/// it. The statement is `handle`'s store's
/// ([`Handle::guard_statement`]): that store must keep its lease table on
/// the database `tx` runs on.
///
/// `Ok(())`: the lease is still this holder's at its term; do the work and
/// commit. [`GuardError::Lost`]: it is not; roll `tx` back (dropping it
/// does) and run nothing of the work. [`GuardError::Database`]: the
/// statement failed, or the store offers no guard, or one of another
/// dialect.
///
/// This only opens the fence: keeping the transaction short, and ending it
/// when the lease's context ends, is the caller's. [`transaction`] and
/// [`fenced`] do both.
///
/// # Examples
///
/// ```no_run
/// # async fn example(pool: sqlx::PgPool, ctx: lease_core::LeaseContext) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let mut tx = pool.begin().await?;
/// lease_sqlx::guard(&mut tx, ctx.handle()).await.map_err(|e| e.into_boxed())?;
/// sqlx::query("UPDATE invoices SET sent = true WHERE NOT sent")
///     .execute(&mut *tx)
///     .await?;
/// tx.commit().await?;
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// As above.
pub async fn guard<DB: FenceDatabase>(
    tx: &mut Transaction<'_, DB>,
    handle: &Handle,
) -> Result<(), GuardError<Infallible>> {
    let statement = statement_of::<DB, Infallible>(handle)?;
    guard_with(tx, &statement, handle).await
}

/// [`guard`] with a statement given, rather than the handle's store's: for a
/// lease whose store is not reachable from the handle, or a table of
/// another name. `statement` must be of `DB`'s dialect.
///
/// # Errors
///
/// As [`guard`].
pub async fn guard_with<DB: FenceDatabase>(
    tx: &mut Transaction<'_, DB>,
    statement: &GuardStatement,
    handle: &Handle,
) -> Result<(), GuardError<Infallible>> {
    check_dialect::<DB, Infallible>(statement, handle.name())?;
    let params = handle.guard_params();
    match DB::run_guard(&mut **tx, statement.sql(), params).await {
        Ok(true) => Ok(()),
        Ok(false) => {
            tracing::debug!(
                name = handle.name(),
                "sqlx guarded transaction refused: the lease is no longer this holder's"
            );
            Err(GuardError::not_holder(handle.name()))
        }
        Err(e) => Err(database(handle.name(), DB::classify(&e), e)),
    }
}

/// Runs `work` in a transaction of `pool`, under the lease `ctx` carries:
/// the guarded transaction of [`lease_core::guard`], through sqlx.
///
/// 1. If `ctx` has ended, nothing is sent.
/// 2. The transaction begins with the dialect's statement
///    ([`GuardStatement::begin`]: `BEGIN`, `START TRANSACTION`,
///    `BEGIN IMMEDIATE`) and its first statement is the guard ([`guard`]).
///    The lease lost: rolled back, [`GuardError::Lost`], no statement of
///    the work runs.
/// 3. `work` runs; `Ok` commits, `Err` rolls back ([`GuardError::Work`]), a
///    panic rolls back and resumes on the caller.
/// 4. `ctx` ending before the commit is sent: the work is dropped at its
///    next `.await`, the transaction rolled back, and the call returns at
///    once ([`GuardError::Lost`] or [`GuardError::Ended`]). sqlx cannot
///    cancel a statement already running on the server: its connection
///    rolls back as soon as that statement ends (when the pool takes the
///    connection back), so the lock lasts until then, and nothing commits.
///
/// Round trips: `BEGIN`, the guard, `COMMIT`, plus the work's (and, the
/// first time on a connection, sqlx's preparation of the guard).
///
/// # Examples
///
/// ```no_run
/// use lease_core::{BoxError, GuardError, LeaseContext};
///
/// # async fn example(pool: sqlx::PgPool, ctx: LeaseContext) -> Result<(), GuardError<sqlx::Error>> {
/// let term = ctx.term() as i64;
/// let sent = lease_sqlx::transaction(&pool, &ctx, |tx| {
///     Box::pin(async move {
///         sqlx::query("UPDATE invoices SET sent = true, term = $1 WHERE NOT sent")
///             .bind(term)
///             .execute(&mut **tx)
///             .await
///     })
/// })
/// .await?;
/// println!("{} invoices sent under term {term}", sent.rows_affected());
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// [`GuardError::Lost`] when the lease is lost (found so by the guard, or
/// by `ctx`); [`GuardError::Ended`] when `ctx` ended otherwise;
/// [`GuardError::Database`] when a statement of the guard failed;
/// [`GuardError::Work`] with the work's error.
pub async fn transaction<DB, T, E, F>(
    pool: &Pool<DB>,
    ctx: &LeaseContext,
    work: F,
) -> Result<T, GuardError<E>>
where
    DB: FenceDatabase,
    F: for<'a> FnOnce(&'a mut Transaction<'static, DB>) -> BoxFuture<'a, Result<T, E>> + Send,
    T: Send,
    E: Send,
{
    let outcome = async {
        let name = ctx.handle().name();
        if ctx.is_cancelled() {
            return Err(GuardError::ended(ctx));
        }
        let statement = statement_of::<DB, E>(ctx.handle())?;
        let begun = tokio::select! {
            biased;
            () = ctx.cancelled() => return Err(GuardError::ended(ctx)),
            begun = pool.begin_with(statement.begin()) => begun,
        };
        let tx = begun.map_err(|e| database(name, DB::classify(&e), e))?;
        run(tx, &statement, ctx, work).await
    };
    lease_core::metrics::guarded_transaction(outcome.await)
}

/// [`transaction`] on a transaction the caller began itself (on a pool, a
/// connection of its own, with its own isolation level): `tx` must have run
/// nothing yet. The guard runs first, then `work`; `Ok` commits `tx`, and
/// everything else rolls it back, as in [`transaction`].
///
/// On SQLite, begin it with `BEGIN IMMEDIATE` (`conn.begin_with("BEGIN
/// IMMEDIATE")`) or not: the guard is a write, which takes the file's write
/// lock either way.
///
/// # Errors
///
/// As [`transaction`].
pub async fn fenced<'c, DB, T, E, F>(
    tx: Transaction<'c, DB>,
    ctx: &LeaseContext,
    work: F,
) -> Result<T, GuardError<E>>
where
    DB: FenceDatabase,
    F: for<'a> FnOnce(&'a mut Transaction<'c, DB>) -> BoxFuture<'a, Result<T, E>> + Send,
    T: Send,
    E: Send,
{
    let outcome = async {
        if ctx.is_cancelled() {
            return Err(GuardError::ended(ctx));
        }
        let statement = statement_of::<DB, E>(ctx.handle())?;
        run(tx, &statement, ctx, work).await
    };
    lease_core::metrics::guarded_transaction(outcome.await)
}

/// The guard, the work and the commit of an open transaction, raced
/// against `ctx`.
async fn run<'c, DB, T, E, F>(
    mut tx: Transaction<'c, DB>,
    statement: &GuardStatement,
    ctx: &LeaseContext,
    work: F,
) -> Result<T, GuardError<E>>
where
    DB: FenceDatabase,
    F: for<'a> FnOnce(&'a mut Transaction<'c, DB>) -> BoxFuture<'a, Result<T, E>> + Send,
    T: Send,
    E: Send,
{
    let handle = ctx.handle();
    let name = handle.name();
    let raced = {
        let guarded = async {
            guard_with(&mut tx, statement, handle)
                .await
                .map_err(|e| e.map_work(|never| match never {}))?;
            Ok(work(&mut tx).await)
        };
        tokio::select! {
            biased;
            () = ctx.cancelled() => None,
            done = guarded => Some(done),
        }
    };
    match raced {
        None => {
            tracing::debug!(
                name,
                term = handle.term(),
                cause = ?ctx.cause(),
                "sqlx guarded transaction abandoned: the lease context ended"
            );
            // Dropping an open transaction queues its ROLLBACK, sent before
            // the connection's next use (or when the pool takes it back).
            drop(tx);
            Err(GuardError::ended(ctx))
        }
        Some(Err(e)) => {
            rollback(tx).await;
            Err(e)
        }
        Some(Ok(Err(e))) => {
            rollback(tx).await;
            Err(GuardError::Work(e))
        }
        Some(Ok(Ok(value))) => {
            if ctx.is_cancelled() {
                drop(tx);
                return Err(GuardError::ended(ctx));
            }
            match tx.commit().await {
                Ok(()) => Ok(value),
                Err(e) => Err(database(name, DB::classify(&e), e)),
            }
        }
    }
}

/// Rolls `tx` back: the work's error, or the guard's refusal, is what the
/// caller needs; a rollback that fails leaves the transaction to end with
/// its connection.
async fn rollback<DB: FenceDatabase>(tx: Transaction<'_, DB>) {
    if let Err(e) = tx.rollback().await {
        tracing::debug!(error = %e, "rollback of a sqlx guarded transaction failed");
    }
}

/// The guard statement of `handle`'s store, checked against `DB`.
fn statement_of<DB: FenceDatabase, E>(handle: &Handle) -> Result<GuardStatement, GuardError<E>> {
    let statement = handle.guard_statement().ok_or_else(|| {
        database(
            handle.name(),
            DbErrorKind::Other,
            "the lease's store offers no guard statement (LeaseStore::guard_statement): \
             use guard_with with the statement of the store that holds the lease table",
        )
    })?;
    check_dialect::<DB, E>(&statement, handle.name())?;
    Ok(statement)
}

fn check_dialect<DB: FenceDatabase, E>(
    statement: &GuardStatement,
    name: &str,
) -> Result<(), GuardError<E>> {
    if statement.dialect() == DB::DIALECT {
        return Ok(());
    }
    Err(database(
        name,
        DbErrorKind::Other,
        format!(
            "the lease's guard statement is {}, the sqlx transaction {}: \
             a guard fences only on the database that holds the lease table",
            statement.dialect(),
            DB::DIALECT
        ),
    ))
}

fn database<E>(name: &str, kind: DbErrorKind, source: impl Into<BoxError>) -> GuardError<E> {
    GuardError::database(name, kind, source)
}

/// The dialect of `DB`, for a caller that wants to check a statement itself.
#[must_use]
pub fn dialect_of<DB: FenceDatabase>() -> Dialect {
    DB::DIALECT
}
