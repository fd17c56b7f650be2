//! Creating the lease table: idempotent, and safe when many replicas do it at
//! once.
//!
//! `CREATE TABLE IF NOT EXISTS` is not safe on its own under concurrency:
//! two sessions that both find the table missing both go on to create it,
//! and the second fails on a unique index of the catalog (`pg_type`'s, for
//! the table's row type: SQLSTATE 23505 `unique_violation`, or 42P07
//! `duplicate_table`). So [`migrate`]:
//!
//! 1. asks whether the table is there (`to_regclass`), and if it is, checks
//!    it (reading the catalog only) and stops, which also spares a
//!    deployment whose role may not create tables;
//! 2. otherwise, in one transaction, takes a transaction-level advisory
//!    lock ([`migrate_lock_key`]: the same key for the same table name in
//!    every process and every version of this crate), creates the table if
//!    it does not exist, and commits, which releases the lock. The
//!    replicas thus create it one after the other; all but the first find
//!    it there.
//! 3. Should the create still race a session that does not take the lock
//!    (an older tool, a human), the two catalog errors are retried once the
//!    other session's table is committed.

use deadpool_postgres::Pool;
use lease_core::BoxError;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;

use crate::error::PostgresError;
use crate::sql::{MIGRATE_LOCK, Statements, TABLE_COLUMNS};
use crate::sql::{StatementMode, query};
use crate::store::PostgresStore;

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

/// How many times a create that raced another session is tried again.
const MAX_ATTEMPTS: usize = 3;

/// The advisory lock key `migrate` takes for a table: FNV-1a (64 bits) of
/// `lease-postgres:migrate:` followed by the quoted table name. Stable across
/// processes and versions, so every replica takes the same lock.
pub(crate) fn migrate_lock_key(quoted_table: &str) -> i64 {
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

/// Creates the lease table unless it exists. See the module docs.
pub(crate) async fn migrate(
    pool: &Pool,
    sql: &Statements,
    mode: StatementMode,
) -> Result<(), BoxError> {
    let mut client = pool.get().await?;
    let quoted = sql.table.quoted();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let rows = query(&client, mode, TABLE_COLUMNS, &[(&quoted, Type::TEXT)]).await?;
        if !rows.is_empty() {
            return check_columns(&rows, sql);
        }
        let created = async {
            let tx = client.transaction().await?;
            let key = migrate_lock_key(quoted);
            match mode {
                StatementMode::Unnamed => {
                    let _ = tx.query_typed(MIGRATE_LOCK, &[(&key, Type::INT8)]).await?;
                }
                StatementMode::Prepared => {
                    let lock = tx.prepare_cached(MIGRATE_LOCK).await?;
                    let _ = tx.execute(&lock, &[&key]).await?;
                }
            }
            tx.batch_execute(&sql.create_table).await?;
            tx.commit().await
        }
        .await;
        match created {
            Ok(()) => return Ok(()),
            Err(e)
                if attempt < MAX_ATTEMPTS
                    && (e.code() == Some(&SqlState::UNIQUE_VIOLATION)
                        || e.code() == Some(&SqlState::DUPLICATE_TABLE)) =>
            {
                tracing::debug!(
                    table = sql.table.name(),
                    attempt,
                    "lease table creation raced another session; trying again"
                );
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Refuses an existing table without a column the statements use, or whose
/// `name` column compares under a nondeterministic collation.
fn check_columns(rows: &[tokio_postgres::Row], sql: &Statements) -> Result<(), BoxError> {
    let mut columns = Vec::with_capacity(rows.len());
    for row in rows {
        columns.push((row.try_get::<_, String>(0)?, row.try_get::<_, bool>(1)?));
    }
    let incompatible = |reason: String| -> Result<(), BoxError> {
        Err(PostgresError::IncompatibleTable {
            table: sql.table.name().to_owned(),
            reason,
        }
        .into())
    };
    let missing: Vec<&str> = COLUMNS
        .into_iter()
        .filter(|c| !columns.iter().any(|(have, _)| have == c))
        .collect();
    if !missing.is_empty() {
        return incompatible(format!("it lacks the column(s) {}", missing.join(", ")));
    }
    if columns
        .iter()
        .any(|(c, deterministic)| c == "name" && !deterministic)
    {
        return incompatible(
            "its name column has a nondeterministic collation: names would not compare byte for byte"
                .to_owned(),
        );
    }
    Ok(())
}

impl PostgresStore {
    /// Creates the lease table if it does not exist: idempotent, and safe
    /// when many replicas run it at once on a database without the table
    /// (see the crate docs). The same as
    /// [`Leases::migrate`](lease_core::Leases::migrate), without the
    /// coordinator's client-side bound (the server's statement timeout
    /// bounds each statement).
    ///
    /// # Errors
    ///
    /// [`PostgresError::IncompatibleTable`] for an existing table that
    /// cannot carry leases; [`PostgresError::Database`] when the server
    /// refuses (no `CREATE` privilege on the schema while the table is
    /// missing) or does not answer.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the table is either created or not.
    pub async fn migrate(&self) -> Result<(), PostgresError> {
        migrate(&self.inner.pool, &self.inner.sql, self.inner.statement_mode)
            .await
            .map_err(PostgresError::from_statement)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_key_is_stable_and_per_table() {
        assert_eq!(
            migrate_lock_key("\"gst_leases\""),
            migrate_lock_key("\"gst_leases\"")
        );
        assert_ne!(migrate_lock_key("\"a\""), migrate_lock_key("\"b\""));
        // The value is part of the protocol between replicas: never change it.
        assert_eq!(migrate_lock_key("\"gst_leases\""), KNOWN_KEY);
    }

    const KNOWN_KEY: i64 = 6_386_073_706_372_440_378;
}
