#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Creating and reading tasks end to end through the `leasehold` binary (DESIGN §9): `enqueue`,
//! `tasks ls`, `tasks show` and `wait`, against a real agent and a real database, the command
//! run as a process aimed at the agent. Each test checks the exit code, stdout (the table and
//! `--output json`), then the rows and the `audit_log` rows the calls left.

use leasehold_tests::calls::cli::{
    AuditRow, WAIT, audit_after, audit_len, desc, digest, enqueue, fits, inert, local, ok,
    page_ids, refused, start, wait_status,
};
use leasehold_tests::{
    TaskSpec, TestDb, attempt_rows, audit_rows, count, insert_task, scratch_dir, task_row,
    task_status, wait_until,
};
use serde_json::{Value, json};

// -------------------------------------------------------------------------------------------
// enqueue
// -------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_stores_one_task_per_idempotency_key_and_refuses_bad_input() {
    let db = TestDb::new().await.unwrap();
    let f = start(&db, "enq", "noop", &[]).await.unwrap();
    let payload = json!({"month": "2026-11", "pages": [1, 2, 3]});

    // A type no agent serves, so the row stays as enqueued.
    let o = f
        .cli
        .run(&[
            "enqueue",
            "report.build",
            "--payload",
            &payload.to_string(),
            "--priority",
            "7",
            "--idempotency-key",
            "report-2026-11",
        ])
        .await
        .unwrap();
    ok(&o);
    let id: i64 = o
        .stdout
        .strip_prefix("enqueued task ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{}", o.describe()));
    assert_eq!(
        o.stdout,
        format!("enqueued task {id} (type report.build, priority 7)\n")
    );
    let row = task_row(&db.pool, id).await.unwrap();
    assert_eq!(row["status"], "queued");
    assert_eq!(row["task_type"], "report.build");
    assert_eq!(row["payload"], payload);
    assert_eq!(row["priority"], 7);
    assert_eq!(row["idempotency_key"], "report-2026-11");

    // The same key again, with another payload: the existing task, unchanged, created false.
    let o = f
        .cli
        .run(&[
            "--output",
            "json",
            "enqueue",
            "report.build",
            "--payload",
            r#"{"month": "other"}"#,
            "--idempotency-key",
            "report-2026-11",
        ])
        .await
        .unwrap();
    ok(&o);
    let j = o.json().unwrap();
    assert_eq!(j["id"], id, "{}", o.describe());
    assert_eq!(j["created"], false);
    assert_eq!(j["status"], "queued");
    assert_eq!(j["payload"], payload);
    assert_eq!(j["priority"], 7);
    assert_eq!(j["idempotency_key"], "report-2026-11");
    let o = f
        .cli
        .run(&[
            "enqueue",
            "report.build",
            "--idempotency-key",
            "report-2026-11",
        ])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(
        o.stdout,
        format!("task {id} already exists (idempotency key report-2026-11)\n")
    );
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM tasks").await.unwrap(),
        1
    );
    assert_eq!(task_row(&db.pool, id).await.unwrap(), row);

    // A new task in JSON: the task as stored, with its id; the agent then runs it.
    let o = f
        .cli
        .run(&["--output", "json", "enqueue", "noop"])
        .await
        .unwrap();
    ok(&o);
    let j = o.json().unwrap();
    let noop = j["id"].as_i64().unwrap();
    assert_ne!(noop, id);
    assert_eq!(j["created"], true);
    assert_eq!(j["task_type"], "noop");
    assert_eq!(j["payload"], json!({}));
    assert_eq!(j["priority"], 0);
    wait_status(&db.pool, noop, "succeeded").await.unwrap();

    assert_eq!(
        audit_rows(&db.pool).await.unwrap(),
        [
            local("enqueue", &format!("task:{id}"), "applied"),
            local("enqueue", &format!("task:{id}"), "noop"),
            local("enqueue", &format!("task:{id}"), "noop"),
            local("enqueue", &format!("task:{noop}"), "applied"),
        ]
    );

    // Bad input, refused by the CLI or by the agent: exit 2, no task, no audit row.
    let scratch = scratch_dir("leasehold-cli-enqueue").unwrap();
    let big = scratch.join("big.json");
    std::fs::write(&big, json!({"blob": "x".repeat(1_100_000)}).to_string()).unwrap();
    let big = big.to_str().unwrap().to_string();
    let long_type = "x".repeat(65);
    let before = digest(&db.pool).await.unwrap();
    let seen = audit_len(&db.pool).await.unwrap();
    let bad: [&[&str]; 6] = [
        &["enqueue", "noop", "--payload", r#"{"unterminated": "#],
        &["enqueue", "noop", "--payload", "not json"],
        &["enqueue", "Not A Type"],
        &["enqueue", &long_type],
        &["enqueue", "noop", "--priority", "40000"],
        // Valid JSON, above the agent's payload limit: refused by the agent.
        &["enqueue", "noop", "--payload-file", &big],
    ];
    for args in bad {
        let o = f.cli.run(args).await.unwrap();
        assert_eq!(o.code, Some(2), "{}", o.describe());
        assert_eq!(o.stdout, "", "{}", o.describe());
        assert!(!o.stderr.trim().is_empty(), "{}", o.describe());
    }
    let o = f
        .cli
        .run(&["enqueue", "noop", "--payload-file", &big])
        .await
        .unwrap();
    let line = refused(&o, 2);
    assert!(line.contains("above the limit"), "{line}");
    assert!(line.ends_with("(invalid argument)"), "{line}");
    assert_eq!(digest(&db.pool).await.unwrap(), before);
    assert_eq!(
        audit_after(&db.pool, seen).await.unwrap(),
        Vec::<AuditRow>::new()
    );
    let _ = std::fs::remove_dir_all(&scratch);
    db.drop_db().await.unwrap();
}

