//! Store conformance: rate limits (issue 23). At most N starts in any window of the period, per
//! type and globally, exact across concurrent claimers (proved by the ledger of start times in
//! database time); the claim says how long until the next start is allowed; GetTask's reasons
//! and the overview show the limit and its fill; a limit is changed or cleared at the next
//! claim; bad limits change nothing — on PostgreSQL and SQLite alike.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use leasehold_shared::domain::{PolicyPatch, PolicyScope, RateLimit};
use leasehold_shared::store::{BlockerKind, ExplainParams, NewTask, PolicySetParams};
use leasehold_shared::{Actor, Store, TaskId};
use leasehold_tests::helpers::{claim, complete_all, tt};
use leasehold_tests::{StoreDb, conformance};
use serde_json::json;

fn rate(starts: u32, period_ms: u64) -> RateLimit {
    RateLimit::new(starts, Duration::from_millis(period_ms)).unwrap()
}

async fn set_rate(store: &dyn Store, scope: PolicyScope, limit: Option<RateLimit>) {
    store
        .policy_set(PolicySetParams {
            scope,
            patch: PolicyPatch {
                rate_limit: Some(limit),
                ..Default::default()
            },
            actor: Actor::operator("test"),
        })
        .await
        .unwrap();
}

/// How many tasks one claim of `owner` over `types` (at most `batch`) started.
async fn started(store: &dyn Store, owner: &str, types: &[&str], batch: u32) -> usize {
    store
        .task_claim(claim(owner, types, batch))
        .await
        .unwrap()
        .tasks
        .len()
}

/// The seconds of a type's rate-limit reason, `rate limit reached (LIMIT), next start in N s
/// (type TYPE)`, for task `id` (panics when it has none or another form).
async fn next_start_secs(store: &dyn Store, id: TaskId, limit: &str, task_type: &str) -> f64 {
    let blockers = store
        .task_explain(ExplainParams {
            id,
            agent_stale_after: Duration::from_secs(30),
        })
        .await
        .unwrap();
    let message = &blockers
        .iter()
        .find(|b| b.kind == BlockerKind::RateLimit)
        .unwrap_or_else(|| panic!("no rate-limit reason in {blockers:?}"))
        .message;
    message
        .strip_prefix(&format!("rate limit reached ({limit}), next start in "))
        .and_then(|rest| rest.strip_suffix(&format!(" s (type {task_type})")))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{message}"))
}

/// The most starts in any window `[t, t + period)` of the sorted start times (µs).
fn fullest_window(starts: &mut [i64], period_us: i64) -> usize {
    starts.sort_unstable();
    let mut best = 0;
    let mut j = 0;
    for i in 0..starts.len() {
        while j < starts.len() && starts[j] < starts[i] + period_us {
            j += 1;
        }
        best = best.max(j - i);
    }
    best
}

#[test]
fn the_fullest_window_counts_half_open_windows() {
    assert_eq!(fullest_window(&mut [], 10), 0);
    assert_eq!(fullest_window(&mut [0, 10, 20], 10), 1);
    assert_eq!(fullest_window(&mut [0, 9, 10, 19], 10), 2);
    assert_eq!(fullest_window(&mut [5, 0, 1, 2, 30], 10), 4);
}

