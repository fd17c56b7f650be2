#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod builder;
mod conn;
mod error;
mod replication;
mod schema;
mod store;
mod tls;
mod transaction;

pub use builder::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_POOL_SIZE, PostgresStoreBuilder, SCHEMES};
pub use conn::StatementMode;
pub use error::PostgresError;
pub use lease_core::{BoxFuture, GuardError, GuardStatement};
pub use lease_sql::DEFAULT_TABLE;
pub use replication::ReplicationReport;
pub use store::PostgresStore;
pub use tls::SslMode;

/// The driver and pool this crate is built on, re-exported so that an
/// application names the same versions: [`from_pool`](PostgresStore::from_pool)
/// takes a [`deadpool_postgres::Pool`], and guarded transactions hand the
/// work a [`deadpool_postgres::Transaction`].
pub use deadpool_postgres;
pub use tokio_postgres;
