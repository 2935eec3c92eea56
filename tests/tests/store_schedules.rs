//! Store conformance: cron schedules — add, replace, declare, enable, disable, trigger and
//! remove (each audited), and the leader's firing pass: one task per tick under the tick's
//! key, fenced by the leader's term, the missed-tick policies, rows it cannot read, and the
//! max attempts of fired tasks (the schedule's own, else the policy in force at the firing);
//! on PostgreSQL and SQLite alike.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use leasehold_shared::domain::schedule::{MissedTicks, Schedule};
use leasehold_shared::domain::{PolicyPatch, PolicyScope, ScheduleAddOutcome};
use leasehold_shared::store::{
    AuditListParams, FireReport, LeaderElectParams, LeaderOutcome, PolicySetParams,
    ScheduleAddParams, ScheduleEnableParams, ScheduleFireParams, ScheduleNameParams,
    ScheduleWriteMode, TaskListParams,
};
use leasehold_shared::{Actor, AgentId, InputLimits, Role, Store, StoreError, TaskStatus};
use leasehold_tests::helpers::tt;
use leasehold_tests::{Rows, Sql, StoreDb, Val, conformance};

const ON_TIME: Duration = Duration::from_secs(1);

fn ops() -> Actor {
    Actor::operator("ops")
}

fn every_second(name: &str, missed: MissedTicks) -> Schedule {
    Schedule::builder(name, "* * * * * *", "noop")
        .missed(missed)
        .build(&InputLimits::default())
        .unwrap()
}

fn add(schedule: Schedule, mode: ScheduleWriteMode) -> ScheduleAddParams {
    ScheduleAddParams {
        schedule,
        mode,
        actor: ops(),
    }
}

async fn lead(store: &Arc<dyn Store>, owner: &str) -> (AgentId, i64) {
    let owner = AgentId::new(owner).unwrap();
    let LeaderOutcome::Leader { term, .. } = store
        .leader_attempt_elect(LeaderElectParams {
            owner: owner.clone(),
            ttl: Duration::from_secs(30),
            grace: Duration::from_secs(5),
        })
        .await
        .unwrap()
    else {
        panic!("{owner} should lead")
    };
    (owner, term)
}

async fn fire(store: &Arc<dyn Store>, leader: &(AgentId, i64)) -> FireReport {
    store
        .schedule_fire_due(ScheduleFireParams {
            leader: leader.0.clone(),
            term: leader.1,
            on_time: ON_TIME,
            limit: 100,
        })
        .await
        .unwrap()
}

/// Creates `schedule`.
async fn create(store: &Arc<dyn Store>, schedule: Schedule) {
    store
        .schedule_add(add(schedule, ScheduleWriteMode::Create))
        .await
        .unwrap();
}

