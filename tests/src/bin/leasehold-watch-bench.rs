//! `leasehold-watch-bench`: what the Watch stream costs an agent (TESTING.md layer 6, a
//! benchmark, not a test: it prints figures and asserts nothing about time).
//!
//! It creates a fresh database on the server of `--database-url` (any database there: the
//! bench connects to it to `CREATE DATABASE lh_watch_bench_<pid>`), migrates it with
//! `leasehold-agent migrate`, runs the real `leasehold-agent` binary found next to this one
//! (`target/<profile>/`) and drops the database at the end. Two measurements:
//!
//! - **cpu** — one agent holding `--leases` (2,000) leases (sleep tasks of two hours,
//!   `--concurrency` = leases) renewed every 400 ms, so 5,000 renewal deltas a second. Over a
//!   `--window` (20 s) the agent's CPU time (utime + stime of `/proc/<pid>/stat`) is measured
//!   with no watcher and with `--watchers` (4) watchers reading the stream (each on its own
//!   connection, every update applied to a view), the two configurations alternating over
//!   `--rounds` (3) rounds; the medians are reported, with the ratio and the deltas a second
//!   each watcher received (the check that the agent produced the intended load).
//! - **snapshot** — an agent holding `--snapshot-leases` (10,000) leases: the time from sending
//!   `Watch` to having its first update (the snapshot) received and decoded, over `--reps` (20)
//!   repetitions on one connection (p50, p99, max in ms), and the snapshot's encoded size.
//!
//! One JSON object goes to stdout; progress goes to stderr.
//!
//! ```text
//! cargo build --release -p leasehold-agent -p leasehold-tests --bins
//! target/release/leasehold-watch-bench --database-url postgres://postgres@127.0.0.1:5432/postgres
//!     [--window 20] [--rounds 3] [--watchers 4] [--leases 2000] [--snapshot-leases 10000]
//!     [--reps 20] [--skip-cpu] [--skip-snapshot]
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use leasehold_proto::v1 as pb;
use leasehold_tests::AgentHandle;
use leasehold_tests::db::{quote_ident, url_with_database};
use leasehold_tests::grpc::{WatchView, agent_address, connect};
use prost::Message;
use serde_json::json;
use sqlx::postgres::{PgConnection, PgPool, PgPoolOptions};
use sqlx::{AssertSqlSafe, Connection};

/// Renewal interval of the cpu agent: 2,000 leases every 400 ms are 5,000 deltas a second.
const HEARTBEAT: &str = "400ms";
/// How long the sleep tasks run: longer than any bench.
const SLEEP_MS: i64 = 2 * 3600 * 1000;
/// How long an agent may take to claim all its leases.
const CLAIM_WAIT: Duration = Duration::from_secs(300);

#[derive(Debug, Clone)]
struct Options {
    database_url: String,
    window: Duration,
    rounds: usize,
    watchers: usize,
    leases: i64,
    snapshot_leases: i64,
    reps: usize,
    cpu: bool,
    snapshot: bool,
}

