#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Bad, oversized, malformed and fuzzed gRPC requests against real agents (TESTING.md T30,
//! T31; DESIGN §10: "bad input changes nothing"). Every refusal is checked in the database:
//! `tasks` and `policies` are compared row for row before and after, and the agent must still
//! answer afterwards.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Duration;

use leasehold_proto::v1 as pb;
use leasehold_tests::agent::AgentHandle;
use leasehold_tests::fleet::spawn_agent;
use leasehold_tests::grpc::{Client, agent_address, connect, connect_with};
use leasehold_tests::inspect::{CountedAuditRow, counted_audit_rows, last_audit_id};
use leasehold_tests::{TaskSpec, TestDb, audit_rows, insert_task};
use pb::set_concurrency_request::Scope;
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};
use sqlx::PgPool;
use tonic::Code;
use tonic::codec::CompressionEncoding;

const WAIT: Duration = Duration::from_secs(30);
const OPERATOR: &str = "fuzz-operator-secret-0123456789";
const VIEWER: &str = "fuzz-viewer-secret-0123456789ab";

async fn start(db: &TestDb, name: &str, extra: &[&str]) -> (AgentHandle, String) {
    let agent = spawn_agent("leasehold-agent", &db.url, name, "noop", extra, Vec::new())
        .await
        .unwrap();
    agent.wait_registered(&db.pool, name, WAIT).await.unwrap();
    let addr = agent_address(&db.pool, name, WAIT).await.unwrap();
    (agent, addr)
}

/// Rows of `tasks` (except `skip`) and `policies`, as text.
async fn digest(pool: &PgPool, skip: &[i64]) -> (String, String) {
    leasehold_tests::inspect::state_digest(pool, skip)
        .await
        .unwrap()
}

async fn local_limit(client: &mut Client) -> u32 {
    let mut stream = client
        .watch(pb::WatchRequest {})
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap();
    first.snapshot.unwrap().stats.unwrap().local_limit
}

async fn alive(agent: &mut AgentHandle, client: &mut Client) {
    assert!(agent.is_running(), "the agent is still running");
    client
        .list_agents(pb::ListAgentsRequest {})
        .await
        .expect("the agent still answers");
}

async fn stop(mut agent: AgentHandle) {
    agent.sigterm().unwrap();
    let status = agent.wait_exit(WAIT).await.unwrap();
    assert!(status.success(), "agent exit: {status}");
}

struct Fixture {
    queued: i64,
    dead: i64,
    succeeded: i64,
}

async fn fixture(pool: &PgPool) -> Fixture {
    let queued = insert_task(pool, TaskSpec::new("bad.kind", "queued"))
        .await
        .unwrap();
    let dead = insert_task(pool, TaskSpec::new("bad.kind", "dead"))
        .await
        .unwrap();
    let succeeded = insert_task(pool, TaskSpec::new("bad.kind", "succeeded"))
        .await
        .unwrap();
    insert_task(
        pool,
        TaskSpec {
            lease_ttl_secs: Some(3600.0),
            ..TaskSpec::new("bad.kind", "running")
        },
    )
    .await
    .unwrap();
    insert_task(pool, TaskSpec::new("bad.kind", "cancelled"))
        .await
        .unwrap();
    sqlx::query("INSERT INTO policies (scope, max_concurrency) VALUES ('bad.kind', 4)")
        .execute(pool)
        .await
        .unwrap();
    sqlx::query("UPDATE policies SET max_concurrency = 500 WHERE scope = '*'")
        .execute(pool)
        .await
        .unwrap();
    Fixture {
        queued,
        dead,
        succeeded,
    }
}

/// The call failed with `code` and a message naming `field`.
fn refused<T: std::fmt::Debug>(
    what: &str,
    r: Result<tonic::Response<T>, tonic::Status>,
    codes: &[Code],
    field: &str,
) {
    let status = match r {
        Ok(response) => panic!("{what}: the call succeeded: {response:?}"),
        Err(status) => status,
    };
    assert!(
        codes.contains(&status.code()),
        "{what}: {:?} not in {codes:?}: {}",
        status.code(),
        status.message()
    );
    assert!(
        status.message().contains(field),
        "{what}: the message names {field:?}: {}",
        status.message()
    );
}

const INVALID: &[Code] = &[Code::InvalidArgument];

fn enqueue(task_type: &str) -> pb::EnqueueRequest {
    pb::EnqueueRequest {
        task_type: task_type.into(),
        ..Default::default()
    }
}

fn set_conc(scope: Option<Scope>, limit: u32, unlimited: bool) -> pb::SetConcurrencyRequest {
    pb::SetConcurrencyRequest {
        scope,
        limit,
        unlimited,
    }
}

