//! Benchmarks of the lease protocol against each database's floor, the
//! 10,000-lease scale run on PostgreSQL, and a multi-process safety soak
//! with the checker that judges its history.
//!
//! The binaries are the product (`bench`, `scale`, `scheduler`, `soak`); this library
//! holds what they share and what is worth testing on its own:
//!
//! - [`bench`](mod@bench): the benchmark (the `bench` binary only calls
//!   [`bench::main`]);
//! - [`stats`]: latency percentiles and throughput from recorded samples;
//! - [`json`]: the flat JSON objects of the soak's history, written and read
//!   by hand (no serde: one line format does not earn its build time);
//! - [`history`]: the events of a soak run, one JSON line each;
//! - [`check`]: the checker, which reads a history and names every
//!   violation of the protocol's guarantees;
//! - [`clock`]: bounds on the database's clock from the process's
//!   monotonic clock, for instants when the database cannot be asked;
//! - [`cpu`]: CPU time of a process, from `/proc`;
//! - [`plant`]: stores and contenders broken on purpose, which the soak
//!   must catch;
//! - [`rounds`]: the scheduler's rounds under load (the `scheduler`
//!   binary and the benchmark's scheduler row);
//! - [`soak`]: the soak itself, contender and orchestrator (the `soak`
//!   binary only calls [`soak::main`]);
//! - [`url`]: which backend a URL names, and the same URL through a proxy;
//! - [`wire`]: round trips counted on the wire, from what a client sends.

pub mod bench;
pub mod check;
pub mod clock;
pub mod cpu;
pub mod history;
pub mod json;
pub mod plant;
pub mod rounds;
pub mod soak;
pub mod stats;
pub mod url;
pub mod wire;
