#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// These read the words (deprecated beside the state and outcome enums) that the agent still
// fills for older consoles: they keep checking that it does.
#![allow(deprecated)]
//! Named resource leases across real agents (issue 8, DESIGN §4 "Resource leases"): shard
//! groups shared by `leasehold-agent run --shard-groups` processes, and locks through gRPC, on
//! PostgreSQL.
//!
//! The shard tests follow every member's Watch stream from its start and build a ledger of
//! ownership intervals per shard — (agent, token, from, to), from the agents' own
//! `resource_change` times — then prove: no two intervals of a shard overlap, tokens grow
//! from one holding to the next, the ledger is exactly the database's
//! `resource_lease_history`, counts stay within ±1, a pause shorter than the TTL moves nothing
//! (the debounce), a killed member's shards move within TTL + grace + a heartbeat and not
//! before its lease + grace, and a stale owner's writes are fenced.
//!
//! The tests take turns (one lock for the file): each starts several agents with second-scale
//! timings, and a 2-core machine running them side by side would measure the machine.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use chrono::{DateTime, Utc};
use leasehold_proto::v1 as pb;
use leasehold_shared::store::HolderWrite;
use leasehold_shared::store::postgres::resource_fence;
use leasehold_tests::fleet::{ConfigToken, GRACE, TTL, spawn_agent, start_agent, tokens_config};
use leasehold_tests::grpc::{Client, WatchView, agent_address, connect, connect_with};
use leasehold_tests::metrics::{free_port, scrape_metrics};
use leasehold_tests::{AgentHandle, TestDb, wait_until};
use sqlx::PgPool;
use tonic::Code;

const WAIT: Duration = Duration::from_secs(30);

/// One test at a time (see the module comment).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

// ---------------------------------------------------------------------------------------------
// Agents, streams and the ledger.
// ---------------------------------------------------------------------------------------------

/// A member of a group: its process, registry id and followed Watch stream.
struct Member {
    name: String,
    id: String,
    agent: AgentHandle,
    stream: Follower,
}

/// Starts an agent with `extra` flags, waits for its registration and address, and (for a
/// member) subscribes to its Watch stream and waits for the snapshot, so every holding it
/// ever has is in the snapshot or a later delta.
async fn start_member(db: &TestDb, name: &str, extra: &[&str]) -> Member {
    let agent = spawn_agent("leasehold-agent", &db.url, name, "noop", extra, Vec::new())
        .await
        .unwrap();
    let id = agent.wait_registered(&db.pool, name, WAIT).await.unwrap();
    let addr = agent_address(&db.pool, name, WAIT).await.unwrap();
    let client = connect(&addr).await.unwrap();
    let stream = Follower::start(&client).await;
    stream.wait_snapshot(&id).await;
    Member {
        name: name.to_string(),
        id,
        agent,
        stream,
    }
}

/// One holding change seen on a stream.
#[derive(Debug, Clone)]
struct Change {
    agent: String,
    name: String,
    token: i64,
    held: bool,
    reason: String,
    /// `at_ms` of the delta; `None` for a holding found in the snapshot.
    at_ms: Option<i64>,
}

#[derive(Debug, Default)]
struct Followed {
    view: WatchView,
    updates: u64,
    changes: Vec<Change>,
    /// Why the stream ended, if it did.
    end: Option<String>,
}

