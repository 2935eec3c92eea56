//! [`WakeSource`]: how a backend tells an agent that new work may be there, so it claims at
//! once instead of at its next poll. Each store hands one out (`PgStore::wake_source`,
//! `SqliteStore::wake_source`, [`AnyStore::wake_source`](super::AnyStore::wake_source)); the
//! agent subscribes, reads [`WakeEvent`]s and subscribes again when one says `Lost`.
//!
//! ```text
//!   PostgreSQL: a connection of its own LISTENs on NOTIFY_CHANNEL; enqueues and requeues NOTIFY
//!               quiet for `patience`: probe it (sql/wake_probe.sql), replace it if it does not answer
//!   SQLite:     a connection of its own reads PRAGMA data_version (sql/wake_version.sql) every
//!               FILE_WATCH_EVERY; the value changes whenever another connection commits
//! ```
//!
//! Both are hints: the claimer polls as well, so a lost event delays work by at most a poll
//! interval and never loses it. SQLite's counter moves on every commit, not only enqueues (a
//! claim that finds nothing is cheap).
//!
//! `postgres/sql/wake_probe.sql` has no leading comment line, unlike most statement files: its
//! text is exactly `SELECT 1`, by which `pg_stat_activity` (and the fault tests) tell the LISTEN
//! connection from the pool's.
//!
//! When things fail: [`WakeSource::subscribe`] fails with a [`WakeError`] (the caller retries
//! with backoff, polling meanwhile). A subscription whose connection breaks, errs, or — on
//! PostgreSQL, where a half-open connection delivers nothing and never errors — does not answer
//! a probe in time, reports [`WakeEvent::Lost`] once, logged here; the caller wakes its claimer
//! (anything may have been enqueued meanwhile) and subscribes again.

use std::time::Duration;

use sqlx::postgres::{PgListener, PgPool};
#[cfg(feature = "sqlite")]
use sqlx::sqlite::{SqliteConnection, SqlitePool};

use super::postgres::NOTIFY_CHANNEL;

/// How often a SQLite subscription reads the file's change counter.
pub const FILE_WATCH_EVERY: Duration = Duration::from_millis(20);

/// Why a subscription could not be opened: the database's own error, shown as it is.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct WakeError(#[from] sqlx::Error);

/// What a subscription reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WakeEvent {
    /// Something changed: new work may be claimable.
    Changed,
    /// The subscription's connection is gone (the reason is logged): subscribe again.
    Lost,
}

/// Which kind of wake-up a source gives, for what a caller logs about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WakeKind {
    /// PostgreSQL LISTEN/NOTIFY.
    Listen,
    /// SQLite's file change counter.
    FileWatch,
    /// None: PostgreSQL behind a transaction pooler without a direct connection to LISTEN on
    /// (LISTEN cannot work through one). The claimer's poll finds new work.
    Poll,
}

/// A backend's source of "something changed" events; cheap to clone (it holds the pool).
#[derive(Debug, Clone)]
pub struct WakeSource {
    backend: Backend,
}

#[derive(Debug, Clone)]
enum Backend {
    Postgres(PgPool),
    None,
    #[cfg(feature = "sqlite")]
    Sqlite(SqlitePool),
}

impl WakeSource {
    /// LISTEN on [`NOTIFY_CHANNEL`] over connections of `pool`'s options.
    pub(crate) fn postgres(pool: PgPool) -> WakeSource {
        WakeSource {
            backend: Backend::Postgres(pool),
        }
    }

    /// No wake-up: a subscription never reports (see [`WakeKind::Poll`]).
    pub(crate) fn poll() -> WakeSource {
        WakeSource {
            backend: Backend::None,
        }
    }

    /// Watches the file of `pool` on connections of its options.
    #[cfg(feature = "sqlite")]
    pub(crate) fn sqlite(pool: SqlitePool) -> WakeSource {
        WakeSource {
            backend: Backend::Sqlite(pool),
        }
    }

    /// Which kind of wake-up this is.
    pub fn kind(&self) -> WakeKind {
        match &self.backend {
            Backend::Postgres(_) => WakeKind::Listen,
            Backend::None => WakeKind::Poll,
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(_) => WakeKind::FileWatch,
        }
    }

    /// Opens a connection of its own and subscribes. On PostgreSQL, connecting and LISTEN
    /// each get `patience` (a timeout says the pool timed out), and a connection quiet for
    /// `patience` is probed, the probe getting `patience` too; SQLite ignores it.
    pub async fn subscribe(&self, patience: Duration) -> Result<WakeSubscription, WakeError> {
        let inner = match &self.backend {
            Backend::Postgres(pool) => Inner::Listen(listen(pool, patience).await?),
            Backend::None => Inner::Never,
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(pool) => {
                use sqlx::ConnectOptions;
                Inner::File {
                    conn: pool.connect_options().connect().await?,
                    last: None,
                    read_once: false,
                }
            }
        };
        Ok(WakeSubscription { inner, patience })
    }
}

async fn listen(pool: &PgPool, patience: Duration) -> Result<PgListener, sqlx::Error> {
    let mut listener = tokio::time::timeout(patience, PgListener::connect_with(pool))
        .await
        .map_err(|_| sqlx::Error::PoolTimedOut)??;
    // Report a lost connection at once instead of reconnecting inside `try_recv` (which a
    // probe timer could cancel half-way): the caller re-subscribes and wakes its claimer.
    listener.eager_reconnect(false);
    tokio::time::timeout(patience, listener.listen(NOTIFY_CHANNEL))
        .await
        .map_err(|_| sqlx::Error::PoolTimedOut)??;
    tracing::debug!("listening for enqueues");
    Ok(listener)
}

