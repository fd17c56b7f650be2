//! The protocol's timings, as a value.

use std::time::Duration;

use crate::error::Error;

/// How long a lease lasts, how often its holder renews it, when the holder
/// gives itself up, and how long work has to stop after a loss.
///
/// The defaults are the protocol's: a lease lasts 15 s from the database's
/// now, its holder renews every 2 s, gives itself up 10 s after the start of
/// the last successful renewal (5 s before the database lets anyone else
/// claim the name), and work under a lost lease has 5 s to return.
///
/// Tests play the protocol out in milliseconds with the same code:
///
/// ```
/// use std::time::Duration;
/// use lease_core::Timings;
///
/// let fast = Timings::builder()
///     .lease(Duration::from_millis(600))
///     .renew(Duration::from_millis(50))
///     .deadline(Duration::from_millis(300))
///     .grace(Duration::from_millis(100))
///     .build()?;
/// assert_eq!(fast.lease(), Duration::from_millis(600));
///
/// // A holder must give itself up before the database frees its name.
/// let err = Timings::builder().deadline(Duration::from_secs(20)).build().unwrap_err();
/// assert!(err.to_string().contains("deadline"));
/// # Ok::<(), lease_core::Error>(())
/// ```
///
/// # The rules
///
/// [`TimingsBuilder::build`] **refuses**:
///
/// - a lease under 1 ms or over [`MAX_LEASE`](Timings::MAX_LEASE) (100 years: every
///   backend computes `now + lease` in signed 64-bit milliseconds, and the lease is
///   counted in whole milliseconds);
/// - a renew interval under 1 ms (the database's clock counts milliseconds: a
///   shorter cadence only spins);
/// - a renew interval not shorter than the local deadline (the holder would give
///   itself up before its first renewal);
/// - a local deadline not shorter than the lease (a holder that cannot renew would
///   still believe it holds the name when the database lets another claim it).
///
/// It also **refuses** what would let a holder act beside its successor, unless the
/// caller accepts that [`Risk`] by name with [`TimingsBuilder::accept_risk`] (a
/// test that plays the protocol out in milliseconds, say):
///
/// - [`Risk::NarrowMargin`]: a step-down margin, lease − deadline, under a
///   hundredth of the lease. The holder counts its deadline on its own clock and
///   the database its expiry on another; clocks slewed by NTP may each run up to
///   0.05 % off, and the holder's runtime must be scheduled to step down, so the
///   margin must leave room for both;
/// - [`Risk::GraceOutlastsMargin`]: a grace longer than the margin: work that
///   ignores a loss at the deadline could run on beside its successor for
///   grace − margin before it is aborted;
/// - [`Risk::NoGrace`]: a zero grace: work under a lost lease would be aborted
///   at once, mid-statement, with no moment to roll back or stop, and work that
///   blocks would end the process through the fail hook at every loss.
///
/// It **warns** (a `tracing` warning, and [`concerns`](Timings::concerns)) when the
/// margin is shorter than the statement timeout: a statement the holder sent just
/// before its deadline may still be running on the server when the database frees
/// the name. That does not let work act beside a successor (a guarded transaction
/// keeps the successor's claim waiting on its row lock, and plain writes are not
/// fenced at all), so it is a concern, not a refusal.
///
/// The defaults (margin 5 s, statement timeout 5 s, grace 5 s) meet every rule.
///
/// ```
/// use std::time::Duration;
/// use lease_core::{Risk, Timings};
///
/// // A 1 ms margin for a 15 s lease: refused, naming the rule.
/// let narrow = Timings::builder().deadline(Duration::from_millis(14_999));
/// let err = narrow.clone().grace(Duration::from_millis(1)).build().unwrap_err();
/// assert!(err.to_string().contains("hundredth of the lease"), "{err}");
/// // A test may accept it, by name.
/// let fast = narrow
///     .grace(Duration::from_millis(1))
///     .accept_risk(Risk::NarrowMargin)
///     .build()?;
/// assert_eq!(fast.deadline(), Duration::from_millis(14_999));
/// # Ok::<(), lease_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Timings {
    lease: Duration,
    renew: Duration,
    deadline: Duration,
    grace: Duration,
}

