#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Cancel, requeue and the dead-letter queue end to end through the `leasehold` binary
//! (DESIGN §9): each test checks the exit code, stdout (the table and `--output json`), then
//! the rows in `tasks` and `task_attempts` and the `audit_log` rows the calls left — actor,
//! role, action, target and result of every one, and nothing else.

use leasehold_tests::calls::cli::{
    AuditRow, WAIT, audit_after, audit_len, desc, digest, enqueue, fits, local, ok, page_ids,
    refused, start, wait_status,
};
use leasehold_tests::{
    TaskSpec, TestDb, attempt_rows, audit_rows, count, insert_task, task_row, task_status,
    wait_until,
};
use serde_json::json;

// -------------------------------------------------------------------------------------------
// cancel
// -------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_waiting_and_running_tasks_and_refuses_finished_ones() {
    let db = TestDb::new().await.unwrap();
    let f = start(&db, "cancel", "sleep", &[]).await.unwrap();

    // A queued task: cancelled at once.
    let queued = insert_task(&db.pool, TaskSpec::new("report.build", "queued"))
        .await
        .unwrap();
    let o = f.cli.run(&["cancel", &queued.to_string()]).await.unwrap();
    ok(&o);
    assert_eq!(o.stdout, format!("task {queued}: cancelled\n"));
    let row = task_row(&db.pool, queued).await.unwrap();
    assert_eq!(row["status"], "cancelled");
    assert!(!row["finished_at"].is_null());

    // A running sleep: stopped by its holder, the attempt ends cancelled.
    let running = enqueue(&f.cli, "sleep", &json!({"ms": 600_000}))
        .await
        .unwrap();
    wait_status(&db.pool, running, "running").await.unwrap();
    let o = f
        .cli
        .run(&["--output", "json", "cancel", &running.to_string()])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(
        o.json().unwrap(),
        json!({"id": running, "outcome": "cancelled", "status": "cancelled", "holder": f.id})
    );
    let row = task_row(&db.pool, running).await.unwrap();
    assert_eq!(row["status"], "cancelled");
    assert!(!row["finished_at"].is_null());
    assert_eq!(
        attempt_rows(&db.pool, running).await.unwrap(),
        [(1, f.id.clone(), "cancelled".to_string())]
    );
    // The sleep really stopped: the agent reports no active execution.
    let agent_id = f.id.clone();
    wait_until("the agent has no active execution", WAIT, || {
        let pool = db.pool.clone();
        let agent_id = agent_id.clone();
        async move {
            let active: i32 = sqlx::query_scalar("SELECT active FROM agents WHERE id = $1")
                .bind(&agent_id)
                .fetch_one(&pool)
                .await?;
            Ok(active == 0)
        }
    })
    .await
    .unwrap();

    // A finished task is information, not a failure: exit 0, "already succeeded", nothing
    // changed; the agent's refusal is still audited (`failed`).
    let done = insert_task(&db.pool, TaskSpec::new("report.build", "succeeded"))
        .await
        .unwrap();
    let before = task_row(&db.pool, done).await.unwrap();
    let o = f.cli.run(&["cancel", &done.to_string()]).await.unwrap();
    assert_eq!(o.code, Some(0), "{}", o.describe());
    assert_eq!(o.stdout, format!("task {done} already succeeded\n"));
    assert_eq!(task_row(&db.pool, done).await.unwrap(), before);
    // Cancelling the cancelled one again says so the same way.
    let again = f.cli.run(&["cancel", &queued.to_string()]).await.unwrap();
    assert_eq!(again.code, Some(0), "{}", again.describe());
    assert_eq!(again.stdout, format!("task {queued} already cancelled\n"));

    // Several ids: each is tried, the exit code is the worst; an unknown id is not found.
    let second = insert_task(&db.pool, TaskSpec::new("report.build", "queued"))
        .await
        .unwrap();
    let o = f
        .cli
        .run(&["cancel", &second.to_string(), &done.to_string(), "999999"])
        .await
        .unwrap();
    assert_eq!(o.code, Some(2), "{}", o.describe());
    assert_eq!(
        o.stdout,
        format!("task {second}: cancelled\ntask {done} already succeeded\n")
    );
    let errors: Vec<&str> = o.stderr.lines().collect();
    assert_eq!(errors.len(), 1, "{}", o.describe());
    assert!(errors[0].starts_with("leasehold: cancel task 999999: "));
    assert!(errors[0].ends_with("(not found)"));
    assert_eq!(task_status(&db.pool, second).await.unwrap(), "cancelled");
    assert_eq!(task_row(&db.pool, done).await.unwrap(), before);

    let mut rows = audit_rows(&db.pool).await.unwrap();
    // The last call's cancels ran concurrently: their rows may come in any order.
    let mut last = rows.split_off(5);
    last.sort();
    assert_eq!(
        rows,
        [
            local("cancel", &format!("task:{queued}"), "applied"),
            local("enqueue", &format!("task:{running}"), "applied"),
            local("cancel", &format!("task:{running}"), "applied"),
            local("cancel", &format!("task:{done}"), "failed"),
            local("cancel", &format!("task:{queued}"), "failed"),
        ]
    );
    let mut want = vec![
        local("cancel", &format!("task:{second}"), "applied"),
        local("cancel", &format!("task:{done}"), "failed"),
        local("cancel", "task:999999", "failed"),
    ];
    want.sort();
    assert_eq!(last, want);
    db.drop_db().await.unwrap();
}

