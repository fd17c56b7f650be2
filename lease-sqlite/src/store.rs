//! [`SqliteStore`]: the protocol's statements on one SQLite connection.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use lease_core::{
    BoxError, Finished, GuardError, GuardStatement, LeaseContext, LeaseInfo, LeaseStore, SlotClaim,
    SupersededSlot, UnfinishedRow,
};
use rusqlite::{
    Connection, InterruptHandle, OptionalExtension, Transaction, TransactionBehavior, params,
    params_from_iter,
};

use crate::error::SqliteError;
use crate::schema::{self, Found};
use crate::sql::{self, DEFAULT_TABLE, Statements, Table};

/// How long a statement waits for another connection's write lock on the
/// same file before it fails, unless the builder says otherwise.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The most names one `find_unfinished` statement binds. SQLite refuses
/// statements with more than 32766 parameters; a longer list is answered by
/// one statement per this many names, all on the same call.
const MAX_NAMES_PER_STATEMENT: usize = 32_000;

/// The most leases one batch renewal statement binds (two parameters each).
const MAX_RENEWALS_PER_STATEMENT: usize = 8_192;

/// A [`LeaseStore`] on an SQLite database: a file, or memory.
///
/// The store owns **one** connection, used off the async runtime (every call
/// runs on tokio's blocking pool and takes the connection in turn). Several
/// stores, in one process or in many, can share a file: each statement that
/// writes takes SQLite's write lock, waiting up to the
/// [busy timeout](SqliteStoreBuilder::busy_timeout) for it, and the instant
/// claim reads and writes inside one `BEGIN IMMEDIATE` transaction.
///
/// Files are opened in WAL journal mode, so readers never wait for the
/// writer. Expiry is judged by SQLite's clock, read in each statement:
/// `unixepoch('subsec')`, in UTC milliseconds.
///
/// Cloning is cheap: clones share the connection.
///
/// # Examples
///
/// ```
/// use lease_sqlite::SqliteStore;
///
/// # fn main() -> Result<(), lease_sqlite::SqliteError> {
/// let dir = tempfile::tempdir().expect("a temporary directory");
/// let store = SqliteStore::builder()
///     .path(dir.path().join("leases.db"))
///     .table("app_leases")
///     .busy_timeout(std::time::Duration::from_secs(2))
///     .open()?;
/// assert_eq!(store.table(), "app_leases");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    conn: Mutex<Connection>,
    /// Interrupts the statement running on `conn`: only ever used while a
    /// guarded transaction holds it (see [`TxControl`]).
    interrupt: InterruptHandle,
    sql: Statements,
    /// `None` for an in-memory database.
    path: Option<PathBuf>,
    busy_timeout: Duration,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let database = match &self.inner.path {
            Some(path) => path.display().to_string(),
            None => MEMORY.to_owned(),
        };
        f.debug_struct("SqliteStore")
            .field("database", &database)
            .field("table", &self.inner.sql.table.name())
            .field("busy_timeout", &self.inner.busy_timeout)
            .finish()
    }
}

const MEMORY: &str = ":memory:";

/// Where a store's database is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Database {
    File(PathBuf),
    Memory,
}

/// Builds a [`SqliteStore`]: the database (a [`path`](Self::path) or
/// [`in_memory`](Self::in_memory)), the [`table`](Self::table) and the
/// [`busy_timeout`](Self::busy_timeout).
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until open() is called"]
pub struct SqliteStoreBuilder {
    database: Option<Database>,
    table: String,
    busy_timeout: Duration,
    synchronous: Synchronous,
}

/// How hard SQLite makes each commit durable on a file (`PRAGMA
/// synchronous`), in WAL mode. See [`SqliteStoreBuilder::synchronous`].
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

impl Default for SqliteStoreBuilder {
    fn default() -> Self {
        SqliteStoreBuilder {
            database: None,
            table: DEFAULT_TABLE.to_owned(),
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
            synchronous: Synchronous::Full,
        }
    }
}

impl SqliteStoreBuilder {
    /// The database file, created if missing (its directory must exist),
    /// readable and writable by its owner alone (mode 0600 on Unix): its
    /// rows hold the holder tokens. An existing file keeps its mode.
    pub fn path(mut self, path: impl Into<PathBuf>) -> Self {
        self.database = Some(Database::File(path.into()));
        self
    }

