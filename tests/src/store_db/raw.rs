//! Raw writes for test setup, in either dialect: statements given once for both ([`Sql`]),
//! row updates built from column values ([`Val`], times relative to the database clock), the
//! task factory, bulk inserts, and write transactions held open to race the store or to
//! enqueue and audit in a caller's own transaction ([`WriteTx`]).
//!
//! Both dialects take `$1`, `$2`, … parameters. A list of ids is an array on PostgreSQL
//! (`= ANY($1)`) and a JSON array on SQLite (`IN (SELECT value FROM json_each($1))`).

use std::borrow::Cow;

use anyhow::{Context, bail};
use leasehold_shared::InputLimits;
use leasehold_shared::store::{AuditEntry, Enqueued, HolderWrite, NewTask, postgres, sqlite};
use serde_json::Value;
use sqlx::postgres::PgArguments;
use sqlx::query::Query;
use sqlx::sqlite::SqliteArguments;
use sqlx::{AssertSqlSafe, Postgres, Row, Sqlite, Transaction};

use super::{Backend, Conn, StoreDb};
use crate::factory::{self, TaskSpec};

/// SQLite's clock as the store stores times: microseconds since the epoch, at millisecond
/// precision (the schema's column defaults and the store use the same expression).
pub const SQLITE_NOW_US: &str =
    "(CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000)";

/// One statement, written once when both dialects accept it, else once per dialect.
#[derive(Debug, Clone)]
pub struct Sql {
    pub postgres: Cow<'static, str>,
    pub sqlite: Cow<'static, str>,
}

impl Sql {
    /// A statement both dialects accept as written.
    pub const fn both(sql: &'static str) -> Sql {
        Sql {
            postgres: Cow::Borrowed(sql),
            sqlite: Cow::Borrowed(sql),
        }
    }

    /// A statement written for each dialect.
    pub const fn each(postgres: &'static str, sqlite: &'static str) -> Sql {
        Sql {
            postgres: Cow::Borrowed(postgres),
            sqlite: Cow::Borrowed(sqlite),
        }
    }

    /// A statement built at run time that both dialects accept as written.
    pub fn owned(sql: impl Into<String>) -> Sql {
        let sql = sql.into();
        Sql {
            postgres: Cow::Owned(sql.clone()),
            sqlite: Cow::Owned(sql),
        }
    }

    fn text(&self, backend: Backend) -> String {
        match backend {
            Backend::Postgres => self.postgres.to_string(),
            Backend::Sqlite => self.sqlite.to_string(),
        }
    }
}

impl From<&'static str> for Sql {
    fn from(sql: &'static str) -> Sql {
        Sql::both(sql)
    }
}

/// A bound parameter.
#[derive(Debug, Clone, PartialEq)]
pub enum Arg {
    Int(i64),
    Real(f64),
    Text(String),
    Bool(bool),
    /// `jsonb` on PostgreSQL, JSON text on SQLite.
    Json(Value),
    /// `bigint[]` on PostgreSQL, a JSON array on SQLite.
    Ints(Vec<i64>),
}

impl From<i64> for Arg {
    fn from(v: i64) -> Arg {
        Arg::Int(v)
    }
}

impl From<&str> for Arg {
    fn from(v: &str) -> Arg {
        Arg::Text(v.to_string())
    }
}

impl From<String> for Arg {
    fn from(v: String) -> Arg {
        Arg::Text(v)
    }
}

/// A value to write into a column.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    Int(i64),
    Text(String),
    Bool(bool),
    Json(Value),
    Null,
    /// A time `secs` seconds from the database's now (negative: in the past).
    At(f64),
}

impl From<i64> for Val {
    fn from(v: i64) -> Val {
        Val::Int(v)
    }
}

impl From<&str> for Val {
    fn from(v: &str) -> Val {
        Val::Text(v.to_string())
    }
}

impl From<bool> for Val {
    fn from(v: bool) -> Val {
        Val::Bool(v)
    }
}

