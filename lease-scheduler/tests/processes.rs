//! Three replica processes on one database (SQLite file, PostgreSQL,
//! MariaDB/MySQL), 20 jobs `@every 1s` each for 30 s; one process is
//! killed with SIGKILL mid-round, about 10 s in. This is the multi-replica
//! scheduler check CI runs on all three databases (issue 12's shape, the
//! three databases running side by side, about 60 s). Each process writes what its rounds saw to a file of
//! its own; the history checker of the in-process test then reads them all.
//!
//! Each replica also adds a job while it runs (about 5 s in) and removes
//! one of its own (about 20 s in, letting its round in flight finish),
//! through `Scheduler::handle` (issue 26, item 2): the job added runs every
//! instant from its first registration on, the job removed every instant up
//! to its removal and none after it, both judged by the same checker.
//!
//! The replicas are this test binary run again (`replica_process`, ignored
//! unless the parent's environment names it), so that no other binary is
//! needed. Same shortened timings as the in-process test.
//!
//! PostgreSQL and MariaDB come from `LEASE_TEST_POSTGRES_URL` and
//! `LEASE_TEST_MYSQL_URL`: unset, the test is skipped with a note; unset
//! under `CI=true`, it fails.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers fail loudly"
)]

mod history;

use std::fs::{File, OpenOptions};
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use history::{Excuses, FinishRecorder, Outcome, Rec, job_of, wall_ms};
use lease_core::{CancellationToken, LeaseStore, Leases, Timings};
use lease_scheduler::{Job, Removal, Round, Scheduler};

const CHILD: &str = "LEASE_SCHEDULER_TEST_CHILD";
const URL: &str = "LEASE_SCHEDULER_TEST_URL";
const TABLE: &str = "LEASE_SCHEDULER_TEST_TABLE";
const PREFIX: &str = "LEASE_SCHEDULER_TEST_PREFIX";
const LOG: &str = "LEASE_SCHEDULER_TEST_LOG";
const SECONDS: &str = "LEASE_SCHEDULER_TEST_SECONDS";

const WORK: Duration = Duration::from_millis(150);
/// The jobs each replica runs: `<prefix>-0` .. `<prefix>-{JOBS-1}`.
const JOBS: usize = 20;
/// How long each replica runs its scheduler.
const RUN_SECONDS: u64 = 30;
/// The job each replica adds while it runs, and when.
const ADDED: usize = JOBS;
const ADD_AFTER: Duration = Duration::from_secs(5);
/// The job each replica runs from the start and removes, and when.
const REMOVED: usize = JOBS + 1;
const REMOVE_AFTER: Duration = Duration::from_secs(20);
/// How long after the start the killed replica is first looked at.
const KILL_AFTER: Duration = Duration::from_secs(10);

fn timings() -> Timings {
    Timings::builder()
        .lease(Duration::from_millis(600))
        .renew(Duration::from_millis(50))
        .deadline(Duration::from_millis(300))
        .grace(Duration::from_millis(200))
        .build()
        .unwrap()
}

fn unique(prefix: &str) -> String {
    lease_testkit::unique(prefix)
}

/// The store a URL names, on `table`.
async fn open(url: &str, table: &str) -> Arc<dyn LeaseStore> {
    if let Some(path) = url.strip_prefix("sqlite://") {
        Arc::new(
            lease_sqlite::SqliteStoreBuilder::from_path(path)
                .with_table(table)
                .with_busy_timeout(Duration::from_millis(250))
                .build()
                .unwrap(),
        )
    } else if url.starts_with("postgres") {
        Arc::new(
            lease_postgres::PostgresStore::builder(url)
                .unwrap()
                .with_table(table)
                .with_timings(&timings())
                .connect()
                .await
                .unwrap(),
        )
    } else {
        Arc::new(
            lease_mysql::MySqlStore::builder(url)
                .unwrap()
                .with_table(table)
                .with_timings(&timings())
                .connect()
                .await
                .unwrap(),
        )
    }
}

