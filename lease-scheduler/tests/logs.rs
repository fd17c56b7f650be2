//! What the scheduler logs, captured: a binary of its own, so that no test
//! without a capturing subscriber runs beside these and registers the
//! scheduler's callsites first (tracing caches a callsite's interest when
//! it is first hit, and a callsite first hit with no subscriber at all may
//! be cached as never enabled, racing a capture on another thread).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers fail loudly"
)]

mod common;

use std::time::Duration;

use common::{Logs, T0, TestStore, secs};
use lease_core::{CancellationToken, Leases};
use lease_scheduler::{Job, Round, Scheduler};
use tokio::time::sleep;

/// Sleeps until the store's clock reads `T0 + at_ms`.
async fn until(store: &TestStore, at_ms: i64) {
    let left = T0 + at_ms - store.now();
    sleep(Duration::from_millis(u64::try_from(left).unwrap())).await;
}

/// Issue 23, defect 3: every string from outside that reaches the
/// scheduler's log is escaped (the instance id, quoted; a job's error and a
/// panic's message, their control characters escaped): no line holds a raw control character, and every event has
/// the scheduler's one target.
#[tokio::test(start_paused = true)]
async fn text_from_outside_reaches_the_log_escaped() {
    let (logs, _guard) = Logs::capture();
    let store = TestStore::new();
    // An instance id with a control character is refused (`with_instance`);
    // quotes and `=` remain, and must not forge a field.
    let leases = Leases::new(store.clone())
        .with_instance("web-1\" forged=\"yes")
        .unwrap();
    let failing = |name: &str| {
        Job::new(name, "@every 10s", |_round: Round| async {
            Err("disk full\nERROR forged \u{1b}[31m".into())
        })
    };
    let scheduler = Scheduler::builder(leases)
        .job(failing("report"))
        .job(failing("local").per_instance())
        .job(
            Job::new("panics", "@every 10s", |_round: Round| async {
                panic!("(planted) boom\n\u{1b}[0m")
            })
            .per_instance(),
        )
        .build()
        .unwrap();
    until(&store, 1_000).await;
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    let running = tokio::spawn(async move { scheduler.run(&token, secs(5)).await });
    until(&store, 11_000).await;
    shutdown.cancel();
    running.await.unwrap().unwrap();
    let ours: Vec<(String, String)> = logs
        .with_targets()
        .into_iter()
        .filter(|(target, _)| target.starts_with("lease_scheduler"))
        .collect();
    let lines: Vec<&str> = ours.iter().map(|(_, line)| line.as_str()).collect();
    for (target, line) in &ours {
        assert_eq!(target, "lease_scheduler::scheduler", "{line}");
        assert!(
            !line.chars().any(char::is_control),
            "a raw control character: {line:?}"
        );
    }
    let started = logs.matching(&["scheduler started"]);
    assert_eq!(started.len(), 1, "{lines:#?}");
    assert!(
        started[0].contains(r#"instance="web-1\" forged=\"yes""#),
        "{started:?}"
    );
    // `Chain` puts a line break as a space; the escape is escaped.
    let failed = logs.matching(&["round failed", r"error=disk full ERROR forged \u{1b}[31m"]);
    assert_eq!(
        failed.len(),
        2,
        "the cluster job and the per-instance one: {lines:#?}"
    );
    let panicked = logs.matching(&["round failed", "job=\"panics\"", "boom"]);
    assert_eq!(panicked.len(), 1, "{lines:#?}");
}
