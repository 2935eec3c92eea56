//! Store conformance: unique enqueues (issue 24). An enqueue whose idempotency key is held
//! skips (returns the task unchanged), replaces a waiting task's settings, or debounces it
//! (start pushed back, payload replaced); a running or finished task is never changed; with
//! `unique_for`, a holder finished at least that long ago (backdated `finished_at`, database
//! time) gives the key up — its row keeps it as history — and a new task is created. Under
//! concurrency one key never has two waiting tasks, and a replace racing a claim never changes
//! the claimed task. Bad input changes nothing — on PostgreSQL and SQLite alike.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use leasehold_shared::domain::OnConflict;
use leasehold_shared::store::{
    EnqueueAuditedParams, EnqueueOutcome, Enqueued, NewTask, StoreError,
};
use leasehold_shared::{Actor, InputLimits, TaskId, TaskStatus};
use leasehold_tests::helpers::{claim, tt};
use leasehold_tests::{Arg, StoreDb, TaskSpec, Val, conformance};
use serde_json::{Value, json};

fn task(key: &str, payload: Value) -> NewTask {
    NewTask::new(tt("uq.a"), payload).with_idempotency_key(key)
}

fn mode(key: &str, payload: Value, on_conflict: OnConflict) -> NewTask {
    task(key, payload).with_on_conflict(on_conflict)
}

async fn holders(db: &StoreDb, key: &str) -> i64 {
    db.fetch_int(
        "SELECT count(*) FROM tasks WHERE idempotency_key = $1",
        &[Arg::from(key)],
    )
    .await
    .unwrap()
}

async fn count_tasks(db: &StoreDb) -> i64 {
    db.count("SELECT count(*) FROM tasks").await.unwrap()
}

/// Inserts a task in `status` holding idempotency key `key`, payload `{"v": "old"}`.
async fn holder_in(db: &StoreDb, status: &'static str, key: &str) -> i64 {
    let mut spec = TaskSpec::new("uq.a", status).payload(json!({"v": "old"}));
    spec.idempotency_key = Some(key.into());
    db.insert_task(spec).await.unwrap()
}

conformance!(skip_returns_the_existing_task_unchanged_with_its_status);
/// Skip (the default, and SKIP asked for by name) returns the key's task with the status it
/// found, and changes nothing.
async fn skip_returns_the_existing_task_unchanged_with_its_status(db: StoreDb) {
    let store = db.store();
    let first = store
        .task_enqueue(task("k", json!({"v": 1})))
        .await
        .unwrap();
    assert_eq!(first.outcome, EnqueueOutcome::Created);
    assert!(first.created);
    let before = db.task_row(first.id.0).await.unwrap();
    for again in [
        task("k", json!({"v": 2})),
        mode("k", json!({"v": 3}), OnConflict::Skip),
    ] {
        let done = store.task_enqueue(again).await.unwrap();
        assert_eq!(done.id, first.id);
        assert!(!done.created);
        assert_eq!(done.outcome, EnqueueOutcome::Existing);
        assert_eq!(done.existing_status, Some(TaskStatus::Queued));
    }
    assert_eq!(db.task_row(first.id.0).await.unwrap(), before);
    db.drop_db().await.unwrap();
}

