//! `GetStats` (viewer): the whole queue at a glance — live counts, the oldest waiting task's
//! age, and the last minute's, quarter hour's and hour's finishes and failed attempts — served
//! from a cache.
//!
//! Invariant: as the overview ([`super::overview`]), the database answers at most one stats
//! query per agent per [`STATS_MAX_AGE`], or per ten times as long as the last one took when
//! that is longer (`read_cache.rs`), however many callers ask: the callers of one refresh wait
//! on the same query and share its answer. The query counts the waiting tasks and the hour's
//! finished rows, many on a busy or deep queue: dashboards polling it must not multiply that.
//!
//! When things fail: a failed query is not cached; the callers that waited on it each query on
//! their own, side by side (`read_cache.rs`), and the next call tries again.

use std::sync::Arc;
use std::time::Duration;

use leasehold_proto::v1 as pb;
use leasehold_shared::store::{QueueStats, Store, StoreError};
use tonic::{Request, Response, Status};

use super::convert::ms;
use super::read_cache::ReadCache;
use super::service::{Need, Service};
use super::status::from_store;

/// How old a served answer may be at least.
pub const STATS_MAX_AGE: Duration = Duration::from_secs(1);

/// The last stats.
pub struct StatsCache {
    last: ReadCache<(), Arc<pb::GetStatsResponse>>,
}

impl Default for StatsCache {
    fn default() -> Self {
        StatsCache {
            last: ReadCache::new(STATS_MAX_AGE, Duration::ZERO),
        }
    }
}

impl StatsCache {
    /// Drops the answer (what it counted has changed).
    pub fn clear(&self) {
        self.last.clear();
    }

    /// The cached stats if fresh, else new ones from `store`.
    pub async fn get(&self, store: &dyn Store) -> Result<Arc<pb::GetStatsResponse>, StoreError> {
        self.last
            .get((), || async {
                Ok(Arc::new(to_wire(&store.task_stats().await?)))
            })
            .await
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The wire form of `s`.
pub fn to_wire(s: &QueueStats) -> pb::GetStatsResponse {
    pb::GetStatsResponse {
        queued: s.queued,
        scheduled: s.scheduled,
        retrying: s.retrying,
        running: s.running,
        dead: s.dead,
        oldest_waiting_ms: s.oldest_waiting.map(millis),
        windows: s
            .windows
            .iter()
            .map(|w| pb::StatsWindow {
                window_ms: millis(w.window),
                succeeded: w.succeeded,
                dead_lettered: w.dead_lettered,
                cancelled: w.cancelled,
                failed_attempts: w.failed_attempts,
            })
            .collect(),
        now_ms: ms(s.now),
    }
}

impl Service {
    pub(super) async fn get_stats_rpc(
        &self,
        request: Request<pb::GetStatsRequest>,
    ) -> Result<Response<pb::GetStatsResponse>, Status> {
        self.caller(&request, Need::View).await?;
        let stats = self
            .stats
            .get(self.core.store.as_ref())
            .await
            .map_err(|e| from_store("get_stats", e))?;
        Ok(Response::new(pb::GetStatsResponse::clone(&stats)))
    }
}
