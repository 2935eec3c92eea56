//! The `leasehold` binary against a fake agent serving TLS and mutual TLS (test certificates
//! in `fixtures/tls/`), and against endpoints that never answer: exit 3 with a message that
//! says what went wrong.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// The fake agent answers with the words only, as agents before the state and outcome enums
// did: the commands must print the same from them.
#![allow(deprecated)]

mod support;

use support::{Fake, Transport, fixture_path, leasehold, stderr, stdout};

#[tokio::test(flavor = "multi_thread")]
async fn a_call_that_gets_no_answer_is_a_deadline() {
    // A socket that accepts TCP but never speaks HTTP/2.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let o = leasehold(
        &["--agent", &addr, "--call-timeout", "300ms", "tasks", "ls"],
        &[],
    )
    .await;
    assert_eq!(o.status.code(), Some(3));
    assert_eq!(
        stderr(&o),
        "leasehold: list tasks: no answer within 300ms (deadline exceeded)\n"
    );
    let o = leasehold(&["--agent", &addr, "--call-timeout", "300ms", "watch"], &[]).await;
    assert_eq!(o.status.code(), Some(3));
    assert!(
        stderr(&o).ends_with("(deadline exceeded)\n"),
        "{}",
        stderr(&o)
    );
    drop(listener);
}

fn path(name: &str) -> String {
    fixture_path(name).to_string_lossy().into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn tls_with_the_right_ca_works_and_the_server_name_can_be_set() {
    let running = Fake::new().start(Transport::Tls).await;
    let port = running.addr.port();
    let localhost = format!("localhost:{port}");
    let o = leasehold(
        &[
            "--agent",
            &localhost,
            "--ca",
            &path("ca.pem"),
            "agents",
            "ls",
        ],
        &[],
    )
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let https = format!("https://localhost:{port}");
    let o = leasehold(
        &["--agent", &https, "agents", "ls"],
        &[("LEASEHOLD_CA", &path("ca.pem"))],
    )
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let ip = format!("127.0.0.1:{port}");
    let o = leasehold(
        &[
            "--agent",
            &ip,
            "--ca",
            &path("ca.pem"),
            "--tls-server-name",
            "agent.test",
            "agents",
            "ls",
        ],
        &[],
    )
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = leasehold(
        &[
            "--agent",
            &ip,
            "--ca",
            &path("ca.pem"),
            "--tls-server-name",
            "wrong.test",
            "agents",
            "ls",
        ],
        &[],
    )
    .await;
    assert_eq!(o.status.code(), Some(3));
    assert!(
        stderr(&o).contains("cannot reach agent at"),
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).to_lowercase().contains("certificate"),
        "{}",
        stderr(&o)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_ca_is_exit_3_and_says_why() {
    let running = Fake::new().start(Transport::Tls).await;
    let addr = format!("localhost:{}", running.addr.port());
    let o = leasehold(
        &[
            "--agent",
            &addr,
            "--ca",
            &path("other-ca.pem"),
            "agents",
            "ls",
        ],
        &[],
    )
    .await;
    assert_eq!(o.status.code(), Some(3));
    let err = stderr(&o);
    assert!(
        err.starts_with(&format!("leasehold: cannot reach agent at {addr}: ")),
        "{err}"
    );
    assert!(err.contains("invalid peer certificate"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn plaintext_against_tls_and_tls_against_plaintext_are_exit_3_and_say_so() {
    let tls = Fake::new().start(Transport::Tls).await;
    let o = leasehold(&["--agent", &tls.addr.to_string(), "agents", "ls"], &[]).await;
    assert_eq!(o.status.code(), Some(3));
    let err = stderr(&o);
    assert!(err.contains("plaintext") && err.contains("--ca"), "{err}");
    let plain_addr = Fake::new().start(Transport::Plain).await.addr.to_string();
    let addr = plain_addr.replace("127.0.0.1", "localhost");
    let o = leasehold(
        &["--agent", &addr, "--ca", &path("ca.pem"), "agents", "ls"],
        &[],
    )
    .await;
    assert_eq!(o.status.code(), Some(3));
    let err = stderr(&o);
    assert!(err.contains("cannot reach agent at"), "{err}");
    assert!(err.contains("the agent may serve plaintext"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn mutual_tls_needs_the_client_certificate() {
    let running = Fake::new().start(Transport::MutualTls).await;
    let addr = format!("localhost:{}", running.addr.port());
    let o = leasehold(
        &[
            "--agent",
            &addr,
            "--ca",
            &path("ca.pem"),
            "--cert",
            &path("client.pem"),
            "--key",
            &path("client.key"),
            "agents",
            "ls",
        ],
        &[],
    )
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = leasehold(
        &["--agent", &addr, "agents", "ls"],
        &[
            ("LEASEHOLD_CA", &path("ca.pem")),
            ("LEASEHOLD_CERT", &path("client.pem")),
            ("LEASEHOLD_KEY", &path("client.key")),
        ],
    )
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = leasehold(
        &["--agent", &addr, "--ca", &path("ca.pem"), "agents", "ls"],
        &[],
    )
    .await;
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    // Depending on timing the client sees the agent's CertificateRequired alert or only the
    // connection closing; either way the message points at the client certificate.
    let err = stderr(&o);
    assert!(err.contains("--cert") && err.contains("--key"), "{err}");
    assert_eq!(stdout(&o), "");
}
