//! Finds the PostgreSQL server the tests run against, once per test process.
//!
//! With `DATABASE_URL` set, that server is used as is: the URL must be admin-capable (allowed
//! to create and drop databases). Without it the harness starts, or reuses, a throwaway
//! cluster of its own in `<temp dir>/leasehold-testpg-v1`, listening on 127.0.0.1:54329 with
//! durability switched off (fsync, synchronous commit and full-page writes) for speed. Several
//! test processes may race to start it: an exclusive file lock beside the cluster's directory
//! serialises them, and whoever comes second finds the server answering. The cluster is left
//! running when the tests end, to be reused by the next run.
//!
//! As root (as on CI), `initdb` and `pg_ctl` run as the `postgres` user through `runuser`,
//! since PostgreSQL refuses to run as root.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::str::FromStr;
use std::time::Duration;

use anyhow::{Context, bail};
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{ConnectOptions, Connection};
use tokio::process::Command;
use tokio::sync::OnceCell;

/// Port the throwaway cluster listens on (127.0.0.1 only).
pub const LOCAL_PORT: u16 = 54329;
/// Name of the throwaway cluster's directory under [`std::env::temp_dir`]; the suffix is
/// bumped whenever the cluster's settings change incompatibly.
pub const LOCAL_DIR_NAME: &str = "leasehold-testpg-v1";
/// File written into the cluster's directory once `initdb` has completed.
const INITDB_MARKER: &str = "leasehold-initdb-complete";

/// Server settings of the throwaway cluster, besides the port and socket directory.
const LOCAL_SETTINGS: &[&str] = &[
    "listen_addresses=127.0.0.1",
    "fsync=off",
    "synchronous_commit=off",
    "full_page_writes=off",
    "max_connections=400",
    "shared_buffers=256MB",
];

static ADMIN_URL: OnceCell<String> = OnceCell::const_new();

/// The admin URL of the server the tests use: `DATABASE_URL` when set, else the throwaway
/// cluster's (started first if need be). Worked out once per process.
pub async fn admin_url() -> anyhow::Result<String> {
    ADMIN_URL.get_or_try_init(discover).await.cloned()
}

/// The throwaway cluster's data directory.
pub fn local_cluster_dir() -> PathBuf {
    std::env::temp_dir().join(LOCAL_DIR_NAME)
}

/// The admin URL of the throwaway cluster.
pub fn local_cluster_url() -> String {
    format!("postgres://postgres@127.0.0.1:{LOCAL_PORT}/postgres")
}

async fn discover() -> anyhow::Result<String> {
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.trim().is_empty() => {
            check_answers(&url)
                .await
                .with_context(|| format!("the server at DATABASE_URL ({url}) does not answer"))?;
            Ok(url)
        }
        _ => {
            let url = local_cluster_url();
            ensure_local_cluster(&url).await?;
            Ok(url)
        }
    }
}

/// Connects to `url` and runs a trivial query, within a few seconds.
pub(crate) async fn check_answers(url: &str) -> anyhow::Result<()> {
    let options = PgConnectOptions::from_str(url)
        .with_context(|| format!("bad PostgreSQL URL {url}"))?
        .disable_statement_logging();
    let attempt = async {
        let mut conn = PgConnection::connect_with(&options).await?;
        sqlx::query("SELECT 1").execute(&mut conn).await?;
        conn.close().await?;
        anyhow::Ok(())
    };
    tokio::time::timeout(Duration::from_secs(5), attempt)
        .await
        .context("timed out connecting")?
}

async fn answers(url: &str) -> bool {
    check_answers(url).await.is_ok()
}

/// Starts the throwaway cluster unless it already answers at `url`, creating it if need be.
async fn ensure_local_cluster(url: &str) -> anyhow::Result<()> {
    if answers(url).await {
        return Ok(());
    }
    let dir = local_cluster_dir();
    let lock_path = std::env::temp_dir().join(format!("{LOCAL_DIR_NAME}.lock"));
    let lock = tokio::task::spawn_blocking(move || -> anyhow::Result<std::fs::File> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .with_context(|| format!("opening lock file {}", lock_path.display()))?;
        file.lock()
            .with_context(|| format!("locking {}", lock_path.display()))?;
        Ok(file)
    })
    .await
    .context("lock task failed")??;

    // Another process may have started the server while this one waited for the lock.
    let result = if answers(url).await {
        Ok(())
    } else {
        start_locked(&dir, url).await
    };
    drop(lock);
    result
}

