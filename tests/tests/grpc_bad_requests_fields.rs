#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Bad ids, filters, names, numbers and JSON against a real agent (TESTING.md T31; DESIGN §10:
//! "bad input changes nothing"), written as case tables: each case is a request, the codes
//! allowed and the field the message must name. Every case runs; the failures are reported
//! together, each naming its case. After a table, `tasks` and `policies` are compared row for
//! row with before, the local limit is unchanged, no call was audited as applied and the agent
//! still answers.
//!
//! Also ListSuspectLeases' thresholds and limits, and who may read it.

use leasehold_proto::v1 as pb;
use leasehold_tests::TestDb;
use leasehold_tests::agent::AgentHandle;
use leasehold_tests::calls::grpc::{
    Failures, Fixture, INVALID, OPERATOR, VIEWER, alive, local_limit, refusal, start, stop,
};
use leasehold_tests::grpc::{Client, connect, connect_with};
use leasehold_tests::{TaskSpec, insert_task, wait_until};
use pb::set_concurrency_request::Scope;
use sqlx::PgPool;
use tonic::Code;

/// Rows of `tasks` and `policies`, as text.
async fn digest(pool: &PgPool) -> (String, String) {
    leasehold_tests::inspect::state_digest(pool, &[])
        .await
        .unwrap()
}

/// A request of a case table.
#[derive(Debug)]
enum Req {
    Get(pb::GetTaskRequest),
    Cancel(pb::CancelRequest),
    Requeue(pb::RequeueRequest),
    List(pb::ListTasksRequest),
    Enqueue(pb::EnqueueRequest),
    Pause(pb::PauseTypeRequest),
    Resume(pb::ResumeTypeRequest),
    SetConcurrency(pb::SetConcurrencyRequest),
    SetRateLimit(pb::SetRateLimitRequest),
    SetShedAfter(pb::SetShedAfterRequest),
    SetBreaker(pb::SetBreakerRequest),
    RequeueDead(pb::RequeueDeadRequest),
    PurgeDead(pb::PurgeDeadRequest),
    Audit(pb::ListAuditRequest),
}

impl Req {
    /// Sends it; the answer's debug text, or the status.
    async fn send(self, c: &mut Client) -> Result<String, tonic::Status> {
        fn text<T: std::fmt::Debug>(r: tonic::Response<T>) -> String {
            format!("{:?}", r.into_inner())
        }
        match self {
            Req::Get(r) => c.get_task(r).await.map(text),
            Req::Cancel(r) => c.cancel(r).await.map(text),
            Req::Requeue(r) => c.requeue(r).await.map(text),
            Req::List(r) => c.list_tasks(r).await.map(text),
            Req::Enqueue(r) => c.enqueue(r).await.map(text),
            Req::Pause(r) => c.pause_type(r).await.map(text),
            Req::Resume(r) => c.resume_type(r).await.map(text),
            Req::SetConcurrency(r) => c.set_concurrency(r).await.map(text),
            Req::SetRateLimit(r) => c.set_rate_limit(r).await.map(text),
            Req::SetShedAfter(r) => c.set_shed_after(r).await.map(text),
            Req::SetBreaker(r) => c.set_breaker(r).await.map(text),
            Req::RequeueDead(r) => c.requeue_dead(r).await.map(text),
            Req::PurgeDead(r) => c.purge_dead(r).await.map(text),
            Req::Audit(r) => c.list_audit(r).await.map(text),
        }
    }
}

/// One case: its name, the request, the codes that may refuse it and the text the message
/// must hold (the field, or `""` for any).
struct Case {
    what: String,
    req: Req,
    codes: &'static [Code],
    field: &'static str,
}

/// A case refused with `codes`.
fn case(what: impl Into<String>, req: Req, codes: &'static [Code], field: &'static str) -> Case {
    Case {
        what: what.into(),
        req,
        codes,
        field,
    }
}

/// A case refused as INVALID_ARGUMENT naming `field`, named after its request.
fn bad(req: Req, field: &'static str) -> Case {
    case(format!("{req:?}"), req, INVALID, field)
}

fn enqueue(task_type: &str) -> pb::EnqueueRequest {
    pb::EnqueueRequest {
        task_type: task_type.into(),
        ..Default::default()
    }
}

fn set_conc(scope: Option<Scope>, limit: u32, unlimited: bool) -> Req {
    Req::SetConcurrency(pb::SetConcurrencyRequest {
        scope,
        limit,
        unlimited,
        per_key: false,
    })
}

/// SetConcurrency of a per-key limit.
fn set_per_key(scope: Option<Scope>, limit: u32, unlimited: bool) -> Req {
    Req::SetConcurrency(pb::SetConcurrencyRequest {
        scope,
        limit,
        unlimited,
        per_key: true,
    })
}

fn set_rate(
    scope: Option<pb::set_rate_limit_request::Scope>,
    limit: Option<(u32, u64)>,
    clear: bool,
) -> Req {
    Req::SetRateLimit(pb::SetRateLimitRequest {
        scope,
        limit: limit.map(|(starts, period_ms)| pb::RateLimit { starts, period_ms }),
        clear,
    })
}

/// A table's agent after its cases ran, for the checks that follow.
struct Run {
    db: TestDb,
    agent: AgentHandle,
    c: Client,
    f: Fixture,
    before: (String, String),
    limit_before: u32,
}

