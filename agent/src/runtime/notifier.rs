//! Wake-up services that tell the claimer new work may be there at once: [`Notifier`] LISTENs
//! on PostgreSQL's enqueue channel; `FileWatcher` watches a SQLite file's change counter
//! (`PRAGMA data_version`, every [`FILE_WATCH_EVERY`]). The rest of this note is about LISTEN.
//!
//! NOTIFY is a hint: the claimer polls as well, so a lost notification delays work by at most a
//! poll interval and never loses it.
//!
//! When things fail: a lost LISTEN connection is re-established (sqlx reconnects on the next
//! receive) and followed by a wake-up, so anything enqueued meanwhile is picked up by a claim.
//! A half-open LISTEN connection delivers nothing and never errors, so the connection is probed
//! every `probe` interval and replaced when the probe does not answer in time.

use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use leasehold_shared::store::postgres::NOTIFY_CHANNEL;
use sqlx::postgres::{PgListener, PgPool};
use tokio_util::sync::CancellationToken;

use super::core::Core;

/// Pauses between attempts to (re)connect a wake-up source: 100 ms doubling to 5 s, without
/// end (the claimer polls meanwhile); a success starts the sequence again.
const RECONNECT_BACKOFF: ExponentialBuilder = ExponentialBuilder::new()
    .with_min_delay(Duration::from_millis(100))
    .with_max_delay(Duration::from_secs(5))
    .without_max_times();

pub(crate) struct Notifier {
    pub(crate) core: Arc<Core>,
    pub(crate) pool: PgPool,
}

impl Notifier {
    fn probe_every(&self) -> Duration {
        (self.core.settings.heartbeat * 2).max(Duration::from_secs(1))
    }

    pub(crate) async fn run(self, stop: CancellationToken) {
        loop {
            // Subscribes with backoff until it works; every new subscription starts it afresh.
            let subscribed =
                (|| self.subscribe())
                    .retry(RECONNECT_BACKOFF)
                    .notify(|error, retry_in| {
                        tracing::warn!(%error, ?retry_in, "LISTEN failed; polling meanwhile");
                    });
            let listener = tokio::select! {
                _ = stop.cancelled() => return,
                l = subscribed => l,
            };
            match listener {
                Ok(listener) => {
                    // Anything enqueued while we were not listening: claim now.
                    self.core.wake_claimers();
                    if self.listen(listener, &stop).await {
                        return;
                    }
                }
                // Not reached: the backoff has no end. Should it end, it starts again.
                Err(error) => tracing::warn!(%error, "LISTEN failed; polling meanwhile"),
            }
        }
    }

    async fn subscribe(&self) -> Result<PgListener, sqlx::Error> {
        let timeout = self.probe_every();
        let mut listener = tokio::time::timeout(timeout, PgListener::connect_with(&self.pool))
            .await
            .map_err(|_| sqlx::Error::PoolTimedOut)??;
        // Report a lost connection at once instead of reconnecting inside `try_recv` (which a
        // probe timer could cancel half-way): this loop re-subscribes and wakes the claimer.
        listener.eager_reconnect(false);
        tokio::time::timeout(timeout, listener.listen(NOTIFY_CHANNEL))
            .await
            .map_err(|_| sqlx::Error::PoolTimedOut)??;
        tracing::debug!("listening for enqueues");
        Ok(listener)
    }

    /// Receives until the connection fails or stops answering; true when stopped.
    async fn listen(&self, mut listener: PgListener, stop: &CancellationToken) -> bool {
        let probe_every = self.probe_every();
        loop {
            let received = tokio::select! {
                _ = stop.cancelled() => return true,
                r = listener.try_recv() => Some(r),
                _ = tokio::time::sleep(probe_every) => None,
            };
            match received {
                Some(Ok(Some(_))) => self.core.wake_claimers(),
                Some(Ok(None)) => {
                    tracing::warn!("LISTEN connection lost; re-subscribing");
                    self.core.wake_claimers();
                    return false;
                }
                Some(Err(error)) => {
                    tracing::warn!(%error, "LISTEN failed; re-subscribing");
                    self.core.wake_claimers();
                    return false;
                }
                None => {
                    // Quiet for a while: make sure the connection still answers.
                    let probe = tokio::time::timeout(
                        probe_every,
                        sqlx::query("SELECT 1").execute(&mut listener),
                    )
                    .await;
                    if !matches!(probe, Ok(Ok(_))) {
                        tracing::warn!("LISTEN connection did not answer a probe; replacing it");
                        self.core.wake_claimers();
                        return false;
                    }
                }
            }
        }
    }
}

/// How often [`FileWatcher`] looks at the SQLite file's change counter.
pub(crate) const FILE_WATCH_EVERY: Duration = Duration::from_millis(20);

/// SQLite has no NOTIFY. Its stand-in: a connection of its own reads `PRAGMA data_version`,
/// which changes whenever any other connection (of this process or another) commits to the
/// file, and wakes the claimer when it does. Like NOTIFY it is a hint: commits that are not
/// enqueues wake the claimer too (a claim that finds nothing is cheap), and the claimer still
/// polls, so a failing watcher delays work by at most a poll interval.
pub(crate) struct FileWatcher {
    pub(crate) core: Arc<Core>,
    pub(crate) pool: sqlx::SqlitePool,
}

impl FileWatcher {
    pub(crate) async fn run(self, stop: CancellationToken) {
        use sqlx::{ConnectOptions, Connection};
        let options = self.pool.connect_options();
        loop {
            // Connects with backoff until it works; every new connection starts it afresh.
            let connecting = (|| options.connect())
                .retry(RECONNECT_BACKOFF)
                .notify(|error, retry_in| {
                    tracing::warn!(%error, ?retry_in, "cannot watch the SQLite file; polling meanwhile");
                });
            let connected = tokio::select! {
                _ = stop.cancelled() => return,
                c = connecting => c,
            };
            let mut conn = match connected {
                Ok(conn) => conn,
                // Not reached: the backoff has no end. Should it end, it starts again.
                Err(error) => {
                    tracing::warn!(%error, "cannot watch the SQLite file; polling meanwhile");
                    continue;
                }
            };
            let mut last: Option<i64> = None;
            loop {
                let version = tokio::select! {
                    _ = stop.cancelled() => {
                        let _ = conn.close().await;
                        return;
                    }
                    v = sqlx::query_scalar::<_, i64>("PRAGMA data_version").fetch_one(&mut conn) => v,
                };
                match version {
                    Ok(v) => {
                        if last.is_some_and(|l| l != v) {
                            self.core.wake_claimers();
                        }
                        last = Some(v);
                    }
                    Err(error) => {
                        tracing::warn!(%error, "watching the SQLite file failed; reconnecting");
                        self.core.wake_claimers();
                        break;
                    }
                }
                tokio::select! {
                    _ = stop.cancelled() => {
                        let _ = conn.close().await;
                        return;
                    }
                    _ = tokio::time::sleep(FILE_WATCH_EVERY) => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use backon::BackoffBuilder;

    use super::*;

    #[test]
    fn reconnects_double_to_the_cap_and_never_end() {
        let ms: Vec<u128> = RECONNECT_BACKOFF
            .build()
            .take(9)
            .map(|d| d.as_millis())
            .collect();
        assert_eq!(ms, [100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000]);
    }
}
