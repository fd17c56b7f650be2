//! The scheduler's statements: claim an instant, finish, last.

use std::sync::Arc;

use lease_core::{EndCause, Error, LeaseContext, LostCause, UtcMillis};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::{assert_lost, claimed, err, instant, instant_claimed, ok};
use crate::Ctx;

fn plus(t: UtcMillis, ms: i64) -> UtcMillis {
    UtcMillis::from_millis(t.as_millis() + ms)
}

/// The first instant claimed under a name starts term 1 and is on record as
/// the last instant.
pub async fn instant_claim_of_new_name_records_the_instant(ctx: Ctx) {
    let leases = ctx.leases();
    let name = ctx.name("cron");
    let s = instant(&leases, -60_000).await;
    let h = instant_claimed(&leases, &name, s, "no row exists for the name yet").await;
    assert_eq!(
        h.term(),
        1,
        "the first instant claim inserts the row with term 1"
    );
    assert_eq!(h.instant(), Some(s));
    assert!(
        h.superseded().is_none(),
        "a new name has no instant to give up, got {:?}",
        h.superseded()
    );
    assert_eq!(
        ok(leases.last_instant(&name).await, "last_instant"),
        Some(s),
        "the insert must record the instant as slot_ms"
    );
}

/// An instant claim of a held name is refused, whoever holds it.
pub async fn instant_claim_while_held_is_refused(ctx: Ctx) {
    let leases = ctx.leases();
    let rival = ctx.leases();
    let name = ctx.name("cron");
    let s1 = instant(&leases, -60_000).await;
    let _h = instant_claimed(&leases, &name, s1, "no row exists for the name yet").await;
    let got = ok(
        rival.claim_instant(&name, plus(s1, 1_000)).await,
        "a rival's instant claim",
    );
    assert!(
        got.is_none(),
        "a later instant was claimed while the round of the earlier one held the name: the \
         instant claim must require the lease to have expired"
    );
    let plain = ctx.name("plain");
    let _p = claimed(&leases, &plain, "no row exists for it yet").await;
    assert!(
        ok(
            rival.claim_instant(&plain, s1).await,
            "an instant claim of a plainly held name"
        )
        .is_none(),
        "an instant claim must be refused while anyone holds the name"
    );
}

/// An instant not later than the one on record is refused, even on a free name.
pub async fn instant_claim_not_later_than_last_is_refused(ctx: Ctx) {
    let leases = ctx.leases();
    let name = ctx.name("cron");
    let s = instant(&leases, -60_000).await;
    let h = instant_claimed(&leases, &name, s, "no row exists for the name yet").await;
    ok(h.finish(s).await, "finish");
    for (label, t) in [
        ("the same instant", s),
        ("an earlier instant", plus(s, -1_000)),
    ] {
        assert!(
            ok(leases.claim_instant(&name, t).await, "an instant claim").is_none(),
            "{label} as the one on record was claimed again on a free name: the instant claim \
             must require :slot > slot_ms"
        );
    }
    let later = instant_claimed(
        &leases,
        &name,
        plus(s, 1),
        "it is later than the one on record",
    )
    .await;
    assert_eq!(later.term(), 2);
}

/// Instants are claimed once each and in order, across processes.
pub async fn instants_are_claimed_once_and_in_order(ctx: Ctx) {
    let replicas = [ctx.leases(), ctx.leases(), ctx.leases()];
    let name = ctx.name("cron");
    let base = instant(&replicas[0], -600_000).await;
    for i in 0..6_i64 {
        let s = plus(base, i * 60_000);
        let who = &replicas[usize::try_from(i).unwrap_or(0) % 3];
        let h = instant_claimed(who, &name, s, "it is the next instant of the schedule").await;
        assert_eq!(
            h.term(),
            u64::try_from(i + 1).unwrap_or(0),
            "each instant claim moves the term by one"
        );
        ok(h.finish(s).await, "finish");
        for (r, other) in replicas.iter().enumerate() {
            assert!(
                ok(
                    other.claim_instant(&name, s).await,
                    "a second claim of the instant"
                )
                .is_none(),
                "replica {r} claimed instant {i} again after its round finished"
            );
            if i > 0 {
                assert!(
                    ok(
                        other.claim_instant(&name, plus(s, -60_000)).await,
                        "an earlier claim"
                    )
                    .is_none(),
                    "replica {r} claimed instant {} after instant {i} was claimed",
                    i - 1
                );
            }
        }
    }
}

