//! The console's state: what it knows of the cluster ([`Data`]), and where the operator is —
//! the view, each table's selection, sort and filter, the overlays, the marked tasks, the
//! status line and the log of actions sent. No ratatui and no I/O here: the network side feeds
//! [`Event`]s in, the app edits the rest from keys, the view only reads.
//!
//! Time: leases are timed by the database clock, so the state keeps the database's `now` from
//! the last update and advances it by the local clock between updates ([`State::set_local_time`]);
//! a test fixes both.

pub mod data;
pub mod dialog;
pub mod fleet;
pub mod prompt;
pub mod resources;
pub mod schedules;
pub mod table;

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap, VecDeque};

use leasehold_proto::v1 as pb;

use crate::event::{ConnEvent, Event, Reply};
pub use data::{AgentRow, Data, LeaseRef, LeaseRow, Overdue, SortKey, Suspect, Totals, sort_keys};
pub use dialog::{
    Confirm, DETAIL_REFRESH_MS, Detail, Focus, Overlay, Prompt, PromptKind, Targets, Verb,
};
pub use fleet::{Conn, Health, Link, RenewalEvent, RenewalKind};
pub use table::{RowKeys, Table};

/// Entries kept in the action log.
pub const LOG_ENTRIES: usize = 200;

/// The seven views, in key order, and the two further tabs of the Leases view.
///
/// The Leases view has three tabs: its own table of task leases (`Leases`, the "Tasks" tab),
/// then `Locks` and `Shards`, the resource leases. A tab is a view of its own for everything
/// keyed by view — its table's selection, sort and filter, its keys, its footer — but it has
/// no number: the header shows the Leases view as the current one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum View {
    #[default]
    Leases,
    Slow,
    Renewals,
    Dead,
    Types,
    Agents,
    Schedules,
    /// The Leases view's Locks tab: named locks (ListLocks).
    Locks,
    /// The Leases view's Shards tab: shard groups and one group's shards (ListShards).
    Shards,
}

impl View {
    /// The numbered views, in key order.
    pub const ALL: [View; 7] = [
        View::Leases,
        View::Slow,
        View::Renewals,
        View::Dead,
        View::Types,
        View::Agents,
        View::Schedules,
    ];

    /// Every view and tab, each with its own table.
    pub const EVERY: [View; 9] = [
        View::Leases,
        View::Slow,
        View::Renewals,
        View::Dead,
        View::Types,
        View::Agents,
        View::Schedules,
        View::Locks,
        View::Shards,
    ];

    /// The tabs of the Leases view, in Tab order.
    pub const LEASE_TABS: [View; 3] = [View::Leases, View::Locks, View::Shards];

    /// The order Tab goes round: the Leases view's tabs, then the other views in key order.
    pub const TAB_ORDER: [View; 9] = [
        View::Leases,
        View::Locks,
        View::Shards,
        View::Slow,
        View::Renewals,
        View::Dead,
        View::Types,
        View::Agents,
        View::Schedules,
    ];

    pub fn index(self) -> usize {
        match self {
            View::Leases => 0,
            View::Slow => 1,
            View::Renewals => 2,
            View::Dead => 3,
            View::Types => 4,
            View::Agents => 5,
            View::Schedules => 6,
            View::Locks => 7,
            View::Shards => 8,
        }
    }

    /// The numbered view a tab belongs to (itself for the others).
    pub fn numbered(self) -> View {
        match self {
            View::Locks | View::Shards => View::Leases,
            other => other,
        }
    }

    /// True for the Leases view's tabs (Tasks, Locks, Shards).
    pub fn is_lease_tab(self) -> bool {
        matches!(self, View::Leases | View::Locks | View::Shards)
    }

