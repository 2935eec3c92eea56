//! Claim: one statement per batch, inside a short transaction that first serialises the
//! limited scopes it touches (DESIGN §5).
//!
//! ```text
//!   BEGIN
//!   task_claim_lock: policy guard (shared), then pg_try_advisory_xact_lock per limited scope,
//!                    and which types have waiting keyed tasks
//!   task_key_walk:   (those types only) the concurrency keys to visit, round-robin from this
//!                    store's cursors
//!   task_claim:      count running and recent starts per locked scope and running tasks per
//!                    visited key, pick due rows (keyless ones and each key's first) FOR
//!                    UPDATE SKIP LOCKED, cap per type and globally, set running / owner /
//!                    epoch+1 / lease_until
//!   rate_limit_stamp: (rate-limited scopes only) this claim's starts into their ledgers
//!   rate_limit_wait: (a short claim under a rate limit only) when a start is allowed again
//!   COMMIT           (locks released; the next claimer of the scope sees these rows counted)
//! ```
//!
//! Unlimited scopes take no lock, so claimers of unlimited types never wait on each other. A
//! limited scope whose lock is busy gets nothing this round and the batch says `contended`, so
//! the caller retries soon rather than waiting for the next poll.
//! When things fail: any error rolls the transaction back, so a claim either took its rows
//! with their leases or took nothing.

use sqlx::Row;

use super::db::Db;

use super::rows::{claimed_task, get};
use super::{secs, sql};
use crate::store::{ClaimBatch, ClaimParams, KeyCursors, Result, StoreError};

pub(super) async fn task_claim(
    pool: &Db,
    params: &ClaimParams,
    cursors: &KeyCursors,
) -> Result<ClaimBatch> {
    params.validate()?;
    let types: Vec<&str> = params.task_types.iter().map(|t| t.as_str()).collect();
    let mut tx = pool.begin().await.map_err(StoreError::db("task_claim"))?;
    let locked_rows = sqlx::query(sql::task_claim_lock)
        .bind(&types)
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db("task_claim_lock"))?;
    let mut locked = Vec::with_capacity(locked_rows.len());
    let mut rated = Vec::new();
    let mut contended = false;
    let mut busy: Vec<String> = Vec::new();
    let mut keyed: Vec<String> = Vec::new();
    for row in &locked_rows {
        let Some(scope) = get::<Option<String>>(row, "scope")? else {
            continue; // the policy guard, always granted (it may have waited)
        };
        if get::<String>(row, "kind")? == "keyed" {
            keyed.push(scope);
            continue;
        }
        if get::<bool>(row, "locked")? {
            if get::<Option<bool>>(row, "rated")?.unwrap_or(false) {
                rated.push(scope.clone());
            }
            locked.push(scope);
        } else {
            contended = true;
            busy.push(scope);
        }
    }
    // The keys to visit, walked only when some type has a waiting keyed task.
    let mut walk: Vec<(i32, String, String)> = Vec::new();
    let mut ends: Vec<(String, String)> = Vec::new();
    let mut roomy: Vec<String> = Vec::new();
    if !keyed.is_empty() {
        let (cursor_types, cursor_keys) = cursors.of(&types);
        let walked = sqlx::query(sql::task_key_walk)
            .bind(&keyed)
            .bind(&cursor_types)
            .bind(&cursor_keys)
            .bind(i32::try_from(params.batch).unwrap_or(i32::MAX))
            .fetch_all(&mut *tx)
            .await
            .map_err(StoreError::db("task_key_walk"))?;
        for row in &walked {
            let scope: String = get(row, "scope")?;
            match get::<String>(row, "kind")?.as_str() {
                "key" => walk.push((get(row, "walk_pos")?, scope, get(row, "walk_key")?)),
                "end" => ends.push((scope, get(row, "walk_key")?)),
                _ => {
                    if get::<bool>(row, "roomy")? {
                        roomy.push(scope);
                    }
                }
            }
        }
    }
    walk.sort_unstable_by_key(|(pos, _, _)| *pos);
    let walk: Vec<(&str, &str)> = walk
        .iter()
        .map(|(_, t, k)| (t.as_str(), k.as_str()))
        .collect();
    let (walk_types, walk_keys): (Vec<&str>, Vec<&str>) = walk.iter().copied().unzip();
    // Without a visited key, the claim without the key branch (its plan is half the size).
    let claim = if walk.is_empty() {
        sqlx::query(sql::task_claim)
    } else {
        sqlx::query(sql::task_claim_keyed)
    }
    .bind(params.owner.as_str())
    .bind(&types)
    .bind(i64::from(params.batch))
    .bind(secs(params.lease_ttl))
    .bind(&locked);
    let claim = if walk.is_empty() {
        claim
    } else {
        claim.bind(&walk_types).bind(&walk_keys)
    };
    let rows = claim
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db("task_claim"))?;
    let now = match rows.first() {
        Some(row) => get(row, "db_now")?,
        None => sqlx::query(sql::db_now)
            .fetch_one(&mut *tx)
            .await
            .and_then(|row| row.try_get("now"))
            .map_err(StoreError::db("task_claim"))?,
    };
    // The rate-limited scopes whose caps the claim applied: their ledgers get this claim's
    // starts (every type counts for the global scope), in this transaction, under their locks.
    let stamp: Vec<String> = match rows.first() {
        Some(row) => get::<Option<Vec<String>>>(row, "rated")?.unwrap_or_default(),
        None => Vec::new(),
    };
    if !stamp.is_empty() {
        let mut started = vec![0i32; stamp.len()];
        for row in &rows {
            let task_type: String = get(row, "task_type")?;
            for (scope, n) in stamp.iter().zip(started.iter_mut()) {
                if scope == "*" || *scope == task_type {
                    *n += 1;
                }
            }
        }
        sqlx::query(sql::rate_limit_stamp)
            .bind(&stamp)
            .bind(now)
            .bind(&started)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db("task_claim"))?;
    }
    // Short while a rate limit applies: find out when its window lets the next start in, so
    // the claimer sleeps that long rather than polling (one more statement, rate limits only;
    // a limit set after the lock statement read the policies is missed here, and the claimer
    // polls as usual).
    let rate_wait = if !rated.is_empty() && (rows.len() as u64) < u64::from(params.batch) {
        let wait_ms: Option<i64> = sqlx::query_scalar(sql::rate_limit_wait)
            .bind(&rated)
            .fetch_one(&mut *tx)
            .await
            .map_err(StoreError::db("task_claim"))?;
        wait_ms.map(|ms| std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(1)))
    } else {
        None
    };
    tx.commit().await.map_err(StoreError::db("task_claim"))?;
    let mut tasks = rows
        .iter()
        .map(|row| claimed_task(row, &params.owner, now))
        .collect::<Result<Vec<_>>>()?;
    // The key rounds move on only for types that had room (and whose lock, if they have a
    // limit, this claim held).
    let roomy: Vec<&str> = roomy
        .iter()
        .map(String::as_str)
        .filter(|t| !busy.iter().any(|b| b == t))
        .collect();
    let ends: Vec<(&str, &str)> = ends.iter().map(|(t, k)| (t.as_str(), k.as_str())).collect();
    cursors.advance(&roomy, &walk, &ends, &tasks);
    crate::store::lifecycle::claim_order(&mut tasks);
    Ok(ClaimBatch {
        now,
        tasks,
        contended,
        rate_wait,
    })
}
