//! One cell of the table: an operation run by N workers for a while.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::BoxResult;
use crate::stats::{Latency, Summary};

/// Runs `op` on `workers` workers for `time`; each call gets its worker's
/// index.
pub async fn cell<F, Fut>(workers: usize, time: Duration, op: F) -> Summary
where
    F: Fn(usize) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = BoxResult<()>> + Send,
{
    let start = Instant::now();
    let end = start + time;
    let mut tasks = Vec::with_capacity(workers);
    for w in 0..workers {
        let op = op.clone();
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut errors = 0usize;
            let mut first_error = None;
            while Instant::now() < end {
                let t = Instant::now();
                match op(w).await {
                    Ok(()) => samples.push(t.elapsed()),
                    Err(e) => {
                        errors += 1;
                        let _ = first_error.get_or_insert_with(|| e.to_string());
                    }
                }
            }
            (samples, errors, first_error)
        }));
    }
    let mut all = Vec::new();
    let mut errors = 0;
    for task in tasks {
        if let Ok((samples, e, first)) = task.await {
            all.extend(samples);
            errors += e;
            if let Some(first) = first {
                eprintln!("  (an operation failed: {first})");
            }
        }
    }
    let summary = Summary::of(all, errors, start.elapsed());
    // Progress on stderr while the table builds up on stdout.
    eprintln!(
        "  cell done: {workers} workers, {:.0} ops/s, p50 {}",
        summary.throughput,
        Latency(summary.p50)
    );
    summary
}
