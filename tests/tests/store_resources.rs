//! Store conformance: named resource leases (DESIGN §4 "Resource leases") — locks taken,
//! extended, refused and taken over after lease + grace with a growing token and a history
//! row per holding; renewals and releases fenced by (holder, token); the ShedLock bounds
//! (`lock_at_least_for` keeps a released lock held, `lock_at_most_for` frees a crashed
//! holder's); operators' forced releases and audited calls; moves in the last hour; batch
//! renewal; shard groups, their members and shards; the fence of a caller's own transaction;
//! history pruning; and racing acquirers. On PostgreSQL and SQLite alike.
//!
//! Time moves by backdating columns in SQL (`expire`), never by sleeping.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::TimeDelta;
use leasehold_shared::domain::{MemberState, ResourceState};
use leasehold_shared::store::{
    GroupName, HolderWrite, LockAcquireParams, LockAcquired, LockForceReleaseParams, LockName,
    ResourceHolderParams, ResourceRecord, ResourceRenewParams, ShardAcquireParams,
    ShardGroupCreateParams, ShardJoinParams,
};
use leasehold_shared::{Actor, AgentId, Role, Store, StoreError};
use leasehold_tests::{Rows, StoreDb, Val, conformance};

const TTL: Duration = Duration::from_secs(30);
const GRACE: Duration = Duration::from_secs(5);

fn agent(id: &str) -> AgentId {
    AgentId::new(id).unwrap()
}

fn lock(name: &str) -> LockName {
    LockName::new(name).unwrap()
}

fn group(name: &str) -> GroupName {
    GroupName::new(name).unwrap()
}

fn ops() -> Actor {
    Actor::operator("ops")
}

fn viewer() -> Actor {
    Actor {
        name: "watcher".into(),
        role: Role::Viewer,
    }
}

fn ttl() -> TimeDelta {
    TimeDelta::from_std(TTL).unwrap()
}

fn plain(name: &str, holder: &str) -> LockAcquireParams {
    LockAcquireParams::new(lock(name), agent(holder), TTL, GRACE)
}

async fn acquire(store: &Arc<dyn Store>, name: &str, holder: &str) -> LockAcquired {
    store.lock_acquire(plain(name, holder)).await.unwrap()
}

fn by(name: &str, holder: &str, token: i64) -> ResourceHolderParams {
    ResourceHolderParams {
        name: name.into(),
        holder: agent(holder),
        token,
        ttl: TTL,
        actor: None,
    }
}

/// Moves the lease `name` `secs` past its `lease_until`, as if its holder had stopped renewing
/// a whole lease ago.
async fn expire(db: &StoreDb, name: &str, secs: f64) {
    let ttl = TTL.as_secs_f64();
    let changed = db
        .update(
            Rows::Resource(name),
            &[
                ("lease_until", Val::At(-secs)),
                ("heartbeat_at", Val::At(-secs - ttl)),
                ("acquired_at", Val::At(-secs - ttl)),
            ],
        )
        .await
        .unwrap();
    assert_eq!(changed, 1, "no lease {name}");
}

/// The lock `name` as listed, with the listing's now.
async fn listed(
    store: &Arc<dyn Store>,
    name: &str,
) -> (ResourceRecord, chrono::DateTime<chrono::Utc>) {
    let listing = store.lock_list().await.unwrap();
    let lock = listing
        .locks
        .into_iter()
        .find(|l| l.name == name)
        .unwrap_or_else(|| panic!("lock {name} is not listed"));
    (lock, listing.now)
}

async fn state(store: &Arc<dyn Store>, name: &str) -> ResourceState {
    let (lock, now) = listed(store, name).await;
    lock.state(now, GRACE)
}

fn history(rows: &[(&str, i64)]) -> Vec<(String, i64)> {
    rows.iter().map(|(o, t)| (o.to_string(), *t)).collect()
}

