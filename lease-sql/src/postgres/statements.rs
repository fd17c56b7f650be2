//! PostgreSQL's statements: each written once, rendered for one table.

use lease_core::TableName;

use super::CLOCK_MS;
use crate::statement::{Param, Placeholders, Statement, Template};

/// The claim: the insert of a name never claimed, or the update of an
/// expired lease, which locks the row `FOR UPDATE` first (see the module
/// docs) -> `term` (no row: refused). The update applies only to the row
/// this statement locked: a row another claimant inserted meanwhile, or
/// one released after this statement's snapshot (so not locked by it), is
/// a refusal, never a claim that slipped past a guarded transaction.
const CLAIM: Template<'_> = Template {
    sql: "WITH now AS MATERIALIZED (SELECT {now} AS ms), \
         locked AS MATERIALIZED ( \
           SELECT l.term FROM {table} AS l, now \
            WHERE l.name = :name AND l.expires_at_ms <= now.ms \
              FOR UPDATE OF l), \
         taken AS ( \
           UPDATE {table} AS l \
              SET holder = :token, instance = :instance, term = l.term + 1, \
                  expires_at_ms = now.ms + :lease_ms \
             FROM now, locked \
            WHERE l.name = :name AND l.term = locked.term AND l.expires_at_ms <= now.ms \
           RETURNING l.term), \
         inserted AS ( \
           INSERT INTO {table} \
             (name, holder, instance, term, expires_at_ms, slot_ms, unfinished_slot_ms, rerun_slot_ms) \
           SELECT :name, :token, :instance, 1, now.ms + :lease_ms, 0, 0, 0 FROM now \
            WHERE NOT EXISTS (SELECT 1 FROM {table} WHERE name = :name) \
           ON CONFLICT (name) DO NOTHING \
           RETURNING term) \
         SELECT term FROM taken UNION ALL SELECT term FROM inserted",
    params: &[Param::Name, Param::Token, Param::Instance, Param::LeaseMs],
};

/// The renewal -> the database's now, and whether the holder was asked to
/// resign (no row: lost).
const RENEW: Template<'_> = Template {
    sql: "WITH now AS MATERIALIZED (SELECT {now} AS ms) \
         UPDATE {table} AS l SET expires_at_ms = now.ms + :lease_ms FROM now \
          WHERE l.name = :name AND l.holder = :token AND l.expires_at_ms > now.ms \
         RETURNING now.ms, l.resign_term = l.term",
    params: &[Param::Name, Param::Token, Param::LeaseMs],
};

/// A batch of renewals in one statement, on arrays of names and tokens ->
/// `name, holder, now` of every lease renewed (one missing from the
/// answer: lost).
const RENEW_MANY: Template<'_> = Template {
    sql: "WITH now AS MATERIALIZED (SELECT {now} AS ms) \
         UPDATE {table} AS l SET expires_at_ms = now.ms + :lease_ms \
           FROM now, unnest(:names, :tokens) AS r(name, holder) \
          WHERE l.name = r.name AND l.holder = r.holder AND l.expires_at_ms > now.ms \
         RETURNING l.name, l.holder, now.ms, l.resign_term = l.term",
    params: &[Param::Names, Param::Tokens, Param::LeaseMs],
};

/// The verification -> `term` (no row: not held).
const VERIFY: Template<'_> = Template {
    sql: "WITH now AS MATERIALIZED (SELECT {now} AS ms) \
         SELECT l.term FROM {table} AS l, now \
          WHERE l.name = :name AND l.holder = :token AND l.expires_at_ms > now.ms",
    params: &[Param::Name, Param::Token],
};

