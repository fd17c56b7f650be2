//! Scenarios for a backend that reaches its database over the network: a
//! holder cut off from the server steps down before the server frees its
//! name, and connections cut under a holder cost it nothing.
//!
//! Each scenario takes two coordinators on the **same table** of the backend
//! under test: `proxied`, whose store connects to the server through a
//! [`Proxy`], and `direct`, whose store connects to the server itself. The
//! holder claims through `proxied`; a rival, and the database's clock, are
//! read through `direct`. The scenario sets its own [`timings`] and instance
//! ids on both, migrates the table through `direct`, and uses names of its
//! own, so any table will do; it leaves the proxy running (the caller shuts it
//! down) and the table in place (the caller drops it).
//!
//! A failed assertion panics with a message that says what the backend got
//! wrong, as the cases of the suite do.
//!
//! A backend configured by URL gets every scenario as a test of its own
//! with [`network_tests!`](crate::network_tests): implement
//! [`NetworkStores`] for a set-up of the two stores and the proxy, and name
//! an async function that builds it for a [`Scenario`]:
//!
//! ```ignore
//! use lease_conformance::network::{self, NetworkStores, Scenario};
//! use lease_conformance::proxy::Proxy;
//! use lease_core::Leases;
//!
//! struct Stores { direct: MyStore, proxied: MyStore, proxy: Proxy, table: String }
//!
//! #[async_trait::async_trait]
//! impl NetworkStores for Stores {
//!     fn proxied(&self) -> Leases { Leases::new(self.proxied.clone()) }
//!     fn direct(&self) -> Leases { Leases::new(self.direct.clone()) }
//!     fn proxy(&self) -> &Proxy { &self.proxy }
//!     async fn close(self) { self.proxy.shutdown().await; /* drop the table */ }
//! }
//!
//! async fn connect(url: &str, _scenario: Scenario) -> Stores {
//!     let table = unique_table();
//!     let direct = MyStore::connect(url).await.unwrap().with_table(&table);
//!     let (proxy, proxied_url) = network::proxy_for_url(url, 5555).await.unwrap();
//!     let proxied = MyStore::connect(&proxied_url).await.unwrap().with_table(&table);
//!     Stores { direct, proxied, proxy, table }
//! }
//!
//! lease_conformance::network_tests!(backend: "MyDB", url: "MY_DB_URL", connect: connect);
//! ```
//!
//! A driver that prefers a UNIX socket (mysql_async does by default) bypasses
//! the proxy: turn that off, or the scenarios fail (they check that the
//! holder's store connected through the proxy, and that pausing it cut the
//! holder off).

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lease_core::{CancellationToken, EndCause, Leases, LostCause, Timings};
use tokio::time::{Instant, sleep, timeout};

use crate::cases::{claimed, db_now, ok};
use crate::proxy::Proxy;

/// The scenario a backend's set-up is for, so that it can differ (a pool
/// that keeps its connections for [`LateRenewals`](Scenario::LateRenewals),
/// say).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Scenario {
    /// [`steps_down_before_the_name_is_free`].
    StepDown,
    /// [`late_renewals_do_not_outlive_a_step_down`].
    LateRenewals,
    /// [`connections_cut_under_the_holder_cost_it_nothing`].
    ConnectionsCut,
}

/// A backend's stores for the network scenarios: one whose connections go
/// through a [`Proxy`], one straight to the server, on one table.
#[async_trait::async_trait]
pub trait NetworkStores: Send + Sized {
    /// A coordinator on the store whose connections go through the proxy.
    fn proxied(&self) -> Leases;
    /// A coordinator on the store connected to the server itself.
    fn direct(&self) -> Leases;
    /// The proxy between the proxied store and the server.
    fn proxy(&self) -> &Proxy;
    /// Shuts the proxy down and drops the table.
    async fn close(self);
}

