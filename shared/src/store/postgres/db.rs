//! [`Db`]: the pool as the store's statements see it — straight to PostgreSQL, or through a
//! transaction pooler (PgBouncer's `pool_mode = transaction`).
//!
//! Through a transaction pooler a client holds a server connection only while a transaction
//! is open; between two transactions its next statement may run on another server connection.
//! Three things the store does on a direct connection would then break:
//!
//! - **Named prepared statements.** sqlx prepares each statement once per connection under a
//!   name and runs it by that name later, on a server connection that may never have seen it.
//!   Behind a pooler the statement cache is off, so every statement is unnamed.
//! - **Two round trips per statement.** sqlx runs an unnamed statement as Parse+Describe+Sync,
//!   then Bind+Execute+Sync. Outside a transaction the pooler may send the second half to
//!   another server connection, where the unnamed statement does not exist. Behind a pooler,
//!   [`Db`] runs every statement that the store would run on its own inside a transaction of
//!   its own (BEGIN, the statement, COMMIT), which keeps one server connection throughout.
//! - **Session settings.** The store's settings (JIT off, generic plans, the idle-transaction
//!   and statement timeouts) travel as the startup `options` parameter, which PgBouncer refuses;
//!   behind a pooler each transaction sets them with `SET LOCAL` in the same round trip as its
//!   BEGIN.
//!
//! LISTEN cannot work through a transaction pooler (the server connection that listened is
//! handed to another client): the agent listens on `--notify-database-url`, a direct
//! connection, or polls. Migrations take a session-level advisory lock, so they are refused
//! through a pooler ([`super::PgStore::migrate`]).
//!
//! The pooler is recognised as the store connects ([`super::PgStore::connect`]): PgBouncer
//! refuses the startup `options` parameter ("unsupported startup parameter"), and one told to
//! ignore it (`ignore_startup_parameters = options`) leaves a value of the attempt's own, sent
//! with the settings, not in effect. [`Pooler::Transaction`] forces the mode for a pooler that
//! does neither; [`Pooler::None`] skips the finding out.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use futures_util::{StreamExt, TryStreamExt};
use sqlx::postgres::{PgPool, PgQueryResult, PgRow, PgStatement, PgTypeInfo};
use sqlx::{AssertSqlSafe, Either, Execute, Executor, Postgres, SqlStr, Transaction};

use super::sql;

/// Whether the store runs as behind a transaction pooler.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Pooler {
    /// Recognise a pooler as the store connects (see the module doc).
    #[default]
    Auto,
    /// Always run as behind a transaction pooler.
    Transaction,
    /// Straight to PostgreSQL: no finding out (a store opened again by a process that knows,
    /// such as the agent's heartbeat connection).
    None,
}

impl std::str::FromStr for Pooler {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "auto" => Ok(Pooler::Auto),
            "transaction" => Ok(Pooler::Transaction),
            "none" => Ok(Pooler::None),
            other => Err(format!("{other:?} is not auto, transaction or none")),
        }
    }
}

impl std::fmt::Display for Pooler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Pooler::Auto => "auto",
            Pooler::Transaction => "transaction",
            Pooler::None => "none",
        })
    }
}

/// The store's pool and how to run statements on it (see the module doc).
#[derive(Debug, Clone)]
pub(crate) struct Db {
    pub(super) pool: PgPool,
    /// Behind a transaction pooler: how each kind of transaction begins (the BEGIN and the
    /// store's settings, one round trip). `None` straight to PostgreSQL.
    pooled: Option<Arc<PooledBegins>>,
}

#[derive(Debug)]
struct PooledBegins {
    read_committed: String,
    snapshot: String,
}

impl Db {
    /// Straight to PostgreSQL: the settings came with the connection.
    pub(super) fn direct(pool: PgPool) -> Db {
        Db { pool, pooled: None }
    }

    /// Behind a transaction pooler: every transaction sets `settings` (name, value) locally.
    pub(super) fn pooled(pool: PgPool, settings: &[(&str, String)]) -> Db {
        let local: String = settings
            .iter()
            // default_transaction_isolation: every BEGIN names its isolation level.
            .filter(|(name, _)| *name != "default_transaction_isolation")
            .map(|(name, value)| format!("; SET LOCAL {name} = '{}'", value.replace('\'', "''")))
            .collect();
        let first_line = |statement: &str| -> String {
            statement
                .lines()
                .filter(|line| !line.trim_start().starts_with("--"))
                .collect::<Vec<_>>()
                .join(" ")
                .trim()
                .to_string()
        };
        Db {
            pool,
            pooled: Some(Arc::new(PooledBegins {
                read_committed: first_line(sql::tx_begin_read_committed) + &local,
                snapshot: first_line(sql::tx_begin_snapshot) + &local,
            })),
        }
    }