/// Every task's idempotency key, in id order.
async fn keys(store: &Arc<dyn Store>) -> Vec<String> {
    let page = store
        .task_list(TaskListParams {
            limit: 1000,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut tasks = page.tasks;
    tasks.sort_by_key(|t| t.id);
    tasks
        .into_iter()
        .map(|t| t.idempotency_key.unwrap_or_default())
        .collect()
}

/// Makes the schedule due as if no leader had fired it for `secs` seconds.
async fn backdate(db: &StoreDb, name: &str, secs: f64) {
    db.update(
        Rows::Schedule(name),
        &[
            ("next_fire_at", Val::At(-secs)),
            ("last_fired_at", Val::At(-secs - 1.0)),
        ],
    )
    .await
    .unwrap();
}

conformance!(schedules_are_added_replaced_and_removed_with_their_audit_rows);
async fn schedules_are_added_replaced_and_removed_with_their_audit_rows(db: StoreDb) {
    let store = db.store();
    let now = store.db_now().await.unwrap();
    let nightly = Schedule::builder("nightly", "0 30 2 * * *", "report.build")
        .time_zone("Europe/Berlin")
        .payload(serde_json::json!({"region": "eu"}))
        .build(&InputLimits::default())
        .unwrap();
    let added = store
        .schedule_add(add(nightly.clone(), ScheduleWriteMode::Create))
        .await
        .unwrap();
    assert_eq!(added.outcome, ScheduleAddOutcome::Created);
    assert_eq!(added.record.schedule, nightly);
    let next = added.record.next_fire_at.unwrap();
    assert!(
        next > now && next - now <= chrono::TimeDelta::days(1),
        "{next}"
    );
    assert_eq!(next, nightly.next_after(now).unwrap());
    assert_eq!(added.record.last_fired_at, None);

    // The same again changes nothing; a different one under the name is refused.
    let again = store
        .schedule_add(add(nightly.clone(), ScheduleWriteMode::Create))
        .await
        .unwrap();
    assert_eq!(again.outcome, ScheduleAddOutcome::Unchanged);
    let other = Schedule::builder("nightly", "0 0 3 * * *", "report.build")
        .build(&InputLimits::default())
        .unwrap();
    let refused = store
        .schedule_add(add(other.clone(), ScheduleWriteMode::Create))
        .await
        .unwrap_err();
    assert!(
        matches!(refused, StoreError::ScheduleExists { .. }),
        "{refused}"
    );
    assert_eq!(
        store.schedule_list().await.unwrap().schedules[0].schedule,
        nightly
    );
    let replaced = store
        .schedule_add(add(other.clone(), ScheduleWriteMode::Replace))
        .await
        .unwrap();
    assert_eq!(replaced.outcome, ScheduleAddOutcome::Replaced);
    assert_eq!(replaced.record.schedule, other);
    assert_eq!(
        replaced.record.next_fire_at,
        other.next_after(store.db_now().await.unwrap())
    );

    // A viewer changes nothing.
    let viewer = Actor {
        name: "dash".into(),
        role: Role::Viewer,
    };
    let denied = store
        .schedule_remove(ScheduleNameParams {
            name: "nightly".parse().unwrap(),
            actor: viewer,
        })
        .await
        .unwrap_err();
    assert!(matches!(denied, StoreError::PermissionDenied { .. }));

    let removed = store
        .schedule_remove(ScheduleNameParams {
            name: "nightly".parse().unwrap(),
            actor: ops(),
        })
        .await
        .unwrap();
    assert_eq!(removed.unwrap().schedule, other);
    assert!(store.schedule_list().await.unwrap().schedules.is_empty());
    let gone = store
        .schedule_remove(ScheduleNameParams {
            name: "nightly".parse().unwrap(),
            actor: ops(),
        })
        .await
        .unwrap_err();
    assert!(matches!(gone, StoreError::ScheduleNotFound(_)), "{gone}");

    let audit = store
        .audit_list(AuditListParams {
            before_id: None,
            limit: 20,
            ..Default::default()
        })
        .await
        .unwrap();
    let rows: Vec<(String, String)> = audit
        .iter()
        .rev()
        .filter(|a| a.target == "schedule:nightly")
        .map(|a| (a.action.clone(), a.result.clone()))
        .collect();
    let want = [
        ("schedule_add", "applied"),
        ("schedule_add", "noop"),
        ("schedule_add", "failed"),
        ("schedule_add", "applied"),
        ("schedule_remove", "denied"),
        ("schedule_remove", "applied"),
        ("schedule_remove", "failed"),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(a, r)| (a.to_string(), r.to_string()))
        .collect();
    assert_eq!(rows, want);
    db.drop_db().await.unwrap();
}

conformance!(the_leader_fires_every_due_tick_once_under_its_key);
async fn the_leader_fires_every_due_tick_once_under_its_key(db: StoreDb) {
    let store = db.store();
    let leader = lead(&store, "a#1").await;
    create(
        &store,
        every_second("tick", MissedTicks::catch_up(100).unwrap()),
    )
    .await;
    // Nothing is due the moment it was added (a tick may have come since: at most that one).
    let report = fire(&store, &leader).await;
    assert!(!report.fenced);
    assert!(report.fired.len() <= 1, "{:?}", report.fired);
    assert!(report.next_due.unwrap() > report.now.unwrap());
    // From a clean slate, so every tick below is new.
    db.execute(Sql::both("DELETE FROM tasks"), &[])
        .await
        .unwrap();

    let since = std::time::Instant::now();
    backdate(&db, "tick", 10.0).await;
    let report = fire(&store, &leader).await;
    let now = report.now.unwrap();
    let fired = report.fired.len();
    // Ten seconds back, plus every second the machine took between the two statements.
    let most = 11 + since.elapsed().as_secs() as usize;
    assert!((10..=most).contains(&fired), "{fired} ticks fired");
    let ticks: Vec<_> = report.fired.iter().map(|t| t.tick).collect();
    assert!(
        ticks
            .windows(2)
            .all(|w| w[1] - w[0] == chrono::TimeDelta::seconds(1))
    );
    assert!(
        *ticks.last().unwrap() <= now
            && now - *ticks.last().unwrap() < chrono::TimeDelta::seconds(1)
    );
    assert!(report.fired.iter().all(|t| t.task.created));
    let expected: Vec<String> = ticks
        .iter()
        .map(|t| {
            format!(
                "schedule:tick:{}",
                t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
            )
        })
        .collect();
    assert_eq!(keys(&store).await, expected);

    let record = store.schedule_list().await.unwrap().schedules.remove(0);
    assert_eq!(record.last_fired_at, ticks.last().copied());
    assert!(record.next_fire_at.unwrap() > now);
    assert_eq!(record.last_task_id, report.fired.last().map(|t| t.task.id));
    assert_eq!(record.last_task_status, Some(TaskStatus::Queued));
    assert_eq!(record.last_error, None);

    // A second pass right away fires at most the tick that came since, never one again.
    let again = fire(&store, &leader).await;
    assert!(again.fired.len() <= 2, "{:?}", again.fired);
    let all = keys(&store).await;
    assert_eq!(all.len(), all.iter().collect::<HashSet<_>>().len());

    // Put the row back as a stale leader saw it: the ticks it fires again find their keys
    // taken and make no second task.
    let before = all.len();
    backdate(&db, "tick", 5.0).await;
    let stale = fire(&store, &leader).await;
    assert!(
        stale.fired.iter().any(|t| !t.task.created),
        "{:?}",
        stale.fired
    );
    let after = keys(&store).await;
    assert_eq!(after.len(), after.iter().collect::<HashSet<_>>().len());
    assert!(after.len() <= before + 2);
    db.drop_db().await.unwrap();
}

conformance!(skip_fires_only_the_latest_missed_tick);
async fn skip_fires_only_the_latest_missed_tick(db: StoreDb) {
    let store = db.store();
    let leader = lead(&store, "a#1").await;
    create(&store, every_second("tick", MissedTicks::Skip)).await;
    backdate(&db, "tick", 30.0).await;
    let report = fire(&store, &leader).await;
    let now = report.now.unwrap();
    // The latest tick older than the on-time window, and the ones within it.
    assert!((1..=3).contains(&report.fired.len()), "{:?}", report.fired);
    let first = report.fired[0].tick;
    assert!(
        now - first <= chrono::TimeDelta::seconds(2),
        "{first} at {now}"
    );
    db.drop_db().await.unwrap();
}

conformance!(a_stale_leader_fires_nothing);
async fn a_stale_leader_fires_nothing(db: StoreDb) {
    let store = db.store();
    let old = lead(&store, "a#1").await;
    create(&store, every_second("tick", MissedTicks::Skip)).await;
    backdate(&db, "tick", 3.0).await;
    // Past its lease and grace another agent takes over.
    db.update(Rows::Leader, &[("lease_until", Val::At(-10.0))])
        .await
        .unwrap();
    let new = lead(&store, "b#1").await;
    assert_eq!(new.1, old.1 + 1);
    let stale = fire(&store, &old).await;
    assert!(stale.fenced);
    assert!(stale.fired.is_empty());
    assert!(keys(&store).await.is_empty());
    // An expired lease fires nothing either, even under the right term.
    db.update(Rows::Leader, &[("lease_until", Val::At(-1.0))])
        .await
        .unwrap();
    assert!(fire(&store, &new).await.fenced);
    db.update(Rows::Leader, &[("lease_until", Val::At(30.0))])
        .await
        .unwrap();
    let fired = fire(&store, &new).await;
    assert!(!fired.fenced);
    assert!(!fired.fired.is_empty());
    db.drop_db().await.unwrap();
}

conformance!(concurrent_passes_make_one_task_per_tick, worker_threads = 4);
async fn concurrent_passes_make_one_task_per_tick(db: StoreDb) {
    let store = db.store();
    let leader = lead(&store, "a#1").await;
    for n in 0..5 {
        store
            .schedule_add(add(
                every_second(&format!("tick-{n}"), MissedTicks::catch_up(50).unwrap()),
                ScheduleWriteMode::Create,
            ))
            .await
            .unwrap();
        backdate(&db, &format!("tick-{n}"), 20.0).await;
    }
    let stores = [
        db.store_with_pool(4).await.unwrap(),
        db.store_with_pool(4).await.unwrap(),
    ];
    let mut passes = Vec::new();
    for s in stores.iter().cycle().take(6) {
        let s = Arc::clone(s);
        let leader = leader.clone();
        passes.push(tokio::spawn(async move { fire(&s, &leader).await }));
    }
    let mut created = 0;
    for p in passes {
        created += p
            .await
            .unwrap()
            .fired
            .iter()
            .filter(|t| t.task.created)
            .count();
    }
    let all = keys(&store).await;
    assert_eq!(all.len(), created);
    assert_eq!(
        all.len(),
        all.iter().collect::<HashSet<_>>().len(),
        "a tick doubled"
    );
    assert!(all.len() >= 5 * 20, "{} tasks", all.len());
    db.drop_db().await.unwrap();
}

conformance!(disable_enable_and_trigger);
async fn disable_enable_and_trigger(db: StoreDb) {
    let store = db.store();
    let leader = lead(&store, "a#1").await;
    create(
        &store,
        every_second("tick", MissedTicks::catch_up(100).unwrap()),
    )
    .await;
    let toggle = |enabled| ScheduleEnableParams {
        name: "tick".parse().unwrap(),
        enabled,
        actor: ops(),
    };
    let off = store.schedule_set_enabled(toggle(false)).await.unwrap();
    assert!(off.changed && !off.record.schedule.enabled());
    assert!(
        !store
            .schedule_set_enabled(toggle(false))
            .await
            .unwrap()
            .changed
    );
    backdate(&db, "tick", 10.0).await;
    assert!(
        fire(&store, &leader).await.fired.is_empty(),
        "disabled: nothing fires"
    );

    // Enabled again: from the next tick on, the ticks it missed while disabled are not caught up.
    let on = store.schedule_set_enabled(toggle(true)).await.unwrap();
    assert!(on.changed);
    let now = store.db_now().await.unwrap();
    assert!(on.record.next_fire_at.unwrap() > now);
    assert!(fire(&store, &leader).await.fired.len() <= 1);

    let before = keys(&store).await.len();
    let triggered = store
        .schedule_trigger(ScheduleNameParams {
            name: "tick".parse().unwrap(),
            actor: ops(),
        })
        .await
        .unwrap();
    assert!(triggered.task.created);
    assert!(
        triggered
            .idempotency_key
            .starts_with("schedule:tick:manual:")
    );
    assert_eq!(triggered.record.last_task_id, Some(triggered.task.id));
    assert_eq!(triggered.record.last_task_status, Some(TaskStatus::Queued));
    assert_eq!(keys(&store).await.len(), before + 1);
    let unknown = store
        .schedule_trigger(ScheduleNameParams {
            name: "nope".parse().unwrap(),
            actor: ops(),
        })
        .await
        .unwrap_err();
    assert!(matches!(unknown, StoreError::ScheduleNotFound(_)));
    // Two triggers in one clock tick are still two tasks.
    let again = |_| {
        store.schedule_trigger(ScheduleNameParams {
            name: "tick".parse().unwrap(),
            actor: ops(),
        })
    };
    let (a, b) = tokio::join!(again(1), again(2));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert!(a.task.created && b.task.created);
    assert_ne!(a.task.id, b.task.id);
    let audit = store
        .audit_list(AuditListParams {
            before_id: None,
            limit: 50,
            ..Default::default()
        })
        .await
        .unwrap();
    let refused: Vec<_> = audit
        .iter()
        .filter(|a| a.target == "schedule:nope")
        .map(|a| (a.action.as_str(), a.result.as_str()))
        .collect();
    assert_eq!(
        refused,
        [("schedule_trigger", "failed")],
        "an unknown name is audited"
    );
    db.drop_db().await.unwrap();
}

conformance!(a_declaration_keeps_an_operators_disable);
async fn a_declaration_keeps_an_operators_disable(db: StoreDb) {
    let store = db.store();
    let declared = every_second("tick", MissedTicks::Skip);
    let first = store
        .schedule_add(add(declared.clone(), ScheduleWriteMode::Declare))
        .await
        .unwrap();
    assert_eq!(first.outcome, ScheduleAddOutcome::Created);
    store
        .schedule_set_enabled(ScheduleEnableParams {
            name: "tick".parse().unwrap(),
            enabled: false,
            actor: ops(),
        })
        .await
        .unwrap();
    let restart = store
        .schedule_add(add(declared, ScheduleWriteMode::Declare))
        .await
        .unwrap();
    assert_eq!(restart.outcome, ScheduleAddOutcome::Unchanged);
    assert!(!restart.record.schedule.enabled());
    let changed = Schedule::builder("tick", "*/5 * * * * *", "noop")
        .build(&InputLimits::default())
        .unwrap();
    let redeclared = store
        .schedule_add(add(changed, ScheduleWriteMode::Declare))
        .await
        .unwrap();
    assert_eq!(redeclared.outcome, ScheduleAddOutcome::Replaced);
    assert!(!redeclared.record.schedule.enabled(), "still disabled");
    assert_eq!(redeclared.record.schedule.cron().as_str(), "*/5 * * * * *");
    let adds: Vec<String> = store
        .audit_list(AuditListParams {
            before_id: None,
            limit: 50,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_iter()
        .rev()
        .filter(|a| a.action == "schedule_add")
        .map(|a| a.detail.unwrap_or_default())
        .collect();
    assert_eq!(
        adds,
        ["created", "replaced"],
        "a declaration that changed nothing writes no audit row"
    );
    db.drop_db().await.unwrap();
}

conformance!(a_row_that_cannot_be_read_is_not_fired_and_says_why);
async fn a_row_that_cannot_be_read_is_not_fired_and_says_why(db: StoreDb) {
    let store = db.store();
    let leader = lead(&store, "a#1").await;
    create(&store, every_second("broken", MissedTicks::Skip)).await;
    db.update(
        Rows::Schedule("broken"),
        &[("cron", Val::from("every now and then"))],
    )
    .await
    .unwrap();
    backdate(&db, "broken", 2.0).await;
    let report = fire(&store, &leader).await;
    assert!(report.fired.is_empty());
    assert_eq!(report.failed.len(), 1);
    assert!(report.failed[0].1.contains("broken"), "{:?}", report.failed);
    assert!(keys(&store).await.is_empty());
    let stopped = db
        .fetch_int(
            Sql::each(
                "SELECT count(*) FROM schedules WHERE last_error IS NOT NULL \
                 AND next_fire_at > now() + interval '30 seconds'",
                "SELECT count(*) FROM schedules WHERE last_error IS NOT NULL \
                 AND next_fire_at > (julianday('now') - 2440587.5) * 86400000000 + 30000000",
            ),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(stopped, 1, "passed over for a minute, with the reason kept");
    assert!(
        fire(&store, &leader).await.failed.is_empty(),
        "not retried every pass"
    );
    // Listing shows the bad row apart, with why, and the good ones as usual; removing it
    // still works.
    create(&store, every_second("good", MissedTicks::Skip)).await;
    let listed = store.schedule_list().await.unwrap();
    assert_eq!(listed.schedules.len(), 1);
    assert_eq!(listed.unreadable.len(), 1);
    let bad = &listed.unreadable[0];
    assert_eq!(bad.name, "broken");
    assert_eq!(bad.cron.as_deref(), Some("every now and then"));
    assert!(bad.error.contains("cron"), "{bad:?}");
    // A row that does not even decode (a priority out of range on SQLite, where no CHECK
    // holds it) blocks no other schedule either.
    if db.is_sqlite() {
        db.update(Rows::Schedule("broken"), &[("priority", Val::Int(1 << 40))])
            .await
            .unwrap();
        backdate(&db, "broken", 2.0).await;
        backdate(&db, "good", 2.0).await;
        let report = fire(&store, &leader).await;
        assert!(!report.fired.is_empty(), "the good schedule still fires");
        assert_eq!(report.failed.len(), 1, "{:?}", report.failed);
        assert_eq!(store.schedule_list().await.unwrap().unreadable.len(), 1);
    }
    let removed = store
        .schedule_remove(ScheduleNameParams {
            name: "broken".parse().unwrap(),
            actor: ops(),
        })
        .await
        .unwrap();
    assert!(removed.is_none());
    assert!(store.schedule_list().await.unwrap().unreadable.is_empty());
    db.drop_db().await.unwrap();
}

/// The max attempts of the tasks each schedule fired in `report`, by schedule name (a
/// schedule that fired two ticks, one late and one on time, is listed once per value).
async fn fired_attempts(store: &Arc<dyn Store>, report: &FireReport) -> Vec<(String, i32)> {
    let mut out = Vec::new();
    for t in &report.fired {
        assert!(t.task.created, "{t:?}");
        let task = store.task_get(t.task.id).await.unwrap().unwrap().task;
        out.push((t.name.to_string(), task.max_attempts));
    }
    out.sort();
    out.dedup();
    out
}

async fn set_max_attempts(store: &Arc<dyn Store>, scope: PolicyScope, n: Option<u32>) {
    store
        .policy_set(PolicySetParams {
            scope,
            patch: PolicyPatch {
                max_attempts: Some(n),
                ..Default::default()
            },
            actor: ops(),
        })
        .await
        .unwrap();
}

conformance!(a_schedule_without_max_attempts_takes_the_policy_in_force_at_each_firing);
async fn a_schedule_without_max_attempts_takes_the_policy_in_force_at_each_firing(db: StoreDb) {
    let store = db.store();
    let leader = lead(&store, "a#1").await;
    let of = |t: &str| PolicyScope::Type(tt(t));
    let schedule = |name: &str, task_type: &str, own: Option<i32>| {
        Schedule::builder(name, "* * * * * *", task_type)
            .max_attempts_opt(own)
            .build(&InputLimits::default())
            .unwrap()
    };
    create(&store, schedule("inherits", "sched.pol", None)).await;
    create(&store, schedule("own", "sched.pol", Some(3))).await;
    create(&store, schedule("plain", "sched.none", None)).await;
    let stored: Vec<_> = store
        .schedule_list()
        .await
        .unwrap()
        .schedules
        .into_iter()
        .map(|r| (r.schedule.name().to_string(), r.schedule.max_attempts()))
        .collect();
    assert_eq!(
        stored,
        [
            ("inherits".to_string(), None),
            ("own".to_string(), Some(3)),
            ("plain".to_string(), None)
        ]
    );

    // Fires every schedule once, from a clean slate (so each tick's key is free again).
    let fire_all = async |expected: [(&str, i32); 3]| {
        db.execute(Sql::both("DELETE FROM tasks"), &[])
            .await
            .unwrap();
        for name in ["inherits", "own", "plain"] {
            backdate(&db, name, 3.0).await;
        }
        let report = fire(&store, &leader).await;
        let expected: Vec<_> = expected.iter().map(|(n, m)| (n.to_string(), *m)).collect();
        assert_eq!(fired_attempts(&store, &report).await, expected);
    };

    // No policy at all: the default.
    fire_all([("inherits", 25), ("own", 3), ("plain", 25)]).await;
    // The type's policy, read at the firing.
    set_max_attempts(&store, of("sched.pol"), Some(5)).await;
    fire_all([("inherits", 5), ("own", 3), ("plain", 25)]).await;
    // A later change applies to the next firing; the global row to a type without its own.
    set_max_attempts(&store, of("sched.pol"), Some(8)).await;
    set_max_attempts(&store, PolicyScope::Global, Some(12)).await;
    fire_all([("inherits", 8), ("own", 3), ("plain", 12)]).await;
    // The type's value cleared: the global one.
    set_max_attempts(&store, of("sched.pol"), None).await;
    fire_all([("inherits", 12), ("own", 3), ("plain", 12)]).await;

    // A trigger resolves them the same way.
    let triggered = store
        .schedule_trigger(ScheduleNameParams {
            name: "inherits".parse().unwrap(),
            actor: ops(),
        })
        .await
        .unwrap();
    let task = store.task_get(triggered.task.id).await.unwrap().unwrap();
    assert_eq!(task.task.max_attempts, 12);

    // Replacing with a value, then without one: it keeps the value, then inherits again.
    let replace = |s| store.schedule_add(add(s, ScheduleWriteMode::Replace));
    let set = replace(schedule("inherits", "sched.pol", Some(4)))
        .await
        .unwrap();
    assert_eq!(set.record.schedule.max_attempts(), Some(4));
    let back = replace(schedule("inherits", "sched.pol", None))
        .await
        .unwrap();
    assert_eq!(back.outcome, ScheduleAddOutcome::Replaced);
    assert_eq!(back.record.schedule.max_attempts(), None);

    // The column still refuses a value out of range, and takes NULL.
    let out_of_range = db
        .update(Rows::Schedule("own"), &[("max_attempts", Val::Int(0))])
        .await;
    assert!(out_of_range.is_err(), "0 is out of range");
    db.update(Rows::Schedule("own"), &[("max_attempts", Val::Null)])
        .await
        .unwrap();
    let own = store.schedule_list().await.unwrap().schedules;
    assert_eq!(own[1].schedule.max_attempts(), None);
    db.drop_db().await.unwrap();
}
