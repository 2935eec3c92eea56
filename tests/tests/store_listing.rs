//! Store conformance: listings. Task pages filtered by exact error code and by end time, in
//! keyset pages through every listing statement, with the new filters validated; the agent
//! registry's leader flag; on PostgreSQL and SQLite alike.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use leasehold_shared::domain::TaskStatus;
use leasehold_shared::store::{AgentRegisterParams, LeaderElectParams, TaskListParams};
use leasehold_shared::{Store, StoreError};
use leasehold_tests::helpers::tt;
use leasehold_tests::{Rows, StoreDb, TaskSpec, Val, conformance};
use serde_json::json;

/// Every id the listing gives, page by page of `page` tasks; checks newest-first order and
/// that no task is on two pages.
async fn all_pages(store: &dyn Store, params: TaskListParams, page: u32) -> Vec<i64> {
    let mut ids = Vec::new();
    let mut before = None;
    loop {
        let got = store
            .task_list(TaskListParams {
                before,
                limit: page,
                ..params.clone()
            })
            .await
            .unwrap();
        assert!(got.tasks.len() <= page as usize);
        ids.extend(got.tasks.iter().map(|t| t.id.0));
        match got.next_before {
            Some(cursor) => before = Some(cursor),
            None => break,
        }
    }
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "newest first: {ids:?}");
    ids
}

fn error(code: &str) -> serde_json::Value {
    json!({"code": code, "message": "m", "retryable": false})
}

fn newest_first(ids: &[i64]) -> Vec<i64> {
    let mut ids = ids.to_vec();
    ids.sort_unstable_by(|a, b| b.cmp(a));
    ids
}

conformance!(tasks_filter_by_exact_error_code_and_end_time_in_keyset_pages);
async fn tasks_filter_by_exact_error_code_and_end_time_in_keyset_pages(db: StoreDb) {
    let store = db.store();
    let with = |status, code: &str| TaskSpec {
        last_error: Some(error(code)),
        ..TaskSpec::new("mail", status)
    };
    let mut smtp_dead = Vec::new();
    for _ in 0..5 {
        smtp_dead.push(db.insert_task(with("dead", "smtp")).await.unwrap());
    }
    let smtp_retry = db.insert_task(with("retry_wait", "smtp")).await.unwrap();
    // Not matched by "smtp": another code, a code it only contains, different case, no error.
    for (status, code) in [("dead", "dns"), ("dead", "smtp_timeout"), ("dead", "SMTP")] {
        db.insert_task(with(status, code)).await.unwrap();
    }
    db.insert_task(TaskSpec::new("mail", "queued"))
        .await
        .unwrap();

    let smtp = TaskListParams {
        error_code: Some("smtp".into()),
        ..Default::default()
    };
    let mut all_smtp = smtp_dead.clone();
    all_smtp.push(smtp_retry);
    assert_eq!(
        all_pages(&*store, smtp.clone(), 2).await,
        newest_first(&all_smtp)
    );
    // The dead-letter statement and the general one agree.
    let dead_smtp = TaskListParams {
        statuses: vec![TaskStatus::Dead],
        ..smtp.clone()
    };
    assert_eq!(
        all_pages(&*store, dead_smtp.clone(), 2).await,
        newest_first(&smtp_dead)
    );
    assert!(
        all_pages(
            &*store,
            TaskListParams {
                statuses: vec![TaskStatus::Running, TaskStatus::CancelRequested],
                ..smtp.clone()
            },
            2
        )
        .await
        .is_empty()
    );

    // End times: two of the smtp dead letters died two hours ago, one queued task was last
    // touched three hours ago; `since` an hour ago keeps the rest.
    db.update(
        Rows::Tasks(&smtp_dead[..2]),
        &[("finished_at", Val::At(-2.0 * 3600.0))],
    )
    .await
    .unwrap();
    let stale_queued = db
        .insert_task(TaskSpec::new("mail", "queued"))
        .await
        .unwrap();
    let fresh_queued = db
        .insert_task(TaskSpec::new("mail", "queued"))
        .await
        .unwrap();
    db.update_task(stale_queued, &[("updated_at", Val::At(-3.0 * 3600.0))])
        .await
        .unwrap();
    let hour_ago: DateTime<Utc> = store.db_now().await.unwrap() - chrono::Duration::hours(1);
    let recent_smtp: Vec<i64> = all_smtp[2..].to_vec();
    assert_eq!(
        all_pages(
            &*store,
            TaskListParams {
                since: Some(hour_ago),
                ..smtp.clone()
            },
            2
        )
        .await,
        newest_first(&recent_smtp)
    );
    assert_eq!(
        all_pages(
            &*store,
            TaskListParams {
                since: Some(hour_ago),
                ..dead_smtp
            },
            1
        )
        .await,
        newest_first(&smtp_dead[2..])
    );
    let recent: BTreeSet<i64> = all_pages(
        &*store,
        TaskListParams {
            since: Some(hour_ago),
            ..Default::default()
        },
        3,
    )
    .await
    .into_iter()
    .collect();
    assert!(recent.contains(&fresh_queued) && !recent.contains(&stale_queued));
    assert!(!recent.contains(&smtp_dead[0]) && !recent.contains(&smtp_dead[1]));
    assert_eq!(recent.len(), 12 - 2 - 1, "{recent:?}");

    // The code filter is validated like every other input.
    for bad in [String::new(), "c".repeat(65), "a\u{1b}b".to_string()] {
        let refused = store
            .task_list(TaskListParams {
                error_code: Some(bad.clone()),
                limit: 10,
                ..Default::default()
            })
            .await;
        assert!(
            matches!(refused, Err(StoreError::Invalid(_))),
            "{bad:?}: {refused:?}"
        );
    }
    db.drop_db().await.unwrap();
}