    /// Whether statements run as behind a transaction pooler.
    pub(crate) fn is_pooled(&self) -> bool {
        self.pooled.is_some()
    }

    /// Begins a READ COMMITTED transaction.
    pub(crate) async fn begin(&self) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        self.begin_as(sql::tx_begin_read_committed, |b| &b.read_committed)
            .await
    }

    /// Begins a read-only transaction whose every statement reads one snapshot.
    pub(crate) async fn begin_snapshot(
        &self,
    ) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        self.begin_as(sql::tx_begin_snapshot, |b| &b.snapshot).await
    }

    /// Begins with `direct`, or behind a pooler with its counterpart carrying the settings.
    async fn begin_as(
        &self,
        direct: &'static str,
        pooled: fn(&PooledBegins) -> &String,
    ) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        match &self.pooled {
            None => self.pool.begin_with(direct).await,
            Some(begins) => {
                self.pool
                    .begin_with(AssertSqlSafe(pooled(begins).clone()))
                    .await
            }
        }
    }
}

/// One statement on the store: on a pooled connection straight to PostgreSQL, or — behind a
/// transaction pooler — in a transaction of its own (its rows are read to the end before the
/// COMMIT; the store's statements return bounded batches).
impl<'c> Executor<'c> for &'c Db {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxStream<'e, Result<Either<PgQueryResult, PgRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        if self.pooled.is_none() {
            return (&self.pool).fetch_many(query);
        }
        futures_util::stream::once(async move {
            let mut tx = self.begin().await?;
            let steps: Vec<_> = (&mut *tx).fetch_many(query).try_collect().await?;
            tx.commit().await?;
            Ok::<_, sqlx::Error>(futures_util::stream::iter(steps.into_iter().map(Ok)))
        })
        .try_flatten()
        .boxed()
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<PgRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        if self.pooled.is_none() {
            return (&self.pool).fetch_optional(query);
        }
        Box::pin(async move {
            let mut tx = self.begin().await?;
            let row = (&mut *tx).fetch_optional(query).await?;
            tx.commit().await?;
            Ok(row)
        })
    }

    fn prepare_with<'e>(
        self,
        sql: SqlStr,
        parameters: &'e [PgTypeInfo],
    ) -> BoxFuture<'e, Result<PgStatement, sqlx::Error>>
    where
        'c: 'e,
    {
        (&self.pool).prepare_with(sql, parameters)
    }

    fn describe<'e>(
        self,
        sql: SqlStr,
    ) -> BoxFuture<'e, Result<sqlx::Describe<Postgres>, sqlx::Error>>
    where
        'c: 'e,
    {
        (&self.pool).describe(sql)
    }
}

/// Whether a connection attempt was refused for a startup parameter: PgBouncer's answer to
/// the `options` (and `extra_float_digits`) parameters it does not pass on.
pub(super) fn refused_startup_parameter(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(e)
        if e.message().contains("unsupported startup parameter"))
}

/// The startup setting [`startup_check_in_effect`] reads back: a placeholder of our own.
pub(super) const STARTUP_CHECK: &str = "leasehold.startup_check";

/// Whether the value `nonce`, sent as [`STARTUP_CHECK`] in the startup `options`, is in effect
/// on `conn` (a pooler told to ignore the parameter drops it). Asked with the simple protocol:
/// one message, one round trip, whatever answers it.
pub(super) async fn startup_check_in_effect(
    conn: &mut sqlx::PgConnection,
    nonce: &str,
) -> Result<bool, sqlx::Error> {
    use sqlx::Row;
    let row = sqlx::raw_sql(sql::startup_check).fetch_one(conn).await?;
    let value: Option<String> = row.try_get(0)?;
    Ok(value.as_deref() == Some(nonce))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn pooled_begins_carry_the_settings_locally() {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .connect_lazy("postgres://x@127.0.0.1:1/db")
            .unwrap();
        let db = Db::pooled(
            pool,
            &[
                ("default_transaction_isolation", "read committed".into()),
                ("jit", "off".into()),
                ("statement_timeout", "5000ms".into()),
            ],
        );
        let begins = db.pooled.as_ref().unwrap();
        assert_eq!(
            begins.read_committed,
            "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL jit = 'off'; \
             SET LOCAL statement_timeout = '5000ms'"
        );
        assert!(
            begins
                .snapshot
                .starts_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET LOCAL jit")
        );
    }

    #[test]
    fn the_mode_reads_as_written() {
        assert_eq!("auto".parse::<Pooler>(), Ok(Pooler::Auto));
        assert_eq!(" transaction ".parse::<Pooler>(), Ok(Pooler::Transaction));
        assert_eq!("none".parse::<Pooler>(), Ok(Pooler::None));
        assert!("session".parse::<Pooler>().is_err());
        assert_eq!(Pooler::Transaction.to_string(), "transaction");
    }
}
