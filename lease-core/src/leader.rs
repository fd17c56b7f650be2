//! Leader election: one replica at a time keeps a long-running duty.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::capability::{Expiry, jitter, release_detached};
use crate::context::LeaseContext;
use crate::error::{Chain, LostCause, Result};
use crate::handle::Handle;
use crate::info::LeaseInfo;
use crate::leases::Leases;
use crate::name::validate_name;
use crate::state::EndCause;

/// The prefix of every leader's name: `leases.leader("billing")` campaigns
/// for `leader:billing`.
pub const LEADER_PREFIX: &str = "leader:";

/// How long a campaign waits after every attempt, before its jitter.
pub const CAMPAIGN_INTERVAL: Duration = Duration::from_secs(5);

/// The most a campaign adds at random to [`CAMPAIGN_INTERVAL`], so that
/// replicas started together do not ask in lockstep.
pub const CAMPAIGN_JITTER: Duration = Duration::from_secs(1);

impl Leases {
    /// The leader election `leader:<name>`: see [`Leader`].
    ///
    /// ```
    /// use lease_core::{CancellationToken, Leases};
    ///
    /// async fn serve(leases: Leases, shutdown: CancellationToken) -> lease_core::Result<()> {
    ///     let leader = leases.leader("billing");
    ///     let mut status = leader.watch(); // who leads, for a health endpoint
    ///     tokio::spawn(async move {
    ///         while status.changed().await.is_ok() {
    ///             println!("{}", *status.borrow());
    ///         }
    ///     });
    ///     leader
    ///         .run(&shutdown, |ctx| async move {
    ///             // Lead until the context ends: the lease lost, or shutdown.
    ///             while !ctx.is_cancelled() {
    ///                 // ... one step of the duty, stamped with ctx.term() ...
    ///                 tokio::select! {
    ///                     () = ctx.cancelled() => {}
    ///                     () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
    ///                 }
    ///             }
    ///         })
    ///         .await
    /// }
    /// ```
    #[must_use]
    pub fn leader(&self, name: &str) -> Leader {
        let (status, _) = watch::channel(Leadership::Campaigning);
        Leader {
            leases: self.clone(),
            name: format!("{LEADER_PREFIX}{name}"),
            interval: CAMPAIGN_INTERVAL,
            jitter: CAMPAIGN_JITTER,
            status,
            callbacks: Callbacks::default(),
        }
    }
}

/// A replica's view of who leads, published by [`Leader::watch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Leadership {
    /// The campaign has not learnt anything yet (or the database did not
    /// answer its last attempt, and no leader is known).
    Campaigning,
    /// This replica leads, under `term`.
    Leading {
        /// The term of this replica's tenure: stamp it on what leaves the
        /// database.
        term: u64,
    },
    /// Another replica leads, or nobody does right now.
    Following {
        /// The leader, when the database named one at the last attempt.
        leader: Option<LeaderId>,
    },
}

impl Leadership {
    /// Whether this replica leads.
    #[must_use]
    pub fn is_leading(&self) -> bool {
        matches!(self, Leadership::Leading { .. })
    }
}

impl fmt::Display for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Leadership::Campaigning => f.write_str("campaigning"),
            Leadership::Leading { term } => write!(f, "leading (term {term})"),
            Leadership::Following { leader: Some(l) } => {
                write!(f, "following {:?} (term {})", l.instance, l.term)
            }
            Leadership::Following { leader: None } => f.write_str("following (no leader now)"),
        }
    }
}

/// Who leads: the instance id of its process, and its term.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeaderId {
    /// The leader's instance id (the `instance` column).
    pub instance: String,
    /// The leader's term.
    pub term: u64,
}

/// Why a tenure ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StepDown {
    /// The lease was lost: renewals found the name taken, or none reached
    /// the database before the local deadline.
    Lost(LostCause),
    /// The shutdown token was cancelled.
    ShuttingDown,
    /// The work returned by itself (or failed, or panicked); the name is
    /// given back and the campaign goes on.
    WorkReturned,
    /// This replica was asked to resign
    /// ([`Leases::request_resign`](crate::Leases::request_resign)): the
    /// work's context ended with [`EndCause::Resigned`](crate::EndCause::Resigned),
    /// it wound down under the lease, and the name was given back. The
    /// campaign goes on after sitting out one attempt, so that another
    /// replica takes over.
    Resigned,
}

