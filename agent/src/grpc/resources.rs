//! The resource lease RPCs (ListLocks, AcquireLock, RenewLock, ReleaseLock, CreateShardGroup,
//! ListShardGroups, ListShards): request validation, the store call (which audits the
//! operator's acquire, release and group creation, and refuses viewers), and the answer. Bad
//! input — a malformed name or holder, a TTL or bound out of range — is INVALID_ARGUMENT
//! naming the field, and nothing changes.

use std::time::Duration;

use chrono::{DateTime, Utc};
use leasehold_proto::v1 as pb;
use leasehold_proto::wire;
use leasehold_shared::AgentId;
use leasehold_shared::store::{
    GroupName, LockAcquireParams, LockForceReleaseParams, LockName, ResourceHolderParams,
    ResourceRecord, ShardGroupCreateParams, ShardGroupRecord, ShardMemberRecord,
};
use tonic::{Request, Response, Status};

use super::convert::{invalid, ms, opt_ms};
use super::service::{Need, Service};
use super::status::from_store;

/// A lock's TTL when the request leaves it 0.
pub const DEFAULT_LOCK_TTL: Duration = Duration::from_secs(30);

/// A lock row on the wire, its state read at `now`.
#[allow(deprecated)] // `state` is filled for consoles older than `lease_state`
pub fn lock_to_wire(r: &ResourceRecord, now: DateTime<Utc>, grace: Duration) -> pb::ResourceLease {
    let (lease_state, state) = wire::write(r.state(now, grace));
    pb::ResourceLease {
        name: r.name.clone(),
        owner: r.owner.clone().unwrap_or_default(),
        token: r.token,
        lease_until_ms: opt_ms(r.lease_until),
        heartbeat_at_ms: opt_ms(r.heartbeat_at),
        acquired_at_ms: opt_ms(r.acquired_at),
        lock_at_least_until_ms: opt_ms(r.lock_at_least_until),
        lock_at_most_until_ms: opt_ms(r.lock_at_most_until),
        state,
        lease_state,
        moves_last_hour: r.moves_last_hour,
    }
}

#[allow(deprecated)] // `state` is filled for consoles older than `lease_state`
fn shard_to_wire(r: &ResourceRecord, now: DateTime<Utc>, grace: Duration) -> pb::Shard {
    let (lease_state, state) = wire::write(r.state(now, grace));
    pb::Shard {
        shard: r.shard.as_ref().map_or(0, |(_, s)| *s),
        owner: r.owner.clone().unwrap_or_default(),
        token: r.token,
        lease_until_ms: opt_ms(r.lease_until),
        heartbeat_at_ms: opt_ms(r.heartbeat_at),
        acquired_at_ms: opt_ms(r.acquired_at),
        state,
        lease_state,
        moves_last_hour: r.moves_last_hour,
    }
}

fn group_to_wire(g: &ShardGroupRecord) -> pb::ShardGroup {
    pb::ShardGroup {
        name: g.name.clone(),
        shard_count: g.shard_count,
        members: g.members,
        owned: g.owned,
        moves_last_hour: g.moves_last_hour,
        created_at_ms: ms(g.created_at),
    }
}

#[allow(deprecated)] // `state` is filled for consoles older than `member_state`
fn member_to_wire(
    m: &ShardMemberRecord,
    shards: &[ResourceRecord],
    now: DateTime<Utc>,
    grace: Duration,
) -> pb::ShardMember {
    let owned = shards
        .iter()
        .filter(|s| s.live_owner(now, grace) == Some(m.member.as_str()))
        .count();
    let (member_state, state) = wire::write(m.state(now, grace));
    pb::ShardMember {
        agent: m.member.clone(),
        joined_at_ms: ms(m.joined_at),
        heartbeat_at_ms: ms(m.heartbeat_at),
        lease_until_ms: ms(m.lease_until),
        state,
        member_state,
        shards: u32::try_from(owned).unwrap_or(u32::MAX),
    }
}

fn lock_name(name: &str) -> Result<LockName, Status> {
    LockName::new(name).map_err(invalid)
}

fn group_name(name: &str) -> Result<GroupName, Status> {
    GroupName::new(name).map_err(invalid)
}

fn holder(holder: &str) -> Result<AgentId, Status> {
    AgentId::new(holder).map_err(|_| {
        Status::invalid_argument(
            "holder: give a printable id of 1-128 bytes (who holds the lock, e.g. a CI job id)",
        )
    })
}

