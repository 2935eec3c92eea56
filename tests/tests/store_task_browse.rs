//! Store conformance of what the console's Tasks view reads and acts with (issue 26), on
//! PostgreSQL, SQLite and behind PgBouncer: the per-state counts match the rows under every
//! filter and stop one past their cap; a listing of waiting tasks that are due or not yet due,
//! or of one finished state, is exactly its rows, newest first, paged without a gap or a
//! duplicate; a run-now makes a waiting task due and nothing else, a delete removes a task no
//! agent holds with its attempts and nothing else; both are audited, refused for the states the
//! state machine refuses (the row unchanged) and for viewers (a `denied` row, no change).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;

use leasehold_shared::domain::{Role, TaskAction};
use leasehold_shared::store::{
    DeleteTaskParams, RunNowParams, Store, TASK_COUNT_FINISHED_CAP, TaskCountParams, TaskCounts,
    TaskListParams,
};
use leasehold_shared::{Actor, StoreError, TaskId, TaskStatus};
use leasehold_tests::helpers::tt;
use leasehold_tests::{Arg, Sql, StoreDb, TaskSpec, TestDb, conformance};
use serde_json::json;

/// Not yet due: an hour ahead.
const LATER: f64 = 3600.0;

/// The Tasks view's tabs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Tab {
    Queued,
    Scheduled,
    Retrying,
    Running,
    Succeeded,
    Cancelled,
    Dead,
}

const TABS: [Tab; 7] = [
    Tab::Queued,
    Tab::Scheduled,
    Tab::Retrying,
    Tab::Running,
    Tab::Succeeded,
    Tab::Cancelled,
    Tab::Dead,
];

impl Tab {
    /// The listing that shows this tab.
    fn listing(self) -> (Vec<TaskStatus>, Option<bool>) {
        use TaskStatus as S;
        match self {
            Tab::Queued => (vec![S::Queued], Some(true)),
            Tab::Scheduled => (vec![S::Queued], Some(false)),
            Tab::Retrying => (vec![S::RetryWait], None),
            Tab::Running => (vec![S::Running, S::CancelRequested], None),
            Tab::Succeeded => (vec![S::Succeeded, S::PartiallySucceeded], None),
            Tab::Cancelled => (vec![S::Cancelled], None),
            Tab::Dead => (vec![S::Dead], None),
        }
    }
}

/// One task the test made, as the filters see it.
#[derive(Debug, Clone)]
struct Made {
    id: i64,
    tab: Tab,
    task_type: &'static str,
    error: Option<(&'static str, &'static str)>,
}

/// What a count or a listing is asked for.
#[derive(Debug, Clone, Default)]
struct Filter {
    task_type: Option<&'static str>,
    text: Option<&'static str>,
    error_code: Option<&'static str>,
}

impl Filter {
    /// The filter as task_list_page.sql / task_count_*.sql apply it: the exact type, the text
    /// case-insensitively in the type, the error code or the error message, the exact code.
    fn matches(&self, m: &Made) -> bool {
        let code = m.error.map(|(c, _)| c);
        let message = m.error.map(|(_, msg)| msg);
        self.task_type.is_none_or(|t| t == m.task_type)
            && self.text.is_none_or(|text| {
                let text = text.to_lowercase();
                m.task_type.contains(&text)
                    || code.is_some_and(|c| c.to_lowercase().contains(&text))
                    || message.is_some_and(|msg| msg.to_lowercase().contains(&text))
            })
            && self.error_code.is_none_or(|c| Some(c) == code)
    }

    fn count_params(&self) -> TaskCountParams {
        TaskCountParams {
            task_type: self.task_type.map(tt),
            text: self.text.map(str::to_owned),
            error_code: self.error_code.map(str::to_owned),
        }
    }
}

/// Every finished task the factory made where a finishing statement puts it on PostgreSQL
/// (its day's partition; the factory leaves `done_on` at 'infinity', where no finished task
/// ever is); `kept` of them in tasks_done_kept, as a dropped day leaves the longer-kept ones.
async fn finish_where_the_store_does(db: &StoreDb, kept: &[i64]) {
    if !db.is_postgres() {
        return;
    }
    db.execute(
        Sql::both(
            "UPDATE tasks SET done_on = (now() AT TIME ZONE 'UTC')::date
             WHERE done_on = 'infinity'
               AND status IN ('succeeded', 'partially_succeeded', 'cancelled', 'dead')",
        ),
        &[],
    )
    .await
    .unwrap();
    if !kept.is_empty() {
        db.execute(
            Sql::both("UPDATE tasks SET done_on = '-infinity' WHERE id = ANY($1)"),
            &[Arg::Ints(kept.to_vec())],
        )
        .await
        .unwrap();
    }
}

