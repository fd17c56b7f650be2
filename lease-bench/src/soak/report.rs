//! The soak's closing report.

use std::collections::BTreeMap;

use super::Args;
use super::orchestrator::Faults;
use crate::check::Report;

/// Prints what the soak did and what the checker found.
pub(crate) fn print_report(report: &Report, faults: &Faults, args: &Args) {
    println!(
        "  faults: {} kills, {} freezes, {} pauses, {} cuts, {} stalls",
        faults.kills, faults.freezes, faults.pauses, faults.cuts, faults.stalls
    );
    println!(
        "  claims: {} attempted, {} refused, {} of unknown outcome",
        report.attempts, report.refused, report.unknown
    );
    let mut terms: BTreeMap<&str, (usize, u64)> = BTreeMap::new();
    for t in &report.tenures {
        let e = terms.entry(t.name.as_str()).or_default();
        e.0 += 1;
        e.1 = e.1.max(t.id.term);
    }
    println!(
        "  tenures: {} ({} ended by a lost lease, {} by a kill)",
        report.tenures.len(),
        report.lost(),
        report.killed()
    );
    for (name, (count, max)) in &terms {
        println!("    {name}: {count} tenures, last term {max}");
    }
    println!(
        "  instants: {} run, {} run a second time after a round cut short",
        report.instants(),
        report.reruns()
    );
    println!("  violations: {}", report.violations.len());
    for v in report.violations.iter().take(20) {
        println!("    {v}");
    }
    if report.violations.len() > 20 {
        println!("    ... and {} more", report.violations.len() - 20);
    }
    if args.expect_violations {
        println!(
            "  planted bug {}: {}",
            args.plant,
            if report.violations.is_empty() {
                "NOT caught"
            } else {
                "caught"
            }
        );
    }
}
