//! The protocol's statements, as functions of the quoted table name only.
//!
//! Every value is a bound parameter (`$1`, `$2`, ...), cast to its type so
//! that a statement prepares the same way whatever the client binds. The one
//! formatted thing is the table name, validated by [`table`] and quoted.
//!
//! # The clock
//!
//! `:now` is [`CLOCK_MS`]: `clock_timestamp()` (the time the expression is
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
//! A guarded transaction (see
//! [`PostgresStore::transaction`](crate::PostgresStore::transaction)) reads
//! the lease row `FOR KEY SHARE` and keeps that lock until it ends. Every
//! statement that can hand the name to someone else (the claim, the instant
//! claim, the second claim) first locks the row it is about to take
//! `FOR UPDATE`, which conflicts with `FOR KEY SHARE`, and so waits for
//! every guarded transaction still open on the row. The holder's own
//! renewals, releases and finishes are plain `UPDATE`s of non-key columns:
//! they take `FOR NO KEY UPDATE`, which does not conflict with
//! `FOR KEY SHARE`, so a guarded transaction never holds up its own
//! holder's renewals.
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

use std::error::Error;
use std::fmt;

use bytes::BytesMut;
use deadpool_postgres::Object;
use futures_util::StreamExt;
use lease_core::{BoxError, TableName, TableRules};
use tokio_postgres::Row;
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};

use crate::error::PostgresError;
use crate::store::PostgresStore;

/// The table the specification names, used unless the builder says otherwise.
pub const DEFAULT_TABLE: &str = "gst_leases";

/// The database's clock in whole UTC milliseconds, rounded down.
pub(crate) const CLOCK_MS: &str = "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/// What PostgreSQL accepts as the lease table: `table` or `schema.table`,
/// each part ASCII letters, digits and underscores, not starting with a
/// digit, at most 63 bytes (`NAMEDATALEN - 1`). Quoted in SQL, so case is
/// kept (`Leases` and `leases` are two tables).
pub(crate) const TABLE_RULES: TableRules = TableRules {
    schema: true,
    max_bytes: 63,
    dollar: false,
    leading_digit: false,
    reserved_prefix: None,
    quote: '"',
};

/// The lease table, validated under [`TABLE_RULES`].
pub(crate) type Table = TableName;

/// Validates `name` as the lease table.
pub(crate) fn table(name: &str) -> Result<Table, PostgresError> {
    TableName::parse(name, &TABLE_RULES).map_err(|e| PostgresError::InvalidTable {
        table: e.name,
        reason: e.reason,
    })
}

/// [`DEFAULT_TABLE`], valid under every rule.
pub(crate) fn default_table() -> Table {
    match table(DEFAULT_TABLE) {
        Ok(table) => table,
        Err(_) => unreachable!("the default table name is a plain identifier"),
    }
}

/// Every statement of the protocol, formatted once per store.
#[derive(Debug, Clone)]
pub(crate) struct Statements {
    pub(crate) table: Table,
    pub(crate) claim: String,
    pub(crate) renew: String,
    pub(crate) renew_many: String,
    pub(crate) verify: String,
    pub(crate) verify_locked: String,
    pub(crate) guard: String,
    pub(crate) release: String,
    pub(crate) claim_instant: String,
    pub(crate) finish: String,
    pub(crate) find_unfinished: String,
    pub(crate) claim_rerun: String,
    pub(crate) last_instant: String,
    pub(crate) get: String,
    pub(crate) force_release: String,
    pub(crate) list: String,
    pub(crate) create_table: String,
}

impl Statements {
    pub(crate) fn new(table: Table) -> Self {
        let t = table.quoted();
        Statements {
            claim: claim(t),
            renew: renew(t),
            renew_many: renew_many(t),
            verify: verify(t),
            verify_locked: verify_locked(t),
            guard: guard(t),
            release: release(t),
            claim_instant: claim_instant(t),
            finish: finish(t),
            find_unfinished: find_unfinished(t),
            claim_rerun: claim_rerun(t),
            last_instant: last_instant(t),
            get: get(t),
            force_release: force_release(t),
            list: list(t),
            create_table: create_table(t),
            table,
        }
    }
}

/// `SELECT :now`.
pub(crate) const NOW: &str =
    "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms";