/// A rule of [`Timings`] that keeps a holder from acting beside its
/// successor, which [`TimingsBuilder::build`] refuses to break unless the
/// caller accepts it by name ([`TimingsBuilder::accept_risk`]): for tests
/// that play the protocol out in milliseconds, never for a deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Risk {
    /// The step-down margin (lease − deadline) is under a hundredth of the
    /// lease: no room for the two clocks' rates to differ, nor for the
    /// holder's runtime to be scheduled at its deadline.
    NarrowMargin,
    /// The grace is longer than the step-down margin: work that ignores a
    /// loss may run beside its successor for grace − margin.
    GraceOutlastsMargin,
    /// The grace is zero: work under a lost lease is aborted at once, and
    /// blocking work ends the process at every loss.
    NoGrace,
}

impl Risk {
    const ALL: [Risk; 3] = [Risk::NarrowMargin, Risk::GraceOutlastsMargin, Risk::NoGrace];

    fn bit(self) -> u8 {
        match self {
            Risk::NarrowMargin => 1,
            Risk::GraceOutlastsMargin => 2,
            Risk::NoGrace => 4,
        }
    }

    /// Whether `timings` take this risk, and if so what it is, in words.
    fn taken_by(self, t: &Timings) -> Option<String> {
        let margin = t.lease.saturating_sub(t.deadline);
        match self {
            Risk::NarrowMargin if margin < t.lease / 100 => Some(format!(
                "the step-down margin (lease {:?} - deadline {:?} = {margin:?}) is under a \
                 hundredth of the lease: it leaves no room for the holder's and the \
                 database's clocks to run at different rates, nor for the holder to be \
                 scheduled at its deadline",
                t.lease, t.deadline
            )),
            Risk::GraceOutlastsMargin if t.grace > margin => Some(format!(
                "the grace ({:?}) outlasts the step-down margin (lease {:?} - deadline {:?} = \
                 {margin:?}): work that ignores a loss could run beside its successor for up \
                 to {:?}",
                t.grace,
                t.lease,
                t.deadline,
                t.grace - margin
            )),
            Risk::NoGrace if t.grace.is_zero() => Some(
                "the grace is zero: work under a lost lease would be aborted at once, \
                 mid-statement, and work that blocks would end the process at every loss"
                    .to_owned(),
            ),
            _ => None,
        }
    }
}

/// The shortest bound on a protocol statement outside of a renewal.
const MIN_STATEMENT_TIMEOUT: Duration = Duration::from_secs(1);