/// Starts an agent named `name` on a fresh database holding the [`Fixture`], sends every case
/// of `cases` and asserts each was refused as it says.
async fn run_table(name: &str, cases: fn(&Fixture) -> Vec<Case>) -> Run {
    let db = TestDb::new().await.unwrap();
    let f = Fixture::insert(&db.pool).await.unwrap();
    let (agent, addr) = start(&db, name, &[]).await.unwrap();
    let mut c = connect(&addr).await.unwrap();
    let limit_before = local_limit(&mut c).await.unwrap();
    let before = digest(&db.pool).await;
    let mut failures = Failures::default();
    for case in cases(&f) {
        let answer = case.req.send(&mut c).await;
        failures.check(&case.what, refusal(answer, case.codes, case.field));
    }
    eprintln!("{name}: {} cases", failures.checked());
    failures.assert_none();
    Run {
        db,
        agent,
        c,
        f,
        before,
        limit_before,
    }
}

impl Run {
    /// Nothing the cases sent changed anything; the agent still answers.
    async fn assert_unchanged(&mut self) {
        assert_eq!(
            digest(&self.db.pool).await,
            self.before,
            "tasks and policies unchanged"
        );
        assert_eq!(
            local_limit(&mut self.c).await.unwrap(),
            self.limit_before,
            "local limit unchanged"
        );
        let applied: i64 =
            sqlx::query_scalar("SELECT count(*) FROM audit_log WHERE result = 'applied'")
                .fetch_one(&self.db.pool)
                .await
                .unwrap();
        assert_eq!(applied, 0, "no refused call was recorded as applied");
        alive(&mut self.agent, &mut self.c).await.unwrap();
    }

    async fn finish(self) {
        drop(self.c);
        stop(self.agent).await.unwrap();
        self.db.drop_db().await.unwrap();
    }
}

/// Unknown ids, ids that cannot be ids, bad waits and moves the task's state forbids.
fn id_cases(f: &Fixture) -> Vec<Case> {
    let unknown = 9_000_000_000_i64;
    let not_found: &[Code] = &[Code::NotFound];
    let mut cases = vec![
        case(
            "get unknown",
            Req::Get(pb::GetTaskRequest { id: unknown }),
            not_found,
            "9000000000",
        ),
        case(
            "cancel unknown",
            Req::Cancel(pb::CancelRequest {
                id: unknown,
                wait: true,
                wait_ms: 0,
            }),
            not_found,
            "9000000000",
        ),
        case(
            "requeue unknown",
            Req::Requeue(pb::RequeueRequest { id: unknown }),
            not_found,
            "9000000000",
        ),
    ];
    for id in [0, -1, i64::MIN] {
        cases.push(bad(Req::Get(pb::GetTaskRequest { id }), "id"));
        cases.push(bad(
            Req::Cancel(pb::CancelRequest {
                id,
                ..Default::default()
            }),
            "id",
        ));
        cases.push(bad(Req::Requeue(pb::RequeueRequest { id }), "id"));
    }
    // A bad wait is refused before the (valid) task is touched.
    for wait_ms in [-1, i64::MIN, 301_000, i64::MAX] {
        cases.push(bad(
            Req::Cancel(pb::CancelRequest {
                id: f.queued,
                wait: true,
                wait_ms,
            }),
            "wait_ms",
        ));
    }
    let precondition: &[Code] = &[Code::FailedPrecondition];
    cases.push(case(
        "requeue of a task that is not finished",
        Req::Requeue(pb::RequeueRequest { id: f.queued }),
        precondition,
        "",
    ));
    cases.push(case(
        "cancel of a finished task",
        Req::Cancel(pb::CancelRequest {
            id: f.succeeded,
            ..Default::default()
        }),
        precondition,
        "",
    ));
    cases
}

/// ListTasks filters out of range.
#[allow(deprecated)] // ListAudit's `result` is the word an older console sends
fn list_cases(_: &Fixture) -> Vec<Case> {
    type Edit = fn(&mut pb::ListTasksRequest);
    let list = |field, edit: Edit| {
        let mut r = pb::ListTasksRequest::default();
        edit(&mut r);
        bad(Req::List(r), field)
    };
    vec![
        list("statuses", |r| r.statuses = vec![99]),
        list("statuses", |r| r.statuses = vec![0]),
        list("statuses", |r| r.statuses = vec![1, -3]),
        list("task_type", |r| r.task_type = "Bad Type".into()),
        list("task_type", |r| r.task_type = "x".repeat(100)),
        list("task_type", |r| r.task_type = "a\u{0}b".into()),
        list("error_code", |r| r.error_code = "e".repeat(65)),
        list("error_code", |r| r.error_code = "a\u{1b}[2Jb".into()),
        list("since_ms", |r| r.since_ms = -1),
        list("since_ms", |r| r.since_ms = i64::MAX),
        list("limit", |r| r.limit = 5000),
        list("limit", |r| r.limit = u32::MAX),
        list("before_id", |r| r.before_id = -1),
        list("text", |r| r.text = "t".repeat(201)),
        // NUL: valid UTF-8, but PostgreSQL text cannot hold it. Bad input, not a database
        // failure.
        list("text", |r| r.text = "a\u{0}b".into()),
        // The audit result travels as an enum and, for older agents, as its word: an unknown
        // one, or a pair that disagrees, is refused naming the field.
        audit("audit_result", |r| r.audit_result = 77),
        audit("result", |r| r.result = "bogus".into()),
        audit("result", |r| {
            r.result = "applied".into();
            r.audit_result = pb::AuditResult::Denied as i32;
        }),
    ]
}

