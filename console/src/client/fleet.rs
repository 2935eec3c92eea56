//! The console's live connections: one Watch stream per agent, found through the registry, and
//! the requests the app sends, each answered as an [`Event`].
//!
//! ```text
//!  seed agent ──ListAgents + GetOverview + ListSuspectLeases every 2 s──▶ Event::Agents /
//!              Event::Overview / Event::Suspects
//!  (the app polls what only one view shows — dead letters, schedules, locks, shards — as
//!   requests)
//!      │                                   new agent in the registry ─▶ spawn its watcher
//!      ▼
//!  watcher(addr): connect ─▶ Watch ─▶ Event::Watch … ─▶ stream ends ─▶ Event::Conn(Lost)
//!                    ▲                                                   │ capped backoff
//!                    └───────────────────────────────────────────────────┘
//!  requests ─▶ one task each ─▶ the seed agent (drain / local limit: that agent) ─▶ Event::Reply
//! ```
//!
//! Invariants: events go through one bounded channel, so a console that cannot draw fast
//! enough slows its streams down instead of growing; the agent then drops the slow watcher and
//! the reconnect's snapshot rebuilds the view (nothing is silently wrong). A watcher retries
//! forever with a backoff capped at [`MAX_BACKOFF`] until its agent leaves the registry.
//!
//! When things fail: the registry is asked of the seed first, then of any other agent that
//! answered, so the console keeps discovering while its seed is down. Every failure becomes an
//! event with the error in words.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBuilder};
use futures_util::StreamExt;
use leasehold_proto::v1 as pb;
use leasehold_shared::domain::AgentState;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{Agent, AgentAddr, Settings, Transport, token_plaintext_refusal};
use crate::error::Error;
use crate::event::{ConnEvent, Event, LimitScope, Reply, Request, RequestKind, TaskFilter};

/// How often the registry and the overview are read.
pub const POLL_EVERY: Duration = Duration::from_secs(2);
/// How often the queue history is read (it changes once a minute): at start, then this often.
pub const HISTORY_EVERY: Duration = Duration::from_secs(30);
/// The type whose history the poll loop reads (empty: every type summed), as the app last
/// asked ([`RequestKind::HistoryFor`]).
type HistoryFor = Arc<Mutex<String>>;
/// First reconnect delay; doubled per failure up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// Longest reconnect delay.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// A stream that lived this long resets the backoff.
const HEALTHY_STREAM: Duration = Duration::from_secs(10);
/// Reconnect delays: [`FIRST_BACKOFF`] doubling to [`MAX_BACKOFF`], for as long as it takes.
const RECONNECT_BACKOFF: ExponentialBuilder = ExponentialBuilder::new()
    .with_min_delay(FIRST_BACKOFF)
    .with_max_delay(MAX_BACKOFF)
    .without_max_times();

/// The running network side.
pub struct Fleet {
    tasks: Vec<JoinHandle<()>>,
    watchers: Arc<Mutex<HashMap<String, Watcher>>>,
}

struct Watcher {
    task: JoinHandle<()>,
    /// The agent id its stream reported.
    agent_id: Arc<Mutex<String>>,
    /// Its stream is open now.
    live: Arc<std::sync::atomic::AtomicBool>,
}

type Watchers = Arc<Mutex<HashMap<String, Watcher>>>;

/// Addresses to ask, best first: the seed if its stream is live, then the other live agents,
/// then the seed anyway (it may be back).
fn candidates(watchers: &Watchers, seed: &str) -> Vec<String> {
    let Ok(map) = watchers.lock() else {
        return vec![seed.to_string()];
    };
    let is_live = |addr: &str| {
        map.get(addr)
            .is_some_and(|w| w.live.load(std::sync::atomic::Ordering::Relaxed))
    };
    let mut out = Vec::new();
    if is_live(seed) {
        out.push(seed.to_string());
    }
    let mut others: Vec<&String> = map.keys().filter(|a| *a != seed && is_live(a)).collect();
    others.sort();
    out.extend(others.into_iter().cloned());
    if !out.iter().any(|a| a == seed) {
        out.push(seed.to_string());
    }
    out
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        if let Ok(watchers) = self.watchers.lock() {
            for w in watchers.values() {
                w.task.abort();
            }
        }
    }
}

