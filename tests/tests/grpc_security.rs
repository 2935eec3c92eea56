#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! gRPC security of real agents (TESTING.md T32, DESIGN §10): TLS and mTLS, tokens and roles,
//! the loopback rule. Every refusal is checked in the database too: nothing changed in `tasks`
//! or `policies`, and each refused action was audited as the agent aggregates denials (DESIGN
//! §10, issue 19): the first refusal of a (peer address, actor, action) key is a `denied` row
//! with count 1 at once; the later ones of its window are one more row, counted, written when
//! the window closes or the agent stops.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use leasehold_proto::v1 as pb;
use leasehold_proto::wire;
use leasehold_shared::Role;
use leasehold_tests::agent::AgentHandle;
use leasehold_tests::certs::{SERVER_NAME, TestCerts};
use leasehold_tests::fleet::spawn_agent;
use leasehold_tests::grpc::{Client, ClientTls, agent_address, connect_with};
use leasehold_tests::inspect::{CountedAuditRow, counted_audit_rows, last_audit_id};
use leasehold_tests::{TaskSpec, TestDb, audit_rows, binary, insert_task, task_status, wait_until};
use sqlx::PgPool;
use tonic::Code;

const WAIT: Duration = Duration::from_secs(30);
const OPERATOR: &str = "operator-secret-0123456789abcdef";
const VIEWER: &str = "viewer-secret-fedcba9876543210";
/// How long a refused connection may take to be refused.
const REFUSE_WAIT: Duration = Duration::from_secs(20);

type AuditRow = (String, String, String, String, String);

/// Writes the agent's config: TLS (and mTLS with `client_ca`), an operator token given inline
/// and a viewer token read from a file.
fn write_config(certs: &TestCerts, client_ca: bool, tls: bool, tokens: bool) -> PathBuf {
    let dir = certs.dir();
    let viewer_file = dir.join("viewer.token");
    std::fs::write(&viewer_file, format!("{VIEWER}\n")).unwrap();
    let mut text = String::new();
    if tls {
        text.push_str(&format!(
            "[tls]\ncert = {:?}\nkey = {:?}\n",
            certs.server.cert_path, certs.server.key_path
        ));
        if client_ca {
            text.push_str(&format!("client_ca = {:?}\n", certs.ca.cert_path));
        }
    }
    if tokens {
        text.push_str(&format!(
            "\n[[tokens]]\nname = \"oncall\"\nrole = \"operator\"\nsecret = {OPERATOR:?}\n\
             \n[[tokens]]\nname = \"dash\"\nrole = \"viewer\"\nsecret_file = {viewer_file:?}\n"
        ));
    }
    let name = format!(
        "agent-{}{}{}.toml",
        u8::from(tls),
        u8::from(client_ca),
        u8::from(tokens)
    );
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn server_tls(certs: &TestCerts) -> ClientTls {
    ClientTls {
        ca_pem: certs.ca.cert_pem.clone(),
        identity: None,
        domain: SERVER_NAME.into(),
    }
}

fn mtls(certs: &TestCerts) -> ClientTls {
    ClientTls {
        identity: Some((certs.client.cert_pem.clone(), certs.client.key_pem.clone())),
        ..server_tls(certs)
    }
}

async fn start_agent(db: &TestDb, name: &str, config: &Path) -> (AgentHandle, String) {
    let agent = spawn_agent(
        "leasehold-agent",
        &db.url,
        name,
        "noop",
        &["--config", config.to_str().unwrap()],
        Vec::new(),
    )
    .await
    .unwrap();
    agent.wait_registered(&db.pool, name, WAIT).await.unwrap();
    let addr = agent_address(&db.pool, name, WAIT).await.unwrap();
    (agent, addr)
}

/// A digest of every row of `tasks` and `policies`.
async fn state_digest(pool: &PgPool) -> (String, String) {
    leasehold_tests::inspect::state_digest(pool, &[])
        .await
        .unwrap()
}

async fn audit_after(pool: &PgPool, seen: usize) -> Vec<AuditRow> {
    audit_rows(pool).await.unwrap().split_off(seen)
}

async fn audit_len(pool: &PgPool) -> usize {
    audit_rows(pool).await.unwrap().len()
}

fn denied(actor: &str, action: &str, target: &str) -> AuditRow {
    (
        actor.into(),
        "viewer".into(),
        action.into(),
        target.into(),
        "denied".into(),
    )
}

/// The rows the agent writes at once for the refused calls `calls` (each call's row, in call
/// order): the first call of each (actor, action) key. Every caller of these tests is on
/// 127.0.0.1, so the peer address is the same for all.
fn first_of_each_key(calls: &[AuditRow]) -> Vec<AuditRow> {
    let mut seen = BTreeSet::new();
    calls
        .iter()
        .filter(|r| seen.insert((r.0.clone(), r.2.clone())))
        .cloned()
        .collect()
}

/// The `denied` rows after audit id `mark` of `actors`, with their peers and counts.
async fn denied_rows(pool: &PgPool, mark: i64, actors: &[&str]) -> Vec<CountedAuditRow> {
    counted_audit_rows(pool, mark)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.result == "denied" && actors.contains(&r.actor.as_str()))
        .collect()
}

