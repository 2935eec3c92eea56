#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `task_idle_report` (behind `--exit-when-idle`) on PostgreSQL and SQLite alike: pending work
//! of the given types in every waiting and leased state, dead and cancelled tasks within the
//! window, and waiting tasks of types no live agent serves.

use std::time::Duration;

use leasehold_shared::store::{AgentRegisterParams, IdleReportParams};
use leasehold_shared::{TaskId, TaskStatus};
use leasehold_tests::helpers::tt;
use leasehold_tests::{StoreDb, TaskSpec, Val, conformance};

fn params(ended_within: Option<Duration>) -> IdleReportParams {
    IdleReportParams {
        task_types: vec![tt("ci.build"), tt("ci.test")],
        ended_within,
        legacy_stale_after: Duration::from_secs(30),
        id_limit: 2,
    }
}

conformance!(the_idle_report_groups_pending_bad_and_unserved_tasks);
async fn the_idle_report_groups_pending_bad_and_unserved_tasks(db: StoreDb) {
    let store = db.store();
    let empty = store.task_idle_report(params(None)).await.unwrap();
    assert!(empty.is_idle() && empty.ended_badly.is_empty() && empty.unserved.is_empty());

    // A retry far in the future is still pending: idle waits for it.
    let later = db
        .insert_task(TaskSpec {
            available_in_secs: 3600.0,
            ..TaskSpec::new("ci.build", "retry_wait")
        })
        .await
        .unwrap();
    let q1 = db
        .insert_task(TaskSpec::new("ci.test", "queued"))
        .await
        .unwrap();
    let q2 = db
        .insert_task(TaskSpec::new("ci.test", "queued"))
        .await
        .unwrap();
    let q3 = db
        .insert_task(TaskSpec::new("ci.test", "queued"))
        .await
        .unwrap();
    let running = db
        .insert_task(TaskSpec::new("ci.build", "running"))
        .await
        .unwrap();
    let old_dead = db
        .insert_task(TaskSpec::new("ci.build", "dead"))
        .await
        .unwrap();
    let cancelled = db
        .insert_task(TaskSpec::new("ci.test", "cancelled"))
        .await
        .unwrap();
    db.insert_task(TaskSpec::new("ci.build", "succeeded"))
        .await
        .unwrap();
    db.insert_task(TaskSpec::new("other", "dead"))
        .await
        .unwrap();
    let orphan = db
        .insert_task(TaskSpec::new("orphan", "queued"))
        .await
        .unwrap();
    let served = db
        .insert_task(TaskSpec::new("mail", "queued"))
        .await
        .unwrap();
    store
        .agent_register(AgentRegisterParams {
            name: "mailer".into(),
            host: "host-a".into(),
            pid: 1,
            grpc_address: None,
            version: "0.1.0".into(),
            task_types: vec![tt("mail")],
            local_concurrency: 4,
            alive_for: Duration::from_secs(30),
        })
        .await
        .unwrap();
    let old = -(10.0 * 86_400.0);
    db.update_task(
        old_dead,
        &[("created_at", Val::At(old)), ("finished_at", Val::At(old))],
    )
    .await
    .unwrap();

    let r = store.task_idle_report(params(None)).await.unwrap();
    assert!(!r.is_idle());
    let pending: Vec<(TaskStatus, &str, u64, Vec<TaskId>)> = r
        .pending
        .iter()
        .map(|g| (g.status, g.task_type.as_str(), g.count, g.ids.clone()))
        .collect();
    assert_eq!(
        pending,
        vec![
            (
                TaskStatus::Queued,
                "ci.test",
                3,
                vec![TaskId(q1), TaskId(q2)]
            ),
            (TaskStatus::RetryWait, "ci.build", 1, vec![TaskId(later)]),
            (TaskStatus::Running, "ci.build", 1, vec![TaskId(running)]),
        ],
        "sorted by status text, then type; ids cut to the limit (not {q3})"
    );
    let bad: Vec<(TaskStatus, Vec<TaskId>)> = r
        .ended_badly
        .iter()
        .map(|g| (g.status, g.ids.clone()))
        .collect();
    assert_eq!(
        bad,
        vec![
            (TaskStatus::Cancelled, vec![TaskId(cancelled)]),
            (TaskStatus::Dead, vec![TaskId(old_dead)]),
        ]
    );
    let unserved: Vec<Vec<TaskId>> = r.unserved.iter().map(|g| g.ids.clone()).collect();
    assert_eq!(
        unserved,
        vec![vec![TaskId(orphan)]],
        "not {served}: a live agent serves mail"
    );

    // Within a day, the ten-day-old dead letter no longer counts.
    let r = store
        .task_idle_report(params(Some(Duration::from_secs(86_400))))
        .await
        .unwrap();
    let bad: Vec<TaskId> = r.ended_badly.iter().flat_map(|g| g.ids.clone()).collect();
    assert_eq!(bad, vec![TaskId(cancelled)]);

    let bad_params = IdleReportParams {
        task_types: Vec::new(),
        ..params(None)
    };
    assert!(store.task_idle_report(bad_params).await.is_err());
    db.drop_db().await.unwrap();
}
