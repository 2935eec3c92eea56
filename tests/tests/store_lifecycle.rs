//! Store conformance: enqueue (plain SQL, idempotency keys, bulk), retries with backoff,
//! recovery after grace and its race with a completing holder, suspect leases, deadlines,
//! operator requeue and its audit trail, enqueue and audit rows in the caller's own
//! transaction — on PostgreSQL and SQLite alike. PostgreSQL only: NOTIFY, and TRUNCATE.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use leasehold_shared::domain::{PolicyPatch, PolicyScope, Role, TaskStatus};
use leasehold_shared::store::postgres::{NOTIFY_CHANNEL, enqueue};
use leasehold_shared::store::{
    CancelOutcome, CancelParams, CompleteOutcome, CompleteParams, Completion, DeadFilter,
    DeadIdsPage, ExpireDeadlinesParams, NewTask, PolicySetParams, RecoverParams, RequeueDeadParams,
    RequeueParams, SuspectParams,
};
use leasehold_shared::{Actor, AgentId, LeaseEpoch, Store, StoreError, TaskError, TaskId};
use leasehold_tests::factory::FACTORY_OWNER;
use leasehold_tests::helpers::{by_factory, claim, key, tt};
use leasehold_tests::{
    Arg, Rows, StoreDb, TaskSpec, TestDb, Val, WriteTx, conformance, count, insert_task,
};
use serde_json::json;

conformance!(a_plain_sql_insert_is_a_complete_enqueue);
async fn a_plain_sql_insert_is_a_complete_enqueue(db: StoreDb) {
    let store = db.store();
    let mut tx = db.begin_write().await.unwrap();
    for n in 0..3 {
        tx.execute(
            "INSERT INTO tasks (task_type, payload) VALUES ('plain', $1)",
            &[Arg::Json(json!({ "n": n }))],
        )
        .await
        .unwrap();
    }
    tx.commit().await.unwrap();

    let batch = store
        .task_claim(claim("sql#1", &["plain"], 10))
        .await
        .unwrap();
    assert_eq!(batch.tasks.len(), 3);
    for t in &batch.tasks {
        assert_eq!(t.status, TaskStatus::Running);
        assert_eq!(t.attempt, 1);
        assert_eq!(t.max_attempts, 25);
        assert_eq!(t.priority, 0);
        assert_eq!(t.lease_epoch, LeaseEpoch(1));
    }
    db.drop_db().await.unwrap();
}

// PostgreSQL only: NOTIFY (SQLite has none; its agents poll).
#[tokio::test]
async fn plain_sql_inserts_wake_listeners_once_per_transaction() {
    let db = TestDb::new().await.unwrap();
    let mut listener = sqlx::postgres::PgListener::connect_with(&db.pool)
        .await
        .unwrap();
    listener.listen(NOTIFY_CHANNEL).await.unwrap();

    let mut tx = db.pool.begin().await.unwrap();
    for n in 0..3 {
        sqlx::query("INSERT INTO tasks (task_type, payload) VALUES ('plain', $1::jsonb)")
            .bind(json!({ "n": n }).to_string())
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(5), listener.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.channel(), NOTIFY_CHANNEL);
    let second = tokio::time::timeout(Duration::from_millis(300), listener.recv()).await;
    assert!(
        second.is_err(),
        "three inserts in one transaction must notify once"
    );
    drop(listener);
    db.drop_db().await.unwrap();
}

conformance!(enqueue_in_the_callers_transaction_exists_only_if_it_commits);
async fn enqueue_in_the_callers_transaction_exists_only_if_it_commits(db: StoreDb) {
    let limits = Default::default();
    let task = NewTask::new(tt("txn"), json!({"order": 1}));
    let mut tx = db.begin_write().await.unwrap();
    let rolled = tx.enqueue(&task, &limits).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(db.count("SELECT count(*) FROM tasks").await.unwrap(), 0);
    let mut tx = db.begin_write().await.unwrap();
    let kept = tx.enqueue(&task, &limits).await.unwrap();
    if let WriteTx::Pg(pg) = &mut tx {
        // The executor-generic bulk enqueue is PostgreSQL's alone; SQLite enqueues one by one.
        enqueue::task_enqueue_many(&mut **pg, &[task.clone(), task.clone()], &limits)
            .await
            .unwrap();
    } else {
        for _ in 0..2 {
            tx.enqueue(&task, &limits).await.unwrap();
        }
    }
    tx.commit().await.unwrap();
    assert!(kept.created);
    assert_eq!(db.task_row(kept.id.0).await.unwrap()["task_type"], "txn");
    if db.is_postgres() {
        // A PostgreSQL sequence does not roll back; SQLite's AUTOINCREMENT counter does, so
        // there the rolled-back id is handed out again (no committed row ever had it).
        assert_ne!(rolled.id, kept.id);
    }
    assert_eq!(db.count("SELECT count(*) FROM tasks").await.unwrap(), 3);
    db.drop_db().await.unwrap();
}

