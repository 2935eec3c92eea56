//! Queue history on PostgreSQL: the sampler's pass, the read of GetHistory and retention
//! (`store/queue_history.rs` plans them; this runs the statements).
//!
//! The pass is one transaction under an advisory lock (two agents that both believe they lead
//! run one after the other, the second recounting to the same values) and plans with
//! index scans only (`plan_indexed.sql`): enqueues through the primary key above the id mark,
//! finishes through `tasks_all_finished_idx`, failed attempts through
//! `task_attempt_rows_failed_idx`, the depth through `tasks_live`'s partial indexes.

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;

use super::db::Db;
use super::rows::{get, task_type};
use super::{secs, sql};
use crate::store::queue_history::{
    self as qh, Depth, HistoryCounts, HistoryMinute, HistoryPruneParams, HistoryReadParams,
    HistoryRow, HistorySample, HistorySampleParams, QueueHistory, Tally,
};
use crate::store::{Result, StoreError};

fn count(row: &PgRow, column: &'static str) -> Result<u64> {
    Ok(u64::try_from(get::<i64>(row, column)?).unwrap_or(0))
}

fn opt_count(row: &PgRow, column: &'static str) -> Result<Option<u64>> {
    Ok(get::<Option<i64>>(row, column)?.map(|n| u64::try_from(n).unwrap_or(0)))
}

fn history_minute(row: &PgRow) -> Result<HistoryMinute> {
    Ok(HistoryMinute {
        minute: get(row, "minute")?,
        id_mark: get(row, "id_mark")?,
        counted: get(row, "counted")?,
        depth_sampled: get(row, "depth_sampled")?,
    })
}

fn history_row(row: &PgRow) -> Result<HistoryRow> {
    Ok(HistoryRow {
        task_type: task_type(get(row, "task_type")?)?,
        minute: get(row, "minute")?,
        counts: HistoryCounts {
            enqueued: count(row, "enqueued")?,
            succeeded: count(row, "succeeded")?,
            failed: count(row, "failed")?,
            dead_lettered: count(row, "dead_lettered")?,
            cancelled: count(row, "cancelled")?,
        },
        waiting: opt_count(row, "waiting")?,
        running: opt_count(row, "running")?,
        oldest_waiting_at: get(row, "oldest_waiting_at")?,
    })
}

fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

