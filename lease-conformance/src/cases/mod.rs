//! The cases of the suite, one behaviour each.
//!
//! Every case is `pub async fn name(ctx: Ctx)`, named for what it asserts. It
//! runs on a fresh, migrated store, uses names of its own ([`Ctx::name`](crate::Ctx::name)) and
//! panics with a message saying what the backend did wrong.

mod capability;
mod claim;
mod clock;
mod hold;
mod inspect;
mod instant;
mod release;
mod renew;
mod rerun;
mod resign;
mod verify;

pub use capability::*;
pub use claim::*;
pub use clock::*;
pub use hold::*;
pub use inspect::*;
pub use instant::*;
pub use release::*;
pub use renew::*;
pub use rerun::*;
pub use resign::*;
pub use verify::*;

use lease_core::{Chain, Error, Handle, Leases, Result, UtcMillis};

/// Unwraps a result the case needs, or fails naming the step.
#[track_caller]
pub(crate) fn ok<T>(result: Result<T>, step: &str) -> T {
    match result {
        Ok(v) => v,
        Err(e) => panic!("{step} failed: {e} ({})", source_chain(&e)),
    }
}

/// The causes of an error (its `source()` chain, through [`Chain`]), for
/// failure messages that print the error itself beside them.
pub(crate) fn source_chain(e: &Error) -> String {
    match std::error::Error::source(e) {
        Some(cause) => Chain(cause).to_string(),
        None => "no further cause".to_owned(),
    }
}

/// Claims `name`, which must be free.
pub(crate) async fn claimed(leases: &Leases, name: &str, why: &str) -> Handle {
    match leases.claim(name).await {
        Ok(Some(h)) => h,
        Ok(None) => panic!("claim of {name:?} was refused, but the name should be free: {why}"),
        Err(e) => panic!("claim of {name:?} failed: {e} ({})", source_chain(&e)),
    }
}

/// Claims the instant `slot` under `name`, which must be claimable.
pub(crate) async fn instant_claimed(
    leases: &Leases,
    name: &str,
    slot: UtcMillis,
    why: &str,
) -> Handle {
    match leases.claim_instant(name, slot).await {
        Ok(Some(h)) => h,
        Ok(None) => panic!("instant claim of {name:?} at {slot} was refused: {why}"),
        Err(e) => panic!(
            "instant claim of {name:?} at {slot} failed: {e} ({})",
            source_chain(&e)
        ),
    }
}

/// Asserts `result` is a loss.
#[track_caller]
pub(crate) fn assert_lost<T: std::fmt::Debug>(result: Result<T>, what: &str) {
    match result {
        Err(e) if e.is_lost() => {}
        Err(e) => panic!("{what}: expected the lease to be reported lost, got error: {e}"),
        Ok(v) => panic!("{what}: expected the lease to be reported lost, got Ok({v:?})"),
    }
}

/// The database's now, by the store under test.
pub(crate) async fn db_now(leases: &Leases) -> UtcMillis {
    ok(leases.now().await, "reading the database clock")
}

/// An instant `offset_ms` from the database's now, on a whole second, so that
/// instants of a case read like a schedule's.
pub(crate) async fn instant(leases: &Leases, offset_ms: i64) -> UtcMillis {
    let now = db_now(leases).await.as_millis();
    UtcMillis::from_millis((now / 1000) * 1000 + offset_ms)
}

/// The error of a result that must fail.
#[track_caller]
pub(crate) fn err<T: std::fmt::Debug>(result: Result<T>, what: &str) -> Error {
    match result {
        Err(e) => e,
        Ok(v) => panic!("{what}: expected an error, got Ok({v:?})"),
    }
}
