//! Cron schedules on SQLite: the statements of the operator actions and of the leader's
//! firing pass, with the PostgreSQL store's rules; what they decide is in
//! [`crate::store::schedules::flow`]. Each operation is one `BEGIN IMMEDIATE` transaction:
//! the write lock serialises the firing pass with every election and renewal, so the leader
//! check at its start holds until it commits. Times are bound from the transaction's now.
//! There is no NOTIFY: agents watch the file.

use chrono::{DateTime, Utc};
use sqlx::sqlite::SqliteRow;

use super::operator::{Lite, LiteTx};
use super::rows::{self, micros, time};
use super::{read_tx, sql};
use crate::domain::AgentId;
use crate::store::schedules::flow::ScheduleStatements;
use crate::store::schedules::{FireReport, Settled, StoredDefinition};
use crate::store::{Result, StoreError};

/// The earliest next fire time of any enabled schedule.
async fn next_due(conn: &mut sqlx::SqliteConnection) -> Result<Option<DateTime<Utc>>> {
    let next: Option<i64> = sqlx::query_scalar(sql::schedule_next_due)
        .fetch_one(conn)
        .await
        .map_err(StoreError::db("schedule_fire_due"))?;
    next.map(|us| time(us, "next_fire_at")).transpose()
}

impl ScheduleStatements for Lite<'_> {
    crate::store::schedules::flow::schedule_statements_alike!(sql);

    /// Inside the write transaction nothing can change the row before the commit.
    async fn schedule_locked(tx: &mut LiteTx, name: &str) -> Result<Option<SqliteRow>> {
        Self::schedule_row(tx, name).await
    }

    /// Under the write lock an insert always lands.
    async fn schedule_write(
        tx: &mut LiteTx,
        d: &StoredDefinition<'_>,
        insert: bool,
        reset_next: bool,
        next: Option<DateTime<Utc>>,
    ) -> Result<bool> {
        let payload = rows::to_text(d.payload, "schedule payload")?;
        let statement = if insert {
            sql::schedule_insert
        } else {
            sql::schedule_update
        };
        let now = tx.now;
        sqlx::query(statement)
            .bind(d.name)
            .bind(d.cron)
            .bind(d.time_zone)
            .bind(d.task_type)
            .bind(payload)
            .bind(d.priority)
            .bind(d.max_attempts)
            .bind(d.enabled)
            .bind(d.missed)
            .bind(d.catch_up_max)
            .bind(reset_next)
            .bind(next.map(micros))
            .bind(now)
            .execute(&mut **tx)
            .await
            .map_err(StoreError::db("schedule_add"))?;
        Ok(true)
    }

    async fn schedule_set_enabled(
        tx: &mut LiteTx,
        name: &str,
        enabled: bool,
        next: Option<DateTime<Utc>>,
    ) -> Result<()> {
        let now = tx.now;
        sqlx::query(sql::schedule_set_enabled)
            .bind(name)
            .bind(enabled)
            .bind(next.map(micros))
            .bind(now)
            .execute(&mut **tx)
            .await
            .map_err(StoreError::db("schedule_set_enabled"))?;
        Ok(())
    }

    async fn schedule_set_last_task(tx: &mut LiteTx, name: &str, task: i64) -> Result<()> {
        let now = tx.now;
        sqlx::query(sql::schedule_set_last_task)
            .bind(name)
            .bind(task)
            .bind(now)
            .execute(&mut **tx)
            .await
            .map_err(StoreError::db("schedule_trigger"))?;
        Ok(())
    }

    /// Nothing to do: agents watch the file's change counter.
    async fn tasks_notify(_tx: &mut LiteTx) -> Result<()> {
        Ok(())
    }

    /// A read transaction first: the write lock only when something is due.
    async fn schedule_idle(&self, op: &'static str) -> Result<Option<FireReport>> {
        let (mut read, now) = read_tx(self.0, op).await?;
        let due: Option<i64> = sqlx::query_scalar(sql::schedule_any_due)
            .bind(now)
            .fetch_optional(&mut *read)
            .await
            .map_err(StoreError::db(op))?;
        if due.is_some() {
            return Ok(None);
        }
        Ok(Some(FireReport {
            next_due: next_due(&mut read).await?,
            now: Some(time(now, "now")?),
            ..FireReport::default()
        }))
    }

    async fn leader_holds(tx: &mut LiteTx, leader: &AgentId, term: i64) -> Result<bool> {
        let now = tx.now;
        let held: Option<i64> = sqlx::query_scalar(sql::leader_check)
            .bind(leader.as_str())
            .bind(term)
            .bind(now)
            .fetch_optional(&mut **tx)
            .await
            .map_err(StoreError::db("schedule_fire_due"))?;
        Ok(held.is_some())
    }

    async fn schedule_due_rows(tx: &mut LiteTx, limit: i64) -> Result<Vec<SqliteRow>> {
        let now = tx.now;
        sqlx::query(sql::schedule_due)
            .bind(now)
            .bind(limit)
            .fetch_all(&mut **tx)
            .await
            .map_err(StoreError::db("schedule_fire_due"))
    }

    async fn schedule_fired(tx: &mut LiteTx, name: &str, settled: &Settled) -> Result<()> {
        let now = tx.now;
        sqlx::query(sql::schedule_fired)
            .bind(name)
            .bind(settled.last_tick.map(micros))
            .bind(settled.next.map(micros))
            .bind(settled.last_task)
            .bind(settled.error.as_deref())
            .bind(now)
            .execute(&mut **tx)
            .await
            .map_err(StoreError::db("schedule_fire_due"))?;
        Ok(())
    }

    async fn schedule_next_due(tx: &mut LiteTx) -> Result<(Option<DateTime<Utc>>, DateTime<Utc>)> {
        let now = time(tx.now, "now")?;
        Ok((next_due(tx).await?, now))
    }

    async fn leader_row(tx: &mut LiteTx) -> Result<Option<SqliteRow>> {
        sqlx::query(sql::leader_get)
            .fetch_optional(&mut **tx)
            .await
            .map_err(StoreError::db("leader_get"))
    }
}
