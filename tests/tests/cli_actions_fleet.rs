#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Steering the fleet end to end through the `leasehold` binary (DESIGN §9): concurrency
//! limits, pause and resume, `agents ls` and `drain`, and `watch`. Each test checks the exit
//! code, stdout (the table and `--output json`), then the rows in `policies` and `agents` and
//! the `audit_log` rows the calls left.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use leasehold_tests::calls::cli::{
    AuditRow, WAIT, audit_after, audit_len, digest, enqueue, fits, local, ok, refused, start,
    wait_status,
};
use leasehold_tests::inspect::policy_row as policy;
use leasehold_tests::{TestDb, attempt_rows, audit_rows, task_row, task_status, wait_until};
use serde_json::{Value, json};
use sqlx::PgPool;
use tokio::io::AsyncBufReadExt;

// -------------------------------------------------------------------------------------------
// concurrency
// -------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_set_writes_policies_and_the_local_limit() {
    let db = TestDb::new().await.unwrap();
    let f = start(&db, "conc", "noop", &["--concurrency", "20"])
        .await
        .unwrap();

    let o = f
        .cli
        .run(&["concurrency", "set", "--global", "10"])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(o.stdout, "global limit: unlimited → 10\n");
    assert_eq!(
        policy(&db.pool, "*").await.unwrap(),
        Some((Some(10), false))
    );
    let o = f
        .cli
        .run(&["--output", "json", "concurrency", "set", "--global", "10"])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(
        o.json().unwrap(),
        json!({"scope": "global", "task_type": null, "previous": 10, "limit": 10})
    );
    let o = f
        .cli
        .run(&["concurrency", "set", "--global", "unlimited"])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(o.stdout, "global limit: 10 → unlimited\n");
    assert_eq!(policy(&db.pool, "*").await.unwrap(), Some((None, false)));

    let o = f
        .cli
        .run(&[
            "--output",
            "json",
            "concurrency",
            "set",
            "--type",
            "email.send",
            "3",
        ])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(
        o.json().unwrap(),
        json!({"scope": "type", "task_type": "email.send", "previous": null, "limit": 3})
    );
    assert_eq!(
        policy(&db.pool, "email.send").await.unwrap(),
        Some((Some(3), false))
    );
    let o = f
        .cli
        .run(&["concurrency", "set", "--type", "email.send", "0"])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(o.stdout, "type email.send limit: 3 → 0\n");
    assert_eq!(
        policy(&db.pool, "email.send").await.unwrap(),
        Some((Some(0), false))
    );
    let o = f
        .cli
        .run(&["concurrency", "set", "--type", "email.send", "unlimited"])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(o.stdout, "type email.send limit: 0 → unlimited\n");
    assert_eq!(
        policy(&db.pool, "email.send").await.unwrap(),
        Some((None, false))
    );

    // A type's per-key limit (issue 23): set, then cleared with `unlimited`; the type limit
    // is another setting.
    let o = f
        .cli
        .run(&["concurrency", "set", "2", "--type", "noop", "--per-key"])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(o.stdout, "type noop per-key limit: unlimited → 2\n");
    assert_eq!(per_key_of(&db.pool, "noop").await, Some(2));
    assert_eq!(policy(&db.pool, "noop").await.unwrap(), Some((None, false)));
    let o = f
        .cli
        .run(&[
            "--output",
            "json",
            "concurrency",
            "set",
            "unlimited",
            "--type",
            "noop",
            "--per-key",
        ])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(
        o.json().unwrap(),
        json!({"scope": "per_key", "task_type": "noop", "previous": 2, "limit": null})
    );
    assert_eq!(per_key_of(&db.pool, "noop").await, None);
    // A type no live agent serves: applied, and said on stderr.
    let o = f
        .cli
        .run(&[
            "concurrency",
            "set",
            "3",
            "--type",
            "email.send",
            "--per-key",
        ])
        .await
        .unwrap();
    assert_eq!(o.code, Some(0), "{}", o.describe());
    assert_eq!(o.stdout, "type email.send per-key limit: unlimited → 3\n");
    assert!(
        o.stderr.starts_with("leasehold: warning: ") && o.stderr.contains("email.send"),
        "{}",
        o.describe()
    );
    assert_eq!(per_key_of(&db.pool, "email.send").await, Some(3));
    let o = f.cli.run(&["--output", "json", "types"]).await.unwrap();
    ok(&o);
    let types = o.json().unwrap()["types"].clone();
    let email = types
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["task_type"] == "email.send")
        .cloned()
        .unwrap();
    assert_eq!(email["per_key_limit"], 3, "{types}");
    let o = f.cli.run(&["types"]).await.unwrap();
    ok(&o);
    assert!(
        o.stdout.lines().next().unwrap().contains("PER-KEY"),
        "{}",
        o.stdout
    );

    // The local limit: applied by the agent at once, published by its registry heartbeat.
    let o = f
        .cli
        .run(&["concurrency", "set", "--local", "7"])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(o.stdout, "local limit: 20 → 7\n");
    let agent_id = f.id.clone();
    wait_until("the registry shows local concurrency 7", WAIT, || {
        let pool = db.pool.clone();
        let agent_id = agent_id.clone();
        async move {
            let limit: i32 =
                sqlx::query_scalar("SELECT local_concurrency FROM agents WHERE id = $1")
                    .bind(&agent_id)
                    .fetch_one(&pool)
                    .await?;
            Ok(limit == 7)
        }
    })
    .await
    .unwrap();
    let o = f
        .cli
        .run(&["--output", "json", "concurrency", "set", "--local", "7"])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(
        o.json().unwrap(),
        json!({"scope": "local", "task_type": null, "previous": 7, "limit": 7})
    );
    let o = f
        .cli
        .run(&["--output", "json", "agents", "ls"])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(o.json().unwrap()["agents"][0]["local_concurrency"], 7);

    // Bad limits: exit 2, nothing changed, no audit row.
    let before = digest(&db.pool).await.unwrap();
    let seen = audit_len(&db.pool).await.unwrap();
    let bad: [&[&str]; 11] = [
        &["concurrency", "set", "--local", "unlimited"],
        &["concurrency", "set", "--local", "0"],
        &["concurrency", "set", "--local", "100001"],
        &["concurrency", "set", "--global", "1000001"],
        &["concurrency", "set", "--type", "Bad Type", "3"],
        &["concurrency", "set", "3"],
        &["concurrency", "set", "--per-key", "2"],
        &["concurrency", "set", "--global", "--per-key", "2"],
        &["concurrency", "set", "--local", "--per-key", "2"],
        &["concurrency", "set", "--type", "noop", "--per-key", "0"],
        &[
            "concurrency",
            "set",
            "--type",
            "noop",
            "--per-key",
            "1000001",
        ],
    ];
    for args in bad {
        let o = f.cli.run(args).await.unwrap();
        assert_eq!(o.code, Some(2), "{}", o.describe());
        assert_eq!(o.stdout, "", "{}", o.describe());
    }
    assert_eq!(digest(&db.pool).await.unwrap(), before);
    assert_eq!(
        audit_after(&db.pool, seen).await.unwrap(),
        Vec::<AuditRow>::new()
    );

    let agent = format!("agent:{}", f.id);
    assert_eq!(
        audit_rows(&db.pool).await.unwrap(),
        [
            local("policy_set", "policy:*", "applied"),
            local("policy_set", "policy:*", "noop"),
            local("policy_set", "policy:*", "applied"),
            local("policy_set", "policy:email.send", "applied"),
            local("policy_set", "policy:email.send", "applied"),
            local("policy_set", "policy:email.send", "applied"),
            local("policy_set", "policy:noop", "applied"),
            local("policy_set", "policy:noop", "applied"),
            local("policy_set", "policy:email.send", "applied"),
            local("set_concurrency", &agent, "applied"),
            local("set_concurrency", &agent, "noop"),
        ]
    );

    // A task's concurrency key: sent by `enqueue`, shown by `tasks show`.
    let o = f
        .cli
        .run(&[
            "--output",
            "json",
            "enqueue",
            "email.send",
            "--delay",
            "1h",
            "--concurrency-key",
            "acme",
        ])
        .await
        .unwrap();
    ok(&o);
    let enqueued = o.json().unwrap();
    assert_eq!(enqueued["concurrency_key"], "acme");
    let id = enqueued["id"].as_i64().unwrap().to_string();
    let o = f.cli.run(&["tasks", "show", &id]).await.unwrap();
    ok(&o);
    assert!(
        o.stdout.contains("\nconcurrency key  acme\n"),
        "{}",
        o.stdout
    );
    let o = f
        .cli
        .run(&["--output", "json", "tasks", "show", &id])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(o.json().unwrap()["task"]["concurrency_key"], "acme");
    db.drop_db().await.unwrap();
}

