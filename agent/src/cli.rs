//! The `leasehold-agent` command line: `run`, `migrate` and `bench`.
//!
//! [`main_with`] is the whole binary; a program that embeds extra handlers (an application's
//! own worker binary, or the test agent) calls it with a function that registers them.

use std::path::PathBuf;
use std::process::ExitCode as ProcessExit;

use anyhow::{Context, Result};
use clap::parser::ValueSource;
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use figment::value::{Dict, Value};
use leasehold_shared::store::AnyStore;
use serde::Serialize;

use crate::bench::{self, BenchConfig};
use crate::config::{AgentConfig, Layers, LogFormat, OutputFormat, perms};
use crate::exit::ExitCode;
use crate::handler::HandlerRegistry;
use crate::runtime::{AgentBuilder, RunSummary, Shutdown};

const RUN_ABOUT: &str = "Run the agent: claim tasks of the enabled handlers' types, run them, \
renew their leases, and drain on SIGTERM/SIGINT (a second signal forces).";

const RUN_AFTER: &str = "\
Settings come from defaults, then the --config TOML file, then LEASEHOLD_* environment \
variables, then flags (the later wins, key by key); a bad setting is named with where its value \
came from. Durations are human: 250ms, 30s, 1m 30s, 1h.

Leases: a lease lives --lease-ttl after its last renewal; renewals run every --heartbeat (at \
most half the TTL). Another agent takes an expired lease only after --grace more. An agent that \
cannot renew stops its executions before the lease could be taken.

gRPC: the agent serves its API on --listen (default 127.0.0.1:7070). Tokens ([[tokens]] with name, role viewer|operator, secret or secret_file) and TLS ([tls] cert, key, client_ca) are set in the config file; see the README.

Exit codes: 0 ok · 1 a task of our types is dead or cancelled (--exit-when-idle), or a service \
of the agent (heartbeat, claimer, completer, …) died: executions stopped, leases released · \
2 bad flags or config · 3 database unreachable · 4 --idle-timeout passed with work remaining.

Example:
  leasehold-agent run --database-url postgres://leasehold@db/leasehold \\
      --handlers exec,sleep --exec-allow '/usr/local/bin/*' --concurrency 20 \\
      --metrics-listen 127.0.0.1:9464";

#[derive(Debug, Parser)]
#[command(
    name = "leasehold-agent",
    version,
    about = "Leasehold agent: claims, runs and heartbeats tasks from a shared database"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Args)]
struct DatabaseArgs {
    /// Database URL: postgres://user@host:port/db or sqlite://PATH. Also LEASEHOLD_DATABASE_URL or DATABASE_URL.
    #[arg(
        long,
        env = "LEASEHOLD_DATABASE_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    database_url: Option<String>,
}

impl DatabaseArgs {
    fn url(&self) -> Result<String> {
        self.database_url
            .clone()
            .or_else(|| std::env::var("DATABASE_URL").ok())
            .filter(|u| !u.is_empty())
            .ok_or_else(|| {
                usage_error(
                    "database_url",
                    "give --database-url, LEASEHOLD_DATABASE_URL or DATABASE_URL",
                )
            })
    }
}

