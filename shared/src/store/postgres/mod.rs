//! The PostgreSQL store: production storage, the only one for several hosts.
//!
//! [`PgStore`] is a [`Driver`](super::driver::Driver): it runs statements and is a
//! [`Store`](super::Store) through the Store layer written once for both backends
//! (`store/driver.rs`: validation, derived operations, wake-ups). This module holds the pool, the
//! statement list and `ops`, which names the function of each operation; its wake-up is a
//! NOTIFY on [`NOTIFY_CHANNEL`].
//!
//! SQL lives in `sql/*.sql`, one statement per file named after its operation, loaded with
//! `include_str!`. The task hot path is one statement per batch (renew, complete, release;
//! claims of limited scopes run in a short transaction that first takes one advisory lock per
//! limited scope). Operator actions, resource leases and schedules run as short
//! multi-statement transactions (read with a row lock, decide, write, audit).
//!
//! Enqueue is also offered generic over the executor ([`enqueue::task_enqueue`],
//! [`enqueue::task_enqueue_many`]) so applications enqueue in the same transaction as their
//! business data; audit rows likewise ([`operator::audit_write`]).

mod claim;
mod db;
pub mod enqueue;
mod history;
mod holder;
pub mod hosts;
mod maintenance;
pub mod operator;
mod query;
mod registry;
mod resources;
mod rows;
mod schedules;

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::ConnectOptions;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use db::Db;
pub use db::Pooler;

use super::{Result, StoreError};
use crate::domain::InputLimits;

/// The embedded PostgreSQL migrations (`migrations/postgres/`).
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

pub use holder::task_complete_in;
pub use resources::resource_fence;

/// The NOTIFY channel enqueues and requeues signal (a hint: agents poll as well).
pub const NOTIFY_CHANNEL: &str = "leasehold_tasks";

/// Default size of the store's connection pool.
pub const DEFAULT_POOL_SIZE: u32 = 10;
/// Default time to wait for a pooled connection.
pub const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) mod sql {
    macro_rules! statements {
        ($($name:ident),* $(,)?) => {
            $(pub const $name: &str = include_str!(concat!("sql/", stringify!($name), ".sql"));)*
        };
    }
    #[allow(non_upper_case_globals)]
    mod names {
        statements!(
            db_now,
            tx_begin_read_committed,
            tx_begin_snapshot,
            startup_check,
            plan_indexed,
            notify_tasks,
            task_enqueue,
            task_enqueue_lock,
            task_enqueue_release,
            task_enqueue_replace,
            task_enqueue_many,
            task_enqueue_many_keyless,
            task_enqueue_max_attempts,
            task_claim_lock,
            task_key_walk,
            task_claim,
            task_claim_keyed,
            rate_limit_wait,
            rate_limit_stamp,
            lease_renew_many,
            task_progress,
            task_checkpoint,
            task_complete_read,
            task_complete_many,
            task_attempt_outcomes,
            lease_release_many,
            lease_release_repeated,
            task_cancel,
            task_lock,
            task_requeue,
            task_run_now,
            task_delete,
            task_count_live,
            task_requeue_dead,
            task_purge_dead,
            task_match_dead,
            lease_list_expired,
            lease_recover_expired,
            task_expire_deadlines,
            task_shed,
            breaker_tick,
            task_purge_finished,
            task_purge_finished_undivided,
            task_done_partitions_ensure,
            task_done_partitions_due,
            task_done_partition_drop,
            task_dead_letter_unserved,
            task_count_claimable,
            task_recent_runs,
            task_idle_report,
            lease_list_suspect,
            policy_list,
            policy_get_for_update,
            policy_upsert,
            policy_guard_exclusive,
            agent_register,
            agent_heartbeat,
            agent_list,
            agent_mark_stopped,
            leader_attempt_elect,
            leader_renew,
            leader_resign,
            leader_resign_repeated,
            leader_get,
            leader_check,
            schedule_list,
            schedule_get,
            schedule_lock,
            schedule_insert,
            schedule_update,
            schedule_delete,
            schedule_set_enabled,
            schedule_set_last_task,
            schedule_due,
            schedule_fired,
            schedule_next_due,
            audit_insert,
            audit_list,
            task_get,
            task_attempts,
            task_explain,
            task_overview,
            resource_get_for_update,
            resource_take,
            lock_insert,
            resource_renew,
            resource_renew_many,
            resource_release,
            resource_release_repeated,
            lock_force_release,
            lock_list,
            resource_moves,
            shard_group_list,
            shard_group_lock,
            shard_group_insert,
            shard_list,
            shard_member_list,
            shard_join,
            shard_leave,
            resource_history_prune,
            resource_fence,
            wake_probe,
            migrations_table_exists,
            migrations_count_applied,
            migrations_applied_list,
            task_delete_of_type,
            server_checkpoint,
            server_counters,
            server_statement_calls,
            task_stats,
            queue_history_lock,
            queue_history_now,
            queue_history_minutes_from,
            queue_history_mark_before,
            queue_history_mark_set,
            queue_history_count_enqueued,
            queue_history_count_finished,
            queue_history_count_failed_attempts,
            queue_history_depth,
            queue_history_rows_between,
            queue_history_upsert,
            queue_history_minutes_counted,
            queue_history_read_minutes,
            queue_history_prune,
            queue_history_minutes_prune,
        );
    }
    pub use names::*;

    /// Task listings: a head naming the statuses, then the shared filter, order and page.
    macro_rules! paged {
        ($($name:ident),* $(,)?) => {
            $(pub const $name: &str = concat!(
                include_str!(concat!("sql/", stringify!($name), ".sql")),
                include_str!("sql/task_list_page.sql"),
            );)*
        };
    }
    #[allow(non_upper_case_globals)]
    mod paged_names {
        paged!(
            task_list,
            task_list_dead,
            task_list_leased,
            task_list_waiting,
            task_list_finished
        );
    }
    pub use paged_names::*;

    /// The Tasks view's finished counts: a head naming the statuses as constants, then the
    /// shared filter and cap.
    macro_rules! counted {
        ($($name:ident),* $(,)?) => {
            $(pub const $name: &str = concat!(
                include_str!(concat!("sql/", stringify!($name), ".sql")),
                include_str!("sql/task_count_finished.sql"),
            );)*
        };
    }
    #[allow(non_upper_case_globals)]
    mod counted_names {
        counted!(task_count_succeeded, task_count_cancelled, task_count_dead);
    }
    pub use counted_names::*;
}