/// [`VERIFY`] at the handle's term, locking the row `FOR KEY SHARE` until
/// the transaction ends: the first statement of `lease-postgres`'s guarded
/// transaction. When the lease is held it also sets
/// `idle_in_transaction_session_timeout` to `:idle_ms` for the
/// transaction, so that a holder frozen inside it cannot keep the row
/// locked, and every claim of the name waiting, for longer; and, on
/// PostgreSQL 14 and later, `client_connection_check_interval` to
/// [`CONNECTION_CHECK_MS`], so that a statement of a transaction whose
/// connection was closed under it (abandoned behind a pooler, where no
/// cancel request is sent) stops within that interval and rolls back. A
/// row of another tenure does not verify. `$1 name, $2 token, $3 idle_ms,
/// $4 term` -> `term` (and the two settings, unread).
const VERIFY_LOCKED: Template<'_> = Template {
    sql: "WITH now AS MATERIALIZED (SELECT {now} AS ms) \
         SELECT l.term, set_config('idle_in_transaction_session_timeout', :idle_ms, true), \
                CASE WHEN current_setting('server_version_num')::int >= 140000 \
                     THEN set_config('client_connection_check_interval', '500', true) END \
           FROM {table} AS l, now \
          WHERE l.name = :name AND l.holder = :token AND l.term = :term \
            AND l.expires_at_ms > now.ms \
            FOR KEY SHARE OF l",
    params: &[Param::Name, Param::Token, Param::IdleMs, Param::Term],
};

/// How often, in milliseconds, a guarded transaction's statement checks
/// that its client is still connected (`client_connection_check_interval`,
/// PostgreSQL 14 and later): the `'500'` of the guarded transaction's
/// verification, [`Statements::verify_locked`].
pub const CONNECTION_CHECK_MS: u32 = 500;

/// The guard for other drivers ([`GuardStatement`](lease_core::GuardStatement)):
/// the verification of [`VERIFY_LOCKED`] without the session setting.
/// `$1 name, $2 token, $3 term` -> `term`, no row when lost.
const GUARD: Template<'_> = Template {
    sql: "SELECT l.term FROM {table} AS l \
          WHERE l.name = :name AND l.holder = :token AND l.term = :term \
            AND l.expires_at_ms > {now} \
            FOR KEY SHARE OF l",
    params: &[Param::Name, Param::Token, Param::Term],
};

/// The release -> rows affected (0: already gone).
const RELEASE: Template<'_> = Template {
    sql: "UPDATE {table} SET expires_at_ms = 0 WHERE name = :name AND holder = :token",
    params: &[Param::Name, Param::Token],
};

/// The instant claim -> `term, old slot_ms, old unfinished_slot_ms, old
/// rerun_slot_ms` (no row: refused; old values NULL: the row was
/// inserted).
///
/// One statement in place of the specification's read-then-write pair. The
/// `old` expression locks the row `FOR UPDATE` when it is claimable
/// (expired, and an earlier instant on record); under READ COMMITTED a
/// claimant that waited for the lock reads the row as the lock holder left
/// it, so `old` is exactly what this claim overwrites: nobody can change the
/// row between that read and this statement's own update. The update also
/// requires the term `old` read, the spec's term check: a row this
/// statement did not lock (inserted by a racing claimant, or changed after
/// the snapshot) is refused, never claimed with a wrong account of what was
/// given up. Of racing claimants exactly one wins: the others wait for its
/// lock and then find the lease held, or lose the insert race.
const CLAIM_INSTANT: Template<'_> = Template {
    sql: "WITH now AS MATERIALIZED (SELECT {now} AS ms), \
         old AS MATERIALIZED ( \
           SELECT l.term, l.slot_ms, l.unfinished_slot_ms, l.rerun_slot_ms \
             FROM {table} AS l, now \
            WHERE l.name = :name AND l.expires_at_ms <= now.ms AND l.slot_ms < :instant \
              FOR UPDATE OF l), \
         taken AS ( \
           UPDATE {table} AS l \
              SET holder = :token, instance = :instance, term = l.term + 1, \
                  expires_at_ms = now.ms + :lease_ms, \
                  slot_ms = :instant, unfinished_slot_ms = :instant \
             FROM now, old \
            WHERE l.name = :name AND l.term = old.term \
              AND l.expires_at_ms <= now.ms AND l.slot_ms < :instant \
           RETURNING l.term), \
         inserted AS ( \
           INSERT INTO {table} \
             (name, holder, instance, term, expires_at_ms, slot_ms, unfinished_slot_ms, rerun_slot_ms) \
           SELECT :name, :token, :instance, 1, now.ms + :lease_ms, :instant, :instant, 0 \
             FROM now \
            WHERE NOT EXISTS (SELECT 1 FROM {table} WHERE name = :name) \
           ON CONFLICT (name) DO NOTHING \
           RETURNING term), \
         claimed AS (SELECT term FROM taken UNION ALL SELECT term FROM inserted) \
         SELECT claimed.term, old.slot_ms, old.unfinished_slot_ms, old.rerun_slot_ms \
           FROM claimed LEFT JOIN old ON true",
    params: &[
        Param::Name,
        Param::Token,
        Param::Instance,
        Param::InstantMs,
        Param::LeaseMs,
    ],
};

