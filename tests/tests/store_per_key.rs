//! Store conformance: per-key concurrency (issue 23). A task may carry a concurrency key; a
//! type's per-key limit allows at most N running tasks per key, exact across concurrent
//! claimers (proved by the ledger of attempt intervals in database time); keys take turns, so
//! a key with a long backlog never holds back the keys behind it; keyless tasks are not limited
//! by it; GetTask explains a full key and the overview shows the limit; bad keys and limits
//! change nothing — on PostgreSQL and SQLite alike.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use leasehold_shared::domain::{PolicyPatch, PolicyScope};
use leasehold_shared::store::{
    BlockerKind, ExplainParams, NewTask, PolicySetParams, ShedParams, StoreError,
};
use leasehold_shared::{Actor, Store, TaskId};
use leasehold_tests::helpers::{claim, complete_all, tt};
use leasehold_tests::{StoreDb, TaskSpec, Val, conformance};
use serde_json::json;

async fn set_type_policy(store: &dyn Store, task_type: &str, patch: PolicyPatch) {
    store
        .policy_set(PolicySetParams {
            scope: PolicyScope::Type(tt(task_type)),
            patch,
            actor: Actor::operator("test"),
        })
        .await
        .unwrap();
}

async fn set_per_key(store: &dyn Store, task_type: &str, limit: Option<u32>) {
    let patch = PolicyPatch {
        per_key_concurrency: Some(limit),
        ..Default::default()
    };
    set_type_policy(store, task_type, patch).await;
}

/// Enqueues `per_key` tasks of each of `keys` keys named `{prefix}{k:02}`, key by key.
async fn enqueue_keys(
    store: &dyn Store,
    task_type: &str,
    prefix: &str,
    keys: usize,
    per_key: usize,
) {
    let mut tasks = Vec::new();
    for k in 0..keys {
        for n in 0..per_key {
            tasks.push(keyed(task_type, &format!("{prefix}{k:02}"), n));
        }
    }
    store.task_enqueue_many(tasks).await.unwrap();
}

fn keyed(task_type: &str, key: &str, n: usize) -> NewTask {
    NewTask::new(tt(task_type), json!({ "n": n })).with_concurrency_key(key)
}

/// Per key, the most of its attempts that overlapped at one instant (intervals half-open).
fn overlap_per_key(rows: &[(String, String, i64, i64)]) -> BTreeMap<String, usize> {
    let mut by_key: BTreeMap<String, Vec<(i64, i64)>> = BTreeMap::new();
    for (_, key, start, end) in rows {
        by_key.entry(key.clone()).or_default().push((*start, *end));
    }
    by_key
        .into_iter()
        .map(|(key, spans)| (key, most_at_once(&spans)))
        .collect()
}

/// The most intervals `[start, end)` covering one instant.
fn most_at_once(spans: &[(i64, i64)]) -> usize {
    let mut edges: Vec<(i64, i32)> = spans
        .iter()
        .flat_map(|(s, e)| [(*s, 1), (*e, -1)])
        .collect();
    // An end and a start at the same instant do not overlap: ends first.
    edges.sort_unstable();
    let (mut now, mut best) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        best = best.max(now);
    }
    usize::try_from(best).unwrap_or(0)
}

#[test]
fn overlaps_count_half_open_intervals() {
    assert_eq!(most_at_once(&[]), 0);
    assert_eq!(most_at_once(&[(0, 10), (10, 20)]), 1);
    assert_eq!(most_at_once(&[(0, 10), (5, 20), (9, 11)]), 3);
}

