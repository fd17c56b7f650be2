//! MySQL and MariaDB: the protocol's statements, as `lease-mysql` and
//! `lease-sqlx`'s `MySqlLeaseStore` run them, the flows that run them on
//! any driver's [`MySqlConn`], and the session setup both stores give
//! their pools.
//!
//! Placeholders are `?`, bound in the order they stand (a value used four
//! times binds four times). The one thing formatted into a statement is
//! the validated, quoted table name.
//!
//! # Outcomes
//!
//! Outcomes are read from the OK packet's `last_insert_id`, never from the
//! rows-affected count: every write that succeeds calls `LAST_INSERT_ID(expr)`
//! with a positive value in an assignment only a matched row evaluates, so
//! the packet carries the term (or an outcome code) when the row matched,
//! and 0 (`None`) when it did not. This holds whatever the connection's
//! `CLIENT_FOUND_ROWS` setting is, and a renewal that writes the expiry it
//! already had (two renewals in one millisecond) still reads as held. A
//! driver must read it from the same statement's reply ([`Done`](crate::Done)).
//!
//! # Flows
//!
//! MySQL has no `RETURNING`. A claim is a plain (consistent, non-locking)
//! read, so that a claim refused because the name is held takes no row
//! lock and waits on none; then, for a free row, an update checked against
//! the term read (and the expiry, by the statement's own clock), or, for a
//! missing row, an insert that does nothing when a rival inserted first
//! (the row is then read again, [`CLAIM_ROUNDS`] times at most). The
//! instant claim reads the row, then inserts the name or takes the row
//! over. A batch renewal is one update, its reply saying how many rows it
//! matched and the database's now; only when it matched fewer than the
//! batch has leases does a read say which are held. A write
//! InnoDB picks as a deadlock victim (its statement rolled back whole) is
//! tried again, [`DEADLOCK_RETRIES`] times.

mod flows;
mod session;
mod statements;

use lease_core::{TableName, TableNameError, TableRules};

pub use flows::*;
pub use session::*;
pub use statements::Statements;

/// The database's clock in UTC milliseconds, read in the statement itself.
///
/// `UNIX_TIMESTAMP()` without an argument is the seconds since the epoch,
/// with no session time zone involved; the milliseconds of `NOW(3)` do not
/// depend on the time zone either. Both read the statement's start time, so
/// they cannot straddle a second boundary.
pub const NOW_MS: &str = "(UNIX_TIMESTAMP() * 1000 + MICROSECOND(NOW(3)) DIV 1000)";

/// What MySQL and MariaDB accept as the lease table: `table` or
/// `schema.table`, each part 1 to 64 ASCII letters, digits, `_` or `$`, not
/// all digits, quoted with backticks.
pub const TABLE_RULES: TableRules = TableRules {
    schema: true,
    max_bytes: 64,
    dollar: true,
    leading_digit: true,
    reserved_prefix: None,
    quote: '`',
};

/// Validates `name` as the lease table, under [`TABLE_RULES`].
///
/// # Errors
///
/// The rule `name` breaks.
pub fn table(name: &str) -> Result<TableName, TableNameError> {
    TableName::parse(name, &TABLE_RULES)
}

/// [`DEFAULT_TABLE`](crate::DEFAULT_TABLE), valid under every rule.
#[must_use]
pub fn default_table() -> TableName {
    crate::default_table(&TABLE_RULES)
}

/// The `last_insert_id` of `finish` when the holder still held the name.
pub const FINISH_RELEASED: u64 = 1;
/// The `last_insert_id` of `finish` when the end was recorded without the
/// lease.
pub const FINISH_WITHOUT_LEASE: u64 = 2;
/// The most names one search for unfinished instants binds; more are
/// searched in several statements.
pub const MAX_NAMES_PER_SEARCH: usize = 4096;
/// The most renewals one batch statement carries (three placeholders
/// each); more are renewed in several transactions.
pub const MAX_RENEWALS_PER_BATCH: usize = 1024;
/// How often a write that InnoDB chose as a deadlock victim is tried again
/// within the same call. The victim's statement was rolled back whole.
pub const DEADLOCK_RETRIES: usize = 2;
/// How many times a claim reads the row again after a rival inserted the
/// name between its read and its insert.
pub const CLAIM_ROUNDS: usize = 2;
/// InnoDB's deadlock error number.
const DEADLOCK: u16 = 1213;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_qualified_names_are_quoted() {
        assert_eq!(table("gst_leases").unwrap().quoted(), "`gst_leases`");
        let t = table("app.leases$1").unwrap();
        assert_eq!(t.quoted(), "`app`.`leases$1`");
        assert_eq!(t.schema(), Some("app"));
        assert_eq!(t.table(), "leases$1");
        assert_eq!(default_table().name(), crate::DEFAULT_TABLE);
    }

    #[test]
    fn bad_names_are_refused() {
        for bad in [
            "",
            "a.b.c",
            ".t",
            "t.",
            "le`ases",
            "le ases",
            "lease;DROP",
            "123",
            "é",
            &"x".repeat(65),
        ] {
            assert!(table(bad).is_err(), "{bad:?}");
        }
        assert!(table(&"x".repeat(64)).is_ok());
    }
}