/// A Watch stream read in the background, every update checked by [`WatchView::apply`].
struct Follower {
    state: Arc<Mutex<Followed>>,
    task: tokio::task::JoinHandle<()>,
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
                        let mut f = shared.lock().unwrap();
                        f.updates += 1;
                        let agent = update.agent_id.clone();
                        let mut seen = Vec::new();
                        if let Some(s) = &update.snapshot {
                            for r in &s.resources {
                                seen.push(Change {
                                    agent: agent.clone(),
                                    name: r.name.clone(),
                                    token: r.token,
                                    held: true,
                                    reason: "snapshot".into(),
                                    at_ms: None,
                                });
                            }
                        }
                        for d in &update.deltas {
                            if let Some(pb::delta::Kind::ResourceChange(c)) = &d.kind {
                                let r = c.resource.clone().expect("a change names its resource");
                                seen.push(Change {
                                    agent: agent.clone(),
                                    name: r.name,
                                    token: r.token,
                                    held: c.held,
                                    reason: c.reason.clone(),
                                    at_ms: Some(c.at_ms),
                                });
                            }
                        }
                        if let Err(error) = f.view.apply(update) {
                            break format!("contract broken: {error:#}");
                        }
                        f.changes.extend(seen);
                    }
                    Ok(None) => break "closed".to_string(),
                    Err(status) => break format!("{:?}: {}", status.code(), status.message()),
                }
            };
            shared.lock().unwrap().end = Some(end);
        });
        Follower { state, task }
    }

    async fn wait_snapshot(&self, id: &str) {
        wait_until("the Watch snapshot arrived", WAIT, || {
            let f = self.state.lock().unwrap();
            let done = f.updates > 0;
            if let Some(end) = &f.end {
                panic!("the stream ended before its snapshot: {end}");
            }
            async move { Ok(done) }
        })
        .await
        .unwrap();
        assert_eq!(self.state.lock().unwrap().view.agent_id, id);
    }

    fn changes(&self) -> Vec<Change> {
        self.state.lock().unwrap().changes.clone()
    }

    /// Shard name → token of what the stream says the agent holds now.
    fn holding(&self) -> BTreeMap<String, i64> {
        let f = self.state.lock().unwrap();
        f.view
            .resources
            .values()
            .map(|r| (r.name.clone(), r.token))
            .collect()
    }

    /// Panics when the stream ended or lost events.
    fn assert_live(&self, who: &str) {
        let f = self.state.lock().unwrap();
        assert!(f.end.is_none(), "the stream of {who} ended: {:?}", f.end);
        assert_eq!(f.view.dropped_events, 0, "{who}'s stream dropped events");
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One ownership interval of a shard (times: ms since the epoch, this host's clock).
#[derive(Debug, Clone, PartialEq)]
struct Interval {
    agent: String,
    token: i64,
    from: i64,
    to: i64,
    /// How it ended: a loss reason, or "open" (still held when the ledger was closed) or
    /// "killed".
    ended: String,
}

/// (lease name, token) → (owner, acquired_at ms) of every `resource_lease_history` row of
/// `group`.
async fn history(pool: &PgPool, group: &str) -> BTreeMap<(String, i64), (String, i64)> {
    let rows: Vec<(String, i64, String, DateTime<Utc>)> = sqlx::query_as(
        "SELECT name, token, owner, acquired_at FROM resource_lease_history \
         WHERE group_name = $1 ORDER BY name, token",
    )
    .bind(group)
    .fetch_all(pool)
    .await
    .unwrap();
    rows.into_iter()
        .map(|(n, t, o, at)| ((n, t), (o, at.timestamp_millis())))
        .collect()
}

/// Builds the ledger from every stream's changes. A holding from a snapshot starts at its
/// database acquisition (earlier than any agent could report it: a stricter check); one
/// still open ends at `closed_at[agent]` (the kill, for a killed agent) or `end_ms`.
fn ledger(
    changes: &[Change],
    hist: &BTreeMap<(String, i64), (String, i64)>,
    closed_at: &BTreeMap<String, i64>,
    end_ms: i64,
) -> BTreeMap<String, Vec<Interval>> {
    let mut open: BTreeMap<(String, String), (i64, i64)> = BTreeMap::new();
    let mut out: BTreeMap<String, Vec<Interval>> = BTreeMap::new();
    for c in changes {
        let key = (c.agent.clone(), c.name.clone());
        if c.held {
            let (owner, acquired) = hist
                .get(&(c.name.clone(), c.token))
                .unwrap_or_else(|| panic!("{c:?}: no history row for this holding"));
            assert_eq!(owner, &c.agent, "{c:?}: history names another owner");
            let from = match c.at_ms {
                Some(at) => {
                    assert!(
                        at >= *acquired,
                        "{c:?}: reported acquired at {at}, before the database's {acquired}"
                    );
                    at
                }
                None => *acquired,
            };
            if let Some(prev) = open.insert(key, (c.token, from)) {
                // A snapshot followed by the same holding's delta (queued before the
                // snapshot) only repeats it.
                assert_eq!(prev.0, c.token, "{c:?}: acquired while holding {prev:?}");
                open.insert((c.agent.clone(), c.name.clone()), prev);
            }
        } else {
            let Some((token, from)) = open.remove(&key) else {
                panic!("{c:?}: lost a shard it did not hold");
            };
            assert_eq!(token, c.token, "{c:?}: lost another holding than it held");
            let to = c.at_ms.unwrap();
            out.entry(c.name.clone()).or_default().push(Interval {
                agent: c.agent.clone(),
                token,
                from,
                to,
                ended: c.reason.clone(),
            });
        }
    }
    for ((agent, name), (token, from)) in open {
        let (to, ended) = match closed_at.get(&agent) {
            Some(at) => (*at, "killed"),
            None => (end_ms, "open"),
        };
        out.entry(name).or_default().push(Interval {
            agent,
            token,
            from,
            to,
            ended: ended.into(),
        });
    }
    for list in out.values_mut() {
        list.sort_by_key(|i| i.token);
    }
    out
}

/// Every shard owned by at most one agent at every instant, tokens strictly growing from one
/// holding to the next, and the ledger equal to the database's history. Returns the number of
/// moves (a holding by another agent than the one before).
fn check_ledger(
    ledger: &BTreeMap<String, Vec<Interval>>,
    hist: &BTreeMap<(String, i64), (String, i64)>,
) -> usize {
    let mut moves = 0;
    for (name, list) in ledger {
        for i in list {
            assert!(
                i.from <= i.to,
                "{name}: an interval ends before it starts: {i:?}"
            );
        }
        for pair in list.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            assert!(
                b.token > a.token,
                "{name}: tokens do not grow: {a:?} then {b:?}"
            );
            assert!(
                a.to <= b.from,
                "{name}: two owners at once ({} ms of overlap): {a:?} and {b:?}",
                a.to - b.from
            );
            if a.agent != b.agent {
                moves += 1;
            }
        }
    }
    let from_ledger: BTreeSet<(String, i64, String)> = ledger
        .iter()
        .flat_map(|(n, l)| l.iter().map(|i| (n.clone(), i.token, i.agent.clone())))
        .collect();
    let from_db: BTreeSet<(String, i64, String)> = hist
        .iter()
        .map(|((n, t), (o, _))| (n.clone(), *t, o.clone()))
        .collect();
    assert_eq!(
        from_ledger
            .symmetric_difference(&from_db)
            .collect::<Vec<_>>(),
        Vec::<&(String, i64, String)>::new(),
        "the streams' ledger and resource_lease_history disagree"
    );
    moves
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap())
        .unwrap()
}

