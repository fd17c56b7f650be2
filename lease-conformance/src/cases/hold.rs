//! hold: keeping a lease by renewing it on a task of its own.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use lease_core::{
    BoxError, EndCause, ForwardingStore, LeaseStore, Leases, LostCause, Op, Renewed, Timings, Token,
};
use tokio::sync::RwLock;
use tokio::time::{Instant, sleep, timeout};
use tokio_util::sync::CancellationToken;

use super::{claimed, ok};
use crate::Ctx;
use crate::intercept::{Intercept, Intercepted};

/// [`crate::held_timings`]: lease 4 s, renew every 250 ms, local deadline 2 s.
fn hold_timings() -> Timings {
    crate::held_timings()
}

/// What a context that ended too early tells a backend author.
fn early_end(cause: Option<EndCause>) -> String {
    match cause {
        Some(EndCause::Lost(LostCause::NotHolder)) => {
            "a renewal reported the lease gone although nobody touched it: renew must match \
             name, holder and expires_at_ms > now, set expires_at_ms = now + lease_ms, and \
             count matched rows, not changed rows"
                .to_owned()
        }
        Some(EndCause::Lost(LostCause::DeadlineExceeded)) => crate::deadline_note(&hold_timings()),
        _ => "the context ended for a reason the case did not cause".to_owned(),
    }
}

/// Holding keeps the name well past the lease duration: the renewals on the
/// holder's own task refuse every rival for three leases, and leave the term
/// unchanged.
pub async fn hold_keeps_name_well_past_lease_duration(ctx: Ctx) {
    let timings = hold_timings();
    let leases = ctx.leases_with(timings);
    let rival = ctx.leases();
    let name = ctx.name("held");
    let h = claimed(&leases, &name, "no row exists for it yet").await;
    let holder = h.hold(&CancellationToken::new());
    let start = Instant::now();
    while start.elapsed() < timings.lease() * 3 {
        sleep(Duration::from_millis(150)).await;
        let context = holder.context();
        assert!(
            !context.is_cancelled(),
            "the holder's context ended {:?} after the claim ({:?}): {}",
            start.elapsed(),
            context.cause(),
            early_end(context.cause())
        );
        assert!(
            ok(rival.claim(&name).await, "a rival's claim").is_none(),
            "a rival claimed the name {:?} after the claim, although its holder renews a \
             {:?} lease every {:?} (renew must set expires_at_ms = now + lease_ms)",
            start.elapsed(),
            timings.lease(),
            timings.renew()
        );
    }
    holder.stop().await;
    assert!(
        !h.lost(),
        "the handle is marked lost, but no renewal lost it"
    );
    assert_eq!(
        ok(h.verify().await, "verify after three leases of renewals"),
        1,
        "renewals must not move the term"
    );
    ok(h.release().await, "release after the renewals stopped");
}

/// A store whose renewals wait while a takeover is planted: the case holds
/// the gate's write side around the release and the rival's claim, so no
/// renewal of the holder lands between the two (where it would find the
/// name released, and lose it for a reason other than the takeover).
#[derive(Debug)]
struct Gated {
    inner: Arc<dyn LeaseStore>,
    gate: Arc<RwLock<()>>,
}

#[async_trait]
impl ForwardingStore for Gated {
    fn inner(&self) -> &dyn LeaseStore {
        &*self.inner
    }

    async fn renew(
        &self,
        name: &str,
        token: Token<'_>,
        lease_ms: i64,
    ) -> Result<Option<Renewed>, BoxError> {
        let _open = self.gate.read().await;
        self.inner.renew(name, token, lease_ms).await
    }