/// The spec of a task in `tab` (a second variant of some tabs with `alt`).
fn spec_in(tab: Tab, alt: bool, task_type: &str) -> TaskSpec {
    let (status, available_in_secs) = match (tab, alt) {
        (Tab::Queued, _) => ("queued", -5.0),
        (Tab::Scheduled, _) => ("queued", LATER),
        (Tab::Retrying, false) => ("retry_wait", -5.0),
        (Tab::Retrying, true) => ("retry_wait", LATER),
        (Tab::Running, false) => ("running", 0.0),
        (Tab::Running, true) => ("cancel_requested", 0.0),
        (Tab::Succeeded, false) => ("succeeded", 0.0),
        (Tab::Succeeded, true) => ("partially_succeeded", 0.0),
        (Tab::Cancelled, _) => ("cancelled", 0.0),
        (Tab::Dead, _) => ("dead", 0.0),
    };
    TaskSpec {
        available_in_secs,
        ..TaskSpec::new(task_type, status)
    }
}

fn counts_of(made: &[Made], filter: &Filter) -> [u64; 7] {
    TABS.map(|tab| {
        made.iter()
            .filter(|m| m.tab == tab && filter.matches(m))
            .count() as u64
    })
}

fn as_array(c: &TaskCounts) -> [u64; 7] {
    let finished = |v: Option<u64>| v.expect("a finished count within its time");
    [
        c.queued,
        c.scheduled,
        c.retrying,
        c.running,
        finished(c.succeeded),
        finished(c.cancelled),
        finished(c.dead),
    ]
}

/// Every id of a listing, a page of `page` at a time: newest first, each page at most `page`
/// long, the cursor the last id of a full page, no id twice.
async fn list_all(
    store: &dyn Store,
    statuses: Vec<TaskStatus>,
    due: Option<bool>,
    filter: &Filter,
    page: u32,
) -> Vec<i64> {
    let mut ids = Vec::new();
    let mut before = None;
    loop {
        let got = store
            .task_list(TaskListParams {
                statuses: statuses.clone(),
                task_type: filter.task_type.map(tt),
                text: filter.text.map(str::to_owned),
                error_code: filter.error_code.map(str::to_owned),
                before,
                limit: page,
                due,
                ..TaskListParams::default()
            })
            .await
            .unwrap();
        assert!(got.tasks.len() <= page as usize);
        for t in &got.tasks {
            assert!(
                statuses.is_empty() || statuses.contains(&t.status),
                "{statuses:?} listed a {}",
                t.status
            );
        }
        ids.extend(got.tasks.iter().map(|t| t.id.0));
        match got.next_before {
            Some(next) => {
                assert_eq!(Some(next), got.tasks.last().map(|t| t.id));
                before = Some(next);
            }
            None => break,
        }
    }
    let unique: BTreeSet<i64> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "an id listed twice: {ids:?}");
    assert!(
        ids.windows(2).all(|w| w[0] > w[1]),
        "not newest first: {ids:?}"
    );
    ids
}

/// Tasks in every tab, of two types, without an error or with one of two (mixed case).
async fn make_every_tab(db: &StoreDb) -> Vec<Made> {
    let errors = [
        None,
        Some(("smtp_down", "Connection REFUSED by relay")),
        Some(("Rate_Limited", "slow down")),
    ];
    let mut made = Vec::new();
    let mut kept = Vec::new();
    for (i, tab) in TABS.iter().enumerate() {
        for alt in [false, true] {
            for task_type in ["mail.send", "sms.push"] {
                for (e, error) in errors.iter().enumerate() {
                    // Uneven counts, so a count in the wrong tab shows.
                    if (i + e) % 3 == 0 && alt {
                        continue;
                    }
                    let spec = TaskSpec {
                        last_error: error.map(|(code, message)| {
                            json!({"code": code, "message": message, "retryable": true})
                        }),
                        ..spec_in(*tab, alt, task_type)
                    };
                    let id = db.insert_task(spec).await.unwrap();
                    if *tab == Tab::Dead && alt {
                        kept.push(id);
                    }
                    made.push(Made {
                        id,
                        tab: *tab,
                        task_type,
                        error: *error,
                    });
                }
            }
        }
    }
    finish_where_the_store_does(db, &kept).await;
    made
}

