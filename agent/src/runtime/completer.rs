//! The completer service: batches ended attempts into one fenced statement.
//!
//! It waits for the first finished attempt, gathers whatever else arrives within
//! `complete_flush` (or until `complete_batch` are pending), and writes them with one
//! `task_complete_many` (and one `lease_release_many` for released leases). Every row is fenced
//! on its own: a fenced completion is counted and logged, never an error.
//!
//! When things fail: a batch that fails (database down, timeout) is kept and retried with
//! backoff; repeating a completion whose commit reply was lost reports `Repeated`, so retrying
//! is always safe. The leases stay in the book (and keep being renewed) until their write
//! lands. On shutdown the completer drains its queue, retrying until `stop` is cancelled.

use std::sync::Arc;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use leasehold_shared::domain::LeaseOutcome;
use leasehold_shared::store::{CompleteOutcome, CompleteParams, Completion, ReleaseParams};
use leasehold_shared::{TaskError, TaskStatus};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::core::{Core, FinishAction, Finished, bump};
use super::events::LifecycleEvent;
use super::feed::FeedEvent;
use super::queue::{CompleteQueue, WriteError, chain};

const RETRY_MIN: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(2);
/// Pauses between attempts of a batch that failed: [`RETRY_MIN`] doubling to [`RETRY_MAX`],
/// until it lands or the completer is stopped.
const RETRY_BACKOFF: ExponentialBuilder = ExponentialBuilder::new()
    .with_min_delay(RETRY_MIN)
    .with_max_delay(RETRY_MAX)
    .without_max_times();

pub(crate) struct Completer {
    pub(crate) core: Arc<Core>,
    pub(crate) rx: mpsc::UnboundedReceiver<Finished>,
    /// Where completions and releases go (the store; the in-memory queue in the unit tests).
    pub(crate) queue: Arc<dyn CompleteQueue>,
}

impl Completer {
    /// Runs until the queue is closed and empty, or `stop` fires (then pending writes are
    /// abandoned: their leases expire and are recovered). Up to `complete_workers` batches are
    /// written at once, so a slow commit never idles the queue.
    pub(crate) async fn run(mut self, stop: CancellationToken) {
        let core = Arc::clone(&self.core);
        let batch = core.settings.complete_batch;
        let mut in_flight = tokio::task::JoinSet::new();
        loop {
            let mut pending: Vec<Finished> = Vec::new();
            tokio::select! {
                got = self.rx.recv() => match got {
                    Some(f) => pending.push(f),
                    None => break,
                },
                _ = stop.cancelled() => break,
                Some(_) = in_flight.join_next(), if !in_flight.is_empty() => continue,
            }
            // Gather what arrives within the flush window.
            if pending.len() < batch && !core.settings.complete_flush.is_zero() {
                let window = tokio::time::sleep(core.settings.complete_flush);
                tokio::pin!(window);
                while pending.len() < batch {
                    tokio::select! {
                        got = self.rx.recv() => match got {
                            Some(f) => pending.push(f),
                            None => break,
                        },
                        _ = &mut window => break,
                    }
                }
            }
            while in_flight.len() >= core.settings.complete_workers.max(1) {
                in_flight.join_next().await;
            }
            while pending.len() < batch * 10 {
                match self.rx.try_recv() {
                    Ok(f) => pending.push(f),
                    Err(_) => break,
                }
            }
            let me = Writer {
                core: Arc::clone(&core),
                queue: Arc::clone(&self.queue),
            };
            let stop = stop.clone();
            in_flight.spawn(async move { me.flush_until_done(pending, &stop).await });
        }
        while in_flight.join_next().await.is_some() {}
    }
}

/// Writes batches of finished attempts (it shares the core, and never receives).
struct Writer {
    core: Arc<Core>,
    queue: Arc<dyn CompleteQueue>,
}