conformance!(
    six_claimers_run_one_task_per_key_at_a_time_and_twenty_keys_at_once,
    worker_threads = 4
);
async fn six_claimers_run_one_task_per_key_at_a_time_and_twenty_keys_at_once(db: StoreDb) {
    const CLAIMERS: usize = 6;
    const KEYS: usize = 20;
    const PER_KEY: usize = 6;
    let store = db.store_with_pool(CLAIMERS as u32 + 2).await.unwrap();
    set_per_key(&*store, "pk.a", Some(1)).await;
    // Key by key, so a claim in queue order alone would take one key's backlog first.
    enqueue_keys(&*store, "pk.a", "tenant-", KEYS, PER_KEY).await;

    let deadline = Instant::now() + Duration::from_secs(60);
    let mut claimers = tokio::task::JoinSet::new();
    for c in 0..CLAIMERS {
        let store = store.clone();
        claimers.spawn(async move {
            let owner = format!("keyed#{c}");
            let mut idle = 0;
            while idle < 20 && Instant::now() < deadline {
                let batch = store.task_claim(claim(&owner, &["pk.a"], 8)).await.unwrap();
                if batch.tasks.is_empty() {
                    idle += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
                idle = 0;
                // Hold the leases a while, so keys overlap if the limit leaks.
                tokio::time::sleep(Duration::from_millis(40)).await;
                complete_all(&*store, &owner, &batch.tasks).await;
            }
        });
    }
    while let Some(joined) = claimers.join_next().await {
        joined.unwrap();
    }

    let rows = db.keyed_attempt_intervals().await.unwrap();
    assert_eq!(rows.len(), KEYS * PER_KEY, "every task ran once");
    let overlap = overlap_per_key(&rows);
    assert_eq!(overlap.len(), KEYS);
    assert!(
        overlap.values().all(|n| *n == 1),
        "two tasks of one key overlapped: {overlap:?}"
    );
    // Positive control: keys ran side by side, so the limit is per key, not per type.
    let spans: Vec<(i64, i64)> = rows.iter().map(|(_, _, s, e)| (*s, *e)).collect();
    let parallel = most_at_once(&spans);
    assert!(
        parallel >= KEYS / 2,
        "at most {parallel} keys ran at once; twenty could"
    );
    db.drop_db().await.unwrap();
}

conformance!(a_key_with_a_long_backlog_does_not_hold_back_the_keys_behind_it);
async fn a_key_with_a_long_backlog_does_not_hold_back_the_keys_behind_it(db: StoreDb) {
    let store = db.store();
    // The busy key's 300 tasks are older than everyone else's.
    store
        .task_enqueue_many((0..300).map(|n| keyed("pk.b", "busy", n)).collect())
        .await
        .unwrap();
    let mut others = Vec::new();
    for k in 0..10 {
        others.push(keyed("pk.b", &format!("quiet-{k}"), 0));
    }
    store.task_enqueue_many(others).await.unwrap();

    // Without a per-key limit, keys share the batch: one of each before a second of any.
    let batch = store
        .task_claim(claim("fair#1", &["pk.b"], 11))
        .await
        .unwrap();
    let keys: BTreeSet<String> = batch
        .tasks
        .iter()
        .map(|t| t.concurrency_key.clone().unwrap())
        .collect();
    assert_eq!(batch.tasks.len(), 11);
    assert_eq!(keys.len(), 11, "one task of each of the 11 keys: {keys:?}");
    complete_all(&*store, "fair#1", &batch.tasks).await;

    // With a limit of one per key and the busy key running, its backlog blocks no one.
    set_per_key(&*store, "pk.b", Some(1)).await;
    store
        .task_enqueue_many(
            (0..5)
                .map(|k| keyed("pk.b", &format!("late-{k}"), 0))
                .collect(),
        )
        .await
        .unwrap();
    let first = store
        .task_claim(claim("fair#2", &["pk.b"], 1))
        .await
        .unwrap();
    let second = store
        .task_claim(claim("fair#2", &["pk.b"], 10))
        .await
        .unwrap();
    let mut seen: Vec<String> = first
        .tasks
        .iter()
        .chain(&second.tasks)
        .map(|t| t.concurrency_key.clone().unwrap())
        .collect();
    seen.sort();
    let distinct: BTreeSet<&String> = seen.iter().collect();
    assert_eq!(distinct.len(), seen.len(), "a key ran twice: {seen:?}");
    assert_eq!(seen.len(), 6, "busy plus the five late keys: {seen:?}");
    assert!(seen.contains(&"busy".to_string()));
    db.drop_db().await.unwrap();
}

conformance!(keys_take_turns_across_claims);
async fn keys_take_turns_across_claims(db: StoreDb) {
    let store = db.store();
    enqueue_keys(&*store, "pk.c", "k", 12, 5).await;
    // Claims of 4 with no limit: three claims serve twelve different keys, then the round
    // starts again.
    let mut served = Vec::new();
    for _ in 0..3 {
        let batch = store
            .task_claim(claim("turns#1", &["pk.c"], 4))
            .await
            .unwrap();
        assert_eq!(batch.tasks.len(), 4);
        served.extend(
            batch
                .tasks
                .iter()
                .map(|t| t.concurrency_key.clone().unwrap()),
        );
        complete_all(&*store, "turns#1", &batch.tasks).await;
    }
    let distinct: BTreeSet<&String> = served.iter().collect();
    assert_eq!(
        distinct.len(),
        12,
        "a round serves every key once: {served:?}"
    );
    let next = store
        .task_claim(claim("turns#1", &["pk.c"], 4))
        .await
        .unwrap();
    let keys: Vec<String> = next
        .tasks
        .iter()
        .map(|t| t.concurrency_key.clone().unwrap())
        .collect();
    assert_eq!(
        keys,
        ["k00", "k01", "k02", "k03"],
        "the next round starts over"
    );
    db.drop_db().await.unwrap();
}

conformance!(keyless_tasks_and_other_limits_still_apply_beside_a_per_key_limit);
async fn keyless_tasks_and_other_limits_still_apply_beside_a_per_key_limit(db: StoreDb) {
    let store = db.store();
    set_per_key(&*store, "pk.d", Some(2)).await;
    // Keyless tasks are not limited per key: five start at once.
    store
        .task_enqueue_many(
            (0..5)
                .map(|n| NewTask::new(tt("pk.d"), json!({ "n": n })))
                .collect(),
        )
        .await
        .unwrap();
    let batch = store
        .task_claim(claim("mix#1", &["pk.d"], 10))
        .await
        .unwrap();
    assert_eq!(batch.tasks.len(), 5);
    complete_all(&*store, "mix#1", &batch.tasks).await;

    // Two per key, and the type's own limit of three over all keys.
    let patch = PolicyPatch {
        max_concurrency: Some(Some(3)),
        ..Default::default()
    };
    set_type_policy(&*store, "pk.d", patch).await;
    store
        .task_enqueue_many(
            (0..4)
                .flat_map(|n| [keyed("pk.d", "x", n), keyed("pk.d", "y", n)])
                .collect(),
        )
        .await
        .unwrap();
    let batch = store
        .task_claim(claim("mix#2", &["pk.d"], 10))
        .await
        .unwrap();
    assert_eq!(batch.tasks.len(), 3, "the type limit caps the keys' four");
    let again = store
        .task_claim(claim("mix#3", &["pk.d"], 10))
        .await
        .unwrap();
    assert!(again.tasks.is_empty(), "type full");
    complete_all(&*store, "mix#2", &batch.tasks).await;
    let batch = store
        .task_claim(claim("mix#2", &["pk.d"], 10))
        .await
        .unwrap();
    let mut per: BTreeMap<String, usize> = BTreeMap::new();
    for t in &batch.tasks {
        *per.entry(t.concurrency_key.clone().unwrap()).or_default() += 1;
    }
    assert_eq!(batch.tasks.len(), 3);
    assert!(per.values().all(|n| *n <= 2), "{per:?}");

    // A paused type starts nothing, keyed or not.
    complete_all(&*store, "mix#2", &batch.tasks).await;
    let patch = PolicyPatch {
        paused: Some(true),
        ..Default::default()
    };
    set_type_policy(&*store, "pk.d", patch).await;
    let paused = store
        .task_claim(claim("mix#4", &["pk.d"], 10))
        .await
        .unwrap();
    assert!(paused.tasks.is_empty());
    db.drop_db().await.unwrap();
}

conformance!(priority_orders_keyed_and_keyless_tasks_together);
async fn priority_orders_keyed_and_keyless_tasks_together(db: StoreDb) {
    let store = db.store();
    store
        .task_enqueue_many(
            (0..3)
                .map(|n| NewTask::new(tt("pk.e"), json!({ "n": n })))
                .collect(),
        )
        .await
        .unwrap();
    let urgent = store
        .task_enqueue(keyed("pk.e", "vip", 0).with_priority(10))
        .await
        .unwrap()
        .id;
    let low = store
        .task_enqueue(keyed("pk.e", "slow", 0).with_priority(-10))
        .await
        .unwrap()
        .id;
    let batch = store
        .task_claim(claim("prio#1", &["pk.e"], 1))
        .await
        .unwrap();
    assert_eq!(
        batch.tasks[0].id, urgent,
        "the keyed task of priority 10 first"
    );
    let rest = store
        .task_claim(claim("prio#1", &["pk.e"], 10))
        .await
        .unwrap();
    assert_eq!(rest.tasks.len(), 4);
    assert_eq!(rest.tasks.last().unwrap().id, low, "priority -10 last");
    db.drop_db().await.unwrap();
}

conformance!(a_full_key_explains_itself_and_the_overview_shows_the_limit);
async fn a_full_key_explains_itself_and_the_overview_shows_the_limit(db: StoreDb) {
    let store = db.store();
    set_per_key(&*store, "pk.f", Some(1)).await;
    let ids: Vec<TaskId> = store
        .task_enqueue_many((0..3).map(|n| keyed("pk.f", "acme", n)).collect())
        .await
        .unwrap()
        .iter()
        .map(|e| e.id)
        .collect();
    let running = store
        .task_claim(claim("why#1", &["pk.f"], 5))
        .await
        .unwrap();
    assert_eq!(running.tasks.len(), 1);
    assert_eq!(running.tasks[0].concurrency_key.as_deref(), Some("acme"));
    let explain = |id| {
        let store = store.clone();
        async move {
            store
                .task_explain(ExplainParams {
                    id,
                    agent_stale_after: Duration::from_secs(30),
                })
                .await
                .unwrap()
        }
    };
    let third = explain(ids[2]).await;
    let full = third
        .iter()
        .find(|b| b.kind == BlockerKind::KeyLimit)
        .unwrap_or_else(|| panic!("no key limit in {third:?}"));
    assert_eq!(
        full.message,
        "per-key limit reached: 1/1 running with key \"acme\" (type pk.f)"
    );
    let behind = third
        .iter()
        .find(|b| b.kind == BlockerKind::BehindHigherPriority)
        .unwrap_or_else(|| panic!("not behind its key's second task: {third:?}"));
    assert!(
        behind.message.contains("behind 1 task of")
            && behind.message.ends_with("(key \"acme\" of type pk.f)"),
        "{}",
        behind.message
    );
    let detail = store.task_get(ids[0]).await.unwrap().unwrap();
    assert_eq!(detail.task.concurrency_key.as_deref(), Some("acme"));

    let overview = store.task_overview().await.unwrap();
    let row = overview
        .types
        .iter()
        .find(|t| t.task_type.as_str() == "pk.f")
        .unwrap();
    assert_eq!(row.per_key_limit, Some(1));
    assert_eq!(row.running, 1);

    // Cleared: the next claim starts the rest.
    set_per_key(&*store, "pk.f", None).await;
    let rest = store
        .task_claim(claim("why#2", &["pk.f"], 5))
        .await
        .unwrap();
    assert_eq!(rest.tasks.len(), 2);
    db.drop_db().await.unwrap();
}

conformance!(bad_keys_and_per_key_limits_change_nothing);
async fn bad_keys_and_per_key_limits_change_nothing(db: StoreDb) {
    let store = db.store();
    for bad in [String::new(), "x".repeat(201), "tab\there".to_string()] {
        let err = store
            .task_enqueue(keyed("pk.g", &bad, 0))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, StoreError::Invalid(e) if e.to_string().contains("concurrency_key")),
            "{bad:?}: {err:?}"
        );
    }
    assert_eq!(db.count("SELECT count(*) FROM tasks").await.unwrap(), 0);
    let before = store.policy_list().await.unwrap();
    for (scope, limit) in [
        (PolicyScope::Global, 1),
        (PolicyScope::Type(tt("pk.g")), 0),
        (PolicyScope::Type(tt("pk.g")), 1_000_001),
    ] {
        let err = store
            .policy_set(PolicySetParams {
                scope: scope.clone(),
                patch: PolicyPatch {
                    per_key_concurrency: Some(Some(limit)),
                    ..Default::default()
                },
                actor: Actor::operator("test"),
            })
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("per_key_concurrency"),
            "{scope:?} {limit}: {err}"
        );
    }
    assert_eq!(store.policy_list().await.unwrap(), before);
    db.drop_db().await.unwrap();
}

