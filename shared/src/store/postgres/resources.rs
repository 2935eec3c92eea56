//! Resource leases on PostgreSQL: the statements of locks, shard groups and their members.
//! What each operation decides, and in which order it runs them, is in
//! [`crate::store::resources::flow`]; here each operation's transaction is READ COMMITTED and
//! locks the row it decides on (`FOR UPDATE`), so two acquirers of one lease queue on the row
//! and the second sees what the first wrote. Times are the database's `now()`. Renewals are
//! one statement for all of a holder's leases and memberships.

use std::collections::BTreeSet;
use std::time::Duration;

use sqlx::PgConnection;
use sqlx::postgres::PgRow;

use super::db::Db;

use super::operator::Pg;
use super::rows::get;
use super::{secs, sql};
use crate::domain::AgentId;
use crate::store::resources::flow::{Fenced, ResourceStatements, Taking};
use crate::store::resources::{
    GroupName, ResourceRenewOutcome, ResourceRenewParams, ShardJoinParams,
};
use crate::store::{HolderWrite, Result, StoreError};

type Tx = sqlx::Transaction<'static, sqlx::Postgres>;

async fn extend<'c>(
    conn: impl sqlx::PgExecutor<'c>,
    lease: Fenced<'_>,
    ttl: Duration,
    op: &'static str,
) -> Result<Option<PgRow>> {
    sqlx::query(sql::resource_renew)
        .bind(lease.name)
        .bind(lease.holder)
        .bind(lease.token)
        .bind(secs(ttl))
        .fetch_optional(conn)
        .await
        .map_err(StoreError::db(op))
}

impl ResourceStatements for Pg<'_> {
    crate::store::resources::flow::resource_statements_alike!(sql);

    /// The history row is written by the statement itself.
    async fn resource_take(tx: &mut Tx, t: Taking<'_>, op: &'static str) -> Result<Option<PgRow>> {
        let statement = if t.insert {
            sql::lock_insert
        } else {
            sql::resource_take
        };
        sqlx::query(statement)
            .bind(t.name)
            .bind(t.holder)
            .bind(t.token)
            .bind(t.now)
            .bind(t.holding.lease_until)
            .bind(t.holding.at_least_until)
            .bind(t.holding.at_most_until)
            .fetch_optional(&mut **tx)
            .await
            .map_err(StoreError::db(op))
    }

    async fn resource_extend(
        tx: &mut Tx,
        lease: Fenced<'_>,
        ttl: Duration,
        op: &'static str,
    ) -> Result<Option<PgRow>> {
        extend(&mut **tx, lease, ttl, op).await
    }

    /// One statement, outside any transaction.
    async fn resource_renew(&self, lease: Fenced<'_>, ttl: Duration) -> Result<Option<PgRow>> {
        const OP: &str = "resource_renew";
        extend(self.0, lease, ttl, OP).await
    }

    async fn resource_release(tx: &mut Tx, lease: Fenced<'_>) -> Result<Option<PgRow>> {
        sqlx::query(sql::resource_release)
            .bind(lease.name)
            .bind(lease.holder)
            .bind(lease.token)
            .fetch_optional(&mut **tx)
            .await
            .map_err(StoreError::db("resource_release"))
    }

    async fn lock_force_release(tx: &mut Tx, name: &str) -> Result<PgRow> {
        sqlx::query(sql::lock_force_release)
            .bind(name)
            .fetch_one(&mut **tx)
            .await
            .map_err(StoreError::db("lock_force_release"))
    }

    async fn lock_rows(tx: &mut Tx) -> Result<Vec<PgRow>> {
        sqlx::query(sql::lock_list)
            .fetch_all(&mut **tx)
            .await
            .map_err(StoreError::db("lock_list"))
    }

    async fn shard_group_count(tx: &mut Tx, name: &str) -> Result<Option<i64>> {
        let count: Option<i32> = sqlx::query_scalar(sql::shard_group_lock)
            .bind(name)
            .fetch_optional(&mut **tx)
            .await
            .map_err(StoreError::db("shard_group_create"))?;
        Ok(count.map(i64::from))
    }

    /// The group and its shards in one statement; nothing when the group exists.
    async fn shard_group_insert(tx: &mut Tx, name: &str, count: u32) -> Result<bool> {
        let made = sqlx::query(sql::shard_group_insert)
            .bind(name)
            .bind(i32::try_from(count).unwrap_or(i32::MAX))
            .fetch_all(&mut **tx)
            .await
            .map_err(StoreError::db("shard_group_create"))?;
        Ok(!made.is_empty())
    }

    async fn resource_moves(tx: &mut Tx, only: Option<&str>) -> Result<Vec<PgRow>> {
        sqlx::query(sql::resource_moves)
            .bind(only)
            .fetch_all(&mut **tx)
            .await
            .map_err(StoreError::db("resource_moves"))
    }

    async fn shard_group_rows(
        tx: &mut Tx,
        only: Option<&str>,
        grace: Duration,
    ) -> Result<Vec<PgRow>> {
        sqlx::query(sql::shard_group_list)
            .bind(secs(grace))
            .bind(only)
            .fetch_all(&mut **tx)
            .await
            .map_err(StoreError::db("shard groups"))
    }
}

/// Renews every lease and membership of `p` in one statement: its rows are the leases
/// renewed (`kind` lease) and the groups whose membership was (`kind` member).
pub(super) async fn resource_renew_many(
    pool: &Db,
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

pub(super) async fn shard_join(pool: &Db, p: &ShardJoinParams) -> Result<()> {
    crate::store::resources::check_ttl("ttl", p.ttl)?;
    let joined = sqlx::query(sql::shard_join)
        .bind(p.group.as_str())
        .bind(p.member.as_str())
        .bind(secs(p.ttl))
        .fetch_optional(pool)
        .await
        .map_err(StoreError::db("shard_join"))?;
    crate::store::resources::joined(&p.group, joined.is_some())
}

pub(super) async fn shard_leave(pool: &Db, group: &GroupName, member: &AgentId) -> Result<()> {
    sqlx::query(sql::shard_leave)
        .bind(group.as_str())
        .bind(member.as_str())
        .execute(pool)
        .await
        .map_err(StoreError::db("shard_leave"))?;
    Ok(())
}

/// Prunes history rows older than `older_than` (memberships go with their group's shards).
pub(super) async fn resource_history_prune(pool: &Db, older_than: Duration) -> Result<u64> {
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
    crate::store::resources::fence(conn, sql::resource_fence, (name, holder, token)).await
}
