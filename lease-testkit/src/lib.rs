//! Helpers the workspace's own tests share, written once: unique names for
//! tables and leases, a guard that cleans up after a test (drops its
//! table), an error's chain on one line, a `metrics` recorder that keeps
//! every sample, URL helpers, and the history checker:
//!
//! - [`history`]: the events of a run (claims, tenures, their ends), one JSON
//!   line each;
//! - [`json`]: the flat JSON objects of a history, written and read by hand
//!   (no serde: one line format does not earn its build time);
//! - [`check`]: the checker, which reads a history and names every violation
//!   of the protocol's guarantees (no overlap, terms, stepping down,
//!   instants). lease-bench's soak judges its runs with it, and
//!   lease-scheduler's tests their rounds.
//!
//! It depends on no crate of the workspace, so that any of them (lease-core
//! included) can take it as a dev-dependency. It is not published: the
//! helpers a third-party backend needs (the suite, the proxy, the URL
//! policy) live in `lease-conformance`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod check;
pub mod history;
pub mod json;
pub mod logs;
pub mod metrics;
pub mod url;

use std::error::Error;
use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;
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

/// The bytes of the write-ahead log of the SQLite database file
/// `database` (its `-wal` file; 0 when there is none): every commit appends
/// its pages to it until a checkpoint lets it start over.
#[must_use]
pub fn sqlite_wal_bytes(database: &std::path::Path) -> u64 {
    let mut wal = database.as_os_str().to_owned();
    wal.push("-wal");
    std::fs::metadata(std::path::PathBuf::from(wal)).map_or(0, |m| m.len())
}

/// The SQLite writer's log frame for a page of `page_size` bytes: the page
/// and its 24-byte frame header, the unit [`sqlite_wal_bytes`] grows by.
#[must_use]
pub fn sqlite_wal_frame(page_size: u64) -> u64 {
    page_size + 24
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
/// Not `lease_core::Chain`, the printer logs and messages use: that one
/// shows each source's `Display` only, while a secret can hide in a
/// driver error's `Debug` (which `lease_core::Error`'s own `Debug` does not
/// reach), so the tests that keep passwords out of errors search both.
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

/// An async clean-up (dropping a test's table, say) run to its end when the
/// guard is dropped, wherever that happens: on a thread of its own, with a
/// runtime of its own, joined before `drop` returns (a test's runtime may
/// be shutting down, or be the current-thread one that the clean-up's
/// connections would need). A conformance factory returns it beside the
/// store it cleans up after (`lease_conformance::factory`): the suite drops
/// it once the case is over and its runtime shut down.
///
/// ```
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use std::sync::Arc;
///
/// let done = Arc::new(AtomicBool::new(false));
/// let flag = done.clone();
/// drop(lease_testkit::Cleanup::new(move || async move {
///     flag.store(true, Ordering::SeqCst);
/// }));
/// assert!(done.load(Ordering::SeqCst));
/// ```
pub struct Cleanup(Option<CleanupFn>);

/// The clean-up a [`Cleanup`] runs.
type CleanupFn = Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

impl Cleanup {
    /// A guard that runs `cleanup()` when dropped.
    pub fn new<F, Fut>(cleanup: F) -> Self
    where
        F: FnOnce() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        Cleanup(Some(Box::new(move || Box::pin(cleanup()))))
    }
}

impl std::fmt::Debug for Cleanup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cleanup")
            .field("pending", &self.0.is_some())
            .finish()
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let Some(cleanup) = self.0.take() else {
            return;
        };
        let ran = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the clean-up");
            runtime.block_on(async move {
                // Bounded: a clean-up must not hang a test run.
                let _ = tokio::time::timeout(Duration::from_secs(10), cleanup()).await;
            });
        })
        .join();
        if ran.is_err() {
            eprintln!("a test clean-up panicked");
        }
    }
}
