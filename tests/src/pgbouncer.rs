//! A private PgBouncer per test (issue 25: agents behind a pooler in transaction mode).
//!
//! [`PgBouncer::start`] writes `pgbouncer.ini` and `userlist.txt` into a fresh directory
//! `<temp dir>/leasehold-pgbouncer-<pid>-<n>` and runs `/usr/sbin/pgbouncer` in the foreground
//! as a child of the test (so drop can stop it: `SIGTERM`, then `SIGKILL`), listening on a
//! free port of 127.0.0.1 only (no unix socket), with trust authentication for the users
//! `postgres` and `root`. Every database name maps to the same one upstream (`* = host=… port=…`).
//! `ignore_startup_parameters` is **not** set unless a test asks: a client that sends a startup
//! parameter PgBouncer does not track (`options`, sqlx's default `extra_float_digits`) is
//! refused, as on a stock installation, and the agent must cope with that.
//!
//! [`PgBouncer::for_cluster`] points it at a [`PgCluster`] over the cluster's **unix socket**:
//! PgBouncer's server connections then show in `pg_stat_activity` with no client address,
//! while everything connecting over TCP (agents' direct connections, the test's own pools)
//! shows 127.0.0.1. [`server_connections`] counts the former: the connections PgBouncer holds
//! to a database, measured on the upstream server.
//!
//! The user given in `admin_users` / `stats_users` is the cluster's (`postgres`), so
//! [`PgBouncer::show`] can read `SHOW POOLS` and the like from the `pgbouncer` admin database.
//!
//! PgBouncer refuses to run as root: as root (as on CI) it runs as the `postgres` user (the
//! directory is handed to that user first), as the PostgreSQL programs do in
//! [`crate::server`]. Dropping the handle stops the process and removes the directory (its log
//! tail is printed first when the thread is panicking).

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgRow};
use sqlx::{AssertSqlSafe, Column as _, ConnectOptions as _, Connection, Row as _};

use crate::cluster::{PgCluster, free_port};
use crate::scratch::scratch_dir;

/// The PgBouncer program (Debian's package; `.ci/run` installs it).
pub const PROGRAM: &str = "/usr/sbin/pgbouncer";
/// The user of [`PgBouncer::url`]: the private clusters' superuser (see [`PgCluster::url`]).
pub const USER: &str = "postgres";
/// Users allowed in (trust authentication still wants them listed in the auth file).
const USERS: [&str; 2] = ["postgres", "root"];
/// Longest PgBouncer may take to answer a query after it was spawned.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(20);
/// Attempts at starting on a fresh port (another process may take the port in between).
const START_ATTEMPTS: u32 = 3;
/// How long drop waits after `SIGTERM` before `SIGKILL`.
const STOP_GRACE: Duration = Duration::from_secs(3);
/// Lines of the log quoted in errors.
const LOG_TAIL_LINES: usize = 30;

/// PgBouncer settings a test chooses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgBouncerOptions {
    /// `pool_mode`: `transaction` (the default), `session` or `statement`.
    pub pool_mode: String,
    /// `default_pool_size`: most server connections per database and user.
    pub default_pool_size: u32,
    /// `max_client_conn`: most client connections in all.
    pub max_client_conn: u32,
    /// `ignore_startup_parameters` (comma-separated), or none: a stock PgBouncer refuses
    /// `options`; one told to ignore it drops the settings silently.
    pub ignore_startup_parameters: Option<String>,
}

impl Default for PgBouncerOptions {
    fn default() -> Self {
        Self {
            pool_mode: "transaction".to_string(),
            default_pool_size: 10,
            max_client_conn: 1000,
            ignore_startup_parameters: None,
        }
    }
}

/// A running PgBouncer of the test's own. Stopped and its directory removed on drop.
#[derive(Debug)]
pub struct PgBouncer {
    child: Option<Child>,
    dir: PathBuf,
    port: u16,
    options: PgBouncerOptions,
}

