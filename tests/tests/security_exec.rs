#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `exec` on a shared host (issue 19): a real `leasehold-agent` process with the database URL
//! and a secret in its environment, real tasks through the `leasehold` CLI and through plain
//! SQL INSERTs behind the agent's back.
//!
//! - The child's environment is cleared: none of the agent's `LEASEHOLD_*` variables (nor
//!   `DATABASE_URL`) reach it, only the `exec_env` passthrough, the payload's `env` and the
//!   task's own `LEASEHOLD_TASK_ID`, `_ATTEMPT`, `_EPOCH`, `_IDEMPOTENCY_KEY`, `_TASK_TYPE`,
//!   which match the task row.
//! - A payload that sets `LD_PRELOAD`, names a program outside `exec_allow` or a `cwd` outside
//!   `exec_root` is refused at enqueue (exit 2) and nothing is written; inserted by SQL instead,
//!   it is dead-lettered `not_allowed` without running (a marker file it would create stays
//!   absent).
//! - `--handlers exec` without an allow list exits 2 and says what to give.
//! - A program cannot read its agent's environment or memory through `/proc/$PPID` (the agent
//!   makes itself non-dumpable): shown with an agent running as `nobody`, since root reads
//!   any process's `/proc` files. Its own `/proc/$$/environ` and the agent's `cmdline` (which
//!   the kernel shows every user) stay readable.
//!
//! Every agent here gets `LEASEHOLD_EXEC_ALLOW` explicitly (the harness default is `*`).

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use leasehold_tests::cli::{Cli, CliOutput};
use leasehold_tests::fleet::fast_args;
use leasehold_tests::grpc::agent_address;
use leasehold_tests::scratch::scratch_dir;
use leasehold_tests::{
    AgentHandle, TaskSpec, TestDb, binary, count, insert_task, task_row, task_status, wait_until,
};
use serde_json::{Value, json};

/// Generous: the machines are shared and noisy.
const WAIT: Duration = Duration::from_secs(60);
/// The one program the agents under test allow.
const ENV_PROGRAM: &str = "/usr/bin/env";
/// A secret in the agent's environment that no program may see.
const SECRET: &str = "s3cret-value-never-shown";
/// The uid and gid of `nobody`, the agent's user in the `/proc` test.
const NOBODY: u32 = 65534;
/// A database password (PostgreSQL under test trusts loopback and ignores it).
const DB_PASSWORD: &str = "pg-passw0rd-never-shown";

