//! The backlog gauges, exported by the leader only: `leasehold_queue_depth`,
//! `leasehold_oldest_waiting_seconds` and `leasehold_dead_letters`, each by `task_type`.
//!
//! ```text
//!   leader refresh (every BACKLOG_REFRESH) ──set(rows)──▶ a series per listed type;
//!                                                         types no longer listed removed
//!   not leader (checked every refresh)     ──clear()───▶ no series at all
//! ```
//!
//! Invariant: at most one agent of a fleet exports these series (the one that holds the leader
//! lease), so a `sum` over agents is the queue's, not the queue's times the fleet size; they
//! are the database's numbers (the overview), the same whichever agent exports them. At most
//! [`BACKLOG_TYPES_CAP`] types are exported.
//!
//! When things fail: a refresh whose overview read fails leaves the last values in place
//! (`leasehold_database_up` says the database is out of reach); losing leadership removes
//! every series at the next refresh at the latest.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::TypeLabel;

/// Most task types exported (the overview lists as many).
pub const BACKLOG_TYPES_CAP: usize = leasehold_shared::store::OVERVIEW_TYPES_CAP;

/// One task type's backlog, as the overview gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct BacklogRow {
    pub task_type: String,
    /// Queued and due + queued not yet due + waiting to retry.
    pub depth: u64,
    /// How long its oldest waiting task has been due (0 when none waits).
    pub oldest_waiting_seconds: f64,
    /// In the dead-letter queue.
    pub dead: u64,
}

/// The three families and the types they hold series of.
#[derive(Default)]
pub(super) struct Backlog {
    depth: Family<TypeLabel, Gauge>,
    oldest: Family<TypeLabel, Gauge<f64, AtomicU64>>,
    dead: Family<TypeLabel, Gauge>,
    exported: Mutex<HashSet<String>>,
}

impl Backlog {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "queue_depth",
            "Tasks of the type waiting to run: queued and due, queued for later (not yet due) and \
             waiting to retry; exported by the leader agent only, refreshed every 15 s",
            self.depth.clone(),
        );
        registry.register(
            "oldest_waiting_seconds",
            "How long the type's oldest waiting task (queued or retry_wait, due: what a claim \
             could take now) has been due, by the database clock; 0 when none waits; exported \
             by the leader agent only, refreshed every 15 s",
            self.oldest.clone(),
        );
        registry.register(
            "dead_letters",
            "Tasks of the type in the dead-letter queue; exported by the leader agent only, \
             refreshed every 15 s",
            self.dead.clone(),
        );
    }

    /// Sets a series per row (the first [`BACKLOG_TYPES_CAP`]) and removes those of types not
    /// in `rows`.
    pub(super) fn set(&self, rows: &[BacklogRow]) {
        let mut exported = self.exported.lock().unwrap_or_else(|p| p.into_inner());
        let rows = &rows[..rows.len().min(BACKLOG_TYPES_CAP)];
        let listed: HashSet<&str> = rows.iter().map(|r| r.task_type.as_str()).collect();
        exported.retain(|t| {
            let keep = listed.contains(t.as_str());
            if !keep {
                self.remove(t);
            }
            keep
        });
        for row in rows {
            let label = TypeLabel {
                task_type: row.task_type.clone(),
            };
            self.depth
                .get_or_create(&label)
                .set(i64::try_from(row.depth).unwrap_or(i64::MAX));
            self.oldest
                .get_or_create(&label)
                .set(row.oldest_waiting_seconds);
            self.dead
                .get_or_create(&label)
                .set(i64::try_from(row.dead).unwrap_or(i64::MAX));
            exported.insert(row.task_type.clone());
        }
    }

    /// Removes every series.
    pub(super) fn clear(&self) {
        let mut exported = self.exported.lock().unwrap_or_else(|p| p.into_inner());
        for t in exported.drain() {
            self.remove(&t);
        }
    }

    fn remove(&self, task_type: &str) {
        let label = TypeLabel {
            task_type: task_type.to_string(),
        };
        self.depth.remove(&label);
        self.oldest.remove(&label);
        self.dead.remove(&label);
    }
}
