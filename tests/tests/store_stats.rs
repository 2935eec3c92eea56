//! The backlog reads (issue 26) read the live partition and indexes, not history: with
//! 100,000 queued tasks and 100,000 finished ones (most of them days old), the plans of
//! `task_overview.sql` (with its oldest waiting age) and `task_stats.sql` on PostgreSQL scan no
//! finished partition and no attempts table sequentially, and the finished rows they read are
//! the last hour's, found through `tasks_all_finished_idx` / the failed-attempts index by
//! `finished_at`. The waiting rows are read from tasks_live alone (its claim indexes, or the
//! whole partition when the backlog is most of it: the planner's cheaper choice).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use leasehold_shared::Store;
use leasehold_tests::TestDb;
use sqlx::Row;

/// Every node of `plan`: (node type, relation, index, actual rows).
fn nodes(plan: &serde_json::Value, out: &mut Vec<(String, String, String, f64)>) {
    let text = |k: &str| plan[k].as_str().unwrap_or_default().to_string();
    out.push((
        text("Node Type"),
        text("Relation Name"),
        text("Index Name"),
        plan["Actual Rows"].as_f64().unwrap_or(0.0) * plan["Actual Loops"].as_f64().unwrap_or(1.0),
    ));
    if let Some(children) = plan["Plans"].as_array() {
        for child in children {
            nodes(child, out);
        }
    }
}

async fn plan(db: &TestDb, sql: &str, cap: Option<i64>) -> Vec<(String, String, String, f64)> {
    let explain = format!("EXPLAIN (ANALYZE, FORMAT JSON) {sql}");
    let mut q = sqlx::query(sqlx::AssertSqlSafe(explain));
    if let Some(cap) = cap {
        q = q.bind(cap);
    }
    let row = q.fetch_one(&db.pool).await.unwrap();
    let sqlx::types::Json(plan): sqlx::types::Json<serde_json::Value> = row.get(0);
    let mut out = Vec::new();
    nodes(&plan[0]["Plan"], &mut out);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_100k_waiting_tasks_the_backlog_reads_use_indexes_and_skip_history() {
    let db = TestDb::new().await.unwrap();
    // 100,000 waiting (a tenth keyed, a tenth retrying, a tenth not yet due), a few running.
    sqlx::query(
        "INSERT INTO tasks (task_type, status, attempt, lease_epoch, concurrency_key, available_at)
         SELECT 'big.' || (n % 7), CASE WHEN n % 10 = 1 THEN 'retry_wait' ELSE 'queued' END,
                CASE WHEN n % 10 = 1 THEN 1 ELSE 0 END, CASE WHEN n % 10 = 1 THEN 1 ELSE 0 END,
                CASE WHEN n % 10 = 2 THEN 'k' || (n % 50) END,
                now() + CASE WHEN n % 10 = 3 THEN interval '1 hour'
                             ELSE -make_interval(secs => n % 1000) END
         FROM generate_series(1, 100000) AS n",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    // 100,000 finished: all but 500 of them days ago (history), the rest in the last hour;
    // a failed attempt row for every tenth.
    sqlx::query(
        "INSERT INTO tasks (task_type, status, attempt, lease_epoch, started_at, finished_at,
                            final_outcome, done_on)
         SELECT 'big.' || (n % 7), CASE WHEN n % 4 = 0 THEN 'dead' ELSE 'succeeded' END, 1, 1,
                f - interval '1 second', f,
                CASE WHEN n % 4 = 0 THEN 'failed' ELSE 'succeeded' END,
                (f AT TIME ZONE 'UTC')::date
         FROM (SELECT n, CASE WHEN n <= 500 THEN now() - make_interval(secs => n)
                              ELSE now() - interval '3 days' - make_interval(secs => n) END AS f
               FROM generate_series(1, 100000) AS n) s",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO task_attempt_rows (task_id, epoch, attempt, agent, started_at, finished_at,
                                        outcome)
         SELECT id, 0, 0, 'a#1', finished_at - interval '2 seconds',
                finished_at - interval '1 second', 'failed'
         FROM tasks WHERE status IN ('succeeded', 'dead') AND id % 10 = 0",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE").execute(&db.pool).await.unwrap();

    let overview = include_str!("../../shared/src/store/postgres/sql/task_overview.sql");
    let stats = include_str!("../../shared/src/store/postgres/sql/task_stats.sql");
    for (what, sql, cap) in [("overview", overview, Some(1002)), ("stats", stats, None)] {
        let found = plan(&db, sql, cap).await;
        // A sequential scan only of tasks_live, the partition of unfinished tasks (where the
        // backlog is most of the rows, PostgreSQL may rightly prefer reading it whole to
        // walking the claim index), or of a partition whose every row is in the answer (an
        // empty one, or today's when all of it finished within the window): never one that
        // reads rows of history it does not count.
        for (node, rel, _, out) in &found {
            let small = ["tasks_live", "policies", "rate_limit_starts"];
            if node == "Seq Scan" && !small.contains(&rel.as_str()) {
                let rows: i64 =
                    sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {rel}")))
                        .fetch_one(&db.pool)
                        .await
                        .unwrap();
                assert_eq!(
                    rows as f64, *out,
                    "{what}: a sequential scan of {rel} ({rows} rows) for {out}\n{found:?}"
                );
            }
        }
        // No node reads the days-old history: at most the hour's 500 finished rows and their
        // 50 attempt rows come out of any scan of finished rows.
        for (node, rel, index, rows) in &found {
            if index.contains("finished") || index.contains("failed") {
                assert!(
                    *rows <= 500.0,
                    "{what}: {node} {rel} {index} read {rows} rows"
                );
            }
        }
        // The keyed waiting rows come through their claim index of tasks_live.
        assert!(
            found
                .iter()
                .any(|(_, _, index, _)| index == "tasks_claim_key_idx"),
            "{what}: {found:?}"
        );
        if what == "stats" {
            assert!(
                found
                    .iter()
                    .any(|(_, _, index, _)| index.contains("finished")),
                "{what}: the finished index is not read: {found:?}"
            );
        }
    }

    // And the numbers: the store's answer agrees with plain counts.
    let s = db.store().task_stats().await.unwrap();
    let pool = db.pool.clone();
    let count = |sql: &'static str| {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(sql)
                .fetch_one(&pool)
                .await
                .unwrap() as u64
        }
    };
    assert_eq!(
        s.queued,
        count("SELECT count(*) FROM tasks WHERE status = 'queued' AND available_at <= now()").await
    );
    assert_eq!(s.retrying, 10_000);
    assert_eq!(s.dead, 25_000);
    assert_eq!(s.windows[2].succeeded, 375);
    assert_eq!(s.windows[2].dead_lettered, 125);
    // Final failures of the hour's dead tasks, and the hour's attempt rows.
    let rows = count(
        "SELECT count(*) FROM task_attempt_rows WHERE finished_at >= now() - interval '1 hour'",
    )
    .await;
    assert!(rows > 0);
    assert_eq!(s.windows[2].failed_attempts, 125 + rows);
    assert!(
        s.oldest_waiting
            .is_some_and(|d| d.as_secs() >= 998 && d.as_secs() < 1100),
        "{s:?}"
    );
    db.drop_db().await.unwrap();
}
