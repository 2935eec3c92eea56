//! Store conformance: operator writes and their audit rows. An audited enqueue commits its task
//! and exactly one audit row together (or neither), an idempotent repeat is a `noop`, a viewer
//! is denied with a `denied` row and nothing enqueued, and invalid input writes nothing; a
//! policy change that changes nothing is audited as `noop` and every change reports the row
//! before and after it; audit rows written on their own list newest first in keyset pages —
//! on PostgreSQL and SQLite alike.
//! PostgreSQL only: the NOTIFY an audited enqueue sends.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use leasehold_shared::domain::AuditResult;
use leasehold_shared::domain::{Policy, PolicyPatch, PolicyScope, Role};
use leasehold_shared::store::postgres::NOTIFY_CHANNEL;
use leasehold_shared::store::{
    AuditEntry, AuditListParams, DeniedCalls, EnqueueAuditedParams, NewTask, PolicySetParams,
};
use leasehold_shared::{Actor, InputLimits, Store, StoreError};
use leasehold_tests::helpers::tt;
use leasehold_tests::{StoreDb, TestDb, conformance};
use serde_json::json;

fn audited(task: NewTask, actor: Actor) -> EnqueueAuditedParams {
    EnqueueAuditedParams { task, actor }
}

fn viewer(name: &str) -> Actor {
    Actor {
        name: name.into(),
        role: Role::Viewer,
    }
}

