#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The interactive console end to end (TESTING.md §4): `leasehold` in a real terminal (a
//! private tmux server, [`leasehold_tests::tmux`]) against real agents and a real database.
//! Each test drives the console with keys as an operator would, waits for what the screen
//! shows, and then checks the rows the keys changed (or did not change) in `tasks`,
//! `policies`, `task_attempts` and `audit_log`.
//!
//! Covered: a live lease shown and the terminal restored on `q`; an agent killed with
//! SIGKILL (its leases "agent lost", the Renewals view, the agent suspect); a dead letter
//! requeued with `r` `y`; a running task cancelled with `x` `y`; a type's limit set from the
//! Types view and obeyed; a viewer token refused locally (nothing sent, nothing audited); and
//! T33, escape sequences and bidi controls in a payload and an error shown inert; the console
//! going on through another agent when its seed dies; a prompt replacing the footer line; a
//! schedule shown in view 7, triggered with `t` `y` and disabled with `d` `y`; and from issue
//! 20, the task pane following its task after `r` `y` and while open, Enter confirming a
//! typed count and `q` only closing dialogs and panes, marks going with their tasks and the
//! cursor staying on its task while the rows re-sort.
//!
//! The agents run with 10 s leases (see [`TIMINGS`]): the console's "agent lost" comes from its
//! stream, not from lease expiry, so nothing here waits on a quick takeover.

use std::time::Duration;

use leasehold_tests::cli::{Cli, CliOutput};
use leasehold_tests::fleet::spawn_agent;
use leasehold_tests::grpc::agent_address;
use leasehold_tests::tmux::{Console, line_starting};
use leasehold_tests::{
    AgentHandle, TestDb, attempt_rows, audit_rows, scratch_dir, task_status, wait_until,
};
use serde_json::{Value, json};
use sqlx::PgPool;

/// Generous: the machines are shared and noisy.
const WAIT: Duration = Duration::from_secs(60);
/// A sleep that outlives any test.
const LONG_MS: u64 = 600_000;
/// The handlers of every test agent.
const HANDLERS: &str = "sleep,noop,fail";
/// Lease timings of every test agent, after the harness's fast ones: a 400 ms renewal
/// timeout loses leases on a loaded machine, and nothing here needs a quick takeover.
const TIMINGS: [&str; 6] = ["--lease-ttl", "10s", "--heartbeat", "2s", "--grace", "2s"];

type AuditRow = (String, String, String, String, String);

/// An audit row of this test's own user: the console reaches the agent through its Unix
/// socket, where the agent names the caller by uid (`uid:0(root)`).
fn local(action: &str, target: &str, result: &str) -> AuditRow {
    let uid = leasehold_shared::local::current_uid().unwrap();
    (
        leasehold_shared::local::uid_label(uid),
        "operator".into(),
        action.into(),
        target.into(),
        result.into(),
    )
}

/// One agent under test and the CLI aimed at it.
struct Fixture {
    agent: AgentHandle,
    /// Its agent id (lease owner), `name#n`.
    id: String,
    /// Its gRPC address.
    addr: String,
    cli: Cli,
}

async fn start(db: &TestDb, name: &str, extra: &[&str]) -> Fixture {
    start_serving(db, name, HANDLERS, extra).await
}

async fn start_serving(db: &TestDb, name: &str, handlers: &str, extra: &[&str]) -> Fixture {
    let mut args = TIMINGS.to_vec();
    args.extend_from_slice(extra);
    let agent = spawn_agent(
        "leasehold-agent",
        &db.url,
        name,
        handlers,
        &args,
        Vec::new(),
    )
    .await
    .unwrap();
    let id = agent.wait_registered(&db.pool, name, WAIT).await.unwrap();
    let addr = agent_address(&db.pool, name, WAIT).await.unwrap();
    let cli = Cli::new(&addr).await.unwrap();
    Fixture {
        agent,
        id,
        addr,
        cli,
    }
}

fn ok(o: &CliOutput) {
    assert_eq!(o.code, Some(0), "{}", o.describe());
}

/// Enqueues through the CLI and returns the new task's id.
async fn enqueue(cli: &Cli, task_type: &str, payload: &Value, extra: &[&str]) -> i64 {
    let payload = payload.to_string();
    let mut args = vec![
        "--output",
        "json",
        "enqueue",
        task_type,
        "--payload",
        &payload,
    ];
    args.extend_from_slice(extra);
    let o = cli.run(&args).await.unwrap();
    ok(&o);
    o.json().unwrap()["id"].as_i64().unwrap()
}

async fn wait_status(pool: &PgPool, id: i64, status: &str) {
    wait_until(&format!("task {id} is {status}"), WAIT, || async move {
        Ok(task_status(pool, id).await? == status)
    })
    .await
    .unwrap();
}

/// `(running, waiting)` tasks of a type: running or cancel_requested, and queued or
/// retry_wait.
async fn running_of(pool: &PgPool, task_type: &str) -> (i64, i64) {
    sqlx::query_as(
        "SELECT count(*) FILTER (WHERE status IN ('running', 'cancel_requested')), \
                count(*) FILTER (WHERE status IN ('queued', 'retry_wait')) \
         FROM tasks WHERE task_type::text = $1",
    )
    .bind(task_type)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Ids of the running tasks held by `owner`.
async fn held_by(pool: &PgPool, owner: &str) -> Vec<i64> {
    sqlx::query_scalar(
        "SELECT id FROM tasks WHERE status = 'running' AND lease_owner::text = $1 ORDER BY id",
    )
    .bind(owner)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// `(max_concurrency, paused)` of a policy row, `None` when there is no row.
async fn policy(pool: &PgPool, scope: &str) -> Option<(Option<i32>, bool)> {
    leasehold_tests::inspect::policy_row(pool, scope)
        .await
        .unwrap()
}

/// The screen below the console's three header lines (counts, view tabs, throughput).
fn body(screen: &str) -> &str {
    screen.splitn(4, '\n').nth(3).unwrap_or("")
}

/// The line of the table row whose first cell is `first`, below the header.
fn table_line<'a>(screen: &'a str, first: &str) -> Option<&'a str> {
    line_starting(body(screen), first)
}

/// The words of the table row of task `id` on the screen, if it is shown.
fn row(screen: &str, id: i64) -> Option<Vec<&str>> {
    table_line(screen, &id.to_string()).map(|l| l.split_whitespace().collect())
}

/// Whether the screen shows task `id` of type `task_type` held by `agent` in state `state`
/// (the last words of a lease row).
fn lease_shown(screen: &str, id: i64, task_type: &str, agent: &str, state: &str) -> bool {
    let Some(line) = table_line(screen, &id.to_string()) else {
        return false;
    };
    let words: Vec<&str> = line.split_whitespace().collect();
    words.len() > 3 && words[1] == task_type && words[2] == agent && line.ends_with(state)
}

/// The last line of the screen (the footer / status line).
fn status_line(screen: &str) -> &str {
    screen.lines().last().unwrap_or("").trim()
}