/// T31: unknown ids, bad ids, filters, names, numbers and JSON, each refused with the right
/// code and a message naming the field; nothing changed in `tasks` or `policies`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_ids_filters_names_and_numbers_are_refused_by_field_and_change_nothing() {
    let db = TestDb::new().await.unwrap();
    let f = fixture(&db.pool).await;
    let (mut agent, addr) = start(&db, "bad-fields", &[]).await;
    let mut c = connect(&addr).await.unwrap();
    let limit_before = local_limit(&mut c).await;
    let before = digest(&db.pool, &[]).await;

    // Unknown ids.
    let unknown = 9_000_000_000_i64;
    refused(
        "get unknown",
        c.get_task(pb::GetTaskRequest { id: unknown }).await,
        &[Code::NotFound],
        "9000000000",
    );
    refused(
        "cancel unknown",
        c.cancel(pb::CancelRequest {
            id: unknown,
            wait: true,
            wait_ms: 0,
        })
        .await,
        &[Code::NotFound],
        "9000000000",
    );
    refused(
        "requeue unknown",
        c.requeue(pb::RequeueRequest { id: unknown }).await,
        &[Code::NotFound],
        "9000000000",
    );
    // Ids that cannot be ids.
    for id in [0, -1, i64::MIN] {
        refused(
            "get",
            c.get_task(pb::GetTaskRequest { id }).await,
            INVALID,
            "id",
        );
        refused(
            "cancel",
            c.cancel(pb::CancelRequest {
                id,
                ..Default::default()
            })
            .await,
            INVALID,
            "id",
        );
        refused(
            "requeue",
            c.requeue(pb::RequeueRequest { id }).await,
            INVALID,
            "id",
        );
    }
    // A bad wait is refused before the (valid) task is touched.
    for wait_ms in [-1, i64::MIN, 301_000, i64::MAX] {
        refused(
            "cancel wait_ms",
            c.cancel(pb::CancelRequest {
                id: f.queued,
                wait: true,
                wait_ms,
            })
            .await,
            INVALID,
            "wait_ms",
        );
    }
    // Requeue of a task that is not finished.
    refused(
        "requeue queued",
        c.requeue(pb::RequeueRequest { id: f.queued }).await,
        &[Code::FailedPrecondition],
        "",
    );
    // Cancel of a finished task.
    refused(
        "cancel succeeded",
        c.cancel(pb::CancelRequest {
            id: f.succeeded,
            ..Default::default()
        })
        .await,
        &[Code::FailedPrecondition],
        "",
    );

    // ListTasks filters.
    let bad_lists: Vec<(pb::ListTasksRequest, &str)> = vec![
        (
            pb::ListTasksRequest {
                statuses: vec![99],
                ..Default::default()
            },
            "statuses",
        ),
        (
            pb::ListTasksRequest {
                statuses: vec![0],
                ..Default::default()
            },
            "statuses",
        ),
        (
            pb::ListTasksRequest {
                statuses: vec![1, -3],
                ..Default::default()
            },
            "statuses",
        ),
        (
            pb::ListTasksRequest {
                task_type: "Bad Type".into(),
                ..Default::default()
            },
            "task_type",
        ),
        (
            pb::ListTasksRequest {
                task_type: "x".repeat(100),
                ..Default::default()
            },
            "task_type",
        ),
        (
            pb::ListTasksRequest {
                task_type: "a\u{0}b".into(),
                ..Default::default()
            },
            "task_type",
        ),
        (
            pb::ListTasksRequest {
                error_code: "e".repeat(65),
                ..Default::default()
            },
            "error_code",
        ),
        (
            pb::ListTasksRequest {
                error_code: "a\u{1b}[2Jb".into(),
                ..Default::default()
            },
            "error_code",
        ),
        (
            pb::ListTasksRequest {
                since_ms: -1,
                ..Default::default()
            },
            "since_ms",
        ),
        (
            pb::ListTasksRequest {
                since_ms: i64::MAX,
                ..Default::default()
            },
            "since_ms",
        ),
        (
            pb::ListTasksRequest {
                limit: 5000,
                ..Default::default()
            },
            "limit",
        ),
        (
            pb::ListTasksRequest {
                limit: u32::MAX,
                ..Default::default()
            },
            "limit",
        ),
        (
            pb::ListTasksRequest {
                before_id: -1,
                ..Default::default()
            },
            "before_id",
        ),
        (
            pb::ListTasksRequest {
                text: "t".repeat(201),
                ..Default::default()
            },
            "text",
        ),
    ];
    for (r, field) in bad_lists {
        let what = format!("list {r:?}");
        let what = what.chars().take(200).collect::<String>();
        refused(&what, c.list_tasks(r).await, INVALID, field);
    }
    // Edge values that are fine.
    let ok = c
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

    // Enqueue: names, JSON, numbers.
    for name in [
        "Bad Type",
        "",
        "x".repeat(65).as_str(),
        "-lead",
        "é",
        "a b",
        "a\u{0}",
        "a\nb",
    ] {
        refused(
            "enqueue type",
            c.enqueue(enqueue(name)).await,
            INVALID,
            "task_type",
        );
    }
    let bad_enqueues: Vec<(pb::EnqueueRequest, &str)> = vec![
        (
            pb::EnqueueRequest {
                payload_json: "{not json".into(),
                ..enqueue("bad.kind")
            },
            "payload_json",
        ),
        (
            pb::EnqueueRequest {
                payload_json: "{\"a\":1} trailing".into(),
                ..enqueue("bad.kind")
            },
            "payload_json",
        ),
        (
            pb::EnqueueRequest {
                payload_json: "\"\\ud800\"".into(),
                ..enqueue("bad.kind")
            },
            "payload_json",
        ),
        (
            pb::EnqueueRequest {
                payload_json: format!("{}1{}", "[".repeat(5000), "]".repeat(5000)),
                ..enqueue("bad.kind")
            },
            "payload_json",
        ),
        (
            pb::EnqueueRequest {
                priority: 40_000,
                ..enqueue("bad.kind")
            },
            "priority",
        ),
        (
            pb::EnqueueRequest {
                priority: -32_769,
                ..enqueue("bad.kind")
            },
            "priority",
        ),
        (
            pb::EnqueueRequest {
                priority: i32::MIN,
                ..enqueue("bad.kind")
            },
            "priority",
        ),
        (
            pb::EnqueueRequest {
                delay_ms: -1,
                ..enqueue("bad.kind")
            },
            "delay_ms",
        ),
        (
            pb::EnqueueRequest {
                timeout_ms: -5,
                ..enqueue("bad.kind")
            },
            "timeout_ms",
        ),
        (
            pb::EnqueueRequest {
                deadline_at_ms: -5,
                ..enqueue("bad.kind")
            },
            "deadline_at_ms",
        ),
        (
            pb::EnqueueRequest {
                deadline_at_ms: i64::MAX,
                ..enqueue("bad.kind")
            },
            "deadline_at_ms",
        ),
        (
            pb::EnqueueRequest {
                max_attempts: -1,
                ..enqueue("bad.kind")
            },
            "max_attempts",
        ),
        (
            pb::EnqueueRequest {
                max_attempts: 1_000_000,
                ..enqueue("bad.kind")
            },
            "max_attempts",
        ),
        (
            pb::EnqueueRequest {
                delay_ms: i64::MAX,
                ..enqueue("bad.kind")
            },
            "delay",
        ),
        (
            pb::EnqueueRequest {
                timeout_ms: i64::MAX,
                ..enqueue("bad.kind")
            },
            "timeout",
        ),
        (
            pb::EnqueueRequest {
                idempotency_key: "k".repeat(300),
                ..enqueue("bad.kind")
            },
            "idempotency_key",
        ),
    ];
    for (r, field) in bad_enqueues {
        let what = format!("enqueue {field}");
        refused(&what, c.enqueue(r).await, INVALID, field);
    }
    // NUL characters: valid UTF-8 and valid JSON, but PostgreSQL text and jsonb cannot hold
    // them. Refused as bad input, not a database failure.
    let nul_enqueues: Vec<(pb::EnqueueRequest, &str)> = vec![
        (
            pb::EnqueueRequest {
                payload_json: "{\"a\":\"\\u0000\"}".into(),
                ..enqueue("bad.kind")
            },
            "payload",
        ),
        (
            pb::EnqueueRequest {
                payload_json: "{\"\\u0000\":1}".into(),
                ..enqueue("bad.kind")
            },
            "payload",
        ),
        (
            pb::EnqueueRequest {
                idempotency_key: "k\u{0}".into(),
                ..enqueue("bad.kind")
            },
            "idempotency_key",
        ),
    ];
    for (r, field) in nul_enqueues {
        let what = format!("enqueue NUL in {field}: {r:?}");
        refused(&what, c.enqueue(r).await, INVALID, field);
    }
    refused(
        "list NUL in text",
        c.list_tasks(pb::ListTasksRequest {
            text: "a\u{0}b".into(),
            ..Default::default()
        })
        .await,
        INVALID,
        "text",
    );

    // Pause and resume: names.
    for name in ["Bad Type", "", "x".repeat(100).as_str(), "\u{202e}rtl"] {
        refused(
            "pause",
            c.pause_type(pb::PauseTypeRequest {
                task_type: name.into(),
            })
            .await,
            INVALID,
            "task_type",
        );
        refused(
            "resume",
            c.resume_type(pb::ResumeTypeRequest {
                task_type: name.into(),
            })
            .await,
            INVALID,
            "task_type",
        );
    }

    // SetConcurrency.
    let bad_limits: Vec<(pb::SetConcurrencyRequest, &str)> = vec![
        (set_conc(Some(Scope::AgentLocal(true)), 0, false), "limit"),
        (
            set_conc(Some(Scope::AgentLocal(true)), 100_001, false),
            "limit",
        ),
        (
            set_conc(Some(Scope::AgentLocal(true)), u32::MAX, false),
            "limit",
        ),
        (set_conc(Some(Scope::AgentLocal(true)), 0, true), "limit"),
        (set_conc(Some(Scope::AgentLocal(false)), 5, false), "scope"),
        (set_conc(Some(Scope::Global(true)), 5, true), "limit"),
        (set_conc(Some(Scope::Global(false)), 5, false), "scope"),
        (
            set_conc(Some(Scope::Global(true)), u32::MAX, false),
            "max_concurrency",
        ),
        (
            set_conc(Some(Scope::TaskType("bad.kind".into())), 3, true),
            "limit",
        ),
        (
            set_conc(Some(Scope::TaskType("Bad Type".into())), 3, false),
            "task_type",
        ),
        (
            set_conc(Some(Scope::TaskType(String::new())), 3, false),
            "task_type",
        ),
        (set_conc(None, 3, false), "scope"),
        (set_conc(None, 0, true), "scope"),
    ];
    for (r, field) in bad_limits {
        let what = format!("set_concurrency {r:?}");
        refused(&what, c.set_concurrency(r).await, INVALID, field);
    }

    // RequeueDead.
    let bad_dead: Vec<(pb::RequeueDeadRequest, &str)> = vec![
        (pb::RequeueDeadRequest::default(), "all"),
        (
            pb::RequeueDeadRequest {
                dry_run: true,
                ..Default::default()
            },
            "all",
        ),
        (
            pb::RequeueDeadRequest {
                all: true,
                task_type: "bad.kind".into(),
                ..Default::default()
            },
            "all",
        ),
        (
            pb::RequeueDeadRequest {
                task_type: "Bad Type".into(),
                ..Default::default()
            },
            "task_type",
        ),
        (
            pb::RequeueDeadRequest {
                error_code: "e".repeat(65),
                ..Default::default()
            },
            "error_code",
        ),
        (
            pb::RequeueDeadRequest {
                since_ms: -1,
                ..Default::default()
            },
            "since_ms",
        ),
        (
            pb::RequeueDeadRequest {
                until_ms: i64::MIN,
                ..Default::default()
            },
            "until_ms",
        ),
    ];
    for (r, field) in bad_dead {
        let what = format!("requeue_dead {r:?}");
        refused(&what, c.requeue_dead(r).await, INVALID, field);
    }

    assert_eq!(
        digest(&db.pool, &[]).await,
        before,
        "tasks and policies unchanged"
    );
    assert_eq!(
        local_limit(&mut c).await,
        limit_before,
        "local limit unchanged"
    );
    let applied: i64 =
        sqlx::query_scalar("SELECT count(*) FROM audit_log WHERE result = 'applied'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(applied, 0, "no refused call was recorded as applied");
    // Positive control: the same calls with good values do change things.
    c.requeue(pb::RequeueRequest { id: f.dead }).await.unwrap();
    assert_ne!(digest(&db.pool, &[]).await.0, before.0);
    alive(&mut agent, &mut c).await;
    drop(c);
    stop(agent).await;
    db.drop_db().await.unwrap();
}

