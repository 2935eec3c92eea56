//! Operator actions on tasks and policies, written once for both stores: enqueue, cancel,
//! requeue, bulk requeue and purge of dead letters, policy changes. Each runs in one short transaction
//! that also writes its audit row, so the change and its record commit together; an action
//! refused by the state machine still commits its audit row (result `failed`) and changes
//! nothing else. A viewer is refused before anything changes, with a `denied` row of its own.
//! Input refused by validation writes nothing at all. The stores only run the statements
//! ([`OperatorStatements`]).
//!
//! When things fail: a statement error drops the transaction (task and audit row with it);
//! a policy change whose transaction cannot begin is recorded as `failed` on its own.

use std::future::Future;

use sqlx::query::Query;
use sqlx::{Database, Encode, Type};

use super::backend::{Backend, authorize, failed};
use super::{DEAD_LETTER_TARGET, dead_bulk_entry, enqueue_entry, enqueue_params, policy_entry};
use crate::domain::{
    Actor, AgentId, AuditResult, InputLimits, LeaseEpoch, Policy, TaskAction, TaskId, TaskStatus,
};
use crate::store::params::{DeadFilter, DeadIdsPage, ValidTask, duration_ms};
use crate::store::{
    AuditEntry, CancelOutcome, CancelParams, DeadBulkOutcome, DeleteOutcome, DeleteTaskParams,
    EnqueueAuditedParams, Enqueued, PolicyChange, PolicySetParams, PurgeDeadParams,
    RequeueDeadParams, RequeueOutcome, RequeueParams, Result, RunNowOutcome, RunNowParams,
    StoreError,
};

/// A task's row as a cancel found and left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CancelRow {
    pub before: TaskStatus,
    /// The status the cancel moved it to (`None`: unchanged).
    pub after: Option<TaskStatus>,
    pub owner: Option<AgentId>,
    pub epoch: LeaseEpoch,
}

/// The statements of the operator actions, per store.
pub(crate) trait OperatorStatements: Backend {
    /// Enqueues a validated task in `tx` (the idempotency key's task when it exists).
    fn enqueue(
        tx: &mut Self::Tx,
        task: &ValidTask,
    ) -> impl Future<Output = Result<Enqueued>> + Send;

    /// Cancels task `id` as [`cancel_step`] says, locked first (`None`: no such task).
    fn task_cancel(
        tx: &mut Self::Tx,
        id: TaskId,
    ) -> impl Future<Output = Result<Option<CancelRow>>> + Send;

    /// Requeues task `id` when [`requeue_allowed`]: its status before and whether it moved
    /// (`None`: no such task).
    fn task_requeue(
        tx: &mut Self::Tx,
        id: TaskId,
    ) -> impl Future<Output = Result<Option<(TaskStatus, bool)>>> + Send;

    /// Makes task `id` due now when it waits (queued or retry_wait) and is not yet due: its
    /// status and whether it moved (`None`: no such task).
    fn task_run_now(
        tx: &mut Self::Tx,
        id: TaskId,
    ) -> impl Future<Output = Result<Option<(TaskStatus, bool)>>> + Send;

    /// Deletes task `id` with its attempts when no agent holds it: its status and type, and
    /// whether it was deleted (`None`: no such task).
    fn task_delete(
        tx: &mut Self::Tx,
        id: TaskId,
    ) -> impl Future<Output = Result<Option<(TaskStatus, String, bool)>>> + Send;

    /// Requeues the dead letters `filter` matches; how many.
    fn task_requeue_dead(
        tx: &mut Self::Tx,
        filter: &DeadFilter,
    ) -> impl Future<Output = Result<u64>> + Send;

    /// Deletes the dead letters `filter` matches, with their attempts; how many.
    fn task_purge_dead(
        tx: &mut Self::Tx,
        filter: &DeadFilter,
    ) -> impl Future<Output = Result<u64>> + Send;

    /// The dry run of both: how many dead letters `filter` matches and a `page` of their ids,
    /// newest first, read so the two agree. `next_before` is set when ids below the page's
    /// last match too.
    fn task_match_dead(
        tx: &mut Self::Tx,
        filter: &DeadFilter,
        page: DeadIdsPage,
    ) -> impl Future<Output = Result<DeadBulkOutcome>> + Send;