conformance!(counts_match_the_rows_under_every_filter);
async fn counts_match_the_rows_under_every_filter(db: StoreDb) {
    let store = db.store();
    let made = make_every_tab(&db).await;
    let filters = [
        Filter::default(),
        Filter {
            task_type: Some("mail.send"),
            ..Filter::default()
        },
        // The text in the code, the message and the type, whatever its case.
        Filter {
            text: Some("SMTP"),
            ..Filter::default()
        },
        Filter {
            text: Some("refused"),
            ..Filter::default()
        },
        Filter {
            text: Some("MAIL"),
            ..Filter::default()
        },
        Filter {
            text: Some("rate_limited"),
            ..Filter::default()
        },
        Filter {
            text: Some("nowhere"),
            ..Filter::default()
        },
        // The code exactly: its case counts.
        Filter {
            error_code: Some("Rate_Limited"),
            ..Filter::default()
        },
        Filter {
            error_code: Some("rate_limited"),
            ..Filter::default()
        },
        Filter {
            task_type: Some("sms.push"),
            text: Some("slow"),
            error_code: Some("Rate_Limited"),
        },
    ];
    for filter in &filters {
        let expected = counts_of(&made, filter);
        let counts = store
            .task_count_states(filter.count_params())
            .await
            .unwrap();
        assert_eq!(as_array(&counts), expected, "{filter:?}");
        // The listing of each tab under the same filter shows as many.
        for (tab, n) in TABS.iter().zip(expected) {
            let (statuses, due) = tab.listing();
            let ids = list_all(&*store, statuses, due, filter, 7).await;
            let want: Vec<i64> = made
                .iter()
                .rev()
                .filter(|m| m.tab == *tab && filter.matches(m))
                .map(|m| m.id)
                .collect();
            assert_eq!(ids, want, "{tab:?} under {filter:?}");
            assert_eq!(ids.len() as u64, n);
        }
    }
    let all = counts_of(&made, &Filter::default());
    assert!(all.iter().all(|n| *n > 0), "every tab has tasks: {all:?}");

    // The unfiltered counts against the database's own.
    let live: Vec<i64> = {
        let mut v = Vec::new();
        for status in ["queued", "retry_wait", "running", "cancel_requested"] {
            v.push(
                db.fetch_int(
                    Sql::both("SELECT count(*) FROM tasks WHERE status = $1"),
                    &[Arg::Text(status.into())],
                )
                .await
                .unwrap(),
            );
        }
        v
    };
    let counts = store
        .task_count_states(TaskCountParams::default())
        .await
        .unwrap();
    assert_eq!(
        (counts.queued + counts.scheduled) as i64,
        live[0],
        "queued and scheduled are every queued task"
    );
    assert_eq!(counts.retrying as i64, live[1]);
    assert_eq!(counts.running as i64, live[2] + live[3]);
    for (status, n) in [
        ("'succeeded', 'partially_succeeded'", counts.succeeded),
        ("'cancelled'", counts.cancelled),
        ("'dead'", counts.dead),
    ] {
        let want = db
            .fetch_int(
                Sql::owned(format!(
                    "SELECT count(*) FROM tasks WHERE status IN ({status})"
                )),
                &[],
            )
            .await
            .unwrap();
        assert_eq!(n, Some(want as u64), "{status}");
    }
    let now = store.db_now().await.unwrap();
    assert!(
        (now - counts.now).num_seconds().abs() < 5,
        "{} vs {now}",
        counts.now
    );
    db.drop_db().await.unwrap();
}

conformance!(bad_count_filters_are_refused);
async fn bad_count_filters_are_refused(db: StoreDb) {
    let store = db.store();
    for params in [
        TaskCountParams {
            text: Some("x".repeat(201)),
            ..TaskCountParams::default()
        },
        TaskCountParams {
            text: Some("a\u{7}b".into()),
            ..TaskCountParams::default()
        },
        TaskCountParams {
            error_code: Some(String::new()),
            ..TaskCountParams::default()
        },
    ] {
        assert!(
            matches!(
                store.task_count_states(params.clone()).await,
                Err(StoreError::Invalid(_))
            ),
            "{params:?}"
        );
    }
    db.drop_db().await.unwrap();
}

/// Inserts `n` finished tasks of `task_type` in `status` in one statement (where the store
/// puts them on PostgreSQL: today's partition).
async fn insert_finished_bulk(db: &StoreDb, task_type: &str, status: &str, n: i64) {
    let sql = Sql::each(
        "INSERT INTO tasks (task_type, payload, status, attempt, lease_epoch, started_at,
                            finished_at, done_on)
         SELECT $1, '{}', $2, 1, 1, now(), now(), (now() AT TIME ZONE 'UTC')::date
         FROM generate_series(1, $3)",
        "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < $3)
         INSERT INTO tasks (task_type, payload, status, attempt, lease_epoch, started_at,
                            finished_at)
         SELECT $1, '{}', $2, 1, 1, updated_at_now, updated_at_now
         FROM (SELECT (CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000)
                   AS updated_at_now), g",
    );
    let done = db
        .execute(
            sql,
            &[
                Arg::Text(task_type.into()),
                Arg::Text(status.into()),
                Arg::Int(n),
            ],
        )
        .await
        .unwrap();
    assert_eq!(done, n as u64);
}

