//! Resource leases held by this agent (DESIGN §4 "Resource leases"): locks taken through the
//! library API ([`super::AgentControl::lock`]) and the shards of the groups it joined
//! (`--shard-groups`), kept by the keeper service on a connection of its own.
//!
//! ```text
//!   every heartbeat:  renew every held lease and membership (one statement)
//!                       renewed ──▶ safe_until = sent + min(ttl, lease_until − db now) − margin
//!                       lost    ──▶ dropped at once, the holder told (revoked)
//!                     then, per group: read shards + members, plan (plan_shards: even ±1,
//!                       sticky by agent name), take free shards planned for us, give back
//!                       ours planned for another live member
//!   every check:      a holding past safe_until ──▶ try one renewal, else drop it (unprovable)
//!   shutdown:         release every holding (fenced); memberships stay until they expire,
//!                     so a restarted agent of the same name gets its shards back
//! ```
//!
//! A member counts until its membership's `lease_until + grace`, and a shard is taken from
//! its owner only after the shard's `lease_until + grace`: a pause or a network blip shorter
//! than TTL + grace moves nothing. The local deadline (`safe_until`) is earlier than any
//! takeover, so this agent stops believing it owns a lease before anyone else can own it.
//!
//! When things fail: a renewal that errors or times out is counted and logged, and the
//! connection replaced; holdings keep their last local deadline. A rebalance that fails is
//! retried at the next heartbeat. Every change is logged, sent to lifecycle listeners and the
//! Watch stream, and published on the [`ShardOwnership`] channel.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use chrono::{DateTime, Utc};
use leasehold_shared::domain::shard::plan_shards;
use leasehold_shared::store::resources::member_name;
use leasehold_shared::store::{
    GroupName, LockAcquireParams, LockName, ResourceHolderParams, ResourceRenewParams,
    ShardAcquireParams, ShardGroupView, ShardJoinParams,
};
use leasehold_shared::{Store, StoreError};
use tokio::sync::watch;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use super::core::{Core, bump};
use super::events::LifecycleEvent;
use super::feed::{FeedEvent, HeldResource};
use super::heartbeat::Connect;

/// The shards this agent owns now, by group: shard number → fencing token. Published on
/// [`super::AgentControl::shards`] at every change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShardOwnership {
    pub groups: BTreeMap<String, BTreeMap<u32, i64>>,
}

impl ShardOwnership {
    /// The token of `shard` of `group`, when this agent owns it.
    pub fn token(&self, group: &str, shard: u32) -> Option<i64> {
        self.groups.get(group)?.get(&shard).copied()
    }

    /// (shard, token) of every shard of `group` this agent owns, by shard.
    pub fn shards(&self, group: &str) -> Vec<(u32, i64)> {
        self.groups
            .get(group)
            .map(|m| m.iter().map(|(s, t)| (*s, *t)).collect())
            .unwrap_or_default()
    }
}

/// Why a holding ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossReason {
    /// Given back: by its holder, at shutdown, or to rebalance a group.
    Released,
    /// A renewal found it taken or forced free (the fenced write).
    Revoked,
    /// Not renewed before its local deadline: this agent can no longer prove it holds it.
    Unprovable,
}

impl LossReason {
    pub fn as_str(self) -> &'static str {
        match self {
            LossReason::Released => "released",
            LossReason::Revoked => "revoked",
            LossReason::Unprovable => "unprovable",
        }
    }
}

/// ShedLock bounds of a lock taken through [`super::AgentControl::lock`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LockOptions {
    /// Released earlier than this after acquiring, the lock stays held until then (a run-once
    /// job that finished quickly does not run again on another agent at once).
    pub lock_at_least_for: Option<Duration>,
    /// Never held longer than this after acquiring, renewed or not: a holder that hangs or
    /// crashes frees it then.
    pub lock_at_most_for: Option<Duration>,
}

struct Held {
    group: Option<(GroupName, u32)>,
    token: i64,
    safe_until: Instant,
    /// Tells the lock's handle it was lost.
    lost: Option<watch::Sender<Option<LossReason>>>,
}

