//! Named resource leases in the store (DESIGN §4 "Resource leases"), the parts both backends
//! share: names, parameters and records of locks and shard groups, how an acquire decides
//! between extending, taking and refusing, how a lease's state reads, and the audit rows.
//! The backends only run the statements, in one transaction per operation.
//!
//! ```text
//!   free ──acquire (token+1, lease_until = now+ttl, capped by lock_at_most_until)──▶ held
//!   held ──renew by (owner, token): lease_until = now+ttl (never past lock_at_most_until)
//!   held ──release by (owner, token) before lock_at_least_until──▶ released (held until then)
//!   held ──release / forced release──▶ free
//!   held ──lease_until + grace < now, or lock_at_most_until <= now──▶ takeable (token+1)
//!   every write by (owner, token) that no longer matches ──▶ Fenced, nothing changes
//!   a release by (owner, token) repeated after it landed ──▶ the row as it is, nothing changes
//! ```
//!
//! A release marks its holding's history row, so its retry (the first reply lost) is told it
//! landed, while a holding that was taken over or force-released stays unmarked: fenced.
//!
//! Shards are leases named `<group>#<shard>`, created with their group; the members that
//! joined a group share them ([`crate::domain::shard::plan_shards`]), each member counting
//! until its membership's `lease_until + grace`, so a blip shorter than that moves nothing.
//!
//! Every lease time is the database's now, read in the operation's transaction. The
//! operations themselves are written once in [`flow`], over the statements each store runs.
//!
//! When things fail: each operation is one transaction, so an error changed nothing. A
//! holder that lost its lease finds out at its next renew (fenced); a write it makes to its
//! own data in the same database is fenced by [`crate::store::postgres::resource_fence`] (or
//! [`crate::store::sqlite::resource_fence`], in a `BEGIN IMMEDIATE` transaction) in that
//! write's transaction.

pub(crate) mod flow;

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::json;

use super::{AuditEntry, HolderWrite, StoreError};
use crate::domain::ids::truncate_for_error;
use crate::domain::{Actor, AgentId, AuditResult, MemberState, ResourceState, ValidationError};

/// Longest lock name, in bytes.
pub const MAX_LOCK_NAME_LEN: usize = 128;
/// Longest shard group name, in bytes.
pub const MAX_GROUP_NAME_LEN: usize = 64;
/// Most shards in a group.
pub const MAX_SHARDS: u32 = 4096;
/// Shortest and longest lease time.
pub const MIN_RESOURCE_TTL: Duration = Duration::from_secs(1);
pub const MAX_RESOURCE_TTL: Duration = Duration::from_secs(86_400);
/// History rows older than this are pruned by the leader.
pub const HISTORY_RETENTION: Duration = Duration::from_secs(86_400);

fn name_ok(name: &str, max: usize, extra: &[char]) -> bool {
    let mut chars = name.chars();
    let first = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    first
        && name.len() <= max
        && chars.all(|c| {
            c.is_ascii_lowercase()
                || c.is_ascii_digit()
                || matches!(c, '_' | '.' | ':' | '-')
                || extra.contains(&c)
        })
}

/// A lock's name: `[a-z0-9][a-z0-9_.:/-]{0,127}` (never `#`, which names shards).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LockName(String);

