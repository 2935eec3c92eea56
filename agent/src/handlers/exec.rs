//! `exec`: runs a program and reports its exit code and the tails of its output.
//!
//! Payload `{"argv": [..], "env": {..}, "cwd": "..", "timeout": "30s", "snooze_exit": 75,
//! "snooze_for": "30s"}`; only `argv` is required; `timeout` and `snooze_for` are humantime
//! durations.
//!
//! Snooze: with `snooze_exit` and `snooze_for` (both or neither), an exit with that code asks to
//! run again after `snooze_for` without using an attempt (`Outcome::Snooze`).
//!
//! Checkpoints: the program gets the task's last saved checkpoint as JSON text in
//! `LEASEHOLD_CHECKPOINT` (absent when none) and saves one by printing a line
//! `LEASEHOLD_CHECKPOINT <json>` to stdout (at most 64 KiB of JSON). Each line is saved at once,
//! fenced by the lease, before the next one (when lines come faster than the database takes
//! them, the newest waiting one wins), and all are saved before the attempt ends. A line whose
//! JSON does not parse is logged and skipped.
//!
//! Security (see [`policy`] for the exact rules): `exec` runs only programs the operator
//! allowed (`exec_allow`, required to enable the handler; `'*'` allows anything explicitly).
//! The child gets a cleared environment, then the variables of `exec_env` from the agent's
//! (default `PATH`, `HOME`, `LANG`), then the payload's `env`, then who it is:
//! `LEASEHOLD_TASK_ID`, `LEASEHOLD_ATTEMPT`, `LEASEHOLD_EPOCH`, `LEASEHOLD_IDEMPOTENCY_KEY`
//! (`<task id>:<epoch>`, for idempotent side effects) and `LEASEHOLD_TASK_TYPE`. `LD_*`,
//! `LEASEHOLD_*` and `DATABASE_URL` are never given to it. `cwd` must be absolute and, with
//! `exec_root`, inside that root. The Enqueue and AddSchedule calls refuse a payload that breaks
//! these rules ([`check_enqueue`], through [`Handler::validate_enqueue`]); the agent that runs it checks again, since anyone who can
//! INSERT into `tasks` can enqueue. The program runs as the agent's user, so the first handler
//! makes the agent process non-dumpable (`nodump`): the program cannot read the agent's
//! `/proc/<pid>/environ` or memory, nor `ptrace` it — and the agent writes no core dump.
//!
//! ```text
//!   spawn (own process group, stdin null) ─┬─ exit ───────────────────────▶ kill group ─▶ result
//!   read stdout, stderr tails concurrently │
//!                                          └─ cancel / timeout ─▶ SIGTERM group
//!                                                 exits within kill_after ─▶ "sigterm" ─┐
//!                                                 still running ─▶ SIGKILL ─▶ "sigkill" ─┴▶ stopped
//! ```
//!
//! Invariants: memory is bounded whatever the program prints (only the last `exec_output_tail`
//! bytes of stdout and of stderr are kept); no process of the group outlives the execution —
//! after the leader exits the group is SIGKILLed (background children), and a guard SIGKILLs it
//! if the handler's future is dropped mid-run (lease lost); the program itself dies with the
//! agent, even by `kill -9` (a parent-death signal, see `spawner`). A process that leaves the
//! group (`setsid`, `setpgid`) is out of reach; the handler then stops waiting for its output
//! after [`OUTPUT_DRAIN_GRACE`].
//!
//! When things fail: a payload that breaks the rules is a permanent `bad_payload`; a program
//! outside `exec_allow` or a `cwd` outside `exec_root` is a permanent `not_allowed` (the program
//! never starts); a program that cannot be started (not found, not executable, bad `cwd`) is
//! a permanent `spawn_failed`; a non-zero exit is a retryable `exit_code` with the last line of
//! stderr; death by a signal is a retryable `signal`; a stop is a retryable `timeout` (the
//! payload's timeout) or `stopped` (cancel, deadline, shutdown; the runtime records which).

mod checkpoint;
mod glob;
mod group;
mod nodump;
pub mod policy;
mod spawner;
mod tail;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use nix::sys::signal::Signal;
use serde::Deserialize;
use serde_json::json;
use tokio::process::{Child, Command};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use self::group::ProcessGroup;
pub use self::policy::{ExecPolicy, check_enqueue};
use self::tail::{Tail, read_tail};
use super::BuiltinOptions;
use crate::handler::{Handler, HandlerError, Outcome, TaskContext};

