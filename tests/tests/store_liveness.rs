#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Store conformance for issue 18 (hole 2): each agent publishes its own liveness deadline
//! (`agents.alive_until`, database time), set at registration and pushed on by the renewal
//! statement of its heartbeat connection, and the unserved-type check judges each agent by that
//! deadline, never by the caller's (the leader's) TTL + grace. Rows without a deadline (agents
//! from before it) fall back to their registry heartbeat. PostgreSQL and SQLite alike.

use std::time::Duration;

use leasehold_shared::store::{AgentRecord, AgentRegisterParams, RenewParams, UnservedParams};
use leasehold_shared::{AgentId, StoreError, TaskId, TaskType};
use leasehold_tests::helpers::tt;
use leasehold_tests::{Rows, StoreDb, TaskSpec, Val, conformance};

/// The leader's timings: anything not heard from for 3 s is stale to it.
const LEADER_STALE: Duration = Duration::from_secs(3);

fn params() -> UnservedParams {
    UnservedParams {
        due_for: Duration::from_secs(1),
        legacy_stale_after: LEADER_STALE,
        limit: 100,
    }
}

fn register(name: &str, types: &[&str], alive_for: Duration) -> AgentRegisterParams {
    AgentRegisterParams {
        name: name.into(),
        host: "host-a".into(),
        pid: 7,
        grpc_address: None,
        version: "0.1.0".into(),
        task_types: types.iter().map(|t| tt(t)).collect(),
        local_concurrency: 1,
        alive_for,
    }
}

/// Registers agent `name` serving `types` with a liveness deadline `alive_for` from now.
async fn join(db: &StoreDb, name: &str, types: &[&str], alive_for: Duration) -> AgentRecord {
    db.store()
        .agent_register(register(name, types, alive_for))
        .await
        .unwrap()
}

/// Sets columns of agent `id`'s registry row.
async fn set_agent(db: &StoreDb, id: &AgentId, set: &[(&str, Val)]) {
    db.update(Rows::Agent(id.as_str()), set).await.unwrap();
}

/// Runs the unserved-type check with the leader's [`params`]: the tasks it dead-lettered.
async fn unserved(db: &StoreDb) -> Vec<(TaskId, TaskType)> {
    db.store()
        .task_dead_letter_unserved(params())
        .await
        .unwrap()
}

async fn record(db: &StoreDb, id: &AgentId) -> AgentRecord {
    db.store()
        .agent_list()
        .await
        .unwrap()
        .into_iter()
        .find(|a| &a.id == id)
        .unwrap()
}

/// Seconds from the row's read time to its liveness deadline.
fn alive_for_secs(a: &AgentRecord) -> f64 {
    let until = a.alive_until.expect("a liveness deadline");
    (until - a.now).num_milliseconds() as f64 / 1000.0
}

fn overdue(task_type: &str) -> TaskSpec {
    TaskSpec {
        available_in_secs: -120.0,
        ..TaskSpec::new(task_type, "queued")
    }
}