/// Which rows an update changes.
#[derive(Debug, Clone, Copy)]
pub enum Rows<'a> {
    Task(i64),
    Tasks(&'a [i64]),
    AllTasks,
    /// The `agents` row with this id.
    Agent(&'a str),
    /// The one `leader` row.
    Leader,
    /// The `policies` row of this scope (`*` is the global one).
    Policy(&'a str),
    /// The `schedules` row of this name.
    Schedule(&'a str),
    /// The `resource_leases` row of this name (a lock, or a shard `<group>#<n>`).
    Resource(&'a str),
    /// The `shard_members` row of (group, member).
    ShardMember(&'a str, &'a str),
    /// The `resource_lease_history` row of (lease name, token).
    ResourceHistory(&'a str, i64),
}

/// `$n` as a time `secs` from now (`$n` binds the seconds as a float).
fn time_expr(backend: Backend, n: usize) -> String {
    match backend {
        Backend::Postgres => format!("(now() + ${n}::float8 * interval '1 second')"),
        Backend::Sqlite => format!("({SQLITE_NOW_US} + CAST(round(${n} * 1000000.0) AS INTEGER))"),
    }
}

/// `UPDATE table SET … WHERE …` for `rows`, and its parameters.
fn update_sql(
    backend: Backend,
    rows: Rows<'_>,
    set: &[(&str, Val)],
) -> anyhow::Result<(String, Vec<Arg>)> {
    if set.is_empty() {
        bail!("an update needs at least one column");
    }
    let mut args = Vec::new();
    let mut assignments = Vec::new();
    for (column, value) in set {
        if column.is_empty() || !column.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
            bail!("not a column name: {column:?}");
        }
        let expr = match value {
            Val::Null => "NULL".to_string(),
            Val::At(secs) => {
                args.push(Arg::Real(*secs));
                time_expr(backend, args.len())
            }
            Val::Int(v) => {
                args.push(Arg::Int(*v));
                format!("${}", args.len())
            }
            Val::Text(v) => {
                args.push(Arg::Text(v.clone()));
                format!("${}", args.len())
            }
            Val::Bool(v) => {
                args.push(Arg::Bool(*v));
                format!("${}", args.len())
            }
            Val::Json(v) => {
                args.push(Arg::Json(v.clone()));
                format!("${}", args.len())
            }
        };
        assignments.push(format!("{column} = {expr}"));
    }
    let (table, filter) = match rows {
        Rows::Task(id) => {
            args.push(Arg::Int(id));
            ("tasks", format!(" WHERE id = ${}", args.len()))
        }
        Rows::Tasks(ids) => {
            args.push(Arg::Ints(ids.to_vec()));
            let n = args.len();
            let filter = match backend {
                Backend::Postgres => format!(" WHERE id = ANY(${n})"),
                Backend::Sqlite => format!(" WHERE id IN (SELECT value FROM json_each(${n}))"),
            };
            ("tasks", filter)
        }
        Rows::AllTasks => ("tasks", String::new()),
        Rows::Agent(id) => {
            args.push(Arg::Text(id.to_string()));
            ("agents", format!(" WHERE id = ${}", args.len()))
        }
        Rows::Leader => ("leader", String::new()),
        Rows::Policy(scope) => {
            args.push(Arg::Text(scope.to_string()));
            ("policies", format!(" WHERE scope = ${}", args.len()))
        }
        Rows::Schedule(name) => {
            args.push(Arg::Text(name.to_string()));
            ("schedules", format!(" WHERE name = ${}", args.len()))
        }
        Rows::Resource(name) => {
            args.push(Arg::Text(name.to_string()));
            ("resource_leases", format!(" WHERE name = ${}", args.len()))
        }
        Rows::ShardMember(group, member) => {
            args.push(Arg::Text(group.to_string()));
            args.push(Arg::Text(member.to_string()));
            let n = args.len();
            (
                "shard_members",
                format!(" WHERE group_name = ${} AND member = ${n}", n - 1),
            )
        }
        Rows::ResourceHistory(name, token) => {
            args.push(Arg::Text(name.to_string()));
            args.push(Arg::Int(token));
            let n = args.len();
            (
                "resource_lease_history",
                format!(" WHERE name = ${} AND token = ${n}", n - 1),
            )
        }
    };
    Ok((
        format!("UPDATE {table} SET {}{filter}", assignments.join(", ")),
        args,
    ))
}

pub(super) fn bind_pg<'q>(
    mut query: Query<'q, Postgres, PgArguments>,
    args: &[Arg],
) -> Query<'q, Postgres, PgArguments> {
    for arg in args {
        query = match arg {
            Arg::Int(v) => query.bind(*v),
            Arg::Real(v) => query.bind(*v),
            Arg::Text(v) => query.bind(v.clone()),
            Arg::Bool(v) => query.bind(*v),
            Arg::Json(v) => query.bind(sqlx::types::Json(v.clone())),
            Arg::Ints(v) => query.bind(v.clone()),
        };
    }
    query
}

pub(super) fn bind_sqlite<'q>(
    mut query: Query<'q, Sqlite, SqliteArguments>,
    args: &[Arg],
) -> Query<'q, Sqlite, SqliteArguments> {
    for arg in args {
        query = match arg {
            Arg::Int(v) => query.bind(*v),
            Arg::Real(v) => query.bind(*v),
            Arg::Text(v) => query.bind(v.clone()),
            Arg::Bool(v) => query.bind(*v),
            Arg::Json(v) => query.bind(v.to_string()),
            Arg::Ints(v) => query.bind(Value::from(v.clone()).to_string()),
        };
    }
    query
}

