//! Opening a [`SqliteStore`]: its URL, its builder, and the connection's
//! set-up (WAL, busy timeout, `synchronous`, the file's permissions).

use std::path::{Path, PathBuf};
use std::time::Duration;

use lease_core::Timings;
use rusqlite::Connection;

use crate::error::SqliteError;
use crate::sql::{self, Statements};
use crate::store::{Inner, SqliteStore};
use lease_sql::DEFAULT_TABLE;

/// The URL schemes this backend opens: `sqlite://path`, `sqlite:path`,
/// `sqlite::memory:`.
pub const SCHEMES: &[&str] = &["sqlite"];

pub(crate) const MEMORY: &str = ":memory:";

/// Where a store's database is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Database {
    File(PathBuf),
    Memory,
}

/// Builds a [`SqliteStore`]: from a URL ([`SqliteStore::builder`]), a
/// path ([`from_path`](Self::from_path)) or memory
/// ([`in_memory`](Self::in_memory)); then the [`table`](Self::with_table),
/// the [`busy timeout`](Self::with_busy_timeout) and the
/// [`synchronous`](Self::with_synchronous) level; then
/// [`connect`](Self::connect) (async, the file opened off the runtime
/// thread) or [`build`](Self::build) (blocking).
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until connect() or build() is called"]
pub struct SqliteStoreBuilder {
    database: Database,
    table: String,
    busy_timeout: Duration,
    /// The timings the busy timeout came from (see `with_timings`).
    timings: Timings,
    synchronous: Synchronous,
    open: OpenMode,
}

/// How a store opens its database file. See
/// [`SqliteStoreBuilder::with_open_mode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OpenMode {
    /// Read and write, creating the file when it is missing (the default):
    /// what a service sharing the file needs.
    #[default]
    Create,
    /// Read and write a file that exists: a missing one is
    /// [`SqliteError::Missing`], and nothing is created.
    Existing,
    /// Read a file that exists, and never write it: every write is refused
    /// by SQLite, and a missing file is [`SqliteError::Missing`]. For tools
    /// that only look (the `lease` command's `ls`, `show`, `watch` and
    /// `check`). The file is left in the journal mode it has.
    ReadOnly,
}

/// How hard SQLite makes each commit durable on a file (`PRAGMA
/// synchronous`), in WAL mode. See [`SqliteStoreBuilder::with_synchronous`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Synchronous {
    /// `FULL` (the default): each commit is synced to disk before it
    /// returns, so a claim or renewal that returned survives an operating
    /// system crash or a power loss.
    #[default]
    Full,
    /// `NORMAL`: commits are synced at checkpoints only. A process crash
    /// loses nothing, but an operating system crash or a power loss may
    /// roll back the last commits: a claim that returned term `T` may be
    /// undone, and the next claim of the name after the reboot hands out
    /// term `T` again.
    Normal,
}

/// How many prepared statements the connection keeps: every statement of
/// the protocol, and a few lengths of the batch renewal and the search for
/// unfinished instants.
const STATEMENT_CACHE: usize = 64;

/// Asks for write-ahead logging; answers the journal mode in effect.
const JOURNAL_MODE_WAL: &str = "PRAGMA journal_mode = WAL";

/// Each commit synced (the default).
const SYNCHRONOUS_FULL: &str = "PRAGMA synchronous = FULL";

/// Commits synced at checkpoints only: see `Synchronous::Normal`.
const SYNCHRONOUS_NORMAL: &str = "PRAGMA synchronous = NORMAL";

impl SqliteStoreBuilder {
    fn new(database: Database) -> Self {
        SqliteStoreBuilder {
            database,
            table: DEFAULT_TABLE.to_owned(),
            busy_timeout: Timings::default().statement_timeout(),
            timings: Timings::default(),
            synchronous: Synchronous::Full,
            open: OpenMode::Create,
        }
    }

