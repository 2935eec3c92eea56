#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The leader-only backlog gauges (issue 26) on two real agents on PostgreSQL, scraped over
//! `--metrics-listen`: `leasehold_queue_depth`, `leasehold_oldest_waiting_seconds` and
//! `leasehold_dead_letters` are on exactly one agent — the one the leader row names — with the
//! values SQL counts; a leader that loses its lease drops them within one refresh (15 s), and
//! the next leader exports them.

use std::collections::BTreeMap;
use std::time::Duration;

use leasehold_tests::fleet::start_agent;
use leasehold_tests::metrics::{free_port, scrape_metrics};
use leasehold_tests::{TestDb, wait_until};
use sqlx::PgPool;

/// One refresh (15 s), the election after a lease is gone, and a loaded machine.
const WAIT: Duration = Duration::from_secs(45);

/// The backlog samples of the agent serving metrics on `port`: (metric, task type) → value.
async fn backlog(port: u16) -> anyhow::Result<Samples> {
    let body = scrape_metrics(port).await?;
    let mut samples = BTreeMap::new();
    for line in body.lines() {
        for metric in [
            "leasehold_queue_depth",
            "leasehold_oldest_waiting_seconds",
            "leasehold_dead_letters",
        ] {
            let Some(rest) = line.strip_prefix(&format!("{metric}{{task_type=\"")) else {
                continue;
            };
            let (task_type, value) = rest
                .split_once("\"} ")
                .ok_or_else(|| anyhow::anyhow!("odd sample {line}"))?;
            samples.insert((metric.to_string(), task_type.to_string()), value.parse()?);
        }
    }
    Ok(samples)
}

type Samples = BTreeMap<(String, String), f64>;

