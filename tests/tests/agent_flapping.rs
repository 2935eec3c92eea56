#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! T05 (TESTING.md): flapping pauses around the TTL on random agents under load. Three agents
//! drain a few hundred tasks while one of them at a time is frozen (SIGSTOP) for somewhere
//! between just under the TTL and past TTL + grace, then continued. Nothing may be lost or
//! completed twice; the positive control is at least one recovery and one fenced write.

use std::time::{Duration, Instant};

use leasehold_tests::fleet::{GRACE, TTL};
use leasehold_tests::scenario::{
    FENCED_LOG, Figures, LEASE_LOST_LOG, LOCAL_DEADLINE_LOG, log_count_all, recoveries,
    start_ledger_agents, unfinished_ledger_tasks, wait_ledger_done,
};
use leasehold_tests::{AgentHandle, TestDb, ledger};
use serde_json::json;

const AGENTS: [&str; 3] = ["t05-a", "t05-b", "t05-c"];
const TASKS_PER_ROUND: usize = 100;
/// Flapping stops once this much time has passed, fired or not.
const FLAP_CAP: Duration = Duration::from_secs(60);
const MIN_FLAPS: u64 = 6;

/// The seed: `LEASEHOLD_SEED` when set (to replay a run), else the clock.
fn seed() -> u64 {
    std::env::var("LEASEHOLD_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
}

/// Enqueues a round of ledger tasks of 100..700 ms of work each.
async fn enqueue_round(pool: &sqlx::PgPool) {
    let ids = ledger::enqueue(pool, "ledger", TASKS_PER_ROUND, json!({}))
        .await
        .unwrap();
    sqlx::query(
        "UPDATE tasks SET payload = payload || jsonb_build_object('ms', 100 + (id * 37) % 600) \
         WHERE id = ANY($1)",
    )
    .bind(&ids)
    .execute(pool)
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t05_flapping_pauses_around_the_ttl_under_load() {
    let seed = seed();
    let mut rng = fastrand::Rng::with_seed(seed);
    let db = TestDb::new().await.unwrap();
    ledger::install(&db.pool).await.unwrap();
    let mut agents: Vec<AgentHandle> = start_ledger_agents(&db, &AGENTS, 4).await.unwrap();
    enqueue_round(&db.pool).await;
    let mut rounds = 1;

    // Pauses from 0.75 × TTL to TTL + grace + 1.5 s: some end before the lease could be
    // taken, some after; the victim is picked at random each time.
    let shortest = TTL.mul_f64(0.75);
    let longest = TTL + GRACE + Duration::from_millis(1500);
    let started = Instant::now();
    let mut flaps = 0u64;
    let mut past_ttl_and_grace = 0u64;
    loop {
        let fired =
            recoveries(&db.pool).await.unwrap() >= 1 && log_count_all(&agents, FENCED_LOG) >= 1;
        if (fired && flaps >= MIN_FLAPS) || started.elapsed() > FLAP_CAP {
            break;
        }
        // Keep the agents loaded while flapping.
        if unfinished_ledger_tasks(&db.pool).await.unwrap() < 30 {
            enqueue_round(&db.pool).await;
            rounds += 1;
        }
        let victim = &agents[rng.usize(..agents.len())];
        let pause = shortest + (longest - shortest).mul_f64(rng.f64());
        victim.stop().unwrap();
        tokio::time::sleep(pause).await;
        victim.cont().unwrap();
        flaps += 1;
        past_ttl_and_grace += u64::from(pause > TTL + GRACE);
        let gap = Duration::from_millis(200 + rng.u64(..600));
        tokio::time::sleep(gap).await;
    }
    let flapping = started.elapsed();
    wait_ledger_done(&db.pool, Duration::from_secs(60))
        .await
        .unwrap();

    let report = ledger::expect_all_succeeded(&db.pool).await.unwrap();
    let tasks = (TASKS_PER_ROUND * rounds) as u64;
    assert_eq!(report.succeeded, tasks, "{report:?}");
    assert_eq!(report.successes_without_execution, 0, "{report:?}");
    let fenced = log_count_all(&agents, FENCED_LOG);
    let lost_at_renewal = log_count_all(&agents, LEASE_LOST_LOG);
    let local_deadline = log_count_all(&agents, LOCAL_DEADLINE_LOG);
    // Positive control: pauses took leases away (recovery) and a paused holder's late write
    // was refused (fenced).
    assert!(
        report.lease_expired_attempts >= 1,
        "no recovery in {flaps} flaps over {flapping:?} (seed {seed}): {report:?}"
    );
    assert!(
        fenced >= 1,
        "no fenced write in {flaps} flaps over {flapping:?} (seed {seed}): {report:?}"
    );
    for agent in &mut agents {
        assert!(
            agent.is_running(),
            "agent {} exited:\n{}",
            agent.label(),
            agent.log_tail(40)
        );
    }
    let figures = Figures::collect(&db.pool, "T05", &report, flaps, fenced)
        .await
        .unwrap();
    assert!(figures.clean(), "{figures:?}");
    eprintln!(
        "t05: seed {seed}; {flaps} pauses of {shortest:?}..{longest:?} ({past_ttl_and_grace} past \
         TTL + grace) over {flapping:?}; {lost_at_renewal} leases found lost at renewal, \
         {local_deadline} executions stopped at the local deadline; {report:?}"
    );
    eprintln!("{}", figures.line());
    drop(agents);
    db.drop_db().await.unwrap();
}
