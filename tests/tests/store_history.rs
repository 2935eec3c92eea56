//! Store conformance: the queue history the leader's sampler keeps (issue 26) — every minute's
//! counts as SQL counts them, a second pass that changes nothing, minutes backfilled after a
//! gap, an enqueue committed late recounted, retention of rows older than a day, and bad read
//! input refused; on PostgreSQL and SQLite alike.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use chrono::{DateTime, TimeDelta, Utc};
use leasehold_shared::TaskType;
use leasehold_shared::store::queue_history::minute_of;
use leasehold_shared::store::{
    HistoryPruneParams, HistoryReadParams, HistorySampleParams, StoreError,
};
use leasehold_tests::{Arg, Sql, StoreDb, TaskSpec, Val, conformance};

fn micros(t: DateTime<Utc>) -> i64 {
    t.timestamp_micros()
}

/// `t` as a column value: seconds from the database's now.
async fn at(db: &StoreDb, t: DateTime<Utc>) -> Val {
    let now = db.store().db_now().await.unwrap();
    Val::At((t - now).num_microseconds().unwrap() as f64 / 1e6)
}

/// A stored minute, in the backend's terms.
const MINUTE_ARG: Sql = Sql::each("to_timestamp($1::float8 / 1e6)", "$1");

async fn seed_mark(db: &StoreDb, minute: DateTime<Utc>, mark: i64) {
    let sql = Sql {
        postgres: format!(
            "INSERT INTO queue_history_minutes (minute, id_mark) VALUES ({}, $2)",
            MINUTE_ARG.postgres
        )
        .into(),
        sqlite: "INSERT INTO queue_history_minutes (minute, id_mark) VALUES ($1, $2)".into(),
    };
    db.execute(sql, &[Arg::Int(micros(minute)), Arg::Int(mark)])
        .await
        .unwrap();
}

/// Tasks of `task_type` with `column` in [from, to), counted by SQL.
async fn sql_count(
    db: &StoreDb,
    task_type: &str,
    column: &str,
    status: &str,
    from: DateTime<Utc>,
) -> i64 {
    let to = from + TimeDelta::minutes(1);
    let (lo, hi) = if db.is_sqlite() {
        ("$2".to_string(), "$3".to_string())
    } else {
        (
            "to_timestamp($2::float8 / 1e6)".to_string(),
            "to_timestamp($3::float8 / 1e6)".to_string(),
        )
    };
    let sql = Sql::owned(format!(
        "SELECT count(*) FROM tasks WHERE task_type = $1 AND {column} >= {lo} AND {column} < {hi}{status}"
    ));
    db.fetch_int(
        sql,
        &[
            Arg::Text(task_type.into()),
            Arg::Int(micros(from)),
            Arg::Int(micros(to)),
        ],
    )
    .await
    .unwrap()
}

async fn task(
    db: &StoreDb,
    task_type: &str,
    status: &'static str,
    created: DateTime<Utc>,
    finished: Option<DateTime<Utc>>,
) -> i64 {
    let id = db
        .insert_task(TaskSpec::new(task_type, status))
        .await
        .unwrap();
    let mut set = vec![("created_at", at(db, created).await)];
    if let Some(f) = finished {
        set.push(("finished_at", at(db, f).await));
    }
    db.update_task(id, &set).await.unwrap();
    id
}

async fn fail_attempt(db: &StoreDb, id: i64, epoch: i64, finished: DateTime<Utc>) {
    db.insert_attempt(id, epoch, epoch, "agent-x", "failed")
        .await
        .unwrap();
    let table = if db.is_sqlite() {
        "task_attempts"
    } else {
        "task_attempt_rows"
    };
    let v = at(db, finished).await;
    let Val::At(secs) = v else { unreachable!() };
    let sql = Sql::each(
        "UPDATE task_attempt_rows SET finished_at = now() + $1::float8 * interval '1 second', \
         started_at = now() + ($1::float8 - 1) * interval '1 second' WHERE task_id = $2 AND epoch = $3",
        "UPDATE task_attempts SET finished_at = (CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000) + CAST(round($1 * 1000000.0) AS INTEGER), \
         started_at = (CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000) + CAST(round(($1 - 1) * 1000000.0) AS INTEGER) WHERE task_id = $2 AND epoch = $3",
    );
    let n = db
        .execute(sql, &[Arg::Real(secs), Arg::Int(id), Arg::Int(epoch)])
        .await
        .unwrap();
    assert_eq!(n, 1, "attempt row of task {id} in {table}");
}

