//! What the shared protocol suite cannot see: SQLite's own behaviour under the
//! store (WAL, several connections to one file, locks, the database clock),
//! and every statement's branches checked against the row it leaves.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] functions fail loudly"
)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lease_core::GuardError;
use lease_core::{
    ClaimRequest, EndCause, FinishRequest, Finished, InstantClaim, LeaseContext, LeaseStore,
    Leases, LostCause, Token, Unfinished, UtcMillis,
};
use lease_sqlite::{SqliteError, SqliteStore, SqliteStoreBuilder};
use rusqlite::Connection;
use tokio::sync::Barrier;

const LEASE_MS: i64 = 60_000;

fn db_file() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("leases.db");
    (dir, path)
}

async fn migrated(path: &Path) -> SqliteStore {
    let store = SqliteStore::open(path).expect("open");
    store.migrate().await.expect("migrate");
    store
}

/// A plain connection of its own to the file, to look at rows directly.
fn raw(path: &Path) -> Connection {
    let conn = Connection::open(path).expect("raw connection");
    conn.busy_timeout(Duration::from_secs(5))
        .expect("busy timeout");
    conn
}

/// (holder, term, expires_at_ms, slot_ms, unfinished_slot_ms, rerun_slot_ms)
type Row = (String, i64, i64, i64, i64, i64);

fn row(conn: &Connection, name: &str) -> Option<Row> {
    conn.query_row(
        "SELECT holder, term, expires_at_ms, slot_ms, unfinished_slot_ms, rerun_slot_ms \
           FROM gst_leases WHERE name = ?1",
        [name],
        |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        },
    )
    .map(Some)
    .or_else(|e| match e {
        rusqlite::Error::QueryReturnedNoRows => Ok(None),
        e => Err(e),
    })
    .expect("read row")
}

fn set_expiry(conn: &Connection, name: &str, expires_at_ms: i64) {
    let n = conn
        .execute(
            "UPDATE gst_leases SET expires_at_ms = ?2 WHERE name = ?1",
            rusqlite::params![name, expires_at_ms],
        )
        .expect("set expiry");
    assert_eq!(n, 1);
}

fn process_now_ms() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after the epoch");
    i64::try_from(since.as_millis()).expect("fits")
}

#[tokio::test]
async fn files_are_in_wal_mode() {
    let (_dir, path) = db_file();
    let store = migrated(&path).await;
    assert_eq!(
        store
            .claim(ClaimRequest {
                name: "wal",
                token: Token::new("h1"),
                instance: "i",
                lease_ms: LEASE_MS
            })
            .await
            .unwrap(),
        Some(1)
    );
    let mode: String = raw(&path)
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode.to_ascii_lowercase(), "wal");
    assert!(path.with_file_name("leases.db-wal").exists());
    assert_eq!(store.path(), Some(path.as_path()));
}

#[tokio::test]
async fn a_missing_file_is_created_and_migrate_is_idempotent() {
    let (_dir, path) = db_file();
    assert!(!path.exists());
    let store = SqliteStore::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    assert!(path.exists());
    for _ in 0..3 {
        store.migrate().await.unwrap();
    }
    assert_eq!(
        store
            .claim(ClaimRequest {
                name: "a",
                token: Token::new("h1"),
                instance: "i",
                lease_ms: LEASE_MS
            })
            .await
            .unwrap(),
        Some(1)
    );
    store.migrate().await.unwrap();
    assert_eq!(store.verify("a", Token::new("h1")).await.unwrap(), Some(1));
}

#[tokio::test]
async fn eight_stores_migrating_an_empty_file_at_once_all_succeed() {
    let (_dir, path) = db_file();
    let barrier = Arc::new(Barrier::new(8));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (path, barrier) = (path.clone(), Arc::clone(&barrier));
        tasks.push(tokio::spawn(async move {
            let store = SqliteStore::open(&path).unwrap();
            let _ = barrier.wait().await;
            store.migrate().await
        }));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
}