impl PgBouncer {
    /// Starts PgBouncer in front of the server at `upstream_host` (a host name or address, or
    /// a directory holding the server's unix socket) and `upstream_port`, on a free port of
    /// 127.0.0.1; returns once a query through it (to the upstream `postgres` database)
    /// answers.
    pub async fn start(
        upstream_host: &str,
        upstream_port: u16,
        options: PgBouncerOptions,
    ) -> anyhow::Result<PgBouncer> {
        if !Path::new(PROGRAM).exists() {
            bail!("{PROGRAM} is missing: install Debian's pgbouncer package (.ci/run does)");
        }
        let dir = scratch_dir("leasehold-pgbouncer")?;
        // From here on, drop removes the directory (and stops the process once there is one).
        let mut bouncer = PgBouncer {
            child: None,
            dir,
            port: 0,
            options,
        };
        let run_as = run_as().await?;
        if let Some((uid, gid)) = run_as {
            chown(&bouncer.dir, uid, gid)?;
        }
        let mut last_error = None;
        for _ in 0..START_ATTEMPTS {
            bouncer.port = free_port()?;
            bouncer.write_config(upstream_host, upstream_port)?;
            match bouncer.spawn_and_wait(run_as).await {
                Ok(()) => return Ok(bouncer),
                Err(error) => {
                    bouncer.stop();
                    last_error = Some(error);
                }
            }
        }
        Err(last_error
            .unwrap_or_else(|| anyhow::anyhow!("no attempt made"))
            .context(format!(
                "starting PgBouncer in {} failed {START_ATTEMPTS} times",
                bouncer.dir.display()
            )))
    }

    /// [`PgBouncer::start`] in front of `cluster`, over its unix socket (see the module
    /// documentation: PgBouncer's server connections are then the ones without a client
    /// address, which [`server_connections`] counts).
    pub async fn for_cluster(
        cluster: &PgCluster,
        options: PgBouncerOptions,
    ) -> anyhow::Result<PgBouncer> {
        let socket_dir = cluster.dir().display().to_string();
        PgBouncer::start(&socket_dir, cluster.port(), options).await
    }

    /// The URL of database `db` through PgBouncer, as [`USER`] (the user of
    /// [`PgCluster::url`]).
    pub fn url(&self, db: &str) -> String {
        format!("postgres://{USER}@127.0.0.1:{}/{db}", self.port)
    }

    /// The port PgBouncer listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The directory holding the configuration and the log.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The settings it was started with.
    pub fn options(&self) -> &PgBouncerOptions {
        &self.options
    }

    /// The last lines of PgBouncer's log file, or of its stderr (where it also logs, and where
    /// errors before the log file is open go) when the file is missing or empty.
    pub fn log_tail(&self) -> String {
        let log = self.dir.join("pgbouncer.log");
        match std::fs::metadata(&log) {
            Ok(meta) if meta.len() > 0 => tail(&log, LOG_TAIL_LINES),
            _ => tail(&self.dir.join("stderr"), LOG_TAIL_LINES),
        }
    }

    /// Whether the PgBouncer process is still running.
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Runs the admin console command `command` (e.g. `SHOW POOLS`): see [`show`].
    pub async fn show(&self, command: &str) -> anyhow::Result<Vec<ConsoleRow>> {
        show(&self.admin_url(), command).await
    }

    /// `SHOW POOLS` summed over the pools of database `db`: see [`pool_stats`].
    pub async fn pool_stats(&self, db: &str) -> anyhow::Result<PoolStats> {
        pool_stats(&self.admin_url(), db).await
    }

    /// The URL of the admin console (the `pgbouncer` database).
    pub fn admin_url(&self) -> String {
        self.url("pgbouncer")
    }

