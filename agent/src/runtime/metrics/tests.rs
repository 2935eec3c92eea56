//! Tests of the metrics registry, of the readiness checks, and of the `/metrics`, `/healthz`
//! and `/readyz` endpoint over real TCP on 127.0.0.1.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_shared::StoreError;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout};
use tokio_util::sync::CancellationToken;

use super::serve::{HEADER_READ_TIMEOUT, MAX_CONNECTIONS, SHUTDOWN_GRACE};
use super::*;

#[test]
fn encodes_every_family_with_labels() {
    let m = Metrics::new();
    m.claimed("email", Duration::from_millis(3));
    m.finished("email", "succeeded", Duration::from_millis(5));
    // Later updates go through the kept series and still reach the registry.
    m.claimed("email", Duration::from_millis(3));
    m.finished("email", "succeeded", Duration::from_millis(5));
    m.finished("email", "dead", Duration::from_millis(5));
    m.fenced("complete");
    m.renewal(false);
    m.database(true);
    m.clock_jump("forward");
    m.shed("digest");
    m.shed("digest");
    let text = m.encode();
    for name in [
        "leasehold_active_tasks",
        "leasehold_tasks_claimed_total{task_type=\"email\"} 2",
        "leasehold_queue_wait_seconds_bucket",
        "leasehold_execution_seconds_count{task_type=\"email\"} 3",
        "leasehold_task_outcomes_total{task_type=\"email\",outcome=\"succeeded\"} 2",
        "leasehold_task_outcomes_total{task_type=\"email\",outcome=\"dead\"} 1",
        "leasehold_renewal_failures_total 1",
        "leasehold_fenced_writes_total{op=\"complete\"} 1",
        "leasehold_database_up 1",
        "leasehold_database_clock_jumps_total{direction=\"forward\"} 1",
        "leasehold_database_clock_jumps_total{direction=\"backward\"} 0",
        "leasehold_tasks_shed_total{task_type=\"digest\"} 2",
    ] {
        assert!(text.contains(name), "{name} missing from\n{text}");
    }
}

/// What the fake database answers a readiness check.
#[derive(Debug, Clone, Copy)]
enum FakeAnswer {
    Migrated { applied: usize, known: usize },
    Fails,
    Hangs,
}

/// A [`ReadinessSource`] whose answers the test sets, counting the database checks.
struct FakeAgent {
    draining: AtomicBool,
    answer: Mutex<FakeAnswer>,
    /// How long each database check takes before it answers.
    delay: Duration,
    checks: AtomicUsize,
}

impl FakeAgent {
    fn new(answer: FakeAnswer) -> Arc<FakeAgent> {
        FakeAgent::slow(answer, Duration::ZERO)
    }

    fn slow(answer: FakeAnswer, delay: Duration) -> Arc<FakeAgent> {
        Arc::new(FakeAgent {
            draining: AtomicBool::new(false),
            answer: Mutex::new(answer),
            delay,
            checks: AtomicUsize::new(0),
        })
    }

    fn set(&self, answer: FakeAnswer) {
        *self.answer.lock().unwrap() = answer;
    }

    fn checks(&self) -> usize {
        self.checks.load(Ordering::SeqCst)
    }
}

const UP: FakeAnswer = FakeAnswer::Migrated {
    applied: 12,
    known: 12,
};

#[async_trait::async_trait]
impl ReadinessSource for FakeAgent {
    fn draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    async fn migrations(&self) -> Result<MigrationCount, StoreError> {
        self.checks.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        let answer = *self.answer.lock().unwrap();
        match answer {
            FakeAnswer::Migrated { applied, known } => Ok(MigrationCount { applied, known }),
            FakeAnswer::Fails => Err(StoreError::Busy {
                op: "migrations_applied",
            }),
            FakeAnswer::Hangs => std::future::pending().await,
        }
    }
}

/// A metrics endpoint on an ephemeral port, serving until `cancel`.
struct Endpoint {
    addr: SocketAddr,
    agent: Arc<FakeAgent>,
    cancel: CancellationToken,
    served: JoinHandle<std::io::Result<()>>,
}

/// An endpoint whose agent is ready.
async fn endpoint() -> Endpoint {
    endpoint_of(FakeAgent::new(UP)).await
}

