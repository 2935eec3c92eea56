//! The Leases view's Locks and Shards tabs' data: the last ListLocks, ListShardGroups and
//! ListShards answers of the agent the console is connected to, polled about once a second
//! while the tab is shown, and their rows filtered and sorted.
//!
//! The Shards tab shows one group at a time: the one the operator chose with `[` / `]`, or the
//! first group when none is chosen (or the chosen one is gone). Its shards are read for that
//! group only; an answer for another group (one chosen before) is dropped.
//!
//! When things fail: a failed read keeps the rows of the last good one (the tab says the read
//! failed) and is retried at the next poll; before any good read the error is the tab's empty
//! state. Nothing here panics on what the agent sent: rows are wire messages, read as they are.

use std::cmp::Reverse;

use leasehold_proto::v1 as pb;

use super::data::{Data, SortKey};

/// One polled answer: the last good one, whether a read is on its way, the last error.
#[derive(Debug, Clone)]
pub struct Polled<T> {
    pub last: Option<T>,
    pub loading: bool,
    /// The last read failed with this.
    pub error: Option<String>,
}

impl<T> Default for Polled<T> {
    fn default() -> Self {
        Self {
            last: None,
            loading: false,
            error: None,
        }
    }
}

impl<T> Polled<T> {
    /// Takes a good read.
    pub fn apply(&mut self, reply: T) {
        self.last = Some(reply);
        self.loading = false;
        self.error = None;
    }

    /// Takes a failed read: the last good one stays, the error is shown.
    pub fn failed(&mut self, error: String) {
        self.loading = false;
        self.error = Some(error);
    }

    /// At least one read has succeeded.
    pub fn loaded(&self) -> bool {
        self.last.is_some()
    }
}

/// What the console knows of the resource leases.
#[derive(Debug, Clone, Default)]
pub struct Resources {
    pub locks: Polled<pb::ListLocksResponse>,
    pub groups: Polled<pb::ListShardGroupsResponse>,
    /// The shards of [`Resources::group`].
    pub shards: Polled<pb::ListShardsResponse>,
    /// The group `shards` answers (or was last asked for).
    pub group: String,
}

impl Resources {
    /// Starts reading the shards of `group`: another group's rows are dropped.
    pub fn ask_shards(&mut self, group: &str) {
        if self.group != group {
            self.group = group.to_string();
            self.shards = Polled::default();
        }
        self.shards.loading = true;
    }
}

/// Lease time left at `now_ms`; `None` without a lease time.
pub fn time_left(lease_until_ms: i64, now_ms: i64) -> Option<i64> {
    (lease_until_ms > 0).then(|| lease_until_ms.saturating_sub(now_ms))
}

/// Case-insensitive: does any field contain the (trimmed) filter?
fn matches(filter: &str, fields: &[&str]) -> bool {
    let needle = filter.trim().to_lowercase();
    needle.is_empty() || fields.iter().any(|f| f.to_lowercase().contains(&needle))
}

/// Time left as a sort key: least first, none last.
fn left_key(lease_until_ms: i64, now_ms: i64) -> i64 {
    time_left(lease_until_ms, now_ms).unwrap_or(i64::MAX)
}

impl Data {
    /// The locks matching `filter` (name, owner, state), sorted: by name, time left (least
    /// first, none last), owner (free last) or moves in the last hour (most first).
    pub fn lock_rows(&self, filter: &str, sort: SortKey, reverse: bool) -> Vec<&pb::ResourceLease> {
        let Some(reply) = &self.resources.locks.last else {
            return Vec::new();
        };
        let now = self.now_ms;
        let mut rows: Vec<&pb::ResourceLease> = reply
            .locks
            .iter()
            .filter(|l| matches(filter, &[&l.name, &l.owner, &l.read_state().word()]))
            .collect();
        match sort {
            SortKey::TimeLeft => rows.sort_by(|a, b| {
                (left_key(a.lease_until_ms, now), &a.name)
                    .cmp(&(left_key(b.lease_until_ms, now), &b.name))
            }),
            SortKey::Owner => rows.sort_by(|a, b| {
                (a.owner.is_empty(), &a.owner, &a.name).cmp(&(
                    b.owner.is_empty(),
                    &b.owner,
                    &b.name,
                ))
            }),
            SortKey::Moves => rows.sort_by(|a, b| {
                (Reverse(a.moves_last_hour), &a.name).cmp(&(Reverse(b.moves_last_hour), &b.name))
            }),
            _ => rows.sort_by(|a, b| a.name.cmp(&b.name)),
        }
        if reverse {
            rows.reverse();
        }
        rows
    }

