//! SQLite's statements: each written once, rendered for one table.

use lease_core::TableName;

use super::NOW;
use crate::statement::{Param, Placeholders, Statement, Template};

/// The claim, with its insert-if-absent, in one statement: the insert of a
/// new row, or the takeover of an expired one; `RETURNING` answers the
/// term, and nothing when the `DO UPDATE` condition refused (the name is
/// held).
const CLAIM: Template<'_> = Template {
    sql: "INSERT INTO {table} AS l (name, holder, instance, term, expires_at_ms, \
                               slot_ms, unfinished_slot_ms, rerun_slot_ms) \
         VALUES (:name, :token, :instance, 1, {now} + :lease_ms, 0, 0, 0) \
         ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
             instance = excluded.instance, term = l.term + 1, \
             expires_at_ms = excluded.expires_at_ms \
          WHERE l.expires_at_ms <= {now} \
         RETURNING term",
    params: &[Param::Name, Param::Token, Param::Instance, Param::LeaseMs],
};

/// The renewal -> the database's now, and whether the holder was asked to
/// resign (no row: lost).
const RENEW: Template<'_> = Template {
    sql: "UPDATE {table} SET expires_at_ms = {now} + :lease_ms \
          WHERE name = :name AND holder = :token AND expires_at_ms > {now} \
         RETURNING {now}, resign_term = term",
    params: &[Param::Name, Param::Token, Param::LeaseMs],
};

/// The verification -> `term` while held.
const VERIFY: Template<'_> = Template {
    sql: "SELECT term FROM {table} WHERE name = :name AND holder = :token AND expires_at_ms > {now}",
    params: &[Param::Name, Param::Token],
};

/// The guard for other drivers ([`GuardStatement`](lease_core::GuardStatement)):
/// `?1 name, ?2 token, ?3 term` -> `term`, no row when lost. A write that
/// changes nothing, so that it takes the write lock even in a deferred
/// transaction.
const GUARD: Template<'_> = Template {
    sql: "UPDATE {table} SET term = term \
          WHERE name = :name AND holder = :token AND term = :term AND expires_at_ms > {now} \
         RETURNING term",
    params: &[Param::Name, Param::Token, Param::Term],
};

/// The release -> rows changed (1 released, 0 already gone).
const RELEASE: Template<'_> = Template {
    sql: "UPDATE {table} SET expires_at_ms = 0 WHERE name = :name AND holder = :token",
    params: &[Param::Name, Param::Token],
};

/// The read of an instant claim -> `term, slot_ms, unfinished_slot_ms,
/// rerun_slot_ms, expired`.
const INSTANT_READ: Template<'_> = Template {
    sql: "SELECT term, slot_ms, unfinished_slot_ms, rerun_slot_ms, expires_at_ms <= {now} \
           FROM {table} WHERE name = :name",
    params: &[Param::Name],
};

/// The insert of an instant claim when there was no row -> rows changed
/// (1 inserted, 0 someone was first).
const INSTANT_INSERT: Template<'_> = Template {
    sql: "INSERT INTO {table} (name, holder, instance, term, expires_at_ms, \
                          slot_ms, unfinished_slot_ms, rerun_slot_ms) \
         VALUES (:name, :token, :instance, 1, {now} + :lease_ms, :instant, :instant, 0) \
         ON CONFLICT (name) DO NOTHING",
    params: &[
        Param::Name,
        Param::Token,
        Param::Instance,
        Param::InstantMs,
        Param::LeaseMs,
    ],
};

/// The write of an instant claim over the row read with `:term` -> rows
/// changed (1 claimed, 0 someone was first).
const INSTANT_UPDATE: Template<'_> = Template {
    sql: "UPDATE {table} SET holder = :token, instance = :instance, term = term + 1, \
             expires_at_ms = {now} + :lease_ms, slot_ms = :instant, unfinished_slot_ms = :instant \
          WHERE name = :name AND term = :term AND expires_at_ms <= {now} AND slot_ms < :instant",
    params: &[
        Param::Name,
        Param::Token,
        Param::Instance,
        Param::InstantMs,
        Param::LeaseMs,
        Param::Term,
    ],
};

