//! Renewals of many leases, gathered into one statement.
//!
//! Every renewal of a coordinator built with
//! [`Leases::with_renewal_batching`](crate::Leases::with_renewal_batching)
//! goes to one task, which gathers queued renewals into batches and sends
//! each as one [`LeaseStore::renew_many`] call, the way a database commits a
//! group:
//!
//! - a batch goes as soon as it is full ([`MAX_BATCH`] renewals), or once its
//!   oldest renewal has waited the window since it was queued (a fortieth of
//!   the renew interval, at most 50 ms: 50 ms with the default 2 s). A
//!   renewal that already waited that long for a free slot (see below) goes
//!   at once: the window is never spent twice, and a long queue is never
//!   held back by it;
//! - up to [`MAX_IN_FLIGHT`] batches are in flight at once; while they all
//!   are, the next batch keeps gathering (up to full) until one answers.
//!
//! Each lease keeps its own semantics: its attempt starts when it is queued
//! (so its deadline, counted from the start of its last successful attempt,
//! can only come earlier than the database's expiry, never later), it is
//! bounded by its own timeout, and it is lost exactly when the batch's answer
//! says its holder no longer held it. A renewal whose holder stopped waiting
//! before its batch was sent is left out of it.
//!
//! A lease has one renewal queued at a time (its holder waits for the answer
//! before the next), so batches in flight together hold different leases,
//! but for a renewal its holder gave up on at its bound while its batch was
//! still in flight: the next one can then be in flight beside it. The two
//! statements may then wait on each other's row locks; the database ends one
//! as a deadlock victim (after `deadlock_timeout` on PostgreSQL; MySQL's
//! store tries its batch again), and its renewals fail like any database
//! error, to be tried again at their cadence.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::{Instant, sleep_until};

use crate::error::BoxError;
use crate::store::{LeaseStore, Renewed};
use crate::token::Token;

/// The most renewals one batch carries. PostgreSQL's `unnest` UPDATE renews
/// about 80,000 rows a second on one connection in batches of 1,000 and
/// about 125,000 in batches of 5,000 (PERFORMANCE-HISTORY.md, "Scale"); the MySQL
/// and SQLite stores split a batch into statements of their own size.
pub(crate) const MAX_BATCH: usize = 5_000;

/// The most batches in flight at once: a pool of four connections can renew
/// four batches side by side, and a smaller pool queues the extra batches
/// the way it queues any other statement.
pub(crate) const MAX_IN_FLIGHT: usize = 4;

/// The longest a renewal waits for others to join its batch.
const MAX_WINDOW: Duration = Duration::from_millis(50);

/// How long a renewal waits for others to join its batch, for a renew
/// interval of `renew`: a fortieth of it, at most [`MAX_WINDOW`].
pub(crate) fn window(renew: Duration) -> Duration {
    (renew / 40).min(MAX_WINDOW)
}

/// How the batcher gathers and sends its batches.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Config {
    /// The most a renewal waits for others to join its batch, counted from
    /// when it was queued.
    pub(crate) window: Duration,
    /// Each batch's bound, on top of each renewal's own.
    pub(crate) bound: Duration,
    /// The most renewals in a batch.
    pub(crate) max_batch: usize,
    /// The most batches in flight at once.
    pub(crate) max_in_flight: usize,
}

impl Config {
    /// The configuration for a renew interval of `renew` and a statement
    /// bound of `bound`.
    pub(crate) fn new(renew: Duration, bound: Duration) -> Self {
        Config {
            window: window(renew),
            bound,
            max_batch: MAX_BATCH,
            max_in_flight: MAX_IN_FLIGHT,
        }
    }
}

type Reply = Result<Option<Renewed>, SharedError>;

struct Request {
    /// The handle's own, shared rather than copied per renewal.
    name: Arc<str>,
    token: Arc<str>,
    queued: Instant,
    reply: oneshot::Sender<Reply>,
}

/// The queue of a coordinator's batched renewals, and the task that sends
/// the batches. Dropped with the coordinator's last reference (every handle
/// holds one, so no renewal is waiting then), it ends the task, and with it
/// the batches still in flight: the task owns them, and no one is left to
/// read their answers.
pub(crate) struct Batcher {
    queue: mpsc::UnboundedSender<Request>,
    task: JoinHandle<()>,
}

impl Drop for Batcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl fmt::Debug for Batcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batcher").finish_non_exhaustive()
    }
}

impl Batcher {
    /// Starts the task that sends batches to `store`, renewing by
    /// `lease_ms`, gathered and bounded by `config`.
    pub(crate) fn start(store: Arc<dyn LeaseStore>, lease_ms: i64, config: Config) -> Self {
        let (queue, requests) = mpsc::unbounded_channel();
        let task = tokio::spawn(send_batches(store, lease_ms, config, requests));
        Batcher { queue, task }
    }

