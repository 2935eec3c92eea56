//! The ledger: how an end-to-end test proves "nothing lost, nothing done twice"
//! (TESTING.md, "The ledger").
//!
//! A scenario installs two tables in its test database ([`install`]): `test_ledger`, one row
//! per task the test enqueued ([`enqueue`] writes both in one transaction, the payload
//! carrying the `ledger_id`), and `test_executions`, one row per handler execution, written by
//! the test agent's `ledger` handler over its own unfenced connection (started when the
//! execution starts; `finished_at` and `outcome`, `returned` or `stopped`, when it ends).
//!
//! After the final drain, [`check`] reads everything in one snapshot and fails listing every
//! violation of:
//!
//! 1. every ledger task exists, carries its ledger id and is terminal (`succeeded`,
//!    `partially_succeeded`, `cancelled`, `dead`); no task carries a `ledger_id` without a
//!    ledger row;
//! 2. a task that succeeded has exactly one accepted attempt row (`succeeded` /
//!    `partially_succeeded`, matching its status), under its final epoch (`tasks.lease_epoch`)
//!    by its final holder (`tasks.lease_owner`); a task that did not succeed has none;
//! 3. a task's attempt rows, in epoch order, do not overlap in time (each ends no later than
//!    the next starts), none ends before it starts, and none is from an epoch the task never
//!    reached (epochs are unique per task by the table's key, so they strictly increase);
//! 4. every execution is of its ledger task, and its `(task, epoch)` has an attempt row —
//!    or is the current epoch of a task still leased, which after a drain is itself a
//!    violation of 1. Since an epoch has at most one attempt row, an execution at any epoch
//!    but the accepted one is thereby explained by an attempt that ended otherwise (lease
//!    expired, released, failed, cancelled);
//! 5. no epoch of a task was executed more than once (one lease, one execution).
//!
//! Epochs are **not** required to grow by exactly one per claim: lease recovery bumps the
//! epoch to fence the old holder, and the next claim bumps it again.

use std::fmt::Write as _;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use sqlx::{PgPool, Postgres, Transaction};

/// Violations quoted in a failed check; the rest are counted.
pub const SHOWN_VIOLATIONS: usize = 20;
/// Tasks inserted per statement by [`enqueue`].
pub const ENQUEUE_CHUNK: usize = 1000;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS test_ledger (
    ledger_id bigint PRIMARY KEY,
    task_id   bigint NOT NULL UNIQUE
);
CREATE TABLE IF NOT EXISTS test_executions (
    id          bigserial   PRIMARY KEY,
    ledger_id   bigint      NOT NULL,
    task_id     bigint      NOT NULL,
    epoch       bigint      NOT NULL,
    agent       text        NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at timestamptz,
    outcome     text
);
CREATE INDEX IF NOT EXISTS test_executions_task_epoch_idx ON test_executions (task_id, epoch);
";

/// What a clean ledger check found. Counts are over ledger tasks and their rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LedgerReport {
    /// Ledger rows (tasks enqueued through [`enqueue`]).
    pub tasks: u64,
    /// Tasks that ended `succeeded` or `partially_succeeded`.
    pub succeeded: u64,
    /// Tasks that ended `dead`.
    pub dead: u64,
    /// Tasks that ended `cancelled`.
    pub cancelled: u64,
    /// Rows in `test_executions`.
    pub executions: u64,
    /// Executions at an epoch other than their task's accepted one (all executions of a task
    /// that did not succeed): each is explained by an attempt that ended otherwise.
    pub extra_executions: u64,
    /// Attempt rows with outcome `lease_expired` (recoveries).
    pub lease_expired_attempts: u64,
    /// Attempt rows with outcome `released` (graceful give-backs).
    pub released_attempts: u64,
    /// Attempt rows with outcome `failed`.
    pub failed_attempts: u64,
    /// Succeeded tasks with no logged execution at their accepted epoch. Not a violation
    /// (a task type whose handler keeps no log has none), but a scenario whose tasks all run
    /// the `ledger` handler should expect 0.
    pub successes_without_execution: u64,
}

