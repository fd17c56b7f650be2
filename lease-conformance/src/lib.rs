#![doc = include_str!("../README.md")]

pub mod cases;
mod counting;
mod harness;
pub mod intercept;
mod mapping;
pub mod network;
pub mod proxy;
pub mod reference;

pub use harness::{
    CaseFailure, CaseFn, Ctx, Factory, Fresh, HELD_LEASE, Outcome, SHORT_LEASE, case,
    deadline_note, env_url, factory, fence_timings, held_timings, run_all, run_case, run_test,
    short_timings,
};
pub use mapping::MAPPING;

/// Calls the macro `$callback` with the name of every case of the suite: the
/// one list the test macro and [`CASES`] are made from, so they cannot drift.
#[doc(hidden)]
#[macro_export]
macro_rules! __for_each_case {
    ($callback:path; $($args:tt)*) => {
        $callback! {
            [$($args)*]
            claim_of_new_name_starts_at_term_one,
            claim_of_held_name_is_refused_and_term_unchanged,
            claim_after_expiry_takes_over_with_next_term,
            claim_after_release_takes_over_with_next_term_and_new_token,
            reclaim_by_same_process_moves_the_term,
            concurrent_claims_of_fresh_name_have_one_winner,
            concurrent_claims_of_expired_name_have_one_winner,
            names_compare_exactly,
            name_of_maximum_length_is_claimed_whole,
            overlong_name_is_refused_before_any_statement,
            empty_name_is_refused_before_any_statement,
            renew_keeps_name_past_lease_duration,
            renew_twice_in_a_row_is_still_held,
            renew_after_takeover_is_lost,
            renew_after_expiry_is_lost_even_without_successor,
            renew_after_release_is_lost,
            renew_extends_the_lease_from_now,
            renew_answers_the_database_now_it_wrote_with,
            verify_while_held_returns_term,
            verify_after_release_is_lost,
            verify_after_expiry_without_successor_is_lost,
            verify_tells_old_holder_from_successor,
            release_frees_name_at_once,
            release_after_takeover_is_lost_and_leaves_successor,
            database_clock_is_utc_millis_near_process_clock,
            expiry_is_judged_by_database_clock,
            migrate_again_keeps_existing_leases,
            concurrent_migrations_of_a_new_table_all_succeed,
            available_on_a_reachable_database,
            instant_claim_of_new_name_records_the_instant,
            instant_claim_while_held_is_refused,
            instant_claim_not_later_than_last_is_refused,
            instants_are_claimed_once_and_in_order,
            concurrent_instant_claims_have_one_winner,
            instant_claim_gives_up_cut_short_round,
            instant_claim_gives_up_round_whose_lease_expired,
            instant_claim_after_finished_round_gives_nothing_up,
            superseded_instant_reports_its_rerun,
            plain_and_instant_claims_share_the_term,
            finish_while_holding_records_end_and_frees_name,
            finish_takes_overrun_passed_along,
            finish_does_not_take_along_passed_in_database_future,
            finish_with_passed_before_its_instant_keeps_it,
            finish_after_name_changed_hands_records_end_and_is_lost,
            finish_after_later_instant_claimed_records_nothing,
            finish_on_known_lost_handle_records_end_without_giving_back,
            finish_of_plain_claim_is_refused,
            instant_claim_of_the_epoch_is_refused,
            last_instant_of_never_claimed_name_is_none,
            last_instant_of_plainly_claimed_name_is_none,
            last_instant_follows_the_rounds,
            hold_keeps_name_well_past_lease_duration,
            hold_ends_context_as_not_this_holders_after_takeover,
            hold_steps_down_at_deadline_before_name_is_free,
            renew_many_answers_each_lease_like_renew,
            batched_renewals_keep_every_name_and_lose_only_the_lost,
            unfinished_found_only_after_expiry,
            unfinished_found_at_once_after_release,
            finished_round_is_never_unfinished,
            unfinished_of_many_names_found_in_one_statement,
            rerun_claims_a_cut_short_instant_exactly_once,
            concurrent_rerun_claims_have_one_winner,
            stale_rerun_claim_is_refused_by_its_term,
            rerun_refused_after_first_round_recorded_finished,
            rerun_refused_after_later_instant_claimed,
            rerun_refused_while_name_held,
            rerun_round_finishes_like_any_other,
            get_of_never_claimed_name_is_none,
            get_of_held_lease_reads_instance_term_and_time_left,
            get_of_expired_lease_is_not_held,
            get_of_released_lease_reads_released,
            get_after_takeover_names_the_successor,
            list_reads_names_with_prefix_in_byte_order_up_to_limit,
            force_release_frees_only_the_term_read,
            resign_request_reaches_only_the_holder_at_its_term,
            resign_request_ends_with_its_term,
            statement_on_a_missing_table_says_to_migrate_and_is_not_retried,
            lock_runs_once_among_sixteen_lockers,
            lock_lost_during_its_work_reports_the_loss_with_the_output,
            leader_election_has_one_leader_and_hands_over_at_shutdown,
            killed_leader_is_replaced_after_its_lease_expires,
            leader_asked_to_resign_hands_over_to_a_follower
        }
    };
}

macro_rules! __case_table {
    ([] $($case:ident),* $(,)?) => {
        /// Every case of the suite, by name, in a stable order.
        pub static CASES: &[(&str, CaseFn)] = &[
            $((stringify!($case), |ctx| Box::pin(cases::$case(ctx)))),*
        ];
    };
}

__for_each_case!(__case_table;);

/// Expands to one `#[test]` per case of the suite, each running its case
/// against a fresh store from `$factory`.
///
/// `$factory` is an async function (or closure) returning
/// `Option<(Arc<dyn LeaseStore>, G)>`: a store on a fresh table of its own,
/// not yet migrated (the suite migrates it), with a guard `G` that cleans up
/// after it (dropped once the case is over; `()` for none, see [`factory`]),
/// or `None` when the backend is not configured here (the case then passes
/// with a note on stderr; use [`env_url`] so that CI never skips).
///
/// ```ignore
/// use std::sync::Arc;
/// use lease_core::LeaseStore;
///
/// async fn fresh_store() -> Option<(Arc<dyn LeaseStore>, DropsTable)> {
///     let url = lease_conformance::env_url("MY_BACKEND_URL")?;
///     let table = unique_table();
///     let store = MyStore::connect(&url).await.unwrap().with_table(&table);
///     Some((Arc::new(store), DropsTable { url, table }))
/// }
///
/// lease_conformance::conformance_tests!(fresh_store);
/// ```
#[macro_export]
macro_rules! conformance_tests {
    ($factory:expr) => {
        $crate::__for_each_case!($crate::__conformance_test; $factory);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_test {
    ([$factory:expr] $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                let factory = $crate::factory($factory);
                $crate::run_test(
                    ::core::stringify!($case),
                    |ctx| ::std::boxed::Box::pin($crate::cases::$case(ctx)),
                    &factory,
                );
            }
        )*
    };
}
