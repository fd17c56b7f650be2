//! The SQL texts of the store, for other drivers' implementations of the
//! same protocol (`lease-sqlx`). Not a stable interface: the texts follow
//! this crate's version.
//!
//! The store binds its statements by name (`:name`); most drivers bind by
//! position (`?`). Each [`Statement`] here is the store's own text with its
//! named parameters turned into `?`, and the names in the order they bind
//! (a name used twice binds twice): rendered from the same constants as the
//! store's, so the two never drift. How the store reads each outcome (the
//! OK packet's `last_insert_id`, per connection) is in `sql.rs`: a driver
//! must read it from the same statement's reply.

use std::time::Duration;

use lease_core::{TableName, Timings};

use crate::error::MySqlError;
use crate::schema::{self, Found};
use crate::sql::{self, Statements};

/// One statement with positional parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Statement {
    /// The text, `?` for each parameter.
    pub sql: String,
    /// The parameters' names, in the order they bind.
    pub params: Vec<&'static str>,
}

/// The parameter names the statements use.
const NAMES: [&str; 11] = [
    "name",
    "holder",
    "instance",
    "lease_ms",
    "term",
    "slot",
    "passed",
    "prefix",
    "row_limit",
    "schema",
    "table",
];

impl Statement {
    /// `named` with every `:name` turned into `?`, the names recorded.
    fn positional(named: &str) -> Statement {
        let mut sql = String::with_capacity(named.len());
        let mut params = Vec::new();
        let mut rest = named;
        while let Some(at) = rest.find(':') {
            sql.push_str(&rest[..at]);
            let after = &rest[at + 1..];
            let len = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            match NAMES.iter().find(|n| **n == &after[..len]) {
                Some(name) if len > 0 => {
                    sql.push('?');
                    params.push(*name);
                    rest = &after[len..];
                }
                _ => {
                    sql.push(':');
                    rest = after;
                }
            }
        }
        sql.push_str(rest);
        Statement { sql, params }
    }
}

/// Every statement of the store for one table.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SqlTexts {
    statements: Statements,
    name: TableName,
    /// `name` -> `term, expired` (a plain read: no lock).
    pub claim_read: Statement,
    /// The claim of a free row read with `term`: `last_insert_id` = the new
    /// term, 0 when refused.
    pub claim_take: Statement,
    /// The claim of a missing name: `last_insert_id` = 1 when inserted, 0
    /// when a rival inserted first (read again).
    pub claim_insert: Statement,
    /// `last_insert_id` = the database's now when held, 0 when lost.
    pub renew: Statement,
    /// -> `term` (no row: not held).
    pub verify: Statement,
    /// The guard statement: `? name, ? holder, ? term` -> `term`, no row
    /// when lost.
    pub guard: String,
    /// `last_insert_id` = the term when released, 0 when not held.
    pub release: Statement,
    /// -> `term, slot_ms, unfinished_slot_ms, rerun_slot_ms, expired`.
    pub slot_read: Statement,
    /// `last_insert_id` = the new term, 0 when refused.
    pub slot_update: Statement,
    /// `last_insert_id` = 1 when inserted, 0 when someone was first.
    pub slot_insert: Statement,
    /// `last_insert_id` = [`FINISH_RELEASED`], [`FINISH_WITHOUT_LEASE`] or
    /// 0 (not recorded). `holder` is NULL when the handle is known lost.
    pub finish: Statement,
    /// `last_insert_id` = the new term, 0 when refused.
    pub claim_rerun: Statement,
    /// -> `slot_ms`.
    pub last_instant: Statement,
    /// -> `name, instance, term, expires_at_ms, now, slot_ms,
    /// unfinished_slot_ms, rerun_slot_ms` (name binary).
    pub get: Statement,
    /// `last_insert_id` = the term when freed, 0 when not.
    pub force_release: Statement,
    /// The columns of `get`, by name from `prefix` on.
    pub list: Statement,
    /// `CREATE TABLE IF NOT EXISTS` of the table.
    pub create_table: String,
    /// The table's columns (`schema`, NULL for the connection's database;
    /// `table`) -> `COLUMN_NAME, DATA_TYPE, EXTRA`: see [`check_columns`].
    pub table_columns: Statement,
    /// The table's triggers (`schema`, `table`) -> `TRIGGER_NAME`: see
    /// [`check_triggers`].
    pub table_triggers: Statement,
    /// `SELECT <now>`.
    pub now: &'static str,
}

