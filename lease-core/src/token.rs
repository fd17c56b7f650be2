//! Holder tokens and this process's instance id.

use std::fmt;
use std::sync::OnceLock;

use crate::error::Error;

/// A holder token: the secret a claim mints and every later statement of
/// the tenure proves itself with (renew, verify, release, finish, the
/// guard). Whoever has it can renew or release the lease, so it never
/// reaches a log: its `Debug` shows a placeholder, and it has no `Display`.
///
/// The lease table keeps it in its `holder` column. A backend binds it with
/// [`expose`](Token::expose); nothing else should read it.
///
/// ```
/// use lease_core::Token;
///
/// let token = Token::new("0123456789abcdef0123456789abcdef");
/// assert_eq!(format!("{token:?}"), "Token(<secret>)");
/// assert_eq!(token.expose(), "0123456789abcdef0123456789abcdef");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token<'a>(&'a str);

impl<'a> Token<'a> {
    /// The token held in `secret` (a backend reading its own rows, a test).
    #[must_use]
    pub const fn new(secret: &'a str) -> Self {
        Token(secret)
    }

    /// The token's text, to bind as a statement parameter. Never log it.
    #[must_use]
    pub const fn expose(self) -> &'a str {
        self.0
    }
}

impl fmt::Debug for Token<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<secret>)")
    }
}

/// Mints a holder token: 16 bytes from the operating system's CSPRNG, as 32
/// lowercase hex digits. Every claim gets a new one, so a token is never
/// reused and a stale holder can never match its successor's row.
pub(crate) fn new_token() -> Result<String, Error> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(Error::Entropy)?;
    Ok(hex(&bytes))
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

/// The longest host name part of the default instance id, in characters.
const MAX_HOST_CHARS: usize = 64;

/// The longest instance id, in characters: what MySQL's `instance` column
/// (`VARCHAR(255)`) holds.
pub const MAX_INSTANCE_CHARS: usize = 255;

/// The environment variable a coordinator reads its instance id from when
/// it is set: see [`Leases::with_instance`](crate::Leases::with_instance).
pub const INSTANCE_VAR: &str = "LEASE_INSTANCE";

/// This process's default instance id, `<hostname>:<process id>`
/// (`web-1:4242`): written beside every claim, so that a log line or a row
/// of the lease table tells which process holds a name. A coordinator
/// uses it unless [`INSTANCE_VAR`] is set or it was given another
/// ([`Leases::with_instance`](crate::Leases::with_instance)).
///
/// The host name is cut to 64 characters, and its control characters (an
/// odd host name could hold one) become `?`. The instance id is for
/// reading, never a credential (each claim's holder token is): two
/// processes showing the same id (a process id reused after a restart)
/// still hold their leases apart.
///
/// ```
/// let id = lease_core::instance_id();
/// let (host, pid) = id.rsplit_once(':').unwrap();
/// assert!(!host.is_empty());
/// assert_eq!(pid, std::process::id().to_string());
/// ```
pub fn instance_id() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        let host = gethostname::gethostname();
        let host = host.to_string_lossy();
        let host: String = host
            .chars()
            .take(MAX_HOST_CHARS)
            .map(|c| if c.is_control() { '?' } else { c })
            .collect();
        let host = if host.is_empty() {
            "localhost".into()
        } else {
            host
        };
        format!("{host}:{}", std::process::id())
    })
}

/// Checks an instance id: not empty, at most [`MAX_INSTANCE_CHARS`]
/// characters, no control character.
pub(crate) fn validate_instance(instance: &str, origin: &'static str) -> Result<(), Error> {
    let refuse = |reason: String| {
        Err(Error::InvalidInstance {
            instance: instance.to_owned(),
            origin,
            reason,
        })
    };
    if instance.is_empty() {
        return refuse("it is empty".to_owned());
    }
    if let Some((at, c)) = instance.char_indices().find(|(_, c)| c.is_control()) {
        return refuse(format!(
            "it holds the control character U+{:04X} at byte {at}",
            u32::from(c)
        ));
    }
    let chars = instance.chars().count();
    if chars > MAX_INSTANCE_CHARS {
        return refuse(format!(
            "it is {chars} characters long, over the limit of {MAX_INSTANCE_CHARS}"
        ));
    }
    Ok(())
}

