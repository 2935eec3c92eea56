//! Cron schedules in the store, the parts both backends share: the records and parameters of
//! the schedule operations, how an add decides between insert, update and no-op, how a
//! stored row becomes a [`Schedule`] again, what the leader's firing enqueues, and the audit
//! rows. The operations are written once in [`flow`]; the backends only run the statements,
//! in one transaction per operation.
//!
//! ```text
//!   add / declare ──▶ schedules row (next_fire_at = first tick after now)
//!   leader, in one transaction fenced by its term:
//!     rows enabled AND next_fire_at <= now ──fire_plan──▶ one task per tick,
//!       key schedule:<name>:<tick>  (a racing stale leader finds the key taken)
//!     ──▶ last_fired_at = last tick, next_fire_at = first tick after now
//!   trigger ──▶ one task now, key schedule:<name>:manual:<now>
//! ```
//!
//! When things fail: a row this version cannot read (bad database state, or a schedule an
//! agent of a newer version wrote) is never fired and never blocks the others; the leader
//! records why in `last_error` and looks at it again a minute later ([`UNREADABLE_RETRY`]);
//! listings show it as unreadable. A tick whose task cannot be enqueued (its payload above a
//! lowered limit) is recorded in `last_error` too, and the schedule moves on.

pub(crate) mod flow;

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::json;

use super::{AuditEntry, Enqueued, NewTask, StoreError};
use crate::domain::schedule::{MissedTicks, NEVER, tick_idempotency_key};
use crate::domain::{
    Actor, AgentId, AuditResult, InputLimits, Schedule, ScheduleAddOutcome, ScheduleName, TaskId,
    TaskStatus,
};

/// Longest `last_error` kept, in characters.
pub const MAX_SCHEDULE_ERROR_CHARS: usize = 500;
/// How long a leader waits before it looks again at a schedule row it could not read.
pub const UNREADABLE_RETRY: chrono::TimeDelta = chrono::TimeDelta::seconds(60);
/// Most ticks one firing pass enqueues; schedules left over stay due and fire in the next
/// pass, at once. Bounds the pass's transaction (and its hold on the leader row) whatever the
/// catch-up bounds add up to.
pub const MAX_TICKS_PER_PASS: usize = 2000;

/// A stored schedule with its firing state.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleRecord {
    pub schedule: Schedule,
    /// The next tick; `None` when it never fires again (or its row could not be read).
    pub next_fire_at: Option<DateTime<Utc>>,
    /// The last tick fired (a trigger does not count).
    pub last_fired_at: Option<DateTime<Utc>>,
    /// The task of the last tick or trigger.
    pub last_task_id: Option<TaskId>,
    /// That task's status now; `None` when there is none or retention deleted it.
    pub last_task_status: Option<TaskStatus>,
    /// Why the last firing enqueued nothing.
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Every schedule, by name: those that can be read, and those that cannot (bad database
/// state), which are listed rather than hidden so an operator can see and remove them.
#[derive(Debug, Clone, Default)]
pub struct ScheduleListing {
    pub schedules: Vec<ScheduleRecord>,
    pub unreadable: Vec<UnreadableSchedule>,
}

/// A stored schedule this version cannot read: what could be read of it, and why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreadableSchedule {
    pub name: String,
    pub cron: Option<String>,
    pub task_type: Option<String>,
    pub enabled: Option<bool>,
    pub error: String,
}

impl ScheduleListing {
    /// Sorts a listing's rows into readable and unreadable ones; `raw` gives what could be
    /// read of a row whose decoding failed.
    pub(crate) fn push(
        &mut self,
        decoded: Result<ScheduleRow, StoreError>,
        raw: impl FnOnce() -> UnreadableSchedule,
    ) {
        let error = match decoded {
            Ok(row) => {
                let partial = UnreadableSchedule {
                    name: row.name.clone(),
                    cron: Some(row.cron.clone()),
                    task_type: Some(row.task_type.clone()),
                    enabled: Some(row.enabled),
                    error: String::new(),
                };
                match row.record() {
                    Ok(record) => return self.schedules.push(record),
                    Err(e) => (partial, e),
                }
            }
            Err(e) => (raw(), e),
        };
        let (mut unreadable, e) = error;
        unreadable.error = clip(&e.to_string());
        self.unreadable.push(unreadable);
    }
}

