//! claim, with its insert-if-absent; names.

use std::sync::Arc;

use lease_core::{Error, MAX_NAME_BYTES, NameError};
use tokio::task::JoinSet;

use super::{claimed, err, ok};
use crate::Ctx;

/// The first claim of a name inserts its row and starts term 1.
pub async fn claim_of_new_name_starts_at_term_one(ctx: Ctx) {
    let leases = ctx.leases();
    let name = ctx.name("fresh");
    let h = claimed(&leases, &name, "no row exists for it yet").await;
    assert_eq!(
        h.term(),
        1,
        "the first claim of a name must start term 1 (the insert-if-absent must set term = 1)"
    );
    assert_eq!(
        ok(h.verify().await, "verify after the first claim"),
        1,
        "verify must return the term the claim started"
    );
}

/// A claim of a held name is refused, as a value, and leaves the term as it was.
pub async fn claim_of_held_name_is_refused_and_term_unchanged(ctx: Ctx) {
    let holder = ctx.leases();
    let rival = ctx.leases();
    let name = ctx.name("held");
    let h = claimed(&holder, &name, "no row exists for it yet").await;
    for attempt in 1..=3 {
        let refused = ok(rival.claim(&name).await, "a rival's claim of a held name");
        assert!(
            refused.is_none(),
            "attempt {attempt}: a rival claimed a name whose lease has not expired \
             (the claim must only take rows with expires_at_ms <= now)"
        );
    }
    assert_eq!(
        ok(
            h.verify().await,
            "verify by the holder after refused claims"
        ),
        1,
        "refused claims must not move the term, nor take the row from its holder"
    );
    ok(h.release().await, "release");
    let next = claimed(&rival, &name, "it was released").await;
    assert_eq!(
        next.term(),
        2,
        "the claim after three refused claims and a release must be term 2: a refused claim \
         must not increment the term"
    );
}

/// A claim after the lease expired takes the name over with the next term.
pub async fn claim_after_expiry_takes_over_with_next_term(ctx: Ctx) {
    let first = ctx.short_leases();
    let second = ctx.leases();
    let name = ctx.name("expiring");
    let old = claimed(&first, &name, "no row exists for it yet").await;
    ctx.sleep_past_short_lease().await;
    let new = claimed(
        &second,
        &name,
        "its lease expired by the database clock (claimed with lease_ms = 400)",
    )
    .await;
    assert_eq!(
        new.term(),
        old.term() + 1,
        "a takeover must increment the term by exactly one"
    );
}

/// A claim after the holder released the name takes it at once, with the next
/// term and a new holder token.
pub async fn claim_after_release_takes_over_with_next_term_and_new_token(ctx: Ctx) {
    let first = ctx.leases();
    let second = ctx.leases();
    let name = ctx.name("released");
    let old = claimed(&first, &name, "no row exists for it yet").await;
    ok(old.release().await, "release");
    let new = claimed(
        &second,
        &name,
        "its holder released it (release must set expires_at_ms = 0)",
    )
    .await;
    assert_eq!(
        new.term(),
        old.term() + 1,
        "a takeover must increment the term"
    );
    assert_ne!(new.token(), old.token(), "every claim mints a new token");
    assert!(
        old.verify().await.is_err_and(|e| e.is_lost()),
        "after the takeover the old token must no longer verify: the claim must write the new \
         holder token into the row"
    );
}

/// A holder that claims its own released name again gets a new term, like anyone.
pub async fn reclaim_by_same_process_moves_the_term(ctx: Ctx) {
    let leases = ctx.leases();
    let name = ctx.name("again");
    let first = claimed(&leases, &name, "no row exists for it yet").await;
    ok(first.release().await, "release");
    let second = claimed(&leases, &name, "it was released").await;
    assert_eq!(
        second.term(),
        2,
        "the name changed hands (a new holder token), so the term must move even for the same process"
    );
}

async fn race(ctx: &Ctx, name: &str, contenders: usize) -> Vec<u64> {
    let mut set = JoinSet::new();
    let barrier = Arc::new(tokio::sync::Barrier::new(contenders));
    for _ in 0..contenders {
        let leases = ctx.leases();
        let name = name.to_owned();
        let barrier = barrier.clone();
        let _ = set.spawn(async move {
            let _ = barrier.wait().await;
            leases.claim(&name).await
        });
    }
    let mut winners = Vec::new();
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok(Ok(Some(h))) => winners.push(h.term()),
            Ok(Ok(None)) => {}
            Ok(Err(e)) => panic!(
                "a concurrent claim surfaced an error; losing a race must be a refusal, not an \
                 error (a unique-key violation of the insert must read as 0 rows): {e} ({})",
                super::source_chain(&e)
            ),
            Err(e) => panic!("a claimant's task failed: {e}"),
        }
    }
    winners
}