/// One line of a replica's log, written and flushed at once so that a kill
/// loses nothing written before it.
fn log(file: &Mutex<File>, line: &str) {
    let mut file = file.lock().unwrap();
    file.write_all(format!("{line}\n").as_bytes()).unwrap();
    file.flush().unwrap();
}

/// The scheduler's events that give instants up (see [`Excuses`]), written
/// to the replica's log as `gaveup <job> <from> <to>` lines.
struct GivenUp {
    file: Arc<Mutex<File>>,
}

/// An event's fields, as text.
#[derive(Default)]
struct Fields(Vec<(&'static str, String)>);

impl Fields {
    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// An RFC 3339 time field, in ms since the epoch.
    fn time(&self, name: &str) -> Option<i64> {
        let text = self.get(name)?;
        chrono::DateTime::parse_from_rfc3339(text)
            .ok()
            .map(|t| t.timestamp_millis())
    }
}

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push((field.name(), format!("{value:?}")));
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.push((field.name(), value.to_owned()));
    }
}

impl tracing::Subscriber for GivenUp {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        metadata.target().starts_with("lease_scheduler")
            && *metadata.level() <= tracing::Level::WARN
    }

    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }

    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let message = fields.get("message").unwrap_or_default();
        // `job` is logged as Debug: a quoted name, `"<prefix>-<i>"`.
        let Some(job) = fields.get("job").and_then(|j| {
            j.trim_matches('"')
                .rsplit_once('-')?
                .1
                .parse::<usize>()
                .ok()
        }) else {
            return;
        };
        let range = if message.starts_with("gave up the instant") {
            fields.time("instant").map(|i| (i, i + 1))
        } else if message.starts_with("instants missed") {
            fields.time("first_missed").zip(fields.time("next"))
        } else {
            None
        };
        if let Some((from, to)) = range {
            log(&self.file, &format!("gaveup {job} {from} {to}"));
        }
    }

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}

/// Whether this first round (`id` is "job instant") is to be held open
/// until the process is killed: once the parent created `<log>.hold`, the
/// first such round of the process is, and says so in the log. The parent
/// then kills the process mid-round whatever the machine's load, instead
/// of watching for a round at the right age (a starved parent misses such
/// windows).
fn hold(id: &str) -> bool {
    static HELD: AtomicBool = AtomicBool::new(false);
    let Ok(log_path) = std::env::var(LOG) else {
        return false;
    };
    if HELD.load(Ordering::SeqCst) || !Path::new(&format!("{log_path}.hold")).exists() {
        return false;
    }
    if HELD.swap(true, Ordering::SeqCst) {
        return false;
    }
    let mut file = OpenOptions::new().append(true).open(&log_path).unwrap();
    file.write_all(format!("held {id}\n").as_bytes()).unwrap();
    file.flush().unwrap();
    true
}

/// Job `i` of a replica: rounds of 150 ms, each logged to `file`.
fn job(prefix: &str, i: usize, file: &Arc<Mutex<File>>) -> Job {
    let file = file.clone();
    Job::new(format!("{prefix}-{i}"), "@every 1s", move |round: Round| {
        let file = file.clone();
        async move {
            let id = format!("{i} {}", round.instant().as_millis());
            log(
                &file,
                &format!(
                    "start {id} {} {} {}",
                    round.is_rerun(),
                    round.term().unwrap(),
                    wall_ms()
                ),
            );
            if !round.is_rerun() && hold(&id) {
                round.cancelled().await;
                log(&file, &format!("end {id} cut {}", wall_ms()));
                round.check()?;
                return Ok(());
            }
            tokio::select! {
                () = tokio::time::sleep(WORK) => {
                    log(&file, &format!("end {id} ran {}", wall_ms()));
                    Ok(())
                }
                () = round.cancelled() => {
                    log(&file, &format!("end {id} cut {}", wall_ms()));
                    round.check()?;
                    Ok(())
                }
            }
        }
    })
}