pub(super) async fn queue_history_sample(
    pool: &Db,
    params: &HistorySampleParams,
) -> Result<HistorySample> {
    const OP: &str = "queue_history_sample";
    let mut tx = super::begin_indexed(pool, OP).await?;
    sqlx::query(sql::queue_history_lock)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    let clock = sqlx::query(sql::queue_history_now)
        .fetch_one(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    let now: DateTime<Utc> = get(&clock, "now")?;
    let id_mark: i64 = get(&clock, "id_mark")?;
    let read_at: DateTime<Utc> = get(&clock, "read_at")?;

    let from = qh::plan_from(params, now);
    let known = sqlx::query(sql::queue_history_minutes_from)
        .bind(from)
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?
        .iter()
        .map(history_minute)
        .collect::<Result<Vec<_>>>()?;
    let before = sqlx::query(sql::queue_history_mark_before)
        .bind(from)
        .fetch_optional(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?
        .map(|row| Ok::<_, StoreError>((get(&row, "minute")?, get::<i64>(&row, "id_mark")?)))
        .transpose()?;
    let mut sample = HistorySample {
        now: Some(now),
        ..Default::default()
    };
    if let Some(plan) = qh::plan(params, now, &known, before)
        && let Some((lo, hi)) = plan.range()
    {
        let mut tally = Tally::default();
        for row in sqlx::query(sql::queue_history_count_enqueued)
            .bind(plan.mark)
            .bind(lo)
            .bind(hi)
            .fetch_all(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?
        {
            tally
                .counts(task_type(get(&row, "task_type")?)?, get(&row, "minute")?)
                .enqueued += count(&row, "n")?;
        }
        for row in sqlx::query(sql::queue_history_count_finished)
            .bind(lo)
            .bind(hi)
            .fetch_all(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?
        {
            let c = tally.counts(task_type(get(&row, "task_type")?)?, get(&row, "minute")?);
            c.succeeded += count(&row, "succeeded")?;
            c.dead_lettered += count(&row, "dead_lettered")?;
            c.cancelled += count(&row, "cancelled")?;
            c.failed += count(&row, "failed")?;
        }
        for row in sqlx::query(sql::queue_history_count_failed_attempts)
            .bind(lo)
            .bind(hi)
            .fetch_all(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?
        {
            tally
                .counts(task_type(get(&row, "task_type")?)?, get(&row, "minute")?)
                .failed += count(&row, "n")?;
        }
        if plan.depth_minute.is_some() {
            for row in sqlx::query(sql::queue_history_depth)
                .fetch_all(&mut *tx)
                .await
                .map_err(StoreError::db(OP))?
            {
                tally.depth(
                    task_type(get(&row, "task_type")?)?,
                    Depth {
                        waiting: count(&row, "waiting")?,
                        running: count(&row, "running")?,
                        oldest_waiting_at: get(&row, "oldest_waiting_at")?,
                    },
                );
            }
        }
        let existing = sqlx::query(sql::queue_history_rows_between)
            .bind(lo)
            .bind(hi)
            .bind(None::<String>)
            .fetch_all(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?
            .iter()
            .map(history_row)
            .collect::<Result<Vec<_>>>()?;
        let rows = tally.rows(&plan, &existing);
        sample.newly_enqueued = qh::newly_enqueued(&rows, &existing);
        sqlx::query(sql::queue_history_upsert)
            .bind(
                rows.iter()
                    .map(|r| r.task_type.as_str())
                    .collect::<Vec<_>>(),
            )
            .bind(rows.iter().map(|r| r.minute).collect::<Vec<_>>())
            .bind(
                rows.iter()
                    .map(|r| signed(r.counts.enqueued))
                    .collect::<Vec<_>>(),
            )
            .bind(
                rows.iter()
                    .map(|r| signed(r.counts.succeeded))
                    .collect::<Vec<_>>(),
            )
            .bind(
                rows.iter()
                    .map(|r| signed(r.counts.failed))
                    .collect::<Vec<_>>(),
            )
            .bind(
                rows.iter()
                    .map(|r| signed(r.counts.dead_lettered))
                    .collect::<Vec<_>>(),
            )
            .bind(
                rows.iter()
                    .map(|r| signed(r.counts.cancelled))
                    .collect::<Vec<_>>(),
            )
            .bind(
                rows.iter()
                    .map(|r| r.waiting.map(signed))
                    .collect::<Vec<_>>(),
            )
            .bind(
                rows.iter()
                    .map(|r| r.running.map(signed))
                    .collect::<Vec<_>>(),
            )
            .bind(rows.iter().map(|r| r.oldest_waiting_at).collect::<Vec<_>>())
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
        sqlx::query(sql::queue_history_minutes_counted)
            .bind(&plan.minutes)
            .bind(plan.depth_minute)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
        sample.written = plan.minutes.clone();
        sample.depth_minute = plan.depth_minute;
    }
    sqlx::query(sql::queue_history_mark_set)
        .bind(qh::mark_minute(read_at))
        .bind(id_mark)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    tx.commit().await.map_err(StoreError::db(OP))?;
    Ok(sample)
}

pub(super) async fn queue_history_read(
    pool: &Db,
    params: &HistoryReadParams,
) -> Result<QueueHistory> {
    const OP: &str = "queue_history_read";
    let mut tx = pool.begin_snapshot().await.map_err(StoreError::db(OP))?;
    let now = super::tx_now(&mut tx, OP).await?;
    let window = qh::read_window(now, params.minutes);
    let rows = sqlx::query(sql::queue_history_rows_between)
        .bind(window.0)
        .bind(window.1)
        .bind(params.task_type.as_ref().map(|t| t.as_str()))
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?
        .iter()
        .map(history_row)
        .collect::<Result<Vec<_>>>()?;
    let minutes = sqlx::query(sql::queue_history_read_minutes)
        .bind(window.0)
        .bind(window.1)
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?
        .iter()
        .map(history_minute)
        .collect::<Result<Vec<_>>>()?;
    tx.commit().await.map_err(StoreError::db(OP))?;
    Ok(qh::fill(now, window, &rows, &minutes))
}

pub(super) async fn queue_history_prune(pool: &Db, params: &HistoryPruneParams) -> Result<u64> {
    const OP: &str = "queue_history_prune";
    let mut deleted = 0;
    for statement in [sql::queue_history_prune, sql::queue_history_minutes_prune] {
        loop {
            let n = sqlx::query(statement)
                .bind(secs(params.older_than))
                .bind(i64::from(params.batch))
                .execute(pool)
                .await
                .map_err(StoreError::db(OP))?
                .rows_affected();
            if statement == sql::queue_history_prune {
                deleted += n;
            }
            if n < u64::from(params.batch) {
                break;
            }
        }
    }
    Ok(deleted)
}