conformance!(idempotency_keys_return_the_existing_task);
async fn idempotency_keys_return_the_existing_task(db: StoreDb) {
    let store = db.store();
    let task = NewTask::new(tt("idem"), json!({"a": 1})).with_idempotency_key("order-42");
    let first = store.task_enqueue(task.clone()).await.unwrap();
    assert!(first.created);
    let again = store
        .task_enqueue(task.clone().with_priority(9))
        .await
        .unwrap();
    assert_eq!(again.id, first.id);
    assert!(!again.created);
    assert_eq!(
        db.task_row(first.id.0).await.unwrap()["priority"],
        0,
        "the repeat changed nothing"
    );

    // In bulk: an existing key, a key repeated inside the batch, and keyless tasks.
    let bulk = vec![
        NewTask::new(tt("idem"), json!({})),
        task.clone(),
        NewTask::new(tt("idem"), json!({})).with_idempotency_key("k2"),
        NewTask::new(tt("idem"), json!({})).with_idempotency_key("k2"),
        NewTask::new(tt("idem"), json!({})),
    ];
    let out = store.task_enqueue_many(bulk).await.unwrap();
    assert_eq!(out.len(), 5);
    assert!(out[0].created && out[4].created && out[2].created);
    assert_eq!((out[1].id, out[1].created), (first.id, false));
    assert_eq!((out[3].id, out[3].created), (out[2].id, false));
    assert_ne!(out[0].id, out[4].id);
    assert_eq!(db.count("SELECT count(*) FROM tasks").await.unwrap(), 4);
    db.drop_db().await.unwrap();
}

conformance!(
    concurrent_enqueues_of_one_key_create_one_task,
    worker_threads = 2
);
async fn concurrent_enqueues_of_one_key_create_one_task(db: StoreDb) {
    let store = db.store();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let store = store.clone();
        set.spawn(async move {
            store
                .task_enqueue(NewTask::new(tt("race"), json!({})).with_idempotency_key("once"))
                .await
                .unwrap()
        });
    }
    let mut ids = Vec::new();
    let mut created = 0;
    while let Some(r) = set.join_next().await {
        let e = r.unwrap();
        ids.push(e.id);
        created += usize::from(e.created);
    }
    ids.dedup();
    assert_eq!(created, 1);
    assert!(ids.iter().all(|id| *id == ids[0]));
    db.drop_db().await.unwrap();
}

conformance!(bulk_enqueue_of_twelve_thousand_in_one_call_keeps_input_order);
async fn bulk_enqueue_of_twelve_thousand_in_one_call_keeps_input_order(db: StoreDb) {
    let store = db.store();
    let tasks: Vec<NewTask> = (0..12_000)
        .map(|n| NewTask::new(tt("bulk"), json!({ "n": n })).with_priority((n % 7) as i16))
        .collect();
    let out = store.task_enqueue_many(tasks).await.unwrap();
    assert_eq!(out.len(), 12_000);
    for (n, e) in out.iter().enumerate().step_by(997) {
        let row = db.task_row(e.id.0).await.unwrap();
        assert_eq!(
            row["payload"]["n"], n,
            "result {n} must be the id of input {n}"
        );
        assert_eq!(row["priority"], (n % 7) as i64);
    }
    assert!(out.windows(2).all(|w| w[0].id < w[1].id));
    db.drop_db().await.unwrap();
}

