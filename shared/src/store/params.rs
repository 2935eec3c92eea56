//! Inputs of store operations: one `…Params` struct per method, validated before any
//! statement runs.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::domain::policy::MAX_POLICY_DURATION;
use crate::domain::task::MAX_ERROR_CODE_LEN;
use crate::domain::unique::check_unique_for;
use crate::domain::validate::{
    MAX_ATTEMPTS_LIMIT, MAX_BULK_ENQUEUE, MAX_CLAIM_BATCH, MAX_DELAY_MS, MAX_PAGE_SIZE,
    MAX_TIMEOUT_MS, check_concurrency_key, check_idempotency_key, check_range, check_result,
    payload_text,
};
use crate::domain::{
    Actor, AgentId, AgentState, AuditResult, InputLimits, LeaseEpoch, LeaseKey, OnConflict,
    PolicyPatch, PolicyScope, Progress, TaskError, TaskId, TaskStatus, TaskType, ValidationError,
};

/// A task to enqueue. Build with [`NewTask::new`] and the `with_…` methods.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewTask {
    pub task_type: TaskType,
    pub payload: serde_json::Value,
    /// Higher runs first.
    pub priority: i16,
    /// Due after this delay, measured from the database's `now()`.
    pub delay: Option<Duration>,
    /// Due at this time (exclusive with `delay`).
    pub run_at: Option<DateTime<Utc>>,
    /// Dead-lettered with `deadline_exceeded` if not finished by then.
    pub deadline: Option<DateTime<Utc>>,
    /// Max run time of one attempt (None: the type's policy).
    pub timeout: Option<Duration>,
    /// Attempts before the task is dead-lettered (None: the type's policy, else the global
    /// policy's, else [`crate::domain::policy::DEFAULT_MAX_ATTEMPTS`], resolved by the store at
    /// enqueue).
    pub max_attempts: Option<i32>,
    /// Enqueueing the same key again returns the existing task (or, with `on_conflict`,
    /// replaces or debounces it while it waits).
    pub idempotency_key: Option<String>,
    /// What an enqueue does when its idempotency key is held by an existing task (needs an
    /// idempotency key unless `skip`).
    #[serde(default)]
    pub on_conflict: OnConflict,
    /// The key blocks new tasks only while its holder is unfinished or finished less than
    /// this long ago (database time); after that the holder gives the key up and the enqueue
    /// creates a new task. `None`: a finished holder keeps its key while its row exists.
    /// Whole milliseconds, 1 ms..=365 days; needs an idempotency key.
    #[serde(default)]
    pub unique_for: Option<Duration>,
    /// The task's concurrency key (a tenant, an account): keys of a type take turns, and a
    /// type's per-key limit caps the running tasks of each key.
    #[serde(default)]
    pub concurrency_key: Option<String>,
}

impl NewTask {
    /// A task of `task_type` with `payload` and defaults for everything else.
    pub fn new(task_type: TaskType, payload: serde_json::Value) -> Self {
        Self {
            task_type,
            payload,
            priority: 0,
            delay: None,
            run_at: None,
            deadline: None,
            timeout: None,
            max_attempts: None,
            idempotency_key: None,
            on_conflict: OnConflict::Skip,
            unique_for: None,
            concurrency_key: None,
        }
    }

    pub fn with_priority(mut self, priority: i16) -> Self {
        self.priority = priority;
        self
    }

    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    pub fn with_run_at(mut self, at: DateTime<Utc>) -> Self {
        self.run_at = Some(at);
        self
    }

