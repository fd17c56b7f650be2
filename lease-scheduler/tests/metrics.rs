//! The scheduler's metrics (`lease_scheduler::metrics`), recorded on paused
//! Tokio time against the in-memory store of the paused tests, with a
//! recorder that keeps every value (the workspace's, from lease-testkit).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers fail loudly"
)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use common::{T0, TestStore, secs};
use lease_core::{CancellationToken, Leases};
use lease_scheduler::metrics::names;
use lease_scheduler::{Error, Job, JobResult, Round, Scheduler};
use lease_testkit::metrics::Recorded;
use tokio::task::JoinHandle;
use tokio::time::sleep;

const NAME: &str = "cron:tick";

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

fn start(scheduler: Scheduler) -> Running {
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    let task = tokio::spawn(async move { scheduler.run(&token, secs(30)).await });
    Running { shutdown, task }
}

/// Sleeps until the store's clock reads `T0 + at_ms`.
async fn until(store: &TestStore, at_ms: i64) {
    let left = T0 + at_ms - store.now();
    sleep(Duration::from_millis(u64::try_from(left).unwrap())).await;
}

fn leases(store: &TestStore) -> Leases {
    Leases::new(store.clone()).with_instance("a").unwrap()
}

async fn until_cancelled(round: Round) -> JobResult {
    round.cancelled().await;
    round.check()?;
    Ok(())
}

fn scheduled(outcome: &'static str) -> [(&'static str, &'static str); 2] {
    [("round", "scheduled"), ("outcome", outcome)]
}

// The paused tests run every task on the test's one thread, so a recorder
// installed as this thread's default sees everything the scheduler records.

#[tokio::test(start_paused = true)]
async fn rounds_overruns_delays_and_sweeps_are_counted() {
    let rec = Recorded::default();
    let _recorder = metrics::set_default_local_recorder(&rec);
    let store = TestStore::new();
    let first = Arc::new(AtomicBool::new(true));
    let scheduler = Scheduler::builder(leases(&store))
        // 10 s runs until 35 s: 20 s and 30 s are skipped; 40 s runs.
        .job(Job::new("tick", "@every 10s", move |_round| {
            let long = first.swap(false, Ordering::SeqCst);
            async move {
                if long {
                    sleep(secs(25)).await;
                }
                Ok(())
            }
        }))
        // Fails at 10, 20, 30 and 40 s, on this replica alone.
        .job(
            Job::new("local", "@every 10s", |_round| async {
                Err("no luck".into())
            })
            .per_instance(),
        )
        .build()
        .unwrap();
    until(&store, 1_000).await;
    let running = start(scheduler);
    until(&store, 21_000).await;
    assert_eq!(
        rec.gauge(names::RUNNING, &[]),
        Some(1.0),
        "tick's long round"
    );
    // Counted as 20 s came, while the round still runs.
    assert_eq!(rec.counter(names::STILL_RUNNING, &[("then", "skipped")]), 1);
    until(&store, 45_000).await;
    running.stop().await.unwrap();

    assert_eq!(rec.counter(names::ROUNDS, &scheduled("ran")), 2);
    assert_eq!(rec.counter(names::CLAIMS, &scheduled("claimed")), 2);
    assert_eq!(rec.counter(names::CLAIMS, &scheduled("skipped")), 0);
    assert_eq!(rec.counter(names::OVERRUN_SKIPPED, &[]), 2);
    assert_eq!(rec.counter(names::STILL_RUNNING, &[("then", "skipped")]), 2);
    assert_eq!(
        rec.counter(
            names::ROUNDS,
            &[("round", "per_instance"), ("outcome", "failed")]
        ),
        4
    );
    let delays = rec.histogram(names::START_DELAY);
    assert_eq!(delays.len(), 6, "two scheduled rounds, four per-instance");
    assert!(delays.iter().all(|&d| d < 0.1), "on time: {delays:?}");
    let durations = rec.histogram(names::ROUND_DURATION);
    assert_eq!(durations.len(), 6);
    assert!(durations.iter().any(|&d| d >= 25.0), "{durations:?}");
    // At 1 s as it starts, then every 15-16 s: 16-17 s and 31-34 s.
    assert!(rec.counter(names::SWEEPS, &[("outcome", "ok")]) >= 3);
    assert_eq!(rec.gauge(names::RUNNING, &[]), Some(0.0));
    assert_eq!(
        rec.counter_label_keys("lease_scheduler_"),
        ["outcome", "round", "then"],
        "never the job's name"
    );
}

#[tokio::test(start_paused = true)]
async fn cut_short_reruns_and_superseded_rounds_are_counted() {
    let rec = Recorded::default();
    let _recorder = metrics::set_default_local_recorder(&rec);
    let store = TestStore::new();
    let calls = Arc::new(AtomicU32::new(0));
    // The first round (60 s) waits for its context, which ends when its
    // lease is found gone at the first renewal; its rerun ends at once.
    let scheduler = Scheduler::builder(leases(&store))
        .job(Job::new("tick", "@every 1m", move |round: Round| {
            let first = calls.fetch_add(1, Ordering::SeqCst) == 0;
            async move {
                if first {
                    until_cancelled(round).await?;
                }
                Ok(())
            }
        }))
        .build()
        .unwrap();
    until(&store, 1_000).await;
    store.lose(NAME);
    let running = start(scheduler);
    until(&store, 63_000).await;
    store.unlose(NAME);
    assert_eq!(rec.counter(names::ROUNDS, &scheduled("cut_short")), 1);
    // Expired at 75 s; a sweep by 97 s runs it again.
    until(&store, 100_000).await;
    running.stop().await.unwrap();
    assert_eq!(
        rec.counter(names::CLAIMS, &[("round", "rerun"), ("outcome", "claimed")]),
        1
    );
    assert_eq!(
        rec.counter(names::ROUNDS, &[("round", "rerun"), ("outcome", "ran")]),
        1
    );
    assert_eq!(rec.counter(names::SUPERSEDED, &[]), 0);
    assert_eq!(
        rec.histogram(names::START_DELAY).len(),
        1,
        "only the scheduled round: a rerun is late by design"
    );
}