impl Timings {
    /// The protocol's lease duration: 15 s.
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(15);
    /// The protocol's renew interval: 2 s.
    pub const DEFAULT_RENEW: Duration = Duration::from_secs(2);
    /// The protocol's local deadline: 10 s.
    pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(10);
    /// The protocol's step-down grace: 5 s.
    pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);
    /// The longest lease [`TimingsBuilder::build`] accepts: 100 years, far
    /// inside the signed 64-bit milliseconds every backend computes
    /// `now + lease` in.
    pub const MAX_LEASE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    /// The shortest renew interval [`TimingsBuilder::build`] accepts: the
    /// database's clock counts milliseconds.
    pub const MIN_RENEW: Duration = Duration::from_millis(1);

    /// What in these timings keeps the protocol's promises only narrowly (see
    /// the rules above), a [`Risk`] accepted included; empty for the
    /// defaults. [`TimingsBuilder::build`] logs each as a warning.
    #[must_use]
    pub fn concerns(&self) -> Vec<String> {
        let margin = self.lease.saturating_sub(self.deadline);
        let mut concerns = Vec::new();
        if margin < self.statement_timeout() {
            concerns.push(format!(
                "the step-down margin (lease {:?} - deadline {:?} = {margin:?}) is shorter than \
                 the statement timeout ({:?}): a statement sent just before the deadline may \
                 still run when the database frees the name",
                self.lease,
                self.deadline,
                self.statement_timeout()
            ));
        }
        concerns.extend(Risk::ALL.iter().filter_map(|risk| risk.taken_by(self)));
        concerns
    }

    /// A builder starting from the defaults.
    pub fn builder() -> TimingsBuilder {
        TimingsBuilder {
            timings: Timings::default(),
            accepted: 0,
        }
    }

    /// How long a claim or a renewal keeps the name, from the database's now.
    #[must_use]
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// The lease duration in whole milliseconds, as the statements take it.
    #[must_use]
    pub fn lease_ms(&self) -> i64 {
        i64::try_from(self.lease.as_millis()).unwrap_or(i64::MAX)
    }

    /// How long after the start of one renewal attempt the next is due (a
    /// failed one included).
    #[must_use]
    pub fn renew(&self) -> Duration {
        self.renew
    }

    /// How long after the start of the last successful renewal (or the claim)
    /// the holder gives itself up.
    #[must_use]
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// How long work under a lost lease has to return before it is aborted.
    #[must_use]
    pub fn grace(&self) -> Duration {
        self.grace
    }

    /// How soon a caller tries again after the database failed to answer: the
    /// cadence the protocol already keeps against it (the renew interval),
    /// which a caller waiting for the same database has no reason to beat.
    #[must_use]
    pub fn retry_interval(&self) -> Duration {
        self.renew
    }

    /// How far the database's clock may run ahead of the holder's between
    /// two renewals before the holder steps down
    /// ([`LostCause::ClockJump`](crate::LostCause::ClockJump)): half the
    /// step-down margin, lease − deadline (2.5 s with the defaults).
    ///
    /// Why half the margin: the database judges expiry by its own clock, so
    /// a forward step of `J` on the server brings the current lease's end
    /// `J` closer in real time, while the holder still counts its deadline
    /// on its own monotonic clock. The margin (lease − deadline) is what
    /// keeps the holder's step-down ahead of the database's expiry; a jump
    /// that leaves less than half of it is one the holder does not wait to
    /// be surprised by again. The comparison cannot be fooled by latency:
    /// the database's now of a renewal lies between the start and the end
    /// of the attempt on the holder's clock, so the database's elapsed time
    /// between two renewals can exceed the holder's (from the start of the
    /// first to the end of the second) only if the database's clock moved
    /// faster.
    ///
    /// What a check at renewals cannot see: a jump larger than lease −
    /// renew frees the name on the database before the holder's next
    /// renewal could notice, and a rival's claim in that window succeeds
    /// while the holder still works. Keep servers' clocks slewed, never
    /// stepped (see the crate docs on clocks).
    #[must_use]
    pub fn clock_jump_bound(&self) -> Duration {
        self.lease.saturating_sub(self.deadline) / 2
    }

    /// The bound on each of the protocol's own statements outside a renewal:
    /// half the local deadline, never under 1 s. A caller with a deadline of
    /// its own bounds the call further by dropping its future (every call is
    /// cancel safe). A renewal is bounded tighter still: by half the local
    /// deadline and never past the deadline itself.
    #[must_use]
    pub fn statement_timeout(&self) -> Duration {
        (self.deadline / 2).max(MIN_STATEMENT_TIMEOUT)
    }

    /// The bound on waiting for a row lock (or SQLite's write lock) inside
    /// one of the protocol's statements: three fifths of the
    /// [statement timeout](Self::statement_timeout), in whole seconds
    /// (InnoDB counts it so), never under 1 s: 3 s with the defaults.
    ///
    /// It is under the statement timeout so that a claim queued behind a
    /// guarded transaction's row lock fails as a lock wait (an answer the
    /// protocol retries) before the statement itself is cut off. The
    /// backends' builders take it from here (`with_timings`): PostgreSQL's
    /// claims take no lock they wait on outside guarded transactions, so
    /// its statement timeout bounds the wait; MySQL and MariaDB set it as
    /// `innodb_lock_wait_timeout`; SQLite's busy timeout is the statement
    /// timeout, the one wait a SQLite call has.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lease_core::Timings;
    ///
    /// let t = Timings::default();
    /// assert_eq!(t.statement_timeout(), Duration::from_secs(5));
    /// assert_eq!(t.lock_wait_timeout(), Duration::from_secs(3));
    /// ```
    #[must_use]
    pub fn lock_wait_timeout(&self) -> Duration {
        let fifths = self.statement_timeout() * 3 / 5;
        Duration::from_secs(fifths.as_secs()).max(MIN_STATEMENT_TIMEOUT)
    }

    /// What a store whose server-side bounds come from these timings
    /// would do past a coordinator with `coordinator`'s timings, if
    /// anything: keep a statement (or a lock wait, or an idle guarded
    /// transaction) going at the server after that coordinator gave up on
    /// it. `None` when every bound of these timings is within the
    /// coordinator's: the server then gives up no later than the
    /// coordinator does (earlier costs a retry, never a statement running
    /// on unseen).
    ///
    /// ```
    /// use std::time::Duration;
    /// use lease_core::Timings;
    ///
    /// let store = Timings::default();
    /// let fast = Timings::builder()
    ///     .lease(Duration::from_secs(3))
    ///     .renew(Duration::from_millis(250))
    ///     .deadline(Duration::from_secs(2))
    ///     .grace(Duration::from_millis(500))
    ///     .build()?;
    /// assert!(store.bounds_outlast(&fast).is_some());
    /// assert!(fast.bounds_outlast(&store).is_none());
    /// assert!(store.bounds_outlast(&store).is_none());
    /// # Ok::<(), lease_core::Error>(())
    /// ```
    #[must_use]
    pub fn bounds_outlast(&self, coordinator: &Timings) -> Option<String> {
        let longer = [
            (
                "statement timeout",
                self.statement_timeout(),
                coordinator.statement_timeout(),
            ),
            (
                "lock wait",
                self.lock_wait_timeout(),
                coordinator.lock_wait_timeout(),
            ),
            (
                "idle guarded transaction (the local deadline)",
                self.deadline,
                coordinator.deadline,
            ),
        ]
        .into_iter()
        .filter(|(_, store, coordinator)| store > coordinator)
        .map(|(what, store, coordinator)| format!("{what} {store:?} > {coordinator:?}"))
        .collect::<Vec<_>>();
        (!longer.is_empty()).then(|| longer.join(", "))
    }

    fn check(self, accepted: u8) -> Result<Self, Error> {
        let lease_whole = Duration::from_millis(u64::try_from(self.lease_ms()).unwrap_or(0));
        let problem = if self.lease_ms() < 1 {
            Some(format!(
                "the lease ({:?}) must last at least 1 ms",
                self.lease
            ))
        } else if self.lease > Self::MAX_LEASE {
            Some(format!(
                "the lease ({:?}) must not exceed {:?}: the databases compute now + lease in \
                 signed 64-bit milliseconds",
                self.lease,
                Self::MAX_LEASE
            ))
        } else if self.renew < Self::MIN_RENEW {
            Some(format!(
                "the renew interval ({:?}) must be at least 1 ms: the database's clock counts \
                 milliseconds",
                self.renew
            ))
        } else if self.renew >= self.deadline {
            Some(format!(
                "the renew interval ({:?}) must be shorter than the local deadline ({:?}), \
                 or a holder would give itself up before its first renewal",
                self.renew, self.deadline
            ))
        } else if self.deadline >= lease_whole {
            Some(format!(
                "the local deadline ({:?}) must be shorter than the lease ({:?}), \
                 or a holder that cannot renew would still believe it holds the name \
                 when the database lets another process claim it",
                self.deadline, lease_whole
            ))
        } else {
            Risk::ALL.iter().find_map(|risk| {
                let taken = risk.taken_by(&self)?;
                (accepted & risk.bit() == 0).then(|| {
                    format!(
                        "{taken}; change the timings, or accept it by name with \
                         `accept_risk(Risk::{risk:?})` (tests only)"
                    )
                })
            })
        };
        match problem {
            Some(p) => Err(Error::InvalidTimings(p)),
            None => {
                for concern in self.concerns() {
                    tracing::warn!(%concern, "lease timings keep the protocol's promises narrowly");
                }
                Ok(self)
            }
        }
    }
}

