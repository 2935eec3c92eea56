//! The unit tests' queue: tasks with status, attempt, epoch and `lease_until` on tokio's clock,
//! behind the services' seams ([`super::queue`]) with the store's rules that matter to them
//! (claims, fenced completions and releases, renewals and the agent's liveness, recovery after
//! `lease_until + grace`, the leader lease), cues that make the next call of an operation fail
//! or hang, and a log of the calls with their (paused) times. Also [`core`]: a [`Core`] built
//! without a database.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicI64};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, TimeZone, Utc};
use leasehold_shared::domain::Task;
use leasehold_shared::store::postgres::PgStore;
use leasehold_shared::store::{
    AnyStore, BreakerTickParams, BreakerTransition, ClaimBatch, ClaimParams, CompleteOutcome,
    CompleteParams, Completion, ExpireDeadlinesParams, HolderWrite, LeaderElectParams,
    LeaderOutcome, LeaderRenewParams, LeaderRenewal, PurgeParams, RecoverParams, Recovered,
    ReleaseOutcome, ReleaseParams, RenewOutcome, RenewParams, RenewedLease, ShedParams,
    UnservedParams,
};
use leasehold_shared::{
    AgentId, InputLimits, LeaseEpoch, Store, StoreError, TaskId, TaskStatus, TaskType,
};
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::book::LeaseBook;
use super::core::{Core, Finished, PolicyCache, Stats};
use super::events::Listeners;
use super::feed::Feed;
use super::metrics::Metrics;
use super::queue::{ClaimQueue, CompleteQueue, MaintenanceQueue, RenewQueue};
use super::settings::RuntimeSettings;
use crate::handler::{Handler, HandlerError, HandlerRegistry, Outcome, StopReason, TaskContext};

/// What the next call of an operation does instead of answering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cue {
    /// Fails at once with a connection error (the database is away).
    Fail,
    /// Never answers (a half-open connection).
    Hang,
    /// Answers as of the call, the reply arriving this much later (a slow round trip); honoured
    /// by `task_claim`: a claim that saw the queue before a task arrived.
    SlowReply(Duration),
}

/// One call the queue received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Call {
    pub(crate) op: &'static str,
    /// When, from the queue's creation (paused time).
    pub(crate) at: Duration,
    /// What it asked for: the claim's batch, the rows completed, released or renewed, the
    /// recovery limit; 0 for the rest.
    pub(crate) size: usize,
}

/// One task row.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub(crate) task_type: TaskType,
    pub(crate) status: TaskStatus,
    pub(crate) attempt: i32,
    pub(crate) max_attempts: i32,
    pub(crate) epoch: LeaseEpoch,
    pub(crate) owner: Option<AgentId>,
    pub(crate) lease_until: Option<Instant>,
    pub(crate) timeout_ms: Option<i64>,
    pub(crate) finished_at: Option<Instant>,
    /// The holder write that ended the last lease: a repeat of it is `Repeated`.
    ended_by: Option<(AgentId, LeaseEpoch, Ended)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    Completed(TaskStatus),
    Released,
}

struct Leader {
    owner: AgentId,
    term: i64,
    until: Instant,
}

#[derive(Default)]
struct State {
    rows: BTreeMap<TaskId, Row>,
    next_id: i64,
    cues: HashMap<&'static str, VecDeque<Cue>>,
    calls: Vec<Call>,
    leader: Option<Leader>,
    term: i64,
    /// Each agent's liveness deadline (`agents.alive_until`), as its renewals pushed it.
    alive: HashMap<AgentId, Instant>,
}

/// The in-memory queue.
pub(crate) struct MemoryQueue {
    start: Instant,
    state: Mutex<State>,
}

/// What a statement's database time reads at the queue's start.
fn epoch_time() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()
}

