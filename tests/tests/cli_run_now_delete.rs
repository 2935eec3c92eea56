#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `leasehold run-now` and `leasehold delete` end to end (issue 26): a real agent on
//! PostgreSQL, the `leasehold` binary, real gRPC. A run-now of a task enqueued with a delay has
//! the agent run it at once; one already due changes nothing; running, finished and unknown
//! tasks are refused (exit 2) with the rest still done; bad ids are refused before any call; a
//! delete removes a dead task with its attempts; a viewer is refused (exit 4, a `denied` row,
//! nothing changed). Every call's audit row is checked.

use leasehold_tests::calls::cli::{
    audit, audit_after, audit_len, digest, local, ok, refused, start, wait_status,
};
use leasehold_tests::{TaskSpec, TestDb, count, insert_task, scratch_dir, task_row, task_status};
use serde_json::json;
use sqlx::PgPool;

const VIEWER: &str = "val-viewer-secret-0123456789abcdef";

/// Seconds until task `id` is due (negative: due already), by the database's clock.
async fn due_in(pool: &PgPool, id: i64) -> f64 {
    sqlx::query_scalar(
        "SELECT EXTRACT(EPOCH FROM available_at - now())::float8 FROM tasks WHERE id = $1",
    )
    .bind(id)
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn exists(pool: &PgPool, id: i64) -> bool {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM tasks WHERE id = $1)")
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn attempt_rows_of(pool: &PgPool, id: i64) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM task_attempt_rows WHERE task_id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
}

