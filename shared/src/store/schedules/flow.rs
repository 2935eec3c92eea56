//! The schedule operations, written once for both stores over [`ScheduleStatements`]: the
//! operator actions (each one transaction with its audit row) and the leader's firing pass
//! (see the diagram in [`super`]). They decide with [`super::plan_add`], [`super::plan_fire`]
//! and [`super::settle`]; the stores only run the statements, and rows are decoded here
//! ([`schedule_row`]).
//!
//! When things fail: an error drops the transaction, so it changed nothing; an action refused
//! after its transaction began (unknown or unreadable schedule, a name taken, a task the
//! enqueue refused) is recorded as `failed` on its own.

use std::future::Future;

use chrono::{DateTime, Utc};

use super::{
    AddPlan, FireReport, LeaderRecord, ScheduleAddOutcome, ScheduleAddParams, ScheduleAdded,
    ScheduleEnableParams, ScheduleEnabled, ScheduleFireParams, ScheduleListing, ScheduleNameParams,
    ScheduleRecord, ScheduleRow, ScheduleTriggered, Settled, StoredDefinition, UnreadableSchedule,
    action, add_audit_params, add_entry, audits, enable_action, enable_entry, failed_entry,
    first_fire, found, plan_add, plan_fire, refused_add_entry, remove_entry, settle, target,
    tick_task, trigger_entry, trigger_key, unreadable,
};
use crate::domain::{AgentId, InputLimits, Schedule};
use crate::store::audit::backend::{Columns, agent_id, authorize, failed, narrow, status};
use crate::store::audit::operator::OperatorStatements;
use crate::store::{Enqueued, NewTask, Result, StoreError};

/// The statements of the schedule operations, per store.
pub(crate) trait ScheduleStatements: OperatorStatements {
    /// The row of schedule `name`, locked until `tx` ends (`None`: no such schedule).
    fn schedule_locked(
        tx: &mut Self::Tx,
        name: &str,
    ) -> impl Future<Output = Result<Option<Self::Row>>> + Send;

    /// The row of schedule `name` with its last task's status.
    fn schedule_row(
        tx: &mut Self::Tx,
        name: &str,
    ) -> impl Future<Output = Result<Option<Self::Row>>> + Send;

    /// Every schedule row, by name.
    fn schedule_rows(tx: &mut Self::Tx) -> impl Future<Output = Result<Vec<Self::Row>>> + Send;

    /// Writes a definition: a new row (`insert`; false when a concurrent insert won), or the
    /// existing one, whose next fire time becomes `next` when `reset_next`.
    fn schedule_write(
        tx: &mut Self::Tx,
        definition: &StoredDefinition<'_>,
        insert: bool,
        reset_next: bool,
        next: Option<DateTime<Utc>>,
    ) -> impl Future<Output = Result<bool>> + Send;

    fn schedule_delete(tx: &mut Self::Tx, name: &str) -> impl Future<Output = Result<()>> + Send;

