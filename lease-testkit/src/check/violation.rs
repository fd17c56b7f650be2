//! What the checker reports: each guarantee a history shows broken.

use std::fmt;

use super::TenureId;

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

#[cfg(test)]
mod tests {
    use super::*;

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
