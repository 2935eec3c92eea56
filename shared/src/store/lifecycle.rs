//! How an attempt ends, decided once for every store.
//!
//! Both stores read what a decision needs from the row (under the lock the write will hold),
//! call these pure functions, and write what they return; the checks that must be made on the
//! row the write changes (owner, epoch and status: the fence) stay predicates of the statement.
//!
//! ```text
//!   succeeded | partially_succeeded | cancelled      → that status, finished now
//!   failed, task cancel_requested                    → cancelled
//!   failed, retryable, attempts left, before deadline → retry_wait at now + backoff ± jitter
//!   failed, retryable, attempts left, past deadline  → dead (deadline_exceeded)
//!   failed otherwise                                  → dead
//!   snooze, task cancel_requested                    → cancelled
//!   snooze, snoozes used up (max_snoozes)             → dead (snooze_limit)
//!   snooze past the deadline                          → dead (deadline_exceeded)
//!   snooze otherwise                                  → queued at now + delay, attempt given
//!                                                       back, snoozes + 1
//!   lease expired: cancel_requested → cancelled; attempts left → retry_wait (epoch + 1, due
//!   now, lease_expired); none left → dead (lease_expired)
//! ```

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::params::{CompleteParams, Completion};
use crate::domain::Task;
use crate::domain::{Policy, PolicyScope, RetryPolicy, TaskError, TaskStatus, ValidationError};

/// Error code of a failure that was retryable but whose retry would start after the deadline.
pub const DEADLINE_EXCEEDED: &str = "deadline_exceeded";
/// Error code of an attempt ended by recovery of its expired lease.
pub const LEASE_EXPIRED: &str = "lease_expired";
/// Error code of a task dead-lettered because it snoozed more often than its type allows.
pub const SNOOZE_LIMIT: &str = "snooze_limit";

/// What a failure's or a snooze's decision reads from the held row.
#[derive(Debug, Clone, PartialEq)]
pub struct FailedAttempt {
    /// `running` or `cancel_requested`.
    pub status: TaskStatus,
    /// The attempt that failed (1-based).
    pub attempt: i64,
    pub max_attempts: i64,
    pub deadline: Option<DateTime<Utc>>,
    /// Snoozes the task took before this attempt.
    pub snoozes: i64,
}

/// The result column after an attempt ends.
#[derive(Debug, Clone, PartialEq)]
pub enum ResultWrite {
    /// The row's result stays.
    Keep,
    /// The result is replaced (by null when the handler returned none).
    Set(Option<serde_json::Value>),
}

/// How an attempt ends: what the row and the attempt row get.
#[derive(Debug, Clone, PartialEq)]
pub struct Settled {
    pub status: TaskStatus,
    /// When the retry is due (only for `retry_wait`; the row's `available_at` stays otherwise).
    pub retry_at: Option<DateTime<Utc>>,
    /// The error written to `last_error` and to the attempt row; `None` keeps `last_error` and
    /// leaves the attempt row's error empty.
    pub error: Option<TaskError>,
    pub result: ResultWrite,
    /// A snooze: the attempt is given back (`attempt − 1`) and `snoozes` grows by one.
    pub snoozed: bool,
}

impl Settled {
    /// Whether the task is finished (it gets `finished_at`), as opposed to waiting to run
    /// again (a retry or a snooze).
    pub fn finished(&self) -> bool {
        !matches!(self.status, TaskStatus::RetryWait | TaskStatus::Queued)
    }

    /// The outcome recorded for the attempt that `completion` ended this way: the
    /// completion's own, except for a snooze that ended the task (refused: `failed`, or
    /// `cancelled` when its cancel was requested).
    pub fn attempt_outcome(&self, completion: &Completion) -> &'static str {
        match (completion, self.status) {
            (Completion::Snooze { .. }, TaskStatus::Cancelled) => "cancelled",
            (Completion::Snooze { .. }, s) if s != TaskStatus::Queued => "failed",
            _ => completion.outcome_name(),
        }
    }

    fn ended(status: TaskStatus, error: Option<TaskError>, result: ResultWrite) -> Self {
        Self {
            status,
            retry_at: None,
            error,
            result,
            snoozed: false,
        }
    }
}

