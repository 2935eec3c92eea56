#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The queue history end to end (issue 26): two real agents on PostgreSQL run tasks; the
//! leader's sampler writes the minutes; GetHistory over real gRPC gives every minute as SQL
//! counts it; `leasehold_tasks_enqueued_total` is on the leader's /metrics only, equal to what
//! SQL counts; bad GetHistory input is INVALID_ARGUMENT.
//!
//! History begins with the first mark a leader stores (the minute after its first pass); the
//! test stores a mark of five minutes ago itself, so the minute the tasks run in is counted
//! without waiting for the first mark's minute. The minute is written 10 s after it ends, so
//! the test waits up to 70 s for it.

use std::time::Duration;

use leasehold_proto::v1 as pb;
use leasehold_tests::calls::grpc::start;
use leasehold_tests::grpc::connect;
use leasehold_tests::metrics::{free_port, scrape_metrics};
use leasehold_tests::{TestDb, wait_until};
use tonic::Code;

async fn scrape(port: u16) -> String {
    scrape_metrics(port).await.unwrap()
}

fn sample(body: &str, name: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_records_history_that_get_history_and_the_counter_report_as_sql_counts_it() {
    let db = TestDb::new().await.unwrap();
    sqlx::query(
        "INSERT INTO queue_history_minutes (minute, id_mark) \
         VALUES (date_bin('1 minute', now(), timestamptz '2000-01-01 00:00:00+00') - interval '5 minutes', 0)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let ports = [free_port().unwrap(), free_port().unwrap()];
    let mut agents = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let listen = format!("127.0.0.1:{port}");
        agents.push(
            start(&db, &format!("hist-{i}"), &["--metrics-listen", &listen])
                .await
                .unwrap(),
        );
    }
    let addr = agents[0].1.clone();

    // Seven noop tasks that run, and three of a type nobody serves that wait.
    sqlx::query(
        "INSERT INTO tasks (task_type, payload) \
         SELECT 'noop', '{}'::jsonb FROM generate_series(1, 7) \
         UNION ALL SELECT 'unserved.kind', '{}'::jsonb FROM generate_series(1, 3)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let pool = db.pool.clone();
    wait_until("the noop tasks succeed", Duration::from_secs(30), || {
        let pool = pool.clone();
        async move {
            let n: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM tasks WHERE task_type = 'noop' AND status = 'succeeded'",
            )
            .fetch_one(&pool)
            .await?;
            Ok(n == 7)
        }
    })
    .await
    .unwrap();
    // The newest minute anything happened in, written by the leader's sampler.
    let last: chrono::DateTime<chrono::Utc> = sqlx::query_scalar(
        "SELECT date_bin('1 minute', max(greatest(created_at, coalesce(finished_at, created_at))), \
         timestamptz '2000-01-01 00:00:00+00') FROM tasks",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let pool = db.pool.clone();
    wait_until("the minute is counted", Duration::from_secs(100), || {
        let pool = pool.clone();
        async move {
            let n: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM queue_history_minutes WHERE minute = $1 AND counted_at IS NOT NULL",
            )
            .bind(last)
            .fetch_one(&pool)
            .await?;
            Ok(n == 1)
        }
    })
    .await
    .unwrap();

    // GetHistory over gRPC: every minute, compared with SQL.
    let mut client = connect(&addr).await.unwrap();
    for task_type in ["", "noop", "unserved.kind"] {
        let h = client
            .get_history(pb::GetHistoryRequest {
                task_type: task_type.into(),
                minutes: 10,
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(h.points.len(), 10);
        assert_eq!(h.task_type, task_type);
        for pair in h.points.windows(2) {
            assert_eq!(pair[1].minute_ms - pair[0].minute_ms, 60_000);
        }
        let mut enqueued_total = 0;
        for p in h.points.iter().filter(|p| p.counted) {
            let from = chrono::DateTime::from_timestamp_millis(p.minute_ms).unwrap();
            let to = from + chrono::TimeDelta::minutes(1);
            let count = |column: &'static str, status: &'static str| {
                let pool = db.pool.clone();
                let sql = format!(
                    "SELECT count(*) FROM tasks WHERE ($1 = '' OR task_type = $1) \
                     AND {column} >= $2 AND {column} < $3 {status}"
                );
                async move {
                    sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql))
                        .bind(task_type)
                        .bind(from)
                        .bind(to)
                        .fetch_one(&pool)
                        .await
                        .unwrap() as u64
                }
            };
            assert_eq!(
                p.enqueued,
                count("created_at", "").await,
                "{task_type:?} {from}"
            );
            assert_eq!(
                p.succeeded,
                count("finished_at", "AND status = 'succeeded'").await,
                "{task_type:?} {from}"
            );
            assert_eq!(p.failed, 0);
            enqueued_total += p.enqueued;
        }
        let expected = match task_type {
            "" => 10,
            "noop" => 7,
            _ => 3,
        };
        assert_eq!(enqueued_total, expected, "{task_type:?}: {h:?}");
        if task_type == "unserved.kind" {
            // The depth of the minute written just after it ended (the agent may have written
            // the minute late on a loaded machine: then it is unknown).
            let p = h.points.iter().rev().find(|p| p.counted).unwrap();
            if let Some(w) = p.waiting {
                assert_eq!(w, 3, "{p:?}");
            }
        }
    }

    // The counter: on the leader only, as SQL counts the enqueues.
    let mut leaders = 0;
    for port in ports {
        let body = scrape(port).await;
        let leads = sample(&body, "leasehold_leader ") == Some(1.0);
        let noop = sample(&body, "leasehold_tasks_enqueued_total{task_type=\"noop\"} ");
        if leads {
            leaders += 1;
            assert_eq!(noop, Some(7.0), "{body}");
            assert_eq!(
                sample(
                    &body,
                    "leasehold_tasks_enqueued_total{task_type=\"unserved.kind\"} "
                ),
                Some(3.0)
            );
        } else {
            assert_eq!(noop, None, "a follower exports no enqueued series:\n{body}");
        }
    }
    assert_eq!(leaders, 1);

    // Bad input: INVALID_ARGUMENT, for a viewer's read as for anyone's.
    for bad in [
        pb::GetHistoryRequest {
            task_type: String::new(),
            minutes: 1441,
        },
        pb::GetHistoryRequest {
            task_type: "no spaces allowed".into(),
            minutes: 60,
        },
        pb::GetHistoryRequest {
            task_type: "x".repeat(1000),
            minutes: 60,
        },
    ] {
        let err = client.get_history(bad.clone()).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{bad:?}: {err:?}");
    }
    // Minutes 0 means 60.
    let h = client
        .get_history(pb::GetHistoryRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(h.points.len(), 60);
    drop(agents);
}
