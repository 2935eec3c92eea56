//! Cron schedules from the wire (`schedules …`; see the parent module for conventions).
//!
//! A time is shown twice, as an RFC 3339 UTC string and as ms since 1970, both `null` when
//! the wire says 0 (never fired, never fires again). The last task's status is `null` when the
//! wire says TASK_STATUS_UNSPECIFIED (no task, or one deleted by retention); a number this
//! build does not know is bad wire data. A schedule without its own max attempts (wire 0)
//! shows `"max_attempts":null`: each task it fires takes its type's policy value, else the
//! global one, else 25; `max_attempts_in_force` is what a task fired now gets (`null` when the
//! agent does not say: an older agent, or a row it cannot read).
//!
//! ```text
//! {"name":"nightly","cron":"0 0 2 * * *","description":"at 02:00:00","time_zone":"UTC",
//!  "task_type":"report","payload":{},"priority":0,"max_attempts":3 (null: inherited),
//!  "max_attempts_in_force":3,"enabled":true,"missed":"skip","catch_up_max":1,"next_fire_at":"…Z","next_fire_at_ms":1764554400000,
//!  "last_fired_at":null,"last_fired_at_ms":null,"last_task_id":null,"last_task_status":null,
//!  "last_error":null,"created_at":"…Z","created_at_ms":…,"updated_at":"…Z","updated_at_ms":…}
//! ```

use leasehold_proto::v1;
use leasehold_shared::TaskStatus;
use serde::Serialize;

use super::{Timestamp, WireError, json, opt_string, opt_time, status, time};

/// A schedule as the commands show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScheduleView {
    pub name: String,
    pub cron: String,
    /// The cron in words; `null` when the agent gave none.
    pub description: Option<String>,
    pub time_zone: String,
    pub task_type: String,
    pub payload: serde_json::Value,
    pub priority: i16,
    /// `None`: inherited from the policies at each firing.
    pub max_attempts: Option<i32>,
    /// What a task fired now gets; `None` when the agent does not say.
    pub max_attempts_in_force: Option<i32>,
    pub enabled: bool,
    pub missed: String,
    pub catch_up_max: u32,
    pub next_fire_at: Option<Timestamp>,
    pub next_fire_at_ms: Option<i64>,
    pub last_fired_at: Option<Timestamp>,
    pub last_fired_at_ms: Option<i64>,
    pub last_task_id: Option<i64>,
    pub last_task_status: Option<TaskStatus>,
    /// Why the last firing could not enqueue.
    pub last_error: Option<String>,
    pub created_at: Option<Timestamp>,
    pub created_at_ms: Option<i64>,
    pub updated_at: Option<Timestamp>,
    pub updated_at_ms: Option<i64>,
}

/// A wire time that may be 0, and its ms.
fn opt_time_ms(
    field: &'static str,
    ms: i64,
) -> Result<(Option<Timestamp>, Option<i64>), WireError> {
    let t = opt_time(field, ms)?;
    Ok((t, t.map(Timestamp::millis)))
}

/// A task status that may be TASK_STATUS_UNSPECIFIED ("none").
pub fn opt_status(value: i32) -> Result<Option<TaskStatus>, WireError> {
    if value == v1::TaskStatus::Unspecified as i32 {
        return Ok(None);
    }
    status(value).map(Some)
}