/// An attempt row of task `id` that started (and ended) now.
fn attempt_insert(
    id: i64,
    epoch: i64,
    attempt: i64,
    agent: &str,
    outcome: &str,
) -> (Sql, Vec<Arg>) {
    // PostgreSQL keeps attempt rows in task_attempt_rows (task_attempts is a view that adds each
    // finished task's final attempt); SQLite in the task_attempts table.
    let insert = |table: &str| {
        format!(
            "INSERT INTO {table} (task_id, epoch, attempt, agent, started_at, outcome) \
             VALUES ($1, $2, $3, $4,"
        )
    };
    let sql = Sql {
        postgres: Cow::Owned(format!("{} now(), $5)", insert("task_attempt_rows"))),
        sqlite: Cow::Owned(format!("{} {SQLITE_NOW_US}, $5)", insert("task_attempts"))),
    };
    let args = vec![
        Arg::Int(id),
        Arg::Int(epoch),
        Arg::Int(attempt),
        Arg::from(agent),
        Arg::from(outcome),
    ];
    (sql, args)
}

/// The first column as a number, whatever integer width it has.
pub(super) fn int_of_pg(row: &sqlx::postgres::PgRow) -> anyhow::Result<i64> {
    match row.try_get::<i64, _>(0) {
        Ok(v) => Ok(v),
        Err(_) => Ok(i64::from(row.try_get::<i32, _>(0)?)),
    }
}

impl StoreDb {
    /// Runs one statement; returns the rows it changed.
    pub async fn execute(&self, sql: impl Into<Sql>, args: &[Arg]) -> anyhow::Result<u64> {
        let sql = sql.into();
        let text = sql.text(self.backend());
        let done = match &self.conn {
            Conn::Pg(db) => bind_pg(sqlx::query(AssertSqlSafe(text.clone())), args)
                .execute(&db.pool)
                .await
                .map(|r| r.rows_affected()),
            Conn::Sqlite(db) => bind_sqlite(sqlx::query(AssertSqlSafe(text.clone())), args)
                .execute(db.pool())
                .await
                .map(|r| r.rows_affected()),
        };
        done.with_context(|| format!("running {text:.200}"))
    }

    /// Runs one statement and returns its error, failing when it succeeds: for statements the
    /// database must refuse.
    pub async fn execute_err(
        &self,
        sql: impl Into<Sql>,
        args: &[Arg],
    ) -> anyhow::Result<sqlx::Error> {
        let sql = sql.into();
        let text = sql.text(self.backend());
        let done = match &self.conn {
            Conn::Pg(db) => bind_pg(sqlx::query(AssertSqlSafe(text.clone())), args)
                .execute(&db.pool)
                .await
                .map(drop),
            Conn::Sqlite(db) => bind_sqlite(sqlx::query(AssertSqlSafe(text.clone())), args)
                .execute(db.pool())
                .await
                .map(drop),
        };
        match done {
            Ok(()) => bail!("the database accepted {text:.200}"),
            Err(error) => Ok(error),
        }
    }

    /// The first column of every row, as integers.
    pub async fn fetch_ints(&self, sql: impl Into<Sql>, args: &[Arg]) -> anyhow::Result<Vec<i64>> {
        let sql = sql.into();
        let text = sql.text(self.backend());
        let context = || format!("running {text:.200}");
        match &self.conn {
            Conn::Pg(db) => bind_pg(sqlx::query(AssertSqlSafe(text.clone())), args)
                .fetch_all(&db.pool)
                .await
                .with_context(context)?
                .iter()
                .map(int_of_pg)
                .collect(),
            Conn::Sqlite(db) => bind_sqlite(sqlx::query(AssertSqlSafe(text.clone())), args)
                .fetch_all(db.pool())
                .await
                .with_context(context)?
                .iter()
                .map(|r| Ok(r.try_get::<i64, _>(0)?))
                .collect(),
        }
    }

