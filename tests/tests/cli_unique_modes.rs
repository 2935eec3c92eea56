#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Unique enqueues end to end (issue 24): `leasehold enqueue --idempotency-key K
//! --on-conflict replace|debounce [--unique-for D]` as a process against a real agent and
//! database. Each call's exit code (0 whatever the outcome), its line and its `--output json`,
//! then the rows and audit rows it left; a holder that the agent itself ran gives its key up
//! once its `finished_at` is backdated past `--unique-for`; bad flags exit 2 with no call.

use leasehold_tests::calls::cli::{ok, start, wait_status};
use leasehold_tests::{TaskSpec, TestDb, audit_rows, count, insert_task, task_row};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_debounce_and_unique_for_through_the_cli() {
    let db = TestDb::new().await.unwrap();
    let f = start(&db, "uq-cli", "noop", &[]).await.unwrap();
    let cli = &f.cli;

    // replace: a waiting task (of a type no agent runs) takes the new settings.
    let o = cli
        .run(&[
            "--output",
            "json",
            "enqueue",
            "report.build",
            "--payload",
            r#"{"v":1}"#,
            "--delay",
            "1h",
            "--idempotency-key",
            "rk",
        ])
        .await
        .unwrap();
    ok(&o);
    let id = o.json().unwrap()["id"].as_i64().unwrap();
    assert_eq!(o.json().unwrap()["outcome"], "created");
    let o = cli
        .run(&[
            "enqueue",
            "report.build",
            "--payload",
            r#"{"v":2}"#,
            "--priority",
            "3",
            "--idempotency-key",
            "rk",
            "--on-conflict",
            "replace",
        ])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(
        o.stdout,
        format!("task {id} replaced (idempotency key \"rk\")\n")
    );
    let row = task_row(&db.pool, id).await.unwrap();
    assert_eq!(
        (row["payload"].clone(), row["priority"].clone()),
        (json!({"v": 2}), json!(3))
    );
    let o = cli
        .run(&[
            "--output",
            "json",
            "enqueue",
            "report.build",
            "--payload",
            r#"{"v":3}"#,
            "--idempotency-key",
            "rk",
            "--on-conflict",
            "replace",
        ])
        .await
        .unwrap();
    ok(&o);
    let j = o.json().unwrap();
    assert_eq!(
        (
            j["id"].as_i64(),
            j["created"].clone(),
            j["outcome"].clone(),
            j["existing_status"].clone()
        ),
        (Some(id), json!(false), json!("replaced"), json!("queued"))
    );
    assert_eq!(j["payload"], json!({"v": 3}));

    // debounce: the start moves to now + --delay, the payload is the last one.
    let o = cli
        .run(&[
            "enqueue",
            "report.build",
            "--payload",
            r#"{"event":1}"#,
            "--delay",
            "10s",
            "--idempotency-key",
            "dk",
        ])
        .await
        .unwrap();
    ok(&o);
    let did: i64 = o
        .stdout
        .strip_prefix("enqueued task ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    let o = cli
        .run(&[
            "enqueue",
            "report.build",
            "--payload",
            r#"{"event":2}"#,
            "--delay",
            "2m",
            "--idempotency-key",
            "dk",
            "--on-conflict",
            "debounce",
        ])
        .await
        .unwrap();
    ok(&o);
    assert!(
        o.stdout.starts_with(&format!("task {did} debounced to 20")),
        "{}",
        o.describe()
    );
    assert!(
        o.stdout.ends_with(" (in 2m00s; idempotency key \"dk\")\n"),
        "{}",
        o.describe()
    );
    let pushed: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM available_at - updated_at)::float8 FROM tasks WHERE id = $1",
    )
    .bind(did)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!((119.0..=121.0).contains(&pushed), "{pushed}");
    assert_eq!(
        task_row(&db.pool, did).await.unwrap()["payload"],
        json!({"event": 2})
    );

    // Running: never replaced; the line says why, exit 0.
    let mut running = TaskSpec::new("report.build", "running");
    running.idempotency_key = Some("busy".into());
    let busy = insert_task(&db.pool, running).await.unwrap();
    let before = task_row(&db.pool, busy).await.unwrap();
    let o = cli
        .run(&[
            "enqueue",
            "report.build",
            "--payload",
            r#"{"v":9}"#,
            "--idempotency-key",
            "busy",
            "--on-conflict",
            "replace",
        ])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(
        o.stdout,
        format!("task {busy} exists (running; idempotency key \"busy\")\n")
    );
    assert_eq!(task_row(&db.pool, busy).await.unwrap(), before);

    // unique_for: a noop the agent runs; while it finished recently the key blocks, once its
    // finished_at is two hours back (backdated in SQL) a new task takes the key.
    let o = cli
        .run(&[
            "--output",
            "json",
            "enqueue",
            "noop",
            "--idempotency-key",
            "nightly",
        ])
        .await
        .unwrap();
    ok(&o);
    let first = o.json().unwrap()["id"].as_i64().unwrap();
    wait_status(&db.pool, first, "succeeded").await.unwrap();
    let again = [
        "--output",
        "json",
        "enqueue",
        "noop",
        "--idempotency-key",
        "nightly",
        "--unique-for",
        "1h",
    ];
    let o = cli.run(&again).await.unwrap();
    ok(&o);
    let j = o.json().unwrap();
    assert_eq!(
        (
            j["id"].as_i64(),
            j["outcome"].clone(),
            j["existing_status"].clone()
        ),
        (Some(first), json!("existing"), json!("succeeded"))
    );
    sqlx::query("UPDATE tasks SET finished_at = finished_at - interval '2 hours' WHERE id = $1")
        .bind(first)
        .execute(&db.pool)
        .await
        .unwrap();
    let o = cli.run(&again).await.unwrap();
    ok(&o);
    let j = o.json().unwrap();
    let second = j["id"].as_i64().unwrap();
    assert_ne!(second, first);
    assert_eq!(
        (
            j["created"].clone(),
            j["outcome"].clone(),
            j["released_from"].clone()
        ),
        (json!(true), json!("created"), json!(first))
    );
    wait_status(&db.pool, second, "succeeded").await.unwrap();
    // The old task still shows its key; the key has one holder.
    let o = cli
        .run(&["--output", "json", "tasks", "show", &first.to_string()])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(o.json().unwrap()["task"]["idempotency_key"], "nightly");
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM tasks WHERE idempotency_key = 'nightly'"
        )
        .await
        .unwrap(),
        1
    );
    // The human line of a released key.
    sqlx::query("UPDATE tasks SET finished_at = finished_at - interval '2 hours' WHERE id = $1")
        .bind(second)
        .execute(&db.pool)
        .await
        .unwrap();
    let o = cli
        .run(&[
            "enqueue",
            "noop",
            "--idempotency-key",
            "nightly",
            "--unique-for",
            "1h",
        ])
        .await
        .unwrap();
    ok(&o);
    assert!(
        o.stdout.ends_with(&format!(
            "(type noop, priority 0, idempotency key \"nightly\" released by task {second})\n"
        )),
        "{}",
        o.describe()
    );

    // Every call was audited: applied for created, replaced and debounced; noop for the
    // unchanged ones.
    let results: Vec<String> = audit_rows(&db.pool)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.2 == "enqueue")
        .map(|r| r.4)
        .collect();
    assert_eq!(
        results,
        [
            "applied", "applied", "applied", "applied", "applied", "noop", "applied", "noop",
            "applied", "applied"
        ]
    );

    // Bad flags: exit 2, no call (no row, no audit row).
    let tasks = count(&db.pool, "SELECT count(*) FROM tasks").await.unwrap();
    let audited = count(&db.pool, "SELECT count(*) FROM audit_log")
        .await
        .unwrap();
    for bad in [
        &["enqueue", "noop", "--on-conflict", "replace"][..],
        &["enqueue", "noop", "--unique-for", "1h"],
        &[
            "enqueue",
            "noop",
            "--idempotency-key",
            "x",
            "--on-conflict",
            "upsert",
        ],
        &[
            "enqueue",
            "noop",
            "--idempotency-key",
            "x",
            "--unique-for",
            "0s",
        ],
        &[
            "enqueue",
            "noop",
            "--idempotency-key",
            "x",
            "--unique-for",
            "366days",
        ],
        &[
            "enqueue",
            "noop",
            "--idempotency-key",
            "x",
            "--unique-for",
            "1500us",
        ],
    ] {
        let o = cli.run(bad).await.unwrap();
        assert_eq!(o.code, Some(2), "{}", o.describe());
        assert_eq!(o.stdout, "", "{}", o.describe());
    }
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM tasks").await.unwrap(),
        tasks
    );
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM audit_log")
            .await
            .unwrap(),
        audited
    );
    db.drop_db().await.unwrap();
}
