#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The agent's transport against real agent processes (issue 19 "Transport", DESIGN "Local
//! access"): TCP connections that never finish a TLS handshake (or never send a byte) are
//! closed after `--tls-handshake-timeout` while real clients are still served; the per-peer
//! cap closes the connection beyond it at once; the local Unix socket is private (0600 in a
//! 0700 directory), serves gRPC, is removed on a clean stop, replaced when stale after
//! `kill -9`, and a live one is never taken over.

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use leasehold_proto::v1 as pb;
use leasehold_tests::agent::AgentHandle;
use leasehold_tests::certs::{SERVER_NAME, TestCerts};
use leasehold_tests::fleet::{spawn_agent, start_agent};
use leasehold_tests::grpc::{Client, ClientTls, connect, connect_unix, connect_with};
use leasehold_tests::local_access::socket_of;
use leasehold_tests::{TestDb, scratch_dir};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

const WAIT: Duration = Duration::from_secs(30);
const OPERATOR: &str = "operator-secret-0123456789abcdef";

/// The env of an agent whose runtime directory (and so its default socket) is `run_dir`.
fn runtime_env(run_dir: &Path) -> Vec<(String, String)> {
    vec![(
        "LEASEHOLD_RUNTIME_DIR".to_string(),
        run_dir.display().to_string(),
    )]
}

async fn start(db: &TestDb, name: &str, extra: &[&str], run_dir: &Path) -> (AgentHandle, String) {
    start_agent(db, name, "noop", extra, runtime_env(run_dir))
        .await
        .unwrap()
}

/// `n` TCP connections to `addr` that send nothing, and when the first was opened.
async fn open_idle(addr: &str, n: usize) -> (Instant, Vec<TcpStream>) {
    let opened = Instant::now();
    let mut idle = Vec::with_capacity(n);
    for _ in 0..n {
        idle.push(TcpStream::connect(addr).await.unwrap());
    }
    (opened, idle)
}

/// Spawns an agent that must refuse to start: exit 2; the end of its log.
async fn refused_start(db: &TestDb, name: &str, extra: &[&str], run_dir: &Path) -> String {
    let mut agent = spawn_agent(
        "leasehold-agent",
        &db.url,
        name,
        "noop",
        extra,
        runtime_env(run_dir),
    )
    .await
    .unwrap();
    let status = agent.wait_exit(WAIT).await.unwrap();
    let tail = agent.log_tail(20);
    assert_eq!(status.code(), Some(2), "{tail}");
    tail
}

