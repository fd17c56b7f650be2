//! The scheduler's clock: the database's, carried forward by the monotonic
//! clock between readings. The one module of the crate that reads time.

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use lease_core::{Leases, UtcMillis};
use tokio::time::Instant;

/// The time of day the scheduler computes instants by.
///
/// Read off the database (the clock the leases expire by, so that every
/// replica computes the same instants whatever its own clock says) as the
/// scheduler starts and at every rerun sweep, and carried forward between
/// readings by Tokio's monotonic clock. A reading that moves it back does not
/// make a job repeat an instant: each job remembers the last instant it
/// handled.
#[derive(Debug)]
pub(crate) struct Clock {
    anchor: Mutex<Anchor>,
}

#[derive(Debug, Clone, Copy)]
struct Anchor {
    at: Instant,
    ms: i64,
}

impl Clock {
    /// A clock on the process's own wall clock, until the database is read.
    pub(crate) fn from_process() -> Self {
        let ms = UtcMillis::try_from(SystemTime::now()).map_or(0, UtcMillis::as_millis);
        Clock {
            anchor: Mutex::new(Anchor {
                at: Instant::now(),
                ms,
            }),
        }
    }

    fn anchor(&self) -> Anchor {
        match self.anchor.lock() {
            Ok(a) => *a,
            Err(poisoned) => *poisoned.into_inner(),
        }
    }

    /// Reads the database's clock and carries it forward from the middle of
    /// the round trip.
    pub(crate) async fn sync(&self, leases: &Leases) -> lease_core::Result<()> {
        let before = Instant::now();
        let now = leases.now().await?;
        let after = Instant::now();
        let at = before + (after - before) / 2;
        let anchor = Anchor {
            at,
            ms: now.as_millis(),
        };
        match self.anchor.lock() {
            Ok(mut a) => *a = anchor,
            Err(poisoned) => *poisoned.into_inner() = anchor,
        }
        Ok(())
    }

    /// Now.
    pub(crate) fn now(&self) -> UtcMillis {
        let a = self.anchor();
        let elapsed = i64::try_from(a.at.elapsed().as_millis()).unwrap_or(i64::MAX);
        UtcMillis::from_millis(a.ms.saturating_add(elapsed))
    }

    /// The monotonic instant at which `t` comes (now, if it has).
    pub(crate) fn deadline(&self, t: UtcMillis) -> Instant {
        let a = self.anchor();
        let ahead = t.as_millis().saturating_sub(a.ms);
        let now = Instant::now();
        match u64::try_from(ahead) {
            Ok(ms) => (a.at + Duration::from_millis(ms)).max(now),
            Err(_) => now,
        }
    }

    /// Sleeps until `t` has come by this clock (a new reading may move it).
    pub(crate) async fn sleep_until(&self, t: UtcMillis) {
        while self.now() < t {
            tokio::time::sleep_until(self.deadline(t)).await;
        }
    }
}