/// Opening switches a new file to WAL; stores opening it at once from
/// threads of their own all get it in WAL.
#[test]
fn eight_stores_opening_a_new_file_at_once_all_open() {
    let (_dir, path) = db_file();
    let barrier = Arc::new(std::sync::Barrier::new(8));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (path, barrier) = (path.clone(), Arc::clone(&barrier));
            std::thread::spawn(move || {
                let _ = barrier.wait();
                SqliteStore::open(&path).map(drop)
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap().unwrap();
    }
}

/// 8 stores, each its own connection to one file, race for one name: once
/// fresh, once expired. Exactly one wins each time, and no error surfaces.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_stores_on_one_file_race_a_claim_and_one_wins() {
    let (_dir, path) = db_file();
    let _ = migrated(&path).await;
    let stores: Vec<SqliteStore> = (0..8).map(|_| SqliteStore::open(&path).unwrap()).collect();
    for round in 0..2 {
        let barrier = Arc::new(Barrier::new(stores.len()));
        let mut tasks = Vec::new();
        for (i, store) in stores.iter().enumerate() {
            let (store, barrier) = (store.clone(), Arc::clone(&barrier));
            tasks.push(tokio::spawn(async move {
                let _ = barrier.wait().await;
                store
                    .claim(ClaimRequest {
                        name: "race",
                        token: Token::new(&format!("h{round}-{i}")),
                        instance: "i",
                        lease_ms: 200,
                    })
                    .await
            }));
        }
        let mut won = Vec::new();
        for task in tasks {
            if let Some(term) = task.await.unwrap().expect("no error surfaces") {
                won.push(term);
            }
        }
        assert_eq!(won, vec![round + 1], "round {round}");
        tokio::time::sleep(Duration::from_millis(250)).await; // let it expire
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_stores_on_one_file_race_an_instant_and_one_wins() {
    let (_dir, path) = db_file();
    let _ = migrated(&path).await;
    let stores: Vec<SqliteStore> = (0..8).map(|_| SqliteStore::open(&path).unwrap()).collect();
    for (round, slot) in [(0_u64, 1_000_i64), (1, 2_000)] {
        let barrier = Arc::new(Barrier::new(stores.len()));
        let mut tasks = Vec::new();
        for (i, store) in stores.iter().enumerate() {
            let (store, barrier) = (store.clone(), Arc::clone(&barrier));
            tasks.push(tokio::spawn(async move {
                let _ = barrier.wait().await;
                let holder = format!("h{round}-{i}");
                store
                    .claim_instant(
                        ClaimRequest {
                            name: "job",
                            token: Token::new(&holder),
                            instance: "i",
                            lease_ms: 200,
                        },
                        slot,
                    )
                    .await
            }));
        }
        let mut won = Vec::new();
        for task in tasks {
            match task.await.unwrap().expect("no error surfaces") {
                InstantClaim::Claimed { term, superseded } => won.push((term, superseded)),
                InstantClaim::Refused => {}
            }
        }
        let superseded = (round == 1)
            .then(|| Unfinished::new("job", UtcMillis::from_millis(1_000), false, round));
        assert_eq!(won, vec![(round + 1, superseded)], "round {round}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Expiry is judged against SQLite's clock, and written from it.
#[tokio::test]
async fn the_clock_is_the_databases() {
    let (_dir, path) = db_file();
    let store = migrated(&path).await;
    let conn = raw(&path);

    let before = store.now_ms().await.unwrap();
    assert!(
        (before - process_now_ms()).abs() < 120_000,
        "clocks minutes apart"
    );
    assert_eq!(
        store
            .claim(ClaimRequest {
                name: "clock",
                token: Token::new("h1"),
                instance: "i",
                lease_ms: LEASE_MS
            })
            .await
            .unwrap(),
        Some(1)
    );
    let after = store.now_ms().await.unwrap();
    let (_, _, expires, ..) = row(&conn, "clock").unwrap();
    assert!(
        (before + LEASE_MS..=after + LEASE_MS).contains(&expires),
        "{before} + {LEASE_MS} <= {expires} <= {after} + {LEASE_MS}"
    );

    // A row expiring one second from SQLite's now is held, whatever the
    // process thinks; one that expired a millisecond ago is free.
    let db_now: i64 = conn
        .query_row(
            "SELECT CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    set_expiry(&conn, "clock", db_now + 1_000);
    assert_eq!(
        store
            .claim(ClaimRequest {
                name: "clock",
                token: Token::new("h2"),
                instance: "i",
                lease_ms: LEASE_MS
            })
            .await
            .unwrap(),
        None
    );
    assert!(
        store
            .renew("clock", Token::new("h1"), LEASE_MS)
            .await
            .unwrap()
            .is_some()
    );
    set_expiry(&conn, "clock", db_now - 1);
    assert_eq!(store.verify("clock", Token::new("h1")).await.unwrap(), None);
    assert!(
        store
            .renew("clock", Token::new("h1"), LEASE_MS)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        store
            .claim(ClaimRequest {
                name: "clock",
                token: Token::new("h2"),
                instance: "i",
                lease_ms: LEASE_MS
            })
            .await
            .unwrap(),
        Some(2)
    );
}

#[tokio::test]
async fn now_is_whole_milliseconds_and_moves_forward() {
    let store = SqliteStore::open_in_memory().unwrap();
    let first = store.now_ms().await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let second = store.now_ms().await.unwrap();
    assert!(second >= first + 15, "{first} then {second}");
}

#[tokio::test]
async fn names_compare_byte_for_byte() {
    let (_dir, path) = db_file();
    let store = migrated(&path).await;
    for (i, name) in ["job", "JOB", "job "].into_iter().enumerate() {
        let holder = format!("h{i}");
        assert_eq!(
            store
                .claim(ClaimRequest {
                    name,
                    token: Token::new(&holder),
                    instance: "i",
                    lease_ms: LEASE_MS
                })
                .await
                .unwrap(),
            Some(1),
            "{name:?}"
        );
    }
    let rows: i64 = raw(&path)
        .query_row("SELECT count(*) FROM gst_leases", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 3);
    assert_eq!(
        store.verify("JOB", Token::new("h1")).await.unwrap(),
        Some(1)
    );
    assert_eq!(store.verify("job", Token::new("h1")).await.unwrap(), None);
}

#[tokio::test]
async fn tables_are_configurable_and_independent() {
    let (_dir, path) = db_file();
    let default = migrated(&path).await;
    let other = SqliteStoreBuilder::from_path(&path)
        .with_table("Other_Leases_2")
        .build()
        .unwrap();
    assert_eq!(other.table(), "Other_Leases_2");
    other.migrate().await.unwrap();
    assert_eq!(
        default
            .claim(ClaimRequest {
                name: "x",
                token: Token::new("h1"),
                instance: "i",
                lease_ms: LEASE_MS
            })
            .await
            .unwrap(),
        Some(1)
    );
    assert_eq!(
        other
            .claim(ClaimRequest {
                name: "x",
                token: Token::new("h2"),
                instance: "i",
                lease_ms: LEASE_MS
            })
            .await
            .unwrap(),
        Some(1)
    );
    let in_other: i64 = raw(&path)
        .query_row(
            "SELECT term FROM \"Other_Leases_2\" WHERE holder = 'h2'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(in_other, 1);
}

#[test]
fn invalid_table_names_are_refused_with_the_name() {
    let err = SqliteStoreBuilder::in_memory()
        .with_table("my-leases")
        .build()
        .unwrap_err();
    assert!(matches!(err, SqliteError::InvalidTable { ref table, .. } if table == "my-leases"));
}

/// The busy timeout follows the coordinator's timings: with a 2 s local
/// deadline (statement timeout 1 s), a claim behind another connection's
/// write lock fails after about 1 s, not the default 5 s.
#[tokio::test]
async fn the_busy_timeout_is_derived_from_the_timings() {
    let (_dir, path) = db_file();
    let timings = lease_core::Timings::builder()
        .lease(Duration::from_secs(4))
        .renew(Duration::from_millis(500))
        .deadline(Duration::from_secs(2))
        .grace(Duration::from_secs(2))
        .build()
        .unwrap();
    let store = SqliteStoreBuilder::from_path(&path)
        .with_timings(&timings)
        .build()
        .unwrap();
    store.migrate().await.unwrap();
    let conn = raw(&path);
    conn.execute_batch("BEGIN IMMEDIATE").unwrap();
    let started = std::time::Instant::now();
    let err = store
        .claim(ClaimRequest {
            name: "busy",
            token: Token::new("h1"),
            instance: "i",
            lease_ms: LEASE_MS,
        })
        .await
        .unwrap_err();
    let waited = started.elapsed();
    conn.execute_batch("ROLLBACK").unwrap();
    assert!(err.to_string().contains("locked"), "{err}");
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_millis(4_500),
        "waited {waited:?} for the write lock; the timings' statement timeout is 1 s"
    );
    // What the store tells a coordinator its bounds came from (issue 23,
    // item 9): the timings, unless the busy timeout was set by hand.
    assert_eq!(LeaseStore::timings(&store), Some(timings));
    assert_eq!(lease_core::Leases::new(store).timings(), &timings);
    let by_hand = SqliteStoreBuilder::from_path(&path)
        .with_timings(&timings)
        .with_busy_timeout(Duration::from_millis(250))
        .build()
        .unwrap();
    assert_eq!(LeaseStore::timings(&by_hand), None);
    let default = SqliteStoreBuilder::from_path(&path).build().unwrap();
    assert_eq!(
        LeaseStore::timings(&default),
        Some(lease_core::Timings::default())
    );
}

/// Another connection holding the write lock past the busy timeout makes a
/// write fail with SQLite's error, not hang or panic; the store works again
/// once the lock is gone.
#[tokio::test]
async fn a_write_lock_held_elsewhere_fails_after_the_busy_timeout() {
    let (_dir, path) = db_file();
    let store = SqliteStoreBuilder::from_path(&path)
        .with_busy_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    store.migrate().await.unwrap();
    let conn = raw(&path);
    conn.execute_batch("BEGIN IMMEDIATE").unwrap();
    let err = store
        .claim(ClaimRequest {
            name: "busy",
            token: Token::new("h1"),
            instance: "i",
            lease_ms: LEASE_MS,
        })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("locked"), "{err}");
    let err = store
        .claim_instant(
            ClaimRequest {
                name: "busy",
                token: Token::new("h1"),
                instance: "i",
                lease_ms: LEASE_MS,
            },
            5,
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("locked"), "{err}");
    // Readers are not blocked by the writer in WAL mode.
    assert_eq!(store.last_instant("busy").await.unwrap(), None);
    conn.execute_batch("COMMIT").unwrap();
    assert_eq!(
        store
            .claim(ClaimRequest {
                name: "busy",
                token: Token::new("h1"),
                instance: "i",
                lease_ms: LEASE_MS
            })
            .await
            .unwrap(),
        Some(1)
    );
}

/// The coordinator drops a call that outlives its bound. The store stays
/// usable, and calls dropped while queued behind it never run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_calls_leave_the_store_usable() {
    let (_dir, path) = db_file();
    let store = SqliteStoreBuilder::from_path(&path)
        .with_busy_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    store.migrate().await.unwrap();
    let conn = raw(&path);
    conn.execute_batch("BEGIN IMMEDIATE").unwrap();
    // The first call (a renewal of nothing) waits on the lock while holding
    // the connection; the claims queue behind it and are dropped before they
    // reach it.
    let first = store.renew("dropped", Token::new("h0"), LEASE_MS);
    assert!(
        tokio::time::timeout(Duration::from_millis(50), first)
            .await
            .is_err()
    );
    for i in 1..4 {
        let holder = format!("h{i}");
        let call = store.claim(ClaimRequest {
            name: "dropped",
            token: Token::new(&holder),
            instance: "i",
            lease_ms: LEASE_MS,
        });
        assert!(
            tokio::time::timeout(Duration::from_millis(50), call)
                .await
                .is_err()
        );
    }
    conn.execute_batch("COMMIT").unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(row(&conn, "dropped"), None, "a dropped, queued claim ran");
    assert!(store.now_ms().await.is_ok());
    assert!(
        store
            .claim(ClaimRequest {
                name: "after",
                token: Token::new("h9"),
                instance: "i",
                lease_ms: LEASE_MS
            })
            .await
            .unwrap()
            .is_some()
    );
}

/// Each statement's branches, against the row it leaves.
#[tokio::test]
async fn every_statement_leaves_the_row_the_protocol_says() {
    let (_dir, path) = db_file();
    let store = migrated(&path).await;
    let conn = raw(&path);

    // claim: insert, refusal, takeover after release (expires_at_ms = 0).
    assert_eq!(
        store
            .claim(ClaimRequest {
                name: "c",
                token: Token::new("h1"),
                instance: "i1",
                lease_ms: LEASE_MS
            })
            .await
            .unwrap(),
        Some(1)
    );
    assert_eq!(
        store
            .claim(ClaimRequest {
                name: "c",
                token: Token::new("h2"),
                instance: "i2",
                lease_ms: LEASE_MS
            })
            .await
            .unwrap(),
        None
    );
    assert!(
        store
            .renew("c", Token::new("h1"), LEASE_MS)
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        store
            .renew("c", Token::new("h1"), LEASE_MS)
            .await
            .unwrap()
            .is_some(),
        "same value still held"
    );
    assert!(
        store
            .renew("c", Token::new("h2"), LEASE_MS)
            .await
            .unwrap()
            .is_none()
    );
    assert!(store.release("c", Token::new("h1")).await.unwrap());
    assert_eq!(
        row(&conn, "c").unwrap().2,
        0,
        "release sets expires_at_ms = 0"
    );
    assert!(
        store.release("c", Token::new("h1")).await.unwrap(),
        "release matches the holder only"
    );
    assert!(
        store
            .renew("c", Token::new("h1"), LEASE_MS)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        store
            .claim(ClaimRequest {
                name: "c",
                token: Token::new("h2"),
                instance: "i2",
                lease_ms: LEASE_MS
            })
            .await
            .unwrap(),
        Some(2)
    );
    assert!(!store.release("c", Token::new("h1")).await.unwrap());
    assert_eq!(store.verify("c", Token::new("h2")).await.unwrap(), Some(2));
    assert_eq!(
        row(&conn, "c").unwrap().3,
        0,
        "a plain claim has no instant"
    );

    // claim_instant: insert with both slots, then refusals.
    let claimed = |term: u64, superseded: Option<(i64, bool)>| InstantClaim::Claimed {
        term,
        superseded: superseded
            .map(|(ms, rerun)| Unfinished::new("s", UtcMillis::from_millis(ms), rerun, term - 1)),
    };
    assert_eq!(
        store
            .claim_instant(
                ClaimRequest {
                    name: "s",
                    token: Token::new("h1"),
                    instance: "i",
                    lease_ms: LEASE_MS
                },
                100
            )
            .await
            .unwrap(),
        claimed(1, None)
    );
    let (_, _, _, slot, unfinished, rerun) = row(&conn, "s").unwrap();
    assert_eq!((slot, unfinished, rerun), (100, 100, 0));
    assert_eq!(
        store
            .claim_instant(
                ClaimRequest {
                    name: "s",
                    token: Token::new("h2"),
                    instance: "i",
                    lease_ms: LEASE_MS
                },
                200
            )
            .await
            .unwrap(),
        InstantClaim::Refused,
        "held"
    );
    assert!(store.release("s", Token::new("h1")).await.unwrap());
    assert_eq!(
        store
            .claim_instant(
                ClaimRequest {
                    name: "s",
                    token: Token::new("h2"),
                    instance: "i",
                    lease_ms: LEASE_MS
                },
                100
            )
            .await
            .unwrap(),
        InstantClaim::Refused,
        "not later"
    );
    // find + claim again, then the cut-short rerun is superseded with rerun.
    let found = store.find_unfinished(&["s", "c", "nobody"]).await.unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(
        (
            found[0].name.as_str(),
            found[0].term(),
            found[0].instant.as_millis()
        ),
        ("s", 1, 100)
    );
    assert!(
        store
            .claim_rerun(
                ClaimRequest {
                    name: "s",
                    token: Token::new("h3"),
                    instance: "i",
                    lease_ms: LEASE_MS
                },
                1
            )
            .await
            .unwrap()
    );
    assert!(
        !store
            .claim_rerun(
                ClaimRequest {
                    name: "s",
                    token: Token::new("h4"),
                    instance: "i",
                    lease_ms: LEASE_MS
                },
                1
            )
            .await
            .unwrap(),
        "stale term"
    );
    assert!(
        !store
            .claim_rerun(
                ClaimRequest {
                    name: "s",
                    token: Token::new("h4"),
                    instance: "i",
                    lease_ms: LEASE_MS
                },
                u64::MAX
            )
            .await
            .unwrap()
    );
    assert_eq!(row(&conn, "s").unwrap().5, 100, "rerun_slot_ms = slot_ms");
    assert!(store.release("s", Token::new("h3")).await.unwrap());
    assert!(
        store.find_unfinished(&["s"]).await.unwrap().is_empty(),
        "rerun once"
    );
    assert_eq!(
        store
            .claim_instant(
                ClaimRequest {
                    name: "s",
                    token: Token::new("h5"),
                    instance: "i",
                    lease_ms: LEASE_MS
                },
                200
            )
            .await
            .unwrap(),
        claimed(3, Some((100, true)))
    );

    // finish: holder branch with passed taken along, only when not in the
    // database's future.
    let now = store.now_ms().await.unwrap();
    assert_eq!(
        store
            .finish(FinishRequest {
                name: "s",
                token: Some(Token::new("h5")),
                instant_ms: 200,
                passed_ms: now + 3_600_000
            })
            .await
            .unwrap(),
        Finished::Released
    );
    let (_, _, expires, slot, unfinished, _) = row(&conn, "s").unwrap();
    assert_eq!(
        (expires, slot, unfinished),
        (0, 200, 0),
        "future passed not taken"
    );
    assert_eq!(
        store
            .claim_instant(
                ClaimRequest {
                    name: "s",
                    token: Token::new("h6"),
                    instance: "i",
                    lease_ms: LEASE_MS
                },
                300
            )
            .await
            .unwrap(),
        claimed(4, None),
        "a finished instant is not given up"
    );
    assert_eq!(
        store
            .finish(FinishRequest {
                name: "s",
                token: Some(Token::new("h6")),
                instant_ms: 300,
                passed_ms: 400
            })
            .await
            .unwrap(),
        Finished::Released
    );
    assert_eq!(row(&conn, "s").unwrap().3, 400, "passed taken along");
    assert_eq!(store.last_instant("s").await.unwrap(), Some(400));
    assert_eq!(
        store
            .claim_instant(
                ClaimRequest {
                    name: "s",
                    token: Token::new("h7"),
                    instance: "i",
                    lease_ms: LEASE_MS
                },
                400
            )
            .await
            .unwrap(),
        InstantClaim::Refused,
        "skipped instants stay skipped"
    );

    // finish without the lease: recorded, unless a later instant was claimed.
    assert_eq!(
        store
            .claim_instant(
                ClaimRequest {
                    name: "s",
                    token: Token::new("h7"),
                    instance: "i",
                    lease_ms: LEASE_MS
                },
                500
            )
            .await
            .unwrap(),
        claimed(5, None)
    );
    assert!(store.release("s", Token::new("h7")).await.unwrap());
    assert_eq!(
        store
            .claim(ClaimRequest {
                name: "s",
                token: Token::new("h8"),
                instance: "i",
                lease_ms: LEASE_MS
            })
            .await
            .unwrap(),
        Some(6)
    );
    assert_eq!(
        store
            .finish(FinishRequest {
                name: "s",
                token: Some(Token::new("h7")),
                instant_ms: 500,
                passed_ms: 900
            })
            .await
            .unwrap(),
        Finished::RecordedWithoutLease
    );
    let (holder, _, expires, slot, unfinished, _) = row(&conn, "s").unwrap();
    assert_eq!((holder.as_str(), slot, unfinished), ("h8", 500, 0));
    assert!(expires > 0, "the new holder keeps the name");
    assert_eq!(
        store
            .finish(FinishRequest {
                name: "s",
                token: Some(Token::new("h7")),
                instant_ms: 500,
                passed_ms: 900
            })
            .await
            .unwrap(),
        Finished::NotRecorded,
        "already recorded"
    );
    assert!(store.release("s", Token::new("h8")).await.unwrap());
    assert_eq!(
        store
            .claim_instant(
                ClaimRequest {
                    name: "s",
                    token: Token::new("h9"),
                    instance: "i",
                    lease_ms: LEASE_MS
                },
                600
            )
            .await
            .unwrap(),
        claimed(7, None)
    );
    assert!(store.release("s", Token::new("h9")).await.unwrap());
    assert_eq!(
        store
            .claim_instant(
                ClaimRequest {
                    name: "s",
                    token: Token::new("h10"),
                    instance: "i",
                    lease_ms: LEASE_MS
                },
                700
            )
            .await
            .unwrap(),
        claimed(8, Some((600, false)))
    );
    assert_eq!(
        store
            .finish(FinishRequest {
                name: "s",
                token: None,
                instant_ms: 600,
                passed_ms: 0
            })
            .await
            .unwrap(),
        Finished::NotRecorded,
        "a later instant was claimed"
    );
    assert_eq!(
        store
            .finish(FinishRequest {
                name: "s",
                token: None,
                instant_ms: 700,
                passed_ms: 0
            })
            .await
            .unwrap(),
        Finished::RecordedWithoutLease,
        "no holder given: the fallback only"
    );
    assert!(
        store
            .verify("s", Token::new("h10"))
            .await
            .unwrap()
            .is_some(),
        "the lease is kept"
    );

    assert_eq!(store.last_instant("nobody").await.unwrap(), None);
    assert_eq!(store.last_instant("c").await.unwrap(), Some(0));
}

/// More names than SQLite binds in one statement are still answered.
#[tokio::test]
async fn unfinished_instants_of_many_names() {
    let store = SqliteStore::open_in_memory().unwrap();
    store.migrate().await.unwrap();
    let names: Vec<String> = (0..40_000).map(|i| format!("job-{i}")).collect();
    for name in [&names[7], &names[35_000]] {
        assert!(matches!(
            store
                .claim_instant(
                    ClaimRequest {
                        name,
                        token: Token::new("h"),
                        instance: "i",
                        lease_ms: LEASE_MS
                    },
                    10
                )
                .await
                .unwrap(),
            InstantClaim::Claimed { .. }
        ));
        assert!(store.release(name, Token::new("h")).await.unwrap());
    }
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut found: Vec<String> = store
        .find_unfinished(&refs)
        .await
        .unwrap()
        .into_iter()
        .map(|row| row.name)
        .collect();
    found.sort();
    assert_eq!(found, vec!["job-35000".to_owned(), "job-7".to_owned()]);
}

/// The crate's own example, through the coordinator.
#[tokio::test]
async fn leases_on_a_file() {
    let (_dir, path) = db_file();
    let leases = Leases::new(SqliteStore::open(&path).unwrap());
    leases.migrate().await.unwrap();
    let handle = leases.claim("lock").await.unwrap().expect("free");
    assert_eq!(handle.term(), 1);
    assert!(leases.claim("lock").await.unwrap().is_none());
    handle.renew().await.unwrap();
    assert_eq!(handle.verify().await.unwrap(), 1);
    handle.release().await.unwrap();
    assert_eq!(leases.claim("lock").await.unwrap().expect("free").term(), 2);
}

// ---- guarded transactions ----

/// A coordinator on its own store (its own connection) to `path`, and a
/// context for a fresh claim of `name` through it.
async fn claimed(path: &Path, name: &str) -> (SqliteStore, lease_core::Handle, LeaseContext) {
    let store = SqliteStore::open(path).unwrap();
    let leases = Leases::new(store.clone());
    leases.migrate().await.unwrap();
    let handle = leases.claim(name).await.unwrap().expect("free");
    // No renewals: a context ended only by the test.
    let ctx = LeaseContext::new(handle.clone(), Default::default());
    (store, handle, ctx)
}

fn count(conn: &Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

#[tokio::test]
async fn a_guarded_transaction_commits_while_the_lease_is_held() {
    let (_dir, path) = db_file();
    let (store, handle, ctx) = claimed(&path, "tx").await;
    let term = store
        .transaction(&ctx, |tx| {
            tx.execute_batch("CREATE TABLE work (term INTEGER)")?;
            let _ = tx.execute("INSERT INTO work VALUES (?1)", [7])?;
            Ok::<_, SqliteError>(42)
        })
        .await
        .unwrap();
    assert_eq!(term, 42);
    assert_eq!(count(&raw(&path), "SELECT count(*) FROM work"), 1);
    handle.release().await.unwrap();
}

#[tokio::test]
async fn a_guarded_transaction_on_a_lost_lease_runs_nothing() {
    let (_dir, path) = db_file();
    let (store, handle, ctx) = claimed(&path, "tx").await;
    handle.release().await.unwrap();
    let ran = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&ran);
    let err = store
        .transaction(&ctx, move |_tx| {
            flag.store(true, Ordering::SeqCst);
            Ok::<_, SqliteError>(())
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&err, GuardError::Lost(e) if e.lost_cause() == Some(LostCause::NotHolder)),
        "{err:?}"
    );
    assert!(err.is_lost());
    assert!(!ran.load(Ordering::SeqCst));
    // A successor's term does not pass for the old holder's either.
    let leases = Leases::new(SqliteStore::open(&path).unwrap());
    assert_eq!(leases.claim("tx").await.unwrap().expect("free").term(), 2);
    let err = store
        .transaction(&ctx, |_tx| Ok::<_, SqliteError>(()))
        .await
        .unwrap_err();
    assert!(err.is_lost(), "{err:?}");
}

/// The fence: a successor cannot claim the name while the holder's guarded
/// transaction is open, even once the lease has expired by the database
/// clock; it claims as soon as the transaction has committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_successor_waits_for_the_guarded_transaction_to_end() {
    let (_dir, path) = db_file();
    let (store, _handle, ctx) = claimed(&path, "fenced").await;
    let conn = raw(&path);
    let db_now = store.now_ms().await.unwrap();
    set_expiry(&conn, "fenced", db_now + 100);
    drop(conn);

    let successor = SqliteStoreBuilder::from_path(&path)
        .with_busy_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let committed = Arc::new(std::sync::Mutex::new(None));
    let mark = Arc::clone(&committed);
    let (started, in_work) = tokio::sync::oneshot::channel();
    let tx = {
        let (store, ctx) = (store.clone(), ctx.clone());
        tokio::spawn(async move {
            store
                .transaction(&ctx, move |tx| {
                    tx.execute_batch("CREATE TABLE work (x INTEGER)")?;
                    started.send(()).unwrap();
                    std::thread::sleep(Duration::from_millis(600));
                    *mark.lock().unwrap() = Some(std::time::Instant::now());
                    Ok::<_, SqliteError>(())
                })
                .await
        })
    };
    in_work.await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await; // past the expiry
    let claimed = successor
        .claim(ClaimRequest {
            name: "fenced",
            token: Token::new("successor"),
            instance: "i",
            lease_ms: LEASE_MS,
        })
        .await
        .unwrap();
    let claimed_at = std::time::Instant::now();
    tx.await.unwrap().unwrap();
    assert_eq!(
        claimed,
        Some(2),
        "the successor claims once the transaction ended"
    );
    let committed_at = committed.lock().unwrap().expect("the work ran");
    assert!(
        claimed_at > committed_at,
        "the successor claimed inside the transaction"
    );
}

/// The context ending interrupts the work's statement and rolls back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guarded_transaction_ends_with_its_context() {
    let (_dir, path) = db_file();
    let (store, _handle, ctx) = claimed(&path, "ends").await;
    let ender = ctx.clone();
    drop(tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        ender.end(EndCause::Lost(LostCause::DeadlineExceeded));
    }));
    let started = std::time::Instant::now();
    let err = store
        .transaction(&ctx, |tx| {
            tx.execute_batch("CREATE TABLE work (x INTEGER); INSERT INTO work VALUES (1)")?;
            // A statement that would run for minutes.
            let _ = tx.query_row(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) \
                 SELECT count(*) FROM n",
                [],
                |r| r.get::<_, i64>(0),
            )?;
            Ok::<_, SqliteError>(())
        })
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "not interrupted"
    );
    assert!(
        matches!(&err, GuardError::Lost(e) if e.lost_cause() == Some(LostCause::DeadlineExceeded)),
        "{err:?}"
    );
    assert!(err.is_lost());
    let tables = count(
        &raw(&path),
        "SELECT count(*) FROM sqlite_schema WHERE name = 'work'",
    );
    assert_eq!(tables, 0, "rolled back");
    // An ended context opens no transaction, and the store works on.
    let err = store
        .transaction(&ctx, |_tx| Ok::<_, SqliteError>(()))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, GuardError::Lost(e) if e.lost_cause() == Some(LostCause::DeadlineExceeded)),
        "{err:?}"
    );
    assert!(store.now_ms().await.is_ok());
}

