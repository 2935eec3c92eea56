//! Wire → view conversion: the one place where the agent's protobuf messages become the
//! values the headless commands print (as JSON through serde, or as table text).
//!
//! Invariants: nothing here panics on wire data. What breaks the contract — a status that is
//! unspecified or unknown, JSON text that does not parse, a time that is negative or out of
//! chrono's range, a priority outside `i16`, a missing required message, a negative fencing
//! token, a shard listed twice — is a [`WireError`], which the commands report as "the agent
//! sent …" (exit 3: an agent that answers outside the contract is as unusable as one that
//! cannot be reached). What the
//! contract leaves open for later versions (a delta kind this build does not know) is skipped.
//!
//! Conventions of the views: times are RFC 3339 UTC strings with milliseconds, or `null` where
//! the wire says 0 ("none"); empty optional strings are `null`; JSON text is parsed into JSON
//! values; statuses are their snake_case names.

pub mod agent;
pub mod breaker;
pub mod overview;
pub mod rate;
pub mod resource;
pub mod schedule;
pub mod shed;
pub mod stats;
pub mod task;
pub mod watch;

#[cfg(test)]
mod props;

use chrono::{DateTime, SecondsFormat, Utc};
use leasehold_proto::{v1, wire};
use leasehold_shared::TaskStatus;
use serde::{Serialize, Serializer};
use thiserror::Error;

/// Wire data that breaks the contract.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WireError {
    #[error("{}", status_text(*.0))]
    Status(i32),
    #[error("a reply without {0}")]
    MissingField(&'static str),
    #[error("{field} that is not valid JSON ({detail})")]
    Json { field: &'static str, detail: String },
    #[error("{field} = {value}, which is not a time in ms since 1970")]
    Time { field: &'static str, value: i64 },
    #[error("{field} = {value}, out of range")]
    OutOfRange { field: &'static str, value: i64 },
    /// A reply whose parts disagree (a shard listed twice).
    #[error("{0}")]
    Broken(String),
    #[error("{source} for task {id}")]
    InTask {
        id: i64,
        #[source]
        source: Box<WireError>,
    },
}

fn status_text(value: i32) -> String {
    if value == 0 {
        "task status 0 (TASK_STATUS_UNSPECIFIED)".to_owned()
    } else {
        format!("task status {value}, which this build does not know")
    }
}

/// A point in time from the wire, shown as RFC 3339 UTC with milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Timestamp(DateTime<Utc>);

impl Timestamp {
    /// Milliseconds since 1970.
    pub fn millis(self) -> i64 {
        self.0.timestamp_millis()
    }

    /// `2026-12-01T11:20:03.123Z`.
    pub fn rfc3339(self) -> String {
        self.0.to_rfc3339_opts(SecondsFormat::Millis, true)
    }

    /// `11:20:03.123`: the time of day in UTC, for watch lines.
    pub fn time_of_day(self) -> String {
        self.0.format("%H:%M:%S%.3f").to_string()
    }
}

impl From<DateTime<Utc>> for Timestamp {
    fn from(value: DateTime<Utc>) -> Self {
        Self(value)
    }
}

impl std::fmt::Display for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.rfc3339())
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.rfc3339())
    }
}

/// A wire time that may be 0 ("none").
pub fn opt_time(field: &'static str, ms: i64) -> Result<Option<Timestamp>, WireError> {
    if ms == 0 {
        return Ok(None);
    }
    time(field, ms).map(Some)
}

/// A wire time that must be set.
pub fn time(field: &'static str, ms: i64) -> Result<Timestamp, WireError> {
    if ms <= 0 {
        return Err(WireError::Time { field, value: ms });
    }
    DateTime::from_timestamp_millis(ms)
        .map(Timestamp)
        .ok_or(WireError::Time { field, value: ms })
}

/// A task status from the wire (the one mapping is [`leasehold_proto::wire`]).
pub fn status(value: i32) -> Result<TaskStatus, WireError> {
    wire::status_from_wire(value).ok_or(WireError::Status(value))
}

/// A task status for the wire (filters).
pub fn wire_status(status: TaskStatus) -> v1::TaskStatus {
    wire::status_to_wire(status)
}

/// JSON text that must parse.
pub fn json(field: &'static str, text: &str) -> Result<serde_json::Value, WireError> {
    serde_json::from_str(text).map_err(|e| WireError::Json {
        field,
        detail: e.to_string(),
    })
}

/// JSON text that may be empty ("none").
pub fn opt_json(field: &'static str, text: &str) -> Result<Option<serde_json::Value>, WireError> {
    if text.is_empty() {
        return Ok(None);
    }
    json(field, text).map(Some)
}

/// An empty string as `None`.
pub fn opt_string(s: String) -> Option<String> {
    if s.is_empty() { None } else { Some(s) }
}

/// A duration in ms that may be 0 ("none" / "the default"); negative is refused.
pub fn opt_ms(field: &'static str, ms: i64) -> Result<Option<i64>, WireError> {
    match ms {
        0 => Ok(None),
        1.. => Ok(Some(ms)),
        _ => Err(WireError::OutOfRange { field, value: ms }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip_and_unspecified_or_unknown_are_refused() {
        for s in TaskStatus::ALL {
            assert_eq!(status(wire_status(s) as i32), Ok(s));
        }
        assert_eq!(status(0), Err(WireError::Status(0)));
        assert_eq!(status(99), Err(WireError::Status(99)));
        assert_eq!(status(-1), Err(WireError::Status(-1)));
        assert_eq!(
            WireError::Status(0).to_string(),
            "task status 0 (TASK_STATUS_UNSPECIFIED)"
        );
        assert_eq!(
            WireError::Status(99).to_string(),
            "task status 99, which this build does not know"
        );
    }

    #[test]
    fn times_are_rfc3339_with_millis_and_zero_is_none() {
        assert_eq!(opt_time("t", 0), Ok(None));
        let t = time("t", 1_764_588_003_123).map(Timestamp::rfc3339);
        assert_eq!(t.as_deref(), Ok("2025-12-01T11:20:03.123Z"));
        assert!(time("t", 0).is_err());
        assert!(opt_time("t", -5).is_err());
        assert!(opt_time("t", i64::MAX).is_err());
    }

    #[test]
    fn json_text_must_parse() {
        assert_eq!(opt_json("r", ""), Ok(None));
        assert_eq!(json("p", "{\"a\":1}"), Ok(serde_json::json!({"a": 1})));
        assert!(matches!(
            json("p", "{"),
            Err(WireError::Json { field: "p", .. })
        ));
        assert!(json("p", "").is_err());
    }

    #[test]
    fn durations_refuse_negative() {
        assert_eq!(opt_ms("x", 0), Ok(None));
        assert_eq!(opt_ms("x", 5), Ok(Some(5)));
        assert!(opt_ms("x", -1).is_err());
    }
}
