//! The app: keys become actions, actions edit the [`State`] and queue [`Request`]s for the
//! network side; events from the network edit the state. Pure and synchronous — the terminal
//! loop ([`crate::tui`]) feeds it and sends what it queued — so every key path is tested with
//! no terminal and no agent.
//!
//! Invariants: a destructive action (cancel, requeue, requeue all matching, drain, enable,
//! disable or trigger a schedule, release a lock) is only sent from a confirm dialog; in
//! read-only mode no action that changes anything is sent (the agent refuses it too); the
//! selection is re-found by key after every change, and marks are kept only on rows the view
//! shows; `q` and Esc inside a dialog, pane or prompt only close it, and quitting the demo
//! (which stops its agents) asks first; an open task pane is read again every second, after
//! every action reply and on ctrl-l.

use leasehold_shared::domain::ResourceState;

use crate::event::{Event, LimitScope, Request, RequestKind, TaskFilter};
use crate::input::{Action, Key, action_of};
use crate::state::prompt::Edit;
use crate::state::tasks::{TASKS_PAGE, TASKS_REFRESH_MS};
use crate::state::{
    Confirm, DETAIL_REFRESH_MS, Detail, Focus, Overlay, Pending, Prompt, PromptKind, State,
    Targets, Verb, View, sort_keys,
};

/// Rows asked per dead-letter page.
pub const DEAD_PAGE: u32 = 200;
/// How often the first dead-letter page is reloaded while shown (local ms).
pub const DEAD_REFRESH_MS: i64 = 5_000;
/// How often the schedules are re-read while the Schedules view is shown (local ms).
pub const SCHEDULES_REFRESH_MS: i64 = 1_000;
/// How often the locks, or the shard groups and the shown group's shards, are re-read while
/// the Locks or Shards tab is shown (local ms).
pub const RESOURCES_REFRESH_MS: i64 = 1_000;
/// Largest type or global limit, and largest agent-local limit (the store's and the agent's).
pub use leasehold_shared::domain::policy::{
    MAX_CONCURRENCY_LIMIT as MAX_LIMIT, MAX_LOCAL_CONCURRENCY as MAX_LOCAL_LIMIT,
};

/// The console's logic around its state.
#[derive(Debug, Default)]
pub struct App {
    pub state: State,
    outbox: Vec<Request>,
    /// Local time the dead letters were last asked for.
    dead_asked_ms: Option<i64>,
    /// Local time the schedules were last asked for.
    schedules_asked_ms: Option<i64>,
    /// Local time the locks, or the shard groups and shards, were last asked for.
    resources_asked_ms: Option<i64>,
    /// Local time the Tasks view's page, and its counts, were last asked for.
    tasks_asked_ms: Option<i64>,
    task_counts_asked_ms: Option<i64>,
    /// The screen must be cleared and redrawn whole (ctrl-l).
    pub redraw: bool,
    /// The type whose history was last asked for (empty: every type summed).
    history_for: Option<String>,
}

impl App {
    pub fn new(state: State) -> Self {
        Self {
            state,
            ..Self::default()
        }
    }

    /// The requests queued since the last call.
    pub fn take_requests(&mut self) -> Vec<Request> {
        std::mem::take(&mut self.outbox)
    }

    fn send(&mut self, kind: RequestKind, pending: Pending) {
        let id = self.state.request_id(pending);
        self.outbox.push(Request { id, kind });
    }

    /// Applies a network event.
    pub fn on_event(&mut self, event: Event) {
        let action_reply = matches!(&event, Event::Reply { id, .. }
            if matches!(self.state.pending.get(id), Some(Pending::Action { .. })));
        self.state.apply(event);
        if action_reply && self.state.live.dead.loaded {
            self.load_dead(false);
        }
        if action_reply && self.state.view == View::Schedules {
            self.load_schedules();
        }
        if action_reply && matches!(self.state.view, View::Locks | View::Shards) {
            self.load_resources();
        }
        // What an action did shows in the Tasks view's counts, and in its rows while the
        // operator is at the top (deeper, ctrl-r reads them again: a reload would lose the place).
        if action_reply && self.state.view == View::Tasks {
            self.load_task_counts();
            if self.tasks_at_top() {
                self.load_tasks(false);
            }
        }
        // What an action did shows in the open task pane at once.
        if action_reply {
            self.load_details(true);
        }
        // The first groups just arrived: read the shards of the one shown.
        if self.state.view == View::Shards
            && self.state.frozen.is_none()
            && self.state.current_group_name().is_some()
            && !self.shards_current()
        {
            self.load_shards();
        }
    }

