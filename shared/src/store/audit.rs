//! The audit rows both stores write for operator actions, built once: what a denial, an
//! enqueue, a bulk requeue and a policy change record (DESIGN §10). The stores only decide
//! *when* to write them, in the transaction of the change. The filters of an audit page are
//! bound once too ([`bind_audit_list`]), in the order both stores' statements number them.
//! [`backend`] is the seam each store implements (transactions, clock, audit rows, rows as
//! [`backend::Columns`]); [`operator`] runs the operator actions over it.

pub(crate) mod backend;
pub(crate) mod operator;

use chrono::{DateTime, Utc};
use serde_json::json;
use sqlx::query::Query;
use sqlx::{Database, Encode, Type};

use super::params::{DeadFilter, ValidTask};
use super::{AuditEntry, AuditListParams, EnqueueOutcome, Enqueued, StoreError};
use crate::domain::AuditResult;
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

/// Most bytes of JSON text the `argv` of an `exec` enqueue takes in its audit row (the row's
/// params may hold 64 KiB).
pub(crate) const AUDIT_ARGV_BUDGET: usize = 16 * 1024;
/// Most bytes of one `argv` item in an audit row.
pub(crate) const AUDIT_ARGV_ITEM_BYTES: usize = 1024;

/// The parameters an enqueue's audit rows record: type, priority, idempotency key,
/// `payload_sha256` and, for task type `exec`, the `argv` it runs.
///
/// `payload_sha256` is the lowercase hex SHA-256 of the payload's compact JSON text as the
/// store writes it: no whitespace, object keys sorted by their bytes, strings escaped as
/// `serde_json` does (`"` `\\` and control characters only; other characters as UTF-8). An
/// operator recomputes it with
/// `leasehold tasks show ID --output json | jq -jcS .payload | sha256sum`
/// (`-c` compact, `-S` sorted keys, `-j` no trailing newline), which prints the same text for
/// any payload whose numbers are integers or short decimals.
///
/// `argv` is the payload's `argv` array (for `exec`), each item cut to
/// [`AUDIT_ARGV_ITEM_BYTES`] and the array cut once its JSON passes [`AUDIT_ARGV_BUDGET`]
/// bytes; `argv_truncated` is then `true`. Non-string items are recorded as their JSON text.
pub(crate) fn enqueue_params(valid: &ValidTask) -> serde_json::Value {
    let mut params = json!({
        "task_type": valid.task_type,
        "priority": valid.priority,
        "idempotency_key": valid.idempotency_key,
        "payload_sha256": sha256_hex(valid.payload.as_bytes()),
    });
    if valid.task_type == "exec"
        && let Ok(payload) = serde_json::from_str::<serde_json::Value>(&valid.payload)
        && let Some(argv) = payload.get("argv").and_then(|a| a.as_array())
        && let Some(map) = params.as_object_mut()
    {
        let (argv, truncated) = audit_argv(argv);
        map.insert("argv".into(), serde_json::Value::from(argv));
        if truncated {
            map.insert("argv_truncated".into(), serde_json::Value::Bool(true));
        }
    }
    // The unique-enqueue settings, when not the defaults (rows of plain enqueues unchanged).
    if let Some(map) = params.as_object_mut() {
        if !valid.is_plain() {
            map.insert("on_conflict".into(), json!(valid.on_conflict.as_str()));
        }
        if let Some(ms) = valid.unique_for_ms {
            map.insert("unique_for_ms".into(), json!(ms));
        }
    }
    params
}

/// Lowercase hex SHA-256 of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    use std::fmt::Write;
    let digest = Sha256::digest(bytes);
    let mut hex = String::with_capacity(64);
    for b in digest {
        let _ = write!(hex, "{b:02x}");
    }
    hex
}

