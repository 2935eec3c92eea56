//! Store conformance: circuit breakers (issue 23). After N failed attempts of a type within D,
//! the leader's tick opens its breaker (nothing of the type is claimed) for the cooldown, then
//! half-opens it (one task at a time tries): a success closes it, a failure opens it again.
//! Each move is audited as an action of the agent; GetTask explains an open breaker and the
//! overview shows it; failures from before the breaker was set or closed, or outside the window,
//! do not count; bad breakers change nothing — on PostgreSQL and SQLite alike.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use leasehold_shared::domain::Task;
use leasehold_shared::domain::{BreakerPolicy, BreakerState, PolicyPatch, PolicyScope};
use leasehold_shared::store::{
    BlockerKind, BreakerTickParams, CompleteOutcome, CompleteParams, Completion, ExplainParams,
    NewTask, PolicySetParams,
};
use leasehold_shared::{Actor, LeaseKey, Store, TaskError};
use leasehold_tests::helpers::{agent, claim, complete_all, tt};
use leasehold_tests::{StoreDb, conformance};
use serde_json::json;

fn breaker(failures: u32, within_ms: u64, cooldown_ms: u64) -> BreakerPolicy {
    BreakerPolicy::new(
        failures,
        Duration::from_millis(within_ms),
        Duration::from_millis(cooldown_ms),
    )
    .unwrap()
}

async fn set_breaker(store: &dyn Store, task_type: &str, b: Option<BreakerPolicy>) {
    store
        .policy_set(PolicySetParams {
            scope: PolicyScope::Type(tt(task_type)),
            patch: PolicyPatch {
                breaker: Some(b),
                ..Default::default()
            },
            actor: Actor::operator("test"),
        })
        .await
        .unwrap();
}

async fn fail_all(store: &dyn Store, owner: &str, tasks: &[Task]) {
    let batch = tasks
        .iter()
        .map(|t| CompleteParams {
            key: LeaseKey {
                id: t.id,
                owner: agent(owner),
                epoch: t.lease_epoch,
            },
            completion: Completion::Failed {
                error: TaskError::retryable("upstream", "503 from the payment API"),
            },
        })
        .collect();
    let outcomes = store.task_complete_many(batch).await.unwrap();
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, CompleteOutcome::Applied { .. }))
    );
}

async fn tick(store: &dyn Store) -> Vec<(String, BreakerState, BreakerState)> {
    store
        .breaker_tick(BreakerTickParams {
            agent: agent("leader#1"),
        })
        .await
        .unwrap()
        .into_iter()
        .map(|m| (m.task_type.to_string(), m.from, m.to))
        .collect()
}

async fn started(store: &dyn Store, owner: &str, task_type: &str, batch: u32) -> Vec<Task> {
    store
        .task_claim(claim(owner, &[task_type], batch))
        .await
        .unwrap()
        .tasks
}

async fn state_of(store: &dyn Store, task_type: &str) -> Option<BreakerState> {
    let overview = store.task_overview().await.unwrap();
    overview
        .types
        .iter()
        .find(|t| t.task_type.as_str() == task_type)
        .and_then(|t| t.breaker)
        .map(|b| b.state)
}

async fn enqueue(store: &dyn Store, task_type: &str, n: usize) {
    store
        .task_enqueue_many(
            (0..n)
                .map(|i| NewTask::new(tt(task_type), json!({ "n": i })).with_max_attempts(50))
                .collect(),
        )
        .await
        .unwrap();
}