impl SqlTexts {
    /// The texts for `table` (validated as the store's builder validates it).
    ///
    /// # Errors
    ///
    /// [`MySqlError::InvalidTableName`] for a name the store would refuse.
    pub fn for_table(table: &str) -> Result<Self, MySqlError> {
        let name = schema::table_name(table)?;
        let s = Statements::new(name.quoted());
        let p = |sql: &str| Statement::positional(sql);
        Ok(SqlTexts {
            claim_read: p(&s.claim_read),
            claim_take: p(&s.claim_take),
            claim_insert: p(&s.claim_insert),
            renew: p(&s.renew),
            verify: p(&s.verify),
            guard: s.guard.clone(),
            release: p(&s.release),
            slot_read: p(&s.slot_read),
            slot_update: p(&s.slot_update),
            slot_insert: p(&s.slot_insert),
            finish: p(&s.finish),
            claim_rerun: p(&s.claim_rerun),
            last_instant: p(&s.last_instant),
            get: p(&s.get),
            force_release: p(&s.force_release),
            list: p(&s.list),
            create_table: s.create_table.clone(),
            table_columns: p(schema::TABLE_COLUMNS),
            table_triggers: p(schema::TABLE_TRIGGERS),
            now: sql::NOW,
            statements: s,
            name,
        })
    }

    /// The table's name, validated: its `schema()` (`None` for the
    /// connection's database) and `table()` are the parameters of
    /// `table_columns` and `table_triggers`.
    #[must_use]
    pub fn table_name(&self) -> &TableName {
        &self.name
    }

    /// The batch renewal of `slots` leases (round up to a power of two,
    /// repeating the last pair), and the read of which are held after it,
    /// to run in one transaction: the update binds `lease_ms`, then `slots`
    /// names, then `slots` (name, holder) pairs; the read the names and the
    /// pairs, and returns `name, holder, now` (binary name and holder).
    #[must_use]
    pub fn renew_many(&self, slots: usize) -> (String, String) {
        self.statements.renew_many(slots)
    }

    /// The search for unfinished instants of `slots` names (round up to a
    /// power of two, repeating a name) -> `name, term, slot_ms`.
    #[must_use]
    pub fn find_unfinished(&self, slots: usize) -> String {
        self.statements.find_unfinished(slots)
    }
}

/// The `last_insert_id` of `finish` when the holder still held the name.
pub const FINISH_RELEASED: u64 = sql::FINISH_RELEASED;
/// The `last_insert_id` of `finish` when the end was recorded without the
/// lease.
pub const FINISH_WITHOUT_LEASE: u64 = sql::FINISH_WITHOUT_LEASE;
/// The most renewals one batch carries.
pub const MAX_RENEWALS_PER_BATCH: usize = crate::store::MAX_RENEWALS_PER_BATCH;
/// The most names one search for unfinished instants binds.
pub const MAX_NAMES_PER_SEARCH: usize = crate::store::MAX_NAMES_PER_SEARCH;
/// How often a write chosen as a deadlock victim (1213) is tried again.
pub const DEADLOCK_RETRIES: usize = sql::DEADLOCK_RETRIES;
/// How many times a claim reads the row again after a rival inserted the
/// name between its read and its insert.
pub const CLAIM_ROUNDS: usize = sql::CLAIM_ROUNDS;

/// The session setup statement of the store's own pool for these bounds
/// (see `MySqlStoreBuilder::session_setup`).
///
/// # Errors
///
/// What is out of range (a lock-wait bound under 1 s).
pub fn session_setup(
    lock_wait: Duration,
    statement: Option<Duration>,
    idle_transaction: Option<Duration>,
) -> Result<String, String> {
    sql::session_setup_for(lock_wait, statement, idle_transaction)
}

/// The session setup for the bounds derived from `timings`, as
/// `MySqlStoreBuilder::with_timings` sets them: lock wait
/// [`Timings::lock_wait_timeout`], statements
/// [`Timings::statement_timeout`], idle in a transaction (MariaDB)
/// [`Timings::deadline`].
#[must_use]
pub fn timings_setup(timings: &Timings) -> String {
    let (lock_wait, statement, idle) = sql::timings_bounds(timings);
    sql::session_setup_secs(lock_wait.as_secs(), statement, idle)
}

/// What kind of failure a MySQL or MariaDB server error number is, as this
/// crate's store classifies it.
#[must_use]
pub fn server_error_kind(code: u16) -> lease_core::DbErrorKind {
    crate::error::server_error_kind(code)
}

