#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Slow compared with history, on real agents over real gRPC (issue 24): an agent that never
//! ran a type reads the fleet's recent successful runs of it from the database, flags a task
//! that runs past their p95 and says so in the Watch delta and the lease (what the console's
//! Slow view shows); when the type's fixed slow threshold is the lower limit, that rule fires
//! and the delta says so instead.

use std::time::{Duration, Instant};

use leasehold_proto::v1 as pb;
use leasehold_tests::calls::cli::ok;
use leasehold_tests::cli::Cli;
use leasehold_tests::fleet::start_agent;
use leasehold_tests::grpc::{Client, connect};
use leasehold_tests::{TestDb, wait_until};

const WAIT: Duration = Duration::from_secs(60);

async fn enqueue_sleep(db: &TestDb, n: i64, ms: i64) -> Vec<i64> {
    sqlx::query_scalar(
        "INSERT INTO tasks (task_type, payload) SELECT 'sleep', jsonb_build_object('ms', $2::bigint) \
         FROM generate_series(1, $1) RETURNING id",
    )
    .bind(n)
    .bind(ms)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

async fn count_succeeded(db: &TestDb) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM tasks WHERE status = 'succeeded'")
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// Follows the agent's Watch stream until task `id` is flagged slow: the delta, and how long
/// after `since` it came.
async fn slow_delta(client: &Client, id: i64, since: Instant) -> (pb::SlowTask, Duration) {
    let mut client = client.clone();
    let mut stream = client
        .watch(pb::WatchRequest {})
        .await
        .unwrap()
        .into_inner();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let update = tokio::time::timeout_at(deadline, stream.message())
            .await
            .expect("no slow delta in time")
            .unwrap()
            .expect("the stream ended");
        for delta in update.deltas {
            if let Some(pb::delta::Kind::Slow(s)) = delta.kind
                && s.task_id == id
            {
                return (s, since.elapsed());
            }
        }
    }
}

/// The lease of task `id` in a new Watch snapshot.
async fn snapshot_lease(client: &Client, id: i64) -> pb::Lease {
    let mut client = client.clone();
    let mut stream = client
        .watch(pb::WatchRequest {})
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap();
    first
        .snapshot
        .unwrap()
        .leases
        .into_iter()
        .find(|l| l.task_id == id)
        .expect("the task is held")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_past_its_types_p95_is_flagged_by_history_and_the_delta_says_which_rule() {
    let db = TestDb::new().await.unwrap();
    // The history: 24 runs of 1.2 s on one agent, which then leaves.
    let (mut first, _) = start_agent(&db, "hist-first", "sleep", &["--concurrency", "30"], vec![])
        .await
        .unwrap();
    enqueue_sleep(&db, 24, 1_200).await;
    wait_until("24 sleeps succeeded", WAIT, || async {
        Ok(count_succeeded(&db).await == 24)
    })
    .await
    .unwrap();
    first.sigterm().unwrap();
    first.wait_exit(WAIT).await.unwrap();

    // A new agent has no run of its own: it reads the fleet's from the database.
    let (agent, addr) = start_agent(&db, "hist-second", "sleep", &[], vec![])
        .await
        .unwrap();
    let client = connect(&addr).await.unwrap();
    let since = Instant::now();
    let id = enqueue_sleep(&db, 1, 6_000).await[0];
    let (slow, after) = slow_delta(&client, id, since).await;
    assert_eq!(
        slow.rule,
        i32::from(pb::SlowRule::History),
        "{slow:?}\n{}",
        agent.log_tail(30)
    );
    assert_eq!(slow.history_runs, 24, "{slow:?}");
    // The p95 of 24 runs of 1.2 s (claim to completion, database clock).
    assert!(
        (1_200..2_500).contains(&slow.limit_ms),
        "p95 {} ms",
        slow.limit_ms
    );
    assert!(slow.running_ms >= slow.limit_ms, "{slow:?}");
    // Long before the default threshold of a minute.
    assert!(after < Duration::from_secs(30), "flagged after {after:?}");
    // The lease carries the rule, for watchers that connect later (the console's Slow view).
    let lease = snapshot_lease(&client, id).await;
    assert!(lease.slow);
    assert_eq!(lease.slow_rule, i32::from(pb::SlowRule::History));
    assert_eq!(
        (lease.slow_limit_ms, lease.slow_history_runs),
        (slow.limit_ms, 24)
    );
    wait_until("the long sleep succeeded", WAIT, || async {
        Ok(count_succeeded(&db).await == 25)
    })
    .await
    .unwrap();

    // A fixed threshold under the p95: that rule fires, and the delta says so.
    let cli = Cli::new(&addr).await.unwrap();
    ok(&cli
        .run(&["policy", "set", "sleep", "--slow-after", "1s"])
        .await
        .unwrap());
    // The agent reads policies every heartbeat (400 ms here).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let since = Instant::now();
    let id = enqueue_sleep(&db, 1, 4_000).await[0];
    let (slow, _) = slow_delta(&client, id, since).await;
    assert_eq!(slow.rule, i32::from(pb::SlowRule::Threshold), "{slow:?}");
    assert_eq!((slow.limit_ms, slow.history_runs), (1_000, 0), "{slow:?}");

    // Both counted by rule in the agent's log line.
    let log = agent.stderr_text().unwrap() + &agent.stdout_text().unwrap();
    assert!(
        log.contains("slow task") && log.contains("history") && log.contains("threshold"),
        "{}",
        agent.log_tail(40)
    );
    db.drop_db().await.unwrap();
}
