#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Snoozes and checkpoints on real agents (issue 24): a Rust handler snoozes a task three
//! times and it ends succeeded on attempt 1 with 3 snoozes (`leasehold tasks show --output
//! json`); an `exec` script snoozes by exit code and counts its runs in its checkpoint; a
//! checkpoint saved before a `kill -9` of the agent is handed to the next attempt on another
//! agent, for a Rust handler and for `exec`.

use std::time::Duration;

use leasehold_tests::calls::cli::ok;
use leasehold_tests::cli::Cli;
use leasehold_tests::fleet::spawn_test_agent;
use leasehold_tests::grpc::agent_address;
use leasehold_tests::{TaskSpec, TestDb, insert_task, wait_until};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

/// The task as `leasehold tasks show ID --output json` prints it.
async fn show(cli: &Cli, id: i64) -> Value {
    let o = cli
        .run(&["tasks", "show", &id.to_string(), "--output", "json"])
        .await
        .unwrap();
    ok(&o);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    if v.get("task").is_some() {
        v["task"].clone()
    } else {
        v
    }
}

async fn status(pool: &sqlx::PgPool, id: i64) -> String {
    sqlx::query_scalar("SELECT status::text FROM tasks WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn wait_status(pool: &sqlx::PgPool, id: i64, want: &'static str) {
    wait_until(&format!("task {id} is {want}"), WAIT, || {
        let pool = pool.clone();
        async move { Ok(status(&pool, id).await == want) }
    })
    .await
    .unwrap();
}

async fn checkpoint(pool: &sqlx::PgPool, id: i64) -> Option<Value> {
    sqlx::query_scalar::<_, Option<sqlx::types::Json<Value>>>(
        "SELECT checkpoint::jsonb FROM tasks WHERE id = $1",
    )
    .bind(id)
    .fetch_one(pool)
    .await
    .unwrap()
    .map(|j| j.0)
}

async fn cli_for(db: &TestDb, name: &str) -> Cli {
    let addr = agent_address(&db.pool, name, WAIT).await.unwrap();
    Cli::new(&addr).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snoozes_leave_the_attempt_unused_for_rust_and_exec_handlers() {
    let db = TestDb::new().await.unwrap();
    let agent = spawn_test_agent(
        &db.url,
        "snoozing",
        "snoozer,exec",
        &["--exec-allow", "/bin/sh"],
    )
    .await
    .unwrap();
    agent
        .wait_registered(&db.pool, "snoozing", WAIT)
        .await
        .unwrap();
    let cli = cli_for(&db, "snoozing").await;

    let rust = insert_task(
        &db.pool,
        TaskSpec::new("snoozer", "queued").payload(json!({"times": 3, "ms": 50})),
    )
    .await
    .unwrap();
    // Counts its runs in its checkpoint; asks to snooze (exit 75) until the third.
    let script = r#"n=$(printf %s "$LEASEHOLD_CHECKPOINT" | tr -cd 0-9); n=$(( ${n:-0} + 1 ))
echo "LEASEHOLD_CHECKPOINT {\"runs\": $n}"
if [ "$n" -lt 3 ]; then exit 75; fi
echo "done after $n runs""#;
    let exec = insert_task(
        &db.pool,
        TaskSpec::new("exec", "queued").payload(json!({
            "argv": ["/bin/sh", "-c", script],
            "snooze_exit": 75,
            "snooze_for": "50ms",
        })),
    )
    .await
    .unwrap();
    wait_status(&db.pool, rust, "succeeded").await;
    wait_status(&db.pool, exec, "succeeded").await;

    let task = show(&cli, rust).await;
    assert_eq!(
        (&task["attempt"], &task["snoozes"], &task["result"]),
        (&json!(1), &json!(3), &json!({"attempt": 1, "snoozes": 3})),
        "{task}"
    );
    let task = show(&cli, exec).await;
    assert_eq!(
        (&task["attempt"], &task["snoozes"], &task["checkpoint"]),
        (&json!(1), &json!(2), &json!({"runs": 3})),
        "{task}"
    );
    let stdout = task["result"]["stdout_tail"].as_str().unwrap_or_default();
    assert!(stdout.contains("done after 3 runs"), "{task}");
    // The history holds every run, the snoozed ones as such.
    let outcomes: Vec<String> =
        sqlx::query_scalar("SELECT outcome FROM task_attempts WHERE task_id = $1 ORDER BY epoch")
            .bind(exec)
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(outcomes, ["snoozed", "snoozed", "succeeded"]);
    drop(agent);
    db.drop_db().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_saved_before_a_kill9_reaches_the_next_attempt() {
    let db = TestDb::new().await.unwrap();
    let flags = ["--exec-allow", "/bin/sh"];
    let victim = spawn_test_agent(&db.url, "victim", "checkpointer,exec", &flags)
        .await
        .unwrap();
    let victim_id = victim
        .wait_registered(&db.pool, "victim", WAIT)
        .await
        .unwrap();
    let rust = insert_task(
        &db.pool,
        TaskSpec::new("checkpointer", "queued").payload(json!({"steps": 40, "step_ms": 150})),
    )
    .await
    .unwrap();
    // Saves a checkpoint, then works (sleeps) until killed; the next attempt prints what it got.
    let script = r#"if [ -n "$LEASEHOLD_CHECKPOINT" ]; then echo "resumed from $LEASEHOLD_CHECKPOINT"; exit 0; fi
echo 'LEASEHOLD_CHECKPOINT {"phase": "half"}'
sleep 60"#;
    let exec = insert_task(
        &db.pool,
        TaskSpec::new("exec", "queued").payload(json!({"argv": ["/bin/sh", "-c", script]})),
    )
    .await
    .unwrap();
    wait_until("both checkpoints are saved", WAIT, || {
        let pool = db.pool.clone();
        async move {
            let step = checkpoint(&pool, rust)
                .await
                .and_then(|c| c["step"].as_u64())
                .unwrap_or(0);
            Ok(step >= 3 && checkpoint(&pool, exec).await.is_some())
        }
    })
    .await
    .unwrap();
    victim.kill9().unwrap();
    let mut victim = victim;
    victim.wait_exit(Duration::from_secs(10)).await.unwrap();
    // Nothing writes after the kill: this is what the next attempt must get.
    let saved = checkpoint(&db.pool, rust).await.unwrap();
    assert_eq!(
        checkpoint(&db.pool, exec).await,
        Some(json!({"phase": "half"}))
    );

    let rescuer = spawn_test_agent(&db.url, "rescuer", "checkpointer,exec", &flags)
        .await
        .unwrap();
    rescuer
        .wait_registered(&db.pool, "rescuer", WAIT)
        .await
        .unwrap();
    wait_status(&db.pool, rust, "succeeded").await;
    wait_status(&db.pool, exec, "succeeded").await;
    let cli = cli_for(&db, "rescuer").await;
    let task = show(&cli, rust).await;
    assert_eq!(
        task["result"],
        json!({"started_from": saved["step"], "attempt": 2}),
        "{task}"
    );
    assert_eq!(task["checkpoint"], json!({"step": 40}));
    let task = show(&cli, exec).await;
    let stdout = task["result"]["stdout_tail"].as_str().unwrap_or_default();
    assert!(
        stdout.contains(r#"resumed from {"phase":"half"}"#),
        "{task}"
    );
    // Positive control: the first attempts were the victim's, ended by recovery.
    let expired: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM task_attempts WHERE agent = $1 AND outcome = 'lease_expired'",
    )
    .bind(&victim_id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(expired, 2);
    drop(rescuer);
    db.drop_db().await.unwrap();
}
