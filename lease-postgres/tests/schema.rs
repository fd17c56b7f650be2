//! The store and an existing table: `migrate()` looks before it creates, so
//! a role without `CREATE` can migrate, and refuses a table the statements
//! cannot use.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] functions fail loudly"
)]

mod common;

use common::{exec, url_as};

use lease_core::{LeaseStore, Leases};
use lease_postgres::{PostgresError, PostgresStore};

/// Issue 16, item 3: a role with only `SELECT`, `INSERT` and `UPDATE` on the
/// table migrates it and carries leases on it.
#[tokio::test]
async fn a_role_with_select_insert_update_only_migrates_an_existing_table() {
    let Some(url) = common::url() else { return };
    let admin = common::fresh(&url).await;
    let table = admin.table().to_owned();
    let role = format!("{table}_role");
    exec(
        &admin,
        &format!(
            "CREATE ROLE \"{role}\" LOGIN PASSWORD 'lease-test-pw'; \
             GRANT SELECT, INSERT, UPDATE ON \"{table}\" TO \"{role}\""
        ),
    )
    .await;

    let outcome = async {
        let store = PostgresStore::builder(&url_as(&url, &role, "lease-test-pw"))
            .map_err(|e| e.to_string())?
            .with_table(&table)
            .connect()
            .await
            .map_err(|e| format!("connect: {e}"))?;
        store
            .migrate()
            .await
            .map_err(|e| format!("migrate: {e:?}"))?;
        let leases = Leases::new(store.clone());
        let handle = leases
            .claim("privs")
            .await
            .map_err(|e| format!("claim: {e:?}"))?
            .ok_or("claim refused")?;
        handle.renew().await.map_err(|e| format!("renew: {e:?}"))?;
        handle
            .release()
            .await
            .map_err(|e| format!("release: {e:?}"))?;
        // Creating a table is still refused by the server: the role may not.
        let other = PostgresStore::builder(&url_as(&url, &role, "lease-test-pw"))
            .map_err(|e| e.to_string())?
            .with_table(format!("{table}_nocreate"))
            .connect()
            .await
            .map_err(|e| format!("connect: {e}"))?;
        match LeaseStore::migrate(&other).await {
            Err(_) => Ok::<_, String>(()),
            Ok(()) => Err("a role without CREATE created a table".to_owned()),
        }
    }
    .await;

    common::drop_table(&admin).await;
    exec(&admin, &format!("DROP ROLE IF EXISTS \"{role}\"")).await;
    outcome.unwrap();
}

/// Issue 25, item 4: a table created by the previous schema (without
/// `resign_term`) is given the column by `migrate`, keeps its leases, and
/// carries resign requests after it; a second `migrate` changes nothing.
#[tokio::test]
async fn migrate_adds_the_resign_column_to_a_table_of_the_previous_schema() {
    let Some(url) = common::url() else { return };
    let store = common::store_on_new_table(&url).await;
    let table = store.table().to_owned();
    // The DDL of the previous version, and a lease held in it.
    exec(
        &store,
        &format!(
            "CREATE TABLE IF NOT EXISTS \"{table}\" ( \
               name text COLLATE \"C\" NOT NULL PRIMARY KEY \
                 CHECK (octet_length(name) BETWEEN 1 AND 191), \
               holder text NOT NULL, \
               instance text NOT NULL, \
               term bigint NOT NULL, \
               expires_at_ms bigint NOT NULL, \
               slot_ms bigint NOT NULL DEFAULT 0, \
               unfinished_slot_ms bigint NOT NULL DEFAULT 0, \
               rerun_slot_ms bigint NOT NULL DEFAULT 0); \
             INSERT INTO \"{table}\" (name, holder, instance, term, expires_at_ms) \
               VALUES ('old', 'old-token', 'old-host', 7, 9223372036854775807)"
        ),
    )
    .await;
    let outcome = async {
        let leases = Leases::new(store.clone());
        let old_token = lease_core::Token::new("old-token");
        if LeaseStore::renew(&store, "old", old_token, 15_000)
            .await
            .is_ok()
        {
            return Err("a renewal on the previous schema worked before migrate".to_owned());
        }
        leases
            .migrate()
            .await
            .map_err(|e| format!("migrate: {e:?}"))?;
        leases
            .migrate()
            .await
            .map_err(|e| format!("migrate again: {e:?}"))?;
        let old = leases
            .get("old")
            .await
            .map_err(|e| format!("get: {e:?}"))?
            .ok_or("the old lease is gone")?;
        if (old.term, old.instance.as_str(), old.held()) != (7, "old-host", true) {
            return Err(format!("the old lease changed: {old:?}"));
        }
        let asked = leases
            .request_resign("old")
            .await
            .map_err(|e| format!("request_resign: {e:?}"))?;
        if asked != Some(7) {
            return Err(format!("the old holder was not asked: {asked:?}"));
        }
        let renewed = LeaseStore::renew(&store, "old", old_token, 15_000)
            .await
            .map_err(|e| format!("renew: {e:?}"))?;
        if !renewed.is_some_and(|r| r.resign) {
            return Err(format!("the old holder's renewal: {renewed:?}"));
        }
        let handle = leases
            .claim("job")
            .await
            .map_err(|e| format!("claim: {e:?}"))?
            .ok_or("claim refused")?;
        handle.renew().await.map_err(|e| format!("renew: {e:?}"))?;
        handle
            .release()
            .await
            .map_err(|e| format!("release: {e:?}"))
    }
    .await;
    common::drop_table(&store).await;
    outcome.unwrap();
}

