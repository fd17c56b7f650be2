//! What a case runs on, and how a case is run.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lease_core::{LeaseStore, Leases, Timings};

use crate::counting::{Counter, CountingStore};
use crate::intercept::Intercepted;

/// What a factory gives a case: a fresh store of the backend under test,
/// and the guard that cleans up after it (drops its table, removes its
/// directory), boxed. The suite drops the guard once the case is over and
/// its runtime shut down, so after every clone of the store the case made.
pub type Fresh = (Arc<dyn LeaseStore>, Box<dyn Any + Send>);

/// A store factory, boxed (see [`factory`]): what [`run_case`] and
/// [`Ctx::fresh_store`] call.
pub type Factory =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Option<Fresh>> + Send>> + Send + Sync>;

/// The guards of the stores a case was given, dropped after the case.
type Guards = Arc<Mutex<Vec<Box<dyn Any + Send>>>>;

/// A case of the suite, as the [`CASES`](crate::CASES) table holds it.
pub type CaseFn = fn(Ctx) -> Pin<Box<dyn Future<Output = ()> + Send>>;

/// The lease duration of [`Ctx::short_leases`].
pub const SHORT_LEASE: Duration = Duration::from_millis(400);

/// What a case runs on: a fresh, migrated store of the backend under test,
/// seen through a counter of the statements that reach it, and a prefix that
/// makes every name the case uses its own.
pub struct Ctx {
    store: Arc<CountingStore>,
    factory: Factory,
    guards: Guards,
    prefix: String,
    instances: AtomicU64,
}