/// Starts following the agent of `settings` and every agent its registry lists. Events go to
/// `events`; requests are read from `requests`.
pub fn start(
    settings: Settings,
    events: mpsc::Sender<Event>,
    requests: mpsc::UnboundedReceiver<Request>,
) -> Fleet {
    // The terminal is the console's: nothing may be printed on stderr.
    let settings = Settings {
        verbose: false,
        ..settings
    };
    let watchers: Arc<Mutex<HashMap<String, Watcher>>> = Arc::default();
    let seed_addr = settings.addr.given.clone();
    spawn_watcher(&watchers, &settings, seed_addr.clone(), &events);
    let refresh = Arc::new(tokio::sync::Notify::new());
    let history_for = HistoryFor::default();
    let poll = tokio::spawn(poll_loop(
        settings.clone(),
        Arc::clone(&watchers),
        events.clone(),
        Arc::clone(&refresh),
        Arc::clone(&history_for),
    ));
    let serve = tokio::spawn(request_loop(
        settings,
        requests,
        events,
        refresh,
        Arc::clone(&watchers),
        history_for,
    ));
    Fleet {
        tasks: vec![poll, serve],
        watchers,
    }
}

fn spawn_watcher(
    watchers: &Arc<Mutex<HashMap<String, Watcher>>>,
    settings: &Settings,
    addr: String,
    events: &mpsc::Sender<Event>,
) {
    let Ok(mut map) = watchers.lock() else { return };
    if map.contains_key(&addr) {
        return;
    }
    let agent_id = Arc::new(Mutex::new(String::new()));
    let live = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let task = tokio::spawn(watch_loop(
        settings_for(settings, &addr),
        addr.clone(),
        Arc::clone(&agent_id),
        Arc::clone(&live),
        events.clone(),
    ));
    map.insert(
        addr,
        Watcher {
            task,
            agent_id,
            live,
        },
    );
}

/// The seed's settings (TLS, token, timeouts) aimed at another address: a loopback one prefers
/// its agent's Unix socket (unless `--no-socket`). An address the token would reach in
/// plaintext off this host is refused (unless `--insecure`): the error says why, and the
/// console shows it as that agent's lost connection.
pub(crate) fn settings_for(seed: &Settings, addr: &str) -> Result<Settings, Error> {
    if addr == seed.addr.given {
        return Ok(seed.clone());
    }
    let mut parsed = AgentAddr::parse(addr)?;
    parsed.scheme_tls = seed.addr.scheme_tls;
    let transport = Transport::default_for(&parsed, seed.tls.is_some(), seed.no_socket);
    let settings = Settings {
        addr: parsed,
        transport,
        ..seed.clone()
    };
    if let Some(why) = token_plaintext_refusal(&settings) {
        return Err(Error::usage(format!("not connecting: {why}")));
    }
    Ok(settings)
}

async fn watch_loop(
    settings: Result<Settings, Error>,
    addr: String,
    agent_id: Arc<Mutex<String>>,
    live: Arc<std::sync::atomic::AtomicBool>,
    events: mpsc::Sender<Event>,
) {
    let settings = match settings {
        Ok(s) => s,
        Err(e) => {
            let _ = events
                .send(Event::Conn {
                    addr,
                    conn: ConnEvent::Lost {
                        reason: e.to_string(),
                        retry_in_ms: 0,
                    },
                })
                .await;
            return;
        }
    };
    let mut delays = RECONNECT_BACKOFF.build();
    loop {
        let conn = |conn| Event::Conn {
            addr: addr.clone(),
            conn,
        };
        if events.send(conn(ConnEvent::Connecting)).await.is_err() {
            return;
        }
        let opened = Instant::now();
        let followed = follow(&settings, &addr, &agent_id, &live, &events).await;
        live.store(false, std::sync::atomic::Ordering::Relaxed);
        let reason = match followed {
            Ok(None) => return, // the console went away
            Ok(Some(reason)) | Err(reason) => reason,
        };
        if opened.elapsed() > HEALTHY_STREAM {
            delays = RECONNECT_BACKOFF.build();
        }
        let backoff = delays.next().unwrap_or(MAX_BACKOFF);
        let retry_in_ms = u64::try_from(backoff.as_millis()).unwrap_or(u64::MAX);
        tracing::info!(agent = %addr, %reason, retry_in_ms, "watch stream lost");
        if events
            .send(conn(ConnEvent::Lost {
                reason,
                retry_in_ms,
            }))
            .await
            .is_err()
        {
            return;
        }
        tokio::time::sleep(backoff).await;
    }
}