// The cap is checked for real: 100,000 rows take a few seconds to insert and to count.
conformance!(a_finished_count_stops_one_past_its_cap, by_backend);
async fn a_finished_count_stops_one_past_its_cap(backend: leasehold_tests::store_db::Backend) {
    let db = StoreDb::new(backend).await.unwrap();
    let store = db.store();
    let cap = TASK_COUNT_FINISHED_CAP as i64;
    insert_finished_bulk(&db, "cap.s", "succeeded", cap - 1).await;
    insert_finished_bulk(&db, "cap.d", "dead", 3).await;
    let counts = store
        .task_count_states(TaskCountParams::default())
        .await
        .unwrap();
    assert_eq!(counts.succeeded, Some(TASK_COUNT_FINISHED_CAP - 1));
    assert_eq!(counts.dead, Some(3));
    insert_finished_bulk(&db, "cap.p", "partially_succeeded", 1).await;
    let counts = store
        .task_count_states(TaskCountParams::default())
        .await
        .unwrap();
    assert_eq!(
        counts.succeeded,
        Some(TASK_COUNT_FINISHED_CAP),
        "at the cap: exact"
    );
    insert_finished_bulk(&db, "cap.s", "succeeded", 5).await;
    let counts = store
        .task_count_states(TaskCountParams::default())
        .await
        .unwrap();
    assert_eq!(
        counts.succeeded,
        Some(TASK_COUNT_FINISHED_CAP + 1),
        "past the cap: one more, whatever the excess"
    );
    assert_eq!((counts.cancelled, counts.dead), (Some(0), Some(3)));
    // Under a filter the cap applies to what matches.
    let counts = store
        .task_count_states(TaskCountParams {
            task_type: Some(tt("cap.p")),
            ..TaskCountParams::default()
        })
        .await
        .unwrap();
    assert_eq!(counts.succeeded, Some(1));
    db.drop_db().await.unwrap();
}

/// PostgreSQL: a finished count that cannot have its rows within the timeout (here a partition
/// another session holds locked) is `None`, and the live counts still come, exactly.
#[tokio::test]
async fn a_finished_count_out_of_time_is_none_and_the_live_counts_still_come() {
    let db = TestDb::new().await.unwrap();
    let store = db.store();
    for status in ["queued", "running", "succeeded"] {
        leasehold_tests::insert_task(&db.pool, TaskSpec::new("slow.t", status))
            .await
            .unwrap();
    }
    sqlx::query(
        "UPDATE tasks SET done_on = (now() AT TIME ZONE 'UTC')::date WHERE status = 'succeeded'",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let mut blocker = db.pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE tasks_done_default IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *blocker)
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let counts = store
        .task_count_states(TaskCountParams::default())
        .await
        .unwrap();
    let took = started.elapsed();
    blocker.rollback().await.unwrap();
    assert_eq!(
        (
            counts.queued,
            counts.running,
            counts.scheduled,
            counts.retrying
        ),
        (1, 1, 0, 0)
    );
    assert_eq!(
        (counts.succeeded, counts.cancelled, counts.dead),
        (None, None, None)
    );
    assert!(
        took < std::time::Duration::from_secs(10),
        "each finished count gave up after its timeout: {took:?}"
    );
    // The lock gone, they come again.
    let counts = store
        .task_count_states(TaskCountParams::default())
        .await
        .unwrap();
    assert_eq!(
        (counts.succeeded, counts.cancelled, counts.dead),
        (Some(1), Some(0), Some(0))
    );
    db.drop_db().await.unwrap();
}

