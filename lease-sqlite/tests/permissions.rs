//! The database file the store creates is its owner's alone: its rows hold
//! the holder tokens.

#![cfg(unix)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] functions fail loudly"
)]

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use lease_core::Leases;
use lease_sqlite::SqliteStore;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Issue 16, item 8: the file was created 0644 (with the usual umask 022),
/// readable by every user of the machine.
#[tokio::test]
async fn a_new_database_file_and_its_wal_are_created_0600() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.db");
    let leases = Leases::new(SqliteStore::open(&path).unwrap());
    leases.migrate().await.unwrap();
    let handle = leases.claim("job").await.unwrap().unwrap();
    assert_eq!(mode(&path), 0o600, "database file");
    for suffix in ["-wal", "-shm"] {
        let side = dir.path().join(format!("leases.db{suffix}"));
        assert!(side.exists(), "{} missing", side.display());
        assert_eq!(mode(&side), 0o600, "{suffix} file");
    }
    handle.release().await.unwrap();
}

/// A file that exists keeps its mode: the store does not change it.
#[tokio::test]
async fn an_existing_file_keeps_its_mode() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.db");
    std::fs::write(&path, b"").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    let store = SqliteStore::open(&path).unwrap();
    lease_core::LeaseStore::migrate(&store).await.unwrap();
    assert_eq!(mode(&path), 0o640);
}
