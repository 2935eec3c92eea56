#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Cron schedules across real agents (issue 7): three `leasehold-agent` processes on one
//! PostgreSQL database declare the same every-second schedules from their TOML config; the
//! leader is killed with SIGKILL mid-run. Every tick is enqueued exactly once, except ticks
//! missed during the handover, which follow each schedule's missed-tick policy; none doubles.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use leasehold_tests::fleet::{GRACE, TTL, spawn_agent};
use leasehold_tests::{AgentHandle, TestDb, count, scratch_dir, wait_until};

const CONFIG: &str = r#"
[[schedules]]
name = "tick-skip"
cron = "* * * * * *"
type = "noop"
missed = "skip"

[[schedules]]
name = "tick-catch"
cron = "* * * * * *"
type = "noop"
missed = "catch_up"
catch_up_max = 60
"#;

async fn leader(pool: &sqlx::PgPool) -> Option<(String, i64, DateTime<Utc>)> {
    sqlx::query_as::<_, (Option<String>, i64, Option<DateTime<Utc>>)>(
        "SELECT owner, term, elected_at FROM leader WHERE lease_until > now()",
    )
    .fetch_optional(pool)
    .await
    .unwrap()
    .and_then(|(owner, term, at)| Some((owner?, term, at?)))
}

async fn db_now(pool: &sqlx::PgPool) -> DateTime<Utc> {
    sqlx::query_scalar("SELECT now()")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Tick times per schedule, from the tasks' idempotency keys, with how many tasks each had.
async fn ticks(pool: &sqlx::PgPool) -> BTreeMap<String, BTreeMap<DateTime<Utc>, i64>> {
    let keys: Vec<String> = sqlx::query_scalar(
        "SELECT idempotency_key FROM tasks WHERE idempotency_key LIKE 'schedule:%' ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let mut out: BTreeMap<String, BTreeMap<DateTime<Utc>, i64>> = BTreeMap::new();
    for key in keys {
        let rest = key.strip_prefix("schedule:").unwrap();
        let (name, at) = rest.split_once(':').unwrap();
        let at: DateTime<Utc> = at.parse().unwrap_or_else(|e| panic!("{key}: {e}"));
        *out.entry(name.to_string())
            .or_default()
            .entry(at)
            .or_default() += 1;
    }
    out
}

/// The whole seconds from `first` to `last` that are not in `seen`.
fn missing(seen: &BTreeMap<DateTime<Utc>, i64>) -> Vec<DateTime<Utc>> {
    let (Some(first), Some(last)) = (seen.keys().next(), seen.keys().last()) else {
        return Vec::new();
    };
    let mut gaps = Vec::new();
    let mut t = *first;
    while t <= *last {
        if !seen.contains_key(&t) {
            gaps.push(t);
        }
        t += TimeDelta::seconds(1);
    }
    gaps
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_agents_fire_each_tick_once_across_a_kill9_of_the_leader() {
    let db = TestDb::new().await.unwrap();
    let dir = scratch_dir("leasehold-schedules").unwrap();
    let config = dir.join("agent.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let config = config.to_string_lossy().to_string();

    let mut agents: Vec<(String, AgentHandle)> = Vec::new();
    for name in ["sched-a", "sched-b", "sched-c"] {
        let agent = spawn_agent(
            "leasehold-agent",
            &db.url,
            name,
            "noop",
            &["--config", &config],
            Vec::new(),
        )
        .await
        .unwrap();
        let id = agent
            .wait_registered(&db.pool, name, Duration::from_secs(30))
            .await
            .unwrap();
        agents.push((id, agent));
    }
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM schedules")
            .await
            .unwrap(),
        2,
        "three agents declared the same two schedules"
    );
    wait_until("a leader", Duration::from_secs(10), || {
        let pool = db.pool.clone();
        async move { Ok(leader(&pool).await.is_some()) }
    })
    .await
    .unwrap();
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(10)).await;

    let (first_leader, first_term, _) = leader(&db.pool).await.unwrap();
    let victim = agents
        .iter()
        .position(|(id, _)| *id == first_leader)
        .expect("the leader is one of ours");
    let (_, mut killed) = agents.remove(victim);
    let killed_at = db_now(&db.pool).await;
    killed.kill9().unwrap();
    killed.wait_exit(Duration::from_secs(5)).await.unwrap();

    wait_until(
        "another agent leads",
        TTL + GRACE + Duration::from_secs(5),
        || {
            let pool = db.pool.clone();
            let old = first_leader.clone();
            async move {
                Ok(leader(&pool)
                    .await
                    .is_some_and(|(owner, _, _)| owner != old))
            }
        },
    )
    .await
    .unwrap();
    let (second_leader, second_term, elected_at) = leader(&db.pool).await.unwrap();
    assert!(second_term > first_term);
    assert!(agents.iter().any(|(id, _)| *id == second_leader));
    let handover = elected_at - killed_at;
    assert!(
        handover.to_std().unwrap() <= TTL + GRACE + Duration::from_secs(2),
        "handover took {handover}"
    );
    let rest = Duration::from_secs(30).saturating_sub(started.elapsed());
    tokio::time::sleep(rest).await;
    // Stop the ticks, then let the agents run what they enqueued.
    sqlx::query("UPDATE schedules SET enabled = false")
        .execute(&db.pool)
        .await
        .unwrap();
    wait_until("every tick's task ran", Duration::from_secs(15), || {
        let pool = db.pool.clone();
        async move {
            Ok(count(
                &pool,
                "SELECT count(*) FROM tasks WHERE status <> 'succeeded'",
            )
            .await?
                == 0)
        }
    })
    .await
    .unwrap();
    for (_, agent) in &agents {
        agent.sigterm().unwrap();
    }
    for (_, agent) in &mut agents {
        agent.wait_exit(Duration::from_secs(15)).await.unwrap();
    }

    let all = ticks(&db.pool).await;
    for (name, seen) in &all {
        let doubled: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
        assert!(doubled.is_empty(), "{name}: ticks doubled: {doubled:?}");
        assert!(
            seen.keys().all(|t| t.timestamp_subsec_nanos() == 0),
            "{name}: ticks are whole seconds"
        );
        assert!(
            seen.len() >= 25,
            "{name}: only {} ticks in 30 s",
            seen.len()
        );
    }
    // catch_up: every tick, the ones of the handover included.
    let catch = &all["tick-catch"];
    assert_eq!(
        missing(catch),
        Vec::<DateTime<Utc>>::new(),
        "tick-catch lost ticks"
    );
    // skip: the ticks missed in the handover are dropped, and only those.
    let skip = &all["tick-skip"];
    let gaps = missing(skip);
    let window_from = killed_at - TimeDelta::seconds(1);
    let window_to = elected_at + TimeDelta::seconds(1);
    assert!(
        gaps.iter().all(|t| *t >= window_from && *t <= window_to),
        "tick-skip lost ticks outside the handover ({window_from} – {window_to}): {gaps:?}"
    );
    eprintln!(
        "handover {handover}; tick-skip: {} ticks, dropped {gaps:?}; tick-catch: {} ticks",
        skip.len(),
        catch.len()
    );
    assert!(
        !gaps.is_empty(),
        "positive control: skip dropped the ticks the handover missed (handover {handover})"
    );
    // Both schedules fired around the kill: the new leader picked them up.
    for (name, seen) in &all {
        assert!(
            seen.keys().any(|t| *t > elected_at),
            "{name} fired after the handover"
        );
        assert!(
            seen.keys().any(|t| *t < killed_at),
            "{name} fired before the kill"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    db.drop_db().await.unwrap();
}
