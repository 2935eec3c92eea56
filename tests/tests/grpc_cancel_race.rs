#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// These read the words (deprecated beside the state and outcome enums) that the agent still
// fills for older consoles: they keep checking that it does.
#![allow(deprecated)]
//! Cancel racing completion (TESTING.md T25): 1,000 short `sleep` tasks on two agents, each
//! cancelled (waiting for the outcome) at a random moment through a random one of the two
//! agents, so the call sometimes reaches the holder and sometimes the other agent, sometimes
//! before the claim, sometimes during the run and sometimes after the completion. Every task
//! ends exactly once, cancelled or succeeded; every caller is told which, and the answer agrees
//! with the database, the attempts and the audit log.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use leasehold_proto::v1 as pb;
use leasehold_tests::fleet::spawn_agent;
use leasehold_tests::grpc::{Client, agent_address, connect};
use leasehold_tests::{TestDb, wait_until};
use sqlx::PgPool;
use tokio::sync::Mutex;
use tonic::Code;

const TASKS: usize = 1000;
const IN_FLIGHT: usize = 16;
const WAIT: Duration = Duration::from_secs(30);

/// When the cancel is sent, relative to the task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Moment {
    /// Right after the enqueue answered.
    AtOnce,
    /// After a random 0–40 ms.
    Random,
    /// As soon as the database shows it claimed (or already finished).
    Claimed,
}

#[derive(Debug)]
struct Record {
    id: i64,
    /// Index of the agent that got the Cancel.
    called: usize,
    moment: Moment,
    answer: Result<pb::CancelResponse, (Code, String)>,
}