    /// The name of its tab in the Leases view's title.
    pub fn tab_title(self) -> &'static str {
        match self {
            View::Leases => "Tasks",
            other => other.title(),
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            View::Leases => "Leases",
            View::Slow => "Slow",
            View::Renewals => "Renewals",
            View::Dead => "Dead letters",
            View::Types => "Types",
            View::Agents => "Agents",
            View::Schedules => "Schedules",
            View::Locks => "Locks",
            View::Shards => "Shards",
        }
    }

    /// The title of its tab when the header is narrow (80 columns).
    pub fn short_title(self) -> &'static str {
        match self {
            View::Renewals => "Renew",
            View::Dead => "Dead",
            View::Schedules => "Sched",
            other => other.title(),
        }
    }

    /// The `:` command that opens it.
    pub fn command(self) -> &'static str {
        match self {
            View::Leases => "leases",
            View::Slow => "slow",
            View::Renewals => "renewals",
            View::Dead => "dlq",
            View::Types => "types",
            View::Agents => "agents",
            View::Schedules => "schedules",
            View::Locks => "locks",
            View::Shards => "shards",
        }
    }

    pub fn from_command(command: &str) -> Option<View> {
        View::EVERY.into_iter().find(|v| v.command() == command)
    }

    /// Rows are task ids (so marks, cancel and requeue apply).
    pub fn has_tasks(self) -> bool {
        !matches!(
            self,
            View::Types | View::Agents | View::Schedules | View::Locks | View::Shards
        )
    }
}

/// Display options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Colours on (off with NO_COLOR or `--no-color`).
    pub color: bool,
    /// Unicode symbols and gauges (off with `--ascii`).
    pub unicode: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            color: true,
            unicode: true,
        }
    }
}

/// The status line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub text: String,
    pub error: bool,
    /// Local time it was set.
    pub at_ms: i64,
}

/// How long the status line shows a message (local ms).
pub const STATUS_SHOWN_MS: i64 = 15_000;

/// One action sent, with its answer once it came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    /// Database time (estimated) when it was sent.
    pub at_ms: i64,
    pub what: String,
    /// `None` while waiting; `Ok(summary)` or `Err(error)`.
    pub result: Option<Result<String, String>>,
}

/// What a request in flight is for, so its reply lands in the right place (a reply to a
/// superseded request is dropped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pending {
    DeadPage { filter: String, append: bool },
    Schedules,
    Locks,
    ShardGroups,
    Shards { group: String },
    Task { id: i64 },
    DryRun,
    Action { log: u64 },
}

/// What a cached lease order answers: the data's version and the view's parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
struct OrderKey {
    frozen: bool,
    version: u64,
    view: View,
    filter: String,
    sort: SortKey,
    reverse: bool,
    /// Only the Renewals view depends on the time (a lease expires into it).
    now_ms: Option<i64>,
}

/// The sort key `table` has in `view`.
fn table_sort(view: View, table: &Table) -> SortKey {
    let keys = sort_keys(view);
    keys[table.sort % keys.len()]
}

/// The rows of a view for the selection: lease references, or row keys.
#[derive(Debug)]
pub enum Keys<'a> {
    Leases(Cow<'a, [LeaseRef]>),
    Names(Vec<String>),
}

impl RowKeys for Keys<'_> {
    fn count(&self) -> usize {
        match self {
            Keys::Leases(l) => l.len(),
            Keys::Names(n) => n.len(),
        }
    }
    fn find(&self, key: &str) -> Option<usize> {
        match self {
            Keys::Leases(l) => {
                let id: i64 = key.parse().ok()?;
                l.iter().position(|r| r.task_id == id)
            }
            Keys::Names(n) => n.iter().position(|k| k == key),
        }
    }
    fn key_at(&self, index: usize) -> Option<String> {
        match self {
            Keys::Leases(l) => l.get(index).map(|r| r.task_id.to_string()),
            Keys::Names(n) => n.get(index).cloned(),
        }
    }
}

/// Everything the console shows.
#[derive(Debug, Clone, Default)]
pub struct State {
    pub live: Data,
    /// A copy shown instead of `live` while frozen (`Z`).
    pub frozen: Option<Box<Data>>,
    pub view: View,
    pub tables: [Table; 9],
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

    pub fn set_status(&mut self, text: impl Into<String>, error: bool) {
        self.status = Some(Status {
            text: text.into(),
            error,
            at_ms: self.local_ms,
        });
    }