/// The instance id a new coordinator starts with: [`INSTANCE_VAR`] when it
/// is set and valid, else [`instance_id`]. A value that is refused is not
/// used: the default stands in, and a warning says why.
pub(crate) fn default_instance() -> String {
    match std::env::var(INSTANCE_VAR) {
        Ok(value) => match validate_instance(&value, "the environment variable LEASE_INSTANCE") {
            Ok(()) => value,
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    instance = ?instance_id(),
                    "LEASE_INSTANCE is refused: the default instance id stands in"
                );
                instance_id().to_owned()
            }
        },
        Err(std::env::VarError::NotPresent) => instance_id().to_owned(),
        Err(std::env::VarError::NotUnicode(_)) => {
            tracing::warn!(
                instance = ?instance_id(),
                "LEASE_INSTANCE is not valid UTF-8: the default instance id stands in"
            );
            instance_id().to_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_32_lowercase_hex_and_new_every_time() {
        let a = new_token().unwrap();
        let b = new_token().unwrap();
        assert_eq!(a.len(), 32);
        assert!(
            a.bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
        );
        assert_ne!(a, b);
    }

    #[test]
    fn hex_is_lowercase_and_padded() {
        assert_eq!(hex(&[0x00, 0x0f, 0xab, 0xff]), "000fabff");
    }

    #[test]
    fn instance_id_is_host_colon_pid_and_stable() {
        let id = instance_id();
        let (host, pid) = id.rsplit_once(':').unwrap();
        assert!(!host.is_empty());
        assert!(!host.contains(char::is_control));
        assert_eq!(pid, std::process::id().to_string());
        assert!(std::ptr::eq(id, instance_id()));
    }

    #[test]
    fn instance_ids_with_control_characters_are_refused() {
        for ok in ["web-1:4242", "pod web-7 \"blue\"", "ü", &"x".repeat(255)] {
            validate_instance(ok, "test").unwrap();
        }
        let err = validate_instance("web-1\nFORGED", "Leases::with_instance").unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"invalid instance id "web-1\nFORGED" (Leases::with_instance): it holds the control character U+000A at byte 5"#
        );
        assert!(!err.is_retryable());
        for bad in ["", "a\u{1b}[2J", "a\u{85}", "a\0"] {
            let err = validate_instance(bad, "test").unwrap_err();
            assert!(matches!(err, Error::InvalidInstance { .. }), "{bad:?}");
            assert!(!err.to_string().contains(char::is_control), "{err}");
        }
        let err = validate_instance(&"é".repeat(256), "test").unwrap_err();
        assert!(err.to_string().contains("256 characters long"), "{err}");
    }

    /// `LEASE_INSTANCE` names the instance when it is set and valid; a
    /// refused one leaves the default. Run in a child process of this test
    /// binary, with the variable set there (this process's environment is
    /// shared by every test).
    #[test]
    fn lease_instance_is_read_from_the_environment() {
        const CHILD: &str = "LEASE_TEST_INSTANCE_EXPECTED";
        if let Ok(expected) = std::env::var(CHILD) {
            let leases =
                crate::Leases::from_arc(std::sync::Arc::new(crate::memtable::MemTable::new()));
            let expected = if expected == "the default" {
                instance_id().to_owned()
            } else {
                expected
            };
            assert_eq!(leases.instance(), expected);
            return;
        }
        let me = std::env::current_exe().unwrap();
        for (value, expected) in [
            ("web-7", "web-7"),
            ("pod web-7 \"blue\"", "pod web-7 \"blue\""),
            ("web-7\nFORGED", "the default"),
            ("", "the default"),
        ] {
            let out = std::process::Command::new(&me)
                .args([
                    "--exact",
                    "token::tests::lease_instance_is_read_from_the_environment",
                    "--nocapture",
                ])
                .env(INSTANCE_VAR, value)
                .env(CHILD, expected)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "LEASE_INSTANCE={value:?}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                String::from_utf8_lossy(&out.stdout).contains("1 passed"),
                "the child ran the test"
            );
        }
    }
}