impl fmt::Display for StepDown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StepDown::Lost(cause) => write!(f, "lease lost: {cause}"),
            StepDown::ShuttingDown => f.write_str("shutting down"),
            StepDown::WorkReturned => f.write_str("the work returned"),
            StepDown::Resigned => f.write_str("asked to resign"),
        }
    }
}

/// What a leader's work may return: `()`, or a `Result` whose error is
/// logged as a warning when the tenure ends.
pub trait LeaderOutcome: Send + 'static {
    /// The failure to log, if any.
    fn failure(&self) -> Option<String>;
}

impl LeaderOutcome for () {
    fn failure(&self) -> Option<String> {
        None
    }
}

impl<E: fmt::Display + Send + 'static> LeaderOutcome for std::result::Result<(), E> {
    fn failure(&self) -> Option<String> {
        self.as_ref().err().map(ToString::to_string)
    }
}

type Callback<A> = Arc<dyn Fn(A) + Send + Sync>;

#[derive(Clone, Default)]
struct Callbacks {
    started: Option<Callback<u64>>,
    stopped: Option<Callback<StepDown>>,
    new_leader: Option<Callback<LeaderId>>,
}

/// A leader election, from [`Leases::leader`]: a campaign loop that keeps
/// one replica at a time on a long-running duty.
///
/// [`run`](Leader::run) campaigns until the shutdown token is cancelled. Each
/// attempt is one claim of `leader:<name>`, followed by a wait of
/// [`CAMPAIGN_INTERVAL`] plus a random [`CAMPAIGN_JITTER`] (5–6 s), so a
/// name held elsewhere is asked for every 5–6 s and a duty that returns at
/// once does not spin. A refused attempt reads who leads (the row, with its
/// time left by the database's clock); when the leader's lease runs out
/// before the next attempt would come, the next attempt comes 10 to 20 ms
/// after the expiry instead, so a leader that died is replaced within its
/// lease and a few milliseconds. On a win, the lease is held (renewed) while the work
/// runs on the tenure's [`LeaseContext`]; the tenure ends when the lease is
/// lost, the shutdown token is cancelled, or the work returns. The name is
/// then given back (unless lost) on a call bounded by 5 s, so a successor
/// need not wait for the lease to expire, and the campaign goes on (unless
/// shutting down).
///
/// # What it guarantees
///
/// While the database answers, at most one replica leads at a time: a
/// leader whose renewals cannot reach the database steps down at its local
/// deadline (10 s after the last renewal that succeeded), before the
/// database lets anyone else claim the name (15 s). A leader killed without
/// giving the name back is replaced once its lease runs out, within a few
/// tens of milliseconds (at most 15 s after its last renewal with the
/// default timings, plus the margin and the time a statement takes); a
/// follower that could not read the row then asks at its next attempt.
///
/// # What it does not
///
/// A frozen process notices nothing: its successor may start once the lease
/// expired by the database's clock. Fence writes: in the database through
/// the backends' guarded transactions, outside it by stamping the term
/// ([`LeaseContext::term`]) and refusing lower terms on the other side.
///
/// # Observing
///
/// [`watch`](Leader::watch) publishes this replica's [`Leadership`];
/// the callbacks [`on_started_leading`](Leader::on_started_leading),
/// [`on_stopped_leading`](Leader::on_stopped_leading) and
/// [`on_new_leader`](Leader::on_new_leader) are called from the campaign's
/// task (keep them short); [`current_leader`](Leader::current_leader) asks
/// the database.
///
/// # Logs
///
/// | event | level | fields |
/// | --- | --- | --- |
/// | `elected leader` | info | `name`, `term`, `instance` |
/// | `leader stepped down` | info (warn when lost) | `name`, `term`, `reason`, `tenure` |
/// | `new leader observed` | info | `name`, `leader` (instance), `term` |
/// | `leader's work failed` | warn | `name`, `term`, `error` |
/// | `campaign attempt failed: the database did not answer` | warn | `name`, `error` |
pub struct Leader {
    leases: Leases,
    name: String,
    interval: Duration,
    jitter: Duration,
    status: watch::Sender<Leadership>,
    callbacks: Callbacks,
}

