//! Resource leases from the wire: locks and shard groups (`locks …`, `shards …`; see the parent
//! module for conventions).
//!
//! As for schedules, a time is shown twice, as an RFC 3339 UTC string and as ms since 1970,
//! both `null` when the wire says 0; an owner that is empty (free, unowned) is `null`. Each
//! lock and shard also carries `time_left_ms`: its `lease_until` minus the reply's database
//! `now` (negative once past it; `null` without a lease time), so a script needs no clock.
//!
//! States are shown as the agent names them (`free`, `held`, `suspect`, `expired`,
//! `released`; members `live`, `suspect`, `gone`): a word this build does not know is shown,
//! not refused, since it says more than nothing. What breaks the contract is refused: a
//! negative token or time, a missing group, a shard numbered outside its group or listed twice.
//!
//! ```text
//! {"name":"deploy/prod","owner":"ci-job-17","token":7,"state":"held",
//!  "lease_until":"…Z","lease_until_ms":1764588012000,"heartbeat_at":"…Z",…,
//!  "lock_at_least_until":null,"lock_at_least_until_ms":null,"time_left_ms":12000,
//!  "moves_last_hour":2}
//! ```

use std::collections::BTreeSet;

use leasehold_proto::v1;
use serde::Serialize;

use super::{Timestamp, WireError, opt_string, opt_time, time};

/// A wire time that may be 0, and its ms.
fn opt_time_ms(
    field: &'static str,
    ms: i64,
) -> Result<(Option<Timestamp>, Option<i64>), WireError> {
    let t = opt_time(field, ms)?;
    Ok((t, t.map(Timestamp::millis)))
}

/// A fencing token: 0 (never held) or more.
fn token(field: &'static str, value: i64) -> Result<i64, WireError> {
    if value < 0 {
        return Err(WireError::OutOfRange { field, value });
    }
    Ok(value)
}

/// `lease_until - now`, `None` without a lease time.
fn time_left(lease_until_ms: Option<i64>, now_ms: i64) -> Option<i64> {
    lease_until_ms.map(|until| until.saturating_sub(now_ms))
}

/// A lock as the commands show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LockView {
    pub name: String,
    /// The holder; `null` when free.
    pub owner: Option<String>,
    /// Fencing token of the current (or last) holding; 0 when never held.
    pub token: i64,
    pub state: String,
    pub lease_until: Option<Timestamp>,
    pub lease_until_ms: Option<i64>,
    pub heartbeat_at: Option<Timestamp>,
    pub heartbeat_at_ms: Option<i64>,
    pub acquired_at: Option<Timestamp>,
    pub acquired_at_ms: Option<i64>,
    /// Given back early, it stays held until then.
    pub lock_at_least_until: Option<Timestamp>,
    pub lock_at_least_until_ms: Option<i64>,
    /// Never held past this, renewed or not.
    pub lock_at_most_until: Option<Timestamp>,
    pub lock_at_most_until_ms: Option<i64>,
    /// `lease_until_ms` minus the database's now; `null` without a lease time.
    pub time_left_ms: Option<i64>,
    pub moves_last_hour: u32,
}

impl LockView {
    /// Converts a wire lock read at database time `now_ms`.
    pub fn from_wire(l: v1::ResourceLease, now_ms: i64) -> Result<Self, WireError> {
        let (lease_until, lease_until_ms) = opt_time_ms("lease_until_ms", l.lease_until_ms)?;
        let (heartbeat_at, heartbeat_at_ms) = opt_time_ms("heartbeat_at_ms", l.heartbeat_at_ms)?;
        let (acquired_at, acquired_at_ms) = opt_time_ms("acquired_at_ms", l.acquired_at_ms)?;
        let (lock_at_least_until, lock_at_least_until_ms) =
            opt_time_ms("lock_at_least_until_ms", l.lock_at_least_until_ms)?;
        let (lock_at_most_until, lock_at_most_until_ms) =
            opt_time_ms("lock_at_most_until_ms", l.lock_at_most_until_ms)?;
        let state = l.read_state().word().into_owned();
        Ok(Self {
            token: token("token", l.token)?,
            name: l.name,
            owner: opt_string(l.owner),
            state,
            lease_until,
            lease_until_ms,
            heartbeat_at,
            heartbeat_at_ms,
            acquired_at,
            acquired_at_ms,
            lock_at_least_until,
            lock_at_least_until_ms,
            lock_at_most_until,
            lock_at_most_until_ms,
            time_left_ms: time_left(lease_until_ms, now_ms),
            moves_last_hour: l.moves_last_hour,
        })
    }
}

