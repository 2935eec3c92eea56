//! Store conformance: the overview the console's header and Types view show — counts per type
//! by status, the last minute's finishes, each type's limit and pause, the global policy, types
//! known only by their policy, and the cap on how many types one answer lists; on PostgreSQL
//! and SQLite alike.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use leasehold_shared::store::{OVERVIEW_TYPES_CAP, TypeCounts};
use leasehold_tests::{Arg, Rows, Sql, StoreDb, TaskSpec, Val, conformance};

async fn insert(db: &StoreDb, spec: TaskSpec, n: usize) -> Vec<i64> {
    let mut ids = Vec::new();
    for _ in 0..n {
        ids.push(db.insert_task(spec.clone()).await.unwrap());
    }
    ids
}

conformance!(counts_per_type_with_limits_pauses_and_the_global_policy);
async fn counts_per_type_with_limits_pauses_and_the_global_policy(db: StoreDb) {
    let store = db.store();
    insert(&db, TaskSpec::new("mail", "queued"), 3).await;
    insert(
        &db,
        TaskSpec {
            available_in_secs: 3600.0,
            ..TaskSpec::new("mail", "queued")
        },
        2,
    )
    .await;
    insert(&db, TaskSpec::new("mail", "retry_wait"), 1).await;
    insert(&db, TaskSpec::new("mail", "running"), 2).await;
    insert(&db, TaskSpec::new("mail", "cancel_requested"), 1).await;
    let dead = insert(&db, TaskSpec::new("mail", "dead"), 4).await;
    let done = insert(&db, TaskSpec::new("mail", "succeeded"), 3).await;
    insert(&db, TaskSpec::new("mail", "partially_succeeded"), 1).await;
    insert(&db, TaskSpec::new("mail", "cancelled"), 1).await;
    insert(&db, TaskSpec::new("resize", "running"), 1).await;
    // One dead letter and one success from before the last minute.
    for id in [dead[0], done[0]] {
        db.update_task(id, &[("finished_at", Val::At(-300.0))])
            .await
            .unwrap();
    }
    db.execute(
        "INSERT INTO policies (scope, max_concurrency, paused) VALUES ('mail', 5, false), \
         ('report', 3, true)",
        &[],
    )
    .await
    .unwrap();
    db.update(
        Rows::Policy("*"),
        &[
            ("max_concurrency", Val::Int(50)),
            ("paused", Val::Bool(true)),
        ],
    )
    .await
    .unwrap();

    let o = store.task_overview().await.unwrap();
    let names: Vec<&str> = o.types.iter().map(|t| t.task_type.as_str()).collect();
    assert_eq!(
        names,
        ["mail", "report", "resize"],
        "by name, policy-only types included"
    );
    assert_eq!(
        (o.global_limit, o.global_paused, o.truncated),
        (Some(50), true, false)
    );
    let mail = &o.types[0];
    assert_eq!(
        (
            mail.queued,
            mail.scheduled,
            mail.retrying,
            mail.running,
            mail.dead
        ),
        (3, 2, 1, 3, 4),
        "{mail:?}"
    );
    assert_eq!(
        (mail.finished_last_minute, mail.dead_last_minute),
        (3, 3),
        "two of three successes and the partial one finished in the last minute; three of four dead"
    );
    assert_eq!((mail.limit, mail.paused), (Some(5), false));
    let report = &o.types[1];
    assert_eq!(
        (
            report.queued,
            report.running,
            report.dead,
            report.limit,
            report.paused
        ),
        (0, 0, 0, Some(3), true)
    );
    let resize: &TypeCounts = &o.types[2];
    assert_eq!(
        (resize.running, resize.limit, resize.paused),
        (1, None, false)
    );
    let db_now = store.db_now().await.unwrap();
    assert!(
        (db_now - o.now).num_seconds().abs() < 60,
        "now is the database's"
    );
    db.drop_db().await.unwrap();
}

conformance!(an_empty_database_has_the_global_policy_and_no_types);
async fn an_empty_database_has_the_global_policy_and_no_types(db: StoreDb) {
    let o = db.store().task_overview().await.unwrap();
    assert!(o.types.is_empty());
    assert_eq!(
        (o.global_limit, o.global_paused, o.truncated),
        (None, false, false)
    );
    db.drop_db().await.unwrap();
}

conformance!(more_types_than_the_cap_are_cut_and_say_so);
async fn more_types_than_the_cap_are_cut_and_say_so(db: StoreDb) {
    let n = OVERVIEW_TYPES_CAP + 5;
    db.execute(
        Sql::each(
            "INSERT INTO policies (scope, max_concurrency) \
             SELECT 't' || lpad(g::text, 5, '0'), 1 FROM generate_series(1, $1) g",
            "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < $1) \
             INSERT INTO policies (scope, max_concurrency) SELECT printf('t%05d', n), 1 FROM g",
        ),
        &[Arg::Int(i64::try_from(n).unwrap())],
    )
    .await
    .unwrap();
    db.update(Rows::Policy("*"), &[("max_concurrency", Val::Int(7))])
        .await
        .unwrap();
    let o = db.store().task_overview().await.unwrap();
    assert_eq!(o.types.len(), OVERVIEW_TYPES_CAP);
    assert!(o.truncated);
    assert_eq!(o.types[0].task_type.as_str(), "t00001", "the first by name");
    assert_eq!(
        o.global_limit,
        Some(7),
        "the global row is read whatever the cap"
    );
    db.drop_db().await.unwrap();
}