/// `argv` cut to fit an audit row, and whether anything was cut.
fn audit_argv(argv: &[serde_json::Value]) -> (Vec<String>, bool) {
    let mut kept = Vec::new();
    let mut used = 2usize;
    let mut truncated = false;
    for item in argv {
        let text = match item {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let cut = cut_to(&text, AUDIT_ARGV_ITEM_BYTES);
        truncated |= cut.len() < text.len();
        let size = serde_json::Value::from(cut).to_string().len() + 1;
        if used + size > AUDIT_ARGV_BUDGET {
            return (kept, true);
        }
        used += size;
        kept.push(cut.to_string());
    }
    (kept, truncated)
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
fn cut_to(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The row of an operator's enqueue: `applied` when it created a task or replaced or
/// debounced the idempotency key's waiting task, `noop` when the key's task was left unchanged;
/// the detail says which.
pub(crate) fn enqueue_entry(
    actor: &Actor,
    done: &Enqueued,
    params: serde_json::Value,
) -> AuditEntry {
    let (result, detail) = match done.outcome {
        EnqueueOutcome::Created => (
            AuditResult::Applied,
            done.released_from.map(|old| {
                format!("idempotency key released by task {old}, finished at least unique_for ago")
            }),
        ),
        EnqueueOutcome::Existing => (
            AuditResult::Noop,
            Some(format!(
                "idempotency key already used by task {}; nothing enqueued",
                done.id
            )),
        ),
        EnqueueOutcome::Replaced => (
            AuditResult::Applied,
            Some(format!(
                "idempotency key's waiting task {} replaced",
                done.id
            )),
        ),
        EnqueueOutcome::Debounced => (
            AuditResult::Applied,
            Some(format!(
                "idempotency key's waiting task {} debounced",
                done.id
            )),
        ),
    };
    AuditEntry {
        actor: actor.clone(),
        action: "enqueue".into(),
        target: format!("task:{}", done.id),
        params: Some(params),
        result,
        detail,
    }
}

/// The row of a bulk action over dead letters, `action` `requeue_dead` or `purge_dead` (its
/// dry run `<action>_dry_run`), that matched `count` tasks: the filter and whether it was a
/// dry run in its params, the count in its detail.
pub(crate) fn dead_bulk_entry(
    actor: &Actor,
    action: &str,
    filter: &DeadFilter,
    dry_run: bool,
    count: u64,
) -> AuditEntry {
    let filter = serde_json::to_value(filter).unwrap_or(serde_json::Value::Null);
    AuditEntry {
        actor: actor.clone(),
        action: if dry_run {
            format!("{action}_dry_run")
        } else {
            action.to_string()
        },
        target: DEAD_LETTER_TARGET.into(),
        params: Some(json!({ "filter": filter, "dry_run": dry_run })),
        result: if dry_run || count == 0 {
            AuditResult::Noop
        } else {
            AuditResult::Applied
        },
        detail: Some(format!("{count} matching")),
    }
}

/// The target of the audit rows of bulk actions over dead letters.
pub(crate) const DEAD_LETTER_TARGET: &str = "dead-letter queue";

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

/// Binds the filters of an audit page to the `audit_list` statement of either store, which
/// both number them so: 1 ids below, 2 page size, 3 actor, 4 action, 5 result, 6 text in the
/// target, 7 at or after, 8 before. `time` stores a time as the database keeps it.
pub(crate) fn bind_audit_list<'q, DB, T>(
    query: Query<'q, DB, DB::Arguments>,
    params: &AuditListParams,
    time: impl Fn(DateTime<Utc>) -> T,
) -> Query<'q, DB, DB::Arguments>
where
    DB: Database,
    i64: for<'t> Encode<'t, DB> + Type<DB>,
    Option<i64>: for<'t> Encode<'t, DB> + Type<DB>,
    for<'t> Option<&'t str>: Encode<'t, DB> + Type<DB>,
    Option<T>: for<'t> Encode<'t, DB> + Type<DB>,
{
    query
        .bind(params.before_id)
        .bind(i64::from(params.limit))
        .bind(params.actor.as_deref())
        .bind(params.action.as_deref())
        .bind(params.result.map(AuditResult::as_str))
        .bind(params.target.as_deref())
        .bind(params.since.map(&time))
        .bind(params.until.map(&time))
}
