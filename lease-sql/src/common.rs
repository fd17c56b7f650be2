//! What the three dialects decide and decode alike.

use std::collections::HashMap;

use lease_core::{
    BoxError, ClaimRequest, FinishRequest, Finished, InstantClaim, InstantRecord, LeaseInfo,
    Renewed, Token, Unfinished, UtcMillis,
};

use crate::conn::{Conn, Row, first};
use crate::statement::{Args, Statement};
use crate::term_param;

/// The values of a claim: name, token, instance and lease length.
pub(crate) fn claim_args<'a>(claim: &ClaimRequest<'a>) -> Args<'a> {
    Args::new()
        .name(claim.name)
        .token(claim.token)
        .instance(claim.instance)
        .lease_ms(claim.lease_ms)
}

/// The names and the tokens of a batch, apart, each padded to `slots` by
/// repeating the last (so that a few prepared statements serve every
/// count).
pub(crate) fn split<'a>(
    leases: &[(&'a str, Token<'a>)],
    slots: usize,
) -> (Vec<&'a str>, Vec<Token<'a>>) {
    let mut names: Vec<&'a str> = leases.iter().map(|(name, _)| *name).collect();
    let mut tokens: Vec<Token<'a>> = leases.iter().map(|(_, token)| *token).collect();
    if let (Some(name), Some(token)) = (names.last().copied(), tokens.last().copied()) {
        names.resize(slots, name);
        tokens.resize(slots, token);
    }
    (names, tokens)
}

/// `names` padded to `slots` by repeating the last.
pub(crate) fn padded<'a>(names: &[&'a str], slots: usize) -> Vec<&'a str> {
    let mut padded = names.to_vec();
    if let Some(last) = names.last() {
        padded.resize(slots, *last);
    }
    padded
}

