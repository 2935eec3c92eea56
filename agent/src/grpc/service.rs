//! `leasehold.v1.AgentService`: the RPC handlers. Each one authenticates the caller, validates
//! the request into domain types (bad input changes nothing), calls the store (actions write
//! their audit row in the same transaction as their change) and converts the answer.
//!
//! Denied calls — no token, an unknown token, a viewer calling an action — are audited with
//! result `denied` (aggregated per peer, actor and action: [`super::denials`]) and change
//! nothing else.

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::Stream;
use leasehold_proto::v1 as pb;
use leasehold_proto::v1::agent_service_server::AgentService;
use leasehold_shared::domain::policy::DEFAULT_MAX_ATTEMPTS;
use leasehold_shared::domain::{PolicyPatch, PolicyScope};
use leasehold_shared::store::{
    AuditEntry, AuditResult, CancelOutcome, CancelParams, EnqueueAuditedParams, ExplainParams,
    NewTask, PolicySetParams, RequeueDeadParams, RequeueParams, TaskListParams,
};
use leasehold_shared::{Actor, Role, TaskId, TaskStatus};
use tonic::{Request, Response, Status};

use super::auth::Auth;
use super::convert::{
    agent_to_wire, attempt_to_wire, blocker_to_wire, dead_filter_from_wire, duration_from_wire,
    invalid, json_without_nul, ms, opt_error_code, opt_task_type, status_from_wire, status_to_wire,
    task_id_from_wire, task_to_wire, task_type_from_wire, text_without_nul, time_from_wire,
};
use super::denials::{Denials, UNKNOWN_PEER};
use super::hub::HubHandle;
use super::overview::OverviewCache;
use super::page::{fit_page, page_from_wire};
use super::peer::Peer;
use super::status::from_store;
use crate::handler::StopReason;
use crate::runtime::core::Core;
use crate::runtime::feed::FeedEvent;

/// Largest local concurrency limit.
pub use leasehold_shared::domain::policy::MAX_LOCAL_CONCURRENCY;
/// Audit action of global and type policy changes (limits, pause, resume), as the store
/// writes it.
pub const POLICY_ACTION: &str = "policy_set";
/// Audit action of a change of an agent's local limit.
pub const LOCAL_LIMIT_ACTION: &str = "set_concurrency";
/// Longest a Cancel may wait for a running task to end.
pub const MAX_CANCEL_WAIT: Duration = Duration::from_secs(300);
/// Longest target (in characters) of the audit row of a refused call.
pub const MAX_DENIED_TARGET_CHARS: usize = 200;

