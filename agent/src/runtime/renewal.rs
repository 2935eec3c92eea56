//! The one renewal loop behind every lease this agent holds: the heartbeat's task leases
//! ([`super::heartbeat::Heartbeat`]) and the keeper's locks and shards
//! ([`super::resources::Keeper`]) are each a [`Renewable`] driven by a [`Renewal`], so when
//! they renew, how long a renewal may take and what a failed one does cannot differ.
//!
//! ```text
//!   every beat (settings.heartbeat, first at once):
//!       batch ──▶ connect (if needed) + send, within the renewal timeout
//!                   ├── landed   ──▶ renewed: deadlines raised, lost holdings stopped at once
//!                   └── error / timeout ──▶ connection abandoned, failed: deadlines kept
//!       then check (drop what is past its local deadline), then after_beat
//!   every check (beat / 4, 20..250 ms):
//!       anything past its local deadline? ──▶ try one renewal first, then check
//!   stopped ──▶ stopped (e.g. the keeper gives its holdings back)
//! ```
//!
//! Invariant (DESIGN §5): a holding is only worked on while its local deadline
//! (`safe_until` = sent + min(ttl, what the database says is left) − margin) lies ahead; the
//! holder's `check` drops it the moment that deadline passes, whatever the database is doing.
//!
//! When things fail: a renewal that errors or does not answer within the renewal timeout
//! (which bounds the connect too) abandons its connection, so a half-open or stuck socket is
//! never waited on again; the next beat connects afresh. Holdings keep their last deadline:
//! they run on through a short outage and are dropped at that deadline in a long one, always
//! before the database's recovery (after `lease_until + grace`) could hand them to another.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_shared::StoreError;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use super::core::{Core, bump};
use super::settings::RuntimeSettings;

/// Opens a renewal loop's own connection.
pub(crate) type Connect<C> =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<C, StoreError>> + Send>> + Send + Sync>;

/// Now, on tokio's clock (the same as `Instant::now()` unless a test paused time).
pub(crate) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Counts one renewal of held leases: the run summary, the renewal counters and the
/// database-up gauge.
pub(crate) fn count(core: &Core, ok: bool) {
    if !ok {
        bump(&core.stats.renewal_failures, 1);
    }
    core.metrics.renewal(ok);
    core.metrics.database(ok);
}

/// When a renewal loop beats and how long one renewal may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cadence {
    /// Between renewals (`settings.heartbeat`).
    pub(crate) every: Duration,
    /// One renewal, connecting included (`settings.renew_timeout()`).
    pub(crate) timeout: Duration,
}

impl Cadence {
    pub(crate) fn of(settings: &RuntimeSettings) -> Self {
        Self {
            every: settings.heartbeat,
            timeout: settings.renew_timeout(),
        }
    }

    /// How often local deadlines are checked between beats.
    fn check_every(self) -> Duration {
        (self.every / 4).clamp(Duration::from_millis(20), Duration::from_millis(250))
    }
}

/// A renewal loop's connection: opened when needed, kept while it works, abandoned on any
/// failure.
pub(crate) struct Line<C> {
    /// The service, for the log.
    service: &'static str,
    connect: Connect<C>,
    conn: Option<C>,
}

impl<C: Clone> Line<C> {
    /// `conn`: a connection already open (the heartbeat's, opened at start), if any.
    pub(crate) fn new(service: &'static str, connect: Connect<C>, conn: Option<C>) -> Self {
        Self {
            service,
            connect,
            conn,
        }
    }

    /// The open connection, or a new one.
    pub(crate) async fn get(&mut self) -> Result<C, StoreError> {
        if let Some(conn) = &self.conn {
            return Ok(conn.clone());
        }
        let conn = (self.connect)().await?;
        tracing::info!(service = self.service, "renewal connection (re)established");
        self.conn = Some(conn.clone());
        Ok(conn)
    }