    pub fn with_deadline(mut self, at: DateTime<Utc>) -> Self {
        self.deadline = Some(at);
        self
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    pub fn with_max_attempts(mut self, attempts: i32) -> Self {
        self.max_attempts = Some(attempts);
        self
    }

    pub fn with_idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    pub fn with_concurrency_key(mut self, key: impl Into<String>) -> Self {
        self.concurrency_key = Some(key.into());
        self
    }

    /// What to do when the idempotency key is held (see [`OnConflict`]).
    pub fn with_on_conflict(mut self, mode: OnConflict) -> Self {
        self.on_conflict = mode;
        self
    }

    /// Let a holder of the idempotency key that finished `window` ago or longer give the key
    /// up to this enqueue.
    pub fn with_unique_for(mut self, window: Duration) -> Self {
        self.unique_for = Some(window);
        self
    }

    /// Checks every field and returns the values as bound to the insert statement.
    pub fn validate(&self, limits: &InputLimits) -> Result<ValidTask, ValidationError> {
        let payload = payload_text(&self.payload, limits)?;
        if let Some(attempts) = self.max_attempts {
            check_range("max_attempts", attempts, 1..=MAX_ATTEMPTS_LIMIT)?;
        }
        if let Some(key) = &self.idempotency_key {
            check_idempotency_key(key)?;
        }
        if let Some(key) = &self.concurrency_key {
            check_concurrency_key(key)?;
        }
        if self.idempotency_key.is_none() && self.on_conflict != OnConflict::Skip {
            return Err(ValidationError::Invalid {
                field: "on_conflict",
                detail: format!("{} needs an idempotency key", self.on_conflict),
            });
        }
        let unique_for_ms = match self.unique_for {
            Some(_) if self.idempotency_key.is_none() => {
                return Err(ValidationError::Invalid {
                    field: "unique_for",
                    detail: "needs an idempotency key".into(),
                });
            }
            Some(window) => Some(check_unique_for(window)?),
            None => None,
        };
        if self.delay.is_some() && self.run_at.is_some() {
            return Err(ValidationError::Invalid {
                field: "run_at",
                detail: "give either a delay or a run-at time, not both".into(),
            });
        }
        // Said in days, as a person gives them, not as the milliseconds on the wire.
        let delay_ms = match self.delay {
            Some(d) => check_range("delay_ms", duration_ms(d), 0..=MAX_DELAY_MS).map_err(|_| {
                ValidationError::OutOfRange {
                    field: "delay",
                    detail: format!("at most {} days", MAX_DELAY_MS / 86_400_000),
                }
            })?,
            None => 0,
        };
        let timeout_ms = match self.timeout {
            Some(t) => Some(
                check_range("timeout_ms", duration_ms(t), 1..=MAX_TIMEOUT_MS).map_err(|_| {
                    ValidationError::OutOfRange {
                        field: "timeout",
                        detail: format!("give 1ms to {} days", MAX_TIMEOUT_MS / 86_400_000),
                    }
                })?,
            ),
            None => None,
        };
        if let (Some(deadline), Some(run_at)) = (self.deadline, self.run_at)
            && deadline <= run_at
        {
            return Err(ValidationError::Invalid {
                field: "deadline",
                detail: format!("deadline {deadline} is not after run-at {run_at}"),
            });
        }
        Ok(ValidTask {
            task_type: self.task_type.as_str().to_string(),
            payload,
            priority: self.priority,
            delay_ms,
            run_at: self.run_at,
            deadline: self.deadline,
            timeout_ms,
            max_attempts: self.max_attempts,
            idempotency_key: self.idempotency_key.clone(),
            concurrency_key: self.concurrency_key.clone(),
            on_conflict: self.on_conflict,
            unique_for_ms,
        })
    }
}

/// A [`NewTask`] that passed validation, in the shape the insert statements bind.
#[derive(Debug, Clone)]
pub struct ValidTask {
    pub task_type: String,
    pub payload: String,
    pub priority: i16,
    pub delay_ms: i64,
    pub run_at: Option<DateTime<Utc>>,
    pub deadline: Option<DateTime<Utc>>,
    pub timeout_ms: Option<i64>,
    /// None: the store binds NULL and the statement takes the type's policy value.
    pub max_attempts: Option<i32>,
    pub idempotency_key: Option<String>,
    pub concurrency_key: Option<String>,
    pub on_conflict: OnConflict,
    pub unique_for_ms: Option<i64>,
}

impl ValidTask {
    /// A skip without `unique_for`: the one-statement insert-or-find (and the bulk
    /// statement) settle it; anything else takes the locking path.
    pub fn is_plain(&self) -> bool {
        self.on_conflict == OnConflict::Skip && self.unique_for_ms.is_none()
    }
}

/// Validates a bulk enqueue: its size and every task.
pub fn validate_bulk(
    tasks: &[NewTask],
    limits: &InputLimits,
) -> Result<Vec<ValidTask>, ValidationError> {
    if tasks.len() > MAX_BULK_ENQUEUE {
        return Err(ValidationError::OutOfRange {
            field: "tasks",
            detail: format!(
                "{} tasks in one call, above {MAX_BULK_ENQUEUE}",
                tasks.len()
            ),
        });
    }
    tasks.iter().map(|t| t.validate(limits)).collect()
}

pub(crate) fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn check_ttl(field: &'static str, d: Duration) -> Result<(), ValidationError> {
    if d < Duration::from_millis(100) || d > MAX_POLICY_DURATION {
        return Err(ValidationError::OutOfRange {
            field,
            detail: format!("{} ms is not within 100 ms..=7 days", d.as_millis()),
        });
    }
    Ok(())
}

/// Claim up to `batch` due tasks of `task_types` for `owner`.
#[derive(Debug, Clone)]
pub struct ClaimParams {
    pub owner: AgentId,
    pub task_types: Vec<TaskType>,
    pub batch: u32,
    pub lease_ttl: Duration,
}

impl ClaimParams {
    pub fn validate(&self) -> Result<(), ValidationError> {
        check_range("batch", self.batch, 1..=MAX_CLAIM_BATCH)?;
        check_ttl("lease_ttl", self.lease_ttl)
    }
}

/// Renew these leases of `owner` for another `lease_ttl` (database time).
#[derive(Debug, Clone)]
pub struct RenewParams {
    pub owner: AgentId,
    pub leases: Vec<(TaskId, LeaseEpoch)>,
    pub lease_ttl: Duration,
    /// Also push `owner`'s registry liveness deadline (`agents.alive_until`) to database
    /// `now()` + this, in the same statement: the heartbeat connection's proof of life, sent
    /// with no leases too. `None` leaves the registry row alone. At most 7 days.
    pub alive_for: Option<Duration>,
}

impl RenewParams {
    pub fn validate(&self) -> Result<(), ValidationError> {
        if let Some(alive_for) = self.alive_for {
            check_duration("alive_for", alive_for)?;
        }
        check_ttl("lease_ttl", self.lease_ttl)
    }
}

/// Record a holder's progress.
#[derive(Debug, Clone)]
pub struct ProgressParams {
    pub key: LeaseKey,
    pub progress: Progress,
}

/// Save a holder's checkpoint (fenced): the next attempt of the task receives it.
#[derive(Debug, Clone)]
pub struct CheckpointParams {
    pub key: LeaseKey,
    pub checkpoint: serde_json::Value,
}

/// Largest checkpoint accepted, as JSON text (64 KiB).
pub const MAX_CHECKPOINT_BYTES: usize = 65_536;

impl CheckpointParams {
    pub fn validate(&self) -> Result<(), ValidationError> {
        let size = crate::domain::validate::db_text_len(&self.checkpoint);
        if size > MAX_CHECKPOINT_BYTES {
            return Err(ValidationError::OutOfRange {
                field: "checkpoint",
                detail: format!("{size} bytes of JSON is above {MAX_CHECKPOINT_BYTES}"),
            });
        }
        if crate::domain::validate::has_nul(&self.checkpoint) {
            return Err(ValidationError::Invalid {
                field: "checkpoint",
                detail: "contains a NUL character, which PostgreSQL cannot store".into(),
            });
        }
        Ok(())
    }
}

/// How the holder says an attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Completion {
    Succeeded {
        result: Option<serde_json::Value>,
    },
    PartiallySucceeded {
        result: Option<serde_json::Value>,
    },
    /// Retried with backoff while attempts are left and the error is retryable; else dead.
    Failed {
        error: TaskError,
    },
    /// The holder stopped because cancellation was requested.
    Cancelled,
    /// Run again after `delay` without using an attempt (the handler's `Outcome::Snooze`): the
    /// task waits again, its attempt count as before the claim, one more snooze counted; past
    /// the type's `max_snoozes` it is dead (`snooze_limit`).
    Snooze {
        delay: std::time::Duration,
    },
}