    /// How the database file is opened (default [`OpenMode::Create`]):
    /// [`OpenMode::ReadOnly`] for a tool that only looks, so that a
    /// mistyped path is an error naming it rather than a new, empty
    /// database. An in-memory database ignores it.
    ///
    /// ```
    /// use lease_sqlite::{OpenMode, SqliteError, SqliteStoreBuilder};
    ///
    /// let dir = tempfile::tempdir().expect("a temporary directory");
    /// let path = dir.path().join("typo.db");
    /// let err = SqliteStoreBuilder::from_path(&path)
    ///     .with_open_mode(OpenMode::ReadOnly)
    ///     .build()
    ///     .unwrap_err();
    /// assert!(matches!(err, SqliteError::Missing { .. }));
    /// assert!(!path.exists(), "nothing was created");
    /// ```
    pub fn with_open_mode(mut self, mode: OpenMode) -> Self {
        self.open = mode;
        self
    }

    /// A builder for the database file at `path`, created if missing (its
    /// directory must exist), readable and writable by its owner alone
    /// (mode 0600 on Unix): its rows hold the holder tokens. An existing
    /// file keeps its mode. For a path a URL cannot carry.
    pub fn from_path(path: impl Into<PathBuf>) -> Self {
        Self::new(Database::File(path.into()))
    }

    /// A builder for a private in-memory database, gone with the store: for
    /// tests and for a single process that coordinates only with itself.
    pub fn in_memory() -> Self {
        Self::new(Database::Memory)
    }

    /// The lease table (default `gst_leases`): ASCII letters, digits and
    /// underscores, not starting with a digit, at most 63 bytes. Checked by
    /// [`build`](Self::build) and [`connect`](Self::connect).
    pub fn with_table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// Sets the busy timeout from the timings of the
    /// [`Leases`](lease_core::Leases) that will use the store: a statement
    /// waits for another connection's write lock on the same file at most
    /// the coordinator's [statement timeout](Timings::statement_timeout)
    /// (half its local deadline), so a call never outlives the
    /// coordinator's wait for it. Without it, the default timings apply
    /// (5 s).
    ///
    /// A coordinator on the store takes these timings
    /// ([`Leases::new`](lease_core::Leases::new)), and one given shorter
    /// timings refuses to claim (see
    /// [`Leases::with_timings`](lease_core::Leases::with_timings)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use lease_core::{Leases, Timings};
    /// use lease_sqlite::SqliteStore;
    ///
    /// let timings = Timings::builder()
    ///     .lease(Duration::from_secs(6))
    ///     .renew(Duration::from_secs(1))
    ///     .deadline(Duration::from_secs(4))
    ///     .grace(Duration::from_secs(2))
    ///     .build()?;
    /// let store = SqliteStore::builder("sqlite::memory:")?
    ///     .with_timings(&timings) // busy timeout 2 s
    ///     .connect()
    ///     .await?;
    /// let leases = Leases::new(store); // takes the store's timings
    /// assert_eq!(leases.timings(), &timings);
    /// # leases.migrate().await?;
    /// # Ok(()) }
    /// ```
    pub fn with_timings(mut self, timings: &Timings) -> Self {
        self.busy_timeout = timings.statement_timeout();
        self.timings = *timings;
        self
    }

    /// How long a statement waits for the write lock another connection on
    /// the same file holds before it fails (default: the
    /// [timings](Self::with_timings)' statement timeout, 5 s by default).
    /// Keep it within the protocol's bound on its own statements, half the
    /// local deadline, or a call may outlive the coordinator's wait for it.
    pub fn with_busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// How durable each commit is on a file (default [`Synchronous::Full`]).
    ///
    /// What the lease needs: mutual exclusion among the processes sharing
    /// the file holds under [`Synchronous::Normal`] too. A commit can only be
    /// lost with the operating system (a crash, a power loss), which stops
    /// every process on the host, and SQLite files are shared only by
    /// processes on one host: no holder survives to act on a lost claim or
    /// renewal. What `NORMAL` gives up is the term as a fencing token
    /// outside the host: a term handed out just before such a crash can be
    /// handed out again after it. Choose `NORMAL` when no durable system
    /// outside the file checks terms; it saves a sync of the write-ahead
    /// log on every commit, most of a write's cost on most disks.
    pub fn with_synchronous(mut self, synchronous: Synchronous) -> Self {
        self.synchronous = synchronous;
        self
    }

