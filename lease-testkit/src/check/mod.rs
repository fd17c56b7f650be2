//! The checker: reads a soak's history and names every violation of what the
//! protocol guarantees.
//!
//! The history's times are bounds on the database's clock (see
//! [`history`](crate::history)): a tenure's `claim_ms` is no later than the
//! moment its work started, its `stop_ms` no earlier than the moment its
//! work ended. Every rule is judged on those bounds, so the checker may
//! call a violation that a finer clock would have cleared, but never clears
//! one that happened. The rules, one function each, each in its module with
//! the planted-bug tests that prove it can fail:
//!
//! 1. **No overlap** ([`overlaps`]): no two tenures of one name overlap by
//!    the database's clock ([`Violation::Overlap`]).
//! 2. **Terms** ([`order`], [`one_per_change`]): terms strictly increase per name, in the order the name
//!    changes hands ([`Violation::DuplicateTerm`], [`Violation::TermOrder`]),
//!    and by one per change of hands ([`Violation::TermGap`]). A claim whose
//!    outcome is unknown (it failed or timed out, or its process was killed
//!    while it was in flight) may have taken the name with a token nobody
//!    knows; each such attempt, sent before the next known claim, accounts
//!    for one missing term, and only one.
//! 3. **Stepping down** ([`late_step_downs`]): every holder that lost its lease (or was killed)
//!    stopped acting before its successor's claim ran
//!    ([`Violation::LateStepDown`]).
//! 4. **Instants** ([`instants()`]): each instant of a job ran at most twice, the second time
//!    only as a second claim after a first run that was cut short
//!    ([`Violation::InstantRanTwice`], [`Violation::RerunTwice`],
//!    [`Violation::RerunAfterFinished`], [`Violation::RerunBeforeFirstEnded`]).

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use crate::history::{Event, StopCause};

mod instants;
mod overlap;
mod step_down;
mod terms;
#[cfg(test)]
mod testkit;
mod violation;

pub use instants::instants;
pub use overlap::overlaps;
pub use step_down::late_step_downs;
pub use terms::{one_per_change, order};
pub use violation::Violation;

/// Which tenure: its process, the attempt that claimed it, and its term.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TenureId {
    /// The process.
    pub instance: String,
    /// The attempt.
    pub seq: u64,
    /// The term.
    pub term: u64,
}

impl fmt::Display for TenureId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "term {} ({}#{})", self.term, self.instance, self.seq)
    }
}

/// How a tenure ended, as far as the history tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Its process said so.
    Stopped(StopCause),
    /// Its process was killed while it held the name.
    Killed,
    /// The history ends with it still open: it may still be acting.
    Open,
}

/// One holder's time with a name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenure {
    /// The name.
    pub name: String,
    /// Which tenure.
    pub id: TenureId,
    /// The instant, for a scheduler's claim.
    pub slot: Option<i64>,
    /// Whether it is the second claim of its instant.
    pub rerun: bool,
    /// A lower bound on when its claim ran, if the history has it.
    pub sent_ms: Option<i64>,
    /// A lower bound on when its work started.
    pub claim_ms: i64,
    /// An upper bound on when its work ended; `i64::MAX` when it never did.
    pub stop_ms: i64,
    /// How it ended.
    pub end: End,
    /// For an instant: whether its end is known recorded.
    pub finished: bool,
}

impl Tenure {
    /// A lower bound on when the claim ran on the database: the attempt's
    /// `sent_ms`, or the work's start when the history lacks it.
    #[must_use]
    pub fn claimed_no_earlier_than(&self) -> i64 {
        self.sent_ms.unwrap_or(self.claim_ms)
    }
}

/// What the checker found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Every tenure, by name and term.
    pub tenures: Vec<Tenure>,
    /// Every violation found; empty when the history is sound.
    pub violations: Vec<Violation>,
    /// Claims attempted.
    pub attempts: usize,
    /// Claims refused.
    pub refused: usize,
    /// Claims whose outcome is unknown.
    pub unknown: usize,
    /// Processes killed.
    pub kills: usize,
    /// Faults injected (kills included).
    pub faults: usize,
}