impl Default for Timings {
    fn default() -> Self {
        Timings {
            lease: Self::DEFAULT_LEASE,
            renew: Self::DEFAULT_RENEW,
            deadline: Self::DEFAULT_DEADLINE,
            grace: Self::DEFAULT_GRACE,
        }
    }
}

/// Builds [`Timings`], refusing combinations that cannot keep the protocol's
/// promises: the renew interval must be shorter than the local deadline, and
/// the local deadline shorter than the lease.
#[derive(Debug, Clone)]
#[must_use]
pub struct TimingsBuilder {
    timings: Timings,
    /// The [`Risk`]s accepted by name, one bit each.
    accepted: u8,
}

impl TimingsBuilder {
    /// Sets the lease duration (default 15 s).
    pub fn lease(mut self, d: Duration) -> Self {
        self.timings.lease = d;
        self
    }

    /// Sets the renew interval (default 2 s).
    pub fn renew(mut self, d: Duration) -> Self {
        self.timings.renew = d;
        self
    }

    /// Sets the local deadline (default 10 s).
    pub fn deadline(mut self, d: Duration) -> Self {
        self.timings.deadline = d;
        self
    }

    /// Sets the step-down grace (default 5 s).
    pub fn grace(mut self, d: Duration) -> Self {
        self.timings.grace = d;
        self
    }

