//! Resource leases on SQLite: locks, shard groups and their members, with the PostgreSQL
//! store's rules (see `postgres/resources.rs`). What an acquire decides is in
//! [`crate::store::resources`]; here each write is one `BEGIN IMMEDIATE` transaction, so the
//! row an acquire decides on cannot change before it commits (two acquirers of one lease take
//! turns on the write lock, and the second sees what the first wrote). Every lease time is
//! computed from SQLite's now, read as the transaction's first statement. Renewals are one
//! statement per table for all of a holder's leases and memberships.
//!
//! When things fail: a statement error rolls the whole operation back; a writer that cannot
//! get the write lock within the busy timeout is [`StoreError::Busy`] and changed nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::sqlite::SqliteRow;
use sqlx::{SqliteConnection, SqlitePool};

use super::operator::{audit_record, audit_write, authorize};
use super::rows::{get, get_opt_time, get_time, micros, span, time};
use super::{WriteTx, commit, json_list, read_tx, sql, write_tx};
use crate::domain::AgentId;
use crate::store::resources::{
    self as common, GroupName, LockAcquireParams, LockAcquired, LockForceReleaseParams,
    LockListing, ResourceHolderParams, ResourceRecord, ResourceRenewOutcome, ResourceRenewParams,
    ShardAcquireParams, ShardGroupCreateParams, ShardGroupCreated, ShardGroupRecord,
    ShardGroupView, ShardJoinParams, ShardMemberRecord, Take,
};
use crate::store::{HolderWrite, Result, StoreError};

/// One hour, in stored units: the window of "moves in the last hour".
const HOUR_US: i64 = 3_600_000_000;

fn count(r: &SqliteRow, column: &'static str) -> Result<u32> {
    Ok(common::clamp_count(get(r, column)?))
}

fn record(r: &SqliteRow) -> Result<ResourceRecord> {
    let group: Option<String> = get(r, "group_name")?;
    let shard: Option<i64> = get(r, "shard")?;
    let shard = common::shard_key(group, shard)?;
    Ok(ResourceRecord {
        name: get(r, "name")?,
        shard,
        owner: get(r, "owner")?,
        token: get(r, "token")?,
        lease_until: get_opt_time(r, "lease_until")?,
        heartbeat_at: get_opt_time(r, "heartbeat_at")?,
        acquired_at: get_opt_time(r, "acquired_at")?,
        lock_at_least_until: get_opt_time(r, "lock_at_least_until")?,
        lock_at_most_until: get_opt_time(r, "lock_at_most_until")?,
        released_at: get_opt_time(r, "released_at")?,
        moves_last_hour: 0,
    })
}

fn optional_record(r: Option<SqliteRow>) -> Result<Option<ResourceRecord>> {
    r.as_ref().map(record).transpose()
}

/// A write the plan said would land found no row: impossible under the write lock.
fn vanished(name: &str) -> StoreError {
    StoreError::Corrupt {
        what: "resource lease",
        detail: format!("{name:?} changed under the write lock"),
    }
}

/// The resource lease row `name` (in a write transaction: as it stays until the commit).
async fn row_of(
    conn: &mut SqliteConnection,
    name: &str,
    op: &'static str,
) -> Result<Option<ResourceRecord>> {
    let r = sqlx::query(sql::resource_get_for_update)
        .bind(name)
        .fetch_optional(conn)
        .await
        .map_err(StoreError::db(op))?;
    optional_record(r)
}

/// Writes a new holding (`insert`: the row does not exist yet) and its history row.
#[allow(clippy::too_many_arguments)]
async fn take(
    conn: &mut SqliteConnection,
    insert: bool,
    name: &str,
    holder: &str,
    token: i64,
    now: i64,
    h: common::Holding,
    op: &'static str,
) -> Result<ResourceRecord> {
    let statement = if insert {
        sql::lock_insert
    } else {
        sql::resource_take
    };
    let r = sqlx::query(statement)
        .bind(name)
        .bind(holder)
        .bind(token)
        .bind(now)
        .bind(micros(h.lease_until))
        .bind(h.at_least_until.map(micros))
        .bind(h.at_most_until.map(micros))
        .fetch_optional(&mut *conn)
        .await
        .map_err(StoreError::db(op))?;
    let lease = optional_record(r)?.ok_or_else(|| vanished(name))?;
    sqlx::query(sql::resource_history_insert)
        .bind(name)
        .execute(&mut *conn)
        .await
        .map_err(StoreError::db(op))?;
    Ok(lease)
}

