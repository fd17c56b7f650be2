//! Holder tokens stay out of the driver's debug log: tokio-postgres logs
//! every statement with its parameters at debug level, and the token is the
//! tenure's credential.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

mod common;

use std::sync::Mutex;

use lease_core::{CancellationToken, LeaseContext, LeaseStore, Leases, UtcMillis};

/// Every record of the `log` crate, formatted.
struct Capture(Mutex<Vec<String>>);

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        self.0.lock().unwrap().push(format!(
            "{} {}: {}",
            record.level(),
            record.target(),
            record.args()
        ));
    }

    fn flush(&self) {}
}

static CAPTURE: Capture = Capture(Mutex::new(Vec::new()));

/// Issue 16, item 5: with tokio-postgres logging at debug level, every
/// statement's parameters, holder tokens included, reached the log.
#[tokio::test]
async fn holder_tokens_never_reach_the_drivers_debug_log() {
    let Some(url) = common::url() else { return };
    log::set_logger(&CAPTURE).unwrap();
    log::set_max_level(log::LevelFilter::Trace);

    let store = common::fresh(&url).await;
    let leases = Leases::new(store.clone());
    let mut tokens = Vec::new();

    // claim, renew, verify, renew_many, release
    let held = leases.claim("logs:a").await.unwrap().unwrap();
    held.renew().await.unwrap();
    let _ = held.verify().await.unwrap();
    let other = leases.claim("logs:b").await.unwrap().unwrap();
    let renewed = store
        .renew_many(
            &[(held.name(), held.token()), (other.name(), other.token())],
            60_000,
        )
        .await
        .unwrap();
    assert!(renewed.iter().all(Option::is_some), "{renewed:?}");
    // the guarded transaction's verification
    let ctx = LeaseContext::new(held.clone(), CancellationToken::new());
    store
        .transaction(&ctx, |_tx| Box::pin(async { Ok::<_, std::io::Error>(()) }))
        .await
        .unwrap();
    held.release().await.unwrap();
    other.release().await.unwrap();
    tokens.extend([
        held.token().expose().to_owned(),
        other.token().expose().to_owned(),
    ]);

    // claim_instant, finish, claim_rerun
    let now = leases.now().await.unwrap();
    let slot = UtcMillis::from_millis(now.as_millis() - 1_000);
    let round = leases.claim_instant("logs:s", slot).await.unwrap().unwrap();
    tokens.push(round.token().expose().to_owned());
    round.release().await.unwrap();
    let cut = leases.unfinished_instants(&["logs:s"]).await.unwrap();
    let rerun = leases.claim_rerun(&cut[0]).await.unwrap().unwrap();
    tokens.push(rerun.token().expose().to_owned());
    rerun.finish(now).await.unwrap();

    log::set_max_level(log::LevelFilter::Off);
    common::drop_table(&store).await;
    let logged = CAPTURE.0.lock().unwrap().join("\n");
    for token in &tokens {
        assert!(
            !logged.contains(token.as_str()),
            "token {token} in:\n{logged}"
        );
    }
    assert!(
        logged.contains("executing statement") && logged.contains("<holder token>"),
        "the capture saw no statement with a token:\n{logged}"
    );
}