    async fn renew_many(
        &self,
        leases: &[(&str, Token<'_>)],
        lease_ms: i64,
    ) -> Result<Vec<Option<Renewed>>, BoxError> {
        let _open = self.gate.read().await;
        self.inner.renew_many(leases, lease_ms).await
    }
}

/// A takeover behind the holder's back (the row released with the holder's
/// token, then claimed by a rival) ends the holder's context at its next
/// renewal, as no longer this holder's, and leaves the rival holding.
pub async fn hold_ends_context_as_not_this_holders_after_takeover(ctx: Ctx) {
    let timings = hold_timings();
    let gate = Arc::new(RwLock::new(()));
    let gated = Gated {
        inner: ctx.store(),
        gate: gate.clone(),
    };
    let leases = Leases::from_arc(Arc::new(gated))
        .with_timings_unchecked(timings)
        .with_instance("conformance-taken-behind-its-back")
        .unwrap_or_else(|e| panic!("{e}"));
    let rival = ctx.leases();
    let name = ctx.name("taken-behind-its-back");
    let h = claimed(&leases, &name, "no row exists for it yet").await;
    let holder = h.hold(&CancellationToken::new());
    sleep(Duration::from_millis(250)).await;
    let context = holder.context().clone();
    assert!(
        !context.is_cancelled(),
        "the holder's context ended before the takeover ({:?}): {}",
        context.cause(),
        early_end(context.cause())
    );

    // The takeover, with the holder's renewals held back until it is whole.
    let planting = gate.write().await;
    let released = ctx.store().release(&name, h.token()).await;
    assert!(
        matches!(released, Ok(true)),
        "release with the holder's token, while it held the name, must report it had the \
         name to give (got {released:?})"
    );
    let successor = claimed(&rival, &name, "it was just released").await;
    drop(planting);

    // The next renewal is due within 250 ms, and answers within its 1 s
    // bound; 5 s leave room for a loaded machine.
    let ended = timeout(Duration::from_millis(5_000), context.cancelled()).await;
    assert!(
        ended.is_ok(),
        "the holder's context did not end within 5 s of a takeover: its renewals kept \
         succeeding on a name held by another (renew must match the holder token and \
         report 0 matched rows as lost)"
    );
    assert_eq!(
        context.cause(),
        Some(EndCause::Lost(LostCause::NotHolder)),
        "after a takeover the holder's context must end as no longer this holder's: the \
         renewal must answer, reporting 0 matched rows, not fail"
    );
    assert!(h.lost(), "the handle must be marked lost with the loss");
    holder.stop().await;
    assert_eq!(
        ok(successor.verify().await, "verify by the successor"),
        2,
        "the old holder's renewals must leave the successor holding, at the next term"
    );
}

/// With the database out of reach (every renewal hangs), the holder steps
/// down at its local deadline, while the database still refuses every rival;
/// the name is free once the lease has run out.
pub async fn hold_steps_down_at_deadline_before_name_is_free(ctx: Ctx) {
    let timings = hold_timings();
    let unreachable = Arc::new(Intercepted::new(ctx.store(), Unreachable::default()));
    let leases = Leases::from_arc(unreachable.clone())
        .with_timings_unchecked(timings)
        .with_instance("conformance-unreachable-holder")
        .unwrap_or_else(|e| panic!("{e}"));
    let rival = ctx.leases();
    let name = ctx.name("out-of-reach");
    let h = claimed(&leases, &name, "no row exists for it yet").await;
    let holder = h.hold(&CancellationToken::new());
    // Renew for longer than lease - deadline, so that only the renewals, not
    // the claim, can keep the name held past the holder's deadline.
    sleep(timings.lease() - timings.deadline() + Duration::from_millis(300)).await;
    let context = holder.context().clone();
    assert!(
        !context.is_cancelled(),
        "the holder's context ended before the database went out of reach ({:?}): {}",
        context.cause(),
        early_end(context.cause())
    );

    unreachable.hook().cut();
    let cut = Instant::now();
    let ended = timeout(timings.deadline() * 2, context.cancelled()).await;
    assert!(
        ended.is_ok(),
        "the holder's context did not end within twice the local deadline of the database \
         going out of reach"
    );
    let stepped_down = cut.elapsed();
    assert_eq!(
        context.cause(),
        Some(EndCause::Lost(LostCause::DeadlineExceeded)),
        "a holder that cannot reach the database must step down at its local deadline"
    );
    assert!(h.lost(), "the handle must be marked lost with the loss");
    assert!(
        ok(
            rival.claim(&name).await,
            "a rival's claim as the holder stepped down"
        )
        .is_none(),
        "the name was free as soon as the holder stepped down at its {:?} local deadline \
         ({stepped_down:?} after the cut), although its last renewal gave it a {:?} lease: \
         renew must set expires_at_ms = now + lease_ms by the database clock",
        timings.deadline(),
        timings.lease()
    );
    holder.stop().await;

    let freed = timeout(timings.lease() * 2, async {
        loop {
            if let Some(successor) = ok(rival.claim(&name).await, "a rival's claim") {
                return successor;
            }
            sleep(Duration::from_millis(25)).await;
        }
    })
    .await;
    let successor = freed.unwrap_or_else(|_| {
        panic!(
            "the name was still held two leases after its holder's last renewal: claim must \
             take a name whose expires_at_ms <= now"
        )
    });
    assert_eq!(
        successor.term(),
        2,
        "the successor's claim must move the term"
    );
}

/// Lets every call through to the store under test, except renewals once
/// [`cut`](Unreachable::cut): they then hang, as against a database that no
/// longer answers.
#[derive(Debug, Default)]
struct Unreachable {
    cut: AtomicBool,
}

impl Unreachable {
    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
    }
}

#[async_trait]
impl Intercept for Unreachable {
    async fn before(&self, op: Op) -> Result<(), BoxError> {
        if op == Op::Renew && self.cut.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        Ok(())
    }
}

/// `renew_many` answers for each lease exactly as `renew` would: held leases
/// are extended, a released lease, a lease taken over and a name never
/// claimed are not.
pub async fn renew_many_answers_each_lease_like_renew(ctx: Ctx) {
    // Leases of 4 s: long enough that the five claims and two releases
    // before the batch fit in them on a loaded machine, short enough to
    // outwait after it.
    let short_timings = hold_timings();
    let short = ctx.leases_with(short_timings);
    let rival = ctx.leases();
    let (a, b, released, taken, never) = (
        ctx.name("a"),
        ctx.name("b"),
        ctx.name("released"),
        ctx.name("taken"),
        ctx.name("never"),
    );
    let ha = claimed(&short, &a, "no row exists for it yet").await;
    let hb = claimed(&short, &b, "no row exists for it yet").await;
    let hr = claimed(&short, &released, "no row exists for it yet").await;
    ok(hr.release().await, "release");
    let ht = claimed(&short, &taken, "no row exists for it yet").await;
    ok(ht.release().await, "release");
    let _successor = claimed(&rival, &taken, "it was released").await;
    let batch = [
        (a.as_str(), ha.token()),
        (released.as_str(), hr.token()),
        (b.as_str(), hb.token()),
        (taken.as_str(), ht.token()),
        (
            never.as_str(),
            Token::new("0123456789abcdef0123456789abcdef"),
        ),
    ];
    let store = ctx.store();
    let lease_ms = rival.timings().lease_ms();
    let before = super::db_now(&rival).await.as_millis();
    let answered = match store.renew_many(&batch, lease_ms).await {
        Ok(held) => held,
        Err(e) => panic!("renew_many failed: {e}"),
    };
    let after = super::db_now(&rival).await.as_millis();
    let held: Vec<bool> = answered.iter().map(Option::is_some).collect();
    assert_eq!(
        held,
        [true, false, true, false, false],
        "renew_many must answer, in order, whether each (name, holder) was still held: \
         match name, holder and expires_at_ms > now, as renew does"
    );
    for renewed in answered.iter().flatten() {
        let now = renewed.now_ms;
        assert!(
            !renewed.resign,
            "renew_many answered a resign request for a lease nobody asked to resign \
             (resign_term must equal the term only after request_resign at that term)"
        );
        assert!(
            (before..=after).contains(&now),
            "renew_many answered the database's now as {now}, outside the clock read before \
             ({before}) and after ({after}) the call: it must return the now its statement read"
        );
    }
    tokio::time::sleep(short_timings.lease() + short_timings.lease() / 2).await;
    for (name, h) in [(&a, &ha), (&b, &hb)] {
        assert!(
            ok(rival.claim(name).await, "a rival's claim").is_none(),
            "{name:?} was free after its first lease although renew_many extended it by \
             {lease_ms} ms from the database's now"
        );
        let _ = ok(h.verify().await, "verify after renew_many");
    }
}

/// With renewal batching, holding many leases keeps every name, and a lease
/// lost behind its holder's back ends that holder's context alone.
pub async fn batched_renewals_keep_every_name_and_lose_only_the_lost(ctx: Ctx) {
    let timings = hold_timings();
    let leases = ctx.leases_with(timings).with_renewal_batching(true);
    let rival = ctx.leases();
    let parent = CancellationToken::new();
    let mut held = Vec::new();
    for i in 0..12 {
        let name = ctx.name(&format!("batched-{i}"));
        let h = claimed(&leases, &name, "no row exists for it yet").await;
        let holder = h.hold(&parent);
        held.push((name, h, holder));
    }
    // One lease given up behind its holder's back.
    let (_, gone, gone_holder) = held.remove(5);
    ok(gone.release().await, "release behind the holder's back");
    let start = Instant::now();
    while start.elapsed() < timings.lease() * 3 {
        sleep(Duration::from_millis(150)).await;
        for (name, _, holder) in &held {
            let context = holder.context();
            assert!(
                !context.is_cancelled(),
                "a batched holder of {name:?} lost its context {:?} after the claims ({:?}): {}",
                start.elapsed(),
                context.cause(),
                early_end(context.cause())
            );
        }
    }
    assert_eq!(
        gone_holder.context().cause(),
        Some(EndCause::Lost(LostCause::NotHolder)),
        "the lease released behind its holder's back must end its context as no longer \
         this holder's: renew_many must answer false for it"
    );
    assert!(gone.lost());
    for (name, h, holder) in held {
        assert!(
            ok(rival.claim(&name).await, "a rival's claim").is_none(),
            "a rival claimed {name:?} while its holder renewed it in batches"
        );
        holder.stop().await;
        ok(h.release().await, "release");
    }
    gone_holder.stop().await;
}
