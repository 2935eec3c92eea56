//! Store conformance: claiming. Exclusivity under concurrent claimers, exact global and per-type
//! limits (proved by a ledger of lease intervals in database time), claim order, paused types,
//! policies taking effect at the next claim — on PostgreSQL and SQLite alike. PostgreSQL only:
//! the advisory locks that serialise limited claims, an index-backed claim plan at 1,000,000
//! rows, and the bulk enqueue's buffer reads per row.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use leasehold_shared::domain::{PolicyPatch, PolicyScope};
use leasehold_shared::store::{NewTask, PolicySetParams};
use leasehold_shared::{Actor, Store};
use leasehold_tests::helpers::{claim, complete_all, tt};
use leasehold_tests::{StoreDb, TaskSpec, TestDb, conformance, insert_task};
use serde_json::json;
use sqlx::Row;

async fn set_policy(store: &dyn Store, scope: PolicyScope, patch: PolicyPatch) {
    store
        .policy_set(PolicySetParams {
            scope,
            patch,
            actor: Actor::operator("test"),
        })
        .await
        .unwrap();
}

fn limit(n: u32) -> PolicyPatch {
    PolicyPatch {
        max_concurrency: Some(Some(n)),
        ..Default::default()
    }
}

fn no_limit() -> PolicyPatch {
    PolicyPatch {
        max_concurrency: Some(None),
        ..Default::default()
    }
}

conformance!(
    eight_claimers_over_twenty_thousand_tasks_hold_each_exactly_once,
    worker_threads = 4
);
async fn eight_claimers_over_twenty_thousand_tasks_hold_each_exactly_once(db: StoreDb) {
    const TASKS: usize = 20_000;
    const CLAIMERS: usize = 8;
    let store = db.store_with_pool(CLAIMERS as u32 + 2).await.unwrap();
    let tasks: Vec<NewTask> = (0..TASKS)
        .map(|n| NewTask::new(tt("excl"), json!({ "n": n })))
        .collect();
    let enqueued = store.task_enqueue_many(tasks).await.unwrap();
    assert_eq!(enqueued.len(), TASKS);

    let mut claimers = tokio::task::JoinSet::new();
    for c in 0..CLAIMERS {
        let store = store.clone();
        claimers.spawn(async move {
            let owner = format!("claimer#{c}");
            let mut ledger = Vec::new();
            loop {
                let batch = store
                    .task_claim(claim(&owner, &["excl"], 1 + (c as u32 * 7) % 50))
                    .await
                    .unwrap();
                if batch.tasks.is_empty() {
                    return ledger;
                }
                for t in &batch.tasks {
                    assert_eq!(
                        t.lease_owner.as_ref().map(|o| o.as_str()),
                        Some(owner.as_str())
                    );
                    ledger.push((t.id, t.lease_epoch, owner.clone()));
                }
                complete_all(&*store, &owner, &batch.tasks).await;
            }
        });
    }
    let mut ledger = Vec::new();
    let mut per_claimer = Vec::new();
    while let Some(joined) = claimers.join_next().await {
        let part = joined.unwrap();
        per_claimer.push(part.len());
        ledger.extend(part);
    }
    // No task held twice, none lost or skipped.
    assert_eq!(ledger.len(), TASKS, "claims: {per_claimer:?}");
    let distinct: HashSet<_> = ledger.iter().map(|(id, _, _)| *id).collect();
    assert_eq!(distinct.len(), TASKS);
    let expected: HashSet<_> = enqueued.iter().map(|e| e.id).collect();
    assert_eq!(distinct, expected);
    assert!(
        ledger.iter().all(|(_, epoch, _)| epoch.0 == 1),
        "each task claimed by exactly one epoch"
    );
    assert!(
        per_claimer.iter().filter(|&&n| n > 0).count() > 1,
        "work was shared: {per_claimer:?}"
    );
    assert_eq!(
        db.count("SELECT count(*) FROM tasks WHERE status = 'succeeded'")
            .await
            .unwrap(),
        TASKS as i64
    );
    assert_eq!(
        db.count("SELECT count(*) FROM task_attempts")
            .await
            .unwrap(),
        TASKS as i64
    );
    db.drop_db().await.unwrap();
}

