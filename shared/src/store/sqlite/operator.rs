//! The SQLite side of the seam the operator actions, resource leases and schedules are
//! written over ([`crate::store::audit::backend`]): `BEGIN IMMEDIATE` transactions that carry
//! SQLite's now (read as their first statement), audit rows, and the statements of the
//! operator actions ([`crate::store::audit::operator`], which decides). The write lock, taken
//! before anything is read, keeps the row an action decides on as it was read until commit.

use chrono::{DateTime, Utc};
use sqlx::sqlite::SqliteRow;
use sqlx::{SqliteConnection, SqlitePool};

use super::rows::{self, get, get_opt_time, get_time, micros, policy, time};
use super::{WriteTx, commit, enqueue, read_tx, sql, write_tx};
use crate::domain::{LeaseEpoch, Policy, TaskId, TaskStatus};
use crate::store::audit::backend::{self, Backend, Columns, row_by};
use crate::store::audit::operator::{self as flow, CancelRow, OperatorStatements, bind_policy};
use crate::store::params::{DeadFilter, DeadIdsPage, ValidTask};
use crate::store::{AuditEntry, DeadBulkOutcome, DeniedCalls, Enqueued, Result, StoreError};

/// Writes one audit row on `conn` — pass the transaction of the change it records, so the
/// two commit together. Its time is SQLite's clock.
pub async fn audit_write_on(conn: &mut SqliteConnection, entry: &AuditEntry) -> Result<()> {
    let now: i64 = sqlx::query_scalar(sql::db_now)
        .fetch_one(&mut *conn)
        .await
        .map_err(StoreError::db("audit_write"))?;
    audit_write(conn, entry, now).await
}

/// Writes one audit row inside `tx` (the transaction of the change it records).
pub(super) async fn audit_write(
    tx: &mut SqliteConnection,
    entry: &AuditEntry,
    now: i64,
) -> Result<()> {
    audit_insert(tx, entry, now, None, 1, "audit_write").await
}

/// The insert of one audit row with its peer and the number of calls it stands for.
async fn audit_insert(
    tx: &mut SqliteConnection,
    entry: &AuditEntry,
    now: i64,
    peer: Option<&str>,
    count: i64,
    op: &'static str,
) -> Result<()> {
    let params = entry
        .params
        .as_ref()
        .map(|p| rows::to_text(p, "audit params"))
        .transpose()?;
    sqlx::query(sql::audit_insert)
        .bind(now)
        .bind(&entry.actor.name)
        .bind(entry.actor.role.as_str())
        .bind(&entry.action)
        .bind(&entry.target)
        .bind(params)
        .bind(entry.result.as_str())
        .bind(&entry.detail)
        .bind(peer)
        .bind(count)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db(op))?;
    Ok(())
}

/// Writes the one `denied` row of `calls` on its own (validated first: bad input writes
/// nothing).
pub(super) async fn audit_record_denied(pool: &SqlitePool, calls: &DeniedCalls) -> Result<()> {
    const OP: &str = "audit_record_denied";
    let count = calls.validated_count()?;
    let (mut tx, now) = write_tx(pool, OP).await?;
    audit_insert(&mut tx, &calls.entry, now, Some(&calls.peer), count, OP).await?;
    commit(tx, OP).await
}

/// An audit row on its own.
pub(super) async fn audit_record(pool: &SqlitePool, entry: &AuditEntry) -> Result<()> {
    let (mut tx, now) = write_tx(pool, "audit_write").await?;
    audit_write(&mut tx, entry, now).await?;
    commit(tx, "audit_write").await
}

/// The SQLite store as the shared operations see it.
pub(super) struct Lite<'a>(pub(super) &'a SqlitePool);

/// A transaction and SQLite's now, read as its first statement: every time it writes is
/// computed from that.
pub(super) struct LiteTx {
    pub(super) tx: WriteTx,
    pub(super) now: i64,
}

impl std::ops::Deref for LiteTx {
    type Target = SqliteConnection;
    fn deref(&self) -> &SqliteConnection {
        &self.tx
    }
}

impl std::ops::DerefMut for LiteTx {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        &mut self.tx
    }
}