conformance!(overdue_keyed_tasks_of_a_shedding_type_are_shed);
async fn overdue_keyed_tasks_of_a_shedding_type_are_shed(db: StoreDb) {
    let store = db.store();
    let patch = PolicyPatch {
        shed_after: Some(Some(Duration::from_secs(30))),
        ..Default::default()
    };
    set_type_policy(&*store, "pk.h", patch).await;
    let mut ids = Vec::new();
    for (key, secs_ago) in [(Some("a"), 120.0), (Some("b"), 5.0), (None, 120.0)] {
        let id = db
            .insert_task(TaskSpec {
                available_in_secs: -secs_ago,
                ..TaskSpec::new("pk.h", "queued")
            })
            .await
            .unwrap();
        if let Some(key) = key {
            db.update_task(id, &[("concurrency_key", Val::Text(key.into()))])
                .await
                .unwrap();
        }
        ids.push(id);
    }
    let shed: BTreeSet<i64> = store
        .task_shed(ShedParams { limit: 100 })
        .await
        .unwrap()
        .iter()
        .map(|(id, _)| id.0)
        .collect();
    assert_eq!(
        shed,
        BTreeSet::from([ids[0], ids[2]]),
        "the keyed and the keyless overdue task"
    );
    assert_eq!(db.task_status(ids[1]).await.unwrap(), "queued");
    db.drop_db().await.unwrap();
}