fn vm_kib(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(key))
        .unwrap_or_else(|| panic!("{key} in /proc/{pid}/status"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// T30: payloads above the agent's limit, messages above 4 MiB and gzip bombs are refused with
/// clear errors, store nothing, and the bomb does not blow up the agent's memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_payloads_messages_and_compressed_bombs_are_refused_without_memory_blowup() {
    let db = TestDb::new().await.unwrap();
    fixture(&db.pool).await;
    let (mut agent, addr) = start(&db, "bad-sizes", &[]).await;
    let mut c = connect(&addr)
        .await
        .unwrap()
        .max_encoding_message_size(usize::MAX);
    let before = digest(&db.pool, &[]).await;
    let rows = |pool: PgPool| async move {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks WHERE task_type = 'big.kind'")
            .fetch_one(&pool)
            .await
            .unwrap();
        n
    };

    // A payload above the agent's limit (1 MiB) in a message below 4 MiB.
    let two_mib = format!("{{\"pad\":\"{}\"}}", "a".repeat(2 << 20));
    let r = c
        .enqueue(pb::EnqueueRequest {
            payload_json: two_mib.clone(),
            ..enqueue("big.kind")
        })
        .await;
    refused(
        "2 MiB payload",
        r,
        &[Code::InvalidArgument, Code::ResourceExhausted],
        "payload",
    );

    // A message above MAX_MESSAGE_BYTES.
    let five_mib = format!("{{\"pad\":\"{}\"}}", "a".repeat(5 << 20));
    assert!(five_mib.len() > leasehold_proto::MAX_MESSAGE_BYTES);
    let r = c
        .enqueue(pb::EnqueueRequest {
            payload_json: five_mib,
            ..enqueue("big.kind")
        })
        .await;
    refused("5 MiB message", r, &[Code::ResourceExhausted], "");

    // The same 2 MiB payload compressed: a small message on the wire, refused after
    // decompression by the payload limit.
    let mut gz = c.clone().send_compressed(CompressionEncoding::Gzip);
    let r = gz
        .enqueue(pb::EnqueueRequest {
            payload_json: two_mib,
            ..enqueue("big.kind")
        })
        .await;
    refused(
        "2 MiB payload, gzip",
        r,
        &[Code::InvalidArgument, Code::ResourceExhausted],
        "payload",
    );

    // Bombs: 64 MiB of JSON whitespace around `{}` compress to ~64 KiB.
    let pid = agent.pid();
    let hwm_before = vm_kib(pid, "VmHWM:");
    let rss_before = vm_kib(pid, "VmRSS:");
    let bomb = format!("{}{{}}", " ".repeat(64 << 20));
    for _ in 0..3 {
        let r = gz
            .enqueue(pb::EnqueueRequest {
                payload_json: bomb.clone(),
                ..enqueue("big.kind")
            })
            .await;
        refused("gzip bomb", r, &[Code::ResourceExhausted], "");
    }
    let hwm_after = vm_kib(pid, "VmHWM:");
    let rss_after = vm_kib(pid, "VmRSS:");
    eprintln!(
        "agent memory: VmRSS {rss_before} -> {rss_after} KiB, VmHWM {hwm_before} -> {hwm_after} KiB"
    );
    assert!(
        hwm_after.saturating_sub(hwm_before) < 24 * 1024,
        "three 64 MiB bombs raised the agent's peak RSS by {} KiB",
        hwm_after - hwm_before
    );

    // Below every limit it works (positive control): a payload just under 1 MiB, gzipped.
    let fits = format!("{{\"pad\":\"{}\"}}", "b".repeat((1 << 20) - 64));
    gz.enqueue(pb::EnqueueRequest {
        payload_json: fits,
        ..enqueue("big.kind")
    })
    .await
    .unwrap();
    assert_eq!(
        rows(db.pool.clone()).await,
        1,
        "only the payload that fits was stored"
    );
    let after = digest(&db.pool, &[]).await;
    assert_eq!(after.1, before.1, "policies unchanged");
    alive(&mut agent, &mut c).await;

    // The answer direction: a page of big payloads must not break ListTasks.
    for _ in 0..6 {
        insert_task(
            &db.pool,
            TaskSpec::new("big.kind", "dead")
                .payload(serde_json::json!({ "pad": "c".repeat(1000 * 1000) })),
        )
        .await
        .unwrap();
    }
    let mut seen = 0;
    let mut before_id = 0;
    loop {
        let page = c
            .list_tasks(pb::ListTasksRequest {
                statuses: vec![pb::TaskStatus::Dead as i32],
                task_type: "big.kind".into(),
                before_id,
                ..Default::default()
            })
            .await
            .expect("a page of big tasks fits in a message (or is cut short with a cursor)")
            .into_inner();
        seen += page.tasks.len();
        if page.next_before_id == 0 {
            break;
        }
        assert!(!page.tasks.is_empty(), "a page with a cursor holds tasks");
        before_id = page.next_before_id;
    }
    assert_eq!(seen, 6, "every big dead task is listed across the pages");
    alive(&mut agent, &mut c).await;
    drop((c, gz));
    stop(agent).await;
    db.drop_db().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// Fuzzing
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq)]
enum Who {
    Operator,
    Viewer,
    Nobody,
    Stranger,
}