/// A lock as the holder's commands (`locks acquire`, `renew`, `release --holder`) show it:
/// the holding in an AcquireLock, RenewLock or ReleaseLock reply. Those replies carry no
/// database `now`, so there is no time left here, only the times themselves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HoldingView {
    /// The holder; `null` when nobody holds it.
    pub holder: Option<String>,
    /// Fencing token of the current (or last) holding.
    pub token: i64,
    pub state: String,
    pub lease_until: Option<Timestamp>,
    pub lease_until_ms: Option<i64>,
    pub lock_at_least_until: Option<Timestamp>,
    pub lock_at_least_until_ms: Option<i64>,
    pub lock_at_most_until: Option<Timestamp>,
    pub lock_at_most_until_ms: Option<i64>,
}

impl HoldingView {
    /// Converts the lock of a holder's call.
    pub fn from_wire(l: v1::ResourceLease) -> Result<Self, WireError> {
        let (lease_until, lease_until_ms) = opt_time_ms("lease_until_ms", l.lease_until_ms)?;
        let (lock_at_least_until, lock_at_least_until_ms) =
            opt_time_ms("lock_at_least_until_ms", l.lock_at_least_until_ms)?;
        let (lock_at_most_until, lock_at_most_until_ms) =
            opt_time_ms("lock_at_most_until_ms", l.lock_at_most_until_ms)?;
        let state = l.read_state().word().into_owned();
        Ok(Self {
            token: token("token", l.token)?,
            holder: opt_string(l.owner),
            state,
            lease_until,
            lease_until_ms,
            lock_at_least_until,
            lock_at_least_until_ms,
            lock_at_most_until,
            lock_at_most_until_ms,
        })
    }
}

/// `locks ls`: every lock, by name, and the database time of the read.
#[derive(Debug, Clone, PartialEq)]
pub struct LockList {
    pub locks: Vec<LockView>,
    pub now: Timestamp,
}

impl LockList {
    /// Converts a `ListLocks` reply.
    pub fn from_wire(r: v1::ListLocksResponse) -> Result<Self, WireError> {
        let now = time("now_ms", r.now_ms)?;
        Ok(Self {
            locks: r
                .locks
                .into_iter()
                .map(|l| LockView::from_wire(l, now.millis()))
                .collect::<Result<_, _>>()?,
            now,
        })
    }
}

/// A shard group as the commands show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupView {
    pub name: String,
    pub shard_count: u32,
    /// Live members.
    pub members: u32,
    /// Shards with a live owner.
    pub owned: u32,
    pub moves_last_hour: u32,
    pub created_at: Option<Timestamp>,
    pub created_at_ms: Option<i64>,
}

impl GroupView {
    /// Converts a wire group.
    pub fn from_wire(g: v1::ShardGroup) -> Result<Self, WireError> {
        let (created_at, created_at_ms) = opt_time_ms("created_at_ms", g.created_at_ms)?;
        Ok(Self {
            name: g.name,
            shard_count: g.shard_count,
            members: g.members,
            owned: g.owned,
            moves_last_hour: g.moves_last_hour,
            created_at,
            created_at_ms,
        })
    }

    /// A group a reply must carry.
    pub fn required(g: Option<v1::ShardGroup>) -> Result<Self, WireError> {
        Self::from_wire(g.ok_or(WireError::MissingField("group"))?)
    }
}

/// `shards ls` without a group: every group, by name.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupList {
    pub groups: Vec<GroupView>,
    pub now: Timestamp,
}

impl GroupList {
    /// Converts a `ListShardGroups` reply.
    pub fn from_wire(r: v1::ListShardGroupsResponse) -> Result<Self, WireError> {
        Ok(Self {
            groups: r
                .groups
                .into_iter()
                .map(GroupView::from_wire)
                .collect::<Result<_, _>>()?,
            now: time("now_ms", r.now_ms)?,
        })
    }
}

/// One shard of a group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShardView {
    pub shard: u32,
    /// The owner agent; `null` when unowned.
    pub owner: Option<String>,
    pub token: i64,
    pub state: String,
    pub lease_until: Option<Timestamp>,
    pub lease_until_ms: Option<i64>,
    pub heartbeat_at: Option<Timestamp>,
    pub heartbeat_at_ms: Option<i64>,
    pub acquired_at: Option<Timestamp>,
    pub acquired_at_ms: Option<i64>,
    pub time_left_ms: Option<i64>,
    pub moves_last_hour: u32,
}

