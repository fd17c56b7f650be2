//! Fenced (guarded) transactions: the one contract every backend keeps.
//!
//! A guarded transaction is the work a holder does in the database under its
//! lease, in one transaction whose first statement verifies the lease and
//! locks its row, so that a successor's claim of the name waits for that
//! transaction to end. A holder frozen between its verification and its
//! commit, past its lease, therefore commits before its successor holds the
//! name, or not at all: never after.
//!
//! # The contract
//!
//! Every backend offers it as `store.transaction(&ctx, work)`, returning
//! `Result<T, GuardError<E>>`, `E` being the work's own error:
//!
//! | backend | `work` | why |
//! | --- | --- | --- |
//! | `lease-postgres` | `\|tx: &mut deadpool_postgres::Transaction\| -> BoxFuture<'_, Result<T, E>>` | async driver |
//! | `lease-mysql` | `\|tx: &mut mysql_async::Transaction\| -> BoxFuture<'_, Result<T, E>>` | async driver |
//! | `lease-sqlite` | `\|tx: &rusqlite::Transaction\| -> Result<T, E>`, run on the store's connection thread | rusqlite is synchronous: its `Transaction` borrows a `Connection` that is neither `Sync` nor usable across an `.await` without blocking the runtime; the work runs on the thread that owns the connection, in its turn in the connection's one queue, and the context ending interrupts it |
//!
//! 1. If `ctx` has ended already, nothing is sent: [`GuardError::Ended`] (or
//!    [`GuardError::Lost`] when it ended with a loss).
//! 2. The transaction begins and its first statement is the guard: it
//!    selects the lease row by name, holder token **and term** (the handle's),
//!    unexpired by the database clock, and locks it. No row: the transaction
//!    is rolled back, not one statement of the work runs, and the call
//!    returns [`GuardError::Lost`] ([`LostCause::NotHolder`]).
//! 3. The work runs on the transaction. `Ok` commits; `Err(e)` rolls back and
//!    returns [`GuardError::Work`]; a panic rolls back and resumes on the
//!    caller.
//! 4. Should `ctx` end before the commit is sent (the lease lost, the parent
//!    cancelled, the renewals stopped), the work is stopped (dropped at its
//!    next `.await`, or its SQLite statement interrupted), the transaction
//!    rolled back, and the call returns [`GuardError::Lost`] or
//!    [`GuardError::Ended`] at once. A work that panics, or a call dropped
//!    before the commit, rolls back the same way: the connection is taken
//!    out of use, never handed to the next transaction.
//! 5. A statement of the guard itself that fails before `COMMIT` is sent
//!    (connection, `BEGIN`, the verification), or a `COMMIT` the database
//!    refuses, is [`GuardError::Database`]: nothing was committed.
//! 6. `COMMIT` sent and no answer (the connection failed, or the commit's
//!    bound passed): [`GuardError::OutcomeUnknown`]. The transaction may have
//!    committed: it is not retryable, and a caller that does the work again
//!    may do it twice.
//!
//! Each guarded transaction is counted in the `lease_guarded_transactions_total`
//! metric ([`crate::metrics`]), by `outcome`: `committed`, `failed`, or
//! `unknown`.
//!
//! The flow is written once, [`drive`]: each backend gives it a
//! [`GuardDriver`] (how to take a connection, open the transaction and run
//! the guard, commit, roll back, and abandon a connection) and keeps
//! nothing else of it.
//!
//! # Locks per backend
//!
//! | backend | the guard | a successor's claim | the holder's own renewals |
//! | --- | --- | --- | --- |
//! | PostgreSQL | `SELECT ... FOR KEY SHARE OF l` in a `READ COMMITTED` transaction | locks the row it is about to take `FOR UPDATE` first (its claim statement selects the claimable row `FOR UPDATE` before updating it; the insert of a name with no row locks nothing): conflicts, **waits** | `UPDATE` of non-key columns takes `FOR NO KEY UPDATE`: does not conflict, never held up |
//! | MariaDB / MySQL (InnoDB) | `SELECT ... LOCK IN SHARE MODE` (a shared record lock) | any write to the row takes an exclusive lock: **waits** | wait too: InnoDB has no key-share level. Keep a guarded transaction shorter than the local deadline minus the renew interval (8 s with the default timings) |
//! | SQLite | the transaction is `BEGIN IMMEDIATE`: the database file's write lock | every claim writes: **waits** (up to the busy timeout) | wait too, on the store's one connection: keep it shorter than half the local deadline |
//! | any of the three through sqlx (`lease-sqlx`) or another driver | the same guard statement ([`GuardStatement`](crate::GuardStatement)), so the same lock; on SQLite the statement is a write (`UPDATE ... SET term = term`), which takes the file's write lock even after a deferred `BEGIN` | the same: **waits** | the same as the native row above |
//!
//! Where the drivers differ is only what happens to a statement still
//! running when the lease context ends ([`GuardDriver::abandon`]):
//! `lease-postgres` sends a cancel request and closes the connection,
//! `lease-mysql` kills the connection (`KILL CONNECTION`, from another
//! connection of its pool), `lease-sqlite` interrupts it; sqlx has no
//! cancel request, so `lease-sqlx` drops the transaction (its `ROLLBACK`
//! runs as soon as the statement ends). In every case nothing commits; the
//! lock lasts until the server has let go of the statement. Behind a
//! pooler (`statement_mode=unnamed`) `lease-postgres` sends no cancel
//! request, which PgBouncer 1.18 (the version in Debian 12) may crash on:
//! it closes the connection, the pooler closes its server connection, and
//! the server stops the statement within 500 ms
//! (`client_connection_check_interval`, which the guard sets for its
//! transaction on PostgreSQL 14 and later; an older server runs the
//! statement to its end). `lease-postgres`'s guard tests run through
//! PgBouncer in CI, that case included.
//!
//! # What fencing covers, and what it does not
//!
//! A successor's claim waits for a guarded transaction only if the claim
//! takes a lock that conflicts with the guard's. Every claim of this
//! project's stores does; a foreign client writing the lease table by hand
//! may not. The statements, with the default table `gst_leases`:
//!
//! **PostgreSQL.** The guard (its session setting left out):
//!
//! ```sql
//! SELECT l.term FROM gst_leases AS l
//!  WHERE l.name = $1 AND l.holder = $2 AND l.term = $3 AND l.expires_at_ms > <now>
//!    FOR KEY SHARE OF l
//! ```
//!
//! `lease-postgres`'s claim of an existing name locks it first:
//!
//! ```sql
//! SELECT l.term FROM gst_leases AS l WHERE l.name = $1 AND l.expires_at_ms <= <now>
//!    FOR UPDATE OF l            -- then UPDATE ... SET holder, term = term + 1, ...
//! ```
//!
//! `FOR UPDATE` conflicts with `FOR KEY SHARE`: the claim waits. (A claim
//! made before the lease has run out by the database clock matches no row,
//! takes no lock and is refused at once: nothing to fence.) Its instant
//! claims and claims of a rerun lock the same way. The holder's renewal,
//! `UPDATE gst_leases SET expires_at_ms = ... WHERE name = $1 AND holder =
//! $2 AND ...`, changes no key column, so it takes `FOR NO KEY UPDATE`,
//! which does not conflict with `FOR KEY SHARE`: the holder's own guarded
//! transaction never holds up its renewals. For the same reason **a
//! foreign client is not fenced** when it takes a name with a plain
//!
//! ```sql
//! UPDATE gst_leases SET holder = $2, term = term + 1, expires_at_ms = <now> + $3
//!  WHERE name = $1 AND expires_at_ms <= <now>
//! ```
//!
//! or with `INSERT ... ON CONFLICT (name) DO UPDATE SET holder = ..., term
//! = ...`: neither changes a key column, so neither waits for the guard, and
//! a stale holder's transaction can commit after such a claim. Such a client
//! must lock the row first (`SELECT ... FOR UPDATE`), or claim through this
//! project. (`lease-postgres`'s test
//! `a_plain_upsert_would_pass_a_key_share_lock` shows it.)
//!
//! **MariaDB / MySQL.** The guard:
//!
//! ```sql
//! SELECT term FROM gst_leases
//!  WHERE name = ? AND holder = ? AND term = ? AND expires_at_ms > <now>
//!  LOCK IN SHARE MODE
//! ```
//!
//! The shared record lock conflicts with the exclusive lock of every write
//! to the row: `lease-mysql`'s claim (`INSERT ... ON DUPLICATE KEY UPDATE`),
//! a foreign plain `UPDATE`, and the holder's own renewals all wait.
//!
//! **SQLite.** The native guard opens the transaction with `BEGIN
//! IMMEDIATE`, the file's write lock, then verifies; the guard for other
//! drivers is a write that changes nothing, which takes the same lock:
//!
//! ```sql
//! UPDATE gst_leases SET term = term
//!  WHERE name = ?1 AND holder = ?2 AND term = ?3 AND expires_at_ms > <now>
//!  RETURNING term
//! ```
//!
//! Every writer of the file waits, on this table or any other.
//!
//! In short, per backend, who waits for a guarded transaction:
//!
//! | claimant | PostgreSQL | MariaDB / MySQL | SQLite |
//! | --- | --- | --- | --- |
//! | this project's claims (`claim`, `claim_instant`, `claim_rerun`), any store | waits | waits | waits |
//! | a foreign `SELECT ... FOR UPDATE` of the row, then its `UPDATE` | waits | waits | waits |
//! | a foreign plain `UPDATE ... SET holder = ..., term = term + 1` | **not fenced** | waits | waits |
//! | a foreign `INSERT ... ON CONFLICT / ON DUPLICATE KEY UPDATE` | **not fenced** | waits | waits |
//! | a foreign `DELETE` of the row, or an `UPDATE` of `name` | waits (a key change takes `FOR UPDATE`) | waits | waits |
//! | the holder's own renewal | not held up | waits | waits |
//!
//! What no fence covers: effects outside the database (a message sent, a
//! file written) and writes made outside the guarded transaction; a holder
//! that commits before its lease runs out and does more afterwards; a
//! claimant on another table or database. A successor waits at most its own
//! lock-wait bound (the store's statement timeout, `innodb_lock_wait_timeout`,
//! the busy timeout) and then fails its claim and retries later: the fence
//! delays it, it never lets it through early.
//!
//! # Any other driver
//!
//! [`GuardStatement`](crate::GuardStatement) gives each dialect's guard as SQL and says how to run
//! it by hand: diesel or a raw driver runs it as the first statement of its
//! own transaction. A handle answers the statement of the store it was
//! claimed on, [`Handle::guard_statement`](crate::Handle::guard_statement) (through the optional
//! [`LeaseStore::guard_statement`](crate::LeaseStore::guard_statement),
//! which each backend's store answers; `store.guard_statement()` and the
//! facade's `Backend::guard_statement()` give the same), with its
//! [`Dialect`](crate::Dialect) and its parameters ([`Handle::guard_params`](crate::Handle::guard_params)). The
//! `lease-sqlx` crate does all of it for sqlx: `lease_sqlx::transaction`
//! keeps this module's contract on a sqlx pool, `lease_sqlx::guard` fences
//! a `sqlx::Transaction` of the caller's.

