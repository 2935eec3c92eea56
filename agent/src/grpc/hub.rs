//! The Watch aggregator: one task that owns the streamed view of this agent's lease book and
//! fans it out to watchers (after tokio-console's aggregator).
//!
//! ```text
//!   runtime ──FeedEvent──▶ [bounded feed] ──▶ Hub::run ──▶ view (task id → Lease)
//!   Watch RPC ──Subscribe──▶ Hub::run ──▶ snapshot of the view, then the watcher gets every
//!                                          later delta, batched every FLUSH_EVERY
//!   watcher buffer full ──▶ dropped: its stream ends with RESOURCE_EXHAUSTED
//!   caps: MAX_WATCHERS in all, MAX_WATCHERS_PER_ACTOR per actor, viewers together
//!         MAX_VIEWER_WATCHERS (the rest kept for operators) ──▶ beyond: RESOURCE_EXHAUSTED
//!   agent stops ──▶ last deltas, an update with `closing`, then every stream ends
//! ```
//!
//! The snapshot and the deltas come from the same task, so a watcher's view is the view at the
//! snapshot plus exactly the deltas after it: consistent. A watcher never slows the agent: its
//! buffer is bounded and a full one drops the watcher, not the update of anyone else.
//!
//! Cost per watcher: each flush builds its batch of deltas once and hands every watcher a shared
//! reference to it; a watcher's own update is made from it only when its stream is polled for
//! the next message, and the last watcher to do so takes the deltas without a copy. So watchers
//! that fall behind hold references to one copy of the deltas, not a copy each.
//!
//! When things fail: events the runtime could not queue (a full feed) are counted in
//! `dropped_events`; the aggregator then reconciles its view with the lease book and sends the
//! differences as deltas, so views converge again. Times are database times: the last database
//! `now()` the runtime saw (claims, renewals), advanced by the monotonic clock since.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures_util::Stream;
use leasehold_proto::v1 as pb;
use leasehold_proto::wire;
use leasehold_shared::domain::LeaseOutcome;
use leasehold_shared::{Actor, Role};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tonic::Status;

use super::convert::{ms, progress_to_wire};
use crate::runtime::SlowRule;
use crate::runtime::core::Core;
use crate::runtime::feed::FeedEvent;

/// How often pending deltas go out.
pub const FLUSH_EVERY: Duration = Duration::from_millis(50);
/// How often agent stats go out (when they changed).
pub const STATS_EVERY: Duration = Duration::from_secs(1);
/// Updates a watcher may have waiting before it is dropped.
pub const WATCHER_BUFFER: usize = 64;
/// Deltas in one update at most.
pub const MAX_DELTAS_PER_UPDATE: usize = 2_048;
/// Leases in the snapshot update; the rest follow as `lease_acquired` deltas.
pub const SNAPSHOT_CHUNK: usize = 10_000;
/// Watchers one agent serves at once.
pub const MAX_WATCHERS: usize = 64;
/// Watchers one actor (a token's name, a local user's `uid:N(name)`, `local`) may hold at
/// once, so one caller cannot take every slot.
pub const MAX_WATCHERS_PER_ACTOR: usize = 8;
/// Slots only operators may take: viewers altogether hold at most
/// `MAX_WATCHERS - OPERATOR_WATCH_SLOTS`, so an operator can always watch.
pub const OPERATOR_WATCH_SLOTS: usize = 8;
/// Watchers viewers may hold altogether.
pub const MAX_VIEWER_WATCHERS: usize = MAX_WATCHERS - OPERATOR_WATCH_SLOTS;

type Item = Result<pb::WatchUpdate, Status>;

/// What waits in a watcher's buffer.
enum Queued {
    /// An update made for this watcher alone (snapshot, closing).
    Update(Box<pb::WatchUpdate>),
    /// One flush's deltas, shared by every watcher; the update is made when it is sent.
    Deltas {
        seq: u64,
        now_ms: i64,
        dropped_events: u64,
        deltas: Arc<Vec<pb::Delta>>,
    },
}

/// A Watch RPC's stream: updates until the agent closes it, or the watcher is dropped for
/// falling behind (then one RESOURCE_EXHAUSTED error ends it).
pub struct WatchStream {
    rx: mpsc::Receiver<Queued>,
    kicked: Option<oneshot::Receiver<Status>>,
    agent_id: String,
}

