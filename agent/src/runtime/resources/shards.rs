//! Shard groups (`--shard-groups`): joining them at start, the keeper's rebalance of each group
//! at every heartbeat ([`Plan`]: even ±1, sticky by agent name), and the [`ShardOwnership`]
//! published on [`crate::runtime::AgentControl::shards`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_shared::domain::shard::plan_shards;
use leasehold_shared::store::resources::member_name;
use leasehold_shared::store::{GroupName, ShardAcquireParams, ShardGroupView, ShardJoinParams};
use leasehold_shared::{Store, StoreError};

use super::holdings::LossReason;
use super::keeper::Keeper;
use crate::runtime::core::Core;
use crate::runtime::queue::{WriteError, chain};
use crate::runtime::renewal::{self, Line, Renewable};

/// The shards this agent owns now, by group: shard number → fencing token. Published on
/// [`crate::runtime::AgentControl::shards`] at every change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShardOwnership {
    pub groups: BTreeMap<String, BTreeMap<u32, i64>>,
}

impl ShardOwnership {
    /// The token of `shard` of `group`, when this agent owns it.
    pub fn token(&self, group: &str, shard: u32) -> Option<i64> {
        self.groups.get(group)?.get(&shard).copied()
    }

    /// (shard, token) of every shard of `group` this agent owns, by shard.
    pub fn shards(&self, group: &str) -> Vec<(u32, i64)> {
        self.groups
            .get(group)
            .map(|m| m.iter().map(|(s, t)| (*s, *t)).collect())
            .unwrap_or_default()
    }
}

/// Joins the configured groups (at start: an unknown group fails the start).
pub(crate) async fn join_groups(core: &Core) -> crate::error::Result<()> {
    for group in &core.settings.shard_groups {
        core.store
            .shard_join(ShardJoinParams {
                group: group.clone(),
                member: core.id.clone(),
                ttl: core.settings.lease_ttl,
            })
            .await
            .map_err(|e| {
                crate::error::AgentError::store_while(format!("joining shard group {group}"), e)
            })?;
        tracing::info!(group = group.as_str(), "joined shard group");
    }
    Ok(())
}

impl Keeper {
    pub(super) async fn rebalance(&mut self, line: &mut Line<Arc<dyn Store>>) {
        for group in self.core.settings.shard_groups.clone() {
            if let Err(error) = self.rebalance_group(line, &group).await {
                // A store's refusal keeps the connection; a lost or stuck one is abandoned.
                let connection = match &error {
                    WriteError::Store(s) => s.is_connection(),
                    WriteError::Timeout { .. } => true,
                };
                if connection {
                    line.abandon();
                }
                tracing::warn!(group = group.as_str(), error = %chain(&error), "shard rebalance failed; retrying at the next heartbeat");
            }
        }
    }

    /// Gives back and takes shards of `group` by the plan. Each write is bounded by the renewal
    /// timeout and the local deadlines are checked between writes, so a slow database delays
    /// dropping an unprovable holding no more than it delays a renewal.
    async fn rebalance_group(
        &mut self,
        line: &mut Line<Arc<dyn Store>>,
        group: &GroupName,
    ) -> Result<(), WriteError> {
        let core = Arc::clone(&self.core);
        let conn = line.get().await?;
        let limit = core.settings.lease_ttl / 2;
        let write_limit = core.settings.renew_timeout();
        let Some(view) = tokio::time::timeout(
            limit,
            conn.shard_group_get(group.clone(), core.settings.grace),
        )
        .await
        .map_err(|_| WriteError::timeout(format!("reading shard group {group}"), limit))??
        else {
            return Err(StoreError::ShardGroupNotFound(group.to_string()).into());
        };
        let plan = Plan::of(&view, core.id.as_str(), core.settings.grace);
        for shard in plan.give_back {
            let name = group.shard_lease(shard);
            let token = core.holdings.lock().get(&name).map(|h| h.token);
            if let Some(token) = token {
                core.drop_holding(&name, token, LossReason::Released, Instant::now());
                let given =
                    tokio::time::timeout(write_limit, core.give_back(conn.as_ref(), &name, token))
                        .await
                        .map_err(|_| {
                            WriteError::timeout(format!("giving back {name}"), write_limit)
                        })
                        .and_then(|given| given.map_err(WriteError::Store));
                if given.is_err() {
                    core.retry_give_back(&name, token);
                }
                given?;
            }
            self.check(renewal::now());
        }
        for shard in plan.take {
            let name = group.shard_lease(shard);
            if core.holdings.lock().contains_key(&name) {
                continue;
            }
            let sent = Instant::now();
            let taken = tokio::time::timeout(
                write_limit,
                conn.shard_acquire(ShardAcquireParams {
                    group: group.clone(),
                    shard,
                    owner: core.id.clone(),
                    ttl: core.settings.lease_ttl,
                    grace: core.settings.grace,
                }),
            )
            .await
            .map_err(|_| WriteError::timeout(format!("taking {name}"), write_limit))??;
            if let Some(token) = taken {
                // A shard's lease is the TTL from the database's now (no at-most bound).
                core.hold(name, Some((group.clone(), shard)), token, sent, None, None);
            }
            self.check(renewal::now());
        }
        let owned = core.holdings.subscribe().borrow().shards(group.as_str());
        if plan.changed {
            tracing::info!(
                group = group.as_str(),
                shards = ?owned.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
                tokens = ?owned.iter().map(|(_, t)| *t).collect::<Vec<_>>(),
                "shard ownership"
            );
        }
        Ok(())
    }
}