/// The per-key limit of a type's policy row; `None` when it has none (or no row).
async fn per_key_of(pool: &PgPool, scope: &str) -> Option<i32> {
    sqlx::query_scalar::<_, Option<i32>>(
        "SELECT per_key_concurrency FROM policies WHERE scope = $1",
    )
    .bind(scope)
    .fetch_optional(pool)
    .await
    .unwrap()
    .flatten()
}

async fn running_of(pool: &PgPool, task_type: &str) -> (i64, i64) {
    sqlx::query_as(
        "SELECT count(*) FILTER (WHERE status IN ('running', 'cancel_requested')), \
                count(*) FILTER (WHERE status = 'queued') \
         FROM tasks WHERE task_type = $1",
    )
    .bind(task_type)
    .fetch_one(pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_limit_of_one_holds_until_it_is_raised() {
    let db = TestDb::new().await.unwrap();
    let f = start(&db, "limit", "sleep", &[]).await.unwrap();
    let o = f
        .cli
        .run(&["concurrency", "set", "--type", "sleep", "1"])
        .await
        .unwrap();
    ok(&o);
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(
            enqueue(&f.cli, "sleep", &json!({"ms": 3000}))
                .await
                .unwrap(),
        );
    }
    wait_until("one sleep runs", WAIT, || {
        let pool = db.pool.clone();
        async move { Ok(running_of(&pool, "sleep").await.0 == 1) }
    })
    .await
    .unwrap();
    // While the limit holds and tasks wait, never more than one runs.
    let mut pressure = 0;
    for _ in 0..10 {
        let (running, queued) = running_of(&db.pool, "sleep").await;
        assert!(running <= 1, "{running} sleeps running under a limit of 1");
        if queued >= 3 {
            pressure += 1;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(pressure > 0, "no sample saw tasks waiting behind the limit");
    assert!(running_of(&db.pool, "sleep").await.1 >= 2);

    // Raised: the waiting ones run side by side.
    let o = f
        .cli
        .run(&["concurrency", "set", "--type", "sleep", "5"])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(o.stdout, "type sleep limit: 1 → 5\n");
    wait_until("at least two sleeps run at once", WAIT, || {
        let pool = db.pool.clone();
        async move { Ok(running_of(&pool, "sleep").await.0 >= 2) }
    })
    .await
    .unwrap();
    for id in &ids {
        wait_status(&db.pool, *id, "succeeded").await.unwrap();
    }
    let mut expected = vec![local("policy_set", "policy:sleep", "applied")];
    expected.extend(
        ids.iter()
            .map(|id| local("enqueue", &format!("task:{id}"), "applied")),
    );
    expected.push(local("policy_set", "policy:sleep", "applied"));
    assert_eq!(audit_rows(&db.pool).await.unwrap(), expected);
    db.drop_db().await.unwrap();
}

// -------------------------------------------------------------------------------------------
// types
// -------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn types_lists_each_type_against_its_limit_and_the_global_limit() {
    let db = TestDb::new().await.unwrap();
    let f = start(&db, "types", "noop,sleep,fail", &[]).await.unwrap();
    let o = f.cli.run(&["types"]).await.unwrap();
    ok(&o);
    assert_eq!(o.stdout, "no task types\nglobal: unlimited\n");

    // sleep: limit 1, one running, two waiting; noop: paused, two waiting; fail: one dead.
    ok(&f
        .cli
        .run(&["concurrency", "set", "--type", "sleep", "1"])
        .await
        .unwrap());
    ok(&f
        .cli
        .run(&["concurrency", "set", "--global", "50"])
        .await
        .unwrap());
    ok(&f.cli.run(&["pause", "noop"]).await.unwrap());
    for _ in 0..3 {
        enqueue(&f.cli, "sleep", &json!({"ms": 600_000}))
            .await
            .unwrap();
    }
    for _ in 0..2 {
        enqueue(&f.cli, "noop", &json!({})).await.unwrap();
    }
    let o = f
        .cli
        .run(&["--output", "json", "enqueue", "fail", "--max-attempts", "1"])
        .await
        .unwrap();
    ok(&o);
    let dead = o.json().unwrap()["id"].as_i64().unwrap();
    wait_status(&db.pool, dead, "dead").await.unwrap();

    let expected = json!([
        {"task_type": "fail", "queued": 0, "scheduled": 0, "retrying": 0, "running": 0,
         "dead": 1, "finished_last_minute": 0, "dead_last_minute": 1, "limit": null,
         "per_key_limit": null, "paused": false, "rate": null, "shed_after_ms": null,
         "shed_last_minute": 0, "state": "active", "breaker": null},
        {"task_type": "noop", "queued": 2, "scheduled": 0, "retrying": 0, "running": 0,
         "dead": 0, "finished_last_minute": 0, "dead_last_minute": 0, "limit": null,
         "per_key_limit": null, "paused": true, "rate": null, "shed_after_ms": null,
         "shed_last_minute": 0, "state": "paused", "breaker": null},
        {"task_type": "sleep", "queued": 2, "scheduled": 0, "retrying": 0, "running": 1,
         "dead": 0, "finished_last_minute": 0, "dead_last_minute": 0, "limit": 1,
         "per_key_limit": null, "paused": false, "rate": null, "shed_after_ms": null,
         "shed_last_minute": 0, "state": "at_limit", "breaker": null},
    ]);
    // The agent serves counts up to 1 s old.
    let read = std::sync::Mutex::new(Value::Null);
    let seen = wait_until("types shows every enqueued task", WAIT, || {
        let (cli, read, expected) = (&f.cli, &read, &expected);
        async move {
            let o = cli.run(&["--output", "json", "types"]).await?;
            ok(&o);
            let mut json = o.json()?;
            // The ages move with the clock: checked apart below.
            let mut ages = Vec::new();
            for t in json["types"].as_array_mut().into_iter().flatten() {
                let age = t
                    .as_object_mut()
                    .and_then(|t| t.remove("oldest_waiting_ms"));
                ages.push(age.unwrap_or_default());
            }
            let done = json["types"] == *expected;
            json["ages"] = Value::Array(ages);
            *read.lock().unwrap() = json;
            Ok(done)
        }
    })
    .await;
    let last = read.into_inner().unwrap();
    assert!(seen.is_ok(), "{seen:?}: {last:#}");
    assert_eq!(last["global_limit"], 50);
    assert_eq!(last["global_paused"], false);
    assert_eq!(last["global_rate"], Value::Null);
    assert_eq!(last["truncated"], false);
    // fail has nothing waiting; noop's and sleep's oldest waiting tasks are due since their
    // enqueue, well under the minute this test takes.
    let ages = last["ages"].as_array().unwrap();
    assert!(ages[0].is_null(), "{last}");
    for age in &ages[1..] {
        assert!(age.as_u64().is_some_and(|ms| ms < 120_000), "{last}");
    }

    let o = f.cli.run(&["types"]).await.unwrap();
    ok(&o);
    let mut rows: Vec<Vec<&str>> = o
        .lines()
        .iter()
        .map(|l| l.split_whitespace().collect())
        .collect();
    // The OLDEST cells (an age such as `4s`, `1m02s`) move with the clock.
    for row in rows.iter_mut().skip(1).take(3) {
        if row[4] != "-" {
            row[4] = "AGE";
        }
    }
    assert_eq!(
        rows,
        [
            vec![
                "TYPE", "QUEUED", "LATER", "RETRY", "OLDEST", "RUNNING", "DEAD", "DONE/M", "STATE"
            ],
            vec!["fail", "0", "0", "0", "-", "0/-", "1", "0", "active"],
            vec!["noop", "2", "0", "0", "AGE", "0/-", "0", "0", "paused"],
            vec![
                "sleep", "2", "0", "0", "AGE", "1/1", "0", "0", "at", "limit"
            ],
            vec!["global:", "limit", "50"],
        ],
        "{}",
        o.describe()
    );
    // A read: nothing audited, nothing changed.
    let audited = audit_len(&db.pool).await.unwrap();
    ok(&f.cli.run(&["types"]).await.unwrap());
    assert_eq!(audit_len(&db.pool).await.unwrap(), audited);
    db.drop_db().await.unwrap();
}

// -------------------------------------------------------------------------------------------
// circuit breakers
// -------------------------------------------------------------------------------------------

/// `(failures, within_ms, cooldown_ms, state)` of a type's breaker columns; `None` when the
/// type has no policy row.
async fn breaker_of(
    pool: &PgPool,
    scope: &str,
) -> Option<(Option<i32>, Option<i64>, Option<i64>, String)> {
    sqlx::query_as(
        "SELECT breaker_failures, breaker_within_ms, breaker_cooldown_ms, breaker_state
         FROM policies WHERE scope = $1",
    )
    .bind(scope)
    .fetch_optional(pool)
    .await
    .unwrap()
}

/// Issue 23: `breaker set|ls|clear` end to end. A breaker on `fail` opens after two dead
/// tasks (the leader's move, audited as its own), `types` shows the BREAKER column and the
/// `breaker` object of the JSON, `breaker ls` when it half-opens; `clear` closes it. Usage
/// errors exit 2 with no call: nothing changed, nothing audited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breaker_set_ls_clear_and_the_breaker_column_of_types() {
    let db = TestDb::new().await.unwrap();
    let f = start(&db, "brk", "noop,fail", &[]).await.unwrap();
    let set = |t: &'static str, n: &'static str, within: &'static str, cool: &'static str| {
        [
            "breaker",
            "set",
            t,
            "--failures",
            n,
            "--within",
            within,
            "--cooldown",
            cool,
        ]
    };
    let o = f.cli.run(&set("fail", "2", "1m", "1h")).await.unwrap();
    ok(&o);
    assert_eq!(
        o.stdout,
        "type fail circuit breaker: 2 failures within 1m, cooldown 1h (was none)\n"
    );
    assert_eq!(
        breaker_of(&db.pool, "fail").await,
        Some((Some(2), Some(60_000), Some(3_600_000), "closed".into()))
    );
    let mut json_set = vec!["--output", "json"];
    json_set.extend(set("fail", "2", "60s", "60m"));
    let o = f.cli.run(&json_set).await.unwrap();
    ok(&o);
    let same = json!({"failures": 2, "within_ms": 60000, "cooldown_ms": 3600000,
                      "text": "2 failures within 1m, cooldown 1h"});
    assert_eq!(
        o.json().unwrap(),
        json!({"task_type": "fail", "breaker": same, "previous": same})
    );
    // A type no live agent serves: applied, and said on stderr.
    let o = f
        .cli
        .run(&set("email.send", "5", "10s", "250ms"))
        .await
        .unwrap();
    assert_eq!(o.code, Some(0), "{}", o.describe());
    assert_eq!(
        o.stdout,
        "type email.send circuit breaker: 5 failures within 10s, cooldown 250ms (was none)\n"
    );
    assert!(
        o.stderr.starts_with("leasehold: warning: ") && o.stderr.contains("email.send"),
        "{}",
        o.describe()
    );
    let o = f.cli.run(&["breaker", "ls"]).await.unwrap();
    ok(&o);
    fits(&o);
    assert_eq!(
        o.stdout,
        "TYPE        FAILURES  WITHIN  COOLDOWN  STATE   UNTIL\n\
         email.send         5     10s     250ms  closed  -\n\
         fail               2      1m        1h  closed  -\n"
    );

    // Two dead tasks of `fail`: the leader opens the breaker, for an hour.
    for _ in 0..3 {
        let o = f
            .cli
            .run(&["enqueue", "fail", "--max-attempts", "1"])
            .await
            .unwrap();
        ok(&o);
    }
    wait_until("the breaker of fail opens", Duration::from_secs(30), || {
        let pool = db.pool.clone();
        async move {
            Ok(breaker_of(&pool, "fail")
                .await
                .is_some_and(|b| b.3 == "open"))
        }
    })
    .await
    .unwrap();
    let read = std::sync::Mutex::new(Value::Null);
    let seen = wait_until("types shows the breaker open", WAIT, || {
        let (cli, read) = (&f.cli, &read);
        async move {
            let o = cli.run(&["--output", "json", "types"]).await?;
            ok(&o);
            let json = o.json()?;
            let fail = json["types"]
                .as_array()
                .and_then(|t| t.iter().find(|t| t["task_type"] == "fail").cloned())
                .unwrap_or(Value::Null);
            *read.lock().unwrap() = fail["breaker"].clone();
            Ok(fail["breaker"]["state"] == "open")
        }
    })
    .await;
    let breaker = read.into_inner().unwrap();
    assert!(seen.is_ok(), "{seen:?}: {breaker:#}");
    assert_eq!(breaker["failures"], 2, "{breaker}");
    assert_eq!(
        (&breaker["within_ms"], &breaker["cooldown_ms"]),
        (&json!(60_000), &json!(3_600_000)),
        "{breaker}"
    );
    assert!(
        breaker["since"].is_string() && breaker["until"].is_string(),
        "{breaker}"
    );
    let o = f.cli.run(&["types"]).await.unwrap();
    ok(&o);
    fits(&o);
    let rows: Vec<Vec<&str>> = o
        .lines()
        .iter()
        .map(|l| l.split_whitespace().collect())
        .collect();
    // OLDEST is there when the third `fail` task still waits (claimed before the breaker
    // opened, it died too): either way, the columns after it are where they should be.
    let waits: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM tasks WHERE task_type = 'fail' AND status = 'queued'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let oldest = usize::from(waits > 0);
    let mut header = vec!["TYPE", "QUEUED", "LATER", "RETRY"];
    if waits > 0 {
        header.push("OLDEST");
    }
    header.extend(["RUNNING", "DEAD", "DONE/M", "BREAKER", "STATE"]);
    assert_eq!(rows[0], header, "{}", o.describe());
    let fail = rows.iter().find(|r| r[0] == "fail").unwrap();
    assert_eq!(&fail[7 + oldest..8 + oldest], ["open"], "{}", o.describe());
    assert!(fail[8 + oldest].starts_with("59m"), "{}", o.describe());
    let email = rows.iter().find(|r| r[0] == "email.send").unwrap();
    assert_eq!(
        &email[7 + oldest..],
        ["closed", "active"],
        "{}",
        o.describe()
    );
    let o = f.cli.run(&["breaker", "ls"]).await.unwrap();
    ok(&o);
    let line = o.stdout.lines().find(|l| l.starts_with("fail ")).unwrap();
    assert!(
        line.contains(" open ") && line.contains("(in 59m"),
        "{line}"
    );
    let o = f
        .cli
        .run(&["--output", "json", "breaker", "ls"])
        .await
        .unwrap();
    ok(&o);
    let ls = o.json().unwrap();
    assert_eq!(ls[1]["task_type"], "fail", "{ls}");
    assert_eq!(ls[1]["state"], "open", "{ls}");
    assert_eq!(ls[1]["until"], breaker["until"], "{ls}");

    // Cleared: the breaker closes at once; clearing again changes nothing.
    let o = f.cli.run(&["breaker", "clear", "fail"]).await.unwrap();
    ok(&o);
    assert_eq!(
        o.stdout,
        "type fail circuit breaker cleared (was 2 failures within 1m, cooldown 1h)\n"
    );
    assert_eq!(
        breaker_of(&db.pool, "fail").await,
        Some((None, None, None, "closed".into()))
    );
    let o = f
        .cli
        .run(&["--output", "json", "breaker", "clear", "fail"])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(
        o.json().unwrap(),
        json!({"task_type": "fail", "breaker": null, "previous": null})
    );

    // Usage errors: exit 2 before any call, nothing changed, no audit row.
    let before = digest(&db.pool).await.unwrap();
    let seen = audit_len(&db.pool).await.unwrap();
    let good = set("noop", "5", "1m", "30s");
    let bad = |i: usize, value: &'static str| {
        let mut args = good;
        args[i] = value;
        args.to_vec()
    };
    for args in [
        bad(4, "0"),
        bad(4, "1000001"),
        bad(6, "0s"),
        bad(6, "25h"),
        bad(8, "0ms"),
        bad(8, "8d"),
        bad(2, "Bad Type"),
        good[..7].to_vec(),
        vec!["breaker", "clear"],
        vec!["breaker", "set", "noop"],
    ] {
        let o = f.cli.run(&args).await.unwrap();
        assert_eq!(o.code, Some(2), "{args:?}: {}", o.describe());
        assert_eq!(o.stdout, "", "{}", o.describe());
    }
    assert_eq!(digest(&db.pool).await.unwrap(), before);
    assert_eq!(
        audit_after(&db.pool, seen).await.unwrap(),
        Vec::<AuditRow>::new()
    );

    // The operator's changes, and the leader's move between them as its own.
    let rows = audit_rows(&db.pool).await.unwrap();
    let policy_rows: Vec<AuditRow> = rows
        .iter()
        .filter(|r| r.2 == "policy_set")
        .cloned()
        .collect();
    assert_eq!(
        policy_rows,
        [
            local("policy_set", "policy:fail", "applied"),
            local("policy_set", "policy:fail", "noop"),
            local("policy_set", "policy:email.send", "applied"),
            local("policy_set", "policy:fail", "applied"),
            local("policy_set", "policy:fail", "noop"),
        ]
    );
    let moves: Vec<&AuditRow> = rows
        .iter()
        .filter(|r| r.2.starts_with("breaker_"))
        .collect();
    assert_eq!(
        moves,
        [&(
            f.id.clone(),
            "system".to_string(),
            "breaker_open".to_string(),
            "type:fail".to_string(),
            "applied".to_string()
        )]
    );
    db.drop_db().await.unwrap();
}

