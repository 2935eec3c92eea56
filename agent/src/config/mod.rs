//! `leasehold-agent run` configuration, in three steps:
//!
//! ```text
//!   layers.rs    figment layers: default < DATABASE_URL < TOML file < LEASEHOLD_* < flags
//!      │         (a later layer wins key by key; each value remembers its layer)
//!      ▼
//!   settings.rs  Settings: every key typed (durations are Durations, humantime-serde)
//!      │
//!      ▼
//!   mod.rs       AgentConfig::resolve: ranges and how settings fit together, checked once
//! ```
//!
//! `DATABASE_URL` is the conventional fallback: used only when neither a flag,
//! `LEASEHOLD_DATABASE_URL` nor the file names the database. `exit_when_idle`, `insecure` and
//! `insecure_local` are switches: set in the file, by variable or by flag, they are on.
//!
//! When things fail: every error names the setting and, where one layer gave the value, that
//! layer (`heartbeat: 15s must be at most half the lease TTL (20s), … (config file
//! /etc/leasehold/agent.toml)`); nothing starts.
//!
//! The file uses the flags' names with underscores; durations are human (`30s`, `1m 30s`,
//! `1h`). Unknown keys are errors (a typo must not silently fall back to a default):
//!
//! ```toml
//! database_url = "postgres://leasehold@db/leasehold"   # or "sqlite:///var/lib/leasehold/q.sqlite"
//! # through PgBouncer: database_url names it, LISTEN goes to PostgreSQL itself
//! # notify_database_url = "postgres://leasehold@db1:5432/leasehold"
//! # pooler = "auto"                       # or "transaction" | "none"
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
//! max_attempts = 3                 # default: the type's policy, as in force at each firing
//! enabled = true                   # for a new schedule only
//! ```
//!
//! `listen`, `insecure`, `insecure_local`, `[tls]` and `[[tokens]]` are described in [`grpc`],
//! as are `socket`, `tls_handshake_timeout`, `grpc_max_connections` and
//! `grpc_max_connections_per_peer` (the transport).

use std::net::SocketAddr;

use thiserror::Error;

pub mod grpc;
pub mod layers;
pub mod perms;
pub mod settings;

#[cfg(test)]
mod props;

pub use grpc::{GrpcConfig, TlsFile, TokenFile};
pub use layers::Layers;
pub use settings::{ExecSettings, LogFormat, OutputFormat, ScheduleFile, Settings};

use leasehold_shared::domain::schedule::{DEFAULT_CATCH_UP, MissedTicks, Schedule};

use crate::handlers::{BUILTIN, BuiltinOptions};
use crate::runtime::RuntimeSettings;

/// Bad configuration: which source, which setting, what is wrong.
#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse {
        path: std::path::PathBuf,
        message: String,
    },
    /// `origin` is the layer that gave the value (`flag --lease-ttl`), when one did.
    #[error("{setting}: {detail}{}", origin.as_ref().map(|o| format!(" ({o})")).unwrap_or_default())]
    Invalid {
        setting: String,
        detail: String,
        origin: Option<String>,
    },
}

impl ConfigError {
    /// Names the layer the setting's value came from, unless the error already does.
    fn with_origin(self, layers: &Layers) -> Self {
        match self {
            ConfigError::Invalid {
                setting,
                detail,
                origin: None,
            } => {
                let origin = layers.origin(&setting);
                ConfigError::Invalid {
                    setting,
                    detail,
                    origin,
                }
            }
            other => other,
        }
    }
}

pub(crate) fn invalid(setting: &str, detail: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        setting: setting.to_string(),
        detail: detail.into(),
        origin: None,
    }
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
            .max_attempts_opt(self.max_attempts)
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

/// Everything `run` needs, validated.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub database_url: String,
    /// A direct PostgreSQL URL to LISTEN on (PostgreSQL only).
    pub notify_database_url: Option<String>,
    /// Whether PostgreSQL is reached through a transaction pooler.
    pub pooler: leasehold_shared::store::postgres::Pooler,
    pub runtime: RuntimeSettings,
    pub handlers: Vec<String>,
    pub builtin: BuiltinOptions,
    pub metrics_listen: Option<SocketAddr>,
    pub output: OutputFormat,
    pub log_format: LogFormat,
    pub log_dir: Option<std::path::PathBuf>,
    pub log_level: String,
    /// gRPC listener, TLS and tokens; `None` with `listen = "off"`.
    pub grpc: Option<GrpcConfig>,
    /// `[[schedules]]`, validated, names unique.
    pub schedules: Vec<Schedule>,
}

