//! The lease table on a sqlx PostgreSQL pool: `lease-postgres`'s
//! statements, run through sqlx.

use std::collections::HashMap;

use async_trait::async_trait;
use lease_core::{
    BoxError, ClaimRequest, DbErrorKind, Finished, GuardStatement, LeaseInfo, LeaseStore,
    SlotClaim, SupersededSlot, UnfinishedRow,
};
use lease_postgres::texts::SqlTexts;
use sqlx::postgres::{PgPool, PgRow};
use sqlx::{AssertSqlSafe, Row};

use crate::dialect::FenceDatabase;

/// A [`LeaseStore`] on a sqlx [`PgPool`]: the leases on the application's
/// own pool, with the statements of `lease-postgres` (the same table, the
/// same locks: its claims lock the row `FOR UPDATE`, so they wait for a
/// guarded transaction). Stores of both crates may share one table.
///
/// Statements are prepared and cached per connection (sqlx's statement
/// cache). Not for a PgBouncer in transaction pooling mode: sqlx sends a
/// statement's parse and its execution as two round trips, which such a
/// pooler may route to two server connections, named statements or not;
/// use `lease-postgres` with `statement_mode=unnamed` there. Bound each call with the coordinator's
/// timeouts ([`Leases`](lease_core::Leases) does); the pool's own
/// `acquire_timeout` bounds the wait for a connection.
///
/// `migrate` creates the table if it is missing, under the same advisory
/// lock as `lease-postgres`'s; unlike that store's, it does not check the
/// shape of a table that is there already.
#[derive(Debug, Clone)]
pub struct PgLeaseStore {
    pool: PgPool,
    table: String,
    sql: std::sync::Arc<SqlTexts>,
}

impl PgLeaseStore {
    /// A store on `pool`, on the default table (`gst_leases`).
    #[must_use]
    pub fn new(pool: PgPool) -> Self {
        Self::with_table(pool, lease_postgres::DEFAULT_TABLE)
            .unwrap_or_else(|_| unreachable!("the default table name is valid"))
    }

    /// A store on `pool`, on `table` (`name` or `schema.name`: ASCII
    /// letters, digits, underscores).
    ///
    /// # Errors
    ///
    /// [`lease_postgres::PostgresError::InvalidTable`] for any other name.
    pub fn with_table(pool: PgPool, table: &str) -> Result<Self, lease_postgres::PostgresError> {
        Ok(PgLeaseStore {
            pool,
            table: table.to_owned(),
            sql: std::sync::Arc::new(SqlTexts::for_table(table)?),
        })
    }

    /// The pool.
    #[must_use]
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The table's name as given.
    #[must_use]
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The guard statement of this store's table (the same as
    /// `lease-postgres`'s for the same table).
    #[must_use]
    pub fn guard_statement(&self) -> GuardStatement {
        GuardStatement::new("BEGIN", self.sql.guard.clone())
    }

    fn q(
        &self,
        sql: &str,
    ) -> sqlx::query::Query<'static, sqlx::Postgres, sqlx::postgres::PgArguments> {
        sqlx::query(AssertSqlSafe(sql.to_owned()))
    }
}

fn term(value: i64) -> Result<u64, BoxError> {
    u64::try_from(value).map_err(|_| format!("a negative term in the table: {value}").into())
}

fn info(row: &PgRow) -> Result<LeaseInfo, BoxError> {
    Ok(LeaseInfo {
        name: row.try_get(0)?,
        instance: row.try_get(1)?,
        term: term(row.try_get(2)?)?,
        expires_at_ms: row.try_get(3)?,
        now_ms: row.try_get(4)?,
        slot_ms: row.try_get(5)?,
        unfinished_slot_ms: row.try_get(6)?,
        rerun_slot_ms: row.try_get(7)?,
    })
}

