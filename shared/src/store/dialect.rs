//! [`Dialect`]: what a backend's database gives the operations that run alike on both
//! backends (the policy and audit lists, a task page once its statement is chosen, the
//! migration count, a tool's delete of one task type), which are written once here, generic
//! over the pool: the text of each statement (the backend's `sql/<name>.sql`, the same name on
//! both) and how it binds a time.
//!
//! A backend's `ops` module re-exports these functions under the operation's name, so
//! `impl_driver!` calls them with the backend's pool like any other; only the statement text
//! and the time binding differ, and those are the backend's `impl Dialect`.

use chrono::{DateTime, Utc};
use sqlx::migrate::Migrator;
use sqlx::{Database, Encode, Executor, FromRow, IntoArguments, Type};

use super::audit::bind_audit_list;
use super::rows::{Columns, RecordColumns, audit, fetch_mapped, policy, task_page};
use super::{AuditListParams, AuditRecord, Result, StoreError, TaskListParams, TaskPage};
use crate::domain::{Policy, TaskType};

/// One backend's statements for the operations of this module, and its time binding.
pub(crate) trait Dialect: Database {
    /// `policy_list.sql`: every policy row.
    const POLICY_LIST: &'static str;
    /// `audit_list.sql`: one page of the audit log (filters bound by [`bind_audit_list`]).
    const AUDIT_LIST: &'static str;
    /// `migrations_table_exists.sql`: whether sqlx's `_sqlx_migrations` table exists (a
    /// boolean).
    const MIGRATIONS_TABLE_EXISTS: &'static str;
    /// `migrations_count_applied.sql`: how many migrations succeeded (an integer).
    const MIGRATIONS_COUNT_APPLIED: &'static str;
    /// `task_delete_of_type.sql`: deletes every task of type `$1` (attempts go with them).
    const TASK_DELETE_OF_TYPE: &'static str;

    /// A time as the database stores it (`timestamptz`, or microseconds).
    type Time: Send + 'static;
    fn stored_time(t: DateTime<Utc>) -> Self::Time;

    /// The rows a statement changed.
    fn rows_affected(done: &Self::QueryResult) -> u64;

    /// The migrations this build knows for the backend.
    fn migrator() -> &'static Migrator;
}

/// Every policy row, mapped.
pub(crate) async fn policy_list<DB, P>(pool: &P) -> Result<Vec<Policy>>
where
    DB: Dialect,
    DB::Row: RecordColumns,
    DB::Arguments: IntoArguments<DB>,
    for<'p> &'p P: Executor<'p, Database = DB>,
{
    let query = sqlx::query::<DB>(DB::POLICY_LIST);
    fetch_mapped(query, pool, "policy_list", policy).await
}

/// One page of the audit log, newest first (its input validated by the Store layer).
pub(crate) async fn audit_list<DB, P>(
    pool: &P,
    params: &AuditListParams,
) -> Result<Vec<AuditRecord>>
where
    DB: Dialect,
    DB::Row: Columns,
    DB::Arguments: IntoArguments<DB>,
    for<'p> &'p P: Executor<'p, Database = DB>,
    i64: for<'t> Encode<'t, DB> + Type<DB>,
    Option<i64>: for<'t> Encode<'t, DB> + Type<DB>,
    for<'t> Option<&'t str>: Encode<'t, DB> + Type<DB>,
    Option<DB::Time>: for<'t> Encode<'t, DB> + Type<DB>,
{
    let query = bind_audit_list(sqlx::query::<DB>(DB::AUDIT_LIST), params, DB::stored_time);
    fetch_mapped(query, pool, "audit_list", audit).await
}

/// One page of tasks from `statement`, the store's listing for `params.statuses`, which
/// every listing numbers so: 1 the statuses (`statuses`, a list as the store binds one), 2
/// type, 3 text, 4 ids below, 5 page size, 6 error code, 7 finished at or after.
pub(crate) async fn task_list_page<DB, P, S>(
    pool: &P,
    statement: &'static str,
    statuses: Option<S>,
    params: &TaskListParams,
) -> Result<TaskPage>
where
    DB: Dialect,
    DB::Row: Columns,
    DB::Arguments: IntoArguments<DB>,
    for<'p> &'p P: Executor<'p, Database = DB>,
    Option<S>: for<'t> Encode<'t, DB> + Type<DB>,
    i64: for<'t> Encode<'t, DB> + Type<DB>,
    Option<i64>: for<'t> Encode<'t, DB> + Type<DB>,
    for<'t> Option<&'t str>: Encode<'t, DB> + Type<DB>,
    Option<DB::Time>: for<'t> Encode<'t, DB> + Type<DB>,
    Option<bool>: for<'t> Encode<'t, DB> + Type<DB>,
{
    let rows = sqlx::query::<DB>(statement)
        .bind(statuses)
        .bind(params.task_type.as_ref().map(|t| t.as_str()))
        .bind(params.text.as_deref())
        .bind(params.before.map(|id| id.0))
        .bind(i64::from(params.limit))
        .bind(params.error_code.as_deref())
        .bind(params.since.map(DB::stored_time))
        .bind(params.due)
        .fetch_all(pool)
        .await
        .map_err(StoreError::db("task_list"))?;
    task_page(&rows, params.limit)
}

/// How many migrations the database has applied, and how many this build knows. A database
/// never migrated has applied 0.
pub(crate) async fn migrations_applied<DB, P>(pool: &P) -> Result<(usize, usize)>
where
    DB: Dialect,
    DB::Arguments: IntoArguments<DB>,
    for<'p> &'p P: Executor<'p, Database = DB>,
    (bool,): for<'r> FromRow<'r, DB::Row>,
    (i64,): for<'r> FromRow<'r, DB::Row>,
{
    const OP: &str = "migrations_applied";
    // sqlx's own bookkeeping table is absent until the first migration ran, and a statement
    // naming a missing table fails when it is prepared: so it is looked up first.
    let exists: bool = sqlx::query_scalar::<DB, bool>(DB::MIGRATIONS_TABLE_EXISTS)
        .fetch_one(pool)
        .await
        .map_err(StoreError::db(OP))?;
    let applied: i64 = if exists {
        sqlx::query_scalar::<DB, i64>(DB::MIGRATIONS_COUNT_APPLIED)
            .fetch_one(pool)
            .await
            .map_err(StoreError::db(OP))?
    } else {
        0
    };
    Ok((
        usize::try_from(applied).unwrap_or(0),
        DB::migrator().iter().count(),
    ))
}

/// Deletes every task of `task_type` (and its attempts), whatever its status: for tools that
/// own a type of their own, like the bench.
pub(crate) async fn task_delete_of_type<DB, P>(pool: &P, task_type: &TaskType) -> Result<u64>
where
    DB: Dialect,
    DB::Arguments: IntoArguments<DB>,
    for<'p> &'p P: Executor<'p, Database = DB>,
    for<'t> &'t str: Encode<'t, DB> + Type<DB>,
{
    let done = sqlx::query::<DB>(DB::TASK_DELETE_OF_TYPE)
        .bind(task_type.as_str())
        .execute(pool)
        .await
        .map_err(StoreError::db("task_delete_of_type"))?;
    Ok(DB::rows_affected(&done))
}
