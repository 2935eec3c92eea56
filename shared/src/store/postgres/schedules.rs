//! Cron schedules on PostgreSQL: the statements of the operator actions and of the leader's
//! firing pass. What they decide, and in which order they run, is in
//! [`crate::store::schedules::flow`].
//!
//! The firing pass first reads whether anything is due (an idle pass ends there), then runs
//! in one READ COMMITTED transaction: it first reads the `leader` row `FOR SHARE` under the
//! caller's owner and term, so no election can change leadership until it commits, then
//! locks the due rows `FOR UPDATE SKIP LOCKED`, enqueues one task per tick under the tick's
//! idempotency key and moves each row on. A stale leader finds the lease gone and fires
//! nothing; were its check to pass somehow, the keys still make one task per tick. Enqueues
//! NOTIFY the agents when the transaction commits.

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::types::Json;
use sqlx::{Postgres, Transaction};

use super::operator::Pg;
use super::rows::get;
use super::sql;
use crate::domain::AgentId;
use crate::store::audit::backend::row_by;
use crate::store::schedules::flow::ScheduleStatements;
use crate::store::schedules::{FireReport, Settled, StoredDefinition};
use crate::store::{Result, StoreError};

type Tx = Transaction<'static, Postgres>;

/// The earliest next fire time of any enabled schedule, and the database's now.
async fn next_due<'e, E: sqlx::PgExecutor<'e>>(
    executor: E,
) -> Result<(Option<DateTime<Utc>>, DateTime<Utc>)> {
    let r = sqlx::query(sql::schedule_next_due)
        .fetch_one(executor)
        .await
        .map_err(StoreError::db("schedule_fire_due"))?;
    Ok((get(&r, "next_due")?, get(&r, "now")?))
}

impl ScheduleStatements for Pg<'_> {
    crate::store::schedules::flow::schedule_statements_alike!(sql);

    async fn schedule_locked(tx: &mut Tx, name: &str) -> Result<Option<PgRow>> {
        row_by(&mut **tx, sql::schedule_lock, name, "schedule_lock").await
    }

    /// The definition's columns are `$1`–`$10` (name, cron, zone, type, payload, priority,
    /// max attempts, enabled, missed, catch-up bound) in the insert and the update alike.
    async fn schedule_write(
        tx: &mut Tx,
        d: &StoredDefinition<'_>,
        insert: bool,
        reset_next: bool,
        next: Option<DateTime<Utc>>,
    ) -> Result<bool> {
        let statement = if insert {
            sql::schedule_insert
        } else {
            sql::schedule_update
        };
        let query = sqlx::query(statement)
            .bind(d.name)
            .bind(d.cron)
            .bind(d.time_zone)
            .bind(d.task_type)
            .bind(Json(d.payload))
            .bind(d.priority)
            .bind(d.max_attempts)
            .bind(d.enabled)
            .bind(d.missed)
            .bind(d.catch_up_max);
        // The insert takes no `reset_next`: a new row's next fire time is always `next`.
        let query = if insert {
            query.bind(next)
        } else {
            query.bind(reset_next).bind(next)
        };
        let written = query
            .fetch_optional(&mut **tx)
            .await
            .map_err(StoreError::db("schedule_add"))?;
        Ok(!insert || written.is_some())
    }

    async fn schedule_set_enabled(
        tx: &mut Tx,
        name: &str,
        enabled: bool,
        next: Option<DateTime<Utc>>,
    ) -> Result<()> {
        sqlx::query(sql::schedule_set_enabled)
            .bind(name)
            .bind(enabled)
            .bind(next)
            .execute(&mut **tx)
            .await
            .map_err(StoreError::db("schedule_set_enabled"))?;
        Ok(())
    }

    async fn schedule_set_last_task(tx: &mut Tx, name: &str, task: i64) -> Result<()> {
        sqlx::query(sql::schedule_set_last_task)
            .bind(name)
            .bind(task)
            .execute(&mut **tx)
            .await
            .map_err(StoreError::db("schedule_trigger"))?;
        Ok(())
    }

    /// NOTIFY, delivered when the transaction commits.
    async fn tasks_notify(tx: &mut Tx) -> Result<()> {
        sqlx::query(sql::notify_tasks)
            .execute(&mut **tx)
            .await
            .map_err(StoreError::db("notify_tasks"))?;
        Ok(())
    }

    /// One read on the pool: the transaction (and its share lock on the leader row) only
    /// when something is due.
    async fn schedule_idle(&self, _op: &'static str) -> Result<Option<FireReport>> {
        let (next, now) = next_due(self.0).await?;
        Ok(next.is_none_or(|next| next > now).then(|| FireReport {
            next_due: next,
            now: Some(now),
            ..FireReport::default()
        }))
    }

    async fn leader_holds(tx: &mut Tx, leader: &AgentId, term: i64) -> Result<bool> {
        let held: Option<i64> = sqlx::query_scalar(sql::leader_check)
            .bind(leader.as_str())
            .bind(term)
            .fetch_optional(&mut **tx)
            .await
            .map_err(StoreError::db("schedule_fire_due"))?;
        Ok(held.is_some())
    }

    async fn schedule_due_rows(tx: &mut Tx, limit: i64) -> Result<Vec<PgRow>> {
        sqlx::query(sql::schedule_due)
            .bind(limit)
            .fetch_all(&mut **tx)
            .await
            .map_err(StoreError::db("schedule_fire_due"))
    }

    async fn schedule_fired(tx: &mut Tx, name: &str, settled: &Settled) -> Result<()> {
        sqlx::query(sql::schedule_fired)
            .bind(name)
            .bind(settled.last_tick)
            .bind(settled.next)
            .bind(settled.last_task)
            .bind(settled.error.as_deref())
            .execute(&mut **tx)
            .await
            .map_err(StoreError::db("schedule_fire_due"))?;
        Ok(())
    }

    async fn schedule_next_due(tx: &mut Tx) -> Result<(Option<DateTime<Utc>>, DateTime<Utc>)> {
        next_due(&mut **tx).await
    }

    async fn leader_row(tx: &mut Tx) -> Result<Option<PgRow>> {
        sqlx::query(sql::leader_get)
            .fetch_optional(&mut **tx)
            .await
            .map_err(StoreError::db("leader_get"))
    }
}
