//! Cron schedules on PostgreSQL: the operator actions (each one transaction with its audit
//! row) and the leader's firing pass. What they decide is in [`crate::store::schedules`].
//!
//! The firing pass first reads whether anything is due (an idle pass ends there), then runs
//! in one READ COMMITTED transaction: it first reads the `leader` row
//! `FOR SHARE` under the caller's owner and term, so no election can change leadership until
//! it commits, then locks the due rows `FOR UPDATE SKIP LOCKED`, enqueues one task per tick
//! under the tick's idempotency key and moves each row on. A stale leader finds the lease
//! gone and fires nothing; were its check to pass somehow, the keys still make one task per
//! tick.

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool, Postgres, Row};

use super::operator::{audit_write, authorize, begin};
use super::rows::{agent_id, get, status};
use super::{enqueue, sql, tx_now};
use crate::domain::{Actor, InputLimits, Schedule};
use crate::store::schedules::{
    self as common, AddPlan, FireReport, LeaderRecord, ScheduleAddOutcome, ScheduleAddParams,
    ScheduleAdded, ScheduleEnableParams, ScheduleEnabled, ScheduleFireParams, ScheduleListing,
    ScheduleNameParams, ScheduleRecord, ScheduleRow, ScheduleTriggered, StoredDefinition,
    UnreadableSchedule, action,
};
use crate::store::{Enqueued, NewTask, Result, StoreError};

fn row(r: &PgRow) -> Result<ScheduleRow> {
    let Json(payload): Json<serde_json::Value> = get(r, "payload")?;
    Ok(ScheduleRow {
        name: get(r, "name")?,
        cron: get(r, "cron")?,
        time_zone: get(r, "timezone")?,
        task_type: get(r, "task_type")?,
        payload,
        priority: get(r, "priority")?,
        max_attempts: get(r, "max_attempts")?,
        enabled: get(r, "enabled")?,
        missed: get(r, "missed")?,
        catch_up_max: get(r, "catch_up_max")?,
        next_fire_at: get(r, "next_fire_at")?,
        last_fired_at: get(r, "last_fired_at")?,
        last_task_id: get(r, "last_task_id")?,
        last_task_status: get::<Option<&str>>(r, "last_task_status")?
            .map(status)
            .transpose()?,
        last_error: get(r, "last_error")?,
        created_at: get(r, "created_at")?,
        updated_at: get(r, "updated_at")?,
    })
}

/// Records an action refused with `error` as `failed`, on its own (the action's transaction,
/// dropped by the caller, changed nothing), and gives `error` back.
async fn failed(
    pool: &PgPool,
    actor: &Actor,
    action: &str,
    name: &str,
    error: StoreError,
) -> StoreError {
    let entry = common::failed_entry(actor, action, name, &error);
    if let Err(audit) = audit_write(pool, &entry).await {
        tracing::warn!(%audit, action, schedule = name, "could not audit a refused schedule action");
    }
    error
}

async fn get_record(
    conn: &mut PgConnection,
    name: &str,
    op: &'static str,
) -> Result<ScheduleRecord> {
    let r = sqlx::query(sql::schedule_get)
        .bind(name)
        .fetch_optional(conn)
        .await
        .map_err(StoreError::db(op))?
        .ok_or_else(|| StoreError::ScheduleNotFound(name.to_string()))?;
    row(&r)?.record()
}

/// The locked row of `name`, if there is one (unreadable rows come back as their error).
async fn lock(
    tx: &mut PgConnection,
    name: &str,
    op: &'static str,
) -> Result<Option<Result<Schedule>>> {
    let r = sqlx::query(sql::schedule_lock)
        .bind(name)
        .fetch_optional(tx)
        .await
        .map_err(StoreError::db(op))?;
    Ok(r.map(|r| row(&r).and_then(|row| row.schedule())))
}

/// `statement` with a definition's columns bound as `$1`–`$10` (name, cron, zone, type,
/// payload, priority, max attempts, enabled, missed, catch-up bound), as the insert and the
/// update both take them.
fn definition<'q>(
    statement: &'static str,
    d: &StoredDefinition<'q>,
) -> sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments> {
    sqlx::query(statement)
        .bind(d.name)
        .bind(d.cron)
        .bind(d.time_zone)
        .bind(d.task_type)
        .bind(Json(d.payload))
        .bind(d.priority)
        .bind(d.max_attempts)
        .bind(d.enabled)
        .bind(d.missed)
        .bind(d.catch_up_max)
}

/// The earliest next fire time of any enabled schedule, and the database's now.
async fn next_due<'e, E: sqlx::PgExecutor<'e>>(
    executor: E,
    op: &'static str,
) -> Result<(Option<DateTime<Utc>>, DateTime<Utc>)> {
    let r = sqlx::query(sql::schedule_next_due)
        .fetch_one(executor)
        .await
        .map_err(StoreError::db(op))?;
    Ok((get(&r, "next_due")?, get(&r, "now")?))
}

