//! The database's clock stepping under a holder (issue 15, item 2), on a
//! private PostgreSQL run under libfaketime: `tests/support/faketime-postgres.sh`
//! starts it (`.ci/run` does), and the offset file it reads moves the
//! server's wall clock at once, for every session.
//!
//! `LEASE_TEST_FAKETIME_PG_URL` names the server and `LEASE_TEST_FAKETIME_FILE`
//! the offset file; unset, the tests skip with a note, except under
//! `CI=true`, where that is a failure. The tests take turns with the
//! server's clock.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

mod common;

use std::time::Duration;

use lease_core::{CancellationToken, EndCause, Leases, LostCause, Timings};
use tokio::time::Instant;

/// The tests share the server's clock: one at a time.
static CLOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The server and its offset file, or `None` (skipped).
fn faketime() -> Option<(String, String)> {
    let url = lease_conformance::env_url("LEASE_TEST_FAKETIME_PG_URL")?;
    let file = lease_conformance::env_url("LEASE_TEST_FAKETIME_FILE")?;
    Some((url, file))
}

/// Steps the server's clock to `offset_s` seconds from the true time.
fn set_offset(file: &str, offset_s: i64) {
    std::fs::write(file, format!("{offset_s:+}\n")).expect("write the faketime offset file");
}

/// Lease 3 s, renew every 250 ms, step down 2 s after the last renewal: a
/// margin of 1 s, so a jump of more than 500 ms between two renewals is
/// one the holder steps down for.
fn timings() -> Timings {
    Timings::builder()
        .lease(Duration::from_secs(3))
        .renew(Duration::from_millis(250))
        .deadline(Duration::from_secs(2))
        .grace(Duration::from_millis(500))
        .build()
        .unwrap()
}

/// How one trial went, on this process's clock from the jump.
#[derive(Debug)]
struct Trial {
    /// When the holder's context ended, and why.
    stepped_down: Option<(Duration, Option<EndCause>)>,
    /// When a rival's claim (tried every 20 ms) first succeeded.
    rival_claimed: Option<Duration>,
}

/// Claims a name, holds it, steps the server's clock forward by `jump_s`,
/// and watches the holder and a rival for `watch`. Leaves the clock where
/// it was.
async fn trial(url: &str, file: &str, jump_s: i64, watch: Duration) -> Trial {
    set_offset(file, 0);
    // The coordinators take the store's timings.
    let store = common::store_on_new_table_with(url, &timings()).await;
    let holder = Leases::new(store.clone()).with_instance("holder").unwrap();
    holder.migrate().await.unwrap();
    let rival = Leases::new(store.clone()).with_instance("rival").unwrap();
    let handle = holder
        .claim("clock:jump")
        .await
        .unwrap()
        .expect("a free name");
    let parent = CancellationToken::new();
    let hold = handle.hold(&parent);
    let ctx = hold.context().clone();
    // Two renewals on a steady clock first: the baseline.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        !ctx.is_cancelled(),
        "the holder lost the lease on a steady clock"
    );

    set_offset(file, jump_s);
    let jumped = Instant::now();
    let mut trial = Trial {
        stepped_down: None,
        rival_claimed: None,
    };
    while jumped.elapsed() < watch {
        if trial.stepped_down.is_none() && ctx.is_cancelled() {
            trial.stepped_down = Some((jumped.elapsed(), ctx.cause()));
        }
        if trial.rival_claimed.is_none() {
            if let Ok(Some(_)) = rival.claim("clock:jump").await {
                trial.rival_claimed = Some(jumped.elapsed());
            }
        }
        if trial.stepped_down.is_some() && trial.rival_claimed.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    hold.stop().await;
    set_offset(file, 0);
    common::drop_table(&store).await;
    trial
}

/// A forward step of 2 s (more than half the 1 s margin, less than lease −
/// renew): the renewal after it shows the database 2 s ahead, and the
/// holder steps down at once (`LostCause::ClockJump`), before the rival's
/// claim succeeds, in every trial. Without the check the holder keeps the
/// name and renews it on the jumped clock: no step-down at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_step_of_the_database_clock_makes_the_holder_step_down_before_any_rival() {
    let Some((url, file)) = faketime() else {
        return;
    };
    let _clock = CLOCK.lock().await;
    for i in 0..5 {
        let t = trial(&url, &file, 2, Duration::from_secs(6)).await;
        println!("forward step of 2 s, trial {i}: {t:?}");
        let Some((down, cause)) = t.stepped_down else {
            panic!("trial {i}: the holder never stepped down after the clock jumped 2 s: {t:?}");
        };
        assert_eq!(
            cause,
            Some(EndCause::Lost(LostCause::ClockJump)),
            "trial {i}: {t:?}"
        );
        assert!(
            down < Duration::from_millis(1_500),
            "trial {i}: the step-down came {down:?} after the jump, not at the next renewal"
        );
        if let Some(claimed) = t.rival_claimed {
            assert!(
                down < claimed,
                "trial {i}: the rival claimed {claimed:?} after the jump, the holder stepped \
                 down only {down:?} after it: two holders"
            );
        }
    }
}

/// A backward step of 5 s does not end the lease (the holder's deadline is
/// counted on its own clock, so its tenure is not extended either); the
/// database then keeps the name 5 s longer than the lease after the last
/// renewal, which only delays a takeover after a crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backward_step_of_the_database_clock_keeps_the_lease() {
    let Some((url, file)) = faketime() else {
        return;
    };
    let _clock = CLOCK.lock().await;
    let t = trial(&url, &file, -5, Duration::from_secs(2)).await;
    println!("backward step of 5 s: {t:?}");
    assert!(t.stepped_down.is_none(), "{t:?}");
    assert!(t.rival_claimed.is_none(), "{t:?}");
}

/// A forward step of 4 s, more than lease − renew (2.75 s): the database
/// expires the lease at once, before any renewal can show the step, so a
/// rival may claim first; what the holder can promise is to learn it at its
/// next renewal (lost, `NotHolder`, or `ClockJump` if its renewal came
/// before the rival's claim): within one renew interval and a round trip.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_step_past_lease_minus_renew_is_seen_at_the_next_renewal() {
    let Some((url, file)) = faketime() else {
        return;
    };
    let _clock = CLOCK.lock().await;
    for i in 0..3 {
        let t = trial(&url, &file, 4, Duration::from_secs(3)).await;
        println!("forward step of 4 s, trial {i}: {t:?}");
        let Some((down, cause)) = t.stepped_down else {
            panic!("trial {i}: the holder never learnt of the step: {t:?}");
        };
        assert!(
            matches!(
                cause,
                Some(EndCause::Lost(LostCause::NotHolder | LostCause::ClockJump))
            ),
            "trial {i}: {t:?}"
        );
        assert!(
            down < Duration::from_millis(1_000),
            "trial {i}: the holder learnt of the step {down:?} after it, not at its next renewal"
        );
    }
}
