//! The resource lease operations, written once for both stores over
//! [`ResourceStatements`]: each decides with [`super::plan_take`] and friends on the rows
//! its transaction locked, writes what was decided and its audit row, and commits. The
//! stores only run the statements; rows are decoded here ([`record`]).
//!
//! When things fail: an error drops the transaction, so it changed nothing; a forced release
//! of a lock that does not exist commits its `failed` audit row alone, a refused shard group
//! creation records it on its own.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{
    GroupName, Holding, LockAcquireParams, LockAcquired, LockForceReleaseParams, LockListing,
    ResourceHolderParams, ResourceRecord, ShardAcquireParams, ShardGroupCreateParams,
    ShardGroupCreated, ShardGroupRecord, ShardGroupView, ShardMemberRecord, Take, acquire_entry,
    check_shard_count, check_ttl, clamp_count, group_entry, group_failed_entry, group_record,
    group_target, holding, lock_target, plan_take, release_entry, release_failed_entry, shard_key,
};
use crate::store::audit::backend::{Backend, Columns, authorize, failed};
use crate::store::{Result, StoreError};

/// A new holding to write: the row exists (`insert` false) or not yet.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Taking<'a> {
    pub insert: bool,
    pub name: &'a str,
    pub holder: &'a str,
    pub token: i64,
    pub now: DateTime<Utc>,
    pub holding: Holding,
}

/// A holder's fenced write on lease `name`: holder and token must still match.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fenced<'a> {
    pub name: &'a str,
    pub holder: &'a str,
    pub token: i64,
}

impl<'a> Fenced<'a> {
    /// (name, holder, token), as the fence checks bind them.
    pub(crate) fn key(self) -> (&'a str, &'a str, i64) {
        (self.name, self.holder, self.token)
    }
}

/// The statements of the resource lease operations, per store. Each returns the lease rows
/// it read or wrote (`None`: no row matched).
pub(crate) trait ResourceStatements: Backend {
    /// Lease `name`, locked until `tx` ends.
    fn resource_locked(
        tx: &mut Self::Tx,
        name: &str,
        op: &'static str,
    ) -> impl Future<Output = Result<Option<Self::Row>>> + Send;

    /// Writes a new holding (and its history row); `None` when a concurrent insert won.
    fn resource_take(
        tx: &mut Self::Tx,
        taking: Taking<'_>,
        op: &'static str,
    ) -> impl Future<Output = Result<Option<Self::Row>>> + Send;

    /// Extends a holding by `ttl` from now (never past its `lock_at_most_until`).
    fn resource_extend(
        tx: &mut Self::Tx,
        lease: Fenced<'_>,
        ttl: Duration,
        op: &'static str,
    ) -> impl Future<Output = Result<Option<Self::Row>>> + Send;

    /// [`ResourceStatements::resource_extend`] on its own.
    fn resource_renew(
        &self,
        lease: Fenced<'_>,
        ttl: Duration,
    ) -> impl Future<Output = Result<Option<Self::Row>>> + Send;

    /// Releases a holding (held on until `lock_at_least_until`), marking its history row.
    fn resource_release(
        tx: &mut Self::Tx,
        lease: Fenced<'_>,
    ) -> impl Future<Output = Result<Option<Self::Row>>> + Send;

    /// Whether this holding's release already landed (its history row is marked).
    fn resource_release_repeated(
        tx: &mut Self::Tx,
        lease: Fenced<'_>,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Frees lock `name` whoever holds it (the token stays: the next holding's is higher).
    fn lock_force_release(
        tx: &mut Self::Tx,
        name: &str,
    ) -> impl Future<Output = Result<Self::Row>> + Send;

    /// Every lock, with its `moves` in the last hour.
    fn lock_rows(tx: &mut Self::Tx) -> impl Future<Output = Result<Vec<Self::Row>>> + Send;

    /// The shard count of group `name`, locked (`None`: no such group).
    fn shard_group_count(
        tx: &mut Self::Tx,
        name: &str,
    ) -> impl Future<Output = Result<Option<i64>>> + Send;