    /// A private in-memory database, gone with the store: for tests and for
    /// a single process that coordinates only with itself.
    pub fn in_memory(mut self) -> Self {
        self.database = Some(Database::Memory);
        self
    }

    /// The lease table (default `gst_leases`): ASCII letters, digits and
    /// underscores, not starting with a digit, at most 63 bytes. Checked by
    /// [`open`](Self::open).
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// How long a statement waits for the write lock another connection on
    /// the same file holds before it fails (default 5 seconds). Keep it
    /// within the protocol's bound on its own statements, half the local
    /// deadline, or a call may outlive the coordinator's wait for it.
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
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
    pub fn synchronous(mut self, synchronous: Synchronous) -> Self {
        self.synchronous = synchronous;
        self
    }

    /// Opens the database: creates the file if missing, switches it to WAL
    /// and sets the busy timeout. It does not create the table: see
    /// [`LeaseStore::migrate`] (or [`Leases::migrate`](lease_core::Leases::migrate)).
    ///
    /// This blocks while SQLite opens the file; from async code, call it
    /// through [`tokio::task::spawn_blocking`] if that matters.
    ///
    /// # Errors
    ///
    /// [`SqliteError::MissingDatabase`] when neither a path nor in-memory was
    /// given; [`SqliteError::InvalidTable`] for a table name that is not a
    /// plain identifier; [`SqliteError::Open`] when SQLite cannot open or
    /// configure the database; [`SqliteError::WalUnavailable`] when a file
    /// cannot be switched to WAL.
    pub fn open(self) -> Result<SqliteStore, SqliteError> {
        let table = Table::new(&self.table)?;
        let database = self.database.ok_or(SqliteError::MissingDatabase)?;
        let (conn, path) = match database {
            Database::File(path) => {
                create_private(&path);
                let conn = Connection::open(&path).map_err(|source| SqliteError::Open {
                    path: path.clone(),
                    source,
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
            Synchronous::Full => sql::SYNCHRONOUS_FULL,
            Synchronous::Normal => sql::SYNCHRONOUS_NORMAL,
        };
        conn.execute_batch(pragma).map_err(failed)?;
        if let Some(path) = &path {
            let mode = switch_to_wal(&conn, self.busy_timeout).map_err(failed)?;
            if !mode.eq_ignore_ascii_case("wal") {
                return Err(SqliteError::WalUnavailable {
                    path: path.clone(),
                    mode,
                });
            }
        }
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                interrupt: conn.get_interrupt_handle(),
                conn: Mutex::new(conn),
                sql: Statements::new(table),
                path,
                busy_timeout: self.busy_timeout,
            }),
        })
    }
}

impl SqliteStore {
    /// A builder, to choose the table or the busy timeout.
    pub fn builder() -> SqliteStoreBuilder {
        SqliteStoreBuilder::default()
    }

    /// Opens (creating it if missing) the database file at `path`, with the
    /// default table `gst_leases` and busy timeout.
    ///
    /// # Errors
    ///
    /// As [`SqliteStoreBuilder::open`].
    pub fn open(path: impl Into<PathBuf>) -> Result<Self, SqliteError> {
        Self::builder().path(path).open()
    }

    /// Opens a private in-memory database with the default table.
    ///
    /// # Errors
    ///
    /// As [`SqliteStoreBuilder::open`].
    pub fn open_in_memory() -> Result<Self, SqliteError> {
        Self::builder().in_memory().open()
    }

    /// Opens the database a URL names: `sqlite://path` (so
    /// `sqlite:///var/lib/app/leases.db` for an absolute path),
    /// `sqlite:path`, or `sqlite::memory:` for a private in-memory database.
    /// The table is `gst_leases`; use [`builder`](Self::builder) for another.
    ///
    /// # Errors
    ///
    /// [`SqliteError::InvalidUrl`] for any other URL (query parameters
    /// included); otherwise as [`SqliteStoreBuilder::open`].
    ///
    /// # Examples
    ///
    /// ```
    /// let store = lease_sqlite::SqliteStore::connect("sqlite::memory:")?;
    /// assert_eq!(store.path(), None);
    /// # Ok::<(), lease_sqlite::SqliteError>(())
    /// ```
    pub fn connect(url: &str) -> Result<Self, SqliteError> {
        let builder = Self::builder();
        match parse_url(url)? {
            Database::File(path) => builder.path(path),
            Database::Memory => builder.in_memory(),
        }
        .open()
    }

