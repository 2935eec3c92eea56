#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The PostgreSQL store run as behind a transaction pooler (issue 25; `--pooler transaction`,
//! forced here against PostgreSQL itself, so that what is measured is the store's own
//! behaviour and not the pooler's): every statement it runs on its own runs in a transaction
//! of its own that carries the store's settings (`SET LOCAL` with the BEGIN), since the
//! startup `options` that carry them on a direct connection cannot pass a pooler. The
//! statement timeout is the observable one: a cancel waiting on a row lock another session
//! holds is ended by it. The end-to-end runs through a real PgBouncer are in `pgbouncer.rs`.

use std::time::{Duration, Instant};

use leasehold_shared::store::postgres::{PgStore, PgStoreOptions, Pooler};
use leasehold_shared::store::{CancelOutcome, CancelParams, Store};
use leasehold_shared::{Actor, StoreError, TaskId};
use leasehold_tests::factory::{TaskSpec, insert_task};
use leasehold_tests::helpers::claim;
use leasehold_tests::proxy::addr_of_url;
use leasehold_tests::{PgBouncer, PgBouncerOptions, ProxyMode, TcpProxy, TestDb};

const TIMEOUT: Duration = Duration::from_millis(300);

async fn store(db: &TestDb, pooler: Pooler) -> PgStore {
    PgStore::connect(
        &db.url,
        PgStoreOptions {
            max_connections: 2,
            statement_timeout: Some(TIMEOUT),
            pooler,
            ..PgStoreOptions::default()
        },
    )
    .await
    .unwrap()
}

/// A cancel of task `id` while another session holds its row lock: what the store says, and
/// how long it waited.
async fn cancel_while_locked(
    db: &TestDb,
    store: &PgStore,
    id: i64,
) -> (Result<CancelOutcome, StoreError>, Duration) {
    let mut holder = db.pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM tasks WHERE id = $1 FOR UPDATE")
        .bind(id)
        .execute(&mut *holder)
        .await
        .unwrap();
    let started = Instant::now();
    let cancelled = tokio::time::timeout(
        Duration::from_secs(10),
        store.task_cancel(CancelParams {
            id: TaskId(id),
            actor: Actor::operator("test"),
        }),
    )
    .await
    .expect("the cancel waited 10 s: no statement timeout in effect");
    let waited = started.elapsed();
    holder.rollback().await.unwrap();
    (cancelled, waited)
}

fn is_statement_timeout(e: &StoreError) -> bool {
    format!("{e:?}").contains("57014") || e.to_string().contains("statement timeout")
}

