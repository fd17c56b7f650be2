//! Three replicas, as three processes, coordinate through one database with
//! the three capabilities: a leader, a lock and a scheduled job.
//!
//! ```sh
//! cargo run -p dblease --example demo                  # an SQLite file in a temp dir
//! cargo run -p dblease --example demo --features all-backends -- postgres://…
//! ```
//!
//! Each replica campaigns for the leader lease `leader:demo`
//! (`leases.leader("demo").run`), tries the lock `lock:report` now and then
//! (`leases.lock("report").try_run`: it runs the report, or says who holds
//! it), and runs a scheduler with one job, `cron:tick`, `@every 1s`: every
//! second one replica runs the round for that instant. Partway through, the
//! demo kills the leader's process with SIGKILL (no release, no goodbye) in
//! the middle of one of its job's rounds, and checks, from what the
//! processes printed:
//!
//! - another replica leads within the bound (lease + one campaign pause),
//!   at the next term;
//! - each instant of the job ran once, and the round the kill cut short ran
//!   again exactly once, on a survivor (a rerun); the instants that came
//!   while the dead replica's lease, and then the rerun, held the job's name
//!   were skipped, not run late;
//! - the lock never ran on two replicas at once, its terms increasing.
//!
//! On a server database (a URL given), the demo keeps its leases in a table
//! of its own, `lease_demo_<pid>`, and drops it at the end, so that it never
//! writes into the database's `gst_leases`; with no URL it uses an SQLite
//! file in a temporary directory.
//!
//! The timings are shortened (a 2.4 s lease instead of 15 s, renewals every
//! 400 ms, a campaign every 0.5 s, a rerun sweep every 200 ms) so that the
//! takeover and the rerun happen within seconds rather than the half minute
//! they take with the defaults. With a 2.4 s lease, the lease of a round
//! killed just after its instant runs out near the middle of a second, and
//! the sweep finds it before the job's next instant could claim the name
//! (which would give the round up instead of running it again).
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a demo: it prints what the replicas do"
)]

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dblease::scheduler::{Job, Round, Scheduler};
use dblease::{CancellationToken, StepDown, Timings};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

type BoxResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const REPLICAS: usize = 3;
const LEADER: &str = "demo";
const LOCK: &str = "report";
const JOB: &str = "tick";
/// How long a round of the job works.
const ROUND: Duration = Duration::from_millis(400);
/// How long the report under the lock works.
const REPORT: Duration = Duration::from_millis(1_000);
const CAMPAIGN: Duration = Duration::from_millis(500);
const CAMPAIGN_JITTER: Duration = Duration::from_millis(200);
const SWEEP: Duration = Duration::from_millis(200);

fn timings() -> dblease::Result<Timings> {
    Timings::builder()
        .lease(Duration::from_millis(2_400))
        .renew(Duration::from_millis(400))
        .deadline(Duration::from_millis(1_600))
        .grace(Duration::from_millis(400))
        .build()
}

fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// An instant as a time of day in UTC: `10:00:03`.
fn hms(ms: i64) -> String {
    let s = ms.div_euclid(1_000).rem_euclid(86_400);
    format!("{:02}:{:02}:{:02}", s / 3_600, s / 60 % 60, s % 60)
}

#[tokio::main]
async fn main() -> BoxResult<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--replica") {
        let id: usize = args.get(2).ok_or("replica id")?.parse()?;
        let url = args.get(3).ok_or("replica URL")?;
        let table = args.get(4).ok_or("replica table")?;
        return replica(id, url, table).await;
    }
    let dir = tempfile::tempdir()?;
    let (url, table) = match args.get(1) {
        Some(url) => (url.clone(), format!("lease_demo_{}", std::process::id())),
        None => (
            format!("sqlite://{}", dir.path().join("demo.db").display()),
            "gst_leases".to_owned(),
        ),
    };
    let setup = dblease::connect_backend_on(&url, &table, &timings()?).await?;
    let outcome = orchestrate(&url, &table, &setup).await;
    if args.get(1).is_some() {
        drop_table(&setup, &table).await?;
        println!("dropped the demo's table {table}");
    }
    outcome
}

