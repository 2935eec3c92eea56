#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! GetPolicy and SetPolicy against a real agent (issue 24): viewers read a type's settings
//! with where each comes from, operators set and clear them (one `policy_set` audit row per
//! change), a viewer's SetPolicy is refused and audited as denied, and bad requests are
//! INVALID_ARGUMENT naming the field, with no policy row and no audit row written (T31).

use leasehold_proto::v1 as pb;
use leasehold_tests::TestDb;
use leasehold_tests::calls::grpc::{Failures, INVALID, OPERATOR, VIEWER, refusal, start, stop};
use leasehold_tests::grpc::connect_with;
use leasehold_tests::inspect::{audit_rows, state_digest};
use tonic::Code;

fn set(task_type: &str) -> pb::SetPolicyRequest {
    pb::SetPolicyRequest {
        task_type: task_type.into(),
        ..Default::default()
    }
}

fn by_name(settings: &[pb::PolicySetting], name: &str) -> (f64, String) {
    let s = settings
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no {name} in {settings:?}"));
    (s.value, s.source.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_are_read_by_viewers_set_by_operators_and_bad_ones_change_nothing() {
    let db = TestDb::new().await.unwrap();
    let config = leasehold_tests::fleet::tokens_config(
        "leasehold-policy",
        &[
            leasehold_tests::fleet::ConfigToken::operator("op", OPERATOR),
            leasehold_tests::fleet::ConfigToken::viewer("viewer", VIEWER),
        ],
    )
    .unwrap();
    let (agent, addr) = start(&db, "policies", &["--config", config.to_str().unwrap()])
        .await
        .unwrap();
    let mut op = connect_with(&addr, Some(OPERATOR), None).await.unwrap();
    let mut viewer = connect_with(&addr, Some(VIEWER), None).await.unwrap();

    // A type without a row: everything inherited, in the documented order.
    let read = viewer
        .get_policy(pb::GetPolicyRequest {
            task_type: "email".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let names: Vec<&str> = read.settings.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "max_attempts",
            "retry_base_ms",
            "retry_multiplier",
            "retry_max_ms",
            "retry_jitter",
            "timeout_ms",
            "slow_after_ms",
            "max_snoozes"
        ]
    );
    assert_eq!(
        by_name(&read.settings, "max_attempts"),
        (25.0, "default".into())
    );
    assert_eq!(read.concurrency, None);

    // An operator sets; the reply and a viewer's read agree.
    let reply = op
        .set_policy(pb::SetPolicyRequest {
            max_attempts: Some(5),
            retry_base_ms: Some(2_000),
            retry_max_ms: Some(300_000),
            timeout_ms: Some(30_000),
            ..set("email")
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        by_name(&reply.previous, "max_attempts"),
        (25.0, "default".into())
    );
    assert_eq!(
        by_name(&reply.current, "max_attempts"),
        (5.0, "type".into())
    );
    assert!(
        reply.warnings.iter().any(|w| w.contains("email")),
        "no live agent handles email: {:?}",
        reply.warnings
    );
    let read = viewer
        .get_policy(pb::GetPolicyRequest {
            task_type: "email".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(read.settings, reply.current);
    assert_eq!(
        by_name(&read.settings, "timeout_ms"),
        (30_000.0, "type".into())
    );
    // The global policy, then cleared back to it.
    op.set_policy(pb::SetPolicyRequest {
        global: true,
        max_attempts: Some(9),
        ..Default::default()
    })
    .await
    .unwrap();
    let reply = op
        .set_policy(pb::SetPolicyRequest {
            clear: vec!["max_attempts".into()],
            ..set("email")
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        by_name(&reply.current, "max_attempts"),
        (9.0, "global".into())
    );
    let global = viewer
        .get_policy(pb::GetPolicyRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        by_name(&global.settings, "max_attempts"),
        (9.0, "global".into())
    );

    // A viewer may not set: refused, audited as denied, nothing written.
    let before = state_digest(&db.pool, &[]).await.unwrap();
    let denied = viewer
        .set_policy(pb::SetPolicyRequest {
            max_attempts: Some(3),
            ..set("email")
        })
        .await;
    assert_eq!(denied.unwrap_err().code(), Code::PermissionDenied);

    // Bad requests: INVALID_ARGUMENT naming the field; nothing written, nothing audited.
    let audited = audit_rows(&db.pool).await.unwrap();
    let mut failures = Failures::default();
    let cases: Vec<(&str, pb::SetPolicyRequest, &str)> = vec![
        ("nothing to change", set("email"), "at least one"),
        (
            "max_attempts 0",
            pb::SetPolicyRequest {
                max_attempts: Some(0),
                ..set("email")
            },
            "max_attempts",
        ),
        (
            "max_attempts 1001",
            pb::SetPolicyRequest {
                max_attempts: Some(1001),
                ..set("email")
            },
            "max_attempts",
        ),
        (
            "timeout 0",
            pb::SetPolicyRequest {
                timeout_ms: Some(0),
                ..set("email")
            },
            "timeout_ms",
        ),
        (
            "slow after 8 days",
            pb::SetPolicyRequest {
                slow_after_ms: Some(8 * 86_400_000),
                ..set("email")
            },
            "slow_after_ms",
        ),
        (
            "base above max",
            pb::SetPolicyRequest {
                retry_base_ms: Some(10_000),
                retry_max_ms: Some(1_000),
                ..set("email")
            },
            "retry_base_ms",
        ),
        (
            "multiplier below 1",
            pb::SetPolicyRequest {
                retry_multiplier: Some(0.5),
                ..set("email")
            },
            "retry_multiplier",
        ),
        (
            "jitter NaN",
            pb::SetPolicyRequest {
                retry_jitter: Some(f64::NAN),
                ..set("email")
            },
            "retry_jitter",
        ),
        (
            "max_snoozes too many",
            pb::SetPolicyRequest {
                max_snoozes: Some(2_000_000),
                ..set("email")
            },
            "max_snoozes",
        ),
        (
            "unknown clear",
            pb::SetPolicyRequest {
                clear: vec!["paused".into()],
                ..set("email")
            },
            "clear",
        ),
        (
            "set and cleared",
            pb::SetPolicyRequest {
                max_attempts: Some(4),
                clear: vec!["max_attempts".into()],
                ..set("email")
            },
            "max_attempts",
        ),
        (
            "global keeps its timeout",
            pb::SetPolicyRequest {
                global: true,
                clear: vec!["timeout_ms".into()],
                ..Default::default()
            },
            "timeout",
        ),
        (
            "type and global",
            pb::SetPolicyRequest {
                global: true,
                max_attempts: Some(4),
                ..set("email")
            },
            "task_type",
        ),
        (
            "no scope",
            pb::SetPolicyRequest {
                max_attempts: Some(4),
                ..Default::default()
            },
            "task_type",
        ),
        (
            "bad type name",
            pb::SetPolicyRequest {
                max_attempts: Some(4),
                ..set("Bad Type")
            },
            "task_type",
        ),
    ];
    for (what, request, field) in cases {
        failures.check(what, refusal(op.set_policy(request).await, INVALID, field));
    }
    failures.check(
        "get with a bad type name",
        refusal(
            viewer
                .get_policy(pb::GetPolicyRequest {
                    task_type: "Bad Type".into(),
                })
                .await,
            INVALID,
            "task_type",
        ),
    );
    failures.assert_none();
    assert_eq!(state_digest(&db.pool, &[]).await.unwrap(), before);
    let after = audit_rows(&db.pool).await.unwrap();
    assert_eq!(after.len(), audited.len(), "bad requests are not audited");
    let rows: Vec<_> = after
        .iter()
        .filter(|r| r.2 == "policy_set")
        .map(|r| (r.0.as_str(), r.3.as_str(), r.4.as_str()))
        .collect();
    assert_eq!(
        rows,
        [
            ("op", "policy:email", "applied"),
            ("op", "policy:*", "applied"),
            ("op", "policy:email", "applied"),
            ("viewer", "policy:email", "denied"),
        ]
    );
    stop(agent).await.unwrap();
    db.drop_db().await.unwrap();
}
