//! A real agent process under test: spawned with its output captured to files, signalled
//! (`SIGTERM`, `SIGINT`, `SIGKILL`, `SIGSTOP`/`SIGCONT`) with `kill(1)`, waited for, and
//! killed on drop so no test leaves an agent behind.
//!
//! Each agent writes its stdout and stderr into a directory of its own,
//! `<temp dir>/leasehold-agent-<test pid>-<n>`. The directory is deleted when the handle is
//! dropped, unless the thread is panicking (a failed assertion): then it is kept and its path
//! printed, so the agent's log can be read after the failure.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use sqlx::PgPool;

use crate::scratch::scratch_dir;
use crate::wait::{POLL_INTERVAL, wait_until};

/// Lines of stderr quoted in errors about an agent.
pub const ERROR_TAIL_LINES: usize = 40;

/// A spawned agent process. Killed (and reaped) on drop if still running.
#[derive(Debug)]
pub struct AgentHandle {
    child: Child,
    pid: u32,
    label: String,
    log_dir: PathBuf,
    started: Instant,
    /// The exit status, once reaped.
    exited: Option<ExitStatus>,
}

/// Environment every spawned agent gets unless the test sets the key itself: loopback TCP
/// callers are operators (`--insecure-local`) and `exec` may run any program (`--exec-allow '*'`).
pub const TEST_DEFAULT_ENV: [(&str, &str); 2] = [
    ("LEASEHOLD_INSECURE_LOCAL", "true"),
    ("LEASEHOLD_EXEC_ALLOW", "*"),
];

