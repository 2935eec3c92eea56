#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! TESTING.md T10 (issue 18, hole 1): PostgreSQL crashes (`pg_ctl stop -m immediate`) right
//! after claims. Every claim and completion acknowledged before the crash is still there after
//! it, and no epoch of a task is handed out twice.
//!
//! The private clusters run with a 10 s `wal_writer_delay` and autovacuum off, so WAL that a
//! commit did not flush itself stays in shared memory — and is lost in the crash — for
//! seconds, not the default 200 ms. A claim that committed without waiting for its WAL flush
//! (`synchronous_commit = off`) would be lost in every round here.
//!
//! - The store test claims through [`PgStore`] and crashes the server the moment the claim
//!   returns, with nothing else writing: the claimed rows must still be `running` under the
//!   epochs the claim returned.
//! - The agent test (T10 proper) runs two real agents and crashes the server right after each
//!   claim burst, while every execution of the burst is in flight. The handlers log their
//!   executions to a database on the shared server, which does not crash and whose commits
//!   cannot flush the cluster's WAL; the log is copied into the cluster's database for the
//!   final ledger check.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use leasehold_shared::store::postgres::{PgStore, PgStoreOptions};
use leasehold_shared::store::{CompleteOutcome, CompleteParams, Completion, NewTask};
use leasehold_shared::{LeaseKey, Store, TaskId};
use leasehold_tests::cluster::test_pool;
use leasehold_tests::fleet::spawn_agent;
use leasehold_tests::helpers::{claim, tt};
use leasehold_tests::scenario::DATABASE_FAILURE_LOGS;
use leasehold_tests::{AgentHandle, PgCluster, TestDb, ledger, wait_until};
use serde_json::json;
use sqlx::PgPool;

/// Server settings that keep unflushed WAL in shared memory for seconds.
const WIDE_CRASH_WINDOW: &[&str] = &["wal_writer_delay=10000ms", "autovacuum=off"];

// ---------------------------------------------------------------------------------------------
// The store alone

/// A claim acknowledged by `PgStore::task_claim` survives a crash that follows at once, and a
/// completion acknowledged before it too. Three rounds, each: enqueue, claim and complete a
/// batch, claim a second batch, crash, restart, read every row back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t10_store_an_acknowledged_claim_survives_an_immediate_stop() {
    const ROUNDS: usize = 3;
    const BATCH: u32 = 20;
    let mut cluster = PgCluster::start_with(WIDE_CRASH_WINDOW).await.unwrap();
    let url = cluster
        .create_migrated_database("leasehold_t10_store")
        .await
        .unwrap();
    let mut completed: Vec<(TaskId, i64)> = Vec::new();
    let mut claimed: Vec<(TaskId, i64)> = Vec::new();
    for round in 0..ROUNDS {
        let store = PgStore::connect(&url, PgStoreOptions::default())
            .await
            .unwrap();
        let tasks = (0..BATCH * 2)
            .map(|i| NewTask::new(tt("durable"), json!({"round": round, "i": i})))
            .collect();
        store.task_enqueue_many(tasks).await.unwrap();
        let first = store
            .task_claim(claim("durable-agent#1", &["durable"], BATCH))
            .await
            .unwrap();
        assert_eq!(first.tasks.len(), BATCH as usize);
        let batch = first
            .tasks
            .iter()
            .map(|t| CompleteParams {
                key: LeaseKey {
                    id: t.id,
                    owner: t.lease_owner.clone().unwrap(),
                    epoch: t.lease_epoch,
                },
                completion: Completion::Succeeded { result: None },
            })
            .collect();
        let outcomes = store.task_complete_many(batch).await.unwrap();
        assert!(
            outcomes
                .iter()
                .all(|o| matches!(o, CompleteOutcome::Applied { .. })),
            "{outcomes:?}"
        );
        completed.extend(first.tasks.iter().map(|t| (t.id, t.lease_epoch.0)));
        // The last commit before the crash: this claim.
        let second = store
            .task_claim(claim("durable-agent#1", &["durable"], BATCH))
            .await
            .unwrap();
        cluster.stop_immediate().await.unwrap();
        assert_eq!(second.tasks.len(), BATCH as usize);
        claimed.extend(second.tasks.iter().map(|t| (t.id, t.lease_epoch.0)));
        store.close().await;
        cluster.start_again().await.unwrap();

        let pool = test_pool(&url).await.unwrap();
        let rows: Vec<(i64, String, i64, Option<String>)> =
            sqlx::query_as("SELECT id, status, lease_epoch, lease_owner FROM tasks")
                .fetch_all(&pool)
                .await
                .unwrap();
        pool.close().await;
        let rows: HashMap<i64, (String, i64, Option<String>)> = rows
            .into_iter()
            .map(|(id, status, epoch, owner)| (id, (status, epoch, owner)))
            .collect();
        let mut lost = Vec::new();
        for (id, epoch) in &claimed {
            let (status, now_epoch, owner) = &rows[&id.0];
            if !(status == "running"
                && now_epoch == epoch
                && owner.as_deref() == Some("durable-agent#1"))
            {
                lost.push(format!(
                    "task {} claimed at epoch {epoch}: after the crash {status} at epoch \
                     {now_epoch} owned by {owner:?}",
                    id.0
                ));
            }
        }
        for (id, epoch) in &completed {
            let (status, now_epoch, _) = &rows[&id.0];
            if !(status == "succeeded" && now_epoch == epoch) {
                lost.push(format!(
                    "task {} completed at epoch {epoch}: after the crash {status} at epoch \
                     {now_epoch}",
                    id.0
                ));
            }
        }
        assert!(
            lost.is_empty(),
            "round {round}: {} acknowledged writes lost in the crash:\n{}",
            lost.len(),
            lost.join("\n")
        );
    }
    drop(cluster);
}

