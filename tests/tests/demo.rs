#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `leasehold demo` end to end, with the real binary: agents in its own process on a fresh
//! SQLite file in the working directory.
//!
//! - headless for 10 s: the JSON summary (every kind of task in it, counted right), the file
//!   (stamped as a demo database, agents stopped, nothing left running, the summary's counts
//!   equal to its rows), a second run replacing the first run's file, a file that is not a
//!   demo database left alone (exit 2), bad flags (exit 2);
//! - interactive in a real terminal (tmux): live leases of the demo's agents, a dead letter
//!   opened and closed, `q` asking before it stops the agents (Esc keeps the demo going, `y`
//!   quits), the terminal restored, exit 0, and the lines saying where the file is and how to
//!   reopen it.
//!
//! These tests need no PostgreSQL.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use leasehold_tests::tmux::{HEIGHT, SCREEN_TIMEOUT, Tmux, WIDTH, exit_code, shell_quote};
use leasehold_tests::{binary, scratch_dir};
use serde_json::Value;
use sqlx::SqlitePool;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};

/// The demo's file and log in its working directory.
const FILE: &str = "leasehold-demo.sqlite";
const LOG: &str = "leasehold-demo.log";
/// SQLite application_id of a demo database ("LHDM").
const APPLICATION_ID: u32 = 0x4C48_444D;
/// Longest a headless run may take beyond its --duration (start, drain, count).
const SLACK: Duration = Duration::from_secs(90);
/// Every task type the demo feeds.
const TYPES: [&str; 6] = ["noop", "sleep", "fail", "exec", "demo.long", "demo.flaky"];
/// Variables that could aim the binary elsewhere; removed from every run.
const ENV: [&str; 8] = [
    "LEASEHOLD_AGENT",
    "LEASEHOLD_TOKEN",
    "LEASEHOLD_CA",
    "LEASEHOLD_CERT",
    "LEASEHOLD_KEY",
    "LEASEHOLD_LOG",
    "NO_COLOR",
    "DATABASE_URL",
];