/// How an add treats an existing schedule of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScheduleWriteMode {
    /// Create it; the same definition again is a no-op, a different one is refused with
    /// [`StoreError::ScheduleExists`].
    Create,
    /// Create or overwrite it.
    Replace,
    /// Declared in an agent's configuration: create or overwrite the definition, but keep
    /// the `enabled` an operator set (a restart must not undo a `disable`).
    Declare,
}

/// Add (or declare) a schedule.
#[derive(Debug, Clone)]
pub struct ScheduleAddParams {
    pub schedule: Schedule,
    pub mode: ScheduleWriteMode,
    pub actor: Actor,
}

/// An add's outcome and the schedule as stored after it.
#[derive(Debug, Clone)]
pub struct ScheduleAdded {
    pub outcome: ScheduleAddOutcome,
    pub record: ScheduleRecord,
}

/// An action on one schedule by name (remove, trigger).
#[derive(Debug, Clone)]
pub struct ScheduleNameParams {
    pub name: ScheduleName,
    pub actor: Actor,
}

/// Enable or disable a schedule.
#[derive(Debug, Clone)]
pub struct ScheduleEnableParams {
    pub name: ScheduleName,
    pub enabled: bool,
    pub actor: Actor,
}

/// Whether an enable or disable changed anything, and the schedule after it.
#[derive(Debug, Clone)]
pub struct ScheduleEnabled {
    pub changed: bool,
    pub record: ScheduleRecord,
}

/// A trigger's task and the schedule after it.
#[derive(Debug, Clone)]
pub struct ScheduleTriggered {
    pub task: Enqueued,
    pub idempotency_key: String,
    pub record: ScheduleRecord,
}

/// One firing pass of the leader.
#[derive(Debug, Clone)]
pub struct ScheduleFireParams {
    /// The leader and its term: nothing fires unless they hold the `leader` lease.
    pub leader: AgentId,
    pub term: i64,
    /// Ticks late by less than this are on time, whatever the missed-tick policy
    /// ([`Schedule::fire_plan`]).
    pub on_time: Duration,
    /// Most schedules fired in one pass (the rest stay due for the next).
    pub limit: u32,
}

/// A tick fired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FiredTick {
    pub name: ScheduleName,
    pub tick: DateTime<Utc>,
    /// `created = false`: another leader already enqueued this tick.
    pub task: Enqueued,
}

/// What a firing pass did.
#[derive(Debug, Clone, Default)]
pub struct FireReport {
    /// The caller does not hold the leader lease (any more): nothing fired.
    pub fenced: bool,
    pub fired: Vec<FiredTick>,
    /// Schedules that could not fire, and why (recorded in their `last_error`).
    pub failed: Vec<(ScheduleName, String)>,
    /// The earliest next fire time of any enabled schedule after the pass.
    pub next_due: Option<DateTime<Utc>>,
    /// The database's now of the pass.
    pub now: Option<DateTime<Utc>>,
}

/// The `leader` lease row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderRecord {
    /// `None` after a resignation (or before anyone led).
    pub owner: Option<AgentId>,
    pub term: i64,
    pub elected_at: Option<DateTime<Utc>>,
    pub lease_until: Option<DateTime<Utc>>,
    pub heartbeat_at: Option<DateTime<Utc>>,
    /// The database's now of the read.
    pub now: DateTime<Utc>,
}

impl LeaderRecord {
    /// Someone holds the lease now.
    pub fn held(&self) -> bool {
        self.owner.is_some() && self.lease_until.is_some_and(|until| until > self.now)
    }
}