/// The end of a round in one statement. The row matches either branch of
/// the trait's two statements: the holder's (`holder = :token`: give the
/// name back, take `passed` along) or, failing that, the fallback's
/// (`unfinished_slot_ms = :instant`: record the end only). With no holder,
/// `:token` is NULL and `holder = :token` is never true. `RETURNING` says
/// which branch applied.
const FINISH: Template<'_> = Template {
    sql: "UPDATE {table} SET \
             expires_at_ms = CASE WHEN holder = :token THEN 0 ELSE expires_at_ms END, \
             slot_ms = CASE WHEN holder = :token AND :passed > slot_ms AND :passed <= {now} \
                            THEN :passed ELSE slot_ms END, \
             unfinished_slot_ms = 0 \
          WHERE name = :name AND (holder = :token OR unfinished_slot_ms = :instant) \
         RETURNING coalesce(holder = :token, 0)",
    params: &[Param::Name, Param::Token, Param::InstantMs, Param::PassedMs],
};

/// The second claim of an unfinished instant -> rows changed (1 claimed).
const CLAIM_RERUN: Template<'_> = Template {
    sql: "UPDATE {table} SET holder = :token, instance = :instance, term = term + 1, \
             expires_at_ms = {now} + :lease_ms, rerun_slot_ms = slot_ms \
          WHERE name = :name AND term = :term AND unfinished_slot_ms = slot_ms \
            AND rerun_slot_ms < slot_ms AND expires_at_ms <= {now}",
    params: &[
        Param::Name,
        Param::Term,
        Param::Token,
        Param::Instance,
        Param::LeaseMs,
    ],
};

/// The columns `get` and `list` read, the database's now fifth (never the
/// holder token).
macro_rules! info_columns {
    () => {
        "name, instance, term, expires_at_ms, {now}, slot_ms, unfinished_slot_ms, rerun_slot_ms"
    };
}

/// The last instant on record -> `slot_ms`.
const LAST_INSTANT: Template<'_> = Template {
    sql: "SELECT slot_ms FROM {table} WHERE name = :name",
    params: &[Param::Name],
};

/// A forced release at the term read -> rows changed (1 freed).
const FORCE_RELEASE: Template<'_> = Template {
    sql: "UPDATE {table} SET expires_at_ms = 0 \
                  WHERE name = :name AND term = :term AND expires_at_ms > {now}",
    params: &[Param::Name, Param::Term],
};

/// A resign request at the term read -> rows changed (1: asked).
const REQUEST_RESIGN: Template<'_> = Template {
    sql: "UPDATE {table} SET resign_term = term \
                  WHERE name = :name AND term = :term AND expires_at_ms > {now}",
    params: &[Param::Name, Param::Term],
};

/// One lease's row -> the info columns.
const GET: Template<'_> = Template {
    sql: concat!(
        "SELECT ",
        info_columns!(),
        " FROM {table} WHERE name = :name"
    ),
    params: &[Param::Name],
};

/// The rows from the prefix on, by name -> the info columns. The column's
/// collation is BINARY (memcmp): the names that start with the prefix come
/// first, and the caller keeps those.
const LIST: Template<'_> = Template {
    sql: concat!(
        "SELECT ",
        info_columns!(),
        " FROM {table} WHERE name >= :prefix ORDER BY name LIMIT :limit"
    ),
    params: &[Param::Prefix, Param::Limit],
};

/// The clock read.
const SELECT_NOW: Template<'_> = Template {
    sql: "SELECT {now}",
    params: &[],
};

/// The existing table's columns, by name.
const TABLE_COLUMNS: Template<'_> = Template {
    sql: "SELECT name FROM pragma_table_info(:table_name)",
    params: &[Param::TableName],
};

/// The collation each index of the table gives its `name` key column, and
/// whether the index is unique and holds that column alone.
const NAME_INDEXES: Template<'_> = Template {
    sql: "SELECT il.name, ix.coll, il.\"unique\", \
     (SELECT count(*) FROM pragma_index_xinfo(il.name) AS k WHERE k.key = 1) \
     FROM pragma_index_list(:table_name) AS il JOIN pragma_index_xinfo(il.name) AS ix \
     WHERE ix.name = 'name' AND ix.key = 1",
    params: &[Param::TableName],
};

/// The table's DDL, for the quoted table name `t`.
///
/// `name` keeps SQLite's default `BINARY` collation, so names compare byte
/// for byte (`job`, `JOB` and `job ` are three rows). `WITHOUT ROWID` stores
/// the rows in the primary key's own b-tree: every statement looks a row up
/// by its name.
#[must_use]
pub fn create_table(t: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {t} (\n\
         \x20   name TEXT NOT NULL PRIMARY KEY,\n\
         \x20   holder TEXT NOT NULL,\n\
         \x20   instance TEXT NOT NULL,\n\
         \x20   term INTEGER NOT NULL,\n\
         \x20   expires_at_ms INTEGER NOT NULL,\n\
         \x20   slot_ms INTEGER NOT NULL DEFAULT 0,\n\
         \x20   unfinished_slot_ms INTEGER NOT NULL DEFAULT 0,\n\
         \x20   rerun_slot_ms INTEGER NOT NULL DEFAULT 0,\n\
         \x20   resign_term INTEGER NOT NULL DEFAULT 0\n\
         ) WITHOUT ROWID"
    )
}