/// Sixteen replicas claiming the same instant: one wins, no error surfaces;
/// the same for the next instant once the first round finished.
pub async fn concurrent_instant_claims_have_one_winner(ctx: Ctx) {
    let name = ctx.name("cron");
    let s1 = instant(&ctx.leases(), -60_000).await;
    for (round, s) in [(1_u64, s1), (2, plus(s1, 60_000))] {
        let mut set = JoinSet::new();
        let barrier = Arc::new(tokio::sync::Barrier::new(16));
        for _ in 0..16 {
            let leases = ctx.leases();
            let name = name.clone();
            let barrier = barrier.clone();
            let _ = set.spawn(async move {
                let _ = barrier.wait().await;
                leases.claim_instant(&name, s).await
            });
        }
        let mut winners = Vec::new();
        while let Some(joined) = set.join_next().await {
            match joined {
                Ok(Ok(Some(h))) => winners.push(h),
                Ok(Ok(None)) => {}
                Ok(Err(e)) => panic!(
                    "a concurrent instant claim surfaced an error; losing must be a refusal: {e} \
                     ({})",
                    super::source_chain(&e)
                ),
                Err(e) => panic!("a claimant's task failed: {e}"),
            }
        }
        assert_eq!(
            winners.len(),
            1,
            "round {round}: 16 concurrent claims of one instant must have exactly one winner, \
             got {}",
            winners.len()
        );
        assert_eq!(winners[0].term(), round);
        ok(winners[0].finish(s).await, "finish");
    }
}

/// An instant claim gives up the instant before it whose round was cut short,
/// and names it.
pub async fn instant_claim_gives_up_cut_short_round(ctx: Ctx) {
    let leases = ctx.leases();
    let name = ctx.name("cron");
    let s1 = instant(&leases, -120_000).await;
    let s2 = plus(s1, 60_000);
    let first = instant_claimed(&leases, &name, s1, "no row exists for the name yet").await;
    ok(first.release().await, "release (the round is cut short)");
    let second = instant_claimed(&leases, &name, s2, "it is later and the name was released").await;
    let given_up = second.superseded().unwrap_or_else(|| {
        panic!(
            "the claim of a later instant gave up the cut-short instant {s1} without reporting \
             it: an unfinished_slot_ms read equal to slot_ms is an instant given up"
        )
    });
    assert_eq!(
        (given_up.name.as_str(), given_up.instant),
        (name.as_str(), s1)
    );
    assert!(
        !given_up.rerun,
        "the instant had not been claimed a second time"
    );
    ok(second.release().await, "release");
    let found = ok(
        leases.unfinished_instants(&[name.as_str()]).await,
        "unfinished_instants",
    );
    let slots: Vec<UtcMillis> = found.iter().map(|u| u.instant).collect();
    assert_eq!(
        slots,
        vec![s2],
        "only the last instant claimed can be unfinished: the given-up instant never runs again"
    );
}

/// An instant claim after a round cut short by expiry (its holder died)
/// gives that instant up too.
pub async fn instant_claim_gives_up_round_whose_lease_expired(ctx: Ctx) {
    let short = ctx.short_leases();
    let leases = ctx.leases();
    let name = ctx.name("cron");
    let s1 = instant(&leases, -120_000).await;
    let _dead = instant_claimed(&short, &name, s1, "no row exists for the name yet").await;
    ctx.sleep_past_short_lease().await;
    let next = instant_claimed(&leases, &name, plus(s1, 60_000), "the lease expired").await;
    assert_eq!(next.term(), 2);
    assert_eq!(
        next.superseded().map(|u| u.instant),
        Some(s1),
        "the claim gave up an instant whose holder died mid-round without reporting it"
    );
}

/// An instant claim after a round that ran to its end gives nothing up.
pub async fn instant_claim_after_finished_round_gives_nothing_up(ctx: Ctx) {
    let leases = ctx.leases();
    let name = ctx.name("cron");
    let s1 = instant(&leases, -120_000).await;
    let first = instant_claimed(&leases, &name, s1, "no row exists for the name yet").await;
    ok(first.finish(s1).await, "finish");
    let second = instant_claimed(&leases, &name, plus(s1, 60_000), "it is later").await;
    assert!(
        second.superseded().is_none(),
        "a finished round was reported given up: finish must set unfinished_slot_ms = 0, and \
         only unfinished_slot_ms = slot_ms (not 0) is a given-up instant; got {:?}",
        second.superseded()
    );
}