// ---------------------------------------------------------------------------------------------
// Real agents

/// Every ledger task's (status, epoch), in one read-only snapshot (no WAL of its own).
async fn ledger_states(pool: &PgPool) -> anyhow::Result<HashMap<i64, (String, i64)>> {
    let rows: Vec<(i64, String, i64)> = sqlx::query_as(
        "SELECT t.id, t.status, t.lease_epoch FROM test_ledger l JOIN tasks t ON t.id = l.task_id",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(id, status, epoch)| (id, (status, epoch)))
        .collect())
}

/// Tasks of `ids` whose status is in `statuses`, or -1 while the database does not answer.
async fn count_in(pool: &PgPool, ids: &[i64], statuses: &[&str]) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM tasks WHERE id = ANY($1) AND status = ANY($2)")
        .bind(ids)
        .bind(statuses)
        .fetch_one(pool)
        .await
        .unwrap_or(-1)
}

/// Each task's state before the crash that the crash took back: a claim or completion that
/// was visible to another session (so committed, and acknowledged or about to be) is gone.
fn rolled_back(
    before: &HashMap<i64, (String, i64)>,
    after: &HashMap<i64, (String, i64)>,
) -> Vec<String> {
    let mut lost: Vec<String> = before
        .iter()
        .filter_map(|(id, (status, epoch))| {
            let (now_status, now_epoch) = after.get(id)?;
            let undone = now_epoch < epoch
                || (status == "succeeded" && (now_status != "succeeded" || now_epoch != epoch));
            undone.then(|| {
                format!(
                    "task {id}: {status} at epoch {epoch} before the crash, {now_status} at \
                     epoch {now_epoch} after it"
                )
            })
        })
        .collect();
    lost.extend(
        before
            .keys()
            .filter(|id| !after.contains_key(id))
            .map(|id| format!("task {id} is gone after the crash")),
    );
    lost.sort();
    lost
}

/// Lines of the agent's stderr where a database call failed (any of them shows it saw the
/// crash).
fn failure_lines(agent: &AgentHandle) -> Vec<String> {
    agent
        .stderr_text()
        .unwrap()
        .lines()
        .filter(|line| DATABASE_FAILURE_LOGS.iter().any(|n| line.contains(n)))
        .map(str::to_string)
        .collect()
}