conformance!(replace_gives_a_waiting_task_every_setting_of_the_new_enqueue);
/// Replace on a queued task: payload, priority, run time, deadline, timeout, max attempts and
/// concurrency key are the new enqueue's; the id stays, `created` is false. A retry-waiting
/// task is replaced too and keeps its status and attempts.
async fn replace_gives_a_waiting_task_every_setting_of_the_new_enqueue(db: StoreDb) {
    let store = db.store();
    let first = store
        .task_enqueue(
            task("r", json!({"v": 1}))
                .with_delay(Duration::from_secs(3600))
                .with_priority(1)
                .with_max_attempts(9),
        )
        .await
        .unwrap();
    let now = store.db_now().await.unwrap();
    let deadline = now + chrono::Duration::hours(2);
    let done = store
        .task_enqueue(
            mode("r", json!({"v": 2}), OnConflict::Replace)
                .with_priority(5)
                .with_deadline(deadline)
                .with_timeout(Duration::from_secs(30))
                .with_max_attempts(3)
                .with_concurrency_key("acme"),
        )
        .await
        .unwrap();
    assert_eq!(
        (done.id, done.created, done.outcome, done.existing_status),
        (
            first.id,
            false,
            EnqueueOutcome::Replaced,
            Some(TaskStatus::Queued)
        )
    );
    let t = store.task_get(first.id).await.unwrap().unwrap().task;
    assert_eq!(t.payload, json!({"v": 2}));
    assert_eq!(t.priority, 5);
    assert_eq!(t.max_attempts, 3);
    assert_eq!(t.timeout_ms, Some(30_000));
    assert_eq!(t.concurrency_key.as_deref(), Some("acme"));
    assert_eq!(
        t.deadline_at.map(|d| d.timestamp_millis()),
        Some(deadline.timestamp_millis())
    );
    // Due now (no delay given), not in an hour.
    let after = store.db_now().await.unwrap();
    assert!(t.available_at <= after, "{} > {after}", t.available_at);
    assert_eq!(holders(&db, "r").await, 1);
    // It is claimable with its new settings at once.
    let batch = store.task_claim(claim("uq#1", &["uq.a"], 5)).await.unwrap();
    assert_eq!(batch.tasks.len(), 1);
    assert_eq!(batch.tasks[0].payload, json!({"v": 2}));

    let waiting = holder_in(&db, "retry_wait", "rw").await;
    let done = store
        .task_enqueue(mode("rw", json!({"v": "new"}), OnConflict::Replace).with_priority(-4))
        .await
        .unwrap();
    assert_eq!(done.id, TaskId(waiting));
    assert_eq!(done.outcome, EnqueueOutcome::Replaced);
    assert_eq!(done.existing_status, Some(TaskStatus::RetryWait));
    let t = store.task_get(TaskId(waiting)).await.unwrap().unwrap().task;
    assert_eq!(
        (t.status, t.attempt, t.priority, t.payload),
        (TaskStatus::RetryWait, 1, -4, json!({"v": "new"}))
    );
    db.drop_db().await.unwrap();
}

conformance!(debounce_pushes_the_start_back_and_takes_the_payload);
/// Debounce: `available_at = now() + delay` of the new enqueue (later or sooner than before:
/// the last event sets the timer), the new payload; priority, attempts and the rest stay.
async fn debounce_pushes_the_start_back_and_takes_the_payload(db: StoreDb) {
    let store = db.store();
    let first = store
        .task_enqueue(
            task("d", json!({"event": 1}))
                .with_delay(Duration::from_secs(10))
                .with_priority(7),
        )
        .await
        .unwrap();
    for (event, delay) in [(2, 60), (3, 5)] {
        let before = store.db_now().await.unwrap();
        let done = store
            .task_enqueue(
                mode("d", json!({"event": event}), OnConflict::Debounce)
                    .with_delay(Duration::from_secs(delay))
                    .with_priority(0)
                    .with_max_attempts(2),
            )
            .await
            .unwrap();
        let after = store.db_now().await.unwrap();
        assert_eq!(done.id, first.id);
        assert_eq!(done.outcome, EnqueueOutcome::Debounced);
        assert!(!done.created);
        let t = store.task_get(first.id).await.unwrap().unwrap().task;
        let delay = chrono::Duration::seconds(delay as i64);
        let slack = chrono::Duration::milliseconds(5);
        assert!(
            t.available_at >= before + delay - slack && t.available_at <= after + delay + slack,
            "available_at {} not within [{before}, {after}] + {delay}",
            t.available_at
        );
        assert_eq!(t.payload, json!({"event": event}));
        assert_eq!((t.priority, t.max_attempts), (7, 25));
    }
    assert_eq!(holders(&db, "d").await, 1);
    db.drop_db().await.unwrap();
}