#[derive(Debug, Clone)]
enum Call {
    Enqueue(pb::EnqueueRequest),
    List(pb::ListTasksRequest),
    SetConcurrency(pb::SetConcurrencyRequest),
    RequeueDead(pb::RequeueDeadRequest),
    Cancel(pb::CancelRequest),
    Requeue(pb::RequeueRequest),
    Get(pb::GetTaskRequest),
    Pause(pb::PauseTypeRequest),
}

impl Call {
    fn is_action(&self) -> bool {
        !matches!(self, Call::List(_) | Call::Get(_))
    }

    /// The audit action of a call (`None` for reads).
    fn audit_action(&self) -> Option<&'static str> {
        Some(match self {
            Call::List(_) | Call::Get(_) => return None,
            Call::Enqueue(_) => "enqueue",
            Call::SetConcurrency(pb::SetConcurrencyRequest {
                scope: Some(Scope::AgentLocal(_)),
                ..
            }) => "set_concurrency",
            Call::SetConcurrency(_) | Call::Pause(_) => "policy_set",
            Call::RequeueDead(_) => "requeue_dead",
            Call::Cancel(_) => "cancel",
            Call::Requeue(_) => "requeue",
        })
    }
}

/// The agent's window of aggregated denials (DESIGN §10, issue 19: one row per peer address,
/// actor and action per minute).
const DENIAL_WINDOW: Duration = Duration::from_secs(60);

/// The refused calls of one (actor, action) key (every fuzz call comes from 127.0.0.1).
#[derive(Debug)]
struct Denied {
    /// Calls refused.
    calls: i64,
    /// When the first was sent: its window closes no earlier than a minute later.
    first_sent: std::time::Instant,
    /// False once the calls may have spanned more than one window (a slow run): then only
    /// the sum of the counts is checked.
    one_window: bool,
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-z0-9][a-z0-9_.:-]{0,70}",
        2 => any::<String>(),
        2 => "[\\x00-\\x1f\\x7f\\u{80}-\\u{9f}\\u{200b}-\\u{200f}\\u{202a}-\\u{202e}a-z ]{0,24}",
        1 => Just(String::new()),
        1 => prop::sample::select(vec![
            "noop", "bad.kind", "Bad Type", "\u{0}", "a\u{0}b", "\u{202e}evil", "\u{1b}[2J",
            "ümlaut", " ", "*", "%", "_", "'; DROP TABLE tasks; --", "\u{feff}noop",
        ])
        .prop_map(String::from),
        1 => (1usize..400).prop_map(|n| "y".repeat(n)),
    ]
}

