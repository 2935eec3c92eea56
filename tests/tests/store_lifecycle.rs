//! Store conformance: enqueue (plain SQL, idempotency keys, bulk, in the caller's transaction),
//! retries with backoff, recovery after grace and its race with a completing holder, suspect
//! leases, deadlines, operator requeue and its audit trail.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use leasehold_shared::domain::{PolicyPatch, PolicyScope, Role, TaskStatus};
use leasehold_shared::store::postgres::{NOTIFY_CHANNEL, enqueue};
use leasehold_shared::store::{
    CancelOutcome, CancelParams, CompleteOutcome, Completion, DeadFilter, ExpireDeadlinesParams,
    NewTask, PolicySetParams, RecoverParams, RequeueDeadParams, RequeueParams, SuspectParams,
};
use leasehold_shared::{Actor, AgentId, LeaseEpoch, Store, StoreError, TaskError, TaskId};
use leasehold_tests::factory::FACTORY_OWNER;
use leasehold_tests::helpers::{by_factory, claim, tt};
use leasehold_tests::{
    TaskSpec, TestDb, attempt_rows, audit_rows, backdate_lease, count, insert_task, task_row,
    task_status,
};
use serde_json::json;

#[tokio::test]
async fn a_plain_sql_insert_is_a_complete_enqueue_and_wakes_listeners_once_per_transaction() {
    let db = TestDb::new().await.unwrap();
    let store = db.store();
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
    drop(listener);
    db.drop_db().await.unwrap();
}

#[tokio::test]
async fn enqueue_in_the_callers_transaction_exists_only_if_it_commits() {
    let db = TestDb::new().await.unwrap();
    let limits = Default::default();
    let task = NewTask::new(tt("txn"), json!({"order": 1}));
    let mut tx = db.pool.begin().await.unwrap();
    let rolled = enqueue::task_enqueue(&mut *tx, &task, &limits)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM tasks").await.unwrap(),
        0
    );
    let mut tx = db.pool.begin().await.unwrap();
    let kept = enqueue::task_enqueue(&mut *tx, &task, &limits)
        .await
        .unwrap();
    enqueue::task_enqueue_many(&mut *tx, &[task.clone(), task.clone()], &limits)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_ne!(rolled.id, kept.id);
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM tasks").await.unwrap(),
        3
    );
    db.drop_db().await.unwrap();
}

