#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Every operator action end to end through the `leasehold` binary (DESIGN §9): a real agent,
//! a real database, the command run as a process with `--agent ADDR`. Each test checks the
//! exit code, stdout (the table and `--output json`), then the rows in `tasks`, `policies`,
//! `agents` and `task_attempts`, and the `audit_log` rows the calls left — actor, role, action,
//! target and result of every one, and nothing else.
//!
//! T27 (two operators issuing conflicting actions, viewers denied) is the last test: two CLI
//! processes race cancel against requeue, pause against resume and two concurrency limits; the
//! audit log is replayed through the state machine and must agree with every answer and with
//! the final rows.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use leasehold_tests::cli::{Cli, CliOutput};
use leasehold_tests::fleet::spawn_agent;
use leasehold_tests::grpc::agent_address;
use leasehold_tests::inspect::counted_audit_rows;
use leasehold_tests::{
    AgentHandle, TaskSpec, TestDb, attempt_rows, audit_rows, count, insert_task, scratch_dir,
    task_row, task_status, wait_until,
};
use serde_json::{Value, json};
use sqlx::PgPool;
use tokio::io::AsyncBufReadExt;

/// Generous: the machines are shared and noisy.
const WAIT: Duration = Duration::from_secs(60);
/// Widest table line `--output table` may print.
const WIDTH: usize = 80;

type AuditRow = (String, String, String, String, String);

fn audit(actor: &str, role: &str, action: &str, target: &str, result: &str) -> AuditRow {
    (
        actor.into(),
        role.into(),
        action.into(),
        target.into(),
        result.into(),
    )
}

/// An audit row of this test's own user, token-less: the CLI reaches the agent through its
/// Unix socket, where the agent names the caller by uid (`uid:0(root)`).
fn local(action: &str, target: &str, result: &str) -> AuditRow {
    let uid = leasehold_shared::local::current_uid().unwrap();
    let actor = leasehold_shared::local::uid_label(uid);
    audit(&actor, "operator", action, target, result)
}

/// One agent under test and the CLI aimed at it.
struct Fixture {
    agent: AgentHandle,
    /// Its agent id (lease owner), `name#n`.
    id: String,
    cli: Cli,
}

async fn start(db: &TestDb, name: &str, handlers: &str, extra: &[&str]) -> Fixture {
    let agent = spawn_agent(
        "leasehold-agent",
        &db.url,
        name,
        handlers,
        extra,
        Vec::new(),
    )
    .await
    .unwrap();
    let id = agent.wait_registered(&db.pool, name, WAIT).await.unwrap();
    let addr = agent_address(&db.pool, name, WAIT).await.unwrap();
    let cli = Cli::new(&addr).await.unwrap();
    Fixture { agent, id, cli }
}

/// Exit 0, nothing on stderr.
fn ok(o: &CliOutput) {
    assert_eq!(o.code, Some(0), "{}", o.describe());
    assert_eq!(o.stderr, "", "{}", o.describe());
}

/// Exit `code` with nothing on stdout and one `leasehold: …` line on stderr; returns it.
fn refused(o: &CliOutput, code: i32) -> String {
    assert_eq!(o.code, Some(code), "{}", o.describe());
    assert_eq!(o.stdout, "", "{}", o.describe());
    let lines: Vec<&str> = o.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one error line: {}", o.describe());
    assert!(lines[0].starts_with("leasehold: "), "{}", o.describe());
    lines[0].to_string()
}

/// Every line inert: no control character but the line ends (`tasks show` to a pipe is not
/// cut to 80 columns, so a script gets every character; it is still made inert).
fn inert(o: &CliOutput) {
    for line in o.stdout.lines() {
        assert!(
            !line.chars().any(char::is_control),
            "{line:?}\n{}",
            o.describe()
        );
    }
}

/// Every line at most 80 columns.
fn fits(o: &CliOutput) {
    for line in o.stdout.lines() {
        assert!(
            line.chars().count() <= WIDTH,
            "a line of {} columns:\n{line}\n{}",
            line.chars().count(),
            o.describe()
        );
    }
}

async fn audit_after(pool: &PgPool, seen: usize) -> Vec<AuditRow> {
    audit_rows(pool).await.unwrap().split_off(seen)
}

async fn audit_len(pool: &PgPool) -> usize {
    audit_rows(pool).await.unwrap().len()
}

/// Every row that an action could change: tasks, attempts, policies, the agents' state and
/// local limits.
async fn digest(pool: &PgPool) -> String {
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
    .unwrap()
}

/// `(max_concurrency, paused)` of a policy row, `None` when there is no row.
async fn policy(pool: &PgPool, scope: &str) -> Option<(Option<i32>, bool)> {
    leasehold_tests::inspect::policy_row(pool, scope)
        .await
        .unwrap()
}

async fn wait_status(pool: &PgPool, id: i64, status: &str) {
    wait_until(&format!("task {id} is {status}"), WAIT, || async move {
        Ok(task_status(pool, id).await? == status)
    })
    .await
    .unwrap();
}

/// Enqueues through the CLI (`--output json`) and returns the new task's id.
async fn enqueue(cli: &Cli, task_type: &str, payload: &Value) -> i64 {
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
        .await
        .unwrap();
    ok(&o);
    let j = o.json().unwrap();
    assert_eq!(j["created"], true, "{}", o.describe());
    j["id"].as_i64().unwrap()
}

/// Ids of the `tasks` of a `tasks ls` / `dlq ls` JSON page.
fn page_ids(page: &Value) -> Vec<i64> {
    page["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_i64().unwrap())
        .collect()
}

fn desc(mut ids: Vec<i64>) -> Vec<i64> {
    ids.sort_unstable_by(|a, b| b.cmp(a));
    ids
}

// -------------------------------------------------------------------------------------------
// enqueue
// -------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_stores_one_task_per_idempotency_key_and_refuses_bad_input() {
    let db = TestDb::new().await.unwrap();
    let f = start(&db, "enq", "noop", &[]).await;
    let payload = json!({"month": "2026-11", "pages": [1, 2, 3]});

    // A type no agent serves, so the row stays as enqueued.
    let o = f
        .cli
        .run(&[
            "enqueue",
            "report.build",
            "--payload",
            &payload.to_string(),
            "--priority",
            "7",
            "--idempotency-key",
            "report-2026-11",
        ])
        .await
        .unwrap();
    ok(&o);
    let id: i64 = o
        .stdout
        .strip_prefix("enqueued task ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{}", o.describe()));
    assert_eq!(
        o.stdout,
        format!("enqueued task {id} (type report.build, priority 7)\n")
    );
    let row = task_row(&db.pool, id).await.unwrap();
    assert_eq!(row["status"], "queued");
    assert_eq!(row["task_type"], "report.build");
    assert_eq!(row["payload"], payload);
    assert_eq!(row["priority"], 7);
    assert_eq!(row["idempotency_key"], "report-2026-11");

    // The same key again, with another payload: the existing task, unchanged, created false.
    let o = f
        .cli
        .run(&[
            "--output",
            "json",
            "enqueue",
            "report.build",
            "--payload",
            r#"{"month": "other"}"#,
            "--idempotency-key",
            "report-2026-11",
        ])
        .await
        .unwrap();
    ok(&o);
    let j = o.json().unwrap();
    assert_eq!(j["id"], id, "{}", o.describe());
    assert_eq!(j["created"], false);
    assert_eq!(j["status"], "queued");
    assert_eq!(j["payload"], payload);
    assert_eq!(j["priority"], 7);
    assert_eq!(j["idempotency_key"], "report-2026-11");
    let o = f
        .cli
        .run(&[
            "enqueue",
            "report.build",
            "--idempotency-key",
            "report-2026-11",
        ])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(
        o.stdout,
        format!("task {id} already exists (idempotency key report-2026-11)\n")
    );
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM tasks").await.unwrap(),
        1
    );
    assert_eq!(task_row(&db.pool, id).await.unwrap(), row);

    // A new task in JSON: the task as stored, with its id; the agent then runs it.
    let o = f
        .cli
        .run(&["--output", "json", "enqueue", "noop"])
        .await
        .unwrap();
    ok(&o);
    let j = o.json().unwrap();
    let noop = j["id"].as_i64().unwrap();
    assert_ne!(noop, id);
    assert_eq!(j["created"], true);
    assert_eq!(j["task_type"], "noop");
    assert_eq!(j["payload"], json!({}));
    assert_eq!(j["priority"], 0);
    wait_status(&db.pool, noop, "succeeded").await;

    assert_eq!(
        audit_rows(&db.pool).await.unwrap(),
        [
            local("enqueue", &format!("task:{id}"), "applied"),
            local("enqueue", &format!("task:{id}"), "noop"),
            local("enqueue", &format!("task:{id}"), "noop"),
            local("enqueue", &format!("task:{noop}"), "applied"),
        ]
    );

    // Bad input, refused by the CLI or by the agent: exit 2, no task, no audit row.
    let scratch = scratch_dir("leasehold-cli-enqueue").unwrap();
    let big = scratch.join("big.json");
    std::fs::write(&big, json!({"blob": "x".repeat(1_100_000)}).to_string()).unwrap();
    let big = big.to_str().unwrap().to_string();
    let long_type = "x".repeat(65);
    let before = digest(&db.pool).await;
    let seen = audit_len(&db.pool).await;
    let bad: [&[&str]; 6] = [
        &["enqueue", "noop", "--payload", r#"{"unterminated": "#],
        &["enqueue", "noop", "--payload", "not json"],
        &["enqueue", "Not A Type"],
        &["enqueue", &long_type],
        &["enqueue", "noop", "--priority", "40000"],
        // Valid JSON, above the agent's payload limit: refused by the agent.
        &["enqueue", "noop", "--payload-file", &big],
    ];
    for args in bad {
        let o = f.cli.run(args).await.unwrap();
        assert_eq!(o.code, Some(2), "{}", o.describe());
        assert_eq!(o.stdout, "", "{}", o.describe());
        assert!(!o.stderr.trim().is_empty(), "{}", o.describe());
    }
    let o = f
        .cli
        .run(&["enqueue", "noop", "--payload-file", &big])
        .await
        .unwrap();
    let line = refused(&o, 2);
    assert!(line.contains("above the limit"), "{line}");
    assert!(line.ends_with("(invalid argument)"), "{line}");
    assert_eq!(digest(&db.pool).await, before);
    assert_eq!(audit_after(&db.pool, seen).await, Vec::<AuditRow>::new());
    let _ = std::fs::remove_dir_all(&scratch);
    db.drop_db().await.unwrap();
}