conformance!(
    eight_claimers_never_start_more_than_a_rate_allows_in_any_window,
    worker_threads = 4
);
async fn eight_claimers_never_start_more_than_a_rate_allows_in_any_window(db: StoreDb) {
    const CLAIMERS: usize = 8;
    const PERIOD_MS: u64 = 400;
    let store = db.store_with_pool(CLAIMERS as u32 + 2).await.unwrap();
    // Type rl.a: 4 per 400 ms; every type together: 10 per 400 ms; rl.b has no limit of its own.
    set_rate(
        &*store,
        PolicyScope::Type(tt("rl.a")),
        Some(rate(4, PERIOD_MS)),
    )
    .await;
    set_rate(&*store, PolicyScope::Global, Some(rate(10, PERIOD_MS))).await;
    let mut tasks = Vec::new();
    for n in 0..200 {
        tasks.push(NewTask::new(tt("rl.a"), json!({ "n": n })));
        tasks.push(NewTask::new(tt("rl.b"), json!({ "n": n })));
    }
    store.task_enqueue_many(tasks).await.unwrap();

    let started = Instant::now();
    let run_for = Duration::from_millis(2_500);
    let mut claimers = tokio::task::JoinSet::new();
    for c in 0..CLAIMERS {
        let store = store.clone();
        claimers.spawn(async move {
            let owner = format!("rated#{c}");
            let mut waits = Vec::new();
            while started.elapsed() < run_for {
                let batch = store
                    .task_claim(claim(&owner, &["rl.a", "rl.b"], 4))
                    .await
                    .unwrap();
                complete_all(&*store, &owner, &batch.tasks).await;
                if let Some(wait) = batch.rate_wait {
                    waits.push(wait);
                }
                if batch.tasks.is_empty() {
                    tokio::time::sleep(Duration::from_millis(1 + c as u64 % 3)).await;
                }
            }
            waits
        });
    }
    let mut waits = Vec::new();
    while let Some(joined) = claimers.join_next().await {
        waits.extend(joined.unwrap());
    }
    let elapsed = started.elapsed();

    let rows = db.attempt_intervals().await.unwrap();
    let period_us = i64::try_from(PERIOD_MS).unwrap() * 1000;
    let mut all: Vec<i64> = rows.iter().map(|(_, s, _)| *s).collect();
    let mut of_a: Vec<i64> = rows
        .iter()
        .filter(|(t, _, _)| t == "rl.a")
        .map(|(_, s, _)| *s)
        .collect();
    let fullest_all = fullest_window(&mut all, period_us);
    let fullest_a = fullest_window(&mut of_a, period_us);
    assert!(
        fullest_a <= 4,
        "type rate 4/400ms exceeded: {fullest_a} starts in one window"
    );
    assert!(
        fullest_all <= 10,
        "global rate 10/400ms exceeded: {fullest_all} in one window"
    );
    // Positive controls: the limits were reached, so the test could have failed, and the
    // claimers were told how long to wait rather than left to poll.
    assert_eq!(
        fullest_a, 4,
        "type rl.a never filled its window; the test proves nothing"
    );
    assert_eq!(
        fullest_all, 10,
        "the global window was never full; the test proves nothing"
    );
    assert!(!waits.is_empty(), "no claim reported a rate wait");
    assert!(
        waits.iter().all(|w| *w <= Duration::from_millis(PERIOD_MS)),
        "a rate wait longer than the period: {waits:?}"
    );
    // The long-run rate: ten per 400 ms over the run, give or take a window.
    let windows = elapsed.as_secs_f64() / (PERIOD_MS as f64 / 1000.0);
    let expected = 10.0 * windows;
    let got = rows.len() as f64;
    assert!(
        got <= expected + 10.0 && got >= expected * 0.5,
        "{got} starts in {elapsed:?}, expected about {expected:.0}"
    );
    db.drop_db().await.unwrap();
}

conformance!(a_full_window_explains_itself_and_shows_its_fill);
async fn a_full_window_explains_itself_and_shows_its_fill(db: StoreDb) {
    let store = db.store();
    set_rate(
        &*store,
        PolicyScope::Type(tt("rl.slow")),
        Some(rate(2, 60_000)),
    )
    .await;
    set_rate(&*store, PolicyScope::Global, Some(rate(1000, 3_600_000))).await;
    let ids = store
        .task_enqueue_many(
            (0..3)
                .map(|n| NewTask::new(tt("rl.slow"), json!({ "n": n })))
                .collect(),
        )
        .await
        .unwrap();
    let first = store
        .task_claim(claim("w#1", &["rl.slow"], 10))
        .await
        .unwrap();
    assert_eq!(first.tasks.len(), 2, "two starts allowed per minute");
    let wait = first
        .rate_wait
        .expect("a short claim under a full window says when");
    assert!(
        wait > Duration::from_secs(55) && wait <= Duration::from_secs(60),
        "next start in {wait:?}"
    );
    let again = store
        .task_claim(claim("w#2", &["rl.slow"], 10))
        .await
        .unwrap();
    assert!(again.tasks.is_empty(), "the window is full");
    assert!(again.rate_wait.is_some());

    let third = ids[2].id;
    let seconds = next_start_secs(&*store, third, "2/1m", "rl.slow").await;
    assert!(
        (55.0..=60.0).contains(&seconds),
        "next start in {seconds} s"
    );
    let blockers = store
        .task_explain(ExplainParams {
            id: third,
            agent_stale_after: Duration::from_secs(30),
        })
        .await
        .unwrap();
    assert!(
        !blockers
            .iter()
            .any(|b| b.kind == BlockerKind::GlobalRateLimit),
        "the global window holds 2 of 1000"
    );

    let overview = store.task_overview().await.unwrap();
    let slow = overview
        .types
        .iter()
        .find(|t| t.task_type.as_str() == "rl.slow")
        .unwrap();
    let fill = slow.rate.expect("the type's rate limit is listed");
    assert_eq!((fill.limit, fill.used), (rate(2, 60_000), 2));
    let global = overview
        .global_rate
        .expect("the global rate limit is listed");
    assert_eq!((global.limit, global.used), (rate(1000, 3_600_000), 2));
    db.drop_db().await.unwrap();
}

