//! Every statement the store runs.
//!
//! Each statement is a function of the quoted table name only (or a `const`):
//! everything else is a bound parameter. The table name itself is validated
//! by [`table`] (ASCII letters, digits and underscores) before it is
//! quoted, so nothing a caller passes at run time is ever formatted into SQL.
//!
//! The clock is SQLite's, read in the statement itself ([`NOW`]). SQLite
//! reads `'now'` once per statement step, so every mention of [`NOW`] in a
//! statement sees the same instant.

use lease_core::{
    InstantClaim, InstantRecord, LeaseInfo, TableName, TableRules, Unfinished, UtcMillis,
};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params, params_from_iter};

use crate::error::SqliteError;

/// The lease table unless the builder names another: the specification's.
pub const DEFAULT_TABLE: &str = "gst_leases";

/// SQLite's clock in whole UTC milliseconds since the UNIX epoch.
///
/// `unixepoch('subsec')` is SQLite's millisecond clock divided by 1000.0; the
/// product is rounded, not truncated, so that a value such as
/// `1764463527.123 * 1000 = 1764463527122.9998` reads as `...123`.
pub(crate) const NOW: &str = "CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER)";

/// Reads the clock.
pub(crate) const SELECT_NOW: &str = "SELECT CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER)";

/// Asks for write-ahead logging; answers the journal mode in effect.
pub(crate) const JOURNAL_MODE_WAL: &str = "PRAGMA journal_mode = WAL";

/// Each commit synced (the default).
pub(crate) const SYNCHRONOUS_FULL: &str = "PRAGMA synchronous = FULL";

/// Commits synced at checkpoints only: see `Synchronous::Normal`.
pub(crate) const SYNCHRONOUS_NORMAL: &str = "PRAGMA synchronous = NORMAL";

/// What SQLite accepts as the lease table: a plain identifier, ASCII
/// letters, digits and underscores, not starting with a digit, at most 63
/// bytes (PostgreSQL's limit, so one name works on every backend), outside
/// SQLite's reserved `sqlite_` namespace; no schema.
pub(crate) const TABLE_RULES: TableRules = TableRules {
    schema: false,
    max_bytes: 63,
    dollar: false,
    leading_digit: false,
    reserved_prefix: Some("sqlite_"),
    quote: '"',
};

/// The lease table, validated under [`TABLE_RULES`].
pub(crate) type Table = TableName;

/// Validates `name` as the lease table.
pub(crate) fn table(name: &str) -> Result<Table, SqliteError> {
    TableName::parse(name, &TABLE_RULES).map_err(|e| SqliteError::InvalidTable {
        table: e.name,
        reason: e.reason,
    })
}

/// The statements of one table, formatted once when the store opens.
#[derive(Debug)]
pub(crate) struct Statements {
    pub(crate) table: Table,
    /// `CREATE TABLE IF NOT EXISTS`, see [`crate::schema`].
    pub(crate) create_table: String,
    /// Params: name, holder, instance, lease_ms. Returns the new term; no row
    /// when someone holds the name.
    pub(crate) claim: String,
    /// Params: name, holder, lease_ms. Rows changed: 1 held, 0 lost.
    pub(crate) renew: String,
    /// Params: name, holder. Returns the term while held.
    pub(crate) verify: String,
    /// Params: name, holder. Rows changed: 1 released, 0 already gone.
    pub(crate) release: String,
    /// Params: name. Returns term, slot_ms, unfinished_slot_ms,
    /// rerun_slot_ms, expired.
    pub(crate) slot_read: String,
    /// Params: name, holder, instance, slot_ms, lease_ms. Rows changed: 1
    /// inserted, 0 someone was first.
    pub(crate) slot_insert: String,
    /// Params: name, holder, instance, slot_ms, lease_ms, term read. Rows
    /// changed: 1 claimed, 0 someone was first.
    pub(crate) slot_update: String,
    /// Params: name, holder (NULL for none), slot_ms, passed_ms. Returns
    /// whether the holder branch applied; no row when nothing changed.
    pub(crate) finish: String,
    /// Params: name, term, holder, instance, lease_ms. Rows changed: 1 claimed.
    pub(crate) claim_rerun: String,
    /// Params: name. Returns slot_ms.
    pub(crate) last_instant: String,
    /// Params: name, term. Rows changed: 1 freed.
    pub(crate) force_release: String,
    /// Params: name. Returns the [`INFO_COLUMNS`].
    pub(crate) get: String,
    /// Params: prefix, limit. Returns the [`INFO_COLUMNS`] of the rows from
    /// the prefix on, by name.
    pub(crate) list: String,
}