// -------------------------------------------------------------------------------------------
// pause / resume
// -------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_stops_claims_of_a_type_and_resume_restarts_them() {
    let db = TestDb::new().await.unwrap();
    let f = start(&db, "pause", "noop,sleep", &[]).await.unwrap();

    let o = f.cli.run(&["pause", "noop"]).await.unwrap();
    ok(&o);
    assert_eq!(o.stdout, "paused type noop\n");
    assert_eq!(policy(&db.pool, "noop").await.unwrap(), Some((None, true)));
    let o = f
        .cli
        .run(&["--output", "json", "pause", "noop"])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(
        o.json().unwrap(),
        json!({"task_type": "noop", "paused": true, "changed": false})
    );

    // A paused type is not claimed; another type enqueued after it is (the agent did claim).
    let held = enqueue(&f.cli, "noop", &json!({})).await.unwrap();
    let other = enqueue(&f.cli, "sleep", &json!({"ms": 1})).await.unwrap();
    wait_status(&db.pool, other, "succeeded").await.unwrap();
    let row = task_row(&db.pool, held).await.unwrap();
    assert_eq!(row["status"], "queued");
    assert_eq!(row["attempt"], 0);
    let o = f
        .cli
        .run(&["tasks", "show", &held.to_string()])
        .await
        .unwrap();
    ok(&o);
    let lines = o.lines();
    let why = lines.iter().position(|l| *l == "Why not running:").unwrap();
    assert_eq!(
        lines[why + 1..],
        ["  type noop is paused (leasehold resume noop)"],
        "{}",
        o.describe()
    );
    let o = f
        .cli
        .run(&["--output", "json", "tasks", "show", &held.to_string()])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(
        o.json().unwrap()["blockers"],
        json!([{"kind": "paused", "message": "type noop is paused (leasehold resume noop)"}])
    );
    assert_eq!(task_status(&db.pool, held).await.unwrap(), "queued");

    let o = f.cli.run(&["resume", "noop"]).await.unwrap();
    ok(&o);
    assert_eq!(o.stdout, "resumed type noop\n");
    assert_eq!(policy(&db.pool, "noop").await.unwrap(), Some((None, false)));
    wait_status(&db.pool, held, "succeeded").await.unwrap();
    let o = f
        .cli
        .run(&["--output", "json", "resume", "noop"])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(
        o.json().unwrap(),
        json!({"task_type": "noop", "paused": false, "changed": false})
    );
    let o = f.cli.run(&["resume", "noop"]).await.unwrap();
    ok(&o);
    assert_eq!(o.stdout, "type noop was not paused (nothing changed)\n");

    // A bad type name: exit 2, no audit row.
    let seen = audit_len(&db.pool).await.unwrap();
    let o = f.cli.run(&["pause", "Not A Type"]).await.unwrap();
    assert_eq!(o.code, Some(2), "{}", o.describe());
    assert_eq!(o.stdout, "");
    assert_eq!(
        audit_after(&db.pool, seen).await.unwrap(),
        Vec::<AuditRow>::new()
    );

    assert_eq!(
        audit_rows(&db.pool).await.unwrap(),
        [
            local("policy_set", "policy:noop", "applied"),
            local("policy_set", "policy:noop", "noop"),
            local("enqueue", &format!("task:{held}"), "applied"),
            local("enqueue", &format!("task:{other}"), "applied"),
            local("policy_set", "policy:noop", "applied"),
            local("policy_set", "policy:noop", "noop"),
            local("policy_set", "policy:noop", "noop"),
        ]
    );
    db.drop_db().await.unwrap();
}