    /// The transaction of a policy change, ordered against every claim.
    fn policy_begin(&self, op: &'static str) -> impl Future<Output = Result<Self::Tx>> + Send;

    /// The stored policy of scope `key`, locked (`None`: it inherits).
    fn policy_locked(
        tx: &mut Self::Tx,
        key: &str,
    ) -> impl Future<Output = Result<Option<Policy>>> + Send;

    /// Stores `next` as the policy of scope `key`; the policy as stored.
    fn policy_upsert(
        tx: &mut Self::Tx,
        key: &str,
        next: &Policy,
    ) -> impl Future<Output = Result<Policy>> + Send;
}

/// What a cancel moves a task in `before` to: a waiting task is cancelled, a running one
/// (with its holder) asked to stop; anything else does not move. (PostgreSQL's
/// task_cancel.sql decides the same in its statement.)
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
pub(crate) fn cancel_step(before: TaskStatus, held: bool) -> Option<TaskStatus> {
    match before {
        TaskStatus::Queued | TaskStatus::RetryWait => Some(TaskStatus::Cancelled),
        TaskStatus::Running if held => Some(TaskStatus::CancelRequested),
        _ => None,
    }
}

/// Whether a requeue moves a task in `before` back to `queued`: finished tasks only.
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
pub(crate) fn requeue_allowed(before: TaskStatus) -> bool {
    before.is_terminal()
}

fn task_entry(actor: &Actor, action: &str, id: TaskId) -> AuditEntry {
    AuditEntry {
        actor: actor.clone(),
        action: action.into(),
        target: format!("task:{id}"),
        params: None,
        result: AuditResult::Failed,
        detail: None,
    }
}

/// A cancel's audit row and outcome from the row it found (`None`: no such task).
pub(crate) fn cancel_settled(
    actor: &Actor,
    id: TaskId,
    found: Option<CancelRow>,
) -> (AuditEntry, Result<CancelOutcome>) {
    let mut entry = task_entry(actor, "cancel", id);
    let Some(row) = found else {
        entry.detail = Some("no such task".into());
        return (entry, Err(StoreError::NotFound(id)));
    };
    let CancelRow {
        before,
        after,
        owner,
        epoch,
    } = row;
    let outcome = match (before, after, owner) {
        (TaskStatus::CancelRequested, None, Some(owner)) => {
            entry.result = AuditResult::Noop;
            entry.detail = Some("cancellation already requested".into());
            Ok(CancelOutcome::AlreadyRequested { owner, epoch })
        }
        (_, Some(TaskStatus::Cancelled), _) => {
            entry.result = AuditResult::Applied;
            entry.detail = Some(format!("{before} -> cancelled"));
            Ok(CancelOutcome::Cancelled)
        }
        (_, Some(TaskStatus::CancelRequested), Some(owner)) => {
            entry.result = AuditResult::Applied;
            entry.detail = Some(format!(
                "{before} -> cancel_requested; holder {owner} asked to stop"
            ));
            Ok(CancelOutcome::Requested { owner, epoch })
        }
        _ => {
            let refusal =
                StoreError::refused(id, before, TaskAction::RequestCancel, "cancel", "cancelled");
            entry.detail = Some(refusal.to_string());
            Err(refusal)
        }
    };
    (entry, outcome)
}

/// A requeue's audit row and outcome from what it found: the status before and whether the
/// task moved (`None`: no such task).
pub(crate) fn requeue_settled(
    actor: &Actor,
    id: TaskId,
    found: Option<(TaskStatus, bool)>,
) -> (AuditEntry, Result<RequeueOutcome>) {
    let mut entry = task_entry(actor, "requeue", id);
    let outcome = match found {
        None => Err(StoreError::NotFound(id)),
        Some((previous, true)) => {
            entry.result = AuditResult::Applied;
            Ok(RequeueOutcome { id, previous })
        }
        Some((before, false)) => Err(StoreError::refused(
            id,
            before,
            TaskAction::Requeue,
            "requeue",
            "requeued",
        )),
    };
    entry.detail = Some(match &outcome {
        Ok(done) => format!("{} -> queued", done.previous),
        Err(e) => e.to_string(),
    });
    (entry, outcome)
}

/// A run-now's audit row and outcome from what it found (`None`: no such task).
pub(crate) fn run_now_settled(
    actor: &Actor,
    id: TaskId,
    found: Option<(TaskStatus, bool)>,
) -> (AuditEntry, Result<RunNowOutcome>) {
    let mut entry = task_entry(actor, "run_now", id);
    let outcome = match found {
        None => Err(StoreError::NotFound(id)),
        Some((status, moved)) if status.apply(TaskAction::RunNow).is_ok() => {
            entry.result = if moved {
                AuditResult::Applied
            } else {
                AuditResult::Noop
            };
            Ok(RunNowOutcome { id, status, moved })
        }
        Some((before, _)) => Err(StoreError::refused(
            id,
            before,
            TaskAction::RunNow,
            "run_now",
            "made due",
        )),
    };
    entry.detail = Some(match &outcome {
        Ok(done) if done.moved => format!("{}: due now", done.status),
        Ok(done) => format!("{}: already due", done.status),
        Err(e) => e.to_string(),
    });
    (entry, outcome)
}

/// A delete's audit row and outcome from what it found (`None`: no such task).
pub(crate) fn delete_settled(
    actor: &Actor,
    id: TaskId,
    found: Option<(TaskStatus, String, bool)>,
) -> (AuditEntry, Result<DeleteOutcome>) {
    let mut entry = task_entry(actor, "delete", id);
    let outcome = match found {
        None => Err(StoreError::NotFound(id)),
        Some((previous, task_type, true)) => {
            entry.result = AuditResult::Applied;
            entry.detail = Some(format!("deleted {previous} task of type {task_type}"));
            Ok(DeleteOutcome { id, previous })
        }
        Some((before, _, false)) => Err(StoreError::refused(
            id,
            before,
            TaskAction::Delete,
            "delete",
            "deleted",
        )),
    };
    if let Err(e) = &outcome {
        entry.detail = Some(e.to_string());
    }
    (entry, outcome)
}

/// A policy change's audit result: `noop` when the stored policy is what it was.
pub(crate) fn policy_result(before: &Policy, stored: &Policy) -> AuditResult {
    if stored == before {
        AuditResult::Noop
    } else {
        AuditResult::Applied
    }
}

/// Binds a policy's columns to either store's `policy_upsert`, which both number so: 1 scope
/// key, 2 concurrency limit (as `limit` stores it), 3 paused, 4 retry base (ms), 5 retry
/// multiplier, 6 retry max (ms), 7 jitter, 8 timeout (ms), 9 slow threshold (ms), 10 11 rate
/// limit, 12 shed after, 13 per-key limit, 14 15 16 breaker, 17 max snoozes, 18 max attempts.
pub(crate) fn bind_policy<'q, DB, T>(
    query: Query<'q, DB, DB::Arguments>,
    key: &str,
    next: &Policy,
    limit: impl Fn(u32) -> T,
) -> Query<'q, DB, DB::Arguments>
where
    DB: Database,
    for<'t> &'t str: Encode<'t, DB> + Type<DB>,
    Option<T>: for<'t> Encode<'t, DB> + Type<DB>,
    bool: for<'t> Encode<'t, DB> + Type<DB>,
    Option<i64>: for<'t> Encode<'t, DB> + Type<DB>,
    Option<f64>: for<'t> Encode<'t, DB> + Type<DB>,
{
    let ms = |d: Option<std::time::Duration>| d.map(duration_ms);
    query
        .bind(key)
        .bind(next.max_concurrency.map(&limit))
        .bind(next.paused)
        .bind(ms(next.retry_base))
        .bind(next.retry_multiplier)
        .bind(ms(next.retry_max))
        .bind(next.retry_jitter)
        .bind(ms(next.timeout))
        .bind(ms(next.slow_threshold))
        .bind(next.rate_limit.map(|r| i64::from(r.starts)))
        .bind(next.rate_limit.map(|r| r.period_ms()))
        .bind(ms(next.shed_after))
        .bind(next.per_key_concurrency.map(limit))
        .bind(next.breaker.map(|b| i64::from(b.failures)))
        .bind(next.breaker.map(|b| b.within_ms()))
        .bind(next.breaker.map(|b| b.cooldown_ms()))
        .bind(next.max_snoozes.map(i64::from))
        .bind(next.max_attempts.map(i64::from))
}

