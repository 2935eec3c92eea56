//! Errors of store operations. A fenced holder write is *not* here: it is an outcome
//! ([`super::HolderWrite::Fenced`]) the caller counts and carries on from.

use thiserror::Error;

use crate::domain::{TaskId, TransitionError, ValidationError};

/// SQLSTATE of a CHECK constraint violation.
const CHECK_VIOLATION: &str = "23514";
/// SQLSTATE of a lock that could not be had within `lock_timeout`.
const LOCK_NOT_AVAILABLE: &str = "55P03";

/// Why a store operation failed.
#[derive(Debug, Error)]
pub enum StoreError {
    /// The input was refused before anything was written.
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    /// No task with that id.
    #[error("task {0} does not exist")]
    NotFound(TaskId),
    /// No schedule with that name.
    #[error("schedule {0:?} does not exist")]
    ScheduleNotFound(String),
    /// A different schedule already has that name; nothing changed.
    #[error("schedule {name:?} already exists {detail}; nothing changed (replace it to overwrite)")]
    ScheduleExists { name: String, detail: String },
    /// No lock with that name.
    #[error("lock {0:?} does not exist")]
    LockNotFound(String),
    /// No shard group with that name.
    #[error("shard group {0:?} does not exist (create it with `leasehold shards create`)")]
    ShardGroupNotFound(String),
    /// The group exists with another shard count; nothing changed.
    #[error("shard group {name:?} already exists with {count} shards; nothing changed")]
    ShardGroupExists { name: String, count: u32 },
    /// The task is in a state the action cannot leave; nothing changed.
    #[error("task {id}: {source}")]
    Transition {
        id: TaskId,
        #[source]
        source: TransitionError,
    },
    /// The actor's role does not allow the action; nothing changed (the denial is audited).
    #[error("permission denied: {actor} may not {action} (viewer tokens may watch and list only)")]
    PermissionDenied { action: String, actor: String },
    /// The database refused or failed the statement of `op`.
    #[error("database error in {op}: {source}")]
    Database {
        op: &'static str,
        #[source]
        source: sqlx::Error,
    },
    /// The operation waited too long for other work holding what it needs; nothing changed.
    #[error("{op} is busy: other work held what it needs for too long; nothing changed, try again")]
    Busy { op: &'static str },
    /// Applying migrations failed.
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// The database holds a value this version cannot read (bad database state).
    #[error("unreadable {what} in the database: {detail}")]
    Corrupt { what: &'static str, detail: String },
    /// The URL names a database this build has no store for.
    #[error(
        "unsupported database URL {0:?}: use postgres://HOST/DB (or postgresql://…) or sqlite://PATH"
    )]
    UnsupportedUrl(String),
}

impl StoreError {
    /// Wraps a database error with the operation that met it. A CHECK constraint the
    /// database enforces (sizes, ranges, formats) is bad input, reported as such.
    pub fn db(op: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
        move |source| {
            if let sqlx::Error::Database(e) = &source {
                if e.kind() == sqlx::error::ErrorKind::CheckViolation
                    || e.code().as_deref() == Some(CHECK_VIOLATION)
                {
                    // PostgreSQL names the constraint; SQLite puts it in the message.
                    let constraint = e
                        .constraint()
                        .map(str::to_string)
                        .or_else(|| {
                            e.message()
                                .strip_prefix("CHECK constraint failed: ")
                                .map(str::to_string)
                        })
                        .unwrap_or_else(|| "a check".to_string());
                    return StoreError::Invalid(ValidationError::Invalid {
                        field: "input",
                        detail: format!("refused by the database constraint {constraint} in {op}"),
                    });
                }
                if e.code().as_deref() == Some(LOCK_NOT_AVAILABLE) || sqlite_busy(e.as_ref()) {
                    return StoreError::Busy { op };
                }
            }
            StoreError::Database { op, source }
        }
    }

    /// Why an operator action on task `id` in status `before` changed nothing: the state
    /// machine's refusal, or — when the state machine would have allowed it — bad database
    /// state (`what` is the action, `done` its past tense).
    pub fn refused(
        id: TaskId,
        before: crate::domain::TaskStatus,
        action: crate::domain::TaskAction,
        what: &'static str,
        done: &str,
    ) -> StoreError {
        match before.apply(action) {
            Err(source) => StoreError::Transition { id, source },
            Ok(_) => StoreError::Corrupt {
                what,
                detail: format!("task {id} in {before} was not {done}"),
            },
        }
    }

    /// True when retrying may succeed: the database could not be reached, the connection
    /// broke, or the operation was busy — as opposed to a refused statement.
    pub fn is_connection(&self) -> bool {
        matches!(
            self,
            StoreError::Busy { .. }
                | StoreError::Database {
                    source: sqlx::Error::Io(_)
                        | sqlx::Error::PoolTimedOut
                        | sqlx::Error::PoolClosed
                        | sqlx::Error::Tls(_)
                        | sqlx::Error::WorkerCrashed,
                    ..
                }
        )
    }
}

/// SQLite's SQLITE_BUSY and SQLITE_LOCKED, with their extended codes: the write lock (or a
/// table lock) stayed taken for the whole busy timeout.
fn sqlite_busy(e: &dyn sqlx::error::DatabaseError) -> bool {
    if e.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_none() {
        return false;
    }
    e.code()
        .and_then(|code| code.parse::<i32>().ok())
        .is_some_and(|code| matches!(code & 0xff, 5 | 6))
}

/// Result of a store operation.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
