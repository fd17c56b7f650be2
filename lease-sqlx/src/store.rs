//! What the sqlx lease stores share: the struct and its constructors, the
//! binding of a statement's values, the statements every dialect runs
//! alike, and the forwarding of the others to the dialect's own
//! (`postgres.rs`, `mysql.rs`, `sqlite.rs`).
#![cfg_attr(
    not(any(feature = "postgres", feature = "mysql", feature = "sqlite")),
    allow(unused)
)]

use std::collections::HashMap;

use lease_core::{BoxError, InstantRecord};

/// A value a statement binds.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Value<'a> {
    Str(&'a str),
    /// A text that may be NULL.
    OptStr(Option<&'a str>),
    Int(i64),
}

/// A statement's text, and the order its values bind in.
pub(crate) trait SqlText {
    fn text(&self) -> &str;

    /// `values` (each with the name of its parameter) in the order the
    /// statement binds them.
    fn bind_order<'a>(&self, values: &[(&str, Value<'a>)]) -> Result<Vec<Value<'a>>, BoxError>;
}

/// A text of `lease-postgres` or `lease-sqlite`: its values bind in the
/// order given (`$1`, `$2`, ... / `?1`, `?2`, ...).
impl SqlText for str {
    fn text(&self) -> &str {
        self
    }

    fn bind_order<'a>(&self, values: &[(&str, Value<'a>)]) -> Result<Vec<Value<'a>>, BoxError> {
        Ok(values.iter().map(|(_, v)| *v).collect())
    }
}

impl SqlText for String {
    fn text(&self) -> &str {
        self
    }

    fn bind_order<'a>(&self, values: &[(&str, Value<'a>)]) -> Result<Vec<Value<'a>>, BoxError> {
        self.as_str().bind_order(values)
    }
}

/// A text of `lease-mysql`: its values bind by the names it records, a
/// name used twice binding twice.
#[cfg(feature = "mysql")]
impl SqlText for lease_mysql::texts::Statement {
    fn text(&self) -> &str {
        &self.sql
    }

    fn bind_order<'a>(&self, values: &[(&str, Value<'a>)]) -> Result<Vec<Value<'a>>, BoxError> {
        self.params
            .iter()
            .map(|param| {
                values
                    .iter()
                    .find(|(name, _)| name == param)
                    .map(|(_, v)| *v)
                    .ok_or_else(|| {
                        format!(
                            "lease-mysql's statement binds :{param}, which lease-sqlx does not \
                             supply (the two crates' versions differ?): {}",
                            self.sql
                        )
                        .into()
                    })
            })
            .collect()
    }
}

/// Which of `leases` a batch renewal found held, by the rows (name,
/// holder, the database's now) it returned, in the order of `leases`.
pub(crate) fn held(
    leases: &[(&str, lease_core::Token<'_>)],
    rows: impl IntoIterator<Item = (String, String, i64)>,
) -> Vec<Option<i64>> {
    let renewed: HashMap<(String, String), i64> = rows
        .into_iter()
        .map(|(name, holder, now)| ((name, holder), now))
        .collect();
    leases
        .iter()
        .map(|(name, holder)| {
            renewed
                .get(&((*name).to_owned(), holder.expose().to_owned()))
                .copied()
        })
        .collect()
}

/// What an instant claim does after reading the row: `row` is its record
/// and whether its lease has expired (`None`: no row).
#[derive(Debug)]
pub(crate) enum SlotStep {
    /// Insert the name.
    Insert,
    /// Take the row over, read as `record` (what it gives up:
    /// [`InstantRecord::superseded`]).
    Update(InstantRecord),
    /// Refuse: held, or the instant is not later than the last.
    Refuse,
}

impl SlotStep {
    pub(crate) fn after(row: Option<(InstantRecord, bool)>, slot_ms: i64) -> SlotStep {
        match row {
            None => SlotStep::Insert,
            Some((record, expired)) if record.claimable(expired, slot_ms) => {
                SlotStep::Update(record)
            }
            Some(_) => SlotStep::Refuse,
        }
    }
}

/// A term stored as a signed integer (PostgreSQL's `bigint`, SQLite's
/// `INTEGER`), at column `i`.
pub(crate) fn signed_term<'r, R>(row: &'r R, i: usize) -> Result<u64, BoxError>
where
    R: sqlx::Row,
    usize: sqlx::ColumnIndex<R>,
    i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    lease_core::term_from_db(row.try_get(i)?)
}

/// A name stored as text, at column `i`.
pub(crate) fn text_name<'r, R>(row: &'r R, i: usize) -> Result<String, BoxError>
where
    R: sqlx::Row,
    usize: sqlx::ColumnIndex<R>,
    String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    Ok(row.try_get(i)?)
}

