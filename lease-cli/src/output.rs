//! What the commands print: RFC 3339 times, escaped names, the table and the
//! JSON objects.

use std::fmt::Write as _;
use std::time::Duration;

use dblease::{LeaseInfo, LeaseState};
use serde_json::{Value, json};

/// `ms` UTC milliseconds since the epoch as RFC 3339 in UTC, to the
/// millisecond: `2026-12-01T09:14:03.250Z` (`UtcMillis`'s `Display`, as the
/// scheduler's events write instants).
pub(crate) fn rfc3339(ms: i64) -> String {
    dblease::UtcMillis::from_millis(ms).to_string()
}

/// A name or instance id fit for one cell of a table: as it is when it is
/// plain (printable, no space, no quote, no backslash), else quoted with
/// Rust's escapes, so that a control character cannot move the cursor or
/// forge a line, and a space cannot fake a column.
pub(crate) fn escape(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| !c.is_control() && !c.is_whitespace() && c != '"' && c != '\\');
    if plain {
        s.to_owned()
    } else {
        format!("{s:?}")
    }
}

/// `12.3s`, `450ms`, `2m05s`, `1h02m`.
pub(crate) fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1_000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{}.{}s", ms / 1_000, ms % 1_000 / 100)
    } else if ms < 3_600_000 {
        format!("{}m{:02}s", ms / 60_000, ms / 1_000 % 60)
    } else {
        format!("{}h{:02}m", ms / 3_600_000, ms / 60_000 % 60)
    }
}

fn instant(ms: Option<i64>) -> Value {
    ms.map_or(Value::Null, |ms| Value::String(rfc3339(ms)))
}

/// One lease as the JSON object `ls --json`, `show --json` and
/// `watch --json` print (the fields are listed in the README).
pub(crate) fn json(info: &LeaseInfo) -> Value {
    let expires = info.expires_at().map(|t| t.as_millis());
    let last = info.last_instant().map(|t| t.as_millis());
    let unfinished = info.unfinished_instant().map(|t| t.as_millis());
    let rerun = (info.rerun_slot_ms != 0).then_some(info.rerun_slot_ms);
    json!({
        "name": info.name,
        "state": info.state().to_string(),
        "instance": info.instance,
        "term": info.term,
        "time_left_ms": u64::try_from(info.time_left().as_millis()).unwrap_or(u64::MAX),
        "expires_at": instant(expires),
        "expires_at_ms": expires,
        "last_instant": instant(last),
        "last_instant_ms": last,
        "unfinished_instant": instant(unfinished),
        "unfinished_instant_ms": unfinished,
        "rerun_instant": instant(rerun),
        "rerun_instant_ms": rerun,
        "db_now": rfc3339(info.now_ms),
        "db_now_ms": info.now_ms,
    })
}

/// The time left for the table: `-` when the lease is not held.
fn left(info: &LeaseInfo) -> String {
    match info.state() {
        LeaseState::Held => duration(info.time_left()),
        LeaseState::Expired | LeaseState::Released => "-".to_owned(),
    }
}

/// The last instant for the table: `-` when none, marked `(unfinished)`
/// while its round has not run to its end.
fn last_instant(info: &LeaseInfo) -> String {
    match (info.last_instant(), info.unfinished_instant()) {
        (None, _) => "-".to_owned(),
        (Some(t), None) => rfc3339(t.as_millis()),
        (Some(t), Some(_)) => format!("{} (unfinished)", rfc3339(t.as_millis())),
    }
}

