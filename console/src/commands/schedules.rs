//! `leasehold schedules ls|add|rm|enable|disable|trigger`: the cron schedule RPCs.
//!
//! Checked locally before connecting (exit 2, no call): the name and type alphabets, the
//! payload is JSON, `--missed` is a known policy and `--catch-up-max` goes with `catch_up`.
//! The agent judges the rest — the cron, the zone, the limits — and its INVALID_ARGUMENT
//! message is printed as it is (exit 2). A name taken by another definition is ALREADY_EXISTS
//! (exit 2) with a hint to give `--replace`; an unknown name is NOT_FOUND (exit 2), as an
//! unknown task is.
//!
//! Relative times of `ls` are counted from the reply's database `now`; those of `add` and
//! `enable`, whose replies carry no `now`, from this host's clock.

use chrono::{DateTime, Utc};
use leasehold_proto::v1;
use leasehold_proto::wire::WireEnum;
use leasehold_shared::domain::ScheduleAddOutcome;
use serde::Serialize;

use crate::cli::{Missed, ScheduleAddArgs};
use crate::client::Agent;
use crate::convert::WireError;
use crate::convert::schedule::{ScheduleList, ScheduleView};
use crate::convert::task::TaskView;
use crate::error::{Error, Result};
use crate::exit;
use crate::output::Out;
use crate::output::table::{Column, Table, WIDTH};
use crate::output::text::{age, inert, shown, width};

/// Checks the arguments of `schedules add` and builds the request.
pub fn prepare_add(args: &ScheduleAddArgs) -> Result<v1::AddScheduleRequest> {
    let payload_json = args.payload.clone().unwrap_or_else(|| "{}".to_owned());
    if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(&payload_json) {
        return Err(Error::usage(format!(
            "--payload: the payload is not valid JSON: {e}"
        )));
    }
    let missed = args.missed.unwrap_or_default();
    if args.catch_up_max.is_some() && missed != Missed::CatchUp {
        return Err(Error::usage(
            "--catch-up-max goes with --missed catch_up (skip fires only the latest tick)",
        ));
    }
    Ok(v1::AddScheduleRequest {
        name: args.name.clone(),
        cron: args.cron.trim().to_owned(),
        time_zone: args.time_zone.clone().unwrap_or_default(),
        task_type: args.task_type.clone(),
        payload_json,
        priority: i32::from(args.priority),
        max_attempts: args.max_attempts.unwrap_or(0),
        missed: missed.as_str().to_owned(),
        catch_up_max: args.catch_up_max.unwrap_or(0),
        disabled: args.disabled,
        replace: args.replace,
    })
}

/// Runs `schedules ls`.
pub async fn run_ls(agent: &Agent, out: &mut Out) -> Result<u8> {
    let reply = agent.list_schedules().await?;
    let list = ScheduleList::from_wire(reply).map_err(|e| Error::bad_wire("list schedules", e))?;
    if out.json_mode() {
        out.json(&list.schedules)?;
    } else {
        out.lines(ls_table(&list))?;
    }
    Ok(exit::OK)
}

/// True for a zone that is UTC under another spelling.
fn is_utc(zone: &str) -> bool {
    matches!(
        zone,
        "" | "UTC" | "Etc/UTC" | "Etc/UCT" | "UCT" | "Zulu" | "Etc/Zulu"
    )
}

/// A zone as the table shows it: its last part, the city (`Europe/Berlin` → `Berlin`); the
/// JSON output keeps the full name.
pub fn short_zone(zone: &str) -> &str {
    if is_utc(zone) {
        return "UTC";
    }
    zone.rsplit('/').next().unwrap_or(zone)
}

/// The table of `schedules ls`; the TZ column only when some schedule is not in UTC.
///
/// What gives way first on 80 columns: the outcome, the type and the zone; a name or a cron
/// is cut only past 16 and 13 columns.
pub fn ls_table(list: &ScheduleList) -> Vec<String> {
    if list.schedules.is_empty() {
        return vec!["no schedules".to_owned()];
    }
    let widest = |f: fn(&ScheduleView) -> &str| {
        list.schedules
            .iter()
            .map(|s| width(&inert(f(s))))
            .max()
            .unwrap_or(0)
    };
    let zones = list.schedules.iter().any(|s| !is_utc(&s.time_zone));
    let mut columns = vec![
        Column::new("NAME", widest(|s| &s.name).min(16), 24),
        Column::new("CRON", widest(|s| &s.cron).min(13), 20),
    ];
    if zones {
        columns.push(Column::new("TZ", 3, 16));
    }
    columns.extend([
        Column::new("TYPE", 4, 24),
        Column::new("ON", 3, 3),
        Column::new("NEXT", 4, 11),
        Column::new("LAST", 4, 11),
        Column::new("LAST OUTCOME", 12, 200),
    ]);
    let mut table = Table::new(columns);
    let now = list.now.millis();
    for s in &list.schedules {
        let mut row = vec![s.name.clone(), s.cron.clone()];
        if zones {
            row.push(short_zone(&s.time_zone).to_owned());
        }
        row.extend([
            s.task_type.clone(),
            if s.enabled { "yes" } else { "no" }.to_owned(),
            next_cell(s, now),
            s.last_fired_at
                .map_or_else(|| "-".to_owned(), |t| age(now, t.millis())),
            last_outcome(s),
        ]);
        table.row(row);
    }
    table.render(WIDTH)
}

