//! [`MySqlPool`]: the store's pool, handed out without its password.

use std::fmt;
use std::ops::Deref;

use mysql_async::Pool;

/// The pool a [`MySqlStore`](crate::MySqlStore) runs on, as
/// [`MySqlStore::pool`](crate::MySqlStore::pool) hands it out.
///
/// mysql_async's [`Pool`] prints its connection options in its `Debug`
/// output, **the password included**. This wrapper's `Debug` shows the
/// server alone, so the value the accessor returns can be logged. It
/// dereferences to the [`Pool`] for every method (`get_conn`, ...), and
/// [`into_inner`](Self::into_inner) gives the [`Pool`] itself, for an
/// API that takes one: never log that `Pool` (or `*pool`) with `Debug`.
#[derive(Clone)]
pub struct MySqlPool {
    pool: Pool,
    server: String,
}

impl MySqlPool {
    pub(crate) fn new(pool: Pool, server: String) -> Self {
        MySqlPool { pool, server }
    }

    /// The mysql_async [`Pool`], sharing its connections with the store.
    /// Its `Debug` output shows the password: do not log it.
    #[must_use]
    pub fn into_inner(self) -> Pool {
        self.pool
    }
}

impl Deref for MySqlPool {
    type Target = Pool;

    fn deref(&self) -> &Pool {
        &self.pool
    }
}

impl fmt::Debug for MySqlPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MySqlPool")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}
