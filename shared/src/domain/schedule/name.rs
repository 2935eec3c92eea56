//! A schedule's name, [`ScheduleName`] (the task-type alphabet), and the idempotency key it
//! gives each tick's task, [`tick_idempotency_key`]: same name and tick, same key, on every
//! agent.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, SecondsFormat, Utc};

use crate::domain::ids::{TaskType, truncate_for_error};
use crate::domain::validate::ValidationError;

/// A schedule's name: the task-type alphabet, `[a-z0-9][a-z0-9_.:-]{0,63}`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ScheduleName(TaskType);

impl ScheduleName {
    /// Validates a name with the task-type rules; refused as field `name`.
    pub fn new(name: impl Into<String>) -> Result<Self, ValidationError> {
        let name = name.into();
        TaskType::new(name.as_str())
            .map(Self)
            .map_err(|_| ValidationError::Invalid {
                field: "name",
                detail: format!(
                    "{:?}: use 1-64 characters of a-z 0-9 _ . : - starting with a letter or digit",
                    truncate_for_error(&name)
                ),
            })
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl fmt::Display for ScheduleName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ScheduleName {
    type Err = ValidationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ScheduleName::new(s)
    }
}

/// The idempotency key of the task a schedule enqueues for one tick:
/// `schedule:<name>:<tick in RFC 3339 UTC, milliseconds>`, e.g.
/// `schedule:nightly:2025-03-30T01:00:00.000Z`. Same name and tick, same key, on every agent;
/// at most 98 bytes, within the idempotency key limit.
pub fn tick_idempotency_key(name: &ScheduleName, tick: DateTime<Utc>) -> String {
    format!(
        "schedule:{}:{}",
        name.as_str(),
        tick.to_rfc3339_opts(SecondsFormat::Millis, true)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::schedule::MissedTicks;
    use crate::domain::schedule::fixtures::{schedule, utc};

    #[test]
    fn idempotency_key_is_the_name_and_the_tick_in_utc_milliseconds() {
        let s = schedule("0 30 2 * * *", "Europe/Berlin", MissedTicks::Skip);
        let tick = utc("2025-03-30T03:00:00+02:00");
        assert_eq!(
            s.idempotency_key(tick),
            "schedule:nightly:2025-03-30T01:00:00.000Z"
        );
        // Same instant however it is written: same key.
        assert_eq!(
            s.idempotency_key(utc("2025-03-30T01:00:00Z")),
            s.idempotency_key(tick)
        );
        let longest = ScheduleName::new("n".repeat(64)).unwrap();
        let key = tick_idempotency_key(&longest, utc("4999-12-31T23:59:59Z"));
        assert_eq!(key.len(), 98, "{key}");
        assert!(crate::domain::validate::check_idempotency_key(&key).is_ok());
    }
}
