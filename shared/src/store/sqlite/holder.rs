//! Claim and the holder writes (renew, progress, complete, release). Each runs in one
//! BEGIN IMMEDIATE transaction: it holds the write lock from its first read, so what it reads
//! is what it changes. Holder writes carry the lease key (task, owner, epoch) and change
//! nothing when it no longer matches: the outcome says `Fenced`.

use std::collections::{HashMap, HashSet};

use serde_json::json;
use sqlx::sqlite::SqliteRow;
use sqlx::{SqliteConnection, SqlitePool};

use super::rows::{self, get, micros, span, status, task};
use super::{commit, json_list, sql, write_tx};
use crate::domain::{BreakerState, LeaseEpoch, Policy, PolicyScope, RateLimit, TaskId, TaskStatus};
use crate::store::KeyCursors;
use crate::store::lifecycle;
use crate::store::{
    CheckpointParams, ClaimBatch, ClaimParams, CompleteOutcome, CompleteParams, HolderWrite,
    ProgressParams, ReleaseOutcome, ReleaseParams, RenewOutcome, RenewParams, RenewedLease, Result,
    StoreError,
};

async fn policies(tx: &mut SqliteConnection, op: &'static str) -> Result<Vec<Policy>> {
    Ok(policies_and_breakers(tx, op).await?.0)
}

/// The policy rows, and the types whose breaker is open or half-open with which (one read).
async fn policies_and_breakers(
    tx: &mut SqliteConnection,
    op: &'static str,
) -> Result<(Vec<Policy>, HashMap<String, BreakerState>)> {
    let found = sqlx::query(sql::policy_list)
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db(op))?;
    let mut tripped = HashMap::new();
    for row in &found {
        if let Some(b) = rows::breaker_status(row)?
            && b.state != BreakerState::Closed
        {
            tripped.insert(get::<String>(row, "scope")?, b.state);
        }
    }
    let policies = found.iter().map(rows::policy).collect::<Result<Vec<_>>>()?;
    Ok((policies, tripped))
}

