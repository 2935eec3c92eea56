#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `leasehold dlq purge` end to end (issue 26): a real agent on PostgreSQL, the `leasehold`
//! binary. The dry run lists the ids (paged) and changes nothing; the purge then deletes
//! exactly those dead tasks and their attempt rows; a viewer is refused (exit 4, a `denied`
//! row, nothing deleted); no filter is refused before any call (exit 2). Every call's audit row
//! is checked.

use leasehold_tests::calls::cli::{
    AuditRow, audit, audit_after, audit_len, desc, digest, fits, local, ok, refused, start,
};
use leasehold_tests::{TaskSpec, TestDb, count, insert_task, scratch_dir, task_status};
use serde_json::json;
use sqlx::PgPool;

const VIEWER: &str = "val-viewer-secret-fedcba987654321";

fn dead_spec(task_type: &str, code: &str) -> TaskSpec {
    TaskSpec {
        last_error: Some(
            json!({"code": code, "message": format!("{code} happened"), "retryable": false}),
        ),
        ..TaskSpec::new(task_type, "dead")
    }
}

/// A dead task with two earlier failed attempts in `task_attempt_rows`.
async fn dead_with_attempts(pool: &PgPool, task_type: &str, code: &str) -> i64 {
    let id = insert_task(pool, dead_spec(task_type, code)).await.unwrap();
    for epoch in 1..=2_i64 {
        sqlx::query(
            "INSERT INTO task_attempt_rows (task_id, epoch, attempt, agent, started_at, outcome) \
             VALUES ($1, $2, $2, 'old#1', now(), 'failed')",
        )
        .bind(id)
        .bind(epoch)
        .execute(pool)
        .await
        .unwrap();
    }
    id
}