    /// The first column of the one row, as an integer (e.g. a `count(*)`).
    pub async fn fetch_int(&self, sql: impl Into<Sql>, args: &[Arg]) -> anyhow::Result<i64> {
        let sql = sql.into();
        let all = self.fetch_ints(sql.clone(), args).await?;
        match all.as_slice() {
            [one] => Ok(*one),
            other => bail!(
                "{:.200} gave {} rows, not one",
                sql.text(self.backend()),
                other.len()
            ),
        }
    }

    /// A `SELECT count(*) …` both dialects accept.
    pub async fn count(&self, sql: &'static str) -> anyhow::Result<i64> {
        self.fetch_int(Sql::both(sql), &[]).await
    }

    /// Sets columns of `rows`; returns how many rows changed.
    pub async fn update(&self, rows: Rows<'_>, set: &[(&str, Val)]) -> anyhow::Result<u64> {
        let (sql, args) = update_sql(self.backend(), rows, set)?;
        let done = match &self.conn {
            Conn::Pg(db) => bind_pg(sqlx::query(AssertSqlSafe(sql.clone())), &args)
                .execute(&db.pool)
                .await
                .map(|r| r.rows_affected()),
            Conn::Sqlite(db) => bind_sqlite(sqlx::query(AssertSqlSafe(sql.clone())), &args)
                .execute(db.pool())
                .await
                .map(|r| r.rows_affected()),
        };
        done.with_context(|| format!("running {sql:.200}"))
    }

    /// Sets columns of task `id`, failing when there is no such task.
    pub async fn update_task(&self, id: i64, set: &[(&str, Val)]) -> anyhow::Result<()> {
        match self.update(Rows::Task(id), set).await? {
            1 => Ok(()),
            n => bail!("updating task {id}: {n} rows changed"),
        }
    }

    /// Inserts `spec` into `tasks` (see [`TaskSpec`]) and returns the new task's id.
    pub async fn insert_task(&self, spec: TaskSpec) -> anyhow::Result<i64> {
        match &self.conn {
            Conn::Pg(db) => factory::insert_task(&db.pool, spec).await,
            Conn::Sqlite(db) => {
                let at = |n: usize| time_expr(Backend::Sqlite, n);
                let sql = format!(
                    "INSERT INTO tasks (task_type, status, payload, attempt, max_attempts, \
                         lease_owner, lease_epoch, lease_until, heartbeat_at, priority, \
                         available_at, deadline_at, timeout_ms, idempotency_key, result, \
                         last_error, started_at, finished_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, {}, ({SQLITE_NOW_US} - \
                         CAST(round($9 * 1000000.0) AS INTEGER)), $10, {}, {}, $13, $14, $15, \
                         $16, CASE WHEN $4 > 0 THEN {SQLITE_NOW_US} END, \
                         CASE WHEN $17 THEN {SQLITE_NOW_US} END) \
                     RETURNING id",
                    at(8),
                    at(11),
                    at(12),
                );
                let id: i64 = sqlx::query_scalar(AssertSqlSafe(sql))
                    .bind(&spec.task_type)
                    .bind(spec.status)
                    .bind(spec.payload.to_string())
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
                    .bind(spec.result.as_ref().map(Value::to_string))
                    .bind(spec.last_error.as_ref().map(Value::to_string))
                    .bind(spec.finished)
                    .fetch_one(db.pool())
                    .await
                    .with_context(|| {
                        format!(
                            "inserting a {} task of type {}",
                            spec.status, spec.task_type
                        )
                    })?;
                Ok(id)
            }
        }
    }

    /// Inserts `n` queued tasks of `task_type` (payload `{}`) at `priority`, due
    /// `available_in_secs` from now, in one statement.
    pub async fn insert_queued_bulk(
        &self,
        task_type: &str,
        n: i64,
        priority: i64,
        available_in_secs: f64,
    ) -> anyhow::Result<u64> {
        let backend = self.backend();
        let sql = match backend {
            Backend::Postgres => format!(
                "INSERT INTO tasks (task_type, payload, priority, available_at) \
                 SELECT $1, '{{}}', $2, {} FROM generate_series(1, $4)",
                time_expr(backend, 3)
            ),
            Backend::Sqlite => format!(
                "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < $4) \
                 INSERT INTO tasks (task_type, payload, priority, available_at) \
                 SELECT $1, '{{}}', $2, {} FROM g",
                time_expr(backend, 3)
            ),
        };
        let args = [
            Arg::Text(task_type.to_string()),
            Arg::Int(priority),
            Arg::Real(available_in_secs),
            Arg::Int(n),
        ];
        let inserted = self.execute(Sql::owned(sql), &args).await?;
        if inserted != u64::try_from(n).unwrap_or(0) {
            bail!("inserting {n} tasks of {task_type}: {inserted} inserted");
        }
        Ok(inserted)
    }