/// Bad input on the command line: reported plainly, exit code 2.
fn usage_error(field: &'static str, detail: &str) -> anyhow::Error {
    anyhow::Error::new(leasehold_shared::StoreError::Invalid(
        leasehold_shared::ValidationError::Invalid {
            field,
            detail: detail.to_string(),
        },
    ))
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Output {
    Text,
    Json,
}

/// The `run` flags. Every one is optional here: unset ones fall back to the config file, then
/// to the defaults. Serialized, they are the flag and environment layers of the config (each
/// field named as its argument id; `--config` is not a setting).
#[derive(Debug, Args, Serialize)]
struct RunArgs {
    /// Database URL: postgres://… or sqlite://PATH (created and migrated when new). Also LEASEHOLD_DATABASE_URL or DATABASE_URL.
    #[arg(
        long,
        env = "LEASEHOLD_DATABASE_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    database_url: Option<String>,
    /// A direct PostgreSQL URL to LISTEN on for wake-ups, for a --database-url that leads
    /// through a transaction pooler such as PgBouncer (which cannot carry them: without it the
    /// agent polls). One server. Also LEASEHOLD_NOTIFY_DATABASE_URL.
    #[arg(
        long,
        env = "LEASEHOLD_NOTIFY_DATABASE_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    notify_database_url: Option<String>,
    /// `transaction`: run as behind a transaction pooler — every statement in a transaction of
    /// its own, no prepared statements, settings per transaction. `auto` recognises PgBouncer
    /// (it refuses the startup options) as the agent connects; `none` skips that (straight to
    /// PostgreSQL). [default: auto]
    #[arg(long, env = "LEASEHOLD_POOLER", value_name = "auto|transaction|none")]
    pooler: Option<String>,
    /// TOML config file (keys as the flags, with underscores).
    #[arg(long, env = "LEASEHOLD_CONFIG", value_name = "FILE")]
    #[serde(skip)]
    config: Option<PathBuf>,
    /// Agent name; the lease owner is NAME#<per-start number>. [default: the host name]
    #[arg(long, env = "LEASEHOLD_ID", value_name = "NAME")]
    id: Option<String>,
    /// Serve the gRPC API (Watch, actions, health, reflection) on ADDR, or `off`. Port 0 picks
    /// a free port; the registry publishes the bound address. A non-loopback address needs TLS
    /// and a token unless --insecure. [default: 127.0.0.1:7070]
    #[arg(long, env = "LEASEHOLD_LISTEN", value_name = "ADDR|off")]
    listen: Option<String>,
    /// PEM certificate (chain) of the gRPC server; with --tls-key turns TLS on.
    #[arg(long, env = "LEASEHOLD_TLS_CERT", value_name = "FILE")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "LEASEHOLD_TLS_KEY", value_name = "FILE")]
    tls_key: Option<PathBuf>,
    /// PEM CA that signs client certificates: clients without one are refused (mTLS).
    #[arg(long, env = "LEASEHOLD_TLS_CLIENT_CA", value_name = "FILE")]
    tls_client_ca: Option<PathBuf>,
    /// Serve a non-loopback --listen without TLS or tokens (a trusted network only).
    #[arg(long, env = "LEASEHOLD_INSECURE")]
    insecure: bool,
    /// Let loopback TCP callers without a token act as operators (named by their uid when the
    /// kernel tells it). Without it they may only watch and list; local users act through the
    /// agent's Unix socket, which admits only the agent's own user and root.
    #[arg(long, env = "LEASEHOLD_INSECURE_LOCAL")]
    insecure_local: bool,
    /// Also serve the API on this Unix socket (mode 0600 in a private directory), or `off`.
    /// [default: <runtime dir>/agent-<port>.sock: $LEASEHOLD_RUNTIME_DIR, $RUNTIME_DIRECTORY,
    /// /run/leasehold for root, $XDG_RUNTIME_DIR/leasehold, else /tmp/leasehold-<uid>]
    #[arg(long, env = "LEASEHOLD_SOCKET", value_name = "PATH|off")]
    socket: Option<String>,
    /// Time a TCP client has to finish the TLS handshake (without TLS: to send its first
    /// bytes) before it is disconnected. [default: 10s]
    #[arg(long, env = "LEASEHOLD_TLS_HANDSHAKE_TIMEOUT", value_name = "DURATION")]
    tls_handshake_timeout: Option<String>,
    /// Open gRPC connections in total (TCP and socket); more are closed at once. [default: 1024]
    #[arg(long, env = "LEASEHOLD_GRPC_MAX_CONNECTIONS", value_name = "N")]
    grpc_max_connections: Option<u32>,
    /// Open gRPC connections per client IP (per uid on the socket). [default: 64]
    #[arg(
        long,
        env = "LEASEHOLD_GRPC_MAX_CONNECTIONS_PER_PEER",
        value_name = "N"
    )]
    grpc_max_connections_per_peer: Option<u32>,
    /// Serve Prometheus metrics on ADDR (GET /metrics). [default: off]
    #[arg(long, env = "LEASEHOLD_METRICS_LISTEN", value_name = "ADDR")]
    metrics_listen: Option<String>,
    /// Handlers to enable, comma-separated (built-in: exec, sleep, noop, fail). Each serves the
    /// task type of its name.
    #[arg(long, env = "LEASEHOLD_HANDLERS", value_name = "LIST")]
    handlers: Option<String>,
    /// Tasks this agent runs at once (lower it for heavy handlers such as `exec`). [default: 1000]
    #[arg(long, env = "LEASEHOLD_CONCURRENCY", value_name = "N")]
    concurrency: Option<u32>,
    /// Lease time-to-live. [default: 20s]
    #[arg(long, env = "LEASEHOLD_LEASE_TTL", value_name = "DURATION")]
    lease_ttl: Option<String>,
    /// Interval between batch renewals (at most half the TTL). [default: 4s]
    #[arg(long, env = "LEASEHOLD_HEARTBEAT", value_name = "DURATION")]
    heartbeat: Option<String>,
    /// Extra time after expiry before a lease is taken over. [default: 5s]
    #[arg(long, env = "LEASEHOLD_GRACE", value_name = "DURATION")]
    grace: Option<String>,
    /// Fallback poll interval for claims and maintenance. [default: 1s]
    #[arg(long, env = "LEASEHOLD_POLL_INTERVAL", value_name = "DURATION")]
    poll_interval: Option<String>,
    /// How long a shutdown waits for running tasks before releasing them. [default: 30s]
    #[arg(long, env = "LEASEHOLD_SHUTDOWN_TIMEOUT", value_name = "DURATION")]
    shutdown_timeout: Option<String>,
    /// How long a handler asked to stop may take before it is dropped. [default: 10s]
    #[arg(long, env = "LEASEHOLD_STOP_GRACE", value_name = "DURATION")]
    stop_grace: Option<String>,
    /// Most tasks claimed per statement (never more than the free slots). [default: 500]
    #[arg(long, env = "LEASEHOLD_CLAIM_BATCH", value_name = "N")]
    claim_batch: Option<u32>,
    /// Keep finished tasks this long (the leader deletes older ones). [default: 7days]
    #[arg(long, env = "LEASEHOLD_RETENTION", value_name = "DURATION")]
    retention: Option<String>,
    /// Keep dead-lettered tasks this long. [default: 30days]
    #[arg(long, env = "LEASEHOLD_DEAD_RETENTION", value_name = "DURATION")]
    dead_retention: Option<String>,
    /// Dead-letter waiting tasks whose type no live agent serves after this long, or `off`.
    /// [default: 15m]
    #[arg(long, env = "LEASEHOLD_UNSERVED_AFTER", value_name = "DURATION|off")]
    unserved_after: Option<String>,
    /// Connections in the agent's pool (the heartbeat has one more of its own). [default: 10]
    #[arg(long, env = "LEASEHOLD_MAX_CONNECTIONS", value_name = "N")]
    max_connections: Option<u32>,
    /// Most expired leases the leader recovers per maintenance tick (a mass expiry is spread
    /// over ticks). [default: 1000]
    #[arg(long, env = "LEASEHOLD_RECOVERY_PER_TICK", value_name = "N")]
    recovery_per_tick: Option<u32>,
    /// For CI: exit once nothing of our types (the enabled handlers' types) is queued, in
    /// retry_wait (retries are waited for, however long their backoff) or running, on any
    /// agent. Exit 1 if any task of our types is dead or cancelled — whoever ran it, this run
    /// or an earlier one (see --idle-since); a task that succeeded after retries is fine.
    /// Waiting tasks of types no live agent serves are reported, not waited for, and do not
    /// change the exit code. The summary lists failed (dead + cancelled), dead, cancelled,
    /// pending and unserved task ids.
    #[arg(long, env = "LEASEHOLD_EXIT_WHEN_IDLE")]
    exit_when_idle: bool,
    /// With --exit-when-idle: stop waiting this long after the start while work of our types
    /// remains, name what remains, and exit 4. [default: off, wait as long as it takes]
    #[arg(long, env = "LEASEHOLD_IDLE_TIMEOUT", value_name = "DURATION|off")]
    idle_timeout: Option<String>,
    /// With --exit-when-idle: dead and cancelled tasks of our types fail the run only when
    /// created or finished at most DURATION before the agent started (0s: during this run
    /// only). [default: all, every one still stored — requeue or purge them to pass]
    #[arg(long, env = "LEASEHOLD_IDLE_SINCE", value_name = "DURATION|all")]
    idle_since: Option<String>,
    /// Summary format when the run ends. [default: text]
    #[arg(long, env = "LEASEHOLD_OUTPUT", value_enum)]
    output: Option<OutputFormat>,
    /// Log format on stderr. [default: text]
    #[arg(long, env = "LEASEHOLD_LOG_FORMAT", value_enum)]
    log_format: Option<LogFormat>,
    /// Also write JSON logs to daily-rolling files in DIR.
    #[arg(long, env = "LEASEHOLD_LOG_DIR", value_name = "DIR")]
    log_dir: Option<PathBuf>,
    /// Log filter (e.g. info, leasehold_agent=debug). RUST_LOG overrides it. [default: info]
    #[arg(long, env = "LEASEHOLD_LOG_LEVEL", value_name = "FILTER")]
    log_level: Option<String>,
    /// Shard groups to join, comma-separated: the live members of a group share its shards
    /// evenly (create one with `leasehold shards create GROUP --count N`). [default: none]
    #[arg(long, env = "LEASEHOLD_SHARD_GROUPS", value_name = "GROUP[,GROUP]")]
    shard_groups: Option<String>,
    /// Grace between SIGTERM and SIGKILL when `exec` stops a program. [default: 5s]
    #[arg(long, env = "LEASEHOLD_EXEC_KILL_AFTER", value_name = "DURATION")]
    exec_kill_after: Option<String>,
    /// Programs `exec` may run, comma-separated: absolute paths with `*`/`?` globs that stay
    /// within one directory (`/usr/local/bin/*`), or `*` for any program. Required to enable
    /// `exec`. [default: none]
    #[arg(long, env = "LEASEHOLD_EXEC_ALLOW", value_name = "PATTERN[,PATTERN]")]
    exec_allow: Option<String>,
    /// Variables `exec` programs get from the agent's environment, comma-separated (LD_*,
    /// LEASEHOLD_* and DATABASE_URL never). [default: PATH,HOME,LANG]
    #[arg(long, env = "LEASEHOLD_EXEC_ENV", value_name = "NAME[,NAME]")]
    exec_env: Option<String>,
    /// Directory an `exec` payload's cwd must lie in (after resolving `..` and symlinks), and
    /// the default cwd. [default: none]
    #[arg(long, env = "LEASEHOLD_EXEC_ROOT", value_name = "DIR")]
    exec_root: Option<PathBuf>,
}