use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::pin::Pin;

use crate::context::LeaseContext;
use crate::error::{BoxError, DbErrorKind, Error, LostCause, write_chain};
use crate::state::EndCause;

mod flow;

pub use flow::{GuardDriver, check_found, drive};

/// A boxed future that is `Send`: what the work of an async guarded
/// transaction returns, so that it may borrow the transaction.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why a guarded transaction did not commit, or may not have, the same on
/// every backend.
///
/// In every case but [`OutcomeUnknown`](GuardError::OutcomeUnknown),
/// nothing of the transaction was committed.
///
/// Its `Debug` is one line, the message and its causes (the work's error
/// as its own `Debug` shows it), so that a `main` returning it prints
/// something a person can read.
#[non_exhaustive]
pub enum GuardError<E> {
    /// The lease is lost: always an [`Error::Lost`] with its cause. Either
    /// the verification that opens the transaction found the name no longer
    /// this holder's at this term ([`LostCause::NotHolder`]), and not one
    /// statement of the work ran; or the lease context ended with a loss
    /// before the commit, and the transaction was rolled back.
    Lost(Error),

    /// The lease context ended for another reason than a loss (the process
    /// is shutting down, the holder stopped its renewals) before the commit:
    /// the transaction was rolled back, or never begun.
    Ended {
        /// The lease's name.
        name: String,
        /// Why the context ended, when it says.
        cause: Option<EndCause>,
    },