/// `in 3s`; `-` when disabled or when it never fires again.
pub fn next_cell(s: &ScheduleView, now_ms: i64) -> String {
    match s.next_fire_at {
        Some(t) if s.enabled => age(now_ms, t.millis()),
        _ => "-".to_owned(),
    }
}

/// The last firing: `error: …` when it could not enqueue, else its task's status, else `-`.
pub fn last_outcome(s: &ScheduleView) -> String {
    if let Some(e) = &s.last_error {
        return format!("error: {e}");
    }
    s.last_task_status
        .map_or_else(|| "-".to_owned(), |st| st.as_str().to_owned())
}

/// `2026-12-02T02:00:00.000Z (in 13h59m)`, `none (disabled)`, `none`.
fn next_fire_words(s: &ScheduleView, now: DateTime<Utc>) -> String {
    match s.next_fire_at {
        _ if !s.enabled => "none (disabled)".to_owned(),
        Some(t) => format!("{t} ({})", age(now.timestamp_millis(), t.millis())),
        None => "none".to_owned(),
    }
}

/// The JSON of `schedules add`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Added {
    pub outcome: String,
    pub schedule: ScheduleView,
    pub warnings: Vec<String>,
}

/// Runs `schedules add`; the agent's warnings go to stderr in both output modes.
pub async fn run_add(
    agent: &Agent,
    request: v1::AddScheduleRequest,
    now: DateTime<Utc>,
    out: &mut Out,
) -> Result<u8> {
    let what = format!("add schedule {}", request.name);
    let reply = agent.add_schedule(request).await?;
    let outcome = reply.read_outcome().word().into_owned();
    let added = Added {
        schedule: ScheduleView::required(reply.schedule).map_err(|e| Error::bad_wire(what, e))?,
        outcome,
        warnings: reply.warnings,
    };
    for w in &added.warnings {
        out.note(&format!("warning: {w}"));
    }
    if out.json_mode() {
        out.json(&added)?;
    } else {
        out.line(&add_line(&added, now))?;
    }
    Ok(exit::OK)
}

/// `created schedule nightly: next fire … (in 3s)`, `schedule nightly unchanged (same
/// definition): …`.
pub fn add_line(a: &Added, now: DateTime<Utc>) -> String {
    let name = shown(&a.schedule.name, 64);
    let head = match ScheduleAddOutcome::from_word(&a.outcome) {
        Some(ScheduleAddOutcome::Created) => format!("created schedule {name}"),
        Some(ScheduleAddOutcome::Replaced) => format!("replaced schedule {name}"),
        Some(ScheduleAddOutcome::Unchanged) => {
            format!("schedule {name} unchanged (same definition)")
        }
        None => format!("schedule {name}: {}", shown(&a.outcome, 32)),
    };
    format!("{head}: next fire {}", next_fire_words(&a.schedule, now))
}

/// The JSON of `schedules rm`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Removed {
    pub name: String,
    pub removed: bool,
    /// The schedule as it was; null when the agent could not read its row (it is deleted
    /// all the same).
    pub schedule: Option<ScheduleView>,
}

/// Runs `schedules rm NAME`.
pub async fn run_rm(agent: &Agent, name: String, out: &mut Out) -> Result<u8> {
    let reply = agent.remove_schedule(name.clone()).await?;
    let schedule = reply
        .schedule
        .map(ScheduleView::from_wire)
        .transpose()
        .map_err(|e| Error::bad_wire(format!("remove schedule {name}"), e))?;
    let removed = Removed {
        name,
        removed: true,
        schedule,
    };
    if out.json_mode() {
        out.json(&removed)?;
    } else {
        out.line(&format!("removed schedule {}", shown(&removed.name, 64)))?;
    }
    Ok(exit::OK)
}

