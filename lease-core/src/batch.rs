//! Renewals of many leases, gathered into one statement.
//!
//! Every renewal of a coordinator built with
//! [`Leases::with_renewal_batching`](crate::Leases::with_renewal_batching)
//! goes to one task, which gathers the renewals queued within a short window
//! after the first (a fortieth of the renew interval, at most 50 ms: 50 ms
//! with the default 2 s) and those queued while its previous batch was in
//! flight, and sends them as one [`LeaseStore::renew_many`] call, the way a
//! database commits a group. Each lease keeps its own semantics: its attempt starts when it is
//! queued (so its deadline, counted from the start of its last successful
//! attempt, can only come earlier than the database's expiry, never later),
//! it is bounded by its own timeout, and it is lost exactly when the batch's
//! answer says its holder no longer held it.

use std::fmt;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use crate::error::BoxError;
use crate::store::LeaseStore;

/// The most renewals one statement carries.
const MAX_BATCH: usize = 1_000;

/// The longest a renewal waits for others to join its batch.
const MAX_WINDOW: std::time::Duration = std::time::Duration::from_millis(50);

/// How long a renewal waits for others to join its batch, for a renew
/// interval of `renew`: a fortieth of it, at most [`MAX_WINDOW`].
pub(crate) fn window(renew: std::time::Duration) -> std::time::Duration {
    (renew / 40).min(MAX_WINDOW)
}

type Reply = Result<Option<i64>, SharedError>;

struct Request {
    name: String,
    holder: String,
    reply: oneshot::Sender<Reply>,
}

/// The queue of a coordinator's batched renewals. The task that sends the
/// batches ends when the queue is dropped (with the coordinator).
pub(crate) struct Batcher {
    queue: mpsc::UnboundedSender<Request>,
}

impl fmt::Debug for Batcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batcher").finish_non_exhaustive()
    }
}

impl Batcher {
    /// Starts the task that sends batches to `store`, gathering each for
    /// `window`, each bounded by `bound`, renewing by `lease_ms`.
    pub(crate) fn start(
        store: Arc<dyn LeaseStore>,
        lease_ms: i64,
        window: std::time::Duration,
        bound: std::time::Duration,
    ) -> Self {
        let (queue, requests) = mpsc::unbounded_channel();
        tokio::spawn(send_batches(store, lease_ms, window, bound, requests));
        Batcher { queue }
    }

    /// Renews `name` for `holder` in the next batch: the database's now if
    /// it was still held. Dropping the future gives the renewal up; it may
    /// still be sent.
    pub(crate) async fn renew(&self, name: &str, holder: &str) -> Result<Option<i64>, BoxError> {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Request {
                name: name.to_owned(),
                holder: holder.to_owned(),
                reply,
            })
            .map_err(|_| BoxError::from("the renewal batcher has stopped"))?;
        match answer.await {
            Ok(Ok(held)) => Ok(held),
            Ok(Err(e)) => Err(Box::new(e)),
            Err(_) => Err("the renewal batcher dropped the renewal".into()),
        }
    }
}

async fn send_batches(
    store: Arc<dyn LeaseStore>,
    lease_ms: i64,
    window: std::time::Duration,
    bound: std::time::Duration,
    mut requests: mpsc::UnboundedReceiver<Request>,
) {
    while let Some(first) = requests.recv().await {
        if !window.is_zero() {
            tokio::time::sleep(window).await;
        }
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match requests.try_recv() {
                Ok(request) => batch.push(request),
                Err(_) => break,
            }
        }
        // A renewal whose holder stopped waiting (its attempt was cut at its
        // bound) is not sent.
        batch.retain(|r| !r.reply.is_closed());
        if batch.is_empty() {
            continue;
        }
        let pairs: Vec<(&str, &str)> = batch
            .iter()
            .map(|r| (r.name.as_str(), r.holder.as_str()))
            .collect();
        let answer = match tokio::time::timeout(bound, store.renew_many(&pairs, lease_ms)).await {
            Ok(Ok(held)) if held.len() == batch.len() => Ok(held),
            Ok(Ok(held)) => Err(SharedError::from(BoxError::from(format!(
                "renew_many answered {} leases for a batch of {}",
                held.len(),
                batch.len()
            )))),
            Ok(Err(e)) => Err(SharedError::from(e)),
            Err(_) => Err(SharedError::from(BoxError::from(format!(
                "a batch of {} renewals got no answer within {bound:?}",
                batch.len()
            )))),
        };
        tracing::trace!(renewals = batch.len(), ok = answer.is_ok(), "renewal batch");
        match answer {
            Ok(held) => {
                for (request, held) in batch.into_iter().zip(held) {
                    let _ = request.reply.send(Ok(held));
                }
            }
            Err(e) => {
                for request in batch {
                    let _ = request.reply.send(Err(e.clone()));
                }
            }
        }
    }
}

