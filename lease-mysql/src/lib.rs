#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;
mod pool;
mod schema;
mod sql;
mod store;

pub use error::MySqlError;
pub use pool::MySqlPool;
pub use schema::DEFAULT_TABLE;
pub use store::{BoxFuture, MySqlStore, MySqlStoreBuilder};

/// The driver, re-exported: its `Pool`, `Transaction`, `SslOpts` and the
/// `Queryable` trait are part of this crate's API.
pub use mysql_async;