conformance!(a_lock_is_extended_refused_and_taken_over_after_lease_and_grace);
async fn a_lock_is_extended_refused_and_taken_over_after_lease_and_grace(db: StoreDb) {
    let store = db.store();
    let first = acquire(&store, "nightly", "web-1#1").await;
    assert!(first.acquired);
    assert_eq!(first.lock.token, 1);
    assert_eq!(first.lock.owner.as_deref(), Some("web-1#1"));
    assert_eq!(first.lock.shard, None);
    assert_eq!(first.lock.lease_until, Some(first.now + ttl()));
    assert_eq!(first.lock.acquired_at, Some(first.now));
    assert_eq!(first.lock.state(first.now, GRACE), ResourceState::Held);

    // The holder again: extended, same token, no new holding.
    let again = acquire(&store, "nightly", "web-1#1").await;
    assert!(again.acquired);
    assert_eq!(again.lock.token, 1);
    assert!(again.lock.lease_until >= first.lock.lease_until);
    assert_eq!(again.lock.acquired_at, first.lock.acquired_at);

    // Someone else: refused while held, shown who holds it.
    let refused = acquire(&store, "nightly", "web-2#1").await;
    assert!(!refused.acquired);
    assert_eq!(refused.lock.owner.as_deref(), Some("web-1#1"));
    assert_eq!(refused.lock.token, 1);

    // Past its lease but within grace: still refused (the debounce).
    expire(&db, "nightly", 3.0).await;
    assert_eq!(state(&store, "nightly").await, ResourceState::Expired);
    assert!(!acquire(&store, "nightly", "web-2#1").await.acquired);

    // Past lease + grace: taken, with the next token.
    expire(&db, "nightly", GRACE.as_secs_f64() + 1.0).await;
    assert_eq!(state(&store, "nightly").await, ResourceState::Free);
    let taken = acquire(&store, "nightly", "web-2#1").await;
    assert!(taken.acquired);
    assert_eq!(taken.lock.token, 2);
    assert_eq!(taken.lock.owner.as_deref(), Some("web-2#1"));
    assert_eq!(taken.lock.lease_until, Some(taken.now + ttl()));
    assert!(!acquire(&store, "nightly", "web-1#1").await.acquired);

    // The holder's own ended lease: a new holding at once, the token grows again.
    expire(&db, "nightly", 1.0).await;
    let mine = acquire(&store, "nightly", "web-2#1").await;
    assert!(mine.acquired);
    assert_eq!(mine.lock.token, 3);

    assert_eq!(
        db.resource_history("nightly").await.unwrap(),
        history(&[("web-1#1", 1), ("web-2#1", 2), ("web-2#1", 3)])
    );

    // Bad bounds are refused and write nothing.
    let mut short = plain("other", "web-1#1");
    short.ttl = Duration::from_millis(500);
    assert!(matches!(
        store.lock_acquire(short).await,
        Err(StoreError::Invalid(_))
    ));
    let mut inverted = plain("other", "web-1#1");
    inverted.lock_at_least_for = Some(Duration::from_secs(20));
    inverted.lock_at_most_for = Some(Duration::from_secs(10));
    assert!(matches!(
        store.lock_acquire(inverted).await,
        Err(StoreError::Invalid(_))
    ));
    assert!(LockName::new("has#hash").is_err());
    assert_eq!(
        db.count("SELECT count(*) FROM resource_leases WHERE name = 'other'")
            .await
            .unwrap(),
        0
    );
    db.drop_db().await.unwrap();
}

