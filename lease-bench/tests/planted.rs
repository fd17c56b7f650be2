//! The soak catches each planted bug: the contenders run with the bug on an
//! SQLite file, under the soak's faults, and the checker must report a
//! violation of the rule the bug breaks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

/// Runs the soak with `plant` for `seconds` and returns its output, after
/// checking it reported the plant caught.
fn soak(plant: &str, seconds: u32) -> String {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("history.jsonl");
    let url = format!("sqlite://{}", dir.path().join("soak.db").display());
    let out = Command::new(env!("CARGO_BIN_EXE_soak"))
        .args([
            "--seconds",
            &seconds.to_string(),
            "--plant",
            plant,
            "--expect-violations",
        ])
        .arg("--history")
        .arg(&history)
        .arg(&url)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "planted bug {plant} not caught:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("caught"), "{stdout}");
    stdout
}

#[test]
fn work_outliving_its_lease_is_caught_as_overlap_and_late_step_down() {
    let out = soak("skip-deadline", 20);
    assert!(
        out.contains("overlap on") || out.contains("late step-down on"),
        "{out}"
    );
}

#[test]
fn a_store_moving_the_term_by_two_is_caught_by_the_term_rule() {
    let out = soak("phantom-claim", 8);
    assert!(out.contains("term gap on"), "{out}");
}

#[test]
fn a_finished_instant_run_again_is_caught_by_the_instant_rule() {
    let out = soak("rerun-finished", 8);
    assert!(out.contains("recorded finished"), "{out}");
}
