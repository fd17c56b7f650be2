//! Three replicas, as three processes, coordinate through one database.
//!
//! ```sh
//! cargo run -p lease --example demo                  # an SQLite file in a temp dir
//! cargo run -p lease --example demo -- postgres://…   # any URL dblease::connect takes
//! ```
//!
//! Each replica contends for the leader lease `leader:demo`, holding it with
//! renewals while it leads, and for the instants of a job `cron:tick` that
//! falls due every second. Partway through, the demo kills the leader's
//! process (SIGKILL: no release, no goodbye) and shows that another replica
//! takes over within the lease bound, with the next term, and that every
//! instant of the job ran once (a round the kill cut short runs again,
//! exactly once).
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::collections::{BTreeMap, HashMap};
use std::process::Stdio;
use std::time::{Duration, Instant};

use dblease::{CancellationToken, Leases, Timings, UtcMillis};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

type BoxResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const REPLICAS: usize = 3;
const LEADER: &str = "leader:demo";
const JOB: &str = "cron:tick";
const EVERY_MS: i64 = 1_000;
const ROUND: Duration = Duration::from_millis(400);

fn timings() -> dblease::Result<Timings> {
    Timings::builder()
        .lease(Duration::from_millis(3_000))
        .renew(Duration::from_millis(500))
        .deadline(Duration::from_millis(2_000))
        .grace(Duration::from_millis(500))
        .build()
}

#[tokio::main]
async fn main() -> BoxResult<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--replica") {
        let id = args.get(2).cloned().unwrap_or_default();
        let url = args.get(3).cloned().unwrap_or_default();
        return replica(&id, &url).await;
    }
    let dir = tempfile::tempdir()?;
    let url = match args.get(1) {
        Some(url) => url.clone(),
        None => format!("sqlite://{}", dir.path().join("demo.db").display()),
    };
    orchestrate(&url).await
}

/// One replica: leads when it can, and runs the job's instants it claims.
async fn replica(id: &str, url: &str) -> BoxResult<()> {
    let leases = dblease::connect(url)
        .await?
        .with_timings(timings()?)
        .with_instance(format!("replica-{id}"));
    let shutdown = CancellationToken::new();
    let lead = tokio::spawn(lead(leases.clone(), shutdown.clone()));
    let schedule = tokio::spawn(schedule(leases, shutdown.clone()));
    let (a, b) = tokio::join!(lead, schedule);
    a??;
    b??;
    Ok(())
}

async fn lead(leases: Leases, shutdown: CancellationToken) -> BoxResult<()> {
    loop {
        match leases.claim(LEADER).await {
            Ok(Some(handle)) => {
                println!("LEAD {}", handle.term());
                let holder = handle.hold(&shutdown);
                let _ = holder
                    .run(|ctx| async move {
                        // The duty: here, just being the leader until the context ends.
                        ctx.cancelled().await;
                    })
                    .await;
                holder.stop().await;
                println!("STEPDOWN {}", handle.term());
                if !handle.lost() {
                    let _ = handle.release().await;
                }
            }
            Ok(None) => {}
            Err(e) => eprintln!("claim failed: {e}"),
        }
        tokio::time::sleep(leases.timings().retry_interval()).await;
    }
}

