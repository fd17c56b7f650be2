//! The benchmark: the lease protocol's operations beside the database's
//! floor, measured in the same run on the same pool.
//!
//! ```sh
//! cargo run --release -p lease-bench --bin bench -- \
//!     sqlite:///tmp/lease-bench.db \
//!     postgres://postgres@127.0.0.1:5432/test \
//!     mysql://root@127.0.0.1:3306/test
//! ```
//!
//! With no URL it runs on an SQLite file in a temp dir. `--seconds N` sets
//! how long each cell runs (default 2), `--concurrency 1,8,32` the
//! concurrencies.
//!
//! See `lease_bench::bench` for what it measures and how.

fn main() -> std::process::ExitCode {
    lease_bench::bench::main()
}
