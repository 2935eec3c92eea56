//! `GetStats` (viewer): the whole queue at a glance — live counts, the oldest waiting task's
//! age, and the last minute's, quarter hour's and hour's finishes and failed attempts — served
//! from a cache.
//!
//! Invariant: as the overview ([`super::overview`]), the database answers at most one stats
//! query per [`STATS_MAX_AGE`] per agent however many callers ask: the callers of one refresh
//! wait on the same query and share its answer. The query reads only indexes, but the hour's
//! finished rows are many on a busy queue: dashboards polling it must not multiply that.
//!
//! When things fail: a failed query is not cached; each waiting caller gets the error and the
//! next call tries again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_proto::v1 as pb;
use leasehold_shared::store::{QueueStats, Store, StoreError};
use tokio::sync::Mutex;
use tonic::{Request, Response, Status};

use super::convert::ms;
use super::service::{Need, Service};
use super::status::from_store;

/// How old a served answer may be.
pub const STATS_MAX_AGE: Duration = Duration::from_secs(1);

/// The last stats and when they were read.
#[derive(Default)]
pub struct StatsCache {
    last: Mutex<Option<(Instant, Arc<pb::GetStatsResponse>)>>,
}

impl StatsCache {
    /// The cached stats if fresh, else new ones from `store`.
    pub async fn get(&self, store: &dyn Store) -> Result<Arc<pb::GetStatsResponse>, StoreError> {
        let mut last = self.last.lock().await;
        if let Some((at, stats)) = last.as_ref()
            && at.elapsed() < STATS_MAX_AGE
        {
            return Ok(Arc::clone(stats));
        }
        let fresh = Arc::new(to_wire(&store.task_stats().await?));
        *last = Some((Instant::now(), Arc::clone(&fresh)));
        Ok(fresh)
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
