//! MySQL's statements: each written once, rendered for one table.

use lease_core::TableName;

use super::NOW_MS;
use crate::statement::{Param, Placeholders, Statement, Template};

/// The read of a claim -> `term, expired`: a plain (consistent,
/// non-locking) read, so a claim refused because the name is held takes no
/// row lock and waits on none: rivals of a held name neither queue on its
/// row nor hold up its holder's renewals.
const CLAIM_READ: Template<'_> = Template {
    sql: "SELECT term, expires_at_ms <= {now} FROM {table} WHERE name = :name",
    params: &[Param::Name],
};

/// The write of a claim over a row read free with `:term`: the term check
/// makes it refuse when someone else took the name since the read (the
/// expiry is checked again by the statement's own clock). `last_insert_id`
/// = the new term, 0 when refused.
const CLAIM_TAKE: Template<'_> = Template {
    sql: "UPDATE {table} SET holder = :token, instance = :instance, term = LAST_INSERT_ID(term + 1), \
          expires_at_ms = {now} + :lease_ms \
          WHERE name = :name AND term = :term AND expires_at_ms <= {now}",
    params: &[
        Param::Token,
        Param::Instance,
        Param::LeaseMs,
        Param::Name,
        Param::Term,
    ],
};

/// The insert of a claim when the read found no row: `last_insert_id` = 1
/// inserted, 0 when someone inserted the name first (the duplicate's update
/// changes nothing but resets the id; the claim then reads the row again).
const CLAIM_INSERT: Template<'_> = Template {
    sql: "INSERT INTO {table} (name, holder, instance, term, expires_at_ms, slot_ms, unfinished_slot_ms, rerun_slot_ms) \
          VALUES (:name, :token, :instance, LAST_INSERT_ID(1), {now} + :lease_ms, 0, 0, 0) \
          ON DUPLICATE KEY UPDATE term = term + LAST_INSERT_ID(0)",
    params: &[Param::Name, Param::Token, Param::Instance, Param::LeaseMs],
};

/// The renewal: `LAST_INSERT_ID(now * 2 + resign)` reports the match, the
/// database's now and whether the holder was asked to resign (the low bit),
/// in the OK packet: one round trip, as with `RETURNING`.
const RENEW: Template<'_> = Template {
    sql: "UPDATE {table} \
          SET expires_at_ms = LAST_INSERT_ID({now} * 2 + (resign_term = term)) DIV 2 + :lease_ms \
          WHERE name = :name AND holder = :token AND expires_at_ms > {now}",
    params: &[Param::LeaseMs, Param::Name, Param::Token],
};

/// The verification -> `term` (no row: not held).
const VERIFY: Template<'_> = Template {
    sql: "SELECT term FROM {table} WHERE name = :name AND holder = :token AND expires_at_ms > {now}",
    params: &[Param::Name, Param::Token],
};

/// [`VERIFY`] as the first statement of `lease-mysql`'s guarded
/// transaction: the shared lock on the row makes every write to it (a
/// successor's claim, and the holder's own renewals) wait until the
/// transaction ends. `LOCK IN SHARE MODE` is understood by MariaDB and
/// MySQL 8 alike (MySQL 8 also spells it `FOR SHARE`).
const VERIFY_LOCKED: Template<'_> = Template {
    sql: "SELECT term FROM {table} WHERE name = :name AND holder = :token AND expires_at_ms > {now} \
          LOCK IN SHARE MODE",
    params: &[Param::Name, Param::Token],
};

/// The guard for other drivers ([`GuardStatement`](lease_core::GuardStatement)):
/// `? name, ? token, ? term` -> `term`, no row when lost; the same lock as
/// [`VERIFY_LOCKED`].
const GUARD: Template<'_> = Template {
    sql: "SELECT term FROM {table} WHERE name = :name AND holder = :token AND term = :term \
          AND expires_at_ms > {now} LOCK IN SHARE MODE",
    params: &[Param::Name, Param::Token, Param::Term],
};