/// The end of a round -> `released` (no row: not recorded). `:token` is
/// NULL when the handle is known lost.
///
/// Both statements of the specification folded into one: the holder's
/// release with `passed` taken along, or else the record of the end without
/// the lease, which only applies while the instant is still the unfinished
/// one.
const FINISH: Template<'_> = Template {
    sql: "WITH now AS MATERIALIZED (SELECT {now} AS ms) \
         UPDATE {table} AS l SET \
           expires_at_ms = CASE WHEN l.holder = :token THEN 0 ELSE l.expires_at_ms END, \
           unfinished_slot_ms = 0, \
           slot_ms = CASE WHEN l.holder = :token AND :passed > l.slot_ms \
                               AND :passed <= now.ms \
                          THEN :passed ELSE l.slot_ms END \
           FROM now \
          WHERE l.name = :name \
            AND (l.holder = :token OR l.unfinished_slot_ms = :instant) \
         RETURNING coalesce(l.holder = :token, false) AS released",
    params: &[Param::Name, Param::Token, Param::InstantMs, Param::PassedMs],
};

/// The unfinished instants among an array of names -> `name, term,
/// slot_ms` rows.
const FIND_UNFINISHED: Template<'_> = Template {
    sql: "WITH now AS MATERIALIZED (SELECT {now} AS ms) \
         SELECT l.name, l.term, l.slot_ms FROM {table} AS l, now \
          WHERE l.name = ANY(:names) AND l.unfinished_slot_ms = l.slot_ms \
            AND l.rerun_slot_ms < l.slot_ms AND l.expires_at_ms <= now.ms",
    params: &[Param::Names],
};

/// The second claim of an unfinished instant, at the term found -> rows
/// affected. Locks the row `FOR UPDATE` when it is claimable a second time,
/// like every claim, then updates it.
const CLAIM_RERUN: Template<'_> = Template {
    sql: "WITH now AS MATERIALIZED (SELECT {now} AS ms), \
         locked AS MATERIALIZED ( \
           SELECT l.name FROM {table} AS l, now \
            WHERE l.name = :name AND l.term = :term \
              AND l.unfinished_slot_ms = l.slot_ms AND l.rerun_slot_ms < l.slot_ms \
              AND l.expires_at_ms <= now.ms \
              FOR UPDATE OF l) \
         UPDATE {table} AS l \
            SET holder = :token, instance = :instance, term = l.term + 1, \
                expires_at_ms = now.ms + :lease_ms, rerun_slot_ms = l.slot_ms \
           FROM now, locked \
          WHERE l.name = locked.name AND l.term = :term \
            AND l.unfinished_slot_ms = l.slot_ms AND l.rerun_slot_ms < l.slot_ms \
            AND l.expires_at_ms <= now.ms",
    params: &[
        Param::Name,
        Param::Term,
        Param::Token,
        Param::Instance,
        Param::LeaseMs,
    ],
};

