//! The task and agent actions (Enqueue, Cancel, Requeue, Drain; the bulk ones over the
//! dead-letter queue are `dead_letters.rs`): operators only,
//! each audited — by the store in the same transaction as its change, or (Drain) by a row
//! written before it — and what they need: the payload check shared with AddSchedule, stopping
//! a cancelled execution this agent runs, and a Cancel's bounded wait for the task to end.

use std::time::{Duration, Instant};

use leasehold_proto::v1 as pb;
use leasehold_proto::wire;
use leasehold_shared::domain::outcome::CancelOutcome as Answer;
use leasehold_shared::domain::validate::check_concurrency_key;
use leasehold_shared::domain::{AuditResult, OnConflict};
use leasehold_shared::store::{
    AuditEntry, CancelOutcome, CancelParams, DeleteTaskParams, EnqueueAuditedParams, NewTask,
    RequeueParams, RunNowParams,
};
use leasehold_shared::{Actor, TaskId, TaskStatus};
use tonic::{Request, Response, Status};

use super::convert::{
    duration_from_wire, invalid, json_without_nul, on_conflict_from_wire, status_to_wire,
    task_id_from_wire, task_to_wire, task_type_from_wire, text_without_nul, time_from_wire,
    unique_for_from_wire,
};
use super::service::{Need, Service};
use super::status::from_store;
use crate::handler::StopReason;
use crate::runtime::feed::FeedEvent;

/// Longest a Cancel may wait for a running task to end.
pub const MAX_CANCEL_WAIT: Duration = Duration::from_secs(300);

impl Service {
    /// Stops the execution at once when this agent holds the lease.
    fn stop_here(&self, id: TaskId, owner: &leasehold_shared::AgentId, epoch: i64) -> bool {
        if owner != &self.core.id {
            return false;
        }
        let epoch = leasehold_shared::LeaseEpoch(epoch);
        let Some(stop) = self.core.book.cancel_here(id, epoch) else {
            return false;
        };
        self.core
            .feed
            .push(FeedEvent::CancelRequested { id, epoch });
        stop.stop(StopReason::Cancelled);
        tracing::info!(
            task.id = id.0,
            "cancel requested by an operator: stopping the execution"
        );
        true
    }

    /// Refuses a payload the handler of its type would refuse
    /// ([`crate::handlers::check_enqueue`]): INVALID_ARGUMENT naming the field and the problem,
    /// and a `failed` audit row of `action` on `target` saying why (the refusal stands even
    /// when that row cannot be written; the failure is logged).
    pub(super) async fn check_payload(
        &self,
        actor: &Actor,
        action: &str,
        target: String,
        task_type: &leasehold_shared::TaskType,
        payload: &serde_json::Value,
    ) -> Result<(), Status> {
        let Err(refusal) = crate::handlers::check_enqueue(&self.core.handlers, task_type, payload)
        else {
            return Ok(());
        };
        let message = format!(
            "payload_json: not a valid {task_type} payload: {}",
            refusal.message
        );
        let entry = AuditEntry {
            actor: actor.clone(),
            action: action.to_string(),
            target,
            params: None,
            result: AuditResult::Failed,
            detail: Some(message.chars().take(500).collect()),
        };
        if let Err(error) = self.audit(entry).await {
            tracing::warn!(%error, action, "cannot audit a refused payload");
        }
        Err(Status::invalid_argument(message))
    }

