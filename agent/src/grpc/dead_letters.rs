//! The bulk actions over the dead-letter queue (RequeueDead, PurgeDead): operators only (a
//! viewer is refused and audited before anything is read), the same filter for both, and a
//! dry run that changes nothing and answers with the count and a page of the matching ids.
//! Each is one store transaction that also writes its audit row.
//!
//! Bad input — no filter and no `all`, a filter with `all`, a bad type, code or time, a page
//! without `dry_run` or out of range — is INVALID_ARGUMENT naming the field and changes
//! nothing.

use leasehold_proto::v1 as pb;
use leasehold_shared::TaskId;
use leasehold_shared::store::{
    DeadBulkOutcome, DeadFilter, DeadIdsPage, PurgeDeadParams, RequeueDeadParams,
};
use tonic::{Request, Response, Status};

use super::convert::{invalid, opt_error_code, opt_task_type, time_from_wire};
use super::page::page_from_wire;
use super::service::{Need, Service};
use super::status::from_store;

/// The target the audit rows of these actions name.
const TARGET: &str = "dead-letter queue";

/// The fields RequeueDead and PurgeDead share.
#[derive(Debug, Clone, Copy)]
pub struct DeadWire<'a> {
    pub task_type: &'a str,
    pub error_code: &'a str,
    pub since_ms: i64,
    pub until_ms: i64,
    pub all: bool,
    pub dry_run: bool,
    pub before_id: i64,
    pub limit: u32,
}

impl<'a> From<&'a pb::RequeueDeadRequest> for DeadWire<'a> {
    fn from(r: &'a pb::RequeueDeadRequest) -> Self {
        DeadWire {
            task_type: &r.task_type,
            error_code: &r.error_code,
            since_ms: r.since_ms,
            until_ms: r.until_ms,
            all: r.all,
            dry_run: r.dry_run,
            before_id: r.before_id,
            limit: r.limit,
        }
    }
}

impl<'a> From<&'a pb::PurgeDeadRequest> for DeadWire<'a> {
    fn from(r: &'a pb::PurgeDeadRequest) -> Self {
        DeadWire {
            task_type: &r.task_type,
            error_code: &r.error_code,
            since_ms: r.since_ms,
            until_ms: r.until_ms,
            all: r.all,
            dry_run: r.dry_run,
            before_id: r.before_id,
            limit: r.limit,
        }
    }
}

/// The dead-letter filter of a request; `verb` says what `all` does (`requeue`, `delete`).
pub fn dead_filter_from_wire(w: DeadWire<'_>, verb: &str) -> Result<DeadFilter, Status> {
    let filter = DeadFilter {
        task_type: opt_task_type("task_type", w.task_type)?,
        error_code: opt_error_code("error_code", w.error_code)?,
        since: time_from_wire("since_ms", w.since_ms)?,
        until: time_from_wire("until_ms", w.until_ms)?,
    };
    let empty = filter == DeadFilter::default();
    if empty && !w.all {
        return Err(Status::invalid_argument(format!(
            "give a filter (task_type, error_code, since_ms, until_ms) or set all to {verb} \
             every dead task"
        )));
    }
    if !empty && w.all {
        return Err(Status::invalid_argument(
            "all means every dead task: give it without a filter",
        ));
    }
    Ok(filter)
}

/// The page of ids a dry run lists: `before_id` and `limit` as a listing's (0 = from the
/// newest, 0 = 100, at most 1000), and only with `dry_run`.
pub fn dead_ids_page_from_wire(w: DeadWire<'_>) -> Result<DeadIdsPage, Status> {
    if !w.dry_run {
        for (field, given) in [("before_id", w.before_id != 0), ("limit", w.limit != 0)] {
            if given {
                return Err(Status::invalid_argument(format!(
                    "{field}: only a dry run lists ids (set dry_run)"
                )));
            }
        }
    }
    let page = page_from_wire(w.before_id, w.limit)?;
    Ok(DeadIdsPage {
        before: page.before_id.map(TaskId),
        limit: page.limit,
    })
}

/// The answer's ids and cursor (0 = last page).
fn ids_to_wire(outcome: &DeadBulkOutcome) -> (Vec<i64>, i64) {
    (
        outcome.ids.iter().map(|id| id.0).collect(),
        outcome.next_before.map_or(0, |id| id.0),
    )
}

