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
//!    lock ([`lease_sql::postgres::migrate_lock_key`]: the same key for the
//!    same table name in every process and every version of this crate),
//!    creates the table if it does not exist, and commits, which releases
//!    the lock. The
//!    replicas thus create it one after the other; all but the first find
//!    it there.
//! 3. Should the create still race a session that does not take the lock
//!    (an older tool, a human), the two catalog errors are retried once the
//!    other session's table is committed.
//!
//! A table created by an earlier version, which lacks the columns added
//! since (`resign_term`), is given them (`ALTER TABLE .. ADD COLUMN IF NOT
//! EXISTS`, which needs the table's owner), then checked again.

use deadpool_postgres::Pool;
use lease_core::BoxError;
use lease_sql::postgres::{self, Statements};
use lease_sql::{Args, Found};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

use crate::conn::{PgConn, StatementMode, bind, typed};
use crate::error::PostgresError;
use crate::store::PostgresStore;

/// How many times a create that raced another session is tried again.
const MAX_ATTEMPTS: usize = 3;

/// Creates the lease table unless it exists. See the module docs.
pub(crate) async fn migrate(
    pool: &Pool,
    sql: &Statements,
    mode: StatementMode,
) -> Result<(), BoxError> {
    let mut client = pool.get().await?;
    let lock = bind(
        &sql.migrate_lock,
        &Args::new().lock_key(sql.migrate_lock_key),
    )?;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let mut conn = PgConn {
            client: &client,
            mode,
        };
        match postgres::inspect(&mut conn, sql).await? {
            Found::Missing => {}
            Found::Usable => return Ok(()),
            Found::Outdated => {
                // A table of an earlier version: add the columns added
                // since (`IF NOT EXISTS`: replicas may race), then look again.
                if attempt >= MAX_ATTEMPTS {
                    return Err(PostgresError::IncompatibleTable {
                        table: sql.table().name().to_owned(),
                        reason: "it still lacks the column resign_term after adding it".to_owned(),
                    }
                    .into());
                }
                client.batch_execute(sql.add_resign_column.text()).await?;
                continue;
            }
            Found::Incompatible(reason) => {
                return Err(PostgresError::IncompatibleTable {
                    table: sql.table().name().to_owned(),
                    reason,
                }
                .into());
            }
        }
        let created = async {
            let tx = client.transaction().await?;
            match mode {
                StatementMode::Unnamed => {
                    let _ = tx
                        .query_typed(sql.migrate_lock.text(), &typed(&lock))
                        .await?;
                }
                StatementMode::Prepared => {
                    let statement = tx.prepare_cached(sql.migrate_lock.text()).await?;
                    let values: Vec<&(dyn ToSql + Sync)> =
                        lock.iter().map(|(v, _)| v as &(dyn ToSql + Sync)).collect();
                    let _ = tx.execute(&statement, &values).await?;
                }
            }
            tx.batch_execute(sql.create_table.text()).await?;
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
                    table = sql.table().name(),
                    attempt,
                    "lease table creation raced another session; trying again"
                );
            }
            Err(e) => return Err(e.into()),
        }
    }
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
            .map_err(PostgresError::from_statement)?;
        // A store from `build()` or `from_pool` has not connected yet: its
        // replication is checked here, once.
        crate::replication::warn_once(self).await;
        Ok(())
    }
}