// ---------------------------------------------------------------------------------------------
// gRPC and database helpers.
// ---------------------------------------------------------------------------------------------

async fn create_group(client: &mut Client, name: &str, count: u32) {
    let out = client
        .create_shard_group(pb::CreateShardGroupRequest {
            name: name.into(),
            count,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(out.created);
    assert_eq!(out.group.unwrap().shard_count, count);
}

/// Shard number → (owner, token, state), by ListShards.
type Shards = BTreeMap<u32, (String, i64, String)>;

async fn list_shards(client: &mut Client, group: &str) -> Shards {
    let out = client
        .list_shards(pb::ListShardsRequest {
            group: group.into(),
        })
        .await
        .unwrap()
        .into_inner();
    out.shards
        .into_iter()
        .map(|s| (s.shard, (s.owner, s.token, s.state)))
        .collect()
}

fn owner_tokens(shards: &Shards) -> BTreeMap<u32, (String, i64)> {
    shards
        .iter()
        .map(|(s, (o, t, _))| (*s, (o.clone(), *t)))
        .collect()
}

/// Shards per owner.
fn counts(shards: &Shards) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for (owner, _, _) in shards.values() {
        *out.entry(owner.clone()).or_default() += 1;
    }
    out
}

/// Every shard held (state `held`) by one of `ids`, each of them owning some, counts within ±1.
fn balanced(shards: &Shards, ids: &[&str]) -> bool {
    let c = counts(shards);
    let all_held = shards
        .values()
        .all(|(o, _, state)| state == "held" && ids.contains(&o.as_str()));
    let (min, max) = (
        c.values().min().copied().unwrap_or(0),
        c.values().max().copied().unwrap_or(0),
    );
    all_held && c.len() == ids.len() && max - min <= 1
}

/// Shard number → (owner, token) as the streams of `members` tell it; `None` while two
/// streams claim one shard (a handover whose release is not streamed yet).
fn streams_holding(members: &[&Member], group: &str) -> Option<BTreeMap<u32, (String, i64)>> {
    let mut out = BTreeMap::new();
    for m in members {
        for (name, token) in m.stream.holding() {
            if out
                .insert(shard_of(&name, group), (m.id.clone(), token))
                .is_some()
            {
                return None;
            }
        }
    }
    Some(out)
}

fn shard_of(name: &str, group: &str) -> u32 {
    name.strip_prefix(group)
        .and_then(|s| s.strip_prefix('#'))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{name} is not a shard of {group}"))
}

async fn db_now(pool: &PgPool) -> DateTime<Utc> {
    sqlx::query_scalar("SELECT clock_timestamp()")
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn metrics(port: u16) -> String {
    scrape_metrics(port).await.unwrap()
}

/// The value of one sample line (`name{labels}`) of a metrics page, 0 when absent.
fn sample(body: &str, series: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

// ---------------------------------------------------------------------------------------------
// 1. Six agents, 64 shards.
// ---------------------------------------------------------------------------------------------

const FLEET_TTL: Duration = Duration::from_secs(4);
const FLEET_HEARTBEAT: Duration = Duration::from_millis(500);
const FLEET_GRACE: Duration = Duration::from_secs(1);
/// Allowance for a loaded 2-core machine on top of TTL + grace + one heartbeat.
const TAKEOVER_SLACK: Duration = Duration::from_millis(1500);
const PAUSE: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_agents_share_64_shards_fenced_and_debounced() {
    let _turn = SERIAL.lock().await;
    const GROUP: &str = "orders-partitions";
    let db = TestDb::new().await.unwrap();
    // A bystander outside the group: creates it (members must find it at start) and answers
    // ListShards whoever is paused or killed.
    let admin = spawn_agent("leasehold-agent", &db.url, "admin", "noop", &[], Vec::new())
        .await
        .unwrap();
    let mut admin_client = connect(&agent_address(&db.pool, "admin", WAIT).await.unwrap())
        .await
        .unwrap();
    create_group(&mut admin_client, GROUP, 64).await;

    let flags = [
        "--shard-groups",
        GROUP,
        "--lease-ttl",
        "4s",
        "--heartbeat",
        "500ms",
        "--grace",
        "1s",
    ];
    let mut members = Vec::new();
    for i in 1..=6 {
        members.push(start_member(&db, &format!("part-{i}"), &flags).await);
    }
    let started = Instant::now();
    let ids: Vec<String> = members.iter().map(|m| m.id.clone()).collect();
    let id_refs: Vec<&str> = ids.iter().map(String::as_str).collect();

    // (b) Converged: every shard held, 10 or 11 each, and the streams say the same.
    wait_until(
        "64 shards balanced over 6 agents, as the streams tell",
        Duration::from_secs(60),
        || {
            let mut c = admin_client.clone();
            let members = &members;
            let id_refs = &id_refs;
            async move {
                let shards = list_shards(&mut c, GROUP).await;
                let streams = streams_holding(&members.iter().collect::<Vec<_>>(), GROUP);
                Ok(balanced(&shards, id_refs) && streams == Some(owner_tokens(&shards)))
            }
        },
    )
    .await
    .unwrap();
    let converged = list_shards(&mut admin_client, GROUP).await;
    let per_agent = counts(&converged);
    eprintln!(
        "converged in {:.1?} after the last start: {per_agent:?}",
        started.elapsed()
    );
    assert_eq!(converged.len(), 64);
    assert!(per_agent.values().all(|n| *n == 10 || *n == 11));

    // (c) Pauses of half the TTL move nothing, three times over.
    let before = owner_tokens(&converged);
    let changes_before: usize = members.iter().map(|m| m.stream.changes().len()).sum();
    let mut last_stop = Instant::now();
    for round in 0..3 {
        let victim = &members[round + 1];
        victim.agent.stop().unwrap();
        last_stop = Instant::now();
        while last_stop.elapsed() < PAUSE {
            let now = owner_tokens(&list_shards(&mut admin_client, GROUP).await);
            assert_eq!(
                now, before,
                "round {round}: a shard moved during a pause of {PAUSE:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // Positive control: the victim really stopped renewing.
        let stale: f64 = sqlx::query_scalar(
            "SELECT extract(epoch FROM clock_timestamp() - max(heartbeat_at))::float8 \
             FROM resource_leases WHERE owner = $1",
        )
        .bind(&victim.id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        assert!(
            stale >= 1.5,
            "round {round}: {} renewed during its pause ({stale:.2} s old)",
            victim.name
        );
        victim.agent.cont().unwrap();
        let resumed = Instant::now();
        while resumed.elapsed() < PAUSE {
            let now = owner_tokens(&list_shards(&mut admin_client, GROUP).await);
            assert_eq!(now, before, "round {round}: a shard moved after a pause");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        eprintln!(
            "pause {round}: {} stopped {PAUSE:?} ({stale:.2} s without renewing), nothing moved",
            victim.name
        );
    }
    // Until the last paused agent's lease would have been taken over, had it been lost.
    let takeover_window = FLEET_TTL + FLEET_GRACE + FLEET_HEARTBEAT * 2;
    while last_stop.elapsed() < takeover_window {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let after = list_shards(&mut admin_client, GROUP).await;
    assert_eq!(
        owner_tokens(&after),
        before,
        "a shard moved after the pauses"
    );
    assert!(
        after.values().all(|(_, _, state)| state == "held"),
        "{after:?}"
    );
    let changes_after: usize = members.iter().map(|m| m.stream.changes().len()).sum();
    assert_eq!(
        changes_after, changes_before,
        "resource_change deltas during the pauses"
    );
    for m in &members {
        m.stream.assert_live(&m.name);
    }

    // (d) kill -9: the victim's shards move to the others within TTL + grace + a heartbeat,
    // never before its lease + grace, and nothing else moves.
    let victim_at = 4;
    let victim_id = members[victim_at].id.clone();
    let victim_shards: BTreeMap<u32, i64> = before
        .iter()
        .filter(|(_, (o, _))| *o == victim_id)
        .map(|(s, (_, t))| (*s, *t))
        .collect();
    let killed_db = db_now(&db.pool).await;
    let killed_ms = now_ms();
    let killed = Instant::now();
    members[victim_at].agent.kill9().unwrap();
    members[victim_at]
        .agent
        .wait_exit(Duration::from_secs(5))
        .await
        .unwrap();
    let survivors: Vec<&str> = id_refs
        .iter()
        .copied()
        .filter(|id| *id != victim_id)
        .collect();
    wait_until(
        "every shard of the killed agent is owned again",
        FLEET_TTL + FLEET_GRACE + FLEET_HEARTBEAT + TAKEOVER_SLACK + Duration::from_secs(10),
        || {
            let mut c = admin_client.clone();
            let victim_shards = &victim_shards;
            let survivors = &survivors;
            async move {
                let now = list_shards(&mut c, GROUP).await;
                Ok(victim_shards.keys().all(|s| {
                    let (o, _, state) = &now[s];
                    state == "held" && survivors.contains(&o.as_str())
                }))
            }
        },
    )
    .await
    .unwrap();
    let seen_after = killed.elapsed();
    let (last_renewal, member_until): (DateTime<Utc>, DateTime<Utc>) = sqlx::query_as(
        "SELECT heartbeat_at, lease_until FROM shard_members WHERE group_name = $1 AND member = $2",
    )
    .bind(GROUP)
    .bind(&victim_id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let taken: Vec<(String, i64, DateTime<Utc>)> = sqlx::query_as(
        "SELECT name, token, acquired_at FROM resource_lease_history \
         WHERE group_name = $1 AND acquired_at > $2 ORDER BY acquired_at",
    )
    .bind(GROUP)
    .bind(killed_db)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        taken.len(),
        victim_shards.len(),
        "after the kill exactly the victim's shards moved: {taken:?}"
    );
    for (name, token, at) in &taken {
        let shard = shard_of(name, GROUP);
        assert!(
            *token > victim_shards[&shard],
            "{name}: token {token} not above the victim's"
        );
        assert!(
            *at > member_until + chrono::TimeDelta::from_std(FLEET_GRACE).unwrap(),
            "{name} taken at {at}, before the victim's lease ({member_until}) + grace"
        );
    }
    let last_take = taken.last().unwrap().2;
    let from_kill = (last_take - killed_db).to_std().unwrap();
    let from_renewal = (last_take - last_renewal).to_std().unwrap();
    let bound = FLEET_TTL + FLEET_GRACE + FLEET_HEARTBEAT;
    eprintln!(
        "takeover of {} shards: {from_kill:.2?} after the kill, {from_renewal:.2?} after the \
         victim's last renewal (bound {bound:?} + {TAKEOVER_SLACK:?} slack); ListShards showed \
         it {seen_after:.2?} after the kill",
        victim_shards.len()
    );
    assert!(
        from_renewal <= bound + TAKEOVER_SLACK,
        "takeover took {from_renewal:?} from the last renewal"
    );
    assert!(from_kill <= bound + TAKEOVER_SLACK);
    let final_shards = list_shards(&mut admin_client, GROUP).await;
    assert!(
        balanced(&final_shards, &survivors),
        "balanced over the 5: {:?}",
        counts(&final_shards)
    );

    // The ledger over the whole test, against the database's history.
    let live: Vec<&Member> = members
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != victim_at)
        .map(|(_, m)| m)
        .collect();
    wait_until("the streams agree with ListShards", WAIT, || {
        let ok = streams_holding(&live, GROUP) == Some(owner_tokens(&final_shards));
        async move { Ok(ok) }
    })
    .await
    .unwrap();
    for m in &live {
        m.stream.assert_live(&m.name);
    }
    let end_ms = now_ms();
    let hist = history(&db.pool, GROUP).await;
    let all: Vec<Change> = members.iter().flat_map(|m| m.stream.changes()).collect();
    let closed_at = BTreeMap::from([(victim_id.clone(), killed_ms)]);
    let book = ledger(&all, &hist, &closed_at, end_ms);
    assert_eq!(book.len(), 64, "every shard has a holding");
    let moves = check_ledger(&book, &hist);
    let moves_after_kill = book
        .values()
        .flat_map(|l| l.windows(2))
        .filter(|w| w[1].from > killed_ms && w[0].agent != w[1].agent)
        .count();
    assert_eq!(moves_after_kill, victim_shards.len());
    let groups = admin_client
        .list_shard_groups(pb::ListShardGroupsRequest {})
        .await
        .unwrap()
        .into_inner();
    let reported = groups.groups.iter().find(|g| g.name == GROUP).unwrap();
    assert_eq!(
        reported.moves_last_hour as usize, moves,
        "ListShardGroups counts the moves"
    );
    let holdings: usize = book.values().map(Vec::len).sum();
    eprintln!(
        "ledger: {holdings} holdings, {moves} moves in all ({moves_after_kill} after the kill), \
         counts after the kill {:?}",
        counts(&final_shards)
    );
    drop(members);
    drop(admin);
    db.drop_db().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// 2. A stale owner is fenced.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_owner_is_fenced_after_takeover() {
    let _turn = SERIAL.lock().await;
    const GROUP: &str = "fence-eight";
    let heartbeat = Duration::from_millis(400); // fleet::fast_args
    let db = TestDb::new().await.unwrap();
    let admin = spawn_agent("leasehold-agent", &db.url, "admin", "noop", &[], Vec::new())
        .await
        .unwrap();
    let mut admin_client = connect(&agent_address(&db.pool, "admin", WAIT).await.unwrap())
        .await
        .unwrap();
    create_group(&mut admin_client, GROUP, 8).await;
    let port = free_port().unwrap();
    let listen = format!("127.0.0.1:{port}");
    let a = start_member(
        &db,
        "stale-a",
        &["--shard-groups", GROUP, "--metrics-listen", &listen],
    )
    .await;
    let b = start_member(&db, "fresh-b", &["--shard-groups", GROUP]).await;
    let ids = [a.id.as_str(), b.id.as_str()];
    wait_until("8 shards split 4/4", WAIT, || {
        let mut c = admin_client.clone();
        async move { Ok(balanced(&list_shards(&mut c, GROUP).await, &ids)) }
    })
    .await
    .unwrap();
    let before = owner_tokens(&list_shards(&mut admin_client, GROUP).await);
    let a_old: BTreeMap<u32, i64> = before
        .iter()
        .filter(|(_, (o, _))| *o == a.id)
        .map(|(s, (_, t))| (*s, *t))
        .collect();
    assert_eq!(a_old.len(), 4);

    // A freezes past TTL + grace + 2 heartbeats; B takes everything.
    a.agent.stop().unwrap();
    let stopped = Instant::now();
    wait_until("B owns all 8 shards", WAIT, || {
        let mut c = admin_client.clone();
        let (a_old, b_id) = (&a_old, &b.id);
        async move {
            let now = list_shards(&mut c, GROUP).await;
            Ok(now.iter().all(|(s, (o, t, state))| {
                o == b_id && state == "held" && a_old.get(s).is_none_or(|old| t > old)
            }))
        }
    })
    .await
    .unwrap();
    let took = stopped.elapsed();
    // The debounce: B took none of them before A's lease + grace (A, frozen, cannot renew
    // its membership, renewed with its shards in one statement, so its times stand).
    let (a_until,): (DateTime<Utc>,) = sqlx::query_as(
        "SELECT lease_until FROM shard_members WHERE group_name = $1 AND member = $2",
    )
    .bind(GROUP)
    .bind(&a.id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let hist = history(&db.pool, GROUP).await;
    for (shard, old) in &a_old {
        let name = format!("{GROUP}#{shard}");
        let (owner, at) = &hist[&(name.clone(), old + 1)];
        assert_eq!(owner, &b.id);
        let earliest = (a_until + chrono::TimeDelta::from_std(GRACE).unwrap()).timestamp_millis();
        assert!(
            *at > earliest,
            "{name} taken at {at}, before A's lease + grace ({earliest})"
        );
    }
    eprintln!("B owned all 8 shards {took:.2?} after A froze");
    let min_pause = TTL + GRACE + heartbeat * 2;
    if took < min_pause {
        tokio::time::sleep(min_pause - took).await;
    }
    let taken = owner_tokens(&list_shards(&mut admin_client, GROUP).await);

    // A stale owner's write is refused in the caller's transaction; B's passes.
    for (shard, old) in &a_old {
        let name = format!("{GROUP}#{shard}");
        let mut tx = db.pool.begin().await.unwrap();
        assert_eq!(
            resource_fence(&mut tx, &name, &a.id, *old).await.unwrap(),
            HolderWrite::Fenced,
            "{name}: A's old token {old}"
        );
        let (owner, new) = &taken[shard];
        assert_eq!(owner, &b.id);
        assert_eq!(
            resource_fence(&mut tx, &name, &b.id, *new).await.unwrap(),
            HolderWrite::Held,
            "{name}: B's token {new}"
        );
        tx.rollback().await.unwrap();
    }

    // A wakes up: it learns it lost each shard, at a time before B took it.
    a.agent.cont().unwrap();
    wait_until("A's stream reports every lost shard", WAIT, || {
        let changes = a.stream.changes();
        let a_old = &a_old;
        async move {
            Ok(a_old.iter().all(|(s, t)| {
                changes
                    .iter()
                    .any(|c| !c.held && c.token == *t && c.name == format!("{GROUP}#{s}"))
            }))
        }
    })
    .await
    .unwrap();
    let a_changes = a.stream.changes();
    let b_changes = b.stream.changes();
    let mut revoked = 0;
    for (shard, old) in &a_old {
        let name = format!("{GROUP}#{shard}");
        let lost = a_changes
            .iter()
            .find(|c| !c.held && c.name == name && c.token == *old)
            .unwrap();
        assert!(
            lost.reason == "revoked" || lost.reason == "unprovable",
            "{lost:?}"
        );
        revoked += usize::from(lost.reason == "revoked");
        let new = taken[shard].1;
        let b_took = b_changes
            .iter()
            .find(|c| c.held && c.name == name && c.token == new)
            .unwrap_or_else(|| panic!("B's stream shows no acquisition of {name} token {new}"));
        assert!(
            lost.at_ms.unwrap() < b_took.at_ms.unwrap(),
            "{name}: A last proved it at {:?}, after B acquired it at {:?}",
            lost.at_ms,
            b_took.at_ms
        );
    }
    // The refused renewal shows in A's metrics and log.
    let body = metrics(port).await;
    let fenced = sample(
        &body,
        "leasehold_fenced_writes_total{op=\"resource_renew\"}",
    );
    let lost_revoked = sample(
        &body,
        "leasehold_leases_lost_total{op=\"resource_revoked\"}",
    );
    let lost_unprovable = sample(
        &body,
        "leasehold_leases_lost_total{op=\"resource_unprovable\"}",
    );
    eprintln!(
        "A after SIGCONT: {revoked} revoked, {} unprovable; metrics: fenced renewals {fenced}, \
         lost {lost_revoked} revoked + {lost_unprovable} unprovable",
        4 - revoked
    );
    assert!(
        revoked > 0,
        "positive control: A's renewal after the pause was refused (fenced)"
    );
    assert_eq!(fenced as usize, revoked, "{body}");
    assert_eq!(lost_revoked as usize, revoked);
    assert_eq!(lost_unprovable as usize, 4 - revoked);
    let log = a.agent.stderr_text().unwrap();
    assert!(
        log.contains("resource write fenced"),
        "A's log shows the refused renewal:\n{}",
        a.agent.log_tail(40)
    );

    // A rejoins: 4/4 again, the ledger clean over the whole test.
    wait_until("8 shards split 4/4 again", WAIT, || {
        let mut c = admin_client.clone();
        async move { Ok(balanced(&list_shards(&mut c, GROUP).await, &ids)) }
    })
    .await
    .unwrap();
    let final_shards = list_shards(&mut admin_client, GROUP).await;
    wait_until("the streams agree with ListShards", WAIT, || {
        let ok = streams_holding(&[&a, &b], GROUP) == Some(owner_tokens(&final_shards));
        async move { Ok(ok) }
    })
    .await
    .unwrap();
    a.stream.assert_live("A");
    b.stream.assert_live("B");
    let hist = history(&db.pool, GROUP).await;
    let all: Vec<Change> = a
        .stream
        .changes()
        .into_iter()
        .chain(b.stream.changes())
        .collect();
    let book = ledger(&all, &hist, &BTreeMap::new(), now_ms());
    let moves = check_ledger(&book, &hist);
    eprintln!("ledger: {moves} moves, final {:?}", counts(&final_shards));
    assert!(moves >= 8, "A's 4 shards went to B and 4 came back");
    drop((a, b, admin));
    db.drop_db().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// 3. Locks through gRPC.
// ---------------------------------------------------------------------------------------------

const OPERATOR: &str = "operator-secret-0123456789abcdef";
const VIEWER: &str = "viewer-secret-fedcba9876543210";

fn acquire(name: &str, holder: &str, ttl_ms: u64, least: u64, most: u64) -> pb::AcquireLockRequest {
    pb::AcquireLockRequest {
        name: name.into(),
        holder: holder.into(),
        ttl_ms,
        lock_at_least_for_ms: least,
        lock_at_most_for_ms: most,
    }
}

/// Tries `request` every 100 ms until it is acquired; returns the winning response and how
/// many tries were refused (each refusal checked to name `holder_before`).
async fn acquire_when_free(
    client: &mut Client,
    request: pb::AcquireLockRequest,
    holder_before: &str,
) -> (pb::AcquireLockResponse, u32) {
    let start = Instant::now();
    let mut refused = 0;
    loop {
        let out = client
            .acquire_lock(request.clone())
            .await
            .unwrap()
            .into_inner();
        if out.acquired {
            return (out, refused);
        }
        assert_eq!(out.lock.as_ref().unwrap().owner, holder_before, "{out:?}");
        refused += 1;
        assert!(start.elapsed() < WAIT, "{} never acquired", request.name);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn lock_rows(pool: &PgPool) -> String {
    sqlx::query_scalar(
        "SELECT coalesce(string_agg(to_jsonb(l)::text, E'\\n' ORDER BY name), '') \
         FROM resource_leases l",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_at_least_and_at_most_through_grpc() {
    let _turn = SERIAL.lock().await;
    let db = TestDb::new().await.unwrap();
    let config = tokens_config(
        "leasehold-locks",
        &[
            ConfigToken::operator("oncall", OPERATOR),
            ConfigToken::viewer("dash", VIEWER),
        ],
    )
    .unwrap();
    let (agent, addr) = start_agent(
        &db,
        "locks",
        "noop",
        &["--config", config.to_str().unwrap()],
        Vec::new(),
    )
    .await
    .unwrap();
    let mut op = connect_with(&addr, Some(OPERATOR), None).await.unwrap();
    let mut viewer = connect_with(&addr, Some(VIEWER), None).await.unwrap();

    // lock_at_least_for: given back at once, held until 3 s after the acquire.
    let first = op
        .acquire_lock(acquire("nightly-report", "job-1", 10_000, 3_000, 0))
        .await
        .unwrap()
        .into_inner();
    assert!(first.acquired, "{first:?}");
    let first = first.lock.unwrap();
    let t = first.token;
    assert_eq!(
        (first.owner.as_str(), first.state.as_str()),
        ("job-1", "held")
    );
    assert_eq!(first.lock_at_least_until_ms, first.acquired_at_ms + 3_000);
    let released = op
        .release_lock(pb::ReleaseLockRequest {
            name: "nightly-report".into(),
            holder: "job-1".into(),
            token: t,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(released.released);
    assert_eq!(released.lock.unwrap().state, "released");
    let (second, refused) = acquire_when_free(
        &mut op,
        acquire("nightly-report", "job-2", 10_000, 0, 0),
        "job-1",
    )
    .await;
    let second = second.lock.unwrap();
    assert!(refused >= 10, "refused only {refused} times within the 3 s");
    assert_eq!(second.token, t + 1);
    assert_eq!(second.owner, "job-2");
    assert!(
        second.acquired_at_ms >= first.lock_at_least_until_ms,
        "acquired at {} before the at-least bound {}",
        second.acquired_at_ms,
        first.lock_at_least_until_ms
    );
    let late = second.acquired_at_ms - first.acquired_at_ms;
    assert!(late < 5_000, "acquired {late} ms after the first acquire");
    eprintln!("nightly-report: job-2 refused {refused}×, acquired {late} ms after job-1's acquire");

    // lock_at_most_for: a holder that never renews loses it after 2 s.
    let crashed = op
        .acquire_lock(acquire("sync", "job-3", 60_000, 0, 2_000))
        .await
        .unwrap()
        .into_inner();
    assert!(crashed.acquired);
    let crashed = crashed.lock.unwrap();
    assert_eq!(
        crashed.lock_at_most_until_ms,
        crashed.acquired_at_ms + 2_000
    );
    assert_eq!(
        crashed.lease_until_ms, crashed.lock_at_most_until_ms,
        "capped by at-most"
    );
    let (next, refused) =
        acquire_when_free(&mut op, acquire("sync", "job-4", 60_000, 0, 0), "job-3").await;
    let next = next.lock.unwrap();
    assert!(refused >= 5, "refused only {refused} times within the 2 s");
    assert!(next.token > crashed.token);
    assert!(next.acquired_at_ms >= crashed.lock_at_most_until_ms);
    let late = next.acquired_at_ms - crashed.acquired_at_ms;
    assert!(late < 4_000, "acquired {late} ms after job-3's acquire");
    eprintln!("sync: job-4 refused {refused}×, acquired {late} ms after job-3's acquire");
    let stale = op
        .renew_lock(pb::RenewLockRequest {
            name: "sync".into(),
            holder: "job-3".into(),
            token: crashed.token,
            ttl_ms: 60_000,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!stale.renewed, "{stale:?}");
    assert_eq!(stale.lock.unwrap().owner, "job-4");

    // A forced release frees a held lock; the old holder's renew is refused.
    let held = op
        .acquire_lock(acquire("forced", "job-5", 30_000, 0, 0))
        .await
        .unwrap()
        .into_inner();
    assert!(held.acquired);
    let f = held.lock.unwrap().token;
    let forced = op
        .release_lock(pb::ReleaseLockRequest {
            name: "forced".into(),
            holder: String::new(),
            token: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(forced.released, "{forced:?}");
    assert_eq!(forced.lock.unwrap().state, "free");
    let renew = op
        .renew_lock(pb::RenewLockRequest {
            name: "forced".into(),
            holder: "job-5".into(),
            token: f,
            ttl_ms: 30_000,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!renew.renewed, "{renew:?}");
    let again = op
        .acquire_lock(acquire("forced", "job-6", 30_000, 0, 0))
        .await
        .unwrap()
        .into_inner();
    assert!(again.acquired);
    assert_eq!(again.lock.unwrap().token, f + 1);

    // Bad input: INVALID_ARGUMENT, nothing changes.
    let rows = lock_rows(&db.pool).await;
    let bad = [
        ("a bad name", acquire("Bad Name", "job-x", 10_000, 0, 0)),
        ("a shard's name", acquire("orders#1", "job-x", 10_000, 0, 0)),
        ("ttl 0.5 s", acquire("fresh", "job-x", 500, 0, 0)),
        (
            "at least > at most",
            acquire("fresh", "job-x", 10_000, 5_000, 2_000),
        ),
        ("an empty holder", acquire("fresh", "", 10_000, 0, 0)),
    ];
    for (what, request) in bad {
        let status = op.acquire_lock(request).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{what}: {status:?}");
    }
    let status = op
        .renew_lock(pb::RenewLockRequest {
            name: "sync".into(),
            holder: "job-4".into(),
            token: next.token,
            ttl_ms: 500,
        })
        .await
        .unwrap_err();
    assert_eq!(
        status.code(),
        Code::InvalidArgument,
        "renew, ttl 0.5 s: {status:?}"
    );
    let status = op
        .release_lock(pb::ReleaseLockRequest {
            name: "Bad Name".into(),
            holder: String::new(),
            token: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(
        status.code(),
        Code::InvalidArgument,
        "release, bad name: {status:?}"
    );
    assert_eq!(lock_rows(&db.pool).await, rows, "bad input changed nothing");

    // A viewer may list, not act.
    let listed = viewer
        .list_locks(pb::ListLocksRequest {})
        .await
        .unwrap()
        .into_inner();
    let names: Vec<&str> = listed.locks.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["forced", "nightly-report", "sync"]);
    let status = viewer
        .acquire_lock(acquire("fresh", "job-v", 10_000, 0, 0))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    let status = viewer
        .release_lock(pb::ReleaseLockRequest {
            name: "sync".into(),
            holder: String::new(),
            token: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert_eq!(lock_rows(&db.pool).await, rows, "a viewer changed nothing");
    let denied: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_log WHERE role = 'viewer' AND result = 'denied' \
         AND action IN ('lock_acquire', 'lock_release')",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(denied, 2, "each refused viewer call is audited");
    drop(agent);
    if let Some(dir) = config.parent() {
        let _ = std::fs::remove_dir_all(dir);
    }
    db.drop_db().await.unwrap();
}
