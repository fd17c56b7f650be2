//! The instants of a scheduler's jobs: claiming each once across a cluster,
//! and the rounds cut short.

use std::collections::HashSet;

use tokio::time::Instant;

use crate::error::{Error, Op, Result};
use crate::handle::Handle;
use crate::leases::{Leases, claim_outcome};
use crate::name::validate_name;
use crate::store::{ClaimRequest, SlotClaim};
use crate::time::UtcMillis;
use crate::token::holder_token;

impl Leases {
    /// Claims the instant `slot` of a scheduler's job under `name`: the name
    /// must be free and `slot` later than the last instant on record under it
    /// (the last claimed, or the last a round that ran to its end took along,
    /// see [`Handle::finish`]). The claim records `slot` as the last instant
    /// claimed, and as unfinished until [`Handle::finish`].
    ///
    /// A cluster thus claims each instant of a job once, whichever replica
    /// gets there first; an instant already claimed, or skipped while a
    /// round held the name, is refused everywhere. Only a round cut short is
    /// claimed a second time, see [`Leases::claim_rerun`].
    ///
    /// The instant claimed before under `name`, when its round had not run to
    /// its end, is given up by the claim and never runs again; the handle
    /// names it, see [`Handle::superseded`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] before any SQL; [`Error::InvalidInstant`] for an
    /// instant not after the UNIX epoch; [`Error::Database`] or
    /// [`Error::Timeout`] when the database does not answer.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the instant claimed by a token nobody
    /// knows: it then counts as a round cut short, and runs again once.
    pub async fn claim_slot(&self, name: &str, slot: UtcMillis) -> Result<Option<Handle>> {
        validate_name(name)?;
        if slot.as_millis() <= 0 {
            return Err(Error::InvalidInstant {
                name: name.to_owned(),
                reason: "an instant must be after the UNIX epoch",
            });
        }
        let holder = holder_token()?;
        let sent = Instant::now();
        let outcome = self
            .bounded(
                Op::ClaimSlot,
                Some(name),
                self.store().claim_slot(
                    ClaimRequest {
                        name,
                        holder: &holder,
                        instance: self.instance(),
                        lease_ms: self.timings().lease_ms(),
                    },
                    slot.as_millis(),
                ),
            )
            .await;
        crate::metrics::claim(
            name,
            claim_outcome(&outcome, |o| matches!(o, SlotClaim::Claimed { .. })),
        );
        let outcome = outcome?;
        Ok(match outcome {
            SlotClaim::Refused => None,
            SlotClaim::Claimed { term, superseded } => {
                let superseded = superseded.map(|s| Unfinished {
                    name: name.to_owned(),
                    slot: UtcMillis::from_millis(s.slot_ms),
                    rerun: s.rerun,
                    term: term.saturating_sub(1),
                });
                tracing::debug!(
                    name,
                    term,
                    slot = slot.as_millis(),
                    superseded = superseded.as_ref().map(|u| u.slot.as_millis()),
                    instance = ?self.instance(),
                    "instant claimed"
                );
                Some(self.handle(name, holder, term, sent, Some(slot), superseded))
            }
        })
    }

    /// Finds the instants, under the names given, whose round was cut short
    /// and that are free to claim a second time: the round has not run to
    /// its end, the instant has not been claimed a second time already, no
    /// later instant has been claimed since, and the lease has expired or
    /// been released. One statement answers for all the names.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] before any SQL if any name is invalid;
    /// [`Error::Database`] or [`Error::Timeout`] when the database does not
    /// answer.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn unfinished_slots<S: AsRef<str> + Sync>(
        &self,
        names: &[S],
    ) -> Result<Vec<Unfinished>> {
        let mut seen = HashSet::with_capacity(names.len());
        let mut unique = Vec::with_capacity(names.len());
        for name in names {
            let name = name.as_ref();
            validate_name(name)?;
            if seen.insert(name) {
                unique.push(name);
            }
        }
        if unique.is_empty() {
            return Ok(Vec::new());
        }
        let rows = self
            .bounded(
                Op::FindUnfinished,
                None,
                self.store().find_unfinished(&unique),
            )
            .await?;
        Ok(rows
            .into_iter()
            .map(|row| Unfinished {
                name: row.name,
                slot: UtcMillis::from_millis(row.slot_ms),
                rerun: false,
                term: row.term,
            })
            .collect())
    }

    /// Claims `u`'s instant a second time, `u` as
    /// [`unfinished_slots`](Leases::unfinished_slots) found it: a handle when
    /// the instant is still free to claim a second time (the name has not
    /// changed hands since it was found), `None` when it was claimed again
    /// elsewhere, its first round was recorded finished after all, a later
    /// instant was claimed, or the name is held.
    ///
    /// The round runs under the handle like any other and ends with
    /// [`Handle::finish`], or with [`Handle::release`] when it is cut short
    /// again, which leaves the instant unfinished for good.
    ///
    /// # Errors
    ///
    /// [`Error::Database`] or [`Error::Timeout`] when the database does not answer.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the instant claimed a second time by a
    /// token nobody knows: it is then unfinished for good.
    pub async fn claim_rerun(&self, u: &Unfinished) -> Result<Option<Handle>> {
        validate_name(&u.name)?;
        let holder = holder_token()?;
        let sent = Instant::now();
        let claimed = self
            .bounded(
                Op::ClaimRerun,
                Some(&u.name),
                self.store().claim_rerun(
                    ClaimRequest {
                        name: &u.name,
                        holder: &holder,
                        instance: self.instance(),
                        lease_ms: self.timings().lease_ms(),
                    },
                    u.term,
                ),
            )
            .await;
        crate::metrics::claim(&u.name, claim_outcome(&claimed, |c| *c));
        let claimed = claimed?;
        Ok(claimed.then(|| {
            let term = u.term + 1;
            tracing::debug!(
                name = ?u.name,
                term,
                slot = u.slot.as_millis(),
                instance = ?self.instance(),
                "instant claimed a second time"
            );
            self.handle(&u.name, holder, term, sent, Some(u.slot), None)
        }))
    }

    /// The last instant on record under `name` (the last claimed, or the last
    /// a round that ran to its end took along, see [`Handle::finish`]), or
    /// `None` when no instant was ever claimed under it. A scheduler reads it
    /// as it starts, to tell an instant no replica claimed from a job that
    /// has never run.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] before any SQL; [`Error::Database`] or
    /// [`Error::Timeout`] when the database does not answer.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn last_slot(&self, name: &str) -> Result<Option<UtcMillis>> {
        validate_name(name)?;
        let slot = self
            .bounded(Op::LastSlot, Some(name), self.store().last_slot(name))
            .await?;
        Ok(slot.filter(|&ms| ms != 0).map(UtcMillis::from_millis))
    }
}

/// An instant claimed under a scheduler's name whose round has not run to its
/// end: the process running it shut down or died, or its lease was lost,
/// before the round returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unfinished {
    /// The name the instant was claimed under.
    pub name: String,
    /// The instant.
    pub slot: UtcMillis,
    /// Whether the instant had been claimed a second time already, and that
    /// round was cut short too. [`Leases::unfinished_slots`] never returns
    /// such an instant.
    pub rerun: bool,
    /// The term found: a second claim must find it unchanged.
    term: u64,
}

impl Unfinished {
    /// The term the lease had when the instant was found: a second claim
    /// succeeds only if the name has not changed hands since.
    #[must_use]
    pub fn term(&self) -> u64 {
        self.term
    }
}