#[tokio::test]
async fn an_existing_table_missing_a_column_is_refused_and_left_as_it_is() {
    let Some(url) = common::url() else { return };
    let store = common::store_on_new_table(&url).await;
    let table = store.table().to_owned();
    exec(
        &store,
        &format!(
            "CREATE TABLE \"{table}\" (name text COLLATE \"C\" NOT NULL PRIMARY KEY, \
             holder text NOT NULL, instance text NOT NULL, term bigint NOT NULL, \
             expires_at_ms bigint NOT NULL)"
        ),
    )
    .await;
    let outcome = LeaseStore::migrate(&store).await;
    let client = store.pool().get().await.unwrap();
    let columns: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_attribute \
             WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped",
            &[&format!("\"{table}\"")],
        )
        .await
        .unwrap()
        .get(0);
    drop(client);
    common::drop_table(&store).await;
    let err = outcome.unwrap_err();
    match err.downcast_ref::<PostgresError>() {
        Some(PostgresError::IncompatibleTable { reason, .. }) => assert!(
            reason.contains("slot_ms, unfinished_slot_ms, rerun_slot_ms"),
            "{reason}"
        ),
        _ => panic!("expected IncompatibleTable, got {err:?}"),
    }
    assert_eq!(columns, 5);
}

/// A case-insensitive ICU collation (nondeterministic) would make `JOB` and
/// `job` one name.
#[tokio::test]
async fn a_name_column_with_a_nondeterministic_collation_is_refused() {
    let Some(url) = common::url() else { return };
    let store = common::store_on_new_table(&url).await;
    let table = store.table().to_owned();
    let collation = format!("{table}_ci");
    exec(
        &store,
        &format!(
            "CREATE COLLATION \"{collation}\" \
               (provider = icu, locale = 'und-u-ks-level2', deterministic = false); \
             CREATE TABLE \"{table}\" (name text COLLATE \"{collation}\" NOT NULL PRIMARY KEY, \
             holder text NOT NULL, instance text NOT NULL, term bigint NOT NULL, \
             expires_at_ms bigint NOT NULL, slot_ms bigint NOT NULL DEFAULT 0, \
             unfinished_slot_ms bigint NOT NULL DEFAULT 0, rerun_slot_ms bigint NOT NULL DEFAULT 0)"
        ),
    )
    .await;
    let outcome = LeaseStore::migrate(&store).await;
    common::drop_table(&store).await;
    exec(&store, &format!("DROP COLLATION \"{collation}\"")).await;
    let err = outcome.unwrap_err();
    match err.downcast_ref::<PostgresError>() {
        Some(PostgresError::IncompatibleTable { reason, .. }) => {
            assert!(reason.contains("nondeterministic"), "{reason}");
        }
        _ => panic!("expected IncompatibleTable, got {err:?}"),
    }
}