conformance!(failures_retry_with_the_types_backoff_then_dead_letter);
async fn failures_retry_with_the_types_backoff_then_dead_letter(db: StoreDb) {
    let store = db.store();
    store
        .policy_set(PolicySetParams {
            scope: PolicyScope::Type(tt("flaky")),
            patch: PolicyPatch {
                retry_base: Some(Some(Duration::from_secs(2))),
                retry_multiplier: Some(Some(3.0)),
                ..Default::default()
            },
            actor: Actor::operator("test"),
        })
        .await
        .unwrap();
    let id = db
        .insert_task(TaskSpec {
            attempt: 2,
            max_attempts: 3,
            ..TaskSpec::new("flaky", "running")
        })
        .await
        .unwrap();
    let out = store
        .task_complete(by_factory(
            id,
            1,
            Completion::Failed {
                error: TaskError::retryable("flaky", "try later"),
            },
        ))
        .await
        .unwrap();
    let CompleteOutcome::Applied {
        status: TaskStatus::RetryWait,
        retry_at: Some(retry_at),
    } = out
    else {
        panic!("{out:?}")
    };
    let now = store.db_now().await.unwrap();
    // attempt 2: base 2 s × 3^(2−1) = 6 s ± 20 %.
    let delay = (retry_at - now).num_milliseconds();
    assert!(
        (4_500..=7_300).contains(&delay),
        "retry delay {delay} ms outside 6 s ± 20 %"
    );
    let row = db.task_row(id).await.unwrap();
    assert_eq!(row["last_error"]["code"], "flaky");
    assert!(row["finished_at"].is_null());

    // Last attempt fails: dead, with the error kept.
    db.update_task(
        id,
        &[
            ("status", Val::from("running")),
            ("attempt", Val::Int(3)),
            ("lease_epoch", Val::Int(2)),
            ("lease_until", Val::At(30.0)),
            ("heartbeat_at", Val::At(0.0)),
        ],
    )
    .await
    .unwrap();
    let out = store
        .task_complete(by_factory(
            id,
            2,
            Completion::Failed {
                error: TaskError::retryable("flaky", "again"),
            },
        ))
        .await
        .unwrap();
    assert_eq!(
        out,
        CompleteOutcome::Applied {
            status: TaskStatus::Dead,
            retry_at: None
        }
    );

    // Not retryable: dead at once, attempts left or not.
    let perm = db
        .insert_task(TaskSpec::new("flaky", "running"))
        .await
        .unwrap();
    let out = store
        .task_complete(by_factory(
            perm,
            1,
            Completion::Failed {
                error: TaskError::permanent("invalid", "bad payload"),
            },
        ))
        .await
        .unwrap();
    assert_eq!(
        out,
        CompleteOutcome::Applied {
            status: TaskStatus::Dead,
            retry_at: None
        }
    );

    // A retry that would start after the deadline dead-letters as deadline_exceeded instead,
    // in the same words on every store (store/lifecycle.rs builds them; PostgreSQL's statement
    // used to print its times as `+00`, SQLite's code as `UTC`).
    let late = db
        .insert_task(TaskSpec {
            deadline_in_secs: Some(1.0),
            ..TaskSpec::new("flaky", "running")
        })
        .await
        .unwrap();
    let deadline = store
        .task_get(TaskId(late))
        .await
        .unwrap()
        .unwrap()
        .task
        .deadline_at
        .unwrap();
    let out = store
        .task_complete(by_factory(
            late,
            1,
            Completion::Failed {
                error: TaskError::retryable("x", "y"),
            },
        ))
        .await
        .unwrap();
    assert_eq!(
        out,
        CompleteOutcome::Applied {
            status: TaskStatus::Dead,
            retry_at: None
        }
    );
    let err = &db.task_row(late).await.unwrap()["last_error"];
    assert_eq!(err["code"], "deadline_exceeded");
    let message = err["message"].as_str().unwrap();
    let (head, tail) = message.split_once(" would start after ").unwrap();
    assert!(
        head.starts_with("the retry due at ") && head.ends_with(" UTC"),
        "{err}"
    );
    assert_eq!(tail, format!("the deadline {deadline}; last error x: y"));

    // Huge attempt numbers with a steep multiplier cap at the max delay instead of overflowing.
    store
        .policy_set(PolicySetParams {
            scope: PolicyScope::Type(tt("steep")),
            patch: PolicyPatch {
                retry_multiplier: Some(Some(100.0)),
                retry_max: Some(Some(Duration::from_secs(60))),
                ..Default::default()
            },
            actor: Actor::operator("test"),
        })
        .await
        .unwrap();
    for attempt in [1, 3, 200, 999] {
        let id = db
            .insert_task(TaskSpec {
                attempt,
                max_attempts: 1000,
                ..TaskSpec::new("steep", "running")
            })
            .await
            .unwrap();
        let out = store
            .task_complete(by_factory(
                id,
                1,
                Completion::Failed {
                    error: TaskError::retryable("s", "s"),
                },
            ))
            .await
            .unwrap();
        let CompleteOutcome::Applied {
            status: TaskStatus::RetryWait,
            retry_at: Some(at),
        } = out
        else {
            panic!("attempt {attempt}: {out:?}")
        };
        let delay = (at - store.db_now().await.unwrap()).num_milliseconds();
        assert!(
            delay <= 72_500,
            "attempt {attempt}: {delay} ms above max 60 s + 20 %"
        );
        let ok = db
            .insert_task(TaskSpec {
                attempt,
                max_attempts: 1000,
                ..TaskSpec::new("steep", "running")
            })
            .await
            .unwrap();
        let out = store
            .task_complete(by_factory(ok, 1, Completion::Succeeded { result: None }))
            .await
            .unwrap();
        assert!(
            matches!(
                out,
                CompleteOutcome::Applied {
                    status: TaskStatus::Succeeded,
                    ..
                }
            ),
            "attempt {attempt}"
        );
    }

    // A huge error message is stored truncated, never refused.
    let huge = db
        .insert_task(TaskSpec::new("flaky", "running"))
        .await
        .unwrap();
    let out = store
        .task_complete(by_factory(
            huge,
            1,
            Completion::Failed {
                error: TaskError::permanent("big", "x".repeat(5_000_000)),
            },
        ))
        .await
        .unwrap();
    assert!(matches!(out, CompleteOutcome::Applied { .. }));
    let msg = db.task_row(huge).await.unwrap()["last_error"]["message"]
        .as_str()
        .unwrap()
        .len();
    assert!(msg <= 8192);
    db.drop_db().await.unwrap();
}

