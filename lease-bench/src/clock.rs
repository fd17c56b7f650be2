//! Bounds on the database's clock from the process's monotonic clock.
//!
//! A soak records when work started and stopped by the database's clock,
//! but a holder that lost its lease because the database is out of reach
//! cannot ask the database what time it is when it steps down. So every
//! read of the database's clock is also a calibration: the database read
//! `db_ms` at some moment between sending the read (`sent`) and receiving
//! the answer (`received`). With the two clocks ticking at the same rate
//! (on one host, or over the seconds a window of samples spans), the
//! database's clock at a later local instant `t` lies between
//! `db_ms + (t - received)` and `db_ms + 1 + (t - sent)` (the `+ 1`: the
//! database reports whole milliseconds, rounded down), and each sample
//! narrows the bounds. A slack of [`SLACK_MS`] on each side absorbs a slewing
//! clock.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// Widening of every bound, for clock slew between samples.
pub const SLACK_MS: i64 = 2;

/// How many recent samples count.
const WINDOW: usize = 32;

/// Samples older than this no longer count (slew adds up).
const MAX_AGE: Duration = Duration::from_secs(20);

#[derive(Debug, Clone, Copy)]
struct Sample {
    sent: Instant,
    received: Instant,
    db_ms: i64,
}

/// The calibration: recent reads of the database's clock.
#[derive(Debug, Default)]
pub struct DbClock {
    samples: Mutex<VecDeque<Sample>>,
}

/// Signed milliseconds from `from` to `to`, rounded towards `up` or down.
fn millis_between(from: Instant, to: Instant, up: bool) -> i64 {
    let (d, sign) = if to >= from {
        (to - from, 1)
    } else {
        (from - to, -1)
    };
    let micros = i64::try_from(d.as_micros()).unwrap_or(i64::MAX / 2);
    let whole = micros / 1000;
    let rest = micros % 1000 != 0;
    match (sign, up && rest, !up && rest) {
        (1, true, _) => whole + 1,
        (1, _, _) => whole,
        (_, _, true) => -(whole + 1),
        _ => -whole,
    }
}

impl DbClock {
    /// No samples yet.
    #[must_use]
    pub fn new() -> Self {
        DbClock::default()
    }

    /// Records a read of the database's clock: `db_ms`, read between `sent`
    /// and `received`.
    pub fn observe(&self, sent: Instant, received: Instant, db_ms: i64) {
        let mut samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
        samples.push_back(Sample {
            sent,
            received,
            db_ms,
        });
        while samples.len() > WINDOW {
            let _ = samples.pop_front();
        }
    }

    fn recent(&self, at: Instant) -> Vec<Sample> {
        let samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
        samples
            .iter()
            .filter(|s| at.saturating_duration_since(s.received) <= MAX_AGE)
            .copied()
            .collect()
    }

    /// The database's clock at `at` is no later than this (`None` without a
    /// recent sample).
    #[must_use]
    pub fn upper(&self, at: Instant) -> Option<i64> {
        self.recent(at)
            .iter()
            .map(|s| s.db_ms + 1 + millis_between(s.sent, at, true))
            .min()
            .map(|v| v + SLACK_MS)
    }

    /// The database's clock at `at` is no earlier than this (`None` without
    /// a recent sample).
    #[must_use]
    pub fn lower(&self, at: Instant) -> Option<i64> {
        self.recent(at)
            .iter()
            .map(|s| s.db_ms + millis_between(s.received, at, false))
            .max()
            .map(|v| v - SLACK_MS)
    }

    /// How many samples are held.
    #[must_use]
    pub fn samples(&self) -> usize {
        self.samples
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_follow_the_tightest_sample() {
        let clock = DbClock::new();
        let t0 = Instant::now();
        assert_eq!(clock.upper(t0), None);
        // A slow read: the database said 1_000 somewhere within 100 ms.
        clock.observe(t0, t0 + Duration::from_millis(100), 1_000);
        let at = t0 + Duration::from_millis(500);
        assert_eq!(clock.upper(at), Some(1_000 + 1 + 500 + SLACK_MS));
        assert_eq!(clock.lower(at), Some(1_000 + 400 - SLACK_MS));
        // A fast read narrows both bounds.
        let t1 = t0 + Duration::from_millis(200);
        clock.observe(t1, t1 + Duration::from_millis(2), 1_150);
        assert_eq!(clock.upper(at), Some(1_150 + 1 + 300 + SLACK_MS));
        assert_eq!(clock.lower(at), Some(1_150 + 298 - SLACK_MS));
        // Before a sample, the bounds still hold.
        assert_eq!(clock.upper(t0), Some(1_150 + 1 - 200 + SLACK_MS));
    }

    #[test]
    fn old_samples_stop_counting() {
        let clock = DbClock::new();
        let t0 = Instant::now();
        clock.observe(t0, t0, 5);
        assert!(clock.upper(t0 + MAX_AGE).is_some());
        assert_eq!(clock.upper(t0 + MAX_AGE + Duration::from_millis(1)), None);
    }

    #[test]
    fn rounding() {
        let t = Instant::now();
        let d = Duration::from_micros(1_500);
        assert_eq!(millis_between(t, t + d, true), 2);
        assert_eq!(millis_between(t, t + d, false), 1);
        assert_eq!(millis_between(t + d, t, true), -1);
        assert_eq!(millis_between(t + d, t, false), -2);
        assert_eq!(millis_between(t, t, true), 0);
    }
}