/// A ListAudit request edited by `edit`, refused naming `field`.
fn audit(field: &'static str, edit: fn(&mut pb::ListAuditRequest)) -> Case {
    let mut r = pb::ListAuditRequest::default();
    edit(&mut r);
    bad(Req::Audit(r), field)
}

/// Enqueue: type names, JSON, numbers, NUL characters.
fn enqueue_cases(_: &Fixture) -> Vec<Case> {
    let long_type = "x".repeat(65);
    let mut cases: Vec<Case> = [
        "Bad Type",
        "",
        long_type.as_str(),
        "-lead",
        "é",
        "a b",
        "a\u{0}",
        "a\nb",
    ]
    .into_iter()
    .map(|name| bad(Req::Enqueue(enqueue(name)), "task_type"))
    .collect();
    type Edit = fn(&mut pb::EnqueueRequest);
    let enq = |field: &'static str, edit: Edit| {
        let mut r = enqueue("bad.kind");
        edit(&mut r);
        case(
            format!("enqueue {field}: {r:?}"),
            Req::Enqueue(r),
            INVALID,
            field,
        )
    };
    cases.extend([
        enq("payload_json", |r| r.payload_json = "{not json".into()),
        enq("payload_json", |r| {
            r.payload_json = "{\"a\":1} trailing".into()
        }),
        enq("payload_json", |r| r.payload_json = "\"\\ud800\"".into()),
        enq("payload_json", |r| {
            r.payload_json = format!("{}1{}", "[".repeat(5000), "]".repeat(5000))
        }),
        enq("priority", |r| r.priority = 40_000),
        enq("priority", |r| r.priority = -32_769),
        enq("priority", |r| r.priority = i32::MIN),
        enq("delay_ms", |r| r.delay_ms = -1),
        enq("timeout_ms", |r| r.timeout_ms = -5),
        enq("deadline_at_ms", |r| r.deadline_at_ms = -5),
        enq("deadline_at_ms", |r| r.deadline_at_ms = i64::MAX),
        enq("max_attempts", |r| r.max_attempts = -1),
        enq("max_attempts", |r| r.max_attempts = 1_000_000),
        enq("delay", |r| r.delay_ms = i64::MAX),
        enq("timeout", |r| r.timeout_ms = i64::MAX),
        enq("idempotency_key", |r| r.idempotency_key = "k".repeat(300)),
        // NUL characters: valid UTF-8 and valid JSON, but PostgreSQL text and jsonb cannot
        // hold them. Refused as bad input, not a database failure.
        enq("payload", |r| r.payload_json = "{\"a\":\"\\u0000\"}".into()),
        enq("payload", |r| r.payload_json = "{\"\\u0000\":1}".into()),
        enq("idempotency_key", |r| r.idempotency_key = "k\u{0}".into()),
        // Concurrency keys: 1-200 bytes without control characters (empty means none).
        enq("concurrency_key", |r| r.concurrency_key = "k".repeat(201)),
        enq("concurrency_key", |r| r.concurrency_key = "k\u{0}".into()),
        enq("concurrency_key", |r| {
            r.concurrency_key = "a\u{1b}[2Jb".into()
        }),
        enq("concurrency_key", |r| r.concurrency_key = "a\nb".into()),
    ]);
    cases
}

