//! Schedules: when a job's instants come.
//!
//! Cron expressions are parsed by [`croner`]; time zones come from
//! [`chrono_tz`] (the IANA database, compiled in). `@every` is counted from
//! the UNIX epoch, so every replica computes the same instants.

use std::fmt;
use std::str::FromStr as _;
use std::time::Duration;

use chrono::{DateTime, TimeZone as _, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use lease_core::UtcMillis;

use crate::error::ScheduleError;

/// When a job's instants come: a cron expression in a fixed time zone, or a
/// fixed period counted from the UNIX epoch.
///
/// Accepted forms:
///
/// | form | example | instants |
/// | --- | --- | --- |
/// | six fields, seconds first | `*/10 * * * * *` | every 10 s |
/// | five fields | `30 2 * * MON-FRI` | 02:30:00 on weekdays |
/// | descriptor | `@hourly`, `@daily`, `@midnight`, `@weekly`, `@monthly`, `@yearly`, `@annually` | the usual |
/// | period | `@every 5m`, `@every 1h30m`, `@every 500ms` | every multiple of the period since 1970-01-01T00:00:00Z |
///
/// A cron expression is read in UTC unless it starts with `CRON_TZ=<IANA
/// name> ` (or `TZ=<IANA name> `), or the job was given a time zone
/// ([`Job::time_zone`](crate::Job::time_zone)). The process's local zone is
/// never used: replicas in different zones compute the same instants. Across
/// a daylight-saving change an instant that falls in the gap comes once, at
/// the first time after it, and one that falls in the repeated hour comes
/// once, the first time.
#[derive(Clone)]
pub struct Schedule {
    kind: Kind,
    source: String,
}

#[derive(Clone)]
enum Kind {
    Cron { cron: Box<Cron>, tz: Tz },
    Every { period_ms: i64 },
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Schedule");
        let _ = d.field("source", &self.source);
        if let Kind::Cron { tz, .. } = &self.kind {
            let _ = d.field("time_zone", &tz.name());
        }
        d.finish()
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

/// The most instants [`Schedule::count_between`] counts one by one.
const COUNT_LIMIT: u64 = 1_000_000;

impl Schedule {
    /// Parses `expr`, in the time zone `zone` (an IANA name) when given and
    /// the expression names none; UTC otherwise.
    ///
    /// # Errors
    ///
    /// [`ScheduleError`] saying what is wrong: an unknown time zone, two
    /// different ones, a period that is zero or unreadable, a cron expression
    /// the parser refuses, or one that never comes.
    pub fn parse(expr: &str, zone: Option<&str>) -> Result<Self, ScheduleError> {
        let source = expr.trim().to_owned();
        let (prefix_zone, rest) = split_zone(&source);
        let zone_name = match (prefix_zone, zone) {
            (Some(a), Some(b)) if a != b => {
                return Err(ScheduleError::ConflictingTimeZones {
                    in_expression: a.to_owned(),
                    option: b.to_owned(),
                });
            }
            (Some(a), _) => Some(a),
            (None, b) => b,
        };
        let tz = match zone_name {
            None => Tz::UTC,
            Some(name) => Tz::from_str(name).map_err(|_| ScheduleError::UnknownTimeZone {
                zone: name.to_owned(),
            })?,
        };
        let rest = rest.trim();
        if rest.is_empty() {
            return Err(ScheduleError::Empty);
        }
        if let Some(period) = strip_prefix_ignore_case(rest, "@every") {
            let period = parse_period(period.trim())?;
            let period_ms = i64::try_from(period.as_millis()).unwrap_or(i64::MAX);
            return Ok(Schedule {
                kind: Kind::Every { period_ms },
                source,
            });
        }
        let rest = if rest.eq_ignore_ascii_case("@midnight") {
            "@daily"
        } else {
            rest
        };
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Disallowed)
            .build()
            .parse(rest)
            .map_err(|e| ScheduleError::Cron {
                message: e.to_string(),
            })?;
        let schedule = Schedule {
            kind: Kind::Cron {
                cron: Box::new(cron),
                tz,
            },
            source,
        };
        // An expression such as `0 0 30 2 *` parses but never comes.
        if schedule.next_after(UtcMillis::from_millis(0)).is_none() {
            return Err(ScheduleError::NeverComes);
        }
        Ok(schedule)
    }

    /// The expression as given.
    #[must_use]
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The time zone cron fields are read in (UTC unless one was named), or
    /// `None` for an `@every` period, which no zone changes.
    #[must_use]
    pub fn time_zone(&self) -> Option<&'static str> {
        match &self.kind {
            Kind::Cron { tz, .. } => Some(tz.name()),
            Kind::Every { .. } => None,
        }
    }

    /// The first instant strictly after `t`, if the schedule has one.
    #[must_use]
    pub fn next_after(&self, t: UtcMillis) -> Option<UtcMillis> {
        match &self.kind {
            Kind::Every { period_ms } => {
                let p = *period_ms;
                let k = t.as_millis().div_euclid(p).checked_add(1)?;
                k.checked_mul(p).map(UtcMillis::from_millis)
            }
            Kind::Cron { cron, tz } => {
                // Cron instants are whole seconds: the first one after `t` is
                // the first one after `t`'s whole second.
                let start = tz.from_utc_datetime(&to_utc(floor_second(t))?.naive_utc());
                let next = cron.find_next_occurrence(&start, false).ok()?;
                Some(UtcMillis::from_millis(next.timestamp_millis()))
            }
        }
    }

    /// The last instant at or before `t`, if the schedule has one.
    #[must_use]
    pub fn latest_at_or_before(&self, t: UtcMillis) -> Option<UtcMillis> {
        match &self.kind {
            Kind::Every { period_ms } => {
                let p = *period_ms;
                t.as_millis()
                    .div_euclid(p)
                    .checked_mul(p)
                    .map(UtcMillis::from_millis)
            }
            Kind::Cron { cron, tz } => {
                let start = tz.from_utc_datetime(&to_utc(floor_second(t))?.naive_utc());
                let prev = cron.find_previous_occurrence(&start, true).ok()?;
                Some(UtcMillis::from_millis(prev.timestamp_millis()))
            }
        }
    }

    /// How many instants come after `after` and at or before `up_to`.
    /// Periods are counted by arithmetic; cron instants one by one, up to a
    /// million (a round that overran a million instants is told it did).
    #[must_use]
    pub fn count_between(&self, after: UtcMillis, up_to: UtcMillis) -> u64 {
        if up_to <= after {
            return 0;
        }
        match &self.kind {
            Kind::Every { period_ms } => {
                let p = *period_ms;
                let n = up_to.as_millis().div_euclid(p) - after.as_millis().div_euclid(p);
                u64::try_from(n).unwrap_or(0)
            }
            Kind::Cron { .. } => {
                let mut n = 0;
                let mut t = after;
                while n < COUNT_LIMIT {
                    match self.next_after(t) {
                        Some(next) if next <= up_to => {
                            n += 1;
                            t = next;
                        }
                        _ => break,
                    }
                }
                n
            }
        }
    }
}