    /// The database did not answer or refused a statement of the guard
    /// before `COMMIT` was sent (no connection; `BEGIN` or the verification
    /// failed), or refused the `COMMIT` itself (its answer was an error:
    /// nothing was committed). [`is_retryable`](GuardError::is_retryable)
    /// says whether trying again may succeed.
    Database {
        /// The lease's name.
        name: String,
        /// The backend's classification of `source`.
        kind: DbErrorKind,
        /// What the driver or the pool reported.
        source: BoxError,
    },

    /// `COMMIT` was sent and its answer never came: the connection failed,
    /// or no answer came within the bound. The transaction may have
    /// committed or not; the work may already be in the database. Not
    /// retryable: a caller that does the work again may do it twice.
    /// Check, by what the work wrote, before trying again.
    OutcomeUnknown {
        /// The lease's name.
        name: String,
        /// What the driver reported, or the bound that passed.
        source: BoxError,
    },

    /// The work returned this error: the transaction was rolled back.
    Work(E),
}

impl<E> GuardError<E> {
    /// Whether the lease is lost: the work under it must stop.
    #[must_use]
    pub fn is_lost(&self) -> bool {
        matches!(self, GuardError::Lost(_))
    }

    /// Whether `COMMIT` was sent and its answer lost: the transaction may
    /// have committed ([`GuardError::OutcomeUnknown`]).
    #[must_use]
    pub fn is_outcome_unknown(&self) -> bool {
        matches!(self, GuardError::OutcomeUnknown { .. })
    }

