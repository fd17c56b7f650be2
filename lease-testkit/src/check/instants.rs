//! Rule 4, **instants**: each instant of a job ran at most twice, the
//! second time only as a second claim after a first run that was cut short
//! ([`Violation::InstantRanTwice`], [`Violation::RerunTwice`],
//! [`Violation::RerunAfterFinished`], [`Violation::RerunBeforeFirstEnded`]).
//!
//! A round counts as finished when its end is known recorded in the
//! database ([`Tenure::finished`]): only then is a second run a violation.
//! A second run with no first on record is let pass: the first claim's
//! outcome was unknown to its process (killed, or the answer lost), which
//! rule 2 accounts for.
//!
//! The scheduler's own multi-replica tests (lease-scheduler/tests/history)
//! judge their rounds with this function too.

use std::collections::BTreeMap;

use super::{Tenure, Violation};

/// The instant rule over the tenures of job `name` (those without a slot
/// are ignored).
pub fn instants(name: &str, list: &[Tenure], out: &mut Vec<Violation>) {
    let mut slots: BTreeMap<i64, (Vec<&Tenure>, Vec<&Tenure>)> = BTreeMap::new();
    for t in list {
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
    use super::super::testkit::{H, only};
    use super::*;

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
    fn a_rerun_with_no_first_on_record_passes() {
        let mut h = H::default();
        h.failed("job", "p1", 990);
        h.round("job", "p2", 2, 1_000, true, (4_000, 4_001, 4_100), true);
        assert!(h.check().violations.is_empty());
    }
}