/// How every store transaction begins: the statements rely on READ COMMITTED semantics (each
/// statement sees what committed before it; row locks re-check the latest row version), so
/// they say so rather than inherit a server default.
pub(crate) const BEGIN_READ_COMMITTED: &str = sql::tx_begin_read_committed;

/// Begins a READ COMMITTED transaction whose planner may only use index nested loops
/// (sql/plan_indexed.sql), for the batch statements and the reads that decide them.
pub(crate) async fn begin_indexed(
    pool: &Db,
    op: &'static str,
) -> Result<sqlx::Transaction<'static, sqlx::Postgres>> {
    let mut tx = pool.begin().await.map_err(StoreError::db(op))?;
    if pool.is_pooled() {
        // Not prepared behind a pooler: the simple protocol takes one round trip, not two.
        sqlx::raw_sql(sql::plan_indexed)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db(op))?;
    } else {
        sqlx::query(sql::plan_indexed)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db(op))?;
    }
    Ok(tx)
}

/// Runs one row-returning statement in a READ COMMITTED transaction whose planner may only use
/// index nested loops (sql/plan_indexed.sql): batch statements stay linear in their batch size
/// whatever the table statistics say.
pub(crate) async fn fetch_indexed<'q>(
    pool: &Db,
    query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    op: &'static str,
) -> Result<Vec<sqlx::postgres::PgRow>> {
    let mut tx = begin_indexed(pool, op).await?;
    let rows = query
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db(op))?;
    tx.commit().await.map_err(StoreError::db(op))?;
    Ok(rows)
}