    /// Whether trying again later may succeed: the database did not answer
    /// for a passing reason ([`DbErrorKind::is_retryable`]) before `COMMIT`
    /// was sent, or refused the `COMMIT` for one (a serialization failure,
    /// say). A lost lease, an ended context, the work's own error and an
    /// [unknown outcome](GuardError::OutcomeUnknown) are not retryable.
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        match self {
            GuardError::Database { kind, .. } => kind.is_retryable(),
            _ => false,
        }
    }

    /// The work's own error, if that is what this is.
    pub fn into_work(self) -> Option<E> {
        match self {
            GuardError::Work(e) => Some(e),
            _ => None,
        }
    }

    /// The work's own error, if that is what this is.
    pub fn work(&self) -> Option<&E> {
        match self {
            GuardError::Work(e) => Some(e),
            _ => None,
        }
    }

    /// The same error with the work's error mapped by `f`.
    pub fn map_work<F>(self, f: impl FnOnce(E) -> F) -> GuardError<F> {
        match self {
            GuardError::Lost(e) => GuardError::Lost(e),
            GuardError::Ended { name, cause } => GuardError::Ended { name, cause },
            GuardError::Database { name, kind, source } => {
                GuardError::Database { name, kind, source }
            }
            GuardError::OutcomeUnknown { name, source } => {
                GuardError::OutcomeUnknown { name, source }
            }
            GuardError::Work(e) => GuardError::Work(f(e)),
        }
    }

    /// The same error with the work's error boxed, as an error type of its
    /// own: for `?` in a function returning `Box<dyn Error>` or
    /// [`BoxError`], when the work's error is itself boxed (`Box<dyn Error>`
    /// is not an `Error`, so `GuardError<BoxError>` is not one either).
    ///
    /// ```
    /// use lease_core::{BoxError, GuardError};
    ///
    /// fn commit() -> Result<(), GuardError<BoxError>> {
    ///     Err(GuardError::not_holder("report:7"))
    /// }
    ///
    /// fn main_like() -> Result<(), Box<dyn std::error::Error>> {
    ///     commit().map_err(GuardError::into_boxed)?;
    ///     Ok(())
    /// }
    ///
    /// let err = main_like().unwrap_err();
    /// assert_eq!(err.to_string(), r#"lease "report:7" lost: no longer this holder's"#);
    /// ```
    pub fn into_boxed(self) -> BoxedGuardError
    where
        E: Into<BoxError>,
    {
        BoxedGuardError(self.map_work(Into::into))
    }

    /// The source of this error, the work's error given by `work`.
    fn source_with<'a>(
        &'a self,
        work: impl FnOnce(&'a E) -> Option<&'a (dyn StdError + 'static)>,
    ) -> Option<&'a (dyn StdError + 'static)> {
        match self {
            GuardError::Lost(e) => e.source(),
            GuardError::Ended { .. } => None,
            GuardError::Database { source, .. } | GuardError::OutcomeUnknown { source, .. } => {
                Some(source.as_ref())
            }
            GuardError::Work(e) => work(e),
        }
    }

    /// The error for a verification that found the lease gone. For backends.
    pub fn not_holder(name: &str) -> Self {
        GuardError::Lost(Error::Lost {
            name: name.to_owned(),
            cause: LostCause::NotHolder,
        })
    }

    /// The error for a context that ended: [`GuardError::Lost`] when it
    /// ended with a loss, [`GuardError::Ended`] otherwise. For backends.
    pub fn ended(ctx: &LeaseContext) -> Self {
        let name = ctx.handle().name();
        match ctx.cause() {
            Some(EndCause::Lost(cause)) => GuardError::Lost(Error::Lost {
                name: name.to_owned(),
                cause,
            }),
            cause => GuardError::Ended {
                name: name.to_owned(),
                cause,
            },
        }
    }

    /// The error for a statement of the guard that failed. For backends.
    pub fn database(name: &str, kind: DbErrorKind, source: impl Into<BoxError>) -> Self {
        GuardError::Database {
            name: name.to_owned(),
            kind,
            source: source.into(),
        }
    }
}

