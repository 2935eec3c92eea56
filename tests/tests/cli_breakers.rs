#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Circuit breakers end to end (issue 23): `leasehold breaker set exec --failures 3 --within 1m
//! --cooldown 2s` on two live agents. Tasks whose program fails until a file exists trip it:
//! the leader opens the breaker (audited as its own action, visible in `leasehold types
//! --output json`), nothing of the type starts while it is open, after the cooldown it
//! half-opens and one task tries; that try succeeds and the breaker closes; the rest run.

use std::time::Duration;

use leasehold_tests::calls::cli::{ok, start};
use leasehold_tests::{TaskSpec, TestDb, insert_task, scratch_dir, wait_until};
use serde_json::{Value, json};

/// The `breaker` object of type `exec` in `leasehold types --output json`.
async fn breaker_of(cli: &leasehold_tests::cli::Cli) -> Value {
    let o = cli.run(&["types", "--output", "json"]).await.unwrap();
    ok(&o);
    let rows: Value = serde_json::from_str(&o.stdout).unwrap();
    let rows = rows
        .as_array()
        .or_else(|| rows["types"].as_array())
        .unwrap_or_else(|| panic!("types JSON: {}", o.stdout))
        .clone();
    rows.iter()
        .find(|r| r["task_type"] == "exec")
        .map(|r| r["breaker"].clone())
        .unwrap_or(Value::Null)
}

/// `(action, actor, role, at µs)` of the breaker moves in the audit log, oldest first.
async fn moves(pool: &sqlx::PgPool) -> Vec<(String, String, String, i64)> {
    sqlx::query_as(
        "SELECT action, actor, role, (extract(epoch FROM at) * 1e6)::bigint FROM audit_log
         WHERE action LIKE 'breaker_%' ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breaker_opens_pauses_the_type_half_opens_and_closes_on_real_agents() {
    let db = TestDb::new().await.unwrap();
    let flag = scratch_dir("lh-breaker").unwrap().join("healthy");
    let flags = ["--exec-allow", "/bin/sh", "--concurrency", "4"];
    let a = start(&db, "brk-a", "exec", &flags).await.unwrap();
    let _b = start(&db, "brk-b", "exec", &flags).await.unwrap();
    let o = a
        .cli
        .run(&[
            "breaker",
            "set",
            "exec",
            "--failures",
            "3",
            "--within",
            "1m",
            "--cooldown",
            "2s",
        ])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(breaker_of(&a.cli).await["state"], "closed");

    // Five tasks whose program fails until the flag file exists.
    let payload = json!({"argv": ["/bin/sh", "-c", format!("test -e '{}'", flag.display())]});
    for _ in 0..5 {
        insert_task(
            &db.pool,
            TaskSpec::new("exec", "queued").payload(payload.clone()),
        )
        .await
        .unwrap();
    }
    wait_until("the breaker opens", Duration::from_secs(20), || {
        let pool = db.pool.clone();
        async move { Ok(moves(&pool).await.len() == 1) }
    })
    .await
    .unwrap();
    // GetOverview is cached for up to a second.
    let mut open = breaker_of(&a.cli).await;
    for _ in 0..30 {
        if open["state"] == "open" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        open = breaker_of(&a.cli).await;
    }
    assert_eq!(open["state"], "open", "{open}");
    assert_eq!(open["failures"], 3, "{open}");
    assert!(open["until"].is_string(), "{open}");

    // The service recovers, and five more tasks arrive while the breaker is open.
    std::fs::write(&flag, b"").unwrap();
    for _ in 0..5 {
        insert_task(
            &db.pool,
            TaskSpec::new("exec", "queued").payload(payload.clone()),
        )
        .await
        .unwrap();
    }
    wait_until("the breaker closes", Duration::from_secs(30), || {
        let pool = db.pool.clone();
        async move { Ok(moves(&pool).await.len() == 3) }
    })
    .await
    .unwrap();
    let mut closed_now = breaker_of(&a.cli).await;
    for _ in 0..30 {
        if closed_now["state"] == "closed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        closed_now = breaker_of(&a.cli).await;
    }
    assert_eq!(closed_now["state"], "closed", "{closed_now}");
    let moved = moves(&db.pool).await;
    let actions: Vec<&str> = moved.iter().map(|m| m.0.as_str()).collect();
    assert_eq!(
        actions,
        ["breaker_open", "breaker_half_open", "breaker_closed"]
    );
    let leader: String = sqlx::query_scalar("SELECT owner FROM leader")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    for (action, actor, role, _) in &moved {
        assert_eq!(
            (actor.as_str(), role.as_str()),
            (leader.as_str(), "system"),
            "{action}"
        );
    }
    // The ledger: nothing started while open; one try while half-open.
    let (opened, half_open, closed) = (moved[0].3, moved[1].3, moved[2].3);
    assert!(
        half_open - opened >= 2_000_000,
        "half-opened before the cooldown"
    );
    let starts: Vec<i64> = sqlx::query_scalar(
        "SELECT (extract(epoch FROM started_at) * 1e6)::bigint FROM task_attempts ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let while_open = starts
        .iter()
        .filter(|s| **s > opened && **s < half_open)
        .count();
    let while_half_open = starts
        .iter()
        .filter(|s| **s >= half_open && **s < closed)
        .count();
    assert_eq!(while_open, 0, "tasks started while the breaker was open");
    assert_eq!(while_half_open, 1, "one try while half-open");

    // Closed: the five new tasks run without waiting for anything.
    wait_until("the new tasks succeed", Duration::from_secs(20), || {
        let pool = db.pool.clone();
        async move {
            let n: i64 =
                sqlx::query_scalar("SELECT count(*) FROM tasks WHERE status = 'succeeded'")
                    .fetch_one(&pool)
                    .await?;
            Ok(n >= 5)
        }
    })
    .await
    .unwrap();
    eprintln!(
        "breaker: opened after 3 failures, half-open {:.1} s later, closed {:.2} s after that; \
         starts while open {while_open}, while half-open {while_half_open}",
        (half_open - opened) as f64 / 1e6,
        (closed - half_open) as f64 / 1e6
    );
    db.drop_db().await.unwrap();
}
