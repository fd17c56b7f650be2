//! The scheduler's loop on paused Tokio time against an in-memory store whose
//! clock is Tokio's: instants, overruns, retries within an instant, the rerun
//! sweep, catch-up, settling, shutdown and per-instance jobs. Default
//! protocol timings (lease 15 s, renew 2 s, deadline 10 s, grace 5 s).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers fail loudly"
)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Call, Logs, Row, T0, TestStore, secs};
use lease_core::{CancellationToken, Chain, Finished, Leases, NameError};
use lease_scheduler::{
    Error, Job, JobResult, MissedRuns, Removal, Round, ScheduleError, Scheduler,
};
use tokio::task::JoinHandle;
use tokio::time::sleep;

/// A round as the job saw it, times in ms since `T0`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    instant: i64,
    started: i64,
    term: Option<u64>,
    rerun: bool,
    catch_up: bool,
}

#[derive(Clone, Default)]
struct Rounds(Arc<Mutex<Vec<Seen>>>);

impl Rounds {
    fn see(&self, store: &TestStore, round: &Round) {
        self.0.lock().unwrap().push(Seen {
            instant: round.instant().as_millis() - T0,
            started: store.now() - T0,
            term: round.term(),
            rerun: round.is_rerun(),
            catch_up: round.is_catch_up(),
        });
    }

    fn all(&self) -> Vec<Seen> {
        self.0.lock().unwrap().clone()
    }

    fn instants(&self) -> Vec<i64> {
        self.all().iter().map(|s| s.instant).collect()
    }
}

fn seen(instant: i64, started: i64, term: u64) -> Seen {
    Seen {
        instant,
        started,
        term: Some(term),
        rerun: false,
        catch_up: false,
    }
}

/// A job that records its rounds and then does `then`.
fn recording<F, Fut>(name: &str, schedule: &str, store: &TestStore, rounds: &Rounds, then: F) -> Job
where
    F: Fn(Round) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = JobResult> + Send + 'static,
{
    let (store, rounds) = (store.clone(), rounds.clone());
    let then = Arc::new(then);
    Job::new(name, schedule, move |round: Round| {
        rounds.see(&store, &round);
        then(round)
    })
}

async fn done(_: Round) -> JobResult {
    Ok(())
}

/// Waits for the round's context to end, then stops as cut short.
async fn until_cancelled(round: Round) -> JobResult {
    round.cancelled().await;
    round.check()?;
    Ok(())
}

struct Running {
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), Error>>,
}

impl Running {
    async fn stop(self) -> Result<(), Error> {
        self.shutdown.cancel();
        self.task.await.unwrap()
    }
}

fn start(scheduler: Scheduler, wait: Duration) -> Running {
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    let task = tokio::spawn(async move { scheduler.run(&token, wait).await });
    Running { shutdown, task }
}

/// Sleeps until the store's clock reads `T0 + at_ms`.
async fn until(store: &TestStore, at_ms: i64) {
    let left = T0 + at_ms - store.now();
    sleep(Duration::from_millis(u64::try_from(left).unwrap())).await;
}

fn leases(store: &TestStore, instance: &str) -> Leases {
    Leases::new(store.clone()).with_instance(instance).unwrap()
}

const NAME: &str = "cron:tick";

#[tokio::test(start_paused = true)]
async fn each_instant_runs_when_it_comes_and_is_finished() {
    let (logs, _guard) = Logs::capture();
    let store = TestStore::new();
    let rounds = Rounds::default();
    let scheduler = Scheduler::builder(leases(&store, "a"))
        .job(recording("tick", "@every 10s", &store, &rounds, done))
        .build()
        .unwrap();
    until(&store, 3_000).await;
    let running = start(scheduler, secs(30));
    until(&store, 35_000).await;
    running.stop().await.unwrap();

    assert_eq!(
        rounds.all(),
        [
            seen(10_000, 10_000, 1),
            seen(20_000, 20_000, 2),
            seen(30_000, 30_000, 3)
        ]
    );
    let finishes: Vec<_> = store
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::Finish {
                slot,
                passed,
                outcome,
                ..
            } => Some((slot - T0, passed - T0, outcome)),
            _ => None,
        })
        .collect();
    assert_eq!(
        finishes,
        [
            (10_000, 10_000, Finished::Released),
            (20_000, 20_000, Finished::Released),
            (30_000, 30_000, Finished::Released)
        ]
    );
    let row = store.row(NAME).unwrap();
    assert_eq!(
        (row.slot_ms, row.unfinished_slot_ms, row.expires_at_ms),
        (T0 + 30_000, 0, 0)
    );
    // A job that never ran is not caught up: nothing was claimed at start.
    assert!(
        store
            .calls()
            .contains(&Call::LastInstant { name: NAME.into() })
    );
    let started = logs.matching(&[
        "round started",
        "job=\"tick\"",
        "instant=2025-12-01T10:00:20.000Z",
    ]);
    assert_eq!(started.len(), 1, "{:#?}", logs.lines());
    assert!(started[0].contains("term=2"), "{started:?}");
}

#[tokio::test(start_paused = true)]
async fn an_overrun_skips_the_instants_it_covered_and_says_how_many() {
    let (logs, _guard) = Logs::capture();
    let store = TestStore::new();
    let rounds = Rounds::default();
    let first = Arc::new(AtomicBool::new(true));
    let job = recording("tick", "@every 10s", &store, &rounds, move |_round| {
        let long = first.swap(false, Ordering::SeqCst);
        async move {
            if long {
                sleep(secs(25)).await;
            }
            Ok(())
        }
    });
    let scheduler = Scheduler::builder(leases(&store, "a"))
        .job(job)
        .build()
        .unwrap();
    until(&store, 1_000).await;
    let running = start(scheduler, secs(30));
    until(&store, 45_000).await;
    running.stop().await.unwrap();

    // 10 s ran until 35 s: 20 s and 30 s were skipped, not stacked.
    assert_eq!(rounds.instants(), [10_000, 40_000]);
    assert_eq!(rounds.all()[1].started, 40_000);
    assert!(store.calls().contains(&Call::Finish {
        name: NAME.into(),
        slot: T0 + 10_000,
        passed: T0 + 30_000,
        outcome: Finished::Released,
    }));
    let claimed: Vec<_> = store
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::ClaimInstant { slot, .. } => Some(slot - T0),
            _ => None,
        })
        .collect();
    assert_eq!(
        claimed,
        [10_000, 40_000],
        "skipped instants are not claimed"
    );
    let warned = logs.matching(&["the round overran", "skipped=2"]);
    assert_eq!(warned.len(), 1, "{:#?}", logs.lines());
    assert!(
        warned[0].contains("first_skipped=2025-12-01T10:00:20.000Z"),
        "{warned:?}"
    );
    assert!(
        warned[0].contains("last_skipped=2025-12-01T10:00:30.000Z"),
        "{warned:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_database_error_is_retried_within_the_instant() {
    let (logs, _guard) = Logs::capture();
    let store = TestStore::new();
    let rounds = Rounds::default();
    let scheduler = Scheduler::builder(leases(&store, "a"))
        .job(recording("tick", "@every 10s", &store, &rounds, done))
        .build()
        .unwrap();
    until(&store, 1_000).await;
    store.fail_claims(2);
    let running = start(scheduler, secs(30));
    until(&store, 25_000).await;
    running.stop().await.unwrap();

    // Tried at 10 s and 12 s (failed), 14 s (claimed): still the round of 10 s.
    let failed: Vec<_> = store
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::ClaimInstantFailed { slot, at, .. } => Some((slot - T0, at - T0)),
            _ => None,
        })
        .collect();
    assert_eq!(failed, [(10_000, 10_000), (10_000, 12_000)]);
    assert_eq!(
        rounds.all(),
        [seen(10_000, 14_000, 1), seen(20_000, 20_000, 2)]
    );
    assert_eq!(logs.matching(&["trying again", "job=\"tick\""]).len(), 2);
}

#[tokio::test(start_paused = true)]
async fn an_instant_the_database_never_answered_for_is_given_up_for_the_next() {
    let (logs, _guard) = Logs::capture();
    let store = TestStore::new();
    let rounds = Rounds::default();
    let scheduler = Scheduler::builder(leases(&store, "a"))
        .job(recording("tick", "@every 10s", &store, &rounds, done))
        .build()
        .unwrap();
    until(&store, 1_000).await;
    // Attempts at 10, 12, 14, 16 and 18 s fail; a retry at 20 s would be
    // when the next instant is due.
    store.fail_claims(5);
    let running = start(scheduler, secs(30));
    until(&store, 25_000).await;
    running.stop().await.unwrap();

    assert_eq!(rounds.all(), [seen(20_000, 20_000, 1)]);
    let gave_up = logs.matching(&["gave up the instant", "instant=2025-12-01T10:00:10.000Z"]);
    assert_eq!(gave_up.len(), 1, "{:#?}", logs.lines());
}