// -------------------------------------------------------------------------------------------
// A live lease; `q` restores the terminal
// -------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_lease_is_shown_and_q_restores_the_terminal() {
    let db = TestDb::new().await.unwrap();
    let f = start(&db, "live", &[]).await;
    let id = enqueue(&f.cli, "sleep", &json!({"ms": LONG_MS}), &[]).await;
    wait_status(&db.pool, id, "running").await;

    let console = Console::start(&f.addr, &[]).await.unwrap();
    let screen = console
        .wait_for(&format!("task {id} (sleep) held by {}", f.id), |s| {
            lease_shown(s, id, "sleep", &f.id, "ok")
        })
        .await
        .unwrap();
    assert!(
        screen.contains("Leases [Tasks] | Locks | Shards (1)"),
        "{screen}"
    );
    assert!(screen.contains("[1 Leases]"), "{screen}");
    assert_eq!(console.tmux().pane_format("#{alternate_on}").unwrap(), "1");

    console.keys(&["q"]).unwrap();
    assert_eq!(console.wait_exit().await.unwrap(), 0);
    let screen = console.screen().unwrap();
    // The shell's own screen is back: only the EXIT line, nothing of the console's.
    let lines: Vec<&str> = screen.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines, ["EXIT=0"], "{screen}");
    assert_eq!(console.tmux().pane_format("#{alternate_on}").unwrap(), "0");
    assert_eq!(
        console.tmux().pane_format("#{cursor_flag}").unwrap(),
        "1",
        "the cursor is shown again"
    );

    // Looking changed nothing.
    assert_eq!(task_status(&db.pool, id).await.unwrap(), "running");
    assert_eq!(
        audit_rows(&db.pool).await.unwrap(),
        [local("enqueue", &format!("task:{id}"), "applied")]
    );
    drop(f);
    db.drop_db().await.unwrap();
}

// -------------------------------------------------------------------------------------------
// kill -9 of an agent: its leases "agent lost", the Renewals view, the agent suspect
// -------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_agent_shows_its_leases_lost_in_leases_and_renewals() {
    let db = TestDb::new().await.unwrap();
    let seed = start(&db, "web-1", &["--concurrency", "2"]).await;
    let mut victim = start(&db, "web-2", &["--concurrency", "2"]).await;
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(enqueue(&seed.cli, "sleep", &json!({"ms": LONG_MS}), &[]).await);
    }
    wait_until("two sleeps run on each agent", WAIT, || {
        let (pool, a, b) = (db.pool.clone(), seed.id.clone(), victim.id.clone());
        async move { Ok(held_by(&pool, &a).await.len() == 2 && held_by(&pool, &b).await.len() == 2) }
    })
    .await
    .unwrap();
    let kept = held_by(&db.pool, &seed.id).await;
    let lost = held_by(&db.pool, &victim.id).await;

    let console = Console::start(&seed.addr, &[]).await.unwrap();
    console
        .wait_for("all four leases ok, on both agents", |s| {
            kept.iter()
                .all(|&id| lease_shown(s, id, "sleep", &seed.id, "ok"))
                && lost
                    .iter()
                    .all(|&id| lease_shown(s, id, "sleep", &victim.id, "ok"))
        })
        .await
        .unwrap();
    console
        .wait_text("agents 2 up 0 suspect 0 down")
        .await
        .unwrap();

    victim.agent.kill9().unwrap();
    victim.agent.wait_exit(WAIT).await.unwrap();
    let screen = console
        .wait_for("the killed agent's leases as agent lost", |s| {
            lost.iter()
                .all(|&id| lease_shown(s, id, "sleep", &victim.id, "agent lost"))
        })
        .await
        .unwrap();
    // The survivor's leases are untouched.
    for &id in &kept {
        assert!(
            lease_shown(&screen, id, "sleep", &seed.id, "ok"),
            "{screen}"
        );
    }

    // The Renewals view lists the lost leases, and the history says what happened.
    console.keys(&["3"]).unwrap();
    let screen = console
        .wait_for("the lost leases in Renewals", |s| {
            s.contains("[3 Renewals]")
                && lost
                    .iter()
                    .all(|&id| lease_shown(s, id, "sleep", &victim.id, "agent lost"))
                && s.contains("Renewal problems as they happened")
                && lost.iter().all(|&id| {
                    s.contains(&format!(
                        "task {id} (sleep) epoch 1 on {}: agent lost",
                        victim.id
                    ))
                })
        })
        .await
        .unwrap();
    for &id in &kept {
        assert!(
            row(&screen, id).is_none(),
            "a healthy lease in Renewals:\n{screen}"
        );
    }

    // The header counts it suspect (its stream is lost), or down once its heartbeat is older
    // than TTL + grace; the Agents view says so.
    console
        .wait_for("the killed agent suspect or down in the header", |s| {
            let head = s.lines().next().unwrap_or("");
            head.contains("agents 1 up 1 suspect 0 down")
                || head.contains("agents 1 up 0 suspect 1 down")
        })
        .await
        .unwrap();
    console.keys(&["6"]).unwrap();
    let screen = console
        .wait_for("the killed agent suspect in Agents", |s| {
            s.contains("[6 Agents]")
                && table_line(s, &victim.id)
                    .is_some_and(|l| l.contains("suspect") || l.contains("down"))
        })
        .await
        .unwrap();
    let survivor = table_line(&screen, &seed.id).unwrap();
    assert!(
        survivor.contains("up") && survivor.contains("live"),
        "{screen}"
    );

    // Positive control: the database saw the kill too; the lost leases were recovered.
    wait_until("the killed agent's leases are recovered", WAIT, || {
        let (pool, lost) = (db.pool.clone(), lost.clone());
        async move {
            for id in lost {
                let attempts = attempt_rows(&pool, id).await?;
                if attempts.first().map(|a| a.2.as_str()) != Some("lease_expired") {
                    return Ok(false);
                }
            }
            Ok(true)
        }
    })
    .await
    .unwrap();
    console.keys(&["q"]).unwrap();
    assert_eq!(console.wait_exit().await.unwrap(), 0);
    drop((seed, victim));
    db.drop_db().await.unwrap();
}

// -------------------------------------------------------------------------------------------
// kill -9 of the agent given with --agent (the seed)
// -------------------------------------------------------------------------------------------

/// The console reads the registry and the overview from the seed first, "then any agent that
/// answered before" (client/fleet.rs), and sends actions to the seed. When the seed dies the
/// console should go on through the agents it discovered: the dead seed turns down, and a
/// lease held by a live agent can still be cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_goes_on_through_other_agents_when_its_seed_dies() {
    let db = TestDb::new().await.unwrap();
    // The seed runs nothing; the worker holds the lease.
    let mut seed = start_serving(&db, "seed", "noop", &[]).await;
    let worker = start_serving(&db, "worker", "sleep", &[]).await;
    let id = enqueue(&seed.cli, "sleep", &json!({"ms": LONG_MS}), &[]).await;
    wait_status(&db.pool, id, "running").await;

    let console = Console::start(&seed.addr, &[]).await.unwrap();
    console
        .wait_for(&format!("task {id} on {}", worker.id), |s| {
            lease_shown(s, id, "sleep", &worker.id, "ok")
                && s.contains("agents 2 up 0 suspect 0 down")
        })
        .await
        .unwrap();
    seed.agent.kill9().unwrap();
    seed.agent.wait_exit(WAIT).await.unwrap();

    // Its heartbeat ages past TTL + grace: down, as the worker's registry says.
    console.keys(&["6"]).unwrap();
    console
        .wait_for("the dead seed down in the header and in Agents", |s| {
            s.contains("agents 1 up 0 suspect 1 down")
                && table_line(s, &seed.id).is_some_and(|l| l.contains("down"))
        })
        .await
        .unwrap();

    // The worker is alive: cancelling its task works.
    console.keys(&["1"]).unwrap();
    console
        .wait_for(&format!("task {id} still ok"), |s| {
            lease_shown(s, id, "sleep", &worker.id, "ok")
        })
        .await
        .unwrap();
    console.keys(&["x"]).unwrap();
    console.wait_text("Cancel 1 task?").await.unwrap();
    console.keys(&["y"]).unwrap();
    console
        .wait_for("the cancel's result", |s| {
            status_line(s).contains("cancel 1: 1 cancel requested")
        })
        .await
        .unwrap();
    wait_status(&db.pool, id, "cancelled").await;
    console.keys(&["q"]).unwrap();
    assert_eq!(console.wait_exit().await.unwrap(), 0);
    drop((seed, worker));
    db.drop_db().await.unwrap();
}