    /// Accepts `risk`: [`build`](Self::build) then lets timings that take it
    /// through, with a warning. For tests that play the protocol out in
    /// milliseconds; a deployment has no reason to.
    pub fn accept_risk(mut self, risk: Risk) -> Self {
        self.accepted |= risk.bit();
        self
    }

    /// Checks the combination.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTimings`] naming the rule that is broken: a lease under
    /// 1 ms, a zero renew interval, a renew interval not shorter than the
    /// deadline, a deadline not shorter than the lease, or a [`Risk`] not
    /// accepted.
    pub fn build(self) -> Result<Timings, Error> {
        self.timings.check(self.accepted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn defaults_are_the_protocols() {
        let t = Timings::default();
        assert_eq!(t.lease(), Duration::from_secs(15));
        assert_eq!(t.renew(), Duration::from_secs(2));
        assert_eq!(t.deadline(), Duration::from_secs(10));
        assert_eq!(t.grace(), Duration::from_secs(5));
        assert_eq!(t.lease_ms(), 15_000);
        assert_eq!(t.retry_interval(), Duration::from_secs(2));
        assert_eq!(t.statement_timeout(), Duration::from_secs(5));
        assert_eq!(t.lock_wait_timeout(), Duration::from_secs(3));
        assert_eq!(Timings::builder().build().unwrap(), t);
    }

    #[test]
    fn statement_timeout_is_half_the_deadline_but_never_under_a_second() {
        let t = Timings::builder()
            .lease(ms(600))
            .renew(ms(50))
            .deadline(ms(300))
            .grace(ms(100))
            .build()
            .unwrap();
        assert_eq!(t.statement_timeout(), Duration::from_secs(1));
        let t = Timings::builder()
            .lease(Duration::from_secs(60))
            .deadline(Duration::from_secs(30))
            .build()
            .unwrap();
        assert_eq!(t.statement_timeout(), Duration::from_secs(15));
    }

    #[test]
    fn lock_wait_is_under_the_statement_timeout_in_whole_seconds() {
        for (deadline_s, statement_s, lock_wait_s) in
            [(2, 1, 1), (4, 2, 1), (10, 5, 3), (20, 10, 6), (30, 15, 9)]
        {
            let t = Timings::builder()
                .lease(Duration::from_secs(deadline_s * 2))
                .renew(ms(500))
                .deadline(Duration::from_secs(deadline_s))
                .grace(ms(500))
                .build()
                .unwrap();
            assert_eq!(t.statement_timeout(), Duration::from_secs(statement_s));
            assert_eq!(
                t.lock_wait_timeout(),
                Duration::from_secs(lock_wait_s),
                "deadline {deadline_s} s"
            );
            assert!(t.lock_wait_timeout() <= t.statement_timeout());
        }
    }

    #[test]
    fn sub_millisecond_renewals_and_endless_leases_are_refused() {
        let err = Timings::builder()
            .lease(ms(600))
            .renew(Duration::from_micros(500))
            .deadline(ms(300))
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("at least 1 ms"), "{err}");
        let err = Timings::builder()
            .lease(Duration::from_secs(200 * 365 * 24 * 3600))
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("64-bit"), "{err}");
        assert!(Timings::builder().lease(Timings::MAX_LEASE).build().is_ok());
    }