impl LockName {
    /// Validates a lock name; refused as field `name`.
    pub fn new(name: impl Into<String>) -> Result<Self, ValidationError> {
        let name = name.into();
        if name_ok(&name, MAX_LOCK_NAME_LEN, &['/']) {
            Ok(Self(name))
        } else {
            Err(ValidationError::Invalid {
                field: "name",
                detail: format!(
                    "{:?}: use 1-128 characters of a-z 0-9 _ . : / - starting with a letter or digit",
                    truncate_for_error(&name)
                ),
            })
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A shard group's name: `[a-z0-9][a-z0-9_.:-]{0,63}`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupName(String);

impl GroupName {
    /// Validates a group name; refused as field `group`.
    pub fn new(name: impl Into<String>) -> Result<Self, ValidationError> {
        let name = name.into();
        if name_ok(&name, MAX_GROUP_NAME_LEN, &[]) {
            Ok(Self(name))
        } else {
            Err(ValidationError::Invalid {
                field: "group",
                detail: format!(
                    "{:?}: use 1-64 characters of a-z 0-9 _ . : - starting with a letter or digit",
                    truncate_for_error(&name)
                ),
            })
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The lease name of one of its shards.
    pub fn shard_lease(&self, shard: u32) -> String {
        shard_lease_name(&self.0, shard)
    }
}

impl fmt::Display for GroupName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `<group>#<shard>`.
pub fn shard_lease_name(group: &str, shard: u32) -> String {
    format!("{group}#{shard}")
}

/// The stable name part of an agent id (`web-1#17` → `web-1`): what shard stickiness follows,
/// so a restarted agent gets its shards back.
pub fn member_name(id: &str) -> &str {
    id.rsplit_once('#').map_or(id, |(name, _)| name)
}

/// Checks a TTL-like duration (field named in the error).
pub fn check_ttl(field: &'static str, ttl: Duration) -> Result<(), ValidationError> {
    if (MIN_RESOURCE_TTL..=MAX_RESOURCE_TTL).contains(&ttl) {
        Ok(())
    } else {
        Err(ValidationError::OutOfRange {
            field,
            detail: format!("{ttl:?}: must be between 1 s and 1 day"),
        })
    }
}

/// Checks a shard count.
pub fn check_shard_count(count: u32) -> Result<(), ValidationError> {
    if (1..=MAX_SHARDS).contains(&count) {
        Ok(())
    } else {
        Err(ValidationError::OutOfRange {
            field: "count",
            detail: format!("{count}: a group has 1 to {MAX_SHARDS} shards"),
        })
    }
}

/// A resource lease row (a lock or a shard).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceRecord {
    pub name: String,
    /// Group and shard number, for a shard.
    pub shard: Option<(String, u32)>,
    pub owner: Option<String>,
    pub token: i64,
    pub lease_until: Option<DateTime<Utc>>,
    pub heartbeat_at: Option<DateTime<Utc>>,
    pub acquired_at: Option<DateTime<Utc>>,
    pub lock_at_least_until: Option<DateTime<Utc>>,
    pub lock_at_most_until: Option<DateTime<Utc>>,
    pub released_at: Option<DateTime<Utc>>,
    /// Owner changes in the last hour (filled by listings; 0 elsewhere).
    pub moves_last_hour: u32,
}

impl ResourceRecord {
    /// The lease's state at `now`. A lease past its lease and grace reads free: anyone may
    /// take it.
    pub fn state(&self, now: DateTime<Utc>, grace: Duration) -> ResourceState {
        let (Some(_), Some(until)) = (&self.owner, self.lease_until) else {
            return ResourceState::Free;
        };
        if self.released_at.is_some() {
            return if until > now {
                ResourceState::Released
            } else {
                ResourceState::Free
            };
        }
        let capped = self.lock_at_most_until.is_some_and(|m| m <= now);
        if until > now && !capped {
            let half = (until - self.heartbeat_at.unwrap_or(until)) / 2;
            return match self.heartbeat_at {
                Some(beat) if now - beat > half && half > TimeDelta::zero() => {
                    ResourceState::Suspect
                }
                _ => ResourceState::Held,
            };
        }
        if capped || until + delta(grace) < now {
            ResourceState::Free
        } else {
            ResourceState::Expired
        }
    }

    /// The holder, when the lease is held at `now` (not free by [`ResourceRecord::state`]).
    pub fn live_owner(&self, now: DateTime<Utc>, grace: Duration) -> Option<&str> {
        match self.state(now, grace) {
            ResourceState::Free => None,
            _ => self.owner.as_deref(),
        }
    }
}

/// A count column (never negative) as a u32.
pub(crate) fn clamp_count(n: i64) -> u32 {
    u32::try_from(n.max(0)).unwrap_or(u32::MAX)
}

/// The (group, shard) of a lease row's `group_name` and `shard` columns; bad database state
/// (a shard number out of range) is [`StoreError::Corrupt`].
pub(crate) fn shard_key(
    group: Option<String>,
    shard: Option<i64>,
) -> Result<Option<(String, u32)>, StoreError> {
    match (group, shard) {
        (Some(g), Some(s)) => {
            u32::try_from(s)
                .map(|s| Some((g, s)))
                .map_err(|_| StoreError::Corrupt {
                    what: "shard",
                    detail: format!("shard number {s} is out of range"),
                })
        }
        _ => Ok(None),
    }
}

/// A group's record from its row's columns and the moves of its leases (by (group, lease)).
pub(crate) fn group_record(
    name: String,
    shard_count: i64,
    created_at: DateTime<Utc>,
    members: u32,
    owned: u32,
    moves: &std::collections::BTreeMap<(String, String), u32>,
) -> Result<ShardGroupRecord, StoreError> {
    Ok(ShardGroupRecord {
        moves_last_hour: moves
            .iter()
            .filter(|((g, _), _)| *g == name)
            .map(|(_, n)| *n)
            .sum(),
        shard_count: u32::try_from(shard_count).map_err(|_| StoreError::Corrupt {
            what: "shard_count",
            detail: shard_count.to_string(),
        })?,
        created_at,
        members,
        owned,
        name,
    })
}

impl ResourceRenewOutcome {
    /// Fills `lost` and `left_groups` from what `p` asked to renew and what came back
    /// (`renewed`, and the groups whose membership was renewed).
    pub(crate) fn settle(&mut self, p: &ResourceRenewParams, members: &BTreeSet<String>) {
        let renewed: BTreeSet<(&str, i64)> = self
            .renewed
            .iter()
            .map(|(n, t, _)| (n.as_str(), *t))
            .collect();
        self.lost = p
            .leases
            .iter()
            .filter(|(n, t)| !renewed.contains(&(n.as_str(), *t)))
            .cloned()
            .collect();
        self.left_groups = p
            .groups
            .iter()
            .filter(|g| !members.contains(g.as_str()))
            .cloned()
            .collect();
    }
}

/// Whether `holder` holds lease `name` with `token` now, checked by `statement` (the store's
/// `resource_fence`) on the caller's connection: the body of both stores' public
/// `resource_fence`. `Held` while the holding is still the caller's, else `Fenced`.
pub(crate) async fn fence<'c, DB, E>(
    executor: E,
    statement: &'static str,
    key: (&str, &str, i64),
) -> super::Result<HolderWrite>
where
    DB: sqlx::Database,
    E: sqlx::Executor<'c, Database = DB>,
    for<'t> &'t str: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    for<'t> i64: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
{
    let held = super::audit::backend::holds(executor, statement, key, "resource_fence").await?;
    Ok(if held {
        HolderWrite::Held
    } else {
        HolderWrite::Fenced
    })
}

/// A join that found (`joined`) or did not find its group.
pub(crate) fn joined(group: &GroupName, joined: bool) -> Result<(), StoreError> {
    if joined {
        Ok(())
    } else {
        Err(StoreError::ShardGroupNotFound(group.as_str().to_string()))
    }
}

pub(crate) fn delta(d: Duration) -> TimeDelta {
    TimeDelta::from_std(d).unwrap_or(TimeDelta::MAX)
}

/// What an acquire does with the row it locked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Take {
    /// The holder holds it already: extend the lease, same token.
    Extend,
    /// Take it with this new token.
    New { token: i64 },
    /// Someone else holds it (or it is held until `lock_at_least_until`).
    Refuse,
}

/// Decides an acquire by `holder` at `now` (the database's) of the locked row (`None`: no row).
pub(crate) fn plan_take(
    row: Option<&ResourceRecord>,
    holder: &str,
    now: DateTime<Utc>,
    grace: Duration,
) -> Take {
    let Some(row) = row else {
        return Take::New { token: 1 };
    };
    let new = Take::New {
        token: row.token.saturating_add(1),
    };
    let (Some(owner), Some(until)) = (row.owner.as_deref(), row.lease_until) else {
        return new;
    };
    let capped = row.lock_at_most_until.is_some_and(|m| m <= now);
    if owner == holder && row.released_at.is_none() && until > now && !capped {
        return Take::Extend;
    }
    if row.lock_at_least_until.is_some_and(|l| l > now) {
        return Take::Refuse;
    }
    let takeable = if row.released_at.is_some() || owner == holder {
        // Given back (held only until the at-least bound), or this holder's own lease that
        // ended: a new holding at once.
        until <= now || capped || owner == holder
    } else {
        capped || until + delta(grace) < now
    };
    if takeable { new } else { Take::Refuse }
}

/// The times a new holding starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Holding {
    pub lease_until: DateTime<Utc>,
    pub at_least_until: Option<DateTime<Utc>>,
    pub at_most_until: Option<DateTime<Utc>>,
}

pub(crate) fn holding(
    now: DateTime<Utc>,
    ttl: Duration,
    at_least: Option<Duration>,
    at_most: Option<Duration>,
) -> Holding {
    let at_most_until = at_most.map(|d| now + delta(d));
    let lease_until = (now + delta(ttl)).min(at_most_until.unwrap_or(DateTime::<Utc>::MAX_UTC));
    Holding {
        lease_until,
        at_least_until: at_least.map(|d| now + delta(d)),
        at_most_until,
    }
}

/// Acquire a lock for a holder.
#[derive(Debug, Clone)]
pub struct LockAcquireParams {
    pub name: LockName,
    pub holder: AgentId,
    /// 1 s ..= 1 day.
    pub ttl: Duration,
    /// Takeover of someone else's lease waits this long past its `lease_until`.
    pub grace: Duration,
    /// Released earlier than this after acquiring, it stays held until then.
    pub lock_at_least_for: Option<Duration>,
    /// Never held longer than this after acquiring (at least `lock_at_least_for`).
    pub lock_at_most_for: Option<Duration>,
    /// An operator's call through the API: audited (and refused for a viewer). `None`: a
    /// library user's own acquire, not audited.
    pub actor: Option<Actor>,
}

impl LockAcquireParams {
    /// A plain lock: `ttl`, no ShedLock bounds, not audited.
    pub fn new(name: LockName, holder: AgentId, ttl: Duration, grace: Duration) -> Self {
        Self {
            name,
            holder,
            ttl,
            grace,
            lock_at_least_for: None,
            lock_at_most_for: None,
            actor: None,
        }
    }