conformance!(a_breaker_opens_half_opens_and_closes_each_move_audited);
async fn a_breaker_opens_half_opens_and_closes_each_move_audited(db: StoreDb) {
    let store = db.store();
    set_breaker(&*store, "br.a", Some(breaker(3, 60_000, 400))).await;
    enqueue(&*store, "br.a", 20).await;
    enqueue(&*store, "br.b", 2).await;
    assert_eq!(state_of(&*store, "br.a").await, Some(BreakerState::Closed));

    // Two failures: still closed.
    let two = started(&*store, "w#1", "br.a", 2).await;
    fail_all(&*store, "w#1", &two).await;
    assert!(tick(&*store).await.is_empty(), "two of three failures");
    // The third opens it.
    let one = started(&*store, "w#1", "br.a", 1).await;
    fail_all(&*store, "w#1", &one).await;
    let moves = store
        .breaker_tick(BreakerTickParams {
            agent: agent("leader#1"),
        })
        .await
        .unwrap();
    assert_eq!(moves.len(), 1);
    assert_eq!(
        (moves[0].from, moves[0].to),
        (BreakerState::Closed, BreakerState::Open)
    );
    assert_eq!(moves[0].failures, Some(3));
    assert!(moves[0].until.is_some());
    assert_eq!(state_of(&*store, "br.a").await, Some(BreakerState::Open));

    // Open: nothing of br.a starts, other types do; GetTask says why.
    assert!(started(&*store, "w#2", "br.a", 10).await.is_empty());
    assert_eq!(started(&*store, "w#2", "br.b", 10).await.len(), 2);
    let waiting = store
        .task_list(leasehold_shared::store::TaskListParams {
            statuses: vec![leasehold_shared::TaskStatus::Queued],
            task_type: Some(tt("br.a")),
            text: None,
            error_code: None,
            since: None,
            before: None,
            limit: 1,
            due: None,
        })
        .await
        .unwrap()
        .tasks[0]
        .id;
    let why = store
        .task_explain(ExplainParams {
            id: waiting,
            agent_stale_after: Duration::from_secs(30),
        })
        .await
        .unwrap();
    let open = why
        .iter()
        .find(|b| b.kind == BlockerKind::Breaker)
        .unwrap_or_else(|| panic!("no breaker reason in {why:?}"));
    assert!(
        open.message.starts_with(
            "circuit breaker open (3 failures within 1m, cooldown 400ms): not claimed until "
        ),
        "{}",
        open.message
    );

    // Still open before the cooldown; half-open after it.
    assert!(tick(&*store).await.is_empty());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        tick(&*store).await,
        [(
            "br.a".to_string(),
            BreakerState::Open,
            BreakerState::HalfOpen
        )]
    );
    // Half-open: one task tries, however many claimers ask.
    let probe = started(&*store, "w#3", "br.a", 10).await;
    assert_eq!(probe.len(), 1, "half-open lets one task try");
    assert!(started(&*store, "w#4", "br.a", 10).await.is_empty());
    assert!(tick(&*store).await.is_empty(), "the try is still running");
    complete_all(&*store, "w#3", &probe).await;
    assert_eq!(
        tick(&*store).await,
        [(
            "br.a".to_string(),
            BreakerState::HalfOpen,
            BreakerState::Closed
        )]
    );
    // Closed: the earlier failures no longer count, and the type runs freely again.
    assert!(tick(&*store).await.is_empty());
    assert_eq!(started(&*store, "w#5", "br.a", 5).await.len(), 5);

    let audit: Vec<(String, String, String, String, String)> = db
        .audit_rows()
        .await
        .unwrap()
        .into_iter()
        .filter(|(_, _, action, _, _)| action.starts_with("breaker_"))
        .collect();
    let expected = ["breaker_open", "breaker_half_open", "breaker_closed"];
    assert_eq!(audit.len(), 3, "{audit:?}");
    for ((actor, role, action, target, result), want) in audit.iter().zip(expected) {
        assert_eq!(
            (
                actor.as_str(),
                role.as_str(),
                action.as_str(),
                target.as_str(),
                result.as_str()
            ),
            ("leader#1", "system", want, "type:br.a", "applied")
        );
    }
    db.drop_db().await.unwrap();
}