conformance!(renewals_are_fenced_after_takeover_and_after_release);
async fn renewals_are_fenced_after_takeover_and_after_release(db: StoreDb) {
    let store = db.store();
    assert_eq!(acquire(&store, "sync", "a#1").await.lock.token, 1);

    let renewed = store
        .resource_renew(by("sync", "a#1", 1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(renewed.token, 1);
    assert_eq!(
        renewed.lease_until.unwrap() - renewed.heartbeat_at.unwrap(),
        ttl()
    );
    // A wrong token or holder is fenced.
    assert_eq!(
        store.resource_renew(by("sync", "a#1", 2)).await.unwrap(),
        None
    );
    assert_eq!(
        store.resource_renew(by("sync", "b#1", 1)).await.unwrap(),
        None
    );
    assert_eq!(
        store.resource_renew(by("missing", "a#1", 1)).await.unwrap(),
        None
    );

    // Past its lease, nobody took it yet: the holder may still renew (the debounce).
    expire(&db, "sync", 2.0).await;
    let late = store
        .resource_renew(by("sync", "a#1", 1))
        .await
        .unwrap()
        .unwrap();
    assert!(late.lease_until.unwrap() > late.heartbeat_at.unwrap());
    assert_eq!(state(&store, "sync").await, ResourceState::Held);

    // Taken over: the old holder's renewals and releases are fenced, the new one's land.
    expire(&db, "sync", GRACE.as_secs_f64() + 1.0).await;
    assert_eq!(acquire(&store, "sync", "b#1").await.lock.token, 2);
    assert_eq!(
        store.resource_renew(by("sync", "a#1", 1)).await.unwrap(),
        None
    );
    assert_eq!(
        store.resource_release(by("sync", "a#1", 1)).await.unwrap(),
        None
    );
    assert_eq!(listed(&store, "sync").await.0.owner.as_deref(), Some("b#1"));
    assert!(
        store
            .resource_renew(by("sync", "b#1", 2))
            .await
            .unwrap()
            .is_some()
    );

    // Released: renewals are fenced; a second release is a repeat (store_release_retry.rs).
    let released = store
        .resource_release(by("sync", "b#1", 2))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(released.owner, None);
    assert_eq!(released.lease_until, None);
    assert_eq!(released.token, 2);
    assert_eq!(
        store.resource_renew(by("sync", "b#1", 2)).await.unwrap(),
        None
    );
    assert_eq!(
        store.resource_release(by("sync", "b#1", 2)).await.unwrap(),
        Some(released)
    );

    let mut bad = by("sync", "b#1", 2);
    bad.ttl = Duration::ZERO;
    assert!(matches!(
        store.resource_renew(bad).await,
        Err(StoreError::Invalid(_))
    ));
    db.drop_db().await.unwrap();
}

conformance!(release_frees_at_once_but_at_least_keeps_it_held_until_then);
async fn release_frees_at_once_but_at_least_keeps_it_held_until_then(db: StoreDb) {
    let store = db.store();
    // No at-least bound: free at once, anyone takes it without waiting for grace.
    acquire(&store, "report", "a#1").await;
    let freed = store
        .resource_release(by("report", "a#1", 1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(freed.owner, None);
    assert_eq!(state(&store, "report").await, ResourceState::Free);
    let next = acquire(&store, "report", "b#1").await;
    assert!(next.acquired);
    assert_eq!(next.lock.token, 2);

    // At least 60 s: released after a moment, it stays held (state released) until then.
    let mut digest = plain("digest", "a#1");
    digest.lock_at_least_for = Some(Duration::from_secs(60));
    let held = store.lock_acquire(digest.clone()).await.unwrap();
    assert!(held.acquired);
    let least = held.now + TimeDelta::seconds(60);
    assert_eq!(held.lock.lock_at_least_until, Some(least));
    let released = store
        .resource_release(by("digest", "a#1", 1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(released.owner.as_deref(), Some("a#1"));
    assert_eq!(released.lease_until, Some(least));
    assert!(released.released_at.is_some());
    assert_eq!(state(&store, "digest").await, ResourceState::Released);
    assert!(state(&store, "digest").await.is_held());
    // Nobody gets it, not even the one that gave it back; nobody renews it.
    let refused = acquire(&store, "digest", "b#1").await;
    assert!(!refused.acquired);
    assert_eq!(refused.lock.owner.as_deref(), Some("a#1"));
    assert!(!store.lock_acquire(digest).await.unwrap().acquired);
    assert_eq!(
        store.resource_renew(by("digest", "a#1", 1)).await.unwrap(),
        None
    );

    // Once the bound has passed it is free at once (no grace to wait for).
    db.update(
        Rows::Resource("digest"),
        &[
            ("lock_at_least_until", Val::At(-0.01)),
            ("lease_until", Val::At(-0.01)),
        ],
    )
    .await
    .unwrap();
    assert_eq!(state(&store, "digest").await, ResourceState::Free);
    let taken = acquire(&store, "digest", "b#1").await;
    assert!(taken.acquired);
    assert_eq!(taken.lock.token, 2);
    assert_eq!(taken.lock.released_at, None);
    assert_eq!(taken.lock.lock_at_least_until, None);

    // A holder that lives past its at-least bound releases to free at once.
    let mut brief = plain("brief", "a#1");
    brief.lock_at_least_for = Some(Duration::from_secs(10));
    store.lock_acquire(brief).await.unwrap();
    db.update(
        Rows::Resource("brief"),
        &[("lock_at_least_until", Val::At(-1.0))],
    )
    .await
    .unwrap();
    let gone = store
        .resource_release(by("brief", "a#1", 1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(gone.owner, None);
    assert!(acquire(&store, "brief", "b#1").await.acquired);
    db.drop_db().await.unwrap();
}

conformance!(at_most_frees_a_crashed_holders_lock_at_the_bound);
async fn at_most_frees_a_crashed_holders_lock_at_the_bound(db: StoreDb) {
    let store = db.store();
    let grace = Duration::from_secs(30);
    let mut p = plain("sync", "a#1");
    p.ttl = Duration::from_secs(60);
    p.grace = grace;
    p.lock_at_most_for = Some(Duration::from_secs(10));
    let held = store.lock_acquire(p).await.unwrap();
    assert!(held.acquired);
    let most = held.now + TimeDelta::seconds(10);
    assert_eq!(held.lock.lock_at_most_until, Some(most));
    assert_eq!(
        held.lock.lease_until,
        Some(most),
        "the lease is capped by the bound"
    );

    // Renewals, by renew and by acquire, never extend past it.
    let mut renew = by("sync", "a#1", 1);
    renew.ttl = Duration::from_secs(60);
    let renewed = store.resource_renew(renew.clone()).await.unwrap().unwrap();
    assert_eq!(renewed.lease_until, Some(most));
    let many = store
        .resource_renew_many(ResourceRenewParams {
            owner: agent("a#1"),
            leases: vec![("sync".into(), 1)],
            groups: vec![],
            ttl: Duration::from_secs(60),
        })
        .await
        .unwrap();
    assert_eq!(many.renewed, vec![("sync".to_string(), 1, most)]);
    let mut again = plain("sync", "a#1");
    again.ttl = Duration::from_secs(60);
    let extended = store.lock_acquire(again).await.unwrap();
    assert!(extended.acquired);
    assert_eq!(extended.lock.token, 1);
    assert_eq!(extended.lock.lease_until, Some(most));

    let mut other = plain("sync", "b#1");
    other.grace = grace;
    assert!(!store.lock_acquire(other.clone()).await.unwrap().acquired);

    // The holder crashed with a lease that still runs (a longer TTL, say): at the bound the
    // lock is free at once, without waiting for lease or grace.
    db.update(
        Rows::Resource("sync"),
        &[
            ("lock_at_most_until", Val::At(-0.01)),
            ("lease_until", Val::At(50.0)),
        ],
    )
    .await
    .unwrap();
    assert_eq!(state(&store, "sync").await, ResourceState::Free);
    assert_eq!(store.resource_renew(renew).await.unwrap(), None);
    let taken = store.lock_acquire(other).await.unwrap();
    assert!(taken.acquired);
    assert_eq!(taken.lock.token, 2);
    assert_eq!(taken.lock.owner.as_deref(), Some("b#1"));
    assert_eq!(
        taken.lock.lock_at_most_until, None,
        "a plain acquire has no bound"
    );
    db.drop_db().await.unwrap();
}

conformance!(operators_force_release_and_their_calls_are_audited);
async fn operators_force_release_and_their_calls_are_audited(db: StoreDb) {
    let store = db.store();
    // An operator's acquire through the API is audited: applied, then noop when refused.
    let mut api = plain("nightly", "a#1");
    api.actor = Some(ops());
    assert!(store.lock_acquire(api.clone()).await.unwrap().acquired);
    let mut api_b = plain("nightly", "b#1");
    api_b.actor = Some(ops());
    assert!(!store.lock_acquire(api_b).await.unwrap().acquired);
    let mut denied_acquire = plain("nightly", "v#1");
    denied_acquire.actor = Some(viewer());
    assert!(matches!(
        store.lock_acquire(denied_acquire).await,
        Err(StoreError::PermissionDenied { .. })
    ));

    // A viewer may not force a release: refused, audited as denied, the lock still held.
    let denied = store
        .lock_force_release(LockForceReleaseParams {
            name: lock("nightly"),
            actor: viewer(),
        })
        .await
        .unwrap_err();
    assert!(matches!(denied, StoreError::PermissionDenied { .. }));
    assert_eq!(
        listed(&store, "nightly").await.0.owner.as_deref(),
        Some("a#1")
    );

    // An operator frees it whoever holds it; the token stays, the holder is fenced.
    let freed = store
        .lock_force_release(LockForceReleaseParams {
            name: lock("nightly"),
            actor: ops(),
        })
        .await
        .unwrap();
    assert_eq!(freed.owner, None);
    assert_eq!(freed.lease_until, None);
    assert_eq!(freed.token, 1);
    assert_eq!(state(&store, "nightly").await, ResourceState::Free);
    assert_eq!(
        store.resource_renew(by("nightly", "a#1", 1)).await.unwrap(),
        None
    );
    let next = acquire(&store, "nightly", "b#1").await;
    assert!(next.acquired);
    assert_eq!(next.lock.token, 2);

    // The holder's release through the API is audited; a forced release of a free lock is a
    // no-op; of an unknown lock, an error (audited as failed).
    let mut release = by("nightly", "b#1", 2);
    release.actor = Some(ops());
    assert!(store.resource_release(release).await.unwrap().is_some());
    store
        .lock_force_release(LockForceReleaseParams {
            name: lock("nightly"),
            actor: ops(),
        })
        .await
        .unwrap();
    let missing = store
        .lock_force_release(LockForceReleaseParams {
            name: lock("missing"),
            actor: ops(),
        })
        .await
        .unwrap_err();
    assert!(matches!(missing, StoreError::LockNotFound(ref n) if n == "missing"));
    assert_eq!(
        db.count("SELECT count(*) FROM resource_leases WHERE name = 'missing'")
            .await
            .unwrap(),
        0
    );

    let rows: Vec<(String, String, String, String, String)> = db.audit_rows().await.unwrap();
    let expect = [
        ("ops", "operator", "lock_acquire", "lock:nightly", "applied"),
        ("ops", "operator", "lock_acquire", "lock:nightly", "noop"),
        (
            "watcher",
            "viewer",
            "lock_acquire",
            "lock:nightly",
            "denied",
        ),
        (
            "watcher",
            "viewer",
            "lock_release",
            "lock:nightly",
            "denied",
        ),
        ("ops", "operator", "lock_release", "lock:nightly", "applied"),
        ("ops", "operator", "lock_release", "lock:nightly", "applied"),
        ("ops", "operator", "lock_release", "lock:nightly", "noop"),
        ("ops", "operator", "lock_release", "lock:missing", "failed"),
    ];
    let expect: Vec<(String, String, String, String, String)> = expect
        .iter()
        .map(|(a, b, c, d, e)| {
            (
                a.to_string(),
                b.to_string(),
                c.to_string(),
                d.to_string(),
                e.to_string(),
            )
        })
        .collect();
    assert_eq!(rows, expect);
    // The forced release records whose lease it ended.
    let details = db.audit_details().await.unwrap();
    assert_eq!(
        details[4].2,
        Some(serde_json::json!({"owner": "a#1", "token": 1}))
    );
    assert_eq!(details[0].2.as_ref().unwrap()["token"], 1);
    db.drop_db().await.unwrap();
}

conformance!(locks_are_listed_with_their_moves_in_the_last_hour);
async fn locks_are_listed_with_their_moves_in_the_last_hour(db: StoreDb) {
    let store = db.store();
    // hot: a (1) → b (2) → b again (3, not a move) → a (4).
    acquire(&store, "hot", "a#1").await;
    expire(&db, "hot", 10.0).await;
    acquire(&store, "hot", "b#1").await;
    expire(&db, "hot", 1.0).await;
    assert_eq!(acquire(&store, "hot", "b#1").await.lock.token, 3);
    expire(&db, "hot", 10.0).await;
    assert_eq!(acquire(&store, "hot", "a#1").await.lock.token, 4);
    acquire(&store, "calm", "a#1").await;
    // Shards are not locks.
    store
        .shard_group_create(ShardGroupCreateParams {
            name: group("parts"),
            count: 2,
            actor: ops(),
        })
        .await
        .unwrap();

    let listing = store.lock_list().await.unwrap();
    let names: Vec<(&str, u32)> = listing
        .locks
        .iter()
        .map(|l| (l.name.as_str(), l.moves_last_hour))
        .collect();
    assert_eq!(names, [("calm", 0), ("hot", 2)]);

    // A move older than an hour no longer counts.
    db.update(
        Rows::ResourceHistory("hot", 2),
        &[("acquired_at", Val::At(-3700.0))],
    )
    .await
    .unwrap();
    assert_eq!(listed(&store, "hot").await.0.moves_last_hour, 1);
    db.drop_db().await.unwrap();
}

conformance!(renew_many_renews_what_is_held_and_reports_the_rest);
async fn renew_many_renews_what_is_held_and_reports_the_rest(db: StoreDb) {
    let store = db.store();
    store
        .shard_group_create(ShardGroupCreateParams {
            name: group("parts"),
            count: 4,
            actor: ops(),
        })
        .await
        .unwrap();
    let join = |member: &str| ShardJoinParams {
        group: group("parts"),
        member: agent(member),
        ttl: TTL,
    };
    store.shard_join(join("a#1")).await.unwrap();
    let shard = |n: u32, owner: &str| ShardAcquireParams {
        group: group("parts"),
        shard: n,
        owner: agent(owner),
        ttl: TTL,
        grace: GRACE,
    };
    assert_eq!(store.shard_acquire(shard(0, "a#1")).await.unwrap(), Some(1));
    assert_eq!(store.shard_acquire(shard(1, "a#1")).await.unwrap(), Some(1));
    acquire(&store, "x", "a#1").await;
    // z was taken over by b; y is someone else's.
    acquire(&store, "z", "a#1").await;
    expire(&db, "z", 10.0).await;
    acquire(&store, "z", "b#1").await;
    acquire(&store, "y", "b#1").await;
    // a's membership and shard 1 have gone stale (not taken, though).
    db.update(
        Rows::ShardMember("parts", "a#1"),
        &[
            ("lease_until", Val::At(-2.0)),
            ("heartbeat_at", Val::At(-32.0)),
        ],
    )
    .await
    .unwrap();
    expire(&db, "parts#1", 2.0).await;
    let y_until = listed(&store, "y").await.0.lease_until;

    let out = store
        .resource_renew_many(ResourceRenewParams {
            owner: agent("a#1"),
            leases: vec![
                ("x".into(), 1),
                ("parts#0".into(), 1),
                ("parts#1".into(), 1),
                ("z".into(), 1),
                ("y".into(), 1),
                ("nowhere".into(), 7),
            ],
            groups: vec![group("parts"), group("other")],
            ttl: TTL,
        })
        .await
        .unwrap();
    let now = out.now.unwrap();
    let renewed: BTreeSet<(String, i64)> = out
        .renewed
        .iter()
        .map(|(n, t, _)| (n.clone(), *t))
        .collect();
    let expect: BTreeSet<(String, i64)> = [("x", 1), ("parts#0", 1), ("parts#1", 1)]
        .iter()
        .map(|(n, t)| (n.to_string(), *t))
        .collect();
    assert_eq!(renewed, expect);
    assert!(
        out.renewed
            .iter()
            .all(|(_, _, until)| *until == now + ttl())
    );
    let lost: BTreeSet<(String, i64)> = out.lost.into_iter().collect();
    let expect: BTreeSet<(String, i64)> = [("z", 1), ("y", 1), ("nowhere", 7)]
        .iter()
        .map(|(n, t)| (n.to_string(), *t))
        .collect();
    assert_eq!(lost, expect);
    assert_eq!(out.left_groups, vec![group("other")]);

    // The membership was renewed too, and the others' leases were not touched.
    let view = store
        .shard_group_get(group("parts"), Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(view.members.len(), 1);
    assert_eq!(view.members[0].lease_until, now + ttl());
    assert_eq!(view.members[0].heartbeat_at, now);
    assert_eq!(view.group.members, 1);
    assert_eq!(listed(&store, "z").await.0.owner.as_deref(), Some("b#1"));
    assert_eq!(listed(&store, "y").await.0.lease_until, y_until);

    // After leaving, the membership is reported gone.
    store
        .shard_leave(group("parts"), agent("a#1"))
        .await
        .unwrap();
    let out = store
        .resource_renew_many(ResourceRenewParams {
            owner: agent("a#1"),
            leases: vec![],
            groups: vec![group("parts")],
            ttl: TTL,
        })
        .await
        .unwrap();
    assert_eq!(out.left_groups, vec![group("parts")]);
    assert!(out.renewed.is_empty() && out.lost.is_empty());
    db.drop_db().await.unwrap();
}

conformance!(shard_groups_are_created_once_per_count_and_audited);
async fn shard_groups_are_created_once_per_count_and_audited(db: StoreDb) {
    let store = db.store();
    let create = |count: u32, actor: Actor| ShardGroupCreateParams {
        name: group("orders"),
        count,
        actor,
    };
    let made = store.shard_group_create(create(8, ops())).await.unwrap();
    assert!(made.created);
    assert_eq!(made.group.name, "orders");
    assert_eq!(made.group.shard_count, 8);
    assert_eq!((made.group.members, made.group.owned), (0, 0));
    assert_eq!(made.group.moves_last_hour, 0);

    // The same count again: a no-op.
    let again = store.shard_group_create(create(8, ops())).await.unwrap();
    assert!(!again.created);
    assert_eq!(again.group.shard_count, 8);
    assert_eq!(again.group.created_at, made.group.created_at);

    // Another count: refused, audited as failed, nothing changed.
    let refused = store
        .shard_group_create(create(4, ops()))
        .await
        .unwrap_err();
    assert!(
        matches!(refused, StoreError::ShardGroupExists { ref name, count: 8 } if name == "orders"),
        "{refused:?}"
    );
    // A viewer is refused before anything changes.
    let denied = store
        .shard_group_create(create(8, viewer()))
        .await
        .unwrap_err();
    assert!(matches!(denied, StoreError::PermissionDenied { .. }));

    // A bad count (or name) is refused and writes nothing, not even an audit row.
    let audits = db.count("SELECT count(*) FROM audit_log").await.unwrap();
    for bad in [0, 5000] {
        let invalid = store
            .shard_group_create(ShardGroupCreateParams {
                name: group("zero"),
                count: bad,
                actor: ops(),
            })
            .await
            .unwrap_err();
        assert!(matches!(invalid, StoreError::Invalid(_)), "{invalid:?}");
    }
    assert!(GroupName::new("Orders/eu").is_err());
    assert!(GroupName::new("a#1").is_err());
    assert_eq!(
        db.count("SELECT count(*) FROM audit_log").await.unwrap(),
        audits
    );
    assert_eq!(
        db.count("SELECT count(*) FROM shard_groups").await.unwrap(),
        1
    );

    // Its shards: free rows named <group>#<n>, numbered 0..count.
    let view = store
        .shard_group_get(group("orders"), GRACE)
        .await
        .unwrap()
        .unwrap();
    let shards: Vec<_> = view
        .shards
        .iter()
        .map(|s| {
            (
                s.name.as_str(),
                s.shard.clone(),
                s.owner.as_deref(),
                s.token,
            )
        })
        .collect();
    let names: Vec<String> = (0..8u32).map(|n| format!("orders#{n}")).collect();
    let expect: Vec<_> = (0..8u32)
        .map(|n| {
            let name = names[n as usize].as_str();
            (name, Some(("orders".to_string(), n)), None, 0)
        })
        .collect();
    assert_eq!(shards, expect);
    assert!(
        view.shards
            .iter()
            .all(|s| s.state(view.now, GRACE) == ResourceState::Free)
    );

    let audit = db.audit_rows().await.unwrap();
    let results: Vec<(&str, &str, &str)> = audit
        .iter()
        .map(|(_, _, action, target, result)| (action.as_str(), target.as_str(), result.as_str()))
        .collect();
    assert_eq!(
        results,
        [
            ("shard_group_create", "shard_group:orders", "applied"),
            ("shard_group_create", "shard_group:orders", "noop"),
            ("shard_group_create", "shard_group:orders", "failed"),
            ("shard_group_create", "shard_group:orders", "denied"),
        ]
    );
    let details = db.audit_details().await.unwrap();
    assert_eq!(details[2].2, Some(serde_json::json!({"count": 4})));
    assert!(details[2].3.as_deref().unwrap().contains("8 shards"));
    db.drop_db().await.unwrap();
}

conformance!(shards_are_joined_acquired_and_shown);
async fn shards_are_joined_acquired_and_shown(db: StoreDb) {
    let store = db.store();
    let join = |g: &str, member: &str| ShardJoinParams {
        group: group(g),
        member: agent(member),
        ttl: TTL,
    };
    let missing = store.shard_join(join("nowhere", "a#1")).await.unwrap_err();
    assert!(matches!(missing, StoreError::ShardGroupNotFound(ref g) if g == "nowhere"));
    assert_eq!(
        db.count("SELECT count(*) FROM shard_members")
            .await
            .unwrap(),
        0
    );

    store
        .shard_group_create(ShardGroupCreateParams {
            name: group("parts"),
            count: 3,
            actor: ops(),
        })
        .await
        .unwrap();
    store.shard_join(join("parts", "b#1")).await.unwrap();
    store.shard_join(join("parts", "a#1")).await.unwrap();
    // Joining again renews, keeping the joined time.
    store.shard_join(join("parts", "a#1")).await.unwrap();

    let shard = |n: u32, owner: &str| ShardAcquireParams {
        group: group("parts"),
        shard: n,
        owner: agent(owner),
        ttl: TTL,
        grace: GRACE,
    };
    assert_eq!(store.shard_acquire(shard(0, "a#1")).await.unwrap(), Some(1));
    assert_eq!(store.shard_acquire(shard(1, "a#1")).await.unwrap(), Some(1));
    assert_eq!(store.shard_acquire(shard(0, "b#1")).await.unwrap(), None);
    assert_eq!(store.shard_acquire(shard(2, "b#1")).await.unwrap(), Some(1));
    // Its own shard again: the same token.
    assert_eq!(store.shard_acquire(shard(2, "b#1")).await.unwrap(), Some(1));
    let unknown = store.shard_acquire(shard(3, "a#1")).await.unwrap_err();
    assert!(
        matches!(unknown, StoreError::ShardGroupNotFound(_)),
        "{unknown:?}"
    );
    let unknown = store
        .shard_acquire(ShardAcquireParams {
            group: group("nowhere"),
            ..shard(0, "a#1")
        })
        .await
        .unwrap_err();
    assert!(matches!(unknown, StoreError::ShardGroupNotFound(_)));

    // Within grace a shard stays; past lease + grace it moves, with the next token.
    expire(&db, "parts#0", 3.0).await;
    assert_eq!(store.shard_acquire(shard(0, "b#1")).await.unwrap(), None);
    expire(&db, "parts#0", GRACE.as_secs_f64() + 1.0).await;
    assert_eq!(store.shard_acquire(shard(0, "b#1")).await.unwrap(), Some(2));
    assert_eq!(
        db.resource_history("parts#0").await.unwrap(),
        history(&[("a#1", 1), ("b#1", 2)])
    );

    let view = store
        .shard_group_get(group("parts"), GRACE)
        .await
        .unwrap()
        .unwrap();
    let owners: Vec<(u32, Option<&str>, i64, u32)> = view
        .shards
        .iter()
        .map(|s| {
            (
                s.shard.as_ref().unwrap().1,
                s.owner.as_deref(),
                s.token,
                s.moves_last_hour,
            )
        })
        .collect();
    assert_eq!(
        owners,
        [
            (0, Some("b#1"), 2, 1),
            (1, Some("a#1"), 1, 0),
            (2, Some("b#1"), 1, 0)
        ]
    );
    let members: Vec<&str> = view.members.iter().map(|m| m.member.as_str()).collect();
    assert_eq!(members, ["a#1", "b#1"]);
    let a = &view.members[0];
    assert!(a.joined_at <= a.heartbeat_at);
    assert_eq!(a.lease_until - a.heartbeat_at, ttl());
    assert_eq!(a.state(view.now, GRACE), MemberState::Live);
    assert_eq!(view.group.shard_count, 3);
    assert_eq!((view.group.members, view.group.owned), (2, 3));
    assert_eq!(view.group.moves_last_hour, 1);

    // A member counts until its lease + grace: a blip shorter than that keeps it.
    db.update(
        Rows::ShardMember("parts", "a#1"),
        &[
            ("lease_until", Val::At(-3.0)),
            ("heartbeat_at", Val::At(-33.0)),
        ],
    )
    .await
    .unwrap();
    let view = store
        .shard_group_get(group("parts"), GRACE)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(view.group.members, 2);
    assert!(view.members[0].counts(view.now, GRACE));
    assert_eq!(view.members[0].state(view.now, GRACE), MemberState::Suspect);
    let strict = store
        .shard_group_get(group("parts"), Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(strict.group.members, 1);
    db.update(
        Rows::ShardMember("parts", "a#1"),
        &[
            ("lease_until", Val::At(-6.0)),
            ("heartbeat_at", Val::At(-36.0)),
        ],
    )
    .await
    .unwrap();
    let view = store
        .shard_group_get(group("parts"), GRACE)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(view.group.members, 1);
    assert_eq!(view.members[0].state(view.now, GRACE), MemberState::Gone);
    // A shard past lease + grace is no longer owned.
    expire(&db, "parts#1", GRACE.as_secs_f64() + 1.0).await;
    let (groups, _now) = store.shard_group_list(GRACE).await.unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].name, "parts");
    assert_eq!((groups[0].members, groups[0].owned), (1, 2));
    assert_eq!(groups[0].moves_last_hour, 1);

    store
        .shard_leave(group("parts"), agent("b#1"))
        .await
        .unwrap();
    let view = store
        .shard_group_get(group("parts"), GRACE)
        .await
        .unwrap()
        .unwrap();
    let members: Vec<&str> = view.members.iter().map(|m| m.member.as_str()).collect();
    assert_eq!(members, ["a#1"]);
    assert_eq!(
        view.shards[0].owner.as_deref(),
        Some("b#1"),
        "leaving keeps the shards"
    );
    assert_eq!(
        store
            .shard_group_get(group("nowhere"), GRACE)
            .await
            .unwrap(),
        None
    );
    db.drop_db().await.unwrap();
}

conformance!(resource_fence_checks_the_holder_in_the_callers_transaction);
async fn resource_fence_checks_the_holder_in_the_callers_transaction(db: StoreDb) {
    let store = db.store();
    acquire(&store, "cursor", "a#1").await;
    let write = || leasehold_shared::store::AuditEntry {
        actor: Actor::system(),
        action: "cursor_advance".into(),
        target: "cursor".into(),
        params: None,
        result: leasehold_shared::domain::AuditResult::Applied,
        detail: None,
    };

    // Held: the caller's write commits with the check.
    let mut tx = db.begin_write().await.unwrap();
    assert_eq!(
        tx.resource_fence("cursor", "a#1", 1).await.unwrap(),
        HolderWrite::Held
    );
    assert_eq!(
        tx.resource_fence("cursor", "a#1", 2).await.unwrap(),
        HolderWrite::Fenced
    );
    assert_eq!(
        tx.resource_fence("cursor", "b#1", 1).await.unwrap(),
        HolderWrite::Fenced
    );
    assert_eq!(
        tx.resource_fence("nowhere", "a#1", 1).await.unwrap(),
        HolderWrite::Fenced
    );
    tx.audit_write(&write()).await.unwrap();
    tx.commit().await.unwrap();

    // While the caller's transaction holds the check, an operator's forced release waits
    // for it (PostgreSQL: the row is share-locked; SQLite: the write lock is held).
    let mut tx = db.begin_write().await.unwrap();
    assert_eq!(
        tx.resource_fence("cursor", "a#1", 1).await.unwrap(),
        HolderWrite::Held
    );
    let racer = {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            store
                .lock_force_release(LockForceReleaseParams {
                    name: lock("cursor"),
                    actor: ops(),
                })
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !racer.is_finished(),
        "the release did not wait for the fenced transaction"
    );
    tx.audit_write(&write()).await.unwrap();
    tx.commit().await.unwrap();
    racer.await.unwrap().unwrap();

    // Released (forced): fenced.
    let mut tx = db.begin_write().await.unwrap();
    assert_eq!(
        tx.resource_fence("cursor", "a#1", 1).await.unwrap(),
        HolderWrite::Fenced
    );
    tx.rollback().await.unwrap();
    let next = acquire(&store, "cursor", "b#1").await;
    assert_eq!(next.lock.token, 2);

    // Expired: fenced at once, before anyone takes it over (stricter than renew).
    let mut tx = db.begin_write().await.unwrap();
    assert_eq!(
        tx.resource_fence("cursor", "b#1", 2).await.unwrap(),
        HolderWrite::Held
    );
    tx.rollback().await.unwrap();
    expire(&db, "cursor", 1.0).await;
    let mut tx = db.begin_write().await.unwrap();
    assert_eq!(
        tx.resource_fence("cursor", "b#1", 2).await.unwrap(),
        HolderWrite::Fenced
    );
    tx.rollback().await.unwrap();

    assert_eq!(
        db.count("SELECT count(*) FROM audit_log WHERE action = 'cursor_advance'")
            .await
            .unwrap(),
        2
    );
    db.drop_db().await.unwrap();
}

conformance!(history_older_than_the_retention_is_pruned);
async fn history_older_than_the_retention_is_pruned(db: StoreDb) {
    let store = db.store();
    acquire(&store, "nightly", "a#1").await;
    expire(&db, "nightly", 10.0).await;
    acquire(&store, "nightly", "b#1").await;
    store
        .shard_group_create(ShardGroupCreateParams {
            name: group("parts"),
            count: 1,
            actor: ops(),
        })
        .await
        .unwrap();
    for member in ["old#1", "new#1"] {
        store
            .shard_join(ShardJoinParams {
                group: group("parts"),
                member: agent(member),
                ttl: TTL,
            })
            .await
            .unwrap();
    }
    let day = 86_400.0;
    db.update(
        Rows::ResourceHistory("nightly", 1),
        &[("acquired_at", Val::At(-day - 60.0))],
    )
    .await
    .unwrap();
    db.update(
        Rows::ShardMember("parts", "old#1"),
        &[
            ("lease_until", Val::At(-day - 60.0)),
            ("heartbeat_at", Val::At(-day - 90.0)),
        ],
    )
    .await
    .unwrap();

    let retention = Duration::from_secs(86_400);
    assert_eq!(store.resource_history_prune(retention).await.unwrap(), 1);
    assert_eq!(
        db.resource_history("nightly").await.unwrap(),
        history(&[("b#1", 2)])
    );
    let view = store
        .shard_group_get(group("parts"), GRACE)
        .await
        .unwrap()
        .unwrap();
    let members: Vec<&str> = view.members.iter().map(|m| m.member.as_str()).collect();
    assert_eq!(members, ["new#1"]);
    assert_eq!(store.resource_history_prune(retention).await.unwrap(), 0);
    // The lease itself is untouched, and its token keeps growing.
    expire(&db, "nightly", 10.0).await;
    assert_eq!(acquire(&store, "nightly", "a#1").await.lock.token, 3);
    db.drop_db().await.unwrap();
}

conformance!(
    racing_acquirers_get_exactly_one_holding_each,
    worker_threads = 4
);
async fn racing_acquirers_get_exactly_one_holding_each(db: StoreDb) {
    const RACERS: usize = 6;
    const ROUNDS: usize = 8;
    let store = db.store_with_pool(RACERS as u32 + 2).await.unwrap();
    let start = Arc::new(tokio::sync::Barrier::new(RACERS));
    let mut racers = tokio::task::JoinSet::new();
    for n in 0..RACERS {
        let store = Arc::clone(&store);
        let start = Arc::clone(&start);
        racers.spawn(async move {
            let holder = format!("racer-{n}#1");
            let mut won = Vec::new();
            start.wait().await;
            for _ in 0..ROUNDS {
                let out = store.lock_acquire(plain("hot", &holder)).await.unwrap();
                if out.acquired {
                    assert_eq!(out.lock.owner.as_deref(), Some(holder.as_str()));
                    won.push((out.lock.token, holder.clone()));
                    // Give it back at once (fenced by the token) for the next round.
                    let back = store
                        .resource_release(by("hot", &holder, out.lock.token))
                        .await
                        .unwrap();
                    assert!(
                        back.is_some(),
                        "{holder} lost token {} early",
                        out.lock.token
                    );
                } else {
                    assert_ne!(out.lock.owner.as_deref(), Some(holder.as_str()));
                }
                tokio::task::yield_now().await;
            }
            won
        });
    }
    let mut holdings: Vec<(i64, String)> = Vec::new();
    while let Some(won) = racers.join_next().await {
        holdings.extend(won.unwrap());
    }
    holdings.sort();
    // One winner per holding: tokens 1..=k, each once, as the history says.
    assert!(!holdings.is_empty());
    let tokens: Vec<i64> = holdings.iter().map(|(t, _)| *t).collect();
    let expect: Vec<i64> = (1..=i64::try_from(holdings.len()).unwrap()).collect();
    assert_eq!(tokens, expect, "{holdings:?}");
    let recorded: Vec<(i64, String)> = db
        .resource_history("hot")
        .await
        .unwrap()
        .into_iter()
        .map(|(o, t)| (t, o))
        .collect();
    assert_eq!(recorded, holdings);

    // A fresh lock nobody has taken yet (the row is created by the race): one winner.
    let start = Arc::new(tokio::sync::Barrier::new(RACERS));
    let mut racers = tokio::task::JoinSet::new();
    for n in 0..RACERS {
        let store = Arc::clone(&store);
        let start = Arc::clone(&start);
        racers.spawn(async move {
            start.wait().await;
            store
                .lock_acquire(plain("fresh", &format!("racer-{n}#1")))
                .await
                .unwrap()
        });
    }
    let mut winners = Vec::new();
    while let Some(out) = racers.join_next().await {
        let out = out.unwrap();
        assert_eq!(out.lock.token, 1);
        if out.acquired {
            winners.push(out.lock.owner.unwrap());
        }
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    assert_eq!(
        db.resource_history("fresh").await.unwrap(),
        vec![(winners[0].clone(), 1)]
    );
    drop(store);
    db.drop_db().await.unwrap();
}
