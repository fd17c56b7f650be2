//! Benchmarks of the lease protocol against each database's floor, the
//! 10,000-lease scale run on PostgreSQL, and a multi-process safety soak
//! with the checker that judges its history.
//!
//! The binaries are the product (`bench`, `scale`, `scheduler`, `soak`); this library
//! holds what they share and what is worth testing on its own. The soak's
//! history and its checker are `lease-testkit`'s (`lease_testkit::{history,
//! json, check}`), shared with lease-scheduler's tests:
//!
//! - [`bench`](mod@bench): the benchmark (the `bench` binary only calls
//!   [`bench::main`]);
//! - [`stats`]: latency percentiles and throughput from recorded samples;
//! - [`clock`]: bounds on the database's clock from the process's
//!   monotonic clock, for instants when the database cannot be asked;
//! - [`cpu`]: CPU time of a process, from `/proc`;
//! - [`plant`]: stores and contenders broken on purpose, which the soak
//!   must catch;
//! - [`rounds`]: the scheduler's rounds under load (the `scheduler`
//!   binary and the benchmark's scheduler row);
//! - [`scale`]: the scale run, one process holding many leases (the
//!   `scale` binary only calls [`scale::main`]);
//! - [`soak`]: the soak itself, contender and orchestrator (the `soak`
//!   binary only calls [`soak::main`]);
//! - [`url`]: which backend a URL names, and the same URL through a proxy;
//! - [`wire`]: round trips counted on the wire, from what a client sends.

pub mod bench;
pub mod clock;
pub mod cpu;
pub mod plant;
pub mod rounds;
pub mod scale;
pub mod soak;
pub mod stats;
pub mod url;
pub mod wire;
