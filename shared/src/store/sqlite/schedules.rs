//! Cron schedules on SQLite: the PostgreSQL store's rules (see `postgres/schedules.rs`), each
//! operation one `BEGIN IMMEDIATE` transaction. The write lock serialises the firing pass
//! with every election and renewal, so the leader check at its start holds until it commits.

use sqlx::sqlite::SqliteRow;
use sqlx::{Row, SqliteConnection, SqlitePool};

use super::holder::enqueue_valid;
use super::operator::{audit_record, audit_write, authorize};
use super::rows::{self, agent_id, get, get_opt_time, get_time, micros, status, time};
use super::{WriteTx, commit, read_tx, sql, write_tx};
use crate::domain::{Actor, InputLimits, Schedule};
use crate::store::schedules::{
    self as common, AddPlan, FireReport, LeaderRecord, ScheduleAddOutcome, ScheduleAddParams,
    ScheduleAdded, ScheduleEnableParams, ScheduleEnabled, ScheduleFireParams, ScheduleListing,
    ScheduleNameParams, ScheduleRecord, ScheduleRow, ScheduleTriggered, StoredDefinition,
    UnreadableSchedule, action,
};
use crate::store::{Enqueued, NewTask, Result, StoreError};

fn row(r: &SqliteRow) -> Result<ScheduleRow> {
    let payload = rows::json::<serde_json::Value>(get(r, "payload")?, "schedule payload")?
        .unwrap_or(serde_json::Value::Null);
    let small = |column: &'static str| -> Result<i64> { get(r, column) };
    let narrow = |column: &'static str, v: i64| StoreError::Corrupt {
        what: column,
        detail: format!("{v} is out of range"),
    };
    let priority = small("priority")?;
    let max_attempts = small("max_attempts")?;
    let catch_up_max = small("catch_up_max")?;
    Ok(ScheduleRow {
        name: get(r, "name")?,
        cron: get(r, "cron")?,
        time_zone: get(r, "timezone")?,
        task_type: get(r, "task_type")?,
        payload,
        priority: i16::try_from(priority).map_err(|_| narrow("priority", priority))?,
        max_attempts: i32::try_from(max_attempts)
            .map_err(|_| narrow("max_attempts", max_attempts))?,
        enabled: get(r, "enabled")?,
        missed: get(r, "missed")?,
        catch_up_max: i32::try_from(catch_up_max)
            .map_err(|_| narrow("catch_up_max", catch_up_max))?,
        next_fire_at: get_opt_time(r, "next_fire_at")?,
        last_fired_at: get_opt_time(r, "last_fired_at")?,
        last_task_id: get(r, "last_task_id")?,
        last_task_status: get::<Option<String>>(r, "last_task_status")?
            .as_deref()
            .map(status)
            .transpose()?,
        last_error: get(r, "last_error")?,
        created_at: get_time(r, "created_at")?,
        updated_at: get_time(r, "updated_at")?,
    })
}

/// Records an action refused with `error` as `failed`, on its own (the action's transaction,
/// dropped by the caller, changed nothing), and gives `error` back.
async fn failed(
    pool: &SqlitePool,
    actor: &Actor,
    action: &str,
    name: &str,
    error: StoreError,
) -> StoreError {
    let entry = common::failed_entry(actor, action, name, &error);
    if let Err(audit) = audit_record(pool, &entry).await {
        tracing::warn!(%audit, action, schedule = name, "could not audit a refused schedule action");
    }
    error
}

