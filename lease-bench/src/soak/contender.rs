//! A contender process: claims, holds and runs under the faults the
//! orchestrator injects, and writes every attempt, tenure and end to its
//! standard output, one history line each.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use dblease::{CancellationToken, Handle, Leases, Unfinished, UtcMillis};
use tokio::io::AsyncReadExt;
use tokio::time::{Instant, sleep, timeout};

use super::recorder::{Recorder, RecordingStore, emit};
use super::rng::Rng;
use super::{BoxResult, CLOCK_READ_BOUND, EVERY_MS, LEADERS, job_name, leader_name, timings};
use crate::plant::Plant;
use lease_testkit::history::{Event, StopCause};

/// One contender process.
pub(crate) struct Contender {
    /// The raw leases: claims written to the history by the contender.
    leases: Leases,
    /// The capabilities' leases: claims written by their store.
    pub(crate) recorded: Leases,
    pub(crate) rec: Arc<Recorder>,
    pub(crate) plant: Plant,
    rng: Mutex<Rng>,
    pub(crate) shutdown: CancellationToken,
}

/// What a claim is for.
enum Kind {
    Plain,
    Slot(i64),
    Rerun(Unfinished),
    /// The planted bug: a plain claim of a job's name to run `slot` again.
    PlantedRerun(i64),
}

impl Contender {
    pub(crate) fn ms(&self, lo: u64, hi: u64) -> Duration {
        self.rng
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .ms(lo, hi)
    }

    pub(crate) fn chance(&self, percent: u64) -> bool {
        self.rng
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .chance(percent)
    }

    /// Reads the database's clock (bounded), calibrating the [`DbClock`](crate::clock::DbClock).
    pub(crate) async fn now(&self) -> Option<i64> {
        let sent = Instant::now();
        match timeout(CLOCK_READ_BOUND, self.leases.now()).await {
            Ok(Ok(now)) => {
                self.rec
                    .clock
                    .observe(sent, Instant::now(), now.as_millis());
                Some(now.as_millis())
            }
            _ => None,
        }
    }

    /// Sleeps `d`, or until shutdown; whether the whole sleep passed.
    pub(crate) async fn pause(&self, d: Duration) -> bool {
        tokio::select! {
            () = self.shutdown.cancelled() => false,
            () = sleep(d) => true,
        }
    }

    /// One claim attempt, recorded: the handle and the attempt's number
    /// when it succeeded.
    async fn attempt(&self, name: &str, kind: &Kind) -> Option<(Handle, u64)> {
        // Without a recent sample of the database's clock there is no bound
        // to record: calibrate first.
        let sent_ms = match self.rec.clock.lower(Instant::now()) {
            Some(ms) => ms,
            None => {
                let _ = self.now().await;
                return None;
            }
        };
        let seq = self.rec.next_seq();
        emit(&Event::Try {
            name: name.to_owned(),
            instance: self.rec.instance.clone(),
            seq,
            sent_ms,
        });
        let claimed = match kind {
            Kind::Plain | Kind::PlantedRerun(_) => self.leases.claim(name).await,
            Kind::Slot(slot) => {
                self.leases
                    .claim_instant(name, UtcMillis::from_millis(*slot))
                    .await
            }
            Kind::Rerun(u) => self.leases.claim_rerun(u).await,
        };
        let instance = self.rec.instance.clone();
        match claimed {
            Ok(Some(handle)) => Some((handle, seq)),
            Ok(None) => {
                emit(&Event::Refused { instance, seq });
                None
            }
            Err(_) => {
                emit(&Event::Failed { instance, seq });
                None
            }
        }
    }

