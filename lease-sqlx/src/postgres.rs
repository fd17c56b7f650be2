//! The lease table on a sqlx PostgreSQL pool: `lease-sql`'s PostgreSQL
//! statements and flows, the same as `lease-postgres` runs, through sqlx.

use lease_core::BoxError;
use lease_sql::{Args, Conn as _, Found};

use crate::conn::execute_on;
use crate::store::sqlx_lease_store;

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
    dialect: postgres,
    guard: (lease_core::Dialect::Postgres, "BEGIN"),
    /// A store on `pool`, on `table` (`name` or `schema.name`: ASCII
    /// letters, digits, underscores).
    ///
    /// # Errors
    ///
    /// [`StoreError::InvalidTable`](crate::StoreError::InvalidTable) for
    /// any other name.
}

impl PgLeaseStore {
    /// The table created under `lease-postgres`'s advisory lock, and given
    /// the columns added since the first schema when it lacks them (`ALTER
    /// TABLE .. ADD COLUMN IF NOT EXISTS`, which needs the table's owner).
    async fn migrate_table(&self) -> Result<(), BoxError> {
        let mut tx = self.pool.begin().await?;
        let lock = Args::new().lock_key(self.sql.migrate_lock_key);
        let _ = execute_on::<sqlx::Postgres>(&mut tx, &self.sql.migrate_lock, &lock).await?;
        let _ = execute_on::<sqlx::Postgres>(&mut tx, &self.sql.create_table, &Args::new()).await?;
        tx.commit().await?;
        if lease_sql::postgres::inspect(&mut self.conn(), &self.sql).await? == Found::Outdated {
            let add = &self.sql.add_resign_column;
            let _ = self.conn().execute(add, &Args::new()).await?;
        }
        Ok(())
    }
}