// -------------------------------------------------------------------------------------------
// tasks ls / tasks show
// -------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_ls_filters_pages_and_fits_80_columns() {
    let db = TestDb::new().await.unwrap();
    // Serves only noop: the rows below stay as written.
    let f = start(&db, "ls", "noop", &[]).await;
    let mut queued = Vec::new();
    let mut dead = Vec::new();
    let mut succeeded = Vec::new();
    for i in 0..5 {
        queued.push(
            insert_task(
                &db.pool,
                TaskSpec::new("email.send", "queued").payload(json!({"n": i})),
            )
            .await
            .unwrap(),
        );
    }
    for _ in 0..3 {
        dead.push(
            insert_task(
                &db.pool,
                TaskSpec {
                    last_error: Some(json!({
                        "code": "render_failed",
                        "message": format!("template exploded: {}", "very long reason ".repeat(20)),
                        "retryable": false
                    })),
                    ..TaskSpec::new("report.build", "dead")
                },
            )
            .await
            .unwrap(),
        );
    }
    for _ in 0..2 {
        succeeded.push(
            insert_task(&db.pool, TaskSpec::new("email.send", "succeeded"))
                .await
                .unwrap(),
        );
    }
    let long_type = format!("a{}", "b".repeat(63));
    let wide = insert_task(
        &db.pool,
        TaskSpec::new(long_type.clone(), "queued").priority(-32768),
    )
    .await
    .unwrap();
    let mut all: Vec<i64> = [&queued[..], &dead[..], &succeeded[..], &[wide]].concat();
    all = desc(all);
    let seen = audit_len(&db.pool).await;

    // Everything, newest first, one page.
    let o = f
        .cli
        .run(&["--output", "json", "tasks", "ls"])
        .await
        .unwrap();
    ok(&o);
    let page = o.json().unwrap();
    assert_eq!(page_ids(&page), all);
    assert_eq!(page["next_before_id"], Value::Null);
    assert!(page["now"].is_string());
    let first = &page["tasks"][0];
    assert_eq!(first["id"], wide);
    assert_eq!(first["task_type"], long_type.as_str());
    assert_eq!(first["priority"], -32768);

    // The table: a header, one line per task, nothing wider than 80 columns.
    let o = f.cli.run(&["tasks", "ls"]).await.unwrap();
    ok(&o);
    fits(&o);
    let lines = o.lines();
    assert!(lines[0].starts_with("ID"), "{}", o.describe());
    for word in ["TYPE", "STATUS", "ATTEMPT", "PRI", "UPDATED", "ERROR"] {
        assert!(lines[0].contains(word), "{word}: {}", o.describe());
    }
    assert_eq!(lines.len(), 1 + all.len(), "{}", o.describe());
    for (line, id) in lines[1..].iter().zip(&all) {
        assert_eq!(
            line.split_whitespace().next(),
            Some(id.to_string().as_str()),
            "{}",
            o.describe()
        );
    }
    let dead_line = lines
        .iter()
        .find(|l| l.trim_start().starts_with(&format!("{} ", dead[0])))
        .unwrap();
    assert!(dead_line.contains("report.build"), "{dead_line}");
    assert!(dead_line.contains("dead"), "{dead_line}");
    assert!(dead_line.contains("render_failed"), "{dead_line}");

    // Filters: status, type, both, a status list.
    let ids_of = |args: &'static [&'static str]| {
        let cli = f.cli.clone();
        async move {
            let mut full = vec!["--output", "json", "tasks", "ls"];
            full.extend_from_slice(args);
            let o = cli.run(&full).await.unwrap();
            ok(&o);
            page_ids(&o.json().unwrap())
        }
    };
    assert_eq!(ids_of(&["--status", "dead"]).await, desc(dead.clone()));
    assert_eq!(
        ids_of(&["--type", "email.send"]).await,
        desc([&queued[..], &succeeded[..]].concat())
    );
    assert_eq!(
        ids_of(&["--type", "email.send", "--status", "queued"]).await,
        desc(queued.clone())
    );
    assert_eq!(
        ids_of(&["--status", "dead,succeeded"]).await,
        desc([&dead[..], &succeeded[..]].concat())
    );
    assert_eq!(
        ids_of(&["--code", "render_failed"]).await,
        desc(dead.clone())
    );
    assert_eq!(
        ids_of(&["--type", "report.build", "--status", "queued"]).await,
        Vec::<i64>::new()
    );
    let o = f
        .cli
        .run(&[
            "tasks",
            "ls",
            "--type",
            "report.build",
            "--status",
            "queued",
        ])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(o.stdout, "no tasks\n");
    let o = f
        .cli
        .run(&["tasks", "ls", "--status", "dead"])
        .await
        .unwrap();
    ok(&o);
    fits(&o);
    assert_eq!(o.lines().len(), 1 + dead.len(), "{}", o.describe());

    // Paging: walk --limit 4 pages with --before; every task once, in order.
    let mut walked = Vec::new();
    let mut before: Option<i64> = None;
    let mut pages = 0;
    loop {
        let before_text = before.map(|b| b.to_string());
        let mut args = vec!["--output", "json", "tasks", "ls", "--limit", "4"];
        if let Some(b) = &before_text {
            args.extend(["--before", b.as_str()]);
        }
        let o = f.cli.run(&args).await.unwrap();
        ok(&o);
        let page = o.json().unwrap();
        let ids = page_ids(&page);
        assert!(ids.len() <= 4, "{}", o.describe());
        if let Some(b) = before {
            assert!(ids.iter().all(|id| *id < b), "{}", o.describe());
        }
        walked.extend(ids);
        pages += 1;
        assert!(pages <= 4, "paging does not end: {walked:?}");
        match page["next_before_id"].as_i64() {
            Some(next) => before = Some(next),
            None => break,
        }
    }
    assert_eq!(walked, all);
    assert_eq!(pages, 3);
    // The table says where the next page starts, and that page follows on.
    let o = f.cli.run(&["tasks", "ls", "--limit", "4"]).await.unwrap();
    ok(&o);
    fits(&o);
    let hint = *o.lines().last().unwrap();
    let next: i64 = hint
        .strip_prefix("next page: --before ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{}", o.describe()));
    assert_eq!(o.lines().len(), 1 + 4 + 1, "{}", o.describe());
    let next_text = next.to_string();
    let o = f
        .cli
        .run(&[
            "--output", "json", "tasks", "ls", "--limit", "4", "--before", &next_text,
        ])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(page_ids(&o.json().unwrap()), all[4..8]);

    // Bad filters are exit 2; reads write no audit rows.
    let o = f
        .cli
        .run(&["tasks", "ls", "--status", "zombie"])
        .await
        .unwrap();
    assert_eq!(o.code, Some(2), "{}", o.describe());
    assert_eq!(o.stdout, "");
    assert_eq!(audit_after(&db.pool, seen).await, Vec::<AuditRow>::new());
    db.drop_db().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_show_lists_attempts_and_says_why_a_task_is_not_running() {
    let db = TestDb::new().await.unwrap();
    let f = start(&db, "show", "fail,noop", &[]).await;

    // A task that died, requeued and died again: two attempts, both listed.
    let failing = json!({"code": "boom_code", "message": "it broke", "retryable": false});
    let id = enqueue(&f.cli, "fail", &failing).await;
    wait_status(&db.pool, id, "dead").await;
    let o = f.cli.run(&["requeue", &id.to_string()]).await.unwrap();
    ok(&o);
    wait_until("the task ran twice", WAIT, || {
        let pool = db.pool.clone();
        async move {
            Ok(
                attempt_rows(&pool, id).await?.len() == 2
                    && task_status(&pool, id).await? == "dead",
            )
        }
    })
    .await
    .unwrap();
    let o = f
        .cli
        .run(&["--output", "json", "tasks", "show", &id.to_string()])
        .await
        .unwrap();
    ok(&o);
    let j = o.json().unwrap();
    assert_eq!(j["task"]["id"], id);
    assert_eq!(j["task"]["status"], "dead");
    assert_eq!(j["task"]["last_error"]["code"], "boom_code");
    assert_eq!(j["task"]["lease_owner"], f.id.as_str());
    let attempts = j["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{}", o.describe());
    for (i, a) in attempts.iter().enumerate() {
        let n = i64::try_from(i).unwrap() + 1;
        assert_eq!(a["epoch"], n, "{a}");
        assert_eq!(a["attempt"], 1, "{a}");
        assert_eq!(a["agent"], f.id.as_str(), "{a}");
        assert_eq!(a["outcome"], "failed", "{a}");
        assert_eq!(a["error"]["code"], "boom_code", "{a}");
        assert!(
            a["started_at"].is_string() && a["finished_at"].is_string(),
            "{a}"
        );
    }
    assert_eq!(j["blockers"][0]["kind"], "finished");
    let o = f
        .cli
        .run(&["tasks", "show", &id.to_string()])
        .await
        .unwrap();
    ok(&o);
    inert(&o);
    let lines = o.lines();
    assert_eq!(lines[0], format!("task {id}: fail, dead"));
    let at = lines.iter().position(|l| *l == "Attempts:").unwrap();
    let attempt_lines: Vec<&&str> = lines[at + 2..]
        .iter()
        .take_while(|l| !l.is_empty())
        .collect();
    assert_eq!(attempt_lines.len(), 2, "{}", o.describe());
    for l in attempt_lines {
        assert!(
            l.contains(&f.id) && l.contains("failed") && l.contains("boom_code"),
            "{l}"
        );
    }
    let why = lines.iter().position(|l| *l == "Why not running:").unwrap();
    assert!(lines[why + 1].starts_with("  dead at "), "{}", o.describe());
    // Whole, though longer than 80 columns: stdout is a pipe.
    assert!(
        lines[why + 1].ends_with(&format!("(leasehold requeue {id})")),
        "{}",
        o.describe()
    );

    // Queued, but of a type no agent serves.
    let unserved = enqueue(&f.cli, "report.build", &json!({})).await;
    // Queued, not due for an hour.
    let o = f
        .cli
        .run(&["--output", "json", "enqueue", "noop", "--delay", "1h"])
        .await
        .unwrap();
    ok(&o);
    let later = o.json().unwrap()["id"].as_i64().unwrap();
    for (id, kind, text) in [
        (
            unserved,
            "no_agent",
            "no live agent handles type report.build",
        ),
        (later, "not_due", "not due until "),
    ] {
        let o = f
            .cli
            .run(&["--output", "json", "tasks", "show", &id.to_string()])
            .await
            .unwrap();
        ok(&o);
        let j = o.json().unwrap();
        assert_eq!(j["task"]["status"], "queued");
        assert_eq!(j["attempts"], json!([]));
        let kinds: Vec<&str> = j["blockers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, [kind], "{}", o.describe());
        assert!(
            j["why_not_running"].as_str().unwrap().contains(text),
            "{}",
            o.describe()
        );
        let o = f
            .cli
            .run(&["tasks", "show", &id.to_string()])
            .await
            .unwrap();
        ok(&o);
        inert(&o);
        let lines = o.lines();
        assert!(lines.contains(&"Attempts: none yet"), "{}", o.describe());
        let why = lines.iter().position(|l| *l == "Why not running:").unwrap();
        assert_eq!(lines.len(), why + 2, "one reason: {}", o.describe());
        assert!(
            lines[why + 1].starts_with(&format!("  {text}")),
            "{}",
            o.describe()
        );
    }
    assert_eq!(task_status(&db.pool, later).await.unwrap(), "queued");

    // An unknown id: exit 2 and a plain message.
    let seen = audit_len(&db.pool).await;
    let o = f.cli.run(&["tasks", "show", "999999"]).await.unwrap();
    assert_eq!(
        refused(&o, 2),
        "leasehold: get task 999999: task 999999 does not exist (not found)"
    );
    let o = f
        .cli
        .run(&["--output", "json", "tasks", "show", "999999"])
        .await
        .unwrap();
    refused(&o, 2);
    assert_eq!(audit_after(&db.pool, seen).await, Vec::<AuditRow>::new());
    db.drop_db().await.unwrap();
}

// -------------------------------------------------------------------------------------------
// cancel
// -------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_waiting_and_running_tasks_and_refuses_finished_ones() {
    let db = TestDb::new().await.unwrap();
    let f = start(&db, "cancel", "sleep", &[]).await;

    // A queued task: cancelled at once.
    let queued = insert_task(&db.pool, TaskSpec::new("report.build", "queued"))
        .await
        .unwrap();
    let o = f.cli.run(&["cancel", &queued.to_string()]).await.unwrap();
    ok(&o);
    assert_eq!(o.stdout, format!("task {queued}: cancelled\n"));
    let row = task_row(&db.pool, queued).await.unwrap();
    assert_eq!(row["status"], "cancelled");
    assert!(!row["finished_at"].is_null());

    // A running sleep: stopped by its holder, the attempt ends cancelled.
    let running = enqueue(&f.cli, "sleep", &json!({"ms": 600_000})).await;
    wait_status(&db.pool, running, "running").await;
    let o = f
        .cli
        .run(&["--output", "json", "cancel", &running.to_string()])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(
        o.json().unwrap(),
        json!({"id": running, "outcome": "cancelled", "status": "cancelled", "holder": f.id})
    );
    let row = task_row(&db.pool, running).await.unwrap();
    assert_eq!(row["status"], "cancelled");
    assert!(!row["finished_at"].is_null());
    assert_eq!(
        attempt_rows(&db.pool, running).await.unwrap(),
        [(1, f.id.clone(), "cancelled".to_string())]
    );
    // The sleep really stopped: the agent reports no active execution.
    let agent_id = f.id.clone();
    wait_until("the agent has no active execution", WAIT, || {
        let pool = db.pool.clone();
        let agent_id = agent_id.clone();
        async move {
            let active: i32 = sqlx::query_scalar("SELECT active FROM agents WHERE id = $1")
                .bind(&agent_id)
                .fetch_one(&pool)
                .await?;
            Ok(active == 0)
        }
    })
    .await
    .unwrap();

    // A finished task is information, not a failure: exit 0, "already succeeded", nothing
    // changed; the agent's refusal is still audited (`failed`).
    let done = insert_task(&db.pool, TaskSpec::new("report.build", "succeeded"))
        .await
        .unwrap();
    let before = task_row(&db.pool, done).await.unwrap();
    let o = f.cli.run(&["cancel", &done.to_string()]).await.unwrap();
    assert_eq!(o.code, Some(0), "{}", o.describe());
    assert_eq!(o.stdout, format!("task {done} already succeeded\n"));
    assert_eq!(task_row(&db.pool, done).await.unwrap(), before);
    // Cancelling the cancelled one again says so the same way.
    let again = f.cli.run(&["cancel", &queued.to_string()]).await.unwrap();
    assert_eq!(again.code, Some(0), "{}", again.describe());
    assert_eq!(again.stdout, format!("task {queued} already cancelled\n"));

    // Several ids: each is tried, the exit code is the worst; an unknown id is not found.
    let second = insert_task(&db.pool, TaskSpec::new("report.build", "queued"))
        .await
        .unwrap();
    let o = f
        .cli
        .run(&["cancel", &second.to_string(), &done.to_string(), "999999"])
        .await
        .unwrap();
    assert_eq!(o.code, Some(2), "{}", o.describe());
    assert_eq!(
        o.stdout,
        format!("task {second}: cancelled\ntask {done} already succeeded\n")
    );
    let errors: Vec<&str> = o.stderr.lines().collect();
    assert_eq!(errors.len(), 1, "{}", o.describe());
    assert!(errors[0].starts_with("leasehold: cancel task 999999: "));
    assert!(errors[0].ends_with("(not found)"));
    assert_eq!(task_status(&db.pool, second).await.unwrap(), "cancelled");
    assert_eq!(task_row(&db.pool, done).await.unwrap(), before);

    let mut rows = audit_rows(&db.pool).await.unwrap();
    // The last call's cancels ran concurrently: their rows may come in any order.
    let mut last = rows.split_off(5);
    last.sort();
    assert_eq!(
        rows,
        [
            local("cancel", &format!("task:{queued}"), "applied"),
            local("enqueue", &format!("task:{running}"), "applied"),
            local("cancel", &format!("task:{running}"), "applied"),
            local("cancel", &format!("task:{done}"), "failed"),
            local("cancel", &format!("task:{queued}"), "failed"),
        ]
    );
    let mut want = vec![
        local("cancel", &format!("task:{second}"), "applied"),
        local("cancel", &format!("task:{done}"), "failed"),
        local("cancel", "task:999999", "failed"),
    ];
    want.sort();
    assert_eq!(last, want);
    db.drop_db().await.unwrap();
}

