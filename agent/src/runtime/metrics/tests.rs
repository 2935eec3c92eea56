//! Tests of the metrics registry and of the `/metrics` endpoint over real TCP on 127.0.0.1.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

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

/// A metrics endpoint on an ephemeral port, serving until `cancel`.
struct Endpoint {
    addr: SocketAddr,
    cancel: CancellationToken,
    served: JoinHandle<std::io::Result<()>>,
}

async fn endpoint() -> Endpoint {
    let listener = bind_metrics(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let metrics = Arc::new(Metrics::new());
    metrics.register_types(["email"]);
    let cancel = CancellationToken::new();
    let served = tokio::spawn(serve_metrics(listener, metrics, cancel.clone()));
    Endpoint {
        addr,
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
    for method in ["POST", "PUT", "DELETE"] {
        let answer = ask(&mut conn, method, "/metrics").await;
        assert_eq!(answer.status, "HTTP/1.1 405 Method Not Allowed", "{method}");
        assert_eq!(answer.header("allow"), Some("GET, HEAD"));
    }
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
