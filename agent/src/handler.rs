//! The [`Handler`] trait that runs one task type, the [`TaskContext`] it runs in, and the
//! [`HandlerRegistry`] that maps task types to handlers.
//!
//! A handler gets a typed payload (deserialised from the task's JSON; a payload that does not
//! deserialise or fails [`Handler::validate`] is a permanent failure, so the task goes to the
//! dead-letter queue with the reason instead of being retried forever) and a context with the
//! task id, attempt, fencing epoch, deadline, a throttled [`TaskContext::progress`] and a
//! cancellation token.
//!
//! ```text
//!   claim ─▶ deserialise ─▶ validate ─▶ run(ctx, payload) ─▶ Ok(Outcome)        ─▶ succeeded
//!                │               │              │          ├▶ Ok(Snooze(d))      ─▶ queued at now + d
//!                │               │              │          └▶ Err(retryable)     ─▶ retry_wait | dead
//!                └───────────────┴──────────────┴──────────▶ Err(permanent)/panic ─▶ dead
//!   cancel requested / timeout / deadline / shutdown ─▶ ctx.cancelled() fires; the handler
//!   should return soon. Lease lost ─▶ the execution is dropped at once.
//! ```
//!
//! Side effects outside the database cannot be fenced: use [`TaskContext::idempotency_key`]
//! (task id and epoch) as their idempotency key.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use leasehold_shared::store::{CompleteOutcome, CompleteParams, Completion};
use leasehold_shared::{AgentId, LeaseEpoch, LeaseKey, Progress, TaskError, TaskId, TaskType};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::runtime::progress::ProgressSink;

/// What a successful run returns.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Done; an optional JSON result is stored on the task.
    Succeeded(Option<serde_json::Value>),
    /// Partly done (some items failed); the result says what.
    PartiallySucceeded(Option<serde_json::Value>),
    /// Not now: run again after this delay (at most 365 days) without using an attempt. The
    /// task waits again with its attempt count unchanged and one more snooze counted; the
    /// snooze past its type's `max_snoozes` (default 100) dead-letters it (`snooze_limit`).
    /// A checkpoint saved before is handed to the next run.
    Snooze(Duration),
}

impl Outcome {
    /// Success without a result.
    pub fn done() -> Self {
        Outcome::Succeeded(None)
    }

    /// The completion the runtime writes for this outcome.
    pub(crate) fn completion(&self) -> Completion {
        match self {
            Outcome::Succeeded(result) => Completion::Succeeded {
                result: result.clone(),
            },
            Outcome::PartiallySucceeded(result) => Completion::PartiallySucceeded {
                result: result.clone(),
            },
            Outcome::Snooze(delay) => Completion::Snooze { delay: *delay },
        }
    }
}

/// A transaction of the agent's PostgreSQL pool whose commit also completes the task
/// ([`TaskContext::begin`]): do the business writes on [`TaskTransaction::conn`], then
/// [`TaskTransaction::complete`]. The completion is fenced by the lease's epoch: if the lease
/// was lost, nothing commits — neither the completion nor the writes. Dropping it rolls back.
pub struct TaskTransaction {
    tx: sqlx::Transaction<'static, sqlx::Postgres>,
    key: LeaseKey,
    /// The execution's link to the runtime (always there: a context without one cannot begin).
    sink: Arc<ProgressSink>,
}