/// An open subscription: [`WakeSubscription::next`] until it says `Lost`, then drop it (or
/// [`WakeSubscription::close`] it when stopping).
pub struct WakeSubscription {
    inner: Inner,
    patience: Duration,
}

enum Inner {
    Listen(PgListener),
    Never,
    #[cfg(feature = "sqlite")]
    File {
        conn: SqliteConnection,
        /// The change counter last read.
        last: Option<i64>,
        /// Whether the counter was read yet: every read after the first waits
        /// [`FILE_WATCH_EVERY`] first.
        read_once: bool,
    },
}

impl std::fmt::Debug for WakeSubscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.inner {
            Inner::Listen(_) => WakeKind::Listen,
            Inner::Never => WakeKind::Poll,
            #[cfg(feature = "sqlite")]
            Inner::File { .. } => WakeKind::FileWatch,
        };
        f.debug_struct("WakeSubscription")
            .field("kind", &kind)
            .finish_non_exhaustive()
    }
}

impl WakeSubscription {
    /// Waits for the next change, or for the connection to be lost. Safe to cancel (drop the
    /// subscription afterwards when stopping).
    pub async fn next(&mut self) -> WakeEvent {
        let patience = self.patience;
        match &mut self.inner {
            Inner::Listen(listener) => next_notification(listener, patience).await,
            Inner::Never => std::future::pending().await,
            #[cfg(feature = "sqlite")]
            Inner::File {
                conn,
                last,
                read_once,
            } => next_version(conn, last, read_once).await,
        }
    }

    /// Closes the subscription's connection.
    pub async fn close(self) {
        match self.inner {
            // A listener has no graceful close; dropping it ends the connection.
            Inner::Listen(listener) => drop(listener),
            Inner::Never => {}
            #[cfg(feature = "sqlite")]
            Inner::File { conn, .. } => {
                let _ = sqlx::Connection::close(conn).await;
            }
        }
    }
}

/// Receives until a notification arrives or the connection fails or stops answering.
async fn next_notification(listener: &mut PgListener, patience: Duration) -> WakeEvent {
    loop {
        let received = tokio::select! {
            r = listener.try_recv() => Some(r),
            _ = tokio::time::sleep(patience) => None,
        };
        match received {
            Some(Ok(Some(_))) => return WakeEvent::Changed,
            Some(Ok(None)) => {
                tracing::warn!("LISTEN connection lost; re-subscribing");
                return WakeEvent::Lost;
            }
            Some(Err(error)) => {
                tracing::warn!(%error, "LISTEN failed; re-subscribing");
                return WakeEvent::Lost;
            }
            None => {
                // Quiet for a while: make sure the connection still answers.
                let probe = tokio::time::timeout(
                    patience,
                    sqlx::query(super::postgres::sql::wake_probe).execute(&mut *listener),
                )
                .await;
                if !matches!(probe, Ok(Ok(_))) {
                    tracing::warn!("LISTEN connection did not answer a probe; replacing it");
                    return WakeEvent::Lost;
                }
            }
        }
    }
}

/// Reads the change counter (every [`FILE_WATCH_EVERY`] after the first read) until it moves
/// or the read fails.
#[cfg(feature = "sqlite")]
async fn next_version(
    conn: &mut SqliteConnection,
    last: &mut Option<i64>,
    read_once: &mut bool,
) -> WakeEvent {
    loop {
        if *read_once {
            tokio::time::sleep(FILE_WATCH_EVERY).await;
        }
        *read_once = true;
        match sqlx::query_scalar::<_, i64>(super::sqlite::sql::wake_version)
            .fetch_one(&mut *conn)
            .await
        {
            Ok(v) => {
                let changed = last.is_some_and(|l| l != v);
                *last = Some(v);
                if changed {
                    return WakeEvent::Changed;
                }
            }
            Err(error) => {
                tracing::warn!(%error, "watching the SQLite file failed; reconnecting");
                return WakeEvent::Lost;
            }
        }
    }
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::store::sqlite::{SqliteStore, SqliteStoreOptions};

    /// A commit by another connection is one `Changed`; a quiet file is none.
    #[tokio::test]
    async fn a_commit_to_the_file_is_a_change() {
        let dir = std::env::temp_dir().join(format!(
            "leasehold-wake-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let url = format!("sqlite://{}", dir.join("wake.db").display());
        let store = SqliteStore::connect(&url, SqliteStoreOptions::default())
            .await
            .unwrap();
        let source = store.wake_source();
        assert_eq!(source.kind(), WakeKind::FileWatch);
        let mut subscription = source.subscribe(Duration::from_secs(1)).await.unwrap();
        let quiet = tokio::time::timeout(FILE_WATCH_EVERY * 5, subscription.next()).await;
        assert!(quiet.is_err(), "no commit, no change: {quiet:?}");
        sqlx::query("CREATE TABLE poke (x INTEGER)")
            .execute(store.pool())
            .await
            .unwrap();
        let changed = tokio::time::timeout(Duration::from_secs(5), subscription.next()).await;
        assert_eq!(changed.ok(), Some(WakeEvent::Changed));
        subscription.close().await;
        store.close().await;
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