impl Statements {
    pub(crate) fn new(table: Table) -> Self {
        let t = table.quoted();
        Statements {
            create_table: crate::schema::create_table(t),
            claim: claim(t),
            renew: renew(t),
            verify: verify(t),
            release: release(t),
            slot_read: slot_read(t),
            slot_insert: slot_insert(t),
            slot_update: slot_update(t),
            finish: finish(t),
            claim_rerun: claim_rerun(t),
            last_instant: last_instant(t),
            force_release: format!(
                "UPDATE {t} SET expires_at_ms = 0 \
                  WHERE name = ?1 AND term = ?2 AND expires_at_ms > {NOW}"
            ),
            get: format!("SELECT {INFO_COLUMNS} FROM {t} WHERE name = ?1"),
            // The column's collation is BINARY (memcmp): the names that
            // start with the prefix come first, and the caller keeps those.
            list: format!("SELECT {INFO_COLUMNS} FROM {t} WHERE name >= ?1 ORDER BY name LIMIT ?2"),
            table,
        }
    }
}

/// Claim, with its insert-if-absent, in one statement: the insert of a new
/// row, or the takeover of an expired one; `RETURNING` answers the term, and
/// nothing when the `DO UPDATE` condition refused (the name is held).
fn claim(t: &str) -> String {
    format!(
        "INSERT INTO {t} AS l (name, holder, instance, term, expires_at_ms, \
                               slot_ms, unfinished_slot_ms, rerun_slot_ms) \
         VALUES (?1, ?2, ?3, 1, {NOW} + ?4, 0, 0, 0) \
         ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
             instance = excluded.instance, term = l.term + 1, \
             expires_at_ms = excluded.expires_at_ms \
          WHERE l.expires_at_ms <= {NOW} \
         RETURNING term"
    )
}

fn renew(t: &str) -> String {
    format!(
        "UPDATE {t} SET expires_at_ms = {NOW} + ?3 \
          WHERE name = ?1 AND holder = ?2 AND expires_at_ms > {NOW} \
         RETURNING {NOW}"
    )
}

fn verify(t: &str) -> String {
    format!("SELECT term FROM {t} WHERE name = ?1 AND holder = ?2 AND expires_at_ms > {NOW}")
}

/// The guard for other drivers (`SqliteStore::guard_statement`): `?1 name,
/// ?2 holder, ?3 term` -> `term`, no row when lost. A write that changes
/// nothing, so that it takes the write lock even in a deferred transaction.
pub(crate) fn guard(t: &str) -> String {
    format!(
        "UPDATE {t} SET term = term \
          WHERE name = ?1 AND holder = ?2 AND term = ?3 AND expires_at_ms > {NOW} \
         RETURNING term"
    )
}

fn release(t: &str) -> String {
    format!("UPDATE {t} SET expires_at_ms = 0 WHERE name = ?1 AND holder = ?2")
}

fn slot_read(t: &str) -> String {
    format!(
        "SELECT term, slot_ms, unfinished_slot_ms, rerun_slot_ms, expires_at_ms <= {NOW} \
           FROM {t} WHERE name = ?1"
    )
}

fn slot_insert(t: &str) -> String {
    format!(
        "INSERT INTO {t} (name, holder, instance, term, expires_at_ms, \
                          slot_ms, unfinished_slot_ms, rerun_slot_ms) \
         VALUES (?1, ?2, ?3, 1, {NOW} + ?5, ?4, ?4, 0) \
         ON CONFLICT (name) DO NOTHING"
    )
}

fn slot_update(t: &str) -> String {
    format!(
        "UPDATE {t} SET holder = ?2, instance = ?3, term = term + 1, \
             expires_at_ms = {NOW} + ?5, slot_ms = ?4, unfinished_slot_ms = ?4 \
          WHERE name = ?1 AND term = ?6 AND expires_at_ms <= {NOW} AND slot_ms < ?4"
    )
}

/// Finish in one statement. The row matches either branch of the trait's
/// two statements: the holder's (`holder = ?2`: give the name back, take
/// `passed` along) or, failing that, the fallback's (`unfinished_slot_ms =
/// ?3`: record the end only). With no holder, `?2` is NULL and `holder = ?2`
/// is never true. `RETURNING` says which branch applied.
fn finish(t: &str) -> String {
    format!(
        "UPDATE {t} SET \
             expires_at_ms = CASE WHEN holder = ?2 THEN 0 ELSE expires_at_ms END, \
             slot_ms = CASE WHEN holder = ?2 AND ?4 > slot_ms AND ?4 <= {NOW} \
                            THEN ?4 ELSE slot_ms END, \
             unfinished_slot_ms = 0 \
          WHERE name = ?1 AND (holder = ?2 OR unfinished_slot_ms = ?3) \
         RETURNING coalesce(holder = ?2, 0)"
    )
}