/// The keys of the tasks a claim of `batch` of `task_type` started (completed at once).
async fn served(store: &dyn Store, owner: &str, task_type: &str, batch: u32) -> Vec<String> {
    let got = store
        .task_claim(claim(owner, &[task_type], batch))
        .await
        .unwrap();
    complete_all(store, owner, &got.tasks).await;
    got.tasks
        .iter()
        .map(|t| t.concurrency_key.clone().unwrap())
        .collect()
}

conformance!(a_key_that_wins_by_priority_does_not_hold_the_round_still);
async fn a_key_that_wins_by_priority_does_not_hold_the_round_still(db: StoreDb) {
    let store = db.store();
    let mut tasks = Vec::new();
    for key in ["a", "b", "c", "d", "e"] {
        for n in 0..10 {
            let priority = if key == "c" { 5 } else { 0 };
            tasks.push(keyed("pk.i", key, n).with_priority(priority));
        }
    }
    store.task_enqueue_many(tasks).await.unwrap();
    // Every claim of two takes c (priority 5) and one other key; the others take turns.
    let mut others = Vec::new();
    for _ in 0..4 {
        let keys = served(&*store, "prio#1", "pk.i", 2).await;
        assert!(keys.contains(&"c".to_string()), "{keys:?}");
        others.extend(keys.into_iter().filter(|k| k != "c"));
    }
    let distinct: BTreeSet<&String> = others.iter().collect();
    assert_eq!(distinct.len(), 4, "the keys below c took turns: {others:?}");
    db.drop_db().await.unwrap();
}