impl fmt::Debug for Ctx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ctx")
            .field("store", &self.store)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl Ctx {
    /// The store under test, counting the statements that reach it.
    pub fn store(&self) -> Arc<dyn LeaseStore> {
        self.store.clone()
    }

    /// How many store methods have been called so far in this case.
    pub fn statements(&self) -> u64 {
        self.store.hook().calls()
    }

    /// A name no other case, and no other run, uses: `<prefix>:<label>`.
    pub fn name(&self, label: &str) -> String {
        format!("{}:{label}", self.prefix)
    }

    /// A coordinator with the protocol's default timings (a 15 s lease:
    /// nothing expires during a case), claiming as a process of its own.
    pub fn leases(&self) -> Leases {
        self.leases_with(Timings::default())
    }

    /// A coordinator whose leases last [`SHORT_LEASE`], for cases that wait
    /// for an expiry.
    pub fn short_leases(&self) -> Leases {
        self.leases_with(short_timings())
    }

    /// A coordinator whose leases last [`HELD_LEASE`] (see
    /// [`held_timings`]), for cases whose holder must keep its lease while
    /// they watch, even on a loaded machine.
    pub fn held_leases(&self) -> Leases {
        self.leases_with(held_timings())
    }

    /// A coordinator with `timings`, claiming as a process of its own.
    ///
    /// The cases run coordinators of several timings over the one store the
    /// factory built, so they take their timings unchecked against the
    /// store's server-side bounds
    /// ([`Leases::with_timings_unchecked`]).
    pub fn leases_with(&self, timings: Timings) -> Leases {
        let n = self.instances.fetch_add(1, Ordering::Relaxed);
        Leases::from_arc(self.store())
            .with_timings_unchecked(timings)
            .with_instance(format!("conformance-{n}"))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Sleeps until a lease of [`Ctx::short_leases`] claimed or renewed
    /// before the call has surely expired by the database clock.
    pub async fn sleep_past_short_lease(&self) {
        tokio::time::sleep(SHORT_LEASE + SHORT_LEASE / 2).await;
    }

    /// Another fresh store of the backend under test, on a table of its own,
    /// not migrated and not counted. For cases about creating the table. Its
    /// guard is dropped with the case's own, after the case.
    ///
    /// # Panics
    ///
    /// When the factory, which gave this case its store, gives none now.
    pub async fn fresh_store(&self) -> Arc<dyn LeaseStore> {
        match (self.factory)().await {
            Some((store, guard)) => {
                keep(&self.guards, guard);
                store
            }
            None => panic!("the backend's factory gave a store for the case, then none"),
        }
    }
}

/// The lease duration of [`Ctx::held_leases`].
pub const HELD_LEASE: Duration = Duration::from_millis(4_000);

/// The timings of cases whose holder must keep its lease while the case
/// watches (the renewals' liveness, a lock's or a leader's tenure): a
/// [`HELD_LEASE`] lease renewed every 250 ms, with a local deadline of 2 s
/// (so a holder steps down 2 s before the database frees the name).
///
/// A holder steps down when no renewal succeeds within its local deadline,
/// and that is right: it cannot tell a database that does not answer from a
/// runtime that gives its renewal task no turn. On a loaded machine (a
/// parallel build on two cores, a disk busy with fsyncs) a task can wait
/// hundreds of milliseconds for its turn, so these timings leave two seconds
/// of it before a case reads a loss; a case that still sees one says so in
/// its failure text (see [`deadline_note`]).
pub fn held_timings() -> Timings {
    match Timings::builder()
        .lease(HELD_LEASE)
        .renew(Duration::from_millis(250))
        .deadline(Duration::from_millis(2_000))
        .grace(Duration::from_millis(500))
        .build()
    {
        Ok(t) => t,
        Err(e) => panic!("the suite's held timings are invalid: {e}"),
    }
}

/// What a case adds to its failure text when a holder lost its lease to
/// its local deadline (`LostCause::DeadlineExceeded`) under `timings`: the
/// backend did not answer a renewal in time, again and again, or the
/// process was starved of CPU or disk for the whole deadline, which is
/// the machine's fault, not the backend's.
pub fn deadline_note(timings: &Timings) -> String {
    format!(
        "no renewal succeeded within the {:?} local deadline (each attempt bounded by {:?}): \
         either renew failed or hung again and again (the backend's fault), or the test \
         process was starved of CPU or disk for that long (a loaded machine: run the suite \
         again with fewer tests at once, e.g. --test-threads 2)",
        timings.deadline(),
        timings.deadline() / 2
    )
}

/// The timings of [`Ctx::short_leases`].
pub fn short_timings() -> Timings {
    match Timings::builder()
        .lease(SHORT_LEASE)
        .renew(Duration::from_millis(50))
        .deadline(Duration::from_millis(250))
        .grace(Duration::from_millis(150))
        .build()
    {
        Ok(t) => t,
        Err(e) => panic!("the suite's short timings are invalid: {e}"),
    }
}

/// The timings of guarded-transaction tests: a lease of 800 ms (renew
/// 100 ms, local deadline 500 ms, grace 200 ms), so that a test can let it
/// run out while a transaction is stalled, and each call of the coordinator
/// is bounded by 1 s. Shared by the backends' fencing tests.
pub fn fence_timings() -> Timings {
    match Timings::builder()
        .lease(Duration::from_millis(800))
        .renew(Duration::from_millis(100))
        .deadline(Duration::from_millis(500))
        .grace(Duration::from_millis(200))
        .build()
    {
        Ok(t) => t,
        Err(e) => panic!("the fencing tests' timings are invalid: {e}"),
    }
}

/// A case that failed: its name and what it asserted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseFailure {
    /// The case's name.
    pub case: &'static str,
    /// The panic message of the failed assertion.
    pub message: String,
}

impl fmt::Display for CaseFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "conformance case `{}` failed: {}",
            self.case, self.message
        )
    }
}

impl std::error::Error for CaseFailure {}

/// What running one case came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every assertion held.
    Passed,
    /// The factory gave no store: the backend is not configured here.
    Skipped,
    /// An assertion failed.
    Failed(CaseFailure),
}

/// Boxes a factory function for [`run_case`]: `f` gives a fresh store of
/// the backend under test, on a table of its own and not yet migrated,
/// with the guard that cleans up after it (`()` when there is nothing to
/// clean up), or `None` when the backend is not configured here.
///
/// The guard is openraft's shape for a store builder: the suite keeps it
/// for the whole case and drops it once the case is over and its runtime
/// shut down, so a guard that drops the table never pulls it from under a
/// task of the case.
///
/// ```
/// use std::sync::Arc;
/// use lease_conformance::{Outcome, case, factory, run_case};
/// use lease_conformance::reference::MemoryStore;
/// use lease_core::LeaseStore;
///
/// /// Says when it is dropped.
/// struct Guard(std::sync::mpsc::Sender<()>);
///
/// impl Drop for Guard {
///     fn drop(&mut self) {
///         let _ = self.0.send(());
///     }
/// }
///
/// let (dropped, after) = std::sync::mpsc::channel();
/// let fresh = factory(move || {
///     let guard = Guard(dropped.clone());
///     async move { Some((Arc::new(MemoryStore::new()) as Arc<dyn LeaseStore>, guard)) }
/// });
/// let name = "claim_of_new_name_starts_at_term_one";
/// assert_eq!(run_case(name, case(name).unwrap(), &fresh), Outcome::Passed);
/// assert!(after.try_recv().is_ok(), "dropped once the case was over");
/// ```
pub fn factory<F, Fut, G>(f: F) -> Factory
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Option<(Arc<dyn LeaseStore>, G)>> + Send + 'static,
    G: Send + 'static,
{
    Arc::new(move || {
        let fresh = f();
        Box::pin(async move {
            fresh
                .await
                .map(|(store, guard)| (store, Box::new(guard) as Box<dyn Any + Send>))
        })
    })
}

