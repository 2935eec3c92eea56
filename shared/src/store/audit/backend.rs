//! The seam under the operator actions, resource leases and schedules written once
//! ([`super::operator`], [`crate::store::resources::flow`], [`crate::store::schedules::flow`]):
//! what each store provides so those operations can run on it. A store opens and ends its
//! transactions, reads its clock, writes audit rows and hands back rows through [`Columns`];
//! every decision (who may act, what to write, which audit row, which error) is made above
//! this seam, once for both stores.
//!
//! ```text
//!   flow (decides, once) ──▶ Backend / …Statements (runs one statement, per store)
//!                        ◀── rows as Columns (decoded once, above the seam)
//! ```
//!
//! When things fail: a statement error is returned as it is and the transaction, dropped
//! without its commit, changes nothing; an action refused after its transaction began is
//! recorded on its own ([`failed`]), so no operator action goes unaudited.

use std::future::Future;

use chrono::{DateTime, Utc};
use sqlx::{Database, Encode, Executor, IntoArguments, Type};

use super::viewer_denial;
use crate::domain::{Actor, AgentId, TaskStatus};
use crate::store::{AuditEntry, Result, StoreError};

/// Typed access to the columns of a row, whatever the store keeps them as (times as
/// `timestamptz` or microseconds, JSON as `jsonb` or text, integers of any width). A column
/// that does not decode is [`StoreError::Corrupt`].
pub(crate) trait Columns {
    fn text(&self, column: &'static str) -> Result<String>;
    fn opt_text(&self, column: &'static str) -> Result<Option<String>>;
    /// An integer column of any width.
    fn int(&self, column: &'static str) -> Result<i64>;
    fn opt_int(&self, column: &'static str) -> Result<Option<i64>>;
    fn flag(&self, column: &'static str) -> Result<bool>;
    fn time(&self, column: &'static str) -> Result<DateTime<Utc>>;
    fn opt_time(&self, column: &'static str) -> Result<Option<DateTime<Utc>>>;
    /// A JSON column (`None`: SQL NULL).
    fn json(&self, column: &'static str) -> Result<Option<serde_json::Value>>;

    /// An integer column narrowed to `T`; out of range is [`StoreError::Corrupt`].
    fn small<T: TryFrom<i64>>(&self, column: &'static str) -> Result<T> {
        narrow(self.int(column)?, column)
    }
}

/// `value` of `column` as `T`; out of range is [`StoreError::Corrupt`].
pub(crate) fn narrow<T: TryFrom<i64>>(value: i64, column: &'static str) -> Result<T> {
    T::try_from(value).map_err(|_| StoreError::Corrupt {
        what: column,
        detail: format!("{value} is out of range"),
    })
}

/// A stored task status.
pub(crate) fn status(raw: &str) -> Result<TaskStatus> {
    raw.parse().map_err(
        |e: crate::domain::status::UnknownStatus| StoreError::Corrupt {
            what: "task status",
            detail: e.to_string(),
        },
    )
}

/// A stored agent id.
pub(crate) fn agent_id(raw: String) -> Result<AgentId> {
    AgentId::new(raw).map_err(|e| StoreError::Corrupt {
        what: "agent id",
        detail: e.to_string(),
    })
}

/// One store's transactions, clock and audit rows.
pub(crate) trait Backend: Sync {
    /// A transaction, holding what the store needs to run the next statement in it.
    type Tx: Send;
    /// A row as the store reads it.
    type Row: Columns + Send + Sync;

    /// A transaction that writes: READ COMMITTED on PostgreSQL (each operation locks the
    /// rows it decides on), `BEGIN IMMEDIATE` on SQLite (the write lock, before any read).
    fn begin(&self, op: &'static str) -> impl Future<Output = Result<Self::Tx>> + Send;

    /// A transaction that only reads, every statement from one snapshot.
    fn snapshot(&self, op: &'static str) -> impl Future<Output = Result<Self::Tx>> + Send;

    /// The database's now for `tx` (the same for every statement of it).
    fn now(
        tx: &mut Self::Tx,
        op: &'static str,
    ) -> impl Future<Output = Result<DateTime<Utc>>> + Send;

    fn commit(tx: Self::Tx, op: &'static str) -> impl Future<Output = Result<()>> + Send;

    /// Writes `entry` in `tx`: it commits with the change it records, or not at all.
    fn audit_in(tx: &mut Self::Tx, entry: &AuditEntry) -> impl Future<Output = Result<()>> + Send;

    /// Writes `entry` on its own.
    fn audit_alone(&self, entry: &AuditEntry) -> impl Future<Output = Result<()>> + Send;
}

/// Refuses a viewer before anything changes, recording the denial on its own (with the
/// refused call's parameters when given).
pub(crate) async fn authorize<B: Backend>(
    backend: &B,
    actor: &Actor,
    action: &str,
    target: String,
    params: Option<serde_json::Value>,
) -> Result<()> {
    let Some((entry, denied)) = viewer_denial(actor, action, target, params) else {
        return Ok(());
    };
    backend.audit_alone(&entry).await?;
    Err(denied)
}

/// Records an action refused with `error` (`entry`, result `failed`) on its own, since the
/// action's transaction, dropped by the caller, changed nothing; gives `error` back. An audit
/// row that cannot be written is logged: the refusal is what the caller must hear.
pub(crate) async fn failed<B: Backend>(
    backend: &B,
    entry: &AuditEntry,
    error: StoreError,
) -> StoreError {
    if let Err(audit) = backend.audit_alone(entry).await {
        tracing::warn!(%audit, action = %entry.action, target = %entry.target,
            "could not audit a refused action");
    }
    error
}

/// Writes a store's `pub(super)` entry points into operations written once: for each
/// `path as name(args) -> Out`, `async fn name(pool: &Pool, args) -> Result<Out>` running
/// `path(&Backend(pool), args)`. Each area lists its entry points once, in its own macro
/// (`resource_entry_points!`, `schedule_entry_points!`, `operator_entry_points!`), which a
/// store invokes with its backend type and pool.
macro_rules! entry_points {
    ($backend:ident, $pool:ty; $($flow:path as $name:ident($($arg:ident: $ty:ty),*) -> $out:ty;)*) => {
        $(
            pub(super) async fn $name(pool: &$pool, $($arg: $ty),*) -> $crate::store::Result<$out> {
                $flow(&$backend(pool), $($arg),*).await
            }
        )*
    };
}
pub(crate) use entry_points;

/// The [`Columns`] methods a store decodes with its own getters: `text`, `opt_text` and
/// `flag` with `$get`, times with `$time` and `$opt_time`.
macro_rules! decoded_columns {
    ($get:path, $time:path, $opt_time:path) => {
        fn text(&self, column: &'static str) -> $crate::store::Result<String> {
            $get(self, column)
        }

        fn opt_text(&self, column: &'static str) -> $crate::store::Result<Option<String>> {
            $get(self, column)
        }

        fn flag(&self, column: &'static str) -> $crate::store::Result<bool> {
            $get(self, column)
        }

        fn time(
            &self,
            column: &'static str,
        ) -> $crate::store::Result<chrono::DateTime<chrono::Utc>> {
            $time(self, column)
        }

        fn opt_time(
            &self,
            column: &'static str,
        ) -> $crate::store::Result<Option<chrono::DateTime<chrono::Utc>>> {
            $opt_time(self, column)
        }
    };
}
pub(crate) use decoded_columns;

/// The row of `statement` bound to `key` (`$1` / `?1`), if any: the one-key lookups both
/// stores run alike (their SQL text differs by dialect).
pub(crate) async fn row_by<'c, DB, E>(
    executor: E,
    statement: &'static str,
    key: &str,
    op: &'static str,
) -> Result<Option<DB::Row>>
where
    DB: Database,
    E: Executor<'c, Database = DB>,
    for<'t> &'t str: Encode<'t, DB> + Type<DB>,
    DB::Arguments: IntoArguments<DB>,
{
    Ok(rows_by(executor, statement, key, op)
        .await?
        .into_iter()
        .next())
}

/// Every row of `statement` bound to `key`.
pub(crate) async fn rows_by<'c, DB, E>(
    executor: E,
    statement: &'static str,
    key: &str,
    op: &'static str,
) -> Result<Vec<DB::Row>>
where
    DB: Database,
    E: Executor<'c, Database = DB>,
    for<'t> &'t str: Encode<'t, DB> + Type<DB>,
    DB::Arguments: IntoArguments<DB>,
{
    sqlx::query::<DB>(statement)
        .bind(key)
        .fetch_all(executor)
        .await
        .map_err(StoreError::db(op))
}

/// Whether `statement`, bound to a lease's (`name`, `holder`, `token`), finds a row: the
/// fence checks both stores run alike.
pub(crate) async fn holds<'c, DB, E>(
    executor: E,
    statement: &'static str,
    (name, holder, token): (&str, &str, i64),
    op: &'static str,
) -> Result<bool>
where
    DB: Database,
    E: Executor<'c, Database = DB>,
    for<'t> &'t str: Encode<'t, DB> + Type<DB>,
    for<'t> i64: Encode<'t, DB> + Type<DB>,
    DB::Arguments: IntoArguments<DB>,
{
    let found = sqlx::query::<DB>(statement)
        .bind(name)
        .bind(holder)
        .bind(token)
        .fetch_optional(executor)
        .await
        .map_err(StoreError::db(op))?;
    Ok(found.is_some())
}