    /// The database file, or `None` for an in-memory database.
    #[must_use]
    pub fn path(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }

    /// The lease table's name.
    #[must_use]
    pub fn table(&self) -> &str {
        self.inner.sql.table.name()
    }

    /// Runs `work` in a transaction guarded by the lease `ctx` runs under,
    /// on the store's connection.
    ///
    /// The transaction is `BEGIN IMMEDIATE`: it takes the file's write lock
    /// at once, and its first statement verifies the lease. When the lease
    /// is no longer this holder's, the transaction is rolled back and
    /// `work` does not run. While the transaction is open, no other
    /// connection can write to the file, so a successor's claim waits for it
    /// to end: a holder frozen between its verification and its commit
    /// cannot commit after a successor claimed.
    ///
    /// The transaction ends with the lease context: when `ctx` is cancelled
    /// (the lease lost, the parent cancelled, the renewals stopped) before
    /// the commit, the statement `work` is running is interrupted and the
    /// transaction rolled back. `work` commits nothing itself: returning
    /// `Ok` commits, `Err` rolls back. A panic in `work` rolls back and
    /// resumes on the caller.
    ///
    /// This is the contract of [`lease_core::guard`], which every backend
    /// keeps: the same method, the same error type, the same rollback rules,
    /// the term compared with the handle's. Only the closure differs: it is
    /// synchronous, and runs on tokio's blocking pool, on the thread that
    /// holds the store's connection. rusqlite is a blocking driver: its
    /// `Transaction` borrows a `Connection` that is not `Sync`, so an async
    /// closure would hold the connection across `.await`s on a runtime
    /// thread, blocking it on every statement. The context ending
    /// interrupts the statement the work is running instead of dropping a
    /// future.
    ///
    /// The store has one connection: the holder's own renewals wait for the
    /// transaction to end. Keep each guarded transaction shorter than half
    /// the local deadline (5 s with the default timings), the bound on each
    /// renewal attempt; one longer than the local deadline always costs the
    /// lease. See the crate documentation.
    ///
    /// ```
    /// use lease_core::Leases;
    /// use lease_sqlite::{SqliteError, SqliteStore};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # tokio::runtime::Runtime::new()?.block_on(async {
    /// let store = SqliteStore::open_in_memory()?;
    /// let leases = Leases::new(store.clone());
    /// leases.migrate().await?;
    /// # store.transaction(&lease_core::LeaseContext::new(leases.claim("setup").await?.unwrap(), Default::default()), |tx| {
    /// #     tx.execute_batch("CREATE TABLE reports (id INTEGER PRIMARY KEY, done INTEGER, term INTEGER); INSERT INTO reports VALUES (7, 0, 0)")?;
    /// #     Ok::<_, rusqlite::Error>(())
    /// # }).await?;
    /// let Some(handle) = leases.claim("report:7").await? else {
    ///     return Ok(());
    /// };
    /// // In a program, the parent is the process's shutdown token.
    /// let holder = handle.hold(&Default::default());
    /// let term = i64::try_from(handle.term())?;
    /// store
    ///     .transaction(holder.context(), move |tx| {
    ///         tx.execute("UPDATE reports SET done = 1, term = ?1 WHERE id = 7", [term])
    ///     })
    ///     .await?;
    /// holder.stop().await;
    /// handle.release().await?;
    /// # Ok(()) })
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`GuardError::Lost`] when the verification finds the lease gone (or
    /// `ctx` ends with a loss before the commit); [`GuardError::Ended`] when
    /// `ctx` ends otherwise before the commit (or had ended already);
    /// [`GuardError::Database`] (its source the `rusqlite::Error`) when a
    /// statement of the guard fails (another connection holding the write
    /// lock past the busy timeout, for one); [`GuardError::Work`] with what
    /// `work` returned.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before the commit rolls the transaction back: the
    /// statement `work` is running is interrupted, and the commit is not
    /// sent. Dropped while the commit is in flight, the transaction may or
    /// may not have committed.
    pub async fn transaction<T, E, F>(
        &self,
        ctx: &LeaseContext,
        work: F,
    ) -> Result<T, GuardError<E>>
    where
        F: FnOnce(&Transaction<'_>) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        lease_core::metrics::guarded_transaction(self.guarded_transaction(ctx, work).await)
    }

    async fn guarded_transaction<T, E, F>(
        &self,
        ctx: &LeaseContext,
        work: F,
    ) -> Result<T, GuardError<E>>
    where
        F: FnOnce(&Transaction<'_>) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        let control = Arc::new(TxControl {
            running: Mutex::new(false),
            stop: AtomicBool::new(false),
        });
        let _stop_on_drop = StopOnDrop {
            control: Arc::clone(&control),
            inner: Arc::clone(&self.inner),
        };
        let inner = Arc::clone(&self.inner);
        let task = {
            let (ctx, control) = (ctx.clone(), Arc::clone(&control));
            tokio::task::spawn_blocking(move || guarded(&inner, &ctx, &control, work))
        };
        tokio::pin!(task);
        let joined = tokio::select! {
            biased;
            joined = &mut task => joined,
            () = ctx.cancelled() => {
                control.stop(&self.inner);
                task.await
            }
        };
        match joined {
            Ok(result) => result,
            Err(join) => match join.try_into_panic() {
                Ok(panic) => std::panic::resume_unwind(panic),
                // Cancelled: the runtime shut down before the task started,
                // so nothing ran.
                Err(_) => Err(GuardError::ended(ctx)),
            },
        }
    }

    /// The guard statement, for running the fence by hand in a transaction
    /// of another driver on the same file: see [`GuardStatement`] and
    /// [`lease_core::guard`].
    ///
    /// Open the transaction with `BEGIN IMMEDIATE`, then run `UPDATE
    /// {table} SET term = term WHERE name = ?1 AND holder = ?2 AND term = ?3
    /// AND expires_at_ms > {now_ms} RETURNING term` as its first
    /// statement: one row, the lease is still the handle's. It writes
    /// nothing, but as a write it takes the file's write lock even in a
    /// deferred `BEGIN`, so every other writer (a successor's claim
    /// included) waits until the transaction ends, up to its busy timeout.
    #[must_use]
    pub fn guard_statement(&self) -> GuardStatement {
        GuardStatement::new("BEGIN IMMEDIATE", sql::guard(self.inner.sql.table.quoted()))
    }

    /// Runs `f` on the connection, on tokio's blocking pool.
    ///
    /// Cancel safety: once spawned, the blocking task cannot be stopped, so a
    /// dropped call may still run. Dropping the future marks the call
    /// abandoned, and an abandoned call that has not reached the connection
    /// yet (it was queued behind others) does not run at all. A call that did
    /// run left no transaction open: `f` commits or drops (rolls back) its
    /// own, and the connection is checked for one left open before each call.
    async fn run<T, F>(&self, f: F) -> Result<T, BoxError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection, &Statements) -> rusqlite::Result<T> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        let abandoned = Arc::new(AtomicBool::new(false));
        let _abandon_on_drop = AbandonOnDrop(Arc::clone(&abandoned));
        let task = tokio::task::spawn_blocking(move || {
            let mut conn = inner.conn.lock().unwrap_or_else(PoisonError::into_inner);
            if abandoned.load(Ordering::SeqCst) {
                return None;
            }
            Some(run_on(&mut conn, &inner.sql, f))
        });
        match task.await {
            Ok(Some(result)) => result.map_err(Into::into),
            Ok(None) => Err("the SQLite call was abandoned before it ran".into()),
            Err(join) => Err(join.into()),
        }
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
        match conn.query_row(sql::JOURNAL_MODE_WAL, [], |row| row.get(0)) {
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

/// Runs `f` on a connection with no transaction open.
fn run_on<T>(
    conn: &mut Connection,
    sql: &Statements,
    f: impl FnOnce(&mut Connection, &Statements) -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    if !conn.is_autocommit() {
        // Only a panic in the middle of a call could leave one open.
        conn.execute_batch("ROLLBACK")?;
    }
    f(conn, sql)
}

/// Marks a call abandoned when its future is dropped (or has returned, when
/// the mark no longer matters).
struct AbandonOnDrop(Arc<AtomicBool>);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// How the async side of a guarded transaction stops its blocking side.
struct TxControl {
    /// Whether the blocking side holds the connection: only then may the
    /// connection be interrupted, or the interrupt would hit the next call.
    running: Mutex<bool>,
    /// The context ended, or the future was dropped: do not commit.
    stop: AtomicBool,
}

impl TxControl {
    fn stop(&self, inner: &Inner) {
        self.stop.store(true, Ordering::SeqCst);
        let running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if *running {
            inner.interrupt.interrupt();
        }
    }

    fn stopped(&self, ctx: &LeaseContext) -> bool {
        self.stop.load(Ordering::SeqCst) || ctx.is_cancelled()
    }

    fn set_running(&self, running: bool) {
        *self.running.lock().unwrap_or_else(PoisonError::into_inner) = running;
    }
}

/// Marks the blocking side no longer running when dropped, panics included.
struct Running<'a>(&'a TxControl);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.set_running(false);
    }
}