conformance!(every_minute_is_counted_as_sql_counts_it_and_a_second_pass_adds_nothing);
async fn every_minute_is_counted_as_sql_counts_it_and_a_second_pass_adds_nothing(db: StoreDb) {
    let store = db.store();
    let now = store.db_now().await.unwrap();
    // Four complete, settled minutes some time back; a mark from before them (history began).
    let base = minute_of(now) - TimeDelta::minutes(6);
    seed_mark(&db, base - TimeDelta::minutes(10), 0).await;
    let m = |k: i64, s: i64| base + TimeDelta::minutes(k) + TimeDelta::seconds(s);

    // mail: 3 enqueued in minute 0 (one succeeds in minute 1, one dies in 2 after a failed
    // attempt in 1, one is cancelled in 2); 2 more enqueued in minute 1, waiting.
    let ok = task(&db, "mail", "succeeded", m(0, 10), Some(m(1, 20))).await;
    let dead = task(&db, "mail", "dead", m(0, 15), Some(m(2, 20))).await;
    task(&db, "mail", "cancelled", m(0, 20), Some(m(2, 30))).await;
    task(&db, "mail", "queued", m(1, 5), None).await;
    task(&db, "mail", "queued", m(1, 40), None).await;
    fail_attempt(&db, dead, 1, m(1, 50)).await;
    if db.is_postgres() {
        // The attempt that ended the task is in its row there (final_outcome), not a row.
        db.update_task(dead, &[("final_outcome", Val::Text("failed".into()))])
            .await
            .unwrap();
    } else {
        fail_attempt(&db, dead, 2, m(2, 20)).await;
    }
    // pdf: 2 enqueued in minute 3, both succeed in minute 3; a retry_wait one with a failed
    // attempt in minute 3.
    task(&db, "pdf", "succeeded", m(3, 1), Some(m(3, 30))).await;
    task(&db, "pdf", "succeeded", m(3, 2), Some(m(3, 31))).await;
    let retry = task(&db, "pdf", "retry_wait", m(2, 59), None).await;
    fail_attempt(&db, retry, 1, m(3, 45)).await;
    let _ = ok;

    let first = store
        .queue_history_sample(HistorySampleParams::default())
        .await
        .unwrap();
    for k in 0..4 {
        assert!(
            first.written.contains(&m(k, 0)),
            "minute {k} written: {:?}",
            first.written
        );
    }
    let mail = TaskType::new("mail").unwrap();
    let pdf = TaskType::new("pdf").unwrap();
    assert_eq!(first.newly_enqueued.get(&mail), Some(&5));
    assert_eq!(first.newly_enqueued.get(&pdf), Some(&3));

    // Every stored count, as SQL counts it.
    let expect = [
        // (type, minute, enqueued, succeeded, failed, dead_lettered, cancelled)
        ("mail", 0, 3, 0, 0, 0, 0),
        ("mail", 1, 2, 1, 1, 0, 0),
        ("mail", 2, 0, 0, 1, 1, 1),
        ("pdf", 2, 1, 0, 0, 0, 0),
        ("pdf", 3, 2, 2, 1, 0, 0),
    ];
    for (t, k, enq, ok, failed, dead, cancelled) in expect {
        let minute = m(k, 0);
        assert_eq!(
            sql_count(&db, t, "created_at", "", minute).await,
            enq,
            "{t} {k} enqueued by SQL"
        );
        let ended = |s: &'static str| sql_count(&db, t, "finished_at", s, minute);
        assert_eq!(
            ended(" AND status = 'succeeded'").await,
            ok,
            "{t} {k} succeeded by SQL"
        );
        assert_eq!(
            ended(" AND status = 'dead'").await,
            dead,
            "{t} {k} dead by SQL"
        );
        assert_eq!(
            ended(" AND status = 'cancelled'").await,
            cancelled,
            "{t} {k} cancelled by SQL"
        );
        let h = store
            .queue_history_read(HistoryReadParams {
                task_type: Some(TaskType::new(t).unwrap()),
                minutes: 10,
            })
            .await
            .unwrap();
        let p = h.points.iter().find(|p| p.minute == minute).unwrap();
        assert!(p.counted);
        let c = p.counts;
        assert_eq!(
            (
                c.enqueued,
                c.succeeded,
                c.failed,
                c.dead_lettered,
                c.cancelled
            ),
            (enq as u64, ok as u64, failed, dead as u64, cancelled as u64),
            "{t} minute {k}"
        );
        // Backfilled after the fact: the depth then is unknown.
        assert_eq!(p.waiting, None);
    }
    let all = store
        .queue_history_read(HistoryReadParams {
            task_type: None,
            minutes: 10,
        })
        .await
        .unwrap();
    assert_eq!(all.points.len(), 10);
    let sum: u64 = all.points.iter().map(|p| p.counts.enqueued).sum();
    assert_eq!(sum, 8, "every type summed");
    assert_eq!(
        all.points.last().unwrap().minute,
        minute_of(all.now) - TimeDelta::minutes(1)
    );

    // A second pass (a new leader) writes the same rows and counts nothing new.
    let rows_before = db
        .count("SELECT count(*) FROM queue_history")
        .await
        .unwrap();
    let second = store
        .queue_history_sample(HistorySampleParams::default())
        .await
        .unwrap();
    assert!(
        second.newly_enqueued.is_empty(),
        "{:?}",
        second.newly_enqueued
    );
    let again = store
        .queue_history_read(HistoryReadParams {
            task_type: None,
            minutes: 10,
        })
        .await
        .unwrap();
    let same: Vec<_> = again
        .points
        .iter()
        .filter(|p| p.minute <= m(3, 0))
        .map(|p| p.counts)
        .collect();
    let was: Vec<_> = all
        .points
        .iter()
        .filter(|p| p.minute <= m(3, 0))
        .map(|p| p.counts)
        .collect();
    assert_eq!(same, was);
    assert_eq!(
        db.count("SELECT count(*) FROM queue_history")
            .await
            .unwrap(),
        rows_before
    );
}

