//! One store conformance suite for every backend: a per-test database of either kind behind
//! `Arc<dyn Store>`, the raw setup and inspection the store tests need written once for both
//! SQL dialects, and [`conformance!`](crate::conformance) to run one test body against each.
//!
//! ```text
//!   conformance!(claim_order);  async fn claim_order(db: StoreDb) { … }
//!        │
//!        ├─▶ claim_order::postgres   StoreDb::new(Backend::Postgres)  a fresh database (TestDb)
//!        ├─▶ claim_order::sqlite     StoreDb::new(Backend::Sqlite)    a fresh file in the temp dir
//!        └─▶ claim_order::pgbouncer  StoreDb::new_behind_pgbouncer()  a fresh database, the store
//!                                    through a PgBouncer of its own in transaction mode
//! ```
//! `cargo test -p leasehold-tests --test store_claims sqlite` runs the SQLite part only. The
//! PgBouncer part is PostgreSQL for the SQL the test runs itself (`backend()`); only the store
//! under test goes through the pooler, which proves that no store operation relies on session
//! state, prepared statements kept between transactions or a statement outside a transaction.
//!
//! Raw SQL bypasses the store under test, so a test can put rows in exactly the state it needs
//! and read back exactly what the store wrote. Where the dialects differ (PostgreSQL
//! `timestamptz` and `jsonb`; SQLite INTEGER microseconds and TEXT), the helpers here hide it:
//! times are given relative to the database's own clock, in seconds ([`Val::At`]).
//!
//! Invariants: every fixture is private to its test (parallel-safe); the SQLite file and its
//! WAL files live in a directory of their own, removed by [`StoreDb::drop_db`] and, should the
//! test panic first, when the fixture is dropped.

mod raw;
mod read;
mod sqlite;

use std::sync::Arc;

use anyhow::Context;
use leasehold_shared::store::postgres::{PgStore, PgStoreOptions};
use leasehold_shared::{InputLimits, Store};
use sqlx::{PgPool, SqlitePool};

use crate::db::TestDb;
use crate::pgbouncer::{PgBouncer, PgBouncerOptions};
pub use raw::{Arg, Rows, Sql, Val, WriteTx};
use sqlite::SqliteDb;

/// Connections in a fixture's pool (as [`crate::db::DEFAULT_POOL_SIZE`] for PostgreSQL).
pub const POOL_SIZE: u32 = crate::db::DEFAULT_POOL_SIZE;

/// The database a [`StoreDb`] runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    Postgres,
    Sqlite,
}

impl Backend {
    /// Every backend, in the order the suite runs them.
    pub const ALL: [Backend; 2] = [Backend::Postgres, Backend::Sqlite];

    /// Lower-case name, as in test names.
    pub const fn name(self) -> &'static str {
        match self {
            Backend::Postgres => "postgres",
            Backend::Sqlite => "sqlite",
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug)]
enum Conn {
    Pg(Box<TestDb>),
    Sqlite(SqliteDb),
}

/// A database of the test's own, of either backend, with the store under test over it.
pub struct StoreDb {
    conn: Conn,
    store: Arc<dyn Store>,
    /// The PostgreSQL store under test goes through this PgBouncer (transaction mode), raw SQL
    /// straight to the database ([`StoreDb::new_behind_pgbouncer`]).
    bouncer: Option<PgBouncer>,
}

impl std::fmt::Debug for StoreDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreDb").field("conn", &self.conn).finish()
    }
}

impl StoreDb {
    /// A fresh database of `backend`, migrated to the current schema.
    pub async fn new(backend: Backend) -> anyhow::Result<StoreDb> {
        match backend {
            Backend::Postgres => {
                let db = TestDb::new().await?;
                Ok(Self::on_postgres(db))
            }
            Backend::Sqlite => {
                let db = SqliteDb::new(true).await?;
                let store = db.store(POOL_SIZE, InputLimits::default()).await?;
                Ok(StoreDb {
                    conn: Conn::Sqlite(db),
                    store,
                    bouncer: None,
                })
            }
        }
    }

    /// A fresh, empty database of `backend` (no schema): for testing migrations themselves.
    /// Its [`StoreDb::store`] is usable only once something migrated it.
    pub async fn new_empty(backend: Backend) -> anyhow::Result<StoreDb> {
        match backend {
            Backend::Postgres => Ok(Self::on_postgres(TestDb::new_empty().await?)),
            Backend::Sqlite => {
                let db = SqliteDb::new(false).await?;
                let store = db.store(POOL_SIZE, InputLimits::default()).await?;
                Ok(StoreDb {
                    conn: Conn::Sqlite(db),
                    store,
                    bouncer: None,
                })
            }
        }
    }