fn register(name: &str) -> AgentRegisterParams {
    AgentRegisterParams {
        name: name.into(),
        host: "host-a".into(),
        pid: 1,
        grpc_address: None,
        version: "0.1.0".into(),
        task_types: vec![tt("mail")],
        local_concurrency: 2,
        alive_for: Duration::from_secs(30),
    }
}

async fn leaders(store: &dyn Store) -> Vec<(String, bool)> {
    store
        .agent_list()
        .await
        .unwrap()
        .into_iter()
        .map(|a| (a.name, a.leader))
        .collect()
}

conformance!(the_agent_list_flags_the_holder_of_an_unexpired_leader_lease);
async fn the_agent_list_flags_the_holder_of_an_unexpired_leader_lease(db: StoreDb) {
    let store = db.store();
    let a = store.agent_register(register("a")).await.unwrap();
    let b = store.agent_register(register("b")).await.unwrap();
    assert!(!a.leader && !b.leader, "a new process start leads nothing");
    let no = |x: &str| (x.to_string(), false);
    let yes = |x: &str| (x.to_string(), true);
    assert_eq!(leaders(&*store).await, [no("a"), no("b")]);

    let elect = |owner: &leasehold_shared::AgentId| LeaderElectParams {
        owner: owner.clone(),
        ttl: Duration::from_secs(10),
        grace: Duration::from_secs(5),
    };
    store.leader_attempt_elect(elect(&a.id)).await.unwrap();
    assert_eq!(leaders(&*store).await, [yes("a"), no("b")]);

    // Expired, even within the takeover grace: nobody leads.
    db.update(Rows::Leader, &[("lease_until", Val::At(-1.0))])
        .await
        .unwrap();
    assert_eq!(leaders(&*store).await, [no("a"), no("b")]);

    db.update(Rows::Leader, &[("lease_until", Val::At(-6.0))])
        .await
        .unwrap();
    store.leader_attempt_elect(elect(&b.id)).await.unwrap();
    assert_eq!(leaders(&*store).await, [no("a"), yes("b")]);

    // A leader that resigned leads nothing.
    let term = db.fetch_int("SELECT term FROM leader", &[]).await.unwrap();
    store.leader_resign(b.id.clone(), term).await.unwrap();
    assert_eq!(leaders(&*store).await, [no("a"), no("b")]);
    db.drop_db().await.unwrap();
}