/// Drops the demo's own table on the database the user gave.
async fn drop_table(backend: &dblease::Backend, table: &str) -> BoxResult<()> {
    match backend {
        #[cfg(feature = "postgres")]
        dblease::Backend::Postgres(store) => {
            let client = store.pool().get().await?;
            client
                .batch_execute(&format!("DROP TABLE IF EXISTS \"{table}\""))
                .await?;
        }
        #[cfg(feature = "mysql")]
        dblease::Backend::MySql(store) => {
            use dblease::mysql::mysql_async::prelude::Queryable;
            let mut conn = store.pool().get_conn().await?;
            conn.query_drop(format!("DROP TABLE IF EXISTS `{table}`"))
                .await?;
        }
        #[cfg(feature = "sqlite")]
        dblease::Backend::Sqlite(store) => {
            let sql = format!("DROP TABLE IF EXISTS \"{table}\"");
            let Some(path) = store.path() else {
                return Ok(());
            };
            let conn = dblease::sqlite::rusqlite::Connection::open(path)?;
            conn.execute_batch(&sql)?;
        }
        #[allow(unreachable_patterns, reason = "a build with every backend")]
        _ => {}
    }
    Ok(())
}

/// The database's kind and where it is, for the header: never a password.
fn describe(backend: &dblease::Backend, url: &str) -> String {
    let kind = match backend.name() {
        "postgres" => "PostgreSQL",
        "mysql" => "MySQL/MariaDB",
        _ => "SQLite",
    };
    let at = url.split('@').next_back().unwrap_or(url);
    let at = at.split_once("://").map_or(at, |(_, rest)| rest);
    format!("{kind} ({at})")
}

// ---------------------------------------------------------------------------
// A replica: what a service would run. It prints one machine-readable line
// per thing it does; the orchestrator renders them and checks them.
// ---------------------------------------------------------------------------

async fn replica(id: usize, url: &str, table: &str) -> BoxResult<()> {
    // The store's server-side bounds follow the same timings.
    let timings = timings()?;
    let leases = dblease::connect_backend_on(url, table, &timings)
        .await?
        .leases()
        .with_timings(timings)
        .with_instance(format!("replica-{id}"))?;
    // Runs until killed: the orchestrator ends every replica with SIGKILL.
    let shutdown = CancellationToken::new();

    let leader = leases
        .leader(LEADER)
        .with_campaign_interval(CAMPAIGN, CAMPAIGN_JITTER)
        .on_started_leading(|term| println!("LEAD {term}"))
        .on_stopped_leading(|why: StepDown| println!("STEPDOWN {why}"))
        .on_new_leader(|id| println!("FOLLOW {} {}", id.instance, id.term));
    let lead = {
        let shutdown = shutdown.clone();
        // The duty: here, just being the leader until the context ends.
        async move {
            leader
                .run(&shutdown, |ctx| async move { ctx.cancelled().await })
                .await
        }
    };

    let scheduler = Scheduler::builder(leases.clone())
        .sweep_interval(SWEEP)
        .job(Job::new(JOB, "@every 1s", |round: Round| async move {
            let instant = round.instant().as_millis();
            println!(
                "RUN {instant} {} {} {}",
                round.term().unwrap_or(0),
                round.is_rerun(),
                round.is_catch_up()
            );
            tokio::select! {
                () = tokio::time::sleep(ROUND) => {
                    println!("DONE {instant}");
                    Ok(())
                }
                () = round.cancelled() => {
                    println!("CUT {instant}");
                    round.check()?;
                    Ok(())
                }
            }
        }))
        .build()?;
    let schedule = {
        let shutdown = shutdown.clone();
        async move { scheduler.run(&shutdown, Duration::from_secs(5)).await }
    };

    let report = async {
        // Start apart, so that the replicas take turns.
        tokio::time::sleep(Duration::from_millis(300 * id as u64)).await;
        let lock = leases.lock(LOCK);
        loop {
            let pause = match lock
                .try_run(|ctx| async move {
                    println!("LOCKRUN {} {}", ctx.term(), wall_ms());
                    tokio::time::sleep(REPORT).await;
                    println!("LOCKDONE {} {}", ctx.term(), wall_ms());
                })
                .await
            {
                Ok(()) => Duration::from_millis(2_000),
                Err(e) if e.is_held() => {
                    match e.held_by() {
                        Some(by) => println!("LOCKHELD {} {}", by.instance, by.term),
                        None => println!("LOCKHELD ? 0"),
                    }
                    Duration::from_millis(1_500)
                }
                Err(e) => {
                    eprintln!("replica-{id}: lock {LOCK}: {e}");
                    Duration::from_millis(700)
                }
            };
            tokio::time::sleep(pause).await;
        }
    };

    let (led, scheduled, ()) = tokio::join!(lead, schedule, report);
    led?;
    scheduled?;
    Ok(())
}

