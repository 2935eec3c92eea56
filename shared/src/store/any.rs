//! [`AnyStore`]: the store a database URL names — `postgres://…` (or `postgresql://…`) or
//! `sqlite://PATH` — for the binaries and tools that take a URL.

use std::sync::Arc;

use super::postgres::{PgStore, PgStoreOptions};
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
        let op = "migrations_applied";
        // sqlx's own bookkeeping table; absent until the first migration ran.
        let applied: i64 = match self {
            AnyStore::Postgres(s) => {
                // Checked first: a query naming a missing table fails when it is parsed.
                let exists: bool =
                    sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
                        .fetch_one(s.pool())
                        .await
                        .map_err(StoreError::db(op))?;
                if exists {
                    sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations WHERE success")
                        .fetch_one(s.pool())
                        .await
                        .map_err(StoreError::db(op))?
                } else {
                    0
                }
            }
            #[cfg(feature = "sqlite")]
            AnyStore::Sqlite(s) => {
                let exists: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM sqlite_master \
                     WHERE type = 'table' AND name = '_sqlx_migrations'",
                )
                .fetch_one(s.pool())
                .await
                .map_err(StoreError::db(op))?;
                if exists == 0 {
                    0
                } else {
                    sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations WHERE success")
                        .fetch_one(s.pool())
                        .await
                        .map_err(StoreError::db(op))?
                }
            }
        };
        let known = match self {
            AnyStore::Postgres(_) => super::postgres::MIGRATOR.iter().count(),
            #[cfg(feature = "sqlite")]
            AnyStore::Sqlite(_) => super::sqlite::MIGRATOR.iter().count(),
        };
        Ok((usize::try_from(applied).unwrap_or(0), known))
    }

    /// Deletes every task of `task_type` (and its attempts), whatever its status: for tools
    /// that own a type of their own, like the bench.
    pub async fn delete_tasks_of_type(&self, task_type: &TaskType) -> Result<u64> {
        let op = "delete_tasks_of_type";
        let done = match self {
            AnyStore::Postgres(s) => sqlx::query("DELETE FROM tasks WHERE task_type = $1")
                .bind(task_type.as_str())
                .execute(s.pool())
                .await
                .map_err(StoreError::db(op))?
                .rows_affected(),
            #[cfg(feature = "sqlite")]
            AnyStore::Sqlite(s) => sqlx::query("DELETE FROM tasks WHERE task_type = ?1")
                .bind(task_type.as_str())
                .execute(s.pool())
                .await
                .map_err(StoreError::db(op))?
                .rows_affected(),
        };
        Ok(done)
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
