//! Rule 2, **terms**: terms strictly increase per name in the order the
//! name changes hands ([`Violation::DuplicateTerm`],
//! [`Violation::TermOrder`]), and by one per change of hands
//! ([`Violation::TermGap`]).
//!
//! A claim whose outcome is unknown (it failed or timed out, or its process
//! was killed while it was in flight) may have taken the name with a token
//! nobody knows; each such attempt, sent before the next known claim,
//! accounts for one missing term, and only one.

use super::{Tenure, Violation};

/// Terms rise with time. `list` is sorted by `(claim_ms, term)`.
pub fn order(name: &str, list: &[Tenure], out: &mut Vec<Violation>) {
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
}

/// One tenure per term, and one term per change of hands, save for the
/// claims of unknown outcome: `unknown_sent` holds their `sent_ms`,
/// sorted. `by_term` is sorted by `(term, claim_ms)`.
pub fn one_per_change(
    name: &str,
    by_term: &[&Tenure],
    unknown_sent: &[i64],
    out: &mut Vec<Violation>,
) {
    let mut used = 0usize;
    let mut prev: Option<&Tenure> = None;
    for &t in by_term {
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
        prev = Some(t);
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{H, only};
    use super::*;

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
    fn planted_leader_term_skipping_is_caught() {
        // A leader whose store claims twice per change of hands: terms 2, 4.
        let mut h = H::default();
        h.tenure("leader:x", "p1", 2, (0, 5, 100));
        h.tenure("leader:x", "p2", 4, (200, 205, 300));
        let r = h.check();
        assert_eq!(r.violations.len(), 2, "{:?}", r.violations);
        assert!(
            r.violations
                .iter()
                .all(|v| matches!(v, Violation::TermGap { unexplained: 1, .. }))
        );
    }
}
