//! Where each setting comes from: figment layers, lowest first, a later one winning key by key
//! (tables merge, lists and values replace):
//!
//! ```text
//!   default            Settings::default()
//!   DATABASE_URL       database_url only, the conventional fallback
//!   config file        --config FILE (TOML), parsed with the workspace `toml`
//!   environment        LEASEHOLD_* variables the user set (clap reads them)
//!   flags              the flags given on the command line
//! ```
//!
//! The environment and flag layers hold only what the user gave: clap tells each value's
//! source, so a flag's absence never hides a file's value. Comma lists (`--handlers a,b`)
//! become lists; the switches (`--insecure`, `--insecure-local`, `--exit-when-idle`) count only
//! when on, so a variable set to false does not turn off what the file turned on.
//!
//! Every value keeps its layer. [`Layers::settings`] turns a figment error into a
//! [`ConfigError::Invalid`] naming the key and where the value came from
//! (`lease_ttl: "soon" is not a duration (...) (flag --lease-ttl)`), and
//! [`Layers::origin`] names the source of a merged value for the checks that follow.
//!
//! When things fail: an unreadable file or bad TOML syntax is refused when the file is added
//! (`cannot read config file …`, `config file …: TOML parse error …`); a value of the wrong
//! type, an unknown key or a bad duration is refused by [`Layers::settings`].

use std::path::{Path, PathBuf};

use figment::error::{Actual, Kind, OneOf};
use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};

use super::settings::{A_DURATION, Settings};
use super::{ConfigError, invalid};

/// Flags and variables whose key sits in a table of the file.
const NESTED: [(&str, &str, &str); 4] = [
    ("tls_cert", "tls", "cert"),
    ("tls_key", "tls", "key"),
    ("tls_client_ca", "tls", "client_ca"),
    ("exec_kill_after", "exec", "kill_after"),
];

/// Flags and variables that take a comma-separated list (the file takes a TOML list).
const LISTS: [&str; 4] = ["handlers", "exec_allow", "exec_env", "shard_groups"];

/// Switches: on when any layer turns them on.
const SWITCHES: [&str; 3] = ["exit_when_idle", "insecure", "insecure_local"];

/// Other names a file may use for a key: (alias, key).
const ALIASES: [(&str, &str); 1] = [("handshake_timeout", "tls_handshake_timeout")];

/// One layer: its values and how to name where one of them came from.
struct Layer {
    metadata: Metadata,
    values: Dict,
}

impl Provider for Layer {
    fn metadata(&self) -> Metadata {
        self.metadata.clone()
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Ok(Profile::Default.collect(self.values.clone()))
    }
}

/// The layers of one `run`, merged by figment.
#[derive(Debug, Clone)]
pub struct Layers {
    figment: Figment,
    file: Option<PathBuf>,
}

impl Default for Layers {
    fn default() -> Self {
        Self::new()
    }
}

impl Layers {
    /// The defaults alone.
    pub fn new() -> Self {
        let values = match Value::serialize(Settings::default()) {
            Ok(Value::Dict(_, dict)) => dict,
            // Settings serialize to a table: an empty layer leaves serde's defaults, the same.
            _ => Dict::new(),
        };
        let defaults = Layer {
            metadata: Metadata::named("default")
                .interpolater(|_: &Profile, _: &[&str]| "default".to_string()),
            values,
        };
        Layers {
            figment: Figment::from(defaults),
            file: None,
        }
    }

    /// `DATABASE_URL`: the database when no higher layer names one.
    pub fn database_url_fallback(self, url: Option<String>) -> Self {
        let Some(url) = url else { return self };
        let mut values = Dict::new();
        values.insert("database_url".into(), Value::from(url));
        self.merge(Layer {
            metadata: Metadata::named("environment").interpolater(|_: &Profile, _: &[&str]| {
                "environment variable DATABASE_URL".to_string()
            }),
            values,
        })
    }

    /// Reads and adds the TOML file at `path`.
    pub fn file(self, path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        self.file_text(path, &text)
    }

