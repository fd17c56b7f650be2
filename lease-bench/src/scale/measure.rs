//! One measured run: claim the leases and hold them, measure their renewals
//! over the window, report, release them.

use std::sync::Arc;
use std::time::Duration;

use dblease::{CancellationToken, Handle, Holder, Leases};
use tokio::sync::Semaphore;
use tokio::time::{Instant, sleep};

use super::durations::RenewalDurations;
use super::figures::{Figures, report};
use super::meter::{Meter, Sample, rss};
use super::recording::Recording;
use super::{BoxError, BoxResult};
use crate::stats::{Latency, Summary};

/// What a run measures with, and how many leases for how long.
pub(crate) struct Run<'a> {
    pub(crate) leases: &'a Leases,
    pub(crate) recording: &'a Recording,
    pub(crate) meter: &'a Meter,
    pub(crate) n: usize,
    pub(crate) seconds: u64,
    pub(crate) concurrency: usize,
    pub(crate) figures: &'a Figures,
}

/// A held lease: its handle and its renewal task.
type Held = Vec<(Handle, Holder)>;

/// What the window saw: the costs at its start and end, and the database's
/// view sampled every 5 s.
struct Window {
    a: Sample,
    b: Sample,
    /// The least time left on any held lease, by the database's clock, ms.
    least_left: i64,
    /// PostgreSQL: the oldest snapshot another client held, s.
    oldest_snapshot: f64,
}

/// Claims `n` leases (`concurrency` at a time) and holds each one,
/// measures their renewals over `seconds`, then stops and releases them
/// all: whether none was lost and every one was renewed on time.
pub(crate) async fn hold_and_measure(run: &Run<'_>, label: &str) -> BoxResult<bool> {
    let timings = *run.leases.timings();
    let shutdown = CancellationToken::new();
    let rss_before = rss();
    // The renewals of the leases claimed first go on while the others are
    // claimed: they are measured too.
    run.recording.measure(true);
    let held = claim_all(run, label, &shutdown).await?;
    // Two renewal rounds for every lease before the window: the renewals
    // of the last leases claimed settle into their cadence.
    sleep(timings.renew() * 2).await;
    report_memory(run, rss_before, rss());
    let window = measure_window(run, &held).await?;
    let lost = held.iter().filter(|(h, _)| h.lost()).count();
    report(
        label,
        &window.a,
        &window.b,
        held.len(),
        held.len() as f64 / timings.renew().as_secs_f64(),
        run.figures,
    );
    let (late, on_time) = report_renewals(run, &window)?;
    report_database(run, &window, lost);
    release_all(run, held, &shutdown).await?;
    Ok(lost == 0 && late == 0 && on_time)
}

/// Claims the `n` leases, `concurrency` at a time, and holds each one
/// under `shutdown`; reports how long the claims took, and the renewals'
/// gaps meanwhile.
async fn claim_all(run: &Run<'_>, label: &str, shutdown: &CancellationToken) -> BoxResult<Held> {
    let Run {
        leases,
        recording,
        n,
        concurrency,
        figures,
        ..
    } = *run;
    let started = Instant::now();
    let gate = Arc::new(Semaphore::new(concurrency));
    let mut claims = Vec::with_capacity(n);
    for i in 0..n {
        let leases = leases.clone();
        let gate = gate.clone();
        let shutdown = shutdown.clone();
        claims.push(tokio::spawn(async move {
            let _permit = gate.acquire_owned().await?;
            let t = Instant::now();
            let handle = leases
                .claim(&format!("scale:{i}"))
                .await?
                .ok_or("a free name was refused")?;
            let holder = handle.hold(&shutdown);
            Ok::<_, BoxError>((handle, holder, t.elapsed()))
        }));
    }
    let mut held: Held = Vec::with_capacity(n);
    let mut latencies = Vec::with_capacity(n);
    for claim in claims {
        let (handle, holder, took) = claim.await??;
        held.push((handle, holder));
        latencies.push(took);
    }
    let claim_time = started.elapsed();
    let claimed = Summary::of(latencies, 0, claim_time);
    println!(
        "  {label}: claimed and holding {} leases in {:.1} s ({:.0} claims/s, {concurrency} in flight, p50 {}, p99 {})",
        held.len(),
        claim_time.as_secs_f64(),
        claimed.throughput,
        Latency(claimed.p50),
        Latency(claimed.p99)
    );
    figures.add(
        &format!("time to claim all ({concurrency} in flight)"),
        format!(
            "{:.1} s ({:.0} claims/s, p50 {})",
            claim_time.as_secs_f64(),
            claimed.throughput,
            Latency(claimed.p50)
        ),
    );
    let r = recording.lock();
    println!(
        "    meanwhile, gap between a lease's renewals: p50 {} ms, p99 {} ms, max {} ms ({} gaps), {} statements p99 {} ms",
        r.gaps.percentile(50.0),
        r.gaps.percentile(99.0),
        r.gaps.max,
        r.gaps.count,
        r.statements.count,
        r.statements.percentile(99.0),
    );
    drop(r);
    Ok(held)
}