/// Checks the rows written at once for the refused `calls` (audited after `mark`): the first
/// call of each key, with count 1, naming the caller's connection `127.0.0.1:PORT`.
async fn assert_first_rows(pool: &PgPool, mark: i64, actors: &[&str], calls: &[AuditRow]) {
    let rows = denied_rows(pool, mark, actors).await;
    let got: Vec<AuditRow> = rows
        .iter()
        .map(|r| {
            (
                r.actor.clone(),
                r.role.clone(),
                r.action.clone(),
                r.target.clone(),
                r.result.clone(),
            )
        })
        .collect();
    assert_eq!(
        got,
        first_of_each_key(calls),
        "the first refused call of each (actor, action) is audited at once, the rest wait"
    );
    for r in &rows {
        assert_eq!(r.count, 1, "a first row stands for one call: {r:?}");
        let peer = r.peer.as_deref().unwrap_or_default();
        let port = peer.strip_prefix("127.0.0.1:").map(str::parse::<u16>);
        assert!(
            matches!(port, Some(Ok(_))),
            "the first row names the caller's connection: {r:?}"
        );
    }
}

/// After the agent stopped (its stop writes every open window): per (actor, action) of the
/// refused `calls`, the `count` of the `denied` rows after `mark` sums to the calls made, in
/// one row for a single call and two (the first, then one for the rest) for more.
async fn assert_denied_totals(pool: &PgPool, mark: i64, actors: &[&str], calls: &[AuditRow]) {
    let mut want: BTreeMap<(String, String), i64> = BTreeMap::new();
    for c in calls {
        *want.entry((c.0.clone(), c.2.clone())).or_default() += 1;
    }
    let rows = denied_rows(pool, mark, actors).await;
    let mut got: BTreeMap<(String, String), Vec<&CountedAuditRow>> = BTreeMap::new();
    for r in &rows {
        got.entry((r.actor.clone(), r.action.clone()))
            .or_default()
            .push(r);
        assert!(
            r.peer
                .as_deref()
                .is_some_and(|p| p == "127.0.0.1" || p.starts_with("127.0.0.1:")),
            "every denied row names the caller's address: {r:?}"
        );
        assert_eq!((r.role.as_str(), r.result.as_str()), ("viewer", "denied"));
    }
    let sums: BTreeMap<(String, String), i64> = got
        .iter()
        .map(|(k, rs)| (k.clone(), rs.iter().map(|r| r.count).sum()))
        .collect();
    assert_eq!(
        sums, want,
        "the counts of the denied rows sum to the refused calls, per actor and action: {rows:#?}"
    );
    for (key, rs) in &got {
        let n = want[key];
        let counts: Vec<i64> = rs.iter().map(|r| r.count).collect();
        let expected = if n == 1 { vec![1] } else { vec![1, n - 1] };
        assert_eq!(
            counts,
            expected,
            "{key:?}: the first call at once, the other {} in one row",
            n - 1
        );
        // The counted row repeats the first call's target.
        assert!(
            rs.iter().all(|r| r.target == rs[0].target),
            "{key:?}: {rs:?}"
        );
    }
}

