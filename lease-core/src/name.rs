//! Lease names: what can be claimed.

use crate::error::{Error, NameError};

/// The longest name a lease can have, in bytes: the width of the name column
/// (191 bytes is what a MySQL index on a 4-byte character set can hold).
pub const MAX_NAME_BYTES: usize = 191;

/// Reports whether `name` can be a coordinated name: not empty, and at most
/// [`MAX_NAME_BYTES`] bytes long.
///
/// Every claim checks its name again before any SQL, so no path reaches the
/// table with a name it cannot hold. A capability validates the names it
/// registers as it starts, so that a name that could never be claimed fails
/// the process at once instead of leaving work that silently never runs.
///
/// Names are compared exactly, byte for byte, on every backend: `job`, `JOB`
/// and `job ` are three names.
///
/// # Errors
///
/// [`Error::InvalidName`], saying whether the name is empty or too long.
///
/// # Examples
///
/// ```
/// use lease_core::{validate_name, MAX_NAME_BYTES};
///
/// assert!(validate_name("leader:billing").is_ok());
/// assert!(validate_name("").is_err());
/// assert!(validate_name(&"x".repeat(MAX_NAME_BYTES + 1)).is_err());
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
