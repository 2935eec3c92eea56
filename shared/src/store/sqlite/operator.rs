//! Operator actions: enqueue, cancel, requeue, bulk requeue of dead letters, policy changes.
//! Each runs in one BEGIN IMMEDIATE transaction that also writes its audit row, so the change
//! and its record commit together; an action refused by the state machine still commits its
//! audit row (result `failed`) and changes nothing else. A viewer is refused before anything
//! changes, with a `denied` row of its own. Input refused by validation writes nothing at all.

use sqlx::{SqliteConnection, SqlitePool};

use super::rows::{self, agent_id, get, policy, status};
use super::{commit, holder, sql, write_tx};
use crate::domain::{Actor, InputLimits, LeaseEpoch, Policy, TaskAction, TaskStatus};
use crate::store::audit;
use crate::store::params::duration_ms;
use crate::store::{
    AuditEntry, AuditResult, CancelOutcome, CancelParams, DeniedCalls, EnqueueAuditedParams,
    Enqueued, PolicyChange, PolicySetParams, RequeueDeadParams, RequeueOutcome, RequeueParams,
    Result, StoreError,
};

/// Writes one audit row on `conn` — pass the transaction of the change it records, so the
/// two commit together. Its time is SQLite's clock.
pub async fn audit_write_on(conn: &mut SqliteConnection, entry: &AuditEntry) -> Result<()> {
    let now: i64 = sqlx::query_scalar(sql::db_now)
        .fetch_one(&mut *conn)
        .await
        .map_err(StoreError::db("audit_write"))?;
    audit_write(conn, entry, now).await
}

/// Writes one audit row inside `tx` (the transaction of the change it records).
pub(super) async fn audit_write(
    tx: &mut SqliteConnection,
    entry: &AuditEntry,
    now: i64,
) -> Result<()> {
    audit_insert(tx, entry, now, None, 1, "audit_write").await
}

/// The insert of one audit row with its peer and the number of calls it stands for.
async fn audit_insert(
    tx: &mut SqliteConnection,
    entry: &AuditEntry,
    now: i64,
    peer: Option<&str>,
    count: i64,
    op: &'static str,
) -> Result<()> {
    let params = entry
        .params
        .as_ref()
        .map(|p| rows::to_text(p, "audit params"))
        .transpose()?;
    sqlx::query(sql::audit_insert)
        .bind(now)
        .bind(&entry.actor.name)
        .bind(entry.actor.role.as_str())
        .bind(&entry.action)
        .bind(&entry.target)
        .bind(params)
        .bind(entry.result.as_str())
        .bind(&entry.detail)
        .bind(peer)
        .bind(count)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db(op))?;
    Ok(())
}

/// Writes the one `denied` row of `calls` on its own (validated first: bad input writes
/// nothing).
pub(super) async fn audit_record_denied(pool: &SqlitePool, calls: &DeniedCalls) -> Result<()> {
    const OP: &str = "audit_record_denied";
    let count = calls.validated_count()?;
    let (mut tx, now) = write_tx(pool, OP).await?;
    audit_insert(&mut tx, &calls.entry, now, Some(&calls.peer), count, OP).await?;
    commit(tx, OP).await
}

/// An audit row on its own.
pub(super) async fn audit_record(pool: &SqlitePool, entry: &AuditEntry) -> Result<()> {
    let (mut tx, now) = write_tx(pool, "audit_write").await?;
    audit_write(&mut tx, entry, now).await?;
    commit(tx, "audit_write").await
}

/// Refuses a viewer before anything changes, recording the denial (with the refused call's
/// parameters when given).
pub(super) async fn authorize(
    pool: &SqlitePool,
    actor: &Actor,
    action: &str,
    target: String,
    params: Option<serde_json::Value>,
) -> Result<()> {
    let Some((entry, denied)) = audit::viewer_denial(actor, action, target, params) else {
        return Ok(());
    };
    audit_record(pool, &entry).await?;
    Err(denied)
}

