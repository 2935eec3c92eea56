#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! T34 (TESTING.md): the soak. Four agents on a private PostgreSQL run a mixed load enqueued
//! continuously through the ledger — quick tasks, slow ones, ones that fail once and retry, a
//! type with a concurrency limit under a global limit, attempts that time out and deadlines that
//! pass — while a seeded schedule injects a fault every few seconds: kill -9 (and a restart),
//! SIGSTOP past the TTL then SIGCONT, a reset of an agent's connections, PostgreSQL restarted
//! (`-m fast`) or crashed (`-m immediate`), and storms of cancels and requeues through the
//! `leasehold` CLI. Then the faults stop, the queue drains, and:
//!
//! - the ledger is clean; no limit was exceeded at any instant (the attempt rows' database
//!   times); every operator call left exactly one audit row;
//! - positive controls: every fault kind fired, leases were recovered, writes were fenced,
//!   retries, timeouts and deadlines happened, and the limited type reached its limit;
//! - no growth: the memory and descriptors of every agent that lived through the whole run, and
//!   the server's connections, are compared between the end of the warm-up and the end.
//!
//! Three agents are faulted, each behind its own fault proxy; the fourth (`soak-ops`) connects
//! directly and is never signalled: the CLI talks to it, and it always lives through the run.
//!
//! `LEASEHOLD_SOAK_SECS` sets how long faults are injected (default 60; the run always covers
//! every fault kind once), `LEASEHOLD_SOAK_SEED` replays a schedule. The 10-minute soak:
//! `LEASEHOLD_SOAK_SECS=600 cargo test -p leasehold-tests --test soak -- --nocapture`.

mod faults;
mod load;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use faults::{Fleet, KINDS, Member, Soak};
use leasehold_tests::cli::Cli;
use leasehold_tests::grpc::agent_address;
use leasehold_tests::ledger;
use leasehold_tests::operator::Operator;
use leasehold_tests::procstat::{Usage, server_connections};
use leasehold_tests::scenario::{FENCED_LOG, Figures, log_count_all, recoveries, wait_ledger_done};
use leasehold_tests::{PgCluster, TcpProxy, limits};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

const DB: &str = "leasehold_soak";
const FAULTED: [&str; 3] = ["soak-a", "soak-b", "soak-c"];
const OPS: &str = "soak-ops";
const HANDLERS: &str = "ledger,ledger.limited";
const CONCURRENCY: &str = "6";
const LIMITED: &str = "ledger.limited";
const TYPE_LIMIT: i64 = 3;
const GLOBAL_LIMIT: i64 = 14;
/// Load without faults before the first one; the growth baseline is taken at its end.
const WARM_UP: Duration = Duration::from_secs(5);
const BATCH_EVERY: Duration = Duration::from_millis(400);
const REGISTER: Duration = Duration::from_secs(30);
const DRAIN: Duration = Duration::from_secs(180);
/// Tasks a storm aims at.
const STORM: usize = 12;
/// Growth allowed between the baseline and the end (generous: pools grow and shrink).
const FD_SLACK: u64 = 32;
const RSS_SLACK_KIB: u64 = 32 * 1024;
const CONNECTION_SLACK: i64 = 24;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

/// One agent process, behind its own proxy unless it is the operator's.
/// Every member's usage, by name.
fn usage(fleet: &Fleet) -> BTreeMap<&'static str, Usage> {
    fleet
        .members
        .iter()
        .map(|m| (m.name, Usage::of(m.agent.pid()).unwrap()))
        .collect()
}

/// The figures of every agent that lived through the whole run, and the names of those that
/// grew without bound.
fn growth(
    baseline: &BTreeMap<&'static str, Usage>,
    end: &BTreeMap<&'static str, Usage>,
) -> (Vec<String>, Vec<&'static str>) {
    let mut figures = Vec::new();
    let mut grew = Vec::new();
    for (name, before) in baseline {
        let after = end[name];
        if after.pid != before.pid {
            continue;
        }
        figures.push(format!(
            "{name} rss {}→{} KiB fds {}→{}",
            before.rss_kib, after.rss_kib, before.fds, after.fds
        ));
        if before.grew(&after, FD_SLACK, RSS_SLACK_KIB) {
            grew.push(*name);
        }
    }
    (figures, grew)
}