async fn get_record(
    conn: &mut SqliteConnection,
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

/// The row of `name`, if there is one (unreadable rows come back as their error). Inside a
/// write transaction nothing can change it before the commit.
async fn stored(
    tx: &mut SqliteConnection,
    name: &str,
    op: &'static str,
) -> Result<Option<Result<Schedule>>> {
    let r = sqlx::query(sql::schedule_get)
        .bind(name)
        .fetch_optional(tx)
        .await
        .map_err(StoreError::db(op))?;
    Ok(r.map(|r| row(&r).and_then(|row| row.schedule())))
}

pub(super) async fn schedule_list(pool: &SqlitePool) -> Result<ScheduleListing> {
    const OP: &str = "schedule_list";
    let (mut tx, _now) = read_tx(pool, OP).await?;
    let rows = sqlx::query(sql::schedule_list)
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
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

/// Writes a definition: a new row, or the existing one with `reset_next` saying whether the
/// next fire time becomes `next`.
async fn write_definition(
    tx: &mut WriteTx,
    schedule: &Schedule,
    insert: bool,
    reset_next: bool,
    now: i64,
    op: &'static str,
) -> Result<()> {
    let d = StoredDefinition::of(schedule);
    let payload = rows::to_text(d.payload, "schedule payload")?;
    let next = time(now, "now").map(|now| common::first_fire(schedule, now).map(micros))?;
    let statement = if insert {
        sql::schedule_insert
    } else {
        sql::schedule_update
    };
    sqlx::query(statement)
        .bind(d.name)
        .bind(d.cron)
        .bind(d.time_zone)
        .bind(d.task_type)
        .bind(payload)
        .bind(d.priority)
        .bind(d.max_attempts)
        .bind(d.enabled)
        .bind(d.missed)
        .bind(d.catch_up_max)
        .bind(reset_next)
        .bind(next)
        .bind(now)
        .execute(&mut **tx)
        .await
        .map_err(StoreError::db(op))?;
    Ok(())
}

pub(super) async fn schedule_add(
    pool: &SqlitePool,
    p: &ScheduleAddParams,
) -> Result<ScheduleAdded> {
    const OP: &str = "schedule_add";
    let name = p.schedule.name().as_str();
    let params = common::add_audit_params(&p.schedule, p.mode);
    authorize(pool, &p.actor, action::ADD, common::target(name), None).await?;
    let (mut tx, now) = write_tx(pool, OP).await?;
    let plan = match common::plan_add(stored(&mut tx, name, OP).await?, &p.schedule, p.mode) {
        Ok(plan) => plan,
        Err(refused @ StoreError::ScheduleExists { .. }) => {
            let entry = common::refused_add_entry(&p.actor, name, params, &refused);
            audit_write(&mut tx, &entry, now).await?;
            commit(tx, OP).await?;
            return Err(refused);
        }
        Err(e) => return Err(e),
    };
    let outcome = match plan {
        AddPlan::Insert => {
            write_definition(&mut tx, &p.schedule, true, true, now, OP).await?;
            ScheduleAddOutcome::Created
        }
        AddPlan::Update {
            schedule,
            reset_next,
        } => {
            write_definition(&mut tx, &schedule, false, reset_next, now, OP).await?;
            ScheduleAddOutcome::Replaced
        }
        AddPlan::Unchanged => ScheduleAddOutcome::Unchanged,
    };
    if common::audits(p.mode, outcome) {
        let entry = common::add_entry(&p.actor, name, params, outcome);
        audit_write(&mut tx, &entry, now).await?;
    }
    let record = get_record(&mut tx, name, OP).await?;
    commit(tx, OP).await?;
    Ok(ScheduleAdded { outcome, record })
}

pub(super) async fn schedule_remove(
    pool: &SqlitePool,
    p: &ScheduleNameParams,
) -> Result<Option<ScheduleRecord>> {
    const OP: &str = "schedule_remove";
    let name = p.name.as_str();
    authorize(pool, &p.actor, action::REMOVE, common::target(name), None).await?;
    let (mut tx, now) = write_tx(pool, OP).await?;
    if stored(&mut tx, name, OP).await?.is_none() {
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
    audit_write(&mut tx, &entry, now).await?;
    commit(tx, OP).await?;
    Ok(record)
}

pub(super) async fn schedule_set_enabled(
    pool: &SqlitePool,
    p: &ScheduleEnableParams,
) -> Result<ScheduleEnabled> {
    const OP: &str = "schedule_set_enabled";
    let name = p.name.as_str();
    let act = common::enable_action(p.enabled);
    authorize(pool, &p.actor, act, common::target(name), None).await?;
    let (mut tx, now) = write_tx(pool, OP).await?;
    let before = match common::found(stored(&mut tx, name, OP).await?, name) {
        Ok(before) => before,
        Err(why) => {
            drop(tx);
            return Err(failed(pool, &p.actor, act, name, why).await);
        }
    };
    let changed = before.enabled() != p.enabled;
    if changed {
        let next = common::first_fire(&before, time(now, "now")?).map(micros);
        sqlx::query(sql::schedule_set_enabled)
            .bind(name)
            .bind(p.enabled)
            .bind(next)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
    }
    let entry = common::enable_entry(&p.actor, p.enabled, name, changed);
    audit_write(&mut tx, &entry, now).await?;
    let record = get_record(&mut tx, name, OP).await?;
    commit(tx, OP).await?;
    Ok(ScheduleEnabled { changed, record })
}

async fn enqueue_in(
    tx: &mut SqliteConnection,
    task: &NewTask,
    limits: &InputLimits,
    now: i64,
) -> Result<Enqueued> {
    let valid = task.validate(limits)?;
    enqueue_valid(tx, &valid, now).await
}

pub(super) async fn schedule_trigger(
    pool: &SqlitePool,
    p: &ScheduleNameParams,
    limits: &InputLimits,
) -> Result<ScheduleTriggered> {
    const OP: &str = "schedule_trigger";
    let name = p.name.as_str();
    authorize(pool, &p.actor, action::TRIGGER, common::target(name), None).await?;
    let (mut tx, now) = write_tx(pool, OP).await?;
    let schedule = match common::found(stored(&mut tx, name, OP).await?, name) {
        Ok(schedule) => schedule,
        Err(why) => {
            drop(tx);
            return Err(failed(pool, &p.actor, action::TRIGGER, name, why).await);
        }
    };
    let key = common::trigger_key(&p.name, time(now, "now")?);
    let task = common::tick_task(&schedule, key.clone());
    let task = match enqueue_in(&mut tx, &task, limits, now).await {
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
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    let entry = common::trigger_entry(&p.actor, name, &task, &key);
    audit_write(&mut tx, &entry, now).await?;
    let record = get_record(&mut tx, name, OP).await?;
    commit(tx, OP).await?;
    Ok(ScheduleTriggered {
        task,
        idempotency_key: key,
        record,
    })
}

pub(super) async fn schedule_fire_due(
    pool: &SqlitePool,
    p: &ScheduleFireParams,
    limits: &InputLimits,
) -> Result<FireReport> {
    const OP: &str = "schedule_fire_due";
    // An idle pass reads first and takes the write lock only when something is due.
    {
        let (mut read, now) = read_tx(pool, OP).await?;
        let due: Option<i64> = sqlx::query_scalar(sql::schedule_any_due)
            .bind(now)
            .fetch_optional(&mut *read)
            .await
            .map_err(StoreError::db(OP))?;
        if due.is_none() {
            return next_due(&mut read, now, FireReport::default(), OP).await;
        }
    }
    let (mut tx, now) = write_tx(pool, OP).await?;
    let held: Option<i64> = sqlx::query_scalar(sql::leader_check)
        .bind(p.leader.as_str())
        .bind(p.term)
        .bind(now)
        .fetch_optional(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    if held.is_none() {
        return Ok(FireReport {
            fenced: true,
            ..FireReport::default()
        });
    }
    let at = time(now, "now")?;
    let due = sqlx::query(sql::schedule_due)
        .bind(now)
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
            Ok(due) => (due.name.clone(), common::plan_fire(&due, at, p.on_time)),
            Err(e) => (get::<String>(r, "name")?, common::unreadable(&e, at)),
        };
        let mut enqueued = Vec::new();
        for (tick, task) in step.ticks() {
            let done = enqueue_in(&mut tx, task, limits, now).await;
            let lost = matches!(&done, Err(e) if !matches!(e, StoreError::Invalid(_)));
            enqueued.push((*tick, done));
            if lost {
                break;
            }
        }
        let settled = common::settle(&name, step, enqueued, &mut report)?;
        sqlx::query(sql::schedule_fired)
            .bind(&name)
            .bind(settled.last_tick.map(micros))
            .bind(settled.next.map(micros))
            .bind(settled.last_task)
            .bind(settled.error)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
    }
    let report = next_due(&mut tx, now, report, OP).await?;
    commit(tx, OP).await?;
    Ok(report)
}

/// Fills in the earliest next fire time of any enabled schedule and the pass's now.
async fn next_due(
    conn: &mut SqliteConnection,
    now: i64,
    mut report: FireReport,
    op: &'static str,
) -> Result<FireReport> {
    let next: Option<i64> = sqlx::query_scalar(sql::schedule_next_due)
        .fetch_one(conn)
        .await
        .map_err(StoreError::db(op))?;
    report.next_due = next.map(|us| time(us, "next_fire_at")).transpose()?;
    report.now = Some(time(now, "now")?);
    Ok(report)
}

pub(super) async fn leader_get(pool: &SqlitePool) -> Result<Option<LeaderRecord>> {
    const OP: &str = "leader_get";
    let (mut tx, now) = read_tx(pool, OP).await?;
    let r = sqlx::query(sql::leader_get)
        .fetch_optional(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    r.map(|r| {
        Ok(LeaderRecord {
            owner: get::<Option<String>>(&r, "owner")?
                .map(agent_id)
                .transpose()?,
            term: get(&r, "term")?,
            elected_at: get_opt_time(&r, "elected_at")?,
            lease_until: get_opt_time(&r, "lease_until")?,
            heartbeat_at: get_opt_time(&r, "heartbeat_at")?,
            now: time(now, "now")?,
        })
    })
    .transpose()
}