impl MemoryQueue {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            start: Instant::now(),
            state: Mutex::new(State::default()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    /// The database time of `at`: the queue's start reads [`epoch_time`].
    pub(crate) fn db_time(&self, at: Instant) -> DateTime<Utc> {
        epoch_time() + chrono::Duration::from_std(at - self.start).unwrap()
    }

    /// Adds `n` queued tasks of `task_type` with `max_attempts` attempts and an optional
    /// per-task timeout.
    pub(crate) fn enqueue(
        &self,
        task_type: &str,
        n: usize,
        max_attempts: i32,
        timeout: Option<Duration>,
    ) -> Vec<TaskId> {
        let mut state = self.lock();
        (0..n)
            .map(|_| {
                state.next_id += 1;
                let id = TaskId(state.next_id);
                state.rows.insert(
                    id,
                    Row {
                        task_type: TaskType::new(task_type).unwrap(),
                        status: TaskStatus::Queued,
                        attempt: 0,
                        max_attempts,
                        epoch: LeaseEpoch(0),
                        owner: None,
                        lease_until: None,
                        timeout_ms: timeout.map(|t| i64::try_from(t.as_millis()).unwrap()),
                        finished_at: None,
                        ended_by: None,
                    },
                );
                id
            })
            .collect()
    }

    /// The next call of `op` does `cue` (cues of one operation are used in order).
    pub(crate) fn cue(&self, op: &'static str, cue: Cue) {
        self.lock().cues.entry(op).or_default().push_back(cue);
    }

    /// Every call of `op` so far.
    pub(crate) fn calls(&self, op: &str) -> Vec<Call> {
        self.lock()
            .calls
            .iter()
            .filter(|c| c.op == op)
            .cloned()
            .collect()
    }

    /// `owner` took the lease of `id` (recovered, then claimed again): a new attempt under a
    /// new epoch. Its `lease_until` is left as it was, so a renewal of it is easy to see.
    pub(crate) fn take_over(&self, id: TaskId, owner: AgentId) {
        let mut state = self.lock();
        let row = state.rows.get_mut(&id).unwrap();
        row.epoch = LeaseEpoch(row.epoch.0 + 1);
        row.attempt += 1;
        row.owner = Some(owner);
        row.status = TaskStatus::Running;
    }

    /// An operator asked to cancel the leased task `id` (`task_cancel` on a leased task).
    pub(crate) fn request_cancel(&self, id: TaskId) {
        let mut state = self.lock();
        let row = state.rows.get_mut(&id).unwrap();
        assert!(row.status.is_leased(), "{id:?} is not leased");
        row.status = TaskStatus::CancelRequested;
    }

    /// `agent`'s liveness deadline, if a renewal ever pushed it.
    pub(crate) fn alive_until(&self, agent: &AgentId) -> Option<Instant> {
        self.lock().alive.get(agent).copied()
    }

    pub(crate) fn row(&self, id: TaskId) -> Row {
        self.lock().rows.get(&id).cloned().unwrap()
    }

    /// How many tasks are in `status`.
    pub(crate) fn count(&self, status: TaskStatus) -> usize {
        self.lock()
            .rows
            .values()
            .filter(|r| r.status == status)
            .count()
    }

    /// Logs the call and plays its cue, if any; returns how long the reply is held back.
    async fn enter(&self, op: &'static str, size: usize) -> Result<Duration, StoreError> {
        let cue = {
            let mut state = self.lock();
            let at = Instant::now() - self.start;
            state.calls.push(Call { op, at, size });
            state.cues.get_mut(op).and_then(VecDeque::pop_front)
        };
        match cue {
            None => Ok(Duration::ZERO),
            Some(Cue::Fail) => Err(StoreError::timed_out(op)),
            Some(Cue::Hang) => std::future::pending().await,
            Some(Cue::SlowReply(after)) => Ok(after),
        }
    }

    fn task(&self, id: TaskId, row: &Row) -> Task {
        let now = self.db_time(Instant::now());
        Task {
            id,
            task_type: row.task_type.clone(),
            payload: serde_json::Value::Null,
            priority: 0,
            status: row.status,
            available_at: now,
            deadline_at: None,
            timeout_ms: row.timeout_ms,
            attempt: row.attempt,
            max_attempts: row.max_attempts,
            lease_owner: row.owner.clone(),
            lease_epoch: row.epoch,
            lease_until: row.lease_until.map(|u| self.db_time(u)),
            heartbeat_at: Some(now),
            idempotency_key: None,
            concurrency_key: None,
            progress: None,
            snoozes: 0,
            checkpoint: None,
            checkpoint_at: None,
            result: None,
            last_error: None,
            created_at: now,
            started_at: Some(now),
            finished_at: None,
            updated_at: now,
        }
    }
}

/// A failed attempt retries while attempts are left and the error is retryable.
fn after_failure(row: &Row, retryable: bool) -> TaskStatus {
    if retryable && row.attempt < row.max_attempts {
        TaskStatus::RetryWait
    } else {
        TaskStatus::Dead
    }
}

fn end_lease(row: &mut Row, status: TaskStatus, now: Instant) {
    row.status = status;
    row.owner = None;
    row.lease_until = None;
    if status.is_terminal() {
        row.finished_at = Some(now);
    }
}

#[async_trait]
impl ClaimQueue for MemoryQueue {
    /// Takes up to `batch` waiting tasks of the asked types, oldest first: a new attempt under
    /// a new epoch, leased for the TTL. Retry waits are due at once here.
    async fn task_claim(&self, params: ClaimParams) -> Result<ClaimBatch, StoreError> {
        let reply_after = self.enter("task_claim", params.batch as usize).await?;
        let batch = self.claim_now(&params);
        tokio::time::sleep(reply_after).await;
        Ok(batch)
    }
}

impl MemoryQueue {
    fn claim_now(&self, params: &ClaimParams) -> ClaimBatch {
        let now = Instant::now();
        let mut state = self.lock();
        let mut tasks = Vec::new();
        for (id, row) in state.rows.iter_mut() {
            if tasks.len() >= params.batch as usize {
                break;
            }
            let waiting = matches!(row.status, TaskStatus::Queued | TaskStatus::RetryWait);
            if !waiting || !params.task_types.contains(&row.task_type) {
                continue;
            }
            row.status = TaskStatus::Running;
            row.attempt += 1;
            row.epoch = LeaseEpoch(row.epoch.0 + 1);
            row.owner = Some(params.owner.clone());
            row.lease_until = Some(now + params.lease_ttl);
            tasks.push(self.task(*id, row));
        }
        ClaimBatch {
            now: self.db_time(now),
            tasks,
            contended: false,
            rate_wait: None,
        }
    }
}

#[async_trait]
impl CompleteQueue for MemoryQueue {
    /// Each completion is fenced on its own: it lands only on the running lease of its owner
    /// and epoch; a repeat of one that landed is `Repeated`.
    async fn task_complete_many(
        &self,
        batch: Vec<CompleteParams>,
    ) -> Result<Vec<CompleteOutcome>, StoreError> {
        self.enter("task_complete_many", batch.len()).await?;
        let now = Instant::now();
        let mut state = self.lock();
        let outcomes = batch
            .into_iter()
            .map(|p| {
                let Some(row) = state.rows.get_mut(&p.key.id) else {
                    return CompleteOutcome::Fenced;
                };
                let held = row.status.is_leased()
                    && row.owner.as_ref() == Some(&p.key.owner)
                    && row.epoch == p.key.epoch;
                if !held {
                    return match &row.ended_by {
                        Some((owner, epoch, Ended::Completed(status)))
                            if *owner == p.key.owner && *epoch == p.key.epoch =>
                        {
                            CompleteOutcome::Repeated { status: *status }
                        }
                        _ => CompleteOutcome::Fenced,
                    };
                }
                let status = match &p.completion {
                    Completion::Succeeded { .. } => TaskStatus::Succeeded,
                    Completion::PartiallySucceeded { .. } => TaskStatus::PartiallySucceeded,
                    Completion::Cancelled => TaskStatus::Cancelled,
                    Completion::Failed { error } => after_failure(row, error.retryable),
                    // Due at once here, like retry waits; the attempt is given back.
                    Completion::Snooze { .. } => {
                        row.attempt -= 1;
                        TaskStatus::Queued
                    }
                };
                end_lease(row, status, now);
                row.ended_by = Some((p.key.owner, p.key.epoch, Ended::Completed(status)));
                CompleteOutcome::Applied {
                    status,
                    retry_at: matches!(status, TaskStatus::RetryWait | TaskStatus::Queued)
                        .then(|| self.db_time(now)),
                }
            })
            .collect();
        Ok(outcomes)
    }

