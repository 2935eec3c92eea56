//! Operator actions: enqueue, cancel, requeue, bulk requeue of dead letters, policy changes.
//! Each runs in one short transaction that also writes its audit row, so the change and its
//! record commit together; an action refused by the state machine still commits its audit row
//! (result `failed`) and changes nothing else. A viewer is refused before anything changes, with
//! a `denied` row of its own. Input refused by validation writes nothing at all.

use sqlx::types::Json;
use sqlx::{PgExecutor, PgPool, Postgres, Transaction};

use super::rows::{agent_id, get, policy, status};
use super::{enqueue, sql};
use crate::domain::{Actor, InputLimits, LeaseEpoch, Policy, TaskAction, TaskStatus};
use crate::store::audit;
use crate::store::params::duration_ms;
use crate::store::{
    AuditEntry, AuditResult, CancelOutcome, CancelParams, DeniedCalls, EnqueueAuditedParams,
    Enqueued, PolicyChange, PolicySetParams, RequeueDeadParams, RequeueOutcome, RequeueParams,
    Result, StoreError,
};

/// Writes one audit row through `executor` (pass the transaction of the change it records).
pub async fn audit_write<'e, E: PgExecutor<'e>>(executor: E, entry: &AuditEntry) -> Result<()> {
    audit_insert(executor, entry, None, 1, "audit_write").await
}

/// Writes the one `denied` row of `calls` (validated first: bad input writes nothing).
pub(super) async fn audit_write_denied(pool: &PgPool, calls: &DeniedCalls) -> Result<()> {
    let count = calls.validated_count()?;
    audit_insert(
        pool,
        &calls.entry,
        Some(&calls.peer),
        count,
        "audit_record_denied",
    )
    .await
}

/// The insert of one audit row with its peer and the number of calls it stands for.
async fn audit_insert<'e, E: PgExecutor<'e>>(
    executor: E,
    entry: &AuditEntry,
    peer: Option<&str>,
    count: i64,
    op: &'static str,
) -> Result<()> {
    sqlx::query(sql::audit_insert)
        .bind(&entry.actor.name)
        .bind(entry.actor.role.as_str())
        .bind(&entry.action)
        .bind(&entry.target)
        .bind(entry.params.clone().map(Json))
        .bind(entry.result.as_str())
        .bind(&entry.detail)
        .bind(peer)
        .bind(count)
        .execute(executor)
        .await
        .map_err(StoreError::db(op))?;
    Ok(())
}

/// Refuses a viewer before anything changes, recording the denial.
pub(super) async fn authorize(
    pool: &PgPool,
    actor: &Actor,
    action: &str,
    target: String,
) -> Result<()> {
    authorize_with(pool, actor, action, target, None).await
}

/// [`authorize`], recording the refused call's parameters in the denial row.
async fn authorize_with(
    pool: &PgPool,
    actor: &Actor,
    action: &str,
    target: String,
    params: Option<serde_json::Value>,
) -> Result<()> {
    let Some((entry, denied)) = audit::viewer_denial(actor, action, target, params) else {
        return Ok(());
    };
    audit_write(pool, &entry).await?;
    Err(denied)
}

pub(super) async fn begin(
    pool: &PgPool,
    op: &'static str,
) -> Result<Transaction<'static, Postgres>> {
    pool.begin_with(super::BEGIN_READ_COMMITTED)
        .await
        .map_err(StoreError::db(op))
}

async fn commit(tx: Transaction<'static, Postgres>, op: &'static str) -> Result<()> {
    tx.commit().await.map_err(StoreError::db(op))
}

