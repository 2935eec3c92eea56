//! Enqueue, generic over where it runs: pass a pool, a connection, or your own transaction's
//! connection (`&mut *tx`) to enqueue atomically with your business data (the task exists if
//! and only if you commit).
//!
//! Two paths. A *plain* task (no idempotency key, or a key with `skip` and no `unique_for`) is
//! one statement, as a bulk of plain tasks is (task_enqueue.sql, task_enqueue_many.sql). A task
//! without its own `max_attempts` takes its type's policy value: the single insert resolves it
//! itself; a bulk first reads it once for the batch's types (task_enqueue_max_attempts.sql),
//! which keeps the bulk insert's plan as cheap as before (resolving it inside that statement
//! measured 13 % slower). A task
//! with another mode or `unique_for` takes the *keyed* path, in a transaction of its own (a
//! savepoint inside yours):
//!
//! ```text
//!   insert ON CONFLICT DO NOTHING ──created──▶ Created
//!        │ key held by task H
//!        ▼
//!   lock H (FOR UPDATE, re-checks it still holds the key) ──gone──▶ start again
//!        │ status and `expired` read from H's latest version
//!        ├─ expired (finished ≥ unique_for ago) ─▶ H releases the key, insert ─▶ Created
//!        ├─ waiting and replace | debounce ─────▶ update H ─▶ Replaced | Debounced
//!        └─ otherwise ─────────────────────────▶ Existing (unchanged)
//! ```
//!
//! When things fail: the claim takes rows `FOR UPDATE SKIP LOCKED`, so it never takes a row
//! an enqueue has locked, and an enqueue that finds a row claimed (its lock waits for the claim
//! to commit) reads `running` and changes nothing. Two enqueues of one key serialise on the
//! holder's lock, or on the unique index when the key is free; a statement that could not see
//! a conflicting row committed after it began is repeated (READ COMMITTED: the next statement
//! sees it), at most [`TRIES`] times. `tasks` is partitioned by the day a task finished
//! (migration 20261210000001): the unique index of keys sees waiting and running tasks only, so
//! the insert first looks for a finished holder, and an insert that raced its holder's finish
//! is refused by a trigger ([`StoreError::is_partition_race`]) and run again — in a savepoint
//! when it runs in your transaction.

use std::collections::HashMap;

use sqlx::{Acquire, Connection, PgConnection, PgExecutor, Postgres, Transaction};

use super::rows::{get, status};
use super::{BEGIN_READ_COMMITTED, sql};
use crate::domain::policy::DEFAULT_MAX_ATTEMPTS;
use crate::domain::{InputLimits, OnConflict, TaskId};
use crate::store::params::{ValidTask, validate_bulk};
use crate::store::{EnqueueOutcome, Enqueued, NewTask, Result, StoreError};

/// Most statements' worth of tries an enqueue makes against rows committed under its feet.
const TRIES: usize = 4;

/// Enqueues one task through `conn`: a pool (`&pool`), a connection, or your transaction's
/// connection (`&mut *tx`). With an idempotency key already used, returns the existing task
/// (`created = false`) or, as the task's [`OnConflict`] and `unique_for` say, replaces or
/// debounces it, or creates a new task in place of a holder finished long enough ago; see
/// [`Enqueued::outcome`].
///
/// Behind a transaction pooler such as PgBouncer, pass your transaction: outside one a
/// statement may be parsed on one server connection and executed on another.
pub async fn task_enqueue<'c, A>(conn: A, task: &NewTask, limits: &InputLimits) -> Result<Enqueued>
where
    A: Acquire<'c, Database = Postgres>,
{
    const OP: &str = "task_enqueue";
    let valid = task.validate(limits)?;
    let mut conn = conn.acquire().await.map_err(StoreError::db(OP))?;
    if valid.is_plain() && valid.idempotency_key.is_none() {
        return insert_or_find(&mut *conn, &valid)
            .await?
            .ok_or_else(invisible_row);
    }
    // A keyed enqueue runs in a savepoint of your transaction (or a transaction of its own), so
    // the race it can lose with its key's holder finishing at that moment (the holder moves to
    // a finished partition) is rolled back and run again rather than aborting your
    // transaction.
    for _ in 0..TRIES {
        let mut tx = begin(&mut conn, OP).await?;
        let done = if valid.is_plain() {
            insert_or_find(&mut *tx, &valid)
                .await
                .and_then(|found| found.ok_or_else(invisible_row))
        } else {
            enqueue_keyed(&mut tx, &valid).await
        };
        match done {
            Err(error) if error.is_partition_race() => {
                tx.rollback().await.map_err(StoreError::db(OP))?;
            }
            Err(error) => return Err(error),
            Ok(done) => {
                tx.commit().await.map_err(StoreError::db(OP))?;
                return Ok(done);
            }
        }
    }
    Err(kept_conflicting())
}

