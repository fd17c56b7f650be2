//! Helpers the workspace's own tests share, written once: unique names for
//! tables and leases, an error's chain on one line, and a `metrics`
//! recorder that keeps every sample.
//!
//! It depends on no crate of the workspace, so that any of them (lease-core
//! included) can take it as a dev-dependency. It is not published: the
//! helpers a third-party backend needs (the suite, the proxy, the URL
//! policy) live in `lease-conformance`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod metrics;

use std::error::Error;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A name no other test, process or run uses: `{prefix}{unix secs}_{pid}_{n}_{nanos}`,
/// ASCII letters, digits and underscores after the prefix, so it serves as
/// a table name when the prefix does. The creation time leads, so that a
/// later run can tell a stale one ([`is_stale`]).
///
/// ```
/// let a = lease_testkit::unique("lpt_");
/// let b = lease_testkit::unique("lpt_");
/// assert!(a.starts_with("lpt_") && a != b);
/// ```
pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    format!(
        "{prefix}{}_{}_{n}_{:x}",
        now.as_secs(),
        std::process::id(),
        now.subsec_nanos() & 0xffff
    )
}

/// Whether `name`, made by [`unique`] with `prefix`, was made more than
/// `older_than` ago. A name of another shape is not stale.
///
/// ```
/// use std::time::Duration;
///
/// assert!(lease_testkit::is_stale("lpt_1000_1_0_0", "lpt_", Duration::from_secs(60)));
/// assert!(!lease_testkit::is_stale(&lease_testkit::unique("lpt_"), "lpt_", Duration::from_secs(60)));
/// assert!(!lease_testkit::is_stale("other_1000", "lpt_", Duration::from_secs(60)));
/// ```
pub fn is_stale(name: &str, prefix: &str, older_than: Duration) -> bool {
    let Some(secs) = name
        .strip_prefix(prefix)
        .and_then(|rest| rest.split('_').next())
        .and_then(|secs| secs.parse::<u64>().ok())
    else {
        return false;
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    now.as_secs().saturating_sub(secs) > older_than.as_secs()
}

/// An error and every source, each shown with `Display` and `Debug`,
/// separated by ` | `: what a test searches for a secret or a cause.
///
/// ```
/// let err = std::io::Error::other("refused");
/// assert!(lease_testkit::chain(&err).contains("refused"));
/// ```
pub fn chain(err: &dyn Error) -> String {
    let mut out = format!("{err} | {err:?}");
    let mut source = err.source();
    while let Some(e) = source {
        let _ = write!(out, " | {e} | {e:?}");
        source = e.source();
    }
    out
}