#[tokio::test(start_paused = true)]
async fn the_sweep_reruns_a_round_cut_short_once_and_never_a_third_time() {
    let (logs, _guard) = Logs::capture();
    let store = TestStore::new();
    // A round of 09:59:00 was cut short and given back (a shutdown), term 3.
    store.set_row(
        NAME,
        Row {
            term: 3,
            slot_ms: T0 - 60_000,
            unfinished_slot_ms: T0 - 60_000,
            ..Row::default()
        },
    );
    let rounds = Rounds::default();
    let a = Scheduler::builder(leases(&store, "a"))
        .job(recording(
            "tick",
            "@every 1h",
            &store,
            &rounds,
            until_cancelled,
        ))
        .catch_up_look_back(Duration::ZERO)
        .build()
        .unwrap();
    until(&store, 1_000).await;
    let running = start(a, secs(30));
    until(&store, 5_000).await;
    // The sweep ran as the scheduler started; the rerun is in flight. Shut
    // down: it is cut short a second time, and given back.
    running.stop().await.unwrap();
    assert_eq!(
        rounds.all(),
        [Seen {
            instant: -60_000,
            started: 1_000,
            term: Some(4),
            rerun: true,
            catch_up: false
        }]
    );
    let row = store.row(NAME).unwrap();
    assert_eq!(row.rerun_slot_ms, T0 - 60_000);
    assert_eq!(row.unfinished_slot_ms, T0 - 60_000);
    assert_eq!(row.expires_at_ms, 0, "released");
    let warned = logs.matching(&[
        "rerun cut short too: the instant stays unfinished for good",
        "instant=2025-12-01T09:59:00.000Z",
        "released=true",
    ]);
    assert_eq!(warned.len(), 1, "{:#?}", logs.lines());
    // 10:00:00 came after the rerun's instant, but before the scheduler
    // started: the rerun skipped nothing.
    assert_eq!(logs.matching(&["overran"]), Vec::<String>::new());

    // Another replica sweeps every second for a minute: nothing to run.
    let b = Scheduler::builder(leases(&store, "b"))
        .job(recording("tick", "@every 1h", &store, &rounds, done))
        .catch_up_look_back(Duration::ZERO)
        .sweep_interval(secs(1))
        .build()
        .unwrap();
    let running = start(b, secs(30));
    until(&store, 65_000).await;
    running.stop().await.unwrap();
    assert_eq!(
        rounds.all().len(),
        1,
        "never a third run: {:?}",
        rounds.all()
    );
    let sweeps = store
        .calls()
        .iter()
        .filter(|c| matches!(c, Call::FindUnfinished { .. }))
        .count();
    assert!(sweeps >= 30, "b swept {sweeps} times");
}

#[tokio::test(start_paused = true)]
async fn the_sweep_runs_once_per_interval_for_all_jobs_in_one_call() {
    let store = TestStore::new();
    let rounds = Rounds::default();
    let scheduler = Scheduler::builder(leases(&store, "a"))
        .job(recording("one", "@every 1h", &store, &rounds, done))
        .job(recording("two", "@every 1h", &store, &rounds, done))
        .job(recording("three", "@every 1h", &store, &rounds, done))
        .job(recording("local", "@every 1h", &store, &rounds, done).per_instance())
        .build()
        .unwrap();
    until(&store, 1_000).await;
    let running = start(scheduler, secs(30));
    until(&store, 65_000).await;
    running.stop().await.unwrap();
    let at: Vec<i64> = store
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::FindUnfinished { at } => Some(at - T0),
            _ => None,
        })
        .collect();
    // At start, then every 15 s plus up to 1 s: 4 or 5 sweeps by 65 s.
    assert_eq!(at[0], 1_000);
    assert!((4..=5).contains(&at.len()), "{at:?}");
    for pair in at.windows(2) {
        let gap = pair[1] - pair[0];
        assert!((15_000..=16_000).contains(&gap), "{at:?}");
    }
}

/// A row of a job that last ran (and finished) `last_ms` from `T0`.
fn ran_before(store: &TestStore, name: &str, last_ms: i64) {
    store.set_row(
        name,
        Row {
            term: 7,
            slot_ms: T0 + last_ms,
            ..Row::default()
        },
    );
}