impl Writer {
    /// Writes `pending`, retrying with backoff until it lands or `stop` fires.
    ///
    /// A batch the database refuses for what it holds (not for a lost connection) is written
    /// one attempt at a time, so one bad row can never hold the others back; a single attempt
    /// the database still refuses is recorded as a permanent failure saying why, and if even
    /// that is refused its lease is dropped from the book (recovered after its TTL) rather than
    /// renewed forever.
    async fn flush_until_done(self, mut pending: Vec<Finished>, stop: &CancellationToken) {
        let mut delays = RETRY_BACKOFF.build();
        let mut rewritten = false;
        loop {
            match self.flush(&mut pending).await {
                Ok(()) => return,
                Err(error) => {
                    let refused = refused_for_content(&error);
                    if refused && pending.len() > 1 {
                        tracing::warn!(error = %chain(&error), pending = pending.len(), "completion batch refused; writing its attempts one by one");
                        for one in std::mem::take(&mut pending) {
                            let me = Writer {
                                core: Arc::clone(&self.core),
                                queue: Arc::clone(&self.queue),
                            };
                            Box::pin(me.flush_until_done(vec![one], stop)).await;
                        }
                        return;
                    }
                    if refused {
                        if rewritten {
                            for f in pending.drain(..) {
                                self.core.book.remove(f.key.id, f.key.epoch);
                                self.core.feed.push(FeedEvent::Ended {
                                    id: f.key.id,
                                    epoch: f.key.epoch,
                                    outcome: LeaseOutcome::Lost,
                                });
                                tracing::error!(task.id = f.key.id.0, error = %chain(&error), "the database refuses this attempt's completion; its lease will be recovered after the TTL");
                            }
                            return;
                        }
                        rewritten = true;
                        let reason = chain(&error);
                        for f in pending.iter_mut() {
                            if let FinishAction::Complete(c) = &mut f.action {
                                *c = Completion::Failed {
                                    error: TaskError::permanent(
                                        "unstorable",
                                        format!(
                                            "the database refused this attempt's outcome: {reason}"
                                        ),
                                    )
                                    .bounded(),
                                };
                            }
                        }
                        continue;
                    }
                    self.core.metrics.database(false);
                    tracing::warn!(error = %chain(&error), pending = pending.len(), "completion batch failed; retrying");
                    let delay = delays.next().unwrap_or(RETRY_MAX);
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = stop.cancelled() => return,
                    }
                }
            }
        }
    }

    /// Writes `pending`; on success it is emptied.
    async fn flush(&self, pending: &mut Vec<Finished>) -> Result<(), WriteError> {
        let core = &self.core;
        let timeout = core.settings.lease_ttl;
        let (releases, completes): (Vec<Finished>, Vec<Finished>) = std::mem::take(pending)
            .into_iter()
            .partition(|f| matches!(f.action, FinishAction::Release));
        if !completes.is_empty() {
            let params: Vec<CompleteParams> = completes.iter().map(complete_params).collect();
            let written =
                tokio::time::timeout(timeout, self.queue.task_complete_many(params.clone()))
                    .await
                    .map_err(|_| WriteError::timeout("completion batch", timeout))
                    .and_then(|r| r.map_err(WriteError::Store));
            let outcomes = match written {
                Ok(outcomes) => outcomes,
                Err(e) => {
                    // Keep everything for the retry.
                    pending.extend(completes);
                    pending.extend(releases);
                    return Err(e);
                }
            };
            core.metrics.database(true);
            for ((f, written), outcome) in completes.iter().zip(&params).zip(outcomes) {
                self.record(f, &written.completion, outcome);
            }
            core.wake_claimers();
        }
        // The completions landed: a retry from here on repeats only the releases.
        pending.extend(releases);
        let releases: Vec<&Finished> = pending.iter().collect();
        if !releases.is_empty() {
            let leases = releases.iter().map(|f| (f.key.id, f.key.epoch)).collect();
            let out = tokio::time::timeout(
                timeout,
                self.queue.lease_release_many(ReleaseParams {
                    owner: core.id.clone(),
                    leases,
                }),
            )
            .await
            .map_err(|_| WriteError::timeout("release", timeout))??;
            for f in &releases {
                core.book.remove(f.key.id, f.key.epoch);
                if out.fenced.contains(&f.key.id) {
                    core.fenced("release", f.key.id, f.key.epoch);
                } else {
                    core.released(f.key.id, f.key.epoch, &f.task_type, f.run_time);
                }
            }
        }
        pending.clear();
        // The book shrank: a claimer held back by the book's cap can claim again.
        core.wake_claimers();
        Ok(())
    }

    fn record(&self, f: &Finished, written: &Completion, outcome: CompleteOutcome) {
        let core = &self.core;
        core.book.remove(f.key.id, f.key.epoch);
        let (status, until) = match outcome {
            CompleteOutcome::Applied { status, retry_at } => (status, retry_at),
            CompleteOutcome::Repeated { status } => {
                tracing::info!(
                    task.id = f.key.id.0,
                    "completion repeated: it had already landed"
                );
                (status, None)
            }
            CompleteOutcome::Fenced => {
                core.fenced("complete", f.key.id, f.key.epoch);
                return;
            }
        };
        let (id, task_type) = (f.key.id, f.task_type.clone());
        core.feed.push(FeedEvent::Ended {
            id,
            epoch: f.key.epoch,
            // A repeated completion reads the task's status now, which may have moved on
            // (requeued, claimed again): the lease still ended, and says only that.
            outcome: LeaseOutcome::of_status(status).unwrap_or(LeaseOutcome::Ended),
        });
        let snoozed = matches!(written, Completion::Snooze { .. }) && status == TaskStatus::Queued;
        let outcome_name = if snoozed { "snoozed" } else { status.as_str() };
        core.metrics
            .finished(task_type.as_str(), outcome_name, f.run_time);
        match (written, status) {
            (Completion::Snooze { delay }, TaskStatus::Queued) => {
                bump(&core.stats.snoozed, 1);
                tracing::info!(
                    task.id = id.0,
                    delay_ms = delay.as_millis() as u64,
                    "attempt snoozed"
                );
                core.listeners.emit(LifecycleEvent::Snoozed {
                    id,
                    task_type,
                    until,
                });
            }
            (Completion::Snooze { .. }, TaskStatus::Dead) => {
                bump(&core.stats.dead, 1);
                tracing::warn!(
                    task.id = id.0,
                    "snooze refused: the task is dead (max_snoozes or its deadline)"
                );
                core.listeners.emit(LifecycleEvent::DeadLettered {
                    id,
                    task_type,
                    error: TaskError::permanent(
                        "snooze_refused",
                        "the handler asked to snooze past the type's max_snoozes or the task's deadline; the task's last error says which",
                    ),
                });
            }
            (_, TaskStatus::Succeeded | TaskStatus::PartiallySucceeded) => {
                if status == TaskStatus::Succeeded {
                    bump(&core.stats.succeeded, 1);
                    if matches!(written, Completion::Succeeded { .. }) {
                        core.history.record(&task_type, f.run_time);
                    }
                } else {
                    bump(&core.stats.partially_succeeded, 1);
                }
                core.listeners.emit_with(|| LifecycleEvent::Completed {
                    id,
                    task_type,
                    status,
                    run_time: f.run_time,
                });
            }
            (_, TaskStatus::Cancelled) => {
                bump(&core.stats.cancelled, 1);
                core.listeners
                    .emit(LifecycleEvent::Cancelled { id, task_type });
            }
            (Completion::Failed { error }, next) => {
                bump(&core.stats.failed, 1);
                tracing::warn!(task.id = id.0, error.code = %error.code, error.message = %error.message, next = %next, "attempt failed");
                core.listeners.emit(LifecycleEvent::Failed {
                    id,
                    task_type: task_type.clone(),
                    error: error.clone(),
                    next,
                    run_time: f.run_time,
                });
                if next == TaskStatus::Dead {
                    bump(&core.stats.dead, 1);
                    core.listeners.emit(LifecycleEvent::DeadLettered {
                        id,
                        task_type,
                        error: error.clone(),
                    });
                } else {
                    bump(&core.stats.retried, 1);
                    core.listeners.emit(LifecycleEvent::Retried {
                        id,
                        task_type,
                        attempt: f.attempt,
                    });
                }
            }
            (_, other) => {
                tracing::info!(task.id = id.0, status = %other, "attempt ended");
            }
        }
    }
}