    /// Creates group `name` of `count` free shards; false when a concurrent create won.
    fn shard_group_insert(
        tx: &mut Self::Tx,
        name: &str,
        count: u32,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Owner changes in the last hour by lease (`group_name`, `name`, `moves`), of group
    /// `only` (`None`: every group).
    fn resource_moves(
        tx: &mut Self::Tx,
        only: Option<&str>,
    ) -> impl Future<Output = Result<Vec<Self::Row>>> + Send;

    /// Groups (`only`: that one) by name, members and owned shards counted with `grace`.
    fn shard_group_rows(
        tx: &mut Self::Tx,
        only: Option<&str>,
        grace: Duration,
    ) -> impl Future<Output = Result<Vec<Self::Row>>> + Send;

    /// The shards of `group`, by number.
    fn shard_rows(
        tx: &mut Self::Tx,
        group: &str,
    ) -> impl Future<Output = Result<Vec<Self::Row>>> + Send;

    /// The members of `group`, by id.
    fn shard_member_rows(
        tx: &mut Self::Tx,
        group: &str,
    ) -> impl Future<Output = Result<Vec<Self::Row>>> + Send;
}

/// The [`ResourceStatements`] both stores run alike, written once: each runs its store's
/// statement of the same name (`$sql::…`, text that differs only by dialect) bound to a name,
/// a group or a lease's fence key. A store invokes it inside its `impl ResourceStatements`,
/// naming its `sql` module.
macro_rules! resource_statements_alike {
    ($sql:ident) => {
        async fn resource_locked(
            tx: &mut Self::Tx,
            name: &str,
            op: &'static str,
        ) -> $crate::store::Result<Option<Self::Row>> {
            let statement = $sql::resource_get_for_update;
            $crate::store::audit::backend::row_by(&mut **tx, statement, name, op).await
        }

        async fn resource_release_repeated(
            tx: &mut Self::Tx,
            lease: $crate::store::resources::flow::Fenced<'_>,
        ) -> $crate::store::Result<bool> {
            let statement = $sql::resource_release_repeated;
            let key = lease.key();
            $crate::store::audit::backend::holds(&mut **tx, statement, key, "resource_release")
                .await
        }

        async fn shard_rows(
            tx: &mut Self::Tx,
            group: &str,
        ) -> $crate::store::Result<Vec<Self::Row>> {
            let statement = $sql::shard_list;
            $crate::store::audit::backend::rows_by(&mut **tx, statement, group, "shard_list").await
        }

        async fn shard_member_rows(
            tx: &mut Self::Tx,
            group: &str,
        ) -> $crate::store::Result<Vec<Self::Row>> {
            let statement = $sql::shard_member_list;
            let op = "shard_member_list";
            $crate::store::audit::backend::rows_by(&mut **tx, statement, group, op).await
        }
    };
}
pub(crate) use resource_statements_alike;

/// A resource lease row.
pub(crate) fn record(r: &impl Columns) -> Result<ResourceRecord> {
    Ok(ResourceRecord {
        name: r.text("name")?,
        shard: shard_key(r.opt_text("group_name")?, r.opt_int("shard")?)?,
        owner: r.opt_text("owner")?,
        token: r.int("token")?,
        lease_until: r.opt_time("lease_until")?,
        heartbeat_at: r.opt_time("heartbeat_at")?,
        acquired_at: r.opt_time("acquired_at")?,
        lock_at_least_until: r.opt_time("lock_at_least_until")?,
        lock_at_most_until: r.opt_time("lock_at_most_until")?,
        released_at: r.opt_time("released_at")?,
        moves_last_hour: 0,
    })
}

fn optional(r: Option<impl Columns>) -> Result<Option<ResourceRecord>> {
    r.as_ref().map(record).transpose()
}

fn count(r: &impl Columns, column: &'static str) -> Result<u32> {
    Ok(clamp_count(r.int(column)?))
}

/// Whether a forced release frees a holding (audited `applied`) rather than finding the lock
/// free or given back already (`noop`).
pub(crate) fn force_frees(before: &ResourceRecord, now: DateTime<Utc>) -> bool {
    before.owner.is_some()
        && before
            .lease_until
            .is_some_and(|until| until > now || before.released_at.is_none())
}

/// The refusal of a create of group `name` with `requested` shards when it exists with
/// `stored`; `None` when they agree (a no-op).
pub(crate) fn group_conflict(name: &str, stored: i64, requested: u32) -> Option<StoreError> {
    (stored != i64::from(requested)).then(|| StoreError::ShardGroupExists {
        name: name.to_string(),
        count: u32::try_from(stored).unwrap_or(0),
    })
}

pub(crate) async fn lock_acquire<B: ResourceStatements>(
    backend: &B,
    p: &LockAcquireParams,
) -> Result<LockAcquired> {
    const OP: &str = "lock_acquire";
    p.validate()?;
    let name = p.name.as_str();
    let holder = p.holder.as_str();
    if let Some(actor) = &p.actor {
        authorize(backend, actor, OP, lock_target(name), None).await?;
    }
    let mut tx = backend.begin(OP).await?;
    let now = B::now(&mut tx, OP).await?;
    let h = holding(now, p.ttl, p.lock_at_least_for, p.lock_at_most_for);
    // A missing row is inserted; when a concurrent acquire inserted it first, lock and decide.
    let mut out = None;
    for _ in 0..2 {
        let row = optional(B::resource_locked(&mut tx, name, OP).await?)?;
        let decided = match plan_take(row.as_ref(), holder, now, p.grace) {
            Take::Extend => {
                let token = row.as_ref().map_or(0, |r| r.token);
                let lease = Fenced {
                    name,
                    holder,
                    token,
                };
                optional(B::resource_extend(&mut tx, lease, p.ttl, OP).await?)?
                    .map(|lock| (true, lock))
            }
            Take::New { token } => {
                let taking = Taking {
                    insert: row.is_none(),
                    name,
                    holder,
                    token,
                    now,
                    holding: h,
                };
                optional(B::resource_take(&mut tx, taking, OP).await?)?.map(|lock| (true, lock))
            }
            Take::Refuse => row.map(|lock| (false, lock)),
        };
        if decided.is_some() {
            out = decided;
            break;
        }
    }
    let Some((acquired, lock)) = out else {
        return Err(StoreError::Busy { op: OP });
    };
    let done = LockAcquired {
        acquired,
        lock,
        now,
    };
    if let Some(actor) = &p.actor {
        B::audit_in(&mut tx, &acquire_entry(actor, p, &done)).await?;
    }
    B::commit(tx, OP).await?;
    Ok(done)
}

pub(crate) async fn resource_renew<B: ResourceStatements>(
    backend: &B,
    p: &ResourceHolderParams,
) -> Result<Option<ResourceRecord>> {
    check_ttl("ttl", p.ttl)?;
    if let Some(actor) = &p.actor {
        authorize(backend, actor, "lock_renew", lock_target(&p.name), None).await?;
    }
    let lease = Fenced {
        name: &p.name,
        holder: p.holder.as_str(),
        token: p.token,
    };
    optional(backend.resource_renew(lease, p.ttl).await?)
}

pub(crate) async fn resource_release<B: ResourceStatements>(
    backend: &B,
    p: &ResourceHolderParams,
) -> Result<Option<ResourceRecord>> {
    const OP: &str = "resource_release";
    if let Some(actor) = &p.actor {
        authorize(backend, actor, "lock_release", lock_target(&p.name), None).await?;
    }
    let lease = Fenced {
        name: &p.name,
        holder: p.holder.as_str(),
        token: p.token,
    };
    let mut tx = backend.begin(OP).await?;
    let before = optional(B::resource_locked(&mut tx, &p.name, OP).await?)?;
    let after = optional(B::resource_release(&mut tx, lease).await?)?;
    let changed = after.is_some();
    // Nothing changed: a retry of this holder's release that landed (its reply lost) is told
    // it did, with the row as it is (unchanged: locked since `before`); else fenced.
    let after = match after {
        Some(after) => Some(after),
        None if B::resource_release_repeated(&mut tx, lease).await? => before.clone(),
        None => None,
    };
    if let Some(actor) = &p.actor {
        let entry = release_entry(actor, &p.name, before.as_ref(), changed);
        B::audit_in(&mut tx, &entry).await?;
    }
    B::commit(tx, OP).await?;
    Ok(after)
}

pub(crate) async fn lock_force_release<B: ResourceStatements>(
    backend: &B,
    p: &LockForceReleaseParams,
) -> Result<ResourceRecord> {
    const OP: &str = "lock_force_release";
    let name = p.name.as_str();
    authorize(backend, &p.actor, "lock_release", lock_target(name), None).await?;
    let mut tx = backend.begin(OP).await?;
    let before = optional(B::resource_locked(&mut tx, name, OP).await?)?;
    let Some(before) = before.filter(|r| r.shard.is_none()) else {
        // Refused, and audited as such (as every operator call is).
        let missing = StoreError::LockNotFound(name.to_string());
        B::audit_in(&mut tx, &release_failed_entry(&p.actor, name, &missing)).await?;
        B::commit(tx, OP).await?;
        return Err(missing);
    };
    let now = B::now(&mut tx, OP).await?;
    let held = force_frees(&before, now);
    let after = record(&B::lock_force_release(&mut tx, name).await?)?;
    let entry = release_entry(&p.actor, name, Some(&before), held);
    B::audit_in(&mut tx, &entry).await?;
    B::commit(tx, OP).await?;
    Ok(after)
}

pub(crate) async fn lock_list<B: ResourceStatements>(backend: &B) -> Result<LockListing> {
    const OP: &str = "lock_list";
    let mut tx = backend.snapshot(OP).await?;
    let now = B::now(&mut tx, OP).await?;
    let locks = B::lock_rows(&mut tx)
        .await?
        .iter()
        .map(|r| {
            let mut lock = record(r)?;
            lock.moves_last_hour = count(r, "moves")?;
            Ok(lock)
        })
        .collect::<Result<_>>()?;
    Ok(LockListing { locks, now })
}

/// Owner changes in the last hour by (group, lease name), of group `only` (`None`: every
/// group).
async fn moves<B: ResourceStatements>(
    tx: &mut B::Tx,
    only: Option<&str>,
) -> Result<BTreeMap<(String, String), u32>> {
    B::resource_moves(tx, only)
        .await?
        .iter()
        .map(|r| Ok(((r.text("group_name")?, r.text("name")?), count(r, "moves")?)))
        .collect()
}

/// The records of group `only` (`None`: every group), counting `moves` (from [`moves`] of
/// the same groups).
async fn groups<B: ResourceStatements>(
    tx: &mut B::Tx,
    only: Option<&str>,
    grace: Duration,
    moves: &BTreeMap<(String, String), u32>,
) -> Result<Vec<ShardGroupRecord>> {
    B::shard_group_rows(tx, only, grace)
        .await?
        .iter()
        .map(|r| {
            group_record(
                r.text("name")?,
                r.int("shard_count")?,
                r.time("created_at")?,
                count(r, "members")?,
                count(r, "owned")?,
                moves,
            )
        })
        .collect()
}

pub(crate) async fn shard_group_create<B: ResourceStatements>(
    backend: &B,
    p: &ShardGroupCreateParams,
) -> Result<ShardGroupCreated> {
    const OP: &str = "shard_group_create";
    check_shard_count(p.count)?;
    let name = p.name.as_str();
    authorize(backend, &p.actor, OP, group_target(name), None).await?;
    let mut tx = backend.begin(OP).await?;
    let mut created = false;
    let mut existing = B::shard_group_count(&mut tx, name).await?;
    if existing.is_none() {
        created = B::shard_group_insert(&mut tx, name, p.count).await?;
        if !created {
            existing = B::shard_group_count(&mut tx, name).await?;
        }
    }
    if let Some(refused) = existing.and_then(|n| group_conflict(name, n, p.count)) {
        drop(tx);
        let entry = group_failed_entry(&p.actor, name, p.count, &refused);
        return Err(failed(backend, &entry, refused).await);
    }
    B::audit_in(&mut tx, &group_entry(&p.actor, name, p.count, created)).await?;
    let moves = moves::<B>(&mut tx, Some(name)).await?;
    let group = groups::<B>(&mut tx, Some(name), Duration::ZERO, &moves)
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| StoreError::ShardGroupNotFound(name.to_string()))?;
    B::commit(tx, OP).await?;
    Ok(ShardGroupCreated { created, group })
}

