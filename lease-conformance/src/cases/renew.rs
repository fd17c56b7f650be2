//! renew.

use lease_core::Token;

use super::{assert_lost, claimed, db_now, ok};
use crate::Ctx;

/// Renewing keeps the name well past the lease duration: a rival is refused
/// throughout.
pub async fn renew_keeps_name_past_lease_duration(ctx: Ctx) {
    let timings = crate::held_timings();
    let holder = ctx.leases_with(timings);
    let rival = ctx.leases();
    let name = ctx.name("renewed");
    let h = claimed(&holder, &name, "no row exists for it yet").await;
    let every = timings.renew();
    let start = tokio::time::Instant::now();
    let mut last_sent = start;
    while start.elapsed() < timings.lease() * 2 + timings.lease() / 2 {
        tokio::time::sleep(every).await;
        let sent = tokio::time::Instant::now();
        let gap = sent - last_sent;
        match h.renew().await {
            Ok(()) => last_sent = sent,
            Err(e) => panic!(
                "a renewal by the holder within its lease failed: {e} ({}); it was sent {gap:?} \
                 after the last one that succeeded was sent{}",
                super::source_chain(&e),
                if gap >= timings.lease() {
                    ", longer than the lease: the test process was starved (a loaded \
                     machine), not the backend wrong"
                } else {
                    ""
                }
            ),
        }
        assert!(
            ok(rival.claim(&name).await, "a rival's claim").is_none(),
            "a rival claimed the name {:?} after the claim, although the holder renewed every \
             {every:?} a lease of {:?} (renew must set expires_at_ms = now + lease_ms)",
            start.elapsed(),
            timings.lease()
        );
    }
    assert_eq!(
        ok(h.verify().await, "verify"),
        1,
        "renewals must not move the term"
    );
}

/// Two renewals in a row both succeed, even if they write the same expiry.
pub async fn renew_twice_in_a_row_is_still_held(ctx: Ctx) {
    let leases = ctx.leases();
    let name = ctx.name("twice");
    let h = claimed(&leases, &name, "no row exists for it yet").await;
    for i in 0..5 {
        ok(
            h.renew().await,
            &format!(
                "renewal {i} in a quick row (a renewal that writes the same expires_at_ms as the \
                 one before must still count as held: count matched rows, not changed rows)"
            ),
        );
    }
}

/// A renewal after another process took the name over is lost.
pub async fn renew_after_takeover_is_lost(ctx: Ctx) {
    let old_leases = ctx.short_leases();
    let new_leases = ctx.leases();
    let name = ctx.name("taken");
    let old = claimed(&old_leases, &name, "no row exists for it yet").await;
    ctx.sleep_past_short_lease().await;
    let new = claimed(&new_leases, &name, "its lease expired").await;
    assert_lost(
        old.renew().await,
        "a renewal by the old holder after a takeover (renew must match the holder token)",
    );
    assert_eq!(
        ok(new.verify().await, "verify by the successor"),
        2,
        "a failed renewal by the old holder must leave the successor holding"
    );
}

/// A renewal after the lease expired is lost, even when nobody claimed the
/// name since.
pub async fn renew_after_expiry_is_lost_even_without_successor(ctx: Ctx) {
    let leases = ctx.short_leases();
    let name = ctx.name("lapsed");
    let h = claimed(&leases, &name, "no row exists for it yet").await;
    ctx.sleep_past_short_lease().await;
    assert_lost(
        h.renew().await,
        "a renewal after expiry (renew must require expires_at_ms > now: an expired lease \
         may already have been claimed and released)",
    );
}

/// A renewal after the holder released the name is lost.
pub async fn renew_after_release_is_lost(ctx: Ctx) {
    let leases = ctx.leases();
    let name = ctx.name("given-up");
    let h = claimed(&leases, &name, "no row exists for it yet").await;
    ok(h.release().await, "release");
    assert_lost(
        h.renew().await,
        "a renewal after release (release sets expires_at_ms = 0, so renew must not match)",
    );
}

