#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Issue 18 (hole 2), end to end: the leader dead-letters tasks of types no live agent serves,
//! and must judge every agent by that agent's own liveness deadline, not by the leader's TTL +
//! grace. A leader with a short TTL (2 s + 1 s grace, unserved after 1 s) and a worker with a
//! long heartbeat (5 s, TTL 12 s) and one slot, slow to reach its backlog: the worker's registry
//! heartbeat is often older than the leader's 3 s, yet nothing it serves is ever dead-lettered.
//! Positive controls: a task of a type nobody serves IS dead-lettered in the same run (the
//! leader's check runs), and the worker's registry heartbeat was seen older than the leader's
//! bound (the condition that used to kill its backlog really happened).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use leasehold_shared::store::NewTask;
use leasehold_shared::{Store, TaskType};
use leasehold_tests::fleet::spawn_agent;
use leasehold_tests::{TestDb, task_row, task_status, wait_until};
use serde_json::{Value, json};

/// The leader's own bound (fleet TTL 2 s + grace 1 s), in milliseconds.
const LEADER_STALE_MS: i64 = 3_000;
/// The worker's backlog: sleeps it reaches one at a time, over several of its heartbeats.
const BACKLOG: usize = 6;
const SLEEP_MS: u64 = 2_000;

async fn enqueue(db: &TestDb, task_type: &str, payload: Value) -> i64 {
    db.store()
        .task_enqueue(NewTask::new(TaskType::new(task_type).unwrap(), payload))
        .await
        .unwrap()
        .id
        .0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_beating_worker_keeps_its_backlog_while_a_fast_leader_checks_unserved_types() {
    let db = TestDb::new().await.unwrap();
    // The leader first, so it (not the worker) holds the leader row and runs the check.
    let leader = spawn_agent(
        "leasehold-agent",
        &db.url,
        "fast-leader",
        "noop",
        &["--unserved-after", "1s"],
        Vec::new(),
    )
    .await
    .unwrap();
    let leader_id = leader
        .wait_registered(&db.pool, "fast-leader", Duration::from_secs(30))
        .await
        .unwrap();
    wait_until("the fast agent leads", Duration::from_secs(30), || {
        let pool = db.pool.clone();
        let id = leader_id.clone();
        async move {
            let owner: Option<String> = sqlx::query_scalar(
                "SELECT owner FROM leader WHERE lease_until > clock_timestamp()",
            )
            .fetch_optional(&pool)
            .await?
            .flatten();
            Ok(owner.as_deref() == Some(id.as_str()))
        }
    })
    .await
    .unwrap();
    let worker = spawn_agent(
        "leasehold-agent",
        &db.url,
        "slow-worker",
        "sleep",
        &[
            "--heartbeat",
            "5s",
            "--lease-ttl",
            "12s",
            "--grace",
            "2s",
            "--concurrency",
            "1",
            "--unserved-after",
            "off",
        ],
        Vec::new(),
    )
    .await
    .unwrap();
    let worker_id = worker
        .wait_registered(&db.pool, "slow-worker", Duration::from_secs(30))
        .await
        .unwrap();

    let mut backlog = Vec::new();
    for _ in 0..BACKLOG {
        backlog.push(enqueue(&db, "sleep", json!({ "ms": SLEEP_MS })).await);
    }
    let orphan = enqueue(&db, "nobody.serves.this", json!({})).await;

    // Until the backlog is done: none of it may die, and watch the worker's registry age.
    let oldest_beat_ms = Arc::new(AtomicI64::new(0));
    wait_until(
        "the slow worker finished its whole backlog",
        Duration::from_secs(90),
        || {
            let pool = db.pool.clone();
            let backlog = backlog.clone();
            let worker_id = worker_id.clone();
            let oldest = Arc::clone(&oldest_beat_ms);
            async move {
                let age: f64 = sqlx::query_scalar(
                    "SELECT (extract(epoch FROM clock_timestamp() - heartbeat_at) * 1000)::float8 \
                     FROM agents WHERE id = $1",
                )
                .bind(&worker_id)
                .fetch_one(&pool)
                .await?;
                oldest.fetch_max(age as i64, Ordering::Relaxed);
                let mut done = 0;
                for id in &backlog {
                    match task_status(&pool, *id).await?.as_str() {
                        "succeeded" => done += 1,
                        "dead" => {
                            let row = task_row(&pool, *id).await?;
                            anyhow::bail!("a task the worker serves was dead-lettered: {row}");
                        }
                        _ => {}
                    }
                }
                Ok(done == backlog.len())
            }
        },
    )
    .await
    .unwrap();

    // Positive controls: the check ran, and the old bound would have judged the worker dead.
    wait_until(
        "the orphan is dead-lettered",
        Duration::from_secs(30),
        || {
            let pool = db.pool.clone();
            async move { Ok(task_status(&pool, orphan).await? == "dead") }
        },
    )
    .await
    .unwrap();
    let row = task_row(&db.pool, orphan).await.unwrap();
    assert_eq!(row["last_error"]["code"], "unknown_type", "{row}");
    let oldest = oldest_beat_ms.load(Ordering::Relaxed);
    assert!(
        oldest > LEADER_STALE_MS,
        "the worker's registry heartbeat never aged past the leader's {LEADER_STALE_MS} ms \
         (oldest {oldest} ms): the scenario did not happen"
    );
    let unknown: Vec<i64> = sqlx::query_scalar(
        "SELECT id FROM tasks WHERE last_error->>'code' = 'unknown_type' ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(unknown, vec![orphan], "only the orphan was judged unserved");
    drop((leader, worker));
    db.drop_db().await.unwrap();
}
