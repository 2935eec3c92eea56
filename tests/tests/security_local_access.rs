#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Who may do what on a shared host (issue 19, DESIGN "Local access"): real agents started
//! with the secure defaults (`LEASEHOLD_INSECURE_LOCAL=false`), the real `leasehold` binary run
//! as root and as `nobody` (setpriv), real PostgreSQL.
//!
//! - another local user over loopback TCP without a token is a viewer: actions exit 4 with the
//!   read-only message and change nothing, lists work; it cannot connect to the socket;
//! - the agent's user (root here) acts through the socket, audited as `uid:0(root)`; with
//!   `--insecure-local` the other user acts over TCP, audited under its uid;
//! - an unauthenticated flood of 1,000 actions writes a handful of audit rows whose `count`
//!   sums to 1,000 once the agent stopped;
//! - Watch caps: 8 streams per actor, viewers together leave 8 slots to operators.
//!
//! The tests run as root (they switch to `nobody`, uid 65534, for the other user).

use std::path::Path;
use std::time::Duration;

use leasehold_proto::v1 as pb;
use leasehold_tests::agent::AgentHandle;
use leasehold_tests::cli::CliOutput;
use leasehold_tests::fleet::{ConfigToken, tokens_config};
use leasehold_tests::grpc::{Client, connect, connect_unix, connect_with};
use leasehold_tests::local_access::{
    User, binary_for_others, command_as, open_dir, run_clean, socket_of, start_local_agent,
    wait_for_path,
};
use leasehold_tests::{TaskSpec, TestDb, binary, insert_task, task_status};
use sqlx::PgPool;
use tonic::Code;

const WAIT: Duration = Duration::from_secs(30);
const NOBODY_LABEL: &str = "uid:65534(nobody)";
const ROOT_LABEL: &str = "uid:0(root)";
const READ_ONLY: &str = "loopback TCP without a token is read-only";
/// Exit code of a refused call (DESIGN §9).
const EXIT_DENIED: i32 = 4;
const OPERATOR: &str = "operator-secret-0123456789";

/// Runs `bin --agent ADDR ARGS…` as `user` with a clean environment: only `PATH`, `HOME`, and
/// `LEASEHOLD_RUNTIME_DIR=runtime` where the agent's socket is.
async fn leasehold(bin: &Path, user: User, runtime: &Path, addr: &str, args: &[&str]) -> CliOutput {
    let mut full = vec!["--agent", addr, "--call-timeout", "30s"];
    full.extend_from_slice(args);
    let runtime = runtime.display().to_string();
    let envs = [("LEASEHOLD_RUNTIME_DIR", runtime.as_str())];
    run_clean(user, bin, &full, &envs).await.unwrap()
}

/// Starts an agent (handlers `noop`) with the secure local default unless `insecure_local`,
/// its socket in `runtime`; returns it and its TCP address.
async fn start_agent(
    db: &TestDb,
    name: &str,
    runtime: &Path,
    insecure_local: bool,
    extra: &[&str],
) -> (AgentHandle, String) {
    start_local_agent(db, name, runtime, insecure_local, extra)
        .await
        .unwrap()
}