/// A renewal extends the lease from the database's now: a lease renewed just
/// before it would expire is still held past its first expiry.
pub async fn renew_extends_the_lease_from_now(ctx: Ctx) {
    let timings = crate::held_timings();
    let leases = ctx.leases_with(timings);
    let rival = ctx.leases();
    let name = ctx.name("extended");
    let h = claimed(&leases, &name, "no row exists for it yet").await;
    let expiry = |info: Option<lease_core::LeaseInfo>| {
        info.unwrap_or_else(|| panic!("get finds no row for {name:?} after its claim"))
            .expires_at_ms
    };
    let claimed_until = expiry(ok(rival.get(&name).await, "get after the claim"));
    tokio::time::sleep(timings.lease() / 2).await;
    ok(h.renew().await, "a renewal halfway through the lease");
    let renewed_until = expiry(ok(rival.get(&name).await, "get after the renewal"));
    assert!(
        renewed_until > claimed_until,
        "a renewal halfway through the lease left the expiry at {renewed_until} (the claim's \
         was {claimed_until}): renew must set expires_at_ms = now + lease_ms"
    );
    // Past the claim's expiry by the database's clock, within the renewal's.
    while db_now(&rival).await.as_millis() <= claimed_until {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let refused = ok(rival.claim(&name).await, "a rival's claim").is_none();
    let after = db_now(&rival).await.as_millis();
    if after < renewed_until {
        assert!(
            refused,
            "the name was free past the claim's expiry ({claimed_until}) although it was \
             renewed until {renewed_until} (the rival claimed by {after}): renew must set \
             expires_at_ms = now + lease_ms"
        );
        ok(h.renew().await, "a renewal within the extended lease");
    } else {
        eprintln!(
            "the rival's claim came at {after}, past the renewed expiry {renewed_until}: the \
             machine is too loaded to check it within the lease"
        );
    }
}

/// A renewal answers the database's now: the one the statement compared
/// the expiry with and wrote `now + lease_ms` from, so it lies between the
/// database's clock read just before and just after the call.
pub async fn renew_answers_the_database_now_it_wrote_with(ctx: Ctx) {
    let leases = ctx.leases();
    let store = ctx.store();
    let name = ctx.name("now");
    let h = claimed(&leases, &name, "no row exists for it yet").await;
    let lease_ms = leases.timings().lease_ms();
    for i in 0..3 {
        let before = db_now(&leases).await.as_millis();
        let answered = match store.renew(&name, h.token(), lease_ms).await {
            Ok(answered) => answered,
            Err(e) => panic!("renewal {i} by the holder failed: {e}"),
        };
        let after = db_now(&leases).await.as_millis();
        let Some(renewed) = answered else {
            panic!("renewal {i} by the holder within its lease answered None (not held)");
        };
        assert!(
            !renewed.resign,
            "renewal {i} answered a resign request nobody made (resign_term must be 0, or \
             another term, until request_resign asks the holder at its term)"
        );
        let now = renewed.now_ms;
        assert!(
            (before..=after).contains(&now),
            "renewal {i} answered the database's now as {now}, outside the clock read before \
             ({before}) and after ({after}) the call: renew must return the now the statement \
             read (e.g. RETURNING the CTE's now), in UTC milliseconds"
        );
        let Some(info) = ok(leases.get(&name).await, "get") else {
            panic!("get found no row for {name:?}, which the holder just renewed");
        };
        assert_eq!(
            info.expires_at_ms,
            now + lease_ms,
            "renewal {i} answered now {now} but wrote expires_at_ms {}: the answer must be the \
             now the expiry was computed from",
            info.expires_at_ms
        );
    }
    let other = match store
        .renew(
            &name,
            Token::new("0123456789abcdef0123456789abcdef"),
            lease_ms,
        )
        .await
    {
        Ok(other) => other,
        Err(e) => panic!("a renewal by another token failed: {e}"),
    };
    assert_eq!(
        other, None,
        "a renewal by a token that does not hold the name answers None"
    );
}
