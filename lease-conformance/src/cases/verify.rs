//! verify.

use super::{assert_lost, claimed, ok};
use crate::Ctx;

/// verify returns the term while the lease is held.
pub async fn verify_while_held_returns_term(ctx: Ctx) {
    let leases = ctx.leases();
    let name = ctx.name("held");
    let first = claimed(&leases, &name, "no row exists for it yet").await;
    ok(first.release().await, "release");
    let h = claimed(&leases, &name, "it was released").await;
    assert_eq!(
        ok(h.verify().await, "verify by the holder"),
        2,
        "verify must return the row's current term"
    );
}

/// verify after a release is lost.
pub async fn verify_after_release_is_lost(ctx: Ctx) {
    let leases = ctx.leases();
    let name = ctx.name("released");
    let h = claimed(&leases, &name, "no row exists for it yet").await;
    ok(h.release().await, "release");
    assert_lost(
        h.verify().await,
        "verify after release (it must require expires_at_ms > now)",
    );
}

/// verify after the lease expired is lost, even when nobody claimed the name.
pub async fn verify_after_expiry_without_successor_is_lost(ctx: Ctx) {
    let leases = ctx.short_leases();
    let name = ctx.name("expired");
    let h = claimed(&leases, &name, "no row exists for it yet").await;
    ctx.sleep_past_short_lease().await;
    assert_lost(
        h.verify().await,
        "verify after expiry with no successor (it must require expires_at_ms > now)",
    );
}

/// After a takeover the old holder's verify is lost and the successor's
/// returns the new term.
pub async fn verify_tells_old_holder_from_successor(ctx: Ctx) {
    let old_leases = ctx.short_leases();
    let new_leases = ctx.leases();
    let name = ctx.name("succeeded");
    let old = claimed(&old_leases, &name, "no row exists for it yet").await;
    ctx.sleep_past_short_lease().await;
    let new = claimed(&new_leases, &name, "its lease expired").await;
    assert_lost(
        old.verify().await,
        "verify by the old holder (it must match the holder token)",
    );
    assert_eq!(ok(new.verify().await, "verify by the successor"), 2);
}
