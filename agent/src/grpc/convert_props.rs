//! Property tests of wire → domain conversion in the agent (issue 18): every decoder of a
//! request field in [`super::convert`] and [`super::schedules::schedule_from_wire`], fed
//! arbitrary values and arbitrary prost messages (built field by field, and decoded from
//! arbitrary bytes), must never panic; valid values round-trip; refusals are
//! INVALID_ARGUMENT naming the field.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use leasehold_proto::v1 as pb;
use leasehold_shared::{InputLimits, TaskStatus};
use proptest::prelude::*;
use prost::Message;
use tonic::{Code, Status};

use super::convert::{
    duration_from_wire, json_without_nul, opt_error_code, opt_task_type, status_from_wire,
    status_to_wire, task_id_from_wire, task_type_from_wire, text_without_nul, time_from_wire,
};
use super::dead_letters::dead_filter_from_wire;
use super::schedules::schedule_from_wire;

/// Latest time the wire accepts: 9999-12-31T23:59:59.999Z in Unix ms.
const MAX_WIRE_MS: i64 = 253_402_300_799_999;

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[a-z0-9_.:*-]{0,70}",
        "[a-zA-Z0-9 \u{0}\u{1b}\u{e9}._-]{0,70}",
    ]
}

/// Integers with the edges (0, ±1, extremes, the 9999 boundary) well represented.
fn int() -> impl Strategy<Value = i64> {
    prop_oneof![
        any::<i64>(),
        -2i64..=2,
        Just(i64::MIN),
        Just(i64::MAX),
        (MAX_WIRE_MS - 2)..=(MAX_WIRE_MS + 2),
        0i64..=MAX_WIRE_MS,
    ]
}

fn refused(got: Result<impl std::fmt::Debug, Status>, field: &str) -> Result<(), TestCaseError> {
    match got {
        Ok(v) => Err(TestCaseError::fail(format!("{field}: accepted {v:?}"))),
        Err(s) => {
            prop_assert_eq!(s.code(), Code::InvalidArgument);
            prop_assert!(
                s.message().contains(field),
                "{:?} does not name {}",
                s.message(),
                field
            );
            Ok(())
        }
    }
}

fn json_text() -> impl Strategy<Value = String> {
    prop_oneof![
        text(),
        Just(String::new()),
        Just("{}".to_string()),
        Just("{\"a\": \"\\u0000\"}".to_string()),
        "\\{\"[a-z]{1,4}\": [0-9]{1,4}\\}",
    ]
}

fn requeue_dead() -> impl Strategy<Value = pb::RequeueDeadRequest> {
    (text(), text(), int(), int(), any::<bool>(), any::<bool>()).prop_map(
        |(task_type, error_code, since_ms, until_ms, all, dry_run)| pb::RequeueDeadRequest {
            task_type,
            error_code,
            since_ms,
            until_ms,
            all,
            dry_run,
            ..Default::default()
        },
    )
}

fn add_schedule() -> impl Strategy<Value = pb::AddScheduleRequest> {
    let cron = prop_oneof![
        text(),
        Just("0 */5 * * * *".to_string()),
        "[0-9*/,-]{1,4} [0-9*/,-]{1,4} [0-9*/,-]{1,4} [0-9*?/,-]{1,4} [0-9*/,-]{1,4} [0-9*?/,-]{1,4}",
    ];
    let zone = prop_oneof![
        text(),
        Just("Europe/Berlin".to_string()),
        Just(String::new())
    ];
    let missed = prop_oneof![
        Just(String::new()),
        Just("skip".to_string()),
        Just("catch_up".to_string()),
        text()
    ];
    (
        (text(), cron, text(), json_text(), zone),
        (
            missed,
            any::<u32>(),
            any::<i32>(),
            any::<i32>(),
            any::<bool>(),
        ),
    )
        .prop_map(
            |(
                (name, cron, task_type, payload_json, time_zone),
                (missed, catch_up_max, priority, max_attempts, disabled),
            )| pb::AddScheduleRequest {
                name,
                cron,
                task_type,
                payload_json,
                time_zone,
                missed,
                catch_up_max,
                priority,
                max_attempts,
                disabled,
                ..pb::AddScheduleRequest::default()
            },
        )
}