pub(crate) async fn shard_group_list<B: ResourceStatements>(
    backend: &B,
    grace: Duration,
) -> Result<(Vec<ShardGroupRecord>, DateTime<Utc>)> {
    const OP: &str = "shard_group_list";
    let mut tx = backend.snapshot(OP).await?;
    let now = B::now(&mut tx, OP).await?;
    let moves = moves::<B>(&mut tx, None).await?;
    let groups = groups::<B>(&mut tx, None, grace, &moves).await?;
    Ok((groups, now))
}

fn member(r: &impl Columns) -> Result<ShardMemberRecord> {
    Ok(ShardMemberRecord {
        member: r.text("member")?,
        joined_at: r.time("joined_at")?,
        heartbeat_at: r.time("heartbeat_at")?,
        lease_until: r.time("lease_until")?,
    })
}

pub(crate) async fn shard_group_get<B: ResourceStatements>(
    backend: &B,
    group: &GroupName,
    grace: Duration,
) -> Result<Option<ShardGroupView>> {
    const OP: &str = "shard_group_get";
    let name = group.as_str();
    // One snapshot: shards and members as of the same moment.
    let mut tx = backend.snapshot(OP).await?;
    let now = B::now(&mut tx, OP).await?;
    let moves = moves::<B>(&mut tx, Some(name)).await?;
    let Some(record_of_group) = groups::<B>(&mut tx, Some(name), grace, &moves)
        .await?
        .into_iter()
        .next()
    else {
        return Ok(None);
    };
    let shards = B::shard_rows(&mut tx, name)
        .await?
        .iter()
        .map(|r| {
            let mut shard = record(r)?;
            shard.moves_last_hour = moves
                .get(&(name.to_string(), shard.name.clone()))
                .copied()
                .unwrap_or(0);
            Ok(shard)
        })
        .collect::<Result<Vec<_>>>()?;
    let members = B::shard_member_rows(&mut tx, name)
        .await?
        .iter()
        .map(member)
        .collect::<Result<Vec<_>>>()?;
    B::commit(tx, OP).await?;
    Ok(Some(ShardGroupView {
        group: record_of_group,
        shards,
        members,
        now,
    }))
}

