//! The errors of the scheduler.

use std::fmt;
use std::time::Duration;

/// What can go wrong with a [`Scheduler`](crate::Scheduler): a job that
/// cannot be registered (found when the scheduler is built, before anything
/// runs), a database that cannot be reached as it starts, or rounds still
/// running when the shutdown wait ran out.
///
/// What happens to a single round (refused, failed, cut short, the database
/// not answering its claim) is not an error of the scheduler: it is logged
/// (see the crate docs' table of events), and the scheduler goes on.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A job was registered with an empty name.
    #[error("a scheduler job needs a name: the empty name was registered")]
    EmptyName,

    /// Two jobs were registered under one name.
    #[error("two scheduler jobs are named {job:?}: each job needs a name of its own")]
    DuplicateName {
        /// The name registered twice.
        job: String,
    },

    /// The job's lease name (`cron:` and the job's name) is longer than a
    /// lease name can be.
    #[error(
        "scheduler job {job:?}: its lease name {lease_name:?} is {len} bytes long, \
         over the limit of {max} bytes"
    )]
    NameTooLong {
        /// The job's name.
        job: String,
        /// The start of the lease name, to recognise it by.
        lease_name: String,
        /// The lease name's length in bytes.
        len: usize,
        /// The limit, [`lease_core::MAX_NAME_BYTES`].
        max: usize,
    },

    /// The job's schedule cannot be read.
    #[error("scheduler job {job:?}: cannot read the schedule {schedule:?}")]
    InvalidSchedule {
        /// The job's name.
        job: String,
        /// The schedule as given.
        schedule: String,
        /// What is wrong with it.
        #[source]
        source: ScheduleError,
    },

    /// The database did not answer as the scheduler started: a deployment
    /// that cannot coordinate fails at startup instead of running as if it
    /// were alone.
    #[error("the scheduler could not reach the lease database as it started")]
    Unavailable(#[source] lease_core::Error),

    /// Rounds were still running when the wait given to
    /// [`Scheduler::run`](crate::Scheduler::run) ran out after the shutdown.
    /// Their tasks were aborted and their leases left to expire: the
    /// instants stay unfinished, and a peer runs them again once.
    #[error("rounds of {jobs:?} were still running {waited:?} after the shutdown: aborted")]
    ShutdownTimedOut {
        /// The jobs whose rounds were still running.
        jobs: Vec<String>,
        /// The wait that ran out.
        waited: Duration,
    },
}

impl fmt::Debug for Error {
    /// The message and its causes on one line, as
    /// [`Chain`](lease_core::Chain) shows them: what a `main` returning the
    /// error prints.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&lease_core::Chain(self), f)
    }
}

/// Why a schedule cannot be read.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// The expression is empty.
    #[error("the schedule is empty")]
    Empty,

    /// The cron parser refused the expression.
    #[error(
        "not a cron expression (six fields with seconds first, five fields, \
         or a descriptor such as @hourly): {message}"
    )]
    Cron {
        /// What the parser said.
        message: String,
    },

    /// The expression parses, but no instant ever matches it (`0 0 30 2 *`).
    #[error("no instant ever matches the schedule")]
    NeverComes,

    /// `@every` was not followed by a period the scheduler can read.
    #[error(
        "@every needs a period such as 90s, 5m, 1h30m or 500ms (units ms, s, m, h, d), not {period:?}"
    )]
    Period {
        /// The period as given.
        period: String,
    },

    /// `@every` was given a period of zero, or one too long to count.
    #[error(
        "@every needs a period longer than zero and shorter than 290 million years, not {period:?}"
    )]
    ZeroPeriod {
        /// The period as given.
        period: String,
    },

    /// The time zone is not an IANA name this build knows.
    #[error("unknown time zone {zone:?}: expected an IANA name such as Europe/Berlin or UTC")]
    UnknownTimeZone {
        /// The zone as given.
        zone: String,
    },

    /// The expression's `CRON_TZ=` prefix and the job's time zone option
    /// name different zones.
    #[error(
        "the schedule names the time zone {in_expression:?} and the job's option {option:?}: \
         give one"
    )]
    ConflictingTimeZones {
        /// The zone the expression names.
        in_expression: String,
        /// The zone the job's option names.
        option: String,
    },
}

impl fmt::Debug for ScheduleError {
    /// The message, on one line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `?` out of a `main` returning `Box<dyn Error>` prints: the
    /// message and its cause on one line, no struct dump.
    #[test]
    fn debug_is_the_message_and_its_causes_on_one_line() {
        let err = Error::InvalidSchedule {
            job: "report".into(),
            schedule: "@every never".into(),
            source: ScheduleError::Period {
                period: "never".into(),
            },
        };
        let boxed: Box<dyn std::error::Error> = err.into();
        assert_eq!(
            format!("{boxed:?}"),
            "scheduler job \"report\": cannot read the schedule \"@every never\": @every needs a \
             period such as 90s, 5m, 1h30m or 500ms (units ms, s, m, h, d), not \"never\""
        );
        let err = Error::ShutdownTimedOut {
            jobs: vec!["report".into()],
            waited: Duration::from_secs(30),
        };
        assert_eq!(format!("{err:?}"), err.to_string());
        let zone = ScheduleError::UnknownTimeZone {
            zone: "Mars/Olympus".into(),
        };
        assert_eq!(format!("{zone:?}"), zone.to_string());
    }
}
