//! The README's example, compiled and run: a third-party backend runs the
//! whole suite in about ten lines. `MyStore` here is the reference store
//! behind the `connect` / `with_table` a real backend has, so this is also
//! the suite against the reference store (every case passes on a correct
//! implementation of the protocol). The lines between the markers are the
//! README's, and a test checks that they still are. `MY_DB_URL` is set by
//! the workspace's `.cargo/config.toml`.

#![allow(clippy::expect_used, reason = "the README's example fails loudly")]

use lease_conformance::reference::MemoryStore;

/// A stand-in for a third party's store type.
#[derive(Debug)]
struct MyStore(MemoryStore);

impl MyStore {
    async fn connect(_url: &str) -> Result<MyStore, std::io::Error> {
        Ok(MyStore(MemoryStore::new()))
    }

    fn with_table(self, _table: &str) -> MemoryStore {
        self.0
    }
}

// README example: begin
use lease_core::LeaseStore;
use std::sync::Arc;

/// A store on a fresh table of its own, not migrated yet (the suite migrates);
/// `None` when the database is not configured (the cases then skip, except under CI=true).
async fn fresh_store() -> Option<Arc<dyn LeaseStore>> {
    let url = lease_conformance::env_url("MY_DB_URL")?;
    let store = MyStore::connect(&url).await.expect("connect");
    Some(Arc::new(
        store.with_table(&format!("lease_t_{}", std::process::id())),
    ))
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
