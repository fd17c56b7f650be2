//! The lease table: its DDL, and the validated, quoted table name.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, params};

use lease_core::{TableName, TableRules};

use crate::error::MySqlError;
use crate::store::MySqlStore;

/// The default table name, the specification's.
pub const DEFAULT_TABLE: &str = "gst_leases";

/// The table, created if it does not exist. `name` and `holder` are binary
/// strings, so names compare byte for byte: under a `utf8mb4` collation
/// `job`, `JOB` and (with `PAD SPACE` collations, MariaDB's and MySQL 5.7's
/// `utf8mb4_bin` included) `job ` would be one name. 191 bytes is
/// [`lease_core::MAX_NAME_BYTES`].
pub(crate) const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS {table} (\
     name VARBINARY(191) NOT NULL, \
     holder VARBINARY(64) NOT NULL, \
     instance VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, \
     term BIGINT UNSIGNED NOT NULL, \
     expires_at_ms BIGINT NOT NULL, \
     slot_ms BIGINT NOT NULL DEFAULT 0, \
     unfinished_slot_ms BIGINT NOT NULL DEFAULT 0, \
     rerun_slot_ms BIGINT NOT NULL DEFAULT 0, \
     PRIMARY KEY (name)\
     ) ENGINE = InnoDB";

/// The existing table's columns: name, type and `EXTRA` (which says
/// `auto_increment`). No row: there is no such table (or the user may not
/// see it).
pub(crate) const TABLE_COLUMNS: &str = "SELECT COLUMN_NAME, DATA_TYPE, EXTRA FROM information_schema.COLUMNS \
     WHERE TABLE_SCHEMA = COALESCE(:schema, DATABASE()) AND TABLE_NAME = :table";

/// The triggers on the table that the user can see (MySQL and MariaDB show
/// a trigger only to a user with the `TRIGGER` privilege on its table).
pub(crate) const TABLE_TRIGGERS: &str = "SELECT TRIGGER_NAME FROM information_schema.TRIGGERS \
     WHERE EVENT_OBJECT_SCHEMA = COALESCE(:schema, DATABASE()) AND EVENT_OBJECT_TABLE = :table";

/// The columns the statements read and write.
pub(crate) const COLUMNS: [&str; 8] = [
    "name",
    "holder",
    "instance",
    "term",
    "expires_at_ms",
    "slot_ms",
    "unfinished_slot_ms",
    "rerun_slot_ms",
];

/// What the store finds of its table.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Found {
    /// There is no such table.
    Missing,
    /// The table can carry leases.
    Usable,
    /// The table exists but cannot carry leases, for this reason.
    Incompatible(String),
}

/// Inspects the existing table, reading `information_schema` only (so a
/// user without the `CREATE` privilege can run it):
///
/// - every column the statements use is there;
/// - `name` is binary, so names compare byte for byte;
/// - no column is `AUTO_INCREMENT`, and no trigger is on the table. The
///   statements read their outcome and the term from the OK packet's
///   insert id (see [`crate::sql`]), which an `AUTO_INCREMENT` column
///   replaces with its own id (a wrong term: a wrong fencing token) and
///   which a trigger inserting into a table with one disturbs (a claim
///   that succeeded read as refused). A trigger is seen only by a user
///   with the `TRIGGER` privilege on the table: for any other, the rule
///   stands unchecked.
pub(crate) async fn inspect(
    conn: &mut Conn,
    table: &TableName,
) -> Result<Found, mysql_async::Error> {
    let columns: Vec<(String, String, String)> = conn
        .exec(
            TABLE_COLUMNS,
            params! { "schema" => table.schema(), "table" => table.table() },
        )
        .await?;
    let found = judge_columns(&columns);
    if found != Found::Usable {
        return Ok(found);
    }
    let triggers: Vec<String> = conn
        .exec(
            TABLE_TRIGGERS,
            params! { "schema" => table.schema(), "table" => table.table() },
        )
        .await?;
    Ok(judge_triggers(&triggers))
}