fn millis(
    field: &'static str,
    ms: u64,
    default: Option<Duration>,
) -> Result<Option<Duration>, Status> {
    if ms == 0 {
        return Ok(default);
    }
    let d = Duration::from_millis(ms);
    leasehold_shared::store::resources::check_ttl(field, d).map_err(invalid)?;
    Ok(Some(d))
}

/// A request naming the lock or group it acts on.
trait Named {
    fn name(&self) -> &str;
}

macro_rules! named {
    ($($request:ty),*) => {
        $(impl Named for $request {
            fn name(&self) -> &str {
                &self.name
            }
        })*
    };
}

named!(
    pb::AcquireLockRequest,
    pb::RenewLockRequest,
    pb::ReleaseLockRequest,
    pb::CreateShardGroupRequest
);

impl Service {
    /// The operator calling `action` on `<kind>:<name>` (a viewer is refused and audited).
    async fn operator<T: Named>(
        &self,
        request: &Request<T>,
        action: &'static str,
        kind: &str,
    ) -> Result<leasehold_shared::Actor, Status> {
        let target = format!("{kind}:{}", request.get_ref().name());
        self.caller(request, Need::Act { action, target }).await
    }

    fn grace(&self) -> Duration {
        self.core.settings.grace
    }

    pub(super) async fn list_locks_rpc(
        &self,
        request: Request<pb::ListLocksRequest>,
    ) -> Result<Response<pb::ListLocksResponse>, Status> {
        self.caller(&request, Need::View).await?;
        let listing = self
            .core
            .store
            .lock_list()
            .await
            .map_err(|e| from_store("list_locks", e))?;
        let grace = self.grace();
        Ok(Response::new(pb::ListLocksResponse {
            locks: listing
                .locks
                .iter()
                .map(|l| lock_to_wire(l, listing.now, grace))
                .collect(),
            now_ms: ms(listing.now),
        }))
    }

    pub(super) async fn acquire_lock_rpc(
        &self,
        request: Request<pb::AcquireLockRequest>,
    ) -> Result<Response<pb::AcquireLockResponse>, Status> {
        let actor = self.operator(&request, "lock_acquire", "lock").await?;
        let r = request.into_inner();
        let params = LockAcquireParams {
            name: lock_name(&r.name)?,
            holder: holder(&r.holder)?,
            ttl: millis("ttl_ms", r.ttl_ms, Some(DEFAULT_LOCK_TTL))?.unwrap_or(DEFAULT_LOCK_TTL),
            grace: self.grace(),
            lock_at_least_for: millis("lock_at_least_for_ms", r.lock_at_least_for_ms, None)?,
            lock_at_most_for: millis("lock_at_most_for_ms", r.lock_at_most_for_ms, None)?,
            actor: Some(actor),
        };
        params.validate().map_err(invalid)?;
        let out = self
            .core
            .store
            .lock_acquire(params)
            .await
            .map_err(|e| from_store("acquire_lock", e))?;
        Ok(Response::new(pb::AcquireLockResponse {
            acquired: out.acquired,
            lock: Some(lock_to_wire(&out.lock, out.now, self.grace())),
        }))
    }

    pub(super) async fn renew_lock_rpc(
        &self,
        request: Request<pb::RenewLockRequest>,
    ) -> Result<Response<pb::RenewLockResponse>, Status> {
        let actor = self.operator(&request, "lock_renew", "lock").await?;
        let r = request.into_inner();
        let name = lock_name(&r.name)?;
        let params = ResourceHolderParams {
            name: name.as_str().to_string(),
            holder: holder(&r.holder)?,
            token: r.token,
            ttl: millis("ttl_ms", r.ttl_ms, Some(DEFAULT_LOCK_TTL))?.unwrap_or(DEFAULT_LOCK_TTL),
            actor: Some(actor),
        };
        let store = &self.core.store;
        let renewed = store
            .resource_renew(params)
            .await
            .map_err(|e| from_store("renew_lock", e))?;
        let now = store
            .db_now()
            .await
            .map_err(|e| from_store("renew_lock", e))?;
        let lock = match renewed {
            Some(lock) => Some(lock),
            None => self.lock_row(name.as_str()).await?,
        };
        Ok(Response::new(pb::RenewLockResponse {
            renewed: renewed_flag(&lock, &r.holder, r.token, now, self.grace()),
            lock: lock.map(|l| lock_to_wire(&l, now, self.grace())),
        }))
    }

    async fn lock_row(&self, name: &str) -> Result<Option<ResourceRecord>, Status> {
        let listing = self
            .core
            .store
            .lock_list()
            .await
            .map_err(|e| from_store("list_locks", e))?;
        Ok(listing.locks.into_iter().find(|l| l.name == name))
    }

