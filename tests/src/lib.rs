//! Leasehold's test harness: a PostgreSQL server found or started once per test process
//! ([`server`]), a fresh database per test cloned from a migrated template ([`db`]), polling
//! waits ([`wait`]) and task factories that write rows in any state directly ([`factory`]).
//!
//! For end-to-end and fault tests: real agent processes to signal ([`agent`]), a TCP proxy
//! that resets, blackholes or delays connections ([`proxy`]), a private PostgreSQL server to
//! restart or crash ([`cluster`]), a private PgBouncer in front of one ([`pgbouncer`]) and
//! the ledger that proves nothing was lost or done twice ([`ledger`]) and no concurrency limit
//! exceeded ([`limits`]); for the soak, a process's memory and descriptors ([`procstat`]);
//! operator calls checked against the audit log ([`operator`]). The interactive console runs
//! in a real terminal, a private tmux server ([`tmux`]). Shared-host tests run the CLI with a
//! clean environment as root or as another user ([`local_access`]).
//!
//! The store conformance suite runs each test against PostgreSQL and SQLite alike:
//! [`store_db`] gives a per-test database of either backend behind `Arc<dyn Store>`, raw setup
//! and inspection in both dialects, and the [`conformance!`] macro.
//!
//! The harness returns [`anyhow::Result`] everywhere and never unwraps, so it follows the
//! workspace lints; the tests built on it may unwrap freely.
//!
//! A typical test:
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use leasehold_tests::{TaskSpec, TestDb, insert_task};
//! let db = TestDb::new().await?;
//! let id = insert_task(&db.pool, TaskSpec::new("email.send", "running")).await?;
//! let store = db.store();
//! # let _ = (id, store);
//! db.drop_db().await?;
//! # Ok(())
//! # }
//! ```

// Only the agent's exec spawner may use unsafe (the workspace lint is `deny` for its sake).
#![forbid(unsafe_code)]

pub mod agent;
pub mod bin;
pub mod calls;
pub mod certs;
pub mod cli;
pub mod cluster;
pub mod db;
pub mod factory;
pub mod faketime;
pub mod fleet;
pub mod grpc;
pub mod helpers;
pub mod inspect;
pub mod ledger;
pub mod limits;
pub mod local_access;
pub mod metrics;
pub mod operator;
pub mod pgbouncer;
pub mod procstat;
pub mod proxy;
pub mod scenario;
pub mod scratch;
pub mod server;
pub mod store_db;
pub mod tmux;
pub mod wait;

pub use agent::{AgentHandle, wait_registered};
pub use bin::binary;
pub use cluster::PgCluster;
pub use db::TestDb;
pub use factory::{TaskSpec, backdate_lease, insert_task};
pub use inspect::{attempt_rows, audit_rows, count, task_row, task_status};
pub use ledger::LedgerReport;
pub use pgbouncer::{PgBouncer, PgBouncerOptions};
pub use proxy::{ProxyMode, TcpProxy};
pub use scratch::scratch_dir;
pub use server::admin_url;
pub use store_db::{Arg, Backend, Rows, Sql, StoreDb, Val, WriteTx};
pub use wait::wait_until;
