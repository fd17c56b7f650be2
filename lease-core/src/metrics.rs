//! Metrics, through the [`metrics`] facade: the process installs whichever
//! recorder (exporter) it wants, or none, and then these cost nothing.
//!
//! | metric | type | labels | what it counts |
//! | --- | --- | --- | --- |
//! | `lease_claims_total` | counter | `kind`, `outcome` = `claimed` / `refused` / `error` | claims (plain, instant and second claims) |
//! | `lease_renewals_total` | counter | `outcome` = `renewed` / `lost` / `error` | renewal attempts of held leases |
//! | `lease_renewal_duration_seconds` | histogram | | how long each renewal attempt took, batched or not |
//! | `lease_losses_total` | counter | `kind`, `cause` = `not_holder` / `deadline_exceeded` | leases lost while held |
//! | `lease_held` | gauge | `kind` | leases this process holds (kept renewed) now |
//! | `lease_lock_runs_total` | counter | `outcome` = `ran` / `held` / `lost` / `error` | `Lock` calls |
//! | `lease_leader` | gauge | `name` | 1 while this process leads that election, else 0 |
//! | `lease_guarded_transactions_total` | counter | `outcome` = `committed` / `failed` / `unknown` | guarded transactions of the backends (`failed`: lost, refused, rolled back, or not begun; nothing committed. `unknown`: `COMMIT` was sent and its answer lost) |
//! | `lease_leader_transitions_total` | counter | `name`, `reason` = `elected` / `lost` / `shutting_down` / `work_returned` / `resigned` | changes of this process's leadership |
//! | `lease_resign_requests_total` | counter | `outcome` = `asked` / `not_held` / `error` | resign requests this process sent ([`Leases::request_resign`](crate::Leases::request_resign)) |
//! | `lease_resigns_total` | counter | `kind` | holders of this process asked to resign (learnt from a renewal) |
//!
//! `kind` is the name's prefix (`lock`, `leader`, `cron`) or `other`: never
//! the name itself, so a process holding 100,000 leases does not make
//! 100,000 series. Only `lease_leader` carries the name, for the few
//! elections a process takes part in.

use std::time::Duration;

use crate::error::LostCause;

/// The metric names, as constants for dashboards and tests.
pub mod names {
    /// Claims by `kind` and `outcome`.
    pub const CLAIMS: &str = "lease_claims_total";
    /// Renewal attempts by `outcome`.
    pub const RENEWALS: &str = "lease_renewals_total";
    /// Renewal latency, in seconds.
    pub const RENEWAL_DURATION: &str = "lease_renewal_duration_seconds";
    /// Leases lost while held, by `kind` and `cause`.
    pub const LOSSES: &str = "lease_losses_total";
    /// Leases held now, by `kind`.
    pub const HELD: &str = "lease_held";
    /// Lock calls by `outcome`.
    pub const LOCK_RUNS: &str = "lease_lock_runs_total";
    /// 1 while leading, by `name`.
    pub const LEADER: &str = "lease_leader";
    /// Leadership changes by `name` and `reason`.
    pub const LEADER_TRANSITIONS: &str = "lease_leader_transitions_total";
    /// Guarded transactions by `outcome`.
    pub const GUARDED_TRANSACTIONS: &str = "lease_guarded_transactions_total";
    /// Resign requests sent, by `outcome`.
    pub const RESIGN_REQUESTS: &str = "lease_resign_requests_total";
    /// Holders asked to resign, by `kind`.
    pub const RESIGNS: &str = "lease_resigns_total";
}

/// The `kind` label of a name: its capability prefix.
pub(crate) fn kind(name: &str) -> &'static str {
    match name.split_once(':').map(|(prefix, _)| prefix) {
        Some("lock") => "lock",
        Some("leader") => "leader",
        Some("cron") => "cron",
        _ => "other",
    }
}

pub(crate) fn claim(name: &str, outcome: &'static str) {
    metrics::counter!(names::CLAIMS, "kind" => kind(name), "outcome" => outcome).increment(1);
}

pub(crate) fn renewal(outcome: &'static str, took: Duration) {
    metrics::counter!(names::RENEWALS, "outcome" => outcome).increment(1);
    metrics::histogram!(names::RENEWAL_DURATION).record(took.as_secs_f64());
}

pub(crate) fn loss(name: &str, cause: LostCause) {
    let cause = match cause {
        LostCause::NotHolder => "not_holder",
        LostCause::DeadlineExceeded => "deadline_exceeded",
        LostCause::ClockJump => "clock_jump",
    };
    metrics::counter!(names::LOSSES, "kind" => kind(name), "cause" => cause).increment(1);
}

