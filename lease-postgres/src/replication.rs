//! Whether the primary's replication keeps a lease safe across a failover.
//!
//! A lease is as durable as the commit that granted or renewed it. With
//! asynchronous streaming replication, a claim or a renewal the primary
//! acknowledged may not have reached the standby when the primary is lost;
//! once the standby is promoted, the lease it inherits is older than the one
//! its holder was told it had, so it can expire there (and be claimed by
//! another process) while the holder still believes, as the protocol
//! promised it, that the name is its own: two holders. The failover trials of
//! `tests/failover.sh` show it (see the crate README, "Replication and
//! failover").
//!
//! What the lease needs from a primary with standbys that may be promoted:
//!
//! - the standby a failover promotes is a synchronous one, named in
//!   `synchronous_standby_names` (`FIRST n (...)` or `ANY n (...)`);
//! - the lease's own commits wait for it: `synchronous_commit` at `on` (the
//!   standby has flushed the commit to disk) or `remote_apply` (and has
//!   replayed it). `remote_write` survives the primary's loss but not the
//!   standby's operating system crashing at the same moment; `local` and
//!   `off` do not wait for the standby at all.
//!
//! [`PostgresStore::replication`] reads those settings and
//! `pg_stat_replication`; [`PostgresStoreBuilder::connect`] and
//! [`PostgresStore::connect`] log its warnings once the first connection is
//! open.
//!
//! [`PostgresStoreBuilder::connect`]: crate::PostgresStoreBuilder::connect

use std::fmt;
use std::time::Duration;

use crate::PostgresStore;

/// The most the check at connect waits for its answer.
const CHECK_BOUND: Duration = Duration::from_secs(5);

/// What the store's session sees of the server's replication: see
/// [`PostgresStore::replication`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplicationReport {
    /// Whether the server is a standby (in recovery): the lease cannot be
    /// written there.
    pub in_recovery: bool,
    /// `synchronous_commit` as the store's sessions have it.
    pub synchronous_commit: String,
    /// `synchronous_standby_names`.
    pub synchronous_standby_names: String,
    /// Standbys streaming from this server whose commits are waited for
    /// (`sync_state` `sync` or `quorum`).
    pub sync_standbys: i64,
    /// Standbys streaming from this server that the commits do not wait for
    /// (`sync_state` `async` or `potential`): a failover to one of them can
    /// lose acknowledged claims and renewals.
    pub async_standbys: i64,
    /// Standbys whose `sync_state` the role may not read (it lacks
    /// `pg_read_all_stats`): they are counted here, as unknown.
    pub unknown_standbys: i64,
}

impl ReplicationReport {
    /// Whether the lease's commits wait for a synchronous standby.
    #[must_use]
    pub fn commits_wait_for_a_standby(&self) -> bool {
        !self.synchronous_standby_names.trim().is_empty()
            && matches!(
                self.synchronous_commit.as_str(),
                "on" | "remote_apply" | "remote_write"
            )
    }

    /// What in this setup can lose an acknowledged claim or renewal in a
    /// failover, and so let a second holder appear; empty when nothing can
    /// be seen to.
    #[must_use]
    pub fn concerns(&self) -> Vec<String> {
        let mut concerns = Vec::new();
        if self.in_recovery {
            concerns.push(
                "the server is a standby (in recovery): leases cannot be written there; \
                 connect with target_session_attrs=read-write"
                    .to_owned(),
            );
            return concerns;
        }
        let standbys = self.sync_standbys + self.async_standbys + self.unknown_standbys;
        if standbys == 0 {
            return concerns;
        }
        if self.synchronous_standby_names.trim().is_empty() {
            concerns.push(format!(
                "{standbys} standby(s) replicate asynchronously (synchronous_standby_names is \
                 empty): a failover to one can lose claims and renewals the primary \
                 acknowledged, and let a second holder appear; name the standby a failover \
                 promotes in synchronous_standby_names"
            ));
        } else if !self.commits_wait_for_a_standby() {
            concerns.push(format!(
                "synchronous_commit is {:?} for the lease's sessions: its commits do not wait \
                 for the synchronous standby, and a failover can lose claims and renewals the \
                 primary acknowledged; use on or remote_apply",
                self.synchronous_commit
            ));
        } else {
            if self.synchronous_commit == "remote_write" {
                concerns.push(
                    "synchronous_commit is remote_write: a commit is acknowledged before the \
                     standby has flushed it, and survives the primary's loss but not the \
                     standby's operating system crashing too; on or remote_apply does"
                        .to_owned(),
                );
            }
            if self.async_standbys > 0 {
                concerns.push(format!(
                    "{} standby(s) are not synchronous (sync_state async or potential): a \
                     failover must promote a synchronous standby, or acknowledged claims and \
                     renewals can be lost",
                    self.async_standbys
                ));
            }
        }
        if self.unknown_standbys > 0 {
            concerns.push(format!(
                "{} standby(s) whose sync_state this role may not read (grant it \
                 pg_read_all_stats to check them)",
                self.unknown_standbys
            ));
        }
        concerns
    }
}

impl fmt::Display for ReplicationReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "in_recovery={} synchronous_commit={} synchronous_standby_names={:?} \
             standbys: {} sync, {} async, {} unknown",
            self.in_recovery,
            self.synchronous_commit,
            self.synchronous_standby_names,
            self.sync_standbys,
            self.async_standbys,
            self.unknown_standbys
        )
    }
}

