//! The lease table on a sqlx SQLite pool: `lease-sql`'s SQLite statements
//! and flows, the same as `lease-sqlite` runs, through sqlx.

use lease_core::BoxError;
use lease_sql::{Args, Conn as _, Found, Row as _};

use crate::store::sqlx_lease_store;

sqlx_lease_store! {
    /// A [`LeaseStore`](lease_core::LeaseStore) on a sqlx
    /// [`SqlitePool`](sqlx::SqlitePool): the leases in the application's own
    /// SQLite file, with the statements of `lease-sqlite` (the same table;
    /// every claim writes, so it waits for a guarded transaction's write
    /// lock). Stores of both crates may share a file.
    ///
    /// Open the pool in WAL mode with a busy timeout
    /// (`SqliteConnectOptions::journal_mode(SqliteJournalMode::Wal)
    /// .busy_timeout(..)`): the pool's connections write concurrently, and a
    /// claim that finds the file locked waits for the busy timeout. An instant
    /// claim (`claim_instant`) is a `BEGIN IMMEDIATE` transaction of two
    /// statements, as in `lease-sqlite`.
    ///
    /// `migrate` creates the table if it is missing; unlike `lease-sqlite`'s,
    /// it does not check the shape of a table that is there already.
    store: SqliteLeaseStore,
    db: sqlx::Sqlite,
    dialect: sqlite,
    guard: (lease_core::Dialect::Sqlite, "BEGIN IMMEDIATE"),
    /// A store on `pool`, on `table` (ASCII letters, digits, underscores,
    /// not starting with a digit nor `sqlite_`).
    ///
    /// # Errors
    ///
    /// [`StoreError::InvalidTable`](crate::StoreError::InvalidTable) for
    /// any other name.
}

impl SqliteLeaseStore {
    /// The table, created if missing, and given the columns added since
    /// the first schema when it lacks them (`ALTER TABLE .. ADD COLUMN`; a
    /// process that added them first makes it fail, and the table is then
    /// looked at again).
    async fn migrate_table(&self) -> Result<(), BoxError> {
        let _ = self
            .conn()
            .execute(&self.sql.create_table, &Args::new())
            .await?;
        if self.found().await? == Found::Outdated {
            let added = self
                .conn()
                .execute(&self.sql.add_resign_column, &Args::new())
                .await;
            if let Err(e) = added
                && self.found().await? == Found::Outdated
            {
                return Err(e);
            }
        }
        Ok(())
    }

    /// What the table's columns say of it.
    async fn found(&self) -> Result<Found, BoxError> {
        let place = Args::new().table_name(self.sql.table().name());
        let rows = self.conn().rows(&self.sql.table_columns, &place).await?;
        let columns = rows
            .iter()
            .map(|row| row.text(0))
            .collect::<Result<Vec<_>, BoxError>>()?;
        Ok(lease_sql::sqlite::judge_columns(&columns))
    }
}