impl Stream for WatchStream {
    type Item = Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Item>> {
        if let Some(kicked) = self.kicked.as_mut()
            && let Poll::Ready(result) = Pin::new(kicked).poll(cx)
        {
            self.kicked = None;
            if let Ok(status) = result {
                self.rx.close();
                return Poll::Ready(Some(Err(status)));
            }
        }
        self.rx.poll_recv(cx).map(|queued| {
            queued.map(|queued| {
                Ok(match queued {
                    Queued::Update(update) => *update,
                    Queued::Deltas {
                        seq,
                        now_ms,
                        dropped_events,
                        deltas,
                    } => pb::WatchUpdate {
                        now_ms,
                        seq,
                        dropped_events,
                        agent_id: self.agent_id.clone(),
                        snapshot: None,
                        // The last watcher to send this batch takes it; the others copy it.
                        deltas: Arc::unwrap_or_clone(deltas),
                        closing: false,
                    },
                })
            })
        })
    }
}

enum Command {
    Subscribe {
        who: Watching,
        reply: oneshot::Sender<Result<WatchStream, Status>>,
    },
}

/// Who opens a Watch stream, for the caps.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Watching {
    actor: String,
    viewer: bool,
}

impl Watching {
    fn of(actor: &Actor) -> Self {
        Self {
            actor: actor.name.clone(),
            viewer: actor.role == Role::Viewer,
        }
    }
}

/// Refuses a new watcher for `who` when the caps are reached: [`MAX_WATCHERS`] in all,
/// [`MAX_WATCHERS_PER_ACTOR`] per actor, [`MAX_VIEWER_WATCHERS`] for viewers together.
fn check_caps<'a>(who: &Watching, open: impl Iterator<Item = &'a Watching>) -> Result<(), Status> {
    let (mut all, mut same, mut viewers) = (0usize, 0usize, 0usize);
    for w in open {
        all += 1;
        same += usize::from(w.actor == who.actor);
        viewers += usize::from(w.viewer);
    }
    if all >= MAX_WATCHERS {
        return Err(Status::resource_exhausted(format!(
            "this agent already serves {MAX_WATCHERS} watchers; close one and retry"
        )));
    }
    if same >= MAX_WATCHERS_PER_ACTOR {
        return Err(Status::resource_exhausted(format!(
            "{:?} already has {MAX_WATCHERS_PER_ACTOR} Watch streams open, the most one caller \
             may hold; close one and retry",
            who.actor
        )));
    }
    if who.viewer && viewers >= MAX_VIEWER_WATCHERS {
        return Err(Status::resource_exhausted(format!(
            "viewers already hold {MAX_VIEWER_WATCHERS} Watch streams, the most they may hold \
             together (the last {OPERATOR_WATCH_SLOTS} of the agent's {MAX_WATCHERS} are kept \
             for operators); close one and retry"
        )));
    }
    Ok(())
}

/// How RPC handlers reach the aggregator.
#[derive(Clone)]
pub struct HubHandle {
    tx: mpsc::Sender<Command>,
}

impl HubHandle {
    /// A new watcher for `actor`: its stream starts with a snapshot. RESOURCE_EXHAUSTED
    /// beyond the caps ([`MAX_WATCHERS`], [`MAX_WATCHERS_PER_ACTOR`],
    /// [`MAX_VIEWER_WATCHERS`]).
    pub async fn subscribe(&self, actor: &Actor) -> Result<WatchStream, Status> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Command::Subscribe {
                who: Watching::of(actor),
                reply,
            })
            .await
            .map_err(|_| Status::unavailable("the agent is shutting down"))?;
        rx.await
            .map_err(|_| Status::unavailable("the agent is shutting down"))?
    }
}

struct Watcher {
    who: Watching,
    tx: mpsc::Sender<Queued>,
    seq: u64,
    kick: Option<oneshot::Sender<Status>>,
}

