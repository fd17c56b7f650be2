//! The safety soak: contenders in several processes claim, hold and run
//! under faults, every tenure is recorded by the database's clock, and the
//! checker judges the history. See `lease_bench::soak` for what it does.
//!
//! ```sh
//! cargo run --release -p lease-bench --bin soak -- --seconds 30                 # SQLite file
//! cargo run --release -p lease-bench --bin soak -- --seconds 30 postgres://postgres@127.0.0.1:5432/test
//! cargo run --release -p lease-bench --bin soak -- --seconds 30 mysql://root@127.0.0.1:3306/test
//! cargo run --release -p lease-bench --bin soak -- --seconds 20 --plant skip-deadline --expect-violations
//! ```

fn main() -> std::process::ExitCode {
    lease_bench::soak::main()
}