    /// Opens the database on tokio's blocking pool, off the runtime
    /// thread: creates the file if missing, switches it to WAL and sets the
    /// busy timeout. It does not create the table: see
    /// [`migrate`](SqliteStore::migrate).
    ///
    /// # Errors
    ///
    /// As [`build`](Self::build); [`SqliteError::Cancelled`] when the
    /// runtime shuts down before the database is open.
    pub async fn connect(self) -> Result<SqliteStore, SqliteError> {
        match tokio::task::spawn_blocking(move || self.build()).await {
            Ok(opened) => opened,
            Err(join) => match join.try_into_panic() {
                Ok(panic) => std::panic::resume_unwind(panic),
                Err(_) => Err(SqliteError::Cancelled),
            },
        }
    }

    /// Opens the database on the calling thread, blocking while SQLite
    /// opens the file: the same as [`connect`](Self::connect) otherwise.
    /// For code outside a runtime (or at its start, before any task runs).
    ///
    /// # Errors
    ///
    /// [`SqliteError::InvalidTable`] for a table name that is not a plain
    /// identifier; [`SqliteError::Open`] when SQLite cannot open or
    /// configure the database; [`SqliteError::WalUnavailable`] when a file
    /// cannot be switched to WAL.
    pub fn build(self) -> Result<SqliteStore, SqliteError> {
        let table = sql::table(&self.table)?;
        let (conn, path) = match self.database {
            Database::File(path) => {
                use rusqlite::OpenFlags;

                let access = match self.open {
                    OpenMode::Create => {
                        create_private(&path);
                        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE
                    }
                    OpenMode::Existing => OpenFlags::SQLITE_OPEN_READ_WRITE,
                    OpenMode::ReadOnly => OpenFlags::SQLITE_OPEN_READ_ONLY,
                };
                if self.open != OpenMode::Create && !path.is_file() {
                    return Err(SqliteError::Missing { path });
                }
                let flags = access | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX;
                let conn = Connection::open_with_flags(&path, flags).map_err(|source| {
                    SqliteError::Open {
                        path: path.clone(),
                        source,
                    }
                })?;
                (conn, Some(path))
            }
            Database::Memory => {
                let conn = Connection::open_in_memory().map_err(|source| SqliteError::Open {
                    path: PathBuf::from(MEMORY),
                    source,
                })?;
                (conn, None)
            }
        };
        let failed = |source| SqliteError::Open {
            path: path.clone().unwrap_or_else(|| PathBuf::from(MEMORY)),
            source,
        };
        conn.busy_timeout(self.busy_timeout).map_err(failed)?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        let pragma = match self.synchronous {
            Synchronous::Full => SYNCHRONOUS_FULL,
            Synchronous::Normal => SYNCHRONOUS_NORMAL,
        };
        conn.execute_batch(pragma).map_err(failed)?;
        let read_only = self.open == OpenMode::ReadOnly;
        if let Some(path) = path.as_ref().filter(|_| !read_only) {
            let mode = switch_to_wal(&conn, self.busy_timeout).map_err(failed)?;
            if !mode.eq_ignore_ascii_case("wal") {
                return Err(SqliteError::WalUnavailable {
                    path: path.clone(),
                    mode,
                });
            }
        }
        let interrupt = conn.get_interrupt_handle();
        Ok(SqliteStore::from_inner(Inner {
            queue: crate::conn::spawn_connection_thread(conn).map_err(SqliteError::Thread)?,
            interrupt,
            sql: Statements::new(table),
            path,
            busy_timeout: self.busy_timeout,
            // The busy timeout is the timings' unless set by hand since.
            timings: (self.busy_timeout == self.timings.statement_timeout())
                .then_some(self.timings),
        }))
    }
}

impl SqliteStore {
    /// A builder for the database a URL names (see
    /// [`connect`](Self::connect)), to choose the table, the busy timeout
    /// or the `synchronous` level.
    ///
    /// # Errors
    ///
    /// [`SqliteError::InvalidUrl`] for a URL of another form.
    ///
    /// # Examples
    ///
    /// ```
    /// use lease_sqlite::{SqliteStore, Synchronous};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lease_sqlite::SqliteError> {
    /// let dir = tempfile::tempdir().expect("a temporary directory");
    /// let url = format!("sqlite://{}", dir.path().join("leases.db").display());
    /// let store = SqliteStore::builder(&url)?
    ///     .with_table("app_leases")
    ///     .with_busy_timeout(std::time::Duration::from_secs(2))
    ///     .with_synchronous(Synchronous::Normal)
    ///     .connect()
    ///     .await?;
    /// store.migrate().await?;
    /// assert_eq!(store.table(), "app_leases");
    /// # Ok(()) }
    /// ```
    pub fn builder(url: &str) -> Result<SqliteStoreBuilder, SqliteError> {
        Ok(SqliteStoreBuilder::new(parse_url(url)?))
    }

