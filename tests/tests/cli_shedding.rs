#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Load shedding end to end (issue 23): `leasehold shed set late 30s` on a live agent. The
//! leader cancels, with reason `shed`, the type's waiting tasks that are more than 30 s
//! overdue and leaves the fresh ones; `leasehold types --output json` counts them; `tasks
//! show` says why; the change is audited; `shed clear` stops it.

use leasehold_tests::calls::cli::{WAIT, local, ok, start};
use leasehold_tests::{TestDb, audit_rows, wait_until};
use serde_json::Value;

/// Statuses and error codes of type `late`, by id.
async fn late(pool: &sqlx::PgPool) -> Vec<(i64, String, Option<String>)> {
    sqlx::query_as(
        "SELECT id, status::text, last_error->>'code' FROM tasks WHERE task_type = 'late' \
         ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shedding_type_loses_its_overdue_waiting_tasks_and_keeps_the_fresh_ones() {
    let db = TestDb::new().await.unwrap();
    let f = start(&db, "shed", "noop", &[]).await.unwrap();
    // No agent serves `late`: its tasks wait. Three became due two minutes ago; two are due in
    // an hour (never overdue while the test runs, however slow the machine).
    sqlx::query(
        "INSERT INTO tasks (task_type, available_at) \
         SELECT 'late', now() + CASE WHEN g <= 3 THEN interval '-2 minutes' \
                                     ELSE interval '1 hour' END \
         FROM generate_series(1, 5) g",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let o = f.cli.run(&["shed", "set", "late", "30s"]).await.unwrap();
    assert_eq!(o.code, Some(0), "{}", o.describe());
    assert_eq!(
        o.stdout,
        "type late sheds tasks waiting over 30s (was never)\n"
    );
    // Applied, with a warning: no live agent serves `late` (which is why its tasks wait).
    assert!(
        o.stderr.contains("no live agent handles task type late"),
        "{}",
        o.describe()
    );
    wait_until("the three overdue tasks are shed", WAIT, || {
        let pool = db.pool.clone();
        async move {
            let rows = late(&pool).await;
            Ok(rows.iter().filter(|(_, s, _)| s == "cancelled").count() == 3)
        }
    })
    .await
    .unwrap();
    let rows = late(&db.pool).await;
    for (i, (id, status, code)) in rows.iter().enumerate() {
        if i < 3 {
            assert_eq!(
                (status.as_str(), code.as_deref()),
                ("cancelled", Some("shed")),
                "{id}"
            );
        } else {
            assert_eq!((status.as_str(), code.as_deref()), ("queued", None), "{id}");
        }
    }

    let o = f.cli.run(&["--output", "json", "types"]).await.unwrap();
    ok(&o);
    let types: Value = o.json().unwrap();
    let row = types["types"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["task_type"] == "late")
        .unwrap()
        .clone();
    assert_eq!(row["shed_after_ms"], 30_000);
    assert_eq!(row["shed_last_minute"], 3);
    assert_eq!(row["scheduled"], 2);

    let shed_id = rows[0].0.to_string();
    let o = f.cli.run(&["tasks", "show", &shed_id]).await.unwrap();
    ok(&o);
    assert!(o.stdout.contains("by load shedding"), "{}", o.stdout);

    let o = f.cli.run(&["shed", "clear", "late"]).await.unwrap();
    assert_eq!(o.code, Some(0), "{}", o.describe());
    assert_eq!(o.stdout, "type late no longer sheds (was 30s)\n");
    // Cleared: tasks overdue since then stay queued — while the leader goes on shedding another
    // type, so a tick is known to have run since.
    sqlx::query(
        "UPDATE tasks SET available_at = now() - interval '2 minutes' \
         WHERE task_type = 'late' AND status = 'queued'",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let o = f.cli.run(&["shed", "set", "later", "1s"]).await.unwrap();
    assert_eq!(o.code, Some(0), "{}", o.describe());
    sqlx::query(
        "INSERT INTO tasks (task_type, available_at) VALUES ('later', now() - interval '1 minute')",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    wait_until("the other type's overdue task is shed", WAIT, || {
        let pool = db.pool.clone();
        async move {
            let n: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM tasks WHERE task_type = 'later' AND status = 'cancelled'",
            )
            .fetch_one(&pool)
            .await?;
            Ok(n == 1)
        }
    })
    .await
    .unwrap();
    assert_eq!(
        late(&db.pool)
            .await
            .iter()
            .filter(|(_, s, _)| s == "queued")
            .count(),
        2,
        "tasks were shed after shed clear"
    );
    assert_eq!(
        audit_rows(&db.pool)
            .await
            .unwrap()
            .into_iter()
            .filter(|r| r.2 == "policy_set")
            .collect::<Vec<_>>(),
        vec![
            local("policy_set", "policy:late", "applied"),
            local("policy_set", "policy:late", "applied"),
            local("policy_set", "policy:later", "applied"),
        ]
    );
    db.drop_db().await.unwrap();
}