/// PauseType, ResumeType, SetConcurrency, SetRateLimit, SetShedAfter, SetBreaker and
/// RequeueDead.
fn policy_cases(_: &Fixture) -> Vec<Case> {
    let long_type = "x".repeat(100);
    let mut cases = Vec::new();
    for name in ["Bad Type", "", long_type.as_str(), "\u{202e}rtl"] {
        let task_type = name.to_string();
        cases.push(bad(
            Req::Pause(pb::PauseTypeRequest {
                task_type: task_type.clone(),
            }),
            "task_type",
        ));
        cases.push(bad(
            Req::Resume(pb::ResumeTypeRequest { task_type }),
            "task_type",
        ));
    }
    let local = |on| Some(Scope::AgentLocal(on));
    let global = |on| Some(Scope::Global(on));
    let typed = |t: &str| Some(Scope::TaskType(t.into()));
    cases.extend([
        bad(set_conc(local(true), 0, false), "limit"),
        bad(set_conc(local(true), 100_001, false), "limit"),
        bad(set_conc(local(true), u32::MAX, false), "limit"),
        bad(set_conc(local(true), 0, true), "limit"),
        bad(set_conc(local(false), 5, false), "scope"),
        bad(set_conc(global(true), 5, true), "limit"),
        bad(set_conc(global(false), 5, false), "scope"),
        bad(set_conc(global(true), u32::MAX, false), "max_concurrency"),
        bad(set_conc(typed("bad.kind"), 3, true), "limit"),
        bad(set_conc(typed("Bad Type"), 3, false), "task_type"),
        bad(set_conc(typed(""), 3, false), "task_type"),
        bad(set_conc(None, 3, false), "scope"),
        bad(set_conc(None, 0, true), "scope"),
        // A per-key limit belongs to a task type, 1..=1000000 or unlimited.
        bad(set_per_key(global(true), 2, false), "per_key"),
        bad(set_per_key(global(true), 0, true), "per_key"),
        bad(set_per_key(local(true), 2, false), "per_key"),
        bad(set_per_key(None, 2, false), "per_key"),
        bad(set_per_key(typed("bad.kind"), 0, false), "limit"),
        bad(set_per_key(typed("bad.kind"), 1_000_001, false), "limit"),
        bad(set_per_key(typed("bad.kind"), u32::MAX, false), "limit"),
        bad(set_per_key(typed("bad.kind"), 3, true), "limit"),
        bad(set_per_key(typed("Bad Type"), 3, false), "task_type"),
        bad(set_per_key(typed(""), 0, true), "task_type"),
    ]);
    use pb::set_rate_limit_request::Scope as RateScope;
    let rate_global = |on| Some(RateScope::Global(on));
    let rate_typed = |t: &str| Some(RateScope::TaskType(t.into()));
    cases.extend([
        bad(set_rate(None, Some((5, 1000)), false), "scope"),
        bad(
            set_rate(rate_global(false), Some((5, 1000)), false),
            "scope",
        ),
        bad(set_rate(rate_global(true), None, false), "limit"),
        bad(set_rate(rate_global(true), Some((5, 1000)), true), "limit"),
        bad(
            set_rate(rate_global(true), Some((0, 1000)), false),
            "limit.starts",
        ),
        bad(
            set_rate(rate_global(true), Some((1_000_001, 1000)), false),
            "limit.starts",
        ),
        bad(
            set_rate(rate_typed("bad.kind"), Some((5, 0)), false),
            "limit.period_ms",
        ),
        bad(
            set_rate(rate_typed("bad.kind"), Some((5, 86_400_001)), false),
            "limit.period_ms",
        ),
        bad(
            set_rate(rate_typed("bad.kind"), Some((5, u64::MAX)), false),
            "limit.period_ms",
        ),
        bad(
            set_rate(rate_typed("Bad Type"), Some((5, 1000)), false),
            "task_type",
        ),
        bad(set_rate(rate_typed(""), None, true), "task_type"),
    ]);
    let shed = |task_type: &str, shed_after_ms, clear| {
        Req::SetShedAfter(pb::SetShedAfterRequest {
            task_type: task_type.into(),
            shed_after_ms,
            clear,
        })
    };
    cases.extend([
        bad(shed("bad.kind", 0, false), "shed_after_ms"),
        bad(shed("bad.kind", 604_800_001, false), "shed_after_ms"),
        bad(shed("bad.kind", u64::MAX, false), "shed_after_ms"),
        bad(shed("bad.kind", 5_000, true), "shed_after_ms"),
        bad(shed("Bad Type", 5_000, false), "task_type"),
        bad(shed("", 0, true), "task_type"),
    ]);
    // A breaker belongs to a task type (not the global policy `*`): 1..=1000000 failures
    // within 1 ms..=24 h, a cooldown of 1 ms..=7 days; `clear` with no numbers.
    let breaker = |task_type: &str, failures, within_ms, cooldown_ms, clear| {
        Req::SetBreaker(pb::SetBreakerRequest {
            task_type: task_type.into(),
            failures,
            within_ms,
            cooldown_ms,
            clear,
        })
    };
    cases.extend([
        bad(breaker("*", 5, 60_000, 30_000, false), "task_type"),
        bad(breaker("*", 0, 0, 0, true), "task_type"),
        bad(breaker("", 5, 60_000, 30_000, false), "task_type"),
        bad(breaker("", 0, 0, 0, true), "task_type"),
        bad(breaker("Bad Type", 5, 60_000, 30_000, false), "task_type"),
        bad(breaker("bad.kind", 0, 60_000, 30_000, false), "failures"),
        bad(
            breaker("bad.kind", 1_000_001, 60_000, 30_000, false),
            "failures",
        ),
        bad(
            breaker("bad.kind", u32::MAX, 60_000, 30_000, false),
            "failures",
        ),
        bad(breaker("bad.kind", 0, 0, 0, false), "failures"),
        bad(breaker("bad.kind", 5, 0, 30_000, false), "within_ms"),
        bad(
            breaker("bad.kind", 5, 86_400_001, 30_000, false),
            "within_ms",
        ),
        bad(breaker("bad.kind", 5, u64::MAX, 30_000, false), "within_ms"),
        bad(breaker("bad.kind", 5, 60_000, 0, false), "cooldown_ms"),
        bad(
            breaker("bad.kind", 5, 60_000, 604_800_001, false),
            "cooldown_ms",
        ),
        bad(
            breaker("bad.kind", 5, 60_000, u64::MAX, false),
            "cooldown_ms",
        ),
        bad(breaker("bad.kind", 5, 60_000, 30_000, true), "clear"),
        bad(breaker("bad.kind", 0, 0, 1, true), "clear"),
        bad(breaker("bad.kind", 1, 0, 0, true), "clear"),
    ]);
    type Edit = fn(&mut pb::RequeueDeadRequest);
    let dead = |field, edit: Edit| {
        let mut r = pb::RequeueDeadRequest::default();
        edit(&mut r);
        bad(Req::RequeueDead(r), field)
    };
    cases.extend([
        dead("all", |_| {}),
        dead("all", |r| r.dry_run = true),
        dead("all", |r| {
            r.all = true;
            r.task_type = "bad.kind".into();
        }),
        dead("task_type", |r| r.task_type = "Bad Type".into()),
        dead("error_code", |r| r.error_code = "e".repeat(65)),
        dead("since_ms", |r| r.since_ms = -1),
        dead("until_ms", |r| r.until_ms = i64::MIN),
        // A page of ids only with a dry run, and within range.
        dead("before_id", |r| {
            r.all = true;
            r.before_id = 5;
        }),
        dead("limit", |r| {
            r.all = true;
            r.limit = 5;
        }),
        dead("limit", |r| {
            r.all = true;
            r.dry_run = true;
            r.limit = 1001;
        }),
        dead("before_id", |r| {
            r.all = true;
            r.dry_run = true;
            r.before_id = -1;
        }),
    ]);
    // PurgeDead: the same filter and page, refused the same way; nothing deleted.
    type PurgeEdit = fn(&mut pb::PurgeDeadRequest);
    let purge = |field, edit: PurgeEdit| {
        let mut r = pb::PurgeDeadRequest::default();
        edit(&mut r);
        bad(Req::PurgeDead(r), field)
    };
    cases.extend([
        purge("all", |_| {}),
        purge("all", |r| r.dry_run = true),
        purge("all", |r| {
            r.all = true;
            r.error_code = "boom".into();
        }),
        purge("task_type", |r| r.task_type = "Bad Type".into()),
        purge("error_code", |r| r.error_code = "e".repeat(65)),
        purge("since_ms", |r| r.since_ms = -1),
        purge("since", |r| {
            r.since_ms = 2_000;
            r.until_ms = 1_000;
        }),
        purge("before_id", |r| {
            r.all = true;
            r.before_id = 5;
        }),
        purge("limit", |r| {
            r.all = true;
            r.dry_run = true;
            r.limit = 1001;
        }),
    ]);
    cases
}