    /// The shard groups, by name.
    pub fn group_rows(&self) -> Vec<&pb::ShardGroup> {
        let mut rows: Vec<&pb::ShardGroup> = self
            .resources
            .groups
            .last
            .iter()
            .flat_map(|r| r.groups.iter())
            .collect();
        rows.sort_by(|a, b| a.name.cmp(&b.name));
        rows
    }

    /// The group the Shards tab shows: `chosen` when it is listed, else the first group.
    pub fn current_group(&self, chosen: Option<&str>) -> Option<&pb::ShardGroup> {
        let rows = self.group_rows();
        chosen
            .and_then(|c| rows.iter().copied().find(|g| g.name == c))
            .or_else(|| rows.first().copied())
    }

    /// The shards of the group read last (when it is `group`) matching `filter` (number,
    /// owner, state), sorted: by number, time left (least first, none last), owner (unowned
    /// last) or moves (most first).
    pub fn shard_rows(
        &self,
        group: Option<&str>,
        filter: &str,
        sort: SortKey,
        reverse: bool,
    ) -> Vec<&pb::Shard> {
        let res = &self.resources;
        let Some(reply) = res
            .shards
            .last
            .as_ref()
            .filter(|_| group == Some(&res.group))
        else {
            return Vec::new();
        };
        let now = self.now_ms;
        let mut rows: Vec<&pb::Shard> = reply
            .shards
            .iter()
            .filter(|s| {
                let state = s.read_state().word();
                matches(filter, &[&s.shard.to_string(), &s.owner, &state])
            })
            .collect();
        match sort {
            SortKey::TimeLeft => {
                rows.sort_by_key(|s| (left_key(s.lease_until_ms, now), s.shard));
            }
            SortKey::Owner => rows.sort_by(|a, b| {
                (a.owner.is_empty(), &a.owner, a.shard).cmp(&(
                    b.owner.is_empty(),
                    &b.owner,
                    b.shard,
                ))
            }),
            SortKey::Moves => rows.sort_by_key(|s| (Reverse(s.moves_last_hour), s.shard)),
            _ => rows.sort_by_key(|s| s.shard),
        }
        if reverse {
            rows.reverse();
        }
        rows
    }