/// Options for connecting a [`PgStore`].
#[derive(Debug, Clone)]
pub struct PgStoreOptions {
    pub max_connections: u32,
    pub acquire_timeout: Duration,
    pub limits: InputLimits,
    /// `application_name` shown in `pg_stat_activity`.
    pub application_name: String,
    /// Server-side limit on any one statement (None: the server's default).
    pub statement_timeout: Option<Duration>,
    /// A transaction left idle this long (its client stalled or gone half-open) is ended by
    /// the server, releasing its row locks.
    pub idle_in_transaction_timeout: Duration,
    /// With a URL naming several servers or a `target_session_attrs`: watch the server in use
    /// and move the pool to another after a failover (see [`hosts`]). Off for a store that is
    /// opened again after each failure anyway (it finds the usable server as it connects).
    pub follow_failover: bool,
    /// Whether to run as behind a transaction pooler such as PgBouncer (see [`db`]); by
    /// default recognised as the store connects.
    pub pooler: Pooler,
    /// Where [`PgStore::wake_source`] LISTENs: a direct connection (`postgres://…`, one
    /// server). Without it the store's own server is used — unless that is a transaction
    /// pooler, through which LISTEN cannot work: the agent polls instead.
    pub notify_url: Option<String>,
}

impl Default for PgStoreOptions {
    fn default() -> Self {
        Self {
            max_connections: DEFAULT_POOL_SIZE,
            acquire_timeout: DEFAULT_ACQUIRE_TIMEOUT,
            limits: InputLimits::default(),
            application_name: "leasehold".to_string(),
            statement_timeout: None,
            idle_in_transaction_timeout: Duration::from_secs(60),
            follow_failover: true,
            pooler: Pooler::Auto,
            notify_url: None,
        }
    }
}

/// The PostgreSQL implementation of [`Store`].
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: Db,
    limits: InputLimits,
    /// Where this store's claims stand in each type's round of concurrency keys (shared by
    /// clones, so by every claimer of an agent).
    key_cursors: std::sync::Arc<crate::store::KeyCursors>,
    /// Held by every clone; the failover watch (several servers) ends once all are dropped.
    alive: Option<std::sync::Arc<()>>,
    /// Where to LISTEN when that is not the store's own server ([`PgStoreOptions::notify_url`]):
    /// a pool of one connection, opened when first wanted.
    notify: Option<PgPool>,
}

impl PgStore {
    /// Connects a pool to `url` (`postgres://…`).
    pub async fn connect(url: &str, options: PgStoreOptions) -> Result<Self> {
        let mut settings = vec![
            (
                "default_transaction_isolation",
                "read committed".to_string(),
            ),
            // Short OLTP statements: JIT compilation would cost more than it could ever save.
            ("jit", "off".to_string()),
            // Every statement is prepared once per connection and driven by ids, small arrays
            // or constants: plan it once, not on every execution (which costs as much as running
            // it). Listings name their indexed statuses as constants for this reason.
            ("plan_cache_mode", "force_generic_plan".to_string()),
            // No store transaction waits for a person: one left idle (a stalled process) is
            // ended rather than left holding locks.
            (
                "idle_in_transaction_session_timeout",
                format!(
                    "{}ms",
                    options.idle_in_transaction_timeout.as_millis().max(1)
                ),
            ),
        ];
        if let Some(timeout) = options.statement_timeout {
            settings.push((
                "statement_timeout",
                format!("{}ms", timeout.as_millis().max(1)),
            ));
        }
        let targets = hosts::parse_targets(url)?;
        let notify = options
            .notify_url
            .as_deref()
            .map(notify_connect_options)
            .transpose()?
            .map(|o| {
                PgPoolOptions::new()
                    .max_connections(1)
                    .acquire_timeout(options.acquire_timeout)
                    .connect_lazy_with(o.application_name(&options.application_name))
            });
        let direct = |o: &PgConnectOptions| {
            o.clone()
                .application_name(&options.application_name)
                .options(settings.clone())
        };
        // Behind a transaction pooler: no startup parameters it would refuse (the settings
        // go with each transaction instead), no named statements (see [`db`]).
        let pooled = |o: &PgConnectOptions| {
            o.clone()
                .application_name(&options.application_name)
                .extra_float_digits(None)
                .statement_cache_capacity(0)
        };
        let behind_pooler = match options.pooler {
            Pooler::Transaction => true,
            Pooler::None => false,
            Pooler::Auto => Self::pooler_in_use(&targets, &options, &direct).await?,
        };
        if behind_pooler && options.pooler == Pooler::Auto {
            tracing::info!(
                "connection pooler in use: every statement runs in a transaction of its own, \
                 without prepared statements, the settings set per transaction"
            );
        }
        let mut store = match (targets.is_plain(), behind_pooler) {
            // Finding out whether a pooler is in use connected once already.
            (true, false) => {
                let tried = options.pooler == Pooler::Auto;
                Self::connect_one(&direct(&targets.hosts[0]), &options, tried).await?
            }
            (true, true) => Self::connect_one(&pooled(&targets.hosts[0]), &options, false).await?,
            (false, false) => Self::connect_failover(targets, &options, direct).await?,
            (false, true) => Self::connect_failover(targets, &options, pooled).await?,
        };
        if behind_pooler {
            store.pool = Db::pooled(store.pool.pool.clone(), &settings);
        }
        store.notify = notify;
        Ok(store)
    }