/// The variable holding the task's last checkpoint, and the stdout line prefix that saves one.
pub const CHECKPOINT_VAR: &str = "LEASEHOLD_CHECKPOINT";

/// How long to wait for the output pipes to close once the process group is gone.
pub const OUTPUT_DRAIN_GRACE: Duration = Duration::from_secs(1);
/// Longest stderr line quoted in an `exit_code` or `signal` error message, in bytes.
pub const MAX_ERROR_LINE_BYTES: usize = 500;

/// The payload of `exec`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecPayload {
    /// The program and its arguments; `argv[0]` is an absolute path, or a bare name looked up
    /// in the child's `PATH`.
    pub argv: Vec<String>,
    /// Variables added to the child's environment (after the `exec_env` passthrough).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Absolute working directory (default: `exec_root` when set, else the agent's).
    #[serde(default)]
    pub cwd: Option<String>,
    /// A humantime duration (`"30s"`, `"5m"`) after which the program is stopped.
    #[serde(default)]
    pub timeout: Option<String>,
    /// An exit code (1–255) that means "run me again after `snooze_for`" (a snooze: the
    /// attempt does not count). Needs `snooze_for`.
    #[serde(default)]
    pub snooze_exit: Option<i32>,
    /// A humantime duration: how long a snooze waits. Needs `snooze_exit`.
    #[serde(default)]
    pub snooze_for: Option<String>,
}

impl ExecPayload {
    /// Checks the payload and returns its parsed timeout.
    fn checked(&self) -> Result<Checked<'_>, HandlerError> {
        let Some((program, args)) = self.argv.split_first() else {
            return Err(bad_payload("argv must name a program"));
        };
        if program.is_empty() {
            return Err(bad_payload("argv[0] must not be empty"));
        }
        if let Some(i) = self.argv.iter().position(|a| a.contains('\0')) {
            return Err(bad_payload(format!("argv[{i}] contains a NUL byte")));
        }
        for (key, value) in &self.env {
            if value.contains('\0') {
                return Err(bad_payload(format!("env {key:?} contains a NUL byte")));
            }
        }
        if self.cwd.as_deref().is_some_and(|cwd| cwd.contains('\0')) {
            return Err(bad_payload("cwd contains a NUL byte"));
        }
        policy::check_structure(self).map_err(bad_payload)?;
        let timeout = match self.timeout.as_deref() {
            None => None,
            Some(text) => match humantime::parse_duration(text) {
                Ok(d) if d.is_zero() => return Err(bad_payload("timeout must be above zero")),
                Ok(d) => Some(d),
                Err(e) => {
                    return Err(bad_payload(format!(
                        "timeout {text:?} is not a duration like \"30s\" or \"5m\": {e}"
                    )));
                }
            },
        };
        let snooze = match (self.snooze_exit, self.snooze_for.as_deref()) {
            (None, None) => None,
            (Some(_), None) | (None, Some(_)) => {
                return Err(bad_payload(
                    "snooze_exit and snooze_for go together: give both or neither",
                ));
            }
            (Some(code), Some(_)) if !(1..=255).contains(&code) => {
                return Err(bad_payload(format!(
                    "snooze_exit {code} is not an exit code within 1..=255"
                )));
            }
            (Some(code), Some(text)) => match humantime::parse_duration(text) {
                Ok(d) if d > leasehold_shared::store::MAX_SNOOZE => {
                    return Err(bad_payload(format!(
                        "snooze_for {text:?} is above 365 days"
                    )));
                }
                Ok(d) => Some((code, d)),
                Err(e) => {
                    return Err(bad_payload(format!(
                        "snooze_for {text:?} is not a duration like \"30s\" or \"5m\": {e}"
                    )));
                }
            },
        };
        Ok(Checked {
            program,
            args,
            timeout,
            snooze,
        })
    }
}

struct Checked<'a> {
    program: &'a str,
    args: &'a [String],
    timeout: Option<Duration>,
    /// The exit code that asks for a snooze, and the snooze.
    snooze: Option<(i32, Duration)>,
}

fn bad_payload(message: impl Into<String>) -> HandlerError {
    HandlerError::permanent("bad_payload", message)
}

fn not_allowed(message: impl Into<String>) -> HandlerError {
    HandlerError::permanent("not_allowed", message)
}

/// Runs the programs its [`ExecPolicy`] allows.
#[derive(Debug, Clone)]
pub struct ExecHandler {
    kill_after: Duration,
    output_tail: usize,
    policy: Arc<ExecPolicy>,
}

