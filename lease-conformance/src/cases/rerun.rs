//! find (unfinished instants) and claim again.

use std::sync::Arc;

use lease_core::{Leases, Unfinished, UtcMillis};
use tokio::task::JoinSet;

use super::{claimed, instant, instant_claimed, ok};
use crate::Ctx;

async fn cut_short(leases: &Leases, name: &str, slot: UtcMillis) {
    let h = instant_claimed(
        leases,
        name,
        slot,
        "the name should be free for the instant",
    )
    .await;
    ok(h.release().await, "release (the round is cut short)");
}

async fn find_one(leases: &Leases, name: &str, why: &str) -> Unfinished {
    let found = ok(
        leases.unfinished_instants(&[name]).await,
        "unfinished_instants",
    );
    match found.as_slice() {
        [u] => u.clone(),
        other => panic!(
            "expected exactly one unfinished instant under {name:?} ({why}), found {other:?}"
        ),
    }
}

/// A round cut short by expiry is found unfinished only once its lease expired.
pub async fn unfinished_found_only_after_expiry(ctx: Ctx) {
    let short = ctx.short_leases();
    let leases = ctx.leases();
    let name = ctx.name("cron");
    let s = instant(&leases, -60_000).await;
    let _h = instant_claimed(&short, &name, s, "no row exists for the name yet").await;
    assert!(
        ok(
            leases.unfinished_instants(&[name.as_str()]).await,
            "unfinished_instants"
        )
        .is_empty(),
        "an instant whose round still holds the name was found unfinished: find must require \
         expires_at_ms <= now"
    );
    ctx.sleep_past_short_lease().await;
    let u = find_one(&leases, &name, "its holder's lease expired mid-round").await;
    assert_eq!(
        (u.name.as_str(), u.instant, u.rerun),
        (name.as_str(), s, false)
    );
    assert_eq!(u.term(), 1, "find must return the row's term");
}

/// A round cut short by a release is found unfinished at once.
pub async fn unfinished_found_at_once_after_release(ctx: Ctx) {
    let leases = ctx.leases();
    let name = ctx.name("cron");
    let s = instant(&leases, -60_000).await;
    cut_short(&leases, &name, s).await;
    let u = find_one(
        &leases,
        &name,
        "its round released the name before finishing",
    )
    .await;
    assert_eq!(u.instant, s);
}

/// A round that ran to its end is never found unfinished.
pub async fn finished_round_is_never_unfinished(ctx: Ctx) {
    let short = ctx.short_leases();
    let leases = ctx.leases();
    let name = ctx.name("cron");
    let s = instant(&leases, -60_000).await;
    let h = instant_claimed(&short, &name, s, "no row exists for the name yet").await;
    ok(h.finish(s).await, "finish");
    ctx.sleep_past_short_lease().await;
    assert!(
        ok(
            leases.unfinished_instants(&[name.as_str()]).await,
            "unfinished_instants"
        )
        .is_empty(),
        "a finished round was found unfinished"
    );
}

/// One statement finds the unfinished instants of many names, and only those.
pub async fn unfinished_of_many_names_found_in_one_statement(ctx: Ctx) {
    let leases = ctx.leases();
    let s = instant(&leases, -60_000).await;
    let (a, b, c, d) = (ctx.name("a"), ctx.name("b"), ctx.name("c"), ctx.name("d"));
    cut_short(&leases, &a, s).await;
    let fb = instant_claimed(&leases, &b, s, "no row exists for the name yet").await;
    ok(fb.finish(s).await, "finish");
    cut_short(&leases, &d, UtcMillis::from_millis(s.as_millis() + 1_000)).await;
    let plain = claimed(&leases, &ctx.name("plain"), "no row exists for it yet").await;
    ok(plain.release().await, "release");
    let before = ctx.statements();
    let names = [
        a.as_str(),
        b.as_str(),
        c.as_str(),
        d.as_str(),
        a.as_str(),
        &ctx.name("plain"),
    ];
    let mut found = ok(
        leases.unfinished_instants(&names).await,
        "unfinished_instants",
    );
    assert_eq!(
        ctx.statements() - before,
        1,
        "finding unfinished instants of many names must be one statement"
    );
    found.sort_by(|x, y| x.name.cmp(&y.name));
    let got: Vec<(&str, i64)> = found
        .iter()
        .map(|u| (u.name.as_str(), u.instant.as_millis()))
        .collect();
    assert_eq!(
        got,
        vec![
            (a.as_str(), s.as_millis()),
            (d.as_str(), s.as_millis() + 1_000)
        ],
        "expected the two cut-short instants only (not the finished one, not the name never \
         claimed, not the plain lease whose slot_ms and unfinished_slot_ms are both 0)"
    );
}