async fn wait_claimed(pool: &PgPool, id: i64) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let status: String = sqlx::query_scalar("SELECT status FROM tasks WHERE id = $1")
            .bind(id)
            .fetch_one(pool)
            .await
            .unwrap();
        if status != "queued" || tokio::time::Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn worker(
    pool: PgPool,
    clients: [Client; 2],
    next: Arc<AtomicUsize>,
    seed: u64,
    out: Arc<Mutex<Vec<Record>>>,
) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut clients = clients;
    while next.fetch_add(1, Ordering::Relaxed) < TASKS {
        // Mostly tiny runs; one in ten long enough for a cancel through the other agent to
        // reach the holder (at its next heartbeat) before the run ends.
        let ms = if rng.u8(0..10) == 0 {
            rng.u64(300..=1500)
        } else {
            rng.u64(0..=30)
        };
        // Some are due a little later, so a cancel can beat the claim (by the next poll).
        let delay_ms = if rng.u8(0..8) == 0 {
            rng.i64(0..=250)
        } else {
            0
        };
        let via = rng.usize(0..2);
        let id = clients[via]
            .enqueue(pb::EnqueueRequest {
                task_type: "sleep".into(),
                payload_json: format!("{{\"ms\":{ms}}}"),
                delay_ms,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .id;
        let moment = match rng.u8(0..4) {
            0 => Moment::AtOnce,
            1 => Moment::Random,
            _ => Moment::Claimed,
        };
        match moment {
            Moment::AtOnce => {}
            Moment::Random => tokio::time::sleep(Duration::from_millis(rng.u64(0..=40))).await,
            Moment::Claimed => wait_claimed(&pool, id).await,
        }
        let called = rng.usize(0..2);
        let answer = clients[called]
            .cancel(pb::CancelRequest {
                id,
                wait: true,
                wait_ms: 0,
            })
            .await
            .map(|r| r.into_inner())
            .map_err(|s| (s.code(), s.message().to_string()));
        out.lock().await.push(Record {
            id,
            called,
            moment,
            answer,
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_racing_completion_ends_each_task_once_and_tells_the_caller() {
    let db = TestDb::new().await.unwrap();
    let mut agents = Vec::new();
    let mut clients = Vec::new();
    let mut ids = Vec::new();
    for name in ["race-a", "race-b"] {
        let agent = spawn_agent("leasehold-agent", &db.url, name, "sleep", &[], Vec::new())
            .await
            .unwrap();
        agent.wait_registered(&db.pool, name, WAIT).await.unwrap();
        let addr = agent_address(&db.pool, name, WAIT).await.unwrap();
        let mut client = connect(&addr).await.unwrap();
        let id = client
            .list_agents(pb::ListAgentsRequest {})
            .await
            .unwrap()
            .into_inner()
            .answered_by;
        agents.push(agent);
        clients.push(client);
        ids.push(id);
    }
    let pool = db.pool_with(IN_FLIGHT as u32 + 2).await.unwrap();
    let next = Arc::new(AtomicUsize::new(0));
    let out = Arc::new(Mutex::new(Vec::new()));
    let seed = std::env::var("LEASEHOLD_RACE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    eprintln!("seed {seed} (LEASEHOLD_RACE_SEED to repeat)");
    let workers: Vec<_> = (0..IN_FLIGHT)
        .map(|w| {
            tokio::spawn(worker(
                pool.clone(),
                [clients[0].clone(), clients[1].clone()],
                Arc::clone(&next),
                seed.wrapping_add(w as u64),
                Arc::clone(&out),
            ))
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
    let records = std::mem::take(&mut *out.lock().await);
    assert_eq!(records.len(), TASKS);

    // Never stuck: every task reaches a terminal state.
    wait_until(
        "every task is terminal",
        Duration::from_secs(60),
        || async {
            let open: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM tasks WHERE status NOT IN \
             ('succeeded', 'partially_succeeded', 'cancelled', 'dead')",
            )
            .fetch_one(&db.pool)
            .await?;
            Ok(open == 0)
        },
    )
    .await
    .unwrap();

    // Each task: its status, attempt count and attempt outcomes.
    let rows: Vec<(i64, String, i32, i64, String)> = sqlx::query_as(
        "SELECT t.id, t.status, t.attempt, count(a.task_id), \
             coalesce(string_agg(a.outcome, ',' ORDER BY a.epoch), '') \
         FROM tasks t LEFT JOIN task_attempts a ON a.task_id = t.id \
         GROUP BY t.id, t.status, t.attempt ORDER BY t.id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), TASKS);
    let tasks: BTreeMap<i64, (String, i32, i64, String)> = rows
        .into_iter()
        .map(|(id, s, attempt, n, outcomes)| (id, (s, attempt, n, outcomes)))
        .collect();
    let mut problems = Vec::new();
    for (id, (status, attempt, n, outcomes)) in &tasks {
        if status != "cancelled" && status != "succeeded" {
            problems.push(format!("task {id} ended {status} ({outcomes})"));
        }
        if i64::from(*attempt) != *n {
            problems.push(format!(
                "task {id}: {attempt} claims but {n} attempt rows ({outcomes})"
            ));
        }
        let list: Vec<&str> = outcomes.split(',').filter(|o| !o.is_empty()).collect();
        match status.as_str() {
            "succeeded" if list.last() != Some(&"succeeded") || list.contains(&"cancelled") => {
                problems.push(format!(
                    "task {id} succeeded but its attempts say {outcomes}"
                ));
            }
            "cancelled" if list.contains(&"succeeded") => {
                problems.push(format!("task {id} is cancelled but an attempt succeeded"));
            }
            "cancelled" if *attempt > 0 && list.last() != Some(&"cancelled") => {
                problems.push(format!(
                    "task {id} is cancelled but its last attempt says {outcomes}"
                ));
            }
            _ => {}
        }
    }

    // Each answer is definite and agrees with the database.
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    let (mut while_running_here, mut while_running_elsewhere) = (0, 0);
    for r in &records {
        let (status, attempt, _, _) = &tasks[&r.id];
        let kind = match &r.answer {
            Ok(resp) => {
                let wire = pb::TaskStatus::try_from(resp.status)
                    .map(|s| s.as_str_name().to_string())
                    .unwrap_or_else(|_| resp.status.to_string());
                let definite = match resp.outcome.as_str() {
                    "cancelled" => {
                        status == "cancelled" && resp.status == pb::TaskStatus::Cancelled as i32
                    }
                    "succeeded" => {
                        status == "succeeded" && resp.status == pb::TaskStatus::Succeeded as i32
                    }
                    _ => false,
                };
                if !definite {
                    problems.push(format!(
                        "task {}: the caller was told {} ({wire}) but it ended {status}",
                        r.id, resp.outcome
                    ));
                }
                if resp.outcome == "cancelled" && *attempt > 0 {
                    if resp.holder.is_empty() {
                        problems.push(format!(
                            "task {}: cancelled after a claim, but no holder named",
                            r.id
                        ));
                    } else if resp.holder == ids[r.called] {
                        while_running_here += 1;
                    } else {
                        while_running_elsewhere += 1;
                    }
                }
                format!(
                    "{} (claimed: {})",
                    resp.outcome,
                    if *attempt > 0 { "yes" } else { "no" }
                )
            }
            Err((Code::FailedPrecondition, message)) => {
                if status != "succeeded" {
                    problems.push(format!(
                        "task {}: refused as finished ({message}) but it ended {status}",
                        r.id
                    ));
                }
                "finished first (failed precondition)".to_string()
            }
            Err((code, message)) => {
                problems.push(format!(
                    "task {}: no definite answer: {code:?} {message}",
                    r.id
                ));
                format!("{code:?}")
            }
        };
        *kinds.entry(format!("{kind} [{:?}]", r.moment)).or_default() += 1;
    }
    eprintln!("answers: {kinds:#?}");
    eprintln!(
        "cancelled while running: {while_running_here} through the holder, \
         {while_running_elsewhere} through the other agent"
    );

    // Exactly one audit row per Cancel call.
    let audit: Vec<(String, i64)> = sqlx::query_as(
        "SELECT target, count(*) FROM audit_log WHERE action = 'cancel' GROUP BY target",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let audit: BTreeMap<String, i64> = audit.into_iter().collect();
    for r in &records {
        let n = audit.get(&format!("task:{}", r.id)).copied().unwrap_or(0);
        if n != 1 {
            problems.push(format!("task {}: {n} cancel audit rows for one call", r.id));
        }
    }
    let total: i64 = audit.values().sum();
    if total != TASKS as i64 {
        problems.push(format!("{total} cancel audit rows for {TASKS} calls"));
    }

    assert!(
        problems.is_empty(),
        "{} problems (seed {seed}):\n{}",
        problems.len(),
        problems
            .iter()
            .take(40)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );

    // Positive controls: the race was really run from every side.
    let finished_first = records
        .iter()
        .filter(|r| {
            matches!(&r.answer, Err((Code::FailedPrecondition, _)))
                || matches!(&r.answer, Ok(a) if a.outcome == "succeeded")
        })
        .count();
    let before_claim = records
        .iter()
        .filter(|r| matches!(&r.answer, Ok(a) if a.outcome == "cancelled") && tasks[&r.id].1 == 0)
        .count();
    assert!(finished_first > 0, "some tasks finished before the cancel");
    assert!(before_claim > 0, "some tasks were cancelled before a claim");
    assert!(
        while_running_here > 0,
        "some were stopped by the holder that got the call"
    );
    assert!(
        while_running_elsewhere > 0,
        "some were stopped after a call to the other agent"
    );
    let per_agent: Vec<i64> =
        sqlx::query_scalar("SELECT count(*) FROM task_attempts GROUP BY agent ORDER BY agent")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(per_agent.len(), 2, "both agents ran tasks: {per_agent:?}");

    drop(clients);
    for mut agent in agents {
        agent.sigterm().unwrap();
        let status = agent.wait_exit(WAIT).await.unwrap();
        assert!(status.success(), "agent exit: {status}");
    }
    db.drop_db().await.unwrap();
}