/// The [`NetworkStores`] most backends need: two stores of one backend on
/// one table, the `proxied` one connected through `proxy`, and how to drop
/// the table once the scenario is over.
///
/// ```ignore
/// async fn connect(url: &str, _scenario: Scenario) -> Pair<MyStore> {
///     let table = lease_testkit::unique("lst");
///     let direct = MyStore::builder(url)?.with_table(&table).connect().await?;
///     let (proxy, proxied_url) = proxy_for_url(url, 5432).await?;
///     let proxied = MyStore::builder(&proxied_url)?.with_table(&table).connect().await?;
///     Pair::new(direct, proxied, proxy, table, |direct, table| async move {
///         direct.drop_table(&table).await
///     })
/// }
/// ```
pub struct Pair<S> {
    /// The store connected to the server itself.
    pub direct: S,
    /// The store whose connections go through [`proxy`](Self::proxy).
    pub proxied: S,
    /// The proxy between the proxied store and the server.
    pub proxy: Proxy,
    /// The table both stores use.
    pub table: String,
    drop_table: DropTable<S>,
}

/// How a [`Pair`] drops its table: given the direct store and the table.
type DropTable<S> = Box<dyn FnOnce(S, String) -> lease_core::BoxFuture<'static, ()> + Send>;

impl<S> Pair<S> {
    /// The pair, and `drop_table(direct, table)` to run on
    /// [`close`](NetworkStores::close), after the proxy shuts down.
    pub fn new<F, Fut>(direct: S, proxied: S, proxy: Proxy, table: String, drop_table: F) -> Self
    where
        F: FnOnce(S, String) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        Pair {
            direct,
            proxied,
            proxy,
            table,
            drop_table: Box::new(move |direct, table| Box::pin(drop_table(direct, table))),
        }
    }
}

impl<S: fmt::Debug> fmt::Debug for Pair<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pair")
            .field("direct", &self.direct)
            .field("proxied", &self.proxied)
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl<S: lease_core::LeaseStore + Clone> NetworkStores for Pair<S> {
    fn proxied(&self) -> Leases {
        Leases::new(self.proxied.clone())
    }
    fn direct(&self) -> Leases {
        Leases::new(self.direct.clone())
    }
    fn proxy(&self) -> &Proxy {
        &self.proxy
    }
    async fn close(self) {
        self.proxy.shutdown().await;
        (self.drop_table)(self.direct, self.table).await;
    }
}

/// The network scenarios as tests, one `#[tokio::test]` each, for a backend
/// that implements [`NetworkStores`]: `connect` is an async function
/// `(url: &str, scenario: Scenario) -> impl NetworkStores`, `url` the
/// environment variable that names the server (see [`env_url`](crate::env_url)).
///
/// ```ignore
/// lease_conformance::network_tests!(backend: "MyDB", url: "MY_DB_URL", connect: connect);
/// ```
#[macro_export]
macro_rules! network_tests {
    (backend: $backend:expr, url: $env:expr, connect: $connect:path $(,)?) => {
        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn holder_steps_down_well_before_the_database_frees_the_name() {
            use $crate::network::NetworkStores as _;
            let Some(url) = $crate::env_url($env) else {
                return;
            };
            let stores = $connect(&url, $crate::network::Scenario::StepDown).await;
            let _ = $crate::network::steps_down_before_the_name_is_free(
                $backend,
                stores.proxied(),
                stores.direct(),
                stores.proxy(),
            )
            .await;
            stores.close().await;
        }

        /// Renewals the holder abandoned, held back by the stalled path,
        /// must not renew the lease for nobody once it heals.
        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn late_renewals_do_not_outlive_a_step_down() {
            use $crate::network::NetworkStores as _;
            let Some(url) = $crate::env_url($env) else {
                return;
            };
            let stores = $connect(&url, $crate::network::Scenario::LateRenewals).await;
            let _ = $crate::network::late_renewals_do_not_outlive_a_step_down(
                $backend,
                stores.proxied(),
                stores.direct(),
                stores.proxy(),
            )
            .await;
            stores.close().await;
        }

        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn connections_cut_under_the_holder_cost_it_nothing() {
            use $crate::network::NetworkStores as _;
            let Some(url) = $crate::env_url($env) else {
                return;
            };
            let stores = $connect(&url, $crate::network::Scenario::ConnectionsCut).await;
            $crate::network::connections_cut_under_the_holder_cost_it_nothing(
                stores.proxied(),
                stores.direct(),
                stores.proxy(),
            )
            .await;
            stores.close().await;
        }
    };
}