/// Longest snooze a handler may ask for (365 days).
pub const MAX_SNOOZE: std::time::Duration = std::time::Duration::from_secs(365 * 24 * 3600);

impl Completion {
    pub(crate) fn outcome_name(&self) -> &'static str {
        match self {
            Completion::Succeeded { .. } => "succeeded",
            Completion::PartiallySucceeded { .. } => "partially_succeeded",
            Completion::Failed { .. } => "failed",
            Completion::Cancelled => "cancelled",
            Completion::Snooze { .. } => "snoozed",
        }
    }
}

/// End an attempt: the holder's final write.
#[derive(Debug, Clone)]
pub struct CompleteParams {
    pub key: LeaseKey,
    pub completion: Completion,
}

impl CompleteParams {
    pub fn validate(&self) -> Result<(), ValidationError> {
        match &self.completion {
            Completion::Succeeded { result: Some(r) }
            | Completion::PartiallySucceeded { result: Some(r) } => check_result(r),
            Completion::Snooze { delay } if *delay > MAX_SNOOZE => {
                Err(ValidationError::OutOfRange {
                    field: "snooze",
                    detail: format!("a snooze of {} s is above 365 days", delay.as_secs()),
                })
            }
            _ => Ok(()),
        }
    }
}

/// Give leases back (graceful shutdown) so another agent starts them at once.
#[derive(Debug, Clone)]
pub struct ReleaseParams {
    pub owner: AgentId,
    pub leases: Vec<(TaskId, LeaseEpoch)>,
}

