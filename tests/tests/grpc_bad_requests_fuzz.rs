#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Fuzzed gRPC requests against a real agent (TESTING.md T31; DESIGN §10: "bad input changes
//! nothing"): strings with control characters and any Unicode, extreme numbers and random
//! tokens. Every call is answered with a code from the contract; a refused one changes nothing
//! in `tasks` or `policies` (compared row for row) and audits as the contract says, denied
//! calls aggregated per actor and action per minute.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Duration;

use leasehold_proto::v1 as pb;
use leasehold_tests::TestDb;
use leasehold_tests::calls::grpc::{Fixture, OPERATOR, VIEWER, alive, local_limit, start, stop};
use leasehold_tests::grpc::{Client, connect_with};
use leasehold_tests::inspect::{CountedAuditRow, counted_audit_rows, last_audit_id};
use pb::set_concurrency_request::Scope;
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};
use sqlx::PgPool;
use tonic::Code;

/// Rows of `tasks` (except `skip`) and `policies`, as text.
async fn digest(pool: &PgPool, skip: &[i64]) -> (String, String) {
    leasehold_tests::inspect::state_digest(pool, skip)
        .await
        .unwrap()
}

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
    SetBreaker(pb::SetBreakerRequest),
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
            Call::SetConcurrency(_) | Call::Pause(_) | Call::SetBreaker(_) => "policy_set",
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
    (base, 0usize..10, text(), payload(), int64(), int32()).prop_map(
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
                8 => r.concurrency_key = s,
                _ => {}
            }
            Call::Enqueue(r)
        },
    )
}

/// SetBreaker, valid or near it (a type, numbers at and past the bounds), or anything. Never
/// on `noop`: the agent runs the fuzz's noop tasks and most fail (their payloads are not
/// `{}`), so a breaker there could open mid-run and the leader's move would change `policies`
/// (and audit) under an unrelated call.
fn set_breaker() -> impl Strategy<Value = Call> {
    let task_type = prop_oneof![
        2 => prop::sample::select(vec!["fuzz.kind", "bad.kind", "a", "*"]).prop_map(String::from),
        2 => text(),
    ]
    .prop_filter("no breaker on noop", |t| t != "noop");
    let ms = || {
        prop_oneof![
            3 => prop::sample::select(vec![
                0u64, 1, 1_000, 60_000, 86_400_000, 86_400_001, 604_800_000, 604_800_001,
                u64::MAX,
            ]),
            1 => any::<u64>(),
        ]
    };
    let clear = prop_oneof![3 => Just(false), 1 => Just(true)];
    (task_type, uint32(), ms(), ms(), clear).prop_map(
        |(task_type, failures, within_ms, cooldown_ms, clear)| {
            Call::SetBreaker(pb::SetBreakerRequest {
                task_type,
                failures,
                within_ms,
                cooldown_ms,
                clear,
            })
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
        text(),
    )
        .prop_map(
            |(
                (task_type, payload_json, priority, delay_ms),
                (max_attempts, key, deadline_at_ms, timeout_ms),
                concurrency_key,
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
                    concurrency_key,
                    ..Default::default()
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
        proptest::option::of(any::<bool>()),
    )
        .prop_map(
            |(statuses, task_type, text, before_id, limit, error_code, since_ms, due)| {
                Call::List(pb::ListTasksRequest {
                    statuses,
                    task_type,
                    text,
                    before_id,
                    limit,
                    error_code,
                    since_ms,
                    due,
                })
            },
        );
    let scope = prop_oneof![
        1 => Just(None),
        2 => any::<bool>().prop_map(|b| Some(Scope::Global(b))),
        2 => any::<bool>().prop_map(|b| Some(Scope::AgentLocal(b))),
        3 => text().prop_map(|t| Some(Scope::TaskType(t))),
    ];
    let set = (scope, uint32(), any::<bool>(), any::<bool>()).prop_map(
        |(scope, limit, unlimited, per_key)| {
            Call::SetConcurrency(pb::SetConcurrencyRequest {
                scope,
                limit,
                unlimited,
                per_key,
            })
        },
    );
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
                    ..Default::default()
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
        2 => set_breaker(),
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
        Call::SetBreaker(r) => {
            let (c, m, _) = done(client.set_breaker(r).await);
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
        Some(local_limit(&mut state.op).await.unwrap())
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
            let now = local_limit(&mut state.op).await.unwrap();
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
        Fixture::insert(&db.pool).await.unwrap();
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
        let (agent, addr) = start(&db, "bad-fuzz", &["--config", config.to_str().unwrap()])
            .await
            .unwrap();
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
        alive(&mut agent, &mut state.op).await.unwrap();
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
        stop(agent).await.unwrap();
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