impl fmt::Debug for TaskTransaction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskTransaction")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl TaskTransaction {
    /// The open transaction, for the handler's own statements.
    pub fn conn(&mut self) -> &mut sqlx::PgConnection {
        &mut self.tx
    }

    /// Completes the task with `outcome` in this transaction and commits it: the handler's
    /// writes and the completion land together or not at all. Returns `outcome` (return it
    /// from the handler). Errors: `lease_lost` (permanent) when the lease moved on — rolled
    /// back, nothing landed; `commit_failed` (retryable) when the database failed — if the
    /// commit landed after all, the task is finished and the runtime's failure write after it
    /// is fenced (logged); if not, the attempt failed and is retried as usual.
    pub async fn complete(mut self, outcome: Outcome) -> Result<Outcome, HandlerError> {
        let completion = outcome.completion();
        let params = CompleteParams {
            key: self.key.clone(),
            completion: completion.clone(),
        };
        let decided =
            leasehold_shared::store::postgres::task_complete_in(&mut self.tx, &params).await;
        match decided {
            Ok(CompleteOutcome::Applied { .. } | CompleteOutcome::Repeated { .. }) => {
                self.sink.ending();
            }
            Ok(CompleteOutcome::Fenced) => {
                if let Err(e) = self.tx.rollback().await {
                    tracing::warn!(task.id = self.key.id.0, error = %e, "rollback after a fenced completion failed (the connection's end rolls back)");
                }
                return Err(HandlerError::permanent(
                    "lease_lost",
                    "the lease moved on before the transaction completed the task: rolled back",
                ));
            }
            Err(e) => {
                return Err(match e {
                    leasehold_shared::StoreError::Invalid(v) => {
                        HandlerError::permanent("bad_result", v.to_string())
                    }
                    other => HandlerError::from_error("commit_failed", &other),
                });
            }
        }
        self.tx
            .commit()
            .await
            .map_err(|e| HandlerError::from_error("commit_failed", &e))?;
        *self
            .sink
            .completed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(completion);
        Ok(outcome)
    }

    /// Rolls the transaction back; the task is not completed by it.
    pub async fn rollback(self) -> Result<(), HandlerError> {
        self.tx
            .rollback()
            .await
            .map_err(|e| HandlerError::from_error("rollback_failed", &e))
    }
}

/// A failed run: a code, a message, and whether trying again could help.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerError {
    pub code: String,
    pub message: String,
    pub retryable: bool,
}

impl HandlerError {
    /// A failure worth retrying (network, a busy dependency).
    pub fn retryable(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
            retryable: true,
        }
    }

    /// A failure that no retry will fix (bad input, a bug): the task is dead-lettered.
    pub fn permanent(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
            retryable: false,
        }
    }

    /// Wraps any error as retryable, with its whole chain of causes as the message.
    pub fn from_error(code: &str, error: &(dyn std::error::Error + 'static)) -> Self {
        let mut message = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        Self::retryable(code, message)
    }

    pub(crate) fn into_task_error(self) -> TaskError {
        TaskError {
            code: self.code,
            message: self.message,
            retryable: self.retryable,
            trace_id: None,
        }
        .bounded()
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for HandlerError {}

/// Why an execution was asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// An operator cancelled the task.
    Cancelled,
    /// The attempt ran past its timeout.
    Timeout,
    /// The task's deadline passed.
    Deadline,
    /// The agent is shutting down; the lease will be released.
    Shutdown,
    /// The lease is gone (revoked, or not provable): the execution is dropped at once.
    LeaseLost,
}

impl StopReason {
    pub const fn as_str(self) -> &'static str {
        match self {
            StopReason::Cancelled => "cancelled",
            StopReason::Timeout => "timeout",
            StopReason::Deadline => "deadline_exceeded",
            StopReason::Shutdown => "shutdown",
            StopReason::LeaseLost => "lease_lost",
        }
    }
}

/// Shared between an execution and the runtime: the stop token and its reason.
///
/// `token` asks the handler to stop (it gets a grace period to return); `hard` drops the
/// execution at once. A lost lease fires both: the runtime never lets a handler run on a lease
/// it cannot prove, and the reason becomes `LeaseLost` whatever was asked before.
#[derive(Debug, Default)]
pub(crate) struct StopSignal {
    pub(crate) token: CancellationToken,
    pub(crate) hard: CancellationToken,
    reason: std::sync::Mutex<Option<StopReason>>,
}

impl StopSignal {
    /// Asks the execution to stop; the first reason wins, except that a lost lease overrides.
    pub(crate) fn stop(&self, reason: StopReason) {
        if let Ok(mut r) = self.reason.lock()
            && (r.is_none() || reason == StopReason::LeaseLost)
        {
            *r = Some(reason);
        }
        self.token.cancel();
        if reason == StopReason::LeaseLost {
            self.hard.cancel();
        }
    }

    /// Drops the execution now, keeping the first reason (used when a grace period ends).
    pub(crate) fn force(&self, reason: StopReason) {
        if let Ok(mut r) = self.reason.lock()
            && r.is_none()
        {
            *r = Some(reason);
        }
        // `hard` first: the executor, woken by either, must already see the drop.
        self.hard.cancel();
        self.token.cancel();
    }

    pub(crate) fn reason(&self) -> Option<StopReason> {
        self.reason.lock().ok().and_then(|r| *r)
    }
}