impl ShardView {
    fn from_wire(s: v1::Shard, now_ms: i64) -> Result<Self, WireError> {
        let (lease_until, lease_until_ms) = opt_time_ms("shard lease_until_ms", s.lease_until_ms)?;
        let (heartbeat_at, heartbeat_at_ms) =
            opt_time_ms("shard heartbeat_at_ms", s.heartbeat_at_ms)?;
        let (acquired_at, acquired_at_ms) = opt_time_ms("shard acquired_at_ms", s.acquired_at_ms)?;
        let state = s.read_state().word().into_owned();
        Ok(Self {
            token: token("shard token", s.token)?,
            shard: s.shard,
            owner: opt_string(s.owner),
            state,
            lease_until,
            lease_until_ms,
            heartbeat_at,
            heartbeat_at_ms,
            acquired_at,
            acquired_at_ms,
            time_left_ms: time_left(lease_until_ms, now_ms),
            moves_last_hour: s.moves_last_hour,
        })
    }
}

/// One member of a group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemberView {
    pub agent: String,
    pub state: String,
    /// Shards it owns now.
    pub shards: u32,
    pub joined_at: Option<Timestamp>,
    pub joined_at_ms: Option<i64>,
    pub heartbeat_at: Option<Timestamp>,
    pub heartbeat_at_ms: Option<i64>,
    pub lease_until: Option<Timestamp>,
    pub lease_until_ms: Option<i64>,
}

impl MemberView {
    fn from_wire(m: v1::ShardMember) -> Result<Self, WireError> {
        let (joined_at, joined_at_ms) = opt_time_ms("member joined_at_ms", m.joined_at_ms)?;
        let (heartbeat_at, heartbeat_at_ms) =
            opt_time_ms("member heartbeat_at_ms", m.heartbeat_at_ms)?;
        let (lease_until, lease_until_ms) = opt_time_ms("member lease_until_ms", m.lease_until_ms)?;
        Ok(Self {
            state: m.read_state().word().into_owned(),
            agent: m.agent,
            shards: m.shards,
            joined_at,
            joined_at_ms,
            heartbeat_at,
            heartbeat_at_ms,
            lease_until,
            lease_until_ms,
        })
    }
}

/// `shards ls GROUP`: the group, one entry per shard by number, the members by agent id.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupShards {
    pub group: GroupView,
    pub shards: Vec<ShardView>,
    pub members: Vec<MemberView>,
    pub now: Timestamp,
}

impl GroupShards {
    /// Converts a `ListShards` reply; the shards come out by number, each once and inside
    /// the group's count, or the reply is refused.
    pub fn from_wire(r: v1::ListShardsResponse) -> Result<Self, WireError> {
        let now = time("now_ms", r.now_ms)?;
        let group = GroupView::required(r.group)?;
        let mut seen = BTreeSet::new();
        let mut shards = r
            .shards
            .into_iter()
            .map(|s| {
                if s.shard >= group.shard_count {
                    return Err(WireError::OutOfRange {
                        field: "shard",
                        value: i64::from(s.shard),
                    });
                }
                if !seen.insert(s.shard) {
                    return Err(WireError::Broken(format!(
                        "shard {} of group {} twice",
                        s.shard, group.name
                    )));
                }
                ShardView::from_wire(s, now.millis())
            })
            .collect::<Result<Vec<_>, _>>()?;
        shards.sort_by_key(|s| s.shard);
        let members = r
            .members
            .into_iter()
            .map(MemberView::from_wire)
            .collect::<Result<_, _>>()?;
        Ok(Self {
            group,
            shards,
            members,
            now,
        })
    }
}

#[cfg(test)]
// The fixtures fill the word fields too, as the agent does for older consoles.
#[allow(deprecated)]
pub(crate) mod tests {
    use super::*;
    use leasehold_proto::wire::{self, WireEnum};
    use leasehold_shared::domain::MemberState;
    use leasehold_shared::domain::ResourceState;

    /// The enum number and word an agent of this version sends for `word` (a word without a
    /// value travels alone, as the agent sends it).
    pub(crate) fn sent<D: WireEnum>(word: &str) -> (i32, String) {
        D::from_word(word).map_or_else(|| (0, word.to_string()), wire::write)
    }

    /// Database time of the fixtures.
    pub(crate) const NOW: i64 = 1_764_588_000_000;

