//! The ListAudit RPC: a filtered page of the audit log, newest first. Operator role only: the
//! log names the argv of exec tasks and the peers of refused calls, which a viewer token may
//! not read (its call is refused, and audited as any refused call is). Bad filters are
//! INVALID_ARGUMENT naming the field; nothing is read.

use leasehold_proto::v1 as pb;
use leasehold_shared::store::{AuditListParams, AuditRecord, AuditResult};
use tonic::{Request, Response, Status};

use super::convert::{invalid, ms, text_without_nul, time_from_wire};
use super::page::{fit_page, page_from_wire};
use super::service::{Need, Service};
use super::status::from_store;

/// An audit row on the wire.
pub fn audit_to_wire(r: &AuditRecord) -> pb::AuditEntry {
    pb::AuditEntry {
        id: r.id,
        at_ms: ms(r.at),
        actor: r.actor.clone(),
        role: r.role.clone(),
        action: r.action.clone(),
        target: r.target.clone(),
        params_json: r.params.as_ref().map(|p| p.to_string()).unwrap_or_default(),
        result: r.result.clone(),
        detail: r.detail.clone().unwrap_or_default(),
        peer: r.peer.clone().unwrap_or_default(),
        count: r.count,
    }
}

/// The result filter from the wire: empty is any.
fn result_from_wire(text: &str) -> Result<Option<AuditResult>, Status> {
    Ok(Some(match text {
        "" => return Ok(None),
        "applied" => AuditResult::Applied,
        "noop" => AuditResult::Noop,
        "denied" => AuditResult::Denied,
        "failed" => AuditResult::Failed,
        other => {
            return Err(Status::invalid_argument(format!(
                "result: {:?} is not one of applied, noop, denied, failed",
                other.chars().take(64).collect::<String>()
            )));
        }
    }))
}

/// The validated store query of a request.
pub fn list_params(r: pb::ListAuditRequest) -> Result<AuditListParams, Status> {
    let paging = page_from_wire(r.before_id, r.limit)?;
    for (field, text) in [
        ("actor", &r.actor),
        ("action", &r.action),
        ("target", &r.target),
    ] {
        text_without_nul(field, text)?;
    }
    let text = |t: String| (!t.is_empty()).then_some(t);
    let params = AuditListParams {
        before_id: paging.before_id,
        limit: paging.limit,
        result: result_from_wire(&r.result)?,
        actor: text(r.actor),
        action: text(r.action),
        target: text(r.target),
        since: time_from_wire("since_ms", r.since_ms)?,
        until: time_from_wire("until_ms", r.until_ms)?,
    };
    params.validate().map_err(invalid)?;
    Ok(params)
}

impl Service {
    /// ListAudit: operator role; a page of the audit log, newest first.
    pub(super) async fn list_audit_rpc(
        &self,
        request: Request<pb::ListAuditRequest>,
    ) -> Result<Response<pb::ListAuditResponse>, Status> {
        self.caller(
            &request,
            Need::Act {
                action: "audit_list",
                target: "audit_log".into(),
            },
        )
        .await?;
        let params = list_params(request.into_inner())?;
        let limit = params.limit as usize;
        let rows = self
            .core
            .store
            .audit_list(params)
            .await
            .map_err(|e| from_store("list_audit", e))?;
        let full_page = rows.len() == limit;
        let mut entries: Vec<pb::AuditEntry> = rows.iter().map(audit_to_wire).collect();
        let next_before_id = fit_page(&mut entries, |e| e.id)
            .or_else(|| full_page.then(|| entries.last().map(|e| e.id)).flatten())
            .unwrap_or(0);
        Ok(Response::new(pb::ListAuditResponse {
            entries,
            next_before_id,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grpc::page::DEFAULT_PAGE;

    fn request() -> pb::ListAuditRequest {
        pb::ListAuditRequest::default()
    }

    #[test]
    fn an_empty_request_is_the_newest_default_page() {
        let p = list_params(request()).unwrap();
        assert_eq!(p.limit, DEFAULT_PAGE);
        assert!(p.before_id.is_none() && p.actor.is_none() && p.result.is_none());
    }

    #[test]
    fn filters_are_carried_over() {
        let p = list_params(pb::ListAuditRequest {
            actor: "alice".into(),
            action: "enqueue".into(),
            result: "denied".into(),
            target: "task:".into(),
            since_ms: 1_000,
            until_ms: 2_000,
            before_id: 7,
            limit: 5,
        })
        .unwrap();
        assert_eq!(p.actor.as_deref(), Some("alice"));
        assert_eq!(p.action.as_deref(), Some("enqueue"));
        assert_eq!(p.result, Some(AuditResult::Denied));
        assert_eq!(p.target.as_deref(), Some("task:"));
        assert_eq!((p.before_id, p.limit), (Some(7), 5));
        assert!(p.since.is_some() && p.until.is_some());
    }

    #[test]
    fn bad_filters_are_invalid_argument() {
        let bad = [
            pb::ListAuditRequest {
                result: "maybe".into(),
                ..request()
            },
            pb::ListAuditRequest {
                limit: 1001,
                ..request()
            },
            pb::ListAuditRequest {
                before_id: -1,
                ..request()
            },
            pb::ListAuditRequest {
                actor: "a\0b".into(),
                ..request()
            },
            pb::ListAuditRequest {
                since_ms: -5,
                ..request()
            },
            pb::ListAuditRequest {
                since_ms: 2_000,
                until_ms: 1_000,
                ..request()
            },
            pb::ListAuditRequest {
                target: "x".repeat(201),
                ..request()
            },
        ];
        for r in bad {
            let status = list_params(r.clone()).unwrap_err();
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{r:?}");
        }
    }
}
