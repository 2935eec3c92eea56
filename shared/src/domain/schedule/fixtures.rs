//! Test fixtures shared by the schedule modules' tests: instants from RFC 3339 text, a built
//! schedule, a catch-up policy, the forward walk every tick comes from, and the field a
//! refusal names.

use chrono::{DateTime, Utc};

use super::{MissedTicks, NEVER, Schedule};
use crate::domain::validate::{InputLimits, ValidationError};

pub(super) fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .unwrap_or_else(|e| panic!("{s}: {e}"))
        .with_timezone(&Utc)
}

pub(super) fn schedule(cron: &str, zone: &str, missed: MissedTicks) -> Schedule {
    Schedule::builder("nightly", cron, "report.build")
        .time_zone(zone)
        .missed(missed)
        .build(&InputLimits::default())
        .unwrap_or_else(|e| panic!("{cron} in {zone}: {e}"))
}

pub(super) fn catch_up(max: u32) -> MissedTicks {
    MissedTicks::catch_up(max).unwrap()
}

/// Every tick in `(after, until]`, by the forward search alone.
pub(super) fn walk_until(
    s: &Schedule,
    after: DateTime<Utc>,
    until: DateTime<Utc>,
) -> (Vec<DateTime<Utc>>, DateTime<Utc>) {
    let mut ticks = Vec::new();
    let mut next = s.next_after(after);
    while let Some(t) = next.filter(|t| *t <= until) {
        ticks.push(t);
        next = s.next_after(t);
    }
    (ticks, next.unwrap_or(NEVER))
}

pub(super) fn field_of(err: &ValidationError) -> &'static str {
    match err {
        ValidationError::Invalid { field, .. } | ValidationError::OutOfRange { field, .. } => field,
        ValidationError::TaskType { .. } => "task_type",
        ValidationError::PayloadTooLarge { .. } => "payload",
        other => panic!("unexpected error {other:?}"),
    }
}