/// How the tasks ended, beyond the ledger's own report.
#[derive(Debug)]
struct Endings {
    /// Tasks meant to succeed that did not, but for those an operator cancelled.
    lost: i64,
    /// Tasks whose every attempt times out, or whose deadline passes, that succeeded.
    impossible_successes: i64,
    /// Attempts that failed as planned (and were retried), that timed out; tasks dead past
    /// their deadline.
    planned_failures: i64,
    timeouts: i64,
    deadlines: i64,
}

async fn endings(pool: &PgPool, cancelled: &[i64]) -> Endings {
    let row: (i64, i64, i64, i64, i64) = sqlx::query_as(
        "WITH lt AS (SELECT t.* FROM test_ledger l JOIN tasks t ON t.id = l.task_id) \
         SELECT \
             (SELECT count(*) FROM lt WHERE payload ->> 'expect' = 'succeed' \
                 AND status <> 'succeeded' AND NOT (id = ANY($1))), \
             (SELECT count(*) FROM lt WHERE payload ->> 'expect' = 'dead' AND status = 'succeeded'), \
             (SELECT count(*) FROM task_attempts WHERE error ->> 'code' = 'planned_failure'), \
             (SELECT count(*) FROM task_attempts WHERE error ->> 'code' = 'timeout'), \
             (SELECT count(*) FROM lt WHERE last_error ->> 'code' = 'deadline_exceeded')",
    )
    .bind(cancelled)
    .fetch_one(pool)
    .await
    .unwrap();
    Endings {
        lost: row.0,
        impossible_successes: row.1,
        planned_failures: row.2,
        timeouts: row.3,
        deadlines: row.4,
    }
}