    /// Checks the bounds; nothing is written when they are refused.
    pub fn validate(&self) -> Result<(), ValidationError> {
        check_ttl("ttl", self.ttl)?;
        if let Some(least) = self.lock_at_least_for {
            check_ttl("lock_at_least_for", least)?;
        }
        if let Some(most) = self.lock_at_most_for {
            check_ttl("lock_at_most_for", most)?;
            if self.lock_at_least_for.is_some_and(|least| least > most) {
                return Err(ValidationError::OutOfRange {
                    field: "lock_at_most_for",
                    detail: "must be at least lock_at_least_for".into(),
                });
            }
        }
        Ok(())
    }
}

/// What an acquire found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockAcquired {
    /// True when the holder holds it now (new holding or extended).
    pub acquired: bool,
    /// The row after the acquire: the holder's holding, or the one that refused it.
    pub lock: ResourceRecord,
    /// The database's now.
    pub now: DateTime<Utc>,
}

/// A fenced write by a holder: renew (with `ttl`) or release one lease.
#[derive(Debug, Clone)]
pub struct ResourceHolderParams {
    /// The lease's name (a lock's, or `<group>#<shard>`).
    pub name: String,
    pub holder: AgentId,
    pub token: i64,
    pub ttl: Duration,
    /// Audited when set (an operator's API call).
    pub actor: Option<Actor>,
}

