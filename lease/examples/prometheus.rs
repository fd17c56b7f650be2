//! The library's metrics in Prometheus's text format: install an exporter
//! (here `metrics-exporter-prometheus`, without its HTTP listener), use
//! leases, render. A service would serve `handle.render()` on `/metrics`.
//!
//! ```sh
//! cargo run -p dblease --example prometheus
//! ```
#![allow(clippy::print_stdout)] // an example prints what it shows

use std::time::Duration;

use dblease::{CancellationToken, Leases};
use metrics_exporter_prometheus::PrometheusBuilder;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let handle = PrometheusBuilder::new().install_recorder()?;

    let leases: Leases = dblease::connect("sqlite::memory:").await?;
    leases.migrate().await?;

    // A lock run, and a refused one.
    leases.lock("report").try_run(|_| async {}).await?;
    let held = leases
        .claim("lock:busy")
        .await?
        .ok_or("lock:busy is free")?;
    let refused = leases.lock("busy").try_run(|_| async {}).await;
    println!(
        "# the second lock call: {}",
        refused.err().map(|e| e.to_string()).unwrap_or_default()
    );
    held.release().await?;

    // A short tenure as leader.
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    drop(tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        stop.cancel();
    }));
    leases
        .leader("billing")
        .run(&shutdown, |ctx| async move { ctx.cancelled().await })
        .await?;

    print!("{}", handle.render());
    Ok(())
}