/// Find the unfinished instants of `count` names (`count >= 1`) in one
/// statement: `name IN (?1, ..., ?count)`.
/// The batch renewal of `count` leases: `?1` the lease length, then
/// (name, holder) pairs; `RETURNING` names the rows renewed, with the
/// database's now.
pub(crate) fn renew_many(t: &str, count: usize) -> String {
    let mut pairs = String::with_capacity(12 * count);
    for i in 0..count {
        if i > 0 {
            pairs.push_str(", ");
        }
        pairs.push_str(&format!("(?{}, ?{})", 2 + 2 * i, 3 + 2 * i));
    }
    format!(
        "UPDATE {t} SET expires_at_ms = {NOW} + ?1 \
          WHERE (name, holder) IN (VALUES {pairs}) AND expires_at_ms > {NOW} \
         RETURNING name, holder, {NOW}"
    )
}

pub(crate) fn find_unfinished(t: &str, count: usize) -> String {
    let mut placeholders = String::with_capacity(count * 6);
    for i in 1..=count {
        if i > 1 {
            placeholders.push_str(", ");
        }
        placeholders.push('?');
        placeholders.push_str(&i.to_string());
    }
    format!(
        "SELECT name, term, slot_ms FROM {t} \
          WHERE name IN ({placeholders}) AND unfinished_slot_ms = slot_ms \
            AND rerun_slot_ms < slot_ms AND expires_at_ms <= {NOW}"
    )
}

fn claim_rerun(t: &str) -> String {
    format!(
        "UPDATE {t} SET holder = ?3, instance = ?4, term = term + 1, \
             expires_at_ms = {NOW} + ?5, rerun_slot_ms = slot_ms \
          WHERE name = ?1 AND term = ?2 AND unfinished_slot_ms = slot_ms \
            AND rerun_slot_ms < slot_ms AND expires_at_ms <= {NOW}"
    )
}

/// The columns `get` and `list` read, the database's now fifth (never the
/// holder token).
const INFO_COLUMNS: &str = "name, instance, term, expires_at_ms, \
     CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER), \
     slot_ms, unfinished_slot_ms, rerun_slot_ms";

fn last_instant(t: &str) -> String {
    format!("SELECT slot_ms FROM {t} WHERE name = ?1")
}

/// The most names one `find_unfinished` statement binds. SQLite refuses
/// statements with more than 32766 parameters; a longer list is answered by
/// one statement per this many names, all on the same call.
const MAX_NAMES_PER_STATEMENT: usize = 32_000;

/// The most leases one batch renewal statement binds (two parameters each).
const MAX_RENEWALS_PER_STATEMENT: usize = 8_192;

/// Reads a term: SQLite stores it as a (signed) INTEGER, never negative.
/// A row of `get` or `list`.
pub(crate) fn info(row: &rusqlite::Row<'_>) -> rusqlite::Result<LeaseInfo> {
    Ok(LeaseInfo {
        name: row.get(0)?,
        instance: row.get(1)?,
        term: term_at(row, 2)?,
        expires_at_ms: row.get(3)?,
        now_ms: row.get(4)?,
        slot_ms: row.get(5)?,
        unfinished_slot_ms: row.get(6)?,
        rerun_slot_ms: row.get(7)?,
    })
}

pub(crate) fn term_at(row: &rusqlite::Row<'_>, idx: usize) -> rusqlite::Result<u64> {
    let term: i64 = row.get(idx)?;
    u64::try_from(term).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(idx, term))
}

/// The row an instant claim reads before it writes.
struct SlotRow {
    term: i64,
    record: InstantRecord,
    expired: bool,
}