/// The end of an attempt whose outcome does not depend on the row: every completion but a
/// failure (`None` for a failure: see [`settle_failure`]).
pub fn settle_outcome(completion: &Completion) -> Option<Settled> {
    match completion {
        Completion::Succeeded { result } => Some(Settled::ended(
            TaskStatus::Succeeded,
            None,
            ResultWrite::Set(result.clone()),
        )),
        Completion::PartiallySucceeded { result } => Some(Settled::ended(
            TaskStatus::PartiallySucceeded,
            None,
            ResultWrite::Set(result.clone()),
        )),
        Completion::Cancelled => Some(Settled::ended(
            TaskStatus::Cancelled,
            None,
            ResultWrite::Keep,
        )),
        Completion::Failed { .. } | Completion::Snooze { .. } => None,
    }
}

/// A snooze of the held attempt: the task waits again until `now + delay` with its attempt
/// given back and one more snooze counted, unless its cancel was requested (cancelled), it has
/// used its `max_snoozes` (dead, `snooze_limit`) or it would wake after its deadline (dead,
/// `deadline_exceeded`).
pub fn settle_snooze(
    delay: Duration,
    held: &FailedAttempt,
    max_snoozes: u32,
    now: DateTime<Utc>,
) -> Settled {
    if held.status == TaskStatus::CancelRequested {
        return Settled::ended(TaskStatus::Cancelled, None, ResultWrite::Keep);
    }
    if held.snoozes >= i64::from(max_snoozes) {
        let error = TaskError::permanent(
            SNOOZE_LIMIT,
            format!(
                "the handler asked to snooze again after {} snoozes; the type allows {max_snoozes} (max_snoozes)",
                held.snoozes
            ),
        );
        return Settled::ended(TaskStatus::Dead, Some(error), ResultWrite::Keep);
    }
    let at = chrono::Duration::from_std(delay)
        .ok()
        .and_then(|d| now.checked_add_signed(d))
        .unwrap_or(DateTime::<Utc>::MAX_UTC);
    if let Some(deadline) = held.deadline
        && at >= deadline
    {
        let exceeded = TaskError::permanent(
            DEADLINE_EXCEEDED,
            format!("the snooze until {at} would end after the deadline {deadline}"),
        );
        return Settled::ended(TaskStatus::Dead, Some(exceeded), ResultWrite::Keep);
    }
    Settled {
        status: TaskStatus::Queued,
        retry_at: Some(at),
        error: None,
        result: ResultWrite::Keep,
        snoozed: true,
    }
}

/// The snooze cap of `task_type`: its own row's, the global row's where unset, the default
/// where neither is set.
pub fn max_snoozes_for(policies: &[Policy], task_type: &str) -> u32 {
    over_global(policies, task_type, Policy::max_snoozes_over)
}

/// `setting` of `task_type`'s own row (the global row when the type has none) over the global
/// row (an empty one when there is none).
fn over_global<T>(
    policies: &[Policy],
    task_type: &str,
    setting: impl Fn(&Policy, &Policy) -> T,
) -> T {
    let inherit = Policy::inherit(PolicyScope::Global);
    let global = policies
        .iter()
        .find(|p| p.scope == PolicyScope::Global)
        .unwrap_or(&inherit);
    let own = policies
        .iter()
        .find(|p| matches!(&p.scope, PolicyScope::Type(t) if t.as_str() == task_type))
        .unwrap_or(global);
    setting(own, global)
}

/// Decides one held attempt's completion: [`settle_outcome`], or [`settle_failure`] with the
/// type's retry policy, or [`settle_snooze`] with its snooze cap (`None` only for a completion
/// this function does not know).
pub fn settle_held(
    completion: &Completion,
    held: &FailedAttempt,
    task_type: &str,
    policies: &[Policy],
    now: DateTime<Utc>,
) -> Option<Settled> {
    settle_outcome(completion).or_else(|| match completion {
        Completion::Failed { error } => Some(settle_failure(
            error,
            held,
            &retry_policy_for(policies, task_type),
            now,
            fastrand::f64(),
        )),
        Completion::Snooze { delay } => Some(settle_snooze(
            *delay,
            held,
            max_snoozes_for(policies, task_type),
            now,
        )),
        _ => None,
    })
}

/// Whether deciding `completion` needs the held row (and the policies).
pub fn needs_row(completion: &Completion) -> bool {
    matches!(
        completion,
        Completion::Failed { .. } | Completion::Snooze { .. }
    )
}