/// The column added since the first schema, for the quoted table name
/// `t`: `migrate` adds it to a table created by an earlier version.
#[must_use]
fn add_resign_column(t: &str) -> String {
    format!("ALTER TABLE {t} ADD COLUMN resign_term INTEGER NOT NULL DEFAULT 0")
}

/// The statements of one table, rendered once when the store opens.
///
/// ```
/// use lease_sql::sqlite::{Statements, table};
///
/// let sql = Statements::new(table("app_leases")?);
/// assert_eq!(
///     sql.verify.text(),
///     "SELECT term FROM \"app_leases\" WHERE name = ?1 AND holder = ?2 \
///      AND expires_at_ms > CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER)"
/// );
/// assert!(sql.renew_many(2).text().contains("IN (VALUES (?2, ?3), (?4, ?5))"));
/// # Ok::<(), lease_core::TableNameError>(())
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Statements {
    table: TableName,
    /// `CREATE TABLE IF NOT EXISTS` of the table.
    pub create_table: Statement,
    /// `ALTER TABLE .. ADD COLUMN resign_term`, for a table of the first
    /// schema ([`Found::Outdated`](crate::Found::Outdated)).
    pub add_resign_column: Statement,
    /// `name, token, instance, lease_ms` -> the new term; no row when
    /// someone holds the name.
    pub claim: Statement,
    /// `name, token, lease_ms` -> the database's now, and whether the
    /// holder was asked to resign; no row when lost.
    pub renew: Statement,
    /// `name, token` -> the term while held.
    pub verify: Statement,
    /// `name, token, term` -> `term`, no row when lost: the guard
    /// statement.
    pub guard: Statement,
    /// `name, token` -> rows changed: 1 released, 0 already gone.
    pub release: Statement,
    /// `name` -> `term, slot_ms, unfinished_slot_ms, rerun_slot_ms,
    /// expired`.
    pub instant_read: Statement,
    /// `name, token, instance, instant, lease_ms` -> rows changed: 1
    /// inserted, 0 someone was first.
    pub instant_insert: Statement,
    /// `name, token, instance, instant, lease_ms, term read` -> rows
    /// changed: 1 claimed, 0 someone was first.
    pub instant_update: Statement,
    /// `name, token (NULL for none), instant, passed` -> whether the
    /// holder's branch applied; no row when nothing changed.
    pub finish: Statement,
    /// `name, term, token, instance, lease_ms` -> rows changed: 1 claimed.
    pub claim_rerun: Statement,
    /// `name` -> `slot_ms`.
    pub last_instant: Statement,
    /// `name, term` -> rows changed: 1 freed.
    pub force_release: Statement,
    /// `name, term` -> rows changed: 1 when the holder at `term` is asked
    /// to resign.
    pub request_resign: Statement,
    /// `name` -> `name, instance, term, expires_at_ms, now, slot_ms,
    /// unfinished_slot_ms, rerun_slot_ms`.
    pub get: Statement,
    /// `prefix, limit` -> the columns of `get` of the rows from the prefix
    /// on, by name.
    pub list: Statement,
    /// -> the database's now.
    pub now: Statement,
    /// `table_name` -> the name of each column.
    pub table_columns: Statement,
    /// `table_name` -> `index, collation of name, unique, key columns` of
    /// each index on `name`.
    pub name_indexes: Statement,
}

impl Statements {
    /// The statements of `table`.
    #[must_use]
    pub fn new(table: TableName) -> Self {
        let r = |template: &Template<'_>| render(template, &table);
        Statements {
            create_table: Statement::plain(create_table(table.quoted())),
            add_resign_column: Statement::plain(add_resign_column(table.quoted())),
            claim: r(&CLAIM),
            renew: r(&RENEW),
            verify: r(&VERIFY),
            guard: r(&GUARD),
            release: r(&RELEASE),
            instant_read: r(&INSTANT_READ),
            instant_insert: r(&INSTANT_INSERT),
            instant_update: r(&INSTANT_UPDATE),
            finish: r(&FINISH),
            claim_rerun: r(&CLAIM_RERUN),
            last_instant: r(&LAST_INSTANT),
            force_release: r(&FORCE_RELEASE),
            request_resign: r(&REQUEST_RESIGN),
            get: r(&GET),
            list: r(&LIST),
            now: r(&SELECT_NOW),
            table_columns: r(&TABLE_COLUMNS),
            name_indexes: r(&NAME_INDEXES),
            table,
        }
    }

