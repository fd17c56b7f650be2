//! How a statement is sent through sqlx and its rows read: the binding of a
//! [`Statement`]'s values as sqlx `Arguments`, and the connection the flows
//! of `lease-sql` run on.
#![cfg_attr(
    not(any(feature = "postgres", feature = "mysql", feature = "sqlite")),
    allow(unused)
)]

use lease_core::BoxError;
use lease_sql::{Args, Done, Statement, Value};
use sqlx::pool::PoolConnection;
use sqlx::{Arguments, AssertSqlSafe, Database, Executor, IntoArguments, Pool, Transaction};

/// What a sqlx database needs of its own beyond the common types: the
/// values and columns whose type differs between them.
pub(crate) trait SqlxDb: Database
where
    for<'c> &'c mut Self::Connection: Executor<'c, Database = Self>,
    Self::Arguments: IntoArguments<Self>,
{
    /// Binds `value`: [`add_common`] for the values every database
    /// binds alike, the database's own for a term (a `BIGINT UNSIGNED` on
    /// MySQL, signed elsewhere) and arrays (PostgreSQL's).
    fn add(args: &mut Self::Arguments, value: Value<'_>) -> Result<(), BoxError>;

    /// What a statement that returned no rows did.
    fn done(result: &Self::QueryResult) -> Done;

    /// Column `i` of `row` as [`lease_sql::Row`] reads it.
    fn column(row: &Self::Row, i: usize, kind: Column) -> Result<Cell, BoxError>;
}

/// The kinds of column the flows read.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Column {
    Int,
    NullableInt,
    Flag,
    Text,
    UInt,
    Bytes,
}

/// One column's value, read by its kind.
#[derive(Debug)]
pub(crate) enum Cell {
    Int(Option<i64>),
    Flag(bool),
    Text(String),
    /// MySQL's `BIGINT UNSIGNED`.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    UInt(u64),
    /// MySQL's `VARBINARY`.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    Bytes(Vec<u8>),
}

/// `statement`'s values from `args`, as sqlx arguments in bind order.
///
/// # Errors
///
/// A role `args` does not give, a value the statement does not bind, or a
/// value the database cannot encode.
pub(crate) fn bind<DB: SqlxDb>(
    statement: &Statement,
    args: &Args<'_>,
) -> Result<DB::Arguments, BoxError>
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
{
    let mut out = DB::Arguments::default();
    out.reserve(statement.params().len(), 0);
    for value in statement.values(args)? {
        DB::add(&mut out, value)?;
    }
    Ok(out)
}

/// Binds the values every database binds alike: text, a token, NULL, an
/// integer.
fn add_common<DB: Database>(args: &mut DB::Arguments, value: Value<'_>) -> Result<(), BoxError>
where
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> Option<&'q str>: sqlx::Encode<'q, DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    match value {
        Value::Text(text) => args.add(text),
        Value::Token(token) => args.add(token.expose()),
        Value::NullText | Value::NullToken => args.add(None::<&str>),
        Value::Int(int) => args.add(int),
        _ => Err(format!("{} binds no {value:?}", std::any::type_name::<DB>()).into()),
    }
}

/// Runs `statement` on `conn`, which answers no rows.
pub(crate) async fn execute_on<DB: SqlxDb>(
    conn: &mut DB::Connection,
    statement: &Statement,
    args: &Args<'_>,
) -> Result<Done, BoxError>
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
{
    let arguments = bind::<DB>(statement, args)?;
    let done = sqlx::query_with(AssertSqlSafe(statement.text()), arguments)
        .execute(conn)
        .await?;
    Ok(DB::done(&done))
}

/// Runs `statement` on `conn` and reads every row it answers.
pub(crate) async fn rows_on<DB: SqlxDb>(
    conn: &mut DB::Connection,
    statement: &Statement,
    args: &Args<'_>,
) -> Result<Vec<SqlxRow<DB>>, BoxError>
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
{
    let arguments = bind::<DB>(statement, args)?;
    let rows = sqlx::query_with(AssertSqlSafe(statement.text()), arguments)
        .fetch_all(conn)
        .await?;
    Ok(rows.into_iter().map(SqlxRow).collect())
}

/// A row, read as `lease-sql` decodes it.
pub(crate) struct SqlxRow<DB: Database>(DB::Row);

impl<DB: SqlxDb> SqlxRow<DB>
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
{
    fn cell(&self, i: usize, kind: Column) -> Result<Cell, BoxError> {
        DB::column(&self.0, i, kind)
    }
}