    /// Whether the first server of `targets` that answers is a transaction pooler (see
    /// [`db`]): it refuses the startup `options` parameter, or takes it and drops it — told
    /// by a value of this attempt's own sent with the settings, which no server, database or
    /// role setting can give. With one server its failure is the answer; with several they
    /// are tried in [`hosts::try_order`], each for at most [`hosts::PROBE_TIMEOUT`], and one
    /// that fails is skipped (the failover connect then reports each). The whole takes at most
    /// the acquire timeout; past it the answer is no.
    async fn pooler_in_use(
        targets: &hosts::Targets,
        options: &PgStoreOptions,
        direct: &impl Fn(&PgConnectOptions) -> PgConnectOptions,
    ) -> Result<bool> {
        let plain = targets.is_plain();
        let nonce = format!("{:016x}", fastrand::u64(..));
        let deadline = tokio::time::Instant::now() + options.acquire_timeout;
        let per_server = if plain {
            options.acquire_timeout
        } else {
            hosts::PROBE_TIMEOUT.min(options.acquire_timeout)
        };
        for i in hosts::try_order(&targets.names) {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                break;
            }
            let connect = direct(&targets.hosts[i]).options([(db::STARTUP_CHECK, nonce.as_str())]);
            let attempt = async {
                let mut conn = connect.connect().await?;
                let in_effect = db::startup_check_in_effect(&mut conn, &nonce).await;
                let _ = sqlx::Connection::close(conn).await;
                in_effect
            };
            match tokio::time::timeout(per_server.min(left), attempt).await {
                Ok(Ok(in_effect)) => return Ok(!in_effect),
                Ok(Err(error)) if db::refused_startup_parameter(&error) => return Ok(true),
                Ok(Err(error)) if plain => return Err(StoreError::db("connect")(error)),
                Err(_elapsed) if plain => {
                    return Err(StoreError::Database {
                        op: "connect",
                        source: sqlx::Error::PoolTimedOut,
                    });
                }
                Ok(Err(_)) | Err(_) => continue,
            }
        }
        Ok(false)
    }

    /// A pool of `connect`'s connections, after one plain attempt (unless `tried` already): a
    /// refused connection, an unknown database or a bad password is reported at once, in its
    /// own words. The pool would retry it until its acquire timeout and then say only that it
    /// timed out.
    async fn connect_one(
        connect: &PgConnectOptions,
        options: &PgStoreOptions,
        tried: bool,
    ) -> Result<Self> {
        let attempt = async {
            if tried {
                return Ok(Ok(None));
            }
            tokio::time::timeout(options.acquire_timeout, connect.connect())
                .await
                .map(|r| r.map(Some))
        };
        match attempt.await {
            Ok(Ok(None)) => {}
            Ok(Ok(Some(conn))) => {
                // The pool opens its own connections; this one only proved the way works.
                let _ = sqlx::Connection::close(conn).await;
            }
            Ok(Err(error)) => return Err(StoreError::db("connect")(error)),
            Err(_elapsed) => {
                return Err(StoreError::Database {
                    op: "connect",
                    source: sqlx::Error::PoolTimedOut,
                });
            }
        }
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            .connect_with(connect.clone())
            .await
            .map_err(StoreError::db("connect"))?;
        Ok(Self::from_pool(pool, options.limits))
    }

    /// [`PgStore::connect`] to a URL naming several servers or a `target_session_attrs`:
    /// the first usable server in order, then a monitor that follows a failover (see
    /// [`hosts`]).
    async fn connect_failover(
        targets: hosts::Targets,
        options: &PgStoreOptions,
        configure: impl Fn(&PgConnectOptions) -> PgConnectOptions,
    ) -> Result<Self> {
        let attrs = targets.attrs;
        let failover = std::sync::Arc::new(hosts::Failover::new(
            targets.hosts.iter().map(configure).collect(),
            targets.names,
            attrs,
        ));
        let probe = tokio::time::timeout(options.acquire_timeout, failover.find())
            .await
            .map_err(|_| StoreError::Database {
                op: "connect",
                source: sqlx::Error::Io(std::io::Error::other(format!(
                    "no usable server found within {:?} among {}",
                    options.acquire_timeout,
                    failover.names().join(", ")
                ))),
            })??;
        tracing::info!(server = failover.current_name(), "database server chosen");
        let stale = std::sync::Arc::clone(&failover);
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            .after_connect(move |conn, _meta| {
                Box::pin(async move { hosts::check_new_connection(conn, attrs).await })
            })
            .before_acquire(move |_conn, meta| {
                let stale = stale.is_stale(meta.age);
                Box::pin(async move { Ok(!stale) })
            })
            .connect_with(failover.current())
            .await
            .map_err(StoreError::db("connect"))?;
        let mut store = Self::from_pool(pool, options.limits);
        if options.follow_failover {
            let alive = std::sync::Arc::new(());
            std::sync::Arc::clone(&failover).spawn_monitor(
                store.pool().clone(),
                probe,
                std::sync::Arc::downgrade(&alive),
            );
            store.alive = Some(alive);
        } else {
            let _ = sqlx::Connection::close(probe).await;
        }
        Ok(store)
    }

    /// Wraps an existing pool. Its connections should use READ COMMITTED (the server default)
    /// for single statements; transactions the store opens set it themselves.
    pub fn from_pool(pool: PgPool, limits: InputLimits) -> Self {
        Self {
            pool: Db::direct(pool),
            limits,
            key_cursors: Default::default(),
            alive: None,
            notify: None,
        }
    }

    /// The pool, for callers that enqueue inside their own transactions. Behind a transaction
    /// pooler ([`PgStore::behind_pooler`]) its connections keep no prepared statements, but a
    /// statement run on it outside a transaction may still be parsed on one server connection
    /// and executed on another: use it inside `begin()` … `commit()` only.
    pub fn pool(&self) -> &PgPool {
        &self.pool.pool
    }

    /// Whether the store runs as behind a transaction pooler (see [`db`]).
    pub fn behind_pooler(&self) -> bool {
        self.pool.is_pooled()
    }

    /// The input limits this store enforces.
    pub fn limits(&self) -> &InputLimits {
        &self.limits
    }

    /// Applies pending migrations. Safe to run twice and from several hosts at once (the
    /// migrator holds an advisory lock while it works).
    ///
    /// Behind a transaction pooler, refused unless the database applied exactly this build's
    /// migrations (nothing to do then): the migrator's advisory lock is a session lock, which the pooler would leave
    /// held on whichever server connection took it.
    pub async fn migrate(&self) -> Result<()> {
        if self.behind_pooler() {
            if self.migrations_match().await? {
                return Ok(());
            }
            return Err(StoreError::Invalid(crate::ValidationError::Invalid {
                field: "database_url",
                detail: MIGRATE_THROUGH_POOLER.to_string(),
            }));
        }
        MIGRATOR.run(self.pool()).await?;
        Ok(())
    }

    /// Whether the database applied exactly this build's migrations (versions and checksums):
    /// what `migrate` needs to have nothing to do. A database never migrated has applied none.
    async fn migrations_match(&self) -> Result<bool> {
        const OP: &str = "migrate";
        let exists: bool = sqlx::query_scalar(sql::migrations_table_exists)
            .fetch_one(&self.pool)
            .await
            .map_err(StoreError::db(OP))?;
        if !exists {
            return Ok(false);
        }
        let applied: Vec<(i64, Vec<u8>)> = sqlx::query_as(sql::migrations_applied_list)
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db(OP))?;
        let known: Vec<(i64, Vec<u8>)> = MIGRATOR
            .iter()
            .filter(|m| !m.migration_type.is_down_migration())
            .map(|m| (m.version, m.checksum.to_vec()))
            .collect();
        Ok(applied == known)
    }

    /// Closes the pool.
    pub async fn close(&self) {
        if let Some(notify) = &self.notify {
            notify.close().await;
        }
        self.pool.pool.close().await;
    }

    /// A CHECKPOINT (needs superuser or `pg_checkpoint`): for the bench, after loading a
    /// backlog.
    pub async fn server_checkpoint(&self) -> Result<()> {
        sqlx::query(sql::server_checkpoint)
            .execute(&self.pool)
            .await
            .map_err(StoreError::db("server_checkpoint"))?;
        Ok(())
    }

    /// The server's counters now (see [`ServerCounters`]), counting the connections whose
    /// `application_name` is LIKE `application_name_like`. Takes no transaction id.
    pub async fn server_counters(&self, application_name_like: &str) -> Result<ServerCounters> {
        const OP: &str = "server_counters";
        let (wal_bytes, next_xid, commits, has_statements, backend_pids, database): (
            i64,
            i64,
            i64,
            bool,
            Vec<i32>,
            String,
        ) = sqlx::query_as(sql::server_counters)
            .bind(application_name_like)
            .fetch_one(&self.pool)
            .await
            .map_err(StoreError::db(OP))?;
        let statements = if has_statements {
            match sqlx::query_scalar(sql::server_statement_calls)
                .fetch_one(&self.pool)
                .await
            {
                Ok(calls) => Some(calls),
                // The view exists but its library is not in shared_preload_libraries.
                Err(sqlx::Error::Database(e))
                    if e.code().as_deref() == Some(OBJECT_NOT_IN_PREREQUISITE_STATE) =>
                {
                    None
                }
                Err(e) => return Err(StoreError::db(OP)(e)),
            }
        } else {
            None
        };
        Ok(ServerCounters {
            wal_bytes,
            next_xid,
            commits,
            statements,
            backends: backend_pids.len() as i64,
            backend_pids,
            database,
        })
    }

    /// This database's wake-up: LISTEN on [`NOTIFY_CHANNEL`], on a connection of its own —
    /// to [`PgStoreOptions::notify_url`] when given, else to the store's server unless that
    /// is a transaction pooler (none then: the agent polls).
    pub fn wake_source(&self) -> super::wake::WakeSource {
        match (&self.notify, self.behind_pooler()) {
            (Some(notify), _) => super::wake::WakeSource::postgres(notify.clone()),
            (None, false) => super::wake::WakeSource::postgres(self.pool().clone()),
            (None, true) => super::wake::WakeSource::poll(),
        }
    }
}