// -------------------------------------------------------------------------------------------
// agents ls / drain
// -------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_ls_shows_the_whole_fleet_and_drain_stops_an_agent() {
    let db = TestDb::new().await.unwrap();
    let mut a = start(&db, "fleet-a", "noop", &[]).await.unwrap();
    let mut b = start(&db, "fleet-b", "sleep", &["--shutdown-timeout", "30s"])
        .await
        .unwrap();
    let leader = std::sync::Mutex::new(String::new());
    wait_until("a leader is elected", WAIT, || {
        let pool = db.pool.clone();
        let leader = &leader;
        async move {
            let owner: Option<String> = sqlx::query_scalar(
                "SELECT owner FROM leader WHERE owner IS NOT NULL AND lease_until > now()",
            )
            .fetch_optional(&pool)
            .await?
            .flatten();
            let found = owner.is_some();
            *leader.lock().unwrap() = owner.unwrap_or_default();
            Ok(found)
        }
    })
    .await
    .unwrap();
    let leader = leader.into_inner().unwrap();
    let ids: BTreeSet<String> = [a.id.clone(), b.id.clone()].into();
    assert!(
        ids.contains(&leader),
        "leader {leader} is not one of {ids:?}"
    );

    // Asked from either agent, the whole registry, the leader marked.
    for (cli, answering) in [(&a.cli, &a.id), (&b.cli, &b.id)] {
        let o = cli
            .run(&["--output", "json", "agents", "ls"])
            .await
            .unwrap();
        ok(&o);
        let j = o.json().unwrap();
        assert_eq!(j["answered_by"], answering.as_str());
        let agents = j["agents"].as_array().unwrap();
        let listed: BTreeSet<String> = agents
            .iter()
            .map(|x| x["id"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(listed, ids, "{}", o.describe());
        for x in agents {
            assert_eq!(x["state"], "running", "{x}");
            assert_eq!(x["leader"], x["id"] == leader.as_str(), "{x}");
            assert!(x["grpc_address"].is_string(), "{x}");
        }
        let types: BTreeMap<&str, &Value> = agents
            .iter()
            .map(|x| (x["id"].as_str().unwrap(), &x["task_types"]))
            .collect();
        assert_eq!(types[a.id.as_str()], &json!(["noop"]));
        assert_eq!(types[b.id.as_str()], &json!(["sleep"]));

        let o = cli.run(&["agents", "ls"]).await.unwrap();
        ok(&o);
        fits(&o);
        let lines = o.lines();
        assert!(
            lines[0].starts_with("L ") && lines[0].contains("ID"),
            "{}",
            o.describe()
        );
        assert_eq!(lines.len(), 5, "{}", o.describe());
        for id in &ids {
            let line = lines.iter().find(|l| l.contains(id.as_str())).unwrap();
            assert_eq!(line.starts_with('*'), *id == leader, "{line}");
            assert!(line.contains("running"), "{line}");
        }
        assert!(
            lines[3].starts_with(&format!("leader {leader} · term ")),
            "{}",
            o.describe()
        );
        assert_eq!(
            lines[4],
            format!("answered by {answering} (* = leader)"),
            "{}",
            o.describe()
        );
    }

    // Drain b while it runs a task: it finishes it, exits 0 on its own, its row is stopped.
    let task = enqueue(&a.cli, "sleep", &json!({"ms": 3000}))
        .await
        .unwrap();
    wait_status(&db.pool, task, "running").await.unwrap();
    let o = b.cli.run(&["drain"]).await.unwrap();
    ok(&o);
    assert_eq!(
        o.stdout,
        format!("agent at {} is draining (1 lease held)\n", b.cli.addr())
    );
    let status = b.agent.wait_exit(WAIT).await.unwrap();
    assert_eq!(status.code(), Some(0), "{}", b.agent.log_tail(40));
    let (state, stopped): (String, bool) =
        sqlx::query_as("SELECT state, stopped_at IS NOT NULL FROM agents WHERE id = $1")
            .bind(&b.id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!((state.as_str(), stopped), ("stopped", true));
    assert_eq!(task_status(&db.pool, task).await.unwrap(), "succeeded");
    assert_eq!(
        attempt_rows(&db.pool, task).await.unwrap(),
        [(1, b.id.clone(), "succeeded".to_string())]
    );
    let o = a
        .cli
        .run(&["--output", "json", "agents", "ls"])
        .await
        .unwrap();
    ok(&o);
    let j = o.json().unwrap();
    let gone = j["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"] == b.id.as_str())
        .unwrap();
    assert_eq!(gone["state"], "stopped");
    assert!(gone["stopped_at"].is_string());
    // A drained agent cannot be reached any more: exit 3.
    let o = b.cli.run(&["drain"]).await.unwrap();
    assert!(
        refused(&o, 3).contains("cannot reach agent"),
        "{}",
        o.describe()
    );

    assert_eq!(
        audit_rows(&db.pool).await.unwrap(),
        [
            local("enqueue", &format!("task:{task}"), "applied"),
            local("drain", &format!("agent:{}", b.id), "applied"),
        ]
    );
    assert!(a.agent.is_running());
    db.drop_db().await.unwrap();
}

// -------------------------------------------------------------------------------------------
// watch
// -------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_a_snapshot_then_deltas_as_json_lines_until_sigint() {
    let db = TestDb::new().await.unwrap();
    let f = start(&db, "watch", "sleep", &[]).await.unwrap();
    let mut child = f.cli.spawn(&["--output", "json", "watch"]).unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut got: Vec<Value> = Vec::new();
    let first = tokio::time::timeout(WAIT, lines.next_line())
        .await
        .expect("a snapshot line")
        .unwrap()
        .expect("watch printed nothing");
    got.push(serde_json::from_str(&first).unwrap());
    assert_eq!(got[0]["seq"], 0, "{first}");
    assert_eq!(got[0]["kind"], "snapshot", "{first}");
    assert_eq!(got[0]["snapshot"]["leases"], json!([]), "{first}");
    assert_eq!(got[0]["snapshot"]["stats"]["state"], "running", "{first}");

    let x = enqueue(&f.cli, "sleep", &json!({"ms": 300})).await.unwrap();
    let y = enqueue(&f.cli, "sleep", &json!({"ms": 300})).await.unwrap();
    let ended = |got: &[Value], id: i64| {
        let acquired = got
            .iter()
            .any(|l| l["kind"] == "lease_acquired" && l["lease_acquired"]["task_id"] == id);
        let released = got.iter().any(|l| {
            l["kind"] == "lease_released"
                && l["lease_released"]["task_id"] == id
                && l["lease_released"]["outcome"] == "succeeded"
        });
        acquired && released
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    while !(ended(&got, x) && ended(&got, y)) {
        let line = tokio::time::timeout_at(deadline, lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("no acquired and released lines for {x} and {y}: {got:?}"))
            .unwrap()
            .expect("watch ended early");
        got.push(serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")));
    }
    assert_eq!(task_status(&db.pool, x).await.unwrap(), "succeeded");
    assert_eq!(task_status(&db.pool, y).await.unwrap(), "succeeded");

    // SIGINT: exit 0; everything printed is JSON.
    let pid = child.id().unwrap();
    let kill = std::process::Command::new("kill")
        .args(["-s", "INT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let rest = tokio::time::timeout(WAIT, async {
        let mut rest = Vec::new();
        while let Some(line) = lines.next_line().await.unwrap() {
            rest.push(line);
        }
        rest
    })
    .await
    .expect("watch did not stop after SIGINT");
    for line in rest {
        got.push(serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")));
    }
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .expect("watch did not exit after SIGINT")
        .unwrap();
    assert_eq!(status.code(), Some(0), "watch exited with {status}");

    let mut previous = 0;
    for (i, l) in got.iter().enumerate() {
        assert_eq!(l["agent_id"], f.id.as_str(), "{l}");
        let kind = l["kind"].as_str().unwrap();
        assert!(
            !l[kind].is_null(),
            "line {i} names {kind} but has no {kind}: {l}"
        );
        assert!(l["now_ms"].as_i64().unwrap() > 0, "{l}");
        let seq = l["seq"].as_u64().unwrap();
        if i > 0 {
            assert_ne!(kind, "snapshot", "a second snapshot: {l}");
            assert!(
                seq >= 1 && (seq == previous || seq == previous + 1),
                "seq {previous} then {l}"
            );
        }
        previous = seq;
    }
    // Watching writes no audit rows.
    assert_eq!(
        audit_rows(&db.pool).await.unwrap(),
        [
            local("enqueue", &format!("task:{x}"), "applied"),
            local("enqueue", &format!("task:{y}"), "applied"),
        ]
    );
    db.drop_db().await.unwrap();
}
