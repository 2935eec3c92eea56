#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Several agent processes on one SQLite file (DESIGN §11): the embedded store serialises their
//! writes on the file's lock and every task still runs exactly once.

use std::collections::HashMap;
use std::time::Duration;

use leasehold_shared::store::sqlite::{SqliteStore, SqliteStoreOptions};
use leasehold_shared::store::{NewTask, TaskListParams};
use leasehold_shared::{AttemptOutcome, Store, TaskStatus, TaskType};
use leasehold_tests::fleet::spawn_agent;
use leasehold_tests::scratch_dir;
use serde_json::{Value, json};

const TASKS: usize = 2_000;

fn summary(stdout: &str) -> Value {
    let line = stdout.lines().last().expect("a summary line");
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_agent_processes_on_one_file_run_every_task_exactly_once() {
    let dir = scratch_dir("leasehold-two-agents").unwrap();
    let url = format!("sqlite://{}", dir.join("queue.sqlite").display());
    let store = SqliteStore::connect(&url, SqliteStoreOptions::default())
        .await
        .unwrap();
    store.migrate().await.unwrap();
    // 20 ms each at concurrency 10: one agent alone would need about 4 s, so both take part.
    let sleep = TaskType::new("sleep").unwrap();
    for chunk in 0..(TASKS / 500) {
        let batch = (0..500)
            .map(|i| {
                NewTask::new(sleep.clone(), json!({"ms": 20}))
                    .with_idempotency_key(format!("two-agents-{}", chunk * 500 + i))
            })
            .collect();
        store.task_enqueue_many(batch).await.unwrap();
    }

    let flags = [
        "--exit-when-idle",
        "--output",
        "json",
        "--concurrency",
        "10",
    ];
    let mut a = spawn_agent(
        "leasehold-agent",
        &url,
        "file-a",
        "sleep",
        &flags,
        Vec::new(),
    )
    .await
    .unwrap();
    let mut b = spawn_agent(
        "leasehold-agent",
        &url,
        "file-b",
        "sleep",
        &flags,
        Vec::new(),
    )
    .await
    .unwrap();
    let status_a = a.wait_exit(Duration::from_secs(120)).await.unwrap();
    let status_b = b.wait_exit(Duration::from_secs(120)).await.unwrap();
    let (out_a, out_b) = (a.stdout_text().unwrap(), b.stdout_text().unwrap());
    assert_eq!(status_a.code(), Some(0), "{out_a}\n{}", a.log_tail(40));
    assert_eq!(status_b.code(), Some(0), "{out_b}\n{}", b.log_tail(40));
    let (sa, sb) = (summary(&out_a), summary(&out_b));
    assert_eq!(sa["ended_by"], "idle", "{sa}");
    assert_eq!(sb["ended_by"], "idle", "{sb}");
    let claimed = |s: &Value| s["claimed"].as_u64().unwrap();
    let succeeded = |s: &Value| s["succeeded"].as_u64().unwrap();
    assert!(
        claimed(&sa) > 0 && claimed(&sb) > 0,
        "both agents took work: {sa} {sb}"
    );
    assert_eq!(
        claimed(&sa) + claimed(&sb),
        TASKS as u64,
        "no task was claimed twice: {sa} {sb}"
    );
    assert_eq!(succeeded(&sa) + succeeded(&sb), TASKS as u64, "{sa} {sb}");

    // The file says the same: each task succeeded on its first and only holding, by one of
    // the two agents, with one attempt row.
    let mut by_agent: HashMap<String, usize> = HashMap::new();
    let mut before = None;
    let mut seen = 0;
    loop {
        let page = store
            .task_list(TaskListParams {
                before,
                limit: 500,
                ..TaskListParams::default()
            })
            .await
            .unwrap();
        for task in &page.tasks {
            assert_eq!(task.status, TaskStatus::Succeeded, "{task:?}");
            assert_eq!((task.attempt, task.lease_epoch.0), (1, 1), "{task:?}");
            let detail = store.task_get(task.id).await.unwrap().unwrap();
            assert_eq!(detail.attempts.len(), 1, "{:?}", detail.attempts);
            assert_eq!(detail.attempts[0].outcome, AttemptOutcome::Succeeded);
            let owner = task.lease_owner.as_ref().unwrap().as_str().to_string();
            assert_eq!(owner, detail.attempts[0].agent.as_str());
            *by_agent.entry(owner).or_default() += 1;
            seen += 1;
        }
        match page.next_before {
            Some(next) => before = Some(next),
            None => break,
        }
    }
    assert_eq!(seen, TASKS);
    assert_eq!(by_agent.len(), 2, "{by_agent:?}");
    for (agent, n) in &by_agent {
        let s = if agent.starts_with("file-a#") {
            &sa
        } else {
            &sb
        };
        assert_eq!(*n as u64, succeeded(s), "{agent}: {by_agent:?} vs {s}");
    }
    let agents = store.agent_list().await.unwrap();
    assert!(
        agents
            .iter()
            .all(|a| a.state == leasehold_shared::domain::AgentState::Stopped),
        "{agents:?}"
    );
    store.close().await;
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A SQLite URL that names no usable file is refused with a clear error and changes nothing:
/// exit 2 for a URL that names no file, exit 3 for a file that cannot be opened or is not a
/// database (which is left byte for byte as it was).
#[tokio::test]
async fn sqlite_urls_that_name_no_usable_file_are_refused_clearly() {
    let dir = scratch_dir("leasehold-bad-sqlite").unwrap();
    let not_a_db = dir.join("notes.txt");
    std::fs::write(&not_a_db, "not a database\n").unwrap();
    let bin = leasehold_tests::binary("leasehold-agent").await.unwrap();
    let cases = [
        ("sqlite://".to_string(), 2, "names a file"),
        ("sqlite://:memory:".to_string(), 2, "in-memory"),
        (
            format!("sqlite://{}/missing/dir/q.sqlite", dir.display()),
            3,
            "missing/dir/q.sqlite: No such file or directory",
        ),
        (
            format!("sqlite://{}", not_a_db.display()),
            3,
            "file is not a database",
        ),
    ];
    for (url, code, says) in &cases {
        for command in [
            vec![
                "run",
                "--handlers",
                "noop",
                "--listen",
                "off",
                "--exit-when-idle",
            ],
            vec!["migrate"],
        ] {
            let out = std::process::Command::new(&bin)
                .args(&command)
                .args(["--database-url", url])
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(*code),
                "{command:?} {url}: {stderr}"
            );
            assert!(stderr.contains(says), "{command:?} {url}: {stderr}");
        }
    }
    assert_eq!(
        std::fs::read_to_string(&not_a_db).unwrap(),
        "not a database\n"
    );
    assert!(!dir.join("missing").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Cron schedules on the embedded store: two agent processes on one file declare the same
/// every-second schedule; the one that leads fires it, and when it is killed with SIGKILL the
/// other takes over. Every tick is enqueued exactly once (catch-up loses none in the handover).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_agents_on_one_file_fire_each_tick_once_across_a_kill9_of_the_leader() {
    use std::collections::BTreeSet;

    use chrono::{DateTime, TimeDelta, Utc};

    let dir = scratch_dir("leasehold-file-schedules").unwrap();
    let url = format!("sqlite://{}", dir.join("queue.sqlite").display());
    let config = dir.join("agent.toml");
    std::fs::write(
        &config,
        "[[schedules]]\nname = \"tick\"\ncron = \"* * * * * *\"\ntype = \"noop\"\n\
         missed = \"catch_up\"\ncatch_up_max = 60\n",
    )
    .unwrap();
    let config = config.to_string_lossy().to_string();
    let spawn = |name: &'static str| {
        let url = url.clone();
        let config = config.clone();
        async move {
            spawn_agent(
                "leasehold-agent",
                &url,
                name,
                "noop",
                &["--config", &config],
                Vec::new(),
            )
            .await
            .unwrap()
        }
    };
    let mut a = spawn("file-a").await;
    // The first agent creates and migrates the file; the second joins once it exists.
    let store = {
        let mut opened = None;
        for _ in 0..200 {
            if let Ok(s) = SqliteStore::connect(&url, SqliteStoreOptions::default()).await
                && s.schedule_list()
                    .await
                    .is_ok_and(|l| !l.schedules.is_empty())
            {
                opened = Some(s);
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        opened.expect("the first agent declared its schedule")
    };
    let mut b = spawn("file-b").await;
    let leader = |store: SqliteStore| async move {
        let l = store.leader_get().await.unwrap()?;
        l.held().then(|| l.owner.map(|o| o.as_str().to_string()))?
    };
    let mut first = None;
    for _ in 0..200 {
        first = leader(store.clone()).await;
        if first.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let first = first.expect("a leader");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (victim, survivor) = if first.starts_with("file-a") {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    victim.kill9().unwrap();
    victim.wait_exit(Duration::from_secs(5)).await.unwrap();
    let mut second = None;
    for _ in 0..100 {
        second = leader(store.clone()).await.filter(|l| *l != first);
        if second.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(second.is_some(), "the survivor took over");
    tokio::time::sleep(Duration::from_secs(4)).await;
    survivor.sigterm().unwrap();
    survivor.wait_exit(Duration::from_secs(15)).await.unwrap();

    let page = store
        .task_list(TaskListParams {
            limit: 1000,
            ..Default::default()
        })
        .await
        .unwrap();
    let keys: Vec<String> = page
        .tasks
        .iter()
        .filter_map(|t| t.idempotency_key.clone())
        .collect();
    let ticks: BTreeSet<DateTime<Utc>> = keys
        .iter()
        .map(|k| k.strip_prefix("schedule:tick:").unwrap().parse().unwrap())
        .collect();
    assert_eq!(ticks.len(), keys.len(), "a tick doubled: {keys:?}");
    assert!(ticks.len() >= 8, "{} ticks", ticks.len());
    let (lo, hi) = (*ticks.first().unwrap(), *ticks.last().unwrap());
    assert_eq!(
        ticks.len() as i64,
        (hi - lo).num_seconds() + 1,
        "catch_up lost a tick: {ticks:?}"
    );
    assert!(
        ticks
            .iter()
            .all(|t| *t - lo == TimeDelta::seconds((*t - lo).num_seconds()))
    );
    store.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}
