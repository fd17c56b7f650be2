//! The orchestrator: starts the contender processes, injects faults until
//! the time is up, winds the contenders down, and has the checker judge the
//! history they wrote.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use dblease::Leases;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, timeout};

use super::faults::{FREEZE, db_now, freeze, stall};
use super::procs::{Holding, Orchestra, Proc, write_history};
use super::report::print_report;
use super::rng::Rng;
use super::{Args, BoxResult, PROGRESS_EVERY};
use crate::url::{Backend, sqlite_path};
use lease_testkit::check;
use lease_testkit::history::{Event, parse_history};

/// The faults the orchestrator injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Kill,
    Freeze,
    Pause,
    Cut,
    Stall,
}

/// How many faults of each kind were injected.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    pub(crate) kills: usize,
    pub(crate) freezes: usize,
    pub(crate) pauses: usize,
    pub(crate) cuts: usize,
    pub(crate) stalls: usize,
}

/// The running soak, as the fault loop sees it.
struct Soak<'a> {
    args: &'a Args,
    setup: Leases,
    sqlite: Option<PathBuf>,
    orchestra: Orchestra,
    procs: Vec<Proc>,
    holding: Holding,
    rng: Rng,
    faults: Faults,
    background: Vec<JoinHandle<()>>,
    stalling: Arc<AtomicBool>,
}

