use std::time::Duration;

use super::*;

const NOW_MS: i64 = 1_764_588_000_000;

fn set_args(task_type: &str, failures: u32, within: u64, cooldown: u64) -> BreakerSetArgs {
    BreakerSetArgs {
        task_type: task_type.to_owned(),
        failures,
        within: Duration::from_millis(within),
        cooldown: Duration::from_millis(cooldown),
    }
}

fn clear_args(task_type: &str) -> TypeArgs {
    TypeArgs {
        task_type: task_type.to_owned(),
    }
}

fn wire(failures: u32, within_ms: u64, cooldown_ms: u64) -> v1::Breaker {
    v1::Breaker {
        failures,
        within_ms,
        cooldown_ms,
    }
}

fn changed(
    request: &v1::SetBreakerRequest,
    breaker: Option<v1::Breaker>,
    previous: Option<v1::Breaker>,
) -> Result<Changed, WireError> {
    Changed::from_reply(
        request,
        &v1::SetBreakerResponse {
            breaker,
            previous,
            warnings: Vec::new(),
        },
    )
}

#[test]
fn set_requests_carry_the_breaker_in_milliseconds_clear_requests_none() {
    assert_eq!(
        prepare_set(&set_args("payment.charge", 5, 60_000, 30_000)),
        v1::SetBreakerRequest {
            task_type: "payment.charge".into(),
            failures: 5,
            within_ms: 60_000,
            cooldown_ms: 30_000,
            clear: false,
        }
    );
    assert_eq!(
        prepare_clear(&clear_args("payment.charge")),
        v1::SetBreakerRequest {
            task_type: "payment.charge".into(),
            failures: 0,
            within_ms: 0,
            cooldown_ms: 0,
            clear: true,
        }
    );
}

#[test]
fn set_and_clear_say_what_changed() {
    let set = prepare_set(&set_args("payment.charge", 5, 60_000, 30_000));
    let clear = prepare_clear(&clear_args("payment.charge"));
    let text = |c: Result<Changed, WireError>| c.map(|c| line(&c));
    assert_eq!(
        text(changed(&set, Some(wire(5, 60_000, 30_000)), None)).as_deref(),
        Ok("type payment.charge circuit breaker: 5 failures within 1m, cooldown 30s (was none)")
    );
    assert_eq!(
        text(changed(
            &set,
            Some(wire(5, 60_000, 30_000)),
            Some(wire(3, 10_000, 250))
        ))
        .as_deref(),
        Ok(
            "type payment.charge circuit breaker: 5 failures within 1m, cooldown 30s \
            (was 3 failures within 10s, cooldown 250ms)"
        )
    );
    assert_eq!(
        text(changed(
            &set,
            Some(wire(5, 60_000, 30_000)),
            Some(wire(5, 60_000, 30_000))
        ))
        .as_deref(),
        Ok("type payment.charge circuit breaker: 5 failures within 1m, cooldown 30s (unchanged)")
    );
    assert_eq!(
        text(changed(&clear, None, Some(wire(5, 60_000, 30_000)))).as_deref(),
        Ok("type payment.charge circuit breaker cleared (was 5 failures within 1m, cooldown 30s)")
    );
    assert_eq!(
        text(changed(&clear, None, None)).as_deref(),
        Ok("type payment.charge had no circuit breaker (nothing changed)")
    );
}

#[test]
fn set_and_clear_json_give_both_breakers() {
    let set = prepare_set(&set_args("payment.charge", 5, 60_000, 30_000));
    let c = changed(&set, Some(wire(5, 60_000, 30_000)), None);
    assert_eq!(
        c.ok().and_then(|c| serde_json::to_value(c).ok()),
        Some(serde_json::json!({
            "task_type": "payment.charge",
            "breaker": {
                "failures": 5, "within_ms": 60000, "cooldown_ms": 30000,
                "text": "5 failures within 1m, cooldown 30s"
            },
            "previous": null
        }))
    );
    let clear = prepare_clear(&clear_args("payment.charge"));
    let c = changed(&clear, None, Some(wire(5, 60_000, 30_000)));
    let v = c.ok().and_then(|c| serde_json::to_value(c).ok());
    assert_eq!(
        v.as_ref()
            .map(|v| (&v["breaker"], &v["previous"]["failures"])),
        Some((&serde_json::Value::Null, &serde_json::json!(5)))
    );
}

