//! The history checker of the multi-replica tests: what each round of each
//! job saw, and the scheduler's promises checked over it.
//!
//! The safety rule on instants (at most twice, the second only as a rerun
//! after a first round cut short) is the soak's, `lease_testkit::check::instants`,
//! which judges the scheduler under faults too: one rule, one place. What is
//! particular to these fault-free tests (every instant of the window ran, a
//! round cut short ran again, the clock is this machine's) stays here.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use lease_core::{BoxError, FinishRequest, Finished, ForwardingStore, LeaseStore, async_trait};

use lease_testkit::check::{End, Tenure, TenureId, Violation, instants};
use lease_testkit::history::StopCause;

/// The jobs each replica of the in-process test runs: `<prefix>-0` ..
/// `<prefix>-{JOBS-1}`, `@every 1s` (the cross-process test runs more).
pub const JOBS: usize = 4;

/// How a round ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Running,
    Ran,
    /// Returned an error once its context had ended.
    CutShort,
    /// Its future was dropped, or its process killed (its replica crashed).
    Dropped,
}

impl Outcome {
    pub fn cut_short(self) -> bool {
        matches!(self, Outcome::CutShort | Outcome::Dropped)
    }
}

/// One round, with wall-clock times (ms) of this machine, which every
/// replica of the tests shares.
#[derive(Debug, Clone)]
pub struct Rec {
    pub job: usize,
    pub instant: i64,
    pub replica: String,
    pub rerun: bool,
    pub term: u64,
    pub start_ms: i64,
    pub end_ms: Option<i64>,
    pub outcome: Outcome,
    /// Whether the round's end is recorded in the lease's row (its
    /// `finish` answered that it was). A round that ran to its end may
    /// still not be: its process killed, or its finish failed, between the
    /// work's end and the record. Then a rerun is allowed, not required.
    pub finished: bool,
}

/// What [`FinishRecorder`] calls with a job's name and the instant whose
/// end the store recorded.
pub type OnFinish = Arc<dyn Fn(&str, i64) + Send + Sync>;

/// A store that tells, for each round, whether its end was recorded: a
/// round whose work ran to its end is finished only once its `finish`
/// answers so. Between the two, a kill (or a finish that fails under load)
/// leaves the round unfinished, and its rerun is then the scheduler's
/// promise, not a second run.
pub struct FinishRecorder {
    inner: Arc<dyn LeaseStore>,
    on_finish: OnFinish,
}

impl FinishRecorder {
    pub fn wrap(inner: Arc<dyn LeaseStore>, on_finish: OnFinish) -> Arc<dyn LeaseStore> {
        Arc::new(Self { inner, on_finish })
    }
}

impl fmt::Debug for FinishRecorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FinishRecorder")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl ForwardingStore for FinishRecorder {
    fn inner(&self) -> &dyn LeaseStore {
        &*self.inner
    }

    async fn finish(&self, finish: FinishRequest<'_>) -> Result<Finished, BoxError> {
        let out = self.inner.finish(finish).await;
        if matches!(out, Ok(Finished::Released | Finished::RecordedWithoutLease)) {
            (self.on_finish)(finish.name, finish.instant_ms);
        }
        out
    }
}

/// The job number of a job named `<prefix>-<number>`.
pub fn job_of(name: &str) -> usize {
    name.rsplit_once('-').unwrap().1.parse().unwrap()
}

/// This machine's wall clock in ms.
pub fn wall_ms() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

fn summary(recs: &[Rec], job: usize) -> Vec<String> {
    recs.iter()
        .filter(|r| r.job == job)
        .map(|r| {
            format!(
                "{} {} t{} {:?}{}",
                r.instant % 100_000,
                r.replica,
                r.term,
                r.outcome,
                if r.rerun { " rerun" } else { "" }
            )
        })
        .collect()
}

