//! Lease names: what can be claimed.

use crate::error::{Error, NameError};

/// The longest name a lease can have, in bytes: the width of the name column
/// (191 bytes is what a MySQL index on a 4-byte character set can hold).
pub const MAX_NAME_BYTES: usize = 191;

/// Reports whether `name` can be a coordinated name: not empty, at most
/// [`MAX_NAME_BYTES`] bytes long, and free of control characters (the C0
/// controls U+0000 to U+001F, NUL and newline among them, DEL U+007F and the
/// C1 controls U+0080 to U+009F, see [`char::is_control`]).
///
/// Every claim checks its name again before any SQL, so no path reaches the
/// table with a name it cannot hold. A capability validates the names it
/// registers as it starts, so that a name that could never be claimed fails
/// the process at once instead of leaving work that silently never runs.
///
/// Names are compared exactly, byte for byte, on every backend: `job`, `JOB`
/// and `job ` are three names.
///
/// Control characters are refused because no database stores a NUL in a text
/// column (PostgreSQL refuses it, so a retry loop would spin on bad input)
/// and because a name with a newline or an ANSI escape would forge log lines
/// and terminal output. Names are also logged escaped (as `Debug` formats
/// them) wherever the library logs them, so the characters that remain
/// allowed (quotes, `=`, the Unicode line separator) cannot forge a field or
/// a line either.
///
/// # Errors
///
/// [`Error::InvalidName`], saying whether the name is empty, too long or holds
/// a control character. It is never [retryable](Error::is_retryable).
///
/// # Examples
///
/// ```
/// use lease_core::{validate_name, MAX_NAME_BYTES};
///
/// assert!(validate_name("leader:billing").is_ok());
/// assert!(validate_name("").is_err());
/// assert!(validate_name(&"x".repeat(MAX_NAME_BYTES + 1)).is_err());
/// assert!(validate_name("job\nINFO forged line").is_err());
/// assert!(validate_name("job\0").is_err());
/// ```
pub fn validate_name(name: &str) -> Result<(), Error> {
    if name.is_empty() {
        return Err(Error::InvalidName {
            reason: NameError::Empty,
        });
    }
    if name.len() > MAX_NAME_BYTES {
        let mut end = 32;
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        return Err(Error::InvalidName {
            reason: NameError::TooLong {
                len: name.len(),
                max: MAX_NAME_BYTES,
                prefix: name[..end].to_owned(),
            },
        });
    }
    if let Some((at, character)) = name.char_indices().find(|(_, c)| c.is_control()) {
        return Err(Error::InvalidName {
            reason: NameError::ControlCharacter {
                character,
                at,
                name: name.to_owned(),
            },
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_name_is_refused_as_empty() {
        let err = validate_name("").unwrap_err();
        assert!(matches!(
            err,
            Error::InvalidName {
                reason: NameError::Empty
            }
        ));
        assert_eq!(err.to_string(), "invalid lease name: the name is empty");
    }

    #[test]
    fn name_of_exactly_the_limit_is_accepted() {
        validate_name(&"n".repeat(MAX_NAME_BYTES)).unwrap();
    }

    #[test]
    fn limit_counts_bytes_not_characters() {
        // 96 two-byte characters: 96 characters, 192 bytes.
        let name = "é".repeat(96);
        let err = validate_name(&name).unwrap_err();
        match err {
            Error::InvalidName {
                reason: NameError::TooLong { len, max, prefix },
            } => {
                assert_eq!((len, max), (192, 191));
                assert_eq!(prefix, "é".repeat(16));
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn too_long_message_says_length_and_limit() {
        let err = validate_name(&"a".repeat(200)).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("200 bytes"), "{msg}");
        assert!(msg.contains("191"), "{msg}");
    }
}

/// Hostile names: refused before any SQL, and never written raw into a log.
#[cfg(test)]
mod hostile {
    use std::io;
    use std::sync::{Arc, Mutex};

    use tokio::time::sleep;
    use tokio_util::sync::CancellationToken;
    use tracing_subscriber::fmt::MakeWriter;

    use crate::testing::Table;
    use crate::testing::{ScriptedStore, Step, ms, timings};
    use crate::{Error, Leases, NameError, UtcMillis};

    /// One of each kind of control character: NUL, newlines, ESC (an ANSI
    /// sequence), DEL, and C1 (NEL, and CSI, the one-byte ANSI introducer).
    const HOSTILE: [&str; 7] = [
        "job\0",
        "job\nFORGED 2026-01-01T00:00:00Z  INFO line",
        "job\r\nFORGED",
        "job\x1b[2J\x1b[31mred",
        "job\x7f",
        "job\u{85}FORGED",
        "job\u{9b}31m",
    ];

    /// Formatted log output, as a subscriber writes it.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Captured {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    impl io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl MakeWriter<'_> for Captured {
        type Writer = Captured;

        fn make_writer(&self) -> Captured {
            self.clone()
        }
    }

    fn assert_control_character(err: &Error, name: &str) {
        match err {
            Error::InvalidName {
                reason: NameError::ControlCharacter { name: n, .. },
            } => assert_eq!(n, name),
            other => panic!("{name:?}: expected a control-character error, got {other:?}"),
        }
        assert!(!err.is_retryable(), "{err}");
        let msg = err.to_string();
        assert!(!msg.chars().any(char::is_control), "{msg:?}");
    }

    #[test]
    fn control_characters_are_refused_with_their_own_error() {
        for name in HOSTILE {
            let err = crate::validate_name(name).unwrap_err();
            assert_control_character(&err, name);
        }
        let err = crate::validate_name("a\u{1b}b").unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"invalid lease name: the name "a\u{1b}b" holds the control character U+001B at byte 1"#
        );
        // Not control characters: kept, compared byte for byte.
        for name in ["job \"x\"=1", "job\u{a0}", "job\u{2028}", "jöb"] {
            crate::validate_name(name).unwrap();
        }
    }

    /// Every entry point refuses a hostile name before the store sees it
    /// (the scripted store would claim it, or fail as a retryable database
    /// error), and the formatted output of every event, with the name held
    /// under a valid but awkward name, has no raw control character and no
    /// forged field.
    #[tokio::test(start_paused = true)]
    async fn hostile_names_are_refused_before_sql_and_never_logged_raw() {
        let logs = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(logs.clone())
            .finish();
        lease_testkit::logs::every_callsite_interesting();
        let _guard = tracing::subscriber::set_default(subscriber);

        // Renewed, failed, then gone: a warning, and the loss.
        let store = ScriptedStore::new([Step::Renew, Step::Fail, Step::Gone]);
        let leases = Leases::new(store.clone())
            .with_timings(timings())
            .with_instance("test")
            .unwrap();
        for name in HOSTILE {
            let err = leases.claim(name).await.err().unwrap();
            // What an application does with the error: log it.
            tracing::warn!(error = %err, "claim refused");
            assert_control_character(&err, name);
            let err = leases
                .claim_instant(name, UtcMillis::from_millis(1_000))
                .await
                .err()
                .unwrap();
            assert_control_character(&err, name);
            let err = leases.unfinished_instants(&["ok", name]).await.unwrap_err();
            assert_control_character(&err, name);
            let err = leases.last_instant(name).await.unwrap_err();
            assert_control_character(&err, name);
        }

        // A valid name that Display would let forge a field and a line.
        let awkward = "job\" term=99 forged=\"yes\u{2028}\u{202e}";
        let handle = leases.claim(awkward).await.unwrap().unwrap();
        let holder = handle.hold(&CancellationToken::new());
        sleep(ms(1_000)).await;
        assert!(handle.lost());
        holder.stop().await;
        let handle = leases.claim(awkward).await.unwrap().unwrap();
        handle.release().await.unwrap();

        let out = logs.text();
        for event in [
            "claim refused",
            "lease claimed",
            "lease renewal failed",
            "lease lost",
            "lease released",
        ] {
            assert!(out.contains(event), "no {event:?} in:\n{out}");
        }
        assert!(
            !out.contains(
                |c: char| c != '\n' && (c.is_control() || c == '\u{2028}' || c == '\u{202e}')
            ),
            "{out:?}"
        );
        for line in out.lines() {
            assert!(
                !line.starts_with("FORGED"),
                "forged line {line:?} in:\n{out}"
            );
            assert!(!line.contains("job\" term=99"), "forged field in {line:?}");
        }
        assert!(
            out.contains(r#"job\" term=99 forged=\"yes\u{2028}\u{202e}"#),
            "{out}"
        );
    }

    /// Issue 23, item 4: an instance id with a control character is
    /// refused, and every instance id is logged escaped, this process's own
    /// and the ones read off the table (another holder's, written by any
    /// client).
    #[tokio::test(start_paused = true)]
    async fn instance_ids_are_refused_with_control_characters_and_logged_escaped() {
        let logs = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(logs.clone())
            .finish();
        lease_testkit::logs::every_callsite_interesting();
        let _guard = tracing::subscriber::set_default(subscriber);

        let table = Arc::new(Table::new());
        for bad in HOSTILE {
            let err = Leases::from_arc(table.clone())
                .with_instance(bad)
                .err()
                .unwrap();
            assert!(matches!(&err, Error::InvalidInstance { instance, .. } if instance == bad));
            assert!(!err.to_string().contains(char::is_control), "{err}");
        }

        // Another client wrote a hostile instance on two rows.
        let theirs = "web-9\nFORGED 2026-01-01T00:00:00Z  INFO line\x1b[2J";
        let _ = table.steal("lock:report", theirs, 15_000);
        let _ = table.steal("leader:billing", theirs, 15_000);
        // This process's own: valid, but Display would let it forge a field.
        let leases = Leases::from_arc(table.clone())
            .with_timings(timings())
            .with_instance("web-1\" term=99 forged=\"yes")
            .unwrap();

        let refused = leases
            .lock("report")
            .try_run(|_ctx| async {})
            .await
            .unwrap_err();
        assert!(refused.is_held());
        tracing::warn!(error = %refused, "what an application logs");
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let stopper = tokio::spawn(async move {
            sleep(ms(1_000)).await;
            stop.cancel();
        });
        leases
            .leader("billing")
            .run(&shutdown, |ctx| async move { ctx.cancelled().await })
            .await
            .unwrap();
        stopper.await.unwrap();
        let own = leases.claim("own").await.unwrap().unwrap();
        let holder = own.hold(&CancellationToken::new());
        sleep(ms(100)).await;
        holder.stop().await;
        own.release().await.unwrap();

        let out = logs.text();
        for event in [
            "lock held elsewhere",
            "new leader observed",
            "lease claimed",
            "what an application logs",
        ] {
            assert!(out.contains(event), "no {event:?} in:\n{out}");
        }
        assert!(
            !out.contains(|c: char| c != '\n' && c.is_control()),
            "{out:?}"
        );
        for line in out.lines() {
            assert!(
                !line.starts_with("FORGED"),
                "forged line {line:?} in:\n{out}"
            );
            assert!(
                !line.contains("web-1\" term=99"),
                "forged field in {line:?}"
            );
        }
        assert!(out.contains(r#"web-9\nFORGED"#), "{out}");
        assert!(out.contains(r#"web-1\" term=99 forged=\"yes"#), "{out}");
    }
}
