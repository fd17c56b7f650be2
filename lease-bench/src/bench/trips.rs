//! Round trips per operation, counted on the wire: each operation and its
//! floor sent once through a TCP proxy that parses what the client sends
//! ([`crate::wire`]), on a store and a floor of one connection each.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use dblease::sqlite::Synchronous;
use dblease::{CancellationToken, LeaseContext};
use lease_conformance::proxy::Proxy;

use super::ops::GUARDED_READ;
use super::ops::{
    claim_many, hand_claim_release, hand_contended, hand_instant, hand_renew, lease_claim_release,
    lease_contended, lease_instant,
};
use super::target::{Target, Work};
use super::{BoxError, BoxResult};
use crate::url::{Backend, host_port, through};
use crate::wire::{Observer, RoundTrips};

/// The round trips of one operation of each kind: the lease's and the
/// floor's, by the operation's name in the table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Trips {
    by_op: Vec<(&'static str, (u64, u64))>,
}

impl Trips {
    /// The round trips of the row `op` names: the operation it starts with
    /// (the longest such name), none for a row of the second floor (marked
    /// ⁵: SQLite, no wire) or of an operation not counted.
    pub(crate) fn of(&self, op: &str) -> Option<(u64, u64)> {
        if op.contains('⁵') {
            return None;
        }
        self.by_op
            .iter()
            .filter(|(name, _)| op.starts_with(name))
            .max_by_key(|(name, _)| name.len())
            .map(|(_, trips)| *trips)
    }
}

/// How many times each side runs before it is counted: the statements are
/// prepared on the first.
const WARM_UP: usize = 2;

/// Counts the round trips of every operation on the server `url` names;
/// `None` for SQLite (no wire).
pub(crate) async fn measure(
    url: &str,
    synchronous: Synchronous,
    batch: usize,
) -> BoxResult<Option<Trips>> {
    let Some(backend) = Backend::of(url) else {
        return Err("unrecognised URL scheme".into());
    };
    if backend == Backend::Sqlite {
        return Ok(None);
    }
    let upstream = host_port(url).ok_or("the URL names no server")?;
    let count = Arc::new(RoundTrips::default());
    let observed = count.clone();
    let proxy = Proxy::start_observed(upstream.as_str(), move || {
        let mut observer = Observer::new(backend, observed.clone());
        move |bytes: &[u8]| observer.chunk(bytes)
    })
    .await?;
    let mut proxied = through(url, &proxy.addr().to_string()).ok_or("no URL through the proxy")?;
    if backend == Backend::Postgres && !proxied.contains("sslmode=") {
        // In the clear, or the proxy reads nothing.
        proxied.push(if proxied.contains('?') { '&' } else { '?' });
        proxied.push_str("sslmode=disable");
    }
    let t = Arc::new(Target::open(&proxied, None, synchronous, 1).await?);
    let trips = count_all(&t, &count, batch).await;
    t.cleanup().await;
    drop(proxy);
    trips.map(Some)
}

/// Runs `op` [`WARM_UP`] times, then once more, and returns the round trips
/// of that last run.
async fn once<F, Fut>(count: &RoundTrips, op: F) -> BoxResult<u64>
where
    F: Fn() -> Fut,
    Fut: Future<Output = BoxResult<()>>,
{
    for _ in 0..WARM_UP {
        op().await?;
    }
    let before = count.get();
    op().await?;
    Ok(count.get() - before)
}