    #[test]
    fn narrow_margins_are_concerns_and_the_defaults_have_none() {
        assert!(Timings::default().concerns().is_empty());
        let narrow = Timings::builder()
            .lease(ms(10_500))
            .grace(ms(400))
            .build()
            .unwrap();
        let concerns = narrow.concerns();
        assert_eq!(concerns.len(), 1, "{concerns:?}");
        assert!(concerns[0].contains("statement timeout"), "{concerns:?}");
    }

    #[test]
    fn each_risk_is_refused_naming_its_rule_unless_accepted_by_name() {
        let cases = [
            // A 1 ms margin for a 15 s lease (grace within it).
            (
                Timings::builder().deadline(ms(14_999)).grace(ms(1)),
                Risk::NarrowMargin,
                "hundredth of the lease",
            ),
            // A grace longer than the margin: the default 5 s over a 2 s margin.
            (
                Timings::builder().lease(ms(6_000)).deadline(ms(4_000)),
                Risk::GraceOutlastsMargin,
                "up to 3s",
            ),
            (
                Timings::builder().grace(Duration::ZERO),
                Risk::NoGrace,
                "grace is zero",
            ),
        ];
        for (builder, risk, words) in cases {
            let err = builder.clone().build().unwrap_err();
            assert!(matches!(err, Error::InvalidTimings(_)), "{risk:?}");
            let text = err.to_string();
            assert!(text.contains(words), "{risk:?}: {text}");
            assert!(
                text.contains(&format!("Risk::{risk:?}")),
                "{risk:?}: {text}"
            );
            let other = Risk::ALL.into_iter().find(|r| *r != risk).unwrap();
            assert!(
                builder.clone().accept_risk(other).build().is_err(),
                "{risk:?}: accepting another risk lets nothing through"
            );
            let accepted = builder.accept_risk(risk).build().unwrap();
            assert!(
                accepted.concerns().iter().any(|c| c.contains(words)),
                "{risk:?}: an accepted risk is still a concern"
            );
        }
    }

    #[test]
    fn renew_not_shorter_than_deadline_is_refused() {
        let err = Timings::builder()
            .renew(Duration::from_secs(10))
            .build()
            .unwrap_err();
        assert!(matches!(err, Error::InvalidTimings(_)));
        assert!(err.to_string().contains("renew interval"), "{err}");
    }

    #[test]
    fn deadline_not_shorter_than_lease_is_refused() {
        let err = Timings::builder()
            .deadline(Duration::from_secs(15))
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("local deadline"), "{err}");
    }

    #[test]
    fn deadline_is_compared_with_the_lease_in_whole_milliseconds() {
        // A lease of 3.5 ms lasts 3 ms in the table: a 3.2 ms deadline outlives it.
        let err = Timings::builder()
            .lease(Duration::from_micros(3_500))
            .renew(Duration::from_millis(1))
            .deadline(Duration::from_micros(3_200))
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("local deadline"), "{err}");
    }

    #[test]
    fn zero_durations_are_refused() {
        assert!(Timings::builder().lease(Duration::ZERO).build().is_err());
        assert!(Timings::builder().renew(Duration::ZERO).build().is_err());
        assert!(Timings::builder().deadline(Duration::ZERO).build().is_err());
    }
}
