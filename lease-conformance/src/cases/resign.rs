//! Resign on request: the `resign_term` column, the request statement, and
//! the renewals that report it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_core::{Handle, LeaseContext, Leases, Renewed, StepDown};
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;

use super::{claimed, ok};
use crate::Ctx;

/// What the store's own renewal answers for `h`, which must still hold its
/// name.
async fn renewed(ctx: &Ctx, leases: &Leases, h: &Handle, step: &str) -> Renewed {
    let lease_ms = leases.timings().lease_ms();
    match ctx.store().renew(h.name(), h.token(), lease_ms).await {
        Ok(Some(renewed)) => renewed,
        Ok(None) => panic!("{step}: the holder's renewal answered None (not held)"),
        Err(e) => panic!("{step}: the holder's renewal failed: {e}"),
    }
}

/// What the store's batch renewal answers for `h` alone.
async fn renewed_in_batch(ctx: &Ctx, leases: &Leases, h: &Handle, step: &str) -> Renewed {
    let lease_ms = leases.timings().lease_ms();
    match ctx
        .store()
        .renew_many(&[(h.name(), h.token())], lease_ms)
        .await
    {
        Ok(answers) => match answers.as_slice() {
            [Some(renewed)] => *renewed,
            other => panic!("{step}: renew_many answered {other:?} for one lease still held"),
        },
        Err(e) => panic!("{step}: renew_many failed: {e}"),
    }
}

/// A resign request reaches the holder at the term it names, and only it:
/// one statement, refused (`false`, nothing recorded) for a term that has
/// passed and for a free name, `true` for the holder's term (twice too);
/// the holder's renewals, single and batched, then report it
/// (`resign_term = term`) and still extend the lease.
pub async fn resign_request_reaches_only_the_holder_at_its_term(ctx: Ctx) {
    let leases = ctx.leases();
    let name = ctx.name("resign");
    let first = claimed(&leases, &name, "no row exists for it yet").await;
    ok(first.release().await, "release");
    let h = claimed(&leases, &name, "it was released").await;
    assert_eq!(h.term(), 2);

    let before = ctx.statements();
    let stale = ok(
        leases.request_resign_at(&name, 1).await,
        "resign request at term 1",
    );
    assert_eq!(
        ctx.statements() - before,
        1,
        "a resign request is one statement"
    );
    assert!(
        !stale,
        "a resign request at term 1 must not ask the holder at term 2: \
         UPDATE .. SET resign_term = term WHERE name = :name AND term = :term AND held"
    );
    assert!(
        !renewed(&ctx, &leases, &h, "after a request at a passed term")
            .await
            .resign,
        "a request at a passed term (1) reached the holder at term 2: the renewal must report \
         resign_term = term, and the request must record nothing unless the term matches"
    );

    let asked = ok(
        leases.request_resign_at(&name, 2).await,
        "resign request at term 2",
    );
    assert!(asked, "a resign request at the holder's term must ask it");
    let again = ok(
        leases.request_resign_at(&name, 2).await,
        "second resign request at term 2",
    );
    assert!(
        again,
        "asking the holder at its term again must answer true (asking twice is asking once), \
         even though the row does not change"
    );
    let single = renewed(&ctx, &leases, &h, "after the request").await;
    assert!(
        single.resign,
        "the holder's renewal must report the request at its term (RETURNING resign_term = \
         term, or the dialect's equivalent)"
    );
    let batched = renewed_in_batch(&ctx, &leases, &h, "after the request").await;
    assert!(
        batched.resign,
        "renew_many must report the request too, as renew does for the same lease"
    );
    let Some(info) = ok(leases.get(&name).await, "get") else {
        panic!("get found no row for {name:?}");
    };
    assert_eq!(
        info.expires_at_ms,
        batched.now_ms + leases.timings().lease_ms(),
        "a renewal that reports a resign request must still extend the lease from its now \
         (the holder winds down under it)"
    );

    ok(h.release().await, "release by the asked holder");
    let free = ok(
        leases.request_resign_at(&name, 2).await,
        "resign request on a free name",
    );
    assert!(!free, "a released name has nobody to ask");
}

