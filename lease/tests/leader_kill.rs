//! A leader process killed with SIGKILL: its successor, another process,
//! takes over no earlier than the killed leader's lease expiry by the
//! database's clock, and soon after it: it asks again at the expiry it read,
//! not at its next campaign attempt (issue 25, item 2). The campaign interval
//! is longer than the lease, so only that can pass; the bound leaves a
//! second of room for a loaded machine. On SQLite always, on PostgreSQL and
//! MariaDB when their URLs are set (required under `CI=true`).
//!
//! And a leader process asked to resign by another process: its work ends
//! before its successor's starts, by the database clock, the successor
//! leads at term + 1, and a request aimed at the passed term does nothing
//! (issue 25, item 4).
//!
//! The test binary is its own child: with `LEASE_KILL_CHILD` set it runs one
//! elector and prints when it leads (and when its work ended after a
//! request to resign).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)] // a test

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

mod common;

use dblease::{CancellationToken, Leases, Timings};

const CHILD_ENV: &str = "LEASE_KILL_CHILD";
const LEASE: Duration = Duration::from_secs(3);
/// Longer than the lease and the wait for the successor: a successor that
/// waited for its next campaign attempt would fail the test.
const CAMPAIGN: Duration = Duration::from_secs(30);
const JITTER: Duration = Duration::from_millis(250);
/// How long after the expiry the successor may claim: the margin (10 to
/// 20 ms), the statements, and a second of room for a loaded machine.
const BOUND_MS: i64 = 1_000;

fn timings() -> Timings {
    Timings::builder()
        .lease(LEASE)
        .renew(Duration::from_millis(300))
        .deadline(Duration::from_secs(2))
        .grace(Duration::from_millis(500))
        .build()
        .unwrap()
}

/// A coordinator on the lease table of the test's own (never a server's
/// `gst_leases`).
async fn leases(url: &str, table: &str, instance: &str) -> Leases {
    common::leases_on(url, table, timings())
        .await
        .with_instance(instance)
        .unwrap()
}

/// The child: campaigns for `name` forever, printing
/// `LEADING <term> <claim time by the database clock>` when it wins.
async fn child(url: String, table: String, name: String, instance: String) {
    let leases = leases(&url, &table, &instance).await;
    let full = format!("leader:{name}");
    let never = CancellationToken::new();
    leases
        .leader(&name)
        .with_campaign_interval(CAMPAIGN, JITTER)
        .run(&never, |ctx| {
            let (leases, full) = (leases.clone(), full.clone());
            async move {
                // Read before the first renewal (300 ms on): the row's expiry
                // is still the claim's, now + lease.
                let info = leases.get(&full).await.unwrap().unwrap();
                let claimed = info.expires_at_ms - leases.timings().lease_ms();
                println!("LEADING {} {claimed}", ctx.term());
                ctx.cancelled().await;
                if ctx.cause() == Some(dblease::EndCause::Resigned) {
                    // Winding down under the lease, then saying when the
                    // work ended, by the database's clock.
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    let ended = leases.now().await.unwrap().as_millis();
                    println!("RESIGNED {} {ended}", ctx.term());
                }
            }
        })
        .await
        .unwrap();
}

struct Elector {
    child: Child,
    leading: mpsc::Receiver<(u64, i64)>,
    /// (term, when its work ended by the database clock) of each tenure
    /// that ended asked to resign.
    resigned: mpsc::Receiver<(u64, i64)>,
}

fn spawn(url: &str, table: &str, name: &str, instance: &str) -> Elector {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(CHILD_ENV, format!("{url}\n{table}\n{name}\n{instance}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, leading) = mpsc::channel();
    let (tx_resigned, resigned) = mpsc::channel();
    let _ = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let mut words = line.split_whitespace();
            let tx = match words.next() {
                Some("LEADING") => &tx,
                Some("RESIGNED") => &tx_resigned,
                _ => continue,
            };
            let term = words.next().unwrap().parse().unwrap();
            let at = words.next().unwrap().parse().unwrap();
            let _ = tx.send((term, at));
        }
    });
    Elector {
        child,
        leading,
        resigned,
    }
}

async fn scenario(url: &str) -> Result<(), String> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let name = format!("kill-{}-{nanos}", std::process::id());
    let full = format!("leader:{name}");
    let table = common::own_table(url);
    let observer = leases(url, &table.name, "observer").await;
    observer.migrate().await.unwrap();

    let mut first = spawn(url, &table.name, &name, "kill-a");
    let (term, _) = first
        .leading
        .recv_timeout(Duration::from_secs(30))
        .map_err(|_| "the first elector did not lead within 30 s".to_owned())?;
    let mut second = spawn(url, &table.name, &name, "kill-b");
    tokio::time::sleep(Duration::from_secs(1)).await; // it campaigns, and follows
    first.child.kill().unwrap(); // SIGKILL: nothing given back
    let _ = first.child.wait().unwrap();
    let at_kill = observer.get(&full).await.unwrap().unwrap();
    let result = second.leading.recv_timeout(LEASE + Duration::from_secs(15));
    second.child.kill().unwrap();
    let _ = second.child.wait().unwrap();
    let (next_term, claimed_at) =
        result.map_err(|_| "the second elector never took over".to_owned())?;
    if at_kill.instance != "kill-a" || !at_kill.held() {
        return Err(format!(
            "at the kill the first elector did not hold the name: {at_kill}"
        ));
    }
    if next_term != term + 1 {
        return Err(format!(
            "the successor's term is {next_term}, not {}",
            term + 1
        ));
    }
    let expiry = at_kill.expires_at_ms;
    let bound = BOUND_MS;
    println!(
        "  takeover {} ms after the killed leader's expiry by the database clock (bound: 0 to {bound} ms)",
        claimed_at - expiry
    );
    if claimed_at < expiry {
        return Err(format!(
            "the successor claimed at {claimed_at}, before the killed leader's lease expired at {expiry}"
        ));
    }
    if claimed_at > expiry + bound {
        return Err(format!(
            "the successor claimed {} ms after the expiry, more than {bound} ms: it did not ask \
             at the expiry",
            claimed_at - expiry
        ));
    }
    Ok(())
}