#[tokio::test(start_paused = true)]
async fn refused_and_superseding_claims_are_counted() {
    let rec = Recorded::default();
    let _recorder = metrics::set_default_local_recorder(&rec);
    let store = TestStore::new();
    let scheduler = Scheduler::builder(leases(&store))
        .job(Job::new("tick", "@every 10s", until_cancelled))
        .build()
        .unwrap();
    until(&store, 1_000).await;
    store.lose(NAME);
    let running = start(scheduler);
    until(&store, 13_000).await;
    store.unlose(NAME);
    // 10 s: lost at 12 s, its lease expires at 25 s; 20 s: refused (held);
    // 30 s: claimed, giving 10 s up before a sweep could rerun it; cut short
    // by the shutdown at 31 s.
    until(&store, 31_000).await;
    running.stop().await.unwrap();
    assert_eq!(rec.counter(names::CLAIMS, &scheduled("claimed")), 2);
    assert_eq!(rec.counter(names::CLAIMS, &scheduled("skipped")), 1);
    assert_eq!(rec.counter(names::SUPERSEDED, &[]), 1);
    assert_eq!(rec.counter(names::ROUNDS, &scheduled("cut_short")), 2);
    assert_eq!(rec.counter(names::ROUNDS, &scheduled("ran")), 0);
}

#[tokio::test(start_paused = true)]
async fn an_instant_given_up_after_database_errors_is_counted() {
    let rec = Recorded::default();
    let _recorder = metrics::set_default_local_recorder(&rec);
    let store = TestStore::new();
    let scheduler = Scheduler::builder(leases(&store))
        .job(Job::new("tick", "@every 10s", |_round| async { Ok(()) }))
        .build()
        .unwrap();
    until(&store, 1_000).await;
    // Attempts at 10, 12, 14, 16 and 18 s fail; 10 s is given up, 20 s runs.
    store.fail_claims(5);
    let running = start(scheduler);
    until(&store, 25_000).await;
    running.stop().await.unwrap();
    assert_eq!(rec.counter(names::CLAIMS, &scheduled("gave_up")), 1);
    assert_eq!(rec.counter(names::CLAIMS, &scheduled("claimed")), 1);
    assert_eq!(rec.counter(names::ROUNDS, &scheduled("ran")), 1);
}

#[tokio::test(start_paused = true)]
async fn start_lateness_is_also_recorded_by_job_for_the_jobs_that_ask() {
    let rec = Recorded::default();
    let _recorder = metrics::set_default_local_recorder(&rec);
    let store = TestStore::new();
    let scheduler = Scheduler::builder(leases(&store))
        .job(Job::new("watched", "@every 10s", |_round| async { Ok(()) }).per_job_metrics())
        .job(
            Job::new("local", "@every 10s", |_round| async { Ok(()) })
                .per_instance()
                .per_job_metrics(),
        )
        .job(Job::new("plain", "@every 10s", |_round| async { Ok(()) }))
        .build()
        .unwrap();
    until(&store, 1_000).await;
    let running = start(scheduler);
    until(&store, 31_000).await;
    running.stop().await.unwrap();
    assert_eq!(rec.histogram(names::START_DELAY).len(), 9, "every job's");
    for job in ["watched", "local"] {
        let delays = rec.histogram_with(names::JOB_START_DELAY, &[("job", job)]);
        assert_eq!(delays.len(), 3, "{job}: {delays:?}");
        assert!(delays.iter().all(|&d| d < 0.1), "on time: {delays:?}");
    }
    assert_eq!(
        rec.histogram_with(names::JOB_START_DELAY, &[("job", "plain")]),
        Vec::<f64>::new()
    );
    assert_eq!(rec.histogram(names::JOB_START_DELAY).len(), 6);
}

#[tokio::test(start_paused = true)]
async fn instants_a_backfill_defers_are_counted_as_deferred() {
    let rec = Recorded::default();
    let _recorder = metrics::set_default_local_recorder(&rec);
    let store = TestStore::new();
    let first = Arc::new(AtomicBool::new(true));
    let scheduler = Scheduler::builder(leases(&store))
        .job(
            Job::new("tick", "@every 10s", move |_round| {
                let long = first.swap(false, Ordering::SeqCst);
                async move {
                    if long {
                        sleep(secs(25)).await;
                    }
                    Ok(())
                }
            })
            .missed(lease_scheduler::MissedRuns::Backfill {
                look_back: secs(3_600),
            }),
        )
        .build()
        .unwrap();
    until(&store, 1_000).await;
    let running = start(scheduler);
    until(&store, 41_000).await;
    running.stop().await.unwrap();
    assert_eq!(
        rec.counter(names::STILL_RUNNING, &[("then", "deferred")]),
        2
    );
    assert_eq!(rec.counter(names::STILL_RUNNING, &[("then", "skipped")]), 0);
    assert_eq!(rec.counter(names::OVERRUN_SKIPPED, &[]), 0);
    // 10 s ran to 35 s; 20 s and 30 s ran after it; 40 s on time.
    assert_eq!(rec.counter(names::ROUNDS, &[("outcome", "ran")]), 4);
}
