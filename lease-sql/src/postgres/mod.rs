//! PostgreSQL: the protocol's statements, as `lease-postgres` and
//! `lease-sqlx`'s `PgLeaseStore` run them, and the flows that run them on
//! any driver's [`Conn`](crate::Conn).
//!
//! Every value is a bound parameter (`$1`, `$2`, ...), cast to its type so
//! that a statement prepares the same way whatever the client binds. The one
//! formatted thing is the table name, validated by [`table`] and quoted.
//!
//! # The clock
//!
//! `{now}` is [`CLOCK_MS`]: `clock_timestamp()` (the time the expression is
//! evaluated, not the start of the transaction as `now()` would be), as
//! whole UTC milliseconds rounded down, the way
//! [`UtcMillis`](lease_core::UtcMillis) drops fractions. It never goes
//! through a session time zone: `extract(epoch ...)` of a `timestamptz` is
//! absolute. Every statement that needs it reads it **once**, in a
//! `MATERIALIZED` common table expression (`clock_timestamp()` is volatile,
//! so PostgreSQL would not fold it in anyway; `MATERIALIZED` says so
//! out loud), and compares and computes with that one value.
//!
//! # Row locks and fencing
//!
//! A guarded transaction reads the lease row `FOR KEY SHARE` and keeps that
//! lock until it ends. Every statement that can hand the name to someone
//! else (the claim, the instant claim, the second claim) first locks the
//! row it is about to take `FOR UPDATE`, which conflicts with
//! `FOR KEY SHARE`, and so waits for every guarded transaction still open
//! on the row. The holder's own renewals, releases and finishes are plain
//! `UPDATE`s of non-key columns: they take `FOR NO KEY UPDATE`, which does
//! not conflict with `FOR KEY SHARE`, so a guarded transaction never holds
//! up its own holder's renewals.
//!
//! A claim is therefore not an `INSERT ... ON CONFLICT DO UPDATE`: that
//! locks the conflicting row with the lock mode of a plain `UPDATE` of the
//! same columns, `FOR NO KEY UPDATE`, which lets a claim pass a
//! `FOR KEY SHARE` lock; and it locks the row even when its `WHERE` refuses
//! the update, so claimants of a held name would queue on its row (and hold
//! up the holder's renewals while they do). Instead each claim is one
//! statement of three parts: the explicit `FOR UPDATE` of the row, taken
//! only when it is claimable (expired, and for an instant claim, an earlier
//! instant on record); the `UPDATE` of that locked row; and the insert of a
//! name that has no row yet, `ON CONFLICT DO NOTHING`, which locks nothing.
//! A claim refused because the name is held takes no lock at all.
//!
//! # Flows
//!
//! Every operation of [`LeaseStore`](lease_core::LeaseStore) is one
//! statement here, so each flow is that statement and the decoding of its
//! answer.

mod flows;
mod statements;

use lease_core::{TableName, TableNameError, TableRules};

pub use flows::*;
pub use statements::{CONNECTION_CHECK_MS, Statements, migrate_lock_key};

/// The database's clock in whole UTC milliseconds, rounded down.
pub const CLOCK_MS: &str = "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/// What PostgreSQL accepts as the lease table: `table` or `schema.table`,
/// each part ASCII letters, digits and underscores, not starting with a
/// digit, at most 63 bytes (`NAMEDATALEN - 1`). Quoted in SQL, so case is
/// kept (`Leases` and `leases` are two tables).
pub const TABLE_RULES: TableRules = TableRules {
    schema: true,
    max_bytes: 63,
    dollar: false,
    leading_digit: false,
    reserved_prefix: None,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_are_validated_and_quoted() {
        assert_eq!(table("gst_leases").unwrap().quoted(), "\"gst_leases\"");
        assert_eq!(
            table("app.Leases_2").unwrap().quoted(),
            "\"app\".\"Leases_2\""
        );
        for bad in [
            "",
            "a.b.c",
            ".a",
            "a.",
            "1abc",
            "a-b",
            "a\"b",
            "a b",
            "é",
            &"x".repeat(64),
        ] {
            assert!(table(bad).is_err(), "{bad:?} accepted");
        }
        assert!(table(&"x".repeat(63)).is_ok());
        assert_eq!(default_table(), table(crate::DEFAULT_TABLE).unwrap());
    }
}