#[test]
fn a_reply_that_contradicts_its_request_or_the_bounds_is_refused() {
    let set = prepare_set(&set_args("noop", 5, 60_000, 30_000));
    let clear = prepare_clear(&clear_args("noop"));
    assert_eq!(
        changed(&set, None, None),
        Err(WireError::MissingField("breaker"))
    );
    assert!(matches!(
        changed(&clear, Some(wire(5, 60_000, 30_000)), None),
        Err(WireError::Broken(m))
            if m == "a circuit breaker (5 failures within 1m, cooldown 30s) still in force \
                     after clearing it"
    ));
    assert!(matches!(
        changed(&set, Some(wire(0, 60_000, 30_000)), None),
        Err(WireError::OutOfRange {
            field: "failures",
            ..
        })
    ));
    assert!(matches!(
        changed(
            &set,
            Some(wire(5, 60_000, 30_000)),
            Some(wire(5, 86_400_001, 1))
        ),
        Err(WireError::OutOfRange {
            field: "within_ms",
            ..
        })
    ));
}

#[test]
fn untrusted_type_names_are_shown_inert() {
    let mut set = prepare_set(&set_args("noop", 5, 60_000, 30_000));
    set.task_type = "x\u{1b}[2J".into();
    let c = changed(&set, Some(wire(5, 60_000, 30_000)), None).unwrap_or_else(|e| panic!("{e}"));
    assert!(!line(&c).contains('\u{1b}'), "{}", line(&c));
}

fn list(breakers: Vec<(&str, Option<v1::BreakerSummary>)>) -> TypeList {
    let reply = v1::GetOverviewResponse {
        types: breakers
            .into_iter()
            .map(|(name, breaker)| v1::TypeSummary {
                task_type: name.into(),
                breaker,
                ..Default::default()
            })
            .collect(),
        now_ms: NOW_MS,
        ..Default::default()
    };
    TypeList::from_wire(&reply).unwrap_or_else(|e| panic!("{e}"))
}

fn summary(state: &str, failures: u32, until_ms: i64) -> v1::BreakerSummary {
    v1::BreakerSummary {
        failures,
        within_ms: 60_000,
        cooldown_ms: 30_000,
        state: state.into(),
        since_ms: NOW_MS - 18_000,
        until_ms,
    }
}

#[test]
fn ls_lists_each_breaker_with_its_state_and_when_it_half_opens() {
    let l = list(vec![
        ("email.send", Some(summary("closed", 3, 0))),
        ("noop", None),
        ("payment.charge", Some(summary("open", 5, NOW_MS + 12_000))),
        ("report.build", Some(summary("half_open", 1, 0))),
        ("sms.send", Some(summary("open", 2, NOW_MS - 500))),
    ]);
    let rows = rows(&l);
    assert_eq!(rows.len(), 4);
    assert_eq!(
        ls_table(&rows, l.now),
        [
            "TYPE            FAILURES  WITHIN  COOLDOWN  STATE      UNTIL",
            "email.send             3      1m       30s  closed     -",
            "payment.charge         5      1m       30s  open       11:20:12 (in 12s)",
            "report.build           1      1m       30s  half-open  -",
            "sms.send               2      1m       30s  open       11:19:59 (due)",
        ]
    );
    assert_eq!(ls_table(&[], l.now), ["no circuit breakers"]);
    assert_eq!(
        serde_json::to_value(&rows[1]).ok(),
        Some(serde_json::json!({
            "task_type": "payment.charge", "state": "open", "failures": 5, "within_ms": 60000,
            "cooldown_ms": 30000, "since": "2025-12-01T11:19:42.000Z",
            "until": "2025-12-01T11:20:12.000Z"
        }))
    );
    assert_eq!(rows[2].breaker.state.as_str(), "half_open");
}

#[test]
fn ls_says_when_the_overview_was_cut() {
    let mut l = list(vec![("a", Some(summary("closed", 3, 0)))]);
    assert_eq!(cut_note(&l), None);
    l.truncated = true;
    assert_eq!(
        cut_note(&l).as_deref(),
        Some("only the first 1 type by name were read; later ones may have circuit breakers too")
    );
}
