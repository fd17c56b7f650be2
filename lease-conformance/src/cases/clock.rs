//! The database's clock, migrate and available.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use lease_core::{Leases, UtcMillis};
use tokio::task::JoinSet;

use super::{claimed, db_now, ok};
use crate::Ctx;

/// The database's clock reads UTC milliseconds within minutes of this
/// process's clock, and does not go back.
pub async fn database_clock_is_utc_millis_near_process_clock(ctx: Ctx) {
    let leases = ctx.leases();
    let db = db_now(&leases).await;
    let local = UtcMillis::try_from(SystemTime::now()).unwrap_or(UtcMillis::EPOCH);
    let skew = (db.as_millis() - local.as_millis()).abs();
    assert!(
        skew < 5 * 60 * 1000,
        "the database clock reads {db}, this process {local}: {skew} ms apart. now_ms must be \
         UTC milliseconds since the UNIX epoch (not seconds, not local time)"
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    let later = db_now(&leases).await;
    assert!(
        later.as_millis() >= db.as_millis() + 10,
        "20 ms later the database clock read {later}, first {db}: it must advance in milliseconds \
         (read the statement's clock, e.g. clock_timestamp(), not the transaction's start)"
    );
}

/// Expiry is judged by the database clock: a lease of L ms is refused to a
/// rival while the database's now is before claim + L, and free after.
pub async fn expiry_is_judged_by_database_clock(ctx: Ctx) {
    let leases = ctx.short_leases();
    let rival = ctx.leases();
    let name = ctx.name("clocked");
    let lease = i64::try_from(crate::SHORT_LEASE.as_millis()).unwrap_or(i64::MAX);
    let before = db_now(&leases).await;
    let _h = claimed(&leases, &name, "no row exists for it yet").await;
    let after = db_now(&leases).await;
    loop {
        let t0 = db_now(&rival).await;
        let got = ok(rival.claim(&name).await, "a rival's claim");
        let t1 = db_now(&rival).await;
        match got {
            None => assert!(
                t0.as_millis() < after.as_millis() + lease + 2,
                "the rival was refused although the database clock read {t0}, past the claim \
                 (no later than {after}) plus the lease of {lease} ms: expiry must be \
                 expires_at_ms = now + lease_ms by the database clock"
            ),
            Some(h) => {
                assert!(
                    t1.as_millis() + 2 >= before.as_millis() + lease,
                    "the rival claimed at database time {t1} a name claimed at {before} or later \
                     with a lease of {lease} ms: the lease ended early"
                );
                assert_eq!(h.term(), 2);
                return;
            }
        }
        assert!(
            t1.as_millis() < after.as_millis() + 10 * lease,
            "the name was still held 10 leases after its claim: it never expired"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// migrate is idempotent: running it again keeps the table and its leases.
pub async fn migrate_again_keeps_existing_leases(ctx: Ctx) {
    let leases = ctx.leases();
    let name = ctx.name("kept");
    let h = claimed(&leases, &name, "no row exists for it yet").await;
    ok(leases.migrate().await, "a second migrate");
    ok(leases.migrate().await, "a third migrate");
    assert_eq!(
        ok(h.verify().await, "verify after migrating again"),
        1,
        "migrate must not drop or empty an existing table"
    );
}

/// Eight replicas running migrate at once on a database without the table
/// all succeed, and the table then works.
pub async fn concurrent_migrations_of_a_new_table_all_succeed(ctx: Ctx) {
    let store = ctx.fresh_store().await;
    let mut set = JoinSet::new();
    let barrier = Arc::new(tokio::sync::Barrier::new(8));
    for _ in 0..8 {
        let store = store.clone();
        let barrier = barrier.clone();
        let _ = set.spawn(async move {
            let _ = barrier.wait().await;
            Leases::from_arc(store).migrate().await
        });
    }
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok(result) => ok(
                result,
                "one of 8 concurrent migrations of a new table (CREATE TABLE IF NOT EXISTS can \
                 race on the catalog: serialise it or retry)",
            ),
            Err(e) => panic!("a migrating task failed: {e}"),
        }
    }
    let leases = Leases::from_arc(store);
    let h = claimed(&leases, &ctx.name("after-migrate"), "the table is new").await;
    assert_eq!(h.term(), 1);
}

/// available reports a database that answers.
pub async fn available_on_a_reachable_database(ctx: Ctx) {
    ok(ctx.leases().available().await, "available()");
}

/// A statement on a table not yet migrated fails as a missing table, which
/// says to run `migrate()` and is not retryable (a retry loop would spin on
/// it forever); the backend tells it apart by its driver's error.
pub async fn statement_on_a_missing_table_says_to_migrate_and_is_not_retried(ctx: Ctx) {
    let store = ctx.fresh_store().await; // a table of its own, not migrated
    let leases = Leases::from_arc(store);
    let err = match leases.claim(&ctx.name("unmigrated")).await {
        Err(e) => e,
        Ok(claimed) => panic!(
            "a claim on a table that does not exist succeeded ({claimed:?}): the factory \
             must give a store on a fresh, missing table"
        ),
    };
    assert!(
        matches!(err, lease_core::Error::MissingTable { .. }),
        "a claim on a missing table must be Error::MissingTable; the backend's \
         LeaseStore::classify must return DbErrorKind::MissingTable for its driver's \
         'no such table' error, but the claim failed with: {err}"
    );
    assert!(!err.is_retryable(), "a missing table is not retryable");
    assert!(err.to_string().contains("migrate"), "{err}");
    let get = leases.get(&ctx.name("unmigrated")).await;
    assert!(
        matches!(get, Err(lease_core::Error::MissingTable { .. })),
        "a read on a missing table must be Error::MissingTable too: {get:?}"
    );
}
