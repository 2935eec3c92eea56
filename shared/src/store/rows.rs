//! Rows to domain types, written once for both stores: a `tasks`, `task_attempts`,
//! `policies`, `agents` or `audit_log` row becomes a [`Task`], [`Attempt`], [`Policy`],
//! [`AgentRecord`] or [`AuditRecord`] (task rows also a [`TaskPage`]); a row of `task_overview.sql` an [`OverviewRow`], the row of
//! `task_stats.sql` a [`QueueStats`], the row
//! of `task_explain.sql` the [`ExplainFacts`] the explanation is decided from.
//!
//! ```text
//!   PgRow / SqliteRow ──(Columns, RecordColumns: per store, the dialect's column types)──▶
//!   plain values (String, i64, DateTime<Utc>, serde_json::Value) ──(this module)──▶ domain
//! ```
//!
//! [`get`] decodes one column as the store's own type. Each store decodes its dialect's column
//! types ([`Columns`] in `audit/backend.rs`, and [`RecordColumns`] here, in its `rows.rs`):
//! times as `timestamptz` or microseconds, JSON as `jsonb` or text, lists as `text[]` or a JSON
//! array. Everything after that decode (names, enums, ranges, durations) is here.
//!
//! When things fail: bad database state (an unknown status, an invalid type name, unreadable
//! JSON, a number out of range) becomes [`StoreError::Corrupt`] naming what, never a panic.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::domain::{
    Attempt, AttemptOutcome, BreakerPolicy, BreakerState, LeaseEpoch, Policy, PolicyScope,
    Progress, RateLimit, Task, TaskError, TaskId, TaskType,
};
pub(crate) use crate::store::audit::backend::{Columns, agent_id, status};
use crate::store::explain::{ExplainFacts, LimitUse, RateUse};
use crate::store::{
    AgentRecord, AuditRecord, OverviewRow, QueueStats, Result, STATS_WINDOWS, StatsWindow,
    StoreError, TaskPage, TypeCounts,
};
use crate::store::{BreakerStatus, BreakerTransition, RateFill};

/// The columns of the records mapped here that [`Columns`] does not cover.
pub(crate) trait RecordColumns: Columns {
    /// A floating-point column (`None`: SQL NULL).
    fn opt_float(&self, column: &'static str) -> Result<Option<f64>>;
    /// A list of strings (`text[]` on PostgreSQL, a JSON array on SQLite).
    fn text_list(&self, column: &'static str) -> Result<Vec<String>>;
}

/// A row whose columns decode as `T`: every sqlx row, for the types its database knows.
pub(crate) trait Decodes<'r, T> {
    fn decode_column(&'r self, column: &'static str) -> Result<T>;
}

/// Implements [`Decodes`] for a store's row type, for every type its database decodes.
macro_rules! decodes {
    ($row:ty, $db:ty) => {
        impl<'r, T> Decodes<'r, T> for $row
        where
            T: sqlx::Decode<'r, $db> + sqlx::Type<$db>,
        {
            fn decode_column(&'r self, column: &'static str) -> Result<T> {
                sqlx::Row::try_get(self, column).map_err(|e| StoreError::Corrupt {
                    what: column,
                    detail: e.to_string(),
                })
            }
        }
    };
}
decodes!(sqlx::postgres::PgRow, sqlx::Postgres);
#[cfg(feature = "sqlite")]
decodes!(sqlx::sqlite::SqliteRow, sqlx::Sqlite);

/// A reference to a row decodes as the row does (callers holding `&row` pass `&&row`).
impl<'r, 'a: 'r, R, T> Decodes<'r, T> for &'a R
where
    R: Decodes<'r, T>,
{
    fn decode_column(&'r self, column: &'static str) -> Result<T> {
        (**self).decode_column(column)
    }
}

/// Column `column` of `row` as `T`, in the store's own column type; a column that does not
/// decode as `T` is [`StoreError::Corrupt`].
pub(crate) fn get<'r, T>(row: &'r impl Decodes<'r, T>, column: &'static str) -> Result<T> {
    row.decode_column(column)
}

/// Runs `query` on `executor` (operation `op`) and maps every row it returns with `map`.
pub(crate) async fn fetch_mapped<'q, 'c, DB, A, E, T>(
    query: sqlx::query::Query<'q, DB, A>,
    executor: E,
    op: &'static str,
    map: fn(&DB::Row) -> Result<T>,
) -> Result<Vec<T>>
where
    DB: sqlx::Database,
    A: sqlx::IntoArguments<DB> + 'q,
    E: sqlx::Executor<'c, Database = DB>,
{
    let rows = query
        .fetch_all(executor)
        .await
        .map_err(StoreError::db(op))?;
    rows.iter().map(map).collect()
}

