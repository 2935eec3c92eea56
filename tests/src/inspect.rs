//! Reading rows back for assertions: a whole task row as JSON (to prove "nothing changed"),
//! its status, counts, attempt rows and audit rows, straight from SQL rather than through the
//! store under test.

use anyhow::Context;
use serde_json::Value;
use sqlx::{PgPool, Row};

/// The whole `tasks` row as JSON, or an error when it does not exist.
pub async fn task_row(pool: &PgPool, id: i64) -> anyhow::Result<Value> {
    let row = sqlx::query("SELECT to_jsonb(t) AS row FROM tasks t WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .with_context(|| format!("reading task {id}"))?;
    let sqlx::types::Json(value): sqlx::types::Json<Value> = row.try_get("row")?;
    Ok(value)
}

/// A task's status.
pub async fn task_status(pool: &PgPool, id: i64) -> anyhow::Result<String> {
    let row = sqlx::query("SELECT status FROM tasks WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .with_context(|| format!("reading status of task {id}"))?;
    Ok(row.try_get("status")?)
}

/// `(max_concurrency, paused)` of a policy row, `None` when there is no row.
pub async fn policy_row(pool: &PgPool, scope: &str) -> anyhow::Result<Option<(Option<i32>, bool)>> {
    sqlx::query_as("SELECT max_concurrency, paused FROM policies WHERE scope = $1")
        .bind(scope)
        .fetch_optional(pool)
        .await
        .with_context(|| format!("reading the policy of {scope}"))
}

/// Runs a `SELECT count(*) …` (or any one-bigint query) and returns the number.
pub async fn count(pool: &PgPool, sql: &'static str) -> anyhow::Result<i64> {
    let row = sqlx::query(sql)
        .fetch_one(pool)
        .await
        .with_context(|| format!("running {sql}"))?;
    Ok(row.try_get(0)?)
}

/// `(epoch, agent, outcome)` of every attempt row of a task, by epoch.
pub async fn attempt_rows(pool: &PgPool, id: i64) -> anyhow::Result<Vec<(i64, String, String)>> {
    let rows = sqlx::query(
        "SELECT epoch, agent, outcome FROM task_attempts WHERE task_id = $1 ORDER BY epoch",
    )
    .bind(id)
    .fetch_all(pool)
    .await
    .with_context(|| format!("reading attempts of task {id}"))?;
    rows.iter()
        .map(|r| {
            Ok((
                r.try_get("epoch")?,
                r.try_get("agent")?,
                r.try_get("outcome")?,
            ))
        })
        .collect()
}

/// `(actor, role, action, target, result)` of every audit row, oldest first.
pub async fn audit_rows(
    pool: &PgPool,
) -> anyhow::Result<Vec<(String, String, String, String, String)>> {
    let rows = sqlx::query("SELECT actor, role, action, target, result FROM audit_log ORDER BY id")
        .fetch_all(pool)
        .await
        .context("reading the audit log")?;
    rows.iter()
        .map(|r| {
            Ok((
                r.try_get("actor")?,
                r.try_get("role")?,
                r.try_get("action")?,
                r.try_get("target")?,
                r.try_get("result")?,
            ))
        })
        .collect()
}

/// Every row of `tasks` (but the ids in `skip`) and of `policies`, as text: equal digests
/// before and after a refused call prove it changed nothing.
pub async fn state_digest(pool: &PgPool, skip: &[i64]) -> anyhow::Result<(String, String)> {
    let tasks: String = sqlx::query_scalar(
        "SELECT coalesce(string_agg(to_jsonb(t)::text, E'\\n' ORDER BY id), '') FROM tasks t \
         WHERE NOT (id = ANY($1))",
    )
    .bind(skip)
    .fetch_one(pool)
    .await
    .context("digesting tasks")?;
    let policies: String = sqlx::query_scalar(
        "SELECT coalesce(string_agg(to_jsonb(p)::text, E'\\n' ORDER BY scope), '') FROM policies p",
    )
    .fetch_one(pool)
    .await
    .context("digesting policies")?;
    Ok((tasks, policies))
}
