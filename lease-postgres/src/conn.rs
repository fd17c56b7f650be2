//! How a statement is sent and its rows read: the statement mode, the
//! binding of a [`Statement`]'s values as tokio-postgres parameters (the
//! token behind a parameter whose `Debug` hides it), and the
//! [`lease_sql::Conn`] the flows of [`lease_sql::postgres`] run on.

use std::error::Error;
use std::fmt;

use bytes::BytesMut;
use deadpool_postgres::{ClientWrapper, Object};
use futures_util::StreamExt;
use lease_core::BoxError;
use lease_sql::{Args, Done, SqlType, Statement, Value};
use tokio_postgres::Row;
use tokio_postgres::types::{IsNull, ToSql, Type};

use crate::store::PostgresStore;

/// How a [`PostgresStore`] sends its protocol statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum StatementMode {
    /// Named prepared statements, prepared once per connection and cached
    /// (the default): each later use is one round trip with the statement's
    /// name. They live on the server connection that prepared them, so they
    /// break behind a pooler that hands each transaction another server
    /// connection (PgBouncer in transaction pooling mode before 1.21).
    #[default]
    Prepared,
    /// Unnamed statements with typed parameters (`query_typed`): parse,
    /// bind and execute in one round trip, nothing left on the server
    /// connection, so the store works behind PgBouncer in transaction
    /// pooling mode. The server parses and plans every statement. URL
    /// parameter `statement_mode=unnamed`.
    Unnamed,
}

/// A holder token as a statement parameter, encoded exactly as the `&str`
/// it wraps.
///
/// tokio-postgres logs every statement it executes with its parameters'
/// `Debug` output (the `log` crate, target `tokio_postgres::query`, debug
/// level). The token is the tenure's credential: whoever has it can renew
/// or release the lease. So its `Debug` shows a placeholder.
#[derive(Clone, Copy)]
pub(crate) struct TokenParam<'a>(pub(crate) &'a str);

impl fmt::Debug for TokenParam<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<holder token>")
    }
}

impl ToSql for TokenParam<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        self.0.to_sql(ty, out)
    }

    fn accepts(ty: &Type) -> bool {
        <&str as ToSql>::accepts(ty)
    }

    tokio_postgres::types::to_sql_checked!();
}

/// One bound value: what a [`Value`] is to tokio-postgres.
#[derive(Debug)]
pub(crate) enum Param<'a> {
    Text(Option<&'a str>),
    Token(Option<TokenParam<'a>>),
    Int(i64),
    Texts(&'a [&'a str]),
    Tokens(Vec<TokenParam<'a>>),
}

impl ToSql for Param<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        match self {
            Param::Text(text) => text.to_sql(ty, out),
            Param::Token(token) => token.to_sql(ty, out),
            Param::Int(int) => int.to_sql(ty, out),
            Param::Texts(texts) => texts.to_sql(ty, out),
            Param::Tokens(tokens) => tokens.to_sql(ty, out),
        }
    }

    fn accepts(ty: &Type) -> bool {
        <&str as ToSql>::accepts(ty)
            || <i64 as ToSql>::accepts(ty)
            || <&[&str] as ToSql>::accepts(ty)
    }

    /// Checks the type against the value's own: an integer is never sent
    /// as text.
    fn to_sql_checked(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        match self {
            Param::Text(text) => text.to_sql_checked(ty, out),
            Param::Token(token) => token.to_sql_checked(ty, out),
            Param::Int(int) => int.to_sql_checked(ty, out),
            Param::Texts(texts) => texts.to_sql_checked(ty, out),
            Param::Tokens(tokens) => tokens.to_sql_checked(ty, out),
        }
    }
}

/// `statement`'s values from `args`, as tokio-postgres parameters with the
/// type each is cast to in the text.
///
/// # Errors
///
/// A role `args` does not give, a value the statement does not bind, or a
/// term past `i64::MAX`.
pub(crate) fn bind<'a>(
    statement: &Statement,
    args: &Args<'a>,
) -> Result<Vec<(Param<'a>, Type)>, BoxError> {
    let values = statement.values(args)?;
    statement
        .params()
        .iter()
        .zip(values)
        .map(|(param, value)| {
            let ty = match param.sql_type() {
                SqlType::Text => Type::TEXT,
                SqlType::BigInt => Type::INT8,
                SqlType::TextArray => Type::TEXT_ARRAY,
            };
            let value = match value {
                Value::Text(text) => Param::Text(Some(text)),
                Value::NullText => Param::Text(None),
                Value::Token(token) => Param::Token(Some(TokenParam(token.expose()))),
                Value::NullToken => Param::Token(None),
                Value::Int(int) => Param::Int(int),
                Value::Term(term) => Param::Int(i64::try_from(term)?),
                Value::Texts(texts) => Param::Texts(texts),
                Value::Tokens(tokens) => {
                    Param::Tokens(tokens.iter().map(|t| TokenParam(t.expose())).collect())
                }
                _ => return Err(format!("PostgreSQL binds no {value:?}").into()),
            };
            Ok((value, ty))
        })
        .collect()
}

