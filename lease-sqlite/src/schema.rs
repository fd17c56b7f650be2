//! The lease table.

use rusqlite::Connection;

use crate::error::SqliteError;
use crate::store::SqliteStore;

/// The table's DDL, for the quoted table name `t`.
///
/// `name` keeps SQLite's default `BINARY` collation, so names compare byte
/// for byte (`job`, `JOB` and `job ` are three rows). `WITHOUT ROWID` stores
/// the rows in the primary key's own b-tree: every statement looks a row up
/// by its name.
pub(crate) fn create_table(t: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {t} (\n\
         \x20   name TEXT NOT NULL PRIMARY KEY,\n\
         \x20   holder TEXT NOT NULL,\n\
         \x20   instance TEXT NOT NULL,\n\
         \x20   term INTEGER NOT NULL,\n\
         \x20   expires_at_ms INTEGER NOT NULL,\n\
         \x20   slot_ms INTEGER NOT NULL DEFAULT 0,\n\
         \x20   unfinished_slot_ms INTEGER NOT NULL DEFAULT 0,\n\
         \x20   rerun_slot_ms INTEGER NOT NULL DEFAULT 0\n\
         ) WITHOUT ROWID"
    )
}

/// The columns the statements read and write.
const COLUMNS: [&str; 8] = [
    "name",
    "holder",
    "instance",
    "term",
    "expires_at_ms",
    "slot_ms",
    "unfinished_slot_ms",
    "rerun_slot_ms",
];

/// The existing table's columns, by name.
const TABLE_COLUMNS: &str = "SELECT name FROM pragma_table_info(?1)";

/// The collation each index of the table gives its `name` key column, and
/// whether the index is unique and holds that column alone.
const NAME_INDEXES: &str = "SELECT il.name, ix.coll, il.\"unique\", \
     (SELECT count(*) FROM pragma_index_xinfo(il.name) AS k WHERE k.key = 1) \
     FROM pragma_index_list(?1) AS il JOIN pragma_index_xinfo(il.name) AS ix \
     WHERE ix.name = 'name' AND ix.key = 1";

/// What `migrate` finds of the table.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Found {
    /// There is no such table.
    Missing,
    /// The table can carry leases.
    Usable,
    /// The table exists but cannot carry leases, for this reason.
    Incompatible(String),
}

/// Inspects the existing table `table` (unquoted) without writing: every
/// column the statements use is there, and names compare byte for byte,
/// both where the statements compare them (the column's collation) and
/// where uniqueness is enforced (the collation of every index on `name`).
/// A `name` column declared `COLLATE NOCASE` would make `JOB` and `job` one
/// name (a claim of `JOB` refused while `job` is held), and `RTRIM` would
/// make `job ` and `job` one.
pub(crate) fn inspect(conn: &Connection, table: &str) -> rusqlite::Result<Found> {
    let columns = conn
        .prepare(TABLE_COLUMNS)?
        .query_map([table], |row| row.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    if columns.is_empty() {
        return Ok(Found::Missing);
    }
    let missing: Vec<&str> = COLUMNS
        .into_iter()
        .filter(|c| !columns.iter().any(|have| have.eq_ignore_ascii_case(c)))
        .collect();
    if !missing.is_empty() {
        return Ok(Found::Incompatible(format!(
            "it lacks the column(s) {}",
            missing.join(", ")
        )));
    }
    let (_, collation, ..) = conn.column_metadata(None, table, "name")?;
    let collation = collation.map(|c| c.to_string_lossy().into_owned());
    if let Some(c) = collation.filter(|c| !c.eq_ignore_ascii_case("BINARY")) {
        return Ok(Found::Incompatible(format!(
            "its name column is COLLATE {c}, not BINARY: names would not compare byte for byte"
        )));
    }
    let mut unique_on_name = false;
    let mut indexes = conn.prepare(NAME_INDEXES)?;
    let mut rows = indexes.query([table])?;
    while let Some(row) = rows.next()? {
        let index: String = row.get(0)?;
        let collation: Option<String> = row.get(1)?;
        let unique: bool = row.get(2)?;
        let keys: i64 = row.get(3)?;
        if let Some(c) = collation.filter(|c| !c.eq_ignore_ascii_case("BINARY")) {
            return Ok(Found::Incompatible(format!(
                "its index {index:?} compares names with COLLATE {c}, not BINARY: \
                 names would not compare byte for byte"
            )));
        }
        unique_on_name |= unique && keys == 1;
    }
    if !unique_on_name {
        return Ok(Found::Incompatible(
            "its name column is not its primary key (nor unique on its own)".to_owned(),
        ));
    }
    Ok(Found::Usable)
}

impl SqliteStore {
    /// Creates the lease table if it is missing (idempotent: any number of
    /// processes may run it at once).
    ///
    /// It inspects the table before anything else, so that an existing
    /// table is never written to, and creates it only when it is missing.
    ///
    /// # Errors
    ///
    /// [`SqliteError::IncompatibleTable`] for an existing table that cannot
    /// carry leases (a column missing, names compared under a collation
    /// other than `BINARY`); [`SqliteError::Database`] when a statement
    /// fails.
    pub async fn migrate(&self) -> Result<(), SqliteError> {
        let found = self
            .run(|conn, sql| {
                let table = sql.table.name();
                match inspect(conn, table)? {
                    Found::Missing => {
                        conn.execute_batch(&sql.create_table)?;
                        inspect(conn, table)
                    }
                    found => Ok(found),
                }
            })
            .await
            .map_err(SqliteError::from_call)?;
        match found {
            Found::Usable => Ok(()),
            Found::Missing => Err(SqliteError::IncompatibleTable {
                table: self.inner.sql.table.name().to_owned(),
                reason: "the table is still missing after its creation".into(),
            }),
            Found::Incompatible(reason) => Err(SqliteError::IncompatibleTable {
                table: self.inner.sql.table.name().to_owned(),
                reason,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_readme_shows_the_ddl_the_store_runs() {
        let ddl = super::create_table("\"gst_leases\"");
        assert!(
            include_str!("../README.md").contains(&ddl),
            "README.md must show:\n{ddl}"
        );
    }
}
