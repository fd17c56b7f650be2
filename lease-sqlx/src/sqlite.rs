//! The lease table on a sqlx SQLite pool: `lease-sqlite`'s statements,
//! run through sqlx. What the three stores share is in `store.rs`; here is
//! what SQLite does its own way.

use lease_core::{BoxError, Finished, InstantClaim, Unfinished, UtcMillis};
use lease_sqlite::texts::SqlTexts;
use sqlx::Row;

use crate::store::{
    SlotStep, Value, renewed_rows, returning_claim_and_renew, signed_term, slot_record,
    sqlx_lease_store, text_name,
};

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
    texts: SqlTexts,
    error: lease_sqlite::SqliteError,
    default_table: "gst_leases",
    dialect: lease_core::Dialect::Sqlite,
    begin: "BEGIN IMMEDIATE",
    term: signed_term,
    name: text_name,
    renewals_per_batch: RENEWALS_PER_STATEMENT,
    /// A store on `pool`, on `table` (ASCII letters, digits, underscores,
    /// not starting with a digit nor `sqlite_`).
    ///
    /// # Errors
    ///
    /// [`lease_sqlite::SqliteError::InvalidTable`] for any other name.
}

returning_claim_and_renew!(SqliteLeaseStore, term: signed_term);

/// Leases renewed by one statement, names read by one statement: well under
/// SQLite's limit on bound parameters (32,766).
const RENEWALS_PER_STATEMENT: usize = 256;
const NAMES_PER_STATEMENT: usize = 500;

impl SqliteLeaseStore {
    /// The renewals of at most [`RENEWALS_PER_STATEMENT`] leases in one
    /// statement, which returns the rows it renewed.
    async fn do_renew_chunk(
        &self,
        leases: &[(&str, lease_core::Token<'_>)],
        lease_ms: i64,
    ) -> Result<Vec<(String, String, i64)>, BoxError> {
        let mut values = vec![("lease_ms", Value::Int(lease_ms))];
        for (name, holder) in leases {
            values.push(("name", Value::Str(name)));
            values.push(("holder", Value::Str(holder.expose())));
        }
        let rows = self
            .query(self.sql.renew_many(leases.len()).as_str(), &values)?
            .fetch_all(&self.pool)
            .await?;
        renewed_rows(&rows)
    }

    async fn do_finish(&self, values: &[(&str, Value<'_>)]) -> Result<Finished, BoxError> {
        // Read to its end (all rows, at most one), or SQLite never
        // checkpoints its log while such statements are the only writes.
        let row = self
            .query(&self.sql.finish, values)?
            .fetch_all(&self.pool)
            .await?
            .into_iter()
            .next();
        Ok(match row {
            None => Finished::NotRecorded,
            Some(row) if row.try_get::<i64, _>(0)? != 0 => Finished::Released,
            Some(_) => Finished::RecordedWithoutLease,
        })
    }

    /// An instant claim: a `BEGIN IMMEDIATE` transaction that reads the row,
    /// then inserts the name or takes the row over.
    async fn do_claim_instant(
        &self,
        name: &str,
        mut values: Vec<(&str, Value<'_>)>,
        slot_ms: i64,
    ) -> Result<InstantClaim, BoxError> {
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let row = self
            .query(&self.sql.slot_read, &values[..1])?
            .fetch_optional(&mut *tx)
            .await?;
        let mut old_term = 0;
        let read = match row {
            None => None,
            Some(row) => {
                old_term = row.try_get(0)?;
                Some((slot_record(&row)?, row.try_get::<bool, _>(4)?))
            }
        };
        let (write, term, superseded) = match SlotStep::after(read, slot_ms) {
            SlotStep::Refuse => {
                tx.commit().await?;
                return Ok(InstantClaim::Refused);
            }
            SlotStep::Insert => (&self.sql.slot_insert, 1, None),
            SlotStep::Update(record) => {
                values.push(("term", Value::Int(old_term)));
                let term = lease_core::term_from_db(old_term.saturating_add(1))?;
                let superseded = record.superseded(name, term.saturating_sub(1));
                (&self.sql.slot_update, term, superseded)
            }
        };
        // 0 rows: someone was first.
        let done = self.query(write, &values)?.execute(&mut *tx).await?;
        let outcome = match done.rows_affected() {
            1 => InstantClaim::Claimed { term, superseded },
            _ => InstantClaim::Refused,
        };
        tx.commit().await?;
        Ok(outcome)
    }

    /// The search in statements of [`NAMES_PER_STATEMENT`] names.
    async fn do_find_unfinished(&self, names: &[&str]) -> Result<Vec<Unfinished>, BoxError> {
        let mut found = Vec::new();
        for chunk in names.chunks(NAMES_PER_STATEMENT) {
            let values: Vec<_> = chunk.iter().map(|n| ("name", Value::Str(n))).collect();
            let rows = self
                .query(self.sql.find_unfinished(chunk.len()).as_str(), &values)?
                .fetch_all(&self.pool)
                .await?;
            for row in &rows {
                found.push(Unfinished::new(
                    row.try_get::<String, _>(0)?,
                    UtcMillis::from_millis(row.try_get(2)?),
                    false,
                    signed_term(row, 1)?,
                ));
            }
        }
        Ok(found)
    }

    async fn do_migrate(&self) -> Result<(), BoxError> {
        let _ = self
            .query(&self.sql.create_table, &[])?
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}