/// An operator cancels a task.
#[derive(Debug, Clone)]
pub struct CancelParams {
    pub id: TaskId,
    pub actor: Actor,
}

/// An operator requeues a finished task.
#[derive(Debug, Clone)]
pub struct RequeueParams {
    pub id: TaskId,
    pub actor: Actor,
}

/// An operator makes a waiting task (queued but not yet due, or waiting to retry) due now.
#[derive(Debug, Clone)]
pub struct RunNowParams {
    pub id: TaskId,
    pub actor: Actor,
}

/// An operator deletes a task no agent holds, with its attempts.
#[derive(Debug, Clone)]
pub struct DeleteTaskParams {
    pub id: TaskId,
    pub actor: Actor,
}

/// Count the tasks in each state the console's Tasks view has a tab for, under the same
/// filter as [`TaskListParams`] ([`crate::Store::task_count_states`]).
#[derive(Debug, Clone, Default)]
pub struct TaskCountParams {
    pub task_type: Option<TaskType>,
    /// Case-insensitive text in the type, the error code or the error message.
    pub text: Option<String>,
    /// Exactly this error code.
    pub error_code: Option<String>,
}

impl TaskCountParams {
    pub fn validate(&self) -> Result<(), ValidationError> {
        TaskListParams {
            task_type: self.task_type.clone(),
            text: self.text.clone(),
            error_code: self.error_code.clone(),
            limit: 1,
            ..TaskListParams::default()
        }
        .validate()
    }
}

/// Which dead tasks a bulk requeue takes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeadFilter {
    pub task_type: Option<TaskType>,
    pub error_code: Option<String>,
    /// Died at or after.
    pub since: Option<DateTime<Utc>>,
    /// Died before.
    pub until: Option<DateTime<Utc>>,
}

impl DeadFilter {
    pub fn validate(&self) -> Result<(), ValidationError> {
        if let Some(code) = &self.error_code
            && (code.is_empty() || code.len() > 64)
        {
            return Err(ValidationError::Invalid {
                field: "error_code",
                detail: "must be 1-64 bytes".into(),
            });
        }
        if let (Some(since), Some(until)) = (self.since, self.until)
            && since >= until
        {
            return Err(ValidationError::Invalid {
                field: "since",
                detail: format!("since {since} is not before until {until}"),
            });
        }
        Ok(())
    }
}

/// Default number of ids a dry run over dead letters lists.
pub const DEFAULT_DEAD_IDS_PAGE: u32 = 100;

/// The page of matching ids a dry run over dead letters lists: newest first, ids below
/// `before` (`None`: from the newest), at most `limit` (1..=[`MAX_PAGE_SIZE`]). A real run
/// lists none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadIdsPage {
    pub before: Option<TaskId>,
    pub limit: u32,
}

impl Default for DeadIdsPage {
    fn default() -> Self {
        Self {
            before: None,
            limit: DEFAULT_DEAD_IDS_PAGE,
        }
    }
}

impl DeadIdsPage {
    pub fn validate(&self) -> Result<(), ValidationError> {
        check_range("limit", self.limit, 1..=MAX_PAGE_SIZE)?;
        if let Some(before) = self.before
            && before.0 < 1
        {
            return Err(ValidationError::Invalid {
                field: "before",
                detail: format!("{} is not a task id", before.0),
            });
        }
        Ok(())
    }
}

/// Requeue every dead task matching `filter`; when `dry_run`, change nothing and count them
/// and list a `page` of their ids.
#[derive(Debug, Clone)]
pub struct RequeueDeadParams {
    pub filter: DeadFilter,
    pub dry_run: bool,
    pub page: DeadIdsPage,
    pub actor: Actor,
}