// ---------------------------------------------------------------------------
// The orchestrator: starts the replicas, kills the leader mid-round, checks.
// ---------------------------------------------------------------------------

/// A line one replica printed, as the orchestrator heard it: stamped as the
/// orchestrator takes it, so that what it prints is in time order.
#[derive(Debug)]
struct Line {
    replica: usize,
    at: Instant,
    words: Vec<String>,
}

/// A line as its replica's reader passed it on, not stamped yet.
#[derive(Debug)]
struct Heard {
    replica: usize,
    words: Vec<String>,
}

/// One round of the job, as its replica told it.
#[derive(Debug, Clone)]
struct RoundSeen {
    replica: usize,
    /// When its start was heard.
    at: Instant,
    term: u64,
    rerun: bool,
    catch_up: bool,
    /// `Some(true)` ran to its end, `Some(false)` cut short; `None` still
    /// running when last heard of (or killed).
    done: Option<bool>,
}

/// One run of the report under the lock: wall ms of its start and end.
#[derive(Debug, Clone)]
struct LockRun {
    replica: usize,
    term: u64,
    start: i64,
    end: Option<i64>,
}

#[derive(Default)]
struct Seen {
    /// Tenures: (replica, term, when heard).
    leads: Vec<(usize, u64, Instant)>,
    rounds: BTreeMap<i64, Vec<RoundSeen>>,
    locks: Vec<LockRun>,
    lock_refusals: usize,
}

impl Seen {
    /// Renders and records one line; returns the instant of a first round
    /// that just started, for the kill.
    fn take(&mut self, line: &Line, start: Instant) -> BoxResult<Option<i64>> {
        let t = line.at.duration_since(start).as_secs_f64();
        let who = format!("replica-{}", line.replica);
        let words: Vec<&str> = line.words.iter().map(String::as_str).collect();
        match words.as_slice() {
            ["LEAD", term] => {
                let term: u64 = term.parse()?;
                println!("{t:6.2}s  {who} leads leader:{LEADER}, term {term}");
                self.leads.push((line.replica, term, line.at));
            }
            ["STEPDOWN", why @ ..] => {
                println!("{t:6.2}s  {who} steps down: {}", why.join(" "));
            }
            ["FOLLOW", leader, term] => {
                println!("{t:6.2}s  {who} follows {leader} (term {term})");
            }
            ["RUN", instant, term, rerun, catch_up] => {
                let instant: i64 = instant.parse()?;
                let round = RoundSeen {
                    replica: line.replica,
                    at: line.at,
                    term: term.parse()?,
                    rerun: rerun.parse()?,
                    catch_up: catch_up.parse()?,
                    done: None,
                };
                let what = if round.rerun {
                    "RE-RUNS (a round cut short)"
                } else if round.catch_up {
                    "catches up"
                } else {
                    "runs"
                };
                println!(
                    "{t:6.2}s  {who} {what} instant {} of cron:{JOB}, term {}",
                    hms(instant),
                    round.term
                );
                let first = !round.rerun;
                self.rounds.entry(instant).or_default().push(round);
                return Ok(first.then_some(instant));
            }
            [end @ ("DONE" | "CUT"), instant] => {
                let instant: i64 = instant.parse()?;
                if let Some(r) = self
                    .rounds
                    .get_mut(&instant)
                    .and_then(|rs| rs.iter_mut().rev().find(|r| r.replica == line.replica))
                {
                    r.done = Some(*end == "DONE");
                }
                if *end == "CUT" {
                    println!(
                        "{t:6.2}s  {who} stops instant {} early: its round was cut short",
                        hms(instant)
                    );
                }
            }
            ["LOCKRUN", term, at] => {
                println!("{t:6.2}s  {who} runs the report under lock:{LOCK}, term {term}");
                self.locks.push(LockRun {
                    replica: line.replica,
                    term: term.parse()?,
                    start: at.parse()?,
                    end: None,
                });
            }
            ["LOCKDONE", term, at] => {
                let term: u64 = term.parse()?;
                if let Some(run) = self
                    .locks
                    .iter_mut()
                    .find(|r| r.replica == line.replica && r.term == term)
                {
                    run.end = Some(at.parse()?);
                }
            }
            ["LOCKHELD", by, term] => {
                self.lock_refusals += 1;
                println!(
                    "{t:6.2}s  {who} skips the report: lock:{LOCK} is held by {by} (term {term})"
                );
            }
            other => println!("{t:6.2}s  {who}: {}", other.join(" ")),
        }
        Ok(None)
    }
}