/// How long the step-down scenario waits between two of a rival's claims
/// while it waits for the database to free the name: the margin it reports
/// is short of the true one by at most this and two statements' round trips.
const POLL: Duration = Duration::from_millis(2);

/// The timings of the holder in these scenarios: lease 4 s, renew every
/// 200 ms, local deadline 1.5 s, grace 500 ms.
///
/// The step-down scenario requires a margin of 90% of lease − deadline
/// (2.25 s) against the 2.5 s the protocol gives: 250 ms of slack for the
/// measurement itself on a loaded machine.
///
/// # Panics
///
/// Never: the timings are valid.
pub fn timings() -> Timings {
    match Timings::builder()
        .lease(Duration::from_millis(4_000))
        .renew(Duration::from_millis(200))
        .deadline(Duration::from_millis(1_500))
        .grace(Duration::from_millis(500))
        .build()
    {
        Ok(t) => t,
        Err(e) => panic!("the network scenarios' timings are invalid: {e}"),
    }
}

/// What [`steps_down_before_the_name_is_free`] measured, all of it after
/// its assertions held. Its [`Display`](fmt::Display) is the line the
/// scenario prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct StepDown {
    /// From the proxy pausing to the holder's context ending, by the
    /// process's monotonic clock.
    pub stepped_down: Duration,
    /// How long, by the database clock, the name stayed held after the
    /// holder stepped down, at least: the database refused a rival's claim
    /// this long after it read its clock as the holder's context ended.
    pub margin: Duration,
    /// By when, by the database clock, the name was free: a rival's claim
    /// succeeded before the database read its clock this long after the
    /// holder stepped down.
    pub freed_within: Duration,
    /// The least margin the scenario accepts: 90% of lease − local deadline.
    pub required: Duration,
    /// The holder's lease duration.
    pub lease: Duration,
    /// The holder's local deadline.
    pub deadline: Duration,
}

impl fmt::Display for StepDown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the holder's token ended {:?} after the proxy paused, {} ms before the database \
             frees the name (by the database clock: still held {} ms after, free within {} ms; \
             required: at least {:?}; lease {:?}, local deadline {:?})",
            self.stepped_down,
            self.margin.as_millis(),
            self.margin.as_millis(),
            self.freed_within.as_millis(),
            self.required,
            self.lease,
            self.deadline
        )
    }
}