/// A `schedules` row as read, before validation. Both backends fill it from their own types.
#[derive(Debug, Clone)]
pub(crate) struct ScheduleRow {
    pub name: String,
    pub cron: String,
    pub time_zone: String,
    pub task_type: String,
    pub payload: serde_json::Value,
    pub priority: i16,
    /// `None`: the schedule inherits (see [`Schedule::max_attempts`]).
    pub max_attempts: Option<i32>,
    pub enabled: bool,
    pub missed: String,
    pub catch_up_max: i32,
    pub next_fire_at: Option<DateTime<Utc>>,
    pub last_fired_at: Option<DateTime<Utc>>,
    pub last_task_id: Option<i64>,
    pub last_task_status: Option<TaskStatus>,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Limits for reading stored rows back: the database already bounds payloads, so a lowered
/// configured limit must not make existing schedules unreadable.
fn read_limits() -> InputLimits {
    InputLimits::with_max_payload_bytes(crate::domain::validate::HARD_MAX_PAYLOAD_BYTES)
        .unwrap_or_default()
}

impl ScheduleRow {
    /// The definition, validated as on input; bad database state is [`StoreError::Corrupt`].
    pub(crate) fn schedule(&self) -> Result<Schedule, StoreError> {
        let corrupt = |detail: String| StoreError::Corrupt {
            what: "schedule",
            detail: format!("{:?}: {detail}", self.name),
        };
        let missed = match self.missed.as_str() {
            "skip" => MissedTicks::Skip,
            "catch_up" => u32::try_from(self.catch_up_max)
                .map_err(|e| corrupt(e.to_string()))
                .and_then(|max| MissedTicks::catch_up(max).map_err(|e| corrupt(e.to_string())))?,
            other => return Err(corrupt(format!("unknown missed-tick policy {other:?}"))),
        };
        Schedule::builder(&self.name, &self.cron, &self.task_type)
            .time_zone(&self.time_zone)
            .payload(self.payload.clone())
            .priority(self.priority)
            .max_attempts_opt(self.max_attempts)
            .enabled(self.enabled)
            .missed(missed)
            .build(&read_limits())
            .map_err(|e| corrupt(e.to_string()))
    }

    pub(crate) fn record(self) -> Result<ScheduleRecord, StoreError> {
        Ok(ScheduleRecord {
            schedule: self.schedule()?,
            next_fire_at: self.next_fire_at,
            last_fired_at: self.last_fired_at,
            last_task_id: self.last_task_id.map(TaskId),
            last_task_status: self.last_task_status,
            last_error: self.last_error,
            created_at: self.created_at,
            updated_at: self.updated_at,
        })
    }
}

/// The columns of a schedule's definition, as both backends store them.
pub(crate) struct StoredDefinition<'a> {
    pub name: &'a str,
    pub cron: &'a str,
    pub time_zone: &'a str,
    pub task_type: &'a str,
    pub payload: &'a serde_json::Value,
    pub priority: i16,
    /// NULL: inherit.
    pub max_attempts: Option<i32>,
    pub enabled: bool,
    pub missed: &'static str,
    pub catch_up_max: i32,
}

impl<'a> StoredDefinition<'a> {
    pub(crate) fn of(s: &'a Schedule) -> Self {
        let catch_up_max = match s.missed() {
            MissedTicks::Skip => 1,
            m @ MissedTicks::CatchUp { .. } => i32::try_from(m.limit()).unwrap_or(1),
        };
        Self {
            name: s.name().as_str(),
            cron: s.cron().as_str(),
            time_zone: s.time_zone().name(),
            task_type: s.task_type().as_str(),
            payload: s.payload(),
            priority: s.priority(),
            max_attempts: s.max_attempts(),
            enabled: s.enabled(),
            missed: s.missed().as_str(),
            catch_up_max,
        }
    }
}

/// What an add does to the row.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AddPlan {
    /// Insert the schedule, first tick after now.
    Insert,
    /// Overwrite the definition with `schedule` (whose `enabled` is already what to store);
    /// `reset_next`: the ticks changed (cron, zone, or enabled again), so the next fire time
    /// is the first tick after now.
    Update {
        schedule: Box<Schedule>,
        reset_next: bool,
    },
    /// Nothing to write.
    Unchanged,
}

/// Decides an add against the stored schedule of that name (`None`: no row, or one that
/// cannot be read, which any mode but [`ScheduleWriteMode::Create`] overwrites).
pub(crate) fn plan_add(
    stored: Option<Result<Schedule, StoreError>>,
    new: &Schedule,
    mode: ScheduleWriteMode,
) -> Result<AddPlan, StoreError> {
    let old = match stored {
        None => return Ok(AddPlan::Insert),
        Some(Ok(old)) => old,
        Some(Err(unreadable)) => {
            if mode == ScheduleWriteMode::Create {
                return Err(StoreError::ScheduleExists {
                    name: new.name().to_string(),
                    detail: format!("the stored one is unreadable ({unreadable})"),
                });
            }
            return Ok(AddPlan::Update {
                schedule: Box::new(new.clone()),
                reset_next: true,
            });
        }
    };
    let schedule = match mode {
        ScheduleWriteMode::Declare => with_enabled(new, old.enabled()),
        ScheduleWriteMode::Create | ScheduleWriteMode::Replace => new.clone(),
    };
    if schedule == old {
        return Ok(AddPlan::Unchanged);
    }
    if mode == ScheduleWriteMode::Create {
        return Err(StoreError::ScheduleExists {
            name: new.name().to_string(),
            detail: "with a different definition".into(),
        });
    }
    let reset_next = schedule.cron() != old.cron()
        || schedule.time_zone() != old.time_zone()
        || (schedule.enabled() && !old.enabled());
    Ok(AddPlan::Update {
        schedule: Box::new(schedule),
        reset_next,
    })
}