/// What a running handler knows about its task and how it talks back.
#[derive(Clone)]
pub struct TaskContext {
    pub(crate) id: TaskId,
    pub(crate) task_type: TaskType,
    pub(crate) attempt: i32,
    pub(crate) max_attempts: i32,
    pub(crate) snoozes: i32,
    pub(crate) epoch: LeaseEpoch,
    pub(crate) deadline: Option<DateTime<Utc>>,
    pub(crate) stop_at: Option<Instant>,
    pub(crate) stop: Arc<StopSignal>,
    pub(crate) progress: Option<Arc<ProgressSink>>,
    pub(crate) agent: Option<AgentId>,
    pub(crate) pool: Option<sqlx::PgPool>,
    /// A standalone context's checkpoint (one run by the runtime keeps it in `progress`).
    pub(crate) standalone_checkpoint: Option<Arc<std::sync::Mutex<Option<serde_json::Value>>>>,
}

impl fmt::Debug for TaskContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskContext")
            .field("id", &self.id)
            .field("task_type", &self.task_type)
            .field("attempt", &self.attempt)
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

/// Stops a [`TaskContext`] made by [`TaskContext::standalone`].
#[derive(Debug, Clone)]
pub struct ContextStopper(Arc<StopSignal>);

impl ContextStopper {
    /// Asks the execution to stop for `reason` (the first reason wins).
    pub fn stop(&self, reason: StopReason) {
        self.0.stop(reason);
    }
}

impl TaskContext {
    /// A context outside any runtime, for testing handlers: task id 1, attempt 1 of 1, epoch 1,
    /// no deadline, progress discarded. `time_left` counts down from `stop_after` when given.
    pub fn standalone(task_type: TaskType, stop_after: Option<Duration>) -> (Self, ContextStopper) {
        let stop = Arc::new(StopSignal::default());
        let ctx = TaskContext {
            id: TaskId(1),
            task_type,
            attempt: 1,
            max_attempts: 1,
            snoozes: 0,
            epoch: LeaseEpoch(1),
            deadline: None,
            stop_at: stop_after.map(|d| Instant::now() + d),
            stop: Arc::clone(&stop),
            progress: None,
            agent: None,
            pool: None,
            standalone_checkpoint: Some(Arc::default()),
        };
        (ctx, ContextStopper(stop))
    }

    /// This context as if an earlier attempt had saved `checkpoint` (for testing handlers that
    /// resume).
    pub fn with_checkpoint(self, checkpoint: serde_json::Value) -> Self {
        self.set_checkpoint(Some(checkpoint));
        self
    }

    /// Where the last checkpoint is kept: the runtime's sink, or a standalone context's own.
    fn checkpoint_slot(&self) -> Option<&std::sync::Mutex<Option<serde_json::Value>>> {
        match &self.progress {
            Some(sink) => Some(&sink.checkpoint),
            None => self.standalone_checkpoint.as_deref(),
        }
    }

    fn set_checkpoint(&self, checkpoint: Option<serde_json::Value>) {
        if let Some(slot) = self.checkpoint_slot() {
            *slot
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = checkpoint;
        }
    }

    /// The task's id.
    pub fn id(&self) -> TaskId {
        self.id
    }

    /// The task's type.
    pub fn task_type(&self) -> &TaskType {
        &self.task_type
    }

    /// This attempt's number (1 for the first run).
    pub fn attempt(&self) -> i32 {
        self.attempt
    }

    /// Attempts allowed in all.
    pub fn max_attempts(&self) -> i32 {
        self.max_attempts
    }

    /// Times the task was snoozed before this run ([`Outcome::Snooze`]).
    pub fn snoozes(&self) -> i32 {
        self.snoozes
    }

    /// The lease owner running this attempt (the agent's per-start id), when run by an agent.
    pub fn agent_id(&self) -> Option<&AgentId> {
        self.agent.as_ref()
    }

    /// The agent's PostgreSQL pool, for handlers that work in the same database (enqueue
    /// follow-up tasks, write results in their own transactions). Holding its connections for
    /// long delays claims and completions, never heartbeats (those have their own connection).
    ///
    /// Behind a transaction pooler (PgBouncer) run statements on it only inside a transaction
    /// (`pool.begin()` … `commit()`, or [`TaskContext::begin`]): a statement run on the pool
    /// directly is sent in two exchanges, which the pooler may hand to two server connections.
    pub fn pool(&self) -> Option<&sqlx::PgPool> {
        self.pool.as_ref()
    }

