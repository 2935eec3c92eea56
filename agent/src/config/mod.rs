//! `leasehold-agent run` configuration: a TOML file, then environment variables, then flags —
//! the later wins — merged over the defaults of [`RuntimeSettings`]. `DATABASE_URL` is the
//! conventional fallback: used only when neither a flag, `LEASEHOLD_DATABASE_URL` nor the file
//! names the database. `exit_when_idle` is a switch: set in the file or by flag, it is on.
//!
//! The file uses the flags' names with underscores; durations are human (`30s`, `5m`, `1h`).
//! Unknown keys are errors (a typo must not silently fall back to a default):
//!
//! ```toml
//! database_url = "postgres://leasehold@db/leasehold"   # or "sqlite:///var/lib/leasehold/q.sqlite"
//! id = "worker-1"
//! handlers = ["exec", "sleep"]
//! concurrency = 50
//! lease_ttl = "20s"
//! heartbeat = "4s"
//! grace = "5s"
//! recovery_per_tick = 1000                # expired leases the leader recovers per tick
//! shutdown_timeout = "30s"
//! metrics_listen = "127.0.0.1:9464"
//! log_format = "json"
//! log_dir = "/var/log/leasehold"
//!
//! # exec runs only allow-listed programs (required with the exec handler; ["*"] = any)
//! exec_allow = ["/usr/local/bin/*", "/usr/bin/env"]
//! exec_env = ["PATH", "HOME", "LANG"]        # passed from the agent's environment (default)
//! exec_root = "/srv/jobs"                    # cwd must lie inside it; the default cwd
//!
//! [exec]
//! kill_after = "5s"
//! output_tail = 4096
//!
//! # Cron schedules, created or updated when the agent starts (an operator's disable stays).
//! [[schedules]]
//! name = "nightly-report"
//! cron = "0 30 2 * * *"            # sec min hour day-of-month month day-of-week
//! type = "report.build"
//! payload = { region = "eu" }      # any TOML value, sent as JSON (default {})
//! time_zone = "Europe/Berlin"      # IANA name (default UTC)
//! missed = "catch_up"              # or "skip" (default): ticks no leader fired in time
//! catch_up_max = 5                 # catch_up only, 1..=1000 (default 10)
//! priority = 0
//! max_attempts = 3
//! enabled = true                   # for a new schedule only
//! ```
//!
//! `listen`, `insecure`, `insecure_local`, `[tls]` and `[[tokens]]` are described in [`grpc`],
//! as are `socket`, `tls_handshake_timeout`, `grpc_max_connections` and
//! `grpc_max_connections_per_peer` (the transport).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use thiserror::Error;

pub mod grpc;
pub mod perms;

#[cfg(test)]
mod props;

pub use grpc::{GrpcConfig, GrpcOverrides, TlsFile, TokenFile};

use leasehold_shared::domain::policy::DEFAULT_MAX_ATTEMPTS;
use leasehold_shared::domain::schedule::{DEFAULT_CATCH_UP, MissedTicks, Schedule};

use crate::handlers::{BUILTIN, BuiltinOptions};
use crate::runtime::RuntimeSettings;

/// Bad configuration: which source, which setting, what is wrong.
#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{setting}: {detail}")]
    Invalid { setting: String, detail: String },
}

pub(crate) fn invalid(setting: &str, detail: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        setting: setting.to_string(),
        detail: detail.into(),
    }
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

/// Output of the run summary (`--exit-when-idle`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum OutputFormat {
    Text,
    Json,
}

/// The `[exec]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecFile {
    pub kill_after: Option<String>,
    pub output_tail: Option<usize>,
}

/// One `[[schedules]]` entry.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleFile {
    pub name: String,
    pub cron: String,
    #[serde(rename = "type")]
    pub task_type: String,
    pub payload: Option<serde_json::Value>,
    pub time_zone: Option<String>,
    pub missed: Option<String>,
    pub catch_up_max: Option<u32>,
    pub priority: Option<i16>,
    pub max_attempts: Option<i32>,
    pub enabled: Option<bool>,
}

