#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Smoke test of the PgBouncer harness (issue 25): a private PgBouncer in transaction mode in
//! front of a private cluster answers queries; it refuses the startup parameters a stock
//! installation refuses (`extra_float_digits`, `options`: no `ignore_startup_parameters`), which
//! is what the agent's pooler detection has to cope with; the server connections it holds are
//! the ones [`server_connections`] counts on the upstream (over the unix socket, not the test's
//! own TCP connections); its admin console answers `SHOW POOLS`; and drop stops it.

use std::str::FromStr;
use std::time::Duration;

use leasehold_tests::cluster::test_pool;
use leasehold_tests::pgbouncer::{self, server_connections};
use leasehold_tests::{PgBouncer, PgBouncerOptions, PgCluster};
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};

#[tokio::test]
async fn pgbouncer_answers_in_transaction_mode_and_is_stopped_on_drop() {
    let cluster = PgCluster::start().await.unwrap();
    cluster.create_database("smoke").await.unwrap();
    let bouncer = PgBouncer::for_cluster(
        &cluster,
        PgBouncerOptions {
            default_pool_size: 3,
            ..PgBouncerOptions::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(bouncer.options().pool_mode, "transaction");
    let url = bouncer.url("smoke");
    assert_eq!(
        url,
        format!("postgres://postgres@127.0.0.1:{}/smoke", bouncer.port())
    );

    // A query through it reaches the right database.
    let mut conn = PgConnection::connect_with(&pgbouncer::client_options(&url).unwrap())
        .await
        .unwrap();
    let rows = sqlx::raw_sql("SELECT current_database()")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    let name: String = sqlx::Row::get(&rows[0], 0);
    assert_eq!(name, "smoke");

    // PgBouncer's server connection is counted on the upstream; the test's own TCP
    // connection to the same database is not.
    let direct = test_pool(&cluster.url("smoke")).await.unwrap();
    let servers = server_connections(&direct, "smoke").await.unwrap();
    assert_eq!(servers, 1, "server connections PgBouncer holds to smoke");
    let stats = bouncer.pool_stats("smoke").await.unwrap();
    assert_eq!(stats.servers(), 1, "{stats:?}");
    assert_eq!(stats.clients(), 1, "{stats:?}");
    conn.close().await.unwrap();

    // A stock PgBouncer refuses what it does not track: sqlx's default extra_float_digits …
    let default = PgConnectOptions::from_str(&url).unwrap();
    let refused = PgConnection::connect_with(&default).await.unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("unsupported startup parameter"),
        "{refused}"
    );
    // … and the `options` parameter (session settings at connect).
    let with_options = pgbouncer::client_options(&url)
        .unwrap()
        .options([("statement_timeout", "5s")]);
    let refused = PgConnection::connect_with(&with_options).await.unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("unsupported startup parameter"),
        "{refused}"
    );

    let port = bouncer.port();
    let dir = bouncer.dir().to_path_buf();
    drop(bouncer);
    assert!(!dir.exists(), "{} left behind", dir.display());
    let gone = tokio::time::timeout(
        Duration::from_secs(3),
        tokio::net::TcpStream::connect(("127.0.0.1", port)),
    )
    .await
    .map(|r| r.is_err())
    .unwrap_or(true);
    assert!(gone, "something still listens on PgBouncer's port {port}");
    direct.close().await;
}
