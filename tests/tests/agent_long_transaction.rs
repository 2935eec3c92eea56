#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! T13 (TESTING.md): a long transaction holds back vacuum. A `REPEATABLE READ` transaction
//! keeps its snapshot open on another connection while two agents churn through hundreds of
//! tasks, so every row version they leave behind stays. The test measures and reports claim
//! latency with and without it (never asserting on it beyond a generous sanity bound), proves
//! the snapshot really held vacuum back, and checks the agents kept working and the ledger.

use std::time::Duration;

use leasehold_tests::scenario::{
    FENCED_LOG, Figures, log_count_all, start_ledger_agents, wait_ledger_done,
};
use leasehold_tests::{TestDb, ledger, wait_until};
use serde_json::json;
use sqlx::{Connection, PgConnection, PgPool};

/// Tasks drained per phase.
const TASKS: usize = 400;
/// Single tasks enqueued one after another per phase, each picked up by an idle agent.
const PROBES: usize = 10;
/// Sanity bound of a phase.
const PHASE: Duration = Duration::from_secs(60);

/// What one phase measured, in milliseconds of database time.
#[derive(Debug, Clone, Copy)]
struct Latency {
    /// Enqueue to claim of a lone task with idle agents: median and max.
    probe_median: f64,
    probe_max: f64,
    /// Enqueue to claim over the bulk of tasks enqueued at once: median and 95th percentile.
    bulk_p50: f64,
    bulk_p95: f64,
    /// First enqueue to last completion of the bulk.
    drain: f64,
}

/// Pickup latencies (`started_at − created_at`) of `ids`: median, 95th percentile, max, and
/// the time from the first enqueue to the last finish.
async fn pickup(pool: &PgPool, ids: &[i64]) -> (f64, f64, f64, f64) {
    sqlx::query_as(
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), \
                percentile_cont(0.95) WITHIN GROUP (ORDER BY ms), max(ms), \
                extract(epoch FROM max(finished_at) - min(created_at))::float8 * 1000 \
         FROM (SELECT extract(epoch FROM started_at - created_at)::float8 * 1000 AS ms, \
                      created_at, finished_at \
               FROM tasks WHERE id = ANY($1)) x",
    )
    .bind(ids)
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn phase(pool: &PgPool) -> (Latency, Vec<i64>) {
    let mut probes = Vec::new();
    for _ in 0..PROBES {
        let id = ledger::enqueue(pool, "ledger", 1, json!({})).await.unwrap();
        wait_ledger_done(pool, PHASE).await.unwrap();
        probes.extend(id);
    }
    let bulk = ledger::enqueue(pool, "ledger", TASKS, json!({}))
        .await
        .unwrap();
    wait_ledger_done(pool, PHASE).await.unwrap();
    let (probe_median, _, probe_max, _) = pickup(pool, &probes).await;
    let (bulk_p50, bulk_p95, _, drain) = pickup(pool, &bulk).await;
    let ids = probes.into_iter().chain(bulk).collect();
    let latency = Latency {
        probe_median,
        probe_max,
        bulk_p50,
        bulk_p95,
        drain,
    };
    (latency, ids)
}

/// Runs `VACUUM tasks` and returns the dead row versions it had to leave.
async fn vacuum_leaves(pool: &PgPool) -> i64 {
    sqlx::raw_sql("VACUUM tasks").execute(pool).await.unwrap();
    sqlx::query_scalar("SELECT coalesce(sum(n_dead_tup), 0)::bigint FROM pg_stat_user_tables WHERE relid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'tasks'::regclass)")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t13_a_long_transaction_holding_back_vacuum() {
    let db = TestDb::new().await.unwrap();
    ledger::install(&db.pool).await.unwrap();
    let mut agents = start_ledger_agents(&db, &["t13-a", "t13-b"], 8)
        .await
        .unwrap();
    let (without, _) = phase(&db.pool).await;

    // The long transaction: a snapshot taken now and kept while the agents churn.
    let mut holder = PgConnection::connect(&db.url).await.unwrap();
    let holder_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut holder)
        .await
        .unwrap();
    sqlx::raw_sql("BEGIN ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut holder)
        .await
        .unwrap();
    let seen_before: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks")
        .fetch_one(&mut holder)
        .await
        .unwrap();
    let (with, held_ids) = phase(&db.pool).await;

    // Positive control: the snapshot was held all along, and vacuum could not clean behind it.
    let seen_after: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks")
        .fetch_one(&mut holder)
        .await
        .unwrap();
    assert_eq!(seen_after, seen_before, "the snapshot moved");
    let holding: bool = sqlx::query_scalar(
        "SELECT backend_xmin IS NOT NULL AND state = 'idle in transaction' \
         FROM pg_stat_activity WHERE pid = $1",
    )
    .bind(holder_pid)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(holding, "the long transaction holds no snapshot");
    let dead_held = vacuum_leaves(&db.pool).await;
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut holder)
        .await
        .unwrap();
    holder.close().await.unwrap();
    let dead_released = vacuum_leaves(&db.pool).await;
    assert!(
        dead_held >= TASKS as i64 && dead_released < dead_held,
        "VACUUM left {dead_held} dead row versions with the snapshot held and {dead_released} \
         after: the snapshot did not hold vacuum back"
    );

    // The agents kept working, both of them, with no lease lost, through the held phase.
    let owners: i64 = sqlx::query_scalar(
        "SELECT count(DISTINCT lease_owner) FROM tasks WHERE id = ANY($1) AND status = 'succeeded'",
    )
    .bind(&held_ids)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        owners, 2,
        "an agent stopped working under the long transaction"
    );
    let report = ledger::expect_all_succeeded(&db.pool).await.unwrap();
    assert_eq!(report.succeeded, 2 * (TASKS + PROBES) as u64, "{report:?}");
    assert_eq!(report.extra_executions, 0, "{report:?}");
    assert_eq!(report.lease_expired_attempts, 0, "{report:?}");
    let fenced = log_count_all(&agents, FENCED_LOG);
    assert_eq!(fenced, 0);
    for agent in &mut agents {
        assert!(agent.is_running(), "{}", agent.log_tail(40));
    }
    // The agents keep working after the transaction ended, too.
    ledger::enqueue(&db.pool, "ledger", 1, json!({}))
        .await
        .unwrap();
    wait_until("a task after the release", PHASE, || {
        let pool = db.pool.clone();
        async move { Ok(leasehold_tests::scenario::unfinished_ledger_tasks(&pool).await? == 0) }
    })
    .await
    .unwrap();
    let report = ledger::expect_all_succeeded(&db.pool).await.unwrap();
    let figures = Figures::collect(&db.pool, "T13", &report, 1, fenced)
        .await
        .unwrap();
    assert!(figures.clean(), "{figures:?}");
    let show = |l: &Latency| {
        format!(
            "lone-task pickup median {:.1} ms (max {:.1}), bulk of {TASKS} pickup p50 {:.1} ms \
             p95 {:.1} ms, drained in {:.0} ms",
            l.probe_median, l.probe_max, l.bulk_p50, l.bulk_p95, l.drain
        )
    };
    eprintln!(
        "t13: claim latency without a long transaction: {}",
        show(&without)
    );
    eprintln!(
        "t13: claim latency with a REPEATABLE READ snapshot held: {}",
        show(&with)
    );
    eprintln!(
        "t13: VACUUM left {dead_held} dead row versions of tasks with the snapshot held, \
         {dead_released} after it ended; {report:?}"
    );
    eprintln!("{}", figures.line());
    drop(agents);
    db.drop_db().await.unwrap();
}
