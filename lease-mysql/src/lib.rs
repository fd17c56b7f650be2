#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod builder;
mod conn;
mod error;
mod schema;
mod store;
mod transaction;

pub use builder::{MySqlPool, MySqlStoreBuilder, SCHEMES};
pub use error::MySqlError;
pub use lease_core::{BoxFuture, GuardError, GuardStatement};
pub use lease_sql::DEFAULT_TABLE;
pub use store::MySqlStore;

/// The driver, re-exported: its `Pool`, `Transaction`, `SslOpts` and the
/// `Queryable` trait are part of this crate's API.
pub use mysql_async;
