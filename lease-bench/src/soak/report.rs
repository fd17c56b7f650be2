//! The soak's closing report.

use std::collections::BTreeMap;

use super::Args;
use super::orchestrator::Faults;
use lease_testkit::check::{End, Report};
use lease_testkit::history::StopCause;

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
    /// Per name: tenures, lost, killed, last term, first runs, second runs.
    #[derive(Default)]
    struct PerName {
        tenures: usize,
        lost: usize,
        killed: usize,
        term: u64,
        instants: usize,
        reruns: usize,
    }
    let mut names: BTreeMap<&str, PerName> = BTreeMap::new();
    for t in &report.tenures {
        let e = names.entry(t.name.as_str()).or_default();
        e.tenures += 1;
        e.lost += usize::from(t.end == End::Stopped(StopCause::Lost));
        e.killed += usize::from(t.end == End::Killed);
        e.term = e.term.max(t.id.term);
        e.instants += usize::from(t.slot.is_some() && !t.rerun);
        e.reruns += usize::from(t.slot.is_some() && t.rerun);
    }
    println!(
        "  tenures: {} ({} ended by a lost lease, {} by a kill)",
        report.tenures.len(),
        report.lost(),
        report.killed()
    );
    for (name, n) in &names {
        let instants = if n.instants + n.reruns > 0 {
            format!(", {} instants, {} run again", n.instants, n.reruns)
        } else {
            String::new()
        };
        println!(
            "    {name}: {} tenures ({} lost, {} killed), last term {}{instants}",
            n.tenures, n.lost, n.killed, n.term
        );
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
