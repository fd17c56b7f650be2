//! Counting the statements that reach the store under test.

use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use lease_core::{BoxError, Op};

use crate::intercept::{Intercept, Intercepted};

/// The store under test, seen through a counter of the calls that reach it,
/// so that a case can tell whether anything reached the database.
pub(crate) type CountingStore = Intercepted<Counter>;

/// Counts every call.
#[derive(Debug, Default)]
pub(crate) struct Counter {
    calls: AtomicU64,
}

impl Counter {
    pub(crate) fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Intercept for Counter {
    async fn before(&self, _op: Op) -> Result<(), BoxError> {
        let _ = self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}