impl ExecHandler {
    /// A handler with the `exec_*` settings of `opts`. Settings that fail
    /// [`ExecPolicy::new`] (the agent's configuration refuses them before this) give a handler
    /// that runs nothing.
    ///
    /// The first call in a process makes the process non-dumpable (module `nodump`), before
    /// any program can start: programs run as this process's user and must not read its
    /// environment or memory through `/proc`. Every way of enabling `exec` — `leasehold-agent
    /// run`, the console's `leasehold demo`, a library user's registry — goes through here.
    /// Side effect: no core dumps from this process.
    pub fn new(opts: &BuiltinOptions) -> Self {
        nodump::protect_agent();
        let policy = ExecPolicy::new(&opts.exec_allow, &opts.exec_env, opts.exec_root.as_deref())
            .unwrap_or_else(|(setting, problem)| {
                tracing::error!(setting, problem, "bad exec settings: exec runs no program");
                ExecPolicy::default()
            });
        Self {
            kill_after: opts.exec_kill_after,
            output_tail: opts.exec_output_tail,
            policy: Arc::new(policy),
        }
    }

    /// What this handler may run.
    pub fn policy(&self) -> &ExecPolicy {
        &self.policy
    }

    /// The child's environment: the passthrough, the payload's, then the task's own variables.
    fn child_env(&self, ctx: &TaskContext, payload: &ExecPayload) -> BTreeMap<OsString, OsString> {
        let mut env = self.policy.inherited_env();
        for (name, value) in &payload.env {
            env.insert(name.into(), value.into());
        }
        let task = [
            ctx.id().0.to_string(),
            ctx.attempt().to_string(),
            ctx.epoch().0.to_string(),
            ctx.idempotency_key(),
            ctx.task_type().as_str().to_owned(),
        ];
        for (name, value) in policy::TASK_VARS.iter().zip(task) {
            env.insert((*name).into(), value.into());
        }
        if let Some(checkpoint) = ctx.checkpoint() {
            env.insert(CHECKPOINT_VAR.into(), checkpoint.to_string().into());
        }
        env
    }

    /// The program to execute (absolute, allowed) and the directory to start it in.
    fn place(
        &self,
        payload: &ExecPayload,
        program: &str,
        env: &BTreeMap<OsString, OsString>,
    ) -> Result<(PathBuf, Option<PathBuf>), HandlerError> {
        let path = env
            .get(std::ffi::OsStr::new("PATH"))
            .map(OsString::as_os_str);
        let resolved = policy::resolve_program(program, path)
            .map_err(|e| HandlerError::permanent("spawn_failed", e))?;
        if !self.policy.allows(&resolved) {
            return Err(not_allowed(self.policy.refusal(&resolved)));
        }
        let cwd = match (&payload.cwd, self.policy.root()) {
            (None, root) => root.map(Path::to_path_buf),
            (Some(cwd), None) => Some(PathBuf::from(cwd)),
            (Some(cwd), Some(root)) => {
                let lexical = self
                    .policy
                    .cwd_inside_root(Path::new(cwd))
                    .map_err(not_allowed)?;
                let canonical = |p: &Path| {
                    p.canonicalize().map_err(|e| {
                        HandlerError::permanent(
                            "spawn_failed",
                            format!("cannot use {}: {e}", p.display()),
                        )
                    })
                };
                let (real_cwd, real_root) = (canonical(&lexical)?, canonical(root)?);
                if !real_cwd.starts_with(&real_root) {
                    return Err(not_allowed(format!(
                        "cwd {cwd} resolves to {} outside exec_root {} (resolved {})",
                        real_cwd.display(),
                        root.display(),
                        real_root.display()
                    )));
                }
                Some(real_cwd)
            }
        };
        Ok((resolved, cwd))
    }
}

impl Default for ExecHandler {
    fn default() -> Self {
        Self::new(&BuiltinOptions::default())
    }
}

/// Why the program was stopped.
#[derive(Debug, Clone, Copy)]
enum StopCause {
    /// The payload's timeout passed.
    Timeout(Duration),
    /// The execution was asked to stop, or ran out of the time the runtime gave it.
    Asked,
}

/// How the wait for the program ended.
#[derive(Debug)]
enum Ending {
    Exited(ExitStatus),
    Stopped {
        cause: StopCause,
        signal: &'static str,
    },
    WaitFailed(std::io::Error),
}

#[async_trait]
impl Handler for ExecHandler {
    type Payload = ExecPayload;

    fn validate(&self, payload: &ExecPayload) -> Result<(), HandlerError> {
        payload.checked().map(|_| ())
    }

