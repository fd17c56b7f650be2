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
    /// An RFC 3339 time in UTC with milliseconds, as the scheduler's logs and
    /// the CLI write instants: `2026-12-01T10:00:03.000Z`. An instant outside
    /// the years 0000 to 9999, which RFC 3339 cannot write, is written as its
    /// milliseconds since the epoch: `-62167219200001ms`.
    ///
    /// ```
    /// use lease_core::UtcMillis;
    ///
    /// assert_eq!(UtcMillis::from_millis(1_764_583_203_000).to_string(), "2025-12-01T10:00:03.000Z");
    /// assert_eq!(UtcMillis::EPOCH.to_string(), "1970-01-01T00:00:00.000Z");
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0;
        let days = ms.div_euclid(MS_PER_DAY);
        let of_day = ms.rem_euclid(MS_PER_DAY);
        let (year, month, day) = civil_from_days(days);
        if !(0..=9999).contains(&year) {
            return write!(f, "{ms}ms");
        }
        let (secs, milli) = (of_day / 1_000, of_day % 1_000);
        write!(
            f,
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{milli:03}Z",
            secs / 3_600,
            secs / 60 % 60,
            secs % 60
        )
    }
}

const MS_PER_DAY: i64 = 86_400_000;

/// The proleptic Gregorian (year, month, day) of the day `days` after
/// 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
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
    fn displays_as_rfc3339_in_utc_with_milliseconds() {
        let cases = [
            (0, "1970-01-01T00:00:00.000Z"),
            (-1, "1969-12-31T23:59:59.999Z"),
            (951_782_400_000, "2000-02-29T00:00:00.000Z"),
            (1_764_583_203_007, "2025-12-01T10:00:03.007Z"),
            (1_772_323_199_999, "2026-02-28T23:59:59.999Z"),
            (4_107_542_400_000, "2100-03-01T00:00:00.000Z"),
            (-62_167_219_200_000, "0000-01-01T00:00:00.000Z"),
            (253_402_300_799_999, "9999-12-31T23:59:59.999Z"),
            // Outside what RFC 3339 writes.
            (-62_167_219_200_001, "-62167219200001ms"),
            (253_402_300_800_000, "253402300800000ms"),
            (i64::MIN, "-9223372036854775808ms"),
            (i64::MAX, "9223372036854775807ms"),
        ];
        for (ms, shown) in cases {
            assert_eq!(UtcMillis::from_millis(ms).to_string(), shown, "{ms}");
        }
    }

    #[test]
    fn round_trips_through_system_time() {
        for ms in [-5_000, 0, 1, 1_764_460_800_000] {
            let t = UtcMillis::from_millis(ms);
            assert_eq!(UtcMillis::try_from(t.to_system_time()).unwrap(), t);
        }
    }
}
