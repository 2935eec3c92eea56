//! The idle watcher of `--exit-when-idle` (CI), and the summary of what the run's task types
//! look like when the run ends.
//!
//! ```text
//!   idle  = nothing of the agent's types queued, in retry_wait (however long the backoff),
//!           running or cancel_requested — held by this agent or any other
//!   bad   = tasks of the agent's types now dead or cancelled (created or finished within
//!           --idle-since before the start; default: every one still stored), whoever ran them
//!   exit  0 idle, nothing bad · 1 something bad · 4 --idle-timeout passed with work remaining
//! ```
//! Waiting tasks of types no live agent serves never block idleness (nothing would ever finish
//! them): they are listed in the summary and on stderr, and do not change the exit code — they
//! are not the run's work, and the leader dead-letters them after `--unserved-after`.
//!
//! The watcher asks the store at every poll interval and whenever the claimer comes back short
//! with nothing held; one read in database time decides, so a claim or completion in flight is
//! seen as still pending. When things fail: a report that fails or times out is logged and
//! asked again at the next tick; the idle timeout still ends the run.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use leasehold_shared::store::{IdleGroup, IdleReport, IdleReportParams};
use serde::Serialize;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::core::Core;

/// Ids listed per kind in the summary.
pub const SUMMARY_IDS: u32 = 100;

/// Watches for the end of the run's work.
pub(crate) struct IdleWatcher {
    pub(crate) core: Arc<Core>,
    /// Notified by the claimer when a claim came back short with nothing held.
    pub(crate) check: Arc<Notify>,
    /// Cancelled when the run should end (idle, or the idle timeout passed).
    pub(crate) idle: CancellationToken,
    /// Set before `idle` is cancelled when the idle timeout ended the run.
    pub(crate) timed_out: Arc<AtomicBool>,
    /// When the agent started running (the idle timeout counts from here).
    pub(crate) started: Instant,
}

impl IdleWatcher {
    pub(crate) async fn run(self, stop: CancellationToken) {
        let core = &self.core;
        let deadline = core.settings.idle_timeout.map(|d| self.started + d);
        let timeout = (core.settings.lease_ttl / 2).max(Duration::from_secs(1));
        loop {
            let passed = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = self.check.notified() => {}
                _ = tokio::time::sleep(core.settings.poll_interval) => {}
                _ = passed => {}
            }
            if deadline.is_some_and(|at| Instant::now() >= at) {
                tracing::warn!(timeout = ?core.settings.idle_timeout, "idle timeout: work of our types remains");
                self.timed_out.store(true, Ordering::SeqCst);
                self.idle.cancel();
                return;
            }
            if core.book.len() > 0 || core.book.reserved() > 0 {
                continue;
            }
            match tokio::time::timeout(timeout, report(core, 1, None)).await {
                Ok(Ok(r)) if r.is_idle() && core.book.len() == 0 => {
                    tracing::info!(
                        "nothing of our types queued, retrying or running: exiting when idle"
                    );
                    self.idle.cancel();
                    return;
                }
                Ok(Ok(_)) => {}
                Ok(Err(error)) => tracing::warn!(%error, "could not read the work left"),
                Err(_) => tracing::warn!(?timeout, "reading the work left timed out"),
            }
        }
    }
}

async fn report(
    core: &Core,
    id_limit: u32,
    ended_within: Option<Duration>,
) -> leasehold_shared::store::Result<IdleReport> {
    core.store
        .task_idle_report(IdleReportParams {
            task_types: core.types.clone(),
            ended_within,
            legacy_stale_after: core.settings.lease_ttl + core.settings.grace,
            id_limit,
        })
        .await
}

/// Reads the final state of the run's types, `run_time` after the start.
pub(crate) async fn final_summary(
    core: &Core,
    run_time: Duration,
    timed_out: bool,
) -> leasehold_shared::store::Result<IdleSummary> {
    let ended_within = core.settings.idle_since.map(|d| d + run_time);
    let r = report(core, SUMMARY_IDS, ended_within).await?;
    Ok(IdleSummary::new(&r, timed_out))
}