/// Dropping the future before the commit rolls back; an error of the work
/// rolls back; a panic of the work reaches the caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guarded_transaction_dropped_or_failed_rolls_back() {
    let (_dir, path) = db_file();
    let (store, _handle, ctx) = claimed(&path, "drop").await;
    let slow = store.transaction(&ctx, |tx| {
        tx.execute_batch("CREATE TABLE dropped (x INTEGER)")?;
        std::thread::sleep(Duration::from_millis(300));
        Ok::<_, SqliteError>(())
    });
    assert!(
        tokio::time::timeout(Duration::from_millis(50), slow)
            .await
            .is_err()
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    let conn = raw(&path);
    let schema = "SELECT count(*) FROM sqlite_schema WHERE name IN ('dropped', 'failed')";
    assert_eq!(count(&conn, schema), 0);

    let err = store
        .transaction(&ctx, |tx| {
            tx.execute_batch("CREATE TABLE failed (x INTEGER)")
                .map_err(|e| e.to_string())?;
            Err::<(), _>("refused".to_owned())
        })
        .await
        .unwrap_err();
    match err {
        GuardError::Work(e) if e == "refused" => {}
        other => panic!("the work's own error expected, got {other:?}"),
    }
    assert_eq!(count(&conn, schema), 0);

    let panicked = {
        let (store, ctx) = (store.clone(), ctx.clone());
        tokio::spawn(async move {
            store
                .transaction(&ctx, |_tx| -> Result<(), SqliteError> {
                    panic!("in the work")
                })
                .await
        })
        .await
    };
    assert!(panicked.unwrap_err().is_panic());
    store
        .transaction(&ctx, |tx| {
            tx.execute_batch("CREATE TABLE after (x INTEGER)")?;
            Ok::<_, SqliteError>(())
        })
        .await
        .expect("the store works after a panic in the work");
}