    fn on_postgres(db: TestDb) -> StoreDb {
        let store: Arc<dyn Store> =
            Arc::new(PgStore::from_pool(db.pool.clone(), InputLimits::default()));
        StoreDb {
            conn: Conn::Pg(Box::new(db)),
            store,
            bouncer: None,
        }
    }

    /// A fresh PostgreSQL database, migrated, whose store under test connects through a
    /// PgBouncer of its own in transaction mode (the store finds the pooler itself, as an agent
    /// does); raw SQL and [`StoreDb::pg_pool`] go to the database directly. Its
    /// [`StoreDb::backend`] is PostgreSQL (the SQL dialect).
    pub async fn new_behind_pgbouncer() -> anyhow::Result<StoreDb> {
        let db = TestDb::new().await?;
        let upstream = db.connect_options();
        let bouncer = PgBouncer::start(
            upstream.get_host(),
            upstream.get_port(),
            PgBouncerOptions {
                default_pool_size: POOL_SIZE,
                ..PgBouncerOptions::default()
            },
        )
        .await?;
        let store = Self::bounced_store(&bouncer, &db, POOL_SIZE, InputLimits::default()).await?;
        Ok(StoreDb {
            conn: Conn::Pg(Box::new(db)),
            store,
            bouncer: Some(bouncer),
        })
    }

    async fn bounced_store(
        bouncer: &PgBouncer,
        db: &TestDb,
        max: u32,
        limits: InputLimits,
    ) -> anyhow::Result<Arc<dyn Store>> {
        let store = PgStore::connect(
            &bouncer.url(db.name()),
            PgStoreOptions {
                max_connections: max,
                limits,
                ..PgStoreOptions::default()
            },
        )
        .await
        .context("connecting the store through PgBouncer")?;
        anyhow::ensure!(
            store.behind_pooler(),
            "the store did not recognise PgBouncer as a transaction pooler"
        );
        Ok(Arc::new(store))
    }

    /// Whether the store under test goes through PgBouncer.
    pub fn behind_pgbouncer(&self) -> bool {
        self.bouncer.is_some()
    }

    /// Which backend this is.
    pub fn backend(&self) -> Backend {
        match self.conn {
            Conn::Pg(_) => Backend::Postgres,
            Conn::Sqlite(_) => Backend::Sqlite,
        }
    }

    /// True on PostgreSQL.
    pub fn is_postgres(&self) -> bool {
        self.backend() == Backend::Postgres
    }

    /// True on SQLite.
    pub fn is_sqlite(&self) -> bool {
        self.backend() == Backend::Sqlite
    }

    /// The database URL (`postgres://…/lh_t_…` or `sqlite://…/leasehold.db`).
    pub fn url(&self) -> &str {
        match &self.conn {
            Conn::Pg(db) => &db.url,
            Conn::Sqlite(db) => db.url(),
        }
    }

    /// The store under test, with the default input limits, sharing the fixture's pool.
    pub fn store(&self) -> Arc<dyn Store> {
        Arc::clone(&self.store)
    }

    /// Another store over the same database, enforcing `limits`.
    pub async fn store_with_limits(&self, limits: InputLimits) -> anyhow::Result<Arc<dyn Store>> {
        match (&self.conn, &self.bouncer) {
            (Conn::Pg(db), Some(bouncer)) => {
                Self::bounced_store(bouncer, db, POOL_SIZE, limits).await
            }
            (Conn::Pg(db), None) => Ok(Arc::new(PgStore::from_pool(db.pool.clone(), limits))),
            (Conn::Sqlite(db), _) => db.store(POOL_SIZE, limits).await,
        }
    }

    /// Another store over the same database with a pool of its own of up to `max`
    /// connections (for tests with many concurrent callers). Closed by [`StoreDb::drop_db`].
    pub async fn store_with_pool(&self, max: u32) -> anyhow::Result<Arc<dyn Store>> {
        match (&self.conn, &self.bouncer) {
            (Conn::Pg(db), Some(bouncer)) => {
                Self::bounced_store(bouncer, db, max, InputLimits::default()).await
            }
            (Conn::Pg(db), None) => Ok(Arc::new(PgStore::from_pool(
                db.pool_with(max).await?,
                InputLimits::default(),
            ))),
            (Conn::Sqlite(db), _) => db.store(max, InputLimits::default()).await,
        }
    }

