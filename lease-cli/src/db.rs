//! The database behind a URL: the coordinator, plus the backend's own store
//! for the few statements the protocol has no method for (the server
//! version, the privileges).

use dblease::{BoxError, ConnectError, Leases};

/// A coordinator and the backend store it runs on.
pub(crate) struct Db {
    pub(crate) leases: Leases,
    pub(crate) backend: Backend,
}

/// The backend store, kept beside the coordinator (which only holds it as
/// `dyn LeaseStore`) for the statements of this tool alone.
#[derive(Clone)]
pub(crate) enum Backend {
    #[cfg(feature = "sqlite")]
    Sqlite(dblease::sqlite::SqliteStore),
    #[cfg(feature = "postgres")]
    Postgres(dblease::postgres::PostgresStore),
    #[cfg(feature = "mysql")]
    MySql(dblease::mysql::MySqlStore),
}

/// What could be told of the privileges on the lease table, without
/// writing.
pub(crate) struct Privileges {
    /// What was checked, for the operator.
    pub(crate) how: &'static str,
    /// The privileges found missing, by name.
    pub(crate) missing: Vec<&'static str>,
    /// Whether a missing privilege is certain (`false`: it may come through
    /// a route the check does not follow).
    pub(crate) conclusive: bool,
}

/// Opens the store a URL names, as [`dblease::connect`] does, keeping the
/// backend store.
pub(crate) async fn open(url: &str) -> Result<Db, ConnectError> {
    let backend = match dblease::connect_backend(url).await? {
        #[cfg(feature = "sqlite")]
        dblease::Backend::Sqlite(s) => Backend::Sqlite(s),
        #[cfg(feature = "postgres")]
        dblease::Backend::Postgres(s) => Backend::Postgres(s),
        #[cfg(feature = "mysql")]
        dblease::Backend::MySql(s) => Backend::MySql(s),
        // The facade and this tool are built with the same features.
        #[allow(unreachable_patterns)]
        other => {
            return Err(ConnectError::UnknownScheme {
                scheme: other.name().to_owned(),
            });
        }
    };
    let leases = match &backend {
        #[cfg(feature = "sqlite")]
        Backend::Sqlite(s) => Leases::new(s.clone()),
        #[cfg(feature = "postgres")]
        Backend::Postgres(s) => Leases::new(s.clone()),
        #[cfg(feature = "mysql")]
        Backend::MySql(s) => Leases::new(s.clone()),
    };
    Ok(Db { leases, backend })
}

impl Backend {
    /// `sqlite`, `postgres` or `mysql`.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(_) => "sqlite",
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => "postgres",
            #[cfg(feature = "mysql")]
            Backend::MySql(_) => "mysql",
        }
    }

    /// The lease table, as the backend names it.
    pub(crate) fn table(&self) -> String {
        match self {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(s) => s.table().to_owned(),
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => s.table().to_owned(),
            #[cfg(feature = "mysql")]
            Backend::MySql(s) => s.table().replace('`', ""),
        }
    }

    /// The server's version, as it reports it.
    pub(crate) async fn version(&self) -> Result<String, BoxError> {
        match self {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(_) => Ok(format!("SQLite {}", dblease::sqlite::rusqlite::version())),
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => postgres::version(s).await,
            #[cfg(feature = "mysql")]
            Backend::MySql(s) => mysql::version(s).await,
        }
    }

    /// What can be told, without writing, of the privileges the protocol
    /// needs on the table: SELECT, INSERT and UPDATE.
    pub(crate) async fn privileges(&self) -> Result<Privileges, BoxError> {
        match self {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(s) => sqlite::privileges(s).await,
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => postgres::privileges(s).await,
            #[cfg(feature = "mysql")]
            Backend::MySql(s) => mysql::privileges(s).await,
        }
    }
}

/// The privileges a coordinator needs on the table.
#[cfg(any(feature = "postgres", feature = "mysql"))]
const NEEDED: [&str; 3] = ["SELECT", "INSERT", "UPDATE"];

#[cfg(feature = "postgres")]
mod postgres {
    use dblease::BoxError;
    use dblease::postgres::PostgresStore;

    use super::{NEEDED, Privileges};

    /// The table name quoted as lease-postgres quotes it: `schema.table` or
    /// `table`, each part in double quotes. The store validated it (ASCII
    /// letters, digits and underscores only).
    fn quoted(store: &PostgresStore) -> String {
        store
            .table()
            .split('.')
            .map(|part| format!("\"{part}\""))
            .collect::<Vec<_>>()
            .join(".")
    }