/// The release: `LAST_INSERT_ID(term)` reports the match.
const RELEASE: Template<'_> = Template {
    sql: "UPDATE {table} SET expires_at_ms = 0, term = LAST_INSERT_ID(term) \
     WHERE name = :name AND holder = :token",
    params: &[Param::Name, Param::Token],
};

/// The read of an instant claim -> `term, slot_ms, unfinished_slot_ms,
/// rerun_slot_ms, expired`.
const INSTANT_READ: Template<'_> = Template {
    sql: "SELECT term, slot_ms, unfinished_slot_ms, rerun_slot_ms, expires_at_ms <= {now} \
          FROM {table} WHERE name = :name",
    params: &[Param::Name],
};

/// The write of an instant claim over a row read with `:term`:
/// `last_insert_id` = the new term, 0 when refused.
const INSTANT_UPDATE: Template<'_> = Template {
    sql: "UPDATE {table} SET holder = :token, instance = :instance, term = LAST_INSERT_ID(term + 1), \
          expires_at_ms = {now} + :lease_ms, slot_ms = :instant, unfinished_slot_ms = :instant \
          WHERE name = :name AND term = :term AND expires_at_ms <= {now} AND slot_ms < :instant",
    params: &[
        Param::Token,
        Param::Instance,
        Param::LeaseMs,
        Param::InstantMs,
        Param::Name,
        Param::Term,
    ],
};

/// The insert of an instant claim when there was no row: `last_insert_id`
/// = 1 inserted, 0 when someone was first (the duplicate's update changes
/// nothing but resets the id).
const INSTANT_INSERT: Template<'_> = Template {
    sql: "INSERT INTO {table} (name, holder, instance, term, expires_at_ms, slot_ms, unfinished_slot_ms, rerun_slot_ms) \
          VALUES (:name, :token, :instance, LAST_INSERT_ID(1), {now} + :lease_ms, :instant, :instant, 0) \
          ON DUPLICATE KEY UPDATE term = term + LAST_INSERT_ID(0)",
    params: &[
        Param::Name,
        Param::Token,
        Param::Instance,
        Param::LeaseMs,
        Param::InstantMs,
    ],
};

/// The end of a round, both statements of the specification folded into
/// one: the row matches when `:token` holds it (give it back, take
/// `:passed` along) or, failing that, when its unfinished instant is still
/// `:instant` (record the end only). `:token` is NULL when the handle is
/// known lost. The outcome code ([`FINISH_RELEASED`],
/// [`FINISH_WITHOUT_LEASE`]; 0 not recorded) rides on the `term`
/// assignment, which leaves the term as it was.
const FINISH: Template<'_> = Template {
    sql: "UPDATE {table} SET \
          slot_ms = IF(holder <=> :token AND :passed > slot_ms AND :passed <= {now}, :passed, slot_ms), \
          expires_at_ms = IF(holder <=> :token, 0, expires_at_ms), \
          unfinished_slot_ms = 0, \
          term = term + 0 * LAST_INSERT_ID(IF(holder <=> :token, 1, 2)) \
          WHERE name = :name AND (holder <=> :token OR unfinished_slot_ms = :instant)",
    params: &[Param::Token, Param::PassedMs, Param::Name, Param::InstantMs],
};

/// The second claim of an unfinished instant: `last_insert_id` = the new
/// term, 0 when refused.
const CLAIM_RERUN: Template<'_> = Template {
    sql: "UPDATE {table} SET holder = :token, instance = :instance, term = LAST_INSERT_ID(term + 1), \
          expires_at_ms = {now} + :lease_ms, rerun_slot_ms = slot_ms \
          WHERE name = :name AND term = :term AND unfinished_slot_ms = slot_ms \
          AND rerun_slot_ms < slot_ms AND expires_at_ms <= {now}",
    params: &[
        Param::Token,
        Param::Instance,
        Param::LeaseMs,
        Param::Name,
        Param::Term,
    ],
};

