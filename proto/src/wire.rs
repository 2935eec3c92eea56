//! Enum mappings between the domain (`leasehold_shared`) and the wire (`leasehold.v1`), written
//! once for the agent and the console alike.
//!
//! Invariants: every match is exhaustive, with no wildcard arm, so a state added on either side
//! breaks the build here and nowhere else. Domain → wire cannot fail. Wire → domain gives `None`
//! for the UNSPECIFIED value (0) and for numbers this build does not know; each user turns that
//! into its own error (the agent's INVALID_ARGUMENT naming the field, the console's "the agent
//! sent …"). Message conversions are not here: they stay with their users.
//!
//! Only `TaskStatus` is a protobuf enum today; the other domain enums (attempt outcomes, roles,
//! audit results, lease states) travel as their `as_str` names.

use leasehold_shared::domain::TaskStatus;

use crate::v1;

/// A task status on the wire.
pub fn status_to_wire(status: TaskStatus) -> v1::TaskStatus {
    match status {
        TaskStatus::Queued => v1::TaskStatus::Queued,
        TaskStatus::Running => v1::TaskStatus::Running,
        TaskStatus::RetryWait => v1::TaskStatus::RetryWait,
        TaskStatus::CancelRequested => v1::TaskStatus::CancelRequested,
        TaskStatus::Succeeded => v1::TaskStatus::Succeeded,
        TaskStatus::PartiallySucceeded => v1::TaskStatus::PartiallySucceeded,
        TaskStatus::Cancelled => v1::TaskStatus::Cancelled,
        TaskStatus::Dead => v1::TaskStatus::Dead,
    }
}

/// A task status from the wire (an enum number); `None` for TASK_STATUS_UNSPECIFIED and for
/// numbers this build does not know.
pub fn status_from_wire(value: i32) -> Option<TaskStatus> {
    let wire = v1::TaskStatus::try_from(value).ok()?;
    Some(match wire {
        v1::TaskStatus::Unspecified => return None,
        v1::TaskStatus::Queued => TaskStatus::Queued,
        v1::TaskStatus::Running => TaskStatus::Running,
        v1::TaskStatus::RetryWait => TaskStatus::RetryWait,
        v1::TaskStatus::CancelRequested => TaskStatus::CancelRequested,
        v1::TaskStatus::Succeeded => TaskStatus::Succeeded,
        v1::TaskStatus::PartiallySucceeded => TaskStatus::PartiallySucceeded,
        v1::TaskStatus::Cancelled => TaskStatus::Cancelled,
        v1::TaskStatus::Dead => TaskStatus::Dead,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_round_trips() {
        for s in TaskStatus::ALL {
            assert_eq!(status_from_wire(status_to_wire(s) as i32), Some(s), "{s:?}");
        }
    }

    #[test]
    fn statuses_map_to_distinct_specified_wire_values() {
        let mut seen: Vec<i32> = TaskStatus::ALL
            .iter()
            .map(|s| status_to_wire(*s) as i32)
            .collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), TaskStatus::ALL.len());
        assert!(!seen.contains(&(v1::TaskStatus::Unspecified as i32)));
    }

    #[test]
    fn unspecified_and_unknown_numbers_give_none() {
        assert_eq!(status_from_wire(0), None);
        assert_eq!(status_from_wire(99), None);
        assert_eq!(status_from_wire(-1), None);
        assert_eq!(status_from_wire(i32::MAX), None);
    }
}
