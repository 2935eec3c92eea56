//! A private PostgreSQL server per test, for the tests that restart or crash the database
//! (`pg_ctl restart -m fast`, `pg_ctl stop -m immediate` then start): the shared server of
//! [`crate::server`] must never be restarted under the other tests' feet.
//!
//! [`PgCluster::start`] runs `initdb` into a fresh directory under [`std::env::temp_dir`] and
//! starts the server on a free port of 127.0.0.1, with trust authentication, its unix socket
//! in the data directory and `fsync` / `full_page_writes` off for speed. `synchronous_commit`
//! stays **on**: with it off, an immediate stop loses commits already acknowledged to the
//! client (they sit in the WAL buffers in shared memory), which would make "every acknowledged
//! completion survives a crash" fail for the harness's sake. `fsync=off` is harmless here since
//! only the server process crashes, never the operating system, so written WAL stays in the
//! page cache.
//!
//! As root, the PostgreSQL programs run as the `postgres` user through `runuser`, as in
//! [`crate::server`]. Dropping the cluster stops it (`-m immediate`) and removes its directory.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use leasehold_shared::store::postgres::MIGRATOR;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::{AssertSqlSafe, ConnectOptions, Connection};

use crate::db::quote_ident;
use crate::server;

/// Server settings of a private cluster, besides the port and socket directory.
const CLUSTER_SETTINGS: &[&str] = &[
    "listen_addresses=127.0.0.1",
    "fsync=off",
    "full_page_writes=off",
    "synchronous_commit=on",
    "max_connections=200",
    "shared_buffers=32MB",
];

/// How long starting, restarting or stopping may take before it counts as a failure.
const PG_CTL_TIMEOUT_SECS: u32 = 60;
/// How long a (re)started server may take to accept connections after `pg_ctl` returned.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);
/// Attempts at starting on a fresh port (another process may take the port in between).
const START_ATTEMPTS: u32 = 3;

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A PostgreSQL server of the test's own. Stopped (`-m immediate`) and deleted on drop.
#[derive(Debug)]
pub struct PgCluster {
    dir: PathBuf,
    port: u16,
    bin: PathBuf,
    as_root: bool,
    /// Settings given to [`PgCluster::start_with`], after [`CLUSTER_SETTINGS`] (so they win).
    extra: Vec<String>,
    /// Environment of the server processes (see [`PgCluster::start_with_env`]).
    env: Vec<(String, String)>,
    /// Whether the server is believed to be running (so drop knows to stop it).
    running: bool,
}

/// A pool of 4 connections to `url` for a test's own reads and writes, each acquired within
/// 10 s (a server being restarted answers within that or the test fails).
pub async fn test_pool(url: &str) -> anyhow::Result<PgPool> {
    PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(10))
        .connect(url)
        .await
        .with_context(|| format!("connecting to {url}"))
}

impl PgCluster {
    /// Creates and starts a fresh cluster on a free port, waiting until it accepts
    /// connections.
    pub async fn start() -> anyhow::Result<PgCluster> {
        PgCluster::start_with(&[]).await
    }

    /// [`PgCluster::start`] with extra server settings (`name=value`, e.g.
    /// `wal_writer_delay=10000ms`), which override the defaults and stay in force across
    /// restarts.
    pub async fn start_with(extra: &[&str]) -> anyhow::Result<PgCluster> {
        PgCluster::start_with_env(extra, Vec::new()).await
    }

