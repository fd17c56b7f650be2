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

/// What a command does with the database, so how it opens it: SQLite is
/// opened read-only for the commands that only look, and no command but
/// `migrate` creates a database file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Reads only (`ls`, `show`, `watch`, `check`).
    Read,
    /// Writes an existing database (`release`).
    Write,
    /// Creates what is missing (`migrate`).
    Create,
}

/// Opens the store a URL names, as [`dblease::connect_backend`] does, on
/// the lease table `table` (the backend's default when `None`), keeping
/// the backend store.
pub(crate) async fn open(
    url: &str,
    table: Option<&str>,
    access: Access,
) -> Result<Db, ConnectError> {
    // Only SQLite has files to open read-only.
    #[cfg(not(feature = "sqlite"))]
    let _ = access;
    let backend = match scheme(url) {
        #[cfg(feature = "sqlite")]
        Some(s) if dblease::sqlite::SCHEMES.contains(&s.as_str()) => {
            sqlite::open(url, table, access).await?
        }
        #[cfg(feature = "postgres")]
        Some(s) if dblease::postgres::SCHEMES.contains(&s.as_str()) => {
            postgres::open(url, table).await?
        }
        #[cfg(feature = "mysql")]
        Some(s) if dblease::mysql::SCHEMES.contains(&s.as_str()) => mysql::open(url, table).await?,
        // A scheme of a backend this build lacks, or of none: the facade's
        // error says which (the feature to turn on, or the schemes known).
        _ => {
            return Err(match dblease::connect_backend(url).await {
                Err(e) => e,
                Ok(other) => ConnectError::UnknownScheme {
                    scheme: other.name().to_owned(),
                },
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

/// The URL's scheme, in lower case.
fn scheme(url: &str) -> Option<String> {
    url.split_once(':')
        .map(|(scheme, _)| scheme.to_ascii_lowercase())
        .filter(|scheme| !scheme.is_empty())
}

/// The error of a backend that refused the URL or could not connect.
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
fn backend_error(
    backend: &'static str,
    error: impl std::error::Error + Send + Sync + 'static,
) -> ConnectError {
    ConnectError::Backend {
        backend,
        source: Box::new(error),
    }
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
            Backend::MySql(s) => s.table().to_owned(),
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
    use dblease::postgres::PostgresStore;
    use dblease::{BoxError, ConnectError};

    use super::{Backend, NEEDED, Privileges};

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

    pub(super) async fn open(url: &str, table: Option<&str>) -> Result<Backend, ConnectError> {
        let opened = match PostgresStore::builder(url) {
            Ok(builder) => {
                match table {
                    Some(table) => builder.with_table(table),
                    None => builder,
                }
                .connect()
                .await
            }
            Err(e) => Err(e),
        };
        opened
            .map(Backend::Postgres)
            .map_err(|e| super::backend_error("postgres", e))
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
    use dblease::mysql::MySqlStore;
    use dblease::mysql::mysql_async::prelude::Queryable;
    use dblease::{BoxError, ConnectError};

    use super::{Backend, NEEDED, Privileges};

    pub(super) async fn open(url: &str, table: Option<&str>) -> Result<Backend, ConnectError> {
        let opened = match MySqlStore::builder(url) {
            Ok(builder) => {
                match table {
                    Some(table) => builder.with_table(table),
                    None => builder,
                }
                .connect()
                .await
            }
            Err(e) => Err(e),
        };
        opened
            .map(Backend::MySql)
            .map_err(|e| super::backend_error("mysql", e))
    }

    pub(super) async fn version(store: &MySqlStore) -> Result<String, BoxError> {
        let mut conn = store.pool().get_conn().await?;
        let version: Option<String> = conn.query_first("SELECT VERSION()").await?;
        Ok(version.unwrap_or_default())
    }

    pub(super) async fn privileges(store: &MySqlStore) -> Result<Privileges, BoxError> {
        let unquoted = store.table().to_owned();
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
    use dblease::sqlite::rusqlite::{Connection, OpenFlags};
    use dblease::sqlite::{OpenMode, SqliteStore};
    use dblease::{BoxError, ConnectError};

    use super::{Access, Backend, Privileges};

    pub(super) async fn open(
        url: &str,
        table: Option<&str>,
        access: Access,
    ) -> Result<Backend, ConnectError> {
        let mode = match access {
            Access::Read => OpenMode::ReadOnly,
            Access::Write => OpenMode::Existing,
            Access::Create => OpenMode::Create,
        };
        let opened = match SqliteStore::builder(url) {
            Ok(builder) => {
                match table {
                    Some(table) => builder.with_table(table),
                    None => builder,
                }
                .with_open_mode(mode)
                .connect()
                .await
            }
            Err(e) => Err(e),
        };
        opened
            .map(Backend::Sqlite)
            .map_err(|e| super::backend_error("sqlite", e))
    }

    /// Whether the store's file opens for writing, through a connection of
    /// its own that creates nothing: SQLite has no server, so this tool
    /// tries what any process sharing the file does.
    fn writable(store: &SqliteStore) -> Result<bool, BoxError> {
        let Some(path) = store.path() else {
            return Err("an in-memory SQLite database is private to this process".into());
        };
        match Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        ) {
            Ok(conn) => Ok(!conn.is_readonly(dblease::sqlite::rusqlite::MAIN_DB)?),
            Err(e)
                if e.sqlite_error_code()
                    == Some(dblease::sqlite::rusqlite::ErrorCode::CannotOpen) =>
            {
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }

    pub(super) async fn privileges(store: &SqliteStore) -> Result<Privileges, BoxError> {
        let store = store.clone();
        tokio::task::spawn_blocking(move || {
            let writable = writable(&store)?;
            Ok(Privileges {
                how: "whether the database file opens for writing",
                missing: if writable {
                    Vec::new()
                } else {
                    vec!["INSERT", "UPDATE"]
                },
                conclusive: true,
            })
        })
        .await?
    }
}