/// Sixteen processes claiming a name that has no row yet: exactly one wins,
/// and no error surfaces.
pub async fn concurrent_claims_of_fresh_name_have_one_winner(ctx: Ctx) {
    let name = ctx.name("race-fresh");
    let winners = race(&ctx, &name, 16).await;
    assert_eq!(
        winners.len(),
        1,
        "16 concurrent claims of a fresh name must have exactly one winner, got terms {winners:?}"
    );
    assert_eq!(winners[0], 1, "the winner of a fresh name starts term 1");
}

/// Sixteen processes claiming a name whose lease expired: exactly one wins,
/// with the next term, and no error surfaces.
pub async fn concurrent_claims_of_expired_name_have_one_winner(ctx: Ctx) {
    let name = ctx.name("race-expired");
    let _old = claimed(&ctx.short_leases(), &name, "no row exists for it yet").await;
    ctx.sleep_past_short_lease().await;
    let winners = race(&ctx, &name, 16).await;
    assert_eq!(
        winners.len(),
        1,
        "16 concurrent claims of an expired name must have exactly one winner, got terms \
         {winners:?} (the takeover must be one conditional UPDATE on expires_at_ms <= now)"
    );
    assert_eq!(
        winners[0], 2,
        "the winner of an expired name gets the next term"
    );
}

/// `job`, `JOB` and `job ` are three names: names compare byte for byte.
pub async fn names_compare_exactly(ctx: Ctx) {
    let leases = ctx.leases();
    let base = ctx.name("job");
    let variants = [
        base.clone(),
        base.to_uppercase(),
        format!("{base} "),
        format!("{base}\u{0301}"),
    ];
    for v in &variants {
        let h = claimed(
            &leases,
            v,
            "names must compare byte for byte: case, trailing spaces and accents make other names \
             (on MySQL the name column must be binary)",
        )
        .await;
        assert_eq!(
            h.term(),
            1,
            "{v:?} is a name of its own, so it starts term 1"
        );
    }
}

/// A name of exactly 191 bytes, made of multi-byte characters, is held whole.
pub async fn name_of_maximum_length_is_claimed_whole(ctx: Ctx) {
    let leases = ctx.leases();
    let prefix = ctx.name("");
    let mut name = prefix.clone();
    while name.len() + 'é'.len_utf8() <= MAX_NAME_BYTES {
        name.push('é');
    }
    while name.len() < MAX_NAME_BYTES {
        name.push('x');
    }
    assert_eq!(name.len(), MAX_NAME_BYTES);
    let h = claimed(
        &leases,
        &name,
        "a name of 191 bytes fits the name column (it must hold 191 bytes, not 191 characters \
         of a narrower encoding)",
    )
    .await;
    assert_eq!(ok(h.verify().await, "verify of the long name"), 1);
    let mut shorter = name.clone();
    let _ = shorter.pop();
    let other = claimed(
        &leases,
        &shorter,
        "a name one byte shorter is another name (the column must not truncate)",
    )
    .await;
    assert_eq!(other.term(), 1);
}

/// A name over 191 bytes is refused before any statement reaches the store.
pub async fn overlong_name_is_refused_before_any_statement(ctx: Ctx) {
    let leases = ctx.leases();
    let name = format!("{}{}", ctx.name("long"), "x".repeat(MAX_NAME_BYTES));
    let before = ctx.statements();
    let err = err(
        leases.claim(&name).await,
        "a claim of a name over 191 bytes",
    );
    assert!(
        matches!(
            err,
            Error::InvalidName {
                reason: NameError::TooLong { .. }
            }
        ),
        "expected InvalidName/TooLong, got {err:?}"
    );
    let slot = leases
        .claim_instant(&name, lease_core::UtcMillis::from_millis(1_000))
        .await;
    assert!(
        slot.is_err(),
        "an instant claim with an over-long name must be refused"
    );
    assert!(leases.last_instant(&name).await.is_err());
    assert!(leases.unfinished_instants(&[name.as_str()]).await.is_err());
    assert_eq!(
        ctx.statements(),
        before,
        "an over-long name must be refused before any statement reaches the store"
    );
}

/// The empty name is refused before any statement reaches the store.
pub async fn empty_name_is_refused_before_any_statement(ctx: Ctx) {
    let leases = ctx.leases();
    let before = ctx.statements();
    let err = err(leases.claim("").await, "a claim of the empty name");
    assert!(
        matches!(
            err,
            Error::InvalidName {
                reason: NameError::Empty
            }
        ),
        "expected InvalidName/Empty, got {err:?}"
    );
    assert_eq!(ctx.statements(), before, "nothing may reach the store");
}