    /// Advances the clock; reloads what is due. Call before each frame.
    pub fn on_tick(&mut self, local_ms: i64) {
        self.state.set_local_time(local_ms);
        self.ask_history();
        if self.state.view == View::Dead && self.state.frozen.is_none() {
            let due = self
                .dead_asked_ms
                .is_none_or(|at| local_ms - at >= DEAD_REFRESH_MS);
            let first_page_only = self.state.live.dead.tasks.len() <= DEAD_PAGE as usize;
            if due && first_page_only && !self.state.live.dead.loading {
                self.load_dead(false);
            }
        }
        if self.state.view == View::Tasks && self.state.frozen.is_none() {
            let due = |at: Option<i64>| at.is_none_or(|at| local_ms - at >= TASKS_REFRESH_MS);
            if due(self.task_counts_asked_ms) && self.state.live.tasks.counts_asked.is_none() {
                self.load_task_counts();
            }
            if due(self.tasks_asked_ms)
                && self.tasks_at_top()
                && self.state.live.tasks.asked.is_none()
            {
                self.load_tasks(false);
            }
        }
        if self.state.view == View::Schedules && self.state.frozen.is_none() {
            let due = self
                .schedules_asked_ms
                .is_none_or(|at| local_ms - at >= SCHEDULES_REFRESH_MS);
            if due {
                self.load_schedules();
            }
        }
        if matches!(self.state.view, View::Locks | View::Shards) && self.state.frozen.is_none() {
            let due = self
                .resources_asked_ms
                .is_none_or(|at| local_ms - at >= RESOURCES_REFRESH_MS);
            if due {
                self.load_resources();
            }
        }
        if self.state.frozen.is_none() {
            self.load_details(false);
        }
        self.state.sync_selection();
    }

    /// Reads every open task pane again: each one due (a second since its last read, none
    /// on its way), or with `now` every one at once — the answer to a read already on its
    /// way is then dropped, since it may predate what `now` is for.
    fn load_details(&mut self, now: bool) {
        let local = self.state.local_ms();
        let mut due = Vec::new();
        for overlay in &self.state.overlays {
            if let Overlay::Detail(d) = overlay
                && (now || (d.asked.is_none() && local - d.asked_ms >= DETAIL_REFRESH_MS))
            {
                due.push(d.id);
            }
        }
        for id in due {
            let request = self.state.request_id(Pending::Task { id });
            self.outbox.push(crate::event::Request {
                id: request,
                kind: RequestKind::Task { id },
            });
            for overlay in self.state.overlays.iter_mut() {
                if let Overlay::Detail(d) = overlay
                    && d.id == id
                {
                    d.asked = Some(request);
                    d.asked_ms = local;
                }
            }
        }
    }

    /// The history pane follows the Types view's cursor: the selected type's history, or every
    /// type summed when no type is selected; asked again only when that changes (the network
    /// side reads it every 30 s by itself).
    fn ask_history(&mut self) {
        let wanted = if self.state.view == View::Types {
            self.state.table().selected.clone().unwrap_or_default()
        } else {
            match &self.history_for {
                Some(t) => t.clone(),
                None => String::new(),
            }
        };
        if self.history_for.as_ref() != Some(&wanted) {
            self.history_for = Some(wanted.clone());
            self.outbox.push(Request {
                id: 0,
                kind: RequestKind::HistoryFor { task_type: wanted },
            });
        }
    }

    /// ctrl-l: the screen redrawn whole, and everything the console reads on demand read
    /// again now — the open task panes, the dead letters, schedules, locks or shards shown,
    /// and the registry and overview.
    fn refresh_all(&mut self) {
        self.redraw = true;
        self.load_details(true);
        match self.state.view {
            View::Dead if !self.state.live.dead.loading => self.load_dead(false),
            View::Tasks => {
                self.load_tasks(false);
                self.load_task_counts();
            }
            View::Schedules => self.load_schedules(),
            View::Locks | View::Shards => self.load_resources(),
            _ => {}
        }
        self.outbox.push(crate::event::Request {
            id: 0,
            kind: RequestKind::Poll,
        });
    }

    /// `q`: quits, unless the console runs inside `leasehold demo` with agents still running,
    /// whose stop it asks about first.
    fn ask_quit(&mut self) {
        let agents = self.state.demo_agents_running();
        if agents == 0 {
            self.state.quit = true;
            return;
        }
        self.state
            .overlays
            .push(Overlay::Confirm(Box::new(Confirm::new(
                Verb::StopDemo,
                Targets::Demo { agents },
            ))));
    }

    /// Asks for what the Locks or Shards tab shows (the locks; or the groups and the shown
    /// group's shards), each unless a read of it is already on its way.
    fn load_resources(&mut self) {
        self.resources_asked_ms = Some(self.state.local_ms());
        match self.state.view {
            View::Locks => {
                let locks = &mut self.state.live.resources.locks;
                if !locks.loading {
                    locks.loading = true;
                    self.send(RequestKind::Locks, Pending::Locks);
                }
            }
            View::Shards => {
                let groups = &mut self.state.live.resources.groups;
                if !groups.loading {
                    groups.loading = true;
                    self.send(RequestKind::ShardGroups, Pending::ShardGroups);
                }
                self.load_shards();
            }
            _ => {}
        }
    }

    /// True when the shards read (or being read) are those of the group shown.
    fn shards_current(&self) -> bool {
        let res = &self.state.live.resources;
        self.state.current_group_name() == Some(res.group.as_str())
            && (res.shards.loading || res.shards.loaded() || res.shards.error.is_some())
    }

    /// Asks for the shards of the group shown (once the groups are known), unless a read of
    /// that group's is on its way.
    fn load_shards(&mut self) {
        let Some(group) = self.state.current_group_name().map(str::to_string) else {
            return;
        };
        let res = &mut self.state.live.resources;
        if res.group == group && res.shards.loading {
            return;
        }
        res.ask_shards(&group);
        self.send(
            RequestKind::Shards {
                group: group.clone(),
            },
            Pending::Shards { group },
        );
    }