/// Stops a guarded transaction whose future is dropped (or has returned,
/// when there is nothing left to stop).
struct StopOnDrop {
    control: Arc<TxControl>,
    inner: Arc<Inner>,
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.control.stop(&self.inner);
    }
}

/// The blocking side of [`SqliteStore::transaction`].
fn guarded<T, E, F>(
    inner: &Inner,
    ctx: &LeaseContext,
    control: &TxControl,
    work: F,
) -> Result<T, GuardError<E>>
where
    F: FnOnce(&Transaction<'_>) -> Result<T, E>,
{
    let name = ctx.handle().name();
    let ended = || GuardError::ended(ctx);
    let db = |e: rusqlite::Error| {
        let kind = crate::error::classify(&e);
        GuardError::database(name, kind, e)
    };
    let mut conn = inner.conn.lock().unwrap_or_else(PoisonError::into_inner);
    control.set_running(true);
    // Declared after `conn`, so dropped before it: not running any more
    // once the connection is free for the next call.
    let _running = Running(control);
    if control.stopped(ctx) {
        return Err(ended());
    }
    if !conn.is_autocommit() {
        conn.execute_batch("ROLLBACK").map_err(db)?;
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(db)?;
    let term: Option<u64> = tx
        .query_row(
            &inner.sql.verify,
            params![name, ctx.handle().holder()],
            |row| term_at(row, 0),
        )
        .optional()
        .map_err(db)?;
    if term != Some(ctx.term()) {
        tracing::debug!(
            name,
            term = ctx.term(),
            "guarded transaction refused: lease lost"
        );
        return Err(GuardError::not_holder(name));
    }
    let value = work(&tx);
    if control.stopped(ctx) {
        tracing::debug!(name, term = ctx.term(), cause = ?ctx.cause(), "guarded transaction rolled back: context ended");
        return Err(ended());
    }
    let value = value.map_err(GuardError::Work)?;
    tx.commit().map_err(db)?;
    Ok(value)
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
            "query parameters are not supported: use SqliteStore::builder() for options",
        );
    }
    match rest {
        "" => invalid("the URL names no database file"),
        MEMORY => Ok(Database::Memory),
        path => Ok(Database::File(PathBuf::from(path))),
    }
}

