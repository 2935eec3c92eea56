#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Maintenance statements added with the agent runtime: retention of finished tasks, the count
//! of claimable tasks behind `--exit-when-idle`, and dead-lettering tasks whose type no live
//! agent serves; on PostgreSQL and SQLite alike.

use std::time::Duration;

use leasehold_shared::store::{AgentRegisterParams, PurgeParams, UnservedParams};
use leasehold_shared::{StoreError, TaskId, TaskStatus};
use leasehold_tests::helpers::tt;
use leasehold_tests::{Rows, StoreDb, TaskSpec, Val, conformance};

async fn age(db: &StoreDb, id: i64, days: i64) {
    db.update_task(id, &[("finished_at", Val::At(-(days as f64) * 86_400.0))])
        .await
        .unwrap();
}

conformance!(
    retention_deletes_only_old_finished_tasks_of_the_given_statuses,
    worker_threads = 2
);
async fn retention_deletes_only_old_finished_tasks_of_the_given_statuses(db: StoreDb) {
    let store = db.store();
    let old_ok = db
        .insert_task(TaskSpec::new("keep.me", "succeeded"))
        .await
        .unwrap();
    let new_ok = db
        .insert_task(TaskSpec::new("keep.me", "succeeded"))
        .await
        .unwrap();
    let old_dead = db
        .insert_task(TaskSpec::new("keep.me", "dead"))
        .await
        .unwrap();
    let running = db
        .insert_task(TaskSpec::new("keep.me", "running"))
        .await
        .unwrap();
    let queued = db
        .insert_task(TaskSpec::new("keep.me", "queued"))
        .await
        .unwrap();
    age(&db, old_ok, 10).await;
    age(&db, old_dead, 10).await;
    db.insert_attempt(old_ok, 1, 1, "a#1", "succeeded")
        .await
        .unwrap();

    let deleted = store
        .task_purge_finished(PurgeParams {
            statuses: vec![
                TaskStatus::Succeeded,
                TaskStatus::PartiallySucceeded,
                TaskStatus::Cancelled,
            ],
            older_than: Duration::from_secs(7 * 24 * 3600),
            limit: 100,
        })
        .await
        .unwrap();
    assert_eq!(deleted, 1, "only the old succeeded task");
    let left = db
        .fetch_ints("SELECT id FROM tasks ORDER BY id", &[])
        .await
        .unwrap();
    assert_eq!(left, vec![new_ok, old_dead, running, queued]);
    assert_eq!(
        db.count("SELECT count(*) FROM task_attempts")
            .await
            .unwrap(),
        0,
        "its attempts went with it"
    );

    // Dead letters have their own (longer) retention.
    let deleted = store
        .task_purge_finished(PurgeParams {
            statuses: vec![TaskStatus::Dead],
            older_than: Duration::from_secs(30 * 24 * 3600),
            limit: 100,
        })
        .await
        .unwrap();
    assert_eq!(deleted, 0, "10 days is within 30");

    // Bad input changes nothing.
    for bad in [
        PurgeParams {
            statuses: vec![TaskStatus::Running],
            older_than: Duration::ZERO,
            limit: 10,
        },
        PurgeParams {
            statuses: vec![TaskStatus::Dead],
            older_than: Duration::ZERO,
            limit: 0,
        },
    ] {
        let err = store.task_purge_finished(bad).await.unwrap_err();
        assert!(matches!(err, StoreError::Invalid(_)), "{err}");
    }
    assert_eq!(db.count("SELECT count(*) FROM tasks").await.unwrap(), 4);
    db.drop_db().await.unwrap();
}

conformance!(
    claimable_counts_due_waiting_tasks_of_unpaused_types_only,
    worker_threads = 2
);
async fn claimable_counts_due_waiting_tasks_of_unpaused_types_only(db: StoreDb) {
    let store = db.store();
    db.insert_task(TaskSpec::new("a", "queued")).await.unwrap();
    db.insert_task(TaskSpec::new("a", "retry_wait"))
        .await
        .unwrap();
    db.insert_task(TaskSpec::new("a", "running")).await.unwrap();
    db.insert_task(TaskSpec::new("a", "succeeded"))
        .await
        .unwrap();
    let later = db.insert_task(TaskSpec::new("a", "queued")).await.unwrap();
    db.update_task(later, &[("available_at", Val::At(3600.0))])
        .await
        .unwrap();
    db.insert_task(TaskSpec::new("b", "queued")).await.unwrap();
    assert_eq!(store.task_count_claimable(vec![tt("a")]).await.unwrap(), 2);
    assert_eq!(
        store
            .task_count_claimable(vec![tt("a"), tt("b")])
            .await
            .unwrap(),
        3
    );
    db.execute(
        "INSERT INTO policies (scope, paused) VALUES ('b', true)",
        &[],
    )
    .await
    .unwrap();
    assert_eq!(
        store
            .task_count_claimable(vec![tt("a"), tt("b")])
            .await
            .unwrap(),
        2,
        "paused types wait"
    );
    db.drop_db().await.unwrap();
}

