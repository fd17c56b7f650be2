//! Leader election: one replica at a time keeps a long-running duty.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::capability::{jitter, release_detached};
use crate::context::LeaseContext;
use crate::error::{LostCause, Result};
use crate::hold::Chain;
use crate::info::LeaseInfo;
use crate::leases::{Handle, Leases};
use crate::name::validate_name;

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
}

impl fmt::Display for StepDown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StepDown::Lost(cause) => write!(f, "lease lost: {cause}"),
            StepDown::ShuttingDown => f.write_str("shutting down"),
            StepDown::WorkReturned => f.write_str("the work returned"),
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
/// once does not spin. On a win, the lease is held (renewed) while the work
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
/// giving the name back is replaced within the lease plus one campaign
/// interval (about 21 s with the default timings).
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
    /// [`Error::InvalidName`], [`Error::Database`] or [`Error::Timeout`].
    pub async fn current_leader(&self) -> Result<Option<LeaseInfo>> {
        Ok(self.leases.get(&self.name).await?.filter(LeaseInfo::held))
    }

    /// Campaigns until `shutdown` is cancelled, running `work` on each tenure
    /// this replica wins.
    ///
    /// `work` is called once per tenure with the tenure's context, which ends
    /// when the lease is lost or `shutdown` is cancelled; the work should
    /// return then (after a loss it has the grace to, then its task is
    /// aborted, see [`crate::run`]). A database that does not answer is
    /// logged and asked again at the next attempt: `run` returns only at
    /// shutdown, once the work of a tenure in flight has returned and the
    /// name has been given back.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] at once, before any SQL, for a name that can
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
        while !shutdown.is_cancelled() {
            match self.leases.claim(&self.name).await {
                Ok(Some(handle)) => {
                    known = None;
                    self.tenure(handle, shutdown, &mut work).await;
                    if shutdown.is_cancelled() {
                        break;
                    }
                }
                Ok(None) => self.observe(&mut known).await,
                Err(e) => {
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
            let pause = self.interval + jitter(self.jitter);
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(pause) => {}
            }
        }
        self.publish(Leadership::Following { leader: None });
        Ok(())
    }

    /// A refused attempt: reads who leads, and tells of a new leader.
    async fn observe(&self, known: &mut Option<LeaderId>) {
        let leader = match self.leases.get(&self.name).await {
            Ok(info) => info.filter(LeaseInfo::held).map(|i| LeaderId {
                instance: i.instance,
                term: i.term,
            }),
            Err(e) => {
                tracing::debug!(name = ?self.name, error = %Chain(&e), "could not read the leader");
                None
            }
        };
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
    }

    /// One tenure: hold, run the work, work out why it ended, stop, give
    /// the name back unless lost.
    async fn tenure<F, Fut>(&self, handle: Handle, shutdown: &CancellationToken, work: &mut F)
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
        if let Some(f) = &self.callbacks.started {
            f(term);
        }
        let holder = handle.hold(shutdown);
        let context = holder.context().clone();
        let out = holder.run(|ctx| work(ctx)).await;
        holder.stop().await;
        let reason = if handle.lost() {
            StepDown::Lost(context.lost_cause().unwrap_or(LostCause::NotHolder))
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
            release_detached(&handle).await;
        }
        let tenure = began.elapsed();
        if matches!(reason, StepDown::Lost(_)) {
            tracing::warn!(name = ?self.name, term, %reason, ?tenure, "leader stepped down");
        } else {
            tracing::info!(name = ?self.name, term, %reason, ?tenure, "leader stepped down");
        }
        self.publish(Leadership::Following { leader: None });
        if let Some(f) = &self.callbacks.stopped {
            f(reason);
        }
    }

    fn publish(&self, status: Leadership) {
        self.status.send_if_modified(|current| {
            let changed = *current != status;
            *current = status;
            changed
        });
    }
}