impl Service {
    pub(super) async fn requeue_dead_rpc(
        &self,
        request: Request<pb::RequeueDeadRequest>,
    ) -> Result<Response<pb::RequeueDeadResponse>, Status> {
        let actor = self
            .caller(
                &request,
                Need::Act {
                    action: "requeue_dead",
                    target: TARGET.into(),
                },
            )
            .await?;
        let r = request.into_inner();
        let params = RequeueDeadParams {
            filter: dead_filter_from_wire((&r).into(), "requeue")?,
            dry_run: r.dry_run,
            page: dead_ids_page_from_wire((&r).into())?,
            actor,
        };
        params.validate().map_err(invalid)?;
        let outcome = self
            .core
            .store
            .task_requeue_dead(params)
            .await
            .map_err(|e| from_store("requeue_dead", e))?;
        let (ids, next_before_id) = ids_to_wire(&outcome);
        Ok(Response::new(pb::RequeueDeadResponse {
            count: outcome.count,
            dry_run: r.dry_run,
            ids,
            next_before_id,
        }))
    }

    pub(super) async fn purge_dead_rpc(
        &self,
        request: Request<pb::PurgeDeadRequest>,
    ) -> Result<Response<pb::PurgeDeadResponse>, Status> {
        let actor = self
            .caller(
                &request,
                Need::Act {
                    action: "purge_dead",
                    target: TARGET.into(),
                },
            )
            .await?;
        let r = request.into_inner();
        let params = PurgeDeadParams {
            filter: dead_filter_from_wire((&r).into(), "delete")?,
            dry_run: r.dry_run,
            page: dead_ids_page_from_wire((&r).into())?,
            actor,
        };
        params.validate().map_err(invalid)?;
        let outcome = self
            .core
            .store
            .task_purge_dead(params)
            .await
            .map_err(|e| from_store("purge_dead", e))?;
        let (ids, next_before_id) = ids_to_wire(&outcome);
        Ok(Response::new(pb::PurgeDeadResponse {
            count: outcome.count,
            dry_run: r.dry_run,
            ids,
            next_before_id,
        }))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn a_bulk_action_needs_a_filter_or_all_but_not_both() {
        let mut r = pb::RequeueDeadRequest::default();
        let e = dead_filter_from_wire((&r).into(), "requeue").unwrap_err();
        assert!(
            e.message().contains("set all to requeue"),
            "{}",
            e.message()
        );
        r.all = true;
        assert_eq!(
            dead_filter_from_wire((&r).into(), "requeue").unwrap(),
            DeadFilter::default()
        );
        r.error_code = "boom".into();
        assert!(dead_filter_from_wire((&r).into(), "requeue").is_err());
        r.all = false;
        assert!(dead_filter_from_wire((&r).into(), "requeue").is_ok());
        let p = pb::PurgeDeadRequest::default();
        let e = dead_filter_from_wire((&p).into(), "delete").unwrap_err();
        assert!(e.message().contains("set all to delete"), "{}", e.message());
    }

    #[test]
    fn only_a_dry_run_lists_a_page_of_ids() {
        let mut r = pb::PurgeDeadRequest {
            all: true,
            ..Default::default()
        };
        assert_eq!(
            dead_ids_page_from_wire((&r).into()).unwrap(),
            DeadIdsPage::default()
        );
        r.before_id = 7;
        let e = dead_ids_page_from_wire((&r).into()).unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.message().starts_with("before_id:"), "{}", e.message());
        r.dry_run = true;
        r.limit = 3;
        assert_eq!(
            dead_ids_page_from_wire((&r).into()).unwrap(),
            DeadIdsPage {
                before: Some(TaskId(7)),
                limit: 3
            }
        );
        r.limit = 1001;
        let e = dead_ids_page_from_wire((&r).into()).unwrap_err();
        assert!(e.message().starts_with("limit:"), "{}", e.message());
        r.limit = 0;
        r.before_id = -1;
        assert!(dead_ids_page_from_wire((&r).into()).is_err());
        let r = pb::RequeueDeadRequest {
            all: true,
            limit: 5,
            ..Default::default()
        };
        let e = dead_ids_page_from_wire((&r).into()).unwrap_err();
        assert!(e.message().starts_with("limit:"), "{}", e.message());
    }
}