#[tokio::test]
async fn idempotency_keys_return_the_existing_task() {
    let db = TestDb::new().await.unwrap();
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
        task_row(&db.pool, first.id.0).await.unwrap()["priority"],
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
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM tasks").await.unwrap(),
        4
    );
    db.drop_db().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_enqueues_of_one_key_create_one_task() {
    let db = TestDb::new().await.unwrap();
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

#[tokio::test]
async fn bulk_enqueue_of_twelve_thousand_in_one_call_keeps_input_order() {
    let db = TestDb::new().await.unwrap();
    let store = db.store();
    let tasks: Vec<NewTask> = (0..12_000)
        .map(|n| NewTask::new(tt("bulk"), json!({ "n": n })).with_priority((n % 7) as i16))
        .collect();
    let out = store.task_enqueue_many(tasks).await.unwrap();
    assert_eq!(out.len(), 12_000);
    for (n, e) in out.iter().enumerate().step_by(997) {
        let row = task_row(&db.pool, e.id.0).await.unwrap();
        assert_eq!(
            row["payload"]["n"], n,
            "result {n} must be the id of input {n}"
        );
        assert_eq!(row["priority"], (n % 7) as i64);
    }
    assert!(out.windows(2).all(|w| w[0].id < w[1].id));
    db.drop_db().await.unwrap();
}

#[tokio::test]
async fn failures_retry_with_the_types_backoff_then_dead_letter() {
    let db = TestDb::new().await.unwrap();
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
    let id = insert_task(
        &db.pool,
        TaskSpec {
            attempt: 2,
            max_attempts: 3,
            ..TaskSpec::new("flaky", "running")
        },
    )
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
    let row = task_row(&db.pool, id).await.unwrap();
    assert_eq!(row["last_error"]["code"], "flaky");
    assert!(row["finished_at"].is_null());

    // Last attempt fails: dead, with the error kept.
    sqlx::query("UPDATE tasks SET status = 'running', attempt = 3, lease_epoch = 2, lease_until = now() + interval '30 s', heartbeat_at = now() WHERE id = $1")
        .bind(id)
        .execute(&db.pool)
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
    let perm = insert_task(&db.pool, TaskSpec::new("flaky", "running"))
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

    // A retry that would start after the deadline dead-letters as deadline_exceeded instead.
    let late = insert_task(
        &db.pool,
        TaskSpec {
            deadline_in_secs: Some(1.0),
            ..TaskSpec::new("flaky", "running")
        },
    )
    .await
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
    let err = &task_row(&db.pool, late).await.unwrap()["last_error"];
    assert_eq!(err["code"], "deadline_exceeded");
    assert!(
        err["message"].as_str().unwrap().contains("last error x: y"),
        "{err}"
    );

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
        let id = insert_task(
            &db.pool,
            TaskSpec {
                attempt,
                max_attempts: 1000,
                ..TaskSpec::new("steep", "running")
            },
        )
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
        let ok = insert_task(
            &db.pool,
            TaskSpec {
                attempt,
                max_attempts: 1000,
                ..TaskSpec::new("steep", "running")
            },
        )
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
    let huge = insert_task(&db.pool, TaskSpec::new("flaky", "running"))
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
    let msg = task_row(&db.pool, huge).await.unwrap()["last_error"]["message"]
        .as_str()
        .unwrap()
        .len();
    assert!(msg <= 8192);
    db.drop_db().await.unwrap();
}

#[tokio::test]
async fn recovery_takes_only_leases_past_grace_and_bumps_the_epoch() {
    let db = TestDb::new().await.unwrap();
    let store = db.store();
    let healthy = insert_task(&db.pool, TaskSpec::new("rec", "running"))
        .await
        .unwrap();
    let within_grace = insert_task(&db.pool, TaskSpec::new("rec", "running"))
        .await
        .unwrap();
    backdate_lease(&db.pool, within_grace, 2.0).await.unwrap();
    let expired = insert_task(
        &db.pool,
        TaskSpec {
            lease_epoch: 7,
            ..TaskSpec::new("rec", "running")
        },
    )
    .await
    .unwrap();
    backdate_lease(&db.pool, expired, 20.0).await.unwrap();
    let exhausted = insert_task(
        &db.pool,
        TaskSpec {
            attempt: 5,
            max_attempts: 5,
            ..TaskSpec::new("rec", "running")
        },
    )
    .await
    .unwrap();
    backdate_lease(&db.pool, exhausted, 20.0).await.unwrap();
    let cancelling = insert_task(&db.pool, TaskSpec::new("rec", "cancel_requested"))
        .await
        .unwrap();
    backdate_lease(&db.pool, cancelling, 20.0).await.unwrap();

    // Suspect: renewals overdue, listed but not taken.
    let suspects = store
        .lease_list_suspect(SuspectParams {
            threshold: Duration::from_secs(15),
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
        assert_eq!(task_status(&db.pool, untouched).await.unwrap(), "running");
    }
    let row = task_row(&db.pool, expired).await.unwrap();
    assert_eq!(row["lease_epoch"], 8, "recovery bumps the epoch");
    assert_eq!(row["last_error"]["code"], "lease_expired");
    assert_eq!(
        attempt_rows(&db.pool, expired).await.unwrap(),
        vec![(7, FACTORY_OWNER.to_string(), "lease_expired".to_string())]
    );
    assert_eq!(
        task_row(&db.pool, exhausted).await.unwrap()["last_error"]["code"],
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
                limit: 100
            })
            .await
            .unwrap()
            .is_empty()
    );
    db.drop_db().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recovery_racing_a_completing_holder_never_lets_both_win() {
    let db = TestDb::new().await.unwrap();
    let pool = db.pool_with(12).await.unwrap();
    let store =
        leasehold_shared::store::postgres::PgStore::from_pool(pool.clone(), Default::default());
    let (mut holder_won, mut recovery_won) = (0, 0);
    for round in 0..150 {
        let id = insert_task(&pool, TaskSpec::new(format!("race.{round}"), "running"))
            .await
            .unwrap();
        backdate_lease(&pool, id, 30.0).await.unwrap();
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
        let status = task_status(&pool, id).await.unwrap();
        let attempts = attempt_rows(&pool, id).await.unwrap();
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
    pool.close().await;
    db.drop_db().await.unwrap();
}

#[tokio::test]
async fn waiting_tasks_past_their_deadline_are_dead_lettered() {
    let db = TestDb::new().await.unwrap();
    let store = db.store();
    let queued = insert_task(
        &db.pool,
        TaskSpec {
            deadline_in_secs: Some(-5.0),
            ..TaskSpec::new("dl", "queued")
        },
    )
    .await
    .unwrap();
    let retrying = insert_task(
        &db.pool,
        TaskSpec {
            deadline_in_secs: Some(-5.0),
            ..TaskSpec::new("dl", "retry_wait")
        },
    )
    .await
    .unwrap();
    let future = insert_task(
        &db.pool,
        TaskSpec {
            deadline_in_secs: Some(600.0),
            ..TaskSpec::new("dl", "queued")
        },
    )
    .await
    .unwrap();
    let running = insert_task(
        &db.pool,
        TaskSpec {
            deadline_in_secs: Some(-5.0),
            ..TaskSpec::new("dl", "running")
        },
    )
    .await
    .unwrap();
    let mut expired = store
        .task_expire_deadlines(ExpireDeadlinesParams { limit: 100 })
        .await
        .unwrap();
    expired.sort();
    assert_eq!(expired, vec![TaskId(queued), TaskId(retrying)]);
    let row = task_row(&db.pool, queued).await.unwrap();
    assert_eq!(
        (row["status"].as_str(), row["last_error"]["code"].as_str()),
        (Some("dead"), Some("deadline_exceeded"))
    );
    assert_eq!(task_status(&db.pool, future).await.unwrap(), "queued");
    assert_eq!(
        task_status(&db.pool, running).await.unwrap(),
        "running",
        "a running task's holder stops it"
    );
    db.drop_db().await.unwrap();
}

#[tokio::test]
async fn operator_actions_are_audited_in_their_transaction_and_viewers_are_denied() {
    let db = TestDb::new().await.unwrap();
    let store = db.store();
    let op = Actor::operator("alice");
    let viewer = Actor {
        name: "bob".into(),
        role: Role::Viewer,
    };
    let queued = insert_task(&db.pool, TaskSpec::new("ops", "queued"))
        .await
        .unwrap();
    let running = insert_task(
        &db.pool,
        TaskSpec {
            lease_epoch: 3,
            ..TaskSpec::new("ops", "running")
        },
    )
    .await
    .unwrap();
    let done = insert_task(&db.pool, TaskSpec::new("ops", "succeeded"))
        .await
        .unwrap();

    let before = task_row(&db.pool, queued).await.unwrap();
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
    assert_eq!(task_row(&db.pool, queued).await.unwrap(), before);

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

    let audit = audit_rows(&db.pool).await.unwrap();
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

#[tokio::test]
async fn dead_letters_requeue_by_type_code_and_time_with_a_dry_run() {
    let db = TestDb::new().await.unwrap();
    let store = db.store();
    let op = Actor::operator("alice");
    let dead = |ty: &str, code: &str| TaskSpec {
        last_error: Some(json!({"code": code, "message": "m", "retryable": false})),
        ..TaskSpec::new(ty, "dead")
    };
    for _ in 0..3 {
        insert_task(&db.pool, dead("mail", "smtp_down"))
            .await
            .unwrap();
    }
    insert_task(&db.pool, dead("mail", "bad_address"))
        .await
        .unwrap();
    insert_task(&db.pool, dead("sms", "smtp_down"))
        .await
        .unwrap();
    let old = insert_task(&db.pool, dead("mail", "smtp_down"))
        .await
        .unwrap();
    sqlx::query("UPDATE tasks SET finished_at = now() - interval '2 days' WHERE id = $1")
        .bind(old)
        .execute(&db.pool)
        .await
        .unwrap();
    insert_task(&db.pool, TaskSpec::new("mail", "succeeded"))
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
        actor: op.clone(),
    };
    assert_eq!(store.task_requeue_dead(params(true)).await.unwrap(), 3);
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM tasks WHERE status = 'dead'")
            .await
            .unwrap(),
        6,
        "a dry run changes nothing"
    );
    assert_eq!(store.task_requeue_dead(params(false)).await.unwrap(), 3);
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM tasks WHERE status = 'queued' AND attempt = 0"
        )
        .await
        .unwrap(),
        3
    );
    assert_eq!(store.task_requeue_dead(params(false)).await.unwrap(), 0);
    let all = RequeueDeadParams {
        filter: DeadFilter::default(),
        dry_run: false,
        actor: op.clone(),
    };
    assert_eq!(store.task_requeue_dead(all).await.unwrap(), 3);
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM tasks WHERE status = 'dead'")
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
        actor: op.clone(),
    };
    assert!(matches!(
        store.task_requeue_dead(bad).await,
        Err(StoreError::Invalid(_))
    ));
    let viewer = RequeueDeadParams {
        filter: DeadFilter::default(),
        dry_run: false,
        actor: Actor {
            name: "v".into(),
            role: Role::Viewer,
        },
    };
    assert!(matches!(
        store.task_requeue_dead(viewer).await,
        Err(StoreError::PermissionDenied { .. })
    ));
    let actions: Vec<String> = audit_rows(&db.pool)
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeat_that_waited_on_the_original_completion_reports_a_repeat() {
    let db = TestDb::new().await.unwrap();
    let store = db.store();
    let id = insert_task(
        &db.pool,
        TaskSpec {
            lease_epoch: 2,
            ..TaskSpec::new("lost-reply", "running")
        },
    )
    .await
    .unwrap();
    // The original completion, still in flight: it holds the row lock.
    let mut original = db.pool.begin().await.unwrap();
    sqlx::query("SELECT id FROM tasks WHERE id = $1 FOR UPDATE")
        .bind(id)
        .execute(&mut *original)
        .await
        .unwrap();
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
    sqlx::query("UPDATE tasks SET status = 'succeeded', lease_until = NULL, finished_at = now() WHERE id = $1")
        .bind(id)
        .execute(&mut *original)
        .await
        .unwrap();
    sqlx::query("INSERT INTO task_attempts (task_id, epoch, attempt, agent, started_at, outcome) VALUES ($1, 2, 1, $2, now(), 'succeeded')")
        .bind(id)
        .bind(FACTORY_OWNER)
        .execute(&mut *original)
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

/// A completion reads each row once, in the statement that changes it: a row another
/// transaction changed while the completion waited on it is decided from its newest version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_that_waited_on_a_row_decides_from_its_newest_version() {
    let db = TestDb::new().await.unwrap();
    let store = db.store();
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(
            insert_task(&db.pool, TaskSpec::new("raced", "running"))
                .await
                .unwrap(),
        );
    }
    let (cancelled, recovered, untouched) = (ids[0], ids[1], ids[2]);
    // Another transaction asks to cancel the first and recovers the second (new epoch), and
    // holds both rows while the completion arrives.
    let mut other = db.pool.begin().await.unwrap();
    sqlx::query("UPDATE tasks SET status = 'cancel_requested' WHERE id = $1")
        .bind(cancelled)
        .execute(&mut *other)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE tasks SET status = 'queued', lease_epoch = 2, lease_until = NULL WHERE id = $1",
    )
    .bind(recovered)
    .execute(&mut *other)
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
    assert_eq!(task_status(&db.pool, cancelled).await.unwrap(), "cancelled");
    assert_eq!(task_status(&db.pool, recovered).await.unwrap(), "queued");
    let row = task_row(&db.pool, recovered).await.unwrap();
    assert_eq!(row["lease_epoch"], 2);
    assert!(row["finished_at"].is_null());
    assert_eq!(
        attempt_rows(&db.pool, cancelled).await.unwrap(),
        vec![(1, FACTORY_OWNER.to_string(), "failed".to_string())]
    );
    assert!(attempt_rows(&db.pool, recovered).await.unwrap().is_empty());
    assert_eq!(
        attempt_rows(&db.pool, untouched).await.unwrap(),
        vec![(1, FACTORY_OWNER.to_string(), "succeeded".to_string())]
    );
    db.drop_db().await.unwrap();
}