/// A replica: run by the parent test as a child process.
#[test]
#[ignore = "a replica process of the cross-process tests: they run it"]
fn replica_process() {
    let Ok(replica) = std::env::var(CHILD) else {
        return;
    };
    let var = |name: &str| std::env::var(name).unwrap();
    let (url, table, prefix) = (var(URL), var(TABLE), var(PREFIX));
    let seconds: u64 = var(SECONDS).parse().unwrap();
    let file = Arc::new(Mutex::new(
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(var(LOG))
            .unwrap(),
    ));
    tracing::subscriber::set_global_default(GivenUp { file: file.clone() }).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let recorded = file.clone();
        let store = FinishRecorder::wrap(
            open(&url, &table).await,
            Arc::new(move |name, instant| {
                log(&recorded, &format!("finished {} {instant}", job_of(name)));
            }),
        );
        let leases = Leases::from_arc(store)
            .with_timings(timings())
            .with_instance(replica.clone())
            .unwrap();
        let mut builder =
            Scheduler::builder(leases.clone()).sweep_interval(Duration::from_millis(100));
        for i in (0..JOBS).chain([REMOVED]) {
            builder = builder.job(job(&prefix, i, &file));
        }
        let scheduler = builder.build().unwrap();
        let jobs = scheduler.handle();
        let shutdown = CancellationToken::new();
        let token = shutdown.clone();
        let run = tokio::spawn(async move { scheduler.run(&token, Duration::from_secs(5)).await });
        log(
            &file,
            &format!("ready {}", leases.now().await.unwrap().as_millis()),
        );
        tokio::time::sleep(ADD_AFTER).await;
        // The database's time before the job is registered: none of its
        // instants before it may run.
        let before = leases.now().await.unwrap().as_millis();
        jobs.add(job(&prefix, ADDED, &file)).unwrap();
        log(&file, &format!("added {before}"));
        tokio::time::sleep(REMOVE_AFTER - ADD_AFTER).await;
        assert!(jobs.remove(&format!("{prefix}-{REMOVED}"), Removal::Finish));
        // The database's time after the removal: no instant after it may be
        // claimed by this replica.
        log(
            &file,
            &format!("removed {}", leases.now().await.unwrap().as_millis()),
        );
        tokio::time::sleep(Duration::from_secs(seconds).saturating_sub(REMOVE_AFTER)).await;
        log(
            &file,
            &format!("stopping {}", leases.now().await.unwrap().as_millis()),
        );
        shutdown.cancel();
        run.await.unwrap().unwrap();
    });
}

/// What one replica's log says.
struct Log {
    ready: Option<i64>,
    stopping: Option<i64>,
    /// The round held open for the kill (job, instant).
    held: Option<(usize, i64)>,
    /// The database's time before the replica added its job.
    added: Option<i64>,
    /// The database's time after the replica removed its job.
    removed: Option<i64>,
    recs: Vec<Rec>,
    /// (job, from, to): the instants `from..to` of the job this replica's
    /// scheduler gave up.
    given_up: Vec<(usize, i64, i64)>,
}