/// The rounds of `job` as the soak's checker sees tenures: a round counts as
/// finished when its end was recorded ([`Rec::finished`]), one cut short or
/// dropped as not.
fn tenures(recs: &[Rec], job: usize) -> Vec<Tenure> {
    recs.iter()
        .filter(|r| r.job == job)
        .enumerate()
        .map(|(i, r)| Tenure {
            name: format!("job {job}"),
            id: TenureId {
                instance: r.replica.clone(),
                seq: i as u64,
                term: r.term,
            },
            slot: Some(r.instant),
            rerun: r.rerun,
            sent_ms: None,
            claim_ms: r.start_ms,
            stop_ms: r.end_ms.unwrap_or(i64::MAX),
            end: match r.outcome {
                Outcome::Ran => End::Stopped(StopCause::Done),
                Outcome::CutShort => End::Stopped(StopCause::Lost),
                Outcome::Dropped => End::Killed,
                Outcome::Running => End::Open,
            },
            finished: r.finished,
        })
        .collect()
}

/// Violations of the instant rule (lease-testkit's, the soak's) by the rounds of `job`.
fn instant_violations(recs: &[Rec], job: usize) -> Vec<Violation> {
    let mut out = Vec::new();
    instants(&format!("job {job}"), &tenures(recs, job), &mut out);
    out
}

/// Checks, job by job (jobs `0..jobs`), over the instants from `started`
/// to `stopped` (database ms):
///
/// - never two rounds of one job at once;
/// - no instant run more than twice; a second run only as a rerun, after a
///   first round cut short;
/// - each first round cut short for which `rerun_due` holds ran again;
/// - every instant of the window ran, except when the job's name was held
///   as it came, which the scheduler documents: the instant after a round
///   cut short (dropped by a crash, or its lease lost under load: the lease,
///   or the rerun, may hold the name), or one that came while another round
///   of the job ran (a rerun, or a round that overran, see [`held`]).
///
/// A replica killed (or dropped) just after it claimed an instant, before
/// the job's function wrote its first line, leaves a first round with no
/// record: its rerun is then the only round seen. That is accepted only for
/// an instant at most [`UNRECORDED`] ms before a crash, and only once; the
/// instant after it is excused as after a dropped round.
///
/// Every round must have ended (a crashed one, with `Dropped`).
/// How long before a crash a claimed instant's first round may have left no
/// record (its claim answered, its function not yet started): with every
/// job's instants at the same second, a loaded machine can take this long
/// to start them all.
pub const UNRECORDED: i64 = 2_000;

/// The instants whose first round may have left no record: at most
/// [`UNRECORDED`] ms before a crash (a dropped round's end).
fn unrecorded(recs: &[Rec], instant: i64) -> bool {
    recs.iter()
        .filter(|r| r.outcome == Outcome::Dropped)
        .filter_map(|r| r.end_ms)
        .any(|crash| (crash - UNRECORDED..=crash).contains(&instant))
}

/// How late after its instant a claim may come on a loaded machine, for
/// [`held`].
pub const CLAIM_LATE: i64 = 500;

/// Whether the name of `job` may have been held as `instant` came, so that
/// its claim was refused: the instant comes within a second after a round
/// cut short (its lease runs out, then the rerun holds the name), or while
/// (up to [`CLAIM_LATE`] ms after the instant) another round of the job ran.
pub fn held(recs: &[Rec], job: usize, instant: i64) -> bool {
    recs.iter().filter(|r| r.job == job).any(|r| {
        let after_cut =
            r.outcome.cut_short() && instant > r.instant && instant <= r.instant + 1_000;
        let running = r.instant != instant
            && r.start_ms <= instant + CLAIM_LATE
            && r.end_ms.is_none_or(|end| end >= instant);
        after_cut || running
    })
}

/// Instants the scheduler of each replica said it gave up, for the
/// documented reason that it could not claim them in time (the database did
/// not answer before the next instant was due, or the replica woke past
/// them: "gave up the instant", "instants missed"). A loaded machine can
/// starve every replica at once; an instant that never ran is then excused
/// only when every replica alive as it came gave it up.
#[derive(Debug, Default, Clone)]
pub struct Excuses {
    /// Each replica, with when it died (killed), if it did.
    pub replicas: Vec<(String, Option<i64>)>,
    /// (replica, job, from, to): the replica gave up the job's instants in
    /// `from..to`.
    pub given_up: Vec<(String, usize, i64, i64)>,
}