conformance!(recovery_takes_only_leases_past_grace_and_bumps_the_epoch);
async fn recovery_takes_only_leases_past_grace_and_bumps_the_epoch(db: StoreDb) {
    let store = db.store();
    let healthy = db
        .insert_task(TaskSpec::new("rec", "running"))
        .await
        .unwrap();
    let within_grace = db
        .insert_task(TaskSpec::new("rec", "running"))
        .await
        .unwrap();
    db.backdate_lease(within_grace, 2.0).await.unwrap();
    let expired = db
        .insert_task(TaskSpec {
            lease_epoch: 7,
            ..TaskSpec::new("rec", "running")
        })
        .await
        .unwrap();
    db.backdate_lease(expired, 20.0).await.unwrap();
    let expired_until = store
        .task_get(TaskId(expired))
        .await
        .unwrap()
        .unwrap()
        .task
        .lease_until
        .unwrap();
    let exhausted = db
        .insert_task(TaskSpec {
            attempt: 5,
            max_attempts: 5,
            ..TaskSpec::new("rec", "running")
        })
        .await
        .unwrap();
    db.backdate_lease(exhausted, 20.0).await.unwrap();
    let cancelling = db
        .insert_task(TaskSpec::new("rec", "cancel_requested"))
        .await
        .unwrap();
    db.backdate_lease(cancelling, 20.0).await.unwrap();

    // Suspect: renewals overdue, listed but not taken.
    let suspects = store
        .lease_list_suspect(SuspectParams {
            threshold: Duration::from_secs(15),
            limit: 100,
        })
        .await
        .unwrap();
    let suspect_ids: Vec<i64> = suspects.iter().map(|s| s.id.0).collect();
    assert!(suspect_ids.contains(&within_grace) && suspect_ids.contains(&expired));
    assert!(!suspect_ids.contains(&healthy));

    let recovered = store
        .lease_recover_expired(RecoverParams {
            grace: Duration::from_secs(10),
            limit: 100,
            clock_bound: None,
        })
        .await
        .unwrap();
    let mut got: Vec<(i64, TaskStatus)> = recovered.iter().map(|r| (r.id.0, r.status)).collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            (expired, TaskStatus::RetryWait),
            (exhausted, TaskStatus::Dead),
            (cancelling, TaskStatus::Cancelled)
        ]
    );
    let r = recovered.iter().find(|r| r.id.0 == expired).unwrap();
    assert_eq!(
        (r.owner.as_str(), r.revoked_epoch),
        (FACTORY_OWNER, LeaseEpoch(7))
    );
    for untouched in [healthy, within_grace] {
        assert_eq!(db.task_status(untouched).await.unwrap(), "running");
    }
    let row = db.task_row(expired).await.unwrap();
    assert_eq!(row["lease_epoch"], 8, "recovery bumps the epoch");
    assert_eq!(row["last_error"]["code"], "lease_expired");
    assert_eq!(
        row["last_error"]["message"],
        format!(
            "lease held by {FACTORY_OWNER} (epoch 7) expired at {expired_until} and was not \
             renewed within the grace period"
        ),
        "the same words on every store"
    );
    assert_eq!(
        db.attempt_rows(expired).await.unwrap(),
        vec![(7, FACTORY_OWNER.to_string(), "lease_expired".to_string())]
    );
    assert_eq!(
        db.task_row(exhausted).await.unwrap()["last_error"]["code"],
        "lease_expired"
    );

    // Claimable at once (no backoff), with a new epoch; the old holder is fenced.
    let batch = store
        .task_claim(claim("rescuer#1", &["rec"], 10))
        .await
        .unwrap();
    assert_eq!(
        batch
            .tasks
            .iter()
            .map(|t| (t.id.0, t.lease_epoch.0))
            .collect::<Vec<_>>(),
        vec![(expired, 9)]
    );
    let late = store
        .task_complete(by_factory(
            expired,
            7,
            Completion::Succeeded { result: None },
        ))
        .await
        .unwrap();
    assert_eq!(late, CompleteOutcome::Fenced);
    // Running again: recovery has nothing more to take.
    assert!(
        store
            .lease_recover_expired(RecoverParams {
                grace: Duration::from_secs(10),
                limit: 100,
                clock_bound: None,
            })
            .await
            .unwrap()
            .is_empty()
    );
    db.drop_db().await.unwrap();
}

conformance!(
    recovery_racing_a_completing_holder_never_lets_both_win,
    worker_threads = 4
);
async fn recovery_racing_a_completing_holder_never_lets_both_win(db: StoreDb) {
    let store = db.store_with_pool(12).await.unwrap();
    let (mut holder_won, mut recovery_won) = (0, 0);
    for round in 0..150 {
        let id = db
            .insert_task(TaskSpec::new(format!("race.{round}"), "running"))
            .await
            .unwrap();
        db.backdate_lease(id, 30.0).await.unwrap();
        let complete = {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .task_complete(by_factory(id, 1, Completion::Succeeded { result: None }))
                    .await
                    .unwrap()
            })
        };
        let mut recoveries = Vec::new();
        for _ in 0..3 {
            let store = store.clone();
            recoveries.push(tokio::spawn(async move {
                store
                    .lease_recover_expired(RecoverParams {
                        grace: Duration::from_secs(5),
                        limit: 10,
                        clock_bound: None,
                    })
                    .await
                    .unwrap()
            }));
        }
        let completed = complete.await.unwrap();
        let mut recovered = 0;
        for r in recoveries {
            recovered += r.await.unwrap().iter().filter(|r| r.id.0 == id).count();
        }
        let status = db.task_status(id).await.unwrap();
        let attempts = db.attempt_rows(id).await.unwrap();
        match completed {
            CompleteOutcome::Applied {
                status: TaskStatus::Succeeded,
                ..
            } => {
                assert_eq!(recovered, 0, "round {round}: recovered a finished task");
                assert_eq!(status, "succeeded");
                assert_eq!(
                    attempts,
                    vec![(1, FACTORY_OWNER.to_string(), "succeeded".to_string())]
                );
                holder_won += 1;
            }
            CompleteOutcome::Fenced => {
                assert_eq!(
                    recovered, 1,
                    "round {round}: fenced but not recovered exactly once"
                );
                assert_eq!(status, "retry_wait");
                assert_eq!(
                    attempts,
                    vec![(1, FACTORY_OWNER.to_string(), "lease_expired".to_string())]
                );
                recovery_won += 1;
            }
            other => panic!("round {round}: {other:?}"),
        }
    }
    eprintln!("holder won {holder_won}, recovery won {recovery_won}");
    assert_eq!(holder_won + recovery_won, 150);
    db.drop_db().await.unwrap();
}