impl<DB: SqlxDb> lease_sql::Row for SqlxRow<DB>
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
{
    fn int(&self, i: usize) -> Result<i64, BoxError> {
        match self.cell(i, Column::Int)? {
            Cell::Int(Some(int)) => Ok(int),
            other => Err(format!("column {i} is {other:?}, not an integer").into()),
        }
    }

    fn nullable_int(&self, i: usize) -> Result<Option<i64>, BoxError> {
        match self.cell(i, Column::NullableInt)? {
            Cell::Int(int) => Ok(int),
            other => Err(format!("column {i} is {other:?}, not an integer").into()),
        }
    }

    fn flag(&self, i: usize) -> Result<bool, BoxError> {
        match self.cell(i, Column::Flag)? {
            Cell::Flag(flag) => Ok(flag),
            other => Err(format!("column {i} is {other:?}, not a boolean").into()),
        }
    }

    fn text(&self, i: usize) -> Result<String, BoxError> {
        match self.cell(i, Column::Text)? {
            Cell::Text(text) => Ok(text),
            other => Err(format!("column {i} is {other:?}, not text").into()),
        }
    }

    fn uint(&self, i: usize) -> Result<u64, BoxError> {
        match self.cell(i, Column::UInt)? {
            Cell::UInt(uint) => Ok(uint),
            Cell::Int(Some(int)) => lease_core::term_from_db(int),
            other => Err(format!("column {i} is {other:?}, not an integer").into()),
        }
    }

    fn bytes(&self, i: usize) -> Result<Vec<u8>, BoxError> {
        match self.cell(i, Column::Bytes)? {
            Cell::Bytes(bytes) => Ok(bytes),
            Cell::Text(text) => Ok(text.into_bytes()),
            other => Err(format!("column {i} is {other:?}, not bytes").into()),
        }
    }
}

/// The connection of one call: a connection of the pool, taken at the
/// call's first statement and given back when the call ends; or, while a
/// flow's transaction is open (SQLite's instant claim), the transaction's
/// own, which rolls back when dropped uncommitted.
pub(crate) struct SqlxConn<'p, DB: Database> {
    pool: &'p Pool<DB>,
    conn: Option<PoolConnection<DB>>,
    tx: Option<Transaction<'static, DB>>,
}

impl<'p, DB: SqlxDb> SqlxConn<'p, DB>
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
{
    /// A call on `pool`.
    pub(crate) fn new(pool: &'p Pool<DB>) -> Self {
        SqlxConn {
            pool,
            conn: None,
            tx: None,
        }
    }

    /// The connection the next statement runs on.
    pub(crate) async fn connection(&mut self) -> Result<&mut DB::Connection, sqlx::Error> {
        Ok(match (&mut self.tx, &mut self.conn) {
            (Some(tx), _) => &mut **tx,
            (None, Some(conn)) => &mut **conn,
            (None, slot @ None) => &mut **slot.insert(self.pool.acquire().await?),
        })
    }

    /// Opens a transaction with `begin` on a connection of its own.
    #[cfg(feature = "sqlite")]
    pub(crate) async fn begin_with(&mut self, begin: &'static str) -> Result<(), BoxError> {
        self.tx = Some(self.pool.begin_with(begin).await?);
        Ok(())
    }

    /// Commits the transaction [`begin_with`](Self::begin_with) opened.
    #[cfg(feature = "sqlite")]
    pub(crate) async fn commit(&mut self) -> Result<(), BoxError> {
        match self.tx.take() {
            Some(tx) => Ok(tx.commit().await?),
            None => Err("no transaction to commit".into()),
        }
    }
}

impl<DB: SqlxDb> lease_sql::Conn for SqlxConn<'_, DB>
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
{
    type Row = SqlxRow<DB>;

    async fn rows(
        &mut self,
        statement: &Statement,
        args: &Args<'_>,
    ) -> Result<Vec<Self::Row>, BoxError> {
        rows_on::<DB>(self.connection().await?, statement, args).await
    }

    async fn execute(&mut self, statement: &Statement, args: &Args<'_>) -> Result<Done, BoxError> {
        execute_on::<DB>(self.connection().await?, statement, args).await
    }
}

/// What an integer column is, as the flows read it.
fn integer<DB: Database>(row: &DB::Row, i: usize, kind: Column) -> Result<Cell, BoxError>
where
    usize: sqlx::ColumnIndex<DB::Row>,
    i64: for<'r> sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    String: for<'r> sqlx::Decode<'r, DB> + sqlx::Type<DB>,
{
    use sqlx::Row as _;
    Ok(match kind {
        Column::NullableInt => Cell::Int(row.try_get(i)?),
        Column::Text | Column::Bytes => Cell::Text(row.try_get(i)?),
        Column::Int | Column::UInt | Column::Flag => Cell::Int(Some(row.try_get(i)?)),
    })
}

#[cfg(feature = "postgres")]
impl SqlxDb for sqlx::Postgres {
    fn add(args: &mut Self::Arguments, value: Value<'_>) -> Result<(), BoxError> {
        match value {
            Value::Term(term) => args.add(i64::try_from(term)?),
            Value::Texts(texts) => args.add(texts.to_vec()),
            Value::Tokens(tokens) => {
                args.add(tokens.iter().map(|t| t.expose()).collect::<Vec<_>>())
            }
            other => add_common::<Self>(args, other),
        }
    }

