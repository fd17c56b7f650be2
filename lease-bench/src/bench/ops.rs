//! The operations measured, one function each: the operation through
//! `lease-core` and the same statements written by hand, each over the same
//! time, beside the `SELECT 1` measured at the same concurrency.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use dblease::{CancellationToken, Handle, LeaseContext, Token, UtcMillis};

use super::capability;
use super::cell::cell;
use super::table::{Row, print_rows, sort_rows};
use super::target::{Params, Raw, Target, Work};
use super::trips::Trips;
use super::{BoxError, BoxResult, RENEW_ROWS};
use crate::stats::Summary;

/// One backend: every operation at every concurrency, the batch renewal
/// and the capabilities, then the table (markdown, on stdout).
pub(crate) async fn run_backend(
    target: Target,
    concurrency: &[usize],
    time: Duration,
    extra: &Extra,
    trips: Option<&Trips>,
) -> BoxResult<()> {
    let target = Arc::new(target);
    println!("\n### {} ({})\n", target.label, target.note);
    let mut rows = Vec::new();
    let slots = Arc::new(AtomicI64::new(1));
    // A warm-up, not measured: the first writes on a new SQLite file grow
    // its log (each commit extending the file costs several times one that
    // reuses it), and would land on whichever side ran first.
    let warm = time.min(Duration::from_secs(1));
    let select1_warm = select1(&target, 1, warm).await;
    drop(claim_release(&target, 1, warm, select1_warm).await);
    for &c in concurrency {
        let select1 = select1(&target, c, time).await;
        let claims = claim_release(&target, c, time, select1).await;
        let hand_claim = claims.first().and_then(|r| r.hand);
        rows.extend(claims);
        rows.extend(renew(&target, c, time, select1).await?);
        rows.extend(contended(&target, c, time, select1).await);
        let instants = instant(&target, c, time, select1, &slots).await;
        let hand_instant = instants.first().and_then(|r| r.hand);
        rows.extend(instants);
        rows.extend(guarded(&target, c, time, select1).await?);
        if extra.capabilities {
            rows.push(capability::lock_try_run(&target, c, time, select1, hand_claim).await);
        }
        if c == 1 {
            if extra.batch > 0 {
                rows.push(renew_many(&target, extra.batch, time, select1).await?);
            }
            if extra.capabilities {
                rows.push(capability::leader_handover(&target, time, select1, hand_claim).await?);
                if extra.leader_crash {
                    rows.push(capability::leader_failover(&target, select1).await?);
                }
                rows.push(
                    capability::scheduler_rounds(
                        &target,
                        extra.scheduler_jobs,
                        time,
                        select1,
                        hand_instant,
                    )
                    .await?,
                );
            }
        }
    }
    sort_rows(&mut rows);
    if let Some(trips) = trips {
        for row in &mut rows {
            row.trips = trips.of(&row.op);
        }
    }
    print_rows(&rows);
    target.cleanup().await;
    Ok(())
}

/// The rows beyond the single operations.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Extra {
    /// The leases of one `renew_many` call; 0: no batch row.
    pub(crate) batch: usize,
    /// Whether to measure the lock, the leader and the scheduler.
    pub(crate) capabilities: bool,
    /// The scheduler's jobs, each `@every 1s`.
    pub(crate) scheduler_jobs: usize,
    /// Whether to measure the leader's failover after a crash (about a
    /// lease, 15 s, per backend).
    pub(crate) leader_crash: bool,
}

/// Claims `n` leases named `prefix:i`, 32 at a time.
pub(crate) async fn claim_many(
    target: &Arc<Target>,
    prefix: &str,
    n: usize,
) -> BoxResult<Vec<Handle>> {
    let gate = Arc::new(tokio::sync::Semaphore::new(32));
    let mut claims = tokio::task::JoinSet::new();
    for i in 0..n {
        let (t, gate) = (target.clone(), gate.clone());
        let name = format!("{prefix}:{i}");
        let _ = claims.spawn(async move {
            let _permit = gate.acquire_owned().await?;
            let h = t.leases.claim(&name).await?.ok_or("refused")?;
            Ok::<_, BoxError>(h)
        });
    }
    let mut handles = Vec::with_capacity(n);
    while let Some(claim) = claims.join_next().await {
        handles.push(claim??);
    }
    Ok(handles)
}

/// The `(name, holder)` pairs of one batch renewal.
type Batch = Arc<Vec<(String, String)>>;

