//! Cron schedules (DESIGN §3 `schedules`): a validated definition — name, cron expression with
//! seconds, IANA time zone, the task each tick enqueues, and what to do with ticks missed while
//! no leader ran — and the pure tick arithmetic a leader uses to fire it. No I/O here: the
//! store keeps `last_fired` and `next_fire`, the leader calls [`Schedule::due_ticks`] and
//! enqueues one task per tick under [`tick_idempotency_key`].
//!
//! ```text
//!     last_fired   next_fire                                   now
//!         │            │                                        │
//!   ──────●────────────○─────○─────○─────○─────○─────○─────○────┼────○──▶ UTC
//!                      └───────────── due (missed) ─────────────┘    └ returned next, > now
//!   Skip:            fire only the latest ○ at or before now
//!   CatchUp{max: 3}: fire the latest three ○, oldest first; older ones are dropped
//! ```
//!
//! Invariants:
//! - A tick is a whole-second UTC instant. The cron is matched against the wall clock of the
//!   schedule's zone; the ticks are exactly what the *forward* search ([`Schedule::next_after`])
//!   yields, so [`Schedule::next_after`] and [`Schedule::due_ticks`] always agree.
//! - [`Schedule::due_ticks`] is pure: the same row and `now` give the same ticks on every
//!   agent, and every tick has one key, so two leaders racing (a stale one, say) enqueue one
//!   task per tick. Its work is bounded by the policy's limit, never by the outage's length.
//!
//! croner 2 (the newest croner that adds no second version of any crate to the lock) only
//! parses the expression and matches it against wall-clock times here: its own zone-aware
//! search works on the naive wall clock and resolves a repeated hour to its first pass, so from
//! inside the second pass it returns an instant *before* the start, and it skips the second pass
//! of interval crons. This module therefore maps wall-clock matches to instants itself, with
//! the OCPS / Vixie-cron daylight saving rules that croner 4 documents:
//!
//! A *fixed-time* cron (one value each in the second, minute and hour fields, e.g.
//! `0 30 2 * * *`) whose time falls in a spring-forward gap fires once, at the first instant
//! after the gap (03:00) — the tick is moved, not lost (unless the gap ends on the next local
//! day, where the pattern's date no longer holds); in a fall-back repeated hour it fires once,
//! on the first pass. So it fires at most once per local day. A cron with a wildcard, list,
//! range or step in any of those fields (e.g. `0 */15 * * * *`, `0 30 * * * *`) skips the
//! wall-clock times a gap removes and fires on both passes of a repeated hour. Either way no
//! instant is ever produced twice, and successive ticks strictly increase.
//!
//! When things fail: bad input is refused with a [`ValidationError`] naming the field, and
//! nothing is built. A cron that can never fire is refused too. Past croner's search range
//! (year 5000) there is no next tick: [`Schedule::next_after`] returns `None` and
//! [`Schedule::due_ticks`] returns [`NEVER`] as the next fire time.
//!
//! [`ValidationError`]: crate::domain::ValidationError

mod builder;
mod cron;
mod due;
mod missed;
mod name;
mod zone;

#[cfg(test)]
mod fixtures;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use super::ids::TaskType;

pub use builder::{DEFAULT_SCHEDULE_PRIORITY, ScheduleBuilder};
pub use cron::{CronExpr, MAX_CRON_LEN};
pub use due::NEVER;
pub use missed::{DEFAULT_CATCH_UP, MAX_CATCH_UP, MissedTicks};
pub use name::{ScheduleName, tick_idempotency_key};
pub use zone::parse_time_zone;

/// A validated schedule definition. Build with [`Schedule::builder`]; every field is checked
/// once there, so a `Schedule` is always storable and its ticks computable.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    name: ScheduleName,
    cron: CronExpr,
    time_zone: Tz,
    task_type: TaskType,
    payload: serde_json::Value,
    priority: i16,
    max_attempts: Option<i32>,
    enabled: bool,
    missed: MissedTicks,
}

impl Schedule {
    /// The schedule's name.
    pub fn name(&self) -> &ScheduleName {
        &self.name
    }

    /// The cron expression.
    pub fn cron(&self) -> &CronExpr {
        &self.cron
    }

    /// The zone the cron is evaluated in.
    pub fn time_zone(&self) -> Tz {
        self.time_zone
    }

    /// The type of every tick's task.
    pub fn task_type(&self) -> &TaskType {
        &self.task_type
    }

    /// The payload of every tick's task (its size was checked at build).
    pub fn payload(&self) -> &serde_json::Value {
        &self.payload
    }

    /// The priority of every tick's task.
    pub fn priority(&self) -> i16 {
        self.priority
    }

    /// Attempts every tick's task gets, in `1..=1000`; `None` inherits: each fired task takes
    /// its type's policy value, else the global one, else [`DEFAULT_MAX_ATTEMPTS`], as in force
    /// when it is fired (as any task enqueued without its own).
    ///
    /// [`DEFAULT_MAX_ATTEMPTS`]: crate::domain::policy::DEFAULT_MAX_ATTEMPTS
    pub fn max_attempts(&self) -> Option<i32> {
        self.max_attempts
    }

    /// Whether the schedule fires.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Sets whether the schedule fires.
    pub fn set_enabled(&mut self, enabled: bool) {
        self.enabled = enabled;
    }

    /// The missed-tick policy.
    pub fn missed(&self) -> MissedTicks {
        self.missed
    }

    /// The idempotency key of this schedule's task for `tick` (see [`tick_idempotency_key`]).
    pub fn idempotency_key(&self, tick: DateTime<Utc>) -> String {
        tick_idempotency_key(&self.name, tick)
    }
}