/// True when the database refused a batch for what it holds
/// ([`leasehold_shared::StoreError::is_content_refusal`]), not for its own state — a
/// restart's "terminating connection due to administrator command" must be retried, never
/// turned into a failure of the task; nor is a timeout, whose write may have landed.
fn refused_for_content(error: &WriteError) -> bool {
    match error {
        WriteError::Store(e) => e.is_content_refusal(),
        WriteError::Timeout { .. } => false,
    }
}

/// The completion to write; a result the store would refuse (too large) becomes a permanent
/// failure saying so, so one bad result can never block the batch.
fn complete_params(f: &Finished) -> CompleteParams {
    let mut completion = match &f.action {
        FinishAction::Complete(c) => c.clone(),
        FinishAction::Release => Completion::Cancelled,
    };
    match &mut completion {
        Completion::Succeeded { result: Some(r) }
        | Completion::PartiallySucceeded { result: Some(r) } => {
            leasehold_shared::domain::validate::replace_nul(r);
        }
        Completion::Failed { error } => *error = error.clone().bounded(),
        _ => {}
    }
    let params = CompleteParams {
        key: f.key.clone(),
        completion,
    };
    match params.validate() {
        Ok(()) => params,
        Err(e) => CompleteParams {
            key: f.key.clone(),
            completion: Completion::Failed {
                error: TaskError::permanent(
                    if matches!(params.completion, Completion::Snooze { .. }) {
                        "bad_snooze"
                    } else {
                        "bad_result"
                    },
                    format!("the handler's result was refused: {e}"),
                )
                .bounded(),
            },
        },
    }
}

#[cfg(test)]
mod tests;
