#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod batch;
mod capability;
mod context;
mod error;
mod forward;
pub mod guard;
mod guard_statement;
mod handle;
mod hold;
mod info;
mod leader;
mod leases;
mod lock;
pub mod metrics;
mod name;
mod run;
mod state;
mod store;
mod table;
mod time;
mod timings;
mod token;

#[cfg(any(test, feature = "test-util"))]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub mod memory;
#[cfg(test)]
mod testing;

pub use capability::RELEASE_TIMEOUT;
pub use context::LeaseContext;
pub use error::{
    BoxError, Chain, ConnectFailure, DbErrorKind, Error, LostCause, NameError, Op, Result,
};
pub use forward::ForwardingStore;
pub use guard::{BoxFuture, BoxedGuardError, GuardError};
pub use guard_statement::{Dialect, GuardParams, GuardStatement};
pub use handle::Handle;
pub use hold::Holder;
pub use info::{LeaseInfo, LeaseState};
pub use leader::{
    CAMPAIGN_INTERVAL, CAMPAIGN_JITTER, LEADER_PREFIX, Leader, LeaderId, LeaderOutcome, Leadership,
    StepDown,
};
pub use leases::Leases;
pub use lock::{LOCK_PREFIX, Lock, LockError};
pub use name::{MAX_NAME_BYTES, validate_name};
pub use run::run;
pub use state::EndCause;
pub use store::{
    ClaimRequest, FinishRequest, Finished, InstantClaim, InstantRecord, LeaseStore, Renewed,
    Unfinished, renew_each, term_from_db,
};
pub use table::{TableName, TableNameError, TableRules};
pub use time::{TimeOutOfRange, UtcMillis};
pub use timings::{Risk, Timings, TimingsBuilder};
pub use token::{INSTANCE_VAR, MAX_INSTANCE_CHARS, Token, instance_id};

/// The attribute the [`LeaseStore`] and [`ForwardingStore`] impls are
/// written with, re-exported so that an implementation names the same
/// version.
pub use async_trait::async_trait;

/// The cancellation token [`Handle::hold`] takes as its parent and
/// [`LeaseContext`] carries, re-exported so that callers name the same version.
pub use tokio_util::sync::CancellationToken;
