//! The lease table on a sqlx MySQL or MariaDB pool: `lease-sql`'s MySQL
//! statements and flows, the same as `lease-mysql` runs, through sqlx:
//! every write reads its outcome from the OK packet's `last_insert_id` (see
//! `lease_sql::mysql`), and a write InnoDB picked as a deadlock victim is
//! tried again.

use std::time::Duration;

use lease_core::{BoxError, Timings};
use lease_sql::Found;
use sqlx::Executor;
use sqlx::mysql::MySqlPoolOptions;

use crate::StoreError;
use crate::store::sqlx_lease_store;

sqlx_lease_store! {
    /// A [`LeaseStore`](lease_core::LeaseStore) on a sqlx
    /// [`MySqlPool`](sqlx::MySqlPool), MySQL 8 or MariaDB 10.6+: the leases
    /// on the application's own pool, with the statements of `lease-mysql`
    /// (the same table, the same locks: a claim reads the row without a
    /// lock and writes only a row it takes, so a refused claim waits on
    /// nothing, and a claim that takes the row waits for a guarded
    /// transaction's shared lock). Stores of both crates may share one
    /// table.
    ///
    /// Each write reads its outcome (the new term, the database's now, an
    /// outcome code) from the OK packet of its own reply
    /// (`MySqlQueryResult::last_insert_id`), so it holds on any connection
    /// of the pool; the two statements of a claim (a plain read, then the
    /// write of the row read) run on one connection. A write InnoDB picks as
    /// a deadlock victim is tried again, twice, as `lease-mysql` does.
    ///
    /// The pool is the application's, and so are its sessions: build it
    /// with [`pool_options`](MySqlLeaseStore::pool_options) for the
    /// server-side bounds `lease-mysql` sets on its own pool (lock wait,
    /// statement time, idle transaction on MariaDB, strict SQL mode), or
    /// run [`session_setup`](MySqlLeaseStore::session_setup) in your own
    /// `after_connect`.
    ///
    /// `migrate` checks the table as `lease-mysql`'s does (in
    /// `information_schema`: every column, a binary `name`, no
    /// `AUTO_INCREMENT` column, no trigger, which would disturb the insert
    /// id the outcomes ride on) and creates it when it is missing.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use lease_core::{Leases, Timings};
    /// use lease_sqlx::MySqlLeaseStore;
    ///
    /// # async fn example() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// let timings = Timings::default();
    /// let pool = MySqlLeaseStore::pool_options(&timings)
    ///     .max_connections(8)
    ///     .connect("mysql://app@db.internal/app")
    ///     .await?;
    /// let store = MySqlLeaseStore::new(pool.clone());
    /// let leases = Leases::new(store).with_timings(timings);
    /// leases.migrate().await?;
    /// if let Some(handle) = leases.claim("nightly-report").await? {
    ///     // ... lease_sqlx::transaction(&pool, &ctx, ..) for fenced writes
    ///     handle.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    store: MySqlLeaseStore,
    db: sqlx::MySql,
    dialect: mysql,
    guard: (lease_core::Dialect::MySql, "START TRANSACTION"),
    /// A store on `pool`, on `table` (`table` or `schema.table`, each part
    /// 1 to 64 ASCII letters, digits, `_` or `$`, not all digits).
    ///
    /// # Errors
    ///
    /// [`StoreError::InvalidTable`](crate::StoreError::InvalidTable) for
    /// any other name.
}

impl MySqlLeaseStore {
    /// The session setup statement of `lease-mysql`'s own pool: strict SQL
    /// mode, `innodb_lock_wait_timeout` (`lock_wait`, whole seconds, at
    /// least 1), the statement bound (MariaDB: `max_statement_time`, every
    /// statement; MySQL: `max_execution_time`, `SELECT`s), and on MariaDB
    /// `idle_transaction_timeout` (the bound on a guarded transaction whose
    /// holder froze inside it). `None`: the server's own.
    ///
    /// # Errors
    ///
    /// [`StoreError::InvalidSetting`] for a lock-wait bound under 1 s.
    pub fn session_setup(
        lock_wait: Duration,
        statement: Option<Duration>,
        idle_transaction: Option<Duration>,
    ) -> Result<String, StoreError> {
        lease_sql::mysql::session_setup_for(lock_wait, statement, idle_transaction)
            .map_err(StoreError::InvalidSetting)
    }

    /// Pool options whose every new connection runs `lease-mysql`'s session
    /// setup with the bounds derived from `timings`, those of the
    /// [`Leases`](lease_core::Leases) that will use the store, as
    /// `MySqlStoreBuilder::with_timings` sets them: lock wait
    /// [`Timings::lock_wait_timeout`] (3 s by default), statements
    /// [`Timings::statement_timeout`] (5 s), idle in a transaction
    /// (MariaDB) [`Timings::deadline`] (10 s). For other bounds, run
    /// [`session_setup`](Self::session_setup) in your own `after_connect`.
    #[must_use]
    pub fn pool_options(timings: &Timings) -> MySqlPoolOptions {
        let setup = lease_sql::mysql::timings_setup(timings);
        MySqlPoolOptions::new().after_connect(move |conn, _| {
            let setup = sqlx::AssertSqlSafe(setup.clone());
            Box::pin(async move {
                let _ = conn.execute(setup).await?;
                Ok(())
            })
        })
    }

    /// `lease-mysql`'s migrate: the table looked for in
    /// `information_schema` first (so a user without `CREATE` can migrate
    /// an existing table), created when missing, then checked (every
    /// column, a binary `name`, no `AUTO_INCREMENT` column, no trigger).
    async fn migrate_table(&self) -> Result<(), BoxError> {
        let reason = match lease_sql::mysql::migrate(&mut self.conn(), &self.sql).await? {
            Found::Usable => return Ok(()),
            Found::Missing => "it is not in information_schema after its creation".to_owned(),
            Found::Outdated => "it still lacks the column resign_term after adding it".to_owned(),
            Found::Incompatible(reason) => reason,
        };
        Err(StoreError::IncompatibleTable {
            table: self.table().to_owned(),
            reason,
        }
        .into())
    }
}
