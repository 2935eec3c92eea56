//! SQLite rows: the decode of its column types, times (INTEGER microseconds since the Unix
//! epoch) and JSON (TEXT), both ways. [`RecordColumns`] (with [`Columns`], implemented next to
//! the operator statements) hands plain values to the mapping written once for both stores
//! (`store/rows.rs`), re-exported here. Bad database state (a time out of range, unreadable
//! JSON) becomes [`StoreError::Corrupt`], never a panic.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::sqlite::SqliteRow;

use crate::store::rows::RecordColumns;
pub(super) use crate::store::rows::{
    agent, agent_id, attempt, breaker_status, get, policy, status, task, task_type,
};
use crate::store::{Result, StoreError};

/// A stored time (microseconds since the epoch, UTC).
pub(super) fn time(us: i64, what: &'static str) -> Result<DateTime<Utc>> {
    DateTime::from_timestamp_micros(us).ok_or_else(|| StoreError::Corrupt {
        what,
        detail: format!("{us} µs is not a time"),
    })
}

pub(super) fn get_time(row: &SqliteRow, column: &'static str) -> Result<DateTime<Utc>> {
    time(get::<i64>(row, column)?, column)
}

pub(super) fn get_opt_time(row: &SqliteRow, column: &'static str) -> Result<Option<DateTime<Utc>>> {
    get::<Option<i64>>(row, column)?
        .map(|us| time(us, column))
        .transpose()
}

/// A time as stored.
pub(super) fn micros(t: DateTime<Utc>) -> i64 {
    t.timestamp_micros()
}

/// A duration in stored units (saturating).
pub(super) fn span(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

pub(super) fn json<T: serde::de::DeserializeOwned>(
    raw: Option<String>,
    what: &'static str,
) -> Result<Option<T>> {
    raw.map(|text| serde_json::from_str(&text))
        .transpose()
        .map_err(|e| StoreError::Corrupt {
            what,
            detail: e.to_string(),
        })
}

/// A JSON value as stored.
pub(super) fn to_text<T: serde::Serialize>(value: &T, what: &'static str) -> Result<String> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt {
        what,
        detail: e.to_string(),
    })
}

impl RecordColumns for SqliteRow {
    fn opt_float(&self, column: &'static str) -> Result<Option<f64>> {
        get(self, column)
    }

    fn text_list(&self, column: &'static str) -> Result<Vec<String>> {
        let text: String = get(self, column)?;
        serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
            what: column,
            detail: e.to_string(),
        })
    }
}
