//! A task as stored, its attempts, progress counters, errors, and who acts on it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

use super::ids::{AgentId, LeaseEpoch, TaskId, TaskType};
use super::outcome::UnknownWord;
use super::status::TaskStatus;

/// One row of `tasks` (DESIGN §3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    pub id: TaskId,
    pub task_type: TaskType,
    pub payload: serde_json::Value,
    pub priority: i16,
    pub status: TaskStatus,
    pub available_at: DateTime<Utc>,
    pub deadline_at: Option<DateTime<Utc>>,
    pub timeout_ms: Option<i64>,
    pub attempt: i32,
    pub max_attempts: i32,
    pub lease_owner: Option<AgentId>,
    pub lease_epoch: LeaseEpoch,
    pub lease_until: Option<DateTime<Utc>>,
    pub heartbeat_at: Option<DateTime<Utc>>,
    pub idempotency_key: Option<String>,
    /// Tasks of one type sharing a key run at most the type's per-key limit at a time, and
    /// keys take turns (see `Policy::per_key_concurrency`).
    #[serde(default)]
    pub concurrency_key: Option<String>,
    pub progress: Option<Progress>,
    /// Times a handler snoozed the task (each gave its attempt back).
    #[serde(default)]
    pub snoozes: i32,
    /// The last checkpoint a holder saved: handed to the next attempt.
    #[serde(default)]
    pub checkpoint: Option<serde_json::Value>,
    /// When that checkpoint was saved (database time).
    #[serde(default)]
    pub checkpoint_at: Option<DateTime<Utc>>,
    pub result: Option<serde_json::Value>,
    pub last_error: Option<TaskError>,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub updated_at: DateTime<Utc>,
}

/// Counters a handler reports while it runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    #[serde(default)]
    pub total: u64,
    #[serde(default)]
    pub processed: u64,
    #[serde(default)]
    pub succeeded: u64,
    #[serde(default)]
    pub failed: u64,
    #[serde(default)]
    pub skipped: u64,
}

/// Why an attempt failed: a machine-readable code, a message for people, whether retrying can
/// help, and the trace that saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskError {
    pub code: String,
    pub message: String,
    pub retryable: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

/// Longest error code kept, in bytes.
pub const MAX_ERROR_CODE_LEN: usize = 64;
/// Longest error message kept, in bytes; longer ones are stored truncated, never refused.
pub const MAX_ERROR_MESSAGE_LEN: usize = 8 * 1024;

impl TaskError {
    /// A failure that may succeed on a later attempt.
    pub fn retryable(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
            retryable: true,
            trace_id: None,
        }
    }

    /// A failure no retry can fix.
    pub fn permanent(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
            retryable: false,
            trace_id: None,
        }
    }

    /// The error cut to what the database keeps: long codes and messages are truncated on a
    /// character boundary with a marker, so a huge error string can never fail a completion.
    pub fn bounded(mut self) -> Self {
        // PostgreSQL text and jsonb refuse NUL: keep the message, make the character visible.
        for field in [&mut self.code, &mut self.message] {
            if field.contains('\0') {
                *field = field.replace('\0', "\u{FFFD}");
            }
        }
        self.code = truncate_utf8(&self.code, MAX_ERROR_CODE_LEN);
        if self.code.is_empty() {
            self.code = "error".to_string();
        }
        if self.message.len() > MAX_ERROR_MESSAGE_LEN {
            let mut cut = truncate_utf8(&self.message, MAX_ERROR_MESSAGE_LEN - 32);
            cut.push_str(&format!(
                " …[{} bytes truncated]",
                self.message.len() - cut.len()
            ));
            self.message = cut;
        }
        if let Some(trace) = &self.trace_id {
            self.trace_id = Some(truncate_utf8(trace, 128));
        }
        self
    }
}

fn truncate_utf8(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// How one attempt ended, as kept in `task_attempts`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptOutcome {
    Succeeded,
    PartiallySucceeded,
    Failed,
    Cancelled,
    Released,
    LeaseExpired,
    /// The handler asked to run again later; the attempt did not count.
    Snoozed,
}

impl AttemptOutcome {
    /// The stored name.
    pub const fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Succeeded => "succeeded",
            AttemptOutcome::PartiallySucceeded => "partially_succeeded",
            AttemptOutcome::Failed => "failed",
            AttemptOutcome::Cancelled => "cancelled",
            AttemptOutcome::Released => "released",
            AttemptOutcome::LeaseExpired => "lease_expired",
            AttemptOutcome::Snoozed => "snoozed",
        }
    }

    /// Every outcome.
    pub const ALL: [AttemptOutcome; 7] = [
        AttemptOutcome::Succeeded,
        AttemptOutcome::PartiallySucceeded,
        AttemptOutcome::Failed,
        AttemptOutcome::Cancelled,
        AttemptOutcome::Released,
        AttemptOutcome::LeaseExpired,
        AttemptOutcome::Snoozed,
    ];

    /// Parses a stored name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.as_str() == s)
    }
}

impl fmt::Display for AttemptOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One row of `task_attempts`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    pub task_id: TaskId,
    pub epoch: LeaseEpoch,
    pub attempt: i32,
    pub agent: AgentId,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub outcome: AttemptOutcome,
    pub error: Option<TaskError>,
}

/// What an operator token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Watch and list.
    Viewer,
    /// Every action.
    Operator,
    /// Leasehold itself (maintenance, recovery).
    System,
}

impl Role {
    /// The stored name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::System => "system",
        }
    }

    /// Every role.
    pub const ALL: [Role; 3] = [Role::Viewer, Role::Operator, Role::System];
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = UnknownWord;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| UnknownWord {
                what: "role",
                word: super::ids::truncate_for_error(s),
                expected: "viewer, operator, system".to_string(),
            })
    }
}

/// Who performs an audited action: the token's name and its role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Actor {
    pub name: String,
    pub role: Role,
}

impl Actor {
    /// An operator identified by name.
    pub fn operator(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            role: Role::Operator,
        }
    }

    /// Leasehold itself.
    pub fn system() -> Self {
        Self {
            name: "leasehold".to_string(),
            role: Role::System,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_errors_are_truncated_not_refused() {
        let err = TaskError::retryable("c".repeat(500), "é".repeat(100_000)).bounded();
        assert_eq!(err.code.len(), MAX_ERROR_CODE_LEN);
        assert!(err.message.len() <= MAX_ERROR_MESSAGE_LEN);
        assert!(err.message.ends_with("bytes truncated]"));
    }

    #[test]
    fn empty_error_code_gets_a_name() {
        assert_eq!(TaskError::permanent("", "x").bounded().code, "error");
    }

    #[test]
    fn attempt_outcomes_round_trip() {
        for o in AttemptOutcome::ALL {
            assert_eq!(AttemptOutcome::parse(o.as_str()), Some(o));
        }
        assert_eq!(AttemptOutcome::parse("won"), None);
    }

    #[test]
    fn roles_round_trip_and_unknown_ones_are_refused() {
        for r in Role::ALL {
            assert_eq!(r.as_str().parse::<Role>(), Ok(r));
        }
        let e = "admin".parse::<Role>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown role \"admin\" (expected one of viewer, operator, system)"
        );
    }
}