impl ScheduleView {
    /// Converts a wire schedule, refusing what breaks the contract.
    pub fn from_wire(s: v1::Schedule) -> Result<Self, WireError> {
        let priority = i16::try_from(s.priority).map_err(|_| WireError::OutOfRange {
            field: "priority",
            value: i64::from(s.priority),
        })?;
        let attempts = |field: &'static str, value: i32| match value {
            0 => Ok(None),
            1.. => Ok(Some(value)),
            _ => Err(WireError::OutOfRange {
                field,
                value: i64::from(value),
            }),
        };
        let max_attempts = attempts("max_attempts", s.max_attempts)?;
        let max_attempts_in_force = attempts("max_attempts_in_force", s.max_attempts_in_force)?;
        let last_task_id = match s.last_task_id {
            0 => None,
            1.. => Some(s.last_task_id),
            value => {
                return Err(WireError::OutOfRange {
                    field: "last_task_id",
                    value,
                });
            }
        };
        // The agent stores `{}` for an empty payload; an empty text still means `{}`.
        let payload = if s.payload_json.is_empty() {
            serde_json::json!({})
        } else {
            json("payload_json", &s.payload_json)?
        };
        let (next_fire_at, next_fire_at_ms) = opt_time_ms("next_fire_at_ms", s.next_fire_at_ms)?;
        let (last_fired_at, last_fired_at_ms) =
            opt_time_ms("last_fired_at_ms", s.last_fired_at_ms)?;
        let (created_at, created_at_ms) = opt_time_ms("created_at_ms", s.created_at_ms)?;
        let (updated_at, updated_at_ms) = opt_time_ms("updated_at_ms", s.updated_at_ms)?;
        Ok(Self {
            last_task_status: opt_status(s.last_task_status)?,
            name: s.name,
            cron: s.cron,
            description: opt_string(s.description),
            time_zone: if s.time_zone.is_empty() {
                "UTC".to_owned()
            } else {
                s.time_zone
            },
            task_type: s.task_type,
            payload,
            priority,
            max_attempts,
            max_attempts_in_force,
            enabled: s.enabled,
            missed: s.missed,
            catch_up_max: s.catch_up_max,
            next_fire_at,
            next_fire_at_ms,
            last_fired_at,
            last_fired_at_ms,
            last_task_id,
            last_error: opt_string(s.last_error),
            created_at,
            created_at_ms,
            updated_at,
            updated_at_ms,
        })
    }

    /// A schedule a reply must carry.
    pub fn required(s: Option<v1::Schedule>) -> Result<Self, WireError> {
        Self::from_wire(s.ok_or(WireError::MissingField("schedule"))?)
    }
}

/// `schedules ls`: every schedule, by name, and the database time of the read.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleList {
    pub schedules: Vec<ScheduleView>,
    pub now: Timestamp,
}

