//! The events of a soak run: one JSON line each.
//!
//! Every time is the **database's** clock in UTC milliseconds, or a bound on
//! it (lease-bench's `clock` module): a lower bound where the checker needs
//! something to have happened no earlier (a claim, the start of the work),
//! an upper bound where it needs something to have happened no later (the
//! end of the work).
//!
//! A contender writes [`Event::Try`] before it sends a claim of any kind, and
//! then exactly one of [`Event::Refused`], [`Event::Failed`] (the outcome is
//! unknown: the claim may have taken effect with a token nobody knows) or
//! [`Event::Claim`]; a claim is followed by [`Event::Stop`] once the work
//! under it has ended. For the capabilities (lock, leader, scheduler), which
//! claim by themselves, the store under them writes the attempt and a
//! refusal or failure, and their work writes the claim and the stop; an
//! attempt that claimed but whose work never started stays without an
//! outcome, and counts as unknown (see
//! lease-bench's `soak::recorder`). The soak's orchestrator adds [`Event::Killed`] for a
//! process it killed (its tenures still open end there) and [`Event::Fault`]
//! for the record.

use std::collections::BTreeMap;
use std::fmt;

use crate::json::{ObjectWriter, ParseError, Value, parse_object};

/// How a tenure ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopCause {
    /// The work ran to its end (or chose to stop) and the holder let go.
    Done,
    /// The lease was lost: the context ended with a loss.
    Lost,
    /// The process was shutting down.
    Shutdown,
}

impl StopCause {
    /// The word in the history.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            StopCause::Done => "done",
            StopCause::Lost => "lost",
            StopCause::Shutdown => "shutdown",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "done" => Some(StopCause::Done),
            "lost" => Some(StopCause::Lost),
            "shutdown" => Some(StopCause::Shutdown),
            _ => None,
        }
    }
}

/// One line of the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A claim (plain, of an instant, or a second claim of an instant) is
    /// about to be sent.
    Try {
        /// The name.
        name: String,
        /// The process.
        instance: String,
        /// The attempt's number within the process.
        seq: u64,
        /// A lower bound on when the claim runs on the database.
        sent_ms: i64,
    },
    /// The claim was refused: nothing changed.
    Refused {
        /// The process.
        instance: String,
        /// The attempt.
        seq: u64,
    },
    /// The claim failed (an error or a timeout): it may or may not have
    /// taken effect.
    Failed {
        /// The process.
        instance: String,
        /// The attempt.
        seq: u64,
    },
    /// The claim succeeded: a tenure starts.
    Claim {
        /// The name.
        name: String,
        /// The process.
        instance: String,
        /// The attempt.
        seq: u64,
        /// The term the claim started.
        term: u64,
        /// The instant claimed, for a scheduler's claim.
        slot: Option<i64>,
        /// Whether this is the second claim of the instant.
        rerun: bool,
        /// A lower bound on when the work under the lease started (the
        /// database's clock read after the claim returned, before the work).
        claim_ms: i64,
    },
    /// The work under a tenure has ended.
    Stop {
        /// The name.
        name: String,
        /// The process.
        instance: String,
        /// The attempt whose claim started the tenure.
        seq: u64,
        /// The tenure's term.
        term: u64,
        /// An upper bound on when the work ended (read after its task ended).
        stop_ms: i64,
        /// Why.
        cause: StopCause,
    },
    /// The end of an instant's round is recorded in the database: the
    /// instant must never run again.
    Finished {
        /// The process.
        instance: String,
        /// The attempt whose claim started the round.
        seq: u64,
    },
    /// The orchestrator killed the process (`SIGKILL`) and saw it die.
    Killed {
        /// The process.
        instance: String,
        /// An upper bound on when it died.
        at_ms: i64,
    },
    /// A fault the orchestrator injected, for the record.
    Fault {
        /// What: `pause`, `resume`, `cut`, `stall`, `kill`.
        kind: String,
        /// The process it hit, or `*`.
        instance: String,
        /// When, roughly.
        at_ms: i64,
    },
}