/// The rows of a batch renewal (`name, holder, now`), names as text.
pub(crate) fn renewed_rows<'r, R>(rows: &'r [R]) -> Result<Vec<(String, String, i64)>, BoxError>
where
    R: sqlx::Row,
    usize: sqlx::ColumnIndex<R>,
    String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    Ok(rows
        .iter()
        .map(|row| Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?)))
        .collect::<Result<_, sqlx::Error>>()?)
}

/// The instants of an instant claim's read (`term, slot_ms,
/// unfinished_slot_ms, rerun_slot_ms, expired`): columns 1 to 3.
pub(crate) fn slot_record<'r, R>(row: &'r R) -> Result<InstantRecord, BoxError>
where
    R: sqlx::Row,
    usize: sqlx::ColumnIndex<R>,
    i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    Ok(InstantRecord {
        slot_ms: row.try_get(1)?,
        unfinished_slot_ms: row.try_get(2)?,
        rerun_slot_ms: row.try_get(3)?,
    })
}

/// A term read back from the table, as `i64` for binding.
pub(crate) fn term_value(term: u64) -> Result<i64, BoxError> {
    i64::try_from(term).map_err(|_| format!("a term out of range: {term}").into())
}

/// The sqlx lease store of one dialect: the struct, its constructors and
/// accessors, and its [`LeaseStore`](lease_core::LeaseStore) impl. The
/// statements that run alike everywhere (verify, release, claim again,
/// the last instant, a forced release, get, list, now) are here; the
/// others forward to the dialect module's inherent methods:
///
/// - `do_claim`, `do_renew`, `do_migrate`, as the trait's;
/// - `do_renew_chunk`: the renewals of at most `renewals_per_batch`
///   leases, the rows renewed (`name, holder, now`);
/// - `do_claim_instant`, given the claim's values (`name, holder, instance,
///   slot, lease_ms`) and the instant;
/// - `do_finish`, given the values (`name, holder, slot, passed`);
/// - `do_find_unfinished`, as the trait's;
/// - `written`: whether a write matched its row.
///
/// `term` and `name` read a term and a lease name from a row's column.
macro_rules! sqlx_lease_store {
    (
        $(#[$doc:meta])*
        store: $store:ident,
        db: $db:ty,
        texts: $texts:ty,
        error: $error:ty,
        default_table: $default:expr,
        dialect: $dialect:expr,
        begin: $begin:literal,
        term: $term:path,
        name: $name:path,
        renewals_per_batch: $per_batch:expr,
        $(#[$with_table_doc:meta])*
    ) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $store {
            pool: sqlx::Pool<$db>,
            table: String,
            sql: std::sync::Arc<$texts>,
        }

        impl $store {
            /// A store on `pool`, on the default table (`gst_leases`).
            #[must_use]
            pub fn new(pool: sqlx::Pool<$db>) -> Self {
                Self::with_table(pool, $default)
                    .unwrap_or_else(|_| unreachable!("the default table name is valid"))
            }

            $(#[$with_table_doc])*
            pub fn with_table(pool: sqlx::Pool<$db>, table: &str) -> Result<Self, $error> {
                Ok($store {
                    pool,
                    table: table.to_owned(),
                    sql: std::sync::Arc::new(<$texts>::for_table(table)?),
                })
            }

            /// The pool.
            #[must_use]
            pub fn pool(&self) -> &sqlx::Pool<$db> {
                &self.pool
            }

            /// The table's name as given.
            #[must_use]
            pub fn table(&self) -> &str {
                &self.table
            }

            /// The guard statement of this store's table: the same as the
            /// backend crate's store's for the same table.
            #[must_use]
            pub fn guard_statement(&self) -> lease_core::GuardStatement {
                lease_core::GuardStatement::new($dialect, $begin, self.sql.guard.clone())
            }

            /// `text` with `values` bound in its order.
            fn query<T: $crate::store::SqlText + ?Sized>(
                &self,
                text: &T,
                values: &[(&str, $crate::store::Value<'_>)],
            ) -> Result<
                sqlx::query::Query<'static, $db, <$db as sqlx::Database>::Arguments>,
                lease_core::BoxError,
            > {
                use $crate::store::Value;
                let mut query = sqlx::query(sqlx::AssertSqlSafe(text.text().to_owned()));
                for value in text.bind_order(values)? {
                    query = match value {
                        Value::Str(s) => query.bind(s),
                        Value::OptStr(s) => query.bind(s),
                        Value::Int(i) => query.bind(i),
                    };
                }
                Ok(query)
            }

            fn info(row: &<$db as sqlx::Database>::Row) -> Result<lease_core::LeaseInfo, lease_core::BoxError> {
                use sqlx::Row as _;
                Ok(lease_core::LeaseInfo {
                    name: $name(row, 0)?,
                    instance: row.try_get(1)?,
                    term: $term(row, 2)?,
                    expires_at_ms: row.try_get(3)?,
                    now_ms: row.try_get(4)?,
                    slot_ms: row.try_get(5)?,
                    unfinished_slot_ms: row.try_get(6)?,
                    rerun_slot_ms: row.try_get(7)?,
                })
            }
        }

        #[async_trait::async_trait]
        impl lease_core::LeaseStore for $store {
            async fn claim(
                &self,
                claim: lease_core::ClaimRequest<'_>,
            ) -> Result<Option<u64>, lease_core::BoxError> {
                self.do_claim(claim).await
            }

            async fn renew(
                &self,
                name: &str,
                token: lease_core::Token<'_>,
                lease_ms: i64,
            ) -> Result<Option<i64>, lease_core::BoxError> {
        let holder = token.expose();
                self.do_renew(name, holder, lease_ms).await
            }

            async fn renew_many(
                &self,
                leases: &[(&str, lease_core::Token<'_>)],
                lease_ms: i64,
            ) -> Result<Vec<Option<i64>>, lease_core::BoxError> {
                let mut renewed = Vec::with_capacity(leases.len());
                for chunk in leases.chunks($per_batch) {
                    renewed.extend(self.do_renew_chunk(chunk, lease_ms).await?);
                }
                Ok($crate::store::held(leases, renewed))
            }

            async fn verify(
                &self,
                name: &str,
                token: lease_core::Token<'_>,
            ) -> Result<Option<u64>, lease_core::BoxError> {
        let holder = token.expose();
                use $crate::store::Value;
                let row = self
                    .query(
                        &self.sql.verify,
                        &[("name", Value::Str(name)), ("holder", Value::Str(holder))],
                    )?
                    .fetch_optional(&self.pool)
                    .await?;
                row.map(|row| $term(&row, 0)).transpose()
            }

            async fn release(&self, name: &str, token: lease_core::Token<'_>) -> Result<bool, lease_core::BoxError> {
        let holder = token.expose();
                use $crate::store::Value;
                self.written(
                    &self.sql.release,
                    &[("name", Value::Str(name)), ("holder", Value::Str(holder))],
                )
                .await
            }

            async fn claim_instant(
                &self,
                claim: lease_core::ClaimRequest<'_>,
                slot_ms: i64,
            ) -> Result<lease_core::InstantClaim, lease_core::BoxError> {
                use $crate::store::Value;
                let values = vec![
                    ("name", Value::Str(claim.name)),
                    ("holder", Value::Str(claim.token.expose())),
                    ("instance", Value::Str(claim.instance)),
                    ("slot", Value::Int(slot_ms)),
                    ("lease_ms", Value::Int(claim.lease_ms)),
                ];
                self.do_claim_instant(claim.name, values, slot_ms).await
            }

            async fn finish(&self, finish: lease_core::FinishRequest<'_>) -> Result<lease_core::Finished, lease_core::BoxError> {
        let lease_core::FinishRequest { name, token, instant_ms: slot_ms, passed_ms } = finish;
        let holder = token.map(lease_core::Token::expose);
                use $crate::store::Value;
                self.do_finish(&[
                    ("name", Value::Str(name)),
                    ("holder", Value::OptStr(holder)),
                    ("slot", Value::Int(slot_ms)),
                    ("passed", Value::Int(passed_ms)),
                ])
                .await
            }

            async fn find_unfinished(
                &self,
                names: &[&str],
            ) -> Result<Vec<lease_core::Unfinished>, lease_core::BoxError> {
                self.do_find_unfinished(names).await
            }

            async fn claim_rerun(
                &self,
                claim: lease_core::ClaimRequest<'_>,
                term: u64,
            ) -> Result<bool, lease_core::BoxError> {
                use $crate::store::Value;
                let Ok(term) = i64::try_from(term) else {
                    return Ok(false);
                };
                self.written(
                    &self.sql.claim_rerun,
                    &[
                        ("name", Value::Str(claim.name)),
                        ("term", Value::Int(term)),
                        ("holder", Value::Str(claim.token.expose())),
                        ("instance", Value::Str(claim.instance)),
                        ("lease_ms", Value::Int(claim.lease_ms)),
                    ],
                )
                .await
            }

            async fn last_instant(&self, name: &str) -> Result<Option<i64>, lease_core::BoxError> {
                use sqlx::Row as _;
                use $crate::store::Value;
                let row = self
                    .query(&self.sql.last_instant, &[("name", Value::Str(name))])?
                    .fetch_optional(&self.pool)
                    .await?;
                Ok(row.map(|row| row.try_get(0)).transpose()?)
            }

            async fn force_release(&self, name: &str, term: u64) -> Result<bool, lease_core::BoxError> {
                use $crate::store::Value;
                let Ok(term) = i64::try_from(term) else {
                    return Ok(false);
                };
                self.written(
                    &self.sql.force_release,
                    &[("name", Value::Str(name)), ("term", Value::Int(term))],
                )
                .await
            }

            async fn get(
                &self,
                name: &str,
            ) -> Result<Option<lease_core::LeaseInfo>, lease_core::BoxError> {
                use $crate::store::Value;
                let row = self
                    .query(&self.sql.get, &[("name", Value::Str(name))])?
                    .fetch_optional(&self.pool)
                    .await?;
                row.as_ref().map(Self::info).transpose()
            }

            async fn list(
                &self,
                prefix: &str,
                limit: u32,
            ) -> Result<Vec<lease_core::LeaseInfo>, lease_core::BoxError> {
                use $crate::store::Value;
                let rows = self
                    .query(
                        &self.sql.list,
                        &[
                            ("prefix", Value::Str(prefix)),
                            ("row_limit", Value::Int(i64::from(limit))),
                        ],
                    )?
                    .fetch_all(&self.pool)
                    .await?;
                let mut infos = Vec::with_capacity(rows.len());
                for row in &rows {
                    let info = Self::info(row)?;
                    if !info.name.starts_with(prefix) {
                        break;
                    }
                    infos.push(info);
                }
                Ok(infos)
            }

            async fn now_ms(&self) -> Result<i64, lease_core::BoxError> {
                use sqlx::Row as _;
                let row = self.query(self.sql.now, &[])?.fetch_one(&self.pool).await?;
                Ok(row.try_get(0)?)
            }

            async fn migrate(&self) -> Result<(), lease_core::BoxError> {
                self.do_migrate().await
            }

            fn classify(
                &self,
                error: &(dyn std::error::Error + 'static),
            ) -> lease_core::DbErrorKind {
                if let Some(e) = error.downcast_ref::<sqlx::Error>() {
                    <$db as $crate::dialect::FenceDatabase>::classify(e)
                } else if error.is::<$error>() {
                    // The backend crate's own (migrate's table check).
                    lease_core::DbErrorKind::Other
                } else {
                    lease_core::DbErrorKind::Unclassified
                }
            }

            fn guard_statement(&self) -> Option<lease_core::GuardStatement> {
                Some($store::guard_statement(self))
            }
        }
    };
}

/// A claim and a renewal that are one statement each, returning the term
/// and the database's now (`RETURNING`): PostgreSQL's and SQLite's.
macro_rules! returning_claim_and_renew {
    ($store:ident, term: $term:path) => {
        impl $store {
            async fn do_claim(
                &self,
                claim: lease_core::ClaimRequest<'_>,
            ) -> Result<Option<u64>, lease_core::BoxError> {
                use $crate::store::Value;
                let row = self
                    .query(
                        &self.sql.claim,
                        &[
                            ("name", Value::Str(claim.name)),
                            ("holder", Value::Str(claim.token.expose())),
                            ("instance", Value::Str(claim.instance)),
                            ("lease_ms", Value::Int(claim.lease_ms)),
                        ],
                    )?
                    // All rows (at most one): a `RETURNING` statement read
                    // to its end, or SQLite never checkpoints its log.
                    .fetch_all(&self.pool)
                    .await?
                    .into_iter()
                    .next();
                row.map(|row| $term(&row, 0)).transpose()
            }

            async fn do_renew(
                &self,
                name: &str,
                holder: &str,
                lease_ms: i64,
            ) -> Result<Option<i64>, lease_core::BoxError> {
                use sqlx::Row as _;
                use $crate::store::Value;
                let row = self
                    .query(
                        &self.sql.renew,
                        &[
                            ("name", Value::Str(name)),
                            ("holder", Value::Str(holder)),
                            ("lease_ms", Value::Int(lease_ms)),
                        ],
                    )?
                    // As the claim: read to its end.
                    .fetch_all(&self.pool)
                    .await?
                    .into_iter()
                    .next();
                Ok(row.map(|row| row.try_get::<i64, _>(0)).transpose()?)
            }

            /// Whether a write changed its row.
            async fn written(
                &self,
                text: &str,
                values: &[(&str, $crate::store::Value<'_>)],
            ) -> Result<bool, lease_core::BoxError> {
                let done = self.query(text, values)?.execute(&self.pool).await?;
                Ok(done.rows_affected() == 1)
            }
        }
    };
}

pub(crate) use returning_claim_and_renew;
pub(crate) use sqlx_lease_store;