/// Enqueue and its audit row in one transaction. Order: validation (invalid input writes
/// nothing, no audit row either: bad input changes nothing), then authorization (a viewer gets
/// a `denied` row, committed on its own; no task exists yet, so its target is `type:<type>`,
/// as the gRPC layer's own denials name it), then the insert and the `applied` / `noop` row
/// with target `task:<id>`. Any failure after the insert (the audit row refused, the commit
/// lost) rolls the task back too: a task enqueued by an operator exists only with its audit row.
pub(super) async fn task_enqueue_audited(
    pool: &PgPool,
    params: &EnqueueAuditedParams,
    limits: &InputLimits,
) -> Result<Enqueued> {
    const OP: &str = "task_enqueue_audited";
    let valid = params.task.validate(limits)?;
    let audit_params = audit::enqueue_params(&valid);
    authorize_with(
        pool,
        &params.actor,
        "enqueue",
        format!("type:{}", valid.task_type),
        Some(audit_params.clone()),
    )
    .await?;
    let mut tx = begin(pool, OP).await?;
    // READ COMMITTED: a key whose task a concurrent transaction committed mid-statement is
    // visible to the next statement of this same transaction.
    let mut done = None;
    for _ in 0..3 {
        done = enqueue::enqueue_valid(&mut *tx, &valid).await?;
        if done.is_some() {
            break;
        }
    }
    let Some(done) = done else {
        return Err(StoreError::Corrupt {
            what: "enqueue",
            detail: "idempotency key kept conflicting with an invisible row".into(),
        });
    };
    let entry = audit::enqueue_entry(&params.actor, &done, audit_params);
    audit_write(&mut *tx, &entry).await?;
    commit(tx, OP).await?;
    Ok(done)
}

/// Locks the task's row in its own statement, so the action's statement reads the row as it
/// is once the lock is ours (see task_lock.sql). A missing task locks nothing.
async fn lock_task(
    tx: &mut Transaction<'static, Postgres>,
    id: crate::domain::TaskId,
    op: &'static str,
) -> Result<()> {
    sqlx::query(sql::task_lock)
        .bind(id.0)
        .fetch_optional(&mut **tx)
        .await
        .map_err(StoreError::db(op))?;
    Ok(())
}

pub(super) async fn task_cancel(pool: &PgPool, params: &CancelParams) -> Result<CancelOutcome> {
    authorize(pool, &params.actor, "cancel", format!("task:{}", params.id)).await?;
    let mut tx = begin(pool, "task_cancel").await?;
    lock_task(&mut tx, params.id, "task_cancel").await?;
    let row = sqlx::query(sql::task_cancel)
        .bind(params.id.0)
        .fetch_optional(&mut *tx)
        .await
        .map_err(StoreError::db("task_cancel"))?;
    let mut entry = AuditEntry {
        actor: params.actor.clone(),
        action: "cancel".into(),
        target: format!("task:{}", params.id),
        params: None,
        result: AuditResult::Failed,
        detail: None,
    };
    let Some(row) = row else {
        entry.detail = Some("no such task".into());
        audit_write(&mut *tx, &entry).await?;
        commit(tx, "task_cancel").await?;
        return Err(StoreError::NotFound(params.id));
    };
    let before = status(get::<&str>(&row, "before")?)?;
    let after: Option<String> = get(&row, "after")?;
    let owner = get::<Option<String>>(&row, "lease_owner")?
        .map(agent_id)
        .transpose()?;
    let epoch = LeaseEpoch(get(&row, "lease_epoch")?);
    let outcome = match (before, after.as_deref(), owner) {
        (TaskStatus::CancelRequested, None, Some(owner)) => {
            entry.result = AuditResult::Noop;
            entry.detail = Some("cancellation already requested".into());
            Ok(CancelOutcome::AlreadyRequested { owner, epoch })
        }
        (_, Some("cancelled"), _) => {
            entry.result = AuditResult::Applied;
            entry.detail = Some(format!("{before} -> cancelled"));
            Ok(CancelOutcome::Cancelled)
        }
        (_, Some("cancel_requested"), Some(owner)) => {
            entry.result = AuditResult::Applied;
            entry.detail = Some(format!(
                "{before} -> cancel_requested; holder {owner} asked to stop"
            ));
            Ok(CancelOutcome::Requested { owner, epoch })
        }
        _ => {
            let refusal = StoreError::refused(
                params.id,
                before,
                TaskAction::RequestCancel,
                "cancel",
                "cancelled",
            );
            entry.detail = Some(refusal.to_string());
            Err(refusal)
        }
    };
    audit_write(&mut *tx, &entry).await?;
    commit(tx, "task_cancel").await?;
    outcome
}

