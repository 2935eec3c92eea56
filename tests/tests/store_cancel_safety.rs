#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! A store call cancelled while its `BEGIN` is in flight must not leave the pooled connection
//! inside that transaction. The agent cancels store calls all the time (claim, renewal and
//! maintenance step timeouts); with sqlx 0.9.0 a cancel in that window returned the connection
//! to the pool still in the transaction, so the next borrower's statements ran inside it: its
//! `now()` was the old BEGIN's time (T05 saw an attempt "end" 17 ms before its claim started)
//! and its writes and locks rode on a transaction someone else would commit. Fixed upstream in
//! sqlx 0.9.1 (`PgTransactionManager::begin` claims the depth before the round trip), which the
//! workspace now requires.

use std::time::Duration;

use leasehold_shared::store::Store;
use leasehold_shared::store::postgres::{PgStore, PgStoreOptions};
use leasehold_tests::proxy::addr_of_url;
use leasehold_tests::{ProxyMode, TcpProxy, TestDb};

/// Each way, so a round trip takes twice this.
const LATENCY: Duration = Duration::from_millis(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cancelled_during_begin_leaves_no_transaction_open_on_its_connection() {
    let db = TestDb::new().await.unwrap();
    let proxy = TcpProxy::start(addr_of_url(&db.url).await.unwrap())
        .await
        .unwrap();
    let app = "lh-cancel-safety";
    let store = PgStore::connect(
        &proxy.url_for(&db.url),
        PgStoreOptions {
            max_connections: 1,
            application_name: app.into(),
            // Long enough that the server does not end a leaked transaction itself.
            idle_in_transaction_timeout: Duration::from_secs(120),
            ..PgStoreOptions::default()
        },
    )
    .await
    .unwrap();
    // The one connection is open and idle. Under latency, time a whole `begin` (the pool's
    // liveness ping, then the BEGIN), then cancel the next one while the BEGIN's reply is on
    // its way back: the BEGIN has reached the server, the caller is gone.
    store.pool().acquire().await.unwrap();
    proxy.set_mode(ProxyMode::Latency(LATENCY));
    let started = std::time::Instant::now();
    let tx = store.pool().begin().await.unwrap();
    let whole = started.elapsed();
    tx.commit().await.unwrap();
    let cancelled = tokio::time::timeout(whole - LATENCY / 2, store.pool().begin()).await;
    assert!(cancelled.is_err(), "the begin was expected to be cancelled");
    proxy.set_mode(ProxyMode::Pass);
    // Let the delayed BEGIN reach the server and its reply drain.
    tokio::time::sleep(6 * LATENCY).await;

    // Positive control: the BEGIN did reach the server (else the test proves nothing). The
    // session's last statement is that BEGIN, or the ROLLBACK that ended it.
    let begun: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 \
         AND (query ILIKE 'BEGIN%' OR query ILIKE 'ROLLBACK%')",
    )
    .bind(app)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(begun, 1, "the cancelled BEGIN never reached the server");

    // The next borrower runs in a transaction of its own: its `now()` is not older than a
    // moment taken after the cancel, and afterwards the session is idle, not in a transaction.
    let mark: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("SELECT clock_timestamp()")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let now: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("SELECT now()")
        .fetch_one(store.pool())
        .await
        .unwrap();
    let fresh = now >= mark;
    let state: String =
        sqlx::query_scalar("SELECT state FROM pg_stat_activity WHERE application_name = $1")
            .bind(app)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(
        fresh,
        "the next statement ran inside the cancelled call's transaction"
    );
    assert_eq!(state, "idle", "the connection was left in a transaction");
    // And the store's own calls work on it.
    store.db_now().await.unwrap();
}
