#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `exec` programs die with their agent (issue 18): a real `leasehold-agent` runs a real
//! program; `kill -9` of the agent kills the program within a second (its parent-death
//! signal), so a recovered task never runs twice at once. An orderly stop (SIGTERM, drain past
//! `--shutdown-timeout`) still kills the program's whole process group.
//!
//! Programs are found through `/proc` by a `sleep` duration unique to the test and this test
//! process (`sleep 3001.<pid>`); a zombie counts as gone. Whatever a test leaves behind is
//! SIGKILLed when it ends, pass or fail.

use std::time::{Duration, Instant};

use leasehold_tests::AgentHandle;
use leasehold_tests::fleet::spawn_agent;
use leasehold_tests::{TaskSpec, TestDb, insert_task, wait_until};
use serde_json::json;

/// A `sleep` argument no other test or test run uses.
fn marker(n: u32) -> String {
    format!("{}.{}", 3000 + n, std::process::id())
}

/// Pids of live processes named `comm` whose command line contains `marker`.
fn find(marker: &str, comm: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return pids;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if cmdline.contains(marker) && name.trim() == comm && alive(pid) {
            pids.push(pid);
        }
    }
    pids
}

/// `(state, parent pid)` of `pid` from `/proc/<pid>/stat`, `None` once it is reaped.
fn stat(pid: u32) -> Option<(char, u32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) S ppid ...": comm may hold spaces and parentheses; the last ')' ends it.
    let mut rest = text.get(text.rfind(')')? + 1..)?.split_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Whether `pid` still runs (a zombie has ended; it only waits for its reaper).
fn alive(pid: u32) -> bool {
    stat(pid).is_some_and(|(state, _)| !matches!(state, 'Z' | 'X' | 'x'))
}

/// SIGKILLs every process carrying `marker` when dropped, so no test leaves a program behind.
struct Leftovers(String);

impl Drop for Leftovers {
    fn drop(&mut self) {
        for comm in ["sleep", "sh"] {
            for pid in find(&self.0, comm) {
                let _ = std::process::Command::new("kill")
                    .args(["-s", "KILL", &pid.to_string()])
                    .status();
            }
        }
    }
}

/// Waits until exactly one live process named `comm` carries `marker`; returns its pid.
async fn wait_for_program(marker: &str, comm: &str) -> u32 {
    let what = format!("a `{comm}` carrying {marker} runs");
    wait_until(&what, Duration::from_secs(20), || async {
        Ok(find(marker, comm).len() == 1)
    })
    .await
    .unwrap();
    find(marker, comm)[0]
}

async fn enqueue_exec(db: &TestDb, argv: serde_json::Value) -> i64 {
    insert_task(
        &db.pool,
        TaskSpec::new("exec", "queued").payload(json!({ "argv": argv })),
    )
    .await
    .unwrap()
}

/// Spawns `leasehold-agent` named `name` running only the `exec` handler (plus `extra` flags)
/// and waits until it registered.
async fn spawn_exec_agent(db: &TestDb, name: &str, extra: &[&str]) -> AgentHandle {
    let agent = spawn_agent("leasehold-agent", &db.url, name, "exec", extra, vec![])
        .await
        .unwrap();
    agent
        .wait_registered(&db.pool, name, Duration::from_secs(20))
        .await
        .unwrap();
    agent
}

/// kill -9 of the agent: the program it runs is gone within a second.
#[tokio::test]
async fn kill9_of_the_agent_kills_its_exec_program_within_a_second() {
    let db = TestDb::new().await.unwrap();
    let m = marker(1);
    let _leftovers = Leftovers(m.clone());
    let mut agent = spawn_exec_agent(&db, "exec-kill9", &[]).await;
    enqueue_exec(&db, json!(["sleep", m])).await;
    let program = wait_for_program(&m, "sleep").await;
    assert_eq!(
        stat(program).map(|(_, ppid)| ppid),
        Some(agent.pid()),
        "the program is the agent's child"
    );

    agent.kill9().unwrap();
    let killed = Instant::now();
    wait_until(
        "the program died with its agent",
        Duration::from_secs(1),
        || async { Ok(!alive(program)) },
    )
    .await
    .unwrap();
    eprintln!(
        "program {program} gone {:?} after kill -9",
        killed.elapsed()
    );
    let status = agent.wait_exit(Duration::from_secs(5)).await.unwrap();
    assert!(!status.success(), "{status}");
}

/// The parent-death signal reaches the program itself (here a shell), not what it started:
/// a background `sleep` outlives the agent's `kill -9` (re-parented) unless a service manager
/// kills the agent's whole control group (systemd `KillMode=control-group`). The shell — the
/// process the agent waits on, whose exit would report the task done — is gone within a second.
#[tokio::test]
async fn kill9_of_the_agent_kills_a_shell_program_within_a_second() {
    let db = TestDb::new().await.unwrap();
    let m = marker(2);
    let _leftovers = Leftovers(m.clone());
    let mut agent = spawn_exec_agent(&db, "exec-shell", &[]).await;
    enqueue_exec(&db, json!(["sh", "-c", format!("sleep {m} & wait")])).await;
    let shell = wait_for_program(&m, "sh").await;
    let background = wait_for_program(&m, "sleep").await;
    assert_eq!(stat(background).map(|(_, ppid)| ppid), Some(shell));

    agent.kill9().unwrap();
    wait_until(
        "the shell died with its agent",
        Duration::from_secs(1),
        || async { Ok(!alive(shell)) },
    )
    .await
    .unwrap();
    agent.wait_exit(Duration::from_secs(5)).await.unwrap();
    // Documented, not promised: the background child is out of the dead agent's reach.
    eprintln!(
        "background sleep {background} after kill -9 of the agent: {}",
        if alive(background) {
            "still running (left to the service manager's cgroup kill)"
        } else {
            "gone"
        }
    );
}

/// An orderly stop past the shutdown timeout still stops the program's whole process group:
/// SIGTERM to the agent, the drain gives up after `--shutdown-timeout`, the handler signals
/// the group, and the agent exits 0 leaving no process of it behind.
#[tokio::test]
async fn sigterm_drain_past_the_timeout_kills_the_whole_group() {
    let db = TestDb::new().await.unwrap();
    let m = marker(3);
    let _leftovers = Leftovers(m.clone());
    let mut agent = spawn_exec_agent(&db, "exec-drain", &["--shutdown-timeout", "1s"]).await;
    let id = enqueue_exec(
        &db,
        json!(["sh", "-c", format!("sleep {m} & sleep {m} & wait")]),
    )
    .await;
    wait_until(
        "the shell and its two sleeps run",
        Duration::from_secs(20),
        || async { Ok(find(&m, "sh").len() == 1 && find(&m, "sleep").len() == 2) },
    )
    .await
    .unwrap();

    agent.sigterm().unwrap();
    let status = agent.wait_exit(Duration::from_secs(30)).await.unwrap();
    assert!(status.success(), "{status}: {}", agent.log_tail(40));
    wait_until(
        "no process of the group is left",
        Duration::from_secs(2),
        || async { Ok(find(&m, "sh").is_empty() && find(&m, "sleep").is_empty()) },
    )
    .await
    .unwrap();
    // The drain released the lease: the task waits for the next agent.
    let status: String = sqlx::query_scalar("SELECT status FROM tasks WHERE id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(status, "queued");
}