fn read(path: &Path, replica: &str, killed_at: Option<i64>) -> Log {
    let mut log = Log {
        ready: None,
        stopping: None,
        held: None,
        added: None,
        removed: None,
        recs: Vec::new(),
        given_up: Vec::new(),
    };
    let Ok(file) = File::open(path) else {
        return log;
    };
    for line in BufReader::new(file).lines() {
        let line = line.unwrap();
        let f: Vec<&str> = line.split(' ').collect();
        match (f[0], f.len()) {
            ("ready", 2) => log.ready = Some(f[1].parse().unwrap()),
            ("stopping", 2) => log.stopping = Some(f[1].parse().unwrap()),
            ("added", 2) => log.added = Some(f[1].parse().unwrap()),
            ("held", 3) => log.held = Some((f[1].parse().unwrap(), f[2].parse().unwrap())),
            ("removed", 2) => log.removed = Some(f[1].parse().unwrap()),
            ("start", 6) => log.recs.push(Rec {
                job: f[1].parse().unwrap(),
                instant: f[2].parse().unwrap(),
                replica: replica.to_owned(),
                rerun: f[3].parse().unwrap(),
                term: f[4].parse().unwrap(),
                start_ms: f[5].parse().unwrap(),
                end_ms: None,
                outcome: Outcome::Running,
                finished: false,
            }),
            ("end", 5) => {
                let (job, instant): (usize, i64) = (f[1].parse().unwrap(), f[2].parse().unwrap());
                let rec = log
                    .recs
                    .iter_mut()
                    .rev()
                    .find(|r| r.job == job && r.instant == instant)
                    .unwrap();
                rec.outcome = if f[3] == "ran" {
                    Outcome::Ran
                } else {
                    Outcome::CutShort
                };
                rec.end_ms = Some(f[4].parse().unwrap());
            }
            ("finished", 3) => {
                let (job, instant): (usize, i64) = (f[1].parse().unwrap(), f[2].parse().unwrap());
                if let Some(rec) = log
                    .recs
                    .iter_mut()
                    .rev()
                    .find(|r| r.job == job && r.instant == instant)
                {
                    rec.finished = true;
                }
            }
            ("gaveup", 4) => log.given_up.push((
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
                f[3].parse().unwrap(),
            )),
            // A line cut by the kill, or still being written.
            _ => {}
        }
    }
    if let Some(killed) = killed_at {
        for rec in &mut log.recs {
            if rec.outcome == Outcome::Running {
                rec.outcome = Outcome::Dropped;
                rec.end_ms = Some(killed);
            }
        }
    }
    log
}