// -------------------------------------------------------------------------------------------
// Dead letters: `r` `y` requeues
// -------------------------------------------------------------------------------------------

/// A `fail` task dead after its one attempt, its type then paused, so a requeue leaves it
/// queued instead of failing again at once.
async fn dead_task_of_a_paused_type(db: &TestDb, f: &Fixture) -> i64 {
    let id = enqueue(
        &f.cli,
        "fail",
        &json!({"message": "boom"}),
        &["--max-attempts", "1"],
    )
    .await;
    wait_status(&db.pool, id, "dead").await;
    ok(&f.cli.run(&["pause", "fail"]).await.unwrap());
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_is_requeued_with_r_and_y() {
    let db = TestDb::new().await.unwrap();
    let f = start(&db, "dlq", &[]).await;
    let id = dead_task_of_a_paused_type(&db, &f).await;

    let console = Console::start(&f.addr, &[]).await.unwrap();
    console.keys(&["4"]).unwrap();
    let screen = console
        .wait_for(&format!("dead task {id}"), |s| {
            s.contains("[4 Dead letters]")
                && row(s, id).is_some_and(|w| w.len() > 2 && w[1] == "fail")
        })
        .await
        .unwrap();
    assert!(
        table_line(&screen, &id.to_string())
            .unwrap()
            .contains("boom"),
        "{screen}"
    );

    console.keys(&["r"]).unwrap();
    let screen = console.wait_text("Requeue 1 task?").await.unwrap();
    assert!(screen.contains(&format!("ids: {id}")), "{screen}");
    // Nothing is sent before the confirmation.
    assert_eq!(task_status(&db.pool, id).await.unwrap(), "dead");
    console.keys(&["y"]).unwrap();
    let screen = console
        .wait_for("the requeue's result", |s| {
            status_line(s).contains("requeue 1: 1 requeued")
        })
        .await
        .unwrap();
    assert!(
        !screen.contains("Requeue 1 task?"),
        "dialog closed: {screen}"
    );
    wait_status(&db.pool, id, "queued").await;
    console
        .wait_text("the dead-letter queue is empty")
        .await
        .unwrap();

    assert_eq!(
        audit_rows(&db.pool).await.unwrap(),
        [
            local("enqueue", &format!("task:{id}"), "applied"),
            local("policy_set", "policy:fail", "applied"),
            local("requeue", &format!("task:{id}"), "applied"),
        ]
    );
    assert_eq!(
        attempt_rows(&db.pool, id).await.unwrap(),
        [(1, f.id.clone(), "failed".to_string())]
    );
    console.keys(&["q"]).unwrap();
    assert_eq!(console.wait_exit().await.unwrap(), 0);
    drop(f);
    db.drop_db().await.unwrap();
}

// -------------------------------------------------------------------------------------------
// Leases: `x` `y` cancels a running task
// -------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_task_is_cancelled_with_x_and_y() {
    let db = TestDb::new().await.unwrap();
    let f = start(&db, "cancel", &[]).await;
    let id = enqueue(&f.cli, "sleep", &json!({"ms": LONG_MS}), &[]).await;
    wait_status(&db.pool, id, "running").await;

    let console = Console::start(&f.addr, &[]).await.unwrap();
    console
        .wait_for(&format!("task {id} running"), |s| {
            lease_shown(s, id, "sleep", &f.id, "ok")
        })
        .await
        .unwrap();
    console.keys(&["x"]).unwrap();
    let screen = console.wait_text("Cancel 1 task?").await.unwrap();
    assert!(screen.contains(&format!("ids: {id}")), "{screen}");
    assert_eq!(task_status(&db.pool, id).await.unwrap(), "running");
    console.keys(&["y"]).unwrap();
    console
        .wait_for("the cancel's result", |s| {
            status_line(s).contains("cancel 1: 1 cancel requested")
        })
        .await
        .unwrap();
    wait_status(&db.pool, id, "cancelled").await;
    // The holder stopped it: the lease goes from the screen.
    console.wait_text("no live leases").await.unwrap();

    assert_eq!(
        attempt_rows(&db.pool, id).await.unwrap(),
        [(1, f.id.clone(), "cancelled".to_string())]
    );
    assert_eq!(
        audit_rows(&db.pool).await.unwrap(),
        [
            local("enqueue", &format!("task:{id}"), "applied"),
            local("cancel", &format!("task:{id}"), "applied"),
        ]
    );
    console.keys(&["q"]).unwrap();
    assert_eq!(console.wait_exit().await.unwrap(), 0);
    drop(f);
    db.drop_db().await.unwrap();
}