/// Why `migrate` is refused behind a transaction pooler.
pub const MIGRATE_THROUGH_POOLER: &str = "this URL leads through a transaction pooler (such as \
PgBouncer) and the database's migrations are not this build's (one is pending, or they differ): \
migrations hold a session-level advisory lock, which the pooler would leave held on one of its \
server connections; run `leasehold-agent migrate` with a direct connection to PostgreSQL";

/// The connection options of a notify URL (`--notify-database-url`): one PostgreSQL server,
/// no settings (LISTEN needs none), nothing a pooler in session mode would refuse.
fn notify_connect_options(url: &str) -> Result<PgConnectOptions> {
    let targets = hosts::parse_targets(url).map_err(|e| match e {
        StoreError::Invalid(crate::ValidationError::Invalid { detail, .. }) => {
            StoreError::Invalid(crate::ValidationError::Invalid {
                field: "notify_database_url",
                detail,
            })
        }
        other => other,
    })?;
    if !targets.is_plain() {
        return Err(StoreError::Invalid(crate::ValidationError::Invalid {
            field: "notify_database_url",
            detail: "name one server (LISTEN is not allowed on a standby, so there is \
                     nothing to fail over to)"
                .to_string(),
        }));
    }
    Ok(targets.hosts[0].clone().extra_float_digits(None))
}