conformance!(due_and_finished_listings_page_through_exactly_their_rows);
async fn due_and_finished_listings_page_through_exactly_their_rows(db: StoreDb) {
    let store = db.store();
    // Interleaved, so every listing's rows are spread over the whole id range.
    let plan: [(Tab, bool, usize); 10] = [
        (Tab::Queued, false, 250),
        (Tab::Scheduled, false, 130),
        (Tab::Retrying, false, 40),
        (Tab::Retrying, true, 30),
        (Tab::Running, false, 10),
        (Tab::Succeeded, false, 120),
        (Tab::Succeeded, true, 30),
        (Tab::Cancelled, false, 60),
        (Tab::Dead, false, 20),
        (Tab::Dead, true, 5),
    ];
    let mut left: Vec<usize> = plan.iter().map(|p| p.2).collect();
    let mut made: Vec<(i64, Tab, bool)> = Vec::new();
    let mut kept = Vec::new();
    while left.iter().any(|n| *n > 0) {
        for (i, (tab, alt, _)) in plan.iter().enumerate() {
            if left[i] == 0 {
                continue;
            }
            left[i] -= 1;
            let id = db.insert_task(spec_in(*tab, *alt, "list.t")).await.unwrap();
            if *tab == Tab::Succeeded && left[i].is_multiple_of(10) {
                kept.push(id);
            }
            made.push((id, *tab, *alt));
        }
    }
    finish_where_the_store_does(&db, &kept).await;
    let want = |pick: &dyn Fn(Tab, bool) -> bool| -> Vec<i64> {
        made.iter()
            .rev()
            .filter(|(_, tab, alt)| pick(*tab, *alt))
            .map(|(id, _, _)| *id)
            .collect()
    };
    use TaskStatus as S;
    let cases: Vec<(Vec<S>, Option<bool>, Vec<i64>)> = vec![
        (vec![S::Queued], Some(true), want(&|t, _| t == Tab::Queued)),
        (
            vec![S::Queued],
            Some(false),
            want(&|t, _| t == Tab::Scheduled),
        ),
        (
            vec![S::Queued],
            None,
            want(&|t, _| matches!(t, Tab::Queued | Tab::Scheduled)),
        ),
        (
            vec![S::RetryWait],
            Some(true),
            want(&|t, alt| t == Tab::Retrying && !alt),
        ),
        (
            vec![S::RetryWait],
            Some(false),
            want(&|t, alt| t == Tab::Retrying && alt),
        ),
        (
            vec![S::Queued, S::RetryWait],
            Some(true),
            want(&|t, alt| t == Tab::Queued || (t == Tab::Retrying && !alt)),
        ),
        (
            vec![S::Succeeded, S::PartiallySucceeded],
            None,
            want(&|t, _| t == Tab::Succeeded),
        ),
        (
            vec![S::Succeeded],
            None,
            want(&|t, alt| t == Tab::Succeeded && !alt),
        ),
        (vec![S::Cancelled], None, want(&|t, _| t == Tab::Cancelled)),
        (vec![S::Dead], None, want(&|t, _| t == Tab::Dead)),
        // A running or finished task is neither due nor not due.
        (vec![S::Succeeded, S::Running], Some(true), Vec::new()),
        (vec![S::Cancelled], Some(false), Vec::new()),
        // No status: the due filter alone picks the waiting tasks.
        (
            Vec::new(),
            Some(false),
            want(&|t, alt| t == Tab::Scheduled || (t == Tab::Retrying && alt)),
        ),
    ];
    for (statuses, due, expected) in cases {
        let listed = list_all(&*store, statuses.clone(), due, &Filter::default(), 100).await;
        assert_eq!(listed.len(), expected.len(), "{statuses:?} due {due:?}");
        assert_eq!(listed, expected, "{statuses:?} due {due:?}");
    }
    db.drop_db().await.unwrap();
}

fn viewer() -> Actor {
    Actor {
        name: "val".into(),
        role: Role::Viewer,
    }
}

fn run_now(id: i64, actor: Actor) -> RunNowParams {
    RunNowParams {
        id: TaskId(id),
        actor,
    }
}

fn delete(id: i64, actor: Actor) -> DeleteTaskParams {
    DeleteTaskParams {
        id: TaskId(id),
        actor,
    }
}

/// `(actor, role, action, target, result)` as audit_rows reads them.
fn row(
    actor: &str,
    role: &str,
    action: &str,
    id: i64,
    result: &str,
) -> (String, String, String, String, String) {
    (
        actor.into(),
        role.into(),
        action.into(),
        format!("task:{id}"),
        result.into(),
    )
}