impl Excuses {
    /// Whether `instant` came at most [`UNRECORDED`] ms before a replica
    /// died: its first round there may have left no record. (The history
    /// of one job alone may hold no dropped round of that crash: the
    /// round the kill cut was another job's.)
    pub fn crash_near(&self, instant: i64) -> bool {
        self.replicas
            .iter()
            .filter_map(|(_, died)| *died)
            .any(|died| (died - UNRECORDED..=died).contains(&instant))
    }

    /// Whether every replica alive at `instant` gave it up.
    pub fn excuse(&self, job: usize, instant: i64) -> bool {
        let mut alive = self
            .replicas
            .iter()
            .filter(|(_, died)| died.is_none_or(|d| d > instant))
            .peekable();
        alive.peek().is_some()
            && alive.all(|(replica, _)| {
                self.given_up.iter().any(|(r, j, from, to)| {
                    r == replica && *j == job && (*from..*to).contains(&instant)
                })
            })
    }
}

pub fn check(
    recs: &[Rec],
    jobs: usize,
    started: i64,
    stopped: i64,
    rerun_due: impl Fn(&Rec) -> bool,
) {
    check_with(recs, jobs, started, stopped, rerun_due, &Excuses::default());
}

/// [`check`], with the instants every replica gave up excused.
pub fn check_with(
    recs: &[Rec],
    jobs: usize,
    started: i64,
    stopped: i64,
    rerun_due: impl Fn(&Rec) -> bool,
    excuses: &Excuses,
) {
    assert!(
        recs.iter()
            .all(|r| r.outcome != Outcome::Running && r.end_ms.is_some()),
        "every round ended: {recs:#?}"
    );
    for job in 0..jobs {
        let mut rounds: Vec<&Rec> = recs.iter().filter(|r| r.job == job).collect();
        rounds.sort_by_key(|r| r.start_ms);
        for pair in rounds.windows(2) {
            assert!(
                pair[1].start_ms >= pair[0].end_ms.unwrap(),
                "job {job}: two rounds at once: {:?} {:?}: {:?}",
                pair[0],
                pair[1],
                summary(recs, job)
            );
        }
        let mut by_instant: BTreeMap<i64, Vec<&Rec>> = BTreeMap::new();
        for r in &rounds {
            by_instant.entry(r.instant).or_default().push(r);
        }
        let mut crashed: Vec<i64> = rounds
            .iter()
            .filter(|r| r.outcome == Outcome::Dropped)
            .map(|r| r.instant)
            .collect();
        let violations = instant_violations(recs, job);
        assert!(
            violations.is_empty(),
            "job {job}: {}: {:?}",
            violations
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
            summary(recs, job)
        );
        for (instant, runs) in &by_instant {
            let at = instant % 100_000;
            if runs[0].rerun {
                assert!(
                    runs.len() == 1 && (unrecorded(recs, *instant) || excuses.crash_near(*instant)),
                    "job {job} {at}: a rerun with no first round before it, away from a crash: {:?}",
                    summary(recs, job)
                );
                crashed.push(*instant);
                continue;
            }
            if runs[0].outcome.cut_short() && rerun_due(runs[0]) {
                assert_eq!(
                    runs.len(),
                    2,
                    "job {job} {at}: the round cut short ran again once: {:?}",
                    summary(recs, job)
                );
            }
        }
        let first = (started / 1_000 + 2) * 1_000;
        let last = (stopped / 1_000 - 1) * 1_000;
        let mut instant = first;
        while instant <= last {
            let excused = crashed.iter().any(|&x| instant > x && instant <= x + 1_000)
                || held(recs, job, instant)
                || excuses.excuse(job, instant);
            assert!(
                by_instant.contains_key(&instant) || excused,
                "job {job}: instant {} never ran: {:?}",
                instant % 100_000,
                summary(recs, job)
            );
            instant += 1_000;
        }
    }
}