    fn done(result: &Self::QueryResult) -> Done {
        Done {
            rows_affected: result.rows_affected(),
            last_insert_id: 0,
        }
    }

    fn column(row: &Self::Row, i: usize, kind: Column) -> Result<Cell, BoxError> {
        use sqlx::Row as _;
        match kind {
            Column::Flag => Ok(Cell::Flag(row.try_get(i)?)),
            _ => integer::<Self>(row, i, kind),
        }
    }
}

#[cfg(feature = "mysql")]
impl SqlxDb for sqlx::MySql {
    fn add(args: &mut Self::Arguments, value: Value<'_>) -> Result<(), BoxError> {
        match value {
            Value::Term(term) => args.add(term),
            other => add_common::<Self>(args, other),
        }
    }

    /// The OK packet's `last_insert_id`, read from this statement's reply.
    fn done(result: &Self::QueryResult) -> Done {
        Done {
            rows_affected: result.rows_affected(),
            last_insert_id: result.last_insert_id(),
        }
    }

    fn column(row: &Self::Row, i: usize, kind: Column) -> Result<Cell, BoxError> {
        use sqlx::Row as _;
        match kind {
            Column::UInt => Ok(Cell::UInt(row.try_get(i)?)),
            Column::Bytes => Ok(Cell::Bytes(row.try_get(i)?)),
            Column::Flag => Ok(Cell::Flag(row.try_get::<i64, _>(i)? != 0)),
            _ => integer::<Self>(row, i, kind),
        }
    }
}

#[cfg(feature = "sqlite")]
impl SqlxDb for sqlx::Sqlite {
    fn add(args: &mut Self::Arguments, value: Value<'_>) -> Result<(), BoxError> {
        match value {
            Value::Term(term) => args.add(i64::try_from(term)?),
            other => add_common::<Self>(args, other),
        }
    }

    fn done(result: &Self::QueryResult) -> Done {
        Done {
            rows_affected: result.rows_affected(),
            last_insert_id: 0,
        }
    }

    fn column(row: &Self::Row, i: usize, kind: Column) -> Result<Cell, BoxError> {
        use sqlx::Row as _;
        match kind {
            Column::Flag => Ok(Cell::Flag(row.try_get(i)?)),
            _ => integer::<Self>(row, i, kind),
        }
    }
}

#[cfg(feature = "mysql")]
impl lease_sql::mysql::MySqlConn for SqlxConn<'_, sqlx::MySql> {
    fn error_number(error: &(dyn std::error::Error + 'static)) -> Option<u16> {
        error
            .downcast_ref::<sqlx::Error>()?
            .as_database_error()?
            .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .map(sqlx::mysql::MySqlDatabaseError::number)
    }

    async fn write_then_read(
        &mut self,
        (write, write_args): (&Statement, &Args<'_>),
        (read, read_args): (&Statement, &Args<'_>),
    ) -> Result<Vec<Self::Row>, BoxError> {
        use sqlx::Connection as _;
        let mut tx = self.connection().await?.begin().await?;
        let _ = execute_on::<sqlx::MySql>(&mut tx, write, write_args).await?;
        let rows = rows_on::<sqlx::MySql>(&mut tx, read, read_args).await?;
        tx.commit().await?;
        Ok(rows)
    }

    /// sqlx connects with `CLIENT_FOUND_ROWS`: an `UPDATE`'s rows affected
    /// are the rows it matched.
    async fn execute_matched(
        &mut self,
        statement: &Statement,
        args: &Args<'_>,
    ) -> Result<Done, BoxError> {
        lease_sql::Conn::execute(self, statement, args).await
    }
}

#[cfg(feature = "sqlite")]
impl lease_sql::sqlite::SqliteConn for SqlxConn<'_, sqlx::Sqlite> {
    async fn begin_immediate(&mut self) -> Result<(), BoxError> {
        self.begin_with("BEGIN IMMEDIATE").await
    }

    async fn commit(&mut self) -> Result<(), BoxError> {
        SqlxConn::commit(self).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every statement of each dialect, bound as sqlx arguments with the
    /// values its flow gives it: one argument per parameter; a missing or
    /// extra role is refused.
    #[test]
    fn every_statement_binds_the_values_its_flow_gives() {
        fn check<DB: SqlxDb>(statement: &Statement, args: &Args<'_>) -> Result<(), BoxError>
        where
            for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
            DB::Arguments: IntoArguments<DB>,
        {
            let bound = bind::<DB>(statement, args)?.len();
            if bound == statement.params().len() {
                Ok(())
            } else {
                Err(format!("{bound} arguments for {}", statement.text()).into())
            }
        }
        #[cfg(feature = "postgres")]
        lease_sql::testing::postgres(&mut check::<sqlx::Postgres>).unwrap();
        #[cfg(feature = "mysql")]
        lease_sql::testing::mysql(&mut check::<sqlx::MySql>).unwrap();
        #[cfg(feature = "sqlite")]
        lease_sql::testing::sqlite(&mut check::<sqlx::Sqlite>).unwrap();
    }
}
