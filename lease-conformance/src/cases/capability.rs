//! The capabilities on the backend: the lock and the leader election, with
//! several coordinators (distinct instances) in one process.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_core::{
    CancellationToken, EndCause, Leadership, LeaseContext, Leases, LockError, LostCause,
};
use tokio::time::{Instant, sleep};

use super::ok;
use crate::Ctx;

/// What a lock's loss to its local deadline adds to a failure's text.
fn lost_note<T>(e: &LockError<T>) -> String {
    match e {
        LockError::Lost {
            cause: LostCause::DeadlineExceeded,
            ..
        } => {
            format!(": {}", crate::deadline_note(&crate::held_timings()))
        }
        _ => String::new(),
    }
}

/// What a leader's loss of its lease adds to a failure's text, by the
/// cause its context ended with.
fn ended_note(cause: Option<EndCause>) -> String {
    match cause {
        Some(EndCause::Lost(LostCause::DeadlineExceeded)) => {
            format!(" ({})", crate::deadline_note(&crate::held_timings()))
        }
        Some(cause) => format!(" (its context ended: {cause:?})"),
        None => String::new(),
    }
}

/// A campaign interval short enough for the suite, with its jitter.
const CAMPAIGN: Duration = Duration::from_millis(100);
const JITTER: Duration = Duration::from_millis(50);

/// Sixteen lockers (distinct instances) try the same lock at once: exactly
/// one runs its work; the fifteen others are told it is held, and by whom.
pub async fn lock_runs_once_among_sixteen_lockers(ctx: Ctx) {
    const LOCKERS: usize = 16;
    let name = ctx.name("lock");
    let running = Arc::new(Mutex::new(0_u32));
    // How many lockers have been told the lock is held: the work runs until
    // all the others have tried (however slowly a loaded machine lets them
    // run), so none of them can find the name free after it.
    let refusals = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..LOCKERS {
        let leases = ctx.held_leases();
        let (name, running, refusals) = (name.clone(), running.clone(), refusals.clone());
        tasks.push(tokio::spawn(async move {
            let instance = leases.instance().to_owned();
            let waiting = refusals.clone();
            let out = leases
                .lock(&name)
                .try_run(move |_| async move {
                    *running.lock().unwrap_or_else(|e| e.into_inner()) += 1;
                    let since = Instant::now();
                    while waiting.load(Ordering::SeqCst) < LOCKERS - 1
                        && since.elapsed() < Duration::from_secs(30)
                    {
                        sleep(Duration::from_millis(20)).await;
                    }
                })
                .await;
            if matches!(out, Err(LockError::Held { .. })) {
                let _ = refusals.fetch_add(1, Ordering::SeqCst);
            }
            (instance, out)
        }));
    }
    let mut ran = Vec::new();
    let mut refused = Vec::new();
    for task in tasks {
        let (instance, out) = task
            .await
            .unwrap_or_else(|e| panic!("a locker failed: {e}"));
        match out {
            Ok(()) => ran.push(instance),
            Err(LockError::Held { by, .. }) => refused.push(by),
            Err(e) => panic!("try_run failed: {e} ({e:?}){}", lost_note(&e)),
        }
    }
    assert_eq!(
        ran.len(),
        1,
        "exactly one of 16 concurrent lockers must run the work; {} did: the claim must \
         refuse a held name",
        ran.len()
    );
    assert_eq!(*running.lock().unwrap_or_else(|e| e.into_inner()), 1);
    assert_eq!(refused.len(), 15);
    for by in refused.iter().flatten().filter(|i| i.held()) {
        assert_eq!(
            by.instance, ran[0],
            "a refusal must name the holder's instance (get must read the instance \
             the winning claim wrote)"
        );
    }
}