conformance!(running_and_finished_tasks_are_never_replaced_or_debounced);
/// A task that is leased or finished is returned as it is, with its status: replace and
/// debounce change nothing in its row.
async fn running_and_finished_tasks_are_never_replaced_or_debounced(db: StoreDb) {
    let store = db.store();
    for status in [
        "running",
        "cancel_requested",
        "succeeded",
        "partially_succeeded",
        "cancelled",
        "dead",
    ] {
        let key = format!("busy-{status}");
        let id = holder_in(&db, status, &key).await;
        let before = db.task_row(id).await.unwrap();
        for m in [OnConflict::Replace, OnConflict::Debounce] {
            let done = store
                .task_enqueue(
                    mode(&key, json!({"v": "new"}), m)
                        .with_delay(Duration::from_secs(60))
                        .with_priority(9),
                )
                .await
                .unwrap();
            assert_eq!(done.id, TaskId(id), "{status} {m}");
            assert_eq!(done.outcome, EnqueueOutcome::Existing, "{status} {m}");
            assert_eq!(
                done.existing_status.map(|s| s.as_str()),
                Some(status),
                "{status} {m}"
            );
            assert_eq!(db.task_row(id).await.unwrap(), before, "{status} {m}");
        }
    }
    assert_eq!(count_tasks(&db).await, 6);
    db.drop_db().await.unwrap();
}

conformance!(unique_for_frees_the_key_of_a_task_finished_long_enough_ago);
/// With unique_for D: a holder finished more than D ago gives the key up (its row keeps it as
/// history: GetTask still shows it), and the enqueue creates a new task with the key; a holder
/// finished less than D ago, or unfinished, still blocks; without unique_for a finished holder
/// blocks however old.
async fn unique_for_frees_the_key_of_a_task_finished_long_enough_ago(db: StoreDb) {
    let store = db.store();
    let window = Duration::from_secs(1800);
    let old = holder_in(&db, "succeeded", "u").await;
    // Finished 10 minutes ago: inside the window, blocked.
    db.update_task(old, &[("finished_at", Val::At(-600.0))])
        .await
        .unwrap();
    let done = store
        .task_enqueue(task("u", json!({"v": 1})).with_unique_for(window))
        .await
        .unwrap();
    assert_eq!(
        (done.id, done.outcome, done.existing_status),
        (
            TaskId(old),
            EnqueueOutcome::Existing,
            Some(TaskStatus::Succeeded)
        )
    );
    // Finished an hour ago: without unique_for still blocked (keys of finished tasks stay
    // unique while their rows exist) ...
    db.update_task(old, &[("finished_at", Val::At(-3600.0))])
        .await
        .unwrap();
    let done = store
        .task_enqueue(task("u", json!({"v": 2})))
        .await
        .unwrap();
    assert_eq!(
        (done.id, done.outcome),
        (TaskId(old), EnqueueOutcome::Existing)
    );
    // ... and with it, the key moves to a new task.
    let fresh = store
        .task_enqueue(task("u", json!({"v": 3})).with_unique_for(window))
        .await
        .unwrap();
    assert!(fresh.created);
    assert_eq!(fresh.outcome, EnqueueOutcome::Created);
    assert_eq!(fresh.released_from, Some(TaskId(old)));
    assert_ne!(fresh.id, TaskId(old));
    assert_eq!(holders(&db, "u").await, 1);
    let history = db.task_row(old).await.unwrap();
    assert_eq!(history["idempotency_key"], Value::Null);
    assert_eq!(history["released_idempotency_key"], json!("u"));
    assert_eq!(history["status"], json!("succeeded"));
    let shown = store.task_get(TaskId(old)).await.unwrap().unwrap().task;
    assert_eq!(shown.idempotency_key.as_deref(), Some("u"));
    let new_task = store.task_get(fresh.id).await.unwrap().unwrap().task;
    assert_eq!(new_task.idempotency_key.as_deref(), Some("u"));
    assert_eq!(new_task.payload, json!({"v": 3}));

    // The new holder is waiting: unique_for does not free it, it is skipped or replaced.
    let again = store
        .task_enqueue(task("u", json!({"v": 4})).with_unique_for(window))
        .await
        .unwrap();
    assert_eq!(
        (again.id, again.outcome),
        (fresh.id, EnqueueOutcome::Existing)
    );
    let replaced = store
        .task_enqueue(mode("u", json!({"v": 5}), OnConflict::Replace).with_unique_for(window))
        .await
        .unwrap();
    assert_eq!(
        (replaced.id, replaced.outcome),
        (fresh.id, EnqueueOutcome::Replaced)
    );
    // Finished recently with replace + unique_for: not changed, not freed.
    let recent = holder_in(&db, "dead", "u2").await;
    db.update_task(recent, &[("finished_at", Val::At(-5.0))])
        .await
        .unwrap();
    let before = db.task_row(recent).await.unwrap();
    let done = store
        .task_enqueue(
            mode("u2", json!({"v": 1}), OnConflict::Debounce)
                .with_unique_for(Duration::from_secs(10)),
        )
        .await
        .unwrap();
    assert_eq!(
        (done.id, done.outcome, done.existing_status),
        (
            TaskId(recent),
            EnqueueOutcome::Existing,
            Some(TaskStatus::Dead)
        )
    );
    assert_eq!(db.task_row(recent).await.unwrap(), before);
    // 4 seconds later in database time (backdated, no sleep), the key is free.
    db.update_task(recent, &[("finished_at", Val::At(-11.0))])
        .await
        .unwrap();
    let done = store
        .task_enqueue(
            mode("u2", json!({"v": 2}), OnConflict::Debounce)
                .with_unique_for(Duration::from_secs(10)),
        )
        .await
        .unwrap();
    assert_eq!(done.outcome, EnqueueOutcome::Created);
    assert_eq!(done.released_from, Some(TaskId(recent)));
    db.drop_db().await.unwrap();
}

