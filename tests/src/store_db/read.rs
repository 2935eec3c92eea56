//! Reading rows back for assertions, in either dialect, straight from SQL rather than through
//! the store under test: a whole task row as JSON (to prove "nothing changed"), a status, a
//! time column, attempt rows, audit rows, and the lease intervals of the attempt ledger.
//!
//! A task row's JSON has every column of the table (SQLite: read from the schema, so a new
//! column is never missed); JSON columns nest as JSON. Times differ by dialect (PostgreSQL
//! timestamps as text, SQLite microseconds as numbers), so compare them only with each other
//! or through [`StoreDb::task_time`].

use anyhow::{Context, bail};
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{AssertSqlSafe, Row};

use super::{Conn, StoreDb};
use crate::inspect;

/// Columns of `tasks` that hold JSON text on SQLite.
const SQLITE_JSON_COLUMNS: [&str; 4] = ["payload", "progress", "result", "last_error"];

/// `(target, result, params, detail)` of an audit row.
pub type AuditDetail = (String, String, Option<Value>, Option<String>);

fn is_identifier(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
}

/// Parses an optional JSON text column.
fn json_text(text: Option<String>, what: &str) -> anyhow::Result<Option<Value>> {
    text.map(|t| serde_json::from_str(&t).with_context(|| format!("parsing {what} {t:.100}")))
        .transpose()
}

impl StoreDb {
    /// The whole `tasks` row as JSON, or an error when it does not exist.
    pub async fn task_row(&self, id: i64) -> anyhow::Result<Value> {
        match &self.conn {
            Conn::Pg(db) => inspect::task_row(&db.pool, id).await,
            Conn::Sqlite(db) => {
                let columns: Vec<String> =
                    sqlx::query_scalar("SELECT name FROM pragma_table_info('tasks') ORDER BY cid")
                        .fetch_all(db.pool())
                        .await
                        .context("reading the columns of tasks")?;
                let mut fields = Vec::new();
                for column in &columns {
                    if !is_identifier(column) {
                        bail!("unexpected column name {column:?}");
                    }
                    if SQLITE_JSON_COLUMNS.contains(&column.as_str()) {
                        fields.push(format!("'{column}', json({column})"));
                    } else {
                        fields.push(format!("'{column}', {column}"));
                    }
                }
                let sql = format!(
                    "SELECT json_object({}) FROM tasks WHERE id = $1",
                    fields.join(", ")
                );
                let text: String = sqlx::query_scalar(AssertSqlSafe(sql))
                    .bind(id)
                    .fetch_one(db.pool())
                    .await
                    .with_context(|| format!("reading task {id}"))?;
                serde_json::from_str(&text).with_context(|| format!("parsing task {id}"))
            }
        }
    }

    /// A task's status.
    pub async fn task_status(&self, id: i64) -> anyhow::Result<String> {
        match &self.conn {
            Conn::Pg(db) => inspect::task_status(&db.pool, id).await,
            Conn::Sqlite(db) => sqlx::query_scalar("SELECT status FROM tasks WHERE id = $1")
                .bind(id)
                .fetch_one(db.pool())
                .await
                .with_context(|| format!("reading status of task {id}")),
        }
    }

    /// A (non-null) time column of task `id`.
    pub async fn task_time(&self, id: i64, column: &str) -> anyhow::Result<DateTime<Utc>> {
        if !is_identifier(column) {
            bail!("not a column name: {column:?}");
        }
        let sql = format!("SELECT {column} FROM tasks WHERE id = $1");
        let context = || format!("reading {column} of task {id}");
        match &self.conn {
            Conn::Pg(db) => sqlx::query_scalar(AssertSqlSafe(sql))
                .bind(id)
                .fetch_one(&db.pool)
                .await
                .with_context(context),
            Conn::Sqlite(db) => {
                let us: i64 = sqlx::query_scalar(AssertSqlSafe(sql))
                    .bind(id)
                    .fetch_one(db.pool())
                    .await
                    .with_context(context)?;
                DateTime::from_timestamp_micros(us)
                    .with_context(|| format!("{column} of task {id}: {us} µs is out of range"))
            }
        }
    }

    /// `(epoch, agent, outcome)` of every attempt row of a task, by epoch.
    pub async fn attempt_rows(&self, id: i64) -> anyhow::Result<Vec<(i64, String, String)>> {
        match &self.conn {
            Conn::Pg(db) => inspect::attempt_rows(&db.pool, id).await,
            Conn::Sqlite(db) => sqlx::query_as(
                "SELECT epoch, agent, outcome FROM task_attempts WHERE task_id = $1 \
                 ORDER BY epoch",
            )
            .bind(id)
            .fetch_all(db.pool())
            .await
            .with_context(|| format!("reading attempts of task {id}")),
        }
    }

