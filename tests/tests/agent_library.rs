#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The agent as a library: a typed handler with validation and progress, lifecycle listeners
//! (a panicking one included), slow-task flags, and local concurrency resized at run time.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use leasehold_agent::runtime::{AgentBuilder, LifecycleEvent, RuntimeSettings, Shutdown};
use leasehold_agent::{Handler, HandlerError, HandlerRegistry, Outcome, TaskContext};
use leasehold_shared::domain::{PolicyPatch, PolicyScope};
use leasehold_shared::store::{NewTask, PolicySetParams};
use leasehold_shared::{Actor, Progress, Store, TaskType};
use leasehold_tests::{TestDb, count, task_row, wait_until};
use serde::Deserialize;
use serde_json::json;

#[derive(Debug, Deserialize)]
struct Resize {
    width: u32,
    items: u64,
    #[serde(default)]
    hold_ms: u64,
}

struct Resizer {
    running: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
}

#[async_trait]
impl Handler for Resizer {
    type Payload = Resize;

    fn validate(&self, p: &Resize) -> Result<(), HandlerError> {
        if p.width == 0 {
            return Err(HandlerError::permanent(
                "bad_width",
                "width must be above 0",
            ));
        }
        Ok(())
    }

    async fn run(&self, ctx: TaskContext, p: Resize) -> Result<Outcome, HandlerError> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        assert!(ctx.epoch().0 >= 1 && ctx.attempt() == 1);
        assert_eq!(
            ctx.idempotency_key(),
            format!("{}:{}", ctx.id().0, ctx.epoch().0)
        );
        assert!(ctx.time_left().is_some());
        for i in 1..=p.items {
            ctx.progress(Progress {
                total: p.items,
                processed: i,
                succeeded: i,
                ..Progress::default()
            })
            .await;
        }
        tokio::time::sleep(Duration::from_millis(p.hold_ms)).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        Ok(Outcome::Succeeded(Some(json!({"width": p.width}))))
    }
}