/// Enqueue and its audit row in one transaction. Order: validation (invalid input writes
/// nothing, no audit row either), then authorization (a viewer gets a `denied` row, committed
/// on its own; no task exists yet, so its target is `type:<type>`, as the gRPC layer's own
/// denials name it), then the insert and the `applied` / `noop` row with target `task:<id>`.
/// Any failure after the insert rolls the task back too: a task enqueued by an operator
/// exists only with its audit row.
pub(crate) async fn task_enqueue_audited<B: OperatorStatements>(
    backend: &B,
    params: &EnqueueAuditedParams,
    limits: &InputLimits,
) -> Result<Enqueued> {
    const OP: &str = "task_enqueue_audited";
    let valid = params.task.validate(limits)?;
    let audit_params = enqueue_params(&valid);
    let target = format!("type:{}", valid.task_type);
    let denial_params = Some(audit_params.clone());
    authorize(backend, &params.actor, "enqueue", target, denial_params).await?;
    let mut tx = backend.begin(OP).await?;
    let done = B::enqueue(&mut tx, &valid).await?;
    B::audit_in(&mut tx, &enqueue_entry(&params.actor, &done, audit_params)).await?;
    B::commit(tx, OP).await?;
    Ok(done)
}

pub(crate) async fn task_cancel<B: OperatorStatements>(
    backend: &B,
    params: &CancelParams,
) -> Result<CancelOutcome> {
    const OP: &str = "task_cancel";
    let target = format!("task:{}", params.id);
    authorize(backend, &params.actor, "cancel", target, None).await?;
    let mut tx = backend.begin(OP).await?;
    let found = B::task_cancel(&mut tx, params.id).await?;
    let (entry, outcome) = cancel_settled(&params.actor, params.id, found);
    B::audit_in(&mut tx, &entry).await?;
    B::commit(tx, OP).await?;
    outcome
}