/// The last instant on record -> `slot_ms` (no row: never claimed).
const LAST_INSTANT: Template<'_> = Template {
    sql: "SELECT slot_ms FROM {table} WHERE name = :name",
    params: &[Param::Name],
};

/// The columns `get` and `list` read, the database's now fifth (never the
/// holder token).
macro_rules! info_columns {
    () => {
        "name, instance, term, expires_at_ms, {now}, slot_ms, unfinished_slot_ms, rerun_slot_ms"
    };
}

/// A forced release at the term read -> rows changed (1: freed).
const FORCE_RELEASE: Template<'_> = Template {
    sql: "UPDATE {table} SET expires_at_ms = 0 WHERE name = :name AND term = :term \
           AND expires_at_ms > {now}",
    params: &[Param::Name, Param::Term],
};

/// A resign request at the term read -> rows changed (1: asked).
const REQUEST_RESIGN: Template<'_> = Template {
    sql: "UPDATE {table} SET resign_term = term WHERE name = :name AND term = :term \
           AND expires_at_ms > {now}",
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

/// The rows from `:prefix` on, by name -> the info columns (the column's
/// collation is "C": byte order, so the names that start with the prefix
/// come first and the caller keeps those).
const LIST: Template<'_> = Template {
    sql: concat!(
        "SELECT ",
        info_columns!(),
        " FROM {table} WHERE name >= :prefix ORDER BY name LIMIT :limit"
    ),
    params: &[Param::Prefix, Param::Limit],
};

/// The clock read.
const NOW: Template<'_> = Template {
    sql: "SELECT {now} AS now_ms",
    params: &[],
};

/// The columns of the relation of that (quoted, maybe qualified) name on
/// the search path, each with whether it compares under a deterministic
/// collation (byte for byte; a nondeterministic ICU collation can make `JOB`
/// and `job` equal); no row when there is no such relation. `migrate` checks
/// them, and skips the DDL and its privileges, when there is one. The
/// catalog is readable by every role.
const TABLE_COLUMNS: Template<'_> = Template {
    sql: "SELECT a.attname::text, COALESCE(c.collisdeterministic, true) \
     FROM pg_catalog.pg_attribute a LEFT JOIN pg_catalog.pg_collation c ON c.oid = a.attcollation \
     WHERE a.attrelid = to_regclass(:relation) AND a.attnum > 0 AND NOT a.attisdropped",
    params: &[Param::Relation],
};

/// Serialises concurrent `migrate` calls on one database (released at
/// commit): see [`migrate_lock_key`].
const MIGRATE_LOCK: Template<'_> = Template {
    sql: "SELECT pg_advisory_xact_lock(:key)",
    params: &[Param::LockKey],
};

/// The table, created if missing. `name` compares byte for byte (`COLLATE
/// "C"`) and is at most [`lease_core::MAX_NAME_BYTES`] bytes.
fn create_table(t: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {t} ( \
           name text COLLATE \"C\" NOT NULL PRIMARY KEY \
             CHECK (octet_length(name) BETWEEN 1 AND {max}), \
           holder text NOT NULL, \
           instance text NOT NULL, \
           term bigint NOT NULL, \
           expires_at_ms bigint NOT NULL, \
           slot_ms bigint NOT NULL DEFAULT 0, \
           unfinished_slot_ms bigint NOT NULL DEFAULT 0, \
           rerun_slot_ms bigint NOT NULL DEFAULT 0, \
           resign_term bigint NOT NULL DEFAULT 0)",
        max = lease_core::MAX_NAME_BYTES,
    )
}

/// The column added since the first schema, added to a table that lacks it
/// (`migrate` on a table created by an earlier version).
fn add_resign_column(t: &str) -> String {
    format!("ALTER TABLE {t} ADD COLUMN IF NOT EXISTS resign_term bigint NOT NULL DEFAULT 0")
}