/// Creates `test_ledger` and `test_executions` (if missing).
pub async fn install(pool: &PgPool) -> anyhow::Result<()> {
    sqlx::raw_sql(SCHEMA)
        .execute(pool)
        .await
        .context("installing the ledger tables")?;
    Ok(())
}

/// Enqueues `n` tasks of `task_type` with plain SQL (`INSERT INTO tasks (task_type, payload)`,
/// every other column at its default), each payload being `extra` (an object, or null) with
/// `"ledger_id": k` added, and records them in `test_ledger` in the same transaction. Ledger
/// ids continue after the largest one so far. Returns the task ids in ledger-id order.
pub async fn enqueue(
    pool: &PgPool,
    task_type: &str,
    n: usize,
    extra: Value,
) -> anyhow::Result<Vec<i64>> {
    enqueue_with(pool, task_type, n, extra, &Columns::default()).await
}

/// Columns [`enqueue_with`] sets on the new tasks (`None`: the column's default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Columns {
    /// `tasks.max_attempts`.
    pub max_attempts: Option<i32>,
    /// `tasks.timeout_ms`: the longest one attempt may run.
    pub timeout_ms: Option<i64>,
    /// `tasks.deadline_at`, this many milliseconds after the enqueue (database time).
    pub deadline_in_ms: Option<i64>,
}

/// [`enqueue`], with `columns` set in the same transaction: no agent ever sees the tasks
/// without them.
pub async fn enqueue_with(
    pool: &PgPool,
    task_type: &str,
    n: usize,
    extra: Value,
    columns: &Columns,
) -> anyhow::Result<Vec<i64>> {
    let extra = match extra {
        Value::Null => json!({}),
        Value::Object(_) => extra,
        other => bail!("the extra payload must be a JSON object, not {other}"),
    };
    let mut tx = pool.begin().await.context("starting the enqueue")?;
    // Serialises concurrent enqueues, so max + 1 stays unique.
    sqlx::query("LOCK TABLE test_ledger IN SHARE ROW EXCLUSIVE MODE")
        .execute(&mut *tx)
        .await
        .context("locking test_ledger (is the ledger installed?)")?;
    let start: i64 = sqlx::query_scalar("SELECT coalesce(max(ledger_id), 0) + 1 FROM test_ledger")
        .fetch_one(&mut *tx)
        .await
        .context("reading the largest ledger id")?;
    let mut task_ids = Vec::with_capacity(n);
    let mut done = 0usize;
    while done < n {
        let len = ENQUEUE_CHUNK.min(n - done);
        let first = start + i64::try_from(done)?;
        let last = first + i64::try_from(len)? - 1;
        let mut rows: Vec<(i64, i64)> = sqlx::query_as(
            "WITH ins AS ( \
                 INSERT INTO tasks (task_type, payload) \
                 SELECT $1, $2::jsonb || jsonb_build_object('ledger_id', k) \
                 FROM generate_series($3::bigint, $4::bigint) AS k ORDER BY k \
                 RETURNING id, (payload ->> 'ledger_id')::bigint AS ledger_id) \
             INSERT INTO test_ledger (ledger_id, task_id) SELECT ledger_id, id FROM ins \
             RETURNING ledger_id, task_id",
        )
        .bind(task_type)
        .bind(&extra)
        .bind(first)
        .bind(last)
        .fetch_all(&mut *tx)
        .await
        .with_context(|| format!("enqueueing ledger ids {first}..={last} as {task_type}"))?;
        if rows.len() != len {
            bail!(
                "enqueueing ledger ids {first}..={last} inserted {} rows",
                rows.len()
            );
        }
        rows.sort_unstable();
        task_ids.extend(rows.into_iter().map(|(_, task_id)| task_id));
        done += len;
    }
    if *columns != Columns::default() {
        sqlx::query(
            "UPDATE tasks SET max_attempts = coalesce($2, max_attempts), \
                              timeout_ms = coalesce($3, timeout_ms), \
                              deadline_at = coalesce(now() + $4::bigint * interval '1 millisecond', deadline_at) \
             WHERE id = ANY($1)",
        )
        .bind(&task_ids)
        .bind(columns.max_attempts)
        .bind(columns.timeout_ms)
        .bind(columns.deadline_in_ms)
        .execute(&mut *tx)
        .await
        .with_context(|| format!("setting {columns:?} on the new {task_type} tasks"))?;
    }
    tx.commit().await.context("committing the enqueue")?;
    Ok(task_ids)
}

