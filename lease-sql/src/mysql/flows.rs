//! MySQL's flows, on any driver's [`MySqlConn`]: the claims' reads and
//! writes, the batch renewal's transaction, the deadlock retries, and the
//! decoding of MySQL's rows.

use std::collections::HashSet;
use std::future::Future;

use lease_core::{
    BoxError, ClaimRequest, FinishRequest, Finished, InstantClaim, LeaseInfo, Renewed, Token,
    Unfinished,
};

use super::{
    CLAIM_ROUNDS, DEADLOCK, DEADLOCK_RETRIES, FINISH_RELEASED, FINISH_WITHOUT_LEASE,
    MAX_NAMES_PER_SEARCH, MAX_RENEWALS_PER_BATCH, Statements,
};
use crate::Found;
use crate::common::{self, InstantStep, claim_args};
use crate::conn::{Conn, Done, Row, first};
use crate::statement::{Args, Statement};

/// A connection of a MySQL driver, with what the flows need besides
/// statements: the server's error numbers (for the deadlock retries), and
/// the batch renewal's transaction.
pub trait MySqlConn: Conn {
    /// The server's error number of `error`, when it is a server's error.
    fn error_number(error: &(dyn std::error::Error + 'static)) -> Option<u16>;

    /// Runs `write`, then `read` (each a statement and its values), in one
    /// transaction on this connection, committed: `read`'s rows.
    fn write_then_read(
        &mut self,
        write: (&Statement, &Args<'_>),
        read: (&Statement, &Args<'_>),
    ) -> impl Future<Output = Result<Vec<Self::Row>, BoxError>> + Send;

    /// Runs `statement`, an `UPDATE`, on its own (autocommit), and answers
    /// its reply with `rows_affected` the rows it **matched**, changed or
    /// not, whatever the connection's `CLIENT_FOUND_ROWS` setting (from
    /// the OK packet's info, `Rows matched: N`, when the driver has it; a
    /// driver that cannot tell may answer the rows changed, fewer, which
    /// costs the batch renewal its read but never a wrong answer), and its
    /// `last_insert_id`.
    fn execute_matched(
        &mut self,
        statement: &Statement,
        args: &Args<'_>,
    ) -> impl Future<Output = Result<Done, BoxError>> + Send;
}

/// The rows an `UPDATE` matched, from the info of MySQL's OK packet
/// (`Rows matched: 3  Changed: 3  Warnings: 0`), whatever
/// `CLIENT_FOUND_ROWS` says; `None` without one: for a driver's
/// [`MySqlConn::execute_matched`].
///
/// ```
/// use lease_sql::mysql::rows_matched;
///
/// assert_eq!(rows_matched("Rows matched: 1000  Changed: 998  Warnings: 0"), Some(1000));
/// assert_eq!(rows_matched("Records: 3  Duplicates: 0  Warnings: 0"), None);
/// assert_eq!(rows_matched(""), None);
/// ```
#[must_use]
pub fn rows_matched(info: &str) -> Option<u64> {
    info.split("Rows matched:")
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Whether `error` is InnoDB's deadlock: the victim's statement was rolled
/// back whole, so it may run again.
fn deadlock<C: MySqlConn>(error: &BoxError) -> bool {
    C::error_number(error.as_ref()) == Some(DEADLOCK)
}

/// Runs a write, trying again when InnoDB picked it as a deadlock victim,
/// and returns the OK packet's `last_insert_id` (`None` for 0: no row
/// matched).
///
/// # Errors
///
/// The driver's.
pub async fn write<C: MySqlConn>(
    conn: &mut C,
    statement: &Statement,
    args: &Args<'_>,
) -> Result<Option<u64>, BoxError> {
    let mut tries = 0;
    loop {
        match conn.execute(statement, args).await {
            Ok(Done { last_insert_id, .. }) => {
                return Ok(Some(last_insert_id).filter(|id| *id != 0));
            }
            Err(e) if deadlock::<C>(&e) && tries < DEADLOCK_RETRIES => {
                tries += 1;
                tracing::debug!(tries, "deadlock victim: trying the statement again");
            }
            Err(e) => return Err(e),
        }
    }
}

/// [`LeaseStore::claim`](lease_core::LeaseStore::claim): a plain read
/// first, so a claim refused because the name is held locks nothing and
/// waits on nothing; then, for a free row, an update checked against the
/// term read (and the expiry, by the statement's clock), or, for a missing
/// row, an insert that does nothing when a rival inserted first (the row is
/// then read again). All on `conn`.
///
/// # Errors
///
/// The driver's.
pub async fn claim<C: MySqlConn>(
    conn: &mut C,
    sql: &Statements,
    claim: &ClaimRequest<'_>,
) -> Result<Option<u64>, BoxError> {
    for _ in 0..CLAIM_ROUNDS {
        let row = first(conn, &sql.claim_read, &Args::new().name(claim.name)).await?;
        match row {
            Some(row) if row.int(1)? == 0 => return Ok(None),
            Some(row) => {
                let term = row.uint(0)?;
                return write(conn, &sql.claim_take, &claim_args(claim).term(term)).await;
            }
            None => {
                if write(conn, &sql.claim_insert, &claim_args(claim)).await? == Some(1) {
                    return Ok(Some(1));
                }
            }
        }
    }
    Ok(None)
}

/// [`LeaseStore::renew`](lease_core::LeaseStore::renew): the statement's
/// `LAST_INSERT_ID(now * 2 + resign)` carries the database's now and the
/// resign request back in the OK packet when the row matched (0, `None`,
/// when not).
///
/// # Errors
///
/// The driver's.
pub async fn renew<C: MySqlConn>(
    conn: &mut C,
    sql: &Statements,
    name: &str,
    token: Token<'_>,
    lease_ms: i64,
) -> Result<Option<Renewed>, BoxError> {
    let args = Args::new().name(name).token(token).lease_ms(lease_ms);
    let id = write(conn, &sql.renew, &args).await?;
    id.map(|id| {
        Ok(Renewed {
            now_ms: i64::try_from(id / 2)?,
            resign: id % 2 == 1,
        })
    })
    .transpose()
}

/// [`LeaseStore::renew_many`](lease_core::LeaseStore::renew_many): for each
/// [`MAX_RENEWALS_PER_BATCH`] leases, one `UPDATE` of every row still held
/// (one round trip), whose reply says how many rows it matched and, in its
/// `last_insert_id`, the database's now. When it matched one row per
/// distinct (name, token) pair of the batch, every lease was renewed, at
/// that now. When it matched fewer, a read says which of the pairs hold
/// their row now: a row that one of these holders holds and the update
/// did not renew had expired, and only its holder (this batch) could have
/// extended it, so the rows read as held are exactly the ones the update
/// renewed (a renewed row reads as not held only when it was released
/// since, or the read came more than the lease after the update, and it
/// has expired indeed). Each renewed lease is reported at the update's now.
///
/// The update leaves out the rows whose holder was asked to resign, so
/// that a batch with one matches fewer rows and reads: the read says which
/// were asked, and each of those is renewed on its own ([`renew`], which
/// reports the request). A request thus costs the batches of its lease's
/// wind-down a read and a renewal each; a batch with none costs what it
/// did.
///
/// # Errors
///
/// The driver's.
pub async fn renew_many<C: MySqlConn>(
    conn: &mut C,
    sql: &Statements,
    leases: &[(&str, Token<'_>)],
    lease_ms: i64,
) -> Result<Vec<Option<Renewed>>, BoxError> {
    let mut held = Vec::with_capacity(leases.len());
    for chunk in leases.chunks(MAX_RENEWALS_PER_BATCH) {
        // Round up to a power of two, repeating the last pair, so that a few
        // prepared statements serve every count.
        let slots = chunk.len().next_power_of_two();
        let (names, tokens) = common::split(chunk, slots);
        let read_args = Args::new().names(&names).tokens(&tokens);
        let update_args = read_args.lease_ms(lease_ms);
        let (update, read) = sql.renew_many(slots);
        let mut tries = 0;
        let done = loop {
            match conn.execute_matched(&update, &update_args).await {
                Ok(done) => break done,
                Err(e) if deadlock::<C>(&e) && tries < DEADLOCK_RETRIES => {
                    tries += 1;
                    tracing::debug!(tries, "deadlock victim: trying the batch again");
                }
                Err(e) => return Err(e),
            }
        };
        // `LAST_INSERT_ID(now)` runs for each row matched: 0, none was.
        let now = (done.last_insert_id != 0)
            .then(|| i64::try_from(done.last_insert_id))
            .transpose()?;
        let pairs: HashSet<(&str, &str)> = chunk
            .iter()
            .map(|(name, token)| (*name, token.expose()))
            .collect();
        if let Some(now) = now.filter(|_| done.rows_affected == pairs.len() as u64) {
            held.extend(chunk.iter().map(|_| Some(Renewed::at(now))));
            continue;
        }
        let rows = conn.rows(&read, &read_args).await?;
        let found = common::renewed(chunk, &rows, binary_text)?;
        for ((name, token), row) in chunk.iter().zip(found) {
            held.push(match (row, now) {
                (None, _) => None,
                (Some(read), Some(now)) if !read.resign => Some(Renewed::at(now)),
                // Asked to resign (left out of the update), or read held
                // though the update matched nothing: renewed on its own.
                (Some(_), _) => renew(conn, sql, name, *token, lease_ms).await?,
            });
        }
    }
    Ok(held)
}

/// [`LeaseStore::release`](lease_core::LeaseStore::release).
///
/// # Errors
///
/// The driver's.
pub async fn release<C: MySqlConn>(
    conn: &mut C,
    sql: &Statements,
    name: &str,
    token: Token<'_>,
) -> Result<bool, BoxError> {
    let args = Args::new().name(name).token(token);
    Ok(write(conn, &sql.release, &args).await?.is_some())
}

/// [`LeaseStore::claim_instant`](lease_core::LeaseStore::claim_instant): a
/// plain read, then an insert or the update of the row read, each reading
/// its outcome from its own reply.
///
/// # Errors
///
/// The driver's.
pub async fn claim_instant<C: MySqlConn>(
    conn: &mut C,
    sql: &Statements,
    claim: &ClaimRequest<'_>,
    instant_ms: i64,
) -> Result<InstantClaim, BoxError> {
    let row = first(conn, &sql.instant_read, &Args::new().name(claim.name)).await?;
    let read = match row {
        None => None,
        Some(row) => Some((
            row.uint(0)?,
            common::instant_record(&row, 1)?,
            row.int(4)? != 0,
        )),
    };
    let step = InstantStep::after(read, instant_ms);
    let args = claim_args(claim).instant_ms(instant_ms);
    let written = match step {
        InstantStep::Refuse => None,
        InstantStep::Insert => {
            (write(conn, &sql.instant_insert, &args).await? == Some(1)).then_some(1)
        }
        InstantStep::Update { term, .. } => {
            write(conn, &sql.instant_update, &args.term(term)).await?
        }
    };
    Ok(step.outcome(claim.name, written))
}

/// [`LeaseStore::finish`](lease_core::LeaseStore::finish): the outcome
/// rides on `LAST_INSERT_ID`.
///
/// # Errors
///
/// The driver's.
pub async fn finish<C: MySqlConn>(
    conn: &mut C,
    sql: &Statements,
    finish: &FinishRequest<'_>,
) -> Result<Finished, BoxError> {
    Ok(
        match write(conn, &sql.finish, &common::finish_args(finish)).await? {
            Some(FINISH_RELEASED) => Finished::Released,
            Some(FINISH_WITHOUT_LEASE) => Finished::RecordedWithoutLease,
            _ => Finished::NotRecorded,
        },
    )
}

/// [`LeaseStore::find_unfinished`](lease_core::LeaseStore::find_unfinished):
/// statements of at most [`MAX_NAMES_PER_SEARCH`] names, each count rounded
/// up to a power of two, all on `conn`.
///
/// # Errors
///
/// The driver's.
pub async fn find_unfinished<C: MySqlConn>(
    conn: &mut C,
    sql: &Statements,
    names: &[&str],
) -> Result<Vec<Unfinished>, BoxError> {
    let mut found = Vec::new();
    for chunk in names.chunks(MAX_NAMES_PER_SEARCH) {
        let slots = chunk.len().next_power_of_two();
        let padded = common::padded(chunk, slots);
        let rows = conn
            .rows(&sql.find_unfinished(slots), &Args::new().names(&padded))
            .await?;
        for row in &rows {
            found.push(common::unfinished(row, binary_text, |row, i| row.uint(i))?);
        }
    }
    Ok(found)
}

/// [`LeaseStore::claim_rerun`](lease_core::LeaseStore::claim_rerun).
///
/// # Errors
///
/// The driver's.
pub async fn claim_rerun<C: MySqlConn>(
    conn: &mut C,
    sql: &Statements,
    claim: &ClaimRequest<'_>,
    term: u64,
) -> Result<bool, BoxError> {
    let args = claim_args(claim).term(term);
    Ok(write(conn, &sql.claim_rerun, &args).await?.is_some())
}

/// [`LeaseStore::force_release`](lease_core::LeaseStore::force_release).
///
/// # Errors
///
/// The driver's.
pub async fn force_release<C: MySqlConn>(
    conn: &mut C,
    sql: &Statements,
    name: &str,
    term: u64,
) -> Result<bool, BoxError> {
    let args = Args::new().name(name).term(term);
    Ok(write(conn, &sql.force_release, &args).await?.is_some())
}

/// [`LeaseStore::request_resign`](lease_core::LeaseStore::request_resign).
///
/// # Errors
///
/// The driver's.
pub async fn request_resign<C: MySqlConn>(
    conn: &mut C,
    sql: &Statements,
    name: &str,
    term: u64,
) -> Result<bool, BoxError> {
    let args = Args::new().name(name).term(term);
    Ok(write(conn, &sql.request_resign, &args).await?.is_some())
}

common::read_flows!(term: |row: &_, i| Row::uint(row, i), info: info);

/// Inspects the existing table, reading `information_schema` only (so a
/// user without the `CREATE` privilege can run it):
///
/// - every column the statements use is there;
/// - `name` is binary, so names compare byte for byte;
/// - no column is `AUTO_INCREMENT`, and no trigger is on the table. The
///   statements read their outcome and the term from the OK packet's
///   insert id (see the module docs), which an `AUTO_INCREMENT` column
///   replaces with its own id (a wrong term: a wrong fencing token) and
///   which a trigger inserting into a table with one disturbs (a claim
///   that succeeded read as refused). A trigger is seen only by a user
///   with the `TRIGGER` privilege on the table: for any other, the rule
///   stands unchecked.
///
/// # Errors
///
/// The driver's.
pub async fn inspect<C: Conn>(conn: &mut C, sql: &Statements) -> Result<Found, BoxError> {
    let place = Args::new()
        .schema(sql.table().schema())
        .table_name(sql.table().table());
    let rows = conn.rows(&sql.table_columns, &place).await?;
    let columns = rows
        .iter()
        .map(|row| Ok((row.text(0)?, row.text(1)?, row.text(2)?)))
        .collect::<Result<Vec<_>, BoxError>>()?;
    let found = judge_columns(&columns);
    if found != Found::Usable {
        return Ok(found);
    }
    let rows = conn.rows(&sql.table_triggers, &place).await?;
    let triggers = rows
        .iter()
        .map(|row| row.text(0))
        .collect::<Result<Vec<_>, BoxError>>()?;
    Ok(judge_triggers(&triggers))
}

/// `migrate`: the table looked for in `information_schema` first (so a
/// user without `CREATE` can migrate an existing table), created when
/// missing (`CREATE TABLE IF NOT EXISTS` takes the name's metadata lock:
/// replicas may race), given the columns added since when it lacks them
/// ([`Found::Outdated`]: `ALTER TABLE .. ADD COLUMN`, which needs the
/// `ALTER` privilege), then checked. [`Found::Missing`] only when the table
/// is still not there after its creation.
///
/// # Errors
///
/// The driver's.
pub async fn migrate<C: MySqlConn>(conn: &mut C, sql: &Statements) -> Result<Found, BoxError> {
    match inspect(conn, sql).await? {
        Found::Missing => {
            let _created = conn.execute(&sql.create_table, &Args::new()).await?;
        }
        Found::Outdated => match conn.execute(&sql.add_resign_column, &Args::new()).await {
            Ok(_) => {}
            // Another replica added it first.
            Err(e) if C::error_number(e.as_ref()) == Some(DUPLICATE_COLUMN) => {}
            Err(e) => return Err(e),
        },
        found => return Ok(found),
    }
    inspect(conn, sql).await
}

/// `ER_DUP_FIELDNAME`: the column exists already.
const DUPLICATE_COLUMN: u16 = 1060;

/// What [`Statements::table_columns`]' rows (name, type, `EXTRA`) say of
/// the table: the first half of [`inspect`].
#[must_use]
pub fn judge_columns(columns: &[(String, String, String)]) -> Found {
    if columns.is_empty() {
        return Found::Missing;
    }
    let names: Vec<&str> = columns.iter().map(|(c, ..)| c.as_str()).collect();
    match Found::columns(&names, str::eq_ignore_ascii_case) {
        Found::Usable => {}
        lacking => return lacking,
    }
    let name_type = columns
        .iter()
        .find(|(c, ..)| c.eq_ignore_ascii_case("name"))
        .map(|(_, t, _)| t.to_ascii_lowercase())
        .unwrap_or_default();
    if name_type != "varbinary" && name_type != "binary" {
        return Found::Incompatible(format!(
            "its name column is {name_type}, not VARBINARY: names would not compare byte for byte"
        ));
    }
    if let Some((column, ..)) = columns
        .iter()
        .find(|(_, _, extra)| extra.to_ascii_lowercase().contains("auto_increment"))
    {
        return Found::Incompatible(format!(
            "its column {column} is AUTO_INCREMENT, whose ids would replace the terms the \
             statements read back from the insert id: drop the column"
        ));
    }
    Found::Usable
}

/// What [`Statements::table_triggers`]' rows say of the table: the second
/// half of [`inspect`].
#[must_use]
pub fn judge_triggers(triggers: &[String]) -> Found {
    match triggers.first() {
        Some(trigger) => Found::Incompatible(format!(
            "it has the trigger {trigger}, which can disturb the insert id the statements read \
             their outcome from: the lease table must have no trigger"
        )),
        None => Found::Usable,
    }
}

/// A name (or token) stored `VARBINARY`, whose bytes the store wrote from a
/// `&str`.
fn binary_text(row: &impl Row, i: usize) -> Result<String, BoxError> {
    Ok(String::from_utf8(row.bytes(i)?)?)
}

/// A row of `get` or `list`.
fn info(row: &impl Row) -> Result<LeaseInfo, BoxError> {
    Ok(LeaseInfo {
        name: binary_text(row, 0)?,
        instance: String::from_utf8_lossy(&row.bytes(1)?).into_owned(),
        term: row.uint(2)?,
        expires_at_ms: row.int(3)?,
        now_ms: row.int(4)?,
        slot_ms: row.int(5)?,
        unfinished_slot_ms: row.int(6)?,
        rerun_slot_ms: row.int(7)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_verdicts() {
        let col = |n: &str, t: &str, e: &str| (n.to_owned(), t.to_owned(), e.to_owned());
        assert_eq!(judge_columns(&[]), Found::Missing);
        let mut cols: Vec<_> = crate::COLUMNS
            .iter()
            .map(|c| col(c, if *c == "name" { "varbinary" } else { "bigint" }, ""))
            .collect();
        assert_eq!(judge_columns(&cols), Found::Outdated, "the first schema");
        cols.push(col("resign_term", "bigint", ""));
        assert_eq!(judge_columns(&cols), Found::Usable);
        cols.push(col("id", "int", "auto_increment"));
        assert!(
            matches!(judge_columns(&cols), Found::Incompatible(r) if r.contains("AUTO_INCREMENT"))
        );
        let _ = cols.pop();
        cols[0].1 = "varchar".to_owned();
        assert!(
            matches!(judge_columns(&cols), Found::Incompatible(r) if r.contains("not VARBINARY"))
        );
        assert!(matches!(
            judge_triggers(&["t".to_owned()]),
            Found::Incompatible(_)
        ));
        assert_eq!(judge_triggers(&[]), Found::Usable);
    }

    /// A row of the batch renewal's read: name, holder (binary), now,
    /// resign.
    struct Read(&'static str, &'static str, i64, bool);

    impl Row for Read {
        fn int(&self, _: usize) -> Result<i64, BoxError> {
            Ok(self.2)
        }

        fn nullable_int(&self, _: usize) -> Result<Option<i64>, BoxError> {
            Ok(Some(self.2))
        }

        fn flag(&self, _: usize) -> Result<bool, BoxError> {
            Ok(self.3)
        }

        fn text(&self, i: usize) -> Result<String, BoxError> {
            Ok(if i == 0 { self.0 } else { self.1 }.to_owned())
        }
    }

    /// A connection whose update matches `matched` rows at `now` (0: none
    /// matched), whose read answers `held` (name, holder, asked to resign),
    /// and whose single renewals answer at 601, asked to resign; it counts
    /// what it is sent.
    struct Scripted {
        matched: u64,
        now: u64,
        held: Vec<(&'static str, &'static str, bool)>,
        updates: usize,
        reads: usize,
        singles: usize,
    }

    impl Conn for Scripted {
        type Row = Read;

        async fn rows(&mut self, _: &Statement, _: &Args<'_>) -> Result<Vec<Read>, BoxError> {
            self.reads += 1;
            // The read's own now is later than the update's.
            Ok(self
                .held
                .iter()
                .map(|(n, h, resign)| Read(n, h, 999, *resign))
                .collect())
        }

        async fn execute(&mut self, _: &Statement, _: &Args<'_>) -> Result<Done, BoxError> {
            self.singles += 1;
            Ok(Done {
                rows_affected: 1,
                last_insert_id: 601 * 2 + 1,
            })
        }
    }

    impl MySqlConn for Scripted {
        fn error_number(_: &(dyn std::error::Error + 'static)) -> Option<u16> {
            None
        }

        async fn write_then_read(
            &mut self,
            _: (&Statement, &Args<'_>),
            _: (&Statement, &Args<'_>),
        ) -> Result<Vec<Read>, BoxError> {
            Err("the batch renewal runs no transaction".into())
        }

        async fn execute_matched(&mut self, _: &Statement, _: &Args<'_>) -> Result<Done, BoxError> {
            self.updates += 1;
            Ok(Done {
                rows_affected: self.matched,
                last_insert_id: self.now,
            })
        }
    }

    /// The batch renewal is the update alone when it matched a row per
    /// pair (a pair given twice counts once), the update and the read when
    /// it matched fewer (each lease read as held renewed at the update's
    /// now, not the read's; each read as asked to resign, which the update
    /// left out, renewed on its own, which reports the request).
    #[test]
    fn a_batch_renewal_reads_only_when_the_update_matched_fewer_than_its_pairs() {
        let sql = Statements::new(super::super::default_table());
        let batch = [
            ("a", Token::new("x")),
            ("b", Token::new("x")),
            ("a", Token::new("x")),
        ];
        let run = |conn: &mut Scripted, leases: &[(&str, Token<'_>)]| {
            let flow = renew_many(conn, &sql, leases, 1_000);
            at_once(flow).unwrap()
        };
        let scripted = |matched, now, held| Scripted {
            matched,
            now,
            held,
            updates: 0,
            reads: 0,
            singles: 0,
        };
        let at = |now| Some(Renewed::at(now));
        let mut all = scripted(2, 500, Vec::new());
        assert_eq!(run(&mut all, &batch), [at(500); 3]);
        assert_eq!((all.updates, all.reads, all.singles), (1, 0, 0));

        let mut some = scripted(1, 500, vec![("b", "x", false)]);
        assert_eq!(run(&mut some, &batch), [None, at(500), None]);
        assert_eq!((some.updates, some.reads, some.singles), (1, 1, 0));

        let mut none = scripted(0, 0, Vec::new());
        assert_eq!(run(&mut none, &batch), [None; 3]);
        assert_eq!((none.updates, none.reads, none.singles), (1, 1, 0));

        let asked = Some(Renewed {
            now_ms: 601,
            resign: true,
        });
        let mut resign = scripted(1, 500, vec![("a", "x", false), ("b", "x", true)]);
        assert_eq!(run(&mut resign, &batch), [at(500), asked, at(500)]);
        assert_eq!((resign.updates, resign.reads, resign.singles), (1, 1, 1));
        let mut only = scripted(0, 0, vec![("b", "x", true)]);
        assert_eq!(run(&mut only, &batch), [None, asked, None]);
        assert_eq!((only.updates, only.reads, only.singles), (1, 1, 1));
    }

    /// Polls `future` to its end on this thread: the scripted connection
    /// answers at once, so it completes on its first poll.
    fn at_once<F: Future>(future: F) -> F::Output {
        let mut future = std::pin::pin!(future);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match future.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(out) => out,
            std::task::Poll::Pending => panic!("the scripted flow waited"),
        }
    }
}
