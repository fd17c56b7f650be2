//! The store and an existing table: `migrate()` looks before it creates, so
//! a user without `CREATE` can migrate, and refuses a table the statements
//! cannot use.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] functions fail loudly"
)]

mod common;

use common::{Restricted, admin, exec, unique};

use lease_core::Leases;
use lease_mysql::mysql_async::prelude::Queryable;
use lease_mysql::mysql_async::{Opts, Pool};
use lease_mysql::{MySqlError, MySqlStore, MySqlStoreBuilder};

/// Issue 25, item 4: a table created by the previous schema (without
/// `resign_term`) is given the column by `migrate`, keeps its leases, and
/// carries resign requests after it; a second `migrate` changes nothing.
#[tokio::test]
async fn migrate_adds_the_resign_column_to_a_table_of_the_previous_schema() {
    let Some(url) = common::url() else { return };
    let table = unique("previous");
    let admin = admin(&url);
    exec(&admin, &format!("DROP TABLE IF EXISTS `{table}`")).await;
    // The DDL of the previous version, and a lease held in it.
    exec(
        &admin,
        &format!(
            "CREATE TABLE `{table}` (\
             name VARBINARY(191) NOT NULL, \
             holder VARBINARY(64) NOT NULL, \
             instance VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, \
             term BIGINT UNSIGNED NOT NULL, \
             expires_at_ms BIGINT NOT NULL, \
             slot_ms BIGINT NOT NULL DEFAULT 0, \
             unfinished_slot_ms BIGINT NOT NULL DEFAULT 0, \
             rerun_slot_ms BIGINT NOT NULL DEFAULT 0, \
             PRIMARY KEY (name)) ENGINE = InnoDB"
        ),
    )
    .await;
    exec(
        &admin,
        &format!(
            "INSERT INTO `{table}` (name, holder, instance, term, expires_at_ms) \
             VALUES ('old', 'old-token', 'old-host', 7, 9223372036854775807)"
        ),
    )
    .await;
    let outcome = async {
        let store = MySqlStore::builder(&url)
            .unwrap()
            .with_table(&table)
            .connect()
            .await
            .map_err(|e| format!("connect to a table of the previous schema: {e}"))?;
        let old_token = lease_core::Token::new("old-token");
        let renew = |store: MySqlStore| async move {
            lease_core::LeaseStore::renew(&store, "old", old_token, 15_000).await
        };
        if renew(store.clone()).await.is_ok() {
            return Err("a renewal on the previous schema worked before migrate".to_owned());
        }
        store
            .migrate()
            .await
            .map_err(|e| format!("migrate: {e:?}"))?;
        store
            .migrate()
            .await
            .map_err(|e| format!("migrate again: {e:?}"))?;
        let leases = Leases::new(store.clone());
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
        let renewed = renew(store.clone())
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
    exec(&admin, &format!("DROP TABLE IF EXISTS `{table}`")).await;
    outcome.unwrap();
}

/// Issue 16, item 3: `migrate()` needed `CREATE` even when the table
/// existed (error 1142), though the documented privileges are `SELECT`,
/// `INSERT` and `UPDATE`.
#[tokio::test]
async fn a_user_with_select_insert_update_only_migrates_an_existing_table() {
    let Some(url) = common::url() else { return };
    let table = unique("privs");
    let root = common::fresh(&url, &table).await;
    let admin = admin(&url);
    let restricted = Restricted::create(&url, &admin, &table, "SELECT, INSERT, UPDATE").await;

    let outcome = async {
        let store = MySqlStore::builder(&restricted.url)
            .unwrap()
            .with_table(&table)
            .connect()
            .await
            .map_err(|e| format!("connect: {e}"))?;
        store
            .migrate()
            .await
            .map_err(|e| format!("migrate: {e:?}"))?;
        let leases = Leases::new(store);
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
        // A table the user may not create is still refused by the server.
        let other = MySqlStore::builder(&restricted.url)
            .unwrap()
            .with_table(unique("nocreate"))
            .connect()
            .await
            .map_err(|e| format!("connect: {e}"))?;
        match other.migrate().await {
            Err(MySqlError::Database(_)) => Ok::<_, String>(()),
            other => Err(format!("creating a table without CREATE: {other:?}")),
        }
    }
    .await;

    restricted.drop_user(&admin).await;
    common::drop_table(&root, &table).await;
    admin.disconnect().await.unwrap();
    outcome.unwrap();
}

/// The store refuses, as it connects and in `migrate`, a table without a
/// column the statements use, and leaves it as it is.
#[tokio::test]
async fn an_existing_table_missing_a_column_is_refused_and_left_as_it_is() {
    let Some(url) = common::url() else { return };
    let table = unique("cols");
    let admin = admin(&url);
    exec(
        &admin,
        &format!(
            "CREATE TABLE `{table}` (name VARBINARY(191) NOT NULL PRIMARY KEY, \
             holder VARBINARY(64) NOT NULL, instance VARCHAR(255) NOT NULL, \
             term BIGINT UNSIGNED NOT NULL, expires_at_ms BIGINT NOT NULL)"
        ),
    )
    .await;
    let outcome = assert_refused(
        &url,
        &admin,
        &table,
        "slot_ms, unfinished_slot_ms, rerun_slot_ms",
    )
    .await;
    let mut conn = admin.get_conn().await.unwrap();
    let columns: Option<i64> = conn
        .exec_first(
            "SELECT COUNT(*) FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
            (&table,),
        )
        .await
        .unwrap();
    drop(conn);
    exec(&admin, &format!("DROP TABLE `{table}`")).await;
    admin.disconnect().await.unwrap();
    outcome.unwrap();
    assert_eq!(columns, Some(5));
}

/// What went wrong, in words, when a store accepted a table it should have
/// refused: the terms its claims returned against the terms in the rows.
async fn claims_against_rows(store: MySqlStore, admin: &Pool, table: &str) -> String {
    let leases = Leases::new(store);
    let mut report = Vec::new();
    for name in ["a", "b", "c"] {
        let claimed = leases.claim(name).await;
        let mut conn = admin.get_conn().await.unwrap();
        let row: Option<(u64, String)> = conn
            .exec_first(
                format!("SELECT term, holder FROM `{table}` WHERE name = ?"),
                (name,),
            )
            .await
            .unwrap();
        let returned = match &claimed {
            Ok(Some(h)) => format!("claimed, term {}", h.term()),
            Ok(None) => "not claimed".to_owned(),
            Err(e) => format!("error {e}"),
        };
        let held = match (&claimed, row) {
            (Ok(Some(h)), Some((term, holder))) if holder == h.token().expose() => {
                format!("term {term}")
            }
            (_, Some((term, _))) => format!("term {term} (someone's)"),
            (_, None) => "no row".to_owned(),
        };
        report.push(format!("{name}: {returned}; the row: {held}"));
    }
    report.join("; ")
}

/// Runs `check` on a store connected to `table`, then on one from a pool
/// (which sends nothing) through `migrate`: both must refuse the table with
/// a reason containing `needle`.
async fn assert_refused(url: &str, admin: &Pool, table: &str, needle: &str) -> Result<(), String> {
    match MySqlStore::builder(url)
        .unwrap()
        .with_table(table)
        .connect()
        .await
    {
        Err(MySqlError::IncompatibleTable { reason, .. }) if reason.contains(needle) => {}
        Err(e) => return Err(format!("connect: unexpected {e:?}")),
        Ok(store) => {
            return Err(format!(
                "connect accepted the table: {}",
                claims_against_rows(store, admin, table).await
            ));
        }
    }
    let pool = Pool::new(Opts::from_url(&url.replacen("mariadb://", "mysql://", 1)).unwrap());
    let store = MySqlStoreBuilder::from_pool(pool)
        .with_table(table)
        .build()
        .unwrap();
    let migrated = store.migrate().await;
    store
        .pool()
        .clone()
        .into_inner()
        .disconnect()
        .await
        .unwrap();
    match migrated {
        Err(MySqlError::IncompatibleTable { reason, .. }) if reason.contains(needle) => Ok(()),
        other => Err(format!("migrate: unexpected {other:?}")),
    }
}

/// Issue 16, item 2: on a hand-made table with an `AUTO_INCREMENT` column,
/// claims returned the column's ids as their terms (1, 2, 3 while every row
/// held term 1): wrong fencing tokens.
#[tokio::test]
async fn a_table_with_an_auto_increment_column_is_refused() {
    let Some(url) = common::url() else { return };
    let table = unique("autoinc");
    let root = common::fresh(&url, &table).await;
    let admin = admin(&url);
    exec(
        &admin,
        &format!("ALTER TABLE `{table}` ADD COLUMN id BIGINT NOT NULL AUTO_INCREMENT UNIQUE"),
    )
    .await;
    let outcome = assert_refused(&url, &admin, &table, "AUTO_INCREMENT").await;
    common::drop_table(&root, &table).await;
    admin.disconnect().await.unwrap();
    outcome.unwrap();
}

/// Issue 16, item 2: with an audit trigger inserting into a table of its
/// own, a claim that succeeded in the database returned "not claimed".
#[tokio::test]
async fn a_table_with_a_trigger_is_refused() {
    let Some(url) = common::url() else { return };
    let table = unique("trig");
    let audit = format!("{table}_audit");
    let root = common::fresh(&url, &table).await;
    let admin = admin(&url);
    exec(
        &admin,
        &format!(
            "CREATE TABLE `{audit}` (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, \
             name VARBINARY(191) NOT NULL)"
        ),
    )
    .await;
    for event in ["INSERT", "UPDATE"] {
        exec(
            &admin,
            &format!(
                "CREATE TRIGGER `{table}_{event}` AFTER {event} ON `{table}` FOR EACH ROW \
                 INSERT INTO `{audit}` (name) VALUES (NEW.name)"
            ),
        )
        .await;
    }
    let outcome = assert_refused(&url, &admin, &table, "trigger").await;
    common::drop_table(&root, &table).await;
    common::drop_table(&root, &audit).await;
    admin.disconnect().await.unwrap();
    outcome.unwrap();
}