    /// Adds `text` as the TOML file at `path`. Only its syntax is checked here.
    pub fn file_text(mut self, path: &Path, text: &str) -> Result<Self, ConfigError> {
        let parse = |message: String| ConfigError::Parse {
            path: path.to_path_buf(),
            message: message.trim_end().to_string(),
        };
        let table: toml::Table = toml::from_str(text).map_err(|e| parse(e.to_string()))?;
        let mut values = match Value::serialize(&table) {
            Ok(Value::Dict(_, dict)) => dict,
            Ok(_) => Dict::new(),
            Err(e) => return Err(parse(e.to_string())),
        };
        for (alias, key) in ALIASES {
            if let Some(value) = values.remove(alias) {
                if values.contains_key(key) {
                    return Err(ConfigError::Invalid {
                        setting: key.to_string(),
                        detail: format!("give {key} or {alias}, not both"),
                        origin: Some(format!("config file {}", path.display())),
                    });
                }
                values.insert(key.to_string(), value);
            }
        }
        let shown = path.display().to_string();
        self.file = Some(path.to_path_buf());
        Ok(self.merge(Layer {
            metadata: Metadata::named("config file")
                .source(path)
                .interpolater(move |_: &Profile, _: &[&str]| format!("config file {shown}")),
            values,
        }))
    }

    /// The `LEASEHOLD_*` variables the user set, by argument id (`lease_ttl`, `tls_cert`).
    pub fn environment(self, given: Dict) -> Self {
        self.merge(Layer {
            metadata: Metadata::named("environment").interpolater(|_: &Profile, keys: &[&str]| {
                format!(
                    "environment variable LEASEHOLD_{}",
                    keys.join("_").to_uppercase()
                )
            }),
            values: from_arguments(given),
        })
    }

    /// The flags given on the command line, by argument id (`lease_ttl`, `tls_cert`).
    pub fn flags(self, given: Dict) -> Self {
        self.merge(Layer {
            metadata: Metadata::named("flag").interpolater(|_: &Profile, keys: &[&str]| {
                format!("flag --{}", keys.join("-").replace('_', "-"))
            }),
            values: from_arguments(given),
        })
    }

    fn merge(self, layer: Layer) -> Self {
        Layers {
            figment: self.figment.merge(layer),
            file: self.file,
        }
    }