#[tokio::test(start_paused = true)]
async fn catch_up_runs_the_last_missed_instant_once_as_the_scheduler_starts() {
    let store = TestStore::new();
    ran_before(&store, NAME, -20 * 60_000);
    let rounds = Rounds::default();
    let scheduler = Scheduler::builder(leases(&store, "a"))
        .job(recording("tick", "0 */10 * * * *", &store, &rounds, done))
        .build()
        .unwrap();
    until(&store, 5 * 60_000).await;
    let running = start(scheduler, secs(30));
    until(&store, 10 * 60_000 + 1_000).await;
    running.stop().await.unwrap();
    assert_eq!(
        rounds.all(),
        [
            Seen {
                instant: 0,
                started: 5 * 60_000,
                term: Some(8),
                rerun: false,
                catch_up: true
            },
            seen(10 * 60_000, 10 * 60_000, 9),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn catch_up_off_or_past_the_look_back_runs_nothing_at_start() {
    for look_back in [Duration::ZERO, secs(4 * 60)] {
        let store = TestStore::new();
        ran_before(&store, NAME, -20 * 60_000);
        let rounds = Rounds::default();
        let scheduler = Scheduler::builder(leases(&store, "a"))
            .job(recording("tick", "0 */10 * * * *", &store, &rounds, done))
            .catch_up_look_back(look_back)
            .build()
            .unwrap();
        until(&store, 5 * 60_000).await;
        let running = start(scheduler, secs(30));
        until(&store, 10 * 60_000 + 1_000).await;
        running.stop().await.unwrap();
        assert_eq!(
            rounds.all(),
            [seen(10 * 60_000, 10 * 60_000, 8)],
            "{look_back:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn catch_up_is_not_run_when_a_replica_already_claimed_the_instant() {
    let store = TestStore::new();
    ran_before(&store, NAME, 0);
    let rounds = Rounds::default();
    let scheduler = Scheduler::builder(leases(&store, "a"))
        .job(recording("tick", "0 */10 * * * *", &store, &rounds, done))
        .build()
        .unwrap();
    until(&store, 5 * 60_000).await;
    let running = start(scheduler, secs(30));
    until(&store, 6 * 60_000).await;
    running.stop().await.unwrap();
    assert_eq!(rounds.all(), []);
}

#[tokio::test(start_paused = true)]
async fn cut_short_and_lost_settles_nothing_and_the_sweep_reruns_it() {
    let (logs, _guard) = Logs::capture();
    let store = TestStore::new();
    let rounds = Rounds::default();
    let calls = Arc::new(AtomicU32::new(0));
    let job = recording("tick", "@every 1m", &store, &rounds, move |round: Round| {
        let first = calls.fetch_add(1, Ordering::SeqCst) == 0;
        async move {
            if first {
                round.cancelled().await;
                round.check()?;
            }
            Ok(())
        }
    });
    let scheduler = Scheduler::builder(leases(&store, "a"))
        .job(job)
        .build()
        .unwrap();
    until(&store, 1_000).await;
    store.lose(NAME); // the first renewal, at 62 s, finds the name gone
    let running = start(scheduler, secs(30));
    until(&store, 63_000).await;
    store.unlose(NAME);
    let calls_so_far = store.calls();
    assert!(
        !calls_so_far
            .iter()
            .any(|c| matches!(c, Call::Finish { .. } | Call::Release { .. })),
        "a round cut short and lost settles nothing: {calls_so_far:?}"
    );
    let row = store.row(NAME).unwrap();
    assert_eq!(row.unfinished_slot_ms, T0 + 60_000);
    assert_eq!(row.expires_at_ms, T0 + 75_000, "left to expire");
    let warned = logs.matching(&[
        "round cut short: a replica's sweep runs it again",
        "lost=true",
    ]);
    assert_eq!(warned.len(), 1, "{:#?}", logs.lines());
    assert!(!warned[0].contains("released"), "{warned:?}");

    // Expired at 75 s; the sweep after that (every 15-16 s) runs it again.
    until(&store, 100_000).await;
    running.stop().await.unwrap();
    let all = rounds.all();
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!((all[0].instant, all[0].rerun), (60_000, false));
    assert_eq!((all[1].instant, all[1].rerun), (60_000, true));
    assert!((75_000..=97_000).contains(&all[1].started), "{all:?}");
    let row = store.row(NAME).unwrap();
    assert_eq!(row.unfinished_slot_ms, 0, "the rerun ran to its end");
    assert_eq!(row.rerun_slot_ms, T0 + 60_000);
}

#[tokio::test(start_paused = true)]
async fn a_later_claim_gives_up_a_round_cut_short_with_a_warning() {
    let (logs, _guard) = Logs::capture();
    let store = TestStore::new();
    let rounds = Rounds::default();
    let scheduler = Scheduler::builder(leases(&store, "a"))
        .job(recording(
            "tick",
            "@every 10s",
            &store,
            &rounds,
            until_cancelled,
        ))
        .build()
        .unwrap();
    until(&store, 1_000).await;
    store.lose(NAME);
    let running = start(scheduler, secs(30));
    until(&store, 13_000).await;
    store.unlose(NAME);
    // 10 s: lost at 12 s, expires at 25 s; 20 s: refused (held); 30 s:
    // claimed, giving 10 s up before a sweep (16-17 s, 32-34 s) could rerun it.
    until(&store, 31_000).await;
    running.stop().await.unwrap();
    assert_eq!(rounds.instants(), [10_000, 30_000]);
    let warned = logs.matching(&["gave up a round cut short"]);
    assert_eq!(warned.len(), 1, "{:#?}", logs.lines());
    assert!(
        warned[0].contains("superseded=2025-12-01T10:00:10.000Z"),
        "{warned:?}"
    );
    assert!(
        warned[0].contains("instant=2025-12-01T10:00:30.000Z"),
        "{warned:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn cut_short_by_shutdown_is_released_for_a_peer_to_rerun() {
    let (logs, _guard) = Logs::capture();
    let store = TestStore::new();
    let rounds = Rounds::default();
    let scheduler = Scheduler::builder(leases(&store, "a"))
        .job(recording(
            "tick",
            "@every 10s",
            &store,
            &rounds,
            until_cancelled,
        ))
        .build()
        .unwrap();
    until(&store, 1_000).await;
    let running = start(scheduler, secs(30));
    until(&store, 12_000).await;
    running.stop().await.unwrap();
    let calls = store.calls();
    assert!(calls.contains(&Call::Release {
        name: NAME.into(),
        released: true
    }));
    assert!(
        !calls.iter().any(|c| matches!(c, Call::Finish { .. })),
        "{calls:?}"
    );
    let row = store.row(NAME).unwrap();
    assert_eq!(
        (row.unfinished_slot_ms, row.expires_at_ms),
        (T0 + 10_000, 0),
        "unfinished and free: the next sweep anywhere finds it"
    );
    let warned = logs.matching(&["round cut short", "lost=false", "released=true"]);
    assert_eq!(warned.len(), 1, "{:#?}", logs.lines());
}

/// Issue 25, item 4: a round whose holder is asked to resign is cut short
/// (its context ends with `Resigned`, not a loss), given back at once, and
/// rerun once by a replica's sweep, at the next term.
#[tokio::test(start_paused = true)]
async fn a_round_asked_to_resign_is_cut_short_and_rerun_once() {
    let store = TestStore::new();
    let rounds = Rounds::default();
    let causes = Arc::new(Mutex::new(Vec::new()));
    let job = |instance: &'static str| {
        let causes = causes.clone();
        recording("tick", "@every 1h", &store, &rounds, move |round: Round| {
            let causes = causes.clone();
            async move {
                if round.is_rerun() {
                    return Ok(());
                }
                round.cancelled().await;
                let cause = round.lease().and_then(|l| l.cause());
                causes.lock().unwrap().push((instance, cause));
                round.check()?;
                Ok(())
            }
        })
    };
    let a = Scheduler::builder(leases(&store, "a"))
        .job(job("a"))
        .catch_up_look_back(Duration::ZERO)
        .sweep_interval(secs(1))
        .build()
        .unwrap();
    let b = Scheduler::builder(leases(&store, "b"))
        .job(job("b"))
        .catch_up_look_back(Duration::ZERO)
        .sweep_interval(secs(1))
        .build()
        .unwrap();
    until(&store, 1_000).await;
    let (a, b) = (start(a, secs(30)), start(b, secs(30)));
    // The round of 11:00:00 runs.
    until(&store, 3_605_000).await;
    assert_eq!(rounds.instants(), [3_600_000]);
    let operator = leases(&store, "operator");
    assert_eq!(operator.request_resign(NAME).await.unwrap(), Some(1));
    // Within a renewal (2 s) it is asked; within a sweep (1 s) it reruns.
    until(&store, 3_610_000).await;
    let all = rounds.all();
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(
        (all[1].instant, all[1].term, all[1].rerun),
        (3_600_000, Some(2), true),
        "rerun once, at the next term: {all:?}"
    );
    assert_eq!(
        causes.lock().unwrap().first().map(|c| c.1),
        Some(Some(lease_core::EndCause::Resigned))
    );
    let calls = store.calls();
    assert!(
        calls.contains(&Call::Release {
            name: NAME.into(),
            released: true
        }),
        "the resigned round gave the name back: {calls:?}"
    );
    // Never a third run.
    until(&store, 3_630_000).await;
    a.stop().await.unwrap();
    b.stop().await.unwrap();
    assert_eq!(rounds.all().len(), 2, "{:?}", rounds.all());
    let row = store.row(NAME).unwrap();
    assert_eq!(row.unfinished_slot_ms, 0, "the rerun finished it");
}

#[tokio::test(start_paused = true)]
async fn a_round_that_returns_ok_after_the_shutdown_ran_to_its_end() {
    let store = TestStore::new();
    let rounds = Rounds::default();
    let job = recording(
        "tick",
        "@every 10s",
        &store,
        &rounds,
        |round: Round| async move {
            round.cancelled().await;
            Ok(())
        },
    );
    let scheduler = Scheduler::builder(leases(&store, "a"))
        .job(job)
        .build()
        .unwrap();
    until(&store, 1_000).await;
    let running = start(scheduler, secs(30));
    until(&store, 12_000).await;
    running.stop().await.unwrap();
    assert!(store.calls().contains(&Call::Finish {
        name: NAME.into(),
        slot: T0 + 10_000,
        passed: T0 + 10_000,
        outcome: Finished::Released,
    }));
    assert_eq!(store.row(NAME).unwrap().unfinished_slot_ms, 0);
}

#[tokio::test(start_paused = true)]
async fn a_round_that_ran_to_its_end_is_finished_even_when_its_lease_was_lost() {
    let store = TestStore::new();
    let rounds = Rounds::default();
    // Ignores its context: returns 3 s after the loss, within the grace.
    let job = recording("tick", "@every 1m", &store, &rounds, |_round| async {
        sleep(secs(5)).await;
        Ok(())
    });
    let scheduler = Scheduler::builder(leases(&store, "a"))
        .job(job)
        .build()
        .unwrap();
    until(&store, 1_000).await;
    store.lose(NAME);
    let running = start(scheduler, secs(30));
    until(&store, 70_000).await;
    running.stop().await.unwrap();
    assert!(store.calls().contains(&Call::Finish {
        name: NAME.into(),
        slot: T0 + 60_000,
        passed: T0 + 60_000,
        outcome: Finished::RecordedWithoutLease,
    }));
    let row = store.row(NAME).unwrap();
    assert_eq!(row.unfinished_slot_ms, 0, "recorded: never rerun");
}

#[tokio::test(start_paused = true)]
async fn a_failed_round_ran_to_its_end_and_is_not_rerun() {
    let (logs, _guard) = Logs::capture();
    let store = TestStore::new();
    let rounds = Rounds::default();
    let job = recording("tick", "@every 10s", &store, &rounds, |_round| async {
        Err("the report server said no".into())
    });
    let scheduler = Scheduler::builder(leases(&store, "a"))
        .job(job)
        .build()
        .unwrap();
    until(&store, 1_000).await;
    let running = start(scheduler, secs(30));
    until(&store, 11_000).await;
    running.stop().await.unwrap();
    assert_eq!(store.row(NAME).unwrap().unfinished_slot_ms, 0);
    let failed = logs.matching(&["round failed", "the report server said no"]);
    assert_eq!(failed.len(), 1, "{:#?}", logs.lines());
}

#[tokio::test(start_paused = true)]
async fn shutdown_waits_at_most_the_given_wait_then_aborts_the_round() {
    let store = TestStore::new();
    let rounds = Rounds::default();
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = dropped.clone();
    let job = recording("stuck", "@every 10s", &store, &rounds, move |_round| {
        let guard = SetOnDrop(flag.clone());
        async move {
            let _guard = guard;
            sleep(secs(3_600)).await;
            Ok(())
        }
    });
    let scheduler = Scheduler::builder(leases(&store, "a"))
        .job(job)
        .build()
        .unwrap();
    until(&store, 1_000).await;
    let running = start(scheduler, secs(5));
    until(&store, 12_000).await;
    let err = running.stop().await.unwrap_err();
    assert_eq!(store.now() - T0, 17_000, "returned when the wait ran out");
    match err {
        Error::ShutdownTimedOut { jobs, waited } => {
            assert_eq!(jobs, ["stuck"]);
            assert_eq!(waited, secs(5));
        }
        other => panic!("unexpected {other:?}"),
    }
    sleep(Duration::from_millis(1)).await;
    assert!(
        dropped.load(Ordering::SeqCst),
        "the round's work was aborted"
    );
    let row = store.row("cron:stuck").unwrap();
    assert_eq!(
        row.unfinished_slot_ms,
        T0 + 10_000,
        "left to expire and run again"
    );
}

/// Issue 23, defect 2: stopped with no round running, the scheduler waits
/// for its jobs' loops to see the shutdown, whatever the wait, and returns
/// `Ok`: with a zero wait between two instants, and with a token cancelled
/// before it started. (It returned `ShutdownTimedOut { jobs: [] }`: the
/// expired wait won before the loops had run.)
#[tokio::test(start_paused = true)]
async fn a_shutdown_with_no_round_running_waits_for_the_loops_whatever_the_wait() {
    let store = TestStore::new();
    let rounds = Rounds::default();
    let build = || {
        Scheduler::builder(leases(&store, "a"))
            .job(recording("idle", "@every 10s", &store, &rounds, done))
            .job(recording("local", "@every 10s", &store, &rounds, done).per_instance())
            .sweep_interval(secs(1))
            .build()
            .unwrap()
    };
    until(&store, 1_000).await;
    let running = start(build(), Duration::ZERO);
    until(&store, 5_000).await;
    running.stop().await.unwrap();
    assert_eq!(store.now() - T0, 5_000, "no wait");

    let shutdown = CancellationToken::new();
    shutdown.cancel();
    build().run(&shutdown, Duration::ZERO).await.unwrap();
    build().run(&shutdown, secs(5)).await.unwrap();
    assert_eq!(store.now() - T0, 5_000, "no wait");
    assert!(rounds.all().is_empty(), "{:?}", rounds.all());
}

/// A round still running when a zero wait is over is aborted as before.
#[tokio::test(start_paused = true)]
async fn a_zero_wait_aborts_a_round_still_running() {
    let store = TestStore::new();
    let rounds = Rounds::default();
    let job = recording("stuck", "@every 10s", &store, &rounds, |_round| async {
        sleep(secs(3_600)).await;
        Ok(())
    });
    let scheduler = Scheduler::builder(leases(&store, "a"))
        .job(job)
        .build()
        .unwrap();
    until(&store, 1_000).await;
    let running = start(scheduler, Duration::ZERO);
    until(&store, 12_000).await;
    match running.stop().await.unwrap_err() {
        Error::ShutdownTimedOut { jobs, waited } => {
            assert_eq!(jobs, ["stuck"]);
            assert_eq!(waited, Duration::ZERO);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(store.now() - T0, 12_000, "no wait");
}

struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[tokio::test(start_paused = true)]
async fn a_per_instance_job_runs_on_every_replica_without_a_lease() {
    let store = TestStore::new();
    let (ra, rb) = (Rounds::default(), Rounds::default());
    let a = Scheduler::builder(leases(&store, "a"))
        .job(recording("local", "@every 10s", &store, &ra, done).per_instance())
        .build()
        .unwrap();
    let b = Scheduler::builder(leases(&store, "b"))
        .job(recording("local", "@every 10s", &store, &rb, done).per_instance())
        .build()
        .unwrap();
    until(&store, 1_000).await;
    let (a, b) = (start(a, secs(5)), start(b, secs(5)));
    until(&store, 31_000).await;
    a.stop().await.unwrap();
    b.stop().await.unwrap();
    for rounds in [ra, rb] {
        let all = rounds.all();
        assert_eq!(rounds.instants(), [10_000, 20_000, 30_000]);
        assert!(all.iter().all(|s| s.term.is_none()), "{all:?}");
    }
    assert_eq!(store.row("cron:local"), None);
    assert!(store.calls().is_empty(), "{:?}", store.calls());
}

#[tokio::test(start_paused = true)]
async fn two_replicas_run_each_instant_once() {
    let store = TestStore::new();
    let rounds = Rounds::default();
    let a = Scheduler::builder(leases(&store, "a"))
        .job(recording("tick", "*/5 * * * * *", &store, &rounds, done))
        .build()
        .unwrap();
    let b = Scheduler::builder(leases(&store, "b"))
        .job(recording("tick", "*/5 * * * * *", &store, &rounds, done))
        .build()
        .unwrap();
    until(&store, 1_000).await;
    let (a, b) = (start(a, secs(5)), start(b, secs(5)));
    until(&store, 31_000).await;
    a.stop().await.unwrap();
    b.stop().await.unwrap();
    assert_eq!(
        rounds.instants(),
        [5_000, 10_000, 15_000, 20_000, 25_000, 30_000]
    );
}

#[test]
fn registration_errors_fail_the_build_with_a_clear_message() {
    let build = |jobs: Vec<Job>| {
        let mut b = Scheduler::builder(Leases::new(TestStore::new()));
        for job in jobs {
            b = b.job(job);
        }
        b.build()
    };
    let job = |name: &str, schedule: &str| Job::new(name, schedule, done);

    let err = build(vec![job("", "@hourly")]).unwrap_err();
    assert!(matches!(err, Error::EmptyName));
    assert!(err.to_string().contains("empty name"), "{err}");

    let err = build(vec![job("a", "@hourly"), job("a", "@daily")]).unwrap_err();
    assert!(matches!(&err, Error::DuplicateName { job } if job == "a"));
    assert!(err.to_string().contains("\"a\""), "{err}");

    // cron: is 5 bytes: a 186-byte name makes a 191-byte lease name.
    let _ = build(vec![job(&"n".repeat(186), "@hourly")]).unwrap();
    let err = build(vec![job(&"n".repeat(187), "@hourly")]).unwrap_err();
    assert!(
        matches!(
            err,
            Error::NameTooLong {
                len: 192,
                max: 191,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("192 bytes"), "{err}");

    let err = build(vec![job("a", "every five minutes")]).unwrap_err();
    match &err {
        Error::InvalidSchedule {
            job,
            schedule,
            source: ScheduleError::Cron { .. },
        } => {
            assert_eq!(
                (job.as_str(), schedule.as_str()),
                ("a", "every five minutes")
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    let err = build(vec![job("a", "@hourly").time_zone("Not/AZone")]).unwrap_err();
    assert!(
        matches!(
            &err,
            Error::InvalidSchedule {
                source: ScheduleError::UnknownTimeZone { .. },
                ..
            }
        ),
        "{err:?}"
    );

    let ok = build(vec![
        job("a", "*/10 * * * * *"),
        job("b", "0 3 * * *"),
        job("c", "@daily"),
        job("d", "@every 5m"),
        job("e", "CRON_TZ=Europe/Berlin 0 30 2 * * *"),
        job("f", "0 9 * * MON-FRI").time_zone("America/New_York"),
        job("g", "@every 1m").per_instance(),
    ])
    .unwrap();
    assert_eq!(ok.jobs(), ["a", "b", "c", "d", "e", "f", "g"]);
}

/// Issue 23, defect 3: a job name a lease name cannot hold fails the build,
/// instead of building a job that never runs (every claim refused) and
/// whose name forges log lines: a control character, with the error
/// `validate_name` gives as the source; a name of whitespace only as blank.
#[test]
fn names_with_control_characters_or_only_whitespace_fail_the_build() {
    let build = |name: &str| {
        Scheduler::builder(Leases::new(TestStore::new()))
            .job(Job::new(name, "@hourly", done))
            .build()
    };
    for name in [
        "report\nINFO forged line",
        "a\u{1b}[2Jb",
        "nul\0",
        "del\u{7f}",
        "c1\u{85}",
        "cr\r",
    ] {
        let err = build(name).unwrap_err();
        let Error::InvalidName { job, source } = &err else {
            panic!("{name:?}: unexpected {err:?}");
        };
        assert_eq!(job, name);
        let refused = lease_core::validate_name(&format!("cron:{name}")).unwrap_err();
        assert!(
            matches!(
                source,
                lease_core::Error::InvalidName {
                    reason: NameError::ControlCharacter { .. }
                }
            ),
            "{source:?}"
        );
        assert_eq!(source.to_string(), refused.to_string());
        let shown = Chain(&err).to_string();
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
        assert!(shown.contains("control character"), "{shown}");
    }
    for name in [" ", "   ", "\t", " \n ", "\u{3000}"] {
        let err = build(name).unwrap_err();
        assert!(
            matches!(&err, Error::BlankName { job } if job == name),
            "{name:?}: {err:?}"
        );
        assert!(err.to_string().contains("blank"), "{err}");
        assert!(!err.to_string().chars().any(char::is_control), "{err}");
    }
    // Spaces inside a name, and other Unicode, are names like any other.
    let _ = build(" padded report ").unwrap();
    let _ = build("rapport-été").unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_job_that_panics_before_its_future_fails_that_round_alone() {
    let store = TestStore::new();
    let rounds = Rounds::default();
    let panicking = |name: &str| {
        let (store, rounds) = (store.clone(), rounds.clone());
        let calls = Arc::new(AtomicU32::new(0));
        Job::new(name, "@every 10s", move |round: Round| {
            assert!(
                calls.fetch_add(1, Ordering::SeqCst) > 0,
                "(planted) the first call panics before making its future"
            );
            rounds.see(&store, &round);
            async { Ok(()) }
        })
    };
    let scheduler = Scheduler::builder(leases(&store, "a"))
        .job(panicking("tick"))
        .job(panicking("local").per_instance())
        .build()
        .unwrap();
    until(&store, 1_000).await;
    let running = start(scheduler, secs(5));
    until(&store, 21_000).await;
    running.stop().await.unwrap();
    let mut instants = rounds.instants();
    instants.sort_unstable();
    assert_eq!(
        instants,
        [20_000, 20_000],
        "both jobs go on after the panic"
    );
    // The cluster job's panicked round ran to its end (a failure): finished.
    assert!(store.calls().contains(&Call::Finish {
        name: NAME.into(),
        slot: T0 + 10_000,
        passed: T0 + 10_000,
        outcome: Finished::Released,
    }));
}

// Missed-run policies (`MissedRuns`): the timelines of the crate docs.

fn catch_up(instant: i64, started: i64, term: u64) -> Seen {
    Seen {
        catch_up: true,
        ..seen(instant, started, term)
    }
}

const MIN: i64 = 60_000;

/// The instants a job's finishes recorded as passed, from `T0`.
fn passed(store: &TestStore) -> Vec<(i64, i64)> {
    store
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::Finish { slot, passed, .. } => Some((slot - T0, passed - T0)),
            _ => None,
        })
        .collect()
}

/// Started at 5 min, the job last ran at -20 min, every 10 min: the instant
/// of 0 min came while no replica ran.
#[tokio::test(start_paused = true)]
async fn skip_runs_nothing_missed_and_latest_the_last_once_as_the_scheduler_starts() {
    let cases = [
        (Some(MissedRuns::Skip), vec![seen(10 * MIN, 10 * MIN, 8)]),
        (
            Some(MissedRuns::Latest),
            vec![catch_up(0, 5 * MIN, 8), seen(10 * MIN, 10 * MIN, 9)],
        ),
        // Latest is the default.
        (
            None,
            vec![catch_up(0, 5 * MIN, 8), seen(10 * MIN, 10 * MIN, 9)],
        ),
    ];
    for (policy, want) in cases {
        let store = TestStore::new();
        ran_before(&store, NAME, -20 * MIN);
        let rounds = Rounds::default();
        let mut job = recording("tick", "0 */10 * * * *", &store, &rounds, done);
        if let Some(policy) = policy {
            job = job.missed(policy);
        }
        let scheduler = Scheduler::builder(leases(&store, "a"))
            .job(job)
            .build()
            .unwrap();
        until(&store, 5 * MIN).await;
        let running = start(scheduler, secs(30));
        until(&store, 10 * MIN + 1_000).await;
        running.stop().await.unwrap();
        assert_eq!(rounds.all(), want, "{policy:?}");
    }
}

/// The process stalls from 12 s to 47 s (its runtime does not wake): the
/// instants of 20 s and 30 s came while no round could run them.
#[tokio::test(start_paused = true)]
async fn after_a_stall_skip_and_latest_run_the_latest_instant_and_backfill_runs_them_all() {
    let backfill = MissedRuns::Backfill {
        look_back: secs(3_600),
    };
    let cases = [
        (
            MissedRuns::Skip,
            vec![seen(10_000, 10_000, 1), seen(40_000, 47_000, 2)],
        ),
        (
            MissedRuns::Latest,
            vec![seen(10_000, 10_000, 1), catch_up(40_000, 47_000, 2)],
        ),
        (
            backfill,
            vec![
                seen(10_000, 10_000, 1),
                catch_up(20_000, 47_000, 2),
                catch_up(30_000, 47_000, 3),
                seen(40_000, 47_000, 4),
            ],
        ),
    ];
    for (policy, mut want) in cases {
        let (logs, _guard) = Logs::capture();
        let store = TestStore::new();
        let rounds = Rounds::default();
        let scheduler = Scheduler::builder(leases(&store, "a"))
            .job(recording("tick", "@every 10s", &store, &rounds, done).missed(policy))
            .build()
            .unwrap();
        until(&store, 1_000).await;
        let running = start(scheduler, secs(30));
        until(&store, 12_000).await;
        tokio::time::advance(secs(35)).await;
        until(&store, 55_000).await;
        running.stop().await.unwrap();
        let term = want.last().unwrap().term.unwrap();
        want.push(seen(50_000, 50_000, term + 1));
        assert_eq!(rounds.all(), want, "{policy:?}");
        let missed = logs.matching(&["instants missed: no round ran them", "missed=2"]);
        if policy == backfill {
            assert_eq!(missed, Vec::<String>::new(), "{policy:?}");
            // Each instant on record as it ran: none taken along.
            assert_eq!(
                passed(&store),
                [10_000, 20_000, 30_000, 40_000, 50_000].map(|t| (t, t))
            );
        } else {
            assert_eq!(missed.len(), 1, "{policy:?}: {:#?}", logs.lines());
            assert!(
                missed[0].contains("first_missed=2025-12-01T10:00:20.000Z"),
                "{missed:?}"
            );
        }
    }
}

/// Backfill as the scheduler starts: every instant after the last on record
/// and within the look-back, oldest first, one round at a time; instants an
/// overrun covered run after it; older ones are lost, with a warning.
#[tokio::test(start_paused = true)]
async fn backfill_runs_every_missed_instant_in_the_look_back_oldest_first_one_at_a_time() {
    let (logs, _guard) = Logs::capture();
    let store = TestStore::new();
    ran_before(&store, NAME, -60 * MIN);
    let rounds = Rounds::default();
    let job = recording("tick", "0 */10 * * * *", &store, &rounds, |_round| async {
        sleep(secs(120)).await;
        Ok(())
    })
    .missed(MissedRuns::Backfill {
        look_back: secs(25 * 60),
    });
    let scheduler = Scheduler::builder(leases(&store, "a"))
        .job(job)
        .build()
        .unwrap();
    until(&store, 5 * MIN).await;
    let running = start(scheduler, secs(300));
    until(&store, 21 * MIN).await;
    running.stop().await.unwrap();
    assert_eq!(
        rounds.all(),
        [
            // -50, -40 and -30 are older than 5 min - 25 min.
            catch_up(-20 * MIN, 5 * MIN, 8),
            catch_up(-10 * MIN, 7 * MIN, 9),
            catch_up(0, 9 * MIN, 10),
            // 10 min came while the round of 0 ran: it runs after it, late.
            seen(10 * MIN, 11 * MIN, 11),
            seen(20 * MIN, 20 * MIN, 12),
        ]
    );
    assert_eq!(
        passed(&store),
        [-20 * MIN, -10 * MIN, 0, 10 * MIN, 20 * MIN].map(|t| (t, t))
    );
    let lost = logs.matching(&[
        "instants missed: no round ran them",
        "missed=3",
        "first_missed=2025-12-01T09:10:00.000Z",
        "older than the backfill's look-back",
    ]);
    assert_eq!(lost.len(), 1, "{:#?}", logs.lines());
    assert_eq!(logs.matching(&["overran"]), Vec::<String>::new());

    // A job that has never run backfills nothing.
    let store = TestStore::new();
    let rounds = Rounds::default();
    let scheduler = Scheduler::builder(leases(&store, "a"))
        .job(
            recording("tick", "0 */10 * * * *", &store, &rounds, done).missed(
                MissedRuns::Backfill {
                    look_back: secs(3_600),
                },
            ),
        )
        .build()
        .unwrap();
    until(&store, 25 * MIN).await;
    let running = start(scheduler, secs(30));
    until(&store, 31 * MIN).await;
    running.stop().await.unwrap();
    assert_eq!(rounds.all(), [seen(30 * MIN, 30 * MIN, 1)]);
}

/// Two replicas backfill together: each instant runs once, in order, and
/// never two rounds at once.
#[tokio::test(start_paused = true)]
async fn two_replicas_backfill_each_instant_once_in_order_one_round_at_a_time() {
    let store = TestStore::new();
    ran_before(&store, NAME, -40 * MIN);
    let rounds = Rounds::default();
    let build = |instance: &str| {
        Scheduler::builder(leases(&store, instance))
            .job(
                recording("tick", "0 */10 * * * *", &store, &rounds, |_round| async {
                    sleep(secs(150)).await;
                    Ok(())
                })
                .missed(MissedRuns::Backfill {
                    look_back: secs(3_600),
                }),
            )
            .build()
            .unwrap()
    };
    until(&store, 5 * MIN).await;
    let (a, b) = (start(build("a"), secs(300)), start(build("b"), secs(300)));
    until(&store, 31 * MIN).await;
    a.stop().await.unwrap();
    b.stop().await.unwrap();
    let all = rounds.all();
    assert_eq!(
        rounds.instants(),
        [
            -30 * MIN,
            -20 * MIN,
            -10 * MIN,
            0,
            10 * MIN,
            20 * MIN,
            30 * MIN
        ],
        "{all:#?}"
    );
    for pair in all.windows(2) {
        assert!(
            pair[1].started >= pair[0].started + 150_000,
            "two rounds at once: {all:#?}"
        );
    }
}

/// A round cut short and given back runs again before a backfill claims
/// any later instant (whose claim would give it up).
#[tokio::test(start_paused = true)]
async fn backfill_reruns_a_round_cut_short_before_claiming_later_instants() {
    let (logs, _guard) = Logs::capture();
    let store = TestStore::new();
    // The round of -30 min was cut short and released (a shutdown), term 3.
    store.set_row(
        NAME,
        Row {
            term: 3,
            slot_ms: T0 - 30 * MIN,
            unfinished_slot_ms: T0 - 30 * MIN,
            ..Row::default()
        },
    );
    let rounds = Rounds::default();
    let scheduler = Scheduler::builder(leases(&store, "a"))
        .job(
            recording("tick", "0 */10 * * * *", &store, &rounds, done).missed(
                MissedRuns::Backfill {
                    look_back: secs(3_600),
                },
            ),
        )
        .build()
        .unwrap();
    until(&store, 5 * MIN).await;
    let running = start(scheduler, secs(30));
    until(&store, 6 * MIN).await;
    running.stop().await.unwrap();
    let rerun = Seen {
        rerun: true,
        ..seen(-30 * MIN, 5 * MIN, 4)
    };
    assert_eq!(
        rounds.all(),
        [
            rerun,
            catch_up(-20 * MIN, 5 * MIN, 5),
            catch_up(-10 * MIN, 5 * MIN, 6),
            catch_up(0, 5 * MIN, 7),
        ]
    );
    assert_eq!(
        logs.matching(&["gave up a round cut short"]),
        Vec::<String>::new()
    );
    assert_eq!(store.row(NAME).unwrap().unfinished_slot_ms, 0);
}

/// An instant the database did not answer for before the next one came is
/// given up under Latest, and backfilled once the database answers.
#[tokio::test(start_paused = true)]
async fn backfill_runs_an_instant_the_database_did_not_answer_for() {
    for (policy, want) in [
        (MissedRuns::Latest, vec![20_000]),
        (
            MissedRuns::Backfill {
                look_back: secs(3_600),
            },
            vec![10_000, 20_000],
        ),
    ] {
        let store = TestStore::new();
        ran_before(&store, NAME, 0);
        let rounds = Rounds::default();
        let scheduler = Scheduler::builder(leases(&store, "a"))
            .job(recording("tick", "@every 10s", &store, &rounds, done).missed(policy))
            .build()
            .unwrap();
        until(&store, 1_000).await;
        // Claims at 10, 12, 14, 16 and 18 s fail: 10 s is given up.
        store.fail_claims(5);
        let running = start(scheduler, secs(30));
        until(&store, 25_000).await;
        running.stop().await.unwrap();
        assert_eq!(rounds.instants(), want, "{policy:?}");
        assert!(
            rounds.all().iter().all(|s| s.started == 20_000),
            "{:?}",
            rounds.all()
        );
    }
}

/// Issue 26, item 5: a round still running when its job's next instant
/// comes is told of as that instant comes, with what becomes of it.
#[tokio::test(start_paused = true)]
async fn a_round_still_running_at_the_next_instant_is_told_of_as_it_comes() {
    for (policy, then) in [
        (MissedRuns::Latest, "then=skipped"),
        (
            MissedRuns::Backfill {
                look_back: secs(3_600),
            },
            "then=deferred",
        ),
    ] {
        let (logs, _guard) = Logs::capture();
        let store = TestStore::new();
        let rounds = Rounds::default();
        let scheduler = Scheduler::builder(leases(&store, "a"))
            .job(
                recording("tick", "@every 10s", &store, &rounds, |_round| async {
                    sleep(secs(15)).await;
                    Ok(())
                })
                .missed(policy),
            )
            .build()
            .unwrap();
        until(&store, 1_000).await;
        let running = start(scheduler, secs(30));
        until(&store, 21_000).await;
        let told = logs.matching(&[
            "WARN",
            "round still running at the job's next instant",
            "job=\"tick\"",
            "instant=2025-12-01T10:00:10.000Z",
            "next=2025-12-01T10:00:20.000Z",
            then,
        ]);
        assert_eq!(told.len(), 1, "{policy:?}: {:#?}", logs.lines());
        assert_eq!(
            logs.matching(&["round finished"]),
            Vec::<String>::new(),
            "told while it runs"
        );
        running.stop().await.unwrap();
    }
}

/// A zone, when the store's clock starts (UTC ms), a fixed-time schedule,
/// and the instants of it and of `@hourly` expected.
type DstCase = (
    &'static str,
    i64,
    &'static str,
    [&'static str; 1],
    [&'static str; 4],
);

/// Issue 26, item 4: the scheduler itself across the 2026 daylight-saving
/// changes of Europe/Berlin and America/New_York (the crate docs' table),
/// for a fixed time, an hourly and an every-minute job, from 30 minutes
/// before the change to three hours after it.
#[tokio::test(start_paused = true)]
async fn across_daylight_saving_changes_each_job_runs_the_instants_of_the_table() {
    let cases: [DstCase; 4] = [
        (
            "Europe/Berlin",
            1_774_740_600_000, // 2026-03-28T23:30:00Z
            "30 2 * * *",
            ["2026-03-29T01:00:00.000Z"],
            [
                "2026-03-29T00:00:00.000Z",
                "2026-03-29T01:00:00.000Z",
                "2026-03-29T02:00:00.000Z",
                "2026-03-29T03:00:00.000Z",
            ],
        ),
        (
            "Europe/Berlin",
            1_792_884_600_000, // 2026-10-24T23:30:00Z
            "30 2 * * *",
            ["2026-10-25T00:30:00.000Z"],
            [
                "2026-10-25T00:00:00.000Z",
                "2026-10-25T01:00:00.000Z",
                "2026-10-25T02:00:00.000Z",
                "2026-10-25T03:00:00.000Z",
            ],
        ),
        (
            "America/New_York",
            1_772_947_800_000, // 2026-03-08T05:30:00Z
            "30 2 * * *",
            ["2026-03-08T07:00:00.000Z"],
            [
                "2026-03-08T06:00:00.000Z",
                "2026-03-08T07:00:00.000Z",
                "2026-03-08T08:00:00.000Z",
                "2026-03-08T09:00:00.000Z",
            ],
        ),
        (
            "America/New_York",
            1_793_507_400_000, // 2026-11-01T04:30:00Z
            "30 1 * * *",
            ["2026-11-01T05:30:00.000Z"],
            [
                "2026-11-01T05:00:00.000Z",
                "2026-11-01T06:00:00.000Z",
                "2026-11-01T07:00:00.000Z",
                "2026-11-01T08:00:00.000Z",
            ],
        ),
    ];
    for (zone, t0, fixed, want_fixed, want_hourly) in cases {
        let store = TestStore::starting_at(t0);
        let ran: Arc<Mutex<Vec<(&'static str, i64)>>> = Arc::default();
        let job = |name: &'static str, schedule: &str| {
            let ran = ran.clone();
            Job::new(name, schedule, move |round: Round| {
                ran.lock()
                    .unwrap()
                    .push((name, round.instant().as_millis()));
                async { Ok(()) }
            })
            .time_zone(zone)
        };
        let scheduler = Scheduler::builder(leases(&store, "a"))
            .job(job("fixed", fixed))
            .job(job("hourly", "@hourly"))
            .job(job("minutely", "* * * * *"))
            .build()
            .unwrap();
        let running = start(scheduler, secs(5));
        sleep(secs(3 * 3600 + 30 * 60 + 30)).await;
        running.stop().await.unwrap();
        let ran = ran.lock().unwrap().clone();
        let of = |name: &str| -> Vec<i64> {
            ran.iter()
                .filter(|(n, _)| *n == name)
                .map(|&(_, t)| t)
                .collect()
        };
        let show = |ts: Vec<i64>| -> Vec<String> {
            ts.into_iter()
                .map(|t| lease_core::UtcMillis::from_millis(t).to_string())
                .collect()
        };
        assert_eq!(show(of("fixed")), want_fixed, "{zone} from {t0}");
        assert_eq!(show(of("hourly")), want_hourly, "{zone} from {t0}");
        // Every real minute, once: 210 of them, 60 s apart.
        let minutes = of("minutely");
        assert_eq!(minutes.len(), 210, "{zone} from {t0}");
        assert_eq!(minutes[0], t0 + 60_000);
        assert!(
            minutes.windows(2).all(|w| w[1] - w[0] == 60_000),
            "{zone} from {t0}: {:?}",
            show(minutes)
        );
    }
}

/// A backfilled round cut short (its lease lost) stops the backfill; the
/// sweep runs it again once, before the backfill goes on with the later
/// instants: none of them gives it up.
#[tokio::test(start_paused = true)]
async fn a_backfilled_round_cut_short_is_run_again_before_the_later_instants() {
    let (logs, _guard) = Logs::capture();
    let store = TestStore::new();
    ran_before(&store, NAME, -40 * MIN);
    let rounds = Rounds::default();
    let calls = Arc::new(AtomicU32::new(0));
    let job = recording(
        "tick",
        "0 */10 * * * *",
        &store,
        &rounds,
        move |round: Round| {
            let first = calls.fetch_add(1, Ordering::SeqCst) == 0;
            async move {
                if first {
                    until_cancelled(round).await?;
                }
                Ok(())
            }
        },
    )
    .missed(MissedRuns::Backfill {
        look_back: secs(3_600),
    });
    let scheduler = Scheduler::builder(leases(&store, "a"))
        .job(job)
        .build()
        .unwrap();
    until(&store, 5 * MIN).await;
    store.lose(NAME);
    let running = start(scheduler, secs(30));
    // Lost at the first renewal (2 s); the lease expires 15 s after the claim.
    until(&store, 5 * MIN + 3_000).await;
    store.unlose(NAME);
    until(&store, 10 * MIN + 1_000).await;
    running.stop().await.unwrap();
    let all = rounds.all();
    let instants: Vec<(i64, bool)> = all.iter().map(|s| (s.instant, s.rerun)).collect();
    assert_eq!(
        instants,
        [
            (-30 * MIN, false),
            (-30 * MIN, true),
            (-20 * MIN, false),
            (-10 * MIN, false),
            (0, false),
            (10 * MIN, false),
        ],
        "{all:#?}"
    );
    // The rerun came once the lease expired and a sweep found it.
    assert!(
        (5 * MIN + 15_000..5 * MIN + 35_000).contains(&all[1].started),
        "{all:#?}"
    );
    assert_eq!(
        logs.matching(&["gave up a round cut short"]),
        Vec::<String>::new()
    );
    assert_eq!(store.row(NAME).unwrap().unfinished_slot_ms, 0);
}

// Issue 26, item 2: jobs added, replaced and removed while the scheduler runs.

/// The finishes the store answered: (job's lease name, instant, passed), ms
/// since `T0`.
fn finishes(store: &TestStore) -> Vec<(String, i64, i64)> {
    store
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::Finish {
                name, slot, passed, ..
            } => Some((name, slot - T0, passed - T0)),
            _ => None,
        })
        .collect()
}

/// A round of 5 s that records whether its context ended.
fn five_seconds(
    cancelled: &Arc<AtomicBool>,
) -> impl Fn(Round) -> std::pin::Pin<Box<dyn Future<Output = JobResult> + Send>> + Send + Sync + 'static
{
    let cancelled = cancelled.clone();
    move |round: Round| {
        let cancelled = cancelled.clone();
        Box::pin(async move {
            tokio::select! {
                () = sleep(secs(5)) => Ok(()),
                () = round.cancelled() => {
                    cancelled.store(true, Ordering::SeqCst);
                    round.check()?;
                    Ok(())
                }
            }
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_job_added_while_running_claims_its_instants_from_its_registration_on() {
    let store = TestStore::new();
    let (ticks, added, known) = (Rounds::default(), Rounds::default(), Rounds::default());
    // The name of the second job added has a record (it ran before, or
    // runs on other replicas): its missed-run policy applies as when a
    // scheduler starts.
    ran_before(&store, "cron:known", -3_600_000);
    let scheduler = Scheduler::builder(leases(&store, "a"))
        .job(recording("tick", "@every 10s", &store, &ticks, done))
        .build()
        .unwrap();
    let handle = scheduler.handle();
    until(&store, 1_000).await;
    let running = start(scheduler.clone(), secs(30));
    until(&store, 15_000).await;

    // Checked as the builder checks: nothing changes on an error.
    let job = |name: &str, schedule: &str| Job::new(name, schedule, done);
    assert!(matches!(
        handle.add(job("", "@every 1s")),
        Err(Error::EmptyName)
    ));
    assert!(matches!(
        handle.add(job(" ", "@every 1s")),
        Err(Error::BlankName { .. })
    ));
    assert!(
        matches!(handle.add(job("tick", "@every 1s")), Err(Error::DuplicateName { job }) if job == "tick")
    );
    assert!(matches!(
        handle.add(job(&"x".repeat(300), "@every 1s")),
        Err(Error::NameTooLong { .. })
    ));
    assert!(matches!(
        handle.add(job("bad\nname", "@every 1s")),
        Err(Error::InvalidName { .. })
    ));
    assert!(matches!(
        handle.add(job("never", "0 0 30 2 *")),
        Err(Error::InvalidSchedule { .. })
    ));
    assert_eq!(scheduler.jobs(), ["tick"]);

    handle
        .add(recording("added", "@every 10s", &store, &added, done))
        .unwrap();
    handle
        .add(recording("known", "@every 10s", &store, &known, done))
        .unwrap();
    assert_eq!(handle.names(), ["tick", "added", "known"]);
    until(&store, 35_000).await;
    running.stop().await.unwrap();

    let kinds = |rounds: &Rounds| {
        rounds
            .all()
            .iter()
            .map(|s| (s.instant, s.started, s.catch_up))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        kinds(&added),
        [(20_000, 20_000, false), (30_000, 30_000, false)],
        "a job that never ran: from its registration (15 s) on, nothing before"
    );
    assert_eq!(
        kinds(&known),
        [
            (10_000, 15_000, true),
            (20_000, 20_000, false),
            (30_000, 30_000, false)
        ],
        "a job with a record: the latest missed instant caught up (MissedRuns::Latest)"
    );
    assert_eq!(ticks.instants(), [10_000, 20_000, 30_000]);
    // The next run starts with the jobs as they are.
    assert_eq!(scheduler.jobs(), ["tick", "added", "known"]);
}

#[tokio::test(start_paused = true)]
async fn a_job_removed_with_finish_runs_its_round_to_its_end_and_claims_nothing_after() {
    let (logs, _guard) = Logs::capture();
    let store = TestStore::new();
    let rounds = Rounds::default();
    let cancelled = Arc::new(AtomicBool::new(false));
    let scheduler = Scheduler::builder(leases(&store, "a"))
        .job(recording(
            "tick",
            "@every 10s",
            &store,
            &rounds,
            five_seconds(&cancelled),
        ))
        .job(Job::new("other", "@every 10s", done))
        .build()
        .unwrap();
    let handle = scheduler.handle();
    until(&store, 1_000).await;
    let running = start(scheduler, secs(30));
    until(&store, 12_000).await;
    assert!(handle.remove("tick", Removal::Finish));
    assert!(!handle.remove("tick", Removal::Finish), "removed once");
    assert_eq!(handle.names(), ["other"]);
    until(&store, 45_000).await;
    running.stop().await.unwrap();

    assert_eq!(
        rounds.instants(),
        [10_000],
        "nothing claimed after the removal"
    );
    assert!(
        !cancelled.load(Ordering::SeqCst),
        "the round ran to its end"
    );
    let tick: Vec<_> = finishes(&store)
        .into_iter()
        .filter(|(name, ..)| name == NAME)
        .collect();
    assert_eq!(tick, [(NAME.to_owned(), 10_000, 10_000)], "finished");
    let claims: Vec<_> = store
        .calls()
        .into_iter()
        .filter(|c| matches!(c, Call::ClaimInstant { name, .. } if name == NAME))
        .collect();
    assert_eq!(
        claims,
        [Call::ClaimInstant {
            name: NAME.into(),
            slot: T0 + 10_000,
            at: T0 + 10_000,
            claimed: true
        }],
        "no claim after the removal"
    );
    // The other job ran on.
    let other = finishes(&store)
        .into_iter()
        .filter(|(name, ..)| name == "cron:other")
        .count();
    assert_eq!(other, 4);
    assert_eq!(
        logs.matching(&["job removed", "job=\"tick\"", "removal=Finish"])
            .len(),
        1,
        "{:#?}",
        logs.lines()
    );
}

#[tokio::test(start_paused = true)]
async fn a_job_removed_with_cut_short_is_released_and_rerun_by_a_replica_that_runs_it() {
    let store = TestStore::new();
    let rounds = Rounds::default();
    let cancelled = Arc::new(AtomicBool::new(false));
    // a sweeps every second: had the job stayed offered to it, a would run
    // the round cut short again.
    let a = Scheduler::builder(leases(&store, "a"))
        .job(recording(
            "tick",
            "@every 10s",
            &store,
            &rounds,
            five_seconds(&cancelled),
        ))
        .sweep_interval(secs(1))
        .build()
        .unwrap();
    let handle = a.handle();
    until(&store, 1_000).await;
    let running_a = start(a, secs(30));
    until(&store, 12_000).await;
    assert!(handle.remove("tick", Removal::CutShort));
    until(&store, 13_000).await;
    assert!(
        cancelled.load(Ordering::SeqCst),
        "the round's context ended"
    );
    assert!(store.calls().contains(&Call::Release {
        name: NAME.into(),
        released: true
    }));
    assert!(!finishes(&store).iter().any(|(name, ..)| name == NAME));
    // Removed everywhere (no replica runs it): the instant stays
    // unfinished, and nothing runs it.
    until(&store, 25_000).await;
    let row = store.row(NAME).unwrap();
    assert_eq!(
        (row.unfinished_slot_ms, row.expires_at_ms),
        (T0 + 10_000, 0),
        "unfinished and free"
    );
    assert_eq!(
        rounds.instants(),
        [10_000],
        "a claims nothing after the removal"
    );

    // A replica that runs the job reruns it once, at its first sweep, then
    // claims the job's next instant (it skips what it missed, so that its
    // start-up catch-up does not give the round cut short up).
    let b = Scheduler::builder(leases(&store, "b"))
        .job(recording("tick", "@every 10s", &store, &rounds, done).missed(MissedRuns::Skip))
        .sweep_interval(secs(1))
        .build()
        .unwrap();
    let running_b = start(b, secs(30));
    until(&store, 35_000).await;
    running_b.stop().await.unwrap();
    running_a.stop().await.unwrap();
    let all = rounds.all();
    assert_eq!(
        all.iter()
            .map(|s| (s.instant, s.started, s.rerun))
            .collect::<Vec<_>>(),
        [
            (10_000, 10_000, false),
            (10_000, 25_000, true),
            (30_000, 30_000, false)
        ],
        "{all:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_job_replaced_with_finish_takes_its_new_schedule_after_the_old_round() {
    let store = TestStore::new();
    let (old, new) = (Rounds::default(), Rounds::default());
    let cancelled = Arc::new(AtomicBool::new(false));
    let scheduler = Scheduler::builder(leases(&store, "a"))
        .job(recording(
            "tick",
            "@every 10s",
            &store,
            &old,
            five_seconds(&cancelled),
        ))
        .build()
        .unwrap();
    let handle = scheduler.handle();
    until(&store, 1_000).await;
    let running = start(scheduler, secs(30));
    until(&store, 12_000).await;
    // Checked as the builder checks: an error changes nothing.
    assert!(matches!(
        handle.replace(Job::new("tick", "@every never", done), Removal::Finish),
        Err(Error::InvalidSchedule { .. })
    ));
    let replaced = handle
        .replace(
            recording("tick", "@every 20s", &store, &new, done),
            Removal::Finish,
        )
        .unwrap();
    assert!(replaced);
    assert_eq!(handle.names(), ["tick"]);
    until(&store, 45_000).await;
    running.stop().await.unwrap();

    assert_eq!(old.instants(), [10_000]);
    assert!(
        !cancelled.load(Ordering::SeqCst),
        "the old round ran to its end"
    );
    assert_eq!(new.instants(), [20_000, 40_000], "the new schedule");
    assert_eq!(
        finishes(&store),
        [
            (NAME.to_owned(), 10_000, 10_000),
            (NAME.to_owned(), 20_000, 20_000),
            (NAME.to_owned(), 40_000, 40_000)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_job_replaced_with_cut_short_reruns_the_old_round_as_the_new_job() {
    let store = TestStore::new();
    let (old, new) = (Rounds::default(), Rounds::default());
    let cancelled = Arc::new(AtomicBool::new(false));
    let scheduler = Scheduler::builder(leases(&store, "a"))
        .job(recording(
            "tick",
            "@every 10s",
            &store,
            &old,
            five_seconds(&cancelled),
        ))
        .sweep_interval(secs(1))
        .build()
        .unwrap();
    let handle = scheduler.handle();
    until(&store, 1_000).await;
    let running = start(scheduler, secs(30));
    until(&store, 12_000).await;
    let replaced = handle
        .replace(
            recording("tick", "@every 10s", &store, &new, done),
            Removal::CutShort,
        )
        .unwrap();
    assert!(replaced);
    until(&store, 25_000).await;
    running.stop().await.unwrap();

    assert_eq!(old.instants(), [10_000]);
    assert!(
        cancelled.load(Ordering::SeqCst),
        "the old round was cut short"
    );
    assert!(store.calls().contains(&Call::Release {
        name: NAME.into(),
        released: true
    }));
    // The job still runs here: its instant cut short runs again once, as
    // the new job, and then the new job's instants.
    let seen = new.all();
    assert_eq!(
        seen.iter()
            .map(|s| (s.instant, s.rerun))
            .collect::<Vec<_>>(),
        [(10_000, true), (20_000, false)],
        "{seen:?}"
    );
    assert!(seen[0].started < 15_000, "rerun within a sweep: {seen:?}");
}

#[tokio::test(start_paused = true)]
async fn a_removal_with_cut_short_reaches_the_last_round_of_a_job_replaced_with_finish() {
    let store = TestStore::new();
    let (old, new) = (Rounds::default(), Rounds::default());
    let cancelled = Arc::new(AtomicBool::new(false));
    let scheduler = Scheduler::builder(leases(&store, "a"))
        .job(recording(
            "tick",
            "@every 10s",
            &store,
            &old,
            five_seconds(&cancelled),
        ))
        .build()
        .unwrap();
    let handle = scheduler.handle();
    until(&store, 1_000).await;
    let running = start(scheduler, secs(30));
    until(&store, 12_000).await;
    let replaced = handle
        .replace(
            recording("tick", "@every 10s", &store, &new, done),
            Removal::Finish,
        )
        .unwrap();
    assert!(replaced);
    until(&store, 13_000).await;
    assert!(!cancelled.load(Ordering::SeqCst), "the old round runs on");
    assert!(handle.remove("tick", Removal::CutShort));
    until(&store, 14_000).await;
    assert!(
        cancelled.load(Ordering::SeqCst),
        "the old round was cut short"
    );
    until(&store, 35_000).await;
    running.stop().await.unwrap();
    assert_eq!(old.instants(), [10_000]);
    assert_eq!(
        new.instants(),
        Vec::<i64>::new(),
        "the new job never started"
    );
    assert!(store.calls().contains(&Call::Release {
        name: NAME.into(),
        released: true
    }));
}
