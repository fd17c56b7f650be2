//! The guard statement of a dialect: the seam's description of the fence,
//! for drivers that run it themselves. The flow that runs it is
//! [`crate::guard`].

use std::fmt;

use crate::token::Token;

/// A dialect's guard statement, for running the fence by hand in a
/// transaction of another driver (diesel, sqlx, a raw driver).
///
/// How to use it, on any backend:
///
/// 1. Open the transaction with [`begin`](Self::begin) (or the driver's own
///    equivalent).
/// 2. Run [`sql`](Self::sql) as its **first** statement, binding the three
///    positional parameters of
///    [`Handle::guard_params`](crate::Handle::guard_params), in this order:
///    the lease's name (text), the token (text, [`Token::expose`]), the
///    term (a signed 64-bit integer).
/// 3. No row: the lease is not this holder's at this term any more; roll
///    back and stop the work. One row: do the work and commit.
///
/// The statement locks the lease row as the native guarded transaction does
/// (see [`crate::guard`]'s lock table): a successor's claim waits for the
/// transaction to end. It does not bound how long the transaction stays
/// open, nor end it when the lease's context ends: that is the caller's to
/// do (stop before the local deadline).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardStatement {
    dialect: Dialect,
    begin: &'static str,
    sql: String,
}

/// The SQL dialect a [`GuardStatement`] is written in: which database it
/// runs on, and so which placeholders it uses and which locks it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Dialect {
    /// PostgreSQL: `$1 $2 $3`, the row locked `FOR KEY SHARE`.
    Postgres,
    /// MySQL or MariaDB (InnoDB): `? ? ?`, a shared record lock.
    MySql,
    /// SQLite: `?1 ?2 ?3`, the database file's write lock.
    Sqlite,
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dialect::Postgres => "PostgreSQL",
            Dialect::MySql => "MySQL",
            Dialect::Sqlite => "SQLite",
        })
    }
}

impl GuardStatement {
    /// A guard statement of `dialect`, opened by `begin`. For backends.
    #[must_use]
    pub fn new(dialect: Dialect, begin: &'static str, sql: String) -> Self {
        GuardStatement {
            dialect,
            begin,
            sql,
        }
    }

    /// The dialect: the database the statement must run on. A driver
    /// integration (`lease-sqlx`) checks it against its connection's, so
    /// that a guard is never run on a database that does not hold the lease.
    #[must_use]
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The statement that opens the transaction: `BEGIN` on PostgreSQL,
    /// `START TRANSACTION` on MySQL, `BEGIN IMMEDIATE` on SQLite.
    #[must_use]
    pub fn begin(&self) -> &'static str {
        self.begin
    }

    /// The guard: one row when the lease is still the handle's, none
    /// otherwise. Its parameters are positional, in the dialect's own
    /// notation (`$1 $2 $3`, `? ? ?`, `?1 ?2 ?3`): name, token, term.
    #[must_use]
    pub fn sql(&self) -> &str {
        &self.sql
    }
}

/// The parameters of a [`GuardStatement`], in the order they bind:
/// [`Handle::guard_params`](crate::Handle::guard_params). Its `Debug`
/// shows the token as [`Token`]'s does: nothing secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuardParams<'h> {
    /// The first: the lease's name.
    pub name: &'h str,
    /// The second: the handle's token (bind [`Token::expose`]).
    pub token: Token<'h>,
    /// The third: the term.
    pub term: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dialect_is_the_one_given() {
        let given = GuardStatement::new(Dialect::MySql, "START TRANSACTION", "SELECT 1".into());
        assert_eq!(given.dialect(), Dialect::MySql);
        assert_eq!(given.begin(), "START TRANSACTION");
        assert_eq!(given.sql(), "SELECT 1");
        assert_eq!(Dialect::Sqlite.to_string(), "SQLite");
    }

    #[tokio::test]
    async fn a_handle_answers_its_stores_guard_statement_and_hides_its_token() {
        use crate::memtable::MemTable;
        let leases = crate::Leases::new(MemTable::new());
        let handle = leases.claim("job").await.unwrap().unwrap();
        // The test table offers no guard: the trait's default.
        assert_eq!(handle.guard_statement(), None);
        let p = handle.guard_params();
        assert_eq!((p.name, p.token, p.term), ("job", handle.token(), 1));
        let secret = handle.token().expose().to_owned();
        assert_eq!(secret.len(), 32);
        let holder = handle.hold(&crate::CancellationToken::new());
        let claim = crate::ClaimRequest {
            name: "job",
            token: handle.token(),
            instance: "i",
            lease_ms: 1,
        };
        let finish = crate::FinishRequest {
            name: "job",
            token: Some(handle.token()),
            instant_ms: 1,
            passed_ms: 1,
        };
        for shown in [
            format!("{p:?}"),
            format!("{handle:?}"),
            format!("{:?}", handle.token()),
            format!("{holder:?}"),
            format!("{:?}", holder.context()),
            format!("{claim:?}"),
            format!("{finish:?}"),
        ] {
            assert!(!shown.contains(&secret), "the token in {shown}");
        }
        holder.stop().await;
    }
}