/// A superseded instant that had been claimed a second time, and cut short
/// again, is reported with its rerun flag.
pub async fn superseded_instant_reports_its_rerun(ctx: Ctx) {
    let leases = ctx.leases();
    let name = ctx.name("cron");
    let s1 = instant(&leases, -120_000).await;
    let first = instant_claimed(&leases, &name, s1, "no row exists for the name yet").await;
    ok(first.release().await, "release (cut short)");
    let found = ok(
        leases.unfinished_instants(&[name.as_str()]).await,
        "unfinished_instants",
    );
    let [u] = found.as_slice() else {
        panic!("the released round should be found unfinished, found {found:?}")
    };
    let rerun = match ok(leases.claim_rerun(u).await, "claim_rerun") {
        Some(h) => h,
        None => panic!("the second claim of a cut-short instant was refused"),
    };
    ok(
        rerun.release().await,
        "release of the second round (cut short again)",
    );
    let next = instant_claimed(&leases, &name, plus(s1, 60_000), "it is later").await;
    let given_up = next.superseded().unwrap_or_else(|| {
        panic!("the instant cut short twice was given up without being reported")
    });
    assert_eq!(given_up.instant, s1);
    assert!(
        given_up.rerun,
        "the given-up instant had been claimed a second time: rerun_slot_ms read equal to \
         slot_ms must be reported as rerun"
    );
}

/// A plain claim and an instant claim of one name share its term.
pub async fn plain_and_instant_claims_share_the_term(ctx: Ctx) {
    let leases = ctx.leases();
    let name = ctx.name("shared");
    let plain = claimed(&leases, &name, "no row exists for it yet").await;
    ok(plain.release().await, "release");
    let s = instant(&leases, -60_000).await;
    let slot = instant_claimed(&leases, &name, s, "it was released").await;
    assert_eq!(
        slot.term(),
        2,
        "the instant claim must move the term of an existing row"
    );
    ok(slot.finish(s).await, "finish");
    let again = claimed(&leases, &name, "the round finished").await;
    assert_eq!(again.term(), 3);
}

/// finish while holding records the end and gives the name back at once.
pub async fn finish_while_holding_records_end_and_frees_name(ctx: Ctx) {
    let leases = ctx.leases();
    let rival = ctx.leases();
    let name = ctx.name("cron");
    let s = instant(&leases, -60_000).await;
    let h = instant_claimed(&leases, &name, s, "no row exists for the name yet").await;
    ok(h.finish(s).await, "finish by the holder");
    let next = claimed(
        &rival,
        &name,
        "its round finished (finish must set expires_at_ms = 0 like release)",
    )
    .await;
    assert_eq!(next.term(), 2);
    ok(next.release().await, "release");
    assert!(
        ok(
            leases.unfinished_instants(&[name.as_str()]).await,
            "unfinished_instants"
        )
        .is_empty(),
        "a finished round was found unfinished: finish must set unfinished_slot_ms = 0"
    );
    assert_eq!(
        ok(leases.last_instant(&name).await, "last_instant"),
        Some(s)
    );
}

/// finish takes an overrun `passed` along: the instants the round overran stay
/// skipped.
pub async fn finish_takes_overrun_passed_along(ctx: Ctx) {
    let leases = ctx.leases();
    let name = ctx.name("cron");
    let s = instant(&leases, -10_000).await;
    let passed = plus(s, 5_000);
    let h = instant_claimed(&leases, &name, s, "no row exists for the name yet").await;
    ok(h.finish(passed).await, "finish with an overrun");
    assert_eq!(
        ok(leases.last_instant(&name).await, "last_instant"),
        Some(passed),
        "a passed instant later than the round's own and not in the database's future must be \
         taken along as slot_ms"
    );
    for t in [plus(s, 1_000), passed] {
        assert!(
            ok(
                leases.claim_instant(&name, t).await,
                "a claim of an overrun instant"
            )
            .is_none(),
            "instant {t}, overrun by the round, was claimed after it finished"
        );
    }
    let next = instant_claimed(
        &leases,
        &name,
        plus(passed, 1_000),
        "it is after the overrun",
    )
    .await;
    assert!(next.superseded().is_none());
}