/// A holder whose database goes out of reach steps down at its local
/// deadline, at least 90% of (lease − deadline) before the database frees
/// its name, and the database does free it, at its expiry, to a rival.
///
/// The holder claims through `proxied` and holds with [`timings`], renewing
/// through the proxy for longer than lease − deadline (so that the renewals,
/// not the claim, keep the name). Then the proxy [pauses](Proxy::pause):
/// connections stay open and statements hang, as across a network
/// partition. The holder's context must end, as
/// [`LostCause::DeadlineExceeded`], within twice its local deadline.
///
/// The margin is measured by the database's clock, through `direct`: the
/// database's now as the holder stepped down, against the database's now
/// read just before the last of a rival's claims that the database refused
/// (the rival claims every 2 ms until one succeeds). It can only come out
/// shorter than it is. The scenario prints it on stderr, after `backend`
/// (`cargo test -- --nocapture` shows it), and returns it.
///
/// Leaves the proxy paused.
///
/// # Panics
///
/// When the backend fails the scenario, with a message saying how; when a
/// statement through `direct` fails.
///
/// # Cancel safety
///
/// Not meant to be cancelled: dropping the future stops the holder's
/// renewals and leaves the name to expire.
pub async fn steps_down_before_the_name_is_free(
    backend: &str,
    proxied: Leases,
    direct: Leases,
    proxy: &Proxy,
) -> StepDown {
    let timings = timings();
    let leases = proxied
        .with_timings(timings)
        .with_instance("network-stepdown-holder")
        .unwrap_or_else(|e| panic!("{e}"));
    let rival = direct
        .with_instance("network-stepdown-rival")
        .unwrap_or_else(|e| panic!("{e}"));
    ok(rival.migrate().await, "migrate() through the direct store");
    let name = unique_name("stepdown");

    let handle = claimed(
        &leases,
        &name,
        "the name is the scenario's own, never claimed before",
    )
    .await;
    went_through(proxy, "the holder's claim");
    let holder = handle.hold(&CancellationToken::new());
    // Renew through the proxy for longer than lease - deadline, so that the
    // name is held by the renewals, not by the claim.
    sleep(timings.lease() - timings.deadline() + Duration::from_millis(500)).await;
    let ctx = holder.context().clone();
    assert!(
        !ctx.is_cancelled(),
        "the holder's lease ended while the proxy still forwarded ({:?}): {}",
        ctx.cause(),
        early_end(ctx.cause())
    );

    proxy.pause();
    let paused = Instant::now();
    if timeout(timings.deadline() * 2, ctx.cancelled())
        .await
        .is_err()
    {
        panic!(
            "the holder did not step down within {:?} (twice its local deadline) of the proxy \
             pausing: its renewals still reached the database, so the proxied store bypasses \
             the proxy (a driver that prefers the server's UNIX socket, as mysql_async does \
             unless prefer_socket=false, or a pool holding connections made elsewhere)",
            timings.deadline() * 2
        );
    }
    let stepped_down = paused.elapsed();
    assert_eq!(
        ctx.cause(),
        Some(EndCause::Lost(LostCause::DeadlineExceeded)),
        "a holder cut off from its database must step down at its local deadline: with the \
         proxy paused no renewal can answer, so no other cause is possible unless the store \
         reports a hung or failed statement as a lease found lost"
    );
    assert!(
        handle.lost(),
        "the handle must be marked lost once its holder stepped down"
    );

    // By the database's clock, on the direct store: how long the name stays
    // held after the holder stepped down. `held` is read before a claim the
    // database refused, so the margin can only come out smaller than it is.
    let stepped_down_at = db_now(&rival).await;
    let mut held = None;
    let freed = timeout(timings.lease() * 2, async {
        loop {
            let before = db_now(&rival).await;
            match ok(
                rival.claim(&name).await,
                "a rival's claim on the direct store",
            ) {
                Some(successor) => return successor,
                None => held = Some(before),
            }
            sleep(POLL).await;
        }
    })
    .await;
    let free_by = db_now(&rival).await;
    let Some(held) = held else {
        panic!(
            "a rival claimed the name as soon as the holder stepped down ({stepped_down:?} \
             after the proxy paused), although the holder's last renewal, sent less than its \
             {:?} local deadline before, gave it a {:?} lease: renew must set expires_at_ms = \
             now + lease_ms by the database clock, and claim must refuse a name whose \
             expires_at_ms > now",
            timings.deadline(),
            timings.lease()
        );
    };
    let Ok(successor) = freed else {
        panic!(
            "the name was still held {:?} (two leases) after its holder stepped down: claim \
             must take a name whose expires_at_ms <= now",
            timings.lease() * 2
        );
    };

    let margin_ms = held.as_millis() - stepped_down_at.as_millis();
    let required = (timings.lease() - timings.deadline()).mul_f64(0.9);
    let report = StepDown {
        stepped_down,
        margin: millis(margin_ms),
        freed_within: millis(free_by.as_millis() - stepped_down_at.as_millis()),
        required,
        lease: timings.lease(),
        deadline: timings.deadline(),
    };
    eprintln!("{backend} step-down: {report}");
    assert!(
        u128::try_from(margin_ms).is_ok_and(|m| m >= required.as_millis()),
        "the holder stepped down only {margin_ms} ms before the database freed the name; at \
         least {required:?} is required ({stepped_down:?} after the proxy paused, with a local \
         deadline of {:?} and a lease of {:?}): the store's statements must not outlast their \
         bound, and renew must set expires_at_ms = now + lease_ms from the database's now",
        timings.deadline(),
        timings.lease()
    );
    assert_eq!(
        successor.term(),
        2,
        "the rival's claim once the lease ran out must move the term from the holder's 1"
    );

    holder.stop().await;
    report
}

/// How long after the step-down [`late_renewals_do_not_outlive_a_step_down`]
/// restores the path: well before the database frees the name, so that the
/// renewals held back reach it while the lease still runs.
const HEAL_AFTER: Duration = Duration::from_millis(1_000);