impl Backend for Lite<'_> {
    type Tx = LiteTx;
    type Row = SqliteRow;

    async fn begin(&self, op: &'static str) -> Result<LiteTx> {
        let (tx, now) = write_tx(self.0, op).await?;
        Ok(LiteTx { tx, now })
    }

    async fn snapshot(&self, op: &'static str) -> Result<LiteTx> {
        let (tx, now) = read_tx(self.0, op).await?;
        Ok(LiteTx { tx, now })
    }

    async fn now(tx: &mut LiteTx, _op: &'static str) -> Result<DateTime<Utc>> {
        time(tx.now, "now")
    }

    async fn commit(tx: LiteTx, op: &'static str) -> Result<()> {
        commit(tx.tx, op).await
    }

    async fn audit_in(tx: &mut LiteTx, entry: &AuditEntry) -> Result<()> {
        let now = tx.now;
        audit_write(tx, entry, now).await
    }

    async fn audit_alone(&self, entry: &AuditEntry) -> Result<()> {
        audit_record(self.0, entry).await
    }
}

impl Columns for SqliteRow {
    backend::decoded_columns!(get, get_time, get_opt_time);

    fn int(&self, column: &'static str) -> Result<i64> {
        get(self, column)
    }

    fn opt_int(&self, column: &'static str) -> Result<Option<i64>> {
        get(self, column)
    }

    fn json(&self, column: &'static str) -> Result<Option<serde_json::Value>> {
        rows::json(get(self, column)?, column)
    }
}

/// A statement over dead tasks that returns one column.
type DeadQuery<'q, O> =
    sqlx::query::QueryScalar<'q, sqlx::Sqlite, O, <sqlx::Sqlite as sqlx::Database>::Arguments>;

/// Binds now and the dead-letter filter as the statements over dead tasks number them: ?1 now,
/// ?2 type, ?3 error code, ?4 died at or after, ?5 died before.
fn bind_dead_filter<'q, O>(
    query: DeadQuery<'q, O>,
    now: i64,
    f: &'q DeadFilter,
) -> DeadQuery<'q, O> {
    query
        .bind(now)
        .bind(f.task_type.as_ref().map(|t| t.as_str()))
        .bind(f.error_code.as_deref())
        .bind(f.since.map(micros))
        .bind(f.until.map(micros))
}

/// Runs `statement` (task_requeue_dead.sql, task_purge_dead.sql, one row per task changed) over
/// the dead tasks `f` matches; how many rows it returned.
async fn dead_rows(
    tx: &mut LiteTx,
    statement: &'static str,
    f: &DeadFilter,
    op: &'static str,
) -> Result<u64> {
    let now = tx.now;
    let done: Vec<i64> = bind_dead_filter(sqlx::query_scalar(statement), now, f)
        .fetch_all(&mut **tx)
        .await
        .map_err(StoreError::db(op))?;
    Ok(done.len() as u64)
}

