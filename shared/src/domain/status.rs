//! Task statuses and the state machine every store enforces (DESIGN §3).
//!
//! ```text
//! queued ──claim──▶ running ──ok──────────▶ succeeded | partially_succeeded
//!   ▲                 │ ├─fail, attempts left──▶ retry_wait ──due──▶ (claimable like queued)
//!   │                 │ ├─fail, none left / not retryable──▶ dead        (the dead-letter queue)
//!   │                 │ └─operator cancel──▶ cancel_requested ──holder stops──▶ cancelled
//!   │                 └─lease expired + grace──▶ retry_wait | dead | cancelled (recovery)
//!   └──── operator requeue (dead, cancelled, succeeded) ◀──────────────────────────────
//! ```
//!
//! Terminal: `succeeded`, `partially_succeeded`, `cancelled`, `dead`; only `requeue` leaves one.
//! [`TaskStatus::apply`] is the single table of legal moves; the SQL of each store operation
//! guards its `UPDATE` with exactly the statuses this table allows, and the conformance suite
//! checks the two agree for every (status, action) pair.
//!
//! When things fail: a holder write against a row that has moved on is *fenced* (an outcome,
//! see `store`), not a transition error; an operator action on a row in the wrong state is a
//! [`TransitionError`] and changes nothing.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Queued,
    Running,
    RetryWait,
    CancelRequested,
    Succeeded,
    PartiallySucceeded,
    Cancelled,
    Dead,
}