/// Issue 25, item 4: a leader process asked to resign (from a third
/// process, the test's) winds its work down and gives the name back; the
/// follower process leads at term + 1, its work starting after the
/// resigned one's ended by the database clock; a request then aimed at
/// the passed term does nothing to the new leader.
async fn resign_scenario(url: &str) -> Result<(), String> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let name = format!("resign-{}-{nanos}", std::process::id());
    let full = format!("leader:{name}");
    let table = common::own_table(url);
    let observer = leases(url, &table.name, "observer").await;
    observer.migrate().await.unwrap();

    let mut first = spawn(url, &table.name, &name, "resign-a");
    let (term, _) = first
        .leading
        .recv_timeout(Duration::from_secs(30))
        .map_err(|_| "the first elector did not lead within 30 s".to_owned())?;
    let mut second = spawn(url, &table.name, &name, "resign-b");
    tokio::time::sleep(Duration::from_secs(1)).await; // it campaigns, and follows
    let outcome = resign_checks(&observer, &full, term, &mut first, &mut second).await;
    for elector in [&mut first, &mut second] {
        elector.child.kill().unwrap();
        let _ = elector.child.wait().unwrap();
    }
    outcome
}

/// The checks of [`resign_scenario`], on its two electors (`first` leads
/// at `term`).
async fn resign_checks(
    observer: &Leases,
    full: &str,
    term: u64,
    first: &mut Elector,
    second: &mut Elector,
) -> Result<(), String> {
    let asked = observer.request_resign(full).await.unwrap();
    if asked != Some(term) {
        return Err(format!("request_resign asked {asked:?}, not term {term}"));
    }
    let (resigned, ended) = first
        .resigned
        .recv_timeout(Duration::from_secs(10))
        .map_err(|_| "the leader was not told of the request within 10 s".to_owned())?;
    let (next, started) = second
        .leading
        .recv_timeout(Duration::from_secs(15))
        .map_err(|_| "the follower did not take over within 15 s".to_owned())?;
    println!(
        "  resigned at term {resigned}, its work ended {} ms before the successor's began",
        started - ended
    );
    if resigned != term || next != term + 1 {
        return Err(format!(
            "terms: resigned {resigned}, successor {next}; expected {term} and {}",
            term + 1
        ));
    }
    if started < ended {
        return Err(format!(
            "the successor claimed at {started}, before the resigned work ended at {ended} \
             by the database clock"
        ));
    }
    // A request aimed at the passed term does nothing.
    if observer.request_resign_at(full, term).await.unwrap() {
        return Err(format!(
            "a request at the passed term {term} asked the new leader"
        ));
    }
    tokio::time::sleep(Duration::from_secs(2)).await; // several renewals
    if let Ok(again) = second.resigned.try_recv() {
        return Err(format!(
            "the new leader resigned on a passed term's request: {again:?}"
        ));
    }
    let now = observer.get(full).await.unwrap().unwrap();
    if (now.instance.as_str(), now.term, now.held()) != ("resign-b", term + 1, true) {
        return Err(format!("the new leader does not lead on: {now}"));
    }
    Ok(())
}

fn env_url(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") => {
            panic!("{var} is not set, and CI=true forbids skipping the tests that need it")
        }
        _ => {
            println!("{var} is not set: skipping that database");
            None
        }
    }
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        let mut parts = spec.splitn(4, '\n').map(str::to_owned);
        let (url, table, name, instance) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        runtime.block_on(child(url, table, name, instance));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    #[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(unused_mut))]
    let mut urls = vec![(
        "sqlite",
        format!("sqlite://{}", dir.path().join("leases.db").display()),
    )];
    #[cfg(feature = "postgres")]
    if let Some(url) = env_url("LEASE_TEST_POSTGRES_URL") {
        urls.push(("postgres", url));
    }
    #[cfg(feature = "mysql")]
    if let Some(url) = env_url("LEASE_TEST_MYSQL_URL") {
        urls.push(("mysql", url));
    }
    let _ = env_url; // used only with the server features
    let (mut passed, mut failed) = (0, 0);
    for (backend, url) in urls {
        println!("leader killed with SIGKILL on {backend}:");
        match runtime.block_on(scenario(&url)) {
            Ok(()) => {
                passed += 1;
                println!("  ok");
            }
            Err(e) => {
                failed += 1;
                println!("  FAILED: {e}");
            }
        }
        println!("leader asked to resign on {backend}:");
        match runtime.block_on(resign_scenario(&url)) {
            Ok(()) => {
                passed += 1;
                println!("  ok");
            }
            Err(e) => {
                failed += 1;
                println!("  FAILED: {e}");
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
}