    /// The structural checks, then this agent's allow list and `exec_root` ([`check_enqueue`]).
    fn validate_enqueue(&self, payload: &ExecPayload) -> Result<(), HandlerError> {
        policy::admit(payload, Some(&self.policy)).map_err(bad_payload)
    }

    #[tracing::instrument(name = "exec", skip_all, fields(program = tracing::field::Empty))]
    async fn run(&self, ctx: TaskContext, payload: ExecPayload) -> Result<Outcome, HandlerError> {
        let checked = payload.checked()?;
        tracing::Span::current().record("program", checked.program);
        if ctx.is_cancelled() {
            return Err(HandlerError::retryable(
                "stopped",
                "asked to stop before the program started",
            ));
        }
        let env = self.child_env(&ctx, &payload);
        let (program, cwd) = self.place(&payload, checked.program, &env)?;
        // Exactly the path that was checked runs; argv[0] stays as the payload gave it.
        let mut command = Command::new(&program);
        command
            .arg0(checked.program)
            .args(checked.args)
            .env_clear()
            .envs(&env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        if let Some(cwd) = &cwd {
            command.current_dir(cwd);
        }

        let started = Instant::now();
        // Drop order matters (reverse of declaration): readers stop, the group is SIGKILLed
        // while the leader is still unreaped, then tokio kills and reaps the leader.
        let mut child = spawner::spawn(command).await.map_err(|e| {
            let place = cwd
                .as_deref()
                .map(|cwd| format!(" in {:?}", cwd.display()))
                .unwrap_or_default();
            HandlerError::permanent(
                "spawn_failed",
                format!("cannot start {:?}{place}: {e}", program.display()),
            )
        })?;
        let mut group = ProcessGroup::led_by(child.id());
        tracing::debug!(pid = child.id(), "program started");

        let stop_reading = CancellationToken::new();
        let (checkpoints, saver) = checkpoint::saver(ctx.clone());
        let stdout = child
            .stdout
            .take()
            .map(|out| self.spawn_reader(out, &stop_reading, Some(checkpoints)));
        let stderr = child
            .stderr
            .take()
            .map(|err| self.spawn_reader(err, &stop_reading, None));

        let ending = self.wait(&ctx, &mut child, &group, checked.timeout).await;
        // Background children left by the program die with the group.
        group.kill();
        let (stdout_tail, stderr_tail) = drain(stdout, stderr, stop_reading).await;
        // Every checkpoint line read is saved before the attempt ends.
        saver.finish().await;
        let elapsed = started.elapsed();
        let duration_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        let took = humantime::format_duration(Duration::from_millis(duration_ms));

        match ending {
            Ending::Exited(status) => match (status.code(), exit_signal(status)) {
                (Some(code), _) if checked.snooze.is_some_and(|(c, _)| c == code) => {
                    let delay = checked.snooze.map(|(_, d)| d).unwrap_or_default();
                    tracing::debug!(exit_code = code, duration_ms, "program asked to snooze");
                    Ok(Outcome::Snooze(delay))
                }
                (Some(0), _) => {
                    tracing::debug!(exit_code = 0, duration_ms, "program succeeded");
                    Ok(Outcome::Succeeded(Some(json!({
                        "exit_code": 0,
                        "stdout_tail": stdout_tail,
                        "stderr_tail": stderr_tail,
                        "duration_ms": duration_ms,
                    }))))
                }
                (Some(code), _) => {
                    tracing::debug!(exit_code = code, duration_ms, "program failed");
                    Err(HandlerError::retryable(
                        "exit_code",
                        with_last_line(format!("exited with code {code}"), &stderr_tail),
                    ))
                }
                (None, signal) => {
                    let name = signal.unwrap_or("an unknown signal");
                    tracing::debug!(signal = name, duration_ms, "program killed by a signal");
                    Err(HandlerError::retryable(
                        "signal",
                        with_last_line(format!("killed by {name}"), &stderr_tail),
                    ))
                }
            },
            Ending::Stopped { cause, signal } => {
                let (code, why) = match cause {
                    StopCause::Timeout(timeout) => (
                        "timeout",
                        format!(
                            "ran past its timeout of {}",
                            humantime::format_duration(timeout)
                        ),
                    ),
                    StopCause::Asked => ("stopped", "asked to stop".to_owned()),
                };
                tracing::info!(code, signal, duration_ms, "program stopped");
                Err(HandlerError::retryable(
                    code,
                    format!("{why}; stopped with {signal} after {took}"),
                ))
            }
            Ending::WaitFailed(e) => {
                tracing::warn!(error = %e, "waiting for the program failed");
                Err(HandlerError::retryable(
                    "wait_failed",
                    format!("cannot wait for the program: {e}"),
                ))
            }
        }
    }
}

impl ExecHandler {
    fn spawn_reader<R>(
        &self,
        reader: R,
        stop: &CancellationToken,
        lines: Option<checkpoint::Lines>,
    ) -> AbortOnDropHandle<Tail>
    where
        R: tokio::io::AsyncRead + Unpin + Send + 'static,
    {
        AbortOnDropHandle::new(tokio::spawn(read_tail(
            reader,
            self.output_tail,
            stop.clone(),
            lines,
        )))
    }