// -------------------------------------------------------------------------------------------
// requeue / dlq
// -------------------------------------------------------------------------------------------

fn dead_spec(task_type: &str, code: &str) -> TaskSpec {
    TaskSpec {
        last_error: Some(
            json!({"code": code, "message": format!("{code} happened"), "retryable": false}),
        ),
        ..TaskSpec::new(task_type, "dead")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeue_and_the_dead_letter_queue() {
    let db = TestDb::new().await.unwrap();
    // Serves only noop: requeued tasks stay queued.
    let f = start(&db, "dlq", "noop", &[]).await;
    let mut smtp = Vec::new();
    for _ in 0..3 {
        smtp.push(
            insert_task(&db.pool, dead_spec("email.send", "smtp_timeout"))
                .await
                .unwrap(),
        );
    }
    let email_boom = insert_task(&db.pool, dead_spec("email.send", "boom"))
        .await
        .unwrap();
    let mut report_boom = Vec::new();
    for _ in 0..2 {
        report_boom.push(
            insert_task(&db.pool, dead_spec("report.build", "boom"))
                .await
                .unwrap(),
        );
    }
    let alive = insert_task(&db.pool, TaskSpec::new("email.send", "queued"))
        .await
        .unwrap();

    // requeue one dead task: back to queued.
    let one = smtp[0];
    let o = f.cli.run(&["requeue", &one.to_string()]).await.unwrap();
    ok(&o);
    assert_eq!(o.stdout, format!("task {one}: requeued (was dead)\n"));
    let row = task_row(&db.pool, one).await.unwrap();
    assert_eq!(row["status"], "queued");
    assert_eq!(row["attempt"], 0);
    assert!(row["finished_at"].is_null());
    // Again (it is queued now): what was asked is so already: exit 0, said, nothing changed.
    let o = f
        .cli
        .run(&["--output", "json", "requeue", &one.to_string()])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(
        o.json().unwrap(),
        json!({"id": one, "outcome": "already_waiting", "status": "queued"})
    );
    let o = f.cli.run(&["requeue", &one.to_string()]).await.unwrap();
    ok(&o);
    assert_eq!(o.stdout, format!("task {one} already queued\n"));
    assert_eq!(task_row(&db.pool, one).await.unwrap(), row);
    // JSON of a requeue.
    let two = smtp[1];
    let o = f
        .cli
        .run(&["--output", "json", "requeue", &two.to_string()])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(o.json().unwrap(), json!({"id": two, "previous": "dead"}));

    // dlq ls: dead tasks only, by type and by code.
    let dlq = |args: &'static [&'static str]| {
        let cli = f.cli.clone();
        async move {
            let mut full = vec!["--output", "json", "dlq", "ls"];
            full.extend_from_slice(args);
            let o = cli.run(&full).await.unwrap();
            ok(&o);
            let page = o.json().unwrap();
            for t in page["tasks"].as_array().unwrap() {
                assert_eq!(t["status"], "dead", "{t}");
            }
            page_ids(&page)
        }
    };
    let remaining = desc(vec![smtp[2], email_boom, report_boom[0], report_boom[1]]);
    assert_eq!(dlq(&[]).await, remaining);
    assert_eq!(
        dlq(&["--type", "email.send"]).await,
        desc(vec![smtp[2], email_boom])
    );
    assert_eq!(
        dlq(&["--code", "boom"]).await,
        desc(vec![email_boom, report_boom[0], report_boom[1]])
    );
    assert_eq!(
        dlq(&["--type", "report.build", "--code", "boom"]).await,
        desc(report_boom.clone())
    );
    let o = f.cli.run(&["dlq", "ls"]).await.unwrap();
    ok(&o);
    fits(&o);
    let lines = o.lines();
    assert!(
        lines[0].starts_with("ID") && lines[0].contains("CODE"),
        "{}",
        o.describe()
    );
    assert_eq!(lines.len(), 1 + remaining.len(), "{}", o.describe());
    assert!(
        lines.iter().any(|l| l.contains("smtp_timeout")),
        "{}",
        o.describe()
    );

    // --dry-run: only a count, nothing changed.
    let before = digest(&db.pool).await;
    let o = f
        .cli
        .run(&["dlq", "requeue", "--dry-run", "--code", "boom"])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(o.stdout, "would requeue 3 dead tasks (dry run)\n");
    let o = f
        .cli
        .run(&[
            "--output",
            "json",
            "dlq",
            "requeue",
            "--dry-run",
            "--code",
            "boom",
        ])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(o.json().unwrap(), json!({"count": 3, "dry_run": true}));
    assert_eq!(digest(&db.pool).await, before);

    // No filter and no --all: refused before any call, nothing changed.
    let seen = audit_len(&db.pool).await;
    let o = f.cli.run(&["dlq", "requeue"]).await.unwrap();
    assert_eq!(
        refused(&o, 2),
        "leasehold: dlq requeue: give a filter or --all (--type, --code, --since, --until)"
    );
    assert_eq!(digest(&db.pool).await, before);
    assert_eq!(audit_after(&db.pool, seen).await, Vec::<AuditRow>::new());

    // --code and --type: exactly the matching rows move.
    let o = f
        .cli
        .run(&["dlq", "requeue", "--code", "boom", "--type", "report.build"])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(o.stdout, "requeued 2 dead tasks\n");
    for id in &report_boom {
        assert_eq!(task_status(&db.pool, *id).await.unwrap(), "queued");
    }
    assert_eq!(task_status(&db.pool, email_boom).await.unwrap(), "dead");
    assert_eq!(task_status(&db.pool, smtp[2]).await.unwrap(), "dead");

    // --all: everything left.
    let o = f
        .cli
        .run(&["--output", "json", "dlq", "requeue", "--all"])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(o.json().unwrap(), json!({"count": 2, "dry_run": false}));
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM tasks WHERE status = 'dead'")
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM tasks WHERE status = 'queued'"
        )
        .await
        .unwrap(),
        7
    );
    assert_eq!(task_status(&db.pool, alive).await.unwrap(), "queued");
    // Nothing left: a no-op.
    let o = f.cli.run(&["dlq", "requeue", "--all"]).await.unwrap();
    ok(&o);
    assert_eq!(o.stdout, "requeued 0 dead tasks\n");
    let o = f.cli.run(&["dlq", "ls"]).await.unwrap();
    ok(&o);
    assert_eq!(o.stdout, "no dead tasks\n");

    let dlq_target = "dead-letter queue";
    assert_eq!(
        audit_rows(&db.pool).await.unwrap(),
        [
            local("requeue", &format!("task:{one}"), "applied"),
            local("requeue", &format!("task:{one}"), "failed"),
            local("requeue", &format!("task:{one}"), "failed"),
            local("requeue", &format!("task:{two}"), "applied"),
            local("requeue_dead_dry_run", dlq_target, "noop"),
            local("requeue_dead_dry_run", dlq_target, "noop"),
            local("requeue_dead", dlq_target, "applied"),
            local("requeue_dead", dlq_target, "applied"),
            local("requeue_dead", dlq_target, "noop"),
        ]
    );
    db.drop_db().await.unwrap();
}