    fn write_config(&self, upstream_host: &str, upstream_port: u16) -> anyhow::Result<()> {
        let dir = self.dir.display();
        let o = &self.options;
        let ini = format!(
            "[databases]\n\
             * = host={upstream_host} port={upstream_port}\n\
             \n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {port}\n\
             unix_socket_dir =\n\
             auth_type = trust\n\
             auth_file = {dir}/userlist.txt\n\
             admin_users = {USER}\n\
             stats_users = {USER}\n\
             pool_mode = {pool_mode}\n\
             default_pool_size = {pool_size}\n\
             min_pool_size = 0\n\
             reserve_pool_size = 0\n\
             max_client_conn = {max_client}\n\
             server_idle_timeout = 60\n\
             server_login_retry = 1\n\
             logfile = {dir}/pgbouncer.log\n\
             log_connections = 0\n\
             log_disconnections = 0\n\
             stats_period = 60\n\
             {ignore}",
            ignore = o
                .ignore_startup_parameters
                .as_deref()
                .map(|p| format!("ignore_startup_parameters = {p}\n"))
                .unwrap_or_default(),
            port = self.port,
            pool_mode = o.pool_mode,
            pool_size = o.default_pool_size,
            max_client = o.max_client_conn,
        );
        write_file(&self.dir.join("pgbouncer.ini"), &ini)?;
        let users: String = USERS.iter().map(|u| format!("\"{u}\" \"\"\n")).collect();
        write_file(&self.dir.join("userlist.txt"), &users)
    }