    /// Begins a transaction on the agent's PostgreSQL pool that completes the task when it
    /// commits ([`TaskTransaction::complete`]): the handler's writes and the completion land
    /// together, fenced by this attempt's epoch — exactly-once effects for work whose effects
    /// live in the same database. The embedded SQLite store does not offer it (error
    /// `unsupported`); neither does a standalone context.
    ///
    /// ```no_run
    /// # use leasehold_agent::{HandlerError, Outcome, TaskContext};
    /// # async fn run(ctx: TaskContext) -> Result<Outcome, HandlerError> {
    /// let mut tx = ctx.begin().await?;
    /// sqlx::query("UPDATE accounts SET paid = true WHERE id = 7")
    ///     .execute(tx.conn())
    ///     .await
    ///     .map_err(|e| HandlerError::from_error("db", &e))?;
    /// tx.complete(Outcome::done()).await
    /// # }
    /// ```
    pub async fn begin(&self) -> Result<TaskTransaction, HandlerError> {
        let (Some(pool), Some(owner), Some(sink)) = (&self.pool, &self.agent, &self.progress)
        else {
            return Err(HandlerError::permanent(
                "unsupported",
                "transactional completion needs the PostgreSQL store; the embedded SQLite store does not offer it",
            ));
        };
        // READ COMMITTED said, not inherited: behind a transaction pooler the connection does
        // not carry the store's startup settings.
        let mut tx = pool
            .begin_with("BEGIN ISOLATION LEVEL READ COMMITTED")
            .await
            .map_err(|e| HandlerError::from_error("begin_failed", &e))?;
        // The agent's pool bounds its own statements and idle transactions by half the lease
        // TTL; the handler's transaction is bounded by the attempt instead (the runtime drops
        // it — and so rolls it back — on a stop, a timeout or a lost lease).
        sqlx::query(
            "SELECT set_config('statement_timeout', '0', true), \
                    set_config('idle_in_transaction_session_timeout', '0', true)",
        )
        .execute(&mut *tx)
        .await
        .map_err(|e| HandlerError::from_error("begin_failed", &e))?;
        Ok(TaskTransaction {
            tx,
            key: LeaseKey {
                id: self.id,
                owner: owner.clone(),
                epoch: self.epoch,
            },
            sink: Arc::clone(sink),
        })
    }

    /// The fencing epoch of this attempt's lease.
    pub fn epoch(&self) -> LeaseEpoch {
        self.epoch
    }

    /// `"<task id>:<epoch>"`: the idempotency key for side effects outside the database.
    pub fn idempotency_key(&self) -> String {
        format!("{}:{}", self.id.0, self.epoch.0)
    }

    /// The task's absolute deadline (database time), if it has one.
    pub fn deadline(&self) -> Option<DateTime<Utc>> {
        self.deadline
    }

    /// Time left before the runtime stops this attempt (timeout or deadline, whichever is
    /// first), measured on this host's monotonic clock from the claim.
    pub fn time_left(&self) -> Option<Duration> {
        self.stop_at
            .map(|at| at.saturating_duration_since(Instant::now()))
    }

    /// True once the execution has been asked to stop.
    pub fn is_cancelled(&self) -> bool {
        self.stop.token.is_cancelled()
    }

    /// Resolves when the execution is asked to stop (cancel, timeout, deadline, shutdown).
    pub async fn cancelled(&self) {
        self.stop.token.cancelled().await;
    }

    /// A token that is cancelled when the execution is asked to stop.
    pub fn cancellation_token(&self) -> CancellationToken {
        self.stop.token.clone()
    }

    /// Why the execution was asked to stop, once it was.
    pub fn stop_reason(&self) -> Option<StopReason> {
        self.stop.reason()
    }

    /// The last checkpoint saved for this task: by an earlier attempt (after a failure, a lost
    /// lease, a release or a snooze) until this attempt saves its own. `None` on a fresh task.
    pub fn checkpoint(&self) -> Option<serde_json::Value> {
        self.checkpoint_slot().and_then(|slot| {
            slot.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone()
        })
    }

    /// [`TaskContext::checkpoint`] deserialised as `T`; an error (permanent `bad_checkpoint`)
    /// when it does not fit.
    pub fn checkpoint_as<T: DeserializeOwned>(&self) -> Result<Option<T>, HandlerError> {
        self.checkpoint()
            .map(|value| {
                serde_json::from_value(value).map_err(|e| {
                    HandlerError::permanent(
                        "bad_checkpoint",
                        format!("the saved checkpoint does not fit: {e}"),
                    )
                })
            })
            .transpose()
    }