conformance!(a_changed_or_cleared_limit_applies_at_the_next_claim);
async fn a_changed_or_cleared_limit_applies_at_the_next_claim(db: StoreDb) {
    let store = db.store();
    set_rate(
        &*store,
        PolicyScope::Type(tt("rl.c")),
        Some(rate(1, 3_600_000)),
    )
    .await;
    store
        .task_enqueue_many(
            (0..10)
                .map(|n| NewTask::new(tt("rl.c"), json!({ "n": n })))
                .collect(),
        )
        .await
        .unwrap();
    assert_eq!(started(&*store, "w#1", &["rl.c"], 5).await, 1);
    assert!(started(&*store, "w#1", &["rl.c"], 5).await == 0);
    // Raised: the start already made counts against the new limit too.
    set_rate(
        &*store,
        PolicyScope::Type(tt("rl.c")),
        Some(rate(3, 3_600_000)),
    )
    .await;
    assert_eq!(started(&*store, "w#1", &["rl.c"], 5).await, 2);
    assert!(started(&*store, "w#1", &["rl.c"], 5).await == 0);
    // Cleared: no wait, no cap.
    set_rate(&*store, PolicyScope::Type(tt("rl.c")), None).await;
    let open = store.task_claim(claim("w#1", &["rl.c"], 5)).await.unwrap();
    assert_eq!(open.tasks.len(), 5);
    assert_eq!(open.rate_wait, None);
    assert_eq!(
        store
            .policy_get(PolicyScope::Type(tt("rl.c")))
            .await
            .unwrap()
            .rate_limit,
        None
    );
    db.drop_db().await.unwrap();
}

conformance!(a_lowered_limit_waits_for_enough_starts_to_leave_not_only_the_oldest);
async fn a_lowered_limit_waits_for_enough_starts_to_leave_not_only_the_oldest(db: StoreDb) {
    let store = db.store();
    let scope = PolicyScope::Type(tt("rl.low"));
    set_rate(&*store, scope.clone(), Some(rate(5, 60_000))).await;
    let ids = store
        .task_enqueue_many(
            (0..6)
                .map(|n| NewTask::new(tt("rl.low"), json!({ "n": n })))
                .collect(),
        )
        .await
        .unwrap();
    // One start, then four more 1.5 s later: the ledger holds 1 then 4.
    assert_eq!(started(&*store, "w#1", &["rl.low"], 1).await, 1);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(started(&*store, "w#1", &["rl.low"], 4).await, 4);
    // Lowered to 3: 5 used, so 3 starts must leave before one more is allowed — the batch of
    // four, not the single oldest start (which would say about 58.5 s).
    set_rate(&*store, scope.clone(), Some(rate(3, 60_000))).await;
    let held = store
        .task_claim(claim("w#1", &["rl.low"], 4))
        .await
        .unwrap();
    assert!(held.tasks.is_empty());
    let wait = held.rate_wait.expect("a full window says when");
    assert!(
        wait > Duration::from_millis(59_000),
        "next start in {wait:?}"
    );
    let seconds = next_start_secs(&*store, ids[5].id, "3/1m", "rl.low").await;
    assert!(seconds > 59.0, "next start in {seconds} s");
    db.drop_db().await.unwrap();
}

conformance!(a_bad_rate_limit_is_refused_and_changes_nothing);
async fn a_bad_rate_limit_is_refused_and_changes_nothing(db: StoreDb) {
    let store = db.store();
    let scope = PolicyScope::Type(tt("rl.bad"));
    set_rate(&*store, scope.clone(), Some(rate(5, 1_000))).await;
    for bad in [
        RateLimit {
            starts: 0,
            period: Duration::from_secs(1),
        },
        RateLimit {
            starts: 5,
            period: Duration::ZERO,
        },
        RateLimit {
            starts: 5,
            period: Duration::from_secs(86_401),
        },
        RateLimit {
            starts: 2_000_000,
            period: Duration::from_secs(1),
        },
    ] {
        let refused = store
            .policy_set(PolicySetParams {
                scope: scope.clone(),
                patch: PolicyPatch {
                    rate_limit: Some(Some(bad)),
                    ..Default::default()
                },
                actor: Actor::operator("test"),
            })
            .await;
        assert!(refused.is_err(), "{bad:?} was accepted");
        assert_eq!(
            store.policy_get(scope.clone()).await.unwrap().rate_limit,
            Some(rate(5, 1_000)),
            "{bad:?} changed the row"
        );
    }
    db.drop_db().await.unwrap();
}
