//! The operations measured, one function each: the operation through
//! `lease-core` and the same statements written by hand, each over the same
//! time, beside the `SELECT 1` measured at the same concurrency.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use dblease::{CancellationToken, LeaseContext, UtcMillis};

use super::cell::cell;
use super::table::{Row, print_rows, sort_rows};
use super::target::{Guard, Params, Target};
use super::{BoxResult, RENEW_ROWS};
use crate::stats::Summary;

/// One backend: every operation at every concurrency, then the table.
pub(crate) async fn run_backend(
    target: Target,
    concurrency: &[usize],
    time: Duration,
) -> BoxResult<()> {
    let target = Arc::new(target);
    println!("\n## {} ({})\n", target.backend.label(), target.note);
    let mut rows = Vec::new();
    let slots = Arc::new(AtomicI64::new(1));
    for &c in concurrency {
        let select1 = select1(&target, c, time).await;
        rows.push(claim_release(&target, c, time, select1).await);
        rows.push(renew(&target, c, time, select1).await?);
        rows.push(contended(&target, c, time, select1).await);
        rows.push(instant(&target, c, time, select1, &slots).await);
        rows.push(guarded(&target, c, time, select1).await?);
    }
    sort_rows(&mut rows);
    print_rows(&rows);
    target.cleanup().await;
    Ok(())
}

/// The floor under everything: `SELECT 1` on the same pool.
async fn select1(target: &Arc<Target>, c: usize, time: Duration) -> Summary {
    let t = target.clone();
    cell(c, time, move |_| {
        let t = t.clone();
        async move { t.exec("SELECT 1", Params::None).await.map(drop) }
    })
    .await
}

/// Claim + release of distinct names, one per worker.
async fn claim_release(target: &Arc<Target>, c: usize, time: Duration, select1: Summary) -> Row {
    let t = target.clone();
    let lease = cell(c, time, move |w| {
        let t = t.clone();
        async move {
            let name = format!("bench:distinct:{w}");
            let h = t.leases.claim(&name).await?.ok_or("refused")?;
            h.release().await?;
            Ok(())
        }
    })
    .await;
    let t = target.clone();
    let hand = cell(c, time, move |w| {
        let t = t.clone();
        async move {
            let name = format!("bench:distinct:{w}");
            let holder = format!("hand-{w}");
            let n = t
                .exec(
                    &t.sql.claim,
                    Params::Three(holder.clone(), "bench".into(), name.clone()),
                )
                .await?;
            if n != 1 {
                return Err("hand claim refused".into());
            }
            t.exec(&t.sql.release, Params::Two(name, holder)).await?;
            Ok(())
        }
    })
    .await;
    Row {
        op: "claim + release",
        c,
        lease: Some(lease),
        hand: Some(hand),
        select1,
        note: "",
    }
}

/// Renew: each worker cycles over [`RENEW_ROWS`] leases of its own, so that
/// a row is renewed again only after the others (milliseconds later): a
/// second renewal of one row in the same millisecond writes the same expiry,
/// which SQLite and MariaDB do not write at all, and would measure nothing.
async fn renew(target: &Arc<Target>, c: usize, time: Duration, select1: Summary) -> BoxResult<Row> {
    let mut handles = Vec::new();
    for w in 0..c {
        for r in 0..RENEW_ROWS {
            let name = format!("bench:renew:{w}:{r}");
            handles.push(target.leases.claim(&name).await?.ok_or("refused")?);
        }
    }
    let handles = Arc::new(handles);
    let turns: Arc<Vec<AtomicUsize>> = Arc::new((0..c).map(|_| AtomicUsize::new(0)).collect());
    let next = move |turns: &[AtomicUsize], w: usize| -> usize {
        let turn = turns
            .get(w)
            .map_or(0, |t| t.fetch_add(1, Ordering::Relaxed));
        w * RENEW_ROWS + turn % RENEW_ROWS
    };
    let hs = handles.clone();
    let ts = turns.clone();
    let lease = cell(c, time, move |w| {
        let hs = hs.clone();
        let i = next(&ts, w);
        async move {
            hs.get(i).ok_or("no handle")?.renew().await?;
            Ok(())
        }
    })
    .await;
    let t = target.clone();
    let hs = handles.clone();
    let ts = turns.clone();
    let hand = cell(c, time, move |w| {
        let t = t.clone();
        let hs = hs.clone();
        let i = next(&ts, w);
        async move {
            let h = hs.get(i).ok_or("no handle")?;
            // Not checked: without CLIENT_FOUND_ROWS, MySQL counts a
            // renewal in the same millisecond as changing nothing.
            t.exec(
                &t.sql.renew,
                Params::Two(h.name().to_owned(), h.holder().to_owned()),
            )
            .await?;
            Ok(())
        }
    })
    .await;
    for h in handles.iter() {
        h.release().await?;
    }
    Ok(Row {
        op: "renew",
        c,
        lease: Some(lease),
        hand: Some(hand),
        select1,
        note: "",
    })
}

