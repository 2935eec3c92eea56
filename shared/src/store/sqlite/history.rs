//! Queue history on SQLite: the sampler's pass, the read of GetHistory and retention
//! (`store/queue_history.rs` plans them; this runs the statements). The pass runs under the
//! write lock, so the id mark and the clock are read with no writer between them and two
//! passes never interleave.

use sqlx::SqlitePool;
use sqlx::sqlite::SqliteRow;

use super::rows::{get, get_opt_time, get_time, micros, span, task_type, time};
use super::{commit, read_tx, sql, write_tx};
use crate::store::queue_history::{
    self as qh, Depth, HistoryCounts, HistoryMinute, HistoryPruneParams, HistoryReadParams,
    HistoryRow, HistorySample, HistorySampleParams, QueueHistory, Tally,
};
use crate::store::{Result, StoreError};

fn count(row: &SqliteRow, column: &'static str) -> Result<u64> {
    Ok(u64::try_from(get::<Option<i64>>(row, column)?.unwrap_or(0)).unwrap_or(0))
}

fn opt_count(row: &SqliteRow, column: &'static str) -> Result<Option<u64>> {
    Ok(get::<Option<i64>>(row, column)?.map(|n| u64::try_from(n).unwrap_or(0)))
}

fn history_minute(row: &SqliteRow) -> Result<HistoryMinute> {
    Ok(HistoryMinute {
        minute: get_time(row, "minute")?,
        id_mark: get(row, "id_mark")?,
        counted: get(row, "counted")?,
        depth_sampled: get(row, "depth_sampled")?,
    })
}

fn history_row(row: &SqliteRow) -> Result<HistoryRow> {
    Ok(HistoryRow {
        task_type: task_type(get(row, "task_type")?)?,
        minute: get_time(row, "minute")?,
        counts: HistoryCounts {
            enqueued: count(row, "enqueued")?,
            succeeded: count(row, "succeeded")?,
            failed: count(row, "failed")?,
            dead_lettered: count(row, "dead_lettered")?,
            cancelled: count(row, "cancelled")?,
        },
        waiting: opt_count(row, "waiting")?,
        running: opt_count(row, "running")?,
        oldest_waiting_at: get_opt_time(row, "oldest_waiting_at")?,
    })
}

fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

pub(super) async fn queue_history_sample(
    pool: &SqlitePool,
    params: &HistorySampleParams,
) -> Result<HistorySample> {
    const OP: &str = "queue_history_sample";
    let (mut tx, now_us) = write_tx(pool, OP).await?;
    let now = time(now_us, "now")?;
    let id_mark: i64 = sqlx::query_scalar(sql::queue_history_mark_now)
        .fetch_one(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    let from = qh::plan_from(params, now);
    let known = sqlx::query(sql::queue_history_minutes_from)
        .bind(micros(from))
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?
        .iter()
        .map(history_minute)
        .collect::<Result<Vec<_>>>()?;
    let before = sqlx::query(sql::queue_history_mark_before)
        .bind(micros(from))
        .fetch_optional(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?
        .map(|row| Ok::<_, StoreError>((get_time(&row, "minute")?, get::<i64>(&row, "id_mark")?)))
        .transpose()?;
    let mut sample = HistorySample {
        now: Some(now),
        ..Default::default()
    };
    if let Some(plan) = qh::plan(params, now, &known, before)
        && let Some((lo, hi)) = plan.range()
    {
        let (lo, hi) = (micros(lo), micros(hi));
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
                .counts(
                    task_type(get(&row, "task_type")?)?,
                    get_time(&row, "minute")?,
                )
                .enqueued += count(&row, "n")?;
        }
        for row in sqlx::query(sql::queue_history_count_finished)
            .bind(lo)
            .bind(hi)
            .fetch_all(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?
        {
            let c = tally.counts(
                task_type(get(&row, "task_type")?)?,
                get_time(&row, "minute")?,
            );
            c.succeeded += count(&row, "succeeded")?;
            c.dead_lettered += count(&row, "dead_lettered")?;
            c.cancelled += count(&row, "cancelled")?;
        }
        for row in sqlx::query(sql::queue_history_count_failed_attempts)
            .bind(lo)
            .bind(hi)
            .fetch_all(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?
        {
            tally
                .counts(
                    task_type(get(&row, "task_type")?)?,
                    get_time(&row, "minute")?,
                )
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
                        oldest_waiting_at: get_opt_time(&row, "oldest_waiting_at")?,
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
        for r in &rows {
            sqlx::query(sql::queue_history_upsert)
                .bind(r.task_type.as_str())
                .bind(micros(r.minute))
                .bind(signed(r.counts.enqueued))
                .bind(signed(r.counts.succeeded))
                .bind(signed(r.counts.failed))
                .bind(signed(r.counts.dead_lettered))
                .bind(signed(r.counts.cancelled))
                .bind(r.waiting.map(signed))
                .bind(r.running.map(signed))
                .bind(r.oldest_waiting_at.map(micros))
                .execute(&mut *tx)
                .await
                .map_err(StoreError::db(OP))?;
        }
        for m in &plan.minutes {
            sqlx::query(sql::queue_history_minute_counted)
                .bind(micros(*m))
                .bind(now_us)
                .bind(Some(*m) == plan.depth_minute)
                .execute(&mut *tx)
                .await
                .map_err(StoreError::db(OP))?;
        }
        sample.written = plan.minutes.clone();
        sample.depth_minute = plan.depth_minute;
    }
    // Read under the write lock at `now`: no task created after it has a lower id.
    sqlx::query(sql::queue_history_mark_set)
        .bind(micros(qh::mark_minute(now)))
        .bind(id_mark)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    commit(tx, OP).await?;
    Ok(sample)
}

pub(super) async fn queue_history_read(
    pool: &SqlitePool,
    params: &HistoryReadParams,
) -> Result<QueueHistory> {
    const OP: &str = "queue_history_read";
    let (mut tx, now_us) = read_tx(pool, OP).await?;
    let now = time(now_us, "now")?;
    let window = qh::read_window(now, params.minutes);
    let rows = sqlx::query(sql::queue_history_rows_between)
        .bind(micros(window.0))
        .bind(micros(window.1))
        .bind(params.task_type.as_ref().map(|t| t.as_str()))
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?
        .iter()
        .map(history_row)
        .collect::<Result<Vec<_>>>()?;
    let minutes = sqlx::query(sql::queue_history_read_minutes)
        .bind(micros(window.0))
        .bind(micros(window.1))
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?
        .iter()
        .map(history_minute)
        .collect::<Result<Vec<_>>>()?;
    commit(tx, OP).await?;
    Ok(qh::fill(now, window, &rows, &minutes))
}

pub(super) async fn queue_history_prune(
    pool: &SqlitePool,
    params: &HistoryPruneParams,
) -> Result<u64> {
    const OP: &str = "queue_history_prune";
    let mut deleted = 0;
    for statement in [sql::queue_history_prune, sql::queue_history_minutes_prune] {
        loop {
            // One short write transaction per batch: other writers get the lock in between.
            let (mut tx, now_us) = write_tx(pool, OP).await?;
            let n = sqlx::query(statement)
                .bind(now_us.saturating_sub(span(params.older_than)))
                .bind(i64::from(params.batch))
                .execute(&mut *tx)
                .await
                .map_err(StoreError::db(OP))?
                .rows_affected();
            commit(tx, OP).await?;
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