    /// Renews `name` for `token` in the next batch: the database's now if
    /// it was still held. Dropping the future gives the renewal up; it may
    /// still be sent.
    pub(crate) async fn renew(
        &self,
        name: &Arc<str>,
        token: &Arc<str>,
    ) -> Result<Option<Renewed>, BoxError> {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Request {
                name: name.clone(),
                token: token.clone(),
                queued: Instant::now(),
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

/// Takes what is queued already into `batch`, up to `max`: whether the
/// queue is still open.
fn take_queued(
    requests: &mut mpsc::UnboundedReceiver<Request>,
    batch: &mut Vec<Request>,
    max: usize,
) -> bool {
    while batch.len() < max {
        match requests.try_recv() {
            Ok(request) => batch.push(request),
            Err(mpsc::error::TryRecvError::Empty) => return true,
            Err(mpsc::error::TryRecvError::Disconnected) => return false,
        }
    }
    true
}

async fn send_batches(
    store: Arc<dyn LeaseStore>,
    lease_ms: i64,
    config: Config,
    mut requests: mpsc::UnboundedReceiver<Request>,
) {
    let max = config.max_batch.max(1);
    let slots = Arc::new(Semaphore::new(config.max_in_flight.max(1)));
    // The batches in flight, owned by this task: aborted with it.
    let mut in_flight = JoinSet::new();
    let mut open = true;
    let mut batch: Vec<Request> = Vec::new();
    loop {
        if batch.is_empty() {
            if !open {
                return;
            }
            match requests.recv().await {
                Some(first) => batch.push(first),
                None => return,
            }
        }
        // Gather until the batch is full or its oldest renewal has waited
        // the window since it was queued.
        let send_at = batch[0].queued + config.window;
        while open && batch.len() < max {
            open = take_queued(&mut requests, &mut batch, max);
            if !open || batch.len() >= max || Instant::now() >= send_at {
                break;
            }
            tokio::select! {
                biased;
                request = requests.recv() => match request {
                    Some(request) => batch.push(request),
                    None => open = false,
                },
                () = sleep_until(send_at) => break,
            }
        }
        // A free slot; while every slot is busy, the batch fills up.
        let permit: OwnedSemaphorePermit = loop {
            if let Ok(permit) = slots.clone().try_acquire_owned() {
                break permit;
            }
            tokio::select! {
                biased;
                permit = slots.clone().acquire_owned() => match permit {
                    Ok(permit) => break permit,
                    // The semaphore is never closed.
                    Err(_) => return,
                },
                request = requests.recv(), if open && batch.len() < max => match request {
                    Some(request) => batch.push(request),
                    None => open = false,
                },
            }
        };
        // A renewal whose holder stopped waiting (its attempt was cut at its
        // bound) is not sent.
        batch.retain(|r| !r.reply.is_closed());
        if batch.is_empty() {
            continue;
        }
        let batch = std::mem::take(&mut batch);
        // Forget the batches that have answered (they freed their slots).
        while in_flight.try_join_next().is_some() {}
        let _ = in_flight.spawn(send(store.clone(), lease_ms, config.bound, batch, permit));
    }
}

/// Sends one batch and answers each of its renewals, then frees its slot.
async fn send(
    store: Arc<dyn LeaseStore>,
    lease_ms: i64,
    bound: Duration,
    batch: Vec<Request>,
    permit: OwnedSemaphorePermit,
) {
    let pairs: Vec<(&str, Token<'_>)> = batch
        .iter()
        .map(|r| (&*r.name, Token::new(&r.token)))
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
    drop(pairs);
    drop(permit);
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
    use crate::testing::{ScriptedStore, Step, after, ms, timings};

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

    /// A batcher on `store` with a window of 50 ms, batches of at most
    /// `max_batch` and at most `max_in_flight` of them in flight.
    fn batcher(store: &ScriptedStore, max_batch: usize, max_in_flight: usize) -> Arc<Batcher> {
        Arc::new(Batcher::start(
            Arc::new(store.clone()),
            1_000,
            Config {
                window: ms(50),
                bound: ms(10_000),
                max_batch,
                max_in_flight,
            },
        ))
    }

    /// Queues a renewal of `name` on its own task: when it answered, in ms
    /// since `t0`, and whether the lease was held.
    fn renew(
        batcher: &Arc<Batcher>,
        name: String,
        t0: Instant,
    ) -> tokio::task::JoinHandle<(u64, bool)> {
        let batcher = batcher.clone();
        tokio::spawn(async move {
            let (name, token) = (Arc::from(name), Arc::from("token"));
            let held = batcher.renew(&name, &token).await.unwrap().is_some();
            (u64::try_from(t0.elapsed().as_millis()).unwrap(), held)
        })
    }

    #[tokio::test(start_paused = true)]
    async fn full_batches_go_without_waiting_for_the_window() {
        let store = ScriptedStore::default();
        let batcher = batcher(&store, 4, 4);
        let t0 = Instant::now();
        let renewals: Vec<_> = (0..10)
            .map(|i| renew(&batcher, format!("n{i}"), t0))
            .collect();
        let mut answered = Vec::new();
        for r in renewals {
            answered.push(r.await.unwrap());
        }
        assert_eq!(store.batches(), [4, 4, 2]);
        assert_eq!(
            store.starts(t0),
            [0, 0, 0, 0, 0, 0, 0, 0, 50, 50],
            "the two full batches go at once, the rest after its window"
        );
        assert!(answered.iter().all(|&(_, held)| held));
    }

    #[tokio::test(start_paused = true)]
    async fn batches_go_in_flight_side_by_side_up_to_the_limit() {
        // Every renewal takes 100 ms, so a batch of 4 takes 400 ms.
        let store = ScriptedStore::new((0..12).map(|_| after(100, Step::Renew)));
        let batcher = batcher(&store, 4, 2);
        let t0 = Instant::now();
        let renewals: Vec<_> = (0..12)
            .map(|i| renew(&batcher, format!("n{i}"), t0))
            .collect();
        let mut answered = Vec::new();
        for r in renewals {
            answered.push(r.await.unwrap());
        }
        assert_eq!(store.batches(), [4, 4, 4]);
        let mut starts = store.starts(t0);
        starts.sort_unstable();
        assert_eq!(
            starts,
            [0, 0, 100, 100, 200, 200, 300, 300, 400, 500, 600, 700],
            "two batches in flight together, the third once one of them answered"
        );
        let mut ends: Vec<u64> = answered.iter().map(|&(end, _)| end).collect();
        ends.sort_unstable();
        assert_eq!(
            ends,
            [400, 400, 400, 400, 400, 400, 400, 400, 800, 800, 800, 800]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_that_waited_for_a_slot_does_not_wait_the_window_again() {
        // One batch in flight at a time; the first takes 200 ms.
        let store = ScriptedStore::new([after(200, Step::Renew)]);
        let batcher = batcher(&store, 100, 1);
        let t0 = Instant::now();
        let first = renew(&batcher, "a".to_owned(), t0);
        sleep(ms(60)).await;
        // Queued while the first batch is in flight: they wait for its slot,
        // which outlasts their window.
        let later: Vec<_> = (0..3)
            .map(|i| renew(&batcher, format!("b{i}"), t0))
            .collect();
        assert_eq!(first.await.unwrap(), (250, true));
        for r in later {
            assert_eq!(r.await.unwrap(), (250, true));
        }
        assert_eq!(store.batches(), [1, 3]);
        assert_eq!(store.starts(t0), [50, 250, 250, 250]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_given_up_before_its_batch_went_is_left_out() {
        let store = ScriptedStore::new([after(200, Step::Renew)]);
        let batcher = batcher(&store, 100, 1);
        let t0 = Instant::now();
        let first = renew(&batcher, "a".to_owned(), t0);
        sleep(ms(60)).await;
        let given_up = renew(&batcher, "b".to_owned(), t0);
        let kept = renew(&batcher, "c".to_owned(), t0);
        sleep(ms(10)).await;
        given_up.abort();
        assert_eq!(first.await.unwrap(), (250, true));
        assert_eq!(kept.await.unwrap(), (250, true));
        assert_eq!(store.batches(), [1, 1]);
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

    #[tokio::test(start_paused = true)]
    async fn a_batch_in_flight_ends_with_the_batcher() {
        // The batch never answers; its bound is 10 s.
        let store = ScriptedStore::new([Step::Hang]);
        let shared: Arc<dyn LeaseStore> = Arc::new(store.clone());
        let batcher = Batcher::start(
            shared.clone(),
            1_000,
            Config {
                window: ms(50),
                bound: ms(10_000),
                max_batch: 4,
                max_in_flight: 4,
            },
        );
        let (reply, answer) = oneshot::channel();
        let queued = batcher.queue.send(Request {
            name: Arc::from("a"),
            token: Arc::from("token"),
            queued: Instant::now(),
            reply,
        });
        assert!(queued.is_ok());
        sleep(ms(100)).await;
        assert_eq!(store.batches(), [1], "the batch is in flight");
        drop(batcher);
        let answer = tokio::time::timeout(ms(1_000), answer).await;
        assert!(
            matches!(answer, Ok(Err(_))),
            "the batch in flight ended with the batcher, long before its bound"
        );
        assert_eq!(
            Arc::strong_count(&shared),
            1,
            "neither the batcher's task nor its batch holds the store"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_batchers_task_ends_with_the_coordinators_last_reference() {
        let store = ScriptedStore::default();
        let shared: Arc<dyn LeaseStore> = Arc::new(store.clone());
        let leases = Leases::from_arc(shared.clone())
            .with_timings(timings())
            .with_renewal_batching(true);
        let h = leases.claim("a").await.unwrap().unwrap();
        h.renew().await.unwrap();
        assert_eq!(store.batches(), [1]);
        // The batcher's task holds the store; the coordinator too.
        assert_eq!(Arc::strong_count(&shared), 3);
        drop(leases);
        sleep(ms(100)).await;
        assert_eq!(
            Arc::strong_count(&shared),
            3,
            "the handle keeps the coordinator, and its batcher, alive"
        );
        drop(h);
        tokio::task::yield_now().await;
        assert_eq!(
            Arc::strong_count(&shared),
            1,
            "the batcher's task ended with the coordinator's last reference"
        );
    }
}
