#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `leasehold` on a shared host (issue 19): it finds and prefers the agent's local Unix socket,
//! and it never leaks a token. Real agents with the secure local default
//! (`LEASEHOLD_INSECURE_LOCAL=false`, so their loopback TCP is read-only), the real `leasehold`
//! binary with a clean environment, real PostgreSQL.
//!
//! - `enqueue` goes through the socket (loopback `--agent`, no flags) and is audited as
//!   `uid:0(root)`; `--no-socket` is a viewer over TCP (exit 4); `--socket` on a missing path
//!   exits 3 naming it;
//! - `--help` never prints `LEASEHOLD_TOKEN`'s value;
//! - a token is refused (exit 2) for plaintext TCP to a host that is not loopback, before any
//!   connection is made (a listener proves nothing connected; `--insecure` is the positive
//!   control that does connect); `--token-file` is read, warned about when others can read it,
//!   and an unreadable one exits 2 naming the file.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use leasehold_tests::cli::CliOutput;
use leasehold_tests::local_access::{User, run_clean, socket_of, start_local_agent, wait_for_path};
use leasehold_tests::{TestDb, binary, scratch_dir};

const WAIT: Duration = Duration::from_secs(30);

/// Runs `leasehold ARGS…` as root with a clean environment: `PATH`, `HOME`, then `envs`.
async fn leasehold(args: &[&str], envs: &[(&str, &str)]) -> CliOutput {
    let bin = binary("leasehold").await.unwrap();
    run_clean(User::Me, &bin, args, envs).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_prefers_the_socket_and_is_named_by_its_uid() {
    let db = TestDb::new().await.unwrap();
    let dir = scratch_dir("lh-clisec").unwrap();
    let runtime = dir.join("run");
    let (mut agent, addr) = start_local_agent(&db, "clisec-1", &runtime, false, &[])
        .await
        .unwrap();
    let socket = socket_of(&runtime, &addr).unwrap();
    wait_for_path(&socket, WAIT).await.unwrap();
    let rt = runtime.display().to_string();
    let env = [("LEASEHOLD_RUNTIME_DIR", rt.as_str())];
    let base = ["--agent", addr.as_str(), "--call-timeout", "30s"];
    let with = |args: &[&'static str]| -> Vec<String> {
        base.iter()
            .chain(args.iter())
            .map(|s| s.to_string())
            .collect()
    };
    let run = |args: Vec<String>| async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        leasehold(&args, &env).await
    };

    // No flags: the socket, where root is an operator.
    let ok = run(with(&["--verbose", "--output", "json", "enqueue", "noop"])).await;
    assert_eq!(ok.code, Some(0), "{ok:?}");
    assert!(
        ok.stderr
            .contains(&format!("via unix:{}", socket.display())),
        "{ok:?}"
    );
    let reply: serde_json::Value = serde_json::from_str(ok.stdout.trim()).unwrap();
    let id = reply["id"].as_i64().unwrap_or_else(|| panic!("{reply}"));
    let actors: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT actor, action, result FROM audit_log WHERE action ILIKE '%enqueue%' ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(
        actors
            .iter()
            .any(|(actor, _, result)| actor == "uid:0(root)" && result != "denied"),
        "the enqueue of task {id} is audited as uid:0(root): {actors:?}"
    );

    // --no-socket: loopback TCP without a token is read-only.
    let denied = run(with(&["--no-socket", "enqueue", "noop"])).await;
    assert_eq!(denied.code, Some(4), "{denied:?}");
    let tasks: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(tasks, 1, "the denied enqueue changed nothing");
    let listed = run(with(&["--no-socket", "--verbose", "tasks", "ls"])).await;
    assert_eq!(listed.code, Some(0), "{listed:?}");
    assert!(listed.stderr.contains("via tcp"), "{listed:?}");

    // --socket names a socket that is not there: exit 3, naming it; never TCP instead.
    let missing = run(with(&[
        "--socket",
        "/nonexistent/agent.sock",
        "enqueue",
        "noop",
    ]))
    .await;
    assert_eq!(missing.code, Some(3), "{missing:?}");
    assert!(
        missing.stderr.contains("/nonexistent/agent.sock"),
        "{missing:?}"
    );
    // --socket given the agent's socket explicitly (LEASEHOLD_SOCKET) works from anywhere.
    let sock = socket.display().to_string();
    let explicit = leasehold(
        &["--agent", "127.0.0.1:1", "enqueue", "noop"],
        &[("LEASEHOLD_SOCKET", sock.as_str())],
    )
    .await;
    assert_eq!(explicit.code, Some(0), "{explicit:?}");

    agent.sigterm().unwrap();
    agent.wait_exit(WAIT).await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn help_never_prints_a_secret_from_the_environment() {
    let envs = [
        ("LEASEHOLD_TOKEN", "s3cret-token-value"),
        ("LEASEHOLD_TOKEN_FILE", "/s3cret-token-file"),
        ("LEASEHOLD_KEY", "/s3cret-key-file"),
    ];
    for args in [&["--help"][..], &["enqueue", "--help"], &["demo", "--help"]] {
        let run = leasehold(args, &envs).await;
        assert_eq!(run.code, Some(0), "{run:?}");
        // The demo starts its own agents: its help lists no connection flag.
        assert_eq!(run.stdout.contains("--token"), args[0] != "demo", "{run:?}");
        assert!(
            !run.stdout.contains("s3cret") && !run.stderr.contains("s3cret"),
            "{args:?} printed a secret: {run:?}"
        );
    }
}

/// A listener on every address: `--agent 0.0.0.0:PORT` is not loopback, yet reaches it.
async fn any_address_listener() -> (tokio::net::TcpListener, String) {
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, format!("0.0.0.0:{port}"))
}