conformance!(
    sixteen_claimers_never_exceed_type_limit_three_or_global_limit_five,
    worker_threads = 4
);
async fn sixteen_claimers_never_exceed_type_limit_three_or_global_limit_five(db: StoreDb) {
    const CLAIMERS: usize = 16;
    let store = db.store_with_pool(CLAIMERS as u32 + 2).await.unwrap();
    set_policy(&*store, PolicyScope::Type(tt("lim.a")), limit(3)).await;
    set_policy(&*store, PolicyScope::Global, limit(5)).await;
    let mut tasks = Vec::new();
    for n in 0..300 {
        tasks.push(NewTask::new(tt("lim.a"), json!({ "n": n })));
        tasks.push(NewTask::new(tt("lim.b"), json!({ "n": n })));
    }
    store.task_enqueue_many(tasks).await.unwrap();

    let mut claimers = tokio::task::JoinSet::new();
    for c in 0..CLAIMERS {
        let store = store.clone();
        claimers.spawn(async move {
            let owner = format!("limited#{c}");
            let mut idle_rounds = 0;
            let mut max_seen_batch = 0;
            while idle_rounds < 200 {
                let batch = store
                    .task_claim(claim(&owner, &["lim.a", "lim.b"], 4))
                    .await
                    .unwrap();
                if batch.tasks.is_empty() {
                    idle_rounds += 1;
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    continue;
                }
                idle_rounds = 0;
                max_seen_batch = max_seen_batch.max(batch.tasks.len());
                // Hold the leases a moment so claimers really overlap.
                tokio::time::sleep(Duration::from_millis(3 + (c as u64 % 4))).await;
                complete_all(&*store, &owner, &batch.tasks).await;
            }
            max_seen_batch
        });
    }
    while let Some(joined) = claimers.join_next().await {
        assert!(joined.unwrap() <= 5);
    }
    assert_eq!(
        db.count("SELECT count(*) FROM tasks WHERE status <> 'succeeded'")
            .await
            .unwrap(),
        0
    );

    // The ledger: every lease interval in database time, from claim to completion.
    let rows = db.attempt_intervals().await.unwrap();
    assert_eq!(rows.len(), 600);
    let mut by_type: HashMap<String, Vec<(i64, i64)>> = HashMap::new();
    let mut all = Vec::new();
    for (task_type, started, finished) in rows {
        let interval = (started, finished);
        assert!(interval.0 <= interval.1);
        by_type.entry(task_type).or_default().push(interval);
        all.push(interval);
    }
    let a = max_overlap(&by_type["lim.a"]);
    let total = max_overlap(&all);
    assert!(a <= 3, "type limit 3 exceeded: {a} at once");
    assert!(total <= 5, "global limit 5 exceeded: {total} at once");
    // Positive control: the limits were actually reached, so the test could have failed.
    assert_eq!(
        total, 5,
        "claimers never filled the global limit; the test proves nothing"
    );
    assert!(
        a >= 2,
        "type a never ran concurrently; the test proves nothing"
    );
    db.drop_db().await.unwrap();
}

conformance!(claim_order_is_priority_then_due_time_then_id);
async fn claim_order_is_priority_then_due_time_then_id(db: StoreDb) {
    let store = db.store();
    let low_old = db
        .insert_task(TaskSpec {
            available_in_secs: -30.0,
            ..TaskSpec::new("order", "queued")
        })
        .await
        .unwrap();
    let high_new = db
        .insert_task(TaskSpec {
            priority: 5,
            available_in_secs: -1.0,
            ..TaskSpec::new("order", "queued")
        })
        .await
        .unwrap();
    let high_old = db
        .insert_task(TaskSpec {
            priority: 5,
            available_in_secs: -10.0,
            ..TaskSpec::new("order", "queued")
        })
        .await
        .unwrap();
    let retry_due = db
        .insert_task(TaskSpec {
            available_in_secs: -20.0,
            ..TaskSpec::new("order", "retry_wait")
        })
        .await
        .unwrap();
    let future = db
        .insert_task(TaskSpec {
            priority: 9,
            available_in_secs: 3600.0,
            ..TaskSpec::new("order", "queued")
        })
        .await
        .unwrap();
    let past_deadline = db
        .insert_task(TaskSpec {
            priority: 9,
            deadline_in_secs: Some(-1.0),
            ..TaskSpec::new("order", "queued")
        })
        .await
        .unwrap();
    let other_type = db
        .insert_task(TaskSpec {
            priority: 9,
            ..TaskSpec::new("other", "queued")
        })
        .await
        .unwrap();

    let mut order = Vec::new();
    loop {
        let batch = store
            .task_claim(claim("order#1", &["order"], 1))
            .await
            .unwrap();
        let Some(t) = batch.tasks.first() else { break };
        order.push(t.id.0);
    }
    assert_eq!(order, vec![high_old, high_new, low_old, retry_due]);
    for untouched in [future, past_deadline, other_type] {
        assert_eq!(db.task_status(untouched).await.unwrap(), "queued");
    }
    db.drop_db().await.unwrap();
}