impl RunArgs {
    /// The validated config, and the warnings about secret files other users can read (to
    /// log once logging is set up); a world-writable TLS key or token file is an error.
    /// `matches` are the `run` subcommand's: they tell which values the user gave, and how.
    fn into_config(self, matches: &ArgMatches) -> Result<(AgentConfig, perms::Report)> {
        let (environment, flags) = self.given(matches)?;
        let mut layers = Layers::new().database_url_fallback(std::env::var("DATABASE_URL").ok());
        if let Some(path) = &self.config {
            layers = layers.file(path).map_err(config_error)?;
        }
        let layers = layers.environment(environment).flags(flags);
        let settings = layers.settings().map_err(config_error)?;
        let mut secret_files =
            perms::SecretFiles::of_config(self.config.as_deref(), &settings.tokens);
        let config = AgentConfig::from_settings(settings, &layers).map_err(config_error)?;
        if let Some(tls) = config.grpc.as_ref().and_then(|g| g.tls.as_ref()) {
            secret_files.add(perms::FileKind::TlsKey, &tls.key);
        }
        let report = secret_files.check().map_err(config_error)?;
        Ok((config, report))
    }

    /// The values the user gave, by argument id: (from `LEASEHOLD_*` variables, from flags).
    /// Defaults clap fills in (a switch left off) are in neither.
    fn given(&self, matches: &ArgMatches) -> Result<(Dict, Dict)> {
        let mut all = match Value::serialize(self) {
            Ok(Value::Dict(_, all)) => all,
            Ok(_) => Dict::new(),
            Err(e) => return Err(usage_error("config", &format!("reading the flags: {e}"))),
        };
        let (mut environment, mut flags) = (Dict::new(), Dict::new());
        for id in matches.ids() {
            let id = id.as_str();
            let Some(value) = all.remove(id) else {
                continue;
            };
            match matches.value_source(id) {
                Some(ValueSource::EnvVariable) => environment.insert(id.to_string(), value),
                Some(ValueSource::CommandLine) => flags.insert(id.to_string(), value),
                _ => None,
            };
        }
        Ok((environment, flags))
    }
}