async fn schedule(leases: Leases, shutdown: CancellationToken) -> BoxResult<()> {
    let mut last_tried = 0;
    loop {
        // A round cut short first: it runs again once, unless a later
        // instant's claim gives it up first.
        for u in leases.unfinished_slots(&[JOB]).await? {
            if let Some(handle) = leases.claim_rerun(&u).await? {
                round(&handle, &shutdown, "RERUN").await;
            }
        }
        let now = leases.now().await?.as_millis();
        let instant = now - now % EVERY_MS;
        if instant > last_tried {
            last_tried = instant;
            if let Some(handle) = leases
                .claim_slot(JOB, UtcMillis::from_millis(instant))
                .await?
            {
                if let Some(given_up) = handle.superseded() {
                    println!("GAVEUP {}", given_up.slot.as_millis());
                }
                round(&handle, &shutdown, "RUN").await;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn round(handle: &dblease::Handle, shutdown: &CancellationToken, what: &str) {
    let slot = handle.slot().map_or(0, UtcMillis::as_millis);
    println!("{what} {slot} {}", handle.term());
    let holder = handle.hold(shutdown);
    let ran = holder.run(|_ctx| tokio::time::sleep(ROUND)).await;
    holder.stop().await;
    match ran {
        Ok(()) => match handle.finish(UtcMillis::from_millis(slot)).await {
            Ok(()) => println!("DONE {slot}"),
            Err(e) => eprintln!("finish of {slot}: {e}"),
        },
        Err(e) => eprintln!("round {slot}: {e}"),
    }
}

/// What one replica said, as the orchestrator heard it.
#[derive(Debug)]
struct Line {
    replica: usize,
    at: Instant,
    words: Vec<String>,
}

async fn orchestrate(url: &str) -> BoxResult<()> {
    let shown = url.split('@').next_back().unwrap_or(url);
    println!("lease demo: {REPLICAS} replica processes on {shown}");
    let setup = dblease::connect(url).await?;
    setup.migrate().await?;

    let exe = std::env::current_exe()?;
    let (tx, mut rx) = mpsc::unbounded_channel::<Line>();
    let mut children: Vec<Child> = Vec::new();
    for i in 0..REPLICAS {
        let mut child = Command::new(&exe)
            .args(["--replica", &i.to_string(), url])
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let tx = tx.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let words = line.split_whitespace().map(str::to_owned).collect();
                let _ = tx.send(Line {
                    replica: i,
                    at: Instant::now(),
                    words,
                });
            }
        });
        children.push(child);
    }
    drop(tx);

    let start = Instant::now();
    let kill_at = start + Duration::from_secs(4);
    let end_at = start + Duration::from_secs(12);
    let mut leader: Option<(usize, u64)> = None;
    let mut killed: Option<(usize, u64, Instant)> = None;
    let mut takeover: Option<Duration> = None;
    let mut runs: BTreeMap<i64, Vec<(usize, &'static str, u64)>> = BTreeMap::new();
    let mut done: HashMap<i64, usize> = HashMap::new();
    let mut terms: Vec<(usize, u64)> = Vec::new();
    let mut given_up: Vec<i64> = Vec::new();

    loop {
        let next = if killed.is_none() { kill_at } else { end_at };
        tokio::select! {
            line = rx.recv() => {
                let Some(line) = line else { break };
                let t = line.at.duration_since(start).as_secs_f64();
                let who = format!("replica-{}", line.replica);
                match line.words.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
                    ["LEAD", term] => {
                        let term: u64 = term.parse()?;
                        println!("{t:6.2}s  {who} leads           {LEADER} term {term}");
                        leader = Some((line.replica, term));
                        terms.push((line.replica, term));
                        if let Some((_, _, when)) = killed {
                            takeover.get_or_insert(line.at.duration_since(when));
                        }
                    }
                    ["STEPDOWN", term] => println!("{t:6.2}s  {who} steps down      {LEADER} term {term}"),
                    [what @ ("RUN" | "RERUN"), slot, term] => {
                        let slot: i64 = slot.parse()?;
                        let kind = if *what == "RUN" { "runs   " } else { "RE-RUNS" };
                        println!("{t:6.2}s  {who} {kind} instant {} of {JOB} term {term}", slot % 100_000);
                        runs.entry(slot).or_default().push((line.replica, if *what == "RUN" { "run" } else { "rerun" }, term.parse()?));
                    }
                    ["DONE", slot] => { *done.entry(slot.parse()?).or_default() += 1; }
                    ["GAVEUP", slot] => {
                        let slot: i64 = slot.parse()?;
                        println!("{t:6.2}s  {who} gives up instant {} of {JOB}: its round was cut short", slot % 100_000);
                        given_up.push(slot);
                    }
                    other => println!("{t:6.2}s  {who}: {}", other.join(" ")),
                }
            }
            () = tokio::time::sleep_until(next.into()) => {
                if killed.is_none() {
                    let Some((victim, term)) = leader else {
                        return Err("no replica became leader within 4 s".into());
                    };
                    children[victim].kill().await?;
                    println!("{:6.2}s  >>> killed replica-{victim} (SIGKILL) while it led at term {term}", start.elapsed().as_secs_f64());
                    killed = Some((victim, term, Instant::now()));
                } else {
                    break;
                }
            }
        }
    }
    for child in &mut children {
        let _ = child.kill().await;
    }

    println!("\nsummary");
    let bound = timings()?.lease() + timings()?.retry_interval();
    let mut ok = true;
    match (killed, takeover) {
        (Some((victim, term, _)), Some(after)) => {
            let (new, new_term) = terms.last().copied().unwrap_or((victim, term));
            let fine = new != victim
                && new_term == term + 1
                && after <= bound + Duration::from_millis(500);
            ok &= fine;
            println!(
                "  takeover: replica-{new} leads at term {new_term}, {:.2}s after replica-{victim} (term {term}) was killed; bound {:.1}s (lease + retry interval) {}",
                after.as_secs_f64(),
                bound.as_secs_f64(),
                if fine { "ok" } else { "VIOLATED" }
            );
        }
        _ => {
            ok = false;
            println!("  takeover: none seen after the kill  VIOLATED");
        }
    }
    let mut twice = 0;
    for (slot, rounds) in &runs {
        let firsts = rounds.iter().filter(|r| r.1 == "run").count();
        let reruns = rounds.iter().filter(|r| r.1 == "rerun").count();
        if firsts != 1 || reruns > 1 {
            ok = false;
            println!("  instant {slot}: ran {firsts} times, re-ran {reruns} times  VIOLATED");
        } else if reruns == 1 {
            twice += 1;
        }
    }
    let claimed: Vec<i64> = runs.keys().copied().collect();
    let skipped: i64 = claimed
        .windows(2)
        .map(|w| (w[1] - w[0]) / EVERY_MS - 1)
        .sum();
    let finished = runs.keys().filter(|s| done.contains_key(s)).count();
    println!(
        "  instants: {} claimed, each run once ({finished} ran to their end); {twice} cut short by the kill and run again exactly once; {} cut short and given up for a later instant; {skipped} skipped while a killed holder's lease ran out",
        runs.len(),
        given_up.len()
    );
    if ok {
        println!("  all good");
        Ok(())
    } else {
        Err("the demo saw a violation".into())
    }
}