/// T31: unknown ids, ids that cannot be ids and bad waits are refused naming the id or the
/// field, moves the state forbids as FAILED_PRECONDITION; nothing changes. The same call with
/// a good id does change things (positive control).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_and_unknown_ids_are_refused_and_change_nothing() {
    let mut run = run_table("bad-ids", id_cases).await;
    run.assert_unchanged().await;
    run.c
        .requeue(pb::RequeueRequest { id: run.f.dead })
        .await
        .unwrap();
    assert_ne!(digest(&run.db.pool).await.0, run.before.0);
    run.finish().await;
}

/// T31: ListTasks filters out of range are refused naming the field; the edge values that
/// are fine are answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_list_filters_are_refused_by_field_and_edge_values_are_fine() {
    let mut run = run_table("bad-lists", list_cases).await;
    let ok = run
        .c
        .list_tasks(pb::ListTasksRequest {
            limit: 1000,
            statuses: vec![8],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        ok.tasks.len(),
        1,
        "the dead-letter queue lists the one dead task"
    );
    run.assert_unchanged().await;
    run.finish().await;
}

/// T31: Enqueue with a bad type name, bad JSON, numbers out of range or NUL characters is
/// refused naming the field and stores nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_enqueues_are_refused_by_field_and_store_nothing() {
    let mut run = run_table("bad-enqueues", enqueue_cases).await;
    run.assert_unchanged().await;
    run.finish().await;
}

/// T31: pause and resume of bad type names, concurrency and rate limits out of range or of no
/// scope and
/// RequeueDead without a filter or with a bad one are refused naming the field; no policy and
/// no local limit changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_policy_and_dead_letter_calls_are_refused_by_field_and_change_nothing() {
    let mut run = run_table("bad-policy", policy_cases).await;
    run.assert_unchanged().await;
    run.finish().await;
}
/// `(max_concurrency, per_key_concurrency)` of a policy row; `None` when there is none.
async fn limits_of(pool: &PgPool, scope: &str) -> Option<(Option<i32>, Option<i32>)> {
    sqlx::query_as("SELECT max_concurrency, per_key_concurrency FROM policies WHERE scope = $1")
        .bind(scope)
        .fetch_optional(pool)
        .await
        .unwrap()
}