conformance!(policies_take_effect_at_the_next_claim);
async fn policies_take_effect_at_the_next_claim(db: StoreDb) {
    let store = db.store();
    let tasks: Vec<NewTask> = (0..10)
        .map(|_| NewTask::new(tt("pol"), json!({})))
        .collect();
    store.task_enqueue_many(tasks).await.unwrap();

    set_policy(
        &*store,
        PolicyScope::Type(tt("pol")),
        PolicyPatch {
            paused: Some(true),
            ..Default::default()
        },
    )
    .await;
    assert!(
        store
            .task_claim(claim("p#1", &["pol"], 10))
            .await
            .unwrap()
            .tasks
            .is_empty(),
        "paused type"
    );

    set_policy(
        &*store,
        PolicyScope::Type(tt("pol")),
        PolicyPatch {
            paused: Some(false),
            max_concurrency: Some(Some(2)),
            ..Default::default()
        },
    )
    .await;
    let first = store.task_claim(claim("p#1", &["pol"], 10)).await.unwrap();
    assert_eq!(first.tasks.len(), 2, "type limit 2");

    set_policy(&*store, PolicyScope::Type(tt("pol")), limit(5)).await;
    let second = store.task_claim(claim("p#1", &["pol"], 10)).await.unwrap();
    assert_eq!(second.tasks.len(), 3, "raised live to 5, 2 already running");

    set_policy(
        &*store,
        PolicyScope::Global,
        PolicyPatch {
            paused: Some(true),
            ..Default::default()
        },
    )
    .await;
    set_policy(&*store, PolicyScope::Type(tt("pol")), no_limit()).await;
    assert!(
        store
            .task_claim(claim("p#1", &["pol"], 10))
            .await
            .unwrap()
            .tasks
            .is_empty(),
        "global pause"
    );

    set_policy(
        &*store,
        PolicyScope::Global,
        PolicyPatch {
            paused: Some(false),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(
        store
            .task_claim(claim("p#1", &["pol"], 10))
            .await
            .unwrap()
            .tasks
            .len(),
        5,
        "limit removed"
    );

    let global = store.policy_get(PolicyScope::Global).await.unwrap();
    assert!(!global.paused);
    assert_eq!(
        global.retry_base,
        Some(Duration::from_secs(30)),
        "migration defaults match the Rust defaults"
    );
    assert_eq!(
        global.retry_multiplier,
        Some(leasehold_shared::domain::policy::DEFAULT_RETRY_MULTIPLIER)
    );
    assert_eq!(
        global.retry_max,
        Some(leasehold_shared::domain::policy::DEFAULT_RETRY_MAX)
    );
    assert_eq!(
        global.retry_jitter,
        Some(leasehold_shared::domain::policy::DEFAULT_RETRY_JITTER)
    );
    assert_eq!(
        global.timeout,
        Some(leasehold_shared::domain::policy::DEFAULT_TIMEOUT)
    );
    assert_eq!(
        global.slow_threshold,
        Some(leasehold_shared::domain::policy::DEFAULT_SLOW_THRESHOLD)
    );
    db.drop_db().await.unwrap();
}

conformance!(a_claimed_task_is_exactly_the_row_the_database_holds);
/// A claim sends back only what it did not set itself and fills the rest in: what it returns
/// must be exactly the row the database now holds, for fresh, retried and prioritised tasks.
async fn a_claimed_task_is_exactly_the_row_the_database_holds(db: StoreDb) {
    let store = db.store();
    db.insert_task(TaskSpec {
        priority: 5,
        deadline_in_secs: Some(3600.0),
        timeout_ms: Some(90_000),
        idempotency_key: Some("exact-1".into()),
        payload: json!({"n": 1, "s": "é"}),
        ..TaskSpec::new("exact", "queued")
    })
    .await
    .unwrap();
    // A retried task carries its last error and attempt count into the claim.
    db.insert_task(TaskSpec::new("exact", "retry_wait"))
        .await
        .unwrap();
    db.insert_task(TaskSpec::new("exact", "queued"))
        .await
        .unwrap();
    let batch = store
        .task_claim(claim("exact#1", &["exact"], 10))
        .await
        .unwrap();
    assert_eq!(batch.tasks.len(), 3);
    for claimed in &batch.tasks {
        let stored = store.task_get(claimed.id).await.unwrap().unwrap().task;
        assert_eq!(claimed, &stored);
        assert_eq!(claimed.started_at, Some(batch.now));
    }
    assert!(batch.tasks.iter().any(|t| t.last_error.is_some()));
    db.drop_db().await.unwrap();
}
/// Largest number of intervals open at one instant (end is exclusive).
fn max_overlap(intervals: &[(i64, i64)]) -> usize {
    let mut events: Vec<(i64, i32)> = intervals
        .iter()
        .flat_map(|&(s, e)| [(s, 1), (e, -1)])
        .collect();
    events.sort_by_key(|&(t, delta)| (t, delta));
    let (mut open, mut max) = (0i32, 0i32);
    for (_, delta) in events {
        open += delta;
        max = max.max(open);
    }
    max as usize
}

#[test]
fn overlap_counts_instants() {
    assert_eq!(max_overlap(&[(0, 10), (5, 15), (10, 20)]), 2);
    assert_eq!(max_overlap(&[(0, 10), (10, 20)]), 1);
    assert_eq!(max_overlap(&[]), 0);
}

// PostgreSQL only: holds the type scope's advisory lock, which SQLite has no counterpart of.
#[tokio::test]
async fn with_limit_one_and_a_claim_held_open_a_second_claimer_gets_nothing() {
    let db = TestDb::new().await.unwrap();
    let store = db.store();
    set_policy(&store, PolicyScope::Type(tt("single")), limit(1)).await;
    store
        .task_enqueue_many(vec![
            NewTask::new(tt("single"), json!({})),
            NewTask::new(tt("single"), json!({})),
        ])
        .await
        .unwrap();

    // Claimer 1, mid-claim: holds the scope's advisory lock in an open transaction.
    let mut open = db.pool.begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock(19528, hashtext('single'))")
        .execute(&mut *open)
        .await
        .unwrap();
    let first_claim = sqlx::query(
        "UPDATE tasks SET status = 'running', lease_owner = 'one#1', lease_epoch = lease_epoch + 1,
                attempt = attempt + 1, lease_until = now() + interval '1 minute', heartbeat_at = now()
         WHERE id = (SELECT min(id) FROM tasks WHERE task_type = 'single')",
    )
    .execute(&mut *open)
    .await
    .unwrap();
    assert_eq!(first_claim.rows_affected(), 1);

    let second = store
        .task_claim(claim("two#1", &["single"], 10))
        .await
        .unwrap();
    assert!(
        second.tasks.is_empty(),
        "second claimer must get nothing while the first claim is open"
    );
    assert!(
        second.contended,
        "the busy scope is reported so the caller retries soon"
    );

    open.commit().await.unwrap();
    let third = store
        .task_claim(claim("two#1", &["single"], 10))
        .await
        .unwrap();
    assert!(
        third.tasks.is_empty(),
        "limit 1 is taken by the committed claim"
    );
    assert!(!third.contended);
    db.drop_db().await.unwrap();
}

fn plan_nodes(plan: &serde_json::Value, out: &mut Vec<(String, String)>) {
    let node = plan["Node Type"].as_str().unwrap_or_default().to_string();
    let relation = plan["Relation Name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let index = plan["Index Name"].as_str().unwrap_or_default().to_string();
    out.push((node, if index.is_empty() { relation } else { index }));
    if let Some(children) = plan["Plans"].as_array() {
        for child in children {
            plan_nodes(child, out);
        }
    }
}

/// Index scans of `tasks` (or a partition of it) that have no index condition: walks of a whole
/// index. The leased index is left out: it holds the running tasks only (at most the agents'
/// concurrency), and a count of all of them (the global limit) walks it by design.
fn unbounded_index_scans(plan: &serde_json::Value, out: &mut Vec<String>) {
    let node = plan["Node Type"].as_str().unwrap_or_default();
    if node.starts_with("Index")
        && is_tasks(plan["Relation Name"].as_str().unwrap_or_default())
        && plan["Index Name"] != "tasks_leased_type_idx"
        && plan.get("Index Cond").is_none()
    {
        out.push(plan["Index Name"].as_str().unwrap_or_default().to_string());
    }
    if let Some(children) = plan["Plans"].as_array() {
        for child in children {
            unbounded_index_scans(child, out);
        }
    }
}

/// `tasks` or one of its partitions (plans name the partition they read, as `tasks_live`).
fn is_tasks(relation: &str) -> bool {
    relation == "tasks" || relation.starts_with("tasks_live") || relation.starts_with("tasks_done")
}

/// The plan node named `name` (a CTE's subplan is named "CTE <name>"), depth first.
fn plan_node<'p>(plan: &'p serde_json::Value, name: &str) -> Option<&'p serde_json::Value> {
    if plan["Subplan Name"] == name {
        return Some(plan);
    }
    plan["Plans"]
        .as_array()?
        .iter()
        .find_map(|child| plan_node(child, name))
}

// PostgreSQL only: the bulk enqueue draws each id with one read of the sequence. Written as
// nextval(pg_get_serial_sequence('tasks', 'id')), the lookup of the sequence by name and the
// cast to regclass ran per row: four buffer reads a row instead of one, a sixth of the time of
// a 10,000-row enqueue. Counted in buffers, which do not depend on the machine's speed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_enqueue_reads_the_sequence_once_per_row_and_its_name_once() {
    const ROWS: usize = 2_000;
    let db = TestDb::new().await.unwrap();
    // Both bulk statements draw the ids the same way: with keys, and without.
    for sql in [
        include_str!("../../shared/src/store/postgres/sql/task_enqueue_many.sql"),
        include_str!("../../shared/src/store/postgres/sql/task_enqueue_many_keyless.sql"),
    ] {
        bulk_enqueue_sequence_reads(&db, sql, ROWS).await;
    }
    db.drop_db().await.unwrap();
}

