//! Task factories: rows written into `tasks` with raw SQL, in any state, bypassing the store,
//! so a test can set up exactly the situation it needs (a running task whose lease has
//! expired, a dead task, a task due in an hour) without driving the state machine there.

use anyhow::{Context, bail};
use serde_json::{Value, json};
use sqlx::PgPool;

/// Owner of the leases the factory writes by default.
pub const FACTORY_OWNER: &str = "factory-agent#1";

/// The statuses a task row may have (mirrors the `tasks_status_known` constraint).
pub const STATUSES: [&str; 8] = [
    "queued",
    "running",
    "retry_wait",
    "cancel_requested",
    "succeeded",
    "partially_succeeded",
    "cancelled",
    "dead",
];

/// A task row to insert. Start from [`TaskSpec::new`] and change what the test cares about:
/// `TaskSpec { priority: 5, ..TaskSpec::new("email.send", "queued") }`.
///
/// Times are relative to the database's `now()`, in seconds (fractions allowed, negative
/// values move into the past).
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSpec {
    pub task_type: String,
    pub status: &'static str,
    pub payload: Value,
    pub attempt: i32,
    pub max_attempts: i32,
    pub lease_owner: Option<String>,
    pub lease_epoch: i64,
    /// `lease_until = now() + lease_ttl_secs` (negative: already expired).
    pub lease_ttl_secs: Option<f64>,
    /// `heartbeat_at = now() - heartbeat_age_secs`.
    pub heartbeat_age_secs: Option<f64>,
    pub priority: i16,
    /// `available_at = now() + available_in_secs`.
    pub available_in_secs: f64,
    /// `deadline_at = now() + deadline_in_secs`.
    pub deadline_in_secs: Option<f64>,
    pub timeout_ms: Option<i64>,
    pub idempotency_key: Option<String>,
    pub result: Option<Value>,
    pub last_error: Option<Value>,
    /// `finished_at = now()` when set.
    pub finished: bool,
}

impl TaskSpec {
    /// A task of `task_type` in `status`, with defaults that satisfy the schema's checks and
    /// look like what the state machine would have left:
    ///
    /// - `queued`: attempt 0, no lease, epoch 0.
    /// - `running`, `cancel_requested`: attempt 1, epoch 1, leased by [`FACTORY_OWNER`] for 30 s
    ///   more, heartbeat just now.
    /// - `retry_wait`: attempt 1, epoch 1, due now, a retryable `last_error`.
    /// - `succeeded`, `partially_succeeded`, `dead`: attempt 1, epoch 1, finished now; `dead`
    ///   carries the error `{"code":"boom","message":"factory","retryable":false}`.
    /// - `cancelled`: attempt 0, epoch 0 (cancelled while waiting), finished now.
    ///
    /// An unknown status is kept as given: the insert then fails on the schema's check.
    pub fn new(task_type: impl Into<String>, status: &'static str) -> Self {
        let leased = matches!(status, "running" | "cancel_requested");
        let tried = !matches!(status, "queued" | "cancelled");
        let finished = matches!(
            status,
            "succeeded" | "partially_succeeded" | "cancelled" | "dead"
        );
        let last_error = match status {
            "dead" => Some(json!({"code": "boom", "message": "factory", "retryable": false})),
            "retry_wait" => Some(json!({"code": "boom", "message": "factory", "retryable": true})),
            _ => None,
        };
        Self {
            task_type: task_type.into(),
            status,
            payload: json!({}),
            attempt: i32::from(tried),
            max_attempts: 25,
            lease_owner: leased.then(|| FACTORY_OWNER.to_string()),
            lease_epoch: i64::from(tried),
            lease_ttl_secs: leased.then_some(30.0),
            heartbeat_age_secs: leased.then_some(0.0),
            priority: 0,
            available_in_secs: 0.0,
            deadline_in_secs: None,
            timeout_ms: None,
            idempotency_key: None,
            result: None,
            last_error,
            finished,
        }
    }

    /// The same spec with `payload`.
    pub fn payload(mut self, payload: Value) -> Self {
        self.payload = payload;
        self
    }

    /// The same spec with `priority`.
    pub fn priority(mut self, priority: i16) -> Self {
        self.priority = priority;
        self
    }
}

/// Inserts `spec` into `tasks` and returns the new task's id. `started_at` is set (to now) for
/// tasks with an attempt behind them.
pub async fn insert_task(pool: &PgPool, spec: TaskSpec) -> anyhow::Result<i64> {
    sqlx::query_scalar(
        "INSERT INTO tasks (task_type, status, payload, attempt, max_attempts, lease_owner, \
             lease_epoch, lease_until, heartbeat_at, priority, available_at, deadline_at, \
             timeout_ms, idempotency_key, result, last_error, started_at, finished_at) \
         VALUES ($1, $2, $3, $4, $5, $6, \
             $7, now() + $8::float8 * interval '1 second', \
             now() - $9::float8 * interval '1 second', $10, \
             now() + $11::float8 * interval '1 second', \
             now() + $12::float8 * interval '1 second', \
             $13, $14, $15, $16, \
             CASE WHEN $4 > 0 THEN now() END, CASE WHEN $17 THEN now() END) \
         RETURNING id",
    )
    .bind(&spec.task_type)
    .bind(spec.status)
    .bind(&spec.payload)
    .bind(spec.attempt)
    .bind(spec.max_attempts)
    .bind(&spec.lease_owner)
    .bind(spec.lease_epoch)
    .bind(spec.lease_ttl_secs)
    .bind(spec.heartbeat_age_secs)
    .bind(spec.priority)
    .bind(spec.available_in_secs)
    .bind(spec.deadline_in_secs)
    .bind(spec.timeout_ms)
    .bind(&spec.idempotency_key)
    .bind(&spec.result)
    .bind(&spec.last_error)
    .bind(spec.finished)
    .fetch_one(pool)
    .await
    .with_context(|| {
        format!(
            "inserting a {} task of type {}",
            spec.status, spec.task_type
        )
    })
}

/// Simulates lease expiry without sleeping: `lease_until = now() - secs_ago` and
/// `heartbeat_at = now() - secs_ago - 30 s` for task `id`.
pub async fn backdate_lease(pool: &PgPool, id: i64, secs_ago: f64) -> anyhow::Result<()> {
    let updated = sqlx::query(
        "UPDATE tasks SET lease_until = now() - $2::float8 * interval '1 second', \
             heartbeat_at = now() - ($2::float8 + 30) * interval '1 second' \
         WHERE id = $1",
    )
    .bind(id)
    .bind(secs_ago)
    .execute(pool)
    .await
    .with_context(|| format!("backdating the lease of task {id}"))?;
    if updated.rows_affected() != 1 {
        bail!("backdating the lease of task {id}: no such task");
    }
    Ok(())
}