/// What [`TABLE_COLUMNS`]' rows (name, type, `EXTRA`) say of the table:
/// the first half of [`inspect`], shared with other drivers (`texts`).
pub(crate) fn judge_columns(columns: &[(String, String, String)]) -> Found {
    if columns.is_empty() {
        return Found::Missing;
    }
    let missing: Vec<&str> = COLUMNS
        .into_iter()
        .filter(|c| {
            !columns
                .iter()
                .any(|(have, ..)| have.eq_ignore_ascii_case(c))
        })
        .collect();
    if !missing.is_empty() {
        return Found::Incompatible(format!("it lacks the column(s) {}", missing.join(", ")));
    }
    let name_type = columns
        .iter()
        .find(|(c, ..)| c.eq_ignore_ascii_case("name"))
        .map(|(_, t, _)| t.to_ascii_lowercase())
        .unwrap_or_default();
    if name_type != "varbinary" && name_type != "binary" {
        return Found::Incompatible(format!(
            "its name column is {name_type}, not VARBINARY: names would not compare byte for byte"
        ));
    }
    if let Some((column, ..)) = columns
        .iter()
        .find(|(_, _, extra)| extra.to_ascii_lowercase().contains("auto_increment"))
    {
        return Found::Incompatible(format!(
            "its column {column} is AUTO_INCREMENT, whose ids would replace the terms the \
             statements read back from the insert id: drop the column"
        ));
    }
    Found::Usable
}

/// What [`TABLE_TRIGGERS`]' rows say of the table: the second half of
/// [`inspect`].
pub(crate) fn judge_triggers(triggers: &[String]) -> Found {
    match triggers.first() {
        Some(trigger) => Found::Incompatible(format!(
            "it has the trigger {trigger}, which can disturb the insert id the statements read \
             their outcome from: the lease table must have no trigger"
        )),
        None => Found::Usable,
    }
}

/// What MySQL and MariaDB accept as the lease table: `table` or
/// `schema.table`, each part 1 to 64 ASCII letters, digits, `_` or `$`, not
/// all digits, quoted with backticks.
pub(crate) const TABLE_RULES: TableRules = TableRules {
    schema: true,
    max_bytes: 64,
    dollar: true,
    leading_digit: true,
    reserved_prefix: None,
    quote: '`',
};

/// Validates `name` as the lease table.
pub(crate) fn table_name(name: &str) -> Result<TableName, MySqlError> {
    TableName::parse(name, &TABLE_RULES).map_err(|e| MySqlError::InvalidTableName {
        name: e.name,
        reason: e.reason,
    })
}

/// The default table, `gst_leases`.
pub(crate) fn default_table() -> TableName {
    match table_name(DEFAULT_TABLE) {
        Ok(table) => table,
        Err(_) => unreachable!("the default table name is a plain identifier"),
    }
}

impl MySqlStore {
    /// Creates the lease table if it does not exist, and checks that an
    /// existing one can carry leases. The table is looked for first, in
    /// `information_schema`, so a user with only `SELECT`, `INSERT` and
    /// `UPDATE` on an existing table can migrate; `CREATE` is needed only
    /// to create it. Safe when many replicas run it at once: `CREATE TABLE
    /// IF NOT EXISTS` takes the table name's metadata lock, and the others
    /// find the table there.
    ///
    /// # Errors
    ///
    /// [`MySqlError::Database`] when the server refuses (missing `CREATE`
    /// privilege for a missing table) or does not answer;
    /// [`MySqlError::IncompatibleTable`] when the table exists without a
    /// column the statements use, with a `name` column that is not binary,
    /// with an `AUTO_INCREMENT` column or with a trigger (see the crate
    /// docs).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the table is either created or not.
    pub async fn migrate(&self) -> Result<(), MySqlError> {
        let mut conn = self.inner.pool.get_conn().await?;
        let table = &self.inner.table;
        let mut found = inspect(&mut conn, table).await?;
        if found == Found::Missing {
            conn.query_drop(self.inner.sql.create_table.as_str())
                .await?;
            found = inspect(&mut conn, table).await?;
        }
        match found {
            Found::Usable => Ok(()),
            Found::Missing => Err(MySqlError::IncompatibleTable {
                table: table.quoted().to_owned(),
                reason: "it is not in information_schema after its creation".to_owned(),
            }),
            Found::Incompatible(reason) => Err(MySqlError::IncompatibleTable {
                table: table.quoted().to_owned(),
                reason,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_qualified_names_are_quoted() {
        assert_eq!(table_name("gst_leases").unwrap().quoted(), "`gst_leases`");
        let t = table_name("app.leases$1").unwrap();
        assert_eq!(t.quoted(), "`app`.`leases$1`");
        assert_eq!(t.schema(), Some("app"));
        assert_eq!(t.table(), "leases$1");
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
            let err = table_name(bad).unwrap_err();
            assert!(
                matches!(err, MySqlError::InvalidTableName { .. }),
                "{bad:?}: {err:?}"
            );
        }
        assert!(table_name(&"x".repeat(64)).is_ok());
    }
}