// -------------------------------------------------------------------------------------------
// Types: `=` sets a limit, `+` raises it; both obeyed
// -------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_limit_set_in_the_types_view_is_obeyed() {
    let db = TestDb::new().await.unwrap();
    let f = start(&db, "limits", &[]).await;
    // One quick task, so the type has a row in the overview.
    let first = enqueue(&f.cli, "sleep", &json!({"ms": 1}), &[]).await;
    wait_status(&db.pool, first, "succeeded").await;

    let console = Console::start(&f.addr, &[]).await.unwrap();
    console.keys(&["5"]).unwrap();
    let screen = console
        .wait_for("the sleep type, unlimited", |s| {
            s.contains("[5 Types]") && table_line(s, "sleep").is_some_and(|l| l.contains("0/-"))
        })
        .await
        .unwrap();
    assert!(
        table_line(&screen, "sleep").unwrap().ends_with("active"),
        "{screen}"
    );

    console.keys(&["="]).unwrap();
    console
        .wait_text("limit of sleep (number or unlimited):")
        .await
        .unwrap();
    console.type_text("2").unwrap();
    console
        .wait_text("limit of sleep (number or unlimited): 2")
        .await
        .unwrap();
    console.keys(&["Enter"]).unwrap();
    console
        .wait_for("the limit's result", |s| {
            status_line(s).contains("type sleep limit unlimited → 2")
        })
        .await
        .unwrap();
    assert_eq!(policy(&db.pool, "sleep").await, Some((Some(2), false)));

    let mut ids = Vec::new();
    for _ in 0..6 {
        ids.push(enqueue(&f.cli, "sleep", &json!({"ms": LONG_MS}), &[]).await);
    }
    wait_until("two sleeps run", WAIT, || {
        let pool = db.pool.clone();
        async move { Ok(running_of(&pool, "sleep").await.0 == 2) }
    })
    .await
    .unwrap();
    // While the limit holds, never more than two run and the others wait.
    for _ in 0..10 {
        let (running, waiting) = running_of(&db.pool, "sleep").await;
        assert!(running <= 2, "{running} sleeps running under a limit of 2");
        assert_eq!(running + waiting, 6);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    console
        .wait_for("sleep at its limit", |s| {
            table_line(s, "sleep").is_some_and(|l| l.contains("2/2") && l.ends_with("at limit"))
        })
        .await
        .unwrap();

    // `+` raises it by one: a third runs.
    console.keys(&["+"]).unwrap();
    console
        .wait_for("the raise's result", |s| {
            status_line(s).contains("type sleep limit 2 → 3")
        })
        .await
        .unwrap();
    assert_eq!(policy(&db.pool, "sleep").await, Some((Some(3), false)));
    wait_until("three sleeps run", WAIT, || {
        let pool = db.pool.clone();
        async move { Ok(running_of(&pool, "sleep").await.0 == 3) }
    })
    .await
    .unwrap();
    for _ in 0..5 {
        assert!(running_of(&db.pool, "sleep").await.0 <= 3);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let mut expected = vec![local("enqueue", &format!("task:{first}"), "applied")];
    expected.push(local("policy_set", "policy:sleep", "applied"));
    expected.extend(
        ids.iter()
            .map(|id| local("enqueue", &format!("task:{id}"), "applied")),
    );
    expected.push(local("policy_set", "policy:sleep", "applied"));
    assert_eq!(audit_rows(&db.pool).await.unwrap(), expected);
    let params: Vec<Value> =
        sqlx::query_scalar("SELECT params FROM audit_log WHERE action = 'policy_set' ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let limits: Vec<&Value> = params.iter().map(|p| &p["max_concurrency"]).collect();
    assert_eq!(limits, [&json!(2), &json!(3)]);
    console.keys(&["q"]).unwrap();
    assert_eq!(console.wait_exit().await.unwrap(), 0);
    drop(f);
    db.drop_db().await.unwrap();
}

/// A prompt replaces the footer line: nothing of the footer may show after the typed text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_replaces_the_footer_line() {
    let db = TestDb::new().await.unwrap();
    let f = start(&db, "prompt", &[]).await;
    let first = enqueue(&f.cli, "sleep", &json!({"ms": 1}), &[]).await;
    wait_status(&db.pool, first, "succeeded").await;
    let console = Console::start(&f.addr, &[]).await.unwrap();
    console.keys(&["5"]).unwrap();
    console
        .wait_for("the sleep type", |s| table_line(s, "sleep").is_some())
        .await
        .unwrap();
    console.keys(&["="]).unwrap();
    console.type_text("2").unwrap();
    let screen = console
        .wait_text("limit of sleep (number or unlimited): 2")
        .await
        .unwrap();
    assert_eq!(
        status_line(&screen),
        "limit of sleep (number or unlimited): 2",
        "{screen}"
    );
    console.escape().await.unwrap();
    console.keys(&["1", "/"]).unwrap();
    console.type_text("sl").unwrap();
    let screen = console
        .wait_for("the filter prompt", |s| status_line(s).starts_with("/sl"))
        .await
        .unwrap();
    assert_eq!(status_line(&screen), "/sl", "{screen}");
    drop(f);
    db.drop_db().await.unwrap();
}

// -------------------------------------------------------------------------------------------
// A viewer token: read-only, refused locally
// -------------------------------------------------------------------------------------------

const OPERATOR: &str = "ops-operator-secret-0123456789abcdef";
const VIEWER: &str = "val-viewer-secret-fedcba9876543210";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_token_makes_the_console_read_only_and_sends_nothing() {
    let db = TestDb::new().await.unwrap();
    let scratch = scratch_dir("leasehold-console-e2e-viewer").unwrap();
    let config = scratch.join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "[[tokens]]\nname = \"ops\"\nrole = \"operator\"\nsecret = {OPERATOR:?}\n\n\
             [[tokens]]\nname = \"val\"\nrole = \"viewer\"\nsecret = {VIEWER:?}\n"
        ),
    )
    .unwrap();
    let f = start(&db, "ro", &["--config", config.to_str().unwrap()]).await;
    let operator = f.cli.with_token(OPERATOR);
    let id = enqueue(&operator, "sleep", &json!({"ms": LONG_MS}), &[]).await;
    wait_status(&db.pool, id, "running").await;

    let console = Console::start(&f.addr, &["--token", VIEWER]).await.unwrap();
    console
        .wait_for("the RO badge and the lease", |s| {
            s.lines().next().is_some_and(|l| l.contains(" RO "))
                && lease_shown(s, id, "sleep", &f.id, "ok")
        })
        .await
        .unwrap();
    console.keys(&["x"]).unwrap();
    let screen = console
        .wait_for("the read-only refusal", |s| {
            status_line(s).contains(
                "error: read-only (a viewer token: actions are refused): cannot cancel the task(s)",
            )
        })
        .await
        .unwrap();
    assert!(!screen.contains("Cancel 1 task?"), "no dialog: {screen}");
    // `y` now must not confirm anything either.
    console.keys(&["y"]).unwrap();

    // Nothing reached the agent: the task runs on and no call by `val` was audited, over
    // several registry polls of the console.
    for _ in 0..15 {
        assert_eq!(task_status(&db.pool, id).await.unwrap(), "running");
        let rows = audit_rows(&db.pool).await.unwrap();
        assert!(
            rows.iter().all(|r| r.0 != "val"),
            "the console sent an action: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        audit_rows(&db.pool).await.unwrap(),
        [(
            "ops".to_string(),
            "operator".to_string(),
            "enqueue".to_string(),
            format!("task:{id}"),
            "applied".to_string()
        )]
    );
    // Positive control: had the console sent the cancel, the agent would have audited it.
    let o = f
        .cli
        .with_token(VIEWER)
        .run(&["cancel", &id.to_string()])
        .await
        .unwrap();
    assert_eq!(o.code, Some(4), "{}", o.describe());
    let rows = audit_rows(&db.pool).await.unwrap();
    assert_eq!(
        rows.last().unwrap(),
        &(
            "val".to_string(),
            "viewer".to_string(),
            "cancel".to_string(),
            format!("task:{id}"),
            "denied".to_string()
        )
    );
    assert_eq!(task_status(&db.pool, id).await.unwrap(), "running");
    console.keys(&["q"]).unwrap();
    assert_eq!(console.wait_exit().await.unwrap(), 0);
    drop(f);
    let _ = std::fs::remove_dir_all(&scratch);
    db.drop_db().await.unwrap();
}

// -------------------------------------------------------------------------------------------
// T33: escape sequences and bidi controls are shown inert
// -------------------------------------------------------------------------------------------