/// What this agent holds, shared by the keeper, the lock handles and the Watch hub.
pub(crate) struct Holdings {
    held: Mutex<BTreeMap<String, Held>>,
    /// Lost holdings to give back (fenced) once the database answers again.
    to_release: Mutex<Vec<(String, i64)>>,
    shards: watch::Sender<ShardOwnership>,
}

impl Default for Holdings {
    fn default() -> Self {
        Self {
            held: Mutex::new(BTreeMap::new()),
            to_release: Mutex::new(Vec::new()),
            shards: watch::channel(ShardOwnership::default()).0,
        }
    }
}

impl Holdings {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<ShardOwnership> {
        self.shards.subscribe()
    }

    /// Everything held now, for a Watch snapshot.
    pub(crate) fn snapshot(&self) -> Vec<HeldResource> {
        self.lock()
            .iter()
            .map(|(name, h)| resource(name, h))
            .collect()
    }

    fn keys(&self) -> Vec<(String, i64)> {
        self.lock()
            .iter()
            .map(|(n, h)| (n.clone(), h.token))
            .collect()
    }

    fn has_unprovable(&self, now: Instant) -> bool {
        self.lock().values().any(|h| h.safe_until <= now)
    }

    fn publish(&self) {
        let mut ownership = ShardOwnership::default();
        for h in self.lock().values() {
            if let Some((group, shard)) = &h.group {
                ownership
                    .groups
                    .entry(group.as_str().to_string())
                    .or_default()
                    .insert(*shard, h.token);
            }
        }
        self.shards.send_if_modified(|current| {
            if *current == ownership {
                false
            } else {
                *current = ownership;
                true
            }
        });
    }
}

fn resource(name: &str, h: &Held) -> HeldResource {
    HeldResource {
        name: name.to_string(),
        group: h.group.as_ref().map(|(g, s)| (g.as_str().to_string(), *s)),
        token: h.token,
    }
}

/// The wall-clock time of a monotonic instant (for the Watch stream's `at_ms`).
fn wall(at: Instant) -> SystemTime {
    let now = Instant::now();
    if at >= now {
        SystemTime::now() + (at - now)
    } else {
        SystemTime::now() - (now - at)
    }
}

/// What is left of a lease at the database's `now`: `lease_until − now` (never negative).
pub(crate) fn lease_left(lease_until: DateTime<Utc>, now: DateTime<Utc>) -> Duration {
    (lease_until - now).to_std().unwrap_or(Duration::ZERO)
}

impl Core {
    /// The local deadline of a lease written by a call sent at `sent`: the TTL after it, or
    /// what the database said is `left` of the lease when that is less (a lock's
    /// `lock_at_most_for` caps its `lease_until`), minus the safety margin. It never passes
    /// the database's `lease_until` − margin: this agent stops believing it holds a lease
    /// before anyone else can take it.
    pub(crate) fn safe_until(&self, sent: Instant, left: Option<Duration>) -> Instant {
        let ttl = self.settings.lease_ttl;
        let lease = left.map_or(ttl, |left| left.min(ttl));
        sent + lease.saturating_sub(self.settings.safety_margin())
    }

    /// Records a new holding (written by a call sent at `sent`, with `left` of it by the
    /// database): the book, listeners, the Watch stream, the log.
    fn hold(
        &self,
        name: String,
        group: Option<(GroupName, u32)>,
        token: i64,
        sent: Instant,
        left: Option<Duration>,
        lost: Option<watch::Sender<Option<LossReason>>>,
    ) {
        let held = Held {
            group,
            token,
            safe_until: self.safe_until(sent, left),
            lost,
        };
        let res = resource(&name, &held);
        self.holdings.lock().insert(name.clone(), held);
        tracing::info!(lease = name, token, "resource lease acquired");
        self.feed.push(FeedEvent::Resource {
            resource: res.clone(),
            held: true,
            reason: "acquired",
            at: SystemTime::now(),
        });
        self.listeners.emit(LifecycleEvent::ResourceAcquired {
            name,
            shard: res.group,
            token,
        });
        // Published last, as a loss is (see `drop_holding`).
        self.holdings.publish();
    }