    /// Shows the next (`step` 1) or previous (-1) shard group in the Shards tab.
    fn step_group(&mut self, step: isize) {
        let names: Vec<String> = self
            .state
            .data()
            .group_rows()
            .iter()
            .map(|g| g.name.clone())
            .collect();
        if names.is_empty() {
            return self.state.set_status("no shard groups", true);
        }
        let current = self.state.current_group_name();
        let at = names
            .iter()
            .position(|n| Some(n.as_str()) == current)
            .unwrap_or(0);
        let n = names.len() as isize;
        let next = (at as isize + step).rem_euclid(n) as usize;
        self.state.shard_group = names.get(next).cloned();
        // The shard table starts again at its first row.
        let table = &mut self.state.tables[View::Shards.index()];
        table.selected = None;
        table.index = 0;
        table.offset = 0;
        if self.state.frozen.is_none() {
            self.load_shards();
        }
    }

    /// Asks for every schedule, unless a read is already on its way.
    fn load_schedules(&mut self) {
        if self.state.live.schedules.loading {
            return;
        }
        self.state.live.schedules.loading = true;
        self.schedules_asked_ms = Some(self.state.local_ms());
        self.send(RequestKind::Schedules, Pending::Schedules);
    }

    /// Asks for the first dead-letter page (or, with `append`, the next one) under the Dead
    /// view's filter.
    fn load_dead(&mut self, append: bool) {
        let typed = self.state.tables[View::Dead.index()].filter.clone();
        let dead = &mut self.state.live.dead;
        if append && (dead.next_before_id == 0 || dead.loading) {
            return;
        }
        let before_id = if append { dead.next_before_id } else { 0 };
        if dead.filter != typed {
            dead.tasks.clear();
            dead.loaded = false;
            dead.next_before_id = 0;
        }
        dead.filter.clone_from(&typed);
        dead.loading = true;
        self.dead_asked_ms = Some(self.state.local_ms());
        self.send(
            RequestKind::DeadPage {
                filter: TaskFilter::parse(&typed),
                before_id,
                limit: DEAD_PAGE,
            },
            Pending::DeadPage {
                filter: typed,
                append,
            },
        );
    }

    /// Asks for the Tasks view's first page (or, with `append`, the next one) under its tab
    /// and filter; rows of another tab or filter are dropped first.
    fn load_tasks(&mut self, append: bool) {
        let typed = self.state.tables[View::Tasks.index()].filter.clone();
        let tab = self.state.task_tab;
        let tasks = &mut self.state.live.tasks;
        tasks.retarget(tab, &typed);
        if append && (tasks.next_before_id == 0 || tasks.asked.is_some() || !tasks.loaded) {
            return;
        }
        let before_id = if append { tasks.next_before_id } else { 0 };
        self.tasks_asked_ms = Some(self.state.local_ms());
        let id = self.state.request_id(Pending::TasksPage { append });
        self.state.live.tasks.asked = Some(id);
        self.outbox.push(crate::event::Request {
            id,
            kind: RequestKind::TasksPage {
                statuses: tab.statuses(),
                due: tab.due(),
                filter: TaskFilter::parse(&typed),
                before_id,
                limit: TASKS_PAGE,
            },
        });
    }

    /// Asks for the Tasks view's counts of every state under its filter; the answer to any
    /// earlier ask is then dropped (it may predate a change of filter or an action). Counts of
    /// another filter are dropped at once.
    fn load_task_counts(&mut self) {
        let typed = self.state.tables[View::Tasks.index()].filter.clone();
        let tasks = &mut self.state.live.tasks;
        if tasks.counts_filter != typed {
            tasks.counts = None;
            tasks.counts_error = None;
        }
        tasks.counts_filter.clone_from(&typed);
        self.task_counts_asked_ms = Some(self.state.local_ms());
        let id = self.state.request_id(Pending::TaskCounts);
        self.state.live.tasks.counts_asked = Some(id);
        self.outbox.push(crate::event::Request {
            id,
            kind: RequestKind::TaskCounts {
                filter: TaskFilter::parse(&typed),
            },
        });
    }

    /// True when the Tasks view may read its first page again by itself: only its first page
    /// is loaded, the selection is on the first screen and nothing is marked — a reload would
    /// otherwise move rows (and marks) out from under an operator reading further down.
    fn tasks_at_top(&self) -> bool {
        let t = &self.state.tables[View::Tasks.index()];
        self.state.live.tasks.rows.len() <= TASKS_PAGE as usize
            && t.offset == 0
            && t.index < self.state.page_rows.max(1)
            && self.state.marks.is_empty()
    }

    /// Shows another state tab of the Tasks view: from its first row, nothing marked.
    fn step_task_tab(&mut self, step: isize) {
        self.state.task_tab = self.state.task_tab.step(step);
        self.state.marks.clear();
        let t = &mut self.state.tables[View::Tasks.index()];
        t.selected = None;
        t.index = 0;
        t.offset = 0;
        self.load_tasks(false);
    }

    /// The Tasks view loads its next page once the selection is within two pages of the last
    /// row loaded, so paging down never waits at the end.
    fn more_tasks_if_near_end(&mut self) {
        let rows = self.state.row_count();
        let page = self.state.page_rows.max(1);
        if self.state.view == View::Tasks && rows > 0 && self.state.table().index + 2 * page >= rows
        {
            self.load_tasks(true);
        }
    }