async fn attempt_rows_of(pool: &PgPool, id: i64) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM task_attempt_rows WHERE task_id = $1")
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_dry_run_then_purge_viewer_refused_and_no_filter_refused() {
    let db = TestDb::new().await.unwrap();
    let config = scratch_dir("leasehold-cli-dlq-purge")
        .unwrap()
        .join("agent.toml");
    std::fs::write(
        &config,
        format!("[[tokens]]\nname = \"val\"\nrole = \"viewer\"\nsecret = {VIEWER:?}\n"),
    )
    .unwrap();
    // Serves only noop: nothing here is ever claimed.
    let f = start(
        &db,
        "purge",
        "noop",
        &["--config", config.to_str().unwrap()],
    )
    .await
    .unwrap();
    let val = f.cli.with_token(VIEWER);
    let mut boom = Vec::new();
    for _ in 0..3 {
        boom.push(dead_with_attempts(&db.pool, "email.send", "boom").await);
    }
    let other_code = dead_with_attempts(&db.pool, "email.send", "smtp_timeout").await;
    let other_type = dead_with_attempts(&db.pool, "report.build", "boom").await;
    let queued = insert_task(&db.pool, TaskSpec::new("email.send", "queued"))
        .await
        .unwrap();
    let boom = desc(boom);
    let target = "dead-letter queue";

    // No filter and no --all: refused before any call, nothing changed, no audit row.
    let before = digest(&db.pool).await.unwrap();
    let seen = audit_len(&db.pool).await.unwrap();
    let o = f.cli.run(&["dlq", "purge"]).await.unwrap();
    assert_eq!(
        refused(&o, 2),
        "leasehold: dlq purge: give a filter or --all (--type, --code, --since, --until)"
    );
    // --all with a filter, or a page without --dry-run: usage errors too.
    let o = f
        .cli
        .run(&["dlq", "purge", "--all", "--type", "email.send"])
        .await
        .unwrap();
    assert_eq!(o.code, Some(2), "{}", o.describe());
    let o = f
        .cli
        .run(&["dlq", "purge", "--all", "--limit", "2"])
        .await
        .unwrap();
    assert_eq!(o.code, Some(2), "{}", o.describe());
    assert_eq!(digest(&db.pool).await.unwrap(), before);
    assert_eq!(
        audit_after(&db.pool, seen).await.unwrap(),
        Vec::<AuditRow>::new()
    );

    // Dry run: the count and the ids, newest first; paged; nothing changed.
    let filter = ["--type", "email.send", "--code", "boom"];
    let dry = |extra: &[&str]| {
        let mut args = vec!["dlq", "purge", "--dry-run"];
        args.extend_from_slice(&filter);
        args.extend_from_slice(extra);
        args.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let run = |args: Vec<String>| {
        let cli = f.cli.clone();
        async move {
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            cli.run(&refs).await.unwrap()
        }
    };
    let o = run(dry(&[])).await;
    ok(&o);
    fits(&o);
    assert_eq!(
        o.stdout,
        format!(
            "would purge 3 dead tasks (dry run)\nids: {} {} {}\n",
            boom[0], boom[1], boom[2]
        )
    );
    let mut json_args = vec!["--output".to_owned(), "json".to_owned()];
    json_args.extend(dry(&["--limit", "2"]));
    let o = run(json_args).await;
    ok(&o);
    assert_eq!(
        o.json().unwrap(),
        json!({"count": 3, "dry_run": true, "ids": boom[..2], "next_before": boom[1]})
    );
    let o = run(dry(&["--limit", "2", "--before", &boom[1].to_string()])).await;
    ok(&o);
    assert_eq!(
        o.stdout,
        format!("would purge 3 dead tasks (dry run)\nids: {}\n", boom[2])
    );
    let o = run(dry(&["--limit", "1"])).await;
    ok(&o);
    assert_eq!(
        o.stdout,
        format!(
            "would purge 3 dead tasks (dry run)\nids: {}\nnext page: --before {}\n",
            boom[0], boom[0]
        )
    );
    assert_eq!(digest(&db.pool).await.unwrap(), before);

    // A viewer: refused (exit 4), audited as denied, nothing deleted.
    let mut viewer_args = vec!["dlq", "purge"];
    viewer_args.extend_from_slice(&filter);
    let o = val.run(&viewer_args).await.unwrap();
    assert!(
        refused(&o, 4).ends_with("(permission denied)"),
        "{}",
        o.describe()
    );
    assert_eq!(digest(&db.pool).await.unwrap(), before);

    // The purge: exactly the dry run's ids go, with their attempt rows.
    let o = f.cli.run(&viewer_args).await.unwrap();
    ok(&o);
    assert_eq!(o.stdout, "purged 3 dead tasks\n");
    for id in &boom {
        assert!(!exists(&db.pool, *id).await, "task {id} deleted");
        assert_eq!(
            attempt_rows_of(&db.pool, *id).await,
            0,
            "task {id}'s attempts"
        );
    }
    for id in [other_code, other_type] {
        assert_eq!(task_status(&db.pool, id).await.unwrap(), "dead");
        assert_eq!(attempt_rows_of(&db.pool, id).await, 2);
    }
    assert_eq!(task_status(&db.pool, queued).await.unwrap(), "queued");
    // Again: nothing matches; json.
    let mut again = vec!["--output", "json"];
    again.extend_from_slice(&viewer_args);
    let o = f.cli.run(&again).await.unwrap();
    ok(&o);
    assert_eq!(o.json().unwrap(), json!({"count": 0, "dry_run": false}));
    // --all takes the rest.
    let o = f.cli.run(&["dlq", "purge", "--all"]).await.unwrap();
    ok(&o);
    assert_eq!(o.stdout, "purged 2 dead tasks\n");
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM tasks WHERE status = 'dead'")
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM task_attempt_rows")
            .await
            .unwrap(),
        0
    );
    assert!(exists(&db.pool, queued).await);

    assert_eq!(
        audit_after(&db.pool, seen).await.unwrap(),
        [
            local("purge_dead_dry_run", target, "noop"),
            local("purge_dead_dry_run", target, "noop"),
            local("purge_dead_dry_run", target, "noop"),
            local("purge_dead_dry_run", target, "noop"),
            audit("val", "viewer", "purge_dead", target, "denied"),
            local("purge_dead", target, "applied"),
            local("purge_dead", target, "noop"),
            local("purge_dead", target, "applied"),
        ]
    );
    db.drop_db().await.unwrap();
}