    /// Ends a holding (if it is still the one with `token`); `at` is the last instant it was
    /// provably held.
    fn drop_holding(&self, name: &str, token: i64, reason: LossReason, at: Instant) -> bool {
        let removed = {
            let mut held = self.holdings.lock();
            match held.get(name) {
                Some(h) if h.token == token => held.remove(name),
                _ => None,
            }
        };
        let Some(h) = removed else { return false };
        let res = resource(name, &h);
        match reason {
            LossReason::Released => tracing::info!(lease = name, token, "resource lease released"),
            _ => tracing::warn!(
                lease = name,
                token,
                reason = reason.as_str(),
                "resource lease lost: its holder was told to stop"
            ),
        }
        if reason != LossReason::Released {
            // Counted in the metrics only: the run summary's lease_lost is about tasks.
            self.metrics.lease_lost(match reason {
                LossReason::Revoked => "resource_revoked",
                _ => "resource_unprovable",
            });
        }
        self.feed.push(FeedEvent::Resource {
            resource: res.clone(),
            held: false,
            reason: reason.as_str(),
            at: wall(at.min(Instant::now())),
        });
        self.listeners.emit(LifecycleEvent::ResourceLost {
            name: name.to_string(),
            shard: res.group,
            token,
            reason: reason.as_str(),
        });
        // The holder and the shard watchers are told last, so by the time `HeldLock::lost`
        // resolves or `shards()` changes, the loss is already logged, counted, streamed and
        // seen by the listeners: one consistent picture (listeners are quick, so "at once"
        // still holds).
        self.holdings.publish();
        if let Some(lost) = &h.lost {
            lost.send_replace(Some(reason));
        }
        true
    }
}

/// A lock this agent holds, renewed by its heartbeat until released (or dropped: then it is
/// released in the background). Check [`HeldLock::is_held`] (or await [`HeldLock::lost`])
/// before acting on it, and pass [`HeldLock::token`] to whatever you write, so a store that
/// compares tokens refuses a stale holder.
pub struct HeldLock {
    core: Arc<Core>,
    name: String,
    token: i64,
    lost: watch::Receiver<Option<LossReason>>,
    done: bool,
}

impl std::fmt::Debug for HeldLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldLock")
            .field("name", &self.name)
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

impl HeldLock {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The fencing token of this holding: higher than every earlier holding's.
    pub fn token(&self) -> i64 {
        self.token
    }

    /// False once the lock was lost (revoked, or not provable in time).
    pub fn is_held(&self) -> bool {
        self.lost.borrow().is_none()
    }

    /// Waits until the lock is lost and says why. By then the loss has been logged, counted,
    /// streamed to watchers and emitted to the lifecycle listeners.
    pub async fn lost(&mut self) -> LossReason {
        loop {
            if let Some(reason) = *self.lost.borrow() {
                return reason;
            }
            if self.lost.changed().await.is_err() {
                return LossReason::Released;
            }
        }
    }

    /// Gives the lock back (fenced; with `lock_at_least_for` it stays held until then).
    /// False when it had already been lost.
    pub async fn release(mut self) -> crate::error::Result<bool> {
        self.done = true;
        Ok(release(&self.core, &self.name, self.token).await?)
    }
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let core = Arc::clone(&self.core);
        let (name, token) = (self.name.clone(), self.token);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Err(error) = release(&core, &name, token).await {
                    tracing::warn!(lock = name, %error, "could not release a dropped lock; it expires by itself");
                }
            });
        } else {
            core.holdings
                .to_release
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((name, token));
        }
    }
}

async fn release(core: &Arc<Core>, name: &str, token: i64) -> Result<bool, StoreError> {
    let now = Instant::now();
    if !core.drop_holding(name, token, LossReason::Released, now) {
        return Ok(false);
    }
    let given = core.give_back(core.store.as_ref(), name, token).await;
    if given.is_err() {
        core.retry_give_back(name, token);
    }
    given
}

impl Core {
    /// Gives `name` (of `token`) back again at the next renewal: a give-back that failed may
    /// have landed with its reply lost, and a release is idempotent, so its retry is told it
    /// landed rather than counted as fenced.
    fn retry_give_back(&self, name: &str, token: i64) {
        self.holdings
            .to_release
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((name.to_string(), token));
    }