fn settings(name: &str) -> RuntimeSettings {
    RuntimeSettings {
        name: name.into(),
        concurrency: 2,
        lease_ttl: Duration::from_secs(2),
        heartbeat: Duration::from_millis(400),
        grace: Duration::from_secs(1),
        poll_interval: Duration::from_millis(100),
        unserved_after: None,
        ..RuntimeSettings::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typed_handler_with_progress_listeners_and_resizable_concurrency() {
    let db = TestDb::new().await.unwrap();
    let store = db.store();
    let resize = TaskType::new("image.resize").unwrap();
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let mut handlers = HandlerRegistry::new();
    handlers.register(
        resize.clone(),
        Resizer {
            running: Arc::clone(&running),
            peak: Arc::clone(&peak),
        },
    );
    let events = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = Arc::clone(&events);
    let agent = AgentBuilder::new(settings("lib"), handlers)
        .listener(|_: &LifecycleEvent| panic!("a broken listener"))
        .listener(move |e: &LifecycleEvent| {
            let name = match e {
                LifecycleEvent::Started { .. } => "started",
                LifecycleEvent::Completed { .. } => "completed",
                LifecycleEvent::Failed { .. } => "failed",
                LifecycleEvent::DeadLettered { .. } => "dead",
                LifecycleEvent::Slow { .. } => "slow",
                _ => "other",
            };
            seen.lock().unwrap().push(name.to_string());
        })
        .connect(&db.url)
        .await
        .unwrap();
    let control = agent.control();
    let shutdown = Shutdown::default();
    let run = tokio::spawn(agent.run(shutdown.clone()));

    // Progress: 5000 updates are throttled; the last one always lands.
    let id = store
        .task_enqueue(NewTask::new(
            resize.clone(),
            json!({"width": 640, "items": 5000}),
        ))
        .await
        .unwrap()
        .id
        .0;
    wait_until("resize done", Duration::from_secs(20), || {
        let pool = db.pool.clone();
        async move { Ok(leasehold_tests::task_status(&pool, id).await? == "succeeded") }
    })
    .await
    .unwrap();
    let row = task_row(&db.pool, id).await.unwrap();
    assert_eq!(row["progress"]["processed"], 5000, "final flush: {row}");
    assert_eq!(row["result"]["width"], 640, "{row}");

    // A payload that fails validation is permanent: dead at once.
    let bad = store
        .task_enqueue(NewTask::new(
            resize.clone(),
            json!({"width": 0, "items": 1}),
        ))
        .await
        .unwrap()
        .id
        .0;
    wait_until("bad payload dead", Duration::from_secs(20), || {
        let pool = db.pool.clone();
        async move { Ok(leasehold_tests::task_status(&pool, bad).await? == "dead") }
    })
    .await
    .unwrap();
    assert_eq!(
        task_row(&db.pool, bad).await.unwrap()["last_error"]["code"],
        "bad_width"
    );

    // Concurrency 2, then resized to 5 while tasks wait.
    let many: Vec<NewTask> = (0..20)
        .map(|_| {
            NewTask::new(
                resize.clone(),
                json!({"width": 1, "items": 0, "hold_ms": 300}),
            )
        })
        .collect();
    store.task_enqueue_many(many).await.unwrap();
    wait_until("two running", Duration::from_secs(10), || {
        let r = Arc::clone(&running);
        async move { Ok(r.load(Ordering::SeqCst) == 2) }
    })
    .await
    .unwrap();
    assert!(peak.load(Ordering::SeqCst) <= 2, "the limit of 2 held");
    control.set_concurrency(5).unwrap();
    assert!(control.set_concurrency(0).is_err());
    wait_until("five running", Duration::from_secs(10), || {
        let r = Arc::clone(&running);
        async move { Ok(r.load(Ordering::SeqCst) == 5) }
    })
    .await
    .unwrap();
    wait_until("all done", Duration::from_secs(30), || {
        let pool = db.pool.clone();
        async move {
            Ok(count(
                &pool,
                "SELECT count(*) FROM tasks WHERE status = 'succeeded'",
            )
            .await?
                == 21)
        }
    })
    .await
    .unwrap();
    assert_eq!(
        peak.load(Ordering::SeqCst),
        5,
        "never above the resized limit"
    );

    // Slow: a type whose slow threshold is 200 ms flags a 600 ms task once.
    store
        .policy_set(PolicySetParams {
            scope: PolicyScope::Type(resize.clone()),
            patch: PolicyPatch {
                slow_threshold: Some(Some(Duration::from_millis(200))),
                ..PolicyPatch::default()
            },
            actor: Actor::operator("oncall"),
        })
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(900)).await; // the policy cache refreshes per heartbeat
    store
        .task_enqueue(NewTask::new(
            resize.clone(),
            json!({"width": 1, "items": 0, "hold_ms": 600}),
        ))
        .await
        .unwrap();
    wait_until("a slow flag", Duration::from_secs(10), || {
        let e = Arc::clone(&events);
        async move { Ok(e.lock().unwrap().iter().any(|n| n == "slow")) }
    })
    .await
    .unwrap();

    shutdown.graceful.cancel();
    let summary = run.await.unwrap().unwrap();
    assert_eq!(summary.succeeded, 22, "{summary:?}");
    assert_eq!(summary.dead, 1, "{summary:?}");
    let events = events.lock().unwrap().clone();
    assert_eq!(events.iter().filter(|n| *n == "started").count(), 23);
    assert_eq!(events.iter().filter(|n| *n == "completed").count(), 22);
    assert_eq!(events.iter().filter(|n| *n == "dead").count(), 1);
    assert_eq!(
        events.iter().filter(|n| *n == "slow").count(),
        1,
        "flagged once"
    );
    db.drop_db().await.unwrap();
}
