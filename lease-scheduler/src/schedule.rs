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
/// a daylight-saving change, a local time skipped by the gap comes once, at
/// the first instant after the gap; in the repeated hour a fixed time of day
/// comes once, the first time, and an expression that repeats within the day
/// (`@hourly`, `* * * * *`) at every real instant that matches (the table is
/// in the crate docs, *Daylight-saving time*).
///
/// ```
/// use lease_core::UtcMillis;
/// use lease_scheduler::Schedule;
///
/// // 02:30 does not exist in Berlin on 2026-03-29: it comes at 03:00 CEST.
/// let s = Schedule::parse("30 2 * * *", Some("Europe/Berlin"))?;
/// let noon = UtcMillis::from_millis(1_774_699_200_000);
/// assert_eq!(noon.to_string(), "2026-03-28T12:00:00.000Z");
/// assert_eq!(s.next_after(noon).unwrap().to_string(), "2026-03-29T01:00:00.000Z");
/// # Ok::<(), lease_scheduler::ScheduleError>(())
/// ```
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
                let from = floor_second(t);
                let start = tz.from_utc_datetime(&to_utc(from)?.naive_utc());
                let next = cron.find_next_occurrence(&start, false).ok();
                let next = next.map(|n| UtcMillis::from_millis(n.timestamp_millis()));
                // A local time skipped by a spring-forward gap comes at the
                // first instant after the gap, whatever the expression's form.
                let gap = next
                    .unwrap_or(UtcMillis::from_millis(from.as_millis() + GAP_HORIZON_MS))
                    .min(UtcMillis::from_millis(from.as_millis() + GAP_HORIZON_MS));
                match gap_with_match(cron, *tz, from, gap) {
                    Some(g) if next.is_none_or(|n| g < n) => Some(g),
                    _ => next,
                }
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
                let at = floor_second(t);
                let start = tz.from_utc_datetime(&to_utc(at)?.naive_utc());
                let prev = cron.find_previous_occurrence(&start, true).ok();
                let prev = prev.map(|p| UtcMillis::from_millis(p.timestamp_millis()));
                // The mirror of `next_after`: a gap whose skipped local times
                // match comes at its end, if that is later than `prev`.
                let floor = prev
                    .unwrap_or(UtcMillis::from_millis(at.as_millis() - GAP_HORIZON_MS))
                    .max(UtcMillis::from_millis(at.as_millis() - GAP_HORIZON_MS));
                let before = UtcMillis::from_millis(floor.as_millis().saturating_sub(1));
                // The last such gap: there may be two within the horizon.
                let mut last_gap = None;
                let mut from = before;
                while let Some(g) = gap_with_match(cron, *tz, from, at) {
                    last_gap = Some(g);
                    from = g;
                }
                match last_gap {
                    Some(g) if prev.is_none_or(|p| g > p) => Some(g),
                    _ => prev,
                }
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

/// How far from `t` a daylight-saving gap is looked for when the cron's own
/// next (or previous) instant is further or absent: a year and a day, beyond
/// which no schedule that comes at all is without an instant.
const GAP_HORIZON_MS: i64 = 367 * 86_400_000;

/// The UTC offset of `tz` at `t`, in seconds.
fn offset_at(tz: Tz, t: UtcMillis) -> Option<i32> {
    use chrono::Offset as _;
    Some(
        tz.offset_from_utc_datetime(&to_utc(t)?.naive_utc())
            .fix()
            .local_minus_utc(),
    )
}