/// Copies the execution log (`test_executions`) of `from` into `to`'s: for a scenario whose
/// handlers log to a database that outlives the one under test (a crashed or promoted server),
/// so that [`check`] on `to` sees every execution. Returns the rows copied.
pub async fn copy_executions(from: &PgPool, to: &PgPool) -> anyhow::Result<usize> {
    type Row = (
        i64,
        i64,
        i64,
        String,
        chrono::DateTime<chrono::Utc>,
        Option<chrono::DateTime<chrono::Utc>>,
        Option<String>,
    );
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT ledger_id, task_id, epoch, agent, started_at, finished_at, outcome \
         FROM test_executions ORDER BY id",
    )
    .fetch_all(from)
    .await
    .context("reading the execution log")?;
    for (ledger_id, task_id, epoch, agent, started_at, finished_at, outcome) in &rows {
        sqlx::query(
            "INSERT INTO test_executions \
                 (ledger_id, task_id, epoch, agent, started_at, finished_at, outcome) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(ledger_id)
        .bind(task_id)
        .bind(epoch)
        .bind(agent)
        .bind(started_at)
        .bind(finished_at)
        .bind(outcome)
        .execute(to)
        .await
        .context("copying the execution log")?;
    }
    Ok(rows.len())
}

/// Checks the ledger (see the module documentation) in one consistent snapshot. Fails with
/// every violation counted and the first [`SHOWN_VIOLATIONS`] quoted.
pub async fn check(pool: &PgPool) -> anyhow::Result<LedgerReport> {
    let mut tx = snapshot(pool).await?;
    let mut violations = Vec::new();
    for (what, sql) in VIOLATION_QUERIES {
        let found: Vec<String> = sqlx::query_scalar(sql)
            .fetch_all(&mut *tx)
            .await
            .with_context(|| format!("checking that {what}"))?;
        violations.extend(found);
    }
    let report = report(&mut tx).await?;
    let _ = tx.rollback().await;
    if !violations.is_empty() {
        bail!("{}", describe(&violations, &report));
    }
    Ok(report)
}

/// [`check`], and every ledger task succeeded (`succeeded` or `partially_succeeded`).
pub async fn expect_all_succeeded(pool: &PgPool) -> anyhow::Result<LedgerReport> {
    let report = check(pool).await?;
    if report.succeeded != report.tasks {
        let others: Vec<String> = sqlx::query_scalar(
            "SELECT format('ledger id %s: task %s ended %s (last error %s)', \
                           l.ledger_id, t.id, t.status, coalesce(t.last_error::text, 'none')) \
             FROM test_ledger l JOIN tasks t ON t.id = l.task_id \
             WHERE t.status NOT IN ('succeeded', 'partially_succeeded') \
             ORDER BY l.ledger_id",
        )
        .fetch_all(pool)
        .await
        .context("listing the ledger tasks that did not succeed")?;
        bail!(
            "{} of {} ledger tasks did not succeed:\n{}\n{report:?}",
            report.tasks - report.succeeded,
            report.tasks,
            quote(&others)
        );
    }
    Ok(report)
}

