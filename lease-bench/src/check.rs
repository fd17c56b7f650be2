//! The checker: reads a soak's history and names every violation of what the
//! protocol guarantees.
//!
//! The history's times are bounds on the database's clock (see
//! [`history`](crate::history)): a tenure's `claim_ms` is no later than the
//! moment its work started, its `stop_ms` no earlier than the moment its
//! work ended. Every rule is judged on those bounds, so the checker may
//! call a violation that a finer clock would have cleared, but never clears
//! one that happened. The rules:
//!
//! 1. **No overlap**: no two tenures of one name overlap by the database's
//!    clock ([`Violation::Overlap`]).
//! 2. **Terms**: terms strictly increase per name, in the order the name
//!    changes hands ([`Violation::DuplicateTerm`], [`Violation::TermOrder`]),
//!    and by one per change of hands ([`Violation::TermGap`]). A claim whose
//!    outcome is unknown (it failed or timed out, or its process was killed
//!    while it was in flight) may have taken the name with a token nobody
//!    knows; each such attempt, sent before the next known claim, accounts
//!    for one missing term, and only one.
//! 3. **Stepping down**: every holder that lost its lease (or was killed)
//!    stopped acting before its successor's claim ran
//!    ([`Violation::LateStepDown`]).
//! 4. **Instants**: each instant of a job ran at most twice, the second time
//!    only as a second claim after a first run that was cut short
//!    ([`Violation::InstantRanTwice`], [`Violation::RerunTwice`],
//!    [`Violation::RerunAfterFinished`], [`Violation::RerunBeforeFirstEnded`]).

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use crate::history::{Event, StopCause};

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
    /// A lower bound on when the claim ran on the database.
    fn claimed_no_earlier_than(&self) -> i64 {
        self.sent_ms.unwrap_or(self.claim_ms)
    }
}

/// A guarantee the history shows broken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// Two tenures of one name overlap by the database's clock.
    Overlap {
        /// The name.
        name: String,
        /// The tenure that started first.
        first: TenureId,
        /// The tenure that started while the first may still have been acting.
        second: TenureId,
        /// By how many milliseconds, at least (bounds included).
        by_ms: i64,
    },
    /// Two tenures of one name have the same term.
    DuplicateTerm {
        /// The name.
        name: String,
        /// The term.
        term: u64,
    },
    /// A tenure that started later has a term no higher than one before it.
    TermOrder {
        /// The name.
        name: String,
        /// The tenure that started first.
        earlier: TenureId,
        /// The tenure that started later, with a term not above the first's.
        later: TenureId,
    },
    /// The term moved by more than one between two tenures, and no claim of
    /// unknown outcome accounts for the difference.
    TermGap {
        /// The name.
        name: String,
        /// The term before the gap (0: none).
        from: u64,
        /// The term after it.
        to: u64,
        /// How many terms nothing accounts for.
        unexplained: u64,
    },
    /// A holder that lost its lease (or was killed) was still acting when
    /// its successor's claim may have run.
    LateStepDown {
        /// The name.
        name: String,
        /// The holder that lost.
        lost: TenureId,
        /// Its successor.
        successor: TenureId,
        /// By how many milliseconds, at least (bounds included).
        by_ms: i64,
    },
    /// An instant was claimed (for its first run) more than once.
    InstantRanTwice {
        /// The job's name.
        name: String,
        /// The instant.
        slot: i64,
        /// How many first runs.
        runs: usize,
    },
    /// An instant was claimed a second time more than once.
    RerunTwice {
        /// The job's name.
        name: String,
        /// The instant.
        slot: i64,
        /// How many second runs.
        reruns: usize,
    },
    /// An instant ran a second time although its first run is known to
    /// have run to its end.
    RerunAfterFinished {
        /// The job's name.
        name: String,
        /// The instant.
        slot: i64,
    },
    /// An instant's second run started before its first run ended.
    RerunBeforeFirstEnded {
        /// The job's name.
        name: String,
        /// The instant.
        slot: i64,
    },
    /// The history contradicts itself (an end without a start, a tenure
    /// started twice): the recording, or the process, is broken.
    Malformed {
        /// What is wrong.
        detail: String,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Overlap {
                name,
                first,
                second,
                by_ms,
            } => write!(
                f,
                "overlap on {name}: {second} started while {first} may still have been acting (by {by_ms} ms or more)"
            ),
            Violation::DuplicateTerm { name, term } => {
                write!(f, "duplicate term on {name}: two tenures of term {term}")
            }
            Violation::TermOrder {
                name,
                earlier,
                later,
            } => write!(
                f,
                "terms out of order on {name}: {later} started after {earlier}"
            ),
            Violation::TermGap {
                name,
                from,
                to,
                unexplained,
            } => write!(
                f,
                "term gap on {name}: {from} -> {to}, {unexplained} term(s) accounted for by no claim of unknown outcome"
            ),
            Violation::LateStepDown {
                name,
                lost,
                successor,
                by_ms,
            } => write!(
                f,
                "late step-down on {name}: {lost} lost the lease and was still acting when {successor}'s claim may have run (by {by_ms} ms or more)"
            ),
            Violation::InstantRanTwice { name, slot, runs } => {
                write!(
                    f,
                    "instant {slot} of {name} claimed for a first run {runs} times"
                )
            }
            Violation::RerunTwice { name, slot, reruns } => {
                write!(
                    f,
                    "instant {slot} of {name} claimed a second time {reruns} times"
                )
            }
            Violation::RerunAfterFinished { name, slot } => write!(
                f,
                "instant {slot} of {name} ran again although its first run is recorded finished"
            ),
            Violation::RerunBeforeFirstEnded { name, slot } => write!(
                f,
                "instant {slot} of {name} ran again before its first run ended"
            ),
            Violation::Malformed { detail } => write!(f, "malformed history: {detail}"),
        }
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
                killed.insert(instance, *at_ms);
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

