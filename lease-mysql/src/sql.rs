//! The statements, as constants: bound parameters only. The one thing
//! formatted into them is the validated, quoted table name (`{table}`).
//!
//! Outcomes are read from the OK packet's `last_insert_id`, never from the
//! rows-affected count: every write that succeeds calls `LAST_INSERT_ID(expr)`
//! with a positive value in an assignment only a matched row evaluates, so
//! the packet carries the term (or an outcome code) when the row matched,
//! and 0 (`None`) when it did not. This holds whatever the connection's
//! `CLIENT_FOUND_ROWS` setting is, and a renewal that writes the expiry it
//! already had (two renewals in one millisecond) still reads as held.

use lease_core::Token;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Params, TxOpts, Value, params};

use crate::store::MySqlStore;

/// The database's clock in UTC milliseconds, read in the statement itself.
///
/// `UNIX_TIMESTAMP()` without an argument is the seconds since the epoch,
/// with no session time zone involved; the milliseconds of `NOW(3)` do not
/// depend on the time zone either. Both read the statement's start time, so
/// they cannot straddle a second boundary.
macro_rules! now_ms {
    () => {
        "(UNIX_TIMESTAMP() * 1000 + MICROSECOND(NOW(3)) DIV 1000)"
    };
}

/// The placeholder the table name replaces.
const TABLE: &str = "{table}";

/// The clock read: `SELECT <now>`.
pub(crate) const NOW: &str = concat!("SELECT ", now_ms!());

/// The read of a claim: a plain (consistent, non-locking) read, so a claim
/// refused because the name is held takes no row lock and waits on none:
/// rivals of a held name neither queue on its row nor hold up its holder's
/// renewals.
pub(crate) const CLAIM_READ: &str = concat!(
    "SELECT term, expires_at_ms <= ",
    now_ms!(),
    " FROM {table} WHERE name = :name"
);

/// The write of a claim over a row read free with `:term`: the term check
/// makes it refuse when someone else took the name since the read (the
/// expiry is checked again by the statement's own clock).
pub(crate) const CLAIM_TAKE: &str = concat!(
    "UPDATE {table} SET holder = :holder, instance = :instance, term = LAST_INSERT_ID(term + 1), ",
    "expires_at_ms = ",
    now_ms!(),
    " + :lease_ms ",
    "WHERE name = :name AND term = :term AND expires_at_ms <= ",
    now_ms!()
);

/// The insert of a claim when the read found no row: 1 inserted, 0 when
/// someone inserted the name first (the duplicate's update changes nothing
/// but resets the id; the claim then reads the row again).
pub(crate) const CLAIM_INSERT: &str = concat!(
    "INSERT INTO {table} (name, holder, instance, term, expires_at_ms, slot_ms, unfinished_slot_ms, rerun_slot_ms) ",
    "VALUES (:name, :holder, :instance, LAST_INSERT_ID(1), ",
    now_ms!(),
    " + :lease_ms, 0, 0, 0) ",
    "ON DUPLICATE KEY UPDATE term = term + LAST_INSERT_ID(0)"
);

/// Renewal: `LAST_INSERT_ID(now)` reports the match, and the database's now.
pub(crate) const RENEW: &str = concat!(
    "UPDATE {table} SET expires_at_ms = LAST_INSERT_ID(",
    now_ms!(),
    ") + :lease_ms ",
    "WHERE name = :name AND holder = :holder AND expires_at_ms > ",
    now_ms!()
);

/// The head of a batch renewal; the filter of
/// [`Statements::renew_many`] follows.
const RENEW_MANY_HEAD: &str = concat!("UPDATE {table} SET expires_at_ms = ", now_ms!(), " + ?");

/// The head of the read after a batch renewal: the same filter follows.
const RENEW_MANY_READ: &str = concat!("SELECT name, holder, ", now_ms!(), " FROM {table}");

/// Verify.
pub(crate) const VERIFY: &str = concat!(
    "SELECT term FROM {table} WHERE name = :name AND holder = :holder AND expires_at_ms > ",
    now_ms!()
);