impl Report {
    /// Tenures that ended with their lease lost.
    #[must_use]
    pub fn lost(&self) -> usize {
        self.count(|t| t.end == End::Stopped(StopCause::Lost))
    }

    /// Tenures whose process was killed under them.
    #[must_use]
    pub fn killed(&self) -> usize {
        self.count(|t| t.end == End::Killed)
    }

    /// Instants run (first runs).
    #[must_use]
    pub fn instants(&self) -> usize {
        self.count(|t| t.slot.is_some() && !t.rerun)
    }

    /// Instants run a second time.
    #[must_use]
    pub fn reruns(&self) -> usize {
        self.count(|t| t.slot.is_some() && t.rerun)
    }

    fn count(&self, f: impl Fn(&Tenure) -> bool) -> usize {
        self.tenures.iter().filter(|t| f(t)).count()
    }
}

/// An attempt, as far as the history tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Pending,
    Refused,
    Failed,
    Claimed,
}

struct Attempt<'a> {
    name: &'a str,
    sent_ms: i64,
    outcome: Outcome,
}

/// Checks a history: see the [module docs](self) for the rules.
#[must_use]
pub fn check(events: &[Event]) -> Report {
    let mut report = Report::default();
    let mut malformed = Vec::new();
    let mut attempts: HashMap<(&str, u64), Attempt<'_>> = HashMap::new();
    let mut tenures: HashMap<(&str, u64), Tenure> = HashMap::new();
    let mut killed: HashMap<&str, i64> = HashMap::new();

    for event in events {
        match event {
            Event::Try {
                name,
                instance,
                seq,
                sent_ms,
            } => {
                report.attempts += 1;
                let fresh = Attempt {
                    name,
                    sent_ms: *sent_ms,
                    outcome: Outcome::Pending,
                };
                if attempts.insert((instance, *seq), fresh).is_some() {
                    malformed.push(format!("attempt {instance}#{seq} sent twice"));
                }
            }
            Event::Refused { instance, seq } | Event::Failed { instance, seq } => {
                let outcome = if matches!(event, Event::Refused { .. }) {
                    Outcome::Refused
                } else {
                    Outcome::Failed
                };
                match attempts.get_mut(&(instance.as_str(), *seq)) {
                    Some(a) if a.outcome == Outcome::Pending => a.outcome = outcome,
                    _ => malformed.push(format!(
                        "outcome of attempt {instance}#{seq}, never sent or settled twice"
                    )),
                }
            }
            Event::Claim {
                name,
                instance,
                seq,
                term,
                slot,
                rerun,
                claim_ms,
            } => {
                let sent_ms = match attempts.get_mut(&(instance.as_str(), *seq)) {
                    Some(a) if a.outcome == Outcome::Pending && a.name == name => {
                        a.outcome = Outcome::Claimed;
                        Some(a.sent_ms)
                    }
                    _ => {
                        malformed.push(format!(
                            "claim of {name} by {instance}#{seq}, never sent or settled twice"
                        ));
                        None
                    }
                };
                let tenure = Tenure {
                    name: name.clone(),
                    id: TenureId {
                        instance: instance.clone(),
                        seq: *seq,
                        term: *term,
                    },
                    slot: *slot,
                    rerun: *rerun,
                    sent_ms,
                    claim_ms: *claim_ms,
                    stop_ms: i64::MAX,
                    end: End::Open,
                    finished: false,
                };
                if tenures.insert((instance, *seq), tenure).is_some() {
                    malformed.push(format!("tenure {instance}#{seq} claimed twice"));
                }
            }
            Event::Stop {
                name,
                instance,
                seq,
                term,
                stop_ms,
                cause,
            } => match tenures.get_mut(&(instance.as_str(), *seq)) {
                Some(t) if t.end == End::Open && &t.name == name && t.id.term == *term => {
                    t.stop_ms = *stop_ms;
                    t.end = End::Stopped(*cause);
                }
                _ => malformed.push(format!(
                    "end of {name} term {term} by {instance}#{seq}, never claimed or ended twice"
                )),
            },
            Event::Finished { instance, seq } => match tenures.get_mut(&(instance.as_str(), *seq)) {
                Some(t) if t.slot.is_some() && !t.finished => t.finished = true,
                _ => malformed.push(format!(
                    "round {instance}#{seq} recorded finished, never claimed as an instant or twice"
                )),
            },
            Event::Killed { instance, at_ms } => {
                report.kills += 1;
                report.faults += 1;
                let _ = killed.insert(instance, *at_ms);
            }
            Event::Fault { .. } => report.faults += 1,
        }
    }

    // A killed process's tenures still open end when it died; its attempts
    // still in flight have an unknown outcome.
    for ((instance, _), t) in &mut tenures {
        if t.end == End::Open {
            if let Some(at) = killed.get(instance) {
                t.stop_ms = *at;
                t.end = End::Killed;
            }
        }
    }
    let mut unknown: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for a in attempts.values() {
        match a.outcome {
            Outcome::Pending | Outcome::Failed => {
                report.unknown += 1;
                unknown.entry(a.name).or_default().push(a.sent_ms);
            }
            Outcome::Refused => report.refused += 1,
            Outcome::Claimed => {}
        }
    }

    let mut by_name: BTreeMap<String, Vec<Tenure>> = BTreeMap::new();
    for t in tenures.into_values() {
        by_name.entry(t.name.clone()).or_default().push(t);
    }
    let mut violations: Vec<Violation> = malformed
        .into_iter()
        .map(|detail| Violation::Malformed { detail })
        .collect();
    for (name, list) in &mut by_name {
        let mut sent = unknown.remove(name.as_str()).unwrap_or_default();
        sent.sort_unstable();
        check_name(name, list, &sent, &mut violations);
    }
    report.tenures = by_name.into_values().flatten().collect();
    report.violations = violations;
    report
}

