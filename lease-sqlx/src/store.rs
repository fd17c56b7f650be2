//! What the sqlx lease stores share: the struct, its constructors and its
//! [`LeaseStore`](lease_core::LeaseStore) impl, which runs the flows of the
//! dialect's module of `lease-sql` on a [`SqlxConn`](crate::conn::SqlxConn).
//! Each dialect's file (`postgres.rs`, `mysql.rs`, `sqlite.rs`) adds its
//! docs and its `migrate`.
#![cfg_attr(
    not(any(feature = "postgres", feature = "mysql", feature = "sqlite")),
    allow(unused)
)]

/// The sqlx lease store of one dialect: the struct, its constructors and
/// accessors, and its [`LeaseStore`](lease_core::LeaseStore) impl, each
/// method the flow of the same name in `lease_sql::$dialect`, on one call's
/// connection. The dialect's file writes `migrate_table`.
macro_rules! sqlx_lease_store {
    (
        $(#[$doc:meta])*
        store: $store:ident,
        db: $db:ty,
        dialect: $dialect:ident,
        guard: ($guard:expr, $begin:literal),
        $(#[$with_table_doc:meta])*
    ) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $store {
            pool: sqlx::Pool<$db>,
            sql: std::sync::Arc<lease_sql::$dialect::Statements>,
        }

        impl $store {
            /// A store on `pool`, on the default table (`gst_leases`).
            #[must_use]
            pub fn new(pool: sqlx::Pool<$db>) -> Self {
                $store {
                    pool,
                    sql: std::sync::Arc::new(lease_sql::$dialect::Statements::new(
                        lease_sql::$dialect::default_table(),
                    )),
                }
            }

            $(#[$with_table_doc])*
            pub fn with_table(
                pool: sqlx::Pool<$db>,
                table: &str,
            ) -> Result<Self, $crate::StoreError> {
                let table = lease_sql::$dialect::table(table)?;
                Ok($store {
                    pool,
                    sql: std::sync::Arc::new(lease_sql::$dialect::Statements::new(table)),
                })
            }

            /// The pool.
            #[must_use]
            pub fn pool(&self) -> &sqlx::Pool<$db> {
                &self.pool
            }

            /// The lease table's name, as given.
            #[must_use]
            pub fn table(&self) -> &str {
                self.sql.table().name()
            }

            /// The guard statement of this store's table: the same as the
            /// backend crate's store's for the same table.
            #[must_use]
            pub fn guard_statement(&self) -> lease_core::GuardStatement {
                lease_core::GuardStatement::new($guard, $begin, self.sql.guard.text().to_owned())
            }

            /// The connection of one call.
            fn conn(&self) -> $crate::conn::SqlxConn<'_, $db> {
                $crate::conn::SqlxConn::new(&self.pool)
            }
        }

        #[async_trait::async_trait]
        impl lease_core::LeaseStore for $store {
            async fn claim(
                &self,
                claim: lease_core::ClaimRequest<'_>,
            ) -> Result<Option<u64>, lease_core::BoxError> {
                lease_sql::$dialect::claim(&mut self.conn(), &self.sql, &claim).await
            }

            async fn renew(
                &self,
                name: &str,
                token: lease_core::Token<'_>,
                lease_ms: i64,
            ) -> Result<Option<lease_core::Renewed>, lease_core::BoxError> {
                lease_sql::$dialect::renew(&mut self.conn(), &self.sql, name, token, lease_ms).await
            }

            async fn renew_many(
                &self,
                leases: &[(&str, lease_core::Token<'_>)],
                lease_ms: i64,
            ) -> Result<Vec<Option<lease_core::Renewed>>, lease_core::BoxError> {
                lease_sql::$dialect::renew_many(&mut self.conn(), &self.sql, leases, lease_ms).await
            }

            async fn verify(
                &self,
                name: &str,
                token: lease_core::Token<'_>,
            ) -> Result<Option<u64>, lease_core::BoxError> {
                lease_sql::$dialect::verify(&mut self.conn(), &self.sql, name, token).await
            }

            async fn release(
                &self,
                name: &str,
                token: lease_core::Token<'_>,
            ) -> Result<bool, lease_core::BoxError> {
                lease_sql::$dialect::release(&mut self.conn(), &self.sql, name, token).await
            }

            async fn claim_instant(
                &self,
                claim: lease_core::ClaimRequest<'_>,
                instant_ms: i64,
            ) -> Result<lease_core::InstantClaim, lease_core::BoxError> {
                let mut conn = self.conn();
                lease_sql::$dialect::claim_instant(&mut conn, &self.sql, &claim, instant_ms).await
            }

            async fn finish(
                &self,
                finish: lease_core::FinishRequest<'_>,
            ) -> Result<lease_core::Finished, lease_core::BoxError> {
                lease_sql::$dialect::finish(&mut self.conn(), &self.sql, &finish).await
            }

            async fn find_unfinished(
                &self,
                names: &[&str],
            ) -> Result<Vec<lease_core::Unfinished>, lease_core::BoxError> {
                lease_sql::$dialect::find_unfinished(&mut self.conn(), &self.sql, names).await
            }

            async fn claim_rerun(
                &self,
                claim: lease_core::ClaimRequest<'_>,
                term: u64,
            ) -> Result<bool, lease_core::BoxError> {
                lease_sql::$dialect::claim_rerun(&mut self.conn(), &self.sql, &claim, term).await
            }

            async fn last_instant(
                &self,
                name: &str,
            ) -> Result<Option<i64>, lease_core::BoxError> {
                lease_sql::$dialect::last_instant(&mut self.conn(), &self.sql, name).await
            }

            async fn force_release(
                &self,
                name: &str,
                term: u64,
            ) -> Result<bool, lease_core::BoxError> {
                lease_sql::$dialect::force_release(&mut self.conn(), &self.sql, name, term).await
            }

            async fn request_resign(
                &self,
                name: &str,
                term: u64,
            ) -> Result<bool, lease_core::BoxError> {
                lease_sql::$dialect::request_resign(&mut self.conn(), &self.sql, name, term).await
            }

            async fn get(
                &self,
                name: &str,
            ) -> Result<Option<lease_core::LeaseInfo>, lease_core::BoxError> {
                lease_sql::$dialect::get(&mut self.conn(), &self.sql, name).await
            }

            async fn list(
                &self,
                prefix: &str,
                limit: u32,
            ) -> Result<Vec<lease_core::LeaseInfo>, lease_core::BoxError> {
                lease_sql::$dialect::list(&mut self.conn(), &self.sql, prefix, limit).await
            }

            async fn now_ms(&self) -> Result<i64, lease_core::BoxError> {
                lease_sql::$dialect::now_ms(&mut self.conn(), &self.sql).await
            }

            async fn migrate(&self) -> Result<(), lease_core::BoxError> {
                self.migrate_table().await
            }

            fn classify(
                &self,
                error: &(dyn std::error::Error + 'static),
            ) -> lease_core::DbErrorKind {
                if let Some(e) = error.downcast_ref::<sqlx::Error>() {
                    <$db as $crate::dialect::FenceDatabase>::classify(e)
                } else if error.is::<$crate::StoreError>() {
                    // The store's own (migrate's table check).
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

pub(crate) use sqlx_lease_store;