/// The aggregator task.
pub struct Hub {
    core: Arc<Core>,
    feed: mpsc::Receiver<FeedEvent>,
    commands: mpsc::Receiver<Command>,
    view: HashMap<i64, pb::Lease>,
    pending: Vec<pb::Delta>,
    watchers: Vec<Watcher>,
    clock: Option<(DateTime<Utc>, Instant)>,
    last_stats: Option<pb::AgentStats>,
    reconciled_at_drops: u64,
    agent_id: String,
    /// Holdings that ended before their claim reached the hub: the claimer reports a batch
    /// once every task of it has started, so a quick task's end (or fence) can arrive first.
    /// Such a claim is then not added (it would stay in the view forever).
    ended_early: EndedEarly,
}

/// Most early ends remembered; older ones are forgotten first.
const ENDED_EARLY_CAP: usize = 4096;

/// A bounded set of (task, epoch) holdings whose end arrived before their claim.
#[derive(Default)]
struct EndedEarly {
    set: std::collections::HashSet<(i64, i64)>,
    order: std::collections::VecDeque<(i64, i64)>,
}

impl EndedEarly {
    fn insert(&mut self, key: (i64, i64)) {
        if self.set.insert(key) {
            self.order.push_back(key);
            if self.order.len() > ENDED_EARLY_CAP
                && let Some(old) = self.order.pop_front()
            {
                self.set.remove(&old);
            }
        }
    }

    /// True (and forgotten) when `key` ended before its claim arrived.
    fn take(&mut self, key: (i64, i64)) -> bool {
        if self.set.is_empty() || !self.set.remove(&key) {
            return false;
        }
        self.order.retain(|k| *k != key);
        true
    }
}

impl Hub {
    /// Takes the runtime's feed; `None` when another aggregator already has it.
    pub(crate) fn new(core: Arc<Core>) -> Option<(Hub, HubHandle)> {
        let feed = core.feed.take_receiver()?;
        let (tx, commands) = mpsc::channel(MAX_WATCHERS);
        let agent_id = core.id.as_str().to_string();
        Some((
            Hub {
                core,
                feed,
                commands,
                view: HashMap::new(),
                ended_early: EndedEarly::default(),
                pending: Vec::new(),
                watchers: Vec::new(),
                clock: None,
                last_stats: None,
                reconciled_at_drops: 0,
                agent_id,
            },
            HubHandle { tx },
        ))
    }