impl Event {
    /// The event as one JSON line (without the newline).
    #[must_use]
    pub fn to_line(&self) -> String {
        let w = ObjectWriter::new();
        match self {
            Event::Try {
                name,
                instance,
                seq,
                sent_ms,
            } => w
                .str("ev", "try")
                .str("name", name)
                .str("instance", instance)
                .int("seq", as_i64(*seq))
                .int("sent_ms", *sent_ms),
            Event::Refused { instance, seq } => w
                .str("ev", "refused")
                .str("instance", instance)
                .int("seq", as_i64(*seq)),
            Event::Failed { instance, seq } => w
                .str("ev", "failed")
                .str("instance", instance)
                .int("seq", as_i64(*seq)),
            Event::Claim {
                name,
                instance,
                seq,
                term,
                slot,
                rerun,
                claim_ms,
            } => w
                .str("ev", "claim")
                .str("name", name)
                .str("instance", instance)
                .int("seq", as_i64(*seq))
                .int("term", as_i64(*term))
                .opt_int("slot", *slot)
                .bool("rerun", *rerun)
                .int("claim_ms", *claim_ms),
            Event::Stop {
                name,
                instance,
                seq,
                term,
                stop_ms,
                cause,
            } => w
                .str("ev", "stop")
                .str("name", name)
                .str("instance", instance)
                .int("seq", as_i64(*seq))
                .int("term", as_i64(*term))
                .int("stop_ms", *stop_ms)
                .str("cause", cause.as_str()),
            Event::Finished { instance, seq } => w
                .str("ev", "finished")
                .str("instance", instance)
                .int("seq", as_i64(*seq)),
            Event::Killed { instance, at_ms } => w
                .str("ev", "killed")
                .str("instance", instance)
                .int("at_ms", *at_ms),
            Event::Fault {
                kind,
                instance,
                at_ms,
            } => w
                .str("ev", "fault")
                .str("kind", kind)
                .str("instance", instance)
                .int("at_ms", *at_ms),
        }
        .finish()
    }

    /// Reads an event from one line.
    ///
    /// # Errors
    ///
    /// [`HistoryError`] when the line is not a flat JSON object, or not an
    /// event.
    pub fn from_line(line: &str) -> Result<Event, HistoryError> {
        let map = parse_object(line).map_err(HistoryError::Json)?;
        let f = Fields(&map);
        let ev = f.str("ev")?;
        Ok(match ev.as_str() {
            "try" => Event::Try {
                name: f.str("name")?,
                instance: f.str("instance")?,
                seq: f.uint("seq")?,
                sent_ms: f.int("sent_ms")?,
            },
            "refused" => Event::Refused {
                instance: f.str("instance")?,
                seq: f.uint("seq")?,
            },
            "failed" => Event::Failed {
                instance: f.str("instance")?,
                seq: f.uint("seq")?,
            },
            "claim" => Event::Claim {
                name: f.str("name")?,
                instance: f.str("instance")?,
                seq: f.uint("seq")?,
                term: f.uint("term")?,
                slot: f.opt_int("slot")?,
                rerun: f.bool("rerun")?,
                claim_ms: f.int("claim_ms")?,
            },
            "stop" => Event::Stop {
                name: f.str("name")?,
                instance: f.str("instance")?,
                seq: f.uint("seq")?,
                term: f.uint("term")?,
                stop_ms: f.int("stop_ms")?,
                cause: StopCause::parse(&f.str("cause")?).ok_or(HistoryError::Field("cause"))?,
            },
            "finished" => Event::Finished {
                instance: f.str("instance")?,
                seq: f.uint("seq")?,
            },
            "killed" => Event::Killed {
                instance: f.str("instance")?,
                at_ms: f.int("at_ms")?,
            },
            "fault" => Event::Fault {
                kind: f.str("kind")?,
                instance: f.str("instance")?,
                at_ms: f.int("at_ms")?,
            },
            _ => return Err(HistoryError::Field("ev")),
        })
    }
}

