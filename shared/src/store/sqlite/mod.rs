//! The SQLite store: the embedded default for one host, demos and CI (DESIGN §11).
//!
//! [`SqliteStore`] is a [`Driver`](super::driver::Driver): it runs statements and is a
//! [`Store`](super::Store) through the Store layer written once for both backends
//! (`store/driver.rs`: validation, derived operations, wake-ups). This module holds the pool,
//! the transactions, the statement list and `ops`, which names the function of each operation.
//!
//! Same tables, rules and outcomes as the PostgreSQL store, in SQLite's terms:
//! ```text
//!   one file, WAL journal (readers never block the writer), busy timeout on every connection
//!   every transaction that writes begins with BEGIN IMMEDIATE: it takes SQLite's single write
//!   lock before it reads, so it decides from rows no other writer can change under it
//!   "now" is read from SQLite's clock (julianday('now')) as the transaction's first
//!   statement and every lease time of the transaction is computed from it
//! ```
//! Several agent processes on one host may share one file: claims, renewals and completions
//! serialise on the write lock, so concurrency limits are exact without advisory locks. There is
//! no NOTIFY: each agent watches the file's change counter (`PRAGMA data_version`, every 20 ms,
//! through the store's `WakeSource`, `store/wake.rs`) and polls as a fallback.
//!
//! Times are INTEGER microseconds since the Unix epoch (millisecond precision from the clock);
//! JSON is TEXT. See `migrations/sqlite/`.
//!
//! When things fail: a statement error rolls its transaction back, so every operation either
//! happened whole or not at all. A writer that cannot get the lock within the busy timeout is
//! [`StoreError::Busy`] and changed nothing.

mod enqueue;
mod file;
mod history;
mod holder;
mod maintenance;
mod operator;
mod query;
mod registry;
mod resources;
mod rows;
mod schedules;

pub use enqueue::task_enqueue_on;
pub use file::{DATABASE_FILE_MODE, FileState, prepare_database_file};
pub use operator::audit_write_on;
pub use resources::resource_fence;

use std::collections::HashMap;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Sqlite, SqliteConnection, Transaction};

use super::{Result, StoreError};
use crate::domain::InputLimits;

/// The embedded SQLite migrations (`migrations/sqlite/`).
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");

/// The statements, one file each in `sql/` (as the PostgreSQL store's), named after what they
/// do; a statement that does what a PostgreSQL one does has that file's name. Times are read
/// from SQLite's clock ([`sql::db_now`]) and bound as parameters.
pub(crate) mod sql {
    macro_rules! statements {
        ($($name:ident),* $(,)?) => {
            $(pub const $name: &str = include_str!(concat!("sql/", stringify!($name), ".sql"));)*
            /// Every statement, by file name.
            #[cfg(test)]
            pub const ALL: &[(&str, &str)] = &[$((stringify!($name), $name)),*];
        };
    }
    #[allow(non_upper_case_globals)]
    mod names {
        statements!(
            db_now,
            tx_begin_write,
            task_enqueue,
            task_enqueue_existing,
            task_enqueue_release,
            task_enqueue_replace,
            task_enqueue_many,
            task_claim_probe,
            breaker_tries,
            task_count_running,
            task_shed,
            breaker_list,
            breaker_failures,
            breaker_probe,
            breaker_move,
            rate_limit_used,
            rate_limit_stamp,
            rate_limit_prune,
            rate_limit_wait,
            task_claim_candidates,
            task_key_walk,
            task_key_heads,
            task_count_running_keys,
            task_claim,
            lease_list_held,
            lease_renew_many,
            agent_extend_liveness,
            task_progress,
            task_checkpoint,
            task_complete_read,
            task_complete_many,
            task_attempt_insert_many,
            task_attempt_outcomes,
            task_attempt_insert,
            lease_release,
            lease_release_repeated,
            task_dead_letter,
            lease_list_expired,
            lease_recover_expired,
            task_list_past_deadline,
            task_purge_finished,
            agent_count_live,
            task_list_unserved,
            task_count_claimable,
            task_recent_runs,
            lease_list_suspect,
            task_idle_report,
            audit_insert,
            audit_list,
            task_get_lease,
            task_cancel,
            task_cancel_request,
            task_get_status,
            task_requeue,
            task_run_now,
            task_delete,
            task_get_status_type,
            task_count_live,
            task_count_finished,
            task_count_dead,
            task_dead_ids,
            task_requeue_dead,
            task_purge_dead,
            policy_list,
            policy_get_for_update,
            policy_upsert,
            task_list,
            task_get,
            task_attempts,
            task_explain,
            task_overview,
            agent_seq_next,
            agent_register,
            agent_get,
            agent_heartbeat,
            agent_list,
            agent_mark_stopped,
            leader_get,
            leader_attempt_elect,
            leader_renew,
            leader_resign,
            leader_resign_repeated,
            leader_check,
            schedule_get,
            schedule_list,
            schedule_insert,
            schedule_update,
            schedule_delete,
            schedule_set_enabled,
            schedule_set_last_task,
            schedule_any_due,
            schedule_due,
            schedule_fired,
            schedule_next_due,
            resource_get_for_update,
            lock_insert,
            resource_take,
            resource_history_insert,
            resource_renew,
            resource_release,
            resource_history_release,
            resource_release_repeated,
            lock_force_release,
            lock_list,
            shard_member_renew_many,
            resource_renew_many,
            shard_group_list,
            resource_moves,
            shard_group_lock,
            shard_group_insert,
            shard_group_insert_shards,
            shard_list,
            shard_member_list,
            shard_join,
            shard_leave,
            shard_member_prune,
            resource_history_prune,
            resource_fence,
            wake_version,
            migrations_table_exists,
            migrations_count_applied,
            task_delete_of_type,
            task_stats,
            queue_history_mark_now,
            queue_history_minutes_from,
            queue_history_mark_before,
            queue_history_mark_set,
            queue_history_count_enqueued,
            queue_history_count_finished,
            queue_history_count_failed_attempts,
            queue_history_depth,
            queue_history_rows_between,
            queue_history_upsert,
            queue_history_minute_counted,
            queue_history_read_minutes,
            queue_history_prune,
            queue_history_minutes_prune,
        );
    }
    pub use names::*;
}