/// Issue 23: a type's per-key limit is set and cleared through SetConcurrency with
/// `per_key` (its reply describing the per-key limit, the type limit untouched, each change
/// audited as policy_set, a type no live agent serves warned about), shows in GetOverview,
/// and a task's concurrency key comes back from Enqueue, GetTask and ListTasks; a keyed task
/// held back by its key says so in GetTask's blockers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_key_limits_round_trip_and_a_task_s_key_shows_on_get_task() {
    let db = TestDb::new().await.unwrap();
    let (agent, addr) = start(&db, "per-key", &[]).await.unwrap();
    let mut c = connect(&addr).await.unwrap();
    let typed = |t: &str| Some(Scope::TaskType(t.into()));
    let set = |scope, limit, unlimited, per_key| pb::SetConcurrencyRequest {
        scope,
        limit,
        unlimited,
        per_key,
    };
    let audited = leasehold_tests::audit_rows(&db.pool).await.unwrap().len();

    // The type limit first: the per-key reply then says nothing of it.
    let r = c
        .set_concurrency(set(typed("email.send"), 5, false, false))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.previous, r.limit), (None, Some(5)));
    let r = c
        .set_concurrency(set(typed("email.send"), 2, false, true))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.previous, r.limit), (None, Some(2)), "{r:?}");
    // The agent serves noop only: applied, with the unserved-type warning.
    assert_eq!(r.warnings.len(), 1, "{r:?}");
    assert!(r.warnings[0].contains("email.send"), "{r:?}");
    assert_eq!(
        limits_of(&db.pool, "email.send").await,
        Some((Some(5), Some(2)))
    );
    // The same limit again changes nothing; then the most there is.
    let r = c
        .set_concurrency(set(typed("email.send"), 2, false, true))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.previous, r.limit), (Some(2), Some(2)));
    let r = c
        .set_concurrency(set(typed("email.send"), 1_000_000, false, true))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.previous, r.limit), (Some(2), Some(1_000_000)));
    // The overview shows it (its cache is at most a second old).
    wait_until(
        "the overview shows the per-key limit",
        WAIT_OVERVIEW,
        || {
            let mut c = c.clone();
            async move {
                let o = c
                    .get_overview(pb::GetOverviewRequest {})
                    .await?
                    .into_inner();
                let t = o.types.iter().find(|t| t.task_type == "email.send");
                Ok(t.is_some_and(|t| t.per_key_limit == Some(1_000_000) && t.limit == Some(5)))
            }
        },
    )
    .await
    .unwrap();
    // Cleared: the type limit stays.
    let r = c
        .set_concurrency(set(typed("email.send"), 0, true, true))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.previous, r.limit), (Some(1_000_000), None));
    assert_eq!(
        limits_of(&db.pool, "email.send").await,
        Some((Some(5), None))
    );
    // A type the agent serves: no warning.
    let r = c
        .set_concurrency(set(typed("noop"), 3, false, true))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.previous, r.limit, r.warnings.len()), (None, Some(3), 0));
    let rows: Vec<(String, String, String)> = leasehold_tests::audit_rows(&db.pool)
        .await
        .unwrap()
        .split_off(audited)
        .into_iter()
        .map(|(_, _, action, target, result)| (action, target, result))
        .collect();
    let row = |target: &str, result: &str| {
        (
            "policy_set".to_string(),
            target.to_string(),
            result.to_string(),
        )
    };
    assert_eq!(
        rows,
        [
            row("policy:email.send", "applied"),
            row("policy:email.send", "applied"),
            row("policy:email.send", "noop"),
            row("policy:email.send", "applied"),
            row("policy:email.send", "applied"),
            row("policy:noop", "applied"),
        ]
    );

    // A task's key: stored as sent, back from Enqueue, GetTask and ListTasks; none is empty.
    let enqueue = |key: &str| pb::EnqueueRequest {
        task_type: "noop".into(),
        delay_ms: 3_600_000,
        concurrency_key: key.into(),
        ..Default::default()
    };
    let keyed = c.enqueue(enqueue("acme")).await.unwrap().into_inner();
    assert_eq!(keyed.task.as_ref().unwrap().concurrency_key, "acme");
    let keyless = c.enqueue(enqueue("")).await.unwrap().into_inner();
    assert_eq!(keyless.task.as_ref().unwrap().concurrency_key, "");
    let got = c
        .get_task(pb::GetTaskRequest { id: keyed.id })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.task.unwrap().concurrency_key, "acme");
    let stored: Option<String> =
        sqlx::query_scalar("SELECT concurrency_key FROM tasks WHERE id = $1")
            .bind(keyless.id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(stored, None, "an empty key is no key");
    let page = c
        .list_tasks(pb::ListTasksRequest::default())
        .await
        .unwrap()
        .into_inner();
    let listed = page.tasks.iter().find(|t| t.id == keyed.id).unwrap();
    assert_eq!(listed.concurrency_key, "acme");

    // Held back by its key: keyed.kind allows 1 running per key, and one with key acme runs
    // (leased by no agent, for an hour).
    c.set_concurrency(set(typed("keyed.kind"), 1, false, true))
        .await
        .unwrap();
    let running = insert_task(
        &db.pool,
        TaskSpec {
            lease_ttl_secs: Some(3600.0),
            ..TaskSpec::new("keyed.kind", "running")
        },
    )
    .await
    .unwrap();
    let waiting = insert_task(&db.pool, TaskSpec::new("keyed.kind", "queued"))
        .await
        .unwrap();
    sqlx::query("UPDATE tasks SET concurrency_key = 'acme' WHERE id = ANY($1)")
        .bind(vec![running, waiting])
        .execute(&db.pool)
        .await
        .unwrap();
    let got = c
        .get_task(pb::GetTaskRequest { id: waiting })
        .await
        .unwrap()
        .into_inner();
    let blocker = got.blockers.iter().find(|b| b.kind == "key_limit");
    assert_eq!(
        blocker.map(|b| b.message.as_str()),
        Some("per-key limit reached: 1/1 running with key \"acme\" (type keyed.kind)"),
        "{got:?}"
    );

    drop(c);
    stop(agent).await.unwrap();
    db.drop_db().await.unwrap();
}

/// `(failures, within_ms, cooldown_ms, state)` of a type's breaker columns; `None` when the
/// type has no policy row.
async fn breaker_of(
    pool: &PgPool,
    scope: &str,
) -> Option<(Option<i32>, Option<i64>, Option<i64>, String)> {
    sqlx::query_as(
        "SELECT breaker_failures, breaker_within_ms, breaker_cooldown_ms, breaker_state
         FROM policies WHERE scope = $1",
    )
    .bind(scope)
    .fetch_optional(pool)
    .await
    .unwrap()
}

