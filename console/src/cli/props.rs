//! Property tests of the command line's decoders (issue 18): every flag-value parser in
//! [`super::values`] and clap over the whole command tree. For arbitrary input none may
//! panic; a valid value round-trips (durations written by humantime, RFC 3339 times, names,
//! limits); a bad one is refused with a message, and clap refuses a bad command line as a
//! usage error (exit 2) rather than anything else.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use clap::Parser;
use proptest::prelude::*;

use super::Cli;
use super::values::{self, Limit, TimeOrDuration};

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[0-9]{1,22} ?(ns|ms|s|m|h|d|w|M|y|years|x)?",
        "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2})",
        "[a-zA-Z0-9_.:/#\u{0}\u{1b} -]{0,140}",
    ]
}

/// Words of the command line: subcommands, flags and values, so clap gets deep.
fn word() -> impl Strategy<Value = String> {
    const WORDS: [&str; 55] = [
        "enqueue",
        "tasks",
        "ls",
        "show",
        "cancel",
        "requeue",
        "dlq",
        "concurrency",
        "set",
        "pause",
        "resume",
        "agents",
        "types",
        "ratelimit",
        "clear",
        "--global",
        "50/1s",
        "shed",
        "30s",
        "schedules",
        "locks",
        "release",
        "acquire",
        "renew",
        "--for",
        "--wait",
        "--holder",
        "--fencing-token",
        "shards",
        "create",
        "watch",
        "wait",
        "--status",
        "--type",
        "--since",
        "--limit",
        "--before",
        "--delay",
        "--run-at",
        "--deadline",
        "--timeout",
        "--text",
        "--output",
        "json",
        "--count",
        "--priority",
        "--max-attempts",
        "--idempotency-key",
        "--concurrency-key",
        "--per-key",
        "--payload",
        "breaker",
        "--failures",
        "--within",
        "--cooldown",
    ];
    prop_oneof![
        3 => (0..WORDS.len()).prop_map(|i| WORDS[i].to_string()),
        2 => text(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn durations_round_trip_and_never_panic(ms in any::<u64>(), s in text()) {
        let d = Duration::from_millis(ms);
        let written = humantime::format_duration(d).to_string();
        prop_assert_eq!(values::duration(&written).unwrap(), d);
        if ms > 0 {
            prop_assert_eq!(values::positive_duration(&written).unwrap(), d);
        }
        let _ = values::duration(&s);
        let _ = values::positive_duration(&s);
        if let Ok(d) = values::duration_ms("--delay", d) {
            prop_assert_eq!(u128::try_from(d).unwrap(), Duration::from_millis(ms).as_millis());
        }
    }

    #[test]
    fn times_round_trip_and_relative_ones_never_panic(
        ms in 1i64..=253_402_300_799_999,
        s in text(),
        now_ms in -8_334_601_228_800_000i64..=8_210_266_876_799_999,
    ) {
        let t = DateTime::<Utc>::from_timestamp_millis(ms).unwrap();
        let written = t.to_rfc3339_opts(SecondsFormat::Millis, true);
        prop_assert_eq!(values::rfc3339(&written).unwrap(), t);
        prop_assert_eq!(values::time_or_duration(&written).unwrap(), TimeOrDuration::At(t));
        prop_assert_eq!(values::epoch_ms("--since", t).unwrap(), ms);
        let now = DateTime::<Utc>::from_timestamp_millis(now_ms).unwrap();
        if let Ok(when) = values::time_or_duration(&s) {
            let _ = when.before(now);
            let _ = when.after(now);
        }
        if let Ok(t) = values::rfc3339(&s) {
            let _ = values::epoch_ms("--since", t);
        }
    }

    #[test]
    fn names_keys_and_filters_never_panic_and_round_trip(s in text()) {
        for parse in [
            values::task_type,
            values::schedule_name,
            values::lock_name,
            values::shard_group,
            values::idempotency_key,
            values::concurrency_key,
            values::text_filter,
        ] {
            match parse(&s) {
                Ok(v) => prop_assert_eq!(v, s.clone()),
                Err(message) => {
                    prop_assert!(!message.is_empty());
                    prop_assert!(!message.contains('\u{1b}'), "quoted inert: {message:?}");
                }
            }
        }
        if let Ok(n) = values::shard_count(&s) {
            prop_assert_eq!(values::shard_count(&n.to_string()).unwrap(), n);
        }
    }

    #[test]
    fn limits_round_trip(n in any::<u32>(), s in text()) {
        match values::limit(&n.to_string()) {
            Ok(Limit::Max(m)) => prop_assert!(m == n && n <= values::MAX_CONCURRENCY_LIMIT),
            Ok(Limit::Unlimited) => prop_assert!(false, "{n} read as unlimited"),
            Err(_) => prop_assert!(n > values::MAX_CONCURRENCY_LIMIT),
        }
        let _ = values::limit(&s);
    }

    #[test]
    fn rates_round_trip_and_never_panic(starts in 1u32..=1_000_000, ms in 1u64..=86_400_000, s in text()) {
        let limit = leasehold_shared::domain::RateLimit::new(starts, Duration::from_millis(ms)).unwrap();
        prop_assert_eq!(values::rate(&limit.to_string()).unwrap(), limit);
        let written = format!("{starts}/{}", humantime::format_duration(Duration::from_millis(ms)));
        prop_assert_eq!(values::rate(&written).unwrap(), limit);
        match values::rate(&s) {
            Ok(r) => prop_assert!((1..=1_000_000).contains(&r.starts)),
            Err(message) => {
                prop_assert!(!message.is_empty());
                prop_assert!(!message.contains('\u{1b}'), "quoted inert: {message:?}");
            }
        }
        let _ = values::rate(&format!("{starts}/{s}"));
    }

    #[test]
    fn any_command_line_parses_or_is_a_usage_error(words in prop::collection::vec(word(), 0..7)) {
        let argv = std::iter::once("leasehold".to_string()).chain(words);
        if let Err(e) = Cli::try_parse_from(argv) {
            let _ = e.render().to_string();
            // Help and version requests are not errors; everything else is usage (exit 2).
            if !matches!(e.kind(), clap::error::ErrorKind::DisplayHelp
                | clap::error::ErrorKind::DisplayVersion
                | clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand)
            {
                prop_assert_eq!(e.exit_code(), 2, "{}", e);
            }
        }
    }
}