fn payload() -> impl Strategy<Value = String> {
    prop_oneof![
        1 => Just(String::new()),
        1 => Just("{}".to_string()),
        1 => prop::sample::select(vec![
            "null", "[1,2,3]", " \t\n{} ", "\"\\ud800\"", "1e999", "-0", "{\"a\":\"\\u0000\"}",
            "{\"\\u0000\":1}", "{\"a\":1,\"a\":2}", "\"\u{0}\"", "{\"ms\": 1}",
        ])
        .prop_map(String::from),
        2 => text(),
        2 => text().prop_map(|s| serde_json::json!({ "s": s }).to_string()),
        1 => text().prop_map(|s| serde_json::json!({ s: [1, {"k": null}] }).to_string()),
        1 => (1usize..300).prop_map(|d| format!("{}0{}", "[".repeat(d), "]".repeat(d))),
    ]
}

fn int64() -> impl Strategy<Value = i64> {
    prop_oneof![
        2 => Just(0i64),
        1 => prop::sample::select(vec![
            -1i64, 1, i64::MAX, i64::MIN, 253_402_300_799_999, 253_402_300_800_000,
            7 * 24 * 3600 * 1000 + 1, 1_700_000_000_000, 4_102_444_800_000,
        ]),
        1 => 0..100_000i64,
        2 => any::<i64>(),
    ]
}

fn int32() -> impl Strategy<Value = i32> {
    prop_oneof![
        2 => Just(0i32),
        1 => prop::sample::select(vec![-1i32, 1, 1000, 1001, 32_767, 32_768, -32_768, -32_769, 40_000, i32::MAX, i32::MIN]),
        2 => any::<i32>(),
    ]
}

fn uint32() -> impl Strategy<Value = u32> {
    prop_oneof![
        2 => Just(0u32),
        1 => prop::sample::select(vec![1u32, 2, 1000, 1001, 100_000, 100_001, 1_000_000, 1_000_001, u32::MAX]),
        2 => any::<u32>(),
    ]
}

fn status_numbers() -> impl Strategy<Value = Vec<i32>> {
    prop::collection::vec(
        prop_oneof![3 => 1i32..=8, 1 => any::<i32>(), 1 => Just(0)],
        0..4,
    )
}

fn id() -> impl Strategy<Value = i64> {
    prop_oneof![3 => 1i64..12, 2 => int64()]
}

/// A valid Enqueue with at most one field replaced by a random value, so the fuzz reaches the
/// store and not only the first validation.
fn near_valid_enqueue() -> impl Strategy<Value = Call> {
    let base = (
        prop::sample::select(vec!["noop", "fuzz.kind", "bad.kind", "a", "z9_.:-"]),
        prop_oneof![
            Just("{}".to_string()),
            (0u32..50).prop_map(|ms| format!("{{\"ms\":{ms}}}"))
        ],
        -5i32..5,
        prop::option::of("[a-z0-9]{1,12}"),
    );
    (base, 0usize..9, text(), payload(), int64(), int32()).prop_map(
        |((task_type, payload_json, priority, key), field, s, p, n, i)| {
            let mut r = pb::EnqueueRequest {
                task_type: task_type.to_string(),
                payload_json,
                priority,
                idempotency_key: key.unwrap_or_default(),
                ..Default::default()
            };
            match field {
                0 => r.task_type = s,
                1 => r.payload_json = p,
                2 => r.priority = i,
                3 => r.delay_ms = n,
                4 => r.max_attempts = i,
                5 => r.idempotency_key = s,
                6 => r.deadline_at_ms = n,
                7 => r.timeout_ms = n,
                _ => {}
            }
            Call::Enqueue(r)
        },
    )
}

/// A valid ListTasks with at most one field replaced by a random value.
fn near_valid_list() -> impl Strategy<Value = Call> {
    (0usize..8, text(), int64(), uint32(), status_numbers()).prop_map(|(field, s, n, u, st)| {
        let mut r = pb::ListTasksRequest {
            limit: 10,
            ..Default::default()
        };
        match field {
            0 => r.statuses = st,
            1 => r.task_type = s,
            2 => r.text = s,
            3 => r.before_id = n,
            4 => r.limit = u,
            5 => r.error_code = s,
            6 => r.since_ms = n,
            _ => {}
        }
        Call::List(r)
    })
}

fn call() -> impl Strategy<Value = Call> {
    let enqueue = (
        (text(), payload(), int32(), int64()),
        (int32(), text(), int64(), int64()),
    )
        .prop_map(
            |(
                (task_type, payload_json, priority, delay_ms),
                (max_attempts, key, deadline_at_ms, timeout_ms),
            )| {
                Call::Enqueue(pb::EnqueueRequest {
                    task_type,
                    payload_json,
                    priority,
                    delay_ms,
                    max_attempts,
                    idempotency_key: key,
                    deadline_at_ms,
                    timeout_ms,
                })
            },
        );
    let list = (
        status_numbers(),
        text(),
        text(),
        int64(),
        uint32(),
        text(),
        int64(),
    )
        .prop_map(
            |(statuses, task_type, text, before_id, limit, error_code, since_ms)| {
                Call::List(pb::ListTasksRequest {
                    statuses,
                    task_type,
                    text,
                    before_id,
                    limit,
                    error_code,
                    since_ms,
                })
            },
        );
    let scope = prop_oneof![
        1 => Just(None),
        2 => any::<bool>().prop_map(|b| Some(Scope::Global(b))),
        2 => any::<bool>().prop_map(|b| Some(Scope::AgentLocal(b))),
        3 => text().prop_map(|t| Some(Scope::TaskType(t))),
    ];
    let set = (scope, uint32(), any::<bool>()).prop_map(|(scope, limit, unlimited)| {
        Call::SetConcurrency(pb::SetConcurrencyRequest {
            scope,
            limit,
            unlimited,
        })
    });
    let dead = (
        (text(), text(), int64(), int64()),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |((task_type, error_code, since_ms, until_ms), dry_run, all)| {
                Call::RequeueDead(pb::RequeueDeadRequest {
                    task_type,
                    error_code,
                    since_ms,
                    until_ms,
                    dry_run,
                    all,
                })
            },
        );
    // A waiting Cancel waits at most half a second, so a case never takes long.
    let cancel = (
        id(),
        any::<bool>(),
        prop_oneof![
            Just(0i64),
            Just(-1),
            1..500i64,
            Just(i64::MAX),
            Just(i64::MIN)
        ],
    )
        .prop_map(|(id, wait, wait_ms)| {
            let wait_ms = if wait && wait_ms == 0 { 200 } else { wait_ms };
            Call::Cancel(pb::CancelRequest { id, wait, wait_ms })
        });
    prop_oneof![
        2 => enqueue,
        5 => near_valid_enqueue(),
        1 => list,
        3 => near_valid_list(),
        3 => set,
        2 => dead,
        2 => cancel,
        1 => id().prop_map(|id| Call::Requeue(pb::RequeueRequest { id })),
        1 => id().prop_map(|id| Call::Get(pb::GetTaskRequest { id })),
        1 => text().prop_map(|task_type| Call::Pause(pb::PauseTypeRequest { task_type })),
    ]
}