/// Renewals held back by a stalled path, abandoned by the holder, do not keep
/// the name from a rival once the path heals: the name is free no later than
/// the lease the last successful renewal gave (plus 1 s of slack), by the
/// database's clock.
///
/// The holder claims through `proxied` and holds with [`timings`]; the
/// proxy [pauses](Proxy::pause), so the holder's renewals hang (their bytes
/// held back in the proxy) until it steps down at its local deadline; the
/// holder is [stopped](lease_core::Holder::stop), as an application does
/// once its work has ended; 1 s later the proxy
/// [resumes](Proxy::resume), and the held-back renewals reach the database
/// while the lease still runs there. A rival then claims through `direct`
/// every 10 ms: its claim must succeed within lease − deadline + 1 s (3.5 s)
/// of the step-down, by the database clock. A store whose late renewals
/// renew the lease keeps the name held by nobody for a whole lease after the
/// path healed (5 s after the step-down). Returns how long after the
/// step-down the name was free, by the database clock, and prints it after
/// `backend`.
///
/// # Panics
///
/// When the backend fails the scenario, with a message saying how; when a
/// statement through `direct` fails.
///
/// # Cancel safety
///
/// Not meant to be cancelled: dropping the future leaves the proxy paused or
/// the name held.
pub async fn late_renewals_do_not_outlive_a_step_down(
    backend: &str,
    proxied: Leases,
    direct: Leases,
    proxy: &Proxy,
) -> Duration {
    let timings = timings();
    let leases = proxied
        .with_timings(timings)
        .with_instance("network-late-holder")
        .unwrap_or_else(|e| panic!("{e}"));
    let rival = direct
        .with_instance("network-late-rival")
        .unwrap_or_else(|e| panic!("{e}"));
    ok(rival.migrate().await, "migrate() through the direct store");
    let name = unique_name("late");

    let handle = claimed(
        &leases,
        &name,
        "the name is the scenario's own, never claimed before",
    )
    .await;
    went_through(proxy, "the holder's claim");
    let holder = handle.hold(&CancellationToken::new());
    sleep(timings.lease() - timings.deadline() + Duration::from_millis(500)).await;
    let ctx = holder.context().clone();
    assert!(
        !ctx.is_cancelled(),
        "the holder's lease ended while the proxy still forwarded ({:?}): {}",
        ctx.cause(),
        early_end(ctx.cause())
    );

    proxy.pause();
    if timeout(timings.deadline() * 2, ctx.cancelled())
        .await
        .is_err()
    {
        panic!(
            "the holder did not step down within {:?} of the proxy pausing: the proxied \
             store bypasses the proxy",
            timings.deadline() * 2
        );
    }
    let stepped_down_at = db_now(&rival).await;
    assert_eq!(
        ctx.cause(),
        Some(EndCause::Lost(LostCause::DeadlineExceeded)),
        "a holder cut off from its database must step down at its local deadline"
    );
    holder.stop().await;
    sleep(HEAL_AFTER).await;
    proxy.resume();

    let freed = timeout(timings.lease() * 3, async {
        loop {
            if let Some(successor) = ok(
                rival.claim(&name).await,
                "a rival's claim on the direct store",
            ) {
                return successor;
            }
            sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let free_by = db_now(&rival).await;
    let allowed = timings.lease() - timings.deadline() + Duration::from_secs(1);
    let Ok(successor) = freed else {
        panic!(
            "the name was still held {:?} (three leases) after its holder stepped down",
            timings.lease() * 3
        );
    };
    let freed_after = millis(free_by.as_millis() - stepped_down_at.as_millis());
    eprintln!(
        "{backend} late renewals: the name was free {} ms after the holder stepped down (by the \
         database clock; the path healed {HEAL_AFTER:?} after it; allowed: {allowed:?})",
        freed_after.as_millis()
    );
    assert!(
        freed_after <= allowed,
        "the name was free only {freed_after:?} after its holder stepped down, by the database \
         clock, although the last renewal that succeeded gave it at most {:?} more: renewals \
         the holder had abandoned reached the database when the path healed, {HEAL_AFTER:?} \
         after the step-down, and renewed the lease for nobody. Make them harmless: the \
         stepped-down holder gives the name back (a release by its token) once the lease has \
         run out, which undoes a late renewal and makes any later one find the lease expired",
        timings.lease() - timings.deadline()
    );
    ok(
        successor.release().await,
        "the rival's release through the direct store",
    );
    freed_after
}

/// Connections cut under a holder, three times within its local deadline,
/// cost it nothing: its store connects again, its renewals go on, the name
/// stays held; the holder then releases it through the proxy.
///
/// The holder claims through `proxied` and holds with [`timings`]; the proxy
/// [cuts](Proxy::cut) every open connection every third of the local
/// deadline, three times, as a server restarting would. Then, a local
/// deadline later, the proxy must have accepted at least three new
/// connections, the holder's context must still run, and a rival's claim
/// through `direct` must be refused.
///
/// # Panics
///
/// When the backend fails the scenario, with a message saying how; when a
/// statement through `direct` fails.
///
/// # Cancel safety
///
/// Not meant to be cancelled: dropping the future stops the holder's
/// renewals and leaves the name to expire.
pub async fn connections_cut_under_the_holder_cost_it_nothing(
    proxied: Leases,
    direct: Leases,
    proxy: &Proxy,
) {
    let timings = timings();
    let leases = proxied
        .with_timings(timings)
        .with_instance("network-cut-holder")
        .unwrap_or_else(|e| panic!("{e}"));
    let rival = direct
        .with_instance("network-cut-rival")
        .unwrap_or_else(|e| panic!("{e}"));
    ok(rival.migrate().await, "migrate() through the direct store");
    let name = unique_name("cut");

    let handle = claimed(
        &leases,
        &name,
        "the name is the scenario's own, never claimed before",
    )
    .await;
    went_through(proxy, "the holder's claim");
    let holder = handle.hold(&CancellationToken::new());
    // Every connection dropped, three times over a local deadline: the
    // renewals that fail are tried again, on new connections.
    let before = proxy.accepted();
    for _ in 0..3 {
        sleep(timings.deadline() / 3).await;
        proxy.cut();
    }
    sleep(timings.deadline()).await;
    let after = proxy.accepted();
    assert!(
        after >= before + 3,
        "the holder's store should have reconnected after each of three cuts ({before} \
         connections through the proxy before, {after} after): its pool must discard a \
         connection the server closed and connect again"
    );
    let ctx = holder.context();
    assert!(
        !ctx.is_cancelled(),
        "the holder lost its lease to connections cut under it ({:?}): a statement on a \
         closed connection must fail at once rather than hang, and the next renewal, {:?} \
         later, must get a new connection; {}",
        ctx.cause(),
        timings.renew(),
        early_end(ctx.cause())
    );
    assert!(
        !handle.lost(),
        "the handle is marked lost, but its context still runs"
    );
    assert!(
        ok(
            rival.claim(&name).await,
            "a rival's claim on the direct store"
        )
        .is_none(),
        "a rival claimed the name after connections were cut under its holder, whose \
         context still runs: the renewals after the cuts must reach the database"
    );
    holder.stop().await;
    ok(
        handle.release().await,
        "release through the proxy after the cuts",
    );
}

/// The `host:port` of the server `url` names (`scheme://[user@]host[:port]/...`),
/// with `default_port` when it names none; `None` when it names no host.
///
/// ```
/// use lease_conformance::network::server_of;
///
/// assert_eq!(server_of("postgres://u:p@db/x", 5432).as_deref(), Some("db:5432"));
/// assert_eq!(server_of("mysql://root@[::1]:3307/t", 3306).as_deref(), Some("[::1]:3307"));
/// assert_eq!(server_of("sqlite:///tmp/db", 0), None);
/// ```
pub fn server_of(url: &str, default_port: u16) -> Option<String> {
    let (_, hostport, _) = split_authority(url)?;
    if hostport.is_empty() {
        return None;
    }
    let has_port = match hostport.strip_prefix('[') {
        Some(v6) => v6.contains("]:"),
        None => hostport.contains(':'),
    };
    Some(if has_port {
        hostport.to_owned()
    } else {
        format!("{hostport}:{default_port}")
    })
}

/// `url` with its `host[:port]` replaced by `via`, everything else (scheme,
/// user, password, path, query) as it was; `None` when it names no host.
///
/// ```
/// use lease_conformance::network::url_via;
///
/// let via = "127.0.0.1:40000".parse().unwrap();
/// assert_eq!(
///     url_via("postgres://postgres@127.0.0.1:5432/test?sslmode=disable", via).as_deref(),
///     Some("postgres://postgres@127.0.0.1:40000/test?sslmode=disable"),
/// );
/// ```
pub fn url_via(url: &str, via: SocketAddr) -> Option<String> {
    let (head, hostport, tail) = split_authority(url)?;
    if hostport.is_empty() {
        return None;
    }
    Some(format!("{head}{via}{tail}"))
}

/// Starts a [`Proxy`] to the server `url` names (on `default_port` when it
/// names none), and returns it with `url` pointing at the proxy instead.
///
/// # Errors
///
/// When `url` names no host (`InvalidInput`), or the proxy cannot start.
///
/// # Cancel safety
///
/// Cancel safe: dropping the future drops the proxy.
pub async fn proxy_for_url(url: &str, default_port: u16) -> io::Result<(Proxy, String)> {
    let Some(server) = server_of(url, default_port) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the URL names no host to proxy to",
        ));
    };
    let proxy = Proxy::start(server.as_str()).await?;
    match url_via(url, proxy.addr()) {
        Some(proxied) => Ok((proxy, proxied)),
        None => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the URL names no host to proxy to",
        )),
    }
}