pub(super) async fn task_requeue(pool: &PgPool, params: &RequeueParams) -> Result<RequeueOutcome> {
    authorize(
        pool,
        &params.actor,
        "requeue",
        format!("task:{}", params.id),
    )
    .await?;
    let mut tx = begin(pool, "task_requeue").await?;
    lock_task(&mut tx, params.id, "task_requeue").await?;
    let row = sqlx::query(sql::task_requeue)
        .bind(params.id.0)
        .fetch_optional(&mut *tx)
        .await
        .map_err(StoreError::db("task_requeue"))?;
    let mut entry = AuditEntry {
        actor: params.actor.clone(),
        action: "requeue".into(),
        target: format!("task:{}", params.id),
        params: None,
        result: AuditResult::Failed,
        detail: None,
    };
    let outcome = match row {
        None => Err(StoreError::NotFound(params.id)),
        Some(row) => {
            let before = status(get::<&str>(&row, "before")?)?;
            if get::<bool>(&row, "changed")? {
                entry.result = AuditResult::Applied;
                Ok(RequeueOutcome {
                    id: params.id,
                    previous: before,
                })
            } else {
                Err(StoreError::refused(
                    params.id,
                    before,
                    TaskAction::Requeue,
                    "requeue",
                    "requeued",
                ))
            }
        }
    };
    entry.detail = Some(match &outcome {
        Ok(done) => format!("{} -> queued", done.previous),
        Err(e) => e.to_string(),
    });
    audit_write(&mut *tx, &entry).await?;
    commit(tx, "task_requeue").await?;
    outcome
}

pub(super) async fn task_requeue_dead(pool: &PgPool, params: &RequeueDeadParams) -> Result<u64> {
    params.validate()?;
    if !params.dry_run {
        authorize(
            pool,
            &params.actor,
            "requeue_dead",
            "dead-letter queue".into(),
        )
        .await?;
    }
    let f = &params.filter;
    let statement = if params.dry_run {
        sql::task_count_dead
    } else {
        sql::task_requeue_dead
    };
    let mut tx = begin(pool, "task_requeue_dead").await?;
    let row = sqlx::query(statement)
        .bind(f.task_type.as_ref().map(|t| t.as_str()))
        .bind(f.error_code.as_deref())
        .bind(f.since)
        .bind(f.until)
        .fetch_one(&mut *tx)
        .await
        .map_err(StoreError::db("task_requeue_dead"))?;
    let count = u64::try_from(get::<i64>(&row, "count")?).unwrap_or(0);
    let entry = audit::requeue_dead_entry(&params.actor, f, params.dry_run, count);
    audit_write(&mut *tx, &entry).await?;
    commit(tx, "task_requeue_dead").await?;
    Ok(count)
}

pub(super) async fn policy_set(pool: &PgPool, params: &PolicySetParams) -> Result<PolicyChange> {
    params.patch.validate(&params.scope)?;
    let key = params.scope.key().to_string();
    authorize(pool, &params.actor, "policy_set", format!("policy:{key}")).await?;
    let mut tx = begin(pool, "policy_set").await?;
    let guard = sqlx::query(sql::policy_guard_exclusive)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db("policy_set"));
    if let Err(error) = guard {
        // The transaction is aborted; record the attempt on its own so no action goes unaudited.
        drop(tx);
        let entry = audit::policy_entry(
            &params.actor,
            &params.scope,
            &params.patch,
            AuditResult::Failed,
            Some(error.to_string()),
        );
        audit_write(pool, &entry).await?;
        return Err(error);
    }
    let current = sqlx::query(sql::policy_get_for_update)
        .bind(&key)
        .fetch_optional(&mut *tx)
        .await
        .map_err(StoreError::db("policy_set"))?;
    let before = match current {
        Some(row) => policy(&row)?,
        None => Policy::inherit(params.scope.clone()),
    };
    let next = params.patch.apply_to(before.clone());
    let ms = |d: Option<std::time::Duration>| d.map(duration_ms);
    let row = sqlx::query(sql::policy_upsert)
        .bind(&key)
        .bind(
            next.max_concurrency
                .map(|l| i32::try_from(l).unwrap_or(i32::MAX)),
        )
        .bind(next.paused)
        .bind(ms(next.retry_base))
        .bind(next.retry_multiplier)
        .bind(ms(next.retry_max))
        .bind(next.retry_jitter)
        .bind(ms(next.timeout))
        .bind(ms(next.slow_threshold))
        .fetch_one(&mut *tx)
        .await
        .map_err(StoreError::db("policy_set"))?;
    let stored = policy(&row)?;
    let result = if stored == before {
        AuditResult::Noop
    } else {
        AuditResult::Applied
    };
    let entry = audit::policy_entry(&params.actor, &params.scope, &params.patch, result, None);
    audit_write(&mut *tx, &entry).await?;
    commit(tx, "policy_set").await?;
    Ok(PolicyChange {
        before,
        after: stored,
    })
}