/// The last instant on record -> `slot_ms`.
const LAST_INSTANT: Template<'_> = Template {
    sql: "SELECT slot_ms FROM {table} WHERE name = :name",
    params: &[Param::Name],
};

/// The columns `get` and `list` read, the database's now fifth (never the
/// holder token).
macro_rules! info_columns {
    () => {
        "SELECT name, instance, term, expires_at_ms, {now}, slot_ms, unfinished_slot_ms, rerun_slot_ms \
         FROM {table} "
    };
}

/// A forced release: frees the name if its term is still `:term` and it is
/// held; `last_insert_id` = the term when freed, 0 when not.
const FORCE_RELEASE: Template<'_> = Template {
    sql: "UPDATE {table} SET expires_at_ms = 0, term = LAST_INSERT_ID(term) \
          WHERE name = :name AND term = :term AND expires_at_ms > {now}",
    params: &[Param::Name, Param::Term],
};

/// A resign request: asks the holder at `:term`, if it still holds the
/// name; `last_insert_id` = the term when asked (even when it already
/// was), 0 when not.
const REQUEST_RESIGN: Template<'_> = Template {
    sql: "UPDATE {table} SET resign_term = LAST_INSERT_ID(term) \
          WHERE name = :name AND term = :term AND expires_at_ms > {now}",
    params: &[Param::Name, Param::Term],
};

/// The column added since the first schema: `migrate` adds it to a table
/// created by an earlier version (MySQL has no `ADD COLUMN IF NOT EXISTS`;
/// a replica that added it first makes this fail with error 1060, which
/// `migrate` takes as done).
const ADD_RESIGN_COLUMN: Template<'_> = Template {
    sql: "ALTER TABLE {table} ADD COLUMN resign_term BIGINT UNSIGNED NOT NULL DEFAULT 0",
    params: &[],
};

/// One lease's row -> the info columns (`name` binary).
const GET: Template<'_> = Template {
    sql: concat!(info_columns!(), "WHERE name = :name"),
    params: &[Param::Name],
};

/// The rows from `:prefix` on, by name: the column is binary, so the order is
/// byte order and the names that start with the prefix come first (the
/// caller keeps those).
const LIST: Template<'_> = Template {
    sql: concat!(
        info_columns!(),
        "WHERE name >= :prefix ORDER BY name LIMIT :limit"
    ),
    params: &[Param::Prefix, Param::Limit],
};

/// The clock read.
const NOW: Template<'_> = Template {
    sql: "SELECT {now}",
    params: &[],
};

/// The table, created if it does not exist. `name` and `holder` are binary
/// strings, so names compare byte for byte: under a `utf8mb4` collation
/// `job`, `JOB` and (with `PAD SPACE` collations, MariaDB's and MySQL 5.7's
/// `utf8mb4_bin` included) `job ` would be one name. 191 bytes is
/// [`lease_core::MAX_NAME_BYTES`].
const CREATE_TABLE: Template<'_> = Template {
    sql: "CREATE TABLE IF NOT EXISTS {table} (\
     name VARBINARY(191) NOT NULL, \
     holder VARBINARY(64) NOT NULL, \
     instance VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, \
     term BIGINT UNSIGNED NOT NULL, \
     expires_at_ms BIGINT NOT NULL, \
     slot_ms BIGINT NOT NULL DEFAULT 0, \
     unfinished_slot_ms BIGINT NOT NULL DEFAULT 0, \
     rerun_slot_ms BIGINT NOT NULL DEFAULT 0, \
     resign_term BIGINT UNSIGNED NOT NULL DEFAULT 0, \
     PRIMARY KEY (name)\
     ) ENGINE = InnoDB",
    params: &[],
};

