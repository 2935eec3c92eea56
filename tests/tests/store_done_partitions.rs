//! The small hot table (issue 25), PostgreSQL only: `tasks` is partitioned by the UTC day a
//! task finished (migration 20261210000001). A finishing task leaves `tasks_live` for its
//! day's partition and is still found; retention drops whole days; statements that waited on a
//! task another transaction moved, and enqueues that raced a key holder's move, settle as if
//! nothing had moved.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use leasehold_shared::domain::TaskStatus;
use leasehold_shared::store::{
    CancelOutcome, CancelParams, Completion, NewTask, PurgeParams, RenewParams, RequeueParams,
};
use leasehold_shared::{Actor, LeaseEpoch, Store, TaskError, TaskId};
use leasehold_tests::TestDb;
use leasehold_tests::helpers::{claim, complete_all, key, tt};
use serde_json::json;
use sqlx::PgPool;

const OWNER: &str = "parts#1";

/// The partition holding task `id`.
async fn partition_of(pool: &PgPool, id: TaskId) -> String {
    sqlx::query_scalar("SELECT tableoid::regclass::text FROM tasks WHERE id = $1")
        .bind(id.0)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Today's day partition, as the database names it (UTC), made sure to exist (a test database
/// comes from a template that may be older than today).
async fn todays_partition(pool: &PgPool) -> String {
    sqlx::query_scalar::<_, bool>(
        "SELECT leasehold_tasks_done_partition((now() AT TIME ZONE 'UTC')::date)",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    sqlx::query_scalar("SELECT 'tasks_done_' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')")
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn status_of(store: &dyn Store, id: TaskId) -> TaskStatus {
    store.task_get(id).await.unwrap().unwrap().task.status
}

#[tokio::test]
async fn every_way_a_task_finishes_moves_it_out_of_the_live_partition_and_it_is_still_found() {
    let db = TestDb::new().await.unwrap();
    let store = db.store();
    let today = todays_partition(&db.pool).await;

    let ok = store
        .task_enqueue(NewTask::new(tt("p.ok"), json!({})))
        .await
        .unwrap()
        .id;
    let doomed = store
        .task_enqueue(NewTask::new(tt("p.doomed"), json!({})).with_max_attempts(1))
        .await
        .unwrap()
        .id;
    let flaky = store
        .task_enqueue(NewTask::new(tt("p.flaky"), json!({})).with_max_attempts(5))
        .await
        .unwrap()
        .id;
    let waiting = store
        .task_enqueue(NewTask::new(tt("p.waiting"), json!({})))
        .await
        .unwrap()
        .id;
    let running = store
        .task_enqueue(NewTask::new(tt("p.cancelled"), json!({})))
        .await
        .unwrap()
        .id;

    let ok_batch = store.task_claim(claim(OWNER, &["p.ok"], 1)).await.unwrap();
    complete_all(&store, OWNER, &ok_batch.tasks).await;
    for (task_type, error) in [
        ("p.doomed", TaskError::retryable("flaky", "again")),
        ("p.flaky", TaskError::retryable("flaky", "again")),
    ] {
        let t = &store
            .task_claim(claim(OWNER, &[task_type], 1))
            .await
            .unwrap()
            .tasks[0];
        store
            .task_complete(leasehold_shared::store::CompleteParams {
                key: key(t.id.0, OWNER, t.lease_epoch.0),
                completion: Completion::Failed { error },
            })
            .await
            .unwrap();
    }
    let cancelled = store
        .task_cancel(CancelParams {
            id: waiting,
            actor: Actor::operator("test"),
        })
        .await
        .unwrap();
    assert!(
        matches!(cancelled, CancelOutcome::Cancelled),
        "{cancelled:?}"
    );
    // A running task asked to cancel finishes when its holder gives it back.
    let held = &store
        .task_claim(claim(OWNER, &["p.cancelled"], 1))
        .await
        .unwrap()
        .tasks[0];
    store
        .task_cancel(CancelParams {
            id: running,
            actor: Actor::operator("test"),
        })
        .await
        .unwrap();
    store
        .lease_release_many(leasehold_shared::store::ReleaseParams {
            owner: leasehold_tests::helpers::agent(OWNER),
            leases: vec![(held.id, held.lease_epoch)],
        })
        .await
        .unwrap();

    for (id, status) in [
        (ok, TaskStatus::Succeeded),
        (doomed, TaskStatus::Dead),
        (waiting, TaskStatus::Cancelled),
        (running, TaskStatus::Cancelled),
    ] {
        assert_eq!(
            partition_of(&db.pool, id).await,
            today,
            "task {id} ({status})"
        );
        assert_eq!(status_of(&store, id).await, status, "task {id}");
    }
    // A failure to be retried is not finished: it stays live.
    assert_eq!(partition_of(&db.pool, flaky).await, "tasks_live");
    assert_eq!(status_of(&store, flaky).await, TaskStatus::RetryWait);
    let live: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks_live")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(live, 1, "only the task waiting to retry is live");
    // The final attempt is read from the moved row.
    let detail = store.task_get(doomed).await.unwrap().unwrap();
    assert_eq!(detail.attempts.len(), 1, "{:?}", detail.attempts);
    let listed = store
        .task_list(leasehold_shared::store::TaskListParams {
            statuses: vec![TaskStatus::Dead],
            limit: 50,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        listed.tasks.iter().map(|t| t.id).collect::<Vec<_>>(),
        vec![doomed]
    );

    // A requeue moves it back, and it runs again.
    store
        .task_requeue(RequeueParams {
            id: doomed,
            actor: Actor::operator("test"),
        })
        .await
        .unwrap();
    assert_eq!(partition_of(&db.pool, doomed).await, "tasks_live");
    let again = store
        .task_claim(claim(OWNER, &["p.doomed"], 1))
        .await
        .unwrap();
    assert_eq!(again.tasks.len(), 1);
    assert_eq!(again.tasks[0].id, doomed);
    db.drop_db().await.unwrap();
}

/// Puts `n` tasks of `status` finished at noon (UTC) `days_ago` days back into that day's
/// partition (created here), with one attempt row each; returns their ids.
async fn finished_days_ago(pool: &PgPool, days_ago: i32, status: &str, n: i32) -> Vec<i64> {
    sqlx::query_scalar::<_, bool>(
        "SELECT leasehold_tasks_done_partition((now() AT TIME ZONE 'UTC')::date - $1)",
    )
    .bind(days_ago)
    .fetch_one(pool)
    .await
    .unwrap();
    let ids: Vec<i64> = sqlx::query_scalar(
        "INSERT INTO tasks (task_type, status, finished_at, done_on, attempt, lease_epoch)
         SELECT 'p.old', $2,
                ((now() AT TIME ZONE 'UTC')::date - $1 + time '12:00') AT TIME ZONE 'UTC',
                (now() AT TIME ZONE 'UTC')::date - $1, 2, 2
         FROM generate_series(1, $3)
         RETURNING id",
    )
    .bind(days_ago)
    .bind(status)
    .bind(n)
    .fetch_all(pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO task_attempt_rows (task_id, epoch, attempt, agent, started_at, outcome)
         SELECT id, 1, 1, 'old#1', now() - interval '30 days', 'failed' FROM unnest($1::bigint[]) AS id",
    )
    .bind(&ids)
    .execute(pool)
    .await
    .unwrap();
    ids
}

async fn partition_exists(pool: &PgPool, days_ago: i32) -> bool {
    sqlx::query_scalar(
        "SELECT to_regclass('tasks_done_' || to_char((now() AT TIME ZONE 'UTC')::date - $1, 'YYYYMMDD')) IS NOT NULL",
    )
    .bind(days_ago)
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn attempt_rows_of(pool: &PgPool, ids: &[i64]) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM task_attempt_rows WHERE task_id = ANY($1)")
        .bind(ids)
        .fetch_one(pool)
        .await
        .unwrap()
}

fn purge(statuses: Vec<TaskStatus>, older_than: Duration) -> PurgeParams {
    PurgeParams {
        statuses,
        older_than,
        limit: 1000,
    }
}

const DAY: Duration = Duration::from_secs(86_400);

#[tokio::test]
async fn retention_drops_whole_days_and_keeps_dead_tasks_for_their_own() {
    let db = TestDb::new().await.unwrap();
    let store = db.store();
    let old_done = finished_days_ago(&db.pool, 10, "succeeded", 300).await;
    let old_dead = finished_days_ago(&db.pool, 10, "dead", 2).await;
    let recent = finished_days_ago(&db.pool, 3, "succeeded", 5).await;
    let finished = vec![
        TaskStatus::Succeeded,
        TaskStatus::PartiallySucceeded,
        TaskStatus::Cancelled,
    ];

    // Seven days' retention: the day ten days back goes whole, three days back stays.
    let purged = store
        .task_purge_finished(purge(finished.clone(), 7 * DAY))
        .await
        .unwrap();
    assert_eq!(purged, 300, "the succeeded tasks of the dropped day");
    assert!(!partition_exists(&db.pool, 10).await, "day 10 dropped");
    assert!(partition_exists(&db.pool, 3).await, "day 3 kept");
    assert_eq!(
        attempt_rows_of(&db.pool, &old_done).await,
        0,
        "their attempts went too"
    );
    for id in &recent {
        assert!(store.task_get(TaskId(*id)).await.unwrap().is_some());
    }
    // Its dead tasks outlive it: moved to tasks_done_kept, still found, attempts kept.
    for id in &old_dead {
        assert_eq!(partition_of(&db.pool, TaskId(*id)).await, "tasks_done_kept");
        assert_eq!(status_of(&store, TaskId(*id)).await, TaskStatus::Dead);
    }
    assert_eq!(attempt_rows_of(&db.pool, &old_dead).await, 2);
    // A second pass has nothing to do.
    assert_eq!(
        store
            .task_purge_finished(purge(finished.clone(), 7 * DAY))
            .await
            .unwrap(),
        0
    );

    // Dead tasks at thirty days: ten days old, kept.
    assert_eq!(
        store
            .task_purge_finished(purge(vec![TaskStatus::Dead], 30 * DAY))
            .await
            .unwrap(),
        0
    );
    // At nine days, deleted row by row from tasks_done_kept, with their attempts.
    assert_eq!(
        store
            .task_purge_finished(purge(vec![TaskStatus::Dead], 9 * DAY))
            .await
            .unwrap(),
        2
    );
    for id in &old_dead {
        assert!(store.task_get(TaskId(*id)).await.unwrap().is_none());
    }
    assert_eq!(attempt_rows_of(&db.pool, &old_dead).await, 0);
    db.drop_db().await.unwrap();
}

#[tokio::test]
async fn retention_below_a_day_deletes_row_by_row_and_days_without_a_partition_are_served() {
    let db = TestDb::new().await.unwrap();
    let store = db.store();
    todays_partition(&db.pool).await;
    let id = store
        .task_enqueue(NewTask::new(tt("p.short"), json!({})))
        .await
        .unwrap()
        .id;
    let batch = store
        .task_claim(claim(OWNER, &["p.short"], 1))
        .await
        .unwrap();
    complete_all(&store, OWNER, &batch.tasks).await;
    sqlx::query("UPDATE tasks SET finished_at = now() - interval '2 hours' WHERE id = $1")
        .bind(id.0)
        .execute(&db.pool)
        .await
        .unwrap();
    // A day with no partition of its own (the leader was away) finishes into the default one.
    let stray: i64 = sqlx::query_scalar(
        "INSERT INTO tasks (task_type, status, finished_at, done_on)
         VALUES ('p.stray', 'succeeded', now() - interval '40 days',
                 (now() AT TIME ZONE 'UTC')::date - 40)
         RETURNING id",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        partition_of(&db.pool, TaskId(stray)).await,
        "tasks_done_default"
    );

    let hour = Duration::from_secs(3600);
    let purged = store
        .task_purge_finished(purge(vec![TaskStatus::Succeeded], hour))
        .await
        .unwrap();
    assert_eq!(purged, 2, "the task of today and the stray one");
    assert!(store.task_get(id).await.unwrap().is_none());
    assert!(store.task_get(TaskId(stray)).await.unwrap().is_none());
    db.drop_db().await.unwrap();
}

/// Starts moving task `id` to today's partition as a completion would, in a transaction left
/// open; the caller commits it.
async fn finish_uncommitted(db: &TestDb, id: TaskId) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut tx = db.pool.begin().await.unwrap();
    let moved = sqlx::query(
        "UPDATE tasks SET status = 'succeeded', final_outcome = 'succeeded', lease_until = NULL,
                finished_at = now(), done_on = (now() AT TIME ZONE 'UTC')::date
         WHERE id = $1 AND done_on = 'infinity'",
    )
    .bind(id.0)
    .execute(&mut *tx)
    .await
    .unwrap();
    assert_eq!(moved.rows_affected(), 1);
    tx
}

#[tokio::test]
async fn statements_that_waited_on_a_task_that_finished_meanwhile_see_it_finished() {
    let db = TestDb::new().await.unwrap();
    let store = db.store();
    todays_partition(&db.pool).await;
    let ids: Vec<TaskId> = store
        .task_enqueue_many(vec![NewTask::new(tt("p.race"), json!({})); 2])
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect();
    let tasks = store
        .task_claim(claim(OWNER, &["p.race"], 2))
        .await
        .unwrap()
        .tasks;
    assert_eq!(tasks.len(), 2);

    // The heartbeat renews a lease whose completion is committing: it waits on the row, which
    // then moves to another partition. It must report the lease gone, not fail.
    let tx = finish_uncommitted(&db, ids[0]).await;
    let renewal = {
        let store = store.clone();
        let leases = tasks
            .iter()
            .map(|t| (t.id, t.lease_epoch))
            .collect::<Vec<(TaskId, LeaseEpoch)>>();
        tokio::spawn(async move {
            store
                .lease_renew_many(RenewParams {
                    owner: leasehold_tests::helpers::agent(OWNER),
                    leases,
                    lease_ttl: Duration::from_secs(30),
                    alive_for: None,
                })
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !renewal.is_finished(),
        "the renewal waits on the locked row"
    );
    tx.commit().await.unwrap();
    let renewed = renewal
        .await
        .unwrap()
        .expect("a renewal racing a finish must not fail");
    assert_eq!(
        renewed.renewed.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![ids[1]]
    );
    assert_eq!(renewed.lost.len(), 1);
    assert_eq!(renewed.lost[0].0, ids[0]);

    // An operator's cancel that waited on a finishing task finds it finished.
    let tx = finish_uncommitted(&db, ids[1]).await;
    let cancel = {
        let store = store.clone();
        let id = ids[1];
        tokio::spawn(async move {
            store
                .task_cancel(CancelParams {
                    id,
                    actor: Actor::operator("test"),
                })
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    tx.commit().await.unwrap();
    let cancelled = cancel.await.unwrap();
    assert!(
        matches!(
            cancelled,
            Err(leasehold_shared::StoreError::Transition { .. })
        ),
        "a cancel of a finished task is refused as such: {cancelled:?}"
    );
    assert_eq!(status_of(&store, ids[1]).await, TaskStatus::Succeeded);
    db.drop_db().await.unwrap();
}

#[tokio::test]
async fn an_idempotency_key_stays_with_its_task_after_the_task_finishes() {
    let db = TestDb::new().await.unwrap();
    let store = db.store();
    todays_partition(&db.pool).await;
    let keyed = |k: &str| NewTask::new(tt("p.key"), json!({})).with_idempotency_key(k);
    let first = store.task_enqueue(keyed("k-1")).await.unwrap();
    assert!(first.created);
    let batch = store.task_claim(claim(OWNER, &["p.key"], 1)).await.unwrap();

    // The holder finishes while a second enqueue of its key waits on the key's live index
    // entry: the enqueue must come back with the holder, not a second task.
    let tx = finish_uncommitted(&db, first.id).await;
    let racing = {
        let store = store.clone();
        tokio::spawn(async move { store.task_enqueue(keyed("k-1")).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !racing.is_finished(),
        "the enqueue waits on the key's holder"
    );
    tx.commit().await.unwrap();
    let second = racing.await.unwrap().unwrap();
    assert!(!second.created, "{second:?}");
    assert_eq!(second.id, first.id);
    drop(batch);

    // Once finished: one enqueue, a bulk one, and plain SQL all meet the finished holder.
    let again = store.task_enqueue(keyed("k-1")).await.unwrap();
    assert_eq!((again.created, again.id), (false, first.id));
    assert_eq!(again.existing_status, Some(TaskStatus::Succeeded));
    let bulk = store
        .task_enqueue_many(vec![keyed("k-1"), keyed("k-2")])
        .await
        .unwrap();
    assert_eq!((bulk[0].created, bulk[0].id), (false, first.id));
    assert!(bulk[1].created);
    let plain =
        sqlx::query("INSERT INTO tasks (task_type, idempotency_key) VALUES ('p.key', 'k-1')")
            .execute(&db.pool)
            .await
            .unwrap_err();
    let plain = plain.as_database_error().unwrap();
    assert_eq!(plain.code().as_deref(), Some("23505"));
    assert_eq!(plain.constraint(), Some("tasks_idempotency_key_done"));
    let holders: i64 =
        sqlx::query_scalar("SELECT count(*) FROM tasks WHERE idempotency_key = 'k-1'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(holders, 1);
    db.drop_db().await.unwrap();
}

#[tokio::test]
async fn a_transactional_completion_that_waited_on_a_task_finished_elsewhere_is_fenced() {
    let db = TestDb::new().await.unwrap();
    let store = db.store();
    todays_partition(&db.pool).await;
    store
        .task_enqueue(NewTask::new(tt("p.txn"), json!({})))
        .await
        .unwrap();
    let held = store
        .task_claim(claim(OWNER, &["p.txn"], 1))
        .await
        .unwrap()
        .tasks
        .remove(0);
    // Another transaction (the leader recovering what it took for an expired lease) finishes
    // the task while the handler's own transaction completes it.
    let other = finish_uncommitted(&db, held.id).await;
    let pool = db.pool.clone();
    let handler = tokio::spawn(async move {
        let mut tx = pool.begin().await.unwrap();
        let outcome = leasehold_shared::store::postgres::task_complete_in(
            &mut tx,
            &leasehold_shared::store::CompleteParams {
                key: key(held.id.0, OWNER, held.lease_epoch.0),
                completion: Completion::Succeeded { result: None },
            },
        )
        .await;
        tx.rollback().await.unwrap();
        outcome
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!handler.is_finished(), "the completion waits on the row");
    other.commit().await.unwrap();
    let outcome = handler.await.unwrap();
    assert!(
        matches!(
            outcome,
            Ok(leasehold_shared::store::CompleteOutcome::Fenced)
        ),
        "the handler must hear its lease is gone: {outcome:?}"
    );
    db.drop_db().await.unwrap();
}

/// Index and sequential scans of every partition of finished tasks so far (statistics).
async fn history_scans(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT coalesce(sum(coalesce(idx_scan, 0) + coalesce(seq_scan, 0)), 0)::bigint
         FROM pg_stat_user_tables
         WHERE relid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'tasks'::regclass)
           AND relname <> 'tasks_live'",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn live_updates(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'tasks_live'")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn claims_renewals_and_completions_read_no_finished_partition() {
    let db = TestDb::new().await.unwrap();
    let setup = db.store();
    todays_partition(&db.pool).await;
    // History to be read if a statement did: finished tasks today and three days back; a
    // limited type, whose claim counts its running tasks.
    finished_days_ago(&db.pool, 3, "succeeded", 50).await;
    sqlx::query("INSERT INTO policies (scope, max_concurrency) VALUES ('p.hot', 100)")
        .execute(&db.pool)
        .await
        .unwrap();
    let tasks: Vec<NewTask> = (0..200)
        .map(|i| NewTask::new(tt("p.hot"), json!({ "i": i })))
        .collect();
    setup.task_enqueue_many(tasks).await.unwrap();
    // A backend's statistics reach the shared counters for sure when it exits: the setup's
    // pool is closed before the count, and the drain's pool before the count after it.
    db.pool.close().await;
    let reader = db.pool_with(1).await.unwrap();
    let scans_before = history_scans(&reader).await;
    let drain_pool = db.pool_with(4).await.unwrap();
    let store = leasehold_shared::store::postgres::PgStore::from_pool(
        drain_pool.clone(),
        Default::default(),
    );
    let mut done = 0;
    while done < 200 {
        let batch = store
            .task_claim(claim(OWNER, &["p.hot"], 40))
            .await
            .unwrap();
        assert!(!batch.tasks.is_empty());
        store
            .lease_renew_many(RenewParams {
                owner: leasehold_tests::helpers::agent(OWNER),
                leases: batch.tasks.iter().map(|t| (t.id, t.lease_epoch)).collect(),
                lease_ttl: Duration::from_secs(30),
                alive_for: None,
            })
            .await
            .unwrap();
        complete_all(&store, OWNER, &batch.tasks).await;
        done += batch.tasks.len();
    }
    drain_pool.close().await;
    leasehold_tests::wait_until(
        "the drain's statistics flushed",
        Duration::from_secs(30),
        || {
            let reader = reader.clone();
            async move { Ok(live_updates(&reader).await >= 400) }
        },
    )
    .await
    .unwrap();
    let per: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT relname::text, coalesce(idx_scan, 0), coalesce(seq_scan, 0)
         FROM pg_stat_user_tables WHERE relname LIKE 'tasks%' ORDER BY 1",
    )
    .fetch_all(&reader)
    .await
    .unwrap();
    assert_eq!(
        history_scans(&reader).await - scans_before,
        0,
        "a claim, renewal or completion read a partition of finished tasks: {per:?}"
    );
    reader.close().await;
    db.drop_db().await.unwrap();
}

#[tokio::test]
async fn a_keyed_enqueue_outside_read_committed_is_refused_and_changes_nothing() {
    let db = TestDb::new().await.unwrap();
    let mut tx = db.pool.begin().await.unwrap();
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut *tx)
        .await
        .unwrap();
    // Its snapshot could miss a holder of the key that finished while the insert waited on it.
    let refused = leasehold_shared::store::postgres::enqueue::task_enqueue(
        &mut *tx,
        &NewTask::new(tt("p.rr"), json!({})).with_idempotency_key("rr-1"),
        &Default::default(),
    )
    .await
    .unwrap_err();
    assert!(
        refused.to_string().contains("READ COMMITTED"),
        "the refusal says what to do: {refused}"
    );
    tx.rollback().await.unwrap();
    // Without a key there is nothing to miss.
    let mut tx = db.pool.begin().await.unwrap();
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut *tx)
        .await
        .unwrap();
    leasehold_shared::store::postgres::enqueue::task_enqueue(
        &mut *tx,
        &NewTask::new(tt("p.rr"), json!({})),
        &Default::default(),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let keyed: i64 =
        sqlx::query_scalar("SELECT count(*) FROM tasks WHERE idempotency_key IS NOT NULL")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(keyed, 0);
    db.drop_db().await.unwrap();
}

#[tokio::test]
async fn retention_row_by_row_looks_tasks_live_up_by_id_under_either_plan() {
    let db = TestDb::new().await.unwrap();
    // The whole queue lives in tasks_live: retention must not read it to find the few finished
    // rows a plain UPDATE left there. Its generic plan (what a prepared statement settles on
    // after five runs) used to scan tasks_live filtered by status: 0.4 s a million queued
    // tasks, every housekeeping pass.
    // No ANALYZE: a queue loaded faster than autovacuum samples it (from about a million
    // rows on, the old statement's generic plan scanned it).
    sqlx::query("INSERT INTO tasks (task_type) SELECT 'ret.q' FROM generate_series(1, 1000000)")
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE tasks SET status = 'succeeded', finished_at = now() - interval '30 days'
         WHERE id IN (SELECT id FROM tasks_live ORDER BY id LIMIT 3)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let sql = include_str!("../../shared/src/store/postgres/sql/task_purge_finished_undivided.sql");
    for (n, mode) in leasehold_tests::helpers::PLAN_MODES.into_iter().enumerate() {
        let mut tx = leasehold_tests::helpers::tx_planning(&db.pool, mode).await;
        // A prepared statement, as the store runs it (an EXPLAIN with bound values would
        // always plan for the values).
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "PREPARE retention_{n}(text[], float8, bigint) AS {sql}"
        )))
        .execute(&mut *tx)
        .await
        .unwrap();
        // A prepared statement outlives the transaction: one name per mode.
        let plan: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "EXPLAIN EXECUTE retention_{n}(ARRAY['succeeded', 'partially_succeeded', 'cancelled'], 604800, 1000)"
        )))
        .fetch_all(&mut *tx)
        .await
        .unwrap();
        tx.rollback().await.unwrap();
        let plan = plan.join("\n");
        assert!(
            !plan.contains("Seq Scan on tasks_live"),
            "{mode}: retention reads the whole of tasks_live:\n{plan}"
        );
        // The delete finds its rows in tasks_live by their ids.
        assert!(
            plan.contains("Index Cond: ((id = ANY ($") || plan.contains("Index Cond: (id = ANY ($"),
            "{mode}: retention looks tasks_live up by id:\n{plan}"
        );
    }
    // And it still deletes those three (a week's retention; they finished a month ago).
    let store = db.store();
    let purged = store
        .task_purge_finished(leasehold_shared::store::PurgeParams {
            statuses: vec![
                TaskStatus::Succeeded,
                TaskStatus::PartiallySucceeded,
                TaskStatus::Cancelled,
            ],
            older_than: Duration::from_secs(7 * 86_400),
            limit: 1000,
        })
        .await
        .unwrap();
    assert_eq!(purged, 3);
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(left, 1_000_000 - 3);
    db.drop_db().await.unwrap();
}