/// A cut-short instant is claimed a second time exactly once.
pub async fn rerun_claims_a_cut_short_instant_exactly_once(ctx: Ctx) {
    let leases = ctx.leases();
    let other = ctx.leases();
    let name = ctx.name("cron");
    let s = instant(&leases, -60_000).await;
    cut_short(&leases, &name, s).await;
    let u = find_one(&leases, &name, "its round was cut short").await;
    let h = match ok(leases.claim_rerun(&u).await, "claim_rerun") {
        Some(h) => h,
        None => panic!("the second claim of a cut-short instant found free was refused"),
    };
    assert_eq!(
        h.term(),
        u.term() + 1,
        "a second claim moves the term by one"
    );
    assert_eq!(h.instant(), Some(s));
    assert!(
        ok(
            other.claim_rerun(&u).await,
            "a second claim_rerun of the same find"
        )
        .is_none(),
        "the instant was claimed a second time twice"
    );
    ok(h.release().await, "release (cut short again)");
    assert!(
        ok(
            leases.unfinished_instants(&[name.as_str()]).await,
            "unfinished_instants"
        )
        .is_empty(),
        "an instant claimed a second time must not be found again (claim again must set \
         rerun_slot_ms = slot_ms; find must require rerun_slot_ms < slot_ms)"
    );
}

/// Sixteen replicas claiming the same cut-short instant again: one wins.
pub async fn concurrent_rerun_claims_have_one_winner(ctx: Ctx) {
    let leases = ctx.leases();
    let name = ctx.name("cron");
    let s = instant(&leases, -60_000).await;
    cut_short(&leases, &name, s).await;
    let u = find_one(&leases, &name, "its round was cut short").await;
    let mut set = JoinSet::new();
    let barrier = Arc::new(tokio::sync::Barrier::new(16));
    for _ in 0..16 {
        let leases = ctx.leases();
        let u = u.clone();
        let barrier = barrier.clone();
        let _ = set.spawn(async move {
            let _ = barrier.wait().await;
            leases.claim_rerun(&u).await
        });
    }
    let mut winners = 0;
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok(Ok(Some(_))) => winners += 1,
            Ok(Ok(None)) => {}
            Ok(Err(e)) => panic!("a concurrent second claim surfaced an error: {e}"),
            Err(e) => panic!("a claimant's task failed: {e}"),
        }
    }
    assert_eq!(
        winners, 1,
        "16 concurrent second claims must have exactly one winner"
    );
}

/// A second claim found before the name changed hands is refused by its term.
pub async fn stale_rerun_claim_is_refused_by_its_term(ctx: Ctx) {
    let leases = ctx.leases();
    let name = ctx.name("cron");
    let s = instant(&leases, -60_000).await;
    cut_short(&leases, &name, s).await;
    let stale = find_one(&leases, &name, "its round was cut short").await;
    // The name changes hands and is given back; the instant is still
    // unfinished and not rerun, so only the term tells the find is stale.
    let passer = claimed(&leases, &name, "it was released").await;
    ok(passer.release().await, "release");
    assert!(
        ok(
            leases.claim_rerun(&stale).await,
            "claim_rerun with a stale term"
        )
        .is_none(),
        "a second claim found at term {} succeeded after the name changed hands (term {}): claim \
         again must require term = :term",
        stale.term(),
        passer.term()
    );
    let fresh = find_one(&leases, &name, "it is still unfinished").await;
    assert_eq!(fresh.term(), passer.term());
    assert!(
        ok(
            leases.claim_rerun(&fresh).await,
            "claim_rerun with the current term"
        )
        .is_some(),
        "a second claim with the current term must succeed"
    );
}