impl ScheduleList {
    /// Converts a `ListSchedules` reply.
    pub fn from_wire(r: v1::ListSchedulesResponse) -> Result<Self, WireError> {
        Ok(Self {
            schedules: r
                .schedules
                .into_iter()
                .map(ScheduleView::from_wire)
                .collect::<Result<_, _>>()?,
            now: time("now_ms", r.now_ms)?,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Database time of the schedule fixtures.
    pub(crate) const NOW: i64 = 1_764_588_000_000;

    /// A wire schedule with every field set, for tests of conversion and rendering.
    pub(crate) fn wire_schedule(name: &str) -> v1::Schedule {
        v1::Schedule {
            name: name.into(),
            cron: "0 */5 * * * *".into(),
            time_zone: "UTC".into(),
            task_type: "report.build".into(),
            payload_json: r#"{"kind":"daily"}"#.into(),
            priority: 2,
            max_attempts: 3,
            max_attempts_in_force: 3,
            enabled: true,
            missed: "skip".into(),
            catch_up_max: 1,
            next_fire_at_ms: NOW + 3_000,
            last_fired_at_ms: NOW - 297_000,
            last_task_id: 42,
            last_task_status: v1::TaskStatus::Succeeded as i32,
            last_error: String::new(),
            created_at_ms: NOW - 86_400_000,
            updated_at_ms: NOW - 3_600_000,
            description: "every 5 minutes".into(),
        }
    }

    #[test]
    fn a_schedule_renders_as_the_documented_json() {
        let view = ScheduleView::from_wire(wire_schedule("nightly")).map_err(|e| e.to_string());
        let json = view.map(|v| serde_json::to_value(v).ok());
        let expected = serde_json::json!({
            "name": "nightly",
            "cron": "0 */5 * * * *",
            "description": "every 5 minutes",
            "time_zone": "UTC",
            "task_type": "report.build",
            "payload": {"kind": "daily"},
            "priority": 2,
            "max_attempts": 3,
            "max_attempts_in_force": 3,
            "enabled": true,
            "missed": "skip",
            "catch_up_max": 1,
            "next_fire_at": "2025-12-01T11:20:03.000Z",
            "next_fire_at_ms": 1_764_588_003_000_i64,
            "last_fired_at": "2025-12-01T11:15:03.000Z",
            "last_fired_at_ms": 1_764_587_703_000_i64,
            "last_task_id": 42,
            "last_task_status": "succeeded",
            "last_error": null,
            "created_at": "2025-11-30T11:20:00.000Z",
            "created_at_ms": 1_764_501_600_000_i64,
            "updated_at": "2025-12-01T10:20:00.000Z",
            "updated_at_ms": 1_764_584_400_000_i64,
        });
        assert_eq!(json, Ok(Some(expected)));
    }

    #[test]
    fn none_on_the_wire_is_null() {
        let mut s = wire_schedule("idle");
        s.next_fire_at_ms = 0;
        s.last_fired_at_ms = 0;
        s.last_task_id = 0;
        s.last_task_status = 0;
        s.time_zone = String::new();
        s.payload_json = String::new();
        s.description = String::new();
        let v = ScheduleView::from_wire(s).ok();
        let v = v.as_ref();
        assert_eq!(v.and_then(|v| v.next_fire_at), None);
        assert_eq!(v.and_then(|v| v.next_fire_at_ms), None);
        assert_eq!(v.and_then(|v| v.last_task_id), None);
        assert_eq!(v.and_then(|v| v.last_task_status), None);
        assert_eq!(v.map(|v| v.time_zone.as_str()), Some("UTC"));
        assert_eq!(v.map(|v| v.payload.clone()), Some(serde_json::json!({})));
    }

    #[test]
    fn an_inherited_max_attempts_is_null_next_to_the_value_in_force() {
        let mut s = wire_schedule("inherits");
        s.max_attempts = 0;
        s.max_attempts_in_force = 7;
        let json = ScheduleView::from_wire(s)
            .ok()
            .and_then(|v| serde_json::to_value(v).ok());
        let json = json.unwrap_or_default();
        assert_eq!(json["max_attempts"], serde_json::Value::Null);
        assert_eq!(json["max_attempts_in_force"], 7);

        let mut older = wire_schedule("older-agent");
        older.max_attempts_in_force = 0;
        let v = ScheduleView::from_wire(older).ok();
        assert_eq!(
            v.map(|v| (v.max_attempts, v.max_attempts_in_force)),
            Some((Some(3), None))
        );
    }

    #[test]
    fn bad_wire_schedules_are_refused() {
        type Spoil = fn(&mut v1::Schedule);
        let cases: Vec<(Spoil, &str)> = vec![
            (|s| s.last_task_status = 42, "task status 42"),
            (|s| s.payload_json = "{nope".into(), "payload_json"),
            (|s| s.next_fire_at_ms = -1, "next_fire_at_ms"),
            (|s| s.last_fired_at_ms = i64::MAX, "last_fired_at_ms"),
            (|s| s.priority = 40_000, "priority"),
            (|s| s.max_attempts = -1, "max_attempts"),
            (|s| s.max_attempts_in_force = -1, "max_attempts_in_force"),
            (|s| s.last_task_id = -4, "last_task_id"),
        ];
        for (spoil, needle) in cases {
            let mut s = wire_schedule("bad");
            spoil(&mut s);
            let err = ScheduleView::from_wire(s).err().map(|e| e.to_string());
            let err = err.unwrap_or_default();
            assert!(err.contains(needle), "{err:?} should mention {needle}");
        }
        assert_eq!(
            ScheduleView::required(None).err(),
            Some(WireError::MissingField("schedule"))
        );
        let list = v1::ListSchedulesResponse {
            schedules: vec![],
            now_ms: 0,
        };
        assert!(ScheduleList::from_wire(list).is_err());
    }
}
