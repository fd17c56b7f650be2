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

type Reply = Result<bool, SharedError>;

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

    /// Renews `name` for `holder` in the next batch: whether it was still
    /// held. Dropping the future gives the renewal up; it may still be sent.
    pub(crate) async fn renew(&self, name: &str, holder: &str) -> Result<bool, BoxError> {
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