/// `holder` renews lease `name` of `token` for `ttl` from `now` (never past its
/// `lock_at_most_until`). Fenced (`None`) when holder or token no longer match, it was
/// released, or its at-most bound passed; a lease past `lease_until` that nobody took yet is
/// still held (the debounce).
async fn extend(
    conn: &mut SqliteConnection,
    name: &str,
    holder: &str,
    token: i64,
    ttl: Duration,
    now: i64,
    op: &'static str,
) -> Result<Option<ResourceRecord>> {
    let r = sqlx::query(sql::resource_renew)
        .bind(name)
        .bind(holder)
        .bind(token)
        .bind(now.saturating_add(span(ttl)))
        .bind(now)
        .fetch_optional(&mut *conn)
        .await
        .map_err(StoreError::db(op))?;
    optional_record(r)
}

pub(super) async fn lock_acquire(pool: &SqlitePool, p: &LockAcquireParams) -> Result<LockAcquired> {
    const OP: &str = "lock_acquire";
    p.validate()?;
    if let Some(actor) = &p.actor {
        let target = common::lock_target(p.name.as_str());
        authorize(pool, actor, "lock_acquire", target, None).await?;
    }
    let name = p.name.as_str();
    let holder = p.holder.as_str();
    let (mut tx, now) = write_tx(pool, OP).await?;
    let at = time(now, "now")?;
    let row = row_of(&mut tx, name, OP).await?;
    let (acquired, lock) = match (common::plan_take(row.as_ref(), holder, at, p.grace), row) {
        (Take::Extend, Some(row)) => {
            let lock = extend(&mut tx, name, holder, row.token, p.ttl, now, OP)
                .await?
                .ok_or_else(|| vanished(name))?;
            (true, lock)
        }
        (Take::New { token }, row) => {
            let h = common::holding(at, p.ttl, p.lock_at_least_for, p.lock_at_most_for);
            let lock = take(&mut tx, row.is_none(), name, holder, token, now, h, OP).await?;
            (true, lock)
        }
        (Take::Refuse, Some(row)) => (false, row),
        (Take::Extend | Take::Refuse, None) => return Err(vanished(name)),
    };
    let done = LockAcquired {
        acquired,
        lock,
        now: at,
    };
    if let Some(actor) = &p.actor {
        audit_write(&mut tx, &common::acquire_entry(actor, p, &done), now).await?;
    }
    commit(tx, OP).await?;
    Ok(done)
}

pub(super) async fn resource_renew(
    pool: &SqlitePool,
    p: &ResourceHolderParams,
) -> Result<Option<ResourceRecord>> {
    const OP: &str = "resource_renew";
    common::check_ttl("ttl", p.ttl)?;
    if let Some(actor) = &p.actor {
        authorize(
            pool,
            actor,
            "lock_renew",
            common::lock_target(&p.name),
            None,
        )
        .await?;
    }
    let (mut tx, now) = write_tx(pool, OP).await?;
    let renewed = extend(&mut tx, &p.name, p.holder.as_str(), p.token, p.ttl, now, OP).await?;
    commit(tx, OP).await?;
    Ok(renewed)
}

