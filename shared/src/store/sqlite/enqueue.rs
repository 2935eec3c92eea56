//! Enqueue: one task, a bulk, or one in your own transaction ([`task_enqueue_on`]). Each runs
//! in one BEGIN IMMEDIATE transaction: it holds the write lock from its first write, so an
//! idempotency key's holder read after the insert attempt is the holder changed — a claim, a
//! completion or another enqueue cannot slip in between (see the modes in
//! [`crate::domain::unique`]). A bulk of tasks without idempotency keys is one statement;
//! a bulk with keys is enqueued task by task, in input order, in one transaction.

use serde_json::json;
use sqlx::{SqliteConnection, SqlitePool};

use super::rows::{self, get, micros, status};
use super::{commit, sql, write_tx};
use crate::domain::{InputLimits, OnConflict, TaskId};
use crate::store::params::{ValidTask, validate_bulk};
use crate::store::{EnqueueOutcome, Enqueued, NewTask, Result, StoreError};

pub(super) async fn task_enqueue(
    pool: &SqlitePool,
    task: &NewTask,
    limits: &InputLimits,
) -> Result<Enqueued> {
    let valid = task.validate(limits)?;
    let (mut tx, now) = write_tx(pool, "task_enqueue").await?;
    let done = enqueue_valid(&mut tx, &valid, now).await?;
    commit(tx, "task_enqueue").await?;
    Ok(done)
}

pub(super) async fn task_enqueue_many(
    pool: &SqlitePool,
    tasks: &[NewTask],
    limits: &InputLimits,
) -> Result<Vec<Enqueued>> {
    let valid = validate_bulk(tasks, limits)?;
    if valid.is_empty() {
        return Ok(Vec::new());
    }
    let (mut tx, now) = write_tx(pool, "task_enqueue_many").await?;
    let out = if valid.iter().all(|v| v.idempotency_key.is_none()) {
        insert_many(&mut tx, &valid, now).await?
    } else {
        // Keys: each row looks its key up first (a key may also repeat within the batch).
        let mut out = Vec::with_capacity(valid.len());
        for v in &valid {
            out.push(enqueue_valid(&mut tx, v, now).await?);
        }
        out
    };
    commit(tx, "task_enqueue_many").await?;
    Ok(out)
}

/// Inserts tasks without idempotency keys in one statement. Rows are inserted in the order
/// json_each yields them and ids grow with each insert, so the sorted ids are the input order.
async fn insert_many(
    tx: &mut SqliteConnection,
    valid: &[ValidTask],
    now: i64,
) -> Result<Vec<Enqueued>> {
    const OP: &str = "task_enqueue_many";
    let rows: Vec<serde_json::Value> = valid
        .iter()
        .map(|v| {
            json!([
                v.task_type,
                v.payload,
                v.priority,
                available_at(v, now),
                v.deadline.map(micros),
                v.timeout_ms,
                v.max_attempts,
                v.concurrency_key,
            ])
        })
        .collect();
    let mut ids: Vec<i64> = sqlx::query_scalar(sql::task_enqueue_many)
        .bind(rows::to_text(&rows, "tasks")?)
        .bind(now)
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    if ids.len() != valid.len() {
        return Err(StoreError::Corrupt {
            what: "bulk enqueue",
            detail: format!("{} ids for {} tasks", ids.len(), valid.len()),
        });
    }
    ids.sort_unstable();
    Ok(ids
        .into_iter()
        .map(|id| Enqueued::created(TaskId(id)))
        .collect())
}

/// Enqueues one task on `conn` — pass your own transaction to enqueue atomically with your
/// business data (the task exists if and only if you commit; begin it with `BEGIN IMMEDIATE`
/// when it also reads, e.g. with a mode other than skip or `unique_for`). With an idempotency
/// key already used, returns the existing task (`created = false`) or settles the conflict as
/// the task's mode says (see [`Enqueued::outcome`]). Times come from SQLite's clock, as in
/// the store.
pub async fn task_enqueue_on(
    conn: &mut SqliteConnection,
    task: &NewTask,
    limits: &InputLimits,
) -> Result<Enqueued> {
    let valid = task.validate(limits)?;
    let now: i64 = sqlx::query_scalar(sql::db_now)
        .fetch_one(&mut *conn)
        .await
        .map_err(StoreError::db("task_enqueue"))?;
    enqueue_valid(conn, &valid, now).await
}