    /// The members of the group read last, when it is `group`.
    pub fn shard_members(&self, group: Option<&str>) -> &[pb::ShardMember] {
        let res = &self.resources;
        match res.shards.last.as_ref() {
            Some(r) if group == Some(&res.group) => &r.members,
            _ => &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock(name: &str, owner: &str, until: i64, moves: u32) -> pb::ResourceLease {
        pb::ResourceLease {
            name: name.into(),
            owner: owner.into(),
            token: 1,
            lease_until_ms: until,
            lease_state: free_or_held(owner),
            moves_last_hour: moves,
            ..Default::default()
        }
    }

    fn free_or_held(owner: &str) -> i32 {
        let state = if owner.is_empty() {
            pb::LeaseState::Free
        } else {
            pb::LeaseState::Held
        };
        state as i32
    }

    fn shard(n: u32, owner: &str, until: i64, moves: u32) -> pb::Shard {
        pb::Shard {
            shard: n,
            owner: owner.into(),
            lease_until_ms: until,
            lease_state: free_or_held(owner),
            moves_last_hour: moves,
            ..Default::default()
        }
    }

    fn data() -> Data {
        let mut d = Data {
            now_ms: 1_000,
            ..Data::default()
        };
        d.resources.locks.apply(pb::ListLocksResponse {
            locks: vec![
                lock("b", "web-2", 5_000, 0),
                lock("a", "web-1", 9_000, 4),
                lock("c", "", 0, 1),
            ],
            now_ms: 1_000,
        });
        d.resources.groups.apply(pb::ListShardGroupsResponse {
            groups: vec![
                pb::ShardGroup {
                    name: "orders".into(),
                    shard_count: 3,
                    ..Default::default()
                },
                pb::ShardGroup {
                    name: "billing".into(),
                    shard_count: 2,
                    ..Default::default()
                },
            ],
            now_ms: 1_000,
        });
        d.resources.ask_shards("orders");
        d.resources.shards.apply(pb::ListShardsResponse {
            group: None,
            shards: vec![
                shard(2, "", 0, 0),
                shard(0, "web-2", 4_000, 2),
                shard(1, "web-1", 2_000, 0),
            ],
            members: vec![pb::ShardMember {
                agent: "web-1".into(),
                ..Default::default()
            }],
            now_ms: 1_000,
        });
        d
    }

    fn names(rows: Vec<&pb::ResourceLease>) -> Vec<&str> {
        rows.into_iter().map(|l| l.name.as_str()).collect()
    }

    fn numbers(rows: Vec<&pb::Shard>) -> Vec<u32> {
        rows.into_iter().map(|s| s.shard).collect()
    }

    #[test]
    fn locks_sort_by_name_time_left_owner_and_moves() {
        let d = data();
        assert_eq!(
            names(d.lock_rows("", SortKey::Name, false)),
            ["a", "b", "c"]
        );
        assert_eq!(
            names(d.lock_rows("", SortKey::TimeLeft, false)),
            ["b", "a", "c"]
        );
        assert_eq!(
            names(d.lock_rows("", SortKey::Owner, false)),
            ["a", "b", "c"]
        );
        assert_eq!(
            names(d.lock_rows("", SortKey::Moves, false)),
            ["a", "c", "b"]
        );
        assert_eq!(names(d.lock_rows("", SortKey::Name, true)), ["c", "b", "a"]);
        assert_eq!(names(d.lock_rows(" FREE ", SortKey::Name, false)), ["c"]);
        assert_eq!(names(d.lock_rows("web-2", SortKey::Name, false)), ["b"]);
    }

    #[test]
    fn the_current_group_is_the_chosen_one_or_the_first() {
        let d = data();
        let name = |g: Option<&pb::ShardGroup>| g.map(|g| g.name.clone());
        assert_eq!(name(d.current_group(None)).as_deref(), Some("billing"));
        assert_eq!(
            name(d.current_group(Some("orders"))).as_deref(),
            Some("orders")
        );
        assert_eq!(
            name(d.current_group(Some("gone"))).as_deref(),
            Some("billing")
        );
        assert_eq!(name(Data::default().current_group(Some("x"))), None);
    }

    #[test]
    fn shards_are_those_of_the_group_read_and_sort() {
        let d = data();
        let g = Some("orders");
        assert_eq!(
            numbers(d.shard_rows(g, "", SortKey::Shard, false)),
            [0, 1, 2]
        );
        assert_eq!(
            numbers(d.shard_rows(g, "", SortKey::TimeLeft, false)),
            [1, 0, 2]
        );
        assert_eq!(
            numbers(d.shard_rows(g, "", SortKey::Owner, false)),
            [1, 0, 2]
        );
        assert_eq!(
            numbers(d.shard_rows(g, "", SortKey::Moves, false)),
            [0, 1, 2]
        );
        assert_eq!(numbers(d.shard_rows(g, "free", SortKey::Shard, false)), [2]);
        assert_eq!(numbers(d.shard_rows(g, "1", SortKey::Shard, false)), [1]);
        assert!(
            d.shard_rows(Some("billing"), "", SortKey::Shard, false)
                .is_empty()
        );
        assert_eq!(d.shard_members(g).len(), 1);
        assert!(d.shard_members(Some("billing")).is_empty());
    }

    #[test]
    fn asking_for_another_group_drops_the_old_rows_and_a_failure_keeps_them() {
        let mut d = data();
        d.resources.ask_shards("orders");
        assert!(d.resources.shards.loaded());
        d.resources.shards.failed("list shards: unavailable".into());
        assert!(d.resources.shards.loaded());
        assert!(!d.resources.shards.loading);
        d.resources.ask_shards("billing");
        assert!(!d.resources.shards.loaded());
        assert!(d.resources.shards.loading);
        assert_eq!(d.resources.group, "billing");
        assert_eq!(time_left(0, 5), None);
        assert_eq!(time_left(3, 5), Some(-2));
    }
}