/// A resign request ends with its term: the holder after it (the next
/// claim, term + 1) is not asked, whether its renewals go one by one or in
/// a batch; a name never asked reports nothing either.
pub async fn resign_request_ends_with_its_term(ctx: Ctx) {
    let leases = ctx.leases();
    let name = ctx.name("resigned");
    let h = claimed(&leases, &name, "no row exists for it yet").await;
    assert!(
        !renewed(&ctx, &leases, &h, "before any request")
            .await
            .resign,
        "a fresh row must carry no resign request (resign_term 0)"
    );
    assert!(ok(
        leases.request_resign_at(&name, h.term()).await,
        "resign request at the holder's term"
    ));
    assert!(
        renewed(&ctx, &leases, &h, "after the request").await.resign,
        "the holder's renewal must report the request at its term"
    );
    ok(h.release().await, "release by the asked holder");

    let next = claimed(&leases, &name, "its holder resigned and released it").await;
    assert_eq!(next.term(), h.term() + 1);
    assert!(
        !renewed(&ctx, &leases, &next, "the successor's renewal")
            .await
            .resign,
        "the request was for term {} only: the successor at term {} must not be asked (store \
         the term asked in resign_term and compare it with the term, not a flag that outlives \
         its holder)",
        h.term(),
        next.term()
    );
    assert!(
        !renewed_in_batch(&ctx, &leases, &next, "the successor's batch renewal")
            .await
            .resign,
        "renew_many asked the successor at term {} to resign, on a request for term {}",
        next.term(),
        h.term()
    );
}

/// A leader asked to resign (`Leases::request_resign`) winds its work down
/// while it still holds the name, gives the name back, and a follower
/// leads at the next term: the resigned work ends before the successor's
/// starts, by the database's clock.
pub async fn leader_asked_to_resign_hands_over_to_a_follower(ctx: Ctx) {
    const CAMPAIGN: Duration = Duration::from_millis(200);
    const JITTER: Duration = Duration::from_millis(50);
    let name = ctx.name("leader");
    let full = format!("leader:{name}");
    // (instance, term, started, ended) by the database's clock.
    let tenures = Arc::new(Mutex::new(Vec::<(String, u64, i64, Option<i64>)>::new()));
    let stops = Arc::new(Mutex::new(Vec::<(String, StepDown)>::new()));
    let shutdown = CancellationToken::new();
    let mut tasks = Vec::new();
    for i in 0..2 {
        let leases: Leases = ctx.held_leases();
        let me = leases.instance().to_owned();
        let (tenures, stops, me2) = (tenures.clone(), stops.clone(), me.clone());
        let leader = leases
            .leader(&name)
            .with_campaign_interval(CAMPAIGN, JITTER)
            .on_stopped_leading(move |why| {
                stops
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((me2.clone(), why));
            });
        let mut watch = leader.watch();
        let run = shutdown.clone();
        tasks.push(tokio::spawn(async move {
            leader
                .run(&run, move |lease: LeaseContext| {
                    let (tenures, leases, me) = (tenures.clone(), leases.clone(), me.clone());
                    async move {
                        let at = ok(leases.now().await, "clock read").as_millis();
                        let index = {
                            let mut t = tenures.lock().unwrap_or_else(|e| e.into_inner());
                            t.push((me, lease.term(), at, None));
                            t.len() - 1
                        };
                        lease.cancelled().await;
                        // Winding down, under the lease.
                        sleep(Duration::from_millis(300)).await;
                        let at = ok(leases.now().await, "clock read").as_millis();
                        tenures.lock().unwrap_or_else(|e| e.into_inner())[index].3 = Some(at);
                    }
                })
                .await
        }));
        if i == 0 {
            let started = Instant::now();
            while !watch.borrow_and_update().is_leading() {
                assert!(
                    started.elapsed() < Duration::from_secs(5),
                    "nobody was elected within 5 s"
                );
                sleep(Duration::from_millis(10)).await;
            }
        }
    }
    sleep(Duration::from_millis(300)).await;
    let asker = ctx.leases();
    let asked = ok(asker.request_resign(&full).await, "request_resign");
    assert_eq!(
        asked,
        Some(1),
        "the first leader holds term 1, and is asked"
    );
    let started = Instant::now();
    loop {
        let done = tenures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|t| t.1 == 2);
        if done {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "nobody led at term 2 within 10 s of the resign request: the holder's renewals \
             must report it (renew answers resign_term = term), and then it gives the name \
             back; tenures: {:?}",
            tenures.lock().unwrap_or_else(|e| e.into_inner())
        );
        sleep(Duration::from_millis(20)).await;
    }
    shutdown.cancel();
    for task in tasks {
        ok(
            task.await.unwrap_or_else(|e| panic!("{e}")),
            "the election's run",
        );
    }
    let tenures = tenures.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let stops = stops.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let resigned = &tenures[0];
    let successor = &tenures[1];
    assert_eq!(resigned.1, 1);
    assert_eq!(successor.1, 2, "the successor leads at the next term");
    assert_ne!(resigned.0, successor.0, "another replica took over");
    let ended = resigned
        .3
        .unwrap_or_else(|| panic!("the resigned work never ended"));
    assert!(
        ended <= successor.2,
        "the resigned work ended at {ended}, after the successor started at {} by the \
         database's clock: the name must be given back only once the work returned",
        successor.2
    );
    assert_eq!(
        stops.first(),
        Some(&(resigned.0.clone(), StepDown::Resigned)),
        "the first leader stepped down as resigned: {stops:?}"
    );
}
