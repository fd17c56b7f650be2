//! Shared by the facade's integration tests: a lease table of a test's own,
//! so that no test writes into a server's default table (`gst_leases`),
//! and its clean-up.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use dblease::{Backend, Leases, Timings};

/// A lease table of one test's own, dropped when the value goes (a failed
/// test included; see [`lease_testkit::Cleanup`]).
pub struct OwnTable {
    /// The table's name: `dbl_<unix secs>_<pid>_<n>_<hex>`.
    pub name: String,
    _cleanup: lease_testkit::Cleanup,
}

/// A new table name on the database `url` names, dropped with the value.
pub fn own_table(url: &str) -> OwnTable {
    let name = lease_testkit::unique("dbl_");
    let cleanup = {
        let (url, name) = (url.to_owned(), name.clone());
        lease_testkit::Cleanup::new(move || async move { drop_table(&url, &name).await })
    };
    OwnTable {
        name,
        _cleanup: cleanup,
    }
}

/// The backend store on `url`, on the lease table `table`.
pub async fn backend_on(url: &str, table: &str, timings: &Timings) -> Backend {
    dblease::connect_backend_on(url, table, timings)
        .await
        .unwrap_or_else(|e| panic!("connect to {table}: {e}"))
}

/// A coordinator on `url`, on the lease table `table`, with `timings`.
pub async fn leases_on(url: &str, table: &str, timings: Timings) -> Leases {
    backend_on(url, table, &timings)
        .await
        .leases()
        .with_timings(timings)
}

/// Drops the lease table `table` of the database `url` names, if it is
/// there. An in-memory SQLite database goes with its store.
pub async fn drop_table(url: &str, table: &str) {
    let Ok(backend) = dblease::connect_backend(url).await else {
        return;
    };
    match backend {
        #[cfg(feature = "postgres")]
        Backend::Postgres(store) => {
            let client = store.pool().get().await.unwrap();
            client
                .batch_execute(&format!("DROP TABLE IF EXISTS \"{table}\""))
                .await
                .unwrap();
        }
        #[cfg(feature = "mysql")]
        Backend::MySql(store) => {
            use dblease::mysql::mysql_async::prelude::Queryable;
            let mut conn = store.pool().get_conn().await.unwrap();
            conn.query_drop(format!("DROP TABLE IF EXISTS `{table}`"))
                .await
                .unwrap();
        }
        #[cfg(feature = "sqlite")]
        Backend::Sqlite(store) => {
            if let Some(path) = store.path() {
                let conn = dblease::sqlite::rusqlite::Connection::open(path).unwrap();
                conn.execute_batch(&format!("DROP TABLE IF EXISTS \"{table}\""))
                    .unwrap();
            }
        }
        #[allow(unreachable_patterns)]
        _ => {}
    }
}
