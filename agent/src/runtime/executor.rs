//! Runs one claimed task on its own tokio task: builds its context, races the handler against
//! its timeout, deadline and stop signal, catches a panic, and hands the outcome to the
//! completer.
//!
//! ```text
//!   handler returns ───────────────────────────────▶ complete (succeeded | failed)
//!   timeout/deadline/cancel/shutdown ─▶ ctx.cancelled() fires ─▶ handler returns within
//!       stop_grace, or is dropped ─▶ failed(timeout | deadline_exceeded) | cancelled | release
//!   lease lost ─▶ dropped at once, nothing written (the lease belongs to someone else)
//!   panic ─▶ failed(panic, not retryable) ─▶ dead-letter queue
//! ```
//!
//! When things fail: the completion goes through the completer, which retries until it lands or
//! is fenced; the execution's slot is freed as soon as the handler ends.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use leasehold_shared::domain::Task;
use leasehold_shared::store::Completion;
use leasehold_shared::{LeaseKey, TaskError};
use tracing::Instrument;

use super::book::Lease;
use super::core::{BatchTimings, Core, FinishAction, Finished};
use super::events::LifecycleEvent;
use super::feed::AcquiredLease;
use super::progress::{DEFAULT_PROGRESS_EVERY, DEFAULT_PROGRESS_INTERVAL, ProgressSink};
use crate::handler::{HandlerError, Outcome, StopReason, StopSignal, TaskContext};

/// How a handler's run ended.
enum Ran {
    Returned(Result<Outcome, HandlerError>),
    Panicked(String),
    Dropped,
}

/// Records a claimed task in the book and starts its execution.
pub(crate) fn start(
    core: &Arc<Core>,
    mut task: Task,
    claimed_at: Instant,
    db_now: chrono::DateTime<chrono::Utc>,
    timings: &mut BatchTimings,
    acquired: &mut Vec<AcquiredLease>,
) {
    let stop = Arc::new(StopSignal::default());
    let type_timings = timings.get(&core.policies, &task.task_type);
    let timeout = task
        .timeout_ms
        .and_then(|ms| u64::try_from(ms).ok())
        .map(Duration::from_millis)
        .unwrap_or(type_timings.timeout);
    let timeout_at = claimed_at + timeout;
    let deadline_at = task.deadline_at.map(|d| {
        let left = (d - db_now).to_std().unwrap_or(Duration::ZERO);
        claimed_at + left
    });
    let (stop_at, stop_reason) = match deadline_at {
        Some(d) if d < timeout_at => (d, StopReason::Deadline),
        _ => (timeout_at, StopReason::Timeout),
    };
    // Never past the database's lease_until (minus the margin).
    let left = task
        .lease_until
        .map(|until| super::resources::lease_left(until, db_now));
    let safe_until = core.safe_until(claimed_at, left);
    if core.feed.is_enabled() {
        acquired.push(AcquiredLease {
            id: task.id,
            epoch: task.lease_epoch,
            task_type: task.task_type.clone(),
            attempt: task.attempt,
            priority: task.priority,
            started_at: task.started_at.unwrap_or(db_now),
            lease_until: task.lease_until.unwrap_or_else(|| {
                db_now
                    + chrono::Duration::from_std(core.settings.lease_ttl)
                        .unwrap_or(chrono::Duration::zero())
            }),
            timeout,
        });
    }
    core.book.insert(
        task.id,
        Lease {
            epoch: task.lease_epoch,
            task_type: task.task_type.clone(),
            started: claimed_at,
            safe_until,
            slow_after: type_timings.slow_after,
            stop: Arc::clone(&stop),
            executing: true,
            flagged_slow: false,
            cancel_seen: false,
        },
    );
    let queue_wait = task
        .started_at
        .map(|s| (s - task.available_at).to_std().unwrap_or(Duration::ZERO))
        .unwrap_or(Duration::ZERO);
    core.metrics.claimed(task.task_type.as_str(), queue_wait);
    core.listeners.emit_with(|| LifecycleEvent::Started {
        id: task.id,
        task_type: task.task_type.clone(),
        epoch: task.lease_epoch,
        attempt: task.attempt,
        queue_wait,
    });
    let key = LeaseKey {
        id: task.id,
        owner: core.id.clone(),
        epoch: task.lease_epoch,
    };
    let progress = Arc::new(
        ProgressSink::new(
            key.clone(),
            Arc::clone(&core.store),
            DEFAULT_PROGRESS_INTERVAL,
            DEFAULT_PROGRESS_EVERY,
            Arc::clone(&core.feed),
        )
        .holding(task.checkpoint.take(), Arc::clone(&core.book)),
    );
    let ctx = TaskContext {
        id: task.id,
        task_type: task.task_type.clone(),
        attempt: task.attempt,
        max_attempts: task.max_attempts,
        snoozes: task.snoozes,
        epoch: task.lease_epoch,
        deadline: task.deadline_at,
        stop_at: Some(stop_at),
        stop: Arc::clone(&stop),
        progress: Some(Arc::clone(&progress)),
        agent: Some(core.id.clone()),
        pool: core.database.pg_pool().cloned(),
        standalone_checkpoint: None,
    };
    let span = tracing::debug_span!(
        "execution",
        task.id = task.id.0,
        task.r#type = task.task_type.as_str(),
        lease.epoch = task.lease_epoch.0,
        attempt = task.attempt
    );
    let core = Arc::clone(core);
    tokio::spawn(
        async move {
            let ran = run_handler(&core, ctx, task.payload, &stop, stop_at, stop_reason).await;
            let run_time = super::renewal::now().saturating_duration_since(claimed_at);
            let still_held = core.book.finish_execution(key.id, key.epoch);
            core.update_active();
            core.wake_claimers();
            if progress.was_fenced() {
                core.fenced("progress", key.id, key.epoch);
            }
            let reason = stop.reason();
            let committed = progress
                .completed
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            if committed.is_none() && (reason == Some(StopReason::LeaseLost) || !still_held) {
                // Someone else owns the task now (or will): write nothing.
                tracing::warn!(
                    task.id = key.id.0,
                    lease.epoch = key.epoch.0,
                    "execution stopped: lease lost"
                );
                return;
            }
            if !progress.was_fenced() {
                // Bounded: a stuck progress write must not keep the completion (and so the
                // lease) from ever being written.
                let limit = core.settings.lease_ttl / 4;
                if tokio::time::timeout(limit, progress.flush()).await.is_err() {
                    tracing::warn!(task.id = key.id.0, "final progress write timed out");
                }
            }
            // A completion the handler's own transaction committed is the attempt's end,
            // whatever the handler did after it; written again below, it is a repeat.
            let action = match committed {
                Some(completion) => FinishAction::Complete(completion),
                None => finish_action(&core, &task.task_type, ran, reason, stop_at),
            };
            let finished = Finished {
                key,
                task_type: task.task_type,
                attempt: task.attempt,
                run_time,
                action,
            };
            if let Err(lost) = core.finished.send(finished) {
                let key = lost.0.key;
                if core.is_draining() {
                    // A forced shutdown stopped the completer first: the lease stays in the
                    // book, and the shutdown releases every lease left there.
                    tracing::info!(
                        task.id = key.id.0,
                        "completer stopped: the lease is released with the rest"
                    );
                } else {
                    // The completer is gone outside a shutdown: stop renewing the lease so
                    // recovery can take the task.
                    core.book.remove(key.id, key.epoch);
                    tracing::error!(
                        task.id = key.id.0,
                        "completer gone: the lease will be recovered after its TTL"
                    );
                }
            }
        }
        .instrument(span),
    );
}

