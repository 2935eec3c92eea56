//! Store conformance: every holder release is idempotent per (name or task, owner, token or
//! epoch), as completion is per (task, epoch) — issue 18. A release retried after its first
//! commit's reply was lost is told it landed (task leases: `repeated`; resource leases: the
//! row as it is; leadership: `Held`) and changes nothing, whoever holds the lease by then; a
//! genuinely stale holder's release (taken over, force-released, another epoch or owner, or
//! an attempt it ended otherwise) is fenced and changes nothing. On PostgreSQL and SQLite.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use leasehold_shared::domain::TaskStatus;
use leasehold_shared::store::{
    CompleteOutcome, CompleteParams, Completion, GroupName, HolderWrite, LeaderElectParams,
    LeaderOutcome, LockAcquireParams, LockForceReleaseParams, LockName, ReleaseParams,
    ResourceHolderParams, ResourceRecord, ShardAcquireParams, ShardGroupCreateParams,
    ShardJoinParams,
};
use leasehold_shared::{Actor, AgentId, LeaseEpoch, Store, TaskError, TaskId};
use leasehold_tests::factory::FACTORY_OWNER;
use leasehold_tests::helpers::{by_factory, claim, key};
use leasehold_tests::{Rows, StoreDb, TaskSpec, Val, conformance};

const TTL: Duration = Duration::from_secs(30);
const GRACE: Duration = Duration::from_secs(5);

fn agent(id: &str) -> AgentId {
    AgentId::new(id).unwrap()
}