    /// Saves a checkpoint of this attempt's progress (JSON, at most 64 KiB), at once and fenced
    /// by the lease: the next attempt of the task receives it from [`TaskContext::checkpoint`]
    /// (`LEASEHOLD_CHECKPOINT` for `exec`). Errors: `lease_lost` when the lease moved on
    /// (nothing was written; stop working), `bad_checkpoint` for a value that cannot be
    /// stored, `checkpoint_failed` (retryable) when the database did not answer.
    pub async fn save_checkpoint<T: serde::Serialize + ?Sized>(
        &self,
        checkpoint: &T,
    ) -> Result<(), HandlerError> {
        let value = serde_json::to_value(checkpoint).map_err(|e| {
            HandlerError::permanent(
                "bad_checkpoint",
                format!("cannot encode the checkpoint: {e}"),
            )
        })?;
        let size = leasehold_shared::domain::validate::db_text_len(&value);
        if size > leasehold_shared::store::MAX_CHECKPOINT_BYTES {
            return Err(HandlerError::permanent(
                "bad_checkpoint",
                format!(
                    "the checkpoint is {size} bytes of JSON, above {}",
                    leasehold_shared::store::MAX_CHECKPOINT_BYTES
                ),
            ));
        }
        let Some(sink) = &self.progress else {
            // A standalone context keeps it for `checkpoint()`.
            self.set_checkpoint(Some(value));
            return Ok(());
        };
        let mut stored = value.clone();
        leasehold_shared::domain::validate::replace_nul(&mut stored);
        match sink.checkpoint(stored).await {
            Ok(true) => {
                self.set_checkpoint(Some(value));
                Ok(())
            }
            Ok(false) => Err(HandlerError::permanent(
                "lease_lost",
                "the checkpoint was not saved: this attempt's lease moved on",
            )),
            Err(e) => Err(HandlerError::from_error("checkpoint_failed", &e)),
        }
    }

    /// Reports progress. Writes are throttled (by time and by count); the last value is always
    /// written before the attempt ends. Never fails the task: a progress write that cannot land
    /// is logged and retried with the next one.
    pub async fn progress(&self, progress: Progress) {
        if let Some(sink) = &self.progress {
            sink.update(progress).await;
        }
    }
}

/// Runs tasks of one type.
#[async_trait]
pub trait Handler: Send + Sync + 'static {
    /// The task's payload, deserialised from its JSON.
    type Payload: DeserializeOwned + Send + 'static;

    /// Checks a payload before it runs; an error here is permanent (dead-letter).
    fn validate(&self, _payload: &Self::Payload) -> Result<(), HandlerError> {
        Ok(())
    }

    /// Checks a payload when it is enqueued (the Enqueue and AddSchedule calls of an agent
    /// that has this handler): an error refuses the call and nothing is saved. The default is
    /// [`Handler::validate`]; a handler whose settings decide what may run (`exec`'s allow
    /// list) checks them here too. The agent that runs the task checks again at run time.
    fn validate_enqueue(&self, payload: &Self::Payload) -> Result<(), HandlerError> {
        self.validate(payload)
    }

    /// Runs one attempt.
    async fn run(&self, ctx: TaskContext, payload: Self::Payload) -> Result<Outcome, HandlerError>;
}

/// A handler with its payload type erased, as the runtime holds it.
pub(crate) trait ErasedHandler: Send + Sync {
    fn call(
        &self,
        ctx: TaskContext,
        payload: serde_json::Value,
    ) -> BoxFuture<'static, Result<Outcome, HandlerError>>;

    /// Checks a payload without running it: it must deserialise into the handler's payload
    /// type and pass [`Handler::validate_enqueue`].
    fn check(&self, payload: &serde_json::Value) -> Result<(), HandlerError>;

    /// The handler itself, to be downcast by [`HandlerRegistry::handler`].
    fn as_any(&self) -> &(dyn std::any::Any + Send + Sync);
}

/// Checks `payload` for `handler` without running it: it must deserialise into the handler's
/// payload type (else a permanent `bad_payload` whose message is serde's, such as
/// ``missing field `argv` ``) and pass [`Handler::validate_enqueue`].
pub(crate) fn check_with<H: Handler>(
    handler: &H,
    payload: &serde_json::Value,
) -> Result<(), HandlerError> {
    let payload: H::Payload = H::Payload::deserialize(payload)
        .map_err(|e| HandlerError::permanent("bad_payload", e.to_string()))?;
    handler.validate_enqueue(&payload)
}