/// The existing table's columns -> `COLUMN_NAME, DATA_TYPE, EXTRA` (which
/// says `auto_increment`). No row: there is no such table (or the user may
/// not see it).
const TABLE_COLUMNS: Template<'_> = Template {
    sql: "SELECT COLUMN_NAME, DATA_TYPE, EXTRA FROM information_schema.COLUMNS \
     WHERE TABLE_SCHEMA = COALESCE(:schema, DATABASE()) AND TABLE_NAME = :table_name",
    params: &[Param::Schema, Param::TableName],
};

/// The triggers on the table that the user can see -> `TRIGGER_NAME`
/// (MySQL and MariaDB show a trigger only to a user with the `TRIGGER`
/// privilege on its table).
const TABLE_TRIGGERS: Template<'_> = Template {
    sql: "SELECT TRIGGER_NAME FROM information_schema.TRIGGERS \
     WHERE EVENT_OBJECT_SCHEMA = COALESCE(:schema, DATABASE()) AND EVENT_OBJECT_TABLE = :table_name",
    params: &[Param::Schema, Param::TableName],
};

/// The statements of one table, rendered once.
///
/// ```
/// use lease_sql::mysql::{Statements, table};
/// use lease_sql::Param;
///
/// let sql = Statements::new(table("app.leases")?);
/// assert_eq!(
///     sql.release.text(),
///     "UPDATE `app`.`leases` SET expires_at_ms = 0, term = LAST_INSERT_ID(term) \
///      WHERE name = ? AND holder = ?"
/// );
/// // A value used four times binds four times.
/// assert_eq!(sql.finish.params().iter().filter(|p| **p == Param::Token).count(), 4);
/// # Ok::<(), lease_core::TableNameError>(())
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Statements {
    table: TableName,
    /// `name` -> `term, expired` (a plain read: no lock).
    pub claim_read: Statement,
    /// The claim of a free row read with `term`: `last_insert_id` = the new
    /// term, 0 when refused.
    pub claim_take: Statement,
    /// The claim of a missing name: `last_insert_id` = 1 when inserted, 0
    /// when a rival inserted first (read again).
    pub claim_insert: Statement,
    /// `last_insert_id` = the database's now times two, plus 1 when the
    /// holder was asked to resign, when held; 0 when lost.
    pub renew: Statement,
    /// -> `term` (no row: not held).
    pub verify: Statement,
    /// -> `term`, the row's shared lock taken (no row: not held): the
    /// guarded transaction's first statement.
    pub verify_locked: Statement,
    /// The guard statement: `? name, ? token, ? term` -> `term`, no row
    /// when lost.
    pub guard: Statement,
    /// `last_insert_id` = the term when released, 0 when not held.
    pub release: Statement,
    /// -> `term, slot_ms, unfinished_slot_ms, rerun_slot_ms, expired`.
    pub instant_read: Statement,
    /// `last_insert_id` = the new term, 0 when refused.
    pub instant_update: Statement,
    /// `last_insert_id` = 1 when inserted, 0 when someone was first.
    pub instant_insert: Statement,
    /// `last_insert_id` = [`FINISH_RELEASED`](super::FINISH_RELEASED),
    /// [`FINISH_WITHOUT_LEASE`](super::FINISH_WITHOUT_LEASE) or
    /// 0 (not recorded).
    pub finish: Statement,
    /// `last_insert_id` = the new term, 0 when refused.
    pub claim_rerun: Statement,
    /// -> `slot_ms`.
    pub last_instant: Statement,
    /// -> `name, instance, term, expires_at_ms, now, slot_ms,
    /// unfinished_slot_ms, rerun_slot_ms` (name binary).
    pub get: Statement,
    /// `last_insert_id` = the term when freed, 0 when not.
    pub force_release: Statement,
    /// `last_insert_id` = the term when its holder is asked to resign, 0
    /// when not.
    pub request_resign: Statement,
    /// The columns of `get`, by name from `prefix` on.
    pub list: Statement,
    /// -> the database's now.
    pub now: Statement,
    /// `CREATE TABLE IF NOT EXISTS` of the table.
    pub create_table: Statement,
    /// `ALTER TABLE .. ADD COLUMN resign_term`, for a table of the first
    /// schema ([`Found::Outdated`](crate::Found::Outdated)).
    pub add_resign_column: Statement,
    /// The table's columns (`schema`, NULL for the connection's database;
    /// `table_name`) -> `COLUMN_NAME, DATA_TYPE, EXTRA`.
    pub table_columns: Statement,
    /// The table's triggers (`schema`, `table_name`) -> `TRIGGER_NAME`.
    pub table_triggers: Statement,
}