async fn acquire(store: &Arc<dyn Store>, name: &str, holder: &str) -> ResourceRecord {
    let p = LockAcquireParams::new(LockName::new(name).unwrap(), agent(holder), TTL, GRACE);
    let out = store.lock_acquire(p).await.unwrap();
    assert!(out.acquired, "{name} by {holder}: {out:?}");
    out.lock
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

/// The lease row as stored now.
async fn row(store: &Arc<dyn Store>, name: &str) -> ResourceRecord {
    let mut lock = store
        .lock_list()
        .await
        .unwrap()
        .locks
        .into_iter()
        .find(|l| l.name == name)
        .unwrap();
    lock.moves_last_hour = 0;
    lock
}

conformance!(a_retried_lock_release_is_told_it_landed_and_a_stale_one_is_fenced);
async fn a_retried_lock_release_is_told_it_landed_and_a_stale_one_is_fenced(db: StoreDb) {
    let store = db.store();

    // Free at once: the retry is told it landed and changes nothing.
    acquire(&store, "sync", "a#1").await;
    let first = store
        .resource_release(by("sync", "a#1", 1))
        .await
        .unwrap()
        .expect("the release lands");
    assert_eq!((first.owner.as_deref(), first.token), (None, 1));
    let retry = store
        .resource_release(by("sync", "a#1", 1))
        .await
        .unwrap()
        .expect("a retry of a release that landed is not fenced");
    assert_eq!(retry, first);
    assert_eq!(
        row(&store, "sync").await,
        first,
        "the retry changed the row"
    );

    // Taken by another holder meanwhile: the old release's retry still landed, and changes
    // nothing of the new holding.
    let next = acquire(&store, "sync", "b#1").await;
    assert_eq!(next.token, 2);
    let late = store
        .resource_release(by("sync", "a#1", 1))
        .await
        .unwrap()
        .expect("still a repeat once someone else holds it");
    assert_eq!(late, next);
    assert_eq!(row(&store, "sync").await, next);

    // Held until its at-least bound after a release: the retry sees it as released.
    let mut digest =
        LockAcquireParams::new(LockName::new("digest").unwrap(), agent("a#1"), TTL, GRACE);
    digest.lock_at_least_for = Some(Duration::from_secs(60));
    assert!(store.lock_acquire(digest).await.unwrap().acquired);
    let kept = store
        .resource_release(by("digest", "a#1", 1))
        .await
        .unwrap()
        .unwrap();
    assert!(kept.released_at.is_some());
    let again = store
        .resource_release(by("digest", "a#1", 1))
        .await
        .unwrap()
        .expect("a retry of a release before the at-least bound is not fenced");
    assert_eq!(again, kept);
    assert_eq!(row(&store, "digest").await, kept);

    // Genuinely stale: taken over after lease + grace, never released by its holder.
    acquire(&store, "stale", "a#1").await;
    db.update(
        Rows::Resource("stale"),
        &[
            ("lease_until", Val::At(-(GRACE.as_secs_f64() + 1.0))),
            ("heartbeat_at", Val::At(-TTL.as_secs_f64())),
        ],
    )
    .await
    .unwrap();
    let taker = acquire(&store, "stale", "b#1").await;
    assert_eq!(taker.token, 2);
    for (holder, token) in [("a#1", 1), ("b#1", 1), ("a#1", 2), ("c#1", 2)] {
        assert_eq!(
            store
                .resource_release(by("stale", holder, token))
                .await
                .unwrap(),
            None,
            "{holder} with token {token} is fenced"
        );
    }
    assert_eq!(
        row(&store, "stale").await,
        taker,
        "a stale release changed it"
    );

    // Force-released by an operator: the holder's release is fenced (it gave nothing back).
    acquire(&store, "forced", "a#1").await;
    let freed = store
        .lock_force_release(LockForceReleaseParams {
            name: LockName::new("forced").unwrap(),
            actor: Actor::operator("ops"),
        })
        .await
        .unwrap();
    assert_eq!(
        store
            .resource_release(by("forced", "a#1", 1))
            .await
            .unwrap(),
        None
    );
    assert_eq!(row(&store, "forced").await, freed);
    db.drop_db().await.unwrap();
}

conformance!(a_retried_shard_give_back_is_told_it_landed);
async fn a_retried_shard_give_back_is_told_it_landed(db: StoreDb) {
    let store = db.store();
    let group = GroupName::new("parts").unwrap();
    store
        .shard_group_create(ShardGroupCreateParams {
            name: group.clone(),
            count: 2,
            actor: Actor::operator("ops"),
        })
        .await
        .unwrap();
    store
        .shard_join(ShardJoinParams {
            group: group.clone(),
            member: agent("a#1"),
            ttl: TTL,
        })
        .await
        .unwrap();
    let token = store
        .shard_acquire(ShardAcquireParams {
            group: group.clone(),
            shard: 1,
            owner: agent("a#1"),
            ttl: TTL,
            grace: GRACE,
        })
        .await
        .unwrap()
        .unwrap();
    let name = group.shard_lease(1);
    let given = store
        .resource_release(by(&name, "a#1", token))
        .await
        .unwrap()
        .expect("the give-back lands");
    assert_eq!(given.owner, None);
    let retry = store
        .resource_release(by(&name, "a#1", token))
        .await
        .unwrap()
        .expect("a retried give-back is not fenced");
    assert_eq!(retry, given);
    assert_eq!(
        store
            .resource_release(by(&name, "a#1", token - 1))
            .await
            .unwrap(),
        None,
        "an older token is fenced"
    );
    db.drop_db().await.unwrap();
}

fn release(owner: &str, id: i64, epoch: i64) -> ReleaseParams {
    ReleaseParams {
        owner: agent(owner),
        leases: vec![(TaskId(id), LeaseEpoch(epoch))],
    }
}

conformance!(a_retried_task_lease_release_is_repeated_not_fenced);
async fn a_retried_task_lease_release_is_repeated_not_fenced(db: StoreDb) {
    let store = db.store();
    let running = db
        .insert_task(TaskSpec {
            lease_epoch: 3,
            ..TaskSpec::new("relx", "running")
        })
        .await
        .unwrap();
    let cancelling = db
        .insert_task(TaskSpec {
            lease_epoch: 2,
            ..TaskSpec::new("relx", "cancel_requested")
        })
        .await
        .unwrap();
    let both = ReleaseParams {
        owner: agent(FACTORY_OWNER),
        leases: vec![
            (TaskId(running), LeaseEpoch(3)),
            (TaskId(cancelling), LeaseEpoch(2)),
        ],
    };
    let first = store.lease_release_many(both.clone()).await.unwrap();
    let mut released = first.released.clone();
    released.sort();
    assert_eq!(released, vec![TaskId(running), TaskId(cancelling)]);
    assert!(first.repeated.is_empty() && first.fenced.is_empty());
    let rows = (
        db.task_row(running).await.unwrap(),
        db.task_row(cancelling).await.unwrap(),
    );

    // The retry (the first reply was lost): repeated, nothing fenced, nothing changed.
    let retry = store.lease_release_many(both.clone()).await.unwrap();
    let mut repeated = retry.repeated.clone();
    repeated.sort();
    assert_eq!(repeated, vec![TaskId(running), TaskId(cancelling)]);
    assert!(retry.released.is_empty(), "{retry:?}");
    assert!(retry.fenced.is_empty(), "{retry:?}");
    assert_eq!(db.task_row(running).await.unwrap(), rows.0);
    assert_eq!(db.task_row(cancelling).await.unwrap(), rows.1);
    assert_eq!(db.attempt_rows(running).await.unwrap().len(), 1);

    // Claimed again by another agent: the old retry is still a repeat and changes nothing.
    let batch = store.task_claim(claim("b#1", &["relx"], 10)).await.unwrap();
    assert_eq!(batch.tasks.len(), 1);
    assert_eq!(batch.tasks[0].lease_epoch, LeaseEpoch(4));
    let claimed = db.task_row(running).await.unwrap();
    let late = store
        .lease_release_many(release(FACTORY_OWNER, running, 3))
        .await
        .unwrap();
    assert_eq!(late.repeated, vec![TaskId(running)]);
    assert!(late.fenced.is_empty() && late.released.is_empty());
    assert_eq!(db.task_row(running).await.unwrap(), claimed);

    // Genuinely stale: another epoch, another owner, or an attempt it ended otherwise.
    for (owner, epoch) in [(FACTORY_OWNER, 4), ("b#1", 3), ("c#1", 4)] {
        let out = store
            .lease_release_many(release(owner, running, epoch))
            .await
            .unwrap();
        assert_eq!(out.fenced, vec![TaskId(running)], "{owner}/{epoch}");
        assert!(out.repeated.is_empty() && out.released.is_empty());
        assert_eq!(db.task_row(running).await.unwrap(), claimed);
    }
    let failed = store
        .task_complete(CompleteParams {
            key: key(running, "b#1", 4),
            completion: Completion::Failed {
                error: TaskError::retryable("boom", "x"),
            },
        })
        .await
        .unwrap();
    assert!(matches!(failed, CompleteOutcome::Applied { .. }));
    let ended = db.task_row(running).await.unwrap();
    let out = store
        .lease_release_many(release("b#1", running, 4))
        .await
        .unwrap();
    assert_eq!(out.fenced, vec![TaskId(running)], "ended by a failure");
    assert_eq!(db.task_row(running).await.unwrap(), ended);

    // A succeeded attempt: the holder's release of it is fenced too.
    let done = db
        .insert_task(TaskSpec {
            lease_epoch: 1,
            ..TaskSpec::new("relx", "running")
        })
        .await
        .unwrap();
    store
        .task_complete(by_factory(done, 1, Completion::Succeeded { result: None }))
        .await
        .unwrap();
    let out = store
        .lease_release_many(release(FACTORY_OWNER, done, 1))
        .await
        .unwrap();
    assert_eq!(out.fenced, vec![TaskId(done)]);
    assert_eq!(
        db.task_status(done).await.unwrap(),
        TaskStatus::Succeeded.as_str()
    );
    db.drop_db().await.unwrap();
}

async fn elect(store: &Arc<dyn Store>, owner: &str) -> i64 {
    match store
        .leader_attempt_elect(LeaderElectParams {
            owner: agent(owner),
            ttl: TTL,
            grace: GRACE,
        })
        .await
        .unwrap()
    {
        LeaderOutcome::Leader { term, .. } => term,
        other => panic!("{owner} not elected: {other:?}"),
    }
}

conformance!(a_retried_resignation_is_held_again_and_a_stale_one_is_fenced);
async fn a_retried_resignation_is_held_again_and_a_stale_one_is_fenced(db: StoreDb) {
    let store = db.store();
    let term = elect(&store, "a#1").await;
    let resign = || store.leader_resign(agent("a#1"), term);
    assert_eq!(resign().await.unwrap(), HolderWrite::Held);
    let after = store.leader_get().await.unwrap().unwrap();
    assert_eq!(after.owner, None);
    assert_eq!(
        resign().await.unwrap(),
        HolderWrite::Held,
        "a retry of a resignation that landed"
    );
    let again = store.leader_get().await.unwrap().unwrap();
    assert_eq!((again.owner, again.term), (None, term));

    // Genuinely stale: another term or owner, with someone else leading.
    let next = elect(&store, "b#1").await;
    assert!(next > term);
    for (owner, t) in [("b#1", term), ("a#1", next), ("c#1", next)] {
        assert_eq!(
            store.leader_resign(agent(owner), t).await.unwrap(),
            HolderWrite::Fenced,
            "{owner} in term {t}"
        );
    }
    let leader = store.leader_get().await.unwrap().unwrap();
    assert_eq!(
        (leader.owner.as_ref().map(AgentId::as_str), leader.term),
        (Some("b#1"), next)
    );
    // Term 0 (nobody ever led under it) is no resignation to repeat.
    assert_eq!(
        store.leader_resign(agent("a#1"), 0).await.unwrap(),
        HolderWrite::Fenced
    );
    db.drop_db().await.unwrap();
}