    /// A tenure: hold the lease, run the work for `planned` (or until the
    /// context ends), record the end, then give the name back (or finish
    /// the instant). Returns whether the instant's end was recorded.
    async fn tenure(&self, handle: Handle, seq: u64, kind: &Kind, planned: Duration) -> bool {
        let holder = handle.hold(&self.shutdown);
        // Two lower bounds on when the work starts (it starts after both):
        // the calibration at the claim's return, and a read of the clock.
        let returned = Instant::now();
        let read = self.now().await;
        let lower = self.rec.clock.lower(returned);
        let claim_ms = read.max(lower).unwrap_or(i64::MIN);
        let (slot, rerun) = match kind {
            Kind::Plain => (None, false),
            Kind::Slot(s) => (Some(*s), false),
            Kind::Rerun(u) => (Some(u.instant.as_millis()), true),
            Kind::PlantedRerun(s) => (Some(*s), true),
        };
        let name = handle.name().to_owned();
        emit(&Event::Claim {
            name: name.clone(),
            instance: self.rec.instance.clone(),
            seq,
            term: handle.term(),
            slot,
            rerun,
            claim_ms,
        });

        let completed = if self.plant == Plant::SkipDeadline {
            // The planted bug: the work runs its course beside the lease,
            // whatever happens to the lease (it does stop for a shutdown).
            self.pause(planned).await
        } else {
            let ran = holder
                .run(move |ctx| async move {
                    tokio::select! {
                        () = sleep(planned) => true,
                        () = ctx.cancelled() => false,
                    }
                })
                .await;
            matches!(ran, Ok(true))
        };
        holder.stop().await;
        // Two upper bounds on when the work ended (it ended before both).
        let ended = Instant::now();
        let upper = self.rec.clock.upper(ended);
        let read = self.now().await;
        let stop_ms = match (read, upper) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => i64::MAX,
        };
        let lost = handle.lost();
        let cause = if lost {
            StopCause::Lost
        } else if self.shutdown.is_cancelled() {
            StopCause::Shutdown
        } else {
            StopCause::Done
        };
        emit(&Event::Stop {
            name,
            instance: self.rec.instance.clone(),
            seq,
            term: handle.term(),
            stop_ms,
            cause,
        });
        if lost {
            return false;
        }
        // The database reports whole milliseconds: a successor that claimed
        // within the millisecond of the read above would tie with it, and a
        // tie proves no order. Give the name back a little later.
        sleep(Duration::from_millis(2)).await;
        match (slot, completed) {
            (Some(slot), true) if !matches!(kind, Kind::PlantedRerun(_)) => {
                let passed = self
                    .now()
                    .await
                    .map_or(slot, |now| (now - now % EVERY_MS).max(slot));
                let finished = handle.finish(UtcMillis::from_millis(passed)).await;
                if finished.is_ok() && !handle.lost() {
                    emit(&Event::Finished {
                        instance: self.rec.instance.clone(),
                        seq,
                    });
                    return true;
                }
                false
            }
            _ => {
                let _ = handle.release().await;
                false
            }
        }
    }

    /// Leads `name` whenever it can.
    async fn lead(self: Arc<Self>, name: String) {
        while self.pause(self.ms(50, 300)).await {
            if let Some((handle, seq)) = self.attempt(&name, &Kind::Plain).await {
                // Planted work long enough that a lease lost under it is
                // taken over while it still runs.
                let planned = if self.plant == Plant::SkipDeadline {
                    self.ms(6_000, 12_000)
                } else {
                    self.ms(500, 5_000)
                };
                let _ = self.tenure(handle, seq, &Kind::Plain, planned).await;
            }
        }
    }

    /// Runs the instants of `job`.
    async fn schedule(self: Arc<Self>, job: String) {
        let mut last_tried = 0;
        loop {
            if let Ok(found) = self.leases.unfinished_instants(&[&job]).await {
                for u in found {
                    let kind = Kind::Rerun(u);
                    if let Some((handle, seq)) = self.attempt(&job, &kind).await {
                        let planned = self.round_length();
                        let _ = self.tenure(handle, seq, &kind, planned).await;
                    }
                }
            }
            if let Some(now) = self.now().await {
                let instant = now - now % EVERY_MS;
                if instant > last_tried {
                    last_tried = instant;
                    let kind = Kind::Slot(instant);
                    if let Some((handle, seq)) = self.attempt(&job, &kind).await {
                        let planned = self.round_length();
                        let finished = self.tenure(handle, seq, &kind, planned).await;
                        if finished && self.plant == Plant::RerunFinished {
                            let kind = Kind::PlantedRerun(instant);
                            if let Some((handle, seq)) = self.attempt(&job, &kind).await {
                                let _ = self.tenure(handle, seq, &kind, self.ms(50, 100)).await;
                            }
                        }
                    }
                }
            }
            if !self.pause(self.ms(20, 120)).await {
                break;
            }
        }
    }

    fn round_length(&self) -> Duration {
        if self.plant == Plant::SkipDeadline {
            self.ms(5_000, 9_000)
        } else if self.chance(10) {
            self.ms(800, 1_500)
        } else {
            self.ms(50, 500)
        }
    }
}

/// A contender process: runs until the orchestrator closes its stdin.
pub(crate) async fn run(instance: &str, run: &str, plant: Plant, url: &str) -> BoxResult<()> {
    // The store's server-side bounds from the soak's timings, which the
    // coordinators on it take.
    let base = dblease::connect_backend_with(url, &timings()?)
        .await?
        .store();
    let raw = plant.raw_store(base.clone());
    let rec = Arc::new(Recorder::new(instance));
    let recorded = RecordingStore::new(plant.capability_store(base), rec.clone());
    let me = Arc::new(Contender {
        leases: Leases::from_arc(raw).with_instance(instance)?,
        recorded: Leases::new(recorded).with_instance(instance)?,
        rec,
        plant,
        rng: Mutex::new(Rng::seeded()),
        shutdown: CancellationToken::new(),
    });
    for _ in 0..3 {
        let _ = me.now().await;
    }
    // Keeps the calibration fresh while the database answers.
    let calibrate = {
        let me = me.clone();
        tokio::spawn(async move {
            while me.pause(Duration::from_millis(200)).await {
                let _ = me.now().await;
            }
        })
    };
    let mut tasks = vec![calibrate];
    for i in 0..LEADERS {
        tasks.push(tokio::spawn(me.clone().lead(leader_name(run, i))));
    }
    tasks.push(tokio::spawn(me.clone().schedule(job_name(run))));
    tasks.push(tokio::spawn(me.clone().lock(run.to_owned())));
    tasks.push(tokio::spawn(me.clone().lead_elected(run.to_owned())));
    tasks.push(tokio::spawn(me.clone().cron(run.to_owned())));

    // The orchestrator closes our stdin to say the soak is over.
    let mut stdin = tokio::io::stdin();
    let mut sink = [0u8; 64];
    while matches!(stdin.read(&mut sink).await, Ok(n) if n > 0) {}
    me.shutdown.cancel();
    for task in tasks {
        let _ = timeout(Duration::from_secs(10), task).await;
    }
    Ok(())
}
