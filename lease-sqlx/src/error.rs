//! The error of building a store, or of its table check.

/// Why a sqlx lease store could not be built, or refused its table.
///
/// The protocol's statements report sqlx's error as it is, and
/// [`Leases`](lease_core::Leases) wraps it in
/// [`lease_core::Error::Database`]. A guarded transaction fails with
/// [`GuardError`](lease_core::GuardError).
///
/// ```
/// use lease_sqlx::StoreError;
///
/// # fn refused() -> lease_core::TableNameError {
/// #     lease_sql::sqlite::table("le`ases").unwrap_err()
/// # }
/// // What `SqliteLeaseStore::with_table(pool, "le`ases")` returns:
/// let err = StoreError::from(refused());
/// assert!(matches!(err, StoreError::InvalidTable(_)));
/// assert!(err.to_string().starts_with("invalid lease table name \"le`ases\""));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The table name is not one the dialect's store accepts (the same
    /// rules as the backend crate's): the name and the rule it breaks.
    #[error(transparent)]
    InvalidTable(#[from] lease_core::TableNameError),

    /// A setting is out of range (MySQL's lock-wait bound under 1 s).
    #[error("invalid setting: {0}")]
    InvalidSetting(String),

    /// The lease table exists with a shape the protocol cannot use
    /// (`MySqlLeaseStore`'s `migrate`, which checks it as `lease-mysql`'s
    /// does).
    #[error("the lease table {table} cannot be used: {reason}")]
    IncompatibleTable {
        /// The table, as given.
        table: String,
        /// What is wrong with it.
        reason: String,
    },
}
