use leasehold_proto::v1;

use super::*;
use crate::output::text::width;

fn list(types: Vec<v1::TypeSummary>, global_limit: Option<u32>, paused: bool) -> TypeList {
    rated(types, global_limit, paused, None)
}

fn rated(
    types: Vec<v1::TypeSummary>,
    global_limit: Option<u32>,
    paused: bool,
    global_rate: Option<v1::RateFill>,
) -> TypeList {
    TypeList::from_wire(&v1::GetOverviewResponse {
        types,
        global_limit,
        global_paused: paused,
        truncated: false,
        now_ms: 1_764_588_000_000,
        global_rate,
    })
    .unwrap_or_else(|e| panic!("{e}"))
}

fn fill(starts: u32, period_ms: u64, used: u64) -> Option<v1::RateFill> {
    Some(v1::RateFill {
        limit: Some(v1::RateLimit { starts, period_ms }),
        used,
    })
}

#[test]
fn the_table_fits_80_columns_and_never_cuts_a_count() {
    let busy = v1::TypeSummary {
        task_type: "email.send".into(),
        queued: 12,
        scheduled: 0,
        retrying: 3,
        running: 5,
        dead: 1,
        finished_last_minute: 40,
        dead_last_minute: 0,
        limit: Some(5),
        paused: false,
        rate: None,
        shed_after_ms: None,
        shed_last_minute: 0,
        per_key_limit: None,
        breaker: None,
        settings: Vec::new(),
        oldest_waiting_ms: Some(192_000),
    };
    let huge = v1::TypeSummary {
        task_type: format!("{}\u{1b}[2J", "x".repeat(70)),
        queued: 123_456_789,
        scheduled: 9_876_543,
        retrying: 1_000_000,
        running: 100_000,
        dead: 99_999_999,
        finished_last_minute: 1_234_567,
        paused: true,
        ..Default::default()
    };
    let lines = table(&list(vec![busy, huge], Some(10), true));
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        [
            "TYPE", "QUEUED", "LATER", "RETRY", "OLDEST", "RUNNING", "DEAD", "DONE/M", "STATE"
        ]
    );
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        // The age column costs 8 columns: by the table's rules the name gives way first,
        // then the state; no count is cut.
        [
            "email…", "12", "0", "3", "3m12s", "5/5", "1", "40", "at", "li…"
        ],
        "{}",
        lines[1]
    );
    for count in [
        "123456789",
        "9876543",
        "1000000",
        "100000/-",
        "99999999",
        "1234567",
    ] {
        assert!(lines[2].contains(count), "{count} cut: {}", lines[2]);
    }
    assert!(lines[2].ends_with("paused"), "{}", lines[2]);
    assert!(lines[2].starts_with("xxx"), "{}", lines[2]);
    assert_eq!(lines[3], "global: limit 10 · every claim paused");
    assert_eq!(lines.len(), 4);
    for line in &lines {
        assert!(width(line) <= WIDTH, "{line}");
        assert!(!line.contains('\u{1b}'), "{line}");
    }
}

#[test]
fn with_wider_counts_the_name_and_the_state_give_way_first() {
    let t = v1::TypeSummary {
        task_type: "report.build".into(),
        queued: 1_234_567_890,
        scheduled: 123_456_789,
        retrying: 12_345_678,
        running: 10_000,
        dead: 123_456_789,
        finished_last_minute: 12_345_678,
        limit: Some(10_000),
        ..Default::default()
    };
    let lines = table(&list(vec![t], None, false));
    let cells: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        cells[1..6],
        [
            "1234567890",
            "123456789",
            "12345678",
            "10000/10000",
            "123456789"
        ],
        "{}",
        lines[1]
    );
    assert!(
        cells[0].starts_with("rep") && cells[0].ends_with('…'),
        "{}",
        lines[1]
    );
    assert!(cells.len() >= 7 && cells[6] == "12345678", "{}", lines[1]);
    for line in &lines {
        assert!(width(line) <= WIDTH, "{line}");
    }
}