impl RequeueDeadParams {
    pub fn validate(&self) -> Result<(), ValidationError> {
        self.filter.validate()?;
        self.page.validate()
    }
}

/// Delete every dead task matching `filter`, with its attempts; when `dry_run`, change
/// nothing and count them and list a `page` of their ids.
#[derive(Debug, Clone)]
pub struct PurgeDeadParams {
    pub filter: DeadFilter,
    pub dry_run: bool,
    pub page: DeadIdsPage,
    pub actor: Actor,
}

impl PurgeDeadParams {
    pub fn validate(&self) -> Result<(), ValidationError> {
        self.filter.validate()?;
        self.page.validate()
    }
}

/// Take leases whose `lease_until + grace` has passed.
#[derive(Debug, Clone)]
pub struct RecoverParams {
    pub grace: Duration,
    pub limit: u32,
    /// Take nothing when the database clock reads later than this: the caller's bound on what
    /// the clock can read by now (its last reading plus the monotonic time since, plus a
    /// tolerance). A clock that jumped forward since that reading then revokes nothing, even
    /// when the jump lands between the reading and this statement. `None`: no bound.
    pub clock_bound: Option<DateTime<Utc>>,
}

impl RecoverParams {
    pub fn validate(&self) -> Result<(), ValidationError> {
        check_duration("grace", self.grace)?;
        check_range("limit", self.limit, 1..=MAX_CLAIM_BATCH).map(drop)
    }
}

fn check_duration(field: &'static str, d: Duration) -> Result<(), ValidationError> {
    if d > MAX_POLICY_DURATION {
        return Err(ValidationError::OutOfRange {
            field,
            detail: format!("{} s is above 7 days", d.as_secs()),
        });
    }
    Ok(())
}

/// Dead-letter waiting tasks whose deadline passed.
#[derive(Debug, Clone)]
pub struct ExpireDeadlinesParams {
    pub limit: u32,
}

impl ExpireDeadlinesParams {
    pub fn validate(&self) -> Result<(), ValidationError> {
        check_range("limit", self.limit, 1..=MAX_CLAIM_BATCH).map(drop)
    }
}

/// Load shedding: cancel up to `limit` waiting tasks of shedding types (reason `shed`).
#[derive(Debug, Clone, Copy)]
pub struct ShedParams {
    pub limit: u32,
}

impl ShedParams {
    pub fn validate(&self) -> Result<(), ValidationError> {
        check_range("limit", self.limit, 1..=MAX_CLAIM_BATCH).map(drop)
    }
}

/// The leader's move of the circuit breakers, audited as an action of `agent`.
#[derive(Debug, Clone)]
pub struct BreakerTickParams {
    pub agent: AgentId,
}

/// List leases whose last renewal is older than `threshold`.
/// Longest retention accepted.
pub const MAX_RETENTION: Duration = Duration::from_secs(3650 * 24 * 3600);

/// Retention: delete finished tasks (and their attempts) older than `older_than`.
#[derive(Debug, Clone)]
pub struct PurgeParams {
    /// Which finished statuses to delete (terminal statuses only).
    pub statuses: Vec<TaskStatus>,
    /// Age of `finished_at` (database time) beyond which a task is deleted.
    pub older_than: Duration,
    /// Most rows deleted by one call.
    pub limit: u32,
}

impl PurgeParams {
    pub fn validate(&self) -> Result<(), ValidationError> {
        if let Some(s) = self.statuses.iter().find(|s| !s.is_terminal()) {
            return Err(ValidationError::Invalid {
                field: "statuses",
                detail: format!("{s} is not a finished status"),
            });
        }
        if self.older_than > MAX_RETENTION {
            return Err(ValidationError::OutOfRange {
                field: "older_than",
                detail: format!("{} s is above 10 years", self.older_than.as_secs()),
            });
        }
        check_range("limit", self.limit, 1..=MAX_CLAIM_BATCH).map(drop)
    }
}

/// Dead-letter waiting tasks whose type no live agent serves. An agent is live while it is
/// not stopped and its own liveness deadline (`agents.alive_until`, which it sets from its own
/// lease TTL and grace at registration and on every heartbeat) is in the future: the caller's
/// timings never judge another agent.
#[derive(Debug, Clone)]
pub struct UnservedParams {
    /// How long a task must have been due before it is judged unserved.
    pub due_for: Duration,
    /// Only for registry rows without a liveness deadline (written by agents from before it
    /// existed): such an agent is live while its registry heartbeat is younger than this.
    pub legacy_stale_after: Duration,
    pub limit: u32,
}