fn config_error(e: crate::config::ConfigError) -> anyhow::Error {
    anyhow::Error::new(leasehold_shared::StoreError::Invalid(
        leasehold_shared::ValidationError::Invalid {
            field: "config",
            detail: e.to_string(),
        },
    ))
}

#[derive(Debug, Subcommand)]
enum Command {
    #[command(about = RUN_ABOUT, after_help = RUN_AFTER, args_override_self = true)]
    Run(Box<RunArgs>),
    /// Apply database migrations. Safe to run twice and from several hosts at once.
    Migrate {
        #[command(flatten)]
        db: DatabaseArgs,
    },
    /// Measure enqueue, drain throughput, cost per task (PostgreSQL) and idle pickup latency
    /// with the real runtime.
    Bench {
        #[command(flatten)]
        db: DatabaseArgs,
        /// Tasks to enqueue and drain.
        #[arg(long, default_value_t = 100_000)]
        tasks: u64,
        /// Tasks queued besides (untimed, before the enqueue): the drain runs on a queue of
        /// tasks + backlog and is timed until --tasks of them are done. At most 100,000,000.
        #[arg(long, default_value_t = 0,
              value_parser = clap::value_parser!(u64).range(0..=bench::MAX_BACKLOG))]
        backlog: u64,
        /// Agents (each a full runtime with its own pool and heartbeat).
        #[arg(long, default_value_t = bench::DEFAULT_AGENTS)]
        agents: u32,
        /// Local concurrency of each agent. [default: the agent's default]
        #[arg(long)]
        concurrency: Option<u32>,
        /// Most tasks per claim statement. [default: the agent's default]
        #[arg(long)]
        batch: Option<u32>,
        /// Idle pickup samples (one task at a time).
        #[arg(long, default_value_t = 200)]
        latency_samples: u32,
        /// A direct PostgreSQL URL the agents LISTEN on, for a --database-url through a
        /// transaction pooler (as `run --notify-database-url`).
        #[arg(long, value_name = "URL")]
        notify_database_url: Option<String>,
        #[arg(long, value_enum, default_value = "text")]
        output: Output,
    },
}