impl ScheduleFile {
    /// The validated schedule; errors name the entry (`schedules[N]` and its name).
    fn resolve(self, index: usize) -> Result<Schedule, ConfigError> {
        let setting = format!("schedules[{index}] ({:?})", self.name);
        let missed = match (self.missed.as_deref(), self.catch_up_max) {
            (None | Some("skip"), None) => MissedTicks::Skip,
            (None | Some("skip"), Some(_)) => {
                return Err(invalid(
                    &setting,
                    "catch_up_max is only for missed = \"catch_up\"",
                ));
            }
            (Some("catch_up"), max) => MissedTicks::catch_up(max.unwrap_or(DEFAULT_CATCH_UP))
                .map_err(|e| invalid(&setting, e.to_string()))?,
            (Some(other), _) => {
                return Err(invalid(
                    &setting,
                    format!("missed = {other:?}: use \"skip\" or \"catch_up\""),
                ));
            }
        };
        let mut builder = Schedule::builder(self.name, self.cron, self.task_type)
            .payload(self.payload.unwrap_or_else(|| serde_json::json!({})))
            .priority(self.priority.unwrap_or(0))
            .max_attempts(self.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS))
            .enabled(self.enabled.unwrap_or(true))
            .missed(missed);
        if let Some(zone) = self.time_zone {
            builder = builder.time_zone(zone);
        }
        builder
            .build(&leasehold_shared::InputLimits::default())
            .map_err(|e| invalid(&setting, e.to_string()))
    }
}

/// The TOML file, every key optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub database_url: Option<String>,
    pub id: Option<String>,
    pub listen: Option<String>,
    pub metrics_listen: Option<String>,
    pub handlers: Option<Vec<String>>,
    pub concurrency: Option<u32>,
    pub lease_ttl: Option<String>,
    pub heartbeat: Option<String>,
    pub grace: Option<String>,
    pub poll_interval: Option<String>,
    pub shutdown_timeout: Option<String>,
    pub stop_grace: Option<String>,
    pub claim_batch: Option<u32>,
    pub retention: Option<String>,
    pub dead_retention: Option<String>,
    pub unserved_after: Option<String>,
    pub max_connections: Option<u32>,
    pub recovery_per_tick: Option<u32>,
    pub exit_when_idle: Option<bool>,
    pub idle_timeout: Option<String>,
    pub idle_since: Option<String>,
    pub output: Option<OutputFormat>,
    pub log_format: Option<LogFormat>,
    pub log_dir: Option<PathBuf>,
    pub log_level: Option<String>,
    pub exec: Option<ExecFile>,
    pub exec_allow: Option<Vec<String>>,
    pub exec_env: Option<Vec<String>>,
    pub exec_root: Option<PathBuf>,
    pub insecure: Option<bool>,
    pub insecure_local: Option<bool>,
    pub socket: Option<String>,
    #[serde(alias = "handshake_timeout")]
    pub tls_handshake_timeout: Option<String>,
    pub grpc_max_connections: Option<u32>,
    pub grpc_max_connections_per_peer: Option<u32>,
    pub tls: Option<TlsFile>,
    pub tokens: Option<Vec<TokenFile>>,
    pub schedules: Option<Vec<ScheduleFile>>,
    pub shard_groups: Option<Vec<String>>,
}

impl FileConfig {
    /// Reads and parses `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })
    }
}