/// Keeps `guard` with the case's guards.
fn keep(guards: &Guards, guard: Box<dyn Any + Send>) {
    guards
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(guard);
}

/// Runs the case `case` (named `name`) on a runtime of its own, against a
/// fresh store from `factory`, migrated first; drops the store's guard once
/// the case is over and the runtime shut down.
pub fn run_case(name: &'static str, case: CaseFn, factory: &Factory) -> Outcome {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return Outcome::Failed(CaseFailure {
                case: name,
                message: format!("could not start a tokio runtime: {e}"),
            });
        }
    };
    let factory = factory.clone();
    let guards = Guards::default();
    let kept = guards.clone();
    let outcome = runtime.block_on(async move {
        let task = tokio::spawn(async move {
            let Some((store, guard)) = factory().await else {
                return false;
            };
            keep(&kept, guard);
            if let Err(e) = store.migrate().await {
                panic!("migrate() failed on the fresh store: {e}");
            }
            let ctx = Ctx {
                store: Arc::new(Intercepted::new(store, Counter::default())),
                factory,
                guards: kept,
                prefix: format!("{name}-{}", unique_suffix()),
                instances: AtomicU64::new(0),
            };
            case(ctx).await;
            true
        });
        task.await
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    // After the runtime: every task of the case, and every clone of its
    // stores, is gone.
    drop(std::mem::take(
        &mut *guards.lock().unwrap_or_else(PoisonError::into_inner),
    ));
    match outcome {
        Ok(true) => Outcome::Passed,
        Ok(false) => Outcome::Skipped,
        Err(e) => Outcome::Failed(CaseFailure {
            case: name,
            message: if e.is_panic() {
                panic_message(e.into_panic())
            } else {
                "the case's task was cancelled".to_owned()
            },
        }),
    }
}

/// Runs the case and panics with its failure: what each generated `#[test]`
/// does.
pub fn run_test(name: &'static str, case: CaseFn, factory: &Factory) {
    match run_case(name, case, factory) {
        Outcome::Passed => {}
        Outcome::Skipped => {
            eprintln!("conformance case `{name}` skipped: the backend is not configured");
        }
        Outcome::Failed(failure) => panic!("{failure}"),
    }
}

/// Runs every case of the suite against `factory`, one after another, and
/// returns each one's outcome, in the order of [`CASES`](crate::CASES).
pub fn run_all(factory: &Factory) -> Vec<(&'static str, Outcome)> {
    crate::CASES
        .iter()
        .map(|&(name, case)| (name, run_case(name, case, factory)))
        .collect()
}

/// The case of the suite called `name`.
pub fn case(name: &str) -> Option<CaseFn> {
    crate::CASES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|&(_, case)| case)
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(s) => *s,
        Err(payload) => match payload.downcast::<&'static str>() {
            Ok(s) => (*s).to_owned(),
            Err(_) => "the case panicked with a value that is not a string".to_owned(),
        },
    }
}

fn unique_suffix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{:x}{:x}{n}", std::process::id(), nanos & 0xffff_ffff)
}

/// The URL of the database a backend's tests run against, from the
/// environment variable `var`, under the suite's policy:
///
/// - set: the URL; a database that then cannot be reached fails the tests;
/// - unset, with `CI=true`: panics, so that CI never passes a backend it did
///   not test;
/// - unset otherwise: `None` after a note on stderr; the tests skip.
///
/// # Panics
///
/// When `var` is unset and `CI` is `true`.
pub fn env_url(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") => {
            panic!("{var} is not set, and CI=true forbids skipping the tests that need it")
        }
        _ => {
            eprintln!("{var} is not set: skipping the tests that need this database");
            None
        }
    }
}
