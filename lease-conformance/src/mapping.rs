//! Which cases check which statement and behaviour of the specification.

/// Each behaviour of the specification, with the cases that check it. A
/// test of this crate asserts that every case named here exists and that
/// every case of the suite is named here at least once.
pub static MAPPING: &[(&str, &[&str])] = &[
    (
        "claim: a new name is inserted with term 1 (insert-if-absent)",
        &[
            "claim_of_new_name_starts_at_term_one",
            "concurrent_claims_of_fresh_name_have_one_winner",
        ],
    ),
    (
        "claim: 0 rows while held: refused, term unchanged",
        &["claim_of_held_name_is_refused_and_term_unchanged"],
    ),
    (
        "claim: an expired or released name is taken with term + 1 and a new token",
        &[
            "claim_after_expiry_takes_over_with_next_term",
            "claim_after_release_takes_over_with_next_term_and_new_token",
            "reclaim_by_same_process_moves_the_term",
        ],
    ),
    (
        "claim: concurrent claimants, one winner, no error (insert race reads as 0 rows)",
        &[
            "concurrent_claims_of_fresh_name_have_one_winner",
            "concurrent_claims_of_expired_name_have_one_winner",
        ],
    ),
    (
        "names: compared exactly; at most 191 bytes; validated before any SQL",
        &[
            "names_compare_exactly",
            "name_of_maximum_length_is_claimed_whole",
            "overlong_name_is_refused_before_any_statement",
            "empty_name_is_refused_before_any_statement",
        ],
    ),
    (
        "renew: extends by the lease from the database's now; 0 rows: lost",
        &[
            "renew_keeps_name_past_lease_duration",
            "renew_twice_in_a_row_is_still_held",
            "renew_extends_the_lease_from_now",
            "renew_after_takeover_is_lost",
            "renew_after_expiry_is_lost_even_without_successor",
            "renew_after_release_is_lost",
        ],
    ),
    (
        "renew: answers the database's now it compared and wrote with (the holder's check \
         for a clock that jumps)",
        &[
            "renew_answers_the_database_now_it_wrote_with",
            "renew_many_answers_each_lease_like_renew",
        ],
    ),
    (
        "verify: the term while held; lost when taken, released or expired",
        &[
            "verify_while_held_returns_term",
            "verify_after_release_is_lost",
            "verify_after_expiry_without_successor_is_lost",
            "verify_tells_old_holder_from_successor",
        ],
    ),
    (
        "release: frees the name at once; 0 rows: already gone",
        &[
            "release_frees_name_at_once",
            "release_after_takeover_is_lost_and_leaves_successor",
        ],
    ),
    (
        ":now is the database clock in UTC milliseconds; expiry judged by it",
        &[
            "database_clock_is_utc_millis_near_process_clock",
            "expiry_is_judged_by_database_clock",
        ],
    ),
    (
        "the table: created idempotently, safely by many replicas at once; Available",
        &[
            "migrate_again_keeps_existing_leases",
            "concurrent_migrations_of_a_new_table_all_succeed",
            "available_on_a_reachable_database",
        ],
    ),
    (
        "claim an instant: free name and a later instant; records slot and unfinished; insert with both slots",
        &[
            "instant_claim_of_new_name_records_the_instant",
            "instant_claim_while_held_is_refused",
            "instant_claim_not_later_than_last_is_refused",
            "instants_are_claimed_once_and_in_order",
            "concurrent_instant_claims_have_one_winner",
            "plain_and_instant_claims_share_the_term",
            "instant_claim_of_the_epoch_is_refused",
        ],
    ),
    (
        "claim an instant: an unfinished instant is given up and reported (Superseded, with Rerun)",
        &[
            "instant_claim_gives_up_cut_short_round",
            "instant_claim_gives_up_round_whose_lease_expired",
            "instant_claim_after_finished_round_gives_nothing_up",
            "superseded_instant_reports_its_rerun",
        ],
    ),
    (
        "finish: records the end and gives the name back; passed taken along unless in the database's future",
        &[
            "finish_while_holding_records_end_and_frees_name",
            "finish_takes_overrun_passed_along",
            "finish_does_not_take_along_passed_in_database_future",
            "finish_with_passed_before_its_instant_keeps_it",
            "finish_of_plain_claim_is_refused",
        ],
    ),
    (
        "finish: 0 rows: the end recorded without the lease unless a later instant was claimed; ErrLost unless known lost",
        &[
            "finish_after_name_changed_hands_records_end_and_is_lost",
            "finish_after_later_instant_claimed_records_nothing",
            "finish_on_known_lost_handle_records_end_without_giving_back",
        ],
    ),
    (
        "find: unfinished instants free to claim again, for many names in one statement",
        &[
            "unfinished_found_only_after_expiry",
            "unfinished_found_at_once_after_release",
            "finished_round_is_never_unfinished",
            "unfinished_of_many_names_found_in_one_statement",
        ],
    ),
    (
        "claim again: once, held to the term found; refused when rerun, finished, superseded or held",
        &[
            "rerun_claims_a_cut_short_instant_exactly_once",
            "concurrent_rerun_claims_have_one_winner",
            "stale_rerun_claim_is_refused_by_its_term",
            "rerun_refused_after_first_round_recorded_finished",
            "rerun_refused_after_later_instant_claimed",
            "rerun_refused_while_name_held",
            "rerun_round_finishes_like_any_other",
        ],
    ),
    (
        "last: the last instant on record, none for a name never claimed",
        &[
            "last_instant_of_never_claimed_name_is_none",
            "last_instant_of_plainly_claimed_name_is_none",
            "last_instant_follows_the_rounds",
        ],
    ),
    (
        "Hold: renewals keep the name; a loss ends the context with its cause; the holder steps down at its local deadline, before the database frees the name",
        &[
            "hold_keeps_name_well_past_lease_duration",
            "hold_ends_context_as_not_this_holders_after_takeover",
            "hold_steps_down_at_deadline_before_name_is_free",
        ],
    ),
    (
        "renewals of many leases: one batch answers each lease as renew would; batching keeps every lease's semantics",
        &[
            "renew_many_answers_each_lease_like_renew",
            "batched_renewals_keep_every_name_and_lose_only_the_lost",
        ],
    ),
    (
        "reading leases (Rust addition): one row, or rows by prefix, by the database's clock, in one statement, no token",
        &[
            "get_of_never_claimed_name_is_none",
            "get_of_held_lease_reads_instance_term_and_time_left",
            "get_of_expired_lease_is_not_held",
            "get_of_released_lease_reads_released",
            "get_after_takeover_names_the_successor",
            "list_reads_names_with_prefix_in_byte_order_up_to_limit",
        ],
    ),
    (
        "forced release (Rust addition): frees a held name only under the term read; its holder then finds it gone",
        &["force_release_frees_only_the_term_read"],
    ),
    (
        "resign on request (Rust addition, issue 25): the resign_term column asks the holder at one term only; its renewals report the request and still extend the lease; a leader asked hands over to a follower at the next term, its work ended first",
        &[
            "resign_request_reaches_only_the_holder_at_its_term",
            "resign_request_ends_with_its_term",
            "leader_asked_to_resign_hands_over_to_a_follower",
        ],
    ),
    (
        "errors (Rust addition): a missing table is its own kind, says to migrate, and is not retryable",
        &["statement_on_a_missing_table_says_to_migrate_and_is_not_retried"],
    ),
    (
        "lock (Rust capability): one runner among concurrent lockers; a loss during the work is reported with the work's output",
        &[
            "lock_runs_once_among_sixteen_lockers",
            "lock_lost_during_its_work_reports_the_loss_with_the_output",
        ],
    ),
    (
        "leader (Rust capability): one leader at a time; shutdown hands over; a killed leader is replaced after expiry, within one campaign interval",
        &[
            "leader_election_has_one_leader_and_hands_over_at_shutdown",
            "killed_leader_is_replaced_after_its_lease_expires",
        ],
    ),
];
