#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The recent successful runs behind the slow-compared-with-history rule
//! (`Store::task_recent_runs`): newest first, successes only, bounded per type and by the
//! number of finished tasks looked through; on PostgreSQL and SQLite alike.

use leasehold_shared::StoreError;
use leasehold_shared::store::{RecentRun, RecentRunsParams};
use leasehold_tests::helpers::tt;
use leasehold_tests::{StoreDb, TaskSpec, Val, conformance};

/// A finished task of `task_type` in `status` that ran `run_s` seconds and finished `ago_s`
/// seconds ago.
async fn finished(db: &StoreDb, task_type: &str, status: &'static str, run_s: f64, ago_s: f64) {
    let id = db
        .insert_task(TaskSpec::new(task_type, status))
        .await
        .unwrap();
    db.update_task(
        id,
        &[
            ("started_at", Val::At(-(ago_s + run_s))),
            ("finished_at", Val::At(-ago_s)),
        ],
    )
    .await
    .unwrap();
}

fn runs_of(runs: &[RecentRun], task_type: &str) -> Vec<u64> {
    runs.iter()
        .filter(|r| r.task_type.as_str() == task_type)
        .map(|r| (r.run_time.as_secs_f64() * 10.0).round() as u64)
        .collect()
}

conformance!(
    recent_runs_are_the_newest_successes_of_each_asked_type,
    worker_threads = 2
);
async fn recent_runs_are_the_newest_successes_of_each_asked_type(db: StoreDb) {
    let store = db.store();
    // Type a: 30 successes of 1.0 s, 1.1 s, … finishing one a second (the longest newest).
    for i in 0..30 {
        finished(
            &db,
            "a",
            "succeeded",
            1.0 + f64::from(i) / 10.0,
            500.0 - f64::from(i),
        )
        .await;
    }
    // Not successes: never counted, however new.
    finished(&db, "a", "dead", 99.0, 1.0).await;
    finished(&db, "a", "cancelled", 98.0, 1.0).await;
    finished(&db, "a", "partially_succeeded", 97.0, 1.0).await;
    db.insert_task(TaskSpec::new("a", "running")).await.unwrap();
    db.insert_task(TaskSpec::new("a", "queued")).await.unwrap();
    for i in 0..5 {
        finished(&db, "b", "succeeded", 0.5, 600.0 - f64::from(i)).await;
    }
    finished(&db, "c", "succeeded", 7.0, 2.0).await;

    let runs = store
        .task_recent_runs(RecentRunsParams {
            task_types: vec![tt("a"), tt("b")],
            per_type: 25,
            scan: 10_000,
        })
        .await
        .unwrap();
    // The newest 25 of a, newest first: 3.9 s down to 1.5 s.
    let want: Vec<u64> = (5..30).rev().map(|i| 10 + i).collect();
    assert_eq!(runs_of(&runs, "a"), want);
    assert_eq!(runs_of(&runs, "b"), vec![5; 5]);
    assert!(runs_of(&runs, "c").is_empty(), "c was not asked for");
    // Newest first across types: a's newest 25 finished after every b.
    assert!(runs[..25].iter().all(|r| r.task_type.as_str() == "a"));

    // Only the newest `scan` finished tasks are looked through: the newest 8 finished rows
    // are c's success, a's three non-successes and a's four newest successes.
    let runs = store
        .task_recent_runs(RecentRunsParams {
            task_types: vec![tt("a"), tt("b"), tt("c")],
            per_type: 25,
            scan: 8,
        })
        .await
        .unwrap();
    assert_eq!(runs_of(&runs, "a"), vec![39, 38, 37, 36]);
    assert!(runs_of(&runs, "b").is_empty());
    assert_eq!(runs_of(&runs, "c"), vec![70]);

    // A type with no history, and no types at all.
    let none = store
        .task_recent_runs(RecentRunsParams {
            task_types: vec![tt("nothing.here")],
            per_type: 200,
            scan: 50_000,
        })
        .await
        .unwrap();
    assert!(none.is_empty());
    let none = store
        .task_recent_runs(RecentRunsParams {
            task_types: vec![],
            per_type: 200,
            scan: 50_000,
        })
        .await
        .unwrap();
    assert!(none.is_empty());
    db.drop_db().await.unwrap();
}

conformance!(recent_runs_refuse_unbounded_reads, worker_threads = 2);
async fn recent_runs_refuse_unbounded_reads(db: StoreDb) {
    let store = db.store();
    for (per_type, scan) in [(0, 10), (10_001, 10), (10, 0), (10, 1_000_001)] {
        let err = store
            .task_recent_runs(RecentRunsParams {
                task_types: vec![tt("a")],
                per_type,
                scan,
            })
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::Invalid(_)),
            "{per_type}/{scan}: {err:?}"
        );
    }
    db.drop_db().await.unwrap();
}
