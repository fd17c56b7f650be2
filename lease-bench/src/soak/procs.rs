//! The contender processes: starting them (each behind its own proxy on
//! the servers), and gathering the lines they write into the history.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};

use lease_conformance::proxy::Proxy;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::BoxResult;
use crate::plant::Plant;
use crate::url::{Backend, host_port, through};
use lease_testkit::history::Event;

/// A contender process and what stands between it and the database.
pub(crate) struct Proc {
    pub(crate) instance: String,
    pub(crate) child: Child,
    pub(crate) stdin: Option<ChildStdin>,
    pub(crate) proxy: Option<Arc<Proxy>>,
}

/// Starts contender processes, and sends their lines to the history.
pub(crate) struct Orchestra {
    pub(crate) url: String,
    pub(crate) backend: Backend,
    pub(crate) run: String,
    pub(crate) plant: Plant,
    pub(crate) exe: PathBuf,
    pub(crate) lines: mpsc::UnboundedSender<String>,
    pub(crate) next: usize,
}

impl Orchestra {
    pub(crate) async fn spawn(&mut self) -> BoxResult<Proc> {
        self.next += 1;
        let instance = format!("p{}", self.next);
        let (url, proxy) = match host_port(&self.url) {
            Some(target) if self.backend != Backend::Sqlite => {
                let proxy = Proxy::start(target.as_str()).await?;
                let url = through(&self.url, &proxy.addr().to_string())
                    .ok_or("cannot point the URL at the proxy")?;
                (url, Some(Arc::new(proxy)))
            }
            _ => (self.url.clone(), None),
        };
        let mut child = Command::new(&self.exe)
            .args(["--child", &instance, "--run", &self.run, "--plant"])
            .arg(self.plant.as_str())
            .arg(&url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let lines = self.lines.clone();
        drop(tokio::spawn(async move {
            let mut reader = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                if lines.send(line).is_err() {
                    break;
                }
            }
        }));
        Ok(Proc {
            instance,
            stdin: child.stdin.take(),
            child,
            proxy,
        })
    }

    /// Adds an event of the orchestrator's own to the history.
    pub(crate) fn record(&self, event: &Event) {
        let _ = self.lines.send(event.to_line());
    }

    pub(crate) fn fault(&self, kind: &str, instance: &str, at_ms: i64) {
        self.record(&Event::Fault {
            kind: kind.to_owned(),
            instance: instance.to_owned(),
            at_ms,
        });
    }
}

/// Who holds something right now, from the contenders' own lines: faults
/// aim at holders more often than not.
pub(crate) type Holding = Arc<Mutex<BTreeMap<String, i64>>>;

/// Writes every line to the history file as it comes, keeps [`Holding`]
/// up to date, and returns the whole history once every sender is gone.
pub(crate) fn write_history(
    path: &Path,
    mut rx: mpsc::UnboundedReceiver<String>,
    holding: Holding,
) -> BoxResult<JoinHandle<String>> {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
    Ok(tokio::spawn(async move {
        let mut all = String::new();
        while let Some(line) = rx.recv().await {
            let delta = match Event::from_line(&line) {
                Ok(Event::Claim { instance, .. }) => Some((instance, 1)),
                Ok(Event::Stop { instance, .. }) => Some((instance, -1)),
                _ => None,
            };
            if let Some((instance, d)) = delta {
                *holding
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .entry(instance)
                    .or_default() += d;
            }
            let _ = writeln!(file, "{line}");
            all.push_str(&line);
            all.push('\n');
        }
        let _ = file.flush();
        all
    }))
}