    /// [`PgCluster::start_with`], the server processes getting the extra environment `env`
    /// (e.g. `LD_PRELOAD` of libfaketime, to step the database clock: see
    /// [`crate::faketime`]), also across restarts.
    pub async fn start_with_env(
        extra: &[&str],
        env: Vec<(String, String)>,
    ) -> anyhow::Result<PgCluster> {
        let bin = server::find_bindir().await?;
        let as_root = server::running_as_root().await;
        let dir = std::env::temp_dir().join(format!(
            "leasehold-pgcluster-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        server::init_cluster(&bin, &dir, as_root).await?;
        // From here on, drop stops the server and removes the directory.
        let mut cluster = PgCluster {
            dir,
            port: 0,
            bin,
            as_root,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            env,
            running: false,
        };
        let mut last_error = None;
        for _ in 0..START_ATTEMPTS {
            cluster.port = free_port()?;
            match cluster.pg_ctl_start().await {
                Ok(()) => {
                    cluster.running = true;
                    cluster.wait_answers().await?;
                    return Ok(cluster);
                }
                Err(error) => last_error = Some(error),
            }
        }
        Err(last_error
            .unwrap_or_else(|| anyhow::anyhow!("no attempt made"))
            .context(format!(
                "starting a private PostgreSQL cluster in {} failed {START_ATTEMPTS} times",
                cluster.dir.display()
            )))
    }

    /// The port the server listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The cluster's data directory (which also holds its unix socket and its log, `log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The URL of database `db` as the `postgres` superuser.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// The server's address, to point a [`crate::proxy::TcpProxy`] at.
    pub fn addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Creates an empty database `name`.
    pub async fn create_database(&self, name: &str) -> anyhow::Result<()> {
        let mut conn = self.admin_connection().await?;
        let created = sqlx::raw_sql(AssertSqlSafe(format!(
            "CREATE DATABASE {}",
            quote_ident(name)
        )))
        .execute(&mut conn)
        .await
        .with_context(|| format!("creating database {name} on port {}", self.port));
        let _ = conn.close().await;
        created.map(drop)
    }

    /// Creates database `name` and migrates it to the current Leasehold schema; returns its
    /// URL.
    pub async fn create_migrated_database(&self, name: &str) -> anyhow::Result<String> {
        self.create_database(name).await?;
        let url = self.url(name);
        let pool = PgPoolOptions::new()
            .max_connections(2)
            .connect_with(connect_options(&url)?)
            .await
            .with_context(|| format!("connecting to {url}"))?;
        let migrated = MIGRATOR.run(&pool).await;
        pool.close().await;
        migrated.with_context(|| format!("migrating {url}"))?;
        Ok(url)
    }

    /// [`create_migrated_database`](Self::create_migrated_database) and a pool of 4 connections
    /// to it (see [`test_pool`]): its URL and the pool.
    pub async fn migrated_database_pool(&self, name: &str) -> anyhow::Result<(String, PgPool)> {
        let url = self.create_migrated_database(name).await?;
        let pool = test_pool(&url).await?;
        Ok((url, pool))
    }

    /// `pg_ctl restart -m fast`: disconnects every client, checkpoints, starts again; returns
    /// once the server accepts connections.
    pub async fn restart_fast(&mut self) -> anyhow::Result<()> {
        let options = self.server_options();
        let log = self.log_path();
        let result = self
            .pg_ctl(&[
                "-D".as_ref(),
                self.dir.as_os_str(),
                "-l".as_ref(),
                log.as_os_str(),
                "-o".as_ref(),
                options.as_ref(),
                "-m".as_ref(),
                "fast".as_ref(),
                "-w".as_ref(),
                "-t".as_ref(),
                PG_CTL_TIMEOUT_SECS.to_string().as_ref(),
                "restart".as_ref(),
            ])
            .await;
        if let Err(error) = result {
            return Err(self.with_log(error, "pg_ctl restart -m fast"));
        }
        self.running = true;
        self.wait_answers().await
    }

    /// `pg_ctl stop -m immediate`: the server processes quit at once without a checkpoint, as
    /// in a crash; the next start runs crash recovery.
    pub async fn stop_immediate(&mut self) -> anyhow::Result<()> {
        self.stop("immediate").await
    }

    /// `pg_ctl stop -m fast`: every client is disconnected, the server checkpoints and exits;
    /// the next start needs no recovery. Returns once the server is gone.
    pub async fn stop_fast(&mut self) -> anyhow::Result<()> {
        self.stop("fast").await
    }

    async fn stop(&mut self, mode: &str) -> anyhow::Result<()> {
        let result = self
            .pg_ctl(&[
                "-D".as_ref(),
                self.dir.as_os_str(),
                "-m".as_ref(),
                mode.as_ref(),
                "-w".as_ref(),
                "-t".as_ref(),
                PG_CTL_TIMEOUT_SECS.to_string().as_ref(),
                "stop".as_ref(),
            ])
            .await;
        if let Err(error) = result {
            return Err(self.with_log(error, &format!("pg_ctl stop -m {mode}")));
        }
        self.running = false;
        Ok(())
    }

    /// Starts the server again (on the same port) after [`PgCluster::stop_immediate`] or
    /// [`PgCluster::stop_fast`];
    /// returns once it accepts connections (crash recovery included).
    pub async fn start_again(&mut self) -> anyhow::Result<()> {
        if let Err(error) = self.pg_ctl_start().await {
            return Err(self.with_log(error, "starting the cluster again"));
        }
        self.running = true;
        self.wait_answers().await
    }

    /// A streaming standby of this cluster: a base backup (`pg_basebackup -R -X stream`, so it
    /// follows this server), started on a free port with the same settings; returns once it
    /// answers (read-only). Make it synchronous with `synchronous_standby_names` on this one.
    pub async fn standby(&self) -> anyhow::Result<PgCluster> {
        self.standby_with_env(self.env.clone()).await
    }

    /// [`PgCluster::standby`] whose server processes get the environment `env` instead of this
    /// cluster's (e.g. a [`crate::faketime::FakeClock`] of its own: a standby whose clock is
    /// not the primary's).
    pub async fn standby_with_env(&self, env: Vec<(String, String)>) -> anyhow::Result<PgCluster> {
        let dir = std::env::temp_dir().join(format!(
            "leasehold-pgcluster-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .with_context(|| format!("removing stale {}", dir.display()))?;
        }
        let port = self.port.to_string();
        server::run_pg_tool_with_env(
            &self.bin,
            "pg_basebackup",
            self.as_root,
            &self.env,
            &[
                "-h".as_ref(),
                "127.0.0.1".as_ref(),
                "-p".as_ref(),
                port.as_ref(),
                "-U".as_ref(),
                "postgres".as_ref(),
                "-D".as_ref(),
                dir.as_os_str(),
                "-R".as_ref(),
                "-X".as_ref(),
                "stream".as_ref(),
                "-c".as_ref(),
                "fast".as_ref(),
            ],
        )
        .await
        .map_err(|e| self.with_log(e, "pg_basebackup of the cluster"))?;
        // The primary's socket and pid files came along; the standby makes its own.
        let _ = std::fs::remove_file(dir.join("postmaster.pid"));
        let mut standby = PgCluster {
            dir,
            port: 0,
            bin: self.bin.clone(),
            as_root: self.as_root,
            extra: self.extra.clone(),
            env,
            running: false,
        };
        let mut last_error = None;
        for _ in 0..START_ATTEMPTS {
            standby.port = free_port()?;
            match standby.pg_ctl_start().await {
                Ok(()) => {
                    standby.running = true;
                    standby.wait_answers().await?;
                    return Ok(standby);
                }
                Err(error) => last_error = Some(error),
            }
        }
        Err(last_error
            .unwrap_or_else(|| anyhow::anyhow!("no attempt made"))
            .context("starting the standby"))
    }

    /// `pg_ctl promote`: a standby becomes a primary (accepts writes); returns once it does.
    pub async fn promote(&self) -> anyhow::Result<()> {
        let result = self
            .pg_ctl(&[
                "-D".as_ref(),
                self.dir.as_os_str(),
                "-w".as_ref(),
                "-t".as_ref(),
                PG_CTL_TIMEOUT_SECS.to_string().as_ref(),
                "promote".as_ref(),
            ])
            .await;
        result.map_err(|e| self.with_log(e, "pg_ctl promote"))
    }

    /// Runs one statement `sql` (simple protocol, no result) on the `postgres` database as the
    /// superuser, e.g. `ALTER SYSTEM SET …` (one per call: several run as one transaction,
    /// which ALTER SYSTEM refuses).
    pub async fn admin_execute(&self, sql: &str) -> anyhow::Result<()> {
        let mut conn = self.admin_connection().await?;
        let done = sqlx::raw_sql(AssertSqlSafe(sql.to_string()))
            .execute(&mut conn)
            .await
            .with_context(|| format!("running {sql} on port {}", self.port));
        let _ = conn.close().await;
        done.map(drop)
    }

    /// The last lines of the server's log.
    pub fn log_tail(&self) -> String {
        server::log_tail(&self.log_path())
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("log")
    }

    fn server_options(&self) -> String {
        let mut options = format!(
            "-p {} -c unix_socket_directories='{}'",
            self.port,
            self.dir.display()
        );
        let extra = self.extra.iter().map(String::as_str);
        for setting in CLUSTER_SETTINGS.iter().copied().chain(extra) {
            options.push_str(" -c ");
            options.push_str(setting);
        }
        options
    }

    async fn pg_ctl_start(&self) -> anyhow::Result<()> {
        let options = self.server_options();
        let log = self.log_path();
        self.pg_ctl(&[
            "-D".as_ref(),
            self.dir.as_os_str(),
            "-l".as_ref(),
            log.as_os_str(),
            "-o".as_ref(),
            options.as_ref(),
            "-w".as_ref(),
            "-t".as_ref(),
            PG_CTL_TIMEOUT_SECS.to_string().as_ref(),
            "start".as_ref(),
        ])
        .await
        .with_context(|| format!("pg_ctl start on port {}", self.port))
    }

    async fn pg_ctl(&self, args: &[&std::ffi::OsStr]) -> anyhow::Result<()> {
        server::run_pg_tool_with_env(&self.bin, "pg_ctl", self.as_root, &self.env, args).await
    }

    /// Waits until the server answers a query on its `postgres` database.
    async fn wait_answers(&self) -> anyhow::Result<()> {
        let url = self.url("postgres");
        let start = Instant::now();
        loop {
            match server::check_answers(&url).await {
                Ok(()) => return Ok(()),
                Err(error) if start.elapsed() >= ANSWER_TIMEOUT => {
                    return Err(self.with_log(
                        error,
                        &format!("the cluster does not answer at {url} after {ANSWER_TIMEOUT:?}"),
                    ));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    async fn admin_connection(&self) -> anyhow::Result<PgConnection> {
        let url = self.url("postgres");
        PgConnection::connect_with(&connect_options(&url)?)
            .await
            .with_context(|| format!("connecting to {url}"))
    }

    fn with_log(&self, error: anyhow::Error, what: &str) -> anyhow::Error {
        error.context(format!(
            "{what} (cluster in {}, port {}); end of its log:\n{}",
            self.dir.display(),
            self.port,
            self.log_tail()
        ))
    }

    /// `pg_ctl stop -m immediate`, blocking (for drop); errors are ignored.
    fn stop_blocking(&self) {
        let pg_ctl = self.bin.join("pg_ctl");
        let mut command = if self.as_root {
            let mut command = std::process::Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(&pg_ctl);
            command
        } else {
            std::process::Command::new(&pg_ctl)
        };
        let _ = command
            .arg("-D")
            .arg(&self.dir)
            .args(["-m", "immediate", "-w", "-t", "30", "stop"])
            .current_dir(std::env::temp_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "leasehold-tests: private cluster in {} (port {}); end of its log:\n{}",
                self.dir.display(),
                self.port,
                self.log_tail()
            );
        }
        // Stop even when believed stopped: a failed start may have left a server behind.
        if self.running || self.dir.join("postmaster.pid").exists() {
            self.stop_blocking();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn connect_options(url: &str) -> anyhow::Result<PgConnectOptions> {
    Ok(PgConnectOptions::from_str(url)
        .with_context(|| format!("bad PostgreSQL URL {url}"))?
        .application_name(crate::db::APPLICATION_NAME)
        .disable_statement_logging())
}

/// A port of 127.0.0.1 that was free a moment ago.
pub fn free_port() -> anyhow::Result<u16> {
    let listener =
        std::net::TcpListener::bind("127.0.0.1:0").context("binding 127.0.0.1:0 to find a port")?;
    Ok(listener
        .local_addr()
        .context("reading the bound address")?
        .port())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_free_port_is_found() {
        assert!(super::free_port().is_ok_and(|port| port > 0));
    }
}
