//! Denied calls, aggregated (DESIGN §10, issue 19 "Audit"): a caller hammering the agent with
//! refused actions writes one audit row per minute, not one per call, so an unauthenticated
//! flood can neither grow `audit_log` nor starve the database pool.
//!
//! ```text
//!   denial of key (peer address, actor, action)
//!     no open window for the key ──▶ open one (WINDOW long); write a row with count 1 now,
//!                                    so an operator sees the first refusal at once
//!     window open                ──▶ count it in memory (nothing written)
//!   every FLUSH_EVERY: windows older than WINDOW close ──▶ one row with the calls counted
//!                                                         since the first (if any)
//!   server stops ──▶ every window closes and is written
//! ```
//!
//! Invariants: the `count` of a key's rows sums to its denials (a failed first row is counted
//! into its window and written when that closes); writes are INSERT-only (the agent's database
//! role may lack UPDATE on `audit_log`); memory is bounded: at most [`MAX_KEYS`] keys, later
//! peers are counted under the peer [`OVERFLOW_PEER`] (and beyond [`MAX_OVERFLOW_KEYS`] more,
//! under actor and action `*` too).
//!
//! When things fail: a row that cannot be written is logged and the call is refused all the
//! same; a row of a closed window that cannot be written is lost (logged with its count).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use leasehold_shared::store::{AuditEntry, DeniedCalls, Store};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::peer::Peer;

/// How long the denials of one key are counted into one row.
pub const WINDOW: Duration = Duration::from_secs(60);
/// How often closed windows are looked for and written.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// Keys (peer address, actor, action) counted at once; a new peer beyond this is counted
/// under [`OVERFLOW_PEER`].
pub const MAX_KEYS: usize = 10_000;
/// Keys under [`OVERFLOW_PEER`] beyond [`MAX_KEYS`]; beyond these, actor and action are `*`
/// too.
pub const MAX_OVERFLOW_KEYS: usize = 1_000;
/// The peer (and, in the last resort, actor and action) of calls counted beyond the limits.
pub const OVERFLOW_PEER: &str = "*";
/// The peer of a call without a transport peer (in-process servers).
pub const UNKNOWN_PEER: &str = "unknown";
/// Longest the server's stop waits for the last rows.
pub const STOP_FLUSH_WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    address: String,
    actor: String,
    action: String,
}

/// One key's open window.
#[derive(Debug)]
struct Window {
    opened: Instant,
    /// The first denial's row; the count row repeats it.
    sample: AuditEntry,
    /// The peer the rows name: the first call's label, or the address when later calls came
    /// from other ports.
    peer: String,
    /// Denials counted but not written yet.
    pending: u64,
}

/// The aggregator of denied calls (one per gRPC server).
pub struct Denials {
    store: Arc<dyn Store>,
    windows: Mutex<HashMap<Key, Window>>,
}

impl std::fmt::Debug for Denials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Denials")
            .field("keys", &self.lock().len())
            .finish()
    }
}

impl Denials {
    /// An aggregator writing to `store`.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            windows: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Key, Window>> {
        // The map stays consistent whatever panicked while holding it: take it back.
        self.windows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records a denied call by `peer`: the first of its key in a window is written now, the
    /// others when the window closes. Never fails: a row that cannot be written is logged.
    /// True when this was the first of its window.
    pub async fn record(&self, peer: Option<&Peer>, entry: AuditEntry) -> bool {
        let Some((key, first)) = self.count(peer, entry, Instant::now()) else {
            return false;
        };
        if let Err(error) = self.store.audit_record_denied(first).await {
            tracing::warn!(%error, action = key.action, "could not audit a denied call; it is counted into the next row");
            if let Some(w) = self.lock().get_mut(&key) {
                w.pending += 1;
            }
        }
        true
    }