    /// Gives leases of `owner` back to the queue (cancelled if a cancel was asked for), fenced
    /// by epoch.
    async fn lease_release_many(
        &self,
        params: ReleaseParams,
    ) -> Result<ReleaseOutcome, StoreError> {
        self.enter("lease_release_many", params.leases.len())
            .await?;
        let now = Instant::now();
        let mut state = self.lock();
        let mut out = ReleaseOutcome::default();
        for (id, epoch) in params.leases {
            let Some(row) = state.rows.get_mut(&id) else {
                out.fenced.push(id);
                continue;
            };
            let held = row.status.is_leased()
                && row.owner.as_ref() == Some(&params.owner)
                && row.epoch == epoch;
            if held {
                // A lease given back after a cancel was asked for ends the task, as the
                // store's release does.
                let status = if row.status == TaskStatus::CancelRequested {
                    TaskStatus::Cancelled
                } else {
                    TaskStatus::Queued
                };
                end_lease(row, status, now);
                row.ended_by = Some((params.owner.clone(), epoch, Ended::Released));
                out.released.push(id);
            } else if row.ended_by == Some((params.owner.clone(), epoch, Ended::Released)) {
                out.repeated.push(id);
            } else {
                out.fenced.push(id);
            }
        }
        Ok(out)
    }
}

#[async_trait]
impl RenewQueue for MemoryQueue {
    /// Renews each lease still `owner`'s at that epoch and running or cancel-requested (an
    /// expired one not yet recovered included) to now + TTL; the rest are lost. Pushes the
    /// owner's liveness deadline to now + `alive_for`, leases or not.
    async fn lease_renew_many(&self, params: RenewParams) -> Result<RenewOutcome, StoreError> {
        self.enter("lease_renew_many", params.leases.len()).await?;
        let now = Instant::now();
        let mut state = self.lock();
        if let Some(alive_for) = params.alive_for {
            state.alive.insert(params.owner.clone(), now + alive_for);
        }
        let mut out = RenewOutcome {
            now: self.db_time(now),
            renewed: Vec::new(),
            lost: Vec::new(),
        };
        for (id, epoch) in params.leases {
            let row = state.rows.get_mut(&id).filter(|row| {
                row.status.is_leased()
                    && row.owner.as_ref() == Some(&params.owner)
                    && row.epoch == epoch
            });
            let Some(row) = row else {
                out.lost.push((id, epoch));
                continue;
            };
            let until = now + params.lease_ttl;
            row.lease_until = Some(until);
            out.renewed.push(RenewedLease {
                id,
                epoch,
                lease_until: self.db_time(until),
                cancel_requested: row.status == TaskStatus::CancelRequested,
            });
        }
        Ok(out)
    }
}

#[async_trait]
impl MaintenanceQueue for MemoryQueue {
    /// A free leader lease (none, or past its `lease_until + grace`) goes to the caller under
    /// a new term; the leader's own election renews it.
    async fn leader_attempt_elect(
        &self,
        params: LeaderElectParams,
    ) -> Result<LeaderOutcome, StoreError> {
        self.enter("leader_attempt_elect", 0).await?;
        let now = Instant::now();
        let db_now = self.db_time(now);
        let mut state = self.lock();
        let free = state
            .leader
            .as_ref()
            .is_none_or(|l| l.until + params.grace < now);
        if free {
            state.term += 1;
            let term = state.term;
            state.leader = Some(Leader {
                owner: params.owner.clone(),
                term,
                until: now + params.ttl,
            });
        }
        let term = state.term;
        match state.leader.as_mut() {
            Some(l) if l.owner == params.owner => {
                l.until = now + params.ttl;
                Ok(LeaderOutcome::Leader {
                    term: l.term,
                    lease_until: self.db_time(l.until),
                    now: db_now,
                })
            }
            other => Ok(LeaderOutcome::Follower {
                leader: other.as_ref().map(|l| l.owner.clone()),
                term,
                lease_until: other.as_ref().map(|l| self.db_time(l.until)),
                now: db_now,
            }),
        }
    }