/// A read-only transaction on one snapshot.
async fn snapshot(pool: &PgPool) -> anyhow::Result<Transaction<'static, Postgres>> {
    let mut tx = pool.begin().await.context("starting the ledger check")?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .execute(&mut *tx)
        .await
        .context("taking a snapshot for the ledger check")?;
    let installed: bool = sqlx::query_scalar(
        "SELECT to_regclass('test_ledger') IS NOT NULL AND to_regclass('test_executions') IS NOT NULL",
    )
    .fetch_one(&mut *tx)
    .await
    .context("looking for the ledger tables")?;
    if !installed {
        bail!("the ledger tables are missing: call ledger::install first");
    }
    Ok(tx)
}

/// Each query returns one line per violation.
const VIOLATION_QUERIES: [(&str, &str); 7] = [
    (
        "every ledger task exists, carries its ledger id and is terminal",
        "SELECT CASE \
             WHEN t.id IS NULL THEN format('ledger id %s: task %s does not exist', l.ledger_id, l.task_id) \
             WHEN t.payload -> 'ledger_id' IS DISTINCT FROM to_jsonb(l.ledger_id) \
                 THEN format('ledger id %s: task %s carries ledger id %s', l.ledger_id, t.id, \
                             coalesce(t.payload -> 'ledger_id', 'null'::jsonb)) \
             ELSE format('ledger id %s: task %s is %s, not terminal (epoch %s, owner %s)', \
                         l.ledger_id, t.id, t.status, t.lease_epoch, coalesce(t.lease_owner, 'none')) \
         END \
         FROM test_ledger l LEFT JOIN tasks t ON t.id = l.task_id \
         WHERE t.id IS NULL \
            OR t.status NOT IN ('succeeded', 'partially_succeeded', 'cancelled', 'dead') \
            OR t.payload -> 'ledger_id' IS DISTINCT FROM to_jsonb(l.ledger_id) \
         ORDER BY l.ledger_id",
    ),
    (
        "no task carries a ledger id without a ledger row",
        "SELECT format('task %s (%s, %s) carries ledger id %s but has no ledger row', \
                       t.id, t.task_type, t.status, t.payload -> 'ledger_id') \
         FROM tasks t \
         WHERE jsonb_typeof(t.payload) = 'object' AND t.payload ? 'ledger_id' \
           AND NOT EXISTS (SELECT 1 FROM test_ledger l WHERE l.task_id = t.id) \
         ORDER BY t.id",
    ),
    (
        "exactly one accepted completion per succeeded task, by its final epoch and holder",
        "WITH acc AS ( \
             SELECT a.task_id, count(*) AS n, min(a.epoch) AS epoch, min(a.agent) AS agent, \
                    min(a.outcome) AS outcome, \
                    string_agg(format('%s by %s', a.epoch, a.agent), ', ' ORDER BY a.epoch) AS list \
             FROM task_attempts a JOIN test_ledger l ON l.task_id = a.task_id \
             WHERE a.outcome IN ('succeeded', 'partially_succeeded') \
             GROUP BY a.task_id \
         ), v AS ( \
             SELECT l.ledger_id, CASE \
                 WHEN t.status IN ('succeeded', 'partially_succeeded') AND acc.n IS NULL \
                     THEN format('task %s is %s but has no accepted attempt row', t.id, t.status) \
                 WHEN acc.n > 1 \
                     THEN format('task %s has %s accepted completions (epochs %s)', t.id, acc.n, acc.list) \
                 WHEN acc.n IS NOT NULL AND t.status NOT IN ('succeeded', 'partially_succeeded') \
                     THEN format('task %s is %s but epoch %s was accepted as %s', t.id, t.status, acc.list, acc.outcome) \
                 WHEN acc.outcome <> t.status \
                     THEN format('task %s is %s but its accepted attempt says %s', t.id, t.status, acc.outcome) \
                 WHEN acc.epoch <> t.lease_epoch \
                     THEN format('task %s was completed by stale epoch %s (the task is at epoch %s)', \
                                 t.id, acc.epoch, t.lease_epoch) \
                 WHEN acc.n IS NOT NULL AND acc.agent IS DISTINCT FROM t.lease_owner \
                     THEN format('task %s was completed at epoch %s by %s, but its final holder is %s', \
                                 t.id, acc.epoch, acc.agent, coalesce(t.lease_owner, 'none')) \
             END AS line \
             FROM test_ledger l JOIN tasks t ON t.id = l.task_id LEFT JOIN acc ON acc.task_id = t.id \
         ) \
         SELECT line FROM v WHERE line IS NOT NULL ORDER BY ledger_id",
    ),
    (
        "attempts of a task do not overlap in time and stay within its epochs",
        "WITH a AS ( \
             SELECT a.task_id, a.epoch, a.agent, a.outcome, a.started_at, a.finished_at, \
                    t.lease_epoch, \
                    lead(a.epoch) OVER w AS next_epoch, lead(a.started_at) OVER w AS next_started \
             FROM task_attempts a \
             JOIN test_ledger l ON l.task_id = a.task_id \
             JOIN tasks t ON t.id = a.task_id \
             WINDOW w AS (PARTITION BY a.task_id ORDER BY a.epoch) \
         ) \
         SELECT line FROM ( \
             SELECT task_id, epoch, format('task %s: attempt at epoch %s (%s, %s) ended at %s, after epoch %s started at %s', \
                                           task_id, epoch, agent, outcome, finished_at, next_epoch, next_started) AS line \
             FROM a WHERE next_started < finished_at \
             UNION ALL \
             SELECT task_id, epoch, format('task %s: attempt at epoch %s (%s, %s) ended at %s, before it started at %s', \
                                           task_id, epoch, agent, outcome, finished_at, started_at) \
             FROM a WHERE finished_at < started_at \
             UNION ALL \
             SELECT task_id, epoch, format('task %s: attempt at epoch %s (%s, %s) is outside the epochs 1..%s the task reached', \
                                           task_id, epoch, agent, outcome, lease_epoch) \
             FROM a WHERE epoch < 1 OR epoch > lease_epoch \
         ) x ORDER BY task_id, epoch",
    ),
    (
        "every execution is of its ledger task",
        "SELECT format('execution %s (ledger id %s, task %s, epoch %s, %s) matches no ledger row', \
                       e.id, e.ledger_id, e.task_id, e.epoch, e.agent) \
         FROM test_executions e \
         WHERE NOT EXISTS (SELECT 1 FROM test_ledger l WHERE l.ledger_id = e.ledger_id AND l.task_id = e.task_id) \
         ORDER BY e.id",
    ),
    (
        "every execution's epoch ended with an attempt row",
        "SELECT format('execution %s of task %s (ledger id %s) at epoch %s by %s (%s) has no attempt row; \
                        the task is %s at epoch %s', \
                       e.id, e.task_id, e.ledger_id, e.epoch, e.agent, coalesce(e.outcome, 'unfinished'), \
                       coalesce(t.status, 'missing'), t.lease_epoch) \
         FROM test_executions e \
         LEFT JOIN task_attempts a ON a.task_id = e.task_id AND a.epoch = e.epoch \
         LEFT JOIN tasks t ON t.id = e.task_id \
         WHERE a.task_id IS NULL \
           AND NOT (t.status IN ('running', 'cancel_requested') AND t.lease_epoch = e.epoch) \
         ORDER BY e.id",
    ),
    (
        "no epoch was executed twice",
        "SELECT format('task %s: epoch %s was executed %s times (executions %s)', \
                       task_id, epoch, count(*), string_agg(format('%s by %s', id, agent), ', ' ORDER BY id)) \
         FROM test_executions \
         GROUP BY task_id, epoch HAVING count(*) > 1 \
         ORDER BY task_id, epoch",
    ),
];

