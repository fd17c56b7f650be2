//! The README's example, compiled and run: a third-party backend runs the
//! whole suite in about twenty lines. `MyStore` here is the reference store
//! behind the `connect` / `with_table` / `drop_table_blocking` a real
//! backend has, so this is also the suite against the reference store (every
//! case passes on a correct implementation of the protocol). The lines
//! between the markers are the README's, and a test checks that they still
//! are. `MY_DB_URL` is set by the workspace's `.cargo/config.toml`.

#![allow(clippy::expect_used, reason = "the README's example fails loudly")]

use std::sync::Mutex;

use lease_conformance::reference::MemoryStore;

/// A stand-in for a third party's store type.
#[derive(Debug)]
struct MyStore(MemoryStore);

/// The tables a [`DropTable`] dropped, in order.
static DROPPED: Mutex<Vec<String>> = Mutex::new(Vec::new());

impl MyStore {
    async fn connect(_url: &str) -> Result<MyStore, std::io::Error> {
        Ok(MyStore(MemoryStore::new()))
    }

    fn with_table(self, _table: &str) -> MemoryStore {
        self.0
    }

    fn drop_table_blocking(table: &str) {
        DROPPED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(table.to_owned());
    }
}

// README example: begin
use lease_core::LeaseStore;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Drops its table when the suite drops it, once the case is over.
struct DropTable(String);

impl Drop for DropTable {
    fn drop(&mut self) {
        MyStore::drop_table_blocking(&self.0);
    }
}

/// A store on a fresh table of its own, not migrated yet (the suite migrates), and the
/// guard that drops the table; `None` when the database is not configured (the cases
/// then skip, except under CI=true).
async fn fresh_store() -> Option<(Arc<dyn LeaseStore>, DropTable)> {
    static TABLES: AtomicU64 = AtomicU64::new(0);
    let url = lease_conformance::env_url("MY_DB_URL")?;
    let n = TABLES.fetch_add(1, Ordering::Relaxed);
    let table = format!("lease_t_{}_{n}", std::process::id());
    let store = MyStore::connect(&url).await.expect("connect");
    Some((Arc::new(store.with_table(&table)), DropTable(table)))
}

lease_conformance::conformance_tests!(fresh_store);
// README example: end

/// The block above is the README's example, token for token (rustfmt may
/// wrap it differently; whitespace is not compared).
#[test]
fn the_readme_example_is_this_file() {
    let readme = include_str!("../README.md");
    let this = include_str!("third_party.rs");
    let squeeze = |text: &str| -> String {
        text.lines()
            .filter(|line| !line.trim_start().starts_with("// "))
            .flat_map(str::chars)
            .filter(|c| !c.is_whitespace())
            .collect()
    };
    let example = readme
        .split("```rust,ignore\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the README has a rust,ignore example");
    let block = this
        .split("// README example: begin\n")
        .nth(1)
        .and_then(|rest| rest.split("// README example: end").next())
        .expect("the markers");
    assert_eq!(
        squeeze(example),
        squeeze(block),
        "the README's example and tests/third_party.rs have drifted apart"
    );
}

/// The example's guard drops its table once its case is over: a case that
/// calls for a second store (`Ctx::fresh_store`) has both its tables
/// dropped by the time it has run, each once.
#[test]
fn the_guard_drops_the_table_once_the_case_is_over() {
    let created = Arc::new(Mutex::new(Vec::new()));
    let record = created.clone();
    let factory = lease_conformance::factory(move || {
        let record = record.clone();
        async move {
            let (store, guard) = fresh_store().await?;
            record
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(guard.0.clone());
            Some((store, guard))
        }
    });
    let name = "concurrent_migrations_of_a_new_table_all_succeed";
    let case = lease_conformance::case(name).expect("a case of the suite");
    assert_eq!(
        lease_conformance::run_case(name, case, &factory),
        lease_conformance::Outcome::Passed
    );
    let created = created
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    assert_eq!(created.len(), 2, "the case's store and a fresh one");
    let dropped = DROPPED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    for table in &created {
        let times = dropped.iter().filter(|t| *t == table).count();
        assert_eq!(times, 1, "{table} dropped {times} times: {dropped:?}");
    }
}