/// Checks that the checker has teeth: each planted bug in a good history
/// makes `check` panic.
pub fn planted_bugs_are_caught(
    good: &[Rec],
    jobs: usize,
    started: i64,
    stopped: i64,
    rerun_due: impl Fn(&Rec) -> bool + Copy + std::panic::RefUnwindSafe,
) {
    planted_bugs_are_caught_with(good, jobs, started, stopped, rerun_due, &Excuses::default());
}

/// [`planted_bugs_are_caught`], judged by [`check_with`] and `excuses`.
pub fn planted_bugs_are_caught_with(
    good: &[Rec],
    jobs: usize,
    started: i64,
    stopped: i64,
    rerun_due: impl Fn(&Rec) -> bool + Copy + std::panic::RefUnwindSafe,
    excuses: &Excuses,
) {
    check_with(good, jobs, started, stopped, rerun_due, excuses);
    let fails = |recs: Vec<Rec>, what: &str| {
        eprintln!("planting a bug in the history: {what} (the panic below is expected)");
        let caught = std::panic::catch_unwind(|| {
            check_with(&recs, jobs, started, stopped, rerun_due, excuses)
        })
        .is_err();
        assert!(caught, "the checker missed a planted bug: {what}");
    };
    let ran: Vec<&Rec> = good
        .iter()
        .filter(|r| r.outcome == Outcome::Ran && r.finished && !r.rerun)
        .collect();
    let victim = (*ran.last().expect("a round that ran")).clone();
    // An instant run twice though its first round ran to its end.
    let mut twice = good.to_vec();
    let mut again = victim.clone();
    again.rerun = true;
    again.start_ms = victim.end_ms.unwrap() + 1;
    again.end_ms = Some(again.start_ms + 1);
    twice.push(again);
    fails(twice, "a second run after a round that ran");
    // A rerun with no first round before it, away from any crash.
    if let Some(lone) = ran
        .iter()
        .find(|r| !unrecorded(good, r.instant) && !excuses.crash_near(r.instant))
    {
        let mut rerun_alone = good.to_vec();
        for r in &mut rerun_alone {
            if r.job == lone.job && r.instant == lone.instant {
                r.rerun = true;
            }
        }
        fails(rerun_alone, "a rerun with no first round");
    }
    // Two rounds of one job at once.
    let mut overlapping = good.to_vec();
    let mut beside = victim.clone();
    beside.instant += 100_000_000; // an instant of its own, far away
    beside.start_ms = victim.start_ms + 1;
    overlapping.push(beside);
    fails(overlapping, "two rounds of one job at once");
    // An instant of the window that ran, and is not excused, never ran.
    let (first, last) = ((started / 1_000 + 2) * 1_000, (stopped / 1_000 - 1) * 1_000);
    let gone = ran
        .iter()
        .find(|r| {
            (first..=last).contains(&r.instant)
                && !held(good, r.job, r.instant)
                && !unrecorded(good, r.instant - 1_000)
                && !excuses.crash_near(r.instant - 1_000)
                && !excuses.excuse(r.job, r.instant)
                && !good.iter().any(|d| {
                    d.job == r.job
                        && d.outcome == Outcome::Dropped
                        && d.instant == r.instant - 1_000
                })
        })
        .expect("an instant of the window that ran");
    let mut missing = good.to_vec();
    missing.retain(|r| !(r.job == gone.job && r.instant == gone.instant));
    fails(missing, "an instant that never ran");
    // A round cut short that never ran again: a first round cut short and
    // due a rerun (the crash's; `check` passed, so the good history has its
    // rerun). A round cut short may itself be a rerun, which is due none.
    let cut = good
        .iter()
        .find(|r| r.outcome.cut_short() && !r.rerun && rerun_due(r))
        .expect("a first round cut short and due a rerun");
    let mut unrun = good.to_vec();
    unrun.retain(|r| !(r.job == cut.job && r.instant == cut.instant && r.rerun));
    fails(unrun, "a round cut short never run again");
}
