//! Throttled progress writes for one execution.
//!
//! A handler may report progress as often as it likes; the sink writes at most once per
//! `interval` or once every `every` updates, whichever comes first, and the runtime flushes the
//! last value before the attempt ends. Every write is fenced by the lease key: a write after the
//! lease moved on changes nothing and is remembered as fenced.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use leasehold_shared::store::{CheckpointParams, HolderWrite, ProgressParams};
use leasehold_shared::{LeaseKey, Progress, Store};
use tokio::sync::Mutex;

use super::feed::{Feed, FeedEvent};

/// Default: at most one progress write per second per execution…
pub const DEFAULT_PROGRESS_INTERVAL: Duration = Duration::from_secs(1);
/// …or one every this many updates.
pub const DEFAULT_PROGRESS_EVERY: u32 = 1000;

#[derive(Debug)]
struct State {
    latest: Option<Progress>,
    written: Option<Progress>,
    last_write: Option<Instant>,
    updates: u32,
}

/// Where a handler's progress goes, and what its execution shares with the runtime: the last
/// checkpoint, a completion its own transaction committed, and the lease book to tell before
/// that commit.
pub struct ProgressSink {
    key: LeaseKey,
    store: Arc<dyn Store>,
    /// The last checkpoint saved for the task (the claimed one, then each one saved).
    pub(crate) checkpoint: std::sync::Mutex<Option<serde_json::Value>>,
    /// Set when a handler's transaction committed the task's completion.
    pub(crate) completed: std::sync::Mutex<Option<leasehold_shared::store::Completion>>,
    book: Option<Arc<super::book::LeaseBook>>,
    interval: Duration,
    every: u32,
    state: Mutex<State>,
    fenced: AtomicBool,
    feed: Arc<Feed>,
}

impl ProgressSink {
    pub(crate) fn new(
        key: LeaseKey,
        store: Arc<dyn Store>,
        interval: Duration,
        every: u32,
        feed: Arc<Feed>,
    ) -> Self {
        Self {
            key,
            store,
            checkpoint: std::sync::Mutex::new(None),
            completed: std::sync::Mutex::new(None),
            book: None,
            interval,
            every: every.max(1),
            state: Mutex::new(State {
                latest: None,
                written: None,
                last_write: None,
                updates: 0,
            }),
            fenced: AtomicBool::new(false),
            feed,
        }
    }

    /// Records `progress`; writes it when the time or count threshold is reached.
    pub(crate) async fn update(&self, progress: Progress) {
        let mut state = self.state.lock().await;
        state.latest = Some(progress);
        state.updates += 1;
        let due = state.updates >= self.every
            || state
                .last_write
                .is_none_or(|at| at.elapsed() >= self.interval);
        if due {
            self.write(&mut state).await;
        }
    }

    /// Writes the latest value if it was not written yet (the forced final flush).
    pub(crate) async fn flush(&self) {
        let mut state = self.state.lock().await;
        if state.latest.is_some() && state.latest != state.written {
            self.write(&mut state).await;
        }
    }

    /// This sink with the claimed `checkpoint` and the `book` its execution's lease is in.
    pub(crate) fn holding(
        mut self,
        checkpoint: Option<serde_json::Value>,
        book: Arc<super::book::LeaseBook>,
    ) -> Self {
        self.checkpoint = std::sync::Mutex::new(checkpoint);
        self.book = Some(book);
        self
    }

    /// The execution is about to end by its own transaction's commit: its lease leaves the
    /// executing set now, so a renewal that finds it gone after the commit is not taken for a
    /// lost lease (the completer's write afterwards settles it).
    pub(crate) fn ending(&self) {
        if let Some(book) = &self.book {
            book.finish_execution(self.key.id, self.key.epoch);
        }
    }

    /// Saves `checkpoint` now (fenced by the lease key): `Ok(true)` when it landed, `Ok(false)`
    /// when the lease moved on (nothing was written).
    pub(crate) async fn checkpoint(
        &self,
        checkpoint: serde_json::Value,
    ) -> Result<bool, leasehold_shared::StoreError> {
        let params = CheckpointParams {
            key: self.key.clone(),
            checkpoint,
        };
        match self.store.task_checkpoint(params).await? {
            HolderWrite::Held => Ok(true),
            HolderWrite::Fenced => {
                self.fenced.store(true, Ordering::Relaxed);
                tracing::warn!(
                    task.id = self.key.id.0,
                    lease.epoch = self.key.epoch.0,
                    "checkpoint write fenced: the lease moved on"
                );
                Ok(false)
            }
        }
    }

    /// True when a write found the lease gone.
    pub(crate) fn was_fenced(&self) -> bool {
        self.fenced.load(Ordering::Relaxed)
    }

    async fn write(&self, state: &mut State) {
        let Some(progress) = state.latest else {
            return;
        };
        if self.fenced.load(Ordering::Relaxed) {
            return;
        }
        let params = ProgressParams {
            key: self.key.clone(),
            progress,
        };
        match self.store.task_progress(params).await {
            Ok(HolderWrite::Held) => {
                state.written = Some(progress);
                state.last_write = Some(Instant::now());
                state.updates = 0;
                self.feed.push(FeedEvent::Progress {
                    id: self.key.id,
                    epoch: self.key.epoch,
                    progress,
                });
            }
            Ok(HolderWrite::Fenced) => {
                self.fenced.store(true, Ordering::Relaxed);
                tracing::warn!(
                    task.id = self.key.id.0,
                    lease.epoch = self.key.epoch.0,
                    "progress write fenced: the lease moved on"
                );
            }
            Err(error) => {
                // Kept as latest: the next update or the final flush tries again.
                state.last_write = Some(Instant::now());
                tracing::warn!(task.id = self.key.id.0, %error, "progress write failed");
            }
        }
    }
}