fn as_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

struct Fields<'a>(&'a BTreeMap<String, Value>);

impl Fields<'_> {
    fn str(&self, key: &'static str) -> Result<String, HistoryError> {
        match self.0.get(key) {
            Some(Value::Str(s)) => Ok(s.clone()),
            _ => Err(HistoryError::Field(key)),
        }
    }

    fn int(&self, key: &'static str) -> Result<i64, HistoryError> {
        match self.0.get(key) {
            Some(Value::Int(v)) => Ok(*v),
            _ => Err(HistoryError::Field(key)),
        }
    }

    fn uint(&self, key: &'static str) -> Result<u64, HistoryError> {
        u64::try_from(self.int(key)?).map_err(|_| HistoryError::Field(key))
    }

    fn opt_int(&self, key: &'static str) -> Result<Option<i64>, HistoryError> {
        match self.0.get(key) {
            Some(Value::Int(v)) => Ok(Some(*v)),
            Some(Value::Null) | None => Ok(None),
            _ => Err(HistoryError::Field(key)),
        }
    }

    fn bool(&self, key: &'static str) -> Result<bool, HistoryError> {
        match self.0.get(key) {
            Some(Value::Bool(v)) => Ok(*v),
            _ => Err(HistoryError::Field(key)),
        }
    }
}

/// A line of a history that is not an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HistoryError {
    /// Not a flat JSON object.
    Json(ParseError),
    /// A field is missing or of the wrong kind.
    Field(&'static str),
}

impl fmt::Display for HistoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HistoryError::Json(_) => f.write_str("not a flat JSON object"),
            HistoryError::Field(key) => write!(f, "field {key:?} is missing or malformed"),
        }
    }
}

impl std::error::Error for HistoryError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HistoryError::Json(e) => Some(e),
            HistoryError::Field(_) => None,
        }
    }
}

/// Reads a whole history, one event per non-empty line.
///
/// # Errors
///
/// The first line that is not an event, with its (1-based) number.
pub fn parse_history(text: &str) -> Result<Vec<Event>, (usize, HistoryError)> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| Event::from_line(l).map_err(|e| (i + 1, e)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_round_trips() {
        let events = vec![
            Event::Try {
                name: "soak:a".into(),
                instance: "p1".into(),
                seq: 3,
                sent_ms: 1_700_000_000_000,
            },
            Event::Refused {
                instance: "p1".into(),
                seq: 3,
            },
            Event::Failed {
                instance: "p1".into(),
                seq: 4,
            },
            Event::Claim {
                name: "soak:a".into(),
                instance: "p1".into(),
                seq: 5,
                term: 9,
                slot: Some(1_700_000_000_500),
                rerun: true,
                claim_ms: 1_700_000_000_010,
            },
            Event::Stop {
                name: "soak:a".into(),
                instance: "p1".into(),
                seq: 5,
                term: 9,
                stop_ms: 1_700_000_000_900,
                cause: StopCause::Lost,
            },
            Event::Finished {
                instance: "p1".into(),
                seq: 5,
            },
            Event::Killed {
                instance: "p2".into(),
                at_ms: 5,
            },
            Event::Fault {
                kind: "pause".into(),
                instance: "*".into(),
                at_ms: 6,
            },
        ];
        let text: String = events.iter().map(|e| e.to_line() + "\n").collect();
        assert_eq!(parse_history(&text).unwrap(), events);
    }

    #[test]
    fn a_bad_line_is_named() {
        let err =
            parse_history("{\"ev\":\"refused\",\"instance\":\"p\",\"seq\":1}\n\n{\"ev\":\"nope\"}")
                .unwrap_err();
        assert_eq!(err, (3, HistoryError::Field("ev")));
    }
}
