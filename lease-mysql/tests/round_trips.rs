//! Round trips per protocol statement, counted by a proxy between the
//! library and the server (with `prefer_socket=false`, or the driver would
//! reconnect through the server's UNIX socket and the proxy would see
//! nothing but the first handshake). Statements are prepared once per
//! connection and cached: the figures are for a warm connection.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use lease_core::CancellationToken;
use lease_core::{
    ClaimRequest, FinishRequest, LeaseContext, LeaseStore, Leases, MAX_NAME_BYTES, Token,
};
use lease_mysql::MySqlError;
use lease_mysql::mysql_async::prelude::Queryable;

#[tokio::test]
async fn every_statement_takes_the_round_trips_the_readme_says() {
    let Some(url) = common::url() else { return };
    let table = "lm_round_trips";
    let setup = common::fresh(&url, table).await;
    let proxy = common::Proxy::start(common::upstream(&url)).await;
    let store = common::proxied_store(&url, &proxy, table, false).await;

    // Measures `op` on a warm connection: once to prepare, then counted.
    macro_rules! count {
        ($label:expr, $op:expr) => {{
            let _ = $op;
            proxy.reset();
            let out = $op;
            let n = proxy.round_trips();
            eprintln!("{:<40} {n} round trip(s) {:?}", $label, proxy.commands());
            (n, out)
        }};
    }

    let (n, _) = count!("now", store.now_ms().await.unwrap());
    assert_eq!(n, 1);
    // claim of a free name: read + insert, then takeover of a released one.
    let mut i = 0;
    let (n, term) = count!("claim (insert)", {
        i += 1;
        store
            .claim(ClaimRequest {
                name: &format!("c{i}"),
                token: Token::new("h"),
                instance: "inst",
                lease_ms: 10_000,
            })
            .await
            .unwrap()
    });
    assert_eq!((n, term), (2, Some(1)), "read + insert");
    let (n, term) = count!(
        "claim (held: refused on the read)",
        store
            .claim(ClaimRequest {
                name: "c1",
                token: Token::new("x"),
                instance: "inst",
                lease_ms: 10_000
            })
            .await
            .unwrap()
    );
    assert_eq!((n, term), (1, None));
    let (n, held) = count!(
        "renew",
        store.renew("c1", Token::new("h"), 10_000).await.unwrap()
    );
    assert_eq!((n, held.is_some()), (1, true));
    let (n, term) = count!("verify", store.verify("c1", Token::new("h")).await.unwrap());
    assert_eq!((n, term), (1, Some(1)));
    let (n, _) = count!(
        "release",
        store.release("c1", Token::new("h")).await.unwrap()
    );
    assert_eq!(n, 1);
    let (n, term) = count!("claim (takeover of a released name)", {
        let _ = store.release("c1", Token::new("h")).await.unwrap();
        store
            .claim(ClaimRequest {
                name: "c1",
                token: Token::new("h"),
                instance: "inst",
                lease_ms: 10_000,
            })
            .await
            .unwrap()
    });
    // The release inside the block is counted too.
    assert_eq!(n, 3, "release + read + update");
    assert!(term.is_some());

    // A batch of renewals: one UPDATE when every lease of it is held,
    // whatever its size; a read after it when some are not.
    let names: Vec<String> = (0..100).map(|i| format!("b{i}")).collect();
    for name in &names {
        assert!(
            store
                .claim(ClaimRequest {
                    name,
                    token: Token::new("h"),
                    instance: "inst",
                    lease_ms: 10_000
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
    let (n, held) = count!(
        "renew_many (100 leases, all held)",
        store.renew_many(&batch, 10_000).await.unwrap()
    );
    assert_eq!(n, 1, "one UPDATE: {:?}", proxy.commands());
    assert!(held.iter().all(Option::is_some), "{held:?}");
    let now = held[0];
    assert!(held.iter().all(|h| *h == now), "one statement, one now");
    batch.push(("b0", Token::new("not-the-holder")));
    batch.push(("never-claimed", Token::new("h")));
    let (n, held) = count!(
        "renew_many (102 leases)",
        store.renew_many(&batch, 10_000).await.unwrap()
    );
    assert_eq!(
        n,
        2,
        "the UPDATE, then the read of which are held: {:?}",
        proxy.commands()
    );
    let mut expected = vec![true; 100];
    expected.extend([false, false]);
    let held: Vec<bool> = held.iter().map(Option::is_some).collect();
    assert_eq!(held, expected);

    let mut slot = 1_000;
    let (n, _) = count!("claim_instant (new name: read + insert)", {
        slot += 1;
        store
            .claim_instant(
                ClaimRequest {
                    name: &format!("s{slot}"),
                    token: Token::new("h"),
                    instance: "inst",
                    lease_ms: 10_000,
                },
                slot,
            )
            .await
            .unwrap()
    });
    assert_eq!(n, 2);
    let _ = store
        .claim_instant(
            ClaimRequest {
                name: "s",
                token: Token::new("h"),
                instance: "inst",
                lease_ms: 10_000,
            },
            1,
        )
        .await
        .unwrap();
    let (n, _) = count!(
        "claim_instant (held: refused on the read)",
        store
            .claim_instant(
                ClaimRequest {
                    name: "s",
                    token: Token::new("x"),
                    instance: "inst",
                    lease_ms: 10_000
                },
                5
            )
            .await
            .unwrap()
    );
    assert_eq!(n, 1);
    let (n, _) = count!("claim_instant (free: read + update)", {
        let _ = store.release("s", Token::new("h")).await.unwrap();
        slot += 1;
        store
            .claim_instant(
                ClaimRequest {
                    name: "s",
                    token: Token::new("h"),
                    instance: "inst",
                    lease_ms: 10_000,
                },
                slot,
            )
            .await
            .unwrap()
    });
    assert_eq!(n, 3, "release + read + update");
    let (n, _) = count!(
        "finish",
        store
            .finish(FinishRequest {
                name: "s",
                token: Some(Token::new("h")),
                instant_ms: slot,
                passed_ms: slot
            })
            .await
            .unwrap()
    );
    assert_eq!(n, 1);
    let names: Vec<String> = (0..100).map(|i| format!("f{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let (n, _) = count!(
        "find_unfinished (100 names)",
        store.find_unfinished(&names).await.unwrap()
    );
    assert_eq!(n, 1);
    let (n, _) = count!(
        "claim_rerun",
        store
            .claim_rerun(
                ClaimRequest {
                    name: "s",
                    token: Token::new("h"),
                    instance: "inst",
                    lease_ms: 10_000
                },
                1
            )
            .await
            .unwrap()
    );
    assert_eq!(n, 1);
    let (n, _) = count!("last_instant", store.last_instant("s").await.unwrap());
    assert_eq!(n, 1);

    // A name over the limit never reaches the server.
    let leases = Leases::new(store.clone());
    proxy.reset();
    let long = "n".repeat(MAX_NAME_BYTES + 1);
    assert!(leases.claim(&long).await.is_err());
    assert!(
        leases
            .claim_instant(&long, lease_core::UtcMillis::from_millis(5))
            .await
            .is_err()
    );
    eprintln!(
        "{:<40} {} round trip(s)",
        "claim of a 192-byte name",
        proxy.round_trips()
    );
    assert_eq!(proxy.round_trips(), 0);

    // The guarded transaction: begin, verify, the work, commit.
    let handle = leases.claim("guarded").await.unwrap().unwrap();
    let ctx = LeaseContext::new(handle, CancellationToken::new());
    let guarded = || {
        store.transaction(&ctx, |tx| {
            Box::pin(async move {
                tx.query_drop("DO 1").await?;
                Ok::<_, MySqlError>(())
            })
        })
    };
    guarded().await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    proxy.reset();
    guarded().await.unwrap();
    let n = proxy.round_trips();
    eprintln!(
        "{:<40} {n} round trip(s) {:?}",
        "transaction (one statement of work)",
        proxy.commands()
    );
    assert_eq!(
        n, 5,
        "START TRANSACTION, verify, the work, COMMIT, the session setup again"
    );
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    proxy.reset();
    assert!(
        store
            .renew("guarded", ctx.handle().token(), 10_000)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(
        proxy.round_trips(),
        1,
        "no reset, statement cache kept: {:?}",
        proxy.commands()
    );
    common::drop_table(&setup, table).await;
}

#[tokio::test]
async fn with_prefer_socket_a_proxy_sees_only_the_first_handshake() {
    let Some(url) = common::url() else { return };
    let table = "lm_prefer_socket";
    let setup = common::fresh(&url, table).await;
    let proxy = common::Proxy::start(common::upstream(&url)).await;
    let store = common::proxied_store(&url, &proxy, table, true).await;
    let _ = store.now_ms().await.unwrap();
    proxy.reset();
    let _ = store
        .claim(ClaimRequest {
            name: "x",
            token: Token::new("h"),
            instance: "i",
            lease_ms: 1_000,
        })
        .await
        .unwrap();
    let seen = proxy.round_trips();
    eprintln!(
        "prefer_socket=true: the proxy saw {seen} command(s) of a claim \
         (0 when the driver moved to the server's UNIX socket)"
    );
    let mut conn = setup.pool().get_conn().await.unwrap();
    let socket: Option<String> = conn.query_first("SELECT @@socket").await.unwrap();
    if socket.is_some_and(|s| std::path::Path::new(&s).exists()) {
        assert_eq!(seen, 0, "the driver should have moved to the UNIX socket");
    }
    drop(conn);
    common::drop_table(&setup, table).await;
}