conformance!(waiting_tasks_past_their_deadline_are_dead_lettered);
async fn waiting_tasks_past_their_deadline_are_dead_lettered(db: StoreDb) {
    let store = db.store();
    let queued = db
        .insert_task(TaskSpec {
            deadline_in_secs: Some(-5.0),
            ..TaskSpec::new("dl", "queued")
        })
        .await
        .unwrap();
    let retrying = db
        .insert_task(TaskSpec {
            deadline_in_secs: Some(-5.0),
            ..TaskSpec::new("dl", "retry_wait")
        })
        .await
        .unwrap();
    let future = db
        .insert_task(TaskSpec {
            deadline_in_secs: Some(600.0),
            ..TaskSpec::new("dl", "queued")
        })
        .await
        .unwrap();
    let running = db
        .insert_task(TaskSpec {
            deadline_in_secs: Some(-5.0),
            ..TaskSpec::new("dl", "running")
        })
        .await
        .unwrap();
    let mut expired = store
        .task_expire_deadlines(ExpireDeadlinesParams { limit: 100 })
        .await
        .unwrap();
    expired.sort();
    assert_eq!(expired, vec![TaskId(queued), TaskId(retrying)]);
    let row = db.task_row(queued).await.unwrap();
    assert_eq!(
        (row["status"].as_str(), row["last_error"]["code"].as_str()),
        (Some("dead"), Some("deadline_exceeded"))
    );
    assert_eq!(db.task_status(future).await.unwrap(), "queued");
    assert_eq!(
        db.task_status(running).await.unwrap(),
        "running",
        "a running task's holder stops it"
    );
    db.drop_db().await.unwrap();
}

conformance!(operator_actions_are_audited_in_their_transaction_and_viewers_are_denied);
async fn operator_actions_are_audited_in_their_transaction_and_viewers_are_denied(db: StoreDb) {
    let store = db.store();
    let op = Actor::operator("alice");
    let viewer = Actor {
        name: "bob".into(),
        role: Role::Viewer,
    };
    let queued = db
        .insert_task(TaskSpec::new("ops", "queued"))
        .await
        .unwrap();
    let running = db
        .insert_task(TaskSpec {
            lease_epoch: 3,
            ..TaskSpec::new("ops", "running")
        })
        .await
        .unwrap();
    let done = db
        .insert_task(TaskSpec::new("ops", "succeeded"))
        .await
        .unwrap();

    let before = db.task_row(queued).await.unwrap();
    let denied = store
        .task_cancel(CancelParams {
            id: TaskId(queued),
            actor: viewer.clone(),
        })
        .await;
    assert!(
        matches!(denied, Err(StoreError::PermissionDenied { .. })),
        "{denied:?}"
    );
    assert_eq!(db.task_row(queued).await.unwrap(), before);

    assert_eq!(
        store
            .task_cancel(CancelParams {
                id: TaskId(queued),
                actor: op.clone()
            })
            .await
            .unwrap(),
        CancelOutcome::Cancelled
    );
    let requested = store
        .task_cancel(CancelParams {
            id: TaskId(running),
            actor: op.clone(),
        })
        .await
        .unwrap();
    assert_eq!(
        requested,
        CancelOutcome::Requested {
            owner: AgentId::new(FACTORY_OWNER).unwrap(),
            epoch: LeaseEpoch(3)
        }
    );
    assert!(matches!(
        store
            .task_cancel(CancelParams {
                id: TaskId(running),
                actor: op.clone()
            })
            .await
            .unwrap(),
        CancelOutcome::AlreadyRequested { .. }
    ));
    let refused = store
        .task_cancel(CancelParams {
            id: TaskId(done),
            actor: op.clone(),
        })
        .await;
    assert!(matches!(refused, Err(StoreError::Transition { .. })));
    assert_eq!(
        refused.unwrap_err().to_string(),
        format!("task {done}: cannot cancel a task that is succeeded")
    );
    assert!(matches!(
        store
            .task_cancel(CancelParams {
                id: TaskId(999_999),
                actor: op.clone()
            })
            .await,
        Err(StoreError::NotFound(_))
    ));
    store
        .task_requeue(RequeueParams {
            id: TaskId(done),
            actor: op.clone(),
        })
        .await
        .unwrap();
    assert!(matches!(
        store
            .task_requeue(RequeueParams {
                id: TaskId(done),
                actor: op.clone()
            })
            .await,
        Err(StoreError::Transition { .. })
    ));

    let audit = db.audit_rows().await.unwrap();
    let summary: Vec<(&str, &str, &str)> = audit
        .iter()
        .map(|(a, _, act, _, res)| (a.as_str(), act.as_str(), res.as_str()))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("bob", "cancel", "denied"),
            ("alice", "cancel", "applied"),
            ("alice", "cancel", "applied"),
            ("alice", "cancel", "noop"),
            ("alice", "cancel", "failed"),
            ("alice", "cancel", "failed"),
            ("alice", "requeue", "applied"),
            ("alice", "requeue", "failed"),
        ]
    );
    assert_eq!(audit[0].3, format!("task:{queued}"));
    db.drop_db().await.unwrap();
}

