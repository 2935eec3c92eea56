#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! A lock is never held in two places (issue 18, hole 3), through the agent library: with
//! `lock_at_most_for` far shorter than the TTL, the database's `lease_until` is the bound, and
//! the holder's local deadline (`is_held()`, `lost()`) ends a safety margin before it — not a
//! TTL after it was taken — so a second agent that takes the lock once the bound has passed
//! never finds the first still reporting it held. Real PostgreSQL, two real agents.

use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use leasehold_agent::HandlerRegistry;
use leasehold_agent::runtime::{
    AgentBuilder, AgentControl, LockOptions, LossReason, RuntimeSettings, Shutdown,
};
use leasehold_tests::TestDb;
use tokio::task::JoinHandle;

/// A TTL far longer than the at-most bound, and a heartbeat slow enough that a holder that
/// only learns of the bound from a fenced renewal would still believe it holds the lock when
/// the second agent takes it.
const TTL: Duration = Duration::from_secs(20);
const AT_MOST: Duration = Duration::from_secs(4);

fn settings(name: &str) -> RuntimeSettings {
    RuntimeSettings {
        name: name.into(),
        concurrency: 1,
        lease_ttl: TTL,
        heartbeat: Duration::from_secs(2),
        grace: Duration::from_secs(1),
        poll_interval: Duration::from_millis(200),
        unserved_after: None,
        ..RuntimeSettings::default()
    }
}

struct Running {
    control: AgentControl,
    shutdown: Shutdown,
    run: JoinHandle<leasehold_agent::error::Result<leasehold_agent::runtime::RunSummary>>,
}

async fn start(db: &TestDb, name: &str) -> Running {
    let mut handlers = HandlerRegistry::new();
    handlers.register(
        leasehold_shared::TaskType::new("noop").unwrap(),
        leasehold_agent::handlers::noop::NoopHandler,
    );
    let agent = AgentBuilder::new(settings(name), handlers)
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
    }
}

async fn db_now(db: &TestDb) -> DateTime<Utc> {
    sqlx::query_scalar("SELECT now()")
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_capped_by_at_most_is_never_held_in_two_places() {
    let db = TestDb::new().await.unwrap();
    let a = start(&db, "a").await;
    let b = start(&db, "b").await;
    let options = LockOptions {
        lock_at_least_for: None,
        lock_at_most_for: Some(AT_MOST),
    };
    let margin = settings("a").safety_margin();

    let mut held = a.control.lock("once", options).await.unwrap().unwrap();
    let (until, taken_at): (DateTime<Utc>, DateTime<Utc>) =
        sqlx::query_as("SELECT lease_until, acquired_at FROM resource_leases WHERE name = 'once'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(until - taken_at, TimeDelta::from_std(AT_MOST).unwrap());
    assert!(held.is_held());

    // The second agent tries to take it over and over; the first one's view is read each time.
    let started = Instant::now();
    let mut lost_at: Option<DateTime<Utc>> = None;
    let second = loop {
        if let Some(lock) = b.control.lock("once", options).await.unwrap() {
            assert!(
                !held.is_held(),
                "the second agent took the lock while the first still reports it held"
            );
            break lock;
        }
        if lost_at.is_none() && !held.is_held() {
            lost_at = Some(db_now(&db).await);
        }
        assert!(
            started.elapsed() < AT_MOST + Duration::from_secs(10),
            "the lock was never free"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(second.token() > held.token());
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(1), held.lost())
            .await
            .expect("told it was lost"),
        LossReason::Unprovable,
        "the local deadline ended it, not a renewal refused after the bound"
    );

    // It stopped believing it held the lock no later than the database's lease_until (by
    // the database's clock, read after it was seen lost: the check can only be late).
    let lost_at = lost_at.expect("seen lost before the second agent took it");
    assert!(
        lost_at <= until,
        "seen held until {lost_at}, past the database's lease_until {until}"
    );
    println!(
        "at most {AT_MOST:?} (TTL {TTL:?}, margin {margin:?}): seen lost {} ms before lease_until; \
         the second agent took it after {:?}",
        (until - lost_at).num_milliseconds(),
        started.elapsed()
    );
    drop(second);
    for agent in [a, b] {
        agent.shutdown.graceful.cancel();
        agent.run.await.unwrap().unwrap();
    }
}
