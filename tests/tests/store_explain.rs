//! Store conformance: `task_explain` says why a task is not running. Every blocker kind from a
//! factory-made state (times backdated in SQL, never slept for), a running task with none, an
//! unknown id, and the staleness bound; on PostgreSQL and SQLite alike.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use leasehold_shared::domain::{PolicyPatch, PolicyScope};
use leasehold_shared::store::{
    AgentRegisterParams, Blocker, BlockerKind, ExplainParams, PolicySetParams,
};
use leasehold_shared::{Actor, Store, StoreError, TaskId};
use leasehold_tests::factory::FACTORY_OWNER;
use leasehold_tests::helpers::tt;
use leasehold_tests::{Arg, Rows, StoreDb, TaskSpec, Val, conformance};

const STALE: Duration = Duration::from_secs(30);

async fn explain(store: &dyn Store, id: i64) -> Vec<Blocker> {
    store
        .task_explain(ExplainParams {
            id: TaskId(id),
            agent_stale_after: STALE,
        })
        .await
        .unwrap()
}

fn kinds(blockers: &[Blocker]) -> Vec<BlockerKind> {
    blockers.iter().map(|b| b.kind).collect()
}

/// A running agent, heartbeat now, serving `types`.
async fn live_agent(store: &dyn Store, name: &str, types: &[&str]) -> String {
    let agent = store
        .agent_register(AgentRegisterParams {
            name: name.into(),
            host: "host-a".into(),
            pid: 1,
            grpc_address: None,
            version: "0.1.0".into(),
            task_types: types.iter().map(|t| tt(t)).collect(),
            local_concurrency: 4,
            alive_for: Duration::from_secs(30),
        })
        .await
        .unwrap();
    agent.id.as_str().to_string()
}