impl TaskStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [TaskStatus; 8] = [
        TaskStatus::Queued,
        TaskStatus::Running,
        TaskStatus::RetryWait,
        TaskStatus::CancelRequested,
        TaskStatus::Succeeded,
        TaskStatus::PartiallySucceeded,
        TaskStatus::Cancelled,
        TaskStatus::Dead,
    ];

    /// The name stored in the database and shown to users.
    pub const fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Queued => "queued",
            TaskStatus::Running => "running",
            TaskStatus::RetryWait => "retry_wait",
            TaskStatus::CancelRequested => "cancel_requested",
            TaskStatus::Succeeded => "succeeded",
            TaskStatus::PartiallySucceeded => "partially_succeeded",
            TaskStatus::Cancelled => "cancelled",
            TaskStatus::Dead => "dead",
        }
    }

    /// No further change but an operator requeue.
    pub const fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskStatus::Succeeded
                | TaskStatus::PartiallySucceeded
                | TaskStatus::Cancelled
                | TaskStatus::Dead
        )
    }

    /// Held under a lease by an agent (counts against concurrency limits).
    pub const fn is_leased(self) -> bool {
        matches!(self, TaskStatus::Running | TaskStatus::CancelRequested)
    }

    /// Waiting to be claimed once due.
    pub const fn is_claimable(self) -> bool {
        matches!(self, TaskStatus::Queued | TaskStatus::RetryWait)
    }

    /// The status after `action`, or why the action is not allowed from here.
    pub fn apply(self, action: TaskAction) -> Result<TaskStatus, TransitionError> {
        use TaskAction as A;
        use TaskStatus as S;
        let next = match (self, action) {
            (S::Queued | S::RetryWait, A::Claim) => S::Running,
            (S::Running | S::CancelRequested, A::Succeed) => S::Succeeded,
            (S::Running | S::CancelRequested, A::PartiallySucceed) => S::PartiallySucceeded,
            (S::Running, A::FailRetry) => S::RetryWait,
            (S::Running, A::FailDead) => S::Dead,
            // A holder that fails after an operator asked to cancel has stopped: cancelled.
            (S::CancelRequested, A::FailRetry | A::FailDead) => S::Cancelled,
            (S::Running | S::CancelRequested, A::AckCancel) => S::Cancelled,
            (S::Running, A::Release) => S::Queued,
            (S::CancelRequested, A::Release) => S::Cancelled,
            (S::Running, A::RecoverRetry) => S::RetryWait,
            (S::Running, A::RecoverDead) => S::Dead,
            (S::CancelRequested, A::RecoverRetry | A::RecoverDead) => S::Cancelled,
            (S::Queued | S::RetryWait, A::RequestCancel) => S::Cancelled,
            (S::Running | S::CancelRequested, A::RequestCancel) => S::CancelRequested,
            (S::Queued | S::RetryWait, A::ExpireDeadline) => S::Dead,
            (S::Succeeded | S::PartiallySucceeded | S::Cancelled | S::Dead, A::Requeue) => {
                S::Queued
            }
            // Due now; it keeps waiting in its status until a claim takes it.
            (S::Queued | S::RetryWait, A::RunNow) => self,
            // The row goes: any task no agent holds. `apply` gives the status it goes from.
            (from, A::Delete) if !from.is_leased() => from,
            (from, action) => return Err(TransitionError { from, action }),
        };
        Ok(next)
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A status name that is not one of [`TaskStatus::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "unknown task status {0:?} (expected one of queued, running, retry_wait, cancel_requested, succeeded, partially_succeeded, cancelled, dead)"
)]
pub struct UnknownStatus(pub String);

impl FromStr for TaskStatus {
    type Err = UnknownStatus;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TaskStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| UnknownStatus(super::ids::truncate_for_error(s)))
    }
}

/// Everything that moves a task from one status to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskAction {
    /// An agent takes a lease.
    Claim,
    /// The holder reports success.
    Succeed,
    /// The holder reports partial success.
    PartiallySucceed,
    /// The holder reports a failure and attempts are left.
    FailRetry,
    /// The holder reports a failure that is final (not retryable, or no attempts left).
    FailDead,
    /// The holder reports it stopped because cancellation was requested.
    AckCancel,
    /// The holder gives the lease back (graceful shutdown).
    Release,
    /// Recovery takes an expired lease; attempts are left.
    RecoverRetry,
    /// Recovery takes an expired lease; no attempts are left.
    RecoverDead,
    /// An operator cancels.
    RequestCancel,
    /// A waiting task's deadline passed.
    ExpireDeadline,
    /// An operator moves a finished task back to the queue.
    Requeue,
    /// An operator makes a waiting task (not yet due, or waiting to retry) due now.
    RunNow,
    /// An operator deletes a task no agent holds, with its attempts (audited; the row is gone).
    Delete,
}

impl TaskAction {
    /// Every action.
    pub const ALL: [TaskAction; 14] = [
        TaskAction::Claim,
        TaskAction::Succeed,
        TaskAction::PartiallySucceed,
        TaskAction::FailRetry,
        TaskAction::FailDead,
        TaskAction::AckCancel,
        TaskAction::Release,
        TaskAction::RecoverRetry,
        TaskAction::RecoverDead,
        TaskAction::RequestCancel,
        TaskAction::ExpireDeadline,
        TaskAction::Requeue,
        TaskAction::RunNow,
        TaskAction::Delete,
    ];

    /// The action's name in messages and audit rows.
    pub const fn as_str(self) -> &'static str {
        match self {
            TaskAction::Claim => "claim",
            TaskAction::Succeed => "succeed",
            TaskAction::PartiallySucceed => "partially_succeed",
            TaskAction::FailRetry => "fail_retry",
            TaskAction::FailDead => "fail_dead",
            TaskAction::AckCancel => "ack_cancel",
            TaskAction::Release => "release",
            TaskAction::RecoverRetry => "recover_retry",
            TaskAction::RecoverDead => "recover_dead",
            TaskAction::RequestCancel => "cancel",
            TaskAction::ExpireDeadline => "expire_deadline",
            TaskAction::Requeue => "requeue",
            TaskAction::RunNow => "run_now",
            TaskAction::Delete => "delete",
        }
    }
}

/// An action that is not allowed from the task's current status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("cannot {} a task that is {from}", action.as_str())]
pub struct TransitionError {
    pub from: TaskStatus,
    pub action: TaskAction,
}

#[cfg(test)]
mod tests {
    use super::*;
    use TaskAction as A;
    use TaskStatus as S;

    /// The whole table, written out: (from, action, Some(to)) or None for refused.
    fn expected(from: S, action: A) -> Option<S> {
        const TABLE: &[(S, A, S)] = &[
            (S::Queued, A::Claim, S::Running),
            (S::RetryWait, A::Claim, S::Running),
            (S::Running, A::Succeed, S::Succeeded),
            (S::CancelRequested, A::Succeed, S::Succeeded),
            (S::Running, A::PartiallySucceed, S::PartiallySucceeded),
            (
                S::CancelRequested,
                A::PartiallySucceed,
                S::PartiallySucceeded,
            ),
            (S::Running, A::FailRetry, S::RetryWait),
            (S::CancelRequested, A::FailRetry, S::Cancelled),
            (S::Running, A::FailDead, S::Dead),
            (S::CancelRequested, A::FailDead, S::Cancelled),
            (S::Running, A::AckCancel, S::Cancelled),
            (S::CancelRequested, A::AckCancel, S::Cancelled),
            (S::Running, A::Release, S::Queued),
            (S::CancelRequested, A::Release, S::Cancelled),
            (S::Running, A::RecoverRetry, S::RetryWait),
            (S::Running, A::RecoverDead, S::Dead),
            (S::CancelRequested, A::RecoverRetry, S::Cancelled),
            (S::CancelRequested, A::RecoverDead, S::Cancelled),
            (S::Queued, A::RequestCancel, S::Cancelled),
            (S::RetryWait, A::RequestCancel, S::Cancelled),
            (S::Running, A::RequestCancel, S::CancelRequested),
            (S::CancelRequested, A::RequestCancel, S::CancelRequested),
            (S::Queued, A::ExpireDeadline, S::Dead),
            (S::RetryWait, A::ExpireDeadline, S::Dead),
            (S::Succeeded, A::Requeue, S::Queued),
            (S::PartiallySucceeded, A::Requeue, S::Queued),
            (S::Cancelled, A::Requeue, S::Queued),
            (S::Dead, A::Requeue, S::Queued),
            // Run now: due at once, still waiting.
            (S::Queued, A::RunNow, S::Queued),
            (S::RetryWait, A::RunNow, S::RetryWait),
            // Delete: the row goes, from any status no agent holds.
            (S::Queued, A::Delete, S::Queued),
            (S::RetryWait, A::Delete, S::RetryWait),
            (S::Succeeded, A::Delete, S::Succeeded),
            (S::PartiallySucceeded, A::Delete, S::PartiallySucceeded),
            (S::Cancelled, A::Delete, S::Cancelled),
            (S::Dead, A::Delete, S::Dead),
        ];
        TABLE
            .iter()
            .find(|(f, a, _)| *f == from && *a == action)
            .map(|(_, _, to)| *to)
    }

    #[test]
    fn every_pair_matches_the_table() {
        for from in S::ALL {
            for action in A::ALL {
                let got = from.apply(action);
                match expected(from, action) {
                    Some(to) => assert_eq!(got, Ok(to), "{from} --{}-->", action.as_str()),
                    None => assert_eq!(
                        got,
                        Err(TransitionError { from, action }),
                        "{from} --{}--> must be refused",
                        action.as_str()
                    ),
                }
            }
        }
    }

    #[test]
    fn only_requeue_leaves_a_terminal_state() {
        // (Delete removes the row: it leaves no state at all.)
        for from in S::ALL.into_iter().filter(|s| s.is_terminal()) {
            for action in A::ALL {
                assert_eq!(
                    from.apply(action).is_ok(),
                    matches!(action, A::Requeue | A::Delete),
                    "{from} {action:?}"
                );
            }
        }
    }

    #[test]
    fn status_names_round_trip() {
        for status in S::ALL {
            assert_eq!(status.as_str().parse::<S>(), Ok(status));
        }
        assert!("paused".parse::<S>().is_err());
    }

    #[test]
    fn transition_errors_read_plainly() {
        let err = S::Succeeded.apply(A::RequestCancel).err();
        assert_eq!(
            err.map(|e| e.to_string()),
            Some("cannot cancel a task that is succeeded".to_string())
        );
    }
}
