//! Resource leases on SQLite: the statements of locks, shard groups and their members, with
//! the PostgreSQL store's rules. What each operation decides, and in which order it runs
//! them, is in [`crate::store::resources::flow`]; here each write is one `BEGIN IMMEDIATE`
//! transaction, so the row an acquire decides on cannot change before it commits (two
//! acquirers of one lease take turns on the write lock, and the second sees what the first
//! wrote). Every lease time is computed from SQLite's now, read as the transaction's first
//! statement. History rows are written here, next to the change they record. Renewals are
//! one statement per table for all of a holder's leases and memberships.
//!
//! When things fail: a statement error rolls the whole operation back; a writer that cannot
//! get the write lock within the busy timeout is [`StoreError::Busy`] and changed nothing.

use std::collections::BTreeSet;
use std::time::Duration;

use sqlx::sqlite::SqliteRow;
use sqlx::{SqliteConnection, SqlitePool};

use super::operator::{Lite, LiteTx};
use super::rows::{get, get_time, micros, span, time};
use super::{commit, json_list, sql, write_tx};
use crate::domain::AgentId;
use crate::store::resources::flow::{Fenced, ResourceStatements, Taking};
use crate::store::resources::{
    GroupName, ResourceRenewOutcome, ResourceRenewParams, ShardJoinParams, check_ttl, joined,
};
use crate::store::{HolderWrite, Result, StoreError};

/// One hour, in stored units: the window of "moves in the last hour".
const HOUR_US: i64 = 3_600_000_000;

/// A write that must land under the write lock found no row.
fn vanished(name: &str) -> StoreError {
    StoreError::Corrupt {
        what: "resource lease",
        detail: format!("{name:?} changed under the write lock"),
    }
}

/// `holder` renews lease `name` of `token` for `ttl` from `now`. Fenced (`None`) when holder
/// or token no longer match, it was released, or its at-most bound passed; a lease past
/// `lease_until` that nobody took yet is still held (the debounce).
async fn extend(
    conn: &mut SqliteConnection,
    lease: Fenced<'_>,
    ttl: Duration,
    now: i64,
    op: &'static str,
) -> Result<Option<SqliteRow>> {
    sqlx::query(sql::resource_renew)
        .bind(lease.name)
        .bind(lease.holder)
        .bind(lease.token)
        .bind(now.saturating_add(span(ttl)))
        .bind(now)
        .fetch_optional(conn)
        .await
        .map_err(StoreError::db(op))
}

/// The rows of `statement` bound to `first` and the start of the last hour.
async fn in_last_hour(
    tx: &mut LiteTx,
    statement: &'static str,
    first: Option<&str>,
) -> Result<Vec<SqliteRow>> {
    let since = tx.now.saturating_sub(HOUR_US);
    let query = sqlx::query(statement);
    let query = match first {
        Some(group) => query.bind(group).bind(since),
        None if statement == sql::lock_list => query.bind(since),
        None => query.bind(None::<&str>).bind(since),
    };
    query
        .fetch_all(&mut **tx)
        .await
        .map_err(StoreError::db("resource moves"))
}

