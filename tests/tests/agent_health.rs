#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `/healthz` and `/readyz` on the metrics listener of a real `leasehold-agent` (issue 26):
//! readiness follows the database (a private PostgreSQL cluster, stopped with `pg_ctl stop -m
//! fast` and started again) while liveness does not, and a SIGTERM makes the agent unready
//! (draining) at once while a long task still runs.

use std::time::Duration;

use anyhow::Context;
use leasehold_tests::fleet::{START_WAIT, spawn_agent};
use leasehold_tests::{PgCluster, TaskSpec, TestDb, insert_task, task_status, wait_until};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest a single HTTP exchange with the agent may take (a `/readyz` check is bounded by
/// the agent's 2 s database timeout).
const HTTP_TIMEOUT: Duration = Duration::from_secs(5);

/// One HTTP answer: the status code and the body.
#[derive(Debug, Clone)]
struct Answer {
    status: u16,
    body: String,
}

/// `GET path` on 127.0.0.1:`port` over a fresh connection the server closes after answering.
async fn get(port: u16, path: &str) -> anyhow::Result<Answer> {
    let exchange = async {
        let mut conn = TcpStream::connect(("127.0.0.1", port))
            .await
            .with_context(|| format!("connecting to 127.0.0.1:{port}"))?;
        let request = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
        conn.write_all(request.as_bytes()).await?;
        let mut raw = Vec::new();
        conn.read_to_end(&mut raw).await?;
        let text = String::from_utf8(raw).context("the answer is not UTF-8")?;
        let (head, body) = text
            .split_once("\r\n\r\n")
            .with_context(|| format!("no end of head in {text:?}"))?;
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .with_context(|| format!("no status in {head:?}"))?;
        anyhow::Ok(Answer {
            status,
            body: body.to_string(),
        })
    };
    tokio::time::timeout(HTTP_TIMEOUT, exchange)
        .await
        .with_context(|| format!("GET {path} took over {HTTP_TIMEOUT:?}"))?
}

/// Polls `GET path` until `wanted` holds for the answer, which is returned; fails naming the
/// last answer (or error) after `timeout`.
async fn wait_answer(
    port: u16,
    path: &str,
    what: &str,
    timeout: Duration,
    wanted: impl Fn(&Answer) -> bool,
) -> Answer {
    let last = std::sync::Mutex::new(None);
    let waited = wait_until(what, timeout, || {
        let (last, wanted) = (&last, &wanted);
        async move {
            // A refused connection (not listening yet) is an answer to wait past, not a failure.
            let answer = get(port, path).await.map_err(|e| format!("{e:#}"));
            let done = answer.as_ref().is_ok_and(wanted);
            *last.lock().unwrap() = Some(answer);
            Ok(done)
        }
    })
    .await;
    let last = last.into_inner().unwrap();
    if let Err(error) = waited {
        panic!("{error:#}; last answer to GET {path}: {last:?}");
    }
    last.unwrap().unwrap()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_follows_the_database_and_healthz_does_not() {
    let mut cluster = PgCluster::start().await.unwrap();
    let (url, pool) = cluster
        .migrated_database_pool("leasehold_health")
        .await
        .unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut agent = spawn_agent(
        "leasehold-agent",
        &url,
        "health-db",
        "noop",
        &["--metrics-listen", &listen],
        Vec::new(),
    )
    .await
    .unwrap();
    agent
        .wait_registered(&pool, "health-db", START_WAIT)
        .await
        .unwrap();
    pool.close().await;

    let ready = wait_answer(port, "/readyz", "the agent is ready", START_WAIT, |a| {
        a.status == 200
    })
    .await;
    assert!(ready.body.starts_with("ready\n"), "{}", ready.body);
    for line in ["database: ok\n", "migrations: ok (", "draining: no\n"] {
        assert!(
            ready.body.contains(line),
            "{line:?} missing: {}",
            ready.body
        );
    }
    let live = get(port, "/healthz").await.unwrap();
    assert_eq!((live.status, live.body.as_str()), (200, "ok\n"));

    // The database goes away: readiness says so within a few seconds, liveness does not move.
    cluster.stop_fast().await.unwrap();
    let down = wait_answer(
        port,
        "/readyz",
        "/readyz reports the stopped database",
        Duration::from_secs(10),
        |a| a.status == 503,
    )
    .await;
    eprintln!("/readyz with the database stopped:\n{}", down.body);
    assert!(
        down.body.starts_with("not ready: database\n"),
        "only the database fails: {}",
        down.body
    );
    assert!(down.body.contains("migrations: unknown"), "{}", down.body);
    let live = get(port, "/healthz").await.unwrap();
    assert_eq!(
        (live.status, live.body.as_str()),
        (200, "ok\n"),
        "liveness follows the process, not the database"
    );
    assert!(agent.is_running(), "{}", agent.log_tail(40));

    // The database is back: ready again, with no restart of the agent.
    cluster.start_again().await.unwrap();
    let back = wait_answer(
        port,
        "/readyz",
        "the agent is ready again",
        Duration::from_secs(30),
        |a| a.status == 200,
    )
    .await;
    assert!(back.body.starts_with("ready\n"), "{}", back.body);
    assert!(agent.is_running(), "{}", agent.log_tail(40));

    agent.sigterm().unwrap();
    assert!(
        agent
            .wait_exit(Duration::from_secs(30))
            .await
            .unwrap()
            .success(),
        "{}",
        agent.log_tail(40)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_says_draining_after_sigterm_while_a_task_still_runs() {
    let db = TestDb::new().await.unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    // A drain long enough to be seen: the task sleeps a minute, the agent waits up to 30 s.
    let mut agent = spawn_agent(
        "leasehold-agent",
        &db.url,
        "health-drain",
        "sleep",
        &["--metrics-listen", &listen, "--shutdown-timeout", "30s"],
        Vec::new(),
    )
    .await
    .unwrap();
    agent
        .wait_registered(&db.pool, "health-drain", START_WAIT)
        .await
        .unwrap();
    let task = insert_task(
        &db.pool,
        TaskSpec {
            payload: json!({"ms": 60_000}),
            ..TaskSpec::new("sleep", "queued")
        },
    )
    .await
    .unwrap();
    wait_until("the task runs", Duration::from_secs(20), || {
        let pool = db.pool.clone();
        async move { Ok(task_status(&pool, task).await? == "running") }
    })
    .await
    .unwrap();
    wait_answer(port, "/readyz", "the agent is ready", START_WAIT, |a| {
        a.status == 200
    })
    .await;

    agent.sigterm().unwrap();
    let draining = wait_answer(
        port,
        "/readyz",
        "/readyz reports the drain",
        Duration::from_secs(10),
        |a| a.status == 503,
    )
    .await;
    assert!(
        draining.body.starts_with("not ready: draining\n"),
        "only the drain fails: {}",
        draining.body
    );
    assert!(
        draining.body.contains("database: ok\n"),
        "{}",
        draining.body
    );
    let live = get(port, "/healthz").await.unwrap();
    assert_eq!((live.status, live.body.as_str()), (200, "ok\n"));
    // Positive control: the agent is still draining the task, not gone.
    assert_eq!(task_status(&db.pool, task).await.unwrap(), "running");
    assert!(agent.is_running(), "{}", agent.log_tail(40));

    // A second signal forces the stop; the task is released.
    agent.sigterm().unwrap();
    agent.wait_exit(Duration::from_secs(30)).await.unwrap();
}