/// `explain` (an EXPLAIN with options) of the bulk enqueue statement `sql` over `rows` plain
/// tasks without keys, in a transaction rolled back after: the plan as JSON.
async fn explain_bulk(db: &TestDb, explain: &str, sql: &str, rows: usize) -> serde_json::Value {
    let mut tx = db.pool.begin().await.unwrap();
    let row = sqlx::query(sqlx::AssertSqlSafe(format!("{explain} {sql}")))
        .bind(vec!["bulk.a"; rows])
        .bind(vec!["{}"; rows])
        .bind(vec![0i16; rows])
        .bind(vec![0i64; rows])
        .bind(vec![None::<chrono::DateTime<chrono::Utc>>; rows])
        .bind(vec![None::<chrono::DateTime<chrono::Utc>>; rows])
        .bind(vec![None::<i64>; rows])
        .bind(vec![25i32; rows])
        .bind(vec![None::<String>; rows])
        .bind(vec![None::<String>; rows])
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    let sqlx::types::Json(plan): sqlx::types::Json<serde_json::Value> = row.get(0);
    plan
}

async fn bulk_enqueue_sequence_reads(db: &TestDb, sql: &str, rows: usize) {
    let plan = explain_bulk(db, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)", sql, rows).await;
    let input = plan_node(&plan[0]["Plan"], "CTE input")
        .unwrap_or_else(|| panic!("no CTE input in the plan: {plan}"));
    assert_eq!(input["Actual Rows"].as_f64(), Some(rows as f64), "{input}");
    let hits = input["Shared Hit Blocks"].as_u64().unwrap()
        + input["Shared Read Blocks"].as_u64().unwrap();
    assert!(
        hits < rows as u64 * 3 / 2,
        "drawing {rows} ids read {hits} buffers: the sequence is looked up per row"
    );
}