/// Which of `leases` a batch renewal found held, by the rows it returned
/// (name, token, what the renewal answered), in the order of `leases`.
pub(crate) fn held(
    leases: &[(&str, Token<'_>)],
    renewed: impl IntoIterator<Item = (String, String, Renewed)>,
) -> Vec<Option<Renewed>> {
    let renewed: HashMap<(String, String), Renewed> = renewed
        .into_iter()
        .map(|(name, token, renewed)| ((name, token), renewed))
        .collect();
    leases
        .iter()
        .map(|(name, token)| {
            renewed
                .get(&((*name).to_owned(), token.expose().to_owned()))
                .copied()
        })
        .collect()
}

/// Which of `leases` a batch renewal found held, by the rows it returned
/// (`name, holder, now, resign`, the name and the token read by `text`).
pub(crate) fn renewed<R: Row>(
    leases: &[(&str, Token<'_>)],
    rows: &[R],
    text: impl Fn(&R, usize) -> Result<String, BoxError>,
) -> Result<Vec<Option<Renewed>>, BoxError> {
    let rows = rows
        .iter()
        .map(|row| Ok((text(row, 0)?, text(row, 1)?, renewal(row, 2)?)))
        .collect::<Result<Vec<_>, BoxError>>()?;
    Ok(held(leases, rows))
}

/// What a renewal answered, at columns `at` (the database's now) and
/// `at + 1` (whether the holder was asked to resign).
pub(crate) fn renewal(row: &impl Row, at: usize) -> Result<Renewed, BoxError> {
    Ok(Renewed {
        now_ms: row.int(at)?,
        resign: row.flag(at + 1)?,
    })
}

/// The rows of `get` and `list` decoded by `info`, those of `list` kept
/// while they start with `prefix` (they come by name from the prefix on).
pub(crate) async fn infos<C: Conn>(
    conn: &mut C,
    statement: &Statement,
    args: &Args<'_>,
    prefix: &str,
    info: impl Fn(&C::Row) -> Result<LeaseInfo, BoxError>,
) -> Result<Vec<LeaseInfo>, BoxError> {
    let rows = conn.rows(statement, args).await?;
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

/// The database's clock, read by `statement`.
pub(crate) async fn now_ms<C: Conn>(conn: &mut C, statement: &Statement) -> Result<i64, BoxError> {
    first(conn, statement, &Args::new())
        .await?
        .ok_or("the clock read returned no row")?
        .int(0)
}

/// The first column of the first row as an integer, if there is a row.
pub(crate) async fn int_of<C: Conn>(
    conn: &mut C,
    statement: &Statement,
    args: &Args<'_>,
) -> Result<Option<i64>, BoxError> {
    first(conn, statement, args)
        .await?
        .map(|row| row.int(0))
        .transpose()
}

/// The first column of the first row as a term stored signed, if there
/// is a row.
pub(crate) async fn term_of<C: Conn>(
    conn: &mut C,
    statement: &Statement,
    args: &Args<'_>,
) -> Result<Option<u64>, BoxError> {
    first(conn, statement, args)
        .await?
        .map(|row| signed_term(&row, 0))
        .transpose()
}

/// Whether a write changed its row.
pub(crate) async fn changed_one<C: Conn>(
    conn: &mut C,
    statement: &Statement,
    args: &Args<'_>,
) -> Result<bool, BoxError> {
    Ok(conn.execute(statement, args).await?.rows_affected == 1)
}

/// The values of the end of a round: name, token (or NULL), instant,
/// passed.
pub(crate) fn finish_args<'a>(finish: &FinishRequest<'a>) -> Args<'a> {
    Args::new()
        .name(finish.name)
        .token_or_null(finish.token)
        .instant_ms(finish.instant_ms)
        .passed_ms(finish.passed_ms)
}

/// The end of a round in one statement that answers whether the holder's
/// branch applied (PostgreSQL, SQLite).
pub(crate) async fn finish<C: Conn>(
    conn: &mut C,
    statement: &Statement,
    finish: &FinishRequest<'_>,
) -> Result<Finished, BoxError> {
    let row = first(conn, statement, &finish_args(finish)).await?;
    Ok(finished(row.map(|row| row.flag(0)).transpose()?))
}

/// The second claim at `term`, on a dialect that stores terms signed: a
/// term past `i64::MAX` is in no row, so nothing to claim.
pub(crate) async fn claim_rerun<C: Conn>(
    conn: &mut C,
    statement: &Statement,
    claim: &ClaimRequest<'_>,
    term: u64,
) -> Result<bool, BoxError> {
    if term_param(term).is_none() {
        return Ok(false);
    }
    changed_one(conn, statement, &claim_args(claim).term(term)).await
}

/// A forced release at `term`, on a dialect that stores terms signed: a
/// term past `i64::MAX` is in no row, so nothing to free.
pub(crate) async fn force_release<C: Conn>(
    conn: &mut C,
    statement: &Statement,
    name: &str,
    term: u64,
) -> Result<bool, BoxError> {
    if term_param(term).is_none() {
        return Ok(false);
    }
    changed_one(conn, statement, &Args::new().name(name).term(term)).await
}

/// A resign request at `term`, on a dialect that stores terms signed: a
/// term past `i64::MAX` is in no row, so nobody to ask.
pub(crate) async fn request_resign<C: Conn>(
    conn: &mut C,
    statement: &Statement,
    name: &str,
    term: u64,
) -> Result<bool, BoxError> {
    if term_param(term).is_none() {
        return Ok(false);
    }
    changed_one(conn, statement, &Args::new().name(name).term(term)).await
}

/// What [`LeaseStore::finish`](lease_core::LeaseStore::finish) did, by
/// whether the holder's branch applied (`None`: no row changed).
pub(crate) fn finished(released: Option<bool>) -> Finished {
    match released {
        None => Finished::NotRecorded,
        Some(true) => Finished::Released,
        Some(false) => Finished::RecordedWithoutLease,
    }
}

/// What an instant claim that reads the row first does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InstantStep {
    /// No row: insert the name.
    Insert,
    /// Take the row over, read with `term` as `record`.
    Update {
        /// The term read: the write must find it unchanged.
        term: u64,
        /// The row's instants, as read.
        record: InstantRecord,
    },
    /// Refuse: held, or the instant is not later than the last.
    Refuse,
}

impl InstantStep {
    /// The step after the read: `read` is the row's term, its instants and
    /// whether its lease has expired (`None`: no row).
    pub(crate) fn after(read: Option<(u64, InstantRecord, bool)>, instant_ms: i64) -> Self {
        match read {
            None => InstantStep::Insert,
            Some((term, record, expired)) if record.claimable(expired, instant_ms) => {
                InstantStep::Update { term, record }
            }
            Some(_) => InstantStep::Refuse,
        }
    }

    /// The claim's outcome once its write ran: `written` the new term, or
    /// `None` when the write matched no row (a rival was first).
    pub(crate) fn outcome(self, name: &str, written: Option<u64>) -> InstantClaim {
        match (self, written) {
            (InstantStep::Refuse, _) | (_, None) => InstantClaim::Refused,
            (InstantStep::Insert, Some(term)) => InstantClaim::Claimed {
                term,
                superseded: None,
            },
            (InstantStep::Update { term: read, record }, Some(term)) => InstantClaim::Claimed {
                term,
                superseded: record.superseded(name, read),
            },
        }
    }
}

/// The instants of a row, at columns `at`, `at + 1`, `at + 2`: `slot_ms`,
/// `unfinished_slot_ms`, `rerun_slot_ms`.
pub(crate) fn instant_record(row: &impl Row, at: usize) -> Result<InstantRecord, BoxError> {
    Ok(InstantRecord {
        slot_ms: row.int(at)?,
        unfinished_slot_ms: row.int(at + 1)?,
        rerun_slot_ms: row.int(at + 2)?,
    })
}

/// An unfinished instant from a row of `name, term, slot_ms`, the name by
/// `name`, the term by `term`.
pub(crate) fn unfinished<R: Row>(
    row: &R,
    name: impl Fn(&R, usize) -> Result<String, BoxError>,
    term: impl Fn(&R, usize) -> Result<u64, BoxError>,
) -> Result<Unfinished, BoxError> {
    Ok(Unfinished::new(
        name(row, 0)?,
        UtcMillis::from_millis(row.int(2)?),
        false,
        term(row, 1)?,
    ))
}

/// A term stored as a signed integer (PostgreSQL, SQLite).
pub(crate) fn signed_term(row: &impl Row, i: usize) -> Result<u64, BoxError> {
    lease_core::term_from_db(row.int(i)?)
}

/// A name stored as text (PostgreSQL, SQLite).
pub(crate) fn text(row: &impl Row, i: usize) -> Result<String, BoxError> {
    row.text(i)
}

/// A row of `get` or `list` on PostgreSQL or SQLite: `name, instance,
/// term, expires_at_ms, now, slot_ms, unfinished_slot_ms, rerun_slot_ms`.
pub(crate) fn text_info(row: &impl Row) -> Result<LeaseInfo, BoxError> {
    Ok(LeaseInfo {
        name: row.text(0)?,
        instance: row.text(1)?,
        term: signed_term(row, 2)?,
        expires_at_ms: row.int(3)?,
        now_ms: row.int(4)?,
        slot_ms: row.int(5)?,
        unfinished_slot_ms: row.int(6)?,
        rerun_slot_ms: row.int(7)?,
    })
}

/// The flows every dialect runs alike, one statement each, written once and
/// expanded in each dialect's module on its own `Statements`: `term` reads
/// a term at a column, `info` a row of `get` and `list`.
macro_rules! read_flows {
    (term: $term:expr, info: $info:path) => {
        /// [`LeaseStore::verify`](lease_core::LeaseStore::verify).
        ///
        /// # Errors
        ///
        /// The driver's.
        pub async fn verify<C: $crate::Conn>(
            conn: &mut C,
            sql: &Statements,
            name: &str,
            token: lease_core::Token<'_>,
        ) -> Result<Option<u64>, lease_core::BoxError> {
            let args = $crate::Args::new().name(name).token(token);
            $crate::conn::first(conn, &sql.verify, &args)
                .await?
                .map(|row| $term(&row, 0))
                .transpose()
        }

        /// [`LeaseStore::last_instant`](lease_core::LeaseStore::last_instant).
        ///
        /// # Errors
        ///
        /// The driver's.
        pub async fn last_instant<C: $crate::Conn>(
            conn: &mut C,
            sql: &Statements,
            name: &str,
        ) -> Result<Option<i64>, lease_core::BoxError> {
            let args = $crate::Args::new().name(name);
            $crate::common::int_of(conn, &sql.last_instant, &args).await
        }

        /// [`LeaseStore::get`](lease_core::LeaseStore::get).
        ///
        /// # Errors
        ///
        /// The driver's.
        pub async fn get<C: $crate::Conn>(
            conn: &mut C,
            sql: &Statements,
            name: &str,
        ) -> Result<Option<lease_core::LeaseInfo>, lease_core::BoxError> {
            $crate::conn::first(conn, &sql.get, &$crate::Args::new().name(name))
                .await?
                .map(|row| $info(&row))
                .transpose()
        }

        /// [`LeaseStore::list`](lease_core::LeaseStore::list).
        ///
        /// # Errors
        ///
        /// The driver's.
        pub async fn list<C: $crate::Conn>(
            conn: &mut C,
            sql: &Statements,
            prefix: &str,
            limit: u32,
        ) -> Result<Vec<lease_core::LeaseInfo>, lease_core::BoxError> {
            let args = $crate::Args::new().prefix(prefix).limit(limit);
            $crate::common::infos(conn, &sql.list, &args, prefix, $info).await
        }

        /// [`LeaseStore::now_ms`](lease_core::LeaseStore::now_ms).
        ///
        /// # Errors
        ///
        /// The driver's, or a clock read that returned no row.
        pub async fn now_ms<C: $crate::Conn>(
            conn: &mut C,
            sql: &Statements,
        ) -> Result<i64, lease_core::BoxError> {
            $crate::common::now_ms(conn, &sql.now).await
        }
    };
}

/// The writes PostgreSQL and SQLite answer alike, each one statement that
/// returns its outcome (`RETURNING`) or counts the rows it changed, on a
/// dialect that stores terms signed: written once, expanded in both
/// modules on their own `Statements`.
macro_rules! returning_flows {
    () => {
        /// [`LeaseStore::claim`](lease_core::LeaseStore::claim).
        ///
        /// # Errors
        ///
        /// The driver's.
        pub async fn claim<C: $crate::Conn>(
            conn: &mut C,
            sql: &Statements,
            claim: &lease_core::ClaimRequest<'_>,
        ) -> Result<Option<u64>, lease_core::BoxError> {
            let args = $crate::common::claim_args(claim);
            $crate::common::term_of(conn, &sql.claim, &args).await
        }

        /// [`LeaseStore::renew`](lease_core::LeaseStore::renew).
        ///
        /// # Errors
        ///
        /// The driver's.
        pub async fn renew<C: $crate::Conn>(
            conn: &mut C,
            sql: &Statements,
            name: &str,
            token: lease_core::Token<'_>,
            lease_ms: i64,
        ) -> Result<Option<lease_core::Renewed>, lease_core::BoxError> {
            let args = $crate::Args::new()
                .name(name)
                .token(token)
                .lease_ms(lease_ms);
            $crate::conn::first(conn, &sql.renew, &args)
                .await?
                .map(|row| $crate::common::renewal(&row, 0))
                .transpose()
        }

        /// [`LeaseStore::release`](lease_core::LeaseStore::release).
        ///
        /// # Errors
        ///
        /// The driver's.
        pub async fn release<C: $crate::Conn>(
            conn: &mut C,
            sql: &Statements,
            name: &str,
            token: lease_core::Token<'_>,
        ) -> Result<bool, lease_core::BoxError> {
            let args = $crate::Args::new().name(name).token(token);
            $crate::common::changed_one(conn, &sql.release, &args).await
        }

        /// [`LeaseStore::finish`](lease_core::LeaseStore::finish).
        ///
        /// # Errors
        ///
        /// The driver's.
        pub async fn finish<C: $crate::Conn>(
            conn: &mut C,
            sql: &Statements,
            finish: &lease_core::FinishRequest<'_>,
        ) -> Result<lease_core::Finished, lease_core::BoxError> {
            $crate::common::finish(conn, &sql.finish, finish).await
        }

        /// [`LeaseStore::claim_rerun`](lease_core::LeaseStore::claim_rerun).
        ///
        /// # Errors
        ///
        /// The driver's.
        pub async fn claim_rerun<C: $crate::Conn>(
            conn: &mut C,
            sql: &Statements,
            claim: &lease_core::ClaimRequest<'_>,
            term: u64,
        ) -> Result<bool, lease_core::BoxError> {
            $crate::common::claim_rerun(conn, &sql.claim_rerun, claim, term).await
        }

        /// [`LeaseStore::force_release`](lease_core::LeaseStore::force_release).
        ///
        /// # Errors
        ///
        /// The driver's.
        pub async fn force_release<C: $crate::Conn>(
            conn: &mut C,
            sql: &Statements,
            name: &str,
            term: u64,
        ) -> Result<bool, lease_core::BoxError> {
            $crate::common::force_release(conn, &sql.force_release, name, term).await
        }

        /// [`LeaseStore::request_resign`](lease_core::LeaseStore::request_resign).
        ///
        /// # Errors
        ///
        /// The driver's.
        pub async fn request_resign<C: $crate::Conn>(
            conn: &mut C,
            sql: &Statements,
            name: &str,
            term: u64,
        ) -> Result<bool, lease_core::BoxError> {
            $crate::common::request_resign(conn, &sql.request_resign, name, term).await
        }
    };
}

pub(crate) use {read_flows, returning_flows};

#[cfg(test)]
mod tests {
    use super::*;

    const RECORD: InstantRecord = InstantRecord {
        slot_ms: 1_000,
        unfinished_slot_ms: 1_000,
        rerun_slot_ms: 0,
    };

    #[test]
    fn an_instant_claim_steps_by_the_row_it_read() {
        assert_eq!(InstantStep::after(None, 5), InstantStep::Insert);
        assert_eq!(
            InstantStep::after(Some((4, RECORD, true)), 2_000),
            InstantStep::Update {
                term: 4,
                record: RECORD
            }
        );
        // Held, or not a later instant.
        assert_eq!(
            InstantStep::after(Some((4, RECORD, false)), 2_000),
            InstantStep::Refuse
        );
        assert_eq!(
            InstantStep::after(Some((4, RECORD, true)), 1_000),
            InstantStep::Refuse
        );
    }

    #[test]
    fn its_outcome_names_what_the_takeover_gave_up() {
        let update = InstantStep::Update {
            term: 4,
            record: RECORD,
        };
        let InstantClaim::Claimed { term, superseded } = update.outcome("job", Some(5)) else {
            panic!("claimed");
        };
        assert_eq!(term, 5);
        let given_up = superseded.unwrap();
        assert_eq!(
            (
                given_up.name.as_str(),
                given_up.instant.as_millis(),
                given_up.term()
            ),
            ("job", 1_000, 4)
        );
        assert_eq!(update.outcome("job", None), InstantClaim::Refused);
        assert_eq!(
            InstantStep::Insert.outcome("job", Some(1)),
            InstantClaim::Claimed {
                term: 1,
                superseded: None
            }
        );
        assert_eq!(
            InstantStep::Refuse.outcome("job", Some(1)),
            InstantClaim::Refused
        );
    }

    #[test]
    fn a_batch_answers_in_the_order_of_its_leases() {
        let leases = [("a", Token::new("x")), ("b", Token::new("y"))];
        let asked = Renewed {
            now_ms: 7,
            resign: true,
        };
        let rows = [
            ("b".to_owned(), "y".to_owned(), asked),
            ("a".to_owned(), "other".to_owned(), Renewed::at(8)),
        ];
        assert_eq!(held(&leases, rows), [None, Some(asked)]);
        let (names, tokens) = split(&leases, 4);
        assert_eq!(names, ["a", "b", "b", "b"]);
        assert_eq!(tokens.len(), 4);
        assert_eq!(padded(&["a"], 2), ["a", "a"]);
        assert!(padded(&[], 2).is_empty());
    }
}