fn invisible_row() -> StoreError {
    StoreError::Corrupt {
        what: "enqueue",
        detail: "idempotency key conflicted with a row that is not visible yet; retry".into(),
    }
}

/// Like [`task_enqueue`] on a pool, retrying the rare case where the conflicting row of an
/// idempotency key was committed by a concurrent transaction after the statement began.
pub(super) async fn task_enqueue_with_retry(
    pool: &super::db::Db,
    task: &NewTask,
    limits: &InputLimits,
) -> Result<Enqueued> {
    const OP: &str = "task_enqueue";
    let valid = task.validate(limits)?;
    if valid.is_plain() && valid.idempotency_key.is_none() {
        for _ in 0..TRIES {
            if let Some(done) = insert_or_find(pool, &valid).await? {
                return Ok(done);
            }
        }
        return Err(kept_conflicting());
    }
    // A key: in a READ COMMITTED transaction whatever the database's default isolation (the
    // key's check on finished tasks needs one; see the module doc).
    let mut tx = pool.begin().await.map_err(StoreError::db(OP))?;
    let done = if valid.is_plain() {
        enqueue_valid(&mut tx, &valid).await?
    } else {
        enqueue_keyed(&mut tx, &valid).await?
    };
    tx.commit().await.map_err(StoreError::db(OP))?;
    Ok(done)
}

/// A transaction on `conn`: a savepoint when it is already in one (yours), else a READ
/// COMMITTED transaction, which the keyed path relies on (each statement sees what committed
/// before it; row locks read the latest version).
async fn begin<'a>(
    conn: &'a mut PgConnection,
    op: &'static str,
) -> Result<Transaction<'a, Postgres>> {
    let tx = if conn.is_in_transaction() {
        Connection::begin(conn).await
    } else {
        conn.begin_with(BEGIN_READ_COMMITTED).await
    };
    tx.map_err(StoreError::db(op))
}

fn kept_conflicting() -> StoreError {
    StoreError::Corrupt {
        what: "enqueue",
        detail: "idempotency key kept conflicting with an invisible row".into(),
    }
}

/// Enqueues one validated task in `tx`, a READ COMMITTED transaction (the store's operator and
/// schedule transactions): either path, repeated while a conflicting row is invisible.
pub(super) async fn enqueue_valid(tx: &mut PgConnection, v: &ValidTask) -> Result<Enqueued> {
    if !v.is_plain() {
        return enqueue_keyed(tx, v).await;
    }
    for _ in 0..TRIES {
        if let Some(done) = insert_or_find(&mut *tx, v).await? {
            return Ok(done);
        }
    }
    Err(kept_conflicting())
}

/// Inserts one validated task (or finds the task of its idempotency key, unlocked). `None`:
/// the key's task was committed by a concurrent transaction after this statement began and
/// cannot be seen by it; a new statement (also in the same READ COMMITTED transaction) will.
async fn insert_or_find<'e, E: PgExecutor<'e>>(
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
    let Some(row) = row else {
        return Ok(None);
    };
    let id = TaskId(get(&row, "id")?);
    if get(&row, "created")? {
        return Ok(Some(Enqueued::created(id)));
    }
    let found = get::<Option<String>>(&row, "status")?
        .map(|s| status(&s))
        .transpose()?;
    Ok(Some(Enqueued::existing(
        id,
        EnqueueOutcome::Existing,
        found,
    )))
}