/// finish does not take along a `passed` the database clock has yet to reach.
pub async fn finish_does_not_take_along_passed_in_database_future(ctx: Ctx) {
    let leases = ctx.leases();
    let name = ctx.name("cron");
    let s = instant(&leases, -10_000).await;
    let h = instant_claimed(&leases, &name, s, "no row exists for the name yet").await;
    let ahead = instant(&leases, 3_600_000).await;
    ok(
        h.finish(ahead).await,
        "finish with a passed instant an hour ahead",
    );
    assert_eq!(
        ok(leases.last_instant(&name).await, "last_instant"),
        Some(s),
        "a passed instant in the database's future must not be taken along (slot_ms = passed \
         only when passed <= now)"
    );
    let next = instant_claimed(
        &leases,
        &name,
        plus(s, 1_000),
        "instants between the round's own and the future `passed` were not skipped",
    )
    .await;
    assert_eq!(next.term(), 2);
}

/// finish with a `passed` not after the round's own instant keeps the instant.
pub async fn finish_with_passed_before_its_instant_keeps_it(ctx: Ctx) {
    let leases = ctx.leases();
    let name = ctx.name("cron");
    let s = instant(&leases, -10_000).await;
    let h = instant_claimed(&leases, &name, s, "no row exists for the name yet").await;
    ok(
        h.finish(plus(s, -5_000)).await,
        "finish with an earlier passed",
    );
    assert_eq!(
        ok(leases.last_instant(&name).await, "last_instant"),
        Some(s),
        "slot_ms never decreases: a passed before the round's instant must not be recorded"
    );
}

/// finish after the name changed hands records the end without the lease,
/// does not take `passed` along, and reports the loss.
pub async fn finish_after_name_changed_hands_records_end_and_is_lost(ctx: Ctx) {
    let short = ctx.short_leases();
    let rival = ctx.leases();
    let name = ctx.name("cron");
    let s = instant(&rival, -10_000).await;
    let h = instant_claimed(&short, &name, s, "no row exists for the name yet").await;
    ctx.sleep_past_short_lease().await;
    let taker = claimed(&rival, &name, "its lease expired").await;
    assert_lost(
        h.finish(plus(s, 5_000)).await,
        "finish after the name changed hands (the name was not given back)",
    );
    assert_eq!(
        ok(taker.verify().await, "verify by the new holder"),
        2,
        "finish by the old holder must not release the new holder's lease"
    );
    assert_eq!(
        ok(rival.last_instant(&name).await, "last_instant"),
        Some(s),
        "passed must not be taken along without the lease"
    );
    ok(taker.release().await, "release");
    assert!(
        ok(
            rival.unfinished_instants(&[name.as_str()]).await,
            "unfinished_instants"
        )
        .is_empty(),
        "the round ran to its end, so its end must be recorded even without the lease \
         (UPDATE ... SET unfinished_slot_ms = 0 WHERE name = :name AND unfinished_slot_ms = :slot)"
    );
}

/// finish after a later instant was claimed records nothing: the later
/// instant stays unfinished.
pub async fn finish_after_later_instant_claimed_records_nothing(ctx: Ctx) {
    let short = ctx.short_leases();
    let rival = ctx.leases();
    let name = ctx.name("cron");
    let s1 = instant(&rival, -120_000).await;
    let s2 = plus(s1, 60_000);
    let h = instant_claimed(&short, &name, s1, "no row exists for the name yet").await;
    ctx.sleep_past_short_lease().await;
    let later = instant_claimed(&rival, &name, s2, "the lease expired").await;
    assert_lost(
        h.finish(s1).await,
        "finish after a later instant was claimed",
    );
    ok(
        later.release().await,
        "release of the later round (cut short)",
    );
    let found = ok(
        rival.unfinished_instants(&[name.as_str()]).await,
        "unfinished_instants",
    );
    let slots: Vec<UtcMillis> = found.iter().map(|u| u.instant).collect();
    assert_eq!(
        slots,
        vec![s2],
        "the old round's finish recorded the later instant's end: the fallback must only match \
         unfinished_slot_ms = the finishing round's own instant"
    );
}