/// Registers extra handlers (beyond the built-ins named by `--handlers`).
pub type Extend = Box<dyn FnOnce(&mut HandlerRegistry, &AgentConfig) -> Result<()>>;

/// The whole `leasehold-agent` binary.
pub fn main_with(extend: Option<Extend>) -> ProcessExit {
    let parsed = Cli::command()
        .try_get_matches()
        .and_then(|matches| Ok((Cli::from_arg_matches(&matches)?, matches)));
    let (cli, matches) = match parsed {
        Ok(parsed) => parsed,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::Usage.into()
            } else {
                ExitCode::Ok.into()
            };
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(error) => {
            eprintln!("error: starting the async runtime: {error}");
            return ExitCode::TaskFailed.into();
        }
    };
    match runtime.block_on(dispatch(cli, &matches, extend)) {
        Ok(code) => code.into(),
        Err(error) => {
            // One sentence; the whole chain (every cause's own text, and a backtrace when
            // RUST_BACKTRACE asks) only when asked for, before it, so the sentence is always
            // the last line.
            if std::env::var_os("RUST_LOG").is_some() {
                eprintln!("{error:?}");
            }
            eprintln!(
                "error: {}",
                leasehold_shared::store::error_sentence(error.as_ref())
            );
            ExitCode::for_error(&error).into()
        }
    }
}

