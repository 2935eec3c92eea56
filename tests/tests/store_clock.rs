#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Store conformance for the database-clock guard of maintenance (TESTING T21): the leader
//! renewal and election report the database time they ran at, and lease recovery takes
//! nothing while the database clock reads past the caller's bound; on PostgreSQL and SQLite
//! alike.

use std::time::Duration;

use chrono::Utc;
use leasehold_shared::AgentId;
use leasehold_shared::store::{
    LeaderElectParams, LeaderOutcome, LeaderRenewParams, LeaderRenewal, RecoverParams,
};
use leasehold_tests::{StoreDb, TaskSpec, conformance};

/// How far the store's clock may be from the test's (same host; generous for a busy machine).
const NEAR: chrono::Duration = chrono::Duration::seconds(30);

fn recover(clock_bound: Option<chrono::DateTime<Utc>>) -> RecoverParams {
    RecoverParams {
        grace: Duration::from_secs(5),
        limit: 100,
        clock_bound,
    }
}

conformance!(recovery_takes_nothing_while_the_clock_reads_past_the_bound);
async fn recovery_takes_nothing_while_the_clock_reads_past_the_bound(db: StoreDb) {
    let store = db.store();
    let expired = db
        .insert_task(TaskSpec::new("clock", "running"))
        .await
        .unwrap();
    db.backdate_lease(expired, 60.0).await.unwrap();

    // A bound in the past: the clock "jumped" past it, so nothing is taken.
    let past = Utc::now() - chrono::Duration::minutes(10);
    assert!(
        store
            .lease_recover_expired(recover(Some(past)))
            .await
            .unwrap()
            .is_empty(),
        "recovery acted on a clock past its bound"
    );
    assert_eq!(db.task_status(expired).await.unwrap(), "running");

    // A bound ahead of the clock: recovery as usual.
    let ahead = Utc::now() + chrono::Duration::minutes(10);
    let got = store
        .lease_recover_expired(recover(Some(ahead)))
        .await
        .unwrap();
    assert_eq!(
        got.iter().map(|r| r.id.0).collect::<Vec<_>>(),
        vec![expired]
    );
    assert_eq!(db.task_status(expired).await.unwrap(), "retry_wait");

    // No bound: as before.
    let other = db
        .insert_task(TaskSpec::new("clock", "running"))
        .await
        .unwrap();
    db.backdate_lease(other, 60.0).await.unwrap();
    assert_eq!(
        store
            .lease_recover_expired(recover(None))
            .await
            .unwrap()
            .len(),
        1
    );
    db.drop_db().await.unwrap();
}

conformance!(leader_election_and_renewal_report_the_database_time);
async fn leader_election_and_renewal_report_the_database_time(db: StoreDb) {
    let store = db.store();
    let a = AgentId::new("a#1").unwrap();
    let b = AgentId::new("b#1").unwrap();
    let elect = |owner: &AgentId| LeaderElectParams {
        owner: owner.clone(),
        ttl: Duration::from_secs(10),
        grace: Duration::from_secs(5),
    };
    let near = |t: chrono::DateTime<Utc>| (t - Utc::now()).abs() < NEAR;

    let LeaderOutcome::Leader {
        term,
        lease_until,
        now,
    } = store.leader_attempt_elect(elect(&a)).await.unwrap()
    else {
        panic!("a is not elected")
    };
    assert!(near(now), "election time {now}");
    assert_eq!(lease_until - now, chrono::Duration::seconds(10));
    match store.leader_attempt_elect(elect(&b)).await.unwrap() {
        LeaderOutcome::Follower { now: seen, .. } => {
            assert!(near(seen) && seen >= now, "{seen} after {now}")
        }
        other => panic!("{other:?}"),
    }
    let renewed = store
        .leader_renew(LeaderRenewParams {
            owner: a.clone(),
            term,
            ttl: Duration::from_secs(10),
        })
        .await
        .unwrap();
    let LeaderRenewal::Held { now: at } = renewed else {
        panic!("{renewed:?}")
    };
    assert!(near(at) && at >= now, "{at} after {now}");
    assert_eq!(
        store
            .leader_renew(LeaderRenewParams {
                owner: b.clone(),
                term,
                ttl: Duration::from_secs(10),
            })
            .await
            .unwrap(),
        LeaderRenewal::Fenced
    );
    db.drop_db().await.unwrap();
}