    /// This agent's holder write giving `name` (of `token`) back on `conn`; a refused one is
    /// counted as fenced. True when it landed.
    async fn give_back(
        &self,
        conn: &dyn Store,
        name: &str,
        token: i64,
    ) -> Result<bool, StoreError> {
        let out = conn
            .resource_release(ResourceHolderParams {
                name: name.to_string(),
                holder: self.id.clone(),
                token,
                ttl: self.settings.lease_ttl,
                actor: None,
            })
            .await?;
        if out.is_none() {
            self.resource_fenced("release", name, token);
        }
        Ok(out.is_some())
    }
}

impl Core {
    /// A holder write on a resource lease was refused: counted and logged, never an error.
    pub(crate) fn resource_fenced(&self, op: &'static str, name: &str, token: i64) {
        bump(&self.stats.fenced, 1);
        self.metrics.fenced(match op {
            "renew" => "resource_renew",
            _ => "resource_release",
        });
        tracing::warn!(
            lease = name,
            token,
            op,
            "resource write fenced: the lease had moved on"
        );
    }
}

/// The refusal of a second `lock` of a name this agent holds: the name as written, never the
/// newtype's Debug form.
fn already_held(name: &LockName) -> String {
    format!("this agent already holds lock {:?}", name.as_str())
}

/// Takes lock `name` for this agent (renewed by its heartbeat); `None` while someone else
/// holds it.
pub(crate) async fn lock(
    core: &Arc<Core>,
    name: &str,
    options: LockOptions,
) -> crate::error::Result<Option<HeldLock>> {
    use crate::error::AgentError;
    // A bad name is a bad argument (its text is the validation's own).
    let name = LockName::new(name).map_err(|e| AgentError::Invalid(e.to_string()))?;
    if core.holdings.lock().contains_key(name.as_str()) {
        return Err(AgentError::Invalid(already_held(&name)));
    }
    let sent = Instant::now();
    let out = core
        .store
        .lock_acquire(LockAcquireParams {
            name: name.clone(),
            holder: core.id.clone(),
            ttl: core.settings.lease_ttl,
            grace: core.settings.grace,
            lock_at_least_for: options.lock_at_least_for,
            lock_at_most_for: options.lock_at_most_for,
            actor: None,
        })
        .await?;
    if !out.acquired {
        return Ok(None);
    }
    let (tx, rx) = watch::channel(None);
    let token = out.lock.token;
    // The database's lease_until (capped by lock_at_most_for) bounds the local deadline.
    let left = (out.lock.lease_until).map_or(Duration::ZERO, |until| lease_left(until, out.now));
    core.hold(
        name.as_str().to_string(),
        None,
        token,
        sent,
        Some(left),
        Some(tx),
    );
    Ok(Some(HeldLock {
        core: Arc::clone(core),
        name: name.as_str().to_string(),
        token,
        lost: rx,
        done: false,
    }))
}

/// Joins the configured groups (at start: an unknown group fails the start).
pub(crate) async fn join_groups(core: &Core) -> crate::error::Result<()> {
    for group in &core.settings.shard_groups {
        core.store
            .shard_join(ShardJoinParams {
                group: group.clone(),
                member: core.id.clone(),
                ttl: core.settings.lease_ttl,
            })
            .await
            .map_err(|e| {
                crate::error::AgentError::store_while(format!("joining shard group {group}"), e)
            })?;
        tracing::info!(group = group.as_str(), "joined shard group");
    }
    Ok(())
}

/// The keeper service.
pub(crate) struct Keeper {
    pub(crate) core: Arc<Core>,
    pub(crate) connect: Connect,
    pub(crate) conn: Option<Arc<dyn Store>>,
}