async fn dispatch(cli: Cli, matches: &ArgMatches, extend: Option<Extend>) -> Result<ExitCode> {
    match cli.command {
        Command::Run(args) => {
            let run_matches = matches
                .subcommand_matches("run")
                .context("reading the run arguments")?;
            run(*args, run_matches, extend).await
        }
        Command::Migrate { db } => {
            let url = db.url()?;
            // The store's error says "cannot connect to the database: …" itself.
            let store = AnyStore::connect(&url, 1).await?;
            let (before, known) = store
                .migrations_applied()
                .await
                .context("reading the applied migrations")?;
            store.migrate().await.context("applying migrations")?;
            let (after, _) = store
                .migrations_applied()
                .await
                .context("reading the applied migrations")?;
            store.close().await;
            match after.saturating_sub(before) {
                0 => println!("database up to date ({known} migrations)"),
                1 => println!("applied 1 migration; database up to date ({known} migrations)"),
                n => println!("applied {n} migrations; database up to date ({known} migrations)"),
            }
            Ok(ExitCode::Ok)
        }
        Command::Bench {
            db,
            tasks,
            backlog,
            agents,
            concurrency,
            batch,
            latency_samples,
            notify_database_url,
            output,
        } => {
            // Quiet unless RUST_LOG asks (the bench's output is its report).
            let _logs = if std::env::var_os("RUST_LOG").is_some() {
                Some(crate::telemetry::init(LogFormat::Json, "warn", None)?)
            } else {
                None
            };
            let config = BenchConfig {
                database_url: db.url()?,
                tasks,
                backlog,
                agents,
                concurrency,
                batch,
                latency_samples,
                notify_database_url,
            };
            let report = bench::run(&config).await?;
            match output {
                Output::Json => println!("{}", serde_json::to_string(&report)?),
                Output::Text => print!("{}", bench::render_text(&report)),
            }
            Ok(ExitCode::Ok)
        }
    }
}