fn floor_second(t: UtcMillis) -> UtcMillis {
    UtcMillis::from_millis(t.as_millis().div_euclid(1_000) * 1_000)
}

fn to_utc(t: UtcMillis) -> Option<DateTime<Utc>> {
    DateTime::<Utc>::from_timestamp_millis(t.as_millis())
}

/// Splits a `CRON_TZ=<zone> ` or `TZ=<zone> ` prefix off an expression.
fn split_zone(expr: &str) -> (Option<&str>, &str) {
    for prefix in ["CRON_TZ=", "TZ="] {
        if let Some(rest) = expr.strip_prefix(prefix) {
            return match rest.split_once(char::is_whitespace) {
                Some((zone, rest)) => (Some(zone), rest),
                None => (Some(rest), ""),
            };
        }
    }
    (None, expr)
}

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    if !head.eq_ignore_ascii_case(prefix) {
        return None;
    }
    let rest = &s[prefix.len()..];
    (rest.is_empty() || rest.starts_with(char::is_whitespace)).then_some(rest)
}

/// Reads a period written as numbers with units, Go style: `90s`, `5m`,
/// `1h30m`, `500ms`, `1d`. Units: `ms`, `s`, `m`, `h`, `d`.
fn parse_period(text: &str) -> Result<Duration, ScheduleError> {
    let bad = || ScheduleError::Period {
        period: text.to_owned(),
    };
    if text.is_empty() {
        return Err(bad());
    }
    let mut total: u64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(bad());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit_ms: u64 = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        total = n
            .checked_mul(unit_ms)
            .and_then(|ms| total.checked_add(ms))
            .ok_or_else(bad)?;
    }
    if total == 0 || i64::try_from(total).is_err() {
        return Err(ScheduleError::ZeroPeriod {
            period: text.to_owned(),
        });
    }
    Ok(Duration::from_millis(total))
}

