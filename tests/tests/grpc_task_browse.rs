#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! CountTasks and ListTasks' `due` against a real agent on PostgreSQL (issue 26): a viewer
//! reads the Tasks view's counts under a filter (the finished ones with their cap), the due
//! and not-yet-due pages of waiting tasks; bad filters are INVALID_ARGUMENT; RunNow and
//! DeleteTask are the operator's (a viewer's PERMISSION_DENIED), 0 is INVALID_ARGUMENT.

use leasehold_proto::v1 as pb;
use leasehold_tests::calls::grpc::{OPERATOR, VIEWER, start, stop};
use leasehold_tests::grpc::connect_with;
use leasehold_tests::{TaskSpec, TestDb, insert_task};
use serde_json::json;
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_and_due_pages_over_grpc() {
    let db = TestDb::new().await.unwrap();
    let config = leasehold_tests::fleet::tokens_config(
        "leasehold-grpc-browse",
        &[
            leasehold_tests::fleet::ConfigToken::operator("op", OPERATOR),
            leasehold_tests::fleet::ConfigToken::viewer("viewer", VIEWER),
        ],
    )
    .unwrap();
    let (agent, addr) = start(&db, "browse", &["--config", config.to_str().unwrap()])
        .await
        .unwrap();
    let mut op = connect_with(&addr, Some(OPERATOR), None).await.unwrap();
    let mut viewer = connect_with(&addr, Some(VIEWER), None).await.unwrap();

    // Types no agent serves (it serves noop): nothing here changes by itself.
    let spec = |t: &str, status: &'static str, later: bool| TaskSpec {
        available_in_secs: if later { 3600.0 } else { -1.0 },
        last_error: Some(
            json!({"code": "smtp_down", "message": "Relay REFUSED", "retryable": true}),
        ),
        ..TaskSpec::new(t, status)
    };
    let due = insert_task(&db.pool, spec("mail.send", "queued", false))
        .await
        .unwrap();
    let later = insert_task(&db.pool, spec("mail.send", "queued", true))
        .await
        .unwrap();
    let retry_later = insert_task(&db.pool, spec("mail.send", "retry_wait", true))
        .await
        .unwrap();
    insert_task(&db.pool, TaskSpec::new("sms.push", "queued"))
        .await
        .unwrap();
    insert_task(&db.pool, TaskSpec::new("mail.send", "running"))
        .await
        .unwrap();
    for status in ["succeeded", "dead", "dead"] {
        insert_task(&db.pool, spec("mail.send", status, false))
            .await
            .unwrap();
    }
    sqlx::query(
        "UPDATE tasks SET done_on = (now() AT TIME ZONE 'UTC')::date
         WHERE status IN ('succeeded', 'dead')",
    )
    .execute(&db.pool)
    .await
    .unwrap();

    let counts = |text: &str, task_type: &str, code: &str| pb::CountTasksRequest {
        task_type: task_type.into(),
        text: text.into(),
        error_code: code.into(),
    };
    let c = viewer
        .count_tasks(counts("", "", ""))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((c.queued, c.scheduled, c.retrying, c.running), (2, 1, 1, 1));
    assert_eq!(
        (c.succeeded, c.cancelled, c.dead),
        (Some(1), Some(0), Some(2))
    );
    assert_eq!(c.finished_cap, 100_000);
    assert!((c.now_ms - chrono::Utc::now().timestamp_millis()).abs() < 60_000);
    // The text in the message whatever its case; the type; the exact code.
    let c = viewer
        .count_tasks(counts("refused", "", ""))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (
            c.queued,
            c.scheduled,
            c.retrying,
            c.running,
            c.succeeded,
            c.dead
        ),
        (1, 1, 1, 0, Some(1), Some(2))
    );
    let c = viewer
        .count_tasks(counts("", "sms.push", ""))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((c.queued, c.scheduled, c.dead), (1, 0, Some(0)));
    let c = viewer
        .count_tasks(counts("", "", "SMTP_DOWN"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((c.queued, c.dead), (0, Some(0)));
    for bad in [
        counts(&"x".repeat(201), "", ""),
        counts("a\u{0}b", "", ""),
        counts("", "Bad Type", ""),
    ] {
        let e = viewer.count_tasks(bad.clone()).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{bad:?}: {e}");
    }

    // Due now and not yet due, queued and waiting to retry.
    let list = |statuses: Vec<pb::TaskStatus>, due: Option<bool>| pb::ListTasksRequest {
        statuses: statuses.into_iter().map(|s| s as i32).collect(),
        limit: 100,
        due,
        ..Default::default()
    };
    let ids =
        |page: pb::ListTasksResponse| -> Vec<i64> { page.tasks.iter().map(|t| t.id).collect() };
    let page = viewer
        .list_tasks(list(vec![pb::TaskStatus::Queued], Some(false)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ids(page), [later]);
    let page = viewer
        .list_tasks(list(vec![pb::TaskStatus::Queued], Some(true)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ids(page).len(), 2);
    let page = viewer
        .list_tasks(list(vec![pb::TaskStatus::RetryWait], Some(false)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ids(page), [retry_later]);

    // RunNow: the viewer may not; the operator moves it; 0 is no id.
    let e = viewer
        .run_now(pb::RunNowRequest { id: later })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    let r = op
        .run_now(pb::RunNowRequest { id: later })
        .await
        .unwrap()
        .into_inner();
    assert!(r.moved);
    assert_eq!(r.status, pb::TaskStatus::Queued as i32);
    let page = viewer
        .list_tasks(list(vec![pb::TaskStatus::Queued], Some(false)))
        .await
        .unwrap()
        .into_inner();
    assert!(ids(page).is_empty());
    let e = op.run_now(pb::RunNowRequest { id: 0 }).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);

    // DeleteTask likewise.
    let e = viewer
        .delete_task(pb::DeleteTaskRequest { id: due })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    let r = op
        .delete_task(pb::DeleteTaskRequest { id: due })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.previous, pb::TaskStatus::Queued as i32);
    let e = op
        .delete_task(pb::DeleteTaskRequest { id: due })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    let e = op
        .delete_task(pb::DeleteTaskRequest { id: -1 })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);

    stop(agent).await.unwrap();
    db.drop_db().await.unwrap();
}

// The overview and the Tasks view's counts, which consoles poll, count every waiting task
// (0.35 s a million): an agent serves a read for ten times as long as it took (the overview at
// least a second; a count only when it took 100 ms or more), so those reads take at most a tenth
// of a connection's time however deep the queue. Reads made slow (they wait 700 ms on a lock)
// are served unchanged 1.5 s later, though the queue changed; ten times as long as they took
// after, they are read again; an action through the agent drops what it kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_reads_are_served_ten_times_as_long_as_they_took() {
    use std::time::{Duration, Instant};

    let db = TestDb::new().await.unwrap();
    let (agent, addr) = start(&db, "overview", &[]).await.unwrap();
    let mut client = connect_with(&addr, None, None).await.unwrap();
    let types = |o: &pb::GetOverviewResponse| -> Vec<String> {
        o.types.iter().map(|t| t.task_type.clone()).collect()
    };
    let counts = pb::CountTasksRequest {
        task_type: "late.type".into(),
        ..Default::default()
    };

    let mut lock = db.pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE tasks IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .unwrap();
    let (mut a, mut b) = (client.clone(), client.clone());
    let request = counts.clone();
    let slow = tokio::spawn(async move {
        let started = Instant::now();
        let (o, c) = tokio::join!(
            a.get_overview(pb::GetOverviewRequest {}),
            b.count_tasks(request)
        );
        (
            o.unwrap().into_inner(),
            c.unwrap().into_inner(),
            started.elapsed(),
        )
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    lock.commit().await.unwrap();
    let (first, first_counts, took) = slow.await.unwrap();
    let read_at = Instant::now();
    assert!(took >= Duration::from_millis(700), "{took:?}");
    assert!(!types(&first).contains(&"late.type".to_string()));
    assert_eq!(first_counts.queued, 0);

    insert_task(&db.pool, TaskSpec::new("late.type", "queued"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let again = client
        .get_overview(pb::GetOverviewRequest {})
        .await
        .unwrap()
        .into_inner();
    let again_counts = client
        .count_tasks(counts.clone())
        .await
        .unwrap()
        .into_inner();
    assert!(read_at.elapsed() < Duration::from_secs(6));
    assert_eq!(again.now_ms, first.now_ms, "served from the cache");
    assert!(!types(&again).contains(&"late.type".to_string()));
    assert_eq!(again_counts, first_counts, "served from the cache");

    // Ten times as long as the reads took on (the agent's measure of each is within the
    // client's): new reads, which see the new task.
    tokio::time::sleep((took * 10 + Duration::from_millis(300)).saturating_sub(read_at.elapsed()))
        .await;
    let fresh = client
        .get_overview(pb::GetOverviewRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(fresh.now_ms > first.now_ms);
    assert!(
        types(&fresh).contains(&"late.type".to_string()),
        "{fresh:?}"
    );
    let fresh_counts = client
        .count_tasks(counts.clone())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(fresh_counts.queued, 1, "{fresh_counts:?}");
    // Slow again, and kept; then an action through this agent (an enqueue) drops what it
    // kept: the next reads count the new task at once.
    let mut lock = db.pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE tasks IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .unwrap();
    let mut a = client.clone();
    let request = counts.clone();
    let slow = tokio::spawn(async move { a.count_tasks(request).await.unwrap().into_inner() });
    tokio::time::sleep(Duration::from_millis(700)).await;
    lock.commit().await.unwrap();
    assert_eq!(slow.await.unwrap().queued, 1);
    client
        .enqueue(pb::EnqueueRequest {
            task_type: "late.type".into(),
            delay_ms: 3_600_000,
            ..Default::default()
        })
        .await
        .unwrap();
    let after = client.count_tasks(counts).await.unwrap().into_inner();
    assert_eq!((after.queued, after.scheduled), (1, 1), "{after:?}");
    let overview = client
        .get_overview(pb::GetOverviewRequest {})
        .await
        .unwrap()
        .into_inner();
    let late = overview.types.iter().find(|t| t.task_type == "late.type");
    assert_eq!(late.map(|t| t.scheduled), Some(1), "{overview:?}");

    stop(agent).await.unwrap();
    db.drop_db().await.unwrap();
}
