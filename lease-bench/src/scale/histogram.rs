//! Durations counted in 1 ms buckets: the gaps between a lease's renewals,
//! the renewal statements' latencies, the renewals' durations.

use std::time::Duration;

/// Gaps and latencies are counted in 1 ms buckets up to this many ms.
const BUCKETS: usize = 20_000;

/// A histogram of milliseconds: 1 ms buckets up to [`BUCKETS`] ms, the
/// rest in the last.
pub(crate) struct Histogram {
    buckets: Vec<u64>,
    /// How many durations were recorded.
    pub(crate) count: u64,
    /// The longest, in ms.
    pub(crate) max: u64,
}

impl Histogram {
    pub(crate) fn new() -> Self {
        Histogram {
            buckets: vec![0; BUCKETS + 1],
            count: 0,
            max: 0,
        }
    }

    pub(crate) fn record(&mut self, d: Duration) {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        self.buckets[usize::try_from(ms).unwrap_or(BUCKETS).min(BUCKETS)] += 1;
        self.count += 1;
        self.max = self.max.max(ms);
    }

    pub(crate) fn percentile(&self, p: f64) -> u64 {
        let rank = ((p / 100.0) * self.count as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (ms, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return ms as u64;
            }
        }
        self.max
    }

    pub(crate) fn above(&self, ms: u64) -> u64 {
        self.buckets
            .iter()
            .skip(usize::try_from(ms).unwrap_or(BUCKETS) + 1)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_the_count_above_read_the_buckets() {
        let mut h = Histogram::new();
        for ms in [1, 2, 2, 3, 10, 40_000] {
            h.record(Duration::from_millis(ms));
        }
        assert_eq!((h.count, h.max), (6, 40_000));
        assert_eq!(h.percentile(50.0), 2);
        assert_eq!(h.percentile(80.0), 10);
        // Past the last bucket, a duration counts in it.
        assert_eq!(h.percentile(100.0), 20_000);
        assert_eq!(h.above(2), 3);
        assert_eq!(h.above(20_000), 0);
        assert_eq!(Histogram::new().percentile(99.0), 0);
    }
}