/// Follows one stream until it ends: `Ok(Some(why))` when it ended, `Ok(None)` when the
/// console went away, `Err(why)` when it could not open.
async fn follow(
    settings: &Settings,
    addr: &str,
    agent_id: &Mutex<String>,
    live: &std::sync::atomic::AtomicBool,
    events: &mpsc::Sender<Event>,
) -> Result<Option<String>, String> {
    let agent = Agent::connect(settings).await.map_err(|e| e.to_string())?;
    let mut stream = agent.watch().await.map_err(|e| e.to_string())?;
    live.store(true, std::sync::atomic::Ordering::Relaxed);
    tracing::info!(agent = %addr, route = %agent.route(), "watch stream open");
    let route = Event::Conn {
        addr: addr.to_string(),
        conn: ConnEvent::Route(agent.route().to_string()),
    };
    if events.send(route).await.is_err() {
        return Ok(None);
    }
    if events
        .send(Event::Conn {
            addr: addr.to_string(),
            conn: ConnEvent::Live,
        })
        .await
        .is_err()
    {
        return Ok(None);
    }
    loop {
        match stream.message().await {
            Ok(Some(update)) => {
                if !update.agent_id.is_empty()
                    && let Ok(mut id) = agent_id.lock()
                    && *id != update.agent_id
                {
                    id.clone_from(&update.agent_id);
                }
                let closing = update.closing;
                let event = Event::Watch {
                    addr: addr.to_string(),
                    update,
                };
                if events.send(event).await.is_err() {
                    return Ok(None);
                }
                if closing {
                    return Ok(Some("the agent is shutting down".into()));
                }
            }
            Ok(None) => return Ok(Some("the agent ended the stream".into())),
            Err(status) => {
                return Ok(Some(agent.status_error("watch".into(), status).to_string()));
            }
        }
    }
}

/// How long discovery waits for the seed's stream to say which agent it is, so the seed is not
/// followed twice under two spellings of its address.
const SEED_ID_WAIT: Duration = Duration::from_secs(3);

