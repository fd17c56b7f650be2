//! release.

use super::{assert_lost, claimed, ok};
use crate::Ctx;

/// A release frees the name at once: the next claim need not wait for the
/// lease to run out.
pub async fn release_frees_name_at_once(ctx: Ctx) {
    let holder = ctx.leases();
    let next = ctx.leases();
    let name = ctx.name("freed");
    let h = claimed(&holder, &name, "no row exists for it yet").await;
    ok(h.release().await, "release by the holder");
    let n = claimed(
        &next,
        &name,
        "it was released a moment ago, with 15 s of its lease left (release must set \
         expires_at_ms = 0)",
    )
    .await;
    assert_eq!(n.term(), 2);
}

/// A release after a takeover is lost and leaves the successor holding.
pub async fn release_after_takeover_is_lost_and_leaves_successor(ctx: Ctx) {
    let old_leases = ctx.short_leases();
    let new_leases = ctx.leases();
    let name = ctx.name("taken");
    let old = claimed(&old_leases, &name, "no row exists for it yet").await;
    ctx.sleep_past_short_lease().await;
    let new = claimed(&new_leases, &name, "its lease expired").await;
    assert_lost(
        old.release().await,
        "a release by the old holder after a takeover (release must match the holder token)",
    );
    assert_eq!(
        ok(
            new.verify().await,
            "verify by the successor after the old holder's release"
        ),
        2,
        "the old holder's release must not free the successor's lease"
    );
}
