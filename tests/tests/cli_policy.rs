#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Per-type policy end to end (issue 24): `leasehold policy set TYPE --max-attempts 5
//! --backoff 2s..5m --timeout 30s --slow-after 1m` against a live agent, then `policy show
//! --output json` agrees setting by setting (and says where each comes from); `leasehold
//! enqueue` without `--max-attempts` gets the type's; `--clear` returns a setting to what the
//! type inherits; bad flags exit 2 and change nothing; every change has its audit row.

use leasehold_tests::calls::cli::{fits, local, ok, refused, start};
use leasehold_tests::cli::Cli;
use leasehold_tests::{TestDb, audit_rows};
use serde_json::{Value, json};

async fn show(cli: &Cli, task_type: &str) -> Value {
    let o = cli
        .run(&["policy", "show", task_type, "--output", "json"])
        .await
        .unwrap();
    ok(&o);
    serde_json::from_str(&o.stdout).unwrap()
}

/// Enqueues one `noop` task (delayed, so nothing runs it) and returns its max attempts as
/// `tasks show --output json` prints them.
async fn enqueued_max_attempts(cli: &Cli, extra: &[&str]) -> Value {
    let mut args = vec!["enqueue", "pol.mail", "--delay", "1h", "--output", "json"];
    args.extend_from_slice(extra);
    let o = cli.run(&args).await.unwrap();
    // Exit 0; stderr may warn that no live agent handles the type.
    assert_eq!(o.code, Some(0), "{}", o.describe());
    let id = serde_json::from_str::<Value>(&o.stdout).unwrap()["id"].clone();
    let o = cli
        .run(&["tasks", "show", &id.to_string(), "--output", "json"])
        .await
        .unwrap();
    ok(&o);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    let task = if v.get("task").is_some() {
        v["task"].clone()
    } else {
        v
    };
    task["max_attempts"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_set_show_enqueue_and_clear_agree_end_to_end() {
    let db = TestDb::new().await.unwrap();
    let f = start(&db, "pol", "noop", &[]).await.unwrap();
    // Before: everything inherited.
    let before = show(&f.cli, "pol.mail").await;
    assert_eq!(
        before["max_attempts"],
        json!({"value": 25, "from": "default"})
    );
    assert_eq!(enqueued_max_attempts(&f.cli, &[]).await, 25);

    let o = f
        .cli
        .run(&[
            "policy",
            "set",
            "pol.mail",
            "--max-attempts",
            "5",
            "--backoff",
            "2s..5m",
            "--timeout",
            "30s",
            "--slow-after",
            "1m",
        ])
        .await
        .unwrap();
    // A warning on stderr: no live agent handles pol.mail.
    assert_eq!(o.code, Some(0), "{}", o.describe());
    fits(&o);
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines[0], "type pol.mail:", "{}", o.stdout);
    assert!(
        lines.contains(&"  max attempts 5 (was 25, default)"),
        "{}",
        o.stdout
    );
    assert!(
        lines.contains(&"  backoff base 2s (was 30s, global)"),
        "{}",
        o.stdout
    );

    let now = show(&f.cli, "pol.mail").await;
    assert_eq!(now["task_type"], "pol.mail");
    assert_eq!(now["max_attempts"], json!({"value": 5, "from": "type"}));
    assert_eq!(now["retry_base_ms"], json!({"value": 2000, "from": "type"}));
    assert_eq!(
        now["retry_max_ms"],
        json!({"value": 300000, "from": "type"})
    );
    assert_eq!(now["timeout_ms"], json!({"value": 30000, "from": "type"}));
    assert_eq!(
        now["slow_after_ms"],
        json!({"value": 60000, "from": "type"})
    );
    assert_eq!(now["max_snoozes"], json!({"value": 100, "from": "default"}));
    assert_eq!(now["retry_multiplier"]["from"], "global");
    // The table fits 80 columns.
    let o = f.cli.run(&["policy", "show", "pol.mail"]).await.unwrap();
    ok(&o);
    fits(&o);
    assert!(o.stdout.contains("max attempts        5"), "{}", o.stdout);

    // An enqueue without --max-attempts takes the type's; an explicit one wins.
    assert_eq!(enqueued_max_attempts(&f.cli, &[]).await, 5);
    assert_eq!(
        enqueued_max_attempts(&f.cli, &["--max-attempts", "9"]).await,
        9
    );

    // Bad flags: exit 2, no call, nothing changed.
    let rows_before = audit_rows(&db.pool).await.unwrap().len();
    for bad in [
        &["policy", "set", "pol.mail", "--max-attempts", "0"][..],
        &["policy", "set", "pol.mail", "--max-attempts", "1001"],
        &["policy", "set", "pol.mail", "--backoff", "5m..2s"],
        &["policy", "set", "pol.mail", "--backoff", "2s"],
        &["policy", "set", "pol.mail", "--jitter", "2"],
        &["policy", "set", "pol.mail", "--timeout", "0s"],
        &["policy", "set", "pol.mail", "--timeout", "8d"],
        &["policy", "set", "pol.mail"],
        &["policy", "set", "pol.mail", "--clear", "bogus"],
        &[
            "policy",
            "set",
            "pol.mail",
            "--max-attempts",
            "3",
            "--clear",
            "max-attempts",
        ],
        &[
            "policy",
            "set",
            "pol.mail",
            "--global",
            "--max-attempts",
            "3",
        ],
        &["policy", "set", "Bad Type", "--max-attempts", "3"],
    ] {
        let o = f.cli.run(bad).await.unwrap();
        assert_eq!(o.code, Some(2), "{bad:?}: {}", o.describe());
        assert_eq!(o.stdout, "", "{bad:?}");
    }
    // The global policy must keep its timeout: the agent refuses, exit 2.
    let o = f
        .cli
        .run(&["policy", "set", "--global", "--clear", "timeout"])
        .await
        .unwrap();
    refused(&o, 2);
    assert_eq!(show(&f.cli, "pol.mail").await, now);
    assert_eq!(audit_rows(&db.pool).await.unwrap().len(), rows_before);

    // --clear returns to what the type inherits.
    let o = f
        .cli
        .run(&[
            "policy",
            "set",
            "pol.mail",
            "--clear",
            "max-attempts",
            "--clear",
            "backoff",
            "--output",
            "json",
        ])
        .await
        .unwrap();
    assert_eq!(o.code, Some(0), "{}", o.describe());
    let changed: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(changed["previous"]["max_attempts"]["value"], 5);
    assert_eq!(
        changed["current"]["max_attempts"],
        json!({"value": 25, "from": "default"})
    );
    let cleared = show(&f.cli, "pol.mail").await;
    assert_eq!(
        cleared["max_attempts"],
        json!({"value": 25, "from": "default"})
    );
    assert_eq!(cleared["retry_base_ms"]["from"], "global");
    assert_eq!(
        cleared["timeout_ms"],
        json!({"value": 30000, "from": "type"})
    );
    assert_eq!(enqueued_max_attempts(&f.cli, &[]).await, 25);

    // The global row then applies to the type.
    let o = f
        .cli
        .run(&["policy", "set", "--global", "--max-attempts", "8"])
        .await
        .unwrap();
    assert_eq!(o.code, Some(0), "{}", o.describe());
    assert_eq!(
        show(&f.cli, "pol.mail").await["max_attempts"],
        json!({"value": 8, "from": "global"})
    );
    assert_eq!(enqueued_max_attempts(&f.cli, &[]).await, 8);

    let policy_rows: Vec<_> = audit_rows(&db.pool)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.2 == "policy_set")
        .collect();
    assert_eq!(
        policy_rows,
        vec![
            local("policy_set", "policy:pol.mail", "applied"),
            local("policy_set", "policy:pol.mail", "applied"),
            local("policy_set", "policy:*", "applied"),
        ]
    );
    db.drop_db().await.unwrap();
}