conformance!(dead_letters_requeue_by_type_code_and_time_with_a_dry_run);
async fn dead_letters_requeue_by_type_code_and_time_with_a_dry_run(db: StoreDb) {
    let store = db.store();
    let op = Actor::operator("alice");
    let dead = |ty: &str, code: &str| TaskSpec {
        last_error: Some(json!({"code": code, "message": "m", "retryable": false})),
        ..TaskSpec::new(ty, "dead")
    };
    for _ in 0..3 {
        db.insert_task(dead("mail", "smtp_down")).await.unwrap();
    }
    db.insert_task(dead("mail", "bad_address")).await.unwrap();
    db.insert_task(dead("sms", "smtp_down")).await.unwrap();
    let old = db.insert_task(dead("mail", "smtp_down")).await.unwrap();
    db.update_task(old, &[("finished_at", Val::At(-2.0 * 86_400.0))])
        .await
        .unwrap();
    db.insert_task(TaskSpec::new("mail", "succeeded"))
        .await
        .unwrap();

    let now = store.db_now().await.unwrap();
    let filter = DeadFilter {
        task_type: Some(tt("mail")),
        error_code: Some("smtp_down".into()),
        since: Some(now - chrono::Duration::hours(1)),
        until: None,
    };
    let params = |dry_run| RequeueDeadParams {
        filter: filter.clone(),
        dry_run,
        page: DeadIdsPage::default(),
        actor: op.clone(),
    };
    assert_eq!(
        store.task_requeue_dead(params(true)).await.unwrap().count,
        3
    );
    assert_eq!(
        db.count("SELECT count(*) FROM tasks WHERE status = 'dead'")
            .await
            .unwrap(),
        6,
        "a dry run changes nothing"
    );
    assert_eq!(
        store.task_requeue_dead(params(false)).await.unwrap().count,
        3
    );
    assert_eq!(
        db.count("SELECT count(*) FROM tasks WHERE status = 'queued' AND attempt = 0")
            .await
            .unwrap(),
        3
    );
    assert_eq!(
        store.task_requeue_dead(params(false)).await.unwrap().count,
        0
    );
    let all = RequeueDeadParams {
        filter: DeadFilter::default(),
        dry_run: false,
        page: DeadIdsPage::default(),
        actor: op.clone(),
    };
    assert_eq!(store.task_requeue_dead(all).await.unwrap().count, 3);
    assert_eq!(
        db.count("SELECT count(*) FROM tasks WHERE status = 'dead'")
            .await
            .unwrap(),
        0
    );

    let bad = RequeueDeadParams {
        filter: DeadFilter {
            since: Some(now),
            until: Some(now),
            ..Default::default()
        },
        dry_run: false,
        page: DeadIdsPage::default(),
        actor: op.clone(),
    };
    assert!(matches!(
        store.task_requeue_dead(bad).await,
        Err(StoreError::Invalid(_))
    ));
    let viewer = RequeueDeadParams {
        filter: DeadFilter::default(),
        dry_run: false,
        page: DeadIdsPage::default(),
        actor: Actor {
            name: "v".into(),
            role: Role::Viewer,
        },
    };
    assert!(matches!(
        store.task_requeue_dead(viewer).await,
        Err(StoreError::PermissionDenied { .. })
    ));
    let actions: Vec<String> = db
        .audit_rows()
        .await
        .unwrap()
        .into_iter()
        .map(|r| format!("{}:{}", r.2, r.4))
        .collect();
    assert_eq!(
        actions,
        vec![
            "requeue_dead_dry_run:noop",
            "requeue_dead:applied",
            "requeue_dead:noop",
            "requeue_dead:applied",
            "requeue_dead:denied"
        ]
    );
    db.drop_db().await.unwrap();
}

conformance!(
    a_repeat_that_waited_on_the_original_completion_reports_a_repeat,
    worker_threads = 2
);
async fn a_repeat_that_waited_on_the_original_completion_reports_a_repeat(db: StoreDb) {
    let store = db.store();
    let id = db
        .insert_task(TaskSpec {
            lease_epoch: 2,
            ..TaskSpec::new("lost-reply", "running")
        })
        .await
        .unwrap();
    // The original completion, still in flight: it holds the row lock (on SQLite, the write
    // lock).
    let mut original = db.begin_write().await.unwrap();
    original.lock_tasks(&[id]).await.unwrap();
    let repeat = {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .task_complete(by_factory(id, 2, Completion::Succeeded { result: None }))
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !repeat.is_finished(),
        "the repeat must wait on the original's row lock"
    );
    original
        .update(
            Rows::Task(id),
            &[
                ("status", Val::from("succeeded")),
                ("lease_until", Val::Null),
                ("finished_at", Val::At(0.0)),
            ],
        )
        .await
        .unwrap();
    original
        .insert_attempt(id, 2, 1, FACTORY_OWNER, "succeeded")
        .await
        .unwrap();
    original.commit().await.unwrap();
    assert_eq!(
        repeat.await.unwrap(),
        CompleteOutcome::Repeated {
            status: TaskStatus::Succeeded
        }
    );
    db.drop_db().await.unwrap();
}