/// The error of a batch, shared by every renewal in it.
#[derive(Clone)]
struct SharedError(Arc<dyn std::error::Error + Send + Sync + 'static>);

impl From<BoxError> for SharedError {
    fn from(e: BoxError) -> Self {
        SharedError(Arc::from(e))
    }
}

impl fmt::Debug for SharedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for SharedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

impl std::error::Error for SharedError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::{Instant, sleep};
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::Leases;
    use crate::testing::{ScriptedStore, Step, ms, timings};

    #[test]
    fn the_window_is_a_fortieth_of_the_renew_interval_at_most_50_ms() {
        assert_eq!(window(ms(100)), Duration::from_micros(2_500));
        assert_eq!(window(ms(2_000)), ms(50));
        assert_eq!(window(ms(10_000)), ms(50));
    }

    #[tokio::test(start_paused = true)]
    async fn renewals_due_together_go_in_one_batch_and_keep_their_cadence() {
        let store = ScriptedStore::default();
        let leases = Leases::new(store.clone())
            .with_timings(timings())
            .with_renewal_batching(true);
        let t0 = Instant::now();
        let parent = CancellationToken::new();
        let mut held = Vec::new();
        for i in 0..10 {
            let h = leases.claim(&format!("n{i}")).await.unwrap().unwrap();
            let holder = h.hold(&parent);
            held.push((h, holder));
        }
        sleep(ms(350)).await;
        for (h, holder) in held {
            holder.stop().await;
            assert!(!h.lost(), "{} was lost", h.name());
        }
        assert_eq!(
            store.batches(),
            [10, 10, 10],
            "the ten renewals due at 100, 200 and 300 ms go as one batch each"
        );
        // Each renewal is sent once the window (2.5 ms, which tokio's timer
        // rounds up to the millisecond) has gathered the batch.
        let starts = store.starts(t0);
        assert_eq!(starts.len(), 30);
        for (i, start) in starts.iter().enumerate() {
            let round = u64::try_from(i / 10).unwrap() + 1;
            assert!(
                (round * 100 + 2..=round * 100 + 3).contains(start),
                "renewal {i} sent at {start} ms, due at {} ms",
                round * 100
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_the_batch_finds_gone_is_lost_alone() {
        // The second renewal of the first batch reports the lease gone.
        let store = ScriptedStore::new([Step::Renew, Step::Gone]);
        let leases = Leases::new(store.clone())
            .with_timings(timings())
            .with_renewal_batching(true);
        let parent = CancellationToken::new();
        let a = leases.claim("a").await.unwrap().unwrap();
        let b = leases.claim("b").await.unwrap().unwrap();
        let (ha, hb) = (a.hold(&parent), b.hold(&parent));
        sleep(ms(350)).await;
        assert!(!a.lost(), "the first lease was renewed");
        assert!(
            b.lost(),
            "the batch answered that the second lease was gone"
        );
        assert!(!ha.context().is_cancelled());
        ha.stop().await;
        hb.stop().await;
        assert_eq!(store.batches()[0], 2);
    }
}
