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

/// One `audit_log` row with the columns of issue 19: the connection it came from (`peer`) and
/// how many calls it stands for (`count`; refused calls are aggregated per peer, actor and
/// action, DESIGN §10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountedAuditRow {
    /// Row id (commit order of the inserts).
    pub id: i64,
    /// Token name, `local`, `unauthenticated`, ...
    pub actor: String,
    /// `operator` or `viewer`.
    pub role: String,
    /// What was asked (`enqueue`, `policy_set`, ...).
    pub action: String,
    /// What it was asked of (`task:1`, `policy:*`, ...).
    pub target: String,
    /// `applied`, `noop`, `failed` or `denied`.
    pub result: String,
    /// The caller's connection (`127.0.0.1:50412`, `127.0.0.1`, `unix:uid:0(root)`), if known.
    pub peer: Option<String>,
    /// Calls the row stands for (1 but for aggregated denials).
    pub count: i64,
}

/// Every audit row with its `peer` and `count`, after id `after`, oldest first.
pub async fn counted_audit_rows(pool: &PgPool, after: i64) -> anyhow::Result<Vec<CountedAuditRow>> {
    let rows = sqlx::query(
        "SELECT id, actor, role, action, target, result, peer, count FROM audit_log \
         WHERE id > $1 ORDER BY id",
    )
    .bind(after)
    .fetch_all(pool)
    .await
    .context("reading the audit log with peers and counts")?;
    rows.iter()
        .map(|r| {
            Ok(CountedAuditRow {
                id: r.try_get("id")?,
                actor: r.try_get("actor")?,
                role: r.try_get("role")?,
                action: r.try_get("action")?,
                target: r.try_get("target")?,
                result: r.try_get("result")?,
                peer: r.try_get("peer")?,
                count: r.try_get("count")?,
            })
        })
        .collect()
}

/// The id of the newest audit row (0 when there is none): a mark for
/// [`counted_audit_rows`].
pub async fn last_audit_id(pool: &PgPool) -> anyhow::Result<i64> {
    sqlx::query_scalar("SELECT coalesce(max(id), 0) FROM audit_log")
        .fetch_one(pool)
        .await
        .context("reading the newest audit id")
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