/// The stored schedule an action on `name` works on: [`StoreError::ScheduleNotFound`] when
/// there is none, its decoding error when it cannot be read.
pub(crate) fn found(
    stored: Option<Result<Schedule, StoreError>>,
    name: &str,
) -> Result<Schedule, StoreError> {
    stored.unwrap_or_else(|| Err(StoreError::ScheduleNotFound(name.to_string())))
}

/// `s` with `enabled` set.
pub(crate) fn with_enabled(s: &Schedule, enabled: bool) -> Schedule {
    let mut s = s.clone();
    s.set_enabled(enabled);
    s
}

/// The first tick after `now` as stored (`None`: never).
pub(crate) fn first_fire(s: &Schedule, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    s.next_after(now).filter(|t| *t != NEVER)
}

/// The task one tick (or a trigger) enqueues. A schedule that inherits its max attempts gives
/// none, so the enqueue resolves them from the policies in force now, as for any task.
pub(crate) fn tick_task(s: &Schedule, key: String) -> NewTask {
    let mut task = NewTask::new(s.task_type().clone(), s.payload().clone());
    task.priority = s.priority();
    task.max_attempts = s.max_attempts();
    task.idempotency_key = Some(key);
    task
}

/// The idempotency key of a trigger at `now`: never a tick's, and unique per trigger even
/// when two land in one clock tick (SQLite's clock has millisecond precision): the time, then
/// a random part.
pub(crate) fn trigger_key(name: &ScheduleName, now: DateTime<Utc>) -> String {
    format!(
        "schedule:{}:manual:{}:{:016x}",
        name.as_str(),
        now.to_rfc3339_opts(SecondsFormat::Micros, true),
        fastrand::u64(..)
    )
}

/// One schedule's part of a firing pass.
#[derive(Debug, Clone)]
pub(crate) enum FireStep {
    /// Enqueue these ticks' tasks, then store `last_fired_at = last tick` and `next`.
    Fire {
        ticks: Vec<(DateTime<Utc>, NewTask)>,
        next: Option<DateTime<Utc>>,
    },
    /// The row cannot be read: record `error` and look again at `retry_at`.
    Unreadable {
        error: String,
        retry_at: DateTime<Utc>,
    },
}

/// What the leader does with one due row at `now`.
pub(crate) fn plan_fire(row: &ScheduleRow, now: DateTime<Utc>, on_time: Duration) -> FireStep {
    let schedule = match row.schedule() {
        Ok(s) => s,
        Err(e) => return unreadable(&e, now),
    };
    let next_fire = row.next_fire_at.unwrap_or(now);
    let (ticks, next) = schedule.fire_plan(row.last_fired_at, next_fire, now, on_time);
    FireStep::Fire {
        ticks: ticks
            .into_iter()
            .map(|tick| {
                let key = tick_idempotency_key(schedule.name(), tick);
                (tick, tick_task(&schedule, key))
            })
            .collect(),
        next: (next != NEVER).then_some(next),
    }
}

/// The step of a due row that cannot be read (`error`), at `now`: not fired, looked at again
/// after [`UNREADABLE_RETRY`] — an agent of a newer version, or a repaired row, fires it then.
pub(crate) fn unreadable(error: &StoreError, now: DateTime<Utc>) -> FireStep {
    FireStep::Unreadable {
        error: clip(&format!("not fired: {error}")),
        retry_at: now + UNREADABLE_RETRY,
    }
}

impl FireStep {
    /// The ticks to enqueue, oldest first (none for an unreadable row).
    pub(crate) fn ticks(&self) -> &[(DateTime<Utc>, NewTask)] {
        match self {
            FireStep::Fire { ticks, .. } => ticks,
            FireStep::Unreadable { .. } => &[],
        }
    }
}

