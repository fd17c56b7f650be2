//! Fencing a sqlx transaction: the guard of [`lease_core::guard`], run first
//! in the caller's own `sqlx::Transaction`.

use std::convert::Infallible;
use std::sync::{Mutex, PoisonError};

use lease_core::guard::{GuardDriver, check_found, drive};
use lease_core::{
    BoxError, BoxFuture, DbErrorKind, Dialect, GuardError, GuardParams, GuardStatement, Handle,
    LeaseContext,
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
        Ok(found) => check_found(handle, found),
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
/// 5. `COMMIT` is bounded by the lease's statement timeout
///    ([`Timings::statement_timeout`](lease_core::Timings::statement_timeout)).
///
/// The flow is [`lease_core::guard::drive`], the same as the native stores'.
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
/// [`GuardError::Database`] when a statement of the guard failed before
/// `COMMIT` was sent, or the server refused the `COMMIT`;
/// [`GuardError::OutcomeUnknown`] when `COMMIT` was sent and no answer came
/// (the connection failed, or the bound passed): it may have committed, so
/// it is not retryable; [`GuardError::Work`] with the work's error.
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
    let driver = Driver {
        handle: ctx.handle(),
        source: Source::Pool(pool),
    };
    drive(ctx, &driver, work).await
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
    let driver = Driver {
        handle: ctx.handle(),
        source: Source::Begun(Mutex::new(Some(tx))),
    };
    drive(ctx, &driver, work).await
}

/// Where the transaction of a [`Driver`] comes from.
enum Source<'p, 't, DB: FenceDatabase> {
    /// Begun on the pool with the guard statement's `BEGIN`.
    Pool(&'p Pool<DB>),
    /// Begun by the caller ([`fenced`]), taken once.
    Begun(Mutex<Option<Transaction<'t, DB>>>),
}

/// [`transaction`]'s and [`fenced`]'s mechanics, for [`drive`]. sqlx
/// has no cancel request: an abandoned transaction is dropped, and its
/// connection sends the `ROLLBACK` as soon as the statement it runs ends.
struct Driver<'h, 'p, 't, DB: FenceDatabase> {
    handle: &'h Handle,
    source: Source<'p, 't, DB>,
}

/// The transaction of a [`Driver`], until the guard runs in it, and the
/// guard statement checked against its dialect.
struct Conn<'t, DB: FenceDatabase> {
    tx: Option<Transaction<'t, DB>>,
    statement: GuardStatement,
}

impl<'t, DB: FenceDatabase> GuardDriver for Driver<'_, '_, 't, DB> {
    type Conn = Conn<'t, DB>;
    type Tx<'c> = Transaction<'t, DB>;
    type Error = BoxError;

    /// The guard statement of the handle's store, checked against `DB`,
    /// then the transaction: begun with the statement's `BEGIN`, or the
    /// caller's.
    async fn connect(&self) -> Result<Self::Conn, BoxError> {
        let statement =
            statement_of::<DB, Infallible>(self.handle).map_err(GuardError::into_boxed)?;
        let tx = match &self.source {
            Source::Pool(pool) => Some(pool.begin_with(statement.begin()).await?),
            Source::Begun(tx) => tx.lock().unwrap_or_else(PoisonError::into_inner).take(),
        };
        Ok(Conn { tx, statement })
    }

    async fn open<'c>(
        &self,
        conn: &'c mut Self::Conn,
        params: GuardParams<'_>,
    ) -> Result<(Self::Tx<'c>, Option<u64>), BoxError> {
        let mut tx = conn
            .tx
            .take()
            .ok_or("the fenced transaction was already taken")?;
        let found = DB::run_guard(&mut *tx, conn.statement.sql(), params).await?;
        Ok((tx, found))
    }

    async fn commit<'c>(&self, tx: Self::Tx<'c>) -> Result<(), BoxError> {
        Ok(tx.commit().await?)
    }

    async fn rollback<'c>(&self, tx: Self::Tx<'c>) -> Result<(), BoxError> {
        Ok(tx.rollback().await?)
    }

    /// Drops what is left: the transaction itself was dropped with the
    /// work, which queued its `ROLLBACK`.
    fn abandon(&self, conn: Self::Conn) {
        drop(conn);
    }

    fn classify(&self, error: &BoxError) -> DbErrorKind {
        match error.downcast_ref::<sqlx::Error>() {
            Some(e) => DB::classify(e),
            None => match error
                .downcast_ref::<lease_core::BoxedGuardError>()
                .map(|e| e.get())
            {
                Some(GuardError::Database { kind, .. }) => *kind,
                _ => DbErrorKind::Other,
            },
        }
    }

    fn refused(&self, error: &BoxError) -> bool {
        error.downcast_ref::<sqlx::Error>().is_some_and(DB::refused)
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
