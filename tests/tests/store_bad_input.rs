//! Store conformance: bad input of every kind gets a clear, typed error and writes nothing —
//! malformed type names, oversized payloads (store limit and database CHECK), invalid JSON,
//! negative and absurd numbers — and bad database state is reported, never a panic; on
//! PostgreSQL and SQLite alike.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use leasehold_shared::domain::validate::{HARD_MAX_PAYLOAD_BYTES, parse_payload};
use leasehold_shared::domain::{PolicyPatch, PolicyScope};
use leasehold_shared::store::{
    ClaimParams, CompleteParams, Completion, NewTask, PolicySetParams, RenewParams, TaskListParams,
};
use leasehold_shared::{
    Actor, AgentId, InputLimits, LeaseKey, StoreError, TaskType, ValidationError,
};
use leasehold_tests::factory::FACTORY_OWNER;
use leasehold_tests::helpers::tt;
use leasehold_tests::{Arg, Sql, StoreDb, TaskSpec, conformance};
use serde_json::json;

async fn nothing_written(db: &StoreDb) {
    assert_eq!(
        db.count("SELECT count(*) FROM tasks").await.unwrap(),
        0,
        "bad input wrote a task"
    );
}

/// An insert of a task whose payload is given as JSON text (`$2`), parsed by the database.
const JSON_TEXT_INSERT: Sql = Sql::each(
    "INSERT INTO tasks (task_type, payload) VALUES ($1, $2::jsonb)",
    "INSERT INTO tasks (task_type, payload) VALUES ($1, $2)",
);

fn invalid(result: Result<impl std::fmt::Debug, StoreError>) -> ValidationError {
    match result {
        Err(StoreError::Invalid(e)) => e,
        other => panic!("expected a validation error, got {other:?}"),
    }
}

conformance!(malformed_type_names_are_refused_by_the_type_and_by_the_database);
async fn malformed_type_names_are_refused_by_the_type_and_by_the_database(db: StoreDb) {
    for bad in [
        "",
        "Upper",
        "with space",
        "-lead",
        "ünï",
        &"x".repeat(65),
        "semi;colon",
        "new\nline",
    ] {
        let err = TaskType::new(bad).unwrap_err();
        assert!(err.to_string().starts_with("invalid task type"), "{err}");
        let raw = db
            .execute(
                "INSERT INTO tasks (task_type) VALUES ($1)",
                &[Arg::from(bad)],
            )
            .await;
        assert!(raw.is_err(), "the database accepted type {bad:?}");
    }
    assert!(serde_json::from_value::<TaskType>(json!("Bad Type")).is_err());
    nothing_written(&db).await;
    db.drop_db().await.unwrap();
}