/// The target of a refused call's audit row, from unvalidated input: control characters
/// escaped (PostgreSQL text cannot hold NUL, and the row must still be written) and cut to
/// [`MAX_DENIED_TARGET_CHARS`], so a caller without a valid token cannot write arbitrary text
/// into the audit log.
fn denied_target(raw: &str) -> String {
    let mut out = String::new();
    for (n, c) in raw.chars().enumerate() {
        if n == MAX_DENIED_TARGET_CHARS {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

/// The service of one agent.
pub struct Service {
    pub(crate) core: Arc<Core>,
    pub(crate) hub: HubHandle,
    pub(crate) auth: Arc<Auth>,
    pub(crate) overview: Arc<OverviewCache>,
    /// Where refused actions are counted and audited.
    pub(crate) denials: Arc<Denials>,
}

/// What a call needs.
pub(super) enum Need<'a> {
    View,
    Act { action: &'a str, target: String },
}

impl Service {
    /// The caller, allowed to do what the call needs (see [`Auth::authenticate`] for who is
    /// who); a refused action is audited through the aggregation of denied calls
    /// ([`Denials`]): the first of its peer, actor and action in a minute at once, the rest
    /// counted into one row.
    pub(super) async fn caller<T>(
        &self,
        request: &Request<T>,
        need: Need<'_>,
    ) -> Result<Actor, Status> {
        let peer = Peer::of(request);
        let (actor, status) = match self.auth.authenticate(request.metadata(), peer.as_ref()) {
            Ok(caller) => match (&need, caller.actor.role) {
                (Need::View, _) | (Need::Act { .. }, Role::Operator) => return Ok(caller.actor),
                (Need::Act { action, .. }, _) => {
                    let status = caller.refusal(action);
                    (caller.actor, status)
                }
            },
            Err(rejected) => (
                Actor {
                    name: rejected.actor,
                    role: Role::Viewer,
                },
                rejected.status,
            ),
        };
        let mut first = true;
        if let Need::Act { action, target } = need {
            let entry = AuditEntry {
                actor,
                action: action.to_string(),
                // The target may be what a bad request carried: keep the row small and
                // storable (no NUL).
                target: denied_target(&target),
                params: None,
                result: AuditResult::Denied,
                detail: Some(status.message().chars().take(500).collect()),
            };
            first = self.denials.record(peer.as_ref(), entry).await;
        }
        let peer = peer
            .as_ref()
            .map_or_else(|| UNKNOWN_PEER.to_string(), Peer::label);
        if first {
            tracing::warn!(code = ?status.code(), message = status.message(), peer, "call refused");
        } else {
            // A repeat within its window: counted, not logged at warn (a flood must not fill
            // the log either).
            tracing::debug!(code = ?status.code(), peer, "call refused again");
        }
        Err(status)
    }

    fn stale_after(&self) -> Duration {
        (self.core.settings.heartbeat * 3 + self.core.settings.grace).max(Duration::from_secs(10))
    }

    async fn audit(&self, entry: AuditEntry) -> Result<(), Status> {
        self.core
            .store
            .audit_record(entry)
            .await
            .map_err(|e| from_store("audit", e))
    }

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
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchUpdate, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl AgentService for Service {
    type WatchStream = WatchStream;

    async fn watch(
        &self,
        request: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let actor = self.caller(&request, Need::View).await?;
        let stream = self.hub.subscribe(&actor).await?;
        Ok(Response::new(Box::pin(stream)))
    }

    async fn list_tasks(
        &self,
        request: Request<pb::ListTasksRequest>,
    ) -> Result<Response<pb::ListTasksResponse>, Status> {
        self.caller(&request, Need::View).await?;
        let r = request.into_inner();
        let statuses = r
            .statuses
            .iter()
            .map(|s| status_from_wire("statuses", *s))
            .collect::<Result<Vec<_>, _>>()?;
        let paging = page_from_wire(r.before_id, r.limit)?;
        text_without_nul("text", &r.text)?;
        let params = TaskListParams {
            statuses,
            task_type: opt_task_type("task_type", &r.task_type)?,
            text: (!r.text.is_empty()).then_some(r.text),
            before: paging.before_id.map(TaskId),
            limit: paging.limit,
            error_code: opt_error_code("error_code", &r.error_code)?,
            since: time_from_wire("since_ms", r.since_ms)?,
        };
        params.validate().map_err(invalid)?;
        let store = &self.core.store;
        let page = store
            .task_list(params)
            .await
            .map_err(|e| from_store("list_tasks", e))?;
        let now = store.db_now().await.map_err(|e| from_store("db_now", e))?;
        let mut tasks: Vec<pb::Task> = page.tasks.iter().map(task_to_wire).collect();
        let next_before_id = fit_page(&mut tasks, |t| t.id)
            .or(page.next_before.map(|t| t.0))
            .unwrap_or(0);
        Ok(Response::new(pb::ListTasksResponse {
            tasks,
            next_before_id,
            now_ms: ms(now),
        }))
    }

    async fn get_task(
        &self,
        request: Request<pb::GetTaskRequest>,
    ) -> Result<Response<pb::GetTaskResponse>, Status> {
        self.caller(&request, Need::View).await?;
        let id = task_id_from_wire("id", request.get_ref().id)?;
        let store = &self.core.store;
        let detail = store
            .task_get(id)
            .await
            .map_err(|e| from_store("get_task", e))?
            .ok_or_else(|| Status::not_found(format!("task {id} does not exist")))?;
        let blockers = if detail.task.status == TaskStatus::Running {
            Vec::new()
        } else {
            store
                .task_explain(ExplainParams {
                    id,
                    agent_stale_after: self.stale_after(),
                })
                .await
                .map_err(|e| from_store("get_task", e))?
        };
        Ok(Response::new(pb::GetTaskResponse {
            task: Some(task_to_wire(&detail.task)),
            attempts: detail.attempts.iter().map(attempt_to_wire).collect(),
            why_not_running: blockers
                .iter()
                .map(|b| b.message.as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            blockers: blockers.iter().map(blocker_to_wire).collect(),
            now_ms: ms(detail.now),
        }))
    }

    async fn list_agents(
        &self,
        request: Request<pb::ListAgentsRequest>,
    ) -> Result<Response<pb::ListAgentsResponse>, Status> {
        let caller = self.caller(&request, Need::View).await?;
        let store = &self.core.store;
        let agents = store
            .agent_list()
            .await
            .map_err(|e| from_store("list_agents", e))?;
        // The registry is what consoles find the fleet by: an unreadable leader row costs the
        // leader line, not the answer.
        let leader = match store.leader_get().await {
            Ok(leader) => leader,
            Err(error) => {
                tracing::warn!(%error, "cannot read the leader row");
                None
            }
        };
        let now_ms = match (agents.first(), &leader) {
            (Some(a), _) => ms(a.now),
            (None, Some(l)) => ms(l.now),
            (None, None) => ms(store.db_now().await.map_err(|e| from_store("db_now", e))?),
        };
        Ok(Response::new(pb::ListAgentsResponse {
            agents: agents.iter().map(agent_to_wire).collect(),
            now_ms,
            answered_by: self.core.id.as_str().to_string(),
            caller_role: match caller.role {
                Role::Viewer => "viewer",
                Role::Operator | Role::System => "operator",
            }
            .to_string(),
            stale_after_ms: i64::try_from(self.stale_after().as_millis()).unwrap_or(i64::MAX),
            leader: leader
                .filter(|l| l.term > 0)
                .map(|l| super::convert::leader_to_wire(&l)),
        }))
    }

    async fn get_overview(
        &self,
        request: Request<pb::GetOverviewRequest>,
    ) -> Result<Response<pb::GetOverviewResponse>, Status> {
        self.caller(&request, Need::View).await?;
        let overview = self
            .overview
            .get(self.core.store.as_ref())
            .await
            .map_err(|e| from_store("get_overview", e))?;
        Ok(Response::new(pb::GetOverviewResponse::clone(&overview)))
    }

    async fn enqueue(
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
        let priority = i16::try_from(r.priority).map_err(|_| {
            Status::invalid_argument(format!(
                "priority: {} is not within -32768..=32767",
                r.priority
            ))
        })?;
        let mut task = NewTask::new(task_type, payload).with_priority(priority);
        task.max_attempts = match r.max_attempts {
            0 => DEFAULT_MAX_ATTEMPTS,
            n => n,
        };
        task.delay = duration_from_wire("delay_ms", r.delay_ms)?;
        task.timeout = duration_from_wire("timeout_ms", r.timeout_ms)?;
        task.deadline = time_from_wire("deadline_at_ms", r.deadline_at_ms)?;
        task.idempotency_key = (!r.idempotency_key.is_empty()).then_some(r.idempotency_key);
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
        }))
    }

    async fn cancel(
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
        let (mut outcome_name, holder) = match &outcome {
            CancelOutcome::Cancelled => ("cancelled".to_string(), String::new()),
            CancelOutcome::Requested { owner, epoch } => {
                self.stop_here(id, owner, epoch.0);
                ("cancel_requested".into(), owner.as_str().to_string())
            }
            CancelOutcome::AlreadyRequested { owner, epoch } => {
                self.stop_here(id, owner, epoch.0);
                ("already_requested".into(), owner.as_str().to_string())
            }
        };
        let status = match outcome {
            CancelOutcome::Cancelled => TaskStatus::Cancelled,
            _ if r.wait => {
                let status = self.wait_terminal(id, wait).await?;
                if status.is_terminal() {
                    outcome_name = status.as_str().to_string();
                }
                status
            }
            _ => TaskStatus::CancelRequested,
        };
        Ok(Response::new(pb::CancelResponse {
            outcome: outcome_name,
            status: status_to_wire(status) as i32,
            holder,
        }))
    }

    async fn requeue(
        &self,
        request: Request<pb::RequeueRequest>,
    ) -> Result<Response<pb::RequeueResponse>, Status> {
        let target = format!("task:{}", request.get_ref().id);
        let actor = self
            .caller(
                &request,
                Need::Act {
                    action: "requeue",
                    target,
                },
            )
            .await?;
        let id = task_id_from_wire("id", request.get_ref().id)?;
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

    async fn requeue_dead(
        &self,
        request: Request<pb::RequeueDeadRequest>,
    ) -> Result<Response<pb::RequeueDeadResponse>, Status> {
        let actor = self
            .caller(
                &request,
                Need::Act {
                    action: "requeue_dead",
                    target: "dead-letter queue".into(),
                },
            )
            .await?;
        let r = request.into_inner();
        let filter = dead_filter_from_wire(&r)?;
        let params = RequeueDeadParams {
            filter,
            dry_run: r.dry_run,
            actor,
        };
        params.validate().map_err(invalid)?;
        let count = self
            .core
            .store
            .task_requeue_dead(params)
            .await
            .map_err(|e| from_store("requeue_dead", e))?;
        Ok(Response::new(pb::RequeueDeadResponse {
            count,
            dry_run: r.dry_run,
        }))
    }

    async fn set_concurrency(
        &self,
        request: Request<pb::SetConcurrencyRequest>,
    ) -> Result<Response<pb::SetConcurrencyResponse>, Status> {
        use pb::set_concurrency_request::Scope;
        let (action, target) = match &request.get_ref().scope {
            Some(Scope::Global(_)) => (POLICY_ACTION, "policy:*".to_string()),
            Some(Scope::TaskType(t)) => (POLICY_ACTION, format!("policy:{t}")),
            Some(Scope::AgentLocal(_)) => (LOCAL_LIMIT_ACTION, format!("agent:{}", self.core.id)),
            None => (POLICY_ACTION, "policy:?".to_string()),
        };
        let actor = self
            .caller(
                &request,
                Need::Act {
                    action,
                    target: target.clone(),
                },
            )
            .await?;
        let r = request.into_inner();
        if r.unlimited && r.limit != 0 {
            return Err(Status::invalid_argument(
                "limit: give either a limit or unlimited, not both",
            ));
        }
        let scope = match r.scope {
            None => {
                return Err(Status::invalid_argument(
                    "scope: give global, task_type or agent_local",
                ));
            }
            Some(Scope::Global(false)) | Some(Scope::AgentLocal(false)) => {
                return Err(Status::invalid_argument(
                    "scope: global and agent_local must be true when given",
                ));
            }
            Some(Scope::AgentLocal(true)) => {
                if r.unlimited || !(1..=MAX_LOCAL_CONCURRENCY).contains(&r.limit) {
                    return Err(Status::invalid_argument(format!(
                        "limit: a local limit must be within 1..={MAX_LOCAL_CONCURRENCY}"
                    )));
                }
                let previous = u32::try_from(self.core.book.limit()).unwrap_or(u32::MAX);
                // The audit row first: if it cannot be written, nothing changes.
                self.audit(AuditEntry {
                    actor,
                    action: LOCAL_LIMIT_ACTION.into(),
                    target,
                    params: Some(serde_json::json!({ "limit": r.limit, "previous": previous })),
                    result: if previous == r.limit {
                        AuditResult::Noop
                    } else {
                        AuditResult::Applied
                    },
                    detail: Some(format!("local limit {previous} -> {}", r.limit)),
                })
                .await?;
                self.core.book.set_limit(r.limit);
                self.core.wake_claimers();
                tracing::info!(
                    previous,
                    limit = r.limit,
                    "local concurrency changed by an operator"
                );
                return Ok(Response::new(pb::SetConcurrencyResponse {
                    limit: Some(r.limit),
                    previous: Some(previous),
                }));
            }
            Some(Scope::Global(true)) => PolicyScope::Global,
            Some(Scope::TaskType(t)) => PolicyScope::Type(task_type_from_wire("task_type", &t)?),
        };
        let patch = PolicyPatch {
            max_concurrency: Some((!r.unlimited).then_some(r.limit)),
            ..Default::default()
        };
        patch.validate(&scope).map_err(invalid)?;
        let change = self
            .core
            .store
            .policy_change(PolicySetParams {
                scope,
                patch,
                actor,
            })
            .await
            .map_err(|e| from_store("set_concurrency", e))?;
        Ok(Response::new(pb::SetConcurrencyResponse {
            limit: change.after.max_concurrency,
            previous: change.before.max_concurrency,
        }))
    }

    async fn pause_type(
        &self,
        request: Request<pb::PauseTypeRequest>,
    ) -> Result<Response<pb::PauseTypeResponse>, Status> {
        let changed = self
            .set_paused(&request, request.get_ref().task_type.clone(), true)
            .await?;
        // Applied either way (as `schedules add` is); a type nobody serves is likely misspelt.
        let mut warnings = Vec::new();
        if let Ok(task_type) = leasehold_shared::TaskType::new(request.get_ref().task_type.as_str())
            && let Some(w) =
                crate::runtime::scheduler::unserved_warning(&self.core, &task_type).await
        {
            warnings.push(w);
        }
        Ok(Response::new(pb::PauseTypeResponse { changed, warnings }))
    }

    async fn resume_type(
        &self,
        request: Request<pb::ResumeTypeRequest>,
    ) -> Result<Response<pb::ResumeTypeResponse>, Status> {
        let changed = self
            .set_paused(&request, request.get_ref().task_type.clone(), false)
            .await?;
        Ok(Response::new(pb::ResumeTypeResponse { changed }))
    }

    async fn drain(
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

    async fn list_schedules(
        &self,
        request: Request<pb::ListSchedulesRequest>,
    ) -> Result<Response<pb::ListSchedulesResponse>, Status> {
        self.list_schedules_rpc(request).await
    }

    async fn add_schedule(
        &self,
        request: Request<pb::AddScheduleRequest>,
    ) -> Result<Response<pb::AddScheduleResponse>, Status> {
        self.add_schedule_rpc(request).await
    }

    async fn remove_schedule(
        &self,
        request: Request<pb::RemoveScheduleRequest>,
    ) -> Result<Response<pb::RemoveScheduleResponse>, Status> {
        self.remove_schedule_rpc(request).await
    }

    async fn set_schedule_enabled(
        &self,
        request: Request<pb::SetScheduleEnabledRequest>,
    ) -> Result<Response<pb::SetScheduleEnabledResponse>, Status> {
        self.set_schedule_enabled_rpc(request).await
    }

    async fn trigger_schedule(
        &self,
        request: Request<pb::TriggerScheduleRequest>,
    ) -> Result<Response<pb::TriggerScheduleResponse>, Status> {
        self.trigger_schedule_rpc(request).await
    }

    async fn list_locks(
        &self,
        request: Request<pb::ListLocksRequest>,
    ) -> Result<Response<pb::ListLocksResponse>, Status> {
        self.list_locks_rpc(request).await
    }

    async fn acquire_lock(
        &self,
        request: Request<pb::AcquireLockRequest>,
    ) -> Result<Response<pb::AcquireLockResponse>, Status> {
        self.acquire_lock_rpc(request).await
    }

    async fn renew_lock(
        &self,
        request: Request<pb::RenewLockRequest>,
    ) -> Result<Response<pb::RenewLockResponse>, Status> {
        self.renew_lock_rpc(request).await
    }

    async fn release_lock(
        &self,
        request: Request<pb::ReleaseLockRequest>,
    ) -> Result<Response<pb::ReleaseLockResponse>, Status> {
        self.release_lock_rpc(request).await
    }

    async fn create_shard_group(
        &self,
        request: Request<pb::CreateShardGroupRequest>,
    ) -> Result<Response<pb::CreateShardGroupResponse>, Status> {
        self.create_shard_group_rpc(request).await
    }

    async fn list_shard_groups(
        &self,
        request: Request<pb::ListShardGroupsRequest>,
    ) -> Result<Response<pb::ListShardGroupsResponse>, Status> {
        self.list_shard_groups_rpc(request).await
    }

    async fn list_shards(
        &self,
        request: Request<pb::ListShardsRequest>,
    ) -> Result<Response<pb::ListShardsResponse>, Status> {
        self.list_shards_rpc(request).await
    }

    async fn list_audit(
        &self,
        request: Request<pb::ListAuditRequest>,
    ) -> Result<Response<pb::ListAuditResponse>, Status> {
        self.list_audit_rpc(request).await
    }

    async fn list_suspect_leases(
        &self,
        request: Request<pb::ListSuspectLeasesRequest>,
    ) -> Result<Response<pb::ListSuspectLeasesResponse>, Status> {
        self.list_suspect_leases_rpc(request).await
    }
}

impl Service {
    async fn set_paused<T>(
        &self,
        request: &Request<T>,
        task_type: String,
        paused: bool,
    ) -> Result<bool, Status> {
        let action = if paused { "pause" } else { "resume" };
        // Refusals are audited under the name the store gives the change it would have made.
        let actor = self
            .caller(
                request,
                Need::Act {
                    action: POLICY_ACTION,
                    target: format!("policy:{task_type}"),
                },
            )
            .await?;
        let scope = PolicyScope::Type(task_type_from_wire("task_type", &task_type)?);
        let change = self
            .core
            .store
            .policy_change(PolicySetParams {
                scope,
                patch: PolicyPatch {
                    paused: Some(paused),
                    ..Default::default()
                },
                actor,
            })
            .await
            .map_err(|e| from_store(action, e))?;
        Ok(change.before.paused != change.after.paused)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn denied_targets_are_escaped_and_bounded() {
        assert_eq!(denied_target("type:email.send"), "type:email.send");
        assert_eq!(denied_target("type:a\0b\u{1b}"), "type:a\\u{0}b\\u{1b}");
        let long = denied_target(&"x".repeat(5000));
        assert_eq!(long.chars().count(), MAX_DENIED_TARGET_CHARS + 1);
        assert!(long.ends_with('…'));
    }
}