fn spawn(replica: &str, url: &str, table: &str, prefix: &str, log: &Path, seconds: u64) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "replica_process",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, replica)
        .env(URL, url)
        .env(TABLE, table)
        .env(PREFIX, prefix)
        .env(LOG, log)
        .env(SECONDS, seconds.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

/// Three replica processes; `c` is killed with SIGKILL mid-round.
async fn scenario(url: &str, table: &str, dir: &Path) {
    let prefix = unique("processes-");
    let store = open(url, table).await;
    Leases::from_arc(store.clone()).migrate().await.unwrap();
    let logs: Vec<(&str, PathBuf)> = ["a", "b", "c"]
        .into_iter()
        .map(|r| (r, dir.join(format!("{r}.log"))))
        .collect();
    let mut children: Vec<Child> = logs
        .iter()
        .map(|(r, path)| spawn(r, url, table, &prefix, path, RUN_SECONDS))
        .collect();

    // Kill c in the middle of a first round (not a rerun): one held open
    // (see `hold`), waited for up to 60 s on a loaded machine.
    tokio::time::sleep(KILL_AFTER).await;
    let _ = File::create(format!("{}.hold", logs[2].1.display())).unwrap();
    let give_up = Instant::now() + Duration::from_secs(60);
    let killed_at = loop {
        let c = read(&logs[2].1, "c", None);
        let held = c.held.is_some_and(|(job, instant)| {
            c.recs
                .iter()
                .any(|r| r.job == job && r.instant == instant && r.outcome == Outcome::Running)
        });
        if held {
            children[2].kill().unwrap();
            break wall_ms();
        }
        assert!(Instant::now() < give_up, "c never held a round in 60 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let status = children[2].wait().unwrap();
    assert!(!status.success(), "c was killed");
    for child in &mut children[..2] {
        let status = child.wait().unwrap();
        assert!(status.success(), "a replica failed: {status}");
    }

    let a = read(&logs[0].1, "a", None);
    let b = read(&logs[1].1, "b", None);
    let c = read(&logs[2].1, "c", Some(killed_at));
    assert!(
        c.recs.iter().any(|r| r.outcome == Outcome::Dropped),
        "c was killed mid-round"
    );
    let started = [a.ready, b.ready, c.ready]
        .into_iter()
        .map(Option::unwrap)
        .max()
        .unwrap();
    let stopped = a.stopping.unwrap().min(b.stopping.unwrap());
    let mut excuses = Excuses::default();
    for (replica, log, died) in [("a", &a, None), ("b", &b, None), ("c", &c, Some(killed_at))] {
        excuses.replicas.push((replica.to_owned(), died));
        for &(job, from, to) in &log.given_up {
            excuses.given_up.push((replica.to_owned(), job, from, to));
        }
    }
    let added = [a.added, b.added, c.added].into_iter().flatten().min();
    let added = added.expect("a replica added its job");
    let removed = [(&a, "a"), (&b, "b"), (&c, "c")]
        .into_iter()
        .filter_map(|(log, r)| log.removed.map(|t| (r, t)))
        .collect::<Vec<_>>();
    let recs: Vec<Rec> = [a.recs, b.recs, c.recs].concat();
    // Rounds cut short by the survivors' own shutdowns at the end have no
    // peer left to run them again; the killed replica's must have run again.
    let rerun_due = |r: &Rec| r.outcome == Outcome::Dropped;
    let of = |job: usize| -> Vec<Rec> {
        recs.iter()
            .filter(|r| r.job == job)
            .map(|r| Rec {
                job: 0,
                ..r.clone()
            })
            .collect()
    };
    // The instants every live replica gave up, of one job, as job 0.
    let excuses_of = |job: usize| Excuses {
        replicas: excuses.replicas.clone(),
        given_up: excuses
            .given_up
            .iter()
            .filter(|g| g.1 == job)
            .map(|(r, _, from, to)| (r.clone(), 0, *from, *to))
            .collect(),
    };
    let fixed: Vec<Rec> = recs.iter().filter(|r| r.job < JOBS).cloned().collect();
    history::check_with(&fixed, JOBS, started, stopped, rerun_due, &excuses);
    history::planted_bugs_are_caught_with(&fixed, JOBS, started, stopped, rerun_due, &excuses);

    // The job added: every instant from its first registration on, by the
    // same rules; none before it.
    let added_recs = of(ADDED);
    assert!(
        added_recs.iter().all(|r| r.instant > added),
        "the job added ran an instant before its first registration ({added}): {added_recs:#?}"
    );
    history::check_with(
        &added_recs,
        1,
        added,
        stopped,
        rerun_due,
        &excuses_of(ADDED),
    );
    // The job removed: every instant up to its first removal, by the same
    // rules; none claimed by a replica after it removed the job.
    let removed_recs = of(REMOVED);
    let first_removed = removed
        .iter()
        .map(|(_, t)| *t)
        .min()
        .expect("a replica removed its job");
    for (replica, at) in &removed {
        assert!(
            removed_recs
                .iter()
                .filter(|r| r.replica == *replica)
                .all(|r| r.instant <= *at),
            "{replica} ran the job removed after it removed it ({at}): {removed_recs:#?}"
        );
    }
    history::check_with(
        &removed_recs,
        1,
        started,
        first_removed,
        rerun_due,
        &excuses_of(REMOVED),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_a_replica_process_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("leases.db").display());
    scenario(&url, "gst_leases", dir.path()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_a_replica_process_on_postgres() {
    let Some(url) = lease_conformance::env_url("LEASE_TEST_POSTGRES_URL") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let table = unique("lschp_");
    scenario(&url, &table, dir.path()).await;
    let store = lease_postgres::PostgresStore::builder(&url)
        .unwrap()
        .with_table(&table)
        .connect()
        .await
        .unwrap();
    let client = store.pool().get().await.unwrap();
    client
        .batch_execute(&format!("DROP TABLE IF EXISTS \"{table}\""))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_a_replica_process_on_mysql() {
    use mysql_async::prelude::Queryable as _;
    let Some(url) = lease_conformance::env_url("LEASE_TEST_MYSQL_URL") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let table = unique("lschp_");
    scenario(&url, &table, dir.path()).await;
    let store = lease_mysql::MySqlStore::builder(&url)
        .unwrap()
        .with_table(&table)
        .connect()
        .await
        .unwrap();
    let mut conn = store.pool().get_conn().await.unwrap();
    conn.query_drop(format!("DROP TABLE IF EXISTS `{table}`"))
        .await
        .unwrap();
}
