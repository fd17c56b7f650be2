//! SQLite's flows, on any driver's [`SqliteConn`]: one statement per
//! operation but the instant claim, a transaction of two; batches too long
//! for one statement in several.

use std::future::Future;

use lease_core::{BoxError, ClaimRequest, InstantClaim, Renewed, Token, Unfinished};

use super::{MAX_NAMES_PER_STATEMENT, MAX_RENEWALS_PER_STATEMENT, Statements};
use crate::Found;
use crate::common::{self, InstantStep, claim_args, signed_term, text, text_info};
use crate::conn::{Conn, Row, first};
use crate::statement::Args;

/// A connection of a SQLite driver, with the transaction the instant claim
/// runs in.
pub trait SqliteConn: Conn {
    /// Opens a `BEGIN IMMEDIATE` transaction: the statements that follow
    /// run in it, with the database's write lock, until
    /// [`commit`](Self::commit). One not committed (an error, or the
    /// connection dropped first) is rolled back.
    fn begin_immediate(&mut self) -> impl Future<Output = Result<(), BoxError>> + Send;

    /// Commits the transaction [`begin_immediate`](Self::begin_immediate)
    /// opened.
    fn commit(&mut self) -> impl Future<Output = Result<(), BoxError>> + Send;
}

/// [`LeaseStore::renew_many`](lease_core::LeaseStore::renew_many): one
/// statement per [`MAX_RENEWALS_PER_STATEMENT`] leases (padded to a power
/// of two by repeating the last, so a few prepared statements serve every
/// size), answered in order from the rows it returned.
///
/// # Errors
///
/// The driver's.
pub async fn renew_many<C: Conn>(
    conn: &mut C,
    sql: &Statements,
    leases: &[(&str, Token<'_>)],
    lease_ms: i64,
) -> Result<Vec<Option<Renewed>>, BoxError> {
    let mut held = Vec::with_capacity(leases.len());
    for chunk in leases.chunks(MAX_RENEWALS_PER_STATEMENT) {
        let slots = chunk.len().next_power_of_two();
        let (names, tokens) = common::split(chunk, slots);
        let args = Args::new().lease_ms(lease_ms).names(&names).tokens(&tokens);
        let rows = conn.rows(&sql.renew_many(slots), &args).await?;
        held.extend(common::renewed(chunk, &rows, text)?);
    }
    Ok(held)
}

/// [`LeaseStore::claim_instant`](lease_core::LeaseStore::claim_instant):
/// inside one `BEGIN IMMEDIATE` transaction, the read of the row, then the
/// insert of the name or the takeover of the row read.
///
/// # Errors
///
/// The driver's (the transaction is then rolled back).
pub async fn claim_instant<C: SqliteConn>(
    conn: &mut C,
    sql: &Statements,
    claim: &ClaimRequest<'_>,
    instant_ms: i64,
) -> Result<InstantClaim, BoxError> {
    conn.begin_immediate().await?;
    let row = first(conn, &sql.instant_read, &Args::new().name(claim.name)).await?;
    let read = match row {
        None => None,
        Some(row) => Some((
            signed_term(&row, 0)?,
            common::instant_record(&row, 1)?,
            row.flag(4)?,
        )),
    };
    let step = InstantStep::after(read, instant_ms);
    let args = claim_args(claim).instant_ms(instant_ms);
    let written = match step {
        InstantStep::Refuse => None,
        InstantStep::Insert => common::changed_one(conn, &sql.instant_insert, &args)
            .await?
            .then_some(1),
        InstantStep::Update { term, .. } => {
            common::changed_one(conn, &sql.instant_update, &args.term(term))
                .await?
                .then_some(term.saturating_add(1))
        }
    };
    conn.commit().await?;
    Ok(step.outcome(claim.name, written))
}

/// [`LeaseStore::find_unfinished`](lease_core::LeaseStore::find_unfinished):
/// one statement per [`MAX_NAMES_PER_STATEMENT`] names (padded to a power
/// of two), all on `conn`.
///
/// # Errors
///
/// The driver's.
pub async fn find_unfinished<C: Conn>(
    conn: &mut C,
    sql: &Statements,
    names: &[&str],
) -> Result<Vec<Unfinished>, BoxError> {
    let mut found = Vec::new();
    for chunk in names.chunks(MAX_NAMES_PER_STATEMENT) {
        let slots = chunk.len().next_power_of_two();
        let padded = common::padded(chunk, slots);
        let rows = conn
            .rows(&sql.find_unfinished(slots), &Args::new().names(&padded))
            .await?;
        for row in &rows {
            found.push(common::unfinished(row, text, signed_term)?);
        }
    }
    Ok(found)
}

common::returning_flows!();

common::read_flows!(term: signed_term, info: text_info);

/// What the columns [`Statements::table_columns`] lists say of the table
/// (the first part of `migrate`'s inspection; the collations are the
/// driver's to read): missing, or a column the statements use missing.
#[must_use]
pub fn judge_columns(columns: &[String]) -> Found {
    if columns.is_empty() {
        return Found::Missing;
    }
    Found::columns(columns, str::eq_ignore_ascii_case)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_verdicts() {
        assert_eq!(judge_columns(&[]), Found::Missing);
        let mut cols: Vec<String> = crate::COLUMNS.iter().map(|c| c.to_uppercase()).collect();
        assert_eq!(judge_columns(&cols), Found::Outdated, "the first schema");
        cols.push("RESIGN_TERM".to_owned());
        assert_eq!(judge_columns(&cols), Found::Usable);
        assert!(matches!(judge_columns(&cols[1..]), Found::Incompatible(_)));
    }
}