impl OperatorStatements for Lite<'_> {
    async fn enqueue(tx: &mut LiteTx, task: &ValidTask) -> Result<Enqueued> {
        let now = tx.now;
        enqueue::enqueue_valid(tx, task, now).await
    }

    async fn task_cancel(tx: &mut LiteTx, id: TaskId) -> Result<Option<CancelRow>> {
        const OP: &str = "task_cancel";
        let row = sqlx::query(sql::task_get_lease)
            .bind(id.0)
            .fetch_optional(&mut **tx)
            .await
            .map_err(StoreError::db(OP))?;
        let Some(row) = row else {
            return Ok(None);
        };
        let before = backend::status(&row.text("status")?)?;
        let owner = row
            .opt_text("lease_owner")?
            .map(backend::agent_id)
            .transpose()?;
        let after = flow::cancel_step(before, owner.is_some());
        let statement = match after {
            Some(TaskStatus::Cancelled) => Some(sql::task_cancel),
            Some(_) => Some(sql::task_cancel_request),
            None => None,
        };
        if let Some(statement) = statement {
            sqlx::query(statement)
                .bind(id.0)
                .bind(tx.now)
                .execute(&mut **tx)
                .await
                .map_err(StoreError::db(OP))?;
        }
        Ok(Some(CancelRow {
            before,
            after,
            owner,
            epoch: LeaseEpoch(row.int("lease_epoch")?),
        }))
    }

    async fn task_requeue(tx: &mut LiteTx, id: TaskId) -> Result<Option<(TaskStatus, bool)>> {
        const OP: &str = "task_requeue";
        let before: Option<String> = sqlx::query_scalar(sql::task_get_status)
            .bind(id.0)
            .fetch_optional(&mut **tx)
            .await
            .map_err(StoreError::db(OP))?;
        let Some(before) = before.as_deref().map(backend::status).transpose()? else {
            return Ok(None);
        };
        let moves = flow::requeue_allowed(before);
        if moves {
            sqlx::query(sql::task_requeue)
                .bind(tx.now)
                .bind(id.0)
                .execute(&mut **tx)
                .await
                .map_err(StoreError::db(OP))?;
        }
        Ok(Some((before, moves)))
    }

    async fn task_run_now(tx: &mut LiteTx, id: TaskId) -> Result<Option<(TaskStatus, bool)>> {
        const OP: &str = "task_run_now";
        let before: Option<String> = sqlx::query_scalar(sql::task_get_status)
            .bind(id.0)
            .fetch_optional(&mut **tx)
            .await
            .map_err(StoreError::db(OP))?;
        let Some(before) = before.as_deref().map(backend::status).transpose()? else {
            return Ok(None);
        };
        let moved = sqlx::query(sql::task_run_now)
            .bind(tx.now)
            .bind(id.0)
            .execute(&mut **tx)
            .await
            .map_err(StoreError::db(OP))?
            .rows_affected()
            > 0;
        Ok(Some((before, moved)))
    }

    async fn task_delete(
        tx: &mut LiteTx,
        id: TaskId,
    ) -> Result<Option<(TaskStatus, String, bool)>> {
        const OP: &str = "task_delete";
        let row: Option<(String, String)> = sqlx::query_as(sql::task_get_status_type)
            .bind(id.0)
            .fetch_optional(&mut **tx)
            .await
            .map_err(StoreError::db(OP))?;
        let Some((before, task_type)) = row else {
            return Ok(None);
        };
        let before = backend::status(&before)?;
        let deleted = sqlx::query(sql::task_delete)
            .bind(id.0)
            .execute(&mut **tx)
            .await
            .map_err(StoreError::db(OP))?
            .rows_affected()
            > 0;
        Ok(Some((before, task_type, deleted)))
    }

    async fn task_requeue_dead(tx: &mut LiteTx, f: &DeadFilter) -> Result<u64> {
        dead_rows(tx, sql::task_requeue_dead, f, "task_requeue_dead").await
    }

    async fn task_purge_dead(tx: &mut LiteTx, f: &DeadFilter) -> Result<u64> {
        dead_rows(tx, sql::task_purge_dead, f, "task_purge_dead").await
    }

    /// Two statements, which agree: the transaction holds the write lock.
    async fn task_match_dead(
        tx: &mut LiteTx,
        f: &DeadFilter,
        page: DeadIdsPage,
    ) -> Result<DeadBulkOutcome> {
        const OP: &str = "task_match_dead";
        let now = tx.now;
        let count: i64 = bind_dead_filter(sqlx::query_scalar(sql::task_count_dead), now, f)
            .fetch_one(&mut **tx)
            .await
            .map_err(StoreError::db(OP))?;
        let ids: Vec<i64> = bind_dead_filter(sqlx::query_scalar(sql::task_dead_ids), now, f)
            .bind(page.before.map(|id| id.0))
            .bind(i64::from(page.limit) + 1)
            .fetch_all(&mut **tx)
            .await
            .map_err(StoreError::db(OP))?;
        Ok(flow::dead_page(
            u64::try_from(count).unwrap_or(0),
            ids,
            page.limit,
        ))
    }

    /// The write lock orders the change against every claim.
    async fn policy_begin(&self, op: &'static str) -> Result<LiteTx> {
        self.begin(op).await
    }

    async fn policy_locked(tx: &mut LiteTx, key: &str) -> Result<Option<Policy>> {
        let current = row_by(&mut **tx, sql::policy_get_for_update, key, "policy_set").await?;
        current.as_ref().map(policy).transpose()
    }

    async fn policy_upsert(tx: &mut LiteTx, key: &str, next: &Policy) -> Result<Policy> {
        let now = tx.now;
        let row = bind_policy(sqlx::query(sql::policy_upsert), key, next, i64::from)
            .bind(now)
            .fetch_one(&mut **tx)
            .await
            .map_err(StoreError::db("policy_set"))?;
        policy(&row)
    }
}

// The `Store` methods, each the shared operation on this store.
crate::store::audit::operator::operator_entry_points!(Lite, SqlitePool);