conformance!(recounts_late_enqueues_and_samples_the_depth_of_the_minute_just_ended);
async fn recounts_late_enqueues_and_samples_the_depth_of_the_minute_just_ended(db: StoreDb) {
    let store = db.store();
    let now = store.db_now().await.unwrap();
    seed_mark(&db, minute_of(now) - TimeDelta::minutes(30), 0).await;
    // The depth of the last minute is sampled only within 30 s of its end: pass with a window
    // wide enough whatever the second now is.
    let params = HistorySampleParams {
        settle: std::time::Duration::ZERO,
        depth_within: std::time::Duration::from_secs(60),
        ..Default::default()
    };
    db.insert_task(TaskSpec::new("mail", "queued"))
        .await
        .unwrap();
    db.insert_task(TaskSpec::new("mail", "running"))
        .await
        .unwrap();
    db.insert_task(TaskSpec {
        available_in_secs: 600.0,
        ..TaskSpec::new("mail", "queued")
    })
    .await
    .unwrap();
    db.insert_task(TaskSpec {
        available_in_secs: -30.0,
        ..TaskSpec::new("mail", "running")
    })
    .await
    .unwrap();
    db.insert_task(TaskSpec::new("busy", "running"))
        .await
        .unwrap();
    let first = store.queue_history_sample(params.clone()).await.unwrap();
    let last = minute_of(first.now.unwrap()) - TimeDelta::minutes(1);
    assert_eq!(first.depth_minute, Some(last));
    assert_eq!(
        first.written.len(),
        30,
        "backfilled to the mark: {:?}",
        first.written
    );
    let h = store
        .queue_history_read(HistoryReadParams {
            task_type: Some(TaskType::new("mail").unwrap()),
            minutes: 5,
        })
        .await
        .unwrap();
    let p = h.points.iter().find(|p| p.minute == last).unwrap();
    // Sampled after the minute: depth of the queue now (the mail tasks above).
    assert_eq!((p.waiting, p.running), (Some(2), Some(2)));
    // With it, the available time of the longest-due waiting task: of "mail", its queued one
    // (the earlier of two queued; a running one available earlier does not count); of a type
    // with nothing waiting, none.
    let oldest = |task_type: &'static str| {
        let sql = Sql {
            postgres: format!(
                "SELECT count(*) FROM queue_history h WHERE h.task_type = $2 AND h.minute = {} \
                 AND h.oldest_waiting_at IS NOT DISTINCT FROM (SELECT min(available_at) \
                 FROM tasks WHERE task_type = $2 AND status = 'queued')",
                MINUTE_ARG.postgres
            )
            .into(),
            sqlite:
                "SELECT count(*) FROM queue_history h WHERE h.task_type = $2 AND h.minute = $1 \
                     AND h.oldest_waiting_at IS (SELECT min(available_at) FROM tasks \
                     WHERE task_type = $2 AND status = 'queued')"
                    .into(),
        };
        let db = &db;
        async move {
            db.fetch_int(sql, &[Arg::Int(micros(last)), Arg::Text(task_type.into())])
                .await
                .unwrap()
        }
    };
    assert_eq!(oldest("mail").await, 1);
    assert_eq!(
        oldest("busy").await,
        1,
        "a type with nothing waiting has no oldest time"
    );
    let other = h
        .points
        .iter()
        .find(|p| p.minute == last - TimeDelta::minutes(2))
        .unwrap();
    assert_eq!(
        other.waiting, None,
        "a backfilled minute's depth is unknown"
    );

    // An enqueue whose transaction started in the last minute and committed after the pass.
    let late = task(&db, "mail", "queued", last + TimeDelta::seconds(30), None).await;
    let _ = late;
    let second = store.queue_history_sample(params).await.unwrap();
    if second.written.contains(&last) {
        let mail = TaskType::new("mail").unwrap();
        assert_eq!(second.newly_enqueued.get(&mail), Some(&1), "{second:?}");
        let h = store
            .queue_history_read(HistoryReadParams {
                task_type: Some(mail),
                minutes: 5,
            })
            .await
            .unwrap();
        let p = h.points.iter().find(|p| p.minute == last).unwrap();
        assert_eq!(p.waiting, Some(2), "the depth sampled is kept");
        assert_eq!(oldest("mail").await, 1, "and its oldest waiting time");
    }
}