conformance!(a_slow_beating_agent_keeps_its_types_served_until_its_own_deadline);
async fn a_slow_beating_agent_keeps_its_types_served_until_its_own_deadline(db: StoreDb) {
    let store = db.store();
    // A leader judging by 3 s, and a worker that promised to be alive for 60 s.
    let leader = join(&db, "leader", &["noop"], Duration::from_secs(3)).await;
    let worker = join(&db, "slow-beat", &["report"], Duration::from_secs(60)).await;
    let got = alive_for_secs(&worker);
    assert!((59.0..=60.5).contains(&got), "registered deadline {got} s");
    let served = db.insert_task(overdue("report")).await.unwrap();
    let orphan = db.insert_task(overdue("nobody.serves")).await.unwrap();
    // The worker's registry heartbeat is far older than the leader's bound; its deadline is not.
    set_agent(&db, &worker.id, &[("heartbeat_at", Val::At(-45.0))]).await;
    set_agent(&db, &leader.id, &[("alive_until", Val::At(30.0))]).await;
    let dead = unserved(&db).await;
    assert_eq!(
        dead,
        vec![(TaskId(orphan), tt("nobody.serves"))],
        "{dead:?}"
    );
    assert_eq!(db.task_status(served).await.unwrap(), "queued");

    // A renewal with no leases is the heartbeat connection's proof of life: it pushes the
    // deadline on (from the past, here), in database time.
    set_agent(&db, &worker.id, &[("alive_until", Val::At(-5.0))]).await;
    let beat = |alive_for| RenewParams {
        owner: worker.id.clone(),
        leases: Vec::new(),
        lease_ttl: Duration::from_secs(50),
        alive_for,
    };
    let out = store.lease_renew_many(beat(None)).await.unwrap();
    assert!(out.renewed.is_empty() && out.lost.is_empty());
    assert!(
        alive_for_secs(&record(&db, &worker.id).await) < 0.0,
        "None leaves it alone"
    );
    store
        .lease_renew_many(beat(Some(Duration::from_secs(40))))
        .await
        .unwrap();
    let got = alive_for_secs(&record(&db, &worker.id).await);
    assert!((39.0..=40.5).contains(&got), "renewed deadline {got} s");
    assert!(unserved(&db).await.is_empty());
    assert_eq!(db.task_status(served).await.unwrap(), "queued");

    // Past its own deadline the worker is not live, however fresh its registry heartbeat.
    set_agent(
        &db,
        &worker.id,
        &[
            ("heartbeat_at", Val::At(0.0)),
            ("alive_until", Val::At(-1.0)),
        ],
    )
    .await;
    let dead = unserved(&db).await;
    assert_eq!(dead, vec![(TaskId(served), tt("report"))], "{dead:?}");

    // A stopped agent's deadline is not pushed on by a late renewal.
    store.agent_mark_stopped(worker.id.clone()).await.unwrap();
    store
        .lease_renew_many(beat(Some(Duration::from_secs(40))))
        .await
        .unwrap();
    assert!(alive_for_secs(&record(&db, &worker.id).await) < 0.0);

    // Bad deadlines are refused and change nothing.
    let bad = store
        .agent_register(register("x", &["a"], Duration::from_secs(8 * 24 * 3600)))
        .await;
    assert!(matches!(bad, Err(StoreError::Invalid(_))), "{bad:?}");
    let bad = store
        .lease_renew_many(beat(Some(Duration::from_secs(8 * 24 * 3600))))
        .await;
    assert!(matches!(bad, Err(StoreError::Invalid(_))), "{bad:?}");
    db.drop_db().await.unwrap();
}

conformance!(a_row_without_a_deadline_is_judged_by_its_registry_heartbeat);
async fn a_row_without_a_deadline_is_judged_by_its_registry_heartbeat(db: StoreDb) {
    let leader = join(&db, "leader", &["noop"], Duration::from_secs(60)).await;
    // An agent from before the deadline existed: no alive_until, only its heartbeat.
    let old = join(&db, "old-agent", &["report"], Duration::from_secs(60)).await;
    set_agent(
        &db,
        &old.id,
        &[("alive_until", Val::Null), ("heartbeat_at", Val::At(-1.0))],
    )
    .await;
    assert_eq!(record(&db, &old.id).await.alive_until, None);
    let task = db.insert_task(overdue("report")).await.unwrap();
    assert!(unserved(&db).await.is_empty());
    assert_eq!(db.task_status(task).await.unwrap(), "queued");
    set_agent(&db, &old.id, &[("heartbeat_at", Val::At(-4.0))]).await;
    let dead = unserved(&db).await;
    assert_eq!(dead, vec![(TaskId(task), tt("report"))], "{dead:?}");
    // And with no live agent at all there is no verdict: the leader past its deadline too.
    set_agent(&db, &leader.id, &[("alive_until", Val::At(-1.0))]).await;
    let late = db.insert_task(overdue("nobody.serves")).await.unwrap();
    assert!(unserved(&db).await.is_empty());
    assert_eq!(db.task_status(late).await.unwrap(), "queued");
    db.drop_db().await.unwrap();
}