async fn endpoint_of(agent: Arc<FakeAgent>) -> Endpoint {
    let listener = bind_metrics(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let metrics = Arc::new(Metrics::new());
    metrics.register_types(["email"]);
    let readiness = Arc::new(Readiness::new(
        Arc::clone(&agent) as Arc<dyn ReadinessSource>
    ));
    let cancel = CancellationToken::new();
    let served = tokio::spawn(serve_metrics(listener, metrics, readiness, cancel.clone()));
    Endpoint {
        addr,
        agent,
        cancel,
        served,
    }
}

/// One parsed response: status line, lower-cased headers, body.
#[derive(Debug)]
struct Answer {
    status: String,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads one response off `conn`; `head_only` for the answer to a HEAD (no body follows).
async fn read_answer(conn: &mut BufReader<TcpStream>, head_only: bool) -> Answer {
    let mut status = String::new();
    conn.read_line(&mut status).await.unwrap();
    assert!(!status.is_empty(), "connection closed before a response");
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        conn.read_line(&mut line).await.unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').unwrap();
        headers.push((name.to_ascii_lowercase(), value.trim().to_string()));
    }
    let mut answer = Answer {
        status: status.trim_end().to_string(),
        headers,
        body: String::new(),
    };
    if !head_only {
        let len: usize = answer.header("content-length").unwrap().parse().unwrap();
        let mut body = vec![0; len];
        conn.read_exact(&mut body).await.unwrap();
        answer.body = String::from_utf8(body).unwrap();
    }
    answer
}

async fn connect(addr: SocketAddr) -> BufReader<TcpStream> {
    BufReader::new(TcpStream::connect(addr).await.unwrap())
}

async fn ask(conn: &mut BufReader<TcpStream>, method: &str, path: &str) -> Answer {
    let request = format!("{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n");
    conn.get_mut().write_all(request.as_bytes()).await.unwrap();
    read_answer(conn, method == "HEAD").await
}

/// True once the server has closed `conn` (EOF or reset), false if it sends anything.
async fn closed(conn: &mut BufReader<TcpStream>) -> bool {
    let mut byte = [0u8; 1];
    matches!(conn.read(&mut byte).await, Ok(0) | Err(_))
}

#[tokio::test]
async fn get_metrics_is_200_with_the_exposition_format() {
    let ep = endpoint().await;
    for path in ["/metrics", "/"] {
        let answer = ask(&mut connect(ep.addr).await, "GET", path).await;
        assert_eq!(answer.status, "HTTP/1.1 200 OK", "{path}: {answer:?}");
        assert_eq!(
            answer.header("content-type"),
            Some("text/plain; version=0.0.4; charset=utf-8")
        );
        assert!(
            answer
                .body
                .contains("leasehold_tasks_claimed_total{task_type=\"email\"} 0"),
            "{path}: {}",
            answer.body
        );
    }
}

#[tokio::test]
async fn other_paths_are_404() {
    let ep = endpoint().await;
    let mut conn = connect(ep.addr).await;
    for path in ["/nope", "/metrics/x", "/favicon.ico"] {
        let answer = ask(&mut conn, "GET", path).await;
        assert_eq!(answer.status, "HTTP/1.1 404 Not Found", "{path}");
        assert_eq!(answer.body, "");
    }
}

#[tokio::test]
async fn other_methods_are_405_with_allow() {
    let ep = endpoint().await;
    let mut conn = connect(ep.addr).await;
    for path in ["/metrics", "/healthz", "/readyz"] {
        for method in ["POST", "PUT", "DELETE"] {
            let answer = ask(&mut conn, method, path).await;
            assert_eq!(
                answer.status, "HTTP/1.1 405 Method Not Allowed",
                "{method} {path}"
            );
            assert_eq!(answer.header("allow"), Some("GET, HEAD"));
        }
    }
    // A refused method is refused before any check runs.
    assert_eq!(ep.agent.checks(), 0);
}

#[tokio::test]
async fn head_sends_the_head_of_get_and_no_body() {
    let ep = endpoint().await;
    let mut conn = connect(ep.addr).await;
    let head = ask(&mut conn, "HEAD", "/metrics").await;
    assert_eq!(head.status, "HTTP/1.1 200 OK");
    assert_eq!(
        head.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    // The next answer on the connection starts right after HEAD's head: no body bytes came.
    let get = ask(&mut conn, "GET", "/metrics").await;
    assert_eq!(get.status, "HTTP/1.1 200 OK");
    assert_eq!(
        head.header("content-length"),
        Some(get.body.len().to_string().as_str())
    );
}

#[tokio::test]
async fn keep_alive_serves_two_requests_on_one_connection() {
    let ep = endpoint().await;
    let mut conn = connect(ep.addr).await;
    let first = ask(&mut conn, "GET", "/metrics").await;
    let second = ask(&mut conn, "GET", "/metrics").await;
    assert_eq!(first.status, "HTTP/1.1 200 OK");
    assert_eq!(second.status, "HTTP/1.1 200 OK");
    assert!(second.body.contains("leasehold_active_tasks"));
}

#[tokio::test(start_paused = true)]
async fn a_client_that_stalls_in_its_request_head_is_cut_off() {
    let ep = endpoint().await;
    let mut conn = connect(ep.addr).await;
    conn.get_mut().write_all(b"GET /metr").await.unwrap();
    let started = Instant::now();
    assert!(
        timeout(HEADER_READ_TIMEOUT * 2, closed(&mut conn))
            .await
            .unwrap()
    );
    let waited = started.elapsed();
    assert!(
        waited >= HEADER_READ_TIMEOUT && waited < HEADER_READ_TIMEOUT + Duration::from_secs(1),
        "closed after {waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_idle_keep_alive_connection_is_closed_after_the_header_timeout() {
    let ep = endpoint().await;
    let mut conn = connect(ep.addr).await;
    ask(&mut conn, "GET", "/metrics").await;
    let started = Instant::now();
    assert!(
        timeout(HEADER_READ_TIMEOUT * 2, closed(&mut conn))
            .await
            .unwrap()
    );
    assert!(started.elapsed() >= HEADER_READ_TIMEOUT);
}

#[tokio::test]
async fn a_connection_beyond_the_limit_waits_for_a_slot() {
    let ep = endpoint().await;
    // Fill every slot with an idle keep-alive connection that has been served (so it holds one).
    let mut held = Vec::new();
    for _ in 0..MAX_CONNECTIONS {
        let mut conn = connect(ep.addr).await;
        assert_eq!(ask(&mut conn, "GET", "/").await.status, "HTTP/1.1 200 OK");
        held.push(conn);
    }
    // The next one connects (the kernel's backlog) but is not accepted, so not answered.
    let mut late = connect(ep.addr).await;
    late.get_mut()
        .write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut byte = [0u8; 1];
    assert!(
        timeout(Duration::from_millis(500), late.read(&mut byte))
            .await
            .is_err(),
        "the connection beyond the limit was answered"
    );
    // A slot frees: the waiting connection is accepted and served.
    drop(held.pop());
    let answer = timeout(Duration::from_secs(2), read_answer(&mut late, false))
        .await
        .unwrap();
    assert_eq!(answer.status, "HTTP/1.1 200 OK");
}

#[tokio::test]
async fn cancel_closes_the_listener_and_open_connections() {
    let ep = endpoint().await;
    let mut idle = connect(ep.addr).await;
    ask(&mut idle, "GET", "/metrics").await;
    ep.cancel.cancel();
    timeout(SHUTDOWN_GRACE * 2, ep.served)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(timeout(SHUTDOWN_GRACE, closed(&mut idle)).await.unwrap());
    assert!(TcpStream::connect(ep.addr).await.is_err());
}

// ---------------------------------------------------------------------------------------------
// /healthz and /readyz over HTTP

#[tokio::test]
async fn healthz_is_ok_and_never_asks_the_database() {
    let agent = FakeAgent::new(FakeAnswer::Hangs);
    agent.draining.store(true, Ordering::SeqCst);
    let ep = endpoint_of(agent).await;
    let mut conn = connect(ep.addr).await;
    let answer = ask(&mut conn, "GET", "/healthz").await;
    assert_eq!(answer.status, "HTTP/1.1 200 OK");
    assert_eq!(
        answer.header("content-type"),
        Some("text/plain; charset=utf-8")
    );
    assert_eq!(answer.body, "ok\n");
    let head = ask(&mut conn, "HEAD", "/healthz").await;
    assert_eq!(head.status, "HTTP/1.1 200 OK");
    assert_eq!(head.header("content-length"), Some("3"));
    // The HEAD sent no body: the next answer on the connection parses.
    assert_eq!(ask(&mut conn, "GET", "/healthz").await.body, "ok\n");
    assert_eq!(ep.agent.checks(), 0, "/healthz asked the database");
}

#[tokio::test]
async fn readyz_is_200_listing_the_checks_when_ready() {
    let ep = endpoint().await;
    let mut conn = connect(ep.addr).await;
    let answer = ask(&mut conn, "GET", "/readyz").await;
    assert_eq!(answer.status, "HTTP/1.1 200 OK", "{answer:?}");
    assert_eq!(
        answer.header("content-type"),
        Some("text/plain; charset=utf-8")
    );
    assert_eq!(
        answer.body,
        "ready\n\
         database: ok\n\
         migrations: ok (12 applied, 12 known to this build)\n\
         draining: no\n"
    );
    let head = ask(&mut conn, "HEAD", "/readyz").await;
    assert_eq!(head.status, "HTTP/1.1 200 OK");
    assert_eq!(
        head.header("content-length"),
        Some(answer.body.len().to_string().as_str())
    );
    assert_eq!(
        ask(&mut conn, "GET", "/readyz").await.status,
        "HTTP/1.1 200 OK"
    );
}

#[tokio::test]
async fn readyz_is_503_naming_each_failing_check() {
    let agent = FakeAgent::new(FakeAnswer::Fails);
    let ep = endpoint_of(Arc::clone(&agent)).await;
    let answer = ask(&mut connect(ep.addr).await, "GET", "/readyz").await;
    assert_eq!(
        answer.status, "HTTP/1.1 503 Service Unavailable",
        "{answer:?}"
    );
    assert!(
        answer.body.starts_with("not ready: database\n"),
        "{}",
        answer.body
    );
    assert!(
        answer.body.contains("database: migrations_applied is busy"),
        "the reason is quoted: {}",
        answer.body
    );
    assert!(answer.body.contains("draining: no\n"), "{}", answer.body);

    // The database answers but lacks a migration, and the agent drains: both are named.
    agent.set(FakeAnswer::Migrated {
        applied: 11,
        known: 12,
    });
    agent.draining.store(true, Ordering::SeqCst);
    let answer = wait_for_body(ep.addr, "not ready: migrations, draining\n").await;
    assert_eq!(answer.status, "HTTP/1.1 503 Service Unavailable");
    assert!(answer.body.contains("database: ok\n"), "{}", answer.body);
    assert!(
        answer
            .body
            .contains("migrations: 11 of 12 applied: run `leasehold-agent migrate`"),
        "{}",
        answer.body
    );
    assert!(answer.body.contains("draining: yes"), "{}", answer.body);
}

#[tokio::test]
async fn readyz_accepts_a_database_ahead_of_this_build() {
    let ep = endpoint_of(FakeAgent::new(FakeAnswer::Migrated {
        applied: 13,
        known: 12,
    }))
    .await;
    let answer = ask(&mut connect(ep.addr).await, "GET", "/readyz").await;
    assert_eq!(answer.status, "HTTP/1.1 200 OK", "{answer:?}");
}

/// GETs `/readyz` (on fresh connections, past the cache) until its body starts with `head`.
async fn wait_for_body(addr: SocketAddr, head: &str) -> Answer {
    let deadline = Instant::now() + DATABASE_CHECK_TTL * 5;
    loop {
        let answer = ask(&mut connect(addr).await, "GET", "/readyz").await;
        if answer.body.starts_with(head) {
            return answer;
        }
        assert!(Instant::now() < deadline, "never {head:?}; last {answer:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// The readiness checks themselves (paused time)

#[tokio::test(start_paused = true)]
async fn a_database_that_does_not_answer_is_reported_within_the_timeout() {
    let agent = FakeAgent::new(FakeAnswer::Hangs);
    let readiness = Readiness::new(Arc::clone(&agent) as Arc<dyn ReadinessSource>);
    let started = Instant::now();
    let report = readiness.check().await;
    let waited = started.elapsed();
    assert!(
        waited >= DATABASE_TIMEOUT && waited < DATABASE_TIMEOUT + Duration::from_millis(100),
        "answered after {waited:?}"
    );
    assert!(!report.ready);
    assert!(
        report
            .body
            .starts_with("not ready: database\ndatabase: no answer within 2s\n"),
        "{}",
        report.body
    );
}

#[tokio::test(start_paused = true)]
async fn concurrent_probes_share_one_database_check_and_reuse_it_for_the_ttl() {
    let agent = FakeAgent::slow(UP, Duration::from_millis(300));
    let readiness = Readiness::new(Arc::clone(&agent) as Arc<dyn ReadinessSource>);
    let reports = futures_util::future::join_all((0..50).map(|_| readiness.check())).await;
    assert!(reports.iter().all(|r| r.ready));
    assert_eq!(agent.checks(), 1, "50 concurrent probes, one check");
    // Within the TTL the result is reused, failing database or not.
    agent.set(FakeAnswer::Fails);
    tokio::time::advance(DATABASE_CHECK_TTL - Duration::from_millis(10)).await;
    assert!(readiness.check().await.ready);
    assert_eq!(agent.checks(), 1);
    // Past it, the database is asked again and the failure shows.
    tokio::time::advance(Duration::from_millis(20)).await;
    assert!(!readiness.check().await.ready);
    assert_eq!(agent.checks(), 2);
}

#[tokio::test(start_paused = true)]
async fn draining_shows_at_once_whatever_the_cache_holds() {
    let agent = FakeAgent::new(UP);
    let readiness = Readiness::new(Arc::clone(&agent) as Arc<dyn ReadinessSource>);
    assert!(readiness.check().await.ready);
    agent.draining.store(true, Ordering::SeqCst);
    let report = readiness.check().await;
    assert!(!report.ready);
    assert!(
        report.body.starts_with("not ready: draining\n"),
        "{}",
        report.body
    );
    assert_eq!(agent.checks(), 1, "the database result came from the cache");
}

#[test]
fn a_long_or_multi_line_reason_is_cut_to_one_line() {
    let reason = super::health::one_line(&format!("first\nsecond\r{}", "x".repeat(500)));
    assert!(reason.starts_with("first second "), "{reason}");
    assert!(!reason.contains('\n') && !reason.contains('\r'));
    assert_eq!(
        reason.chars().count(),
        201,
        "200 characters and an ellipsis"
    );
    assert!(reason.ends_with('…'));
}

fn backlog_row(task_type: &str, depth: u64, oldest: f64, dead: u64) -> BacklogRow {
    BacklogRow {
        task_type: task_type.to_string(),
        depth,
        oldest_waiting_seconds: oldest,
        dead,
    }
}

/// The backlog lines of `text`, sorted.
fn backlog_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| {
            !l.starts_with('#')
                && (l.starts_with("leasehold_queue_depth")
                    || l.starts_with("leasehold_oldest_waiting_seconds")
                    || l.starts_with("leasehold_dead_letters"))
        })
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

#[test]
fn backlog_gauges_follow_the_listed_types_and_go_when_cleared() {
    let m = Metrics::new();
    // None before the first refresh: a follower exports nothing, not zeros.
    assert!(backlog_lines(&m.encode()).is_empty());
    m.set_backlog(&[
        backlog_row("email", 7, 12.5, 1),
        backlog_row("pdf", 0, 0.0, 3),
    ]);
    assert_eq!(
        backlog_lines(&m.encode()),
        [
            "leasehold_dead_letters{task_type=\"email\"} 1",
            "leasehold_dead_letters{task_type=\"pdf\"} 3",
            "leasehold_oldest_waiting_seconds{task_type=\"email\"} 12.5",
            "leasehold_oldest_waiting_seconds{task_type=\"pdf\"} 0.0",
            "leasehold_queue_depth{task_type=\"email\"} 7",
            "leasehold_queue_depth{task_type=\"pdf\"} 0",
        ]
    );
    // pdf disappears, sms appears, email changes.
    m.set_backlog(&[
        backlog_row("email", 2, 1.0, 0),
        backlog_row("sms", 4, 3.0, 0),
    ]);
    assert_eq!(
        backlog_lines(&m.encode()),
        [
            "leasehold_dead_letters{task_type=\"email\"} 0",
            "leasehold_dead_letters{task_type=\"sms\"} 0",
            "leasehold_oldest_waiting_seconds{task_type=\"email\"} 1.0",
            "leasehold_oldest_waiting_seconds{task_type=\"sms\"} 3.0",
            "leasehold_queue_depth{task_type=\"email\"} 2",
            "leasehold_queue_depth{task_type=\"sms\"} 4",
        ]
    );
    // Leadership lost: every series goes (an empty family is not encoded at all).
    m.clear_backlog();
    let text = m.encode();
    assert!(backlog_lines(&text).is_empty(), "{text}");
    assert!(!text.contains("leasehold_queue_depth"), "{text}");
    // And comes back on the next refresh as leader.
    m.set_backlog(&[backlog_row("email", 1, 0.0, 0)]);
    assert_eq!(backlog_lines(&m.encode()).len(), 3);
    m.set_backlog(&[]);
    assert!(backlog_lines(&m.encode()).is_empty());
}

#[test]
fn backlog_gauges_are_capped_at_a_thousand_types() {
    let m = Metrics::new();
    let rows: Vec<BacklogRow> = (0..BACKLOG_TYPES_CAP + 5)
        .map(|i| backlog_row(&format!("t{i:05}"), 1, 0.0, 0))
        .collect();
    m.set_backlog(&rows);
    let depth = backlog_lines(&m.encode())
        .iter()
        .filter(|l| l.starts_with("leasehold_queue_depth"))
        .count();
    assert_eq!(depth, BACKLOG_TYPES_CAP);
    // The capped ones are not left behind by a later, shorter list.
    m.set_backlog(&rows[..2]);
    assert_eq!(backlog_lines(&m.encode()).len(), 6);
}
