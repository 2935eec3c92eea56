//! Errors of store operations. A fenced holder write is *not* here: it is an outcome
//! ([`super::HolderWrite::Fenced`]) the caller counts and carries on from.

use thiserror::Error;

use crate::domain::{TaskId, TransitionError, ValidationError};

/// SQLSTATE of a CHECK constraint violation.
const CHECK_VIOLATION: &str = "23514";
/// SQLSTATE of a lock that could not be had within `lock_timeout`.
const LOCK_NOT_AVAILABLE: &str = "55P03";
/// SQLSTATE of a table that does not exist: the schema was never migrated.
const UNDEFINED_TABLE: &str = "42P01";

/// What `leasehold-agent migrate` is for, said where a database lacks its schema.
pub const NOT_MIGRATED: &str = "database not migrated: run `leasehold-agent migrate`";

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
    /// The database refused or failed the statement of `op`. The message is one sentence
    /// (the database's own message, without its source position); the sqlx error stays
    /// reachable as the source, for logs.
    #[error("{}", describe_database(.op, .source))]
    Database {
        op: &'static str,
        #[source]
        source: sqlx::Error,
    },
    /// The operation waited too long for other work holding what it needs; nothing changed.
    #[error("{op} is busy: other work held what it needs for too long; nothing changed, try again")]
    Busy { op: &'static str },
    /// The database has no Leasehold schema (a table of `op` does not exist): nothing can
    /// work until `leasehold-agent migrate` runs.
    #[error("{NOT_MIGRATED} ({detail})")]
    NotMigrated { op: &'static str, detail: String },
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

/// `url` with the password of its user info replaced by `***`, for errors and logs: a
/// database URL's password never appears in a message.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = match rest.find(['/', '?', '#']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let Some((userinfo, host)) = authority.rsplit_once('@') else {
        return url.to_owned();
    };
    match userinfo.split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***@{host}{tail}"),
        None => url.to_owned(),
    }
}