fn who() -> impl Strategy<Value = (Who, String)> {
    prop_oneof![
        6 => Just((Who::Operator, OPERATOR.to_string())),
        2 => Just((Who::Viewer, VIEWER.to_string())),
        1 => Just((Who::Nobody, String::new())),
        1 => "[!-~]{0,40}".prop_map(|t| (Who::Stranger, t)),
    ]
}

/// What one call answered: a code, and the id of a task it created.
async fn send(client: &mut Client, call: Call) -> (Code, String, Option<i64>) {
    fn done<T>(r: Result<tonic::Response<T>, tonic::Status>) -> (Code, String, Option<T>) {
        match r {
            Ok(r) => (Code::Ok, String::new(), Some(r.into_inner())),
            Err(s) => (s.code(), s.message().to_string(), None),
        }
    }
    match call {
        Call::Enqueue(r) => {
            let (code, message, out) = done(client.enqueue(r).await);
            (code, message, out.map(|o| o.id))
        }
        Call::List(r) => {
            let (c, m, _) = done(client.list_tasks(r).await);
            (c, m, None)
        }
        Call::SetConcurrency(r) => {
            let (c, m, _) = done(client.set_concurrency(r).await);
            (c, m, None)
        }
        Call::RequeueDead(r) => {
            let (c, m, _) = done(client.requeue_dead(r).await);
            (c, m, None)
        }
        Call::Cancel(r) => {
            let (c, m, _) = done(client.cancel(r).await);
            (c, m, None)
        }
        Call::Requeue(r) => {
            let (c, m, _) = done(client.requeue(r).await);
            (c, m, None)
        }
        Call::Get(r) => {
            let (c, m, _) = done(client.get_task(r).await);
            (c, m, None)
        }
        Call::Pause(r) => {
            let (c, m, _) = done(client.pause_type(r).await);
            (c, m, None)
        }
    }
}

struct FuzzState {
    db: TestDb,
    addr: String,
    op: Client,
    /// Tasks created by accepted Enqueue calls (the agent may run them at any time).
    created: Vec<i64>,
    calls: usize,
    accepted: usize,
    by_code: std::collections::BTreeMap<String, usize>,
    /// Per (actor, action): the denied calls made.
    denied: BTreeMap<(String, String), Denied>,
}

async fn one_case(
    state: &mut FuzzState,
    who: Who,
    token: String,
    call: Call,
) -> Result<(), TestCaseError> {
    let pool = state.db.pool.clone();
    let local = matches!(
        call,
        Call::SetConcurrency(pb::SetConcurrencyRequest {
            scope: Some(Scope::AgentLocal(_)),
            ..
        })
    );
    let limit_before = if local {
        Some(local_limit(&mut state.op).await)
    } else {
        None
    };
    let before = digest(&pool, &state.created).await;
    let mark = last_audit_id(&pool).await.unwrap();
    let token = (who != Who::Nobody).then_some(token);
    let mut client = connect_with(&state.addr, token.as_deref(), None)
        .await
        .map_err(|e| TestCaseError::fail(format!("connect: {e:#}")))?;
    let is_action = call.is_action();
    let action = call.audit_action();
    let what = format!("{who:?} {call:?}");
    let what: String = what.chars().take(600).collect();
    let sent = std::time::Instant::now();
    let (code, message, created) = send(&mut client, call).await;
    state.calls += 1;
    *state.by_code.entry(format!("{code:?}")).or_default() += 1;
    let allowed: &[Code] = match (who, is_action) {
        (Who::Nobody | Who::Stranger, _) => &[Code::Unauthenticated],
        (Who::Viewer, true) => &[Code::PermissionDenied],
        _ => &[
            Code::Ok,
            Code::InvalidArgument,
            Code::NotFound,
            Code::FailedPrecondition,
            Code::ResourceExhausted,
        ],
    };
    prop_assert!(
        allowed.contains(&code),
        "{what}: answered {code:?} ({message}), allowed {allowed:?}"
    );
    let rows = counted_audit_rows(&pool, mark).await.unwrap();
    // Denied calls are aggregated: the call's own key is checked below; a denied row of
    // another key is the counted rest of an older window, which closes a minute after its
    // first call at the earliest.
    let key = action.map(|a| {
        let actor = if who == Who::Viewer {
            "fuzz-viewer"
        } else {
            "unauthenticated"
        };
        (actor.to_string(), a.to_string())
    });
    let denied_now = is_action && matches!(code, Code::Unauthenticated | Code::PermissionDenied);
    for r in rows.iter().filter(|r| r.result == "denied") {
        let k = (r.actor.clone(), r.action.clone());
        if denied_now && key.as_ref() == Some(&k) {
            continue;
        }
        let Some(d) = state.denied.get_mut(&k) else {
            return Err(TestCaseError::fail(format!(
                "{what}: a denied row of a key never denied: {r:?}"
            )));
        };
        prop_assert!(
            d.first_sent.elapsed() >= DENIAL_WINDOW,
            "{what}: the counted row of a window not a minute old: {r:?}"
        );
        d.one_window = false;
    }
    let audited = i64::try_from(rows.iter().filter(|r| r.result != "denied").count()).unwrap();
    if code == Code::Ok {
        state.accepted += 1;
        if let Some(id) = created
            && !state.created.contains(&id)
        {
            state.created.push(id);
        }
        prop_assert_eq!(
            audited,
            i64::from(is_action),
            "{}: audit rows of an accepted call",
            what
        );
    } else {
        let after = digest(&pool, &state.created).await;
        prop_assert!(
            after.0 == before.0,
            "{what}: refused ({code:?} {message}) but tasks changed"
        );
        prop_assert!(
            after.1 == before.1,
            "{what}: refused ({code:?} {message}) but policies changed"
        );
        if let Some(limit) = limit_before {
            let now = local_limit(&mut state.op).await;
            prop_assert_eq!(now, limit, "{}: refused but the local limit changed", what);
        }
        if denied_now {
            let key = key.unwrap();
            prop_assert_eq!(audited, 0, "{}: a denied call audits nothing else", what);
            let own: Vec<&CountedAuditRow> = rows
                .iter()
                .filter(|r| r.result == "denied" && (&r.actor, &r.action) == (&key.0, &key.1))
                .collect();
            match state.denied.get_mut(&key) {
                None => {
                    // The first denial of its key: one row at once, for one call, naming the
                    // caller's connection.
                    prop_assert!(
                        own.len() == 1
                            && own[0].count == 1
                            && own[0].role == "viewer"
                            && own[0]
                                .peer
                                .as_deref()
                                .and_then(|p| p.strip_prefix("127.0.0.1:"))
                                .is_some_and(|port| port.parse::<u16>().is_ok()),
                        "{what}: the first denied {key:?} is one row at once: {own:?}"
                    );
                    state.denied.insert(
                        key,
                        Denied {
                            calls: 1,
                            first_sent: sent,
                            one_window: true,
                        },
                    );
                }
                Some(d) => {
                    d.calls += 1;
                    if d.first_sent.elapsed() < DENIAL_WINDOW {
                        prop_assert!(
                            own.is_empty(),
                            "{what}: a later denied {key:?} in its window is only counted: {own:?}"
                        );
                    } else {
                        d.one_window = false;
                    }
                }
            }
        } else {
            prop_assert!(
                audited <= 1,
                "{what}: {audited} audit rows for one refused call"
            );
        }
    }
    Ok(())
}

