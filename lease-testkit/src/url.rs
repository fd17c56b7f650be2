//! Database URLs for tests: a parameter added, another user.

/// `url` with the query parameter `param` (`key=value`) added.
///
/// ```
/// use lease_testkit::url::with_param;
///
/// assert_eq!(with_param("postgres://h/db", "sslmode=disable"), "postgres://h/db?sslmode=disable");
/// assert_eq!(with_param("mysql://h/db?a=1", "b=2"), "mysql://h/db?a=1&b=2");
/// ```
#[must_use]
pub fn with_param(url: &str, param: &str) -> String {
    if url.contains('?') {
        format!("{url}&{param}")
    } else {
        format!("{url}?{param}")
    }
}

/// `url` with `user` and `password` in place of its own credentials (or
/// added where it has none); everything else as it was.
///
/// # Panics
///
/// When `url` has no `scheme://`.
///
/// ```
/// use lease_testkit::url::url_as;
///
/// assert_eq!(
///     url_as("postgres://postgres@127.0.0.1:5432/test", "ro", "pw"),
///     "postgres://ro:pw@127.0.0.1:5432/test"
/// );
/// assert_eq!(url_as("mysql://h/db?x=1", "u", "p"), "mysql://u:p@h/db?x=1");
/// ```
#[must_use]
pub fn url_as(url: &str, user: &str, password: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL with a scheme");
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let rest = match rest[..authority_end].rfind('@') {
        Some(at) => &rest[at + 1..],
        None => rest,
    };
    format!("{scheme}://{user}:{password}@{rest}")
}