    /// Counts a denial at `now`; returns the row to write at once when it opened a window.
    fn count(
        &self,
        peer: Option<&Peer>,
        entry: AuditEntry,
        now: Instant,
    ) -> Option<(Key, DeniedCalls)> {
        let (mut address, mut label) = match peer {
            Some(p) => (p.address_key(), p.label()),
            None => (UNKNOWN_PEER.to_string(), UNKNOWN_PEER.to_string()),
        };
        let mut key = Key {
            address,
            actor: entry.actor.name.clone(),
            action: entry.action.clone(),
        };
        let mut entry = entry;
        let mut windows = self.lock();
        if !windows.contains_key(&key) && windows.len() >= MAX_KEYS {
            address = OVERFLOW_PEER.to_string();
            label = OVERFLOW_PEER.to_string();
            key.address = address.clone();
            if !windows.contains_key(&key) && windows.len() >= MAX_KEYS + MAX_OVERFLOW_KEYS {
                key.actor = OVERFLOW_PEER.to_string();
                key.action = OVERFLOW_PEER.to_string();
                entry.actor.name = OVERFLOW_PEER.to_string();
                entry.action = OVERFLOW_PEER.to_string();
            }
        }
        if let Some(w) = windows.get_mut(&key) {
            w.pending += 1;
            if w.peer != label && w.peer != key.address {
                w.peer = key.address.clone();
            }
            return None;
        }
        windows.insert(
            key.clone(),
            Window {
                opened: now,
                sample: entry.clone(),
                peer: label.clone(),
                pending: 0,
            },
        );
        Some((
            key,
            DeniedCalls {
                entry,
                peer: label,
                count: 1,
            },
        ))
    }

    /// Closes the windows opened at least [`WINDOW`] before `now` (every window with `all`)
    /// and returns the rows of those that counted calls after their first.
    fn close(&self, now: Instant, all: bool) -> Vec<DeniedCalls> {
        let mut rows = Vec::new();
        self.lock().retain(|_, w| {
            if !all && now.duration_since(w.opened) < WINDOW {
                return true;
            }
            if w.pending > 0 {
                rows.push(DeniedCalls {
                    entry: w.sample.clone(),
                    peer: w.peer.clone(),
                    count: w.pending,
                });
            }
            false
        });
        rows
    }

    /// Writes the rows of the closed windows (of every window with `all`).
    pub async fn flush(&self, all: bool) {
        for row in self.close(Instant::now(), all) {
            let (count, action) = (row.count, row.entry.action.clone());
            if let Err(error) = self.store.audit_record_denied(row).await {
                tracing::warn!(%error, action, count, "could not audit denied calls; their row is lost");
            }
        }
    }