/// T31: random requests (strings with control characters and any Unicode, extreme numbers,
/// random tokens) never crash the agent, are answered with a code from the contract, and a
/// refused one changes nothing.
#[test]
fn fuzzed_requests_never_crash_the_agent_and_refused_ones_change_nothing() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (state, agent) = rt.block_on(async {
        let db = TestDb::new().await.unwrap();
        fixture(&db.pool).await;
        let dir = leasehold_tests::scratch_dir("leasehold-fuzz").unwrap();
        let config = dir.join("agent.toml");
        std::fs::write(
            &config,
            format!(
                "[[tokens]]\nname = \"fuzz-op\"\nrole = \"operator\"\nsecret = {OPERATOR:?}\n\n\
                 [[tokens]]\nname = \"fuzz-viewer\"\nrole = \"viewer\"\nsecret = {VIEWER:?}\n"
            ),
        )
        .unwrap();
        let (agent, addr) = start(&db, "bad-fuzz", &["--config", config.to_str().unwrap()]).await;
        let op = connect_with(&addr, Some(OPERATOR), None).await.unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        (
            FuzzState {
                db,
                addr,
                op,
                created: Vec::new(),
                calls: 0,
                accepted: 0,
                by_code: Default::default(),
                denied: BTreeMap::new(),
            },
            agent,
        )
    });
    let state = RefCell::new(state);
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 160,
        max_shrink_iters: 200,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let result = runner.run(&(who(), call()), |((who, token), call)| {
        let mut state = state.borrow_mut();
        rt.block_on(one_case(&mut state, who, token, call))
    });
    let mut state = state.into_inner();
    let mut agent = agent;
    rt.block_on(async {
        eprintln!(
            "fuzz: {} calls, {} accepted, by code {:?}, {} tasks created",
            state.calls,
            state.accepted,
            state.by_code,
            state.created.len()
        );
        alive(&mut agent, &mut state.op).await;
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    assert!(
        state.accepted > 0 && state.accepted < state.calls,
        "the fuzz hit both sides"
    );
    rt.block_on(async move {
        drop(state.op);
        stop(agent).await;
        // The stop wrote the counted rest of every window: per key, the counts sum to the
        // calls denied, in one row for one call and two for more (when they fit one window).
        let rows = counted_audit_rows(&state.db.pool, 0).await.unwrap();
        let mut got: BTreeMap<(String, String), Vec<i64>> = BTreeMap::new();
        for r in rows.iter().filter(|r| r.result == "denied") {
            got.entry((r.actor.clone(), r.action.clone()))
                .or_default()
                .push(r.count);
        }
        let sums: BTreeMap<(String, String), i64> = got
            .iter()
            .map(|(k, counts)| (k.clone(), counts.iter().sum()))
            .collect();
        let want: BTreeMap<(String, String), i64> = state
            .denied
            .iter()
            .map(|(k, d)| (k.clone(), d.calls))
            .collect();
        assert_eq!(sums, want, "denied rows' counts sum to the denied calls");
        for (k, d) in &state.denied {
            if d.one_window {
                let expected = if d.calls == 1 {
                    vec![1]
                } else {
                    vec![1, d.calls - 1]
                };
                assert_eq!(
                    got[k], expected,
                    "{k:?}: first at once, the rest in one row"
                );
            }
        }
        eprintln!("fuzz: denied calls per key {want:?}, rows {got:?}");
        state.db.drop_db().await.unwrap();
    });
}

// ---------------------------------------------------------------------------------------------
// Malformed frames over raw HTTP/2
// ---------------------------------------------------------------------------------------------

/// A raw case: what it is, the method, extra headers, the body, the status prefixes allowed.
type RawCase<'a> = (
    &'a str,
    &'a str,
    Vec<(&'a str, &'a str)>,
    Vec<u8>,
    &'a [&'a str],
);

/// A gRPC length-prefixed message: flag, big-endian length, bytes.
fn frame(flag: u8, declared: u32, body: &[u8]) -> Vec<u8> {
    let mut out = vec![flag];
    out.extend_from_slice(&declared.to_be_bytes());
    out.extend_from_slice(body);
    out
}

fn msg(body: &[u8]) -> Vec<u8> {
    frame(0, u32::try_from(body.len()).unwrap(), body)
}