fn typed(
    name: &str,
    queued: u64,
    running: u64,
    limit: Option<u32>,
    rate: Option<v1::RateFill>,
) -> v1::TypeSummary {
    v1::TypeSummary {
        task_type: name.into(),
        queued,
        running,
        limit,
        rate,
        finished_last_minute: 40,
        ..Default::default()
    }
}

/// Ordinary counts and rates on 80 columns: every column whole.
#[test]
fn the_rate_column_fits_80_columns_beside_ordinary_counts() {
    let lines = table(&rated(
        vec![
            typed("email.send", 12, 5, Some(5), fill(50, 1_000, 12)),
            typed("noop", 0, 0, None, None),
            typed("sms", 3, 1, None, fill(5, 3_600_000, 5)),
        ],
        None,
        false,
        fill(10_000, 60_000, 1_017),
    ));
    assert_eq!(
        lines,
        [
            "TYPE        QUEUED  LATER  RETRY  RUNNING      RATE  DEAD  DONE/M  STATE",
            "email.send      12      0      0      5/5  12/50/1s     0      40  at limit",
            "noop             0      0      0      0/-         -     0      40  active",
            "sms              3      0      0      1/-    5/5/1h     0      40  rate limited",
            "global: unlimited",
            "global rate limit: 10000/1m, 1017 used",
        ]
    );
    for line in &lines {
        assert!(width(line) <= WIDTH, "{} columns: {line}", width(line));
    }
}

/// Busier types on 80 columns: the name gives way first, then the state word; the rates
/// and the counts stay whole.
#[test]
fn the_name_and_the_state_give_way_before_a_rate() {
    let lines = table(&rated(
        vec![
            typed("email.send", 1_200, 5, Some(20), fill(50, 1_000, 12)),
            typed("report.nightly", 30, 2, None, fill(5, 3_600_000, 5)),
            typed(
                "webhook.deliver",
                88_000,
                100,
                Some(100),
                fill(1000, 60_000, 1000),
            ),
        ],
        Some(500),
        false,
        None,
    ));
    assert_eq!(
        lines,
        [
            "TYPE       QUEUED  LATER  RETRY  RUNNING          RATE  DEAD  DONE/M  STATE",
            "email.se…    1200      0      0     5/20      12/50/1s     0      40  active",
            "report.n…      30      0      0      2/-        5/5/1h     0      40  rate limi…",
            "webhook.…   88000      0      0  100/100  1000/1000/1m     0      40  at limit",
            "global: limit 500",
        ]
    );
    for line in &lines {
        assert!(width(line) <= WIDTH, "{} columns: {line}", width(line));
    }
}

/// Counts so wide that the rates no longer fit whole: the RATE column goes (and a line
/// says where the rates are); the counts stay whole.
#[test]
fn rates_too_wide_beside_huge_counts_leave_the_column_out() {
    let t = v1::TypeSummary {
        task_type: "report.build".into(),
        queued: 1_234_567_890,
        scheduled: 123_456_789,
        retrying: 12_345_678,
        running: 10_000,
        dead: 123_456_789,
        finished_last_minute: 12_345_678,
        limit: Some(10_000),
        rate: fill(1_000_000, 86_400_000, 999_999),
        ..Default::default()
    };
    let lines = table(&rated(vec![t], None, false, fill(7, 90_000, 7)));
    assert!(!lines[0].contains("RATE"), "{}", lines[0]);
    for count in ["1234567890", "123456789", "12345678", "10000/10000"] {
        assert!(lines[1].contains(count), "{count} cut: {}", lines[1]);
    }
    assert_eq!(
        lines[2..],
        [
            "RATE left out to fit 80 columns; `leasehold ratelimit ls` lists the rates",
            "global: unlimited",
            "global rate limit: 7/90s, 7 used · rate limited",
        ]
    );
    for line in &lines {
        assert!(width(line) <= WIDTH, "{line}");
    }
}