    async fn leader_renew(&self, params: LeaderRenewParams) -> Result<LeaderRenewal, StoreError> {
        self.enter("leader_renew", 0).await?;
        let now = Instant::now();
        let mut state = self.lock();
        match state.leader.as_mut() {
            Some(l) if l.owner == params.owner && l.term == params.term => {
                l.until = now + params.ttl;
                Ok(LeaderRenewal::Held {
                    now: self.db_time(now),
                })
            }
            _ => Ok(LeaderRenewal::Fenced),
        }
    }

    async fn leader_resign(&self, owner: AgentId, term: i64) -> Result<HolderWrite, StoreError> {
        self.enter("leader_resign", 0).await?;
        let mut state = self.lock();
        match &state.leader {
            Some(l) if l.owner == owner && l.term == term => {
                state.leader = None;
                Ok(HolderWrite::Held)
            }
            _ => Ok(HolderWrite::Fenced),
        }
    }

    /// Takes at most `limit` running leases past `lease_until + grace` (none when the clock
    /// reads past `clock_bound`): a new epoch, and a retry while attempts are left.
    async fn lease_recover_expired(
        &self,
        params: RecoverParams,
    ) -> Result<Vec<Recovered>, StoreError> {
        self.enter("lease_recover_expired", params.limit as usize)
            .await?;
        let now = Instant::now();
        if params
            .clock_bound
            .is_some_and(|bound| self.db_time(now) > bound)
        {
            return Ok(Vec::new());
        }
        let mut state = self.lock();
        let mut recovered = Vec::new();
        for (id, row) in state.rows.iter_mut() {
            if recovered.len() >= params.limit as usize {
                break;
            }
            let expired =
                row.status.is_leased() && row.lease_until.is_some_and(|u| u + params.grace < now);
            if !expired {
                continue;
            }
            let owner = row.owner.clone().unwrap();
            let revoked_epoch = row.epoch;
            let status = after_failure(row, true);
            end_lease(row, status, now);
            row.epoch = LeaseEpoch(row.epoch.0 + 1);
            recovered.push(Recovered {
                id: *id,
                task_type: row.task_type.clone(),
                owner,
                revoked_epoch,
                status,
            });
        }
        Ok(recovered)
    }

