#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The upgrade that lets schedules inherit max attempts (migration
//! `20261209000001_schedule_max_attempts_inherit`), on a database migrated to the release
//! before it and holding schedules: one stored with the old default of 25 inherits from the
//! upgrade on, one with its own value keeps it; on PostgreSQL and SQLite.

use std::path::{Path, PathBuf};

use leasehold_tests::TestDb;
use leasehold_tests::scratch::scratch_dir;
use sqlx::migrate::Migrator;

const UPGRADE: &str = "20261209000001";

/// A directory holding the backend's migrations older than [`UPGRADE`], byte for byte.
fn migrations_before(backend: &str) -> PathBuf {
    let from = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../migrations")
        .join(backend);
    let dir = scratch_dir(&format!("lh-migrations-{backend}")).unwrap();
    let mut copied = 0;
    for entry in std::fs::read_dir(&from).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if name.ends_with(".sql") && name.as_str() < UPGRADE {
            std::fs::copy(&path, dir.join(&name)).unwrap();
            copied += 1;
        }
    }
    assert!(copied > 10, "{copied} migrations before the upgrade");
    dir
}

const INSERT: &str = "INSERT INTO schedules (name, cron, task_type, max_attempts) VALUES \
                      ('defaulted', '0 * * * * *', 'report', 25), \
                      ('own', '0 * * * * *', 'report', 3)";
const READ: &str = "SELECT name, max_attempts FROM schedules ORDER BY name";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_schedules_at_the_old_default_inherit_after_the_upgrade() {
    let db = TestDb::new_empty().await.unwrap();
    let before = Migrator::new(migrations_before("postgres")).await.unwrap();
    before.run(&db.pool).await.unwrap();
    sqlx::query(INSERT).execute(&db.pool).await.unwrap();
    leasehold_shared::store::postgres::MIGRATOR
        .run(&db.pool)
        .await
        .unwrap();
    let rows: Vec<(String, Option<i32>)> = sqlx::query_as(READ).fetch_all(&db.pool).await.unwrap();
    assert_eq!(
        rows,
        [
            ("defaulted".to_string(), None),
            ("own".to_string(), Some(3))
        ]
    );
    db.drop_db().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_schedules_at_the_old_default_inherit_after_the_upgrade() {
    let dir = scratch_dir("lh-sqlite-upgrade").unwrap();
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(dir.join("leasehold.db"))
        .create_if_missing(true);
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .unwrap();
    let before = Migrator::new(migrations_before("sqlite")).await.unwrap();
    before.run(&pool).await.unwrap();
    sqlx::query(INSERT).execute(&pool).await.unwrap();
    leasehold_shared::store::sqlite::MIGRATOR
        .run(&pool)
        .await
        .unwrap();
    let rows: Vec<(String, Option<i32>)> = sqlx::query_as(READ).fetch_all(&pool).await.unwrap();
    assert_eq!(
        rows,
        [
            ("defaulted".to_string(), None),
            ("own".to_string(), Some(3))
        ]
    );
    // The rebuilt table still refuses what it refused.
    assert!(
        sqlx::query(
            "INSERT INTO schedules (name, cron, task_type, max_attempts) \
             VALUES ('zero', '0 * * * * *', 'report', 0)"
        )
        .execute(&pool)
        .await
        .is_err()
    );
    pool.close().await;
}