impl UnservedParams {
    pub fn validate(&self) -> Result<(), ValidationError> {
        check_duration("due_for", self.due_for)?;
        check_duration("legacy_stale_after", self.legacy_stale_after)?;
        check_range("limit", self.limit, 1..=MAX_CLAIM_BATCH).map(drop)
    }
}

/// Most suspect leases one read returns.
pub const MAX_SUSPECT_LIMIT: u32 = 10_000;

/// Leases whose last renewal is older than `threshold` (database time), oldest renewal first,
/// at most `limit` (1..=[`MAX_SUSPECT_LIMIT`]).
#[derive(Debug, Clone)]
pub struct SuspectParams {
    pub threshold: Duration,
    pub limit: u32,
}

impl SuspectParams {
    pub fn validate(&self) -> Result<(), ValidationError> {
        check_duration("threshold", self.threshold)?;
        check_range("limit", self.limit, 1..=MAX_SUSPECT_LIMIT).map(drop)
    }
}

/// Most successful runs per type [`RecentRunsParams`] may ask for.
pub const MAX_RECENT_RUNS: u32 = 10_000;
/// Most finished tasks [`RecentRunsParams`] may look through.
pub const MAX_RECENT_SCAN: u32 = 1_000_000;

/// The run times of the newest successful runs of some types, newest first: at most
/// `per_type` of each, found among the newest `scan` finished tasks (so the read is bounded
/// however large the history is). For the slow-compared-with-history rule.
#[derive(Debug, Clone)]
pub struct RecentRunsParams {
    pub task_types: Vec<TaskType>,
    pub per_type: u32,
    pub scan: u32,
}

impl RecentRunsParams {
    pub fn validate(&self) -> Result<(), ValidationError> {
        check_range("per_type", self.per_type, 1..=MAX_RECENT_RUNS)?;
        check_range("scan", self.scan, 1..=MAX_RECENT_SCAN).map(drop)
    }
}

/// Change a policy row.
#[derive(Debug, Clone)]
pub struct PolicySetParams {
    pub scope: PolicyScope,
    pub patch: PolicyPatch,
    pub actor: Actor,
}

/// Register a starting agent process; the store gives it its per-start id.
#[derive(Debug, Clone)]
pub struct AgentRegisterParams {
    /// `--id`, default the hostname.
    pub name: String,
    pub host: String,
    pub pid: u32,
    pub grpc_address: Option<String>,
    pub version: String,
    pub task_types: Vec<TaskType>,
    pub local_concurrency: u32,
    /// The agent's liveness deadline starts at database `now()` + this (`agents.alive_until`;
    /// the agent's own lease TTL + grace), until its heartbeat pushes it on. At most 7 days.
    pub alive_for: Duration,
}

impl AgentRegisterParams {
    pub fn validate(&self) -> Result<(), ValidationError> {
        crate::domain::ids::validate_agent_name(&self.name)?;
        check_duration("alive_for", self.alive_for)
    }
}

/// An agent's registry heartbeat.
#[derive(Debug, Clone)]
pub struct AgentHeartbeatParams {
    pub id: AgentId,
    pub state: AgentState,
    pub active: u32,
    pub local_concurrency: u32,
}

/// Become (or stay) leader for `ttl`; take over only after `lease_until + grace`.
#[derive(Debug, Clone)]
pub struct LeaderElectParams {
    pub owner: AgentId,
    pub ttl: Duration,
    pub grace: Duration,
}

/// Renew leadership held under `term`.
#[derive(Debug, Clone)]
pub struct LeaderRenewParams {
    pub owner: AgentId,
    pub term: i64,
    pub ttl: Duration,
}

/// One audit row to write.
#[derive(Debug, Clone)]
pub struct AuditEntry {
    pub actor: Actor,
    pub action: String,
    pub target: String,
    pub params: Option<serde_json::Value>,
    pub result: AuditResult,
    pub detail: Option<String>,
}