    /// The queue's tasks have no deadlines: none expire.
    async fn task_expire_deadlines(
        &self,
        _params: ExpireDeadlinesParams,
    ) -> Result<Vec<TaskId>, StoreError> {
        self.enter("task_expire_deadlines", 0).await?;
        Ok(Vec::new())
    }

    /// The queue has no policies: no type sheds.
    async fn task_shed(&self, _params: ShedParams) -> Result<Vec<(TaskId, TaskType)>, StoreError> {
        self.enter("task_shed", 0).await?;
        Ok(Vec::new())
    }

    /// The queue has no policies: no breaker moves.
    async fn breaker_tick(
        &self,
        _params: BreakerTickParams,
    ) -> Result<Vec<BreakerTransition>, StoreError> {
        self.enter("breaker_tick", 0).await?;
        Ok(Vec::new())
    }

    /// Deletes up to `limit` tasks in `statuses` finished at least `older_than` ago.
    async fn task_purge_finished(&self, params: PurgeParams) -> Result<u64, StoreError> {
        self.enter("task_purge_finished", params.limit as usize)
            .await?;
        let now = Instant::now();
        let mut state = self.lock();
        let old: Vec<TaskId> = state
            .rows
            .iter()
            .filter(|(_, r)| {
                params.statuses.contains(&r.status)
                    && r.finished_at.is_some_and(|f| f + params.older_than <= now)
            })
            .map(|(id, _)| *id)
            .take(params.limit as usize)
            .collect();
        for id in &old {
            state.rows.remove(id);
        }
        Ok(old.len() as u64)
    }

    /// The queue has no agent registry: every type is taken as served.
    async fn task_dead_letter_unserved(
        &self,
        _params: UnservedParams,
    ) -> Result<Vec<(TaskId, TaskType)>, StoreError> {
        self.enter("task_dead_letter_unserved", 0).await?;
        Ok(Vec::new())
    }

