use std::time::Duration;

use super::*;

fn set_args(task_type: &str, after: Duration) -> ShedSetArgs {
    ShedSetArgs {
        task_type: task_type.to_owned(),
        after,
    }
}

fn clear_args(task_type: &str) -> TypeArgs {
    TypeArgs {
        task_type: task_type.to_owned(),
    }
}

#[test]
fn set_requests_carry_the_type_and_milliseconds_clear_requests_none() {
    assert_eq!(
        prepare_set(&set_args("email.send", Duration::from_secs(30))),
        v1::SetShedAfterRequest {
            task_type: "email.send".into(),
            shed_after_ms: 30_000,
            clear: false,
        }
    );
    assert_eq!(
        prepare_set(&set_args("noop", Duration::from_millis(1))).shed_after_ms,
        1
    );
    assert_eq!(
        prepare_clear(&clear_args("email.send")),
        v1::SetShedAfterRequest {
            task_type: "email.send".into(),
            shed_after_ms: 0,
            clear: true,
        }
    );
}

fn changed(
    request: &v1::SetShedAfterRequest,
    shed_after_ms: Option<u64>,
    previous_ms: Option<u64>,
) -> Result<Changed, WireError> {
    Changed::from_reply(
        request,
        &v1::SetShedAfterResponse {
            shed_after_ms,
            previous_ms,
            warnings: Vec::new(),
        },
    )
}

#[test]
fn set_and_clear_say_what_changed() {
    let set = prepare_set(&set_args("email.send", Duration::from_secs(30)));
    let clear = prepare_clear(&clear_args("email.send"));
    let text = |c: Result<Changed, WireError>| c.map(|c| line(&c));
    assert_eq!(
        text(changed(&set, Some(30_000), None)).as_deref(),
        Ok("type email.send sheds tasks waiting over 30s (was never)")
    );
    assert_eq!(
        text(changed(&set, Some(30_000), Some(300_000))).as_deref(),
        Ok("type email.send sheds tasks waiting over 30s (was 5m)")
    );
    assert_eq!(
        text(changed(&set, Some(30_000), Some(30_000))).as_deref(),
        Ok("type email.send sheds tasks waiting over 30s (unchanged)")
    );
    assert_eq!(
        text(changed(&set, Some(5_400_000), Some(1_500))).as_deref(),
        Ok("type email.send sheds tasks waiting over 90m (was 1500ms)")
    );
    assert_eq!(
        text(changed(&clear, None, Some(30_000))).as_deref(),
        Ok("type email.send no longer sheds (was 30s)")
    );
    assert_eq!(
        text(changed(&clear, None, None)).as_deref(),
        Ok("type email.send did not shed (nothing changed)")
    );
}

#[test]
fn untrusted_type_names_are_shown_inert() {
    let set = v1::SetShedAfterRequest {
        task_type: "x\u{1b}[2J".into(),
        shed_after_ms: 1_000,
        clear: false,
    };
    let c = changed(&set, Some(1_000), None).unwrap_or_else(|e| panic!("{e}"));
    assert!(!line(&c).contains('\u{1b}'), "{}", line(&c));
}

#[test]
fn set_and_clear_json_give_both_settings_in_milliseconds() {
    let set = prepare_set(&set_args("email.send", Duration::from_secs(30)));
    let c = changed(&set, Some(30_000), None);
    assert_eq!(
        c.ok()
            .and_then(|c| serde_json::to_string(&c).ok())
            .as_deref(),
        Some(r#"{"task_type":"email.send","shed_after_ms":30000,"previous_ms":null}"#)
    );
    let clear = prepare_clear(&clear_args("email.send"));
    let c = changed(&clear, None, Some(30_000));
    assert_eq!(
        c.ok().and_then(|c| serde_json::to_value(c).ok()),
        Some(serde_json::json!({
            "task_type": "email.send",
            "shed_after_ms": null,
            "previous_ms": 30000
        }))
    );
}

#[test]
fn a_reply_that_contradicts_its_request_or_the_bounds_is_refused() {
    let set = prepare_set(&set_args("noop", Duration::from_secs(30)));
    let clear = prepare_clear(&clear_args("noop"));
    assert_eq!(
        changed(&set, None, None),
        Err(WireError::MissingField("shed_after_ms"))
    );
    assert!(matches!(
        changed(&clear, Some(30_000), None),
        Err(WireError::Broken(m)) if m == "shedding after 30s still in force after clearing it"
    ));
    assert!(matches!(
        changed(&set, Some(0), None),
        Err(WireError::OutOfRange {
            field: "shed_after_ms",
            ..
        })
    ));
    assert!(matches!(
        changed(&set, Some(30_000), Some(604_800_001)),
        Err(WireError::OutOfRange {
            field: "previous_ms",
            ..
        })
    ));
}
