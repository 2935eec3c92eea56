#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The Watch stream of real agents over real gRPC (TESTING.md T22): a snapshot, then deltas
//! that keep a client's view equal to the agent's leases — across a burst over three agents,
//! with stalled watchers (dropped, agent memory flat), through reconnects, and at the end of
//! an agent (SIGTERM: a `closing` update; kill -9: an error).
//!
//! Every update goes through `WatchView::apply`, which refuses a sequence gap or a misplaced
//! snapshot; views are compared with the database's `tasks` rows, never with each other alone.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold_proto::v1 as pb;
use leasehold_proto::v1::agent_service_client::AgentServiceClient;
use leasehold_tests::fleet::spawn_agent;
use leasehold_tests::grpc::{Client, WatchView, agent_address, connect};
use leasehold_tests::{AgentHandle, TestDb};
use sqlx::PgPool;
use tonic::transport::Endpoint;

const WAIT: Duration = Duration::from_secs(30);

async fn enqueue_sleeps(db: &TestDb, n: i64, ms: i64) {
    sqlx::query(
        "INSERT INTO tasks (task_type, payload) SELECT 'sleep', jsonb_build_object('ms', $2::bigint) FROM generate_series(1, $1)",
    )
    .bind(n)
    .bind(ms)
    .execute(&db.pool)
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_gets_a_snapshot_then_deltas_that_track_the_leases() {
    let db = TestDb::new().await.unwrap();
    let mut agent = spawn_agent("leasehold-agent", &db.url, "w1", "sleep", &[], Vec::new())
        .await
        .unwrap();
    let addr = agent_address(&db.pool, "w1", WAIT).await.unwrap();
    let mut client = connect(&addr).await.unwrap();
    enqueue_sleeps(&db, 5, 60_000).await;
    let mut stream = client
        .watch(pb::WatchRequest {})
        .await
        .unwrap()
        .into_inner();
    let mut view = WatchView::default();
    let first = stream.message().await.unwrap().unwrap();
    view.apply(first).unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    while view.leases.len() < 5 {
        let update = tokio::time::timeout_at(deadline, stream.message())
            .await
            .expect("5 leases within the wait")
            .unwrap()
            .unwrap();
        view.apply(update).unwrap();
    }
    let held: Vec<(i64, i64)> =
        sqlx::query_as("SELECT id, lease_epoch FROM tasks WHERE status = 'running' ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let seen: Vec<(i64, i64)> = view.leases.values().map(|l| (l.task_id, l.epoch)).collect();
    assert_eq!(seen, held);
    assert!(view.now_ms > 0);
    // A second watcher rebuilds the same view from its snapshot.
    let mut again = client
        .watch(pb::WatchRequest {})
        .await
        .unwrap()
        .into_inner();
    let mut view2 = WatchView::default();
    view2
        .apply(again.message().await.unwrap().unwrap())
        .unwrap();
    let seen2: Vec<(i64, i64)> = view2
        .leases
        .values()
        .map(|l| (l.task_id, l.epoch))
        .collect();
    assert_eq!(seen2, held);
    // Draining closes the streams with a `closing` update.
    agent.sigterm().unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match tokio::time::timeout_at(deadline, stream.message())
            .await
            .expect("stream ends")
        {
            Ok(Some(update)) => view.apply(update).unwrap(),
            Ok(None) => break,
            Err(status) => panic!("stream ended with {status:?}"),
        }
    }
    assert!(view.closing, "the last update says the agent is closing");
    assert!(
        view.leases.is_empty(),
        "every lease was released: {:?}",
        view.leases.keys()
    );
    let exit = agent.wait_exit(WAIT).await.unwrap();
    assert!(exit.success(), "a drained agent exits 0: {exit}");
    db.drop_db().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// Harness for the T22 tests below: streams followed in the background, database views of the
// leases, and condition waits that say what was still different when they time out.
// ---------------------------------------------------------------------------------------------

/// How a followed stream ended.
#[derive(Debug, Clone, PartialEq)]
enum End {
    /// With OK.
    Clean,
    /// With an error status (or a broken connection, which tonic reports as one).
    Status(tonic::Code, String),
    /// An update broke the snapshot-then-sequence contract: `WatchView::apply` refused it.
    Contract(String),
}

/// What a followed stream has shown so far.
#[derive(Debug, Default, Clone)]
struct Followed {
    view: WatchView,
    /// Updates received (the snapshot included).
    updates: u64,
    end: Option<End>,
}

/// A Watch stream read in the background, every update applied with [`WatchView::apply`].
/// Dropping it drops the stream (the client cancels it mid-flow).
struct Follower {
    state: Arc<Mutex<Followed>>,
    task: tokio::task::JoinHandle<()>,
    _client: Client,
}

impl Follower {
    async fn start(client: &Client) -> Follower {
        let mut client = client.clone();
        let mut stream = client
            .watch(pb::WatchRequest {})
            .await
            .unwrap()
            .into_inner();
        let state = Arc::new(Mutex::new(Followed::default()));
        let shared = Arc::clone(&state);
        let task = tokio::spawn(async move {
            let end = loop {
                match stream.message().await {
                    Ok(Some(update)) => {
                        let mut s = shared.lock().unwrap();
                        s.updates += 1;
                        if let Err(error) = s.view.apply(update) {
                            break End::Contract(format!("{error:#}"));
                        }
                    }
                    Ok(None) => break End::Clean,
                    Err(status) => break End::Status(status.code(), status.message().into()),
                }
            };
            shared.lock().unwrap().end = Some(end);
        });
        Follower {
            state,
            task,
            _client: client,
        }
    }

    fn now(&self) -> Followed {
        self.state.lock().unwrap().clone()
    }

    /// Waits for the snapshot; fails if the stream ended instead.
    async fn snapshot(&self) -> Followed {
        let mut last = None;
        settle("the watcher has its snapshot", WAIT, || {
            let f = self.now();
            let result = if let Some(end) = &f.end {
                panic!("the stream ended before its snapshot: {end:?}");
            } else if f.updates == 0 {
                Some("no update yet".to_string())
            } else {
                None
            };
            last = Some(f);
            async move { result }
        })
        .await;
        last.unwrap()
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Panics when a followed stream ended or broke the contract while it should be live.
fn assert_live(name: &str, f: &Followed) {
    if let Some(end) = &f.end {
        panic!("the Watch stream of {name} ended while the agent runs: {end:?}");
    }
}

/// Polls `check` every 100 ms until it returns `None` (settled); panics after `timeout` with the
/// last thing it said was still different.
async fn settle<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<String>>,
{
    let start = Instant::now();
    loop {
        let past = start.elapsed() >= timeout;
        match check().await {
            None => return,
            Some(reason) if past => {
                panic!(
                    "timed out after {timeout:?} waiting until {what}; last difference: {reason}"
                )
            }
            Some(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Task id → (lease owner, epoch).
type Holders = BTreeMap<i64, (String, i64)>;

fn view_holders(view: &WatchView) -> Holders {
    view.leases
        .values()
        .map(|l| (l.task_id, (l.owner.clone(), l.epoch)))
        .collect()
}

/// The database's live leases: every running (or cancel-requested) task.
async fn db_holders(pool: &PgPool) -> Holders {
    let rows: Vec<(i64, Option<String>, i64)> = sqlx::query_as(
        "SELECT id, lease_owner, lease_epoch FROM tasks \
         WHERE status IN ('running', 'cancel_requested') ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    rows.into_iter()
        .map(|(id, owner, epoch)| (id, (owner.unwrap_or_default(), epoch)))
        .collect()
}

/// The first differences between two lease maps, in words.
fn differences<V: std::fmt::Debug + PartialEq>(
    a_name: &str,
    a: &BTreeMap<i64, V>,
    b_name: &str,
    b: &BTreeMap<i64, V>,
) -> String {
    let mut out = Vec::new();
    for (id, va) in a {
        match b.get(id) {
            None => out.push(format!("task {id}: {a_name} has {va:?}, {b_name} nothing")),
            Some(vb) if vb != va => {
                out.push(format!("task {id}: {a_name} {va:?}, {b_name} {vb:?}"))
            }
            Some(_) => {}
        }
    }
    for (id, vb) in b {
        if !a.contains_key(id) {
            out.push(format!("task {id}: {b_name} has {vb:?}, {a_name} nothing"));
        }
    }
    let n = out.len();
    out.truncate(8);
    format!(
        "{a_name} {} leases, {b_name} {}; {n} differ: {}",
        a.len(),
        b.len(),
        out.join("; ")
    )
}

async fn scalar(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Tasks neither running nor succeeded (still waiting, or failed somehow).
async fn open_tasks(pool: &PgPool) -> i64 {
    scalar(
        pool,
        "SELECT count(*) FROM tasks WHERE status NOT IN ('running', 'cancel_requested', 'succeeded')",
    )
    .await
}

/// `(claimed, succeeded)` of agent `id` as the database tells them: every attempt it finished
/// plus every lease it holds now, and its successful attempts.
async fn db_claims(pool: &PgPool, id: &str) -> (u64, u64) {
    let (claimed, succeeded): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM task_attempts WHERE agent = $1) \
              + (SELECT count(*) FROM tasks WHERE lease_owner = $1 \
                 AND status IN ('running', 'cancel_requested')), \
                (SELECT count(*) FROM task_attempts WHERE agent = $1 \
                 AND outcome IN ('succeeded', 'partially_succeeded'))",
    )
    .bind(id)
    .fetch_one(pool)
    .await
    .unwrap();
    (claimed as u64, succeeded as u64)
}

/// Checks that every lease of a new stream's snapshot is at least as new as the same lease (same
/// epoch) in a view taken before the request: same claim, times no older, flags kept. Returns
/// how many of the compared leases had been renewed since their claim.
fn assert_no_older(
    cycle: usize,
    before: &BTreeMap<i64, pb::Lease>,
    snapshot: &BTreeMap<i64, pb::Lease>,
) -> usize {
    let mut renewed = 0;
    for (id, old) in before {
        let Some(new) = snapshot.get(id).filter(|l| l.epoch == old.epoch) else {
            continue;
        };
        let same_claim = (&new.owner, &new.task_type, new.attempt, new.started_at_ms)
            == (&old.owner, &old.task_type, old.attempt, old.started_at_ms);
        assert!(
            same_claim
                && new.lease_until_ms >= old.lease_until_ms
                && new.heartbeat_at_ms >= old.heartbeat_at_ms
                && (new.slow || !old.slow)
                && (new.cancel_requested || !old.cancel_requested),
            "reconnect {cycle}: the snapshot's lease of task {id} is older than what a watcher \
             had before the request:\n  before   {old:?}\n  snapshot {new:?}"
        );
        if old.heartbeat_at_ms > old.started_at_ms {
            renewed += 1;
        }
    }
    renewed
}

/// `VmRSS` of a process, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS in /proc/{pid}/status"))
}

/// Lines of the agent's stderr containing `text`.
fn log_lines(agent: &AgentHandle, text: &str) -> usize {
    agent
        .stderr_text()
        .unwrap()
        .lines()
        .filter(|l| l.contains(text))
        .count()
}

// ---------------------------------------------------------------------------------------------
// T22
// ---------------------------------------------------------------------------------------------

/// Three agents, each watched from before a burst of 2,000 tasks (mostly 0–300 ms, one in 20
/// of ten minutes so leases are live at the end). Once the database is stable, the union of the
/// three views is the database's set of running tasks, task by task (id, owner, epoch), no
/// task is in two views, no feed overflowed, and each view's counters (claimed, succeeded,
/// held) agree with the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_burst_of_2000_tasks_over_3_agents_the_union_of_the_streams_equals_the_database() {
    const TASKS: i64 = 2_000;
    const LONG_EVERY: i64 = 20;
    let db = TestDb::new().await.unwrap();
    let names = ["burst-1", "burst-2", "burst-3"];
    let mut agents = Vec::new();
    let mut ids = Vec::new();
    let mut followers = Vec::new();
    for name in names {
        let agent = spawn_agent("leasehold-agent", &db.url, name, "sleep", &[], Vec::new())
            .await
            .unwrap();
        let id = agent.wait_registered(&db.pool, name, WAIT).await.unwrap();
        let addr = agent_address(&db.pool, name, WAIT).await.unwrap();
        let client = connect(&addr).await.unwrap();
        followers.push(Follower::start(&client).await);
        agents.push(agent);
        ids.push(id);
    }
    for (f, id) in followers.iter().zip(&ids) {
        let first = f.snapshot().await;
        assert_eq!(&first.view.agent_id, id, "the stream names its agent");
        assert!(first.view.leases.is_empty(), "nothing ran before the burst");
    }
    // The burst: ten statements of 200 back to back.
    for batch in 0..10_i64 {
        sqlx::query(
            "INSERT INTO tasks (task_type, payload) \
             SELECT 'sleep', jsonb_build_object('ms', \
                 CASE WHEN i % $3 = 0 THEN 600000 ELSE (i * 7919) % 301 END) \
             FROM generate_series($1::bigint, $2::bigint) i",
        )
        .bind(batch * TASKS / 10 + 1)
        .bind((batch + 1) * TASKS / 10)
        .bind(LONG_EVERY)
        .execute(&db.pool)
        .await
        .unwrap();
    }
    let long = TASKS / LONG_EVERY;
    settle(
        "the union of the three views equals the database's running tasks",
        Duration::from_secs(90),
        || async {
            let views: Vec<Followed> = followers.iter().map(Follower::now).collect();
            for (name, f) in names.iter().zip(&views) {
                assert_live(name, f);
            }
            let open = open_tasks(&db.pool).await;
            if open > 0 {
                return Some(format!("{open} tasks not yet running or succeeded"));
            }
            let held = db_holders(&db.pool).await;
            if held.len() as i64 != long {
                return Some(format!(
                    "{} running in the database, {long} expected",
                    held.len()
                ));
            }
            let mut union = Holders::new();
            for (name, f) in names.iter().zip(&views) {
                for (task, holder) in view_holders(&f.view) {
                    if let Some(other) = union.insert(task, holder.clone()) {
                        panic!("task {task} is in two views: {other:?} and {name}'s {holder:?}");
                    }
                }
            }
            if union != held {
                return Some(differences("the views", &union, "the database", &held));
            }
            for ((name, f), id) in names.iter().zip(&views).zip(&ids) {
                let stats = f.view.stats.clone().unwrap_or_default();
                let (claimed, succeeded) = db_claims(&db.pool, id).await;
                if (stats.claimed, stats.succeeded, stats.held as usize)
                    != (claimed, succeeded, f.view.leases.len())
                {
                    return Some(format!(
                        "{name}: stats claimed {} succeeded {} held {}, database claimed \
                         {claimed} succeeded {succeeded}, view holds {}",
                        stats.claimed,
                        stats.succeeded,
                        stats.held,
                        f.view.leases.len()
                    ));
                }
            }
            None
        },
    )
    .await;
    // Settled: the same checks as plain assertions, plus the feed.
    let held = db_holders(&db.pool).await;
    let mut union = Holders::new();
    let mut total_claimed = 0;
    for ((name, f), id) in names
        .iter()
        .zip(followers.iter().map(Follower::now))
        .zip(&ids)
    {
        assert_live(name, &f);
        assert_eq!(
            f.view.dropped_events, 0,
            "agent {name}'s feed overflowed ({} events dropped): its stream relied on \
             reconciliation with the lease book instead of the deltas",
            f.view.dropped_events
        );
        for lease in f.view.leases.values() {
            assert_eq!(&lease.owner, id, "{name}'s view holds only its own leases");
            assert_eq!(lease.task_type, "sleep");
        }
        let stats = f.view.stats.clone().unwrap();
        total_claimed += stats.claimed;
        println!(
            "{name}: {} leases in view, {} updates, {} deltas, claimed {} succeeded {}",
            f.view.leases.len(),
            f.updates,
            f.view.deltas,
            stats.claimed,
            stats.succeeded
        );
        union.extend(view_holders(&f.view));
    }
    assert_eq!(union, held, "{}", differences("views", &union, "db", &held));
    assert!(
        total_claimed >= TASKS as u64,
        "the agents claimed every task at least once: {total_claimed}"
    );
    drop(followers);
    drop(agents);
    db.drop_db().await.unwrap();
}

/// An agent with 2,000 leases renewed every 200 ms (10,000 deltas a second) and three watchers
/// that never read (64 KiB HTTP/2 windows, so the agent's side fills at once). The aggregator
/// must drop them (RESOURCE_EXHAUSTED, logged); afterwards the agent's RSS stays flat for 20 s
/// while a fourth, reading watcher keeps getting every update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_watcher_does_not_grow_the_agents_memory() {
    const LEASES: i64 = 2_000;
    const STALLED: usize = 3;
    const DROPPED_LOG: &str = "a watcher fell behind and was dropped";
    const MARGIN_KIB: u64 = 30 * 1024;
    let db = TestDb::new().await.unwrap();
    let agent = spawn_agent(
        "leasehold-agent",
        &db.url,
        "stall",
        "sleep",
        &[
            "--concurrency",
            "2000",
            "--claim-batch",
            "1000",
            "--heartbeat",
            "200ms",
            "--lease-ttl",
            "2s",
        ],
        Vec::new(),
    )
    .await
    .unwrap();
    let addr = agent_address(&db.pool, "stall", WAIT).await.unwrap();
    let reader = Follower::start(&connect(&addr).await.unwrap()).await;
    reader.snapshot().await;
    enqueue_sleeps(&db, LEASES, 600_000).await;
    settle(
        "the reading watcher sees 2,000 leases",
        Duration::from_secs(90),
        || {
            let f = reader.now();
            assert_live("the reader", &f);
            let n = f.view.leases.len() as i64;
            async move { (n != LEASES).then(|| format!("{n} leases in view")) }
        },
    )
    .await;

    // Watchers that never read, each on a connection of its own with the smallest windows.
    let mut stalled = Vec::new();
    for _ in 0..STALLED {
        let channel = Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .initial_stream_window_size(Some(65_535))
            .initial_connection_window_size(Some(65_535))
            .connect()
            .await
            .unwrap();
        let mut client = AgentServiceClient::new(channel)
            .max_decoding_message_size(leasehold_proto::MAX_MESSAGE_BYTES);
        let stream = client
            .watch(pb::WatchRequest {})
            .await
            .unwrap()
            .into_inner();
        stalled.push((client, stream));
    }
    let mut before_drop = vec![rss_kib(agent.pid())];
    settle(
        "the aggregator drops the stalled watchers",
        Duration::from_secs(90),
        || {
            before_drop.push(rss_kib(agent.pid()));
            let dropped = log_lines(&agent, DROPPED_LOG);
            assert_live("the reader", &reader.now());
            let samples = before_drop.clone();
            async move {
                (dropped < STALLED).then(|| {
                    format!(
                        "{dropped} of {STALLED} dropped; agent RSS (KiB) first {}, now {}",
                        samples[0],
                        samples[samples.len() - 1]
                    )
                })
            }
        },
    )
    .await;

    // Warm-up: let what the drops freed settle, then watch the memory for 20 s.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let deltas_before = reader.now().view.deltas;
    let mut samples = Vec::new();
    for _ in 0..40 {
        samples.push(rss_kib(agent.pid()));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let first = samples[0];
    let late_max = samples[samples.len() / 2..].iter().copied().max().unwrap();
    println!(
        "agent RSS (KiB): at the stall {}, peak before the drops {}, after: first {first}, \
         max of the last half {late_max}, all {samples:?}",
        before_drop[0],
        before_drop.iter().max().unwrap()
    );
    assert!(
        late_max <= first + MARGIN_KIB,
        "the agent's memory grew with stalled watchers open: from {first} KiB to {late_max} KiB"
    );
    let after = reader.now();
    assert_live("the reader", &after);
    assert_eq!(after.view.dropped_events, 0, "the feed overflowed");
    let got = after.view.deltas - deltas_before;
    assert!(
        got >= 10 * LEASES as u64,
        "the reading watcher kept getting renewals while the others were stalled: {got} deltas \
         in 20 s (expected about {})",
        100 * LEASES
    );
    assert_eq!(after.view.leases.len() as i64, LEASES);

    // Read the stalled streams at last: what was buffered, then RESOURCE_EXHAUSTED.
    for (i, (_client, mut stream)) in stalled.into_iter().enumerate() {
        let mut view = WatchView::default();
        let status = loop {
            match tokio::time::timeout(WAIT, stream.message())
                .await
                .unwrap_or_else(|_| panic!("stalled stream {i} neither ends nor yields"))
            {
                Ok(Some(update)) => view.apply(update).unwrap(),
                Ok(None) => panic!(
                    "stalled stream {i} ended with OK after {} updates",
                    view.seq
                ),
                Err(status) => break status,
            }
        };
        assert_eq!(
            status.code(),
            tonic::Code::ResourceExhausted,
            "stalled stream {i} ends saying it fell behind: {status:?}"
        );
        println!(
            "stalled stream {i}: {} updates buffered, then {:?}: {}",
            view.seq + 1,
            status.code(),
            status.message()
        );
    }
    assert!(log_lines(&agent, DROPPED_LOG) >= STALLED);
    drop(reader);
    drop(agent);
    db.drop_db().await.unwrap();
}

/// A watcher that drops its stream mid-flow (sometimes its whole connection) and reconnects,
/// 70 times while tasks come and go — more than the 64 watchers an agent serves at once, so
/// cancelled streams must be let go — rebuilds, once things settle, the view the database has
/// and a continuously connected watcher has: the same leases, field by field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnecting_watcher_rebuilds_the_same_view() {
    const MIDFLOW: usize = 10;
    const QUICK: usize = 60;
    let db = TestDb::new().await.unwrap();
    let agent = spawn_agent(
        "leasehold-agent",
        &db.url,
        "recon",
        "sleep",
        &[],
        Vec::new(),
    )
    .await
    .unwrap();
    let addr = agent_address(&db.pool, "recon", WAIT).await.unwrap();
    let steady = Follower::start(&connect(&addr).await.unwrap()).await;
    steady.snapshot().await;
    // Churn: ten tasks every 200 ms, one of them ten minutes long, the rest up to 400 ms.
    let pool = db.pool.clone();
    let churn = tokio::spawn(async move {
        for round in 0_i64.. {
            sqlx::query(
                "INSERT INTO tasks (task_type, payload) \
                 SELECT 'sleep', jsonb_build_object('ms', \
                     CASE WHEN i = 0 THEN 600000 ELSE ($1 * 131 + i * 37) % 400 END) \
                 FROM generate_series(0, 9) i",
            )
            .bind(round)
            .execute(&pool)
            .await
            .unwrap();
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let mut client = connect(&addr).await.unwrap();
    let mut renewed_compared = 0;
    for cycle in 0..MIDFLOW + QUICK {
        if cycle % 2 == 1 {
            // A new connection: the old one goes away with its stream.
            client = connect(&addr).await.unwrap();
        }
        // What the steady watcher had before this request: the snapshot must be no older.
        let before = steady.now().view.leases;
        let mut stream = client
            .watch(pb::WatchRequest {})
            .await
            .unwrap_or_else(|s| panic!("reconnect {cycle} refused: {s:?}"))
            .into_inner();
        let mut view = WatchView::default();
        let deltas_wanted = if cycle < MIDFLOW { 2 } else { 0 };
        let mut delta_updates = 0;
        loop {
            let update = tokio::time::timeout(WAIT, stream.message())
                .await
                .expect("an update within the wait")
                .unwrap()
                .expect("the stream stays open");
            let has_deltas = !update.deltas.is_empty();
            let snapshot = update.seq == 0;
            view.apply(update).unwrap();
            if snapshot {
                renewed_compared += assert_no_older(cycle, &before, &view.leases);
            }
            if has_deltas {
                delta_updates += 1;
            }
            if delta_updates >= deltas_wanted {
                break;
            }
        }
        drop(stream);
    }
    assert!(
        renewed_compared > 0,
        "no snapshot was compared with a renewed lease: the freshness check proved nothing"
    );
    // The last reconnect, while the churn still runs; then the churn stops.
    let again = Follower::start(&connect(&addr).await.unwrap()).await;
    again.snapshot().await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    churn.abort();
    let _ = churn.await;
    settle(
        "the reconnected view equals the database and the steady view",
        Duration::from_secs(60),
        || async {
            let (a, s) = (again.now(), steady.now());
            assert_live("the reconnected watcher", &a);
            assert_live("the steady watcher", &s);
            let open = open_tasks(&db.pool).await;
            if open > 0 {
                return Some(format!("{open} tasks not yet running or succeeded"));
            }
            let rows: Vec<(i64, Option<String>, i64, i32, i64)> = sqlx::query_as(
                "SELECT id, lease_owner, lease_epoch, attempt, \
                        floor(extract(epoch FROM started_at) * 1000)::bigint \
                 FROM tasks WHERE status IN ('running', 'cancel_requested') ORDER BY id",
            )
            .fetch_all(&db.pool)
            .await
            .unwrap();
            let db_leases: BTreeMap<i64, (String, i64, i32, i64)> = rows
                .into_iter()
                .map(|(id, o, e, at, st)| (id, (o.unwrap_or_default(), e, at, st)))
                .collect();
            let seen = |v: &WatchView| -> BTreeMap<i64, (String, i64, i32, i64)> {
                v.leases
                    .values()
                    .map(|l| {
                        (
                            l.task_id,
                            (l.owner.clone(), l.epoch, l.attempt, l.started_at_ms),
                        )
                    })
                    .collect()
            };
            let (a_leases, s_leases) = (seen(&a.view), seen(&s.view));
            if a_leases != db_leases {
                return Some(differences(
                    "reconnected",
                    &a_leases,
                    "database",
                    &db_leases,
                ));
            }
            if s_leases != db_leases {
                return Some(differences("steady", &s_leases, "database", &db_leases));
            }
            // Field by field, times and stats included (both saw the same last flush).
            if a.view.leases != s.view.leases || a.view.stats != s.view.stats {
                return Some(format!(
                    "stats equal: {}; {}",
                    a.view.stats == s.view.stats,
                    differences("reconnected", &a.view.leases, "steady", &s.view.leases)
                ));
            }
            None
        },
    )
    .await;
    let (a, s) = (again.now(), steady.now());
    assert!(
        !a.view.leases.is_empty(),
        "long tasks are running at the end"
    );
    assert_eq!(a.view.dropped_events, 0, "the feed overflowed");
    assert_eq!(s.view.dropped_events, 0, "the feed overflowed");
    println!(
        "{} leases at the end; the steady watcher applied {} updates, {} deltas",
        a.view.leases.len(),
        s.updates,
        s.view.deltas
    );
    drop((again, steady));
    drop(agent);
    db.drop_db().await.unwrap();
}

/// kill -9: the stream ends with an error (the connection is gone), never with a clean end or
/// a `closing` update. (SIGTERM ends it with `closing`, then OK: the first test.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_agents_stream_ends_with_an_error() {
    let db = TestDb::new().await.unwrap();
    let mut agent = spawn_agent("leasehold-agent", &db.url, "k9", "sleep", &[], Vec::new())
        .await
        .unwrap();
    let addr = agent_address(&db.pool, "k9", WAIT).await.unwrap();
    let mut client = connect(&addr).await.unwrap();
    let mut stream = client
        .watch(pb::WatchRequest {})
        .await
        .unwrap()
        .into_inner();
    let mut view = WatchView::default();
    view.apply(stream.message().await.unwrap().unwrap())
        .unwrap();
    enqueue_sleeps(&db, 5, 600_000).await;
    while view.leases.len() < 5 {
        let update = tokio::time::timeout(WAIT, stream.message())
            .await
            .expect("5 leases within the wait")
            .unwrap()
            .unwrap();
        view.apply(update).unwrap();
    }
    agent.kill9().unwrap();
    let status = loop {
        match tokio::time::timeout(WAIT, stream.message())
            .await
            .expect("the stream of a killed agent ends")
        {
            Ok(Some(update)) => view.apply(update).unwrap(),
            Ok(None) => panic!("the stream of a killed agent ended cleanly"),
            Err(status) => break status,
        }
    };
    assert!(!view.closing, "a killed agent sent no closing update");
    assert_ne!(status.code(), tonic::Code::Ok);
    println!("stream of the killed agent ended: {status:?}");
    agent.wait_exit(WAIT).await.unwrap();
    db.drop_db().await.unwrap();
}