/// Inserts one validated task inside a write transaction, or settles its idempotency key's
/// conflict as the task's mode says: the existing task is returned (`skip`, or not waiting),
/// replaced or debounced (waiting), or — with `unique_for`, when it finished that long ago —
/// gives the key up to a new task. The write lock means no other writer (a claim, a
/// completion, another enqueue) can change the holder between the read and the write.
pub(super) async fn enqueue_valid(
    tx: &mut SqliteConnection,
    v: &ValidTask,
    now: i64,
) -> Result<Enqueued> {
    const OP: &str = "task_enqueue";
    // Insert first: a key already used inserts nothing (even one committed by another process
    // a moment ago), and only then is the existing task looked up. A read before the write
    // would race on an autocommit connection and upgrade a deferred transaction's snapshot;
    // after the write this connection holds the write lock.
    if let Some(id) = insert_one(tx, v, now).await? {
        return Ok(Enqueued::created(TaskId(id)));
    }
    let holder = sqlx::query(sql::task_enqueue_existing)
        .bind(&v.idempotency_key)
        .fetch_optional(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?
        .ok_or_else(|| StoreError::Corrupt {
            what: "enqueue",
            detail: "the insert was skipped but no task holds its idempotency key".into(),
        })?;
    let id = TaskId(get(&holder, "id")?);
    let found = status(&get::<String>(&holder, "status")?)?;
    let finished_at: Option<i64> = get(&holder, "finished_at")?;
    let expired = match (v.unique_for_ms, finished_at) {
        (Some(window), Some(at)) if found.is_terminal() => {
            at <= now.saturating_sub(window.saturating_mul(1000))
        }
        _ => false,
    };
    if expired {
        sqlx::query(sql::task_enqueue_release)
            .bind(id.0)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
        let new = insert_one(tx, v, now)
            .await?
            .ok_or_else(|| StoreError::Corrupt {
                what: "enqueue",
                detail: format!("the idempotency key released by task {id} was taken"),
            })?;
        return Ok(Enqueued {
            released_from: Some(id),
            ..Enqueued::created(TaskId(new))
        });
    }
    if v.on_conflict == OnConflict::Skip || !found.is_claimable() {
        return Ok(Enqueued::existing(
            id,
            EnqueueOutcome::Existing,
            Some(found),
        ));
    }
    let debounce = v.on_conflict == OnConflict::Debounce;
    let changed: Option<i64> = sqlx::query_scalar(sql::task_enqueue_replace)
        .bind(id.0)
        .bind(&v.payload)
        .bind(available_at(v, now))
        .bind(v.priority)
        .bind(v.deadline.map(micros))
        .bind(v.timeout_ms)
        .bind(v.max_attempts)
        .bind(&v.concurrency_key)
        .bind(debounce)
        .bind(now)
        .fetch_optional(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    if changed.is_none() {
        return Err(StoreError::Corrupt {
            what: "enqueue",
            detail: format!("task {id} was read waiting but its update found it not"),
        });
    }
    let outcome = if debounce {
        EnqueueOutcome::Debounced
    } else {
        EnqueueOutcome::Replaced
    };
    Ok(Enqueued::existing(id, outcome, Some(found)))
}

/// When a task enqueued `now` is due: its run-at time, or now plus its delay.
fn available_at(v: &ValidTask, now: i64) -> i64 {
    match v.run_at {
        Some(at) => micros(at),
        None => now.saturating_add(v.delay_ms.saturating_mul(1000)),
    }
}

/// Inserts `v` unless its idempotency key is held: the new id, or `None`.
async fn insert_one(tx: &mut SqliteConnection, v: &ValidTask, now: i64) -> Result<Option<i64>> {
    sqlx::query_scalar(sql::task_enqueue)
        .bind(&v.task_type)
        .bind(&v.payload)
        .bind(v.priority)
        .bind(available_at(v, now))
        .bind(v.deadline.map(micros))
        .bind(v.timeout_ms)
        .bind(v.max_attempts)
        .bind(&v.idempotency_key)
        .bind(now)
        .bind(&v.concurrency_key)
        .fetch_optional(&mut *tx)
        .await
        .map_err(StoreError::db("task_enqueue"))
}