struct Typed<H>(Arc<H>);

impl<H: Handler> ErasedHandler for Typed<H> {
    fn call(
        &self,
        ctx: TaskContext,
        payload: serde_json::Value,
    ) -> BoxFuture<'static, Result<Outcome, HandlerError>> {
        let handler = Arc::clone(&self.0);
        Box::pin(async move {
            let payload: H::Payload = serde_json::from_value(payload).map_err(|e| {
                HandlerError::permanent("bad_payload", format!("payload does not fit: {e}"))
            })?;
            handler.validate(&payload)?;
            handler.run(ctx, payload).await
        })
    }

    fn check(&self, payload: &serde_json::Value) -> Result<(), HandlerError> {
        check_with(self.0.as_ref(), payload)
    }

    fn as_any(&self) -> &(dyn std::any::Any + Send + Sync) {
        self.0.as_ref()
    }
}

/// Task types and the handlers that run them.
#[derive(Default, Clone)]
pub struct HandlerRegistry {
    handlers: BTreeMap<TaskType, Arc<dyn ErasedHandler>>,
}

impl fmt::Debug for HandlerRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.handlers.keys()).finish()
    }
}

impl HandlerRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `handler` for `task_type` (replacing any earlier one).
    pub fn register<H: Handler>(&mut self, task_type: TaskType, handler: H) -> &mut Self {
        self.handlers
            .insert(task_type, Arc::new(Typed(Arc::new(handler))));
        self
    }

    /// The types this registry serves, sorted.
    pub fn task_types(&self) -> Vec<TaskType> {
        self.handlers.keys().cloned().collect()
    }

    /// True when `task_type` has a handler.
    pub fn contains(&self, task_type: &TaskType) -> bool {
        self.handlers.contains_key(task_type)
    }

    /// Adds the handlers of `other` whose type is named in `enabled`.
    pub fn merge_enabled(&mut self, other: HandlerRegistry, enabled: &[String]) {
        for (task_type, handler) in other.handlers {
            if enabled.iter().any(|e| e == task_type.as_str()) {
                self.handlers.insert(task_type, handler);
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.handlers.is_empty()
    }

    /// Checks `payload` with the handler of `task_type` without running it
    /// ([`Handler::validate_enqueue`] after deserialising); `None` when this registry has no
    /// handler for the type.
    pub fn check_payload(
        &self,
        task_type: &TaskType,
        payload: &serde_json::Value,
    ) -> Option<Result<(), HandlerError>> {
        self.handlers.get(task_type).map(|h| h.check(payload))
    }

    pub(crate) fn get(&self, task_type: &TaskType) -> Option<Arc<dyn ErasedHandler>> {
        self.handlers.get(task_type).cloned()
    }

    /// The handler of `task_type` when it is an `H` (e.g. the built-in `exec`, whose settings
    /// the Enqueue call checks payloads against).
    pub fn handler<H: Handler>(&self, task_type: &str) -> Option<&H> {
        self.handlers
            .iter()
            .find(|(t, _)| t.as_str() == task_type)
            .and_then(|(_, h)| h.as_any().downcast_ref::<H>())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn without_postgres_transactional_completion_says_it_is_not_offered() {
        let (ctx, _) = TaskContext::standalone(TaskType::new("t").unwrap(), None);
        let refused = ctx.begin().await.map(|_| ()).unwrap_err();
        assert_eq!(refused.code, "unsupported");
        assert!(refused.message.contains("SQLite"), "{refused}");
        assert!(!refused.retryable);
    }

    #[tokio::test]
    async fn a_standalone_context_keeps_its_checkpoints() {
        let (ctx, _) = TaskContext::standalone(TaskType::new("t").unwrap(), None);
        let ctx = ctx.with_checkpoint(serde_json::json!({"page": 3}));
        assert_eq!(
            ctx.checkpoint_as::<serde_json::Value>().unwrap(),
            Some(serde_json::json!({"page": 3}))
        );
        ctx.save_checkpoint(&serde_json::json!({"page": 4}))
            .await
            .unwrap();
        assert_eq!(
            ctx.clone().checkpoint(),
            Some(serde_json::json!({"page": 4}))
        );
        let big = "x".repeat(70_000);
        let refused = ctx.save_checkpoint(&big).await.unwrap_err();
        assert_eq!(refused.code, "bad_checkpoint");
        assert!(
            ctx.checkpoint_as::<u32>().is_err(),
            "a checkpoint that does not fit is an error"
        );
    }
}