impl AgentConfig {
    /// Merges the layers and checks the result.
    pub fn resolve(layers: &Layers) -> Result<Self, ConfigError> {
        Self::from_settings(layers.settings()?, layers)
    }

    /// Checks merged `settings`; an error names the layer its setting came from.
    pub fn from_settings(settings: Settings, layers: &Layers) -> Result<Self, ConfigError> {
        Self::check(settings).map_err(|e| e.with_origin(layers))
    }

    fn check(s: Settings) -> Result<Self, ConfigError> {
        let d = RuntimeSettings::default();
        let database_url = s
            .database_url
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
        let pooler = s
            .pooler
            .parse::<leasehold_shared::store::postgres::Pooler>()
            .map_err(|e| invalid("pooler", e))?;
        let notify_database_url = s.notify_database_url.filter(|u| !u.trim().is_empty());
        if let Some(url) = &notify_database_url {
            if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
                return Err(invalid(
                    "notify_database_url",
                    "must start with postgres:// (or postgresql://)",
                ));
            }
            if database_url.starts_with("sqlite://") {
                return Err(invalid(
                    "notify_database_url",
                    "is for a PostgreSQL database_url (SQLite has no LISTEN)",
                ));
            }
        }
        let handlers = s.handlers;
        if handlers.is_empty() {
            return Err(invalid(
                "handlers",
                format!(
                    "name at least one handler to run (built-in: {})",
                    BUILTIN.join(", ")
                ),
            ));
        }
        let metrics_listen =
            match s.metrics_listen {
                None => None,
                Some(a) if a.trim() == "off" => None,
                Some(a) => Some(a.trim().parse::<SocketAddr>().map_err(|e| {
                    invalid("metrics_listen", format!("{a:?} is not host:port ({e})"))
                })?),
            };
        let grpc = grpc::resolve(&s.listen, s.tls, s.tokens, s.insecure, s.insecure_local)?;
        let transport = grpc::resolve_transport(
            s.socket.as_deref(),
            s.tls_handshake_timeout,
            s.grpc_max_connections,
            s.grpc_max_connections_per_peer,
        )?;
        let grpc = grpc.map(|g| GrpcConfig { transport, ..g });
        let builtin = BuiltinOptions {
            exec_kill_after: s.exec.kill_after,
            exec_output_tail: s.exec.output_tail,
            exec_allow: s.exec_allow,
            exec_env: s.exec_env,
            exec_root: s.exec_root,
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
            name: s.id,
            concurrency: s.concurrency,
            lease_ttl: s.lease_ttl,
            heartbeat: s.heartbeat,
            grace: s.grace,
            poll_interval: s.poll_interval,
            shutdown_timeout: s.shutdown_timeout,
            stop_grace: s.stop_grace,
            claim_batch: s.claim_batch,
            claim_workers: d.claim_workers,
            complete_batch: d.complete_batch,
            complete_workers: d.complete_workers,
            complete_flush: d.complete_flush,
            retention: s.retention,
            dead_retention: s.dead_retention,
            unserved_after: s.unserved_after,
            max_connections: s.max_connections,
            recovery_per_tick: s.recovery_per_tick,
            exit_when_idle: s.exit_when_idle,
            idle_timeout: s.idle_timeout,
            idle_since: s.idle_since,
            // The address the registry publishes is the bound one, set when the listener opens.
            grpc_address: None,
            shard_groups: shard_groups(s.shard_groups)?,
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
        for (index, entry) in s.schedules.into_iter().enumerate() {
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
        let log_level = s.log_level;
        tracing_subscriber::EnvFilter::try_new(&log_level)
            .map_err(|e| invalid("log_level", format!("{log_level:?}: {e}")))?;
        Ok(AgentConfig {
            database_url,
            notify_database_url,
            pooler,
            runtime,
            handlers,
            builtin,
            metrics_listen,
            output: s.output,
            log_format: s.log_format,
            log_dir: s.log_dir,
            log_level,
            grpc,
            schedules,
        })
    }
}

/// The groups to join, each a valid group name, each once.
fn shard_groups(
    names: Vec<String>,
) -> Result<Vec<leasehold_shared::store::GroupName>, ConfigError> {
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
    use std::path::Path;
    use std::time::Duration;

    use figment::value::{Dict, Value};

    use super::layers::tests::{given, layers};
    use super::*;

    /// `--database-url postgres://x@y/z --handlers noop`, then `pairs`.
    fn flags(pairs: &[(&str, Value)]) -> Dict {
        let mut flags = given(&[
            ("database_url", "postgres://x@y/z".into()),
            ("handlers", "noop".into()),
        ]);
        flags.extend(given(pairs));
        flags
    }

    fn resolve(file: Option<&str>, flags: Dict) -> Result<AgentConfig, ConfigError> {
        AgentConfig::resolve(&layers(file, flags))
    }

    fn refused(file: Option<&str>, flags: Dict) -> String {
        resolve(file, flags).unwrap_err().to_string()
    }

    #[test]
    fn flags_beat_the_file_and_the_file_beats_defaults() {
        let f = "concurrency = 7\nlease_ttl = \"40s\"\nheartbeat = \"5s\"\nhandlers = [\"sleep\"]";
        let mut cli = flags(&[("concurrency", 9u32.into())]);
        cli.remove("handlers");
        let c = resolve(Some(f), cli).unwrap();
        assert_eq!(c.runtime.concurrency, 9);
        assert_eq!(c.runtime.lease_ttl, Duration::from_secs(40));
        assert_eq!(c.runtime.heartbeat, Duration::from_secs(5));
        assert_eq!(c.handlers, vec!["sleep"]);
        assert_eq!(c.runtime.grace, crate::runtime::settings::DEFAULT_GRACE);
    }

    #[test]
    fn bad_values_name_their_setting() {
        let cases: [(&str, Value, &str); 9] = [
            ("lease_ttl", "soon".into(), "lease_ttl"),
            ("heartbeat", "15s".into(), "heartbeat"),
            ("concurrency", 0u32.into(), "concurrency"),
            ("handlers", " , ".into(), "handlers"),
            ("handlers", "Bad Name".into(), "handlers"),
            ("metrics_listen", "nowhere".into(), "metrics_listen"),
            ("id", "has space".into(), "id"),
            ("database_url", "mysql://x".into(), "database_url"),
            ("log_level", "[".into(), "log_level"),
        ];
        for (id, value, setting) in cases {
            let e = refused(None, flags(&[(id, value)]));
            assert!(e.starts_with(&format!("{setting}:")), "{setting}: {e}");
            let flag = format!("(flag --{})", id.replace('_', "-"));
            assert!(e.ends_with(&flag), "{setting}: {e}");
        }
    }

    #[test]
    fn exec_needs_an_allow_list_and_its_settings_are_checked() {
        let exec = |pairs: &[(&str, Value)]| {
            let mut f = flags(pairs);
            f.insert("handlers".into(), "exec,noop".into());
            f
        };
        let text = refused(None, exec(&[]));
        assert!(text.starts_with("exec_allow:"), "{text}");
        assert!(text.contains("--exec-allow '/usr/local/bin/*'"), "{text}");
        assert!(text.contains("--exec-allow '*'"), "{text}");
        // Without exec, no allow list is needed.
        resolve(None, flags(&[])).unwrap();

        let c = resolve(
            None,
            exec(&[
                ("exec_allow", "/usr/local/bin/*, /usr/bin/env".into()),
                ("exec_env", "PATH,TZ".into()),
                ("exec_root", "/tmp".into()),
            ]),
        )
        .unwrap();
        assert_eq!(c.builtin.exec_allow, ["/usr/local/bin/*", "/usr/bin/env"]);
        assert_eq!(c.builtin.exec_env, ["PATH", "TZ"]);
        assert_eq!(c.builtin.exec_root.as_deref(), Some(Path::new("/tmp")));

        let f = "exec_allow = [\"*\"]\nexec_env = [\"HOME\"]\nexec_root = \"/tmp\"";
        let c = resolve(Some(f), exec(&[])).unwrap();
        assert_eq!(c.builtin.exec_allow, ["*"]);
        assert_eq!(c.builtin.exec_env, ["HOME"]);
        let c = resolve(None, exec(&[("exec_allow", "*".into())])).unwrap();
        assert_eq!(c.builtin.exec_env, ["PATH", "HOME", "LANG"]);

        let bad: [(&str, &str, &str); 4] = [
            ("exec_allow", "bin/*", "exec_allow"),
            ("exec_env", "PATH,LD_PRELOAD", "exec_env"),
            ("exec_root", "jobs", "exec_root"),
            ("exec_root", "/nonexistent/leasehold-root", "exec_root"),
        ];
        for (id, value, setting) in bad {
            let e = refused(None, flags(&[(id, value.into())]));
            assert!(e.starts_with(&format!("{setting}:")), "{setting}: {e}");
        }
    }

    #[test]
    fn off_switches_off_and_the_file_is_typed() {
        let f = "unserved_after = \"off\"\nmetrics_listen = \"127.0.0.1:0\"";
        let c = resolve(Some(f), flags(&[])).unwrap();
        assert_eq!(c.runtime.unserved_after, None);
        assert!(c.metrics_listen.is_some());
        let c = resolve(
            Some("metrics_listen = \"127.0.0.1:0\""),
            flags(&[("metrics_listen", "off".into())]),
        )
        .unwrap();
        assert_eq!(
            c.metrics_listen, None,
            "the flag's off beats the file's address"
        );
    }

    #[test]
    fn shard_groups_come_from_the_flag_or_the_file_and_bad_ones_are_refused() {
        let c = resolve(Some("shard_groups = [\"orders\", \"tenants\"]"), flags(&[])).unwrap();
        let names: Vec<&str> = c.runtime.shard_groups.iter().map(|g| g.as_str()).collect();
        assert_eq!(names, ["orders", "tenants"]);
        let c = resolve(
            Some("shard_groups = [\"x\"]"),
            flags(&[("shard_groups", "a, b".into())]),
        )
        .unwrap();
        assert_eq!(c.runtime.shard_groups.len(), 2, "the flag beats the file");
        for bad in ["Bad", "a,a", "a/b"] {
            let e = refused(None, flags(&[("shard_groups", bad.into())]));
            assert!(e.starts_with("shard_groups:"), "{bad}: {e}");
        }
    }

    #[test]
    fn schedules_in_the_file_are_validated_and_named_in_errors() {
        let ok = r#"
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
            "#;
        let config = resolve(Some(ok), flags(&[])).unwrap();
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

        let schedule_refused = |body: &str, want: &str| {
            let text = format!("[[schedules]]\n{body}");
            let error = refused(Some(&text), flags(&[]));
            assert!(error.contains(want), "{want}: {error}");
            assert!(error.contains("schedules[0]"), "{error}");
        };
        schedule_refused(
            "name = \"t\"\ncron = \"61 * * * * *\"\ntype = \"noop\"",
            "cron",
        );
        schedule_refused(
            "name = \"t\"\ncron = \"* * * * * *\"\ntype = \"noop\"\ntime_zone = \"Moon/Base\"",
            "time zone",
        );
        schedule_refused(
            "name = \"t\"\ncron = \"* * * * * *\"\ntype = \"No Type\"",
            "type",
        );
        schedule_refused(
            "name = \"t\"\ncron = \"* * * * * *\"\ntype = \"noop\"\nmissed = \"never\"",
            "missed",
        );
        schedule_refused(
            "name = \"t\"\ncron = \"* * * * * *\"\ntype = \"noop\"\ncatch_up_max = 3",
            "catch_up_max",
        );
        let twice = "[[schedules]]\nname = \"t\"\ncron = \"* * * * * *\"\ntype = \"noop\"\n\
                     [[schedules]]\nname = \"t\"\ncron = \"0 * * * * *\"\ntype = \"noop\"\n";
        let error = refused(Some(twice), flags(&[]));
        assert!(error.contains("declared twice"), "{error}");
        schedule_refused(
            "name = \"t\"\ncron = \"* * * * * *\"\ntype = \"exec\"\n\
             payload = { argv = [\"env\"], env = { LD_PRELOAD = \"x\" } }",
            "LD_PRELOAD",
        );
    }
}