/// Issue 23: a type's circuit breaker is set, changed and cleared through SetBreaker (the reply
/// giving the breaker after and before, each change audited as policy_set, a type no live
/// agent serves warned about), shows in GetOverview with its state (an open one with when it
/// half-opens), and an open breaker is GetTask's `breaker` blocker; clearing it closes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breakers_round_trip_and_an_open_one_shows_on_the_overview_and_get_task() {
    let db = TestDb::new().await.unwrap();
    let (agent, addr) = start(&db, "breakers", &[]).await.unwrap();
    let mut c = connect(&addr).await.unwrap();
    let set = |task_type: &str, failures, within_ms, cooldown_ms| pb::SetBreakerRequest {
        task_type: task_type.into(),
        failures,
        within_ms,
        cooldown_ms,
        clear: false,
    };
    let clear = |task_type: &str| pb::SetBreakerRequest {
        task_type: task_type.into(),
        clear: true,
        ..Default::default()
    };
    let wire = |failures, within_ms, cooldown_ms| {
        Some(pb::Breaker {
            failures,
            within_ms,
            cooldown_ms,
        })
    };
    let audited = leasehold_tests::audit_rows(&db.pool).await.unwrap().len();

    let r = c
        .set_breaker(set("email.send", 5, 60_000, 30_000))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.previous, r.breaker), (None, wire(5, 60_000, 30_000)));
    // The agent serves noop only: applied, with the unserved-type warning.
    assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
    assert!(r.warnings[0].contains("email.send"), "{:?}", r.warnings);
    assert_eq!(
        breaker_of(&db.pool, "email.send").await,
        Some((Some(5), Some(60_000), Some(30_000), "closed".into()))
    );
    // The same breaker again changes nothing; then the bounds' far ends.
    let r = c
        .set_breaker(set("email.send", 5, 60_000, 30_000))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.previous, r.breaker);
    let r = c
        .set_breaker(set("email.send", 1_000_000, 86_400_000, 604_800_000))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (r.previous, r.breaker),
        (
            wire(5, 60_000, 30_000),
            wire(1_000_000, 86_400_000, 604_800_000)
        )
    );
    let r = c
        .set_breaker(set("email.send", 3, 1, 1))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.breaker, wire(3, 1, 1));
    let r = c
        .set_breaker(set("email.send", 3, 60_000, 2_000))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.breaker, wire(3, 60_000, 2_000));
    // The overview shows it closed since it was set (the first set; a change keeps the time).
    let overview_breaker = |c: &Client| {
        let mut c = c.clone();
        async move {
            let o = c
                .get_overview(pb::GetOverviewRequest {})
                .await
                .unwrap()
                .into_inner();
            let b = o
                .types
                .iter()
                .find(|t| t.task_type == "email.send")
                .and_then(|t| t.breaker.clone());
            (o.now_ms, b)
        }
    };
    wait_until("the overview shows the breaker", WAIT_OVERVIEW, || {
        let shown = overview_breaker(&c);
        async move {
            let (now_ms, b) = shown.await;
            Ok(b.is_some_and(|b| {
                (
                    b.failures,
                    b.within_ms,
                    b.cooldown_ms,
                    b.state.as_str(),
                    b.until_ms,
                ) == (3, 60_000, 2_000, "closed", 0)
                    && b.since_ms > 0
                    && b.since_ms <= now_ms
            }))
        }
    })
    .await
    .unwrap();

    // Opened (as the leader would, for an hour): the overview says until when, and a waiting
    // task of the type is held back by it.
    sqlx::query(
        "UPDATE policies SET breaker_state = 'open', breaker_since = now(),
             breaker_until = now() + interval '1 hour'
         WHERE scope = 'email.send'",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    wait_until("the overview shows it open", WAIT_OVERVIEW, || {
        let shown = overview_breaker(&c);
        async move {
            let (now_ms, b) = shown.await;
            Ok(b.is_some_and(|b| {
                b.state == "open"
                    && b.since_ms > 0
                    && b.since_ms <= now_ms
                    && b.until_ms > now_ms + 3_500_000
            }))
        }
    })
    .await
    .unwrap();
    let waiting = insert_task(&db.pool, TaskSpec::new("email.send", "queued"))
        .await
        .unwrap();
    let got = c
        .get_task(pb::GetTaskRequest { id: waiting })
        .await
        .unwrap()
        .into_inner();
    let blocker = got.blockers.iter().find(|b| b.kind == "breaker");
    assert!(
        blocker.is_some_and(|b| b
            .message
            .starts_with("circuit breaker open (3 failures within 1m, cooldown 2s)")
            && b.message.ends_with("(type email.send)")),
        "{got:?}"
    );

    // Cleared: the columns go and the breaker closes; clearing again changes nothing.
    let r = c
        .set_breaker(clear("email.send"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.previous, r.breaker), (wire(3, 60_000, 2_000), None));
    assert_eq!(
        breaker_of(&db.pool, "email.send").await,
        Some((None, None, None, "closed".into()))
    );
    let r = c
        .set_breaker(clear("email.send"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.previous, r.breaker), (None, None));
    wait_until("the overview drops the breaker", WAIT_OVERVIEW, || {
        let shown = overview_breaker(&c);
        async move { Ok(shown.await.1.is_none()) }
    })
    .await
    .unwrap();
    // A type the agent serves: no warning.
    let r = c
        .set_breaker(set("noop", 100, 60_000, 30_000))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.previous, r.warnings.len()), (None, 0));

    let rows: Vec<(String, String, String)> = leasehold_tests::audit_rows(&db.pool)
        .await
        .unwrap()
        .split_off(audited)
        .into_iter()
        .map(|(_, _, action, target, result)| (action, target, result))
        .collect();
    let row = |target: &str, result: &str| {
        (
            "policy_set".to_string(),
            target.to_string(),
            result.to_string(),
        )
    };
    assert_eq!(
        rows,
        [
            row("policy:email.send", "applied"),
            row("policy:email.send", "noop"),
            row("policy:email.send", "applied"),
            row("policy:email.send", "applied"),
            row("policy:email.send", "applied"),
            row("policy:email.send", "applied"),
            row("policy:email.send", "noop"),
            row("policy:noop", "applied"),
        ]
    );

    drop(c);
    stop(agent).await.unwrap();
    db.drop_db().await.unwrap();
}

