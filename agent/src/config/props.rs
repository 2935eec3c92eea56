//! Property tests of the configuration decoders (issue 18), through the layers: the TOML file,
//! human durations, handler and shard-group lists and numbers given by flag or file. For
//! arbitrary input none may panic; a duration written by humantime reads back as itself; a bad
//! value is refused with the setting's name (and, from the file, the file's).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use proptest::prelude::*;

use figment::value::{Dict, Value};

use super::layers::tests::{FILE, given};
use super::{AgentConfig, ConfigError, Layers};

/// Settings that take a duration, by their file key (`exec.kill_after`: `--exec-kill-after`).
const DURATION_KEYS: [&str; 10] = [
    "lease_ttl",
    "heartbeat",
    "grace",
    "poll_interval",
    "shutdown_timeout",
    "stop_grace",
    "retention",
    "dead_retention",
    "unserved_after",
    "exec.kill_after",
];

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[0-9]{1,22} ?(ns|ms|s|m|h|d|w|M|y|years|x)?",
        "[a-z0-9_,. \u{0}\u{e9}-]{0,40}",
    ]
}

/// `--database-url sqlite://… --handlers noop`, then `pairs`.
fn base(pairs: &[(&str, Value)]) -> Dict {
    let mut flags = given(&[
        ("database_url", "sqlite:///tmp/leasehold-props.db".into()),
        ("handlers", "noop".into()),
    ]);
    flags.extend(given(pairs));
    flags
}

/// The argument id of a key.
fn id(key: &str) -> String {
    key.replace('.', "_")
}

/// A TOML basic string literal of any text: JSON's escapes are TOML's, and DEL, which JSON
/// leaves bare, must be escaped in TOML.
fn toml_string(s: &str) -> String {
    serde_json::to_string(s)
        .unwrap()
        .replace('\u{7f}', "\\u007F")
}

/// The setting an error names.
fn setting(e: &ConfigError) -> String {
    match e {
        ConfigError::Invalid { setting, .. } => setting.clone(),
        other => panic!("expected a setting error, got {other}"),
    }
}

/// Lines of TOML made of the file's own keys with arbitrary values, so parsing gets past the
/// key check and exercises every value type.
fn file_lines() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        Just("concurrency"),
        Just("claim_batch"),
        Just("max_connections"),
        Just("lease_ttl"),
        Just("heartbeat"),
        Just("grace"),
        Just("handlers"),
        Just("shard_groups"),
        Just("metrics_listen"),
        Just("listen"),
        Just("log_level"),
        Just("unserved_after"),
        Just("exit_when_idle"),
        Just("output"),
        Just("id"),
    ];
    let value = prop_oneof![
        text().prop_map(|s| toml_string(&s)),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<bool>().prop_map(|b| b.to_string()),
        prop::collection::vec(text(), 0..4).prop_map(|v| {
            let items: Vec<String> = v.iter().map(|s| toml_string(s)).collect();
            format!("[{}]", items.join(", "))
        }),
    ];
    prop::collection::btree_map(key, value, 0..6).prop_map(|m| {
        m.into_iter()
            .map(|(k, v)| format!("{k} = {v}\n"))
            .collect::<String>()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn durations_round_trip_and_bad_ones_name_the_setting(ms in any::<u64>(), s in text(), pick in 0usize..10) {
        let d = Duration::from_millis(ms);
        let written = humantime::format_duration(d).to_string();
        let layers = Layers::new().flags(base(&[("lease_ttl", written.into())]));
        prop_assert_eq!(layers.settings().unwrap().lease_ttl, d);
        let key = DURATION_KEYS[pick];
        let layers = Layers::new().flags(base(&[(id(key).as_str(), s.into())]));
        if let Err(e) = layers.settings() {
            prop_assert_eq!(setting(&e), key);
        }
    }

    #[test]
    fn arbitrary_toml_never_panics_the_file_decoder(
        raw in prop_oneof![any::<String>(), file_lines()],
    ) {
        if let Ok(layers) = Layers::new().file_text(std::path::Path::new(FILE), &raw) {
            let _ = AgentConfig::resolve(&layers.flags(base(&[])));
        }
    }

    #[test]
    fn a_bad_duration_in_the_file_is_refused_by_name(s in text(), pick in 0usize..10) {
        let key = DURATION_KEYS[pick];
        let layers = Layers::new()
            .file_text(std::path::Path::new(FILE), &format!("{key} = {}", toml_string(&s)))
            .unwrap()
            .flags(base(&[]));
        let word = matches!(key, "unserved_after") && s.trim() == "off";
        let parses = humantime::parse_duration(s.trim()).is_ok() || word;
        match AgentConfig::resolve(&layers) {
            Ok(_) => prop_assert!(parses, "{s:?} accepted for {key}"),
            Err(e) if !parses => {
                prop_assert_eq!(setting(&e), key);
                prop_assert!(e.to_string().ends_with(&format!("(config file {FILE})")), "{e}");
            }
            // A duration that parses may still be out of range (or against another setting).
            Err(e) => prop_assert!(!setting(&e).is_empty()),
        }
    }

    #[test]
    fn flag_values_never_panic_and_errors_name_a_setting(
        handlers in text(),
        shard_groups in proptest::option::of(text()),
        concurrency in proptest::option::of(any::<u32>()),
        claim_batch in proptest::option::of(any::<u32>()),
        max_connections in proptest::option::of(any::<u32>()),
        lease_ttl in proptest::option::of(text()),
        metrics_listen in proptest::option::of(text()),
        id in proptest::option::of(text()),
        log_level in proptest::option::of(text()),
    ) {
        let mut pairs: Vec<(&str, Value)> = vec![("handlers", handlers.into())];
        let texts = [("shard_groups", shard_groups), ("lease_ttl", lease_ttl),
            ("metrics_listen", metrics_listen), ("id", id), ("log_level", log_level)];
        for (key, value) in texts {
            if let Some(value) = value {
                pairs.push((key, value.into()));
            }
        }
        let numbers = [("concurrency", concurrency), ("claim_batch", claim_batch),
            ("max_connections", max_connections)];
        for (key, value) in numbers {
            if let Some(value) = value {
                pairs.push((key, value.into()));
            }
        }
        if let Err(e) = AgentConfig::resolve(&Layers::new().flags(base(&pairs))) {
            let s = setting(&e);
            let known = ["handlers", "shard_groups", "concurrency", "claim_batch", "max_connections",
                "lease_ttl", "heartbeat", "grace", "metrics_listen", "id", "log_level", "stop_grace",
                "shutdown_timeout", "poll_interval"];
            prop_assert!(known.contains(&s.as_str()), "unexpected setting {s:?}: {e}");
        }
    }
}
