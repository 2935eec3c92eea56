#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The upgrade that partitions `tasks` by the day a task finished (migration
//! `20261210000001_tasks_partitioned_by_done_day`), on a PostgreSQL database migrated to the
//! release before it, holding tasks and the agents' role of deploy/postgres/agent-role.sql: every
//! task is kept where it belongs, ids go on from where they were, and the role keeps its rights
//! (an agent running as it works on at once, without the script run again).

use std::path::{Path, PathBuf};

use leasehold_tests::TestDb;
use leasehold_tests::scratch::scratch_dir;
use sqlx::migrate::Migrator;

const UPGRADE: &str = "20261210000001";

fn migrations_before() -> PathBuf {
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations/postgres");
    let dir = scratch_dir("lh-migrations-partition").unwrap();
    for entry in std::fs::read_dir(&from).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if name.ends_with(".sql") && name.as_str() < UPGRADE {
            std::fs::copy(&path, dir.join(&name)).unwrap();
        }
    }
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioning_keeps_every_task_its_id_sequence_and_the_agent_roles_rights() {
    let db = TestDb::new_empty().await.unwrap();
    Migrator::new(migrations_before())
        .await
        .unwrap()
        .run(&db.pool)
        .await
        .unwrap();
    // The role as the previous release's script made it (only the tasks-related grants matter).
    sqlx::raw_sql(
        "DO $$ BEGIN
             IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'leasehold_agent') THEN
                 CREATE ROLE leasehold_agent LOGIN;
             END IF;
         END $$;
         GRANT SELECT, INSERT, UPDATE, DELETE ON tasks TO leasehold_agent;
         GRANT SELECT ON task_attempts TO leasehold_agent;
         GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO leasehold_agent;
         INSERT INTO tasks (task_type, idempotency_key) SELECT 'up', 'k' || n FROM generate_series(1, 30) n;
         UPDATE tasks SET status = 'succeeded', finished_at = now() - interval '2 days' WHERE id % 3 = 0;
         UPDATE tasks SET status = 'dead', finished_at = now() - interval '45 days' WHERE id % 3 = 1;",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let before: Vec<(i64, String, Option<String>)> =
        sqlx::query_as("SELECT id, status::text, idempotency_key::text FROM tasks ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();

    leasehold_shared::store::postgres::MIGRATOR
        .run(&db.pool)
        .await
        .unwrap();

    let after: Vec<(i64, String, Option<String>)> =
        sqlx::query_as("SELECT id, status::text, idempotency_key::text FROM tasks ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(after, before, "every task kept as it was");
    let placed: Vec<(String, i64)> = sqlx::query_as(
        "SELECT CASE WHEN tableoid::regclass::text LIKE 'tasks\\_done\\_2%' THEN 'day'
                     ELSE tableoid::regclass::text END, count(*)
         FROM tasks GROUP BY 1 ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        placed,
        [
            ("day".to_string(), 10),
            ("tasks_done_kept".to_string(), 10),
            ("tasks_live".to_string(), 10)
        ],
        "finished in the last month: their day; before: kept; the rest live"
    );
    // Ids go on after the last one; a key a finished task holds stays taken.
    let next: i64 = sqlx::query_scalar("INSERT INTO tasks (task_type) VALUES ('up') RETURNING id")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(next, 31);
    let taken = sqlx::query("INSERT INTO tasks (task_type, idempotency_key) VALUES ('up', 'k3')")
        .execute(&db.pool)
        .await
        .unwrap_err();
    assert_eq!(
        taken.as_database_error().unwrap().constraint(),
        Some("tasks_idempotency_key_done")
    );
    let rights: (bool, bool, bool, bool, bool, bool) = sqlx::query_as(
        "SELECT has_table_privilege('leasehold_agent', 'tasks', 'INSERT, UPDATE, DELETE'),
                has_table_privilege('leasehold_agent', 'tasks_live', 'DELETE'),
                has_table_privilege('leasehold_agent', 'task_attempts', 'SELECT'),
                has_sequence_privilege('leasehold_agent', 'tasks_id_seq', 'USAGE'),
                has_function_privilege('leasehold_agent',
                    'leasehold_tasks_done_drop(date, text[], double precision)', 'EXECUTE'),
                has_function_privilege('public',
                    'leasehold_tasks_done_drop(date, text[], double precision)', 'EXECUTE')",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(rights, (true, true, true, true, true, false));
    db.drop_db().await.unwrap();
}