/// One due row after its ticks were enqueued: what the row's update stores.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Settled {
    /// The last tick handled (kept as it was when `None`).
    pub last_tick: Option<DateTime<Utc>>,
    /// The next fire time (`None`: never, or stopped because unreadable).
    pub next: Option<DateTime<Utc>>,
    /// The task of the last tick enqueued (kept as it was when `None`).
    pub last_task: Option<i64>,
    /// Why something did not fire (cleared when `None`).
    pub error: Option<String>,
}

/// Settles one due row of schedule `name`: `step` as planned and, tick by tick in its
/// order, what enqueueing each gave (a backend may stop at the first database error). A
/// tick whose task the enqueue refused as invalid (a payload above a lowered limit) never gets
/// better: it is recorded and passed. The fired ticks and failures go into `report`; a
/// database error is returned, since the pass's transaction is lost with it.
pub(crate) fn settle(
    name: &str,
    step: FireStep,
    enqueued: Vec<(DateTime<Utc>, Result<Enqueued, StoreError>)>,
    report: &mut FireReport,
) -> Result<Settled, StoreError> {
    let schedule = ScheduleName::new(name).ok();
    let mut settled = match step {
        FireStep::Unreadable { error, retry_at } => Settled {
            error: Some(error),
            next: Some(retry_at),
            ..Settled::default()
        },
        FireStep::Fire { next, .. } => Settled {
            next,
            ..Settled::default()
        },
    };
    for (tick, done) in enqueued {
        settled.last_tick = Some(tick);
        match done {
            Ok(task) => {
                settled.last_task = Some(task.id.0);
                if let Some(name) = &schedule {
                    report.fired.push(FiredTick {
                        name: name.clone(),
                        tick,
                        task,
                    });
                }
            }
            Err(StoreError::Invalid(e)) => {
                settled.error = Some(clip(&format!("tick {tick} not enqueued: {e}")));
            }
            Err(e) => return Err(e),
        }
    }
    if let (Some(error), Some(name)) = (&settled.error, schedule) {
        report.failed.push((name, error.clone()));
    }
    Ok(settled)
}

/// `text` cut to [`MAX_SCHEDULE_ERROR_CHARS`].
pub(crate) fn clip(text: &str) -> String {
    text.chars().take(MAX_SCHEDULE_ERROR_CHARS).collect()
}

/// The parameters an add's audit row records.
pub(crate) fn add_audit_params(s: &Schedule, mode: ScheduleWriteMode) -> serde_json::Value {
    json!({
        "cron": s.cron().as_str(),
        "time_zone": s.time_zone().name(),
        "task_type": s.task_type().as_str(),
        "priority": s.priority(),
        "max_attempts": s.max_attempts(),
        "missed": s.missed().as_str(),
        "catch_up_max": s.missed().limit(),
        "enabled": s.enabled(),
        "mode": match mode {
            ScheduleWriteMode::Create => "create",
            ScheduleWriteMode::Replace => "replace",
            ScheduleWriteMode::Declare => "declare",
        },
    })
}

/// The audit action of each schedule operation.
pub(crate) mod action {
    pub const ADD: &str = "schedule_add";
    pub const REMOVE: &str = "schedule_remove";
    pub const ENABLE: &str = "schedule_enable";
    pub const DISABLE: &str = "schedule_disable";
    pub const TRIGGER: &str = "schedule_trigger";
}

/// The audit action of an enable (`true`) or a disable.
pub(crate) fn enable_action(enabled: bool) -> &'static str {
    if enabled {
        action::ENABLE
    } else {
        action::DISABLE
    }
}

/// The audit row of an add that did `outcome`.
pub(crate) fn add_entry(
    actor: &Actor,
    name: &str,
    params: serde_json::Value,
    outcome: ScheduleAddOutcome,
) -> AuditEntry {
    let result = match outcome {
        ScheduleAddOutcome::Unchanged => AuditResult::Noop,
        ScheduleAddOutcome::Created | ScheduleAddOutcome::Replaced => AuditResult::Applied,
    };
    entry(
        actor,
        action::ADD,
        name,
        Some(params),
        result,
        Some(outcome.as_str().into()),
    )
}

