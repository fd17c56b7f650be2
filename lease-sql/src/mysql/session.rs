//! What a MySQL store gives its sessions and reads of the server: the
//! session setup of its pool, and the kinds of the server's error numbers.

use std::time::Duration;

use lease_core::{DbErrorKind, Timings};

/// What kind of failure a MySQL or MariaDB server error number is: the one
/// table of the codes, for every MySQL store's
/// [`classify`](lease_core::LeaseStore::classify).
#[must_use]
pub fn server_error_kind(code: u16) -> DbErrorKind {
    match code {
        // lock wait timeout, deadlock, statement time exceeded (MariaDB,
        // MySQL), query interrupted
        1205 | 1213 | 1969 | 3024 | 1317 => DbErrorKind::Conflict,
        // no such table
        1146 => DbErrorKind::MissingTable,
        // table, column, database access denied; access denied for user;
        // a privilege (SUPER, ...) needed
        1044 | 1045 | 1142 | 1143 | 1227 => DbErrorKind::Permission,
        // too many connections, shutdown, aborted or broken connection,
        // connection killed (MariaDB), client-side connection errors
        1040 | 1053 | 1152 | 1158..=1161 | 1927 | 2002 | 2003 | 2006 | 2013 => {
            DbErrorKind::Connection
        }
        _ => DbErrorKind::Other,
    }
}

/// The session's SQL mode: strict, so nothing is silently truncated or
/// coerced, and no `ANSI_QUOTES` or `PIPES_AS_CONCAT` a server default might
/// carry.
pub const SQL_MODE: &str = "STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION";

/// The session setup statement run on every connection of a store's pool:
/// strict SQL mode, the InnoDB lock-wait bound (`lock_wait_secs`),
/// autocommit, the real clock (no `SET timestamp` left over), and the
/// server-side statement bound (`statement_ms`) where the server has one.
/// `lease-mysql` runs it again after each guarded transaction, whose work
/// may have changed any of them.
///
/// The statement bound is written in executable comments: MariaDB runs
/// `/*M!100600 ... */` (`max_statement_time`, seconds, every statement) and
/// ignores `/*!80000 ... */`; MySQL ignores the first and runs the second
/// (`max_execution_time`, milliseconds, `SELECT` only). The numbers are the
/// only formatted parts.
///
/// ```
/// let setup = lease_sql::mysql::session_setup(3, Some(4_500));
/// assert!(setup.contains("innodb_lock_wait_timeout = 3"), "{setup}");
/// assert!(setup.contains("max_statement_time = 4.500"), "{setup}");
/// ```
#[must_use]
pub fn session_setup(lock_wait_secs: u64, statement_ms: Option<u64>) -> String {
    let mut sql = format!(
        "SET SESSION sql_mode = '{SQL_MODE}', innodb_lock_wait_timeout = {lock_wait_secs}, \
         autocommit = 1, timestamp = DEFAULT"
    );
    if let Some(ms) = statement_ms {
        let secs = ms / 1000;
        let frac = ms % 1000;
        sql.push_str(&format!(
            " /*M!100600 , max_statement_time = {secs}.{frac:03} */ /*!80000 , max_execution_time = {ms} */"
        ));
    }
    sql
}

/// The session setup for these bounds: [`session_setup`] with the
/// lock-wait bound in whole seconds (at least 1), the statement bound in
/// milliseconds and, on MariaDB, the idle-in-transaction bound
/// (`idle_transaction_timeout`, whole seconds rounded up: never shorter
/// than asked; MySQL ignores the comment).
///
/// # Errors
///
/// Which bound is out of range: a lock-wait bound under 1 s.
pub fn session_setup_for(
    lock_wait: Duration,
    statement: Option<Duration>,
    idle_transaction: Option<Duration>,
) -> Result<String, String> {
    let lock_wait_secs = lock_wait.as_secs();
    if lock_wait_secs < 1 {
        return Err(format!(
            "the lock-wait timeout ({lock_wait:?}) must be at least 1 s: InnoDB counts it in whole seconds"
        ));
    }
    Ok(session_setup_secs(
        lock_wait_secs,
        statement,
        idle_transaction,
    ))
}

/// The session bounds `timings` derive, in the order [`session_setup_for`]
/// takes them: lock wait, statements, idle in a transaction (MariaDB).
#[must_use]
pub fn timings_bounds(timings: &Timings) -> (Duration, Option<Duration>, Option<Duration>) {
    (
        timings.lock_wait_timeout(),
        Some(timings.statement_timeout()),
        Some(timings.deadline()),
    )
}

/// The session setup for the bounds derived from `timings`
/// ([`timings_bounds`]), the lock-wait bound raised to 1 s if under it.
#[must_use]
pub fn timings_setup(timings: &Timings) -> String {
    let (lock_wait, statement, idle) = timings_bounds(timings);
    session_setup_secs(lock_wait.as_secs(), statement, idle)
}

/// [`session_setup_for`] with the lock-wait bound already in whole seconds
/// (at least 1: a lower value is raised to it).
#[must_use]
pub fn session_setup_secs(
    lock_wait_secs: u64,
    statement: Option<Duration>,
    idle_transaction: Option<Duration>,
) -> String {
    let statement_ms = statement.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1));
    let mut setup = session_setup(lock_wait_secs.max(1), statement_ms);
    if let Some(idle) = idle_transaction {
        let secs = idle.as_secs() + u64::from(idle.subsec_nanos() > 0);
        setup.push_str(&format!(
            " /*M!100300 , idle_transaction_timeout = {} */",
            secs.max(1)
        ));
    }
    setup
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_setup_formats_numbers_only() {
        assert_eq!(
            session_setup(3, Some(4_500)),
            format!(
                "SET SESSION sql_mode = '{SQL_MODE}', innodb_lock_wait_timeout = 3, \
                 autocommit = 1, timestamp = DEFAULT \
                 /*M!100600 , max_statement_time = 4.500 */ /*!80000 , max_execution_time = 4500 */"
            )
        );
        assert!(!session_setup(2, None).contains("max_"));
        assert!(session_setup_for(Duration::from_millis(500), None, None).is_err());
        let setup = session_setup_for(
            Duration::from_secs(2),
            Some(Duration::from_millis(1500)),
            Some(Duration::from_millis(2500)),
        )
        .unwrap();
        assert!(setup.contains("innodb_lock_wait_timeout = 2"), "{setup}");
        assert!(setup.contains("max_statement_time = 1.500"), "{setup}");
        assert!(setup.contains("idle_transaction_timeout = 3"), "{setup}");
    }

    #[test]
    fn server_codes_classify_by_one_table() {
        for (code, kind) in [
            (1205, DbErrorKind::Conflict),
            (1213, DbErrorKind::Conflict),
            (1317, DbErrorKind::Conflict),
            (1146, DbErrorKind::MissingTable),
            (1049, DbErrorKind::Other),
            (1142, DbErrorKind::Permission),
            (1927, DbErrorKind::Connection),
            (1159, DbErrorKind::Connection),
            (1062, DbErrorKind::Other),
        ] {
            assert_eq!(server_error_kind(code), kind, "error {code}");
        }
    }
}
