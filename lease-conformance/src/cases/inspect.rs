//! get and list: reading leases by the database's clock.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lease_core::{LeaseInfo, LeaseState};

use super::{assert_lost, claimed, ok};
use crate::Ctx;

/// Reads `name`, which must have a row.
async fn read(ctx: &Ctx, name: &str, step: &str) -> LeaseInfo {
    match ok(ctx.leases().get(name).await, step) {
        Some(info) => info,
        None => panic!("{step}: get({name:?}) returned None, but the name was claimed"),
    }
}

/// The process clock in UTC ms, to check `now_ms` is the database's now.
fn process_now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// get of a name never claimed is `None`, in one statement.
pub async fn get_of_never_claimed_name_is_none(ctx: Ctx) {
    let name = ctx.name("never");
    let before = ctx.statements();
    let info = ok(ctx.leases().get(&name).await, "get of a name never claimed");
    assert_eq!(info, None, "get must return None when there is no row");
    assert_eq!(
        ctx.statements() - before,
        1,
        "get must be one statement (one store call)"
    );
}

/// get of a held lease reads its name, instance and term, and the time left
/// by the database's clock, in one statement.
pub async fn get_of_held_lease_reads_instance_term_and_time_left(ctx: Ctx) {
    let leases = ctx
        .leases()
        .with_instance("reader-test-holder")
        .unwrap_or_else(|e| panic!("{e}"));
    let name = ctx.name("held");
    let first = claimed(&leases, &name, "no row exists for it yet").await;
    ok(first.release().await, "release");
    let h = claimed(&leases, &name, "it was released").await;
    let before = ctx.statements();
    let info = read(&ctx, &name, "get of a held lease").await;
    assert_eq!(ctx.statements() - before, 1, "get must be one statement");
    assert_eq!(info.name, name, "get must return the row's name");
    assert_eq!(
        info.instance, "reader-test-holder",
        "get must return the instance written by the last claim"
    );
    assert_eq!(info.term, h.term(), "get must return the row's term");
    assert_eq!(info.term, 2, "the second claim's term is 2");
    assert_eq!(
        info.state(),
        LeaseState::Held,
        "the lease is held: {info:?}"
    );
    let lease = leases.timings().lease();
    let left = info.time_left();
    assert!(
        left > lease / 2 && left <= lease,
        "time left must be expires_at_ms - the database's now, close to the lease \
         duration just after a claim; got {left:?} for a lease of {lease:?} ({info:?})"
    );
    let skew = (info.now_ms - process_now_ms()).abs();
    assert!(
        skew < 60_000,
        "now_ms must be the database's clock in UTC ms; it is {} ms from this process's \
         clock ({info:?})",
        skew
    );
}

/// get of a lease that ran out reads it as expired (not held), judged by the
/// database's clock, with its last holder's term and instance kept.
pub async fn get_of_expired_lease_is_not_held(ctx: Ctx) {
    let leases = ctx.short_leases();
    let name = ctx.name("expired");
    let h = claimed(&leases, &name, "no row exists for it yet").await;
    ctx.sleep_past_short_lease().await;
    let info = read(&ctx, &name, "get of an expired lease").await;
    assert_eq!(
        info.state(),
        LeaseState::Expired,
        "a lease whose expiry ({}) is not after the database's now ({}) is not held; \
         get must read now_ms from the database's clock",
        info.expires_at_ms,
        info.now_ms
    );
    assert_eq!(info.time_left(), Duration::ZERO);
    assert_eq!(info.term, h.term(), "expiry does not move the term");
    assert!(
        info.now_ms >= info.expires_at_ms && info.expires_at_ms > 0,
        "{info:?}"
    );
}

/// get of a released lease reads it as released (expires_at_ms 0).
pub async fn get_of_released_lease_reads_released(ctx: Ctx) {
    let leases = ctx.leases();
    let name = ctx.name("released");
    let h = claimed(&leases, &name, "no row exists for it yet").await;
    ok(h.release().await, "release");
    let info = read(&ctx, &name, "get of a released lease").await;
    assert_eq!(
        info.state(),
        LeaseState::Released,
        "release sets expires_at_ms to 0: {info:?}"
    );
    assert_eq!(info.term, h.term(), "a release does not move the term");
}