async fn run_handler(
    core: &Core,
    ctx: TaskContext,
    payload: serde_json::Value,
    stop: &StopSignal,
    stop_at: Instant,
    stop_reason: StopReason,
) -> Ran {
    let Some(handler) = core.handlers.get(&ctx.task_type) else {
        return Ran::Returned(Err(HandlerError::permanent(
            "unknown_type",
            format!("this agent has no handler for task type {}", ctx.task_type),
        )));
    };
    let mut run = AssertUnwindSafe(handler.call(ctx, payload)).catch_unwind();
    // Biased, stops first: once a stop (or a drop) is signalled the handler is not polled
    // again here. Polled first, it would see `ctx.cancelled()` and could start a side effect
    // (a write that reaches its database) in the instant before a forced stop drops it — after
    // the lease can no longer be proven. The timeout or deadline comes before the handler too:
    // when both are due at one poll (the process was frozen, or starved, past the stop time),
    // the attempt ran past its stop time and is told so before it can return a success.
    let first = tokio::select! {
        biased;
        _ = stop.hard.cancelled() => None,
        _ = stop.token.cancelled() => None,
        _ = tokio::time::sleep_until(stop_at.into()) => {
            stop.stop(stop_reason);
            None
        }
        r = &mut run => Some(r),
    };
    let result = match first {
        Some(r) => Some(r),
        None if stop.hard.is_cancelled() => None,
        None => {
            // Asked to stop: the handler gets stop_grace to return on its own.
            tokio::select! {
                biased;
                _ = stop.hard.cancelled() => None,
                r = &mut run => Some(r),
                _ = tokio::time::sleep(core.settings.stop_grace) => {
                    tracing::warn!(grace = ?core.settings.stop_grace, "handler ignored the stop request; dropping it");
                    stop.force(stop_reason);
                    None
                }
            }
        }
    };
    match result {
        Some(Ok(r)) => Ran::Returned(r),
        Some(Err(panic)) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "handler panicked".to_string());
            Ran::Panicked(message)
        }
        None => Ran::Dropped,
    }
}

fn finish_action(
    core: &Core,
    task_type: &leasehold_shared::TaskType,
    ran: Ran,
    reason: Option<StopReason>,
    _stop_at: Instant,
) -> FinishAction {
    let stopped = |reason: StopReason| -> FinishAction {
        match reason {
            StopReason::Cancelled => FinishAction::Complete(Completion::Cancelled),
            StopReason::Timeout => {
                core.metrics.timeout(task_type.as_str());
                FinishAction::Complete(Completion::Failed {
                    error: TaskError::retryable("timeout", "the attempt ran past its timeout"),
                })
            }
            StopReason::Deadline => FinishAction::Complete(Completion::Failed {
                error: TaskError::permanent(
                    "deadline_exceeded",
                    "the task's deadline passed while it ran",
                ),
            }),
            StopReason::Shutdown | StopReason::LeaseLost => FinishAction::Release,
        }
    };
    match ran {
        Ran::Returned(Ok(outcome)) => FinishAction::Complete(outcome.completion()),
        Ran::Returned(Err(error)) => match reason {
            Some(reason) => stopped(reason),
            None => FinishAction::Complete(Completion::Failed {
                error: error.into_task_error(),
            }),
        },
        Ran::Panicked(message) => FinishAction::Complete(Completion::Failed {
            error: TaskError::permanent("panic", format!("handler panicked: {message}")).bounded(),
        }),
        Ran::Dropped => stopped(reason.unwrap_or(StopReason::Shutdown)),
    }
}

#[cfg(test)]
mod tests;