/// The digest an enqueue row records, recomputed as its doc says an operator would: SHA-256
/// of the payload's compact JSON text with sorted keys (`jq -jcS .payload | sha256sum`).
fn sha256(payload: &serde_json::Value) -> String {
    use sha2::{Digest, Sha256};
    let text = serde_json::to_string(payload).unwrap();
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

async fn tasks(db: &StoreDb) -> i64 {
    db.count("SELECT count(*) FROM tasks").await.unwrap()
}

conformance!(an_audited_enqueue_commits_its_task_with_one_audit_row);
async fn an_audited_enqueue_commits_its_task_with_one_audit_row(db: StoreDb) {
    let store = db.store();
    let task = NewTask::new(tt("mail"), json!({"to": "a@example.com"}))
        .with_priority(3)
        .with_idempotency_key("order-7");
    let done = store
        .task_enqueue_audited(audited(task, Actor::operator("alice")))
        .await
        .unwrap();
    assert!(done.created);
    let row = db.task_row(done.id.0).await.unwrap();
    assert_eq!(
        (&row["task_type"], &row["priority"], &row["status"]),
        (&json!("mail"), &json!(3), &json!("queued"))
    );

    let target = format!("task:{}", done.id);
    assert_eq!(
        db.audit_rows().await.unwrap(),
        [(
            "alice".to_string(),
            "operator".to_string(),
            "enqueue".to_string(),
            target.clone(),
            "applied".to_string()
        )]
    );
    let details = db.audit_details().await.unwrap();
    assert_eq!(
        details[0].2,
        Some(
            json!({"task_type": "mail", "priority": 3, "idempotency_key": "order-7",
            "payload_sha256": sha256(&json!({"to": "a@example.com"}))})
        )
    );
    db.drop_db().await.unwrap();
}

// PostgreSQL only: NOTIFY (SQLite has none; its agents poll).
#[tokio::test]
async fn an_audited_enqueue_wakes_agents() {
    let db = TestDb::new().await.unwrap();
    let store = db.store();
    let mut listener = sqlx::postgres::PgListener::connect_with(&db.pool)
        .await
        .unwrap();
    listener.listen(NOTIFY_CHANNEL).await.unwrap();
    let task = NewTask::new(tt("mail"), json!({"to": "a@example.com"}));
    let done = store
        .task_enqueue_audited(audited(task, Actor::operator("alice")))
        .await
        .unwrap();
    assert!(done.created);
    let notified = tokio::time::timeout(Duration::from_secs(5), listener.recv())
        .await
        .expect("an audited enqueue notifies like any other")
        .unwrap();
    assert_eq!(notified.channel(), NOTIFY_CHANNEL);
    drop(listener);
    db.drop_db().await.unwrap();
}

conformance!(an_idempotent_repeat_returns_the_task_and_is_audited_as_noop);
async fn an_idempotent_repeat_returns_the_task_and_is_audited_as_noop(db: StoreDb) {
    let store = db.store();
    let task = NewTask::new(tt("mail"), json!({})).with_idempotency_key("k1");
    let first = store
        .task_enqueue_audited(audited(task.clone(), Actor::operator("alice")))
        .await
        .unwrap();
    // The same key through the plain enqueue and again audited: one task.
    let plain = store.task_enqueue(task.clone()).await.unwrap();
    let again = store
        .task_enqueue_audited(audited(task.with_priority(9), Actor::operator("bob")))
        .await
        .unwrap();
    assert_eq!((plain.id, plain.created), (first.id, false));
    assert_eq!((again.id, again.created), (first.id, false));
    assert_eq!(tasks(&db).await, 1);
    assert_eq!(db.task_row(first.id.0).await.unwrap()["priority"], 0);

    let target = format!("task:{}", first.id);
    let details = db.audit_details().await.unwrap();
    assert_eq!(details.len(), 2, "{details:?}");
    assert_eq!((&details[0].0, details[0].1.as_str()), (&target, "applied"));
    assert_eq!((&details[1].0, details[1].1.as_str()), (&target, "noop"));
    assert_eq!(
        details[1].2,
        Some(
            json!({"task_type": "mail", "priority": 9, "idempotency_key": "k1",
            "payload_sha256": sha256(&json!({}))})
        )
    );
    assert_eq!(
        details[1].3.as_deref(),
        Some(
            format!(
                "idempotency key already used by task {}; nothing enqueued",
                first.id
            )
            .as_str()
        )
    );
    db.drop_db().await.unwrap();
}

conformance!(a_viewer_is_denied_with_a_denied_row_and_nothing_enqueued);
async fn a_viewer_is_denied_with_a_denied_row_and_nothing_enqueued(db: StoreDb) {
    let store = db.store();
    let denied = store
        .task_enqueue_audited(audited(
            NewTask::new(tt("mail"), json!({})),
            viewer("dashboard"),
        ))
        .await;
    assert!(
        matches!(&denied, Err(StoreError::PermissionDenied { action, actor })
            if action == "enqueue" && actor == "dashboard"),
        "{denied:?}"
    );
    assert_eq!(tasks(&db).await, 0);
    assert_eq!(
        db.audit_rows().await.unwrap(),
        [(
            "dashboard".to_string(),
            "viewer".to_string(),
            "enqueue".to_string(),
            "type:mail".to_string(),
            "denied".to_string()
        )]
    );
    assert_eq!(
        db.audit_details().await.unwrap()[0].2,
        Some(
            json!({"task_type": "mail", "priority": 0, "idempotency_key": null,
            "payload_sha256": sha256(&json!({}))})
        )
    );
    db.drop_db().await.unwrap();
}

conformance!(invalid_input_or_a_refused_audit_row_writes_nothing);
async fn invalid_input_or_a_refused_audit_row_writes_nothing(db: StoreDb) {
    let small = db
        .store_with_limits(InputLimits::with_max_payload_bytes(64).unwrap())
        .await
        .unwrap();
    // Refused by validation: no task and no audit row (bad input changes nothing).
    let too_large = small
        .task_enqueue_audited(audited(
            NewTask::new(tt("mail"), json!({"body": "x".repeat(100)})),
            Actor::operator("alice"),
        ))
        .await;
    assert!(
        matches!(too_large, Err(StoreError::Invalid(_))),
        "{too_large:?}"
    );
    let bad_attempts = small
        .task_enqueue_audited(audited(
            NewTask::new(tt("mail"), json!({})).with_max_attempts(0),
            viewer("dashboard"),
        ))
        .await;
    assert!(
        matches!(bad_attempts, Err(StoreError::Invalid(_))),
        "validation comes before authorization: {bad_attempts:?}"
    );
    assert_eq!(tasks(&db).await, 0);
    assert!(db.audit_rows().await.unwrap().is_empty());

    // The audit row is refused by the database after the task was inserted (an actor name
    // above 200 bytes): the task goes with it, because both are one transaction.
    let refused = small
        .task_enqueue_audited(audited(
            NewTask::new(tt("mail"), json!({})),
            Actor::operator("a".repeat(201)),
        ))
        .await;
    assert!(
        matches!(&refused, Err(StoreError::Invalid(e)) if e.to_string().contains("give 1 to 200 bytes")),
        "{refused:?}"
    );
    assert_eq!(
        tasks(&db).await,
        0,
        "the task rolled back with its audit row"
    );
    assert!(db.audit_rows().await.unwrap().is_empty());
    db.drop_db().await.unwrap();
}

conformance!(a_policy_change_that_changes_nothing_is_audited_as_noop);
async fn a_policy_change_that_changes_nothing_is_audited_as_noop(db: StoreDb) {
    let store = db.store();
    let set = |scope: PolicyScope, patch: PolicyPatch| PolicySetParams {
        scope,
        patch,
        actor: Actor::operator("alice"),
    };
    let pause = PolicyPatch {
        paused: Some(true),
        ..Default::default()
    };
    let ty = PolicyScope::Type(tt("mail"));
    store
        .policy_set(set(ty.clone(), pause.clone()))
        .await
        .unwrap();
    store.policy_set(set(ty.clone(), pause)).await.unwrap();
    // A type without a row, "changed" to what it inherits already.
    store
        .policy_set(set(
            PolicyScope::Type(tt("fresh")),
            PolicyPatch {
                paused: Some(false),
                max_concurrency: Some(None),
                ..Default::default()
            },
        ))
        .await
        .unwrap();
    let results: Vec<(String, String)> = db
        .audit_details()
        .await
        .unwrap()
        .into_iter()
        .map(|(target, result, _, _)| (target, result))
        .collect();
    assert_eq!(
        results,
        [
            ("policy:mail".to_string(), "applied".to_string()),
            ("policy:mail".to_string(), "noop".to_string()),
            ("policy:fresh".to_string(), "noop".to_string()),
        ]
    );
    db.drop_db().await.unwrap();
}

conformance!(a_policy_change_reports_the_row_before_and_after_it);
async fn a_policy_change_reports_the_row_before_and_after_it(db: StoreDb) {
    let store = db.store();
    let scope = PolicyScope::Type(tt("mail"));
    let change = |patch: PolicyPatch| PolicySetParams {
        scope: scope.clone(),
        patch,
        actor: Actor::operator("alice"),
    };
    let first = store
        .policy_change(change(PolicyPatch {
            max_concurrency: Some(Some(3)),
            ..Default::default()
        }))
        .await
        .unwrap();
    assert_eq!(
        first.before,
        Policy::inherit(scope.clone()),
        "a type without a row inherits everything"
    );
    assert_eq!(
        first.after,
        Policy {
            max_concurrency: Some(3),
            ..Policy::inherit(scope.clone())
        }
    );
    let second = store
        .policy_change(change(PolicyPatch {
            paused: Some(true),
            retry_base: Some(Some(Duration::from_secs(5))),
            ..Default::default()
        }))
        .await
        .unwrap();
    assert_eq!(second.before, first.after);
    assert_eq!(
        second.after,
        Policy {
            paused: true,
            retry_base: Some(Duration::from_secs(5)),
            ..first.after.clone()
        }
    );
    // Clearing: the limit goes, the other fields stay.
    let third = store
        .policy_change(change(PolicyPatch {
            max_concurrency: Some(None),
            ..Default::default()
        }))
        .await
        .unwrap();
    assert_eq!(third.before, second.after);
    assert_eq!(
        third.after,
        Policy {
            max_concurrency: None,
            ..second.after.clone()
        }
    );
    assert_eq!(store.policy_get(scope.clone()).await.unwrap(), third.after);
    let all = store.policy_list().await.unwrap();
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(all[0].scope, PolicyScope::Global, "the global row first");
    assert_eq!(all[1], third.after);
    assert_eq!(
        db.audit_rows()
            .await
            .unwrap()
            .iter()
            .map(|r| (r.2.as_str(), r.3.as_str(), r.4.as_str()))
            .collect::<Vec<_>>(),
        [("policy_set", "policy:mail", "applied"); 3]
    );
    db.drop_db().await.unwrap();
}

conformance!(audit_rows_written_on_their_own_list_newest_first_in_keyset_pages);
async fn audit_rows_written_on_their_own_list_newest_first_in_keyset_pages(db: StoreDb) {
    let store = db.store();
    for n in 0..5 {
        store
            .audit_record(AuditEntry {
                actor: Actor::operator(format!("op{n}")),
                action: "cancel".into(),
                target: format!("task:{n}"),
                params: (n % 2 == 0).then(|| json!({ "n": n })),
                result: AuditResult::Applied,
                detail: (n == 3).then(|| "because".to_string()),
            })
            .await
            .unwrap();
    }
    store
        .audit_record(AuditEntry {
            actor: viewer("dashboard"),
            action: "cancel".into(),
            target: "task:9".into(),
            params: None,
            result: AuditResult::Denied,
            detail: None,
        })
        .await
        .unwrap();

    let mut listed = Vec::new();
    let mut before_id = None;
    loop {
        let page = store
            .audit_list(AuditListParams {
                before_id,
                limit: 2,
                ..Default::default()
            })
            .await
            .unwrap();
        assert!(page.len() <= 2);
        let Some(last) = page.last() else { break };
        before_id = Some(last.id);
        listed.extend(page);
    }
    assert!(
        listed.windows(2).all(|w| w[0].id > w[1].id),
        "newest first: {listed:?}"
    );
    let targets: Vec<&str> = listed.iter().map(|r| r.target.as_str()).collect();
    assert_eq!(
        targets,
        ["task:9", "task:4", "task:3", "task:2", "task:1", "task:0"]
    );
    let denied = &listed[0];
    assert_eq!(
        (
            denied.actor.as_str(),
            denied.role.as_str(),
            denied.result.as_str()
        ),
        ("dashboard", "viewer", "denied")
    );
    assert_eq!(
        (&listed[3].params, &listed[3].detail),
        (&Some(json!({"n": 2})), &None)
    );
    assert_eq!(
        (&listed[2].params, listed[2].detail.as_deref()),
        (&None, Some("because"))
    );
    assert!(listed.iter().all(|r| r.action == "cancel"));
    let now = store.db_now().await.unwrap();
    assert!(
        listed.iter().all(|r| (now - r.at).num_seconds().abs() < 60),
        "audit times are the database's"
    );

    // A row the database refuses (an actor name above 200 bytes) is bad input; nothing written.
    let refused = store
        .audit_record(AuditEntry {
            actor: Actor::operator("a".repeat(201)),
            action: "cancel".into(),
            target: "task:1".into(),
            params: None,
            result: AuditResult::Applied,
            detail: None,
        })
        .await;
    assert!(
        matches!(refused, Err(StoreError::Invalid(_))),
        "{refused:?}"
    );
    assert_eq!(db.audit_rows().await.unwrap().len(), 6);
    db.drop_db().await.unwrap();
}

fn denied(actor: Actor, action: &str, target: &str) -> AuditEntry {
    AuditEntry {
        actor,
        action: action.into(),
        target: target.into(),
        params: None,
        result: AuditResult::Denied,
        detail: Some("refused".into()),
    }
}

fn page(limit: u32) -> AuditListParams {
    AuditListParams {
        limit,
        ..Default::default()
    }
}

conformance!(denied_calls_are_one_row_with_their_peer_and_count);
async fn denied_calls_are_one_row_with_their_peer_and_count(db: StoreDb) {
    let store = db.store();
    store
        .audit_record(denied(viewer("v"), "cancel", "task:1"))
        .await
        .unwrap();
    store
        .audit_record_denied(DeniedCalls {
            entry: denied(viewer("uid:1000(alice)"), "enqueue", "type:exec"),
            peer: "uid:1000(alice) pid:4242".into(),
            count: 17,
        })
        .await
        .unwrap();
    let listed = store.audit_list(page(10)).await.unwrap();
    let got: Vec<_> = listed
        .iter()
        .map(|r| {
            (
                r.actor.as_str(),
                r.action.as_str(),
                r.result.as_str(),
                r.peer.as_deref(),
                r.count,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                "uid:1000(alice)",
                "enqueue",
                "denied",
                Some("uid:1000(alice) pid:4242"),
                17
            ),
            ("v", "cancel", "denied", None, 1),
        ]
    );
    db.drop_db().await.unwrap();
}

conformance!(bad_denied_calls_are_refused_and_write_nothing);
async fn bad_denied_calls_are_refused_and_write_nothing(db: StoreDb) {
    let store = db.store();
    let good = DeniedCalls {
        entry: denied(viewer("v"), "enqueue", "type:exec"),
        peer: "tcp:10.0.0.7:50412".into(),
        count: 1,
    };
    let mut applied = good.clone();
    applied.entry.result = AuditResult::Applied;
    let mut huge_target = good.clone();
    huge_target.entry.target = "x".repeat(100_000);
    let mut huge_detail = good.clone();
    huge_detail.entry.detail = Some("x".repeat(100_000));
    let mut huge_params = good.clone();
    huge_params.entry.params = Some(json!({ "x": "y".repeat(70_000) }));
    let mut empty_actor = good.clone();
    empty_actor.entry.actor = viewer("");
    let bad = [
        DeniedCalls {
            count: 0,
            ..good.clone()
        },
        DeniedCalls {
            count: u64::MAX,
            ..good.clone()
        },
        DeniedCalls {
            peer: String::new(),
            ..good.clone()
        },
        DeniedCalls {
            peer: "p".repeat(257),
            ..good.clone()
        },
        DeniedCalls {
            peer: "uid:0\n(root)".into(),
            ..good.clone()
        },
        applied,
        huge_target,
        huge_detail,
        huge_params,
        empty_actor,
    ];
    for calls in bad {
        let peer = calls.peer.len();
        let refused = store.audit_record_denied(calls).await;
        assert!(
            matches!(refused, Err(StoreError::Invalid(_))),
            "peer of {peer} bytes: {refused:?}"
        );
    }
    assert_eq!(db.audit_rows().await.unwrap(), []);
    // The good one goes in.
    store.audit_record_denied(good).await.unwrap();
    assert_eq!(db.audit_rows().await.unwrap().len(), 1);
    db.drop_db().await.unwrap();
}

conformance!(the_audit_log_lists_by_actor_action_result_target_and_time);
async fn the_audit_log_lists_by_actor_action_result_target_and_time(db: StoreDb) {
    let store = db.store();
    let row = |actor: &str, action: &str, target: &str, result| AuditEntry {
        actor: Actor::operator(actor),
        action: action.into(),
        target: target.into(),
        params: None,
        result,
        detail: None,
    };
    store
        .audit_record(row("alice", "cancel", "task:1", AuditResult::Applied))
        .await
        .unwrap();
    store
        .audit_record(row("bob", "cancel", "task:2", AuditResult::Failed))
        .await
        .unwrap();
    store
        .audit_record(row(
            "alice",
            "policy_set",
            "policy:Mail.Send",
            AuditResult::Noop,
        ))
        .await
        .unwrap();
    // A LIKE wildcard is plain text to the target filter.
    store
        .audit_record(row("alice", "enqueue", "task:3_%", AuditResult::Applied))
        .await
        .unwrap();
    let now = store.db_now().await.unwrap();

    let targets = |params: AuditListParams| {
        let store = store.clone();
        async move {
            store
                .audit_list(params)
                .await
                .unwrap()
                .into_iter()
                .map(|r| r.target)
                .collect::<Vec<_>>()
        }
    };
    let base = page(100);
    assert_eq!(
        targets(AuditListParams {
            actor: Some("alice".into()),
            ..base.clone()
        })
        .await,
        ["task:3_%", "policy:Mail.Send", "task:1"]
    );
    assert_eq!(
        targets(AuditListParams {
            actor: Some("ALICE".into()),
            ..base.clone()
        })
        .await,
        Vec::<String>::new(),
        "actor is exact"
    );
    assert_eq!(
        targets(AuditListParams {
            action: Some("cancel".into()),
            ..base.clone()
        })
        .await,
        ["task:2", "task:1"]
    );
    assert_eq!(
        targets(AuditListParams {
            result: Some(AuditResult::Failed),
            ..base.clone()
        })
        .await,
        ["task:2"]
    );
    assert_eq!(
        targets(AuditListParams {
            target: Some("mail.SEND".into()),
            ..base.clone()
        })
        .await,
        ["policy:Mail.Send"]
    );
    assert_eq!(
        targets(AuditListParams {
            target: Some("_%".into()),
            ..base.clone()
        })
        .await,
        ["task:3_%"]
    );
    assert_eq!(
        targets(AuditListParams {
            actor: Some("alice".into()),
            action: Some("cancel".into()),
            ..base.clone()
        })
        .await,
        ["task:1"]
    );
    let hour = chrono::Duration::hours(1);
    assert_eq!(
        targets(AuditListParams {
            since: Some(now - hour),
            until: Some(now + hour),
            ..base.clone()
        })
        .await
        .len(),
        4
    );
    assert!(
        targets(AuditListParams {
            since: Some(now + hour),
            ..base.clone()
        })
        .await
        .is_empty()
    );
    assert!(
        targets(AuditListParams {
            until: Some(now - hour),
            ..base.clone()
        })
        .await
        .is_empty()
    );
    // Keyset paging within a filter.
    let first = store
        .audit_list(AuditListParams {
            actor: Some("alice".into()),
            limit: 2,
            ..Default::default()
        })
        .await
        .unwrap();
    let rest = store
        .audit_list(AuditListParams {
            actor: Some("alice".into()),
            limit: 2,
            before_id: first.last().map(|r| r.id),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        (
            first.len(),
            rest.iter().map(|r| r.target.as_str()).collect::<Vec<_>>()
        ),
        (2, vec!["task:1"])
    );
    db.drop_db().await.unwrap();
}

conformance!(bad_audit_list_params_are_refused);
async fn bad_audit_list_params_are_refused(db: StoreDb) {
    let store = db.store();
    let now = store.db_now().await.unwrap();
    let bad = [
        page(0),
        page(1001),
        AuditListParams {
            before_id: Some(0),
            ..page(10)
        },
        AuditListParams {
            actor: Some(String::new()),
            ..page(10)
        },
        AuditListParams {
            action: Some("x".repeat(65)),
            ..page(10)
        },
        AuditListParams {
            target: Some("a\u{7}b".into()),
            ..page(10)
        },
        AuditListParams {
            since: Some(now),
            until: Some(now),
            ..page(10)
        },
    ];
    for params in bad {
        let refused = store.audit_list(params.clone()).await;
        assert!(
            matches!(refused, Err(StoreError::Invalid(_))),
            "{params:?}: {refused:?}"
        );
    }
    assert!(store.audit_list(page(1000)).await.unwrap().is_empty());
    db.drop_db().await.unwrap();
}

conformance!(an_exec_enqueue_records_its_argv_and_payload_digest);
async fn an_exec_enqueue_records_its_argv_and_payload_digest(db: StoreDb) {
    let store = db.store();
    let payload = json!({"argv": ["/bin/echo", "héllo", "wörld"], "env": {"B": "2", "A": "1"}});
    store
        .task_enqueue_audited(audited(
            NewTask::new(tt("exec"), payload.clone()),
            Actor::operator("alice"),
        ))
        .await
        .unwrap();
    // A long argv is cut to fit the row, and says so.
    let long: Vec<String> = (0..200)
        .map(|n| format!("{n}-{}", "a".repeat(2000)))
        .collect();
    let big = json!({ "argv": long });
    store
        .task_enqueue_audited(audited(
            NewTask::new(tt("exec"), big.clone()),
            Actor::operator("alice"),
        ))
        .await
        .unwrap();
    // Other types record no argv.
    store
        .task_enqueue_audited(audited(
            NewTask::new(tt("mail"), json!({"argv": ["x"]})),
            Actor::operator("alice"),
        ))
        .await
        .unwrap();

    let details = db.audit_details().await.unwrap();
    let params: Vec<&serde_json::Value> = details.iter().map(|d| d.2.as_ref().unwrap()).collect();
    assert_eq!(params[0]["argv"], json!(["/bin/echo", "héllo", "wörld"]));
    assert_eq!(params[0]["payload_sha256"], json!(sha256(&payload)));
    assert_eq!(params[0].get("argv_truncated"), None);

    assert_eq!(params[1]["payload_sha256"], json!(sha256(&big)));
    assert_eq!(params[1]["argv_truncated"], json!(true));
    let argv = params[1]["argv"].as_array().unwrap();
    assert!(!argv.is_empty() && argv.len() < 200, "{}", argv.len());
    assert!(argv.iter().all(|a| a.as_str().unwrap().len() <= 1024));
    assert!(argv[0].as_str().unwrap().starts_with("0-aaa"));
    assert!(params[1].to_string().len() < 20_000);

    assert_eq!(params[2].get("argv"), None);
    assert_eq!(
        params[2]["payload_sha256"],
        json!(sha256(&json!({"argv": ["x"]})))
    );
    db.drop_db().await.unwrap();
}
