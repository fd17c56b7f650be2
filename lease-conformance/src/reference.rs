//! The reference store in memory, the faults that break it on purpose, and
//! the cases of the suite each fault fails.
//!
//! [`MemoryStore`] is the protocol in plain Rust over a mutex, the model the
//! suite is checked against: lease-core's, behind its `test-util` feature
//! (`lease_core::memory`), re-exported here. Built with a [`Fault`], it
//! breaks one rule of the protocol, the way a backend might by mistake, and
//! [`CAUGHT_BY`] names the cases that must then fail: this crate's own tests
//! run them and show that they do (the suite has teeth). It keeps nothing
//! across processes, so it is no backend for production.
//!
//! It also serves as a store for tests of code built on the protocol: on
//! Tokio's clock ([`MemoryStore::on_tokio_clock`]) paused time moves its
//! expiries, and [`MemoryStore::row`] / [`MemoryStore::set_row`] read and
//! plant rows directly. A test wrapper that injects faults or records the
//! calls is a [`ForwardingStore`](lease_core::ForwardingStore) over it.
//!
//! ```
//! use lease_conformance::reference::{CAUGHT_BY, Fault, MemoryStore, Row};
//!
//! let store = MemoryStore::with_fault(Fault::FrozenTerm).migrated();
//! store.set_row("job", Row { term: 3, ..Row::default() });
//! assert_eq!(store.row("job").map(|r| r.term), Some(3));
//! assert!(CAUGHT_BY.iter().any(|(fault, _)| *fault == Fault::FrozenTerm));
//! ```

pub use lease_core::memory::{Fault, MemoryStore, Row};

/// Every fault, with the cases of the suite that must fail under it.
pub const CAUGHT_BY: &[(Fault, &[&str])] = &[
    (
        Fault::IgnoresExpiry,
        &[
            "claim_of_held_name_is_refused_and_term_unchanged",
            "concurrent_claims_of_fresh_name_have_one_winner",
            "lock_runs_once_among_sixteen_lockers",
        ],
    ),
    (
        Fault::FrozenTerm,
        &[
            "claim_after_expiry_takes_over_with_next_term",
            "claim_after_release_takes_over_with_next_term_and_new_token",
        ],
    ),
    (
        Fault::RacyClaim,
        &[
            "concurrent_claims_of_fresh_name_have_one_winner",
            "concurrent_claims_of_expired_name_have_one_winner",
        ],
    ),
    (
        Fault::RenewIgnoresHolder,
        &[
            "renew_after_takeover_is_lost",
            "hold_ends_context_as_not_this_holders_after_takeover",
        ],
    ),
    (
        Fault::RenewIgnoresExpiry,
        &["renew_after_expiry_is_lost_even_without_successor"],
    ),
    (
        Fault::RenewDoesNotExtend,
        &[
            "renew_keeps_name_past_lease_duration",
            "renew_extends_the_lease_from_now",
        ],
    ),
    (
        Fault::RenewReturnsStaleNow,
        &["renew_answers_the_database_now_it_wrote_with"],
    ),
    (
        Fault::VerifyIgnoresExpiry,
        &[
            "verify_after_expiry_without_successor_is_lost",
            "verify_after_release_is_lost",
        ],
    ),
    (Fault::ReleaseKeepsLease, &["release_frees_name_at_once"]),
    (Fault::CaseInsensitiveNames, &["names_compare_exactly"]),
    (Fault::PadSpaceNames, &["names_compare_exactly"]),
    (
        Fault::ClockInSeconds,
        &["database_clock_is_utc_millis_near_process_clock"],
    ),
    (
        Fault::InstantOrderIgnored,
        &["instant_claim_not_later_than_last_is_refused"],
    ),
    (
        Fault::SupersededNotReported,
        &[
            "instant_claim_gives_up_cut_short_round",
            "superseded_instant_reports_its_rerun",
        ],
    ),
    (
        Fault::FinishTakesFuturePassed,
        &["finish_does_not_take_along_passed_in_database_future"],
    ),
    (
        Fault::FinishFallbackIgnoresInstant,
        &["finish_after_later_instant_claimed_records_nothing"],
    ),
    (
        Fault::FinishWithoutLeaseRecordsNothing,
        &[
            "finish_after_name_changed_hands_records_end_and_is_lost",
            "finish_on_known_lost_handle_records_end_without_giving_back",
        ],
    ),
    (
        Fault::FindIgnoresExpiry,
        &["unfinished_found_only_after_expiry"],
    ),
    (
        Fault::RerunIgnoresTerm,
        &["stale_rerun_claim_is_refused_by_its_term"],
    ),
    (
        Fault::RerunNotRecorded,
        &["rerun_claims_a_cut_short_instant_exactly_once"],
    ),
    (
        Fault::MigrateNotIdempotent,
        &["migrate_again_keeps_existing_leases"],
    ),
    (
        Fault::InstanceNotRecorded,
        &["get_after_takeover_names_the_successor"],
    ),
    (
        Fault::InfoWithoutClock,
        &[
            "get_of_expired_lease_is_not_held",
            "get_of_held_lease_reads_instance_term_and_time_left",
        ],
    ),
    (
        Fault::ListIgnoresPrefix,
        &["list_reads_names_with_prefix_in_byte_order_up_to_limit"],
    ),
    (
        Fault::ForceReleaseIgnoresTerm,
        &["force_release_frees_only_the_term_read"],
    ),
    (
        Fault::MissingTableUnclassified,
        &["statement_on_a_missing_table_says_to_migrate_and_is_not_retried"],
    ),
    (
        Fault::ResignIgnoresTerm,
        &["resign_request_reaches_only_the_holder_at_its_term"],
    ),
    (
        Fault::RenewHidesResign,
        &[
            "resign_request_reaches_only_the_holder_at_its_term",
            "resign_request_ends_with_its_term",
            "leader_asked_to_resign_hands_over_to_a_follower",
        ],
    ),
    (
        Fault::ResignOutlivesTerm,
        &["resign_request_ends_with_its_term"],
    ),
];
