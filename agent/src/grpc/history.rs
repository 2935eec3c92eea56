//! `GetHistory`: the queue history the leader's sampler keeps in the database
//! (`store/queue_history.rs`), for consoles. Any authenticated caller, viewers included. Every
//! agent answers from the shared database, so a console asks one.

use leasehold_proto::v1 as pb;
use leasehold_shared::store::{HISTORY_DEFAULT_MINUTES, HistoryReadParams, QueueHistory};
use tonic::{Request, Response, Status};

use super::convert::task_type_from_wire;
use super::service::{Need, Service};
use super::status::from_store;

impl Service {
    pub(super) async fn get_history_rpc(
        &self,
        request: Request<pb::GetHistoryRequest>,
    ) -> Result<Response<pb::GetHistoryResponse>, Status> {
        self.caller(&request, Need::View).await?;
        let r = request.get_ref();
        let task_type = if r.task_type.is_empty() {
            None
        } else {
            Some(task_type_from_wire("task_type", &r.task_type)?)
        };
        let minutes = if r.minutes == 0 {
            HISTORY_DEFAULT_MINUTES
        } else {
            r.minutes
        };
        let params = HistoryReadParams { task_type, minutes };
        params
            .validate()
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let history = self
            .core
            .store
            .queue_history_read(params)
            .await
            .map_err(|e| from_store("get_history", e))?;
        Ok(Response::new(to_wire(history, r.task_type.clone())))
    }
}

fn to_wire(h: QueueHistory, task_type: String) -> pb::GetHistoryResponse {
    pb::GetHistoryResponse {
        points: h
            .points
            .iter()
            .map(|p| pb::HistoryPoint {
                minute_ms: p.minute.timestamp_millis(),
                enqueued: p.counts.enqueued,
                succeeded: p.counts.succeeded,
                failed: p.counts.failed,
                dead_lettered: p.counts.dead_lettered,
                cancelled: p.counts.cancelled,
                waiting: p.waiting,
                running: p.running,
                counted: p.counted,
            })
            .collect(),
        now_ms: h.now.timestamp_millis(),
        task_type,
    }
}