#[async_trait]
impl LeaseStore for PgLeaseStore {
    async fn claim(&self, claim: ClaimRequest<'_>) -> Result<Option<u64>, BoxError> {
        let ClaimRequest {
            name,
            holder,
            instance,
            lease_ms,
        } = claim;
        let row = self
            .q(&self.sql.claim)
            .bind(name)
            .bind(holder)
            .bind(instance)
            .bind(lease_ms)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|row| term(row.try_get(0)?)).transpose()
    }

    async fn renew(
        &self,
        name: &str,
        holder: &str,
        lease_ms: i64,
    ) -> Result<Option<i64>, BoxError> {
        let done = self
            .q(&self.sql.renew)
            .bind(name)
            .bind(holder)
            .bind(lease_ms)
            .fetch_optional(&self.pool)
            .await?;
        Ok(done.map(|row| row.try_get::<i64, _>(0)).transpose()?)
    }

    async fn renew_many(
        &self,
        leases: &[(&str, &str)],
        lease_ms: i64,
    ) -> Result<Vec<Option<i64>>, BoxError> {
        let names: Vec<&str> = leases.iter().map(|(name, _)| *name).collect();
        let holders: Vec<&str> = leases.iter().map(|(_, holder)| *holder).collect();
        let rows = self
            .q(&self.sql.renew_many)
            .bind(names)
            .bind(holders)
            .bind(lease_ms)
            .fetch_all(&self.pool)
            .await?;
        let mut renewed = HashMap::with_capacity(rows.len());
        for row in &rows {
            let name: String = row.try_get(0)?;
            let holder: String = row.try_get(1)?;
            let now: i64 = row.try_get(2)?;
            renewed.insert((name, holder), now);
        }
        Ok(leases
            .iter()
            .map(|(name, holder)| {
                renewed
                    .get(&((*name).to_owned(), (*holder).to_owned()))
                    .copied()
            })
            .collect())
    }

    async fn verify(&self, name: &str, holder: &str) -> Result<Option<u64>, BoxError> {
        let row = self
            .q(&self.sql.verify)
            .bind(name)
            .bind(holder)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|row| term(row.try_get(0)?)).transpose()
    }

    async fn release(&self, name: &str, holder: &str) -> Result<bool, BoxError> {
        let done = self
            .q(&self.sql.release)
            .bind(name)
            .bind(holder)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn claim_slot(
        &self,
        claim: ClaimRequest<'_>,
        slot_ms: i64,
    ) -> Result<SlotClaim, BoxError> {
        let ClaimRequest {
            name,
            holder,
            instance,
            lease_ms,
        } = claim;
        let Some(row) = self
            .q(&self.sql.claim_slot)
            .bind(name)
            .bind(holder)
            .bind(instance)
            .bind(slot_ms)
            .bind(lease_ms)
            .fetch_optional(&self.pool)
            .await?
        else {
            return Ok(SlotClaim::Refused);
        };
        let new_term = term(row.try_get(0)?)?;
        let old_slot: Option<i64> = row.try_get(1)?;
        let old_unfinished: Option<i64> = row.try_get(2)?;
        let old_rerun: Option<i64> = row.try_get(3)?;
        let superseded = match (old_slot, old_unfinished) {
            (Some(slot), Some(unfinished)) if slot != 0 && unfinished == slot => {
                Some(SupersededSlot {
                    slot_ms: slot,
                    rerun: old_rerun == Some(slot),
                })
            }
            _ => None,
        };
        Ok(SlotClaim::Claimed {
            term: new_term,
            superseded,
        })
    }

    async fn finish(
        &self,
        name: &str,
        holder: Option<&str>,
        slot_ms: i64,
        passed_ms: i64,
    ) -> Result<Finished, BoxError> {
        let row = self
            .q(&self.sql.finish)
            .bind(name)
            .bind(holder)
            .bind(slot_ms)
            .bind(passed_ms)
            .fetch_optional(&self.pool)
            .await?;
        Ok(match row {
            None => Finished::NotRecorded,
            Some(row) if row.try_get::<bool, _>(0)? => Finished::Released,
            Some(_) => Finished::RecordedWithoutLease,
        })
    }

    async fn find_unfinished(&self, names: &[&str]) -> Result<Vec<UnfinishedRow>, BoxError> {
        let rows = self
            .q(&self.sql.find_unfinished)
            .bind(names.to_vec())
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                Ok(UnfinishedRow {
                    name: row.try_get(0)?,
                    term: term(row.try_get(1)?)?,
                    slot_ms: row.try_get(2)?,
                })
            })
            .collect()
    }

    async fn claim_rerun(&self, claim: ClaimRequest<'_>, term: u64) -> Result<bool, BoxError> {
        let ClaimRequest {
            name,
            holder,
            instance,
            lease_ms,
        } = claim;
        let Ok(term) = i64::try_from(term) else {
            return Ok(false);
        };
        let done = self
            .q(&self.sql.claim_rerun)
            .bind(name)
            .bind(term)
            .bind(holder)
            .bind(instance)
            .bind(lease_ms)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn last_slot(&self, name: &str) -> Result<Option<i64>, BoxError> {
        let row = self
            .q(&self.sql.last_slot)
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|row| row.try_get(0)).transpose()?)
    }

    async fn force_release(&self, name: &str, term: u64) -> Result<bool, BoxError> {
        let Ok(term) = i64::try_from(term) else {
            return Ok(false);
        };
        let done = self
            .q(&self.sql.force_release)
            .bind(name)
            .bind(term)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>, BoxError> {
        let row = self
            .q(&self.sql.get)
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(info).transpose()
    }

    async fn list(&self, prefix: &str, limit: u32) -> Result<Vec<LeaseInfo>, BoxError> {
        let rows = self
            .q(&self.sql.list)
            .bind(prefix)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?;
        let mut infos = Vec::with_capacity(rows.len());
        for row in &rows {
            let info = info(row)?;
            if !info.name.starts_with(prefix) {
                break;
            }
            infos.push(info);
        }
        Ok(infos)
    }

    async fn now_ms(&self) -> Result<i64, BoxError> {
        let row = self.q(self.sql.now).fetch_one(&self.pool).await?;
        Ok(row.try_get(0)?)
    }

    async fn migrate(&self) -> Result<(), BoxError> {
        let mut tx = self.pool.begin().await?;
        self.q(self.sql.migrate_lock)
            .bind(self.sql.migrate_lock_key)
            .execute(&mut *tx)
            .await?;
        self.q(&self.sql.create_table).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(())
    }

    fn classify(&self, error: &(dyn std::error::Error + 'static)) -> DbErrorKind {
        match error.downcast_ref::<sqlx::Error>() {
            Some(e) => <sqlx::Postgres as FenceDatabase>::classify(e),
            None => DbErrorKind::Unclassified,
        }
    }

    fn guard_statement(&self) -> Option<GuardStatement> {
        Some(PgLeaseStore::guard_statement(self))
    }
}