/// The store's one connection: a renewal waits behind the holder's own
/// guarded transaction, and goes through once it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_renewal_waits_behind_the_guarded_transaction() {
    let (_dir, path) = db_file();
    let (store, handle, ctx) = claimed(&path, "renew").await;
    let (started, in_work) = tokio::sync::oneshot::channel();
    let tx = {
        let (store, ctx) = (store.clone(), ctx.clone());
        tokio::spawn(async move {
            store
                .transaction(&ctx, move |_tx| {
                    started.send(()).unwrap();
                    std::thread::sleep(Duration::from_millis(400));
                    Ok::<_, SqliteError>(std::time::Instant::now())
                })
                .await
        })
    };
    in_work.await.unwrap();
    handle.renew().await.unwrap();
    let renewed_at = std::time::Instant::now();
    let committed_at = tx.await.unwrap().unwrap();
    assert!(renewed_at >= committed_at);
}

/// The verification compares the term: a row with the holder's token but
/// another term does not verify, and the work never runs.
#[tokio::test]
async fn a_guarded_transaction_on_a_row_of_another_term_runs_nothing() {
    let (_dir, path) = db_file();
    let (store, _handle, ctx) = claimed(&path, "term").await;
    let _ = raw(&path)
        .execute(
            "UPDATE gst_leases SET term = term + 1 WHERE name = 'term'",
            [],
        )
        .unwrap();
    let ran = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&ran);
    let err = store
        .transaction(&ctx, move |_tx| {
            flag.store(true, Ordering::SeqCst);
            Ok::<_, SqliteError>(())
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&err, GuardError::Lost(e) if e.lost_cause() == Some(LostCause::NotHolder)),
        "{err:?}"
    );
    assert!(
        !ran.load(Ordering::SeqCst),
        "the work ran under another term"
    );
}

