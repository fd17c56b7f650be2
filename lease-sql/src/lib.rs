#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod common;
mod conn;
pub mod mysql;
pub mod postgres;
pub mod sqlite;
mod statement;
#[cfg(any(test, feature = "test-util"))]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub mod testing;

pub use conn::{Conn, Done, Row};
pub use statement::{Args, BindError, Param, SqlType, Statement, Template, Value};

/// The table the specification names, used unless a store is given
/// another: the same on every dialect.
pub const DEFAULT_TABLE: &str = "gst_leases";

/// The columns the statements read and write, on every dialect, but for
/// those added since the first schema ([`ADDED_COLUMNS`]): a table without
/// one of these cannot carry leases.
pub const COLUMNS: [&str; 8] = [
    "name",
    "holder",
    "instance",
    "term",
    "expires_at_ms",
    "slot_ms",
    "unfinished_slot_ms",
    "rerun_slot_ms",
];

/// The columns added since the first schema: `resign_term` (the term whose
/// holder is asked to resign, 0 for none). `migrate` adds them to a table
/// that lacks them ([`Found::Outdated`]).
pub const ADDED_COLUMNS: [&str; 1] = ["resign_term"];

/// What a store finds of an existing lease table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// There is no such table.
    Missing,
    /// The table can carry leases.
    Usable,
    /// The table has every column of [`COLUMNS`] but lacks one of
    /// [`ADDED_COLUMNS`] (it was created by an earlier version):
    /// `migrate` adds it.
    Outdated,
    /// The table exists but cannot carry leases, for this reason.
    Incompatible(String),
}

impl Found {
    /// [`Found::Incompatible`] when a column of [`COLUMNS`] is missing from
    /// `have` (compared by `same`), [`Found::Outdated`] when one of
    /// [`ADDED_COLUMNS`] is, [`Found::Usable`] otherwise.
    ///
    /// ```
    /// use lease_sql::{ADDED_COLUMNS, COLUMNS, Found};
    ///
    /// let first: Vec<String> = COLUMNS.iter().map(|c| c.to_uppercase()).collect();
    /// assert_eq!(Found::columns(&first, str::eq_ignore_ascii_case), Found::Outdated);
    /// let all: Vec<String> = first.iter().cloned().chain(ADDED_COLUMNS.map(String::from)).collect();
    /// assert_eq!(Found::columns(&all, str::eq_ignore_ascii_case), Found::Usable);
    /// assert_eq!(
    ///     Found::columns(&all[1..], str::eq_ignore_ascii_case),
    ///     Found::Incompatible("it lacks the column(s) name".to_owned())
    /// );
    /// ```
    pub fn columns<S: AsRef<str>>(have: &[S], same: impl Fn(&str, &str) -> bool) -> Found {
        let lacks = |c: &&str| !have.iter().any(|h| same(h.as_ref(), c));
        let missing: Vec<&str> = COLUMNS.into_iter().filter(lacks).collect();
        if !missing.is_empty() {
            Found::Incompatible(format!("it lacks the column(s) {}", missing.join(", ")))
        } else if ADDED_COLUMNS.iter().any(lacks) {
            Found::Outdated
        } else {
            Found::Usable
        }
    }
}

/// `name` parsed under `rules`, which accept every plain identifier.
fn default_table(rules: &lease_core::TableRules) -> lease_core::TableName {
    match lease_core::TableName::parse(DEFAULT_TABLE, rules) {
        Ok(table) => table,
        Err(_) => unreachable!("the default table name is a plain identifier"),
    }
}

/// A term as PostgreSQL's and SQLite's signed column stores it: `None`
/// past `i64::MAX`, a term no row can hold.
///
/// ```
/// assert_eq!(lease_sql::term_param(7), Some(7));
/// assert_eq!(lease_sql::term_param(u64::MAX), None);
/// ```
#[must_use]
pub fn term_param(term: u64) -> Option<i64> {
    i64::try_from(term).ok()
}