/// The local limit the agent reports in its Watch snapshot.
async fn local_limit(client: &mut Client) -> u32 {
    let mut stream = client
        .watch(pb::WatchRequest {})
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap();
    first.snapshot.unwrap().stats.unwrap().local_limit
}

fn code_of<T: std::fmt::Debug>(r: Result<tonic::Response<T>, tonic::Status>) -> tonic::Status {
    match r {
        Ok(response) => panic!("the call succeeded: {response:?}"),
        Err(status) => status,
    }
}

/// Every action, called with `client`; each must fail with `code`. Returns the audit rows each
/// must leave (for `actor`).
async fn every_action_refused(
    client: &mut Client,
    code: Code,
    actor: &str,
    agent_id: &str,
    queued: i64,
    running: i64,
    dead: i64,
) -> Vec<AuditRow> {
    let mut expect = Vec::new();
    let mut check = |what: &str, status: tonic::Status, action: &str, target: String| {
        assert_eq!(status.code(), code, "{what}: {status:?}");
        expect.push(denied(actor, action, &target));
    };
    let s = code_of(
        client
            .enqueue(pb::EnqueueRequest {
                task_type: "email.send".into(),
                payload_json: "{\"to\":\"x\"}".into(),
                ..Default::default()
            })
            .await,
    );
    check("enqueue", s, "enqueue", "type:email.send".into());
    for id in [queued, running] {
        let s = code_of(
            client
                .cancel(pb::CancelRequest {
                    id,
                    wait: false,
                    wait_ms: 0,
                })
                .await,
        );
        check("cancel", s, "cancel", format!("task:{id}"));
    }
    let s = code_of(client.requeue(pb::RequeueRequest { id: dead }).await);
    check("requeue", s, "requeue", format!("task:{dead}"));
    let s = code_of(
        client
            .requeue_dead(pb::RequeueDeadRequest {
                all: true,
                ..Default::default()
            })
            .await,
    );
    check(
        "requeue_dead",
        s,
        "requeue_dead",
        "dead-letter queue".into(),
    );
    let s = code_of(
        client
            .purge_dead(pb::PurgeDeadRequest {
                all: true,
                dry_run: true,
                ..Default::default()
            })
            .await,
    );
    check("purge_dead", s, "purge_dead", "dead-letter queue".into());
    use pb::set_concurrency_request::Scope;
    // Global, type and per-key limits are policy changes (audited as the store names them);
    // the local limit is the agent's own.
    for (scope, per_key, action, target) in [
        (
            Scope::Global(true),
            false,
            "policy_set",
            "policy:*".to_string(),
        ),
        (
            Scope::TaskType("email.send".into()),
            false,
            "policy_set",
            "policy:email.send".into(),
        ),
        (
            Scope::TaskType("email.send".into()),
            true,
            "policy_set",
            "policy:email.send".into(),
        ),
        (
            Scope::AgentLocal(true),
            false,
            "set_concurrency",
            format!("agent:{agent_id}"),
        ),
    ] {
        let s = code_of(
            client
                .set_concurrency(pb::SetConcurrencyRequest {
                    scope: Some(scope),
                    limit: 3,
                    unlimited: false,
                    per_key,
                })
                .await,
        );
        check("set_concurrency", s, action, target);
    }
    use pb::set_rate_limit_request::Scope as RateScope;
    for (scope, target) in [
        (RateScope::Global(true), "policy:*"),
        (
            RateScope::TaskType("email.send".into()),
            "policy:email.send",
        ),
    ] {
        let s = code_of(
            client
                .set_rate_limit(pb::SetRateLimitRequest {
                    scope: Some(scope),
                    limit: Some(pb::RateLimit {
                        starts: 5,
                        period_ms: 1000,
                    }),
                    clear: false,
                })
                .await,
        );
        check("set_rate_limit", s, "policy_set", target.into());
    }
    let s = code_of(
        client
            .set_shed_after(pb::SetShedAfterRequest {
                task_type: "email.send".into(),
                shed_after_ms: 30_000,
                clear: false,
            })
            .await,
    );
    check(
        "set_shed_after",
        s,
        "policy_set",
        "policy:email.send".into(),
    );
    for (what, request) in [
        (
            "set_breaker",
            pb::SetBreakerRequest {
                task_type: "email.send".into(),
                failures: 5,
                within_ms: 60_000,
                cooldown_ms: 30_000,
                clear: false,
            },
        ),
        (
            "clear_breaker",
            pb::SetBreakerRequest {
                task_type: "email.send".into(),
                clear: true,
                ..Default::default()
            },
        ),
    ] {
        let s = code_of(client.set_breaker(request).await);
        check(what, s, "policy_set", "policy:email.send".into());
    }
    let s = code_of(
        client
            .pause_type(pb::PauseTypeRequest {
                task_type: "email.send".into(),
            })
            .await,
    );
    check("pause", s, "policy_set", "policy:email.send".into());
    let s = code_of(
        client
            .resume_type(pb::ResumeTypeRequest {
                task_type: "paused.kind".into(),
            })
            .await,
    );
    check("resume", s, "policy_set", "policy:paused.kind".into());
    let s = code_of(client.drain(pb::DrainRequest {}).await);
    check("drain", s, "drain", format!("agent:{agent_id}"));
    expect
}