    /// Sets `enabled`, with the next fire time `next` when it becomes enabled.
    fn schedule_set_enabled(
        tx: &mut Self::Tx,
        name: &str,
        enabled: bool,
        next: Option<DateTime<Utc>>,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Records a trigger's task as the schedule's last.
    fn schedule_set_last_task(
        tx: &mut Self::Tx,
        name: &str,
        task: i64,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Wakes the agents when `tx` commits (tasks were enqueued), where the store can.
    fn tasks_notify(tx: &mut Self::Tx) -> impl Future<Output = Result<()>> + Send;

    /// The report of a pass with nothing due (read without the write transaction), or `None`
    /// when something is due.
    fn schedule_idle(
        &self,
        op: &'static str,
    ) -> impl Future<Output = Result<Option<FireReport>>> + Send;

    /// Whether `leader` holds the leader lease in `term`; held so until `tx` ends.
    fn leader_holds(
        tx: &mut Self::Tx,
        leader: &AgentId,
        term: i64,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Up to `limit` due rows, locked.
    fn schedule_due_rows(
        tx: &mut Self::Tx,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<Self::Row>>> + Send;

    /// Stores what a due row's firing settled.
    fn schedule_fired(
        tx: &mut Self::Tx,
        name: &str,
        settled: &Settled,
    ) -> impl Future<Output = Result<()>> + Send;

    /// The earliest next fire time of any enabled schedule, and the database's now.
    fn schedule_next_due(
        tx: &mut Self::Tx,
    ) -> impl Future<Output = Result<(Option<DateTime<Utc>>, DateTime<Utc>)>> + Send;

    /// The `leader` lease row.
    fn leader_row(tx: &mut Self::Tx) -> impl Future<Output = Result<Option<Self::Row>>> + Send;
}

/// A `schedules` row as read.
pub(crate) fn schedule_row(r: &impl Columns) -> Result<ScheduleRow> {
    Ok(ScheduleRow {
        name: r.text("name")?,
        cron: r.text("cron")?,
        time_zone: r.text("timezone")?,
        task_type: r.text("task_type")?,
        payload: r.json("payload")?.unwrap_or(serde_json::Value::Null),
        priority: r.small("priority")?,
        max_attempts: r
            .opt_int("max_attempts")?
            .map(|n| narrow(n, "max_attempts"))
            .transpose()?,
        enabled: r.flag("enabled")?,
        missed: r.text("missed")?,
        catch_up_max: r.small("catch_up_max")?,
        next_fire_at: r.opt_time("next_fire_at")?,
        last_fired_at: r.opt_time("last_fired_at")?,
        last_task_id: r.opt_int("last_task_id")?,
        last_task_status: r
            .opt_text("last_task_status")?
            .as_deref()
            .map(status)
            .transpose()?,
        last_error: r.opt_text("last_error")?,
        created_at: r.time("created_at")?,
        updated_at: r.time("updated_at")?,
    })
}

/// What can be read of a row that does not decode.
fn unreadable_row(r: &impl Columns) -> UnreadableSchedule {
    UnreadableSchedule {
        name: r.text("name").unwrap_or_default(),
        cron: r.text("cron").ok(),
        task_type: r.text("task_type").ok(),
        enabled: r.flag("enabled").ok(),
        error: String::new(),
    }
}

/// The definition of a stored row (its decoding error when it cannot be read).
fn definition(r: Option<impl Columns>) -> Option<Result<Schedule>> {
    r.map(|r| schedule_row(&r).and_then(|row| row.schedule()))
}

async fn get_record<B: ScheduleStatements>(tx: &mut B::Tx, name: &str) -> Result<ScheduleRecord> {
    let r = B::schedule_row(tx, name)
        .await?
        .ok_or_else(|| StoreError::ScheduleNotFound(name.to_string()))?;
    schedule_row(&r)?.record()
}

/// Validates and enqueues one task in `tx`.
async fn enqueue<B: ScheduleStatements>(
    tx: &mut B::Tx,
    task: &NewTask,
    limits: &InputLimits,
) -> Result<Enqueued> {
    let valid = task.validate(limits)?;
    B::enqueue(tx, &valid).await
}

pub(crate) async fn schedule_list<B: ScheduleStatements>(backend: &B) -> Result<ScheduleListing> {
    let mut tx = backend.snapshot("schedule_list").await?;
    let mut listing = ScheduleListing::default();
    for r in &B::schedule_rows(&mut tx).await? {
        listing.push(schedule_row(r), || unreadable_row(r));
    }
    Ok(listing)
}

pub(crate) async fn schedule_add<B: ScheduleStatements>(
    backend: &B,
    p: &ScheduleAddParams,
) -> Result<ScheduleAdded> {
    const OP: &str = "schedule_add";
    let name = p.schedule.name().as_str();
    let params = add_audit_params(&p.schedule, p.mode);
    authorize(backend, &p.actor, action::ADD, target(name), None).await?;
    let mut tx = backend.begin(OP).await?;
    let now = B::now(&mut tx, OP).await?;
    // Twice at most: an insert that lost a race to a concurrent one finds its row the second
    // time round.
    let mut outcome = None;
    for _ in 0..2 {
        let stored = definition(B::schedule_locked(&mut tx, name).await?);
        let plan = match plan_add(stored, &p.schedule, p.mode) {
            Ok(plan) => plan,
            Err(refused @ StoreError::ScheduleExists { .. }) => {
                drop(tx);
                let entry = refused_add_entry(&p.actor, name, params, &refused);
                backend.audit_alone(&entry).await?;
                return Err(refused);
            }
            Err(e) => return Err(e),
        };
        outcome = match plan {
            AddPlan::Insert => {
                let d = StoredDefinition::of(&p.schedule);
                let next = first_fire(&p.schedule, now);
                let inserted = B::schedule_write(&mut tx, &d, true, true, next).await?;
                inserted.then_some(ScheduleAddOutcome::Created)
            }
            AddPlan::Update {
                schedule,
                reset_next,
            } => {
                let d = StoredDefinition::of(&schedule);
                let next = first_fire(&schedule, now);
                B::schedule_write(&mut tx, &d, false, reset_next, next).await?;
                Some(ScheduleAddOutcome::Replaced)
            }
            AddPlan::Unchanged => Some(ScheduleAddOutcome::Unchanged),
        };
        if outcome.is_some() {
            break;
        }
    }
    let outcome = outcome.ok_or(StoreError::Busy { op: OP })?;
    if audits(p.mode, outcome) {
        B::audit_in(&mut tx, &add_entry(&p.actor, name, params, outcome)).await?;
    }
    let record = get_record::<B>(&mut tx, name).await?;
    B::commit(tx, OP).await?;
    Ok(ScheduleAdded { outcome, record })
}

pub(crate) async fn schedule_remove<B: ScheduleStatements>(
    backend: &B,
    p: &ScheduleNameParams,
) -> Result<Option<ScheduleRecord>> {
    const OP: &str = "schedule_remove";
    let name = p.name.as_str();
    authorize(backend, &p.actor, action::REMOVE, target(name), None).await?;
    let mut tx = backend.begin(OP).await?;
    if B::schedule_locked(&mut tx, name).await?.is_none() {
        drop(tx);
        let missing = StoreError::ScheduleNotFound(name.to_string());
        let entry = failed_entry(&p.actor, action::REMOVE, name, &missing);
        return Err(failed(backend, &entry, missing).await);
    }
    let record = get_record::<B>(&mut tx, name).await.ok();
    B::schedule_delete(&mut tx, name).await?;
    B::audit_in(&mut tx, &remove_entry(&p.actor, name)).await?;
    B::commit(tx, OP).await?;
    Ok(record)
}

pub(crate) async fn schedule_set_enabled<B: ScheduleStatements>(
    backend: &B,
    p: &ScheduleEnableParams,
) -> Result<ScheduleEnabled> {
    const OP: &str = "schedule_set_enabled";
    let name = p.name.as_str();
    let act = enable_action(p.enabled);
    authorize(backend, &p.actor, act, target(name), None).await?;
    let mut tx = backend.begin(OP).await?;
    let now = B::now(&mut tx, OP).await?;
    let before = match found(definition(B::schedule_locked(&mut tx, name).await?), name) {
        Ok(before) => before,
        Err(why) => {
            drop(tx);
            let entry = failed_entry(&p.actor, act, name, &why);
            return Err(failed(backend, &entry, why).await);
        }
    };
    let changed = before.enabled() != p.enabled;
    if changed {
        let next = first_fire(&before, now);
        B::schedule_set_enabled(&mut tx, name, p.enabled, next).await?;
    }
    B::audit_in(&mut tx, &enable_entry(&p.actor, p.enabled, name, changed)).await?;
    let record = get_record::<B>(&mut tx, name).await?;
    B::commit(tx, OP).await?;
    Ok(ScheduleEnabled { changed, record })
}

pub(crate) async fn schedule_trigger<B: ScheduleStatements>(
    backend: &B,
    p: &ScheduleNameParams,
    limits: &InputLimits,
) -> Result<ScheduleTriggered> {
    const OP: &str = "schedule_trigger";
    let name = p.name.as_str();
    authorize(backend, &p.actor, action::TRIGGER, target(name), None).await?;
    let mut tx = backend.begin(OP).await?;
    let now = B::now(&mut tx, OP).await?;
    let refused = match found(definition(B::schedule_locked(&mut tx, name).await?), name) {
        Ok(schedule) => {
            let key = trigger_key(&p.name, now);
            let task = tick_task(&schedule, key.clone());
            match enqueue::<B>(&mut tx, &task, limits).await {
                Ok(task) => Ok((task, key)),
                Err(refused @ StoreError::Invalid(_)) => Err(refused),
                Err(e) => return Err(e),
            }
        }
        Err(why) => Err(why),
    };
    let (task, key) = match refused {
        Ok(done) => done,
        Err(why) => {
            drop(tx);
            let entry = failed_entry(&p.actor, action::TRIGGER, name, &why);
            return Err(failed(backend, &entry, why).await);
        }
    };
    B::schedule_set_last_task(&mut tx, name, task.id.0).await?;
    B::audit_in(&mut tx, &trigger_entry(&p.actor, name, &task, &key)).await?;
    B::tasks_notify(&mut tx).await?;
    let record = get_record::<B>(&mut tx, name).await?;
    B::commit(tx, OP).await?;
    Ok(ScheduleTriggered {
        task,
        idempotency_key: key,
        record,
    })
}

/// The leader's firing pass: an idle pass is one read; otherwise, in one transaction fenced
/// by the leader's term, each due row's ticks are enqueued under their keys and the row moves
/// on. A row that cannot be decoded is passed over (and says why), never a stop for all.
pub(crate) async fn schedule_fire_due<B: ScheduleStatements>(
    backend: &B,
    p: &ScheduleFireParams,
    limits: &InputLimits,
) -> Result<FireReport> {
    const OP: &str = "schedule_fire_due";
    if let Some(idle) = backend.schedule_idle(OP).await? {
        return Ok(idle);
    }
    let mut tx = backend.begin(OP).await?;
    if !B::leader_holds(&mut tx, &p.leader, p.term).await? {
        return Ok(FireReport {
            fenced: true,
            ..FireReport::default()
        });
    }
    let now = B::now(&mut tx, OP).await?;
    let due = B::schedule_due_rows(&mut tx, i64::from(p.limit.max(1))).await?;
    let mut report = FireReport::default();
    for r in &due {
        if report.fired.len() >= super::MAX_TICKS_PER_PASS {
            break;
        }
        let (name, step) = match schedule_row(r) {
            Ok(due) => (due.name.clone(), plan_fire(&due, now, p.on_time)),
            Err(e) => (r.text("name")?, unreadable(&e, now)),
        };
        let mut enqueued = Vec::new();
        for (tick, task) in step.ticks() {
            let done = enqueue::<B>(&mut tx, task, limits).await;
            let lost = matches!(&done, Err(e) if !matches!(e, StoreError::Invalid(_)));
            enqueued.push((*tick, done));
            if lost {
                break;
            }
        }
        let settled = settle(&name, step, enqueued, &mut report)?;
        B::schedule_fired(&mut tx, &name, &settled).await?;
    }
    if !report.fired.is_empty() {
        B::tasks_notify(&mut tx).await?;
    }
    let (next, now) = B::schedule_next_due(&mut tx).await?;
    report.next_due = next;
    report.now = Some(now);
    B::commit(tx, OP).await?;
    Ok(report)
}

pub(crate) async fn leader_get<B: ScheduleStatements>(backend: &B) -> Result<Option<LeaderRecord>> {
    const OP: &str = "leader_get";
    let mut tx = backend.snapshot(OP).await?;
    let now = B::now(&mut tx, OP).await?;
    let Some(r) = B::leader_row(&mut tx).await? else {
        return Ok(None);
    };
    Ok(Some(LeaderRecord {
        owner: r.opt_text("owner")?.map(agent_id).transpose()?,
        term: r.int("term")?,
        elected_at: r.opt_time("elected_at")?,
        lease_until: r.opt_time("lease_until")?,
        heartbeat_at: r.opt_time("heartbeat_at")?,
        now,
    }))
}

/// The [`ScheduleStatements`] both stores run alike, written once: each runs its store's
/// statement of the same name (`$sql::…`, text that differs only by dialect), bound to a
/// schedule's name or to nothing. A store invokes it inside its `impl ScheduleStatements`,
/// naming its `sql` module.
macro_rules! schedule_statements_alike {
    ($sql:ident) => {
        async fn schedule_row(
            tx: &mut Self::Tx,
            name: &str,
        ) -> $crate::store::Result<Option<Self::Row>> {
            let statement = $sql::schedule_get;
            $crate::store::audit::backend::row_by(&mut **tx, statement, name, "schedule_get").await
        }

        async fn schedule_rows(tx: &mut Self::Tx) -> $crate::store::Result<Vec<Self::Row>> {
            sqlx::query($sql::schedule_list)
                .fetch_all(&mut **tx)
                .await
                .map_err($crate::store::StoreError::db("schedule_list"))
        }

        async fn schedule_delete(tx: &mut Self::Tx, name: &str) -> $crate::store::Result<()> {
            let statement = $sql::schedule_delete;
            let op = "schedule_delete";
            $crate::store::audit::backend::row_by(&mut **tx, statement, name, op)
                .await
                .map(drop)
        }
    };
}
pub(crate) use schedule_statements_alike;

/// The entry points of a store's schedule operations (see
/// [`crate::store::audit::backend::entry_points`]).
macro_rules! schedule_entry_points {
    ($backend:ident, $pool:ty) => {
        $crate::store::audit::backend::entry_points!($backend, $pool;
            $crate::store::schedules::flow::schedule_list as schedule_list(
            ) -> $crate::store::schedules::ScheduleListing;
            $crate::store::schedules::flow::schedule_add as schedule_add(
                p: &$crate::store::schedules::ScheduleAddParams
            ) -> $crate::store::schedules::ScheduleAdded;
            $crate::store::schedules::flow::schedule_remove as schedule_remove(
                p: &$crate::store::schedules::ScheduleNameParams
            ) -> Option<$crate::store::schedules::ScheduleRecord>;
            $crate::store::schedules::flow::schedule_set_enabled as schedule_set_enabled(
                p: &$crate::store::schedules::ScheduleEnableParams
            ) -> $crate::store::schedules::ScheduleEnabled;
            $crate::store::schedules::flow::schedule_trigger as schedule_trigger(
                p: &$crate::store::schedules::ScheduleNameParams,
                limits: &$crate::domain::InputLimits
            ) -> $crate::store::schedules::ScheduleTriggered;
            $crate::store::schedules::flow::schedule_fire_due as schedule_fire_due(
                p: &$crate::store::schedules::ScheduleFireParams,
                limits: &$crate::domain::InputLimits
            ) -> $crate::store::schedules::FireReport;
            $crate::store::schedules::flow::leader_get as leader_get(
            ) -> Option<$crate::store::schedules::LeaderRecord>;
        );
    };
}
pub(crate) use schedule_entry_points;
