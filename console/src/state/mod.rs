//! The console's state: what it knows of the cluster ([`Data`]), and where the operator is —
//! the view, each table's selection, sort and filter, the overlays, the marked tasks, the
//! status line and the log of actions sent. No ratatui and no I/O here: the network side feeds
//! [`Event`]s in, the app edits the rest from keys, the view only reads.
//!
//! Time: leases are timed by the database clock, so the state keeps the database's `now` from
//! the last update and advances it by the local clock between updates ([`State::set_local_time`]);
//! a test fixes both.
//!
//! This module keeps [`State`] and its glue (time, request ids); the rest is split by concern:
//! [`views`] (the views and tabs), [`selection`] (each view's rows in display order, the
//! selection and the marks), [`apply`] (events and replies in), [`status`] (the status line,
//! the action log, display settings); the cluster's data in [`data`], [`fleet`], [`schedules`]
//! and [`resources`] (with the breakers the header names in [`breakers`]); the overlays in [`dialog`] and [`prompt`]; one table's cursor in
//! [`table`].

pub mod apply;
pub mod breakers;
pub mod data;
pub mod dialog;
pub mod fleet;
pub mod prompt;
pub mod resources;
pub mod schedules;
pub mod selection;
pub mod status;
pub mod table;
pub mod tasks;
pub mod views;

use std::collections::{BTreeSet, HashMap, VecDeque};

pub use apply::Pending;
pub use breakers::Breakers;
pub use data::{AgentRow, Data, LeaseRef, LeaseRow, Overdue, SortKey, Suspect, Totals, sort_keys};
pub use dialog::{
    Confirm, DETAIL_REFRESH_MS, Detail, Focus, Overlay, Prompt, PromptKind, Targets, Verb,
};
pub use fleet::{Conn, Health, Link, RenewalEvent, RenewalKind};
pub use selection::Keys;
use selection::{OrderKey, table_sort};
pub use status::{LOG_ENTRIES, LogEntry, STATUS_SHOWN_MS, Settings, Status};
pub use table::{RowKeys, Table};
pub use views::View;

/// Everything the console shows.
#[derive(Debug, Clone, Default)]
pub struct State {
    pub live: Data,
    /// A copy shown instead of `live` while frozen (`Z`).
    pub frozen: Option<Box<Data>>,
    pub view: View,
    pub tables: [Table; 10],
    /// The tab the Tasks view shows.
    pub task_tab: tasks::TaskTab,
    /// The shard group the Shards tab shows (by name); the first group when none is chosen.
    pub shard_group: Option<String>,
    /// Bottom first; the last has the keys.
    pub overlays: Vec<Overlay>,
    /// Marked task ids (`space`): always among the rows the current view shows — a task
    /// that leaves the view (finished, requeued, filtered out) loses its mark at the next sync.
    pub marks: BTreeSet<i64>,
    pub status: Option<Status>,
    /// Oldest first; numbered by [`State::log_base`] + position.
    pub log: VecDeque<LogEntry>,
    pub log_base: u64,
    /// Why the console is read-only, when it is.
    pub read_only: Option<String>,
    pub settings: Settings,
    /// Rows a table page shows (set by the app from the last frame).
    pub page_rows: usize,
    pub pending: HashMap<u64, Pending>,
    pub next_request: u64,
    pub quit: bool,
    /// The ids of the agents `leasehold demo` runs in this process (empty outside the demo):
    /// quitting stops them, so `q` asks first while any of them runs.
    pub demo_agents: Vec<String>,
    /// Local time now and of the last database time heard.
    local_ms: i64,
    db_heard: Option<(i64, i64)>,
    /// The last lease order computed, reused by the frame while nothing changed.
    order: Option<(OrderKey, std::sync::Arc<Vec<LeaseRef>>)>,
    /// Local second of the last throughput sample, and each connection's finished total then.
    last_sample: Option<(i64, HashMap<String, u64>)>,
}

impl State {
    pub fn new(settings: Settings) -> Self {
        Self {
            settings,
            page_rows: 10,
            ..Self::default()
        }
    }

    /// What the views show: the frozen copy, else the live data.
    pub fn data(&self) -> &Data {
        self.frozen.as_deref().unwrap_or(&self.live)
    }

    pub fn table(&self) -> &Table {
        &self.tables[self.view.index()]
    }

    pub fn table_mut(&mut self) -> &mut Table {
        &mut self.tables[self.view.index()]
    }

    /// The sort key of the current view.
    pub fn sort_key(&self, view: View) -> SortKey {
        table_sort(view, &self.tables[view.index()])
    }

    /// The overlay that has the keys.
    pub fn top(&self) -> Option<&Overlay> {
        self.overlays.last()
    }

    /// A new request id, remembered as `pending`.
    pub fn request_id(&mut self, pending: Pending) -> u64 {
        self.next_request += 1;
        self.pending.insert(self.next_request, pending);
        self.next_request
    }

    /// Sets the local clock (ms since any fixed origin) and advances the database time from
    /// the last one heard; takes a throughput sample each new second.
    pub fn set_local_time(&mut self, local_ms: i64) {
        self.local_ms = local_ms;
        if let Some((db, at)) = self.db_heard {
            self.live.now_ms = self
                .live
                .now_ms
                .max(db + local_ms.saturating_sub(at).max(0));
        }
        let second = local_ms.div_euclid(1000);
        if self.last_sample.as_ref().is_none_or(|(s, _)| *s != second) {
            let totals: HashMap<String, u64> = self
                .live
                .conns
                .iter()
                .filter_map(|(addr, c)| c.stats.as_ref().map(|s| (addr.clone(), data::finished(s))))
                .collect();
            if let Some((before_s, before)) = &self.last_sample {
                // Only what each connection finished since the last sample: a new or
                // reconnected agent's lifetime counters are not a burst.
                let done: u64 = totals
                    .iter()
                    .map(|(addr, t)| t.saturating_sub(*before.get(addr).unwrap_or(t)))
                    .sum();
                let secs = u64::try_from(second - before_s).unwrap_or(1).max(1);
                if self.live.throughput.len() == data::THROUGHPUT_SAMPLES {
                    self.live.throughput.pop_front();
                }
                self.live.throughput.push_back(done / secs);
            }
            self.last_sample = Some((second, totals));
        }
        if self
            .status
            .as_ref()
            .is_some_and(|s| local_ms - s.at_ms > STATUS_SHOWN_MS)
        {
            self.status = None;
        }
        let now = self.live.now_ms;
        let before = self.live.lease_count();
        for conn in self.live.conns.values_mut() {
            conn.forget_expired(now);
        }
        if self.live.lease_count() != before {
            self.live.version += 1;
        }
    }

    pub fn local_ms(&self) -> i64 {
        self.local_ms
    }

    /// How many of the demo's agents still run (0 outside the demo): those the registry does
    /// not report stopped or down (an agent not listed yet counts as running).
    pub fn demo_agents_running(&self) -> usize {
        let data = &self.live;
        self.demo_agents
            .iter()
            .filter(|id| {
                data.registry
                    .agents
                    .iter()
                    .find(|a| &a.id == *id)
                    .is_none_or(|info| {
                        let link = data.conn_of(info).map(|c| &c.link);
                        data.registry.health(info, link) != Health::Down
                    })
            })
            .count()
    }
}