impl fmt::Debug for Leader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leader")
            .field("name", &self.name)
            .field("interval", &self.interval)
            .field("jitter", &self.jitter)
            .field("status", &*self.status.borrow())
            .finish_non_exhaustive()
    }
}

impl Leader {
    /// The name campaigned for: `leader:<name>`.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The same election waiting `interval` plus a random `jitter` after
    /// every attempt, instead of 5 s plus up to 1 s. Tests and demos shorten
    /// it; the lease's own timings are the coordinator's.
    #[must_use]
    pub fn with_campaign_interval(mut self, interval: Duration, jitter: Duration) -> Self {
        self.interval = interval;
        self.jitter = jitter;
        self
    }

    /// Calls `f` with the term each time this replica starts leading, before
    /// the work starts.
    #[must_use]
    pub fn on_started_leading(mut self, f: impl Fn(u64) + Send + Sync + 'static) -> Self {
        self.callbacks.started = Some(Arc::new(f));
        self
    }

    /// Calls `f` with the reason each time this replica stops leading, once
    /// the work has returned and the renewals have stopped.
    #[must_use]
    pub fn on_stopped_leading(mut self, f: impl Fn(StepDown) + Send + Sync + 'static) -> Self {
        self.callbacks.stopped = Some(Arc::new(f));
        self
    }

    /// Calls `f` each time this replica sees another one lead (a new
    /// instance or a new term), as a follower.
    #[must_use]
    pub fn on_new_leader(mut self, f: impl Fn(LeaderId) + Send + Sync + 'static) -> Self {
        self.callbacks.new_leader = Some(Arc::new(f));
        self
    }

    /// This replica's view of who leads, updated at every campaign attempt
    /// and at every change of this replica's own leadership.
    #[must_use]
    pub fn watch(&self) -> watch::Receiver<Leadership> {
        self.status.subscribe()
    }

    /// Whether this replica leads now, by its own view.
    #[must_use]
    pub fn is_leading(&self) -> bool {
        self.status.borrow().is_leading()
    }

    /// Who leads now, as the database sees it: `None` when nobody holds the
    /// name. One statement.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`](crate::Error::InvalidName), [`Error::Database`](crate::Error::Database) or [`Error::Timeout`](crate::Error::Timeout).
    pub async fn current_leader(&self) -> Result<Option<LeaseInfo>> {
        Ok(self.leases.get(&self.name).await?.filter(LeaseInfo::held))
    }