/// Claim (DESIGN §4 order, §5 limits). The write lock serialises claimers, so the running
/// counts read here include every committed claim and none can commit before this one.
pub(super) async fn task_claim(
    pool: &SqlitePool,
    params: &ClaimParams,
    cursors: &KeyCursors,
) -> Result<ClaimBatch> {
    params.validate()?;
    const OP: &str = "task_claim";
    // The file watcher wakes claimers on every commit to the file: when nothing of these types
    // is due, say so from a read, without queueing for the write lock.
    let names: Vec<&str> = params.task_types.iter().map(|t| t.as_str()).collect();
    let probe = sqlx::query(sql::task_claim_probe)
        .bind(json_list(&names)?)
        .fetch_one(pool)
        .await
        .map_err(StoreError::db(OP))?;
    if !get::<bool>(&probe, "due")? {
        return Ok(ClaimBatch {
            now: rows::time(get(&probe, "now")?, "now")?,
            tasks: Vec::new(),
            contended: false,
            rate_wait: None,
        });
    }
    let (mut tx, now) = write_tx(pool, OP).await?;
    let now_time = rows::time(now, "now")?;
    let (policies, tripped) = policies_and_breakers(&mut tx, OP).await?;
    let global = policies.iter().find(|p| p.scope == PolicyScope::Global);
    let of_type = |t: &str| {
        policies
            .iter()
            .find(|p| matches!(&p.scope, PolicyScope::Type(x) if x.as_str() == t))
    };
    let batch = usize::try_from(params.batch).unwrap_or(usize::MAX);
    let mut global_cap = batch;
    if global.is_some_and(|g| g.paused) {
        global_cap = 0;
    }
    // Open breakers leave their type out; a half-open one lets one try start until the leader's
    // tick moves it (the tries that ended since it half-opened are read only then).
    let mut tried: HashMap<String, usize> = HashMap::new();
    if tripped.values().any(|s| *s == BreakerState::HalfOpen) {
        for row in sqlx::query(sql::breaker_tries)
            .fetch_all(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?
        {
            let n = usize::try_from(get::<i64>(&row, "tried")?).unwrap_or(0);
            tried.insert(get(&row, "scope")?, n);
        }
    }
    let limited = global.and_then(|g| g.max_concurrency).is_some()
        || params.task_types.iter().any(|t| {
            of_type(t.as_str())
                .and_then(|p| p.max_concurrency)
                .is_some()
                || tripped.contains_key(t.as_str())
        });
    let mut running: HashMap<String, usize> = HashMap::new();
    let mut running_total = 0usize;
    if limited && global_cap > 0 {
        let counts = sqlx::query(sql::task_count_running)
            .fetch_all(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
        for row in &counts {
            let n = usize::try_from(get::<i64>(row, "n")?).unwrap_or(0);
            running_total += n;
            running.insert(get(row, "task_type")?, n);
        }
    }
    if let Some(limit) = global.and_then(|g| g.max_concurrency) {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        global_cap = global_cap.min(limit.saturating_sub(running_total));
    }
    // Rate limits of the global scope and of these types: what their windows ending now hold.
    // Claims of types without one (and no global one) read no ledger.
    let mut rates: Vec<RateWindow> = policies
        .iter()
        .filter(|p| p.scope == PolicyScope::Global || names.contains(&p.scope.key()))
        .filter_map(|p| {
            p.rate_limit.map(|limit| RateWindow {
                scope: p.scope.key().to_string(),
                limit,
                used: 0,
            })
        })
        .collect();
    if !rates.is_empty() && global_cap > 0 {
        let scopes: Vec<&str> = rates.iter().map(|r| r.scope.as_str()).collect();
        let found = sqlx::query(sql::rate_limit_used)
            .bind(now)
            .bind(json_list(&scopes)?)
            .fetch_all(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
        for row in &found {
            let scope: String = get(row, "scope")?;
            let used = usize::try_from(get::<i64>(row, "used")?).unwrap_or(usize::MAX);
            if let Some(rate) = rates.iter_mut().find(|r| r.scope == scope) {
                rate.used = used;
            }
        }
    }
    let rate_left = |scope: &str| {
        rates
            .iter()
            .find(|r| r.scope == scope)
            .map(RateWindow::left)
    };
    if let Some(left) = rate_left("*") {
        global_cap = global_cap.min(left);
    }
    // Capacity left per open type (None: unlimited); paused and full types are left out.
    let mut type_cap: HashMap<&str, Option<usize>> = HashMap::new();
    for t in &params.task_types {
        let policy = of_type(t.as_str());
        let breaker = tripped.get(t.as_str());
        if policy.is_some_and(|p| p.paused) || breaker == Some(&BreakerState::Open) {
            continue;
        }
        let limit = match (policy.and_then(|p| p.max_concurrency), breaker) {
            (limit, Some(BreakerState::HalfOpen)) => Some(limit.unwrap_or(1).min(1)),
            (limit, _) => limit,
        };
        // A half-open breaker lets one task try until the leader's next tick moves it.
        let tries = tried.get(t.as_str()).copied().unwrap_or(0);
        let running_cap = limit.map(|limit| {
            let limit = usize::try_from(limit).unwrap_or(usize::MAX);
            limit
                .saturating_sub(running.get(t.as_str()).copied().unwrap_or(0))
                .saturating_sub(tries)
        });
        let cap = match (running_cap, rate_left(t.as_str())) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if cap != Some(0) {
            type_cap.insert(t.as_str(), cap);
        }
    }
    if global_cap == 0 || type_cap.is_empty() {
        let rate_wait = rate_wait(&mut tx, &rates, &HashMap::new(), 0, now).await?;
        commit(tx, OP).await?;
        return Ok(ClaimBatch {
            now: now_time,
            tasks: Vec::new(),
            contended: false,
            rate_wait,
        });
    }
    let open: Vec<&str> = type_cap.keys().copied().collect();
    let candidates = sqlx::query(sql::task_claim_candidates)
        .bind(now)
        .bind(json_list(&open)?)
        .bind(i64::from(params.batch))
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    let mut offered = Vec::with_capacity(candidates.len());
    for (n, row) in candidates.iter().enumerate() {
        offered.push(Offer::of(row, 1, n + 1)?);
    }
    let walk = offer_keyed(&mut tx, &open, &policies, batch, now, cursors, &mut offered).await?;
    // Claim order, but among equal priorities the first task of every key (a keyless task is a
    // key of its own) before the second of any, and within a rank the keys in round order
    // interleaved with the keyless tasks in claim order: keys share the batch and take turns
    // even when a cap cuts it.
    offered.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then(a.key_rank.cmp(&b.key_rank))
            .then(a.pos.cmp(&b.pos))
            .then(a.available_at.cmp(&b.available_at))
            .then(a.id.cmp(&b.id))
    });
    let mut chosen = Vec::with_capacity(offered.len());
    for offer in &offered {
        if chosen.len() >= global_cap {
            break;
        }
        if let Some(cap) = type_cap.get_mut(offer.task_type.as_str()) {
            match cap {
                Some(0) => continue,
                Some(left) => *left -= 1,
                None => {}
            }
            chosen.push(offer.id);
        }
    }
    let mut tasks = if chosen.is_empty() {
        Vec::new()
    } else {
        let claimed = sqlx::query(sql::task_claim)
            .bind(params.owner.as_str())
            .bind(now.saturating_add(span(params.lease_ttl)))
            .bind(now)
            .bind(json_list(&chosen)?)
            .fetch_all(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
        claimed.iter().map(task).collect::<Result<Vec<_>>>()?
    };
    // The ledger: one row per rate-limited scope that started tasks here, and its rows that
    // left the window go.
    let mut started: HashMap<&str, usize> = HashMap::new();
    for t in &tasks {
        *started.entry(t.task_type.as_str()).or_default() += 1;
    }
    for rate in &rates {
        let n = if rate.scope == "*" {
            tasks.len()
        } else {
            started.get(rate.scope.as_str()).copied().unwrap_or(0)
        };
        if n > 0 {
            sqlx::query(sql::rate_limit_stamp)
                .bind(&rate.scope)
                .bind(now)
                .bind(i64::try_from(n).unwrap_or(i64::MAX))
                .execute(&mut *tx)
                .await
                .map_err(StoreError::db(OP))?;
        }
        sqlx::query(sql::rate_limit_prune)
            .bind(&rate.scope)
            .bind(now.saturating_sub(rate.period_us()))
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
    }
    let rate_wait = if tasks.len() < batch {
        rate_wait(&mut tx, &rates, &started, tasks.len(), now).await?
    } else {
        None
    };
    commit(tx, OP).await?;
    let walked: Vec<(&str, &str)> = walk.iter().map(|(t, k)| (t.as_str(), k.as_str())).collect();
    // The key rounds of the types that had room move on (the others were not walked).
    cursors.advance(&open, &walked, &[], &tasks);
    crate::store::lifecycle::claim_order(&mut tasks);
    Ok(ClaimBatch {
        now: now_time,
        tasks,
        contended: false,
        rate_wait,
    })
}

/// A waiting task a claim may start: a keyless candidate (rank 1) or one of a key's first.
struct Offer {
    id: i64,
    task_type: String,
    priority: i64,
    available_at: i64,
    /// Its place among the offered tasks of its key (1: the key's first).
    key_rank: usize,
    /// Its key's place in the round (a keyless task: its place among the keyless ones).
    pos: usize,
}

impl Offer {
    fn of(row: &sqlx::sqlite::SqliteRow, key_rank: usize, pos: usize) -> Result<Self> {
        Ok(Self {
            id: get(row, "id")?,
            task_type: get(row, "task_type")?,
            priority: get(row, "priority")?,
            available_at: get(row, "available_at")?,
            key_rank,
            pos,
        })
    }
}

/// The tasks with a concurrency key that a claim may start, added to `offered`: for each open
/// type, the keys of its round (store/key_cursors.rs) from the key after the cursor, wrapping
/// round to the first, at most the batch plus the type's running keyed tasks plus a few keys;
/// each key offers its first due tasks, at most its share of the batch and, under a per-key
/// limit, at most the limit minus its running tasks (the write lock makes the count exact).
/// Returns the keys visited (type, key), in order.
async fn offer_keyed(
    tx: &mut SqliteConnection,
    open: &[&str],
    policies: &[Policy],
    batch: usize,
    now: i64,
    cursors: &KeyCursors,
    offered: &mut Vec<Offer>,
) -> Result<Vec<(String, String)>> {
    const OP: &str = "task_claim";
    let per_key = |t: &str| {
        policies
            .iter()
            .find(|p| p.scope.key() == t)
            .and_then(|p| p.per_key_concurrency)
    };
    // Running tasks per key, read only when a per-key limit applies (without one no key is
    // ever full).
    let mut running: HashMap<(String, String), usize> = HashMap::new();
    let limited: Vec<&str> = open
        .iter()
        .copied()
        .filter(|t| per_key(t).is_some())
        .collect();
    let counts = if limited.is_empty() {
        Vec::new()
    } else {
        sqlx::query(sql::task_count_running_keys)
            .bind(json_list(&limited)?)
            .fetch_all(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?
    };
    for row in &counts {
        let n = usize::try_from(get::<i64>(row, "n")?).unwrap_or(0);
        running.insert((get(row, "task_type")?, get(row, "concurrency_key")?), n);
    }
    let mut walked = Vec::new();
    for t in open {
        let cursor = cursors.get(t).unwrap_or_default();
        let running_keyed: usize = running
            .iter()
            .filter(|((rt, _), _)| rt == t)
            .map(|(_, n)| *n)
            .sum();
        let budget = (batch + running_keyed + 8).min(1000);
        let walk = |after: String, upto: Option<String>, limit: usize| {
            sqlx::query_scalar::<_, String>(sql::task_key_walk)
                .bind(*t)
                .bind(after)
                .bind(upto)
                .bind(i64::try_from(limit).unwrap_or(i64::MAX))
                .bind(now)
        };
        let mut keys = walk(cursor.clone(), None, budget)
            .fetch_all(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
        if keys.len() < budget && !cursor.is_empty() {
            let wrapped = walk(String::new(), Some(cursor), budget - keys.len())
                .fetch_all(&mut *tx)
                .await
                .map_err(StoreError::db(OP))?;
            keys.extend(wrapped);
        }
        if keys.is_empty() {
            continue;
        }
        // What each key may still start (its per-key limit minus its running tasks, the batch
        // without a limit); each key with room offers at most its share of the batch.
        let room = |key: &str| match per_key(t) {
            None => batch,
            Some(limit) => {
                let limit = usize::try_from(limit).unwrap_or(usize::MAX);
                let busy = running
                    .get(&(t.to_string(), key.to_string()))
                    .copied()
                    .unwrap_or(0);
                limit.saturating_sub(busy)
            }
        };
        let with_room = keys.iter().filter(|k| room(k) > 0).count();
        let share = batch.div_ceil(with_room.max(1));
        let mut groups: Vec<Vec<Offer>> = Vec::new();
        for key in keys {
            let cap = room(&key).min(share);
            if cap > 0 {
                let heads = sqlx::query(sql::task_key_heads)
                    .bind(*t)
                    .bind(&key)
                    .bind(now)
                    .bind(i64::try_from(cap).unwrap_or(i64::MAX))
                    .fetch_all(&mut *tx)
                    .await
                    .map_err(StoreError::db(OP))?;
                let pos = walked.len() + 1;
                let group = heads
                    .iter()
                    .enumerate()
                    .map(|(rank, row)| Offer::of(row, rank + 1, pos))
                    .collect::<Result<Vec<_>>>()?;
                if !group.is_empty() {
                    groups.push(group);
                }
            }
            walked.push((t.to_string(), key));
        }
        // As many keys as the batch: those whose first task has the highest priority, among
        // equals the first in the round (a stable sort keeps the round's order). The walk visits
        // a few more keys than the batch in case some have nothing due, and the keys it visited
        // but did not need come first next round.
        groups.sort_by_key(|g| std::cmp::Reverse(g.first().map_or(i64::MIN, |o| o.priority)));
        offered.extend(groups.into_iter().take(batch).flatten());
    }
    Ok(walked)
}

/// One rate-limited scope's window ending at the claim's now: its limit and the starts its
/// ledger holds there.
struct RateWindow {
    scope: String,
    limit: RateLimit,
    used: usize,
}

impl RateWindow {
    fn left(&self) -> usize {
        usize::try_from(self.limit.starts)
            .unwrap_or(usize::MAX)
            .saturating_sub(self.used)
    }

    fn period_us(&self) -> i64 {
        self.limit.period_ms().saturating_mul(1000)
    }
}

/// Of the windows full after this claim (which started `started` per type, `total` in all),
/// how long until the earliest lets a start in again: read from their ledgers (this claim's
/// starts included), in the claim's transaction. `None` when none is full.
async fn rate_wait(
    tx: &mut SqliteConnection,
    rates: &[RateWindow],
    started: &HashMap<&str, usize>,
    total: usize,
    now: i64,
) -> Result<Option<std::time::Duration>> {
    let full: Vec<&str> = rates
        .iter()
        .filter(|r| {
            let n = if r.scope == "*" {
                total
            } else {
                started.get(r.scope.as_str()).copied().unwrap_or(0)
            };
            r.used.saturating_add(n) >= usize::try_from(r.limit.starts).unwrap_or(usize::MAX)
        })
        .map(|r| r.scope.as_str())
        .collect();
    if full.is_empty() {
        return Ok(None);
    }
    let wait_us: Option<i64> = sqlx::query_scalar(sql::rate_limit_wait)
        .bind(now)
        .bind(json_list(&full)?)
        .fetch_one(&mut *tx)
        .await
        .map_err(StoreError::db("task_claim"))?;
    Ok(
        wait_us
            .map(|us| std::time::Duration::from_micros(u64::try_from(us).unwrap_or(0).max(1000))),
    )
}

/// The rows of `ids` that `owner` holds at the given epochs (leased, key matching).
async fn held_rows(
    tx: &mut SqliteConnection,
    owner: &str,
    leases: &[(TaskId, LeaseEpoch)],
    op: &'static str,
) -> Result<Vec<SqliteRow>> {
    let ids: Vec<i64> = leases.iter().map(|(id, _)| id.0).collect();
    let wanted: HashSet<(i64, i64)> = leases.iter().map(|(id, e)| (id.0, e.0)).collect();
    let found = sqlx::query(sql::lease_list_held)
        .bind(json_list(&ids)?)
        .bind(owner)
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db(op))?;
    let mut held = Vec::with_capacity(found.len());
    for row in found {
        let key = (get::<i64>(&row, "id")?, get::<i64>(&row, "lease_epoch")?);
        if wanted.contains(&key) {
            held.push(row);
        }
    }
    Ok(held)
}

pub(super) async fn lease_renew_many(
    pool: &SqlitePool,
    params: &RenewParams,
) -> Result<RenewOutcome> {
    params.validate()?;
    const OP: &str = "lease_renew_many";
    let (mut tx, now) = write_tx(pool, OP).await?;
    let held = held_rows(&mut tx, params.owner.as_str(), &params.leases, OP).await?;
    let until = now.saturating_add(span(params.lease_ttl));
    let mut renewed = Vec::with_capacity(held.len());
    let mut ids = Vec::with_capacity(held.len());
    for row in &held {
        let id = get::<i64>(row, "id")?;
        ids.push(id);
        renewed.push(RenewedLease {
            id: TaskId(id),
            epoch: LeaseEpoch(get(row, "lease_epoch")?),
            lease_until: rows::time(until, "lease_until")?,
            cancel_requested: get::<&str>(row, "status")? == "cancel_requested",
        });
    }
    if !ids.is_empty() {
        sqlx::query(sql::lease_renew_many)
            .bind(until)
            .bind(now)
            .bind(json_list(&ids)?)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
    }
    if let Some(alive_for) = params.alive_for {
        // The heartbeat connection's proof of life, in the same transaction (one per beat).
        sqlx::query(sql::agent_extend_liveness)
            .bind(params.owner.as_str())
            .bind(now.saturating_add(span(alive_for)))
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
    }
    commit(tx, OP).await?;
    let now = rows::time(now, "now")?;
    Ok(RenewOutcome::settled(now, renewed, &params.leases))
}

pub(super) async fn task_progress(
    pool: &SqlitePool,
    params: &ProgressParams,
) -> Result<HolderWrite> {
    let progress = rows::to_text(&params.progress, "task progress")?;
    holder_write(
        pool,
        "task_progress",
        sql::task_progress,
        &params.key,
        progress,
    )
    .await
}

pub(super) async fn task_checkpoint(
    pool: &SqlitePool,
    params: &CheckpointParams,
) -> Result<HolderWrite> {
    let checkpoint = rows::to_text(&params.checkpoint, "task checkpoint")?;
    holder_write(
        pool,
        "task_checkpoint",
        sql::task_checkpoint,
        &params.key,
        checkpoint,
    )
    .await
}

/// A fenced write of one JSON column by the holder of `key`: `statement` takes ?1 id, ?2
/// owner, ?3 epoch, ?4 the value, ?5 now (which it may leave unused).
async fn holder_write(
    pool: &SqlitePool,
    op: &'static str,
    statement: &'static str,
    key: &crate::LeaseKey,
    value: String,
) -> Result<HolderWrite> {
    let (mut tx, now) = write_tx(pool, op).await?;
    let done = sqlx::query(statement)
        .bind(key.id.0)
        .bind(key.owner.as_str())
        .bind(key.epoch.0)
        .bind(value)
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db(op))?;
    commit(tx, op).await?;
    Ok(if done.rows_affected() == 1 {
        HolderWrite::Held
    } else {
        HolderWrite::Fenced
    })
}

/// What one completion does to its row.
struct Decision {
    status: TaskStatus,
    available_at: Option<i64>,
    last_error: Option<String>,
    result: Option<String>,
    finished_at: Option<i64>,
    attempt_error: Option<String>,
    /// A snooze: the attempt is given back and one more snooze counted.
    snoozed: bool,
    /// The attempt row's outcome.
    attempt_outcome: &'static str,
}

pub(super) async fn task_complete_many(
    pool: &SqlitePool,
    batch: &[CompleteParams],
) -> Result<Vec<CompleteOutcome>> {
    const OP: &str = "task_complete";
    let (mut tx, now) = write_tx(pool, OP).await?;
    let ids: Vec<i64> = batch.iter().map(|p| p.key.id.0).collect();
    let found = sqlx::query(sql::task_complete_read)
        .bind(json_list(&ids)?)
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    let mut by_id: HashMap<i64, SqliteRow> = HashMap::with_capacity(found.len());
    for row in found {
        by_id.insert(get(&row, "id")?, row);
    }
    let needs_policy = batch.iter().any(|p| lifecycle::needs_row(&p.completion));
    let policies = if needs_policy {
        policies(&mut tx, OP).await?
    } else {
        Vec::new()
    };
    let mut outcomes = Vec::with_capacity(batch.len());
    let mut updates = Vec::with_capacity(batch.len());
    let mut attempts = Vec::with_capacity(batch.len());
    for params in batch {
        let key = &params.key;
        let row = by_id.get(&key.id.0);
        let held = match row {
            Some(row) => {
                let st = get::<&str>(row, "status")?;
                get::<Option<&str>>(row, "lease_owner")? == Some(key.owner.as_str())
                    && get::<i64>(row, "lease_epoch")? == key.epoch.0
                    && (st == "running" || st == "cancel_requested")
            }
            None => false,
        };
        let Some(row) = row.filter(|_| held) else {
            outcomes.push(repeat_or_fenced(&mut tx, params, row).await?);
            continue;
        };
        let d = decide(row, params, &policies, now)?;
        updates.push(json!({
            "id": key.id.0,
            "status": d.status.as_str(),
            "available_at": d.available_at,
            "last_error": d.last_error,
            "result": d.result,
            "finished_at": d.finished_at,
            "snoozed": d.snoozed,
        }));
        attempts.push(json!({
            "id": key.id.0,
            "epoch": key.epoch.0,
            "attempt": get::<i64>(row, "attempt")?,
            "agent": key.owner.as_str(),
            "started_at": get::<Option<i64>>(row, "started_at")?.unwrap_or(now),
            "outcome": d.attempt_outcome,
            "error": d.attempt_error,
        }));
        outcomes.push(CompleteOutcome::Applied {
            status: d.status,
            retry_at: match d.available_at {
                Some(at) => Some(rows::time(at, "retry_at")?),
                None => None,
            },
        });
    }
    // Two statements for the whole batch, whatever its size: the decisions travel as one JSON
    // array each (JSON texts such as last_error travel as JSON strings).
    if !updates.is_empty() {
        sqlx::query(sql::task_complete_many)
            .bind(rows::to_text(&updates, "completions")?)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
        sqlx::query(sql::task_attempt_insert_many)
            .bind(rows::to_text(&attempts, "attempts")?)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
    }
    commit(tx, OP).await?;
    Ok(outcomes)
}

/// A completion whose key no longer matches: a repeat of an outcome already recorded for the
/// same (task, epoch, owner), or fenced.
async fn repeat_or_fenced(
    tx: &mut SqliteConnection,
    params: &CompleteParams,
    row: Option<&SqliteRow>,
) -> Result<CompleteOutcome> {
    let Some(row) = row else {
        return Ok(CompleteOutcome::Fenced);
    };
    let key = &params.key;
    let recorded: Option<i64> = sqlx::query_scalar(sql::task_attempt_outcomes)
        .bind(key.id.0)
        .bind(key.epoch.0)
        .bind(key.owner.as_str())
        .bind(params.completion.outcome_name())
        .fetch_optional(&mut *tx)
        .await
        .map_err(StoreError::db("task_complete"))?;
    Ok(match recorded {
        Some(_) => CompleteOutcome::Repeated {
            status: status(get::<&str>(row, "status")?)?,
        },
        None => CompleteOutcome::Fenced,
    })
}

/// The row's new values for a completion, as [`lifecycle`] decides it: values it keeps are
/// read from the row (the update statement writes every column it names).
fn decide(
    row: &SqliteRow,
    params: &CompleteParams,
    policies: &[Policy],
    now: i64,
) -> Result<Decision> {
    let settled = lifecycle::settle_held(
        &params.completion,
        &crate::store::rows::failed_attempt(row)?,
        get::<&str>(row, "task_type")?,
        policies,
        rows::time(now, "now")?,
    )
    .ok_or(StoreError::Corrupt {
        what: "completion",
        detail: "an outcome without a decision".into(),
    })?;
    let error = settled
        .error
        .as_ref()
        .map(|e| rows::to_text(e, "task error"))
        .transpose()?;
    let result = match &settled.result {
        lifecycle::ResultWrite::Keep => get(row, "result")?,
        lifecycle::ResultWrite::Set(value) => value
            .as_ref()
            .map(|v| rows::to_text(v, "task result"))
            .transpose()?,
    };
    Ok(Decision {
        status: settled.status,
        available_at: settled.retry_at.map(micros),
        last_error: match &error {
            Some(text) => Some(text.clone()),
            None => get(row, "last_error")?,
        },
        result,
        finished_at: settled.finished().then_some(now),
        attempt_error: error,
        snoozed: settled.snoozed,
        attempt_outcome: settled.attempt_outcome(&params.completion),
    })
}

pub(super) async fn lease_release_many(
    pool: &SqlitePool,
    params: &ReleaseParams,
) -> Result<ReleaseOutcome> {
    const OP: &str = "lease_release_many";
    let (mut tx, now) = write_tx(pool, OP).await?;
    let held = held_rows(&mut tx, params.owner.as_str(), &params.leases, OP).await?;
    let mut released = Vec::with_capacity(held.len());
    for row in &held {
        let id: i64 = get(row, "id")?;
        let cancel = get::<&str>(row, "status")? == "cancel_requested";
        let attempt: i64 = get(row, "attempt")?;
        sqlx::query(sql::lease_release)
            .bind(id)
            .bind(if cancel { "cancelled" } else { "queued" })
            .bind(if cancel {
                attempt
            } else {
                (attempt - 1).max(0)
            })
            .bind(now)
            .bind(cancel.then_some(now))
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
        sqlx::query(sql::task_attempt_insert)
            .bind(id)
            .bind(get::<i64>(row, "lease_epoch")?)
            .bind(attempt)
            .bind(params.owner.as_str())
            .bind(get::<Option<i64>>(row, "started_at")?.unwrap_or(now))
            .bind(now)
            .bind(if cancel { "cancelled" } else { "released" })
            .bind(None::<String>)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
        released.push(TaskId(id));
    }
    // The rest changed nothing: each was given back already by this owner (a retry whose
    // first reply was lost: a repeat) or fenced.
    let done: HashSet<TaskId> = released.iter().copied().collect();
    let (mut repeated, mut fenced) = (Vec::new(), Vec::new());
    for (id, epoch) in params.leases.iter().filter(|(id, _)| !done.contains(id)) {
        let given_back: Option<i64> = sqlx::query_scalar(sql::lease_release_repeated)
            .bind(id.0)
            .bind(epoch.0)
            .bind(params.owner.as_str())
            .fetch_optional(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
        match given_back {
            Some(_) => repeated.push(*id),
            None => fenced.push(*id),
        }
    }
    commit(tx, OP).await?;
    Ok(ReleaseOutcome {
        released,
        repeated,
        fenced,
    })
}
