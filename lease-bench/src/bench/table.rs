//! The table the benchmark prints: each operation beside its floors.

use crate::stats::{Latency, Summary, ratio};

/// One row of the table.
pub(crate) struct Row {
    pub(crate) op: &'static str,
    pub(crate) c: usize,
    pub(crate) lease: Option<Summary>,
    pub(crate) hand: Option<Summary>,
    pub(crate) select1: Summary,
    pub(crate) note: &'static str,
}

fn fmt_summary(s: Option<&Summary>) -> String {
    match s {
        Some(s) => format!(
            "{:>8} {:>8} {:>7.0}",
            Latency(s.p50),
            Latency(s.p99),
            s.throughput
        ),
        None => format!("{:>8} {:>8} {:>7}", "-", "-", "-"),
    }
}

pub(crate) fn print_rows(rows: &[Row]) {
    println!(
        "| {:<22} | {:>2} | {:>25} | {:>25} | {:>25} | {:>17} | {:>17} |",
        "operation (lease)",
        "c",
        "lease p50 p99 ops/s",
        "hand SQL p50 p99 ops/s",
        "SELECT 1 p50 p99 ops/s",
        "p50 vs hand, vs S1",
        "ops/s vs hand"
    );
    println!(
        "|{:-<24}|{:->4}|{:->27}|{:->27}|{:->27}|{:->19}|{:->19}|",
        "", "", "", "", "", "", ""
    );
    for r in rows {
        let (vs_hand, vs_s1, tput) = match (&r.lease, &r.hand) {
            (Some(l), Some(h)) => (
                ratio(l.p50.as_secs_f64(), h.p50.as_secs_f64()),
                ratio(l.p50.as_secs_f64(), r.select1.p50.as_secs_f64()),
                ratio(l.throughput, h.throughput),
            ),
            _ => ("-".to_owned(), "-".to_owned(), r.note.to_owned()),
        };
        println!(
            "| {:<22} | {:>2} | {} | {} | {} | {:>17} | {:>17} |",
            r.op,
            r.c,
            fmt_summary(r.lease.as_ref()),
            fmt_summary(r.hand.as_ref()),
            fmt_summary(Some(&r.select1)),
            format!("{vs_hand}, {vs_s1}"),
            tput
        );
    }
}

/// Sorts rows by operation (in the order the docs list them), then
/// concurrency.
pub(crate) fn sort_rows(rows: &mut [Row]) {
    let order = |op: &str| {
        [
            "claim + release",
            "renew",
            "contended claim",
            "instant claim + finish",
            "guarded transaction",
        ]
        .iter()
        .position(|o| *o == op)
        .unwrap_or(9)
    };
    rows.sort_by_key(|r| (order(r.op), r.c));
}