pub(super) async fn schedule_list(pool: &PgPool) -> Result<ScheduleListing> {
    let rows = sqlx::query(sql::schedule_list)
        .fetch_all(pool)
        .await
        .map_err(StoreError::db("schedule_list"))?;
    let mut listing = ScheduleListing::default();
    for r in &rows {
        listing.push(row(r), || UnreadableSchedule {
            name: r.try_get("name").unwrap_or_default(),
            cron: r.try_get("cron").ok(),
            task_type: r.try_get("task_type").ok(),
            enabled: r.try_get("enabled").ok(),
            error: String::new(),
        });
    }
    Ok(listing)
}

pub(super) async fn schedule_add(pool: &PgPool, p: &ScheduleAddParams) -> Result<ScheduleAdded> {
    const OP: &str = "schedule_add";
    let name = p.schedule.name().as_str();
    let params = common::add_audit_params(&p.schedule, p.mode);
    authorize(pool, &p.actor, action::ADD, common::target(name)).await?;
    let mut tx = begin(pool, OP).await?;
    let now = tx_now(&mut tx, OP).await?;
    // Twice at most: an insert that lost a race to a concurrent one finds its row the second
    // time round.
    let mut outcome = None;
    for _ in 0..2 {
        let plan = match common::plan_add(lock(&mut tx, name, OP).await?, &p.schedule, p.mode) {
            Ok(plan) => plan,
            Err(refused @ StoreError::ScheduleExists { .. }) => {
                drop(tx);
                let entry = common::refused_add_entry(&p.actor, name, params, &refused);
                audit_write(pool, &entry).await?;
                return Err(refused);
            }
            Err(e) => return Err(e),
        };
        outcome = match plan {
            AddPlan::Insert => {
                let d = StoredDefinition::of(&p.schedule);
                let inserted = definition(sql::schedule_insert, &d)
                    .bind(common::first_fire(&p.schedule, now))
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(StoreError::db(OP))?;
                inserted.map(|_| ScheduleAddOutcome::Created)
            }
            AddPlan::Update {
                schedule,
                reset_next,
            } => {
                let d = StoredDefinition::of(&schedule);
                definition(sql::schedule_update, &d)
                    .bind(reset_next)
                    .bind(common::first_fire(&schedule, now))
                    .execute(&mut *tx)
                    .await
                    .map_err(StoreError::db(OP))?;
                Some(ScheduleAddOutcome::Replaced)
            }
            AddPlan::Unchanged => Some(ScheduleAddOutcome::Unchanged),
        };
        if outcome.is_some() {
            break;
        }
    }
    let outcome = outcome.ok_or(StoreError::Busy { op: OP })?;
    if common::audits(p.mode, outcome) {
        let entry = common::add_entry(&p.actor, name, params, outcome);
        audit_write(&mut *tx, &entry).await?;
    }
    let record = get_record(&mut tx, name, OP).await?;
    tx.commit().await.map_err(StoreError::db(OP))?;
    Ok(ScheduleAdded { outcome, record })
}

pub(super) async fn schedule_remove(
    pool: &PgPool,
    p: &ScheduleNameParams,
) -> Result<Option<ScheduleRecord>> {
    const OP: &str = "schedule_remove";
    let name = p.name.as_str();
    authorize(pool, &p.actor, action::REMOVE, common::target(name)).await?;
    let mut tx = begin(pool, OP).await?;
    if lock(&mut tx, name, OP).await?.is_none() {
        drop(tx);
        let missing = StoreError::ScheduleNotFound(name.to_string());
        return Err(failed(pool, &p.actor, action::REMOVE, name, missing).await);
    }
    let record = get_record(&mut tx, name, OP).await.ok();
    sqlx::query(sql::schedule_delete)
        .bind(name)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    let entry = common::remove_entry(&p.actor, name);
    audit_write(&mut *tx, &entry).await?;
    tx.commit().await.map_err(StoreError::db(OP))?;
    Ok(record)
}

pub(super) async fn schedule_set_enabled(
    pool: &PgPool,
    p: &ScheduleEnableParams,
) -> Result<ScheduleEnabled> {
    const OP: &str = "schedule_set_enabled";
    let name = p.name.as_str();
    let act = common::enable_action(p.enabled);
    authorize(pool, &p.actor, act, common::target(name)).await?;
    let mut tx = begin(pool, OP).await?;
    let now = tx_now(&mut tx, OP).await?;
    let before = match common::found(lock(&mut tx, name, OP).await?, name) {
        Ok(before) => before,
        Err(why) => {
            drop(tx);
            return Err(failed(pool, &p.actor, act, name, why).await);
        }
    };
    let changed = before.enabled() != p.enabled;
    if changed {
        sqlx::query(sql::schedule_set_enabled)
            .bind(name)
            .bind(p.enabled)
            .bind(common::first_fire(&before, now))
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
    }
    let entry = common::enable_entry(&p.actor, p.enabled, name, changed);
    audit_write(&mut *tx, &entry).await?;
    let record = get_record(&mut tx, name, OP).await?;
    tx.commit().await.map_err(StoreError::db(OP))?;
    Ok(ScheduleEnabled { changed, record })
}

