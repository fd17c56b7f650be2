//! Rule 3, **stepping down**: every holder that lost its lease (or was
//! killed, or whose end the history never saw) stopped acting before its
//! successor's claim may have run ([`Violation::LateStepDown`]).
//!
//! The successor's claim ran no earlier than its attempt's `sent_ms`; the
//! holder stopped no later than its `stop_ms`. This is stricter than rule 1:
//! a holder still acting between its successor's claim and the start of its
//! successor's work is caught here.

use crate::history::StopCause;

use super::{End, Tenure, Violation};

/// Each tenure against its successor by term. `by_term` is sorted by
/// `(term, claim_ms)`; of two tenures with one term (rule 2's business) the
/// second is skipped.
pub fn late_step_downs(name: &str, by_term: &[&Tenure], out: &mut Vec<Violation>) {
    let mut prev: Option<&Tenure> = None;
    for &t in by_term {
        if let Some(p) = prev {
            if t.id.term == p.id.term {
                continue;
            }
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
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{H, only};
    use super::*;

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
        h.killed("a", "p1", 1, 0, 5, 3_100);
        h.tenure("a", "p2", 2, (3_000, 3_200, 4_000));
        let r = h.check();
        assert!(
            matches!(only(&r), Violation::LateStepDown { .. }),
            "{:?}",
            r.violations
        );
    }

    #[test]
    fn planted_leader_acting_on_after_its_loss_is_caught() {
        // A leader that ignores the loss: its duty runs on to 5_000 although
        // the lease was lost, and its successor was elected at 3_300.
        let mut h = H::default();
        h.lost("leader:x", "p1", 1, (0, 5, 5_000));
        h.tenure("leader:x", "p2", 2, (3_300, 3_400, 6_000));
        let r = h.check();
        assert!(
            r.violations
                .iter()
                .any(|v| matches!(v, Violation::LateStepDown { by_ms: 1_700, .. })),
            "{:?}",
            r.violations
        );
    }

    #[test]
    fn a_holder_that_stepped_down_in_time_passes() {
        let mut h = H::default();
        h.lost("a", "p1", 1, (0, 5, 2_100));
        h.tenure("a", "p2", 2, (3_000, 3_200, 4_000));
        assert!(h.check().violations.is_empty());
    }
}