impl<E> fmt::Display for GuardError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GuardError::Lost(e) => fmt::Display::fmt(e, f),
            GuardError::Ended {
                name,
                cause: Some(cause),
            } => write!(
                f,
                "guarded transaction under lease {name:?} rolled back: {cause}"
            ),
            GuardError::Ended { name, cause: None } => write!(
                f,
                "guarded transaction under lease {name:?} rolled back: the lease context ended"
            ),
            GuardError::Database { name, kind, .. } => {
                write!(f, "guarded transaction under lease {name:?} failed: {kind}")
            }
            GuardError::OutcomeUnknown { name, .. } => write!(
                f,
                "guarded transaction under lease {name:?}: COMMIT was sent and its answer lost; \
                 it may or may not have committed"
            ),
            GuardError::Work(_) => {
                f.write_str("the work of a guarded transaction failed; rolled back")
            }
        }
    }
}

impl<E: fmt::Debug> fmt::Debug for GuardError<E> {
    /// The message and its causes on one line: the lease's error as
    /// [`Error`]'s `Debug` shows it, the driver's with its sources, the
    /// work's with its own `Debug`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GuardError::Lost(e) => fmt::Debug::fmt(e, f),
            GuardError::Work(e) => write!(f, "{self}: {e:?}"),
            other => write_chain(f, &other.to_string(), other.source_with(|_| None)),
        }
    }
}

impl<E: StdError + 'static> StdError for GuardError<E> {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source_with(|e| Some(e))
    }
}