    pub(super) async fn version(store: &PostgresStore) -> Result<String, BoxError> {
        let client = store.pool().get().await?;
        let row = client.query_one("SHOW server_version", &[]).await?;
        Ok(format!("PostgreSQL {}", row.try_get::<_, String>(0)?))
    }

    pub(super) async fn privileges(store: &PostgresStore) -> Result<Privileges, BoxError> {
        let client = store.pool().get().await?;
        let row = client
            .query_one(
                "SELECT has_table_privilege($1::text, 'SELECT'), \
                        has_table_privilege($1::text, 'INSERT'), \
                        has_table_privilege($1::text, 'UPDATE')",
                &[&quoted(store)],
            )
            .await?;
        let mut missing = Vec::new();
        for (i, privilege) in NEEDED.into_iter().enumerate() {
            if !row.try_get::<_, bool>(i)? {
                missing.push(privilege);
            }
        }
        Ok(Privileges {
            how: "has_table_privilege() for the current role, roles it inherits included",
            missing,
            conclusive: true,
        })
    }
}

#[cfg(feature = "mysql")]
mod mysql {
    use dblease::BoxError;
    use dblease::mysql::MySqlStore;
    use dblease::mysql::mysql_async::prelude::Queryable;

    use super::{NEEDED, Privileges};

    pub(super) async fn version(store: &MySqlStore) -> Result<String, BoxError> {
        let mut conn = store.pool().get_conn().await?;
        let version: Option<String> = conn.query_first("SELECT VERSION()").await?;
        Ok(version.unwrap_or_default())
    }

    pub(super) async fn privileges(store: &MySqlStore) -> Result<Privileges, BoxError> {
        let unquoted = store.table().replace('`', "");
        let (schema, table) = match unquoted.split_once('.') {
            Some((schema, table)) => (Some(schema.to_owned()), table.to_owned()),
            None => (None, unquoted),
        };
        // The grantee as information_schema writes it: 'user'@'host'.
        let sql = "SELECT DISTINCT PRIVILEGE_TYPE FROM ( \
              SELECT GRANTEE, PRIVILEGE_TYPE FROM information_schema.USER_PRIVILEGES \
              UNION ALL SELECT GRANTEE, PRIVILEGE_TYPE FROM information_schema.SCHEMA_PRIVILEGES \
                 WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) \
              UNION ALL SELECT GRANTEE, PRIVILEGE_TYPE FROM information_schema.TABLE_PRIVILEGES \
                 WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? \
            ) AS p \
            WHERE GRANTEE = CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), '@', 1), '''@''', \
                                   SUBSTRING_INDEX(CURRENT_USER(), '@', -1), '''')";
        let mut conn = store.pool().get_conn().await?;
        let granted: Vec<String> = conn.exec(sql, (schema.clone(), schema, table)).await?;
        let has = |p: &str| {
            granted
                .iter()
                .any(|g| g.eq_ignore_ascii_case(p) || g.eq_ignore_ascii_case("ALL PRIVILEGES"))
        };
        Ok(Privileges {
            how: "the grants of CURRENT_USER() on the server, the database and the table \
                  (information_schema; roles are not followed)",
            missing: NEEDED.into_iter().filter(|p| !has(p)).collect(),
            conclusive: false,
        })
    }
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use dblease::BoxError;
    use dblease::sqlite::SqliteStore;
    use dblease::sqlite::rusqlite::{Connection, MAIN_DB};

    use super::Privileges;

    /// Another connection to the store's file: SQLite has no server, so
    /// this tool writes the file as any process sharing it does.
    fn connection(store: &SqliteStore) -> Result<Connection, BoxError> {
        let Some(path) = store.path() else {
            return Err("an in-memory SQLite database is private to this process".into());
        };
        let conn = Connection::open(path)?;
        conn.busy_timeout(dblease::Timings::default().statement_timeout())?;
        Ok(conn)
    }

    pub(super) async fn privileges(store: &SqliteStore) -> Result<Privileges, BoxError> {
        let store = store.clone();
        tokio::task::spawn_blocking(move || {
            let conn = connection(&store)?;
            let read_only = conn.is_readonly(MAIN_DB)?;
            Ok(Privileges {
                how: "whether the database file opens for writing",
                missing: if read_only {
                    vec!["INSERT", "UPDATE"]
                } else {
                    Vec::new()
                },
                conclusive: true,
            })
        })
        .await?
    }
}