/// Escape sequences in the `-e` capture that are not tmux's own SGR (`ESC [ params m`).
fn foreign_escapes(captured: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = captured;
    while let Some(at) = rest.find('\u{1b}') {
        let after = &rest[at + 1..];
        let sgr = after.strip_prefix('[').and_then(|params| {
            let end = params.find(|c: char| !(c.is_ascii_digit() || c == ';' || c == ':'))?;
            (params[end..].starts_with('m')).then_some(end + 2)
        });
        match sgr {
            Some(len) => rest = &after[len..],
            None => {
                found.push(after.chars().take(12).collect());
                rest = after;
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t33_escapes_and_bidi_controls_in_a_dead_letter_are_shown_inert() {
    let db = TestDb::new().await.unwrap();
    let f = start(&db, "t33", &[]).await;
    let evil = "boom \u{1b}[2J\u{1b}[31mred \u{202e}evil\u{1b}]0;pwned\u{7}";
    let id = enqueue(
        &f.cli,
        "fail",
        &json!({"message": evil}),
        &["--max-attempts", "1"],
    )
    .await;
    wait_status(&db.pool, id, "dead").await;
    let stored: Value = sqlx::query_scalar("SELECT last_error FROM tasks WHERE id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(
        stored["message"].as_str().unwrap().contains('\u{1b}'),
        "{stored}"
    );

    let console = Console::start(&f.addr, &[]).await.unwrap();
    console.keys(&["4"]).unwrap();
    let screen = console
        .wait_for(&format!("dead task {id}"), |s| {
            s.contains("[4 Dead letters]") && row(s, id).is_some()
        })
        .await
        .unwrap();
    let line = table_line(&screen, &id.to_string()).unwrap();
    assert!(
        line.contains(r"boom \u{1b}[2J\u{1b}[31mred \u{202e}"),
        "{screen}"
    );
    let header = screen.lines().next().unwrap().to_string();
    assert!(header.starts_with("Leasehold"), "{screen}");

    console.keys(&["Enter"]).unwrap();
    let screen = console
        .wait_for("the detail pane with the payload", |s| {
            s.contains(&format!("Task {id}")) && s.contains("Payload") && s.contains("\"message\"")
        })
        .await
        .unwrap();
    // The error as text, the payload as JSON: every control character written out.
    assert!(
        screen.contains(r"last error fail: boom \u{1b}[2J\u{1b}[31mred \u{202e}evil"),
        "{screen}"
    );
    assert!(screen.contains(r"\u001b[2J\u001b[31mred"), "{screen}");
    assert!(
        screen.contains(r"\u{202e}") || screen.contains(r"\u202e"),
        "{screen}"
    );
    // Nothing was cleared, retitled or reordered: the header and tabs are still there.
    let mut lines = screen.lines();
    assert_eq!(lines.next().unwrap(), header, "{screen}");
    assert!(
        lines.next().unwrap().contains("[4 Dead letters]"),
        "{screen}"
    );
    assert!(
        !screen.contains('\u{202e}'),
        "a raw bidi override: {screen}"
    );
    assert!(
        !screen.contains("pwned") || screen.contains(r"\u{1b}]0;pwned"),
        "{screen}"
    );
    assert_ne!(
        console.tmux().pane_format("#{pane_title}").unwrap(),
        "pwned",
        "the payload set the terminal title"
    );

    // With attributes: only tmux's own colour escapes, and the payload's red never took effect
    // (it would show as tmux's SGR 31 right before the word).
    let coloured = console.tmux().screen_with_escapes().unwrap();
    assert_eq!(
        foreign_escapes(&coloured),
        Vec::<String>::new(),
        "{coloured:?}"
    );
    assert!(
        !coloured.contains("\u{1b}[31mred"),
        "the payload coloured the screen: {coloured:?}"
    );
    assert!(!coloured.contains('\u{202e}'));

    console.escape().await.unwrap();
    console
        .wait_for("the detail closed", |s| {
            !s.contains(&format!("Task {id}")) && row(s, id).is_some()
        })
        .await
        .unwrap();
    console.keys(&["q"]).unwrap();
    assert_eq!(console.wait_exit().await.unwrap(), 0);
    // Looking changed nothing.
    assert_eq!(task_status(&db.pool, id).await.unwrap(), "dead");
    drop(f);
    db.drop_db().await.unwrap();
}

// -------------------------------------------------------------------------------------------
// SIGTERM: the console leaves cleanly and the terminal is restored
// -------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_restores_the_terminal() {
    let db = TestDb::new().await.unwrap();
    let f = start(&db, "term", &[]).await;
    let console = Console::start(&f.addr, &[]).await.unwrap();
    console.wait_text("[1 Leases]").await.unwrap();
    assert_eq!(console.tmux().pane_format("#{alternate_on}").unwrap(), "1");
    // The pane runs `sh -c '…leasehold…; echo EXIT=$?'`: the console is the shell's child.
    let shell: u32 = console
        .tmux()
        .pane_format("#{pane_pid}")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let children = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).unwrap();
    let pid = children
        .split_whitespace()
        .next()
        .expect("the console runs under the pane's shell");
    let status = std::process::Command::new("kill")
        .args(["-TERM", pid])
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(console.wait_exit().await.unwrap(), 0);
    let screen = console.screen().unwrap();
    let lines: Vec<&str> = screen.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines, ["EXIT=0"], "{screen}");
    assert_eq!(console.tmux().pane_format("#{alternate_on}").unwrap(), "0");
    assert_eq!(console.tmux().pane_format("#{cursor_flag}").unwrap(), "1");
    drop(f);
    db.drop_db().await.unwrap();
}

// -------------------------------------------------------------------------------------------
// Schedules: view 7, `t` `y` triggers, `d` `y` disables
// -------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_is_shown_triggered_and_disabled_in_view_7() {
    let db = TestDb::new().await.unwrap();
    let f = start(&db, "sched", &[]).await;
    // Once a day at 03:00 UTC: the leader will not fire it during the test.
    ok(&f
        .cli
        .run(&[
            "schedules",
            "add",
            "nightly",
            "--cron",
            "0 0 3 * * *",
            "--type",
            "noop",
        ])
        .await
        .unwrap());

    let console = Console::start(&f.addr, &[]).await.unwrap();
    console.keys(&["7"]).unwrap();
    let screen = console
        .wait_for("the nightly schedule", |s| {
            s.contains("[7 Sched") && table_line(s, "nightly").is_some_and(|l| l.contains("yes"))
        })
        .await
        .unwrap();
    let line = table_line(&screen, "nightly").unwrap();
    assert!(
        line.contains("0 0 3 * * *") && line.contains("noop"),
        "{screen}"
    );

    console.keys(&["t"]).unwrap();
    console
        .wait_text("Trigger schedule nightly?")
        .await
        .unwrap();
    // Nothing is sent before the confirmation.
    assert_eq!(
        leasehold_tests::count(&db.pool, "SELECT count(*) FROM tasks")
            .await
            .unwrap(),
        0
    );
    console.keys(&["y"]).unwrap();
    console
        .wait_for("the trigger's result", |s| {
            status_line(s).contains("triggered schedule nightly")
        })
        .await
        .unwrap();
    let key: String = sqlx::query_scalar("SELECT idempotency_key FROM tasks")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(key.starts_with("schedule:nightly:manual:"), "{key}");
    // The view shows the triggered task's outcome once it ran.
    console
        .wait_for("the last outcome", |s| {
            table_line(s, "nightly").is_some_and(|l| l.contains("succeede"))
        })
        .await
        .unwrap();

    console.keys(&["d"]).unwrap();
    console
        .wait_text("Disable schedule nightly?")
        .await
        .unwrap();
    console.keys(&["y"]).unwrap();
    console
        .wait_for("the schedule disabled", |s| {
            table_line(s, "nightly").is_some_and(|l| l.contains(" no "))
        })
        .await
        .unwrap();
    let enabled: bool = sqlx::query_scalar("SELECT enabled FROM schedules WHERE name = 'nightly'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(!enabled);
    let actions: Vec<(String, String)> = audit_rows(&db.pool)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, _, action, target, _)| (action, target))
        .collect();
    assert_eq!(
        actions,
        [
            ("schedule_add".to_string(), "schedule:nightly".to_string()),
            ("schedule_trigger".into(), "schedule:nightly".into()),
            ("schedule_disable".into(), "schedule:nightly".into()),
        ]
    );
    console.keys(&["q"]).unwrap();
    assert_eq!(console.wait_exit().await.unwrap(), 0);
    drop(f);
    db.drop_db().await.unwrap();
}

