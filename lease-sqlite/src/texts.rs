//! The SQL texts of the store, for other drivers' implementations of the
//! same protocol (`lease-sqlx`). Not a stable interface: the texts follow
//! this crate's version; their parameters are in `sql.rs`.

use crate::error::SqliteError;
use crate::sql::{SELECT_NOW, Statements};

/// Every statement of the store for one table (`?1`, `?2`, ... in the
/// order of `sql.rs`'s comments).
#[derive(Debug)]
#[non_exhaustive]
pub struct SqlTexts {
    quoted: String,
    /// `name, holder, instance, lease_ms` -> `term` (no row: refused).
    pub claim: String,
    /// `name, holder, lease_ms` -> the database's now (no row: lost).
    pub renew: String,
    /// `name, holder` -> `term`.
    pub verify: String,
    /// The guard statement: `name, holder, term` -> `term`.
    pub guard: String,
    /// `name, holder` -> rows changed.
    pub release: String,
    /// `name` -> `term, slot_ms, unfinished_slot_ms, rerun_slot_ms, expired`.
    pub slot_read: String,
    /// `name, holder, instance, slot_ms, lease_ms` -> rows changed.
    pub slot_insert: String,
    /// `name, holder, instance, slot_ms, lease_ms, term read` -> rows changed.
    pub slot_update: String,
    /// `name, holder (NULL: none), slot_ms, passed_ms` -> `released`.
    pub finish: String,
    /// `name, term, holder, instance, lease_ms` -> rows changed.
    pub claim_rerun: String,
    /// `name` -> `slot_ms`.
    pub last_instant: String,
    /// `name, term` -> rows changed.
    pub force_release: String,
    /// `name` -> the columns of a `LeaseInfo`, the database's now fifth.
    pub get: String,
    /// `prefix, limit` -> the same columns, by name from the prefix on.
    pub list: String,
    /// `CREATE TABLE IF NOT EXISTS` of the table.
    pub create_table: String,
    /// `SELECT :now`.
    pub now: &'static str,
}

impl SqlTexts {
    /// The texts for `table` (validated as the store's builder validates it).
    ///
    /// # Errors
    ///
    /// [`SqliteError::InvalidTable`] for a name the store would refuse.
    pub fn for_table(table: &str) -> Result<Self, SqliteError> {
        let s = Statements::new(crate::sql::table(table)?);
        Ok(SqlTexts {
            quoted: s.table.quoted().to_owned(),
            guard: crate::sql::guard(s.table.quoted()),
            claim: s.claim,
            renew: s.renew,
            verify: s.verify,
            release: s.release,
            slot_read: s.slot_read,
            slot_insert: s.slot_insert,
            slot_update: s.slot_update,
            finish: s.finish,
            claim_rerun: s.claim_rerun,
            last_instant: s.last_instant,
            force_release: s.force_release,
            get: s.get,
            list: s.list,
            create_table: s.create_table,
            now: SELECT_NOW,
        })
    }

    /// The batch renewal of `count` leases: `lease_ms`, then `count`
    /// (name, holder) pairs -> `name, holder` renewed.
    #[must_use]
    pub fn renew_many(&self, count: usize) -> String {
        crate::sql::renew_many(&self.quoted, count)
    }

    /// The unfinished instants of `count` names: the names -> `name, term,
    /// slot_ms`.
    #[must_use]
    pub fn find_unfinished(&self, count: usize) -> String {
        crate::sql::find_unfinished(&self.quoted, count)
    }
}