/// Reads a term: SQLite stores it as a (signed) INTEGER, never negative.
/// A row of `get` or `list`.
fn info(row: &rusqlite::Row<'_>) -> rusqlite::Result<LeaseInfo> {
    Ok(LeaseInfo {
        name: row.get(0)?,
        instance: row.get(1)?,
        term: term_at(row, 2)?,
        expires_at_ms: row.get(3)?,
        now_ms: row.get(4)?,
        slot_ms: row.get(5)?,
        unfinished_slot_ms: row.get(6)?,
        rerun_slot_ms: row.get(7)?,
    })
}

fn term_at(row: &rusqlite::Row<'_>, idx: usize) -> rusqlite::Result<u64> {
    let term: i64 = row.get(idx)?;
    u64::try_from(term).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(idx, term))
}

/// The row an instant claim reads before it writes.
struct SlotRow {
    term: i64,
    slot_ms: i64,
    unfinished_slot_ms: i64,
    rerun_slot_ms: i64,
    expired: bool,
}

/// Claims an instant inside one `BEGIN IMMEDIATE` transaction: no other
/// connection writes between the read and the write, and the write still
/// compares the term it read.
fn claim_slot_in(
    conn: &mut Connection,
    sql: &Statements,
    args: (&str, &str, &str, i64, i64),
) -> rusqlite::Result<SlotClaim> {
    let (name, holder, instance, slot_ms, lease_ms) = args;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let row = tx
        .query_row(&sql.slot_read, [name], |row| {
            Ok(SlotRow {
                term: row.get(0)?,
                slot_ms: row.get(1)?,
                unfinished_slot_ms: row.get(2)?,
                rerun_slot_ms: row.get(3)?,
                expired: row.get(4)?,
            })
        })
        .optional()?;
    let outcome = match row {
        None => {
            let inserted = tx
                .prepare_cached(&sql.slot_insert)?
                .execute(params![name, holder, instance, slot_ms, lease_ms])?;
            if inserted == 1 {
                SlotClaim::Claimed {
                    term: 1,
                    superseded: None,
                }
            } else {
                SlotClaim::Refused
            }
        }
        Some(row) if row.expired && slot_ms > row.slot_ms => {
            let updated = tx
                .prepare_cached(&sql.slot_update)?
                .execute(params![name, holder, instance, slot_ms, lease_ms, row.term])?;
            if updated == 1 {
                let given_up = row.slot_ms != 0 && row.unfinished_slot_ms == row.slot_ms;
                SlotClaim::Claimed {
                    term: u64::try_from(row.term.saturating_add(1))
                        .map_err(|_| rusqlite::Error::IntegralValueOutOfRange(0, row.term))?,
                    superseded: given_up.then_some(SupersededSlot {
                        slot_ms: row.slot_ms,
                        rerun: row.rerun_slot_ms == row.slot_ms,
                    }),
                }
            } else {
                SlotClaim::Refused
            }
        }
        Some(_) => SlotClaim::Refused,
    };
    tx.commit()?;
    Ok(outcome)
}