/// Values given on the command line or in the environment (clap merges those two).
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub database_url: Option<String>,
    pub id: Option<String>,
    pub listen: Option<String>,
    pub metrics_listen: Option<String>,
    pub handlers: Option<String>,
    pub concurrency: Option<u32>,
    pub lease_ttl: Option<String>,
    pub heartbeat: Option<String>,
    pub grace: Option<String>,
    pub poll_interval: Option<String>,
    pub shutdown_timeout: Option<String>,
    pub stop_grace: Option<String>,
    pub claim_batch: Option<u32>,
    pub retention: Option<String>,
    pub dead_retention: Option<String>,
    pub unserved_after: Option<String>,
    pub max_connections: Option<u32>,
    pub recovery_per_tick: Option<u32>,
    pub exit_when_idle: bool,
    pub idle_timeout: Option<String>,
    pub idle_since: Option<String>,
    pub output: Option<OutputFormat>,
    pub log_format: Option<LogFormat>,
    pub log_dir: Option<PathBuf>,
    pub log_level: Option<String>,
    pub exec_kill_after: Option<String>,
    /// `--exec-allow`: comma-separated patterns.
    pub exec_allow: Option<String>,
    /// `--exec-env`: comma-separated names.
    pub exec_env: Option<String>,
    pub exec_root: Option<PathBuf>,
    pub shard_groups: Option<String>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_client_ca: Option<PathBuf>,
    pub insecure: bool,
    pub insecure_local: bool,
    pub socket: Option<String>,
    pub tls_handshake_timeout: Option<String>,
    pub grpc_max_connections: Option<u32>,
    pub grpc_max_connections_per_peer: Option<u32>,
}

/// Everything `run` needs, validated.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub database_url: String,
    pub runtime: RuntimeSettings,
    pub handlers: Vec<String>,
    pub builtin: BuiltinOptions,
    pub metrics_listen: Option<SocketAddr>,
    pub output: OutputFormat,
    pub log_format: LogFormat,
    pub log_dir: Option<PathBuf>,
    pub log_level: String,
    /// gRPC listener, TLS and tokens; `None` with `listen = "off"`.
    pub grpc: Option<GrpcConfig>,
    /// `[[schedules]]`, validated, names unique.
    pub schedules: Vec<Schedule>,
}

/// Parses a human duration (`30s`, `250ms`, `5m`), naming the setting when it is not one.
pub fn duration(setting: &str, text: &str) -> Result<Duration, ConfigError> {
    humantime::parse_duration(text.trim()).map_err(|e| {
        invalid(
            setting,
            format!("{text:?} is not a duration ({e}); write e.g. 30s, 250ms, 5m"),
        )
    })
}

fn pick<T>(flag: Option<T>, file: Option<T>) -> Option<T> {
    flag.or(file)
}

/// A comma-separated flag (split, trimmed, empty items dropped) or else the file's list.
fn list(flag: Option<String>, file: Option<Vec<String>>) -> Option<Vec<String>> {
    match flag {
        Some(text) => Some(
            text.split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
        ),
        None => file,
    }
}

fn pick_duration(
    setting: &str,
    flag: Option<String>,
    file: Option<String>,
    default: Duration,
) -> Result<Duration, ConfigError> {
    match pick(flag, file) {
        Some(text) => duration(setting, &text),
        None => Ok(default),
    }
}