/// The parameters as tokio-postgres's typed queries take them.
pub(crate) fn typed<'p>(params: &'p [(Param<'_>, Type)]) -> Vec<(&'p (dyn ToSql + Sync), Type)> {
    params
        .iter()
        .map(|(value, ty)| (value as &(dyn ToSql + Sync), ty.clone()))
        .collect()
}

/// A row, read as [`lease_sql::postgres`] decodes it.
pub(crate) struct PgRow(Row);

impl lease_sql::Row for PgRow {
    fn int(&self, i: usize) -> Result<i64, BoxError> {
        Ok(self.0.try_get(i)?)
    }

    fn nullable_int(&self, i: usize) -> Result<Option<i64>, BoxError> {
        Ok(self.0.try_get(i)?)
    }

    fn flag(&self, i: usize) -> Result<bool, BoxError> {
        Ok(self.0.try_get(i)?)
    }

    fn text(&self, i: usize) -> Result<String, BoxError> {
        Ok(self.0.try_get(i)?)
    }
}

/// A pool connection, sending statements as the [statement
/// mode](StatementMode) says.
pub(crate) struct PgConn<'c> {
    pub(crate) client: &'c ClientWrapper,
    pub(crate) mode: StatementMode,
}

impl lease_sql::Conn for PgConn<'_> {
    type Row = PgRow;

    async fn rows(
        &mut self,
        statement: &Statement,
        args: &Args<'_>,
    ) -> Result<Vec<PgRow>, BoxError> {
        let params = bind(statement, args)?;
        let rows = query(self.client, self.mode, statement.text(), &typed(&params)).await?;
        Ok(rows.into_iter().map(PgRow).collect())
    }

    async fn execute(&mut self, statement: &Statement, args: &Args<'_>) -> Result<Done, BoxError> {
        let params = bind(statement, args)?;
        let rows_affected = match self.mode {
            StatementMode::Unnamed => {
                let stream = self
                    .client
                    .query_typed_raw(
                        statement.text(),
                        params
                            .iter()
                            .map(|(v, t)| (v as &(dyn ToSql + Sync), t.clone())),
                    )
                    .await?;
                let mut stream = std::pin::pin!(stream);
                while let Some(row) = stream.next().await {
                    let _ = row?;
                }
                stream.rows_affected().unwrap_or(0)
            }
            StatementMode::Prepared => {
                let stmt = self.client.prepare_cached(statement.text()).await?;
                let values: Vec<&(dyn ToSql + Sync)> = params
                    .iter()
                    .map(|(v, _)| v as &(dyn ToSql + Sync))
                    .collect();
                self.client.execute(&stmt, &values).await?
            }
        };
        Ok(Done {
            rows_affected,
            last_insert_id: 0,
        })
    }
}

impl PostgresStore {
    /// A connection of the pool.
    pub(crate) async fn client(&self) -> Result<Object, BoxError> {
        Ok(self.inner.pool.get().await?)
    }
}

/// Runs `sql` on `client` with typed `params`, as `mode` says: a named
/// statement prepared once and cached, or an unnamed one.
pub(crate) async fn query(
    client: &ClientWrapper,
    mode: StatementMode,
    sql: &str,
    params: &[(&(dyn ToSql + Sync), Type)],
) -> Result<Vec<Row>, tokio_postgres::Error> {
    match mode {
        StatementMode::Unnamed => client.query_typed(sql, params).await,
        StatementMode::Prepared => {
            let stmt = client.prepare_cached(sql).await?;
            let values: Vec<&(dyn ToSql + Sync)> = params.iter().map(|(v, _)| *v).collect();
            client.query(&stmt, &values).await
        }
    }
}

#[cfg(test)]
mod tests {
    use lease_core::Token;
    use lease_sql::postgres::{Statements, default_table};

    use super::*;

    #[test]
    fn debug_hides_the_token_and_encoding_keeps_it() {
        let token = TokenParam("t0k3n-secret");
        assert_eq!(
            format!("{token:?} {:?}", [token]),
            "<holder token> [<holder token>]"
        );
        let (mut a, mut b) = (BytesMut::new(), BytesMut::new());
        let _ = token.to_sql(&Type::TEXT, &mut a).unwrap();
        let _ = "t0k3n-secret".to_sql(&Type::TEXT, &mut b).unwrap();
        assert_eq!(a, b);
        let bound = bind(
            &Statements::new(default_table()).release,
            &Args::new().name("job").token(Token::new("t0k3n-secret")),
        )
        .unwrap();
        assert!(!format!("{bound:?}").contains("t0k3n"), "{bound:?}");
    }

    #[test]
    fn an_integer_is_never_sent_as_text() {
        let mut out = BytesMut::new();
        assert!(Param::Int(5).to_sql_checked(&Type::TEXT, &mut out).is_err());
        assert!(
            Param::Text(Some("x"))
                .to_sql_checked(&Type::INT8, &mut out)
                .is_err()
        );
        assert!(Param::Int(5).to_sql_checked(&Type::INT8, &mut out).is_ok());
    }

    /// Every statement of the dialect, bound with the values its flow (or
    /// the guarded transaction, or migrate) gives it: each value has the
    /// type its placeholder casts to; a missing or extra role is refused.
    #[test]
    fn every_statement_binds_the_values_its_flow_gives() {
        lease_sql::testing::postgres(&mut |statement, args| {
            let bound = bind(statement, args)?;
            for (n, (_, ty)) in bound.iter().enumerate() {
                let cast = match *ty {
                    Type::TEXT => "text",
                    Type::INT8 => "bigint",
                    _ => "text[]",
                };
                let placeholder = format!("${}::{cast}", n + 1);
                if !statement.text().contains(&placeholder) {
                    return Err(format!("no {placeholder} in {}", statement.text()).into());
                }
            }
            Ok(())
        })
        .unwrap();
    }
}