/// Verify as the first statement of a guarded transaction: the shared lock
/// on the row makes every write to it (a successor's claim, and the holder's
/// own renewals) wait until the transaction ends. `LOCK IN SHARE MODE` is
/// understood by MariaDB and MySQL 8 alike (MySQL 8 also spells it `FOR SHARE`).
pub(crate) const VERIFY_LOCKED: &str = concat!(
    "SELECT term FROM {table} WHERE name = :name AND holder = :holder AND expires_at_ms > ",
    now_ms!(),
    " LOCK IN SHARE MODE"
);

/// The guard for other drivers (`MySqlStore::guard_statement`): positional
/// `? name, ? holder, ? term` -> `term`, no row when lost; the same lock as
/// [`VERIFY_LOCKED`].
pub(crate) const GUARD: &str = concat!(
    "SELECT term FROM {table} WHERE name = ? AND holder = ? AND term = ? AND expires_at_ms > ",
    now_ms!(),
    " LOCK IN SHARE MODE"
);

/// Release: `LAST_INSERT_ID(term)` reports the match.
pub(crate) const RELEASE: &str = "UPDATE {table} SET expires_at_ms = 0, term = LAST_INSERT_ID(term) \
     WHERE name = :name AND holder = :holder";

/// The read of an instant claim.
pub(crate) const SLOT_READ: &str = concat!(
    "SELECT term, slot_ms, unfinished_slot_ms, rerun_slot_ms, expires_at_ms <= ",
    now_ms!(),
    " FROM {table} WHERE name = :name"
);

/// The write of an instant claim over a row read with `:term`.
pub(crate) const SLOT_UPDATE: &str = concat!(
    "UPDATE {table} SET holder = :holder, instance = :instance, term = LAST_INSERT_ID(term + 1), ",
    "expires_at_ms = ",
    now_ms!(),
    " + :lease_ms, slot_ms = :slot, unfinished_slot_ms = :slot ",
    "WHERE name = :name AND term = :term AND expires_at_ms <= ",
    now_ms!(),
    " AND slot_ms < :slot"
);

/// The insert of an instant claim when there was no row: 1 inserted, 0 when
/// someone was first (the duplicate's update changes nothing but resets the id).
pub(crate) const SLOT_INSERT: &str = concat!(
    "INSERT INTO {table} (name, holder, instance, term, expires_at_ms, slot_ms, unfinished_slot_ms, rerun_slot_ms) ",
    "VALUES (:name, :holder, :instance, LAST_INSERT_ID(1), ",
    now_ms!(),
    " + :lease_ms, :slot, :slot, 0) ",
    "ON DUPLICATE KEY UPDATE term = term + LAST_INSERT_ID(0)"
);

/// Outcome code of [`FINISH`]: the holder still held the name.
pub(crate) const FINISH_RELEASED: u64 = 1;
/// Outcome code of [`FINISH`]: the end was recorded without the lease.
pub(crate) const FINISH_WITHOUT_LEASE: u64 = 2;

/// Finish, both statements of the specification folded into one: the row
/// matches when `:holder` holds it (give it back, take `:passed` along) or,
/// failing that, when its unfinished instant is still `:slot` (record the end
/// only). `:holder` is NULL when the handle is known lost. The outcome code
/// rides on the `term` assignment, which leaves the term as it was.
pub(crate) const FINISH: &str = concat!(
    "UPDATE {table} SET ",
    "slot_ms = IF(holder <=> :holder AND :passed > slot_ms AND :passed <= ",
    now_ms!(),
    ", :passed, slot_ms), ",
    "expires_at_ms = IF(holder <=> :holder, 0, expires_at_ms), ",
    "unfinished_slot_ms = 0, ",
    "term = term + 0 * LAST_INSERT_ID(IF(holder <=> :holder, 1, 2)) ",
    "WHERE name = :name AND (holder <=> :holder OR unfinished_slot_ms = :slot)"
);

