//! What the scheduler's events share: one target, and text from outside
//! written escaped.
//!
//! Job names and the instance id are logged as `Debug` formats them
//! (`job = ?name`), as lease-core logs lease names: quoted, every control
//! character escaped. An error's text (a job's own error, a database's
//! message, a panic's) is logged through [`Escaped`]: as it reads, but with
//! its control characters escaped, so that none of it can forge a log line
//! or move a terminal's cursor.

use std::fmt::{self, Write as _};

/// The target of every event of the scheduler, whichever module logs it.
pub(crate) const TARGET: &str = "lease_scheduler::scheduler";

/// Writes `T`'s `Display` with each control character escaped as `Debug`
/// escapes it (`\n`, `\u{1b}`), everything else as it is.
pub(crate) struct Escaped<T>(pub(crate) T);

impl<T: fmt::Display> fmt::Display for Escaped<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(EscapeControls(f), "{}", self.0)
    }
}

/// A writer that escapes the control characters written through it.
struct EscapeControls<'a, 'b>(&'a mut fmt::Formatter<'b>);

impl fmt::Write for EscapeControls<'_, '_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for part in s.split_inclusive(char::is_control) {
            match part.char_indices().last() {
                Some((at, c)) if c.is_control() => {
                    self.0.write_str(&part[..at])?;
                    write!(self.0, "{}", c.escape_debug())?;
                }
                _ => self.0.write_str(part)?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Escaped;

    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        let cases = [
            ("connection refused", "connection refused"),
            ("line\nINFO forged", "line\\nINFO forged"),
            ("\u{1b}[31mred\u{1b}[0m", "\\u{1b}[31mred\\u{1b}[0m"),
            ("tab\there\r", "tab\\there\\r"),
            ("é \"quoted\" = ok \u{2028}", "é \"quoted\" = ok \u{2028}"),
            ("\u{85}c1", "\\u{85}c1"),
            ("", ""),
        ];
        for (raw, shown) in cases {
            assert_eq!(Escaped(raw).to_string(), shown, "{raw:?}");
        }
    }
}
