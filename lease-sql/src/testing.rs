//! For a driver's tests (feature `test-util`): every statement of a
//! dialect handed to the driver's bind function with the values the flows
//! give it.

use std::collections::HashSet;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use lease_core::{BoxError, ClaimRequest, FinishRequest, Token};

use crate::conn::{Conn, Done, Row};
use crate::statement::{Args, Statement};
use crate::{mysql, postgres, sqlite};

/// A driver's bind function: `Ok` when it bound the statement's values.
pub type Bind<'b> = dyn FnMut(&Statement, &Args<'_>) -> Result<(), BoxError> + Send + 'b;

/// Runs every flow of [`crate::postgres`] (each statement answering no row,
/// then one row), handing each statement and the values the flow gives it
/// to `bind`; then the statements the store runs outside the flows, with
/// the values `lease-postgres` gives them. `Err` names the first statement
/// `bind` refused, or one that no flow ran.
///
/// ```
/// lease_sql::testing::postgres(&mut |statement, args| {
///     let values = statement.values(args)?;
///     assert_eq!(values.len(), statement.params().len());
///     Ok(())
/// })?;
/// # Ok::<(), lease_core::BoxError>(())
/// ```
///
/// # Errors
///
/// As above.
pub fn postgres(bind: &mut Bind<'_>) -> Result<(), BoxError> {
    let sql = postgres::Statements::new(postgres::default_table());
    let mut bound = HashSet::new();
    for rows in [false, true] {
        let mut conn = Recorder::new(bind, rows);
        let c = &mut conn;
        let (claim, finish, leases, names) = (claim(), finish(), leases(), ["a", "b"]);
        let _ = ready(postgres::claim(c, &sql, &claim));
        let _ = ready(postgres::renew(c, &sql, "n", TOKEN, 1));
        let _ = ready(postgres::renew_many(c, &sql, &leases, 1));
        let _ = ready(postgres::verify(c, &sql, "n", TOKEN));
        let _ = ready(postgres::release(c, &sql, "n", TOKEN));
        let _ = ready(postgres::claim_instant(c, &sql, &claim, 5));
        let _ = ready(postgres::finish(c, &sql, &finish));
        let _ = ready(postgres::find_unfinished(c, &sql, &names));
        let _ = ready(postgres::claim_rerun(c, &sql, &claim, 3));
        let _ = ready(postgres::last_instant(c, &sql, "n"));
        let _ = ready(postgres::force_release(c, &sql, "n", 3));
        let _ = ready(postgres::request_resign(c, &sql, "n", 3));
        let _ = ready(postgres::get(c, &sql, "n"));
        let _ = ready(postgres::list(c, &sql, "p", 3));
        let _ = ready(postgres::now_ms(c, &sql));
        let _ = ready(postgres::inspect(c, &sql));
        // The guarded transaction's, the guard's and migrate's.
        let guard = Args::new().name("n").token(TOKEN).term(3);
        c.record(&sql.verify_locked, &guard.idle_ms("10000"));
        c.record(&sql.guard, &guard);
        c.record(
            &sql.migrate_lock,
            &Args::new().lock_key(sql.migrate_lock_key),
        );
        c.record(&sql.create_table, &Args::new());
        c.record(&sql.add_resign_column, &Args::new());
        bound.extend(conn.finish()?);
    }
    every(&bound, sql.all())
}