    /// Waits for the program to exit, or stops it on cancel or timeout. The payload's timeout
    /// is capped by the time the runtime leaves this attempt.
    async fn wait(
        &self,
        ctx: &TaskContext,
        child: &mut Child,
        group: &ProcessGroup,
        timeout: Option<Duration>,
    ) -> Ending {
        let (limit, limit_is_timeout) = match (timeout, ctx.time_left()) {
            (Some(timeout), Some(left)) => (Some(timeout.min(left)), timeout <= left),
            (Some(timeout), None) => (Some(timeout), true),
            (None, left) => (left, false),
        };
        let expired = async {
            match limit {
                Some(limit) => tokio::time::sleep(limit).await,
                None => std::future::pending().await,
            }
        };
        let cause = tokio::select! {
            status = child.wait() => {
                return match status {
                    Ok(status) => Ending::Exited(status),
                    Err(e) => Ending::WaitFailed(e),
                };
            }
            () = ctx.cancelled() => StopCause::Asked,
            () = expired => match (limit_is_timeout, timeout) {
                (true, Some(timeout)) => StopCause::Timeout(timeout),
                _ => StopCause::Asked,
            },
        };
        let signal = self.terminate(child, group).await;
        Ending::Stopped { cause, signal }
    }

    /// SIGTERMs the group, waits up to `kill_after` for the leader, then SIGKILLs the group.
    /// Returns the signal that was needed.
    async fn terminate(&self, child: &mut Child, group: &ProcessGroup) -> &'static str {
        group.signal(Signal::SIGTERM);
        if let Ok(Ok(_)) = tokio::time::timeout(self.kill_after, child.wait()).await {
            return "sigterm";
        }
        group.signal(Signal::SIGKILL);
        if let Err(e) = child.start_kill() {
            tracing::debug!(error = %e, "leader already gone");
        }
        if let Err(e) = child.wait().await {
            tracing::warn!(error = %e, "cannot reap the program after SIGKILL");
        }
        "sigkill"
    }
}

/// Collects both tails, giving the pipes [`OUTPUT_DRAIN_GRACE`] to close.
async fn drain(
    stdout: Option<AbortOnDropHandle<Tail>>,
    stderr: Option<AbortOnDropHandle<Tail>>,
    stop_reading: CancellationToken,
) -> (String, String) {
    async fn text(reader: Option<AbortOnDropHandle<Tail>>) -> String {
        match reader {
            Some(reader) => reader.await.map(Tail::into_text).unwrap_or_default(),
            None => String::new(),
        }
    }
    let mut both = std::pin::pin!(async { tokio::join!(text(stdout), text(stderr)) });
    match tokio::time::timeout(OUTPUT_DRAIN_GRACE, both.as_mut()).await {
        Ok(tails) => tails,
        Err(_) => {
            tracing::warn!(
                grace = %humantime::format_duration(OUTPUT_DRAIN_GRACE),
                "output pipes still open after the program's group was killed (a process left the group?)"
            );
            stop_reading.cancel();
            both.await
        }
    }
}

/// The name of the signal that killed the program, if one did.
fn exit_signal(status: ExitStatus) -> Option<&'static str> {
    use std::os::unix::process::ExitStatusExt;
    status
        .signal()
        .and_then(|n| Signal::try_from(n).ok())
        .map(Signal::as_str)
}

/// `head`, then `: ` and the last non-empty line of `stderr` (at most
/// [`MAX_ERROR_LINE_BYTES`]) if there is one.
fn with_last_line(head: String, stderr: &str) -> String {
    let line = stderr
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or_default();
    if line.is_empty() {
        return head;
    }
    let mut end = line.len().min(MAX_ERROR_LINE_BYTES);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{head}: {}", &line[..end])
}

#[cfg(test)]
mod tests;