// -------------------------------------------------------------------------------------------
// Issue 20: the task pane refreshes; dialogs without traps; marks that follow their rows
// -------------------------------------------------------------------------------------------

/// The task id at the start of a table line (after the cursor's `>` and a row's mark).
fn line_id(line: &str) -> Option<i64> {
    let line = line.trim_start();
    let line = line.strip_prefix('>').unwrap_or(line);
    let mut words = line.split_whitespace();
    let first = words.next()?;
    first
        .parse()
        .ok()
        .or_else(|| words.next().and_then(|w| w.parse().ok()))
}

/// The task id of the row under the cursor (the table line marked `>`), if one is shown.
fn selected_id(screen: &str) -> Option<i64> {
    body(screen)
        .lines()
        .filter(|l| l.trim_start().starts_with('>'))
        .find_map(line_id)
}

/// The task ids of the table rows shown, top to bottom.
fn shown_ids(screen: &str) -> Vec<i64> {
    body(screen).lines().filter_map(line_id).collect()
}

/// The header's second line (view tabs, filter, marked count).
fn tabs_line(screen: &str) -> &str {
    screen.lines().nth(1).unwrap_or("")
}

/// Item 2: the open task pane shows what an action did, and what others did, without being
/// reopened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_task_pane_follows_the_task_after_r_y_and_while_open() {
    let db = TestDb::new().await.unwrap();
    let f = start(&db, "pane", &[]).await;
    let id = dead_task_of_a_paused_type(&db, &f).await;

    let console = Console::start(&f.addr, &[]).await.unwrap();
    console.keys(&["4"]).unwrap();
    console
        .wait_for(&format!("dead task {id}"), |s| row(s, id).is_some())
        .await
        .unwrap();
    console.keys(&["Enter"]).unwrap();
    console
        .wait_for("the pane: status dead", |s| {
            s.contains(&format!("Task {id}")) && s.contains("status dead")
        })
        .await
        .unwrap();

    // `r` `y` from the pane: the status line and the pane agree.
    console.keys(&["r"]).unwrap();
    console.wait_text("Requeue 1 task?").await.unwrap();
    console.keys(&["y"]).unwrap();
    let screen = console
        .wait_for("the requeue's result and the pane saying queued", |s| {
            status_line(s).contains("requeue 1: 1 requeued")
                && s.contains(&format!("Task {id}"))
                && s.contains("status queued")
        })
        .await
        .unwrap();
    assert!(!screen.contains("status dead"), "{screen}");
    wait_status(&db.pool, id, "queued").await;

    // Someone else cancels it: the open pane shows it within a few seconds, untouched.
    ok(&f.cli.run(&["cancel", &id.to_string()]).await.unwrap());
    wait_status(&db.pool, id, "cancelled").await;
    console
        .wait_for("the pane saying cancelled", |s| {
            s.contains(&format!("Task {id}")) && s.contains("status cancelled")
        })
        .await
        .unwrap();
    // ctrl-l redraws and reads again: the pane is still there and still right.
    console.keys(&["C-l"]).unwrap();
    console
        .wait_for("the pane after ctrl-l", |s| {
            s.contains(&format!("Task {id}")) && s.contains("status cancelled")
        })
        .await
        .unwrap();
    console.keys(&["q"]).unwrap();
    console
        .wait_for("the pane closed by q, the console still running", |s| {
            !s.contains(&format!("Task {id}")) && s.contains("[4 Dead letters]")
        })
        .await
        .unwrap();
    console.keys(&["q"]).unwrap();
    assert_eq!(console.wait_exit().await.unwrap(), 0);
    drop(f);
    db.drop_db().await.unwrap();
}

/// Item 3: Enter confirms a typed count; `q` closes a dialog or pane and never quits from
/// one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enter_confirms_a_typed_count_and_q_only_closes_dialogs() {
    let db = TestDb::new().await.unwrap();
    let f = start(&db, "dialogs", &[]).await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        ids.push(
            enqueue(
                &f.cli,
                "fail",
                &json!({"message": "boom"}),
                &["--max-attempts", "1"],
            )
            .await,
        );
    }
    for &id in &ids {
        wait_status(&db.pool, id, "dead").await;
    }
    ok(&f.cli.run(&["pause", "fail"]).await.unwrap());

    let console = Console::start(&f.addr, &[]).await.unwrap();
    console.keys(&["4"]).unwrap();
    console
        .wait_for("both dead letters", |s| {
            ids.iter().all(|&id| row(s, id).is_some())
        })
        .await
        .unwrap();

    // `q` in a confirm dialog, in the task pane and in help closes it; the console runs on.
    // Each: the key that opens it, a text it shows, what closing it is called.
    for (open, shows, closed) in [
        ("r", "Requeue 1 task?", "the dialog closed by q"),
        ("Enter", "status dead", "the pane closed by q"),
        ("?", "Keys (esc closes)", "help closed by q"),
    ] {
        console.keys(&[open]).unwrap();
        console.wait_text(shows).await.unwrap();
        console.keys(&["q"]).unwrap();
        console
            .wait_for(closed, |s| {
                !s.contains(shows) && s.contains("[4 Dead letters]")
            })
            .await
            .unwrap();
    }
    assert!(exit_code_shown(&console), "the console quit from a dialog");
    for &id in &ids {
        assert_eq!(task_status(&db.pool, id).await.unwrap(), "dead");
    }

    // `R`: every dead letter, confirmed by typing the count and pressing Enter (the focus
    // stays on No all along).
    console.keys(&["R"]).unwrap();
    console.wait_text("type 2 to confirm").await.unwrap();
    // The dry run that counted them is audited too; nothing else may be until confirmed.
    let before = audit_rows(&db.pool).await.unwrap().len();
    console.type_text("3").unwrap();
    console.keys(&["Enter"]).unwrap();
    console
        .wait_for("a wrong count refused, the dialog open", |s| {
            status_line(s).contains("type 2 to confirm") && s.contains("[ No ]")
        })
        .await
        .unwrap();
    for &id in &ids {
        assert_eq!(task_status(&db.pool, id).await.unwrap(), "dead");
    }
    assert_eq!(audit_rows(&db.pool).await.unwrap().len(), before);
    console.keys(&["BSpace"]).unwrap();
    console.type_text("2").unwrap();
    console.keys(&["Enter"]).unwrap();
    console
        .wait_for("the bulk requeue's result", |s| {
            !s.contains("[ No ]") && status_line(s).contains("requeue")
        })
        .await
        .unwrap();
    for &id in &ids {
        wait_status(&db.pool, id, "queued").await;
    }
    console
        .wait_text("the dead-letter queue is empty")
        .await
        .unwrap();
    let rows = audit_rows(&db.pool).await.unwrap();
    assert_eq!(rows.len(), before + 1, "one bulk requeue: {rows:?}");
    assert_eq!(
        rows.last().unwrap(),
        &local("requeue_dead", "dead-letter queue", "applied")
    );
    console.keys(&["q"]).unwrap();
    assert_eq!(console.wait_exit().await.unwrap(), 0);
    drop(f);
    db.drop_db().await.unwrap();
}

