//! The ListAudit RPC: a filtered page of the audit log, newest first. Operator role only: the
//! log names the argv of exec tasks and the peers of refused calls, which a viewer token may
//! not read (its call is refused, and audited as any refused call is). Bad filters are
//! INVALID_ARGUMENT naming the field; nothing is read.

use leasehold_proto::v1 as pb;
use leasehold_proto::wire::{self, WireEnum};
use leasehold_shared::Role;
use leasehold_shared::domain::AuditResult;
use leasehold_shared::store::{AuditListParams, AuditRecord};
use tonic::{Request, Response, Status};

use super::convert::{invalid, ms, text_without_nul, time_from_wire};
use super::page::{fit_page, page_from_wire};
use super::service::{Need, Service};
use super::status::from_store;

/// An audit row on the wire. The row keeps role and result as words; one this build cannot
/// read (written by a newer agent) travels as the word alone, for the console to show as sent.
#[allow(deprecated)] // `role` and `result` are filled for consoles older than their enums
pub fn audit_to_wire(r: &AuditRecord) -> pb::AuditEntry {
    let (actor_role, role) = stored_word::<Role>(&r.role);
    let (audit_result, result) = stored_word::<AuditResult>(&r.result);
    pb::AuditEntry {
        id: r.id,
        at_ms: ms(r.at),
        actor: r.actor.clone(),
        role,
        actor_role,
        action: r.action.clone(),
        target: r.target.clone(),
        params_json: r.params.as_ref().map(|p| p.to_string()).unwrap_or_default(),
        result,
        audit_result,
        detail: r.detail.clone().unwrap_or_default(),
        peer: r.peer.clone().unwrap_or_default(),
        count: r.count,
    }
}

/// A stored word on the wire: its enum and the word; UNSPECIFIED and the word as stored when
/// this build does not know it.
fn stored_word<D: WireEnum>(word: &str) -> (i32, String) {
    D::from_word(word).map_or_else(|| (0, word.to_string()), wire::write)
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
    // The enum, or the word of an older console; a pair naming two results is refused.
    let result = r.read_result().map_err(invalid)?;
    let text = |t: String| (!t.is_empty()).then_some(t);
    let params = AuditListParams {
        before_id: paging.before_id,
        limit: paging.limit,
        result,
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
// The requests below set the word field as consoles older than `audit_result` do.
#[allow(deprecated)]
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
            audit_result: 0,
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

    #[test]
    fn the_result_filter_is_read_from_the_enum_or_the_word_and_a_conflict_is_refused() {
        let by_enum = pb::ListAuditRequest {
            audit_result: pb::AuditResult::Noop as i32,
            ..request()
        };
        assert_eq!(
            list_params(by_enum).unwrap().result,
            Some(AuditResult::Noop)
        );
        let both = pb::ListAuditRequest {
            audit_result: pb::AuditResult::Noop as i32,
            result: "noop".into(),
            ..request()
        };
        assert_eq!(list_params(both).unwrap().result, Some(AuditResult::Noop));
        let conflict = pb::ListAuditRequest {
            audit_result: pb::AuditResult::Noop as i32,
            result: "denied".into(),
            ..request()
        };
        let status = list_params(conflict).unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(
            status.message().starts_with("result: "),
            "{}",
            status.message()
        );
        let unknown = pb::ListAuditRequest {
            audit_result: 42,
            ..request()
        };
        let status = list_params(unknown).unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(
            status.message().starts_with("audit_result: "),
            "{}",
            status.message()
        );
    }

    #[test]
    fn a_row_sends_enum_and_word_and_a_word_this_build_cannot_read_travels_alone() {
        let row = |role: &str, result: &str| AuditRecord {
            id: 1,
            at: chrono::DateTime::from_timestamp_millis(1_000).unwrap(),
            actor: "alice".into(),
            role: role.into(),
            action: "enqueue".into(),
            target: "task:1".into(),
            params: None,
            result: result.into(),
            detail: None,
            peer: None,
            count: 1,
        };
        let e = audit_to_wire(&row("operator", "applied"));
        assert_eq!(
            (e.actor_role, e.role.as_str()),
            (pb::Role::Operator as i32, "operator")
        );
        assert_eq!(
            (e.audit_result, e.result.as_str()),
            (pb::AuditResult::Applied as i32, "applied")
        );
        let e = audit_to_wire(&row("auditor", "deferred"));
        assert_eq!((e.actor_role, e.role.as_str()), (0, "auditor"));
        assert_eq!((e.audit_result, e.result.as_str()), (0, "deferred"));
    }
}
