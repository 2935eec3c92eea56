#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `leasehold-agent bench` as issue 22 uses it: a backlog queued before the drain, the drain's
//! cost per task from the server's counters (PostgreSQL; null on SQLite), nothing of the
//! bench's left behind, and `--backlog` out of range refused like any bad flag.

use std::process::Command;
use std::time::Duration;

use leasehold_tests::{TestDb, binary, scratch_dir, wait_until};
use serde_json::Value;

/// Runs `leasehold-agent bench` with `args`; its exit code, JSON report (if any) and stderr.
async fn bench(url: &str, args: &[&str]) -> (Option<i32>, Option<Value>, String) {
    let out = Command::new(binary("leasehold-agent").await.unwrap())
        .args(["bench", "--database-url", url, "--output", "json"])
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = stdout.lines().last().map(|line| {
        serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
    });
    (
        out.status.code(),
        report,
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

fn figure(report: &Value, field: &str) -> f64 {
    report[field]
        .as_f64()
        .unwrap_or_else(|| panic!("{field} is not a number: {report}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_is_drained_from_and_the_drain_cost_per_task_reported_on_postgres() {
    let db = TestDb::new().await.unwrap();
    // The view exists here; whether its library is loaded is the server's business: the bench
    // reports statements when it is, null when it is not, and fails in neither case.
    sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .execute(&db.pool)
        .await
        .unwrap();
    let statements_readable = sqlx::query("SELECT 1 FROM pg_stat_statements LIMIT 1")
        .fetch_optional(&db.pool)
        .await
        .is_ok();
    let (code, report, stderr) = bench(
        &db.url,
        &[
            "--tasks",
            "300",
            "--backlog",
            "2000",
            "--latency-samples",
            "5",
        ],
    )
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    let report = report.expect("a report");
    assert_eq!(report["tasks"], 300, "{report}");
    assert_eq!(report["backlog"], 2000, "{report}");
    // Between the load and the timed phases, a checkpoint (the test user may run one).
    assert_eq!(report["checkpoint_after_backlog"], true, "{report}");
    assert!(figure(&report, "processed_per_s") > 0.0, "{report}");
    assert!(figure(&report, "drain_seconds") > 0.0, "{report}");
    assert!(figure(&report, "wal_bytes_per_task") > 0.0, "{report}");
    let commits = figure(&report, "commits_per_task");
    assert!(0.0 < commits && commits < 5.0, "{report}");
    let xids = figure(&report, "xids_per_task");
    assert!(0.0 < xids && xids < 5.0, "{report}");
    if statements_readable {
        assert!(figure(&report, "statements_per_task") > 0.0, "{report}");
    } else {
        assert!(report["statements_per_task"].is_null(), "{report}");
    }
    assert_eq!(report["pickup_samples"], 5, "{report}");
    // Both sides' CPU, the server being on this host: 300 no-op tasks cost some of each.
    assert!(figure(&report, "agent_cpu_us_per_task") > 0.0, "{report}");
    assert!(figure(&report, "db_cpu_us_per_task") > 0.0, "{report}");
    // The backlog was queued for real: 300 + 2000 + 5 pickups inserted, as the
    // table's statistics say once the bench's connections have flushed theirs (on exit).
    wait_until(
        "the bench's inserts are counted",
        Duration::from_secs(15),
        || async {
            let inserted: i64 = sqlx::query_scalar(
                "SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = 'tasks_live'",
            )
            .fetch_one(&db.pool)
            .await?;
            Ok(inserted >= 2305)
        },
    )
    .await
    .unwrap();
    // The backlog left over by the drain, the done tasks and the pickup tasks: all gone.
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks WHERE task_type LIKE 'bench.%'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(left, 0, "bench tasks left behind");
    db.drop_db().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite_the_cost_figures_are_null_and_the_backlog_is_cleaned_up() {
    let dir = scratch_dir("leasehold-bench-sqlite").unwrap();
    let url = format!("sqlite://{}", dir.join("queue.sqlite").display());
    // At concurrency 10 the agents stop with most of the backlog queued: it is deleted before
    // the pickup phase, which would otherwise run it (and fail to find its pickup task started).
    let (code, report, stderr) = bench(
        &url,
        &[
            "--tasks",
            "200",
            "--backlog",
            "1000",
            "--concurrency",
            "10",
            "--batch",
            "10",
            "--latency-samples",
            "3",
        ],
    )
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    let report = report.expect("a report");
    assert_eq!(report["backlog"], 1000, "{report}");
    assert!(report["checkpoint_after_backlog"].is_null(), "{report}");
    assert!(figure(&report, "processed_per_s") > 0.0, "{report}");
    assert!(figure(&report, "agent_cpu_us_per_task") > 0.0, "{report}");
    for field in [
        "wal_bytes_per_task",
        "xids_per_task",
        "commits_per_task",
        "statements_per_task",
        "db_cpu_us_per_task",
    ] {
        assert!(
            report.get(field).is_some_and(Value::is_null),
            "{field}: {report}"
        );
    }
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks WHERE task_type LIKE 'bench.%'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(left, 0, "bench tasks left behind");
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_out_of_range_is_refused_with_exit_2() {
    // Refused before any connection: the URL leads nowhere.
    let url = "postgres://nobody@127.0.0.1:1/none";
    for bad in ["100000001", "-1", "lots"] {
        let (code, report, stderr) = bench(url, &[&format!("--backlog={bad}")]).await;
        assert_eq!(code, Some(2), "{bad}: {stderr}");
        assert!(report.is_none(), "{bad}");
        assert!(
            stderr.contains("--backlog") && stderr.contains(bad),
            "{bad}: {stderr}"
        );
    }
    let (_, _, stderr) = bench(url, &["--backlog", "100000001"]).await;
    assert!(
        stderr.contains("'--backlog <BACKLOG>': 100000001 is not in 0..=100000000"),
        "{stderr}"
    );
}

/// Claiming one task at a time, every task costs at least its own claim transaction. The agents'
/// backends publish their commits up to seconds late, so a reading taken before they are gone
/// would count only a few of a short drain's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_claim_of_a_short_drain_is_counted_as_a_commit() {
    let db = TestDb::new().await.unwrap();
    let (code, report, stderr) = bench(
        &db.url,
        &[
            "--tasks",
            "50",
            "--concurrency",
            "1",
            "--batch",
            "1",
            "--latency-samples",
            "1",
        ],
    )
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    let report = report.expect("a report");
    assert_eq!(report["backlog"], 0, "{report}");
    // No backlog, no checkpoint: the drain starts as it would have.
    assert!(report["checkpoint_after_backlog"].is_null(), "{report}");
    assert!(figure(&report, "commits_per_task") >= 1.0, "{report}");
    assert!(figure(&report, "xids_per_task") >= 1.0, "{report}");
    db.drop_db().await.unwrap();
}