impl Keeper {
    pub(crate) async fn run(mut self, stop: CancellationToken) {
        let settings = &self.core.settings;
        let mut renew = tokio::time::interval(settings.heartbeat);
        renew.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let check_every =
            (settings.heartbeat / 4).clamp(Duration::from_millis(20), Duration::from_millis(250));
        let mut check = tokio::time::interval(check_every);
        check.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = renew.tick() => {
                    let ok = self.renew().await;
                    self.check();
                    if ok && !self.core.is_draining() {
                        self.rebalance().await;
                    }
                }
                _ = check.tick() => {
                    if self.core.holdings.has_unprovable(Instant::now()) {
                        self.renew().await;
                    }
                    self.check();
                }
            }
        }
        self.release_all().await;
    }

    async fn connection(&mut self) -> anyhow::Result<Arc<dyn Store>> {
        if let Some(conn) = &self.conn {
            return Ok(Arc::clone(conn));
        }
        let conn = (self.connect)().await?;
        self.conn = Some(Arc::clone(&conn));
        Ok(conn)
    }

    /// Renews every holding and membership; false when the database did not answer.
    async fn renew(&mut self) -> bool {
        let core = Arc::clone(&self.core);
        let leases = core.holdings.keys();
        let groups = core.settings.shard_groups.clone();
        let pending: Vec<(String, i64)> = std::mem::take(
            &mut *core
                .holdings
                .to_release
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        if leases.is_empty() && groups.is_empty() && pending.is_empty() {
            return true;
        }
        let timeout = core.settings.renew_timeout();
        let sent = Instant::now();
        let params = ResourceRenewParams {
            owner: core.id.clone(),
            leases,
            groups,
            ttl: core.settings.lease_ttl,
        };
        let attempt = tokio::time::timeout(timeout, async {
            let conn = self.connection().await?;
            let out = conn.resource_renew_many(params).await?;
            for (name, token) in &pending {
                core.give_back(conn.as_ref(), name, *token).await?;
            }
            anyhow::Ok(out)
        })
        .await;
        let out = match attempt {
            Ok(Ok(out)) => out,
            failed => {
                self.conn = None;
                let reason = match failed {
                    Ok(Err(e)) => format!("{e:#}"),
                    _ => format!("timed out after {timeout:?}"),
                };
                bump(&core.stats.renewal_failures, 1);
                core.metrics.renewal(false);
                tracing::warn!(error = %reason, "resource lease renewal failed");
                core.holdings
                    .to_release
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .extend(pending);
                return false;
            }
        };
        core.metrics.renewal(true);
        {
            let mut held = core.holdings.lock();
            for (name, token, until) in &out.renewed {
                if let Some(h) = held.get_mut(name)
                    && h.token == *token
                {
                    let left = out
                        .now
                        .map_or(Duration::ZERO, |now| lease_left(*until, now));
                    h.safe_until = core.safe_until(sent, Some(left));
                }
            }
        }
        for (name, token) in out.lost {
            let last = core
                .holdings
                .lock()
                .get(&name)
                .map_or(sent, |h| h.safe_until.min(sent));
            if core.drop_holding(&name, token, LossReason::Revoked, last) {
                core.resource_fenced("renew", &name, token);
            }
        }
        for group in out.left_groups {
            // The membership row went (pruned, or the group re-created): join again.
            let params = ShardJoinParams {
                group: group.clone(),
                member: core.id.clone(),
                ttl: core.settings.lease_ttl,
            };
            let joined = match self.connection().await {
                Ok(conn) => conn.shard_join(params).await.map_err(anyhow::Error::new),
                Err(e) => Err(e),
            };
            if let Err(error) = joined {
                tracing::warn!(group = group.as_str(), error = %format!("{error:#}"), "could not re-join a shard group");
            }
        }
        true
    }

    /// Drops holdings past their local deadline.
    fn check(&self) {
        let now = Instant::now();
        let due: Vec<(String, i64, Instant)> = self
            .core
            .holdings
            .lock()
            .iter()
            .filter(|(_, h)| h.safe_until <= now)
            .map(|(n, h)| (n.clone(), h.token, h.safe_until))
            .collect();
        for (name, token, safe_until) in due {
            if self
                .core
                .drop_holding(&name, token, LossReason::Unprovable, safe_until)
            {
                self.core
                    .holdings
                    .to_release
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((name, token));
            }
        }
    }

    async fn rebalance(&mut self) {
        for group in self.core.settings.shard_groups.clone() {
            if let Err(error) = self.rebalance_group(&group).await {
                // A store's refusal keeps the connection; a lost or stuck one is abandoned.
                let connection = error
                    .downcast_ref::<StoreError>()
                    .is_none_or(|s| s.is_connection());
                if connection {
                    self.conn = None;
                }
                tracing::warn!(group = group.as_str(), error = %format!("{error:#}"), "shard rebalance failed; retrying at the next heartbeat");
            }
        }
    }

    /// Gives back and takes shards of `group` by the plan. Each write is bounded by the renewal
    /// timeout and the local deadlines are checked between writes, so a slow database delays
    /// dropping an unprovable holding no more than it delays a renewal.
    async fn rebalance_group(&mut self, group: &GroupName) -> anyhow::Result<()> {
        let core = Arc::clone(&self.core);
        let conn = self.connection().await?;
        let limit = core.settings.lease_ttl / 2;
        let write_limit = core.settings.renew_timeout();
        let Some(view) = tokio::time::timeout(
            limit,
            conn.shard_group_get(group.clone(), core.settings.grace),
        )
        .await??
        else {
            return Err(StoreError::ShardGroupNotFound(group.to_string()).into());
        };
        let plan = Plan::of(&view, core.id.as_str(), core.settings.grace);
        for shard in plan.give_back {
            let name = group.shard_lease(shard);
            let token = core.holdings.lock().get(&name).map(|h| h.token);
            if let Some(token) = token {
                core.drop_holding(&name, token, LossReason::Released, Instant::now());
                let given =
                    tokio::time::timeout(write_limit, core.give_back(conn.as_ref(), &name, token))
                        .await
                        .with_context(|| format!("giving back {name}: timed out"))
                        .and_then(|given| given.map_err(anyhow::Error::new));
                if given.is_err() {
                    core.retry_give_back(&name, token);
                }
                given?;
            }
            self.check();
        }
        for shard in plan.take {
            let name = group.shard_lease(shard);
            if core.holdings.lock().contains_key(&name) {
                continue;
            }
            let sent = Instant::now();
            let taken = tokio::time::timeout(
                write_limit,
                conn.shard_acquire(ShardAcquireParams {
                    group: group.clone(),
                    shard,
                    owner: core.id.clone(),
                    ttl: core.settings.lease_ttl,
                    grace: core.settings.grace,
                }),
            )
            .await
            .with_context(|| format!("taking {name}: timed out"))??;
            if let Some(token) = taken {
                // A shard's lease is the TTL from the database's now (no at-most bound).
                core.hold(name, Some((group.clone(), shard)), token, sent, None, None);
            }
            self.check();
        }
        let owned = core.holdings.subscribe().borrow().shards(group.as_str());
        if plan.changed {
            tracing::info!(
                group = group.as_str(),
                shards = ?owned.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
                tokens = ?owned.iter().map(|(_, t)| *t).collect::<Vec<_>>(),
                "shard ownership"
            );
        }
        Ok(())
    }

    async fn release_all(&mut self) {
        let held = self.core.holdings.keys();
        if held.is_empty() {
            return;
        }
        let core = Arc::clone(&self.core);
        let done = tokio::time::timeout(Duration::from_secs(3), async {
            let conn = self.connection().await?;
            for (name, token) in held {
                core.drop_holding(&name, token, LossReason::Released, Instant::now());
                core.give_back(conn.as_ref(), &name, token).await?;
            }
            anyhow::Ok(())
        })
        .await;
        match done {
            Ok(Ok(())) => tracing::info!("released the resource leases"),
            _ => tracing::warn!(
                "could not release every resource lease; they are taken over after TTL + grace"
            ),
        }
    }
}