/// The audit row of an add refused because the name is taken.
pub(crate) fn refused_add_entry(
    actor: &Actor,
    name: &str,
    params: serde_json::Value,
    refused: &StoreError,
) -> AuditEntry {
    entry(
        actor,
        action::ADD,
        name,
        Some(params),
        AuditResult::Failed,
        Some(refused.to_string()),
    )
}

/// The audit row of an action refused with `error` (unknown schedule, unreadable row, a task
/// the enqueue refused): written on its own, since the action changed nothing.
pub(crate) fn failed_entry(
    actor: &Actor,
    action: &str,
    name: &str,
    error: &StoreError,
) -> AuditEntry {
    entry(
        actor,
        action,
        name,
        None,
        AuditResult::Failed,
        Some(clip(&error.to_string())),
    )
}

/// Whether an add's outcome gets an audit row: every one, except a declaration that changed
/// nothing (every agent start declares its configured schedules again).
pub(crate) fn audits(mode: ScheduleWriteMode, outcome: ScheduleAddOutcome) -> bool {
    !(mode == ScheduleWriteMode::Declare && outcome == ScheduleAddOutcome::Unchanged)
}

/// The audit row of an enable or disable.
pub(crate) fn enable_entry(actor: &Actor, enabled: bool, name: &str, changed: bool) -> AuditEntry {
    let result = if changed {
        AuditResult::Applied
    } else {
        AuditResult::Noop
    };
    entry(actor, enable_action(enabled), name, None, result, None)
}

/// The audit row of a removal.
pub(crate) fn remove_entry(actor: &Actor, name: &str) -> AuditEntry {
    entry(
        actor,
        action::REMOVE,
        name,
        None,
        AuditResult::Applied,
        None,
    )
}

/// The audit row of a trigger that enqueued `task` under `key`.
pub(crate) fn trigger_entry(actor: &Actor, name: &str, task: &Enqueued, key: &str) -> AuditEntry {
    entry(
        actor,
        action::TRIGGER,
        name,
        Some(json!({ "task_id": task.id.0, "idempotency_key": key })),
        AuditResult::Applied,
        None,
    )
}

/// The audit target of a schedule.
pub(crate) fn target(name: &str) -> String {
    format!("schedule:{name}")
}