conformance!(run_now_makes_a_waiting_task_due_and_nothing_else);
async fn run_now_makes_a_waiting_task_due_and_nothing_else(db: StoreDb) {
    let store = db.store();
    let later = db
        .insert_task(spec_in(Tab::Scheduled, false, "rn.t"))
        .await
        .unwrap();
    let retry_later = db
        .insert_task(spec_in(Tab::Retrying, true, "rn.t"))
        .await
        .unwrap();
    let due = db
        .insert_task(spec_in(Tab::Queued, false, "rn.t"))
        .await
        .unwrap();
    let refused: Vec<(i64, TaskStatus)> = {
        let mut v = Vec::new();
        for status in [
            "running",
            "cancel_requested",
            "succeeded",
            "partially_succeeded",
            "cancelled",
            "dead",
        ] {
            let id = db.insert_task(TaskSpec::new("rn.t", status)).await.unwrap();
            v.push((id, status.parse().unwrap()));
        }
        v
    };
    finish_where_the_store_does(&db, &[]).await;
    let due_before = db.task_time(due, "available_at").await.unwrap();

    // A viewer changes nothing.
    let before = db.task_row(later).await.unwrap();
    assert!(matches!(
        store.task_run_now(run_now(later, viewer())).await,
        Err(StoreError::PermissionDenied { .. })
    ));
    assert_eq!(db.task_row(later).await.unwrap(), before);

    let op = || Actor::operator("alice");
    for (id, status) in [
        (later, TaskStatus::Queued),
        (retry_later, TaskStatus::RetryWait),
    ] {
        let out = store.task_run_now(run_now(id, op())).await.unwrap();
        assert_eq!((out.id, out.status, out.moved), (TaskId(id), status, true));
        let now = store.db_now().await.unwrap();
        let at = db.task_time(id, "available_at").await.unwrap();
        assert!(at <= now, "task {id} due at {at}, after {now}");
        assert_eq!(db.task_status(id).await.unwrap(), status.as_str());
        // Listed as due now, no longer as not yet due.
        let (statuses, _) = if status == TaskStatus::Queued {
            Tab::Queued.listing()
        } else {
            Tab::Retrying.listing()
        };
        assert!(
            list_all(
                &*store,
                statuses.clone(),
                Some(true),
                &Filter::default(),
                50
            )
            .await
            .contains(&id)
        );
        assert!(
            !list_all(&*store, statuses, Some(false), &Filter::default(), 50)
                .await
                .contains(&id)
        );
    }
    // Already due: nothing moves.
    let out = store.task_run_now(run_now(due, op())).await.unwrap();
    assert_eq!((out.status, out.moved), (TaskStatus::Queued, false));
    assert_eq!(db.task_time(due, "available_at").await.unwrap(), due_before);
    // A second run-now of the one it moved: due already.
    let again = store.task_run_now(run_now(later, op())).await.unwrap();
    assert!(!again.moved);

    for (id, status) in &refused {
        let before = db.task_row(*id).await.unwrap();
        match store.task_run_now(run_now(*id, op())).await {
            Err(StoreError::Transition { id: got, source }) => {
                assert_eq!(got, TaskId(*id));
                assert_eq!((source.from, source.action), (*status, TaskAction::RunNow));
            }
            other => panic!("run-now of a {status} task: {other:?}"),
        }
        assert_eq!(
            db.task_row(*id).await.unwrap(),
            before,
            "{status} unchanged"
        );
    }
    assert!(matches!(
        store.task_run_now(run_now(9_999_999, op())).await,
        Err(StoreError::NotFound(TaskId(9_999_999)))
    ));

    let mut expected = vec![
        row("val", "viewer", "run_now", later, "denied"),
        row("alice", "operator", "run_now", later, "applied"),
        row("alice", "operator", "run_now", retry_later, "applied"),
        row("alice", "operator", "run_now", due, "noop"),
        row("alice", "operator", "run_now", later, "noop"),
    ];
    for (id, _) in &refused {
        expected.push(row("alice", "operator", "run_now", *id, "failed"));
    }
    expected.push(row("alice", "operator", "run_now", 9_999_999, "failed"));
    assert_eq!(db.audit_rows().await.unwrap(), expected);
    let details: Vec<Option<String>> = db
        .audit_details()
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.3)
        .collect();
    assert_eq!(details[1].as_deref(), Some("queued: due now"));
    assert_eq!(details[2].as_deref(), Some("retry_wait: due now"));
    assert_eq!(details[3].as_deref(), Some("queued: already due"));
    assert!(
        details[5].as_deref().is_some_and(|d| d.contains("running")),
        "a refusal names the status: {:?}",
        details[5]
    );
    db.drop_db().await.unwrap();
}

async fn task_exists(db: &StoreDb, id: i64) -> bool {
    db.fetch_int(
        Sql::both("SELECT count(*) FROM tasks WHERE id = $1"),
        &[Arg::Int(id)],
    )
    .await
    .unwrap()
        == 1
}