    /// `(actor, role, action, target, result)` of every audit row, oldest first.
    pub async fn audit_rows(
        &self,
    ) -> anyhow::Result<Vec<(String, String, String, String, String)>> {
        match &self.conn {
            Conn::Pg(db) => inspect::audit_rows(&db.pool).await,
            Conn::Sqlite(db) => sqlx::query_as(
                "SELECT actor, role, action, target, result FROM audit_log ORDER BY id",
            )
            .fetch_all(db.pool())
            .await
            .context("reading the audit log"),
        }
    }

    /// `(target, result, params, detail)` of every audit row, oldest first.
    pub async fn audit_details(&self) -> anyhow::Result<Vec<AuditDetail>> {
        let sql = "SELECT target, result, params, detail FROM audit_log ORDER BY id";
        match &self.conn {
            Conn::Pg(db) => {
                let rows = sqlx::query(sql)
                    .fetch_all(&db.pool)
                    .await
                    .context("reading the audit log")?;
                rows.iter()
                    .map(|r| {
                        let params: Option<sqlx::types::Json<Value>> = r.try_get("params")?;
                        Ok((
                            r.try_get("target")?,
                            r.try_get("result")?,
                            params.map(|p| p.0),
                            r.try_get("detail")?,
                        ))
                    })
                    .collect()
            }
            Conn::Sqlite(db) => {
                let rows = sqlx::query(sql)
                    .fetch_all(db.pool())
                    .await
                    .context("reading the audit log")?;
                rows.iter()
                    .map(|r| {
                        Ok((
                            r.try_get("target")?,
                            r.try_get("result")?,
                            json_text(r.try_get("params")?, "audit params")?,
                            r.try_get("detail")?,
                        ))
                    })
                    .collect()
            }
        }
    }

    /// `(owner, token)` of every history row of resource lease `name`, by token.
    pub async fn resource_history(&self, name: &str) -> anyhow::Result<Vec<(String, i64)>> {
        let sql = "SELECT owner, token FROM resource_lease_history WHERE name = $1 ORDER BY token";
        let context = || format!("reading the history of {name}");
        match &self.conn {
            Conn::Pg(db) => sqlx::query_as(sql)
                .bind(name)
                .fetch_all(&db.pool)
                .await
                .with_context(context),
            Conn::Sqlite(db) => sqlx::query_as(sql)
                .bind(name)
                .fetch_all(db.pool())
                .await
                .with_context(context),
        }
    }

    /// `(task type, started, finished)` of every attempt, in microseconds of database time:
    /// the lease intervals a concurrency ledger checks.
    pub async fn attempt_intervals(&self) -> anyhow::Result<Vec<(String, i64, i64)>> {
        match &self.conn {
            Conn::Pg(db) => sqlx::query_as(
                "SELECT t.task_type::text, (extract(epoch FROM a.started_at) * 1e6)::bigint,
                        (extract(epoch FROM a.finished_at) * 1e6)::bigint
                 FROM task_attempts a JOIN tasks t ON t.id = a.task_id",
            )
            .fetch_all(&db.pool)
            .await
            .context("reading the attempt ledger"),
            Conn::Sqlite(db) => sqlx::query_as(
                "SELECT t.task_type, a.started_at, a.finished_at
                 FROM task_attempts a JOIN tasks t ON t.id = a.task_id",
            )
            .fetch_all(db.pool())
            .await
            .context("reading the attempt ledger"),
        }
    }

    /// `(task type, concurrency key, started, finished)` of every attempt of a task with a
    /// concurrency key, in microseconds of database time: the ledger a per-key limit checks.
    pub async fn keyed_attempt_intervals(&self) -> anyhow::Result<Vec<(String, String, i64, i64)>> {
        match &self.conn {
            Conn::Pg(db) => sqlx::query_as(
                "SELECT t.task_type::text, t.concurrency_key,
                        (extract(epoch FROM a.started_at) * 1e6)::bigint,
                        (extract(epoch FROM a.finished_at) * 1e6)::bigint
                 FROM task_attempts a JOIN tasks t ON t.id = a.task_id
                 WHERE t.concurrency_key IS NOT NULL",
            )
            .fetch_all(&db.pool)
            .await
            .context("reading the keyed attempt ledger"),
            Conn::Sqlite(db) => sqlx::query_as(
                "SELECT t.task_type, t.concurrency_key, a.started_at, a.finished_at
                 FROM task_attempts a JOIN tasks t ON t.id = a.task_id
                 WHERE t.concurrency_key IS NOT NULL",
            )
            .fetch_all(db.pool())
            .await
            .context("reading the keyed attempt ledger"),
        }
    }
}
