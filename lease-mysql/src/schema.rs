//! The lease table: `migrate`, on the flows of [`lease_sql::mysql`] (its
//! DDL and the inspection of an existing table are there).

use lease_sql::Found;

use crate::conn::{MyConn, driver_error};
use crate::error::MySqlError;
use crate::store::MySqlStore;

impl MySqlStore {
    /// Creates the lease table if it does not exist, and checks that an
    /// existing one can carry leases. The table is looked for first, in
    /// `information_schema`, so a user with only `SELECT`, `INSERT` and
    /// `UPDATE` on an existing table can migrate; `CREATE` is needed only
    /// to create it. Safe when many replicas run it at once: `CREATE TABLE
    /// IF NOT EXISTS` takes the table name's metadata lock, and the others
    /// find the table there.
    ///
    /// # Errors
    ///
    /// [`MySqlError::Database`] when the server refuses (missing `CREATE`
    /// privilege for a missing table) or does not answer;
    /// [`MySqlError::IncompatibleTable`] when the table exists without a
    /// column the statements use, with a `name` column that is not binary,
    /// with an `AUTO_INCREMENT` column or with a trigger (see the crate
    /// docs).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the table is either created or not.
    pub async fn migrate(&self) -> Result<(), MySqlError> {
        let mut conn = self.inner.pool.get_conn().await?;
        let table = self.inner.sql.table();
        let found = lease_sql::mysql::migrate(&mut MyConn(&mut conn), &self.inner.sql)
            .await
            .map_err(driver_error)?;
        match found {
            Found::Usable => Ok(()),
            Found::Missing => Err(MySqlError::IncompatibleTable {
                table: table.quoted().to_owned(),
                reason: "it is not in information_schema after its creation".to_owned(),
            }),
            Found::Outdated => Err(MySqlError::IncompatibleTable {
                table: table.quoted().to_owned(),
                reason: "it still lacks the column resign_term after adding it".to_owned(),
            }),
            Found::Incompatible(reason) => Err(MySqlError::IncompatibleTable {
                table: table.quoted().to_owned(),
                reason,
            }),
        }
    }
}