async fn report(tx: &mut Transaction<'static, Postgres>) -> anyhow::Result<LedgerReport> {
    let sql = "WITH lt AS (SELECT t.* FROM test_ledger l JOIN tasks t ON t.id = l.task_id), \
              acc AS ( \
                  SELECT a.task_id, a.epoch FROM task_attempts a JOIN test_ledger l ON l.task_id = a.task_id \
                  WHERE a.outcome IN ('succeeded', 'partially_succeeded')), \
              att AS (SELECT a.* FROM task_attempts a JOIN test_ledger l ON l.task_id = a.task_id) \
         SELECT \
             (SELECT count(*) FROM test_ledger), \
             (SELECT count(*) FROM lt WHERE status IN ('succeeded', 'partially_succeeded')), \
             (SELECT count(*) FROM lt WHERE status = 'dead'), \
             (SELECT count(*) FROM lt WHERE status = 'cancelled'), \
             (SELECT count(*) FROM test_executions), \
             (SELECT count(*) FROM test_executions e \
                 WHERE NOT EXISTS (SELECT 1 FROM acc WHERE acc.task_id = e.task_id AND acc.epoch = e.epoch)), \
             (SELECT count(*) FROM att WHERE outcome = 'lease_expired'), \
             (SELECT count(*) FROM att WHERE outcome = 'released'), \
             (SELECT count(*) FROM att WHERE outcome = 'failed'), \
             (SELECT count(*) FROM lt WHERE status IN ('succeeded', 'partially_succeeded') \
                 AND NOT EXISTS (SELECT 1 FROM test_executions e \
                                 WHERE e.task_id = lt.id AND e.epoch = lt.lease_epoch))";
    let row: (i64, i64, i64, i64, i64, i64, i64, i64, i64, i64) = sqlx::query_as(sql)
        .fetch_one(&mut **tx)
        .await
        .context("counting the ledger")?;
    let n = |v: i64| u64::try_from(v).context("negative count");
    Ok(LedgerReport {
        tasks: n(row.0)?,
        succeeded: n(row.1)?,
        dead: n(row.2)?,
        cancelled: n(row.3)?,
        executions: n(row.4)?,
        extra_executions: n(row.5)?,
        lease_expired_attempts: n(row.6)?,
        released_attempts: n(row.7)?,
        failed_attempts: n(row.8)?,
        successes_without_execution: n(row.9)?,
    })
}

