//! The glue to [`lease_sql::sqlite`], whose statements and flows the store
//! runs: the binding of a [`Statement`]'s values as rusqlite parameters,
//! the [`lease_sql::sqlite::SqliteConn`] of the store's one connection, and
//! [`blocking`], which runs a flow on it.
//!
//! rusqlite is blocking. Its connection answers each statement at once, so
//! its futures are ready when made, and a flow on it (which awaits nothing
//! else) completes on its first poll, on the store's connection thread.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use lease_core::{BoxError, TableName};
use lease_sql::{Args, Done, Statement, Value};
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, params_from_iter};

use crate::error::SqliteError;
use crate::store::SqliteStore;

pub(crate) use lease_sql::sqlite::Statements;

/// Validates `name` as the lease table.
pub(crate) fn table(name: &str) -> Result<TableName, SqliteError> {
    lease_sql::sqlite::table(name).map_err(|e| SqliteError::InvalidTable {
        table: e.name,
        reason: e.reason,
    })
}

/// `statement`'s values from `args`, as rusqlite parameters (`?1`, `?2`,
/// ... in order), borrowing the text.
///
/// # Errors
///
/// A role `args` does not give, a value the statement does not bind, or a
/// term past `i64::MAX`.
pub(crate) fn bind<'a>(
    statement: &Statement,
    args: &Args<'a>,
) -> Result<Vec<ToSqlOutput<'a>>, BoxError> {
    let text = |s: &'a str| ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes()));
    statement
        .values(args)?
        .into_iter()
        .map(|value| {
            Ok(match value {
                Value::Text(s) => text(s),
                Value::Token(token) => text(token.expose()),
                Value::NullText | Value::NullToken => ToSqlOutput::Borrowed(ValueRef::Null),
                Value::Int(int) => ToSqlOutput::Borrowed(ValueRef::Integer(int)),
                Value::Term(term) => ToSqlOutput::Borrowed(ValueRef::Integer(i64::try_from(term)?)),
                _ => return Err(format!("SQLite binds no {value:?}").into()),
            })
        })
        .collect()
}

/// A term as SQLite stores it (a signed INTEGER, never negative), at
/// column `idx`.
pub(crate) fn term_at(row: &rusqlite::Row<'_>, idx: usize) -> rusqlite::Result<u64> {
    let term: i64 = row.get(idx)?;
    u64::try_from(term).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(idx, term))
}

/// A row a statement returned, its values owned.
pub(crate) struct SqliteRow(Vec<rusqlite::types::Value>);

impl SqliteRow {
    fn value(&self, i: usize) -> Result<&rusqlite::types::Value, BoxError> {
        self.0
            .get(i)
            .ok_or_else(|| rusqlite::Error::InvalidColumnIndex(i).into())
    }

    fn mismatch(&self, i: usize, value: &rusqlite::types::Value) -> BoxError {
        rusqlite::Error::InvalidColumnType(i, String::new(), value.data_type()).into()
    }
}

impl lease_sql::Row for SqliteRow {
    fn int(&self, i: usize) -> Result<i64, BoxError> {
        match self.value(i)? {
            rusqlite::types::Value::Integer(int) => Ok(*int),
            other => Err(self.mismatch(i, other)),
        }
    }

    fn nullable_int(&self, i: usize) -> Result<Option<i64>, BoxError> {
        match self.value(i)? {
            rusqlite::types::Value::Null => Ok(None),
            _ => self.int(i).map(Some),
        }
    }

    fn flag(&self, i: usize) -> Result<bool, BoxError> {
        Ok(self.int(i)? != 0)
    }

    fn text(&self, i: usize) -> Result<String, BoxError> {
        match self.value(i)? {
            rusqlite::types::Value::Text(text) => Ok(text.clone()),
            other => Err(self.mismatch(i, other)),
        }
    }
}

/// The store's connection, as the flows run on it: every statement
/// prepared once and cached, and stepped to its end (SQLite runs its
/// automatic checkpoint only when a statement's step returns
/// `SQLITE_DONE`: with writes that stopped at their `RETURNING` row, the
/// WAL was never checkpointed and grew without bound, issue 17).
pub(crate) struct SqliteConn<'c> {
    conn: &'c mut Connection,
    /// Whether a transaction [`begin_immediate`] opened is still open.
    ///
    /// [`begin_immediate`]: lease_sql::sqlite::SqliteConn::begin_immediate
    open: bool,
}

impl<'c> SqliteConn<'c> {
    pub(crate) fn new(conn: &'c mut Connection) -> Self {
        SqliteConn { conn, open: false }
    }

    fn rows_now(&self, statement: &Statement, args: &Args<'_>) -> Result<Vec<SqliteRow>, BoxError> {
        let values = bind(statement, args)?;
        let mut stmt = self.conn.prepare_cached(statement.text())?;
        let columns = stmt.column_count();
        let mut rows = stmt.query(params_from_iter(values))?;
        let mut read = Vec::new();
        while let Some(row) = rows.next()? {
            let values = (0..columns)
                .map(|i| row.get::<_, rusqlite::types::Value>(i))
                .collect::<rusqlite::Result<_>>()?;
            read.push(SqliteRow(values));
        }
        Ok(read)
    }