/// SQLSTATE `object_not_in_prerequisite_state`: what pg_stat_statements answers when its library
/// was not preloaded.
const OBJECT_NOT_IN_PREREQUISITE_STATE: &str = "55000";

/// The server's counters at one moment ([`PgStore::server_counters`]), for the cost per task of
/// `leasehold-agent bench`: the difference of two readings is the cost of what ran between them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerCounters {
    /// WAL position in bytes (`pg_current_wal_lsn()`): server-wide, every database's writes.
    pub wal_bytes: i64,
    /// The next transaction id (`pg_snapshot_xmax(pg_current_snapshot())`, read without taking
    /// one): server-wide.
    pub next_xid: i64,
    /// Transactions committed in this database (`pg_stat_database.xact_commit`), as far as the
    /// backends have flushed their statistics: a busy backend at most once a second, an idle one
    /// within 10 s, and every backend as it exits.
    pub commits: i64,
    /// Statements run in this database (the sum of `pg_stat_statements.calls`), when that view
    /// exists here and its library is loaded; `None` otherwise.
    pub statements: Option<i64>,
    /// Connected backends whose `application_name` matched the pattern asked for.
    pub backends: i64,
    /// Their server process ids, in order.
    pub backend_pids: Vec<i32>,
    /// This database's name (a backend's process title shows it).
    pub database: String,
}