/// The advisory lock key `migrate` takes for a table: FNV-1a (64 bits) of
/// `lease-postgres:migrate:` followed by the quoted table name. Stable across
/// processes and versions, so every replica takes the same lock.
#[must_use]
pub fn migrate_lock_key(quoted_table: &str) -> i64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = OFFSET;
    for byte in b"lease-postgres:migrate:"
        .iter()
        .chain(quoted_table.as_bytes())
    {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(PRIME);
    }
    i64::from_ne_bytes(hash.to_ne_bytes())
}

/// Every statement of the protocol for one table, rendered once per store.
///
/// ```
/// use lease_sql::postgres::{Statements, table};
/// use lease_sql::Param;
///
/// let sql = Statements::new(table("app.leases")?);
/// assert!(sql.guard.text().starts_with("SELECT l.term FROM \"app\".\"leases\" AS l"));
/// assert_eq!(sql.guard.params(), [Param::Name, Param::Token, Param::Term]);
/// # Ok::<(), lease_core::TableNameError>(())
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Statements {
    table: TableName,
    /// The key of [`migrate_lock`](Self::migrate_lock) for this table.
    pub migrate_lock_key: i64,
    /// `name, token, instance, lease_ms` -> `term` (no row: refused).
    pub claim: Statement,
    /// `name, token, lease_ms` -> the database's now, and whether a resign
    /// was requested at the holder's term (no row: lost).
    pub renew: Statement,
    /// `names, tokens, lease_ms` -> `name, holder, now, resign` of each
    /// renewed.
    pub renew_many: Statement,
    /// `name, token` -> `term` (no row: not held).
    pub verify: Statement,
    /// `name, token, idle_ms, term` -> `term, _`, the row locked `FOR KEY
    /// SHARE` (no row: lost): the guarded transaction's first statement.
    pub verify_locked: Statement,
    /// `name, token, term` -> `term`, the row locked `FOR KEY SHARE`: the
    /// guard statement for other drivers.
    pub guard: Statement,
    /// `name, token` -> rows affected.
    pub release: Statement,
    /// `name, token, instance, instant, lease_ms` -> `term, old slot_ms,
    /// old unfinished_slot_ms, old rerun_slot_ms` (no row: refused).
    pub claim_instant: Statement,
    /// `name, token (NULL: none), instant, passed` -> `released` (no row:
    /// not recorded).
    pub finish: Statement,
    /// `names` -> `name, term, slot_ms`.
    pub find_unfinished: Statement,
    /// `name, term, token, instance, lease_ms` -> rows affected.
    pub claim_rerun: Statement,
    /// `name` -> `slot_ms`.
    pub last_instant: Statement,
    /// `name, term` -> rows affected.
    pub force_release: Statement,
    /// `name, term` -> rows affected (1: the holder at `term` is asked to
    /// resign).
    pub request_resign: Statement,
    /// `name` -> `name, instance, term, expires_at_ms, now, slot_ms,
    /// unfinished_slot_ms, rerun_slot_ms`.
    pub get: Statement,
    /// `prefix, limit` -> the columns of `get`, by name from the prefix on.
    pub list: Statement,
    /// -> the database's now.
    pub now: Statement,
    /// `CREATE TABLE IF NOT EXISTS` of the table.
    pub create_table: Statement,
    /// `ALTER TABLE .. ADD COLUMN IF NOT EXISTS resign_term`: `migrate` on
    /// a table of the first schema.
    pub add_resign_column: Statement,
    /// `relation` -> `column name, deterministic collation` of each column.
    pub table_columns: Statement,
    /// `key` -> takes the transaction-level advisory lock of `migrate`.
    pub migrate_lock: Statement,
}