/// A fresh scratch directory of this test process.
fn scratch(tag: &str) -> PathBuf {
    scratch_dir(&format!("leasehold-demo-{tag}")).unwrap()
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn describe(&self) -> String {
        format!(
            "exit {:?}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Runs `leasehold ARGS…` in `dir` with no terminal, killed after `limit`.
async fn leasehold(dir: &Path, args: &[&str], limit: Duration) -> Run {
    let mut cmd = tokio::process::Command::new(binary("leasehold").await.unwrap());
    cmd.args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for var in ENV {
        cmd.env_remove(var);
    }
    let child = cmd.spawn().unwrap();
    let output = tokio::time::timeout(limit, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("`leasehold {args:?}` ran past {limit:?}"))
        .unwrap();
    Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// The application_id in a SQLite file's header.
fn application_id(file: &Path) -> u32 {
    let bytes = std::fs::read(file).unwrap();
    assert!(bytes.len() >= 100, "{} is too short", file.display());
    assert_eq!(&bytes[..16], b"SQLite format 3\0");
    u32::from_be_bytes([bytes[68], bytes[69], bytes[70], bytes[71]])
}

async fn open(file: &Path) -> SqlitePool {
    SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(SqliteConnectOptions::new().filename(file).read_only(true))
        .await
        .unwrap()
}

/// `(status, count)` of every task in the file.
async fn statuses(pool: &SqlitePool) -> BTreeMap<String, i64> {
    sqlx::query_as::<_, (String, i64)>("SELECT status, count(*) FROM tasks GROUP BY status")
        .fetch_all(pool)
        .await
        .unwrap()
        .into_iter()
        .collect()
}

fn n(v: &Value) -> i64 {
    v.as_i64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

// -------------------------------------------------------------------------------------------
// Headless
// -------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_headless_demo_feeds_every_kind_of_task_and_summarises_the_file() {
    let dir = scratch("headless");
    let run = leasehold(
        &dir,
        &["demo", "--headless", "--duration", "10s"],
        Duration::from_secs(10) + SLACK,
    )
    .await;
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one JSON line: {}", run.describe());
    let s: Value = serde_json::from_str(lines[0]).unwrap();
    let file = dir.join(FILE);

    // Where.
    assert_eq!(s["database"], file.display().to_string(), "{s:#}");
    assert_eq!(s["database_url"], format!("sqlite://{}", file.display()));
    assert_eq!(s["log"], dir.join(LOG).display().to_string());
    assert!(dir.join(LOG).exists());
    assert!(
        run.stderr.contains("feeding work for 10s"),
        "{}",
        run.describe()
    );
    let duration = s["duration_s"].as_f64().unwrap();
    assert!((10.0..40.0).contains(&duration), "{s:#}");

    // The agents: three, on loopback, drained by the demo's own stop.
    let agents = s["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 3, "{s:#}");
    for (i, a) in agents.iter().enumerate() {
        let id = a["id"].as_str().unwrap();
        assert!(id.starts_with(&format!("demo-{}#", i + 1)), "{a}");
        assert!(
            a["address"].as_str().unwrap().starts_with("127.0.0.1:"),
            "{a}"
        );
        assert_eq!(a["ended_by"], "signal", "{a}");
        assert!(a.get("error").is_none(), "{a}");
    }
    let claimed: i64 = agents.iter().map(|a| n(&a["claimed"])).sum();
    assert!(claimed > 0, "{s:#}");

    // What: every status counted, every enqueued task among them, each kind of task seen.
    let tasks = s["tasks"].as_object().unwrap();
    let total: i64 = tasks.values().map(n).sum();
    assert_eq!(
        total,
        n(&s["enqueued"]) + n(&s["fired_by_schedules"]),
        "{s:#}"
    );
    assert_eq!(n(&s["enqueue_failures"]), 0, "{s:#}");
    assert!(n(&tasks["succeeded"]) > 0, "{s:#}");
    assert!(n(&tasks["dead"]) >= 2, "{s:#}");
    assert_eq!(n(&tasks["running"]), 0, "drained: {s:#}");
    assert_eq!(n(&tasks["cancel_requested"]), 0, "{s:#}");
    let finished = ["succeeded", "partially_succeeded", "cancelled", "dead"]
        .iter()
        .map(|k| n(&tasks[*k]))
        .sum::<i64>();
    assert_eq!(n(&s["finished"]), finished, "{s:#}");
    assert!(s["processed_per_s"].as_f64().unwrap() > 0.0, "{s:#}");
    for t in TYPES {
        assert!(s["by_type"][t].is_object(), "{t} was fed: {s:#}");
    }
    assert!(n(&s["by_type"]["noop"]["succeeded"]) > 0, "{s:#}");
    // Poison (not retryable, and a payload that does not fit) and the task that hung past its
    // 4 s timeout are dead letters with their reasons.
    let dead = &s["dead_by_code"];
    assert!(n(&dead["poison"]) >= 1, "{s:#}");
    assert!(n(&dead["bad_payload"]) >= 1, "{s:#}");
    assert_eq!(n(&dead["timeout"]), 1, "{s:#}");

    // The file: stamped as a demo database, and the summary is what it holds.
    assert_eq!(application_id(&file), APPLICATION_ID);
    let pool = open(&file).await;
    let in_file = statuses(&pool).await;
    for (status, count) in tasks {
        assert_eq!(
            in_file.get(status).copied().unwrap_or(0),
            n(count),
            "{status}: file {in_file:?}, summary {s:#}"
        );
    }
    // The demo's cron schedules are in its file, and the ticks they fired are counted.
    let schedules: Vec<String> = sqlx::query_scalar("SELECT name FROM schedules ORDER BY name")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(schedules, ["demo.heartbeat", "demo.nightly-report"]);
    let fired: i64 =
        sqlx::query_scalar("SELECT count(*) FROM tasks WHERE idempotency_key LIKE 'schedule:%'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(fired, n(&s["fired_by_schedules"]), "{s:#}");
    let states: Vec<(String, String)> =
        sqlx::query_as("SELECT name, state FROM agents ORDER BY name")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        states,
        [
            ("demo-1".to_string(), "stopped".to_string()),
            ("demo-2".into(), "stopped".into()),
            ("demo-3".into(), "stopped".into())
        ]
    );
    // A flaky task retried (its attempt rows say so), with the demo's short backoff policy.
    let retried: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM tasks WHERE task_type = 'demo.flaky' AND attempt > 1",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(retried >= 1, "a flaky task retried: {s:#}");
    let base: Option<i64> =
        sqlx::query_scalar("SELECT retry_base_ms FROM policies WHERE scope = 'demo.flaky'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(base, Some(1000));
    // Progress was reported by the long tasks.
    let with_progress: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM tasks WHERE task_type = 'demo.long' AND progress IS NOT NULL",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(with_progress >= 1, "{s:#}");
    pool.close().await;

    // A second run replaces the first run's file: it counts only its own tasks.
    let again = leasehold(
        &dir,
        &["demo", "--headless", "--duration", "2s", "--agents", "1"],
        Duration::from_secs(2) + SLACK,
    )
    .await;
    assert_eq!(again.code, Some(0), "{}", again.describe());
    let s2: Value = serde_json::from_str(again.stdout.trim()).unwrap();
    assert_eq!(s2["agents"].as_array().unwrap().len(), 1, "{s2:#}");
    let pool = open(&file).await;
    let total_now: i64 = statuses(&pool).await.values().sum();
    assert_eq!(
        total_now,
        n(&s2["enqueued"]) + n(&s2["fired_by_schedules"]),
        "a fresh file: {s2:#}"
    );
    let agents_now: i64 = sqlx::query_scalar("SELECT count(*) FROM agents")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(agents_now, 1);
    pool.close().await;
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_the_demo_did_not_make_is_left_alone() {
    let dir = scratch("foreign");
    let file = dir.join(FILE);
    std::fs::write(&file, b"my own notes, not a database").unwrap();
    let run = leasehold(&dir, &["demo", "--headless", "--duration", "1s"], SLACK).await;
    assert_eq!(run.code, Some(2), "{}", run.describe());
    assert!(run.stdout.is_empty(), "{}", run.describe());
    assert!(run.stderr.contains("leaves it alone"), "{}", run.describe());
    assert_eq!(
        std::fs::read(&file).unwrap(),
        b"my own notes, not a database"
    );
    assert!(!dir.join(LOG).exists(), "nothing else was written");

    // A SQLite database of someone else's is left alone too.
    std::fs::remove_file(&file).unwrap();
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(
            SqliteConnectOptions::new()
                .filename(&file)
                .create_if_missing(true),
        )
        .await
        .unwrap();
    sqlx::query("CREATE TABLE notes (body TEXT)")
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
    let before = std::fs::read(&file).unwrap();
    let run = leasehold(&dir, &["demo", "--headless", "--duration", "1s"], SLACK).await;
    assert_eq!(run.code, Some(2), "{}", run.describe());
    assert!(run.stderr.contains("did not make"), "{}", run.describe());
    assert_eq!(std::fs::read(&file).unwrap(), before);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_demo_flags_exit_2_and_create_nothing() {
    let dir = scratch("flags");
    for (args, says) in [
        (&["demo", "--headless", "--agents", "0"][..], "--agents"),
        (&["demo", "--headless", "--agents", "17"][..], "--agents"),
        (
            &["demo", "--headless", "--duration", "abc"][..],
            "--duration",
        ),
        (
            &["demo", "--headless", "--duration", "0s"][..],
            "--duration",
        ),
        (&["demo", "--duration", "5s"][..], "--headless"),
        (
            &["demo", "--headless", "--database-url", "mysql://h/db"][..],
            "--database-url",
        ),
        // No terminal and no --headless.
        (&["demo"][..], "--headless"),
    ] {
        let run = leasehold(&dir, args, SLACK).await;
        assert_eq!(run.code, Some(2), "{args:?}: {}", run.describe());
        assert!(run.stderr.contains(says), "{args:?}: {}", run.describe());
        assert!(run.stdout.is_empty(), "{args:?}: {}", run.describe());
    }
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert!(left.is_empty(), "nothing created: {left:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

// -------------------------------------------------------------------------------------------
// Interactive, in a real terminal
// -------------------------------------------------------------------------------------------

/// The lease rows on a screen: `(task, type, agent)` of each table row under the header.
fn lease_rows(screen: &str) -> Vec<(String, String, String)> {
    screen
        .lines()
        .skip(4)
        .filter_map(|line| {
            let line = line
                .trim_start()
                .trim_start_matches(['>', '●'])
                .trim_start();
            let words: Vec<&str> = line.split_whitespace().collect();
            let id_like = words.first()?.chars().all(|c| c.is_ascii_digit());
            (id_like && words.len() > 3).then(|| {
                (
                    words[0].to_string(),
                    words[1].to_string(),
                    words[2].to_string(),
                )
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_interactive_demo_shows_live_leases_and_quits_cleanly() {
    let dir = scratch("interactive");
    let bin = binary("leasehold").await.unwrap();
    let mut words = vec!["env".to_string()];
    for var in ENV {
        words.push("-u".into());
        words.push(var.into());
    }
    words.push(bin.display().to_string());
    words.push("demo".into());
    let command = format!(
        "cd {} && {}; echo EXIT=$?; sleep 120",
        shell_quote(&dir.display().to_string()),
        words
            .iter()
            .map(|w| shell_quote(w))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let tmux = Tmux::start(&command, WIDTH, HEIGHT).unwrap();
    let log_tail = || {
        std::fs::read_to_string(dir.join(LOG))
            .map(|t| {
                let lines: Vec<&str> = t.lines().collect();
                lines[lines.len().saturating_sub(30)..].join("\n")
            })
            .unwrap_or_else(|e| format!("(no log: {e})"))
    };
    let wait = Duration::from_secs(60).max(SCREEN_TIMEOUT);

    // Live leases of the demo's types, held by its agents, with all three agents up.
    let screen = tmux
        .wait_screen("leases of demo agents and 3 agents up", wait, |s| {
            tmux.pane_format("#{alternate_on}").is_ok_and(|f| f == "1")
                && s.contains("3 up")
                && lease_rows(s)
                    .iter()
                    .any(|(_, t, a)| TYPES.contains(&t.as_str()) && a.starts_with("demo-"))
        })
        .await
        .unwrap_or_else(|e| panic!("{e:#}\nlog:\n{}", log_tail()));
    assert!(screen.contains("[1 Leases]"), "{screen}");

    // A dead letter (poison comes every 5 s), opened and closed.
    tmux.keys(&["4"]).unwrap();
    tmux.wait_screen("a dead letter", wait, |s| {
        s.contains("[4 Dead letters]") && !lease_rows(s).is_empty()
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\nlog:\n{}", log_tail()));
    tmux.keys(&["Enter"]).unwrap();
    tmux.wait_screen("the dead letter's detail", wait, |s| {
        s.contains("last error") && s.contains("Attempts")
    })
    .await
    .unwrap();
    tmux.escape().await.unwrap();
    tmux.wait_screen("the detail closed", wait, |s| !s.contains("Attempts"))
        .await
        .unwrap();

    // q asks first, since quitting stops the agents; Esc keeps the demo going.
    tmux.keys(&["q"]).unwrap();
    tmux.wait_screen("the quit question", wait, |s| {
        s.contains("Stop the demo's 3 agents?")
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\nlog:\n{}", log_tail()));
    tmux.escape().await.unwrap();
    tmux.wait_screen("the demo going on", wait, |s| {
        !s.contains("Stop the demo's 3 agents?") && s.contains("3 up") && exit_code(s).is_none()
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\nlog:\n{}", log_tail()));

    // q y: the agents drain, the terminal is back, and the demo says where its file is.
    tmux.keys(&["q"]).unwrap();
    tmux.wait_screen("the quit question again", wait, |s| {
        s.contains("Stop the demo's 3 agents?")
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\nlog:\n{}", log_tail()));
    tmux.keys(&["y"]).unwrap();
    let screen = tmux
        .wait_screen("the demo's exit code", wait, |s| exit_code(s).is_some())
        .await
        .unwrap_or_else(|e| panic!("{e:#}\nlog:\n{}", log_tail()));
    assert_eq!(exit_code(&screen), Some(0), "{screen}");
    let file = dir.join(FILE);
    // The pane wraps long lines: look at the text without line breaks.
    let flat = screen.replace('\n', "");
    assert!(
        flat.contains(&format!("demo database: {}", file.display())),
        "{screen}"
    );
    assert!(screen.contains("reopen it:"), "{screen}");
    assert!(
        flat.contains(&format!(
            "leasehold-agent run --database-url sqlite://{}",
            file.display()
        )),
        "{screen}"
    );
    assert_eq!(tmux.pane_format("#{alternate_on}").unwrap(), "0");
    assert_eq!(tmux.pane_format("#{cursor_flag}").unwrap(), "1");
    // Nothing was logged onto the terminal.
    assert!(!screen.contains(" INFO "), "{screen}");
    assert!(!screen.contains(" WARN "), "{screen}");

    assert_eq!(application_id(&file), APPLICATION_ID);
    let pool = open(&file).await;
    let running: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM tasks WHERE status IN ('running', 'cancel_requested')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(running, 0, "every lease released or finished");
    let up: i64 = sqlx::query_scalar("SELECT count(*) FROM agents WHERE state <> 'stopped'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(up, 0, "every agent stopped");
    pool.close().await;
    drop(tmux);
    std::fs::remove_dir_all(&dir).unwrap();
}
