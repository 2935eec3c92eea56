#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `leasehold-agent run` as operators and CI use it: exit codes and summaries with
//! `--exit-when-idle`, configuration errors, `--help`, metrics, file logs, `exec` stopping
//! programs without leaving processes behind, and poison tasks (T28).

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use leasehold_shared::store::{CancelParams, NewTask};
use leasehold_shared::{Actor, Store, TaskId, TaskType};
use leasehold_tests::fleet::{spawn_agent, spawn_test_agent};
use leasehold_tests::{TestDb, binary, task_row, task_status, wait_registered, wait_until};
use serde_json::{Value, json};

async fn enqueue(db: &TestDb, task_type: &str, payload: Value, max_attempts: i32) -> i64 {
    db.store()
        .task_enqueue(
            NewTask::new(TaskType::new(task_type).unwrap(), payload)
                .with_max_attempts(max_attempts),
        )
        .await
        .unwrap()
        .id
        .0
}

fn summary(stdout: &str) -> Value {
    let line = stdout.lines().last().expect("a summary line");
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

async fn run_to_idle(db: &TestDb, handlers: &str) -> (i32, Value, String) {
    let mut agent = spawn_agent(
        "leasehold-agent",
        &db.url,
        "ci",
        handlers,
        &["--exit-when-idle", "--output", "json"],
        Vec::new(),
    )
    .await
    .unwrap();
    let status = agent.wait_exit(Duration::from_secs(60)).await.unwrap();
    let stdout = agent.stdout_text().unwrap();
    (
        status.code().unwrap_or(-1),
        summary(&stdout),
        agent.stderr_text().unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_when_idle_exits_0_when_every_task_succeeded() {
    let db = TestDb::new().await.unwrap();
    for _ in 0..20 {
        enqueue(&db, "noop", json!({}), 3).await;
    }
    enqueue(&db, "sleep", json!({"ms": 200}), 3).await;
    let (code, s, stderr) = run_to_idle(&db, "noop,sleep").await;
    assert_eq!(code, 0, "{s}\n{stderr}");
    assert_eq!(s["succeeded"], 21, "{s}");
    assert_eq!(s["claimed"], 21, "{s}");
    assert_eq!(s["ended_by"], "idle", "{s}");
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks WHERE status <> 'succeeded'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(left, 0);
    let state: String = sqlx::query_scalar("SELECT state FROM agents WHERE name = 'ci'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(state, "stopped", "the agent marks itself stopped on exit");
    db.drop_db().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_when_idle_exits_1_when_a_task_failed() {
    let db = TestDb::new().await.unwrap();
    enqueue(&db, "noop", json!({}), 3).await;
    let failing = enqueue(
        &db,
        "fail",
        json!({"code": "boom", "message": "it broke", "retryable": true}),
        1,
    )
    .await;
    let (code, s, stderr) = run_to_idle(&db, "noop,fail").await;
    assert_eq!(code, 1, "{s}\n{stderr}");
    assert_eq!(s["succeeded"], 1, "{s}");
    assert_eq!(s["failed"], 1, "{s}");
    assert_eq!(s["dead"], 1, "{s}");
    assert_eq!(task_status(&db.pool, failing).await.unwrap(), "dead");
    let row = task_row(&db.pool, failing).await.unwrap();
    assert_eq!(row["last_error"]["code"], "boom", "{row}");
    db.drop_db().await.unwrap();
}

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/config")
}

/// One bad-config fixture per error: each says in its first line what the message must contain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_config_file_is_refused_with_its_reason_and_exit_2() {
    let bin = binary("leasehold-agent").await.unwrap();
    let mut seen = 0;
    for entry in std::fs::read_dir(fixtures()).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let expect = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# expect: "))
            .unwrap_or_else(|| panic!("{} lacks an `# expect:` line", path.display()));
        let out = Command::new(&bin)
            .args([
                "run",
                "--database-url",
                "postgres://nobody@127.0.0.1:1/none",
                "--config",
            ])
            .arg(&path)
            .env_remove("LEASEHOLD_HANDLERS")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}: {stderr}", path.display());
        assert!(
            stderr.contains(expect.trim_end()),
            "{}: expected {expect:?} in\n{stderr}",
            path.display()
        );
        seen += 1;
    }
    assert!(seen >= 10, "only {seen} fixtures");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_flags_missing_settings_and_unreachable_databases_have_their_exit_codes() {
    let bin = binary("leasehold-agent").await.unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(&bin)
            .arg("run")
            .args(args)
            .env_remove("LEASEHOLD_DATABASE_URL")
            .env_remove("DATABASE_URL")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let url = "postgres://nobody@127.0.0.1:1/none";
    let (code, err) = run(&["--handlers", "noop"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("database_url"), "{err}");
    let (code, err) = run(&[
        "--database-url",
        url,
        "--handlers",
        "noop",
        "--lease-ttl",
        "soon",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("lease_ttl: \"soon\" is not a duration"),
        "{err}"
    );
    let (code, err) = run(&[
        "--database-url",
        url,
        "--handlers",
        "noop",
        "--concurrency",
        "-1",
    ]);
    assert_eq!(code, Some(2), "{err}");
    let (code, err) = run(&[
        "--database-url",
        url,
        "--handlers",
        "noop",
        "--output",
        "yaml",
    ]);
    assert_eq!(code, Some(2), "{err}");
    let (code, err) = run(&[
        "--database-url",
        url,
        "--config",
        "/nonexistent/leasehold.toml",
        "--handlers",
        "noop",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("cannot read config file /nonexistent/leasehold.toml"),
        "{err}"
    );
    let (code, err) = run(&["--database-url", "mysql://x/y", "--handlers", "noop"]);
    assert_eq!(code, Some(2), "{err}");
    let (code, err) = run(&[
        "--database-url",
        url,
        "--handlers",
        "noop",
        "--listen",
        "127.0.0.1:0",
    ]);
    assert_eq!(code, Some(3), "an unreachable database is exit 3: {err}");
    assert!(
        err.contains("cannot connect to the database: connection refused"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_help_explains_every_flag_of_the_contract() {
    let bin = binary("leasehold-agent").await.unwrap();
    let out = Command::new(&bin).args(["run", "--help"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--database-url",
        "--config",
        "--id",
        "--listen",
        "--metrics-listen",
        "--handlers",
        "--concurrency",
        "--lease-ttl",
        "--heartbeat",
        "--grace",
        "--shutdown-timeout",
        "--exit-when-idle",
        "--output",
        "--log-format",
        "--log-dir",
        "LEASEHOLD_DATABASE_URL",
        "Exit codes",
        "Durations are human",
    ] {
        assert!(
            help.contains(flag),
            "{flag} missing from run --help:\n{help}"
        );
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn http_get(port: u16, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // Read to the end: ask the server to close after its answer (HTTP/1.1 keeps it open).
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_served_and_file_logs_are_flushed_on_exit() {
    let db = TestDb::new().await.unwrap();
    let port = free_port();
    let logs = std::env::temp_dir().join(format!("leasehold-logs-{}-{port}", std::process::id()));
    let listen = format!("127.0.0.1:{port}");
    let log_dir = logs.to_string_lossy().to_string();
    let mut agent = spawn_agent(
        "leasehold-agent",
        &db.url,
        "metered",
        "noop,fail",
        &[
            "--metrics-listen",
            &listen,
            "--log-dir",
            &log_dir,
            "--log-format",
            "json",
        ],
        Vec::new(),
    )
    .await
    .unwrap();
    wait_registered(&db.pool, "metered", Duration::from_secs(20))
        .await
        .unwrap();
    for _ in 0..5 {
        enqueue(&db, "noop", json!({}), 3).await;
    }
    enqueue(&db, "fail", json!({"retryable": false}), 3).await;
    wait_until("tasks ended", Duration::from_secs(20), || {
        let pool = db.pool.clone();
        async move {
            Ok(leasehold_tests::count(
                &pool,
                "SELECT count(*) FROM tasks WHERE status IN ('succeeded', 'dead')",
            )
            .await?
                == 6)
        }
    })
    .await
    .unwrap();
    let body = tokio::task::spawn_blocking(move || http_get(port, "/metrics"))
        .await
        .unwrap();
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    for needle in [
        "leasehold_active_tasks",
        "leasehold_tasks_claimed_total{task_type=\"noop\"} 5",
        "leasehold_queue_wait_seconds_bucket",
        "leasehold_execution_seconds_count{task_type=\"noop\"} 5",
        "leasehold_task_outcomes_total{task_type=\"noop\",outcome=\"succeeded\"} 5",
        "leasehold_task_outcomes_total{task_type=\"fail\",outcome=\"dead\"} 1",
        "leasehold_renewal_failures_total",
        "leasehold_fenced_writes_total",
        "leasehold_recoveries_total",
        "leasehold_timeouts_total",
        "leasehold_database_up 1",
    ] {
        assert!(body.contains(needle), "{needle} missing:\n{body}");
    }
    let not_found = tokio::task::spawn_blocking(move || http_get(port, "/nope"))
        .await
        .unwrap();
    assert!(not_found.starts_with("HTTP/1.1 404"), "{not_found}");
    agent.sigterm().unwrap();
    assert!(
        agent
            .wait_exit(Duration::from_secs(20))
            .await
            .unwrap()
            .success()
    );
    let mut text = String::new();
    for entry in std::fs::read_dir(&logs).unwrap() {
        text.push_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap());
    }
    assert!(
        text.contains("agent stopped"),
        "the last line reached the file:\n{text}"
    );
    for line in text.lines() {
        serde_json::from_str::<Value>(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    }
    std::fs::remove_dir_all(&logs).unwrap();
    db.drop_db().await.unwrap();
}

fn processes_with(marker: &str) -> usize {
    let out = Command::new("pgrep").args(["-f", marker]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).lines().count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_cancel_and_timeout_stop_the_whole_process_group() {
    let db = TestDb::new().await.unwrap();
    let store = db.store();
    let agent = spawn_agent(
        "leasehold-agent",
        &db.url,
        "execer",
        "exec",
        &["--exec-kill-after", "300ms"],
        Vec::new(),
    )
    .await
    .unwrap();
    wait_registered(&db.pool, "execer", Duration::from_secs(20))
        .await
        .unwrap();
    let marker = format!("30{}.{}", std::process::id() % 1000, 7);
    let script = format!("sleep {marker} & sleep {marker} & wait");
    // Cancel: an operator cancels a running program.
    let cancelled = enqueue(&db, "exec", json!({"argv": ["sh", "-c", script]}), 1).await;
    wait_until("both children run", Duration::from_secs(20), || {
        let m = marker.clone();
        async move { Ok(processes_with(&format!("sleep {m}")) >= 2) }
    })
    .await
    .unwrap();
    store
        .task_cancel(CancelParams {
            id: TaskId(cancelled),
            actor: Actor::operator("oncall"),
        })
        .await
        .unwrap();
    wait_until("the task is cancelled", Duration::from_secs(20), || {
        let pool = db.pool.clone();
        async move { Ok(task_status(&pool, cancelled).await? == "cancelled") }
    })
    .await
    .unwrap();
    wait_until("no process is left", Duration::from_secs(5), || {
        let m = marker.clone();
        async move { Ok(processes_with(&format!("sleep {m}")) == 0) }
    })
    .await
    .unwrap();
    // Timeout: a program that ignores SIGTERM needs SIGKILL, and the result says so.
    let marker2 = format!("31{}.{}", std::process::id() % 1000, 9);
    let script = format!("trap '' TERM; sleep {marker2} & sleep {marker2}; wait");
    let timed = enqueue(
        &db,
        "exec",
        json!({"argv": ["sh", "-c", script], "timeout": "700ms"}),
        1,
    )
    .await;
    wait_until("the task is dead", Duration::from_secs(20), || {
        let pool = db.pool.clone();
        async move { Ok(task_status(&pool, timed).await? == "dead") }
    })
    .await
    .unwrap();
    let row = task_row(&db.pool, timed).await.unwrap();
    assert_eq!(row["last_error"]["code"], "timeout", "{row}");
    let message = row["last_error"]["message"].as_str().unwrap();
    assert!(message.contains("sigkill"), "{message}");
    wait_until("no process is left", Duration::from_secs(5), || {
        let m = marker2.clone();
        async move { Ok(processes_with(&format!("sleep {m}")) == 0) }
    })
    .await
    .unwrap();
    drop(agent);
    db.drop_db().await.unwrap();
}

/// T28: a panicking handler, a payload that does not deserialise and a type nobody serves all
/// end in the dead-letter queue with their reason, and the agent keeps running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t28_poison_tasks_are_dead_lettered_with_the_reason_and_the_agent_keeps_running() {
    let db = TestDb::new().await.unwrap();
    let mut agent = spawn_test_agent(
        &db.url,
        "poisoned",
        "panic,sleep,noop",
        &["--unserved-after", "1s"],
    )
    .await
    .unwrap();
    wait_registered(&db.pool, "poisoned", Duration::from_secs(20))
        .await
        .unwrap();
    let panics = enqueue(&db, "panic", json!({}), 5).await;
    let bad = enqueue(&db, "sleep", json!({"ms": "soon"}), 5).await;
    let orphan = enqueue(&db, "nobody.handles.this", json!({}), 5).await;
    for (id, code) in [
        (panics, "panic"),
        (bad, "bad_payload"),
        (orphan, "unknown_type"),
    ] {
        wait_until(
            &format!("task {id} is dead"),
            Duration::from_secs(30),
            || {
                let pool = db.pool.clone();
                async move { Ok(task_status(&pool, id).await? == "dead") }
            },
        )
        .await
        .unwrap();
        let row = task_row(&db.pool, id).await.unwrap();
        assert_eq!(row["last_error"]["code"], code, "{row}");
        assert_eq!(row["last_error"]["retryable"], false, "{row}");
    }
    let row = task_row(&db.pool, panics).await.unwrap();
    assert!(
        row["last_error"]["message"]
            .as_str()
            .unwrap()
            .contains("this handler always panics"),
        "{row}"
    );
    assert_eq!(row["attempt"], 1, "a panic is not retried: {row}");
    // The agent is still alive and working.
    let after = enqueue(&db, "noop", json!({}), 1).await;
    wait_until(
        "the agent still runs tasks",
        Duration::from_secs(20),
        || {
            let pool = db.pool.clone();
            async move { Ok(task_status(&pool, after).await? == "succeeded") }
        },
    )
    .await
    .unwrap();
    assert!(agent.is_running());
    db.drop_db().await.unwrap();
}

/// Program output with a NUL byte (which PostgreSQL refuses in jsonb) must not hold back the
/// batch it is written with: the character is made visible and every task completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_byte_in_program_output_does_not_block_completions() {
    let db = TestDb::new().await.unwrap();
    let nul = enqueue(&db, "exec", json!({"argv": ["printf", "a\\000b"]}), 1).await;
    let mut others = Vec::new();
    for _ in 0..20 {
        others.push(enqueue(&db, "noop", json!({}), 1).await);
    }
    let (code, s, stderr) = run_to_idle(&db, "exec,noop").await;
    assert_eq!(code, 0, "{s}\n{stderr}");
    assert_eq!(s["succeeded"], 21, "{s}");
    let row = task_row(&db.pool, nul).await.unwrap();
    assert_eq!(row["status"], "succeeded", "{row}");
    assert_eq!(row["result"]["stdout_tail"], "a\u{FFFD}b", "{row}");
    db.drop_db().await.unwrap();
}