/// The head of the search for unfinished instants; `IN (...)` follows.
const FIND_HEAD: &str = "SELECT name, term, slot_ms FROM {table} WHERE name IN (";

/// The tail of the search for unfinished instants.
const FIND_TAIL: &str = concat!(
    ") AND unfinished_slot_ms = slot_ms AND rerun_slot_ms < slot_ms AND expires_at_ms <= ",
    now_ms!()
);

/// Claim again.
pub(crate) const CLAIM_RERUN: &str = concat!(
    "UPDATE {table} SET holder = :holder, instance = :instance, term = LAST_INSERT_ID(term + 1), ",
    "expires_at_ms = ",
    now_ms!(),
    " + :lease_ms, rerun_slot_ms = slot_ms ",
    "WHERE name = :name AND term = :term AND unfinished_slot_ms = slot_ms ",
    "AND rerun_slot_ms < slot_ms AND expires_at_ms <= ",
    now_ms!()
);

/// The last instant on record.
pub(crate) const LAST_SLOT: &str = "SELECT slot_ms FROM {table} WHERE name = :name";

/// The columns `get` and `list` read, the database's now fifth (never the
/// holder token).
macro_rules! info_columns {
    () => {
        concat!(
            "SELECT name, instance, term, expires_at_ms, ",
            now_ms!(),
            ", slot_ms, unfinished_slot_ms, rerun_slot_ms FROM {table} "
        )
    };
}

/// A forced release: frees the name if its term is still `:term` and it is
/// held; the term rides on `LAST_INSERT_ID` like every outcome.
pub(crate) const FORCE_RELEASE: &str = concat!(
    "UPDATE {table} SET expires_at_ms = 0, term = LAST_INSERT_ID(term) ",
    "WHERE name = :name AND term = :term AND expires_at_ms > ",
    now_ms!()
);

/// One lease's row.
pub(crate) const GET: &str = concat!(info_columns!(), "WHERE name = :name");

/// The rows from `:prefix` on, by name: the column is binary, so the order is
/// byte order and the names that start with the prefix come first (the
/// caller keeps those).
pub(crate) const LIST: &str = concat!(
    info_columns!(),
    "WHERE name >= :prefix ORDER BY name LIMIT :row_limit"
);

/// The statements of one table, rendered once.
#[derive(Debug, Clone)]
pub(crate) struct Statements {
    pub(crate) claim_read: String,
    pub(crate) claim_take: String,
    pub(crate) claim_insert: String,
    pub(crate) renew: String,
    pub(crate) verify: String,
    pub(crate) verify_locked: String,
    pub(crate) guard: String,
    pub(crate) release: String,
    pub(crate) slot_read: String,
    pub(crate) slot_update: String,
    pub(crate) slot_insert: String,
    pub(crate) finish: String,
    pub(crate) claim_rerun: String,
    pub(crate) last_instant: String,
    pub(crate) get: String,
    pub(crate) force_release: String,
    pub(crate) list: String,
    find_head: String,
    quoted: String,
    pub(crate) create_table: String,
}

impl Statements {
    /// Renders every statement for `quoted`, a validated, quoted table name.
    pub(crate) fn new(quoted: &str) -> Self {
        let r = |template: &str| template.replace(TABLE, quoted);
        Statements {
            claim_read: r(CLAIM_READ),
            claim_take: r(CLAIM_TAKE),
            claim_insert: r(CLAIM_INSERT),
            renew: r(RENEW),
            verify: r(VERIFY),
            verify_locked: r(VERIFY_LOCKED),
            guard: r(GUARD),
            release: r(RELEASE),
            slot_read: r(SLOT_READ),
            slot_update: r(SLOT_UPDATE),
            slot_insert: r(SLOT_INSERT),
            finish: r(FINISH),
            claim_rerun: r(CLAIM_RERUN),
            last_instant: r(LAST_SLOT),
            get: r(GET),
            force_release: r(FORCE_RELEASE),
            list: r(LIST),
            find_head: r(FIND_HEAD),
            quoted: quoted.to_owned(),
            create_table: r(crate::schema::CREATE_TABLE),
        }
    }

