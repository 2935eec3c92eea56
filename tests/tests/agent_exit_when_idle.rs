#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `leasehold-agent run --exit-when-idle` as CI uses it (issue 20, item 1): real agent
//! processes against PostgreSQL, read through their exit codes and `--output json` summaries.
//! Idle means nothing of the agent's types queued, in retry_wait or running: retries are waited
//! for; `--idle-timeout` bounds the wait (exit 4, naming what remains); dead and cancelled tasks
//! of its types fail the run whoever ran them, so a rerun fails too; tasks of types no live
//! agent serves are reported and not waited for.

use std::time::Duration;

use leasehold_shared::store::NewTask;
use leasehold_shared::{Store, TaskType};
use leasehold_tests::fleet::spawn_agent;
use leasehold_tests::{TestDb, task_status};
use serde_json::{Value, json};

async fn enqueue(db: &TestDb, task_type: &str, payload: Value, max_attempts: i32) -> i64 {
    db.store()
        .task_enqueue(
            NewTask::new(TaskType::new(task_type).unwrap(), payload)
                .with_max_attempts(max_attempts),
        )
        .await
        .unwrap()
        .id
        .0
}

/// Runs one agent to its end: (exit code, JSON summary, stderr).
async fn run(db: &TestDb, handlers: &str, extra: &[&str]) -> (i32, Value, String) {
    let mut args = vec![
        "--exit-when-idle",
        "--output",
        "json",
        "--unserved-after",
        "off",
    ];
    args.extend_from_slice(extra);
    let mut agent = spawn_agent(
        "leasehold-agent",
        &db.url,
        "ci",
        handlers,
        &args,
        Vec::new(),
    )
    .await
    .unwrap();
    let status = agent.wait_exit(Duration::from_secs(90)).await.unwrap();
    let stdout = agent.stdout_text().unwrap();
    let stderr = agent.stderr_text().unwrap();
    let line = stdout
        .lines()
        .last()
        .unwrap_or_else(|| panic!("no summary: {stderr}"));
    let summary: Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"));
    (status.code().unwrap_or(-1), summary, stderr)
}

fn ids(v: &Value) -> Vec<i64> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect()
}

/// The scenario: a retryable failure, an `exec` that exits non-zero and a task of a
/// type no agent serves. The agent waits out the retries (it used to exit at once leaving them
/// in retry_wait), exits 1 naming the dead tasks, reports the unserved one; a rerun against the
/// same database exits 1 again; `--idle-since 0s` limits the verdict to this run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_out_retries_fails_on_dead_tasks_and_a_rerun_fails_too() {
    let db = TestDb::new().await.unwrap();
    // Retries after about a second: long enough that an agent which does not wait for
    // retry_wait exits first.
    for scope in ["fail", "exec"] {
        sqlx::query(
            "INSERT INTO policies (scope, retry_base_ms, retry_multiplier, retry_max_ms, retry_jitter) \
             VALUES ($1, 1500, 1, 1500, 0)",
        )
        .bind(scope)
        .execute(&db.pool)
        .await
        .unwrap();
    }
    let ok = enqueue(&db, "noop", json!({}), 1).await;
    let flaky = enqueue(
        &db,
        "fail",
        json!({"code": "flaky", "message": "try again", "retryable": true}),
        3,
    )
    .await;
    let exec = enqueue(&db, "exec", json!({"argv": ["/bin/false"]}), 2).await;
    let orphan = enqueue(&db, "no.such.type", json!({}), 1).await;

    let handlers = "noop,fail,exec";
    let exec_allow = ["--exec-allow", "/bin/false"];
    let (code, s, stderr) = run(&db, handlers, &exec_allow).await;
    assert_eq!(code, 1, "{s}\n{stderr}");
    assert_eq!(s["ended_by"], "idle", "{s}");
    assert_eq!(s["idle_timeout"], false, "{s}");
    assert_eq!(s["pending"], 0, "no retry left waiting: {s}");
    assert!(ids(&s["pending_ids"]).is_empty(), "{s}");
    let mut dead = vec![flaky, exec];
    dead.sort_unstable();
    assert_eq!(ids(&s["dead_ids"]), dead, "{s}");
    assert_eq!(ids(&s["failed_ids"]), dead, "{s}");
    assert_eq!(s["ended_badly"], 2, "{s}");
    assert_eq!(ids(&s["unserved_ids"]), vec![orphan], "{s}");
    assert_eq!(s["unserved_types"][0]["task_type"], "no.such.type", "{s}");
    assert!(stderr.contains("no live agent serves"), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "dead ids [{}]",
            dead.iter()
                .map(i64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )),
        "{stderr}"
    );
    assert_eq!(task_status(&db.pool, flaky).await.unwrap(), "dead");
    assert_eq!(task_status(&db.pool, exec).await.unwrap(), "dead");
    assert_eq!(task_status(&db.pool, ok).await.unwrap(), "succeeded");
    let attempts: i64 = sqlx::query_scalar("SELECT attempt::bigint FROM tasks WHERE id = $1")
        .bind(flaky)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(attempts, 3, "every retry ran before the exit");

    // A rerun claims nothing, and still fails: the dead tasks of its types remain.
    let (code, s, stderr) = run(&db, handlers, &exec_allow).await;
    assert_eq!(code, 1, "{s}\n{stderr}");
    assert_eq!(s["claimed"], 0, "{s}");
    assert_eq!(ids(&s["dead_ids"]), dead, "{s}");

    // Limited to this run, the old dead letters do not count.
    let (code, s, stderr) = run(
        &db,
        handlers,
        &[&exec_allow[..], &["--idle-since", "0s"]].concat(),
    )
    .await;
    assert_eq!(code, 0, "{s}\n{stderr}");
    assert_eq!(s["ended_badly"], 0, "{s}");
    db.drop_db().await.unwrap();
}