/// The columns of the relation of that (quoted, maybe qualified) name on
/// the search path, each with whether it compares under a deterministic
/// collation (byte for byte; a nondeterministic ICU collation can make `JOB`
/// and `job` equal); no row when there is no such relation. `migrate` checks
/// them, and skips the DDL and its privileges, when there is one. The
/// catalog is readable by every role.
pub(crate) const TABLE_COLUMNS: &str = "SELECT a.attname::text, COALESCE(c.collisdeterministic, true) \
     FROM pg_catalog.pg_attribute a LEFT JOIN pg_catalog.pg_collation c ON c.oid = a.attcollation \
     WHERE a.attrelid = to_regclass($1::text) AND a.attnum > 0 AND NOT a.attisdropped";

/// Serialises concurrent `migrate` calls on one database (released at commit).
pub(crate) const MIGRATE_LOCK: &str = "SELECT pg_advisory_xact_lock($1::bigint)";

/// `$1 name, $2 holder, $3 instance, $4 lease_ms` -> `term` (no row: refused).
///
/// One statement: the insert of a name never claimed, or the update of an
/// expired lease, which locks the row `FOR UPDATE` first (see the module
/// docs). The update applies only to the row this statement locked: a row
/// another claimant inserted meanwhile, or one released after this
/// statement's snapshot (so not locked by it), is a refusal, never a claim
/// that slipped past a guarded transaction.
fn claim(t: &str) -> String {
    format!(
        "WITH now AS MATERIALIZED (SELECT {CLOCK_MS} AS ms), \
         locked AS MATERIALIZED ( \
           SELECT l.term FROM {t} AS l, now \
            WHERE l.name = $1::text AND l.expires_at_ms <= now.ms \
              FOR UPDATE OF l), \
         taken AS ( \
           UPDATE {t} AS l \
              SET holder = $2::text, instance = $3::text, term = l.term + 1, \
                  expires_at_ms = now.ms + $4::bigint \
             FROM now, locked \
            WHERE l.name = $1::text AND l.term = locked.term AND l.expires_at_ms <= now.ms \
           RETURNING l.term), \
         inserted AS ( \
           INSERT INTO {t} \
             (name, holder, instance, term, expires_at_ms, slot_ms, unfinished_slot_ms, rerun_slot_ms) \
           SELECT $1::text, $2::text, $3::text, 1, now.ms + $4::bigint, 0, 0, 0 FROM now \
            WHERE NOT EXISTS (SELECT 1 FROM {t} WHERE name = $1::text) \
           ON CONFLICT (name) DO NOTHING \
           RETURNING term) \
         SELECT term FROM taken UNION ALL SELECT term FROM inserted"
    )
}

/// `$1 name, $2 holder, $3 lease_ms` -> rows affected (0: lost).
fn renew(t: &str) -> String {
    format!(
        "WITH now AS MATERIALIZED (SELECT {CLOCK_MS} AS ms) \
         UPDATE {t} AS l SET expires_at_ms = now.ms + $3::bigint FROM now \
          WHERE l.name = $1::text AND l.holder = $2::text AND l.expires_at_ms > now.ms \
         RETURNING now.ms"
    )
}

/// `$1 names, $2 holders, $3 lease_ms` -> `name, holder, now` of every
/// lease renewed (one missing from the answer: lost). One statement for a
/// batch.
fn renew_many(t: &str) -> String {
    format!(
        "WITH now AS MATERIALIZED (SELECT {CLOCK_MS} AS ms) \
         UPDATE {t} AS l SET expires_at_ms = now.ms + $3::bigint \
           FROM now, unnest($1::text[], $2::text[]) AS r(name, holder) \
          WHERE l.name = r.name AND l.holder = r.holder AND l.expires_at_ms > now.ms \
         RETURNING l.name, l.holder, now.ms"
    )
}

/// `$1 name, $2 holder` -> `term` (no row: not held).
fn verify(t: &str) -> String {
    format!(
        "WITH now AS MATERIALIZED (SELECT {CLOCK_MS} AS ms) \
         SELECT l.term FROM {t} AS l, now \
          WHERE l.name = $1::text AND l.holder = $2::text AND l.expires_at_ms > now.ms"
    )
}