impl StoreError {
    /// [`StoreError::UnsupportedUrl`] of `url`, its password redacted and its length bounded.
    pub fn unsupported_url(url: &str) -> StoreError {
        StoreError::UnsupportedUrl(crate::domain::ids::truncate_for_error(&redact_url(url)))
    }

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
                    return StoreError::Invalid(constraint_in_words(&constraint));
                }
                if e.code().as_deref() == Some(LOCK_NOT_AVAILABLE) || sqlite_busy(e.as_ref()) {
                    return StoreError::Busy { op };
                }
                if e.code().as_deref() == Some(UNDEFINED_TABLE) || sqlite_no_table(e.as_ref()) {
                    return StoreError::NotMigrated {
                        op,
                        detail: e.message().to_string(),
                    };
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

    /// No database connection was had within `op`'s time (the pool's, or a connect's own
    /// timeout): a connection failure ([`StoreError::is_connection`]).
    pub fn timed_out(op: &'static str) -> StoreError {
        StoreError::Database {
            op,
            source: sqlx::Error::PoolTimedOut,
        }
    }

    /// True when the database refused the statement for what it holds rather than for its
    /// own state: bad input caught before or by the database ([`StoreError::Invalid`]), or a
    /// data exception or broken constraint (SQLSTATE classes 22 and 23). Writing the same
    /// input again cannot succeed; a restart's "terminating connection due to administrator
    /// command" is not this, and is worth retrying.
    pub fn is_content_refusal(&self) -> bool {
        match self {
            StoreError::Invalid(_) => true,
            StoreError::Database {
                source: sqlx::Error::Database(db),
                ..
            } => db
                .code()
                .is_some_and(|code| code.starts_with("22") || code.starts_with("23")),
            _ => false,
        }
    }

    /// True when the statement lost a race with a task moving between partitions of the
    /// PostgreSQL `tasks` table (migration 20261210000001), and the same statement or
    /// transaction, run again, sees where the task went: it waited on a row that a finish or a
    /// requeue moved (SQLSTATE 40001, "tuple to be locked was already moved to another
    /// partition"), or it inserted an idempotency key whose holder finished meanwhile (the
    /// `tasks_idempotency_key_done` trigger). READ COMMITTED statements raise 40001 only so.
    pub fn is_partition_race(&self) -> bool {
        let StoreError::Database {
            source: sqlx::Error::Database(db),
            ..
        } = self
        else {
            return false;
        };
        match db.code().as_deref() {
            Some("40001") => true,
            Some("23505") => db.constraint() == Some("tasks_idempotency_key_done"),
            _ => false,
        }
    }

    /// True when the database answered and refused the statement (any SQLSTATE or SQLite
    /// code), as opposed to a connection, pool, TLS or protocol failure of [`Self::Database`].
    pub fn is_database_refusal(&self) -> bool {
        matches!(
            self,
            StoreError::Database {
                source: sqlx::Error::Database(_),
                ..
            }
        )
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

/// Most runs of one operation that lost a race with a task moving partitions
/// ([`StoreError::is_partition_race`]); a run sees every move committed before it, so a second
/// run settles it unless the task moved again meanwhile.
const PARTITION_RACE_RUNS: usize = 4;

/// Most runs of a claim that lost such a race. A claim races with every task it walks past,
/// not with one: under many claimers of short tasks a run can meet a task claimed and finished
/// (moved) after the run's snapshot was taken, and the next run meets another. Each run sees
/// the moves before it and took nothing when it failed, so running it again is always safe.
/// (`store_claims::eight_claimers_…`, four such test processes at once: 1 run in 12 failed
/// with four runs.)
pub(crate) const CLAIM_PARTITION_RACE_RUNS: usize = 16;

/// Runs `operation` (one statement, or a transaction that committed nothing when it failed)
/// again while it loses a race with a task moving partitions. Every other outcome is returned
/// as it is.
pub(crate) async fn retry_partition_race<T, F, Fut>(operation: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    retry_partition_race_runs(PARTITION_RACE_RUNS, operation).await
}

/// [`retry_partition_race`] with at most `most` runs.
pub(crate) async fn retry_partition_race_runs<T, F, Fut>(
    most: usize,
    mut operation: F,
) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    let mut runs = 1;
    loop {
        match operation().await {
            Err(error) if error.is_partition_race() && runs < most => {
                tracing::debug!(%error, "a task moved partitions under the statement; running it again");
                runs += 1;
            }
            done => return done,
        }
    }
}

/// `op` failing with `source`, in one sentence: what failed and the database's own words,
/// without sqlx's "error returned from database" wrapper or PostgreSQL's source line.
fn describe_database(op: &str, source: &sqlx::Error) -> String {
    let what = match source {
        sqlx::Error::Database(e) => e.message().to_string(),
        sqlx::Error::Io(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            "connection refused (is the database running, and is the host and port right?)"
                .to_string()
        }
        sqlx::Error::Io(e) => e.to_string(),
        sqlx::Error::PoolTimedOut => {
            "no database connection free in time (the database is slow, unreachable, or every \
             connection is busy)"
                .to_string()
        }
        sqlx::Error::Tls(e) => format!("TLS: {e}"),
        other => other.to_string(),
    };
    if op == "connect" {
        format!("cannot connect to the database: {what}")
    } else {
        format!("database error in {op}: {what}")
    }
}

/// A CHECK constraint of either store's migrations, said as the rule the input broke. The
/// constraint names are the same in `migrations/postgres/` and `migrations/sqlite/`.
fn constraint_in_words(constraint: &str) -> ValidationError {
    let (field, detail): (&'static str, &str) = match constraint {
        "tasks_deadline_after_creation" => (
            "deadline",
            "it is more than a day in the past; give a time in the future",
        ),
        "tasks_type_format" | "schedules_type_format" | "policies_scope_format" => (
            "task type",
            "use 1-64 characters of a-z 0-9 _ . : - starting with a letter or digit",
        ),
        "schedules_name_format" => (
            "schedule name",
            "use 1-64 characters of a-z 0-9 _ . : - starting with a letter or digit",
        ),
        "tasks_payload_size" | "schedules_payload_size" | "tasks_payload_json" => {
            ("payload", "must be JSON of at most 1 MiB")
        }
        "tasks_result_size" => ("result", "must be at most 1 MiB of JSON"),
        "tasks_progress_size" => ("progress", "must be at most 4 KiB of JSON"),
        "tasks_last_error_size" | "task_attempts_error_size" | "schedules_last_error_size" => {
            ("error", "it is too long")
        }
        "tasks_max_attempts_range" | "schedules_max_attempts_range" => {
            ("max attempts", "give 1 to 1000")
        }
        "tasks_timeout_range" | "policies_timeout_range" => ("timeout", "give 1ms to 7 days"),
        "tasks_priority_range" => ("priority", "give -32768 to 32767"),
        "tasks_idempotency_key_size" => ("idempotency key", "give 1 to 255 bytes"),
        "policies_concurrency_range" | "agents_local_concurrency_range" => {
            ("concurrency", "give 0 to 1000000")
        }
        "policies_retry_base_range" | "policies_retry_max_range" => {
            ("retry delay", "give 0 to 7 days")
        }
        "policies_retry_jitter_range" => ("retry jitter", "give 0 to 1"),
        "policies_retry_multiplier_range" => ("retry multiplier", "give 1 to 100"),
        "policies_slow_range" => ("slow threshold", "give 1ms to 7 days"),
        "schedules_cron_size" => ("cron expression", "give 1 to 200 characters"),
        "schedules_timezone_size" => ("time zone", "give 1 to 64 characters"),
        "schedules_missed_policy" | "schedules_missed_name" => {
            ("missed-run policy", "this version does not know it")
        }
        "resource_leases_name_size" => ("lock name", "give 1 to 128 bytes"),
        "shard_groups_name_size" => ("shard group name", "give 1 to 64 bytes"),
        "shard_groups_count" => ("shard count", "give 1 to 4096"),
        "agents_id_size" | "tasks_lease_owner_size" | "resource_leases_owner_size" => {
            ("agent name", "it is too long")
        }
        "audit_log_actor_size" => ("token name", "give 1 to 200 bytes"),
        "audit_log_peer_size" => ("peer", "it is too long"),
        "audit_log_params_size" => ("request", "it is too large to audit (at most 64 KiB)"),
        _ => ("input", "it breaks a rule the database enforces"),
    };
    ValidationError::Invalid {
        field,
        detail: if field == "input" {
            format!("{detail} ({constraint})")
        } else {
            detail.to_string()
        },
    }
}

/// SQLite's "no such table": the file has no Leasehold schema.
#[cfg(feature = "sqlite")]
fn sqlite_no_table(e: &dyn sqlx::error::DatabaseError) -> bool {
    e.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some()
        && e.message().starts_with("no such table")
}

/// Without the SQLite store no error is SQLite's.
#[cfg(not(feature = "sqlite"))]
fn sqlite_no_table(_: &dyn sqlx::error::DatabaseError) -> bool {
    false
}

/// `error` as one line for a person: each cause's text once. The chain is walked until a
/// [`StoreError`], whose message already says what its sources say; a cause whose text the
/// line already holds is skipped. The full chain stays on the error for logs and `--verbose`.
pub fn error_sentence(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = String::new();
    let mut next = Some(error);
    while let Some(cause) = next {
        let text = cause.to_string();
        if !text.is_empty() && !line.contains(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
        if cause.downcast_ref::<StoreError>().is_some() {
            break;
        }
        next = cause.source();
    }
    line
}

/// Without the SQLite store no error is SQLite's.
#[cfg(not(feature = "sqlite"))]
fn sqlite_busy(_: &dyn sqlx::error::DatabaseError) -> bool {
    false
}

/// SQLite's SQLITE_BUSY and SQLITE_LOCKED, with their extended codes: the write lock (or a
/// table lock) stayed taken for the whole busy timeout.
#[cfg(feature = "sqlite")]
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

#[cfg(test)]
mod redact_tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn passwords_never_reach_a_message() {
        assert_eq!(redact_url("postgres://u:p@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact_url("postgres://u:p@h"), "postgres://u:***@h");
        assert_eq!(
            redact_url("postgres://u:p:q@h:1,h2:2/db"),
            "postgres://u:***@h:1,h2:2/db"
        );
        assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact_url("postgres://h/db?x=a@b"), "postgres://h/db?x=a@b");
        assert_eq!(redact_url("sqlite:///a/b"), "sqlite:///a/b");
        let e = StoreError::unsupported_url("mysql://root:hunter2@h/db").to_string();
        assert!(
            !e.contains("hunter2") && e.contains("mysql://root:***@h/db"),
            "{e}"
        );
    }
}

#[cfg(test)]
mod classify_tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use std::borrow::Cow;

    use super::*;

    /// A database's refusal with SQLSTATE (or SQLite code) `.0`.
    #[derive(Debug)]
    struct Refusal(&'static str);

    impl std::fmt::Display for Refusal {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "refused with {}", self.0)
        }
    }

    impl std::error::Error for Refusal {}

    impl sqlx::error::DatabaseError for Refusal {
        fn message(&self) -> &str {
            "refused"
        }
        fn code(&self) -> Option<Cow<'_, str>> {
            Some(Cow::Borrowed(self.0))
        }
        fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
            self
        }
        fn kind(&self) -> sqlx::error::ErrorKind {
            sqlx::error::ErrorKind::Other
        }
    }

    fn db(source: sqlx::Error) -> StoreError {
        StoreError::Database { op: "op", source }
    }

    fn refused(code: &'static str) -> StoreError {
        db(sqlx::Error::Database(Box::new(Refusal(code))))
    }

    #[test]
    fn errors_sort_into_content_refusals_database_refusals_and_connection_failures() {
        // (error, is_content_refusal, is_database_refusal, is_connection)
        let cases = [
            (
                StoreError::Invalid(ValidationError::Invalid {
                    field: "payload",
                    detail: "too big".into(),
                }),
                true,
                false,
                false,
            ),
            (refused("22P02"), true, true, false), // invalid text representation
            (refused("22001"), true, true, false), // string data right truncation
            (refused("23505"), true, true, false), // unique violation
            (refused("23503"), true, true, false), // foreign key violation
            (refused("57P01"), false, true, false), // admin shutdown: retry it
            (refused("40001"), false, true, false), // serialization failure
            (refused("2067"), false, true, false), // SQLite unique constraint
            (StoreError::timed_out("connect"), false, false, true),
            (db(sqlx::Error::PoolClosed), false, false, true),
            (db(sqlx::Error::WorkerCrashed), false, false, true),
            (
                db(sqlx::Error::Io(std::io::Error::from(
                    std::io::ErrorKind::ConnectionReset,
                ))),
                false,
                false,
                true,
            ),
            (
                db(sqlx::Error::Protocol("unexpected message".into())),
                false,
                false,
                false,
            ),
            (StoreError::Busy { op: "claim" }, false, false, true),
            (StoreError::NotFound(TaskId(1)), false, false, false),
            (
                StoreError::Corrupt {
                    what: "status",
                    detail: "x".into(),
                },
                false,
                false,
                false,
            ),
        ];
        for (error, content, database, connection) in cases {
            assert_eq!(
                (
                    error.is_content_refusal(),
                    error.is_database_refusal(),
                    error.is_connection()
                ),
                (content, database, connection),
                "{error:?}"
            );
        }
    }

    #[test]
    fn a_timeout_says_no_connection_was_free() {
        let e = StoreError::timed_out("connect");
        assert!(
            e.to_string()
                .starts_with("cannot connect to the database: no database connection free"),
            "{e}"
        );
    }
}