#[tokio::test]
async fn the_settings_hold_in_every_transaction_behind_a_pooler() {
    let db = TestDb::new().await.unwrap();
    let pooled = store(&db, Pooler::Transaction).await;
    assert!(pooled.behind_pooler());
    let id = insert_task(&db.pool, TaskSpec::new("ops", "queued"))
        .await
        .unwrap();
    let (cancelled, waited) = cancel_while_locked(&db, &pooled, id).await;
    match &cancelled {
        Err(e) if is_statement_timeout(e) => {}
        other => panic!("expected the statement timeout, got {other:?}"),
    }
    assert!(waited < Duration::from_secs(3), "waited {waited:?}");
    // Nothing changed, and the store's connection is usable afterwards (no transaction left
    // open on it): the same cancel now goes through.
    let status: String = sqlx::query_scalar("SELECT status::text FROM tasks WHERE id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(status, "queued");
    let done = pooled
        .task_cancel(CancelParams {
            id: TaskId(id),
            actor: Actor::operator("test"),
        })
        .await
        .unwrap();
    assert_eq!(done, CancelOutcome::Cancelled);
    pooled.close().await;
    db.drop_db().await.unwrap();
}

/// Positive control for the test above: a store straight to PostgreSQL is recognised as such,
/// its settings travel with the connection, and the same wait ends the same way.
#[tokio::test]
async fn straight_to_postgres_is_recognised_and_the_settings_hold_too() {
    let db = TestDb::new().await.unwrap();
    let direct = store(&db, Pooler::Auto).await;
    assert!(!direct.behind_pooler());
    let id = insert_task(&db.pool, TaskSpec::new("ops", "queued"))
        .await
        .unwrap();
    let (cancelled, waited) = cancel_while_locked(&db, &direct, id).await;
    assert!(
        matches!(&cancelled, Err(e) if is_statement_timeout(e)),
        "{cancelled:?}"
    );
    assert!(waited < Duration::from_secs(3), "waited {waited:?}");
    direct.close().await;
    db.drop_db().await.unwrap();
}

/// Claims behind a pooler (a batch statement in a transaction of its own); `migrate` on an
/// up-to-date database has nothing to do and says so without taking the migrator's lock.
#[tokio::test]
async fn claims_run_and_an_up_to_date_database_needs_no_migration_behind_a_pooler() {
    let db = TestDb::new().await.unwrap();
    let pooled = store(&db, Pooler::Transaction).await;
    for _ in 0..5 {
        insert_task(&db.pool, TaskSpec::new("ops", "queued"))
            .await
            .unwrap();
    }
    let batch = pooled.task_claim(claim("a", &["ops"], 10)).await.unwrap();
    assert_eq!(batch.tasks.len(), 5);
    pooled.migrate().await.unwrap();
    pooled.close().await;
    db.drop_db().await.unwrap();
}

/// A pending migration behind a pooler is refused (its lock is a session's, which the pooler
/// would leave held on one of its server connections), and nothing is applied.
#[tokio::test]
async fn a_pending_migration_is_refused_behind_a_pooler() {
    let db = TestDb::new_empty().await.unwrap();
    let pooled = store(&db, Pooler::Transaction).await;
    match pooled.migrate().await {
        Err(StoreError::Invalid(e)) => {
            assert!(e.to_string().contains("direct connection"), "{e}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let tables: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(tables, 0, "nothing may be applied");
    pooled.close().await;
    db.drop_db().await.unwrap();
}

/// `--notify-database-url` names one server: LISTEN is refused on a standby, so a list has
/// nothing to fail over to. Refused as bad input before anything connects.
#[tokio::test]
async fn a_notify_url_naming_several_servers_is_refused() {
    let db = TestDb::new().await.unwrap();
    let refused = PgStore::connect(
        &db.url,
        PgStoreOptions {
            notify_url: Some("postgres://u@h1:5432,h2:5432/db".into()),
            ..PgStoreOptions::default()
        },
    )
    .await;
    match refused {
        Err(StoreError::Invalid(e)) => {
            let text = e.to_string();
            assert!(text.starts_with("notify_database_url"), "{text}");
            assert!(text.contains("one server"), "{text}");
        }
        other => panic!("expected a refusal, got {:?}", other.map(|_| "a store")),
    }
    db.drop_db().await.unwrap();
}

/// A PgBouncer told to ignore the startup `options` (`ignore_startup_parameters = options`)
/// drops the settings without a word, and a database set up to look like them
/// (`plan_cache_mode = force_generic_plan`, as a DBA might set it for that very reason) must not
/// hide it: the store checks a value of its own attempt, which no setting can give, and runs
/// as behind a pooler; work through it is correct.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooler_that_drops_the_startup_options_is_recognised_whatever_the_database_sets() {
    let db = TestDb::new().await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "ALTER DATABASE {} SET plan_cache_mode = force_generic_plan",
        leasehold_tests::db::quote_ident(db.name())
    )))
    .execute(&db.pool)
    .await
    .unwrap();
    let upstream = db.connect_options();
    let bouncer = PgBouncer::start(
        upstream.get_host(),
        upstream.get_port(),
        PgBouncerOptions {
            ignore_startup_parameters: Some("extra_float_digits, options".into()),
            ..PgBouncerOptions::default()
        },
    )
    .await
    .unwrap();
    let store = PgStore::connect(&bouncer.url(db.name()), PgStoreOptions::default())
        .await
        .unwrap();
    assert!(
        store.behind_pooler(),
        "PgBouncer ignoring the startup options was taken for PostgreSQL"
    );
    for _ in 0..20 {
        insert_task(&db.pool, TaskSpec::new("ops", "queued"))
            .await
            .unwrap();
    }
    let store = std::sync::Arc::new(store);
    let mut claims = tokio::task::JoinSet::new();
    for n in 0..4 {
        let store = std::sync::Arc::clone(&store);
        claims.spawn(async move {
            let mut got = 0;
            for _ in 0..5 {
                got += store
                    .task_claim(claim(&format!("a{n}"), &["ops"], 1))
                    .await
                    .unwrap()
                    .tasks
                    .len();
                store.db_now().await.unwrap();
            }
            got
        });
    }
    let claimed: usize = claims.join_all().await.into_iter().sum();
    assert_eq!(claimed, 20);
    store.close().await;
    drop(bouncer);
    db.drop_db().await.unwrap();
}

