//! The audit rows both stores write for operator actions, built once: what a denial, an
//! enqueue, a bulk requeue and a policy change record (DESIGN §10). The stores only decide
//! *when* to write them, in the transaction of the change.

use serde_json::json;

use super::params::{DeadFilter, ValidTask};
use super::{AuditEntry, AuditResult, Enqueued, StoreError};
use crate::domain::{Actor, PolicyPatch, PolicyScope, Role};

/// For a viewer: the `denied` row to write on its own and the error to return; `None` for any
/// other role.
pub(crate) fn viewer_denial(
    actor: &Actor,
    action: &str,
    target: String,
    params: Option<serde_json::Value>,
) -> Option<(AuditEntry, StoreError)> {
    if actor.role != Role::Viewer {
        return None;
    }
    let entry = AuditEntry {
        actor: actor.clone(),
        action: action.to_string(),
        target,
        params,
        result: AuditResult::Denied,
        detail: Some("viewer tokens may watch and list only".into()),
    };
    let error = StoreError::PermissionDenied {
        action: action.to_string(),
        actor: actor.name.clone(),
    };
    Some((entry, error))
}

/// The parameters an enqueue's audit rows record.
pub(crate) fn enqueue_params(valid: &ValidTask) -> serde_json::Value {
    json!({
        "task_type": valid.task_type,
        "priority": valid.priority,
        "idempotency_key": valid.idempotency_key,
    })
}

/// The row of an operator's enqueue: `applied`, or `noop` when the idempotency key matched.
pub(crate) fn enqueue_entry(
    actor: &Actor,
    done: &Enqueued,
    params: serde_json::Value,
) -> AuditEntry {
    AuditEntry {
        actor: actor.clone(),
        action: "enqueue".into(),
        target: format!("task:{}", done.id),
        params: Some(params),
        result: if done.created {
            AuditResult::Applied
        } else {
            AuditResult::Noop
        },
        detail: (!done.created).then(|| {
            format!(
                "idempotency key already used by task {}; nothing enqueued",
                done.id
            )
        }),
    }
}

/// The row of a bulk requeue of dead letters (or its dry run) that matched `count` tasks.
pub(crate) fn requeue_dead_entry(
    actor: &Actor,
    filter: &DeadFilter,
    dry_run: bool,
    count: u64,
) -> AuditEntry {
    let filter = serde_json::to_value(filter).unwrap_or(serde_json::Value::Null);
    AuditEntry {
        actor: actor.clone(),
        action: if dry_run {
            "requeue_dead_dry_run".into()
        } else {
            "requeue_dead".into()
        },
        target: "dead-letter queue".into(),
        params: Some(json!({ "filter": filter, "dry_run": dry_run })),
        result: if dry_run || count == 0 {
            AuditResult::Noop
        } else {
            AuditResult::Applied
        },
        detail: Some(format!("{count} matching")),
    }
}

/// The row of a policy change with `result` (and, for a failure, why).
pub(crate) fn policy_entry(
    actor: &Actor,
    scope: &PolicyScope,
    patch: &PolicyPatch,
    result: AuditResult,
    detail: Option<String>,
) -> AuditEntry {
    AuditEntry {
        actor: actor.clone(),
        action: "policy_set".into(),
        target: format!("policy:{}", scope.key()),
        params: serde_json::to_value(patch).ok(),
        result,
        detail,
    }
}