conformance!(a_failed_half_open_try_opens_the_breaker_again);
async fn a_failed_half_open_try_opens_the_breaker_again(db: StoreDb) {
    let store = db.store();
    set_breaker(&*store, "br.c", Some(breaker(1, 60_000, 200))).await;
    enqueue(&*store, "br.c", 5).await;
    let first = started(&*store, "w#1", "br.c", 1).await;
    fail_all(&*store, "w#1", &first).await;
    assert_eq!(tick(&*store).await.len(), 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(tick(&*store).await[0].2, BreakerState::HalfOpen);
    let probe = started(&*store, "w#2", "br.c", 5).await;
    assert_eq!(probe.len(), 1);
    fail_all(&*store, "w#2", &probe).await;
    assert_eq!(
        tick(&*store).await,
        [(
            "br.c".to_string(),
            BreakerState::HalfOpen,
            BreakerState::Open
        )]
    );
    assert!(started(&*store, "w#3", "br.c", 5).await.is_empty());
    db.drop_db().await.unwrap();
}

conformance!(failures_outside_the_window_or_before_the_breaker_do_not_count);
async fn failures_outside_the_window_or_before_the_breaker_do_not_count(db: StoreDb) {
    let store = db.store();
    enqueue(&*store, "br.d", 10).await;
    // Failures before the breaker was set do not count.
    let before = started(&*store, "w#1", "br.d", 3).await;
    fail_all(&*store, "w#1", &before).await;
    set_breaker(&*store, "br.d", Some(breaker(2, 300, 1000))).await;
    assert!(tick(&*store).await.is_empty());
    // One failure, then the window passes, then one more: never two within 300 ms.
    let one = started(&*store, "w#1", "br.d", 1).await;
    fail_all(&*store, "w#1", &one).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let another = started(&*store, "w#1", "br.d", 1).await;
    fail_all(&*store, "w#1", &another).await;
    assert!(
        tick(&*store).await.is_empty(),
        "the first failure left the window"
    );
    // Positive control: a second failure within the window opens it.
    let third = started(&*store, "w#1", "br.d", 1).await;
    fail_all(&*store, "w#1", &third).await;
    assert_eq!(tick(&*store).await.len(), 1);
    assert_eq!(state_of(&*store, "br.d").await, Some(BreakerState::Open));
    // Clearing the breaker closes it: the type runs at once.
    set_breaker(&*store, "br.d", None).await;
    assert_eq!(state_of(&*store, "br.d").await, None);
    assert!(!started(&*store, "w#2", "br.d", 1).await.is_empty());
    db.drop_db().await.unwrap();
}

conformance!(bad_breakers_change_nothing);
async fn bad_breakers_change_nothing(db: StoreDb) {
    let store = db.store();
    let before = store.policy_list().await.unwrap();
    let raw = |failures, within_ms, cooldown_ms| BreakerPolicy {
        failures,
        within: Duration::from_millis(within_ms),
        cooldown: Duration::from_millis(cooldown_ms),
    };
    for (scope, b) in [
        (PolicyScope::Global, raw(3, 1000, 1000)),
        (PolicyScope::Type(tt("br.e")), raw(0, 1000, 1000)),
        (PolicyScope::Type(tt("br.e")), raw(3, 0, 1000)),
        (PolicyScope::Type(tt("br.e")), raw(3, 90_000_000, 1000)),
        (PolicyScope::Type(tt("br.e")), raw(3, 1000, 0)),
    ] {
        let err = store
            .policy_set(PolicySetParams {
                scope: scope.clone(),
                patch: PolicyPatch {
                    breaker: Some(Some(b)),
                    ..Default::default()
                },
                actor: Actor::operator("test"),
            })
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("breaker"),
            "{scope:?} {b:?}: {err}"
        );
    }
    assert_eq!(store.policy_list().await.unwrap(), before);
    assert!(tick(&*store).await.is_empty());
    db.drop_db().await.unwrap();
}

conformance!(a_half_open_breaker_lets_one_try_until_the_tick_moves_it);
async fn a_half_open_breaker_lets_one_try_until_the_tick_moves_it(db: StoreDb) {
    let store = db.store();
    set_breaker(&*store, "br.f", Some(breaker(1, 60_000, 200))).await;
    enqueue(&*store, "br.f", 5).await;
    let first = started(&*store, "w#1", "br.f", 1).await;
    fail_all(&*store, "w#1", &first).await;
    assert_eq!(tick(&*store).await.len(), 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(tick(&*store).await[0].2, BreakerState::HalfOpen);
    // The try succeeds; until the leader's tick closes the breaker no second one starts.
    let ok = started(&*store, "w#2", "br.f", 5).await;
    assert_eq!(ok.len(), 1);
    complete_all(&*store, "w#2", &ok).await;
    assert!(
        started(&*store, "w#3", "br.f", 5).await.is_empty(),
        "a second try before the tick"
    );
    assert_eq!(
        tick(&*store).await,
        [(
            "br.f".to_string(),
            BreakerState::HalfOpen,
            BreakerState::Closed
        )]
    );
    assert_eq!(started(&*store, "w#3", "br.f", 5).await.len(), 3);
    db.drop_db().await.unwrap();
}