/// A retry whose backoff outlasts `--idle-timeout`: exit 4, naming the task and its state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_timeout_exits_4_and_names_what_remains() {
    let db = TestDb::new().await.unwrap();
    // The default backoff (30 s) keeps the retry waiting well past the timeout.
    let flaky = enqueue(
        &db,
        "fail",
        json!({"code": "flaky", "message": "later", "retryable": true}),
        3,
    )
    .await;
    let (code, s, stderr) = run(&db, "fail", &["--idle-timeout", "2s"]).await;
    assert_eq!(code, 4, "{s}\n{stderr}");
    assert_eq!(s["ended_by"], "idle_timeout", "{s}");
    assert_eq!(s["idle_timeout"], true, "{s}");
    assert_eq!(s["pending"], 1, "{s}");
    assert_eq!(ids(&s["pending_ids"]), vec![flaky], "{s}");
    assert_eq!(s["remaining"][0]["status"], "retry_wait", "{s}");
    assert_eq!(s["remaining"][0]["task_type"], "fail", "{s}");
    assert!(stderr.contains("1 retry_wait fail"), "{stderr}");
    assert!(stderr.contains(&format!("ids {flaky}")), "{stderr}");
    assert_eq!(task_status(&db.pool, flaky).await.unwrap(), "retry_wait");
    db.drop_db().await.unwrap();
}

/// A task that fails once and then is requeued to succeed does not fail the run: only tasks of
/// our types that are dead or cancelled now count, and a cancelled one does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_tasks_that_ended_badly_fail_the_run() {
    let db = TestDb::new().await.unwrap();
    let done = enqueue(&db, "noop", json!({}), 1).await;
    let (code, s, stderr) = run(&db, "noop", &[]).await;
    assert_eq!(code, 0, "{s}\n{stderr}");
    assert_eq!(s["ended_badly"], 0, "{s}");
    assert_eq!(task_status(&db.pool, done).await.unwrap(), "succeeded");
    // A cancelled task of our types, ended by no agent at all, fails the next run.
    let cancelled = enqueue(&db, "noop", json!({}), 1).await;
    sqlx::query("UPDATE tasks SET status = 'cancelled', finished_at = now() WHERE id = $1")
        .bind(cancelled)
        .execute(&db.pool)
        .await
        .unwrap();
    let (code, s, stderr) = run(&db, "noop", &[]).await;
    assert_eq!(code, 1, "{s}\n{stderr}");
    assert_eq!(ids(&s["cancelled_ids"]), vec![cancelled], "{s}");
    db.drop_db().await.unwrap();
}