/// A batch renewal: `LeaseStore::renew_many` of `batch` held leases per
/// call, beside the same batch statement written by hand. Two sets of
/// leases take turns, so a lease is renewed again only a batch later and
/// every renewal writes a later expiry. Latency is per batch; the ops/s
/// column counts leases renewed per second.
async fn renew_many(
    target: &Arc<Target>,
    batch: usize,
    time: Duration,
    select1: Summary,
) -> BoxResult<Row> {
    let handles = claim_many(target, "bench:batch", 2 * batch).await?;
    let sets: Arc<Vec<Batch>> = Arc::new(
        handles
            .chunks(batch)
            .map(|set| {
                Arc::new(
                    set.iter()
                        .map(|h| (h.name().to_owned(), h.token().expose().to_owned()))
                        .collect(),
                )
            })
            .collect(),
    );
    let lease_ms = i64::try_from(target.leases.timings().lease().as_millis())?;
    let turn = Arc::new(AtomicUsize::new(0));
    let (t, ss, tn) = (target.clone(), sets.clone(), turn.clone());
    let lease = cell(1, time, move |_| {
        let (t, ss) = (t.clone(), ss.clone());
        let set = ss.get(tn.fetch_add(1, Ordering::Relaxed) % 2).cloned();
        async move {
            let set = set.ok_or("no set")?;
            let pairs: Vec<(&str, Token<'_>)> = set
                .iter()
                .map(|(n, t)| (n.as_str(), Token::new(t)))
                .collect();
            let held = t.leases.store().renew_many(&pairs, lease_ms).await?;
            if held.iter().any(Option::is_none) {
                return Err("renew_many lost a lease".into());
            }
            Ok(())
        }
    })
    .await;
    let (t, ss, tn) = (target.clone(), sets.clone(), turn.clone());
    let hand = cell(1, time, move |_| {
        let (t, ss) = (t.clone(), ss.clone());
        let set = ss.get(tn.fetch_add(1, Ordering::Relaxed) % 2).cloned();
        async move {
            let set = set.ok_or("no set")?;
            let n = set.len();
            let renewed = t.raw.renew_many(t.backend, set).await?;
            if renewed != n {
                return Err(format!("hand batch renewed {renewed} of {n}").into());
            }
            Ok(())
        }
    })
    .await;
    for h in &handles {
        h.release().await?;
    }
    let per_lease = |mut s: Summary| {
        s.throughput *= batch as f64;
        s
    };
    Ok(Row::new(
        format!("renew_many, {batch}/call ¹"),
        1,
        per_lease(lease),
        per_lease(hand),
        select1,
    ))
}

/// The floor under everything: `SELECT 1` on the same pool.
async fn select1(target: &Arc<Target>, c: usize, time: Duration) -> Summary {
    let t = target.clone();
    cell(c, time, move |w| {
        let t = t.clone();
        async move { t.raw.exec(w, "SELECT 1", Params::None).await.map(drop) }
    })
    .await
}

/// One claim + release of worker `w`'s own name through `lease-core`.
pub(crate) async fn lease_claim_release(t: &Target, w: usize) -> BoxResult<()> {
    let h = t
        .leases
        .claim(&format!("bench:distinct:{w}"))
        .await?
        .ok_or("refused")?;
    h.release().await?;
    Ok(())
}

/// One claim + release of worker `w`'s own name by hand, on `raw`.
pub(crate) async fn hand_claim_release(t: &Target, raw: &Raw, w: usize) -> BoxResult<()> {
    let name = format!("bench:distinct:{w}");
    let holder = format!("hand-{w}");
    let n = raw
        .exec(
            w,
            &t.sql.claim,
            Params::Three(holder.clone(), "bench".into(), name.clone()),
        )
        .await?;
    if n != 1 {
        return Err("hand claim refused".into());
    }
    let _ = raw
        .exec(w, &t.sql.release, Params::Two(name, holder))
        .await?;
    Ok(())
}

/// The contended name.
const CONTENDED: &str = "bench:contended";

/// One claim of the contended name through `lease-core`, released at once
/// when won; whether it was.
pub(crate) async fn lease_contended(t: &Target) -> BoxResult<bool> {
    match t.leases.claim(CONTENDED).await? {
        Some(h) => {
            h.release().await?;
            Ok(true)
        }
        None => Ok(false),
    }
}

/// One claim of the contended name by hand on `raw`, released at once when
/// won; whether it was.
pub(crate) async fn hand_contended(t: &Target, raw: &Raw, w: usize) -> BoxResult<bool> {
    let holder = format!("hand-{w}");
    let name = CONTENDED.to_owned();
    let n = raw
        .exec(
            w,
            &t.sql.claim,
            Params::Three(holder.clone(), "bench".into(), name.clone()),
        )
        .await?;
    if n == 1 {
        let _ = raw
            .exec(w, &t.sql.release, Params::Two(name, holder))
            .await?;
    }
    Ok(n == 1)
}

/// One instant claim + finish of worker `w`'s job at `slot` through
/// `lease-core`.
pub(crate) async fn lease_instant(t: &Target, w: usize, slot: i64) -> BoxResult<()> {
    let h = t
        .leases
        .claim_instant(&format!("bench:job:{w}"), UtcMillis::from_millis(slot))
        .await?
        .ok_or("instant refused")?;
    h.finish(UtcMillis::from_millis(slot)).await?;
    Ok(())
}

/// One instant claim + finish of worker `w`'s job at `slot` by hand on `raw`.
pub(crate) async fn hand_instant(t: &Target, raw: &Raw, w: usize, slot: i64) -> BoxResult<()> {
    let name = format!("bench:job:{w}");
    let holder = format!("hand-{w}");
    let n = raw
        .exec(
            w,
            &t.sql.instant_claim,
            Params::Slot(holder.clone(), "bench".into(), slot, name.clone()),
        )
        .await?;
    if n != 1 {
        return Err("hand instant claim refused".into());
    }
    let _ = raw
        .exec(w, &t.sql.finish, Params::Two(name, holder))
        .await?;
    Ok(())
}

/// One renewal of `h` by hand on `raw`, for worker `w`.
pub(crate) async fn hand_renew(t: &Target, raw: &Raw, w: usize, h: &Handle) -> BoxResult<()> {
    // Not checked: without CLIENT_FOUND_ROWS, MySQL counts a renewal in
    // the same millisecond as changing nothing.
    let _ = raw
        .exec(
            w,
            &t.sql.renew,
            Params::Two(h.name().to_owned(), h.token().expose().to_owned()),
        )
        .await?;
    Ok(())
}

/// Claim + release of distinct names, one per worker, beside each floor.
async fn claim_release(
    target: &Arc<Target>,
    c: usize,
    time: Duration,
    select1: Summary,
) -> Vec<Row> {
    let t = target.clone();
    let lease = cell(c, time, move |w| {
        let t = t.clone();
        async move { lease_claim_release(&t, w).await }
    })
    .await;
    let mut rows = Vec::new();
    for (i, mark) in floor_marks(target) {
        let t = target.clone();
        let hand = cell(c, time, move |w| {
            let t = t.clone();
            async move { hand_claim_release(&t, floor(&t, i), w).await }
        })
        .await;
        rows.push(Row::new(
            format!("claim + release{mark}"),
            c,
            lease,
            hand,
            select1,
        ));
    }
    rows
}

/// The floors' indices in [`Target::floors`] and their marks.
fn floor_marks(target: &Target) -> Vec<(usize, &'static str)> {
    target
        .floors()
        .into_iter()
        .enumerate()
        .map(|(i, (_, mark))| (i, mark))
        .collect()
}

/// Floor `i` of `t` (the first when out of range).
fn floor(t: &Target, i: usize) -> &Raw {
    let floors = t.floors();
    floors
        .get(i)
        .or(floors.first())
        .map_or(&t.raw, |(raw, _)| raw)
}

/// Renew: each worker cycles over [`RENEW_ROWS`] leases of its own, so that
/// a row is renewed again only after the others (milliseconds later): a
/// second renewal of one row in the same millisecond writes the same expiry,
/// which SQLite and MariaDB do not write at all, and would measure nothing.
async fn renew(
    target: &Arc<Target>,
    c: usize,
    time: Duration,
    select1: Summary,
) -> BoxResult<Vec<Row>> {
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
    let mut rows = Vec::new();
    for (f, mark) in floor_marks(target) {
        let t = target.clone();
        let hs = handles.clone();
        let ts = turns.clone();
        let hand = cell(c, time, move |w| {
            let t = t.clone();
            let hs = hs.clone();
            let i = next(&ts, w);
            async move {
                let h = hs.get(i).ok_or("no handle")?;
                hand_renew(&t, floor(&t, f), w, h).await
            }
        })
        .await;
        rows.push(Row::new(format!("renew{mark}"), c, lease, hand, select1));
    }
    for h in handles.iter() {
        h.release().await?;
    }
    Ok(rows)
}

/// A contended claim of one name, released at once when won; the wins
/// counted on each side.
async fn contended(target: &Arc<Target>, c: usize, time: Duration, select1: Summary) -> Vec<Row> {
    let t = target.clone();
    let won = Arc::new(AtomicUsize::new(0));
    let wins = won.clone();
    let lease = cell(c, time, move |_| {
        let t = t.clone();
        let wins = wins.clone();
        async move {
            if lease_contended(&t).await? {
                let _ = wins.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        }
    })
    .await;
    let lease_wins = per_second(won.load(Ordering::Relaxed), time);
    let mut rows = Vec::new();
    for (f, mark) in floor_marks(target) {
        let t = target.clone();
        let won = Arc::new(AtomicUsize::new(0));
        let wins = won.clone();
        let hand = cell(c, time, move |w| {
            let t = t.clone();
            let wins = wins.clone();
            async move {
                if hand_contended(&t, floor(&t, f), w).await? {
                    let _ = wins.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            }
        })
        .await;
        let mut row = Row::new(format!("contended claim{mark}"), c, lease, hand, select1);
        row.wins = Some((lease_wins, per_second(won.load(Ordering::Relaxed), time)));
        rows.push(row);
    }
    rows
}

/// `n` over `time`, per second.
fn per_second(n: usize, time: Duration) -> f64 {
    let secs = time.as_secs_f64();
    if secs > 0.0 { n as f64 / secs } else { 0.0 }
}

/// An instant claim + finish, each call a later instant (`slots`).
async fn instant(
    target: &Arc<Target>,
    c: usize,
    time: Duration,
    select1: Summary,
    slots: &Arc<AtomicI64>,
) -> Vec<Row> {
    let t = target.clone();
    let s = slots.clone();
    let lease = cell(c, time, move |w| {
        let t = t.clone();
        let slot = s.fetch_add(1, Ordering::SeqCst);
        async move { lease_instant(&t, w, slot).await }
    })
    .await;
    let mut rows = Vec::new();
    for (f, mark) in floor_marks(target) {
        let t = target.clone();
        let s = slots.clone();
        let hand = cell(c, time, move |w| {
            let t = t.clone();
            let slot = s.fetch_add(1, Ordering::SeqCst);
            async move { hand_instant(&t, floor(&t, f), w, slot).await }
        })
        .await;
        rows.push(Row::new(
            format!("instant claim + finish{mark}"),
            c,
            lease,
            hand,
            select1,
        ));
    }
    rows
}

/// The name of the rows of a guarded transaction whose work only reads.
pub(crate) const GUARDED_READ: &str = "guarded transaction, reads only";

/// A guarded transaction beside the same transaction unguarded: one
/// business `UPDATE`, then (what fencing costs a work that only reads: the
/// guard's row lock makes the transaction a writing one on PostgreSQL and
/// SQLite) one `SELECT`.
async fn guarded(
    target: &Arc<Target>,
    c: usize,
    time: Duration,
    select1: Summary,
) -> BoxResult<Vec<Row>> {
    let mut ctxs = Vec::new();
    for w in 0..c {
        let name = format!("bench:guard:{w}");
        let h = target.leases.claim(&name).await?.ok_or("refused")?;
        ctxs.push(LeaseContext::new(h, CancellationToken::new()));
    }
    let ctxs = Arc::new(ctxs);
    let mut rows = Vec::new();
    for (work, op) in [
        (Work::Write, "guarded transaction"),
        (Work::Read, GUARDED_READ),
    ] {
        let t = target.clone();
        let cs = ctxs.clone();
        let lease = cell(c, time, move |w| {
            let t = t.clone();
            let cs = cs.clone();
            async move {
                let ctx = cs.get(w).ok_or("no context")?;
                t.guarded(ctx, w, work).await
            }
        })
        .await;
        for (f, mark) in floor_marks(target) {
            let t = target.clone();
            let hand = cell(c, time, move |w| {
                let t = t.clone();
                async move { t.unguarded(floor(&t, f), w, work).await }
            })
            .await;
            rows.push(Row::new(format!("{op}{mark}"), c, lease, hand, select1));
        }
    }
    for ctx in ctxs.iter() {
        ctx.handle().release().await?;
    }
    Ok(rows)
}