    /// The batch renewal of `slots` leases, and the read of which are held
    /// after it: positional placeholders, the lease length first in the
    /// update, then `slots` names (so the primary key bounds the rows
    /// touched), then `slots` (name, holder) pairs.
    pub(crate) fn renew_many(&self, slots: usize) -> (String, String) {
        let mut filter = String::with_capacity(16 * slots);
        filter.push_str(" WHERE name IN (");
        for i in 0..slots {
            filter.push_str(if i == 0 { "?" } else { ", ?" });
        }
        filter.push_str(") AND (name, holder) IN (");
        for i in 0..slots {
            filter.push_str(if i == 0 { "(?, ?)" } else { ", (?, ?)" });
        }
        filter.push_str(") AND expires_at_ms > ");
        filter.push_str(now_ms!());
        let update = format!("{}{filter}", RENEW_MANY_HEAD.replace(TABLE, &self.quoted));
        let read = format!("{}{filter}", RENEW_MANY_READ.replace(TABLE, &self.quoted));
        (update, read)
    }

    /// The search for `slots` names: `slots` positional placeholders. The
    /// caller rounds the count up to a power of two (repeating a name), so
    /// that a handful of prepared statements serve every count.
    pub(crate) fn find_unfinished(&self, slots: usize) -> String {
        let mut sql = String::with_capacity(self.find_head.len() + FIND_TAIL.len() + 3 * slots);
        sql.push_str(&self.find_head);
        for i in 0..slots {
            sql.push_str(if i == 0 { "?" } else { ", ?" });
        }
        sql.push_str(FIND_TAIL);
        sql
    }
}

/// The session's SQL mode: strict, so nothing is silently truncated or
/// coerced, and no `ANSI_QUOTES` or `PIPES_AS_CONCAT` a server default might
/// carry.
pub(crate) const SQL_MODE: &str = "STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION";

/// The session setup statement run on every connection of the pool: strict
/// SQL mode, the InnoDB lock-wait bound, autocommit, the real clock (no
/// `SET timestamp` left over), and the server-side statement bound where the
/// server has one. It is run again after each guarded transaction, whose
/// work may have changed any of them.
///
/// The statement bound is written in executable comments: MariaDB runs
/// `/*M!100600 ... */` (`max_statement_time`, seconds, every statement) and
/// ignores `/*!80000 ... */`; MySQL ignores the first and runs the second
/// (`max_execution_time`, milliseconds, `SELECT` only). The numbers are the
/// only formatted parts.
pub(crate) fn session_setup(lock_wait_secs: u64, statement_ms: Option<u64>) -> String {
    let mut sql = format!(
        "SET SESSION sql_mode = '{SQL_MODE}', innodb_lock_wait_timeout = {lock_wait_secs}, \
         autocommit = 1, timestamp = DEFAULT"
    );
    if let Some(ms) = statement_ms {
        let secs = ms / 1000;
        let frac = ms % 1000;
        sql.push_str(&format!(
            " /*M!100600 , max_statement_time = {secs}.{frac:03} */ /*!80000 , max_execution_time = {ms} */"
        ));
    }
    sql
}

/// The session setup for these bounds: [`session_setup`] with the
/// lock-wait bound in whole seconds (at least 1), the statement bound in
/// milliseconds and, on MariaDB, the idle-in-transaction bound
/// (`idle_transaction_timeout`, whole seconds rounded up: never shorter
/// than asked; MySQL ignores the comment). `Err` says which bound is out
/// of range.
pub(crate) fn session_setup_for(
    lock_wait: std::time::Duration,
    statement: Option<std::time::Duration>,
    idle_transaction: Option<std::time::Duration>,
) -> Result<String, String> {
    let lock_wait_secs = lock_wait.as_secs();
    if lock_wait_secs < 1 {
        return Err(format!(
            "the lock-wait timeout ({lock_wait:?}) must be at least 1 s: InnoDB counts it in whole seconds"
        ));
    }
    Ok(session_setup_secs(
        lock_wait_secs,
        statement,
        idle_transaction,
    ))
}