    /// The table.
    #[must_use]
    pub fn table(&self) -> &TableName {
        &self.table
    }

    /// Every statement of the set (not the batch ones, made per count).
    #[cfg(any(test, feature = "test-util"))]
    pub(crate) fn all(&self) -> Vec<&Statement> {
        vec![
            &self.create_table,
            &self.add_resign_column,
            &self.claim,
            &self.renew,
            &self.verify,
            &self.guard,
            &self.release,
            &self.instant_read,
            &self.instant_insert,
            &self.instant_update,
            &self.finish,
            &self.claim_rerun,
            &self.last_instant,
            &self.force_release,
            &self.request_resign,
            &self.get,
            &self.list,
            &self.now,
            &self.table_columns,
            &self.name_indexes,
        ]
    }

    /// The batch renewal of `count` leases: `?1` the lease length, then
    /// (name, token) pairs; `RETURNING` names the rows renewed, with the
    /// database's now and whether each holder was asked to resign.
    #[must_use]
    pub fn renew_many(&self, count: usize) -> Statement {
        let mut sql = String::from(
            "UPDATE {table} SET expires_at_ms = {now} + :lease_ms \
              WHERE (name, holder) IN (VALUES ",
        );
        let mut params = Vec::with_capacity(1 + 2 * count);
        params.push(Param::LeaseMs);
        for i in 0..count {
            if i > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&format!("(:name[{i}], :token[{i}])"));
            params.extend([Param::NameAt(i), Param::TokenAt(i)]);
        }
        sql.push_str(
            ") AND expires_at_ms > {now} RETURNING name, holder, {now}, resign_term = term",
        );
        render(
            &Template {
                sql: &sql,
                params: &params,
            },
            &self.table,
        )
    }

    /// The unfinished instants of `count` names (`count >= 1`) in one
    /// statement: `name IN (?1, ..., ?count)`.
    #[must_use]
    pub fn find_unfinished(&self, count: usize) -> Statement {
        let mut sql = String::from("SELECT name, term, slot_ms FROM {table} WHERE name IN (");
        for i in 0..count {
            if i > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&format!(":name[{i}]"));
        }
        sql.push_str(
            ") AND unfinished_slot_ms = slot_ms \
                AND rerun_slot_ms < slot_ms AND expires_at_ms <= {now}",
        );
        let params: Vec<Param> = (0..count).map(Param::NameAt).collect();
        render(
            &Template {
                sql: &sql,
                params: &params,
            },
            &self.table,
        )
    }
}

/// `template` for `table`, with SQLite's placeholders and clock.
fn render(template: &Template<'_>, table: &TableName) -> Statement {
    Statement::render(
        template,
        Placeholders::NumberedQuestion,
        table.quoted(),
        NOW,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sqlite::table;

    #[test]
    fn each_template_numbers_every_marker_it_has_and_no_other() {
        for template in [
            CLAIM,
            RENEW,
            VERIFY,
            GUARD,
            RELEASE,
            INSTANT_READ,
            INSTANT_INSERT,
            INSTANT_UPDATE,
            FINISH,
            CLAIM_RERUN,
            LAST_INSTANT,
            FORCE_RELEASE,
            REQUEST_RESIGN,
            GET,
            LIST,
            SELECT_NOW,
            TABLE_COLUMNS,
            NAME_INDEXES,
        ] {
            template.assert_tidy();
        }
    }

    #[test]
    fn batch_statements_have_one_placeholder_per_value() {
        let sql = Statements::new(table("t").unwrap());
        let find = sql.find_unfinished(3);
        assert!(
            find.text().contains("name IN (?1, ?2, ?3)"),
            "{}",
            find.text()
        );
        assert!(sql.find_unfinished(1).text().contains("name IN (?1)"));
        let renew = sql.renew_many(2);
        assert_eq!(
            renew.params(),
            [
                Param::LeaseMs,
                Param::NameAt(0),
                Param::TokenAt(0),
                Param::NameAt(1),
                Param::TokenAt(1)
            ]
        );
        assert!(!renew.text().contains(['{', ':']), "{}", renew.text());
    }
}