conformance!(
    a_completion_that_waited_on_a_row_decides_from_its_newest_version,
    worker_threads = 2
);
/// A completion reads each row once, in the statement that changes it: a row another
/// transaction changed while the completion waited on it is decided from its newest version.
async fn a_completion_that_waited_on_a_row_decides_from_its_newest_version(db: StoreDb) {
    let store = db.store();
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(
            db.insert_task(TaskSpec::new("raced", "running"))
                .await
                .unwrap(),
        );
    }
    let (cancelled, recovered, untouched) = (ids[0], ids[1], ids[2]);
    // Another transaction asks to cancel the first and recovers the second (new epoch), and
    // holds both rows (on SQLite, the write lock) while the completion arrives.
    let mut other = db.begin_write().await.unwrap();
    other
        .update(
            Rows::Task(cancelled),
            &[("status", Val::from("cancel_requested"))],
        )
        .await
        .unwrap();
    other
        .update(
            Rows::Task(recovered),
            &[
                ("status", Val::from("queued")),
                ("lease_epoch", Val::Int(2)),
                ("lease_until", Val::Null),
            ],
        )
        .await
        .unwrap();
    let batch = vec![
        by_factory(
            cancelled,
            1,
            Completion::Failed {
                error: TaskError::retryable("flaky", "try again"),
            },
        ),
        by_factory(recovered, 1, Completion::Succeeded { result: None }),
        by_factory(untouched, 1, Completion::Succeeded { result: None }),
    ];
    let completion = {
        let store = store.clone();
        tokio::spawn(async move { store.task_complete_many(batch).await.unwrap() })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !completion.is_finished(),
        "the completion must wait for the rows the other transaction holds"
    );
    other.commit().await.unwrap();
    let outcomes = completion.await.unwrap();
    // The retryable failure met a cancel request: cancelled, not retried.
    assert!(
        matches!(
            outcomes[0],
            CompleteOutcome::Applied {
                status: TaskStatus::Cancelled,
                retry_at: None
            }
        ),
        "{:?}",
        outcomes[0]
    );
    // The recovered row belongs to a newer epoch: fenced, and left as recovery made it.
    assert_eq!(outcomes[1], CompleteOutcome::Fenced);
    assert!(matches!(
        outcomes[2],
        CompleteOutcome::Applied {
            status: TaskStatus::Succeeded,
            ..
        }
    ));
    assert_eq!(db.task_status(cancelled).await.unwrap(), "cancelled");
    assert_eq!(db.task_status(recovered).await.unwrap(), "queued");
    let row = db.task_row(recovered).await.unwrap();
    assert_eq!(row["lease_epoch"], 2);
    assert!(row["finished_at"].is_null());
    assert_eq!(
        db.attempt_rows(cancelled).await.unwrap(),
        vec![(1, FACTORY_OWNER.to_string(), "failed".to_string())]
    );
    assert!(db.attempt_rows(recovered).await.unwrap().is_empty());
    assert_eq!(
        db.attempt_rows(untouched).await.unwrap(),
        vec![(1, FACTORY_OWNER.to_string(), "succeeded".to_string())]
    );
    db.drop_db().await.unwrap();
}

conformance!(deleting_tasks_deletes_their_attempts);
async fn deleting_tasks_deletes_their_attempts(db: StoreDb) {
    let store = db.store();
    let keep = db
        .insert_task(TaskSpec::new("del", "running"))
        .await
        .unwrap();
    let gone = db
        .insert_task(TaskSpec::new("del", "running"))
        .await
        .unwrap();
    for id in [keep, gone] {
        store
            .task_complete(by_factory(id, 1, Completion::Succeeded { result: None }))
            .await
            .unwrap();
    }
    db.execute("DELETE FROM tasks WHERE id = $1", &[Arg::Int(gone)])
        .await
        .unwrap();
    assert!(db.attempt_rows(gone).await.unwrap().is_empty());
    assert_eq!(db.attempt_rows(keep).await.unwrap().len(), 1);
    db.drop_db().await.unwrap();
}

conformance!(requeued_tasks_keep_every_attempt_in_their_history);
async fn requeued_tasks_keep_every_attempt_in_their_history(db: StoreDb) {
    // PostgreSQL records the attempt that finishes a task in the task row itself (no attempt
    // row, issue 22); a requeue must write it out before resetting the row. Three lives of one
    // task: succeeded, requeued; failed for good (dead), requeued from the dead letters;
    // succeeded.
    let store = db.store();
    let op = Actor::operator("alice");
    let id = store
        .task_enqueue(NewTask::new(tt("hist"), json!({})))
        .await
        .unwrap()
        .id
        .0;
    let run = |owner: &'static str, completion: Completion| {
        let store = db.store();
        async move {
            let batch = store.task_claim(claim(owner, &["hist"], 1)).await.unwrap();
            let [task] = batch.tasks.as_slice() else {
                panic!("{batch:?}")
            };
            let out = store
                .task_complete(CompleteParams {
                    key: key(task.id.0, owner, task.lease_epoch.0),
                    completion,
                })
                .await
                .unwrap();
            assert!(matches!(out, CompleteOutcome::Applied { .. }), "{out:?}");
        }
    };
    run("h#1", Completion::Succeeded { result: None }).await;
    store
        .task_requeue(RequeueParams {
            id: TaskId(id),
            actor: op.clone(),
        })
        .await
        .unwrap();
    run(
        "h#2",
        Completion::Failed {
            error: TaskError::permanent("boom", "gave up"),
        },
    )
    .await;
    let all_dead = RequeueDeadParams {
        filter: DeadFilter {
            task_type: Some(tt("hist")),
            error_code: None,
            since: None,
            until: None,
        },
        dry_run: false,
        page: DeadIdsPage::default(),
        actor: op.clone(),
    };
    assert_eq!(store.task_requeue_dead(all_dead).await.unwrap().count, 1);
    run("h#3", Completion::Succeeded { result: None }).await;

    let detail = store.task_get(TaskId(id)).await.unwrap().unwrap();
    let seen: Vec<_> = detail
        .attempts
        .iter()
        .map(|a| {
            (
                a.epoch.0,
                a.attempt,
                a.agent.as_str().to_owned(),
                a.outcome.as_str(),
                a.error.as_ref().map(|e| e.code.clone()),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            (1, 1, "h#1".to_owned(), "succeeded", None),
            (2, 1, "h#2".to_owned(), "failed", Some("boom".to_owned())),
            (3, 1, "h#3".to_owned(), "succeeded", None),
        ]
    );
    for a in &detail.attempts {
        assert!(a.started_at <= a.finished_at, "{a:?}");
    }
    if db.is_postgres() {
        // Only the attempts the task outlived have rows of their own.
        assert_eq!(
            db.count("SELECT count(*) FROM task_attempt_rows")
                .await
                .unwrap(),
            2
        );
    }
    db.drop_db().await.unwrap();
}