conformance!(a_bulk_enqueue_settles_modes_in_input_order);
/// A bulk enqueue with modes goes task by task, in input order: a key created earlier in the
/// batch is replaced or debounced by a later entry; keyless tasks are created as always.
async fn a_bulk_enqueue_settles_modes_in_input_order(db: StoreDb) {
    let store = db.store();
    let out = store
        .task_enqueue_many(vec![
            NewTask::new(tt("uq.a"), json!({"n": 0})),
            task("b", json!({"n": 1})),
            mode("b", json!({"n": 2}), OnConflict::Replace).with_priority(3),
            NewTask::new(tt("uq.a"), json!({"n": 3})),
            mode("b", json!({"n": 4}), OnConflict::Debounce),
            task("b", json!({"n": 5})),
        ])
        .await
        .unwrap();
    let outcomes: Vec<EnqueueOutcome> = out.iter().map(|e| e.outcome).collect();
    use EnqueueOutcome as O;
    assert_eq!(
        outcomes,
        [
            O::Created,
            O::Created,
            O::Replaced,
            O::Created,
            O::Debounced,
            O::Existing
        ]
    );
    assert!(out[2..].iter().step_by(2).all(|e| e.id == out[1].id));
    let t = store.task_get(out[1].id).await.unwrap().unwrap().task;
    assert_eq!((t.payload, t.priority), (json!({"n": 4}), 3));
    assert_eq!(count_tasks(&db).await, 3);
    db.drop_db().await.unwrap();
}

conformance!(
    concurrent_enqueues_of_one_key_leave_one_waiting_task,
    worker_threads = 4
);
/// 24 concurrent enqueues of one key in each mode (and with unique_for over an expired
/// holder): exactly one task holds the key, exactly one enqueue created it, every other one
/// was told that task's id, and the key's task is waiting.
async fn concurrent_enqueues_of_one_key_leave_one_waiting_task(db: StoreDb) {
    const CALLERS: usize = 24;
    let store = db.store_with_pool(CALLERS as u32 + 2).await.unwrap();
    let cases: [(&str, OnConflict, bool); 5] = [
        ("race-skip", OnConflict::Skip, false),
        ("race-replace", OnConflict::Replace, false),
        ("race-debounce", OnConflict::Debounce, false),
        ("race-unique", OnConflict::Skip, true),
        ("race-unique-replace", OnConflict::Replace, true),
    ];
    for (key, m, unique) in cases {
        let old = if unique {
            let old = holder_in(&db, "succeeded", key).await;
            db.update_task(old, &[("finished_at", Val::At(-120.0))])
                .await
                .unwrap();
            Some(old)
        } else {
            None
        };
        let mut calls = tokio::task::JoinSet::new();
        for n in 0..CALLERS {
            let store = Arc::clone(&store);
            let mut t = mode(key, json!({ "n": n }), m);
            if unique {
                t = t.with_unique_for(Duration::from_secs(60));
            }
            calls.spawn(async move { store.task_enqueue(t).await });
        }
        let mut results: Vec<Enqueued> = Vec::new();
        while let Some(r) = calls.join_next().await {
            results.push(r.unwrap().unwrap());
        }
        let created: Vec<&Enqueued> = results.iter().filter(|e| e.created).collect();
        assert_eq!(created.len(), 1, "{key}: {results:?}");
        let id = created[0].id;
        assert_eq!(created[0].released_from, old.map(TaskId), "{key}");
        assert!(results.iter().all(|e| e.id == id), "{key}: {results:?}");
        let expected_other = match m {
            OnConflict::Skip => EnqueueOutcome::Existing,
            OnConflict::Replace => EnqueueOutcome::Replaced,
            OnConflict::Debounce => EnqueueOutcome::Debounced,
        };
        assert!(
            results
                .iter()
                .filter(|e| !e.created)
                .all(|e| e.outcome == expected_other),
            "{key}: {results:?}"
        );
        assert_eq!(holders(&db, key).await, 1, "{key}");
        assert_eq!(db.task_status(id.0).await.unwrap(), "queued", "{key}");
        let released = db
            .fetch_int(
                "SELECT count(*) FROM tasks WHERE released_idempotency_key = $1",
                &[Arg::from(key)],
            )
            .await
            .unwrap();
        assert_eq!(released, i64::from(unique), "{key}");
    }
    db.drop_db().await.unwrap();
}