fn spawn(
    exe: &std::path::Path,
    i: usize,
    url: &str,
    table: &str,
    tx: &mpsc::UnboundedSender<Heard>,
) -> BoxResult<Child> {
    let mut child = Command::new(exe)
        .args(["--replica", &i.to_string(), url, table])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let tx = tx.clone();
    drop(tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let words = line.split_whitespace().map(str::to_owned).collect();
            let _ = tx.send(Heard { replica: i, words });
        }
    }));
    Ok(child)
}

async fn orchestrate(url: &str, table: &str, setup: &dblease::Backend) -> BoxResult<()> {
    let t = timings()?;
    println!(
        "lease demo: {REPLICAS} replica processes on {}",
        describe(setup, url)
    );
    if table == "gst_leases" {
        println!("leases in the table gst_leases of a database of the demo's own");
    } else {
        println!(
            "leases in a table of the demo's own, {table}, dropped at the end (the database's \
             gst_leases is left alone)"
        );
    }
    println!(
        "shortened timings, so that it takes seconds, not minutes: lease {:.1} s, renewal every \
         {:.1} s, a leader campaign every {:.1} s (+ up to {:.1} s), a rerun sweep every {} ms \
         (defaults: 15 s, 2 s, 5 s + 1 s, 15 s)",
        t.lease().as_secs_f64(),
        t.renew().as_secs_f64(),
        CAMPAIGN.as_secs_f64(),
        CAMPAIGN_JITTER.as_secs_f64(),
        SWEEP.as_millis()
    );
    println!("instants are times of day in UTC\n");
    let setup = setup.leases().with_timings(t);
    setup.migrate().await?;
    // Instants before this run (a database used before) are not checked.
    let first_checked = setup.now().await?.as_millis();

    let exe = std::env::current_exe()?;
    let (tx, mut rx) = mpsc::unbounded_channel::<Heard>();
    let mut children = (0..REPLICAS)
        .map(|i| spawn(&exe, i, url, table, &tx))
        .collect::<BoxResult<Vec<Child>>>()?;
    drop(tx);

    let start = Instant::now();
    // From 4 s on, the leader is killed just after it starts a round of the
    // job (rounds go to whichever replica claims first; up to 10 s more).
    let kill_from = start + Duration::from_secs(4);
    let kill_by = start + Duration::from_secs(14);
    let mut seen = Seen::default();
    // The leader to kill, its term and the instant of its round, once it
    // started one: killed 100 ms later, well inside the round (400 ms).
    let mut kill_at: Option<(Instant, usize, u64, i64)> = None;
    let mut killed: Option<(usize, u64, Instant, Option<i64>)> = None;
    let mut end_at = kill_by + Duration::from_secs(9);

    loop {
        let wake = match (killed, kill_at) {
            (Some(_), _) => end_at,
            (None, Some((at, ..))) => at,
            (None, None) => kill_by,
        };
        tokio::select! {
            heard = rx.recv() => {
                let Some(Heard { replica, words }) = heard else { break };
                let line = Line { replica, at: Instant::now(), words };
                let started = seen.take(&line, start)?;
                if killed.is_some() || kill_at.is_some() || line.at < kill_from {
                    continue;
                }
                let Some(&(leader, term, _)) = seen.leads.last() else { continue };
                if let (Some(instant), true) = (started, line.replica == leader) {
                    kill_at = Some((line.at + Duration::from_millis(100), leader, term, instant));
                }
            }
            () = tokio::time::sleep_until(wake.into()) => {
                if killed.is_some() {
                    break;
                }
                let (leader, term, instant) = match kill_at {
                    Some((_, leader, term, instant)) => (leader, term, Some(instant)),
                    // The leader ran no round in 10 s: kill it anyway.
                    None => match seen.leads.last() {
                        Some(&(leader, term, _)) => (leader, term, None),
                        None => return Err("no replica became leader within 14 s".into()),
                    },
                };
                children[leader].kill().await?;
                let round = instant
                    .map(|i| format!(", in its round of instant {}", hms(i)))
                    .unwrap_or_default();
                println!(
                    "{:6.2}s  >>> killed replica-{leader} (SIGKILL) while it led at term {term}{round}",
                    start.elapsed().as_secs_f64(),
                );
                killed = Some((leader, term, Instant::now(), instant));
                end_at = Instant::now() + Duration::from_secs(8);
            }
        }
    }
    for child in &mut children {
        let _ = child.kill().await;
    }
    let Some((victim, term, kill_time, cut)) = killed else {
        return Err("the demo ended before the kill".into());
    };
    check(&seen, victim, term, kill_time, cut, first_checked)
}