use lease_testkit::{sqlite_wal_bytes as wal_bytes, sqlite_wal_frame};

/// A batch of renewals is one statement, one commit: the log grows by the
/// pages of one transaction, where the same renewals one by one append one
/// transaction each (shown on the same leases, so the measure has teeth).
#[tokio::test]
async fn a_batch_of_renewals_is_one_commit() {
    let (_dir, path) = db_file();
    let store = migrated(&path).await;
    let names: Vec<String> = (0..50).map(|i| format!("batch-{i}")).collect();
    for name in &names {
        assert!(
            store
                .claim(ClaimRequest {
                    name,
                    token: Token::new("h"),
                    instance: "i",
                    lease_ms: LEASE_MS
                })
                .await
                .unwrap()
                .is_some()
        );
    }
    let mut batch: Vec<(&str, Token<'_>)> = names
        .iter()
        .map(|n| (n.as_str(), Token::new("h")))
        .collect();
    batch.push(("batch-0", Token::new("not-the-holder")));
    batch.push(("never-claimed", Token::new("h")));
    let page: u32 = raw(&path)
        .query_row("PRAGMA page_size", [], |row| row.get(0))
        .unwrap();
    let frame = sqlite_wal_frame(u64::from(page));

    tokio::time::sleep(Duration::from_millis(5)).await;
    let before = wal_bytes(&path);
    let held: Vec<bool> = store
        .renew_many(&batch, LEASE_MS)
        .await
        .unwrap()
        .iter()
        .map(Option::is_some)
        .collect();
    let batched = (wal_bytes(&path) - before) / frame;
    let mut expected = vec![true; 50];
    expected.extend([false, false]);
    assert_eq!(held, expected);

    tokio::time::sleep(Duration::from_millis(5)).await;
    let before = wal_bytes(&path);
    for name in &names {
        assert!(
            store
                .renew(name, Token::new("h"), LEASE_MS)
                .await
                .unwrap()
                .is_some()
        );
    }
    let one_by_one = (wal_bytes(&path) - before) / frame;
    eprintln!("log frames: batch of 50 {batched}, 50 renewals one by one {one_by_one}");
    assert!(
        one_by_one >= 50,
        "each renewal is a commit of its own: {one_by_one}"
    );
    assert!(
        batched <= 4,
        "one commit for the batch, not one per lease: {batched} frames"
    );
}

/// The log is checkpointed while renewals are the only writes: a write
/// whose `RETURNING` row is read runs SQLite's automatic checkpoint only if
/// the statement is stepped to its end. Read with `query_row` and reset,
/// each renewal committed without it, and the log grew by a frame per
/// renewal without bound (and every commit, extending the file, cost twice
/// as much). 2,500 renewals would leave more than 2,500 frames; checkpointed
/// at SQLite's 1,000-page threshold, the log is reused from its start and
/// stays near that size.
#[tokio::test]
async fn the_log_is_checkpointed_while_only_renewals_write() {
    let (_dir, path) = db_file();
    let store = SqliteStoreBuilder::from_path(&path)
        .with_synchronous(lease_sqlite::Synchronous::Normal)
        .build()
        .unwrap();
    store.migrate().await.unwrap();
    let names: Vec<String> = (0..32).map(|i| format!("renewed-{i}")).collect();
    for name in &names {
        let claim = ClaimRequest {
            name,
            token: Token::new("h"),
            instance: "i",
            lease_ms: LEASE_MS,
        };
        assert_eq!(store.claim(claim).await.unwrap(), Some(1));
    }
    let page: u32 = raw(&path)
        .query_row("PRAGMA page_size", [], |row| row.get(0))
        .unwrap();
    let frame = sqlite_wal_frame(u64::from(page));
    let mut most = 0;
    for i in 0..2_500 {
        let name = &names[i % names.len()];
        assert!(
            store
                .renew(name, Token::new("h"), LEASE_MS)
                .await
                .unwrap()
                .is_some()
        );
        most = most.max(wal_bytes(&path) / frame);
    }
    assert!(
        most <= 1_100,
        "the log reached {most} frames over 2,500 renewals: it was not checkpointed"
    );
}