/// The retry rule of DESIGN §4: a failure is retried with the type's backoff
/// (min(max, base × multiplier^(attempt−1)) ± jitter, from the database's `now`) while attempts
/// are left, the error is retryable and the retry would start before the deadline; else the
/// task is dead (`deadline_exceeded` when only the deadline stood in the way). A failure of a
/// task whose cancel was requested ends it cancelled. `sample` is a uniform draw in [0, 1)
/// that places the delay within its jitter.
pub fn settle_failure(
    error: &TaskError,
    held: &FailedAttempt,
    retry: &RetryPolicy,
    now: DateTime<Utc>,
    sample: f64,
) -> Settled {
    let error = error.clone().bounded();
    if held.status == TaskStatus::CancelRequested {
        return Settled::ended(TaskStatus::Cancelled, Some(error), ResultWrite::Keep);
    }
    if !(error.retryable && held.attempt < held.max_attempts) {
        return Settled::ended(TaskStatus::Dead, Some(error), ResultWrite::Keep);
    }
    let delay = retry_delay(retry, held.attempt, sample);
    let at = chrono::Duration::from_std(delay)
        .ok()
        .and_then(|d| now.checked_add_signed(d))
        .unwrap_or(DateTime::<Utc>::MAX_UTC);
    match held.deadline {
        Some(deadline) if at >= deadline => {
            let exceeded = TaskError::permanent(
                DEADLINE_EXCEEDED,
                format!(
                    "the retry due at {at} would start after the deadline {deadline}; last error {}: {}",
                    error.code, error.message
                ),
            )
            .bounded();
            Settled::ended(TaskStatus::Dead, Some(exceeded), ResultWrite::Keep)
        }
        _ => Settled {
            status: TaskStatus::RetryWait,
            retry_at: Some(at),
            error: Some(error),
            result: ResultWrite::Keep,
            snoozed: false,
        },
    }
}

/// The delay before the retry of failed attempt `attempt`: the nominal backoff scaled by
/// `1 + jitter × (2 × sample − 1)`, to the microsecond.
pub fn retry_delay(retry: &RetryPolicy, attempt: i64, sample: f64) -> Duration {
    let nominal_us = retry
        .nominal_delay(i32::try_from(attempt).unwrap_or(i32::MAX))
        .as_micros() as f64;
    let factor = 1.0 + retry.jitter * (2.0 * sample.clamp(0.0, 1.0) - 1.0);
    Duration::from_micros((nominal_us * factor).max(0.0) as u64)
}

/// The retry settings of `task_type`: its own row's, the global row's where unset, the
/// defaults where neither is set.
pub fn retry_policy_for(policies: &[Policy], task_type: &str) -> RetryPolicy {
    over_global(policies, task_type, Policy::retry_over)
}

/// Refuses a batch of completions naming one task twice, or carrying an invalid result,
/// before anything is read or written.
pub fn check_completions(batch: &[CompleteParams]) -> Result<(), ValidationError> {
    let mut seen = std::collections::HashSet::with_capacity(batch.len());
    for params in batch {
        params.validate()?;
        if !seen.insert(params.key.id) {
            return Err(ValidationError::Invalid {
                field: "completions",
                detail: format!("task {} appears twice in one batch", params.key.id),
            });
        }
    }
    Ok(())
}

/// Puts claimed tasks in the order of DESIGN §4: higher priority first, then the longest
/// due, then the oldest id.
pub fn claim_order(tasks: &mut [Task]) {
    tasks.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then(a.available_at.cmp(&b.available_at))
            .then(a.id.cmp(&b.id))
    });
}

/// What recovery reads from a lease that expired.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpiredLease {
    /// `running` or `cancel_requested`.
    pub status: TaskStatus,
    pub attempt: i64,
    pub max_attempts: i64,
    pub owner: String,
    pub epoch: i64,
    pub lease_until: DateTime<Utc>,
}

/// How recovery ends an expired lease.
#[derive(Debug, Clone, PartialEq)]
pub struct Recovery {
    pub status: TaskStatus,
    /// The row's epoch after: one more when the task will run again (the old holder is fenced
    /// before anyone claims it), the same when it ends here (the row says who held it last).
    pub epoch: i64,
    /// Written to `last_error`; `None` keeps it (a cancelled task keeps its last failure).
    pub error: Option<TaskError>,
    /// The attempt row's error.
    pub attempt_error: TaskError,
}

impl Recovery {
    /// Whether the task ends here (it gets `finished_at`).
    pub fn finished(&self) -> bool {
        self.status != TaskStatus::RetryWait
    }
}