    pub(super) async fn release_lock_rpc(
        &self,
        request: Request<pb::ReleaseLockRequest>,
    ) -> Result<Response<pb::ReleaseLockResponse>, Status> {
        let actor = self.operator(&request, "lock_release", "lock").await?;
        let r = request.into_inner();
        let name = lock_name(&r.name)?;
        let store = &self.core.store;
        let grace = self.grace();
        if r.holder.is_empty() && r.token == 0 {
            let before = self.lock_row(name.as_str()).await?;
            let after = store
                .lock_force_release(LockForceReleaseParams { name, actor })
                .await
                .map_err(|e| from_store("release_lock", e))?;
            let now = store
                .db_now()
                .await
                .map_err(|e| from_store("release_lock", e))?;
            let released = before.is_some_and(|b| b.state(now, grace).is_held());
            return Ok(Response::new(pb::ReleaseLockResponse {
                released,
                lock: Some(lock_to_wire(&after, now, grace)),
            }));
        }
        let after = store
            .resource_release(ResourceHolderParams {
                name: name.as_str().to_string(),
                holder: holder(&r.holder)?,
                token: r.token,
                ttl: DEFAULT_LOCK_TTL,
                actor: Some(actor),
            })
            .await
            .map_err(|e| from_store("release_lock", e))?;
        let now = store
            .db_now()
            .await
            .map_err(|e| from_store("release_lock", e))?;
        let released = after.is_some();
        let lock = match after {
            Some(lock) => Some(lock),
            None => self.lock_row(name.as_str()).await?,
        };
        Ok(Response::new(pb::ReleaseLockResponse {
            released,
            lock: lock.map(|l| lock_to_wire(&l, now, grace)),
        }))
    }

    pub(super) async fn create_shard_group_rpc(
        &self,
        request: Request<pb::CreateShardGroupRequest>,
    ) -> Result<Response<pb::CreateShardGroupResponse>, Status> {
        let actor = self
            .operator(&request, "shard_group_create", "shard_group")
            .await?;
        let r = request.into_inner();
        let name = group_name(&r.name)?;
        leasehold_shared::store::resources::check_shard_count(r.count).map_err(invalid)?;
        let out = self
            .core
            .store
            .shard_group_create(ShardGroupCreateParams {
                name,
                count: r.count,
                actor,
            })
            .await
            .map_err(|e| from_store("create_shard_group", e))?;
        Ok(Response::new(pb::CreateShardGroupResponse {
            group: Some(group_to_wire(&out.group)),
            created: out.created,
        }))
    }

    pub(super) async fn list_shard_groups_rpc(
        &self,
        request: Request<pb::ListShardGroupsRequest>,
    ) -> Result<Response<pb::ListShardGroupsResponse>, Status> {
        self.caller(&request, Need::View).await?;
        let (groups, now) = self
            .core
            .store
            .shard_group_list(self.grace())
            .await
            .map_err(|e| from_store("list_shard_groups", e))?;
        Ok(Response::new(pb::ListShardGroupsResponse {
            groups: groups.iter().map(group_to_wire).collect(),
            now_ms: ms(now),
        }))
    }

    pub(super) async fn list_shards_rpc(
        &self,
        request: Request<pb::ListShardsRequest>,
    ) -> Result<Response<pb::ListShardsResponse>, Status> {
        self.caller(&request, Need::View).await?;
        let name = group_name(&request.get_ref().group)?;
        let grace = self.grace();
        let view = self
            .core
            .store
            .shard_group_get(name.clone(), grace)
            .await
            .map_err(|e| from_store("list_shards", e))?
            .ok_or_else(|| {
                Status::not_found(format!(
                    "shard group {:?} does not exist (create it with `leasehold shards create`)",
                    name.as_str()
                ))
            })?;
        let now = view.now;
        Ok(Response::new(pb::ListShardsResponse {
            group: Some(group_to_wire(&view.group)),
            shards: view
                .shards
                .iter()
                .map(|s| shard_to_wire(s, now, grace))
                .collect(),
            members: view
                .members
                .iter()
                .map(|m| member_to_wire(m, &view.shards, now, grace))
                .collect(),
            now_ms: ms(now),
        }))
    }
}

/// Did a renew land? The row it returned (or the current one) says whether `holder` holds it
/// with `token` now.
fn renewed_flag(
    lock: &Option<ResourceRecord>,
    holder: &str,
    token: i64,
    now: DateTime<Utc>,
    grace: Duration,
) -> bool {
    lock.as_ref().is_some_and(|l| {
        l.owner.as_deref() == Some(holder)
            && l.token == token
            && l.released_at.is_none()
            && l.state(now, grace).is_held()
    })
}