    /// A held wire lock with every field set.
    pub(crate) fn wire_lock(name: &str) -> v1::ResourceLease {
        let (lease_state, state) = sent::<ResourceState>("held");
        v1::ResourceLease {
            name: name.into(),
            owner: "ci-job-17".into(),
            token: 7,
            lease_until_ms: NOW + 12_000,
            heartbeat_at_ms: NOW - 3_000,
            acquired_at_ms: NOW - 600_000,
            lock_at_least_until_ms: 0,
            lock_at_most_until_ms: NOW + 3_600_000,
            state,
            lease_state,
            moves_last_hour: 2,
        }
    }

    pub(crate) fn wire_group(name: &str, count: u32) -> v1::ShardGroup {
        v1::ShardGroup {
            name: name.into(),
            shard_count: count,
            members: 2,
            owned: count.saturating_sub(1),
            moves_last_hour: 3,
            created_at_ms: NOW - 86_400_000,
        }
    }

    pub(crate) fn wire_shard(shard: u32, owner: &str, state: &str) -> v1::Shard {
        let owned = !owner.is_empty();
        let (lease_state, state) = sent::<ResourceState>(state);
        v1::Shard {
            shard,
            owner: owner.into(),
            token: i64::from(shard) + 1,
            lease_until_ms: if owned { NOW + 9_000 } else { 0 },
            heartbeat_at_ms: if owned { NOW - 2_000 } else { 0 },
            acquired_at_ms: if owned { NOW - 120_000 } else { 0 },
            state,
            lease_state,
            moves_last_hour: shard % 2,
        }
    }

    pub(crate) fn wire_member(agent: &str, shards: u32, state: &str) -> v1::ShardMember {
        let (member_state, state) = sent::<MemberState>(state);
        v1::ShardMember {
            agent: agent.into(),
            joined_at_ms: NOW - 3_600_000,
            heartbeat_at_ms: NOW - 1_000,
            lease_until_ms: NOW + 14_000,
            state,
            member_state,
            shards,
        }
    }

    /// A group of four shards: two held by web-1, one suspect on web-2, one free.
    pub(crate) fn wire_shards() -> v1::ListShardsResponse {
        v1::ListShardsResponse {
            group: Some(wire_group("orders", 4)),
            shards: vec![
                wire_shard(2, "web-2#2", "suspect"),
                wire_shard(0, "web-1#1", "held"),
                wire_shard(1, "web-1#1", "held"),
                wire_shard(3, "", "free"),
            ],
            members: vec![
                wire_member("web-1#1", 2, "live"),
                wire_member("web-2#2", 1, "suspect"),
            ],
            now_ms: NOW,
        }
    }

    #[test]
    fn a_lock_renders_as_the_documented_json() {
        let view = LockView::from_wire(wire_lock("deploy/prod"), NOW).map_err(|e| e.to_string());
        let json = view.map(|v| serde_json::to_value(v).ok());
        let expected = serde_json::json!({
            "name": "deploy/prod",
            "owner": "ci-job-17",
            "token": 7,
            "state": "held",
            "lease_until": "2025-12-01T11:20:12.000Z",
            "lease_until_ms": NOW + 12_000,
            "heartbeat_at": "2025-12-01T11:19:57.000Z",
            "heartbeat_at_ms": NOW - 3_000,
            "acquired_at": "2025-12-01T11:10:00.000Z",
            "acquired_at_ms": NOW - 600_000,
            "lock_at_least_until": null,
            "lock_at_least_until_ms": null,
            "lock_at_most_until": "2025-12-01T12:20:00.000Z",
            "lock_at_most_until_ms": NOW + 3_600_000,
            "time_left_ms": 12_000,
            "moves_last_hour": 2,
        });
        assert_eq!(json, Ok(Some(expected)));
    }

    #[test]
    fn a_free_lock_has_no_owner_and_no_time_left() {
        let free = v1::ResourceLease {
            name: "idle".into(),
            lease_state: v1::LeaseState::Free as i32,
            ..Default::default()
        };
        let v = LockView::from_wire(free, NOW).ok();
        assert_eq!(v.as_ref().and_then(|v| v.owner.clone()), None);
        assert_eq!(v.as_ref().and_then(|v| v.time_left_ms), None);
        assert_eq!(v.map(|v| v.token), Some(0));
        let mut past = wire_lock("late");
        past.lease_until_ms = NOW - 4_000;
        let v = LockView::from_wire(past, NOW).ok();
        assert_eq!(v.and_then(|v| v.time_left_ms), Some(-4_000));
    }