/// A forced release by an operator (audited).
#[derive(Debug, Clone)]
pub struct LockForceReleaseParams {
    pub name: LockName,
    pub actor: Actor,
}

/// Renew, in one statement, every resource lease an agent holds and its group memberships.
#[derive(Debug, Clone)]
pub struct ResourceRenewParams {
    pub owner: AgentId,
    /// (lease name, token).
    pub leases: Vec<(String, i64)>,
    /// Groups whose membership to renew.
    pub groups: Vec<GroupName>,
    pub ttl: Duration,
}

/// What a renewal found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResourceRenewOutcome {
    /// (name, token, lease_until) of the leases renewed.
    pub renewed: Vec<(String, i64, DateTime<Utc>)>,
    /// (name, token) of the leases that are no longer this holder's: fenced.
    pub lost: Vec<(String, i64)>,
    /// Groups whose membership row was gone (re-join them).
    pub left_groups: Vec<GroupName>,
    pub now: Option<DateTime<Utc>>,
}

/// Every lock, and the database's now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockListing {
    pub locks: Vec<ResourceRecord>,
    pub now: DateTime<Utc>,
}

/// A shard group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardGroupRecord {
    pub name: String,
    pub shard_count: u32,
    pub created_at: DateTime<Utc>,
    /// Members not past their lease + grace.
    pub members: u32,
    /// Shards whose owner holds them (held, suspect or expired within grace).
    pub owned: u32,
    pub moves_last_hour: u32,
}