pub(crate) async fn shard_acquire<B: ResourceStatements>(
    backend: &B,
    p: &ShardAcquireParams,
) -> Result<Option<i64>> {
    const OP: &str = "shard_acquire";
    check_ttl("ttl", p.ttl)?;
    let name = p.group.shard_lease(p.shard);
    let owner = p.owner.as_str();
    let mut tx = backend.begin(OP).await?;
    let row = optional(B::resource_locked(&mut tx, &name, OP).await?)?
        .filter(|r| r.shard.as_ref().is_some_and(|(g, _)| g == p.group.as_str()))
        .ok_or_else(|| StoreError::ShardGroupNotFound(format!("{name} (no such shard)")))?;
    let now = B::now(&mut tx, OP).await?;
    let written = match plan_take(Some(&row), owner, now, p.grace) {
        Take::Extend => {
            let lease = Fenced {
                name: &name,
                holder: owner,
                token: row.token,
            };
            B::resource_extend(&mut tx, lease, p.ttl, OP).await?
        }
        Take::New { token } => {
            let taking = Taking {
                insert: false,
                name: &name,
                holder: owner,
                token,
                now,
                holding: holding(now, p.ttl, None, None),
            };
            B::resource_take(&mut tx, taking, OP).await?
        }
        Take::Refuse => None,
    };
    let token = optional(written)?.map(|r| r.token);
    B::commit(tx, OP).await?;
    Ok(token)
}

