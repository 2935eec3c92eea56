//! The agent registry and the leader lease (the rules of the PostgreSQL store's registry).
//!
//! ```text
//!   leader row: (owner, term, lease_until)
//!   elect:  free, mine, or lease_until + grace < now  → mine; a new owner starts term+1
//!   renew:  (owner, term) must match                   → Held, else Fenced
//!   resign: (owner, term) must match                   → owner cleared; next elect is term+1
//! ```
//!
//! Registration input arrives validated (the Store layer, `store/driver.rs`).

use sqlx::SqlitePool;

use super::rows::{self, agent, get, span};
use super::{commit, json_list, read_tx, sql, write_tx};
use crate::domain::AgentId;
use crate::store::{
    AgentHeartbeatParams, AgentRecord, AgentRegisterParams, HolderWrite, LeaderElectParams,
    LeaderOutcome, LeaderRenewParams, LeaderRenewal, Result, StoreError,
};

fn non_negative(field: &'static str, value: u32) -> Result<i64> {
    if i32::try_from(value).is_err() {
        return Err(StoreError::Invalid(crate::ValidationError::OutOfRange {
            field,
            detail: format!("{value} is too large"),
        }));
    }
    Ok(i64::from(value))
}

pub(super) async fn agent_register(
    pool: &SqlitePool,
    p: &AgentRegisterParams,
) -> Result<AgentRecord> {
    const OP: &str = "agent_register";
    let types: Vec<&str> = p.task_types.iter().map(|t| t.as_str()).collect();
    let (mut tx, now) = write_tx(pool, OP).await?;
    let seq: i64 = sqlx::query_scalar(sql::agent_seq_next)
        .fetch_one(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    let id = format!("{}#{seq}", p.name);
    sqlx::query(sql::agent_register)
        .bind(&id)
        .bind(&p.name)
        .bind(&p.host)
        .bind(non_negative("pid", p.pid)?)
        .bind(p.grpc_address.as_deref())
        .bind(&p.version)
        .bind(json_list(&types)?)
        .bind(non_negative("local_concurrency", p.local_concurrency)?)
        .bind(now)
        .bind(now.saturating_add(span(p.alive_for)))
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    let row = sqlx::query(sql::agent_get)
        .bind(now)
        .bind(&id)
        .fetch_one(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    let record = agent(&row)?;
    commit(tx, OP).await?;
    Ok(record)
}

pub(super) async fn agent_heartbeat(pool: &SqlitePool, p: &AgentHeartbeatParams) -> Result<bool> {
    const OP: &str = "agent_heartbeat";
    let active = non_negative("active", p.active)?;
    let local = non_negative("local_concurrency", p.local_concurrency)?;
    let (mut tx, now) = write_tx(pool, OP).await?;
    let done = sqlx::query(sql::agent_heartbeat)
        .bind(p.id.as_str())
        .bind(now)
        .bind(p.state.as_str())
        .bind(active)
        .bind(local)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    commit(tx, OP).await?;
    Ok(done.rows_affected() == 1)
}

pub(super) async fn agent_list(pool: &SqlitePool) -> Result<Vec<AgentRecord>> {
    const OP: &str = "agent_list";
    let (mut tx, now) = read_tx(pool, OP).await?;
    let found = sqlx::query(sql::agent_list)
        .bind(now)
        .bind(now.saturating_sub(3_600_000_000))
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    commit(tx, OP).await?;
    found.iter().map(agent).collect()
}

pub(super) async fn agent_mark_stopped(pool: &SqlitePool, id: &AgentId) -> Result<()> {
    const OP: &str = "agent_mark_stopped";
    let (mut tx, now) = write_tx(pool, OP).await?;
    sqlx::query(sql::agent_mark_stopped)
        .bind(id.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    commit(tx, OP).await
}

pub(super) async fn leader_attempt_elect(
    pool: &SqlitePool,
    p: &LeaderElectParams,
) -> Result<LeaderOutcome> {
    const OP: &str = "leader_attempt_elect";
    let (mut tx, now) = write_tx(pool, OP).await?;
    let row = sqlx::query(sql::leader_get)
        .fetch_one(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    let owner: Option<String> = get(&row, "owner")?;
    let term: i64 = get(&row, "term")?;
    let until: Option<i64> = get(&row, "lease_until")?;
    let mine = owner.as_deref() == Some(p.owner.as_str());
    let free = owner.is_none()
        || until.is_none()
        || mine
        || until.is_some_and(|u| u.saturating_add(span(p.grace)) < now);
    if !free {
        commit(tx, OP).await?;
        return Ok(LeaderOutcome::Follower {
            leader: owner.map(rows::agent_id).transpose()?,
            term,
            lease_until: until.map(|u| rows::time(u, "lease_until")).transpose()?,
            now: rows::time(now, "now")?,
        });
    }
    let keep = mine && until.is_some();
    let new_term = if keep { term } else { term + 1 };
    let lease_until = now.saturating_add(span(p.ttl));
    sqlx::query(sql::leader_attempt_elect)
        .bind(p.owner.as_str())
        .bind(new_term)
        .bind(lease_until)
        .bind(now)
        .bind(keep)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    commit(tx, OP).await?;
    Ok(LeaderOutcome::Leader {
        term: new_term,
        lease_until: rows::time(lease_until, "lease_until")?,
        now: rows::time(now, "now")?,
    })
}

pub(super) async fn leader_renew(
    pool: &SqlitePool,
    p: &LeaderRenewParams,
) -> Result<LeaderRenewal> {
    const OP: &str = "leader_renew";
    let (mut tx, now) = write_tx(pool, OP).await?;
    let done = sqlx::query(sql::leader_renew)
        .bind(p.owner.as_str())
        .bind(p.term)
        .bind(now.saturating_add(span(p.ttl)))
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    commit(tx, OP).await?;
    Ok(if done.rows_affected() == 1 {
        LeaderRenewal::Held {
            now: rows::time(now, "now")?,
        }
    } else {
        LeaderRenewal::Fenced
    })
}

pub(super) async fn leader_resign(
    pool: &SqlitePool,
    owner: &AgentId,
    term: i64,
) -> Result<HolderWrite> {
    const OP: &str = "leader_resign";
    let (mut tx, _now) = write_tx(pool, OP).await?;
    let done = sqlx::query(sql::leader_resign)
        .bind(owner.as_str())
        .bind(term)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    // Nothing changed: a retry of a resignation that landed (its reply lost) is a repeat.
    // Only a resignation leaves the row without an owner, and a new owner starts a new term.
    let repeated = done.rows_affected() == 0
        && sqlx::query_scalar::<_, i64>(sql::leader_resign_repeated)
            .bind(term)
            .fetch_optional(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?
            .is_some();
    commit(tx, OP).await?;
    Ok(if done.rows_affected() == 1 || repeated {
        HolderWrite::Held
    } else {
        HolderWrite::Fenced
    })
}