// -------------------------------------------------------------------------------------------
// requeue / dlq
// -------------------------------------------------------------------------------------------

fn dead_spec(task_type: &str, code: &str) -> TaskSpec {
    TaskSpec {
        last_error: Some(
            json!({"code": code, "message": format!("{code} happened"), "retryable": false}),
        ),
        ..TaskSpec::new(task_type, "dead")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeue_and_the_dead_letter_queue() {
    let db = TestDb::new().await.unwrap();
    // Serves only noop: requeued tasks stay queued.
    let f = start(&db, "dlq", "noop", &[]).await.unwrap();
    let mut smtp = Vec::new();
    for _ in 0..3 {
        smtp.push(
            insert_task(&db.pool, dead_spec("email.send", "smtp_timeout"))
                .await
                .unwrap(),
        );
    }
    let email_boom = insert_task(&db.pool, dead_spec("email.send", "boom"))
        .await
        .unwrap();
    let mut report_boom = Vec::new();
    for _ in 0..2 {
        report_boom.push(
            insert_task(&db.pool, dead_spec("report.build", "boom"))
                .await
                .unwrap(),
        );
    }
    let alive = insert_task(&db.pool, TaskSpec::new("email.send", "queued"))
        .await
        .unwrap();

    // requeue one dead task: back to queued.
    let one = smtp[0];
    let o = f.cli.run(&["requeue", &one.to_string()]).await.unwrap();
    ok(&o);
    assert_eq!(o.stdout, format!("task {one}: requeued (was dead)\n"));
    let row = task_row(&db.pool, one).await.unwrap();
    assert_eq!(row["status"], "queued");
    assert_eq!(row["attempt"], 0);
    assert!(row["finished_at"].is_null());
    // Again (it is queued now): what was asked is so already: exit 0, said, nothing changed.
    let o = f
        .cli
        .run(&["--output", "json", "requeue", &one.to_string()])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(
        o.json().unwrap(),
        json!({"id": one, "outcome": "already_waiting", "status": "queued"})
    );
    let o = f.cli.run(&["requeue", &one.to_string()]).await.unwrap();
    ok(&o);
    assert_eq!(o.stdout, format!("task {one} already queued\n"));
    assert_eq!(task_row(&db.pool, one).await.unwrap(), row);
    // JSON of a requeue.
    let two = smtp[1];
    let o = f
        .cli
        .run(&["--output", "json", "requeue", &two.to_string()])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(o.json().unwrap(), json!({"id": two, "previous": "dead"}));

    // dlq ls: dead tasks only, by type and by code.
    let dlq = |args: &'static [&'static str]| {
        let cli = f.cli.clone();
        async move {
            let mut full = vec!["--output", "json", "dlq", "ls"];
            full.extend_from_slice(args);
            let o = cli.run(&full).await.unwrap();
            ok(&o);
            let page = o.json().unwrap();
            for t in page["tasks"].as_array().unwrap() {
                assert_eq!(t["status"], "dead", "{t}");
            }
            page_ids(&page).unwrap()
        }
    };
    let remaining = desc(vec![smtp[2], email_boom, report_boom[0], report_boom[1]]);
    assert_eq!(dlq(&[]).await, remaining);
    assert_eq!(
        dlq(&["--type", "email.send"]).await,
        desc(vec![smtp[2], email_boom])
    );
    assert_eq!(
        dlq(&["--code", "boom"]).await,
        desc(vec![email_boom, report_boom[0], report_boom[1]])
    );
    assert_eq!(
        dlq(&["--type", "report.build", "--code", "boom"]).await,
        desc(report_boom.clone())
    );
    let o = f.cli.run(&["dlq", "ls"]).await.unwrap();
    ok(&o);
    fits(&o);
    let lines = o.lines();
    assert!(
        lines[0].starts_with("ID") && lines[0].contains("CODE"),
        "{}",
        o.describe()
    );
    assert_eq!(lines.len(), 1 + remaining.len(), "{}", o.describe());
    assert!(
        lines.iter().any(|l| l.contains("smtp_timeout")),
        "{}",
        o.describe()
    );

    // --dry-run: the count and the ids, newest first; nothing changed.
    let before = digest(&db.pool).await.unwrap();
    let o = f
        .cli
        .run(&["dlq", "requeue", "--dry-run", "--code", "boom"])
        .await
        .unwrap();
    ok(&o);
    let boom = desc(vec![email_boom, report_boom[0], report_boom[1]]);
    let listed: Vec<String> = boom.iter().map(i64::to_string).collect();
    assert_eq!(
        o.stdout,
        format!(
            "would requeue 3 dead tasks (dry run)\nids: {}\n",
            listed.join(" ")
        )
    );
    let o = f
        .cli
        .run(&[
            "--output",
            "json",
            "dlq",
            "requeue",
            "--dry-run",
            "--code",
            "boom",
        ])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(
        o.json().unwrap(),
        json!({"count": 3, "dry_run": true, "ids": boom, "next_before": null})
    );
    // Paged: --limit 2, then the next page from its hint.
    let o = f
        .cli
        .run(&[
            "--output",
            "json",
            "dlq",
            "requeue",
            "--dry-run",
            "--code",
            "boom",
            "--limit",
            "2",
        ])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(
        o.json().unwrap(),
        json!({"count": 3, "dry_run": true, "ids": boom[..2], "next_before": boom[1]})
    );
    let o = f
        .cli
        .run(&[
            "dlq",
            "requeue",
            "--dry-run",
            "--code",
            "boom",
            "--limit",
            "2",
            "--before",
            &boom[1].to_string(),
        ])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(
        o.stdout,
        format!("would requeue 3 dead tasks (dry run)\nids: {}\n", boom[2])
    );
    assert_eq!(digest(&db.pool).await.unwrap(), before);

    // No filter and no --all: refused before any call, nothing changed.
    let seen = audit_len(&db.pool).await.unwrap();
    let o = f.cli.run(&["dlq", "requeue"]).await.unwrap();
    assert_eq!(
        refused(&o, 2),
        "leasehold: dlq requeue: give a filter or --all (--type, --code, --since, --until)"
    );
    assert_eq!(digest(&db.pool).await.unwrap(), before);
    assert_eq!(
        audit_after(&db.pool, seen).await.unwrap(),
        Vec::<AuditRow>::new()
    );

    // --code and --type: exactly the matching rows move.
    let o = f
        .cli
        .run(&["dlq", "requeue", "--code", "boom", "--type", "report.build"])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(o.stdout, "requeued 2 dead tasks\n");
    for id in &report_boom {
        assert_eq!(task_status(&db.pool, *id).await.unwrap(), "queued");
    }
    assert_eq!(task_status(&db.pool, email_boom).await.unwrap(), "dead");
    assert_eq!(task_status(&db.pool, smtp[2]).await.unwrap(), "dead");

    // --all: everything left.
    let o = f
        .cli
        .run(&["--output", "json", "dlq", "requeue", "--all"])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(o.json().unwrap(), json!({"count": 2, "dry_run": false}));
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM tasks WHERE status = 'dead'")
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM tasks WHERE status = 'queued'"
        )
        .await
        .unwrap(),
        7
    );
    assert_eq!(task_status(&db.pool, alive).await.unwrap(), "queued");
    // Nothing left: a no-op.
    let o = f.cli.run(&["dlq", "requeue", "--all"]).await.unwrap();
    ok(&o);
    assert_eq!(o.stdout, "requeued 0 dead tasks\n");
    let o = f.cli.run(&["dlq", "ls"]).await.unwrap();
    ok(&o);
    assert_eq!(o.stdout, "no dead tasks\n");

    let dlq_target = "dead-letter queue";
    assert_eq!(
        audit_rows(&db.pool).await.unwrap(),
        [
            local("requeue", &format!("task:{one}"), "applied"),
            local("requeue", &format!("task:{one}"), "failed"),
            local("requeue", &format!("task:{one}"), "failed"),
            local("requeue", &format!("task:{two}"), "applied"),
            local("requeue_dead_dry_run", dlq_target, "noop"),
            local("requeue_dead_dry_run", dlq_target, "noop"),
            local("requeue_dead_dry_run", dlq_target, "noop"),
            local("requeue_dead_dry_run", dlq_target, "noop"),
            local("requeue_dead", dlq_target, "applied"),
            local("requeue_dead", dlq_target, "applied"),
            local("requeue_dead", dlq_target, "noop"),
        ]
    );
    db.drop_db().await.unwrap();
}