/// Declare a shard group (audited).
#[derive(Debug, Clone)]
pub struct ShardGroupCreateParams {
    pub name: GroupName,
    pub count: u32,
    pub actor: Actor,
}

/// What a create did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardGroupCreated {
    /// False: it existed with that count (no-op, not audited as a change).
    pub created: bool,
    pub group: ShardGroupRecord,
}

/// A member of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardMemberRecord {
    pub member: String,
    pub joined_at: DateTime<Utc>,
    pub heartbeat_at: DateTime<Utc>,
    pub lease_until: DateTime<Utc>,
}

impl ShardMemberRecord {
    /// Live, suspect (heartbeat older than half its lease), gone (past lease + grace).
    pub fn state(&self, now: DateTime<Utc>, grace: Duration) -> MemberState {
        if self.lease_until + delta(grace) < now {
            MemberState::Gone
        } else if now - self.heartbeat_at > (self.lease_until - self.heartbeat_at) / 2 {
            MemberState::Suspect
        } else {
            MemberState::Live
        }
    }

    /// Counts for sharing: not past its lease + grace (a blip keeps it).
    pub fn counts(&self, now: DateTime<Utc>, grace: Duration) -> bool {
        self.lease_until + delta(grace) >= now
    }
}

/// One group with every shard (by number) and member (by id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardGroupView {
    pub group: ShardGroupRecord,
    pub shards: Vec<ResourceRecord>,
    pub members: Vec<ShardMemberRecord>,
    pub now: DateTime<Utc>,
}

/// Join (or stay in) a group.
#[derive(Debug, Clone)]
pub struct ShardJoinParams {
    pub group: GroupName,
    pub member: AgentId,
    pub ttl: Duration,
}

/// Take one shard (when free or takeable).
#[derive(Debug, Clone)]
pub struct ShardAcquireParams {
    pub group: GroupName,
    pub shard: u32,
    pub owner: AgentId,
    pub ttl: Duration,
    pub grace: Duration,
}