/// Most bytes of the peer an audit row names (e.g. `uid:1000(alice) pid:4242`).
pub const MAX_AUDIT_PEER_LEN: usize = 256;
/// Most bytes of an audit row's action.
pub const MAX_AUDIT_ACTION_LEN: usize = 64;
/// Most bytes of an audit row's target.
pub const MAX_AUDIT_TARGET_LEN: usize = 1024;
/// Most bytes of an audit row's detail.
pub const MAX_AUDIT_DETAIL_LEN: usize = 4096;
/// Most bytes of an audit row's params as JSON text (the database's own limit).
pub const MAX_AUDIT_PARAMS_LEN: usize = 65536;

/// Denied calls of one peer, recorded as one `audit_log` row
/// ([`crate::Store::audit_record_denied`]): `count` calls by `peer` (a connection label such
/// as `uid:1000(alice) pid:4242` or `tcp:10.0.0.7:50412`) that were refused the same way, so a
/// peer hammering the agent with refused calls writes one row per window, not one per call.
#[derive(Debug, Clone)]
pub struct DeniedCalls {
    /// The row; its `result` must be [`AuditResult::Denied`].
    pub entry: AuditEntry,
    /// Who called, as the connection names it (1-256 bytes, no control characters).
    pub peer: String,
    /// How many calls the row stands for (at least 1).
    pub count: u64,
}

impl DeniedCalls {
    /// Refuses a count of 0 (or above `i64::MAX`), a result other than `denied`, an empty or
    /// oversized peer, actor, action, target, detail or params, and control characters in the
    /// peer, actor or action.
    pub fn validate(&self) -> Result<(), ValidationError> {
        self.count_column()?;
        if self.entry.result != AuditResult::Denied {
            return Err(ValidationError::Invalid {
                field: "result",
                detail: format!(
                    "a denied-calls row must have result denied, not {}",
                    self.entry.result.as_str()
                ),
            });
        }
        check_audit_text("peer", &self.peer, 1, MAX_AUDIT_PEER_LEN, false)?;
        check_audit_text("actor", &self.entry.actor.name, 1, 200, false)?;
        check_audit_text("action", &self.entry.action, 1, MAX_AUDIT_ACTION_LEN, false)?;
        check_audit_text("target", &self.entry.target, 0, MAX_AUDIT_TARGET_LEN, true)?;
        if let Some(detail) = &self.entry.detail {
            check_audit_text("detail", detail, 0, MAX_AUDIT_DETAIL_LEN, true)?;
        }
        if let Some(params) = &self.entry.params {
            let size = serde_json::to_string(params)
                .map(|t| t.len())
                .unwrap_or(usize::MAX);
            if size > MAX_AUDIT_PARAMS_LEN {
                return Err(ValidationError::Invalid {
                    field: "params",
                    detail: format!(
                        "{size} bytes as JSON, above the limit of {MAX_AUDIT_PARAMS_LEN} bytes"
                    ),
                });
            }
        }
        Ok(())
    }

    /// The row's `count` column, after [`Self::validate`]: both stores write it so, and bad
    /// input is refused before anything is written.
    pub fn validated_count(&self) -> Result<i64, ValidationError> {
        self.validate()?;
        self.count_column()
    }

    /// `count` as the `audit_log.count` column holds it: 1 to `i64::MAX`.
    fn count_column(&self) -> Result<i64, ValidationError> {
        i64::try_from(self.count)
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| ValidationError::OutOfRange {
                field: "count",
                detail: format!("{} is not within 1..={}", self.count, i64::MAX),
            })
    }
}

/// Refuses `text` outside `min..=max` bytes or, unless `controls`, with control characters.
fn check_audit_text(
    field: &'static str,
    text: &str,
    min: usize,
    max: usize,
    controls: bool,
) -> Result<(), ValidationError> {
    if text.len() < min || text.len() > max || (!controls && text.chars().any(char::is_control)) {
        let controls = if controls {
            ""
        } else {
            " without control characters"
        };
        return Err(ValidationError::Invalid {
            field,
            detail: format!(
                "must be {min}-{max} bytes{controls}, got {} bytes",
                text.len()
            ),
        });
    }
    Ok(())
}