/// finish on a handle known lost records the end and succeeds, without
/// trying to give the name back.
pub async fn finish_on_known_lost_handle_records_end_without_giving_back(ctx: Ctx) {
    let leases = ctx.leases();
    let rival = ctx.leases();
    let name = ctx.name("cron");
    let s = instant(&leases, -10_000).await;
    let h = instant_claimed(&leases, &name, s, "no row exists for the name yet").await;
    LeaseContext::new(h.clone(), CancellationToken::new())
        .end(EndCause::Lost(LostCause::NotHolder));
    assert!(
        h.lost(),
        "ending a context with a loss marks its handle lost"
    );
    ok(
        h.finish(plus(s, 5_000)).await,
        "finish on a handle known lost",
    );
    assert!(
        ok(rival.claim(&name).await, "a rival's claim").is_none(),
        "finish on a handle known lost gave the name back: it must only record the end"
    );
    assert_eq!(
        ok(rival.last_instant(&name).await, "last_instant"),
        Some(s),
        "passed must not be taken along when the end is recorded without giving back"
    );
    // The end is recorded: once the holder's lease is gone, nothing is found.
    let _ = h.release().await.ok();
    assert!(
        ok(
            rival.unfinished_instants(&[name.as_str()]).await,
            "unfinished_instants"
        )
        .is_empty(),
        "the end of the round was not recorded by finish on a handle known lost"
    );
}

/// Only an instant's round can be finished: a plain claim's handle is refused
/// before any statement.
pub async fn finish_of_plain_claim_is_refused(ctx: Ctx) {
    let leases = ctx.leases();
    let name = ctx.name("plain");
    let h = claimed(&leases, &name, "no row exists for it yet").await;
    let before = ctx.statements();
    let e = err(
        h.finish(UtcMillis::from_millis(1_000)).await,
        "finish of a plain claim",
    );
    assert!(
        matches!(e, Error::NoInstant { .. }),
        "expected NoInstant, got {e:?}"
    );
    assert_eq!(ctx.statements(), before);
    let _ = ok(h.verify().await, "the lease is untouched");
}

/// An instant at or before the UNIX epoch is refused before any statement.
pub async fn instant_claim_of_the_epoch_is_refused(ctx: Ctx) {
    let leases = ctx.leases();
    let name = ctx.name("cron");
    let before = ctx.statements();
    for t in [0, -1_000] {
        let e = err(
            leases.claim_instant(&name, UtcMillis::from_millis(t)).await,
            "an instant claim at or before the epoch",
        );
        assert!(
            matches!(e, Error::InvalidInstant { .. }),
            "expected InvalidInstant, got {e:?}"
        );
    }
    assert_eq!(ctx.statements(), before);
}

/// last_instant of a name never claimed is none.
pub async fn last_instant_of_never_claimed_name_is_none(ctx: Ctx) {
    let leases = ctx.leases();
    assert_eq!(
        ok(
            leases.last_instant(&ctx.name("never")).await,
            "last_instant"
        ),
        None,
        "a name with no row has no instant on record"
    );
}

/// last_instant of a name only ever claimed plainly is none.
pub async fn last_instant_of_plainly_claimed_name_is_none(ctx: Ctx) {
    let leases = ctx.leases();
    let name = ctx.name("plain");
    let h = claimed(&leases, &name, "no row exists for it yet").await;
    assert_eq!(
        ok(leases.last_instant(&name).await, "last_instant"),
        None,
        "a plain claim records no instant (its insert must set slot_ms = 0)"
    );
    ok(h.release().await, "release");
}

/// last_instant follows the rounds: the last instant claimed, or the last a
/// finished round took along.
pub async fn last_instant_follows_the_rounds(ctx: Ctx) {
    let leases = ctx.leases();
    let name = ctx.name("cron");
    let s1 = instant(&leases, -300_000).await;
    let h1 = instant_claimed(&leases, &name, s1, "no row exists for the name yet").await;
    assert_eq!(
        ok(leases.last_instant(&name).await, "last_instant"),
        Some(s1)
    );
    let p1 = plus(s1, 120_000);
    ok(h1.finish(p1).await, "finish with an overrun");
    assert_eq!(
        ok(leases.last_instant(&name).await, "last_instant"),
        Some(p1)
    );
    let s2 = plus(p1, 60_000);
    let h2 = instant_claimed(&leases, &name, s2, "it is after the overrun").await;
    ok(h2.release().await, "release (cut short)");
    assert_eq!(
        ok(leases.last_instant(&name).await, "last_instant"),
        Some(s2),
        "a cut-short round's instant is still the last claimed"
    );
}