/// A second claim is refused once the first round was recorded finished after all.
pub async fn rerun_refused_after_first_round_recorded_finished(ctx: Ctx) {
    let short = ctx.short_leases();
    let leases = ctx.leases();
    let name = ctx.name("cron");
    let s = instant(&leases, -60_000).await;
    let slow = instant_claimed(&short, &name, s, "no row exists for the name yet").await;
    ctx.sleep_past_short_lease().await;
    let u = find_one(&leases, &name, "its lease expired mid-round").await;
    // The slow round ends after all: its finish records the end without the lease.
    let _ = slow.finish(s).await;
    assert!(
        ok(leases.claim_rerun(&u).await, "claim_rerun").is_none(),
        "an instant recorded finished was claimed a second time: claim again must require \
         unfinished_slot_ms = slot_ms"
    );
}

/// A second claim is refused once a later instant was claimed.
pub async fn rerun_refused_after_later_instant_claimed(ctx: Ctx) {
    let leases = ctx.leases();
    let name = ctx.name("cron");
    let s = instant(&leases, -120_000).await;
    cut_short(&leases, &name, s).await;
    let u = find_one(&leases, &name, "its round was cut short").await;
    let later = instant_claimed(
        &leases,
        &name,
        UtcMillis::from_millis(s.as_millis() + 60_000),
        "it is later and the name was released",
    )
    .await;
    ok(later.finish(later.instant().unwrap_or(s)).await, "finish");
    assert!(
        ok(leases.claim_rerun(&u).await, "claim_rerun").is_none(),
        "an instant given up for a later one was claimed a second time"
    );
}

/// A second claim is refused while the name is held.
pub async fn rerun_refused_while_name_held(ctx: Ctx) {
    let short = ctx.short_leases();
    let leases = ctx.leases();
    let name = ctx.name("cron");
    let s = instant(&leases, -60_000).await;
    let _dead = instant_claimed(&short, &name, s, "no row exists for the name yet").await;
    ctx.sleep_past_short_lease().await;
    let u = find_one(&leases, &name, "its lease expired").await;
    let first = match ok(leases.claim_rerun(&u).await, "claim_rerun") {
        Some(h) => h,
        None => panic!("the second claim of a cut-short instant was refused"),
    };
    // The winner holds the name: no find sees the instant now, and the found
    // value cannot claim it again.
    assert!(
        ok(
            leases.unfinished_instants(&[name.as_str()]).await,
            "unfinished_instants"
        )
        .is_empty()
    );
    assert!(ok(leases.claim_rerun(&u).await, "claim_rerun while held").is_none());
    assert_eq!(
        ok(first.verify().await, "verify by the second round"),
        u.term() + 1
    );
}

/// A second round runs under its handle like any other and finishes.
pub async fn rerun_round_finishes_like_any_other(ctx: Ctx) {
    let leases = ctx.leases();
    let name = ctx.name("cron");
    let s = instant(&leases, -60_000).await;
    cut_short(&leases, &name, s).await;
    let u = find_one(&leases, &name, "its round was cut short").await;
    let h = match ok(leases.claim_rerun(&u).await, "claim_rerun") {
        Some(h) => h,
        None => panic!("the second claim of a cut-short instant was refused"),
    };
    ok(h.finish(s).await, "finish of the second round");
    assert!(
        ok(
            leases.unfinished_instants(&[name.as_str()]).await,
            "unfinished_instants"
        )
        .is_empty()
    );
    assert_eq!(
        ok(leases.last_instant(&name).await, "last_instant"),
        Some(s)
    );
    let next = instant_claimed(
        &leases,
        &name,
        UtcMillis::from_millis(s.as_millis() + 60_000),
        "the second round finished and released the name",
    )
    .await;
    assert!(
        next.superseded().is_none(),
        "the finished second round was reported given up"
    );
}