/// The session bounds `timings` derive, in the order [`session_setup_for`]
/// takes them: lock wait, statements, idle in a transaction (MariaDB).
pub(crate) fn timings_bounds(
    timings: &lease_core::Timings,
) -> (
    std::time::Duration,
    Option<std::time::Duration>,
    Option<std::time::Duration>,
) {
    (
        timings.lock_wait_timeout(),
        Some(timings.statement_timeout()),
        Some(timings.deadline()),
    )
}

/// [`session_setup_for`] with the lock-wait bound already in whole seconds
/// (at least 1: a lower value is raised to it).
pub(crate) fn session_setup_secs(
    lock_wait_secs: u64,
    statement: Option<std::time::Duration>,
    idle_transaction: Option<std::time::Duration>,
) -> String {
    let statement_ms = statement.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1));
    let mut setup = session_setup(lock_wait_secs.max(1), statement_ms);
    if let Some(idle) = idle_transaction {
        let secs = idle.as_secs() + u64::from(idle.subsec_nanos() > 0);
        setup.push_str(&format!(
            " /*M!100300 , idle_transaction_timeout = {} */",
            secs.max(1)
        ));
    }
    setup
}

/// How often a write that InnoDB chose as a deadlock victim is tried again
/// within the same call. The victim's statement was rolled back whole.
pub(crate) const DEADLOCK_RETRIES: usize = 2;

impl MySqlStore {
    pub(crate) async fn conn(&self) -> Result<Conn, mysql_async::Error> {
        self.inner.pool.get_conn().await
    }

    /// Runs a write, trying again when InnoDB picked it as a deadlock victim
    /// (its statement was rolled back whole), and returns the OK packet's
    /// `last_insert_id`.
    pub(crate) async fn write(
        &self,
        stmt: &str,
        params: Params,
    ) -> Result<Option<u64>, mysql_async::Error> {
        let mut conn = self.conn().await?;
        write_on(&mut conn, stmt, params).await
    }