    /// A confirm dialog for `verb` on the Tasks view's marked or selected tasks, when the tab
    /// shown allows it (else the status line says why not).
    fn confirm_tab_action(&mut self, verb: Verb) {
        let tab = self.state.task_tab;
        let offered = tab.actions();
        let (allowed, what) = match verb {
            Verb::RunNow => (offered.run_now, "run now (they are due already)"),
            Verb::Cancel => (offered.cancel, "cancelled"),
            Verb::Requeue => (offered.requeue, "requeued"),
            _ => (offered.delete, "deleted"),
        };
        if !allowed {
            let text = format!("{} tasks cannot be {what}", tab.name());
            return self.state.set_status(text, true);
        }
        self.confirm_tasks(verb);
    }

    /// Pasted text: typed into an open prompt, ignored anywhere else (a paste into a view must
    /// never become a stream of action keys).
    pub fn on_paste(&mut self, text: &str) {
        if matches!(self.state.overlays.last(), Some(Overlay::Prompt(_))) {
            for c in text.chars().filter(|c| !c.is_control()) {
                self.prompt_key(Key::Char(c));
            }
            self.state.sync_selection();
        }
    }

    /// Handles one key.
    pub fn on_key(&mut self, key: Key) {
        // ctrl-l works everywhere, under any dialog, pane or prompt.
        if key == Key::Ctrl('l') {
            self.refresh_all();
            self.state.sync_selection();
            return;
        }
        match self.state.overlays.last() {
            Some(Overlay::Prompt(_)) => self.prompt_key(key),
            Some(Overlay::Confirm(_)) => self.confirm_key(key),
            Some(Overlay::Log { .. }) => self.log_key(key),
            Some(Overlay::Help { .. } | Overlay::Detail(_)) => self.pane_key(key),
            None => self.view_key(key),
        }
        self.state.sync_selection();
    }

    fn view_key(&mut self, key: Key) {
        let Some(binding) = action_of(key, self.state.view) else {
            return;
        };
        if binding.acts
            && let Some(why) = &self.state.read_only
        {
            let text = format!("read-only ({why}): cannot {}", binding.help);
            self.state.set_status(text, true);
            return;
        }
        self.act(binding.action);
    }