/// The entry points of a store's resource lease operations (see
/// [`crate::store::audit::backend::entry_points`]).
macro_rules! resource_entry_points {
    ($backend:ident, $pool:ty) => {
        $crate::store::audit::backend::entry_points!($backend, $pool;
            $crate::store::resources::flow::lock_acquire as lock_acquire(
                p: &$crate::store::resources::LockAcquireParams
            ) -> $crate::store::resources::LockAcquired;
            $crate::store::resources::flow::resource_renew as resource_renew(
                p: &$crate::store::resources::ResourceHolderParams
            ) -> Option<$crate::store::resources::ResourceRecord>;
            $crate::store::resources::flow::resource_release as resource_release(
                p: &$crate::store::resources::ResourceHolderParams
            ) -> Option<$crate::store::resources::ResourceRecord>;
            $crate::store::resources::flow::lock_force_release as lock_force_release(
                p: &$crate::store::resources::LockForceReleaseParams
            ) -> $crate::store::resources::ResourceRecord;
            $crate::store::resources::flow::lock_list as lock_list(
            ) -> $crate::store::resources::LockListing;
            $crate::store::resources::flow::shard_group_create as shard_group_create(
                p: &$crate::store::resources::ShardGroupCreateParams
            ) -> $crate::store::resources::ShardGroupCreated;
            $crate::store::resources::flow::shard_group_list as shard_group_list(
                grace: std::time::Duration
            ) -> (
                Vec<$crate::store::resources::ShardGroupRecord>,
                chrono::DateTime<chrono::Utc>,
            );
            $crate::store::resources::flow::shard_group_get as shard_group_get(
                group: &$crate::store::resources::GroupName,
                grace: std::time::Duration
            ) -> Option<$crate::store::resources::ShardGroupView>;
            $crate::store::resources::flow::shard_acquire as shard_acquire(
                p: &$crate::store::resources::ShardAcquireParams
            ) -> Option<i64>;
        );
    };
}
pub(crate) use resource_entry_points;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    fn lock(owner: Option<&str>, until: Option<i64>, released: bool) -> ResourceRecord {
        ResourceRecord {
            name: "nightly".into(),
            shard: None,
            owner: owner.map(Into::into),
            token: 1,
            lease_until: until.map(at),
            heartbeat_at: None,
            acquired_at: None,
            lock_at_least_until: None,
            lock_at_most_until: None,
            released_at: released.then(|| at(-5)),
            moves_last_hour: 0,
        }
    }

    #[test]
    fn a_forced_release_frees_what_someone_holds() {
        let cases = [
            (lock(None, None, false), false, "free"),
            (lock(Some("a"), Some(10), false), true, "held"),
            (
                lock(Some("a"), Some(-1), false),
                true,
                "expired, never released",
            ),
            (
                lock(Some("a"), Some(10), true),
                true,
                "released, held until at-least",
            ),
            (lock(Some("a"), Some(-1), true), false, "released and past"),
        ];
        for (before, frees, case) in cases {
            assert_eq!(force_frees(&before, at(0)), frees, "{case}");
        }
    }

    #[test]
    fn a_group_declared_again_must_keep_its_count() {
        let cases = [(8, 8, false), (8, 9, true), (-1, 4, true)];
        for (stored, requested, refused) in cases {
            let conflict = group_conflict("orders", stored, requested);
            assert_eq!(conflict.is_some(), refused, "{stored} vs {requested}");
            if let Some(StoreError::ShardGroupExists { name, count }) = conflict {
                assert_eq!(name, "orders");
                assert_eq!(i64::from(count), stored.max(0));
            }
        }
    }
}