conformance!(history_older_than_a_day_is_deleted_in_batches);
async fn history_older_than_a_day_is_deleted_in_batches(db: StoreDb) {
    let store = db.store();
    let now = store.db_now().await.unwrap();
    let recent = minute_of(now) - TimeDelta::minutes(3);
    for k in 0..5 {
        let old = minute_of(now) - TimeDelta::hours(25) - TimeDelta::minutes(k);
        for (minute, t) in [(old, "old"), (recent - TimeDelta::minutes(k), "new")] {
            let sql = Sql {
                postgres: format!(
                    "INSERT INTO queue_history (task_type, minute, enqueued) VALUES ($2, {}, 1)",
                    MINUTE_ARG.postgres
                )
                .into(),
                sqlite:
                    "INSERT INTO queue_history (task_type, minute, enqueued) VALUES ($2, $1, 1)"
                        .into(),
            };
            db.execute(sql, &[Arg::Int(micros(minute)), Arg::Text(t.into())])
                .await
                .unwrap();
        }
        seed_mark(&db, old, 1).await;
    }
    let deleted = store
        .queue_history_prune(HistoryPruneParams {
            batch: 2,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(deleted, 5);
    assert_eq!(
        db.count("SELECT count(*) FROM queue_history WHERE task_type = 'old'")
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        db.count("SELECT count(*) FROM queue_history WHERE task_type = 'new'")
            .await
            .unwrap(),
        5
    );
    assert_eq!(
        db.count("SELECT count(*) FROM queue_history_minutes")
            .await
            .unwrap(),
        0
    );
}

conformance!(a_bad_history_read_is_refused);
async fn a_bad_history_read_is_refused(db: StoreDb) {
    let store = db.store();
    for minutes in [0, 1441] {
        let r = store
            .queue_history_read(HistoryReadParams {
                task_type: None,
                minutes,
            })
            .await;
        assert!(matches!(r, Err(StoreError::Invalid(_))), "{minutes}: {r:?}");
    }
    let r = store
        .queue_history_sample(HistorySampleParams {
            backfill: 0,
            ..Default::default()
        })
        .await;
    assert!(matches!(r, Err(StoreError::Invalid(_))), "{r:?}");
    assert_eq!(
        db.count("SELECT count(*) FROM queue_history_minutes")
            .await
            .unwrap(),
        0
    );
}

/// Every node of a JSON plan, depth first.
fn nodes(plan: &serde_json::Value, out: &mut Vec<serde_json::Value>) {
    out.push(plan.clone());
    if let Some(children) = plan["Plans"].as_array() {
        for c in children {
            nodes(c, out);
        }
    }
}

// PostgreSQL only: the sampler's counts read the last minutes through indexes, never the
// finished history. 150,000 tasks, 100,000 of them finished over the last day, analysed; each
// count statement planned as the store plans it (plan_indexed.sql, custom and generic plans)
// and run (EXPLAIN ANALYZE): no sequential scan, and no node reads more than the recent rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_150k_tasks_the_counts_read_only_the_last_minutes_through_indexes() {
    let db = leasehold_tests::TestDb::new().await.unwrap();
    sqlx::query(
        "INSERT INTO tasks (task_type, payload, created_at) \
         SELECT 'bulk.' || (n % 5), '{}'::jsonb, now() - make_interval(secs => 150000 - n) \
         FROM generate_series(1, 150000) AS n",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query(
        "UPDATE tasks SET status = 'succeeded', started_at = created_at, \
         finished_at = created_at + interval '1 second', final_outcome = 'succeeded', \
         done_on = (now() AT TIME ZONE 'UTC')::date \
         WHERE id % 3 <> 0",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE tasks")
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query("ANALYZE task_attempt_rows")
        .execute(&db.pool)
        .await
        .unwrap();
    let max_id: i64 = sqlx::query_scalar("SELECT max(id) FROM tasks")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let now: DateTime<Utc> = sqlx::query_scalar("SELECT now()")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let lo = minute_of(now) - TimeDelta::minutes(3);
    let hi = minute_of(now);
    let plan_indexed = include_str!("../../shared/src/store/postgres/sql/plan_indexed.sql");
    let statements: [(&str, &str); 3] = [
        (
            "enqueued",
            include_str!("../../shared/src/store/postgres/sql/queue_history_count_enqueued.sql"),
        ),
        (
            "finished",
            include_str!("../../shared/src/store/postgres/sql/queue_history_count_finished.sql"),
        ),
        (
            "failed attempts",
            include_str!(
                "../../shared/src/store/postgres/sql/queue_history_count_failed_attempts.sql"
            ),
        ),
    ];
    for mode in leasehold_tests::helpers::PLAN_MODES {
        for (what, sql) in statements {
            let mut tx = leasehold_tests::helpers::tx_planning(&db.pool, mode).await;
            sqlx::query(plan_indexed).execute(&mut *tx).await.unwrap();
            let explain = format!("EXPLAIN (ANALYZE, FORMAT JSON) {sql}");
            let q = sqlx::query(sqlx::AssertSqlSafe(explain));
            let q = if what == "enqueued" {
                // The mark of three minutes ago: about 180 ids above it.
                q.bind(max_id - 200).bind(lo).bind(hi)
            } else {
                q.bind(lo).bind(hi)
            };
            let row = q.fetch_one(&mut *tx).await.unwrap();
            tx.rollback().await.unwrap();
            use sqlx::Row;
            let sqlx::types::Json(plan): sqlx::types::Json<serde_json::Value> = row.get(0);
            let mut all = Vec::new();
            nodes(&plan[0]["Plan"], &mut all);
            for n in &all {
                let kind = n["Node Type"].as_str().unwrap_or_default();
                assert_ne!(kind, "Seq Scan", "{what} ({mode}) scans a table: {plan}");
                assert_ne!(kind, "Bitmap Heap Scan", "{what} ({mode}): {plan}");
                let rows = n["Actual Rows"].as_f64().unwrap_or(0.0)
                    * n["Actual Loops"].as_f64().unwrap_or(1.0);
                assert!(
                    rows <= 1_000.0,
                    "{what} ({mode}) reads {rows} rows at {kind}: {plan}"
                );
            }
            assert!(
                all.iter().any(|n| n["Node Type"]
                    .as_str()
                    .is_some_and(|k| k.starts_with("Index"))),
                "{what} ({mode}) uses no index: {plan}"
            );
        }
    }
    db.drop_db().await.unwrap();
}

// SQLite only: the same counts through SQLite's own indexes (EXPLAIN QUERY PLAN): enqueues by
// the rowid above the mark, finishes by tasks_finished_idx, failed attempts by
// task_attempts_failed_idx and their task by rowid; no table scanned whole.
#[tokio::test]
async fn on_sqlite_the_counts_search_indexes_and_scan_no_table() {
    let db = StoreDb::new(leasehold_tests::Backend::Sqlite)
        .await
        .unwrap();
    let pool = db.sqlite_pool().unwrap();
    let statements = [
        (
            "enqueued",
            include_str!("../../shared/src/store/sqlite/sql/queue_history_count_enqueued.sql"),
            "USING INTEGER PRIMARY KEY",
        ),
        (
            "finished",
            include_str!("../../shared/src/store/sqlite/sql/queue_history_count_finished.sql"),
            "INDEX tasks_finished_idx",
        ),
        (
            "failed attempts",
            include_str!(
                "../../shared/src/store/sqlite/sql/queue_history_count_failed_attempts.sql"
            ),
            "INDEX task_attempts_failed_idx",
        ),
    ];
    for (what, sql, index) in statements {
        let mut q = sqlx::query_as::<_, (i64, i64, i64, String)>(sqlx::AssertSqlSafe(format!(
            "EXPLAIN QUERY PLAN {sql}"
        )))
        .bind(1_i64)
        .bind(2_i64);
        if what == "enqueued" {
            q = q.bind(3_i64);
        }
        let rows = q.fetch_all(pool).await.unwrap();
        let details: Vec<&str> = rows.iter().map(|r| r.3.as_str()).collect();
        assert!(
            details.iter().any(|d| d.contains(index)),
            "{what}: {details:?}"
        );
        assert!(
            !details
                .iter()
                .any(|d| d.starts_with("SCAN") && !d.contains("USING")),
            "{what} scans a table: {details:?}"
        );
    }
    db.drop_db().await.unwrap();
}

/// An agent named `name`, live for five minutes, serving `task_types`.
fn register(name: &str, task_types: &[&str]) -> leasehold_shared::store::AgentRegisterParams {
    leasehold_shared::store::AgentRegisterParams {
        name: name.into(),
        host: "host-a".into(),
        pid: 1,
        grpc_address: None,
        version: "0.1.0".into(),
        task_types: task_types
            .iter()
            .map(|t| leasehold_tests::helpers::tt(t))
            .collect(),
        local_concurrency: 4,
        alive_for: std::time::Duration::from_secs(300),
    }
}

/// The scans of tasks_live `plan` ran.
fn executed_scans(plan: &str) -> Vec<&str> {
    plan.lines()
        .filter(|l| l.contains("Scan") && l.contains(" on tasks_live"))
        .filter(|l| !l.contains("never executed"))
        .collect()
}

/// ANALYZE, then the sampler's pass as the leader runs it (a mark half an hour back, the depth
/// of the minute just ended).
async fn analyze_and_sample(
    db: &leasehold_tests::TestDb,
) -> leasehold_shared::store::HistorySample {
    use leasehold_shared::Store;
    sqlx::query("ANALYZE tasks")
        .execute(&db.pool)
        .await
        .unwrap();
    let store = db.store();
    let now = store.db_now().await.unwrap();
    sqlx::query("INSERT INTO queue_history_minutes (minute, id_mark) VALUES ($1, 0)")
        .bind(minute_of(now) - TimeDelta::minutes(30))
        .execute(&db.pool)
        .await
        .unwrap();
    let sample = store
        .queue_history_sample(HistorySampleParams {
            settle: std::time::Duration::ZERO,
            depth_within: std::time::Duration::from_secs(60),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(sample.depth_minute.is_some(), "{sample:?}");
    sample
}

/// The unserved check as the leader runs it with `--unserved-after` `due_for` seconds.
fn unserved(due_for: u64) -> leasehold_shared::store::UnservedParams {
    leasehold_shared::store::UnservedParams {
        due_for: std::time::Duration::from_secs(due_for),
        legacy_stale_after: std::time::Duration::from_secs(30),
        limit: 5000,
    }
}

/// The unserved check with `due_for_secs` reads no row of tasks_live.
async fn assert_no_walk(pool: &sqlx::PgPool, due_for_secs: f64) {
    let plan = explain_unserved(pool, due_for_secs).await;
    let reads = executed_scans(&plan);
    assert!(
        reads.is_empty(),
        "the check read tasks_live: {reads:?}\n{plan}"
    );
}

/// `EXPLAIN (ANALYZE)` of the leader's unserved-type check (task_dead_letter_unserved.sql) with
/// `due_for_secs`, in a transaction rolled back, as text.
async fn explain_unserved(pool: &sqlx::PgPool, due_for_secs: f64) -> String {
    let mut tx = pool.begin().await.unwrap();
    let sql = include_str!("../../shared/src/store/postgres/sql/task_dead_letter_unserved.sql");
    let rows: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) {sql}"
    )))
    .bind(due_for_secs)
    .bind(30.0_f64)
    .bind(1000_i64)
    .fetch_all(&mut *tx)
    .await
    .unwrap();
    tx.rollback().await.unwrap();
    rows.join("\n")
}

// PostgreSQL only: the leader's unserved-type check trusts the last depth sample of the history
// (the sampler's, once a minute) instead of walking every waiting task each pass — 100,000
// waiting tasks of a served type, and the walk never starts; a type the sample saw waiting or
// running that no agent serves is still found; without a sample recent enough for `due_for`,
// every waiting task is looked at, as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unserved_check_walks_the_queue_only_for_types_the_last_depth_sample_saw_unserved() {
    use leasehold_shared::{Store, TaskId};
    use leasehold_tests::helpers::tt;
    use std::time::Duration;

    let db = leasehold_tests::TestDb::new().await.unwrap();
    let store = db.store();
    let status = |id: i64| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, String>("SELECT status::text FROM tasks WHERE id = $1")
                .bind(id)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    store
        .agent_register(register("worker", &["served"]))
        .await
        .unwrap();
    let other = store
        .agent_register(register("other", &["comeback", "left"]))
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO tasks (task_type, available_at, created_at) \
         SELECT 'served', now() - interval '1 hour', now() - interval '1 hour' \
         FROM generate_series(1, 100000)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let insert = |task_type: &'static str, status: &'static str| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "INSERT INTO tasks (task_type, status, available_at, created_at, lease_owner, \
                                    lease_until, heartbeat_at, lease_epoch, attempt) \
                 SELECT $1, $2, now() - interval '1 hour', now() - interval '1 hour', l.owner, \
                        l.until, l.beat, l.epoch, l.epoch \
                 FROM (SELECT CASE WHEN $2 = 'running' THEN 'other' END AS owner, \
                              CASE WHEN $2 = 'running' THEN now() + interval '1 minute' END AS until, \
                              CASE WHEN $2 = 'running' THEN now() END AS beat, \
                              CASE WHEN $2 = 'running' THEN 1 ELSE 0 END AS epoch) l \
                 RETURNING id",
            )
            .bind(task_type)
            .bind(status)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    // Served by the other agent: a type whose only task runs now (it may come back to wait),
    // and one with a task waiting, overdue.
    let comeback = insert("comeback", "running").await;
    let left = insert("left", "queued").await;
    let sample = analyze_and_sample(&db).await;

    // The check as the leader runs it, with `--unserved-after` `due_for` seconds.
    let check = |due_for: u64| store.task_dead_letter_unserved(unserved(due_for));
    // Every type the sample saw is served: no waiting task is read.
    assert_no_walk(&db.pool, 900.0).await;
    assert!(check(900).await.unwrap().is_empty());
    assert_eq!(status(left).await, "queued");

    // The other agent stops; its running task failed and waits to retry, overdue. Both its
    // types were in the sample (one running, one waiting) and no live agent serves them now:
    // the walk runs, and finds both.
    store.agent_mark_stopped(other.id.clone()).await.unwrap();
    sqlx::query(
        "UPDATE tasks SET status = 'retry_wait', available_at = now() - interval '1 hour' \
         WHERE id = $1",
    )
    .bind(comeback)
    .execute(&db.pool)
    .await
    .unwrap();
    let plan = explain_unserved(&db.pool, 900.0).await;
    assert!(!executed_scans(&plan).is_empty(), "{plan}");
    let mut found = check(900).await.unwrap();
    found.sort();
    assert_eq!(
        found,
        vec![
            (TaskId(comeback), tt("comeback")),
            (TaskId(left), tt("left"))
        ]
    );
    assert_eq!(status(comeback).await, "dead");
    assert_eq!(status(left).await, "dead");

    // An orphan enqueued after the sample with an available time an hour back: the sample did
    // not see it, so the check (trusting the sample for 15 minutes' due) leaves it to the next
    // sample...
    let orphan = insert("orphan", "queued").await;
    assert!(check(900).await.unwrap().is_empty());
    assert_eq!(status(orphan).await, "queued");
    // ...but with `due_for` shorter than the sample's age the sample proves nothing and every
    // waiting task is looked at (1 s: once the sampled minute ended more than a second ago).
    let sampled_minute_ended = sample.depth_minute.unwrap() + TimeDelta::minutes(1);
    while store.db_now().await.unwrap() - sampled_minute_ended < TimeDelta::seconds(2) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        check(1).await.unwrap(),
        vec![(TaskId(orphan), tt("orphan"))]
    );
    assert_eq!(status(orphan).await, "dead");
    let plan = explain_unserved(&db.pool, 1.0).await;
    assert!(!executed_scans(&plan).is_empty(), "{plan}");

    // A sampled minute without rows (an empty queue's, or a pruning that stopped between the
    // two tables) proves nothing either.
    let stray = insert("stray", "queued").await;
    assert!(check(900).await.unwrap().is_empty());
    sqlx::query("DELETE FROM queue_history WHERE minute = $1")
        .bind(sample.depth_minute.unwrap())
        .execute(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        check(900).await.unwrap(),
        vec![(TaskId(stray), tt("stray"))]
    );
    db.drop_db().await.unwrap();
}