/// How long the overview may take to show a change (its cache is at most a second old).
const WAIT_OVERVIEW: std::time::Duration = std::time::Duration::from_secs(10);

/// ListSuspectLeases (issue 20 item 4): any viewer reads the leases whose renewal is overdue,
/// from the database, with the agent's revoke threshold by default; a threshold or limit out
/// of range is INVALID_ARGUMENT naming the field; a caller without a valid token is refused;
/// nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspect_leases_are_read_by_viewers_and_bad_thresholds_and_limits_are_refused() {
    let db = TestDb::new().await.unwrap();
    // Renewals 300 and 40 s overdue on leases an hour from expiry, so the agent's recovery
    // leaves them alone.
    let mut overdue = Vec::new();
    for secs_ago in [300.0, 40.0] {
        let id = insert_task(&db.pool, TaskSpec::new("bad.kind", "running"))
            .await
            .unwrap();
        sqlx::query(
            "UPDATE tasks SET heartbeat_at = now() - $2::float8 * interval '1 second', \
                 lease_until = now() + interval '1 hour' WHERE id = $1",
        )
        .bind(id)
        .bind(secs_ago)
        .execute(&db.pool)
        .await
        .unwrap();
        overdue.push(id);
    }
    let config = leasehold_tests::fleet::tokens_config(
        "leasehold-suspect",
        &[
            leasehold_tests::fleet::ConfigToken::operator("op", OPERATOR),
            leasehold_tests::fleet::ConfigToken::viewer("viewer", VIEWER),
        ],
    )
    .unwrap();
    let (mut agent, addr) = start(&db, "suspects", &["--config", config.to_str().unwrap()])
        .await
        .unwrap();
    let mut viewer = connect_with(&addr, Some(VIEWER), None).await.unwrap();
    // Renewed (claimed) just now: not overdue under a 30 s threshold.
    let healthy = insert_task(
        &db.pool,
        TaskSpec {
            lease_ttl_secs: Some(3600.0),
            ..TaskSpec::new("bad.kind", "running")
        },
    )
    .await
    .unwrap();
    let before = digest(&db.pool).await;

    let ask = |threshold_ms: i64, limit: u32| pb::ListSuspectLeasesRequest {
        threshold_ms,
        limit,
    };
    // The default threshold is the agent's (3 × its heartbeat, well under 30 s here); the
    // factory's "healthy" row is never renewed either, so it turns overdue with time.
    let default = viewer
        .list_suspect_leases(ask(0, 0))
        .await
        .unwrap()
        .into_inner();
    assert!(
        default.threshold_ms > 0 && default.threshold_ms < 30_000,
        "{default:?}"
    );
    let ids: Vec<i64> = default.leases.iter().map(|l| l.task_id).collect();
    assert!(ids.starts_with(&overdue), "{default:?}");
    let all = viewer
        .list_suspect_leases(ask(30_000, 0))
        .await
        .unwrap()
        .into_inner();
    let ids: Vec<i64> = all.leases.iter().map(|l| l.task_id).collect();
    assert_eq!(
        ids, overdue,
        "oldest renewal first, the healthy one left out"
    );
    assert!(!ids.contains(&healthy));
    assert!(all.threshold_ms == 30_000 && !all.truncated, "{all:?}");
    let db_now: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("SELECT now()")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(
        (db_now.timestamp_millis() - all.now_ms).abs() < 60_000,
        "{all:?}"
    );
    for l in &all.leases {
        assert_eq!(l.owner, leasehold_tests::factory::FACTORY_OWNER);
        assert_eq!(l.task_type, "bad.kind");
        assert!(l.overdue_ms >= 40_000, "{l:?}");
        assert_eq!(l.overdue_ms, all.now_ms - l.heartbeat_at_ms);
    }
    // A limit cuts the list and says so; a longer threshold leaves the newer one out.
    let one = viewer
        .list_suspect_leases(ask(30_000, 1))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (
            one.leases.iter().map(|l| l.task_id).collect::<Vec<_>>(),
            one.truncated
        ),
        (vec![overdue[0]], true)
    );
    let older = viewer
        .list_suspect_leases(ask(200_000, 0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(older.threshold_ms, 200_000);
    assert_eq!(
        older.leases.iter().map(|l| l.task_id).collect::<Vec<_>>(),
        vec![overdue[0]]
    );

    let mut failures = Failures::default();
    for (what, request, field) in [
        ("negative threshold", ask(-1, 0), "threshold_ms"),
        ("most negative threshold", ask(i64::MIN, 0), "threshold_ms"),
        ("threshold above a day", ask(86_400_001, 0), "threshold_ms"),
        ("limit above 10000", ask(0, 10_001), "limit"),
        ("absurd limit", ask(0, u32::MAX), "limit"),
    ] {
        let answer = viewer.list_suspect_leases(request).await;
        failures.check(what, refusal(answer, INVALID, field));
    }
    failures.assert_none();
    let mut stranger = connect_with(&addr, Some("not-a-token-0123456789abcdefgh"), None)
        .await
        .unwrap();
    let r = stranger.list_suspect_leases(ask(0, 0)).await;
    assert_eq!(r.unwrap_err().code(), Code::Unauthenticated);

    assert_eq!(digest(&db.pool).await, before, "a read changes nothing");
    alive(&mut agent, &mut viewer).await.unwrap();
    stop(agent).await.unwrap();
    db.drop_db().await.unwrap();
}