async fn count_all(t: &Arc<Target>, count: &RoundTrips, batch: usize) -> BoxResult<Trips> {
    let mut by_op = Vec::new();
    let raw = &t.raw;

    let lease = once(count, || lease_claim_release(t, 0)).await?;
    let hand = once(count, || hand_claim_release(t, raw, 0)).await?;
    by_op.push(("claim + release", (lease, hand)));

    let h = t
        .leases
        .claim("bench:trips:renew")
        .await?
        .ok_or("refused")?;
    let lease = once(count, || async {
        h.renew().await.map(drop).map_err(BoxError::from)
    })
    .await?;
    let hand = once(count, || hand_renew(t, raw, 0, &h)).await?;
    h.release().await?;
    by_op.push(("renew", (lease, hand)));

    // A refused claim: the name held meanwhile.
    let holder = t.leases.claim("bench:contended").await?.ok_or("refused")?;
    let refused = |won: bool| {
        if won {
            Err(BoxError::from("a claim of a held name won"))
        } else {
            Ok(())
        }
    };
    let lease = once(count, || async { refused(lease_contended(t).await?) }).await?;
    let hand = once(count, || async {
        refused(hand_contended(t, raw, 1).await?)
    })
    .await?;
    holder.release().await?;
    by_op.push(("contended claim", (lease, hand)));

    let slots = AtomicI64::new(1);
    let lease = once(count, || {
        lease_instant(t, 0, slots.fetch_add(1, Ordering::SeqCst))
    })
    .await?;
    let hand = once(count, || {
        hand_instant(t, raw, 0, slots.fetch_add(1, Ordering::SeqCst))
    })
    .await?;
    by_op.push(("instant claim + finish", (lease, hand)));

    let h = t.leases.claim("bench:guard:0").await?.ok_or("refused")?;
    let ctx = LeaseContext::new(h, CancellationToken::new());
    let lease = once(count, || t.guarded(&ctx, 0, Work::Write)).await?;
    let hand = once(count, || t.unguarded(raw, 0, Work::Write)).await?;
    by_op.push(("guarded transaction", (lease, hand)));
    let lease = once(count, || t.guarded(&ctx, 0, Work::Read)).await?;
    let hand = once(count, || t.unguarded(raw, 0, Work::Read)).await?;
    ctx.handle().release().await?;
    by_op.push((GUARDED_READ, (lease, hand)));

    let lock = t.leases.lock("bench:trips:lock");
    let lease = once(count, || async {
        lock.try_run(|_ctx| async {})
            .await
            .map_err(|e| BoxError::from(e.to_string()))
    })
    .await?;
    let hand = once(count, || hand_claim_release(t, raw, 0)).await?;
    by_op.push(("lock try_run", (lease, hand)));

    if batch > 0 {
        let handles = claim_many(t, "bench:trips:batch", batch).await?;
        let pairs: Vec<(String, String)> = handles
            .iter()
            .map(|h| (h.name().to_owned(), h.token().expose().to_owned()))
            .collect();
        let set = Arc::new(pairs);
        let lease_ms = i64::try_from(t.leases.timings().lease().as_millis())?;
        let lease = once(count, || async {
            let pairs: Vec<(&str, dblease::Token<'_>)> = set
                .iter()
                .map(|(n, t)| (n.as_str(), dblease::Token::new(t)))
                .collect();
            let _ = t.leases.store().renew_many(&pairs, lease_ms).await?;
            Ok(())
        })
        .await?;
        let hand = once(count, || async {
            raw.renew_many(t.backend, set.clone()).await.map(drop)
        })
        .await?;
        for h in &handles {
            h.release().await?;
        }
        by_op.push(("renew_many", (lease, hand)));
    }
    Ok(Trips { by_op })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row finds the operation its name starts with, the longest
    /// (`renew_many` is not `renew`); the second floor's rows and rows of
    /// operations not counted find none.
    #[test]
    fn rows_find_their_operations_round_trips() {
        let trips = Trips {
            by_op: vec![
                ("renew", (1, 1)),
                ("renew_many", (4, 1)),
                ("claim + release", (2, 2)),
            ],
        };
        assert_eq!(trips.of("renew_many, 1000/call ¹"), Some((4, 1)));
        assert_eq!(trips.of("renew"), Some((1, 1)));
        assert_eq!(trips.of("claim + release ⁵"), None);
        assert_eq!(trips.of("scheduler, 200 jobs/s ⁴"), None);
    }

    /// On a real server, the floors' round trips come out as written by
    /// hand: a claim and a release two, a renewal one, the unguarded
    /// transactions three (BEGIN, the update or the read, COMMIT), the
    /// batch one; and
    /// each operation of the lease at least one. Skipped without
    /// `LEASE_TEST_POSTGRES_URL` / `LEASE_TEST_MYSQL_URL` (it uses the
    /// bench's own table, `lease_bench`).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_floors_round_trips_are_counted_on_the_wire() {
        for var in ["LEASE_TEST_POSTGRES_URL", "LEASE_TEST_MYSQL_URL"] {
            let Ok(url) = std::env::var(var) else {
                eprintln!("{var} not set: skipped");
                continue;
            };
            let trips = measure(&url, Synchronous::Full, 8).await.unwrap().unwrap();
            let hand = |op: &str| trips.of(op).map(|(_, hand)| hand);
            assert_eq!(hand("claim + release"), Some(2), "{var}: {trips:?}");
            assert_eq!(hand("renew"), Some(1), "{var}: {trips:?}");
            assert_eq!(hand("contended claim"), Some(1), "{var}: {trips:?}");
            assert_eq!(hand("instant claim + finish"), Some(2), "{var}: {trips:?}");
            assert_eq!(hand("guarded transaction"), Some(3), "{var}: {trips:?}");
            assert_eq!(hand(GUARDED_READ), Some(3), "{var}: {trips:?}");
            assert_eq!(hand("renew_many"), Some(1), "{var}: {trips:?}");
            assert!(
                trips.by_op.iter().all(|(_, (lease, _))| *lease >= 1),
                "{var}: {trips:?}"
            );
        }
    }
}