// PostgreSQL only: reads the plan of the bulk statement without keys.
#[tokio::test]
async fn a_bulk_enqueue_without_keys_plans_no_read_of_tasks_and_keeps_input_order() {
    let db = TestDb::new().await.unwrap();
    // A queue the planner has no statistics for (as right after a bulk load): the keyed
    // statement plans a sort or a scan of all of it to look for existing holders, and with
    // custom plans took a second for 10,000 rows here.
    sqlx::query("INSERT INTO tasks (task_type) SELECT 'bulk.old' FROM generate_series(1, 50000)")
        .execute(&db.pool)
        .await
        .unwrap();
    let sql = include_str!("../../shared/src/store/postgres/sql/task_enqueue_many_keyless.sql");
    let plan = explain_bulk(&db, "EXPLAIN (FORMAT JSON)", sql, 500).await;
    let mut nodes = Vec::new();
    plan_nodes(&plan[0]["Plan"], &mut nodes);
    let reads: Vec<&(String, String)> = nodes
        .iter()
        .filter(|(kind, relation)| kind != "ModifyTable" && relation.starts_with("tasks"))
        .collect();
    assert!(
        reads.is_empty(),
        "the keyless bulk enqueue reads tasks: {reads:?}\n{plan}"
    );
    // Through the store: every task created, ids in input order, each row the task it says.
    let limits = leasehold_shared::InputLimits::default();
    let tasks: Vec<NewTask> = (0..3_000)
        .map(|n| NewTask::new(tt("bulk.new"), json!({ "n": n })))
        .collect();
    let mut tx = db.pool.begin().await.unwrap();
    let out =
        leasehold_shared::store::postgres::enqueue::task_enqueue_many(&mut *tx, &tasks, &limits)
            .await
            .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(out.len(), tasks.len());
    assert!(out.iter().all(|e| e.created));
    let rows: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT id, (payload->>'n')::bigint FROM tasks WHERE task_type = 'bulk.new' ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let expected: Vec<(i64, i64)> = out.iter().zip(0..).map(|(e, n)| (e.id.0, n)).collect();
    assert_eq!(rows, expected, "ids follow input order");
    // With a key in the batch the keyed statement still finds the holder.
    let keyed = vec![
        NewTask::new(tt("bulk.new"), json!({})).with_idempotency_key("bulk-k"),
        NewTask::new(tt("bulk.new"), json!({})),
        NewTask::new(tt("bulk.new"), json!({})).with_idempotency_key("bulk-k"),
    ];
    let mut tx = db.pool.begin().await.unwrap();
    let out =
        leasehold_shared::store::postgres::enqueue::task_enqueue_many(&mut *tx, &keyed, &limits)
            .await
            .unwrap();
    tx.commit().await.unwrap();
    assert!(out[0].created && out[1].created && !out[2].created);
    assert_eq!(out[0].id, out[2].id);
    db.drop_db().await.unwrap();
}

