//! One process holding many leases at once (100,000 on PostgreSQL, 10,000
//! on MariaDB and SQLite): whether every lease is renewed on time, and what
//! their renewals cost the database and the process. See
//! `lease_bench::scale` for what it measures and its flags.
//!
//! ```sh
//! cargo run --release -p lease-bench --bin scale -- \
//!     --leases 100000 --seconds 60 --pool 4 postgres://postgres@127.0.0.1:5432/test
//! cargo run --release -p lease-bench --bin scale -- \
//!     --leases 10000 --seconds 60 --pool 4 mysql://root@127.0.0.1:3306/test
//! cargo run --release -p lease-bench --bin scale -- \
//!     --leases 10000 --seconds 60 sqlite:///tmp/lease-scale.db
//! ```

fn main() -> std::process::ExitCode {
    lease_bench::scale::main()
}