/// What one member does in one rebalance of a group.
#[derive(Debug, Default, PartialEq, Eq)]
struct Plan {
    /// Shards planned for this member that it does not hold.
    take: Vec<u32>,
    /// Shards it holds that are planned for another live member.
    give_back: Vec<u32>,
    changed: bool,
}

impl Plan {
    fn of(view: &ShardGroupView, me: &str, grace: Duration) -> Plan {
        let now = view.now;
        let my_name = member_name(me);
        let mut live: Vec<&str> = view
            .members
            .iter()
            .filter(|m| m.counts(now, grace))
            .map(|m| member_name(&m.member))
            .collect();
        live.push(my_name);
        let owners: Vec<Option<&str>> = view
            .shards
            .iter()
            .map(|s| s.live_owner(now, grace).map(member_name))
            .collect();
        let Some(target) = plan_shards(&live, &owners) else {
            return Plan::default();
        };
        let mut plan = Plan::default();
        for (record, target) in view.shards.iter().zip(target) {
            let Some((_, shard)) = record.shard.as_ref() else {
                continue;
            };
            let owner = record.live_owner(now, grace);
            let mine = owner == Some(me);
            // A shard another member still holds is left to it: it gives the shard back at its
            // next rebalance (or its lease runs out), and then it is free to take.
            if target == my_name && owner.is_none() {
                plan.take.push(*shard);
            } else if target != my_name && mine {
                plan.give_back.push(*shard);
            }
        }
        plan.changed = !plan.take.is_empty() || !plan.give_back.is_empty();
        plan
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use chrono::{DateTime, TimeDelta, Utc};
    use leasehold_shared::store::{ResourceRecord, ShardGroupRecord, ShardMemberRecord};

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }

    fn view(owners: &[Option<&str>], members: &[(&str, i64)]) -> ShardGroupView {
        let n = now();
        ShardGroupView {
            group: ShardGroupRecord {
                name: "g".into(),
                shard_count: u32::try_from(owners.len()).unwrap(),
                created_at: n,
                members: 0,
                owned: 0,
                moves_last_hour: 0,
            },
            shards: owners
                .iter()
                .enumerate()
                .map(|(i, o)| ResourceRecord {
                    name: format!("g#{i}"),
                    shard: Some(("g".into(), u32::try_from(i).unwrap())),
                    owner: o.map(str::to_string),
                    token: 1,
                    lease_until: o.map(|_| n + TimeDelta::seconds(10)),
                    heartbeat_at: o.map(|_| n),
                    acquired_at: o.map(|_| n),
                    lock_at_least_until: None,
                    lock_at_most_until: None,
                    released_at: None,
                    moves_last_hour: 0,
                })
                .collect(),
            members: members
                .iter()
                .map(|(m, until)| ShardMemberRecord {
                    member: (*m).into(),
                    joined_at: n,
                    heartbeat_at: n + TimeDelta::seconds(until - 10),
                    lease_until: n + TimeDelta::seconds(*until),
                })
                .collect(),
            now: n,
        }
    }

    const GRACE: Duration = Duration::from_secs(5);

    #[test]
    fn a_lock_held_twice_is_refused_naming_the_lock_as_written() {
        let name = LockName::new("deploy/prod").unwrap();
        assert_eq!(
            already_held(&name),
            "this agent already holds lock \"deploy/prod\""
        );
    }

    #[test]
    fn a_new_member_takes_half_and_the_owner_gives_half_back() {
        let v = view(&[Some("a#1"); 4], &[("a#1", 10), ("b#2", 10)]);
        let b = Plan::of(&v, "b#2", GRACE);
        assert!(b.take.is_empty(), "held by a live owner: not takeable yet");
        let a = Plan::of(&v, "a#1", GRACE);
        assert_eq!(a.give_back.len(), 2);
    }

    #[test]
    fn a_member_within_grace_keeps_its_shards_and_a_gone_one_loses_them() {
        // b's membership ended 3 s ago: within the 5 s grace, it still counts.
        let v = view(&[Some("a#1"), Some("b#2")], &[("a#1", 10), ("b#2", -3)]);
        assert_eq!(Plan::of(&v, "a#1", GRACE), Plan::default());
        let v = view(&[Some("a#1"), None], &[("a#1", 10), ("b#2", -6)]);
        let a = Plan::of(&v, "a#1", GRACE);
        assert_eq!(a.take, vec![1]);
    }

    #[test]
    fn a_restarted_agent_gets_its_shards_back_by_name() {
        // a's old process (a#1) released its shard at shutdown; a#9 is its new start.
        let v = view(
            &[None, Some("b#2")],
            &[("a#1", 8), ("a#9", 10), ("b#2", 10)],
        );
        assert_eq!(Plan::of(&v, "a#9", GRACE).take, vec![0]);
        assert!(Plan::of(&v, "b#2", GRACE).take.is_empty());
    }
}
