//! Store conformance of the dead-letter queue's bulk actions (issue 26), on PostgreSQL, SQLite
//! and behind PgBouncer: a purge deletes exactly the dead tasks its filter matches, with their
//! attempt rows, and leaves every other task alone; its dry run changes nothing and lists, a
//! page at a time, exactly the ids the real run then deletes; every call leaves one audit row,
//! a viewer's a `denied` one; bad input changes nothing and writes no row.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use leasehold_shared::domain::Role;
use leasehold_shared::store::{DeadFilter, DeadIdsPage, PurgeDeadParams, RequeueDeadParams, Store};
use leasehold_shared::{Actor, StoreError, TaskId};
use leasehold_tests::helpers::tt;
use leasehold_tests::{Sql, StoreDb, TaskSpec, Val, conformance};
use serde_json::json;

fn dead(task_type: &str, code: &str) -> TaskSpec {
    TaskSpec {
        last_error: Some(json!({"code": code, "message": "m", "retryable": false})),
        ..TaskSpec::new(task_type, "dead")
    }
}

/// A dead task of `task_type` with error `code` and two attempt rows.
async fn dead_with_attempts(db: &StoreDb, task_type: &str, code: &str) -> i64 {
    let id = db.insert_task(dead(task_type, code)).await.unwrap();
    for epoch in 1..=2 {
        db.insert_attempt(id, epoch, epoch, "a#1", "failed")
            .await
            .unwrap();
    }
    id
}

fn purge(filter: &DeadFilter, dry_run: bool, page: DeadIdsPage) -> PurgeDeadParams {
    PurgeDeadParams {
        filter: filter.clone(),
        dry_run,
        page,
        actor: Actor::operator("alice"),
    }
}

async fn task_ids(db: &StoreDb) -> Vec<i64> {
    db.fetch_ints(Sql::both("SELECT id FROM tasks ORDER BY id"), &[])
        .await
        .unwrap()
}

async fn attempt_count(db: &StoreDb, id: i64) -> usize {
    db.attempt_rows(id).await.unwrap().len()
}

fn desc(mut ids: Vec<i64>) -> Vec<TaskId> {
    ids.sort_unstable_by(|a, b| b.cmp(a));
    ids.into_iter().map(TaskId).collect()
}

/// A dry run of `filter` lists exactly `expected` and changes nothing; the real run then
/// deletes exactly those tasks and their attempt rows, and nothing else.
async fn purges_exactly(db: &StoreDb, store: &dyn Store, filter: DeadFilter, expected: &[i64]) {
    let before = task_ids(db).await;
    let dry = store
        .task_purge_dead(purge(&filter, true, DeadIdsPage::default()))
        .await
        .unwrap();
    assert_eq!(dry.count, expected.len() as u64, "{filter:?}");
    assert_eq!(dry.ids, desc(expected.to_vec()), "{filter:?}");
    assert_eq!(dry.next_before, None);
    assert_eq!(task_ids(db).await, before, "a dry run deletes nothing");
    for id in expected {
        assert!(
            attempt_count(db, *id).await >= 2,
            "task {id} kept its attempts"
        );
    }

    let done = store
        .task_purge_dead(purge(&filter, false, DeadIdsPage::default()))
        .await
        .unwrap();
    assert_eq!(done.count, expected.len() as u64, "{filter:?}");
    assert!(done.ids.is_empty() && done.next_before.is_none());
    let left: Vec<i64> = before
        .iter()
        .copied()
        .filter(|id| !expected.contains(id))
        .collect();
    assert_eq!(task_ids(db).await, left, "exactly the dry run's ids went");
    for id in expected {
        assert_eq!(attempt_count(db, *id).await, 0, "task {id}'s attempts went");
    }
}