conformance!(audit_rows_written_in_the_callers_transaction_commit_with_it);
async fn audit_rows_written_in_the_callers_transaction_commit_with_it(db: StoreDb) {
    use leasehold_shared::domain::AuditResult;
    use leasehold_shared::store::AuditEntry;
    let entry = AuditEntry {
        actor: Actor::operator("app"),
        action: "refund".into(),
        target: "order:7".into(),
        params: Some(json!({"amount": 12})),
        result: AuditResult::Applied,
        detail: None,
    };
    let mut tx = db.begin_write().await.unwrap();
    tx.audit_write(&entry).await.unwrap();
    tx.rollback().await.unwrap();
    assert!(db.audit_rows().await.unwrap().is_empty());
    let mut tx = db.begin_write().await.unwrap();
    tx.audit_write(&entry).await.unwrap();
    tx.commit().await.unwrap();
    let rows = db
        .store()
        .audit_list(leasehold_shared::store::AuditListParams {
            before_id: None,
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (
            rows[0].actor.as_str(),
            rows[0].action.as_str(),
            rows[0].result.as_str()
        ),
        ("app", "refund", "applied")
    );
    assert_eq!(rows[0].params, Some(json!({"amount": 12})));
    db.drop_db().await.unwrap();
}

// PostgreSQL only: SQLite has no TRUNCATE (a DELETE of every row fires the delete trigger,
// covered above).
#[tokio::test]
async fn truncating_tasks_truncates_their_attempts() {
    let db = TestDb::new().await.unwrap();
    let store = db.store();
    let id = insert_task(&db.pool, TaskSpec::new("trunc", "running"))
        .await
        .unwrap();
    store
        .task_complete(by_factory(id, 1, Completion::Succeeded { result: None }))
        .await
        .unwrap();
    sqlx::query("TRUNCATE tasks")
        .execute(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM task_attempts")
            .await
            .unwrap(),
        0
    );
    db.drop_db().await.unwrap();
}

conformance!(suspect_leases_are_the_oldest_overdue_renewals_and_bounded);
async fn suspect_leases_are_the_oldest_overdue_renewals_and_bounded(db: StoreDb) {
    let store = db.store();
    let healthy = db
        .insert_task(TaskSpec::new("sus", "running"))
        .await
        .unwrap();
    // Renewals 60, 50 and 40 seconds old (backdate_lease puts heartbeat_at 30 s before
    // lease_until), and one overdue task that has already finished.
    let mut overdue = Vec::new();
    for secs_ago in [30.0, 20.0, 10.0] {
        let id = db
            .insert_task(TaskSpec::new("sus", "running"))
            .await
            .unwrap();
        db.backdate_lease(id, secs_ago).await.unwrap();
        overdue.push(id);
    }
    let finished = db
        .insert_task(TaskSpec::new("sus", "succeeded"))
        .await
        .unwrap();
    db.backdate_lease(finished, 30.0).await.unwrap();

    let list = |threshold: u64, limit: u32| {
        store.lease_list_suspect(SuspectParams {
            threshold: Duration::from_secs(threshold),
            limit,
        })
    };
    let all = list(5, 100).await.unwrap();
    let ids: Vec<i64> = all.iter().map(|s| s.id.0).collect();
    assert_eq!(
        ids, overdue,
        "oldest renewal first, healthy and finished left out"
    );
    for s in &all {
        assert_eq!(s.owner.as_str(), FACTORY_OWNER);
        assert!(s.now - s.heartbeat_at >= chrono::TimeDelta::seconds(39));
        assert!(s.lease_until < s.now);
    }
    assert!(!ids.contains(&healthy) && !ids.contains(&finished));

    // The limit keeps the oldest.
    let two: Vec<i64> = list(5, 2).await.unwrap().iter().map(|s| s.id.0).collect();
    assert_eq!(two, overdue[..2].to_vec());
    // The threshold is in database time: 45 s leaves out the one renewed 40 s ago.
    let older: Vec<i64> = list(45, 100)
        .await
        .unwrap()
        .iter()
        .map(|s| s.id.0)
        .collect();
    assert_eq!(older, overdue[..2].to_vec());

    // Bad input is refused.
    for limit in [0, leasehold_shared::store::MAX_SUSPECT_LIMIT + 1] {
        assert!(matches!(list(5, limit).await, Err(StoreError::Invalid(_))));
    }
}