/// The keyed path (see the module doc), in `tx`, a READ COMMITTED transaction.
async fn enqueue_keyed(tx: &mut PgConnection, v: &ValidTask) -> Result<Enqueued> {
    const OP: &str = "task_enqueue";
    let key = v
        .idempotency_key
        .as_deref()
        .ok_or_else(|| StoreError::Corrupt {
            what: "enqueue",
            detail: "a keyed enqueue without an idempotency key".into(),
        })?;
    for _ in 0..TRIES {
        let Some(found) = insert_or_find(&mut *tx, v).await? else {
            continue;
        };
        if found.created {
            return Ok(found);
        }
        let holder = found.id;
        let locked = sqlx::query(sql::task_enqueue_lock)
            .bind(holder.0)
            .bind(key)
            .bind(v.unique_for_ms)
            .fetch_optional(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
        let Some(locked) = locked else {
            continue;
        };
        let found_status = status(&get::<String>(&locked, "status")?)?;
        if get::<bool>(&locked, "expired")? {
            sqlx::query(sql::task_enqueue_release)
                .bind(holder.0)
                .execute(&mut *tx)
                .await
                .map_err(StoreError::db(OP))?;
            // The old holder's lock (and its index entry, until commit) keeps every other
            // enqueue of the key waiting: this insert cannot lose.
            return match insert_or_find(&mut *tx, v).await? {
                Some(done) if done.created => Ok(Enqueued {
                    released_from: Some(holder),
                    ..done
                }),
                _ => Err(StoreError::Corrupt {
                    what: "enqueue",
                    detail: format!("the idempotency key released by task {holder} was taken"),
                }),
            };
        }
        let debounce = v.on_conflict == OnConflict::Debounce;
        if v.on_conflict == OnConflict::Skip || !found_status.is_claimable() {
            return Ok(Enqueued::existing(
                holder,
                EnqueueOutcome::Existing,
                Some(found_status),
            ));
        }
        let changed = sqlx::query(sql::task_enqueue_replace)
            .bind(holder.0)
            .bind(&v.payload)
            .bind(v.priority)
            .bind(v.delay_ms as f64)
            .bind(v.run_at)
            .bind(v.deadline)
            .bind(v.timeout_ms)
            .bind(v.max_attempts)
            .bind(&v.concurrency_key)
            .bind(debounce)
            .fetch_optional(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
        if changed.is_none() {
            return Err(StoreError::Corrupt {
                what: "enqueue",
                detail: format!("task {holder} was locked waiting but its update found it not"),
            });
        }
        // A task made due sooner should not wait for the next poll (delivered at commit).
        sqlx::query(sql::notify_tasks)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
        let outcome = if debounce {
            EnqueueOutcome::Debounced
        } else {
            EnqueueOutcome::Replaced
        };
        return Ok(Enqueued::existing(holder, outcome, Some(found_status)));
    }
    Err(kept_conflicting())
}

/// Enqueues many tasks through `conn` (as [`task_enqueue`]); results come back in input order.
/// Plain tasks go in one statement; a batch with any other mode or `unique_for` is enqueued
/// task by task, in input order, in one transaction (a savepoint inside yours).
///
/// If an idempotency key of a plain batch was committed by a concurrent transaction while this
/// statement ran, its id cannot be seen yet and this returns an error: roll back and retry
/// (the store's own [`crate::Store::task_enqueue_many`] does so by itself).
pub async fn task_enqueue_many<'c, A>(
    conn: A,
    tasks: &[NewTask],
    limits: &InputLimits,
) -> Result<Vec<Enqueued>>
where
    A: Acquire<'c, Database = Postgres>,
{
    const OP: &str = "task_enqueue_many";
    let valid = validate_bulk(tasks, limits)?;
    let mut conn = conn.acquire().await.map_err(StoreError::db(OP))?;
    let plain = valid.iter().all(ValidTask::is_plain);
    if plain && valid.iter().all(|v| v.idempotency_key.is_none()) {
        return enqueue_many_valid(&mut conn, &valid)
            .await?
            .ok_or_else(invisible_key);
    }
    // Keys: in a savepoint, run again when a key's holder finished under it (as task_enqueue).
    for _ in 0..TRIES {
        let mut tx = begin(&mut conn, OP).await?;
        let out = if plain {
            enqueue_many_valid(&mut tx, &valid)
                .await
                .and_then(|found| found.ok_or_else(invisible_key))
        } else {
            enqueue_each(&mut tx, &valid).await
        };
        match out {
            Err(error) if error.is_partition_race() => {
                tx.rollback().await.map_err(StoreError::db(OP))?;
            }
            Err(error) => return Err(error),
            Ok(out) => {
                tx.commit().await.map_err(StoreError::db(OP))?;
                return Ok(out);
            }
        }
    }
    Err(kept_conflicting())
}

/// A batch with modes, task by task in `tx`, in key order: tasks of one key keep their input
/// order (so the outcome is what input order gives: tasks of different keys never touch each
/// other), and two batches sharing keys lock them in the same order and never deadlock.
/// Results come back in input order.
async fn enqueue_each(tx: &mut PgConnection, valid: &[ValidTask]) -> Result<Vec<Enqueued>> {
    let mut order: Vec<usize> = (0..valid.len()).collect();
    order.sort_by(|&a, &b| valid[a].idempotency_key.cmp(&valid[b].idempotency_key));
    let mut out: Vec<Option<Enqueued>> = vec![None; valid.len()];
    for i in order {
        out[i] = Some(enqueue_valid(&mut *tx, &valid[i]).await?);
    }
    out.into_iter()
        .map(|e| {
            e.ok_or_else(|| StoreError::Corrupt {
                what: "bulk enqueue",
                detail: "a task of the batch got no result".into(),
            })
        })
        .collect()
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
    pool: &super::db::Db,
    tasks: &[NewTask],
    limits: &InputLimits,
) -> Result<Vec<Enqueued>> {
    const OP: &str = "task_enqueue_many";
    let valid = validate_bulk(tasks, limits)?;
    let plain = valid.iter().all(ValidTask::is_plain);
    for _ in 0..3 {
        let mut tx = pool.begin().await.map_err(StoreError::db(OP))?;
        if !plain {
            let out = enqueue_each(&mut tx, &valid).await?;
            tx.commit().await.map_err(StoreError::db(OP))?;
            return Ok(out);
        }
        match enqueue_many_valid(&mut tx, &valid).await? {
            Some(done) => {
                tx.commit().await.map_err(StoreError::db(OP))?;
                return Ok(done);
            }
            None => tx.rollback().await.map_err(StoreError::db(OP))?,
        }
    }
    Err(invisible_key())
}

/// The max attempts of each type of `valid` that has a task without its own: one small read
/// of the policies, none when every task gives its own.
async fn type_max_attempts(
    conn: &mut PgConnection,
    valid: &[ValidTask],
) -> Result<HashMap<String, i32>> {
    let mut types: Vec<&str> = valid
        .iter()
        .filter(|v| v.max_attempts.is_none())
        .map(|v| v.task_type.as_str())
        .collect();
    types.sort_unstable();
    types.dedup();
    if types.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Vec<(String, i32)> = sqlx::query_as(sql::task_enqueue_max_attempts)
        .bind(types)
        .fetch_all(&mut *conn)
        .await
        .map_err(StoreError::db("task_enqueue_many"))?;
    Ok(rows.into_iter().collect())
}

/// The bulk statement for a batch with idempotency keys `keys`: without any, nothing can
/// conflict, and the statement only inserts (task_enqueue_many_keyless.sql: no join back, no
/// sort by key, no look for a holder to plan).
fn bulk_statement(keys: &[Option<&str>]) -> &'static str {
    if keys.iter().all(Option::is_none) {
        sql::task_enqueue_many_keyless
    } else {
        sql::task_enqueue_many
    }
}

