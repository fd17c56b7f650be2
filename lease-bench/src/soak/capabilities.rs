//! The capabilities under the soak: a [`Lock`](dblease::Lock), a
//! [`Leader`](dblease::Leader) and a [`Scheduler`] run by every contender on
//! names of the run, through the [`RecordingStore`](super::recorder), which
//! writes their claims to the history.
//!
//! Their work writes its tenure (`Acting`): `claim` as it starts, after a
//! read of the database's clock (the start's lower bound is the larger of
//! that read and the calibration's lower bound when the read was sent), and
//! `stop` as it ends, before it returns and so before the library gives the
//! name back (the end's upper bound is the calibration's: no statement is
//! needed, so a holder cut off from the database still records its end at
//! once). The name is given back only once the database's clock has passed
//! that bound, so that a successor cannot tie with it. Work aborted by the
//! library (it overran the grace of a loss, or a shutdown) records its end
//! as it is dropped.
//!
//! - **lock** `lock:soak:<run>:lock`: `try_run` three times in four, else
//!   `run_within` a few seconds; runs of 100–1,500 ms, one in four 2–4 s
//!   (longer than the local deadline, so that a fault can cost the lease).
//! - **leader** `leader:soak:<run>:leader`: `Leader::run` campaigning every
//!   200–500 ms; each tenure leads 0.5–4 s, then the work returns and the
//!   name is given back.
//! - **scheduler** job `soak-<run>` (`cron:soak-<run>`), `@every 1s`,
//!   swept for rounds cut short every 300 ms; rounds of 50–500 ms, some of
//!   0.8–1.5 s and one in five of 2–4 s (overrunning the next instants, and
//!   long enough for a fault to cost the lease).

use std::sync::Arc;
use std::time::Duration;

use dblease::scheduler::{Error as SchedulerError, Job, JobResult, Round, Scheduler};
use dblease::{Handle, LeaseContext};
use tokio::time::{Instant, sleep};

use super::contender::Contender;
use super::recorder::{Recorder, emit};
use crate::plant::Plant;
use lease_testkit::history::{Event, StopCause};

/// The most a capability waits, after recording its end, for the database's
/// clock to pass it before it lets the name go.
const TIE_WAIT_MAX: Duration = Duration::from_millis(50);

/// A capability's tenure, from the start of its work to its end: see the
/// [module docs](self).
pub(crate) struct Acting {
    rec: Arc<Recorder>,
    name: String,
    seq: u64,
    term: u64,
    ended: bool,
}

impl Acting {
    /// Records the start of the work under `name` with `term` (claimed by
    /// this process's attempt of that name and term).
    pub(crate) async fn begin(
        c: &Contender,
        name: &str,
        term: u64,
        slot: Option<i64>,
        rerun: bool,
    ) -> Acting {
        let sent = Instant::now();
        let read = c.now().await;
        let lower = c.rec.clock.lower(sent);
        let claim_ms = read.max(lower).unwrap_or(i64::MIN);
        // No attempt on record (it cannot happen) makes the claim malformed:
        // the checker says so.
        let seq = c
            .rec
            .claimed(name, term)
            .unwrap_or_else(|| c.rec.next_seq());
        emit(&Event::Claim {
            name: name.to_owned(),
            instance: c.rec.instance.clone(),
            seq,
            term,
            slot,
            rerun,
            claim_ms,
        });
        Acting {
            rec: c.rec.clone(),
            name: name.to_owned(),
            seq,
            term,
            ended: false,
        }
    }

    /// Records the end now, once; the bound recorded.
    fn record(&mut self, cause: StopCause) -> i64 {
        let stop_ms = self.rec.clock.upper(Instant::now()).unwrap_or(i64::MAX);
        if !self.ended {
            self.ended = true;
            emit(&Event::Stop {
                name: self.name.clone(),
                instance: self.rec.instance.clone(),
                seq: self.seq,
                term: self.term,
                stop_ms,
                cause,
            });
        }
        stop_ms
    }

    /// The work has ended: records it, then waits (briefly) until the
    /// database's clock is surely past the recorded bound.
    pub(crate) async fn end(mut self, cause: StopCause) {
        let stop_ms = self.record(cause);
        let started = Instant::now();
        while started.elapsed() < TIE_WAIT_MAX {
            match self.rec.clock.lower(Instant::now()) {
                Some(now) if now > stop_ms => break,
                Some(now) => {
                    let behind = u64::try_from(stop_ms - now + 1).unwrap_or(1);
                    sleep(Duration::from_millis(behind).min(TIE_WAIT_MAX)).await;
                }
                None => break,
            }
        }
    }
}

impl Drop for Acting {
    /// Work aborted under its lease: it stopped acting as it was dropped.
    fn drop(&mut self) {
        let _ = self.record(StopCause::Lost);
    }
}

impl Contender {
    /// Why work under `handle` ended.
    fn cause(&self, handle: &Handle) -> StopCause {
        if handle.lost() {
            StopCause::Lost
        } else if self.shutdown.is_cancelled() {
            StopCause::Shutdown
        } else {
            StopCause::Done
        }
    }