pub(super) async fn resource_release(
    pool: &SqlitePool,
    p: &ResourceHolderParams,
) -> Result<Option<ResourceRecord>> {
    const OP: &str = "resource_release";
    if let Some(actor) = &p.actor {
        authorize(
            pool,
            actor,
            "lock_release",
            common::lock_target(&p.name),
            None,
        )
        .await?;
    }
    let (mut tx, now) = write_tx(pool, OP).await?;
    let before = row_of(&mut tx, &p.name, OP).await?;
    // Before its lock_at_least_until it stays held until then (released_at set, renewed by
    // nobody); otherwise it is free at once.
    let r = sqlx::query(sql::resource_release)
        .bind(&p.name)
        .bind(p.holder.as_str())
        .bind(p.token)
        .bind(now)
        .fetch_optional(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    let after = optional_record(r)?;
    let changed = after.is_some();
    if changed {
        // The holding's history row is marked released (a retry of this release finds it).
        sqlx::query(sql::resource_history_release)
            .bind(&p.name)
            .bind(p.token)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
    }
    // Nothing changed: a retry of this holder's release that landed (its reply lost) is told
    // it did, with the row as it is (unchanged); else fenced.
    let after = match after {
        Some(after) => Some(after),
        None => sqlx::query_scalar::<_, i64>(sql::resource_release_repeated)
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
        audit_write(&mut tx, &entry, now).await?;
    }
    commit(tx, OP).await?;
    Ok(after)
}

pub(super) async fn lock_force_release(
    pool: &SqlitePool,
    p: &LockForceReleaseParams,
) -> Result<ResourceRecord> {
    const OP: &str = "lock_force_release";
    let name = p.name.as_str();
    authorize(
        pool,
        &p.actor,
        "lock_release",
        common::lock_target(name),
        None,
    )
    .await?;
    let (mut tx, now) = write_tx(pool, OP).await?;
    let Some(before) = row_of(&mut tx, name, OP)
        .await?
        .filter(|r| r.shard.is_none())
    else {
        let missing = StoreError::LockNotFound(name.to_string());
        let entry = common::release_failed_entry(&p.actor, name, &missing);
        audit_write(&mut tx, &entry, now).await?;
        commit(tx, OP).await?;
        return Err(missing);
    };
    let at = time(now, "now")?;
    let held = before.owner.is_some()
        && before
            .lease_until
            .is_some_and(|until| until > at || before.released_at.is_none());
    // The token stays: the next holding's is higher.
    let r = sqlx::query(sql::lock_force_release)
        .bind(name)
        .fetch_optional(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    let after = optional_record(r)?.ok_or_else(|| vanished(name))?;
    let entry = common::release_entry(&p.actor, name, Some(&before), held);
    audit_write(&mut tx, &entry, now).await?;
    commit(tx, OP).await?;
    Ok(after)
}

pub(super) async fn lock_list(pool: &SqlitePool) -> Result<LockListing> {
    const OP: &str = "lock_list";
    let (mut tx, now) = read_tx(pool, OP).await?;
    // Moves: holdings of the last hour whose previous token's owner was someone else.
    let rows = sqlx::query(sql::lock_list)
        .bind(now.saturating_sub(HOUR_US))
        .fetch_all(&mut *tx)
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
    Ok(LockListing {
        locks,
        now: time(now, "now")?,
    })
}

pub(super) async fn resource_renew_many(
    pool: &SqlitePool,
    p: &ResourceRenewParams,
) -> Result<ResourceRenewOutcome> {
    const OP: &str = "resource_renew_many";
    common::check_ttl("ttl", p.ttl)?;
    let owner = p.owner.as_str();
    let (mut tx, now) = write_tx(pool, OP).await?;
    let until = now.saturating_add(span(p.ttl));
    let mut out = ResourceRenewOutcome {
        now: Some(time(now, "now")?),
        ..ResourceRenewOutcome::default()
    };
    let mut members = BTreeSet::new();
    if !p.groups.is_empty() {
        let groups: Vec<&str> = p.groups.iter().map(GroupName::as_str).collect();
        let renewed: Vec<String> = sqlx::query_scalar(sql::shard_member_renew_many)
            .bind(owner)
            .bind(now)
            .bind(until)
            .bind(json_list(&groups)?)
            .fetch_all(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
        members.extend(renewed);
    }
    if !p.leases.is_empty() {
        // Fenced as `extend`: (name, token) pairs travel as one JSON array.
        let rows = sqlx::query(sql::resource_renew_many)
            .bind(owner)
            .bind(now)
            .bind(until)
            .bind(json_list(&p.leases)?)
            .fetch_all(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
        for r in &rows {
            out.renewed.push((
                get(r, "name")?,
                get(r, "token")?,
                get_time(r, "lease_until")?,
            ));
        }
    }
    commit(tx, OP).await?;
    out.settle(p, &members);
    Ok(out)
}

/// Groups (`only`: that one) by name, with members and owned shards counted at `now` with
/// `grace`, counting `moves` (from [`moves`] of the same groups).
async fn group_records(
    conn: &mut SqliteConnection,
    only: Option<&str>,
    grace: Duration,
    now: i64,
    moves: &BTreeMap<(String, String), u32>,
    op: &'static str,
) -> Result<Vec<ShardGroupRecord>> {
    let rows = sqlx::query(sql::shard_group_list)
        .bind(span(grace))
        .bind(only)
        .bind(now)
        .fetch_all(&mut *conn)
        .await
        .map_err(StoreError::db(op))?;
    rows.iter()
        .map(|r| {
            let shard_count: i64 = get(r, "shard_count")?;
            common::group_record(
                get(r, "name")?,
                shard_count,
                get_time(r, "created_at")?,
                count(r, "members")?,
                count(r, "owned")?,
                moves,
            )
        })
        .collect()
}

/// Owner changes in the last hour by (group, lease name), of group `only` (`None`: every
/// group).
async fn moves(
    conn: &mut SqliteConnection,
    only: Option<&str>,
    now: i64,
    op: &'static str,
) -> Result<BTreeMap<(String, String), u32>> {
    let rows = sqlx::query(sql::resource_moves)
        .bind(only)
        .bind(now.saturating_sub(HOUR_US))
        .fetch_all(&mut *conn)
        .await
        .map_err(StoreError::db(op))?;
    rows.iter()
        .map(|r| Ok(((get(r, "group_name")?, get(r, "name")?), count(r, "moves")?)))
        .collect()
}

pub(super) async fn shard_group_create(
    pool: &SqlitePool,
    p: &ShardGroupCreateParams,
) -> Result<ShardGroupCreated> {
    const OP: &str = "shard_group_create";
    common::check_shard_count(p.count)?;
    let name = p.name.as_str();
    let target = common::group_target(name);
    authorize(pool, &p.actor, "shard_group_create", target, None).await?;
    let (mut tx, now) = write_tx(pool, OP).await?;
    let existing: Option<i64> = sqlx::query_scalar(sql::shard_group_lock)
        .bind(name)
        .fetch_optional(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    let created = match existing {
        None => {
            create_group(&mut tx, name, p.count, now, OP).await?;
            true
        }
        Some(n) if n == i64::from(p.count) => false,
        Some(n) => {
            drop(tx);
            let refused = StoreError::ShardGroupExists {
                name: name.to_string(),
                count: u32::try_from(n).unwrap_or(0),
            };
            let entry = common::group_failed_entry(&p.actor, name, p.count, &refused);
            if let Err(audit) = audit_record(pool, &entry).await {
                tracing::warn!(%audit, group = name, "could not audit a refused shard group creation");
            }
            return Err(refused);
        }
    };
    audit_write(
        &mut tx,
        &common::group_entry(&p.actor, name, p.count, created),
        now,
    )
    .await?;
    let moves = moves(&mut tx, Some(name), now, OP).await?;
    let group = group_records(&mut tx, Some(name), Duration::ZERO, now, &moves, OP)
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| StoreError::ShardGroupNotFound(name.to_string()))?;
    commit(tx, OP).await?;
    Ok(ShardGroupCreated { created, group })
}

/// Group `name` of `count` shards, each a free resource lease named `<group>#<shard>`.
async fn create_group(
    tx: &mut WriteTx,
    name: &str,
    count: u32,
    now: i64,
    op: &'static str,
) -> Result<()> {
    sqlx::query(sql::shard_group_insert)
        .bind(name)
        .bind(i64::from(count))
        .bind(now)
        .execute(&mut **tx)
        .await
        .map_err(StoreError::db(op))?;
    sqlx::query(sql::shard_group_insert_shards)
        .bind(name)
        .bind(i64::from(count))
        .execute(&mut **tx)
        .await
        .map_err(StoreError::db(op))?;
    Ok(())
}

pub(super) async fn shard_group_list(
    pool: &SqlitePool,
    grace: Duration,
) -> Result<(Vec<ShardGroupRecord>, DateTime<Utc>)> {
    const OP: &str = "shard_group_list";
    let (mut tx, now) = read_tx(pool, OP).await?;
    let moves = moves(&mut tx, None, now, OP).await?;
    let groups = group_records(&mut tx, None, grace, now, &moves, OP).await?;
    Ok((groups, time(now, "now")?))
}

pub(super) async fn shard_group_get(
    pool: &SqlitePool,
    group: &GroupName,
    grace: Duration,
) -> Result<Option<ShardGroupView>> {
    const OP: &str = "shard_group_get";
    let name = group.as_str();
    // One snapshot: shards and members as of the same moment.
    let (mut tx, now) = read_tx(pool, OP).await?;
    let moves = moves(&mut tx, Some(name), now, OP).await?;
    let Some(record_of_group) = group_records(&mut tx, Some(name), grace, now, &moves, OP)
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
                joined_at: get_time(r, "joined_at")?,
                heartbeat_at: get_time(r, "heartbeat_at")?,
                lease_until: get_time(r, "lease_until")?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    commit(tx, OP).await?;
    Ok(Some(ShardGroupView {
        group: record_of_group,
        shards,
        members,
        now: time(now, "now")?,
    }))
}

pub(super) async fn shard_join(pool: &SqlitePool, p: &ShardJoinParams) -> Result<()> {
    const OP: &str = "shard_join";
    common::check_ttl("ttl", p.ttl)?;
    let (mut tx, now) = write_tx(pool, OP).await?;
    let joined: Option<String> = sqlx::query_scalar(sql::shard_join)
        .bind(p.group.as_str())
        .bind(p.member.as_str())
        .bind(now)
        .bind(now.saturating_add(span(p.ttl)))
        .fetch_optional(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    if joined.is_none() {
        return Err(StoreError::ShardGroupNotFound(p.group.as_str().to_string()));
    }
    commit(tx, OP).await
}

pub(super) async fn shard_leave(
    pool: &SqlitePool,
    group: &GroupName,
    member: &AgentId,
) -> Result<()> {
    const OP: &str = "shard_leave";
    let (mut tx, _now) = write_tx(pool, OP).await?;
    sqlx::query(sql::shard_leave)
        .bind(group.as_str())
        .bind(member.as_str())
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    commit(tx, OP).await
}

pub(super) async fn shard_acquire(
    pool: &SqlitePool,
    p: &ShardAcquireParams,
) -> Result<Option<i64>> {
    const OP: &str = "shard_acquire";
    common::check_ttl("ttl", p.ttl)?;
    let name = p.group.shard_lease(p.shard);
    let owner = p.owner.as_str();
    let (mut tx, now) = write_tx(pool, OP).await?;
    let row = row_of(&mut tx, &name, OP)
        .await?
        .filter(|r| r.shard.as_ref().is_some_and(|(g, _)| g == p.group.as_str()))
        .ok_or_else(|| StoreError::ShardGroupNotFound(format!("{name} (no such shard)")))?;
    let at = time(now, "now")?;
    let token = match common::plan_take(Some(&row), owner, at, p.grace) {
        Take::Extend => extend(&mut tx, &name, owner, row.token, p.ttl, now, OP)
            .await?
            .map(|r| r.token),
        Take::New { token } => {
            let h = common::holding(at, p.ttl, None, None);
            Some(
                take(&mut tx, false, &name, owner, token, now, h, OP)
                    .await?
                    .token,
            )
        }
        Take::Refuse => None,
    };
    commit(tx, OP).await?;
    Ok(token)
}

pub(super) async fn resource_history_prune(pool: &SqlitePool, older_than: Duration) -> Result<u64> {
    const OP: &str = "resource_history_prune";
    let (mut tx, now) = write_tx(pool, OP).await?;
    let cutoff = now.saturating_sub(span(older_than));
    // Memberships gone for as long go with the history.
    sqlx::query(sql::shard_member_prune)
        .bind(cutoff)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    let done = sqlx::query(sql::resource_history_prune)
        .bind(cutoff)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    commit(tx, OP).await?;
    Ok(done.rows_affected())
}

/// Fences the caller's own writes by a resource lease: on the caller's connection, inside
/// its transaction, checks that `holder` holds lease `name` with `token` now (SQLite's
/// clock). Write only after [`HolderWrite::Held`]; on [`HolderWrite::Fenced`] roll back: the
/// lease has moved on.
///
/// The caller's transaction must begin with `BEGIN IMMEDIATE`: it then holds SQLite's one
/// write lock from before this check until it commits, so no takeover can commit in between
/// and the check and the caller's writes are serialised with every acquire. (In a deferred
/// transaction the check would read a snapshot another writer may overtake before the
/// caller's first write.)
///
/// ```no_run
/// # async fn f(pool: sqlx::SqlitePool) -> Result<(), Box<dyn std::error::Error>> {
/// # async fn advance_cursor(_: &mut sqlx::SqliteConnection, _: i64) -> sqlx::Result<()> { Ok(()) }
/// use leasehold_shared::store::{sqlite::{resource_fence, BEGIN_IMMEDIATE}, HolderWrite};
/// let mut tx = pool.begin_with(BEGIN_IMMEDIATE).await?;
/// if resource_fence(&mut tx, "orders-partitions#3", "web-1#17", 42).await? == HolderWrite::Held {
///     advance_cursor(&mut tx, 3).await?; // the caller's own writes
///     tx.commit().await?;
/// }
/// # Ok(()) }
/// ```
pub async fn resource_fence(
    conn: &mut SqliteConnection,
    name: &str,
    holder: &str,
    token: i64,
) -> Result<HolderWrite> {
    let held: Option<i64> = sqlx::query_scalar(sql::resource_fence)
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