// PostgreSQL only: reads the leased index's definition and plans.
#[tokio::test]
async fn the_leased_index_keys_a_types_running_tasks_by_id_and_still_serves_counts() {
    let db = TestDb::new().await.unwrap();
    // Every claim adds an entry to this index. Keyed by type (and concurrency key) alone, all
    // running tasks of a keyless type share one key: a posting list each claim splits in the
    // middle. With the id last a claim appends at the right edge (issue 22: about a tenth of
    // the database's CPU a task in the bench).
    let columns: Vec<String> = sqlx::query_scalar(
        "SELECT a.attname::text
         FROM pg_index i, unnest(i.indkey) WITH ORDINALITY AS k(attnum, n), pg_attribute a
         WHERE i.indexrelid = 'tasks_leased_type_idx'::regclass
           AND a.attrelid = i.indrelid AND a.attnum = k.attnum
         ORDER BY k.n",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(columns, ["task_type", "concurrency_key", "id"]);
    let store = db.store();
    for n in 0..40 {
        store
            .task_enqueue(NewTask::new(tt("leased.a"), json!({ "n": n })))
            .await
            .unwrap();
    }
    for n in 0..5 {
        store
            .task_enqueue(NewTask::new(tt("leased.a"), json!({ "k": n })).with_concurrency_key("k"))
            .await
            .unwrap();
    }
    let mut running = 0;
    while running < 45 {
        let claimed = store
            .task_claim(claim("leased#1", &["leased.a"], 45))
            .await
            .unwrap();
        assert!(!claimed.tasks.is_empty(), "{running} of 45 claimed");
        running += claimed.tasks.len();
    }
    // Most of the table is waiting work of another type.
    sqlx::query("INSERT INTO tasks (task_type) SELECT 'leased.b' FROM generate_series(1, 20000)")
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query("ANALYZE tasks_live")
        .execute(&db.pool)
        .await
        .unwrap();
    // The readers keep the prefix: a type's running count (a claim under a type limit) and a
    // key's (per-key limits) read the index, not the table.
    for (filter, running) in [
        ("r.task_type = 'leased.a'", 45i64),
        ("r.task_type = 'leased.a' AND r.concurrency_key IS NULL", 40),
        ("r.task_type = 'leased.a' AND r.concurrency_key = 'k'", 5),
    ] {
        let count = format!(
            "SELECT count(*) FROM tasks r WHERE r.done_on = 'infinity'
               AND r.status IN ('running', 'cancel_requested') AND {filter}"
        );
        let plan: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("EXPLAIN {count}")))
            .fetch_all(&db.pool)
            .await
            .unwrap();
        let plan = plan.join("\n");
        assert!(plan.contains("tasks_leased_type_idx"), "{filter}:\n{plan}");
        let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(count))
            .fetch_one(&db.pool)
            .await
            .unwrap();
        assert_eq!(n, running, "{filter}");
    }
    db.drop_db().await.unwrap();
}