/// An audit row of a schedule operation.
pub(crate) fn entry(
    actor: &Actor,
    action: &str,
    name: &str,
    params: Option<serde_json::Value>,
    result: AuditResult,
    detail: Option<String>,
) -> AuditEntry {
    AuditEntry {
        actor: actor.clone(),
        action: action.to_string(),
        target: target(name),
        params,
        result,
        detail,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn schedule(cron: &str, enabled: bool) -> Schedule {
        Schedule::builder("nightly", cron, "report.build")
            .enabled(enabled)
            .build(&InputLimits::default())
            .unwrap()
    }

    #[test]
    fn an_add_inserts_updates_or_changes_nothing_by_mode() {
        let s = schedule("0 0 2 * * *", true);
        assert_eq!(
            plan_add(None, &s, ScheduleWriteMode::Create).unwrap(),
            AddPlan::Insert
        );
        for mode in [
            ScheduleWriteMode::Create,
            ScheduleWriteMode::Replace,
            ScheduleWriteMode::Declare,
        ] {
            assert_eq!(
                plan_add(Some(Ok(s.clone())), &s, mode).unwrap(),
                AddPlan::Unchanged,
                "{mode:?}"
            );
        }
        let other = schedule("0 0 3 * * *", true);
        assert!(matches!(
            plan_add(Some(Ok(s.clone())), &other, ScheduleWriteMode::Create),
            Err(StoreError::ScheduleExists { .. })
        ));
        assert_eq!(
            plan_add(Some(Ok(s.clone())), &other, ScheduleWriteMode::Replace).unwrap(),
            AddPlan::Update {
                schedule: Box::new(other.clone()),
                reset_next: true
            }
        );
    }

    #[test]
    fn a_declaration_keeps_what_an_operator_disabled() {
        let disabled = schedule("0 0 2 * * *", false);
        let declared = schedule("0 0 2 * * *", true);
        assert_eq!(
            plan_add(
                Some(Ok(disabled.clone())),
                &declared,
                ScheduleWriteMode::Declare
            )
            .unwrap(),
            AddPlan::Unchanged
        );
        let changed = Schedule::builder("nightly", "0 0 2 * * *", "report.build")
            .priority(5)
            .build(&InputLimits::default())
            .unwrap();
        let AddPlan::Update {
            schedule,
            reset_next,
        } = plan_add(Some(Ok(disabled)), &changed, ScheduleWriteMode::Declare).unwrap()
        else {
            panic!("an update")
        };
        assert!(!schedule.enabled());
        assert_eq!(schedule.priority(), 5);
        assert!(!reset_next, "same cron and zone: the next fire time stands");
    }

    #[test]
    fn a_row_that_cannot_be_read_is_not_fired_and_says_why() {
        let row = ScheduleRow {
            name: "broken".into(),
            cron: "not a cron".into(),
            time_zone: "UTC".into(),
            task_type: "noop".into(),
            payload: json!({}),
            priority: 0,
            max_attempts: Some(3),
            enabled: true,
            missed: "skip".into(),
            catch_up_max: 1,
            next_fire_at: None,
            last_fired_at: None,
            last_task_id: None,
            last_task_status: None,
            last_error: None,
            created_at: Utc::now(),
            updated_at: Utc::now(),
        };
        let now = Utc::now();
        let FireStep::Unreadable { error, retry_at } = plan_fire(&row, now, Duration::from_secs(1))
        else {
            panic!("unreadable")
        };
        assert_eq!(retry_at, now + UNREADABLE_RETRY);
        assert!(error.contains("broken"), "{error}");
        let bad_policy = ScheduleRow {
            cron: "* * * * * *".into(),
            missed: "sometimes".into(),
            ..row
        };
        assert!(matches!(
            bad_policy.schedule(),
            Err(StoreError::Corrupt { .. })
        ));
    }

    #[test]
    fn every_tick_gets_its_key_and_the_schedules_task_fields() {
        let s = Schedule::builder("tick", "* * * * * *", "noop")
            .priority(7)
            .max_attempts(2)
            .build(&InputLimits::default())
            .unwrap();
        let stored = StoredDefinition::of(&s);
        let row = ScheduleRow {
            name: stored.name.into(),
            cron: stored.cron.into(),
            time_zone: stored.time_zone.into(),
            task_type: stored.task_type.into(),
            payload: stored.payload.clone(),
            priority: stored.priority,
            max_attempts: stored.max_attempts,
            enabled: true,
            missed: stored.missed.into(),
            catch_up_max: stored.catch_up_max,
            next_fire_at: Some("2026-06-01T12:00:01Z".parse().unwrap()),
            last_fired_at: Some("2026-06-01T12:00:00Z".parse().unwrap()),
            last_task_id: None,
            last_task_status: None,
            last_error: None,
            created_at: Utc::now(),
            updated_at: Utc::now(),
        };
        let now = "2026-06-01T12:00:02.300Z".parse().unwrap();
        let FireStep::Fire { ticks, next } = plan_fire(&row, now, Duration::from_secs(1)) else {
            panic!("fires")
        };
        let keys: Vec<_> = ticks
            .iter()
            .map(|(_, t)| t.idempotency_key.clone().unwrap())
            .collect();
        assert_eq!(
            keys,
            [
                "schedule:tick:2026-06-01T12:00:01.000Z",
                "schedule:tick:2026-06-01T12:00:02.000Z"
            ]
        );
        assert!(
            ticks
                .iter()
                .all(|(_, t)| t.priority == 7 && t.max_attempts == Some(2))
        );
        assert_eq!(next, Some("2026-06-01T12:00:03Z".parse().unwrap()));
        assert!(trigger_key(s.name(), now).starts_with("schedule:tick:manual:"));

        // Without its own max attempts, a schedule's ticks carry none: the enqueue resolves
        // them from the policies in force at the firing.
        let inherits = Schedule::builder("tick", "* * * * * *", "noop")
            .build(&InputLimits::default())
            .unwrap();
        assert_eq!(StoredDefinition::of(&inherits).max_attempts, None);
        let row = ScheduleRow {
            max_attempts: None,
            ..row
        };
        assert_eq!(row.schedule().unwrap().max_attempts(), None);
        let FireStep::Fire { ticks, .. } = plan_fire(&row, now, Duration::from_secs(1)) else {
            panic!("fires")
        };
        assert!(ticks.iter().all(|(_, t)| t.max_attempts.is_none()));
        assert_eq!(
            add_audit_params(&inherits, ScheduleWriteMode::Create)["max_attempts"],
            serde_json::Value::Null
        );
    }
}
