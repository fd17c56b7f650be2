//! The scheduler's rounds under load: `jobs` jobs `@every 1s` on one
//! replica for a while, each round one instant claim and one finish. Used
//! by the `scheduler` binary and by the benchmark's scheduler row.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dblease::scheduler::{Job, Round, Scheduler};
use lease_core::{BoxError, CancellationToken, Leases};

use crate::cpu::cpu_time;

/// What a run of the scheduler measured.
#[derive(Debug, Clone)]
pub struct Rounds {
    /// The rounds started over the window.
    pub rounds: usize,
    /// The rounds the schedule asked for over the window (`jobs` a second).
    pub expected: u64,
    /// The window.
    pub elapsed: Duration,
    /// How late each round's body started after its instant, sorted: the
    /// timer's wake-up plus the instant claim.
    pub late: Vec<Duration>,
    /// The process's CPU time over the window, where `/proc` tells it.
    pub cpu: Option<Duration>,
}

impl Rounds {
    /// Rounds per second over the window.
    #[must_use]
    pub fn per_second(&self) -> f64 {
        self.rounds as f64 / self.elapsed.as_secs_f64()
    }
}

/// Milliseconds since the epoch, by this host's clock (the instants are in
/// the same clock).
fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Runs `jobs` jobs named `prefix-i`, `@every 1s`, with empty bodies, on
/// `leases` for `window` after 2 s of start-up (catch-up reads, the first
/// sweep), and measures the rounds.
///
/// # Errors
///
/// A job the scheduler refuses, or the scheduler failing.
pub async fn run(
    leases: Leases,
    prefix: &str,
    jobs: usize,
    window: Duration,
) -> Result<Rounds, BoxError> {
    let late = Arc::new(Mutex::new(Vec::with_capacity(jobs * 4)));
    let mut builder = Scheduler::builder(leases);
    for i in 0..jobs {
        let late = late.clone();
        builder = builder.job(Job::new(
            format!("{prefix}-{i}"),
            "@every 1s",
            move |round: Round| {
                let ms = wall_ms() - round.instant().as_millis();
                late.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(Duration::from_millis(u64::try_from(ms).unwrap_or(0)));
                async { Ok(()) }
            },
        ));
    }
    let scheduler = builder.build()?;
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    let run = tokio::spawn(async move { scheduler.run(&token, Duration::from_secs(30)).await });
    tokio::time::sleep(Duration::from_secs(2)).await;
    late.lock().unwrap_or_else(PoisonError::into_inner).clear();
    let (cpu0, t0) = (cpu_time(None).ok(), std::time::Instant::now());
    tokio::time::sleep(window).await;
    let (cpu1, elapsed) = (cpu_time(None).ok(), t0.elapsed());
    let mut late = std::mem::take(&mut *late.lock().unwrap_or_else(PoisonError::into_inner));
    shutdown.cancel();
    run.await??;
    late.sort_unstable();
    Ok(Rounds {
        rounds: late.len(),
        expected: (jobs as f64 * window.as_secs_f64()).round() as u64,
        elapsed,
        late,
        cpu: cpu0.zip(cpu1).map(|(a, b)| b.saturating_sub(a)),
    })
}