    /// The queue keeps no resource lease history.
    async fn resource_history_prune(&self, _older_than: Duration) -> Result<u64, StoreError> {
        self.enter("resource_history_prune", 0).await?;
        Ok(0)
    }
}

/// The agent id of [`core`].
pub(crate) fn agent_id() -> AgentId {
    AgentId::new("agent-under-test").unwrap()
}

/// A [`Core`] for one service under test, and the completer's end of its queue. Its store is
/// a PostgreSQL pool that never connects (a closed local port): a service that went around
/// its seam to the store would fail its test with a connection error.
pub(crate) fn core(
    settings: RuntimeSettings,
    handlers: HandlerRegistry,
) -> (Arc<Core>, mpsc::UnboundedReceiver<Finished>) {
    let options = sqlx::postgres::PgConnectOptions::new()
        .host("127.0.0.1")
        .port(1)
        .username("nobody")
        .database("none");
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_millis(100))
        .idle_timeout(None)
        .max_lifetime(None)
        .connect_lazy_with(options);
    let unreachable = PgStore::from_pool(pool, InputLimits::default());
    let (tx, rx) = mpsc::unbounded_channel();
    let types = handlers.task_types();
    let core = Core {
        book: Arc::new(LeaseBook::new(settings.concurrency)),
        settings,
        id: agent_id(),
        store: Arc::new(unreachable.clone()) as Arc<dyn Store>,
        database: AnyStore::Postgres(unreachable),
        handlers,
        types,
        listeners: Listeners::default(),
        metrics: Arc::new(Metrics::new()),
        policies: PolicyCache::default(),
        history: Default::default(),
        wake: Notify::new(),
        wakes: std::sync::atomic::AtomicU64::new(0),
        finished: tx,
        stats: Stats::default(),
        draining: AtomicBool::new(false),
        feed: Arc::new(Feed::default()),
        leading: AtomicBool::new(false),
        leader_term: AtomicI64::new(0),
        schedules_changed: Notify::new(),
        drain: CancellationToken::new(),
        holdings: super::resources::Holdings::default(),
    };
    (Arc::new(core), rx)
}

/// What [`Sleeper`]s saw of the stops: the task, and why it was stopped.
#[derive(Debug, Default)]
pub(crate) struct Stops {
    /// Handlers asked to stop that returned.
    pub(crate) returned: Mutex<Vec<(TaskId, Option<StopReason>)>>,
    /// Handlers dropped before they returned.
    pub(crate) dropped: Mutex<Vec<(TaskId, Option<StopReason>)>>,
}

impl Stops {
    pub(crate) fn returned(&self) -> Vec<(TaskId, Option<StopReason>)> {
        self.returned.lock().unwrap().clone()
    }

    pub(crate) fn dropped(&self) -> Vec<(TaskId, Option<StopReason>)> {
        self.dropped.lock().unwrap().clone()
    }
}

/// A handler that works for `run_for` (forever when `None`) and then succeeds; asked to stop,
/// it returns at once with a retryable error — unless it ignores stops.
pub(crate) struct Sleeper {
    pub(crate) run_for: Option<Duration>,
    pub(crate) ignores_stop: bool,
    pub(crate) stops: Arc<Stops>,
}

/// One run of a [`Sleeper`]: dropped before it returned, it says so.
struct Running {
    ctx: TaskContext,
    stops: Arc<Stops>,
    returned: bool,
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.returned {
            let seen = (self.ctx.id(), self.ctx.stop_reason());
            self.stops.dropped.lock().unwrap().push(seen);
        }
    }
}

#[async_trait]
impl Handler for Sleeper {
    type Payload = serde_json::Value;

    async fn run(
        &self,
        ctx: TaskContext,
        _payload: serde_json::Value,
    ) -> Result<Outcome, HandlerError> {
        let mut running = Running {
            ctx,
            stops: Arc::clone(&self.stops),
            returned: false,
        };
        let work = async {
            match self.run_for {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        let out = if self.ignores_stop {
            work.await;
            Ok(Outcome::done())
        } else {
            tokio::select! {
                _ = work => Ok(Outcome::done()),
                _ = running.ctx.cancelled() => {
                    let seen = (running.ctx.id(), running.ctx.stop_reason());
                    self.stops.returned.lock().unwrap().push(seen);
                    Err(HandlerError::retryable("stopped", "asked to stop"))
                }
            }
        };
        running.returned = true;
        out
    }
}

/// Handlers of the one task type `work`: a [`Sleeper`] that works for `run_for`.
pub(crate) fn sleepers(
    run_for: Option<Duration>,
    ignores_stop: bool,
) -> (HandlerRegistry, Arc<Stops>) {
    let stops = Arc::new(Stops::default());
    let mut handlers = HandlerRegistry::new();
    handlers.register(
        TaskType::new("work").unwrap(),
        Sleeper {
            run_for,
            ignores_stop,
            stops: Arc::clone(&stops),
        },
    );
    (handlers, stops)
}