/// What the rows of `table_columns` say of the table: `Ok(false)` it does
/// not exist, `Ok(true)` its columns can carry leases (check the triggers
/// next), `Err` why it cannot.
///
/// # Errors
///
/// As above.
pub fn check_columns(columns: &[(String, String, String)]) -> Result<bool, String> {
    verdict(schema::judge_columns(columns))
}

/// What the rows of `table_triggers` say: `Err` when a trigger disturbs the
/// statements' outcomes.
///
/// # Errors
///
/// As above.
pub fn check_triggers(triggers: &[String]) -> Result<(), String> {
    verdict(schema::judge_triggers(triggers)).map(|_| ())
}

fn verdict(found: Found) -> Result<bool, String> {
    match found {
        Found::Missing => Ok(false),
        Found::Usable => Ok(true),
        Found::Incompatible(reason) => Err(reason),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every positional text is the store's named text with `?` for its
    /// parameters, in the recorded order, and nothing else changed.
    #[test]
    fn positional_texts_are_the_stores_own() {
        let t = SqlTexts::for_table("app.t1").unwrap();
        let s = Statements::new("`app`.`t1`");
        let pairs = [
            (&t.claim_read, &s.claim_read),
            (&t.claim_take, &s.claim_take),
            (&t.claim_insert, &s.claim_insert),
            (&t.renew, &s.renew),
            (&t.verify, &s.verify),
            (&t.release, &s.release),
            (&t.slot_read, &s.slot_read),
            (&t.slot_update, &s.slot_update),
            (&t.slot_insert, &s.slot_insert),
            (&t.finish, &s.finish),
            (&t.claim_rerun, &s.claim_rerun),
            (&t.last_instant, &s.last_instant),
            (&t.get, &s.get),
            (&t.force_release, &s.force_release),
            (&t.list, &s.list),
        ];
        for (positional, named) in pairs {
            assert!(!positional.sql.contains(':'), "{}", positional.sql);
            assert_eq!(
                positional.sql.matches('?').count(),
                positional.params.len(),
                "{}",
                positional.sql
            );
            let mut back = String::new();
            let mut names = positional.params.iter();
            for (i, part) in positional.sql.split('?').enumerate() {
                if i > 0 {
                    back.push(':');
                    back.push_str(names.next().unwrap());
                }
                back.push_str(part);
            }
            assert_eq!(&back, named);
        }
        assert_eq!(t.claim_take.params.first(), Some(&"holder"));
        assert_eq!(
            t.finish.params.iter().filter(|p| **p == "holder").count(),
            4,
            "a name used four times binds four times: {}",
            t.finish.sql
        );
        assert_eq!(t.table_columns.params, ["schema", "table"]);
        assert_eq!(
            (t.table_name().schema(), t.table_name().table()),
            (Some("app"), "t1")
        );
        assert_eq!(t.guard, s.guard);
    }

    #[test]
    fn a_colon_that_is_no_parameter_stays() {
        let s = Statement::positional("SELECT ':x', a::b, :name, :nope");
        assert_eq!(s.sql, "SELECT ':x', a::b, ?, :nope");
        assert_eq!(s.params, ["name"]);
    }

    #[test]
    fn bad_tables_and_bounds_are_refused() {
        assert!(SqlTexts::for_table("le`ases").is_err());
        assert!(session_setup(Duration::from_millis(500), None, None).is_err());
        let setup = session_setup(
            Duration::from_secs(2),
            Some(Duration::from_millis(1500)),
            Some(Duration::from_millis(2500)),
        )
        .unwrap();
        assert!(setup.contains("innodb_lock_wait_timeout = 2"), "{setup}");
        assert!(setup.contains("max_statement_time = 1.500"), "{setup}");
        assert!(setup.contains("idle_transaction_timeout = 3"), "{setup}");
    }

    #[test]
    fn table_verdicts() {
        let col = |n: &str, t: &str, e: &str| (n.to_owned(), t.to_owned(), e.to_owned());
        assert_eq!(check_columns(&[]), Ok(false));
        let mut cols: Vec<_> = schema::COLUMNS
            .iter()
            .map(|c| col(c, if *c == "name" { "varbinary" } else { "bigint" }, ""))
            .collect();
        assert_eq!(check_columns(&cols), Ok(true));
        cols.push(col("id", "int", "auto_increment"));
        assert!(check_columns(&cols).unwrap_err().contains("AUTO_INCREMENT"));
        assert!(check_triggers(&["t".to_owned()]).is_err());
        assert!(check_triggers(&[]).is_ok());
    }
}
