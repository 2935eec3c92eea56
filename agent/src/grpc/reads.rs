//! The read RPCs (ListTasks, CountTasks, GetTask, ListAgents, GetOverview): any authenticated
//! caller, the request validated into a store query, the answer converted with the database's
//! `now`.

use std::time::Duration;

use leasehold_proto::v1 as pb;
use leasehold_proto::wire;
use leasehold_shared::store::{
    ExplainParams, TASK_COUNT_FINISHED_CAP, TaskCountParams, TaskListParams,
};
use leasehold_shared::{Role, TaskId, TaskStatus, TaskType};
use tonic::{Request, Response, Status};

use super::convert::{
    agent_to_wire, attempt_to_wire, blocker_to_wire, invalid, ms, opt_error_code, opt_task_type,
    status_from_wire, task_id_from_wire, task_to_wire, text_without_nul, time_from_wire,
};
use super::page::{fit_page, page_from_wire};
use super::read_cache::ReadCache;
use super::service::{Need, Service};
use super::status::from_store;

/// A `CountTasks` read at least this slow is served again (for ten times as long as it took);
/// a faster one is not, so a count shows what just changed.
pub const COUNTS_SLOW: Duration = Duration::from_millis(100);

/// `CountTasks` answers by filter (type, text, error code).
pub type CountCache =
    ReadCache<(Option<TaskType>, Option<String>, Option<String>), pb::CountTasksResponse>;

impl Service {
    fn stale_after(&self) -> Duration {
        (self.core.settings.heartbeat * 3 + self.core.settings.grace).max(Duration::from_secs(10))
    }

    pub(super) async fn list_tasks_rpc(
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
            due: r.due,
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

    pub(super) async fn count_tasks_rpc(
        &self,
        request: Request<pb::CountTasksRequest>,
    ) -> Result<Response<pb::CountTasksResponse>, Status> {
        self.caller(&request, Need::View).await?;
        let r = request.into_inner();
        text_without_nul("text", &r.text)?;
        let params = TaskCountParams {
            task_type: opt_task_type("task_type", &r.task_type)?,
            text: (!r.text.is_empty()).then_some(r.text),
            error_code: opt_error_code("error_code", &r.error_code)?,
        };
        params.validate().map_err(invalid)?;
        // Counted afresh unless the last count of this filter was slow: then it is served for
        // ten times as long as it took (`read_cache.rs`; the reply's now_ms says when).
        let key = (
            params.task_type.clone(),
            params.text.clone(),
            params.error_code.clone(),
        );
        let store = &self.core.store;
        let reply = self
            .counts
            .get(key, || async move {
                let counts = store.task_count_states(params).await?;
                Ok(pb::CountTasksResponse {
                    queued: counts.queued,
                    scheduled: counts.scheduled,
                    retrying: counts.retrying,
                    running: counts.running,
                    succeeded: counts.succeeded,
                    cancelled: counts.cancelled,
                    dead: counts.dead,
                    finished_cap: TASK_COUNT_FINISHED_CAP,
                    now_ms: ms(counts.now),
                })
            })
            .await
            .map_err(|e| from_store("count_tasks", e))?;
        Ok(Response::new(reply))
    }

    pub(super) async fn get_task_rpc(
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

    #[allow(deprecated)] // `caller_role` is filled for consoles older than `role`
    pub(super) async fn list_agents_rpc(
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
        // The console needs only read-only or not: the system role is an operator to it.
        let (role, caller_role) = wire::write(match caller.role {
            Role::Viewer => Role::Viewer,
            Role::Operator | Role::System => Role::Operator,
        });
        Ok(Response::new(pb::ListAgentsResponse {
            agents: agents.iter().map(agent_to_wire).collect(),
            now_ms,
            answered_by: self.core.id.as_str().to_string(),
            caller_role,
            role,
            stale_after_ms: i64::try_from(self.stale_after().as_millis()).unwrap_or(i64::MAX),
            leader: leader
                .filter(|l| l.term > 0)
                .map(|l| super::convert::leader_to_wire(&l)),
        }))
    }

    pub(super) async fn get_overview_rpc(
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
}