    /// Runs until `stop`, then closes every stream.
    pub async fn run(mut self, stop: CancellationToken) {
        if let Ok(Ok(now)) =
            tokio::time::timeout(Duration::from_secs(2), self.core.store.db_now()).await
        {
            self.clock = Some((now, Instant::now()));
        }
        let mut flush = tokio::time::interval(FLUSH_EVERY);
        flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut stats = tokio::time::interval(STATS_EVERY);
        stats.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = stop.cancelled() => break,
                Some(command) = self.commands.recv() => self.command(command),
                Some(event) = self.feed.recv() => {
                    self.apply(event);
                    // Take what else is queued now, up to a bound, before flushing.
                    for _ in 0..4096 {
                        match self.feed.try_recv() {
                            Ok(event) => self.apply(event),
                            Err(_) => break,
                        }
                    }
                    if self.pending.len() >= MAX_DELTAS_PER_UPDATE {
                        self.flush();
                    }
                }
                _ = flush.tick() => self.flush(),
                _ = stats.tick() => {
                    self.reconcile();
                    self.stats();
                    self.flush();
                }
            }
        }
        while let Ok(event) = self.feed.try_recv() {
            self.apply(event);
        }
        self.stats();
        self.flush();
        self.close();
    }

    fn now_ms(&self) -> i64 {
        match self.clock {
            Some((at, instant)) => {
                ms(at) + i64::try_from(instant.elapsed().as_millis()).unwrap_or(i64::MAX / 2)
            }
            None => 0,
        }
    }

    fn set_clock(&mut self, now: DateTime<Utc>) {
        self.clock = Some((now, Instant::now()));
    }

    fn command(&mut self, command: Command) {
        match command {
            Command::Subscribe { who, reply } => {
                let _ = reply.send(self.subscribe(who));
            }
        }
    }

    fn subscribe(&mut self, who: Watching) -> Result<WatchStream, Status> {
        self.watchers.retain(|w| !w.tx.is_closed());
        check_caps(&who, self.watchers.iter().map(|w| &w.who))?;
        // Deltas made before this snapshot belong to the other watchers only.
        self.flush();
        let mut leases: Vec<pb::Lease> = self.view.values().cloned().collect();
        leases.sort_unstable_by_key(|l| l.task_id);
        let rest = if leases.len() > SNAPSHOT_CHUNK {
            leases.split_off(SNAPSHOT_CHUNK)
        } else {
            Vec::new()
        };
        let chunks = rest.len().div_ceil(MAX_DELTAS_PER_UPDATE);
        let (tx, rx) = mpsc::channel(WATCHER_BUFFER + chunks);
        let (kick, kicked) = oneshot::channel();
        let now_ms = self.now_ms();
        let dropped_events = self.core.feed.dropped();
        let first = pb::WatchUpdate {
            now_ms,
            seq: 0,
            dropped_events,
            agent_id: self.agent_id.clone(),
            snapshot: Some(pb::Snapshot {
                leases,
                stats: Some(self.current_stats()),
                // Read from the holdings themselves. An event queued around the snapshot
                // may follow it: an acquire then repeats it (add = replace), and a loss the
                // snapshot already left out names a holding the watcher does not have.
                resources: self
                    .core
                    .holdings
                    .snapshot()
                    .into_iter()
                    .map(held_resource)
                    .collect(),
            }),
            deltas: Vec::new(),
            closing: false,
        };
        let mut seq = 0;
        // The buffer was sized for these, so none of the sends can find it full.
        let _ = tx.try_send(Queued::Update(Box::new(first)));
        let mut rest = rest.into_iter().peekable();
        while rest.peek().is_some() {
            seq += 1;
            let deltas = rest
                .by_ref()
                .take(MAX_DELTAS_PER_UPDATE)
                .map(|l| pb::Delta {
                    kind: Some(pb::delta::Kind::LeaseAcquired(l)),
                })
                .collect();
            let _ = tx.try_send(Queued::Update(Box::new(pb::WatchUpdate {
                now_ms,
                seq,
                dropped_events,
                agent_id: self.agent_id.clone(),
                snapshot: None,
                deltas,
                closing: false,
            })));
        }
        self.watchers.push(Watcher {
            who,
            tx,
            seq,
            kick: Some(kick),
        });
        Ok(WatchStream {
            rx,
            kicked: Some(kicked),
            agent_id: self.agent_id.clone(),
        })
    }

    fn delta(&mut self, kind: pb::delta::Kind) {
        if !self.watchers.is_empty() {
            self.pending.push(pb::Delta { kind: Some(kind) });
        }
    }

    fn apply(&mut self, event: FeedEvent) {
        match event {
            FeedEvent::Acquired { now, leases } => {
                self.set_clock(now);
                let heartbeat_at_ms = ms(now);
                for l in leases {
                    if self.ended_early.take((l.id.0, l.epoch.0)) {
                        continue;
                    }
                    let lease = pb::Lease {
                        task_id: l.id.0,
                        task_type: l.task_type.as_str().to_string(),
                        epoch: l.epoch.0,
                        owner: self.agent_id.clone(),
                        attempt: l.attempt,
                        started_at_ms: ms(l.started_at),
                        lease_until_ms: ms(l.lease_until),
                        heartbeat_at_ms,
                        progress: None,
                        slow: false,
                        cancel_requested: false,
                        renewal_failures: 0,
                        renewal_failure_reason: String::new(),
                        priority: i32::from(l.priority),
                        timeout_ms: i64::try_from(l.timeout.as_millis()).unwrap_or(i64::MAX),
                        slow_rule: pb::SlowRule::Unspecified.into(),
                        slow_limit_ms: 0,
                        slow_history_runs: 0,
                    };
                    if !self.watchers.is_empty() {
                        self.delta(pb::delta::Kind::LeaseAcquired(lease.clone()));
                    }
                    self.view.insert(l.id.0, lease);
                }
            }
            FeedEvent::Renewed { now, leases } => {
                self.set_clock(now);
                let heartbeat_at_ms = ms(now);
                for (id, epoch, until) in leases {
                    let Some(lease) = self.view.get_mut(&id.0) else {
                        continue;
                    };
                    if lease.epoch != epoch.0 {
                        continue;
                    }
                    lease.lease_until_ms = ms(until);
                    lease.heartbeat_at_ms = heartbeat_at_ms;
                    lease.renewal_failures = 0;
                    lease.renewal_failure_reason.clear();
                    let renewed = pb::LeaseRenewed {
                        task_id: id.0,
                        epoch: epoch.0,
                        lease_until_ms: lease.lease_until_ms,
                        heartbeat_at_ms,
                    };
                    self.delta(pb::delta::Kind::LeaseRenewed(renewed));
                }
            }
            FeedEvent::RenewalFailed { reason, leases } => {
                for (id, epoch) in leases {
                    let Some(lease) = self.view.get_mut(&id.0) else {
                        continue;
                    };
                    if lease.epoch != epoch.0 {
                        continue;
                    }
                    lease.renewal_failures = lease.renewal_failures.saturating_add(1);
                    lease.renewal_failure_reason = reason.to_string();
                    let failed = pb::RenewalFailed {
                        task_id: id.0,
                        epoch: epoch.0,
                        reason: reason.to_string(),
                        consecutive: lease.renewal_failures,
                    };
                    self.delta(pb::delta::Kind::RenewalFailed(failed));
                }
            }
            FeedEvent::Ended { id, epoch, outcome } => {
                if self.remove(id.0, epoch.0) {
                    self.delta(pb::delta::Kind::LeaseReleased(lease_released(
                        id.0,
                        epoch.0,
                        wire::write(outcome),
                    )));
                } else if !self.view.contains_key(&id.0) {
                    self.ended_early.insert((id.0, epoch.0));
                }
            }
            FeedEvent::Fenced { id, epoch, write } => {
                let held = self.remove(id.0, epoch.0);
                if !held && !self.view.contains_key(&id.0) {
                    self.ended_early.insert((id.0, epoch.0));
                }
                self.delta(pb::delta::Kind::LeaseFenced(pb::LeaseFenced {
                    task_id: id.0,
                    epoch: epoch.0,
                    write: write.to_string(),
                }));
                // A fenced write ends the holding: the view drops it, so a watcher must too.
                // Without this release a watcher kept a lease the agent no longer held (found
                // by T22 under load, when renewals were fenced after a takeover).
                if held {
                    self.delta(pb::delta::Kind::LeaseReleased(lease_released(
                        id.0,
                        epoch.0,
                        wire::write(LeaseOutcome::Fenced),
                    )));
                }
            }
            FeedEvent::Progress {
                id,
                epoch,
                progress,
            } => {
                if let Some(lease) = self.view.get_mut(&id.0)
                    && lease.epoch == epoch.0
                {
                    let wire = progress_to_wire(&progress);
                    lease.progress = Some(wire);
                    self.delta(pb::delta::Kind::Progress(pb::ProgressUpdate {
                        task_id: id.0,
                        epoch: epoch.0,
                        progress: Some(wire),
                    }));
                }
            }
            FeedEvent::Slow {
                id,
                epoch,
                running_for,
                rule,
            } => {
                if let Some(lease) = self.view.get_mut(&id.0)
                    && lease.epoch == epoch.0
                {
                    let (wire_rule, runs) = match rule {
                        SlowRule::Threshold { .. } => (pb::SlowRule::Threshold, 0),
                        SlowRule::History { runs, .. } => (pb::SlowRule::History, runs),
                    };
                    let limit_ms = i64::try_from(rule.limit().as_millis()).unwrap_or(i64::MAX);
                    lease.slow = true;
                    lease.slow_rule = wire_rule.into();
                    lease.slow_limit_ms = limit_ms;
                    lease.slow_history_runs = runs;
                    self.delta(pb::delta::Kind::Slow(pb::SlowTask {
                        task_id: id.0,
                        epoch: epoch.0,
                        running_ms: i64::try_from(running_for.as_millis()).unwrap_or(i64::MAX),
                        rule: wire_rule.into(),
                        limit_ms,
                        history_runs: runs,
                    }));
                }
            }
            FeedEvent::CancelRequested { id, epoch } => {
                if let Some(lease) = self.view.get_mut(&id.0)
                    && lease.epoch == epoch.0
                    && !lease.cancel_requested
                {
                    lease.cancel_requested = true;
                    self.delta(pb::delta::Kind::CancelRequested(pb::CancelRequested {
                        task_id: id.0,
                        epoch: epoch.0,
                    }));
                }
            }
            FeedEvent::Resource {
                resource,
                held,
                reason,
                at,
            } => {
                let at_ms = at
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
                self.delta(pb::delta::Kind::ResourceChange(pb::ResourceChange {
                    resource: Some(held_resource(resource)),
                    held,
                    reason: reason.to_string(),
                    at_ms,
                }));
            }
        }
    }

    /// Removes the lease on `id` if it is at `epoch`.
    fn remove(&mut self, id: i64, epoch: i64) -> bool {
        match self.view.get(&id) {
            Some(l) if l.epoch == epoch => {
                self.view.remove(&id);
                true
            }
            _ => false,
        }
    }

    /// After dropped events, makes the view match the lease book again.
    fn reconcile(&mut self) {
        let dropped = self.core.feed.dropped();
        if dropped == self.reconciled_at_drops {
            return;
        }
        self.reconciled_at_drops = dropped;
        let book = self.core.book.brief();
        let held: HashMap<i64, i64> = book.iter().map(|(id, e, _, _)| (id.0, e.0)).collect();
        let gone: Vec<(i64, i64)> = self
            .view
            .values()
            .filter(|l| held.get(&l.task_id) != Some(&l.epoch))
            .map(|l| (l.task_id, l.epoch))
            .collect();
        for (id, epoch) in gone {
            self.view.remove(&id);
            self.delta(pb::delta::Kind::LeaseReleased(lease_released(
                id,
                epoch,
                wire::write(LeaseOutcome::Ended),
            )));
        }
        let now_ms = self.now_ms();
        for (id, epoch, task_type, running) in book {
            if self.view.contains_key(&id.0) {
                continue;
            }
            let started = now_ms - i64::try_from(running.as_millis()).unwrap_or(0);
            let lease = pb::Lease {
                task_id: id.0,
                task_type: task_type.as_str().to_string(),
                epoch: epoch.0,
                owner: self.agent_id.clone(),
                started_at_ms: started,
                heartbeat_at_ms: started,
                ..Default::default()
            };
            self.delta(pb::delta::Kind::LeaseAcquired(lease.clone()));
            self.view.insert(id.0, lease);
        }
        tracing::warn!(
            dropped_events = dropped,
            leases = self.view.len(),
            "watch view reconciled with the lease book after dropped events"
        );
    }

    fn current_stats(&self) -> pb::AgentStats {
        super::convert::stats_to_wire(&self.core)
    }

    fn stats(&mut self) {
        let stats = self.current_stats();
        if self.last_stats.as_ref() == Some(&stats) {
            return;
        }
        self.last_stats = Some(stats.clone());
        self.delta(pb::delta::Kind::Stats(stats));
    }

    /// Sends the pending deltas to every watcher, dropping the ones that fell behind.
    fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        if self.watchers.is_empty() {
            self.pending.clear();
            return;
        }
        let pending = std::mem::take(&mut self.pending);
        let now_ms = self.now_ms();
        let dropped_events = self.core.feed.dropped();
        let chunks: Vec<Arc<Vec<pb::Delta>>> = if pending.len() <= MAX_DELTAS_PER_UPDATE {
            vec![Arc::new(pending)]
        } else {
            let mut rest = pending.into_iter();
            std::iter::from_fn(|| {
                let chunk: Vec<pb::Delta> = rest.by_ref().take(MAX_DELTAS_PER_UPDATE).collect();
                (!chunk.is_empty()).then(|| Arc::new(chunk))
            })
            .collect()
        };
        for chunk in &chunks {
            for w in &mut self.watchers {
                if w.kick.is_none() {
                    continue;
                }
                w.seq += 1;
                let queued = Queued::Deltas {
                    seq: w.seq,
                    now_ms,
                    dropped_events,
                    deltas: Arc::clone(chunk),
                };
                match w.tx.try_send(queued) {
                    Ok(()) => {}
                    Err(mpsc::error::TrySendError::Full(_)) => {
                        if let Some(kick) = w.kick.take() {
                            let _ = kick.send(fell_behind());
                        }
                        tracing::warn!("a watcher fell behind and was dropped");
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => {
                        w.kick = None;
                    }
                }
            }
            self.watchers.retain(|w| w.kick.is_some());
        }
    }

    /// The agent is stopping: a last update saying so, then every stream ends.
    fn close(&mut self) {
        let now_ms = self.now_ms();
        let dropped_events = self.core.feed.dropped();
        for mut w in self.watchers.drain(..) {
            w.seq += 1;
            let closing = Queued::Update(Box::new(pb::WatchUpdate {
                now_ms,
                seq: w.seq,
                dropped_events,
                agent_id: self.agent_id.clone(),
                snapshot: None,
                deltas: Vec::new(),
                closing: true,
            }));
            // No room for the closing update: the watcher was behind; it ends as one.
            if let Err(mpsc::error::TrySendError::Full(_)) = w.tx.try_send(closing)
                && let Some(kick) = w.kick.take()
            {
                let _ = kick.send(fell_behind());
            }
        }
    }
}