conformance!(keys_take_turns_when_a_type_limit_cuts_the_batch);
async fn keys_take_turns_when_a_type_limit_cuts_the_batch(db: StoreDb) {
    let store = db.store();
    // Key a's tasks are an hour old, key b's fresh: a cap of one must still alternate.
    for n in 0..4 {
        let id = db
            .insert_task(TaskSpec {
                available_in_secs: -3600.0,
                ..TaskSpec::new("pk.j", "queued")
            })
            .await
            .unwrap();
        db.update_task(id, &[("concurrency_key", Val::Text("a".into()))])
            .await
            .unwrap();
        let _ = n;
    }
    store
        .task_enqueue_many((0..4).map(|n| keyed("pk.j", "b", n)).collect())
        .await
        .unwrap();
    let patch = PolicyPatch {
        max_concurrency: Some(Some(1)),
        ..Default::default()
    };
    set_type_policy(&*store, "pk.j", patch).await;
    let mut order = Vec::new();
    for _ in 0..4 {
        order.extend(served(&*store, "cap#1", "pk.j", 5).await);
    }
    assert_eq!(order.len(), 4);
    assert!(
        order.windows(2).all(|w| w[0] != w[1]),
        "the older key won every time: {order:?}"
    );
    db.drop_db().await.unwrap();
}

