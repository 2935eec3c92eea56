//! The SQLite store: the embedded default for one host, demos and CI (DESIGN §11).
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
//! in the agent's notifier) and polls as a fallback.
//!
//! Times are INTEGER microseconds since the Unix epoch (millisecond precision from the clock);
//! JSON is TEXT. See `migrations/sqlite/`.
//!
//! When things fail: a statement error rolls its transaction back, so every operation either
//! happened whole or not at all. A writer that cannot get the lock within the busy timeout is
//! [`StoreError::Busy`] and changed nothing.

mod file;
mod holder;
mod maintenance;
mod operator;
mod query;
mod registry;
mod resources;
mod rows;
mod schedules;

pub use file::{DATABASE_FILE_MODE, FileState, prepare_database_file};
pub use holder::task_enqueue_on;
pub use operator::audit_write_on;
pub use resources::resource_fence;

use std::collections::HashMap;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Sqlite, SqliteConnection, Transaction};

use super::resources::{
    GroupName, LockAcquireParams, LockAcquired, LockForceReleaseParams, LockListing,
    ResourceHolderParams, ResourceRecord, ResourceRenewOutcome, ResourceRenewParams,
    ShardAcquireParams, ShardGroupCreateParams, ShardGroupCreated, ShardGroupRecord,
    ShardGroupView, ShardJoinParams,
};
use super::schedules::{
    FireReport, LeaderRecord, ScheduleAddParams, ScheduleAdded, ScheduleEnableParams,
    ScheduleEnabled, ScheduleFireParams, ScheduleListing, ScheduleNameParams, ScheduleRecord,
    ScheduleTriggered,
};
use super::{
    AgentHeartbeatParams, AgentRecord, AgentRegisterParams, AuditEntry, AuditListParams,
    AuditRecord, Blocker, CancelOutcome, CancelParams, ClaimBatch, ClaimParams, CompleteOutcome,
    CompleteParams, DeniedCalls, EnqueueAuditedParams, Enqueued, ExpireDeadlinesParams,
    ExplainParams, HolderWrite, LeaderElectParams, LeaderOutcome, LeaderRenewParams, LeaderRenewal,
    NewTask, Overview, PolicyChange, PolicySetParams, ProgressParams, PurgeParams, RecoverParams,
    Recovered, ReleaseOutcome, ReleaseParams, RenewOutcome, RenewParams, RequeueDeadParams,
    RequeueOutcome, RequeueParams, Result, Store, StoreError, SuspectLease, SuspectParams,
    TaskDetail, TaskListParams, TaskPage, UnservedParams,
};
use crate::domain::{AgentId, InputLimits, Policy, PolicyScope, TaskId, TaskType};

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
            task_enqueue_many,
            task_claim_probe,
            task_count_running,
            task_claim_candidates,
            task_claim,
            lease_list_held,
            lease_renew_many,
            agent_extend_liveness,
            task_progress,
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
            lease_list_suspect,
            task_idle_report,
            audit_insert,
            audit_list,
            task_get_lease,
            task_cancel,
            task_cancel_request,
            task_get_status,
            task_requeue,
            task_count_dead,
            task_requeue_dead,
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

#[async_trait]
impl Store for SqliteStore {
    fn input_limits(&self) -> &crate::domain::InputLimits {
        &self.limits
    }

    async fn db_now(&self) -> Result<DateTime<Utc>> {
        let us: i64 = sqlx::query_scalar(sql::db_now)
            .fetch_one(&self.pool)
            .await
            .map_err(StoreError::db("db_now"))?;
        rows::time(us, "now")
    }

    async fn task_enqueue(&self, task: NewTask) -> Result<Enqueued> {
        holder::task_enqueue(&self.pool, &task, &self.limits).await
    }

    async fn task_enqueue_audited(&self, params: EnqueueAuditedParams) -> Result<Enqueued> {
        operator::task_enqueue_audited(&self.pool, &params, &self.limits).await
    }

    async fn task_enqueue_many(&self, tasks: Vec<NewTask>) -> Result<Vec<Enqueued>> {
        holder::task_enqueue_many(&self.pool, &tasks, &self.limits).await
    }

    async fn task_claim(&self, params: ClaimParams) -> Result<ClaimBatch> {
        holder::task_claim(&self.pool, &params).await
    }

    async fn lease_renew_many(&self, params: RenewParams) -> Result<RenewOutcome> {
        holder::lease_renew_many(&self.pool, &params).await
    }

    async fn task_progress(&self, params: ProgressParams) -> Result<HolderWrite> {
        holder::task_progress(&self.pool, &params).await
    }