async fn run(args: RunArgs, matches: &ArgMatches, extend: Option<Extend>) -> Result<ExitCode> {
    let (config, file_warnings) = args.into_config(matches)?;
    let _logs = crate::telemetry::init(
        config.log_format,
        &config.log_level,
        config.log_dir.as_deref(),
    )?;
    file_warnings.log();
    let mut handlers = HandlerRegistry::new();
    let mut extra = HandlerRegistry::new();
    if let Some(extend) = extend {
        extend(&mut extra, &config)?;
    }
    for name in &config.handlers {
        match crate::handlers::register(&mut handlers, name, &config.builtin) {
            Ok(()) => {}
            Err(unknown) => {
                let task_type = leasehold_shared::TaskType::new(name.as_str())?;
                if !extra.contains(&task_type) {
                    return Err(usage_error("handlers", &unknown.to_string()));
                }
            }
        }
    }
    handlers.merge_enabled(extra, &config.handlers);
    let mut builder = AgentBuilder::new(config.runtime.clone(), handlers).pooler(config.pooler);
    if let Some(url) = &config.notify_database_url {
        builder = builder.notify_database_url(url);
    }
    if let Some(addr) = config.metrics_listen {
        let listener = crate::runtime::metrics::bind_metrics(addr)
            .await
            .map_err(|e| usage_error("metrics_listen", &format!("cannot listen on {addr}: {e}")))?;
        tracing::info!(addr = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(), "serving metrics");
        builder = builder.metrics_listener(listener);
    }
    if let Some(grpc) = &config.grpc {
        let auth = grpc.auth().map_err(config_error)?;
        if let Some(tls) = &grpc.tls {
            // Read now, so a bad file is a usage error before anything starts.
            tls.load().map_err(|e| usage_error("tls", &e.report()))?;
        }
        let listener = tokio::net::TcpListener::bind(grpc.listen)
            .await
            .map_err(|e| {
                usage_error("listen", &format!("cannot listen on {}: {e}", grpc.listen))
            })?;
        let port = listener
            .local_addr()
            .map_err(|e| usage_error("listen", &format!("reading the bound address: {e}")))?
            .port();
        let socket = crate::grpc::UnixSocket::open(&grpc.transport.socket, port)
            .map_err(|e| usage_error("socket", &e.report()))?;
        builder = builder.grpc(crate::grpc::GrpcOptions {
            listener,
            tls: grpc.tls.clone(),
            auth,
            socket,
            limits: grpc.transport.limits,
        });
    }
    // Before connecting, so a SIGTERM while the agent starts drains it instead of killing it.
    let shutdown = Shutdown::default();
    spawn_signal_handler(shutdown.clone())?;
    let agent = builder.connect(&config.database_url).await?;
    agent.declare_schedules(&config.schedules).await?;
    let summary = agent.run(shutdown).await?;
    print_summary(&summary, config.output)?;
    if !config.runtime.exit_when_idle {
        return Ok(ExitCode::Ok);
    }
    let Some(idle) = &summary.idle else {
        eprintln!("error: could not read the final state of our task types");
        return Ok(ExitCode::Unreachable);
    };
    for note in idle.notes() {
        eprintln!("{note}");
    }
    if idle.idle_timeout {
        return Ok(ExitCode::IdleTimeout);
    }
    if idle.ended_badly > 0 {
        return Ok(ExitCode::TaskFailed);
    }
    Ok(ExitCode::Ok)
}

fn print_summary(summary: &RunSummary, output: OutputFormat) -> Result<()> {
    match output {
        OutputFormat::Json => println!("{}", serde_json::to_string(summary)?),
        OutputFormat::Text => println!(
            "agent {} stopped ({}): {} claimed, {} succeeded, {} partially succeeded, {} failed attempts ({} retried, {} dead), {} cancelled, {} released, {} leases lost, {} fenced writes",
            summary.agent_id,
            summary.ended_by,
            summary.claimed,
            summary.succeeded,
            summary.partially_succeeded,
            summary.failed,
            summary.retried,
            summary.dead,
            summary.cancelled,
            summary.released,
            summary.lease_lost,
            summary.fenced
        ),
    }
    if let (OutputFormat::Text, Some(idle)) = (output, &summary.idle) {
        println!(
            "our types: {} pending, {} ended badly (failed ids [{}]), {} unserved of other types",
            idle.pending,
            idle.ended_badly,
            idle.failed_ids
                .iter()
                .map(i64::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            idle.unserved
        );
    }
    Ok(())
}

/// First SIGTERM/SIGINT: graceful shutdown; the second: forced.
fn spawn_signal_handler(shutdown: Shutdown) -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    tokio::spawn(async move {
        let mut seen = 0;
        loop {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            seen += 1;
            if seen == 1 {
                tracing::info!("signal received: draining (send again to force)");
                shutdown.graceful.cancel();
            } else {
                tracing::warn!("second signal: forcing shutdown");
                shutdown.force.cancel();
                return;
            }
        }
    });
    Ok(())
}