    /// Does what an action asks (also used by the `:` commands).
    pub fn act(&mut self, action: Action) {
        let page = self.state.page_rows;
        match action {
            Action::Quit => self.ask_quit(),
            Action::Back => {
                if !self.state.marks.is_empty() {
                    self.state.marks.clear();
                } else if !self.state.table().filter.is_empty() {
                    self.state.table_mut().filter.clear();
                    if self.state.view == View::Dead {
                        self.load_dead(false);
                    }
                    if self.state.view == View::Tasks {
                        self.load_tasks(false);
                        self.load_task_counts();
                    }
                }
            }
            Action::Help => self.state.overlays.push(Overlay::Help { scroll: 0 }),
            Action::ActionLog => self.state.overlays.push(Overlay::Log {
                selected: 0,
                expanded: false,
            }),
            Action::Redraw => self.refresh_all(),
            Action::Show(view) => self.show(view),
            Action::NextView | Action::PrevView => {
                // Every view and tab in turn: the Leases view's tabs, then Slow, and so on.
                let order = View::TAB_ORDER;
                let n = order.len();
                let at = order
                    .iter()
                    .position(|v| *v == self.state.view)
                    .unwrap_or(0);
                let next = if action == Action::NextView {
                    (at + 1) % n
                } else {
                    (at + n - 1) % n
                };
                self.show(order[next]);
            }
            Action::NextGroup => self.step_group(1),
            Action::PrevGroup => self.step_group(-1),
            Action::Up | Action::Down | Action::PageUp | Action::PageDown => {
                let delta = match action {
                    Action::Up => -1,
                    Action::Down => 1,
                    Action::PageUp => -(page.max(1) as isize),
                    _ => page.max(1) as isize,
                };
                self.state.move_selection(delta);
                self.more_dead_if_at_end();
                self.more_tasks_if_near_end();
            }
            Action::Top | Action::Bottom => {
                self.state.jump_selection(action == Action::Bottom);
                self.more_dead_if_at_end();
                self.more_tasks_if_near_end();
            }
            Action::Open => {
                if let Some(id) = self.state.selected().and_then(|k| k.parse::<i64>().ok()) {
                    self.open_detail(id);
                }
            }
            Action::Mark => {
                // The row under the cursor now: the selection is a task id, so a re-sort
                // since the last frame moved the cursor with its task, never onto another.
                if let Some(id) = self.state.selected().and_then(|k| k.parse::<i64>().ok()) {
                    if !self.state.marks.remove(&id) {
                        self.state.marks.insert(id);
                    }
                    self.state.move_selection(1);
                }
            }
            Action::MarkAll => {
                let keys = self.state.row_keys(self.state.view);
                self.state
                    .marks
                    .extend(keys.iter().filter_map(|k| k.parse::<i64>().ok()));
            }
            Action::ClearMarks => self.state.marks.clear(),
            Action::Cancel | Action::Requeue if self.state.view == View::Tasks => {
                let verb = if action == Action::Cancel {
                    Verb::Cancel
                } else {
                    Verb::Requeue
                };
                self.confirm_tab_action(verb);
            }
            Action::Cancel => self.confirm_tasks(Verb::Cancel),
            Action::Requeue => self.confirm_tasks(Verb::Requeue),
            Action::RunNow => self.confirm_tab_action(Verb::RunNow),
            Action::Delete => self.confirm_tab_action(Verb::Delete),
            Action::NextState => self.step_task_tab(1),
            Action::PrevState => self.step_task_tab(-1),
            Action::RequeueMatching => self.confirm_requeue_matching(),
            Action::LimitUp => self.step_limit(1),
            Action::LimitDown => self.step_limit(-1),
            // The prompt starts with the limit in force, so Enter alone changes nothing and an
            // emptied prompt means unlimited.
            Action::LimitTyped => {
                if let Some(scope) = self.selected_scope() {
                    let current = match &scope {
                        LimitScope::Agent { .. } => self
                            .state
                            .selected_agent()
                            .and_then(|r| r.info.map(|i| i.local_concurrency)),
                        _ => self.state.selected_type().and_then(|t| t.limit),
                    };
                    let text = current.map(|n| n.to_string()).unwrap_or_default();
                    self.open_prompt(PromptKind::Limit(scope), &text);
                }
            }
            Action::GlobalLimit => {
                let current = self
                    .state
                    .data()
                    .overview
                    .as_ref()
                    .and_then(|o| o.global_limit);
                let text = current.map(|n| n.to_string()).unwrap_or_default();
                self.open_prompt(PromptKind::Limit(LimitScope::Global), &text);
            }
            Action::TogglePause => {
                if let Some(t) = self.state.selected_type() {
                    let (task_type, pause) = (t.task_type.clone(), !t.paused);
                    let verb = if pause { "pause" } else { "resume" };
                    self.send_action(
                        format!("{verb} type {task_type}"),
                        RequestKind::Pause { task_type, pause },
                    );
                } else {
                    self.state.set_status("select a type first", true);
                }
            }
            Action::Drain => match self.state.selected_agent() {
                Some(row) => {
                    let addr = row
                        .conn
                        .map(|c| c.addr.clone())
                        .or_else(|| row.info.map(|i| i.grpc_address.clone()))
                        .filter(|a| !a.is_empty());
                    let agent_id = row.key.clone();
                    match addr {
                        Some(addr) => {
                            self.state
                                .overlays
                                .push(Overlay::Confirm(Box::new(Confirm::new(
                                    Verb::Drain,
                                    Targets::Agent { addr, agent_id },
                                ))))
                        }
                        None => self
                            .state
                            .set_status(format!("agent {agent_id} serves no gRPC"), true),
                    }
                }
                None => self.state.set_status("select an agent first", true),
            },
            Action::EnableSchedule => self.confirm_schedule(Verb::EnableSchedule),
            Action::DisableSchedule => self.confirm_schedule(Verb::DisableSchedule),
            Action::TriggerSchedule => self.confirm_schedule(Verb::TriggerSchedule),
            Action::ReleaseLock => self.confirm_release(),
            Action::Filter => {
                let current = self.state.table().filter.clone();
                self.open_prompt(PromptKind::Filter, &current);
            }
            Action::Command => self.open_prompt(PromptKind::Command, ""),
            Action::SortNext | Action::SortReverse if self.state.view == View::Tasks => {
                self.state.set_status(
                    "the Tasks view lists newest first, as the database pages it",
                    true,
                );
            }
            Action::SortNext => {
                let n = sort_keys(self.state.view).len();
                let t = self.state.table_mut();
                t.sort = (t.sort + 1) % n;
                t.reverse = false;
            }
            Action::SortReverse => {
                let t = self.state.table_mut();
                t.reverse = !t.reverse;
            }
            Action::Freeze => {
                self.state.frozen = match self.state.frozen.take() {
                    Some(_) => None,
                    None => Some(Box::new(self.state.live.clone())),
                };
            }
            Action::Refresh => {
                if self.state.view == View::Dead {
                    self.load_dead(false);
                } else if self.state.view == View::Tasks {
                    self.load_tasks(false);
                    self.load_task_counts();
                } else if self.state.view == View::Schedules {
                    self.load_schedules();
                } else if matches!(self.state.view, View::Locks | View::Shards) {
                    self.load_resources();
                } else {
                    self.state
                        .set_status("live views follow the agents' streams", false);
                }
            }
        }
    }

    fn show(&mut self, view: View) {
        if view != self.state.view {
            self.state.marks.clear();
        }
        self.state.view = view;
        if view == View::Dead && !self.state.live.dead.loading {
            self.load_dead(false);
        }
        if view == View::Tasks {
            let tasks = &self.state.live.tasks;
            // Coming back keeps the pages loaded (and the place in them); ctrl-r reads from
            // the top.
            let stale = !tasks.loaded
                || !tasks.answers(
                    self.state.task_tab,
                    &self.state.tables[View::Tasks.index()].filter,
                );
            if tasks.asked.is_none() && (stale || self.tasks_at_top()) {
                self.load_tasks(false);
            }
            self.load_task_counts();
        }
        if view == View::Schedules {
            self.load_schedules();
        }
        if matches!(view, View::Locks | View::Shards) {
            self.load_resources();
        }
    }

    fn more_dead_if_at_end(&mut self) {
        let rows = self.state.row_count();
        if self.state.view == View::Dead && rows > 0 && self.state.table().index + 1 >= rows {
            self.load_dead(true);
        }
    }

