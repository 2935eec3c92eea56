//! Shard ownership groups (issue 8 groundwork): which live member should own each shard of a
//! group, computed the same way by every member from the same snapshot, so the members agree
//! without talking to each other. Pure: no I/O, no clock.
//!
//! ```text
//!   shards 0..N, live members m (sorted), current owners
//!     quota: N / m each, the first N % m members (by shards held, then id) one more
//!     keep:  a shard stays with its owner while the owner is live and within its quota
//!     move:  the rest (dead owner, no owner, over quota) go to members under quota,
//!            lowest shard to the member furthest under quota (ties: lowest id)
//! ```
//!
//! Invariants: every shard has exactly one target owner, a live member; counts differ by at
//! most one; a shard whose owner is live and within quota never moves (sticky), so a
//! balanced group with the same members yields no move at all, and a member joining or leaving
//! moves only the shards the new quotas require.
//!
//! What is *live* is the caller's business: the debounce (suspect, grace, revoke) decides who
//! counts, so a member that blips keeps its shards here.

use std::collections::BTreeMap;

/// The target owner of every shard of a group of `owners.len()` shards: `owners[s]` is shard
/// `s`'s current owner, if any. Returns `None` when there is no live member (nobody can own).
/// Member names are compared as given; `live` may be in any order and hold duplicates.
pub fn plan_shards(live: &[&str], owners: &[Option<&str>]) -> Option<Vec<String>> {
    let mut members: Vec<&str> = live.to_vec();
    members.sort_unstable();
    members.dedup();
    if members.is_empty() {
        return None;
    }
    let shards = owners.len();
    let base = shards / members.len();
    let extra = shards % members.len();

    // Shards each live member holds now, to give the +1 quotas to those that would otherwise
    // have to give one up.
    let mut held: BTreeMap<&str, usize> = members.iter().map(|m| (*m, 0)).collect();
    for owner in owners.iter().flatten() {
        if let Some(n) = held.get_mut(owner) {
            *n += 1;
        }
    }
    let mut by_holding: Vec<&str> = members.clone();
    by_holding.sort_by(|a, b| held[b].cmp(&held[a]).then(a.cmp(b)));
    let quota: BTreeMap<&str, usize> = by_holding
        .iter()
        .enumerate()
        .map(|(rank, m)| (*m, base + usize::from(rank < extra)))
        .collect();

    // Keep what stays, lowest shards first, up to each member's quota.
    let mut target: Vec<Option<&str>> = vec![None; shards];
    let mut kept: BTreeMap<&str, usize> = members.iter().map(|m| (*m, 0)).collect();
    for (shard, owner) in owners.iter().enumerate() {
        let Some(owner) = owner else { continue };
        if let (Some(n), Some(q)) = (kept.get_mut(owner), quota.get(owner))
            && *n < *q
        {
            *n += 1;
            target[shard] = Some(owner);
        }
    }
    // Give the rest to members under quota: the one with the most room first (lowest id on
    // ties), so the result does not depend on the order shards were lost in.
    for slot in target.iter_mut().filter(|t| t.is_none()) {
        let taker = members
            .iter()
            .copied()
            .filter(|m| kept[m] < quota[m])
            .max_by(|a, b| {
                (quota[a] - kept[a])
                    .cmp(&(quota[b] - kept[b]))
                    .then(b.cmp(a))
            })?;
        if let Some(n) = kept.get_mut(taker) {
            *n += 1;
        }
        *slot = Some(taker);
    }
    target.into_iter().map(|t| t.map(str::to_string)).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use proptest::prelude::*;

    fn counts(plan: &[String]) -> BTreeMap<&str, usize> {
        let mut c = BTreeMap::new();
        for owner in plan {
            *c.entry(owner.as_str()).or_default() += 1;
        }
        c
    }

    fn moves(owners: &[Option<&str>], plan: &[String]) -> usize {
        owners
            .iter()
            .zip(plan)
            .filter(|(o, p)| o.as_deref() != Some(p.as_str()))
            .count()
    }

    #[test]
    fn an_empty_group_spreads_evenly_and_nobody_owns_without_members() {
        let plan = plan_shards(&["b", "a", "c"], &[None; 64]).unwrap();
        let c = counts(&plan);
        assert_eq!(c.values().copied().collect::<Vec<_>>(), [22, 21, 21]);
        assert_eq!(plan_shards(&[], &[None; 4]), None);
        assert_eq!(plan_shards(&["a"], &[]), Some(vec![]));
    }

    #[test]
    fn a_balanced_group_does_not_move() {
        let first = plan_shards(&["a", "b", "c"], &[None; 64]).unwrap();
        let owners: Vec<Option<&str>> = first.iter().map(|s| Some(s.as_str())).collect();
        let again = plan_shards(&["c", "b", "a"], &owners).unwrap();
        assert_eq!(again, first);
    }

    #[test]
    fn a_dead_members_shards_go_to_the_others_and_nothing_else_moves() {
        let first = plan_shards(&["a", "b", "c"], &[None; 64]).unwrap();
        let owners: Vec<Option<&str>> = first.iter().map(|s| Some(s.as_str())).collect();
        let after = plan_shards(&["a", "c"], &owners).unwrap();
        assert_eq!(
            counts(&after).values().copied().collect::<Vec<_>>(),
            [32, 32]
        );
        for (before, now) in first.iter().zip(&after) {
            if before != "b" {
                assert_eq!(before, now, "a live member's shard stayed");
            }
        }
    }

    #[test]
    fn a_joining_member_takes_only_its_share() {
        let first = plan_shards(&["a", "b"], &[None; 64]).unwrap();
        let owners: Vec<Option<&str>> = first.iter().map(|s| Some(s.as_str())).collect();
        let after = plan_shards(&["a", "b", "c"], &owners).unwrap();
        assert_eq!(counts(&after)["c"], 21);
        assert_eq!(moves(&owners, &after), 21, "only c's share moved");
    }

    proptest! {
        #[test]
        fn every_plan_is_complete_balanced_live_and_sticky(
            shards in 0usize..200,
            members in proptest::collection::btree_set("[a-f]", 1..6),
            owners_seed in proptest::collection::vec(0usize..8, 0..200),
        ) {
            let members: Vec<String> = members.into_iter().collect();
            let pool = ["a", "b", "c", "d", "e", "f", "gone", "x"];
            let owners: Vec<Option<&str>> = (0..shards)
                .map(|s| owners_seed.get(s).map(|i| pool[*i]))
                .collect();
            let live: Vec<&str> = members.iter().map(String::as_str).collect();
            let plan = plan_shards(&live, &owners).unwrap();
            prop_assert_eq!(plan.len(), shards);
            prop_assert!(plan.iter().all(|p| live.contains(&p.as_str())));
            let c = counts(&plan);
            let (lo, hi) = (
                live.iter().map(|m| c.get(m).copied().unwrap_or(0)).min().unwrap(),
                live.iter().map(|m| c.get(m).copied().unwrap_or(0)).max().unwrap(),
            );
            prop_assert!(hi - lo <= 1, "{:?}", c);
            // Stable: planning again from the plan moves nothing.
            let settled: Vec<Option<&str>> = plan.iter().map(|s| Some(s.as_str())).collect();
            prop_assert_eq!(plan_shards(&live, &settled).unwrap(), plan.clone());
            // Sticky: no more moves than the shards that had to move (dead or no owner, or
            // above the owner's quota).
            let quota_hi = shards.div_ceil(live.len());
            let mut held: BTreeMap<&str, usize> = BTreeMap::new();
            for o in owners.iter().flatten() {
                *held.entry(o).or_default() += 1;
            }
            let must: usize = owners.iter().filter(|o| o.is_none_or(|o| !live.contains(&o))).count()
                + held
                    .iter()
                    .filter(|(m, _)| live.contains(m))
                    .map(|(_, n)| n.saturating_sub(quota_hi))
                    .sum::<usize>();
            let extra_slack = live.len();
            prop_assert!(moves(&owners, &plan) <= must + extra_slack, "{} > {}", moves(&owners, &plan), must);
        }
    }
}