    #[test]
    fn bad_wire_locks_and_shards_are_refused() {
        type Spoil = fn(&mut v1::ResourceLease);
        let cases: Vec<(Spoil, &str)> = vec![
            (|l| l.token = -1, "token"),
            (|l| l.lease_until_ms = -5, "lease_until_ms"),
            (|l| l.heartbeat_at_ms = i64::MAX, "heartbeat_at_ms"),
            (|l| l.lock_at_least_until_ms = -1, "lock_at_least_until_ms"),
        ];
        for (spoil, needle) in cases {
            let mut l = wire_lock("bad");
            spoil(&mut l);
            let err = LockView::from_wire(l, NOW).err().map(|e| e.to_string());
            let err = err.unwrap_or_default();
            assert!(err.contains(needle), "{err:?} should mention {needle}");
        }
        assert!(
            LockList::from_wire(v1::ListLocksResponse {
                locks: vec![],
                now_ms: 0
            })
            .is_err()
        );

        let mut r = wire_shards();
        r.shards.push(wire_shard(4, "web-1#1", "held"));
        let err = GroupShards::from_wire(r).err().map(|e| e.to_string());
        assert_eq!(err.as_deref(), Some("shard = 4, out of range"));
        let mut r = wire_shards();
        r.shards.push(wire_shard(1, "web-2#2", "held"));
        let err = GroupShards::from_wire(r).err().map(|e| e.to_string());
        assert_eq!(err.as_deref(), Some("shard 1 of group orders twice"));
        let mut r = wire_shards();
        r.group = None;
        assert_eq!(
            GroupShards::from_wire(r).err(),
            Some(WireError::MissingField("group"))
        );
        let mut r = wire_shards();
        r.members[0].heartbeat_at_ms = -1;
        assert!(GroupShards::from_wire(r).is_err());
    }

    #[test]
    fn shards_come_out_by_number_with_members_as_sent() {
        let g = GroupShards::from_wire(wire_shards()).unwrap();
        let numbers: Vec<u32> = g.shards.iter().map(|s| s.shard).collect();
        assert_eq!(numbers, [0, 1, 2, 3]);
        assert_eq!(g.shards[3].owner, None);
        assert_eq!(g.shards[3].time_left_ms, None);
        assert_eq!(g.shards[0].time_left_ms, Some(9_000));
        let json = serde_json::to_value(&g).unwrap();
        assert_eq!(json["group"]["name"], "orders");
        assert_eq!(json["group"]["shard_count"], 4);
        assert_eq!(json["shards"][0]["shard"], 0);
        assert_eq!(json["shards"][0]["owner"], "web-1#1");
        assert_eq!(json["shards"][0]["token"], 1);
        assert_eq!(json["shards"][3]["owner"], serde_json::Value::Null);
        assert_eq!(json["members"][1]["agent"], "web-2#2");
        assert_eq!(json["members"][1]["shards"], 1);
        assert_eq!(json["now"], "2025-12-01T11:20:00.000Z");
        assert_eq!(json["shards"][2]["state"], "suspect");
        assert_eq!(json["members"][0]["state"], "live");
    }

    #[test]
    fn an_older_agent_words_and_unknown_enum_numbers_are_shown_as_sent() {
        // An older agent: the enums unset, the words set.
        let mut lock = wire_lock("old");
        (lock.lease_state, lock.state) = (0, "released".into());
        assert_eq!(LockView::from_wire(lock, NOW).unwrap().state, "released");
        let mut r = wire_shards();
        (r.shards[0].lease_state, r.shards[0].state) = (0, "expired".into());
        (r.members[0].member_state, r.members[0].state) = (0, "gone".into());
        let g = GroupShards::from_wire(r).unwrap();
        assert_eq!(
            (g.shards[2].state.as_str(), g.members[0].state.as_str()),
            ("expired", "gone")
        );
        // A newer agent: numbers this build does not know, with and without a word.
        let mut lock = wire_lock("new");
        (lock.lease_state, lock.state) = (77, String::new());
        assert_eq!(LockView::from_wire(lock, NOW).unwrap().state, "unknown(77)");
        let mut r = wire_shards();
        (r.members[1].member_state, r.members[1].state) = (9, "resting".into());
        let g = GroupShards::from_wire(r).unwrap();
        assert_eq!(g.members[1].state, "resting");
    }
}