    async fn task_complete(&self, params: CompleteParams) -> Result<CompleteOutcome> {
        let mut outcomes =
            holder::task_complete_many(&self.pool, std::slice::from_ref(&params)).await?;
        outcomes.pop().ok_or_else(|| StoreError::Corrupt {
            what: "completion",
            detail: "no result".into(),
        })
    }

    async fn task_complete_many(&self, batch: Vec<CompleteParams>) -> Result<Vec<CompleteOutcome>> {
        holder::task_complete_many(&self.pool, &batch).await
    }

    async fn lease_release_many(&self, params: ReleaseParams) -> Result<ReleaseOutcome> {
        holder::lease_release_many(&self.pool, &params).await
    }

    async fn task_cancel(&self, params: CancelParams) -> Result<CancelOutcome> {
        operator::task_cancel(&self.pool, &params).await
    }

    async fn task_requeue(&self, params: RequeueParams) -> Result<RequeueOutcome> {
        operator::task_requeue(&self.pool, &params).await
    }

    async fn task_requeue_dead(&self, params: RequeueDeadParams) -> Result<u64> {
        operator::task_requeue_dead(&self.pool, &params).await
    }

    async fn lease_recover_expired(&self, params: RecoverParams) -> Result<Vec<Recovered>> {
        params.validate()?;
        maintenance::lease_recover_expired(&self.pool, &params).await
    }

    async fn task_expire_deadlines(&self, params: ExpireDeadlinesParams) -> Result<Vec<TaskId>> {
        params.validate()?;
        maintenance::task_expire_deadlines(&self.pool, &params).await
    }

    async fn task_purge_finished(&self, params: PurgeParams) -> Result<u64> {
        params.validate()?;
        maintenance::task_purge_finished(&self.pool, &params).await
    }

    async fn task_dead_letter_unserved(
        &self,
        params: UnservedParams,
    ) -> Result<Vec<(TaskId, TaskType)>> {
        params.validate()?;
        maintenance::task_dead_letter_unserved(&self.pool, &params).await
    }

    async fn task_count_claimable(&self, task_types: Vec<TaskType>) -> Result<u64> {
        maintenance::task_count_claimable(&self.pool, &task_types).await
    }

    async fn task_idle_report(
        &self,
        params: crate::store::IdleReportParams,
    ) -> Result<crate::store::IdleReport> {
        params.validate()?;
        maintenance::task_idle_report(&self.pool, &params).await
    }

    async fn lease_list_suspect(&self, params: SuspectParams) -> Result<Vec<SuspectLease>> {
        params.validate()?;
        maintenance::lease_list_suspect(&self.pool, &params).await
    }

    async fn policy_list(&self) -> Result<Vec<Policy>> {
        query::policy_list(&self.pool).await
    }

    async fn policy_get(&self, scope: PolicyScope) -> Result<Policy> {
        let all = query::policy_list(&self.pool).await?;
        Ok(all
            .into_iter()
            .find(|p| p.scope == scope)
            .unwrap_or_else(|| Policy::inherit(scope)))
    }

    async fn policy_change(&self, params: PolicySetParams) -> Result<PolicyChange> {
        operator::policy_set(&self.pool, &params).await
    }

    async fn agent_register(&self, params: AgentRegisterParams) -> Result<AgentRecord> {
        registry::agent_register(&self.pool, &params).await
    }

    async fn agent_heartbeat(&self, params: AgentHeartbeatParams) -> Result<bool> {
        registry::agent_heartbeat(&self.pool, &params).await
    }

    async fn agent_list(&self) -> Result<Vec<AgentRecord>> {
        registry::agent_list(&self.pool).await
    }

    async fn agent_mark_stopped(&self, id: AgentId) -> Result<()> {
        registry::agent_mark_stopped(&self.pool, &id).await
    }

    async fn leader_attempt_elect(&self, params: LeaderElectParams) -> Result<LeaderOutcome> {
        registry::leader_attempt_elect(&self.pool, &params).await
    }

    async fn leader_renew(&self, params: LeaderRenewParams) -> Result<LeaderRenewal> {
        registry::leader_renew(&self.pool, &params).await
    }

    async fn leader_resign(&self, owner: AgentId, term: i64) -> Result<HolderWrite> {
        registry::leader_resign(&self.pool, &owner, term).await
    }

    async fn leader_get(&self) -> Result<Option<LeaderRecord>> {
        schedules::leader_get(&self.pool).await
    }

    async fn lock_acquire(&self, params: LockAcquireParams) -> Result<LockAcquired> {
        resources::lock_acquire(&self.pool, &params).await
    }