/// The JSON of `schedules enable` / `disable`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Enabled {
    pub name: String,
    /// The state asked for.
    pub enabled: bool,
    /// False when it already was.
    pub changed: bool,
    pub schedule: ScheduleView,
}

/// Runs `schedules enable NAME` (`enabled`) or `schedules disable NAME`.
pub async fn run_enable(
    agent: &Agent,
    name: String,
    enabled: bool,
    now: DateTime<Utc>,
    out: &mut Out,
) -> Result<u8> {
    let verb = if enabled { "enable" } else { "disable" };
    let reply = agent.set_schedule_enabled(name.clone(), enabled).await?;
    let schedule = ScheduleView::required(reply.schedule)
        .map_err(|e| Error::bad_wire(format!("{verb} schedule {name}"), e))?;
    let e = Enabled {
        name,
        enabled,
        changed: reply.changed,
        schedule,
    };
    if out.json_mode() {
        out.json(&e)?;
    } else {
        out.line(&enable_line(&e, now))?;
    }
    Ok(exit::OK)
}

/// `enabled schedule nightly: next fire …`, `disabled schedule nightly`, `schedule nightly was
/// already enabled (nothing changed)`.
pub fn enable_line(e: &Enabled, now: DateTime<Utc>) -> String {
    let name = shown(&e.name, 64);
    match (e.enabled, e.changed) {
        (true, true) => format!(
            "enabled schedule {name}: next fire {}",
            next_fire_words(&e.schedule, now)
        ),
        (false, true) => format!("disabled schedule {name}"),
        (true, false) => format!("schedule {name} was already enabled (nothing changed)"),
        (false, false) => format!("schedule {name} was already disabled (nothing changed)"),
    }
}

/// The JSON of `schedules trigger`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Triggered {
    pub name: String,
    pub task_id: i64,
    pub idempotency_key: Option<String>,
    pub task: TaskView,
    pub schedule: ScheduleView,
}

/// Runs `schedules trigger NAME`.
pub async fn run_trigger(agent: &Agent, name: String, out: &mut Out) -> Result<u8> {
    let reply = agent.trigger_schedule(name.clone()).await?;
    let t = triggered(name, reply)?;
    if out.json_mode() {
        out.json(&t)?;
    } else {
        out.line(&trigger_line(&t))?;
    }
    Ok(exit::OK)
}

/// The reply of TriggerSchedule as shown.
pub fn triggered(name: String, reply: v1::TriggerScheduleResponse) -> Result<Triggered> {
    let what = format!("trigger schedule {name}");
    let wire = reply
        .task
        .ok_or(WireError::MissingField("task"))
        .map_err(|e| Error::bad_wire(what.clone(), e))?;
    let task = TaskView::from_wire(wire).map_err(|e| Error::bad_wire(what.clone(), e))?;
    let schedule = ScheduleView::required(reply.schedule).map_err(|e| Error::bad_wire(what, e))?;
    Ok(Triggered {
        name,
        task_id: task.id,
        idempotency_key: task.idempotency_key.clone(),
        task,
        schedule,
    })
}