/// T10: two agents; four rounds of a claim burst of 24 tasks (1.5 s of work each) followed at
/// once by `pg_ctl stop -m immediate` and a start. After each restart no claim or completion
/// that was visible before the crash is undone; after the drain every task ran exactly once
/// (the leases are long enough to outlast the outage, so nothing needs re-running) and no
/// `(task, epoch)` executed twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t10_postgres_crash_right_after_claim_bursts_loses_no_acknowledged_write() {
    const ROUNDS: usize = 4;
    const BURST: usize = 24;
    let mut cluster = PgCluster::start_with(WIDE_CRASH_WINDOW).await.unwrap();
    let (url, pool) = cluster
        .migrated_database_pool("leasehold_t10")
        .await
        .unwrap();
    ledger::install(&pool).await.unwrap();
    let log_db = TestDb::new().await.unwrap();
    ledger::install(&log_db.pool).await.unwrap();

    // A 30 s lease renewed every 10 s, and maintenance (the leader's renewal) every 10 s: the
    // holders keep their leases through the outage, and the agents' own periodic commits
    // (which would flush the claim's WAL with theirs) come seconds apart, not every 200 ms.
    // Claims are woken by NOTIFY, so the long poll interval does not slow them.
    let mut agents = Vec::new();
    for name in ["t10-a", "t10-b"] {
        let agent = spawn_agent(
            "leasehold-test-agent",
            &url,
            name,
            "ledger",
            &[
                "--concurrency",
                "32",
                "--lease-ttl",
                "30s",
                "--heartbeat",
                "10s",
                "--poll-interval",
                "10s",
            ],
            vec![("LEASEHOLD_TEST_LEDGER_URL".into(), log_db.url.clone())],
        )
        .await
        .unwrap();
        agent
            .wait_registered(&pool, name, Duration::from_secs(20))
            .await
            .unwrap();
        agents.push(agent);
    }

    let mut in_flight_at_crashes = Vec::new();
    let mut outages = Vec::new();
    let mut completed_before_crashes = Vec::new();
    for round in 0..ROUNDS {
        let ids = ledger::enqueue(&pool, "ledger", BURST, json!({"ms": 1500}))
            .await
            .unwrap();
        wait_until(
            &format!("round {round}: the burst is claimed"),
            Duration::from_secs(20),
            || {
                let pool = pool.clone();
                let ids = ids.clone();
                async move { Ok(count_in(&pool, &ids, &["running"]).await == BURST as i64) }
            },
        )
        .await
        .unwrap();
        let before = ledger_states(&pool).await.unwrap();
        cluster.stop_immediate().await.unwrap();
        let crashed = Instant::now();
        cluster.start_again().await.unwrap();
        outages.push(crashed.elapsed());
        let after = ledger_states(&pool).await.unwrap();
        let lost = rolled_back(&before, &after);
        assert!(
            lost.is_empty(),
            "round {round}: {} acknowledged claims or completions undone by the crash:\n{}",
            lost.len(),
            lost.join("\n")
        );
        in_flight_at_crashes.push(before.values().filter(|(s, _)| s == "running").count());
        completed_before_crashes.push(before.values().filter(|(s, _)| s == "succeeded").count());
        wait_until(
            &format!("round {round}: the burst is done"),
            Duration::from_secs(60),
            || {
                let pool = pool.clone();
                let ids = ids.clone();
                async move { Ok(count_in(&pool, &ids, &["succeeded"]).await == BURST as i64) }
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e:#}; end of t10-a's stderr:\n{}", agents[0].log_tail(40)));
    }

    let copied = ledger::copy_executions(&log_db.pool, &pool).await.unwrap();
    let report = ledger::expect_all_succeeded(&pool).await.unwrap();
    let tasks = (ROUNDS * BURST) as u64;
    assert_eq!(report.succeeded, tasks, "{report:?}");
    assert_eq!(report.executions, tasks, "one execution each: {report:?}");
    assert_eq!(report.extra_executions, 0, "{report:?}");
    assert_eq!(report.successes_without_execution, 0, "{report:?}");
    assert_eq!(copied as u64, tasks);

    // Positive control: every crash hit a whole burst in flight, every crash after the first
    // came after acknowledged completions, and the agents saw the server go.
    assert!(
        in_flight_at_crashes.iter().all(|n| *n == BURST),
        "executions in flight at each crash: {in_flight_at_crashes:?}"
    );
    assert!(
        completed_before_crashes
            .iter()
            .enumerate()
            .all(|(round, n)| *n == round * BURST),
        "tasks completed before each crash: {completed_before_crashes:?}"
    );
    let saw_it: Vec<String> = agents.iter().flat_map(failure_lines).collect();
    assert!(
        !saw_it.is_empty(),
        "no agent logged a failed database call across {ROUNDS} crashes"
    );
    for agent in &mut agents {
        assert!(agent.is_running(), "{} exited", agent.label());
    }
    eprintln!(
        "t10: {report:?}; {ROUNDS} crashes, in flight at each {in_flight_at_crashes:?}, \
         outages {outages:?}; {} agent log lines about the crashes",
        saw_it.len()
    );
    drop(agents);
    pool.close().await;
    drop(cluster);
    log_db.drop_db().await.unwrap();
}