pub(crate) async fn task_requeue<B: OperatorStatements>(
    backend: &B,
    params: &RequeueParams,
) -> Result<RequeueOutcome> {
    const OP: &str = "task_requeue";
    let target = format!("task:{}", params.id);
    authorize(backend, &params.actor, "requeue", target, None).await?;
    let mut tx = backend.begin(OP).await?;
    let found = B::task_requeue(&mut tx, params.id).await?;
    let (entry, outcome) = requeue_settled(&params.actor, params.id, found);
    B::audit_in(&mut tx, &entry).await?;
    B::commit(tx, OP).await?;
    outcome
}

pub(crate) async fn task_run_now<B: OperatorStatements>(
    backend: &B,
    params: &RunNowParams,
) -> Result<RunNowOutcome> {
    const OP: &str = "task_run_now";
    let target = format!("task:{}", params.id);
    authorize(backend, &params.actor, "run_now", target, None).await?;
    let mut tx = backend.begin(OP).await?;
    let found = B::task_run_now(&mut tx, params.id).await?;
    let (entry, outcome) = run_now_settled(&params.actor, params.id, found);
    B::audit_in(&mut tx, &entry).await?;
    B::commit(tx, OP).await?;
    outcome
}

pub(crate) async fn task_delete<B: OperatorStatements>(
    backend: &B,
    params: &DeleteTaskParams,
) -> Result<DeleteOutcome> {
    const OP: &str = "task_delete";
    let target = format!("task:{}", params.id);
    authorize(backend, &params.actor, "delete", target, None).await?;
    let mut tx = backend.begin(OP).await?;
    let found = B::task_delete(&mut tx, params.id).await?;
    let (entry, outcome) = delete_settled(&params.actor, params.id, found);
    B::audit_in(&mut tx, &entry).await?;
    B::commit(tx, OP).await?;
    outcome
}

/// A dry run's outcome from its count and the ids it read: at most `limit + 1`, newest
/// first (the one past the page only says that another page follows; `next_before` is then the
/// page's last id).
pub(crate) fn dead_page(count: u64, mut ids: Vec<i64>, limit: u32) -> DeadBulkOutcome {
    let more = ids.len() > limit as usize;
    ids.truncate(limit as usize);
    let ids: Vec<TaskId> = ids.into_iter().map(TaskId).collect();
    DeadBulkOutcome {
        count,
        next_before: if more { ids.last().copied() } else { None },
        ids,
    }
}

/// The bulk actions over dead letters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DeadBulk {
    Requeue,
    Purge,
}

impl DeadBulk {
    /// The action its audit rows name.
    fn action(self) -> &'static str {
        match self {
            DeadBulk::Requeue => "requeue_dead",
            DeadBulk::Purge => "purge_dead",
        }
    }

    /// The store operation, as its errors name it.
    fn op(self) -> &'static str {
        match self {
            DeadBulk::Requeue => "task_requeue_dead",
            DeadBulk::Purge => "task_purge_dead",
        }
    }
}