conformance!(unserved_types_are_dead_lettered_only_while_some_agent_is_live);
async fn unserved_types_are_dead_lettered_only_while_some_agent_is_live(db: StoreDb) {
    let store = db.store();
    let params = UnservedParams {
        due_for: Duration::from_secs(60),
        legacy_stale_after: Duration::from_secs(30),
        limit: 100,
    };
    let overdue = |task_type: &str, status| TaskSpec {
        available_in_secs: -120.0,
        ..TaskSpec::new(task_type, status)
    };
    let orphan = db.insert_task(overdue("orphan", "queued")).await.unwrap();
    // An empty fleet is an outage, not a verdict on the tasks.
    assert!(
        store
            .task_dead_letter_unserved(params.clone())
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(db.task_status(orphan).await.unwrap(), "queued");

    let agent = store
        .agent_register(AgentRegisterParams {
            name: "mailer".into(),
            host: "host-a".into(),
            pid: 1,
            grpc_address: None,
            version: "0.1.0".into(),
            task_types: vec![tt("mail"), tt("sms")],
            local_concurrency: 4,
            alive_for: Duration::from_secs(30),
        })
        .await
        .unwrap();
    let retrying = db
        .insert_task(overdue("orphan", "retry_wait"))
        .await
        .unwrap();
    // Not judged yet: due for less than `due_for`, running, or of a type the agent serves.
    let fresh = db
        .insert_task(TaskSpec {
            available_in_secs: -10.0,
            ..TaskSpec::new("orphan", "queued")
        })
        .await
        .unwrap();
    let running = db
        .insert_task(TaskSpec::new("orphan", "running"))
        .await
        .unwrap();
    let served = db.insert_task(overdue("sms", "queued")).await.unwrap();
    let mut got = store
        .task_dead_letter_unserved(params.clone())
        .await
        .unwrap();
    got.sort();
    assert_eq!(
        got,
        vec![
            (TaskId(orphan), tt("orphan")),
            (TaskId(retrying), tt("orphan"))
        ]
    );
    for id in [orphan, retrying] {
        let row = db.task_row(id).await.unwrap();
        assert_eq!(row["status"], "dead", "{row}");
        assert_eq!(row["last_error"]["code"], "unknown_type", "{row}");
        assert_eq!(
            row["last_error"]["message"], "no running agent handles task type orphan",
            "{row}"
        );
        assert_eq!(row["last_error"]["retryable"], false, "{row}");
        assert!(!row["finished_at"].is_null(), "{row}");
    }
    for (id, status) in [(fresh, "queued"), (running, "running"), (served, "queued")] {
        assert_eq!(db.task_status(id).await.unwrap(), status);
    }

    // An agent past its own liveness deadline (however fresh its registry heartbeat) or a
    // stopped one is not live: no verdict either.
    let later = db.insert_task(overdue("orphan", "queued")).await.unwrap();
    let id = agent.id.as_str();
    db.update(
        Rows::Agent(id),
        &[
            ("heartbeat_at", Val::At(0.0)),
            ("alive_until", Val::At(-1.0)),
        ],
    )
    .await
    .unwrap();
    assert!(
        store
            .task_dead_letter_unserved(params.clone())
            .await
            .unwrap()
            .is_empty(),
        "liveness deadline passed"
    );
    db.update(
        Rows::Agent(id),
        &[
            ("heartbeat_at", Val::At(0.0)),
            ("state", Val::from("stopped")),
            ("stopped_at", Val::At(0.0)),
        ],
    )
    .await
    .unwrap();
    assert!(
        store
            .task_dead_letter_unserved(params.clone())
            .await
            .unwrap()
            .is_empty(),
        "stopped"
    );
    assert_eq!(db.task_status(later).await.unwrap(), "queued");

    // Live again: at most `limit` go per call.
    db.update(
        Rows::Agent(id),
        &[
            ("state", Val::from("running")),
            ("stopped_at", Val::Null),
            ("alive_until", Val::At(60.0)),
        ],
    )
    .await
    .unwrap();
    db.insert_task(overdue("orphan", "queued")).await.unwrap();
    let one = store
        .task_dead_letter_unserved(UnservedParams {
            limit: 1,
            ..params.clone()
        })
        .await
        .unwrap();
    assert_eq!(one.len(), 1, "{one:?}");
    assert_eq!(
        db.count("SELECT count(*) FROM tasks WHERE status = 'dead'")
            .await
            .unwrap(),
        3
    );
    let bad = store
        .task_dead_letter_unserved(UnservedParams { limit: 0, ..params })
        .await;
    assert!(matches!(bad, Err(StoreError::Invalid(_))), "{bad:?}");
    db.drop_db().await.unwrap();
}
