//! Holding a lease on SQLite's single connection: the holder's renewals wait
//! behind the work's own guarded transactions. A transaction shorter than
//! the local deadline minus the renew interval keeps the lease; one longer
//! than the local deadline loses it (the spec's `Hold` on SQLite).
//!
//! Real time with millisecond timings: lease 2 s, renew every 100 ms, local
//! deadline 1 s (each renewal bounded by 500 ms).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] functions fail loudly"
)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use lease_core::{
    BoxError, CancellationToken, EndCause, ForwardingStore, GuardError, LeaseStore, Leases,
    LostCause, Renewed, Timings, Token,
};
use lease_sqlite::{SqliteError, SqliteStore};
use tokio::time::{Instant, sleep};

fn timings() -> Timings {
    Timings::builder()
        .lease(Duration::from_millis(2_000))
        .renew(Duration::from_millis(100))
        .deadline(Duration::from_millis(1_000))
        .grace(Duration::from_millis(200))
        .build()
        .unwrap()
}

/// A store on a fresh file, migrated, and a coordinator on it whose renewals
/// are recorded.
async fn fresh() -> (SqliteStore, Leases, Arc<Recording>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.db");
    std::mem::forget(dir);
    let store = tokio::task::spawn_blocking(move || SqliteStore::open(path))
        .await
        .unwrap()
        .unwrap();
    let recording = Arc::new(Recording {
        inner: store.clone(),
        renewals: Mutex::new(Vec::new()),
    });
    // Unchecked against the store's busy timeout (the default 5 s): it
    // bounds waits for other connections' locks, and no other connection
    // opens this file.
    let leases = Leases::from_arc(recording.clone())
        .with_timings_unchecked(timings())
        .with_instance("sqlite-hold")
        .unwrap();
    leases.migrate().await.unwrap();
    (store, leases, recording)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_waits_behind_the_works_transaction() {
    let (store, leases, recording) = fresh().await;
    let handle = leases.claim("job:behind").await.unwrap().unwrap();
    let holder = handle.hold(&CancellationToken::new());
    sleep(Duration::from_millis(250)).await;

    let began = Instant::now();
    store
        .transaction(holder.context(), |_tx| {
            std::thread::sleep(Duration::from_millis(300));
            Ok::<_, SqliteError>(())
        })
        .await
        .unwrap();
    let ended = Instant::now();

    sleep(Duration::from_millis(250)).await;
    let waited = recording
        .renewals()
        .into_iter()
        .find(|r| r.start > began && r.start < ended - Duration::from_millis(100))
        .expect("a renewal fell due during the 300 ms transaction");
    let answered = waited.end.expect("the renewal answered");
    assert!(
        answered >= ended - Duration::from_millis(5),
        "a renewal due during the work's transaction answered {:?} before it ended: it \
         should have waited for the one connection",
        ended - answered
    );
    assert!(waited.renewed, "the renewal that waited must succeed");
    assert!(
        !holder.context().is_cancelled(),
        "{:?}",
        holder.context().cause()
    );
    holder.stop().await;
    handle.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_shorter_than_deadline_minus_renew_keeps_the_lease() {
    let (store, leases, _) = fresh().await;
    let handle = leases.claim("job:short").await.unwrap().unwrap();
    let holder = handle.hold(&CancellationToken::new());
    sleep(Duration::from_millis(250)).await;

    // 700 ms: under the 900 ms of deadline minus renew interval, and longer
    // than the 500 ms bound of one renewal attempt, so one attempt is cut
    // and the next waits the transaction out.
    store
        .transaction(holder.context(), |_tx| {
            std::thread::sleep(Duration::from_millis(700));
            Ok::<_, SqliteError>(())
        })
        .await
        .expect("a transaction under the bound commits");
    sleep(Duration::from_millis(1_200)).await;
    assert!(
        !holder.context().is_cancelled(),
        "a 700 ms transaction cost the lease: {:?}",
        holder.context().cause()
    );
    assert!(!handle.lost());
    holder.stop().await;
    handle.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_longer_than_the_deadline_loses_the_lease() {
    let (store, leases, _) = fresh().await;
    let handle = leases.claim("job:long").await.unwrap().unwrap();
    let holder = handle.hold(&CancellationToken::new());
    sleep(Duration::from_millis(250)).await;

    let result = store
        .transaction(holder.context(), |tx| {
            tx.execute_batch("CREATE TABLE long_work (x); INSERT INTO long_work VALUES (1)")?;
            std::thread::sleep(Duration::from_millis(1_500));
            Ok::<_, SqliteError>(())
        })
        .await;
    let ctx = holder.context();
    assert!(
        ctx.is_cancelled(),
        "a 1500 ms transaction must cost a lease whose local deadline is 1000 ms"
    );
    assert_eq!(
        ctx.cause(),
        Some(EndCause::Lost(LostCause::DeadlineExceeded))
    );
    assert!(handle.lost());
    assert!(
        matches!(
            &result,
            Err(GuardError::Lost(e)) if e.lost_cause() == Some(LostCause::DeadlineExceeded)
        ),
        "a guarded transaction whose lease was lost before its commit must not commit: {result:?}"
    );
    // The call returned at the loss; the work ran its course on the
    // connection thread, and the transaction rolled back after it: the next
    // use of the connection comes after it, and finds nothing of it.
    holder.stop().await;
    let created: i64 = store
        .transaction(
            &lease_core::LeaseContext::new(
                leases.claim("job:after").await.unwrap().unwrap(),
                CancellationToken::new(),
            ),
            |tx| {
                tx.query_row(
                    "SELECT count(*) FROM sqlite_master WHERE name = 'long_work'",
                    [],
                    |row| row.get(0),
                )
            },
        )
        .await
        .unwrap();
    assert_eq!(created, 0, "the lost transaction's work was committed");
}

/// One renewal as the coordinator saw it reach the store.
#[derive(Debug, Clone, Copy)]
struct Renewal {
    start: Instant,
    /// When it was sent, by the system clock (the one SQLite reads), in
    /// milliseconds since the epoch.
    sent_ms: i64,
    end: Option<Instant>,
    renewed: bool,
    /// The database's now it renewed at, as it answered.
    now_ms: Option<i64>,
}

/// Forwards to the SQLite store, recording each renewal's start and answer.
#[derive(Debug)]
struct Recording {
    inner: SqliteStore,
    renewals: Mutex<Vec<Renewal>>,
}

impl Recording {
    fn renewals(&self) -> Vec<Renewal> {
        self.renewals.lock().unwrap().clone()
    }
}

#[async_trait]
impl ForwardingStore for Recording {
    fn inner(&self) -> &dyn LeaseStore {
        &self.inner
    }

    async fn renew(
        &self,
        name: &str,
        token: Token<'_>,
        lease_ms: i64,
    ) -> Result<Option<Renewed>, BoxError> {
        let index = {
            let mut renewals = self.renewals.lock().unwrap();
            let sent_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis();
            renewals.push(Renewal {
                start: Instant::now(),
                sent_ms: i64::try_from(sent_ms).unwrap(),
                end: None,
                renewed: false,
                now_ms: None,
            });
            renewals.len() - 1
        };
        let result = self.inner.renew(name, token, lease_ms).await;
        let mut renewals = self.renewals.lock().unwrap();
        renewals[index].end = Some(Instant::now());
        renewals[index].renewed = matches!(result, Ok(Some(_)));
        renewals[index].now_ms = result.as_ref().ok().copied().flatten().map(|r| r.now_ms);
        result
    }

    async fn renew_many(
        &self,
        leases: &[(&str, Token<'_>)],
        lease_ms: i64,
    ) -> Result<Vec<Option<Renewed>>, BoxError> {
        let mut held = Vec::with_capacity(leases.len());
        for (name, token) in leases {
            held.push(ForwardingStore::renew(self, name, *token, lease_ms).await?);
        }
        Ok(held)
    }
}

/// The specification's rule for SQLite (issue 23, item 1): transactions back
/// to back, each shorter than half the local deadline, cannot cost the
/// lease. A renewal that falls due during one transaction queues for the
/// connection behind it and ahead of the next, which the work asks for
/// only after the first has returned: it waits out one transaction, never
/// two. (Guarded transactions once took the connection from tokio's blocking
/// pool, through a mutex that serves waiters in no order, so the next
/// transaction could take it first, again and again.)
///
/// Lease 3 s, renew every 100 ms, local deadline 2 s (each attempt bounded
/// by 1 s); transactions of 200 ms back to back for 8 s (four deadlines).
/// Order alone keeps the lease, so the test asserts no timing: by the
/// database's clock, no renewal ran after two whole transactions that
/// began after it was sent, and the lease is never lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn back_to_back_transactions_under_half_the_deadline_keep_the_lease() {
    let (store, leases, recording) = fresh().await;
    let leases = leases.with_timings_unchecked(
        Timings::builder()
            .lease(Duration::from_millis(3_000))
            .renew(Duration::from_millis(100))
            .deadline(Duration::from_millis(2_000))
            .grace(Duration::from_millis(500))
            .build()
            .unwrap(),
    );
    let handle = leases.claim("job:back-to-back").await.unwrap().unwrap();
    let holder = handle.hold(&CancellationToken::new());
    let began = Instant::now();
    // Each transaction's time on the connection, by the database's clock.
    let mut ran: Vec<(i64, i64)> = Vec::new();
    while began.elapsed() < Duration::from_secs(8) {
        let result = store
            .transaction(holder.context(), |tx| {
                let now = "SELECT CAST(unixepoch('subsec') * 1000 AS INTEGER)";
                let start: i64 = tx.query_row(now, [], |row| row.get(0))?;
                std::thread::sleep(Duration::from_millis(200));
                let end: i64 = tx.query_row(now, [], |row| row.get(0))?;
                Ok::<_, rusqlite::Error>((start, end))
            })
            .await;
        match result {
            Ok(span) => ran.push(span),
            Err(e) => panic!(
                "transaction {} after {:?}: {e:?}; the lease: {:?}",
                ran.len(),
                began.elapsed(),
                holder.context().cause()
            ),
        }
    }
    let renewals = recording.renewals();
    for r in &renewals {
        let Some(ran_at) = r.now_ms else { continue };
        let overtook: Vec<_> = ran
            .iter()
            .filter(|(start, end)| r.sent_ms <= *start && *end <= ran_at)
            .collect();
        assert!(
            overtook.len() <= 1,
            "a renewal sent at {} ms ran at {ran_at} ms, after {} transactions that began \
             after it: {overtook:?}",
            r.sent_ms,
            overtook.len()
        );
    }
    assert!(
        !holder.context().is_cancelled(),
        "back-to-back transactions of 200 ms cost a lease whose attempts are bounded by 1 s: \
         {:?}",
        holder.context().cause()
    );
    let renewed = renewals.iter().filter(|r| r.renewed).count();
    assert!(
        renewed >= ran.len() / 2,
        "{renewed} renewals succeeded beside {} transactions",
        ran.len()
    );
    holder.stop().await;
    handle.release().await.unwrap();
}
