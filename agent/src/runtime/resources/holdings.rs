//! What this agent holds now: one [`Held`] per lock or shard lease, with its fencing token and
//! local deadline (`safe_until`), shared by the keeper, the lock handles, the Watch hub and the
//! core's hold and drop paths; and [`LossReason`], why a holding ended.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use leasehold_shared::store::GroupName;
use tokio::sync::watch;

use super::shards::ShardOwnership;
use crate::runtime::feed::HeldResource;

/// Why a holding ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossReason {
    /// Given back: by its holder, at shutdown, or to rebalance a group.
    Released,
    /// A renewal found it taken or forced free (the fenced write).
    Revoked,
    /// Not renewed before its local deadline: this agent can no longer prove it holds it.
    Unprovable,
}

impl LossReason {
    pub fn as_str(self) -> &'static str {
        match self {
            LossReason::Released => "released",
            LossReason::Revoked => "revoked",
            LossReason::Unprovable => "unprovable",
        }
    }
}

pub(in crate::runtime) struct Held {
    pub(in crate::runtime) group: Option<(GroupName, u32)>,
    pub(in crate::runtime) token: i64,
    pub(in crate::runtime) safe_until: Instant,
    /// Tells the lock's handle it was lost.
    pub(in crate::runtime) lost: Option<watch::Sender<Option<LossReason>>>,
}

/// What this agent holds, shared by the keeper, the lock handles and the Watch hub.
pub(crate) struct Holdings {
    held: Mutex<BTreeMap<String, Held>>,
    /// Lost holdings to give back (fenced) once the database answers again.
    pub(in crate::runtime) to_release: Mutex<Vec<(String, i64)>>,
    shards: watch::Sender<ShardOwnership>,
}

impl Default for Holdings {
    fn default() -> Self {
        Self {
            held: Mutex::new(BTreeMap::new()),
            to_release: Mutex::new(Vec::new()),
            shards: watch::channel(ShardOwnership::default()).0,
        }
    }
}

impl Holdings {
    pub(in crate::runtime) fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<ShardOwnership> {
        self.shards.subscribe()
    }

    /// Everything held now, for a Watch snapshot.
    pub(crate) fn snapshot(&self) -> Vec<HeldResource> {
        self.lock()
            .iter()
            .map(|(name, h)| resource(name, h))
            .collect()
    }

    pub(super) fn keys(&self) -> Vec<(String, i64)> {
        self.lock()
            .iter()
            .map(|(n, h)| (n.clone(), h.token))
            .collect()
    }

    pub(super) fn has_unprovable(&self, now: Instant) -> bool {
        self.lock().values().any(|h| h.safe_until <= now)
    }

    pub(in crate::runtime) fn publish(&self) {
        let mut ownership = ShardOwnership::default();
        for h in self.lock().values() {
            if let Some((group, shard)) = &h.group {
                ownership
                    .groups
                    .entry(group.as_str().to_string())
                    .or_default()
                    .insert(*shard, h.token);
            }
        }
        self.shards.send_if_modified(|current| {
            if *current == ownership {
                false
            } else {
                *current = ownership;
                true
            }
        });
    }
}

pub(in crate::runtime) fn resource(name: &str, h: &Held) -> HeldResource {
    HeldResource {
        name: name.to_string(),
        group: h.group.as_ref().map(|(g, s)| (g.as_str().to_string(), *s)),
        token: h.token,
    }
}

/// What is left of a lease at the database's `now`: `lease_until − now` (never negative).
pub(crate) fn lease_left(lease_until: DateTime<Utc>, now: DateTime<Utc>) -> Duration {
    (lease_until - now).to_std().unwrap_or(Duration::ZERO)
}