/// Checks what the replicas printed; prints the summary.
fn check(
    seen: &Seen,
    victim: usize,
    term: u64,
    kill_time: Instant,
    cut: Option<i64>,
    first_checked: i64,
) -> BoxResult<()> {
    println!("\nsummary, in the order it happened");
    let t = timings()?;
    let bound = t.lease() + CAMPAIGN + CAMPAIGN_JITTER;
    let mut ok = true;
    // The takeover and the job's rerun, each with when it happened.
    let mut events: Vec<(Instant, String)> = Vec::new();

    // The takeover.
    match seen.leads.iter().find(|(_, _, at)| *at > kill_time) {
        Some(&(new, new_term, at)) => {
            let after = at.duration_since(kill_time);
            // The bound, plus half a second for the claim's round trip and
            // the lines' way here on a loaded machine.
            let fine = new != victim
                && new_term == term + 1
                && after <= bound + Duration::from_millis(500);
            ok &= fine;
            events.push((
                at,
                format!(
                    "  leader: replica-{new} leads at term {new_term}, {:.2} s after \
                     replica-{victim} (term {term}) was killed; bound {:.1} s (lease + campaign \
                     pause)  {}",
                    after.as_secs_f64(),
                    bound.as_secs_f64(),
                    if fine { "ok" } else { "VIOLATED" }
                ),
            ));
        }
        None => {
            ok = false;
            events.push((
                kill_time,
                "  leader: no takeover seen after the kill  VIOLATED".to_owned(),
            ));
        }
    }

    // The job's instants.
    let mut once = 0;
    let mut bad = Vec::new();
    for (&instant, rounds) in seen.rounds.range(first_checked..) {
        let firsts = rounds.iter().filter(|r| !r.rerun).count();
        let reruns: Vec<&RoundSeen> = rounds.iter().filter(|r| r.rerun).collect();
        let first_cut = rounds.iter().any(|r| !r.rerun && r.done != Some(true));
        if firsts != 1 || reruns.len() > 1 || (!reruns.is_empty() && !first_cut) {
            bad.push(format!(
                "instant {}: {firsts} first rounds, {} reruns",
                hms(instant),
                reruns.len()
            ));
        } else {
            once += 1;
        }
    }
    let mut rerun_line = String::from("no round of the job was running at the kill");
    let mut rerun_at = kill_time;
    if let Some(instant) = cut {
        let reruns: Vec<&RoundSeen> = seen
            .rounds
            .get(&instant)
            .map(|rs| rs.iter().filter(|r| r.rerun).collect())
            .unwrap_or_default();
        match reruns.as_slice() {
            [r] if r.replica != victim => {
                rerun_at = r.at;
                rerun_line = format!(
                    "the round of {} cut short by the kill ran again exactly once, on replica-{} \
                     (term {})",
                    hms(instant),
                    r.replica,
                    r.term
                );
            }
            _ => {
                bad.push(format!(
                    "the round of {} cut short by the kill ran again {} times",
                    hms(instant),
                    reruns.len()
                ));
            }
        }
    }
    // Instants nobody ran: only those that came while the dead replica's
    // lease, then the rerun, held the job's name.
    let instants: Vec<i64> = seen
        .rounds
        .range(first_checked..)
        .map(|(&i, _)| i)
        .collect();
    let mut skipped = Vec::new();
    if let (Some(&first), Some(&last)) = (instants.first(), instants.last()) {
        let mut i = first;
        while i <= last {
            if !seen.rounds.contains_key(&i) {
                skipped.push(i);
            }
            i += 1_000;
        }
    }
    // The dead lease holds the name for up to a lease after the kill; the
    // rerun starts a sweep after that and works 400 ms.
    let held_for = i64::try_from((t.lease() + SWEEP + ROUND).as_millis())? + 500;
    for &i in &skipped {
        let excused = cut.is_some_and(|c| i > c && i <= c + held_for);
        if !excused {
            bad.push(format!("instant {} never ran", hms(i)));
        }
    }
    ok &= bad.is_empty();
    let skipped_line = match skipped.as_slice() {
        [] => String::new(),
        instants => format!(
            "; {} came while the job's name was still held (by the killed replica's lease until \
             it expired, then by the rerun) and {} skipped, as the scheduler does with an \
             instant whose name is held: not run late, not queued",
            instants
                .iter()
                .map(|&i| hms(i))
                .collect::<Vec<_>>()
                .join(", "),
            if instants.len() == 1 { "was" } else { "were" }
        ),
    };
    events.push((
        rerun_at,
        format!(
            "  cron:{JOB}: each of the {once} instants that ran, ran once; {rerun_line}\
             {skipped_line}  {}",
            if bad.is_empty() { "ok" } else { "VIOLATED" }
        ),
    ));
    events.sort_by_key(|(at, _)| *at);
    for (_, line) in &events {
        println!("{line}");
    }
    for b in &bad {
        println!("    {b}");
    }

    // The lock.
    let mut runs = seen.locks.clone();
    runs.sort_by_key(|r| r.start);
    let kill_ms = wall_ms() - i64::try_from(kill_time.elapsed().as_millis()).unwrap_or(0);
    let mut lock_ok = !runs.is_empty();
    for pair in runs.windows(2) {
        let end = pair[0].end.unwrap_or(kill_ms);
        if pair[1].start < end || pair[1].term <= pair[0].term {
            lock_ok = false;
            println!("    lock runs overlap: {:?} {:?}", pair[0], pair[1]);
        }
    }
    ok &= lock_ok;
    println!(
        "  lock:{LOCK}: {} runs, one at a time, terms increasing; {} tries found it held  {}",
        runs.len(),
        seen.lock_refusals,
        if lock_ok { "ok" } else { "VIOLATED" }
    );

    if ok {
        println!("  all good");
        Ok(())
    } else {
        Err("the demo saw a violation".into())
    }
}
