//! The lease table.

use lease_sql::sqlite::{Statements, judge_columns};
use lease_sql::{Args, Found};
use rusqlite::{Connection, params_from_iter};

use crate::error::SqliteError;
use crate::sql::bind;
use crate::store::SqliteStore;

/// Inspects the existing table `table` (unquoted) without writing: every
/// column the statements use is there, and names compare byte for byte,
/// both where the statements compare them (the column's collation) and
/// where uniqueness is enforced (the collation of every index on `name`).
/// A `name` column declared `COLLATE NOCASE` would make `JOB` and `job` one
/// name (a claim of `JOB` refused while `job` is held), and `RTRIM` would
/// make `job ` and `job` one.
pub(crate) fn inspect(conn: &Connection, sql: &Statements) -> rusqlite::Result<Found> {
    let table = sql.table().name();
    let place = Args::new().table_name(table);
    let bind = |statement| bind(statement, &place).map_err(rusqlite::Error::ToSqlConversionFailure);
    let columns = conn
        .prepare(sql.table_columns.text())?
        .query_map(params_from_iter(bind(&sql.table_columns)?), |row| {
            row.get::<_, String>(0)
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    match judge_columns(&columns) {
        Found::Usable => {}
        found => return Ok(found),
    }
    let (_, collation, ..) = conn.column_metadata(None, table, "name")?;
    let collation = collation.map(|c| c.to_string_lossy().into_owned());
    if let Some(c) = collation.filter(|c| !c.eq_ignore_ascii_case("BINARY")) {
        return Ok(Found::Incompatible(format!(
            "its name column is COLLATE {c}, not BINARY: names would not compare byte for byte"
        )));
    }
    let mut unique_on_name = false;
    let mut indexes = conn.prepare(sql.name_indexes.text())?;
    let mut rows = indexes.query(params_from_iter(bind(&sql.name_indexes)?))?;
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
    ///
    /// A table created by an earlier version, without the columns added
    /// since (`resign_term`), is given them (`ALTER TABLE .. ADD COLUMN`).
    pub async fn migrate(&self) -> Result<(), SqliteError> {
        let found = self
            .run(|conn, sql| match inspect(conn, sql)? {
                Found::Missing => {
                    conn.execute_batch(sql.create_table.text())?;
                    inspect(conn, sql)
                }
                Found::Outdated => add_columns(conn, sql),
                found => Ok(found),
            })
            .await
            .map_err(SqliteError::from_call)?;
        match found {
            Found::Usable => Ok(()),
            Found::Missing => Err(SqliteError::IncompatibleTable {
                table: self.inner.sql.table().name().to_owned(),
                reason: "the table is still missing after its creation".into(),
            }),
            Found::Outdated => Err(SqliteError::IncompatibleTable {
                table: self.inner.sql.table().name().to_owned(),
                reason: "it still lacks the column resign_term after adding it".into(),
            }),
            Found::Incompatible(reason) => Err(SqliteError::IncompatibleTable {
                table: self.inner.sql.table().name().to_owned(),
                reason,
            }),
        }
    }
}

/// Gives a table of an earlier version the columns added since
/// (`resign_term`), in a write transaction that looks again first (another
/// process may have added them meanwhile), then inspects it again.
fn add_columns(conn: &Connection, sql: &Statements) -> rusqlite::Result<Found> {
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let added = match inspect(conn, sql) {
        Ok(Found::Outdated) => conn.execute_batch(sql.add_resign_column.text()),
        Ok(_) => Ok(()),
        Err(e) => Err(e),
    };
    match added {
        Ok(()) => conn.execute_batch("COMMIT")?,
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            return Err(e);
        }
    }
    inspect(conn, sql)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_readme_shows_the_ddl_the_store_runs() {
        let ddl = lease_sql::sqlite::create_table("\"gst_leases\"");
        assert!(
            include_str!("../README.md").contains(&ddl),
            "README.md must show:\n{ddl}"
        );
    }
}