/// How many tasks of one status and type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupCount {
    pub status: String,
    pub task_type: String,
    pub count: u64,
}

/// The state of the run's types at its end (`--exit-when-idle`); id lists hold at most
/// [`SUMMARY_IDS`] ids each, ascending.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct IdleSummary {
    /// The idle timeout ended the run with work remaining (exit 4).
    pub idle_timeout: bool,
    /// Tasks of our types that ended badly: dead plus cancelled (exit 1 when not 0).
    pub ended_badly: u64,
    /// Their ids (dead and cancelled).
    pub failed_ids: Vec<i64>,
    pub dead_ids: Vec<i64>,
    pub cancelled_ids: Vec<i64>,
    /// Tasks of our types still queued, in retry_wait, running or cancel_requested.
    pub pending: u64,
    pub pending_ids: Vec<i64>,
    /// Pending tasks by status and type.
    pub remaining: Vec<GroupCount>,
    /// Waiting tasks of other types that no live agent serves (reported, never waited for).
    pub unserved: u64,
    pub unserved_ids: Vec<i64>,
    /// Unserved tasks by status and type.
    pub unserved_types: Vec<GroupCount>,
}

fn ids<'a>(groups: impl Iterator<Item = &'a IdleGroup>) -> Vec<i64> {
    let mut ids: Vec<i64> = groups.flat_map(|g| g.ids.iter().map(|id| id.0)).collect();
    ids.sort_unstable();
    ids.truncate(SUMMARY_IDS as usize);
    ids
}

fn counts(groups: &[IdleGroup]) -> Vec<GroupCount> {
    groups
        .iter()
        .map(|g| GroupCount {
            status: g.status.to_string(),
            task_type: g.task_type.as_str().to_string(),
            count: g.count,
        })
        .collect()
}

impl IdleSummary {
    fn new(r: &IdleReport, timed_out: bool) -> Self {
        let of = |status: &str| {
            ids(r
                .ended_badly
                .iter()
                .filter(move |g| g.status.to_string() == status))
        };
        Self {
            idle_timeout: timed_out,
            ended_badly: r.ended_badly.iter().map(|g| g.count).sum(),
            failed_ids: ids(r.ended_badly.iter()),
            dead_ids: of("dead"),
            cancelled_ids: of("cancelled"),
            pending: r.pending.iter().map(|g| g.count).sum(),
            pending_ids: ids(r.pending.iter()),
            remaining: counts(&r.pending),
            unserved: r.unserved.iter().map(|g| g.count).sum(),
            unserved_ids: ids(r.unserved.iter()),
            unserved_types: counts(&r.unserved),
        }
    }

    /// One line per finding, for stderr: what remains, what ended badly, what no agent serves.
    pub fn notes(&self) -> Vec<String> {
        let groups = |g: &[GroupCount]| {
            g.iter()
                .map(|g| format!("{} {} {}", g.count, g.status, g.task_type))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let list = |ids: &[i64]| {
            ids.iter()
                .map(i64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut notes = Vec::new();
        if self.idle_timeout || self.pending > 0 {
            notes.push(format!(
                "{} task(s) of our types remain ({}); ids {}",
                self.pending,
                groups(&self.remaining),
                list(&self.pending_ids)
            ));
        }
        if self.ended_badly > 0 {
            notes.push(format!(
                "{} task(s) of our types ended badly: dead ids [{}], cancelled ids [{}]",
                self.ended_badly,
                list(&self.dead_ids),
                list(&self.cancelled_ids)
            ));
        }
        if self.unserved > 0 {
            notes.push(format!(
                "warning: {} waiting task(s) of types no live agent serves ({}); ids {}",
                self.unserved,
                groups(&self.unserved_types),
                list(&self.unserved_ids)
            ));
        }
        notes
    }
}
