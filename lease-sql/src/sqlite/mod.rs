//! SQLite: the protocol's statements, as `lease-sqlite` and `lease-sqlx`'s
//! `SqliteLeaseStore` run them, and the flows that run them on any
//! driver's [`SqliteConn`].
//!
//! Each statement is rendered for the quoted table name only: everything
//! else is a bound parameter (`?1`, `?2`, ...). The table name itself is
//! validated by [`table`] (ASCII letters, digits and underscores) before it
//! is quoted, so nothing a caller passes at run time is ever formatted into
//! SQL.
//!
//! The clock is SQLite's, read in the statement itself ([`NOW`]). SQLite
//! reads `'now'` once per statement step, so every mention of [`NOW`] in a
//! statement sees the same instant.
//!
//! # Flows
//!
//! Every operation is one statement, except the instant claim: a read and
//! a write inside one `BEGIN IMMEDIATE` transaction, so that no other
//! connection writes between the two (and the write still compares the
//! term it read). A batch renewal or a search for unfinished instants too
//! long for one statement is split into several, all on the same
//! connection.

mod flows;
mod statements;

use lease_core::{TableName, TableNameError, TableRules};

pub use flows::*;
pub use statements::{Statements, create_table};

/// SQLite's clock in whole UTC milliseconds since the UNIX epoch.
///
/// `unixepoch('subsec')` is SQLite's millisecond clock divided by 1000.0; the
/// product is rounded, not truncated, so that a value such as
/// `1764463527.123 * 1000 = 1764463527122.9998` reads as `...123`.
pub const NOW: &str = "CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER)";

/// What SQLite accepts as the lease table: a plain identifier, ASCII
/// letters, digits and underscores, not starting with a digit, at most 63
/// bytes (PostgreSQL's limit, so one name works on every backend), outside
/// SQLite's reserved `sqlite_` namespace; no schema.
pub const TABLE_RULES: TableRules = TableRules {
    schema: false,
    max_bytes: 63,
    dollar: false,
    leading_digit: false,
    reserved_prefix: Some("sqlite_"),
    quote: '"',
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

/// The most names one search for unfinished instants binds (padded to a
/// power of two): SQLite refuses statements with more than 32766
/// parameters.
pub const MAX_NAMES_PER_STATEMENT: usize = 16_384;

/// The most leases one batch renewal statement binds (two parameters
/// each, padded to a power of two).
pub const MAX_RENEWALS_PER_STATEMENT: usize = 8_192;

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(name: &str) -> bool {
        table(name).is_err()
    }

    #[test]
    fn plain_identifiers_are_accepted_and_quoted() {
        for name in ["gst_leases", "_x", "Leases2", "a", &"x".repeat(63)] {
            let table = table(name).unwrap();
            assert_eq!(table.name(), name);
            assert_eq!(table.quoted(), format!("\"{name}\""));
        }
        assert_eq!(default_table().name(), crate::DEFAULT_TABLE);
    }

    #[test]
    fn anything_else_is_refused() {
        for name in [
            "",
            "1leases",
            "gst-leases",
            "gst leases",
            "gst\"leases",
            "leases;drop",
            "lé",
            "main.leases",
            &"x".repeat(64),
            "sqlite_leases",
            "SQLITE_x",
        ] {
            assert!(refused(name), "{name:?} was accepted");
        }
    }

    #[test]
    fn the_refusal_names_the_table_and_the_reason() {
        let err = table("9lives").unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"invalid lease table name "9lives": a schema or table name starts with a digit"#
        );
    }
}