async fn poll_loop(
    settings: Settings,
    watchers: Arc<Mutex<HashMap<String, Watcher>>>,
    events: mpsc::Sender<Event>,
    refresh: Arc<tokio::sync::Notify>,
    history_for: HistoryFor,
) {
    let mut clients: HashMap<String, Agent> = HashMap::new();
    let mut tick = tokio::time::interval(POLL_EVERY);
    let mut history_of: Option<String> = None;
    let started = Instant::now();
    let mut history_at: Option<Instant> = None;
    loop {
        // Every POLL_EVERY, and at once after an action (its effect shows without waiting).
        tokio::select! {
            _ = tick.tick() => {}
            () = refresh.notified() => {}
        }
        // The seed first, then any agent that answered before.
        // The seed if it is up, else any agent whose stream is live: the console keeps its
        // registry and overview while its seed is down.
        let order = candidates(&watchers, &settings.addr.given);
        let mut answered = None;
        for addr in order {
            let agent = match clients.get(&addr) {
                Some(a) => a.clone(),
                None => match settings_for(&settings, &addr) {
                    Ok(s) => match Agent::connect(&s).await {
                        Ok(a) => {
                            clients.insert(addr.clone(), a.clone());
                            a
                        }
                        Err(e) => {
                            tracing::debug!(agent = %addr, error = %e, "registry read: no connection");
                            continue;
                        }
                    },
                    Err(_) => continue,
                },
            };
            match agent.list_agents().await {
                Ok(list) => {
                    answered = Some((agent, list));
                    break;
                }
                Err(e) => tracing::debug!(agent = %addr, error = %e, "registry read failed"),
            }
        }
        let Some((agent, list)) = answered else {
            continue;
        };
        let seed_known = watchers.lock().is_ok_and(|map| {
            map.get(&settings.addr.given)
                .is_some_and(|w| w.agent_id.lock().is_ok_and(|id| !id.is_empty()))
        });
        if seed_known || started.elapsed() > SEED_ID_WAIT {
            discover(&settings, &watchers, &list, &events, &mut clients);
        }
        if events.send(Event::Agents(list)).await.is_err() {
            return;
        }
        match agent.get_overview().await {
            Ok(overview) => {
                if events.send(Event::Overview(overview)).await.is_err() {
                    return;
                }
            }
            Err(e) => tracing::debug!(error = %e, "overview read failed"),
        }
        // The history is in the shared database: one agent (this one) answers for all.
        let wanted = history_for.lock().map(|w| w.clone()).unwrap_or_default();
        if history_of.as_ref() != Some(&wanted)
            || history_at.is_none_or(|at| at.elapsed() >= HISTORY_EVERY)
        {
            match agent.get_history(wanted.clone()).await {
                Ok(history) => {
                    history_at = Some(Instant::now());
                    history_of = Some(wanted);
                    if events.send(Event::History(history)).await.is_err() {
                        return;
                    }
                }
                Err(e) => tracing::debug!(error = %e, "history read failed"),
            }
        }
        // Overdue renewals from the database: an agent whose own stream went silent (frozen,
        // partitioned) shows no failure of its own, so the database has to say it.
        match agent.list_suspect_leases(0).await {
            Ok(suspects) => {
                if events.send(Event::Suspects(suspects)).await.is_err() {
                    return;
                }
            }
            Err(e) => tracing::debug!(error = %e, "suspect lease read failed"),
        }
    }
}

/// Starts a watcher for each registry agent not followed yet; stops following agents the
/// registry reports stopped whose streams are not live.
fn discover(
    settings: &Settings,
    watchers: &Arc<Mutex<HashMap<String, Watcher>>>,
    list: &pb::ListAgentsResponse,
    events: &mpsc::Sender<Event>,
    clients: &mut HashMap<String, Agent>,
) {
    let followed_ids: Vec<String> = match watchers.lock() {
        Ok(map) => map
            .values()
            .filter_map(|w| w.agent_id.lock().ok().map(|id| id.clone()))
            .filter(|id| !id.is_empty())
            .collect(),
        Err(_) => return,
    };
    for agent in &list.agents {
        if agent.grpc_address.is_empty() {
            continue;
        }
        if agent.read_state().is(AgentState::Stopped) {
            if agent.grpc_address != settings.addr.given
                && let Ok(mut map) = watchers.lock()
                && let Some(w) = map.remove(&agent.grpc_address)
            {
                w.task.abort();
                clients.remove(&agent.grpc_address);
                let _ = events.try_send(Event::Conn {
                    addr: agent.grpc_address.clone(),
                    conn: ConnEvent::Gone,
                });
            }
            continue;
        }
        if followed_ids.contains(&agent.id) {
            continue;
        }
        spawn_watcher(watchers, settings, agent.grpc_address.clone(), events);
    }
}