/// Waits up to [`WAIT`] until some agent exports backlog samples; returns them by agent name
/// (every agent that exports any, read in one round).
async fn exporters(names: &[&str], ports: &[u16], what: &str) -> BTreeMap<String, Samples> {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let mut exported = BTreeMap::new();
        for (name, port) in names.iter().zip(ports) {
            let samples = backlog(*port).await.unwrap();
            if !samples.is_empty() {
                exported.insert(name.to_string(), samples);
            }
        }
        if !exported.is_empty() {
            return exported;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The agent (by name) the leader row names, if any holds a live lease.
async fn leader(pool: &PgPool) -> Option<String> {
    sqlx::query_scalar(
        "SELECT a.name FROM leader l JOIN agents a ON a.id = l.owner \
         WHERE l.lease_until > now()",
    )
    .fetch_optional(pool)
    .await
    .unwrap()
}

/// SQL's own counts of `task_type`: (depth, dead, seconds its oldest waiting task is due).
async fn counts(pool: &PgPool, task_type: &str) -> (f64, f64, f64) {
    let (depth, dead, oldest): (i64, i64, f64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE status IN ('queued', 'retry_wait')), \
                count(*) FILTER (WHERE status = 'dead'), \
                coalesce(extract(epoch FROM now() - min(available_at) FILTER ( \
                    WHERE status IN ('queued', 'retry_wait') AND available_at <= now()))::float8, 0) \
         FROM tasks WHERE task_type = $1",
    )
    .bind(task_type)
    .fetch_one(pool)
    .await
    .unwrap();
    (depth as f64, dead as f64, oldest)
}

/// The gauges of `samples` agree with SQL for every type that has tasks: depth and dead
/// exactly, the age within one refresh (it was read at the last refresh).
async fn agree(pool: &PgPool, samples: &Samples) {
    for task_type in ["gauge.a", "gauge.b", "gauge.later"] {
        let (depth, dead, oldest) = counts(pool, task_type).await;
        let get = |metric: &str| {
            *samples
                .get(&(metric.to_string(), task_type.to_string()))
                .unwrap_or_else(|| panic!("no {metric} of {task_type} in {samples:?}"))
        };
        assert_eq!(get("leasehold_queue_depth"), depth, "{task_type}");
        assert_eq!(get("leasehold_dead_letters"), dead, "{task_type}");
        let age = get("leasehold_oldest_waiting_seconds");
        if oldest == 0.0 {
            assert_eq!(age, 0.0, "{task_type}");
        } else {
            assert!(
                age <= oldest + 0.5 && age >= oldest - 20.0,
                "{task_type}: gauge {age} s, SQL {oldest} s"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_exports_the_backlog_gauges_and_they_follow_leadership() {
    let db = TestDb::new().await.unwrap();
    // Types no agent serves: their tasks stay as written.
    sqlx::query(
        "INSERT INTO tasks (task_type, status, available_at) VALUES \
           ('gauge.a', 'queued', now() - interval '90 seconds'), \
           ('gauge.a', 'queued', now() - interval '10 seconds'), \
           ('gauge.a', 'queued', now() + interval '1 hour'), \
           ('gauge.b', 'retry_wait', now() - interval '200 seconds'), \
           ('gauge.later', 'queued', now() + interval '2 hours')",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    for _ in 0..3 {
        sqlx::query(
            "INSERT INTO tasks (task_type, status, attempt, lease_epoch, started_at, \
             finished_at, done_on) VALUES ('gauge.b', 'dead', 1, 1, now(), now(), \
             (now() AT TIME ZONE 'UTC')::date)",
        )
        .execute(&db.pool)
        .await
        .unwrap();
    }
    let ports = [free_port().unwrap(), free_port().unwrap()];
    let names = ["gauges-1", "gauges-2"];
    let mut agents = Vec::new();
    for (name, port) in names.iter().zip(ports) {
        let listen = format!("127.0.0.1:{port}");
        let (agent, _) = start_agent(
            &db,
            name,
            "noop",
            &["--metrics-listen", &listen],
            Vec::new(),
        )
        .await
        .unwrap();
        agents.push(agent);
    }

    // Exactly one agent exports the gauges, and it is the leader.
    let exported = exporters(&names, &ports, "the leader exports the backlog gauges").await;
    assert_eq!(
        exported.len(),
        1,
        "gauges on more than one agent: {exported:?}"
    );
    let (first, samples) = exported.into_iter().next().unwrap();
    assert_eq!(leader(&db.pool).await.as_deref(), Some(first.as_str()));
    agree(&db.pool, &samples).await;
    assert_eq!(samples.len(), 9, "three gauges of three types: {samples:?}");
    let other = names.iter().position(|n| *n != first).unwrap();
    assert!(backlog(ports[other]).await.unwrap().is_empty());

    // The leader loses its lease (taken by an owner that is not an agent): it drops the
    // gauges within one refresh, and no agent exports any while nobody leads.
    let leading = names.iter().position(|n| *n == first).unwrap();
    sqlx::query(
        "UPDATE leader SET owner = 'outsider#1', term = term + 1, \
         lease_until = now() + interval '1 hour', heartbeat_at = now()",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    wait_until("the deposed leader drops the gauges", WAIT, || async {
        Ok(backlog(ports[leading]).await?.is_empty())
    })
    .await
    .unwrap();
    for port in ports {
        assert!(
            backlog(port).await.unwrap().is_empty(),
            "gauges without a leader"
        );
    }

    // A type disappears (its tasks deleted), the lease is free again: whichever agent is
    // elected exports the gauges, alone, without the gone type.
    sqlx::query("DELETE FROM tasks WHERE task_type = 'gauge.later'")
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query("UPDATE leader SET lease_until = now() - interval '1 hour'")
        .execute(&db.pool)
        .await
        .unwrap();
    let exported = exporters(&names, &ports, "a new leader exports the gauges").await;
    assert_eq!(
        exported.len(),
        1,
        "gauges on more than one agent: {exported:?}"
    );
    let (second, samples) = exported.into_iter().next().unwrap();
    assert_eq!(leader(&db.pool).await.as_deref(), Some(second.as_str()));
    assert_eq!(samples.len(), 6, "gauge.later is gone: {samples:?}");
    assert!(
        !samples.keys().any(|(_, t)| t == "gauge.later"),
        "{samples:?}"
    );
    for task_type in ["gauge.a", "gauge.b"] {
        let (depth, dead, _) = counts(&db.pool, task_type).await;
        assert_eq!(
            samples[&("leasehold_queue_depth".to_string(), task_type.to_string())],
            depth
        );
        assert_eq!(
            samples[&("leasehold_dead_letters".to_string(), task_type.to_string())],
            dead
        );
    }
    drop(agents);
}