fn shedding(mut t: v1::TypeSummary, after_ms: Option<u64>, shed: u64) -> v1::TypeSummary {
    t.shed_after_ms = after_ms;
    t.shed_last_minute = shed;
    t
}

/// Ordinary counts, rates and shedding on 80 columns: the name gives way, every other
/// column stays whole.
#[test]
fn the_shed_column_fits_80_columns_beside_the_rates() {
    let lines = table(&rated(
        vec![
            shedding(
                typed("email.send", 12, 5, Some(5), fill(50, 1_000, 12)),
                Some(30_000),
                4,
            ),
            typed("noop", 0, 0, None, None),
            shedding(typed("sms", 3, 1, None, None), None, 2),
        ],
        None,
        false,
        None,
    ));
    assert_eq!(
        lines,
        [
            "TYPE     QUEUED  LATER  RETRY  RUNNING      RATE  DEAD  DONE/M  SHED/M  STATE",
            "email.…      12      0      0      5/5  12/50/1s     0      40  4 >30s  at limit",
            "noop          0      0      0      0/-         -     0      40       -  active",
            "sms           3      0      0      1/-         -     0      40       2  active",
            "global: unlimited",
        ]
    );
    for line in &lines {
        assert!(width(line) <= WIDTH, "{} columns: {line}", width(line));
    }
}

/// Without a rate limit or shedding the optional columns are not there at all.
#[test]
fn no_shedding_no_shed_column() {
    let lines = table(&list(vec![typed("noop", 1, 0, None, None)], None, false));
    assert!(!lines[0].contains("SHED"), "{}", lines[0]);
    assert!(!lines[0].contains("RATE"), "{}", lines[0]);
}

/// Counts so wide that the optional columns no longer fit whole: RATE goes first, then
/// SHED/M, each said; the counts stay whole.
#[test]
fn rate_gives_way_before_shedding_and_both_before_a_count() {
    let wide = |rate| v1::TypeSummary {
        task_type: "report.build".into(),
        queued: 1_234_567,
        scheduled: 12_345,
        retrying: 1_234,
        running: 100,
        dead: 12_345,
        finished_last_minute: 1_234,
        limit: Some(100),
        rate,
        shed_after_ms: Some(90_000),
        shed_last_minute: 1_234,
        ..Default::default()
    };
    let lines = table(&rated(
        vec![wide(fill(1_000_000, 86_400_000, 999_999))],
        None,
        false,
        None,
    ));
    assert_eq!(
        lines,
        [
            "TYPE           QUEUED  LATER  RETRY  RUNNING   DEAD  DONE/M     SHED/M  STATE",
            "report.build  1234567  12345   1234  100/100  12345    1234  1234 >90s  at limit",
            "RATE left out to fit 80 columns; `leasehold ratelimit ls` lists the rates",
            "global: unlimited",
        ]
    );
    let mut huge = wide(fill(1_000_000, 86_400_000, 999_999));
    huge.queued = 1_234_567_890;
    huge.scheduled = 123_456_789;
    huge.retrying = 12_345_678;
    huge.dead = 123_456_789;
    huge.finished_last_minute = 12_345_678;
    let lines = table(&rated(vec![huge], None, false, None));
    assert_eq!(
        lines,
        [
            "TYPE         QUEUED      LATER     RETRY  RUNNING       DEAD    DONE/M  STATE",
            "report…  1234567890  123456789  12345678  100/100  123456789  12345678  at limit",
            "RATE left out to fit 80 columns; `leasehold ratelimit ls` lists the rates",
            "SHED/M left out to fit 80 columns; `leasehold types --output json` has it",
            "global: unlimited",
        ]
    );
    for line in &lines {
        assert!(width(line) <= WIDTH, "{line}");
    }
}

