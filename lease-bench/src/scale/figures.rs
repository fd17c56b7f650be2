//! The run's figures: printed as they are measured, and kept for
//! `--figures FILE`.

use std::sync::Mutex;
use std::time::Duration;

use super::meter::Sample;

/// The run's figures, in the order measured, for `--figures FILE`: one
/// `measure<TAB>value` line each, the first naming the backend, so that
/// `lease-bench/record.sh` puts the runs on several backends side by side
/// in one markdown table.
#[derive(Default)]
pub(crate) struct Figures {
    /// Put before each measure: which renewals (`--mode both` measures two).
    pub(crate) prefix: Mutex<String>,
    lines: Mutex<Vec<(String, String)>>,
}

impl Figures {
    pub(crate) fn add(&self, measure: &str, value: String) {
        let prefix = self
            .prefix
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        self.lines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((format!("{prefix}{measure}"), value));
    }

    pub(crate) fn write(&self, path: &std::path::Path) -> std::io::Result<()> {
        let lines = self
            .lines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let text: String = lines
            .iter()
            .map(|(m, v)| format!("{}\t{}\n", m.replace('\t', " "), v.replace('\t', " ")))
            .collect();
        std::fs::write(path, text)
    }
}

/// Prints (and adds to `figures`) what the window from `a` to `b` cost:
/// the renewals asked for and answered, the writes, the commits and the CPU
/// of both sides.
pub(crate) fn report(
    label: &str,
    a: &Sample,
    b: &Sample,
    held: usize,
    demanded: f64,
    figures: &Figures,
) {
    let secs = (b.at - a.at).as_secs_f64();
    let per_s = |x: i64, y: i64| (y - x) as f64 / secs;
    let pct = |x: Duration, y: Duration| 100.0 * (y.saturating_sub(x)).as_secs_f64() / secs;
    let renewed = (b.renewed - a.renewed) as f64 / secs;
    println!("  {label} ({secs:.1} s window)");
    println!("    lease renewals the protocol asks for:     {demanded:>9.0} /s");
    println!("    leases renewed (answers to this process): {renewed:>9.0} /s");
    figures.add(
        "renewals asked / answered",
        format!("{demanded:.0} / {renewed:.0} /s"),
    );
    if let (Some(x), Some(y)) = (a.rows_updated, b.rows_updated) {
        println!(
            "    rows updated in the table (server stats): {:>9.0} /s",
            per_s(x, y)
        );
    }
    if renewed > 0.0 {
        println!(
            "    so each lease renewed every:              {:>9.2} s",
            held as f64 / renewed
        );
    }
    println!(
        "    write transactions sent by this process:  {:>9.1} /s",
        (b.writes - a.writes) as f64 / secs
    );
    figures.add(
        "write transactions from this process",
        format!("{:.1} /s", (b.writes - a.writes) as f64 / secs),
    );
    if let (Some(x), Some(y)) = (a.commits, b.commits) {
        println!(
            "    commits in the whole database:            {:>9.1} /s  (every client, others' included)",
            per_s(x, y)
        );
        figures.add(
            "commits in the whole database (every client)",
            format!("{:.1} /s", per_s(x, y)),
        );
    }
    if let (Some(x), Some(y)) = (a.server_cpu, b.server_cpu) {
        println!(
            "    CPU of the server:                        {:>9.1} % of one core",
            pct(x, y)
        );
        figures.add("server CPU", format!("{:.1} % of a core", pct(x, y)));
    }
    println!(
        "    CPU of this process:                      {:>9.1} % of one core",
        pct(a.process_cpu, b.process_cpu)
    );
    figures.add(
        "process CPU",
        format!("{:.1} % of a core", pct(a.process_cpu, b.process_cpu)),
    );
}