#[tokio::test]
async fn deleting_tasks_deletes_their_attempts() {
    let db = TestDb::new().await.unwrap();
    let store = db.store();
    let keep = insert_task(&db.pool, TaskSpec::new("del", "running"))
        .await
        .unwrap();
    let gone = insert_task(&db.pool, TaskSpec::new("del", "running"))
        .await
        .unwrap();
    for id in [keep, gone] {
        store
            .task_complete(by_factory(id, 1, Completion::Succeeded { result: None }))
            .await
            .unwrap();
    }
    sqlx::query("DELETE FROM tasks WHERE id = $1")
        .bind(gone)
        .execute(&db.pool)
        .await
        .unwrap();
    assert!(attempt_rows(&db.pool, gone).await.unwrap().is_empty());
    assert_eq!(attempt_rows(&db.pool, keep).await.unwrap().len(), 1);
    db.drop_db().await.unwrap();
}

#[tokio::test]
async fn audit_rows_written_in_the_callers_transaction_commit_with_it() {
    use leasehold_shared::store::postgres::operator::audit_write;
    use leasehold_shared::store::{AuditEntry, AuditResult};
    let db = TestDb::new().await.unwrap();
    let entry = AuditEntry {
        actor: Actor::operator("app"),
        action: "refund".into(),
        target: "order:7".into(),
        params: Some(json!({"amount": 12})),
        result: AuditResult::Applied,
        detail: None,
    };
    let mut tx = db.pool.begin().await.unwrap();
    audit_write(&mut *tx, &entry).await.unwrap();
    tx.rollback().await.unwrap();
    assert!(audit_rows(&db.pool).await.unwrap().is_empty());
    let mut tx = db.pool.begin().await.unwrap();
    audit_write(&mut *tx, &entry).await.unwrap();
    tx.commit().await.unwrap();
    let rows = db
        .store()
        .audit_list(leasehold_shared::store::AuditListParams {
            before_id: None,
            limit: 10,
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
