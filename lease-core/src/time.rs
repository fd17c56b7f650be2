//! Instants on the database's clock.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// An instant as whole UTC milliseconds since the UNIX epoch: how the lease
/// table records expiries and a schedule's instants, and what
/// [`LeaseStore::now_ms`](crate::LeaseStore::now_ms) reads off the database's
/// clock.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use lease_core::UtcMillis;
///
/// let t = UtcMillis::try_from(UNIX_EPOCH + Duration::from_millis(1_700_000_000_123))?;
/// assert_eq!(t.as_millis(), 1_700_000_000_123);
/// assert_eq!(t.to_system_time(), UNIX_EPOCH + Duration::from_millis(1_700_000_000_123));
/// # Ok::<(), lease_core::TimeOutOfRange>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UtcMillis(i64);

impl UtcMillis {
    /// The UNIX epoch, 1970-01-01T00:00:00Z.
    pub const EPOCH: UtcMillis = UtcMillis(0);

    /// The instant `ms` milliseconds after the UNIX epoch (before it, if negative).
    #[must_use]
    pub const fn from_millis(ms: i64) -> Self {
        UtcMillis(ms)
    }

    /// Milliseconds since the UNIX epoch.
    #[must_use]
    pub const fn as_millis(self) -> i64 {
        self.0
    }

    /// The same instant as a [`SystemTime`].
    #[must_use]
    pub fn to_system_time(self) -> SystemTime {
        let magnitude = Duration::from_millis(self.0.unsigned_abs());
        if self.0 >= 0 {
            UNIX_EPOCH + magnitude
        } else {
            UNIX_EPOCH - magnitude
        }
    }

    /// This instant moved by `d`, saturating at the ends of the range.
    #[must_use]
    pub fn saturating_add(self, d: Duration) -> Self {
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        UtcMillis(self.0.saturating_add(ms))
    }
}

/// A [`SystemTime`] too far from the UNIX epoch to count in `i64` milliseconds.
#[derive(Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the instant is too far from the UNIX epoch to count in milliseconds")]
pub struct TimeOutOfRange;

impl std::fmt::Debug for TimeOutOfRange {
    /// The message, on one line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl TryFrom<SystemTime> for UtcMillis {
    type Error = TimeOutOfRange;

    /// Converts, dropping any fraction of a millisecond (towards the past).
    fn try_from(t: SystemTime) -> Result<Self, TimeOutOfRange> {
        match t.duration_since(UNIX_EPOCH) {
            Ok(after) => i64::try_from(after.as_millis())
                .map(UtcMillis)
                .map_err(|_| TimeOutOfRange),
            Err(before) => {
                let before = before.duration();
                let whole = i64::try_from(before.as_millis()).map_err(|_| TimeOutOfRange)?;
                let partial = before.subsec_nanos() % 1_000_000 != 0;
                Ok(UtcMillis(-whole - i64::from(partial)))
            }
        }
    }
}

impl From<UtcMillis> for SystemTime {
    fn from(t: UtcMillis) -> SystemTime {
        t.to_system_time()
    }
}

impl fmt::Display for UtcMillis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions_of_a_millisecond_are_dropped_towards_the_past() {
        let after = UNIX_EPOCH + Duration::from_micros(1_500);
        assert_eq!(UtcMillis::try_from(after).unwrap().as_millis(), 1);
        let before = UNIX_EPOCH - Duration::from_micros(1_500);
        assert_eq!(UtcMillis::try_from(before).unwrap().as_millis(), -2);
        let exact = UNIX_EPOCH - Duration::from_millis(3);
        assert_eq!(UtcMillis::try_from(exact).unwrap().as_millis(), -3);
    }

    #[test]
    fn round_trips_through_system_time() {
        for ms in [-5_000, 0, 1, 1_764_460_800_000] {
            let t = UtcMillis::from_millis(ms);
            assert_eq!(UtcMillis::try_from(t.to_system_time()).unwrap(), t);
        }
    }
}