/// The decision for a lease past its `lease_until` and grace. The task is due again at once (a
/// lost lease is the agent's failure, not the task's), but the attempt counts: with none left
/// it is dead. A task whose cancel was requested ends cancelled.
pub fn recover(lease: &ExpiredLease) -> Recovery {
    let attempt_error = TaskError::retryable(LEASE_EXPIRED, "lease expired and was recovered");
    if lease.status == TaskStatus::CancelRequested {
        return Recovery {
            status: TaskStatus::Cancelled,
            epoch: lease.epoch,
            error: None,
            attempt_error,
        };
    }
    let exhausted = lease.attempt >= lease.max_attempts;
    let error = TaskError::retryable(
        LEASE_EXPIRED,
        format!(
            "lease held by {} (epoch {}) expired at {} and was not renewed within the grace period",
            lease.owner, lease.epoch, lease.lease_until
        ),
    )
    .bounded();
    Recovery {
        status: if exhausted {
            TaskStatus::Dead
        } else {
            TaskStatus::RetryWait
        },
        epoch: if exhausted {
            lease.epoch
        } else {
            lease.epoch + 1
        },
        error: Some(error),
        attempt_error,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn policy() -> RetryPolicy {
        RetryPolicy {
            base: Duration::from_secs(10),
            multiplier: 2.0,
            max: Duration::from_secs(60),
            jitter: 0.5,
        }
    }

    fn held(status: TaskStatus, attempt: i64, max: i64, deadline: Option<&str>) -> FailedAttempt {
        FailedAttempt {
            status,
            attempt,
            max_attempts: max,
            deadline: deadline.map(at),
            snoozes: 0,
        }
    }

    #[test]
    fn failures_decide_as_design_section_4_says() {
        let now = at("2026-01-01T00:00:00Z");
        let retryable = TaskError::retryable("boom", "it broke");
        let permanent = TaskError::permanent("bad", "never");
        // (case, error, held, sample, status, retry due, error code written)
        type Case<'a> = (
            &'a str,
            &'a TaskError,
            FailedAttempt,
            f64,
            TaskStatus,
            Option<&'a str>,
            &'a str,
        );
        let cases: Vec<Case> = vec![
            (
                "first retry, no jitter draw",
                &retryable,
                held(TaskStatus::Running, 1, 3, None),
                0.5,
                TaskStatus::RetryWait,
                Some("2026-01-01T00:00:10Z"),
                "boom",
            ),
            (
                "second retry doubles, low jitter",
                &retryable,
                held(TaskStatus::Running, 2, 3, None),
                0.0,
                TaskStatus::RetryWait,
                Some("2026-01-01T00:00:10Z"),
                "boom",
            ),
            (
                "capped at max, high jitter",
                &retryable,
                held(TaskStatus::Running, 9, 10, None),
                1.0,
                TaskStatus::RetryWait,
                Some("2026-01-01T00:01:30Z"),
                "boom",
            ),
            (
                "last attempt",
                &retryable,
                held(TaskStatus::Running, 3, 3, None),
                0.5,
                TaskStatus::Dead,
                None,
                "boom",
            ),
            (
                "permanent error",
                &permanent,
                held(TaskStatus::Running, 1, 3, None),
                0.5,
                TaskStatus::Dead,
                None,
                "bad",
            ),
            (
                "cancel requested wins",
                &retryable,
                held(TaskStatus::CancelRequested, 1, 3, None),
                0.5,
                TaskStatus::Cancelled,
                None,
                "boom",
            ),
            (
                "retry before the deadline",
                &retryable,
                held(TaskStatus::Running, 1, 3, Some("2026-01-01T00:00:11Z")),
                0.5,
                TaskStatus::RetryWait,
                Some("2026-01-01T00:00:10Z"),
                "boom",
            ),
            (
                "retry at the deadline",
                &retryable,
                held(TaskStatus::Running, 1, 3, Some("2026-01-01T00:00:10Z")),
                0.5,
                TaskStatus::Dead,
                None,
                DEADLINE_EXCEEDED,
            ),
        ];
        for (case, error, held, sample, status, due, code) in cases {
            let s = settle_failure(error, &held, &policy(), now, sample);
            assert_eq!(s.status, status, "{case}");
            assert_eq!(s.retry_at, due.map(at), "{case}");
            assert_eq!(
                s.error.as_ref().map(|e| e.code.as_str()),
                Some(code),
                "{case}"
            );
            assert_eq!(s.result, ResultWrite::Keep, "{case}");
            assert_eq!(s.finished(), status != TaskStatus::RetryWait, "{case}");
        }
    }

    #[test]
    fn the_deadline_error_names_both_times_and_the_last_error() {
        let now = at("2026-01-01T00:00:00Z");
        let s = settle_failure(
            &TaskError::retryable("boom", "it broke"),
            &held(TaskStatus::Running, 1, 3, Some("2026-01-01T00:00:05Z")),
            &policy(),
            now,
            0.5,
        );
        let error = s.error.unwrap();
        assert!(!error.retryable);
        assert_eq!(
            error.message,
            "the retry due at 2026-01-01 00:00:10 UTC would start after the deadline \
             2026-01-01 00:00:05 UTC; last error boom: it broke"
        );
    }

    #[test]
    fn outcomes_other_than_failure_do_not_read_the_row() {
        let result = Some(serde_json::json!({"n": 1}));
        let cases = [
            (
                Completion::Succeeded {
                    result: result.clone(),
                },
                TaskStatus::Succeeded,
                ResultWrite::Set(result.clone()),
            ),
            (
                Completion::PartiallySucceeded { result: None },
                TaskStatus::PartiallySucceeded,
                ResultWrite::Set(None),
            ),
            (
                Completion::Cancelled,
                TaskStatus::Cancelled,
                ResultWrite::Keep,
            ),
        ];
        for (completion, status, write) in cases {
            let s = settle_outcome(&completion).unwrap();
            assert_eq!((s.status, s.result, s.error), (status, write, None));
        }
        let failed = Completion::Failed {
            error: TaskError::retryable("x", "y"),
        };
        assert!(settle_outcome(&failed).is_none());
    }

    #[test]
    fn jitter_stays_within_its_bounds() {
        let p = policy();
        for attempt in 1..8 {
            let (low, high) = p.delay_bounds(i32::try_from(attempt).unwrap());
            for sample in [0.0, 0.25, 0.5, 0.999] {
                let d = retry_delay(&p, attempt, sample);
                assert!(
                    d >= low && d <= high,
                    "attempt {attempt} sample {sample}: {d:?}"
                );
            }
        }
    }

    #[test]
    fn the_type_row_wins_over_the_global_row_field_by_field() {
        let mut global = Policy::inherit(PolicyScope::Global);
        global.retry_base = Some(Duration::from_secs(7));
        global.retry_max = Some(Duration::from_secs(70));
        let mut own = Policy::inherit(PolicyScope::Type("mail".parse().unwrap()));
        own.retry_base = Some(Duration::from_secs(3));
        let policies = [global, own];
        let mail = retry_policy_for(&policies, "mail");
        assert_eq!(
            (mail.base, mail.max),
            (Duration::from_secs(3), Duration::from_secs(70))
        );
        let other = retry_policy_for(&policies, "other");
        assert_eq!(other.base, Duration::from_secs(7));
        assert_eq!(retry_policy_for(&[], "x"), RetryPolicy::default());
    }

    #[test]
    fn recovery_fences_the_holder_only_when_the_task_runs_again() {
        let lease = |status, attempt| ExpiredLease {
            status,
            attempt,
            max_attempts: 2,
            owner: "a#1".into(),
            epoch: 4,
            lease_until: at("2026-01-01T00:00:00Z"),
        };
        let cases = [
            (
                lease(TaskStatus::Running, 1),
                TaskStatus::RetryWait,
                5,
                true,
            ),
            (lease(TaskStatus::Running, 2), TaskStatus::Dead, 4, true),
            (
                lease(TaskStatus::CancelRequested, 1),
                TaskStatus::Cancelled,
                4,
                false,
            ),
        ];
        for (lease, status, epoch, writes_error) in cases {
            let r = recover(&lease);
            assert_eq!((r.status, r.epoch), (status, epoch), "{lease:?}");
            assert_eq!(r.error.is_some(), writes_error, "{lease:?}");
            assert_eq!(r.attempt_error.code, LEASE_EXPIRED);
        }
        let r = recover(&lease(TaskStatus::Running, 1));
        assert_eq!(
            r.error.unwrap().message,
            "lease held by a#1 (epoch 4) expired at 2026-01-01 00:00:00 UTC and was not renewed \
             within the grace period"
        );
    }
}
