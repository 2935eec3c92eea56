#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `leasehold schedules …` end to end (issue 7): the real `leasehold` binary against a real
//! agent and database — add (with a warning for a type no live agent handles), bad input of
//! every kind refused with exit 2 and nothing saved, ls, trigger, disable/enable, the leader
//! firing the schedule, rm, the leader in `agents ls`, and the audit rows of it all; a
//! schedule without `--max-attempts` inherits the type's policy (shown in `ls`, taken by its
//! tasks at each firing), one with it keeps its own.

use std::time::Duration;

use leasehold_tests::cli::{Cli, CliOutput};
use leasehold_tests::fleet::spawn_agent;
use leasehold_tests::grpc::agent_address;
use leasehold_tests::{TestDb, count, wait_until};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

fn ok(o: &CliOutput) {
    assert_eq!(o.code, Some(0), "{}", o.describe());
}

fn usage(o: &CliOutput, needle: &str) {
    assert_eq!(o.code, Some(2), "{}", o.describe());
    assert!(
        o.stderr.contains(needle),
        "stderr should name {needle:?}: {}",
        o.describe()
    );
}

async fn schedules(db: &TestDb) -> i64 {
    count(&db.pool, "SELECT count(*) FROM schedules")
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_add_trigger_and_the_rest_through_the_cli() {
    let db = TestDb::new().await.unwrap();
    let agent = spawn_agent(
        "leasehold-agent",
        &db.url,
        "cli-sched",
        "noop",
        &[],
        Vec::new(),
    )
    .await
    .unwrap();
    let id = agent
        .wait_registered(&db.pool, "cli-sched", WAIT)
        .await
        .unwrap();
    let addr = agent_address(&db.pool, "cli-sched", WAIT).await.unwrap();
    let cli = Cli::new(&addr).await.unwrap();

    // Add one the agent serves, every two seconds.
    let added = cli
        .run(&[
            "schedules",
            "add",
            "tick",
            "--cron",
            "*/2 * * * * *",
            "--type",
            "noop",
            "--output",
            "json",
        ])
        .await
        .unwrap();
    ok(&added);
    let json = added.json().unwrap();
    assert_eq!(json["outcome"], "created", "{json}");
    assert_eq!(json["schedule"]["cron"], "*/2 * * * * *");
    assert!(json["schedule"]["next_fire_at_ms"].as_i64().unwrap() > 0);
    assert_eq!(json["warnings"], json!([]));

    // One no live agent serves: saved, with a warning.
    let nightly = cli
        .run(&[
            "schedules",
            "add",
            "nightly",
            "--cron",
            "0 30 2 * * *",
            "--type",
            "report.build",
            "--tz",
            "Europe/Berlin",
            "--missed",
            "catch_up",
            "--catch-up-max",
            "3",
            "--payload",
            r#"{"region": "eu"}"#,
            "--priority",
            "5",
        ])
        .await
        .unwrap();
    ok(&nightly);
    assert!(
        nightly.stdout.contains("created schedule nightly"),
        "{}",
        nightly.describe()
    );
    assert!(
        nightly.stderr.contains("warning") && nightly.stderr.contains("report.build"),
        "{}",
        nightly.describe()
    );
    assert_eq!(schedules(&db).await, 2);

    // Bad input: a clear error, exit 2, nothing saved.
    let bad: [(&[&str], &str); 6] = [
        (&["--cron", "61 * * * * *", "--type", "noop"], "cron"),
        (&["--cron", "* * * * *", "--type", "noop"], "cron"),
        (
            &[
                "--cron",
                "* * * * * *",
                "--type",
                "noop",
                "--tz",
                "Mars/Olympus",
            ],
            "Mars/Olympus",
        ),
        (&["--cron", "* * * * * *", "--type", "Not A Type"], "type"),
        (
            &[
                "--cron",
                "* * * * * *",
                "--type",
                "noop",
                "--payload",
                "{oops",
            ],
            "payload",
        ),
        (
            &[
                "--cron",
                "* * * * * *",
                "--type",
                "noop",
                "--missed",
                "sometimes",
            ],
            "missed",
        ),
    ];
    for (flags, needle) in bad {
        let mut args = vec!["schedules", "add", "broken"];
        args.extend_from_slice(flags);
        let out = cli.run(&args).await.unwrap();
        usage(&out, needle);
    }
    let taken = cli
        .run(&[
            "schedules",
            "add",
            "tick",
            "--cron",
            "* * * * * *",
            "--type",
            "noop",
        ])
        .await
        .unwrap();
    usage(&taken, "--replace");
    assert_eq!(schedules(&db).await, 2, "nothing saved by bad input");
    let cron: String = sqlx::query_scalar("SELECT cron FROM schedules WHERE name = 'tick'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(cron, "*/2 * * * * *", "the refused add changed nothing");

    // nightly has no max attempts of its own: its tasks take report.build's policy.
    ok(&cli
        .run(&["policy", "set", "report.build", "--max-attempts", "6"])
        .await
        .unwrap());

    // ls, as a table within 80 columns and as JSON.
    let table = cli.run(&["schedules", "ls"]).await.unwrap();
    ok(&table);
    assert!(
        table.lines().iter().all(|l| l.chars().count() <= 80),
        "{}",
        table.stdout
    );
    assert!(table.stdout.contains("nightly") && table.stdout.contains("tick"));
    let listed = cli
        .run(&["schedules", "ls", "--output", "json"])
        .await
        .unwrap();
    ok(&listed);
    let listed = listed.json().unwrap();
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["nightly", "tick"]);
    assert_eq!(listed[0]["time_zone"], "Europe/Berlin");
    assert_eq!(listed[0]["missed"], "catch_up");
    assert_eq!(listed[0]["catch_up_max"], 3);
    assert_eq!(listed[0]["max_attempts"], Value::Null, "inherited");
    assert_eq!(
        listed[0]["max_attempts_in_force"], 6,
        "report.build's policy"
    );
    assert_eq!(listed[1]["max_attempts"], Value::Null);
    assert_eq!(listed[1]["max_attempts_in_force"], 25, "noop has no policy");

    // Trigger: one task now, outside the cron, with the schedule's fields.
    let fired = cli
        .run(&["schedules", "trigger", "nightly", "--output", "json"])
        .await
        .unwrap();
    ok(&fired);
    let fired = fired.json().unwrap();
    let task_id = fired["task_id"].as_i64().unwrap();
    let key = fired["idempotency_key"].as_str().unwrap().to_string();
    assert!(key.starts_with("schedule:nightly:manual:"), "{key}");
    let task_of = |id: i64| {
        sqlx::query_as::<_, (String, Value, i16, String, i32)>(
            "SELECT task_type, payload, priority, idempotency_key, max_attempts \
             FROM tasks WHERE id = $1",
        )
        .bind(id)
        .fetch_one(&db.pool)
    };
    let (task_type, payload, priority, stored_key, attempts) = task_of(task_id).await.unwrap();
    assert_eq!(
        (task_type.as_str(), payload, priority, stored_key.as_str()),
        ("report.build", json!({"region": "eu"}), 5, key.as_str())
    );
    assert_eq!(attempts, 6, "the type's policy at the firing");

    // Its own max attempts, then back to inheriting by replacing it without them.
    let nightly_with = |extra: &[&'static str]| {
        let mut args = vec![
            "schedules",
            "add",
            "nightly",
            "--cron",
            "0 30 2 * * *",
            "--type",
            "report.build",
            "--tz",
            "Europe/Berlin",
            "--missed",
            "catch_up",
            "--catch-up-max",
            "3",
            "--payload",
            r#"{"region": "eu"}"#,
            "--priority",
            "5",
            "--replace",
            "--output",
            "json",
        ];
        args.extend_from_slice(extra);
        args
    };
    let own = cli
        .run(&nightly_with(&["--max-attempts", "2"]))
        .await
        .unwrap();
    ok(&own);
    let own = own.json().unwrap();
    assert_eq!(own["outcome"], "replaced", "{own}");
    assert_eq!(own["schedule"]["max_attempts"], 2);
    assert_eq!(own["schedule"]["max_attempts_in_force"], 2);
    let fired = cli
        .run(&["schedules", "trigger", "nightly", "--output", "json"])
        .await
        .unwrap();
    ok(&fired);
    let fired_id = fired.json().unwrap()["task_id"].as_i64().unwrap();
    assert_eq!(task_of(fired_id).await.unwrap().4, 2, "its own");
    let inherits = cli.run(&nightly_with(&[])).await.unwrap();
    ok(&inherits);
    let inherits = inherits.json().unwrap();
    assert_eq!(
        inherits["schedule"]["max_attempts"],
        Value::Null,
        "{inherits}"
    );
    assert_eq!(inherits["schedule"]["max_attempts_in_force"], 6);
    let column: Option<i32> =
        sqlx::query_scalar("SELECT max_attempts FROM schedules WHERE name = 'nightly'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(column, None);
    let missing = cli.run(&["schedules", "trigger", "nope"]).await.unwrap();
    usage(&missing, "nope");

    // The leader fires `tick` by itself; disabled, it stops.
    wait_until("the leader fired tick", WAIT, || {
        let pool = db.pool.clone();
        async move {
            Ok(count(
                &pool,
                "SELECT count(*) FROM tasks WHERE idempotency_key LIKE 'schedule:tick:20%' \
                 AND status = 'succeeded'",
            )
            .await?
                >= 2)
        }
    })
    .await
    .unwrap();
    let off = cli.run(&["schedules", "disable", "tick"]).await.unwrap();
    ok(&off);
    assert!(
        off.stdout.contains("disabled schedule tick"),
        "{}",
        off.describe()
    );
    let enabled: bool = sqlx::query_scalar("SELECT enabled FROM schedules WHERE name = 'tick'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(!enabled);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = count(&db.pool, "SELECT count(*) FROM tasks").await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM tasks").await.unwrap(),
        before,
        "a disabled schedule does not fire"
    );
    let again = cli.run(&["schedules", "disable", "tick"]).await.unwrap();
    ok(&again);
    assert!(
        again.stdout.contains("already disabled"),
        "{}",
        again.describe()
    );
    ok(&cli.run(&["schedules", "enable", "tick"]).await.unwrap());

    // The leader shows in agents ls.
    let agents = cli
        .run(&["agents", "ls", "--output", "json"])
        .await
        .unwrap();
    ok(&agents);
    let agents = agents.json().unwrap();
    assert_eq!(agents["leader"]["owner"], id.as_str(), "{agents}");
    assert!(agents["leader"]["term"].as_i64().unwrap() >= 1);
    let table = cli.run(&["agents", "ls"]).await.unwrap();
    assert!(
        table.stdout.contains(&format!("leader {id}")),
        "{}",
        table.stdout
    );

    // rm, then rm again.
    ok(&cli.run(&["schedules", "rm", "nightly"]).await.unwrap());
    usage(
        &cli.run(&["schedules", "rm", "nightly"]).await.unwrap(),
        "nightly",
    );
    assert_eq!(schedules(&db).await, 1);

    // Every action is in the audit log, as the open operator.
    let audit: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT action, target, result FROM audit_log WHERE target LIKE 'schedule:%' ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let has = |action: &str, target: &str, result: &str| {
        audit
            .iter()
            .any(|(a, t, r)| a == action && t == target && r == result)
    };
    assert!(has("schedule_add", "schedule:tick", "applied"), "{audit:?}");
    assert!(
        has("schedule_add", "schedule:nightly", "applied"),
        "{audit:?}"
    );
    assert!(has("schedule_add", "schedule:tick", "failed"), "{audit:?}");
    assert!(
        has("schedule_trigger", "schedule:nightly", "applied"),
        "{audit:?}"
    );
    assert!(
        has("schedule_disable", "schedule:tick", "applied"),
        "{audit:?}"
    );
    assert!(
        has("schedule_disable", "schedule:tick", "noop"),
        "{audit:?}"
    );
    assert!(
        has("schedule_enable", "schedule:tick", "applied"),
        "{audit:?}"
    );
    assert!(
        has("schedule_remove", "schedule:nightly", "applied"),
        "{audit:?}"
    );
    assert!(
        !audit.iter().any(|(_, t, _)| t == "schedule:broken"),
        "input refused by validation writes nothing: {audit:?}"
    );
    drop(agent);
    db.drop_db().await.unwrap();
}