/// Enqueues one task in the transaction, looking again when its key's task was committed by
/// a concurrent transaction this statement could not see.
async fn enqueue_in(
    tx: &mut PgConnection,
    task: &NewTask,
    limits: &InputLimits,
) -> Result<Enqueued> {
    let valid = task.validate(limits)?;
    for _ in 0..3 {
        if let Some(done) = enqueue::enqueue_valid(&mut *tx, &valid).await? {
            return Ok(done);
        }
    }
    Err(StoreError::Corrupt {
        what: "enqueue",
        detail: "idempotency key kept conflicting with an invisible row".into(),
    })
}

pub(super) async fn schedule_trigger(
    pool: &PgPool,
    p: &ScheduleNameParams,
    limits: &InputLimits,
) -> Result<ScheduleTriggered> {
    const OP: &str = "schedule_trigger";
    let name = p.name.as_str();
    authorize(pool, &p.actor, action::TRIGGER, common::target(name)).await?;
    let mut tx = begin(pool, OP).await?;
    let now = tx_now(&mut tx, OP).await?;
    let schedule = match common::found(lock(&mut tx, name, OP).await?, name) {
        Ok(schedule) => schedule,
        Err(why) => {
            drop(tx);
            return Err(failed(pool, &p.actor, action::TRIGGER, name, why).await);
        }
    };
    let key = common::trigger_key(&p.name, now);
    let task = match enqueue_in(&mut tx, &common::tick_task(&schedule, key.clone()), limits).await {
        Ok(task) => task,
        Err(refused @ StoreError::Invalid(_)) => {
            drop(tx);
            return Err(failed(pool, &p.actor, action::TRIGGER, name, refused).await);
        }
        Err(e) => return Err(e),
    };
    sqlx::query(sql::schedule_set_last_task)
        .bind(name)
        .bind(task.id.0)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    let entry = common::trigger_entry(&p.actor, name, &task, &key);
    audit_write(&mut *tx, &entry).await?;
    sqlx::query(sql::notify_tasks)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    let record = get_record(&mut tx, name, OP).await?;
    tx.commit().await.map_err(StoreError::db(OP))?;
    Ok(ScheduleTriggered {
        task,
        idempotency_key: key,
        record,
    })
}

pub(super) async fn schedule_fire_due(
    pool: &PgPool,
    p: &ScheduleFireParams,
    limits: &InputLimits,
) -> Result<FireReport> {
    const OP: &str = "schedule_fire_due";
    // An idle pass is one read: the transaction (and its share lock on the leader row) only
    // when something is due.
    let (next, now) = next_due(pool, OP).await?;
    if next.is_none_or(|next| next > now) {
        return Ok(FireReport {
            next_due: next,
            now: Some(now),
            ..FireReport::default()
        });
    }
    let mut tx = begin(pool, OP).await?;
    let held: Option<i64> = sqlx::query_scalar(sql::leader_check)
        .bind(p.leader.as_str())
        .bind(p.term)
        .fetch_optional(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    if held.is_none() {
        return Ok(FireReport {
            fenced: true,
            ..FireReport::default()
        });
    }
    let now = tx_now(&mut tx, OP).await?;
    let due = sqlx::query(sql::schedule_due)
        .bind(i64::from(p.limit.max(1)))
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    let mut report = FireReport::default();
    for r in &due {
        if report.fired.len() >= common::MAX_TICKS_PER_PASS {
            break;
        }
        // A row that cannot be decoded is passed over (and says why), never a stop for all.
        let (name, step) = match row(r) {
            Ok(due) => (due.name.clone(), common::plan_fire(&due, now, p.on_time)),
            Err(e) => (get::<String>(r, "name")?, common::unreadable(&e, now)),
        };
        let mut enqueued = Vec::new();
        for (tick, task) in step.ticks() {
            let done = enqueue_in(&mut tx, task, limits).await;
            let lost = matches!(&done, Err(e) if !matches!(e, StoreError::Invalid(_)));
            enqueued.push((*tick, done));
            if lost {
                break;
            }
        }
        let settled = common::settle(&name, step, enqueued, &mut report)?;
        sqlx::query(sql::schedule_fired)
            .bind(&name)
            .bind(settled.last_tick)
            .bind(settled.next)
            .bind(settled.last_task)
            .bind(settled.error)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
    }
    if !report.fired.is_empty() {
        sqlx::query(sql::notify_tasks)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
    }
    let (next, now) = next_due(&mut *tx, OP).await?;
    report.next_due = next;
    report.now = Some(now);
    tx.commit().await.map_err(StoreError::db(OP))?;
    Ok(report)
}

pub(super) async fn leader_get(pool: &PgPool) -> Result<Option<LeaderRecord>> {
    let r = sqlx::query(sql::leader_get)
        .fetch_optional(pool)
        .await
        .map_err(StoreError::db("leader_get"))?;
    r.map(|r| {
        Ok(LeaderRecord {
            owner: get::<Option<String>>(&r, "owner")?
                .map(agent_id)
                .transpose()?,
            term: get(&r, "term")?,
            elected_at: get(&r, "elected_at")?,
            lease_until: get(&r, "lease_until")?,
            heartbeat_at: get(&r, "heartbeat_at")?,
            now: get(&r, "now")?,
        })
    })
    .transpose()
}