/// Reports the resident memory per held lease, from before the claims to
/// now.
fn report_memory(run: &Run<'_>, before: Option<u64>, held: Option<u64>) {
    let (Some(before), Some(after)) = (before, held) else {
        return;
    };
    let n = run.n;
    println!(
        "    resident memory: {:.1} MiB before the claims, {:.1} MiB holding them: {:.2} KiB per held lease",
        before as f64 / 1048576.0,
        after as f64 / 1048576.0,
        after.saturating_sub(before) as f64 / 1024.0 / n as f64
    );
    run.figures.add(
        "resident memory per held lease",
        format!(
            "{:.2} KiB",
            after.saturating_sub(before) as f64 / 1024.0 / n as f64
        ),
    );
}

/// The measured window: samples the costs at its start and end, and the
/// database's view every 5 s, with a line on stderr each time (the report
/// is stdout).
async fn measure_window(run: &Run<'_>, held: &Held) -> BoxResult<Window> {
    let Run {
        recording,
        meter,
        seconds,
        ..
    } = *run;
    recording.measure(true);
    RenewalDurations::get().measure(true);
    let a = meter.sample(recording).await?;
    let mut least_left = i64::MAX;
    let mut oldest_snapshot = 0.0f64;
    let window_end = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < window_end {
        sleep(
            window_end
                .saturating_duration_since(Instant::now())
                .min(Duration::from_secs(5)),
        )
        .await;
        let lost = held.iter().filter(|(h, _)| h.lost()).count();
        let (in_table, left) = meter.least_left().await?;
        least_left = least_left.min(left);
        if let Some(age) = meter.oldest_other_snapshot().await? {
            oldest_snapshot = oldest_snapshot.max(age);
        }
        eprintln!(
            "    ... {:>3.0} s left in the window, {lost} of {} leases lost, {in_table} held in the table, least time left on one {left} ms",
            window_end
                .saturating_duration_since(Instant::now())
                .as_secs_f64(),
            held.len()
        );
    }
    let b = meter.sample(recording).await?;
    recording.measure(false);
    RenewalDurations::get().measure(false);
    Ok(Window {
        a,
        b,
        least_left,
        oldest_snapshot,
    })
}

