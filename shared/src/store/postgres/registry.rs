//! The agent registry and the leader lease.
//!
//! ```text
//!   leader row: (owner, term, lease_until)
//!   elect:  free, mine, or lease_until + grace < now()  → mine; a new owner starts term+1
//!   renew:  (owner, term) must match                      → Held, else Fenced
//!   resign: (owner, term) must match                      → owner cleared; next elect is term+1
//! ```
//!
//! When things fail: a leader that stops renewing keeps the row until its lease and the grace
//! have passed (a blip never moves leadership); its later writes carry a stale term and are
//! fenced. Leadership work (recovery, deadlines) is itself idempotent and re-checked per row,
//! so two leaders overlapping for a moment cannot corrupt anything.
//!
//! Registration input arrives validated (the Store layer, `store/driver.rs`).

use super::db::Db;

use super::rows::{agent, agent_id, get};
use super::{secs, sql};
use crate::domain::AgentId;
use crate::store::{
    AgentHeartbeatParams, AgentRecord, AgentRegisterParams, HolderWrite, LeaderElectParams,
    LeaderOutcome, LeaderRenewParams, LeaderRenewal, Result, StoreError,
};

fn non_negative(field: &'static str, value: u32) -> Result<i32> {
    i32::try_from(value).map_err(|_| {
        StoreError::Invalid(crate::ValidationError::OutOfRange {
            field,
            detail: format!("{value} is too large"),
        })
    })
}

pub(super) async fn agent_register(pool: &Db, p: &AgentRegisterParams) -> Result<AgentRecord> {
    let types: Vec<&str> = p.task_types.iter().map(|t| t.as_str()).collect();
    let row = sqlx::query(sql::agent_register)
        .bind(&p.name)
        .bind(&p.host)
        .bind(non_negative("pid", p.pid)?)
        .bind(p.grpc_address.as_deref())
        .bind(&p.version)
        .bind(&types)
        .bind(non_negative("local_concurrency", p.local_concurrency)?)
        .bind(secs(p.alive_for))
        .fetch_one(pool)
        .await
        .map_err(StoreError::db("agent_register"))?;
    agent(&row)
}

pub(super) async fn agent_heartbeat(pool: &Db, p: &AgentHeartbeatParams) -> Result<bool> {
    let row = sqlx::query(sql::agent_heartbeat)
        .bind(p.id.as_str())
        .bind(p.state.as_str())
        .bind(non_negative("active", p.active)?)
        .bind(non_negative("local_concurrency", p.local_concurrency)?)
        .fetch_optional(pool)
        .await
        .map_err(StoreError::db("agent_heartbeat"))?;
    Ok(row.is_some())
}

pub(super) async fn agent_list(pool: &Db) -> Result<Vec<AgentRecord>> {
    let rows = sqlx::query(sql::agent_list)
        .fetch_all(pool)
        .await
        .map_err(StoreError::db("agent_list"))?;
    rows.iter().map(agent).collect()
}

pub(super) async fn agent_mark_stopped(pool: &Db, id: &AgentId) -> Result<()> {
    sqlx::query(sql::agent_mark_stopped)
        .bind(id.as_str())
        .execute(pool)
        .await
        .map_err(StoreError::db("agent_mark_stopped"))?;
    Ok(())
}

pub(super) async fn leader_attempt_elect(
    pool: &Db,
    p: &LeaderElectParams,
) -> Result<LeaderOutcome> {
    let row = sqlx::query(sql::leader_attempt_elect)
        .bind(p.owner.as_str())
        .bind(secs(p.ttl))
        .bind(secs(p.grace))
        .fetch_one(pool)
        .await
        .map_err(StoreError::db("leader_attempt_elect"))?;
    let term: i64 = get(&row, "term")?;
    if get::<bool>(&row, "elected")? {
        return Ok(LeaderOutcome::Leader {
            term,
            lease_until: get(&row, "lease_until")?,
            now: get(&row, "now")?,
        });
    }
    Ok(LeaderOutcome::Follower {
        leader: get::<Option<String>>(&row, "owner")?
            .map(agent_id)
            .transpose()?,
        term,
        lease_until: get(&row, "lease_until")?,
        now: get(&row, "now")?,
    })
}

pub(super) async fn leader_renew(pool: &Db, p: &LeaderRenewParams) -> Result<LeaderRenewal> {
    let row = sqlx::query(sql::leader_renew)
        .bind(p.owner.as_str())
        .bind(p.term)
        .bind(secs(p.ttl))
        .fetch_optional(pool)
        .await
        .map_err(StoreError::db("leader_renew"))?;
    Ok(match row {
        Some(row) => LeaderRenewal::Held {
            now: get(&row, "now")?,
        },
        None => LeaderRenewal::Fenced,
    })
}

pub(super) async fn leader_resign(pool: &Db, owner: &AgentId, term: i64) -> Result<HolderWrite> {
    let row = sqlx::query(sql::leader_resign)
        .bind(owner.as_str())
        .bind(term)
        .fetch_optional(pool)
        .await
        .map_err(StoreError::db("leader_resign"))?;
    if row.is_some() {
        return Ok(HolderWrite::Held);
    }
    // A retry of a resignation that landed (its reply lost) is a repeat, not fenced.
    let repeated = sqlx::query(sql::leader_resign_repeated)
        .bind(term)
        .fetch_optional(pool)
        .await
        .map_err(StoreError::db("leader_resign"))?;
    Ok(if repeated.is_some() {
        HolderWrite::Held
    } else {
        HolderWrite::Fenced
    })
}