/// True while the console has not exited (no `EXIT=` line on the pane).
fn exit_code_shown(console: &Console) -> bool {
    console
        .screen()
        .is_ok_and(|s| leasehold_tests::tmux::exit_code(&s).is_none())
}

/// Item 5: a mark goes when its task leaves the view, so an action never lists a finished
/// task; the cursor stays on its task while the rows re-sort under it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn marks_go_with_their_tasks_and_the_cursor_stays_on_its_task() {
    let db = TestDb::new().await.unwrap();
    let a = start(&db, "mark-a", &["--concurrency", "2"]).await;
    let b = start(&db, "mark-b", &["--concurrency", "2"]).await;
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(enqueue(&a.cli, "sleep", &json!({"ms": LONG_MS}), &[]).await);
    }
    wait_until("two sleeps run on each agent", WAIT, || {
        let (pool, x, y) = (db.pool.clone(), a.id.clone(), b.id.clone());
        async move { Ok(held_by(&pool, &x).await.len() == 2 && held_by(&pool, &y).await.len() == 2) }
    })
    .await
    .unwrap();

    let console = Console::start(&a.addr, &[]).await.unwrap();
    let screen = console
        .wait_for("the four leases", |s| {
            ids.iter().all(|&id| row(s, id).is_some())
        })
        .await
        .unwrap();
    let marked = selected_id(&screen).expect("a row under the cursor");
    console.keys(&["Space"]).unwrap();
    let screen = console
        .wait_for("one marked, the cursor one row down", |s| {
            tabs_line(s).contains("1 marked") && selected_id(s).is_some_and(|id| id != marked)
        })
        .await
        .unwrap();
    let cursor = selected_id(&screen).unwrap();

    // The cursor stays on its task while the two agents' renewals re-sort the rows (least
    // time left first): it must be on `cursor` on every screen, and the order must change
    // at least once (the positive control).
    let first_order = shown_ids(&screen);
    let mut resorted = false;
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_secs(20)
        && !(resorted && started.elapsed() > Duration::from_secs(5))
    {
        let s = console.screen().unwrap();
        let order = shown_ids(&s);
        if order.len() == 4 {
            resorted |= order != first_order;
            assert_eq!(
                selected_id(&s),
                Some(cursor),
                "the cursor left its task:\n{s}"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(resorted, "the rows never re-sorted: nothing was shown");

    // The marked task ends elsewhere: its row goes, and its mark with it.
    ok(&a.cli.run(&["cancel", &marked.to_string()]).await.unwrap());
    wait_status(&db.pool, marked, "cancelled").await;
    let screen = console
        .wait_for("the cancelled task's row and mark gone", |s| {
            row(s, marked).is_none() && shown_ids(s).len() == 3
        })
        .await
        .unwrap();
    assert!(!tabs_line(&screen).contains("marked"), "{screen}");
    assert_eq!(selected_id(&screen), Some(cursor), "{screen}");
    // `x` now applies to the row under the cursor only, never to the finished task.
    console.keys(&["x"]).unwrap();
    let screen = console.wait_text("Cancel 1 task?").await.unwrap();
    assert!(screen.contains(&format!("ids: {cursor}")), "{screen}");
    console.keys(&["n"]).unwrap();
    console
        .wait_for("the dialog closed", |s| !s.contains("Cancel 1 task?"))
        .await
        .unwrap();
    for &id in ids.iter().filter(|&&id| id != marked) {
        assert_eq!(task_status(&db.pool, id).await.unwrap(), "running");
    }
    console.keys(&["q"]).unwrap();
    assert_eq!(console.wait_exit().await.unwrap(), 0);
    drop((a, b));
    db.drop_db().await.unwrap();
}

// -------------------------------------------------------------------------------------------
// Issue 20 item 4: a frozen agent must not look healthy
// -------------------------------------------------------------------------------------------

/// Seconds of a short duration cell (`7s`), `None` for any other form.
fn whole_secs(cell: &str) -> Option<u64> {
    cell.strip_suffix('s')?.parse().ok()
}

/// SIGSTOP of an agent holding leases: its Watch stream goes silent (no failure of its own,
/// the connection stays open), so only the database can say its renewals stopped. Within a
/// few polls of passing the revoke threshold (3 × its 2 s heartbeat) — long before its 30 s
/// leases expire — the Renewals view lists its leases as overdue (db) with its name and the
/// time since their last renewal, and the header counts them; after SIGCONT they renew and
/// leave the view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_agent_shows_its_leases_overdue_from_the_database() {
    let db = TestDb::new().await.unwrap();
    let seed = start(&db, "web-1", &["--concurrency", "2"]).await;
    // Long leases: expiry (30 s, then 2 s grace) comes long after the 6 s threshold.
    let frozen = spawn_agent(
        "leasehold-agent",
        &db.url,
        "web-2",
        HANDLERS,
        &[
            "--lease-ttl",
            "30s",
            "--heartbeat",
            "2s",
            "--grace",
            "2s",
            "--concurrency",
            "2",
        ],
        Vec::new(),
    )
    .await
    .unwrap();
    let frozen_id = frozen
        .wait_registered(&db.pool, "web-2", WAIT)
        .await
        .unwrap();
    for _ in 0..4 {
        enqueue(&seed.cli, "sleep", &json!({"ms": LONG_MS}), &[]).await;
    }
    wait_until("two sleeps run on each agent", WAIT, || {
        let (pool, a, b) = (db.pool.clone(), seed.id.clone(), frozen_id.clone());
        async move { Ok(held_by(&pool, &a).await.len() == 2 && held_by(&pool, &b).await.len() == 2) }
    })
    .await
    .unwrap();
    let kept = held_by(&db.pool, &seed.id).await;
    let stalled = held_by(&db.pool, &frozen_id).await;

    let console = Console::start(&seed.addr, &[]).await.unwrap();
    console.keys(&["3"]).unwrap();
    console
        .wait_for("both agents live and Renewals empty", |s| {
            s.contains("[3 Renewals]")
                && s.contains("every lease is renewing on time")
                && s.lines().nth(2).is_some_and(|l| {
                    l.contains(&format!("{} live", seed.id))
                        && l.contains(&format!("{frozen_id} live"))
                })
        })
        .await
        .unwrap();

    frozen.stop().unwrap();
    let screen = console
        .wait_for("the frozen agent's leases overdue (db) in Renewals", |s| {
            stalled.iter().all(|&id| {
                table_line(s, &id.to_string()).is_some_and(|l| {
                    let words: Vec<&str> = l.split_whitespace().collect();
                    words.get(2) == Some(&frozen_id.as_str()) && l.ends_with("db overdue")
                })
            })
        })
        .await
        .unwrap();
    // The database agrees, and the leases are far from expiry: the mark came from the
    // overdue renewals, not from the lease running out.
    let (unexpired, overdue): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE lease_until > now()), \
                count(*) FILTER (WHERE heartbeat_at < now() - interval '6 seconds') \
         FROM tasks WHERE id = ANY($1) AND status = 'running' AND lease_owner::text = $2",
    )
    .bind(&stalled)
    .bind(&frozen_id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((unexpired, overdue), (2, 2), "{screen}");
    for &id in &stalled {
        let words = row(&screen, id).unwrap();
        // TASK TYPE AGENT EP AGE gauge LEFT RENEW …: the time since the last renewal is past
        // the 6 s threshold; the lease still has time left.
        let since = whole_secs(words[7]);
        assert!(
            since.is_some_and(|s| s >= 6),
            "renewed {:?}:\n{screen}",
            words[7]
        );
        assert!(!words[6].starts_with('-'), "expired already:\n{screen}");
    }
    // The healthy agent's leases are not in Renewals; the header counts the overdue ones.
    for &id in &kept {
        assert!(
            row(&screen, id).is_none(),
            "a healthy lease in Renewals:\n{screen}"
        );
    }
    let head = screen.lines().next().unwrap_or("");
    assert!(head.contains("2 overdue"), "{screen}");

    // SIGCONT: the agent renews again and its leases leave the view.
    frozen.cont().unwrap();
    console
        .wait_for("the resumed agent's leases gone from Renewals", |s| {
            stalled.iter().all(|&id| row(s, id).is_none())
                && !s.lines().next().unwrap_or("").contains("overdue")
        })
        .await
        .unwrap();
    console.keys(&["q"]).unwrap();
    assert_eq!(console.wait_exit().await.unwrap(), 0);
    drop((seed, frozen));
    db.drop_db().await.unwrap();
}

