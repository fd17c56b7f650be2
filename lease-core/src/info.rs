//! Reading leases: one row as the database sees it now.

use std::fmt;
use std::time::Duration;

use crate::time::UtcMillis;

/// One lease's row, read with the database's clock: who holds the name (the
/// process, never its token), the term, and the scheduler's three instants.
///
/// Returned by [`Leases::get`](crate::Leases::get) and
/// [`Leases::list`](crate::Leases::list), and by the
/// [`LeaseStore::get`](crate::LeaseStore::get) and
/// [`LeaseStore::list`](crate::LeaseStore::list) a backend implements. It
/// carries no holder token at all: the token is the credential of a tenure,
/// and a row read for an operator or a log must not hand it out. Its `Debug`
/// and `Display` are therefore safe to log.
///
/// `now_ms` is the database's clock when the row was read: whether the lease
/// is [`held`](LeaseInfo::held) and its [`time_left`](LeaseInfo::time_left)
/// are judged by it, never by the process's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseInfo {
    /// The name.
    pub name: String,
    /// The instance id of the process that claimed it last (it may have
    /// released it or let it expire since).
    pub instance: String,
    /// The term of the last claim: 1 for the first, one more at every change
    /// of hands.
    pub term: u64,
    /// When the lease expires, in UTC ms by the database clock; 0 once
    /// released.
    pub expires_at_ms: i64,
    /// The database's clock as the row was read, in UTC ms.
    pub now_ms: i64,
    /// The last instant on record under the name (a scheduler's); 0 if none.
    pub slot_ms: i64,
    /// That instant again while its round has not run to its end, else 0.
    pub unfinished_slot_ms: i64,
    /// The last instant claimed a second time; 0 if none.
    pub rerun_slot_ms: i64,
}

/// Whether a lease is held, free after its expiry, or given back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LeaseState {
    /// Someone holds it: it expires after the database's now.
    Held,
    /// Its lease ran out and nobody has claimed it since.
    Expired,
    /// Its holder gave it back (release, or the finish of a round).
    Released,
}

impl fmt::Display for LeaseState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LeaseState::Held => "held",
            LeaseState::Expired => "expired",
            LeaseState::Released => "released",
        })
    }
}

impl LeaseInfo {
    /// Whether someone holds the name now, by the database's clock.
    #[must_use]
    pub fn held(&self) -> bool {
        self.expires_at_ms > self.now_ms
    }

    /// Held, expired or released.
    #[must_use]
    pub fn state(&self) -> LeaseState {
        if self.held() {
            LeaseState::Held
        } else if self.expires_at_ms == 0 {
            LeaseState::Released
        } else {
            LeaseState::Expired
        }
    }

    /// How long the lease has left by the database's clock as it was read;
    /// zero when it is not held.
    #[must_use]
    pub fn time_left(&self) -> Duration {
        let left = self.expires_at_ms.saturating_sub(self.now_ms);
        Duration::from_millis(u64::try_from(left).unwrap_or(0))
    }

    /// When the lease expires (expired) by the database clock, or `None`
    /// once it was given back.
    #[must_use]
    pub fn expires_at(&self) -> Option<UtcMillis> {
        (self.expires_at_ms != 0).then_some(UtcMillis::from_millis(self.expires_at_ms))
    }

    /// The last instant on record under the name, for a scheduler's job.
    #[must_use]
    pub fn last_instant(&self) -> Option<UtcMillis> {
        (self.slot_ms != 0).then_some(UtcMillis::from_millis(self.slot_ms))
    }

    /// The instant whose round has not run to its end, if any: it is being
    /// run now (the lease is held), or it was cut short.
    #[must_use]
    pub fn unfinished_instant(&self) -> Option<UtcMillis> {
        (self.unfinished_slot_ms != 0 && self.unfinished_slot_ms == self.slot_ms)
            .then_some(UtcMillis::from_millis(self.unfinished_slot_ms))
    }
}

impl fmt::Display for LeaseInfo {
    /// `"lock:report" held by web-1 (term 3, 12.3s left)`: name escaped, no
    /// token.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.state() {
            LeaseState::Held => write!(
                f,
                "{:?} held by {:?} (term {}, {:.1?} left)",
                self.name,
                self.instance,
                self.term,
                self.time_left()
            ),
            state => write!(
                f,
                "{:?} {state} (term {}, last held by {:?})",
                self.name, self.term, self.instance
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(expires_at_ms: i64, now_ms: i64) -> LeaseInfo {
        LeaseInfo {
            name: "lock:a\nb".into(),
            instance: "web-1".into(),
            term: 3,
            expires_at_ms,
            now_ms,
            slot_ms: 0,
            unfinished_slot_ms: 0,
            rerun_slot_ms: 0,
        }
    }

    #[test]
    fn state_and_time_left_follow_the_database_clock() {
        let held = info(10_500, 10_000);
        assert_eq!(held.state(), LeaseState::Held);
        assert!(held.held());
        assert_eq!(held.time_left(), Duration::from_millis(500));
        let at_expiry = info(10_000, 10_000);
        assert_eq!(at_expiry.state(), LeaseState::Expired, "expiry is <= now");
        assert_eq!(at_expiry.time_left(), Duration::ZERO);
        let released = info(0, 10_000);
        assert_eq!(released.state(), LeaseState::Released);
        assert_eq!(released.expires_at(), None);
    }

    #[test]
    fn display_escapes_the_name() {
        let shown = info(10_500, 10_000).to_string();
        assert_eq!(
            shown,
            r#""lock:a\nb" held by "web-1" (term 3, 500.0ms left)"#
        );
        assert!(!shown.contains('\n'));
    }

    #[test]
    fn unfinished_only_when_it_is_the_last_instant() {
        let mut i = info(0, 1);
        i.slot_ms = 2_000;
        i.unfinished_slot_ms = 1_000;
        assert_eq!(
            i.unfinished_instant(),
            None,
            "settled: a later instant was claimed"
        );
        i.unfinished_slot_ms = 2_000;
        assert_eq!(i.unfinished_instant(), Some(UtcMillis::from_millis(2_000)));
        assert_eq!(i.last_instant(), Some(UtcMillis::from_millis(2_000)));
    }
}
