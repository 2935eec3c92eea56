//! Resource leases on PostgreSQL: locks, shard groups and their members. What an acquire
//! decides is in [`crate::store::resources`]; here each operation is one READ COMMITTED
//! transaction that locks the row it decides on (`FOR UPDATE`), so two acquirers of one lease
//! queue on the row and the second sees what the first wrote. Renewals are one statement for
//! all of a holder's leases and memberships.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, PgPool};

use super::operator::{audit_write, authorize, begin};
use super::rows::get;
use super::{secs, sql, tx_now};
use crate::domain::{Actor, AgentId};
use crate::store::resources::{
    self as common, GroupName, LockAcquireParams, LockAcquired, LockForceReleaseParams,
    LockListing, ResourceHolderParams, ResourceRecord, ResourceRenewOutcome, ResourceRenewParams,
    ShardAcquireParams, ShardGroupCreateParams, ShardGroupCreated, ShardGroupRecord,
    ShardGroupView, ShardJoinParams, ShardMemberRecord, Take,
};
use crate::store::{HolderWrite, Result, StoreError};

fn count(r: &PgRow, column: &'static str) -> Result<u32> {
    Ok(common::clamp_count(get(r, column)?))
}

fn record(r: &PgRow) -> Result<ResourceRecord> {
    let group: Option<String> = get(r, "group_name")?;
    let shard: Option<i32> = get(r, "shard")?;
    let shard = common::shard_key(group, shard.map(i64::from))?;
    Ok(ResourceRecord {
        name: get(r, "name")?,
        shard,
        owner: get(r, "owner")?,
        token: get(r, "token")?,
        lease_until: get(r, "lease_until")?,
        heartbeat_at: get(r, "heartbeat_at")?,
        acquired_at: get(r, "acquired_at")?,
        lock_at_least_until: get(r, "lock_at_least_until")?,
        lock_at_most_until: get(r, "lock_at_most_until")?,
        released_at: get(r, "released_at")?,
        moves_last_hour: 0,
    })
}

async fn locked(
    conn: &mut PgConnection,
    name: &str,
    op: &'static str,
) -> Result<Option<ResourceRecord>> {
    sqlx::query(sql::resource_get_for_update)
        .bind(name)
        .fetch_optional(&mut *conn)
        .await
        .map_err(StoreError::db(op))?
        .as_ref()
        .map(record)
        .transpose()
}

/// Writes a new holding (`insert`: the row does not exist yet); `None` when a concurrent
/// insert won.
#[allow(clippy::too_many_arguments)]
async fn take(
    conn: &mut PgConnection,
    insert: bool,
    name: &str,
    holder: &str,
    token: i64,
    now: DateTime<Utc>,
    h: common::Holding,
    op: &'static str,
) -> Result<Option<ResourceRecord>> {
    let statement = if insert {
        sql::lock_insert
    } else {
        sql::resource_take
    };
    sqlx::query(statement)
        .bind(name)
        .bind(holder)
        .bind(token)
        .bind(now)
        .bind(h.lease_until)
        .bind(h.at_least_until)
        .bind(h.at_most_until)
        .fetch_optional(&mut *conn)
        .await
        .map_err(StoreError::db(op))?
        .as_ref()
        .map(record)
        .transpose()
}

async fn extend(
    conn: &mut PgConnection,
    name: &str,
    holder: &str,
    token: i64,
    ttl: Duration,
    op: &'static str,
) -> Result<Option<ResourceRecord>> {
    sqlx::query(sql::resource_renew)
        .bind(name)
        .bind(holder)
        .bind(token)
        .bind(secs(ttl))
        .fetch_optional(&mut *conn)
        .await
        .map_err(StoreError::db(op))?
        .as_ref()
        .map(record)
        .transpose()
}

