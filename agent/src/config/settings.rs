//! [`Settings`]: every key of `leasehold-agent run`'s configuration, typed, as the layers
//! ([`super::layers`]) merge them. The keys are the TOML file's; a flag `--lease-ttl` or a
//! variable `LEASEHOLD_LEASE_TTL` sets the key `lease_ttl`.
//!
//! Invariants: `Settings::default()` holds the defaults (the bottom layer), so a key no layer
//! sets has its default; durations are [`Duration`]s read and written by humantime-serde
//! (`"30s"`, `"1m 30s"`, `"250ms"`); unknown keys are refused. Types are checked here; ranges
//! and how settings fit together are checked once the layers are merged
//! (`AgentConfig::resolve`).

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::grpc::{DEFAULT_LISTEN, TlsFile, TokenFile};
use crate::grpc::TransportLimits;
use crate::handlers::BuiltinOptions;
use crate::runtime::RuntimeSettings;

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

/// Output of the run summary (`--exit-when-idle`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum OutputFormat {
    Text,
    Json,
}

/// The default `log_level`.
pub const DEFAULT_LOG_LEVEL: &str = "info";

/// The `[exec]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExecSettings {
    /// Grace between SIGTERM and SIGKILL when `exec` stops a program.
    #[serde(with = "humantime_serde")]
    pub kill_after: Duration,
    /// Bytes kept of the end of stdout (and of stderr).
    pub output_tail: usize,
}

impl Default for ExecSettings {
    fn default() -> Self {
        let d = BuiltinOptions::default();
        Self {
            kill_after: d.exec_kill_after,
            output_tail: d.exec_output_tail,
        }
    }
}

/// One `[[schedules]]` entry (checked by `ScheduleFile::resolve` once merged).
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
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

/// Every setting of `run`, merged from the layers. Field names are the file's keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// No default: a flag, a variable or the file must name it (`DATABASE_URL` is the
    /// lowest layer above the defaults).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database_url: Option<String>,
    /// The agent's name (default: the host name).
    pub id: String,
    /// gRPC listen address, or `off`.
    pub listen: String,
    /// Metrics listen address, or `off` (the default: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_listen: Option<String>,
    pub handlers: Vec<String>,
    pub concurrency: u32,
    #[serde(with = "humantime_serde")]
    pub lease_ttl: Duration,
    #[serde(with = "humantime_serde")]
    pub heartbeat: Duration,
    #[serde(with = "humantime_serde")]
    pub grace: Duration,
    #[serde(with = "humantime_serde")]
    pub poll_interval: Duration,
    #[serde(with = "humantime_serde")]
    pub shutdown_timeout: Duration,
    #[serde(with = "humantime_serde")]
    pub stop_grace: Duration,
    pub claim_batch: u32,
    #[serde(with = "humantime_serde")]
    pub retention: Duration,
    #[serde(with = "humantime_serde")]
    pub dead_retention: Duration,
    /// A duration, or `off` (`None`).
    #[serde(with = "off_or_duration")]
    pub unserved_after: Option<Duration>,
    pub max_connections: u32,
    pub recovery_per_tick: u32,
    /// A switch: a layer that sets it `true` turns it on; no layer turns it off again.
    pub exit_when_idle: bool,
    /// A duration, or `off` (`None`, the default).
    #[serde(with = "off_or_duration")]
    pub idle_timeout: Option<Duration>,
    /// A duration, or `all` (`None`, the default).
    #[serde(with = "all_or_duration")]
    pub idle_since: Option<Duration>,
    pub output: OutputFormat,
    pub log_format: LogFormat,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_dir: Option<PathBuf>,
    pub log_level: String,
    pub exec: ExecSettings,
    pub exec_allow: Vec<String>,
    pub exec_env: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exec_root: Option<PathBuf>,
    /// A switch, as `exit_when_idle`.
    pub insecure: bool,
    /// A switch, as `exit_when_idle`.
    pub insecure_local: bool,
    /// A socket path, or `off` (default: in the runtime directory).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub socket: Option<String>,
    /// Also `handshake_timeout` in the file.
    #[serde(with = "humantime_serde")]
    pub tls_handshake_timeout: Duration,
    pub grpc_max_connections: u32,
    /// Default: 64, or `grpc_max_connections` when that is smaller.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grpc_max_connections_per_peer: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsFile>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tokens: Vec<TokenFile>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub schedules: Vec<ScheduleFile>,
    pub shard_groups: Vec<String>,
    /// A direct PostgreSQL URL to LISTEN on (see `--notify-database-url`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notify_database_url: Option<String>,
    /// `auto`, `transaction` or `none` (see `--pooler`).
    pub pooler: String,
}