conformance!(
    a_replace_racing_a_claim_never_changes_the_claimed_task,
    worker_threads = 4
);
/// A replace (and a debounce) racing a claim of the key's task, 40 times: when the claim
/// won, the replace says `existing` (running) and the row still has the payload the claimer
/// got; when the replace won, the claimer got the new payload. A claimed task's row never
/// differs from what its claimer runs.
async fn a_replace_racing_a_claim_never_changes_the_claimed_task(db: StoreDb) {
    const ROUNDS: usize = 48;
    let store = db.store_with_pool(6).await.unwrap();
    let mut seen = BTreeSet::new();
    for round in 0..ROUNDS {
        let m = if round % 2 == 0 {
            OnConflict::Replace
        } else {
            OnConflict::Debounce
        };
        let key = format!("claim-race-{round}");
        let original = store
            .task_enqueue(task(&key, json!({"v": "orig"})))
            .await
            .unwrap();
        // A head start of 0 to 1.5 ms, to the claim in even rounds and to the enqueue in odd
        // ones, so both orders (and overlaps) happen on a loaded machine too.
        let head_start = Duration::from_micros(500 * (round as u64 / 2 % 4));
        let (claim_after, enqueue_after) = if round % 2 == 0 {
            (Duration::ZERO, head_start)
        } else {
            (head_start, Duration::ZERO)
        };
        let claimer = {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                tokio::time::sleep(claim_after).await;
                store.task_claim(claim("racer#1", &["uq.a"], 1)).await
            })
        };
        let replacer = {
            let store = Arc::clone(&store);
            let t = mode(&key, json!({"v": "new"}), m);
            tokio::spawn(async move {
                tokio::time::sleep(enqueue_after).await;
                store.task_enqueue(t).await
            })
        };
        let batch = claimer.await.unwrap().unwrap();
        let replaced = replacer.await.unwrap().unwrap();
        assert_eq!(replaced.id, original.id);
        let row = store.task_get(original.id).await.unwrap().unwrap().task;
        match batch.tasks.first() {
            Some(claimed) => {
                assert_eq!(claimed.id, original.id);
                assert_eq!(row.status, TaskStatus::Running);
                // What the claimer runs is what the row holds.
                assert_eq!(claimed.payload, row.payload, "round {round}");
                if replaced.outcome == EnqueueOutcome::Existing {
                    assert_eq!(replaced.existing_status, Some(TaskStatus::Running));
                    assert_eq!(row.payload, json!({"v": "orig"}), "round {round}");
                    seen.insert("claim first");
                } else {
                    assert_eq!(row.payload, json!({"v": "new"}), "round {round}");
                    seen.insert("replace first");
                }
            }
            // The claim skipped the row (SKIP LOCKED) while the enqueue held it locked: the
            // enqueue changed it, and it waits for the next claim.
            None => {
                assert_ne!(replaced.outcome, EnqueueOutcome::Existing, "round {round}");
                assert_eq!(row.payload, json!({"v": "new"}), "round {round}");
                seen.insert("claim missed");
            }
        }
        // Finish it so the next round's claim finds only its own task.
        db.update_task(
            original.id.0,
            &[
                ("status", Val::from("cancelled")),
                ("finished_at", Val::At(0.0)),
                ("lease_until", Val::Null),
            ],
        )
        .await
        .unwrap();
    }
    eprintln!("orders seen: {seen:?}");
    // Positive control: the claim won at least once, so the rule under test was exercised.
    assert!(seen.contains("claim first"), "{seen:?}");
    db.drop_db().await.unwrap();
}