impl Statements {
    /// The statements of `table`.
    #[must_use]
    pub fn new(table: TableName) -> Self {
        let t = table.quoted();
        let r = |template: &Template<'_>| {
            Statement::render(template, Placeholders::Dollar, t, CLOCK_MS)
        };
        Statements {
            migrate_lock_key: migrate_lock_key(t),
            claim: r(&CLAIM),
            renew: r(&RENEW),
            renew_many: r(&RENEW_MANY),
            verify: r(&VERIFY),
            verify_locked: r(&VERIFY_LOCKED),
            guard: r(&GUARD),
            release: r(&RELEASE),
            claim_instant: r(&CLAIM_INSTANT),
            finish: r(&FINISH),
            find_unfinished: r(&FIND_UNFINISHED),
            claim_rerun: r(&CLAIM_RERUN),
            last_instant: r(&LAST_INSTANT),
            force_release: r(&FORCE_RELEASE),
            request_resign: r(&REQUEST_RESIGN),
            get: r(&GET),
            list: r(&LIST),
            now: r(&NOW),
            create_table: Statement::plain(create_table(t)),
            add_resign_column: Statement::plain(add_resign_column(t)),
            table_columns: r(&TABLE_COLUMNS),
            migrate_lock: r(&MIGRATE_LOCK),
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
            &self.claim,
            &self.renew,
            &self.renew_many,
            &self.verify,
            &self.verify_locked,
            &self.guard,
            &self.release,
            &self.claim_instant,
            &self.finish,
            &self.find_unfinished,
            &self.claim_rerun,
            &self.last_instant,
            &self.force_release,
            &self.request_resign,
            &self.get,
            &self.list,
            &self.now,
            &self.create_table,
            &self.add_resign_column,
            &self.table_columns,
            &self.migrate_lock,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postgres::{default_table, table};

    #[test]
    fn the_guards_connection_check_interval_is_the_constant() {
        let text = format!("'client_connection_check_interval', '{CONNECTION_CHECK_MS}'");
        assert!(VERIFY_LOCKED.sql.contains(&text), "{}", VERIFY_LOCKED.sql);
    }

    const TEMPLATES: [Template<'static>; 19] = [
        CLAIM,
        RENEW,
        RENEW_MANY,
        VERIFY,
        VERIFY_LOCKED,
        GUARD,
        RELEASE,
        CLAIM_INSTANT,
        FINISH,
        FIND_UNFINISHED,
        CLAIM_RERUN,
        LAST_INSTANT,
        FORCE_RELEASE,
        REQUEST_RESIGN,
        GET,
        LIST,
        NOW,
        TABLE_COLUMNS,
        MIGRATE_LOCK,
    ];

    #[test]
    fn each_template_numbers_every_marker_it_has_and_no_other() {
        for template in TEMPLATES {
            template.assert_tidy();
        }
    }

    #[test]
    fn statements_name_only_the_quoted_table_and_cast_every_value() {
        let s = Statements::new(table("my_t").unwrap());
        for stmt in [
            &s.claim,
            &s.renew,
            &s.renew_many,
            &s.verify,
            &s.claim_instant,
            &s.finish,
        ] {
            assert!(stmt.text().contains("\"my_t\""), "{}", stmt.text());
            assert!(!stmt.text().contains("gst_leases"), "{}", stmt.text());
            assert!(!stmt.text().contains(['{', '}']), "{}", stmt.text());
        }
        assert!(s.claim_instant.text().contains("l.slot_ms < $4::bigint"));
        assert!(
            s.renew_many
                .text()
                .contains("unnest($1::text[], $2::text[])")
        );
        assert_eq!(
            s.verify_locked.params(),
            [Param::Name, Param::Token, Param::IdleMs, Param::Term]
        );
        assert_eq!(
            s.now.text(),
            "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms"
        );
    }

    #[test]
    fn lock_key_is_stable_and_per_table() {
        assert_ne!(migrate_lock_key("\"a\""), migrate_lock_key("\"b\""));
        // The value is part of the protocol between replicas: never change it.
        assert_eq!(
            migrate_lock_key("\"gst_leases\""),
            6_386_073_706_372_440_378
        );
        assert_eq!(
            Statements::new(default_table()).migrate_lock_key,
            6_386_073_706_372_440_378
        );
    }
}