/// The batch renewal: one `UPDATE ... RETURNING` per
/// [`MAX_RENEWALS_PER_STATEMENT`] leases (padded to a power of two by
/// repeating the last, so a few prepared statements serve every size),
/// answered in order from the rows it returned.
fn renew_many_in(
    conn: &Connection,
    sql: &Statements,
    leases: &[(String, String)],
    lease_ms: i64,
) -> rusqlite::Result<Vec<bool>> {
    let mut held = Vec::with_capacity(leases.len());
    for chunk in leases.chunks(MAX_RENEWALS_PER_STATEMENT) {
        let Some(last) = chunk.last() else { continue };
        let slots = chunk.len().next_power_of_two();
        let padded = chunk
            .iter()
            .chain(std::iter::repeat_n(last, slots - chunk.len()));
        let mut values: Vec<rusqlite::types::Value> = Vec::with_capacity(1 + 2 * slots);
        values.push(lease_ms.into());
        for (name, holder) in padded {
            values.push(name.clone().into());
            values.push(holder.clone().into());
        }
        let mut stmt = conn.prepare_cached(&sql::renew_many(sql.table.quoted(), slots))?;
        let renewed = stmt
            .query_map(params_from_iter(values), |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        held.extend(
            chunk
                .iter()
                .map(|(name, holder)| renewed.iter().any(|(n, h)| n == name && h == holder)),
        );
    }
    Ok(held)
}

fn find_unfinished_in(
    conn: &Connection,
    sql: &Statements,
    names: &[String],
) -> rusqlite::Result<Vec<UnfinishedRow>> {
    let mut found = Vec::new();
    for chunk in names.chunks(MAX_NAMES_PER_STATEMENT) {
        let statement = sql::find_unfinished(sql.table.quoted(), chunk.len());
        let mut stmt = conn.prepare(&statement)?;
        let rows = stmt.query_map(params_from_iter(chunk), |row| {
            Ok(UnfinishedRow {
                name: row.get(0)?,
                term: term_at(row, 1)?,
                slot_ms: row.get(2)?,
            })
        })?;
        for row in rows {
            found.push(row?);
        }
    }
    Ok(found)
}

/// Every method is one call on the connection, and one statement, except
/// [`claim_slot`](LeaseStore::claim_slot): a `BEGIN IMMEDIATE` transaction
/// of a read and a write.
///
/// # Cancel safety
///
/// Every method is cancel safe in the sense the trait asks: a dropped call
/// either took effect or did not, and leaves the store usable. A call dropped
/// while still queued for the connection does not run.
#[async_trait]
impl LeaseStore for SqliteStore {
    async fn claim(
        &self,
        name: &str,
        holder: &str,
        instance: &str,
        lease_ms: i64,
    ) -> Result<Option<u64>, BoxError> {
        let (name, holder, instance) = (name.to_owned(), holder.to_owned(), instance.to_owned());
        self.run(move |conn, sql| {
            conn.prepare_cached(&sql.claim)?
                .query_row(params![name, holder, instance, lease_ms], |row| {
                    term_at(row, 0)
                })
                .optional()
        })
        .await
    }

    async fn renew(&self, name: &str, holder: &str, lease_ms: i64) -> Result<bool, BoxError> {
        let (name, holder) = (name.to_owned(), holder.to_owned());
        self.run(move |conn, sql| {
            conn.prepare_cached(&sql.renew)?
                .execute(params![name, holder, lease_ms])
                .map(|changed| changed > 0)
        })
        .await
    }

    async fn renew_many(
        &self,
        leases: &[(&str, &str)],
        lease_ms: i64,
    ) -> Result<Vec<bool>, BoxError> {
        let leases: Vec<(String, String)> = leases
            .iter()
            .map(|(name, holder)| ((*name).to_owned(), (*holder).to_owned()))
            .collect();
        self.run(move |conn, sql| renew_many_in(conn, sql, &leases, lease_ms))
            .await
    }

    async fn verify(&self, name: &str, holder: &str) -> Result<Option<u64>, BoxError> {
        let (name, holder) = (name.to_owned(), holder.to_owned());
        self.run(move |conn, sql| {
            conn.prepare_cached(&sql.verify)?
                .query_row(params![name, holder], |row| term_at(row, 0))
                .optional()
        })
        .await
    }

    async fn release(&self, name: &str, holder: &str) -> Result<bool, BoxError> {
        let (name, holder) = (name.to_owned(), holder.to_owned());
        self.run(move |conn, sql| {
            conn.prepare_cached(&sql.release)?
                .execute(params![name, holder])
                .map(|changed| changed > 0)
        })
        .await
    }

    async fn claim_slot(
        &self,
        name: &str,
        holder: &str,
        instance: &str,
        slot_ms: i64,
        lease_ms: i64,
    ) -> Result<SlotClaim, BoxError> {
        let (name, holder, instance) = (name.to_owned(), holder.to_owned(), instance.to_owned());
        self.run(move |conn, sql| {
            claim_slot_in(conn, sql, (&name, &holder, &instance, slot_ms, lease_ms))
        })
        .await
    }

    async fn finish(
        &self,
        name: &str,
        holder: Option<&str>,
        slot_ms: i64,
        passed_ms: i64,
    ) -> Result<Finished, BoxError> {
        let (name, holder) = (name.to_owned(), holder.map(str::to_owned));
        self.run(move |conn, sql| {
            let released: Option<bool> = conn
                .query_row(
                    &sql.finish,
                    params![name, holder, slot_ms, passed_ms],
                    |row| row.get(0),
                )
                .optional()?;
            Ok(match released {
                Some(true) => Finished::Released,
                Some(false) => Finished::RecordedWithoutLease,
                None => Finished::NotRecorded,
            })
        })
        .await
    }

    async fn find_unfinished(&self, names: &[&str]) -> Result<Vec<UnfinishedRow>, BoxError> {
        let names: Vec<String> = names.iter().map(|&name| name.to_owned()).collect();
        if names.is_empty() {
            return Ok(Vec::new());
        }
        self.run(move |conn, sql| find_unfinished_in(conn, sql, &names))
            .await
    }

    async fn claim_rerun(
        &self,
        name: &str,
        term: u64,
        holder: &str,
        instance: &str,
        lease_ms: i64,
    ) -> Result<bool, BoxError> {
        let Ok(term) = i64::try_from(term) else {
            return Ok(false); // no row has a term SQLite cannot store
        };
        let (name, holder, instance) = (name.to_owned(), holder.to_owned(), instance.to_owned());
        self.run(move |conn, sql| {
            conn.prepare_cached(&sql.claim_rerun)?
                .execute(params![name, term, holder, instance, lease_ms])
                .map(|changed| changed > 0)
        })
        .await
    }

    async fn last_slot(&self, name: &str) -> Result<Option<i64>, BoxError> {
        let name = name.to_owned();
        self.run(move |conn, sql| {
            conn.prepare_cached(&sql.last_slot)?
                .query_row([name], |row| row.get(0))
                .optional()
        })
        .await
    }

    async fn force_release(&self, name: &str, term: u64) -> Result<bool, BoxError> {
        // A term past i64::MAX cannot be in the table: nothing to free.
        let Ok(term) = i64::try_from(term) else {
            return Ok(false);
        };
        let name = name.to_owned();
        self.run(move |conn, sql| {
            conn.prepare_cached(&sql.force_release)?
                .execute(params![name, term])
                .map(|changed| changed > 0)
        })
        .await
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>, BoxError> {
        let name = name.to_owned();
        self.run(move |conn, sql| {
            conn.prepare_cached(&sql.get)?
                .query_row([name], info)
                .optional()
        })
        .await
    }

    async fn list(&self, prefix: &str, limit: u32) -> Result<Vec<LeaseInfo>, BoxError> {
        let prefix = prefix.to_owned();
        self.run(move |conn, sql| {
            let mut stmt = conn.prepare_cached(&sql.list)?;
            let rows = stmt.query_map(params![prefix, limit], info)?;
            let mut infos = Vec::new();
            for row in rows {
                let info = row?;
                if !info.name.starts_with(prefix.as_str()) {
                    break;
                }
                infos.push(info);
            }
            Ok(infos)
        })
        .await
    }

    async fn now_ms(&self) -> Result<i64, BoxError> {
        self.run(|conn, _| {
            conn.prepare_cached(sql::SELECT_NOW)?
                .query_row([], |row| row.get(0))
        })
        .await
    }

    /// Inspects the table before anything else, so that an existing table
    /// is never written to, and creates it only when it is missing. An
    /// existing table that cannot carry leases (a column missing, names
    /// compared under a collation other than `BINARY`) is refused with
    /// [`SqliteError::IncompatibleTable`].
    async fn migrate(&self) -> Result<(), BoxError> {
        let found = self
            .run(|conn, sql| {
                let table = sql.table.name();
                match schema::inspect(conn, table)? {
                    Found::Missing => {
                        conn.execute_batch(&sql.create_table)?;
                        schema::inspect(conn, table)
                    }
                    found => Ok(found),
                }
            })
            .await?;
        match found {
            Found::Usable => Ok(()),
            Found::Missing => Err("the lease table is still missing after its creation".into()),
            Found::Incompatible(reason) => Err(SqliteError::IncompatibleTable {
                table: self.inner.sql.table.name().to_owned(),
                reason,
            }
            .into()),
        }
    }

    fn classify(&self, error: &(dyn std::error::Error + 'static)) -> lease_core::DbErrorKind {
        crate::error::classify(error)
    }

    fn guard_statement(&self) -> Option<lease_core::GuardStatement> {
        Some(Self::guard_statement(self))
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
    fn a_builder_without_a_database_says_so() {
        let err = SqliteStore::builder().open().expect_err("no database");
        assert!(matches!(err, SqliteError::MissingDatabase), "{err:?}");
    }

    #[test]
    fn an_invalid_table_is_refused_before_opening() {
        let err = SqliteStore::builder()
            .in_memory()
            .table("leases; DROP TABLE x")
            .open()
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
}