/// An instant written as an RFC 3339 time in UTC with milliseconds, as every
/// log line of the scheduler shows it: `2026-12-01T10:00:03.000Z`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Rfc3339(pub UtcMillis);

impl fmt::Display for Rfc3339 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match to_utc(self.0) {
            Some(t) => f.write_str(&t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
            None => write!(f, "{}", self.0),
        }
    }
}

impl fmt::Debug for Rfc3339 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Milliseconds of an RFC 3339 time.
    fn at(s: &str) -> UtcMillis {
        UtcMillis::from_millis(DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis())
    }

    fn show(t: Option<UtcMillis>) -> String {
        Rfc3339(t.unwrap()).to_string()
    }

    fn parse(expr: &str) -> Schedule {
        Schedule::parse(expr, None).unwrap()
    }

    #[test]
    fn six_fields_count_seconds() {
        let s = parse("*/10 * * * * *");
        assert_eq!(
            show(s.next_after(at("2026-12-01T10:00:00Z"))),
            "2026-12-01T10:00:10.000Z"
        );
        assert_eq!(
            show(s.next_after(at("2026-12-01T10:00:09.999Z"))),
            "2026-12-01T10:00:10.000Z"
        );
        assert_eq!(
            show(s.latest_at_or_before(at("2026-12-01T10:00:10Z"))),
            "2026-12-01T10:00:10.000Z"
        );
        assert_eq!(
            show(s.latest_at_or_before(at("2026-12-01T10:00:19.999Z"))),
            "2026-12-01T10:00:10.000Z"
        );
    }

    #[test]
    fn five_fields_count_minutes() {
        let s = parse("30 2 * * *");
        assert_eq!(
            show(s.next_after(at("2026-12-01T02:30:00.001Z"))),
            "2026-12-02T02:30:00.000Z"
        );
        assert_eq!(
            show(s.latest_at_or_before(at("2026-12-01T02:30:00.001Z"))),
            "2026-12-01T02:30:00.000Z"
        );
    }

    #[test]
    fn descriptors() {
        let t = at("2026-12-01T10:20:30.400Z");
        assert_eq!(
            show(parse("@hourly").next_after(t)),
            "2026-12-01T11:00:00.000Z"
        );
        assert_eq!(
            show(parse("@daily").next_after(t)),
            "2026-12-02T00:00:00.000Z"
        );
        assert_eq!(
            show(parse("@midnight").next_after(t)),
            "2026-12-02T00:00:00.000Z"
        );
        assert_eq!(
            show(parse("@monthly").next_after(t)),
            "2027-01-01T00:00:00.000Z"
        );
        assert_eq!(
            show(parse("@yearly").next_after(t)),
            "2027-01-01T00:00:00.000Z"
        );
        // 2026-12-06 is a Sunday.
        assert_eq!(
            show(parse("@weekly").next_after(t)),
            "2026-12-06T00:00:00.000Z"
        );
    }

    #[test]
    fn every_is_counted_from_the_epoch() {
        let s = parse("@every 5m");
        assert_eq!(
            show(s.next_after(at("2026-12-01T10:02:00Z"))),
            "2026-12-01T10:05:00.000Z"
        );
        assert_eq!(
            show(s.latest_at_or_before(at("2026-12-01T10:04:59.999Z"))),
            "2026-12-01T10:00:00.000Z"
        );
        let s = parse("@every 1h30m");
        let next = s.next_after(at("2026-12-01T10:00:00Z")).unwrap();
        assert_eq!(next.as_millis() % 5_400_000, 0);
        assert_eq!(
            parse("@every 500ms")
                .next_after(UtcMillis::from_millis(1_250))
                .unwrap()
                .as_millis(),
            1_500
        );
    }

    #[test]
    fn a_named_zone_moves_the_instants_and_utc_is_the_default() {
        let utc = parse("0 0 9 * * *");
        let berlin = parse("CRON_TZ=Europe/Berlin 0 0 9 * * *");
        let t = at("2026-12-01T00:00:00Z");
        assert_eq!(show(utc.next_after(t)), "2026-12-01T09:00:00.000Z");
        // Berlin is UTC+1 in December, UTC+2 in July.
        assert_eq!(show(berlin.next_after(t)), "2026-12-01T08:00:00.000Z");
        assert_eq!(
            show(berlin.next_after(at("2026-07-01T00:00:00Z"))),
            "2026-07-01T07:00:00.000Z"
        );
        let option = Schedule::parse("0 0 9 * * *", Some("Europe/Berlin")).unwrap();
        assert_eq!(show(option.next_after(t)), "2026-12-01T08:00:00.000Z");
        assert_eq!(option.time_zone(), Some("Europe/Berlin"));
        assert_eq!(utc.time_zone(), Some("UTC"));
        let tz = parse("TZ=America/New_York 0 0 9 * * *");
        assert_eq!(show(tz.next_after(t)), "2026-12-01T14:00:00.000Z");
    }

    #[test]
    fn daylight_saving_gap_and_overlap_come_once() {
        // Europe/Berlin: 2026-03-29 02:00 -> 03:00; 2026-10-25 03:00 -> 02:00.
        let s = parse("CRON_TZ=Europe/Berlin 30 2 * * *");
        let spring = s.count_between(at("2026-03-28T12:00:00Z"), at("2026-03-29T12:00:00Z"));
        assert_eq!(spring, 1);
        assert_eq!(
            show(s.next_after(at("2026-03-28T12:00:00Z"))),
            "2026-03-29T01:00:00.000Z",
            "02:30 does not exist that night: 03:00 CEST"
        );
        let autumn = s.count_between(at("2026-10-24T12:00:00Z"), at("2026-10-25T12:00:00Z"));
        assert_eq!(autumn, 1);
    }

    #[test]
    fn counts_instants_between() {
        let s = parse("@every 1s");
        assert_eq!(
            s.count_between(UtcMillis::from_millis(1_000), UtcMillis::from_millis(4_500)),
            3
        );
        assert_eq!(
            s.count_between(UtcMillis::from_millis(1_000), UtcMillis::from_millis(1_000)),
            0
        );
        let c = parse("* * * * * *");
        assert_eq!(
            c.count_between(UtcMillis::from_millis(1_000), UtcMillis::from_millis(4_500)),
            3
        );
    }

    #[test]
    fn errors_say_what_is_wrong() {
        let err = |e: &str, z: Option<&str>| Schedule::parse(e, z).unwrap_err();
        assert!(matches!(err("", None), ScheduleError::Empty));
        assert!(matches!(
            err("not a schedule", None),
            ScheduleError::Cron { .. }
        ));
        assert!(matches!(err("* * * *", None), ScheduleError::Cron { .. }));
        assert!(matches!(
            err("61 * * * * *", None),
            ScheduleError::Cron { .. }
        ));
        assert!(matches!(
            err("0 0 0 1 1 * 2030", None),
            ScheduleError::Cron { .. }
        ));
        assert!(matches!(err("@every", None), ScheduleError::Period { .. }));
        assert!(matches!(
            err("@every 5 minutes", None),
            ScheduleError::Period { .. }
        ));
        assert!(matches!(
            err("@every 0s", None),
            ScheduleError::ZeroPeriod { .. }
        ));
        assert!(matches!(
            err("CRON_TZ=Mars/Olympus 0 * * * *", None),
            ScheduleError::UnknownTimeZone { .. }
        ));
        assert!(matches!(
            err("* * * * *", Some("Local")),
            ScheduleError::UnknownTimeZone { .. }
        ));
        assert!(matches!(
            err("CRON_TZ=Europe/Berlin 0 * * * *", Some("Europe/Paris")),
            ScheduleError::ConflictingTimeZones { .. }
        ));
        assert!(matches!(err("0 0 30 2 *", None), ScheduleError::NeverComes));
    }

    #[test]
    fn instants_print_as_rfc3339() {
        assert_eq!(
            Rfc3339(UtcMillis::from_millis(1_764_583_203_000)).to_string(),
            "2025-12-01T10:00:03.000Z"
        );
        // `UtcMillis` (what `Round::instant` returns) writes the same text as
        // chrono does, across leap years, centuries and the epoch.
        let mut ms: i64 = -62_167_219_200_000;
        while ms < 253_402_300_799_999 {
            let t = UtcMillis::from_millis(ms);
            assert_eq!(t.to_string(), Rfc3339(t).to_string(), "{ms}");
            ms += 86_399_999_937;
        }
    }
}
