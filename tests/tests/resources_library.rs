#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Resource leases through the agent library: run-once locks with `lock_at_least_for` and
//! `lock_at_most_for` (renewed by the agent's heartbeat, never past the at-most bound, and a
//! crashed holder's freed at it), and the shard
//! ownership a library user is told about, at once, when it changes.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold_agent::HandlerRegistry;
use leasehold_agent::runtime::{
    AgentBuilder, AgentControl, LifecycleEvent, LockOptions, LossReason, RuntimeSettings, Shutdown,
};
use leasehold_shared::store::{GroupName, LockAcquireParams, LockName, ShardGroupCreateParams};
use leasehold_shared::{Actor, AgentId, Store};
use leasehold_tests::{TestDb, wait_until};
use tokio::task::JoinHandle;

fn settings(name: &str, ttl: Duration) -> RuntimeSettings {
    RuntimeSettings {
        name: name.into(),
        concurrency: 1,
        lease_ttl: ttl,
        heartbeat: Duration::from_millis(300),
        grace: Duration::from_secs(1),
        poll_interval: Duration::from_millis(100),
        unserved_after: None,
        ..RuntimeSettings::default()
    }
}

struct Running {
    control: AgentControl,
    shutdown: Shutdown,
    run: JoinHandle<leasehold_agent::error::Result<leasehold_agent::runtime::RunSummary>>,
    events: Arc<Mutex<Vec<LifecycleEvent>>>,
}

async fn start(db: &TestDb, settings: RuntimeSettings) -> Running {
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&events);
    let mut handlers = HandlerRegistry::new();
    handlers.register(
        leasehold_shared::TaskType::new("noop").unwrap(),
        leasehold_agent::handlers::noop::NoopHandler,
    );
    let agent = AgentBuilder::new(settings, handlers)
        .listener(move |e: &LifecycleEvent| {
            if matches!(
                e,
                LifecycleEvent::ResourceAcquired { .. } | LifecycleEvent::ResourceLost { .. }
            ) {
                seen.lock().unwrap().push(e.clone());
            }
        })
        .connect(&db.url)
        .await
        .unwrap();
    let control = agent.control();
    let shutdown = Shutdown::default();
    let run = tokio::spawn(agent.run(shutdown.clone()));
    Running {
        control,
        shutdown,
        run,
        events,
    }
}