/// The audit target of a lock.
pub(crate) fn lock_target(name: &str) -> String {
    format!("lock:{name}")
}

/// The audit target of a shard group.
pub(crate) fn group_target(name: &str) -> String {
    format!("shard_group:{name}")
}

/// Audit row of an operator's acquire.
pub(crate) fn acquire_entry(
    actor: &Actor,
    p: &LockAcquireParams,
    out: &LockAcquired,
) -> AuditEntry {
    AuditEntry {
        actor: actor.clone(),
        action: "lock_acquire".into(),
        target: lock_target(p.name.as_str()),
        params: Some(json!({
            "holder": p.holder.as_str(),
            "ttl_ms": millis(p.ttl),
            "lock_at_least_for_ms": p.lock_at_least_for.map(millis),
            "lock_at_most_for_ms": p.lock_at_most_for.map(millis),
            "token": out.lock.token,
        })),
        result: if out.acquired {
            AuditResult::Applied
        } else {
            AuditResult::Noop
        },
        detail: (!out.acquired)
            .then(|| format!("held by {}", out.lock.owner.as_deref().unwrap_or("nobody"))),
    }
}

/// Audit row of a release (the holder's through the API, or an operator's forced one).
pub(crate) fn release_entry(
    actor: &Actor,
    name: &str,
    before: Option<&ResourceRecord>,
    released: bool,
) -> AuditEntry {
    AuditEntry {
        actor: actor.clone(),
        action: "lock_release".into(),
        target: lock_target(name),
        params: before.map(|b| json!({ "owner": b.owner, "token": b.token })),
        result: if released {
            AuditResult::Applied
        } else {
            AuditResult::Noop
        },
        detail: None,
    }
}

/// Audit row of a forced release refused with `error` (no such lock): `failed`, changing
/// nothing else.
pub(crate) fn release_failed_entry(actor: &Actor, name: &str, error: &StoreError) -> AuditEntry {
    AuditEntry {
        actor: actor.clone(),
        action: "lock_release".into(),
        target: lock_target(name),
        params: None,
        result: AuditResult::Failed,
        detail: Some(error.to_string()),
    }
}

/// Audit row of a group's creation.
pub(crate) fn group_entry(actor: &Actor, name: &str, count: u32, created: bool) -> AuditEntry {
    AuditEntry {
        actor: actor.clone(),
        action: "shard_group_create".into(),
        target: group_target(name),
        params: Some(json!({ "count": count })),
        result: if created {
            AuditResult::Applied
        } else {
            AuditResult::Noop
        },
        detail: None,
    }
}

