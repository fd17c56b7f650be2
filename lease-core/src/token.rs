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

/// The longest host name part of an instance id, in characters.
const MAX_HOST_CHARS: usize = 64;

/// This process's instance id, `<hostname>-<8 hex digits>`: drawn once per
/// process and written beside every claim, so that a log line or a row of the
/// lease table tells which process holds a name.
///
/// The host name is cut to 64 characters; should the OS random number
/// generator fail, the process id stands in for the random part.
pub fn instance_id() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        let host = gethostname::gethostname();
        let host = host.to_string_lossy();
        let host: String = host.chars().take(MAX_HOST_CHARS).collect();
        let host = if host.is_empty() {
            "localhost".into()
        } else {
            host
        };
        let mut bytes = [0u8; 4];
        let suffix = match getrandom::fill(&mut bytes) {
            Ok(()) => hex(&bytes),
            Err(_) => format!("{:08x}", std::process::id()),
        };
        format!("{host}-{suffix}")
    })
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
    fn instance_id_is_host_dash_8_hex_and_stable() {
        let id = instance_id();
        let (host, suffix) = id.rsplit_once('-').unwrap();
        assert!(!host.is_empty());
        assert_eq!(suffix.len(), 8);
        assert!(suffix.bytes().all(|c| c.is_ascii_hexdigit()));
        assert!(std::ptr::eq(id, instance_id()));
    }
}