impl Default for Settings {
    fn default() -> Self {
        let runtime = RuntimeSettings::default();
        let builtin = BuiltinOptions::default();
        let transport = TransportLimits::default();
        Self {
            database_url: None,
            id: runtime.name,
            listen: DEFAULT_LISTEN.to_string(),
            metrics_listen: None,
            handlers: Vec::new(),
            concurrency: runtime.concurrency,
            lease_ttl: runtime.lease_ttl,
            heartbeat: runtime.heartbeat,
            grace: runtime.grace,
            poll_interval: runtime.poll_interval,
            shutdown_timeout: runtime.shutdown_timeout,
            stop_grace: runtime.stop_grace,
            claim_batch: runtime.claim_batch,
            retention: runtime.retention,
            dead_retention: runtime.dead_retention,
            unserved_after: runtime.unserved_after,
            max_connections: runtime.max_connections,
            recovery_per_tick: runtime.recovery_per_tick,
            exit_when_idle: runtime.exit_when_idle,
            idle_timeout: runtime.idle_timeout,
            idle_since: runtime.idle_since,
            output: OutputFormat::Text,
            log_format: LogFormat::Text,
            log_dir: None,
            log_level: DEFAULT_LOG_LEVEL.to_string(),
            exec: ExecSettings::default(),
            exec_allow: builtin.exec_allow,
            exec_env: builtin.exec_env,
            exec_root: builtin.exec_root,
            insecure: false,
            insecure_local: false,
            socket: None,
            tls_handshake_timeout: transport.handshake_timeout,
            grpc_max_connections: transport.max_connections,
            grpc_max_connections_per_peer: None,
            tls: None,
            tokens: Vec::new(),
            schedules: Vec::new(),
            shard_groups: Vec::new(),
            notify_database_url: None,
            pooler: "auto".to_string(),
        }
    }
}

/// The `expecting` text of every duration: humantime-serde's, which [`super::layers`]
/// recognises to word its error.
pub(crate) const A_DURATION: &str = "a duration";

/// A duration or a word meaning "none" (`off`, `all`): `None` is written as the word.
mod word_or_duration {
    use std::fmt;
    use std::time::Duration;

    use serde::de::{self, Deserializer, Visitor};
    use serde::ser::Serializer;

    pub fn serialize<S: Serializer>(
        value: &Option<Duration>,
        word: &str,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            None => s.serialize_str(word),
            Some(d) => humantime_serde::serialize(d, s),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
        word: &'static str,
    ) -> Result<Option<Duration>, D::Error> {
        struct Or(&'static str);
        impl Visitor<'_> for Or {
            type Value = Option<Duration>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "{} or {}", super::A_DURATION, self.0)
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                if v.trim() == self.0 {
                    return Ok(None);
                }
                humantime::parse_duration(v)
                    .map(Some)
                    .map_err(|_| E::invalid_value(de::Unexpected::Str(v), &self))
            }
        }
        d.deserialize_str(Or(word))
    }
}

/// `unserved_after`, `idle_timeout`: a duration or `off`.
mod off_or_duration {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(v: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        super::word_or_duration::serialize(v, "off", s)
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        super::word_or_duration::deserialize(d, "off")
    }
}

/// `idle_since`: a duration or `all`.
mod all_or_duration {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(v: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        super::word_or_duration::serialize(v, "all", s)
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        super::word_or_duration::deserialize(d, "all")
    }
}