/// [`verify`], locking the row `FOR KEY SHARE` until the transaction ends:
/// the first statement of a guarded transaction. When the lease is held it
/// also sets `idle_in_transaction_session_timeout` to `$3` (milliseconds,
/// as text) for the transaction, so that a holder frozen inside it cannot
/// keep the row locked, and every claim of the name waiting, for longer;
/// and, on PostgreSQL 14 and later, `client_connection_check_interval` to
/// [`CONNECTION_CHECK_MS`], so that a statement of a transaction whose
/// connection was closed under it (abandoned behind a pooler, where no
/// cancel request is sent) stops within that interval and rolls back.
/// `$4` is the handle's term: a row of another tenure does not verify.
/// -> `term` (and the two settings, unread).
fn verify_locked(t: &str) -> String {
    format!(
        "WITH now AS MATERIALIZED (SELECT {CLOCK_MS} AS ms) \
         SELECT l.term, set_config('idle_in_transaction_session_timeout', $3::text, true), \
                CASE WHEN current_setting('server_version_num')::int >= 140000 \
                     THEN set_config('client_connection_check_interval', \
                                     '{CONNECTION_CHECK_MS}', true) END \
           FROM {t} AS l, now \
          WHERE l.name = $1::text AND l.holder = $2::text AND l.term = $4::bigint \
            AND l.expires_at_ms > now.ms \
            FOR KEY SHARE OF l"
    )
}

/// How often, in milliseconds, a guarded transaction's statement checks
/// that its client is still connected (`client_connection_check_interval`,
/// PostgreSQL 14 and later).
pub(crate) const CONNECTION_CHECK_MS: u32 = 500;

/// The guard for other drivers (`PostgresStore::guard_statement`): the
/// verification of `verify_locked` without the session setting.
/// `$1 name, $2 holder, $3 term` -> `term`, no row when lost.
fn guard(t: &str) -> String {
    format!(
        "SELECT l.term FROM {t} AS l \
          WHERE l.name = $1::text AND l.holder = $2::text AND l.term = $3::bigint \
            AND l.expires_at_ms > {CLOCK_MS} \
            FOR KEY SHARE OF l"
    )
}

/// `$1 name, $2 holder` -> rows affected (0: already gone).
fn release(t: &str) -> String {
    format!("UPDATE {t} SET expires_at_ms = 0 WHERE name = $1::text AND holder = $2::text")
}

/// `$1 name, $2 holder, $3 instance, $4 slot_ms, $5 lease_ms` ->
/// `term, old slot_ms, old unfinished_slot_ms, old rerun_slot_ms` (no row:
/// refused; old values NULL: the row was inserted).
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
fn claim_instant(t: &str) -> String {
    format!(
        "WITH now AS MATERIALIZED (SELECT {CLOCK_MS} AS ms), \
         old AS MATERIALIZED ( \
           SELECT l.term, l.slot_ms, l.unfinished_slot_ms, l.rerun_slot_ms \
             FROM {t} AS l, now \
            WHERE l.name = $1::text AND l.expires_at_ms <= now.ms AND l.slot_ms < $4::bigint \
              FOR UPDATE OF l), \
         taken AS ( \
           UPDATE {t} AS l \
              SET holder = $2::text, instance = $3::text, term = l.term + 1, \
                  expires_at_ms = now.ms + $5::bigint, \
                  slot_ms = $4::bigint, unfinished_slot_ms = $4::bigint \
             FROM now, old \
            WHERE l.name = $1::text AND l.term = old.term \
              AND l.expires_at_ms <= now.ms AND l.slot_ms < $4::bigint \
           RETURNING l.term), \
         inserted AS ( \
           INSERT INTO {t} \
             (name, holder, instance, term, expires_at_ms, slot_ms, unfinished_slot_ms, rerun_slot_ms) \
           SELECT $1::text, $2::text, $3::text, 1, now.ms + $5::bigint, $4::bigint, $4::bigint, 0 \
             FROM now \
            WHERE NOT EXISTS (SELECT 1 FROM {t} WHERE name = $1::text) \
           ON CONFLICT (name) DO NOTHING \
           RETURNING term), \
         claimed AS (SELECT term FROM taken UNION ALL SELECT term FROM inserted) \
         SELECT claimed.term, old.slot_ms, old.unfinished_slot_ms, old.rerun_slot_ms \
           FROM claimed LEFT JOIN old ON true"
    )
}