conformance!(purge_deletes_exactly_the_matching_dead_tasks_and_their_attempts);
async fn purge_deletes_exactly_the_matching_dead_tasks_and_their_attempts(db: StoreDb) {
    let store = db.store();
    let mut mail_smtp = Vec::new();
    for _ in 0..3 {
        mail_smtp.push(dead_with_attempts(&db, "mail", "smtp_down").await);
    }
    let mail_bad = dead_with_attempts(&db, "mail", "bad_address").await;
    let sms = dead_with_attempts(&db, "sms", "smtp_down").await;
    let old = dead_with_attempts(&db, "mail", "smtp_down").await;
    db.update_task(old, &[("finished_at", Val::At(-2.0 * 86_400.0))])
        .await
        .unwrap();
    // Not dead: never touched, whatever the filter.
    let queued = db
        .insert_task(TaskSpec::new("mail", "queued"))
        .await
        .unwrap();
    let succeeded = db
        .insert_task(TaskSpec::new("mail", "succeeded"))
        .await
        .unwrap();
    let cancelled = db
        .insert_task(TaskSpec {
            last_error: Some(json!({"code": "smtp_down", "message": "m", "retryable": false})),
            ..TaskSpec::new("sms", "cancelled")
        })
        .await
        .unwrap();
    db.insert_attempt(succeeded, 1, 1, "a#1", "failed")
        .await
        .unwrap();
    if db.is_postgres() {
        // A dead task whose day was dropped lives in tasks_done_kept: found there too.
        db.execute(
            Sql::both("UPDATE tasks SET done_on = '-infinity' WHERE id = $1"),
            &[leasehold_tests::Arg::Int(mail_smtp[0])],
        )
        .await
        .unwrap();
    }
    let now = store.db_now().await.unwrap();

    // Type, code and time together.
    let recent_mail_smtp = DeadFilter {
        task_type: Some(tt("mail")),
        error_code: Some("smtp_down".into()),
        since: Some(now - chrono::Duration::hours(1)),
        until: None,
    };
    purges_exactly(&db, store.as_ref(), recent_mail_smtp.clone(), &mail_smtp).await;
    // Again: nothing left to match.
    purges_exactly(&db, store.as_ref(), recent_mail_smtp, &[]).await;
    // Died before a day ago: the old one only.
    let until = DeadFilter {
        until: Some(now - chrono::Duration::days(1)),
        ..DeadFilter::default()
    };
    purges_exactly(&db, store.as_ref(), until, &[old]).await;
    // By type: sms (its cancelled task is not dead).
    let by_type = DeadFilter {
        task_type: Some(tt("sms")),
        ..DeadFilter::default()
    };
    purges_exactly(&db, store.as_ref(), by_type, &[sms]).await;
    // By code.
    let by_code = DeadFilter {
        error_code: Some("bad_address".into()),
        ..DeadFilter::default()
    };
    purges_exactly(&db, store.as_ref(), by_code, &[mail_bad]).await;
    // Every dead task (none left).
    purges_exactly(&db, store.as_ref(), DeadFilter::default(), &[]).await;

    assert_eq!(task_ids(&db).await, vec![queued, succeeded, cancelled]);
    assert_eq!(db.task_status(queued).await.unwrap(), "queued");
    assert_eq!(db.task_status(cancelled).await.unwrap(), "cancelled");
    assert!(attempt_count(&db, succeeded).await >= 1);
    db.drop_db().await.unwrap();
}

conformance!(dry_runs_page_their_ids_newest_first);
async fn dry_runs_page_their_ids_newest_first(db: StoreDb) {
    let store = db.store();
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(db.insert_task(dead("page", "boom")).await.unwrap());
    }
    // Another type's dead task: not listed.
    db.insert_task(dead("other", "boom")).await.unwrap();
    let filter = DeadFilter {
        task_type: Some(tt("page")),
        ..DeadFilter::default()
    };
    let newest = desc(ids.clone());
    let page = |before: Option<TaskId>| DeadIdsPage { before, limit: 2 };

    let first = store
        .task_purge_dead(purge(&filter, true, page(None)))
        .await
        .unwrap();
    assert_eq!(first.count, 5);
    assert_eq!(first.ids, newest[..2]);
    assert_eq!(first.next_before, Some(newest[1]));
    let second = store
        .task_purge_dead(purge(&filter, true, page(first.next_before)))
        .await
        .unwrap();
    assert_eq!(
        second.count, 5,
        "the count is every match, whatever the page"
    );
    assert_eq!(second.ids, newest[2..4]);
    assert_eq!(second.next_before, Some(newest[3]));
    let last = store
        .task_purge_dead(purge(&filter, true, page(second.next_before)))
        .await
        .unwrap();
    assert_eq!(last.ids, newest[4..]);
    assert_eq!(last.next_before, None);
    // A page that ends exactly at the last id says so too.
    let exact = store
        .task_purge_dead(purge(
            &filter,
            true,
            DeadIdsPage {
                before: None,
                limit: 5,
            },
        ))
        .await
        .unwrap();
    assert_eq!(exact.ids, newest);
    assert_eq!(exact.next_before, None);

    // The requeue's dry run lists the same way.
    let requeue = store
        .task_requeue_dead(RequeueDeadParams {
            filter: filter.clone(),
            dry_run: true,
            page: page(Some(newest[0])),
            actor: Actor::operator("alice"),
        })
        .await
        .unwrap();
    assert_eq!(requeue.count, 5);
    assert_eq!(requeue.ids, newest[1..3]);
    assert_eq!(requeue.next_before, Some(newest[2]));
    assert_eq!(
        db.count("SELECT count(*) FROM tasks WHERE status = 'dead'")
            .await
            .unwrap(),
        6,
        "dry runs change nothing"
    );

    // Bad pages and filters: refused, nothing changed, no audit row.
    let rows = db.audit_rows().await.unwrap().len();
    for bad in [
        DeadIdsPage {
            before: None,
            limit: 0,
        },
        DeadIdsPage {
            before: None,
            limit: 1001,
        },
        DeadIdsPage {
            before: Some(TaskId(0)),
            limit: 10,
        },
    ] {
        let refused = store.task_purge_dead(purge(&filter, true, bad)).await;
        assert!(matches!(refused, Err(StoreError::Invalid(_))), "{bad:?}");
    }
    let inverted = DeadFilter {
        since: Some(store.db_now().await.unwrap()),
        until: Some(store.db_now().await.unwrap() - chrono::Duration::hours(1)),
        ..DeadFilter::default()
    };
    let refused = store
        .task_purge_dead(purge(&inverted, false, DeadIdsPage::default()))
        .await;
    assert!(matches!(refused, Err(StoreError::Invalid(_))));
    assert_eq!(db.audit_rows().await.unwrap().len(), rows);
    assert_eq!(
        db.count("SELECT count(*) FROM tasks WHERE status = 'dead'")
            .await
            .unwrap(),
        6
    );
    db.drop_db().await.unwrap();
}