/// The rules over the tenures of one name.
fn check_name(name: &str, list: &mut [Tenure], unknown_sent: &[i64], out: &mut Vec<Violation>) {
    list.sort_by_key(|t| (t.claim_ms, t.id.term));
    overlaps(name, list, out);
    order(name, list, out);
    let mut by_term: Vec<&Tenure> = list.iter().collect();
    by_term.sort_by_key(|t| (t.id.term, t.claim_ms));
    one_per_change(name, &by_term, unknown_sent, out);
    late_step_downs(name, &by_term, out);
    instants(name, list, out);
}

#[cfg(test)]
mod tests {
    use super::testkit::{H, sound};
    use super::*;

    #[test]
    fn a_sound_history_passes() {
        let r = sound().check();
        assert!(r.violations.is_empty(), "{:#?}", r.violations);
        assert_eq!(r.tenures.len(), 10);
        assert_eq!(r.lost(), 2);
        assert_eq!(r.killed(), 1);
        assert_eq!(r.instants(), 3);
        assert_eq!(r.reruns(), 1);
        assert_eq!(r.unknown, 1);
        assert_eq!(r.refused, 1);
    }

    #[test]
    fn a_tenure_never_ended_overlaps_its_successor() {
        let mut h = H::default();
        h.open("a", "p1", 1, 0, 5);
        h.tenure("a", "p2", 2, (3_000, 3_200, 4_000));
        let r = h.check();
        assert!(
            r.violations
                .iter()
                .any(|v| matches!(v, Violation::Overlap { .. }))
        );
        assert!(
            r.violations
                .iter()
                .any(|v| matches!(v, Violation::LateStepDown { .. }))
        );
    }

    #[test]
    fn contradictions_in_the_history_are_named() {
        let mut h = H::default();
        h.events.push(Event::Stop {
            name: "a".into(),
            instance: "p1".into(),
            seq: 9,
            term: 1,
            stop_ms: 5,
            cause: StopCause::Done,
        });
        h.events.push(Event::Refused {
            instance: "p1".into(),
            seq: 10,
        });
        let r = h.check();
        assert_eq!(r.violations.len(), 2, "{:?}", r.violations);
        assert!(
            r.violations
                .iter()
                .all(|v| matches!(v, Violation::Malformed { .. }))
        );
    }
}
