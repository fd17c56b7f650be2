//! The lease table on a sqlx MySQL or MariaDB pool: `lease-mysql`'s
//! statements, run through sqlx. What the three stores share is in
//! `store.rs`; here is what MySQL does its own way: every write reads its
//! outcome from the OK packet's `last_insert_id` (see `lease-mysql`'s
//! `sql.rs`), and a write InnoDB picked as a deadlock victim is tried again.

use std::time::Duration;

use lease_core::{
    BoxError, ClaimRequest, Finished, InstantClaim, Timings, Token, Unfinished, UtcMillis,
};
use lease_mysql::texts::{self, SqlTexts, Statement};
use sqlx::mysql::{MySqlConnection, MySqlPoolOptions, MySqlRow};
use sqlx::{Connection, Executor, Row};

use crate::store::{SlotStep, Value, slot_record, sqlx_lease_store, term_value};

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
    texts: SqlTexts,
    error: lease_mysql::MySqlError,
    default_table: lease_mysql::DEFAULT_TABLE,
    dialect: lease_core::Dialect::MySql,
    begin: "START TRANSACTION",
    term: term_at,
    name: name_at,
    renewals_per_batch: texts::MAX_RENEWALS_PER_BATCH,
    /// A store on `pool`, on `table` (`table` or `schema.table`, each part
    /// 1 to 64 ASCII letters, digits, `_` or `$`, not all digits).
    ///
    /// # Errors
    ///
    /// [`lease_mysql::MySqlError::InvalidTableName`] for any other name.
}

/// A term: `BIGINT UNSIGNED`.
fn term_at(row: &MySqlRow, i: usize) -> Result<u64, BoxError> {
    Ok(row.try_get(i)?)
}

/// A name: `VARBINARY`, whose bytes the store wrote from a `&str`.
fn name_at(row: &MySqlRow, i: usize) -> Result<String, BoxError> {
    Ok(String::from_utf8(row.try_get(i)?)?)
}

/// Whether `e` is InnoDB's deadlock (1213): the victim's statement was
/// rolled back whole, so it may run again.
fn deadlock(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|e| e.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>())
        .is_some_and(|e| e.number() == 1213)
}

