//! Histories for the rules' tests, built step by step.

use crate::history::{Event, StopCause};

use super::{Report, Violation, check};

/// Builds histories: each helper appends the events of one step.
#[derive(Default)]
pub(crate) struct H {
    pub(crate) events: Vec<Event>,
    seq: u64,
}

impl H {
    pub(crate) fn attempt(&mut self, name: &str, instance: &str, sent_ms: i64) -> u64 {
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
    pub(crate) fn tenure_full(
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

    pub(crate) fn tenure(&mut self, name: &str, instance: &str, term: u64, span: (i64, i64, i64)) {
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

    pub(crate) fn lost(&mut self, name: &str, instance: &str, term: u64, span: (i64, i64, i64)) {
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
    pub(crate) fn round(
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

    pub(crate) fn failed(&mut self, name: &str, instance: &str, sent: i64) {
        let seq = self.attempt(name, instance, sent);
        self.events.push(Event::Failed {
            instance: instance.into(),
            seq,
        });
    }

    pub(crate) fn refused(&mut self, name: &str, instance: &str, sent: i64) {
        let seq = self.attempt(name, instance, sent);
        self.events.push(Event::Refused {
            instance: instance.into(),
            seq,
        });
    }

    /// A tenure claimed at `claim` whose process was killed at `at`.
    pub(crate) fn killed(
        &mut self,
        name: &str,
        instance: &str,
        term: u64,
        sent: i64,
        claim: i64,
        at: i64,
    ) {
        let seq = self.attempt(name, instance, sent);
        self.events.push(Event::Claim {
            name: name.into(),
            instance: instance.into(),
            seq,
            term,
            slot: None,
            rerun: false,
            claim_ms: claim,
        });
        self.events.push(Event::Killed {
            instance: instance.into(),
            at_ms: at,
        });
    }

    /// A tenure claimed at `claim` that never ended in the history.
    pub(crate) fn open(&mut self, name: &str, instance: &str, term: u64, sent: i64, claim: i64) {
        let seq = self.attempt(name, instance, sent);
        self.events.push(Event::Claim {
            name: name.into(),
            instance: instance.into(),
            seq,
            term,
            slot: None,
            rerun: false,
            claim_ms: claim,
        });
    }

    pub(crate) fn check(&self) -> Report {
        check(&self.events)
    }
}

/// A sound history: hands change with released and lost leases, a
/// killed holder, refusals, an unknown claim that took a term, and an
/// instant cut short and run again once.
pub(crate) fn sound() -> H {
    let mut h = H::default();
    h.tenure("a", "p1", 1, (0, 5, 100));
    h.refused("a", "p2", 50);
    h.tenure("a", "p2", 2, (101, 105, 200));
    h.lost("a", "p1", 3, (300, 301, 2_000));
    h.failed("a", "p2", 2_100);
    // term 4 went to the failed claim's unknown token
    h.tenure("a", "p3", 5, (6_000, 6_001, 6_500));
    // p3 claims again and is killed while holding
    h.killed("a", "p3", 6, 6_600, 6_601, 7_000);
    h.tenure("a", "p1", 7, (10_100, 10_101, 10_200));
    // instants
    h.round("job", "p1", 1, 1_000, false, (1_000, 1_001, 1_500), true);
    h.round("job", "p2", 2, 2_000, false, (2_000, 2_001, 2_900), false);
    h.round("job", "p1", 3, 2_000, true, (6_000, 6_001, 6_300), true);
    h.round("job", "p2", 4, 7_000, false, (7_000, 7_001, 7_300), true);
    h
}

/// The one violation of a report; fails when there is not exactly one.
pub(crate) fn only(r: &Report) -> &Violation {
    assert_eq!(r.violations.len(), 1, "{:#?}", r.violations);
    &r.violations[0]
}