    /// Opens (creating it if missing) the database file at `path`, with the
    /// default table and busy timeout, blocking while SQLite opens it:
    /// `SqliteStoreBuilder::from_path(path).build()`.
    ///
    /// # Errors
    ///
    /// As [`SqliteStoreBuilder::build`].
    pub fn open(path: impl Into<PathBuf>) -> Result<Self, SqliteError> {
        SqliteStoreBuilder::from_path(path).build()
    }

    /// Opens a private in-memory database with the default table:
    /// `SqliteStoreBuilder::in_memory().build()`.
    ///
    /// # Errors
    ///
    /// As [`SqliteStoreBuilder::build`].
    pub fn open_in_memory() -> Result<Self, SqliteError> {
        SqliteStoreBuilder::in_memory().build()
    }

    /// Opens the database a URL names, off the runtime thread: `sqlite://path` (so
    /// `sqlite:///var/lib/app/leases.db` for an absolute path),
    /// `sqlite:path`, or `sqlite::memory:` for a private in-memory database.
    /// The table is `gst_leases`; use [`builder`](Self::builder) for another.
    ///
    /// # Errors
    ///
    /// [`SqliteError::InvalidUrl`] for any other URL (query parameters
    /// included); otherwise as [`SqliteStoreBuilder::connect`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lease_sqlite::SqliteError> {
    /// let store = lease_sqlite::SqliteStore::connect("sqlite::memory:").await?;
    /// assert_eq!(store.path(), None);
    /// # Ok(()) }
    /// ```
    pub async fn connect(url: &str) -> Result<Self, SqliteError> {
        Self::builder(url)?.connect().await
    }
}

/// Creates the database file, empty, readable and writable by its owner
/// alone (0600 on Unix) when it does not exist yet, so that SQLite opens it
/// rather than creating it with the process's umask (0644, readable by
/// everyone, as a rule): the table holds the holder tokens, each tenure's
/// credential. SQLite gives the `-wal` and `-shm` files it creates the
/// database file's permissions. An existing file is left as it is; a file
/// that cannot be created here is left to SQLite's own open, which reports
/// why.
fn create_private(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        // Fails with `AlreadyExists` when the file is there (or another
        // store created it a moment ago): nothing to do then.
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path);
    }
    #[cfg(not(unix))]
    let _ = path;
}

/// Switches the file to WAL and returns the journal mode in effect.
///
/// The switch needs the file to itself for a moment, and SQLite answers
/// `SQLITE_BUSY` at once, without calling the busy handler, when another
/// connection is opening or using it in the old mode. So it is tried again
/// every 10 ms for as long as the busy timeout.
fn switch_to_wal(conn: &Connection, busy_timeout: Duration) -> rusqlite::Result<String> {
    const PAUSE: Duration = Duration::from_millis(10);
    let mut attempts_left = busy_timeout.as_millis() / PAUSE.as_millis();
    loop {
        match conn.query_row(JOURNAL_MODE_WAL, [], |row| row.get(0)) {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::DatabaseBusy && attempts_left > 0 =>
            {
                attempts_left -= 1;
                std::thread::sleep(PAUSE);
            }
            answer => return answer,
        }
    }
}

