#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod clock;
mod error;
mod job;
mod log;
pub mod metrics;
mod round;
mod schedule;
mod scheduler;
mod sweep;
mod task;

pub use error::{Error, ScheduleError};
pub use job::{CutShort, Job, JobResult, MissedRuns, Round};
pub use schedule::{Rfc3339, Schedule};
pub use scheduler::{
    DEFAULT_LOOK_BACK, DEFAULT_SWEEP_INTERVAL, JobsHandle, PREFIX, Removal, Scheduler,
    SchedulerBuilder,
};
