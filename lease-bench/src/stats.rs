//! Latency percentiles and throughput from recorded samples.

use std::fmt;
use std::time::Duration;

/// The figures of one measured cell: how many operations, in what wall time,
/// and their latency percentiles.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// Operations completed.
    pub ops: usize,
    /// Operations that failed (counted in `ops`, not in the latencies).
    pub errors: usize,
    /// Median latency.
    pub p50: Duration,
    /// 99th percentile latency.
    pub p99: Duration,
    /// Operations per second over the wall time of the cell.
    pub throughput: f64,
}

impl Summary {
    /// Summarises `samples` (the latencies of the operations that succeeded)
    /// over `wall`, the time the whole cell took; `errors` operations failed.
    /// Percentiles are the nearest-rank ones of the sorted samples; an empty
    /// set has zero latencies.
    #[must_use]
    pub fn of(mut samples: Vec<Duration>, errors: usize, wall: Duration) -> Self {
        samples.sort_unstable();
        let ops = samples.len() + errors;
        let secs = wall.as_secs_f64();
        Summary {
            ops,
            errors,
            p50: percentile(&samples, 50.0),
            p99: percentile(&samples, 99.0),
            throughput: if secs > 0.0 { ops as f64 / secs } else { 0.0 },
        }
    }
}

/// The nearest-rank `p`th percentile of `sorted` (ascending); zero when empty.
#[must_use]
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    let index = rank.clamp(1, sorted.len()) - 1;
    sorted.get(index).copied().unwrap_or(Duration::ZERO)
}

/// A latency in microseconds or milliseconds, whichever reads better, in a
/// fixed width.
#[derive(Debug, Clone, Copy)]
pub struct Latency(pub Duration);

impl fmt::Display for Latency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let us = self.0.as_secs_f64() * 1e6;
        let text = if us < 1_000.0 {
            format!("{us:.0}us")
        } else if us < 100_000.0 {
            format!("{:.2}ms", us / 1_000.0)
        } else if us < 10_000_000.0 {
            format!("{:.0}ms", us / 1_000.0)
        } else {
            format!("{:.2}s", us / 1e6)
        };
        match f.width() {
            Some(w) => write!(f, "{text:>w$}"),
            None => f.write_str(&text),
        }
    }
}

/// `a / b` as a ratio, or `-` when `b` is zero.
#[must_use]
pub fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.1}x", a / b)
    } else {
        "-".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<Duration> = (1..=100).rev().map(ms).collect();
        let s = Summary::of(samples, 0, Duration::from_secs(2));
        assert_eq!(s.p50, ms(50));
        assert_eq!(s.p99, ms(99));
        assert_eq!(s.ops, 100);
        assert!((s.throughput - 50.0).abs() < 1e-9);
        assert_eq!(percentile(&[ms(7)], 99.0), ms(7));
        assert_eq!(percentile(&[], 50.0), Duration::ZERO);
    }

    #[test]
    fn errors_count_as_operations_but_not_as_latencies() {
        let s = Summary::of(vec![ms(1), ms(3)], 2, Duration::from_secs(1));
        assert_eq!(s.ops, 4);
        assert_eq!(s.errors, 2);
        assert_eq!(s.p99, ms(3));
    }

    #[test]
    fn latencies_and_ratios_read_well() {
        assert_eq!(Latency(Duration::from_micros(250)).to_string(), "250us");
        assert_eq!(Latency(Duration::from_micros(2_500)).to_string(), "2.50ms");
        assert_eq!(format!("{:>8}", Latency(ms(150))), "   150ms");
        assert_eq!(Latency(ms(9_999)).to_string(), "9999ms");
        assert_eq!(Latency(ms(14_949)).to_string(), "14.95s");
        assert_eq!(ratio(3.0, 2.0), "1.5x");
        assert_eq!(ratio(1.0, 0.0), "-");
    }
}