fn options() -> Result<Options> {
    let mut o = Options {
        database_url: std::env::var("DATABASE_URL").unwrap_or_default(),
        window: Duration::from_secs(20),
        rounds: 3,
        watchers: 4,
        leases: 2_000,
        snapshot_leases: 10_000,
        reps: 20,
        cpu: true,
        snapshot: true,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--database-url" => o.database_url = value()?,
            "--window" => o.window = Duration::from_secs(value()?.parse().context("--window")?),
            "--rounds" => o.rounds = value()?.parse().context("--rounds")?,
            "--watchers" => o.watchers = value()?.parse().context("--watchers")?,
            "--leases" => o.leases = value()?.parse().context("--leases")?,
            "--snapshot-leases" => {
                o.snapshot_leases = value()?.parse().context("--snapshot-leases")?
            }
            "--reps" => o.reps = value()?.parse().context("--reps")?,
            "--skip-cpu" => o.cpu = false,
            "--skip-snapshot" => o.snapshot = false,
            "-h" | "--help" => {
                eprintln!(
                    "usage: leasehold-watch-bench --database-url URL [--window SECS] [--rounds N] \
                     [--watchers N] [--leases N] [--snapshot-leases N] [--reps N] [--skip-cpu] \
                     [--skip-snapshot]"
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (see --help)"),
        }
    }
    if o.database_url.is_empty() {
        bail!("give --database-url (or DATABASE_URL)");
    }
    if o.rounds == 0 || o.reps == 0 || o.leases <= 0 || o.snapshot_leases <= 0 {
        bail!("--rounds, --reps, --leases and --snapshot-leases must be positive");
    }
    Ok(o)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let o = options()?;
    let agent_bin = std::env::current_exe()
        .context("locating this binary")?
        .parent()
        .context("this binary has no directory")?
        .join("leasehold-agent");
    if !agent_bin.exists() {
        bail!(
            "{} not found: build it with `cargo build [--release] -p leasehold-agent`",
            agent_bin.display()
        );
    }
    let bench = BenchDb::create(&o.database_url, &agent_bin).await?;
    let result = run(&o, &bench, &agent_bin).await;
    let dropped = bench.drop_db().await;
    let report = result?;
    dropped?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

async fn run(o: &Options, bench: &BenchDb, agent_bin: &Path) -> Result<serde_json::Value> {
    // Neither a slow flag nor an attempt timeout may fire during the bench.
    sqlx::query(
        "INSERT INTO policies (scope, slow_ms, timeout_ms) VALUES ('sleep', 604800000, 604800000) \
         ON CONFLICT (scope) DO UPDATE SET slow_ms = excluded.slow_ms, timeout_ms = excluded.timeout_ms",
    )
    .execute(&bench.pool)
    .await
    .context("setting the sleep policy")?;
    let mut report = serde_json::Map::new();
    report.insert(
        "agent_binary".into(),
        json!(agent_bin.display().to_string()),
    );
    if o.cpu {
        report.insert("cpu".into(), cpu(o, bench, agent_bin).await?);
    }
    if o.snapshot {
        report.insert("snapshot".into(), snapshot(o, bench, agent_bin).await?);
    }
    Ok(serde_json::Value::Object(report))
}

// ---------------------------------------------------------------------------------------------
// cpu
// ---------------------------------------------------------------------------------------------

async fn cpu(o: &Options, bench: &BenchDb, agent_bin: &Path) -> Result<serde_json::Value> {
    let name = "watch-bench-cpu";
    let concurrency = o.leases.to_string();
    let agent = start_agent(
        bench,
        agent_bin,
        name,
        &[
            "--concurrency",
            &concurrency,
            "--claim-batch",
            "1000",
            "--lease-ttl",
            "4s",
            "--heartbeat",
            HEARTBEAT,
        ],
    )?;
    enqueue_sleeps(&bench.pool, o.leases).await?;
    wait_running(&bench.pool, &agent, o.leases).await?;
    let addr = agent_address(&bench.pool, name, Duration::from_secs(30)).await?;
    let ticks_per_s = clock_ticks_per_second();
    let mut idle = Vec::new();
    let mut watched = Vec::new();
    let mut rates = Vec::new();
    for round in 0..o.rounds {
        let order = if round % 2 == 0 {
            [0, o.watchers]
        } else {
            [o.watchers, 0]
        };
        for watchers in order {
            let m = measure(o, &agent, &addr, watchers, ticks_per_s).await?;
            eprintln!(
                "round {round}: {watchers} watchers: agent cpu {:.3} s in {:?}, deltas/s per watcher {:?}",
                m.cpu_s, o.window, m.deltas_per_s
            );
            if watchers == 0 {
                idle.push(m.cpu_s);
            } else {
                watched.push(m.cpu_s);
                rates.extend(m.deltas_per_s.iter().copied());
            }
        }
    }
    drop(agent);
    sqlx::query("DELETE FROM tasks")
        .execute(&bench.pool)
        .await
        .context("clearing the cpu phase's tasks")?;
    let window_s = o.window.as_secs_f64();
    let (m0, m4) = (median(&idle), median(&watched));
    let per_round_extra: Vec<f64> = idle
        .iter()
        .zip(&watched)
        .map(|(a, b)| round3((b / a - 1.0) * 100.0))
        .collect();
    Ok(json!({
        "leases": o.leases,
        "heartbeat": HEARTBEAT,
        "expected_deltas_per_s": o.leases as f64 / 0.4,
        "window_s": window_s,
        "rounds": o.rounds,
        "watchers": o.watchers,
        "clock_ticks_per_s": ticks_per_s,
        "agent_cpu_s_no_watchers": idle.iter().copied().map(round3).collect::<Vec<_>>(),
        "agent_cpu_s_with_watchers": watched.iter().copied().map(round3).collect::<Vec<_>>(),
        "median_agent_cpu_s_no_watchers": round3(m0),
        "median_agent_cpu_s_with_watchers": round3(m4),
        "median_agent_cores_no_watchers": round3(m0 / window_s),
        "median_agent_cores_with_watchers": round3(m4 / window_s),
        "ratio_with_to_without": round3(m4 / m0),
        "extra_cpu_percent": round3((m4 / m0 - 1.0) * 100.0),
        "extra_cpu_percent_per_round": per_round_extra,
        "extra_cpu_percent_of_one_core": round3((m4 - m0) / window_s * 100.0),
        "deltas_per_s_per_watcher": rates.iter().copied().map(round3).collect::<Vec<_>>(),
        "median_deltas_per_s_per_watcher": round3(median(&rates)),
    }))
}

struct Measurement {
    cpu_s: f64,
    deltas_per_s: Vec<f64>,
}

/// A watcher reading its stream in the background.
struct Reader {
    deltas: Arc<AtomicU64>,
    failed: Arc<Mutex<Option<String>>>,
    ready: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn reader(addr: &str, leases: usize) -> Result<Reader> {
    let mut client = connect(addr).await?;
    let mut stream = client.watch(pb::WatchRequest {}).await?.into_inner();
    let deltas = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(Mutex::new(None));
    let ready = Arc::new(AtomicBool::new(false));
    let (d, f, r) = (Arc::clone(&deltas), Arc::clone(&failed), Arc::clone(&ready));
    let task = tokio::spawn(async move {
        let _client = client;
        let mut view = WatchView::default();
        let error = loop {
            match stream.message().await {
                Ok(Some(update)) => {
                    let n = update.deltas.len() as u64;
                    if let Err(e) = view.apply(update) {
                        break format!("contract broken: {e:#}");
                    }
                    if view.dropped_events > 0 {
                        break format!("the agent dropped {} feed events", view.dropped_events);
                    }
                    d.fetch_add(n, Ordering::Relaxed);
                    if view.leases.len() >= leases {
                        r.store(true, Ordering::Relaxed);
                    }
                }
                Ok(None) => break "the stream ended".to_string(),
                Err(status) => break format!("the stream failed: {status:?}"),
            }
        };
        if let Ok(mut slot) = f.lock() {
            *slot = Some(error);
        }
    });
    Ok(Reader {
        deltas,
        failed,
        ready,
        task,
    })
}

fn reader_failure(readers: &[Reader]) -> Option<String> {
    readers
        .iter()
        .find_map(|r| r.failed.lock().ok().and_then(|f| f.clone()))
}

async fn measure(
    o: &Options,
    agent: &AgentHandle,
    addr: &str,
    watchers: usize,
    ticks_per_s: f64,
) -> Result<Measurement> {
    let mut readers = Vec::new();
    for _ in 0..watchers {
        readers.push(reader(addr, o.leases as usize).await?);
    }
    let start = Instant::now();
    while !readers.iter().all(|r| r.ready.load(Ordering::Relaxed)) {
        if let Some(error) = reader_failure(&readers) {
            bail!("a watcher failed: {error}");
        }
        if start.elapsed() > Duration::from_secs(60) {
            bail!("the watchers did not see {} leases within 60 s", o.leases);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Settle: snapshots sent, connections warm.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before: Vec<u64> = readers
        .iter()
        .map(|r| r.deltas.load(Ordering::Relaxed))
        .collect();
    let cpu0 = cpu_ticks(agent.pid())?;
    let t0 = Instant::now();
    tokio::time::sleep(o.window).await;
    let cpu1 = cpu_ticks(agent.pid())?;
    let elapsed = t0.elapsed().as_secs_f64();
    if let Some(error) = reader_failure(&readers) {
        bail!("a watcher failed during the window: {error}");
    }
    let deltas_per_s = readers
        .iter()
        .zip(before)
        .map(|(r, b)| (r.deltas.load(Ordering::Relaxed) - b) as f64 / elapsed)
        .collect();
    drop(readers);
    // Let the agent notice the closed streams before the next configuration.
    tokio::time::sleep(Duration::from_secs(1)).await;
    Ok(Measurement {
        cpu_s: (cpu1 - cpu0) as f64 / ticks_per_s,
        deltas_per_s,
    })
}

/// utime + stime of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // The command name (field 2) may hold spaces: count fields after its closing parenthesis.
    let after = stat
        .rfind(')')
        .map(|i| &stat[i + 1..])
        .context("no ')' in /proc/<pid>/stat")?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of the whole line are the 12th and 13th after the name.
    let utime: u64 = fields.get(11).context("no utime")?.parse()?;
    let stime: u64 = fields.get(12).context("no stime")?.parse()?;
    Ok(utime + stime)
}

fn clock_ticks_per_second() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

// ---------------------------------------------------------------------------------------------
// snapshot
// ---------------------------------------------------------------------------------------------

async fn snapshot(o: &Options, bench: &BenchDb, agent_bin: &Path) -> Result<serde_json::Value> {
    let name = "watch-bench-snapshot";
    let concurrency = o.snapshot_leases.to_string();
    let agent = start_agent(
        bench,
        agent_bin,
        name,
        &[
            "--concurrency",
            &concurrency,
            "--claim-batch",
            "2000",
            "--lease-ttl",
            "30s",
            "--heartbeat",
            "5s",
        ],
    )?;
    enqueue_sleeps(&bench.pool, o.snapshot_leases).await?;
    wait_running(&bench.pool, &agent, o.snapshot_leases).await?;
    let addr = agent_address(&bench.pool, name, Duration::from_secs(30)).await?;
    let mut client = connect(&addr).await?;
    let mut times = Vec::new();
    let mut bytes = 0;
    let mut leases = 0;
    for rep in 0..=o.reps {
        let t0 = Instant::now();
        let mut stream = client.watch(pb::WatchRequest {}).await?.into_inner();
        let first = stream
            .message()
            .await?
            .context("the stream ended before its snapshot")?;
        let ms = t0.elapsed().as_secs_f64() * 1000.0;
        drop(stream);
        let snap = first
            .snapshot
            .as_ref()
            .context("the first update has no snapshot")?;
        leases = snap.leases.len();
        bytes = first.encoded_len();
        if leases as i64 != o.snapshot_leases {
            bail!(
                "the snapshot holds {leases} leases, {} expected",
                o.snapshot_leases
            );
        }
        // The first call warms the connection and the agent up; it is not counted.
        if rep > 0 {
            times.push(ms);
        }
        eprintln!("snapshot {rep}: {ms:.1} ms, {bytes} bytes");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    drop(agent);
    sqlx::query("DELETE FROM tasks")
        .execute(&bench.pool)
        .await
        .context("clearing the snapshot phase's tasks")?;
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    Ok(json!({
        "leases": leases,
        "reps": times.len(),
        "bytes": bytes,
        "p50_ms": round3(percentile(&sorted, 50.0)),
        "p99_ms": round3(percentile(&sorted, 99.0)),
        "max_ms": round3(sorted.last().copied().unwrap_or(0.0)),
        "mean_ms": round3(times.iter().sum::<f64>() / times.len() as f64),
        "all_ms": times.iter().copied().map(round3).collect::<Vec<_>>(),
    }))
}

// ---------------------------------------------------------------------------------------------
// Database and agents
// ---------------------------------------------------------------------------------------------

struct BenchDb {
    admin_url: String,
    name: String,
    url: String,
    pool: PgPool,
}

impl BenchDb {
    async fn create(admin_url: &str, agent_bin: &Path) -> Result<BenchDb> {
        let name = format!("lh_watch_bench_{}", std::process::id());
        let mut conn = PgConnection::connect(admin_url)
            .await
            .with_context(|| format!("connecting to {admin_url}"))?;
        for statement in [
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            "CREATE DATABASE {}",
        ] {
            let sql = statement.replace("{}", &quote_ident(&name));
            sqlx::raw_sql(AssertSqlSafe(sql))
                .execute(&mut conn)
                .await
                .with_context(|| format!("creating database {name}"))?;
        }
        let _ = conn.close().await;
        let url = url_with_database(admin_url, &name);
        let out = Command::new(agent_bin)
            .args(["migrate", "--database-url", &url])
            .output()
            .context("running leasehold-agent migrate")?;
        if !out.status.success() {
            bail!(
                "leasehold-agent migrate failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .connect(&url)
            .await
            .with_context(|| format!("connecting to {url}"))?;
        Ok(BenchDb {
            admin_url: admin_url.to_string(),
            name,
            url,
            pool,
        })
    }

    async fn drop_db(&self) -> Result<()> {
        self.pool.close().await;
        let mut conn = PgConnection::connect(&self.admin_url).await?;
        sqlx::raw_sql(AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            quote_ident(&self.name)
        )))
        .execute(&mut conn)
        .await
        .with_context(|| format!("dropping database {}", self.name))?;
        let _ = conn.close().await;
        Ok(())
    }
}

fn start_agent(
    bench: &BenchDb,
    agent_bin: &Path,
    name: &str,
    extra: &[&str],
) -> Result<AgentHandle> {
    let mut args: Vec<String> = [
        "run",
        "--database-url",
        &bench.url,
        "--id",
        name,
        "--handlers",
        "sleep",
        "--grace",
        "2s",
        "--poll-interval",
        "200ms",
        "--unserved-after",
        "off",
        "--shutdown-timeout",
        "1s",
        "--stop-grace",
        "1s",
        "--listen",
        "127.0.0.1:0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    let envs = vec![("RUST_LOG".to_string(), "warn".to_string())];
    AgentHandle::spawn(&PathBuf::from(agent_bin), args, envs)
}

async fn enqueue_sleeps(pool: &PgPool, n: i64) -> Result<()> {
    sqlx::query(
        "INSERT INTO tasks (task_type, payload) \
         SELECT 'sleep', jsonb_build_object('ms', $2::bigint) FROM generate_series(1, $1)",
    )
    .bind(n)
    .bind(SLEEP_MS)
    .execute(pool)
    .await
    .context("enqueueing sleep tasks")?;
    Ok(())
}

async fn wait_running(pool: &PgPool, agent: &AgentHandle, n: i64) -> Result<()> {
    let start = Instant::now();
    loop {
        let running: i64 =
            sqlx::query_scalar("SELECT count(*) FROM tasks WHERE status = 'running'")
                .fetch_one(pool)
                .await?;
        if running >= n {
            eprintln!(
                "{n} leases held after {:.1} s",
                start.elapsed().as_secs_f64()
            );
            return Ok(());
        }
        if start.elapsed() > CLAIM_WAIT {
            bail!(
                "only {running} of {n} tasks running after {CLAIM_WAIT:?}; agent log:\n{}",
                agent.log_tail(20)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Figures
// ---------------------------------------------------------------------------------------------

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    percentile(&v, 50.0)
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
