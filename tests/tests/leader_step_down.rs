#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! A leader whose renewal hangs without an error — cut off only by the maintenance step's
//! timeout, as on a half-open connection — steps down locally once its safe deadline
//! (last renewal + TTL − margin) has passed, and leads again once the database answers.
//!
//! The hang: the test holds `LOCK TABLE leader IN ACCESS EXCLUSIVE MODE`, so the renewal waits
//! for the lock, and freezes (`SIGSTOP`) each backend waiting there, so the server's
//! `statement_timeout` cannot end the wait with an error. A private PostgreSQL server is used,
//! as its backends are signalled.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use leasehold_tests::fleet::{TTL, spawn_test_agent};
use leasehold_tests::metrics::{free_port, scrape_metrics};
use leasehold_tests::{PgCluster, wait_until};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

const REGISTER: Duration = Duration::from_secs(20);
/// Allowance for a loaded 2-core machine on top of the TTL.
const SLACK: Duration = Duration::from_secs(3);
const STEPPED_DOWN: &str = "leadership not provable: stepping down";

/// The `leasehold_leader` gauge of the agent serving metrics on `port`.
async fn leader_gauge(port: u16) -> anyhow::Result<i64> {
    let body = scrape_metrics(port).await?;
    body.lines()
        .find_map(|l| l.strip_prefix("leasehold_leader ")?.trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no leasehold_leader sample in\n{body}"))
}

fn signal(pid: i32, name: &str) {
    let status = std::process::Command::new("kill")
        .args(["-s", name, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -s {name} {pid}");
}

/// Freezes every backend of `app` that waits for a lock in a statement on the leader row,
/// until `stop`; returns the pids it froze.
async fn freeze_waiters(
    pool: PgPool,
    datname: String,
    app: String,
    stop: Arc<AtomicBool>,
) -> BTreeSet<i32> {
    let mut frozen = BTreeSet::new();
    while !stop.load(Ordering::Relaxed) {
        let pids: Vec<i32> = sqlx::query_scalar(
            "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND application_name = $2 \
             AND wait_event_type = 'Lock' AND query ILIKE '%UPDATE leader%'",
        )
        .bind(&datname)
        .bind(&app)
        .fetch_all(&pool)
        .await
        .unwrap_or_default();
        for pid in pids {
            if frozen.insert(pid) {
                signal(pid, "STOP");
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    frozen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_renewal_hangs_steps_down_by_its_safe_deadline() {
    let cluster = PgCluster::start().await.unwrap();
    let datname = "leasehold_step_down";
    let url = cluster.create_migrated_database(datname).await.unwrap();
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .connect(&url)
        .await
        .unwrap();
    let port = free_port().unwrap();
    let listen = format!("127.0.0.1:{port}");
    let agent = spawn_test_agent(&url, "solo", "noop", &["--metrics-listen", &listen])
        .await
        .unwrap();
    agent
        .wait_registered(&pool, "solo", REGISTER)
        .await
        .unwrap();
    wait_until("the agent leads", Duration::from_secs(10), || async move {
        Ok(leader_gauge(port).await.unwrap_or(0) == 1)
    })
    .await
    .unwrap();

    let mut lock = pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE leader IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .unwrap();
    let locked = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let freezer = tokio::spawn(freeze_waiters(
        pool.clone(),
        datname.to_string(),
        "leasehold-agent solo".to_string(),
        Arc::clone(&stop),
    ));
    let stepped = wait_until("the agent no longer leads", TTL + SLACK, || async move {
        Ok(leader_gauge(port).await.unwrap_or(1) == 0)
    })
    .await;
    let took = locked.elapsed();
    stop.store(true, Ordering::Relaxed);
    let frozen = freezer.await.unwrap();
    for pid in &frozen {
        signal(*pid, "CONT");
    }
    lock.rollback().await.unwrap();
    // Positive control: renewals really hung on the lock (and were frozen there).
    assert!(
        !frozen.is_empty(),
        "no renewal waited for the lock:\n{}",
        agent.log_tail(30)
    );
    stepped.unwrap_or_else(|e| {
        panic!(
            "{e}: a leader whose renewal hangs kept leading {took:?} after the lock; \
             {} backends frozen\n{}",
            frozen.len(),
            agent.log_tail(30)
        )
    });
    assert!(
        agent.stderr_text().unwrap().contains(STEPPED_DOWN),
        "no step-down logged:\n{}",
        agent.log_tail(30)
    );
    // Once the database answers again, the agent leads again.
    wait_until(
        "the agent leads again",
        Duration::from_secs(15),
        || async move { Ok(leader_gauge(port).await.unwrap_or(0) == 1) },
    )
    .await
    .unwrap();
    drop(agent);
    pool.close().await;
    drop(cluster);
}