impl Soak<'_> {
    /// A contender to hit: a holder three times in four, when there is one.
    fn victim(&mut self) -> usize {
        let holders: Vec<usize> = {
            let holding = self.holding.lock().unwrap_or_else(PoisonError::into_inner);
            (0..self.procs.len())
                .filter(|&i| {
                    self.procs
                        .get(i)
                        .and_then(|p| holding.get(&p.instance))
                        .is_some_and(|&n| n > 0)
                })
                .collect()
        };
        if !holders.is_empty() && self.rng.chance(75) {
            holders
                .get(self.rng.below(holders.len()))
                .copied()
                .unwrap_or(0)
        } else {
            self.rng.below(self.procs.len())
        }
    }

    /// Injects one fault.
    async fn inject(&mut self) -> BoxResult<()> {
        let victim = self.victim();
        // The planted work that outlives its lease is exposed by the faults
        // that cost a holder its lease while it lives on: long pauses and
        // stalls. The others get the usual mix.
        let (kill_pct, freeze_pct, pause_pct, long) = if self.args.plant.outlives_lease() {
            (5, 0, 85, (3_000, 5_000))
        } else {
            (15, 10, 45, (1_000, 4_500))
        };
        let roll = self.rng.below(100);
        let now = db_now(&self.setup).await;
        let fault = if roll < kill_pct {
            Fault::Kill
        } else if roll < kill_pct + freeze_pct {
            Fault::Freeze
        } else if self.sqlite.is_some() {
            Fault::Stall
        } else if roll < kill_pct + freeze_pct + pause_pct {
            Fault::Pause
        } else {
            Fault::Cut
        };
        match (&self.sqlite, fault) {
            (_, Fault::Kill) => {
                let mut proc = self.procs.remove(victim);
                let _ = proc.child.kill().await;
                let at_ms = db_now(&self.setup).await;
                self.orchestra.record(&Event::Killed {
                    instance: proc.instance.clone(),
                    at_ms,
                });
                self.faults.kills += 1;
                self.procs.push(self.orchestra.spawn().await?);
            }
            (_, Fault::Freeze) => {
                let Some(p) = self.procs.get(victim) else {
                    return Ok(());
                };
                let Some(pid) = p.child.id() else {
                    return Ok(());
                };
                let d = self.rng.ms(FREEZE.0, FREEZE.1);
                let instance = p.instance.clone();
                self.orchestra.fault("freeze", &instance, now);
                self.faults.freezes += 1;
                let tx = self.orchestra.lines.clone();
                self.background.push(tokio::spawn(async move {
                    if let Err(e) = freeze(pid, d).await {
                        eprintln!("soak: freezing {instance} failed: {e}");
                    }
                    let _ = tx.send(
                        Event::Fault {
                            kind: "thaw".to_owned(),
                            instance,
                            at_ms: 0,
                        }
                        .to_line(),
                    );
                }));
            }
            (Some(path), _) => {
                if self.stalling.swap(true, Ordering::SeqCst) {
                    return Ok(());
                }
                let d = self.rng.ms(long.0, long.1);
                let path = path.clone();
                self.orchestra.fault("stall", "*", now);
                self.faults.stalls += 1;
                let stalling = self.stalling.clone();
                self.background.push(tokio::task::spawn_blocking(move || {
                    if let Err(e) = stall(&path, d) {
                        eprintln!("soak: stall failed: {e}");
                    }
                    stalling.store(false, Ordering::SeqCst);
                }));
            }
            (None, Fault::Pause) => {
                let Some(p) = self.procs.get(victim) else {
                    return Ok(());
                };
                let Some(proxy) = p.proxy.clone() else {
                    return Ok(());
                };
                if proxy.is_paused() {
                    return Ok(());
                }
                let instance = p.instance.clone();
                let d = self.rng.ms(long.0, long.1);
                proxy.pause();
                self.orchestra.fault("pause", &instance, now);
                self.faults.pauses += 1;
                let tx = self.orchestra.lines.clone();
                self.background.push(tokio::spawn(async move {
                    sleep(d).await;
                    proxy.resume();
                    let _ = tx.send(
                        Event::Fault {
                            kind: "resume".to_owned(),
                            instance,
                            at_ms: 0,
                        }
                        .to_line(),
                    );
                }));
            }
            (None, _) => {
                if let Some(p) = self.procs.get(victim) {
                    if let Some(proxy) = &p.proxy {
                        proxy.cut();
                        self.orchestra.fault("cut", &p.instance, now);
                        self.faults.cuts += 1;
                    }
                }
            }
        }
        Ok(())
    }

    fn progress(&self, started: Instant) {
        println!(
            "  {:>3} s of {}: {} kills, {} freezes, {} pauses, {} cuts, {} stalls so far",
            started.elapsed().as_secs(),
            self.args.seconds,
            self.faults.kills,
            self.faults.freezes,
            self.faults.pauses,
            self.faults.cuts,
            self.faults.stalls
        );
    }

    /// Injects faults until `seconds` have passed.
    async fn inject_until_the_end(&mut self) -> BoxResult<()> {
        let seconds = Duration::from_secs(self.args.seconds);
        let end = Instant::now() + seconds;
        // Let the contenders settle before the first fault.
        sleep(Duration::from_millis(1_500).min(seconds)).await;
        let started = Instant::now();
        let mut next_progress = started + PROGRESS_EVERY;
        while Instant::now() < end {
            if Instant::now() >= next_progress {
                next_progress += PROGRESS_EVERY;
                self.progress(started);
            }
            let gap = self.rng.ms(700, 2_000);
            sleep(gap.min(end.saturating_duration_since(Instant::now()))).await;
            if Instant::now() >= end {
                break;
            }
            self.inject().await?;
        }
        Ok(())
    }

    /// Every fault lifted, then the contenders told to stop (closing their
    /// stdin); one that does not within 15 s is killed.
    async fn wind_down(&mut self) {
        for task in self.background.drain(..) {
            let _ = task.await;
        }
        for p in &self.procs {
            if let Some(proxy) = &p.proxy {
                proxy.resume();
            }
        }
        for p in &mut self.procs {
            drop(p.stdin.take());
        }
        for p in &mut self.procs {
            if timeout(Duration::from_secs(15), p.child.wait())
                .await
                .is_err()
            {
                let _ = p.child.kill().await;
                let at_ms = db_now(&self.setup).await;
                self.orchestra.record(&Event::Killed {
                    instance: p.instance.clone(),
                    at_ms,
                });
                eprintln!("soak: {} did not stop within 15 s: killed", p.instance);
            }
        }
    }
}