/// The statement of [`PostgresStore::replication`].
const CHECK: &str = "SELECT pg_is_in_recovery(), \
            current_setting('synchronous_commit'), \
            current_setting('synchronous_standby_names'), \
            count(*) FILTER (WHERE r.sync_state IN ('sync', 'quorum')), \
            count(*) FILTER (WHERE r.sync_state IN ('async', 'potential')), \
            count(*) FILTER (WHERE r.sync_state IS NULL) \
       FROM pg_stat_replication AS r";

impl PostgresStore {
    /// Reads what the store's sessions see of the server's replication:
    /// whether it is a standby, `synchronous_commit`,
    /// `synchronous_standby_names`, and its standbys by `sync_state`. See
    /// [`ReplicationReport::concerns`] for what a lease needs. The store
    /// logs those concerns as warnings once: when it connects (the
    /// `connect` functions), or, for a store that did not (built with
    /// [`build`](crate::PostgresStoreBuilder::build) or
    /// [`from_pool`](crate::PostgresStore::from_pool), which open no
    /// connection), at its first [`migrate`](lease_core::LeaseStore::migrate),
    /// which every application runs as it starts.
    ///
    /// # Errors
    ///
    /// When no connection can be had or the statement fails.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn replication(&self) -> Result<ReplicationReport, lease_core::BoxError> {
        let client = self.pool().get().await?;
        // The simple protocol: no statement is prepared, so the check works
        // behind PgBouncer in transaction pooling mode too.
        let messages = client.simple_query(CHECK).await?;
        let row = messages
            .iter()
            .find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(row) => Some(row),
                _ => None,
            })
            .ok_or("the replication check returned no row")?;
        let text = |i: usize| -> Result<String, lease_core::BoxError> {
            Ok(row.try_get(i)?.unwrap_or_default().to_owned())
        };
        let count = |i: usize| -> Result<i64, lease_core::BoxError> { Ok(text(i)?.parse()?) };
        Ok(ReplicationReport {
            in_recovery: text(0)? == "t",
            synchronous_commit: text(1)?,
            synchronous_standby_names: text(2)?,
            sync_standbys: count(3)?,
            async_standbys: count(4)?,
            unknown_standbys: count(5)?,
        })
    }
}

/// Logs the store's replication concerns as warnings (and a failed check
/// at debug level: the check must never keep a store from connecting).
/// [`warn_if_unsafe`] the first time it is called for `store` (or a clone):
/// at `connect`, or, for a store that did not connect (`build()`,
/// `from_pool`), at its first `migrate`.
pub(crate) async fn warn_once(store: &PostgresStore) {
    if !store
        .inner
        .replication_checked
        .swap(true, std::sync::atomic::Ordering::SeqCst)
    {
        warn_if_unsafe(store).await;
    }
}

pub(crate) async fn warn_if_unsafe(store: &PostgresStore) {
    match tokio::time::timeout(CHECK_BOUND, store.replication()).await {
        Ok(Ok(report)) => {
            for concern in report.concerns() {
                tracing::warn!(%concern, "PostgreSQL replication can lose leases in a failover");
            }
            tracing::debug!(%report, "PostgreSQL replication checked");
        }
        Ok(Err(error)) => tracing::debug!(%error, "PostgreSQL replication not checked"),
        Err(_) => tracing::debug!("PostgreSQL replication not checked: no answer in time"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(names: &str, commit: &str, sync: i64, asynchronous: i64) -> ReplicationReport {
        ReplicationReport {
            in_recovery: false,
            synchronous_commit: commit.to_owned(),
            synchronous_standby_names: names.to_owned(),
            sync_standbys: sync,
            async_standbys: asynchronous,
            unknown_standbys: 0,
        }
    }

    #[test]
    fn no_standby_no_concern() {
        assert!(report("", "on", 0, 0).concerns().is_empty());
    }

    #[test]
    fn asynchronous_standbys_are_a_concern() {
        let concerns = report("", "on", 0, 1).concerns();
        assert_eq!(concerns.len(), 1);
        assert!(concerns[0].contains("asynchronously"), "{concerns:?}");
    }

    #[test]
    fn a_synchronous_standby_the_commits_wait_for_is_safe() {
        assert!(report("standby", "on", 1, 0).concerns().is_empty());
        assert!(
            report("FIRST 1 (standby)", "remote_apply", 1, 0)
                .concerns()
                .is_empty()
        );
    }

    #[test]
    fn commits_that_do_not_wait_are_a_concern() {
        for commit in ["local", "off"] {
            let concerns = report("standby", commit, 1, 0).concerns();
            assert_eq!(concerns.len(), 1, "{commit}");
            assert!(concerns[0].contains("do not wait"), "{concerns:?}");
        }
        assert_eq!(report("standby", "remote_write", 1, 0).concerns().len(), 1);
    }

    #[test]
    fn an_extra_asynchronous_standby_beside_a_synchronous_one_is_a_concern() {
        let concerns = report("standby", "on", 1, 1).concerns();
        assert_eq!(concerns.len(), 1);
        assert!(concerns[0].contains("must promote a synchronous standby"));
    }

    #[test]
    fn a_standby_is_no_place_for_leases() {
        let mut r = report("", "on", 0, 0);
        r.in_recovery = true;
        assert!(r.concerns()[0].contains("in recovery"));
    }
}