    async fn resource_renew(&self, params: ResourceHolderParams) -> Result<Option<ResourceRecord>> {
        resources::resource_renew(&self.pool, &params).await
    }

    async fn resource_release(
        &self,
        params: ResourceHolderParams,
    ) -> Result<Option<ResourceRecord>> {
        resources::resource_release(&self.pool, &params).await
    }

    async fn lock_force_release(&self, params: LockForceReleaseParams) -> Result<ResourceRecord> {
        resources::lock_force_release(&self.pool, &params).await
    }

    async fn lock_list(&self) -> Result<LockListing> {
        resources::lock_list(&self.pool).await
    }

    async fn resource_renew_many(
        &self,
        params: ResourceRenewParams,
    ) -> Result<ResourceRenewOutcome> {
        resources::resource_renew_many(&self.pool, &params).await
    }

    async fn shard_group_create(
        &self,
        params: ShardGroupCreateParams,
    ) -> Result<ShardGroupCreated> {
        resources::shard_group_create(&self.pool, &params).await
    }

    async fn shard_group_list(
        &self,
        grace: Duration,
    ) -> Result<(Vec<ShardGroupRecord>, DateTime<Utc>)> {
        resources::shard_group_list(&self.pool, grace).await
    }

    async fn shard_group_get(
        &self,
        group: GroupName,
        grace: Duration,
    ) -> Result<Option<ShardGroupView>> {
        resources::shard_group_get(&self.pool, &group, grace).await
    }

    async fn shard_join(&self, params: ShardJoinParams) -> Result<()> {
        resources::shard_join(&self.pool, &params).await
    }

    async fn shard_leave(&self, group: GroupName, member: AgentId) -> Result<()> {
        resources::shard_leave(&self.pool, &group, &member).await
    }

    async fn shard_acquire(&self, params: ShardAcquireParams) -> Result<Option<i64>> {
        resources::shard_acquire(&self.pool, &params).await
    }

    async fn resource_history_prune(&self, older_than: Duration) -> Result<u64> {
        resources::resource_history_prune(&self.pool, older_than).await
    }

    async fn schedule_list(&self) -> Result<ScheduleListing> {
        schedules::schedule_list(&self.pool).await
    }

    async fn schedule_add(&self, params: ScheduleAddParams) -> Result<ScheduleAdded> {
        schedules::schedule_add(&self.pool, &params).await
    }

    async fn schedule_remove(&self, params: ScheduleNameParams) -> Result<Option<ScheduleRecord>> {
        schedules::schedule_remove(&self.pool, &params).await
    }

    async fn schedule_set_enabled(&self, params: ScheduleEnableParams) -> Result<ScheduleEnabled> {
        schedules::schedule_set_enabled(&self.pool, &params).await
    }

    async fn schedule_trigger(&self, params: ScheduleNameParams) -> Result<ScheduleTriggered> {
        schedules::schedule_trigger(&self.pool, &params, &self.limits).await
    }

    async fn schedule_fire_due(&self, params: ScheduleFireParams) -> Result<FireReport> {
        schedules::schedule_fire_due(&self.pool, &params, &self.limits).await
    }

    async fn audit_record(&self, entry: AuditEntry) -> Result<()> {
        operator::audit_record(&self.pool, &entry).await
    }

    async fn audit_record_denied(&self, calls: DeniedCalls) -> Result<()> {
        operator::audit_record_denied(&self.pool, &calls).await
    }

    async fn audit_list(&self, params: AuditListParams) -> Result<Vec<AuditRecord>> {
        query::audit_list(&self.pool, &params).await
    }

    async fn task_list(&self, params: TaskListParams) -> Result<TaskPage> {
        query::task_list(&self.pool, &params).await
    }

    async fn task_get(&self, id: TaskId) -> Result<Option<TaskDetail>> {
        query::task_get(&self.pool, id).await
    }

    async fn task_explain(&self, params: ExplainParams) -> Result<Vec<Blocker>> {
        query::task_explain(&self.pool, &params).await
    }

    async fn task_overview(&self) -> Result<Overview> {
        query::task_overview(&self.pool).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use sqlx::Executor;

    use super::*;

    #[tokio::test]
    async fn every_statement_file_says_what_it_does_and_prepares() {
        let dir = std::env::temp_dir().join(format!(
            "leasehold-sqlite-statements-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let url = format!("sqlite://{}", dir.join("q.sqlite").display());
        let store = SqliteStore::connect(&url, SqliteStoreOptions::default())
            .await
            .unwrap();
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
}
