//! Local access on a shared host (DESIGN "Local access"): the `leasehold` binary run with a
//! clean environment as this user or as another one (`nobody`, switched to with `setpriv`),
//! and agents with the secure local default whose sockets are in a runtime directory of the
//! test's own.
//!
//! Invariants: a command run here sees only `PATH`, `HOME=/` and the variables its test
//! names, and runs in `/`, so neither the developer's environment nor the working directory
//! changes what it talks to. Running as another user needs root (`setpriv` switches uid and
//! gid and drops the supplementary groups); what that user runs and where it looks must be
//! reachable for it, hence [`open_dir`] and [`binary_for_others`].

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use leasehold_shared::local::{RUNTIME_DIR_ENV, socket_name};

use crate::agent::AgentHandle;
use crate::bin::binary;
use crate::cli::{CLI_TIMEOUT, CliOutput};
use crate::db::TestDb;
use crate::fleet::start_agent;
use crate::scratch::scratch_dir;
use crate::wait::wait_until;

/// uid and gid of `nobody`, the other local user.
pub const NOBODY_UID: u32 = 65534;
/// The `PATH` of a clean environment.
pub const CLEAN_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// The agent's switch that makes loopback TCP without a token an operator.
const INSECURE_LOCAL_ENV: &str = "LEASEHOLD_INSECURE_LOCAL";

/// Who runs a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum User {
    /// The test process's own user (root).
    Me,
    /// `nobody` ([`NOBODY_UID`]).
    Nobody,
}

/// A command that runs `program` as `user`: itself, or through `setpriv` with the user's uid
/// and gid and no supplementary groups.
pub fn command_as(user: User, program: impl AsRef<OsStr>) -> tokio::process::Command {
    match user {
        User::Me => tokio::process::Command::new(program),
        User::Nobody => {
            let mut cmd = tokio::process::Command::new("setpriv");
            cmd.arg(format!("--reuid={NOBODY_UID}"))
                .arg(format!("--regid={NOBODY_UID}"))
                .args(["--clear-groups", "--"])
                .arg(program);
            cmd
        }
    }
}

/// Runs `bin ARGS…` as `user` to its end, with a clean environment (`PATH`, `HOME=/`, then
/// `envs`), in `/`, stdin closed; killed after [`CLI_TIMEOUT`].
pub async fn run_clean(
    user: User,
    bin: &Path,
    args: &[&str],
    envs: &[(&str, &str)],
) -> anyhow::Result<CliOutput> {
    let mut cmd = command_as(user, bin);
    cmd.args(args)
        .env_clear()
        .env("PATH", CLEAN_PATH)
        .env("HOME", "/")
        .envs(envs.iter().copied())
        .current_dir("/")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(CLI_TIMEOUT, cmd.output())
        .await
        .with_context(|| {
            format!(
                "`{} {args:?}` as {user:?} did not exit within {CLI_TIMEOUT:?}",
                bin.display()
            )
        })?
        .with_context(|| format!("running `{} {args:?}` as {user:?}", bin.display()))?;
    Ok(CliOutput {
        args: args.iter().map(|s| s.to_string()).collect(),
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}

/// A new scratch directory (see [`scratch_dir`]) that other users may enter and read (0755,
/// whatever the umask): for [`binary_for_others`] and an agent's runtime directory below it
/// (the agent makes that one 0700 itself).
pub fn open_dir(prefix: &str) -> anyhow::Result<PathBuf> {
    let dir = scratch_dir(prefix)?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("opening {} to other users", dir.display()))?;
    Ok(dir)
}

/// A copy of `leasehold` in `dir/bin` that another user may run (the build directory under
/// /root is out of its reach); `dir` must be reachable for it ([`open_dir`]).
pub async fn binary_for_others(dir: &Path) -> anyhow::Result<PathBuf> {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).with_context(|| format!("creating {}", bin.display()))?;
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("opening {} to other users", bin.display()))?;
    let path = bin.join("leasehold");
    let built = binary("leasehold").await?;
    std::fs::copy(&built, &path)
        .with_context(|| format!("copying {} to {}", built.display(), path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("making {} executable for others", path.display()))?;
    Ok(path)
}

/// Starts `leasehold-agent` (handlers `noop`) with its socket in `runtime` and loopback TCP
/// without a token read-only, unless `insecure_local`: the handle and its TCP address.
pub async fn start_local_agent(
    db: &TestDb,
    name: &str,
    runtime: &Path,
    insecure_local: bool,
    extra: &[&str],
) -> anyhow::Result<(AgentHandle, String)> {
    let envs = vec![
        (INSECURE_LOCAL_ENV.to_string(), insecure_local.to_string()),
        (RUNTIME_DIR_ENV.to_string(), runtime.display().to_string()),
    ];
    start_agent(db, name, "noop", extra, envs).await
}

/// The socket in `runtime` of the agent listening on TCP `addr` (`HOST:PORT`).
pub fn socket_of(runtime: &Path, addr: &str) -> anyhow::Result<PathBuf> {
    let port: u16 = addr
        .rsplit(':')
        .next()
        .and_then(|port| port.parse().ok())
        .with_context(|| format!("{addr:?} does not end in a port"))?;
    Ok(runtime.join(socket_name(port)))
}

/// Waits up to `timeout` for `path` to exist (an agent's socket appears after it registered).
pub async fn wait_for_path(path: &Path, timeout: Duration) -> anyhow::Result<()> {
    let what = format!("{} exists", path.display());
    wait_until(&what, timeout, || async { Ok(path.exists()) }).await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_socket_of_an_address_is_named_after_its_port() {
        let runtime = Path::new("/run/x");
        assert_eq!(
            socket_of(runtime, "127.0.0.1:4123").unwrap(),
            runtime.join("agent-4123.sock")
        );
        assert!(socket_of(runtime, "localhost").is_err());
    }
}