    async fn spawn_and_wait(&mut self, run_as: Option<(u32, u32)>) -> anyhow::Result<()> {
        let stderr_path = self.dir.join("stderr");
        let stderr = std::fs::File::create(&stderr_path)
            .with_context(|| format!("creating {}", stderr_path.display()))?;
        let mut command = Command::new(PROGRAM);
        command
            .arg(self.dir.join("pgbouncer.ini"))
            // The postgres user may not be allowed into the current directory.
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        if let Some((uid, gid)) = run_as {
            command.uid(uid).gid(gid);
        }
        let child = command
            .spawn()
            .with_context(|| format!("spawning {PROGRAM}"))?;
        self.child = Some(child);

        let url = self.url("postgres");
        let start = Instant::now();
        loop {
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait().context("checking on PgBouncer")?
            {
                bail!(
                    "PgBouncer on port {} exited with {status}; end of its log:\n{}",
                    self.port,
                    self.log_tail()
                );
            }
            match answers(&url).await {
                Ok(()) => return Ok(()),
                Err(error) if start.elapsed() >= ANSWER_TIMEOUT => {
                    return Err(error.context(format!(
                        "PgBouncer does not answer at {url} after {ANSWER_TIMEOUT:?}; end of its log:\n{}",
                        self.log_tail()
                    )));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// `SIGTERM`, then `SIGKILL` after [`STOP_GRACE`]; reaps the process.
    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if matches!(child.try_wait(), Ok(None)) {
            let _ = Command::new("kill")
                .args(["-s", "TERM", &child.id().to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let start = Instant::now();
            while matches!(child.try_wait(), Ok(None)) && start.elapsed() < STOP_GRACE {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "leasehold-tests: PgBouncer in {} (port {}); end of its log:\n{}",
                self.dir.display(),
                self.port,
                self.log_tail()
            );
        }
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `SHOW POOLS` of one database, summed over its pools (users).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Client connections paired with a server connection (or idle in the pool).
    pub cl_active: u64,
    /// Client connections waiting for a server connection.
    pub cl_waiting: u64,
    /// Server connections paired with a client.
    pub sv_active: u64,
    /// Server connections idle and ready.
    pub sv_idle: u64,
    /// Server connections idle but to be checked before use.
    pub sv_used: u64,
    /// Server connections being tested or reset.
    pub sv_tested: u64,
    /// Server connections logging in.
    pub sv_login: u64,
}

impl PoolStats {
    /// Client connections in all (active and waiting).
    pub fn clients(&self) -> u64 {
        self.cl_active + self.cl_waiting
    }

    /// Server connections in all.
    pub fn servers(&self) -> u64 {
        self.sv_active + self.sv_idle + self.sv_used + self.sv_tested + self.sv_login
    }
}

/// One row of an admin console answer: column name to value as text (`None` for NULL).
pub type ConsoleRow = BTreeMap<String, Option<String>>;

/// Runs the admin console command `command` (e.g. `SHOW POOLS`) at `admin_url` (a URL of the
/// `pgbouncer` database, as a user of `admin_users` or `stats_users`): one map per row.
pub async fn show(admin_url: &str, command: &str) -> anyhow::Result<Vec<ConsoleRow>> {
    let mut conn = PgConnection::connect_with(&client_options(admin_url)?)
        .await
        .with_context(|| format!("connecting to PgBouncer's admin console at {admin_url}"))?;
    let rows: Result<Vec<PgRow>, _> = sqlx::raw_sql(AssertSqlSafe(command.to_string()))
        .fetch_all(&mut conn)
        .await;
    let _ = conn.close().await;
    let rows = rows.with_context(|| format!("{command} on PgBouncer's admin console"))?;
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        let mut map = BTreeMap::new();
        for (i, column) in row.columns().iter().enumerate() {
            // The admin console answers in text; its numbers decode as text unchecked.
            let value: Option<String> = row
                .try_get_unchecked(i)
                .with_context(|| format!("reading column {} of {command}", column.name()))?;
            map.insert(column.name().to_string(), value);
        }
        out.push(map);
    }
    Ok(out)
}

/// `SHOW POOLS` at `admin_url` (see [`show`]), summed over the pools of database `db`.
pub async fn pool_stats(admin_url: &str, db: &str) -> anyhow::Result<PoolStats> {
    let rows = show(admin_url, "SHOW POOLS").await?;
    let mut stats = PoolStats::default();
    for row in rows
        .iter()
        .filter(|r| r.get("database").and_then(|d| d.as_deref()) == Some(db))
    {
        let n = |name: &str| -> u64 {
            row.get(name)
                .and_then(|v| v.as_deref())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        stats.cl_active += n("cl_active");
        stats.cl_waiting += n("cl_waiting");
        stats.sv_active += n("sv_active");
        stats.sv_idle += n("sv_idle");
        stats.sv_used += n("sv_used");
        stats.sv_tested += n("sv_tested");
        stats.sv_login += n("sv_login");
    }
    Ok(stats)
}

/// What a [`ConnectionSampler`] saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Samples {
    /// Samples taken.
    pub count: u64,
    /// Most server connections PgBouncer held to the database, counted on the upstream
    /// ([`server_connections`]).
    pub max_upstream_servers: i64,
    /// Most server connections `SHOW POOLS` reported for the database.
    pub max_pool_servers: u64,
    /// Most client connections (active and waiting) `SHOW POOLS` reported for the database.
    pub max_pool_clients: u64,
    /// Most clients waiting for a server connection at once.
    pub max_pool_waiting: u64,
}

/// Samples, every `every` until [`ConnectionSampler::finish`], the connections PgBouncer holds
/// to one database: on the upstream ([`server_connections`]) and in `SHOW POOLS`.
#[derive(Debug)]
pub struct ConnectionSampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<anyhow::Result<Samples>>,
}

impl ConnectionSampler {
    /// Starts sampling database `db`: `upstream` is a pool connected to the upstream server
    /// directly over TCP, `admin_url` PgBouncer's admin console ([`PgBouncer::admin_url`]).
    pub fn start(upstream: PgPool, admin_url: String, db: &str, every: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let db = db.to_string();
        let flag = Arc::clone(&stop);
        let task = tokio::spawn(async move {
            let mut samples = Samples::default();
            loop {
                let servers = server_connections(&upstream, &db).await?;
                let pools = pool_stats(&admin_url, &db).await?;
                samples.count += 1;
                samples.max_upstream_servers = samples.max_upstream_servers.max(servers);
                samples.max_pool_servers = samples.max_pool_servers.max(pools.servers());
                samples.max_pool_clients = samples.max_pool_clients.max(pools.clients());
                samples.max_pool_waiting = samples.max_pool_waiting.max(pools.cl_waiting);
                if flag.load(Ordering::SeqCst) {
                    return Ok(samples);
                }
                tokio::time::sleep(every).await;
            }
        });
        Self { stop, task }
    }

    /// Takes one last sample and returns what was seen; fails if a sample failed.
    pub async fn finish(self) -> anyhow::Result<Samples> {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.context("the connection sampler panicked")?
    }
}

/// Connection options for `url` through PgBouncer: sqlx's default `extra_float_digits`
/// startup parameter is left out (PgBouncer refuses parameters it does not track), and no
/// statement is logged. Use the simple protocol (`sqlx::raw_sql`) on such a connection in
/// transaction mode: a prepared statement may meet another server connection.
pub fn client_options(url: &str) -> anyhow::Result<PgConnectOptions> {
    Ok(PgConnectOptions::from_str(url)
        .with_context(|| format!("bad PostgreSQL URL {url}"))?
        .extra_float_digits(None)
        .statement_cache_capacity(0)
        .disable_statement_logging())
}

/// Connects to `url` through PgBouncer and runs `SELECT 1`, within a few seconds.
pub async fn answers(url: &str) -> anyhow::Result<()> {
    let options = client_options(url)?;
    let attempt = async {
        let mut conn = PgConnection::connect_with(&options).await?;
        sqlx::raw_sql("SELECT 1").execute(&mut conn).await?;
        conn.close().await?;
        anyhow::Ok(())
    };
    tokio::time::timeout(Duration::from_secs(5), attempt)
        .await
        .context("timed out connecting through PgBouncer")?
        .with_context(|| format!("querying through PgBouncer at {url}"))
}

/// The server connections PgBouncer holds to database `db`, counted on the upstream server
/// (`pool`, connected over TCP): client backends of `db` without a client address, i.e. over
/// the unix socket [`PgBouncer::for_cluster`] uses. Direct TCP connections (the agents'
/// LISTEN connections, the ledger's, the test's own) are not counted.
pub async fn server_connections(pool: &PgPool, db: &str) -> anyhow::Result<i64> {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity \
         WHERE datname = $1 AND backend_type = 'client backend' \
           AND client_addr IS NULL AND pid <> pg_backend_pid()",
    )
    .bind(db)
    .fetch_one(pool)
    .await
    .with_context(|| format!("counting PgBouncer's server connections to {db}"))
}

/// As root: the `postgres` user's uid and gid, to run PgBouncer as; `None` otherwise.
async fn run_as() -> anyhow::Result<Option<(u32, u32)>> {
    if !crate::server::running_as_root().await {
        return Ok(None);
    }
    let id = |flag: &str| -> anyhow::Result<u32> {
        let output = Command::new("id")
            .args([flag, "postgres"])
            .stdin(Stdio::null())
            .output()
            .context("running id")?;
        if !output.status.success() {
            bail!(
                "PgBouncer refuses to run as root and there is no postgres user to run it as: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        String::from_utf8_lossy(&output.stdout)
            .trim()
            .parse()
            .context("parsing the output of id")
    };
    Ok(Some((id("-u")?, id("-g")?)))
}

fn chown(dir: &Path, uid: u32, gid: u32) -> anyhow::Result<()> {
    std::os::unix::fs::chown(dir, Some(uid), Some(gid))
        .with_context(|| format!("handing {} to uid {uid}", dir.display()))
}

fn write_file(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

fn tail(path: &Path, n: usize) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        }
        Err(error) => format!("(cannot read {}: {error})", path.display()),
    }
}