/// Every field a schedule refusal may blame (as the messages spell them).
const SCHEDULE_FIELDS: [&str; 10] = [
    "payload_json",
    "priority",
    "catch_up_max",
    "missed",
    "name",
    "cron",
    "time_zone",
    "task type",
    "max_attempts",
    "payload",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn statuses_round_trip_and_other_numbers_are_refused(n in any::<i32>(), pick in 0usize..8) {
        let s = TaskStatus::ALL[pick];
        prop_assert_eq!(status_from_wire("statuses", status_to_wire(s) as i32).unwrap(), s);
        match status_from_wire("statuses", n) {
            Ok(got) => prop_assert_eq!(status_to_wire(got) as i32, n),
            Err(_) => refused(status_from_wire("statuses", n), "statuses")?,
        }
    }

    #[test]
    fn times_are_unix_ms_within_1970_to_9999(ms in int()) {
        match time_from_wire("since_ms", ms) {
            Ok(None) => prop_assert_eq!(ms, 0),
            Ok(Some(t)) => {
                prop_assert!((1..=MAX_WIRE_MS).contains(&ms));
                prop_assert_eq!(t.timestamp_millis(), ms, "round trip");
            }
            Err(_) => {
                prop_assert!(!(0..=MAX_WIRE_MS).contains(&ms));
                refused(time_from_wire("since_ms", ms), "since_ms")?;
            }
        }
    }

    #[test]
    fn ids_durations_and_codes_are_checked_by_field(n in int(), code in text()) {
        match task_id_from_wire("id", n) {
            Ok(id) => prop_assert!(n > 0 && id.0 == n),
            Err(_) => refused(task_id_from_wire("id", n), "id")?,
        }
        match duration_from_wire("delay_ms", n) {
            Ok(None) => prop_assert_eq!(n, 0),
            Ok(Some(d)) => prop_assert_eq!(d, Duration::from_millis(n.unsigned_abs())),
            Err(_) => refused(duration_from_wire("delay_ms", n), "delay_ms")?,
        }
        match opt_error_code("error_code", &code) {
            Ok(None) => prop_assert!(code.is_empty()),
            Ok(Some(c)) => prop_assert_eq!(c, code),
            Err(_) => refused(opt_error_code("error_code", &code), "error_code")?,
        }
    }

    #[test]
    fn task_types_from_the_wire_never_panic(name in text()) {
        match task_type_from_wire("task_type", &name) {
            Ok(t) => prop_assert_eq!(t.as_str(), name.as_str()),
            Err(_) => refused(task_type_from_wire("task_type", &name), "task_type")?,
        }
        prop_assert_eq!(opt_task_type("task_type", "").unwrap(), None);
    }

    #[test]
    fn nul_is_refused_anywhere_in_text_and_json(s in text(), depth in 0usize..4) {
        let has_nul = s.contains('\0');
        prop_assert_eq!(text_without_nul("text", &s).is_err(), has_nul);
        let mut value = serde_json::json!(s.clone());
        for _ in 0..depth {
            value = serde_json::json!({"k": [1, value]});
        }
        match json_without_nul("payload_json", &value) {
            Ok(()) => prop_assert!(!has_nul),
            Err(_) => refused(json_without_nul("payload_json", &value), "payload_json")?,
        }
        let keyed = serde_json::json!({ s.clone(): 1 });
        prop_assert_eq!(json_without_nul("payload_json", &keyed).is_err(), has_nul);
    }

    #[test]
    fn requeue_dead_requests_never_panic_and_blame_a_field(r in requeue_dead()) {
        if let Err(s) = dead_filter_from_wire((&r).into(), "requeue") {
            prop_assert_eq!(s.code(), Code::InvalidArgument);
            let named = ["task_type", "error_code", "since_ms", "until_ms", "all", "filter"]
                .iter()
                .any(|f| s.message().contains(f));
            prop_assert!(named, "{}", s.message());
        }
    }

    #[test]
    fn schedule_requests_never_panic_and_blame_a_field(r in add_schedule()) {
        match schedule_from_wire(&r, &InputLimits::default()) {
            Ok(s) => {
                prop_assert_eq!(s.name().as_str(), r.name.as_str());
                prop_assert_eq!(s.cron().as_str(), r.cron.trim());
            }
            Err(s) => {
                prop_assert_eq!(s.code(), Code::InvalidArgument);
                let named = SCHEDULE_FIELDS.iter().any(|f| s.message().contains(f));
                prop_assert!(named, "{}", s.message());
            }
        }
    }

    #[test]
    fn arbitrary_bytes_decode_to_an_error_or_a_message_the_converters_take(
        bytes in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        if let Ok(r) = pb::RequeueDeadRequest::decode(bytes.as_slice()) {
            let _ = dead_filter_from_wire((&r).into(), "requeue");
            prop_assert_eq!(pb::RequeueDeadRequest::decode(r.encode_to_vec().as_slice()).unwrap(), r);
        }
        if let Ok(r) = pb::AddScheduleRequest::decode(bytes.as_slice()) {
            let _ = schedule_from_wire(&r, &InputLimits::default());
        }
        if let Ok(r) = pb::ListTasksRequest::decode(bytes.as_slice()) {
            for s in &r.statuses {
                let _ = status_from_wire("statuses", *s);
            }
            let _ = time_from_wire("since_ms", r.since_ms);
            let _ = opt_task_type("task_type", &r.task_type);
        }
        if let Ok(r) = pb::EnqueueRequest::decode(bytes.as_slice()) {
            let _ = task_type_from_wire("task_type", &r.task_type);
            let _ = duration_from_wire("delay_ms", r.delay_ms);
            let _ = time_from_wire("deadline_at_ms", r.deadline_at_ms);
        }
    }
}