// -------------------------------------------------------------------------------------------
// concurrency
// -------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_set_writes_policies_and_the_local_limit() {
    let db = TestDb::new().await.unwrap();
    let f = start(&db, "conc", "noop", &["--concurrency", "20"]).await;

    let o = f
        .cli
        .run(&["concurrency", "set", "--global", "10"])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(o.stdout, "global limit: unlimited → 10\n");
    assert_eq!(policy(&db.pool, "*").await, Some((Some(10), false)));
    let o = f
        .cli
        .run(&["--output", "json", "concurrency", "set", "--global", "10"])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(
        o.json().unwrap(),
        json!({"scope": "global", "task_type": null, "previous": 10, "limit": 10})
    );
    let o = f
        .cli
        .run(&["concurrency", "set", "--global", "unlimited"])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(o.stdout, "global limit: 10 → unlimited\n");
    assert_eq!(policy(&db.pool, "*").await, Some((None, false)));

    let o = f
        .cli
        .run(&[
            "--output",
            "json",
            "concurrency",
            "set",
            "--type",
            "email.send",
            "3",
        ])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(
        o.json().unwrap(),
        json!({"scope": "type", "task_type": "email.send", "previous": null, "limit": 3})
    );
    assert_eq!(policy(&db.pool, "email.send").await, Some((Some(3), false)));
    let o = f
        .cli
        .run(&["concurrency", "set", "--type", "email.send", "0"])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(o.stdout, "type email.send limit: 3 → 0\n");
    assert_eq!(policy(&db.pool, "email.send").await, Some((Some(0), false)));
    let o = f
        .cli
        .run(&["concurrency", "set", "--type", "email.send", "unlimited"])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(o.stdout, "type email.send limit: 0 → unlimited\n");
    assert_eq!(policy(&db.pool, "email.send").await, Some((None, false)));

    // The local limit: applied by the agent at once, published by its registry heartbeat.
    let o = f
        .cli
        .run(&["concurrency", "set", "--local", "7"])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(o.stdout, "local limit: 20 → 7\n");
    let agent_id = f.id.clone();
    wait_until("the registry shows local concurrency 7", WAIT, || {
        let pool = db.pool.clone();
        let agent_id = agent_id.clone();
        async move {
            let limit: i32 =
                sqlx::query_scalar("SELECT local_concurrency FROM agents WHERE id = $1")
                    .bind(&agent_id)
                    .fetch_one(&pool)
                    .await?;
            Ok(limit == 7)
        }
    })
    .await
    .unwrap();
    let o = f
        .cli
        .run(&["--output", "json", "concurrency", "set", "--local", "7"])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(
        o.json().unwrap(),
        json!({"scope": "local", "task_type": null, "previous": 7, "limit": 7})
    );
    let o = f
        .cli
        .run(&["--output", "json", "agents", "ls"])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(o.json().unwrap()["agents"][0]["local_concurrency"], 7);

    // Bad limits: exit 2, nothing changed, no audit row.
    let before = digest(&db.pool).await;
    let seen = audit_len(&db.pool).await;
    let bad: [&[&str]; 6] = [
        &["concurrency", "set", "--local", "unlimited"],
        &["concurrency", "set", "--local", "0"],
        &["concurrency", "set", "--local", "100001"],
        &["concurrency", "set", "--global", "1000001"],
        &["concurrency", "set", "--type", "Bad Type", "3"],
        &["concurrency", "set", "3"],
    ];
    for args in bad {
        let o = f.cli.run(args).await.unwrap();
        assert_eq!(o.code, Some(2), "{}", o.describe());
        assert_eq!(o.stdout, "", "{}", o.describe());
    }
    assert_eq!(digest(&db.pool).await, before);
    assert_eq!(audit_after(&db.pool, seen).await, Vec::<AuditRow>::new());

    let agent = format!("agent:{}", f.id);
    assert_eq!(
        audit_rows(&db.pool).await.unwrap(),
        [
            local("policy_set", "policy:*", "applied"),
            local("policy_set", "policy:*", "noop"),
            local("policy_set", "policy:*", "applied"),
            local("policy_set", "policy:email.send", "applied"),
            local("policy_set", "policy:email.send", "applied"),
            local("policy_set", "policy:email.send", "applied"),
            local("set_concurrency", &agent, "applied"),
            local("set_concurrency", &agent, "noop"),
        ]
    );
    db.drop_db().await.unwrap();
}