// -------------------------------------------------------------------------------------------
// Issue 26: the Tasks view pages through 100,000 queued tasks, filters, and runs a task now
// -------------------------------------------------------------------------------------------

/// `(rows loaded, more below)` from the Tasks view's title, ` Tasks: queued (N) newest first`.
fn tasks_title(screen: &str) -> Option<(usize, bool)> {
    let line = screen.lines().find(|l| l.contains(" Tasks: "))?;
    let open = line.find('(')?;
    let close = open + line[open..].find(')')?;
    let rows = line[open + 1..close].parse().ok()?;
    Some((rows, line.contains("more below")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tasks_view_pages_through_100000_queued_tasks_filters_and_runs_one_now() {
    const BULK: i64 = 100_000;
    let db = TestDb::new().await.unwrap();
    let f = start(&db, "browse", &[]).await;
    // 100,000 queued sleeps that stay queued (their type paused), written as an application
    // would in plain SQL, and one noop not due for an hour.
    ok(&f.cli.run(&["pause", "sleep"]).await.unwrap());
    sqlx::query(
        "INSERT INTO tasks (task_type, payload, available_at) \
         SELECT 'sleep', jsonb_build_object('ms', 1), now() - interval '1 minute' \
         FROM generate_series(1, $1)",
    )
    .bind(BULK)
    .execute(&db.pool)
    .await
    .unwrap();
    let later = enqueue(&f.cli, "noop", &json!({}), &["--delay", "1h"]).await;
    let (newest, oldest): (i64, i64) =
        sqlx::query_as("SELECT max(id), min(id) FROM tasks WHERE task_type::text = 'sleep'")
            .fetch_one(&db.pool)
            .await
            .unwrap();

    let console = Console::start(&f.addr, &[]).await.unwrap();
    console.keys(&["8"]).unwrap();
    let screen = console
        .wait_for("the queued tab with its counts", |s| {
            s.contains("[8 Tasks]")
                && s.contains("queued 100k")
                && s.contains("later 1")
                && tasks_title(s).is_some_and(|(rows, more)| rows == 200 && more)
        })
        .await
        .unwrap();
    assert_eq!(selected_id(&screen), Some(newest), "{screen}");

    // Page to the end: every key that reaches the last rows loaded asks for the next page
    // (one at a time: keys while a page travels only move the selection).
    let started = std::time::Instant::now();
    let mut last_seen = (200, true);
    loop {
        for _ in 0..10 {
            console.keys(&["G"]).unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let screen = console.screen().unwrap();
        if let Some(seen) = tasks_title(&screen) {
            assert!(seen.0 >= last_seen.0, "rows went back: {screen}");
            last_seen = seen;
        }
        if last_seen == (BULK as usize, false) {
            break;
        }
        assert!(
            started.elapsed() < WAIT * 3,
            "stuck at {last_seen:?}: {screen}"
        );
    }
    console.keys(&["G"]).unwrap();
    let screen = console
        .wait_for("the oldest task selected", |s| {
            selected_id(s) == Some(oldest)
        })
        .await
        .unwrap();
    let (rows, more) = tasks_title(&screen).unwrap();
    assert_eq!((rows, more), (BULK as usize, false), "{screen}");
    eprintln!(
        "paged through {BULK} queued tasks in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // Back to the top at once.
    console.keys(&["g"]).unwrap();
    console
        .wait_for("the newest task selected", |s| {
            selected_id(s) == Some(newest)
        })
        .await
        .unwrap();

    // The later tab, filtered to the noop type: the one task not due, run now with n y.
    console.keys(&["]"]).unwrap();
    console.keys(&["/"]).unwrap();
    console.type_text("type:noop").unwrap();
    console.keys(&["Enter"]).unwrap();
    let screen = console
        .wait_for("the not-due noop task", |s| {
            s.contains("[later 1]") && selected_id(s) == Some(later)
        })
        .await
        .unwrap();
    assert!(
        screen.contains("queued 0"),
        "the filter counts noop only: {screen}"
    );
    assert_eq!(task_status(&db.pool, later).await.unwrap(), "queued");
    console.keys(&["n"]).unwrap();
    console.wait_text("Run now 1 task?").await.unwrap();
    console.keys(&["y"]).unwrap();
    wait_status(&db.pool, later, "succeeded").await;
    console
        .wait_for("the run-now's result", |s| {
            status_line(s).contains("run now 1: 1 due now")
        })
        .await
        .unwrap();

    // The bulk tasks are as they were; the run-now is audited, nothing else changed.
    assert_eq!(
        leasehold_tests::count(
            &db.pool,
            "SELECT count(*) FROM tasks WHERE task_type::text = 'sleep' AND status = 'queued'"
        )
        .await
        .unwrap(),
        BULK
    );
    let tasks_audited: Vec<AuditRow> = audit_rows(&db.pool)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.3.starts_with("task:"))
        .collect();
    assert_eq!(
        tasks_audited,
        [
            local("enqueue", &format!("task:{later}"), "applied"),
            local("run_now", &format!("task:{later}"), "applied"),
        ]
    );
    console.keys(&["q"]).unwrap();
    assert_eq!(console.wait_exit().await.unwrap(), 0);
    drop(f);
    db.drop_db().await.unwrap();
}