/// The end of the first spring-forward gap of `tz` after `after` and at or
/// before `up_to` in which a skipped local time matches `cron`: the first
/// instant after that gap. `None` when there is none.
fn gap_with_match(cron: &Cron, tz: Tz, after: UtcMillis, up_to: UtcMillis) -> Option<UtcMillis> {
    if tz == Tz::UTC || up_to <= after {
        return None;
    }
    let mut lo = after;
    let end = up_to;
    // Transitions are at least weeks apart: walk in 7-day steps, then bisect
    // the step whose offset grew.
    while lo < end {
        let hi = UtcMillis::from_millis(lo.as_millis().saturating_add(7 * 86_400_000)).min(end);
        let (before, after_step) = (offset_at(tz, lo)?, offset_at(tz, hi)?);
        if after_step > before {
            // The first millisecond at the new offset: the gap's end.
            let (mut a, mut b) = (lo.as_millis(), hi.as_millis());
            while b - a > 1 {
                let mid = a + (b - a) / 2;
                if offset_at(tz, UtcMillis::from_millis(mid))? > before {
                    b = mid;
                } else {
                    a = mid;
                }
            }
            let g = UtcMillis::from_millis(b);
            let new = offset_at(tz, g)?;
            // The skipped local times: [g at the old offset, g at the new).
            let g_utc = to_utc(g)?.naive_utc();
            let skipped_from = g_utc + chrono::Duration::seconds(i64::from(before));
            let skipped_to = g_utc + chrono::Duration::seconds(i64::from(new));
            // Match the cron's fields against the local wall times as they
            // would read: written as UTC, where every wall time exists.
            let probe = Utc.from_utc_datetime(&(skipped_from - chrono::Duration::seconds(1)));
            if let Ok(m) = cron.find_next_occurrence(&probe, false) {
                if m.naive_utc() < skipped_to && g > after && g <= up_to {
                    return Some(g);
                }
            }
            lo = hi;
            continue;
        }
        lo = hi;
    }
    None
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

    /// The instants of `expr` after `from` and at or before `to`, found
    /// forwards with `next_after` and checked against `latest_at_or_before`
    /// walked backwards and `count_between`.
    fn instants(expr: &str, from: &str, to: &str) -> Vec<String> {
        let s = parse(expr);
        let (from, to) = (at(from), at(to));
        let mut forwards = Vec::new();
        let mut t = from;
        while let Some(n) = s.next_after(t).filter(|&n| n <= to) {
            forwards.push(n);
            t = n;
        }
        let mut backwards = Vec::new();
        let mut t = to;
        while let Some(p) = s.latest_at_or_before(t).filter(|&p| p > from) {
            backwards.push(p);
            t = UtcMillis::from_millis(p.as_millis() - 1);
        }
        backwards.reverse();
        assert_eq!(
            forwards, backwards,
            "{expr}: next_after and latest_at_or_before agree"
        );
        assert_eq!(s.count_between(from, to), forwards.len() as u64, "{expr}");
        forwards
            .into_iter()
            .map(|t| Rfc3339(t).to_string())
            .collect()
    }

    /// The daylight-saving table of the crate docs (*Daylight-saving time*),
    /// one row per case.
    #[test]
    fn daylight_saving_table() {
        // Europe/Berlin: 2026-03-29 02:00 CET -> 03:00 CEST (01:00Z);
        // 2026-10-25 03:00 CEST -> 02:00 CET (01:00Z).
        // America/New_York: 2026-03-08 02:00 EST -> 03:00 EDT (07:00Z);
        // 2026-11-01 02:00 EDT -> 01:00 EST (06:00Z).
        let cases: &[(&str, &str, &str, &[&str])] = &[
            // A fixed time in the gap: once, at the first instant after it.
            (
                "CRON_TZ=Europe/Berlin 30 2 * * *",
                "2026-03-28T00:00:00Z",
                "2026-03-30T12:00:00Z",
                &[
                    "2026-03-28T01:30:00.000Z",
                    "2026-03-29T01:00:00.000Z",
                    "2026-03-30T00:30:00.000Z",
                ],
            ),
            (
                "CRON_TZ=America/New_York 30 2 * * *",
                "2026-03-07T00:00:00Z",
                "2026-03-09T12:00:00Z",
                &[
                    "2026-03-07T07:30:00.000Z",
                    "2026-03-08T07:00:00.000Z",
                    "2026-03-09T06:30:00.000Z",
                ],
            ),
            // Two fixed times in the gap: the one instant after it, once.
            (
                "CRON_TZ=Europe/Berlin 0,30 2 * * *",
                "2026-03-29T00:00:00Z",
                "2026-03-29T12:00:00Z",
                &["2026-03-29T01:00:00.000Z"],
            ),
            // A range of hours through the gap: its 02:30 at 03:00, then 03:30.
            (
                "CRON_TZ=America/New_York 30 1-3 * * *",
                "2026-03-08T05:00:00Z",
                "2026-03-08T09:00:00Z",
                &[
                    "2026-03-08T06:30:00.000Z",
                    "2026-03-08T07:00:00.000Z",
                    "2026-03-08T07:30:00.000Z",
                ],
            ),
            // A fixed time in the repeated hour: once, the first time.
            (
                "CRON_TZ=Europe/Berlin 30 2 * * *",
                "2026-10-24T00:00:00Z",
                "2026-10-26T12:00:00Z",
                &[
                    "2026-10-24T00:30:00.000Z",
                    "2026-10-25T00:30:00.000Z",
                    "2026-10-26T01:30:00.000Z",
                ],
            ),
            (
                "CRON_TZ=America/New_York 30 1 * * *",
                "2026-10-31T00:00:00Z",
                "2026-11-02T12:00:00Z",
                &[
                    "2026-10-31T05:30:00.000Z",
                    "2026-11-01T05:30:00.000Z",
                    "2026-11-02T06:30:00.000Z",
                ],
            ),
            // Hourly: every real hour, none twice, none missing; the gap's
            // hour does not exist, the repeated hour comes twice.
            (
                "CRON_TZ=Europe/Berlin 0 * * * *",
                "2026-03-28T22:30:00Z",
                "2026-03-29T02:30:00Z",
                &[
                    "2026-03-28T23:00:00.000Z",
                    "2026-03-29T00:00:00.000Z",
                    "2026-03-29T01:00:00.000Z",
                    "2026-03-29T02:00:00.000Z",
                ],
            ),
            (
                "CRON_TZ=Europe/Berlin @hourly",
                "2026-10-24T22:30:00Z",
                "2026-10-25T02:30:00Z",
                &[
                    "2026-10-24T23:00:00.000Z",
                    "2026-10-25T00:00:00.000Z",
                    "2026-10-25T01:00:00.000Z",
                    "2026-10-25T02:00:00.000Z",
                ],
            ),
            (
                "CRON_TZ=America/New_York 0 * * * *",
                "2026-03-08T05:30:00Z",
                "2026-03-08T08:30:00Z",
                &[
                    "2026-03-08T06:00:00.000Z",
                    "2026-03-08T07:00:00.000Z",
                    "2026-03-08T08:00:00.000Z",
                ],
            ),
            (
                "CRON_TZ=America/New_York 0 * * * *",
                "2026-11-01T04:30:00Z",
                "2026-11-01T07:30:00Z",
                &[
                    "2026-11-01T05:00:00.000Z",
                    "2026-11-01T06:00:00.000Z",
                    "2026-11-01T07:00:00.000Z",
                ],
            ),
            // Every minute: every real minute, through both changes.
            (
                "CRON_TZ=Europe/Berlin * * * * *",
                "2026-03-29T00:57:30Z",
                "2026-03-29T01:02:00Z",
                &[
                    "2026-03-29T00:58:00.000Z",
                    "2026-03-29T00:59:00.000Z",
                    "2026-03-29T01:00:00.000Z",
                    "2026-03-29T01:01:00.000Z",
                    "2026-03-29T01:02:00.000Z",
                ],
            ),
            (
                "CRON_TZ=Europe/Berlin * * * * *",
                "2026-10-25T00:57:30Z",
                "2026-10-25T01:02:00Z",
                &[
                    "2026-10-25T00:58:00.000Z",
                    "2026-10-25T00:59:00.000Z",
                    "2026-10-25T01:00:00.000Z",
                    "2026-10-25T01:01:00.000Z",
                    "2026-10-25T01:02:00.000Z",
                ],
            ),
            (
                "CRON_TZ=America/New_York * * * * *",
                "2026-03-08T06:58:30Z",
                "2026-03-08T07:01:00Z",
                &[
                    "2026-03-08T06:59:00.000Z",
                    "2026-03-08T07:00:00.000Z",
                    "2026-03-08T07:01:00.000Z",
                ],
            ),
            (
                "CRON_TZ=America/New_York * * * * *",
                "2026-11-01T05:58:30Z",
                "2026-11-01T06:01:00Z",
                &[
                    "2026-11-01T05:59:00.000Z",
                    "2026-11-01T06:00:00.000Z",
                    "2026-11-01T06:01:00.000Z",
                ],
            ),
            // Every 20 minutes within hour 1, repeated in New York: both passes.
            (
                "CRON_TZ=America/New_York */20 1 * * *",
                "2026-11-01T04:30:00Z",
                "2026-11-01T07:30:00Z",
                &[
                    "2026-11-01T05:00:00.000Z",
                    "2026-11-01T05:20:00.000Z",
                    "2026-11-01T05:40:00.000Z",
                    "2026-11-01T06:00:00.000Z",
                    "2026-11-01T06:20:00.000Z",
                    "2026-11-01T06:40:00.000Z",
                ],
            ),
            // `@every` counts real time: no zone moves it.
            (
                "@every 30m",
                "2026-03-29T00:15:00Z",
                "2026-03-29T01:45:00Z",
                &[
                    "2026-03-29T00:30:00.000Z",
                    "2026-03-29T01:00:00.000Z",
                    "2026-03-29T01:30:00.000Z",
                ],
            ),
        ];
        for (expr, from, to, want) in cases {
            assert_eq!(
                instants(expr, from, to),
                *want,
                "{expr} from {from} to {to}"
            );
        }
        // The minute-by-minute count across a whole day of each change: 23
        // and 25 real hours.
        let m = "CRON_TZ=Europe/Berlin * * * * *";
        assert_eq!(
            instants(m, "2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z").len(),
            23 * 60
        );
        assert_eq!(
            instants(m, "2026-10-24T22:00:00Z", "2026-10-25T23:00:00Z").len(),
            25 * 60
        );
        assert_eq!(
            instants(
                "CRON_TZ=Europe/Berlin @hourly",
                "2026-10-24T22:00:00Z",
                "2026-10-25T23:00:00Z"
            )
            .len(),
            25
        );
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