conformance!(delete_removes_a_task_no_agent_holds_with_its_attempts_and_nothing_else);
async fn delete_removes_a_task_no_agent_holds_with_its_attempts_and_nothing_else(db: StoreDb) {
    let store = db.store();
    let mut deletable = Vec::new();
    for (tab, alt, task_type) in [
        (Tab::Queued, false, "del.a"),
        (Tab::Scheduled, false, "del.a"),
        (Tab::Retrying, false, "del.b"),
        (Tab::Succeeded, false, "del.b"),
        (Tab::Succeeded, true, "del.b"),
        (Tab::Cancelled, false, "del.a"),
        (Tab::Dead, false, "del.c"),
        (Tab::Dead, true, "del.c"),
    ] {
        let spec = spec_in(tab, alt, task_type);
        let status: TaskStatus = spec.status.parse().unwrap();
        let id = db.insert_task(spec).await.unwrap();
        deletable.push((id, status, task_type));
    }
    let running = db
        .insert_task(TaskSpec::new("del.r", "running"))
        .await
        .unwrap();
    let cancelling = db
        .insert_task(TaskSpec::new("del.r", "cancel_requested"))
        .await
        .unwrap();
    // A bystander of every kind keeps its row and attempts.
    let bystander = db
        .insert_task(TaskSpec::new("del.c", "dead"))
        .await
        .unwrap();
    let all: Vec<i64> = deletable
        .iter()
        .map(|d| d.0)
        .chain([running, cancelling, bystander])
        .collect();
    for id in &all {
        for epoch in 1..=2 {
            db.insert_attempt(*id, epoch, epoch, "a#1", "failed")
                .await
                .unwrap();
        }
    }
    // The second dead one where a dropped day leaves it (PostgreSQL).
    finish_where_the_store_does(&db, &[deletable[7].0]).await;

    // A viewer deletes nothing.
    assert!(matches!(
        store.task_delete(delete(deletable[0].0, viewer())).await,
        Err(StoreError::PermissionDenied { .. })
    ));
    assert!(task_exists(&db, deletable[0].0).await);

    let op = || Actor::operator("alice");
    for (id, status, _) in &deletable {
        let out = store.task_delete(delete(*id, op())).await.unwrap();
        assert_eq!((out.id, out.previous), (TaskId(*id), *status));
        assert!(!task_exists(&db, *id).await, "task {id} ({status}) is gone");
        assert!(
            db.attempt_rows(*id).await.unwrap().is_empty(),
            "task {id}'s attempts are gone"
        );
    }
    for id in [running, cancelling] {
        let before = db.task_row(id).await.unwrap();
        match store.task_delete(delete(id, op())).await {
            Err(StoreError::Transition { id: got, source }) => {
                assert_eq!(got, TaskId(id));
                assert_eq!(source.action, TaskAction::Delete);
                assert!(source.from.is_leased());
            }
            other => panic!("delete of a held task: {other:?}"),
        }
        assert_eq!(db.task_row(id).await.unwrap(), before);
        assert_eq!(db.attempt_rows(id).await.unwrap().len(), 2);
    }
    let gone = deletable[0].0;
    assert!(matches!(
        store.task_delete(delete(gone, op())).await,
        Err(StoreError::NotFound(TaskId(x))) if x == gone
    ));
    assert!(task_exists(&db, bystander).await);
    assert_eq!(db.attempt_rows(bystander).await.unwrap().len(), 2);

    let mut expected = vec![row("val", "viewer", "delete", deletable[0].0, "denied")];
    for (id, _, _) in &deletable {
        expected.push(row("alice", "operator", "delete", *id, "applied"));
    }
    expected.push(row("alice", "operator", "delete", running, "failed"));
    expected.push(row("alice", "operator", "delete", cancelling, "failed"));
    expected.push(row("alice", "operator", "delete", gone, "failed"));
    assert_eq!(db.audit_rows().await.unwrap(), expected);
    let details = db.audit_details().await.unwrap();
    for (i, (_, status, task_type)) in deletable.iter().enumerate() {
        assert_eq!(
            details[i + 1].3.as_deref(),
            Some(format!("deleted {status} task of type {task_type}").as_str())
        );
    }
    db.drop_db().await.unwrap();
}

/// Every relation an EXPLAIN (FORMAT JSON) plan reads.
fn relations(plan: &serde_json::Value, out: &mut BTreeSet<String>) {
    if let Some(name) = plan["Relation Name"].as_str() {
        out.insert(name.to_owned());
    }
    if let Some(children) = plan["Plans"].as_array() {
        for child in children {
            relations(child, out);
        }
    }
}