async fn request_loop(
    settings: Settings,
    mut requests: mpsc::UnboundedReceiver<Request>,
    events: mpsc::Sender<Event>,
    refresh: Arc<tokio::sync::Notify>,
    watchers: Watchers,
    history_for: HistoryFor,
) {
    let mut clients: HashMap<String, Agent> = HashMap::new();
    while let Some(request) = requests.recv().await {
        if request.kind == RequestKind::Poll {
            refresh.notify_one();
            continue;
        }
        if let RequestKind::HistoryFor { task_type } = &request.kind {
            if let Ok(mut wanted) = history_for.lock() {
                wanted.clone_from(task_type);
            }
            refresh.notify_one();
            continue;
        }
        let target = match &request.kind {
            RequestKind::Drain { addr }
            | RequestKind::SetConcurrency {
                scope: LimitScope::Agent { addr, .. },
                ..
            } => Some(addr.clone()),
            _ => None,
        };
        let agent = match target {
            Some(addr) => match settings_for(&settings, &addr) {
                Ok(s) => Agent::connect(&s).await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            },
            // Any agent answers for the cluster: the seed if its stream is live, else another.
            None => {
                let mut picked = Err("no agent is reachable".to_string());
                for addr in candidates(&watchers, &settings.addr.given) {
                    if let Some(a) = clients.get(&addr) {
                        picked = Ok(a.clone());
                        break;
                    }
                    match settings_for(&settings, &addr) {
                        Ok(s) => match Agent::connect(&s).await {
                            Ok(a) => {
                                clients.insert(addr, a.clone());
                                picked = Ok(a);
                                break;
                            }
                            Err(e) => picked = Err(e.to_string()),
                        },
                        Err(e) => picked = Err(e.to_string()),
                    }
                }
                picked
            }
        };
        let events = events.clone();
        let refresh = Arc::clone(&refresh);
        let seed = settings.clone();
        tokio::spawn(async move {
            let changes = !matches!(
                request.kind,
                RequestKind::DeadPage { .. }
                    | RequestKind::TasksPage { .. }
                    | RequestKind::TaskCounts { .. }
                    | RequestKind::Schedules
                    | RequestKind::Locks
                    | RequestKind::ShardGroups
                    | RequestKind::Shards { .. }
                    | RequestKind::Task { .. }
                    | RequestKind::RequeueDead { dry_run: true, .. }
            );
            let reply = match agent {
                Ok(agent) => serve(&seed, &agent, request.kind).await,
                Err(e) => Err(e),
            };
            if changes {
                refresh.notify_one();
            }
            let _ = events
                .send(Event::Reply {
                    id: request.id,
                    reply,
                })
                .await;
        });
    }
}

fn dead_request(filter: &TaskFilter) -> (String, String) {
    (
        filter.task_type.clone().unwrap_or_default(),
        filter.error_code.clone().unwrap_or_default(),
    )
}

fn limit_word(limit: Option<u32>) -> String {
    limit.map_or_else(|| "unlimited".to_string(), |n| n.to_string())
}