    /// The renewals of `leases` (at most [`MAX_RENEWALS_PER_BATCH`]) in one
    /// transaction: one `UPDATE` of every row still held, then one read of
    /// which are held now. Within the transaction the rows the update
    /// renewed stay locked, so the read sees exactly them: a row of one of
    /// these holders that the update did not renew had expired, and only
    /// its holder (this batch) could have extended it. A row the update
    /// renewed reads as not held only when the read came more than the
    /// lease after the update, and it has then expired indeed.
    pub(crate) async fn renew_chunk(
        &self,
        leases: &[(&str, Token<'_>)],
        lease_ms: i64,
    ) -> Result<Vec<Option<i64>>, mysql_async::Error> {
        let Some(last) = leases.last() else {
            return Ok(Vec::new());
        };
        // Round up to a power of two, repeating the last pair, so that a few
        // prepared statements serve every count.
        let slots = leases.len().next_power_of_two();
        let mut names: Vec<Value> = Vec::with_capacity(3 * slots);
        for (name, _) in leases
            .iter()
            .chain(std::iter::repeat_n(last, slots - leases.len()))
        {
            names.push(Value::from(*name));
        }
        let mut pairs: Vec<Value> = Vec::with_capacity(2 * slots);
        for (name, holder) in leases
            .iter()
            .chain(std::iter::repeat_n(last, slots - leases.len()))
        {
            pairs.push(Value::from(*name));
            pairs.push(Value::from(holder.expose()));
        }
        let mut update = Vec::with_capacity(1 + 3 * slots);
        update.push(Value::from(lease_ms));
        update.extend(names.iter().cloned());
        update.extend(pairs.iter().cloned());
        let mut read = names;
        read.extend(pairs);
        let (update_sql, read_sql) = self.inner.sql.renew_many(slots);
        let mut conn = self.conn().await?;
        let mut tries = 0;
        let held = loop {
            let attempt = async {
                let mut tx = conn.start_transaction(TxOpts::default()).await?;
                tx.exec_drop(update_sql.as_str(), Params::Positional(update.clone()))
                    .await?;
                let held: Vec<(Vec<u8>, Vec<u8>, i64)> = tx
                    .exec(read_sql.as_str(), Params::Positional(read.clone()))
                    .await?;
                tx.commit().await?;
                Ok::<_, mysql_async::Error>(held)
            };
            match attempt.await {
                Ok(held) => break held,
                Err(mysql_async::Error::Server(e))
                    if e.code == 1213 && tries < DEADLOCK_RETRIES =>
                {
                    tries += 1;
                    tracing::debug!(tries, "deadlock victim: trying the batch again");
                }
                Err(e) => return Err(e),
            }
        };
        let held: std::collections::HashMap<(&[u8], &[u8]), i64> = held
            .iter()
            .map(|(name, holder, now)| ((name.as_slice(), holder.as_slice()), *now))
            .collect();
        Ok(leases
            .iter()
            .map(|(name, token)| {
                held.get(&(name.as_bytes(), token.expose().as_bytes()))
                    .copied()
            })
            .collect())
    }
}

/// Runs a write on `conn`, trying again when InnoDB picked it as a deadlock
/// victim (its statement was rolled back whole), and returns the OK
/// packet's `last_insert_id`.
pub(crate) async fn write_on(
    conn: &mut Conn,
    stmt: &str,
    params: Params,
) -> Result<Option<u64>, mysql_async::Error> {
    let mut tries = 0;
    loop {
        match conn.exec_drop(stmt, params.clone()).await {
            Ok(()) => return Ok(conn.last_insert_id()),
            Err(mysql_async::Error::Server(e)) if e.code == 1213 && tries < DEADLOCK_RETRIES => {
                tries += 1;
                tracing::debug!(tries, "deadlock victim: trying the statement again");
            }
            Err(e) => return Err(e),
        }
    }
}

/// How many times a claim reads the row again after a rival inserted the
/// name between its read and its insert.
pub(crate) const CLAIM_ROUNDS: usize = 2;

/// A claim on `conn`: a plain read first, so a claim refused because the
/// name is held locks nothing and waits on nothing; then, for a free row,
/// an update checked against the term read (and the expiry, by the
/// statement's clock), or, for a missing row, an insert that does nothing
/// when a rival inserted first (the row is then read again).
pub(crate) async fn claim_on(
    conn: &mut Conn,
    sql: &Statements,
    name: &str,
    holder: &str,
    instance: &str,
    lease_ms: i64,
) -> Result<Option<u64>, mysql_async::Error> {
    for _ in 0..CLAIM_ROUNDS {
        let row: Option<(u64, i64)> = conn
            .exec_first(sql.claim_read.as_str(), params! { "name" => name })
            .await?;
        match row {
            Some((_, 0)) => return Ok(None),
            Some((term, _)) => {
                return write_on(
                    conn,
                    &sql.claim_take,
                    params! {
                        "name" => name,
                        "holder" => holder,
                        "instance" => instance,
                        "lease_ms" => lease_ms,
                        "term" => term,
                    },
                )
                .await;
            }
            None => {
                let inserted = write_on(
                    conn,
                    &sql.claim_insert,
                    params! {
                        "name" => name,
                        "holder" => holder,
                        "instance" => instance,
                        "lease_ms" => lease_ms,
                    },
                )
                .await?;
                if inserted == Some(1) {
                    return Ok(Some(1));
                }
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod exec_tests {
    use std::time::Duration;

    use lease_core::LeaseStore;

    use super::*;

    /// A rival's refused claims, many and concurrent, each left inside an
    /// open transaction (so any row lock it took would still be held), do
    /// not hold up the holder's renewal, nor each other. With a claim that
    /// locks the held row to refuse it (`INSERT ... ON DUPLICATE KEY
    /// UPDATE`), the rivals queue on the row and the renewal waits for the
    /// lock until InnoDB's lock-wait bound fails it.
    #[tokio::test]
    async fn refused_claims_in_open_transactions_do_not_hold_up_the_renewal() {
        let Some(url) = lease_conformance::env_url("LEASE_TEST_MYSQL_URL") else {
            return;
        };
        let table = "lm_refused_claim_locks";
        let store = MySqlStore::builder(&url)
            .unwrap()
            .with_table(table)
            .with_lock_wait_timeout(Duration::from_secs(1))
            .connect()
            .await
            .unwrap();
        let mut setup = store.inner.pool.get_conn().await.unwrap();
        setup
            .query_drop(format!("DROP TABLE IF EXISTS `{table}`"))
            .await
            .unwrap();
        store.migrate().await.unwrap();
        let term = LeaseStore::claim(
            &store,
            lease_core::ClaimRequest {
                name: "held",
                token: Token::new("holder"),
                instance: "a",
                lease_ms: 60_000,
            },
        )
        .await
        .unwrap();
        assert_eq!(term, Some(1));

        let rivals: Vec<_> = (0..8)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    let mut conn = store.inner.pool.get_conn().await?;
                    conn.query_drop("START TRANSACTION").await?;
                    let rival = format!("rival-{i}");
                    let claimed =
                        claim_on(&mut conn, &store.inner.sql, "held", &rival, "b", 60_000).await?;
                    Ok::<_, mysql_async::Error>((conn, claimed))
                })
            })
            .collect();
        let mut settled = Vec::new();
        for rival in rivals {
            settled.push(rival.await.unwrap());
        }
        // Every rival's transaction is still open here.
        let renewed = LeaseStore::renew(&store, "held", Token::new("holder"), 60_000).await;
        let mut refused = Vec::new();
        for rival in settled {
            match rival {
                Ok((mut conn, claimed)) => {
                    let _ = conn.query_drop("ROLLBACK").await;
                    refused.push(format!("{claimed:?}"));
                }
                Err(e) => refused.push(format!("error: {e}")),
            }
        }
        // Best effort: a rival that failed left its transaction to the pool.
        let _ = setup
            .query_drop(format!("DROP TABLE IF EXISTS `{table}`"))
            .await;
        assert!(
            matches!(renewed, Ok(Some(_))),
            "the holder renews while the rivals' transactions are open: {renewed:?}"
        );
        assert!(
            refused.iter().all(|r| r == "None"),
            "every rival's claim is refused at once, none waits on another: {refused:?}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_statement_is_rendered_with_the_table_and_nothing_else() {
        let s = Statements::new("`t1`");
        for sql in [
            &s.claim_read,
            &s.claim_take,
            &s.claim_insert,
            &s.renew,
            &s.verify,
            &s.verify_locked,
            &s.release,
            &s.slot_read,
            &s.slot_update,
            &s.slot_insert,
            &s.finish,
            &s.claim_rerun,
            &s.last_instant,
            &s.get,
            &s.force_release,
            &s.list,
            &s.create_table,
        ] {
            assert!(sql.contains("`t1`"), "{sql}");
            assert!(!sql.contains('{'), "{sql}");
        }
        let (update, read) = s.renew_many(2);
        assert!(
            update.contains("`t1`") && read.contains("`t1`"),
            "{update} {read}"
        );
        assert!(
            update.contains("name IN (?, ?) AND (name, holder) IN ((?, ?), (?, ?))"),
            "{update}"
        );
        let find = s.find_unfinished(3);
        assert!(find.contains("IN (?, ?, ?)"), "{find}");
    }

    #[test]
    fn session_setup_formats_numbers_only() {
        assert_eq!(
            session_setup(3, Some(4_500)),
            format!(
                "SET SESSION sql_mode = '{SQL_MODE}', innodb_lock_wait_timeout = 3, \
                 autocommit = 1, timestamp = DEFAULT \
                 /*M!100600 , max_statement_time = 4.500 */ /*!80000 , max_execution_time = 4500 */"
            )
        );
        assert!(!session_setup(2, None).contains("max_"));
    }
}