    /// The PostgreSQL fixture, for the parts of a test only PostgreSQL has.
    pub fn postgres(&self) -> Option<&TestDb> {
        match &self.conn {
            Conn::Pg(db) => Some(db),
            Conn::Sqlite(_) => None,
        }
    }

    /// The pool raw SQL runs on, when PostgreSQL.
    pub fn pg_pool(&self) -> Option<&PgPool> {
        self.postgres().map(|db| &db.pool)
    }

    /// The pool raw SQL runs on, when SQLite.
    pub fn sqlite_pool(&self) -> Option<&SqlitePool> {
        match &self.conn {
            Conn::Pg(_) => None,
            Conn::Sqlite(db) => Some(db.pool()),
        }
    }

    /// How many migrations the backend's embedded migrator holds.
    pub fn migrations_embedded(&self) -> usize {
        match self.conn {
            Conn::Pg(_) => leasehold_shared::store::postgres::MIGRATOR.iter().count(),
            Conn::Sqlite(_) => sqlite::migrations_embedded(),
        }
    }

    /// Closes the pools and removes the database (PostgreSQL: drops it; SQLite: deletes its
    /// directory).
    pub async fn drop_db(self) -> anyhow::Result<()> {
        drop(self.store);
        // PgBouncer first: its server connections would keep the database from being dropped.
        drop(self.bouncer);
        match self.conn {
            Conn::Pg(db) => (*db).drop_db().await,
            Conn::Sqlite(db) => db
                .remove()
                .await
                .context("removing the SQLite test database"),
        }
    }
}

/// Runs the conformance test `name` — an `async fn name(db: StoreDb)` beside the macro call,
/// which should end with `db.drop_db().await.unwrap()` — once per backend: it expands into a
/// module `name` of three `#[tokio::test]` functions, `name::postgres`, `name::sqlite` and
/// `name::pgbouncer` (PostgreSQL with the store behind PgBouncer), each giving the test a fresh
/// [`StoreDb`] of its own. `by_backend` tests (their own fixtures) run on the first two. `worker_threads = N` runs both on a
/// multi-threaded runtime of N workers; `by_backend` gives the test the [`Backend`] instead
/// (`async fn name(backend: Backend)`), for tests that make their own fixture.
///
/// ```ignore
/// use leasehold_tests::{StoreDb, conformance};
///
/// conformance!(claims_are_exclusive, worker_threads = 4);
/// /// What it proves.
/// async fn claims_are_exclusive(db: StoreDb) {
///     let store = db.store();
///     // …
///     db.drop_db().await.unwrap();
/// }
/// ```
#[macro_export]
macro_rules! conformance {
    ($name:ident) => {
        mod $name {
            #[tokio::test]
            async fn postgres() {
                $crate::conformance!(@run $name Postgres);
            }

            #[tokio::test]
            async fn sqlite() {
                $crate::conformance!(@run $name Sqlite);
            }

            #[tokio::test]
            async fn pgbouncer() {
                $crate::conformance!(@bounced $name);
            }
        }
    };
    ($name:ident, worker_threads = $workers:literal) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = $workers)]
            async fn postgres() {
                $crate::conformance!(@run $name Postgres);
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = $workers)]
            async fn sqlite() {
                $crate::conformance!(@run $name Sqlite);
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = $workers)]
            async fn pgbouncer() {
                $crate::conformance!(@bounced $name);
            }
        }
    };
    ($name:ident, by_backend) => {
        mod $name {
            #[tokio::test]
            async fn postgres() {
                super::$name($crate::store_db::Backend::Postgres).await
            }

            #[tokio::test]
            async fn sqlite() {
                super::$name($crate::store_db::Backend::Sqlite).await
            }
        }
    };
    (@run $name:ident $backend:ident) => {
        let db = $crate::store_db::StoreDb::new($crate::store_db::Backend::$backend)
            .await
            .unwrap_or_else(|error| {
                panic!("creating the {} test database: {error:#}", stringify!($backend))
            });
        super::$name(db).await
    };
    (@bounced $name:ident) => {
        let db = $crate::store_db::StoreDb::new_behind_pgbouncer()
            .await
            .unwrap_or_else(|error| panic!("creating the PgBouncer test database: {error:#}"));
        super::$name(db).await
    };
}