impl Statements {
    /// The statements of `table`.
    #[must_use]
    pub fn new(table: TableName) -> Self {
        let r = |template: &Template<'_>| render(template, &table);
        Statements {
            claim_read: r(&CLAIM_READ),
            claim_take: r(&CLAIM_TAKE),
            claim_insert: r(&CLAIM_INSERT),
            renew: r(&RENEW),
            verify: r(&VERIFY),
            verify_locked: r(&VERIFY_LOCKED),
            guard: r(&GUARD),
            release: r(&RELEASE),
            instant_read: r(&INSTANT_READ),
            instant_update: r(&INSTANT_UPDATE),
            instant_insert: r(&INSTANT_INSERT),
            finish: r(&FINISH),
            claim_rerun: r(&CLAIM_RERUN),
            last_instant: r(&LAST_INSTANT),
            get: r(&GET),
            force_release: r(&FORCE_RELEASE),
            request_resign: r(&REQUEST_RESIGN),
            list: r(&LIST),
            now: r(&NOW),
            create_table: r(&CREATE_TABLE),
            add_resign_column: r(&ADD_RESIGN_COLUMN),
            table_columns: r(&TABLE_COLUMNS),
            table_triggers: r(&TABLE_TRIGGERS),
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
            &self.claim_read,
            &self.claim_take,
            &self.claim_insert,
            &self.renew,
            &self.verify,
            &self.verify_locked,
            &self.guard,
            &self.release,
            &self.instant_read,
            &self.instant_update,
            &self.instant_insert,
            &self.finish,
            &self.claim_rerun,
            &self.last_instant,
            &self.get,
            &self.force_release,
            &self.request_resign,
            &self.list,
            &self.now,
            &self.create_table,
            &self.add_resign_column,
            &self.table_columns,
            &self.table_triggers,
        ]
    }

    /// The batch renewal of `slots` leases, and the read of which are held
    /// after it, for when the update matched fewer rows than the batch has
    /// leases: the lease length first in the update, then `slots` names (so
    /// the primary key bounds the rows touched), then `slots` (name, token)
    /// pairs; the update's `last_insert_id` is the database's now when a row
    /// matched (`LAST_INSERT_ID(now)`). The update leaves out the rows
    /// whose holder was asked to resign (`resign_term = term`), so that
    /// they come back through the read, which says so. The read binds the
    /// names and the pairs, and returns `name, holder, now, resign` (name
    /// and holder binary).
    #[must_use]
    pub fn renew_many(&self, slots: usize) -> (Statement, Statement) {
        let mut filter = String::with_capacity(40 * slots);
        filter.push_str(" WHERE name IN (");
        for i in 0..slots {
            if i > 0 {
                filter.push_str(", ");
            }
            filter.push_str(&format!(":name[{i}]"));
        }
        filter.push_str(") AND (name, holder) IN (");
        for i in 0..slots {
            if i > 0 {
                filter.push_str(", ");
            }
            filter.push_str(&format!("(:name[{i}], :token[{i}])"));
        }
        filter.push_str(") AND expires_at_ms > {now}");
        let update = format!(
            "UPDATE {{table}} SET expires_at_ms = LAST_INSERT_ID({{now}}) + :lease_ms{filter} \
             AND resign_term <> term"
        );
        let read =
            format!("SELECT name, holder, {{now}}, resign_term = term FROM {{table}}{filter}");
        let r = |sql: &str| render(&Template { sql, params: &[] }, &self.table);
        (r(&update), r(&read))
    }