/// True when someone connected to `listener` (it is checked after the client exited).
async fn connected(listener: &tokio::net::TcpListener) -> bool {
    tokio::time::timeout(Duration::from_millis(500), listener.accept())
        .await
        .is_ok()
}

#[tokio::test]
async fn a_token_never_travels_in_plaintext_off_the_host() {
    let dir = scratch_dir("lh-clisec").unwrap();
    let (listener, addr) = any_address_listener().await;

    let refused = leasehold(&["--token", "x", "--agent", &addr, "agents", "ls"], &[]).await;
    assert_eq!(refused.code, Some(2), "{refused:?}");
    assert!(
        refused.stderr.contains("plaintext") && refused.stderr.contains("--insecure"),
        "{refused:?}"
    );
    assert!(!connected(&listener).await, "nothing may connect");
    let refused = leasehold(
        &["--agent", "10.1.2.3:7070", "agents", "ls"],
        &[("LEASEHOLD_TOKEN", "x")],
    )
    .await;
    assert_eq!(refused.code, Some(2), "{refused:?}");

    // --token-file: others may read it, so a warning on stderr; then the same refusal.
    let file = dir.join("token");
    std::fs::write(&file, "s3cret\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let path = file.display().to_string();
    let run = leasehold(
        &[
            "--token-file",
            &path,
            "--agent",
            &addr,
            "--output",
            "json",
            "agents",
            "ls",
        ],
        &[],
    )
    .await;
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(
        run.stderr.contains("warning") && run.stderr.contains(&path),
        "{run:?}"
    );
    assert!(run.stdout.is_empty(), "{run:?}");
    assert!(!run.stderr.contains("s3cret"), "{run:?}");
    assert!(!connected(&listener).await, "nothing may connect");

    // Unreadable: exit 2 naming the file. With --token too: a usage error.
    let missing = dir.join("missing").display().to_string();
    let run = leasehold(&["--token-file", &missing, "agents", "ls"], &[]).await;
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(run.stderr.contains(&missing), "{run:?}");
    let run = leasehold(
        &["--token", "x", "--token-file", &path, "agents", "ls"],
        &[],
    )
    .await;
    assert_eq!(run.code, Some(2), "{run:?}");

    // The positive control: --insecure does connect (and fails there: no agent speaks).
    let insecure = leasehold(
        &[
            "--token",
            "x",
            "--insecure",
            "--agent",
            &addr,
            "--call-timeout",
            "2s",
            "agents",
            "ls",
        ],
        &[],
    )
    .await;
    assert_ne!(insecure.code, Some(2), "{insecure:?}");
    assert!(connected(&listener).await, "--insecure connects");
    let _ = std::fs::remove_dir_all(&dir);
}
