#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `deploy/postgres/agent-role.sql` (issue 19): an admin migrates a fresh database and creates
//! the `leasehold_agent` role with it; a real agent connected as that role enqueues, claims,
//! completes, cancels, dead-letters (the leader's deadline pass), requeues, pauses and resumes,
//! claims under a rate limit and sheds without a permission error; and the role can add audit rows but can neither UPDATE, DELETE
//! nor TRUNCATE them.

use std::time::Duration;

use leasehold_tests::cli::{Cli, CliOutput};
use leasehold_tests::fleet::spawn_agent;
use leasehold_tests::grpc::agent_address;
use leasehold_tests::{TestDb, task_status, wait_until};
use sqlx::postgres::PgPoolOptions;

const WAIT: Duration = Duration::from_secs(60);
const ROLE_SQL: &str = include_str!("../../deploy/postgres/agent-role.sql");

fn ok(o: &CliOutput) -> serde_json::Value {
    assert_eq!(o.code, Some(0), "{}", o.describe());
    o.json().unwrap()
}

async fn wait_status(db: &TestDb, id: i64, want: &str) {
    wait_until(&format!("task {id} {want}"), WAIT, || async {
        Ok(task_status(&db.pool, id).await? == want)
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_runs_as_leasehold_agent_and_cannot_rewrite_the_audit_log() {
    // Migrated by the admin (the harness's superuser), then the role script, twice (idempotent).
    let db = TestDb::new().await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(ROLE_SQL))
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(ROLE_SQL))
        .execute(&db.pool)
        .await
        .unwrap();
    let (scheme, rest) = db.url.split_once("://").unwrap();
    let host = rest.split_once('@').map_or(rest, |(_, host)| host);
    let url = format!("{scheme}://leasehold_agent@{host}");
    assert_ne!(url, db.url);

    let mut agent = spawn_agent(
        "leasehold-agent",
        &url,
        "role",
        "noop",
        &["--retention", "1m"],
        Vec::new(),
    )
    .await
    .unwrap();
    agent.wait_registered(&db.pool, "role", WAIT).await.unwrap();
    let addr = agent_address(&db.pool, "role", WAIT).await.unwrap();
    let cli = Cli::new(&addr).await.unwrap();
    let enqueue = |args: &[&str]| {
        let mut full = vec!["--output", "json", "enqueue"];
        full.extend_from_slice(args);
        let cli = &cli;
        let full: Vec<String> = full.iter().map(|s| s.to_string()).collect();
        async move {
            let args: Vec<&str> = full.iter().map(String::as_str).collect();
            ok(&cli.run(&args).await.unwrap())["id"].as_i64().unwrap()
        }
    };

    // Enqueue, claim, complete.
    let done = enqueue(&["noop"]).await;
    wait_status(&db, done, "succeeded").await;
    // Cancel a waiting task.
    let later = enqueue(&["noop", "--delay", "1h"]).await;
    ok(&cli
        .run(&["--output", "json", "cancel", &later.to_string()])
        .await
        .unwrap());
    assert_eq!(task_status(&db.pool, later).await.unwrap(), "cancelled");
    // Dead-letter by the leader's maintenance (deadline passed), then requeue it.
    let dead = enqueue(&["unserved.type", "--deadline", "1s"]).await;
    wait_status(&db, dead, "dead").await;
    ok(&cli
        .run(&["--output", "json", "requeue", &dead.to_string()])
        .await
        .unwrap());
    assert_eq!(task_status(&db.pool, dead).await.unwrap(), "queued");
    // Policies.
    ok(&cli
        .run(&["--output", "json", "pause", "noop"])
        .await
        .unwrap());
    ok(&cli
        .run(&["--output", "json", "resume", "noop"])
        .await
        .unwrap());
    ok(&cli
        .run(&[
            "--output",
            "json",
            "concurrency",
            "set",
            "--type",
            "noop",
            "3",
        ])
        .await
        .unwrap());
    // A rate limit: claims of noop now read, stamp and prune its ledger as the role.
    ok(&cli
        .run(&["--output", "json", "ratelimit", "set", "noop", "1000/1s"])
        .await
        .unwrap());
    let limited = enqueue(&["noop"]).await;
    wait_status(&db, limited, "succeeded").await;
    let stamped: i64 =
        sqlx::query_scalar("SELECT count(*) FROM rate_limit_starts WHERE scope = 'noop'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(stamped, 1, "the claim wrote its start to the ledger");
    // Load shedding: the leader cancels an overdue task of a shedding type as the role.
    ok(&cli
        .run(&["--output", "json", "shed", "set", "unserved.type", "1s"])
        .await
        .unwrap());
    let shed = enqueue(&["unserved.type"]).await;
    wait_status(&db, shed, "cancelled").await;
    // The audit log, read through the agent.
    let page = ok(&cli.run(&["--output", "json", "audit", "ls"]).await.unwrap());
    assert!(page["entries"].as_array().unwrap().len() >= 6, "{page:#}");
    // Retention: the leader purges the finished task (and, by trigger, its attempts) as the
    // role, once the admin ages it past the minimum retention of a minute.
    sqlx::query("UPDATE tasks SET finished_at = now() - interval '1 hour' WHERE id = $1")
        .bind(done)
        .execute(&db.pool)
        .await
        .unwrap();
    wait_until("the finished task purged", WAIT, || async {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks WHERE id = $1")
            .bind(done)
            .fetch_one(&db.pool)
            .await?;
        Ok(n == 0)
    })
    .await
    .unwrap();

    // The agent never met a permission error.
    assert!(agent.is_running());
    let logs = format!(
        "{}{}",
        agent.stdout_text().unwrap(),
        agent.stderr_text().unwrap()
    );
    assert!(
        !logs.contains("permission denied"),
        "the agent met a permission error:\n{logs}"
    );

    // As the role: audit rows may be added and read, never changed or removed.
    let role = PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .unwrap();
    let before: i64 = sqlx::query_scalar("SELECT count(*) FROM audit_log")
        .fetch_one(&role)
        .await
        .unwrap();
    assert!(before >= 6);
    for statement in [
        "UPDATE audit_log SET result = 'noop'",
        "DELETE FROM audit_log",
        "TRUNCATE audit_log",
        "ALTER TABLE audit_log DISABLE TRIGGER ALL",
        "CREATE TABLE sneaky (id int)",
    ] {
        let refused = sqlx::query(sqlx::AssertSqlSafe(statement))
            .execute(&role)
            .await
            .unwrap_err();
        let code = refused
            .as_database_error()
            .and_then(|e| e.code())
            .map(|c| c.into_owned());
        assert!(
            matches!(code.as_deref(), Some("42501")),
            "{statement}: {refused}"
        );
    }
    let after: i64 = sqlx::query_scalar("SELECT count(*) FROM audit_log")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(after >= before, "nothing was removed");
    role.close().await;

    agent.sigterm().unwrap();
    agent.wait_exit(WAIT).await.unwrap();
    db.drop_db().await.unwrap();
}