    /// Works for `planned`, or until `ctx` ends.
    async fn work(&self, ctx: &LeaseContext, planned: Duration) {
        tokio::select! {
            () = sleep(planned) => {}
            () = ctx.cancelled() => {}
        }
    }

    /// Runs the lock's work, again and again.
    pub(crate) async fn lock(self: Arc<Self>, run: String) {
        let lock = self
            .recorded
            .lock(&format!("soak:{run}:lock"))
            .with_cancellation(&self.shutdown);
        let name = lock.name().to_owned();
        while self.pause(self.ms(50, 400)).await {
            // One run in four is long enough to outlast the local deadline
            // under a fault, so that losses happen under the lock too.
            let planned = if self.chance(25) {
                self.ms(2_000, 4_000)
            } else {
                self.ms(100, 1_500)
            };
            let (me, name) = (self.clone(), name.clone());
            let work = move |ctx: LeaseContext| async move {
                let acting = Acting::begin(&me, &name, ctx.term(), None, false).await;
                me.work(&ctx, planned).await;
                acting.end(me.cause(ctx.handle())).await;
            };
            let _ = if self.chance(25) {
                lock.run_within(self.ms(500, 3_000), work).await
            } else {
                lock.try_run(work).await
            };
        }
    }

    /// Campaigns for the leader's name until shutdown.
    pub(crate) async fn lead_elected(self: Arc<Self>, run: String) {
        let leader = self
            .recorded
            .leader(&format!("soak:{run}:leader"))
            .with_campaign_interval(Duration::from_millis(200), Duration::from_millis(300));
        let name = leader.name().to_owned();
        let me = self.clone();
        let campaign = leader.run(&self.shutdown, move |ctx| {
            let (me, name) = (me.clone(), name.clone());
            async move { me.duty(name, ctx).await }
        });
        if let Err(e) = campaign.await {
            eprintln!(
                "soak: {}: the leader's campaign failed: {e}",
                self.rec.instance
            );
        }
    }

    /// One tenure of the leader's duty.
    async fn duty(self: Arc<Self>, name: String, ctx: LeaseContext) {
        let acting = Acting::begin(&self, &name, ctx.term(), None, false).await;
        if self.plant == Plant::DeafLeader {
            // The planted bug: the duty runs its course on a task of its
            // own, whatever happens to the lease (it does stop for a
            // shutdown); the work the library sees returns on the loss. Long
            // enough to outlast the first stall or pause that costs the lease
            // and the successor's claim after it.
            let planned = self.ms(8_000, 15_000);
            let (me, handle) = (self.clone(), ctx.handle().clone());
            let duty = tokio::spawn(async move {
                let _ = me.pause(planned).await;
                acting.end(me.cause(&handle)).await;
            });
            tokio::select! {
                _ = duty => {}
                () = ctx.cancelled() => {}
            }
            return;
        }
        self.work(&ctx, self.ms(500, 4_000)).await;
        acting.end(self.cause(ctx.handle())).await;
    }

    /// Runs the scheduler's job until shutdown.
    pub(crate) async fn cron(self: Arc<Self>, run: String) {
        let job = format!("soak-{run}");
        let name = Scheduler::lease_name(&job);
        let me = self.clone();
        let built = Scheduler::builder(self.recorded.clone())
            .job(Job::new(job, "@every 1s", move |round: Round| {
                let (me, name) = (me.clone(), name.clone());
                async move { me.round(&name, round).await }
            }))
            .sweep_interval(Duration::from_millis(300))
            .build();
        let scheduler = match built {
            Ok(s) => s,
            Err(e) => {
                eprintln!("soak: the scheduler: {e}");
                return;
            }
        };
        // A scheduler that cannot read the database's clock as it starts
        // does not start: try again while the soak lasts.
        loop {
            match scheduler.run(&self.shutdown, Duration::from_secs(5)).await {
                Err(SchedulerError::Unavailable(_)) => {
                    if !self.pause(Duration::from_millis(500)).await {
                        return;
                    }
                }
                _ => return,
            }
        }
    }

    /// One round of the scheduler's job.
    async fn round(&self, name: &str, round: Round) -> JobResult {
        let slot = round.instant().as_millis();
        let term = round.term().unwrap_or(0);
        let acting = Acting::begin(self, name, term, Some(slot), round.is_rerun()).await;
        if self.plant == Plant::LostFinish && round.is_rerun() {
            // The second run's claim is in the history now: with the
            // plant's note of the first run's end, the bug has fired.
            crate::plant::note(&format!(
                "{}{}",
                crate::plant::RAN_AGAIN,
                crate::plant::instant_key(name, slot)
            ));
        }
        let planned = if self.chance(20) {
            // Outlasts the local deadline under a fault, and overruns the
            // next instants.
            self.ms(2_000, 4_000)
        } else if self.chance(10) {
            self.ms(800, 1_500)
        } else {
            self.ms(50, 500)
        };
        tokio::select! {
            () = sleep(planned) => {}
            () = round.cancelled() => {}
        }
        let cause = match round.lease() {
            Some(ctx) => self.cause(ctx.handle()),
            None => StopCause::Done,
        };
        acting.end(cause).await;
        round.check()?;
        Ok(())
    }
}