/// The leases as a table for people, a header first, columns padded.
pub(crate) fn table(infos: &[LeaseInfo]) -> String {
    let header = ["NAME", "STATE", "INSTANCE", "TERM", "LEFT", "LAST INSTANT"].map(str::to_owned);
    let rows: Vec<[String; 6]> = infos
        .iter()
        .map(|i| {
            [
                escape(&i.name),
                i.state().to_string(),
                escape(&i.instance),
                i.term.to_string(),
                left(i),
                last_instant(i),
            ]
        })
        .collect();
    let mut widths = header.clone().map(|h| h.chars().count());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(widths).enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else if i == 3 {
                // The term is a number: right-aligned.
                let _ = write!(line, "{cell:>w$}  ");
            } else {
                let _ = write!(line, "{cell:<w$}  ");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// One lease in detail, a field a line, for `show`.
pub(crate) fn detail(info: &LeaseInfo) -> String {
    let mut out = String::new();
    let mut field = |key: &str, value: &str| {
        let _ = writeln!(out, "{key:<20}{value}");
    };
    field("name:", &escape(&info.name));
    field("state:", &info.state().to_string());
    field("instance:", &escape(&info.instance));
    field("term:", &info.term.to_string());
    field("time left:", &left(info));
    let expires = info
        .expires_at()
        .map_or_else(|| "- (released)".to_owned(), |t| rfc3339(t.as_millis()));
    field("expires at:", &expires);
    let instant = |ms: Option<i64>| ms.map_or_else(|| "-".to_owned(), rfc3339);
    field(
        "last instant:",
        &instant(info.last_instant().map(|t| t.as_millis())),
    );
    field(
        "unfinished instant:",
        &instant(info.unfinished_instant().map(|t| t.as_millis())),
    );
    field(
        "rerun instant:",
        &instant((info.rerun_slot_ms != 0).then_some(info.rerun_slot_ms)),
    );
    field("database now:", &rfc3339(info.now_ms));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str, expires_at_ms: i64, slot_ms: i64, unfinished: i64) -> LeaseInfo {
        LeaseInfo {
            name: name.to_owned(),
            instance: "web-1".to_owned(),
            term: 12,
            expires_at_ms,
            now_ms: 1_000_000,
            slot_ms,
            unfinished_slot_ms: unfinished,
            rerun_slot_ms: 0,
        }
    }

    #[test]
    fn rfc3339_of_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
        assert_eq!(rfc3339(4_102_444_799_999), "2099-12-31T23:59:59.999Z");
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn plain_names_stay_plain_and_others_are_escaped() {
        assert_eq!(escape("leader:billing"), "leader:billing");
        assert_eq!(escape("a\nb"), r#""a\nb""#);
        assert_eq!(escape("a b"), r#""a b""#);
        assert_eq!(escape("\u{1b}[2J"), r#""\u{1b}[2J""#);
        assert_eq!(escape(""), r#""""#);
        assert_eq!(escape("é"), "é");
    }

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(duration(Duration::from_millis(450)), "450ms");
        assert_eq!(duration(Duration::from_millis(12_345)), "12.3s");
        assert_eq!(duration(Duration::from_secs(125)), "2m05s");
        assert_eq!(duration(Duration::from_secs(3_720)), "1h02m");
    }

    #[test]
    fn table_has_one_line_per_lease_whatever_the_names_hold() {
        let rows = [
            info("a\nfake-row held", 1_015_000, 0, 0),
            info("job:nightly", 0, 950_400, 950_400),
        ];
        let out = table(&rows);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        assert!(lines[0].starts_with("NAME"), "{out}");
        assert!(lines[1].starts_with(r#""a\nfake-row held"  held"#), "{out}");
        assert!(lines[1].contains("15.0s"), "{out}");
        assert!(
            lines[2].ends_with("1970-01-01T00:15:50.400Z (unfinished)"),
            "{out}"
        );
    }

    #[test]
    fn json_of_a_released_scheduler_row() {
        let v = json(&info("job:x", 0, 950_400, 0));
        assert_eq!(v["state"], "released");
        assert_eq!(v["term"], 12);
        assert_eq!(v["time_left_ms"], 0);
        assert_eq!(v["expires_at"], Value::Null);
        assert_eq!(v["last_instant"], "1970-01-01T00:15:50.400Z");
        assert_eq!(v["last_instant_ms"], 950_400);
        assert_eq!(v["unfinished_instant"], Value::Null);
    }
}