/// How a caller's own write transaction begins (BEGIN IMMEDIATE: see [`resource_fence`] and
/// [`task_enqueue_on`]), as the store's write transactions do.
pub const BEGIN_IMMEDIATE: &str = sql::tx_begin_write;

/// Default size of the store's connection pool (readers run in parallel under WAL; writers
/// take turns on the write lock).
pub const DEFAULT_POOL_SIZE: u32 = 4;
/// Default time a writer waits for the write lock before the operation is `Busy`.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Options for connecting a [`SqliteStore`].
#[derive(Debug, Clone)]
pub struct SqliteStoreOptions {
    pub max_connections: u32,
    /// How long a statement waits for a lock another connection (or process) holds.
    pub busy_timeout: Duration,
    /// How long to wait for a pooled connection.
    pub acquire_timeout: Duration,
    pub limits: InputLimits,
}

impl Default for SqliteStoreOptions {
    fn default() -> Self {
        Self {
            max_connections: DEFAULT_POOL_SIZE,
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
            acquire_timeout: Duration::from_secs(10),
            limits: InputLimits::default(),
        }
    }
}

/// The SQLite implementation of [`Store`].
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
    limits: InputLimits,
    /// Where this store's claims stand in each type's round of concurrency keys.
    key_cursors: std::sync::Arc<crate::store::KeyCursors>,
}

pub use super::is_sqlite_url;

/// Parses a SQLite URL (the file is created when missing), refusing other schemes.
pub fn connect_options(url: &str) -> Result<SqliteConnectOptions> {
    if !is_sqlite_url(url) {
        return Err(StoreError::unsupported_url(url));
    }
    let path = url
        .trim_start_matches("sqlite://")
        .trim_start_matches("sqlite:");
    let path = path.split('?').next().unwrap_or_default();
    if path.is_empty() || path == ":memory:" {
        return Err(StoreError::Invalid(crate::ValidationError::Invalid {
            field: "database_url",
            detail: "a SQLite URL names a file (sqlite://PATH); an in-memory database cannot be \
                     shared by agents"
                .into(),
        }));
    }
    SqliteConnectOptions::from_str(url).map_err(StoreError::db("parse database URL"))
}