/// A time column of task `id`, formatted as blockers print absolute times.
async fn time_of(db: &StoreDb, id: i64, column: &str) -> String {
    let at: DateTime<Utc> = db.task_time(id, column).await.unwrap();
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

async fn set_policy(store: &dyn Store, scope: PolicyScope, patch: PolicyPatch) {
    store
        .policy_set(PolicySetParams {
            scope,
            patch,
            actor: Actor::operator("alice"),
        })
        .await
        .unwrap();
}

conformance!(a_running_task_has_no_blockers_and_an_unknown_id_is_not_found);
async fn a_running_task_has_no_blockers_and_an_unknown_id_is_not_found(db: StoreDb) {
    let store = db.store();
    // Even with its type paused and no agent alive: it runs, nothing blocks it.
    let id = db
        .insert_task(TaskSpec::new("busy", "running"))
        .await
        .unwrap();
    set_policy(
        &*store,
        PolicyScope::Type(tt("busy")),
        PolicyPatch {
            paused: Some(true),
            ..Default::default()
        },
    )
    .await;
    assert!(explain(&*store, id).await.is_empty());

    let missing = store
        .task_explain(ExplainParams {
            id: TaskId(987_654),
            agent_stale_after: STALE,
        })
        .await;
    assert!(
        matches!(missing, Err(StoreError::NotFound(TaskId(987_654)))),
        "{missing:?}"
    );
    let too_long = store
        .task_explain(ExplainParams {
            id: TaskId(id),
            agent_stale_after: Duration::from_secs(8 * 24 * 3600),
        })
        .await;
    assert!(
        matches!(too_long, Err(StoreError::Invalid(_))),
        "{too_long:?}"
    );
    db.drop_db().await.unwrap();
}

conformance!(a_finished_task_says_how_and_when_it_ended_and_nothing_else);
async fn a_finished_task_says_how_and_when_it_ended_and_nothing_else(db: StoreDb) {
    let store = db.store();
    let mut ids = Vec::new();
    for status in ["succeeded", "partially_succeeded", "dead", "cancelled"] {
        ids.push(db.insert_task(TaskSpec::new("done", status)).await.unwrap());
    }
    // Ended three minutes ago; and the type is paused with no agent, which does not matter.
    db.update(Rows::AllTasks, &[("finished_at", Val::At(-180.2))])
        .await
        .unwrap();
    set_policy(
        &*store,
        PolicyScope::Type(tt("done")),
        PolicyPatch {
            paused: Some(true),
            ..Default::default()
        },
    )
    .await;
    let mut messages = Vec::new();
    for &id in &ids {
        let b = explain(&*store, id).await;
        assert_eq!(kinds(&b), [BlockerKind::Finished], "task {id}: {b:?}");
        let at = time_of(&db, id, "finished_at").await;
        assert!(
            b[0].message.contains(&format!("{at} (3m ago)")),
            "{}",
            b[0].message
        );
        assert!(
            b[0].message
                .ends_with(&format!("requeue it to run again (leasehold requeue {id})")),
            "{}",
            b[0].message
        );
        messages.push(b[0].message.clone());
    }
    assert!(messages[0].starts_with("finished: succeeded at "));
    assert!(messages[1].starts_with("finished: partially_succeeded at "));
    assert!(
        messages[2].starts_with("dead at ") && messages[2].contains("(3m ago): boom: factory;"),
        "{}",
        messages[2]
    );
    assert!(messages[3].starts_with("cancelled at "));
    db.drop_db().await.unwrap();
}

conformance!(a_cancel_request_names_the_holder_that_stops_it);
async fn a_cancel_request_names_the_holder_that_stops_it(db: StoreDb) {
    let store = db.store();
    let id = db
        .insert_task(TaskSpec::new("stopping", "cancel_requested"))
        .await
        .unwrap();
    let b = explain(&*store, id).await;
    assert_eq!(kinds(&b), [BlockerKind::CancelRequested]);
    assert_eq!(
        b[0].message,
        format!("cancel requested; its holder {FACTORY_OWNER} stops it within one heartbeat")
    );
    db.drop_db().await.unwrap();
}

conformance!(waiting_tasks_say_when_they_are_due_and_why_they_wait);
async fn waiting_tasks_say_when_they_are_due_and_why_they_wait(db: StoreDb) {
    let store = db.store();
    live_agent(&*store, "w", &["mail"]).await;

    // Retrying in 42 s after its second of five attempts failed.
    let retry = db
        .insert_task(TaskSpec {
            attempt: 2,
            max_attempts: 5,
            lease_epoch: 2,
            available_in_secs: 42.9,
            last_error: Some(serde_json::json!({
                "code": "smtp_timeout", "message": "mail server slow", "retryable": true
            })),
            ..TaskSpec::new("mail", "retry_wait")
        })
        .await
        .unwrap();
    let b = explain(&*store, retry).await;
    assert_eq!(kinds(&b), [BlockerKind::RetryWait], "{b:?}");
    let at = time_of(&db, retry, "available_at").await;
    assert_eq!(
        b[0].message,
        format!(
            "waiting to retry at {at} (in 42s) after attempt 2 of 5 failed: \
             smtp_timeout: mail server slow"
        )
    );

    // Queued for an hour from now.
    let later = db
        .insert_task(TaskSpec {
            available_in_secs: 3600.9,
            ..TaskSpec::new("mail", "queued")
        })
        .await
        .unwrap();
    let b = explain(&*store, later).await;
    assert_eq!(kinds(&b), [BlockerKind::NotDue], "{b:?}");
    let at = time_of(&db, later, "available_at").await;
    assert_eq!(b[0].message, format!("not due until {at} (in 1h)"));

    // A retry that is due is claimable like a queued task.
    let due_retry = db
        .insert_task(TaskSpec::new("mail", "retry_wait"))
        .await
        .unwrap();
    let b = explain(&*store, due_retry).await;
    assert_eq!(kinds(&b), [BlockerKind::Claimable], "{b:?}");
    assert_eq!(
        b[0].message,
        "due now; the next claim of an agent serving mail takes it"
    );
    db.drop_db().await.unwrap();
}

conformance!(a_passed_deadline_says_maintenance_will_dead_letter_it);
async fn a_passed_deadline_says_maintenance_will_dead_letter_it(db: StoreDb) {
    let store = db.store();
    live_agent(&*store, "w", &["report"]).await;
    let id = db
        .insert_task(TaskSpec {
            deadline_in_secs: Some(-180.1),
            ..TaskSpec::new("report", "queued")
        })
        .await
        .unwrap();
    let b = explain(&*store, id).await;
    assert_eq!(kinds(&b), [BlockerKind::DeadlinePassed], "{b:?}");
    let at = time_of(&db, id, "deadline_at").await;
    assert_eq!(
        b[0].message,
        format!(
            "deadline passed at {at} (3m ago); maintenance dead-letters it with code \
             deadline_exceeded"
        )
    );
    db.drop_db().await.unwrap();
}

conformance!(a_paused_type_and_a_paused_fleet_are_each_a_blocker);
async fn a_paused_type_and_a_paused_fleet_are_each_a_blocker(db: StoreDb) {
    let store = db.store();
    live_agent(&*store, "w", &["thumb"]).await;
    let id = db
        .insert_task(TaskSpec::new("thumb", "queued"))
        .await
        .unwrap();
    let paused = PolicyPatch {
        paused: Some(true),
        ..Default::default()
    };
    set_policy(&*store, PolicyScope::Type(tt("thumb")), paused.clone()).await;
    let b = explain(&*store, id).await;
    assert_eq!(kinds(&b), [BlockerKind::Paused]);
    assert_eq!(
        b[0].message,
        "type thumb is paused (leasehold resume thumb)"
    );

    set_policy(&*store, PolicyScope::Global, paused).await;
    let b = explain(&*store, id).await;
    assert_eq!(kinds(&b), [BlockerKind::Paused, BlockerKind::Paused]);
    assert_eq!(b[1].message, "all types are paused (global policy)");

    set_policy(
        &*store,
        PolicyScope::Type(tt("thumb")),
        PolicyPatch {
            paused: Some(false),
            ..Default::default()
        },
    )
    .await;
    let b = explain(&*store, id).await;
    assert_eq!(
        b.iter().map(|b| b.message.as_str()).collect::<Vec<_>>(),
        ["all types are paused (global policy)"]
    );
    db.drop_db().await.unwrap();
}

conformance!(reached_limits_count_running_and_cancel_requested_tasks);
async fn reached_limits_count_running_and_cancel_requested_tasks(db: StoreDb) {
    let store = db.store();
    live_agent(&*store, "w", &["encode", "other"]).await;
    let id = db
        .insert_task(TaskSpec::new("encode", "queued"))
        .await
        .unwrap();
    for status in ["running", "cancel_requested"] {
        db.insert_task(TaskSpec::new("encode", status))
            .await
            .unwrap();
    }
    db.insert_task(TaskSpec::new("other", "running"))
        .await
        .unwrap();
    let limit = |n| PolicyPatch {
        max_concurrency: Some(Some(n)),
        ..Default::default()
    };

    // Below both limits: claimable.
    set_policy(&*store, PolicyScope::Type(tt("encode")), limit(3)).await;
    set_policy(&*store, PolicyScope::Global, limit(4)).await;
    assert_eq!(kinds(&explain(&*store, id).await), [BlockerKind::Claimable]);

    set_policy(&*store, PolicyScope::Type(tt("encode")), limit(2)).await;
    let b = explain(&*store, id).await;
    assert_eq!(kinds(&b), [BlockerKind::TypeLimit]);
    assert_eq!(
        b[0].message,
        "type limit reached: 2/2 running (type encode)"
    );

    set_policy(&*store, PolicyScope::Global, limit(3)).await;
    let b = explain(&*store, id).await;
    assert_eq!(
        kinds(&b),
        [BlockerKind::TypeLimit, BlockerKind::GlobalLimit]
    );
    assert_eq!(b[1].message, "global limit reached: 3/3 running");
    db.drop_db().await.unwrap();
}

conformance!(only_a_running_fresh_agent_of_the_type_counts_as_live);
async fn only_a_running_fresh_agent_of_the_type_counts_as_live(db: StoreDb) {
    let store = db.store();
    let id = db
        .insert_task(TaskSpec::new("resize", "queued"))
        .await
        .unwrap();
    let no_agent = || vec![BlockerKind::NoAgent];
    assert_eq!(kinds(&explain(&*store, id).await), no_agent(), "no agents");
    let b = explain(&*store, id).await;
    assert_eq!(b[0].message, "no live agent handles type resize");

    live_agent(&*store, "elsewhere", &["mail"]).await;
    assert_eq!(kinds(&explain(&*store, id).await), no_agent(), "other type");

    let agent = live_agent(&*store, "resizer", &["mail", "resize"]).await;
    assert_eq!(kinds(&explain(&*store, id).await), [BlockerKind::Claimable]);

    for (change, why) in [
        (vec![("state", Val::from("draining"))], "draining"),
        (
            vec![
                ("state", Val::from("stopped")),
                ("stopped_at", Val::At(0.0)),
            ],
            "stopped",
        ),
        (
            vec![
                ("state", Val::from("running")),
                ("stopped_at", Val::Null),
                ("heartbeat_at", Val::At(-31.0)),
            ],
            "stale heartbeat",
        ),
    ] {
        assert_eq!(db.update(Rows::Agent(&agent), &change).await.unwrap(), 1);
        assert_eq!(kinds(&explain(&*store, id).await), no_agent(), "{why}");
    }
    assert_eq!(
        db.update(Rows::Agent(&agent), &[("heartbeat_at", Val::At(-29.0))])
            .await
            .unwrap(),
        1
    );
    assert_eq!(kinds(&explain(&*store, id).await), [BlockerKind::Claimable]);
    db.drop_db().await.unwrap();
}

conformance!(tasks_ahead_in_claim_order_are_counted_and_capped);
async fn tasks_ahead_in_claim_order_are_counted_and_capped(db: StoreDb) {
    let store = db.store();
    live_agent(&*store, "w", &["crawl", "other"]).await;
    let spec = |priority: i16, available_in_secs: f64| TaskSpec {
        priority,
        available_in_secs,
        ..TaskSpec::new("crawl", "queued")
    };
    // Ahead: higher priority (queued, and a due retry), or the same priority due earlier.
    for ahead in [spec(5, -1.0), spec(1, 0.0), spec(0, -60.0)] {
        db.insert_task(ahead).await.unwrap();
    }
    db.insert_task(TaskSpec {
        priority: 3,
        ..TaskSpec::new("crawl", "retry_wait")
    })
    .await
    .unwrap();
    let id = db.insert_task(spec(0, -10.0)).await.unwrap();
    // Not ahead: lower priority, due later at the same priority, not due, past its deadline,
    // running, of another type.
    for behind in [
        spec(-1, -100.0),
        spec(0, -5.0),
        spec(9, 600.0),
        TaskSpec {
            deadline_in_secs: Some(-1.0),
            ..spec(9, -1.0)
        },
        TaskSpec {
            priority: 9,
            ..TaskSpec::new("crawl", "running")
        },
        TaskSpec {
            priority: 9,
            ..TaskSpec::new("other", "queued")
        },
    ] {
        db.insert_task(behind).await.unwrap();
    }
    // Same priority and due time as `id` but a larger id: `id` comes first (ids break ties).
    let twin = db.insert_task(spec(0, 0.0)).await.unwrap();
    db.execute(
        "UPDATE tasks SET available_at = (SELECT available_at FROM tasks WHERE id = $2) \
         WHERE id = $1",
        &[Arg::Int(twin), Arg::Int(id)],
    )
    .await
    .unwrap();

    let b = explain(&*store, id).await;
    assert_eq!(kinds(&b), [BlockerKind::BehindHigherPriority], "{b:?}");
    assert_eq!(
        b[0].message,
        "waiting behind 4 tasks of higher priority or earlier due time (type crawl)"
    );
    let b = explain(&*store, twin).await;
    assert_eq!(
        b[0].message,
        "waiting behind 5 tasks of higher priority or earlier due time (type crawl)"
    );

    // A long queue is counted only up to the cap.
    db.insert_queued_bulk("crawl", 10_000, 7, -1.0)
        .await
        .unwrap();
    let b = explain(&*store, id).await;
    assert_eq!(
        b[0].message,
        "waiting behind more than 10000 tasks of higher priority or earlier due time (type crawl)"
    );
    db.drop_db().await.unwrap();
}

conformance!(every_reason_that_applies_is_listed_in_order);
async fn every_reason_that_applies_is_listed_in_order(db: StoreDb) {
    let store = db.store();
    // A retry not due yet, past its deadline, of a paused type in a paused fleet, at both
    // limits, with no agent: every waiting blocker at once, in the documented order.
    let id = db
        .insert_task(TaskSpec {
            available_in_secs: 30.0,
            deadline_in_secs: Some(-1.0),
            ..TaskSpec::new("all", "retry_wait")
        })
        .await
        .unwrap();
    db.insert_task(TaskSpec::new("all", "running"))
        .await
        .unwrap();
    let stop = PolicyPatch {
        paused: Some(true),
        max_concurrency: Some(Some(1)),
        ..Default::default()
    };
    set_policy(&*store, PolicyScope::Type(tt("all")), stop.clone()).await;
    set_policy(&*store, PolicyScope::Global, stop).await;
    assert_eq!(
        kinds(&explain(&*store, id).await),
        [
            BlockerKind::RetryWait,
            BlockerKind::DeadlinePassed,
            BlockerKind::Paused,
            BlockerKind::Paused,
            BlockerKind::TypeLimit,
            BlockerKind::GlobalLimit,
            BlockerKind::NoAgent,
        ]
    );
    db.drop_db().await.unwrap();
}
