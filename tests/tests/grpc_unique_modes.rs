#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Unique enqueues over gRPC (issue 24): `EnqueueRequest.on_conflict` (10) and
//! `unique_for_ms` (11) against a real agent and database; the reply's `outcome`,
//! `existing_status` and `released_from`; bad wire values refused as INVALID_ARGUMENT naming
//! the field, with nothing written (rows and audit log compared with before).

use leasehold_proto::v1 as pb;
use leasehold_tests::calls::grpc::{INVALID, refusal, start, stop};
use leasehold_tests::grpc::connect;
use leasehold_tests::{TaskSpec, TestDb, insert_task};
use sqlx::PgPool;

fn req(key: &str, payload: &str) -> pb::EnqueueRequest {
    pb::EnqueueRequest {
        // A type the agent does not run: rows stay as the calls leave them.
        task_type: "report.build".into(),
        payload_json: payload.into(),
        idempotency_key: key.into(),
        ..Default::default()
    }
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap()
}

async fn digest(pool: &PgPool) -> (String, String) {
    leasehold_tests::inspect::state_digest(pool, &[])
        .await
        .unwrap()
}

async fn audit_count(pool: &PgPool) -> i64 {
    leasehold_tests::count(pool, "SELECT count(*) FROM audit_log")
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_modes_travel_the_wire_and_bad_values_store_nothing() {
    let db = TestDb::new().await.unwrap();
    let (agent, addr) = start(&db, "uq-grpc", &[]).await.unwrap();
    let mut c = connect(&addr).await.unwrap();

    // Created, then replaced: the reply says so, with the status found.
    let first = c
        .enqueue(pb::EnqueueRequest {
            delay_ms: 3_600_000,
            ..req("g1", r#"{"v":1}"#)
        })
        .await
        .unwrap()
        .into_inner();
    assert!(first.created);
    assert_eq!(first.outcome, pb::EnqueueOutcome::Created as i32);
    assert_eq!(first.existing_status, pb::TaskStatus::Unspecified as i32);
    let replaced = c
        .enqueue(pb::EnqueueRequest {
            on_conflict: pb::OnConflict::Replace as i32,
            priority: 4,
            ..req("g1", r#"{"v":2}"#)
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(replaced.id, first.id);
    assert!(!replaced.created);
    assert_eq!(replaced.outcome, pb::EnqueueOutcome::Replaced as i32);
    assert_eq!(replaced.existing_status, pb::TaskStatus::Queued as i32);
    let t = replaced.task.unwrap();
    assert_eq!(
        (json(&t.payload_json), t.priority),
        (serde_json::json!({"v": 2}), 4)
    );

    // Debounce: the start moves to now + delay_ms (the reply's task shows it).
    let debounced = c
        .enqueue(pb::EnqueueRequest {
            on_conflict: pb::OnConflict::Debounce as i32,
            delay_ms: 90_000,
            ..req("g1", r#"{"v":3}"#)
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(debounced.outcome, pb::EnqueueOutcome::Debounced as i32);
    let t = debounced.task.unwrap();
    let pushed = t.available_at_ms - t.updated_at_ms;
    assert!((89_000..=91_000).contains(&pushed), "{pushed} ms");
    assert_eq!(t.priority, 4, "debounce keeps the priority");

    // ON_CONFLICT_UNSPECIFIED is skip.
    let skipped = c
        .enqueue(req("g1", r#"{"v":4}"#))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(skipped.outcome, pb::EnqueueOutcome::Existing as i32);
    assert_eq!(
        json(&skipped.task.unwrap().payload_json),
        serde_json::json!({"v": 3})
    );

    // A running task is never replaced; the reply says running.
    let mut running = TaskSpec::new("report.build", "running");
    running.idempotency_key = Some("g-run".into());
    let run_id = insert_task(&db.pool, running).await.unwrap();
    let exists = c
        .enqueue(pb::EnqueueRequest {
            on_conflict: pb::OnConflict::Replace as i32,
            ..req("g-run", r#"{"v":9}"#)
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(exists.id, run_id);
    assert_eq!(exists.outcome, pb::EnqueueOutcome::Existing as i32);
    assert_eq!(exists.existing_status, pb::TaskStatus::Running as i32);

    // unique_for_ms over a holder finished two hours ago (backdated): a new task, and the reply
    // names the old one, which still shows its key.
    let mut done = TaskSpec::new("report.build", "succeeded");
    done.idempotency_key = Some("g-old".into());
    let old = insert_task(&db.pool, done).await.unwrap();
    sqlx::query("UPDATE tasks SET finished_at = now() - interval '2 hours' WHERE id = $1")
        .bind(old)
        .execute(&db.pool)
        .await
        .unwrap();
    let fresh = c
        .enqueue(pb::EnqueueRequest {
            unique_for_ms: 3_600_000,
            ..req("g-old", "{}")
        })
        .await
        .unwrap()
        .into_inner();
    assert!(fresh.created);
    assert_ne!(fresh.id, old);
    assert_eq!(fresh.outcome, pb::EnqueueOutcome::Created as i32);
    assert_eq!(fresh.released_from, old);
    let shown = c
        .get_task(pb::GetTaskRequest { id: old })
        .await
        .unwrap()
        .into_inner()
        .task
        .unwrap();
    assert_eq!(shown.idempotency_key, "g-old");

    // Bad wire values: INVALID_ARGUMENT naming the field; rows and audit log unchanged.
    let before = digest(&db.pool).await;
    let audited = audit_count(&db.pool).await;
    let bad = [
        (
            pb::EnqueueRequest {
                on_conflict: 7,
                ..req("g1", "{}")
            },
            "on_conflict",
        ),
        (
            pb::EnqueueRequest {
                on_conflict: -1,
                ..req("g1", "{}")
            },
            "on_conflict",
        ),
        (
            pb::EnqueueRequest {
                on_conflict: pb::OnConflict::Replace as i32,
                ..req("", "{}")
            },
            "on_conflict",
        ),
        (
            pb::EnqueueRequest {
                on_conflict: pb::OnConflict::Debounce as i32,
                ..req("", "{}")
            },
            "on_conflict",
        ),
        (
            pb::EnqueueRequest {
                unique_for_ms: 1000,
                ..req("", "{}")
            },
            "unique_for_ms",
        ),
        (
            pb::EnqueueRequest {
                unique_for_ms: -5,
                ..req("g1", "{}")
            },
            "unique_for_ms",
        ),
        (
            pb::EnqueueRequest {
                unique_for_ms: 31_536_000_001,
                ..req("g1", "{}")
            },
            "unique_for_ms",
        ),
        (
            pb::EnqueueRequest {
                unique_for_ms: i64::MAX,
                on_conflict: pb::OnConflict::Replace as i32,
                ..req("g1", "{}")
            },
            "unique_for_ms",
        ),
    ];
    for (r, field) in bad {
        let what = format!("{r:?}");
        let answer = c.enqueue(r).await;
        if let Err(e) = refusal(answer, INVALID, field) {
            panic!("{what}: {e}");
        }
    }
    assert_eq!(digest(&db.pool).await, before);
    assert_eq!(audit_count(&db.pool).await, audited);
    stop(agent).await.unwrap();
    db.drop_db().await.unwrap();
}