/// [`postgres()`] for [`crate::mysql`]'s flows, its connection's batch
/// transaction and `lease-mysql`'s guarded transaction and guard.
///
/// # Errors
///
/// As [`postgres()`].
pub fn mysql(bind: &mut Bind<'_>) -> Result<(), BoxError> {
    let sql = mysql::Statements::new(mysql::default_table());
    let mut bound = HashSet::new();
    for rows in [false, true] {
        let mut conn = Recorder::new(bind, rows);
        let c = &mut conn;
        let (claim, finish, leases, names) = (claim(), finish(), leases(), ["a", "b"]);
        let _ = ready(mysql::claim(c, &sql, &claim));
        let _ = ready(mysql::renew(c, &sql, "n", TOKEN, 1));
        let _ = ready(mysql::renew_many(c, &sql, &leases, 1));
        let _ = ready(mysql::verify(c, &sql, "n", TOKEN));
        let _ = ready(mysql::release(c, &sql, "n", TOKEN));
        let _ = ready(mysql::claim_instant(c, &sql, &claim, 5));
        let _ = ready(mysql::finish(c, &sql, &finish));
        let _ = ready(mysql::find_unfinished(c, &sql, &names));
        let _ = ready(mysql::claim_rerun(c, &sql, &claim, 3));
        let _ = ready(mysql::last_instant(c, &sql, "n"));
        let _ = ready(mysql::force_release(c, &sql, "n", 3));
        let _ = ready(mysql::request_resign(c, &sql, "n", 3));
        let _ = ready(mysql::get(c, &sql, "n"));
        let _ = ready(mysql::list(c, &sql, "p", 3));
        let _ = ready(mysql::now_ms(c, &sql));
        let _ = ready(mysql::migrate(c, &sql));
        c.record(&sql.add_resign_column, &Args::new());
        c.record(&sql.verify_locked, &Args::new().name("n").token(TOKEN));
        c.record(&sql.guard, &Args::new().name("n").token(TOKEN).term(3));
        // Read only of a table whose columns are all there.
        let table = sql.table();
        let place = Args::new().schema(table.schema()).table_name(table.table());
        c.record(&sql.table_triggers, &place);
        bound.extend(conn.finish()?);
    }
    every(&bound, sql.all())
}

/// [`postgres()`] for [`crate::sqlite`]'s flows (the instant claim's
/// transaction included) and `lease-sqlite`'s guarded transaction, guard
/// and table inspection.
///
/// # Errors
///
/// As [`postgres()`].
pub fn sqlite(bind: &mut Bind<'_>) -> Result<(), BoxError> {
    let sql = sqlite::Statements::new(sqlite::default_table());
    let mut bound = HashSet::new();
    for rows in [false, true] {
        let mut conn = Recorder::new(bind, rows);
        let c = &mut conn;
        let (claim, finish, leases, names) = (claim(), finish(), leases(), ["a", "b"]);
        let _ = ready(sqlite::claim(c, &sql, &claim));
        let _ = ready(sqlite::renew(c, &sql, "n", TOKEN, 1));
        let _ = ready(sqlite::renew_many(c, &sql, &leases, 1));
        let _ = ready(sqlite::verify(c, &sql, "n", TOKEN));
        let _ = ready(sqlite::release(c, &sql, "n", TOKEN));
        let _ = ready(sqlite::claim_instant(c, &sql, &claim, 5));
        let _ = ready(sqlite::finish(c, &sql, &finish));
        let _ = ready(sqlite::find_unfinished(c, &sql, &names));
        let _ = ready(sqlite::claim_rerun(c, &sql, &claim, 3));
        let _ = ready(sqlite::last_instant(c, &sql, "n"));
        let _ = ready(sqlite::force_release(c, &sql, "n", 3));
        let _ = ready(sqlite::request_resign(c, &sql, "n", 3));
        let _ = ready(sqlite::get(c, &sql, "n"));
        let _ = ready(sqlite::list(c, &sql, "p", 3));
        let _ = ready(sqlite::now_ms(c, &sql));
        c.record(&sql.guard, &Args::new().name("n").token(TOKEN).term(3));
        c.record(&sql.create_table, &Args::new());
        c.record(&sql.add_resign_column, &Args::new());
        let place = Args::new().table_name(sql.table().name());
        c.record(&sql.table_columns, &place);
        c.record(&sql.name_indexes, &place);
        bound.extend(conn.finish()?);
    }
    every(&bound, sql.all())
}

const TOKEN: Token<'static> = Token::new("t0k3n");

fn claim() -> ClaimRequest<'static> {
    ClaimRequest {
        name: "n",
        token: TOKEN,
        instance: "i",
        lease_ms: 1,
    }
}

fn finish() -> FinishRequest<'static> {
    FinishRequest {
        name: "n",
        token: None,
        instant_ms: 5,
        passed_ms: 6,
    }
}

fn leases() -> [(&'static str, Token<'static>); 2] {
    [("a", TOKEN), ("b", TOKEN)]
}

/// `Err` naming a statement of `all` that is not in `bound`.
fn every(bound: &HashSet<String>, all: Vec<&Statement>) -> Result<(), BoxError> {
    match all.into_iter().find(|s| !bound.contains(s.text())) {
        Some(missed) => Err(format!("no flow ran {}", missed.text()).into()),
        None => Ok(()),
    }
}