async fn running_of(pool: &PgPool, task_type: &str) -> (i64, i64) {
    sqlx::query_as(
        "SELECT count(*) FILTER (WHERE status IN ('running', 'cancel_requested')), \
                count(*) FILTER (WHERE status = 'queued') \
         FROM tasks WHERE task_type = $1",
    )
    .bind(task_type)
    .fetch_one(pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_limit_of_one_holds_until_it_is_raised() {
    let db = TestDb::new().await.unwrap();
    let f = start(&db, "limit", "sleep", &[]).await;
    let o = f
        .cli
        .run(&["concurrency", "set", "--type", "sleep", "1"])
        .await
        .unwrap();
    ok(&o);
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(enqueue(&f.cli, "sleep", &json!({"ms": 3000})).await);
    }
    wait_until("one sleep runs", WAIT, || {
        let pool = db.pool.clone();
        async move { Ok(running_of(&pool, "sleep").await.0 == 1) }
    })
    .await
    .unwrap();
    // While the limit holds and tasks wait, never more than one runs.
    let mut pressure = 0;
    for _ in 0..10 {
        let (running, queued) = running_of(&db.pool, "sleep").await;
        assert!(running <= 1, "{running} sleeps running under a limit of 1");
        if queued >= 3 {
            pressure += 1;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(pressure > 0, "no sample saw tasks waiting behind the limit");
    assert!(running_of(&db.pool, "sleep").await.1 >= 2);

    // Raised: the waiting ones run side by side.
    let o = f
        .cli
        .run(&["concurrency", "set", "--type", "sleep", "5"])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(o.stdout, "type sleep limit: 1 → 5\n");
    wait_until("at least two sleeps run at once", WAIT, || {
        let pool = db.pool.clone();
        async move { Ok(running_of(&pool, "sleep").await.0 >= 2) }
    })
    .await
    .unwrap();
    for id in &ids {
        wait_status(&db.pool, *id, "succeeded").await;
    }
    let mut expected = vec![local("policy_set", "policy:sleep", "applied")];
    expected.extend(
        ids.iter()
            .map(|id| local("enqueue", &format!("task:{id}"), "applied")),
    );
    expected.push(local("policy_set", "policy:sleep", "applied"));
    assert_eq!(audit_rows(&db.pool).await.unwrap(), expected);
    db.drop_db().await.unwrap();
}

// -------------------------------------------------------------------------------------------
// pause / resume
// -------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_stops_claims_of_a_type_and_resume_restarts_them() {
    let db = TestDb::new().await.unwrap();
    let f = start(&db, "pause", "noop,sleep", &[]).await;

    let o = f.cli.run(&["pause", "noop"]).await.unwrap();
    ok(&o);
    assert_eq!(o.stdout, "paused type noop\n");
    assert_eq!(policy(&db.pool, "noop").await, Some((None, true)));
    let o = f
        .cli
        .run(&["--output", "json", "pause", "noop"])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(
        o.json().unwrap(),
        json!({"task_type": "noop", "paused": true, "changed": false})
    );

    // A paused type is not claimed; another type enqueued after it is (the agent did claim).
    let held = enqueue(&f.cli, "noop", &json!({})).await;
    let other = enqueue(&f.cli, "sleep", &json!({"ms": 1})).await;
    wait_status(&db.pool, other, "succeeded").await;
    let row = task_row(&db.pool, held).await.unwrap();
    assert_eq!(row["status"], "queued");
    assert_eq!(row["attempt"], 0);
    let o = f
        .cli
        .run(&["tasks", "show", &held.to_string()])
        .await
        .unwrap();
    ok(&o);
    let lines = o.lines();
    let why = lines.iter().position(|l| *l == "Why not running:").unwrap();
    assert_eq!(
        lines[why + 1..],
        ["  type noop is paused (leasehold resume noop)"],
        "{}",
        o.describe()
    );
    let o = f
        .cli
        .run(&["--output", "json", "tasks", "show", &held.to_string()])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(
        o.json().unwrap()["blockers"],
        json!([{"kind": "paused", "message": "type noop is paused (leasehold resume noop)"}])
    );
    assert_eq!(task_status(&db.pool, held).await.unwrap(), "queued");

    let o = f.cli.run(&["resume", "noop"]).await.unwrap();
    ok(&o);
    assert_eq!(o.stdout, "resumed type noop\n");
    assert_eq!(policy(&db.pool, "noop").await, Some((None, false)));
    wait_status(&db.pool, held, "succeeded").await;
    let o = f
        .cli
        .run(&["--output", "json", "resume", "noop"])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(
        o.json().unwrap(),
        json!({"task_type": "noop", "paused": false, "changed": false})
    );
    let o = f.cli.run(&["resume", "noop"]).await.unwrap();
    ok(&o);
    assert_eq!(o.stdout, "type noop was not paused (nothing changed)\n");

    // A bad type name: exit 2, no audit row.
    let seen = audit_len(&db.pool).await;
    let o = f.cli.run(&["pause", "Not A Type"]).await.unwrap();
    assert_eq!(o.code, Some(2), "{}", o.describe());
    assert_eq!(o.stdout, "");
    assert_eq!(audit_after(&db.pool, seen).await, Vec::<AuditRow>::new());

    assert_eq!(
        audit_rows(&db.pool).await.unwrap(),
        [
            local("policy_set", "policy:noop", "applied"),
            local("policy_set", "policy:noop", "noop"),
            local("enqueue", &format!("task:{held}"), "applied"),
            local("enqueue", &format!("task:{other}"), "applied"),
            local("policy_set", "policy:noop", "applied"),
            local("policy_set", "policy:noop", "noop"),
            local("policy_set", "policy:noop", "noop"),
        ]
    );
    db.drop_db().await.unwrap();
}

// -------------------------------------------------------------------------------------------
// agents ls / drain
// -------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_ls_shows_the_whole_fleet_and_drain_stops_an_agent() {
    let db = TestDb::new().await.unwrap();
    let mut a = start(&db, "fleet-a", "noop", &[]).await;
    let mut b = start(&db, "fleet-b", "sleep", &["--shutdown-timeout", "30s"]).await;
    let leader = std::sync::Mutex::new(String::new());
    wait_until("a leader is elected", WAIT, || {
        let pool = db.pool.clone();
        let leader = &leader;
        async move {
            let owner: Option<String> = sqlx::query_scalar(
                "SELECT owner FROM leader WHERE owner IS NOT NULL AND lease_until > now()",
            )
            .fetch_optional(&pool)
            .await?
            .flatten();
            let found = owner.is_some();
            *leader.lock().unwrap() = owner.unwrap_or_default();
            Ok(found)
        }
    })
    .await
    .unwrap();
    let leader = leader.into_inner().unwrap();
    let ids: BTreeSet<String> = [a.id.clone(), b.id.clone()].into();
    assert!(
        ids.contains(&leader),
        "leader {leader} is not one of {ids:?}"
    );

    // Asked from either agent, the whole registry, the leader marked.
    for (cli, answering) in [(&a.cli, &a.id), (&b.cli, &b.id)] {
        let o = cli
            .run(&["--output", "json", "agents", "ls"])
            .await
            .unwrap();
        ok(&o);
        let j = o.json().unwrap();
        assert_eq!(j["answered_by"], answering.as_str());
        let agents = j["agents"].as_array().unwrap();
        let listed: BTreeSet<String> = agents
            .iter()
            .map(|x| x["id"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(listed, ids, "{}", o.describe());
        for x in agents {
            assert_eq!(x["state"], "running", "{x}");
            assert_eq!(x["leader"], x["id"] == leader.as_str(), "{x}");
            assert!(x["grpc_address"].is_string(), "{x}");
        }
        let types: BTreeMap<&str, &Value> = agents
            .iter()
            .map(|x| (x["id"].as_str().unwrap(), &x["task_types"]))
            .collect();
        assert_eq!(types[a.id.as_str()], &json!(["noop"]));
        assert_eq!(types[b.id.as_str()], &json!(["sleep"]));

        let o = cli.run(&["agents", "ls"]).await.unwrap();
        ok(&o);
        fits(&o);
        let lines = o.lines();
        assert!(
            lines[0].starts_with("L ") && lines[0].contains("ID"),
            "{}",
            o.describe()
        );
        assert_eq!(lines.len(), 5, "{}", o.describe());
        for id in &ids {
            let line = lines.iter().find(|l| l.contains(id.as_str())).unwrap();
            assert_eq!(line.starts_with('*'), *id == leader, "{line}");
            assert!(line.contains("running"), "{line}");
        }
        assert!(
            lines[3].starts_with(&format!("leader {leader} · term ")),
            "{}",
            o.describe()
        );
        assert_eq!(
            lines[4],
            format!("answered by {answering} (* = leader)"),
            "{}",
            o.describe()
        );
    }

    // Drain b while it runs a task: it finishes it, exits 0 on its own, its row is stopped.
    let task = enqueue(&a.cli, "sleep", &json!({"ms": 3000})).await;
    wait_status(&db.pool, task, "running").await;
    let o = b.cli.run(&["drain"]).await.unwrap();
    ok(&o);
    assert_eq!(
        o.stdout,
        format!("agent at {} is draining (1 lease held)\n", b.cli.addr())
    );
    let status = b.agent.wait_exit(WAIT).await.unwrap();
    assert_eq!(status.code(), Some(0), "{}", b.agent.log_tail(40));
    let (state, stopped): (String, bool) =
        sqlx::query_as("SELECT state, stopped_at IS NOT NULL FROM agents WHERE id = $1")
            .bind(&b.id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!((state.as_str(), stopped), ("stopped", true));
    assert_eq!(task_status(&db.pool, task).await.unwrap(), "succeeded");
    assert_eq!(
        attempt_rows(&db.pool, task).await.unwrap(),
        [(1, b.id.clone(), "succeeded".to_string())]
    );
    let o = a
        .cli
        .run(&["--output", "json", "agents", "ls"])
        .await
        .unwrap();
    ok(&o);
    let j = o.json().unwrap();
    let gone = j["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"] == b.id.as_str())
        .unwrap();
    assert_eq!(gone["state"], "stopped");
    assert!(gone["stopped_at"].is_string());
    // A drained agent cannot be reached any more: exit 3.
    let o = b.cli.run(&["drain"]).await.unwrap();
    assert!(
        refused(&o, 3).contains("cannot reach agent"),
        "{}",
        o.describe()
    );

    assert_eq!(
        audit_rows(&db.pool).await.unwrap(),
        [
            local("enqueue", &format!("task:{task}"), "applied"),
            local("drain", &format!("agent:{}", b.id), "applied"),
        ]
    );
    assert!(a.agent.is_running());
    db.drop_db().await.unwrap();
}

// -------------------------------------------------------------------------------------------
// watch
// -------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_a_snapshot_then_deltas_as_json_lines_until_sigint() {
    let db = TestDb::new().await.unwrap();
    let f = start(&db, "watch", "sleep", &[]).await;
    let mut child = f.cli.spawn(&["--output", "json", "watch"]).unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut got: Vec<Value> = Vec::new();
    let first = tokio::time::timeout(WAIT, lines.next_line())
        .await
        .expect("a snapshot line")
        .unwrap()
        .expect("watch printed nothing");
    got.push(serde_json::from_str(&first).unwrap());
    assert_eq!(got[0]["seq"], 0, "{first}");
    assert_eq!(got[0]["kind"], "snapshot", "{first}");
    assert_eq!(got[0]["snapshot"]["leases"], json!([]), "{first}");
    assert_eq!(got[0]["snapshot"]["stats"]["state"], "running", "{first}");

    let x = enqueue(&f.cli, "sleep", &json!({"ms": 300})).await;
    let y = enqueue(&f.cli, "sleep", &json!({"ms": 300})).await;
    let ended = |got: &[Value], id: i64| {
        let acquired = got
            .iter()
            .any(|l| l["kind"] == "lease_acquired" && l["lease_acquired"]["task_id"] == id);
        let released = got.iter().any(|l| {
            l["kind"] == "lease_released"
                && l["lease_released"]["task_id"] == id
                && l["lease_released"]["outcome"] == "succeeded"
        });
        acquired && released
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    while !(ended(&got, x) && ended(&got, y)) {
        let line = tokio::time::timeout_at(deadline, lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("no acquired and released lines for {x} and {y}: {got:?}"))
            .unwrap()
            .expect("watch ended early");
        got.push(serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")));
    }
    assert_eq!(task_status(&db.pool, x).await.unwrap(), "succeeded");
    assert_eq!(task_status(&db.pool, y).await.unwrap(), "succeeded");

    // SIGINT: exit 0; everything printed is JSON.
    let pid = child.id().unwrap();
    let kill = std::process::Command::new("kill")
        .args(["-s", "INT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let rest = tokio::time::timeout(WAIT, async {
        let mut rest = Vec::new();
        while let Some(line) = lines.next_line().await.unwrap() {
            rest.push(line);
        }
        rest
    })
    .await
    .expect("watch did not stop after SIGINT");
    for line in rest {
        got.push(serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")));
    }
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .expect("watch did not exit after SIGINT")
        .unwrap();
    assert_eq!(status.code(), Some(0), "watch exited with {status}");

    let mut previous = 0;
    for (i, l) in got.iter().enumerate() {
        assert_eq!(l["agent_id"], f.id.as_str(), "{l}");
        let kind = l["kind"].as_str().unwrap();
        assert!(
            !l[kind].is_null(),
            "line {i} names {kind} but has no {kind}: {l}"
        );
        assert!(l["now_ms"].as_i64().unwrap() > 0, "{l}");
        let seq = l["seq"].as_u64().unwrap();
        if i > 0 {
            assert_ne!(kind, "snapshot", "a second snapshot: {l}");
            assert!(
                seq >= 1 && (seq == previous || seq == previous + 1),
                "seq {previous} then {l}"
            );
        }
        previous = seq;
    }
    // Watching writes no audit rows.
    assert_eq!(
        audit_rows(&db.pool).await.unwrap(),
        [
            local("enqueue", &format!("task:{x}"), "applied"),
            local("enqueue", &format!("task:{y}"), "applied"),
        ]
    );
    db.drop_db().await.unwrap();
}

// -------------------------------------------------------------------------------------------
// wait
// -------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_exits_0_when_all_succeed_and_1_when_one_dies() {
    let db = TestDb::new().await.unwrap();
    let f = start(&db, "wait", "noop,sleep,fail", &[]).await;
    let a = enqueue(&f.cli, "noop", &json!({})).await;
    let b = enqueue(&f.cli, "sleep", &json!({"ms": 500})).await;
    let c = enqueue(&f.cli, "noop", &json!({})).await;
    let (a_s, b_s, c_s) = (a.to_string(), b.to_string(), c.to_string());
    let o = f
        .cli
        .run(&["wait", &a_s, &b_s, &c_s, "--timeout", "90s"])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(
        o.stdout,
        format!("task {a}: succeeded\ntask {b}: succeeded\ntask {c}: succeeded\n")
    );
    for id in [a, b, c] {
        assert_eq!(task_status(&db.pool, id).await.unwrap(), "succeeded");
    }

    // One ends dead (not retryable): exit 1, the JSON lists every final status.
    let dead = enqueue(
        &f.cli,
        "fail",
        &json!({"code": "bad_thing", "message": "it broke", "retryable": false}),
    )
    .await;
    let slow = enqueue(&f.cli, "sleep", &json!({"ms": 700})).await;
    let (d_s, s_s) = (dead.to_string(), slow.to_string());
    let o = f
        .cli
        .run(&[
            "--output",
            "json",
            "wait",
            &a_s,
            &d_s,
            &s_s,
            "--timeout",
            "90s",
        ])
        .await
        .unwrap();
    assert_eq!(o.code, Some(1), "{}", o.describe());
    assert_eq!(o.stderr, "", "{}", o.describe());
    assert_eq!(
        o.json_lines().unwrap(),
        [
            json!({"id": a, "status": "succeeded", "finished": true, "last_error": null}),
            json!({"id": dead, "status": "dead", "finished": true,
                   "last_error": {"code": "bad_thing", "message": "it broke", "retryable": false}}),
            json!({"id": slow, "status": "succeeded", "finished": true, "last_error": null}),
        ]
    );
    let row = task_row(&db.pool, dead).await.unwrap();
    assert_eq!(row["status"], "dead");
    assert_eq!(row["last_error"]["code"], "bad_thing");
    assert_eq!(
        attempt_rows(&db.pool, dead).await.unwrap(),
        [(1, f.id.clone(), "failed".to_string())]
    );
    let o = f
        .cli
        .run(&["wait", &d_s, "--timeout", "90s"])
        .await
        .unwrap();
    assert_eq!(o.code, Some(1), "{}", o.describe());
    assert_eq!(
        o.stdout,
        format!("task {dead}: dead (bad_thing: it broke)\n")
    );

    // Not finished in time: exit 1, naming it; an unknown task: exit 2.
    let stuck = insert_task(&db.pool, TaskSpec::new("report.build", "queued"))
        .await
        .unwrap();
    let o = f
        .cli
        .run(&["wait", &stuck.to_string(), "--timeout", "1s"])
        .await
        .unwrap();
    assert_eq!(o.code, Some(1), "{}", o.describe());
    assert_eq!(o.stdout, format!("task {stuck}: not finished: queued\n"));
    assert!(o.stderr.contains(&stuck.to_string()), "{}", o.describe());
    let o = f
        .cli
        .run(&["wait", &a_s, "999999", "--timeout", "30s"])
        .await
        .unwrap();
    assert!(refused(&o, 2).ends_with("(not found)"), "{}", o.describe());
    db.drop_db().await.unwrap();
}

// -------------------------------------------------------------------------------------------
// T27: two operators issuing conflicting actions; viewers denied
// -------------------------------------------------------------------------------------------

const ALICE: &str = "alice-operator-secret-0123456789";
const BOB: &str = "bob-operator-secret-9876543210ab";
const VIEWER: &str = "val-viewer-secret-fedcba987654321";
const T27_TYPE: &str = "t27.job";

fn t27_config() -> PathBuf {
    let path = scratch_dir("leasehold-cli-t27").unwrap().join("agent.toml");
    std::fs::write(
        &path,
        format!(
            "[[tokens]]\nname = \"alice\"\nrole = \"operator\"\nsecret = {ALICE:?}\n\n\
             [[tokens]]\nname = \"bob\"\nrole = \"operator\"\nsecret = {BOB:?}\n\n\
             [[tokens]]\nname = \"val\"\nrole = \"viewer\"\nsecret = {VIEWER:?}\n"
        ),
    )
    .unwrap();
    path
}

/// Audit rows with their ids, after `after`, of `actions` on `target_prefix…`.
async fn audit_since(pool: &PgPool, after: i64) -> Vec<(i64, AuditRow)> {
    let rows: Vec<(i64, String, String, String, String, String)> = sqlx::query_as(
        "SELECT id, actor, role, action, target, result FROM audit_log WHERE id > $1 ORDER BY id",
    )
    .bind(after)
    .fetch_all(pool)
    .await
    .unwrap();
    rows.into_iter()
        .map(|(id, a, r, ac, t, res)| (id, (a, r, ac, t, res)))
        .collect()
}

async fn last_audit_id(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT coalesce(max(id), 0) FROM audit_log")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Per task id: `Some(json line)` for an accepted call, `None` for a refused one (its stderr
/// line), from one `cancel`/`requeue` process over `ids`. Every id must be answered once.
fn answers(o: &CliOutput, verb: &str, ids: &[i64]) -> BTreeMap<i64, Option<Value>> {
    let mut out = BTreeMap::new();
    for line in o.json_lines().unwrap() {
        let id = line["id"].as_i64().unwrap();
        // "Already finished" / "already waiting": the agent refused (audited `failed`) and the
        // CLI said why without calling it a failure.
        let refused = line["outcome"]
            .as_str()
            .is_some_and(|o| o.starts_with("already_"));
        let answer = (!refused).then_some(line);
        assert!(
            out.insert(id, answer).is_none(),
            "{id} twice: {}",
            o.describe()
        );
    }
    for line in o.stderr.lines() {
        let id: i64 = line
            .strip_prefix(&format!("leasehold: {verb} task "))
            .and_then(|rest| rest.split(':').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("an unexpected error line {line:?}: {}", o.describe()));
        assert!(
            line.ends_with("(failed precondition)"),
            "{line}: {}",
            o.describe()
        );
        assert!(
            out.insert(id, None).is_none(),
            "{id} twice: {}",
            o.describe()
        );
    }
    assert_eq!(
        out.keys().copied().collect::<Vec<_>>(),
        {
            let mut sorted = ids.to_vec();
            sorted.sort_unstable();
            sorted
        },
        "every id answered once: {}",
        o.describe()
    );
    // "Already finished / waiting" answers are said on stdout and are not failures.
    let refused_any = !o.stderr.trim().is_empty();
    assert_eq!(
        o.code,
        Some(if refused_any { 2 } else { 0 }),
        "{}",
        o.describe()
    );
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t27_conflicting_operators_make_only_legal_transitions_and_viewers_are_denied() {
    let db = TestDb::new().await.unwrap();
    let config = t27_config();
    let mut f = start(&db, "t27", "noop", &["--config", config.to_str().unwrap()]).await;
    let alice = f.cli.with_token(ALICE);
    let bob = f.cli.with_token(BOB);
    let val = f.cli.with_token(VIEWER);

    // --- cancel against requeue on dead and queued tasks of a type nobody runs.
    let mut initial: BTreeMap<i64, &str> = BTreeMap::new();
    for i in 0..16 {
        let status = if i % 2 == 0 { "dead" } else { "queued" };
        let id = insert_task(&db.pool, TaskSpec::new(T27_TYPE, status))
            .await
            .unwrap();
        initial.insert(id, status);
    }
    let ids: Vec<i64> = initial.keys().copied().collect();
    let forward: Vec<String> = ids.iter().map(i64::to_string).collect();
    let backward: Vec<String> = forward.iter().rev().cloned().collect();
    let mark = last_audit_id(&db.pool).await;
    // Per (operator, task): the answers in call order.
    let mut said: BTreeMap<(&str, i64), Vec<Option<Value>>> = BTreeMap::new();
    for _round in 0..3 {
        let mut cancel_args = vec!["--output", "json", "cancel", "--no-wait"];
        cancel_args.extend(forward.iter().map(String::as_str));
        let mut requeue_args = vec!["--output", "json", "requeue"];
        requeue_args.extend(backward.iter().map(String::as_str));
        let (c, r) = tokio::join!(alice.run(&cancel_args), bob.run(&requeue_args));
        let (c, r) = (c.unwrap(), r.unwrap());
        for (id, answer) in answers(&c, "cancel", &ids) {
            if let Some(line) = &answer {
                assert_eq!(line["outcome"], "cancelled", "{line}");
                assert_eq!(line["status"], "cancelled", "{line}");
            }
            said.entry(("alice", id)).or_default().push(answer);
        }
        for (id, answer) in answers(&r, "requeue", &ids) {
            said.entry(("bob", id)).or_default().push(answer);
        }
    }
    // Replay each task's audit rows through the state machine, in commit order (each action
    // locks the row, so its audit row is written after the previous one committed).
    let rows = audit_since(&db.pool, mark).await;
    assert_eq!(rows.len(), 2 * 3 * ids.len(), "one audit row per call");
    for id in &ids {
        let target = format!("task:{id}");
        let mut state = initial[id].to_string();
        let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
        for (_, (actor, role, action, row_target, result)) in
            rows.iter().filter(|r| r.1.3 == target)
        {
            assert_eq!(role, "operator");
            assert_eq!(row_target, &target);
            let who = match (actor.as_str(), action.as_str()) {
                ("alice", "cancel") => "alice",
                ("bob", "requeue") => "bob",
                other => panic!("an unexpected audit row {other:?} on {target}"),
            };
            let k = seen.entry(who).or_default();
            let answer = &said[&(who, *id)][*k];
            *k += 1;
            let before = state.clone();
            match (action.as_str(), result.as_str()) {
                ("cancel", "applied") => {
                    assert_eq!(before, "queued", "cancel applied to a {before} task {id}");
                    state = "cancelled".into();
                }
                ("cancel", "failed") => {
                    assert!(
                        before == "dead" || before == "cancelled",
                        "cancel of a {before} task {id} failed"
                    );
                }
                ("requeue", "applied") => {
                    assert!(
                        before == "dead" || before == "cancelled",
                        "requeue applied to a {before} task {id}"
                    );
                    state = "queued".into();
                }
                ("requeue", "failed") => {
                    assert_eq!(before, "queued", "requeue of a {before} task {id} failed");
                }
                other => panic!("result {other:?} on {target}"),
            }
            // The answer each operator got matches the row.
            match answer {
                Some(line) => {
                    assert_eq!(result, "applied", "{who} was told {line} on {id}");
                    if who == "bob" {
                        assert_eq!(line["previous"], before.as_str(), "{line}");
                    }
                }
                None => assert_eq!(result, "failed", "{who} was refused on {id}"),
            }
        }
        assert_eq!(seen.get("alice"), Some(&3), "task {id}");
        assert_eq!(seen.get("bob"), Some(&3), "task {id}");
        let row = task_row(&db.pool, *id).await.unwrap();
        assert_eq!(row["status"], state.as_str(), "task {id}");
        match state.as_str() {
            "cancelled" => assert!(!row["finished_at"].is_null(), "{row}"),
            "queued" => assert!(row["finished_at"].is_null() && row["attempt"] == 0, "{row}"),
            "dead" => assert_eq!(initial[id], "dead", "{row}"),
            other => panic!("task {id} ended {other}"),
        }
    }
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM task_attempts")
            .await
            .unwrap(),
        0
    );

    // --- pause against resume, and two different limits, from two concurrent operators.
    // Answers that disagree with the audit row of their call, reported at the end.
    let mut disagreements: Vec<String> = Vec::new();
    const CALLS: usize = 8;
    let scope = format!("policy:{T27_TYPE}");
    let mark = last_audit_id(&db.pool).await;
    let (paused_said, resumed_said) = tokio::join!(
        async {
            let mut out = Vec::new();
            for _ in 0..CALLS {
                out.push(
                    alice
                        .run(&["--output", "json", "pause", T27_TYPE])
                        .await
                        .unwrap(),
                );
            }
            out
        },
        async {
            let mut out = Vec::new();
            for _ in 0..CALLS {
                out.push(
                    bob.run(&["--output", "json", "resume", T27_TYPE])
                        .await
                        .unwrap(),
                );
            }
            out
        }
    );
    let rows = audit_since(&db.pool, mark).await;
    assert_eq!(rows.len(), 2 * CALLS, "one audit row per call: {rows:?}");
    let mut paused = false;
    let (mut ai, mut bi) = (0, 0);
    for (_, (actor, role, action, target, result)) in &rows {
        assert_eq!(
            (role.as_str(), action.as_str(), target),
            ("operator", "policy_set", &scope)
        );
        let (o, to) = match actor.as_str() {
            "alice" => {
                ai += 1;
                (&paused_said[ai - 1], true)
            }
            "bob" => {
                bi += 1;
                (&resumed_said[bi - 1], false)
            }
            other => panic!("an audit row by {other}"),
        };
        if result == "failed" {
            // The change was refused (the policy guard timed out): a definite error, nothing
            // changed.
            assert_ne!(o.code, Some(0), "{}", o.describe());
            refused(o, o.code.unwrap());
            continue;
        }
        assert_eq!(o.code, Some(0), "{}", o.describe());
        // No live agent serves the t27 type: a pause succeeds and warns about that.
        assert!(
            o.stderr
                .lines()
                .all(|l| l.starts_with("leasehold: warning: ")),
            "{}",
            o.describe()
        );
        let changed = paused != to;
        assert_eq!(
            result,
            if changed { "applied" } else { "noop" },
            "{actor} set paused {to} over {paused}"
        );
        let answer = o.json().unwrap();
        let expected = json!({"task_type": T27_TYPE, "paused": to, "changed": changed});
        if answer != expected {
            disagreements.push(format!(
                "`{}` by {actor}: audit row {result} (paused {paused} -> {to}), answer {answer}",
                o.args.join(" ")
            ));
        }
        paused = to;
    }
    assert_eq!(policy(&db.pool, T27_TYPE).await.map(|p| p.1), Some(paused));

    let mark = last_audit_id(&db.pool).await;
    let (three_said, five_said) = tokio::join!(
        async {
            let mut out = Vec::new();
            for _ in 0..CALLS {
                out.push(
                    alice
                        .run(&[
                            "--output",
                            "json",
                            "concurrency",
                            "set",
                            "--type",
                            T27_TYPE,
                            "3",
                        ])
                        .await
                        .unwrap(),
                );
            }
            out
        },
        async {
            let mut out = Vec::new();
            for _ in 0..CALLS {
                out.push(
                    bob.run(&[
                        "--output",
                        "json",
                        "concurrency",
                        "set",
                        "--type",
                        T27_TYPE,
                        "5",
                    ])
                    .await
                    .unwrap(),
                );
            }
            out
        }
    );
    let rows = audit_since(&db.pool, mark).await;
    assert_eq!(rows.len(), 2 * CALLS, "one audit row per call: {rows:?}");
    let mut limit: Option<u64> = None;
    let (mut ai, mut bi) = (0, 0);
    for (_, (actor, role, action, target, result)) in &rows {
        assert_eq!(
            (role.as_str(), action.as_str(), target),
            ("operator", "policy_set", &scope)
        );
        let (o, to) = match actor.as_str() {
            "alice" => {
                ai += 1;
                (&three_said[ai - 1], 3)
            }
            "bob" => {
                bi += 1;
                (&five_said[bi - 1], 5)
            }
            other => panic!("an audit row by {other}"),
        };
        if result == "failed" {
            assert_ne!(o.code, Some(0), "{}", o.describe());
            refused(o, o.code.unwrap());
            continue;
        }
        ok(o);
        let changed = limit != Some(to);
        assert_eq!(result, if changed { "applied" } else { "noop" });
        let answer = o.json().unwrap();
        let expected =
            json!({"scope": "type", "task_type": T27_TYPE, "previous": limit, "limit": to});
        if answer != expected {
            disagreements.push(format!(
                "`{}` by {actor}: audit row {result} (limit {limit:?} -> {to}), answer {answer}",
                o.args.join(" ")
            ));
        }
        limit = Some(to);
    }
    assert_eq!(
        policy(&db.pool, T27_TYPE).await,
        Some((limit.map(|l| i32::try_from(l).unwrap()), paused))
    );

    // --- a viewer: every action exit 4, audited as denied, nothing changed. Denials are
    // aggregated (DESIGN §10, issue 19): the first of each (peer address, actor, action) is a
    // row at once, the rest of its minute one counted row, written when the window closes or
    // the agent stops.
    let before = digest(&db.pool).await;
    let mark = last_audit_id(&db.pool).await;
    let queued = *ids.iter().find(|id| initial[*id] == "queued").unwrap();
    let (q, agent) = (queued.to_string(), format!("agent:{}", f.id));
    let task = format!("task:{queued}");
    let calls: Vec<(Vec<&str>, &str, &str)> = vec![
        (vec!["enqueue", T27_TYPE], "enqueue", "type:t27.job"),
        (vec!["cancel", q.as_str()], "cancel", task.as_str()),
        (vec!["requeue", q.as_str()], "requeue", task.as_str()),
        (
            vec!["dlq", "requeue", "--all"],
            "requeue_dead",
            "dead-letter queue",
        ),
        (
            vec!["dlq", "requeue", "--dry-run", "--type", T27_TYPE],
            "requeue_dead",
            "dead-letter queue",
        ),
        (
            vec!["concurrency", "set", "--global", "1"],
            "policy_set",
            "policy:*",
        ),
        (
            vec!["concurrency", "set", "--type", T27_TYPE, "1"],
            "policy_set",
            scope.as_str(),
        ),
        (
            vec!["concurrency", "set", "--local", "2"],
            "set_concurrency",
            agent.as_str(),
        ),
        (vec!["pause", T27_TYPE], "policy_set", scope.as_str()),
        (vec!["resume", T27_TYPE], "policy_set", scope.as_str()),
        (vec!["drain"], "drain", agent.as_str()),
    ];
    // Every refused call's row, were each written.
    let mut denied_calls = Vec::new();
    for (args, action, target) in &calls {
        for output in ["table", "json"] {
            let mut full = vec!["--output", output];
            full.extend(args.iter().copied());
            let o = val.run(&full).await.unwrap();
            let line = refused(&o, 4);
            assert!(line.ends_with("(permission denied)"), "{}", o.describe());
            denied_calls.push(audit("val", "viewer", action, target, "denied"));
        }
    }
    // No token at all over TCP: unauthenticated, exit 4, audited too. (Through the agent's
    // Unix socket, the CLI's default on loopback, this test's own user is an operator.)
    let o = f.cli.run(&["--no-socket", "cancel", &q]).await.unwrap();
    assert!(
        refused(&o, 4).ends_with("(unauthenticated)"),
        "{}",
        o.describe()
    );
    denied_calls.push(audit(
        "unauthenticated",
        "viewer",
        "cancel",
        &task,
        "denied",
    ));
    // At once: the first call of each key.
    let mut keys = BTreeSet::new();
    let expected: Vec<AuditRow> = denied_calls
        .iter()
        .filter(|r| keys.insert((r.0.clone(), r.2.clone())))
        .cloned()
        .collect();
    // Viewers may read: no audit rows for that.
    for args in [
        &["tasks", "ls"][..],
        &["agents", "ls"],
        &["tasks", "show", &q],
        &["dlq", "ls"],
    ] {
        let o = val.run(args).await.unwrap();
        ok(&o);
    }
    let rows: Vec<AuditRow> = audit_since(&db.pool, mark)
        .await
        .into_iter()
        .map(|(_, r)| r)
        .collect();
    assert_eq!(rows, expected);
    assert_eq!(digest(&db.pool).await, before);
    let first_rows = counted_audit_rows(&db.pool, mark).await.unwrap();
    for r in &first_rows {
        assert_eq!(r.count, 1, "a first row stands for one call: {r:?}");
        let peer = r.peer.as_deref().unwrap_or_default();
        if r.actor == "val" {
            // The CLI went through the agent's socket: the row names the caller's uid.
            assert!(peer.starts_with("unix:uid:"), "{r:?}");
        } else {
            let port = peer.strip_prefix("127.0.0.1:").map(str::parse::<u16>);
            assert!(matches!(port, Some(Ok(_))), "{r:?}");
        }
    }
    // The viewer's drain did not stop the agent.
    assert!(f.agent.is_running());
    let o = alice
        .run(&["--output", "json", "agents", "ls"])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(o.json().unwrap()["agents"][0]["state"], "running");
    // A clean stop writes the counted rest of each key: per key the counts sum to the refused
    // calls, the first row then one for the rest.
    f.agent.sigterm().unwrap();
    let status = f.agent.wait_exit(WAIT).await.unwrap();
    assert!(status.success(), "agent exit: {status}");
    let mut want: BTreeMap<(String, String), i64> = BTreeMap::new();
    for c in &denied_calls {
        *want.entry((c.0.clone(), c.2.clone())).or_default() += 1;
    }
    let mut got: BTreeMap<(String, String), Vec<i64>> = BTreeMap::new();
    for r in counted_audit_rows(&db.pool, mark).await.unwrap() {
        assert_eq!(r.result, "denied", "{r:?}");
        got.entry((r.actor.clone(), r.action.clone()))
            .or_default()
            .push(r.count);
    }
    let expected_counts: BTreeMap<(String, String), Vec<i64>> = want
        .iter()
        .map(|(k, n)| (k.clone(), if *n == 1 { vec![1] } else { vec![1, n - 1] }))
        .collect();
    assert_eq!(
        got, expected_counts,
        "per (actor, action): the first denial, then one row counting the rest ({want:?} calls)"
    );
    if let Some(dir) = config.parent() {
        let _ = std::fs::remove_dir_all(dir);
    }
    db.drop_db().await.unwrap();
    // Each answer must say what its audit row says (DESIGN §10: the row is written with the
    // change; the caller is told the same).
    assert!(
        disagreements.is_empty(),
        "answers that disagree with their audit rows:\n{}",
        disagreements.join("\n")
    );
}