/// A URL naming several servers whose first does not answer at all (a host powered off: a
/// black hole, not a refusal): once a store found the second, a store opened again — as the
/// agent's heartbeat connection is after each failure, within a renewal's budget — goes to the
/// second first, in auto mode as with the mode given. Finding out about a pooler must not spend
/// the budget on the dead server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_opened_again_goes_to_the_server_found_last_even_when_finding_out_the_pooler() {
    let db = TestDb::new().await.unwrap();
    let real = addr_of_url(&db.url).await.unwrap();
    let dead = TcpProxy::start(real).await.unwrap();
    dead.set_mode(ProxyMode::Blackhole);
    let url = format!(
        "postgres://{}@{},{}/{}",
        db.connect_options().get_username(),
        dead.addr(),
        real,
        db.name()
    );
    let first = PgStore::connect(
        &url,
        PgStoreOptions {
            acquire_timeout: Duration::from_secs(20),
            follow_failover: false,
            ..PgStoreOptions::default()
        },
    )
    .await
    .unwrap();
    first.close().await;
    for pooler in [Pooler::Auto, Pooler::None] {
        let started = Instant::now();
        let again = PgStore::connect(
            &url,
            PgStoreOptions {
                max_connections: 1,
                acquire_timeout: Duration::from_millis(1500),
                follow_failover: false,
                pooler,
                ..PgStoreOptions::default()
            },
        )
        .await;
        let took = started.elapsed();
        assert!(
            again.is_ok(),
            "{pooler}: opened again within 1.5 s failed after {took:?}: {:?}",
            again.err()
        );
        // The heartbeat opens its store within its renewal's budget, which the acquire timeout
        // is set to: the whole open must fit in it, not each of its steps.
        assert!(
            took < Duration::from_millis(1500),
            "{pooler}: opening again took {took:?}, past the 1.5 s budget"
        );
        if let Ok(store) = again {
            assert!(!store.behind_pooler());
            store.close().await;
        }
    }
    db.drop_db().await.unwrap();
}

/// Behind a pooler `migrate` has nothing to do only when the database applied exactly this
/// build's migrations: one whose recorded checksum differs (edited, or another build's) is
/// refused as a pending one is, rather than reported up to date.
#[tokio::test]
async fn a_differing_migration_is_refused_behind_a_pooler() {
    let db = TestDb::new().await.unwrap();
    sqlx::query(
        "UPDATE _sqlx_migrations SET checksum = '\\x00'::bytea \
         WHERE version = (SELECT max(version) FROM _sqlx_migrations)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let pooled = store(&db, Pooler::Transaction).await;
    match pooled.migrate().await {
        Err(StoreError::Invalid(e)) => {
            assert!(e.to_string().contains("direct connection"), "{e}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    pooled.close().await;
    db.drop_db().await.unwrap();
}