struct Fixture {
    queued: i64,
    running: i64,
    dead: i64,
}

async fn fixture(pool: &PgPool) -> Fixture {
    let queued = insert_task(pool, TaskSpec::new("email.send", "queued"))
        .await
        .unwrap();
    // Leased by an agent that does not exist, for an hour: nobody touches it during the test.
    let running = insert_task(
        pool,
        TaskSpec {
            lease_ttl_secs: Some(3600.0),
            ..TaskSpec::new("email.send", "running")
        },
    )
    .await
    .unwrap();
    let dead = insert_task(pool, TaskSpec::new("email.send", "dead"))
        .await
        .unwrap();
    sqlx::query("INSERT INTO policies (scope, paused) VALUES ('paused.kind', true)")
        .execute(pool)
        .await
        .unwrap();
    Fixture {
        queued,
        running,
        dead,
    }
}

/// Waits until the agent ran a task, proving it still claims (it is not draining).
async fn still_serving(db: &TestDb, op: &mut Client, agent: &mut AgentHandle) -> i64 {
    let done = op
        .enqueue(pb::EnqueueRequest {
            task_type: "noop".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let id = done.id;
    wait_until("the agent runs a new task", WAIT, || async {
        Ok(task_status(&db.pool, id).await? == "succeeded")
    })
    .await
    .unwrap();
    assert!(agent.is_running(), "the agent is still running");
    let state: String = sqlx::query_scalar(
        "SELECT state FROM agents WHERE pid = $1 ORDER BY started_at DESC LIMIT 1",
    )
    .bind(i32::try_from(agent.pid()).unwrap())
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(state, "running", "the agent is not draining");
    id
}

async fn stop(mut agent: AgentHandle) {
    agent.sigterm().unwrap();
    let status = agent.wait_exit(WAIT).await.unwrap();
    assert!(status.success(), "agent exit: {status}");
}

/// (a) (b) (c) (h): tokens and roles over TLS, checked in the database and the audit log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_and_roles_are_enforced_audited_and_change_nothing() {
    let db = TestDb::new().await.unwrap();
    let certs = TestCerts::generate().unwrap();
    let config = write_config(&certs, false, true, true);
    let f = fixture(&db.pool).await;
    let (mut agent, addr) = start_agent(&db, "sec-roles", &config).await;
    let tls = server_tls(&certs);
    let mut op = connect_with(&addr, Some(OPERATOR), Some(&tls))
        .await
        .unwrap();
    let mut viewer = connect_with(&addr, Some(VIEWER), Some(&tls)).await.unwrap();
    let agent_id = op
        .list_agents(pb::ListAgentsRequest {})
        .await
        .unwrap()
        .into_inner()
        .answered_by;
    let limit_before = local_limit(&mut op).await;
    let before = state_digest(&db.pool).await;
    let seen = audit_len(&db.pool).await;
    let mark = last_audit_id(&db.pool).await.unwrap();

    // (c) A viewer may read...
    let mut view = viewer.clone();
    assert!(local_limit(&mut view).await > 0, "viewer may watch");
    let listed = viewer
        .list_tasks(pb::ListTasksRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.tasks.len(), 3, "viewer may list");
    let got = viewer
        .get_task(pb::GetTaskRequest { id: f.running })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.task.unwrap().id, f.running, "viewer may get a task");
    let agents = viewer
        .list_agents(pb::ListAgentsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(
        agents.agents.iter().any(|a| a.id == agent_id),
        "viewer may list agents"
    );
    assert_eq!(
        // The enum alone: a current agent fills it.
        wire::read::<Role>(agents.role, "").known(),
        Some(Role::Viewer),
        "the console learns it is read-only"
    );
    assert!(agents.stale_after_ms > 0);
    let overview = viewer
        .get_overview(pb::GetOverviewRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(
        overview.types.iter().any(|t| t.task_type == "email.send"),
        "viewer may read the overview: {overview:?}"
    );
    let stats = viewer
        .get_stats(pb::GetStatsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(
        stats.windows.len() == 3 && stats.running >= 1,
        "viewer may read the queue stats: {stats:?}"
    );
    assert_eq!(
        audit_after(&db.pool, seen).await,
        Vec::<AuditRow>::new(),
        "reads are not actions: no audit rows"
    );

    // ... and no action, Drain included.
    let viewer_calls = every_action_refused(
        &mut viewer,
        Code::PermissionDenied,
        "dash",
        &agent_id,
        f.queued,
        f.running,
        f.dead,
    )
    .await;
    assert_first_rows(&db.pool, mark, &["dash"], &viewer_calls).await;

    // (a) No token: refused on an action and on a read.
    let mut anon = connect_with(&addr, None, Some(&tls)).await.unwrap();
    let s = code_of(
        anon.cancel(pb::CancelRequest {
            id: f.queued,
            ..Default::default()
        })
        .await,
    );
    assert_eq!(s.code(), Code::Unauthenticated, "{s:?}");
    assert!(s.message().contains("requires a token"), "{s:?}");
    let s = code_of(anon.list_tasks(pb::ListTasksRequest::default()).await);
    assert_eq!(s.code(), Code::Unauthenticated, "{s:?}");
    let s = code_of(anon.watch(pb::WatchRequest {}).await);
    assert_eq!(s.code(), Code::Unauthenticated, "{s:?}");

    // (b) A wrong token, and (h) tokens that differ from the operator's only in their last
    // character, or are a prefix of it, or extend it.
    let mut wrong = Vec::new();
    let last = OPERATOR.chars().last().unwrap();
    let flipped = format!(
        "{}{}",
        &OPERATOR[..OPERATOR.len() - 1],
        if last == 'f' { 'e' } else { 'f' }
    );
    for token in [
        "not-a-token-of-this-agent-at-all".to_string(),
        flipped,
        OPERATOR[..OPERATOR.len() - 1].to_string(),
        OPERATOR[..16].to_string(),
        format!("{OPERATOR}0"),
        format!("{VIEWER}{OPERATOR}"),
    ] {
        let mut c = connect_with(&addr, Some(&token), Some(&tls)).await.unwrap();
        let s = code_of(
            c.pause_type(pb::PauseTypeRequest {
                task_type: "email.send".into(),
            })
            .await,
        );
        assert_eq!(s.code(), Code::Unauthenticated, "{token}: {s:?}");
        assert!(s.message().contains("not known"), "{token}: {s:?}");
        let s = code_of(c.list_agents(pb::ListAgentsRequest {}).await);
        assert_eq!(s.code(), Code::Unauthenticated, "{token}: {s:?}");
        wrong.push(c);
    }
    // Every action with a wrong token.
    let expect_wrong = every_action_refused(
        &mut wrong[1],
        Code::Unauthenticated,
        "unauthenticated",
        &agent_id,
        f.queued,
        f.running,
        f.dead,
    )
    .await;

    let mut unauthenticated_calls = vec![denied(
        "unauthenticated",
        "cancel",
        &format!("task:{}", f.queued),
    )];
    for _ in 0..6 {
        unauthenticated_calls.push(denied("unauthenticated", "policy_set", "policy:email.send"));
    }
    unauthenticated_calls.extend(expect_wrong);
    assert_first_rows(&db.pool, mark, &["unauthenticated"], &unauthenticated_calls).await;

    // Nothing changed anywhere, and the agent keeps running and claiming.
    assert_eq!(
        state_digest(&db.pool).await,
        before,
        "tasks and policies unchanged"
    );
    assert_eq!(
        local_limit(&mut op).await,
        limit_before,
        "local limit unchanged"
    );
    let seen = audit_len(&db.pool).await;
    let id = still_serving(&db, &mut op, &mut agent).await;
    let rows = audit_after(&db.pool, seen).await;
    assert_eq!(
        rows,
        vec![(
            "oncall".to_string(),
            "operator".to_string(),
            "enqueue".to_string(),
            format!("task:{id}"),
            "applied".to_string()
        )],
        "the operator's call is audited with its token's name"
    );
    let role = op
        .list_agents(pb::ListAgentsRequest {})
        .await
        .unwrap()
        .into_inner()
        .role;
    assert_eq!(wire::read::<Role>(role, "").known(), Some(Role::Operator));
    // Positive control: the operator may do what the viewer could not.
    op.pause_type(pb::PauseTypeRequest {
        task_type: "email.send".into(),
    })
    .await
    .unwrap();
    assert_ne!(state_digest(&db.pool).await.1, before.1);
    drop((op, viewer, anon, wrong, view));
    stop(agent).await;
    // The stop wrote the counted rest of every window.
    let mut calls = viewer_calls;
    calls.extend(unauthenticated_calls);
    assert_denied_totals(&db.pool, mark, &["dash", "unauthenticated"], &calls).await;
    db.drop_db().await.unwrap();
}

/// Calls Enqueue with `client_tls` (or plaintext) and the operator token; the call must not
/// succeed, and no task of `task_type` may exist afterwards.
async fn refused_connection(
    pool: &PgPool,
    addr: &str,
    client_tls: Option<&ClientTls>,
    task_type: &str,
) -> String {
    let attempt = async {
        let mut client = match connect_with(addr, Some(OPERATOR), client_tls).await {
            Ok(c) => c,
            Err(e) => return format!("connect failed: {e:#}"),
        };
        match client
            .enqueue(pb::EnqueueRequest {
                task_type: task_type.into(),
                ..Default::default()
            })
            .await
        {
            Ok(r) => panic!("{task_type}: the call succeeded: {r:?}"),
            Err(s) => format!("call failed: {s:?}"),
        }
    };
    let why = tokio::time::timeout(REFUSE_WAIT, attempt)
        .await
        .unwrap_or_else(|_| panic!("{task_type}: neither refused nor answered in time"));
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks WHERE task_type = $1")
        .bind(task_type)
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(n, 0, "{task_type}: nothing was enqueued ({why})");
    why
}

/// (d) (f): plaintext and a client trusting the wrong CA are refused by a TLS agent; then the
/// `leasehold` CLI's exit codes, when it is built.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_and_wrong_ca_clients_are_refused_by_a_tls_agent() {
    let db = TestDb::new().await.unwrap();
    let certs = TestCerts::generate().unwrap();
    let config = write_config(&certs, false, true, true);
    let (agent, addr) = start_agent(&db, "sec-tls", &config).await;
    let seen = audit_len(&db.pool).await;
    // (d) Plaintext.
    let why = refused_connection(&db.pool, &addr, None, "plain.text").await;
    eprintln!("plaintext: {why}");
    // (f) Trusting another CA.
    let other = ClientTls {
        ca_pem: certs.other_ca.cert_pem.clone(),
        ..server_tls(&certs)
    };
    let why = refused_connection(&db.pool, &addr, Some(&other), "wrong.ca").await;
    eprintln!("wrong CA: {why}");
    // The right CA but another server name than the certificate's.
    let wrong_name = ClientTls {
        domain: "agent.example.invalid".into(),
        ..server_tls(&certs)
    };
    let why = refused_connection(&db.pool, &addr, Some(&wrong_name), "wrong.name").await;
    eprintln!("wrong name: {why}");
    assert_eq!(
        audit_after(&db.pool, seen).await,
        Vec::<AuditRow>::new(),
        "no refused connection reached the service"
    );
    // Positive control: the right CA works.
    let mut ok = connect_with(&addr, Some(OPERATOR), Some(&server_tls(&certs)))
        .await
        .unwrap();
    ok.enqueue(pb::EnqueueRequest {
        task_type: "right.ca".into(),
        ..Default::default()
    })
    .await
    .unwrap();

    cli_exit_codes(&db, &addr, &certs).await;
    drop(ok);
    stop(agent).await;
    db.drop_db().await.unwrap();
}

/// True when the `leasehold` binary has the headless commands (the console is being written
/// alongside; an early build only has the TUI stub).
async fn cli_with_commands() -> Option<PathBuf> {
    let path = binary("leasehold").await.ok()?;
    let out = Command::new(&path).arg("--help").output().ok()?;
    let help = String::from_utf8_lossy(&out.stdout);
    help.lines()
        .any(|l| l.trim_start().starts_with("enqueue "))
        .then_some(path)
}

async fn cli_exit_codes(db: &TestDb, addr: &str, certs: &TestCerts) {
    let Some(cli) = cli_with_commands().await else {
        eprintln!(
            "SKIPPED: `leasehold --help` lists no `enqueue` command; CLI exit codes not checked"
        );
        return;
    };
    let ca = certs.ca.cert_path.to_str().unwrap().to_string();
    let run = |args: &[&str], token: Option<&str>| {
        let mut cmd = Command::new(&cli);
        cmd.env_remove("LEASEHOLD_TOKEN")
            .env_remove("LEASEHOLD_AGENT")
            .env_remove("LEASEHOLD_CA")
            .args(["--agent", addr, "--call-timeout", "15s"])
            .args(args);
        if let Some(t) = token {
            cmd.env("LEASEHOLD_TOKEN", t);
        }
        let out = cmd.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let tls = ["--ca", ca.as_str(), "--tls-server-name", SERVER_NAME];
    let count = |t: &'static str| async move {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks WHERE task_type = $1")
            .bind(t)
            .fetch_one(&db.pool)
            .await
            .unwrap();
        n
    };
    let seen = audit_len(&db.pool).await;
    let (code, err) = run(&[&tls[..], &["enqueue", "cli.none"][..]].concat(), None);
    assert_eq!(code, Some(4), "no token on an action is exit 4: {err}");
    let (code, err) = run(
        &[&tls[..], &["enqueue", "cli.viewer"][..]].concat(),
        Some(VIEWER),
    );
    assert_eq!(code, Some(4), "a viewer on an action is exit 4: {err}");
    // Plaintext TCP (a loopback `--agent` would otherwise go through the agent's Unix socket).
    let (code, err) = run(&["--no-socket", "enqueue", "cli.plain"], Some(OPERATOR));
    assert_eq!(code, Some(3), "plaintext against TLS is exit 3: {err}");
    assert_eq!(count("cli.none").await + count("cli.viewer").await, 0);
    assert_eq!(count("cli.plain").await, 0);
    let rows = audit_after(&db.pool, seen).await;
    assert_eq!(
        rows,
        vec![
            denied("unauthenticated", "enqueue", "type:cli.none"),
            denied("dash", "enqueue", "type:cli.viewer"),
        ]
    );
    let (code, err) = run(
        &[&tls[..], &["enqueue", "cli.ok"][..]].concat(),
        Some(OPERATOR),
    );
    assert_eq!(code, Some(0), "the operator's enqueue works: {err}");
    assert_eq!(count("cli.ok").await, 1);
    eprintln!("CLI exit codes checked: 4 without a token or as a viewer, 3 in plaintext, 0 ok");
}

/// (e): with a client CA, clients without a certificate or with one from another CA are
/// refused; the right certificate works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_refuses_clients_without_a_certificate_of_the_client_ca() {
    let db = TestDb::new().await.unwrap();
    let certs = TestCerts::generate().unwrap();
    let config = write_config(&certs, true, true, true);
    let (agent, addr) = start_agent(&db, "sec-mtls", &config).await;
    let seen = audit_len(&db.pool).await;
    let why = refused_connection(&db.pool, &addr, Some(&server_tls(&certs)), "no.cert").await;
    eprintln!("no client cert: {why}");
    let other = ClientTls {
        identity: Some((
            certs.other_client.cert_pem.clone(),
            certs.other_client.key_pem.clone(),
        )),
        ..server_tls(&certs)
    };
    let why = refused_connection(&db.pool, &addr, Some(&other), "other.cert").await;
    eprintln!("client cert of another CA: {why}");
    let why = refused_connection(&db.pool, &addr, None, "plain.mtls").await;
    eprintln!("plaintext: {why}");
    assert_eq!(audit_after(&db.pool, seen).await, Vec::<AuditRow>::new());
    // The right certificate: a viewer reads, the operator acts, the token still counts.
    let mut viewer = connect_with(&addr, Some(VIEWER), Some(&mtls(&certs)))
        .await
        .unwrap();
    viewer
        .list_tasks(pb::ListTasksRequest::default())
        .await
        .unwrap();
    let s = code_of(
        viewer
            .enqueue(pb::EnqueueRequest {
                task_type: "viewer.mtls".into(),
                ..Default::default()
            })
            .await,
    );
    assert_eq!(s.code(), Code::PermissionDenied, "a client cert is no role");
    let mut op = connect_with(&addr, Some(OPERATOR), Some(&mtls(&certs)))
        .await
        .unwrap();
    let id = op
        .enqueue(pb::EnqueueRequest {
            task_type: "right.cert".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .id;
    assert_eq!(task_status(&db.pool, id).await.unwrap(), "queued");
    drop((viewer, op));
    stop(agent).await;
    db.drop_db().await.unwrap();
}

/// (g): a non-loopback listener needs TLS and a token, or --insecure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_public_listener_needs_tls_and_a_token_or_insecure() {
    let db = TestDb::new().await.unwrap();
    let certs = TestCerts::generate().unwrap();
    let tls_only = write_config(&certs, false, true, false);
    let tokens_only = write_config(&certs, false, false, true);
    let both = write_config(&certs, false, true, true);
    let cases: [(&str, Vec<&str>); 3] = [
        ("nothing", vec![]),
        ("tls only", vec!["--config", tls_only.to_str().unwrap()]),
        (
            "tokens only",
            vec!["--config", tokens_only.to_str().unwrap()],
        ),
    ];
    for (what, extra) in cases {
        let mut args = extra.clone();
        args.extend(["--listen", "0.0.0.0:0"]);
        let mut agent = spawn_agent("leasehold-agent", &db.url, "sec-pub", "noop", &args, vec![])
            .await
            .unwrap();
        let status = agent.wait_exit(WAIT).await.unwrap();
        let err = agent.stderr_text().unwrap();
        assert_eq!(status.code(), Some(2), "{what}: exit 2, stderr: {err}");
        assert!(
            err.contains("not a loopback address") && err.contains("--insecure"),
            "{what}: a clear message: {err}"
        );
    }
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM agents")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(n, 0, "a refused agent never registered");
    // With TLS and a token it starts, and with --insecure it starts without either.
    for (name, args) in [
        (
            "sec-pub-tls",
            vec!["--config", both.to_str().unwrap(), "--listen", "0.0.0.0:0"],
        ),
        (
            "sec-pub-insecure",
            vec!["--listen", "0.0.0.0:0", "--insecure"],
        ),
    ] {
        let agent = spawn_agent("leasehold-agent", &db.url, name, "noop", &args, vec![])
            .await
            .unwrap();
        agent.wait_registered(&db.pool, name, WAIT).await.unwrap();
        // Registered, on every address: reach it on loopback and wait until it answers (its
        // signal handler is in place only then).
        let registered = agent_address(&db.pool, name, WAIT).await.unwrap();
        let port = registered.rsplit(':').next().unwrap();
        let local = format!("127.0.0.1:{port}");
        let tls = args.len() > 3;
        let (token, client_tls) = if tls {
            (Some(OPERATOR), Some(server_tls(&certs)))
        } else {
            (None, None)
        };
        let mut client = connect_with(&local, token, client_tls.as_ref())
            .await
            .unwrap();
        client.list_agents(pb::ListAgentsRequest {}).await.unwrap();
        eprintln!("{name}: registered {registered}, serving on {local}");
        stop(agent).await;
    }
    db.drop_db().await.unwrap();
}