/// `$1 name, $2 holder (NULL: known lost), $3 slot_ms, $4 passed_ms` ->
/// `released` (no row: not recorded).
///
/// Both statements of the specification folded into one: the holder's
/// release with `passed` taken along, or else the record of the end without
/// the lease, which only applies while the instant is still the unfinished
/// one.
fn finish(t: &str) -> String {
    format!(
        "WITH now AS MATERIALIZED (SELECT {CLOCK_MS} AS ms) \
         UPDATE {t} AS l SET \
           expires_at_ms = CASE WHEN l.holder = $2::text THEN 0 ELSE l.expires_at_ms END, \
           unfinished_slot_ms = 0, \
           slot_ms = CASE WHEN l.holder = $2::text AND $4::bigint > l.slot_ms \
                               AND $4::bigint <= now.ms \
                          THEN $4::bigint ELSE l.slot_ms END \
           FROM now \
          WHERE l.name = $1::text \
            AND (l.holder = $2::text OR l.unfinished_slot_ms = $3::bigint) \
         RETURNING coalesce(l.holder = $2::text, false) AS released"
    )
}

/// `$1 names` -> `name, term, slot_ms` rows.
fn find_unfinished(t: &str) -> String {
    format!(
        "WITH now AS MATERIALIZED (SELECT {CLOCK_MS} AS ms) \
         SELECT l.name, l.term, l.slot_ms FROM {t} AS l, now \
          WHERE l.name = ANY($1::text[]) AND l.unfinished_slot_ms = l.slot_ms \
            AND l.rerun_slot_ms < l.slot_ms AND l.expires_at_ms <= now.ms"
    )
}

/// `$1 name, $2 term, $3 holder, $4 instance, $5 lease_ms` -> rows affected.
///
/// Locks the row `FOR UPDATE` when it is claimable a second time, like every
/// claim, then updates it.
fn claim_rerun(t: &str) -> String {
    format!(
        "WITH now AS MATERIALIZED (SELECT {CLOCK_MS} AS ms), \
         locked AS MATERIALIZED ( \
           SELECT l.name FROM {t} AS l, now \
            WHERE l.name = $1::text AND l.term = $2::bigint \
              AND l.unfinished_slot_ms = l.slot_ms AND l.rerun_slot_ms < l.slot_ms \
              AND l.expires_at_ms <= now.ms \
              FOR UPDATE OF l) \
         UPDATE {t} AS l \
            SET holder = $3::text, instance = $4::text, term = l.term + 1, \
                expires_at_ms = now.ms + $5::bigint, rerun_slot_ms = l.slot_ms \
           FROM now, locked \
          WHERE l.name = locked.name AND l.term = $2::bigint \
            AND l.unfinished_slot_ms = l.slot_ms AND l.rerun_slot_ms < l.slot_ms \
            AND l.expires_at_ms <= now.ms"
    )
}

/// `$1 name` -> `slot_ms` (no row: never claimed).
fn last_instant(t: &str) -> String {
    format!("SELECT slot_ms FROM {t} WHERE name = $1::text")
}

/// The columns `get` and `list` read, the database's now fifth (never the
/// holder token).
const INFO_COLUMNS: &str = "name, instance, term, expires_at_ms, \
     floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint, \
     slot_ms, unfinished_slot_ms, rerun_slot_ms";

/// `$1 name, $2 term` -> rows changed (1: freed).
fn force_release(t: &str) -> String {
    format!(
        "UPDATE {t} SET expires_at_ms = 0 WHERE name = $1::text AND term = $2::bigint \
           AND expires_at_ms > floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint"
    )
}

/// `$1 name` -> the row's [`INFO_COLUMNS`].
fn get(t: &str) -> String {
    format!("SELECT {INFO_COLUMNS} FROM {t} WHERE name = $1::text")
}

/// `$1 prefix, $2 limit` -> the [`INFO_COLUMNS`] of the rows from `prefix`
/// on, by name (the column's collation is "C": byte order, so the names that
/// start with `prefix` come first and the caller keeps those).
fn list(t: &str) -> String {
    format!("SELECT {INFO_COLUMNS} FROM {t} WHERE name >= $1::text ORDER BY name LIMIT $2::bigint")
}

/// The table, created if missing. See [`crate::schema`].
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
           rerun_slot_ms bigint NOT NULL DEFAULT 0)",
        max = lease_core::MAX_NAME_BYTES,
    )
}

/// How a [`PostgresStore`] sends its protocol statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum StatementMode {
    /// Named prepared statements, prepared once per connection and cached
    /// (the default): each later use is one round trip with the statement's
    /// name. They live on the server connection that prepared them, so they
    /// break behind a pooler that hands each transaction another server
    /// connection (PgBouncer in transaction pooling mode before 1.21).
    #[default]
    Prepared,
    /// Unnamed statements with typed parameters (`query_typed`): parse,
    /// bind and execute in one round trip, nothing left on the server
    /// connection, so the store works behind PgBouncer in transaction
    /// pooling mode. The server parses and plans every statement. URL
    /// parameter `statement_mode=unnamed`.
    Unnamed,
}

