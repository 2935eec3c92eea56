//! Running the `leasehold` binary (the headless console) against a real agent, as a script or
//! an operator would: one command per process with its exit code, stdout and stderr captured
//! ([`Cli::run`]), or a long-running command (`watch`) as a child whose stdout is read line by
//! line ([`Cli::spawn`]).
//!
//! Every command gets `--agent ADDR` (and `--token` when set) in front of its own arguments,
//! and runs with the `LEASEHOLD_*` variables removed, so the test's own environment cannot
//! change what the command talks to. A command that does not exit within [`CLI_TIMEOUT`] is
//! killed and reported as an error rather than hanging the test.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::Value;

use crate::bin::binary;

/// Longest a single command may run before it is killed.
pub const CLI_TIMEOUT: Duration = Duration::from_secs(120);
/// `--call-timeout` given to every command: generous, the machines are noisy.
pub const CALL_TIMEOUT: &str = "60s";

/// The `LEASEHOLD_*` variables the binary reads; removed from every command (the runtime
/// directory is then set to the harness's own, see [`crate::scratch::runtime_dir`]).
const ENV_VARS: [&str; 9] = [
    "LEASEHOLD_AGENT",
    "LEASEHOLD_TOKEN",
    "LEASEHOLD_TOKEN_FILE",
    "LEASEHOLD_SOCKET",
    "LEASEHOLD_CA",
    "LEASEHOLD_CERT",
    "LEASEHOLD_KEY",
    "LEASEHOLD_LOG",
    leasehold_shared::local::RUNTIME_DIR_ENV,
];

/// The `leasehold` binary aimed at one agent, with an optional token.
#[derive(Debug, Clone)]
pub struct Cli {
    path: PathBuf,
    addr: String,
    token: Option<String>,
}

/// What one command did.
#[derive(Debug, Clone)]
pub struct CliOutput {
    /// The arguments given (after `--agent ADDR`), for messages.
    pub args: Vec<String>,
    /// The exit code; `None` when a signal ended the process.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl CliOutput {
    /// The lines of stdout.
    pub fn lines(&self) -> Vec<&str> {
        self.stdout.lines().collect()
    }

    /// Every stdout line parsed as JSON.
    pub fn json_lines(&self) -> anyhow::Result<Vec<Value>> {
        self.stdout
            .lines()
            .map(|line| {
                serde_json::from_str(line).with_context(|| {
                    format!(
                        "`leasehold {:?}` printed a non-JSON line: {line}",
                        self.args
                    )
                })
            })
            .collect()
    }

    /// Stdout as exactly one JSON line.
    pub fn json(&self) -> anyhow::Result<Value> {
        let mut lines = self.json_lines()?;
        if lines.len() != 1 {
            bail!(
                "`leasehold {:?}` printed {} JSON lines, expected one:\n{}",
                self.args,
                lines.len(),
                self.stdout
            );
        }
        Ok(lines.remove(0))
    }

    /// A description for assertion messages: the command, its code and both outputs.
    pub fn describe(&self) -> String {
        format!(
            "`leasehold {}` exited {:?}\n--- stdout\n{}--- stderr\n{}",
            self.args.join(" "),
            self.code,
            self.stdout,
            self.stderr
        )
    }
}

impl Cli {
    /// The binary (built if needed) aimed at the agent listening on `addr`.
    pub async fn new(addr: &str) -> anyhow::Result<Cli> {
        Ok(Cli {
            path: binary("leasehold").await?,
            addr: addr.to_string(),
            token: None,
        })
    }

    /// The same binary and agent, sending `token`.
    pub fn with_token(&self, token: &str) -> Cli {
        Cli {
            token: Some(token.to_string()),
            ..self.clone()
        }
    }

    /// The same binary and token, aimed at another agent.
    pub fn at(&self, addr: &str) -> Cli {
        Cli {
            addr: addr.to_string(),
            ..self.clone()
        }
    }

    /// The agent address given with `--agent`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    fn command(&self, args: &[&str]) -> anyhow::Result<tokio::process::Command> {
        let mut cmd = tokio::process::Command::new(&self.path);
        cmd.arg("--agent")
            .arg(&self.addr)
            .arg("--call-timeout")
            .arg(CALL_TIMEOUT);
        if let Some(token) = &self.token {
            cmd.arg("--token").arg(token);
        }
        cmd.args(args).stdin(Stdio::null()).kill_on_drop(true);
        for var in ENV_VARS {
            cmd.env_remove(var);
        }
        // Where the harness's agents put their sockets, so the CLI finds them as on a host.
        let dir = crate::scratch::runtime_dir()?;
        cmd.env(leasehold_shared::local::RUNTIME_DIR_ENV, dir);
        Ok(cmd)
    }

    /// Runs `leasehold --agent ADDR [--token T] ARGS…` to its end.
    pub async fn run(&self, args: &[&str]) -> anyhow::Result<CliOutput> {
        let child = self
            .command(args)?
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("spawning {} {args:?}", self.path.display()))?;
        let output = tokio::time::timeout(CLI_TIMEOUT, child.wait_with_output())
            .await
            .with_context(|| format!("`leasehold {args:?}` did not exit within {CLI_TIMEOUT:?}"))?
            .with_context(|| format!("waiting for `leasehold {args:?}`"))?;
        Ok(CliOutput {
            args: args.iter().map(|s| s.to_string()).collect(),
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }

    /// Starts `leasehold --agent ADDR [--token T] ARGS…` with stdout and stderr piped, for
    /// commands that run until stopped (`watch`). Killed when dropped.
    pub fn spawn(&self, args: &[&str]) -> anyhow::Result<tokio::process::Child> {
        self.command(args)?
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("spawning {} {args:?}", self.path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every variable the console's flags read (`env = "LEASEHOLD_…"`) is removed.
    #[test]
    fn every_variable_the_console_reads_is_removed() {
        let source = include_str!("../../console/src/cli/mod.rs");
        let read: Vec<&str> = source
            .split("env = \"")
            .skip(1)
            .filter_map(|rest| rest.split('"').next())
            .collect();
        assert!(
            read.len() >= 7,
            "the console's flags were not found: {read:?}"
        );
        for name in read {
            assert!(ENV_VARS.contains(&name), "{name} is not removed");
        }
    }
}
