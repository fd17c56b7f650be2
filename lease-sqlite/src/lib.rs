#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod builder;
mod conn;
mod error;
mod schema;
mod sql;
mod store;
mod transaction;

pub use builder::{OpenMode, SCHEMES, SqliteStoreBuilder, Synchronous};
pub use error::SqliteError;
pub use lease_core::{GuardError, GuardStatement};
pub use lease_sql::DEFAULT_TABLE;
pub use store::SqliteStore;

/// The rusqlite this crate is built on: the types a
/// [guarded transaction](SqliteStore::transaction)'s work receives.
pub use rusqlite;