// -------------------------------------------------------------------------------------------
// tasks ls / tasks show
// -------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_ls_filters_pages_and_fits_80_columns() {
    let db = TestDb::new().await.unwrap();
    // Serves only noop: the rows below stay as written.
    let f = start(&db, "ls", "noop", &[]).await.unwrap();
    let mut queued = Vec::new();
    let mut dead = Vec::new();
    let mut succeeded = Vec::new();
    for i in 0..5 {
        queued.push(
            insert_task(
                &db.pool,
                TaskSpec::new("email.send", "queued").payload(json!({"n": i})),
            )
            .await
            .unwrap(),
        );
    }
    for _ in 0..3 {
        dead.push(
            insert_task(
                &db.pool,
                TaskSpec {
                    last_error: Some(json!({
                        "code": "render_failed",
                        "message": format!("template exploded: {}", "very long reason ".repeat(20)),
                        "retryable": false
                    })),
                    ..TaskSpec::new("report.build", "dead")
                },
            )
            .await
            .unwrap(),
        );
    }
    for _ in 0..2 {
        succeeded.push(
            insert_task(&db.pool, TaskSpec::new("email.send", "succeeded"))
                .await
                .unwrap(),
        );
    }
    let long_type = format!("a{}", "b".repeat(63));
    let wide = insert_task(
        &db.pool,
        TaskSpec::new(long_type.clone(), "queued").priority(-32768),
    )
    .await
    .unwrap();
    let mut all: Vec<i64> = [&queued[..], &dead[..], &succeeded[..], &[wide]].concat();
    all = desc(all);
    let seen = audit_len(&db.pool).await.unwrap();

    // Everything, newest first, one page.
    let o = f
        .cli
        .run(&["--output", "json", "tasks", "ls"])
        .await
        .unwrap();
    ok(&o);
    let page = o.json().unwrap();
    assert_eq!(page_ids(&page).unwrap(), all);
    assert_eq!(page["next_before_id"], Value::Null);
    assert!(page["now"].is_string());
    let first = &page["tasks"][0];
    assert_eq!(first["id"], wide);
    assert_eq!(first["task_type"], long_type.as_str());
    assert_eq!(first["priority"], -32768);

    // The table: a header, one line per task, nothing wider than 80 columns.
    let o = f.cli.run(&["tasks", "ls"]).await.unwrap();
    ok(&o);
    fits(&o);
    let lines = o.lines();
    assert!(lines[0].starts_with("ID"), "{}", o.describe());
    for word in ["TYPE", "STATUS", "ATTEMPT", "PRI", "UPDATED", "ERROR"] {
        assert!(lines[0].contains(word), "{word}: {}", o.describe());
    }
    assert_eq!(lines.len(), 1 + all.len(), "{}", o.describe());
    for (line, id) in lines[1..].iter().zip(&all) {
        assert_eq!(
            line.split_whitespace().next(),
            Some(id.to_string().as_str()),
            "{}",
            o.describe()
        );
    }
    let dead_line = lines
        .iter()
        .find(|l| l.trim_start().starts_with(&format!("{} ", dead[0])))
        .unwrap();
    assert!(dead_line.contains("report.build"), "{dead_line}");
    assert!(dead_line.contains("dead"), "{dead_line}");
    assert!(dead_line.contains("render_failed"), "{dead_line}");

    // Filters: status, type, both, a status list.
    let ids_of = |args: &'static [&'static str]| {
        let cli = f.cli.clone();
        async move {
            let mut full = vec!["--output", "json", "tasks", "ls"];
            full.extend_from_slice(args);
            let o = cli.run(&full).await.unwrap();
            ok(&o);
            page_ids(&o.json().unwrap()).unwrap()
        }
    };
    assert_eq!(ids_of(&["--status", "dead"]).await, desc(dead.clone()));
    assert_eq!(
        ids_of(&["--type", "email.send"]).await,
        desc([&queued[..], &succeeded[..]].concat())
    );
    assert_eq!(
        ids_of(&["--type", "email.send", "--status", "queued"]).await,
        desc(queued.clone())
    );
    assert_eq!(
        ids_of(&["--status", "dead,succeeded"]).await,
        desc([&dead[..], &succeeded[..]].concat())
    );
    assert_eq!(
        ids_of(&["--code", "render_failed"]).await,
        desc(dead.clone())
    );
    assert_eq!(
        ids_of(&["--type", "report.build", "--status", "queued"]).await,
        Vec::<i64>::new()
    );
    let o = f
        .cli
        .run(&[
            "tasks",
            "ls",
            "--type",
            "report.build",
            "--status",
            "queued",
        ])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(o.stdout, "no tasks\n");
    let o = f
        .cli
        .run(&["tasks", "ls", "--status", "dead"])
        .await
        .unwrap();
    ok(&o);
    fits(&o);
    assert_eq!(o.lines().len(), 1 + dead.len(), "{}", o.describe());

    // Paging: walk --limit 4 pages with --before; every task once, in order.
    let mut walked = Vec::new();
    let mut before: Option<i64> = None;
    let mut pages = 0;
    loop {
        let before_text = before.map(|b| b.to_string());
        let mut args = vec!["--output", "json", "tasks", "ls", "--limit", "4"];
        if let Some(b) = &before_text {
            args.extend(["--before", b.as_str()]);
        }
        let o = f.cli.run(&args).await.unwrap();
        ok(&o);
        let page = o.json().unwrap();
        let ids = page_ids(&page).unwrap();
        assert!(ids.len() <= 4, "{}", o.describe());
        if let Some(b) = before {
            assert!(ids.iter().all(|id| *id < b), "{}", o.describe());
        }
        walked.extend(ids);
        pages += 1;
        assert!(pages <= 4, "paging does not end: {walked:?}");
        match page["next_before_id"].as_i64() {
            Some(next) => before = Some(next),
            None => break,
        }
    }
    assert_eq!(walked, all);
    assert_eq!(pages, 3);
    // The table says where the next page starts, and that page follows on.
    let o = f.cli.run(&["tasks", "ls", "--limit", "4"]).await.unwrap();
    ok(&o);
    fits(&o);
    let hint = *o.lines().last().unwrap();
    let next: i64 = hint
        .strip_prefix("next page: --before ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{}", o.describe()));
    assert_eq!(o.lines().len(), 1 + 4 + 1, "{}", o.describe());
    let next_text = next.to_string();
    let o = f
        .cli
        .run(&[
            "--output", "json", "tasks", "ls", "--limit", "4", "--before", &next_text,
        ])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(page_ids(&o.json().unwrap()).unwrap(), all[4..8]);

    // Bad filters are exit 2; reads write no audit rows.
    let o = f
        .cli
        .run(&["tasks", "ls", "--status", "zombie"])
        .await
        .unwrap();
    assert_eq!(o.code, Some(2), "{}", o.describe());
    assert_eq!(o.stdout, "");
    assert_eq!(
        audit_after(&db.pool, seen).await.unwrap(),
        Vec::<AuditRow>::new()
    );
    db.drop_db().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_show_lists_attempts_and_says_why_a_task_is_not_running() {
    let db = TestDb::new().await.unwrap();
    let f = start(&db, "show", "fail,noop", &[]).await.unwrap();

    // A task that died, requeued and died again: two attempts, both listed.
    let failing = json!({"code": "boom_code", "message": "it broke", "retryable": false});
    let id = enqueue(&f.cli, "fail", &failing).await.unwrap();
    wait_status(&db.pool, id, "dead").await.unwrap();
    let o = f.cli.run(&["requeue", &id.to_string()]).await.unwrap();
    ok(&o);
    wait_until("the task ran twice", WAIT, || {
        let pool = db.pool.clone();
        async move {
            Ok(
                attempt_rows(&pool, id).await?.len() == 2
                    && task_status(&pool, id).await? == "dead",
            )
        }
    })
    .await
    .unwrap();
    let o = f
        .cli
        .run(&["--output", "json", "tasks", "show", &id.to_string()])
        .await
        .unwrap();
    ok(&o);
    let j = o.json().unwrap();
    assert_eq!(j["task"]["id"], id);
    assert_eq!(j["task"]["status"], "dead");
    assert_eq!(j["task"]["last_error"]["code"], "boom_code");
    assert_eq!(j["task"]["lease_owner"], f.id.as_str());
    let attempts = j["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{}", o.describe());
    for (i, a) in attempts.iter().enumerate() {
        let n = i64::try_from(i).unwrap() + 1;
        assert_eq!(a["epoch"], n, "{a}");
        assert_eq!(a["attempt"], 1, "{a}");
        assert_eq!(a["agent"], f.id.as_str(), "{a}");
        assert_eq!(a["outcome"], "failed", "{a}");
        assert_eq!(a["error"]["code"], "boom_code", "{a}");
        assert!(
            a["started_at"].is_string() && a["finished_at"].is_string(),
            "{a}"
        );
    }
    assert_eq!(j["blockers"][0]["kind"], "finished");
    let o = f
        .cli
        .run(&["tasks", "show", &id.to_string()])
        .await
        .unwrap();
    ok(&o);
    inert(&o);
    let lines = o.lines();
    assert_eq!(lines[0], format!("task {id}: fail, dead"));
    let at = lines.iter().position(|l| *l == "Attempts:").unwrap();
    let attempt_lines: Vec<&&str> = lines[at + 2..]
        .iter()
        .take_while(|l| !l.is_empty())
        .collect();
    assert_eq!(attempt_lines.len(), 2, "{}", o.describe());
    for l in attempt_lines {
        assert!(
            l.contains(&f.id) && l.contains("failed") && l.contains("boom_code"),
            "{l}"
        );
    }
    let why = lines.iter().position(|l| *l == "Why not running:").unwrap();
    assert!(lines[why + 1].starts_with("  dead at "), "{}", o.describe());
    // Whole, though longer than 80 columns: stdout is a pipe.
    assert!(
        lines[why + 1].ends_with(&format!("(leasehold requeue {id})")),
        "{}",
        o.describe()
    );

    // Queued, but of a type no agent serves.
    let unserved = enqueue(&f.cli, "report.build", &json!({})).await.unwrap();
    // Queued, not due for an hour.
    let o = f
        .cli
        .run(&["--output", "json", "enqueue", "noop", "--delay", "1h"])
        .await
        .unwrap();
    ok(&o);
    let later = o.json().unwrap()["id"].as_i64().unwrap();
    for (id, kind, text) in [
        (
            unserved,
            "no_agent",
            "no live agent handles type report.build",
        ),
        (later, "not_due", "not due until "),
    ] {
        let o = f
            .cli
            .run(&["--output", "json", "tasks", "show", &id.to_string()])
            .await
            .unwrap();
        ok(&o);
        let j = o.json().unwrap();
        assert_eq!(j["task"]["status"], "queued");
        assert_eq!(j["attempts"], json!([]));
        let kinds: Vec<&str> = j["blockers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, [kind], "{}", o.describe());
        assert!(
            j["why_not_running"].as_str().unwrap().contains(text),
            "{}",
            o.describe()
        );
        let o = f
            .cli
            .run(&["tasks", "show", &id.to_string()])
            .await
            .unwrap();
        ok(&o);
        inert(&o);
        let lines = o.lines();
        assert!(lines.contains(&"Attempts: none yet"), "{}", o.describe());
        let why = lines.iter().position(|l| *l == "Why not running:").unwrap();
        assert_eq!(lines.len(), why + 2, "one reason: {}", o.describe());
        assert!(
            lines[why + 1].starts_with(&format!("  {text}")),
            "{}",
            o.describe()
        );
    }
    assert_eq!(task_status(&db.pool, later).await.unwrap(), "queued");

    // An unknown id: exit 2 and a plain message.
    let seen = audit_len(&db.pool).await.unwrap();
    let o = f.cli.run(&["tasks", "show", "999999"]).await.unwrap();
    assert_eq!(
        refused(&o, 2),
        "leasehold: get task 999999: task 999999 does not exist (not found)"
    );
    let o = f
        .cli
        .run(&["--output", "json", "tasks", "show", "999999"])
        .await
        .unwrap();
    refused(&o, 2);
    assert_eq!(
        audit_after(&db.pool, seen).await.unwrap(),
        Vec::<AuditRow>::new()
    );
    db.drop_db().await.unwrap();
}

// -------------------------------------------------------------------------------------------
// wait
// -------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_exits_0_when_all_succeed_and_1_when_one_dies() {
    let db = TestDb::new().await.unwrap();
    let f = start(&db, "wait", "noop,sleep,fail", &[]).await.unwrap();
    let a = enqueue(&f.cli, "noop", &json!({})).await.unwrap();
    let b = enqueue(&f.cli, "sleep", &json!({"ms": 500})).await.unwrap();
    let c = enqueue(&f.cli, "noop", &json!({})).await.unwrap();
    let (a_s, b_s, c_s) = (a.to_string(), b.to_string(), c.to_string());
    let o = f
        .cli
        .run(&["wait", &a_s, &b_s, &c_s, "--timeout", "90s"])
        .await
        .unwrap();
    ok(&o);
    assert_eq!(
        o.stdout,
        format!("task {a}: succeeded\ntask {b}: succeeded\ntask {c}: succeeded\n")
    );
    for id in [a, b, c] {
        assert_eq!(task_status(&db.pool, id).await.unwrap(), "succeeded");
    }

    // One ends dead (not retryable): exit 1, the JSON lists every final status.
    let dead = enqueue(
        &f.cli,
        "fail",
        &json!({"code": "bad_thing", "message": "it broke", "retryable": false}),
    )
    .await
    .unwrap();
    let slow = enqueue(&f.cli, "sleep", &json!({"ms": 700})).await.unwrap();
    let (d_s, s_s) = (dead.to_string(), slow.to_string());
    let o = f
        .cli
        .run(&[
            "--output",
            "json",
            "wait",
            &a_s,
            &d_s,
            &s_s,
            "--timeout",
            "90s",
        ])
        .await
        .unwrap();
    assert_eq!(o.code, Some(1), "{}", o.describe());
    assert_eq!(o.stderr, "", "{}", o.describe());
    assert_eq!(
        o.json_lines().unwrap(),
        [
            json!({"id": a, "status": "succeeded", "finished": true, "last_error": null}),
            json!({"id": dead, "status": "dead", "finished": true,
                   "last_error": {"code": "bad_thing", "message": "it broke", "retryable": false}}),
            json!({"id": slow, "status": "succeeded", "finished": true, "last_error": null}),
        ]
    );
    let row = task_row(&db.pool, dead).await.unwrap();
    assert_eq!(row["status"], "dead");
    assert_eq!(row["last_error"]["code"], "bad_thing");
    assert_eq!(
        attempt_rows(&db.pool, dead).await.unwrap(),
        [(1, f.id.clone(), "failed".to_string())]
    );
    let o = f
        .cli
        .run(&["wait", &d_s, "--timeout", "90s"])
        .await
        .unwrap();
    assert_eq!(o.code, Some(1), "{}", o.describe());
    assert_eq!(
        o.stdout,
        format!("task {dead}: dead (bad_thing: it broke)\n")
    );

    // Not finished in time: exit 1, naming it; an unknown task: exit 2.
    let stuck = insert_task(&db.pool, TaskSpec::new("report.build", "queued"))
        .await
        .unwrap();
    let o = f
        .cli
        .run(&["wait", &stuck.to_string(), "--timeout", "1s"])
        .await
        .unwrap();
    assert_eq!(o.code, Some(1), "{}", o.describe());
    assert_eq!(o.stdout, format!("task {stuck}: not finished: queued\n"));
    assert!(o.stderr.contains(&stuck.to_string()), "{}", o.describe());
    let o = f
        .cli
        .run(&["wait", &a_s, "999999", "--timeout", "30s"])
        .await
        .unwrap();
    assert!(refused(&o, 2).ends_with("(not found)"), "{}", o.describe());
    db.drop_db().await.unwrap();
}