/// A [`GuardError`] whose work error is boxed, from
/// [`GuardError::into_boxed`]: an [`Error`](StdError), so `?` turns it
/// into `Box<dyn Error>` as well as into [`BoxError`].
///
/// The work's own error shows as it is (its message and its sources); any
/// other as the guarded transaction's error. [`get`](Self::get) and
/// [`into_inner`](Self::into_inner) give the [`GuardError`] back, to match
/// on it or to downcast the work's error.
pub struct BoxedGuardError(GuardError<BoxError>);

impl BoxedGuardError {
    /// The guarded transaction's error.
    #[must_use]
    pub fn get(&self) -> &GuardError<BoxError> {
        &self.0
    }

    /// The guarded transaction's error, owned.
    #[must_use]
    pub fn into_inner(self) -> GuardError<BoxError> {
        self.0
    }
}

impl fmt::Display for BoxedGuardError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            GuardError::Work(e) => fmt::Display::fmt(e, f),
            other => fmt::Display::fmt(other, f),
        }
    }
}

impl fmt::Debug for BoxedGuardError {
    /// The message and its causes on one line, as [`Chain`](crate::Chain)
    /// shows them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&crate::Chain(self), f)
    }
}

impl StdError for BoxedGuardError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.0.source_with(|e| e.source())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boxed_keeps_the_works_error_and_the_kind() {
        let work: GuardError<BoxError> = GuardError::Work("refused".into());
        let boxed = work.into_boxed();
        assert_eq!(boxed.to_string(), "refused");
        let back = boxed.into_inner().into_work().expect("the work's error");
        assert_eq!(back.to_string(), "refused");
        let lost: GuardError<BoxError> = GuardError::not_holder("job");
        let boxed = lost.into_boxed();
        assert!(boxed.get().is_lost());
        // `?` into `Box<dyn Error>`, as a `main` returning one does.
        let commit = || -> Result<(), GuardError<BoxError>> { Err(GuardError::not_holder("job")) };
        let main_like = || -> Result<(), Box<dyn StdError>> {
            commit().map_err(GuardError::into_boxed)?;
            Ok(())
        };
        let err = main_like().unwrap_err();
        assert_eq!(
            format!("{err:?}"),
            r#"lease "job" lost: no longer this holder's"#
        );
        assert!(err.downcast_ref::<BoxedGuardError>().is_some());
        let db: GuardError<std::io::Error> =
            GuardError::database("job", DbErrorKind::Conflict, "lock wait");
        assert!(db.is_retryable());
        assert!(db.to_string().contains("\"job\""), "{db}");
        let other: GuardError<std::io::Error> =
            GuardError::database("job", DbErrorKind::MissingTable, "no table");
        assert!(!other.is_retryable());
    }

    #[test]
    fn debug_is_one_readable_line() {
        let db: GuardError<std::io::Error> =
            GuardError::database("job", DbErrorKind::Connection, "connection reset");
        assert_eq!(
            format!("{db:?}"),
            r#"guarded transaction under lease "job" failed: connection failed: connection reset"#
        );
        let lost: GuardError<std::io::Error> = GuardError::not_holder("job");
        assert_eq!(
            format!("{lost:?}"),
            r#"lease "job" lost: no longer this holder's"#
        );
        let ended: GuardError<std::io::Error> = GuardError::Ended {
            name: "job".into(),
            cause: None,
        };
        assert_eq!(
            format!("{ended:?}"),
            r#"guarded transaction under lease "job" rolled back: the lease context ended"#
        );
        let work: GuardError<&str> = GuardError::Work("no such invoice");
        assert_eq!(
            format!("{work:?}"),
            r#"the work of a guarded transaction failed; rolled back: "no such invoice""#
        );
        let boxed =
            GuardError::<BoxError>::database("job", DbErrorKind::Connection, "reset").into_boxed();
        assert_eq!(
            format!("{boxed:?}"),
            r#"guarded transaction under lease "job" failed: connection failed: reset"#
        );
    }
}