fn describe(violations: &[String], report: &LedgerReport) -> String {
    let mut text = format!(
        "ledger check failed: {} violation{}",
        violations.len(),
        if violations.len() == 1 { "" } else { "s" }
    );
    if violations.len() > SHOWN_VIOLATIONS {
        let _ = write!(text, " (first {SHOWN_VIOLATIONS} shown)");
    }
    let _ = write!(text, ":\n{}\n{report:?}", quote(violations));
    text
}

/// The first [`SHOWN_VIOLATIONS`] lines as a list, and how many more there are.
fn quote(lines: &[String]) -> String {
    let mut text = String::new();
    for line in lines.iter().take(SHOWN_VIOLATIONS) {
        let _ = writeln!(text, "  - {line}");
    }
    if lines.len() > SHOWN_VIOLATIONS {
        let _ = writeln!(text, "  … and {} more", lines.len() - SHOWN_VIOLATIONS);
    }
    text.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lists_are_cut() {
        let lines: Vec<String> = (0..25).map(|i| format!("v{i}")).collect();
        let text = describe(&lines, &LedgerReport::default());
        assert!(text.starts_with("ledger check failed: 25 violations (first 20 shown)"));
        assert!(text.contains("  - v19\n"));
        assert!(!text.contains("v20"));
        assert!(text.contains("… and 5 more"));
    }
}