    /// A new request id, remembered as `pending`.
    pub fn request_id(&mut self, pending: Pending) -> u64 {
        self.next_request += 1;
        self.pending.insert(self.next_request, pending);
        self.next_request
    }

    /// Adds an action to the log; its log number.
    pub fn log_action(&mut self, what: String) -> u64 {
        if self.log.len() == LOG_ENTRIES {
            self.log.pop_front();
            self.log_base += 1;
        }
        self.log.push_back(LogEntry {
            at_ms: self.live.now_ms,
            what,
            result: None,
        });
        self.log_base + self.log.len() as u64 - 1
    }

    fn log_result(&mut self, log: u64, result: Result<String, String>) {
        if let Some(i) = log.checked_sub(self.log_base)
            && let Some(entry) = self.log.get_mut(i as usize)
        {
            entry.result = Some(result);
        }
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

    fn heard_db_time(&mut self, db_ms: i64) {
        if db_ms > 0 {
            self.db_heard = Some((db_ms, self.local_ms));
            self.live.now_ms = self.live.now_ms.max(db_ms);
        }
    }

    /// Applies what the network side learnt.
    pub fn apply(&mut self, event: Event) {
        self.live.version += 1;
        match event {
            Event::Watch { addr, update } => {
                self.heard_db_time(update.now_ms);
                let local = self.local_ms;
                let conn = self
                    .live
                    .conns
                    .entry(addr.clone())
                    .or_insert_with(|| Conn::new(addr));
                let applied = conn.apply(update, local);
                self.push_renewals(applied.renewals);
            }
            Event::Conn { addr, conn } => {
                let local = self.local_ms;
                let now = self.live.now_ms;
                let c = self
                    .live
                    .conns
                    .entry(addr.clone())
                    .or_insert_with(|| Conn::new(addr));
                let gone = conn == ConnEvent::Gone;
                let mut lost = c.set_link(conn, local);
                for e in &mut lost {
                    e.at_ms = now;
                }
                self.push_renewals(lost);
                if gone {
                    // A stopped agent's row stays in the registry; its connection goes.
                    self.live.conns.retain(|_, c| c.link != Link::Gone);
                }
            }
            Event::Agents(agents) => {
                self.heard_db_time(agents.now_ms);
                self.apply_role(&agents.caller_role);
                self.live.registry = fleet::Registry {
                    now_ms: agents.now_ms,
                    stale_after_ms: agents.stale_after_ms,
                    caller_role: agents.caller_role,
                    leader: agents.leader,
                    agents: agents.agents,
                    received_ms: Some(self.local_ms),
                };
                self.forget_dead_agents();
            }
            Event::Overview(overview) => {
                self.heard_db_time(overview.now_ms);
                self.live.overview = Some(overview);
            }
            Event::Suspects(answer) => {
                self.heard_db_time(answer.now_ms);
                self.live.overdue = data::Overdue::from_wire(answer, &self.live.conns);
            }
            Event::Reply { id, reply } => self.apply_reply(id, reply),
        }
    }

    /// A lost agent the registry now calls down (stopped, or its heartbeat older than the
    /// agents' staleness rule) holds nothing any more: recovery has taken or will take its
    /// leases, so they leave the lease views.
    fn forget_dead_agents(&mut self) {
        let data = &mut self.live;
        let dead: Vec<String> = data
            .registry
            .agents
            .iter()
            .filter_map(|info| {
                let conn = data.conn_of(info)?;
                let lost = matches!(conn.link, Link::Lost { .. } | Link::Closing);
                (lost && data.registry.health(info, Some(&conn.link)) == Health::Down)
                    .then(|| conn.addr.clone())
            })
            .collect();
        for addr in dead {
            if let Some(conn) = data.conns.get_mut(&addr) {
                conn.leases.clear();
            }
        }
    }

    fn apply_role(&mut self, role: &str) {
        if role == "viewer" && self.read_only.is_none() {
            self.read_only = Some("a viewer token: actions are refused".into());
        }
    }

    fn push_renewals(&mut self, events: Vec<RenewalEvent>) {
        for e in events {
            if self.live.renewals.len() == data::RENEWAL_HISTORY {
                self.live.renewals.pop_front();
            }
            self.live.renewals.push_back(e);
        }
    }

    fn apply_reply(&mut self, id: u64, reply: Result<Reply, String>) {
        let Some(pending) = self.pending.remove(&id) else {
            return;
        };
        match (pending, reply) {
            (Pending::DeadPage { filter, append }, reply) => {
                let dead = &mut self.live.dead;
                if dead.filter != filter {
                    return; // superseded by a newer filter
                }
                dead.loading = false;
                match reply {
                    Ok(Reply::Page(page)) => {
                        self.heard_db_time(page.now_ms);
                        let dead = &mut self.live.dead;
                        if append {
                            let known: BTreeSet<i64> = dead.tasks.iter().map(|t| t.id).collect();
                            dead.tasks
                                .extend(page.tasks.into_iter().filter(|t| !known.contains(&t.id)));
                        } else {
                            dead.tasks = page.tasks;
                        }
                        dead.next_before_id = page.next_before_id;
                        dead.error = None;
                        dead.loaded = true;
                    }
                    Ok(_) => {}
                    Err(e) => self.live.dead.error = Some(e),
                }
            }
            (Pending::Schedules, reply) => match reply {
                Ok(Reply::Schedules(list)) => {
                    self.heard_db_time(list.now_ms);
                    self.live.schedules.apply(list);
                }
                Ok(_) => self.live.schedules.loading = false,
                Err(e) => self.live.schedules.failed(e),
            },
            (Pending::Locks, reply) => match reply {
                Ok(Reply::Locks(list)) => {
                    self.heard_db_time(list.now_ms);
                    self.live.resources.locks.apply(list);
                }
                Ok(_) => self.live.resources.locks.loading = false,
                Err(e) => self.live.resources.locks.failed(e),
            },
            (Pending::ShardGroups, reply) => match reply {
                Ok(Reply::ShardGroups(list)) => {
                    self.heard_db_time(list.now_ms);
                    self.live.resources.groups.apply(list);
                }
                Ok(_) => self.live.resources.groups.loading = false,
                Err(e) => self.live.resources.groups.failed(e),
            },
            (Pending::Shards { group }, reply) => {
                let res = &mut self.live.resources;
                if res.group != group {
                    return; // superseded: another group is shown now
                }
                match reply {
                    Ok(Reply::Shards(list)) => {
                        self.heard_db_time(list.now_ms);
                        self.live.resources.shards.apply(list);
                    }
                    Ok(_) => res.shards.loading = false,
                    Err(e) => res.shards.failed(e),
                }
            }
            (Pending::Task { id: task }, reply) => {
                for overlay in self.overlays.iter_mut() {
                    // Only the latest read's answer: an older one may predate an action.
                    if let Overlay::Detail(d) = overlay
                        && d.id == task
                        && d.asked == Some(id)
                    {
                        d.asked = None;
                        match &reply {
                            Ok(Reply::Task(t)) => {
                                d.reply = Some(t.clone());
                                d.error = None;
                            }
                            Ok(_) => {}
                            Err(e) => d.error = Some(e.clone()),
                        }
                    }
                }
                if let Ok(Reply::Task(t)) = reply {
                    self.heard_db_time(t.now_ms);
                }
            }
            (Pending::DryRun, reply) => {
                for overlay in self.overlays.iter_mut() {
                    if let Overlay::Confirm(c) = overlay
                        && c.count.is_none()
                    {
                        match &reply {
                            Ok(Reply::Count(n)) => c.count = Some(*n),
                            Ok(_) => {}
                            Err(e) => c.error = Some(e.clone()),
                        }
                    }
                }
            }
            (Pending::Action { log }, reply) => {
                let result = match reply {
                    Ok(Reply::Action { summary, failed }) => {
                        self.set_status(summary.clone(), failed > 0);
                        if failed > 0 {
                            Err(summary)
                        } else {
                            Ok(summary)
                        }
                    }
                    Ok(Reply::Count(n)) => {
                        let text = format!("{n} tasks");
                        self.set_status(text.clone(), false);
                        Ok(text)
                    }
                    Ok(_) => Ok("done".into()),
                    Err(e) => {
                        self.set_status(e.clone(), true);
                        Err(e)
                    }
                };
                self.log_result(log, result);
            }
        }
    }

    fn order_key(&self, view: View, table: &Table) -> OrderKey {
        let data = self.data();
        OrderKey {
            frozen: self.frozen.is_some(),
            version: data.version,
            view,
            filter: table.filter.clone(),
            sort: table_sort(view, table),
            reverse: table.reverse,
            now_ms: (view == View::Renewals).then_some(data.now_ms),
        }
    }

    /// A lease view's rows in display order: the cached order when nothing changed since it
    /// was computed, else a fresh one.
    pub fn lease_order(&self, view: View) -> Cow<'_, [LeaseRef]> {
        self.lease_order_with(view, &self.tables[view.index()])
    }

