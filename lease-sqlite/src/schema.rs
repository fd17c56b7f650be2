//! The lease table.

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