    async fn wait_terminal(&self, id: TaskId, wait: Duration) -> Result<TaskStatus, Status> {
        let until = Instant::now() + wait;
        loop {
            let detail = self
                .core
                .store
                .task_get(id)
                .await
                .map_err(|e| from_store("cancel", e))?
                .ok_or_else(|| Status::not_found(format!("task {id} does not exist")))?;
            let status = detail.task.status;
            if status.is_terminal() || Instant::now() >= until {
                return Ok(status);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(super) async fn enqueue_rpc(
        &self,
        request: Request<pb::EnqueueRequest>,
    ) -> Result<Response<pb::EnqueueResponse>, Status> {
        let target = format!("type:{}", request.get_ref().task_type);
        let actor = self
            .caller(
                &request,
                Need::Act {
                    action: "enqueue",
                    target,
                },
            )
            .await?;
        let r = request.into_inner();
        let task_type = task_type_from_wire("task_type", &r.task_type)?;
        let payload: serde_json::Value = if r.payload_json.trim().is_empty() {
            serde_json::json!({})
        } else {
            serde_json::from_str(&r.payload_json).map_err(|e| {
                Status::invalid_argument(format!("payload_json: not valid JSON: {e}"))
            })?
        };
        json_without_nul("payload_json", &payload)?;
        // An oversized payload is refused for its size before its handler looks at it.
        leasehold_shared::domain::validate::payload_text(&payload, self.core.store.input_limits())
            .map_err(|e| Status::invalid_argument(format!("payload_json: {e}")))?;
        self.check_payload(
            &actor,
            "enqueue",
            format!("type:{task_type}"),
            &task_type,
            &payload,
        )
        .await?;
        text_without_nul("idempotency_key", &r.idempotency_key)?;
        // Refused here, naming the wire's field, before anything is written (the store checks
        // it again).
        let concurrency_key = (!r.concurrency_key.is_empty()).then_some(r.concurrency_key);
        if let Some(key) = &concurrency_key {
            check_concurrency_key(key).map_err(invalid)?;
        }
        let priority = i16::try_from(r.priority).map_err(|_| {
            Status::invalid_argument(format!(
                "priority: {} is not within -32768..=32767",
                r.priority
            ))
        })?;
        let mut task = NewTask::new(task_type, payload).with_priority(priority);
        // 0 (unset): the type's policy, else the global one's, else the default; the store
        // resolves it in the insert.
        task.max_attempts = (r.max_attempts != 0).then_some(r.max_attempts);
        task.delay = duration_from_wire("delay_ms", r.delay_ms)?;
        task.timeout = duration_from_wire("timeout_ms", r.timeout_ms)?;
        task.deadline = time_from_wire("deadline_at_ms", r.deadline_at_ms)?;
        task.idempotency_key = (!r.idempotency_key.is_empty()).then_some(r.idempotency_key);
        task.concurrency_key = concurrency_key;
        task.on_conflict = on_conflict_from_wire(r.on_conflict)?;
        task.unique_for = unique_for_from_wire(r.unique_for_ms)?;
        if task.idempotency_key.is_none() {
            if task.on_conflict != OnConflict::Skip {
                return Err(Status::invalid_argument(format!(
                    "on_conflict: {} needs an idempotency_key",
                    task.on_conflict
                )));
            }
            if task.unique_for.is_some() {
                return Err(Status::invalid_argument(
                    "unique_for_ms: needs an idempotency_key",
                ));
            }
        }
        let store = &self.core.store;
        let enqueued = store
            .task_enqueue_audited(EnqueueAuditedParams { task, actor })
            .await
            .map_err(|e| from_store("enqueue", e))?;
        let task = store
            .task_get(enqueued.id)
            .await
            .map_err(|e| from_store("enqueue", e))?
            .map(|d| task_to_wire(&d.task));
        Ok(Response::new(pb::EnqueueResponse {
            id: enqueued.id.0,
            created: enqueued.created,
            task,
            outcome: wire::enqueue_outcome_to_wire(enqueued.outcome).into(),
            existing_status: enqueued
                .existing_status
                .map_or(pb::TaskStatus::Unspecified, status_to_wire)
                .into(),
            released_from: enqueued.released_from.map_or(0, |id| id.0),
        }))
    }

    pub(super) async fn cancel_rpc(
        &self,
        request: Request<pb::CancelRequest>,
    ) -> Result<Response<pb::CancelResponse>, Status> {
        let target = format!("task:{}", request.get_ref().id);
        let actor = self
            .caller(
                &request,
                Need::Act {
                    action: "cancel",
                    target,
                },
            )
            .await?;
        let r = request.into_inner();
        let id = task_id_from_wire("id", r.id)?;
        let wait = match duration_from_wire("wait_ms", r.wait_ms)? {
            Some(w) if w > MAX_CANCEL_WAIT => {
                return Err(Status::invalid_argument(format!(
                    "wait_ms: {} ms is above {} s",
                    w.as_millis(),
                    MAX_CANCEL_WAIT.as_secs()
                )));
            }
            Some(w) => w,
            None => self.core.settings.heartbeat * 2 + self.core.settings.stop_grace * 2,
        };
        let outcome = self
            .core
            .store
            .task_cancel(CancelParams { id, actor })
            .await
            .map_err(|e| from_store("cancel", e))?;
        let (mut answer, holder) = match &outcome {
            CancelOutcome::Cancelled => (Answer::Cancelled, String::new()),
            CancelOutcome::Requested { owner, epoch } => {
                self.stop_here(id, owner, epoch.0);
                (Answer::CancelRequested, owner.as_str().to_string())
            }
            CancelOutcome::AlreadyRequested { owner, epoch } => {
                self.stop_here(id, owner, epoch.0);
                (Answer::AlreadyRequested, owner.as_str().to_string())
            }
        };
        let status = match outcome {
            CancelOutcome::Cancelled => TaskStatus::Cancelled,
            _ if r.wait => {
                let status = self.wait_terminal(id, wait).await?;
                if let Some(finished) = finished_first(status) {
                    answer = finished;
                }
                status
            }
            _ => TaskStatus::CancelRequested,
        };
        let (cancel_outcome, outcome) = wire::write(answer);
        #[allow(deprecated)] // `outcome` is filled for consoles older than `cancel_outcome`
        let response = pb::CancelResponse {
            outcome,
            cancel_outcome,
            status: status_to_wire(status) as i32,
            holder,
        };
        Ok(Response::new(response))
    }

    /// The operator acting with `action` on task `wire_id` (refused, and audited as denied,
    /// when the caller may not act), and the id checked.
    async fn task_operator<T>(
        &self,
        request: &Request<T>,
        action: &'static str,
        wire_id: i64,
    ) -> Result<(Actor, TaskId), Status> {
        let target = format!("task:{wire_id}");
        let actor = self.caller(request, Need::Act { action, target }).await?;
        Ok((actor, task_id_from_wire("id", wire_id)?))
    }

    pub(super) async fn requeue_rpc(
        &self,
        request: Request<pb::RequeueRequest>,
    ) -> Result<Response<pb::RequeueResponse>, Status> {
        let (actor, id) = self
            .task_operator(&request, "requeue", request.get_ref().id)
            .await?;
        let out = self
            .core
            .store
            .task_requeue(RequeueParams { id, actor })
            .await
            .map_err(|e| from_store("requeue", e))?;
        Ok(Response::new(pb::RequeueResponse {
            previous: status_to_wire(out.previous) as i32,
        }))
    }

    pub(super) async fn run_now_rpc(
        &self,
        request: Request<pb::RunNowRequest>,
    ) -> Result<Response<pb::RunNowResponse>, Status> {
        let (actor, id) = self
            .task_operator(&request, "run_now", request.get_ref().id)
            .await?;
        let out = self
            .core
            .store
            .task_run_now(RunNowParams { id, actor })
            .await
            .map_err(|e| from_store("run_now", e))?;
        Ok(Response::new(pb::RunNowResponse {
            status: status_to_wire(out.status) as i32,
            moved: out.moved,
        }))
    }

    pub(super) async fn delete_task_rpc(
        &self,
        request: Request<pb::DeleteTaskRequest>,
    ) -> Result<Response<pb::DeleteTaskResponse>, Status> {
        let (actor, id) = self
            .task_operator(&request, "delete", request.get_ref().id)
            .await?;
        let out = self
            .core
            .store
            .task_delete(DeleteTaskParams { id, actor })
            .await
            .map_err(|e| from_store("delete_task", e))?;
        Ok(Response::new(pb::DeleteTaskResponse {
            previous: status_to_wire(out.previous) as i32,
        }))
    }

    pub(super) async fn drain_rpc(
        &self,
        request: Request<pb::DrainRequest>,
    ) -> Result<Response<pb::DrainResponse>, Status> {
        let target = format!("agent:{}", self.core.id);
        let actor = self
            .caller(
                &request,
                Need::Act {
                    action: "drain",
                    target: target.clone(),
                },
            )
            .await?;
        let already = self.core.drain.is_cancelled() || self.core.is_draining();
        self.audit(AuditEntry {
            actor,
            action: "drain".into(),
            target,
            params: None,
            result: if already {
                AuditResult::Noop
            } else {
                AuditResult::Applied
            },
            detail: None,
        })
        .await?;
        let held = u32::try_from(self.core.book.len()).unwrap_or(u32::MAX);
        self.core.drain.cancel();
        tracing::info!(held, "drain requested by an operator");
        Ok(Response::new(pb::DrainResponse { held }))
    }
}

/// What a cancel that waited reports when the task finished: its final status, or `None` while
/// it has not finished.
fn finished_first(status: TaskStatus) -> Option<Answer> {
    match status {
        TaskStatus::Succeeded => Some(Answer::Succeeded),
        TaskStatus::PartiallySucceeded => Some(Answer::PartiallySucceeded),
        TaskStatus::Dead => Some(Answer::Dead),
        TaskStatus::Cancelled => Some(Answer::Cancelled),
        TaskStatus::Queued
        | TaskStatus::Running
        | TaskStatus::RetryWait
        | TaskStatus::CancelRequested => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancel_that_finds_the_task_finished_reports_its_status_word() {
        for s in TaskStatus::ALL {
            let answer = finished_first(s);
            assert_eq!(answer.is_some(), s.is_terminal(), "{s:?}");
            if let Some(a) = answer {
                // The word older consoles read is the status, as before the enum.
                assert_eq!(wire::write(a).1, s.as_str());
            }
        }
    }
}