/// Parses a PostgreSQL URL, refusing other schemes with a clear message. A URL naming several
/// servers gives the first (see [`hosts::parse_targets`] for all of them).
pub fn connect_options(url: &str) -> Result<PgConnectOptions> {
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(StoreError::unsupported_url(url));
    }
    let mut targets = hosts::parse_targets(url)?;
    Ok(targets.hosts.swap_remove(0))
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// The database clock, read on `conn` (inside a transaction: its start time).
async fn tx_now(conn: &mut sqlx::PgConnection, op: &'static str) -> Result<DateTime<Utc>> {
    sqlx::query_scalar(sql::db_now)
        .fetch_one(conn)
        .await
        .map_err(StoreError::db(op))
}

/// Each [`Driver`](super::driver::Driver) operation's function, under the operation's name
/// (where the area file names it otherwise, renamed here).
mod ops {
    pub(super) use super::claim::*;
    pub(super) use super::enqueue::{
        task_enqueue_many_with_retry as task_enqueue_many, task_enqueue_with_retry as task_enqueue,
    };
    pub(super) use super::history::*;
    pub(super) use super::holder::*;
    pub(super) use super::maintenance::*;
    pub(super) use super::operator::{
        audit_write as audit_record, audit_write_denied as audit_record_denied,
        policy_set as policy_change, task_cancel, task_delete, task_enqueue_audited,
        task_purge_dead, task_requeue, task_requeue_dead, task_run_now,
    };
    pub(super) use super::query::*;
    pub(super) use super::registry::*;
    pub(super) use super::resources::*;
    pub(super) use crate::store::dialect::{
        audit_list, migrations_applied, policy_list, task_delete_of_type,
    };

    use super::db::Db;
    use super::operator::Pg;

    // The resource lease and schedule operations, written once over the backend seam
    // (`store/audit/backend.rs`), each run on this store.
    crate::store::resources::flow::resource_entry_points!(Pg, Db);
    crate::store::schedules::flow::schedule_entry_points!(Pg, Db);

    /// NOTIFY on [`NOTIFY_CHANNEL`](super::NOTIFY_CHANNEL). A hint only: agents poll as well,
    /// so a lost notification delays, never loses, work.
    pub(super) async fn wake(pool: &super::db::Db) {
        if let Err(error) = sqlx::query(super::sql::notify_tasks).execute(pool).await {
            tracing::debug!(%error, "notify failed");
        }
    }
}

/// The statements of the operations written once over [`Dialect`](super::dialect::Dialect);
/// times are bound as `timestamptz`.
impl super::dialect::Dialect for sqlx::Postgres {
    const POLICY_LIST: &'static str = sql::policy_list;
    const AUDIT_LIST: &'static str = sql::audit_list;
    const MIGRATIONS_TABLE_EXISTS: &'static str = sql::migrations_table_exists;
    const MIGRATIONS_COUNT_APPLIED: &'static str = sql::migrations_count_applied;
    const TASK_DELETE_OF_TYPE: &'static str = sql::task_delete_of_type;

    type Time = DateTime<Utc>;
    fn stored_time(t: DateTime<Utc>) -> DateTime<Utc> {
        t
    }

    fn rows_affected(done: &sqlx::postgres::PgQueryResult) -> u64 {
        done.rows_affected()
    }

    fn migrator() -> &'static sqlx::migrate::Migrator {
        &MIGRATOR
    }
}

super::driver::impl_driver!(PgStore);
