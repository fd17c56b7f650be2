//! The rerun sweep: every interval (plus a random part), one query for all
//! the jobs' rounds cut short, each offered to its job's task.

use std::sync::Arc;
use std::time::Duration;

use lease_core::{CancellationToken, Chain, Leases};

use crate::clock::Clock;
use crate::log::{Escaped, TARGET};
use crate::metrics;
use crate::schedule::Rfc3339;
use crate::scheduler::{Offers, PREFIX, offers};

/// The rerun sweep: every interval (plus a random part), one query for all
/// the jobs' rounds cut short, each offered to its job.
pub(crate) struct Sweep {
    pub(crate) leases: Leases,
    pub(crate) clock: Arc<Clock>,
    pub(crate) shutdown: CancellationToken,
    pub(crate) interval: Duration,
    /// The jobs that claim their instants, by lease name: they change as
    /// jobs are added and removed.
    pub(crate) offers: Offers,
}

impl Sweep {
    /// Sweeps until the shutdown.
    pub(crate) async fn run(self) {
        loop {
            let names: Vec<String> = offers(&self.offers).keys().cloned().collect();
            if !names.is_empty() {
                self.sweep(&names).await;
            }
            let pause = self.interval + jitter(self.interval / 15);
            tokio::select! {
                biased;
                () = self.shutdown.cancelled() => return,
                () = tokio::time::sleep(pause) => {}
            }
            if names.is_empty() {
                continue;
            }
            if let Err(error) = self.clock.sync(&self.leases).await {
                tracing::debug!(target: TARGET, error = %Escaped(Chain(&error)), "could not read the database's clock");
            }
        }
    }

    /// One sweep of the jobs `names` (lease names).
    async fn sweep(&self, names: &[String]) {
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        match self.leases.unfinished_instants(&names).await {
            Ok(found) => {
                metrics::sweep(true);
                for u in found {
                    tracing::debug!(target: TARGET,
                        job = ?u.name.strip_prefix(PREFIX).unwrap_or(&u.name),
                        instant = %Rfc3339(u.instant),
                        "rerun sweep found a round cut short"
                    );
                    if let Some(tx) = offers(&self.offers).get(&u.name) {
                        // A job busy with a round gets it at the next sweep.
                        let _ = tx.try_send(u);
                    }
                }
            }
            Err(error) => {
                metrics::sweep(false);
                tracing::warn!(target: TARGET,
                    error = %Escaped(Chain(&error)),
                    "rerun sweep failed: the next one tries again"
                );
            }
        }
    }
}

/// A random duration from zero to `max`.
fn jitter(max: Duration) -> Duration {
    let max_us = u64::try_from(max.as_micros()).unwrap_or(u64::MAX);
    if max_us == 0 {
        return Duration::ZERO;
    }
    let r = getrandom::u64().unwrap_or(max_us / 2);
    Duration::from_micros(r % (max_us + 1))
}
