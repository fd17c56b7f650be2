//! The table the benchmark prints: each operation beside its floors.

use crate::stats::{Latency, Summary, ratio};

/// One row of the table.
pub(crate) struct Row {
    pub(crate) op: String,
    pub(crate) c: usize,
    pub(crate) lease: Option<Summary>,
    pub(crate) hand: Option<Summary>,
    pub(crate) select1: Summary,
    pub(crate) note: String,
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
        "| {:<26} | {:>2} | {:>25} | {:>25} | {:>25} | {:>17} | {:>20} |",
        "operation (lease)",
        "c",
        "lease p50 p99 ops/s",
        "hand SQL p50 p99 ops/s",
        "SELECT 1 p50 p99 ops/s",
        "p50 vs hand, vs S1",
        "ops/s vs hand"
    );
    println!(
        "|{:-<28}|{:->4}|{:->27}|{:->27}|{:->27}|{:->19}|{:->22}|",
        "", "", "", "", "", "", ""
    );
    for r in rows {
        let (vs_hand, vs_s1, tput) = match (&r.lease, &r.hand) {
            (Some(l), Some(h)) => (
                ratio(l.p50.as_secs_f64(), h.p50.as_secs_f64()),
                ratio(l.p50.as_secs_f64(), r.select1.p50.as_secs_f64()),
                if r.note.is_empty() {
                    ratio(l.throughput, h.throughput)
                } else {
                    r.note.clone()
                },
            ),
            _ => ("-".to_owned(), "-".to_owned(), r.note.clone()),
        };
        println!(
            "| {:<26} | {:>2} | {} | {} | {} | {:>17} | {:>20} |",
            r.op,
            r.c,
            fmt_summary(r.lease.as_ref()),
            fmt_summary(r.hand.as_ref()),
            fmt_summary(Some(&r.select1)),
            format!("{vs_hand}, {vs_s1}"),
            tput
        );
    }
    let notes: Vec<&str> = FOOTNOTES
        .iter()
        .filter(|(mark, _)| rows.iter().any(|r| r.op.contains(mark)))
        .map(|(_, note)| *note)
        .collect();
    if !notes.is_empty() {
        println!();
        for note in notes {
            println!("{note}");
        }
    }
}

/// What the rows marked so measure, printed under a table that has them.
const FOOTNOTES: [(&str, &str); 4] = [
    (
        "¹",
        "¹ `LeaseStore::renew_many` of that many held leases per call (every renewal writes), \
         beside the same batch statement by hand; latency per call, ops/s = leases renewed per second.",
    ),
    (
        "²",
        "² `Leader::run`: time from the leader stepping down (shutdown: work ends, name given back) \
         to the follower leading, the follower campaigning every 10 ms; beside the hand-written claim + release.",
    ),
    (
        "³",
        "³ The leader's campaign dropped (renewals stop, name not given back, as a killed process) \
         to the follower leading, one sample, default timings: the floor is the lease, by the protocol.",
    ),
    (
        "⁴",
        "⁴ `lease-scheduler`, that many jobs `@every 1s` on one replica, empty bodies: p50/p99 of how late \
         each round's body started after its instant (timer + instant claim), ops/s = rounds/s; \
         beside the hand-written instant claim + finish at c=1.",
    ),
];

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
            "lock try_run",
            "renew_many",
            "leader hand-over",
            "leader failover",
            "scheduler",
        ]
        .iter()
        .enumerate()
        .filter(|(_, o)| op.starts_with(*o))
        .max_by_key(|(_, o)| o.len())
        .map_or(99, |(i, _)| i)
    };
    rows.sort_by_key(|r| (order(&r.op), r.c));
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn row(op: &str, c: usize) -> Row {
        let s = Summary::of(vec![Duration::from_millis(1)], 0, Duration::from_secs(1));
        Row {
            op: op.to_owned(),
            c,
            lease: Some(s),
            hand: Some(s),
            select1: s,
            note: String::new(),
        }
    }

    /// Rows sort by operation in the documented order, then concurrency;
    /// a row whose name starts like another (`renew_many` and `renew`)
    /// goes by the longest name it starts with.
    #[test]
    fn rows_sort_by_operation_then_concurrency() {
        let mut rows = vec![
            row("scheduler, 200 jobs/s ⁴", 1),
            row("renew_many, 1000/call ¹", 1),
            row("renew", 8),
            row("lock try_run, empty body", 1),
            row("claim + release", 8),
            row("renew", 1),
            row("claim + release", 1),
        ];
        sort_rows(&mut rows);
        let order: Vec<(&str, usize)> = rows.iter().map(|r| (r.op.as_str(), r.c)).collect();
        assert_eq!(
            order,
            vec![
                ("claim + release", 1),
                ("claim + release", 8),
                ("renew", 1),
                ("renew", 8),
                ("lock try_run, empty body", 1),
                ("renew_many, 1000/call ¹", 1),
                ("scheduler, 200 jobs/s ⁴", 1),
            ]
        );
    }
}