conformance!(bad_input_changes_nothing);
/// A mode or unique_for without an idempotency key, and unique_for outside 1 ms..=365 days or
/// not whole milliseconds, are refused before anything is written — one at a time, in a bulk,
/// and audited (no audit row either).
async fn bad_input_changes_nothing(db: StoreDb) {
    let store = db.store();
    let existing = store
        .task_enqueue(task("keep", json!({"v": 1})))
        .await
        .unwrap();
    let before = db.task_row(existing.id.0).await.unwrap();
    let keyless = || NewTask::new(tt("uq.a"), json!({}));
    let bad: Vec<(NewTask, &str)> = vec![
        (
            keyless().with_on_conflict(OnConflict::Replace),
            "on_conflict",
        ),
        (
            keyless().with_on_conflict(OnConflict::Debounce),
            "on_conflict",
        ),
        (
            keyless().with_unique_for(Duration::from_secs(1)),
            "unique_for",
        ),
        (
            mode("keep", json!({"v": 2}), OnConflict::Replace).with_unique_for(Duration::ZERO),
            "unique_for",
        ),
        (
            mode("keep", json!({"v": 2}), OnConflict::Replace)
                .with_unique_for(Duration::from_secs(365 * 86_400) + Duration::from_millis(1)),
            "unique_for",
        ),
        (
            mode("keep", json!({"v": 2}), OnConflict::Replace)
                .with_unique_for(Duration::from_micros(1500)),
            "unique_for",
        ),
    ];
    for (t, field) in bad {
        let err = store.task_enqueue(t.clone()).await.unwrap_err();
        assert!(
            matches!(&err, StoreError::Invalid(e) if e.to_string().starts_with(field)),
            "{err}"
        );
        let err = store
            .task_enqueue_many(vec![keyless(), t.clone()])
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Invalid(_)), "{err}");
        let err = store
            .task_enqueue_audited(EnqueueAuditedParams {
                task: t,
                actor: Actor::operator("ops"),
            })
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Invalid(_)), "{err}");
    }
    assert_eq!(count_tasks(&db).await, 1);
    assert_eq!(db.task_row(existing.id.0).await.unwrap(), before);
    assert!(db.audit_rows().await.unwrap().is_empty());
    db.drop_db().await.unwrap();
}

conformance!(audited_enqueues_record_what_the_mode_did);
/// An operator's enqueue writes one audit row per call: `applied` when it created, replaced or
/// debounced (the detail says which), `noop` when the key's task was left unchanged.
async fn audited_enqueues_record_what_the_mode_did(db: StoreDb) {
    let store = db.store();
    let audited = |t: NewTask| EnqueueAuditedParams {
        task: t,
        actor: Actor::operator("ops"),
    };
    let first = store
        .task_enqueue_audited(audited(task("a", json!({"v": 1}))))
        .await
        .unwrap();
    store
        .task_enqueue_audited(audited(mode("a", json!({"v": 2}), OnConflict::Replace)))
        .await
        .unwrap();
    store
        .task_enqueue_audited(audited(mode("a", json!({"v": 3}), OnConflict::Debounce)))
        .await
        .unwrap();
    db.update_task(
        first.id.0,
        &[
            ("status", Val::from("cancelled")),
            ("finished_at", Val::At(-90.0)),
        ],
    )
    .await
    .unwrap();
    store
        .task_enqueue_audited(audited(mode("a", json!({"v": 4}), OnConflict::Replace)))
        .await
        .unwrap();
    let fresh = store
        .task_enqueue_audited(audited(
            task("a", json!({"v": 5})).with_unique_for(Duration::from_secs(60)),
        ))
        .await
        .unwrap();
    let rows = db.audit_details().await.unwrap();
    let target = format!("task:{}", first.id);
    let got: Vec<(String, String, Option<String>)> = rows
        .iter()
        .map(|(t, r, _, d)| (t.clone(), r.clone(), d.clone()))
        .collect();
    assert_eq!(
        got,
        [
            (target.clone(), "applied".into(), None),
            (
                target.clone(),
                "applied".into(),
                Some(format!(
                    "idempotency key's waiting task {} replaced",
                    first.id
                ))
            ),
            (
                target.clone(),
                "applied".into(),
                Some(format!(
                    "idempotency key's waiting task {} debounced",
                    first.id
                ))
            ),
            (
                target.clone(),
                "noop".into(),
                Some(format!(
                    "idempotency key already used by task {}; nothing enqueued",
                    first.id
                ))
            ),
            (
                format!("task:{}", fresh.id),
                "applied".into(),
                Some(format!(
                    "idempotency key released by task {}, finished at least unique_for ago",
                    first.id
                ))
            ),
        ]
    );
    let params = rows[1].2.clone().unwrap();
    assert_eq!(params["on_conflict"], json!("replace"));
    let params = rows[4].2.clone().unwrap();
    assert_eq!(params["unique_for_ms"], json!(60_000));
    assert_eq!(rows[0].2.clone().unwrap().get("on_conflict"), None);
    db.drop_db().await.unwrap();
}