#[test]
fn json_gives_each_types_shedding_with_null_for_none() {
    let l = list(
        vec![
            shedding(typed("email.send", 0, 0, None, None), Some(30_000), 4),
            typed("noop", 0, 0, None, None),
        ],
        None,
        false,
    );
    let json = serde_json::to_value(&l).unwrap_or_default();
    assert_eq!(json["types"][0]["shed_after_ms"], 30_000);
    assert_eq!(json["types"][0]["shed_last_minute"], 4);
    assert_eq!(json["types"][1]["shed_after_ms"], serde_json::Value::Null);
    assert_eq!(json["types"][1]["shed_last_minute"], 0);
}

#[test]
fn no_types_and_a_cut_list_say_so() {
    assert_eq!(
        table(&list(vec![], None, false)),
        ["no task types", "global: unlimited"]
    );
    let mut cut = list(
        vec![v1::TypeSummary {
            task_type: "a".into(),
            ..Default::default()
        }],
        None,
        false,
    );
    cut.truncated = true;
    assert_eq!(
        table(&cut).last().map(String::as_str),
        Some("only the first 1 type by name are listed")
    );
}

#[test]
fn json_gives_each_rate_and_the_global_one_with_its_fill() {
    let l = rated(
        vec![v1::TypeSummary {
            task_type: "email.send".into(),
            running: 1,
            rate: fill(50, 1_000, 50),
            ..Default::default()
        }],
        None,
        false,
        fill(1000, 60_000, 812),
    );
    let json = serde_json::to_value(&l).unwrap_or_default();
    assert_eq!(
        json["types"][0]["rate"],
        serde_json::json!({"starts": 50, "period_ms": 1000, "used": 50})
    );
    assert_eq!(json["types"][0]["state"], "rate_limited");
    assert_eq!(
        json["global_rate"],
        serde_json::json!({"starts": 1000, "period_ms": 60000, "used": 812})
    );
}

#[test]
fn json_names_every_count_and_says_unlimited_with_null() {
    let l = list(
        vec![v1::TypeSummary {
            task_type: "noop".into(),
            queued: 2,
            running: 1,
            ..Default::default()
        }],
        None,
        false,
    );
    let json = serde_json::to_value(&l).unwrap_or_default();
    assert_eq!(
        json,
        serde_json::json!({
            "types": [{
                "task_type": "noop", "queued": 2, "scheduled": 0, "retrying": 0,
                "running": 1, "dead": 0, "finished_last_minute": 0, "dead_last_minute": 0,
                "limit": null, "per_key_limit": null, "paused": false, "rate": null, "shed_after_ms": null,
                "shed_last_minute": 0, "state": "active", "breaker": null,
                "oldest_waiting_ms": null
            }],
            "global_limit": null,
            "global_paused": false,
            "global_rate": null,
            "truncated": false,
            "now": "2025-12-01T11:20:00.000Z"
        })
    );
}

fn keyed(mut t: v1::TypeSummary, per_key: u32) -> v1::TypeSummary {
    t.per_key_limit = Some(per_key);
    t
}