impl AgentHandle {
    /// Spawns `bin` with `args` and the extra environment `envs` (added to the test's own
    /// environment; `RUST_LOG` is passed on as given). Stdin is null; stdout and stderr go to
    /// files in a fresh directory.
    pub fn spawn(
        bin: &Path,
        args: Vec<String>,
        envs: Vec<(String, String)>,
    ) -> anyhow::Result<AgentHandle> {
        let log_dir = scratch_dir("leasehold-agent")?;
        let stdout = std::fs::File::create(log_dir.join("stdout"))
            .with_context(|| format!("creating {}/stdout", log_dir.display()))?;
        let stderr = std::fs::File::create(log_dir.join("stderr"))
            .with_context(|| format!("creating {}/stderr", log_dir.display()))?;

        let name = agent_name(&args);
        // Existing tests act over loopback TCP without a token and run `exec`: they get the
        // explicit opt-ins. Security tests pass these keys themselves to test the defaults.
        let mut envs = envs;
        for (key, value) in TEST_DEFAULT_ENV {
            if !envs.iter().any(|(k, _)| k == key) {
                envs.push((key.to_string(), value.to_string()));
            }
        }
        if !envs
            .iter()
            .any(|(k, _)| k == leasehold_shared::local::RUNTIME_DIR_ENV)
        {
            envs.push((
                leasehold_shared::local::RUNTIME_DIR_ENV.to_string(),
                crate::scratch::runtime_dir()?.display().to_string(),
            ));
        }
        let child = Command::new(bin)
            .args(&args)
            .envs(envs)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn();
        let child = match child {
            Ok(child) => child,
            Err(error) => {
                let _ = std::fs::remove_dir_all(&log_dir);
                return Err(error).with_context(|| format!("spawning {} {args:?}", bin.display()));
            }
        };
        let pid = child.id();
        let program = bin.file_name().map_or_else(
            || bin.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let label = match name {
            Some(name) => format!("{program} {name:?} (pid {pid})"),
            None => format!("{program} (pid {pid})"),
        };
        Ok(AgentHandle {
            child,
            pid,
            label,
            log_dir,
            started: Instant::now(),
            exited: None,
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// A name for messages: the program, the `--name` argument if any, and the pid.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// When the process was spawned.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// The directory holding the `stdout` and `stderr` files.
    pub fn log_dir(&self) -> &Path {
        &self.log_dir
    }

    /// Sends `SIGTERM` (graceful drain).
    pub fn sigterm(&self) -> anyhow::Result<()> {
        self.signal("TERM")
    }

    /// Sends `SIGINT`.
    pub fn sigint(&self) -> anyhow::Result<()> {
        self.signal("INT")
    }

    /// Sends `SIGKILL`. The process is not reaped here: follow with
    /// [`AgentHandle::wait_exit`].
    pub fn kill9(&self) -> anyhow::Result<()> {
        self.signal("KILL")
    }

    /// Sends `SIGSTOP`: the process freezes (its sockets stay open) until
    /// [`AgentHandle::cont`].
    pub fn stop(&self) -> anyhow::Result<()> {
        self.signal("STOP")
    }

    /// Sends `SIGCONT`.
    pub fn cont(&self) -> anyhow::Result<()> {
        self.signal("CONT")
    }

    /// Sends `SIG<name>` with `kill -s <name> <pid>`.
    pub fn signal(&self, name: &str) -> anyhow::Result<()> {
        if let Some(status) = self.exited {
            // The pid may belong to another process by now.
            bail!(
                "cannot send SIG{name} to agent {}: it already exited ({status})",
                self.label
            );
        }
        let output = Command::new("kill")
            .args(["-s", name, &self.pid.to_string()])
            .stdin(Stdio::null())
            .output()
            .context("running kill")?;
        if !output.status.success() {
            bail!(
                "kill -s {name} {} (agent {}) failed with {}: {}",
                self.pid,
                self.label,
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(())
    }

    /// Waits for the process to exit, polling every [`POLL_INTERVAL`]; fails naming the agent
    /// and quoting the end of its stderr when `timeout` passes first (the process is left
    /// running).
    pub async fn wait_exit(&mut self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.try_wait()? {
                return Ok(status);
            }
            if start.elapsed() >= timeout {
                bail!(
                    "agent {} did not exit within {timeout:?}; end of its stderr:\n{}",
                    self.label,
                    self.log_tail(ERROR_TAIL_LINES)
                );
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// The exit status if the process has exited (reaping it), `None` while it runs.
    pub fn try_wait(&mut self) -> anyhow::Result<Option<ExitStatus>> {
        if let Some(status) = self.exited {
            return Ok(Some(status));
        }
        let status = self
            .child
            .try_wait()
            .with_context(|| format!("checking whether agent {} exited", self.label))?;
        self.exited = status;
        Ok(status)
    }

    /// Whether the process is still running (a stopped process counts as running).
    pub fn is_running(&mut self) -> bool {
        matches!(self.try_wait(), Ok(None))
    }

    /// Everything the agent wrote to stdout so far.
    pub fn stdout_text(&self) -> anyhow::Result<String> {
        read_lossy(&self.log_dir.join("stdout"))
    }

    /// Everything the agent wrote to stderr so far.
    pub fn stderr_text(&self) -> anyhow::Result<String> {
        read_lossy(&self.log_dir.join("stderr"))
    }

    /// The last `n` lines of stderr (or a note saying why it cannot be read).
    pub fn log_tail(&self, n: usize) -> String {
        match self.stderr_text() {
            Ok(text) => {
                let lines: Vec<&str> = text.lines().collect();
                lines[lines.len().saturating_sub(n)..].join("\n")
            }
            Err(error) => format!("({error:#})"),
        }
    }

    /// The id of this process's own row in `agents` (same `name` and `pid`, state
    /// `running`), waiting up to `timeout` for it to register. Unlike [`wait_registered`] it
    /// cannot return the row of an earlier process under the same name.
    pub async fn wait_registered(
        &self,
        pool: &PgPool,
        name: &str,
        timeout: Duration,
    ) -> anyhow::Result<String> {
        let pid = i32::try_from(self.pid).context("pid out of range")?;
        let found = wait_for_row(pool, name, Some(pid), timeout).await;
        found.with_context(|| {
            format!(
                "agent {} did not register; end of its stderr:\n{}",
                self.label,
                self.log_tail(ERROR_TAIL_LINES)
            )
        })
    }
}

impl Drop for AgentHandle {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            // A stopped process dies of SIGKILL too, but continue it first so nothing is left
            // half-handled in the kernel (ptrace-like states) and it exits promptly.
            let _ = Command::new("kill")
                .args(["-s", "CONT", &self.pid.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "leasehold-tests: logs of agent {} kept in {}",
                self.label,
                self.log_dir.display()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.log_dir);
        }
    }
}

/// The `agents.id` of the newest row (by `started_at`) with `name = name` and state
/// `running`, waiting up to `timeout` for one to appear.
pub async fn wait_registered(
    pool: &PgPool,
    name: &str,
    timeout: Duration,
) -> anyhow::Result<String> {
    wait_for_row(pool, name, None, timeout).await
}

async fn wait_for_row(
    pool: &PgPool,
    name: &str,
    pid: Option<i32>,
    timeout: Duration,
) -> anyhow::Result<String> {
    let found = std::sync::Mutex::new(None);
    let what = match pid {
        Some(pid) => format!("agent {name:?} (pid {pid}) is registered as running"),
        None => format!("agent {name:?} is registered as running"),
    };
    wait_until(&what, timeout, || {
        let found = &found;
        async move {
            let id: Option<String> = sqlx::query_scalar(
                "SELECT id FROM agents \
                 WHERE name = $1 AND state = 'running' AND ($2::int IS NULL OR pid = $2) \
                 ORDER BY started_at DESC, id DESC LIMIT 1",
            )
            .bind(name)
            .bind(pid)
            .fetch_optional(pool)
            .await
            .context("reading the agents table")?;
            let done = id.is_some();
            if let Ok(mut slot) = found.lock() {
                *slot = id;
            }
            Ok(done)
        }
    })
    .await?;
    let id = found.into_inner().ok().flatten();
    id.with_context(|| format!("{what}: row vanished"))
}

/// The value of a `--name <x>` or `--name=<x>` argument.
fn agent_name(args: &[String]) -> Option<String> {
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        if arg == "--name" {
            return iter.next().cloned();
        }
        if let Some(name) = arg.strip_prefix("--name=") {
            return Some(name.to_string());
        }
    }
    None
}

fn read_lossy(path: &Path) -> anyhow::Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_argument_is_found() {
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            agent_name(&args(&["run", "--name", "a1"])),
            Some("a1".into())
        );
        assert_eq!(agent_name(&args(&["--name=b2", "run"])), Some("b2".into()));
        assert_eq!(agent_name(&args(&["run"])), None);
    }
}