impl ResourceStatements for Lite<'_> {
    crate::store::resources::flow::resource_statements_alike!(sql);

    /// The holding and its history row.
    async fn resource_take(
        tx: &mut LiteTx,
        t: Taking<'_>,
        op: &'static str,
    ) -> Result<Option<SqliteRow>> {
        let statement = if t.insert {
            sql::lock_insert
        } else {
            sql::resource_take
        };
        let lease = sqlx::query(statement)
            .bind(t.name)
            .bind(t.holder)
            .bind(t.token)
            .bind(micros(t.now))
            .bind(micros(t.holding.lease_until))
            .bind(t.holding.at_least_until.map(micros))
            .bind(t.holding.at_most_until.map(micros))
            .fetch_optional(&mut **tx)
            .await
            .map_err(StoreError::db(op))?
            .ok_or_else(|| vanished(t.name))?;
        sqlx::query(sql::resource_history_insert)
            .bind(t.name)
            .execute(&mut **tx)
            .await
            .map_err(StoreError::db(op))?;
        Ok(Some(lease))
    }

    async fn resource_extend(
        tx: &mut LiteTx,
        lease: Fenced<'_>,
        ttl: Duration,
        op: &'static str,
    ) -> Result<Option<SqliteRow>> {
        let now = tx.now;
        extend(tx, lease, ttl, now, op).await
    }

    /// In a write transaction of its own.
    async fn resource_renew(&self, lease: Fenced<'_>, ttl: Duration) -> Result<Option<SqliteRow>> {
        const OP: &str = "resource_renew";
        let (mut tx, now) = write_tx(self.0, OP).await?;
        let renewed = extend(&mut tx, lease, ttl, now, OP).await?;
        commit(tx, OP).await?;
        Ok(renewed)
    }

    /// A release that landed marks the holding's history row (a retry of it finds it).
    async fn resource_release(tx: &mut LiteTx, lease: Fenced<'_>) -> Result<Option<SqliteRow>> {
        const OP: &str = "resource_release";
        let now = tx.now;
        let after = sqlx::query(sql::resource_release)
            .bind(lease.name)
            .bind(lease.holder)
            .bind(lease.token)
            .bind(now)
            .fetch_optional(&mut **tx)
            .await
            .map_err(StoreError::db(OP))?;
        if after.is_some() {
            sqlx::query(sql::resource_history_release)
                .bind(lease.name)
                .bind(lease.token)
                .bind(now)
                .execute(&mut **tx)
                .await
                .map_err(StoreError::db(OP))?;
        }
        Ok(after)
    }

    async fn lock_force_release(tx: &mut LiteTx, name: &str) -> Result<SqliteRow> {
        sqlx::query(sql::lock_force_release)
            .bind(name)
            .fetch_optional(&mut **tx)
            .await
            .map_err(StoreError::db("lock_force_release"))?
            .ok_or_else(|| vanished(name))
    }

    async fn lock_rows(tx: &mut LiteTx) -> Result<Vec<SqliteRow>> {
        in_last_hour(tx, sql::lock_list, None).await
    }

    async fn shard_group_count(tx: &mut LiteTx, name: &str) -> Result<Option<i64>> {
        sqlx::query_scalar(sql::shard_group_lock)
            .bind(name)
            .fetch_optional(&mut **tx)
            .await
            .map_err(StoreError::db("shard_group_create"))
    }

    /// The group, then its shards, each a free lease named `<group>#<shard>`; under the write
    /// lock no concurrent create can win.
    async fn shard_group_insert(tx: &mut LiteTx, name: &str, count: u32) -> Result<bool> {
        const OP: &str = "shard_group_create";
        let now = tx.now;
        sqlx::query(sql::shard_group_insert)
            .bind(name)
            .bind(i64::from(count))
            .bind(now)
            .execute(&mut **tx)
            .await
            .map_err(StoreError::db(OP))?;
        sqlx::query(sql::shard_group_insert_shards)
            .bind(name)
            .bind(i64::from(count))
            .execute(&mut **tx)
            .await
            .map_err(StoreError::db(OP))?;
        Ok(true)
    }

    async fn resource_moves(tx: &mut LiteTx, only: Option<&str>) -> Result<Vec<SqliteRow>> {
        in_last_hour(tx, sql::resource_moves, only).await
    }

    async fn shard_group_rows(
        tx: &mut LiteTx,
        only: Option<&str>,
        grace: Duration,
    ) -> Result<Vec<SqliteRow>> {
        let now = tx.now;
        sqlx::query(sql::shard_group_list)
            .bind(span(grace))
            .bind(only)
            .bind(now)
            .fetch_all(&mut **tx)
            .await
            .map_err(StoreError::db("shard groups"))
    }
}

/// Renews the memberships, then the leases (fenced as `extend`; (name, token) pairs travel as
/// one JSON array), in one write transaction.
pub(super) async fn resource_renew_many(
    pool: &SqlitePool,
    p: &ResourceRenewParams,
) -> Result<ResourceRenewOutcome> {
    const OP: &str = "resource_renew_many";
    check_ttl("ttl", p.ttl)?;
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
        let rows = sqlx::query(sql::resource_renew_many)
            .bind(owner)
            .bind(now)
            .bind(until)
            .bind(json_list(&p.leases)?)
            .fetch_all(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
        for r in &rows {
            let lease_until = get_time(r, "lease_until")?;
            out.renewed
                .push((get(r, "name")?, get(r, "token")?, lease_until));
        }
    }
    commit(tx, OP).await?;
    out.settle(p, &members);
    Ok(out)
}

/// Joins (or stays in) a group until now + ttl, in a write transaction.
pub(super) async fn shard_join(pool: &SqlitePool, p: &ShardJoinParams) -> Result<()> {
    const OP: &str = "shard_join";
    check_ttl("ttl", p.ttl)?;
    let (mut tx, now) = write_tx(pool, OP).await?;
    let found: Option<String> = sqlx::query_scalar(sql::shard_join)
        .bind(p.group.as_str())
        .bind(p.member.as_str())
        .bind(now)
        .bind(now.saturating_add(span(p.ttl)))
        .fetch_optional(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    joined(&p.group, found.is_some())?;
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

/// Prunes history rows older than `older_than`; memberships gone for as long go with them.
pub(super) async fn resource_history_prune(pool: &SqlitePool, older_than: Duration) -> Result<u64> {
    const OP: &str = "resource_history_prune";
    let (mut tx, now) = write_tx(pool, OP).await?;
    let cutoff = now.saturating_sub(span(older_than));
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
    crate::store::resources::fence(conn, sql::resource_fence, (name, holder, token)).await
}
