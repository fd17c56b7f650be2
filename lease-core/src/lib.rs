#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_auto_cfg))]

mod context;
mod error;
mod leases;
mod name;
mod store;
mod time;
mod timings;
mod token;

pub use context::{EndCause, LeaseContext};
pub use error::{BoxError, Error, LostCause, NameError, Op, Result};
pub use leases::{Handle, Leases, Unfinished};
pub use name::{MAX_NAME_BYTES, validate_name};
pub use store::{Finished, LeaseStore, SlotClaim, SupersededSlot, UnfinishedRow};
pub use time::{TimeOutOfRange, UtcMillis};
pub use timings::{Timings, TimingsBuilder};
pub use token::instance_id;
