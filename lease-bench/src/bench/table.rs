//! The table the benchmark prints: each operation beside its floors.

use crate::stats::{Latency, Summary, ratio};

/// One row of the table.
pub(crate) struct Row {
    pub(crate) op: String,
    pub(crate) c: usize,
    pub(crate) lease: Option<Summary>,
    pub(crate) hand: Option<Summary>,
    pub(crate) select1: Summary,
    /// In place of the ops/s ratio (rows whose rate is not the point).
    pub(crate) note: String,
    /// Contended claims won per second: the lease's, the floor's.
    pub(crate) wins: Option<(f64, f64)>,
    /// Round trips of one operation counted on the wire: the lease's, the
    /// floor's (`None` without a wire: SQLite).
    pub(crate) trips: Option<(u64, u64)>,
}

impl Row {
    /// A row of an operation beside its floor.
    pub(crate) fn new(
        op: String,
        c: usize,
        lease: Summary,
        hand: Summary,
        select1: Summary,
    ) -> Row {
        Row::noted(op, c, Some(lease), Some(hand), select1, String::new())
    }

    /// A row whose last column says `note` instead of the ops/s ratio
    /// (when not empty).
    pub(crate) fn noted(
        op: String,
        c: usize,
        lease: Option<Summary>,
        hand: Option<Summary>,
        select1: Summary,
        note: String,
    ) -> Row {
        Row {
            op,
            c,
            lease,
            hand,
            select1,
            note,
            wins: None,
            trips: None,
        }
    }
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

/// The table's head: the columns, then the rule under them.
const HEAD: [&str; 10] = [
    "operation (lease)",
    "c",
    "lease p50 p99 ops/s",
    "hand SQL p50 p99 ops/s",
    "SELECT 1 p50 p99 ops/s",
    "vs hand p50, p99",
    "p50 vs S1",
    "ops/s vs hand",
    "wins/s lease, hand",
    "round trips lease, hand",
];

/// The columns' widths.
const WIDTHS: [usize; 10] = [32, 2, 25, 25, 25, 16, 9, 20, 22, 23];

/// One line of the table: the cells, padded to [`WIDTHS`] (the first
/// left-aligned, the others right-aligned).
fn line(cells: &[String]) -> String {
    let mut out = String::from("|");
    for (i, (cell, width)) in cells.iter().zip(WIDTHS).enumerate() {
        if i == 0 {
            out.push_str(&format!(" {cell:<width$} |"));
        } else {
            out.push_str(&format!(" {cell:>width$} |"));
        }
    }
    out
}

/// The cells of `r`'s line.
pub(crate) fn cells(r: &Row) -> Vec<String> {
    let (vs_hand, vs_s1, tput) = match (&r.lease, &r.hand) {
        (Some(l), Some(h)) => (
            format!(
                "{}, {}",
                ratio(l.p50.as_secs_f64(), h.p50.as_secs_f64()),
                ratio(l.p99.as_secs_f64(), h.p99.as_secs_f64())
            ),
            ratio(l.p50.as_secs_f64(), r.select1.p50.as_secs_f64()),
            if r.note.is_empty() {
                ratio(l.throughput, h.throughput)
            } else {
                r.note.clone()
            },
        ),
        (Some(l), None) => (
            "-".to_owned(),
            ratio(l.p50.as_secs_f64(), r.select1.p50.as_secs_f64()),
            r.note.clone(),
        ),
        _ => ("-".to_owned(), "-".to_owned(), r.note.clone()),
    };
    let wins = match r.wins {
        Some((lease, hand)) => format!("{lease:.0}, {hand:.0} ({})", ratio(lease, hand)),
        None => "-".to_owned(),
    };
    let trips = match r.trips {
        Some((lease, hand)) => format!("{lease}, {hand}"),
        None => "-".to_owned(),
    };
    vec![
        r.op.clone(),
        r.c.to_string(),
        fmt_summary(r.lease.as_ref()),
        fmt_summary(r.hand.as_ref()),
        fmt_summary(Some(&r.select1)),
        vs_hand,
        vs_s1,
        tput,
        wins,
        trips,
    ]
}

pub(crate) fn print_rows(rows: &[Row]) {
    println!("{}", line(&HEAD.map(str::to_owned)));
    let mut rule = String::from("|");
    for (i, width) in WIDTHS.into_iter().enumerate() {
        // The first column left-aligned, the others right-aligned.
        rule.push_str(&if i == 0 {
            format!(":{}|", "-".repeat(width + 1))
        } else {
            format!("{}:|", "-".repeat(width + 1))
        });
    }
    println!("{rule}");
    for r in rows {
        println!("{}", line(&cells(r)));
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
    if rows.iter().any(|r| r.trips.is_some()) {
        println!();
        println!("{TRIPS_NOTE}");
    }
}

/// Under a table with round trips: how they were counted.
const TRIPS_NOTE: &str = "Round trips: one operation of each side sent through a TCP proxy \
     (`lease_conformance::proxy::Proxy::start_observed`) on a pool of one connection, after two \
     unmeasured ones (statements prepared), counted as the reads of the client's bytes that end a \
     request wanting an answer (PostgreSQL: `Sync`, `Query`; MySQL: every command but \
     `COM_STMT_CLOSE`): requests sent together count once. The contended claim's are a refused \
     claim's; the guarded transaction's floor is the same transaction unguarded.";

/// What the rows marked so measure, printed under a table that has them.
const FOOTNOTES: [(&str, &str); 5] = [
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
    (
        "⁵",
        "⁵ The same lease figures beside the floor on a connection per worker (an application's own pool \
         of that many connections to the file, same pragmas, SQLite's busy handler with a 5 s timeout); \
         the rows without the mark are beside the floor on one connection.",
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
            super::ops::GUARDED_READ,
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
    // A second floor's row (marked ⁵) after the first floor's.
    rows.sort_by_key(|r| (order(&r.op), r.c, r.op.contains('⁵')));
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn row(op: &str, c: usize) -> Row {
        let s = Summary::of(vec![Duration::from_millis(1)], 0, Duration::from_secs(1));
        Row::new(op.to_owned(), c, s, s, s)
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

    fn summary(p50_ms: u64, p99_ms: u64, ops: usize) -> Summary {
        let mut samples = vec![Duration::from_millis(p50_ms); 98];
        samples.push(Duration::from_millis(p99_ms));
        samples.push(Duration::from_millis(p99_ms));
        let mut s = Summary::of(samples, 0, Duration::from_secs(1));
        s.throughput = ops as f64;
        s
    }

    /// A row shows the p99 ratio beside the p50 one, the contended wins of
    /// each side with their ratio, and the round trips of each side.
    #[test]
    fn a_row_shows_p99_beside_p50_the_wins_and_the_round_trips() {
        let mut r = Row::new(
            "contended claim".to_owned(),
            8,
            summary(2, 30, 900),
            summary(1, 10, 1000),
            summary(1, 1, 5000),
        );
        r.wins = Some((450.0, 500.0));
        r.trips = Some((1, 1));
        let c = cells(&r);
        assert_eq!(c[5], "2.0x, 3.0x");
        assert_eq!(c[6], "2.0x");
        assert_eq!(c[7], "0.9x");
        assert_eq!(c[8], "450, 500 (0.9x)");
        assert_eq!(c[9], "1, 1");
        let plain = cells(&Row::new(
            "renew".to_owned(),
            1,
            summary(1, 1, 1),
            summary(1, 1, 1),
            summary(1, 1, 1),
        ));
        assert_eq!((plain[8].as_str(), plain[9].as_str()), ("-", "-"));
    }

    /// Every line of the table has the head's columns, so markdown reads it.
    #[test]
    fn every_line_has_the_heads_columns() {
        let head = line(&HEAD.map(str::to_owned));
        let row = line(&cells(&Row::noted(
            "leader failover, crash ³".to_owned(),
            1,
            Some(summary(1, 1, 1)),
            None,
            summary(1, 1, 1),
            "1.0x the 15 s lease".to_owned(),
        )));
        assert_eq!(head.matches('|').count(), 11);
        assert_eq!(row.matches('|').count(), 11);
    }

    /// A floor's second row (SQLite's connection per worker) sorts right
    /// after the first, at each concurrency.
    #[test]
    fn the_second_floors_rows_follow_the_first() {
        let mut rows = vec![
            row("renew ⁵", 8),
            row("claim + release ⁵", 1),
            row("renew", 8),
            row("claim + release", 1),
        ];
        sort_rows(&mut rows);
        let order: Vec<&str> = rows.iter().map(|r| r.op.as_str()).collect();
        assert_eq!(
            order,
            ["claim + release", "claim + release ⁵", "renew", "renew ⁵"]
        );
    }
}
