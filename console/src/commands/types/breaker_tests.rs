//! The BREAKER column of `leasehold types` and the `breaker` object of its JSON.

use leasehold_proto::v1;

use super::*;
use crate::output::text::width;

const NOW_MS: i64 = 1_764_588_000_000;

fn list(types: Vec<v1::TypeSummary>) -> TypeList {
    TypeList::from_wire(&v1::GetOverviewResponse {
        types,
        now_ms: NOW_MS,
        ..Default::default()
    })
    .unwrap_or_else(|e| panic!("{e}"))
}

fn typed(name: &str, breaker: Option<(&str, i64)>) -> v1::TypeSummary {
    v1::TypeSummary {
        task_type: name.into(),
        queued: 12,
        running: 2,
        limit: Some(5),
        finished_last_minute: 40,
        breaker: breaker.map(|(state, until_ms)| v1::BreakerSummary {
            failures: 3,
            within_ms: 60_000,
            cooldown_ms: 2_000,
            state: state.into(),
            since_ms: NOW_MS - 1_000,
            until_ms,
        }),
        ..Default::default()
    }
}

/// Each breaker state in the column: the time left of an open one, `-` for a type without
/// one; no column when no type has a breaker.
#[test]
fn the_breaker_column_says_each_state_and_the_time_left_of_an_open_one() {
    let lines = table(&list(vec![
        typed("email.send", Some(("closed", 0))),
        typed("noop", None),
        typed("payment.charge", Some(("open", NOW_MS + 12_000))),
        typed("sms.send", Some(("half_open", 0))),
        typed("stale", Some(("open", NOW_MS - 1))),
    ]));
    assert_eq!(
        lines,
        [
            "TYPE            QUEUED  LATER  RETRY  RUNNING  DEAD  DONE/M  BREAKER    STATE",
            "email.send          12      0      0      2/5     0      40  closed     active",
            "noop                12      0      0      2/5     0      40  -          active",
            "payment.charge      12      0      0      2/5     0      40  open 12s   active",
            "sms.send            12      0      0      2/5     0      40  half-open  active",
            "stale               12      0      0      2/5     0      40  open       active",
            "global: unlimited",
        ]
    );
    let lines = table(&list(vec![typed("noop", None)]));
    assert!(!lines[0].contains("BREAKER"), "{lines:?}");
}

/// Counts so wide that not every optional column fits whole: PER-KEY, RATE and SHED/M give
/// way before BREAKER, each said; the counts stay whole.
#[test]
fn the_breaker_column_gives_way_last() {
    let mut t = typed("report.build", Some(("open", NOW_MS + 3_723_000)));
    t.queued = 1_234_567;
    t.dead = 123_456;
    t.rate = Some(v1::RateFill {
        limit: Some(v1::RateLimit {
            starts: 50,
            period_ms: 1_000,
        }),
        used: 12,
    });
    t.shed_after_ms = Some(90_000);
    t.shed_last_minute = 1_234;
    t.per_key_limit = Some(2);
    let lines = table(&list(vec![t]));
    assert!(lines[0].contains("BREAKER"), "{lines:#?}");
    assert!(lines[1].contains("open 1h02m"), "{lines:#?}");
    assert!(
        lines.contains(
            &"PER-KEY left out to fit 80 columns; `leasehold types --output json` has it"
                .to_owned()
        ),
        "{lines:#?}"
    );
    for line in &lines {
        assert!(width(line) <= WIDTH, "{line}");
    }
    assert!(
        !lines.iter().any(|l| l.starts_with("BREAKER left out")),
        "{lines:#?}"
    );
}

/// The JSON carries the breaker of each type (null when none): its state, the setting
/// (`failures` is how many open it), when it last moved and when an open one half-opens.
#[test]
fn json_gives_each_types_breaker_with_null_for_none() {
    let l = list(vec![
        typed("noop", None),
        typed("payment.charge", Some(("open", NOW_MS + 2_000))),
        typed("sms.send", Some(("half_open", 0))),
    ]);
    let json = serde_json::to_value(&l).unwrap_or_default();
    assert_eq!(json["types"][0]["breaker"], serde_json::Value::Null);
    assert_eq!(
        json["types"][1]["breaker"],
        serde_json::json!({
            "state": "open", "failures": 3, "within_ms": 60000, "cooldown_ms": 2000,
            "since": "2025-12-01T11:19:59.000Z", "until": "2025-12-01T11:20:02.000Z"
        })
    );
    assert_eq!(json["types"][2]["breaker"]["state"], "half_open");
    assert_eq!(
        json["types"][2]["breaker"]["until"],
        serde_json::Value::Null
    );
}