/// Sends one raw HTTP/2 request and returns the gRPC status (or `http NNN`).
async fn raw_call(addr: &str, method: &str, headers: &[(&str, &str)], body: Vec<u8>) -> String {
    use tonic::codegen::{Bytes, http};
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (h2, connection) = h2::client::handshake(tcp).await.unwrap();
    let conn = tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut h2 = h2.ready().await.unwrap();
    let mut request = http::Request::builder()
        .method(http::Method::POST)
        .uri(format!("http://{addr}/leasehold.v1.AgentService/{method}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let (response, mut stream) = h2.send_request(request.body(()).unwrap(), false).unwrap();
    stream.send_data(Bytes::from(body), true).unwrap();
    let response = tokio::time::timeout(WAIT, response)
        .await
        .expect("an answer in time")
        .unwrap();
    let (head, mut body) = response.into_parts();
    let status = |h: &http::HeaderMap| {
        h.get("grpc-status").map(|s| {
            format!(
                "{} {}",
                s.to_str().unwrap(),
                h.get("grpc-message")
                    .map(|m| m.to_str().unwrap_or("?"))
                    .unwrap_or("")
            )
        })
    };
    let result = if head.status != http::StatusCode::OK {
        format!("http {}", head.status.as_u16())
    } else if let Some(s) = status(&head.headers) {
        s
    } else {
        while let Some(chunk) = body.data().await {
            let chunk = chunk.unwrap();
            let _ = body.flow_control().release_capacity(chunk.len());
        }
        let trailers = body.trailers().await.unwrap().unwrap_or_default();
        status(&trailers).unwrap_or_else(|| "no status".into())
    };
    drop(h2);
    conn.abort();
    result
}

/// T31: garbage protobuf, broken gRPC framing and wrong compression over raw HTTP/2 are
/// refused with INVALID_ARGUMENT or INTERNAL (never OK, never a crash), change nothing, and
/// the agent keeps answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_grpc_frames_are_refused_and_the_agent_lives() {
    let db = TestDb::new().await.unwrap();
    fixture(&db.pool).await;
    let (mut agent, addr) = start(&db, "bad-frames", &[]).await;
    let mut c = connect(&addr).await.unwrap();
    let before = digest(&db.pool, &[]).await;
    let mut garbage = vec![0u8; 257];
    let mut x: u32 = 0x9e37_79b9;
    for b in &mut garbage {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        *b = x.to_le_bytes()[0];
    }
    let refused_codes = ["3 ", "13 "];
    let cases: Vec<RawCase> = vec![
        ("garbage", "Enqueue", vec![], msg(&garbage), &refused_codes),
        (
            "garbage",
            "SetConcurrency",
            vec![],
            msg(&garbage),
            &refused_codes,
        ),
        (
            "garbage",
            "RequeueDead",
            vec![],
            msg(&garbage),
            &refused_codes,
        ),
        (
            "huge length-delimited field",
            "Enqueue",
            vec![],
            msg(&[0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f]),
            &refused_codes,
        ),
        (
            "truncated varint",
            "Cancel",
            vec![],
            msg(&[0x08, 0xff]),
            &refused_codes,
        ),
        (
            "wrong wire type",
            "GetTask",
            vec![],
            msg(&[0x0a, 0x02, b'h', b'i']),
            &refused_codes,
        ),
        (
            "invalid utf-8 string",
            "Enqueue",
            vec![],
            msg(&[0x0a, 0x02, 0xff, 0xfe]),
            &refused_codes,
        ),
        ("empty message", "Enqueue", vec![], msg(&[]), &["3 "]),
        (
            "compressed flag without encoding",
            "Enqueue",
            vec![],
            frame(1, 4, b"abcd"),
            &["13 ", "12 "],
        ),
        (
            "gzip flag, not gzip",
            "Enqueue",
            vec![("grpc-encoding", "gzip")],
            frame(1, 4, b"abcd"),
            &["13 "],
        ),
        (
            "unknown flag",
            "Enqueue",
            vec![],
            frame(7, 2, &[0x08, 0x01]),
            &["13 "],
        ),
        (
            "declared longer than sent",
            "Requeue",
            vec![],
            frame(0, 100, &[0x08, 0x01]),
            &["13 "],
        ),
        (
            "declared 4 GiB",
            "Enqueue",
            vec![],
            frame(0, u32::MAX, &[0x0a, 0x01]),
            &["8 "],
        ),
        ("half a header", "Enqueue", vec![], vec![0, 0], &["13 "]),
        (
            "unknown encoding",
            "Enqueue",
            vec![("grpc-encoding", "br")],
            frame(1, 2, b"zz"),
            &["12 ", "13 "],
        ),
        ("unknown method", "Nope", vec![], msg(&[]), &["12 "]),
    ];
    let mut report = Vec::new();
    for (what, method, headers, body, expect) in cases {
        let got = raw_call(&addr, method, &headers, body).await;
        report.push(format!("{what} ({method}): {got}"));
        assert!(
            expect.iter().any(|e| got.starts_with(e)),
            "{what} ({method}): got {got}, expected one of {expect:?}"
        );
        alive(&mut agent, &mut c).await;
    }
    eprintln!("{}", report.join("\n"));
    // Positive control: a well-formed raw request works, unknown fields are ignored.
    let ok = raw_call(&addr, "ListAgents", &[], msg(&[0xf8, 0x06, 0x01])).await;
    assert!(
        ok.starts_with("0"),
        "a well-formed request with an unknown field: {ok}"
    );
    assert_eq!(digest(&db.pool, &[]).await, before, "nothing changed");
    assert_eq!(
        audit_rows(&db.pool).await.unwrap().len(),
        0,
        "no malformed call reached an action"
    );
    drop(c);
    stop(agent).await;
    db.drop_db().await.unwrap();
}

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
    let (mut agent, addr) = start(&db, "suspects", &["--config", config.to_str().unwrap()]).await;
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
    let before = digest(&db.pool, &[]).await;

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

    for (what, request, field) in [
        ("negative threshold", ask(-1, 0), "threshold_ms"),
        ("most negative threshold", ask(i64::MIN, 0), "threshold_ms"),
        ("threshold above a day", ask(86_400_001, 0), "threshold_ms"),
        ("limit above 10000", ask(0, 10_001), "limit"),
        ("absurd limit", ask(0, u32::MAX), "limit"),
    ] {
        refused(
            what,
            viewer.list_suspect_leases(request).await,
            INVALID,
            field,
        );
    }
    let mut stranger = connect_with(&addr, Some("not-a-token-0123456789abcdefgh"), None)
        .await
        .unwrap();
    let r = stranger.list_suspect_leases(ask(0, 0)).await;
    assert_eq!(r.unwrap_err().code(), Code::Unauthenticated);

    assert_eq!(
        digest(&db.pool, &[]).await,
        before,
        "a read changes nothing"
    );
    alive(&mut agent, &mut viewer).await;
    stop(agent).await;
    db.drop_db().await.unwrap();
}