impl SqliteStore {
    /// Opens (creating when missing, mode 0600: see [`prepare_database_file`]) the database
    /// file of `url` (`sqlite://PATH`).
    pub async fn connect(url: &str, options: SqliteStoreOptions) -> Result<Self> {
        prepare_database_file(url)?;
        let connect = connect_options(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // FULL: a commit is on disk before it is acknowledged (an enqueue or a completion
            // survives power loss, as on PostgreSQL); NORMAL would lose the last commits then.
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(options.busy_timeout)
            .foreign_keys(true)
            .pragma("temp_store", "memory");
        let pool = SqlitePoolOptions::new()
            .max_connections(options.max_connections.max(1))
            .acquire_timeout(options.acquire_timeout)
            .connect_with(connect)
            .await
            .map_err(StoreError::db("connect"))?;
        Ok(Self {
            pool,
            limits: options.limits,
            key_cursors: Default::default(),
        })
    }

    /// The pool, for callers that enqueue inside their own transactions.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// The input limits this store enforces.
    pub fn limits(&self) -> &InputLimits {
        &self.limits
    }

    /// Applies pending migrations. Safe to run twice and from several processes at once: a
    /// process that loses the race to create the schema sees it applied on its retry.
    pub async fn migrate(&self) -> Result<()> {
        let mut last = None;
        for _ in 0..5 {
            match MIGRATOR.run(&self.pool).await {
                Ok(()) => return Ok(()),
                Err(error) => {
                    last = Some(error);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        match last {
            Some(error) => Err(StoreError::Migrate(error)),
            None => Ok(()),
        }
    }

    /// Closes the pool.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// This file's wake-up: its change counter, read on a connection of its own.
    pub fn wake_source(&self) -> super::wake::WakeSource {
        super::wake::WakeSource::sqlite(self.pool.clone())
    }
}

/// One gate per database file and process: writers of this process take SQLite's write lock
/// first come, first served. SQLite's own busy handler retries on a timer, so under steady
/// write traffic a waiter (a lease renewal, say) could lose the race again and again; behind
/// the gate it waits only for the writers queued before it. Writers of other processes still
/// meet in the busy handler.
fn gate_for(pool: &SqlitePool) -> Arc<tokio::sync::Mutex<()>> {
    static GATES: OnceLock<Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>> = OnceLock::new();
    let options = pool.connect_options();
    let path = options.get_filename();
    let key = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let gates = GATES.get_or_init(|| Mutex::new(HashMap::new()));
    let mut gates = gates
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    Arc::clone(gates.entry(key).or_default())
}

/// A transaction; a write transaction also holds this process's turn at the file's write
/// lock (see [`gate_for`]).
pub(super) struct WriteTx {
    tx: Transaction<'static, Sqlite>,
    _turn: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl std::ops::Deref for WriteTx {
    type Target = SqliteConnection;
    fn deref(&self) -> &SqliteConnection {
        &self.tx
    }
}

impl std::ops::DerefMut for WriteTx {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        &mut self.tx
    }
}

/// A write transaction: this process's turn, the write lock taken (BEGIN IMMEDIATE) and
/// SQLite's now read.
pub(super) async fn write_tx(pool: &SqlitePool, op: &'static str) -> Result<(WriteTx, i64)> {
    let turn = gate_for(pool).lock_owned().await;
    let mut tx = pool
        .begin_with(sql::tx_begin_write)
        .await
        .map_err(StoreError::db(op))?;
    let now = now(&mut tx, op).await?;
    Ok((
        WriteTx {
            tx,
            _turn: Some(turn),
        },
        now,
    ))
}

/// A read transaction: one snapshot for every statement, and SQLite's now.
pub(super) async fn read_tx(pool: &SqlitePool, op: &'static str) -> Result<(WriteTx, i64)> {
    let mut tx = pool.begin().await.map_err(StoreError::db(op))?;
    let now = now(&mut tx, op).await?;
    Ok((WriteTx { tx, _turn: None }, now))
}

pub(super) async fn now(tx: &mut Transaction<'static, Sqlite>, op: &'static str) -> Result<i64> {
    sqlx::query_scalar(sql::db_now)
        .fetch_one(&mut **tx)
        .await
        .map_err(StoreError::db(op))
}

pub(super) async fn commit(tx: WriteTx, op: &'static str) -> Result<()> {
    // The turn (a write transaction's) is given up only once the commit is done.
    let WriteTx { tx, _turn } = tx;
    tx.commit().await.map_err(StoreError::db(op))
}

/// A list as a JSON array, for `IN (SELECT value FROM json_each(?))`.
pub(super) fn json_list<T: serde::Serialize>(items: &[T]) -> Result<String> {
    rows::to_text(&items, "list")
}

/// Each [`Driver`](super::driver::Driver) operation's function, under the operation's name
/// (where the area file names it otherwise, renamed here).
mod ops {
    pub(super) use super::enqueue::{task_enqueue, task_enqueue_many};
    pub(super) use super::history::*;
    pub(super) use super::holder::*;
    pub(super) use super::maintenance::*;
    pub(super) use super::operator::{
        audit_record, audit_record_denied, policy_set as policy_change, task_cancel, task_delete,
        task_enqueue_audited, task_purge_dead, task_requeue, task_requeue_dead, task_run_now,
    };
    pub(super) use super::{query::*, registry::*, resources::*};
    pub(super) use crate::store::dialect::{
        audit_list, migrations_applied, policy_list, task_delete_of_type,
    };

    use super::operator::Lite;
    use sqlx::SqlitePool;

    // The resource lease and schedule operations, written once over the backend seam
    // (`store/audit/backend.rs`), each run on this store.
    crate::store::resources::flow::resource_entry_points!(Lite, SqlitePool);
    crate::store::schedules::flow::schedule_entry_points!(Lite, SqlitePool);

    /// Nothing: SQLite has no NOTIFY. Every agent on the host watches the file's change
    /// counter (`PRAGMA data_version`) and sees any commit within its poll interval.
    pub(super) async fn wake(_pool: &sqlx::SqlitePool) {}
}

/// The statements of the operations written once over [`Dialect`](super::dialect::Dialect);
/// times are bound as stored, in microseconds.
impl super::dialect::Dialect for Sqlite {
    const POLICY_LIST: &'static str = sql::policy_list;
    const AUDIT_LIST: &'static str = sql::audit_list;
    const MIGRATIONS_TABLE_EXISTS: &'static str = sql::migrations_table_exists;
    const MIGRATIONS_COUNT_APPLIED: &'static str = sql::migrations_count_applied;
    const TASK_DELETE_OF_TYPE: &'static str = sql::task_delete_of_type;

    type Time = i64;
    fn stored_time(t: chrono::DateTime<chrono::Utc>) -> i64 {
        rows::micros(t)
    }

    fn rows_affected(done: &sqlx::sqlite::SqliteQueryResult) -> u64 {
        done.rows_affected()
    }

    fn migrator() -> &'static sqlx::migrate::Migrator {
        &MIGRATOR
    }
}

super::driver::impl_driver!(SqliteStore);

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use sqlx::Executor;

    use super::*;

    /// A store on a new file in a directory of its own (`name`), not migrated.
    async fn fresh_store(name: &str) -> (SqliteStore, PathBuf) {
        let dir =
            std::env::temp_dir().join(format!("leasehold-sqlite-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let url = format!("sqlite://{}", dir.join("q.sqlite").display());
        let store = SqliteStore::connect(&url, SqliteStoreOptions::default())
            .await
            .unwrap();
        (store, dir)
    }

    #[tokio::test]
    async fn every_statement_file_says_what_it_does_and_prepares() {
        let (store, dir) = fresh_store("statements").await;
        store.migrate().await.unwrap();
        let mut conn = store.pool().acquire().await.unwrap();
        assert!(sql::ALL.len() > 90, "{} statements", sql::ALL.len());
        for (name, text) in sql::ALL {
            assert!(
                text.starts_with("-- "),
                "{name}.sql starts with a comment line"
            );
            conn.prepare(sqlx::SqlSafeStr::into_sql_str(*text))
                .await
                .unwrap_or_else(|e| panic!("{name}.sql: {e}"));
        }
        drop(conn);
        store.close().await;
        std::fs::remove_dir_all(&dir).unwrap();
    }
    /// The tools' operations written once over the dialect (`store/dialect.rs`) run this
    /// backend's statements: the migration count before and after migrating, and the delete of
    /// one task type, which leaves every other type alone.
    #[tokio::test]
    async fn migrations_are_counted_and_a_tools_type_is_deleted_alone() {
        use crate::domain::TaskType;
        use crate::store::driver::Driver;
        use crate::store::{NewTask, Store, TaskListParams};

        let (store, dir) = fresh_store("tools").await;
        let known = MIGRATOR.iter().count();
        assert!(known > 0);
        assert_eq!(store.migrations_applied().await.unwrap(), (0, known));
        store.migrate().await.unwrap();
        assert_eq!(store.migrations_applied().await.unwrap(), (known, known));

        let bench = TaskType::new("bench.noop").unwrap();
        let other = TaskType::new("email.send").unwrap();
        for task_type in [&bench, &bench, &other] {
            let task = NewTask::new(task_type.clone(), serde_json::json!({}));
            Store::task_enqueue(&store, task).await.unwrap();
        }
        assert_eq!(store.task_delete_of_type(&bench).await.unwrap(), 2);
        assert_eq!(store.task_delete_of_type(&bench).await.unwrap(), 0);
        let page = Store::task_list(
            &store,
            TaskListParams {
                statuses: Vec::new(),
                task_type: None,
                text: None,
                error_code: None,
                since: None,
                before: None,
                limit: 10,
                due: None,
            },
        )
        .await
        .unwrap();
        let left: Vec<&str> = page.tasks.iter().map(|t| t.task_type.as_str()).collect();
        assert_eq!(left, ["email.send"]);
        store.close().await;
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
