//! What the operator-action tests (`cli_actions_*.rs`, DESIGN §9) share: one agent with the
//! `leasehold` CLI aimed at it ([`Fixture`]), the checks every command's output must pass
//! (exit code, one `leasehold: …` line on a refusal, inert lines, 80 columns), and the rows an
//! action may change ([`digest`]) and the audit rows it leaves ([`audit`], [`local`]).

use std::time::Duration;

use anyhow::Context;
use serde_json::Value;
use sqlx::PgPool;

use crate::agent::AgentHandle;
use crate::cli::{Cli, CliOutput};
use crate::db::TestDb;
use crate::fleet::spawn_registered;
use crate::grpc::agent_address;
use crate::inspect::{audit_rows, task_status};
use crate::wait::wait_until;

/// Generous: the machines are shared and noisy.
pub const WAIT: Duration = Duration::from_secs(60);
/// Widest table line `--output table` may print.
pub const WIDTH: usize = 80;

/// An audit row as [`audit_rows`] reads it: actor, role, action, target, result.
pub type AuditRow = (String, String, String, String, String);

/// An audit row.
pub fn audit(actor: &str, role: &str, action: &str, target: &str, result: &str) -> AuditRow {
    (
        actor.into(),
        role.into(),
        action.into(),
        target.into(),
        result.into(),
    )
}

/// An audit row of the test's own user, token-less: the CLI reaches the agent through its
/// Unix socket, where the agent names the caller by uid (`uid:0(root)`). When the uid cannot
/// be read the actor says why, so the comparison with the real row fails showing it.
pub fn local(action: &str, target: &str, result: &str) -> AuditRow {
    let actor = match leasehold_shared::local::current_uid() {
        Ok(uid) => leasehold_shared::local::uid_label(uid),
        Err(e) => format!("uid:? (cannot read the test's uid: {e})"),
    };
    audit(&actor, "operator", action, target, result)
}

/// One agent under test and the CLI aimed at it.
pub struct Fixture {
    pub agent: AgentHandle,
    /// Its agent id (lease owner), `name#n`.
    pub id: String,
    pub cli: Cli,
}

/// Spawns `leasehold-agent` as `name` with `handlers` on `db`, waits until it registered and
/// published its address, and aims a CLI at it.
pub async fn start(
    db: &TestDb,
    name: &str,
    handlers: &str,
    extra: &[&str],
) -> anyhow::Result<Fixture> {
    let (agent, id) = spawn_registered(db, name, handlers, extra).await?;
    let addr = agent_address(&db.pool, name, WAIT).await?;
    let cli = Cli::new(&addr).await?;
    Ok(Fixture { agent, id, cli })
}

/// Exit 0, nothing on stderr.
#[track_caller]
pub fn ok(o: &CliOutput) {
    assert_eq!(o.code, Some(0), "{}", o.describe());
    assert_eq!(o.stderr, "", "{}", o.describe());
}

/// Exit `code` with nothing on stdout and one `leasehold: …` line on stderr; returns it.
#[track_caller]
pub fn refused(o: &CliOutput, code: i32) -> String {
    assert_eq!(o.code, Some(code), "{}", o.describe());
    assert_eq!(o.stdout, "", "{}", o.describe());
    let lines: Vec<&str> = o.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one error line: {}", o.describe());
    let line = lines.first().copied().unwrap_or_default();
    assert!(line.starts_with("leasehold: "), "{}", o.describe());
    line.to_string()
}

/// Every line inert: no control character but the line ends (`tasks show` to a pipe is not
/// cut to 80 columns, so a script gets every character; it is still made inert).
#[track_caller]
pub fn inert(o: &CliOutput) {
    for line in o.stdout.lines() {
        assert!(
            !line.chars().any(char::is_control),
            "{line:?}\n{}",
            o.describe()
        );
    }
}

/// Every line at most [`WIDTH`] columns.
#[track_caller]
pub fn fits(o: &CliOutput) {
    for line in o.stdout.lines() {
        assert!(
            line.chars().count() <= WIDTH,
            "a line of {} columns:\n{line}\n{}",
            line.chars().count(),
            o.describe()
        );
    }
}

/// The audit rows after the first `seen`.
pub async fn audit_after(pool: &PgPool, seen: usize) -> anyhow::Result<Vec<AuditRow>> {
    let mut rows = audit_rows(pool).await?;
    Ok(rows.split_off(seen.min(rows.len())))
}

/// How many audit rows there are.
pub async fn audit_len(pool: &PgPool) -> anyhow::Result<usize> {
    Ok(audit_rows(pool).await?.len())
}

/// Every row that an action could change: tasks, attempts, policies, the agents' state and
/// local limits.
pub async fn digest(pool: &PgPool) -> anyhow::Result<String> {
    sqlx::query_scalar(
        "SELECT concat_ws(E'\\n--\\n', \
           (SELECT coalesce(string_agg(to_jsonb(t)::text, E'\\n' ORDER BY id), '') FROM tasks t), \
           (SELECT coalesce(string_agg(to_jsonb(a)::text, E'\\n' ORDER BY task_id, epoch), '') \
              FROM task_attempts a), \
           (SELECT coalesce(string_agg(to_jsonb(p)::text, E'\\n' ORDER BY scope), '') FROM policies p), \
           (SELECT coalesce(string_agg(concat_ws(' ', id, state, local_concurrency), E'\\n' \
              ORDER BY id), '') FROM agents))",
    )
    .fetch_one(pool)
    .await
    .context("digesting the rows an action could change")
}

/// Waits up to [`WAIT`] until task `id` has `status`.
pub async fn wait_status(pool: &PgPool, id: i64, status: &str) -> anyhow::Result<()> {
    wait_until(&format!("task {id} is {status}"), WAIT, || async move {
        Ok(task_status(pool, id).await? == status)
    })
    .await
}

/// Enqueues through the CLI (`--output json`) and returns the new task's id.
pub async fn enqueue(cli: &Cli, task_type: &str, payload: &Value) -> anyhow::Result<i64> {
    let payload = payload.to_string();
    let o = cli
        .run(&[
            "--output",
            "json",
            "enqueue",
            task_type,
            "--payload",
            &payload,
        ])
        .await?;
    ok(&o);
    let j = o.json()?;
    anyhow::ensure!(j["created"] == true, "not created: {}", o.describe());
    j["id"]
        .as_i64()
        .with_context(|| format!("no id: {}", o.describe()))
}

/// Ids of the `tasks` of a `tasks ls` / `dlq ls` JSON page.
pub fn page_ids(page: &Value) -> anyhow::Result<Vec<i64>> {
    page["tasks"]
        .as_array()
        .with_context(|| format!("no tasks in the page {page}"))?
        .iter()
        .map(|t| {
            t["id"]
                .as_i64()
                .with_context(|| format!("a task without id: {t}"))
        })
        .collect()
}

/// `ids`, highest first.
pub fn desc(mut ids: Vec<i64>) -> Vec<i64> {
    ids.sort_unstable_by(|a, b| b.cmp(a));
    ids
}
