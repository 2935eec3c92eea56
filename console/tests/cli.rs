//! The `leasehold` binary against a fake agent over real gRPC (plaintext, TLS, mutual TLS):
//! output formats, exit codes, environment fallbacks, tokens. The fake is in `support/`; the
//! end-to-end tests against a real agent live in the workspace's `tests/` crate.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// The fake agent answers with the words only, as agents before the state and outcome enums
// did: the commands must print the same from them.
#![allow(deprecated)]

mod support;

use std::io::{BufRead, BufReader};
use support::{Fake, Transport, WatchMode, leasehold, stderr, stdout};

fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

async fn plain() -> (String, Fake) {
    let running = Fake::new().start(Transport::Plain).await;
    (running.addr.to_string(), running.fake)
}

#[tokio::test(flavor = "multi_thread")]
async fn no_command_without_a_terminal_says_the_console_needs_one() {
    // The test's stdin and stdout are pipes, as in a script.
    let o = leasehold(&[], &[]).await;
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("the console needs a terminal"),
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("leasehold --help"));
    assert_eq!(stdout(&o), "");
}

#[tokio::test(flavor = "multi_thread")]
async fn usage_errors_exit_2_before_any_connection() {
    // Port 1 on loopback refuses connections: these must fail without trying.
    for args in [
        &["--agent", "127.0.0.1:1", "dlq", "requeue"][..],
        &["--agent", "127.0.0.1:1", "dlq", "purge"][..],
        &[
            "--agent",
            "127.0.0.1:1",
            "enqueue",
            "noop",
            "--payload",
            "{oops",
        ],
        &[
            "--agent",
            "127.0.0.1:1",
            "concurrency",
            "set",
            "unlimited",
            "--local",
        ],
        &["--agent", "127.0.0.1:1", "--tls", "drain"],
        &["--agent", "not an address", "drain"],
        &["tasks", "ls", "--status", "zombie"],
        &["frobnicate"],
    ] {
        let o = leasehold(args, &[]).await;
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(
            !stderr(&o).contains("cannot reach"),
            "{args:?}: {}",
            stderr(&o)
        );
        assert_eq!(stdout(&o), "", "{args:?}");
    }
    let o = leasehold(&["dlq", "requeue"], &[]).await;
    assert_eq!(
        stderr(&o),
        "leasehold: dlq requeue: give a filter or --all (--type, --code, --since, --until)\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_agent_is_exit_3() {
    let o = leasehold(&["--agent", "127.0.0.1:1", "tasks", "ls"], &[]).await;
    assert_eq!(o.status.code(), Some(3));
    let err = stderr(&o);
    assert!(
        err.starts_with("leasehold: cannot reach agent at 127.0.0.1:1: "),
        "{err}"
    );
    assert!(err.to_lowercase().contains("refused"), "{err}");
    assert_eq!(stdout(&o), "");
}

#[tokio::test(flavor = "multi_thread")]
async fn env_fallbacks_and_flags_winning_over_them() {
    let (addr, fake) = plain().await;
    let o = leasehold(&["agents", "ls"], &[("LEASEHOLD_AGENT", &addr)]).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("fake#1"));
    // The flag wins over the variable.
    let o = leasehold(
        &["--agent", &addr, "agents", "ls"],
        &[("LEASEHOLD_AGENT", "127.0.0.1:1")],
    )
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // LEASEHOLD_TOKEN and --token reach the agent as a bearer header.
    leasehold(
        &["--agent", &addr, "drain"],
        &[("LEASEHOLD_TOKEN", "from-env")],
    )
    .await;
    leasehold(
        &["--agent", &addr, "--token", "from-flag", "drain"],
        &[("LEASEHOLD_TOKEN", "from-env")],
    )
    .await;
    leasehold(&["--agent", &addr, "drain"], &[]).await;
    let auth = fake.auth();
    let n = auth.len();
    assert_eq!(
        auth[n - 3..],
        [
            Some("Bearer from-env".to_owned()),
            Some("Bearer from-flag".to_owned()),
            None
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn tokens_unauthenticated_and_permission_denied_are_exit_4() {
    let running = Fake::new()
        .with_token("operator")
        .start(Transport::Plain)
        .await;
    let addr = running.addr.to_string();
    let o = leasehold(&["--agent", &addr, "drain"], &[]).await;
    assert_eq!(o.status.code(), Some(4));
    assert_eq!(
        stderr(&o),
        format!("leasehold: drain agent at {addr}: missing or unknown token (unauthenticated)\n")
    );
    let o = leasehold(
        &["--agent", &addr, "--token", "viewer", "pause", "noop"],
        &[],
    )
    .await;
    assert_eq!(o.status.code(), Some(4));
    assert!(
        stderr(&o).ends_with("(permission denied)\n"),
        "{}",
        stderr(&o)
    );
    let o = leasehold(
        &["--agent", &addr, "--token", "viewer", "agents", "ls"],
        &[],
    )
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = leasehold(
        &["--agent", &addr, "--token", "operator", "pause", "noop"],
        &[],
    )
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "paused type noop\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn enqueue_table_and_json() {
    let (addr, fake) = plain().await;
    let o = leasehold(
        &["--agent", &addr, "enqueue", "noop", "--priority", "-2"],
        &[],
    )
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "enqueued task 42 (type noop, priority -2)\n");
    let o = leasehold(
        &[
            "--agent",
            &addr,
            "--output",
            "json",
            "enqueue",
            "sleep",
            "--payload",
            r#"{"ms": 5}"#,
        ],
        &[],
    )
    .await;
    let v = &json_lines(&stdout(&o))[0];
    assert_eq!(v["id"], 42);
    assert_eq!(v["created"], true);
    assert_eq!(v["task_type"], "sleep");
    assert_eq!(v["payload"], serde_json::json!({"ms": 5}));
    let o = leasehold(
        &[
            "--agent",
            &addr,
            "enqueue",
            "noop",
            "--idempotency-key",
            "seen",
        ],
        &[],
    )
    .await;
    assert_eq!(
        stdout(&o),
        "task 42 already exists (idempotency key seen)\n"
    );
    assert!(
        fake.calls()
            .contains(&r#"enqueue sleep {"ms": 5} prio=0"#.to_owned())
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn enqueue_reads_the_payload_from_stdin() {
    let (addr, fake) = plain().await;
    let out = tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
            .args(["--agent", &addr, "enqueue", "noop", "--payload-file", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(b"[1, 2]").unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(
        fake.calls()
            .contains(&"enqueue noop [1, 2] prio=0".to_owned())
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn agent_errors_are_one_line_on_stderr_with_the_code() {
    let (addr, _) = plain().await;
    let o = leasehold(
        &["--agent", &addr, "--output", "json", "enqueue", "unknown"],
        &[],
    )
    .await;
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(stdout(&o), "");
    assert_eq!(
        stderr(&o),
        "leasehold: enqueue unknown: task_type: no agent serves type unknown (invalid argument)\n"
    );
    let o = leasehold(&["--agent", &addr, "tasks", "show", "404"], &[]).await;
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        "leasehold: get task 404: no task 404 (not found)\n"
    );
    let o = leasehold(&["--agent", &addr, "tasks", "show", "666"], &[]).await;
    assert_eq!(o.status.code(), Some(3));
    assert!(
        stderr(&o).contains("get task 666: the agent sent task status 0"),
        "{}",
        stderr(&o)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn tasks_ls_and_show() {
    let (addr, fake) = plain().await;
    let o = leasehold(
        &[
            "--agent", &addr, "tasks", "ls", "--status", "dead", "--limit", "2",
        ],
        &[],
    )
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].contains("ID") && lines[0].contains("STATUS"),
        "{text}"
    );
    assert!(
        lines[1].contains("dead") && lines[1].contains("smtp_timeout: connection timed out"),
        "{text}"
    );
    assert_eq!(lines.last(), Some(&"next page: --before 1"));
    assert!(text.lines().all(|l| l.chars().count() <= 80));
    assert!(
        fake.calls()
            .iter()
            .any(|c| c == "list_tasks statuses=[8] type= before=0 limit=2")
    );
    let o = leasehold(&["--agent", &addr, "--output", "json", "tasks", "ls"], &[]).await;
    let v = &json_lines(&stdout(&o))[0];
    assert_eq!(v["next_before_id"], 1);
    assert_eq!(v["tasks"][0]["status"], "dead");
    let o = leasehold(&["--agent", &addr, "tasks", "show", "2"], &[]).await;
    assert_eq!(o.status.code(), Some(0));
    assert!(
        stdout(&o).starts_with("task 2: noop, dead\n"),
        "{}",
        stdout(&o)
    );
    assert!(stdout(&o).contains("Attempts:"));
    let o = leasehold(
        &["--agent", &addr, "--output", "json", "tasks", "show", "2"],
        &[],
    )
    .await;
    let v = &json_lines(&stdout(&o))[0];
    assert_eq!(v["task"]["id"], 2);
    assert_eq!(v["task"]["last_error"]["code"], "smtp_timeout");
    assert_eq!(v["attempts"][0]["finished_at"], serde_json::Value::Null);
}

#[tokio::test(flavor = "multi_thread")]
async fn tasks_show_to_a_pipe_prints_whole_lines_progress_and_the_running_attempt() {
    let (addr, _fake) = plain().await;
    // stdout is a pipe here, as in `leasehold tasks show 5 | grep …`.
    let o = leasehold(&["--agent", &addr, "tasks", "show", "5"], &[]).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    // Nothing cut: the payload's 150-character value is there whole.
    let note = format!(r#""note": "{}""#, "n".repeat(150));
    assert!(text.contains(&note), "{text}");
    assert!(!text.contains('…'), "{text}");
    // Progress in words, not JSON.
    assert!(
        text.contains("progress         26/28 (25 succeeded, 1 failed)\n"),
        "{text}"
    );
    // The attempt running now is listed after the one that ended.
    let attempts: Vec<&str> = text
        .lines()
        .skip_while(|l| *l != "Attempts:")
        .skip(2)
        .take(2)
        .collect();
    assert_eq!(attempts.len(), 2, "{text}");
    assert!(
        attempts[0].contains("fake#1") && attempts[0].contains("lease_expired"),
        "{text}"
    );
    let running: Vec<&str> = attempts[1].split_whitespace().collect();
    assert_eq!(running[..3], ["2", "2", "fake#1"], "{text}");
    assert!(attempts[1].contains("running"), "{text}");
    assert!(!text.contains("none yet"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_processes_every_id_and_exits_with_the_worst() {
    let (addr, _) = plain().await;
    let o = leasehold(&["--agent", &addr, "cancel", "7", "8", "9"], &[]).await;
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stdout(&o),
        "task 7: cancelled\ntask 8: finished first: succeeded\n"
    );
    assert_eq!(
        stderr(&o),
        "leasehold: cancel task 9: task 9 is already finished (dead) (failed precondition)\n"
    );
    let o = leasehold(
        &[
            "--agent",
            &addr,
            "--output",
            "json",
            "cancel",
            "8",
            "--no-wait",
        ],
        &[],
    )
    .await;
    assert_eq!(o.status.code(), Some(0));
    let v = &json_lines(&stdout(&o))[0];
    assert_eq!(v["outcome"], "succeeded");
    assert_eq!(v["status"], "succeeded");
}

#[tokio::test(flavor = "multi_thread")]
async fn requeue_dlq_concurrency_pause_resume_drain() {
    let (addr, fake) = plain().await;
    let run = |args: Vec<&str>| {
        let mut all = vec!["--agent", addr.as_str()];
        all.extend(args);
        let owned: Vec<String> = all.iter().map(|s| (*s).to_owned()).collect();
        async move {
            let refs: Vec<&str> = owned.iter().map(String::as_str).collect();
            leasehold(&refs, &[]).await
        }
    };
    let o = run(vec!["requeue", "2"]).await;
    assert_eq!(stdout(&o), "task 2: requeued (was dead)\n");
    let o = run(vec!["dlq", "requeue", "--all", "--dry-run"]).await;
    assert_eq!(
        stdout(&o),
        "would requeue 3 dead tasks (dry run)\nids: 9 8 7\n"
    );
    let o = run(vec!["--output", "json", "dlq", "requeue", "--type", "noop"]).await;
    assert_eq!(stdout(&o), "{\"count\":3,\"dry_run\":false}\n");
    let o = run(vec![
        "--output",
        "json",
        "dlq",
        "purge",
        "--all",
        "--dry-run",
    ])
    .await;
    assert_eq!(
        stdout(&o),
        "{\"count\":3,\"dry_run\":true,\"ids\":[9,8,7],\"next_before\":null}\n"
    );
    let o = run(vec!["dlq", "purge", "--type", "noop"]).await;
    assert_eq!(stdout(&o), "purged 3 dead tasks\n");
    let o = run(vec!["dlq", "ls"]).await;
    assert!(
        stdout(&o)
            .lines()
            .next()
            .is_some_and(|l| l.contains("MESSAGE") && l.contains("DIED"))
    );
    let o = run(vec!["concurrency", "set", "5", "--type", "noop"]).await;
    assert_eq!(stdout(&o), "type noop limit: unlimited → 5\n");
    let o = run(vec!["concurrency", "set", "unlimited", "--global"]).await;
    assert_eq!(stdout(&o), "global limit: unlimited → unlimited\n");
    let o = run(vec!["resume", "noop"]).await;
    assert_eq!(stdout(&o), "type noop was not paused (nothing changed)\n");
    let o = run(vec!["drain"]).await;
    assert_eq!(
        stdout(&o),
        format!("agent at {addr} is draining (3 leases held)\n")
    );
    let o = run(vec!["--output", "json", "agents", "ls"]).await;
    let v = &json_lines(&stdout(&o))[0];
    assert_eq!(v["agents"][0]["heartbeat_age_ms"], 2000);
    let calls = fake.calls();
    assert!(
        calls.contains(&"requeue_dead type= all=true dry_run=true".to_owned()),
        "{calls:?}"
    );
    assert!(
        calls.contains(&"purge_dead type=noop all=false dry_run=false".to_owned()),
        "{calls:?}"
    );
    assert!(
        calls.contains(&"set_concurrency Some(TaskType(\"noop\")) 5 false".to_owned()),
        "{calls:?}"
    );
}

/// Issue 23: `concurrency set N --type T --per-key` and its clear (`unlimited`), the agent's
/// warning on stderr, `enqueue --concurrency-key`, and the PER-KEY column of `types`; usage
/// errors exit 2 before any call.
#[tokio::test(flavor = "multi_thread")]
async fn per_key_limits_and_concurrency_keys_print_and_exit_as_documented() {
    let (addr, fake) = plain().await;
    let run = |args: Vec<&str>| {
        let mut all = vec!["--agent", addr.as_str()];
        all.extend(args);
        let owned: Vec<String> = all.iter().map(|s| (*s).to_owned()).collect();
        async move {
            let refs: Vec<&str> = owned.iter().map(String::as_str).collect();
            leasehold(&refs, &[]).await
        }
    };
    let o = run(vec![
        "concurrency",
        "set",
        "3",
        "--type",
        "email.send",
        "--per-key",
    ])
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "type email.send per-key limit: 2 → 3\n");
    assert_eq!(stderr(&o), "");
    let o = run(vec![
        "--output",
        "json",
        "concurrency",
        "set",
        "unlimited",
        "--type",
        "email.send",
        "--per-key",
    ])
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        json_lines(&stdout(&o)),
        [serde_json::json!({
            "scope": "per_key", "task_type": "email.send", "previous": 2, "limit": null
        })]
    );
    // Applied with a warning: stdout stays the result, the warning goes to stderr.
    let o = run(vec![
        "concurrency",
        "set",
        "1",
        "--type",
        "lonely",
        "--per-key",
    ])
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "type lonely per-key limit: unlimited → 1\n");
    assert_eq!(
        stderr(&o),
        "leasehold: warning: no live agent handles type lonely\n"
    );
    let o = run(vec!["enqueue", "email.send", "--concurrency-key", "acme"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "enqueued task 42 (type email.send, priority 0, concurrency key acme)\n"
    );
    let o = run(vec![
        "--output",
        "json",
        "enqueue",
        "email.send",
        "--concurrency-key",
        "acme",
    ])
    .await;
    assert_eq!(json_lines(&stdout(&o))[0]["concurrency_key"], "acme");
    let o = run(vec!["types"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    // email.send also has a rate limit and sheds: on 80 columns the PER-KEY column (a
    // setting) gives way first, and a line says where it is.
    assert!(
        !out.lines().next().unwrap_or_default().contains("PER-KEY"),
        "{out}"
    );
    assert!(
        out.contains(
            "\nPER-KEY left out to fit 80 columns; `leasehold types --output json` has it\n"
        ),
        "{out}"
    );
    let o = run(vec!["--output", "json", "types"]).await;
    let v = &json_lines(&stdout(&o))[0];
    assert_eq!(v["types"][0]["per_key_limit"], 2);
    assert_eq!(v["types"][1]["per_key_limit"], serde_json::Value::Null);
    let calls = fake.calls();
    for call in [
        "set_concurrency Some(TaskType(\"email.send\")) 3 false per_key",
        "set_concurrency Some(TaskType(\"email.send\")) 0 true per_key",
        "set_concurrency Some(TaskType(\"lonely\")) 1 false per_key",
    ] {
        assert!(calls.contains(&call.to_owned()), "{call} not in {calls:?}");
    }

    // Usage errors: exit 2, nothing on stdout, no call (port 1 refuses connections).
    let before = fake.calls().len();
    for (args, says) in [
        (
            &["concurrency", "set", "2", "--global", "--per-key"][..],
            "--per-key goes with --type TYPE",
        ),
        (
            &["concurrency", "set", "2", "--local", "--per-key"],
            "--per-key goes with --type TYPE",
        ),
        (
            &[
                "concurrency",
                "set",
                "0",
                "--type",
                "email.send",
                "--per-key",
            ],
            "a per-key limit is 1..=1000000",
        ),
        (
            &[
                "concurrency",
                "set",
                "1000001",
                "--type",
                "email.send",
                "--per-key",
            ],
            "1000001",
        ),
        (&["concurrency", "set", "2", "--per-key"], "--type"),
        (
            &["enqueue", "noop", "--concurrency-key", ""],
            "--concurrency-key",
        ),
        (
            &["enqueue", "noop", "--concurrency-key", "a\u{1b}[2Jb"],
            "without control characters",
        ),
    ] {
        let mut all = vec!["--agent", "127.0.0.1:1"];
        all.extend(args);
        let o = leasehold(&all, &[]).await;
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert_eq!(stdout(&o), "", "{args:?}");
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
        assert!(
            !stderr(&o).contains("cannot reach"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
    assert_eq!(fake.calls().len(), before);
}

#[tokio::test(flavor = "multi_thread")]
async fn ratelimit_set_clear_and_ls_print_and_exit_as_documented() {
    let (addr, fake) = plain().await;
    let run = |args: Vec<&str>| {
        let mut all = vec!["--agent", addr.as_str()];
        all.extend(args);
        let owned: Vec<String> = all.iter().map(|s| (*s).to_owned()).collect();
        async move {
            let refs: Vec<&str> = owned.iter().map(String::as_str).collect();
            leasehold(&refs, &[]).await
        }
    };
    let o = run(vec!["ratelimit", "set", "email.send", "50/1s"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "rate limit of type email.send: 50/1s (was 20/1s)\n"
    );
    let o = run(vec!["ratelimit", "set", "--global", "1000/1m"]).await;
    assert_eq!(stdout(&o), "global rate limit: 1000/1m (was none)\n");
    let o = run(vec!["--output", "json", "ratelimit", "clear", "email.send"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        json_lines(&stdout(&o)),
        [serde_json::json!({
            "scope": "type",
            "task_type": "email.send",
            "limit": null,
            "previous": {"starts": 20, "period_ms": 1000, "text": "20/1s"}
        })]
    );
    let o = run(vec!["ratelimit", "clear", "--global"]).await;
    assert_eq!(
        stdout(&o),
        "there was no global rate limit (nothing changed)\n"
    );
    // What the agent refuses is bad input: exit 2, the agent's words on stderr.
    let o = run(vec!["ratelimit", "set", "unknown", "5/1s"]).await;
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        "leasehold: set the rate limit of type unknown: task_type: no agent serves type \
         unknown (invalid argument)\n"
    );
    assert_eq!(stdout(&o), "");
    let o = run(vec!["ratelimit", "ls"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "SCOPE   TYPE        LIMIT    USED\n\
         global  -           1000/1m  812/1000\n\
         type    email.send  50/1s    12/50\n"
    );
    let o = run(vec!["--output", "json", "ratelimit", "ls"]).await;
    let v = &json_lines(&stdout(&o))[0];
    assert_eq!(v[0]["scope"], "global");
    assert_eq!(v[1]["task_type"], "email.send");
    assert_eq!(v[1]["used"], 12);
    let o = run(vec!["types"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("12/50/1s"), "{out}");
    assert!(
        out.ends_with("global: unlimited\nglobal rate limit: 1000/1m, 812 used\n"),
        "{out}"
    );
    let calls = fake.calls();
    for call in [
        "set_rate_limit Some(TaskType(\"email.send\")) Some((50, 1000)) clear=false",
        "set_rate_limit Some(Global(true)) Some((1000, 60000)) clear=false",
        "set_rate_limit Some(TaskType(\"email.send\")) None clear=true",
        "set_rate_limit Some(Global(true)) None clear=true",
    ] {
        assert!(calls.contains(&call.to_owned()), "{call} not in {calls:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn ratelimit_refuses_bad_rates_before_connecting_and_viewers_are_exit_4() {
    for rate in [
        "0/1s",
        "1000001/1s",
        "50/25h",
        "50/0s",
        "50/1500us",
        "fifty/1s",
    ] {
        let o = leasehold(
            &["--agent", "127.0.0.1:1", "ratelimit", "set", "noop", rate],
            &[],
        )
        .await;
        assert_eq!(o.status.code(), Some(2), "{rate}: {}", stderr(&o));
        assert!(
            !stderr(&o).contains("cannot reach"),
            "{rate}: {}",
            stderr(&o)
        );
        assert_eq!(stdout(&o), "", "{rate}");
    }
    let running = Fake::new()
        .with_token("operator")
        .start(Transport::Plain)
        .await;
    let addr = running.addr.to_string();
    let o = leasehold(
        &[
            "--agent",
            &addr,
            "--token",
            "viewer",
            "ratelimit",
            "set",
            "noop",
            "5/1s",
        ],
        &[],
    )
    .await;
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(
        stderr(&o).ends_with("(permission denied)\n"),
        "{}",
        stderr(&o)
    );
    let o = leasehold(
        &["--agent", &addr, "--token", "viewer", "ratelimit", "ls"],
        &[],
    )
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[tokio::test(flavor = "multi_thread")]
async fn shed_set_and_clear_print_and_exit_as_documented() {
    let (addr, fake) = plain().await;
    let run = |args: Vec<&str>| {
        let mut all = vec!["--agent", addr.as_str()];
        all.extend(args);
        let owned: Vec<String> = all.iter().map(|s| (*s).to_owned()).collect();
        async move {
            let refs: Vec<&str> = owned.iter().map(String::as_str).collect();
            leasehold(&refs, &[]).await
        }
    };
    let o = run(vec!["shed", "set", "noop", "30s"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "type noop sheds tasks waiting over 30s (was never)\n"
    );
    assert_eq!(stderr(&o), "");
    let o = run(vec!["shed", "set", "email.send", "5m"]).await;
    assert_eq!(
        stdout(&o),
        "type email.send sheds tasks waiting over 5m (was 1m)\n"
    );
    let o = run(vec!["shed", "set", "email.send", "60s"]).await;
    assert_eq!(
        stdout(&o),
        "type email.send sheds tasks waiting over 1m (unchanged)\n"
    );
    let o = run(vec!["shed", "clear", "email.send"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "type email.send no longer sheds (was 1m)\n");
    let o = run(vec!["shed", "clear", "noop"]).await;
    assert_eq!(stdout(&o), "type noop did not shed (nothing changed)\n");
    let o = run(vec!["--output", "json", "shed", "set", "email.send", "30s"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        json_lines(&stdout(&o)),
        [serde_json::json!({
            "task_type": "email.send",
            "shed_after_ms": 30000,
            "previous_ms": 60000
        })]
    );
    let o = run(vec!["--output", "json", "shed", "clear", "noop"]).await;
    assert_eq!(
        json_lines(&stdout(&o)),
        [serde_json::json!({"task_type": "noop", "shed_after_ms": null, "previous_ms": null})]
    );
    // A warning goes to stderr in both modes; stdout stays the result.
    let o = run(vec!["shed", "set", "lonely", "1h"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "type lonely sheds tasks waiting over 1h (was never)\n"
    );
    assert_eq!(
        stderr(&o),
        "leasehold: warning: no live agent handles type lonely\n"
    );
    let o = run(vec!["--output", "json", "shed", "set", "lonely", "1h"]).await;
    assert_eq!(json_lines(&stdout(&o))[0]["shed_after_ms"], 3_600_000);
    assert_eq!(
        stderr(&o),
        "leasehold: warning: no live agent handles type lonely\n"
    );
    // What the agent refuses is bad input: exit 2, the agent's words on stderr.
    let o = run(vec!["shed", "set", "unknown", "30s"]).await;
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        "leasehold: set load shedding of type unknown: task_type: no agent serves type \
         unknown (invalid argument)\n"
    );
    assert_eq!(stdout(&o), "");
    // `types` shows the shedding: the count and the duration, and the JSON both.
    let o = run(vec!["types"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].contains("SHED/M"), "{out}");
    assert!(lines[1].contains("4 >30s"), "{out}");
    assert!(
        lines[2].starts_with("noop") && lines[2].contains(" - "),
        "{out}"
    );
    let o = run(vec!["--output", "json", "types"]).await;
    let v = &json_lines(&stdout(&o))[0];
    assert_eq!(v["types"][0]["shed_after_ms"], 30_000);
    assert_eq!(v["types"][0]["shed_last_minute"], 4);
    assert_eq!(v["types"][1]["shed_after_ms"], serde_json::Value::Null);
    assert_eq!(v["types"][1]["shed_last_minute"], 0);
    let calls = fake.calls();
    for call in [
        "set_shed_after noop 30000 clear=false",
        "set_shed_after email.send 300000 clear=false",
        "set_shed_after email.send 0 clear=true",
        "set_shed_after noop 0 clear=true",
        "set_shed_after lonely 3600000 clear=false",
    ] {
        assert!(calls.contains(&call.to_owned()), "{call} not in {calls:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn shed_refuses_bad_durations_before_connecting_and_viewers_are_exit_4() {
    for after in ["0s", "0", "500us", "1500us", "8d", "30", "soon"] {
        let o = leasehold(
            &["--agent", "127.0.0.1:1", "shed", "set", "noop", after],
            &[],
        )
        .await;
        assert_eq!(o.status.code(), Some(2), "{after}: {}", stderr(&o));
        assert!(
            !stderr(&o).contains("cannot reach"),
            "{after}: {}",
            stderr(&o)
        );
        assert_eq!(stdout(&o), "", "{after}");
    }
    let running = Fake::new()
        .with_token("operator")
        .start(Transport::Plain)
        .await;
    let addr = running.addr.to_string();
    for args in [
        &["shed", "set", "noop", "30s"][..],
        &["shed", "clear", "noop"],
    ] {
        let mut all = vec!["--agent", addr.as_str(), "--token", "viewer"];
        all.extend_from_slice(args);
        let o = leasehold(&all, &[]).await;
        assert_eq!(o.status.code(), Some(4), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).ends_with("(permission denied)\n"),
            "{}",
            stderr(&o)
        );
        assert_eq!(stdout(&o), "", "{args:?}");
    }
}

/// Issue 23: `breaker set|clear|ls` through the fake: what each prints in both modes, the
/// agent's warning on stderr, its refusal as exit 2; `ls` on an overview without breakers.
#[tokio::test(flavor = "multi_thread")]
async fn breaker_set_clear_and_ls_print_and_exit_as_documented() {
    let (addr, fake) = plain().await;
    let run = |args: Vec<&str>| {
        let mut all = vec!["--agent", addr.as_str()];
        all.extend(args);
        let owned: Vec<String> = all.iter().map(|s| (*s).to_owned()).collect();
        async move {
            let refs: Vec<&str> = owned.iter().map(String::as_str).collect();
            leasehold(&refs, &[]).await
        }
    };
    let set = |t: &'static str, n: &'static str, within: &'static str, cooldown: &'static str| {
        vec![
            "breaker",
            "set",
            t,
            "--failures",
            n,
            "--within",
            within,
            "--cooldown",
            cooldown,
        ]
    };
    let o = run(set("noop", "3", "10s", "250ms")).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "type noop circuit breaker: 3 failures within 10s, cooldown 250ms (was none)\n"
    );
    assert_eq!(stderr(&o), "");
    let o = run(set("email.send", "5", "60s", "30s")).await;
    assert_eq!(
        stdout(&o),
        "type email.send circuit breaker: 5 failures within 1m, cooldown 30s (unchanged)\n"
    );
    let o = run(set("email.send", "10", "1m", "1h")).await;
    assert_eq!(
        stdout(&o),
        "type email.send circuit breaker: 10 failures within 1m, cooldown 1h \
         (was 5 failures within 1m, cooldown 30s)\n"
    );
    let o = run(vec!["breaker", "clear", "email.send"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "type email.send circuit breaker cleared (was 5 failures within 1m, cooldown 30s)\n"
    );
    let o = run(vec!["breaker", "clear", "noop"]).await;
    assert_eq!(
        stdout(&o),
        "type noop had no circuit breaker (nothing changed)\n"
    );
    let mut json = vec!["--output", "json"];
    json.extend(set("email.send", "3", "1m", "2s"));
    let o = run(json).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        json_lines(&stdout(&o)),
        [serde_json::json!({
            "task_type": "email.send",
            "breaker": {
                "failures": 3, "within_ms": 60000, "cooldown_ms": 2000,
                "text": "3 failures within 1m, cooldown 2s"
            },
            "previous": {
                "failures": 5, "within_ms": 60000, "cooldown_ms": 30000,
                "text": "5 failures within 1m, cooldown 30s"
            }
        })]
    );
    let o = run(vec!["--output", "json", "breaker", "clear", "noop"]).await;
    assert_eq!(
        json_lines(&stdout(&o)),
        [serde_json::json!({"task_type": "noop", "breaker": null, "previous": null})]
    );
    // A warning goes to stderr; stdout stays the result.
    let o = run(set("lonely", "5", "1m", "30s")).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "type lonely circuit breaker: 5 failures within 1m, cooldown 30s (was none)\n"
    );
    assert_eq!(
        stderr(&o),
        "leasehold: warning: no live agent handles type lonely\n"
    );
    // What the agent refuses is bad input: exit 2, the agent's words on stderr.
    let o = run(set("unknown", "5", "1m", "30s")).await;
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        "leasehold: set the circuit breaker of type unknown: task_type: no agent serves type \
         unknown (invalid argument)\n"
    );
    assert_eq!(stdout(&o), "");
    // The fake's overview has no breaker: `ls` says so, the JSON is [], `types` has no column.
    let o = run(vec!["breaker", "ls"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "no circuit breakers\n");
    let o = run(vec!["--output", "json", "breaker", "ls"]).await;
    assert_eq!(json_lines(&stdout(&o)), [serde_json::json!([])]);
    let o = run(vec!["types"]).await;
    assert!(!stdout(&o).contains("BREAKER"), "{}", stdout(&o));
    let o = run(vec!["--output", "json", "types"]).await;
    let v = &json_lines(&stdout(&o))[0];
    assert_eq!(v["types"][0]["breaker"], serde_json::Value::Null);
    let calls = fake.calls();
    for call in [
        "set_breaker noop 3 10000 250 clear=false",
        "set_breaker email.send 10 60000 3600000 clear=false",
        "set_breaker email.send 0 0 0 clear=true",
        "set_breaker lonely 5 60000 30000 clear=false",
    ] {
        assert!(calls.contains(&call.to_owned()), "{call} not in {calls:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn breaker_refuses_bad_input_before_connecting_and_viewers_are_exit_4() {
    let good = [
        "breaker",
        "set",
        "noop",
        "--failures",
        "5",
        "--within",
        "1m",
        "--cooldown",
        "30s",
    ];
    let bad = |i: usize, value: &'static str| {
        let mut args = good;
        args[i] = value;
        args.to_vec()
    };
    for args in [
        bad(4, "0"),
        bad(4, "1000001"),
        bad(4, "many"),
        bad(6, "0s"),
        bad(6, "25h"),
        bad(6, "1500us"),
        bad(8, "0"),
        bad(8, "8d"),
        bad(2, "Noop"),
        good[..7].to_vec(),
        vec!["breaker", "clear"],
        vec!["breaker", "ls", "extra"],
    ] {
        let mut all = vec!["--agent", "127.0.0.1:1"];
        all.extend(&args);
        let o = leasehold(&all, &[]).await;
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(
            !stderr(&o).contains("cannot reach"),
            "{args:?}: {}",
            stderr(&o)
        );
        assert_eq!(stdout(&o), "", "{args:?}");
    }
    let running = Fake::new()
        .with_token("operator")
        .start(Transport::Plain)
        .await;
    let addr = running.addr.to_string();
    for args in [&good[..], &["breaker", "clear", "noop"]] {
        let mut all = vec!["--agent", addr.as_str(), "--token", "viewer"];
        all.extend_from_slice(args);
        let o = leasehold(&all, &[]).await;
        assert_eq!(o.status.code(), Some(4), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).ends_with("(permission denied)\n"),
            "{}",
            stderr(&o)
        );
        assert_eq!(stdout(&o), "", "{args:?}");
    }
    let o = leasehold(
        &["--agent", &addr, "--token", "viewer", "breaker", "ls"],
        &[],
    )
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[tokio::test(flavor = "multi_thread")]
async fn schedules_commands_print_and_exit_as_documented() {
    let (addr, fake) = plain().await;
    let run = |args: Vec<&str>| {
        let mut all = vec!["--agent", addr.as_str()];
        all.extend(args);
        let owned: Vec<String> = all.iter().map(|s| (*s).to_owned()).collect();
        async move {
            let refs: Vec<&str> = owned.iter().map(String::as_str).collect();
            leasehold(&refs, &[]).await
        }
    };
    let o = run(vec!["schedules", "ls"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let lines: Vec<String> = stdout(&o).lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(lines[0].starts_with("NAME"), "{}", lines[0]);
    assert!(
        lines[1].starts_with("broken") && lines[1].contains("error: no agent handles"),
        "{}",
        lines[1]
    );
    assert!(
        lines[2].contains("in 30s") && lines[2].ends_with("succeeded"),
        "{}",
        lines[2]
    );
    let o = run(vec!["--output", "json", "schedules", "ls"]).await;
    let v = &json_lines(&stdout(&o))[0];
    assert_eq!(v.as_array().map(Vec::len), Some(2));
    assert_eq!(v[1]["name"], "nightly");
    assert_eq!(v[1]["last_task_status"], "succeeded");
    assert_eq!(v[0]["next_fire_at"], serde_json::Value::Null);

    let o = run(vec![
        "schedules",
        "add",
        "nightly",
        "--cron",
        "0 0 2 * * *",
        "--type",
        "orphan",
    ])
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // The relative part is counted from this host's clock: only its shape is fixed.
    assert!(
        stdout(&o).starts_with("created schedule nightly: next fire 2025-12-01T11:20:30.000Z ("),
        "{}",
        stdout(&o)
    );
    assert_eq!(
        stderr(&o),
        "leasehold: warning: no live agent handles task type orphan\n"
    );
    let o = run(vec![
        "--output",
        "json",
        "schedules",
        "add",
        "x",
        "--cron",
        "0 * * * * *",
        "--type",
        "noop",
        "--disabled",
        "--replace",
    ])
    .await;
    let v = &json_lines(&stdout(&o))[0];
    assert_eq!(v["outcome"], "replaced");
    assert_eq!(v["schedule"]["enabled"], false);
    assert_eq!(v["warnings"], serde_json::json!([]));
    let o = run(vec![
        "schedules",
        "add",
        "taken",
        "--cron",
        "0 * * * * *",
        "--type",
        "noop",
    ])
    .await;
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        "leasehold: add schedule taken: schedule taken exists with another definition; give \
         --replace to overwrite it (already exists)\n"
    );
    let o = run(vec![
        "schedules",
        "add",
        "bad",
        "--cron",
        "bad",
        "--type",
        "noop",
    ])
    .await;
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("is not a cron expression"),
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).ends_with("(invalid argument)\n"),
        "{}",
        stderr(&o)
    );

    let o = run(vec!["schedules", "rm", "nightly"]).await;
    assert_eq!(stdout(&o), "removed schedule nightly\n");
    let o = run(vec!["schedules", "rm", "gone"]).await;
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        "leasehold: remove schedule gone: no schedule gone (not found)\n"
    );
    let o = run(vec!["schedules", "enable", "nightly"]).await;
    assert_eq!(
        stdout(&o),
        "schedule nightly was already enabled (nothing changed)\n"
    );
    let o = run(vec!["schedules", "disable", "nightly"]).await;
    assert_eq!(stdout(&o), "disabled schedule nightly\n");
    let o = run(vec!["--output", "json", "schedules", "enable", "broken"]).await;
    let v = &json_lines(&stdout(&o))[0];
    assert_eq!(v["changed"], true);
    assert_eq!(v["enabled"], true);
    let o = run(vec!["schedules", "trigger", "nightly"]).await;
    assert_eq!(
        stdout(&o),
        "triggered schedule nightly: task 77 (idempotency key \
         schedule:nightly:manual:2025-12-01T11:20:00.000Z)\n"
    );
    let o = run(vec!["--output", "json", "schedules", "trigger", "nightly"]).await;
    let v = &json_lines(&stdout(&o))[0];
    assert_eq!(v["task_id"], 77);
    assert_eq!(v["task"]["status"], "queued");
    let o = run(vec!["schedules", "trigger", "nope"]).await;
    assert_eq!(o.status.code(), Some(2));

    let calls = fake.calls();
    assert!(
        calls.contains(
            &"add_schedule nightly cron=0 0 2 * * * tz= type=orphan payload={} missed=skip max=0 \
              disabled=false replace=false"
                .to_owned()
        ),
        "{calls:?}"
    );
    assert!(calls.contains(&"set_schedule_enabled nightly false".to_owned()));
}

#[tokio::test(flavor = "multi_thread")]
async fn schedules_bad_input_is_refused_before_any_call_and_viewers_cannot_act() {
    for args in [
        &[
            "--agent",
            "127.0.0.1:1",
            "schedules",
            "add",
            "n",
            "--cron",
            "* * * * * *",
            "--type",
            "noop",
            "--payload",
            "{oops",
        ][..],
        &[
            "--agent",
            "127.0.0.1:1",
            "schedules",
            "add",
            "n",
            "--cron",
            "* * * * * *",
            "--type",
            "noop",
            "--catch-up-max",
            "3",
        ],
        &[
            "schedules",
            "add",
            "Bad",
            "--cron",
            "* * * * * *",
            "--type",
            "noop",
        ],
        &["schedules", "add", "n", "--type", "noop"],
        &[
            "schedules",
            "add",
            "n",
            "--cron",
            "* * * * * *",
            "--type",
            "noop",
            "--missed",
            "later",
        ],
        &["schedules", "rm"],
        &["schedules"],
    ] {
        let o = leasehold(args, &[]).await;
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(
            !stderr(&o).contains("cannot reach"),
            "{args:?}: {}",
            stderr(&o)
        );
        assert_eq!(stdout(&o), "", "{args:?}");
    }
    let running = Fake::new()
        .with_token("s3cret")
        .start(Transport::Plain)
        .await;
    let addr = running.addr.to_string();
    let o = leasehold(
        &["--agent", &addr, "--token", "viewer", "schedules", "ls"],
        &[],
    )
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = leasehold(
        &[
            "--agent",
            &addr,
            "--token",
            "viewer",
            "schedules",
            "trigger",
            "nightly",
        ],
        &[],
    )
    .await;
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
}

#[tokio::test(flavor = "multi_thread")]
async fn locks_and_shards_commands_print_and_exit_as_documented() {
    let (addr, fake) = plain().await;
    let run = |args: Vec<&str>| {
        let mut all = vec!["--agent", addr.as_str()];
        all.extend(args);
        let owned: Vec<String> = all.iter().map(|s| (*s).to_owned()).collect();
        async move {
            let refs: Vec<&str> = owned.iter().map(String::as_str).collect();
            leasehold(&refs, &[]).await
        }
    };
    let o = run(vec!["locks", "ls"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let lines: Vec<Vec<String>> = stdout(&o)
        .lines()
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect();
    assert_eq!(
        lines,
        [
            vec!["NAME", "OWNER", "TOKEN", "STATE", "LEFT", "MOVES/H"],
            vec!["cache:warm", "-", "3", "free", "-", "0"],
            vec!["deploy/prod", "ci-job-17", "7", "held", "12s", "2"],
        ]
    );
    let o = run(vec!["--output", "json", "locks", "ls"]).await;
    let v = &json_lines(&stdout(&o))[0];
    assert_eq!(v.as_array().map(Vec::len), Some(2));
    assert_eq!(v[1]["owner"], "ci-job-17");
    assert_eq!(v[1]["lease_until"], "2025-12-01T11:20:12.000Z");
    assert_eq!(v[1]["time_left_ms"], 12_000);
    assert_eq!(v[0]["owner"], serde_json::Value::Null);

    let o = run(vec!["locks", "release", "deploy/prod"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "released lock deploy/prod (held by ci-job-17, token 7)\n"
    );
    let o = run(vec!["--output", "json", "locks", "release", "deploy/prod"]).await;
    let v = &json_lines(&stdout(&o))[0];
    assert_eq!(v["released"], true);
    assert_eq!(v["previous_owner"], "ci-job-17");
    assert_eq!(v["previous_token"], 7);
    assert_eq!(v["lock"]["state"], "free");
    let o = run(vec!["locks", "release", "cache:warm"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "lock cache:warm was not held (nothing changed)\n"
    );
    let o = run(vec!["locks", "release", "gone"]).await;
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(stdout(&o), "");
    assert_eq!(
        stderr(&o),
        "leasehold: release lock gone: no lock gone; `leasehold locks ls` lists them (not \
         found)\n"
    );

    let o = run(vec!["shards", "create", "orders", "--count", "4"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "shard group orders already exists with 4 shards (nothing changed)\n"
    );
    let o = run(vec!["shards", "create", "orders", "--count", "16"]).await;
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        "leasehold: create shard group orders: shard group orders exists with 4 shards, not 16; \
         a group keeps the count it was created with (`leasehold shards ls` shows it) (failed \
         precondition)\n"
    );
    let o = run(vec!["shards", "create", "billing", "--count", "8"]).await;
    assert_eq!(stdout(&o), "created shard group billing with 8 shards\n");
    let o = run(vec![
        "--output", "json", "shards", "create", "billing", "--count", "8",
    ])
    .await;
    let v = &json_lines(&stdout(&o))[0];
    assert_eq!(v["created"], true);
    assert_eq!(v["group"]["shard_count"], 8);

    let o = run(vec!["shards", "ls"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[1].starts_with("orders "), "{}", lines[1]);
    let o = run(vec!["shards", "ls", "orders"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "group orders: 4 shards, 3 owned, 2 members, 1 move in the last hour"
    );
    assert_eq!(lines.len(), 10, "{text}");
    assert!(lines[5].starts_with("    3  -"), "{}", lines[5]);
    assert_eq!(lines[6], "");
    assert!(lines[8].starts_with("fake#1"), "{}", lines[8]);
    let o = run(vec!["--output", "json", "shards", "ls", "orders"]).await;
    let v = &json_lines(&stdout(&o))[0];
    let shards = v["shards"].as_array().cloned().unwrap_or_default();
    assert_eq!(shards.len(), 4);
    assert_eq!(shards[1]["shard"], 1);
    assert_eq!(shards[1]["owner"], "fake#2");
    assert_eq!(shards[1]["token"], 2);
    assert_eq!(v["members"][0]["agent"], "fake#1");
    assert_eq!(v["group"]["name"], "orders");
    let o = run(vec!["shards", "ls", "nope"]).await;
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("no shard group nope; `leasehold shards ls` lists the groups"),
        "{}",
        stderr(&o)
    );

    let calls = fake.calls();
    assert!(
        calls.contains(&"release_lock deploy/prod holder=\"\" token=0".to_owned()),
        "a forced release: {calls:?}"
    );
    assert!(calls.contains(&"create_shard_group orders 16".to_owned()));
}

#[tokio::test(flavor = "multi_thread")]
async fn locks_and_shards_bad_input_is_refused_before_any_call_and_viewers_cannot_act() {
    for args in [
        &["--agent", "127.0.0.1:1", "locks", "release", "Deploy"][..],
        &["--agent", "127.0.0.1:1", "locks", "release", "/root"],
        &[
            "--agent",
            "127.0.0.1:1",
            "shards",
            "create",
            "o",
            "--count",
            "0",
        ],
        &[
            "--agent",
            "127.0.0.1:1",
            "shards",
            "create",
            "o",
            "--count",
            "4097",
        ],
        &[
            "--agent",
            "127.0.0.1:1",
            "shards",
            "create",
            "o/x",
            "--count",
            "2",
        ],
        &["--agent", "127.0.0.1:1", "shards", "ls", "Orders"],
        &["locks"],
        &["shards", "create", "orders"],
    ] {
        let o = leasehold(args, &[]).await;
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(
            !stderr(&o).contains("cannot reach"),
            "{args:?}: {}",
            stderr(&o)
        );
        assert_eq!(stdout(&o), "", "{args:?}");
    }
    let running = Fake::new()
        .with_token("s3cret")
        .start(Transport::Plain)
        .await;
    let addr = running.addr.to_string();
    for args in [
        &["locks", "ls"][..],
        &["shards", "ls"],
        &["shards", "ls", "orders"],
    ] {
        let mut all = vec!["--agent", addr.as_str(), "--token", "viewer"];
        all.extend_from_slice(args);
        let o = leasehold(&all, &[]).await;
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
    }
    for args in [
        &["locks", "release", "deploy/prod"][..],
        &["shards", "create", "orders", "--count", "4"],
    ] {
        let mut all = vec!["--agent", addr.as_str(), "--token", "viewer"];
        all.extend_from_slice(args);
        let o = leasehold(&all, &[]).await;
        assert_eq!(o.status.code(), Some(4), "{args:?}: {}", stderr(&o));
    }
    let o = leasehold(&["--agent", &addr, "locks", "ls"], &[]).await;
    assert_eq!(o.status.code(), Some(4), "no token: {}", stderr(&o));
}

#[tokio::test(flavor = "multi_thread")]
async fn wait_exit_codes() {
    let (addr, fake) = plain().await;
    let o = leasehold(
        &["--agent", &addr, "wait", "1", "3", "--interval", "10ms"],
        &[],
    )
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "task 1: succeeded\ntask 3: succeeded\n");
    assert_eq!(
        fake.calls().iter().filter(|c| *c == "get_task 3").count(),
        3
    );
    assert_eq!(
        fake.calls().iter().filter(|c| *c == "get_task 1").count(),
        1
    );
    let o = leasehold(
        &["--agent", &addr, "--output", "json", "wait", "1", "2"],
        &[],
    )
    .await;
    assert_eq!(o.status.code(), Some(1));
    let v = json_lines(&stdout(&o));
    assert_eq!(v[1]["status"], "dead");
    assert_eq!(v[1]["last_error"]["code"], "smtp_timeout");
    let o = leasehold(
        &[
            "--agent",
            &addr,
            "wait",
            "1",
            "4",
            "--timeout",
            "300ms",
            "--interval",
            "50ms",
        ],
        &[],
    )
    .await;
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stdout(&o),
        "task 1: succeeded\ntask 4: not finished: running\n"
    );
    assert_eq!(
        stderr(&o),
        "leasehold: wait timed out after 300ms: task 4 not finished\n"
    );
    let o = leasehold(&["--agent", &addr, "wait", "404"], &[]).await;
    assert_eq!(o.status.code(), Some(2));
}

#[tokio::test(flavor = "multi_thread")]
async fn watch_prints_json_lines_until_the_agent_closes() {
    let (addr, _) = plain().await;
    let o = leasehold(&["--agent", &addr, "--output", "json", "watch"], &[]).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v = json_lines(&stdout(&o));
    let kinds: Vec<&str> = v.iter().map(|l| l["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["snapshot", "lease_acquired", "lease_released", "closing"]
    );
    assert_eq!(v[1]["seq"], 1);
    assert_eq!(v[2]["seq"], 1);
    assert_eq!(v[2]["lease_released"]["outcome"], "succeeded");
    assert_eq!(v[0]["snapshot"]["leases"][0]["task_id"], 4);
    let o = leasehold(&["--agent", &addr, "watch"], &[]).await;
    assert_eq!(o.status.code(), Some(0));
    let text = stdout(&o);
    assert!(
        text.contains("#0 snapshot of fake#1: 1 lease, active 1/10, running"),
        "{text}"
    );
    assert!(
        text.contains("#2 closing: the agent is shutting down"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn watch_dropped_by_the_agent_exits_as_mapped() {
    let running = Fake::new()
        .with_watch(WatchMode::Dropped)
        .start(Transport::Plain)
        .await;
    let o = leasehold(
        &[
            "--agent",
            &running.addr.to_string(),
            "--output",
            "json",
            "watch",
        ],
        &[],
    )
    .await;
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(json_lines(&stdout(&o)).len(), 1);
    assert_eq!(
        stderr(&o),
        "leasehold: watch: watcher fell behind (resource exhausted)\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn watch_ends_with_0_on_sigterm_and_sigint() {
    let running = Fake::new()
        .with_watch(WatchMode::Hang)
        .start(Transport::Plain)
        .await;
    let addr = running.addr.to_string();
    for signal in ["-TERM", "-INT"] {
        let addr = addr.clone();
        let code = tokio::task::spawn_blocking(move || {
            let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
                .args(["--agent", &addr, "--output", "json", "watch"])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            // The snapshot line proves the stream is open.
            let mut first = String::new();
            BufReader::new(child.stdout.take().unwrap())
                .read_line(&mut first)
                .unwrap();
            assert!(first.contains("\"kind\":\"snapshot\""), "{first}");
            std::process::Command::new("kill")
                .args([signal, &child.id().to_string()])
                .status()
                .unwrap();
            child.wait().unwrap().code()
        })
        .await
        .unwrap();
        assert_eq!(code, Some(0), "after {signal}");
    }
}

// Issue 20 item 14: `leasehold demo` starts its own agents; the connection flags are not its.
#[tokio::test(flavor = "multi_thread")]
async fn demo_help_leaves_out_the_connection_flags_and_the_demo_refuses_them() {
    let o = leasehold(&["demo", "--help"], &[]).await;
    assert_eq!(o.status.code(), Some(0));
    let help = stdout(&o);
    let flags: Vec<&str> = help
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| w.starts_with("--"))
        .collect();
    for gone in [
        "--agent",
        "--token",
        "--token-file",
        "--socket",
        "--insecure",
        "--ca",
    ] {
        assert!(!flags.contains(&gone), "demo --help lists {gone}:\n{help}");
    }
    assert!(
        flags.contains(&"--agents") && flags.contains(&"--output"),
        "{help}"
    );
    // `leasehold --help` still lists them.
    let top = stdout(&leasehold(&["--help"], &[]).await);
    assert!(
        top.contains("--agent <ADDR>") && top.contains("--token <TOKEN>"),
        "{top}"
    );
    // Given anyway: exit 2 before anything starts, saying why.
    let o = leasehold(&["--agent", "x", "demo"], &[]).await;
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o)
            .contains("--agent does not apply to `leasehold demo`: the demo starts its own agents"),
        "{}",
        stderr(&o)
    );
    assert_eq!(stdout(&o), "");
    // The variable is for the other commands: the demo does not refuse it (it stops at the
    // bad --agents instead, before starting anything).
    let o = leasehold(
        &["demo", "--agents", "0"],
        &[("LEASEHOLD_AGENT", "10.0.0.1:1")],
    )
    .await;
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--agents"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("does not apply"), "{}", stderr(&o));
}