// PostgreSQL only: a type no agent serves whose waiting tasks all fall due later (a future
// run_at) does not send the check walking the waiting queue every pass — the depth sample keeps
// each type's longest-due waiting time; once one of its tasks has been due for `due_for`, the
// type is suspect again and its due tasks are found, the later ones left waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unserved_check_does_not_walk_for_an_unserved_type_whose_tasks_fall_due_later() {
    use leasehold_shared::Store;
    use leasehold_tests::helpers::tt;

    let db = leasehold_tests::TestDb::new().await.unwrap();
    let store = db.store();
    store
        .agent_register(register("worker", &["served"]))
        .await
        .unwrap();
    // 100,000 served tasks waiting, overdue; no agent serves "later" (1,000 tasks, available
    // five minutes ago) nor "future" (1,000, available in an hour).
    sqlx::query(
        "INSERT INTO tasks (task_type, available_at, created_at) \
         SELECT 'served', now() - interval '1 hour', now() - interval '1 hour' \
         FROM generate_series(1, 100000) \
         UNION ALL SELECT 'later', now() - interval '5 minutes', now() - interval '1 hour' \
         FROM generate_series(1, 1000) \
         UNION ALL SELECT 'future', now() + interval '1 hour', now() - interval '1 hour' \
         FROM generate_series(1, 1000)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    analyze_and_sample(&db).await;
    let check = |due_for: u64| store.task_dead_letter_unserved(unserved(due_for));
    let waiting = |task_type: &'static str| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM tasks WHERE task_type = $1 AND status = 'queued'",
            )
            .bind(task_type)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };

    // Due for 15 minutes: neither unserved type has a task due that long; no walk.
    assert_no_walk(&db.pool, 900.0).await;
    assert!(check(900).await.unwrap().is_empty());
    assert_eq!(waiting("later").await, 1000);

    // Due for 200 s (the sample still recent enough to trust): "later"'s tasks are, and only
    // they are dead-lettered; "future"'s wait on.
    let found = check(200).await.unwrap();
    assert_eq!(found.len(), 1000, "{found:?}");
    assert!(found.iter().all(|(_, t)| *t == tt("later")), "{found:?}");
    assert_eq!(waiting("later").await, 0);
    assert_eq!(waiting("future").await, 1000);

    // A sample row from before the oldest time was kept (NULL) keeps its type suspect: the walk
    // runs, and finds nothing due.
    sqlx::query("UPDATE queue_history SET oldest_waiting_at = NULL WHERE task_type = 'future'")
        .execute(&db.pool)
        .await
        .unwrap();
    let plan = explain_unserved(&db.pool, 900.0).await;
    assert!(!executed_scans(&plan).is_empty(), "{plan}");
    assert!(check(900).await.unwrap().is_empty());
    assert_eq!(waiting("future").await, 1000);
    db.drop_db().await.unwrap();
}
