//! Rows and selection: each view's rows in display order (the lease order cached between
//! frames while nothing changed), the selection moved over them, the marks kept among them,
//! and the selected row's record.
//!
//! Invariant: marks are always among the rows the current view shows (pruned at every sync).

use std::borrow::Cow;
use std::collections::BTreeSet;

use leasehold_proto::v1 as pb;

use super::{AgentRow, LeaseRef, RowKeys, SortKey, State, Table, View, sort_keys};

/// What a cached lease order answers: the data's version and the view's parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct OrderKey {
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
pub(super) fn table_sort(view: View, table: &Table) -> SortKey {
    let keys = sort_keys(view);
    keys[table.sort % keys.len()]
}

/// The rows of a view for the selection: lease references, or row keys.
#[derive(Debug)]
pub enum Keys<'a> {
    Leases(Cow<'a, [LeaseRef]>),
    Names(Vec<String>),
    /// Task ids in display order (the Tasks view's, borrowed: no string per row).
    Ids(&'a [i64]),
}

impl RowKeys for Keys<'_> {
    fn count(&self) -> usize {
        match self {
            Keys::Leases(l) => l.len(),
            Keys::Names(n) => n.len(),
            Keys::Ids(i) => i.len(),
        }
    }
    fn find(&self, key: &str) -> Option<usize> {
        match self {
            Keys::Leases(l) => {
                let id: i64 = key.parse().ok()?;
                l.iter().position(|r| r.task_id == id)
            }
            Keys::Names(n) => n.iter().position(|k| k == key),
            Keys::Ids(ids) => {
                let id: i64 = key.parse().ok()?;
                ids.iter().position(|i| *i == id)
            }
        }
    }
    fn key_at(&self, index: usize) -> Option<String> {
        match self {
            Keys::Leases(l) => l.get(index).map(|r| r.task_id.to_string()),
            Keys::Names(n) => n.get(index).cloned(),
            Keys::Ids(ids) => ids.get(index).map(|i| i.to_string()),
        }
    }
}

impl State {
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
            // Rows of another tab or filter (a switch whose first page is on its way, or a
            // frozen copy taken on another tab) are not this view's: none to select or act on.
            View::Tasks if data.tasks.answers(self.task_tab, &table.filter) => {
                Keys::Ids(&data.tasks.ids)
            }
            View::Tasks => Keys::Ids(&[]),
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
                Keys::Ids(ids) => ids
                    .iter()
                    .copied()
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