conformance!(a_claim_with_no_room_for_the_type_leaves_its_round_where_it_was);
async fn a_claim_with_no_room_for_the_type_leaves_its_round_where_it_was(db: StoreDb) {
    let store = db.store();
    enqueue_keys(&*store, "pk.k", "k", 30, 2).await;
    let patch = PolicyPatch {
        max_concurrency: Some(Some(1)),
        ..Default::default()
    };
    set_type_policy(&*store, "pk.k", patch).await;
    let first = store
        .task_claim(claim("room#1", &["pk.k"], 1))
        .await
        .unwrap();
    assert_eq!(first.tasks[0].concurrency_key.as_deref(), Some("k00"));
    // The type is full: these claims start nothing and must not move its round.
    for _ in 0..3 {
        assert!(
            store
                .task_claim(claim("room#1", &["pk.k"], 1))
                .await
                .unwrap()
                .tasks
                .is_empty()
        );
    }
    complete_all(&*store, "room#1", &first.tasks).await;
    assert_eq!(served(&*store, "room#1", "pk.k", 1).await, ["k01"]);
    db.drop_db().await.unwrap();
}

conformance!(keys_with_nothing_due_neither_use_up_the_round_nor_shrink_the_batch);
async fn keys_with_nothing_due_neither_use_up_the_round_nor_shrink_the_batch(db: StoreDb) {
    let store = db.store();
    // A hundred keys with tasks due tomorrow sort before the one key with work due now.
    let mut later = Vec::new();
    for k in 0..100 {
        later.push(keyed("pk.l", &format!("a{k:03}"), 0).with_delay(Duration::from_secs(86_400)));
    }
    store.task_enqueue_many(later).await.unwrap();
    store
        .task_enqueue_many((0..40).map(|n| keyed("pk.l", "zz", n)).collect())
        .await
        .unwrap();
    // A claim walks at most four times as many keys as it wants; one that found nothing due
    // goes on from there next time, so the due key is reached within two claims.
    let mut got = Vec::new();
    for _ in 0..2 {
        got = served(&*store, "due#1", "pk.l", 10).await;
        if !got.is_empty() {
            break;
        }
    }
    assert_eq!(got.len(), 10, "the due key's share is the whole batch");

    // Full keys do not shrink the share of a key with room either.
    set_per_key(&*store, "pk.m", Some(5)).await;
    enqueue_keys(&*store, "pk.m", "full", 9, 6).await;
    let fill = store
        .task_claim(claim("due#2", &["pk.m"], 45))
        .await
        .unwrap();
    assert_eq!(fill.tasks.len(), 45, "nine keys at their limit of five");
    store
        .task_enqueue_many((0..20).map(|n| keyed("pk.m", "open", n)).collect())
        .await
        .unwrap();
    let got = store
        .task_claim(claim("due#3", &["pk.m"], 10))
        .await
        .unwrap();
    assert_eq!(
        got.tasks.len(),
        5,
        "the open key's limit, not a tenth of the batch"
    );
    db.drop_db().await.unwrap();
}