conformance!(a_replace_in_your_own_transaction_commits_or_rolls_back_with_it);
/// The application's enqueue in its own transaction (PostgreSQL `enqueue::task_enqueue` on
/// `&mut *tx`, SQLite `task_enqueue_on`) takes the keyed path inside it: rolled back, the
/// replace never happened; committed, it did.
async fn a_replace_in_your_own_transaction_commits_or_rolls_back_with_it(db: StoreDb) {
    let store = db.store();
    let limits = InputLimits::default();
    let first = store
        .task_enqueue(task("tx", json!({"v": 1})))
        .await
        .unwrap();
    let mut tx = db.begin_write().await.unwrap();
    let done = tx
        .enqueue(&mode("tx", json!({"v": 2}), OnConflict::Replace), &limits)
        .await
        .unwrap();
    assert_eq!(
        (done.id, done.outcome),
        (first.id, EnqueueOutcome::Replaced)
    );
    tx.rollback().await.unwrap();
    let t = store.task_get(first.id).await.unwrap().unwrap().task;
    assert_eq!(t.payload, json!({"v": 1}));
    let mut tx = db.begin_write().await.unwrap();
    tx.enqueue(&mode("tx", json!({"v": 3}), OnConflict::Debounce), &limits)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let t = store.task_get(first.id).await.unwrap().unwrap().task;
    assert_eq!(t.payload, json!({"v": 3}));
    db.drop_db().await.unwrap();
}

conformance!(
    concurrent_bulk_enqueues_with_modes_never_deadlock,
    worker_threads = 4
);
/// Bulk enqueues with modes sharing keys in opposite orders, run at once, 20 times: each
/// locks the keys in one order (tasks of one key keep their input order), so none deadlocks
/// or fails, and every key ends with one task holding the last payload written for it.
async fn concurrent_bulk_enqueues_with_modes_never_deadlock(db: StoreDb) {
    let store = db.store_with_pool(6).await.unwrap();
    let keys: Vec<String> = (0..8).map(|k| format!("bulk-{k}")).collect();
    for round in 0..20 {
        let batch = |rev: bool| -> Vec<NewTask> {
            let mut ks: Vec<&String> = keys.iter().collect();
            if rev {
                ks.reverse();
            }
            ks.into_iter()
                .map(|k| {
                    mode(
                        k,
                        json!({ "round": round, "rev": rev }),
                        OnConflict::Replace,
                    )
                })
                .collect()
        };
        let (a, b) = {
            let (sa, sb) = (Arc::clone(&store), Arc::clone(&store));
            let (ba, bb) = (batch(false), batch(true));
            tokio::join!(
                tokio::spawn(async move { sa.task_enqueue_many(ba).await }),
                tokio::spawn(async move { sb.task_enqueue_many(bb).await })
            )
        };
        let (a, b) = (a.unwrap().unwrap(), b.unwrap().unwrap());
        assert_eq!((a.len(), b.len()), (8, 8));
    }
    for k in &keys {
        assert_eq!(holders(&db, k).await, 1, "{k}");
    }
    db.drop_db().await.unwrap();
}