conformance!(oversized_payloads_are_refused_by_the_store_and_by_the_database);
async fn oversized_payloads_are_refused_by_the_store_and_by_the_database(db: StoreDb) {
    let tight = db
        .store_with_limits(InputLimits::with_max_payload_bytes(1024).unwrap())
        .await
        .unwrap();
    let big = json!({ "blob": "x".repeat(2000) });
    let err = invalid(tight.task_enqueue(NewTask::new(tt("p"), big.clone())).await);
    assert!(
        matches!(err, ValidationError::PayloadTooLarge { limit: 1024, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("above the limit of 1024 bytes"));

    // Default limit, 1 MiB: one byte over is refused; a bulk call with one bad task writes none.
    let store = db.store();
    let over = json!("y".repeat(HARD_MAX_PAYLOAD_BYTES));
    invalid(
        store
            .task_enqueue(NewTask::new(tt("p"), over.clone()))
            .await,
    );
    let mixed = vec![
        NewTask::new(tt("p"), json!({})),
        NewTask::new(tt("p"), over.clone()),
        NewTask::new(tt("p"), json!({})),
    ];
    invalid(store.task_enqueue_many(mixed).await);

    // The database's CHECK holds even for writers that bypass the store.
    let raw = db
        .execute_err(
            JSON_TEXT_INSERT,
            &[Arg::from("p"), Arg::Text(over.to_string())],
        )
        .await
        .unwrap();
    assert!(raw.to_string().contains("tasks_payload_size"), "{raw}");
    nothing_written(&db).await;
    db.drop_db().await.unwrap();
}

conformance!(every_column_rule_is_checked_when_its_value_is_written);
/// Each column's own rule (format, size, range) is checked whenever a value is written to it,
/// by an insert or by an update, and the refusal names the rule; the row stays as it was.
async fn every_column_rule_is_checked_when_its_value_is_written(db: StoreDb) {
    let id = db
        .insert_task(TaskSpec::new("rules", "queued"))
        .await
        .unwrap();
    let before = db.task_row(id).await.unwrap();
    let cast = if db.is_postgres() { "::jsonb" } else { "" };
    let big = |n: usize| format!("'{{\"x\": \"{}\"}}'{cast}", "x".repeat(n));
    let cases: Vec<(&str, String, &str)> = vec![
        ("task_type", "'Bad Type'".into(), "tasks_type_format"),
        ("status", "'bogus'".into(), "tasks_status_known"),
        ("payload", big(1_048_576), "tasks_payload_size"),
        ("timeout_ms", "0".into(), "tasks_timeout_range"),
        ("attempt", "-1".into(), "tasks_attempt_range"),
        ("max_attempts", "0".into(), "tasks_max_attempts_range"),
        ("lease_epoch", "-1".into(), "tasks_lease_epoch_range"),
        ("lease_owner", "''".into(), "tasks_lease_owner_size"),
        ("idempotency_key", "''".into(), "tasks_idempotency_key_size"),
        ("progress", big(4096), "tasks_progress_size"),
        ("result", big(1_048_576), "tasks_result_size"),
        ("last_error", big(65_536), "tasks_last_error_size"),
    ];
    for (column, value, rule) in &cases {
        let insert = if *column == "task_type" {
            format!("INSERT INTO tasks (task_type) VALUES ({value})")
        } else {
            format!("INSERT INTO tasks (task_type, {column}) VALUES ('rules', {value})")
        };
        let update = format!("UPDATE tasks SET {column} = {value} WHERE id = {id}");
        for sql in [insert, update] {
            let err = db.execute_err(Sql::owned(sql.clone()), &[]).await.unwrap();
            // The database names the rule it enforced; the store refuses the input.
            let raw = err.to_string();
            let named = StoreError::db("test")(err);
            assert!(
                raw.contains(rule),
                "{column}: {sql:.120} broke {raw}, not {rule}"
            );
            assert!(
                matches!(&named, StoreError::Invalid(_)),
                "{column}: {sql:.120} gave {named}"
            );
        }
    }
    assert_eq!(db.task_row(id).await.unwrap(), before);
    assert_eq!(db.count("SELECT count(*) FROM tasks").await.unwrap(), 1);
    db.drop_db().await.unwrap();
}

conformance!(invalid_json_is_refused_before_and_at_the_database);
async fn invalid_json_is_refused_before_and_at_the_database(db: StoreDb) {
    for bad in [
        "{nope",
        "",
        "{\"a\":1",
        "[1,2",
        "nan",
        "{'single': 'quotes'}",
    ] {
        let err = parse_payload(bad, &InputLimits::default()).unwrap_err();
        assert!(
            matches!(err, ValidationError::PayloadNotJson { .. }),
            "{bad}: {err}"
        );
        let raw = db
            .execute(JSON_TEXT_INSERT, &[Arg::from("j"), Arg::from(bad)])
            .await;
        assert!(raw.is_err(), "the database accepted {bad:?}");
    }
    nothing_written(&db).await;
    db.drop_db().await.unwrap();
}

conformance!(negative_and_absurd_numbers_are_refused_and_change_nothing);
async fn negative_and_absurd_numbers_are_refused_and_change_nothing(db: StoreDb) {
    let store = db.store();
    let base = || NewTask::new(tt("n"), json!({}));
    let bad_tasks = [
        ("max_attempts", base().with_max_attempts(0)),
        ("max_attempts", base().with_max_attempts(-3)),
        ("max_attempts", base().with_max_attempts(1_000_001)),
        // Named in words as the user gave them, not as the column (`timeout_ms`).
        ("timeout out of range", base().with_timeout(Duration::ZERO)),
        (
            "timeout out of range",
            base().with_timeout(Duration::from_secs(8 * 24 * 3600)),
        ),
        (
            "delay out of range",
            base().with_delay(Duration::from_secs(400 * 24 * 3600)),
        ),
        (
            "run_at",
            base()
                .with_delay(Duration::from_secs(1))
                .with_run_at(chrono::Utc::now()),
        ),
        (
            "deadline",
            base()
                .with_run_at(chrono::Utc::now())
                .with_deadline(chrono::Utc::now() - chrono::Duration::hours(1)),
        ),
        ("idempotency_key", base().with_idempotency_key("")),
        (
            "idempotency_key",
            base().with_idempotency_key("k".repeat(300)),
        ),
    ];
    for (field, task) in bad_tasks {
        let err = invalid(store.task_enqueue(task).await);
        assert!(err.to_string().contains(field), "{field}: {err}");
    }
    nothing_written(&db).await;

    let owner = AgentId::new("n#1").unwrap();
    for (batch, ttl) in [(0, 30), (10_001, 30), (1, 0), (1, 8 * 24 * 3600)] {
        let params = ClaimParams {
            owner: owner.clone(),
            task_types: vec![tt("n")],
            batch,
            lease_ttl: Duration::from_secs(ttl),
        };
        invalid(store.task_claim(params).await);
    }
    invalid(
        store
            .lease_renew_many(RenewParams {
                owner: owner.clone(),
                leases: vec![],
                lease_ttl: Duration::ZERO,
                alive_for: None,
            })
            .await,
    );
    for limit in [0, 1001] {
        invalid(
            store
                .task_list(TaskListParams {
                    limit,
                    ..Default::default()
                })
                .await,
        );
    }
    invalid(
        store
            .task_list(TaskListParams {
                limit: 10,
                text: Some("a\u{1b}[2J".into()),
                ..Default::default()
            })
            .await,
    );

    // Policies: absurd values are refused and the row and audit log stay as they were.
    let before = store.policy_list().await.unwrap();
    let audits = db.audit_rows().await.unwrap().len();
    let absurd = [
        PolicyPatch {
            max_concurrency: Some(Some(5_000_000)),
            ..Default::default()
        },
        PolicyPatch {
            retry_jitter: Some(Some(-0.1)),
            ..Default::default()
        },
        PolicyPatch {
            retry_multiplier: Some(Some(f64::INFINITY)),
            ..Default::default()
        },
        PolicyPatch {
            timeout: Some(None),
            ..Default::default()
        },
    ];
    for patch in absurd {
        invalid(
            store
                .policy_set(PolicySetParams {
                    scope: PolicyScope::Global,
                    patch,
                    actor: Actor::operator("o"),
                })
                .await,
        );
    }
    assert_eq!(store.policy_list().await.unwrap(), before);
    assert_eq!(db.audit_rows().await.unwrap().len(), audits);

    // A result over the limit is refused and the lease stays held.
    let id = db.insert_task(TaskSpec::new("n", "running")).await.unwrap();
    let row = db.task_row(id).await.unwrap();
    let key = LeaseKey {
        id: leasehold_shared::TaskId(id),
        owner: AgentId::new(FACTORY_OWNER).unwrap(),
        epoch: leasehold_shared::LeaseEpoch(1),
    };
    let huge = Completion::Succeeded {
        result: Some(json!("r".repeat(2 * 1024 * 1024))),
    };
    invalid(
        store
            .task_complete(CompleteParams {
                key,
                completion: huge,
            })
            .await,
    );
    assert_eq!(db.task_row(id).await.unwrap(), row);
    db.drop_db().await.unwrap();
}

conformance!(bad_database_state_is_reported_not_panicked_on);
async fn bad_database_state_is_reported_not_panicked_on(db: StoreDb) {
    let store = db.store();
    let id = db
        .insert_task(TaskSpec::new("corrupt", "queued"))
        .await
        .unwrap();
    db.execute(
        Sql::each(
            "UPDATE tasks SET progress = '\"not counters\"'::jsonb, last_error = '[1,2]'::jsonb \
             WHERE id = $1",
            "UPDATE tasks SET progress = '\"not counters\"', last_error = '[1,2]' WHERE id = $1",
        ),
        &[Arg::Int(id)],
    )
    .await
    .unwrap();
    let err = store
        .task_get(leasehold_shared::TaskId(id))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
    assert!(
        err.to_string().starts_with("unreadable task progress"),
        "{err}"
    );
    // The database refuses states the state machine cannot produce.
    let no_lease = db
        .execute_err(
            "UPDATE tasks SET status = 'running' WHERE id = $1",
            &[Arg::Int(id)],
        )
        .await
        .unwrap();
    assert!(
        no_lease.to_string().contains("tasks_leased_has_lease"),
        "{no_lease}"
    );
    let unknown = db
        .execute_err(
            "UPDATE tasks SET status = 'paused' WHERE id = $1",
            &[Arg::Int(id)],
        )
        .await
        .unwrap();
    assert!(
        unknown.to_string().contains("tasks_status_known"),
        "{unknown}"
    );
    db.drop_db().await.unwrap();
}