// PostgreSQL only: checks PostgreSQL query plans (EXPLAIN) of the claim and listing statements.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_million_queued_tasks_the_claim_plan_uses_the_claim_index() {
    let db = TestDb::new().await.unwrap();
    let store = db.store();
    sqlx::query(
        "INSERT INTO tasks (task_type, payload, priority, available_at)
         SELECT CASE WHEN n % 10 = 0 THEN 'big.b' ELSE 'big.a' END, jsonb_build_object('n', n), (n % 3)::smallint,
                now() - make_interval(secs => n % 1000)
         FROM generate_series(1, 1000000) AS n",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    // Some finished rows too, as in production.
    sqlx::query("UPDATE tasks SET status = 'succeeded', finished_at = now() WHERE id % 50 = 0")
        .execute(&db.pool)
        .await
        .unwrap();

    let lock_sql = include_str!("../../shared/src/store/postgres/sql/task_claim_lock.sql");
    let claim_sql = include_str!("../../shared/src/store/postgres/sql/task_claim.sql");
    let explain = format!("EXPLAIN (FORMAT JSON) {claim_sql}");
    // Stale statistics right after the bulk load (what a claimer meets first), then analysed;
    // each with the custom plan and the generic plan a prepared statement settles on. The plan
    // is made exactly as a claim makes it: inside a transaction after the lock statement.
    for analysed in [false, true] {
        if analysed {
            sqlx::query("ANALYZE tasks")
                .execute(&db.pool)
                .await
                .unwrap();
        }
        for mode in leasehold_tests::helpers::PLAN_MODES {
            let mut tx = leasehold_tests::helpers::tx_planning(&db.pool, mode).await;
            sqlx::query(lock_sql)
                .bind(vec!["big.a", "big.b"])
                .fetch_all(&mut *tx)
                .await
                .unwrap();
            let row = sqlx::query(sqlx::AssertSqlSafe(explain.clone()))
                .bind("bench#1")
                .bind(vec!["big.a", "big.b"])
                .bind(100i64)
                .bind(30.0f64)
                .bind(Vec::<String>::new())
                .fetch_one(&mut *tx)
                .await
                .unwrap();
            tx.rollback().await.unwrap();
            let sqlx::types::Json(plan): sqlx::types::Json<serde_json::Value> = row.get(0);
            let mut nodes = Vec::new();
            plan_nodes(&plan[0]["Plan"], &mut nodes);
            let what = format!("{mode}, analysed {analysed}");
            assert!(
                nodes
                    .iter()
                    .any(|(node, name)| node.starts_with("Index") && name == "tasks_claim_idx"),
                "{what}: claim must scan tasks_claim_idx: {nodes:?}"
            );
            assert!(
                !nodes.iter().any(|(node, name)| (node == "Seq Scan"
                    || node == "Bitmap Heap Scan")
                    && is_tasks(name)),
                "{what}: no full or bitmap scan of tasks: {nodes:?}"
            );
            // The chosen rows are looked up by key: no join that would walk a whole index.
            assert!(
                !nodes
                    .iter()
                    .any(|(node, _)| node == "Merge Join" || node == "Hash Join"),
                "{what}: index nested loops only: {nodes:?}"
            );
            let mut unbounded = Vec::new();
            unbounded_index_scans(&plan[0]["Plan"], &mut unbounded);
            assert!(
                unbounded.is_empty(),
                "{what}: index scans of tasks without a condition: {unbounded:?}"
            );
        }
    }
    // Listings under generic plans: the dead-letter page walks its own index from the cursor.
    sqlx::query("UPDATE tasks SET status = 'dead', finished_at = now() WHERE id % 1000 = 7")
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query("ANALYZE tasks")
        .execute(&db.pool)
        .await
        .unwrap();
    let dead_sql = concat!(
        include_str!("../../shared/src/store/postgres/sql/task_list_dead.sql"),
        include_str!("../../shared/src/store/postgres/sql/task_list_page.sql"),
    );
    let mut conn = db.pool.acquire().await.unwrap();
    sqlx::query("SET plan_cache_mode = force_generic_plan")
        .execute(&mut *conn)
        .await
        .unwrap();
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "EXPLAIN (FORMAT JSON) {dead_sql}"
    )))
    .bind(vec!["dead"])
    .bind(None::<String>)
    .bind(None::<String>)
    .bind(Some(500_000i64))
    .bind(100i64)
    .bind(None::<String>)
    .bind(None::<chrono::DateTime<chrono::Utc>>)
    .bind(None::<bool>)
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    drop(conn);
    let sqlx::types::Json(plan): sqlx::types::Json<serde_json::Value> = row.get(0);
    let mut nodes = Vec::new();
    plan_nodes(&plan[0]["Plan"], &mut nodes);
    assert!(
        nodes
            .iter()
            .any(|(node, name)| node.starts_with("Index") && name == "tasks_dead_idx"),
        "dead-letter page: {nodes:?}"
    );
    let page = store
        .task_list(leasehold_shared::store::TaskListParams {
            statuses: vec![leasehold_shared::domain::TaskStatus::Dead],
            before: Some(leasehold_shared::TaskId(500_000)),
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(page.tasks.len(), 100);
    assert!(
        page.tasks
            .iter()
            .all(|t| t.id.0 < 500_000 && t.id.0 % 1000 == 7)
    );

    // And the claim itself works; its latency is reported, not asserted.
    let started = std::time::Instant::now();
    let batch = store
        .task_claim(claim("big#1", &["big.a", "big.b"], 100))
        .await
        .unwrap();
    eprintln!(
        "claim of 100 from 1,000,000 queued: {:?}",
        started.elapsed()
    );
    assert_eq!(batch.tasks.len(), 100);
    db.drop_db().await.unwrap();
}

// PostgreSQL only: holds the policy guard (an advisory lock) the way a claim in flight does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_limit_waits_for_claims_in_flight_that_read_the_old_policy() {
    let db = TestDb::new().await.unwrap();
    let store = db.store();
    let tasks: Vec<NewTask> = (0..10)
        .map(|_| NewTask::new(tt("fresh"), json!({})))
        .collect();
    store.task_enqueue_many(tasks).await.unwrap();

    // Claimer X, mid-claim while "fresh" is unlimited: it holds the policy guard shared and has
    // taken 3 rows, uncommitted.
    let mut x = db.pool.begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock_shared(19529, 0)")
        .execute(&mut *x)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE tasks SET status = 'running', lease_owner = 'x#1', lease_epoch = lease_epoch + 1, attempt = 1,
                lease_until = now() + interval '1 minute', heartbeat_at = now()
         WHERE id IN (SELECT id FROM tasks WHERE task_type = 'fresh' ORDER BY id LIMIT 3)",
    )
    .execute(&mut *x)
    .await
    .unwrap();

    let setting = {
        let store = store.clone();
        tokio::spawn(
            async move { set_policy(&store, PolicyScope::Type(tt("fresh")), limit(2)).await },
        )
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !setting.is_finished(),
        "the new limit must wait for the claim in flight"
    );
    x.commit().await.unwrap();
    setting.await.unwrap();

    // Now the limit is in force and counts X's claims: nobody gets more.
    let y = store
        .task_claim(claim("y#1", &["fresh"], 10))
        .await
        .unwrap();
    assert!(y.tasks.is_empty(), "3 running against a new limit of 2");
    db.drop_db().await.unwrap();
}

