#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;
mod schema;
mod sql;
mod store;
#[doc(hidden)]
pub mod texts;

pub use error::SqliteError;
pub use store::{DEFAULT_BUSY_TIMEOUT, SqliteStore, SqliteStoreBuilder, Synchronous};

/// The rusqlite this crate is built on: the types a
/// [guarded transaction](SqliteStore::transaction)'s work receives.
pub use rusqlite;
