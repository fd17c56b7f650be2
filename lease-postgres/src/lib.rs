#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod builder;
mod error;
mod replication;
mod schema;
mod sql;
mod store;
#[doc(hidden)]
pub mod texts;
mod tls;
mod transaction;

pub use builder::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_POOL_SIZE, PostgresStoreBuilder, SCHEMES};
pub use error::PostgresError;
pub use lease_core::{BoxFuture, GuardError, GuardStatement};
pub use replication::ReplicationReport;
pub use sql::{DEFAULT_TABLE, StatementMode};
pub use store::PostgresStore;
pub use tls::SslMode;

/// The driver and pool this crate is built on, re-exported so that an
/// application names the same versions: [`from_pool`](PostgresStore::from_pool)
/// takes a [`deadpool_postgres::Pool`], and guarded transactions hand the
/// work a [`deadpool_postgres::Transaction`].
pub use deadpool_postgres;
pub use tokio_postgres;