    fn open_detail(&mut self, id: i64) {
        self.state
            .overlays
            .push(Overlay::Detail(Box::new(Detail::new(id))));
        self.load_details(true);
    }

    fn open_prompt(&mut self, kind: PromptKind, text: &str) {
        self.state
            .overlays
            .push(Overlay::Prompt(Prompt::new(kind, text)));
    }

    fn confirm_tasks(&mut self, verb: Verb) {
        let ids = self.state.action_ids();
        if ids.is_empty() {
            self.state.set_status("no task selected", true);
            return;
        }
        self.state
            .overlays
            .push(Overlay::Confirm(Box::new(Confirm::new(
                verb,
                Targets::Tasks(ids),
            ))));
    }

    fn confirm_schedule(&mut self, verb: Verb) {
        let Some(name) = self.state.selected_schedule().map(|s| s.name.clone()) else {
            return self.state.set_status("select a schedule first", true);
        };
        self.state
            .overlays
            .push(Overlay::Confirm(Box::new(Confirm::new(
                verb,
                Targets::Schedule(name),
            ))));
    }

    fn confirm_release(&mut self) {
        let Some(lock) = self.state.selected_lock() else {
            return self.state.set_status("select a lock first", true);
        };
        if lock.read_state().is(ResourceState::Free) {
            let text = format!(
                "lock {} is free: nothing to release",
                crate::output::text::shown(&lock.name, 64)
            );
            return self.state.set_status(text, true);
        }
        let targets = Targets::Lock {
            name: lock.name.clone(),
            owner: lock.owner.clone(),
            token: lock.token,
        };
        self.state
            .overlays
            .push(Overlay::Confirm(Box::new(Confirm::new(
                Verb::ReleaseLock,
                targets,
            ))));
    }

    fn confirm_requeue_matching(&mut self) {
        let typed = self.state.tables[View::Dead.index()].filter.clone();
        let filter = TaskFilter::parse(&typed);
        if filter.text.is_some() {
            self.state.set_status(
                "requeue-all takes type:NAME and code:CODE terms only; words match payloads and \
                 are not a bulk filter — mark the rows instead",
                true,
            );
            return;
        }
        self.state
            .overlays
            .push(Overlay::Confirm(Box::new(Confirm::new(
                Verb::RequeueDead,
                Targets::DeadMatching {
                    filter: filter.clone(),
                    typed,
                },
            ))));
        self.send(
            RequestKind::RequeueDead {
                filter,
                dry_run: true,
            },
            Pending::DryRun,
        );
    }

    /// The limit the selected row of Types or Agents has, and its scope.
    fn selected_scope(&self) -> Option<LimitScope> {
        match self.state.view {
            View::Types => self
                .state
                .selected_type()
                .map(|t| LimitScope::Type(t.task_type.clone())),
            View::Agents => {
                let row = self.state.selected_agent()?;
                let addr = row
                    .conn
                    .map(|c| c.addr.clone())
                    .or_else(|| row.info.map(|i| i.grpc_address.clone()))?;
                Some(LimitScope::Agent {
                    addr,
                    agent_id: row.key,
                })
            }
            _ => None,
        }
    }

    fn step_limit(&mut self, step: i64) {
        let (scope, current) = match self.state.view {
            View::Types => match self.state.selected_type() {
                Some(t) => (LimitScope::Type(t.task_type.clone()), t.limit),
                None => return self.state.set_status("select a type first", true),
            },
            View::Agents => {
                let current = self
                    .state
                    .selected_agent()
                    .and_then(|r| r.info.map(|i| i.local_concurrency));
                match self.selected_scope() {
                    Some(scope) => (scope, current),
                    None => return self.state.set_status("select an agent first", true),
                }
            }
            _ => return,
        };
        let Some(current) = current else {
            return self
                .state
                .set_status("unlimited: type a limit with =", true);
        };
        let floor = if matches!(scope, LimitScope::Agent { .. }) {
            1
        } else {
            0
        };
        let next = (i64::from(current) + step).clamp(floor, i64::from(MAX_LIMIT));
        let next = u32::try_from(next).unwrap_or(current);
        if next == current {
            return self
                .state
                .set_status(format!("the limit is already {current}"), true);
        }
        self.set_limit(scope, Some(next));
    }

    fn set_limit(&mut self, scope: LimitScope, limit: Option<u32>) {
        let what = match &scope {
            LimitScope::Global => "global".to_string(),
            LimitScope::Type(t) => format!("type {t}"),
            LimitScope::Agent { agent_id, .. } => format!("agent {agent_id}"),
        };
        let word = limit.map_or_else(|| "unlimited".to_string(), |n| n.to_string());
        self.send_action(
            format!("set {what} limit to {word}"),
            RequestKind::SetConcurrency { scope, limit },
        );
    }

    fn send_action(&mut self, what: String, kind: RequestKind) {
        self.state.set_status(format!("{what}…"), false);
        let log = self.state.log_action(what);
        self.send(kind, Pending::Action { log });
    }