/// Runs the soak: see the [module docs](super). Whether the history held
/// what was expected.
pub(crate) async fn orchestrate(args: &Args) -> BoxResult<bool> {
    let dir = tempfile::tempdir()?;
    let url = match &args.url {
        Some(url) => url.clone(),
        None => format!("sqlite://{}", dir.path().join("soak.db").display()),
    };
    let backend = Backend::of(&url).ok_or("unrecognised URL scheme")?;
    let sqlite = match backend {
        Backend::Sqlite => {
            Some(sqlite_path(&url).ok_or("the soak needs an SQLite file, not memory")?)
        }
        _ => None,
    };
    let setup = dblease::connect(&url).await?;
    setup.migrate().await?;
    let mut rng = Rng::seeded();
    let run = format!("{:08x}", rng.next() & 0xffff_ffff);
    let history_path = args.history.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("lease-soak-{}-{run}.jsonl", backend.label()))
    });
    println!(
        "soak: {} processes on {} for {} s, plant {}, run {run}\n  history: {}",
        args.procs,
        backend.label(),
        args.seconds,
        args.plant,
        history_path.display()
    );

    let (tx, rx) = mpsc::unbounded_channel::<String>();
    let holding = Holding::default();
    let writer = write_history(&history_path, rx, holding.clone())?;
    let mut orchestra = Orchestra {
        url: url.clone(),
        backend,
        run: run.clone(),
        plant: args.plant,
        exe: std::env::current_exe()?,
        lines: tx,
        next: 0,
    };
    let mut procs = Vec::new();
    for _ in 0..args.procs {
        procs.push(orchestra.spawn().await?);
    }
    let mut soak = Soak {
        args,
        setup,
        sqlite,
        orchestra,
        procs,
        holding,
        rng,
        faults: Faults::default(),
        background: Vec::new(),
        stalling: Arc::new(AtomicBool::new(false)),
    };
    soak.inject_until_the_end().await?;
    soak.wind_down().await;
    let faults = std::mem::take(&mut soak.faults);
    // The last sender goes with the soak: the writer then returns.
    drop(soak);
    let text = writer.await?;
    judge(&text, &faults, args, &history_path)
}

/// The capabilities the soak must see at work, by their names' prefix.
const CAPABILITIES: [(&str, &str); 3] = [
    ("lock:", "lock"),
    ("leader:", "leader"),
    ("cron:", "scheduler"),
];

/// Checks the history and reports; whether it held what was expected.
fn judge(text: &str, faults: &Faults, args: &Args, history_path: &Path) -> BoxResult<bool> {
    let events = match parse_history(text) {
        Ok(events) => events,
        Err((line, e)) => return Err(format!("history line {line}: {e}").into()),
    };
    let report = check::check(&events);
    print_report(&report, faults, args);
    let violated = !report.violations.is_empty();
    if !violated && args.history.is_none() {
        // A clean history in the temp dir is not worth keeping (CI runs this
        // on every push); `--history FILE` keeps it.
        let _ = std::fs::remove_file(history_path);
        println!("  (clean: history removed; --history FILE keeps it)");
    }
    if report.tenures.is_empty() {
        println!("  no tenure at all: the soak tested nothing");
        return Ok(false);
    }
    let untested: Vec<&str> = CAPABILITIES
        .iter()
        .filter(|(prefix, _)| !report.tenures.iter().any(|t| t.name.starts_with(prefix)))
        .map(|(_, what)| *what)
        .collect();
    if !untested.is_empty() {
        println!(
            "  no tenure of the {}: the soak did not test it",
            untested.join(", ")
        );
        return Ok(false);
    }
    Ok(violated == args.expect_violations)
}
