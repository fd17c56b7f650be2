//! The lease table on a sqlx SQLite pool: `lease-sqlite`'s statements,
//! run through sqlx.

use std::collections::HashMap;

use async_trait::async_trait;
use lease_core::{
    BoxError, ClaimRequest, DbErrorKind, Finished, GuardStatement, LeaseInfo, LeaseStore,
    SlotClaim, SlotRecord, UnfinishedRow,
};
use lease_sqlite::texts::SqlTexts;
use sqlx::sqlite::{SqlitePool, SqliteRow};
use sqlx::{AssertSqlSafe, Row};

use crate::dialect::FenceDatabase;

/// A [`LeaseStore`] on a sqlx [`SqlitePool`]: the leases in the
/// application's own SQLite file, with the statements of `lease-sqlite`
/// (the same table; every claim writes, so it waits for a guarded
/// transaction's write lock). Stores of both crates may share a file.
///
/// Open the pool in WAL mode with a busy timeout
/// (`SqliteConnectOptions::journal_mode(SqliteJournalMode::Wal)
/// .busy_timeout(..)`): the pool's connections write concurrently, and a
/// claim that finds the file locked waits for the busy timeout. An instant
/// claim (`claim_slot`) is a `BEGIN IMMEDIATE` transaction of two
/// statements, as in `lease-sqlite`.
///
/// `migrate` creates the table if it is missing; unlike `lease-sqlite`'s,
/// it does not check the shape of a table that is there already.
#[derive(Debug, Clone)]
pub struct SqliteLeaseStore {
    pool: SqlitePool,
    table: String,
    sql: std::sync::Arc<SqlTexts>,
}

impl SqliteLeaseStore {
    /// A store on `pool`, on the default table (`gst_leases`).
    #[must_use]
    pub fn new(pool: SqlitePool) -> Self {
        Self::with_table(pool, "gst_leases")
            .unwrap_or_else(|_| unreachable!("the default table name is valid"))
    }

    /// A store on `pool`, on `table` (ASCII letters, digits, underscores,
    /// not starting with a digit nor `sqlite_`).
    ///
    /// # Errors
    ///
    /// [`lease_sqlite::SqliteError::InvalidTable`] for any other name.
    pub fn with_table(pool: SqlitePool, table: &str) -> Result<Self, lease_sqlite::SqliteError> {
        Ok(SqliteLeaseStore {
            pool,
            table: table.to_owned(),
            sql: std::sync::Arc::new(SqlTexts::for_table(table)?),
        })
    }

    /// The pool.
    #[must_use]
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// The table's name as given.
    #[must_use]
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The guard statement of this store's table (the same as
    /// `lease-sqlite`'s for the same table).
    #[must_use]
    pub fn guard_statement(&self) -> GuardStatement {
        GuardStatement::new("BEGIN IMMEDIATE", self.sql.guard.clone())
    }

    fn q(
        &self,
        sql: &str,
    ) -> sqlx::query::Query<'static, sqlx::Sqlite, sqlx::sqlite::SqliteArguments> {
        sqlx::query(AssertSqlSafe(sql.to_owned()))
    }
}

/// Leases renewed by one statement, names read by one statement: well under
/// SQLite's limit on bound parameters (32,766).
const RENEWALS_PER_STATEMENT: usize = 256;
const NAMES_PER_STATEMENT: usize = 500;

fn term(value: i64) -> Result<u64, BoxError> {
    u64::try_from(value).map_err(|_| format!("a negative term in the table: {value}").into())
}

fn info(row: &SqliteRow) -> Result<LeaseInfo, BoxError> {
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
impl LeaseStore for SqliteLeaseStore {
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
        let mut held = Vec::with_capacity(leases.len());
        for chunk in leases.chunks(RENEWALS_PER_STATEMENT) {
            let mut query =
                sqlx::query(AssertSqlSafe(self.sql.renew_many(chunk.len()))).bind(lease_ms);
            for (name, holder) in chunk {
                query = query.bind(*name).bind(*holder);
            }
            let rows = query.fetch_all(&self.pool).await?;
            let mut renewed = HashMap::with_capacity(rows.len());
            for row in &rows {
                let name: String = row.try_get(0)?;
                let holder: String = row.try_get(1)?;
                let now: i64 = row.try_get(2)?;
                renewed.insert((name, holder), now);
            }
            held.extend(chunk.iter().map(|(name, holder)| {
                renewed
                    .get(&((*name).to_owned(), (*holder).to_owned()))
                    .copied()
            }));
        }
        Ok(held)
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
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let row = self
            .q(&self.sql.slot_read)
            .bind(name)
            .fetch_optional(&mut *tx)
            .await?;
        let outcome = match row {
            None => {
                let inserted = self
                    .q(&self.sql.slot_insert)
                    .bind(name)
                    .bind(holder)
                    .bind(instance)
                    .bind(slot_ms)
                    .bind(lease_ms)
                    .execute(&mut *tx)
                    .await?;
                if inserted.rows_affected() == 1 {
                    SlotClaim::Claimed {
                        term: 1,
                        superseded: None,
                    }
                } else {
                    SlotClaim::Refused
                }
            }
            Some(row) => {
                let old_term: i64 = row.try_get(0)?;
                let record = SlotRecord {
                    slot_ms: row.try_get(1)?,
                    unfinished_slot_ms: row.try_get(2)?,
                    rerun_slot_ms: row.try_get(3)?,
                };
                let expired: bool = row.try_get(4)?;
                if record.claimable(expired, slot_ms) {
                    let updated = self
                        .q(&self.sql.slot_update)
                        .bind(name)
                        .bind(holder)
                        .bind(instance)
                        .bind(slot_ms)
                        .bind(lease_ms)
                        .bind(old_term)
                        .execute(&mut *tx)
                        .await?;
                    if updated.rows_affected() == 1 {
                        SlotClaim::Claimed {
                            term: term(old_term.saturating_add(1))?,
                            superseded: record.superseded(),
                        }
                    } else {
                        SlotClaim::Refused
                    }
                } else {
                    SlotClaim::Refused
                }
            }
        };
        tx.commit().await?;
        Ok(outcome)
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
            Some(row) if row.try_get::<i64, _>(0)? != 0 => Finished::Released,
            Some(_) => Finished::RecordedWithoutLease,
        })
    }

    async fn find_unfinished(&self, names: &[&str]) -> Result<Vec<UnfinishedRow>, BoxError> {
        let mut found = Vec::new();
        for chunk in names.chunks(NAMES_PER_STATEMENT) {
            let mut query = sqlx::query(AssertSqlSafe(self.sql.find_unfinished(chunk.len())));
            for name in chunk {
                query = query.bind(*name);
            }
            for row in query.fetch_all(&self.pool).await? {
                found.push(UnfinishedRow {
                    name: row.try_get(0)?,
                    term: term(row.try_get(1)?)?,
                    slot_ms: row.try_get(2)?,
                });
            }
        }
        Ok(found)
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
        self.q(&self.sql.create_table).execute(&self.pool).await?;
        Ok(())
    }

    fn classify(&self, error: &(dyn std::error::Error + 'static)) -> DbErrorKind {
        match error.downcast_ref::<sqlx::Error>() {
            Some(e) => <sqlx::Sqlite as FenceDatabase>::classify(e),
            None => DbErrorKind::Unclassified,
        }
    }

    fn guard_statement(&self) -> Option<GuardStatement> {
        Some(SqliteLeaseStore::guard_statement(self))
    }
}
