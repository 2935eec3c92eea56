#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Issue 20 item 8: `leasehold cancel ID…` sends each cancel to the agent holding the task and
//! runs them concurrently.
//!
//! How concurrency is proved without timing anything: five `exec` tasks, held by two agents
//! that are not the one the CLI talks to, run a program that ignores SIGTERM and exits only
//! when the test creates a gate file (the agents' stop grace and SIGKILL delay are far longer
//! than the test). A waiting cancel of such a task cannot end before the gate opens. A serial
//! CLI therefore has at most one task `cancel_requested` at any moment (the next cancel starts
//! only when the previous task is terminal); a concurrent one has all five. The test waits for
//! all five rows to be `cancel_requested` at once, then opens the gate. Routing is proved by
//! the holders' logs: only an agent that serves the Cancel of its own task logs that an
//! operator's cancel is stopping the execution (otherwise it stops at its next heartbeat).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use leasehold_tests::cli::Cli;
use leasehold_tests::fleet::spawn_registered;
use leasehold_tests::grpc::agent_address;
use leasehold_tests::{AgentHandle, TaskSpec, TestDb, insert_task, scratch_dir, wait_until};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);
/// What an agent logs when it serves the Cancel of a task it holds.
const STOPPED_BY_CALL: &str = "cancel requested by an operator: stopping the execution";

async fn start(db: &TestDb, name: &str, handlers: &str, extra: &[&str]) -> (AgentHandle, String) {
    spawn_registered(db, name, handlers, extra).await.unwrap()
}

fn log(agent: &AgentHandle) -> String {
    format!(
        "{}{}",
        agent.stdout_text().unwrap_or_default(),
        agent.stderr_text().unwrap_or_default()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancels_of_tasks_held_elsewhere_run_concurrently_each_sent_to_its_holder() {
    let db = TestDb::new().await.unwrap();
    let gate = scratch_dir("cancel-gate").unwrap().join("open");
    // Two holders of at most 3 tasks each, so five tasks land on both; they wait for a stopped
    // program far longer than this test.
    let holding = [
        "--exec-allow",
        "/bin/sh",
        "--concurrency",
        "3",
        "--stop-grace",
        "300s",
        "--exec-kill-after",
        "300s",
    ];
    let (a, a_id) = start(&db, "holder-a", "exec", &holding).await;
    let (b, b_id) = start(&db, "holder-b", "exec", &holding).await;
    // The agent the CLI talks to runs no exec task.
    let (_seed, _) = start(&db, "seed", "noop", &[]).await;
    let cli = Cli::new(&agent_address(&db.pool, "seed", WAIT).await.unwrap())
        .await
        .unwrap();

    let script = format!(
        "trap '' TERM; while [ ! -e '{}' ]; do sleep 0.05; done",
        gate.display()
    );
    let mut ids = Vec::new();
    for _ in 0..5 {
        let payload = json!({"argv": ["/bin/sh", "-c", script]});
        ids.push(
            insert_task(&db.pool, TaskSpec::new("exec", "queued").payload(payload))
                .await
                .unwrap(),
        );
    }
    let owners = |pool: sqlx::PgPool, wanted: &'static str| async move {
        let rows: Vec<(i64, String, Option<String>)> =
            sqlx::query_as("SELECT id, status, lease_owner FROM tasks ORDER BY id")
                .fetch_all(&pool)
                .await?;
        Ok::<_, anyhow::Error>(
            rows.into_iter()
                .filter(|(_, s, _)| s == wanted)
                .map(|(id, _, owner)| (id, owner.unwrap_or_default()))
                .collect::<BTreeMap<i64, String>>(),
        )
    };
    wait_until("all five tasks are running", WAIT, || {
        let pool = db.pool.clone();
        async move { Ok(owners(pool, "running").await?.len() == 5) }
    })
    .await
    .unwrap();
    let held = owners(db.pool.clone(), "running").await.unwrap();
    let on_a = held.values().filter(|o| **o == a_id).count();
    let on_b = held.values().filter(|o| **o == b_id).count();
    assert_eq!(
        (on_a + on_b, on_a > 0, on_b > 0),
        (5, true, true),
        "{held:?}"
    );

    // Cancel all five, waiting for each to end.
    let mut args = vec![
        "--output".to_string(),
        "json".into(),
        "cancel".into(),
        "--wait-timeout".into(),
        "300s".into(),
    ];
    args.extend(ids.iter().map(i64::to_string));
    let started = Instant::now();
    let cancel = {
        let cli = cli.clone();
        tokio::spawn(async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            cli.run(&args).await.unwrap()
        })
    };

    // Concurrent: every task is cancel_requested at the same moment (serially at most one
    // ever is, since none can end before the gate opens).
    let all_requested = wait_until("all five tasks are cancel_requested at once", WAIT, || {
        let pool = db.pool.clone();
        async move { Ok(owners(pool, "cancel_requested").await?.len() == 5) }
    })
    .await;
    let requested_after = started.elapsed();
    // The holders were told by the calls themselves (not yet at a heartbeat): wait until each
    // has stopped its executions before the programs may exit, so they end cancelled. Without
    // routing this never happens; the assertions below then say so.
    let told = wait_until(
        "the holders stopped their tasks",
        Duration::from_secs(20),
        || {
            let told =
                log(&a).matches(STOPPED_BY_CALL).count() + log(&b).matches(STOPPED_BY_CALL).count();
            async move { Ok(told == 5) }
        },
    )
    .await;
    std::fs::write(&gate, b"").unwrap();
    let o = cancel.await.unwrap();
    let took = started.elapsed();
    eprintln!(
        "five cancels: all requested after {requested_after:?}, the CLI ended after {took:?}"
    );
    all_requested.unwrap();
    if let Err(e) = told {
        eprintln!("{e:#}");
    }

    // Each answered once, in the order given, cancelled by its holder.
    assert_eq!(o.code, Some(0), "{}", o.describe());
    assert_eq!(o.stderr, "", "{}", o.describe());
    let answers = o.json_lines().unwrap();
    let want: Vec<_> = ids
        .iter()
        .map(|id| json!({"id": id, "outcome": "cancelled", "status": "cancelled", "holder": held[id]}))
        .collect();
    assert_eq!(answers, want, "{}", o.describe());

    // Routed: each holder served the Cancel of each of its own tasks.
    for (agent, n) in [(&a, on_a), (&b, on_b)] {
        let text = log(agent);
        assert_eq!(
            text.matches(STOPPED_BY_CALL).count(),
            n,
            "{} holds {n} tasks:\n{}",
            agent.label(),
            agent.log_tail(40)
        );
    }
    db.drop_db().await.unwrap();
}
