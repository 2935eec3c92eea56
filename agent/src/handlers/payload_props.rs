//! Property tests of the built-in handlers' payload decoders (issue 18). The runtime turns a
//! task's JSON into a handler's typed payload with `serde_json::from_value` and then calls
//! `Handler::validate` (see `handler::Typed`); both run on untrusted data. For arbitrary JSON
//! neither may panic; a valid payload decodes to exactly what was encoded and validates; a
//! bad one is refused with a message that names the field.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::exec::{ExecHandler, ExecPayload};
use super::fail::{FailHandler, FailPayload, MAX_FAIL_CODE_BYTES};
use super::noop::{NoopHandler, NoopPayload};
use super::sleep::{MAX_SLEEP_MS, SleepHandler, SleepPayload};
use crate::handler::{Handler, HandlerError};

/// Text with the characters validators care about (NUL, `=`, controls, multi-byte).
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[a-z0-9=/ .\u{0}\u{1b}\u{e9}-]{0,24}",
        "[0-9]{1,22} ?(ns|us|ms|s|m|h|d|w|M|y|years|sec|min|x)?",
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 32, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(text(), inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Objects with the payloads' own keys and arbitrary values, so decoding gets past the
/// field names and exercises the value checks.
fn payload_like() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        Just("argv".to_string()),
        Just("env".to_string()),
        Just("cwd".to_string()),
        Just("timeout".to_string()),
        Just("ms".to_string()),
        Just("code".to_string()),
        Just("message".to_string()),
        Just("retryable".to_string()),
        text(),
    ];
    let value = prop_oneof![
        json_value(),
        prop::collection::vec(text(), 0..4).prop_map(|v| json!(v)),
        prop::collection::btree_map(text(), text(), 0..4).prop_map(|m| json!(m)),
    ];
    prop::collection::btree_map(key, value, 0..5)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
}

/// What the runtime does with a payload: decode, then validate.
fn decode<H: Handler>(handler: &H, value: Value) -> Result<H::Payload, HandlerError> {
    let payload: H::Payload = serde_json::from_value(value).map_err(|e| {
        HandlerError::permanent("bad_payload", format!("payload does not fit: {e}"))
    })?;
    handler.validate(&payload)?;
    Ok(payload)
}

fn refused_naming<T: std::fmt::Debug>(
    got: Result<T, HandlerError>,
    field: &str,
) -> Result<(), TestCaseError> {
    match got {
        Ok(p) => Err(TestCaseError::fail(format!("accepted {p:?}"))),
        Err(e) => {
            prop_assert_eq!(&e.code, "bad_payload");
            prop_assert!(!e.retryable, "a bad payload is permanent");
            prop_assert!(
                e.message.contains(field),
                "{:?} does not name {}",
                e.message,
                field
            );
            Ok(())
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_json_never_panics_a_builtin_decoder(
        value in prop_oneof![json_value(), payload_like()],
    ) {
        for result in [
            decode(&ExecHandler::default(), value.clone()).map(drop),
            decode(&SleepHandler, value.clone()).map(drop),
            decode(&FailHandler, value.clone()).map(drop),
            decode(&NoopHandler, value.clone()).map(drop),
        ] {
            if let Err(e) = result {
                prop_assert_eq!(e.code, "bad_payload");
                prop_assert!(!e.retryable);
            }
        }
    }

    #[test]
    fn valid_exec_payloads_round_trip(
        program in "(/[a-zA-Z0-9/._ -]{0,11}|[a-zA-Z0-9._ -]{1,12})",
        args in prop::collection::vec("[a-zA-Z0-9/._ -]{1,12}", 0..4),
        env in prop::collection::btree_map("[A-Z_][A-Z0-9_]{0,8}", "[ -~]{0,12}", 0..4),
        cwd in proptest::option::of("/[a-z/]{0,12}"),
        timeout_ms in proptest::option::of(1u64..=10_000_000_000),
    ) {
        // argv[0] is absolute or a bare name; LD_* names are refused (see exec::policy).
        prop_assume!(env.keys().all(|k| super::exec::policy::env_name_problem(k).is_none()));
        let argv: Vec<String> = std::iter::once(program).chain(args).collect();
        let timeout = timeout_ms.map(|ms| humantime::format_duration(Duration::from_millis(ms)).to_string());
        let want = ExecPayload { argv: argv.clone(), env: env.clone(), cwd: cwd.clone(), timeout: timeout.clone(), ..ExecPayload::default() };
        let value = json!({"argv": argv, "env": env, "cwd": cwd, "timeout": timeout});
        prop_assert_eq!(decode(&ExecHandler::default(), value).unwrap(), want);
        if let (Some(text), Some(ms)) = (timeout.as_deref(), timeout_ms) {
            prop_assert_eq!(humantime::parse_duration(text).unwrap(), Duration::from_millis(ms));
        }
    }

    #[test]
    fn bad_exec_payloads_name_the_field(
        arg in "[a-z]{0,4}\u{0}[a-z]{0,4}",
        key in "[A-Z]{0,3}=[A-Z]{0,3}",
        timeout in "[a-z !?]{1,10}",
        at in 0usize..3,
    ) {
        let mut argv = vec!["prog".to_string(), "a".to_string(), "b".to_string()];
        argv[at] = arg;
        refused_naming(decode(&ExecHandler::default(), json!({"argv": argv})), &format!("argv[{at}]"))?;
        let env: BTreeMap<String, String> = [(key, "v".to_string())].into();
        refused_naming(decode(&ExecHandler::default(), json!({"argv": ["p"], "env": env})), "env")?;
        refused_naming(decode(&ExecHandler::default(), json!({"argv": ["p"], "timeout": timeout})), "timeout")?;
        refused_naming(decode(&ExecHandler::default(), json!({"argv": []})), "argv")?;
        refused_naming(decode(&ExecHandler::default(), json!({"argv": ["p"], "timeout": "0s"})), "timeout")?;
    }

    #[test]
    fn sleep_round_trips_and_refuses_by_field(ms in any::<u64>(), junk in "[a-z_]{1,8}") {
        let got = decode(&SleepHandler, json!({"ms": ms}));
        if ms <= MAX_SLEEP_MS {
            prop_assert_eq!(got.unwrap(), SleepPayload { ms });
        } else {
            refused_naming(got, "ms")?;
        }
        prop_assume!(junk != "ms");
        refused_naming(decode(&SleepHandler, json!({"ms": 1, junk.clone(): 1})), &junk)?;
        refused_naming(decode(&SleepHandler, json!({})), "ms")?;
    }

    #[test]
    fn fail_round_trips_and_refuses_by_field(
        code in ".{0,80}",
        message in any::<String>(),
        retryable in any::<bool>(),
    ) {
        let got = decode(&FailHandler, json!({"code": code, "message": message, "retryable": retryable}));
        if code.is_empty() || code.len() > MAX_FAIL_CODE_BYTES {
            refused_naming(got, "code")?;
        } else {
            prop_assert_eq!(got.unwrap(), FailPayload { code, message, retryable });
        }
    }

    #[test]
    fn noop_takes_only_the_empty_object(key in "[a-z]{1,8}") {
        prop_assert_eq!(decode(&NoopHandler, json!({})).unwrap(), NoopPayload {});
        refused_naming(decode(&NoopHandler, json!({key.clone(): 1})), &key)?;
    }
}
