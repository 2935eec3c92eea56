#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Issue 20 item 7: the agent that receives an Enqueue (or AddSchedule) checks the payload with
//! the handler of its type when it has one, and always with the built-ins (`exec`, `sleep`,
//! `noop`, `fail`), whose payloads every agent knows. A payload the handler would refuse is
//! INVALID_ARGUMENT (CLI exit 2) naming the field and what is wrong, nothing is saved, and the
//! refusal is audited `failed`. A type the agent does not run is accepted as before: another
//! agent may run it.

use std::time::Duration;

use leasehold_tests::cli::{Cli, CliOutput};
use leasehold_tests::fleet::spawn_agent;
use leasehold_tests::grpc::agent_address;
use leasehold_tests::{TestDb, audit_rows, count};

const WAIT: Duration = Duration::from_secs(60);

/// Exit 2, nothing on stdout, one `leasehold: …` line on stderr containing every `wants`.
fn refused(o: &CliOutput, wants: &[&str]) {
    assert_eq!(o.code, Some(2), "{}", o.describe());
    assert_eq!(o.stdout, "", "{}", o.describe());
    let lines: Vec<&str> = o.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", o.describe());
    for want in wants {
        assert!(lines[0].contains(want), "wants {want:?}: {}", o.describe());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payloads_the_handler_refuses_are_refused_at_enqueue_and_audited() {
    let db = TestDb::new().await.unwrap();
    // Runs `sleep` only: `exec`, `noop` and `fail` are checked as built-ins all the same.
    let agent = spawn_agent(
        "leasehold-agent",
        &db.url,
        "checker",
        "sleep",
        &[],
        Vec::new(),
    )
    .await
    .unwrap();
    agent
        .wait_registered(&db.pool, "checker", WAIT)
        .await
        .unwrap();
    let cli = Cli::new(&agent_address(&db.pool, "checker", WAIT).await.unwrap())
        .await
        .unwrap();
    let enqueue = |task_type: &'static str, payload: &'static str| {
        let cli = &cli;
        async move {
            cli.run(&["enqueue", task_type, "--payload", payload])
                .await
                .unwrap()
        }
    };

    let cases: [(&str, &str, &[&str]); 6] = [
        (
            "exec",
            "{}",
            &["payload_json", "exec", "missing field `argv`"],
        ),
        (
            "exec",
            r#"{"argv":"ls"}"#,
            &[
                "payload_json",
                "invalid type: string \"ls\", expected a sequence",
            ],
        ),
        (
            "noop",
            "[1,2]",
            &["payload_json", "noop", "invalid length 2"],
        ),
        ("noop", r#"{"ms":1}"#, &["unknown field `ms`"]),
        // The agent's own handler: its payload type and its validate.
        (
            "sleep",
            r#"{"ms":"soon"}"#,
            &["sleep", "invalid type: string \"soon\""],
        ),
        (
            "fail",
            r#"{"code":""}"#,
            &["fail", "code must be 1 to 64 bytes"],
        ),
    ];
    for (task_type, payload, wants) in cases {
        let o = enqueue(task_type, payload).await;
        refused(&o, wants);
    }
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM tasks").await.unwrap(),
        0,
        "nothing saved"
    );

    // Good payloads, and a type this agent does not run (whatever its payload), are accepted.
    for (task_type, payload) in [
        ("exec", r#"{"argv":["/usr/bin/env"]}"#),
        ("noop", "{}"),
        ("sleep", r#"{"ms":1}"#),
        ("report.build", "[1,2]"),
    ] {
        let o = enqueue(task_type, payload).await;
        assert_eq!(o.code, Some(0), "{}", o.describe());
    }
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM tasks").await.unwrap(),
        4
    );

    // AddSchedule checks the same way; nothing is saved.
    let o = cli
        .run(&[
            "schedules",
            "add",
            "bad-sleep",
            "--cron",
            "0 0 * * * *",
            "--type",
            "sleep",
            "--payload",
            "{}",
        ])
        .await
        .unwrap();
    refused(&o, &["payload_json", "sleep", "missing field `ms`"]);
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM schedules")
            .await
            .unwrap(),
        0
    );

    let failed: Vec<(String, String)> = audit_rows(&db.pool)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.4 == "failed")
        .map(|r| (r.2, r.3))
        .collect();
    let want: Vec<(String, String)> = [
        ("enqueue", "type:exec"),
        ("enqueue", "type:exec"),
        ("enqueue", "type:noop"),
        ("enqueue", "type:noop"),
        ("enqueue", "type:sleep"),
        ("enqueue", "type:fail"),
        ("schedule_add", "schedule:bad-sleep"),
    ]
    .iter()
    .map(|(a, t)| (a.to_string(), t.to_string()))
    .collect();
    assert_eq!(failed, want);
    db.drop_db().await.unwrap();
}
