//! The lease table on a sqlx PostgreSQL pool: `lease-postgres`'s
//! statements, run through sqlx. What the three stores share is in
//! `store.rs`; here is what PostgreSQL does its own way.

use lease_core::{BoxError, Finished, InstantClaim, InstantRecord, Unfinished, UtcMillis};
use lease_postgres::texts::SqlTexts;
use sqlx::Row;

use crate::store::{
    Value, renewed_rows, returning_claim_and_renew, signed_term, sqlx_lease_store, text_name,
};

sqlx_lease_store! {
    /// A [`LeaseStore`](lease_core::LeaseStore) on a sqlx
    /// [`PgPool`](sqlx::PgPool): the leases on the application's own pool,
    /// with the statements of `lease-postgres` (the same table, the same
    /// locks: its claims lock the row `FOR UPDATE`, so they wait for a
    /// guarded transaction). Stores of both crates may share one table.
    ///
    /// Statements are prepared and cached per connection (sqlx's statement
    /// cache). Not for a PgBouncer in transaction pooling mode: sqlx sends a
    /// statement's parse and its execution as two round trips, which such a
    /// pooler may route to two server connections, named statements or not;
    /// use `lease-postgres` with `statement_mode=unnamed` there. Bound each
    /// call with the coordinator's timeouts ([`Leases`](lease_core::Leases)
    /// does); the pool's own `acquire_timeout` bounds the wait for a
    /// connection.
    ///
    /// `migrate` creates the table if it is missing, under the same advisory
    /// lock as `lease-postgres`'s; unlike that store's, it does not check the
    /// shape of a table that is there already.
    store: PgLeaseStore,
    db: sqlx::Postgres,
    texts: SqlTexts,
    error: lease_postgres::PostgresError,
    default_table: lease_postgres::DEFAULT_TABLE,
    dialect: lease_core::Dialect::Postgres,
    begin: "BEGIN",
    term: signed_term,
    name: text_name,
    renewals_per_batch: usize::MAX,
    /// A store on `pool`, on `table` (`name` or `schema.name`: ASCII
    /// letters, digits, underscores).
    ///
    /// # Errors
    ///
    /// [`lease_postgres::PostgresError::InvalidTable`] for any other name.
}

returning_claim_and_renew!(PgLeaseStore, term: signed_term);

impl PgLeaseStore {
    /// The renewals in one statement, on arrays of names and holders.
    async fn do_renew_chunk(
        &self,
        leases: &[(&str, lease_core::Token<'_>)],
        lease_ms: i64,
    ) -> Result<Vec<(String, String, i64)>, BoxError> {
        let names: Vec<&str> = leases.iter().map(|(name, _)| *name).collect();
        let holders: Vec<&str> = leases.iter().map(|(_, token)| token.expose()).collect();
        let rows = self
            .query(&self.sql.renew_many, &[])?
            .bind(names)
            .bind(holders)
            .bind(lease_ms)
            .fetch_all(&self.pool)
            .await?;
        renewed_rows(&rows)
    }

    /// An instant claim in one statement, which returns the row's old
    /// instants.
    async fn do_claim_instant(
        &self,
        name: &str,
        values: Vec<(&str, Value<'_>)>,
        _slot_ms: i64,
    ) -> Result<InstantClaim, BoxError> {
        let Some(row) = self
            .query(&self.sql.claim_instant, &values)?
            .fetch_optional(&self.pool)
            .await?
        else {
            return Ok(InstantClaim::Refused);
        };
        let new_term = signed_term(&row, 0)?;
        // The row as the claim found it; NULL when the claim inserted it.
        let old: Option<i64> = row.try_get(1)?;
        let superseded = match old {
            None => None,
            Some(slot_ms) => InstantRecord {
                slot_ms,
                unfinished_slot_ms: row.try_get(2)?,
                rerun_slot_ms: row.try_get(3)?,
            }
            .superseded(name, new_term.saturating_sub(1)),
        };
        Ok(InstantClaim::Claimed {
            term: new_term,
            superseded,
        })
    }

    async fn do_finish(&self, values: &[(&str, Value<'_>)]) -> Result<Finished, BoxError> {
        let row = self
            .query(&self.sql.finish, values)?
            .fetch_optional(&self.pool)
            .await?;
        Ok(match row {
            None => Finished::NotRecorded,
            Some(row) if row.try_get::<bool, _>(0)? => Finished::Released,
            Some(_) => Finished::RecordedWithoutLease,
        })
    }

    /// The search in one statement, on an array of names.
    async fn do_find_unfinished(&self, names: &[&str]) -> Result<Vec<Unfinished>, BoxError> {
        let rows = self
            .query(&self.sql.find_unfinished, &[])?
            .bind(names.to_vec())
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                Ok(Unfinished::new(
                    row.try_get::<String, _>(0)?,
                    UtcMillis::from_millis(row.try_get(2)?),
                    false,
                    signed_term(row, 1)?,
                ))
            })
            .collect()
    }

    /// The table created under `lease-postgres`'s advisory lock.
    async fn do_migrate(&self) -> Result<(), BoxError> {
        let mut tx = self.pool.begin().await?;
        let _ = self
            .query(
                self.sql.migrate_lock,
                &[("key", Value::Int(self.sql.migrate_lock_key))],
            )?
            .execute(&mut *tx)
            .await?;
        let _ = self
            .query(&self.sql.create_table, &[])?
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }
}
