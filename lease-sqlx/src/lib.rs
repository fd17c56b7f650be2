#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod conn;
mod dialect;
mod error;
mod fence;
#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;
mod store;

pub use dialect::FenceDatabase;
pub use error::StoreError;
pub use fence::{dialect_of, fenced, guard, guard_with, transaction};
pub use lease_core::{BoxFuture, Dialect, GuardError, GuardStatement};
#[cfg(feature = "mysql")]
pub use mysql::MySqlLeaseStore;
#[cfg(feature = "postgres")]
pub use postgres::PgLeaseStore;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteLeaseStore;

/// The sqlx this crate is built on, re-exported so that an application names
/// the same version.
pub use sqlx;