/// A per-key limit on 80 columns beside a rate limit: every column whole, the name and the
/// state give way; `-` for a type without one. With shedding too, the PER-KEY column (a setting) gives
/// way first and a line says where it is.
#[test]
fn the_per_key_column_fits_80_columns_beside_the_rates() {
    let lines = table(&rated(
        vec![
            keyed(typed("email.send", 12, 5, Some(5), fill(50, 1_000, 12)), 2),
            typed("noop", 0, 0, None, None),
        ],
        None,
        false,
        None,
    ));
    assert_eq!(
        lines,
        [
            "TYPE     QUEUED  LATER  RETRY  RUNNING  PER-KEY      RATE  DEAD  DONE/M  STATE",
            "email.…      12      0      0      5/5        2  12/50/1s     0      40  at lim…",
            "noop          0      0      0      0/-        -         -     0      40  active",
            "global: unlimited",
        ]
    );
    for line in &lines {
        assert!(width(line) <= WIDTH, "{} columns: {line}", width(line));
    }
    let lines = table(&rated(
        vec![
            keyed(
                shedding(
                    typed("email.send", 12, 5, Some(5), fill(50, 1_000, 12)),
                    Some(30_000),
                    4,
                ),
                2,
            ),
            typed("noop", 0, 0, None, None),
        ],
        None,
        false,
        None,
    ));
    assert_eq!(
        lines,
        [
            "TYPE     QUEUED  LATER  RETRY  RUNNING      RATE  DEAD  DONE/M  SHED/M  STATE",
            "email.…      12      0      0      5/5  12/50/1s     0      40  4 >30s  at limit",
            "noop          0      0      0      0/-         -     0      40       -  active",
            "PER-KEY left out to fit 80 columns; `leasehold types --output json` has it",
            "global: unlimited",
        ]
    );
    for line in &lines {
        assert!(width(line) <= WIDTH, "{} columns: {line}", width(line));
    }
}

/// Without a per-key limit there is no PER-KEY column; with one it shows alone.
#[test]
fn a_per_key_limit_alone_shows_its_column() {
    let lines = table(&list(vec![typed("noop", 1, 0, None, None)], None, false));
    assert!(!lines[0].contains("PER-KEY"), "{}", lines[0]);
    let lines = table(&list(
        vec![
            keyed(typed("email.send", 3, 2, Some(10), None), 1_000_000),
            typed("noop", 1, 0, None, None),
        ],
        None,
        false,
    ));
    assert_eq!(
        lines,
        [
            "TYPE        QUEUED  LATER  RETRY  RUNNING  PER-KEY  DEAD  DONE/M  STATE",
            "email.send       3      0      0     2/10  1000000     0      40  active",
            "noop             1      0      0      0/-        -     0      40  active",
            "global: unlimited",
        ]
    );
}

/// Counts so wide that no optional column fits whole: PER-KEY goes first, then RATE, then
/// SHED/M, each said; the counts stay whole.
#[test]
fn per_key_gives_way_first_and_every_optional_column_before_a_count() {
    let huge = v1::TypeSummary {
        task_type: "report.build".into(),
        queued: 1_234_567_890,
        scheduled: 123_456_789,
        retrying: 12_345_678,
        running: 100,
        dead: 123_456_789,
        finished_last_minute: 12_345_678,
        limit: Some(100),
        rate: fill(1_000_000, 86_400_000, 999_999),
        shed_after_ms: Some(90_000),
        shed_last_minute: 1_234,
        per_key_limit: Some(1_000_000),
        ..Default::default()
    };
    let lines = table(&rated(vec![huge], None, false, None));
    assert_eq!(
        lines,
        [
            "TYPE         QUEUED      LATER     RETRY  RUNNING       DEAD    DONE/M  STATE",
            "report…  1234567890  123456789  12345678  100/100  123456789  12345678  at limit",
            "PER-KEY left out to fit 80 columns; `leasehold types --output json` has it",
            "RATE left out to fit 80 columns; `leasehold ratelimit ls` lists the rates",
            "SHED/M left out to fit 80 columns; `leasehold types --output json` has it",
            "global: unlimited",
        ]
    );
    for line in &lines {
        assert!(width(line) <= WIDTH, "{line}");
    }
}

#[test]
fn json_gives_each_types_per_key_limit_with_null_for_none() {
    let l = list(
        vec![
            keyed(typed("email.send", 0, 0, None, None), 2),
            typed("noop", 0, 0, None, None),
        ],
        None,
        false,
    );
    let json = serde_json::to_value(&l).unwrap_or_default();
    assert_eq!(json["types"][0]["per_key_limit"], 2);
    assert_eq!(json["types"][1]["per_key_limit"], serde_json::Value::Null);
}

