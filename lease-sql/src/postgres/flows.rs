//! PostgreSQL's flows, on any driver's [`Conn`]: each operation one
//! statement and the decoding of its answer.

use lease_core::{BoxError, ClaimRequest, InstantClaim, InstantRecord, Renewed, Token, Unfinished};

use super::Statements;
use crate::Found;
use crate::common::{self, claim_args, signed_term, text, text_info};
use crate::conn::{Conn, Row, first};
use crate::statement::Args;

/// [`LeaseStore::renew_many`](lease_core::LeaseStore::renew_many): one
/// statement for the whole batch.
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
    let (names, tokens) = common::split(leases, leases.len());
    let args = Args::new().names(&names).tokens(&tokens).lease_ms(lease_ms);
    let rows = conn.rows(&sql.renew_many, &args).await?;
    common::renewed(leases, &rows, text)
}

/// [`LeaseStore::claim_instant`](lease_core::LeaseStore::claim_instant):
/// one statement, which answers the row's old instants.
///
/// # Errors
///
/// The driver's.
pub async fn claim_instant<C: Conn>(
    conn: &mut C,
    sql: &Statements,
    claim: &ClaimRequest<'_>,
    instant_ms: i64,
) -> Result<InstantClaim, BoxError> {
    let args = claim_args(claim).instant_ms(instant_ms);
    let Some(row) = first(conn, &sql.claim_instant, &args).await? else {
        return Ok(InstantClaim::Refused);
    };
    claimed_instant(&row, claim.name)
}

/// The row of [`Statements::claim_instant`]: the new term, and the row's
/// instants as the claim found them (NULL when it inserted the row).
fn claimed_instant(row: &impl Row, name: &str) -> Result<InstantClaim, BoxError> {
    let term = signed_term(row, 0)?;
    let superseded = match row.nullable_int(1)? {
        None => None,
        Some(slot_ms) => InstantRecord {
            slot_ms,
            unfinished_slot_ms: row.int(2)?,
            rerun_slot_ms: row.int(3)?,
        }
        .superseded(name, term.saturating_sub(1)),
    };
    Ok(InstantClaim::Claimed { term, superseded })
}

/// [`LeaseStore::find_unfinished`](lease_core::LeaseStore::find_unfinished):
/// one statement, on an array of names.
///
/// # Errors
///
/// The driver's.
pub async fn find_unfinished<C: Conn>(
    conn: &mut C,
    sql: &Statements,
    names: &[&str],
) -> Result<Vec<Unfinished>, BoxError> {
    let rows = conn
        .rows(&sql.find_unfinished, &Args::new().names(names))
        .await?;
    rows.iter()
        .map(|row| common::unfinished(row, text, signed_term))
        .collect()
}

common::returning_flows!();

common::read_flows!(term: signed_term, info: text_info);

/// What [`Statements::table_columns`] says of the table, read by `conn`:
/// missing (no row), or usable unless a column the statements use is
/// missing or `name` compares under a nondeterministic collation.
///
/// # Errors
///
/// The driver's.
pub async fn inspect<C: Conn>(conn: &mut C, sql: &Statements) -> Result<Found, BoxError> {
    let rows = conn
        .rows(
            &sql.table_columns,
            &Args::new().relation(sql.table().quoted()),
        )
        .await?;
    let mut columns = Vec::with_capacity(rows.len());
    for row in &rows {
        columns.push((row.text(0)?, row.flag(1)?));
    }
    Ok(judge_columns(&columns))
}

/// What the rows of [`Statements::table_columns`] (a column's name, and
/// whether it compares under a deterministic collation) say of the table.
#[must_use]
pub fn judge_columns(columns: &[(String, bool)]) -> Found {
    if columns.is_empty() {
        return Found::Missing;
    }
    let names: Vec<&str> = columns.iter().map(|(c, _)| c.as_str()).collect();
    match Found::columns(&names, |have, wanted| have == wanted) {
        Found::Usable => {}
        lacking => return lacking,
    }
    if columns
        .iter()
        .any(|(c, deterministic)| c == "name" && !deterministic)
    {
        return Found::Incompatible(
            "its name column has a nondeterministic collation: names would not compare byte for byte"
                .to_owned(),
        );
    }
    Found::Usable
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_verdicts() {
        let col = |n: &str, d: bool| (n.to_owned(), d);
        assert_eq!(judge_columns(&[]), Found::Missing);
        let mut cols: Vec<_> = crate::COLUMNS.iter().map(|c| col(c, true)).collect();
        assert_eq!(judge_columns(&cols), Found::Outdated, "the first schema");
        cols.push(col("resign_term", true));
        assert_eq!(judge_columns(&cols), Found::Usable);
        cols[0].1 = false;
        assert!(
            matches!(judge_columns(&cols), Found::Incompatible(r) if r.contains("nondeterministic"))
        );
        cols[0] = col("NAME", true);
        assert!(
            matches!(judge_columns(&cols), Found::Incompatible(r) if r.contains("lacks the column(s) name"))
        );
    }
}