    /// Simulates lease expiry without sleeping: `lease_until = now - secs_ago` and
    /// `heartbeat_at = now - secs_ago - 30 s` for task `id`.
    pub async fn backdate_lease(&self, id: i64, secs_ago: f64) -> anyhow::Result<()> {
        match &self.conn {
            Conn::Pg(db) => factory::backdate_lease(&db.pool, id, secs_ago).await,
            Conn::Sqlite(_) => self
                .update_task(
                    id,
                    &[
                        ("lease_until", Val::At(-secs_ago)),
                        ("heartbeat_at", Val::At(-secs_ago - 30.0)),
                    ],
                )
                .await
                .with_context(|| format!("backdating the lease of task {id}")),
        }
    }

    /// Inserts an attempt row of task `id` that started now.
    pub async fn insert_attempt(
        &self,
        id: i64,
        epoch: i64,
        attempt: i64,
        agent: &str,
        outcome: &str,
    ) -> anyhow::Result<()> {
        let (sql, args) = attempt_insert(id, epoch, attempt, agent, outcome);
        self.execute(sql, &args).await.map(drop)
    }

    /// Opens a write transaction on a connection of its own, to hold what the store needs
    /// while a test races it, or to stand for an application's own transaction
    /// ([`WriteTx::enqueue`], [`WriteTx::audit_write`]): on SQLite `BEGIN IMMEDIATE` (the
    /// database's one write lock, at once); on PostgreSQL a READ COMMITTED transaction whose
    /// writes (and [`WriteTx::lock_tasks`]) take row locks.
    pub async fn begin_write(&self) -> anyhow::Result<WriteTx> {
        match &self.conn {
            Conn::Pg(db) => Ok(WriteTx::Pg(
                db.pool
                    .begin_with("BEGIN ISOLATION LEVEL READ COMMITTED")
                    .await
                    .context("beginning a PostgreSQL transaction")?,
            )),
            Conn::Sqlite(db) => Ok(WriteTx::Sqlite(
                db.pool()
                    .begin_with("BEGIN IMMEDIATE")
                    .await
                    .context("taking the SQLite write lock")?,
            )),
        }
    }
}