async fn enqueue_many_valid(
    conn: &mut PgConnection,
    valid: &[ValidTask],
) -> Result<Option<Vec<Enqueued>>> {
    if valid.is_empty() {
        return Ok(Some(Vec::new()));
    }
    let per_type = type_max_attempts(&mut *conn, valid).await?;
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
        max_attempts.push(
            v.max_attempts
                .or_else(|| per_type.get(&v.task_type).copied())
                .unwrap_or(DEFAULT_MAX_ATTEMPTS),
        );
        keys.push(v.idempotency_key.as_deref());
        concurrency_keys.push(v.concurrency_key.as_deref());
    }
    let rows = sqlx::query(bulk_statement(&keys))
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
        .fetch_all(&mut *conn)
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
        let id = TaskId(id);
        out.push(if get(row, "created")? {
            Enqueued::created(id)
        } else {
            Enqueued::existing(id, EnqueueOutcome::Existing, None)
        });
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_without_keys_takes_the_statement_that_only_inserts() {
        assert_eq!(
            bulk_statement(&[None, None]),
            sql::task_enqueue_many_keyless
        );
        assert_eq!(bulk_statement(&[]), sql::task_enqueue_many_keyless);
        assert_eq!(bulk_statement(&[None, Some("k")]), sql::task_enqueue_many);
        assert_ne!(sql::task_enqueue_many_keyless, sql::task_enqueue_many);
    }
}