    fn prompt_key(&mut self, key: Key) {
        let Some(Overlay::Prompt(prompt)) = self.state.overlays.last_mut() else {
            return;
        };
        let edit = match key {
            Key::Esc => {
                self.state.overlays.pop();
                return;
            }
            Key::Enter => {
                if let Some(Overlay::Prompt(p)) = self.state.overlays.pop() {
                    self.commit_prompt(p);
                }
                return;
            }
            Key::Char(c) => Edit::Insert(c),
            Key::Backspace => Edit::Backspace,
            Key::Delete => Edit::Delete,
            Key::Left => Edit::Left,
            Key::Right => Edit::Right,
            Key::Home | Key::Ctrl('a') => Edit::Home,
            Key::End | Key::Ctrl('e') => Edit::End,
            Key::Ctrl('w') => Edit::DeleteWord,
            Key::Ctrl('u') => Edit::DeleteToStart,
            _ => return,
        };
        prompt.input.edit(edit);
        prompt.error = None;
        // Live views filter as the operator types; the database-backed one on Enter.
        if prompt.kind == PromptKind::Filter && !matches!(self.state.view, View::Dead | View::Tasks)
        {
            let text = prompt.input.text();
            self.state.table_mut().filter = text;
        }
    }

    fn commit_prompt(&mut self, prompt: Prompt) {
        let text = prompt.input.text();
        match prompt.kind {
            PromptKind::Filter => {
                self.state.table_mut().filter = text.trim().to_string();
                if self.state.view == View::Dead {
                    self.load_dead(false);
                }
                if self.state.view == View::Tasks {
                    self.load_tasks(false);
                    self.load_task_counts();
                }
            }
            PromptKind::Command => self.command(text.trim()),
            PromptKind::Limit(scope) => match parse_limit(&text, &scope) {
                Ok(limit) => self.set_limit(scope, limit),
                Err(why) => {
                    // The prompt stays open with its text and says why on its own line (it
                    // covers the status line).
                    self.state.overlays.push(Overlay::Prompt(Prompt {
                        kind: PromptKind::Limit(scope),
                        input: prompt.input,
                        error: Some(why),
                    }));
                }
            },
        }
    }

    fn command(&mut self, command: &str) {
        if let Some(view) = View::from_command(command) {
            return self.show(view);
        }
        match command {
            "" => {}
            "q" | "quit" => self.ask_quit(),
            // Forced: no question, even in the demo.
            "q!" | "quit!" => self.state.quit = true,
            "help" => self.act(Action::Help),
            "log" => self.act(Action::ActionLog),
            other => {
                let shown = crate::output::text::shown(other, 40);
                self.state.set_status(
                    format!("unknown command :{shown} (see ? for the commands)"),
                    true,
                );
            }
        }
    }

    fn confirm_key(&mut self, key: Key) {
        let Some(Overlay::Confirm(dialog)) = self.state.overlays.last_mut() else {
            return;
        };
        match key {
            // Only ever closes the dialog: `q` here never quits the console.
            Key::Esc | Key::Char('n') | Key::Char('q') => {
                self.state.overlays.pop();
            }
            Key::Tab | Key::BackTab | Key::Left | Key::Right | Key::Char('h') | Key::Char('l') => {
                dialog.focus = match dialog.focus {
                    Focus::Cancel => Focus::Confirm,
                    Focus::Confirm => Focus::Cancel,
                };
            }
            Key::Char(c) if c.is_ascii_digit() && dialog.needs_typed_count() => {
                dialog.typed.edit(Edit::Insert(c));
            }
            Key::Backspace => dialog.typed.edit(Edit::Backspace),
            Key::Char('y') => self.confirm(),
            // A count typed is the answer, whatever the focus: Enter confirms it when it is
            // right, and keeps the dialog open saying what to type when it is not.
            Key::Enter if dialog.needs_typed_count() && !dialog.typed.is_empty() => self.confirm(),
            Key::Enter => match dialog.focus {
                Focus::Confirm => self.confirm(),
                Focus::Cancel => {
                    self.state.overlays.pop();
                }
            },
            _ => {}
        }
    }

    fn confirm(&mut self) {
        let Some(Overlay::Confirm(dialog)) = self.state.overlays.last() else {
            return;
        };
        if !dialog.can_confirm() {
            let text = match dialog.count {
                None => "still counting…".to_string(),
                Some(0) => "nothing to do: the count is 0".to_string(),
                Some(n) => format!("type {n} to confirm"),
            };
            return self.state.set_status(text, true);
        }
        let Some(Overlay::Confirm(dialog)) = self.state.overlays.pop() else {
            return;
        };
        if let Targets::Demo { .. } = dialog.targets {
            // Nothing to send: quitting the console stops the demo's agents.
            self.state.quit = true;
            return;
        }
        let what = format!("{} {}", dialog.verb.word().to_lowercase(), dialog.what());
        let what = match dialog.first_ids() {
            Some(ids) => format!("{what} ({ids})"),
            None => what,
        };
        let kind = match dialog.targets {
            Targets::Tasks(ids) => match dialog.verb {
                Verb::Cancel => RequestKind::Cancel { ids },
                Verb::RunNow => RequestKind::RunNow { ids },
                Verb::Delete => RequestKind::Delete { ids },
                _ => RequestKind::Requeue { ids },
            },
            Targets::DeadMatching { filter, .. } => RequestKind::RequeueDead {
                filter,
                dry_run: false,
            },
            Targets::Agent { addr, .. } => RequestKind::Drain { addr },
            Targets::Lock { name, owner, token } => RequestKind::ReleaseLock { name, owner, token },
            Targets::Demo { .. } => return,
            Targets::Schedule(name) => match dialog.verb {
                Verb::TriggerSchedule => RequestKind::TriggerSchedule { name },
                verb => RequestKind::SetScheduleEnabled {
                    name,
                    enabled: verb == Verb::EnableSchedule,
                },
            },
        };
        self.state.marks.clear();
        self.send_action(what, kind);
    }