async fn start_locked(dir: &Path, url: &str) -> anyhow::Result<()> {
    let bin = find_bindir().await?;
    let as_root = running_as_root().await;

    if !dir.join(INITDB_MARKER).exists() {
        init_cluster(&bin, dir, as_root).await?;
    }

    let socket_dir = dir.display().to_string();
    let mut options = format!("-p {LOCAL_PORT} -c unix_socket_directories='{socket_dir}'");
    for setting in LOCAL_SETTINGS {
        options.push_str(" -c ");
        options.push_str(setting);
    }
    let log = dir.join("log");
    let start = run_pg_tool(
        &bin,
        "pg_ctl",
        as_root,
        &[
            "-D".as_ref(),
            dir.as_os_str(),
            "-l".as_ref(),
            log.as_os_str(),
            "-o".as_ref(),
            options.as_ref(),
            "-w".as_ref(),
            "-t".as_ref(),
            "60".as_ref(),
            "start".as_ref(),
        ],
    )
    .await;
    if let Err(error) = start {
        // pg_ctl fails when a server is already running on this directory (say, started by
        // a process that did not take the lock); it still counts if it answers.
        if answers(url).await {
            return Ok(());
        }
        let tail = log_tail(&log);
        return Err(error.context(format!(
            "starting the throwaway PostgreSQL cluster in {} failed; end of its log:\n{tail}",
            dir.display()
        )));
    }

    for _ in 0..100 {
        if answers(url).await {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!(
        "the throwaway PostgreSQL cluster in {} started but does not answer at {url}; end of its log:\n{}",
        dir.display(),
        log_tail(&log)
    )
}

/// Runs `initdb` into `dir`, wiping whatever a crashed earlier attempt left there.
pub(crate) async fn init_cluster(bin: &Path, dir: &Path, as_root: bool) -> anyhow::Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)
            .with_context(|| format!("removing half-made cluster directory {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    if as_root {
        let status = Command::new("chown")
            .arg("-R")
            .arg("postgres:postgres")
            .arg(dir)
            .stdin(Stdio::null())
            .status()
            .await
            .context("running chown")?;
        if !status.success() {
            bail!("chown postgres {} failed: {status}", dir.display());
        }
    }
    run_pg_tool(
        bin,
        "initdb",
        as_root,
        &[
            "-A".as_ref(),
            "trust".as_ref(),
            "-U".as_ref(),
            "postgres".as_ref(),
            "-E".as_ref(),
            "UTF8".as_ref(),
            "--no-locale".as_ref(),
            "--no-sync".as_ref(),
            "-D".as_ref(),
            dir.as_os_str(),
        ],
    )
    .await
    .with_context(|| format!("initdb of a cluster in {}", dir.display()))?;
    std::fs::write(dir.join(INITDB_MARKER), b"initdb completed\n")
        .with_context(|| format!("marking {} as initialised", dir.display()))?;
    Ok(())
}

/// Runs one PostgreSQL program from `bin`, as `postgres` when we are root.
pub(crate) async fn run_pg_tool(
    bin: &Path,
    program: &str,
    as_root: bool,
    args: &[&std::ffi::OsStr],
) -> anyhow::Result<()> {
    run_pg_tool_with_env(bin, program, as_root, &[], args).await
}

/// [`run_pg_tool`] with extra environment variables (passed through `env(1)`, so `runuser`
/// cannot drop them), which a server started by `pg_ctl` inherits.
pub(crate) async fn run_pg_tool_with_env(
    bin: &Path,
    program: &str,
    as_root: bool,
    env: &[(String, String)],
    args: &[&std::ffi::OsStr],
) -> anyhow::Result<()> {
    let path = bin.join(program);
    let mut command = match (as_root, env.is_empty()) {
        (true, _) => {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--", "env"]);
            command
        }
        (false, false) => Command::new("env"),
        (false, true) => Command::new(&path),
    };
    if as_root || !env.is_empty() {
        command
            .args(env.iter().map(|(k, v)| format!("{k}={v}")))
            .arg(&path);
    }
    command
        .args(args)
        // The postgres user may not be allowed into the current directory.
        .current_dir(std::env::temp_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let output = command
        .output()
        .await
        .with_context(|| format!("running {}", path.display()))?;
    if !output.status.success() {
        bail!(
            "{} exited with {}:\n{}{}",
            path.display(),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

/// The directory holding `initdb` and `pg_ctl`: `pg_config --bindir`, else the newest
/// `/usr/lib/postgresql/<version>/bin`.
pub(crate) async fn find_bindir() -> anyhow::Result<PathBuf> {
    if let Ok(output) = Command::new("pg_config")
        .arg("--bindir")
        .stdin(Stdio::null())
        .output()
        .await
        && output.status.success()
    {
        let dir = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
        if dir.join("initdb").exists() && dir.join("pg_ctl").exists() {
            return Ok(dir);
        }
    }
    let mut best: Option<(Vec<u64>, PathBuf)> = None;
    if let Ok(entries) = std::fs::read_dir("/usr/lib/postgresql") {
        for entry in entries.flatten() {
            let bin = entry.path().join("bin");
            if !bin.join("initdb").exists() || !bin.join("pg_ctl").exists() {
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            let version: Vec<u64> = name.split('.').map(|p| p.parse().unwrap_or(0)).collect();
            if best.as_ref().is_none_or(|(v, _)| version > *v) {
                best = Some((version, bin));
            }
        }
    }
    match best {
        Some((_, bin)) => Ok(bin),
        None => bail!(
            "no PostgreSQL server binaries found (neither `pg_config --bindir` nor \
             /usr/lib/postgresql/*/bin has initdb and pg_ctl); install PostgreSQL or set DATABASE_URL"
        ),
    }
}

pub(crate) async fn running_as_root() -> bool {
    match Command::new("id")
        .arg("-u")
        .stdin(Stdio::null())
        .output()
        .await
    {
        Ok(output) => {
            output.status.success() && String::from_utf8_lossy(&output.stdout).trim() == "0"
        }
        Err(_) => false,
    }
}

/// The last lines of the cluster's log, for error messages.
pub(crate) fn log_tail(log: &Path) -> String {
    match std::fs::read_to_string(log) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(30)..].join("\n")
        }
        Err(error) => format!("(cannot read {}: {error})", log.display()),
    }
}
