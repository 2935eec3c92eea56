//! What `leasehold-agent run --exit-when-idle` asks the store: the work of some task types as
//! it stands now, grouped by status and type, with the first ids of each group.
//!
//! ```text
//!   pending      queued · retry_wait · running · cancel_requested   (of the types; due or not)
//!   ended badly  dead · cancelled                                    (of the types; within a window)
//!   unserved     queued · retry_wait of other types no live agent serves
//! ```
//! The agent is idle when nothing is pending: a retry waiting out its backoff is pending, so
//! it is waited for. Unserved tasks never block idleness (no agent would ever finish them).
//! One read in database time: a claim or completion in flight is seen either before or after.

use std::time::Duration;

use crate::domain::{TaskId, TaskStatus, TaskType, ValidationError};

/// Most ids listed per group.
pub const MAX_IDLE_IDS: u32 = 1000;

/// Parameters of [`super::Store::task_idle_report`].
#[derive(Debug, Clone)]
pub struct IdleReportParams {
    /// The run's task types (the types the agent serves).
    pub task_types: Vec<TaskType>,
    /// Dead and cancelled tasks count only when created or finished within this long before
    /// now (database time); `None`: every one still stored.
    pub ended_within: Option<Duration>,
    /// Registry rows without a liveness deadline count as live while their heartbeat is
    /// younger than this (as in [`super::UnservedParams`]).
    pub legacy_stale_after: Duration,
    /// Ids listed per group (the first by id); counts are always complete.
    pub id_limit: u32,
}

impl IdleReportParams {
    pub fn validate(&self) -> Result<(), ValidationError> {
        if self.task_types.is_empty() {
            return Err(ValidationError::Invalid {
                field: "task_types",
                detail: "name at least one task type".into(),
            });
        }
        if !(1..=MAX_IDLE_IDS).contains(&self.id_limit) {
            return Err(ValidationError::Invalid {
                field: "id_limit",
                detail: format!("must be within 1..={MAX_IDLE_IDS}"),
            });
        }
        for (field, d) in [
            ("ended_within", self.ended_within),
            ("legacy_stale_after", Some(self.legacy_stale_after)),
        ] {
            if d.is_some_and(|d| d > Duration::from_secs(100 * 365 * 24 * 3600)) {
                return Err(ValidationError::Invalid {
                    field,
                    detail: "at most 100 years".into(),
                });
            }
        }
        Ok(())
    }
}

/// Tasks of one status and type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdleGroup {
    pub status: TaskStatus,
    pub task_type: TaskType,
    /// How many (all of them).
    pub count: u64,
    /// The first `id_limit` ids, ascending.
    pub ids: Vec<TaskId>,
}

/// The answer of [`super::Store::task_idle_report`]; each list ordered by status, then type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IdleReport {
    /// Of the types: queued, retry_wait, running or cancel_requested.
    pub pending: Vec<IdleGroup>,
    /// Of the types: dead or cancelled (within `ended_within`).
    pub ended_badly: Vec<IdleGroup>,
    /// Of other types no live agent serves: queued or retry_wait.
    pub unserved: Vec<IdleGroup>,
}

impl IdleReport {
    /// Nothing of the types waits or runs.
    pub fn is_idle(&self) -> bool {
        self.pending.is_empty()
    }

    /// Adds one group read from the database under its kind (`pending`, `ended_badly` or
    /// `unserved`); false for an unknown kind.
    pub(crate) fn push(&mut self, kind: &str, group: IdleGroup) -> bool {
        let list = match kind {
            "pending" => &mut self.pending,
            "ended_badly" => &mut self.ended_badly,
            "unserved" => &mut self.unserved,
            _ => return false,
        };
        list.push(group);
        true
    }
}