    /// Writes closed windows every [`FLUSH_EVERY`] until `stop`, then every open window
    /// (bounded by [`STOP_FLUSH_WAIT`]).
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let mut tick = tokio::time::interval(FLUSH_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tick.tick() => self.flush(false).await,
            }
        }
        if tokio::time::timeout(STOP_FLUSH_WAIT, self.flush(true))
            .await
            .is_err()
        {
            tracing::warn!("the last rows of denied calls were not written in time");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use leasehold_shared::domain::AuditResult;
    use leasehold_shared::store::AuditListParams;
    use leasehold_shared::store::sqlite::{SqliteStore, SqliteStoreOptions};
    use leasehold_shared::{Actor, Role};

    fn entry(actor: &str, action: &str) -> AuditEntry {
        AuditEntry {
            actor: Actor {
                name: actor.into(),
                role: Role::Viewer,
            },
            action: action.into(),
            target: "type:noop".into(),
            params: None,
            result: AuditResult::Denied,
            detail: Some("no".into()),
        }
    }

    fn tcp(addr: &str) -> Peer {
        Peer::Tcp {
            addr: addr.parse().unwrap(),
            uid: None,
        }
    }

    /// An aggregator over a fresh SQLite database (a file of its own).
    async fn denials() -> Denials {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "lh-denials-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let url = format!("sqlite://{}/audit.db", dir.display());
        let store = SqliteStore::connect(&url, SqliteStoreOptions::default())
            .await
            .unwrap();
        store.migrate().await.unwrap();
        Denials::new(Arc::new(store))
    }

    /// `(actor, action, peer, count)` of the denied rows, oldest first.
    async fn rows(d: &Denials) -> Vec<(String, String, Option<String>, i64)> {
        let mut rows = d
            .store
            .audit_list(AuditListParams {
                limit: 1000,
                result: Some(AuditResult::Denied),
                ..AuditListParams::default()
            })
            .await
            .unwrap();
        rows.reverse();
        rows.into_iter()
            .map(|r| (r.actor, r.action, r.peer, r.count))
            .collect()
    }

    #[tokio::test]
    async fn the_first_denial_is_written_at_once_and_the_rest_counted_into_one_row() {
        let d = denials().await;
        let t0 = Instant::now();
        let a = tcp("127.0.0.1:4000");
        let (_, first) = d
            .count(Some(&a), entry("unauthenticated", "enqueue"), t0)
            .unwrap();
        assert_eq!((first.count, first.peer.as_str()), (1, "127.0.0.1:4000"));
        for n in 0..999u64 {
            let peer = tcp(&format!("127.0.0.1:{}", 4000 + n % 3));
            assert!(
                d.count(Some(&peer), entry("unauthenticated", "enqueue"), t0)
                    .is_none()
            );
        }
        // Another action or actor is another key.
        assert!(
            d.count(Some(&a), entry("unauthenticated", "cancel"), t0)
                .is_some()
        );
        assert!(d.count(None, entry("ops", "enqueue"), t0).is_some());
        assert!(
            d.close(t0 + WINDOW - Duration::from_millis(1), false)
                .is_empty()
        );
        let rows = d.close(t0 + WINDOW, false);
        assert_eq!(rows.len(), 1, "only the key with calls after its first");
        // Later calls came from other ports: the row names the address.
        assert_eq!((rows[0].count, rows[0].peer.as_str()), (999, "127.0.0.1"));
        assert_eq!(rows[0].entry.action, "enqueue");
        // A closed window is gone: the next denial opens a new one and is written at once.
        assert!(
            d.count(Some(&a), entry("unauthenticated", "enqueue"), t0 + WINDOW)
                .is_some()
        );
    }

    #[tokio::test]
    async fn closing_all_writes_every_open_window() {
        let d = denials().await;
        let t0 = Instant::now();
        for _ in 0..5 {
            d.count(None, entry("unauthenticated", "drain"), t0);
        }
        let rows = d.close(t0, true);
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].count, rows[0].peer.as_str()), (4, UNKNOWN_PEER));
        assert!(d.lock().is_empty());
    }

    #[tokio::test]
    async fn keys_are_bounded_and_the_excess_counted_under_the_overflow_peer() {
        let d = denials().await;
        let t0 = Instant::now();
        let peer = |n: usize| {
            tcp(&format!(
                "10.{}.{}.{}:1",
                n >> 16 & 255,
                n >> 8 & 255,
                n & 255
            ))
        };
        for n in 0..MAX_KEYS {
            assert!(d.count(Some(&peer(n)), entry("u", "enqueue"), t0).is_some());
        }
        let (_, first) = d
            .count(Some(&peer(MAX_KEYS)), entry("u", "enqueue"), t0)
            .unwrap();
        assert_eq!(first.peer, OVERFLOW_PEER);
        assert!(
            d.count(Some(&peer(MAX_KEYS + 1)), entry("u", "enqueue"), t0)
                .is_none()
        );
        for n in 0..MAX_OVERFLOW_KEYS * 2 {
            d.count(Some(&peer(n + 20_000)), entry("u", &format!("a{n}")), t0);
        }
        assert_eq!(d.lock().len(), MAX_KEYS + MAX_OVERFLOW_KEYS + 1);
        let rows = d.close(t0, true);
        let total: u64 = rows.iter().map(|r| r.count).sum::<u64>()
            + u64::try_from(MAX_KEYS + MAX_OVERFLOW_KEYS + 1).unwrap();
        assert_eq!(
            total,
            u64::try_from(MAX_KEYS + 2 + MAX_OVERFLOW_KEYS * 2).unwrap()
        );
    }

    #[tokio::test]
    async fn recorded_denials_reach_the_store_with_their_counts() {
        let d = Arc::new(denials().await);
        let a = tcp("127.0.0.1:4000");
        for _ in 0..10 {
            d.record(Some(&a), entry("unauthenticated", "cancel")).await;
        }
        let b = Peer::Unix { uid: 0, pid: None };
        d.record(Some(&b), entry("unauthenticated", "cancel")).await;
        let first = (
            "unauthenticated".to_string(),
            "cancel".to_string(),
            Some("127.0.0.1:4000".to_string()),
            1,
        );
        let other = (
            "unauthenticated".to_string(),
            "cancel".to_string(),
            Some("unix:uid:0(root)".to_string()),
            1,
        );
        // The first of each key is there at once; the other nine wait for their window.
        assert_eq!(rows(&d).await, vec![first.clone(), other.clone()]);
        let stop = CancellationToken::new();
        let run = tokio::spawn(Arc::clone(&d).run(stop.clone()));
        stop.cancel();
        run.await.unwrap();
        assert!(d.lock().is_empty());
        let nine = (first.0.clone(), first.1.clone(), first.2.clone(), 9);
        assert_eq!(rows(&d).await, vec![first, other, nine]);
    }
}