/// A holder token as a statement parameter, encoded exactly as the `&str`
/// it wraps.
///
/// tokio-postgres logs every statement it executes with its parameters'
/// `Debug` output (the `log` crate, target `tokio_postgres::query`, debug
/// level). The token is the tenure's credential: whoever has it can renew
/// or release the lease. So its `Debug` shows a placeholder.
#[derive(Clone, Copy)]
pub(crate) struct TokenParam<'a>(pub(crate) &'a str);

impl fmt::Debug for TokenParam<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<holder token>")
    }
}

impl ToSql for TokenParam<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        self.0.to_sql(ty, out)
    }

    fn accepts(ty: &Type) -> bool {
        <&str as ToSql>::accepts(ty)
    }

    to_sql_checked!();
}

impl PostgresStore {
    pub(crate) async fn client(&self) -> Result<Object, BoxError> {
        Ok(self.inner.pool.get().await?)
    }

    /// Runs `sql` with typed `params` and returns its rows, as the
    /// [statement mode](StatementMode) says.
    pub(crate) async fn rows(
        &self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>, BoxError> {
        let client = self.client().await?;
        Ok(query(&client, self.inner.statement_mode, sql, params).await?)
    }

    /// The first row of [`rows`](Self::rows), if any (the protocol's
    /// statements return at most one where this is used).
    pub(crate) async fn row(
        &self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Option<Row>, BoxError> {
        Ok(self.rows(sql, params).await?.into_iter().next())
    }

    /// Runs `sql` with typed `params` and returns the rows it changed.
    pub(crate) async fn affected(
        &self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<u64, BoxError> {
        let client = self.client().await?;
        match self.inner.statement_mode {
            StatementMode::Unnamed => {
                let stream = client
                    .query_typed_raw(sql, params.iter().map(|(v, t)| (*v, t.clone())))
                    .await?;
                let mut stream = std::pin::pin!(stream);
                while let Some(row) = stream.next().await {
                    let _ = row?;
                }
                Ok(stream.rows_affected().unwrap_or(0))
            }
            StatementMode::Prepared => {
                let stmt = client.prepare_cached(sql).await?;
                let values: Vec<&(dyn ToSql + Sync)> = params.iter().map(|(v, _)| *v).collect();
                Ok(client.execute(&stmt, &values).await?)
            }
        }
    }
}

/// Runs `sql` on `client` with typed `params`, as `mode` says: a named
/// statement prepared once and cached, or an unnamed one.
pub(crate) async fn query(
    client: &deadpool_postgres::ClientWrapper,
    mode: StatementMode,
    sql: &str,
    params: &[(&(dyn ToSql + Sync), Type)],
) -> Result<Vec<Row>, tokio_postgres::Error> {
    match mode {
        StatementMode::Unnamed => client.query_typed(sql, params).await,
        StatementMode::Prepared => {
            let stmt = client.prepare_cached(sql).await?;
            let values: Vec<&(dyn ToSql + Sync)> = params.iter().map(|(v, _)| *v).collect();
            client.query(&stmt, &values).await
        }
    }
}

/// A term as the database stores it (`bigint`) to the protocol's `u64`.
pub(crate) use lease_core::term_from_db as term;

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
        assert_eq!(default_table(), table(DEFAULT_TABLE).unwrap());
    }

    #[test]
    fn statements_name_only_the_quoted_table() {
        let s = Statements::new(table("my_t").unwrap());
        for stmt in [
            &s.claim,
            &s.renew,
            &s.renew_many,
            &s.verify,
            &s.claim_instant,
            &s.finish,
        ] {
            assert!(stmt.contains("\"my_t\""), "{stmt}");
            assert!(!stmt.contains("gst_leases"), "{stmt}");
        }
    }

    #[test]
    fn debug_hides_the_token_and_encoding_keeps_it() {
        let token = TokenParam("t0k3n-secret");
        assert_eq!(
            format!("{token:?} {:?}", [token]),
            "<holder token> [<holder token>]"
        );
        let (mut a, mut b) = (BytesMut::new(), BytesMut::new());
        let _ = token.to_sql(&Type::TEXT, &mut a).unwrap();
        let _ = "t0k3n-secret".to_sql(&Type::TEXT, &mut b).unwrap();
        assert_eq!(a, b);
    }
}