/// Reports the renewals of the window: their durations (due → answered),
/// the gaps between a lease's renewals, the statements' latencies, the
/// batches. Returns how many renewals were late (not answered when the next
/// was due: a duration counts from the start of its attempt, when it was
/// due), and whether anything was measured at all.
fn report_renewals(run: &Run<'_>, window: &Window) -> BoxResult<(u64, bool)> {
    let Run {
        leases,
        recording,
        figures,
        ..
    } = *run;
    let renew_ms = u64::try_from(leases.timings().renew().as_millis())?;
    let durations = RenewalDurations::get().lock();
    println!(
        "    renewal duration (due -> answered):       p50 {} ms, p99 {} ms, max {} ms ({} renewals)",
        durations.percentile(50.0),
        durations.percentile(99.0),
        durations.max,
        durations.count
    );
    figures.add(
        "renewal duration, due → answered, p50 / p99 / max",
        format!(
            "{} / {} / {} ms",
            durations.percentile(50.0),
            durations.percentile(99.0),
            durations.max
        ),
    );
    let late = durations.above(renew_ms.saturating_sub(1));
    println!("    renewals not answered within their {renew_ms} ms interval: {late:>5}");
    figures.add(
        &format!("renewals not answered within their {renew_ms} ms interval"),
        format!("**{late}** of {}", durations.count),
    );
    let measured = durations.count > 0;
    drop(durations);
    let r = recording.lock();
    println!(
        "    gap between a lease's renewals:           p50 {} ms, p99 {} ms, max {} ms ({} gaps), {} over {} ms",
        r.gaps.percentile(50.0),
        r.gaps.percentile(99.0),
        r.gaps.max,
        r.gaps.count,
        r.gaps.above(renew_ms + renew_ms / 4),
        renew_ms + renew_ms / 4
    );
    figures.add(
        "gap between a lease's renewals p50 / p99 / max",
        format!(
            "{} / {} / {} ms",
            r.gaps.percentile(50.0),
            r.gaps.percentile(99.0),
            r.gaps.max
        ),
    );
    figures.add(
        "renewal statement p50 / p99 / max",
        format!(
            "{} / {} / {} ms",
            r.statements.percentile(50.0),
            r.statements.percentile(99.0),
            r.statements.max
        ),
    );
    println!(
        "    renewal statement latency:                p50 {} ms, p99 {} ms, max {} ms ({} statements)",
        r.statements.percentile(50.0),
        r.statements.percentile(99.0),
        r.statements.max,
        r.statements.count
    );
    if r.batches > 0 {
        let secs = (window.b.at - window.a.at).as_secs_f64();
        println!(
            "    batches: {} ({:.1} /s), {:.0} renewals each on average, {} at most, up to {} in flight at once",
            r.batches,
            r.batches as f64 / secs,
            r.batch_rows as f64 / r.batches as f64,
            r.max_batch,
            r.max_in_flight
        );
        figures.add(
            "batches",
            format!(
                "{:.1} /s, {:.0} renewals each (≤ {}), ≤ {} in flight",
                r.batches as f64 / secs,
                r.batch_rows as f64 / r.batches as f64,
                r.max_batch,
                r.max_in_flight
            ),
        );
    }
    Ok((late, measured && r.gaps.count > 0))
}

/// Reports the database's view of the window: the least time left on a
/// lease, (PostgreSQL) the oldest snapshot of another client, and the
/// leases lost.
fn report_database(run: &Run<'_>, window: &Window, lost: usize) {
    let Run {
        leases,
        meter,
        figures,
        ..
    } = *run;
    let timings = leases.timings();
    let Window {
        least_left,
        oldest_snapshot,
        ..
    } = *window;
    println!(
        "    least time left on a lease (database):    {least_left:>9} ms  (lease {} ms)",
        timings.lease().as_millis()
    );
    if matches!(meter, Meter::Postgres { .. }) {
        println!(
            "    oldest snapshot held by another client:   {oldest_snapshot:>9.0} s  (sampled every 5 s; it holds back HOT pruning and VACUUM)"
        );
    }
    figures.add(
        "least time left on a lease (database)",
        format!(
            "{:.2} s of {}",
            least_left as f64 / 1000.0,
            timings.lease().as_secs_f64()
        ),
    );
    println!("    leases lost meanwhile:                    {lost:>9}");
    figures.add("leases lost", format!("**{lost}**"));
}

/// Stops the holders and releases every lease not lost, `concurrency` at a
/// time.
async fn release_all(run: &Run<'_>, held: Held, shutdown: &CancellationToken) -> BoxResult<()> {
    let released_at = Instant::now();
    shutdown.cancel();
    let gate = Arc::new(Semaphore::new(run.concurrency));
    let mut releases = Vec::with_capacity(held.len());
    for (handle, holder) in held {
        let gate = gate.clone();
        releases.push(tokio::spawn(async move {
            let _permit = gate.acquire_owned().await?;
            holder.stop().await;
            if !handle.lost() {
                handle.release().await?;
            }
            Ok::<_, BoxError>(())
        }));
    }
    for release in releases {
        release.await??;
    }
    println!(
        "    released them all in {:.1} s",
        released_at.elapsed().as_secs_f64()
    );
    Ok(())
}