/// A lock whose lease is lost while its work runs reports the loss even
/// though the work returned successfully, with the work's output.
pub async fn lock_lost_during_its_work_reports_the_loss_with_the_output(ctx: Ctx) {
    let leases = ctx.short_leases();
    let store = ctx.store();
    let out = leases
        .lock(&ctx.name("lock"))
        .try_run(move |lease: LeaseContext| async move {
            // Someone frees the name under the work (an operator's forced
            // release): the next renewal must find it no longer this
            // holder's, and end the context.
            let handle = lease.handle();
            let freed = store.release(handle.name(), handle.token()).await;
            assert!(
                matches!(freed, Ok(true)),
                "release by the holder's token: {freed:?}"
            );
            tokio::select! {
                () = lease.cancelled() => {}
                () = sleep(Duration::from_secs(5)) => {}
            }
            lease.is_cancelled()
        })
        .await;
    match out {
        Err(LockError::Lost { output, .. }) => assert_eq!(
            output,
            Some(true),
            "the work saw its context end and returned; its output must be kept"
        ),
        Ok(ended) => panic!(
            "the lease was freed under the work, yet try_run returned Ok (context ended: \
             {ended}): a renewal must report a released lease as no longer held"
        ),
        Err(e) => panic!("expected a loss, got {e} ({e:?})"),
    }
}

/// Three electors: one leads at a time; when it shuts down, another takes
/// over within about one campaign interval and the third one's watch names
/// it; the database agrees with the electors' own view.
pub async fn leader_election_has_one_leader_and_hands_over_at_shutdown(ctx: Ctx) {
    let name = ctx.name("leader");
    let leading = Arc::new(Mutex::new(Vec::<String>::new()));
    let overlaps = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut electors = Vec::new();
    let ended = Arc::new(Mutex::new(Vec::<Option<EndCause>>::new()));
    for _ in 0..3 {
        let leases: Leases = ctx.held_leases();
        let ended = ended.clone();
        let instance = leases.instance().to_owned();
        let (l1, l2, o) = (leading.clone(), leading.clone(), overlaps.clone());
        let (me, me2) = (instance.clone(), instance.clone());
        let leader = leases
            .leader(&name)
            .with_campaign_interval(CAMPAIGN, JITTER)
            .on_started_leading(move |_| {
                let mut l = l1.lock().unwrap_or_else(|e| e.into_inner());
                if !l.is_empty() {
                    o.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(format!("{me} started while {l:?} led"));
                }
                l.push(me.clone());
            })
            .on_stopped_leading(move |_| {
                l2.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .retain(|w| *w != me2);
            });
        let watch = leader.watch();
        let token = CancellationToken::new();
        let shutdown = token.clone();
        let task = tokio::spawn(async move {
            leader
                .run(&shutdown, move |lease: LeaseContext| {
                    let ended = ended.clone();
                    async move {
                        lease.cancelled().await;
                        ended
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(lease.cause());
                    }
                })
                .await
        });
        electors.push((instance, watch, token, task));
    }
    let current = || leading.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let started = Instant::now();
    while current().is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "nobody was elected within 5 s"
        );
        sleep(Duration::from_millis(20)).await;
    }
    // Past the lease: the leader keeps it, nobody else starts.
    sleep(crate::HELD_LEASE + Duration::from_millis(500)).await;
    let first = current();
    let causes = ended.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert_eq!(
        first.len(),
        1,
        "one leader throughout, past its lease: {first:?} lead now; tenures ended meanwhile: \
         {causes:?}{}",
        causes.first().map_or_else(String::new, |c| ended_note(*c))
    );
    let leases = ctx.leases();
    let in_db = ok(
        leases.leader(&name).current_leader().await,
        "current_leader",
    );
    let in_db = in_db.unwrap_or_else(|| panic!("{first:?} leads, but get reads no holder"));
    assert_eq!(
        in_db.instance, first[0],
        "the database's leader is the one leading"
    );

    let (i, _) = electors
        .iter()
        .enumerate()
        .find(|(_, e)| e.0 == first[0])
        .unwrap_or_else(|| panic!("the leader {first:?} is none of the electors"));
    let (_, _, token, task) = electors.remove(i);
    token.cancel();
    ok(
        task.await.unwrap_or_else(|e| panic!("{e}")),
        "the leader's run at shutdown",
    );
    let handed = Instant::now();
    while current().is_empty() {
        assert!(
            handed.elapsed() < Duration::from_secs(10),
            "no hand-over within 10 s of the leader's shutdown (campaign interval {CAMPAIGN:?}): \
             the shutdown must give the name back"
        );
        sleep(Duration::from_millis(20)).await;
    }
    let second = current();
    assert_eq!(second.len(), 1);
    assert_ne!(second[0], first[0]);
    // The follower's watch names the new leader within a campaign or two.
    let follower = electors
        .iter()
        .find(|e| e.0 != second[0])
        .unwrap_or_else(|| panic!("no follower left"));
    let named = Instant::now();
    loop {
        let view = follower.1.borrow().clone();
        if let Leadership::Following { leader: Some(id) } = &view {
            if id.instance == second[0] {
                assert_eq!(id.term, in_db.term + 1, "the next term");
                break;
            }
        }
        assert!(
            named.elapsed() < Duration::from_secs(10),
            "the follower's watch does not name the new leader within 10 s: {view:?}"
        );
        sleep(Duration::from_millis(20)).await;
    }
    for (_, _, token, task) in electors {
        token.cancel();
        ok(
            task.await.unwrap_or_else(|e| panic!("{e}")),
            "run at shutdown",
        );
    }
    let overlaps = overlaps.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert!(overlaps.is_empty(), "two leaders at once: {overlaps:?}");
}

