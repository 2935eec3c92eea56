//! [`AnyStore`]: the store a database URL names — `postgres://…` (or `postgresql://…`) or
//! `sqlite://PATH` — for the binaries and tools that take a URL. It only dispatches to the
//! backend's store; what runs is each backend's (its `Driver`, its statements).

use std::sync::Arc;

use super::driver::Driver;
use super::postgres::{PgStore, PgStoreOptions, ServerCounters};
#[cfg(feature = "sqlite")]
use super::sqlite::{SqliteStore, SqliteStoreOptions};
use super::{Result, Store, StoreError};
use crate::domain::TaskType;

/// A connected store of either backend.
#[derive(Debug, Clone)]
pub enum AnyStore {
    Postgres(PgStore),
    #[cfg(feature = "sqlite")]
    Sqlite(SqliteStore),
}

impl AnyStore {
    /// Connects to `url` with a pool of `max_connections` (a SQLite file is created when
    /// missing; neither is migrated here).
    pub async fn connect(url: &str, max_connections: u32) -> Result<Self> {
        Self::connect_named(
            url,
            max_connections,
            &PgStoreOptions::default().application_name,
        )
        .await
    }

    /// [`AnyStore::connect`], with PostgreSQL connections showing `application_name` in
    /// `pg_stat_activity` (SQLite has no such name).
    pub async fn connect_named(
        url: &str,
        max_connections: u32,
        application_name: &str,
    ) -> Result<Self> {
        if super::is_sqlite_url(url) {
            #[cfg(not(feature = "sqlite"))]
            return Err(StoreError::unsupported_url(url));
            #[cfg(feature = "sqlite")]
            let store = SqliteStore::connect(
                url,
                SqliteStoreOptions {
                    max_connections,
                    ..SqliteStoreOptions::default()
                },
            )
            .await?;
            #[cfg(feature = "sqlite")]
            return Ok(AnyStore::Sqlite(store));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let store = PgStore::connect(
                url,
                PgStoreOptions {
                    max_connections,
                    application_name: application_name.to_string(),
                    ..PgStoreOptions::default()
                },
            )
            .await?;
            return Ok(AnyStore::Postgres(store));
        }
        Err(StoreError::unsupported_url(url))
    }

    /// The store behind the trait.
    pub fn store(&self) -> Arc<dyn Store> {
        match self {
            AnyStore::Postgres(s) => Arc::new(s.clone()),
            #[cfg(feature = "sqlite")]
            AnyStore::Sqlite(s) => Arc::new(s.clone()),
        }
    }

    /// Applies pending migrations of the backend.
    pub async fn migrate(&self) -> Result<()> {
        match self {
            AnyStore::Postgres(s) => s.migrate().await,
            #[cfg(feature = "sqlite")]
            AnyStore::Sqlite(s) => s.migrate().await,
        }
    }

    /// How many migrations the database has applied, and how many this build knows, so
    /// `migrate` can say whether it changed anything. A database never migrated has applied 0.
    pub async fn migrations_applied(&self) -> Result<(usize, usize)> {
        match self {
            AnyStore::Postgres(s) => Driver::migrations_applied(s).await,
            #[cfg(feature = "sqlite")]
            AnyStore::Sqlite(s) => Driver::migrations_applied(s).await,
        }
    }

    /// Deletes every task of `task_type` (and its attempts), whatever its status: for tools
    /// that own a type of their own, like the bench.
    pub async fn delete_tasks_of_type(&self, task_type: &TaskType) -> Result<u64> {
        match self {
            AnyStore::Postgres(s) => Driver::task_delete_of_type(s, task_type).await,
            #[cfg(feature = "sqlite")]
            AnyStore::Sqlite(s) => Driver::task_delete_of_type(s, task_type).await,
        }
    }

    /// The server's counters now, for a tool's cost figures (see [`ServerCounters`]; `backends`
    /// counts the connections whose `application_name` is LIKE `application_name_like`): for
    /// the bench. `None` on SQLite, which keeps no such counters.
    pub async fn server_counters(
        &self,
        application_name_like: &str,
    ) -> Result<Option<ServerCounters>> {
        match self {
            AnyStore::Postgres(s) => s.server_counters(application_name_like).await.map(Some),
            #[cfg(feature = "sqlite")]
            AnyStore::Sqlite(_) => Ok(None),
        }
    }

    /// A checkpoint of the server, for the bench: `None` on SQLite (nothing to do there), else
    /// whether it ran.
    pub async fn server_checkpoint(&self) -> Option<Result<()>> {
        match self {
            AnyStore::Postgres(s) => Some(s.server_checkpoint().await),
            #[cfg(feature = "sqlite")]
            AnyStore::Sqlite(_) => None,
        }
    }

    /// Whether the store runs as behind a transaction pooler (PostgreSQL through PgBouncer).
    pub fn behind_pooler(&self) -> bool {
        match self {
            AnyStore::Postgres(s) => s.behind_pooler(),
            #[cfg(feature = "sqlite")]
            AnyStore::Sqlite(_) => false,
        }
    }

    /// The backend's wake-up source (LISTEN, or the SQLite file's change counter).
    pub fn wake_source(&self) -> super::WakeSource {
        match self {
            AnyStore::Postgres(s) => s.wake_source(),
            #[cfg(feature = "sqlite")]
            AnyStore::Sqlite(s) => s.wake_source(),
        }
    }

    /// The PostgreSQL pool behind the store, which applications borrow to enqueue inside their
    /// own transactions; `None` on SQLite.
    pub fn pg_pool(&self) -> Option<&sqlx::PgPool> {
        match self {
            AnyStore::Postgres(s) => Some(s.pool()),
            #[cfg(feature = "sqlite")]
            AnyStore::Sqlite(_) => None,
        }
    }

    /// Closes the pool (a SQLite file is checkpointed by its last connection closing).
    pub async fn close(&self) {
        match self {
            AnyStore::Postgres(s) => s.close().await,
            #[cfg(feature = "sqlite")]
            AnyStore::Sqlite(s) => s.close().await,
        }
    }
}