/// Claims an instant inside one `BEGIN IMMEDIATE` transaction: no other
/// connection writes between the read and the write, and the write still
/// compares the term it read.
pub(crate) fn claim_instant_in(
    conn: &mut Connection,
    sql: &Statements,
    args: (&str, &str, &str, i64, i64),
) -> rusqlite::Result<InstantClaim> {
    let (name, holder, instance, slot_ms, lease_ms) = args;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let row = tx
        .query_row(&sql.slot_read, [name], |row| {
            Ok(SlotRow {
                term: row.get(0)?,
                record: InstantRecord {
                    slot_ms: row.get(1)?,
                    unfinished_slot_ms: row.get(2)?,
                    rerun_slot_ms: row.get(3)?,
                },
                expired: row.get(4)?,
            })
        })
        .optional()?;
    let outcome = match row {
        None => {
            let inserted = tx
                .prepare_cached(&sql.slot_insert)?
                .execute(params![name, holder, instance, slot_ms, lease_ms])?;
            if inserted == 1 {
                InstantClaim::Claimed {
                    term: 1,
                    superseded: None,
                }
            } else {
                InstantClaim::Refused
            }
        }
        Some(row) if row.record.claimable(row.expired, slot_ms) => {
            let updated = tx
                .prepare_cached(&sql.slot_update)?
                .execute(params![name, holder, instance, slot_ms, lease_ms, row.term])?;
            if updated == 1 {
                InstantClaim::Claimed {
                    term: u64::try_from(row.term.saturating_add(1))
                        .map_err(|_| rusqlite::Error::IntegralValueOutOfRange(0, row.term))?,
                    superseded: row
                        .record
                        .superseded(name, u64::try_from(row.term).unwrap_or(0)),
                }
            } else {
                InstantClaim::Refused
            }
        }
        Some(_) => InstantClaim::Refused,
    };
    tx.commit()?;
    Ok(outcome)
}

/// The batch renewal: one `UPDATE ... RETURNING` per
/// [`MAX_RENEWALS_PER_STATEMENT`] leases (padded to a power of two by
/// repeating the last, so a few prepared statements serve every size),
/// answered in order from the rows it returned.
pub(crate) fn renew_many_in(
    conn: &Connection,
    sql: &Statements,
    leases: &[(String, String)],
    lease_ms: i64,
) -> rusqlite::Result<Vec<Option<i64>>> {
    let mut held = Vec::with_capacity(leases.len());
    for chunk in leases.chunks(MAX_RENEWALS_PER_STATEMENT) {
        let Some(last) = chunk.last() else { continue };
        let slots = chunk.len().next_power_of_two();
        let padded = chunk
            .iter()
            .chain(std::iter::repeat_n(last, slots - chunk.len()));
        let mut values: Vec<rusqlite::types::Value> = Vec::with_capacity(1 + 2 * slots);
        values.push(lease_ms.into());
        for (name, holder) in padded {
            values.push(name.clone().into());
            values.push(holder.clone().into());
        }
        let mut stmt = conn.prepare_cached(&renew_many(sql.table.quoted(), slots))?;
        let renewed = stmt
            .query_map(params_from_iter(values), |row| {
                Ok((
                    (row.get::<_, String>(0)?, row.get::<_, String>(1)?),
                    row.get::<_, i64>(2)?,
                ))
            })?
            .collect::<rusqlite::Result<std::collections::HashMap<_, _>>>()?;
        held.extend(chunk.iter().map(|lease| renewed.get(lease).copied()));
    }
    Ok(held)
}

pub(crate) fn find_unfinished_in(
    conn: &Connection,
    sql: &Statements,
    names: &[String],
) -> rusqlite::Result<Vec<Unfinished>> {
    let mut found = Vec::new();
    for chunk in names.chunks(MAX_NAMES_PER_STATEMENT) {
        let statement = find_unfinished(sql.table.quoted(), chunk.len());
        let mut stmt = conn.prepare(&statement)?;
        let rows = stmt.query_map(params_from_iter(chunk), |row| {
            Ok(Unfinished::new(
                row.get::<_, String>(0)?,
                UtcMillis::from_millis(row.get(2)?),
                false,
                term_at(row, 1)?,
            ))
        })?;
        for row in rows {
            found.push(row?);
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(name: &str) -> bool {
        matches!(table(name), Err(SqliteError::InvalidTable { .. }))
    }

    #[test]
    fn plain_identifiers_are_accepted_and_quoted() {
        for name in ["gst_leases", "_x", "Leases2", "a", &"x".repeat(63)] {
            let table = table(name).expect(name);
            assert_eq!(table.name(), name);
            assert_eq!(table.quoted(), format!("\"{name}\""));
        }
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

    #[test]
    fn find_unfinished_has_one_placeholder_per_name() {
        let sql = find_unfinished("\"t\"", 3);
        assert!(sql.contains("name IN (?1, ?2, ?3)"), "{sql}");
        assert!(find_unfinished("\"t\"", 1).contains("name IN (?1)"));
    }
}