    fn execute_now(&self, statement: &Statement, args: &Args<'_>) -> Result<Done, BoxError> {
        let values = bind(statement, args)?;
        let changed = self
            .conn
            .prepare_cached(statement.text())?
            .execute(params_from_iter(values))?;
        Ok(Done {
            rows_affected: u64::try_from(changed)?,
            last_insert_id: 0,
        })
    }

    fn batch(&mut self, sql: &str, open: bool) -> Result<(), BoxError> {
        self.conn.execute_batch(sql)?;
        self.open = open;
        Ok(())
    }
}

impl lease_sql::Conn for SqliteConn<'_> {
    type Row = SqliteRow;

    fn rows(
        &mut self,
        statement: &Statement,
        args: &Args<'_>,
    ) -> impl Future<Output = Result<Vec<SqliteRow>, BoxError>> + Send {
        std::future::ready(self.rows_now(statement, args))
    }

    fn execute(
        &mut self,
        statement: &Statement,
        args: &Args<'_>,
    ) -> impl Future<Output = Result<Done, BoxError>> + Send {
        std::future::ready(self.execute_now(statement, args))
    }
}

impl lease_sql::sqlite::SqliteConn for SqliteConn<'_> {
    fn begin_immediate(&mut self) -> impl Future<Output = Result<(), BoxError>> + Send {
        std::future::ready(self.batch("BEGIN IMMEDIATE", true))
    }

    fn commit(&mut self) -> impl Future<Output = Result<(), BoxError>> + Send {
        std::future::ready(self.batch("COMMIT", false))
    }
}

impl Drop for SqliteConn<'_> {
    /// Rolls back a transaction a flow left open (it failed midway).
    fn drop(&mut self) {
        if self.open {
            // A rollback that fails leaves the transaction to the next
            // call's check for one left open.
            let _ = self.conn.execute_batch("ROLLBACK");
        }
    }
}

/// Runs `flow`, a flow of [`lease_sql::sqlite`] on a [`SqliteConn`], to its
/// end: it completes on its first poll, since every statement it awaits is
/// answered at once.
///
/// # Errors
///
/// The flow's; a flow that waits on anything else (it cannot) is refused.
pub(crate) fn blocking<T>(flow: impl Future<Output = Result<T, BoxError>>) -> Result<T, BoxError> {
    match pin!(flow).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(done) => done,
        Poll::Pending => Err("a SQLite flow waited on something besides its connection".into()),
    }
}

impl SqliteStore {
    /// Runs `f` on the connection (see [`run`](Self::run)), where it runs a
    /// flow with [`blocking`].
    pub(crate) async fn flow<T, F>(&self, f: F) -> Result<T, BoxError>
    where
        T: Send + 'static,
        F: FnOnce(&mut SqliteConn<'_>, &Statements) -> Result<T, BoxError> + Send + 'static,
    {
        self.run(move |conn, sql| Ok(f(&mut SqliteConn::new(conn), sql)))
            .await?
    }
}

#[cfg(test)]
mod tests {
    use lease_core::{ClaimRequest, Token};
    use lease_sql::sqlite::SqliteConn as _;
    use lease_sql::sqlite::default_table;

    use super::*;

    /// Every statement of the dialect, bound with the values its flow (or
    /// the guard, or migrate) gives it: one value for each of `?1` to `?n`;
    /// a missing or extra role is refused.
    #[test]
    fn every_statement_binds_the_values_its_flow_gives() {
        lease_sql::testing::sqlite(&mut |statement, args| {
            let values = bind(statement, args)?;
            let numbered = (1..=values.len() + 1)
                .take_while(|n| statement.text().contains(&format!("?{n}")))
                .count();
            if numbered == values.len() {
                Ok(())
            } else {
                Err(format!("{} values for {}", values.len(), statement.text()).into())
            }
        })
        .unwrap();
    }

    #[test]
    fn a_flow_runs_to_its_end_on_the_connection_and_a_failed_one_rolls_back() {
        let mut conn = Connection::open_in_memory().unwrap();
        let sql = Statements::new(default_table());
        conn.execute_batch(sql.create_table.text()).unwrap();
        let claim = ClaimRequest {
            name: "job",
            token: Token::new("t"),
            instance: "i",
            lease_ms: 60_000,
        };
        let claimed = blocking(lease_sql::sqlite::claim_instant(
            &mut SqliteConn::new(&mut conn),
            &sql,
            &claim,
            1_000,
        ))
        .unwrap();
        assert!(matches!(
            claimed,
            lease_core::InstantClaim::Claimed { term: 1, .. }
        ));
        assert!(conn.is_autocommit(), "committed");
        {
            let mut open = SqliteConn::new(&mut conn);
            blocking(open.begin_immediate()).unwrap();
        }
        assert!(
            conn.is_autocommit(),
            "rolled back as the connection was dropped"
        );
        let pending = std::future::pending::<Result<(), BoxError>>();
        assert!(blocking(pending).is_err());
    }
}