impl Running {
    async fn stop(self) {
        self.shutdown.graceful.cancel();
        self.run.await.unwrap().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_at_least_for_keeps_a_quick_run_once_job_locked() {
    let db = TestDb::new().await.unwrap();
    let a = start(&db, settings("a", Duration::from_secs(4))).await;
    let b = start(&db, settings("b", Duration::from_secs(4))).await;
    let options = LockOptions {
        lock_at_least_for: Some(Duration::from_secs(3)),
        lock_at_most_for: None,
    };

    let taken = Instant::now();
    let lock = a
        .control
        .lock("nightly-report", options)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lock.token(), 1);
    assert!(
        a.control.lock("nightly-report", options).await.is_err(),
        "this agent holds it already"
    );
    // The job finished at once: the lock stays held until 3 s after it was taken.
    assert!(lock.release().await.unwrap());
    assert!(
        b.control
            .lock("nightly-report", options)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        a.control
            .lock("nightly-report", options)
            .await
            .unwrap()
            .is_none()
    );
    let row: (Option<String>, bool) = sqlx::query_as(
        "SELECT owner, released_at IS NOT NULL FROM resource_leases WHERE name = 'nightly-report'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(row.1, "released but held: {row:?}");

    let again = loop {
        if let Some(lock) = b.control.lock("nightly-report", options).await.unwrap() {
            break lock;
        }
        assert!(taken.elapsed() < Duration::from_secs(6), "never freed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let waited = taken.elapsed();
    assert!(
        waited >= Duration::from_millis(2900),
        "freed too early: {waited:?}"
    );
    assert_eq!(again.token(), 2, "a new holding has a higher token");
    println!("lock_at_least_for 3 s: the next holder got it after {waited:?}");
    drop(again);
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_at_most_for_frees_a_crashed_holder_and_caps_renewals() {
    let db = TestDb::new().await.unwrap();
    // A TTL far longer than the at-most bound: only the bound can free the lock in time.
    let ttl = Duration::from_secs(20);
    let options = LockOptions {
        lock_at_least_for: None,
        lock_at_most_for: Some(Duration::from_secs(2)),
    };

    let store = db.store();
    // A live holder: the heartbeat renews, but never past the bound, and its local deadline
    // is the bound less the safety margin (2 s here: at once), not the TTL; the holder is
    // told. (resources_lock_deadline.rs checks that against the database's clock.)
    let a = start(&db, settings("a", ttl)).await;
    let mut held = a.control.lock("sync", options).await.unwrap().unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(6), held.lost())
        .await
        .expect("told before the bound");
    assert_eq!(reason, LossReason::Unprovable);
    assert!(!held.is_held());
    assert!(a.events.lock().unwrap().iter().any(|e| matches!(
        e,
        LifecycleEvent::ResourceLost { name, reason: "unprovable", .. } if name == "sync"
    )));
    // It gives the lock back at its next heartbeat.
    wait_until("a gave the lock back", Duration::from_secs(5), || async {
        let owner: Option<String> =
            sqlx::query_scalar("SELECT owner FROM resource_leases WHERE name = 'sync'")
                .fetch_one(&db.pool)
                .await?;
        Ok(owner.is_none())
    })
    .await
    .unwrap();

    // A holder that crashed right after taking the lock (it never renews nor releases):
    // free at the bound, long before its 20 s lease.
    let crashed = store
        .lock_acquire(LockAcquireParams {
            lock_at_most_for: options.lock_at_most_for,
            ..LockAcquireParams::new(
                LockName::new("sync").unwrap(),
                AgentId::new("crashed-job").unwrap(),
                ttl,
                Duration::from_secs(1),
            )
        })
        .await
        .unwrap();
    assert!(crashed.acquired);
    let token = crashed.lock.token;
    let taken = Instant::now();
    let b = start(&db, settings("b", ttl)).await;
    assert!(b.control.lock("sync", options).await.unwrap().is_none());
    let next = loop {
        if let Some(lock) = b.control.lock("sync", options).await.unwrap() {
            break lock;
        }
        assert!(taken.elapsed() < Duration::from_secs(6), "never freed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let waited = taken.elapsed();
    assert!(
        waited >= Duration::from_millis(1900) && waited < ttl,
        "{waited:?}"
    );
    assert!(next.token() > token);
    println!("lock_at_most_for 2 s (TTL 20 s): a crashed holder's lock was free after {waited:?}");
    drop(next);
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_library_user_is_told_which_shards_it_owns_and_when_it_loses_one() {
    let db = TestDb::new().await.unwrap();
    let store = db.store();
    let group = GroupName::new("tenants").unwrap();
    store
        .shard_group_create(ShardGroupCreateParams {
            name: group.clone(),
            count: 6,
            actor: Actor::operator("test"),
        })
        .await
        .unwrap();
    let mut s = settings("a", Duration::from_secs(3));
    s.shard_groups = vec![group.clone()];
    let a = start(&db, s.clone()).await;
    let mut owned = a.control.shards();
    wait_until("a owns all six", Duration::from_secs(10), || {
        let n = owned.borrow().shards("tenants").len();
        async move { Ok(n == 6) }
    })
    .await
    .unwrap();
    let before: Vec<(u32, i64)> = owned.borrow_and_update().shards("tenants");
    assert!(before.iter().all(|(_, token)| *token == 1), "{before:?}");

    // A second member joins: a is told at once that it gave three back.
    s.name = "b".into();
    let b = start(&db, s).await;
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            owned.changed().await.unwrap();
            if owned.borrow().shards("tenants").len() == 3 {
                break;
            }
        }
    })
    .await
    .expect("a told of the rebalance");
    let mine = a.control.shards();
    let theirs = b.control.shards();
    wait_until("b owns three", Duration::from_secs(10), || {
        let n = theirs.borrow().shards("tenants").len();
        async move { Ok(n == 3) }
    })
    .await
    .unwrap();
    let a_shards: Vec<u32> = mine
        .borrow()
        .shards("tenants")
        .iter()
        .map(|(s, _)| *s)
        .collect();
    let b_shards: Vec<(u32, i64)> = theirs.borrow().shards("tenants");
    assert!(
        b_shards
            .iter()
            .all(|(s, t)| !a_shards.contains(s) && *t == 2),
        "disjoint, and b's tokens are the second holdings: a {a_shards:?}, b {b_shards:?}"
    );
    let lost = a
        .events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| {
            matches!(
                e,
                LifecycleEvent::ResourceLost {
                    reason: "released",
                    ..
                }
            )
        })
        .count();
    assert_eq!(lost, 3);
    // Fenced in the database too: the view agrees with the rows.
    let rows: Vec<(i32, String, i64)> = sqlx::query_as(
        "SELECT shard, owner, token FROM resource_leases WHERE group_name = 'tenants' ORDER BY shard",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    for (shard, owner, token) in rows {
        let shard = u32::try_from(shard).unwrap();
        let (who, expected) = match mine.borrow().token("tenants", shard) {
            Some(t) => (a.control.id().as_str().to_string(), t),
            None => (
                b.control.id().as_str().to_string(),
                theirs.borrow().token("tenants", shard).unwrap(),
            ),
        };
        assert_eq!((owner, token), (who, expected), "shard {shard}");
    }
    a.stop().await;
    b.stop().await;
}
