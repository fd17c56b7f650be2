//! The SQL texts of the store, for other drivers' implementations of the
//! same protocol (`lease-sqlx`). Not a stable interface: the texts follow
//! this crate's version, and so do their parameters (see each statement's
//! function in `sql.rs`).

use crate::error::PostgresError;
use crate::sql::{MIGRATE_LOCK, NOW, Statements};

/// Every statement of the store for one table, with its parameters in the
/// order they bind (`$1`, `$2`, ...).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SqlTexts {
    /// `name, holder, instance, lease_ms` -> `term` (no row: refused).
    pub claim: String,
    /// `name, holder, lease_ms` -> the database's now (no row: lost).
    pub renew: String,
    /// `names text[], holders text[], lease_ms` -> `name, holder, now` renewed.
    pub renew_many: String,
    /// `name, holder` -> `term` (no row: not held).
    pub verify: String,
    /// The guard statement: `name, holder, term` -> `term`, no row when lost.
    pub guard: String,
    /// `name, holder` -> rows affected.
    pub release: String,
    /// `name, holder, instance, slot_ms, lease_ms` -> `term, old slot_ms,
    /// old unfinished_slot_ms, old rerun_slot_ms` (no row: refused).
    pub claim_instant: String,
    /// `name, holder (NULL: none), slot_ms, passed_ms` -> `released` (no
    /// row: not recorded).
    pub finish: String,
    /// `names text[]` -> `name, term, slot_ms`.
    pub find_unfinished: String,
    /// `name, term, holder, instance, lease_ms` -> rows affected.
    pub claim_rerun: String,
    /// `name` -> `slot_ms`.
    pub last_instant: String,
    /// `name` -> `name, instance, term, expires_at_ms, now, slot_ms,
    /// unfinished_slot_ms, rerun_slot_ms`.
    pub get: String,
    /// `name, term` -> rows affected.
    pub force_release: String,
    /// `prefix, limit` -> the columns of `get`, by name from the prefix on.
    pub list: String,
    /// `CREATE TABLE IF NOT EXISTS` of the table.
    pub create_table: String,
    /// `SELECT :now`.
    pub now: &'static str,
    /// `key` -> takes the transaction-level advisory lock of `migrate`.
    pub migrate_lock: &'static str,
    /// The key `migrate` locks for this table (the same in every process).
    pub migrate_lock_key: i64,
}

impl SqlTexts {
    /// The texts for `table` (validated as the store's builder validates it).
    ///
    /// # Errors
    ///
    /// [`PostgresError::InvalidTable`] for a name the store would refuse.
    pub fn for_table(table: &str) -> Result<Self, PostgresError> {
        let s = Statements::new(crate::sql::table(table)?);
        Ok(SqlTexts {
            migrate_lock_key: crate::schema::migrate_lock_key(s.table.quoted()),
            claim: s.claim,
            renew: s.renew,
            renew_many: s.renew_many,
            verify: s.verify,
            guard: s.guard,
            release: s.release,
            claim_instant: s.claim_instant,
            finish: s.finish,
            find_unfinished: s.find_unfinished,
            claim_rerun: s.claim_rerun,
            last_instant: s.last_instant,
            get: s.get,
            force_release: s.force_release,
            list: s.list,
            create_table: s.create_table,
            now: NOW,
            migrate_lock: MIGRATE_LOCK,
        })
    }
}