pub(super) async fn lock_acquire(pool: &PgPool, p: &LockAcquireParams) -> Result<LockAcquired> {
    const OP: &str = "lock_acquire";
    p.validate()?;
    if let Some(actor) = &p.actor {
        authorize(
            pool,
            actor,
            "lock_acquire",
            common::lock_target(p.name.as_str()),
        )
        .await?;
    }
    let name = p.name.as_str();
    let holder = p.holder.as_str();
    let mut tx = begin(pool, OP).await?;
    let now = tx_now(&mut tx, OP).await?;
    let h = common::holding(now, p.ttl, p.lock_at_least_for, p.lock_at_most_for);
    // A missing row is inserted; when a concurrent acquire inserted it first, lock and decide.
    let mut out = None;
    for _ in 0..2 {
        let row = locked(&mut tx, name, OP).await?;
        let decided = match common::plan_take(row.as_ref(), holder, now, p.grace) {
            Take::Extend => {
                let token = row.as_ref().map_or(0, |r| r.token);
                extend(&mut tx, name, holder, token, p.ttl, OP)
                    .await?
                    .map(|lock| (true, lock))
            }
            Take::New { token } => take(&mut tx, row.is_none(), name, holder, token, now, h, OP)
                .await?
                .map(|lock| (true, lock)),
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
        audit_write(&mut *tx, &common::acquire_entry(actor, p, &done)).await?;
    }
    tx.commit().await.map_err(StoreError::db(OP))?;
    Ok(done)
}

pub(super) async fn resource_renew(
    pool: &PgPool,
    p: &ResourceHolderParams,
) -> Result<Option<ResourceRecord>> {
    const OP: &str = "resource_renew";
    common::check_ttl("ttl", p.ttl)?;
    if let Some(actor) = &p.actor {
        authorize(pool, actor, "lock_renew", common::lock_target(&p.name)).await?;
    }
    let mut conn = pool.acquire().await.map_err(StoreError::db(OP))?;
    extend(&mut conn, &p.name, p.holder.as_str(), p.token, p.ttl, OP).await
}

pub(super) async fn resource_release(
    pool: &PgPool,
    p: &ResourceHolderParams,
) -> Result<Option<ResourceRecord>> {
    const OP: &str = "resource_release";
    if let Some(actor) = &p.actor {
        authorize(pool, actor, "lock_release", common::lock_target(&p.name)).await?;
    }
    let mut tx = begin(pool, OP).await?;
    let before = locked(&mut tx, &p.name, OP).await?;
    let after = sqlx::query(sql::resource_release)
        .bind(&p.name)
        .bind(p.holder.as_str())
        .bind(p.token)
        .fetch_optional(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?
        .as_ref()
        .map(record)
        .transpose()?;
    let changed = after.is_some();
    // Nothing changed: a retry of this holder's release that landed (its reply lost) is told
    // it did, with the row as it is (unchanged: locked since `before`); else fenced.
    let after = match after {
        Some(after) => Some(after),
        None => sqlx::query(sql::resource_release_repeated)
            .bind(&p.name)
            .bind(p.holder.as_str())
            .bind(p.token)
            .fetch_optional(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?
            .and(before.clone()),
    };
    if let Some(actor) = &p.actor {
        let entry = common::release_entry(actor, &p.name, before.as_ref(), changed);
        audit_write(&mut *tx, &entry).await?;
    }
    tx.commit().await.map_err(StoreError::db(OP))?;
    Ok(after)
}

pub(super) async fn lock_force_release(
    pool: &PgPool,
    p: &LockForceReleaseParams,
) -> Result<ResourceRecord> {
    const OP: &str = "lock_force_release";
    let name = p.name.as_str();
    authorize(pool, &p.actor, "lock_release", common::lock_target(name)).await?;
    let mut tx = begin(pool, OP).await?;
    let Some(before) = locked(&mut tx, name, OP)
        .await?
        .filter(|r| r.shard.is_none())
    else {
        // Refused, and audited as such (as every operator call is).
        let missing = StoreError::LockNotFound(name.to_string());
        audit_write(
            &mut *tx,
            &common::release_failed_entry(&p.actor, name, &missing),
        )
        .await?;
        tx.commit().await.map_err(StoreError::db(OP))?;
        return Err(missing);
    };
    let now = tx_now(&mut tx, OP).await?;
    let held = before.owner.is_some()
        && before
            .lease_until
            .is_some_and(|until| until > now || before.released_at.is_none());
    let after = sqlx::query(sql::lock_force_release)
        .bind(name)
        .fetch_one(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    let after = record(&after)?;
    audit_write(
        &mut *tx,
        &common::release_entry(&p.actor, name, Some(&before), held),
    )
    .await?;
    tx.commit().await.map_err(StoreError::db(OP))?;
    Ok(after)
}

pub(super) async fn lock_list(pool: &PgPool) -> Result<LockListing> {
    const OP: &str = "lock_list";
    let mut conn = pool.acquire().await.map_err(StoreError::db(OP))?;
    let now = tx_now(&mut conn, OP).await?;
    let rows = sqlx::query(sql::lock_list)
        .fetch_all(&mut *conn)
        .await
        .map_err(StoreError::db(OP))?;
    let locks = rows
        .iter()
        .map(|r| {
            let mut lock = record(r)?;
            lock.moves_last_hour = count(r, "moves")?;
            Ok(lock)
        })
        .collect::<Result<_>>()?;
    Ok(LockListing { locks, now })
}

pub(super) async fn resource_renew_many(
    pool: &PgPool,
    p: &ResourceRenewParams,
) -> Result<ResourceRenewOutcome> {
    const OP: &str = "resource_renew_many";
    let (names, tokens): (Vec<&str>, Vec<i64>) =
        p.leases.iter().map(|(n, t)| (n.as_str(), *t)).unzip();
    let groups: Vec<&str> = p.groups.iter().map(GroupName::as_str).collect();
    let rows = sqlx::query(sql::resource_renew_many)
        .bind(p.owner.as_str())
        .bind(&names)
        .bind(&tokens)
        .bind(secs(p.ttl))
        .bind(&groups)
        .fetch_all(pool)
        .await
        .map_err(StoreError::db(OP))?;
    let mut out = ResourceRenewOutcome::default();
    let mut members = BTreeSet::new();
    for r in &rows {
        let kind: &str = get(r, "kind")?;
        out.now = Some(get(r, "now")?);
        match kind {
            "lease" => {
                out.renewed
                    .push((get(r, "name")?, get(r, "token")?, get(r, "lease_until")?))
            }
            "member" => {
                members.insert(get::<String>(r, "name")?);
            }
            _ => {}
        }
    }
    out.settle(p, &members);
    Ok(out)
}

/// The records of group `only` (`None`: every group), counting `moves` (from [`moves`] of the
/// same groups).
async fn group_records(
    conn: &mut PgConnection,
    only: Option<&str>,
    grace: Duration,
    moves: &BTreeMap<(String, String), u32>,
    op: &'static str,
) -> Result<Vec<ShardGroupRecord>> {
    let rows = sqlx::query(sql::shard_group_list)
        .bind(secs(grace))
        .bind(only)
        .fetch_all(&mut *conn)
        .await
        .map_err(StoreError::db(op))?;
    rows.iter()
        .map(|r| {
            let shard_count: i32 = get(r, "shard_count")?;
            common::group_record(
                get(r, "name")?,
                i64::from(shard_count),
                get(r, "created_at")?,
                count(r, "members")?,
                count(r, "owned")?,
                moves,
            )
        })
        .collect()
}

/// Owner changes in the last hour by (group, lease name).
async fn moves(
    conn: &mut PgConnection,
    only: Option<&str>,
    op: &'static str,
) -> Result<BTreeMap<(String, String), u32>> {
    let rows = sqlx::query(sql::resource_moves)
        .bind(only)
        .fetch_all(&mut *conn)
        .await
        .map_err(StoreError::db(op))?;
    rows.iter()
        .map(|r| Ok(((get(r, "group_name")?, get(r, "name")?), count(r, "moves")?)))
        .collect()
}

pub(super) async fn shard_group_create(
    pool: &PgPool,
    p: &ShardGroupCreateParams,
) -> Result<ShardGroupCreated> {
    const OP: &str = "shard_group_create";
    common::check_shard_count(p.count)?;
    let name = p.name.as_str();
    authorize(
        pool,
        &p.actor,
        "shard_group_create",
        common::group_target(name),
    )
    .await?;
    let mut tx = begin(pool, OP).await?;
    let mut created = false;
    let existing: Option<i32> = sqlx::query_scalar(sql::shard_group_lock)
        .bind(name)
        .fetch_optional(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    let existing = match existing {
        Some(n) => Some(n),
        None => {
            let made = sqlx::query(sql::shard_group_insert)
                .bind(name)
                .bind(i32::try_from(p.count).unwrap_or(i32::MAX))
                .fetch_all(&mut *tx)
                .await
                .map_err(StoreError::db(OP))?;
            created = !made.is_empty();
            if created {
                None
            } else {
                sqlx::query_scalar(sql::shard_group_lock)
                    .bind(name)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(StoreError::db(OP))?
            }
        }
    };
    if let Some(n) = existing {
        let count = u32::try_from(n).unwrap_or(0);
        if count != p.count {
            drop(tx);
            let refused = StoreError::ShardGroupExists {
                name: name.to_string(),
                count,
            };
            refuse(pool, &p.actor, name, p.count, &refused).await;
            return Err(refused);
        }
    }
    audit_write(
        &mut *tx,
        &common::group_entry(&p.actor, name, p.count, created),
    )
    .await?;
    let moves = moves(&mut tx, Some(name), OP).await?;
    let group = group_records(&mut tx, Some(name), Duration::ZERO, &moves, OP)
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| StoreError::ShardGroupNotFound(name.to_string()))?;
    tx.commit().await.map_err(StoreError::db(OP))?;
    Ok(ShardGroupCreated { created, group })
}

async fn refuse(pool: &PgPool, actor: &Actor, name: &str, count: u32, error: &StoreError) {
    let entry = common::group_failed_entry(actor, name, count, error);
    if let Err(audit) = audit_write(pool, &entry).await {
        tracing::warn!(%audit, group = name, "could not audit a refused shard group creation");
    }
}

pub(super) async fn shard_group_list(
    pool: &PgPool,
    grace: Duration,
) -> Result<(Vec<ShardGroupRecord>, DateTime<Utc>)> {
    const OP: &str = "shard_group_list";
    let mut conn = pool.acquire().await.map_err(StoreError::db(OP))?;
    let now = tx_now(&mut conn, OP).await?;
    let moves = moves(&mut conn, None, OP).await?;
    let groups = group_records(&mut conn, None, grace, &moves, OP).await?;
    Ok((groups, now))
}

pub(super) async fn shard_group_get(
    pool: &PgPool,
    group: &GroupName,
    grace: Duration,
) -> Result<Option<ShardGroupView>> {
    const OP: &str = "shard_group_get";
    let name = group.as_str();
    // One snapshot: shards and members as of the same moment.
    let mut tx = pool
        .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .await
        .map_err(StoreError::db(OP))?;
    let now = tx_now(&mut tx, OP).await?;
    let moves = moves(&mut tx, Some(name), OP).await?;
    let Some(record_of_group) = group_records(&mut tx, Some(name), grace, &moves, OP)
        .await?
        .into_iter()
        .next()
    else {
        return Ok(None);
    };
    let shards = sqlx::query(sql::shard_list)
        .bind(name)
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?
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
    let members = sqlx::query(sql::shard_member_list)
        .bind(name)
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?
        .iter()
        .map(|r| {
            Ok(ShardMemberRecord {
                member: get(r, "member")?,
                joined_at: get(r, "joined_at")?,
                heartbeat_at: get(r, "heartbeat_at")?,
                lease_until: get(r, "lease_until")?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    tx.commit().await.map_err(StoreError::db(OP))?;
    Ok(Some(ShardGroupView {
        group: record_of_group,
        shards,
        members,
        now,
    }))
}

pub(super) async fn shard_join(pool: &PgPool, p: &ShardJoinParams) -> Result<()> {
    const OP: &str = "shard_join";
    common::check_ttl("ttl", p.ttl)?;
    let joined = sqlx::query(sql::shard_join)
        .bind(p.group.as_str())
        .bind(p.member.as_str())
        .bind(secs(p.ttl))
        .fetch_optional(pool)
        .await
        .map_err(StoreError::db(OP))?;
    match joined {
        Some(_) => Ok(()),
        None => Err(StoreError::ShardGroupNotFound(p.group.as_str().to_string())),
    }
}

pub(super) async fn shard_leave(pool: &PgPool, group: &GroupName, member: &AgentId) -> Result<()> {
    sqlx::query(sql::shard_leave)
        .bind(group.as_str())
        .bind(member.as_str())
        .execute(pool)
        .await
        .map_err(StoreError::db("shard_leave"))?;
    Ok(())
}

pub(super) async fn shard_acquire(pool: &PgPool, p: &ShardAcquireParams) -> Result<Option<i64>> {
    const OP: &str = "shard_acquire";
    common::check_ttl("ttl", p.ttl)?;
    let name = p.group.shard_lease(p.shard);
    let owner = p.owner.as_str();
    let mut tx = begin(pool, OP).await?;
    let row = locked(&mut tx, &name, OP)
        .await?
        .filter(|r| r.shard.as_ref().is_some_and(|(g, _)| g == p.group.as_str()))
        .ok_or_else(|| StoreError::ShardGroupNotFound(format!("{name} (no such shard)")))?;
    let now = tx_now(&mut tx, OP).await?;
    let token = match common::plan_take(Some(&row), owner, now, p.grace) {
        Take::Extend => extend(&mut tx, &name, owner, row.token, p.ttl, OP)
            .await?
            .map(|r| r.token),
        Take::New { token } => {
            let h = common::holding(now, p.ttl, None, None);
            take(&mut tx, false, &name, owner, token, now, h, OP)
                .await?
                .map(|r| r.token)
        }
        Take::Refuse => None,
    };
    tx.commit().await.map_err(StoreError::db(OP))?;
    Ok(token)
}

pub(super) async fn resource_history_prune(pool: &PgPool, older_than: Duration) -> Result<u64> {
    let done = sqlx::query(sql::resource_history_prune)
        .bind(secs(older_than))
        .execute(pool)
        .await
        .map_err(StoreError::db("resource_history_prune"))?;
    Ok(done.rows_affected())
}

/// Fences the caller's own writes by a resource lease: in the caller's transaction, checks
/// that `holder` holds lease `name` with `token` now, and keeps the row share-locked until
/// that transaction ends, so no takeover commits in between. Write only after
/// [`HolderWrite::Held`]; on [`HolderWrite::Fenced`] roll back: the lease has moved on.
///
/// ```no_run
/// # async fn f(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// use leasehold_shared::store::{postgres::resource_fence, HolderWrite};
/// let mut tx = pool.begin().await?;
/// if resource_fence(&mut tx, "orders-partitions#3", "web-1#17", 42).await? == HolderWrite::Held {
///     sqlx::query("UPDATE cursors SET pos = pos + 1 WHERE shard = 3").execute(&mut *tx).await?;
///     tx.commit().await?;
/// }
/// # Ok(()) }
/// ```
pub async fn resource_fence(
    conn: &mut PgConnection,
    name: &str,
    holder: &str,
    token: i64,
) -> Result<HolderWrite> {
    let held = sqlx::query(sql::resource_fence)
        .bind(name)
        .bind(holder)
        .bind(token)
        .fetch_optional(&mut *conn)
        .await
        .map_err(StoreError::db("resource_fence"))?;
    Ok(if held.is_some() {
        HolderWrite::Held
    } else {
        HolderWrite::Fenced
    })
}