    /// Campaigns until `shutdown` is cancelled, running `work` on each tenure
    /// this replica wins.
    ///
    /// `work` is called once per tenure with the tenure's context, which ends
    /// when the lease is lost, `shutdown` is cancelled, or this replica is
    /// asked to resign ([`Leases::request_resign`](crate::Leases::request_resign):
    /// the name is given back once the work returns); the work should
    /// return then (after a loss it has the grace to, then its task is
    /// aborted, see [`crate::run`]). A database that does not answer is
    /// logged and asked again at the next attempt: `run` returns only at
    /// shutdown, once the work of a tenure in flight has returned and the
    /// name has been given back.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`](crate::Error::InvalidName) at once, before any SQL, for a name that can
    /// never be claimed.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future aborts a tenure's work and stops its renewals;
    /// the name is then not given back, and runs out by itself. Cancel
    /// `shutdown` instead to step down cleanly.
    pub async fn run<F, Fut>(&self, shutdown: &CancellationToken, mut work: F) -> Result<()>
    where
        F: FnMut(LeaseContext) -> Fut,
        Fut: Future + Send + 'static,
        Fut::Output: LeaderOutcome,
    {
        validate_name(&self.name)?;
        let mut known: Option<LeaderId> = None;
        let mut expiry = Expiry::default();
        while !shutdown.is_cancelled() {
            match self.leases.claim(&self.name).await {
                Ok(Some(handle)) => {
                    known = None;
                    expiry.forget();
                    let reason = self.tenure(handle, shutdown, &mut work).await;
                    if shutdown.is_cancelled() {
                        break;
                    }
                    if reason == StepDown::Resigned {
                        // Sit out one attempt: the followers ask within
                        // one interval, and one of them takes over.
                        let pause = self.interval + jitter(self.jitter);
                        tokio::select! {
                            biased;
                            () = shutdown.cancelled() => break,
                            () = tokio::time::sleep(pause) => {}
                        }
                    }
                }
                Ok(None) => {
                    let info = self.observe(&mut known).await;
                    expiry.learn(info.as_ref(), Instant::now());
                }
                Err(e) => {
                    expiry.forget();
                    if !e.is_retryable() {
                        return Err(e);
                    }
                    tracing::warn!(
                        name = ?self.name,
                        error = %Chain(&e),
                        "campaign attempt failed: the database did not answer"
                    );
                    self.publish(Leadership::Campaigning);
                }
            }
            let next = expiry.next(Instant::now() + self.interval + jitter(self.jitter));
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep_until(next) => {}
            }
        }
        self.publish(Leadership::Following { leader: None });
        Ok(())
    }

    /// A refused attempt: reads who leads, and tells of a new leader.
    /// Returns the row read, for its expiry.
    async fn observe(&self, known: &mut Option<LeaderId>) -> Option<LeaseInfo> {
        let info = match self.leases.get(&self.name).await {
            Ok(info) => info,
            Err(e) => {
                tracing::debug!(name = ?self.name, error = %Chain(&e), "could not read the leader");
                None
            }
        };
        let leader = info.as_ref().filter(|i| i.held()).map(|i| LeaderId {
            instance: i.instance.clone(),
            term: i.term,
        });
        if let Some(id) = &leader {
            if known.as_ref() != Some(id) {
                tracing::info!(
                    name = ?self.name,
                    leader = ?id.instance,
                    term = id.term,
                    "new leader observed"
                );
                if let Some(f) = &self.callbacks.new_leader {
                    f(id.clone());
                }
                *known = Some(id.clone());
            }
        }
        self.publish(Leadership::Following { leader });
        info
    }

    /// One tenure: hold, run the work, work out why it ended, stop, give
    /// the name back unless lost.
    async fn tenure<F, Fut>(
        &self,
        handle: Handle,
        shutdown: &CancellationToken,
        work: &mut F,
    ) -> StepDown
    where
        F: FnMut(LeaseContext) -> Fut,
        Fut: Future + Send + 'static,
        Fut::Output: LeaderOutcome,
    {
        let term = handle.term();
        let began = Instant::now();
        tracing::info!(
            name = ?self.name,
            term,
            instance = ?self.leases.instance(),
            "elected leader"
        );
        self.publish(Leadership::Leading { term });
        crate::metrics::leader(&self.name, true, "elected");
        if let Some(f) = &self.callbacks.started {
            f(term);
        }
        let holder = handle.hold(shutdown);
        let context = holder.context().clone();
        let out = holder.run(work).await;
        holder.stop().await;
        let reason = if handle.lost() {
            StepDown::Lost(context.lost_cause().unwrap_or(LostCause::NotHolder))
        } else if context.cause() == Some(EndCause::Resigned) {
            StepDown::Resigned
        } else if shutdown.is_cancelled() {
            StepDown::ShuttingDown
        } else {
            StepDown::WorkReturned
        };
        let failure = match &out {
            Ok(outcome) => outcome.failure(),
            Err(e) if e.is_lost() => None,
            Err(e) => Some(Chain(e).to_string()),
        };
        if let Some(error) = failure {
            tracing::warn!(name = ?self.name, term, %error, "leader's work failed");
        }
        if !handle.lost() {
            let _ = release_detached(&handle).await;
        }
        let tenure = began.elapsed();
        if matches!(reason, StepDown::Lost(_)) {
            tracing::warn!(name = ?self.name, term, %reason, ?tenure, "leader stepped down");
        } else {
            tracing::info!(name = ?self.name, term, %reason, ?tenure, "leader stepped down");
        }
        self.publish(Leadership::Following { leader: None });
        let label = match reason {
            StepDown::Lost(_) => "lost",
            StepDown::ShuttingDown => "shutting_down",
            StepDown::WorkReturned => "work_returned",
            StepDown::Resigned => "resigned",
        };
        crate::metrics::leader(&self.name, false, label);
        if let Some(f) = &self.callbacks.stopped {
            f(reason);
        }
        reason
    }

    fn publish(&self, status: Leadership) {
        let _ = self.status.send_if_modified(|current| {
            let changed = *current != status;
            *current = status;
            changed
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use tokio::time::sleep;

    use super::*;
    use crate::LeaseState;
    use crate::testing::Table;

    fn replica(table: &Arc<Table>, instance: &str) -> Leases {
        Leases::from_arc(table.clone())
            .with_instance(instance)
            .unwrap()
            .with_fail_hook(|e| panic!("the fail hook was reached: {e}"))
    }

    /// Leads until the context ends.
    async fn lead(ctx: LeaseContext) {
        ctx.cancelled().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_lone_replica_leads_until_shutdown_then_gives_the_name_back() {
        let table = Arc::new(Table::new());
        let events = Arc::new(Mutex::new(Vec::new()));
        let (e1, e2) = (events.clone(), events.clone());
        let leader = replica(&table, "a")
            .leader("billing")
            .on_started_leading(move |term| e1.lock().unwrap().push(format!("started {term}")))
            .on_stopped_leading(move |why| e2.lock().unwrap().push(format!("stopped: {why}")));
        assert_eq!(leader.name(), "leader:billing");
        let mut status = leader.watch();
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let run = tokio::spawn(async move {
            let out = leader.run(&shutdown, lead).await;
            (leader, out)
        });
        status.changed().await.unwrap();
        assert_eq!(*status.borrow(), Leadership::Leading { term: 1 });
        sleep(Duration::from_secs(60)).await; // kept well past the lease
        assert_eq!(*status.borrow(), Leadership::Leading { term: 1 });
        stop.cancel();
        let (leader, out) = run.await.unwrap();
        out.unwrap();
        assert!(!leader.is_leading());
        assert_eq!(
            *events.lock().unwrap(),
            ["started 1", "stopped: shutting down"]
        );
        let row = table.info("leader:billing").unwrap();
        assert_eq!(row.state(), LeaseState::Released, "released at shutdown");
        assert_eq!(table.claims().len(), 1, "one attempt, won");
    }

    #[tokio::test(start_paused = true)]
    async fn a_follower_asks_every_five_to_six_seconds_and_names_the_leader() {
        let table = Arc::new(Table::new());
        let _ = table.steal("leader:billing", "b", 3_600_000);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let leader = replica(&table, "a")
            .leader("billing")
            .on_new_leader(move |id| s.lock().unwrap().push(id));
        let mut status = leader.watch();
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let run = tokio::spawn(async move { leader.run(&shutdown, lead).await });
        status.changed().await.unwrap();
        let b = LeaderId {
            instance: "b".into(),
            term: 1,
        };
        assert_eq!(
            *status.borrow(),
            Leadership::Following {
                leader: Some(b.clone())
            }
        );
        sleep(Duration::from_secs(60)).await;
        stop.cancel();
        run.await.unwrap().unwrap();
        let attempts: Vec<u64> = table.claims().iter().map(|c| c.0).collect();
        for pair in attempts.windows(2) {
            let gap = pair[1] - pair[0];
            assert!((5_000..=6_000).contains(&gap), "{attempts:?}");
        }
        assert!((10..=13).contains(&attempts.len()), "{attempts:?}");
        assert_eq!(*seen.lock().unwrap(), [b], "told of the leader once");
    }

    #[tokio::test(start_paused = true)]
    async fn work_that_returns_ends_the_tenure_and_the_campaign_goes_on() {
        let table = Arc::new(Table::new());
        let stops = Arc::new(Mutex::new(Vec::new()));
        let s = stops.clone();
        let leader = replica(&table, "a")
            .leader("billing")
            .on_stopped_leading(move |why| s.lock().unwrap().push(why));
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let terms = Arc::new(Mutex::new(Vec::new()));
        let t = terms.clone();
        let run = tokio::spawn(async move {
            leader
                .run(&shutdown, move |ctx| {
                    let t = t.clone();
                    async move {
                        t.lock().unwrap().push(ctx.term());
                        Err::<(), _>("the duty failed")
                    }
                })
                .await
        });
        sleep(Duration::from_secs(12)).await;
        stop.cancel();
        run.await.unwrap().unwrap();
        // Attempts at 0, 5-6 and 10-12 s: three tenures, each given back.
        assert_eq!(*terms.lock().unwrap(), [1, 2, 3]);
        assert!(
            stops
                .lock()
                .unwrap()
                .iter()
                .all(|s| *s == StepDown::WorkReturned),
            "{stops:?}"
        );
        assert_eq!(table.releases(), 3);
        let gaps: Vec<u64> = table.claims().iter().map(|c| c.0).collect();
        assert!(gaps[1] >= 5_000 && gaps[1] <= 6_000, "{gaps:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_lease_ends_the_tenure_without_giving_back_and_follows_the_thief() {
        let table = Arc::new(Table::new());
        let stops = Arc::new(Mutex::new(Vec::new()));
        let s = stops.clone();
        let leader = replica(&table, "a")
            .leader("billing")
            .on_stopped_leading(move |why| s.lock().unwrap().push(why));
        let mut status = leader.watch();
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let run = tokio::spawn(async move { leader.run(&shutdown, lead).await });
        status.changed().await.unwrap();
        assert!(status.borrow().is_leading());
        sleep(Duration::from_secs(3)).await;
        let _ = table.steal("leader:billing", "b", 3_600_000);
        // The next renewal (at most 2 s on) finds it gone.
        sleep(Duration::from_secs(3)).await;
        assert!(!status.borrow().is_leading(), "{:?}", *status.borrow());
        sleep(Duration::from_secs(10)).await;
        assert_eq!(
            *status.borrow(),
            Leadership::Following {
                leader: Some(LeaderId {
                    instance: "b".into(),
                    term: 2
                })
            }
        );
        stop.cancel();
        run.await.unwrap().unwrap();
        assert_eq!(
            *stops.lock().unwrap(),
            [StepDown::Lost(LostCause::NotHolder)]
        );
        assert_eq!(table.releases(), 0, "a lost lease is not given back");
    }

    /// Issue 25, item 2: a follower asks again just after the dead
    /// leader's lease runs out by the database's clock, not at its next
    /// campaign attempt (which would come up to 6 s later).
    #[tokio::test(start_paused = true)]
    async fn a_killed_leader_is_replaced_just_after_its_lease_runs_out() {
        let table = Arc::new(Table::new());
        let first = replica(&table, "a").leader("billing");
        let mut first_status = first.watch();
        let shutdown = CancellationToken::new();
        let killed = tokio::spawn({
            let shutdown = shutdown.clone();
            async move { first.run(&shutdown, lead).await }
        });
        first_status.changed().await.unwrap();
        assert!(first_status.borrow().is_leading());
        sleep(Duration::from_millis(500)).await;
        let second = replica(&table, "b").leader("billing");
        let mut second_status = second.watch();
        let follower = tokio::spawn({
            let shutdown = shutdown.clone();
            async move { second.run(&shutdown, lead).await }
        });
        sleep(Duration::from_secs(4)).await;
        // Killed: its task dropped at once, nothing given back.
        killed.abort();
        let expires_at_ms = table.info("leader:billing").unwrap().expires_at_ms;
        loop {
            second_status.changed().await.unwrap();
            if second_status.borrow().is_leading() {
                break;
            }
        }
        assert_eq!(*second_status.borrow(), Leadership::Leading { term: 2 });
        let row = table.info("leader:billing").unwrap();
        assert_eq!(row.instance, "b");
        // The winning claim wrote its now plus the lease.
        let claimed_at_ms = row.expires_at_ms - 15_000;
        let after = claimed_at_ms - expires_at_ms;
        assert!(
            (10..=20).contains(&after),
            "claimed {after} ms after the dead leader's lease ran out, not 10 to 20 ms"
        );
        let claims = table.claims();
        let won: Vec<_> = claims.iter().filter(|c| c.2).collect();
        assert_eq!(won.len(), 2, "{claims:?}");
        shutdown.cancel();
        follower.await.unwrap().unwrap();
    }

    /// Issue 25, item 4: a leader asked to resign winds its work down while
    /// it still holds the name, gives it back, and sits out one attempt;
    /// the follower takes over at the next term, after the work ended.
    #[tokio::test(start_paused = true)]
    async fn a_leader_asked_to_resign_steps_down_and_a_follower_takes_over() {
        let table = Arc::new(Table::new());
        let log = Arc::new(Mutex::new(Vec::<String>::new()));
        let stops = Arc::new(Mutex::new(Vec::new()));
        let shutdown = CancellationToken::new();
        let spawn = |instance: &'static str| {
            let (log, stops) = (log.clone(), stops.clone());
            let leader = replica(&table, instance)
                .leader("billing")
                .on_stopped_leading(move |why| stops.lock().unwrap().push((instance, why)));
            let watch = leader.watch();
            let shutdown = shutdown.clone();
            let task = tokio::spawn(async move {
                leader
                    .run(&shutdown, move |ctx| {
                        let log = log.clone();
                        async move {
                            log.lock()
                                .unwrap()
                                .push(format!("{instance} starts {}", ctx.term()));
                            ctx.cancelled().await;
                            // Winding down, still holding the name.
                            sleep(Duration::from_secs(3)).await;
                            assert!(!ctx.handle().lost());
                            log.lock()
                                .unwrap()
                                .push(format!("{instance} ends {}", ctx.term()));
                        }
                    })
                    .await
            });
            (watch, task)
        };
        let (mut a, a_task) = spawn("a");
        a.changed().await.unwrap();
        assert_eq!(*a.borrow(), Leadership::Leading { term: 1 });
        let (b, b_task) = spawn("b");
        sleep(Duration::from_secs(1)).await;

        let asker = replica(&table, "operator");
        assert_eq!(
            asker.request_resign("leader:billing").await.unwrap(),
            Some(1)
        );
        // The next renewal (within 2 s) tells the leader; its work winds
        // down for 3 s; the follower asks within 6 s of that.
        sleep(Duration::from_secs(12)).await;
        assert_eq!(*b.borrow(), Leadership::Leading { term: 2 });
        assert!(!a.borrow().is_leading());
        assert_eq!(
            *log.lock().unwrap(),
            ["a starts 1", "a ends 1", "b starts 2"],
            "the resigned work ended before the successor's started"
        );
        assert_eq!(*stops.lock().unwrap(), [("a", StepDown::Resigned)]);
        // The request was for term 1 only: the new leader keeps leading.
        sleep(Duration::from_secs(30)).await;
        assert_eq!(*b.borrow(), Leadership::Leading { term: 2 });
        shutdown.cancel();
        a_task.await.unwrap().unwrap();
        b_task.await.unwrap().unwrap();
    }

    /// A resign request aimed at a term that has passed does nothing: the
    /// leader of a later term is not asked.
    #[tokio::test(start_paused = true)]
    async fn a_resign_request_for_a_passed_term_does_nothing() {
        let table = Arc::new(Table::new());
        let first = replica(&table, "a").leader("billing");
        let mut first_status = first.watch();
        let stop_first = CancellationToken::new();
        let first_task = tokio::spawn({
            let shutdown = stop_first.clone();
            async move { first.run(&shutdown, lead).await }
        });
        first_status.changed().await.unwrap();
        stop_first.cancel();
        first_task.await.unwrap().unwrap();

        let stops = Arc::new(Mutex::new(Vec::new()));
        let s = stops.clone();
        let second = replica(&table, "b")
            .leader("billing")
            .on_stopped_leading(move |why| s.lock().unwrap().push(why));
        let mut status = second.watch();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn({
            let shutdown = shutdown.clone();
            async move { second.run(&shutdown, lead).await }
        });
        status.changed().await.unwrap();
        assert_eq!(*status.borrow(), Leadership::Leading { term: 2 });
        let asker = replica(&table, "operator");
        assert!(!asker.request_resign_at("leader:billing", 1).await.unwrap());
        sleep(Duration::from_secs(30)).await;
        assert_eq!(*status.borrow(), Leadership::Leading { term: 2 });
        shutdown.cancel();
        task.await.unwrap().unwrap();
        assert_eq!(*stops.lock().unwrap(), [StepDown::ShuttingDown]);
    }

    /// A follower of a live leader keeps to its campaign interval: the
    /// leader's renewals keep the expiry beyond the next attempt.
    #[tokio::test(start_paused = true)]
    async fn a_follower_of_a_live_leader_keeps_to_its_interval() {
        let table = Arc::new(Table::new());
        let first = replica(&table, "a").leader("billing");
        let mut first_status = first.watch();
        let shutdown = CancellationToken::new();
        let leading = tokio::spawn({
            let shutdown = shutdown.clone();
            async move { first.run(&shutdown, lead).await }
        });
        first_status.changed().await.unwrap();
        let second = replica(&table, "b").leader("billing");
        let following = tokio::spawn({
            let shutdown = shutdown.clone();
            async move { second.run(&shutdown, lead).await }
        });
        sleep(Duration::from_secs(60)).await;
        let attempts: Vec<u64> = table
            .claims()
            .iter()
            .filter(|c| c.1 == "b")
            .map(|c| c.0)
            .collect();
        for pair in attempts.windows(2) {
            let gap = pair[1] - pair[0];
            assert!((5_000..=6_000).contains(&gap), "{attempts:?}");
        }
        assert!(first_status.borrow().is_leading());
        shutdown.cancel();
        leading.await.unwrap().unwrap();
        following.await.unwrap().unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn three_replicas_never_lead_at_once_and_shutdown_hands_over() {
        let table = Arc::new(Table::new());
        let leading = Arc::new(Mutex::new(Vec::<String>::new()));
        let overlaps = Arc::new(Mutex::new(0));
        let mut tokens = Vec::new();
        let mut runs = Vec::new();
        for name in ["a", "b", "c"] {
            let (l1, l2, o) = (leading.clone(), leading.clone(), overlaps.clone());
            let who = name.to_owned();
            let who2 = name.to_owned();
            let leader = replica(&table, name)
                .leader("billing")
                .on_started_leading(move |_| {
                    let mut l = l1.lock().unwrap();
                    if !l.is_empty() {
                        *o.lock().unwrap() += 1;
                    }
                    l.push(who.clone());
                })
                .on_stopped_leading(move |_| l2.lock().unwrap().retain(|w| *w != who2));
            let token = CancellationToken::new();
            tokens.push(token.clone());
            runs.push(tokio::spawn(async move { leader.run(&token, lead).await }));
            sleep(Duration::from_millis(100)).await;
        }
        sleep(Duration::from_secs(10)).await;
        let first = leading.lock().unwrap().clone();
        assert_eq!(first, ["a"], "the first to ask leads");
        // The leader shuts down: a follower takes over within one interval.
        tokens[0].cancel();
        let stepped = Instant::now();
        loop {
            sleep(Duration::from_millis(100)).await;
            if !leading.lock().unwrap().is_empty() {
                break;
            }
            assert!(
                stepped.elapsed() <= CAMPAIGN_INTERVAL + CAMPAIGN_JITTER,
                "no hand-over within one campaign interval"
            );
        }
        assert_ne!(leading.lock().unwrap()[0], "a");
        for t in &tokens {
            t.cancel();
        }
        for r in runs {
            r.await.unwrap().unwrap();
        }
        assert_eq!(*overlaps.lock().unwrap(), 0, "two leaders at once");
    }

    #[tokio::test(start_paused = true)]
    async fn a_database_that_does_not_answer_is_campaigned_through() {
        let table = Arc::new(Table::new());
        table.set_down(true);
        let leader = replica(&table, "a").leader("billing");
        let mut status = leader.watch();
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let run = tokio::spawn(async move { leader.run(&shutdown, lead).await });
        sleep(Duration::from_secs(13)).await;
        assert_eq!(*status.borrow_and_update(), Leadership::Campaigning);
        table.set_down(false);
        status.changed().await.unwrap();
        assert_eq!(*status.borrow(), Leadership::Leading { term: 1 });
        stop.cancel();
        run.await.unwrap().unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn an_invalid_name_fails_before_any_statement() {
        let table = Arc::new(Table::new());
        let leader = replica(&table, "a").leader(&"x".repeat(200));
        let err = leader
            .run(&CancellationToken::new(), lead)
            .await
            .unwrap_err();
        assert!(matches!(err, crate::Error::InvalidName { .. }), "{err:?}");
        assert!(table.claims().is_empty());
    }
}