    /// The search for unfinished instants of `slots` names: `slots`
    /// placeholders -> `name, term, slot_ms`. The caller rounds the count
    /// up to a power of two (repeating a name), so that a handful of
    /// prepared statements serve every count.
    #[must_use]
    pub fn find_unfinished(&self, slots: usize) -> Statement {
        let mut sql = String::from("SELECT name, term, slot_ms FROM {table} WHERE name IN (");
        for i in 0..slots {
            if i > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&format!(":name[{i}]"));
        }
        sql.push_str(
            ") AND unfinished_slot_ms = slot_ms AND rerun_slot_ms < slot_ms AND expires_at_ms <= {now}",
        );
        render(
            &Template {
                sql: &sql,
                params: &[],
            },
            &self.table,
        )
    }
}

/// `template` for `table`, with MySQL's placeholders and clock.
fn render(template: &Template<'_>, table: &TableName) -> Statement {
    Statement::render(template, Placeholders::Question, table.quoted(), NOW_MS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mysql::table;

    #[test]
    fn each_template_declares_every_marker_it_has_and_no_other() {
        for template in [
            CLAIM_READ,
            CLAIM_TAKE,
            CLAIM_INSERT,
            RENEW,
            VERIFY,
            VERIFY_LOCKED,
            GUARD,
            RELEASE,
            INSTANT_READ,
            INSTANT_UPDATE,
            INSTANT_INSERT,
            FINISH,
            CLAIM_RERUN,
            LAST_INSTANT,
            FORCE_RELEASE,
            REQUEST_RESIGN,
            ADD_RESIGN_COLUMN,
            GET,
            LIST,
            NOW,
            CREATE_TABLE,
            TABLE_COLUMNS,
            TABLE_TRIGGERS,
        ] {
            template.assert_tidy();
        }
    }

    #[test]
    fn every_statement_is_rendered_with_the_table_and_nothing_else() {
        let s = Statements::new(table("t1").unwrap());
        for statement in [
            &s.claim_read,
            &s.claim_take,
            &s.claim_insert,
            &s.renew,
            &s.verify,
            &s.verify_locked,
            &s.guard,
            &s.release,
            &s.instant_read,
            &s.instant_update,
            &s.instant_insert,
            &s.finish,
            &s.claim_rerun,
            &s.last_instant,
            &s.get,
            &s.force_release,
            &s.list,
            &s.create_table,
        ] {
            let text = statement.text();
            assert!(text.contains("`t1`"), "{text}");
            assert!(!text.contains(['{', ':']), "{text}");
            assert_eq!(
                text.matches('?').count(),
                statement.params().len(),
                "{text}"
            );
        }
        assert_eq!(s.guard.params(), [Param::Name, Param::Token, Param::Term]);
        assert_eq!(s.claim_take.params().first(), Some(&Param::Token));
        let (update, read) = s.renew_many(2);
        assert!(
            update
                .text()
                .contains("name IN (?, ?) AND (name, holder) IN ((?, ?), (?, ?))"),
            "{}",
            update.text()
        );
        assert_eq!(update.params().first(), Some(&Param::LeaseMs));
        assert_eq!(update.params().len(), 7);
        assert_eq!(read.params().len(), 6);
        assert!(
            read.text()
                .starts_with("SELECT name, holder, (UNIX_TIMESTAMP()")
        );
        let find = s.find_unfinished(3);
        assert!(find.text().contains("IN (?, ?, ?)"), "{}", find.text());
        assert_eq!(s.table_columns.params(), [Param::Schema, Param::TableName]);
    }
}