// PostgreSQL only: stalls a claim holding the policy guard (an advisory lock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_change_behind_a_stalled_claim_gives_up_instead_of_stopping_every_claimer() {
    let db = TestDb::new().await.unwrap();
    let store = db.store();
    // A claim transaction that stalled after taking the guard.
    let mut stalled = db.pool.begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock_shared(19529, 0)")
        .execute(&mut *stalled)
        .await
        .unwrap();
    let before = store.policy_list().await.unwrap();
    let out = store
        .policy_set(PolicySetParams {
            scope: PolicyScope::Global,
            patch: limit(3),
            actor: Actor::operator("op"),
        })
        .await;
    assert!(
        matches!(out, Err(leasehold_shared::StoreError::Busy { .. })),
        "{out:?}"
    );
    assert!(out.unwrap_err().to_string().contains("nothing changed"));
    assert_eq!(store.policy_list().await.unwrap(), before);
    let audit = leasehold_tests::audit_rows(&db.pool).await.unwrap();
    assert_eq!(
        audit.last().map(|r| (r.2.as_str(), r.4.as_str())),
        Some(("policy_set", "failed"))
    );
    // Claims are not held up once the change gave up.
    store
        .task_enqueue(NewTask::new(tt("after"), json!({})))
        .await
        .unwrap();
    assert_eq!(
        store
            .task_claim(claim("c#1", &["after"], 1))
            .await
            .unwrap()
            .tasks
            .len(),
        1
    );
    stalled.rollback().await.unwrap();
    db.drop_db().await.unwrap();
}

/// (node type, times it ran) of every node of an `EXPLAIN (ANALYZE, FORMAT JSON)` plan.
fn plan_loops(plan: &serde_json::Value, out: &mut Vec<(String, i64)>) {
    let node = plan["Node Type"].as_str().unwrap_or_default().to_string();
    out.push((node, plan["Actual Loops"].as_i64().unwrap_or(-1)));
    if let Some(children) = plan["Plans"].as_array() {
        for child in children {
            plan_loops(child, out);
        }
    }
}

/// Runs one claim of `batch` exactly as the store does (lock statement, then the claim, in one
/// transaction) under EXPLAIN ANALYZE, rolls it back, and returns how often its window ranking
/// ran and how many rows it claimed.
async fn claim_ranking_runs(db: &TestDb, types: Vec<&str>, batch: i64) -> (i64, i64) {
    let lock_sql = include_str!("../../shared/src/store/postgres/sql/task_claim_lock.sql");
    let claim_sql = include_str!("../../shared/src/store/postgres/sql/task_claim.sql");
    let mut tx = db.pool.begin().await.unwrap();
    let locked: Vec<String> = sqlx::query(lock_sql)
        .bind(types.clone())
        .fetch_all(&mut *tx)
        .await
        .unwrap()
        .iter()
        .filter_map(|row| {
            let scope: Option<String> = row.get("scope");
            let locked: Option<bool> = row.get("locked");
            scope.filter(|_| locked == Some(true))
        })
        .collect();
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "EXPLAIN (ANALYZE, FORMAT JSON) {claim_sql}"
    )))
    .bind("rank#1")
    .bind(types)
    .bind(batch)
    .bind(30.0f64)
    .bind(locked)
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    tx.rollback().await.unwrap();
    let sqlx::types::Json(plan): sqlx::types::Json<serde_json::Value> = row.get(0);
    let mut nodes = Vec::new();
    plan_loops(&plan[0]["Plan"], &mut nodes);
    let window = nodes
        .iter()
        .find(|(node, _)| node == "WindowAgg")
        .map(|(_, loops)| *loops)
        .unwrap_or_else(|| panic!("the claim plan has no ranking: {nodes:?}"));
    (
        window,
        plan[0]["Plan"]["Actual Rows"].as_i64().unwrap_or(-1),
    )
}

/// The per-type ranking (a sort, a window and a join per claim) runs only when a cap can cut
/// the batch: with no limit in the way every candidate is taken as it is.
// PostgreSQL only: counts node runs in an EXPLAIN ANALYZE plan of the PostgreSQL claim.
#[tokio::test]
async fn claims_rank_candidates_only_when_a_cap_can_cut_the_batch() {
    let db = TestDb::new().await.unwrap();
    let store = db.store();
    for n in 0..20 {
        insert_task(
            &db.pool,
            TaskSpec {
                priority: (n % 3) as i16,
                ..TaskSpec::new("rank.a", "queued")
            },
        )
        .await
        .unwrap();
    }
    assert_eq!(
        claim_ranking_runs(&db, vec!["rank.a"], 10).await,
        (0, 10),
        "no limit: the ranking must not run"
    );
    // A global limit above the batch cannot cut it either.
    set_policy(&store, PolicyScope::Global, limit(50)).await;
    assert_eq!(claim_ranking_runs(&db, vec!["rank.a"], 10).await, (0, 10));
    // A global limit below the batch, then a type limit: ranked, and cut to the limit.
    set_policy(&store, PolicyScope::Global, limit(4)).await;
    assert_eq!(claim_ranking_runs(&db, vec!["rank.a"], 10).await, (1, 4));
    set_policy(&store, PolicyScope::Global, no_limit()).await;
    set_policy(&store, PolicyScope::Type(tt("rank.a")), limit(3)).await;
    assert_eq!(claim_ranking_runs(&db, vec!["rank.a"], 10).await, (1, 3));
    // What the real claim does agrees.
    let batch = store
        .task_claim(claim("rank#2", &["rank.a"], 10))
        .await
        .unwrap();
    assert_eq!(batch.tasks.len(), 3);
    db.drop_db().await.unwrap();
}