async fn tasks(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM tasks")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// `(actor, role, action, result, peer, count)` of every audit row not written by the
/// system, oldest first.
type Row = (String, String, String, String, Option<String>, i64);

async fn audit(pool: &PgPool) -> Vec<Row> {
    sqlx::query_as(
        "SELECT actor, role, action, result, peer, count FROM audit_log \
         WHERE role <> 'system' ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

async fn stop(mut agent: AgentHandle) {
    agent.sigterm().unwrap();
    agent.wait_exit(WAIT).await.unwrap();
}

/// (a) + (b) + (c): nobody over loopback TCP is a viewer and cannot reach the socket; root acts
/// through the socket and is named by its uid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_user_may_only_read_over_tcp_and_cannot_use_the_socket() {
    let db = TestDb::new().await.unwrap();
    let dir = open_dir("lh-secloc").unwrap();
    let runtime = dir.join("run");
    let (agent, addr) = start_agent(&db, "secloc-a", &runtime, false, &[]).await;
    let socket = socket_of(&runtime, &addr).unwrap();
    wait_for_path(&socket, WAIT).await.unwrap();
    let bin = binary_for_others(&dir).await.unwrap();
    // A task the agent does not serve, so it stays queued unless someone cancels it.
    let queued = insert_task(&db.pool, TaskSpec::new("email.send", "queued"))
        .await
        .unwrap();
    let before = tasks(&db.pool).await;
    let audit_before = audit(&db.pool).await.len();
    let id = queued.to_string();

    // (a) Actions over TCP: exit 4, the read-only message, nothing changed.
    for args in [
        vec!["--no-socket", "enqueue", "noop"],
        vec!["--no-socket", "cancel", id.as_str()],
    ] {
        let run = leasehold(&bin, User::Nobody, &runtime, &addr, &args).await;
        assert_eq!(run.code, Some(EXIT_DENIED), "{args:?}: {run:?}");
        assert!(run.stderr.contains(READ_ONLY), "{args:?}: {run:?}");
    }
    // Without --no-socket too: nobody has no socket of its own to find, so TCP it is.
    let run = leasehold(&bin, User::Nobody, &runtime, &addr, &["enqueue", "noop"]).await;
    assert_eq!(run.code, Some(EXIT_DENIED), "{run:?}");
    assert_eq!(tasks(&db.pool).await, before, "no task was added");
    assert_eq!(task_status(&db.pool, queued).await.unwrap(), "queued");
    // The refusals are audited as denied, each first of its kind at once.
    let rows = audit(&db.pool).await.split_off(audit_before);
    assert!(
        rows.iter()
            .all(|r| r.3 == "denied" && r.1 == "viewer" && r.4.is_some()),
        "{rows:?}"
    );
    let actions: Vec<&str> = rows.iter().map(|r| r.2.as_str()).collect();
    assert!(
        actions.contains(&"enqueue") && actions.contains(&"cancel"),
        "{rows:?}"
    );
    // Reads work.
    let run = leasehold(
        &bin,
        User::Nobody,
        &runtime,
        &addr,
        &["--no-socket", "--output", "json", "tasks", "ls"],
    )
    .await;
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(
        run.stdout.contains(&id),
        "the viewer sees the task: {run:?}"
    );

    // (b) The socket refuses nobody: through the CLI ...
    let path = socket.display().to_string();
    let run = leasehold(
        &bin,
        User::Nobody,
        &runtime,
        &addr,
        &["--socket", &path, "tasks", "ls"],
    )
    .await;
    assert_ne!(run.code, Some(0), "{run:?}");
    // ... and with a raw connect.
    let raw = command_as(User::Nobody, "/usr/bin/python3")
        .args([
            "-c",
            "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ntry:\n s.connect(sys.argv[1])\n print('connected')\nexcept PermissionError:\n print('denied')\n",
            &path,
        ])
        .output()
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&raw.stdout).trim(),
        "denied",
        "{raw:?}"
    );

    // (c) Root, the agent's user, acts through the socket the CLI finds by itself.
    let root = binary("leasehold").await.unwrap();
    let seen = audit(&db.pool).await.len();
    let run = leasehold(&root, User::Me, &runtime, &addr, &["cancel", &id]).await;
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(task_status(&db.pool, queued).await.unwrap(), "cancelled");
    let rows = audit(&db.pool).await.split_off(seen);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (rows[0].0.as_str(), rows[0].1.as_str(), rows[0].2.as_str()),
        (ROOT_LABEL, "operator", "cancel"),
        "{rows:?}"
    );
    // The raw socket client too, without any token.
    let mut client = connect_unix(&socket).await.unwrap();
    let done = client
        .enqueue(pb::EnqueueRequest {
            task_type: "noop".into(),
            payload_json: "{}".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(done.into_inner().id > 0);
    stop(agent).await;
    db.drop_db().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// (c) With `--insecure-local`, another user acts over loopback TCP and is audited by uid
/// (the agent finds the client socket's owner in /proc/net/tcp).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_local_lets_another_user_act_over_tcp_under_its_uid() {
    let db = TestDb::new().await.unwrap();
    let dir = open_dir("lh-secloc").unwrap();
    let runtime = dir.join("run");
    let (agent, addr) = start_agent(&db, "secloc-c", &runtime, true, &[]).await;
    let bin = binary_for_others(&dir).await.unwrap();
    let before = tasks(&db.pool).await;
    let seen = audit(&db.pool).await.len();
    let run = leasehold(
        &bin,
        User::Nobody,
        &runtime,
        &addr,
        &["--no-socket", "--output", "json", "enqueue", "noop"],
    )
    .await;
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(tasks(&db.pool).await, before + 1);
    let rows = audit(&db.pool).await.split_off(seen);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (rows[0].0.as_str(), rows[0].1.as_str(), rows[0].3.as_str()),
        (NOBODY_LABEL, "operator", "applied"),
        "{rows:?}"
    );
    stop(agent).await;
    db.drop_db().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// (d) 1,000 actions without a token on an agent with tokens: refused, a handful of audit
/// rows at most, their counts summing to 1,000 once the agent stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unauthenticated_flood_writes_a_handful_of_rows_that_count_every_call() {
    const FLOOD: i64 = 1_000;
    let db = TestDb::new().await.unwrap();
    let config = tokens_config("lh-secloc", &[ConfigToken::operator("oncall", OPERATOR)]).unwrap();
    let dir = config.parent().unwrap().to_path_buf();
    let runtime = dir.join("run");
    let (agent, addr) = start_agent(
        &db,
        "secloc-d",
        &runtime,
        false,
        &["--config", config.to_str().unwrap()],
    )
    .await;
    let before = tasks(&db.pool).await;
    let mut anon = connect(&addr).await.unwrap();
    for n in 0..FLOOD {
        let s = anon
            .enqueue(pb::EnqueueRequest {
                task_type: format!("flood.{}", n % 7),
                payload_json: "{}".into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(s.code(), Code::Unauthenticated, "{s:?}");
    }
    assert_eq!(tasks(&db.pool).await, before, "nothing enqueued");
    let denied =
        |rows: Vec<Row>| -> Vec<Row> { rows.into_iter().filter(|r| r.3 == "denied").collect() };
    let rows = denied(audit(&db.pool).await);
    assert!(
        !rows.is_empty() && rows.len() <= 3,
        "the first refusal is written at once, the rest only counted: {rows:?}"
    );
    assert_eq!(rows[0].0, "unauthenticated");
    assert!(
        rows[0]
            .4
            .as_deref()
            .is_some_and(|p| p.starts_with("127.0.0.1")),
        "the row names the peer: {rows:?}"
    );
    stop(agent).await;
    let rows = denied(audit(&db.pool).await);
    assert!(rows.len() <= 4, "{rows:?}");
    assert_eq!(
        rows.iter().map(|r| r.5).sum::<i64>(),
        FLOOD,
        "the counts add up to every refused call: {rows:?}"
    );
    db.drop_db().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Opens a Watch stream with `client`, returning it or the refusal.
async fn watch(client: &mut Client) -> Result<tonic::Streaming<pb::WatchUpdate>, tonic::Status> {
    let mut stream = client.watch(pb::WatchRequest {}).await?.into_inner();
    // The snapshot arrives first: the stream is really open.
    let first = tokio::time::timeout(WAIT, stream.message())
        .await
        .expect("a snapshot in time")?
        .expect("a snapshot");
    assert_eq!(first.seq, 0);
    Ok(stream)
}

/// (e) Watch caps: 8 streams per actor; viewers altogether leave 8 slots to operators.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_streams_are_capped_per_actor_and_operators_keep_slots() {
    let db = TestDb::new().await.unwrap();
    let viewers: Vec<(String, String)> = (0..8)
        .map(|n| (format!("view{n}"), format!("viewer-secret-{n}-0123456789")))
        .collect();
    let mut tokens = vec![ConfigToken::operator("oncall", OPERATOR)];
    tokens.extend(
        viewers
            .iter()
            .map(|(name, secret)| ConfigToken::viewer(name, secret)),
    );
    let config = tokens_config("lh-secloc", &tokens).unwrap();
    let dir = config.parent().unwrap().to_path_buf();
    let runtime = dir.join("run");
    let (agent, addr) = start_agent(
        &db,
        "secloc-e",
        &runtime,
        false,
        &["--config", config.to_str().unwrap()],
    )
    .await;
    let mut open = Vec::new();
    // Seven viewers take eight streams each: 56, the viewers' share.
    for n in 0..7 {
        let token = format!("viewer-secret-{n}-0123456789");
        let mut c = connect_with(&addr, Some(&token), None).await.unwrap();
        for _ in 0..8 {
            open.push(watch(&mut c).await.unwrap());
        }
        // A ninth for the same actor is refused, naming the limit.
        let s = watch(&mut c).await.unwrap_err();
        assert_eq!(s.code(), Code::ResourceExhausted, "{s:?}");
        assert!(
            s.message().contains(&format!("\"view{n}\" already has 8")),
            "{s:?}"
        );
    }
    // The eighth viewer finds the viewers' share taken.
    let mut late = connect_with(&addr, Some("viewer-secret-7-0123456789"), None)
        .await
        .unwrap();
    let s = watch(&mut late).await.unwrap_err();
    assert_eq!(s.code(), Code::ResourceExhausted, "{s:?}");
    assert!(s.message().contains("kept"), "{s:?}");
    // The operator still gets its eight.
    let mut op = connect_with(&addr, Some(OPERATOR), None).await.unwrap();
    for _ in 0..8 {
        open.push(watch(&mut op).await.unwrap());
    }
    // A viewer's stream closed frees a slot for a viewer.
    open.remove(0);
    leasehold_tests::wait_until("a closed stream frees its slot", WAIT, || {
        let mut late = late.clone();
        async move { Ok(watch(&mut late).await.is_ok()) }
    })
    .await
    .unwrap();
    drop(open);
    stop(agent).await;
    db.drop_db().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