fn viewer_config(name: &str) -> String {
    let config = scratch_dir(name).unwrap().join("agent.toml");
    std::fs::write(
        &config,
        format!("[[tokens]]\nname = \"val\"\nrole = \"viewer\"\nsecret = {VIEWER:?}\n"),
    )
    .unwrap();
    config.to_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_now_has_a_delayed_task_run_at_once_and_refuses_what_does_not_wait() {
    let db = TestDb::new().await.unwrap();
    let config = viewer_config("leasehold-cli-run-now");
    // Serves noop: a noop task due now is claimed and succeeds at once.
    let f = start(&db, "runnow", "noop", &["--config", &config])
        .await
        .unwrap();
    let val = f.cli.with_token(VIEWER);
    let seen = audit_len(&db.pool).await.unwrap();

    // Enqueued an hour ahead: the agent leaves it alone.
    let o = f
        .cli
        .run(&["--output", "json", "enqueue", "noop", "--delay", "1h"])
        .await
        .unwrap();
    ok(&o);
    let delayed = o.json().unwrap()["id"].as_i64().unwrap();
    assert!(due_in(&db.pool, delayed).await > 3000.0);
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(task_status(&db.pool, delayed).await.unwrap(), "queued");

    // A viewer: refused, audited, nothing changed.
    let before = digest(&db.pool).await.unwrap();
    let o = val.run(&["run-now", &delayed.to_string()]).await.unwrap();
    let line = refused(&o, 4);
    assert!(
        line.starts_with(&format!("leasehold: run task {delayed} now: ")),
        "{line}"
    );
    assert!(line.ends_with("(permission denied)"), "{line}");
    assert_eq!(digest(&db.pool).await.unwrap(), before);

    // Run now: due now, and the agent runs it soon after.
    let o = f.cli.run(&["run-now", &delayed.to_string()]).await.unwrap();
    ok(&o);
    assert_eq!(o.stdout, format!("task {delayed}: due now (queued)\n"));
    wait_status(&db.pool, delayed, "succeeded").await.unwrap();

    // A type nothing serves stays waiting: json, then again (already due).
    let parked = insert_task(
        &db.pool,
        TaskSpec {
            available_in_secs: 3600.0,
            ..TaskSpec::new("report.build", "queued")
        },
    )
    .await
    .unwrap();
    let retrying = insert_task(
        &db.pool,
        TaskSpec {
            available_in_secs: 3600.0,
            ..TaskSpec::new("report.build", "retry_wait")
        },
    )
    .await
    .unwrap();
    let o = f
        .cli
        .run(&[
            "--output",
            "json",
            "run-now",
            &parked.to_string(),
            &retrying.to_string(),
        ])
        .await
        .unwrap();
    ok(&o);
    let lines: Vec<serde_json::Value> = o
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines,
        [
            json!({"id": parked, "status": "queued", "moved": true}),
            json!({"id": retrying, "status": "retry_wait", "moved": true}),
        ]
    );
    assert!(due_in(&db.pool, parked).await <= 0.0);
    assert!(due_in(&db.pool, retrying).await <= 0.0);
    assert_eq!(task_status(&db.pool, retrying).await.unwrap(), "retry_wait");
    let o = f.cli.run(&["run-now", &parked.to_string()]).await.unwrap();
    ok(&o);
    assert_eq!(o.stdout, format!("task {parked}: already due (queued)\n"));

    // Running, finished, unknown: refused (exit 2, failed precondition / not found); the
    // other ids are still done, in order; the refused rows are unchanged.
    let running = insert_task(&db.pool, TaskSpec::new("report.build", "running"))
        .await
        .unwrap();
    let dead = insert_task(&db.pool, TaskSpec::new("report.build", "dead"))
        .await
        .unwrap();
    let later = insert_task(
        &db.pool,
        TaskSpec {
            available_in_secs: 3600.0,
            ..TaskSpec::new("report.build", "queued")
        },
    )
    .await
    .unwrap();
    let rows_before = (
        task_row(&db.pool, running).await.unwrap(),
        task_row(&db.pool, dead).await.unwrap(),
    );
    let o = f
        .cli
        .run(&[
            "run-now",
            &running.to_string(),
            &dead.to_string(),
            "999999",
            &later.to_string(),
        ])
        .await
        .unwrap();
    assert_eq!(o.code, Some(2), "{}", o.describe());
    assert_eq!(o.stdout, format!("task {later}: due now (queued)\n"));
    let errors: Vec<&str> = o.stderr.lines().collect();
    assert_eq!(errors.len(), 3, "{}", o.describe());
    for (line, id, code) in [
        (errors[0], running.to_string(), "(failed precondition)"),
        (errors[1], dead.to_string(), "(failed precondition)"),
        (errors[2], "999999".to_owned(), "(not found)"),
    ] {
        assert!(
            line.starts_with(&format!("leasehold: run task {id} now: ")) && line.ends_with(code),
            "{line}"
        );
    }
    assert_eq!(
        errors[0],
        format!(
            "leasehold: run task {running} now: task {running}: cannot run_now a task that is \
             running (failed precondition)"
        )
    );
    assert_eq!(
        (
            task_row(&db.pool, running).await.unwrap(),
            task_row(&db.pool, dead).await.unwrap()
        ),
        rows_before
    );
    // Alone, a refused one exits 2 as well.
    let o = f.cli.run(&["run-now", &dead.to_string()]).await.unwrap();
    assert!(refused(&o, 2).ends_with("(failed precondition)"));

    // Bad ids: usage errors before any call, nothing audited.
    let audited = audit_len(&db.pool).await.unwrap();
    for bad in [
        &["run-now", "0"][..],
        &["run-now", "abc"],
        &["run-now"],
        &["delete", "-3"],
    ] {
        let o = f.cli.run(bad).await.unwrap();
        assert_eq!(o.code, Some(2), "{bad:?}: {}", o.describe());
        assert_eq!(o.stdout, "");
    }
    assert_eq!(audit_len(&db.pool).await.unwrap(), audited);

    // The help tells the exit codes these calls really have.
    for command in ["run-now", "delete"] {
        let o = f.cli.run(&[command, "--help"]).await.unwrap();
        ok(&o);
        assert!(
            o.stdout.contains("exit 2") && o.stdout.contains("exit 4"),
            "{command} --help: {}",
            o.stdout
        );
        assert!(
            !o.stdout.contains("exit 1"),
            "{command} --help: {}",
            o.stdout
        );
    }

    let task = |id: i64| format!("task:{id}");
    assert_eq!(
        audit_after(&db.pool, seen).await.unwrap(),
        [
            local("enqueue", &task(delayed), "applied"),
            audit("val", "viewer", "run_now", &task(delayed), "denied"),
            local("run_now", &task(delayed), "applied"),
            local("run_now", &task(parked), "applied"),
            local("run_now", &task(retrying), "applied"),
            local("run_now", &task(parked), "noop"),
            local("run_now", &task(running), "failed"),
            local("run_now", &task(dead), "failed"),
            local("run_now", "task:999999", "failed"),
            local("run_now", &task(later), "applied"),
            local("run_now", &task(dead), "failed"),
        ]
    );
    db.drop_db().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_removes_a_dead_task_with_its_attempts_and_refuses_a_running_one() {
    let db = TestDb::new().await.unwrap();
    let config = viewer_config("leasehold-cli-delete");
    // Serves only noop: nothing here is ever claimed.
    let f = start(&db, "delete", "noop", &["--config", &config])
        .await
        .unwrap();
    let val = f.cli.with_token(VIEWER);
    let seen = audit_len(&db.pool).await.unwrap();

    let dead = insert_task(&db.pool, TaskSpec::new("email.send", "dead"))
        .await
        .unwrap();
    let queued = insert_task(
        &db.pool,
        TaskSpec {
            available_in_secs: 3600.0,
            ..TaskSpec::new("email.send", "queued")
        },
    )
    .await
    .unwrap();
    let running = insert_task(&db.pool, TaskSpec::new("email.send", "running"))
        .await
        .unwrap();
    let bystander = insert_task(&db.pool, TaskSpec::new("email.send", "dead"))
        .await
        .unwrap();
    // Where a finishing statement puts dead tasks: today's partition.
    sqlx::query(
        "UPDATE tasks SET done_on = (now() AT TIME ZONE 'UTC')::date WHERE status = 'dead'",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    for id in [dead, running, bystander] {
        for epoch in 1..=2_i64 {
            sqlx::query(
                "INSERT INTO task_attempt_rows (task_id, epoch, attempt, agent, started_at, \
                 outcome) VALUES ($1, $2, $2, 'old#1', now(), 'failed')",
            )
            .bind(id)
            .bind(epoch)
            .execute(&db.pool)
            .await
            .unwrap();
        }
    }

    // A viewer: refused (exit 4), audited, nothing deleted.
    let before = digest(&db.pool).await.unwrap();
    let o = val.run(&["delete", &dead.to_string()]).await.unwrap();
    let line = refused(&o, 4);
    assert!(
        line.starts_with(&format!("leasehold: delete task {dead}: "))
            && line.ends_with("(permission denied)"),
        "{line}"
    );
    assert_eq!(digest(&db.pool).await.unwrap(), before);

    // The dead one goes with its attempts; the queued one in json.
    let o = f.cli.run(&["delete", &dead.to_string()]).await.unwrap();
    ok(&o);
    assert_eq!(o.stdout, format!("task {dead}: deleted (was dead)\n"));
    assert!(!exists(&db.pool, dead).await);
    assert_eq!(attempt_rows_of(&db.pool, dead).await, 0);
    let o = f
        .cli
        .run(&["--output", "json", "delete", &queued.to_string()])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(
        o.json().unwrap(),
        json!({"id": queued, "previous": "queued"})
    );
    assert!(!exists(&db.pool, queued).await);

    // Running: refused (exit 2), unchanged; deleted again: not found (exit 2).
    let row = task_row(&db.pool, running).await.unwrap();
    let o = f
        .cli
        .run(&["delete", &running.to_string(), &dead.to_string()])
        .await
        .unwrap();
    assert_eq!(o.code, Some(2), "{}", o.describe());
    assert_eq!(o.stdout, "");
    let errors: Vec<&str> = o.stderr.lines().collect();
    assert_eq!(errors.len(), 2, "{}", o.describe());
    assert!(
        errors[0].starts_with(&format!("leasehold: delete task {running}: "))
            && errors[0].ends_with("(failed precondition)"),
        "{}",
        errors[0]
    );
    assert!(errors[1].ends_with("(not found)"), "{}", errors[1]);
    assert_eq!(task_row(&db.pool, running).await.unwrap(), row);
    assert_eq!(attempt_rows_of(&db.pool, running).await, 2);
    assert_eq!(task_status(&db.pool, bystander).await.unwrap(), "dead");
    assert_eq!(attempt_rows_of(&db.pool, bystander).await, 2);
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM tasks").await.unwrap(),
        2
    );

    let task = |id: i64| format!("task:{id}");
    assert_eq!(
        audit_after(&db.pool, seen).await.unwrap(),
        [
            audit("val", "viewer", "delete", &task(dead), "denied"),
            local("delete", &task(dead), "applied"),
            local("delete", &task(queued), "applied"),
            local("delete", &task(running), "failed"),
            local("delete", &task(dead), "failed"),
        ]
    );
    let detail: Option<String> = sqlx::query_scalar(
        "SELECT detail FROM audit_log WHERE action = 'delete' AND result = 'applied' \
         ORDER BY id LIMIT 1",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        detail.as_deref(),
        Some("deleted dead task of type email.send")
    );
    db.drop_db().await.unwrap();
}