/// Audit row of a creation refused with `error` (the group exists with another count): the
/// requested count, `failed`.
pub(crate) fn group_failed_entry(
    actor: &Actor,
    name: &str,
    count: u32,
    error: &StoreError,
) -> AuditEntry {
    AuditEntry {
        result: AuditResult::Failed,
        detail: Some(error.to_string()),
        ..group_entry(actor, name, count, false)
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    fn held(owner: &str, token: i64, until: i64) -> ResourceRecord {
        ResourceRecord {
            name: "nightly".into(),
            shard: None,
            owner: Some(owner.into()),
            token,
            lease_until: Some(at(until)),
            heartbeat_at: Some(at(until - 30)),
            acquired_at: Some(at(until - 30)),
            lock_at_least_until: None,
            lock_at_most_until: None,
            released_at: None,
            moves_last_hour: 0,
        }
    }

    const GRACE: Duration = Duration::from_secs(5);

    #[test]
    fn names_follow_their_alphabets() {
        assert!(LockName::new("tenant/42:sync").is_ok());
        assert!(LockName::new("a#1").is_err());
        assert!(LockName::new("").is_err());
        assert!(LockName::new("Upper").is_err());
        assert!(LockName::new("x".repeat(129)).is_err());
        assert!(GroupName::new("orders-partitions").is_ok());
        assert!(GroupName::new("a/b").is_err());
        assert_eq!(member_name("web-1#17"), "web-1");
        assert_eq!(member_name("ci-job"), "ci-job");
    }

    #[test]
    fn a_free_or_missing_lock_is_taken_with_a_new_token() {
        assert_eq!(plan_take(None, "a", at(0), GRACE), Take::New { token: 1 });
        let mut free = held("a", 4, 0);
        free.owner = None;
        free.lease_until = None;
        assert_eq!(
            plan_take(Some(&free), "b", at(0), GRACE),
            Take::New { token: 5 }
        );
    }

    #[test]
    fn the_holder_extends_others_wait_for_lease_and_grace() {
        let row = held("a", 3, 10);
        assert_eq!(plan_take(Some(&row), "a", at(0), GRACE), Take::Extend);
        assert_eq!(plan_take(Some(&row), "b", at(0), GRACE), Take::Refuse);
        // Past the lease but within grace: still refused (the debounce).
        assert_eq!(plan_take(Some(&row), "b", at(14), GRACE), Take::Refuse);
        assert_eq!(row.state(at(14), GRACE), ResourceState::Expired);
        assert_eq!(
            plan_take(Some(&row), "b", at(16), GRACE),
            Take::New { token: 4 }
        );
        assert_eq!(row.state(at(16), GRACE), ResourceState::Free);
        // The holder's own ended lease: a new holding, a new token.
        assert_eq!(
            plan_take(Some(&row), "a", at(11), GRACE),
            Take::New { token: 4 }
        );
    }

    #[test]
    fn at_least_keeps_it_held_and_at_most_frees_it() {
        let mut row = held("a", 1, 10);
        row.released_at = Some(at(0));
        row.lock_at_least_until = Some(at(10));
        assert_eq!(row.state(at(5), GRACE), ResourceState::Released);
        assert_eq!(plan_take(Some(&row), "a", at(5), GRACE), Take::Refuse);
        assert_eq!(
            plan_take(Some(&row), "b", at(10), GRACE),
            Take::New { token: 2 }
        );

        let mut crashed = held("a", 1, 100);
        crashed.lock_at_most_until = Some(at(20));
        assert_eq!(plan_take(Some(&crashed), "b", at(19), GRACE), Take::Refuse);
        assert_eq!(
            plan_take(Some(&crashed), "b", at(20), GRACE),
            Take::New { token: 2 }
        );
        assert_eq!(crashed.state(at(20), GRACE), ResourceState::Free);
    }

    #[test]
    fn a_holding_is_capped_by_at_most() {
        let h = holding(
            at(0),
            Duration::from_secs(30),
            Some(Duration::from_secs(5)),
            Some(Duration::from_secs(10)),
        );
        assert_eq!(h.lease_until, at(10));
        assert_eq!(h.at_least_until, Some(at(5)));
    }

    #[test]
    fn bad_bounds_are_refused() {
        let mut p = LockAcquireParams::new(
            LockName::new("x").unwrap(),
            AgentId::new("h").unwrap(),
            Duration::from_millis(10),
            GRACE,
        );
        assert!(p.validate().is_err());
        p.ttl = Duration::from_secs(10);
        p.lock_at_least_for = Some(Duration::from_secs(20));
        p.lock_at_most_for = Some(Duration::from_secs(10));
        assert!(p.validate().is_err());
        p.lock_at_most_for = Some(Duration::from_secs(30));
        assert!(p.validate().is_ok());
    }

    #[test]
    fn suspect_when_renewals_are_overdue() {
        let row = held("a", 1, 30); // heartbeat at 0, lease until 30
        assert_eq!(row.state(at(10), GRACE), ResourceState::Held);
        assert_eq!(row.state(at(20), GRACE), ResourceState::Suspect);
    }
}