/// A client over the socket at `path`, served by the agent whose id starts with `name`.
async fn socket_client(path: &Path, name: &str) -> Client {
    let mut client = connect_unix(path).await.unwrap();
    let agents = client
        .list_agents(pb::ListAgentsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(
        agents.agents.iter().any(|a| a.id.starts_with(name)),
        "{} is not served by {name}: {agents:?}",
        path.display()
    );
    client
}

fn port_of(addr: &str) -> u16 {
    addr.rsplit(':').next().unwrap().parse().unwrap()
}

/// How a connection that was sent nothing ends: `Some(elapsed since since)` once the agent
/// closed it (EOF or reset), `None` if it is still open after `limit`.
async fn closed_within(
    stream: &mut TcpStream,
    since: Instant,
    limit: Duration,
) -> Option<Duration> {
    let mut buf = [0u8; 64];
    let left = limit.saturating_sub(since.elapsed());
    match tokio::time::timeout(left, stream.read(&mut buf)).await {
        Ok(Ok(0)) | Ok(Err(_)) => Some(since.elapsed()),
        Ok(Ok(n)) => panic!("the agent sent {n} bytes to a client that sent nothing"),
        Err(_) => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_tcp_connections_are_closed_after_the_handshake_timeout() {
    let db = TestDb::new().await.unwrap();
    let certs = TestCerts::generate().unwrap();
    let run_dir = scratch_dir("leasehold-transport").unwrap().join("run");
    let config = certs.dir().join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "[tls]\ncert = {:?}\nkey = {:?}\n\n[[tokens]]\nname = \"oncall\"\nrole = \"operator\"\nsecret = {OPERATOR:?}\n",
            certs.server.cert_path, certs.server.key_path
        ),
    )
    .unwrap();
    let (agent, addr) = start(
        &db,
        "tls-idle",
        &[
            "--config",
            config.to_str().unwrap(),
            "--tls-handshake-timeout",
            "3s",
            "--grpc-max-connections-per-peer",
            "1000",
        ],
        &run_dir,
    )
    .await;

    let (opened, mut idle) = open_idle(&addr, 200).await;
    // While they hang, a real TLS client with a token is served.
    let tls = ClientTls {
        ca_pem: certs.ca.cert_pem.clone(),
        identity: None,
        domain: SERVER_NAME.into(),
    };
    let mut client = connect_with(&addr, Some(OPERATOR), Some(&tls))
        .await
        .unwrap();
    let agents = client
        .list_agents(pb::ListAgentsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(!agents.agents.is_empty());
    // The last idle connection is still open: the client was served while they all hung.
    let last = idle.last_mut().unwrap();
    assert_eq!(
        closed_within(last, Instant::now(), Duration::from_millis(50)).await,
        None,
        "the idle connections were closed before the client was served ({:?})",
        opened.elapsed()
    );

    // Every idle connection is closed, none before the timeout, all within it plus slack.
    let limit = Duration::from_secs(3 + 5);
    let mut earliest = limit;
    for (i, stream) in idle.iter_mut().enumerate() {
        let at = closed_within(stream, opened, limit)
            .await
            .unwrap_or_else(|| panic!("idle connection {i} still open after {limit:?}"));
        earliest = earliest.min(at);
    }
    assert!(
        earliest >= Duration::from_millis(2500),
        "an idle connection was closed after {earliest:?}, before the 3s timeout"
    );
    // The authenticated client's connection finished its handshake: it is still served.
    client.list_agents(pb::ListAgentsRequest {}).await.unwrap();

    drop(agent);
    db.drop_db().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_beyond_the_per_peer_cap_is_closed_at_once() {
    let db = TestDb::new().await.unwrap();
    let run_dir = scratch_dir("leasehold-transport").unwrap().join("run");
    let (agent, addr) = start(
        &db,
        "per-peer",
        &[
            "--grpc-max-connections-per-peer",
            "5",
            "--tls-handshake-timeout",
            "4s",
        ],
        &run_dir,
    )
    .await;

    let (opened, mut first) = open_idle(&addr, 5).await;
    // Let the agent accept the five before the sixth comes.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut sixth = TcpStream::connect(&addr).await.unwrap();
    let sixth_at = Instant::now();
    let closed = closed_within(&mut sixth, sixth_at, Duration::from_secs(1)).await;
    assert!(
        closed.is_some(),
        "the 6th connection of one peer stayed open"
    );
    for (i, stream) in first.iter_mut().enumerate() {
        let early = closed_within(stream, opened, Duration::from_secs(2)).await;
        assert_eq!(early, None, "connection {i} of 5 was closed early");
    }
    // They go at the handshake timeout, and their slots come back: a real client is served.
    for (i, stream) in first.iter_mut().enumerate() {
        let at = closed_within(stream, opened, Duration::from_secs(4 + 5)).await;
        assert!(
            at.is_some(),
            "connection {i} outlived the handshake timeout"
        );
    }
    drop(first);
    let mut client = connect(&addr).await.unwrap();
    client.list_agents(pb::ListAgentsRequest {}).await.unwrap();

    drop(agent);
    db.drop_db().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_socket_is_private_served_removed_and_never_taken_over() {
    let db = TestDb::new().await.unwrap();
    let run_dir = scratch_dir("leasehold-transport").unwrap().join("run");
    let me = leasehold_shared::local::current_uid().unwrap();

    // A clean start and stop: private, serving, removed.
    let (mut agent, addr) = start(&db, "sock-a", &[], &run_dir).await;
    let path = socket_of(&run_dir, &addr).unwrap();
    let meta = std::fs::symlink_metadata(&path).unwrap();
    assert!(
        meta.file_type().is_socket(),
        "{} is not a socket",
        path.display()
    );
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(meta.uid(), me);
    let dir = std::fs::symlink_metadata(&run_dir).unwrap();
    assert!(dir.file_type().is_dir());
    assert_eq!(dir.permissions().mode() & 0o777, 0o700);
    assert_eq!(dir.uid(), me);
    let client = socket_client(&path, "sock-a").await;
    let log = std::fs::read_to_string(agent.log_dir().join("stderr")).unwrap_or_default();
    assert!(
        log.contains(&path.display().to_string()),
        "the start log names the socket:\n{log}"
    );
    drop(client);
    agent.sigterm().unwrap();
    let status = agent.wait_exit(WAIT).await.unwrap();
    assert!(status.success(), "{status:?}");
    assert!(!path.exists(), "{} left after a clean stop", path.display());

    // kill -9 leaves a stale socket; the next agent on the same port replaces it.
    let (agent, addr) = start(&db, "sock-b", &[], &run_dir).await;
    let path = socket_of(&run_dir, &addr).unwrap();
    agent.kill9().unwrap();
    drop(agent);
    assert!(path.exists(), "kill -9 cannot remove the socket");
    let listen = format!("127.0.0.1:{}", port_of(&addr));
    let (agent_c, addr_c) = start(&db, "sock-c", &["--listen", &listen], &run_dir).await;
    assert_eq!(socket_of(&run_dir, &addr_c).unwrap(), path);
    let mut client = socket_client(&path, "sock-c").await;

    // A second agent pointed at the live socket refuses to start, and leaves it alone.
    let err = refused_start(
        &db,
        "sock-d",
        &["--socket", path.to_str().unwrap()],
        &run_dir,
    )
    .await;
    assert!(
        err.contains("another agent serves") && err.contains(&path.display().to_string()),
        "{err}"
    );
    client.list_agents(pb::ListAgentsRequest {}).await.unwrap();
    assert!(path.exists());

    drop(agent_c);
    db.drop_db().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unusable_socket_directory_refuses_the_start_naming_the_way_out() {
    let db = TestDb::new().await.unwrap();
    let base = scratch_dir("leasehold-transport").unwrap();
    let open = base.join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let err = refused_start(&db, "bad-dir", &[], &open).await;
    assert!(
        err.contains(&open.display().to_string()) && err.contains("--socket off"),
        "{err}"
    );
    // With the socket off the same agent starts.
    let (agent, _addr) = start(&db, "no-sock", &["--socket", "off"], &open).await;
    assert_eq!(std::fs::read_dir(&open).unwrap().count(), 0);
    drop(agent);
    db.drop_db().await.unwrap();
}