#[test]
fn oldest_shows_when_some_type_waits_and_gives_way_last() {
    let waiting = |name: &str, ms| v1::TypeSummary {
        task_type: name.into(),
        queued: 1,
        oldest_waiting_ms: ms,
        ..Default::default()
    };
    // No type waits: no column.
    let none = table(&list(vec![waiting("a", None)], None, false));
    assert!(!none[0].contains("OLDEST"), "{}", none[0]);
    // One waits: the column, `-` for the other, ages in at most two units.
    let lines = table(&list(
        vec![
            waiting("a", Some(850)),
            waiting("b", None),
            waiting("c", Some(7_384_000)),
        ],
        None,
        false,
    ));
    let cell = |row: usize| {
        lines[row]
            .split_whitespace()
            .nth(4)
            .unwrap_or_default()
            .to_owned()
    };
    assert!(lines[0].contains("OLDEST"), "{}", lines[0]);
    assert_eq!([cell(1), cell(2), cell(3)], ["850ms", "-", "2h03m"]);
    // Huge counts beside a breaker and the age: BREAKER goes before OLDEST, OLDEST before a
    // count would be cut; each says where it is.
    let mut huge = waiting("report", Some(90_000_000));
    huge.queued = 123_456_789_012;
    huge.scheduled = 123_456_789_012;
    huge.retrying = 123_456_789;
    huge.dead = 123_456_789_012;
    huge.finished_last_minute = 12_345_678;
    huge.breaker = Some(v1::BreakerSummary {
        failures: 5,
        within_ms: 60_000,
        cooldown_ms: 30_000,
        state: "half_open".into(),
        ..Default::default()
    });
    let lines = table(&list(vec![huge], None, false));
    assert!(
        lines.iter().any(|l| l.starts_with("BREAKER left out")),
        "{lines:#?}"
    );
    let oldest_kept = lines[0].contains("OLDEST");
    let oldest_note = lines.iter().any(|l| l.starts_with("OLDEST left out"));
    assert!(oldest_kept != oldest_note, "{lines:#?}");
    for count in ["123456789012", "123456789", "12345678"] {
        assert!(lines[1].contains(count), "{count} cut: {lines:#?}");
    }
    for line in &lines {
        assert!(width(line) <= WIDTH, "{line}");
    }
}

/// The example of `leasehold types --help` is what the table prints.
#[test]
fn the_help_example_is_what_the_table_prints() {
    let email = v1::TypeSummary {
        task_type: "email.send".into(),
        queued: 12,
        retrying: 3,
        running: 5,
        limit: Some(5),
        dead: 1,
        finished_last_minute: 40,
        per_key_limit: Some(2),
        rate: fill(50, 1_000, 12),
        oldest_waiting_ms: Some(192_000),
        ..Default::default()
    };
    let noop = v1::TypeSummary {
        task_type: "noop".into(),
        ..Default::default()
    };
    let lines = table(&rated(
        vec![email, noop],
        None,
        false,
        fill(1000, 60_000, 812),
    ));
    let help = include_str!("../../cli/mod.rs");
    for line in &lines {
        assert!(
            help.contains(&format!("///   {line}\n")),
            "not in the help of `types`: {line:?}\n{lines:#?}"
        );
    }
}

/// The README's example of the OLDEST column is what the table prints.
#[test]
fn the_readme_example_is_what_the_table_prints() {
    let email = v1::TypeSummary {
        task_type: "email.send".into(),
        queued: 12,
        retrying: 3,
        running: 5,
        limit: Some(5),
        dead: 1,
        finished_last_minute: 40,
        oldest_waiting_ms: Some(192_000),
        ..Default::default()
    };
    let report = v1::TypeSummary {
        task_type: "report.pdf".into(),
        scheduled: 4,
        ..Default::default()
    };
    let lines = table(&list(vec![email, report], None, false));
    let readme = include_str!("../../../../README.md");
    for line in &lines {
        assert!(
            readme.contains(&format!("\n{line}\n")),
            "not in the README: {line:?}\n{lines:#?}"
        );
    }
}
