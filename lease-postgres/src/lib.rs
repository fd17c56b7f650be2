#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;
mod schema;
mod sql;
mod store;
#[doc(hidden)]
pub mod texts;
mod tls;
mod token;
mod transaction;

pub use error::PostgresError;
pub use lease_core::{BoxFuture, GuardError, GuardStatement};
pub use sql::DEFAULT_TABLE;
pub use store::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_POOL_SIZE, DEFAULT_STATEMENT_TIMEOUT, PostgresStore,
    PostgresStoreBuilder, StatementMode,
};
pub use tls::SslMode;

/// The driver and pool this crate is built on, re-exported so that an
/// application names the same versions: [`from_pool`](PostgresStore::from_pool)
/// takes a [`deadpool_postgres::Pool`], and guarded transactions hand the
/// work a [`deadpool_postgres::Transaction`].
pub use deadpool_postgres;
pub use tokio_postgres;