/// A private cluster with the soak's policies, and the fleet on it.
async fn start(seed: u64) -> Soak {
    let cluster = PgCluster::start().await.unwrap();
    let url = cluster.create_migrated_database(DB).await.unwrap();
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(20))
        .connect(&url)
        .await
        .unwrap();
    ledger::install(&pool).await.unwrap();
    // Quick retries, a global limit and one limited type.
    sqlx::query(
        "UPDATE policies SET retry_base_ms = 100, retry_max_ms = 1000, max_concurrency = $1 \
         WHERE scope = '*'",
    )
    .bind(GLOBAL_LIMIT as i32)
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query("INSERT INTO policies (scope, max_concurrency) VALUES ($1, $2)")
        .bind(LIMITED)
        .bind(TYPE_LIMIT as i32)
        .execute(&pool)
        .await
        .unwrap();
    let mut fleet = Fleet {
        url: url.clone(),
        members: Vec::new(),
        retired: Vec::new(),
    };
    for name in FAULTED.into_iter().chain([OPS]) {
        let proxy = match name {
            OPS => None,
            _ => Some(TcpProxy::start(cluster.addr()).await.unwrap()),
        };
        let (agent, id) = Fleet::spawn(&url, &pool, name, proxy.as_ref()).await;
        fleet.members.push(Member {
            name,
            proxy,
            agent,
            id,
        });
    }
    let ops = agent_address(&pool, OPS, REGISTER).await.unwrap();
    let parked: i64 =
        sqlx::query_scalar("INSERT INTO tasks (task_type) VALUES ('soak.parked') RETURNING id")
            .fetch_one(&pool)
            .await
            .unwrap();
    Soak {
        cluster,
        pool,
        fleet,
        cli: Cli::new(&ops).await.unwrap(),
        op: Operator::default(),
        cancelled: Vec::new(),
        requeued: 0,
        parked,
        rng: fastrand::Rng::with_seed(seed),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t34_soak_mixed_load_seeded_faults_then_drain() {
    let secs = env_u64("LEASEHOLD_SOAK_SECS").unwrap_or(60);
    let seed = env_u64("LEASEHOLD_SOAK_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    eprintln!("t34: seed {seed} (LEASEHOLD_SOAK_SEED={seed} to repeat), faults for {secs} s");
    let mut soak = start(seed).await;
    let pool = soak.pool.clone();

    let stop = Arc::new(AtomicBool::new(false));
    let skipped = Arc::new(AtomicU64::new(0));
    let enqueuer = load::spawn_enqueuer(pool.clone(), seed ^ 0x5eed, stop.clone(), skipped.clone());
    tokio::time::sleep(WARM_UP).await;
    let baseline = usage(&soak.fleet);
    let baseline_connections = server_connections(&pool, DB).await.unwrap();

    let started = Instant::now();
    let fired = soak.faults(Duration::from_secs(secs)).await;
    let faulting = started.elapsed();
    stop.store(true, Ordering::SeqCst);
    let enqueued = enqueuer.await.unwrap();
    let drain_started = Instant::now();
    wait_ledger_done(&pool, DRAIN).await.unwrap();
    let drained_in = drain_started.elapsed();

    let report = ledger::check(&pool).await.unwrap();
    let peaks = limits::check(&pool).await.unwrap();
    let audited = soak.op.check_audit(&pool).await.unwrap();
    let fenced = log_count_all(soak.fleet.all_agents(), FENCED_LOG);
    let faults: u64 = fired.values().sum();
    let figures = Figures::collect(&pool, "T34", &report, faults, fenced)
        .await
        .unwrap();
    let endings = endings(&pool, &soak.cancelled).await;
    let end = usage(&soak.fleet);
    let end_connections = server_connections(&pool, DB).await.unwrap();
    let (mut grown, grew) = growth(&baseline, &end);
    grown.push(format!(
        "connections {baseline_connections}→{end_connections}"
    ));

    let by_kind: Vec<String> = fired.iter().map(|(k, n)| format!("{k:?} {n}")).collect();
    let peaks_text: Vec<String> = peaks
        .iter()
        .map(|p| format!("{} {}/{}", p.scope, p.peak, p.limit))
        .collect();
    eprintln!(
        "t34 summary: seed {seed}, faults for {faulting:.0?} + drain {drained_in:.1?}, tasks {} \
         ({} succeeded, {} cancelled, {} dead; {} batches skipped during outages), \
         faults {faults} ({}), recoveries {}, fenced writes {fenced}, lost {}, \
         duplicate executions {}, stale writes accepted {}, max concurrency seen/limit {}, \
         operator calls {} ({} unanswered; audit rows {audited}), planned failures {}, \
         timeouts {}, deadlines {}; {}",
        report.tasks,
        report.succeeded,
        report.cancelled,
        report.dead,
        skipped.load(Ordering::SeqCst),
        by_kind.join(", "),
        figures.recoveries,
        endings.lost,
        figures.duplicate_executions,
        figures.stale_writes_accepted,
        peaks_text.join(", "),
        soak.op.calls(),
        soak.op.unanswered(),
        endings.planned_failures,
        endings.timeouts,
        endings.deadlines,
        grown.join(", "),
    );

    // A batch whose commit reply was lost is in the ledger though not counted as enqueued.
    assert!(report.tasks >= enqueued, "{report:?}, {enqueued} enqueued");
    assert_eq!(
        endings.lost, 0,
        "tasks meant to succeed did not: {endings:?}"
    );
    assert_eq!(endings.impossible_successes, 0, "{endings:?}");
    assert_eq!(figures.duplicate_executions, 0, "{figures:?}");
    assert_eq!(figures.stale_writes_accepted, 0, "{figures:?}");
    assert!(grew.is_empty(), "unbounded growth in {grew:?}: {grown:?}");
    assert_eq!(
        end[OPS].pid, baseline[OPS].pid,
        "the operator's agent was replaced"
    );
    assert!(
        end_connections <= baseline_connections + CONNECTION_SLACK,
        "server connections grew: {grown:?}"
    );
    // Positive controls: every fault kind fired, and each path left its trace.
    for kind in KINDS {
        assert!(fired.contains_key(&kind), "{kind:?} never fired: {fired:?}");
    }
    assert!(
        recoveries(&pool).await.unwrap() >= 1,
        "no lease was recovered"
    );
    assert!(fenced >= 1, "no write was fenced");
    assert!(
        !soak.cancelled.is_empty() && soak.requeued >= 1,
        "the storms changed nothing"
    );
    assert!(
        endings.planned_failures >= 1 && endings.timeouts >= 1 && endings.deadlines >= 1,
        "{endings:?}"
    );
    let limited = peaks.iter().find(|p| p.scope == LIMITED).unwrap();
    assert_eq!(
        limited.peak, TYPE_LIMIT,
        "the limit was never reached: {peaks_text:?}"
    );
    for m in &mut soak.fleet.members {
        assert!(
            m.agent.is_running(),
            "agent {} exited:\n{}",
            m.agent.label(),
            m.agent.log_tail(40)
        );
    }
    drop(soak.fleet);
    pool.close().await;
}