/// Polls `flow` once: the recorder's futures are ready when made.
fn ready<T>(flow: impl Future<Output = T>) -> Option<T> {
    match pin!(flow).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(done) => Some(done),
        Poll::Pending => None,
    }
}

/// A connection that binds each statement with the driver's function and
/// answers no row, or one row of ones.
struct Recorder<'r, 'b> {
    bind: &'r mut Bind<'b>,
    rows: bool,
    bound: HashSet<String>,
    refused: Option<String>,
}

impl<'r, 'b> Recorder<'r, 'b> {
    fn new(bind: &'r mut Bind<'b>, rows: bool) -> Self {
        Recorder {
            bind,
            rows,
            bound: HashSet::new(),
            refused: None,
        }
    }

    fn record(&mut self, statement: &Statement, args: &Args<'_>) {
        if let Err(e) = (self.bind)(statement, args) {
            let _ = self.refused.get_or_insert_with(|| e.to_string());
        }
        let _ = self.bound.insert(statement.text().to_owned());
    }

    fn finish(self) -> Result<HashSet<String>, BoxError> {
        match self.refused {
            Some(refused) => Err(refused.into()),
            None => Ok(self.bound),
        }
    }

    fn answer(&self) -> Vec<Ones> {
        if self.rows { vec![Ones] } else { Vec::new() }
    }
}

/// A row whose every column reads as one (`1`, `true`, `"1"`).
struct Ones;

impl Row for Ones {
    fn int(&self, _: usize) -> Result<i64, BoxError> {
        Ok(1)
    }

    fn nullable_int(&self, _: usize) -> Result<Option<i64>, BoxError> {
        Ok(Some(1))
    }

    fn flag(&self, _: usize) -> Result<bool, BoxError> {
        Ok(true)
    }

    fn text(&self, _: usize) -> Result<String, BoxError> {
        Ok("1".to_owned())
    }
}

impl Conn for Recorder<'_, '_> {
    type Row = Ones;

    fn rows(
        &mut self,
        statement: &Statement,
        args: &Args<'_>,
    ) -> impl Future<Output = Result<Vec<Ones>, BoxError>> + Send {
        self.record(statement, args);
        std::future::ready(Ok(self.answer()))
    }

    fn execute(
        &mut self,
        statement: &Statement,
        args: &Args<'_>,
    ) -> impl Future<Output = Result<Done, BoxError>> + Send {
        self.record(statement, args);
        std::future::ready(Ok(Done {
            rows_affected: 1,
            last_insert_id: 1,
        }))
    }
}

impl mysql::MySqlConn for Recorder<'_, '_> {
    fn error_number(_: &(dyn std::error::Error + 'static)) -> Option<u16> {
        None
    }

    fn write_then_read(
        &mut self,
        (write, write_args): (&Statement, &Args<'_>),
        (read, read_args): (&Statement, &Args<'_>),
    ) -> impl Future<Output = Result<Vec<Ones>, BoxError>> + Send {
        self.record(write, write_args);
        self.record(read, read_args);
        std::future::ready(Ok(self.answer()))
    }

    fn execute_matched(
        &mut self,
        statement: &Statement,
        args: &Args<'_>,
    ) -> impl Future<Output = Result<Done, BoxError>> + Send {
        self.execute(statement, args)
    }
}

impl sqlite::SqliteConn for Recorder<'_, '_> {
    fn begin_immediate(&mut self) -> impl Future<Output = Result<(), BoxError>> + Send {
        std::future::ready(Ok(()))
    }

    fn commit(&mut self) -> impl Future<Output = Result<(), BoxError>> + Send {
        std::future::ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(statement: &Statement, args: &Args<'_>) -> Result<(), BoxError> {
        let _ = statement.values(args)?;
        Ok(())
    }

    /// The flows give every statement exactly the values it binds.
    #[test]
    fn every_flow_gives_its_statements_their_values() {
        postgres(&mut values).unwrap();
        mysql(&mut values).unwrap();
        sqlite(&mut values).unwrap();
    }

    #[test]
    fn a_refusal_is_reported() {
        let mut refuse = |s: &Statement, _: &Args<'_>| -> Result<(), BoxError> {
            if s.text().starts_with("SELECT slot_ms") {
                Err("refused".into())
            } else {
                Ok(())
            }
        };
        assert!(sqlite(&mut refuse).is_err());
    }
}