/// The status that ends the stream of a watcher that fell behind.
fn fell_behind() -> Status {
    Status::resource_exhausted(format!(
        "this watcher fell more than {WATCHER_BUFFER} updates behind and was dropped; reconnect \
         for a fresh snapshot"
    ))
}

/// A lease_released delta with its outcome as [`wire::write`] gives it.
#[allow(deprecated)] // `outcome` is filled for consoles older than `lease_outcome`
fn lease_released(task_id: i64, epoch: i64, (number, word): (i32, String)) -> pb::LeaseReleased {
    pb::LeaseReleased {
        task_id,
        epoch,
        outcome: word,
        lease_outcome: number,
    }
}

fn held_resource(r: crate::runtime::feed::HeldResource) -> pb::HeldResource {
    let (group, shard) = r.group.unwrap_or_default();
    pb::HeldResource {
        name: r.name,
        group,
        shard,
        token: r.token,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn who(actor: &str, viewer: bool) -> Watching {
        Watching {
            actor: actor.into(),
            viewer,
        }
    }

    #[test]
    fn one_actor_holds_at_most_its_share() {
        let open: Vec<Watching> = (0..MAX_WATCHERS_PER_ACTOR)
            .map(|_| who("ops", false))
            .collect();
        let e = check_caps(&who("ops", false), open.iter()).unwrap_err();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        assert!(
            e.message().contains("\"ops\" already has 8"),
            "{}",
            e.message()
        );
        assert!(check_caps(&who("oncall", false), open.iter()).is_ok());
        assert!(check_caps(&who("ops", false), open[1..].iter()).is_ok());
    }

    #[test]
    fn viewers_leave_slots_for_operators() {
        // Viewers of many names fill their share.
        let open: Vec<Watching> = (0..MAX_VIEWER_WATCHERS)
            .map(|n| who(&format!("uid:{}", n / 4), true))
            .collect();
        let e = check_caps(&who("uid:999", true), open.iter()).unwrap_err();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        assert!(e.message().contains("kept"), "{}", e.message());
        // An operator still gets every kept slot, then the agent is full.
        let mut open = open;
        for n in 0..OPERATOR_WATCH_SLOTS {
            let op = who(&format!("op{n}"), false);
            check_caps(&op, open.iter()).unwrap();
            open.push(op);
        }
        assert_eq!(open.len(), MAX_WATCHERS);
        let e = check_caps(&who("op-late", false), open.iter()).unwrap_err();
        assert!(e.message().contains("64 watchers"), "{}", e.message());
    }

    #[test]
    fn watching_is_named_by_the_actor_and_its_role() {
        let viewer = Actor {
            name: "uid:65534(nobody)".into(),
            role: Role::Viewer,
        };
        assert_eq!(Watching::of(&viewer), who("uid:65534(nobody)", true));
        let op = Actor {
            name: "local".into(),
            role: Role::Operator,
        };
        assert_eq!(Watching::of(&op), who("local", false));
    }
}