/// A stored task type.
pub(crate) fn task_type(raw: String) -> Result<TaskType> {
    TaskType::new(raw).map_err(|e| StoreError::Corrupt {
        what: "task type",
        detail: e.to_string(),
    })
}

/// A JSON column read as `T` (`None`: SQL NULL).
pub(crate) fn parse<T: serde::de::DeserializeOwned>(
    value: Option<serde_json::Value>,
    what: &'static str,
) -> Result<Option<T>> {
    value
        .map(serde_json::from_value)
        .transpose()
        .map_err(|e| StoreError::Corrupt {
            what,
            detail: e.to_string(),
        })
}

/// A count of milliseconds (a negative one as zero).
fn millis(value: Option<i64>) -> Option<Duration> {
    value.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
}

/// A count that is never negative in a sound database (a negative one as zero).
fn count(value: i64) -> u32 {
    u32::try_from(value).unwrap_or(0)
}

/// A row count (a negative one as zero).
fn tally(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// A `tasks` row (every column).
pub(crate) fn task<R: Columns>(row: &R) -> Result<Task> {
    Ok(Task {
        id: TaskId(row.int("id")?),
        task_type: task_type(row.text("task_type")?)?,
        payload: row.json("payload")?.ok_or_else(|| StoreError::Corrupt {
            what: "task payload",
            detail: "NULL".into(),
        })?,
        priority: row.small("priority")?,
        status: status(&row.text("status")?)?,
        available_at: row.time("available_at")?,
        deadline_at: row.opt_time("deadline_at")?,
        timeout_ms: row.opt_int("timeout_ms")?,
        attempt: row.small("attempt")?,
        max_attempts: row.small("max_attempts")?,
        lease_owner: row.opt_text("lease_owner")?.map(agent_id).transpose()?,
        lease_epoch: LeaseEpoch(row.int("lease_epoch")?),
        lease_until: row.opt_time("lease_until")?,
        heartbeat_at: row.opt_time("heartbeat_at")?,
        // A task that gave its key up to a newer one (`unique_for`) still shows it.
        idempotency_key: match row.opt_text("idempotency_key")? {
            Some(key) => Some(key),
            None => row.opt_text("released_idempotency_key")?,
        },
        concurrency_key: row.opt_text("concurrency_key")?,
        progress: parse::<Progress>(row.json("progress")?, "task progress")?,
        snoozes: row.small("snoozes")?,
        checkpoint: row.json("checkpoint")?,
        checkpoint_at: row.opt_time("checkpoint_at")?,
        result: row.json("result")?,
        last_error: parse::<TaskError>(row.json("last_error")?, "task error")?,
        created_at: row.time("created_at")?,
        started_at: row.opt_time("started_at")?,
        finished_at: row.opt_time("finished_at")?,
        updated_at: row.time("updated_at")?,
    })
}

/// A page of `tasks` rows, newest first, from a listing asked for `limit` rows: a full page
/// says where the next one starts.
pub(crate) fn task_page<R: Columns>(rows: &[R], limit: u32) -> Result<TaskPage> {
    let tasks = rows.iter().map(task).collect::<Result<Vec<_>>>()?;
    let full_page = tasks.len() == limit as usize;
    let next_before = if full_page {
        tasks.last().map(|t| t.id)
    } else {
        None
    };
    Ok(TaskPage { tasks, next_before })
}

/// A `task_attempts` row.
pub(crate) fn attempt<R: Columns>(row: &R) -> Result<Attempt> {
    let outcome = row.text("outcome")?;
    Ok(Attempt {
        task_id: TaskId(row.int("task_id")?),
        epoch: LeaseEpoch(row.int("epoch")?),
        attempt: row.small("attempt")?,
        agent: agent_id(row.text("agent")?)?,
        started_at: row.time("started_at")?,
        finished_at: row.time("finished_at")?,
        outcome: AttemptOutcome::parse(&outcome).ok_or_else(|| StoreError::Corrupt {
            what: "attempt outcome",
            detail: outcome.clone(),
        })?,
        error: parse::<TaskError>(row.json("error")?, "attempt error")?,
    })
}

/// A `policies` row.
pub(crate) fn policy<R: RecordColumns>(row: &R) -> Result<Policy> {
    let scope = row.text("scope")?;
    Ok(Policy {
        scope: PolicyScope::from_key(&scope).map_err(|e| StoreError::Corrupt {
            what: "policy scope",
            detail: e.to_string(),
        })?,
        max_concurrency: row.opt_int("max_concurrency")?.map(count),
        paused: row.flag("paused")?,
        retry_base: millis(row.opt_int("retry_base_ms")?),
        retry_multiplier: row.opt_float("retry_multiplier")?,
        retry_max: millis(row.opt_int("retry_max_ms")?),
        retry_jitter: row.opt_float("retry_jitter")?,
        timeout: millis(row.opt_int("timeout_ms")?),
        slow_threshold: millis(row.opt_int("slow_ms")?),
        rate_limit: rate_limit(row.opt_int("rate_starts")?, row.opt_int("rate_period_ms")?)?,
        shed_after: millis(row.opt_int("shed_after_ms")?),
        per_key_concurrency: row.opt_int("per_key_concurrency")?.map(count),
        breaker: breaker_policy(row)?,
        max_snoozes: row.opt_int("max_snoozes")?.map(count),
        max_attempts: row.opt_int("max_attempts")?.map(count),
    })
}

/// A rate limit and its window's use from an explain row: the `type_rate_*` columns or the
/// `global_rate_*` ones (`starts`, `period_ms`, `used`, `frees_at`).
fn rate_use<R: Columns>(row: &R, global: bool) -> Result<Option<RateUse>> {
    let [starts, period_ms, used, frees_at] = if global {
        [
            "global_rate_starts",
            "global_rate_period_ms",
            "global_rate_used",
            "global_rate_frees_at",
        ]
    } else {
        [
            "type_rate_starts",
            "type_rate_period_ms",
            "type_rate_used",
            "type_rate_frees_at",
        ]
    };
    let Some(limit) = rate_limit(row.opt_int(starts)?, row.opt_int(period_ms)?)? else {
        return Ok(None);
    };
    Ok(Some(RateUse {
        limit,
        used: row.opt_int(used)?.map_or(0, tally),
        frees_at: row.opt_time(frees_at)?,
    }))
}

/// A stored rate limit: both columns or neither (the tables' CHECK says so too).
fn rate_limit(starts: Option<i64>, period_ms: Option<i64>) -> Result<Option<RateLimit>> {
    let corrupt = |detail: String| StoreError::Corrupt {
        what: "policy rate limit",
        detail,
    };
    match (starts, period_ms) {
        (None, None) => Ok(None),
        (Some(n), Some(ms)) => {
            let n = u32::try_from(n).map_err(|_| corrupt(format!("{n} starts")))?;
            let ms = u64::try_from(ms).map_err(|_| corrupt(format!("a period of {ms} ms")))?;
            RateLimit::new(n, Duration::from_millis(ms))
                .map(Some)
                .map_err(|e| corrupt(e.to_string()))
        }
        (n, ms) => Err(corrupt(format!("starts {n:?} with period {ms:?} ms"))),
    }
}

/// A breaker's configuration from `breaker_failures`, `breaker_within_ms`,
/// `breaker_cooldown_ms` (all null: none).
fn breaker_policy<R: Columns>(row: &R) -> Result<Option<BreakerPolicy>> {
    let corrupt = |detail: String| StoreError::Corrupt {
        what: "policy breaker",
        detail,
    };
    let parts = (
        row.opt_int("breaker_failures")?,
        row.opt_int("breaker_within_ms")?,
        row.opt_int("breaker_cooldown_ms")?,
    );
    match parts {
        (None, None, None) => Ok(None),
        (Some(n), Some(within), Some(cooldown)) => {
            let n = u32::try_from(n).map_err(|_| corrupt(format!("{n} failures")))?;
            let ms = |v: i64| Duration::from_millis(u64::try_from(v).unwrap_or(0));
            BreakerPolicy::new(n, ms(within), ms(cooldown))
                .map(Some)
                .map_err(|e| corrupt(e.to_string()))
        }
        other => Err(corrupt(format!("incomplete: {other:?}"))),
    }
}

/// A breaker and its state from the `breaker_*` columns of a policies row (none: no breaker).
pub(crate) fn breaker_status<R: Columns>(row: &R) -> Result<Option<BreakerStatus>> {
    let Some(policy) = breaker_policy(row)? else {
        return Ok(None);
    };
    let state = row.text("breaker_state")?;
    Ok(Some(BreakerStatus {
        policy,
        state: state
            .parse()
            .map_err(|e: crate::domain::UnknownWord| StoreError::Corrupt {
                what: "breaker state",
                detail: e.to_string(),
            })?,
        since: row.opt_time("breaker_since")?,
        until: row.opt_time("breaker_until")?,
    }))
}

/// A row of a breaker tick: `scope`, `from_state`, `to_state`, `failures`, `breaker_until` and
/// the breaker's configuration.
pub(crate) fn breaker_transition<R: Columns>(row: &R) -> Result<BreakerTransition> {
    let state = |column| -> Result<BreakerState> {
        row.text(column)?
            .parse()
            .map_err(|e: crate::domain::UnknownWord| StoreError::Corrupt {
                what: "breaker state",
                detail: e.to_string(),
            })
    };
    Ok(BreakerTransition {
        task_type: task_type(row.text("scope")?)?,
        from: state("from_state")?,
        to: state("to_state")?,
        failures: row.opt_int("failures")?.map(tally),
        until: row.opt_time("breaker_until")?,
        policy: breaker_policy(row)?.ok_or_else(|| StoreError::Corrupt {
            what: "breaker",
            detail: "a move of a breaker that is not set".into(),
        })?,
    })
}

/// An `agents` row (with `now` and `leader`).
pub(crate) fn agent<R: RecordColumns>(row: &R) -> Result<AgentRecord> {
    let state = row.text("state")?;
    Ok(AgentRecord {
        id: agent_id(row.text("id")?)?,
        name: row.text("name")?,
        host: row.text("host")?,
        pid: count(row.int("pid")?),
        grpc_address: row.opt_text("grpc_address")?,
        version: row.text("version")?,
        task_types: row.text_list("task_types")?,
        local_concurrency: count(row.int("local_concurrency")?),
        active: count(row.int("active")?),
        state: state.parse().map_err(|_| StoreError::Corrupt {
            what: "agent state",
            detail: state.clone(),
        })?,
        started_at: row.time("started_at")?,
        heartbeat_at: row.time("heartbeat_at")?,
        stopped_at: row.opt_time("stopped_at")?,
        alive_until: row.opt_time("alive_until")?,
        now: row.time("now")?,
        leader: row.flag("leader")?,
    })
}

/// An `audit_log` row.
pub(crate) fn audit<R: Columns>(row: &R) -> Result<AuditRecord> {
    Ok(AuditRecord {
        id: row.int("id")?,
        at: row.time("at")?,
        actor: row.text("actor")?,
        role: row.text("role")?,
        action: row.text("action")?,
        target: row.text("target")?,
        params: row.json("params")?,
        result: row.text("result")?,
        detail: row.opt_text("detail")?,
        peer: row.opt_text("peer")?,
        count: row.int("count")?,
    })
}

/// A row of `task_overview.sql`: the global policy (`task_type` `*`) or one type's counts.
pub(crate) fn overview_row<R: Columns>(row: &R) -> Result<OverviewRow> {
    let name = row.text("task_type")?;
    let limit = row.opt_int("max_concurrency")?.map(count);
    let paused = row.flag("paused")?;
    let rate = rate_limit(row.opt_int("rate_starts")?, row.opt_int("rate_period_ms")?)?
        .map(|limit| -> Result<RateFill> {
            Ok(RateFill {
                limit,
                used: row.opt_int("rate_used")?.map_or(0, tally),
            })
        })
        .transpose()?;
    if name == "*" {
        return Ok(OverviewRow::Global {
            limit,
            paused,
            rate,
        });
    }
    let n = |column| -> Result<u64> { Ok(tally(row.int(column)?)) };
    Ok(OverviewRow::Type(TypeCounts {
        task_type: task_type(name)?,
        queued: n("queued")?,
        scheduled: n("scheduled")?,
        retrying: n("retrying")?,
        running: n("running")?,
        dead: n("dead")?,
        finished_last_minute: n("finished_last_minute")?,
        dead_last_minute: n("dead_last_minute")?,
        limit,
        paused,
        rate,
        shed_after: millis(row.opt_int("shed_after_ms")?),
        shed_last_minute: n("shed_last_minute")?,
        per_key_limit: row.opt_int("per_key_concurrency")?.map(count),
        breaker: breaker_status(row)?,
        oldest_waiting: millis(row.opt_int("oldest_waiting_ms")?),
    }))
}

/// The row of `task_stats.sql`, read at the database's `now`: the live counts, then per
/// window of [`STATS_WINDOWS`] its columns suffixed `_1m`, `_15m`, `_1h`.
pub(crate) fn stats_row<R: Columns>(row: &R, now: DateTime<Utc>) -> Result<QueueStats> {
    /// Per window: succeeded, dead-lettered, cancelled, failed attempts.
    const COLUMNS: [[&str; 4]; 3] = [
        ["succeeded_1m", "dead_1m", "cancelled_1m", "failed_1m"],
        ["succeeded_15m", "dead_15m", "cancelled_15m", "failed_15m"],
        ["succeeded_1h", "dead_1h", "cancelled_1h", "failed_1h"],
    ];
    let n = |column: &'static str| -> Result<u64> { Ok(tally(row.int(column)?)) };
    let windows = STATS_WINDOWS
        .iter()
        .zip(COLUMNS)
        .map(
            |(window, [ok, dead, cancelled, failed])| -> Result<StatsWindow> {
                Ok(StatsWindow {
                    window: *window,
                    succeeded: n(ok)?,
                    dead_lettered: n(dead)?,
                    cancelled: n(cancelled)?,
                    failed_attempts: n(failed)?,
                })
            },
        )
        .collect::<Result<_>>()?;
    Ok(QueueStats {
        queued: n("queued")?,
        scheduled: n("scheduled")?,
        retrying: n("retrying")?,
        running: n("running")?,
        dead: n("dead")?,
        oldest_waiting: millis(row.opt_int("oldest_waiting_ms")?),
        windows,
        now,
    })
}

/// The row of `task_explain.sql`, read at the database's `now`.
pub(crate) fn explain_facts<R: Columns>(row: &R, now: DateTime<Utc>) -> Result<ExplainFacts> {
    let limit_use = |limit, running| -> Result<Option<LimitUse>> {
        let running = row.opt_int(running)?.map_or(0, tally);
        Ok(row.opt_int(limit)?.map(|limit| LimitUse {
            limit: count(limit),
            running,
        }))
    };
    Ok(ExplainFacts {
        id: TaskId(row.int("id")?),
        task_type: task_type(row.text("task_type")?)?,
        status: status(&row.text("status")?)?,
        available_at: row.time("available_at")?,
        deadline_at: row.opt_time("deadline_at")?,
        attempt: row.small("attempt")?,
        max_attempts: row.small("max_attempts")?,
        lease_owner: row.opt_text("lease_owner")?,
        last_error: parse::<TaskError>(row.json("last_error")?, "task error")?,
        finished_at: row.time("finished_at")?,
        now,
        type_paused: row.flag("type_paused")?,
        global_paused: row.flag("global_paused")?,
        type_limit: limit_use("type_limit", "type_running")?,
        breaker: breaker_status(row)?,
        type_running: row.opt_int("type_running")?.map_or(0, tally),
        concurrency_key: row.opt_text("concurrency_key")?,
        key_limit: limit_use("key_limit", "key_running")?,
        global_limit: limit_use("global_limit", "global_running")?,
        type_rate: rate_use(row, false)?,
        global_rate: rate_use(row, true)?,
        agent_live: row.flag("agent_live")?,
        ahead: tally(row.int("ahead")?),
    })
}

/// What a failure's decision reads from a held row (`task_complete_read.sql`): status,
/// attempt, max_attempts, deadline_at.
pub(crate) fn failed_attempt(row: &impl Columns) -> Result<crate::store::lifecycle::FailedAttempt> {
    Ok(crate::store::lifecycle::FailedAttempt {
        status: status(&row.text("status")?)?,
        attempt: row.int("attempt")?,
        max_attempts: row.int("max_attempts")?,
        deadline: row.opt_time("deadline_at")?,
        snoozes: row.int("snoozes")?,
    })
}

/// An expired lease as recovery reads it (`lease_list_expired.sql`).
pub(crate) fn expired_lease(row: &impl Columns) -> Result<crate::store::lifecycle::ExpiredLease> {
    Ok(crate::store::lifecycle::ExpiredLease {
        status: status(&row.text("status")?)?,
        attempt: row.int("attempt")?,
        max_attempts: row.int("max_attempts")?,
        owner: row.text("lease_owner")?,
        epoch: row.int("lease_epoch")?,
        lease_until: row.time("lease_until")?,
    })
}

/// A row of `lease_list_suspect.sql`, read at the database's `now`.
pub(crate) fn suspect_lease(
    row: &impl Columns,
    now: DateTime<Utc>,
) -> Result<crate::store::SuspectLease> {
    Ok(crate::store::SuspectLease {
        id: TaskId(row.int("id")?),
        task_type: task_type(row.text("task_type")?)?,
        owner: agent_id(row.text("lease_owner")?)?,
        epoch: LeaseEpoch(row.int("lease_epoch")?),
        heartbeat_at: row.time("heartbeat_at")?,
        lease_until: row.time("lease_until")?,
        now,
    })
}
