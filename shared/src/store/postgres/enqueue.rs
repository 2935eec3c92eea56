//! Enqueue, generic over the executor: pass a pool, a connection, or your own transaction to
//! enqueue atomically with your business data (the task exists if and only if you commit).

use sqlx::PgExecutor;

use super::rows::get;
use super::sql;
use crate::domain::{InputLimits, TaskId};
use crate::store::params::{ValidTask, validate_bulk};
use crate::store::{Enqueued, NewTask, Result, StoreError};

/// Enqueues one task through `executor`. With an idempotency key already used, returns the
/// existing task (`created = false`).
pub async fn task_enqueue<'e, E: PgExecutor<'e>>(
    executor: E,
    task: &NewTask,
    limits: &InputLimits,
) -> Result<Enqueued> {
    let valid = task.validate(limits)?;
    enqueue_valid(executor, &valid)
        .await?
        .ok_or_else(|| StoreError::Corrupt {
            what: "enqueue",
            detail: "idempotency key conflicted with a row that is not visible yet; retry".into(),
        })
}

/// Like [`task_enqueue`] on a pool, retrying once the rare case where the conflicting row of an
/// idempotency key was committed by a concurrent transaction after this statement began.
pub(super) async fn task_enqueue_with_retry(
    pool: &sqlx::PgPool,
    task: &NewTask,
    limits: &InputLimits,
) -> Result<Enqueued> {
    let valid = task.validate(limits)?;
    for _ in 0..3 {
        if let Some(done) = enqueue_valid(pool, &valid).await? {
            return Ok(done);
        }
    }
    Err(StoreError::Corrupt {
        what: "enqueue",
        detail: "idempotency key kept conflicting with an invisible row".into(),
    })
}

/// Inserts one validated task (or finds the task of its idempotency key). `None`: the key's
/// task was committed by a concurrent transaction after this statement began and cannot be
/// seen by it; a new statement (also in the same READ COMMITTED transaction) will see it.
pub(super) async fn enqueue_valid<'e, E: PgExecutor<'e>>(
    executor: E,
    v: &ValidTask,
) -> Result<Option<Enqueued>> {
    let row = sqlx::query(sql::task_enqueue)
        .bind(&v.task_type)
        .bind(&v.payload)
        .bind(v.priority)
        .bind(v.delay_ms as f64)
        .bind(v.run_at)
        .bind(v.deadline)
        .bind(v.timeout_ms)
        .bind(v.max_attempts)
        .bind(&v.idempotency_key)
        .bind(&v.concurrency_key)
        .fetch_optional(executor)
        .await
        .map_err(StoreError::db("task_enqueue"))?;
    row.map(|row| {
        Ok(Enqueued {
            id: TaskId(get(&row, "id")?),
            created: get(&row, "created")?,
        })
    })
    .transpose()
}

/// Enqueues many tasks in one statement through `executor`; results come back in input order.
///
/// If an idempotency key of the batch was committed by a concurrent transaction while this
/// statement ran, its id cannot be seen yet and this returns an error: roll back and retry
/// (the store's own [`crate::Store::task_enqueue_many`] does so by itself).
pub async fn task_enqueue_many<'e, E: PgExecutor<'e>>(
    executor: E,
    tasks: &[NewTask],
    limits: &InputLimits,
) -> Result<Vec<Enqueued>> {
    let valid = validate_bulk(tasks, limits)?;
    enqueue_many_valid(executor, &valid)
        .await?
        .ok_or_else(invisible_key)
}

fn invisible_key() -> StoreError {
    StoreError::Corrupt {
        what: "bulk enqueue",
        detail: "an idempotency key was committed by a concurrent transaction during this one; roll back and retry".into(),
    }
}

/// The pool's bulk enqueue: in its own transaction, retried when a concurrent transaction
/// committed one of the batch's idempotency keys mid-statement (nothing is kept from a try
/// that could not report every id).
pub(super) async fn task_enqueue_many_with_retry(
    pool: &sqlx::PgPool,
    tasks: &[NewTask],
    limits: &InputLimits,
) -> Result<Vec<Enqueued>> {
    let valid = validate_bulk(tasks, limits)?;
    for _ in 0..3 {
        let mut tx = pool
            .begin_with(super::BEGIN_READ_COMMITTED)
            .await
            .map_err(StoreError::db("task_enqueue_many"))?;
        match enqueue_many_valid(&mut *tx, &valid).await? {
            Some(done) => {
                tx.commit()
                    .await
                    .map_err(StoreError::db("task_enqueue_many"))?;
                return Ok(done);
            }
            None => tx
                .rollback()
                .await
                .map_err(StoreError::db("task_enqueue_many"))?,
        }
    }
    Err(invisible_key())
}

async fn enqueue_many_valid<'e, E: PgExecutor<'e>>(
    executor: E,
    valid: &[ValidTask],
) -> Result<Option<Vec<Enqueued>>> {
    if valid.is_empty() {
        return Ok(Some(Vec::new()));
    }
    let n = valid.len();
    let mut types = Vec::with_capacity(n);
    let mut payloads = Vec::with_capacity(n);
    let mut priorities = Vec::with_capacity(n);
    let mut delays = Vec::with_capacity(n);
    let mut run_ats = Vec::with_capacity(n);
    let mut deadlines = Vec::with_capacity(n);
    let mut timeouts = Vec::with_capacity(n);
    let mut max_attempts = Vec::with_capacity(n);
    let mut keys = Vec::with_capacity(n);
    let mut concurrency_keys = Vec::with_capacity(n);
    for v in valid {
        types.push(v.task_type.as_str());
        payloads.push(v.payload.as_str());
        priorities.push(v.priority);
        delays.push(v.delay_ms);
        run_ats.push(v.run_at);
        deadlines.push(v.deadline);
        timeouts.push(v.timeout_ms);
        max_attempts.push(v.max_attempts);
        keys.push(v.idempotency_key.as_deref());
        concurrency_keys.push(v.concurrency_key.as_deref());
    }
    let rows = sqlx::query(sql::task_enqueue_many)
        .bind(types)
        .bind(payloads)
        .bind(priorities)
        .bind(delays)
        .bind(run_ats)
        .bind(deadlines)
        .bind(timeouts)
        .bind(max_attempts)
        .bind(keys)
        .bind(concurrency_keys)
        .fetch_all(executor)
        .await
        .map_err(StoreError::db("task_enqueue_many"))?;
    if rows.len() != n {
        return Err(StoreError::Corrupt {
            what: "bulk enqueue",
            detail: format!("{} results for {n} tasks", rows.len()),
        });
    }
    let mut out = Vec::with_capacity(n);
    for row in &rows {
        let Some(id) = get::<Option<i64>>(row, "id")? else {
            return Ok(None);
        };
        out.push(Enqueued {
            id: TaskId(id),
            created: get(row, "created")?,
        });
    }
    Ok(Some(out))
}