/// Runs one request; the reply, or the error in words.
async fn serve(settings: &Settings, agent: &Agent, kind: RequestKind) -> Result<Reply, String> {
    let text = |e: Error| e.to_string();
    match kind {
        RequestKind::DeadPage {
            filter,
            before_id,
            limit,
        } => {
            let page = agent
                .list_tasks(pb::ListTasksRequest {
                    statuses: vec![pb::TaskStatus::Dead as i32],
                    task_type: filter.task_type.unwrap_or_default(),
                    text: filter.text.unwrap_or_default(),
                    before_id,
                    limit,
                    error_code: filter.error_code.unwrap_or_default(),
                    since_ms: 0,
                    due: None,
                })
                .await
                .map_err(text)?;
            Ok(Reply::Page(page))
        }
        RequestKind::TasksPage {
            statuses,
            due,
            filter,
            before_id,
            limit,
        } => {
            let page = agent
                .list_tasks(pb::ListTasksRequest {
                    statuses,
                    task_type: filter.task_type.unwrap_or_default(),
                    text: filter.text.unwrap_or_default(),
                    before_id,
                    limit,
                    error_code: filter.error_code.unwrap_or_default(),
                    since_ms: 0,
                    due,
                })
                .await
                .map_err(text)?;
            Ok(Reply::Page(page))
        }
        RequestKind::TaskCounts { filter } => {
            let counts = agent
                .count_tasks(pb::CountTasksRequest {
                    task_type: filter.task_type.unwrap_or_default(),
                    text: filter.text.unwrap_or_default(),
                    error_code: filter.error_code.unwrap_or_default(),
                })
                .await
                .map_err(text)?;
            Ok(Reply::Counts(counts))
        }
        RequestKind::RunNow { ids } => Ok(each_task("run now", &ids, |id| async move {
            let r = agent.run_now(id).await?;
            Ok(if r.moved { "due now" } else { "already due" })
        })
        .await),
        RequestKind::Delete { ids } => Ok(each_task("delete", &ids, |id| async move {
            agent.delete_task(id).await.map(|_| "deleted")
        })
        .await),
        RequestKind::Schedules => Ok(Reply::Schedules(
            agent.list_schedules().await.map_err(text)?,
        )),
        RequestKind::Locks => Ok(Reply::Locks(agent.list_locks().await.map_err(text)?)),
        RequestKind::ShardGroups => Ok(Reply::ShardGroups(
            agent.list_shard_groups().await.map_err(text)?,
        )),
        RequestKind::Shards { group } => {
            Ok(Reply::Shards(agent.list_shards(group).await.map_err(text)?))
        }
        RequestKind::ReleaseLock { name, owner, token } => {
            let r = agent.force_release_lock(name.clone()).await.map_err(text)?;
            release_summary(&name, &owner, token, &r)
        }
        RequestKind::SetScheduleEnabled { name, enabled } => {
            let r = agent
                .set_schedule_enabled(name.clone(), enabled)
                .await
                .map_err(text)?;
            let verb = if enabled { "enabled" } else { "disabled" };
            let summary = if r.changed {
                format!("{verb} schedule {name}")
            } else {
                format!("schedule {name} was already {verb}")
            };
            Ok(Reply::Action { summary, failed: 0 })
        }
        RequestKind::TriggerSchedule { name } => {
            let r = agent.trigger_schedule(name.clone()).await.map_err(text)?;
            let summary = match r.task {
                Some(t) => format!("triggered schedule {name}: task {}", t.id),
                None => format!("triggered schedule {name}"),
            };
            Ok(Reply::Action { summary, failed: 0 })
        }
        RequestKind::Poll | RequestKind::HistoryFor { .. } => {
            Err("a poll is not a call (the request loop serves it)".into())
        }
        RequestKind::Task { id } => Ok(Reply::Task(Box::new(
            agent.get_task(id).await.map_err(text)?,
        ))),
        RequestKind::Cancel { ids } => {
            // Each to its holder, several at once (`holders`).
            let holders = super::holders::Holders::discover(settings, agent.clone()).await;
            let requests = ids.iter().map(|id| pb::CancelRequest {
                id: *id,
                wait: false,
                wait_ms: 0,
            });
            let answers: Vec<_> = super::holders::cancel_many(&holders, requests.collect())
                .collect()
                .await;
            let mut outcomes: Vec<(String, usize)> = Vec::new();
            let mut failed = Vec::new();
            for (id, r) in answers {
                match r {
                    Ok(r) => tally(&mut outcomes, r.read_outcome().word().into_owned()),
                    Err(e) => failed.push((id, e.to_string())),
                }
            }
            Ok(summarise("cancel", ids.len(), &outcomes, &failed))
        }
        RequestKind::Requeue { ids } => Ok(each_task("requeue", &ids, |id| async move {
            agent.requeue(id).await.map(|_| "requeued")
        })
        .await),
        RequestKind::RequeueDead { filter, dry_run } => {
            let (task_type, error_code) = dead_request(&filter);
            let all = task_type.is_empty() && error_code.is_empty();
            let r = agent
                .requeue_dead(pb::RequeueDeadRequest {
                    task_type,
                    error_code,
                    since_ms: 0,
                    until_ms: 0,
                    dry_run,
                    all,
                    ..Default::default()
                })
                .await
                .map_err(text)?;
            if dry_run {
                Ok(Reply::Count(r.count))
            } else {
                Ok(Reply::Action {
                    summary: format!("requeued {} dead letters", r.count),
                    failed: 0,
                })
            }
        }
        RequestKind::SetConcurrency { scope, limit } => {
            let (wire_scope, what) = match &scope {
                LimitScope::Global => (
                    pb::set_concurrency_request::Scope::Global(true),
                    "global".to_string(),
                ),
                LimitScope::Type(t) => (
                    pb::set_concurrency_request::Scope::TaskType(t.clone()),
                    format!("type {t}"),
                ),
                LimitScope::Agent { agent_id, .. } => (
                    pb::set_concurrency_request::Scope::AgentLocal(true),
                    format!("agent {agent_id}"),
                ),
            };
            let r = agent
                .set_concurrency(pb::SetConcurrencyRequest {
                    scope: Some(wire_scope),
                    limit: limit.unwrap_or(0),
                    unlimited: limit.is_none(),
                    per_key: false,
                })
                .await
                .map_err(text)?;
            Ok(Reply::Action {
                summary: format!(
                    "{what} limit {} → {}",
                    limit_word(r.previous),
                    limit_word(r.limit)
                ),
                failed: 0,
            })
        }
        RequestKind::Pause { task_type, pause } => {
            let changed = if pause {
                agent
                    .pause_type(task_type.clone())
                    .await
                    .map_err(text)?
                    .changed
            } else {
                agent
                    .resume_type(task_type.clone())
                    .await
                    .map_err(text)?
                    .changed
            };
            let verb = if pause { "paused" } else { "resumed" };
            let summary = if changed {
                format!("{verb} type {task_type}")
            } else {
                format!("type {task_type} was already {verb}")
            };
            Ok(Reply::Action { summary, failed: 0 })
        }
        RequestKind::Drain { .. } => {
            let r = agent.drain().await.map_err(text)?;
            Ok(Reply::Action {
                summary: format!(
                    "draining {}: {} leases to finish or release",
                    agent.addr(),
                    r.held
                ),
                failed: 0,
            })
        }
    }
}