impl AgentConfig {
    /// Merges defaults ← file ← environment/flags and validates the result.
    pub fn resolve(
        file: FileConfig,
        cli: Overrides,
        env_database_url: Option<String>,
    ) -> Result<Self, ConfigError> {
        let d = RuntimeSettings::default();
        let database_url = pick(cli.database_url, file.database_url)
            .or(env_database_url)
            .filter(|u| !u.trim().is_empty())
            .ok_or_else(|| {
                invalid(
                    "database_url",
                    "give --database-url, LEASEHOLD_DATABASE_URL, DATABASE_URL or database_url in the config file",
                )
            })?;
        if !(database_url.starts_with("postgres://")
            || database_url.starts_with("postgresql://")
            || database_url.starts_with("sqlite://"))
        {
            return Err(invalid(
                "database_url",
                "must start with postgres:// (or postgresql://) or sqlite:// (sqlite://PATH)",
            ));
        }
        let handlers: Vec<String> = match (cli.handlers, file.handlers) {
            (Some(list), _) => list
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
            (None, Some(list)) => list,
            (None, None) => Vec::new(),
        };
        if handlers.is_empty() {
            return Err(invalid(
                "handlers",
                format!(
                    "name at least one handler to run (built-in: {})",
                    BUILTIN.join(", ")
                ),
            ));
        }
        let unserved_after = match pick(cli.unserved_after, file.unserved_after) {
            None => d.unserved_after,
            Some(t) if t.trim() == "off" => None,
            Some(t) => Some(duration("unserved_after", &t)?),
        };
        let metrics_listen =
            match pick(cli.metrics_listen, file.metrics_listen) {
                None => None,
                Some(a) if a.trim() == "off" => None,
                Some(a) => Some(a.trim().parse::<SocketAddr>().map_err(|e| {
                    invalid("metrics_listen", format!("{a:?} is not host:port ({e})"))
                })?),
            };
        let grpc = grpc::resolve(
            GrpcOverrides {
                listen: cli.listen,
                tls_cert: cli.tls_cert,
                tls_key: cli.tls_key,
                tls_client_ca: cli.tls_client_ca,
                insecure: cli.insecure,
                insecure_local: cli.insecure_local || file.insecure_local.unwrap_or(false),
            },
            file.listen,
            file.tls,
            file.tokens,
            file.insecure,
        )?;
        let transport = grpc::resolve_transport(
            grpc::TransportOverrides {
                socket: cli.socket,
                handshake_timeout: cli.tls_handshake_timeout,
                max_connections: cli.grpc_max_connections,
                max_connections_per_peer: cli.grpc_max_connections_per_peer,
            },
            grpc::TransportOverrides {
                socket: file.socket,
                handshake_timeout: file.tls_handshake_timeout,
                max_connections: file.grpc_max_connections,
                max_connections_per_peer: file.grpc_max_connections_per_peer,
            },
        )?;
        let grpc = grpc.map(|g| GrpcConfig { transport, ..g });
        // The address the registry publishes is the bound one, set when the listener opens.
        let grpc_address = None;
        let exec_file = file.exec.unwrap_or_default();
        let builtin = BuiltinOptions {
            exec_kill_after: pick_duration(
                "exec.kill_after",
                cli.exec_kill_after,
                exec_file.kill_after,
                BuiltinOptions::default().exec_kill_after,
            )?,
            exec_output_tail: exec_file
                .output_tail
                .unwrap_or(BuiltinOptions::default().exec_output_tail),
            exec_allow: list(cli.exec_allow, file.exec_allow).unwrap_or_default(),
            exec_env: list(cli.exec_env, file.exec_env)
                .unwrap_or(BuiltinOptions::default().exec_env),
            exec_root: pick(cli.exec_root, file.exec_root),
        };
        crate::handlers::ExecPolicy::new(
            &builtin.exec_allow,
            &builtin.exec_env,
            builtin.exec_root.as_deref(),
        )
        .map_err(|(setting, detail)| invalid(setting, detail))?;
        if let Some(root) = &builtin.exec_root
            && !root.is_dir()
        {
            return Err(invalid(
                "exec_root",
                format!("{} is not a directory", root.display()),
            ));
        }
        if !(64..=1024 * 1024).contains(&builtin.exec_output_tail) {
            return Err(invalid(
                "exec.output_tail",
                "must be within 64..=1048576 bytes",
            ));
        }
        let runtime = RuntimeSettings {
            name: pick(cli.id, file.id).unwrap_or(d.name),
            concurrency: pick(cli.concurrency, file.concurrency).unwrap_or(d.concurrency),
            lease_ttl: pick_duration("lease_ttl", cli.lease_ttl, file.lease_ttl, d.lease_ttl)?,
            heartbeat: pick_duration("heartbeat", cli.heartbeat, file.heartbeat, d.heartbeat)?,
            grace: pick_duration("grace", cli.grace, file.grace, d.grace)?,
            poll_interval: pick_duration(
                "poll_interval",
                cli.poll_interval,
                file.poll_interval,
                d.poll_interval,
            )?,
            shutdown_timeout: pick_duration(
                "shutdown_timeout",
                cli.shutdown_timeout,
                file.shutdown_timeout,
                d.shutdown_timeout,
            )?,
            stop_grace: pick_duration("stop_grace", cli.stop_grace, file.stop_grace, d.stop_grace)?,
            claim_batch: pick(cli.claim_batch, file.claim_batch).unwrap_or(d.claim_batch),
            claim_workers: d.claim_workers,
            complete_batch: d.complete_batch,
            complete_workers: d.complete_workers,
            complete_flush: d.complete_flush,
            retention: pick_duration("retention", cli.retention, file.retention, d.retention)?,
            dead_retention: pick_duration(
                "dead_retention",
                cli.dead_retention,
                file.dead_retention,
                d.dead_retention,
            )?,
            unserved_after,
            max_connections: pick(cli.max_connections, file.max_connections)
                .unwrap_or(d.max_connections),
            recovery_per_tick: pick(cli.recovery_per_tick, file.recovery_per_tick)
                .unwrap_or(d.recovery_per_tick),
            exit_when_idle: cli.exit_when_idle || file.exit_when_idle.unwrap_or(false),
            idle_timeout: match pick(cli.idle_timeout, file.idle_timeout) {
                None => None,
                Some(t) if t.trim() == "off" => None,
                Some(t) => Some(duration("idle_timeout", &t)?),
            },
            idle_since: match pick(cli.idle_since, file.idle_since) {
                None => None,
                Some(t) if t.trim() == "all" => None,
                Some(t) => Some(duration("idle_since", &t)?),
            },
            grpc_address,
            shard_groups: shard_groups(cli.shard_groups, file.shard_groups)?,
        };
        runtime
            .validate()
            .map_err(|e| invalid(e.setting, e.detail))?;
        if handlers.iter().any(|h| h == "exec") && builtin.exec_allow.is_empty() {
            return Err(invalid(
                "exec_allow",
                "the exec handler runs a program only if exec_allow allows it, and none is \
                 allowed: give --exec-allow '/usr/local/bin/*' (absolute paths, * and ? stay \
                 within one directory) or --exec-allow '*' to allow any program explicitly \
                 (also LEASEHOLD_EXEC_ALLOW, or exec_allow in the config file)",
            ));
        }
        for name in &handlers {
            if !BUILTIN.contains(&name.as_str())
                && leasehold_shared::TaskType::new(name.as_str()).is_err()
            {
                return Err(invalid(
                    "handlers",
                    format!("{name:?} is not a handler name"),
                ));
            }
        }
        let mut schedules: Vec<Schedule> = Vec::new();
        for (index, entry) in file.schedules.unwrap_or_default().into_iter().enumerate() {
            let schedule = entry.resolve(index)?;
            if schedules.iter().any(|s| s.name() == schedule.name()) {
                return Err(invalid(
                    &format!("schedules[{index}]"),
                    format!("the name {:?} is declared twice", schedule.name().as_str()),
                ));
            }
            // The AddSchedule call's exec check, against this agent's policy when it runs exec.
            let policy = crate::handlers::ExecPolicy::new(
                &builtin.exec_allow,
                &builtin.exec_env,
                builtin.exec_root.as_deref(),
            )
            .ok()
            .filter(|_| handlers.iter().any(|h| h == "exec"));
            if schedule.task_type().as_str() == "exec" {
                let setting = format!("schedules[{index}] ({:?})", schedule.name().as_str());
                crate::handlers::exec::check_enqueue(schedule.payload(), policy.as_ref())
                    .map_err(|e| invalid(&setting, e))?;
            }
            schedules.push(schedule);
        }
        let log_level = pick(cli.log_level, file.log_level).unwrap_or_else(|| "info".to_string());
        tracing_subscriber::EnvFilter::try_new(&log_level)
            .map_err(|e| invalid("log_level", format!("{log_level:?}: {e}")))?;
        Ok(AgentConfig {
            database_url,
            runtime,
            handlers,
            builtin,
            metrics_listen,
            output: pick(cli.output, file.output).unwrap_or(OutputFormat::Text),
            log_format: pick(cli.log_format, file.log_format).unwrap_or(LogFormat::Text),
            log_dir: pick(cli.log_dir, file.log_dir),
            log_level,
            grpc,
            schedules,
        })
    }
}

