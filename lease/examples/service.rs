//! A replica of a service, written from the crate's documentation alone: it
//! leads a duty while elected, serves "requests" that each need a lock, and
//! steps down cleanly on Ctrl-C (or after `--seconds N`).
//!
//! ```sh
//! cargo run -p dblease --example service                          # SQLite file in /tmp
//! LEASE_DATABASE_URL=postgres://postgres@127.0.0.1:5432/test \
//!     cargo run -p dblease --example service --features postgres -- --seconds 20
//! ```
//!
//! Run two or three at once against the same database and watch one lead,
//! the others follow, and the lock refuse whoever comes second.
#![allow(clippy::print_stdout)] // an example prints what it shows

use std::time::Duration;

use dblease::{CancellationToken, Leadership, Leases, LockError};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seconds: Option<u64> = std::env::args()
        .skip_while(|a| a != "--seconds")
        .nth(1)
        .map(|s| s.parse())
        .transpose()?;
    let leases: Leases = match dblease::from_env().await {
        Ok(leases) => leases,
        Err(dblease::ConnectError::MissingEnv(_)) => {
            dblease::connect("sqlite:///tmp/dblease-service-example.db").await?
        }
        Err(e) => return Err(e.into()),
    };
    leases.migrate().await?;
    println!("replica {} up", leases.instance());

    let shutdown = CancellationToken::new();
    {
        let shutdown = shutdown.clone();
        drop(tokio::spawn(async move {
            match seconds {
                Some(s) => tokio::time::sleep(Duration::from_secs(s)).await,
                None => drop(tokio::signal::ctrl_c().await),
            }
            println!("shutting down");
            shutdown.cancel();
        }));
    }

    // The duty: one replica at a time, for as long as it holds the lease.
    let leader = leases
        .leader("billing")
        .on_new_leader(|id| println!("billing is led by {} (term {})", id.instance, id.term));
    let mut status = leader.watch();
    let duty = {
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            leader
                .run(&shutdown, |ctx| async move {
                    println!("leading billing, term {}", ctx.term());
                    let mut invoices = 0u64;
                    loop {
                        tokio::select! {
                            () = ctx.cancelled() => break,
                            () = tokio::time::sleep(Duration::from_secs(1)) => {
                                invoices += 1; // stamp ctx.term() on what leaves the database
                            }
                        }
                    }
                    println!(
                        "stopped leading after {invoices} invoices ({:?})",
                        ctx.cause()
                    );
                })
                .await
        })
    };

    // The requests: each needs the report lock for the span of its call.
    let mut tick = tokio::time::interval(Duration::from_millis(1_500));
    while !shutdown.is_cancelled() {
        tokio::select! {
            () = shutdown.cancelled() => break,
            _ = tick.tick() => {}
        }
        let outcome = leases
            .lock("report")
            .try_run(|ctx| async move {
                tokio::time::sleep(Duration::from_millis(800)).await;
                format!("report written at term {}", ctx.term())
            })
            .await;
        match outcome {
            Ok(done) => println!("200 {done}"),
            Err(e @ LockError::Held { .. }) => println!("409 {e}"),
            Err(e) => println!("503 {e}"),
        }
        if status.has_changed().unwrap_or(false) {
            println!("status: {}", *status.borrow_and_update());
        }
    }
    duty.await??;
    assert_eq!(
        *status.borrow(),
        Leadership::Following { leader: None },
        "a replica that shut down leads nothing"
    );
    println!("bye");
    Ok(())
}