/// `url` split around its `host[:port]`: what comes before it (scheme and
/// user), it, and what follows it (path, query, fragment).
fn split_authority(url: &str) -> Option<(&str, &str, &str)> {
    let scheme_end = url.find("://")? + 3;
    let rest = &url[scheme_end..];
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let host_start = authority.rfind('@').map_or(0, |at| at + 1);
    let head = &url[..scheme_end + host_start];
    let hostport = &authority[host_start..];
    let tail = &rest[end..];
    Some((head, hostport, tail))
}

/// Panics unless the proxy has accepted a connection: `what` should have
/// gone through it.
fn went_through(proxy: &Proxy, what: &str) {
    assert!(
        proxy.accepted() > 0,
        "{what} went through no connection of the proxy: connect the proxied store to \
         proxy.addr() ({}), not to the server ({})",
        proxy.addr(),
        proxy.target()
    );
}

/// What a holder's context that ended too early tells a backend author.
fn early_end(cause: Option<EndCause>) -> &'static str {
    match cause {
        Some(EndCause::Lost(LostCause::NotHolder)) => {
            "a renewal reported the lease gone although nobody touched it: renew must match \
             name, holder and expires_at_ms > now, set expires_at_ms = now + lease_ms, and \
             count matched rows, not changed rows"
        }
        Some(EndCause::Lost(LostCause::DeadlineExceeded)) => {
            "no renewal succeeded within the 1.5 s local deadline: renew failed, or took \
             longer than its bound, again and again"
        }
        _ => "the context ended for a reason the scenario did not cause",
    }
}

/// A non-negative count of milliseconds as a duration (0 for a negative one).
fn millis(ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// A lease name no other scenario, and no other run, uses.
fn unique_name(label: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "leader:network-{label}-{:x}{:x}{n}",
        std::process::id(),
        nanos & 0xffff_ffff
    )
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::{server_of, url_via};

    #[test]
    fn urls_are_rewritten_only_in_host_and_port() {
        let via = SocketAddr::from(([127, 0, 0, 1], 40000));
        assert_eq!(
            server_of("mariadb://u:p@db/x?prefer_socket=false", 3306).as_deref(),
            Some("db:3306")
        );
        assert_eq!(
            url_via("mariadb://u:p@db/x?prefer_socket=false", via).as_deref(),
            Some("mariadb://u:p@127.0.0.1:40000/x?prefer_socket=false")
        );
        assert_eq!(
            url_via("postgres://u:p%40x@db:6000", via).as_deref(),
            Some("postgres://u:p%40x@127.0.0.1:40000")
        );
        assert_eq!(
            server_of("postgres://[::1]/t", 5432).as_deref(),
            Some("[::1]:5432")
        );
        assert_eq!(server_of("not a url", 1), None);
        assert_eq!(url_via("postgres:///t", via), None);
    }
}