/// A bulk action over the dead letters `filter` matches and its audit row, in one
/// transaction. Order: validation (invalid input writes nothing), then, for a real run,
/// authorization (a viewer gets a `denied` row on its own and nothing changes), then the
/// change — or, on a dry run, the count and a page of ids — and the row with the filter and
/// the count (`applied`, or `noop` when nothing matched and for every dry run).
async fn dead_bulk<B: OperatorStatements>(
    backend: &B,
    bulk: DeadBulk,
    filter: &DeadFilter,
    dry_run: bool,
    page: DeadIdsPage,
    actor: &Actor,
) -> Result<DeadBulkOutcome> {
    let op = bulk.op();
    if !dry_run {
        authorize(
            backend,
            actor,
            bulk.action(),
            DEAD_LETTER_TARGET.into(),
            None,
        )
        .await?;
    }
    let mut tx = backend.begin(op).await?;
    let outcome = if dry_run {
        B::task_match_dead(&mut tx, filter, page).await?
    } else {
        let count = match bulk {
            DeadBulk::Requeue => B::task_requeue_dead(&mut tx, filter).await?,
            DeadBulk::Purge => B::task_purge_dead(&mut tx, filter).await?,
        };
        DeadBulkOutcome {
            count,
            ..DeadBulkOutcome::default()
        }
    };
    let entry = dead_bulk_entry(actor, bulk.action(), filter, dry_run, outcome.count);
    B::audit_in(&mut tx, &entry).await?;
    B::commit(tx, op).await?;
    Ok(outcome)
}

pub(crate) async fn task_requeue_dead<B: OperatorStatements>(
    backend: &B,
    params: &RequeueDeadParams,
) -> Result<DeadBulkOutcome> {
    params.validate()?;
    let RequeueDeadParams {
        filter,
        dry_run,
        page,
        actor,
    } = params;
    dead_bulk(backend, DeadBulk::Requeue, filter, *dry_run, *page, actor).await
}

pub(crate) async fn task_purge_dead<B: OperatorStatements>(
    backend: &B,
    params: &PurgeDeadParams,
) -> Result<DeadBulkOutcome> {
    params.validate()?;
    let PurgeDeadParams {
        filter,
        dry_run,
        page,
        actor,
    } = params;
    dead_bulk(backend, DeadBulk::Purge, filter, *dry_run, *page, actor).await
}

/// A policy change. Its transaction orders it against every claim: a claim either committed
/// before it (and is counted by the next one) or starts after it and reads the new limit.
pub(crate) async fn policy_set<B: OperatorStatements>(
    backend: &B,
    params: &PolicySetParams,
) -> Result<PolicyChange> {
    const OP: &str = "policy_set";
    params.patch.validate(&params.scope)?;
    let key = params.scope.key().to_string();
    let target = format!("policy:{key}");
    authorize(backend, &params.actor, "policy_set", target, None).await?;
    let entry =
        |result, detail| policy_entry(&params.actor, &params.scope, &params.patch, result, detail);
    let mut tx = match backend.policy_begin(OP).await {
        Ok(tx) => tx,
        Err(error) => {
            // Recorded on its own so no action goes unaudited.
            let refused = entry(AuditResult::Failed, Some(error.to_string()));
            return Err(failed(backend, &refused, error).await);
        }
    };
    let before = B::policy_locked(&mut tx, &key)
        .await?
        .unwrap_or_else(|| Policy::inherit(params.scope.clone()));
    let next = params.patch.apply_to(before.clone());
    let stored = B::policy_upsert(&mut tx, &key, &next).await?;
    B::audit_in(&mut tx, &entry(policy_result(&before, &stored), None)).await?;
    B::commit(tx, OP).await?;
    Ok(PolicyChange {
        before,
        after: stored,
    })
}

