//! The capabilities built on the lease, each beside its floor: the lock's
//! `try_run` of an empty body (floor: the hand-written claim + release),
//! the leader's hand-over and failover (floors: the hand-written claim, the
//! lease), and the scheduler's rounds (floor: the hand-written instant
//! claim + finish).

use std::sync::Arc;
use std::time::Duration;

use dblease::{CancellationToken, Leases};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::cell::cell;
use super::table::Row;
use super::target::Target;
use super::{BoxError, BoxResult};
use crate::stats::{Summary, ratio};

/// `Lock::try_run` of an empty body on a lock of each worker's own:
/// claim, the renewal task started and stopped, release.
pub(crate) async fn lock_try_run(
    target: &Arc<Target>,
    c: usize,
    time: Duration,
    select1: Summary,
    hand_claim_release: Option<Summary>,
) -> Row {
    let t = target.clone();
    let lease = cell(c, time, move |w| {
        let lock = t.leases.lock(&format!("bench:{w}"));
        async move {
            lock.try_run(|_ctx| async {})
                .await
                .map_err(|e| BoxError::from(e.to_string()))
        }
    })
    .await;
    Row::noted(
        "lock try_run, empty body".to_owned(),
        c,
        Some(lease),
        hand_claim_release,
        select1,
        String::new(),
    )
}

/// The campaign interval of the hand-over measurement: the successor's
/// next attempt comes within it, so it bounds the hand-over from above
/// (with the default 5 s + up to 1 s, the hand-over takes that long).
const CAMPAIGN: Duration = Duration::from_millis(10);

/// The leader's hand-over: a leader steps down (its shutdown cancelled:
/// the work ends, the renewals stop, the name is given back), and the time
/// until a follower campaigning every [`CAMPAIGN`] leads, sampled for
/// `time` (3 samples at least). Floor: the hand-written claim (+ release).
pub(crate) async fn leader_handover(
    target: &Arc<Target>,
    time: Duration,
    select1: Summary,
    hand_claim_release: Option<Summary>,
) -> BoxResult<Row> {
    let started = Instant::now();
    let mut samples = Vec::new();
    while samples.len() < 3 || started.elapsed() < time {
        samples.push(handover(&target.leases, false).await?);
    }
    let lease = Summary::of(samples, 0, started.elapsed());
    Ok(Row::noted(
        "leader hand-over ²".to_owned(),
        1,
        Some(lease),
        hand_claim_release,
        select1,
        "latency only".to_owned(),
    ))
}

/// The leader's failover after a crash: the leader's campaign is dropped
/// (its renewals stop, the name is not given back, as when the process is
/// killed), and the time until the follower leads. One sample, with the
/// default timings: its floor, by the protocol, is the lease (the name is
/// free only once it expired), plus up to one campaign interval.
pub(crate) async fn leader_failover(target: &Arc<Target>, select1: Summary) -> BoxResult<Row> {
    let started = Instant::now();
    let sample = handover(&target.leases, true).await?;
    let lease = Summary::of(vec![sample], 0, started.elapsed());
    let floor = target.leases.timings().lease();
    Ok(Row::noted(
        "leader failover, crash ³".to_owned(),
        1,
        Some(lease),
        None,
        select1,
        format!(
            "{} the {} s lease",
            ratio(sample.as_secs_f64(), floor.as_secs_f64()),
            floor.as_secs()
        ),
    ))
}

/// One hand-over: leader `a` leads, follower `b` campaigns; then `a`
/// steps down (or, with `crash`, its campaign is aborted), and the time
/// until `b` leads.
async fn handover(leases: &Leases, crash: bool) -> BoxResult<Duration> {
    let name = format!(
        "bench:{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos()
    );
    let (led, mut leading) = mpsc::unbounded_channel::<(char, Instant)>();
    let replicas = (
        leases.clone().with_instance("bench-a")?,
        leases.clone().with_instance("bench-b")?,
    );
    let start = |who: char, shutdown: &CancellationToken| {
        let led = led.clone();
        let leases = if who == 'a' { &replicas.0 } else { &replicas.1 };
        let leader = leases
            .leader(&name)
            .with_campaign_interval(CAMPAIGN, Duration::ZERO)
            .on_started_leading(move |_| {
                let _ = led.send((who, Instant::now()));
            });
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            leader
                .run(&shutdown, |ctx| async move { ctx.cancelled().await })
                .await
        })
    };
    let (stop_a, stop_b) = (CancellationToken::new(), CancellationToken::new());
    let a = start('a', &stop_a);
    match leading.recv().await {
        Some(('a', _)) => {}
        other => return Err(format!("leader a did not lead: {other:?}").into()),
    }
    let b = start('b', &stop_b);
    // Let b campaign (and be refused) a few times first.
    tokio::time::sleep(CAMPAIGN * 5).await;
    let stepped_down = Instant::now();
    if crash {
        a.abort();
    } else {
        stop_a.cancel();
    }
    let took = match leading.recv().await {
        Some(('b', at)) => at.saturating_duration_since(stepped_down),
        other => return Err(format!("leader b did not take over: {other:?}").into()),
    };
    stop_a.cancel();
    stop_b.cancel();
    if !crash {
        a.await??;
    }
    b.await??;
    Ok(took)
}

/// The scheduler's rounds: `jobs` jobs `@every 1s` (empty bodies) on one
/// replica for `time` (3 s at least: rounds come each second): rounds per second, and how late each round's body
/// started after its instant (the timer plus the instant claim). Floor:
/// the hand-written instant claim + finish at concurrency 1.
pub(crate) async fn scheduler_rounds(
    target: &Arc<Target>,
    jobs: usize,
    time: Duration,
    select1: Summary,
    hand_instant: Option<Summary>,
) -> BoxResult<Row> {
    let window = time.max(Duration::from_secs(3));
    let rounds = crate::rounds::run(target.leases.clone(), "bench-round", jobs, window).await?;
    let per_second = rounds.per_second();
    let mut lease = Summary::of(rounds.late, 0, rounds.elapsed);
    lease.throughput = per_second;
    Ok(Row::noted(
        format!("scheduler, {jobs} jobs/s ⁴"),
        1,
        Some(lease),
        hand_instant,
        select1,
        "rate set by the jobs".to_owned(),
    ))
}