/// A leader killed without giving the name back (its task dropped) is
/// replaced no earlier than its lease's expiry by the database's clock, and
/// no later than one campaign interval after it.
pub async fn killed_leader_is_replaced_after_its_lease_expires(ctx: Ctx) {
    let name = ctx.name("leader");
    let spawn = |leases: Leases| {
        let leader = leases
            .leader(&name)
            .with_campaign_interval(CAMPAIGN, JITTER);
        let watch = leader.watch();
        let token = CancellationToken::new();
        let shutdown = token.clone();
        let task = tokio::spawn(async move {
            leader
                .run(&shutdown, |lease: LeaseContext| async move {
                    lease.cancelled().await;
                })
                .await
        });
        (watch, token, task)
    };
    let (mut first, _first_token, first_task) = spawn(ctx.held_leases());
    let started = Instant::now();
    while !first.borrow_and_update().is_leading() {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "nobody was elected"
        );
        sleep(Duration::from_millis(10)).await;
    }
    let (mut second, second_token, second_task) = spawn(ctx.held_leases());
    sleep(Duration::from_millis(300)).await;
    first_task.abort();
    let _ = first_task.await;
    let leases = ctx.leases();
    let full = format!("leader:{name}");
    let at_kill = ok(leases.get(&full).await, "get at the kill")
        .unwrap_or_else(|| panic!("no row for {full:?}"));
    let killed = Instant::now();
    while !second.borrow_and_update().is_leading() {
        assert!(
            killed.elapsed() < crate::HELD_LEASE + Duration::from_secs(10),
            "the killed leader was not replaced within 10 s of its lease {:?}",
            crate::HELD_LEASE
        );
        sleep(Duration::from_millis(10)).await;
    }
    let after = ok(leases.get(&full).await, "get after the takeover")
        .unwrap_or_else(|| panic!("no row for {full:?}"));
    let claimed_at = after.expires_at_ms - crate::held_timings().lease_ms();
    assert!(
        claimed_at >= at_kill.expires_at_ms,
        "the successor claimed at {claimed_at} by the database's clock, before the killed \
         leader's lease expired at {}",
        at_kill.expires_at_ms
    );
    // One campaign interval, and a second of room for a loaded machine.
    let slack = i64::try_from((CAMPAIGN + JITTER).as_millis()).unwrap_or(0) + 1_000;
    assert!(
        claimed_at <= at_kill.expires_at_ms + slack,
        "the successor claimed {} ms after the expiry: more than one campaign interval \
         (and a second of room)",
        claimed_at - at_kill.expires_at_ms
    );
    assert_eq!(after.term, at_kill.term + 1);
    second_token.cancel();
    ok(
        second_task.await.unwrap_or_else(|e| panic!("{e}")),
        "run at shutdown",
    );
}