/// Counts one held lease in `lease_held` for as long as it lives.
pub(crate) struct Held(&'static str);

impl Held {
    pub(crate) fn new(name: &str) -> Self {
        let kind = kind(name);
        metrics::gauge!(names::HELD, "kind" => kind).increment(1.0);
        Held(kind)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        metrics::gauge!(names::HELD, "kind" => self.0).decrement(1.0);
    }
}

/// Counts a guarded transaction in `lease_guarded_transactions_total` by
/// its `outcome`: `committed`, `failed` (nothing committed) or `unknown`
/// (`COMMIT` sent, its answer lost). [`crate::guard::drive`] counts every
/// backend's.
pub(crate) fn guarded_transaction(outcome: &'static str) {
    metrics::counter!(names::GUARDED_TRANSACTIONS, "outcome" => outcome).increment(1);
}

pub(crate) fn resign_request(outcome: &'static str) {
    metrics::counter!(names::RESIGN_REQUESTS, "outcome" => outcome).increment(1);
}

pub(crate) fn resigned(name: &str) {
    metrics::counter!(names::RESIGNS, "kind" => kind(name)).increment(1);
}

pub(crate) fn lock_run(outcome: &'static str) {
    metrics::counter!(names::LOCK_RUNS, "outcome" => outcome).increment(1);
}

pub(crate) fn leader(name: &str, leading: bool, reason: &'static str) {
    metrics::gauge!(names::LEADER, "name" => name.to_owned()).set(if leading { 1.0 } else { 0.0 });
    metrics::counter!(names::LEADER_TRANSITIONS, "name" => name.to_owned(), "reason" => reason)
        .increment(1);
}

#[cfg(test)]
pub(crate) mod testing {
    /// The workspace's test recorder: every counter, gauge and histogram.
    pub(crate) use lease_testkit::metrics::Recorded;
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::time::sleep;
    use tokio_util::sync::CancellationToken;

    use super::testing::Recorded;
    use super::*;
    use crate::Leases;
    use crate::testing::Table;

    /// Runs `f` on a paused current-thread runtime with `recorder` as this
    /// thread's metrics recorder (every task runs on this thread).
    fn recorded<F: Future<Output = ()>>(f: impl FnOnce(Arc<Table>) -> F) -> Recorded {
        let recorder = Recorded::default();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        metrics::with_local_recorder(&recorder, || {
            runtime.block_on(f(Arc::new(Table::new())));
        });
        recorder
    }

    #[test]
    fn claims_renewals_losses_and_held_leases_are_counted() {
        let rec = recorded(|table| async move {
            let leases = Leases::from_arc(table.clone()).with_instance("me").unwrap();
            let h = leases.claim("lock:a").await.unwrap().unwrap();
            assert!(leases.claim("lock:a").await.unwrap().is_none());
            let holder = h.hold(&CancellationToken::new());
            sleep(Duration::from_millis(4_100)).await; // two renewals
            let _ = table.steal("lock:a", "thief", 15_000);
            sleep(Duration::from_secs(3)).await; // the next one finds it gone
            assert!(h.lost());
            holder.stop().await;
            table.set_down(true);
            assert!(leases.claim("cron:job").await.is_err());
        });
        let claims = names::CLAIMS;
        assert_eq!(
            rec.counter(claims, &[("kind", "lock"), ("outcome", "claimed")]),
            1
        );
        assert_eq!(
            rec.counter(claims, &[("kind", "lock"), ("outcome", "refused")]),
            1
        );
        assert_eq!(
            rec.counter(claims, &[("kind", "cron"), ("outcome", "error")]),
            1
        );
        assert_eq!(rec.counter(names::RENEWALS, &[("outcome", "renewed")]), 2);
        assert_eq!(rec.counter(names::RENEWALS, &[("outcome", "lost")]), 1);
        assert_eq!(rec.histogram(names::RENEWAL_DURATION).len(), 3);
        assert_eq!(
            rec.counter(names::LOSSES, &[("kind", "lock"), ("cause", "not_holder")]),
            1
        );
        assert_eq!(rec.gauge(names::HELD, &[("kind", "lock")]), Some(0.0));
    }

    #[test]
    fn locks_and_leadership_are_counted() {
        let rec = recorded(|table| async move {
            let leases = Leases::from_arc(table.clone()).with_instance("me").unwrap();
            leases.lock("a").try_run(|_| async {}).await.unwrap();
            let _ = table.steal("lock:b", "other", 15_000);
            assert!(leases.lock("b").try_run(|_| async {}).await.is_err());
            let shutdown = CancellationToken::new();
            let stop = shutdown.clone();
            let leader = leases.leader("x");
            let status = leader.watch();
            let run = tokio::spawn(async move {
                leader
                    .run(&shutdown, |ctx| async move { ctx.cancelled().await })
                    .await
            });
            sleep(Duration::from_secs(1)).await;
            assert!(status.borrow().is_leading());
            stop.cancel();
            run.await.unwrap().unwrap();
        });
        assert_eq!(rec.counter(names::LOCK_RUNS, &[("outcome", "ran")]), 1);
        assert_eq!(rec.counter(names::LOCK_RUNS, &[("outcome", "held")]), 1);
        let name = [("name", "leader:x")];
        assert_eq!(
            rec.gauge(names::LEADER, &name),
            Some(0.0),
            "no longer leading"
        );
        let transitions = names::LEADER_TRANSITIONS;
        assert_eq!(
            rec.counter(transitions, &[("name", "leader:x"), ("reason", "elected")]),
            1
        );
        assert_eq!(
            rec.counter(
                transitions,
                &[("name", "leader:x"), ("reason", "shutting_down")]
            ),
            1
        );
    }

    #[test]
    fn kind_is_the_capability_prefix_never_the_name() {
        assert_eq!(kind("lock:report"), "lock");
        assert_eq!(kind("leader:billing"), "leader");
        assert_eq!(kind("cron:job"), "cron");
        assert_eq!(kind("tenant-42"), "other");
        assert_eq!(kind("locks:x"), "other");
    }
}
