//! Rule 1, **no overlap**: no two tenures of one name overlap by the
//! database's clock.
//!
//! On the bounds: a tenure's `claim_ms` is no later than its work started,
//! its `stop_ms` no earlier than its work ended, so a later tenure whose
//! `claim_ms` is not past an earlier one's `stop_ms` may have acted beside
//! it. For a lock: never two runs of one lock at once; for a leader: never
//! two leaders whose tenures overlap; for a job: never two rounds at once.

use super::{Tenure, Violation};

/// Every pair of tenures of `name` that may have overlapped. `list` is
/// sorted by `(claim_ms, term)`.
pub fn overlaps(name: &str, list: &[Tenure], out: &mut Vec<Violation>) {
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
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{H, only};
    use super::*;

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
    fn planted_overlap_of_two_lock_runs_is_caught() {
        // A store that lies about a claim: p2's run of the lock starts while
        // p1's is still on, with p1's term.
        let mut h = H::default();
        h.tenure("lock:x", "p1", 1, (0, 5, 1_000));
        h.tenure("lock:x", "p2", 2, (400, 401, 600));
        let r = h.check();
        assert!(
            matches!(only(&r), Violation::Overlap { by_ms: 599, .. }),
            "{:?}",
            r.violations
        );
    }

    #[test]
    fn tenures_one_after_the_other_pass() {
        let mut h = H::default();
        h.tenure("leader:x", "p1", 1, (0, 5, 100));
        h.tenure("leader:x", "p2", 2, (99, 101, 200));
        assert!(h.check().violations.is_empty());
    }
}