/// What a forced release did, in words: the holding it freed (named only when its token is the
/// one the operator confirmed), that nothing was held, or that there is no such lock.
pub fn release_summary(
    name: &str,
    owner: &str,
    token: i64,
    r: &pb::ReleaseLockResponse,
) -> Result<Reply, String> {
    let summary = match (&r.lock, r.released) {
        (None, false) => return Err(format!("release lock {name}: no lock {name} (not found)")),
        (lock, true) => {
            let freed = lock.as_ref().map_or(token, |l| l.token);
            if freed == token && !owner.is_empty() {
                format!("released lock {name} (held by {owner}, token {token})")
            } else {
                format!("released lock {name} (token {freed})")
            }
        }
        (Some(_), false) => format!("lock {name} was not held (nothing changed)"),
    };
    Ok(Reply::Action { summary, failed: 0 })
}

fn tally(outcomes: &mut Vec<(String, usize)>, outcome: String) {
    match outcomes.iter_mut().find(|(o, _)| *o == outcome) {
        Some((_, n)) => *n += 1,
        None => outcomes.push((outcome, 1)),
    }
}

/// Runs `call` on each task in turn (a failure does not stop the others) and sums up what
/// each did, in the words `call` answers.
async fn each_task<F, Fut>(verb: &str, ids: &[i64], call: F) -> Reply
where
    F: Fn(i64) -> Fut,
    Fut: std::future::Future<Output = Result<&'static str, Error>>,
{
    let mut outcomes: Vec<(String, usize)> = Vec::new();
    let mut failed = Vec::new();
    for id in ids {
        match call(*id).await {
            Ok(outcome) => tally(&mut outcomes, outcome.into()),
            Err(e) => failed.push((*id, e.to_string())),
        }
    }
    summarise(verb, ids.len(), &outcomes, &failed)
}

