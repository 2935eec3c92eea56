#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Errors said once, in words (issue 20, items 6, 12 and 14): the agent's start errors (an
//! unknown database, an unmigrated one, a refused port), `migrate` run twice, `--listen` with a
//! host name, and the CLI's answers to an action on a finished task, a pause of a type nobody
//! serves, a delay out of range and a deadline long past.

use std::time::Duration;

use leasehold_tests::bin::binary;
use leasehold_tests::cli::Cli;
use leasehold_tests::fleet::spawn_agent;
use leasehold_tests::grpc::agent_address;
use leasehold_tests::{TestDb, task_status, wait_until};
use tokio::process::Command;

const WAIT: Duration = Duration::from_secs(60);

/// Runs `leasehold-agent ARGS` to its end: (exit code, stdout, stderr).
/// `leasehold-agent run` (noop tasks, no gRPC) on the database at `url`, which it cannot use:
/// exit code and stderr.
async fn run_on(url: &str) -> (i32, String) {
    let (code, _, stderr) = agent_cmd(&[
        "run",
        "--handlers",
        "noop",
        "--listen",
        "off",
        "--database-url",
        url,
    ])
    .await;
    (code, stderr)
}

async fn agent_cmd(args: &[&str]) -> (i32, String, String) {
    let path = binary("leasehold-agent").await.unwrap();
    let out = tokio::time::timeout(
        WAIT,
        Command::new(path)
            .args(args)
            .env_remove("RUST_LOG")
            .env_remove("DATABASE_URL")
            .env_remove("LEASEHOLD_DATABASE_URL")
            .output(),
    )
    .await
    .expect("the agent ended")
    .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The database URL `url` with its database name replaced.
fn with_database(url: &str, name: &str) -> String {
    let (base, _) = url.rsplit_once('/').unwrap();
    format!("{base}/{name}")
}

/// One line, no cause repeated, no PostgreSQL source position.
fn one_sentence(stderr: &str, said: &str) {
    let line = stderr.trim();
    assert_eq!(line.lines().count(), 1, "{stderr}");
    assert_eq!(line.matches(said).count(), 1, "{stderr}");
    assert!(!line.contains(" at line "), "{stderr}");
    assert!(!line.contains("error returned from database"), "{stderr}");
}

#[tokio::test]
async fn an_unknown_database_is_named_once_and_exits_3() {
    let db = TestDb::new().await.unwrap();
    let url = with_database(&db.url, "leasehold_no_such_database");
    let (code, stderr) = run_on(&url).await;
    assert_eq!(code, 3, "{stderr}");
    assert!(
        stderr.contains("cannot connect to the database"),
        "{stderr}"
    );
    one_sentence(&stderr, "\"leasehold_no_such_database\" does not exist");
}

#[tokio::test]
async fn an_unmigrated_database_says_run_migrate_and_exits_3() {
    let db = TestDb::new_empty().await.unwrap();
    let (code, stderr) = run_on(&db.url).await;
    assert_eq!(code, 3, "{stderr}");
    one_sentence(
        &stderr,
        "database not migrated: run `leasehold-agent migrate`",
    );
}

#[tokio::test]
async fn a_refused_connection_is_said_at_once_not_as_a_pool_timeout() {
    // A port nothing listens on: bind one, note it, close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://postgres@127.0.0.1:{port}/x");
    let (code, stderr) = run_on(&url).await;
    assert_eq!(code, 3, "{stderr}");
    assert!(!stderr.contains("timed out"), "{stderr}");
    one_sentence(&stderr, "connection refused");
}

/// Several servers (libpq's syntax): none writable is named with every server tried, exit 3;
/// a session attribute the agent cannot use is a usage error, exit 2, before any connection;
/// a list whose second server is the live one works.
#[tokio::test]
async fn several_servers_in_the_url_are_tried_in_order() {
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let (a, b) = (free(), free());
    let url = format!(
        "postgres://postgres@127.0.0.1:{a},127.0.0.1:{b}/x?target_session_attrs=read-write"
    );
    let (code, stderr) = run_on(&url).await;
    assert_eq!(code, 3, "{stderr}");
    one_sentence(
        &stderr,
        &format!(
            "no writable server among 127.0.0.1:{a} (connection refused), 127.0.0.1:{b} \
             (connection refused)"
        ),
    );

    let url =
        format!("postgres://postgres@127.0.0.1:{a},127.0.0.1:{b}/x?target_session_attrs=standby");
    let (code, stderr) = run_on(&url).await;
    assert_eq!(code, 2, "{stderr}");
    one_sentence(&stderr, "target_session_attrs=standby is not supported");

    // The live server second: `migrate` goes through to it.
    let db = TestDb::new_empty().await.unwrap();
    let (scheme_user, rest) = db.url.split_once('@').unwrap();
    let url = format!("{scheme_user}@127.0.0.1:{a},{rest}?target_session_attrs=read-write");
    let (code, stdout, stderr) = agent_cmd(&["migrate", "--database-url", &url]).await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    db.drop_db().await.unwrap();
}

#[tokio::test]
async fn migrate_twice_says_up_to_date() {
    let db = TestDb::new_empty().await.unwrap();
    let (code, first, stderr) = agent_cmd(&["migrate", "--database-url", &db.url]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(first.starts_with("applied "), "{first}");
    let (code, second, stderr) = agent_cmd(&["migrate", "--database-url", &db.url]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        second.trim().starts_with("database up to date (") && !second.contains("applied"),
        "{second}"
    );
}

/// A request the CLI refuses with exit 2: what it `says` in words and the internal name it
/// must not show (`not_says`).
struct Refusal {
    what: &'static str,
    args: &'static [&'static str],
    says: &'static str,
    not_says: &'static str,
}

#[tokio::test]
async fn cli_answers_in_words() {
    let db = TestDb::new().await.unwrap();
    // A host name that resolves to loopback is as local as 127.0.0.1: no TLS or token needed.
    let agent = spawn_agent(
        "leasehold-agent",
        &db.url,
        "errors",
        "noop,sleep",
        &["--listen", "localhost:0"],
        Vec::new(),
    )
    .await
    .unwrap();
    let addr = agent_address(&db.pool, "errors", WAIT).await.unwrap();
    let cli = Cli::new(&addr).await.unwrap();

    // An action on a finished task is information: exit 0.
    let o = cli
        .run(&["enqueue", "noop", "--output", "json"])
        .await
        .unwrap();
    let id = o.json().unwrap()["id"].as_i64().unwrap();
    wait_until("the task succeeds", WAIT, || async {
        Ok(task_status(&db.pool, id).await? == "succeeded")
    })
    .await
    .unwrap();
    let o = cli.run(&["cancel", &id.to_string()]).await.unwrap();
    assert_eq!(o.code, Some(0), "{}", o.describe());
    assert_eq!(
        o.stdout.trim(),
        format!("task {id} already succeeded"),
        "{}",
        o.describe()
    );
    assert_eq!(o.stderr, "", "{}", o.describe());

    // A requeue of a task that already waits: exit 0.
    let o = cli
        .run(&["enqueue", "noop", "--delay", "1h", "--output", "json"])
        .await
        .unwrap();
    let waiting = o.json().unwrap()["id"].as_i64().unwrap();
    let o = cli.run(&["requeue", &waiting.to_string()]).await.unwrap();
    assert_eq!(o.code, Some(0), "{}", o.describe());
    assert_eq!(o.stdout.trim(), format!("task {waiting} already queued"));

    // A pause of a type nobody serves is applied, with a warning.
    let o = cli.run(&["pause", "nosuch.type"]).await.unwrap();
    assert_eq!(o.code, Some(0), "{}", o.describe());
    assert!(
        o.stderr
            .contains("warning: no live agent handles task type nosuch.type"),
        "{}",
        o.describe()
    );
    let o = cli.run(&["pause", "noop"]).await.unwrap();
    assert_eq!(o.code, Some(0), "{}", o.describe());
    assert!(!o.stderr.contains("warning"), "{}", o.describe());

    // Ranges and database rules in words, not internal names or milliseconds: exit 2.
    for case in [
        Refusal {
            what: "a delay past the range",
            args: &["enqueue", "noop", "--delay", "100000000d"],
            says: "delay out of range: at most 366 days",
            not_says: "delay_ms",
        },
        Refusal {
            what: "a deadline before creation",
            args: &["enqueue", "noop", "--deadline", "2020-01-01T00:00:00Z"],
            says: "more than a day in the past",
            not_says: "tasks_deadline_after_creation",
        },
    ] {
        let o = cli.run(case.args).await.unwrap();
        let what = case.what;
        assert_eq!(o.code, Some(2), "{what}: {}", o.describe());
        assert!(o.stderr.contains(case.says), "{what}: {}", o.describe());
        assert!(
            !o.stderr.contains(case.not_says),
            "{what}: {}",
            o.describe()
        );
    }

    // Nothing listens: said at once, in words, exit 3.
    let o = cli.at("127.0.0.1:1").run(&["tasks", "ls"]).await.unwrap();
    assert_eq!(o.code, Some(3), "{}", o.describe());
    assert!(
        o.stderr.contains("connection refused ("),
        "{}",
        o.describe()
    );
    drop(agent);
}