/// A contended claim of one name, released at once when won.
async fn contended(target: &Arc<Target>, c: usize, time: Duration, select1: Summary) -> Row {
    let t = target.clone();
    let lease = cell(c, time, move |_| {
        let t = t.clone();
        async move {
            if let Some(h) = t.leases.claim("bench:contended").await? {
                h.release().await?;
            }
            Ok(())
        }
    })
    .await;
    let t = target.clone();
    let hand = cell(c, time, move |w| {
        let t = t.clone();
        async move {
            let holder = format!("hand-{w}");
            let name = "bench:contended".to_owned();
            let n = t
                .exec(
                    &t.sql.claim,
                    Params::Three(holder.clone(), "bench".into(), name.clone()),
                )
                .await?;
            if n == 1 {
                t.exec(&t.sql.release, Params::Two(name, holder)).await?;
            }
            Ok(())
        }
    })
    .await;
    Row {
        op: "contended claim",
        c,
        lease: Some(lease),
        hand: Some(hand),
        select1,
        note: "",
    }
}

/// An instant claim + finish, each call a later instant (`slots`).
async fn instant(
    target: &Arc<Target>,
    c: usize,
    time: Duration,
    select1: Summary,
    slots: &Arc<AtomicI64>,
) -> Row {
    let t = target.clone();
    let s = slots.clone();
    let lease = cell(c, time, move |w| {
        let t = t.clone();
        let slot = s.fetch_add(1, Ordering::SeqCst);
        async move {
            let name = format!("bench:job:{w}");
            let h = t
                .leases
                .claim_slot(&name, UtcMillis::from_millis(slot))
                .await?
                .ok_or("instant refused")?;
            h.finish(UtcMillis::from_millis(slot)).await?;
            Ok(())
        }
    })
    .await;
    let t = target.clone();
    let s = slots.clone();
    let hand = cell(c, time, move |w| {
        let t = t.clone();
        let slot = s.fetch_add(1, Ordering::SeqCst);
        async move {
            let name = format!("bench:job:{w}");
            let holder = format!("hand-{w}");
            let n = t
                .exec(
                    &t.sql.slot_claim,
                    Params::Slot(holder.clone(), "bench".into(), slot, name.clone()),
                )
                .await?;
            if n != 1 {
                return Err("hand instant claim refused".into());
            }
            t.exec(&t.sql.finish, Params::Two(name, holder)).await?;
            Ok(())
        }
    })
    .await;
    Row {
        op: "instant claim + finish",
        c,
        lease: Some(lease),
        hand: Some(hand),
        select1,
        note: "",
    }
}

/// A guarded transaction (one business `UPDATE`) beside the same
/// transaction unguarded; not measured on SQLite.
async fn guarded(
    target: &Arc<Target>,
    c: usize,
    time: Duration,
    select1: Summary,
) -> BoxResult<Row> {
    if matches!(target.guard, Guard::None) {
        return Ok(Row {
            op: "guarded transaction",
            c,
            lease: None,
            hand: None,
            select1,
            note: "not measured on SQLite",
        });
    }
    let mut ctxs = Vec::new();
    for w in 0..c {
        let name = format!("bench:guard:{w}");
        let h = target.leases.claim(&name).await?.ok_or("refused")?;
        ctxs.push(LeaseContext::new(h, CancellationToken::new()));
    }
    let ctxs = Arc::new(ctxs);
    let t = target.clone();
    let cs = ctxs.clone();
    let lease = cell(c, time, move |w| {
        let t = t.clone();
        let cs = cs.clone();
        async move {
            let ctx = cs.get(w).ok_or("no context")?;
            t.guarded_update(ctx, w).await
        }
    })
    .await;
    let t = target.clone();
    let hand = cell(c, time, move |w| {
        let t = t.clone();
        async move { t.unguarded_update(w).await }
    })
    .await;
    for ctx in ctxs.iter() {
        ctx.handle().release().await?;
    }
    Ok(Row {
        op: "guarded transaction",
        c,
        lease: Some(lease),
        hand: Some(hand),
        select1,
        note: "",
    })
}
