use std::time::Duration;

use leasehold_shared::domain::RateLimit;

use super::*;

fn rate(starts: u32, ms: u64) -> RateLimit {
    RateLimit::new(starts, Duration::from_millis(ms)).unwrap_or_else(|e| panic!("{e}"))
}

fn wire(starts: u32, period_ms: u64) -> v1::RateLimit {
    v1::RateLimit { starts, period_ms }
}

fn set_args(task_type: Option<&str>, global: bool, r: RateLimit) -> RatelimitSetArgs {
    RatelimitSetArgs {
        task_type: task_type.map(str::to_owned),
        rate: r,
        global,
    }
}

fn clear_args(task_type: Option<&str>, global: bool) -> RatelimitClearArgs {
    RatelimitClearArgs {
        task_type: task_type.map(str::to_owned),
        global,
    }
}

#[test]
fn set_requests_carry_the_scope_and_the_limit_in_milliseconds() {
    assert_eq!(
        prepare_set(&set_args(Some("email.send"), false, rate(50, 1_000))).ok(),
        Some(v1::SetRateLimitRequest {
            scope: Some(Scope::TaskType("email.send".into())),
            limit: Some(wire(50, 1_000)),
            clear: false,
        })
    );
    assert_eq!(
        prepare_set(&set_args(None, true, rate(1000, 60_000))).ok(),
        Some(v1::SetRateLimitRequest {
            scope: Some(Scope::Global(true)),
            limit: Some(wire(1000, 60_000)),
            clear: false,
        })
    );
}

#[test]
fn clear_requests_carry_no_limit() {
    assert_eq!(
        prepare_clear(&clear_args(Some("noop"), false)).ok(),
        Some(v1::SetRateLimitRequest {
            scope: Some(Scope::TaskType("noop".into())),
            limit: None,
            clear: true,
        })
    );
    assert_eq!(
        prepare_clear(&clear_args(None, true)).ok(),
        Some(v1::SetRateLimitRequest {
            scope: Some(Scope::Global(true)),
            limit: None,
            clear: true,
        })
    );
}

#[test]
fn a_scope_is_one_of_a_type_or_global() {
    assert!(matches!(
        prepare_set(&set_args(None, false, rate(1, 1))),
        Err(Error::Usage(m)) if m == "ratelimit set: give a task type or --global"
    ));
    assert!(matches!(
        prepare_set(&set_args(Some("noop"), true, rate(1, 1))),
        Err(Error::Usage(m)) if m.ends_with("not both")
    ));
    assert!(matches!(
        prepare_clear(&clear_args(None, false)),
        Err(Error::Usage(m)) if m == "ratelimit clear: give a task type or --global"
    ));
    assert!(matches!(
        prepare_clear(&clear_args(Some("noop"), true)),
        Err(Error::Usage(_))
    ));
}

fn changed(
    request: &v1::SetRateLimitRequest,
    limit: Option<v1::RateLimit>,
    previous: Option<v1::RateLimit>,
) -> Result<Changed, WireError> {
    Changed::from_reply(
        request,
        &v1::SetRateLimitResponse {
            limit,
            previous,
            warnings: Vec::new(),
        },
    )
}

#[test]
fn set_and_clear_say_what_changed() {
    let set_type = prepare_set(&set_args(Some("email.send"), false, rate(50, 1_000)));
    let set_type = set_type.unwrap_or_else(|e| panic!("{e}"));
    let set_global = prepare_set(&set_args(None, true, rate(1000, 60_000)));
    let set_global = set_global.unwrap_or_else(|e| panic!("{e}"));
    let clear_type = prepare_clear(&clear_args(Some("email.send"), false));
    let clear_type = clear_type.unwrap_or_else(|e| panic!("{e}"));
    let clear_global = prepare_clear(&clear_args(None, true));
    let clear_global = clear_global.unwrap_or_else(|e| panic!("{e}"));
    let text = |c: Result<Changed, WireError>| c.map(|c| line(&c));
    assert_eq!(
        text(changed(&set_type, Some(wire(50, 1_000)), None)).as_deref(),
        Ok("rate limit of type email.send: 50/1s (was none)")
    );
    assert_eq!(
        text(changed(
            &set_global,
            Some(wire(1000, 60_000)),
            Some(wire(500, 60_000))
        ))
        .as_deref(),
        Ok("global rate limit: 1000/1m (was 500/1m)")
    );
    assert_eq!(
        text(changed(
            &set_global,
            Some(wire(1000, 60_000)),
            Some(wire(1000, 60_000))
        ))
        .as_deref(),
        Ok("global rate limit: 1000/1m (unchanged)")
    );
    assert_eq!(
        text(changed(&clear_type, None, Some(wire(50, 1_000)))).as_deref(),
        Ok("rate limit of type email.send cleared (was 50/1s)")
    );
    assert_eq!(
        text(changed(&clear_global, None, Some(wire(1000, 60_000)))).as_deref(),
        Ok("global rate limit cleared (was 1000/1m)")
    );
    assert_eq!(
        text(changed(&clear_type, None, None)).as_deref(),
        Ok("type email.send had no rate limit (nothing changed)")
    );
    assert_eq!(
        text(changed(&clear_global, None, None)).as_deref(),
        Ok("there was no global rate limit (nothing changed)")
    );
}