fn check_name(name: &str, list: &mut [Tenure], unknown_sent: &[i64], out: &mut Vec<Violation>) {
    // 1. No overlap, on the bounds: the later one's start must come after
    // the earlier one's end.
    list.sort_by_key(|t| (t.claim_ms, t.id.term));
    for (i, a) in list.iter().enumerate() {
        for b in list.iter().skip(i + 1) {
            if b.claim_ms <= a.stop_ms {
                out.push(Violation::Overlap {
                    name: name.to_owned(),
                    first: a.id.clone(),
                    second: b.id.clone(),
                    by_ms: a.stop_ms.saturating_sub(b.claim_ms),
                });
            }
        }
    }
    // 2a. Terms rise with time.
    for w in list.windows(2) {
        if let [a, b] = w {
            if b.id.term < a.id.term {
                out.push(Violation::TermOrder {
                    name: name.to_owned(),
                    earlier: a.id.clone(),
                    later: b.id.clone(),
                });
            }
        }
    }
    // 2b. One tenure per term, and one term per change of hands.
    list.sort_by_key(|t| (t.id.term, t.claim_ms));
    let mut used = 0usize;
    let mut prev: Option<&Tenure> = None;
    for t in list.iter() {
        let prev_term = prev.map_or(0, |p| p.id.term);
        if prev.is_some() && t.id.term == prev_term {
            out.push(Violation::DuplicateTerm {
                name: name.to_owned(),
                term: t.id.term,
            });
            continue;
        }
        let gap = t.id.term.saturating_sub(prev_term).saturating_sub(1);
        if gap > 0 {
            // Unknown claims sent before this one's work started may each
            // have taken one term.
            let available = unknown_sent
                .iter()
                .skip(used)
                .take_while(|&&s| s < t.claim_ms)
                .count();
            let take = available.min(usize::try_from(gap).unwrap_or(usize::MAX));
            used += take;
            let unexplained = gap - u64::try_from(take).unwrap_or(gap);
            if unexplained > 0 {
                out.push(Violation::TermGap {
                    name: name.to_owned(),
                    from: prev_term,
                    to: t.id.term,
                    unexplained,
                });
            }
        }
        // 3. A holder that lost stepped down before its successor's claim.
        if let Some(p) = prev {
            let lost = matches!(
                p.end,
                End::Stopped(StopCause::Lost) | End::Killed | End::Open
            );
            let claimed = t.claimed_no_earlier_than();
            if lost && p.stop_ms >= claimed {
                out.push(Violation::LateStepDown {
                    name: name.to_owned(),
                    lost: p.id.clone(),
                    successor: t.id.clone(),
                    by_ms: p.stop_ms.saturating_sub(claimed),
                });
            }
        }
        prev = Some(t);
    }
    // 4. Instants: one first run, at most one second run, and that only
    // after a first run cut short.
    let mut slots: BTreeMap<i64, (Vec<&Tenure>, Vec<&Tenure>)> = BTreeMap::new();
    for t in list.iter() {
        if let Some(slot) = t.slot {
            let entry = slots.entry(slot).or_default();
            if t.rerun {
                entry.1.push(t);
            } else {
                entry.0.push(t);
            }
        }
    }
    for (slot, (firsts, reruns)) in slots {
        if firsts.len() > 1 {
            out.push(Violation::InstantRanTwice {
                name: name.to_owned(),
                slot,
                runs: firsts.len(),
            });
        }
        if reruns.len() > 1 {
            out.push(Violation::RerunTwice {
                name: name.to_owned(),
                slot,
                reruns: reruns.len(),
            });
        }
        // A second run with no first on record: the first claim's outcome
        // was unknown to its process (killed, or the answer lost), which the
        // term rule accounts for.
        for rerun in &reruns {
            for first in &firsts {
                if first.finished {
                    out.push(Violation::RerunAfterFinished {
                        name: name.to_owned(),
                        slot,
                    });
                } else if first.stop_ms >= rerun.claim_ms {
                    out.push(Violation::RerunBeforeFirstEnded {
                        name: name.to_owned(),
                        slot,
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds histories: each helper appends the events of one step.
    #[derive(Default)]
    struct H {
        events: Vec<Event>,
        seq: u64,
    }

    impl H {
        fn attempt(&mut self, name: &str, instance: &str, sent_ms: i64) -> u64 {
            self.seq += 1;
            self.events.push(Event::Try {
                name: name.into(),
                instance: instance.into(),
                seq: self.seq,
                sent_ms,
            });
            self.seq
        }

        /// A whole tenure: try at `sent`, work from `claim` to `stop`.
        #[allow(clippy::too_many_arguments)]
        fn tenure_full(
            &mut self,
            name: &str,
            instance: &str,
            term: u64,
            slot: Option<i64>,
            rerun: bool,
            (sent, claim, stop): (i64, i64, i64),
            cause: StopCause,
            finished: bool,
        ) {
            let seq = self.attempt(name, instance, sent);
            self.events.push(Event::Claim {
                name: name.into(),
                instance: instance.into(),
                seq,
                term,
                slot,
                rerun,
                claim_ms: claim,
            });
            self.events.push(Event::Stop {
                name: name.into(),
                instance: instance.into(),
                seq,
                term,
                stop_ms: stop,
                cause,
            });
            if finished {
                self.events.push(Event::Finished {
                    instance: instance.into(),
                    seq,
                });
            }
        }

        fn tenure(&mut self, name: &str, instance: &str, term: u64, span: (i64, i64, i64)) {
            self.tenure_full(
                name,
                instance,
                term,
                None,
                false,
                span,
                StopCause::Done,
                false,
            );
        }

        fn lost(&mut self, name: &str, instance: &str, term: u64, span: (i64, i64, i64)) {
            self.tenure_full(
                name,
                instance,
                term,
                None,
                false,
                span,
                StopCause::Lost,
                false,
            );
        }

        #[allow(clippy::too_many_arguments)]
        fn round(
            &mut self,
            job: &str,
            instance: &str,
            term: u64,
            slot: i64,
            rerun: bool,
            span: (i64, i64, i64),
            finished: bool,
        ) {
            let cause = if finished {
                StopCause::Done
            } else {
                StopCause::Lost
            };
            self.tenure_full(
                job,
                instance,
                term,
                Some(slot),
                rerun,
                span,
                cause,
                finished,
            );
        }

        fn failed(&mut self, name: &str, instance: &str, sent: i64) {
            let seq = self.attempt(name, instance, sent);
            self.events.push(Event::Failed {
                instance: instance.into(),
                seq,
            });
        }

        fn refused(&mut self, name: &str, instance: &str, sent: i64) {
            let seq = self.attempt(name, instance, sent);
            self.events.push(Event::Refused {
                instance: instance.into(),
                seq,
            });
        }

        fn check(&self) -> Report {
            check(&self.events)
        }
    }

    /// A sound history: hands change with released and lost leases, a
    /// killed holder, refusals, an unknown claim that took a term, and an
    /// instant cut short and run again once.
    fn sound() -> H {
        let mut h = H::default();
        h.tenure("a", "p1", 1, (0, 5, 100));
        h.refused("a", "p2", 50);
        h.tenure("a", "p2", 2, (101, 105, 200));
        h.lost("a", "p1", 3, (300, 301, 2_000));
        h.failed("a", "p2", 2_100);
        // term 4 went to the failed claim's unknown token
        h.tenure("a", "p3", 5, (6_000, 6_001, 6_500));
        // p3 claims again and is killed while holding
        let seq = h.attempt("a", "p3", 6_600);
        h.events.push(Event::Claim {
            name: "a".into(),
            instance: "p3".into(),
            seq,
            term: 6,
            slot: None,
            rerun: false,
            claim_ms: 6_601,
        });
        h.events.push(Event::Killed {
            instance: "p3".into(),
            at_ms: 7_000,
        });
        h.tenure("a", "p1", 7, (10_100, 10_101, 10_200));
        // instants
        h.round("job", "p1", 1, 1_000, false, (1_000, 1_001, 1_500), true);
        h.round("job", "p2", 2, 2_000, false, (2_000, 2_001, 2_900), false);
        h.round("job", "p1", 3, 2_000, true, (6_000, 6_001, 6_300), true);
        h.round("job", "p2", 4, 7_000, false, (7_000, 7_001, 7_300), true);
        h
    }

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

    fn only(r: &Report) -> &Violation {
        assert_eq!(r.violations.len(), 1, "{:#?}", r.violations);
        &r.violations[0]
    }

    #[test]
    fn planted_overlap_is_caught() {
        let mut h = H::default();
        h.tenure("a", "p1", 1, (0, 5, 100));
        // released at 100 by p1's own record, but p2 started at 100
        h.tenure("a", "p2", 2, (90, 100, 200));
        let r = h.check();
        assert!(
            matches!(only(&r), Violation::Overlap { name, by_ms: 0, .. } if name == "a"),
            "{:?}",
            r.violations
        );
    }

    #[test]
    fn planted_duplicate_term_is_caught() {
        let mut h = H::default();
        h.tenure("a", "p1", 1, (0, 5, 100));
        h.tenure("a", "p2", 1, (200, 205, 300));
        let r = h.check();
        assert!(
            matches!(only(&r), Violation::DuplicateTerm { term: 1, .. }),
            "{:?}",
            r.violations
        );
    }

    #[test]
    fn planted_term_going_back_is_caught() {
        let mut h = H::default();
        h.tenure("a", "p1", 2, (0, 5, 100));
        h.tenure("a", "p2", 1, (200, 205, 300));
        let r = h.check();
        assert!(
            r.violations
                .iter()
                .any(|v| matches!(v, Violation::TermOrder { .. })),
            "{:?}",
            r.violations
        );
    }

    #[test]
    fn planted_term_gap_is_caught_and_unknown_claims_explain_only_their_share() {
        let mut h = H::default();
        h.tenure("a", "p1", 1, (0, 5, 100));
        h.tenure("a", "p2", 3, (200, 205, 300));
        let r = h.check();
        assert!(
            matches!(
                only(&r),
                Violation::TermGap {
                    from: 1,
                    to: 3,
                    unexplained: 1,
                    ..
                }
            ),
            "{:?}",
            r.violations
        );

        // One failed claim before it explains one term, not two...
        let mut h = H::default();
        h.tenure("a", "p1", 1, (0, 5, 100));
        h.failed("a", "p2", 150);
        h.tenure("a", "p2", 4, (200, 205, 300));
        let r = h.check();
        assert!(
            matches!(only(&r), Violation::TermGap { unexplained: 1, .. }),
            "{:?}",
            r.violations
        );
        // ...and one sent after the claim explains nothing.
        let mut h = H::default();
        h.tenure("a", "p1", 1, (0, 5, 100));
        h.tenure("a", "p2", 3, (200, 205, 300));
        h.failed("a", "p2", 400);
        let r = h.check();
        assert!(
            matches!(only(&r), Violation::TermGap { .. }),
            "{:?}",
            r.violations
        );
        // The first term of a name is 1.
        let mut h = H::default();
        h.tenure("a", "p1", 2, (0, 5, 100));
        let r = h.check();
        assert!(
            matches!(only(&r), Violation::TermGap { from: 0, to: 2, .. }),
            "{:?}",
            r.violations
        );
    }

    #[test]
    fn planted_late_step_down_is_caught() {
        // p1 lost its lease and stopped at 3_100; p2's claim ran from 3_000.
        // The work spans do not overlap (p2 worked from 3_200), so only the
        // step-down rule sees it.
        let mut h = H::default();
        h.lost("a", "p1", 1, (0, 5, 3_100));
        h.tenure("a", "p2", 2, (3_000, 3_200, 4_000));
        let r = h.check();
        assert!(
            matches!(only(&r), Violation::LateStepDown { by_ms: 100, .. }),
            "{:?}",
            r.violations
        );
        // A holder killed at 3_100 counts as having stepped down then.
        let mut h = H::default();
        let seq = h.attempt("a", "p1", 0);
        h.events.push(Event::Claim {
            name: "a".into(),
            instance: "p1".into(),
            seq,
            term: 1,
            slot: None,
            rerun: false,
            claim_ms: 5,
        });
        h.events.push(Event::Killed {
            instance: "p1".into(),
            at_ms: 3_100,
        });
        h.tenure("a", "p2", 2, (3_000, 3_200, 4_000));
        let r = h.check();
        assert!(
            matches!(only(&r), Violation::LateStepDown { .. }),
            "{:?}",
            r.violations
        );
    }

    #[test]
    fn a_tenure_never_ended_overlaps_its_successor() {
        let mut h = H::default();
        let seq = h.attempt("a", "p1", 0);
        h.events.push(Event::Claim {
            name: "a".into(),
            instance: "p1".into(),
            seq,
            term: 1,
            slot: None,
            rerun: false,
            claim_ms: 5,
        });
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
    fn planted_instant_run_twice_is_caught() {
        let mut h = H::default();
        h.round("job", "p1", 1, 1_000, false, (1_000, 1_001, 1_100), true);
        h.round("job", "p2", 2, 1_000, false, (1_200, 1_201, 1_300), true);
        let r = h.check();
        assert!(
            matches!(
                only(&r),
                Violation::InstantRanTwice {
                    slot: 1_000,
                    runs: 2,
                    ..
                }
            ),
            "{:?}",
            r.violations
        );
    }

    #[test]
    fn planted_rerun_after_a_finished_round_is_caught() {
        let mut h = H::default();
        h.round("job", "p1", 1, 1_000, false, (1_000, 1_001, 1_100), true);
        h.round("job", "p2", 2, 1_000, true, (1_200, 1_201, 1_300), true);
        let r = h.check();
        assert!(
            matches!(only(&r), Violation::RerunAfterFinished { slot: 1_000, .. }),
            "{:?}",
            r.violations
        );
    }

    #[test]
    fn planted_third_run_is_caught() {
        let mut h = H::default();
        h.round("job", "p1", 1, 1_000, false, (1_000, 1_001, 1_100), false);
        h.round("job", "p2", 2, 1_000, true, (1_200, 1_201, 1_300), false);
        h.round("job", "p3", 3, 1_000, true, (1_400, 1_401, 1_500), true);
        let r = h.check();
        assert!(
            matches!(only(&r), Violation::RerunTwice { reruns: 2, .. }),
            "{:?}",
            r.violations
        );
    }

    #[test]
    fn planted_rerun_beside_its_first_run_is_caught() {
        let mut h = H::default();
        h.round("job", "p1", 1, 1_000, false, (1_000, 1_001, 1_500), false);
        h.round("job", "p2", 2, 1_000, true, (1_550, 1_600, 1_700), false);
        let r = h.check();
        assert!(
            r.violations.is_empty(),
            "the rerun started after the first ended: {:?}",
            r.violations
        );
        let mut h = H::default();
        h.round("job", "p1", 1, 1_000, false, (1_000, 1_001, 1_500), false);
        h.round("job", "p2", 2, 1_000, true, (1_200, 1_400, 1_700), false);
        let r = h.check();
        assert!(
            r.violations
                .iter()
                .any(|v| matches!(v, Violation::RerunBeforeFirstEnded { .. }))
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

    #[test]
    fn violations_read_well() {
        let v = Violation::TermGap {
            name: "a".into(),
            from: 1,
            to: 3,
            unexplained: 1,
        };
        assert_eq!(
            v.to_string(),
            "term gap on a: 1 -> 3, 1 term(s) accounted for by no claim of unknown outcome"
        );
    }
}
