#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Bad requests on the wire against a real agent (TESTING.md T30, T31; DESIGN §10: "bad input
//! changes nothing"): payloads and messages above the limits, gzip bombs, garbage protobuf,
//! broken gRPC framing and wrong compression over raw HTTP/2. Every refusal is checked in the
//! database (`tasks` and `policies` compared row for row before and after) and the agent must
//! still answer afterwards.

use leasehold_proto::v1 as pb;
use leasehold_tests::calls::grpc::{Failures, Fixture, WAIT, alive, assert_refused, start, stop};
use leasehold_tests::grpc::connect;
use leasehold_tests::{TaskSpec, TestDb, audit_rows, insert_task};
use sqlx::PgPool;
use tonic::Code;
use tonic::codec::CompressionEncoding;

/// Rows of `tasks` and `policies`, as text.
async fn digest(pool: &PgPool) -> (String, String) {
    leasehold_tests::inspect::state_digest(pool, &[])
        .await
        .unwrap()
}

fn enqueue(task_type: &str) -> pb::EnqueueRequest {
    pb::EnqueueRequest {
        task_type: task_type.into(),
        ..Default::default()
    }
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
    Fixture::insert(&db.pool).await.unwrap();
    let (mut agent, addr) = start(&db, "bad-sizes", &[]).await.unwrap();
    let mut c = connect(&addr)
        .await
        .unwrap()
        .max_encoding_message_size(usize::MAX);
    let before = digest(&db.pool).await;
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
    assert_refused(
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
    assert_refused("5 MiB message", r, &[Code::ResourceExhausted], "");

    // The same 2 MiB payload compressed: a small message on the wire, refused after
    // decompression by the payload limit.
    let mut gz = c.clone().send_compressed(CompressionEncoding::Gzip);
    let r = gz
        .enqueue(pb::EnqueueRequest {
            payload_json: two_mib,
            ..enqueue("big.kind")
        })
        .await;
    assert_refused(
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
        assert_refused("gzip bomb", r, &[Code::ResourceExhausted], "");
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
    let after = digest(&db.pool).await;
    assert_eq!(after.1, before.1, "policies unchanged");
    alive(&mut agent, &mut c).await.unwrap();

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
    alive(&mut agent, &mut c).await.unwrap();
    drop((c, gz));
    stop(agent).await.unwrap();
    db.drop_db().await.unwrap();
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
    Fixture::insert(&db.pool).await.unwrap();
    let (mut agent, addr) = start(&db, "bad-frames", &[]).await.unwrap();
    let mut c = connect(&addr).await.unwrap();
    let before = digest(&db.pool).await;
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
    let mut failures = Failures::default();
    for (what, method, headers, body, expect) in cases {
        let got = raw_call(&addr, method, &headers, body).await;
        report.push(format!("{what} ({method}): {got}"));
        let outcome = if expect.iter().any(|e| got.starts_with(e)) {
            Ok(())
        } else {
            Err(format!("got {got}, expected one of {expect:?}"))
        };
        failures.check(&format!("{what} ({method})"), outcome);
        alive(&mut agent, &mut c).await.unwrap();
    }
    eprintln!("{}", report.join("\n"));
    failures.assert_none();
    // Positive control: a well-formed raw request works, unknown fields are ignored.
    let ok = raw_call(&addr, "ListAgents", &[], msg(&[0xf8, 0x06, 0x01])).await;
    assert!(
        ok.starts_with("0"),
        "a well-formed request with an unknown field: {ok}"
    );
    assert_eq!(digest(&db.pool).await, before, "nothing changed");
    assert_eq!(
        audit_rows(&db.pool).await.unwrap().len(),
        0,
        "no malformed call reached an action"
    );
    drop(c);
    stop(agent).await.unwrap();
    db.drop_db().await.unwrap();
}
