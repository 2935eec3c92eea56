#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Per-key concurrency end to end (issue 23): `leasehold concurrency set 1 --type sleep
//! --per-key` on three live agents, 20 tenants with 5 tasks each (some enqueued through
//! `leasehold enqueue --concurrency-key`). The ledger of attempt intervals (database time) shows
//! no two tasks of one key overlapping while the keys run side by side; a tenant with a long
//! backlog enqueued first does not hold the others back; the change is audited.

use std::collections::BTreeMap;
use std::time::Duration;

use leasehold_tests::calls::cli::{local, ok, start};
use leasehold_tests::{TestDb, audit_rows, wait_until};

const KEYS: i64 = 20;
const PER_KEY: i64 = 5;

/// `(key, started µs, finished µs, agent)` of every attempt of type `sleep`.
async fn ledger(pool: &sqlx::PgPool) -> Vec<(String, i64, i64, String)> {
    sqlx::query_as(
        "SELECT t.concurrency_key, (extract(epoch FROM a.started_at) * 1e6)::bigint,
                (extract(epoch FROM a.finished_at) * 1e6)::bigint, a.agent
         FROM task_attempts a JOIN tasks t ON t.id = a.task_id
         WHERE t.task_type = 'sleep' ORDER BY 2",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// The most intervals `[start, end)` covering one instant.
fn most_at_once(spans: &[(i64, i64)]) -> usize {
    let mut edges: Vec<(i64, i32)> = spans
        .iter()
        .flat_map(|(s, e)| [(*s, 1), (*e, -1)])
        .collect();
    edges.sort_unstable();
    let (mut now, mut best) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        best = best.max(now);
    }
    usize::try_from(best).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_agents_run_one_task_per_key_and_twenty_keys_at_once() {
    let db = TestDb::new().await.unwrap();
    let a = start(&db, "key-a", "sleep", &["--concurrency", "10"])
        .await
        .unwrap();
    let _b = start(&db, "key-b", "sleep", &["--concurrency", "10"])
        .await
        .unwrap();
    let _c = start(&db, "key-c", "sleep", &["--concurrency", "10"])
        .await
        .unwrap();
    let o = a
        .cli
        .run(&["concurrency", "set", "1", "--type", "sleep", "--per-key"])
        .await
        .unwrap();
    ok(&o);

    // Tenant 00's whole backlog first, through the CLI, then everyone else's in one insert.
    for _ in 0..PER_KEY {
        let o = a
            .cli
            .run(&[
                "enqueue",
                "sleep",
                "--payload",
                r#"{"ms": 150}"#,
                "--concurrency-key",
                "tenant-00",
            ])
            .await
            .unwrap();
        ok(&o);
    }
    sqlx::query(
        "INSERT INTO tasks (task_type, payload, concurrency_key)
         SELECT 'sleep', '{\"ms\": 150}', format('tenant-%s', lpad(k::text, 2, '0'))
         FROM generate_series(1, $1 - 1) k, generate_series(1, $2) n",
    )
    .bind(KEYS)
    .bind(PER_KEY)
    .execute(&db.pool)
    .await
    .unwrap();
    wait_until("every keyed task succeeds", Duration::from_secs(60), || {
        let pool = db.pool.clone();
        async move {
            let done: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM tasks WHERE task_type = 'sleep' AND status = 'succeeded'",
            )
            .fetch_one(&pool)
            .await?;
            Ok(done == KEYS * PER_KEY)
        }
    })
    .await
    .unwrap();

    let rows = ledger(&db.pool).await;
    assert_eq!(
        rows.len(),
        (KEYS * PER_KEY) as usize,
        "one attempt per task"
    );
    let mut by_key: BTreeMap<&str, Vec<(i64, i64)>> = BTreeMap::new();
    for (key, s, e, _) in &rows {
        by_key.entry(key.as_str()).or_default().push((*s, *e));
    }
    assert_eq!(by_key.len(), KEYS as usize);
    for (key, spans) in &by_key {
        assert_eq!(
            most_at_once(spans),
            1,
            "two tasks of {key} overlapped: {spans:?}"
        );
    }
    let all: Vec<(i64, i64)> = rows.iter().map(|(_, s, e, _)| (*s, *e)).collect();
    let parallel = most_at_once(&all);
    assert!(
        parallel >= 15,
        "at most {parallel} keys ran at once; twenty could"
    );
    // Tenant 00's backlog was first in the queue, yet every other tenant started its first
    // task before tenant 00 started its third.
    let t00: Vec<i64> = by_key["tenant-00"].iter().map(|(s, _)| *s).collect();
    let third_of_00 = t00[2];
    for (key, spans) in &by_key {
        let first = spans.iter().map(|(s, _)| *s).min().unwrap();
        assert!(
            first < third_of_00,
            "{key} waited behind tenant-00's backlog"
        );
    }
    let agents: std::collections::BTreeSet<&str> =
        rows.iter().map(|(_, _, _, a)| a.as_str()).collect();
    assert!(agents.len() >= 2, "one agent ran everything: {agents:?}");
    eprintln!(
        "ledger: {} attempts over {} keys, no overlap within a key, {parallel} keys at once, \
         {} agents",
        rows.len(),
        by_key.len(),
        agents.len()
    );
    assert_eq!(
        audit_rows(&db.pool)
            .await
            .unwrap()
            .into_iter()
            .filter(|r| r.2 == "policy_set")
            .collect::<Vec<_>>(),
        vec![local("policy_set", "policy:sleep", "applied")]
    );
    db.drop_db().await.unwrap();
}