/// What one member does in one rebalance of a group.
#[derive(Debug, Default, PartialEq, Eq)]
struct Plan {
    /// Shards planned for this member that it does not hold.
    take: Vec<u32>,
    /// Shards it holds that are planned for another live member.
    give_back: Vec<u32>,
    changed: bool,
}

impl Plan {
    fn of(view: &ShardGroupView, me: &str, grace: Duration) -> Plan {
        let now = view.now;
        let my_name = member_name(me);
        let mut live: Vec<&str> = view
            .members
            .iter()
            .filter(|m| m.counts(now, grace))
            .map(|m| member_name(&m.member))
            .collect();
        live.push(my_name);
        let owners: Vec<Option<&str>> = view
            .shards
            .iter()
            .map(|s| s.live_owner(now, grace).map(member_name))
            .collect();
        let Some(target) = plan_shards(&live, &owners) else {
            return Plan::default();
        };
        let mut plan = Plan::default();
        for (record, target) in view.shards.iter().zip(target) {
            let Some((_, shard)) = record.shard.as_ref() else {
                continue;
            };
            let owner = record.live_owner(now, grace);
            let mine = owner == Some(me);
            // A shard another member still holds is left to it: it gives the shard back at its
            // next rebalance (or its lease runs out), and then it is free to take.
            if target == my_name && owner.is_none() {
                plan.take.push(*shard);
            } else if target != my_name && mine {
                plan.give_back.push(*shard);
            }
        }
        plan.changed = !plan.take.is_empty() || !plan.give_back.is_empty();
        plan
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use chrono::{DateTime, TimeDelta, Utc};
    use leasehold_shared::store::{ResourceRecord, ShardGroupRecord, ShardMemberRecord};

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }

    fn view(owners: &[Option<&str>], members: &[(&str, i64)]) -> ShardGroupView {
        let n = now();
        ShardGroupView {
            group: ShardGroupRecord {
                name: "g".into(),
                shard_count: u32::try_from(owners.len()).unwrap(),
                created_at: n,
                members: 0,
                owned: 0,
                moves_last_hour: 0,
            },
            shards: owners
                .iter()
                .enumerate()
                .map(|(i, o)| ResourceRecord {
                    name: format!("g#{i}"),
                    shard: Some(("g".into(), u32::try_from(i).unwrap())),
                    owner: o.map(str::to_string),
                    token: 1,
                    lease_until: o.map(|_| n + TimeDelta::seconds(10)),
                    heartbeat_at: o.map(|_| n),
                    acquired_at: o.map(|_| n),
                    lock_at_least_until: None,
                    lock_at_most_until: None,
                    released_at: None,
                    moves_last_hour: 0,
                })
                .collect(),
            members: members
                .iter()
                .map(|(m, until)| ShardMemberRecord {
                    member: (*m).into(),
                    joined_at: n,
                    heartbeat_at: n + TimeDelta::seconds(until - 10),
                    lease_until: n + TimeDelta::seconds(*until),
                })
                .collect(),
            now: n,
        }
    }

    const GRACE: Duration = Duration::from_secs(5);

    #[test]
    fn a_new_member_takes_half_and_the_owner_gives_half_back() {
        let v = view(&[Some("a#1"); 4], &[("a#1", 10), ("b#2", 10)]);
        let b = Plan::of(&v, "b#2", GRACE);
        assert!(b.take.is_empty(), "held by a live owner: not takeable yet");
        let a = Plan::of(&v, "a#1", GRACE);
        assert_eq!(a.give_back.len(), 2);
    }

    #[test]
    fn a_member_within_grace_keeps_its_shards_and_a_gone_one_loses_them() {
        // b's membership ended 3 s ago: within the 5 s grace, it still counts.
        let v = view(&[Some("a#1"), Some("b#2")], &[("a#1", 10), ("b#2", -3)]);
        assert_eq!(Plan::of(&v, "a#1", GRACE), Plan::default());
        let v = view(&[Some("a#1"), None], &[("a#1", 10), ("b#2", -6)]);
        let a = Plan::of(&v, "a#1", GRACE);
        assert_eq!(a.take, vec![1]);
    }

    #[test]
    fn a_restarted_agent_gets_its_shards_back_by_name() {
        // a's old process (a#1) released its shard at shutdown; a#9 is its new start.
        let v = view(
            &[None, Some("b#2")],
            &[("a#1", 8), ("a#9", 10), ("b#2", 10)],
        );
        assert_eq!(Plan::of(&v, "a#9", GRACE).take, vec![0]);
        assert!(Plan::of(&v, "b#2", GRACE).take.is_empty());
    }
}
