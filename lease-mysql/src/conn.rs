//! How a statement is sent and its rows read: the binding of a
//! [`Statement`]'s values as mysql_async parameters, and the
//! [`lease_sql::mysql::MySqlConn`] the flows of [`lease_sql::mysql`] run
//! on (their deadlock retries among them).

use lease_core::BoxError;
use lease_sql::{Args, Done, Statement, Value};
use mysql_async::prelude::Queryable;
use mysql_async::{Params, Row, TxOpts};

use crate::store::MySqlStore;

/// `statement`'s values from `args`, as positional mysql_async parameters.
///
/// # Errors
///
/// A role `args` does not give, or a value the statement does not bind.
pub(crate) fn bind(statement: &Statement, args: &Args<'_>) -> Result<Params, BoxError> {
    let values = statement
        .values(args)?
        .into_iter()
        .map(|value| {
            Ok(match value {
                Value::Text(text) => mysql_async::Value::from(text),
                Value::Token(token) => mysql_async::Value::from(token.expose()),
                Value::NullText | Value::NullToken => mysql_async::Value::NULL,
                Value::Int(int) => mysql_async::Value::Int(int),
                Value::Term(term) => mysql_async::Value::UInt(term),
                _ => return Err(format!("MySQL binds no {value:?}")),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(if values.is_empty() {
        Params::Empty
    } else {
        Params::Positional(values)
    })
}

/// A row, read as [`lease_sql::mysql`] decodes it.
pub(crate) struct MyRow(Row);

impl MyRow {
    fn get<T: mysql_async::prelude::FromValue>(&self, i: usize) -> Result<T, BoxError> {
        match self.0.get_opt(i) {
            Some(value) => Ok(value?),
            None => Err(format!("the row has no column {i}").into()),
        }
    }
}

impl lease_sql::Row for MyRow {
    fn int(&self, i: usize) -> Result<i64, BoxError> {
        self.get(i)
    }

    fn nullable_int(&self, i: usize) -> Result<Option<i64>, BoxError> {
        self.get(i)
    }

    fn flag(&self, i: usize) -> Result<bool, BoxError> {
        Ok(self.get::<i64>(i)? != 0)
    }

    fn text(&self, i: usize) -> Result<String, BoxError> {
        self.get(i)
    }

    fn uint(&self, i: usize) -> Result<u64, BoxError> {
        self.get(i)
    }

    fn bytes(&self, i: usize) -> Result<Vec<u8>, BoxError> {
        self.get(i)
    }
}

/// A connection of the pool, as the flows run on it.
pub(crate) struct MyConn<'c>(pub(crate) &'c mut mysql_async::Conn);

impl lease_sql::Conn for MyConn<'_> {
    type Row = MyRow;

    async fn rows(
        &mut self,
        statement: &Statement,
        args: &Args<'_>,
    ) -> Result<Vec<MyRow>, BoxError> {
        let rows: Vec<Row> = self
            .0
            .exec(statement.text(), bind(statement, args)?)
            .await?;
        Ok(rows.into_iter().map(MyRow).collect())
    }

    /// The OK packet's rows and `last_insert_id`, read from the reply to
    /// this statement on this connection.
    async fn execute(&mut self, statement: &Statement, args: &Args<'_>) -> Result<Done, BoxError> {
        self.0
            .exec_drop(statement.text(), bind(statement, args)?)
            .await?;
        Ok(Done {
            rows_affected: self.0.affected_rows(),
            last_insert_id: self.0.last_insert_id().unwrap_or(0),
        })
    }
}

impl lease_sql::mysql::MySqlConn for MyConn<'_> {
    fn error_number(error: &(dyn std::error::Error + 'static)) -> Option<u16> {
        match error.downcast_ref::<mysql_async::Error>() {
            Some(mysql_async::Error::Server(e)) => Some(e.code),
            _ => None,
        }
    }

    async fn write_then_read(
        &mut self,
        (write, write_args): (&Statement, &Args<'_>),
        (read, read_args): (&Statement, &Args<'_>),
    ) -> Result<Vec<MyRow>, BoxError> {
        let (write_params, read_params) = (bind(write, write_args)?, bind(read, read_args)?);
        let mut tx = self.0.start_transaction(TxOpts::default()).await?;
        tx.exec_drop(write.text(), write_params).await?;
        let rows: Vec<Row> = tx.exec(read.text(), read_params).await?;
        tx.commit().await?;
        Ok(rows.into_iter().map(MyRow).collect())
    }

    /// The rows matched from the OK packet's info (`Rows matched: N`,
    /// whatever `client_found_rows` says), or the rows affected without one.
    async fn execute_matched(
        &mut self,
        statement: &Statement,
        args: &Args<'_>,
    ) -> Result<Done, BoxError> {
        let done = lease_sql::Conn::execute(self, statement, args).await?;
        Ok(Done {
            rows_affected: lease_sql::mysql::rows_matched(&self.0.info())
                .unwrap_or(done.rows_affected),
            ..done
        })
    }
}

impl MySqlStore {
    /// A connection of the pool.
    pub(crate) async fn conn(&self) -> Result<mysql_async::Conn, mysql_async::Error> {
        self.inner.pool.get_conn().await
    }
}

/// A flow's error as the driver's: its own when it is one (a statement's,
/// a connection's), or wrapped (a row the flow could not decode).
pub(crate) fn driver_error(error: BoxError) -> mysql_async::Error {
    match error.downcast::<mysql_async::Error>() {
        Ok(own) => *own,
        Err(other) => mysql_async::Error::Other(other),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use lease_core::{ClaimRequest, LeaseStore, Token};
    use lease_sql::mysql::{Statements, default_table};

    use super::*;

    /// Every statement of the dialect, bound with the values its flow (or
    /// the guarded transaction) gives it: one positional value per `?`; a
    /// missing or extra role is refused.
    #[test]
    fn every_statement_binds_the_values_its_flow_gives() {
        lease_sql::testing::mysql(&mut |statement, args| {
            let count = match bind(statement, args)? {
                Params::Positional(values) => values.len(),
                Params::Empty => 0,
                Params::Named(_) => return Err("named parameters".into()),
            };
            if count == statement.text().matches('?').count() {
                Ok(())
            } else {
                Err(format!("{count} values for {}", statement.text()).into())
            }
        })
        .unwrap();
        let term = bind(
            &Statements::new(default_table()).force_release,
            &Args::new().name("n").term(u64::MAX),
        )
        .unwrap();
        assert_eq!(
            term,
            Params::Positional(vec!["n".into(), mysql_async::Value::UInt(u64::MAX)]),
            "a term binds unsigned"
        );
    }

    /// A rival's refused claims, many and concurrent, each left inside an
    /// open transaction (so any row lock it took would still be held), do
    /// not hold up the holder's renewal, nor each other. With a claim that
    /// locks the held row to refuse it (`INSERT ... ON DUPLICATE KEY
    /// UPDATE`), the rivals queue on the row and the renewal waits for the
    /// lock until InnoDB's lock-wait bound fails it.
    #[tokio::test]
    async fn refused_claims_in_open_transactions_do_not_hold_up_the_renewal() {
        let Some(url) = lease_conformance::env_url("LEASE_TEST_MYSQL_URL") else {
            return;
        };
        let table = "lm_refused_claim_locks";
        let store = MySqlStore::builder(&url)
            .unwrap()
            .with_table(table)
            .with_lock_wait_timeout(Duration::from_secs(1))
            .connect()
            .await
            .unwrap();
        let mut setup = store.inner.pool.get_conn().await.unwrap();
        setup
            .query_drop(format!("DROP TABLE IF EXISTS `{table}`"))
            .await
            .unwrap();
        store.migrate().await.unwrap();
        let term = LeaseStore::claim(
            &store,
            ClaimRequest {
                name: "held",
                token: Token::new("holder"),
                instance: "a",
                lease_ms: 60_000,
            },
        )
        .await
        .unwrap();
        assert_eq!(term, Some(1));

        let rivals: Vec<_> = (0..8)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    let mut conn = store.inner.pool.get_conn().await?;
                    conn.query_drop("START TRANSACTION").await?;
                    let rival = format!("rival-{i}");
                    let claim = ClaimRequest {
                        name: "held",
                        token: Token::new(&rival),
                        instance: "b",
                        lease_ms: 60_000,
                    };
                    let claimed =
                        lease_sql::mysql::claim(&mut MyConn(&mut conn), &store.inner.sql, &claim)
                            .await
                            .map_err(driver_error)?;
                    Ok::<_, mysql_async::Error>((conn, claimed))
                })
            })
            .collect();
        let mut settled = Vec::new();
        for rival in rivals {
            settled.push(rival.await.unwrap());
        }
        // Every rival's transaction is still open here.
        let renewed = LeaseStore::renew(&store, "held", Token::new("holder"), 60_000).await;
        let mut refused = Vec::new();
        for rival in settled {
            match rival {
                Ok((mut conn, claimed)) => {
                    let _ = conn.query_drop("ROLLBACK").await;
                    refused.push(format!("{claimed:?}"));
                }
                Err(e) => refused.push(format!("error: {e}")),
            }
        }
        // Best effort: a rival that failed left its transaction to the pool.
        let _ = setup
            .query_drop(format!("DROP TABLE IF EXISTS `{table}`"))
            .await;
        assert!(
            matches!(renewed, Ok(Some(_))),
            "the holder renews while the rivals' transactions are open: {renewed:?}"
        );
        assert!(
            refused.iter().all(|r| r == "None"),
            "every rival's claim is refused at once, none waits on another: {refused:?}"
        );
    }
}