conformance!(purges_are_audited_and_viewers_are_denied);
async fn purges_are_audited_and_viewers_are_denied(db: StoreDb) {
    let store = db.store();
    for _ in 0..3 {
        dead_with_attempts(&db, "mail", "boom").await;
    }
    let filter = DeadFilter {
        error_code: Some("boom".into()),
        ..DeadFilter::default()
    };
    let viewer = PurgeDeadParams {
        actor: Actor {
            name: "val".into(),
            role: Role::Viewer,
        },
        ..purge(&filter, false, DeadIdsPage::default())
    };
    assert!(matches!(
        store.task_purge_dead(viewer).await,
        Err(StoreError::PermissionDenied { .. })
    ));
    assert_eq!(
        db.count("SELECT count(*) FROM tasks WHERE status = 'dead'")
            .await
            .unwrap(),
        3,
        "a viewer deletes nothing"
    );
    let dry = store
        .task_purge_dead(purge(&filter, true, DeadIdsPage::default()))
        .await
        .unwrap();
    assert_eq!(dry.count, 3);
    let done = store
        .task_purge_dead(purge(&filter, false, DeadIdsPage::default()))
        .await
        .unwrap();
    assert_eq!(done.count, 3);
    let again = store
        .task_purge_dead(purge(&filter, false, DeadIdsPage::default()))
        .await
        .unwrap();
    assert_eq!(again.count, 0);

    let rows: Vec<(String, String, String, String)> = db
        .audit_rows()
        .await
        .unwrap()
        .into_iter()
        .map(|(actor, role, action, target, result)| {
            assert_eq!(target, "dead-letter queue");
            (actor, role, action, result)
        })
        .collect();
    let row = |a: &str, r: &str, act: &str, res: &str| {
        (a.to_owned(), r.to_owned(), act.to_owned(), res.to_owned())
    };
    assert_eq!(
        rows,
        [
            row("val", "viewer", "purge_dead", "denied"),
            row("alice", "operator", "purge_dead_dry_run", "noop"),
            row("alice", "operator", "purge_dead", "applied"),
            row("alice", "operator", "purge_dead", "noop"),
        ]
    );
    let details = db.audit_details().await.unwrap();
    let (_, _, params, detail) = &details[2];
    assert_eq!(
        params
            .as_ref()
            .map(|p| (&p["filter"]["error_code"], &p["dry_run"])),
        Some((&json!("boom"), &json!(false)))
    );
    assert_eq!(detail.as_deref(), Some("3 matching"));
    assert_eq!(details[1].3.as_deref(), Some("3 matching"));
    assert_eq!(details[3].3.as_deref(), Some("0 matching"));
    db.drop_db().await.unwrap();
}
