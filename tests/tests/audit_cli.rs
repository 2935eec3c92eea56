#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `leasehold audit ls` end to end (issue 19): a real agent with operator and viewer tokens, a
//! real database, the CLI as a process. Operator actions appear with their actor; every
//! filter narrows the page; an enqueue row carries `payload_sha256`, which matches the digest
//! recomputed from `tasks show --output json`, and an exec enqueue carries its argv; a viewer
//! is refused (exit 4, and audited); bad filter values exit 2 before any call.

use std::time::Duration;

use leasehold_tests::TestDb;
use leasehold_tests::cli::{Cli, CliOutput};
use leasehold_tests::fleet::{ConfigToken, start_agent, tokens_config};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const WAIT: Duration = Duration::from_secs(60);
const ALICE: &str = "alice-operator-secret-0123456789";
const VIEWER: &str = "val-viewer-secret-fedcba987654321";

fn ok(o: &CliOutput) -> Value {
    assert_eq!(o.code, Some(0), "{}", o.describe());
    o.json().unwrap()
}

/// `audit ls --output json` with `args`, as alice: the entries.
async fn audit(cli: &Cli, args: &[&str]) -> Vec<Value> {
    let mut full = vec!["--output", "json", "audit", "ls"];
    full.extend(args.iter().copied());
    let page = ok(&cli.run(&full).await.unwrap());
    page["entries"].as_array().unwrap().clone()
}

fn field<'a>(entries: &'a [Value], name: &str) -> Vec<&'a str> {
    entries.iter().map(|e| e[name].as_str().unwrap()).collect()
}

fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_ls_lists_actions_with_filters_digests_and_argv_and_refuses_viewers() {
    let db = TestDb::new().await.unwrap();
    let config = tokens_config(
        "leasehold-audit-cli",
        &[
            ConfigToken::operator("alice", ALICE),
            ConfigToken::viewer("val", VIEWER),
        ],
    )
    .unwrap();
    // Only noop is served: the exec task stays queued (unserved dead-lettering is off).
    let (mut agent, addr) = start_agent(
        &db,
        "audit",
        "noop",
        &["--config", config.to_str().unwrap()],
        Vec::new(),
    )
    .await
    .unwrap();
    let cli = Cli::new(&addr).await.unwrap();
    let alice = cli.with_token(ALICE);
    let val = cli.with_token(VIEWER);

    // Two enqueues (keys out of order, non-ASCII text), an exec one, a cancel.
    let payload = r#"{"z": 1, "a": "héllo", "nested": {"y": [1, 2.5, null], "b": true}}"#;
    let mail = ok(&alice
        .run(&[
            "--output",
            "json",
            "enqueue",
            "mail.send",
            "--payload",
            payload,
            "--delay",
            "1h",
        ])
        .await
        .unwrap());
    let mail_id = mail["id"].as_i64().unwrap();
    let exec = ok(&alice
        .run(&[
            "--output",
            "json",
            "enqueue",
            "exec",
            "--payload",
            r#"{"argv": ["/bin/echo", "hi there"], "env": {"A": "1"}}"#,
        ])
        .await
        .unwrap());
    let exec_id = exec["id"].as_i64().unwrap();
    let cancel = alice
        .run(&[
            "--output",
            "json",
            "cancel",
            "--no-wait",
            &mail_id.to_string(),
        ])
        .await
        .unwrap();
    assert_eq!(cancel.code, Some(0), "{}", cancel.describe());

    // Everything, newest first, with the actor.
    let all = audit(&alice, &[]).await;
    let mine: Vec<&Value> = all.iter().filter(|e| e["actor"] == "alice").collect();
    let actions: Vec<&str> = mine.iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["cancel", "enqueue", "enqueue"], "{all:#?}");
    assert!(
        mine.iter()
            .all(|e| e["role"] == "operator" && e["count"] == 1)
    );
    assert!(
        all.windows(2)
            .all(|w| w[0]["id"].as_i64() > w[1]["id"].as_i64())
    );

    // The digest of the mail payload, recomputed from what `tasks show` prints.
    let shown = ok(&alice
        .run(&["--output", "json", "tasks", "show", &mail_id.to_string()])
        .await
        .unwrap());
    let recomputed = sha256_hex(&serde_json::to_string(&shown["task"]["payload"]).unwrap());
    let target = format!("task:{mail_id}");
    let enqueue = audit(&alice, &["--action", "enqueue", "--target", &target]).await;
    assert_eq!(enqueue.len(), 1, "{enqueue:#?}");
    assert_eq!(enqueue[0]["params"]["payload_sha256"], json!(recomputed));
    assert_eq!(enqueue[0]["params"].get("argv"), None);
    // The same text as `jq -jcS .payload` prints, when jq is installed.
    if let Ok(jq) = std::process::Command::new("jq")
        .args(["-jcS", ".task.payload"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
    {
        use std::io::Write;
        let mut jq = jq;
        jq.stdin
            .take()
            .unwrap()
            .write_all(shown.to_string().as_bytes())
            .unwrap();
        let text = String::from_utf8(jq.wait_with_output().unwrap().stdout).unwrap();
        assert_eq!(sha256_hex(&text), recomputed, "jq printed {text}");
    }
    // The exec enqueue names its argv.
    let exec_rows = audit(
        &alice,
        &[
            "--target",
            &format!("TASK:{exec_id}"),
            "--action",
            "enqueue",
        ],
    )
    .await;
    assert_eq!(exec_rows.len(), 1, "{exec_rows:#?}");
    assert_eq!(
        exec_rows[0]["params"]["argv"],
        json!(["/bin/echo", "hi there"])
    );
    assert_eq!(exec_rows[0]["params"]["task_type"], "exec");

    // Filters: action, result, actor, time, paging.
    assert_eq!(
        field(&audit(&alice, &["--action", "cancel"]).await, "target"),
        [target.as_str()]
    );
    assert_eq!(
        audit(&alice, &["--result", "failed"]).await,
        Vec::<Value>::new()
    );
    assert_eq!(
        audit(&alice, &["--actor", "nobody"]).await,
        Vec::<Value>::new()
    );
    assert_eq!(audit(&alice, &["--since", "1h"]).await.len(), all.len());
    assert!(
        audit(&alice, &["--since", "2999-01-01T00:00:00Z"])
            .await
            .is_empty()
    );
    assert!(
        audit(&alice, &["--until", "2000-01-01T00:00:00Z"])
            .await
            .is_empty()
    );
    let first = ok(&alice
        .run(&[
            "--output", "json", "audit", "ls", "--actor", "alice", "--limit", "2",
        ])
        .await
        .unwrap());
    let next = first["next_before_id"].as_i64().expect("a next page");
    let rest = audit(
        &alice,
        &["--actor", "alice", "--before-id", &next.to_string()],
    )
    .await;
    assert_eq!(field(&rest, "action"), ["enqueue"]);

    // Table mode fits 80 columns.
    let table = alice.run(&["audit", "ls"]).await.unwrap();
    assert_eq!(table.code, Some(0), "{}", table.describe());
    assert!(
        table.stdout.lines().all(|l| l.chars().count() <= 80),
        "{}",
        table.describe()
    );
    assert!(table.stdout.starts_with("ID"), "{}", table.describe());

    // A viewer may not read the log: exit 4, and its attempt is audited as denied.
    for output in ["table", "json"] {
        let o = val.run(&["--output", output, "audit", "ls"]).await.unwrap();
        assert_eq!(o.code, Some(4), "{}", o.describe());
        assert_eq!(o.stdout, "", "{}", o.describe());
        assert!(o.stderr.contains("permission denied"), "{}", o.describe());
    }
    let denied = audit(&alice, &["--actor", "val", "--result", "denied"]).await;
    assert!(!denied.is_empty(), "{all:#?}");
    assert!(
        denied
            .iter()
            .all(|e| e["action"] == "audit_list" && e["target"] == "audit_log")
    );
    let calls: i64 = denied.iter().map(|e| e["count"].as_i64().unwrap()).sum();
    assert!((1..=2).contains(&calls), "{denied:#?}");

    // Bad filter values: exit 2, nothing printed on stdout.
    for bad in [
        &["audit", "ls", "--result", "maybe"][..],
        &["audit", "ls", "--limit", "0"],
        &["audit", "ls", "--limit", "1001"],
        &["audit", "ls", "--since", "yesterday"],
        &["audit", "ls", "--before-id", "-3"],
        &["audit", "ls", "--since", "1h", "--until", "2h"],
    ] {
        let o = alice.run(bad).await.unwrap();
        assert_eq!(o.code, Some(2), "{bad:?}: {}", o.describe());
        assert_eq!(o.stdout, "", "{}", o.describe());
    }

    agent.sigterm().unwrap();
    agent.wait_exit(WAIT).await.unwrap();
    db.drop_db().await.unwrap();
}