#[test]
fn set_and_clear_json_name_the_scope_and_both_limits() {
    let set_type = prepare_set(&set_args(Some("email.send"), false, rate(50, 1_000)));
    let set_type = set_type.unwrap_or_else(|e| panic!("{e}"));
    let c = changed(&set_type, Some(wire(50, 1_000)), None);
    assert_eq!(
        c.ok().and_then(|c| serde_json::to_value(c).ok()),
        Some(serde_json::json!({
            "scope": "type",
            "task_type": "email.send",
            "limit": {"starts": 50, "period_ms": 1000, "text": "50/1s"},
            "previous": null
        }))
    );
    let clear_global = prepare_clear(&clear_args(None, true));
    let clear_global = clear_global.unwrap_or_else(|e| panic!("{e}"));
    let c = changed(&clear_global, None, Some(wire(1000, 60_000)));
    assert_eq!(
        c.ok()
            .and_then(|c| serde_json::to_string(&c).ok())
            .as_deref(),
        Some(
            r#"{"scope":"global","task_type":null,"limit":null,"previous":{"starts":1000,"period_ms":60000,"text":"1000/1m"}}"#
        )
    );
}

#[test]
fn a_reply_that_contradicts_its_request_is_refused() {
    let set = prepare_set(&set_args(Some("noop"), false, rate(5, 1_000)));
    let set = set.unwrap_or_else(|e| panic!("{e}"));
    let clear = prepare_clear(&clear_args(Some("noop"), false));
    let clear = clear.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        changed(&set, None, None),
        Err(WireError::MissingField("limit"))
    );
    assert!(matches!(
        changed(&clear, Some(wire(5, 1_000)), None),
        Err(WireError::Broken(m)) if m.contains("5/1s still in force")
    ));
    assert!(matches!(
        changed(&set, Some(wire(0, 1_000)), None),
        Err(WireError::OutOfRange {
            field: "starts",
            ..
        })
    ));
    assert!(matches!(
        changed(&set, Some(wire(5, 1_000)), Some(wire(5, 0))),
        Err(WireError::OutOfRange {
            field: "period_ms",
            ..
        })
    ));
}

fn fill(starts: u32, period_ms: u64, used: u64) -> Option<v1::RateFill> {
    Some(v1::RateFill {
        limit: Some(wire(starts, period_ms)),
        used,
    })
}

fn overview(types: Vec<v1::TypeSummary>, global_rate: Option<v1::RateFill>) -> TypeList {
    TypeList::from_wire(&v1::GetOverviewResponse {
        types,
        global_rate,
        now_ms: 1_764_588_000_000,
        ..Default::default()
    })
    .unwrap_or_else(|e| panic!("{e}"))
}

fn typed(name: &str, rate: Option<v1::RateFill>) -> v1::TypeSummary {
    v1::TypeSummary {
        task_type: name.into(),
        rate,
        ..Default::default()
    }
}

#[test]
fn ls_lists_the_global_limit_then_each_type_with_one() {
    let list = overview(
        vec![
            typed("email.send", fill(50, 1_000, 12)),
            typed("noop", None),
            typed("report.build", fill(5, 3_600_000, 5)),
        ],
        fill(1000, 60_000, 812),
    );
    let rows = rows(&list);
    assert_eq!(
        ls_table(&rows),
        [
            "SCOPE   TYPE          LIMIT    USED",
            "global  -             1000/1m  812/1000",
            "type    email.send    50/1s    12/50",
            "type    report.build  5/1h     5/5",
        ]
    );
    assert_eq!(
        serde_json::to_value(&rows).ok(),
        Some(serde_json::json!([
            {"scope": "global", "task_type": null,
             "limit": {"starts": 1000, "period_ms": 60000, "text": "1000/1m"},
             "used": 812, "full": false},
            {"scope": "type", "task_type": "email.send",
             "limit": {"starts": 50, "period_ms": 1000, "text": "50/1s"},
             "used": 12, "full": false},
            {"scope": "type", "task_type": "report.build",
             "limit": {"starts": 5, "period_ms": 3600000, "text": "5/1h"},
             "used": 5, "full": true},
        ]))
    );
}

#[test]
fn ls_without_rate_limits_says_so() {
    let list = overview(vec![typed("noop", None)], None);
    let rows = rows(&list);
    assert_eq!(ls_table(&rows), ["no rate limits"]);
    assert_eq!(serde_json::to_string(&rows).ok().as_deref(), Some("[]"));
    assert_eq!(cut_note(&list), None);
    let mut cut = list;
    cut.truncated = true;
    assert_eq!(
        cut_note(&cut).as_deref(),
        Some("only the first 1 type by name were read; later ones may have rate limits too")
    );
}

#[test]
fn ls_fits_80_columns_and_never_cuts_a_limit_or_a_fill() {
    let long = format!("{}\u{1b}[2J", "t".repeat(70));
    let list = overview(
        vec![typed(&long, fill(1_000_000, 86_400_000, 123_456_789))],
        None,
    );
    let lines = ls_table(&rows(&list));
    for line in &lines {
        assert!(crate::output::text::width(line) <= WIDTH, "{line}");
        assert!(!line.contains('\u{1b}'), "{line}");
    }
    assert!(
        lines[1].ends_with("1000000/1d  123456789/1000000"),
        "{}",
        lines[1]
    );
    assert!(lines[1].contains('…'), "{}", lines[1]);
}
