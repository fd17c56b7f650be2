//! CPU time of a process, from `/proc/<pid>/stat` (Linux).
//!
//! `utime` and `stime` there count all the threads of the process, in clock
//! ticks of `USER_HZ`, which Linux fixes at 100 per second for user space
//! whatever the kernel's own tick rate.

use std::time::Duration;

/// Clock ticks per second of `/proc/<pid>/stat`.
pub const USER_HZ: u64 = 100;

/// User and system CPU time of `pid` (or of this process for `None`).
///
/// # Errors
///
/// When `/proc/<pid>/stat` cannot be read or does not parse (not Linux, or
/// the process is gone).
pub fn cpu_time(pid: Option<u32>) -> std::io::Result<Duration> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/stat"),
        None => "/proc/self/stat".to_owned(),
    };
    let text = std::fs::read_to_string(path)?;
    parse_stat(&text).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "unexpected /proc/<pid>/stat format",
        )
    })
}

/// `utime + stime` of a `/proc/<pid>/stat` line.
fn parse_stat(text: &str) -> Option<Duration> {
    // The command name (field 2) is in parentheses and may hold spaces.
    let after = text.get(text.rfind(')')? + 1..)?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of the line; `fields[0]` is field 3.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    let ticks = utime + stime;
    Some(Duration::from_millis(ticks * 1000 / USER_HZ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_stat_line_with_spaces_in_the_name() {
        let line = "1234 (my (odd) proc) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 4 0 100 1000 10";
        assert_eq!(parse_stat(line), Some(Duration::from_millis(3_000)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn reads_this_process() {
        assert!(cpu_time(None).is_ok());
    }
}