/// The entry points of a store's operator actions (see [`super::backend::entry_points`]).
macro_rules! operator_entry_points {
    ($backend:ident, $pool:ty) => {
        $crate::store::audit::backend::entry_points!($backend, $pool;
            $crate::store::audit::operator::task_enqueue_audited as task_enqueue_audited(
                params: &$crate::store::EnqueueAuditedParams,
                limits: &$crate::domain::InputLimits
            ) -> $crate::store::Enqueued;
            $crate::store::audit::operator::task_cancel as task_cancel(
                params: &$crate::store::CancelParams
            ) -> $crate::store::CancelOutcome;
            $crate::store::audit::operator::task_requeue as task_requeue(
                params: &$crate::store::RequeueParams
            ) -> $crate::store::RequeueOutcome;
            $crate::store::audit::operator::task_run_now as task_run_now(
                params: &$crate::store::RunNowParams
            ) -> $crate::store::RunNowOutcome;
            $crate::store::audit::operator::task_delete as task_delete(
                params: &$crate::store::DeleteTaskParams
            ) -> $crate::store::DeleteOutcome;
            $crate::store::audit::operator::task_requeue_dead as task_requeue_dead(
                params: &$crate::store::RequeueDeadParams
            ) -> $crate::store::DeadBulkOutcome;
            $crate::store::audit::operator::task_purge_dead as task_purge_dead(
                params: &$crate::store::PurgeDeadParams
            ) -> $crate::store::DeadBulkOutcome;
            $crate::store::audit::operator::policy_set as policy_set(
                params: &$crate::store::PolicySetParams
            ) -> $crate::store::PolicyChange;
        );
    };
}
pub(crate) use operator_entry_points;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::domain::Role;
    use TaskStatus as S;

    fn actor() -> Actor {
        Actor {
            name: "ops".into(),
            role: Role::Operator,
        }
    }

    #[test]
    fn a_cancel_moves_waiting_and_running_tasks_only() {
        let cases = [
            (S::Queued, false, Some(S::Cancelled)),
            (S::RetryWait, true, Some(S::Cancelled)),
            (S::Running, true, Some(S::CancelRequested)),
            (S::Running, false, None),
            (S::CancelRequested, true, None),
            (S::Succeeded, false, None),
            (S::Dead, false, None),
        ];
        for (before, held, after) in cases {
            assert_eq!(cancel_step(before, held), after, "{before:?} held={held}");
        }
    }

    #[test]
    fn a_cancel_settles_into_its_audit_row_and_outcome() {
        let id = TaskId(7);
        let owner = AgentId::new("web-1").unwrap();
        let row = |before, after, owner: Option<&AgentId>| CancelRow {
            before,
            after,
            owner: owner.cloned(),
            epoch: LeaseEpoch(3),
        };
        let cases: [(Option<CancelRow>, AuditResult, &str); 5] = [
            (None, AuditResult::Failed, "no such task"),
            (
                Some(row(S::Queued, Some(S::Cancelled), None)),
                AuditResult::Applied,
                "queued -> cancelled",
            ),
            (
                Some(row(S::Running, Some(S::CancelRequested), Some(&owner))),
                AuditResult::Applied,
                "running -> cancel_requested; holder web-1 asked to stop",
            ),
            (
                Some(row(S::CancelRequested, None, Some(&owner))),
                AuditResult::Noop,
                "cancellation already requested",
            ),
            (
                Some(row(S::Succeeded, None, None)),
                AuditResult::Failed,
                "succeeded",
            ),
        ];
        for (found, result, detail) in cases {
            let (entry, outcome) = cancel_settled(&actor(), id, found.clone());
            assert_eq!(entry.result, result, "{found:?}");
            assert_eq!(entry.target, "task:7");
            let text = entry.detail.unwrap();
            assert!(text.contains(detail), "{text}");
            assert_eq!(outcome.is_ok(), result != AuditResult::Failed, "{found:?}");
        }
    }

    #[test]
    fn a_dry_runs_page_of_ids_says_whether_another_follows() {
        let page = dead_page(5, vec![9, 8, 7], 2);
        assert_eq!(page.count, 5);
        assert_eq!(page.ids, [TaskId(9), TaskId(8)]);
        assert_eq!(page.next_before, Some(TaskId(8)));
        let last = dead_page(2, vec![9, 8], 2);
        assert_eq!(last.ids, [TaskId(9), TaskId(8)]);
        assert_eq!(last.next_before, None);
        assert_eq!(dead_page(0, vec![], 100), DeadBulkOutcome::default());
    }

    #[test]
    fn a_requeue_takes_finished_tasks_only() {
        let id = TaskId(9);
        for (before, allowed) in [
            (S::Dead, true),
            (S::Succeeded, true),
            (S::Cancelled, true),
            (S::Queued, false),
            (S::Running, false),
        ] {
            assert_eq!(requeue_allowed(before), allowed, "{before:?}");
            let (entry, outcome) = requeue_settled(&actor(), id, Some((before, allowed)));
            assert_eq!(outcome.is_ok(), allowed);
            let applied = if allowed {
                AuditResult::Applied
            } else {
                AuditResult::Failed
            };
            assert_eq!(entry.result, applied);
        }
        let (entry, outcome) = requeue_settled(&actor(), id, None);
        assert!(matches!(outcome, Err(StoreError::NotFound(TaskId(9)))));
        assert_eq!(entry.result, AuditResult::Failed);
        let (entry, _) = requeue_settled(&actor(), id, Some((S::Dead, true)));
        assert_eq!(entry.detail.as_deref(), Some("dead -> queued"));
    }
}