/// Starts `leasehold-agent run --handlers exec` with the database URL only in its environment
/// (`LEASEHOLD_DATABASE_URL`) and `envs` added; waits until it serves gRPC; returns it and a
/// CLI aimed at it.
async fn start(db: &TestDb, name: &str, envs: &[(&str, &str)]) -> (AgentHandle, Cli) {
    let mut args: Vec<String> = ["run", "--id", name, "--handlers", "exec"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(fast_args());
    let mut env: Vec<(String, String)> = vec![
        ("LEASEHOLD_DATABASE_URL".into(), db.url.clone()),
        ("DATABASE_URL".into(), db.url.clone()),
        ("LEASEHOLD_SECRET_X".into(), SECRET.into()),
        ("RUST_LOG".into(), "info,sqlx=warn".into()),
    ];
    env.extend(envs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let agent = AgentHandle::spawn(&binary("leasehold-agent").await.unwrap(), args, env).unwrap();
    agent.wait_registered(&db.pool, name, WAIT).await.unwrap();
    let addr = agent_address(&db.pool, name, WAIT).await.unwrap();
    (agent, Cli::new(&addr).await.unwrap())
}

async fn enqueue(cli: &Cli, payload: &Value) -> CliOutput {
    cli.run(&[
        "--output",
        "json",
        "enqueue",
        "exec",
        "--payload",
        &payload.to_string(),
    ])
    .await
    .unwrap()
}

async fn wait_status(db: &TestDb, id: i64, want: &str) -> Value {
    wait_until(&format!("task {id} is {want}"), WAIT, || {
        let pool = db.pool.clone();
        let want = want.to_string();
        async move { Ok(task_status(&pool, id).await? == want) }
    })
    .await
    .unwrap();
    task_row(&db.pool, id).await.unwrap()
}

async fn exec_tasks(db: &TestDb) -> i64 {
    count(
        &db.pool,
        "SELECT count(*) FROM tasks WHERE task_type = 'exec'",
    )
    .await
    .unwrap()
}

/// Exit 2, nothing enqueued, and the error names `want`.
async fn refused_at_enqueue(db: &TestDb, cli: &Cli, payload: Value, want: &str) {
    let before = exec_tasks(db).await;
    let o = enqueue(cli, &payload).await;
    assert_eq!(o.code, Some(2), "{payload}: {}", o.describe());
    assert!(o.stderr.contains(want), "{payload}: {}", o.describe());
    assert_eq!(
        exec_tasks(db).await,
        before,
        "{payload}: a task was written"
    );
}

/// Inserts an `exec` task by SQL, as anyone with INSERT rights could.
async fn insert_behind_the_back(db: &TestDb, payload: Value) -> i64 {
    insert_task(&db.pool, TaskSpec::new("exec", "queued").payload(payload))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_child_sees_no_agent_secrets_only_passthrough_payload_and_its_task() {
    let db = TestDb::new().await.unwrap();
    let (_agent, cli) = start(
        &db,
        "exec-env",
        &[
            ("LEASEHOLD_EXEC_ALLOW", ENV_PROGRAM),
            ("LEASEHOLD_EXEC_ENV", "PATH,EXEC_TEST_PASSED"),
            ("EXEC_TEST_PASSED", "passed-through"),
            ("EXEC_TEST_HIDDEN", "not-listed"),
            ("LD_LIBRARY_PATH", "/nowhere"),
        ],
    )
    .await;
    let o = enqueue(
        &cli,
        &json!({"argv": ["env"], "env": {"FROM_PAYLOAD": "yes"}}),
    )
    .await;
    assert_eq!(o.code, Some(0), "{}", o.describe());
    let id = o.json().unwrap()["id"].as_i64().unwrap();
    let row = wait_status(&db, id, "succeeded").await;
    let stdout = row["result"]["stdout_tail"].as_str().unwrap();
    let env: BTreeMap<&str, &str> = stdout.lines().filter_map(|l| l.split_once('=')).collect();

    let task_vars = [
        "LEASEHOLD_TASK_ID",
        "LEASEHOLD_ATTEMPT",
        "LEASEHOLD_EPOCH",
        "LEASEHOLD_IDEMPOTENCY_KEY",
        "LEASEHOLD_TASK_TYPE",
    ];
    for name in env.keys() {
        assert!(
            !name.starts_with("LEASEHOLD_") || task_vars.contains(name),
            "{name} reached the child:\n{stdout}"
        );
    }
    assert!(!stdout.contains(SECRET), "{stdout}");
    assert!(
        !stdout.contains(&db.url),
        "the database URL leaked:\n{stdout}"
    );
    for hidden in [
        "DATABASE_URL",
        "EXEC_TEST_HIDDEN",
        "LD_LIBRARY_PATH",
        "HOME",
    ] {
        assert!(
            !env.contains_key(hidden),
            "{hidden} reached the child:\n{stdout}"
        );
    }
    assert_eq!(env["EXEC_TEST_PASSED"], "passed-through", "{stdout}");
    assert_eq!(env["FROM_PAYLOAD"], "yes", "{stdout}");
    assert!(env.contains_key("PATH"), "{stdout}");

    let epoch = row["lease_epoch"].as_i64().unwrap();
    assert_eq!(env["LEASEHOLD_TASK_ID"], id.to_string(), "{stdout}");
    assert_eq!(env["LEASEHOLD_EPOCH"], epoch.to_string(), "{stdout}");
    assert_eq!(env["LEASEHOLD_ATTEMPT"], "1", "{stdout}");
    assert_eq!(
        env["LEASEHOLD_IDEMPOTENCY_KEY"],
        format!("{id}:{epoch}"),
        "{stdout}"
    );
    assert_eq!(env["LEASEHOLD_TASK_TYPE"], "exec", "{stdout}");
    db.drop_db().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_payloads_are_refused_at_enqueue_and_dead_lettered_when_inserted() {
    let db = TestDb::new().await.unwrap();
    let root = scratch_dir("leasehold-exec-root").unwrap();
    let elsewhere = scratch_dir("leasehold-exec-elsewhere").unwrap();
    std::os::unix::fs::symlink(&elsewhere, root.join("escape")).unwrap();
    let marker = elsewhere.join("ran");
    let (mut agent, cli) = start(
        &db,
        "exec-refuse",
        &[
            ("LEASEHOLD_EXEC_ALLOW", ENV_PROGRAM),
            ("LEASEHOLD_EXEC_ROOT", root.to_str().unwrap()),
        ],
    )
    .await;
    let touch = json!({"argv": ["/bin/sh", "-c", format!("touch {}", marker.display())]});

    // Refused at enqueue, whatever this agent allows.
    refused_at_enqueue(
        &db,
        &cli,
        json!({"argv": ["env"], "env": {"LD_PRELOAD": "/tmp/evil.so"}}),
        "LD_PRELOAD",
    )
    .await;
    refused_at_enqueue(
        &db,
        &cli,
        json!({"argv": ["env"], "env": {"LEASEHOLD_DATABASE_URL": "x"}}),
        "LEASEHOLD_DATABASE_URL",
    )
    .await;
    refused_at_enqueue(
        &db,
        &cli,
        json!({"argv": ["env"], "cwd": "tmp"}),
        "absolute",
    )
    .await;
    // Refused by this agent's allow list and root.
    refused_at_enqueue(&db, &cli, touch.clone(), "exec_allow").await;
    refused_at_enqueue(&db, &cli, json!({"argv": ["sh", "-c", "id"]}), "exec_allow").await;
    refused_at_enqueue(&db, &cli, json!({"argv": ["env"], "cwd": "/"}), "exec_root").await;
    let up = format!("{}/..", root.display());
    refused_at_enqueue(&db, &cli, json!({"argv": ["env"], "cwd": up}), "exec_root").await;

    // Behind the agent's back: dead-lettered with the reason, the program never runs.
    let escape = format!("{}/escape", root.display());
    let cases = [
        (touch.clone(), "not_allowed", "exec_allow"),
        (
            json!({"argv": [ENV_PROGRAM], "cwd": escape}),
            "not_allowed",
            "exec_root",
        ),
        (
            json!({"argv": [ENV_PROGRAM], "env": {"LD_PRELOAD": "/tmp/evil.so"}}),
            "bad_payload",
            "LD_PRELOAD",
        ),
    ];
    for (payload, code, says) in cases {
        let id = insert_behind_the_back(&db, payload.clone()).await;
        let row = wait_status(&db, id, "dead").await;
        assert_eq!(row["last_error"]["code"], code, "{payload}: {row}");
        assert_eq!(row["last_error"]["retryable"], false, "{row}");
        let message = row["last_error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{payload}: {message}");
    }
    assert!(!marker.exists(), "a refused program ran");

    // What is allowed runs, in the root by default.
    let o = enqueue(&cli, &json!({"argv": [ENV_PROGRAM]})).await;
    assert_eq!(o.code, Some(0), "{}", o.describe());
    let id = o.json().unwrap()["id"].as_i64().unwrap();
    wait_status(&db, id, "succeeded").await;
    let inside = root.join("job");
    std::fs::create_dir(&inside).unwrap();
    let id = insert_behind_the_back(&db, json!({"argv": ["env"], "cwd": inside})).await;
    wait_status(&db, id, "succeeded").await;
    assert!(agent.is_running());
    db.drop_db().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_without_an_allow_list_does_not_start() {
    let bin = binary("leasehold-agent").await.unwrap();
    let dir = scratch_dir("leasehold-exec-allow").unwrap();
    let url = format!("sqlite://{}/q.sqlite", dir.display());
    let spawn = |allow: &str, handlers: &str| {
        // The harness would add LEASEHOLD_EXEC_ALLOW=*: an empty value means "no list".
        let env = vec![
            ("LEASEHOLD_DATABASE_URL".to_string(), url.clone()),
            ("LEASEHOLD_EXEC_ALLOW".to_string(), allow.to_string()),
        ];
        let args: Vec<String> = ["run", "--handlers", handlers, "--listen", "off"]
            .iter()
            .chain(&["--exit-when-idle", "--unserved-after", "off"])
            .map(|s| s.to_string())
            .collect();
        AgentHandle::spawn(&bin, args, env).unwrap()
    };
    for (allow, handlers) in [("", "exec"), (" , ", "sleep,exec")] {
        let mut agent = spawn(allow, handlers);
        let status = agent.wait_exit(Duration::from_secs(30)).await.unwrap();
        let stderr = agent.stderr_text().unwrap();
        assert_eq!(status.code(), Some(2), "{allow:?}: {stderr}");
        assert!(stderr.contains("exec_allow"), "{stderr}");
        assert!(
            stderr.contains("--exec-allow '/usr/local/bin/*'"),
            "{stderr}"
        );
        assert!(stderr.contains("--exec-allow '*'"), "{stderr}");
        assert!(
            !dir.join("q.sqlite").exists(),
            "refused before opening the database"
        );
    }
    // With a list (or without exec) the same agent starts, finds nothing to do and exits 0.
    for (allow, handlers) in [(ENV_PROGRAM, "exec"), ("", "sleep")] {
        let mut agent = spawn(allow, handlers);
        let status = agent.wait_exit(Duration::from_secs(60)).await.unwrap();
        let stderr = agent.stderr_text().unwrap();
        assert_eq!(status.code(), Some(0), "{allow:?} {handlers}: {stderr}");
    }
}

/// `url` with [`DB_PASSWORD`] as its password, unless it has one already.
fn with_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    match rest.split_once('@') {
        Some((user, host)) if !user.contains(':') => {
            format!("{scheme}://{user}:{DB_PASSWORD}@{host}")
        }
        _ => url.to_string(),
    }
}

/// A directory `nobody` may enter and read (not write).
fn open_dir(dir: &Path) {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The `Uid:` line of `/proc/<pid>/status`: real, effective, saved and filesystem uid.
fn proc_uids(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line["Uid:".len()..]
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// What the program of the `/proc` test reports: who it and its parent are, whether it could
/// read the parent's `environ` and open its `mem`, the parent's `cmdline`, its own `environ`.
const PROC_PROBE: &str = r#"echo "ppid=$PPID uid=$(id -u)"
if cat /proc/$PPID/environ; then echo; echo environ=read; else echo environ=denied; fi
if (: < /proc/$PPID/mem) 2>/dev/null; then echo mem=open; else echo mem=denied; fi
printf 'cmdline='; tr '\0' ' ' < /proc/$PPID/cmdline; echo
echo own-environ:; tr '\0' '\n' < /proc/$$/environ"#;

/// An agent running as `nobody` with secrets in its environment: its `exec` program, also
/// `nobody`, cannot read the agent's `/proc/<pid>/environ` nor open its `mem` (the agent is
/// non-dumpable), yet reads its own `environ` (positive control: the same read works on a
/// process it may read) and the agent's `cmdline` (visible to every user whatever the agent
/// does: hence secrets go in the environment or a file, never in flags).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_child_cannot_read_its_agents_environment_or_memory_through_proc() {
    let db = TestDb::new().await.unwrap();
    let url = with_password(&db.url);
    let dir = scratch_dir("leasehold-exec-proc").unwrap();
    open_dir(&dir);
    // The target directory may lie where `nobody` cannot go: run a copy.
    let bin = dir.join("leasehold-agent");
    std::fs::copy(binary("leasehold-agent").await.unwrap(), &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    // The socket directory must be the agent's own (0700, owned by its uid).
    let runtime = dir.join("run");
    std::fs::create_dir(&runtime).unwrap();
    std::os::unix::fs::chown(&runtime, Some(NOBODY), Some(NOBODY)).unwrap();
    std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
    // A tail long enough to hold the agent's whole environment, were it ever read.
    let config = dir.join("agent.toml");
    std::fs::write(&config, "[exec]\noutput_tail = 1048576\n").unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();

    let name = "exec-proc";
    let mut args: Vec<String> = [
        format!("--reuid={NOBODY}").as_str(),
        format!("--regid={NOBODY}").as_str(),
        "--clear-groups",
        "--",
        bin.to_str().unwrap(),
        "run",
        "--config",
        config.to_str().unwrap(),
        "--id",
        name,
        "--handlers",
        "exec",
        "--exec-allow",
        "/bin/sh,/usr/bin/sh",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(fast_args());
    let env: Vec<(String, String)> = [
        ("LEASEHOLD_DATABASE_URL", url.as_str()),
        ("DATABASE_URL", url.as_str()),
        ("LEASEHOLD_TEST_SECRET", SECRET),
        ("LEASEHOLD_RUNTIME_DIR", runtime.to_str().unwrap()),
        ("PATH", "/usr/local/bin:/usr/bin:/bin"),
        ("HOME", "/"),
        ("RUST_LOG", "info,sqlx=warn"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    // setpriv execs the agent: the handle's pid is the agent's.
    let agent = AgentHandle::spawn(Path::new("/usr/bin/setpriv"), args, env).unwrap();
    agent.wait_registered(&db.pool, name, WAIT).await.unwrap();
    let pid = agent.pid();
    assert_eq!(
        proc_uids(pid),
        format!("{NOBODY} {NOBODY} {NOBODY} {NOBODY}"),
        "the agent runs as nobody"
    );

    let id = insert_task(
        &db.pool,
        TaskSpec::new("exec", "queued").payload(json!({"argv": ["/bin/sh", "-c", PROC_PROBE]})),
    )
    .await
    .unwrap();
    let row = wait_status(&db, id, "succeeded").await;
    let stdout = row["result"]["stdout_tail"].as_str().unwrap();
    let stderr = row["result"]["stderr_tail"].as_str().unwrap();
    let output = format!("stdout:\n{stdout}\nstderr:\n{stderr}");

    // The program is nobody too, and the agent is its parent.
    assert!(
        stdout.contains(&format!("ppid={pid} uid={NOBODY}\n")),
        "{output}"
    );
    // Nothing of the agent's environment.
    for secret in [SECRET, DB_PASSWORD, url.as_str(), db.url.as_str()] {
        assert!(!output.contains(secret), "{secret:?} leaked:\n{output}");
    }
    assert!(stdout.contains("environ=denied\n"), "{output}");
    assert!(
        stderr.contains(&format!("/proc/{pid}/environ: Permission denied")),
        "{output}"
    );
    // Nor its memory: opening mem takes the right to ptrace the agent.
    assert!(stdout.contains("mem=denied\n"), "{output}");
    // Positive control: the same kind of read of a process it may read (itself) works.
    let own: BTreeMap<&str, &str> = stdout
        .split_once("own-environ:\n")
        .unwrap()
        .1
        .lines()
        .filter_map(|l| l.split_once('='))
        .collect();
    assert_eq!(
        own.get("LEASEHOLD_TASK_ID"),
        Some(&id.to_string().as_str()),
        "{output}"
    );
    // The agent's command line stays readable by every user, non-dumpable or not.
    assert!(
        stdout.contains(&format!("cmdline={} run --config", bin.display())),
        "{output}"
    );
    // The mechanism, seen by root: a non-dumpable process's /proc files belong to root.
    let environ = std::fs::metadata(format!("/proc/{pid}/environ")).unwrap();
    assert_eq!(
        environ.uid(),
        0,
        "the agent's /proc/{pid}/environ should belong to root (non-dumpable)"
    );
    assert!(!agent.stderr_text().unwrap().contains("PR_SET_DUMPABLE"));
    drop(agent);
    db.drop_db().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