    /// Drops the connection: the next [`Line::get`] opens another.
    pub(crate) fn abandon(&mut self) {
        self.conn = None;
    }
}

/// What a [`Renewal`] keeps: a set of holdings, each with a local deadline.
pub(crate) trait Renewable: Send {
    /// What renewals go over (a store connection; a fake in tests).
    type Conn: Clone + Send + Sync + 'static;
    /// What one renewal sends.
    type Batch: Send + Sync;
    /// What one renewal returns.
    type Renewed: Send;

    /// What to renew now; `None` when nothing needs the database.
    fn batch(&mut self) -> Option<Self::Batch>;

    /// Sends one renewal; the loop bounds it (and the connect) by the renewal timeout.
    fn send(
        &self,
        conn: Self::Conn,
        batch: &Self::Batch,
    ) -> impl Future<Output = Result<Self::Renewed, StoreError>> + Send;

    /// The renewal sent at `sent` landed: raise the deadlines of what was renewed and stop
    /// what was lost.
    fn renewed(
        &mut self,
        batch: Self::Batch,
        sent: Instant,
        out: Self::Renewed,
        line: &mut Line<Self::Conn>,
    ) -> impl Future<Output = ()> + Send;

    /// The renewal failed (`reason`); the connection is already abandoned and every deadline
    /// stays where it was.
    fn failed(&mut self, batch: Self::Batch, reason: String);

    /// Whether a holding is past its local deadline at `now`.
    fn has_unprovable(&self, now: Instant) -> bool;

    /// Drops every holding past its local deadline at `now`.
    fn check(&mut self, now: Instant);

    /// After each beat (not after a check's extra renewal); `renewed`: the beat's renewal
    /// landed (or there was nothing to renew).
    fn after_beat(
        &mut self,
        _line: &mut Line<Self::Conn>,
        _renewed: bool,
    ) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// Once the loop was stopped.
    fn stopped(&mut self, _line: &mut Line<Self::Conn>) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// The renewal loop service over one [`Renewable`].
pub(crate) struct Renewal<T: Renewable> {
    holder: T,
    line: Line<T::Conn>,
    cadence: Cadence,
}

impl<T: Renewable> Renewal<T> {
    pub(crate) fn new(holder: T, line: Line<T::Conn>, cadence: Cadence) -> Self {
        Self {
            holder,
            line,
            cadence,
        }
    }

    pub(crate) async fn run(mut self, stop: CancellationToken) {
        let mut beat = tokio::time::interval(self.cadence.every);
        beat.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut check = tokio::time::interval(self.cadence.check_every());
        check.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = beat.tick() => {
                    let renewed = self.renew().await;
                    self.holder.check(now());
                    self.holder.after_beat(&mut self.line, renewed).await;
                }
                _ = check.tick() => {
                    // Before giving up a holding at its local deadline, try once to prove it
                    // (after a freeze the deadline and the renewal fall due together).
                    if self.holder.has_unprovable(now()) {
                        self.renew().await;
                    }
                    self.holder.check(now());
                }
            }
        }
        self.holder.stopped(&mut self.line).await;
    }

    /// One renewal; false when it failed or timed out.
    async fn renew(&mut self) -> bool {
        let Some(batch) = self.holder.batch() else {
            return true;
        };
        let timeout = self.cadence.timeout;
        let sent = now();
        let (line, holder) = (&mut self.line, &self.holder);
        let attempt = tokio::time::timeout(timeout, async {
            let conn = line.get().await?;
            holder.send(conn, &batch).await
        })
        .await;
        let reason = match attempt {
            Ok(Ok(out)) => {
                self.holder.renewed(batch, sent, out, &mut self.line).await;
                return true;
            }
            Ok(Err(error)) => super::queue::chain(&error),
            Err(_) => format!("renewal timed out after {timeout:?}"),
        };
        self.line.abandon();
        self.holder.failed(batch, reason);
        false
    }
}

#[cfg(test)]
mod tests;