/// Parses `sqlite://path`, `sqlite:path` and `sqlite::memory:`.
fn parse_url(url: &str) -> Result<Database, SqliteError> {
    let invalid = |reason| Err(SqliteError::InvalidUrl { reason });
    let Some(rest) = url
        .get(..7)
        .filter(|scheme| scheme.eq_ignore_ascii_case("sqlite:"))
        .and_then(|_| url.get(7..))
    else {
        return invalid(
            "the scheme must be sqlite: (sqlite://path, sqlite:path or sqlite::memory:)",
        );
    };
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    if rest.contains('?') || rest.contains('#') {
        return invalid(
            "query parameters are not supported: set options on the builder (SqliteStore::builder)",
        );
    }
    match rest {
        "" => invalid("the URL names no database file"),
        MEMORY => Ok(Database::Memory),
        path => Ok(Database::File(PathBuf::from(path))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_a_file_or_memory() {
        let file = |p: &str| Ok(Database::File(PathBuf::from(p)));
        let cases = [
            ("sqlite://leases.db", file("leases.db")),
            (
                "sqlite:///var/lib/app/leases.db",
                file("/var/lib/app/leases.db"),
            ),
            ("sqlite:leases.db", file("leases.db")),
            ("sqlite:data/leases.db", file("data/leases.db")),
            ("SQLite://leases.db", file("leases.db")),
            ("sqlite::memory:", Ok(Database::Memory)),
            ("sqlite://:memory:", Ok(Database::Memory)),
        ];
        for (url, expected) in cases {
            let parsed = parse_url(url).map_err(|e| e.to_string());
            assert_eq!(parsed, expected.map_err(|_: ()| String::new()), "{url}");
        }
    }

    #[test]
    fn other_urls_are_refused_with_a_reason() {
        for url in [
            "",
            "sqlite:",
            "sqlite://",
            "postgres://localhost/test",
            "sqlite3://leases.db",
            "leases.db",
            "sqlite://leases.db?mode=ro",
            "sqlite::memory:?cache=shared",
        ] {
            let err = parse_url(url).expect_err(url);
            assert!(
                matches!(err, SqliteError::InvalidUrl { .. }),
                "{url}: {err:?}"
            );
            assert!(err.to_string().starts_with("invalid SQLite URL: "), "{err}");
        }
    }

    #[test]
    fn an_invalid_table_is_refused_before_opening() {
        let err = SqliteStoreBuilder::in_memory()
            .with_table("leases; DROP TABLE x")
            .build()
            .expect_err("invalid table");
        assert!(matches!(err, SqliteError::InvalidTable { .. }), "{err:?}");
    }

    #[test]
    fn an_unopenable_file_names_its_path() {
        let err = SqliteStore::open("/nonexistent-dir/for/sure/leases.db")
            .expect_err("no such directory");
        assert!(matches!(err, SqliteError::Open { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            "cannot open the SQLite database at /nonexistent-dir/for/sure/leases.db"
        );
        assert!(std::error::Error::source(&err).is_some());
    }

    #[test]
    fn debug_shows_the_database_and_table() {
        let store = SqliteStore::open_in_memory().expect("in-memory store");
        let shown = format!("{store:?}");
        assert!(
            shown.contains(":memory:") && shown.contains("gst_leases"),
            "{shown}"
        );
    }

    /// A read-only store reads a file another store wrote (in WAL mode,
    /// with no writer open any more), refuses every write, and never
    /// creates a file; `Existing` writes but does not create either.
    #[tokio::test]
    async fn read_only_reads_refuses_writes_and_creates_nothing() {
        use lease_core::Leases;

        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("leases.db");
        {
            let writer = Leases::new(SqliteStore::open(&path).expect("opened"));
            writer.migrate().await.expect("migrated");
            let held = writer.claim("job").await.expect("claimed").expect("free");
            assert_eq!(held.term(), 1);
        }
        let reader = Leases::new(
            SqliteStoreBuilder::from_path(&path)
                .with_open_mode(OpenMode::ReadOnly)
                .connect()
                .await
                .expect("opened read-only"),
        );
        let info = reader.get("job").await.expect("read").expect("the row");
        assert_eq!(info.term, 1);
        let err = reader.claim("other").await.expect_err("a write");
        assert_eq!(
            err.db_kind(),
            Some(lease_core::DbErrorKind::Permission),
            "{err:?}"
        );

        for mode in [OpenMode::ReadOnly, OpenMode::Existing] {
            let missing = dir.path().join(format!("typo-{mode:?}.db"));
            let err = SqliteStoreBuilder::from_path(&missing)
                .with_open_mode(mode)
                .build()
                .expect_err("a missing file");
            assert!(matches!(err, SqliteError::Missing { .. }), "{err:?}");
            assert_eq!(
                err.to_string(),
                format!(
                    "no SQLite database at {}: the file does not exist",
                    missing.display()
                )
            );
            assert!(!missing.exists(), "{mode:?} created the file");
        }
        let existing = SqliteStoreBuilder::from_path(&path)
            .with_open_mode(OpenMode::Existing)
            .build()
            .expect("opened");
        let next = Leases::new(existing).claim("other").await.expect("a write");
        assert!(next.is_some());
    }
}
