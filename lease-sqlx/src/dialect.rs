//! What each sqlx database needs: how to run the guard, how to classify
//! its errors.
#![cfg_attr(
    not(any(feature = "postgres", feature = "mysql", feature = "sqlite")),
    allow(unused)
)]

use lease_core::{BoxFuture, DbErrorKind, Dialect, GuardParams};

/// A sqlx database whose transactions this crate fences: `sqlx::Postgres`,
/// `sqlx::MySql`, `sqlx::Sqlite` (each behind the feature of its name).
/// Sealed.
pub trait FenceDatabase: sqlx::Database + private::Sealed {
    /// The dialect of its guard statements.
    const DIALECT: Dialect;

    /// Runs `sql` with `params` (name, token, term) on `conn`: the term of
    /// the row it returned, `None` for no row.
    #[doc(hidden)]
    fn run_guard<'c>(
        conn: &'c mut Self::Connection,
        sql: &str,
        params: GuardParams<'_>,
    ) -> BoxFuture<'c, Result<Option<u64>, sqlx::Error>>;

    /// What kind of failure `error` is, by the driver's codes.
    #[doc(hidden)]
    fn classify(error: &sqlx::Error) -> DbErrorKind;

    /// Whether `error` is the server's answer refusing the statement, rather
    /// than no answer (a connection failure) or the server dropping the
    /// session: after `COMMIT` was sent, only a refusal says nothing was
    /// committed.
    #[doc(hidden)]
    fn refused(error: &sqlx::Error) -> bool {
        matches!(error, sqlx::Error::Database(_))
            && Self::classify(error) != DbErrorKind::Connection
    }
}

mod private {
    pub trait Sealed {}
    #[cfg(feature = "postgres")]
    impl Sealed for sqlx::Postgres {}
    #[cfg(feature = "mysql")]
    impl Sealed for sqlx::MySql {}
    #[cfg(feature = "sqlite")]
    impl Sealed for sqlx::Sqlite {}
}

/// The classification of what is not a server's error code.
fn classify_common(error: &sqlx::Error) -> Option<DbErrorKind> {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::BeginFailed => Some(DbErrorKind::Connection),
        sqlx::Error::Database(_) => None,
        _ => Some(DbErrorKind::Other),
    }
}

/// `run_guard` for `$db`, whose lease table's term column decodes as
/// `$term`.
macro_rules! run_guard {
    ($db:ty, $term:ty) => {
        fn run_guard<'c>(
            conn: &'c mut Self::Connection,
            sql: &str,
            params: GuardParams<'_>,
        ) -> BoxFuture<'c, Result<Option<u64>, sqlx::Error>> {
            let sql = sqlx::AssertSqlSafe(sql.to_owned());
            let (name, token, term) = (
                params.name.to_owned(),
                params.token.expose().to_owned(),
                params.term,
            );
            Box::pin(async move {
                let found: Option<$term> = sqlx::query_scalar::<$db, $term>(sql)
                    .bind(name)
                    .bind(token)
                    .bind(term)
                    .fetch_optional(&mut *conn)
                    .await?;
                found
                    .map(|term| {
                        u64::try_from(term).map_err(|_| {
                            sqlx::Error::Decode(
                                format!("the lease table holds a negative term ({term})").into(),
                            )
                        })
                    })
                    .transpose()
            })
        }
    };
}

#[cfg(feature = "postgres")]
impl FenceDatabase for sqlx::Postgres {
    const DIALECT: Dialect = Dialect::Postgres;

    run_guard!(sqlx::Postgres, i64);

    fn classify(error: &sqlx::Error) -> DbErrorKind {
        if let Some(kind) = classify_common(error) {
            return kind;
        }
        let code = error
            .as_database_error()
            .and_then(|e| e.code())
            .map(|c| c.into_owned())
            .unwrap_or_default();
        postgres_kind(&code)
    }
}

/// A PostgreSQL SQLSTATE's kind, as `lease-postgres` classifies it.
#[cfg(feature = "postgres")]
pub(crate) fn postgres_kind(code: &str) -> DbErrorKind {
    match code {
        // serialization failure, deadlock, lock not available, query
        // canceled (statement timeout), idle-in-transaction timeout
        "40001" | "40P01" | "55P03" | "57014" | "25P03" => DbErrorKind::Conflict,
        "42P01" | "3F000" => DbErrorKind::MissingTable,
        "42501" => DbErrorKind::Permission,
        c if c.starts_with("28") => DbErrorKind::Permission,
        c if c.starts_with("08") || c.starts_with("57P") || c.starts_with("53") => {
            DbErrorKind::Connection
        }
        "" => DbErrorKind::Unclassified,
        _ => DbErrorKind::Other,
    }
}

#[cfg(feature = "mysql")]
impl FenceDatabase for sqlx::MySql {
    const DIALECT: Dialect = Dialect::MySql;

    run_guard!(sqlx::MySql, u64);

    fn classify(error: &sqlx::Error) -> DbErrorKind {
        if let Some(kind) = classify_common(error) {
            return kind;
        }
        let number = error
            .as_database_error()
            .and_then(|e| e.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>())
            .map(sqlx::mysql::MySqlDatabaseError::number);
        match number {
            Some(n) => lease_sql::mysql::server_error_kind(n),
            None => DbErrorKind::Unclassified,
        }
    }
}

#[cfg(feature = "sqlite")]
impl FenceDatabase for sqlx::Sqlite {
    const DIALECT: Dialect = Dialect::Sqlite;

    run_guard!(sqlx::Sqlite, i64);

    fn classify(error: &sqlx::Error) -> DbErrorKind {
        if let Some(kind) = classify_common(error) {
            return kind;
        }
        let Some(db) = error.as_database_error() else {
            return DbErrorKind::Unclassified;
        };
        let code: i64 = db.code().and_then(|c| c.parse().ok()).unwrap_or(-1);
        sqlite_kind(code, db.message())
    }
}

/// A SQLite extended result code's kind, as `lease-sqlite` classifies it.
#[cfg(feature = "sqlite")]
pub(crate) fn sqlite_kind(code: i64, message: &str) -> DbErrorKind {
    match code & 0xff {
        // SQLITE_BUSY, SQLITE_LOCKED, SQLITE_INTERRUPT
        5 | 6 | 9 => DbErrorKind::Conflict,
        // SQLITE_PERM, SQLITE_READONLY, SQLITE_AUTH
        3 | 8 | 23 => DbErrorKind::Permission,
        // SQLITE_CANTOPEN, SQLITE_IOERR, SQLITE_FULL
        14 | 10 | 13 => DbErrorKind::Connection,
        1 if message.starts_with("no such table") => DbErrorKind::MissingTable,
        _ => DbErrorKind::Other,
    }
}