/// Enqueue and its audit row in one transaction, in the order of the PostgreSQL store:
/// validation (writes nothing), authorization (a viewer's denial row, target `type:<type>`),
/// then the insert and its `applied` / `noop` row with target `task:<id>`.
pub(super) async fn task_enqueue_audited(
    pool: &SqlitePool,
    params: &EnqueueAuditedParams,
    limits: &InputLimits,
) -> Result<Enqueued> {
    const OP: &str = "task_enqueue_audited";
    let valid = params.task.validate(limits)?;
    let audit_params = audit::enqueue_params(&valid);
    authorize(
        pool,
        &params.actor,
        "enqueue",
        format!("type:{}", valid.task_type),
        Some(audit_params.clone()),
    )
    .await?;
    let (mut tx, now) = write_tx(pool, OP).await?;
    let done = holder::enqueue_valid(&mut tx, &valid, now).await?;
    let entry = audit::enqueue_entry(&params.actor, &done, audit_params);
    audit_write(&mut tx, &entry, now).await?;
    commit(tx, OP).await?;
    Ok(done)
}

pub(super) async fn task_cancel(pool: &SqlitePool, params: &CancelParams) -> Result<CancelOutcome> {
    const OP: &str = "task_cancel";
    authorize(
        pool,
        &params.actor,
        "cancel",
        format!("task:{}", params.id),
        None,
    )
    .await?;
    let (mut tx, now) = write_tx(pool, OP).await?;
    let row = sqlx::query(sql::task_get_lease)
        .bind(params.id.0)
        .fetch_optional(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
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
        audit_write(&mut tx, &entry, now).await?;
        commit(tx, OP).await?;
        return Err(StoreError::NotFound(params.id));
    };
    let before = status(get::<&str>(&row, "status")?)?;
    let owner = get::<Option<String>>(&row, "lease_owner")?
        .map(agent_id)
        .transpose()?;
    let epoch = LeaseEpoch(get(&row, "lease_epoch")?);
    let outcome = match (before, owner) {
        (TaskStatus::Queued | TaskStatus::RetryWait, _) => {
            sqlx::query(sql::task_cancel)
                .bind(params.id.0)
                .bind(now)
                .execute(&mut *tx)
                .await
                .map_err(StoreError::db(OP))?;
            entry.result = AuditResult::Applied;
            entry.detail = Some(format!("{before} -> cancelled"));
            Ok(CancelOutcome::Cancelled)
        }
        (TaskStatus::Running, Some(owner)) => {
            sqlx::query(sql::task_cancel_request)
                .bind(params.id.0)
                .bind(now)
                .execute(&mut *tx)
                .await
                .map_err(StoreError::db(OP))?;
            entry.result = AuditResult::Applied;
            entry.detail = Some(format!(
                "{before} -> cancel_requested; holder {owner} asked to stop"
            ));
            Ok(CancelOutcome::Requested { owner, epoch })
        }
        (TaskStatus::CancelRequested, Some(owner)) => {
            entry.result = AuditResult::Noop;
            entry.detail = Some("cancellation already requested".into());
            Ok(CancelOutcome::AlreadyRequested { owner, epoch })
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
    audit_write(&mut tx, &entry, now).await?;
    commit(tx, OP).await?;
    outcome
}

pub(super) async fn task_requeue(
    pool: &SqlitePool,
    params: &RequeueParams,
) -> Result<RequeueOutcome> {
    const OP: &str = "task_requeue";
    authorize(
        pool,
        &params.actor,
        "requeue",
        format!("task:{}", params.id),
        None,
    )
    .await?;
    let (mut tx, now) = write_tx(pool, OP).await?;
    let before: Option<String> = sqlx::query_scalar(sql::task_get_status)
        .bind(params.id.0)
        .fetch_optional(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    let mut entry = AuditEntry {
        actor: params.actor.clone(),
        action: "requeue".into(),
        target: format!("task:{}", params.id),
        params: None,
        result: AuditResult::Failed,
        detail: None,
    };
    let outcome = match before {
        None => Err(StoreError::NotFound(params.id)),
        Some(raw) => {
            let before = status(&raw)?;
            if before.is_terminal() {
                sqlx::query(sql::task_requeue)
                    .bind(now)
                    .bind(params.id.0)
                    .execute(&mut *tx)
                    .await
                    .map_err(StoreError::db(OP))?;
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
    audit_write(&mut tx, &entry, now).await?;
    commit(tx, OP).await?;
    outcome
}

pub(super) async fn task_requeue_dead(
    pool: &SqlitePool,
    params: &RequeueDeadParams,
) -> Result<u64> {
    const OP: &str = "task_requeue_dead";
    params.validate()?;
    if !params.dry_run {
        authorize(
            pool,
            &params.actor,
            "requeue_dead",
            "dead-letter queue".into(),
            None,
        )
        .await?;
    }
    let f = &params.filter;
    let (mut tx, now) = write_tx(pool, OP).await?;
    let count = if params.dry_run {
        let n: i64 = sqlx::query_scalar(sql::task_count_dead)
            .bind(now)
            .bind(f.task_type.as_ref().map(|t| t.as_str()))
            .bind(f.error_code.as_deref())
            .bind(f.since.map(rows::micros))
            .bind(f.until.map(rows::micros))
            .fetch_one(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
        u64::try_from(n).unwrap_or(0)
    } else {
        let done = sqlx::query(sql::task_requeue_dead)
            .bind(now)
            .bind(f.task_type.as_ref().map(|t| t.as_str()))
            .bind(f.error_code.as_deref())
            .bind(f.since.map(rows::micros))
            .bind(f.until.map(rows::micros))
            .fetch_all(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
        done.len() as u64
    };
    let entry = audit::requeue_dead_entry(&params.actor, f, params.dry_run, count);
    audit_write(&mut tx, &entry, now).await?;
    commit(tx, OP).await?;
    Ok(count)
}

/// A policy change. The write lock orders it against every claim: a claim either committed
/// before it (and is counted by the next one) or starts after it and reads the new limit.
pub(super) async fn policy_set(
    pool: &SqlitePool,
    params: &PolicySetParams,
) -> Result<PolicyChange> {
    const OP: &str = "policy_set";
    params.patch.validate(&params.scope)?;
    let key = params.scope.key().to_string();
    authorize(
        pool,
        &params.actor,
        "policy_set",
        format!("policy:{key}"),
        None,
    )
    .await?;
    let (mut tx, now) = match write_tx(pool, OP).await {
        Ok(begun) => begun,
        Err(error) => {
            // Record the attempt on its own so no action goes unaudited — when the lock can be
            // had for that (it may be just as busy; the error says so either way).
            let entry = audit::policy_entry(
                &params.actor,
                &params.scope,
                &params.patch,
                AuditResult::Failed,
                Some(error.to_string()),
            );
            if let Err(audit) = audit_record(pool, &entry).await {
                tracing::warn!(%audit, "could not audit a failed policy change");
            }
            return Err(error);
        }
    };
    let current = sqlx::query(sql::policy_get_for_update)
        .bind(&key)
        .fetch_optional(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    let before = match current {
        Some(row) => policy(&row)?,
        None => Policy::inherit(params.scope.clone()),
    };
    let next = params.patch.apply_to(before.clone());
    let ms = |d: Option<std::time::Duration>| d.map(duration_ms);
    let row = sqlx::query(sql::policy_upsert)
        .bind(&key)
        .bind(next.max_concurrency.map(i64::from))
        .bind(next.paused)
        .bind(ms(next.retry_base))
        .bind(next.retry_multiplier)
        .bind(ms(next.retry_max))
        .bind(next.retry_jitter)
        .bind(ms(next.timeout))
        .bind(ms(next.slow_threshold))
        .bind(now)
        .fetch_one(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    let stored = policy(&row)?;
    let result = if stored == before {
        AuditResult::Noop
    } else {
        AuditResult::Applied
    };
    let entry = audit::policy_entry(&params.actor, &params.scope, &params.patch, result, None);
    audit_write(&mut tx, &entry, now).await?;
    commit(tx, OP).await?;
    Ok(PolicyChange {
        before,
        after: stored,
    })
}