/// The relations PostgreSQL's plan of `statement` (a task_list*.sql) reads for `statuses` and
/// `due`, with the plan the parameters' values make and with the generic one.
async fn listing_relations(
    pool: &sqlx::PgPool,
    statement: &str,
    statuses: &[&str],
    due: Option<bool>,
) -> Vec<BTreeSet<String>> {
    let mut all = Vec::new();
    for mode in leasehold_tests::helpers::PLAN_MODES {
        let mut tx = leasehold_tests::helpers::tx_planning(pool, mode).await;
        let row: (sqlx::types::Json<serde_json::Value>,) = sqlx::query_as(sqlx::AssertSqlSafe(
            format!("EXPLAIN (FORMAT JSON) {statement}"),
        ))
        .bind(statuses.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        .bind(None::<String>)
        .bind(None::<String>)
        .bind(None::<i64>)
        .bind(100i64)
        .bind(None::<String>)
        .bind(None::<chrono::DateTime<chrono::Utc>>)
        .bind(due)
        .fetch_one(&mut *tx)
        .await
        .unwrap();
        tx.rollback().await.unwrap();
        let mut rels = BTreeSet::new();
        relations(&row.0.0[0]["Plan"], &mut rels);
        all.push(rels);
    }
    all
}

/// PostgreSQL: a page of waiting tasks plans against tasks_live alone, a page of finished
/// ones never reads tasks_live, whatever the parameters and with a generic plan.
#[tokio::test]
async fn waiting_pages_read_only_tasks_live_and_finished_pages_never_do() {
    let db = TestDb::new().await.unwrap();
    let store = db.store();
    // History in days' partitions and tasks_done_kept, so a plan could name them.
    for status in ["succeeded", "dead", "cancelled", "queued"] {
        leasehold_tests::insert_task(&db.pool, TaskSpec::new("plan.t", status))
            .await
            .unwrap();
    }
    sqlx::query("SELECT leasehold_tasks_done_partition((now() AT TIME ZONE 'UTC')::date)")
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE tasks SET done_on = (now() AT TIME ZONE 'UTC')::date
         WHERE status IN ('succeeded', 'cancelled', 'dead')",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let page = include_str!("../../shared/src/store/postgres/sql/task_list_page.sql");
    let waiting = format!(
        "{}{page}",
        include_str!("../../shared/src/store/postgres/sql/task_list_waiting.sql")
    );
    let finished = format!(
        "{}{page}",
        include_str!("../../shared/src/store/postgres/sql/task_list_finished.sql")
    );
    for (statuses, due) in [
        (&["queued"][..], Some(true)),
        (&["queued"][..], Some(false)),
        (&["retry_wait"][..], None),
        (&["queued", "retry_wait"][..], None),
    ] {
        for rels in listing_relations(&db.pool, &waiting, statuses, due).await {
            assert_eq!(
                rels,
                BTreeSet::from(["tasks_live".to_owned()]),
                "{statuses:?} due {due:?}"
            );
        }
    }
    for statuses in [
        &["succeeded", "partially_succeeded"][..],
        &["cancelled"][..],
    ] {
        for rels in listing_relations(&db.pool, &finished, statuses, None).await {
            assert!(!rels.is_empty());
            assert!(
                !rels.contains("tasks_live"),
                "{statuses:?} read tasks_live: {rels:?}"
            );
        }
    }
    // And the store lists through them: the queued one, the succeeded one.
    let page = store
        .task_list(TaskListParams {
            statuses: vec![TaskStatus::Queued],
            due: Some(true),
            limit: 100,
            ..TaskListParams::default()
        })
        .await
        .unwrap();
    assert_eq!(page.tasks.len(), 1);
    let page = store
        .task_list(TaskListParams {
            statuses: vec![TaskStatus::Succeeded],
            limit: 100,
            ..TaskListParams::default()
        })
        .await
        .unwrap();
    assert_eq!(page.tasks.len(), 1);
    db.drop_db().await.unwrap();
}

conformance!(run_now_and_delete_wait_for_a_claim_in_flight_and_decide_from_its_row);
async fn run_now_and_delete_wait_for_a_claim_in_flight_and_decide_from_its_row(db: StoreDb) {
    let store = db.store();
    let id = db
        .insert_task(spec_in(Tab::Scheduled, false, "race.t"))
        .await
        .unwrap();
    // A claim in flight: it holds the row (PostgreSQL) or the write lock (SQLite) and has made
    // the task running, not yet committed.
    let mut claim = db.begin_write().await.unwrap();
    claim.lock_tasks(&[id]).await.unwrap();
    let claimed = claim
        .update(
            leasehold_tests::Rows::Task(id),
            &[
                ("status", "running".into()),
                ("attempt", 1.into()),
                ("lease_epoch", 1.into()),
                ("lease_owner", "race#1".into()),
                ("lease_until", leasehold_tests::Val::At(30.0)),
                ("heartbeat_at", leasehold_tests::Val::At(0.0)),
                ("started_at", leasehold_tests::Val::At(0.0)),
            ],
        )
        .await
        .unwrap();
    assert_eq!(claimed, 1);
    let (s1, s2) = (store.clone(), store.clone());
    let op = || Actor::operator("alice");
    let run = tokio::spawn(async move { s1.task_run_now(run_now(id, op())).await });
    let del = tokio::spawn(async move { s2.task_delete(delete(id, op())).await });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        !run.is_finished() && !del.is_finished(),
        "both wait for the claim's transaction"
    );
    claim.commit().await.unwrap();
    for (what, outcome) in [
        ("run-now", run.await.unwrap().map(|_| ())),
        ("delete", del.await.unwrap().map(|_| ())),
    ] {
        match outcome {
            Err(StoreError::Transition { source, .. }) => {
                assert_eq!(source.from, TaskStatus::Running, "{what}")
            }
            other => panic!("{what} after the claim committed: {other:?}"),
        }
    }
    let row = db.task_row(id).await.unwrap();
    assert_eq!(row["status"], "running");
    assert_eq!(row["lease_owner"], "race#1");
    db.drop_db().await.unwrap();
}