/// The groups to join: `--shard-groups a,b` (or the file's list), each a valid group name,
/// each once.
fn shard_groups(
    cli: Option<String>,
    file: Option<Vec<String>>,
) -> Result<Vec<leasehold_shared::store::GroupName>, ConfigError> {
    let names: Vec<String> = match (cli, file) {
        (Some(list), _) => list
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect(),
        (None, Some(list)) => list,
        (None, None) => Vec::new(),
    };
    let mut groups = Vec::new();
    for name in names {
        let group = leasehold_shared::store::GroupName::new(name.trim())
            .map_err(|e| invalid("shard_groups", e.to_string()))?;
        if groups.contains(&group) {
            return Err(invalid(
                "shard_groups",
                format!("{:?} is named twice", group.as_str()),
            ));
        }
        groups.push(group);
    }
    Ok(groups)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn url() -> Overrides {
        Overrides {
            database_url: Some("postgres://x@y/z".into()),
            handlers: Some("noop".into()),
            ..Overrides::default()
        }
    }

    fn file(text: &str) -> FileConfig {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn flags_beat_the_file_and_the_file_beats_defaults() {
        let f = file(
            "concurrency = 7\nlease_ttl = \"40s\"\nheartbeat = \"5s\"\nhandlers = [\"sleep\"]",
        );
        let cli = Overrides {
            concurrency: Some(9),
            handlers: None,
            ..url()
        };
        let c = AgentConfig::resolve(f, cli, None).unwrap();
        assert_eq!(c.runtime.concurrency, 9);
        assert_eq!(c.runtime.lease_ttl, Duration::from_secs(40));
        assert_eq!(c.runtime.heartbeat, Duration::from_secs(5));
        assert_eq!(c.handlers, vec!["sleep"]);
        assert_eq!(c.runtime.grace, crate::runtime::settings::DEFAULT_GRACE);
    }

    #[test]
    fn the_database_url_falls_back_to_database_url_env() {
        let cli = Overrides {
            database_url: None,
            ..url()
        };
        let c = AgentConfig::resolve(
            FileConfig::default(),
            cli.clone(),
            Some("postgres://a/b".into()),
        )
        .unwrap();
        assert_eq!(c.database_url, "postgres://a/b");
        let e = AgentConfig::resolve(FileConfig::default(), cli, None).unwrap_err();
        assert!(e.to_string().starts_with("database_url:"), "{e}");
    }

    #[test]
    fn bad_values_name_their_setting() {
        let cases: Vec<(Overrides, &str)> = vec![
            (
                Overrides {
                    lease_ttl: Some("soon".into()),
                    ..url()
                },
                "lease_ttl",
            ),
            (
                Overrides {
                    heartbeat: Some("15s".into()),
                    ..url()
                },
                "heartbeat",
            ),
            (
                Overrides {
                    concurrency: Some(0),
                    ..url()
                },
                "concurrency",
            ),
            (
                Overrides {
                    handlers: Some(" , ".into()),
                    ..url()
                },
                "handlers",
            ),
            (
                Overrides {
                    handlers: Some("Bad Name".into()),
                    ..url()
                },
                "handlers",
            ),
            (
                Overrides {
                    metrics_listen: Some("nowhere".into()),
                    ..url()
                },
                "metrics_listen",
            ),
            (
                Overrides {
                    id: Some("has space".into()),
                    ..url()
                },
                "id",
            ),
            (
                Overrides {
                    database_url: Some("mysql://x".into()),
                    ..url()
                },
                "database_url",
            ),
            (
                Overrides {
                    log_level: Some("[".into()),
                    ..url()
                },
                "log_level",
            ),
        ];
        for (cli, setting) in cases {
            let e = AgentConfig::resolve(FileConfig::default(), cli, None).unwrap_err();
            assert!(
                e.to_string().starts_with(&format!("{setting}:")),
                "{setting}: {e}"
            );
        }
    }

    #[test]
    fn exec_needs_an_allow_list_and_its_settings_are_checked() {
        let exec = |extra: Overrides| Overrides {
            handlers: Some("exec,noop".into()),
            ..extra
        };
        let e = AgentConfig::resolve(FileConfig::default(), exec(url()), None).unwrap_err();
        let text = e.to_string();
        assert!(text.starts_with("exec_allow:"), "{text}");
        assert!(text.contains("--exec-allow '/usr/local/bin/*'"), "{text}");
        assert!(text.contains("--exec-allow '*'"), "{text}");
        // Without exec, no allow list is needed.
        AgentConfig::resolve(FileConfig::default(), url(), None).unwrap();

        let cli = Overrides {
            exec_allow: Some("/usr/local/bin/*, /usr/bin/env".into()),
            exec_env: Some("PATH,TZ".into()),
            exec_root: Some("/tmp".into()),
            ..url()
        };
        let c = AgentConfig::resolve(FileConfig::default(), exec(cli), None).unwrap();
        assert_eq!(c.builtin.exec_allow, ["/usr/local/bin/*", "/usr/bin/env"]);
        assert_eq!(c.builtin.exec_env, ["PATH", "TZ"]);
        assert_eq!(c.builtin.exec_root.as_deref(), Some(Path::new("/tmp")));

        let f = file("exec_allow = [\"*\"]\nexec_env = [\"HOME\"]\nexec_root = \"/tmp\"");
        let c = AgentConfig::resolve(f, exec(url()), None).unwrap();
        assert_eq!(c.builtin.exec_allow, ["*"]);
        assert_eq!(c.builtin.exec_env, ["HOME"]);
        let c = AgentConfig::resolve(
            FileConfig::default(),
            Overrides {
                exec_allow: Some("*".into()),
                ..exec(url())
            },
            None,
        )
        .unwrap();
        assert_eq!(c.builtin.exec_env, ["PATH", "HOME", "LANG"]);

        let bad: [(Overrides, &str); 4] = [
            (
                Overrides {
                    exec_allow: Some("bin/*".into()),
                    ..url()
                },
                "exec_allow",
            ),
            (
                Overrides {
                    exec_env: Some("PATH,LD_PRELOAD".into()),
                    ..url()
                },
                "exec_env",
            ),
            (
                Overrides {
                    exec_root: Some("jobs".into()),
                    ..url()
                },
                "exec_root",
            ),
            (
                Overrides {
                    exec_root: Some("/nonexistent/leasehold-root".into()),
                    ..url()
                },
                "exec_root",
            ),
        ];
        for (cli, setting) in bad {
            let e = AgentConfig::resolve(FileConfig::default(), cli, None).unwrap_err();
            assert!(
                e.to_string().starts_with(&format!("{setting}:")),
                "{setting}: {e}"
            );
        }
    }

    #[test]
    fn unknown_keys_and_wrong_types_in_the_file_are_refused() {
        assert!(toml::from_str::<FileConfig>("concurency = 3").is_err());
        assert!(toml::from_str::<FileConfig>("concurrency = \"three\"").is_err());
        assert!(toml::from_str::<FileConfig>("[exec]\nkill = \"1s\"").is_err());
        let f = file("unserved_after = \"off\"\nmetrics_listen = \"127.0.0.1:0\"");
        let c = AgentConfig::resolve(f, url(), None).unwrap();
        assert_eq!(c.runtime.unserved_after, None);
        assert!(c.metrics_listen.is_some());
    }

    #[test]
    fn shard_groups_come_from_the_flag_or_the_file_and_bad_ones_are_refused() {
        let f = file("shard_groups = [\"orders\", \"tenants\"]");
        let c = AgentConfig::resolve(f, url(), None).unwrap();
        let names: Vec<&str> = c.runtime.shard_groups.iter().map(|g| g.as_str()).collect();
        assert_eq!(names, ["orders", "tenants"]);
        let cli = Overrides {
            shard_groups: Some("a, b".into()),
            ..url()
        };
        let c = AgentConfig::resolve(file("shard_groups = [\"x\"]"), cli, None).unwrap();
        assert_eq!(c.runtime.shard_groups.len(), 2, "the flag beats the file");
        for bad in ["Bad", "a,a", "a/b"] {
            let cli = Overrides {
                shard_groups: Some(bad.into()),
                ..url()
            };
            let e = AgentConfig::resolve(FileConfig::default(), cli, None).unwrap_err();
            assert!(e.to_string().starts_with("shard_groups:"), "{bad}: {e}");
        }
    }

    #[test]
    fn schedules_in_the_file_are_validated_and_named_in_errors() {
        let ok = file(
            r#"
            [[schedules]]
            name = "tick"
            cron = "* * * * * *"
            type = "noop"

            [[schedules]]
            name = "nightly"
            cron = "0 30 2 * * *"
            type = "report.build"
            payload = { region = "eu", days = [1, 2] }
            time_zone = "Europe/Berlin"
            missed = "catch_up"
            catch_up_max = 5
            priority = 3
            enabled = false
            "#,
        );
        let config = AgentConfig::resolve(ok, url(), None).unwrap();
        assert_eq!(config.schedules.len(), 2);
        let nightly = &config.schedules[1];
        assert_eq!(nightly.time_zone().name(), "Europe/Berlin");
        assert_eq!(nightly.missed(), MissedTicks::CatchUp { max: 5 });
        assert_eq!(
            nightly.payload(),
            &serde_json::json!({"region": "eu", "days": [1, 2]})
        );
        assert!(!nightly.enabled());
        assert_eq!(config.schedules[0].missed(), MissedTicks::Skip);

        let refused = |body: &str, want: &str| {
            let text = format!("[[schedules]]\n{body}");
            let error = AgentConfig::resolve(file(&text), url(), None)
                .unwrap_err()
                .to_string();
            assert!(error.contains(want), "{want}: {error}");
            assert!(error.contains("schedules[0]"), "{error}");
        };
        refused(
            "name = \"t\"\ncron = \"61 * * * * *\"\ntype = \"noop\"",
            "cron",
        );
        refused(
            "name = \"t\"\ncron = \"* * * * * *\"\ntype = \"noop\"\ntime_zone = \"Moon/Base\"",
            "time zone",
        );
        refused(
            "name = \"t\"\ncron = \"* * * * * *\"\ntype = \"No Type\"",
            "type",
        );
        refused(
            "name = \"t\"\ncron = \"* * * * * *\"\ntype = \"noop\"\nmissed = \"never\"",
            "missed",
        );
        refused(
            "name = \"t\"\ncron = \"* * * * * *\"\ntype = \"noop\"\ncatch_up_max = 3",
            "catch_up_max",
        );
        let twice = file(
            "[[schedules]]\nname = \"t\"\ncron = \"* * * * * *\"\ntype = \"noop\"\n\
             [[schedules]]\nname = \"t\"\ncron = \"0 * * * * *\"\ntype = \"noop\"\n",
        );
        let error = AgentConfig::resolve(twice, url(), None)
            .unwrap_err()
            .to_string();
        assert!(error.contains("declared twice"), "{error}");
        refused(
            "name = \"t\"\ncron = \"* * * * * *\"\ntype = \"exec\"\n\
             payload = { argv = [\"env\"], env = { LD_PRELOAD = \"x\" } }",
            "LD_PRELOAD",
        );
    }
}
