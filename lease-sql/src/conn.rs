//! What a driver gives the flows: a connection that runs a [`Statement`],
//! and the rows it reads.

use std::future::Future;

use lease_core::BoxError;

use crate::statement::{Args, Statement};

/// One row a statement returned, read column by column (from 0) in the
/// type the dialect stores.
///
/// A driver implements the reads of its own types; [`uint`](Self::uint)
/// and [`bytes`](Self::bytes) have defaults for the dialects that store
/// terms signed and names as text.
pub trait Row {
    /// A signed 64-bit integer.
    ///
    /// # Errors
    ///
    /// The driver's, when the column is of another type or NULL.
    fn int(&self, i: usize) -> Result<i64, BoxError>;

    /// A signed 64-bit integer, or NULL.
    ///
    /// # Errors
    ///
    /// The driver's, when the column is of another type.
    fn nullable_int(&self, i: usize) -> Result<Option<i64>, BoxError>;

    /// A boolean (PostgreSQL's `bool`; an integer, 0 false, elsewhere).
    ///
    /// # Errors
    ///
    /// The driver's, when the column is of another type or NULL.
    fn flag(&self, i: usize) -> Result<bool, BoxError>;

    /// Text.
    ///
    /// # Errors
    ///
    /// The driver's, when the column is of another type or NULL.
    fn text(&self, i: usize) -> Result<String, BoxError>;

    /// An unsigned 64-bit integer (MySQL's `BIGINT UNSIGNED`). By default
    /// [`int`](Self::int), refused when negative.
    ///
    /// # Errors
    ///
    /// As [`int`](Self::int), or a negative value.
    fn uint(&self, i: usize) -> Result<u64, BoxError> {
        lease_core::term_from_db(self.int(i)?)
    }

    /// Bytes (MySQL's `VARBINARY`). By default [`text`](Self::text)'s.
    ///
    /// # Errors
    ///
    /// As [`text`](Self::text).
    fn bytes(&self, i: usize) -> Result<Vec<u8>, BoxError> {
        self.text(i).map(String::into_bytes)
    }
}

/// What a statement that returns no rows did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Done {
    /// The rows it changed.
    pub rows_affected: u64,
    /// MySQL's insert id of the reply (`LAST_INSERT_ID(expr)`: see
    /// [`crate::mysql`]); 0 on the other dialects.
    pub last_insert_id: u64,
}

/// One connection of a driver (or a transaction on one), as the flows of
/// [`crate::postgres`], [`crate::mysql`] and [`crate::sqlite`] use it: each
/// flow takes one and runs its statements on it, in order.
///
/// A driver binds a statement's values with [`Statement::values`], in the
/// order they come, and reads every row a statement returns to its end
/// (SQLite checkpoints its log only when a statement steps to its end).
///
/// A blocking driver implements it with futures that are ready at once
/// ([`std::future::ready`]): the flows await nothing else, so a flow on
/// such a connection completes on its first poll.
pub trait Conn: Send {
    /// A row as the driver returns it.
    type Row: Row + Send;

    /// Runs `statement` with `args` and returns every row it answers.
    fn rows(
        &mut self,
        statement: &Statement,
        args: &Args<'_>,
    ) -> impl Future<Output = Result<Vec<Self::Row>, BoxError>> + Send;

    /// Runs `statement` with `args`, which answers no rows.
    fn execute(
        &mut self,
        statement: &Statement,
        args: &Args<'_>,
    ) -> impl Future<Output = Result<Done, BoxError>> + Send;
}

/// The first row of `statement`, if any (the rest read and dropped).
pub(crate) async fn first<C: Conn>(
    conn: &mut C,
    statement: &Statement,
    args: &Args<'_>,
) -> Result<Option<C::Row>, BoxError> {
    Ok(conn.rows(statement, args).await?.into_iter().next())
}