/// `items`, their count rounded up to a power of two by repeating the last, so
/// that a few prepared statements serve every count.
fn padded<T: Copy>(items: &[T]) -> Vec<T> {
    let mut padded = items.to_vec();
    if let Some(last) = items.last() {
        padded.resize(items.len().next_power_of_two(), *last);
    }
    padded
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
    /// [`lease_mysql::MySqlError::InvalidSetting`] for a lock-wait bound
    /// under 1 s.
    pub fn session_setup(
        lock_wait: Duration,
        statement: Option<Duration>,
        idle_transaction: Option<Duration>,
    ) -> Result<String, lease_mysql::MySqlError> {
        texts::session_setup(lock_wait, statement, idle_transaction)
            .map_err(lease_mysql::MySqlError::InvalidSetting)
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
        let setup = texts::timings_setup(timings);
        MySqlPoolOptions::new().after_connect(move |conn, _| {
            let setup = sqlx::AssertSqlSafe(setup.clone());
            Box::pin(async move {
                let _ = conn.execute(setup).await?;
                Ok(())
            })
        })
    }

    /// Runs a write on `conn`, trying again when InnoDB picked it as a
    /// deadlock victim: the OK packet's `last_insert_id`, `None` for 0 (no
    /// row matched).
    async fn write_on(
        &self,
        conn: &mut MySqlConnection,
        text: &Statement,
        values: &[(&str, Value<'_>)],
    ) -> Result<Option<u64>, BoxError> {
        let mut tries = 0;
        loop {
            match self.query(text, values)?.execute(&mut *conn).await {
                Ok(done) => return Ok(Some(done.last_insert_id()).filter(|id| *id != 0)),
                Err(e) if deadlock(&e) && tries < texts::DEADLOCK_RETRIES => {
                    tries += 1;
                    tracing::debug!(tries, "deadlock victim: trying the statement again");
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// [`write_on`](Self::write_on) a connection of the pool.
    async fn write(
        &self,
        text: &Statement,
        values: &[(&str, Value<'_>)],
    ) -> Result<Option<u64>, BoxError> {
        let mut conn = self.pool.acquire().await?;
        self.write_on(&mut conn, text, values).await
    }

    /// Whether a write matched its row.
    async fn written(
        &self,
        text: &Statement,
        values: &[(&str, Value<'_>)],
    ) -> Result<bool, BoxError> {
        Ok(self.write(text, values).await?.is_some())
    }

    /// A claim on one connection: a plain read first, so a claim refused
    /// because the name is held locks nothing and waits on nothing; then,
    /// for a free row, an update checked against the term read (and the
    /// expiry, by the statement's clock), or, for a missing row, an insert
    /// that does nothing when a rival inserted first (the row is then read
    /// again).
    async fn do_claim(&self, claim: ClaimRequest<'_>) -> Result<Option<u64>, BoxError> {
        let mut conn = self.pool.acquire().await?;
        let mut values = vec![
            ("name", Value::Str(claim.name)),
            ("holder", Value::Str(claim.token.expose())),
            ("instance", Value::Str(claim.instance)),
            ("lease_ms", Value::Int(claim.lease_ms)),
        ];
        for _ in 0..texts::CLAIM_ROUNDS {
            let row = self
                .query(&self.sql.claim_read, &values)?
                .fetch_optional(&mut *conn)
                .await?;
            let Some(row) = row else {
                if self
                    .write_on(&mut conn, &self.sql.claim_insert, &values)
                    .await?
                    == Some(1)
                {
                    return Ok(Some(1));
                }
                continue;
            };
            let expired: i64 = row.try_get(1)?;
            if expired == 0 {
                return Ok(None);
            }
            values.push(("term", Value::Int(term_value(term_at(&row, 0)?)?)));
            return self
                .write_on(&mut conn, &self.sql.claim_take, &values)
                .await;
        }
        Ok(None)
    }

    /// `LAST_INSERT_ID(now)` carries the database's now back when the row
    /// matched.
    async fn do_renew(
        &self,
        name: &str,
        holder: &str,
        lease_ms: i64,
    ) -> Result<Option<i64>, BoxError> {
        let now = self
            .write(
                &self.sql.renew,
                &[
                    ("name", Value::Str(name)),
                    ("holder", Value::Str(holder)),
                    ("lease_ms", Value::Int(lease_ms)),
                ],
            )
            .await?;
        Ok(now.map(i64::try_from).transpose()?)
    }

    /// The renewals of at most
    /// [`MAX_RENEWALS_PER_BATCH`](texts::MAX_RENEWALS_PER_BATCH) leases in
    /// one transaction: one `UPDATE` of every row still held, then one read
    /// of which are held now (the rows the update renewed stay locked until the commit, so the
    /// read sees exactly them), as `lease-mysql` does.
    async fn do_renew_chunk(
        &self,
        leases: &[(&str, Token<'_>)],
        lease_ms: i64,
    ) -> Result<Vec<(String, String, i64)>, BoxError> {
        let mut conn = self.pool.acquire().await?;
        let slots = padded(leases);
        let (update_sql, read_sql) = self.sql.renew_many(slots.len());
        let mut read = Vec::with_capacity(3 * slots.len());
        read.extend(slots.iter().map(|(name, _)| ("name", Value::Str(name))));
        for (name, token) in &slots {
            read.push(("name", Value::Str(name)));
            read.push(("holder", Value::Str(token.expose())));
        }
        let mut update = vec![("lease_ms", Value::Int(lease_ms))];
        update.extend(read.iter().copied());
        let mut tries = 0;
        let rows = loop {
            let attempt = async {
                let mut tx = conn.begin().await?;
                let _ = self
                    .query(update_sql.as_str(), &update)?
                    .execute(&mut *tx)
                    .await?;
                let rows = self
                    .query(read_sql.as_str(), &read)?
                    .fetch_all(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok::<_, BoxError>(rows)
            };
            match attempt.await {
                Ok(rows) => break rows,
                Err(e)
                    if e.downcast_ref::<sqlx::Error>().is_some_and(deadlock)
                        && tries < texts::DEADLOCK_RETRIES =>
                {
                    tries += 1;
                    tracing::debug!(tries, "deadlock victim: trying the batch again");
                }
                Err(e) => return Err(e),
            }
        };
        rows.iter()
            .map(|row| Ok((name_at(row, 0)?, name_at(row, 1)?, row.try_get(2)?)))
            .collect()
    }

    /// An instant claim: a plain read, then an insert or the update of the
    /// row read, each reading its outcome from its own reply.
    async fn do_claim_instant(
        &self,
        name: &str,
        mut values: Vec<(&str, Value<'_>)>,
        slot_ms: i64,
    ) -> Result<InstantClaim, BoxError> {
        let row = self
            .query(&self.sql.slot_read, &values)?
            .fetch_optional(&self.pool)
            .await?;
        let mut old_term = 0;
        let read = match row {
            None => None,
            Some(row) => {
                old_term = term_value(term_at(&row, 0)?)?;
                Some((slot_record(&row)?, row.try_get::<i64, _>(4)? != 0))
            }
        };
        Ok(match SlotStep::after(read, slot_ms) {
            SlotStep::Refuse => InstantClaim::Refused,
            SlotStep::Insert => match self.write(&self.sql.slot_insert, &values).await? {
                Some(1) => InstantClaim::Claimed {
                    term: 1,
                    superseded: None,
                },
                _ => InstantClaim::Refused,
            },
            SlotStep::Update(record) => {
                values.push(("term", Value::Int(old_term)));
                let superseded = record.superseded(name, u64::try_from(old_term).unwrap_or(0));
                match self.write(&self.sql.slot_update, &values).await? {
                    Some(term) => InstantClaim::Claimed { term, superseded },
                    None => InstantClaim::Refused,
                }
            }
        })
    }

    /// The outcome rides on `LAST_INSERT_ID`: released, recorded without
    /// the lease, or (0) not recorded.
    async fn do_finish(&self, values: &[(&str, Value<'_>)]) -> Result<Finished, BoxError> {
        let outcome = self.write(&self.sql.finish, values).await?;
        Ok(match outcome {
            Some(texts::FINISH_RELEASED) => Finished::Released,
            Some(texts::FINISH_WITHOUT_LEASE) => Finished::RecordedWithoutLease,
            _ => Finished::NotRecorded,
        })
    }

    /// The search in statements of at most
    /// [`MAX_NAMES_PER_SEARCH`](texts::MAX_NAMES_PER_SEARCH) names, each
    /// count rounded up to a power of two.
    async fn do_find_unfinished(&self, names: &[&str]) -> Result<Vec<Unfinished>, BoxError> {
        let mut found = Vec::new();
        let mut conn = self.pool.acquire().await?;
        for chunk in names.chunks(texts::MAX_NAMES_PER_SEARCH) {
            let slots = padded(chunk);
            let values: Vec<_> = slots.iter().map(|n| ("name", Value::Str(n))).collect();
            let rows = self
                .query(self.sql.find_unfinished(slots.len()).as_str(), &values)?
                .fetch_all(&mut *conn)
                .await?;
            for row in &rows {
                found.push(Unfinished::new(
                    name_at(row, 0)?,
                    UtcMillis::from_millis(row.try_get(2)?),
                    false,
                    term_at(row, 1)?,
                ));
            }
        }
        Ok(found)
    }

    /// `lease-mysql`'s migrate: the table looked for in
    /// `information_schema` first (so a user without `CREATE` can migrate
    /// an existing table), created when missing (`CREATE TABLE IF NOT
    /// EXISTS` takes the name's metadata lock: replicas may race), then
    /// checked.
    async fn do_migrate(&self) -> Result<(), BoxError> {
        let mut conn = self.pool.acquire().await?;
        let mut exists = self.table_usable(&mut conn).await?;
        if !exists {
            let _ = self
                .query(&self.sql.create_table, &[])?
                .execute(&mut *conn)
                .await?;
            exists = self.table_usable(&mut conn).await?;
        }
        if !exists {
            return Err(
                self.incompatible("it is not in information_schema after its creation".to_owned())
            );
        }
        Ok(())
    }

    /// `Ok(false)`: no such table; `Ok(true)`: it can carry leases.
    async fn table_usable(&self, conn: &mut MySqlConnection) -> Result<bool, BoxError> {
        let place = [
            ("schema", Value::OptStr(self.sql.table_name().schema())),
            ("table", Value::Str(self.sql.table_name().table())),
        ];
        let columns: Vec<(String, String, String)> = self
            .query(&self.sql.table_columns, &place)?
            .fetch_all(&mut *conn)
            .await?
            .iter()
            .map(|row| Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?)))
            .collect::<Result<_, sqlx::Error>>()?;
        if !texts::check_columns(&columns).map_err(|reason| self.incompatible(reason))? {
            return Ok(false);
        }
        let triggers: Vec<String> = self
            .query(&self.sql.table_triggers, &place)?
            .fetch_all(&mut *conn)
            .await?
            .iter()
            .map(|row| row.try_get(0))
            .collect::<Result<_, sqlx::Error>>()?;
        texts::check_triggers(&triggers).map_err(|reason| self.incompatible(reason))?;
        Ok(true)
    }

    fn incompatible(&self, reason: String) -> BoxError {
        lease_mysql::MySqlError::IncompatibleTable {
            table: self.table.clone(),
            reason,
        }
        .into()
    }
}