/// A write transaction held open by a test ([`StoreDb::begin_write`]). Dropped without
/// [`WriteTx::commit`], it rolls back.
#[derive(Debug)]
pub enum WriteTx {
    Pg(Transaction<'static, Postgres>),
    Sqlite(Transaction<'static, Sqlite>),
}

impl WriteTx {
    fn backend(&self) -> Backend {
        match self {
            WriteTx::Pg(_) => Backend::Postgres,
            WriteTx::Sqlite(_) => Backend::Sqlite,
        }
    }

    /// Locks the rows of tasks `ids` against other writers until the end of the transaction
    /// (PostgreSQL: `SELECT … FOR UPDATE`; SQLite: the write lock already covers them).
    pub async fn lock_tasks(&mut self, ids: &[i64]) -> anyhow::Result<()> {
        match self {
            WriteTx::Pg(tx) => {
                let locked = sqlx::query("SELECT id FROM tasks WHERE id = ANY($1) FOR UPDATE")
                    .bind(ids.to_vec())
                    .fetch_all(&mut **tx)
                    .await
                    .context("locking task rows")?;
                if locked.len() != ids.len() {
                    bail!("locking tasks {ids:?}: {} rows found", locked.len());
                }
                Ok(())
            }
            WriteTx::Sqlite(_) => Ok(()),
        }
    }

    /// Runs one statement in the transaction; returns the rows it changed.
    pub async fn execute(&mut self, sql: impl Into<Sql>, args: &[Arg]) -> anyhow::Result<u64> {
        let text = sql.into().text(self.backend());
        let done = match self {
            WriteTx::Pg(tx) => bind_pg(sqlx::query(AssertSqlSafe(text.clone())), args)
                .execute(&mut **tx)
                .await
                .map(|r| r.rows_affected()),
            WriteTx::Sqlite(tx) => bind_sqlite(sqlx::query(AssertSqlSafe(text.clone())), args)
                .execute(&mut **tx)
                .await
                .map(|r| r.rows_affected()),
        };
        done.with_context(|| format!("running {text:.200}"))
    }

    /// Sets columns of `rows` in the transaction; returns how many rows changed.
    pub async fn update(&mut self, rows: Rows<'_>, set: &[(&str, Val)]) -> anyhow::Result<u64> {
        let (sql, args) = update_sql(self.backend(), rows, set)?;
        self.execute(Sql::owned(sql), &args).await
    }

    /// Inserts an attempt row of task `id` that started and ended now.
    pub async fn insert_attempt(
        &mut self,
        id: i64,
        epoch: i64,
        attempt: i64,
        agent: &str,
        outcome: &str,
    ) -> anyhow::Result<()> {
        let (sql, args) = attempt_insert(id, epoch, attempt, agent, outcome);
        self.execute(sql, &args).await.map(drop)
    }

    /// Enqueues `task` in the transaction, as an application enqueues alongside its own
    /// writes: PostgreSQL `postgres::enqueue::task_enqueue`, SQLite `sqlite::task_enqueue_on`.
    /// The task exists only if the transaction commits.
    pub async fn enqueue(
        &mut self,
        task: &NewTask,
        limits: &InputLimits,
    ) -> leasehold_shared::store::Result<Enqueued> {
        match self {
            WriteTx::Pg(tx) => postgres::enqueue::task_enqueue(&mut **tx, task, limits).await,
            WriteTx::Sqlite(tx) => sqlite::task_enqueue_on(tx, task, limits).await,
        }
    }

    /// Writes the audit row `entry` in the transaction: PostgreSQL
    /// `postgres::operator::audit_write`, SQLite `sqlite::audit_write_on`. The row exists only
    /// if the transaction commits.
    pub async fn audit_write(&mut self, entry: &AuditEntry) -> leasehold_shared::store::Result<()> {
        match self {
            WriteTx::Pg(tx) => postgres::operator::audit_write(&mut **tx, entry).await,
            WriteTx::Sqlite(tx) => sqlite::audit_write_on(tx, entry).await,
        }
    }

    /// Fences the transaction's writes by resource lease `name` held by `holder` with
    /// `token`, as an application does: PostgreSQL `postgres::resource_fence`, SQLite
    /// `sqlite::resource_fence` (this transaction is `BEGIN IMMEDIATE` there).
    pub async fn resource_fence(
        &mut self,
        name: &str,
        holder: &str,
        token: i64,
    ) -> leasehold_shared::store::Result<HolderWrite> {
        match self {
            WriteTx::Pg(tx) => postgres::resource_fence(tx, name, holder, token).await,
            WriteTx::Sqlite(tx) => sqlite::resource_fence(tx, name, holder, token).await,
        }
    }

    /// Commits.
    pub async fn commit(self) -> anyhow::Result<()> {
        match self {
            WriteTx::Pg(tx) => tx.commit().await.context("committing"),
            WriteTx::Sqlite(tx) => tx.commit().await.context("committing"),
        }
    }

    /// Rolls back.
    pub async fn rollback(self) -> anyhow::Result<()> {
        match self {
            WriteTx::Pg(tx) => tx.rollback().await.context("rolling back"),
            WriteTx::Sqlite(tx) => tx.rollback().await.context("rolling back"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn updates_are_built_for_each_dialect() {
        let (pg, args) = update_sql(
            Backend::Postgres,
            Rows::Tasks(&[1, 2]),
            &[("status", Val::from("queued")), ("lease_until", Val::Null)],
        )
        .unwrap();
        assert_eq!(
            pg,
            "UPDATE tasks SET status = $1, lease_until = NULL WHERE id = ANY($2)"
        );
        assert_eq!(args, [Arg::from("queued"), Arg::Ints(vec![1, 2])]);
        let (lite, _) = update_sql(
            Backend::Sqlite,
            Rows::Leader,
            &[("lease_until", Val::At(-1.0))],
        )
        .unwrap();
        assert_eq!(
            lite,
            format!(
                "UPDATE leader SET lease_until = ({SQLITE_NOW_US} + \
                 CAST(round($1 * 1000000.0) AS INTEGER))"
            )
        );
        assert!(update_sql(Backend::Sqlite, Rows::AllTasks, &[("x; DROP", Val::Null)]).is_err());
        assert!(update_sql(Backend::Sqlite, Rows::AllTasks, &[]).is_err());
    }
}
