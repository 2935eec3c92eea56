//! [`Notifier`]: the wake-up service that tells the claimer new work may be there at once. It
//! consumes the store's [`WakeSource`] — LISTEN on PostgreSQL, the file's change counter on
//! SQLite (`leasehold_shared::store::wake`, which owns the connections, the probe and the
//! statements) — and wakes the claimer on every change.
//!
//! A wake-up is a hint: the claimer polls as well, so a lost one delays work by at most a poll
//! interval and never loses it.
//!
//! When things fail: a subscription that cannot be opened is retried with backoff
//! ([`RECONNECT_BACKOFF`], without end), the claimer polling meanwhile. A subscription that
//! reports its connection lost (broken, failed, or — on PostgreSQL — not answering a probe
//! every `probe` interval) is replaced, and the claimer woken, so anything enqueued meanwhile
//! is picked up by a claim.

use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use leasehold_shared::store::{WakeError, WakeEvent, WakeKind, WakeSource, WakeSubscription};
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
    pub(crate) source: WakeSource,
}

impl Notifier {
    /// How long a PostgreSQL connect, LISTEN or probe may take, and how long a quiet LISTEN
    /// connection goes unprobed.
    fn probe_every(&self) -> Duration {
        (self.core.settings.heartbeat * 2).max(Duration::from_secs(1))
    }

    pub(crate) async fn run(self, stop: CancellationToken) {
        let kind = self.source.kind();
        if kind == WakeKind::Poll {
            tracing::warn!(
                every = ?self.core.settings.poll_interval,
                "polling for new tasks every {:?}: LISTEN cannot work through a transaction \
                 pooler; give --notify-database-url a direct connection for wake-ups at once",
                self.core.settings.poll_interval
            );
            stop.cancelled().await;
            return;
        }
        let patience = self.probe_every();
        loop {
            // Subscribes with backoff until it works; every new subscription starts it afresh.
            let subscribed = (|| self.source.subscribe(patience))
                .retry(RECONNECT_BACKOFF)
                .notify(|error, retry_in| log_failure(kind, error, Some(retry_in)));
            let subscription = tokio::select! {
                _ = stop.cancelled() => return,
                s = subscribed => s,
            };
            match subscription {
                Ok(subscription) => {
                    // Anything enqueued while we were not subscribed: claim now.
                    self.core.wake_claimers();
                    if self.consume(subscription, &stop).await {
                        return;
                    }
                }
                // Not reached: the backoff has no end. Should it end, it starts again.
                Err(error) => log_failure(kind, &error, None),
            }
        }
    }

    /// Wakes the claimer on every change until the subscription is lost (false) or `stop`
    /// fires (true).
    async fn consume(&self, mut subscription: WakeSubscription, stop: &CancellationToken) -> bool {
        loop {
            let event = tokio::select! {
                _ = stop.cancelled() => {
                    subscription.close().await;
                    return true;
                }
                e = subscription.next() => e,
            };
            self.core.wake_claimers();
            if event == WakeEvent::Lost {
                return false;
            }
        }
    }
}

/// A subscription that could not be opened, said as each backend's wake-up says it.
fn log_failure(kind: WakeKind, error: &WakeError, retry_in: Option<Duration>) {
    match (kind, retry_in) {
        (WakeKind::Listen, Some(retry_in)) => {
            tracing::warn!(%error, ?retry_in, "LISTEN failed; polling meanwhile");
        }
        (WakeKind::Listen, None) => tracing::warn!(%error, "LISTEN failed; polling meanwhile"),
        (WakeKind::FileWatch, Some(retry_in)) => {
            tracing::warn!(%error, ?retry_in, "cannot watch the SQLite file; polling meanwhile");
        }
        (WakeKind::FileWatch, None) => {
            tracing::warn!(%error, "cannot watch the SQLite file; polling meanwhile");
        }
        (WakeKind::Poll, _) => {}
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