fn summarise(
    verb: &str,
    total: usize,
    outcomes: &[(String, usize)],
    failed: &[(i64, String)],
) -> Reply {
    let mut parts: Vec<String> = outcomes
        .iter()
        .map(|(o, n)| format!("{n} {}", o.replace('_', " ")))
        .collect();
    if let Some((id, error)) = failed.first() {
        parts.push(format!("{} failed (task {id}: {error})", failed.len()));
    }
    Reply::Action {
        summary: format!("{verb} {total}: {}", parts.join(", ")),
        failed: failed.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn seed(args: &[&str]) -> Settings {
        let args = std::iter::once("leasehold")
            .chain(args.iter().copied())
            .chain(["drain"]);
        match crate::cli::Cli::try_parse_from(args) {
            Ok(cli) => match super::super::settings(&cli.global) {
                Ok(s) => s,
                Err(e) => panic!("{e}"),
            },
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn reconnects_wait_longer_each_time_up_to_the_cap_and_never_give_up() {
        let delays: Vec<u128> = RECONNECT_BACKOFF
            .build()
            .take(8)
            .map(|d| d.as_millis())
            .collect();
        assert_eq!(delays, [250, 500, 1000, 2000, 4000, 5000, 5000, 5000]);
        assert_eq!(RECONNECT_BACKOFF.build().nth(1000), Some(MAX_BACKOFF));
    }

    #[test]
    fn registry_addresses_prefer_sockets_and_never_get_a_plaintext_token_off_the_host() {
        let with_token = seed(&["--token", "s3cret"]);
        let local = settings_for(&with_token, "127.0.0.1:7071").map(|s| s.transport);
        assert_eq!(local.ok(), Some(Transport::Auto));
        let remote = settings_for(&with_token, "10.1.2.3:7070").map(|s| s.transport);
        let why = match remote {
            Err(e) => e.to_string(),
            Ok(t) => panic!("a token would go in plaintext to 10.1.2.3 ({t:?})"),
        };
        assert!(
            why.contains("plaintext") && !why.contains("s3cret"),
            "{why}"
        );
        // --insecure, or no token: followed, over TCP.
        let insecure = seed(&["--token", "s3cret", "--insecure"]);
        let remote = settings_for(&insecure, "10.1.2.3:7070").map(|s| s.transport);
        assert_eq!(remote.ok(), Some(Transport::Tcp));
        let remote = settings_for(&seed(&[]), "10.1.2.3:7070").map(|s| s.transport);
        assert_eq!(remote.ok(), Some(Transport::Tcp));
        // --no-socket holds for registry agents too; --socket names the seed's socket only.
        let tcp = settings_for(&seed(&["--no-socket"]), "127.0.0.1:7071").map(|s| s.transport);
        assert_eq!(tcp.ok(), Some(Transport::Tcp));
        let explicit = seed(&["--socket", "/x.sock"]);
        let other = settings_for(&explicit, "127.0.0.1:7071").map(|s| s.transport);
        assert_eq!(other.ok(), Some(Transport::Auto));
    }

    #[test]
    fn the_route_is_kept_with_the_connection() {
        let mut conn = crate::state::fleet::Conn::new("127.0.0.1:7070".into());
        let route = super::super::Route::Socket("/run/leasehold/agent-7070.sock".into());
        assert!(
            conn.set_link(ConnEvent::Route(route.to_string()), 0)
                .is_empty()
        );
        assert_eq!(conn.link, crate::state::Link::Connecting);
        let _ = conn.set_link(ConnEvent::Live, 1);
        assert_eq!(
            conn.route.as_deref(),
            Some("unix:/run/leasehold/agent-7070.sock")
        );
        assert!(conn.link.is_live());
        let _ = conn.set_link(ConnEvent::Route(super::super::Route::Tcp.to_string()), 2);
        assert_eq!(conn.route.as_deref(), Some("tcp"));
    }

    fn reply(released: bool, token: Option<i64>) -> pb::ReleaseLockResponse {
        pb::ReleaseLockResponse {
            released,
            lock: token.map(|token| pb::ResourceLease {
                name: "deploy/prod".into(),
                token,
                lease_state: pb::LeaseState::Free as i32,
                ..Default::default()
            }),
        }
    }

    fn summary(r: Result<Reply, String>) -> Result<String, String> {
        match r {
            Ok(Reply::Action { summary, failed: 0 }) => Ok(summary),
            Ok(other) => Err(format!("not an action: {other:?}")),
            Err(e) => Err(e),
        }
    }

    #[test]
    fn a_release_summary_names_the_holder_only_when_its_token_was_freed() {
        let s = |released, token| {
            summary(release_summary(
                "deploy/prod",
                "ci-job-17",
                7,
                &reply(released, token),
            ))
        };
        assert_eq!(
            s(true, Some(7)).as_deref(),
            Ok("released lock deploy/prod (held by ci-job-17, token 7)")
        );
        assert_eq!(
            s(true, Some(8)).as_deref(),
            Ok("released lock deploy/prod (token 8)")
        );
        assert_eq!(
            s(false, Some(7)).as_deref(),
            Ok("lock deploy/prod was not held (nothing changed)")
        );
        assert_eq!(
            s(false, None),
            Err("release lock deploy/prod: no lock deploy/prod (not found)".to_string())
        );
    }
}