    fn lease_order_with(&self, view: View, table: &Table) -> Cow<'_, [LeaseRef]> {
        let key = self.order_key(view, table);
        if let Some((cached, order)) = &self.order
            && *cached == key
        {
            return Cow::Borrowed(order.as_slice());
        }
        Cow::Owned(
            self.data()
                .lease_order(view, &table.filter, key.sort, table.reverse),
        )
    }

    /// Computes and keeps the current lease view's order (call before drawing).
    fn refresh_order(&mut self) {
        let view = self.view;
        if !matches!(view, View::Leases | View::Slow | View::Renewals) {
            return;
        }
        let key = self.order_key(view, &self.tables[view.index()]);
        if self.order.as_ref().is_some_and(|(k, _)| *k == key) {
            return;
        }
        let t = &self.tables[view.index()];
        let order = self
            .data()
            .lease_order(view, &t.filter, key.sort, t.reverse);
        self.order = Some((key, std::sync::Arc::new(order)));
    }

    fn keys_with(&self, view: View, table: &Table) -> Keys<'_> {
        let data = self.data();
        let sort = table_sort(view, table);
        match view {
            View::Leases | View::Slow | View::Renewals => {
                Keys::Leases(self.lease_order_with(view, table))
            }
            View::Dead => Keys::Names(
                data.dead_rows(sort, table.reverse)
                    .iter()
                    .map(|t| t.id.to_string())
                    .collect(),
            ),
            View::Types => Keys::Names(
                data.type_rows(&table.filter, sort, table.reverse)
                    .iter()
                    .map(|t| t.task_type.clone())
                    .collect(),
            ),
            View::Agents => Keys::Names(
                data.agent_rows(&table.filter, sort, table.reverse)
                    .into_iter()
                    .map(|r| r.key)
                    .collect(),
            ),
            View::Schedules => Keys::Names(
                data.schedule_rows(&table.filter, sort, table.reverse)
                    .iter()
                    .map(|s| s.name.clone())
                    .collect(),
            ),
            View::Locks => Keys::Names(
                data.lock_rows(&table.filter, sort, table.reverse)
                    .iter()
                    .map(|l| l.name.clone())
                    .collect(),
            ),
            View::Shards => Keys::Names(
                data.shard_rows(
                    self.current_group_name(),
                    &table.filter,
                    sort,
                    table.reverse,
                )
                .iter()
                .map(|s| s.shard.to_string())
                .collect(),
            ),
        }
    }

    /// The keys of a view's rows, in display order (for tests and the app's bulk marks).
    pub fn row_keys(&self, view: View) -> Vec<String> {
        let keys = self.keys_with(view, &self.tables[view.index()]);
        (0..keys.count()).filter_map(|i| keys.key_at(i)).collect()
    }

    /// Runs `f` on the current view's table with its rows.
    fn with_table(&mut self, f: impl FnOnce(&mut Table, &Keys<'_>)) {
        self.refresh_order();
        let i = self.view.index();
        let mut table = std::mem::take(&mut self.tables[i]);
        {
            let keys = self.keys_with(self.view, &table);
            f(&mut table, &keys);
        }
        self.tables[i] = table;
    }

    /// Re-finds the current view's selection among its rows and drops the marks of tasks
    /// no longer among them (call after events and keys).
    pub fn sync_selection(&mut self) {
        let page = self.page_rows;
        self.with_table(|t, keys| {
            t.sync(keys, page);
        });
        self.prune_marks();
    }

    /// Keeps only the marks of tasks the current view shows.
    fn prune_marks(&mut self) {
        if self.marks.is_empty() {
            return;
        }
        let shown: BTreeSet<i64> = if self.view.has_tasks() {
            match self.keys_with(self.view, self.table()) {
                Keys::Leases(rows) => rows
                    .iter()
                    .map(|r| r.task_id)
                    .filter(|id| self.marks.contains(id))
                    .collect(),
                Keys::Names(names) => names
                    .iter()
                    .filter_map(|k| k.parse::<i64>().ok())
                    .filter(|id| self.marks.contains(id))
                    .collect(),
            }
        } else {
            BTreeSet::new()
        };
        if shown.len() != self.marks.len() {
            self.marks = shown;
        }
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

    /// Moves the selection by `delta` rows.
    pub fn move_selection(&mut self, delta: isize) {
        let page = self.page_rows;
        self.with_table(|t, keys| t.move_by(keys, delta, page));
    }

    /// Selects the first or the last row.
    pub fn jump_selection(&mut self, to_end: bool) {
        let page = self.page_rows;
        self.with_table(|t, keys| t.jump(keys, to_end, page));
    }

    /// Rows in the current view.
    pub fn row_count(&self) -> usize {
        self.keys_with(self.view, self.table()).count()
    }

    /// The selected row's key in the current view.
    pub fn selected(&self) -> Option<&str> {
        self.table().selected.as_deref()
    }

    /// The task ids an action applies to: the marked ones (all shown in this view, see
    /// [`State::marks`]) if any, else the selected row.
    pub fn action_ids(&self) -> Vec<i64> {
        if !self.view.has_tasks() {
            return Vec::new();
        }
        if !self.marks.is_empty() {
            return self.marks.iter().copied().collect();
        }
        self.selected()
            .and_then(|k| k.parse().ok())
            .into_iter()
            .collect()
    }

    /// The selected lease (Leases, Slow, Renewals).
    pub fn selected_lease(&self) -> Option<&pb::Lease> {
        let id: i64 = self.selected()?.parse().ok()?;
        self.data()
            .conns
            .values()
            .filter_map(|c| c.leases.get(&id))
            .map(|h| &h.lease)
            .max_by_key(|l| l.epoch)
    }

    /// The selected dead letter.
    pub fn selected_dead(&self) -> Option<&pb::Task> {
        let id: i64 = self.selected()?.parse().ok()?;
        self.data().dead.tasks.iter().find(|t| t.id == id)
    }

    /// The selected type's overview row.
    pub fn selected_type(&self) -> Option<&pb::TypeSummary> {
        let name = self.selected()?;
        self.data()
            .overview
            .as_ref()?
            .types
            .iter()
            .find(|t| t.task_type == name)
    }

    /// The selected schedule.
    pub fn selected_schedule(&self) -> Option<&pb::Schedule> {
        let name = self.selected()?;
        self.data().schedules.rows.iter().find(|s| s.name == name)
    }

    /// The selected lock (Locks tab).
    pub fn selected_lock(&self) -> Option<&pb::ResourceLease> {
        let name = self.selected()?;
        self.data()
            .resources
            .locks
            .last
            .as_ref()?
            .locks
            .iter()
            .find(|l| l.name == name)
    }

    /// The name of the group the Shards tab shows.
    pub fn current_group_name(&self) -> Option<&str> {
        self.data()
            .current_group(self.shard_group.as_deref())
            .map(|g| g.name.as_str())
    }

    /// The selected agent row.
    pub fn selected_agent(&self) -> Option<AgentRow<'_>> {
        let key = self.selected()?;
        let table = &self.tables[View::Agents.index()];
        self.data()
            .agent_rows(&table.filter, self.sort_key(View::Agents), table.reverse)
            .into_iter()
            .find(|r| r.key == key)
    }
}