/// After a takeover, get names the successor's instance and term.
pub async fn get_after_takeover_names_the_successor(ctx: Ctx) {
    let old = ctx
        .short_leases()
        .with_instance("reader-test-old")
        .unwrap_or_else(|e| panic!("{e}"));
    let new = ctx
        .leases()
        .with_instance("reader-test-new")
        .unwrap_or_else(|e| panic!("{e}"));
    let name = ctx.name("stolen");
    let first = claimed(&old, &name, "no row exists for it yet").await;
    ctx.sleep_past_short_lease().await;
    let second = claimed(&new, &name, "its lease expired").await;
    let info = read(&ctx, &name, "get after a takeover").await;
    assert_eq!(
        info.instance, "reader-test-new",
        "a claim over an existing row must write its instance"
    );
    assert_eq!(info.term, first.term() + 1);
    assert_eq!(info.term, second.term());
    assert!(info.held(), "{info:?}");
}

/// A forced release frees the name only while it still has the term read,
/// and the holder then finds it gone.
pub async fn force_release_frees_only_the_term_read(ctx: Ctx) {
    let leases = ctx.leases();
    let name = ctx.name("forced");
    let first = claimed(&leases, &name, "no row exists for it yet").await;
    ok(first.release().await, "release");
    let held = claimed(&leases, &name, "it was released").await;
    assert_eq!(held.term(), 2);
    let before = ctx.statements();
    let stale = ok(
        leases.force_release(&name, 1).await,
        "forced release of term 1",
    );
    assert_eq!(
        ctx.statements() - before,
        1,
        "a forced release is one statement"
    );
    assert!(
        !stale,
        "a forced release of term 1 must not free the name now held under term 2"
    );
    let _ = ok(held.verify().await, "verify after a refused forced release");
    let freed = ok(
        leases.force_release(&name, 2).await,
        "forced release of term 2",
    );
    assert!(
        freed,
        "a forced release of the held term must free the name"
    );
    assert_lost(
        held.renew().await,
        "renew after a forced release (the name was freed)",
    );
    let again = ok(
        leases.force_release(&name, 2).await,
        "second forced release",
    );
    assert!(!again, "a free name has nothing to free");
    let next = claimed(&leases, &name, "it was released by force").await;
    assert_eq!(next.term(), 3, "the next claim moves the term on");
}

/// list reads the names that start with a prefix, in byte order, at most
/// `limit` of them, in one statement, and no name without the prefix.
pub async fn list_reads_names_with_prefix_in_byte_order_up_to_limit(ctx: Ctx) {
    let leases = ctx.leases();
    let prefix = ctx.name("ls/");
    // Byte order: uppercase before lowercase, "a" before "a/", ... Claimed
    // out of order on purpose.
    let labels = ["b", "a/x", "B", "a", "c"];
    for label in labels {
        let name = format!("{prefix}{label}");
        let _held = claimed(&leases, &name, "no row exists for it yet").await;
    }
    // Names on both sides of the prefix that must not be listed.
    let _before = claimed(&leases, &ctx.name("ls."), "no row exists for it yet").await;
    let _after = claimed(&leases, &ctx.name("ls0"), "no row exists for it yet").await;

    let before = ctx.statements();
    let all = ok(leases.list(&prefix, 100).await, "list of the prefix");
    assert_eq!(ctx.statements() - before, 1, "list must be one statement");
    let names: Vec<&str> = all
        .iter()
        .map(|i| i.name.strip_prefix(prefix.as_str()).unwrap_or(&i.name))
        .collect();
    assert_eq!(
        names,
        ["B", "a", "a/x", "b", "c"],
        "list must return exactly the names with the prefix, ordered byte by byte"
    );
    assert!(all.iter().all(LeaseInfo::held), "{all:?}");

    let two = ok(leases.list(&prefix, 2).await, "list with a limit");
    let names: Vec<&str> = two
        .iter()
        .map(|i| i.name.strip_prefix(prefix.as_str()).unwrap_or(&i.name))
        .collect();
    assert_eq!(
        names,
        ["B", "a"],
        "list must return at most `limit` rows, the first ones"
    );

    let none = ok(
        leases.list(&ctx.name("nothing-here/"), 10).await,
        "list of an unused prefix",
    );
    assert!(none.is_empty(), "no name has that prefix: {none:?}");
}