    /// The config file, if one was added.
    pub fn file_path(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// The merged settings; a bad value is refused naming its key and its source.
    pub fn settings(&self) -> Result<Settings, ConfigError> {
        self.figment.extract::<Settings>().map_err(from_figment)
    }

    /// Where the value of `setting` came from (`flag --lease-ttl`, `config file /etc/…`,
    /// `default`), for an error about it. `setting` is an error's setting: a key
    /// (`lease_ttl`, `exec.kill_after`) or an entry of a list (`schedules[1] ("nightly")`).
    /// `None` for a table (its keys may come from several layers) or a missing key.
    pub fn origin(&self, setting: &str) -> Option<String> {
        let key = setting.split(['[', ' ']).next().filter(|k| !k.is_empty())?;
        let value = self.figment.find_value(key).ok()?;
        if matches!(value, Value::Dict(..)) {
            return None;
        }
        let metadata = self.figment.get_metadata(value.tag())?;
        let keys: Vec<&str> = key.split('.').collect();
        Some(metadata.interpolate(&Profile::Default, &keys))
    }
}

/// Arguments (by clap id) as file keys: lists split, tables nested, switches only when on.
fn from_arguments(given: Dict) -> Dict {
    let mut values = Dict::new();
    for (id, value) in given {
        if SWITCHES.contains(&id.as_str()) && !matches!(value, Value::Bool(_, true)) {
            continue;
        }
        let value = match value {
            Value::String(tag, text) if LISTS.contains(&id.as_str()) => Value::Array(
                tag,
                text.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(Value::from)
                    .collect(),
            ),
            other => other,
        };
        match NESTED.iter().find(|(flat, _, _)| *flat == id) {
            Some((_, table, key)) => {
                let entry = values
                    .entry((*table).to_string())
                    .or_insert_with(|| Value::from(Dict::new()));
                if let Value::Dict(_, dict) = entry {
                    dict.insert((*key).to_string(), value);
                }
            }
            None => {
                values.insert(id, value);
            }
        }
    }
    values
}

/// A figment error as a setting error: the key (`schedules[0].every`), serde's wording with
/// our duration message, and the layer the value came from.
fn from_figment(error: figment::Error) -> ConfigError {
    let mut path: Vec<String> = error.path.clone();
    if let Kind::MissingField(field) = &error.kind {
        path.push(field.to_string());
    }
    let setting = path.iter().fold(String::new(), |mut key, part| {
        if part.parse::<usize>().is_ok() {
            key.push_str(&format!("[{part}]"));
        } else {
            if !key.is_empty() {
                key.push('.');
            }
            key.push_str(part);
        }
        key
    });
    let detail = match &error.kind {
        Kind::InvalidValue(Actual::Str(text), expected) if expected.starts_with(A_DURATION) => {
            let why = humantime::parse_duration(text)
                .err()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default();
            let word = expected
                .strip_prefix(A_DURATION)
                .unwrap_or_default()
                .trim_start_matches(" or ");
            let or_word = if word.is_empty() {
                String::new()
            } else {
                format!(", or {word}")
            };
            format!("{text:?} is not a duration{why}; write e.g. 30s, 250ms, 5m{or_word}")
        }
        Kind::InvalidType(actual, expected) => {
            format!("invalid type: {}, expected {expected}", unexpected(actual))
        }
        Kind::InvalidValue(actual, expected) => {
            format!("invalid value: {}, expected {expected}", unexpected(actual))
        }
        Kind::UnknownField(field, expected) => {
            format!("unknown field `{field}`, expected {}", OneOf(expected))
        }
        Kind::UnknownVariant(variant, expected) => {
            format!("unknown variant `{variant}`, expected {}", OneOf(expected))
        }
        other => other.to_string(),
    };
    let origin = error.metadata.as_ref().map(|metadata| {
        let profile = error.profile.clone().unwrap_or_default();
        metadata.interpolate(&profile, &error.path)
    });
    if setting.is_empty() {
        return invalid("config", detail);
    }
    ConfigError::Invalid {
        setting,
        detail,
        origin,
    }
}

/// A value as serde words it in its errors (`string "x"`, `integer `-1``).
fn unexpected(actual: &Actual) -> String {
    match actual {
        Actual::Bool(b) => format!("boolean `{b}`"),
        Actual::Unsigned(n) => format!("integer `{n}`"),
        Actual::Signed(n) => format!("integer `{n}`"),
        Actual::Float(n) => format!("floating point `{n}`"),
        Actual::Char(c) => format!("character `{c}`"),
        Actual::Unit => "unit value".to_string(),
        Actual::Option => "Option value".to_string(),
        other => other.to_string(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use std::time::Duration;

    use super::*;
    use crate::config::AgentConfig;

    /// Where the test file claims to live.
    pub(crate) const FILE: &str = "/etc/leasehold/agent.toml";

    /// Argument values as clap hands them over, by id.
    pub(crate) fn given(pairs: &[(&str, Value)]) -> Dict {
        pairs
            .iter()
            .map(|(id, value)| ((*id).to_string(), value.clone()))
            .collect()
    }

    /// Defaults, `DATABASE_URL=postgres://x@y/z`, the file (if any), then `flags`.
    pub(crate) fn layers(file: Option<&str>, flags: Dict) -> Layers {
        let mut layers = Layers::new().database_url_fallback(Some("postgres://x@y/z".into()));
        if let Some(text) = file {
            layers = layers.file_text(Path::new(FILE), text).unwrap();
        }
        layers.flags(flags)
    }

    /// The layers of one case: a file (always, with `handlers = ["noop"]` first), variables,
    /// flags.
    fn case(file: &str, env: &[(&str, Value)], flags: &[(&str, Value)]) -> Layers {
        let text = format!("handlers = [\"noop\"]\n{file}");
        Layers::new()
            .database_url_fallback(Some("postgres://x@y/z".into()))
            .file_text(Path::new(FILE), &text)
            .unwrap()
            .environment(given(env))
            .flags(given(flags))
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    type Check = fn(&Settings) -> bool;
    type Pairs = Vec<(&'static str, Value)>;
    /// (what, file, variables, flags, check).
    type ValueCase = (&'static str, &'static str, Pairs, Pairs, Check);
    /// (file, variables, flags, the error starts with, the error ends with).
    type ErrorCase<'a> = (&'static str, Pairs, Pairs, &'a str, &'a str);

    #[test]
    fn each_layer_beats_the_one_below_key_by_key() {
        let cases: Vec<ValueCase> = vec![
            ("default", "", vec![], vec![], |s| {
                s.lease_ttl == secs(20)
                    && s.listen == "127.0.0.1:7070"
                    && s.exec.output_tail == 4096
            }),
            ("file", "lease_ttl = \"1m 30s\"", vec![], vec![], |s| {
                s.lease_ttl == secs(90)
            }),
            (
                "env over file",
                "lease_ttl = \"30s\"",
                vec![("lease_ttl", "40s".into())],
                vec![],
                |s| s.lease_ttl == secs(40),
            ),
            (
                "flag over env",
                "lease_ttl = \"30s\"",
                vec![("lease_ttl", "40s".into())],
                vec![("lease_ttl", "50s".into())],
                |s| s.lease_ttl == secs(50),
            ),
            (
                "a flag for a key of a table keeps the table's other keys",
                "[exec]\nkill_after = \"2s\"\noutput_tail = 100",
                vec![],
                vec![("exec_kill_after", "3s".into())],
                |s| s.exec.kill_after == secs(3) && s.exec.output_tail == 100,
            ),
            (
                "tls from the file and a flag",
                "[tls]\ncert = \"c.pem\"\nkey = \"k.pem\"",
                vec![("tls_key", "other.pem".into())],
                vec![],
                |s| {
                    let tls = s.tls.clone().unwrap_or_default();
                    tls.cert == Some("c.pem".into()) && tls.key == Some("other.pem".into())
                },
            ),
            (
                "comma lists are split and trimmed, empty items dropped",
                "",
                vec![],
                vec![("handlers", "sleep, noop,,".into())],
                |s| s.handlers == ["sleep", "noop"],
            ),
            (
                "a list replaces the lower layer's list",
                "exec_env = [\"HOME\", \"TZ\"]",
                vec![("exec_env", "PATH".into())],
                vec![],
                |s| s.exec_env == ["PATH"],
            ),
            (
                "the file's handshake_timeout is tls_handshake_timeout",
                "handshake_timeout = \"3s\"",
                vec![],
                vec![],
                |s| s.tls_handshake_timeout == secs(3),
            ),
            (
                "off and all",
                "unserved_after = \" off \"\nidle_timeout = \"off\"\nidle_since = \"all\"",
                vec![],
                vec![],
                |s| {
                    s.unserved_after.is_none() && s.idle_timeout.is_none() && s.idle_since.is_none()
                },
            ),
            (
                "durations where off is allowed",
                "unserved_after = \"2m\"\nidle_timeout = \"1h\"\nidle_since = \"0s\"",
                vec![],
                vec![],
                |s| {
                    s.unserved_after == Some(secs(120))
                        && s.idle_timeout == Some(secs(3600))
                        && s.idle_since == Some(Duration::ZERO)
                },
            ),
            (
                "a switch set false by a variable leaves the file's on",
                "exit_when_idle = true",
                vec![("exit_when_idle", false.into())],
                vec![],
                |s| s.exit_when_idle,
            ),
            (
                "a switch turned on by flag",
                "",
                vec![],
                vec![("insecure", true.into())],
                |s| s.insecure && !s.insecure_local,
            ),
            (
                "the file beats DATABASE_URL, a variable beats the file",
                "database_url = \"sqlite:///file\"",
                vec![("database_url", "sqlite:///env".into())],
                vec![],
                |s| s.database_url.as_deref() == Some("sqlite:///env"),
            ),
        ];
        for (what, file, env, flags, check) in cases {
            let settings = case(file, &env, &flags).settings().unwrap();
            assert!(check(&settings), "{what}: {settings:#?}");
        }
        let s = Layers::new().settings().unwrap();
        assert_eq!(
            s.database_url, None,
            "no database without a layer naming one"
        );
    }

    #[test]
    fn bad_values_name_the_key_and_where_they_came_from() {
        let file = format!("(config file {FILE})");
        let or_off = format!("; write e.g. 30s, 250ms, 5m, or off {file}");
        let or_all = format!(", or all {file}");
        let cases: Vec<ErrorCase> = vec![
            (
                "",
                vec![],
                vec![("lease_ttl", "soon".into())],
                "lease_ttl: \"soon\" is not a duration (expected number at 0); write e.g. 30s, \
                 250ms, 5m",
                "(flag --lease-ttl)",
            ),
            (
                "",
                vec![("lease_ttl", "5 parsecs".into())],
                vec![],
                "lease_ttl: \"5 parsecs\" is not a duration (unknown time unit \"parsecs\"",
                "(environment variable LEASEHOLD_LEASE_TTL)",
            ),
            (
                "lease_ttl = \"soon\"",
                vec![],
                vec![],
                "lease_ttl: \"soon\" is not a duration",
                &file,
            ),
            (
                "",
                vec![("exec_kill_after", "x".into())],
                vec![],
                "exec.kill_after: \"x\" is not a duration",
                "(environment variable LEASEHOLD_EXEC_KILL_AFTER)",
            ),
            (
                "unserved_after = \"never\"",
                vec![],
                vec![],
                "unserved_after: \"never\" is not a duration",
                &or_off,
            ),
            (
                "idle_since = \"forever\"",
                vec![],
                vec![],
                "idle_since: \"forever\" is not a duration",
                &or_all,
            ),
            (
                "concurency = 3",
                vec![],
                vec![],
                "concurency: unknown field `concurency`, expected one of `database_url`, `id`",
                &file,
            ),
            (
                "[exec]\nkill = \"1s\"",
                vec![],
                vec![],
                "exec.kill: unknown field `kill`, expected `kill_after` or `output_tail`",
                &file,
            ),
            (
                "concurrency = \"many\"",
                vec![],
                vec![],
                "concurrency: invalid type: string \"many\", expected u32",
                &file,
            ),
            (
                "concurrency = -1",
                vec![],
                vec![],
                "concurrency: invalid value: integer `-1`, expected u32",
                &file,
            ),
            (
                "exec_allow = \"*\"",
                vec![],
                vec![],
                "exec_allow: invalid type: string \"*\", expected a sequence",
                &file,
            ),
            (
                "[[schedules]]\nname = \"t\"\ncron = \"* * * * * *\"\ntype = \"noop\"\nevery = 1",
                vec![],
                vec![],
                "schedules[0].every: unknown field `every`",
                &file,
            ),
            (
                "[[tokens]]\nname = \"t\"\nsecret = \"0123456789abcdefg\"",
                vec![],
                vec![],
                "tokens[0].role: missing field `role`",
                &file,
            ),
            (
                "[[tokens]]\nname = \"t\"\nrole = \"admin\"\nsecret = \"0123456789abcdefg\"",
                vec![],
                vec![],
                "tokens[0].role: unknown variant `admin`, expected `viewer` or `operator`",
                &file,
            ),
            (
                "",
                vec![],
                vec![("output", "yaml".into())],
                "output: unknown variant `yaml`, expected `text` or `json`",
                "(flag --output)",
            ),
            // Checks after the merge name the layer too.
            (
                "lease_ttl = \"20s\"\nheartbeat = \"15s\"",
                vec![],
                vec![],
                "heartbeat: 15s must be at most half the lease TTL (20s)",
                &file,
            ),
            (
                "",
                vec![],
                vec![("lease_ttl", "6s".into())],
                "heartbeat: 4s must be at most half the lease TTL (6s)",
                "(default)",
            ),
            (
                "concurrency = 5",
                vec![],
                vec![("concurrency", 0u32.into())],
                "concurrency: must be within 1..=",
                "(flag --concurrency)",
            ),
            (
                "",
                vec![("metrics_listen", "everywhere".into())],
                vec![],
                "metrics_listen: \"everywhere\" is not host:port",
                "(environment variable LEASEHOLD_METRICS_LISTEN)",
            ),
            (
                "[[schedules]]\nname = \"t\"\ncron = \"61 * * * * *\"\ntype = \"noop\"",
                vec![],
                vec![],
                "schedules[0] (\"t\"): cron is invalid",
                &file,
            ),
            (
                "",
                vec![],
                vec![("database_url", "mysql://x".into())],
                "database_url: must start with postgres://",
                "(flag --database-url)",
            ),
            (
                "",
                vec![],
                vec![("tls_cert", "c.pem".into())],
                "tls: give both tls.cert and tls.key (--tls-cert, --tls-key)",
                "--tls-key)",
            ),
            (
                "",
                vec![("pooler", "session".into())],
                vec![],
                "pooler: \"session\" is not auto, transaction or none",
                "(environment variable LEASEHOLD_POOLER)",
            ),
            (
                "notify_database_url = \"mysql://x\"",
                vec![],
                vec![],
                "notify_database_url: must start with postgres://",
                &file,
            ),
            (
                "",
                vec![],
                vec![
                    ("database_url", "sqlite:///q.db".into()),
                    ("notify_database_url", "postgres://u@h/db".into()),
                ],
                "notify_database_url: is for a PostgreSQL database_url",
                "(flag --notify-database-url)",
            ),
        ];
        for (file, env, flags, starts, ends) in cases {
            let layers = case(file, &env, &flags);
            let e = AgentConfig::resolve(&layers).unwrap_err().to_string();
            assert!(e.starts_with(starts), "want {starts:?}…\n got {e}");
            assert!(e.ends_with(ends), "want …{ends:?}\n got {e}");
        }
    }

    #[test]
    fn database_url_falls_back_to_the_variable_and_a_missing_one_names_no_layer() {
        let from_env = Layers::new()
            .database_url_fallback(Some("mysql://x".into()))
            .flags(given(&[("handlers", "noop".into())]));
        let e = AgentConfig::resolve(&from_env).unwrap_err().to_string();
        assert!(
            e.starts_with("database_url: must start with")
                && e.ends_with("(environment variable DATABASE_URL)"),
            "{e}"
        );
        let none = Layers::new().flags(given(&[("handlers", "noop".into())]));
        let e = AgentConfig::resolve(&none).unwrap_err().to_string();
        assert_eq!(
            e,
            "database_url: give --database-url, LEASEHOLD_DATABASE_URL, DATABASE_URL or \
             database_url in the config file"
        );
    }

    #[test]
    fn the_file_is_read_and_its_syntax_checked_when_added() {
        let e = Layers::new()
            .file(Path::new("/nonexistent/leasehold.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("cannot read config file /nonexistent/leasehold.toml: "),
            "{e}"
        );
        let e = Layers::new()
            .file_text(Path::new(FILE), "handlers = [\"noop\"")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!("config file {FILE}: TOML parse error")),
            "{e}"
        );
        let both = "handshake_timeout = \"1s\"\ntls_handshake_timeout = \"2s\"";
        let e = Layers::new()
            .file_text(Path::new(FILE), both)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            format!(
                "tls_handshake_timeout: give tls_handshake_timeout or handshake_timeout, not \
                 both (config file {FILE})"
            )
        );
    }

    #[test]
    fn origin_names_the_layer_of_a_merged_value() {
        let layers = case(
            "grace = \"1s\"\n[exec]\noutput_tail = 100",
            &[("heartbeat", "1s".into())],
            &[("exec_kill_after", "1s".into())],
        );
        let cases = [
            ("grace", Some(format!("config file {FILE}"))),
            (
                "heartbeat",
                Some("environment variable LEASEHOLD_HEARTBEAT".into()),
            ),
            ("exec.kill_after", Some("flag --exec-kill-after".into())),
            ("exec.output_tail", Some(format!("config file {FILE}"))),
            ("lease_ttl", Some("default".into())),
            (
                "database_url",
                Some("environment variable DATABASE_URL".into()),
            ),
            ("exec", None),
            ("metrics_listen", None),
            ("", None),
        ];
        for (setting, want) in cases {
            assert_eq!(layers.origin(setting), want, "{setting}");
        }
    }
}