/// A page of tasks, newest first.
#[derive(Debug, Clone, Default)]
pub struct TaskListParams {
    /// Only these statuses (empty: all).
    pub statuses: Vec<TaskStatus>,
    pub task_type: Option<TaskType>,
    /// Case-insensitive text in the type, the error code or the error message.
    pub text: Option<String>,
    /// Only tasks whose last error has exactly this code (`last_error ->> 'code'`); 1-64 bytes
    /// without control characters.
    pub error_code: Option<String>,
    /// Only tasks finished (or, when not finished, last changed) at or after this time:
    /// `coalesce(finished_at, updated_at) >= since`.
    pub since: Option<DateTime<Utc>>,
    /// Keyset cursor: ids below this.
    pub before: Option<TaskId>,
    pub limit: u32,
    /// Only waiting tasks (queued, retry_wait) that are due (`Some(true)`: `available_at` at
    /// or before the database's now) or not yet due (`Some(false)`); a running or finished
    /// task matches neither. `None`: no such condition.
    pub due: Option<bool>,
}

impl TaskListParams {
    pub fn validate(&self) -> Result<(), ValidationError> {
        check_range("limit", self.limit, 1..=MAX_PAGE_SIZE)?;
        if let Some(text) = &self.text
            && (text.len() > 200 || text.chars().any(char::is_control))
        {
            return Err(ValidationError::Invalid {
                field: "text",
                detail: "must be at most 200 bytes without control characters".into(),
            });
        }
        if let Some(code) = &self.error_code
            && (code.is_empty()
                || code.len() > MAX_ERROR_CODE_LEN
                || code.chars().any(char::is_control))
        {
            return Err(ValidationError::Invalid {
                field: "error_code",
                detail: format!("must be 1-{MAX_ERROR_CODE_LEN} bytes without control characters"),
            });
        }
        Ok(())
    }
}

/// Explain why task `id` is not running ([`crate::Store::task_explain`]).
#[derive(Debug, Clone)]
pub struct ExplainParams {
    /// The task to explain.
    pub id: TaskId,
    /// An agent whose registry heartbeat is older than this is not live (at most 7 days).
    pub agent_stale_after: Duration,
}

impl ExplainParams {
    /// Refuses a staleness window above 7 days.
    pub fn validate(&self) -> Result<(), ValidationError> {
        check_duration("agent_stale_after", self.agent_stale_after)
    }
}

/// Enqueue one task on behalf of `actor`, audited in the same transaction
/// ([`crate::Store::task_enqueue_audited`]).
#[derive(Debug, Clone)]
pub struct EnqueueAuditedParams {
    /// The task, validated as by [`crate::Store::task_enqueue`].
    pub task: NewTask,
    /// Who enqueues it (a viewer is refused).
    pub actor: Actor,
}

/// Most rows of one page of the audit log.
pub const MAX_AUDIT_PAGE: u32 = 1000;

/// A page of the audit log, newest first; every filter is optional and they combine (AND).
#[derive(Debug, Clone, Default)]
pub struct AuditListParams {
    /// Keyset cursor: rows with ids below this.
    pub before_id: Option<i64>,
    /// Page size, 1..=[`MAX_AUDIT_PAGE`].
    pub limit: u32,
    /// Only rows of this actor (exact).
    pub actor: Option<String>,
    /// Only rows of this action (exact, e.g. `enqueue`).
    pub action: Option<String>,
    /// Only rows with this result.
    pub result: Option<AuditResult>,
    /// Only rows whose target contains this text (case-insensitive; no wildcards).
    pub target: Option<String>,
    /// Only rows written at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Only rows written before this time.
    pub until: Option<DateTime<Utc>>,
}

impl AuditListParams {
    /// Refuses a limit outside 1..=[`MAX_AUDIT_PAGE`], a negative cursor, empty or oversized
    /// text filters (or with control characters), and `since` not before `until`.
    pub fn validate(&self) -> Result<(), ValidationError> {
        check_range("limit", self.limit, 1..=MAX_AUDIT_PAGE)?;
        if let Some(id) = self.before_id {
            check_range("before_id", id, 1..=i64::MAX)?;
        }
        if let Some(actor) = &self.actor {
            check_audit_text("actor", actor, 1, 200, false)?;
        }
        if let Some(action) = &self.action {
            check_audit_text("action", action, 1, MAX_AUDIT_ACTION_LEN, false)?;
        }
        if let Some(target) = &self.target {
            check_audit_text("target", target, 1, 200, false)?;
        }
        if let (Some(since), Some(until)) = (self.since, self.until)
            && since >= until
        {
            return Err(ValidationError::Invalid {
                field: "since",
                detail: format!("{since} is not before until {until}"),
            });
        }
        Ok(())
    }
}