/// `triggered schedule nightly: task 42 (idempotency key schedule:nightly:manual:…)`.
pub fn trigger_line(t: &Triggered) -> String {
    let key = t
        .idempotency_key
        .as_deref()
        .map_or_else(|| "none".to_owned(), |k| shown(k, 120));
    format!(
        "triggered schedule {}: task {} (idempotency key {key})",
        shown(&t.name, 64),
        t.task_id
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::schedule::tests::{NOW, wire_schedule};
    use crate::convert::task::tests::wire_task;

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp_millis(NOW).unwrap_or_default()
    }

    fn args() -> ScheduleAddArgs {
        ScheduleAddArgs {
            name: "nightly".into(),
            cron: " 0 0 2 * * * ".into(),
            task_type: "report.build".into(),
            payload: None,
            time_zone: None,
            missed: None,
            catch_up_max: None,
            priority: 0,
            max_attempts: None,
            disabled: false,
            replace: false,
        }
    }

    fn view(s: v1::Schedule) -> ScheduleView {
        ScheduleView::from_wire(s).unwrap()
    }

    #[test]
    fn add_defaults_and_every_flag_reach_the_request() {
        assert_eq!(
            prepare_add(&args()).ok(),
            Some(v1::AddScheduleRequest {
                name: "nightly".into(),
                cron: "0 0 2 * * *".into(),
                task_type: "report.build".into(),
                payload_json: "{}".into(),
                missed: "skip".into(),
                ..Default::default()
            })
        );
        let mut a = args();
        a.payload = Some(r#"{"big": 12345678901234567890123}"#.into());
        a.time_zone = Some("Europe/Berlin".into());
        a.missed = Some(Missed::CatchUp);
        a.catch_up_max = Some(5);
        a.priority = -4;
        a.max_attempts = Some(7);
        a.disabled = true;
        a.replace = true;
        assert_eq!(
            prepare_add(&a).ok(),
            Some(v1::AddScheduleRequest {
                name: "nightly".into(),
                cron: "0 0 2 * * *".into(),
                time_zone: "Europe/Berlin".into(),
                task_type: "report.build".into(),
                payload_json: r#"{"big": 12345678901234567890123}"#.into(),
                priority: -4,
                max_attempts: 7,
                missed: "catch_up".into(),
                catch_up_max: 5,
                disabled: true,
                replace: true,
            })
        );
    }

    #[test]
    fn cheap_mistakes_are_refused_before_any_call() {
        let mut a = args();
        a.payload = Some("{\"unterminated\": ".into());
        let err = prepare_add(&a);
        assert!(matches!(&err, Err(Error::Usage(m)) if m.contains("not valid JSON")));
        assert_eq!(err.err().map(|e| exit::exit_code(&e)), Some(exit::USAGE));
        let mut a = args();
        a.catch_up_max = Some(3);
        assert!(matches!(prepare_add(&a), Err(Error::Usage(m)) if m.contains("catch_up")));
        a.missed = Some(Missed::Skip);
        assert!(prepare_add(&a).is_err());
    }

    #[test]
    fn ls_fits_80_columns_and_says_what_happened_last() {
        let mut failing = wire_schedule("mail.digest");
        failing.last_error = "no agent handles type mail.digest \u{1b}[2J".repeat(5);
        failing.last_task_status = 0;
        let mut off = wire_schedule("disabled-one");
        off.enabled = false;
        let mut never = wire_schedule("fresh");
        never.last_fired_at_ms = 0;
        never.last_task_id = 0;
        never.last_task_status = 0;
        let mut dead = wire_schedule(&"w".repeat(64));
        dead.last_task_status = v1::TaskStatus::Dead as i32;
        dead.cron = "0 0 0 1 1 * ".repeat(5);
        dead.task_type = "t".repeat(64);
        let list = ScheduleList::from_wire(v1::ListSchedulesResponse {
            schedules: vec![wire_schedule("nightly"), failing, off, never, dead],
            now_ms: NOW,
        })
        .unwrap();
        let lines = ls_table(&list);
        assert_eq!(lines.len(), 6);
        assert!(
            lines[0].starts_with("NAME") && !lines[0].contains("TZ"),
            "all in UTC: no TZ column: {}",
            lines[0]
        );
        assert!(lines[0].ends_with("LAST OUTCOME"), "{}", lines[0]);
        assert!(
            lines[1].contains("yes  in 3s  4m57s ago  succeeded"),
            "{}",
            lines[1]
        );
        assert!(lines[2].ends_with("error: no a…"), "{}", lines[2]);
        assert!(lines[3].contains(" no   -  "), "{}", lines[3]);
        assert!(lines[4].contains("in 3s  -  "), "{}", lines[4]);
        assert!(lines[4].ends_with(" -"), "{}", lines[4]);
        assert!(lines[5].ends_with("dead"), "{}", lines[5]);
        for line in &lines {
            assert!(width(line) <= WIDTH, "{} columns: {line}", width(line));
            assert!(!line.contains('\u{1b}'), "{line}");
        }
    }

    #[test]
    fn ls_shows_zones_only_when_one_is_not_utc() {
        let mut berlin = wire_schedule("berlin");
        berlin.time_zone = "Europe/Berlin".into();
        let list = ScheduleList::from_wire(v1::ListSchedulesResponse {
            schedules: vec![wire_schedule("nightly"), berlin],
            now_ms: NOW,
        })
        .unwrap();
        let lines = ls_table(&list);
        assert!(lines[0].contains("TZ"), "{}", lines[0]);
        assert!(lines[1].contains("UTC"), "{}", lines[1]);
        assert!(lines[2].contains(" Berlin "), "{}", lines[2]);
        assert!(
            lines[1].contains("0 */5 * * * *"),
            "the cron is not cut: {}",
            lines[1]
        );
        for line in &lines {
            assert!(width(line) <= WIDTH, "{line}");
        }
        assert_eq!(short_zone("America/Indiana/Indianapolis"), "Indianapolis");
        assert_eq!(short_zone("Etc/UTC"), "UTC");
        assert_eq!(short_zone("EST5EDT"), "EST5EDT");
        let empty = ScheduleList {
            schedules: vec![],
            now: list.now,
        };
        assert_eq!(ls_table(&empty), ["no schedules"]);
    }

    #[test]
    fn ls_json_is_one_array_with_every_field() {
        let list = ScheduleList::from_wire(v1::ListSchedulesResponse {
            schedules: vec![wire_schedule("a"), wire_schedule("b")],
            now_ms: NOW,
        })
        .unwrap();
        let text = crate::output::to_json(&list.schedules).unwrap();
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(json.as_array().map(Vec::len), Some(2));
        assert_eq!(json[0]["name"], "a");
        assert_eq!(json[0]["next_fire_at"], "2025-12-01T11:20:03.000Z");
        assert_eq!(json[0]["next_fire_at_ms"], NOW + 3_000);
        assert_eq!(json[1]["last_task_status"], "succeeded");
        assert!(!text.contains('\n'));
    }

    #[test]
    fn add_lines_say_the_outcome_and_the_next_fire() {
        let added = |outcome: &str, s: v1::Schedule| Added {
            outcome: outcome.into(),
            schedule: view(s),
            warnings: vec![],
        };
        assert_eq!(
            add_line(&added("created", wire_schedule("nightly")), now()),
            "created schedule nightly: next fire 2025-12-01T11:20:03.000Z (in 3s)"
        );
        assert_eq!(
            add_line(&added("replaced", wire_schedule("nightly")), now()),
            "replaced schedule nightly: next fire 2025-12-01T11:20:03.000Z (in 3s)"
        );
        let mut off = wire_schedule("nightly");
        off.enabled = false;
        assert_eq!(
            add_line(&added("unchanged", off), now()),
            "schedule nightly unchanged (same definition): next fire none (disabled)"
        );
        let json = serde_json::to_value(Added {
            warnings: vec!["no live agent handles type report.build".into()],
            ..added("created", wire_schedule("nightly"))
        })
        .unwrap();
        assert_eq!(json["outcome"], "created");
        assert_eq!(json["schedule"]["name"], "nightly");
        assert_eq!(
            json["warnings"][0],
            "no live agent handles type report.build"
        );
    }

    #[test]
    fn enable_lines_say_whether_it_changed() {
        let e = |enabled, changed| Enabled {
            name: "nightly".into(),
            enabled,
            changed,
            schedule: view(v1::Schedule {
                enabled,
                ..wire_schedule("nightly")
            }),
        };
        assert_eq!(
            enable_line(&e(true, true), now()),
            "enabled schedule nightly: next fire 2025-12-01T11:20:03.000Z (in 3s)"
        );
        assert_eq!(
            enable_line(&e(false, true), now()),
            "disabled schedule nightly"
        );
        assert_eq!(
            enable_line(&e(true, false), now()),
            "schedule nightly was already enabled (nothing changed)"
        );
        assert_eq!(
            enable_line(&e(false, false), now()),
            "schedule nightly was already disabled (nothing changed)"
        );
        let json = serde_json::to_value(e(false, true)).unwrap();
        assert_eq!(json["enabled"], false);
        assert_eq!(json["changed"], true);
        assert_eq!(json["schedule"]["enabled"], false);
    }

    #[test]
    fn trigger_prints_the_task_and_its_key() {
        let mut task = wire_task();
        task.status = v1::TaskStatus::Queued as i32;
        task.idempotency_key = "schedule:nightly:manual:2025-12-01T11:20:00.000Z".into();
        let t = triggered(
            "nightly".into(),
            v1::TriggerScheduleResponse {
                task: Some(task),
                schedule: Some(wire_schedule("nightly")),
            },
        )
        .unwrap();
        assert_eq!(
            trigger_line(&t),
            "triggered schedule nightly: task 42 (idempotency key \
             schedule:nightly:manual:2025-12-01T11:20:00.000Z)"
        );
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(json["task_id"], 42);
        assert_eq!(
            json["idempotency_key"],
            "schedule:nightly:manual:2025-12-01T11:20:00.000Z"
        );
        assert_eq!(json["task"]["status"], "queued");
        let missing = triggered(
            "nightly".into(),
            v1::TriggerScheduleResponse {
                task: None,
                schedule: Some(wire_schedule("nightly")),
            },
        );
        assert!(matches!(missing, Err(Error::BadWire { .. })));
        assert_eq!(
            missing.err().map(|e| exit::exit_code(&e)),
            Some(exit::UNREACHABLE)
        );
    }
}