    /// Keys of the action log: j/k (and the page keys) move the selection, Enter expands the
    /// selected entry to its full text and collapses it again, Esc collapses an expanded entry
    /// before it closes the log, `q` closes it.
    fn log_key(&mut self, key: Key) {
        let page = self.state.page_rows.max(1);
        let last = self.state.log.len().saturating_sub(1);
        let Some(Overlay::Log { selected, expanded }) = self.state.overlays.last_mut() else {
            return;
        };
        let moved = match key {
            Key::Char('q') => {
                self.state.overlays.pop();
                return;
            }
            Key::Esc if *expanded => {
                *expanded = false;
                return;
            }
            Key::Esc => {
                self.state.overlays.pop();
                return;
            }
            Key::Enter => {
                *expanded = !*expanded && !self.state.log.is_empty();
                return;
            }
            Key::Char('j') | Key::Down => selected.saturating_add(1),
            Key::Char('k') | Key::Up => selected.saturating_sub(1),
            Key::PageDown | Key::Char(' ') | Key::Ctrl('f') => selected.saturating_add(page),
            Key::PageUp | Key::Ctrl('b') => selected.saturating_sub(page),
            Key::Char('g') | Key::Home => 0,
            Key::Char('G') | Key::End => last,
            _ => return,
        };
        let moved = moved.min(last);
        if moved != *selected {
            // One entry open at a time: the one selected.
            *selected = moved;
            *expanded = false;
        }
    }

    fn pane_key(&mut self, key: Key) {
        let page = u16::try_from(self.state.page_rows.max(1)).unwrap_or(u16::MAX);
        let (is_help, detail_id, detail_status) = match self.state.overlays.last() {
            Some(Overlay::Help { .. }) => (true, None, None),
            Some(Overlay::Detail(d)) => (
                false,
                Some(d.id),
                d.reply
                    .as_ref()
                    .and_then(|r| r.task.as_ref())
                    .and_then(|t| crate::convert::status(t.status).ok()),
            ),
            _ => (false, None, None),
        };
        match key {
            // `q` closes the pane like Esc; it never quits the console from here.
            Key::Esc | Key::Char('q') => {
                self.state.overlays.pop();
                return;
            }
            Key::Char('?') if is_help => {
                self.state.overlays.pop();
                return;
            }
            Key::Char('x') | Key::Char('r') => {
                if let Some(id) = detail_id {
                    if let Some(why) = &self.state.read_only {
                        let text = format!("read-only ({why})");
                        return self.state.set_status(text, true);
                    }
                    let verb = if key == Key::Char('x') {
                        Verb::Cancel
                    } else {
                        Verb::Requeue
                    };
                    // Only what the pane offers for the status it shows (before it loaded,
                    // the agent decides).
                    if let Some(status) = detail_status {
                        let offered = crate::convert::task::offered_actions(status);
                        let (allowed, what) = match verb {
                            Verb::Cancel => (offered.cancel, "cancelled"),
                            _ => (offered.requeue, "requeued"),
                        };
                        if !allowed {
                            let text =
                                format!("task {id} is {}: it cannot be {what}", status.as_str());
                            return self.state.set_status(text, true);
                        }
                    }
                    self.state
                        .overlays
                        .push(Overlay::Confirm(Box::new(Confirm::new(
                            verb,
                            Targets::Tasks(vec![id]),
                        ))));
                }
                return;
            }
            _ => {}
        }
        let scroll = match self.state.overlays.last_mut() {
            Some(Overlay::Help { scroll }) => scroll,
            Some(Overlay::Detail(d)) => &mut d.scroll,
            _ => return,
        };
        match key {
            Key::Char('j') | Key::Down => *scroll = scroll.saturating_add(1),
            Key::Char('k') | Key::Up => *scroll = scroll.saturating_sub(1),
            Key::PageDown | Key::Char(' ') => *scroll = scroll.saturating_add(page),
            Key::PageUp => *scroll = scroll.saturating_sub(page),
            Key::Char('g') | Key::Home => *scroll = 0,
            _ => {}
        }
    }
}

/// A typed limit: a number in range, or nothing, `none` or `unlimited` for no limit (not for
/// an agent's own limit, which is always a number).
pub fn parse_limit(text: &str, scope: &LimitScope) -> Result<Option<u32>, String> {
    let text = text.trim();
    let local = matches!(scope, LimitScope::Agent { .. });
    if matches!(text, "" | "none" | "unlimited" | "off") {
        return if local {
            Err(format!(
                "an agent's local limit is a number from 1 to {MAX_LOCAL_LIMIT}"
            ))
        } else {
            Ok(None)
        };
    }
    let max = if local { MAX_LOCAL_LIMIT } else { MAX_LIMIT };
    let min = u32::from(local);
    match text.parse::<u32>() {
        Ok(n) if (min..=max).contains(&n) => Ok(Some(n)),
        _ => Err(format!(
            "{:?} is not a limit: give a number from {min} to {max}{}",
            crate::output::text::shown(text, 20),
            if local { "" } else { ", or unlimited" }
        )),
    }
}
