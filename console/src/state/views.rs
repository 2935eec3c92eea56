//! The eight views and the Leases view's two further tabs: their order (keys, Tab), titles,
//! `:` commands and which of them list tasks. Plain data: no state, no ratatui.

/// The eight views, in key order, and the two further tabs of the Leases view.
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
    /// Every task in the database, by state (ListTasks, CountTasks).
    Tasks,
    /// The Leases view's Locks tab: named locks (ListLocks).
    Locks,
    /// The Leases view's Shards tab: shard groups and one group's shards (ListShards).
    Shards,
}

impl View {
    /// The numbered views, in key order.
    pub const ALL: [View; 8] = [
        View::Leases,
        View::Slow,
        View::Renewals,
        View::Dead,
        View::Types,
        View::Agents,
        View::Schedules,
        View::Tasks,
    ];

    /// Every view and tab, each with its own table.
    pub const EVERY: [View; 10] = [
        View::Leases,
        View::Slow,
        View::Renewals,
        View::Dead,
        View::Types,
        View::Agents,
        View::Schedules,
        View::Tasks,
        View::Locks,
        View::Shards,
    ];

    /// The tabs of the Leases view, in Tab order.
    pub const LEASE_TABS: [View; 3] = [View::Leases, View::Locks, View::Shards];

    /// The order Tab goes round: the Leases view's tabs, then the other views in key order.
    pub const TAB_ORDER: [View; 10] = [
        View::Leases,
        View::Locks,
        View::Shards,
        View::Slow,
        View::Renewals,
        View::Dead,
        View::Types,
        View::Agents,
        View::Schedules,
        View::Tasks,
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
            View::Tasks => 7,
            View::Locks => 8,
            View::Shards => 9,
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
            View::Tasks => "Tasks",
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
            View::Agents => "Agent",
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
            View::Tasks => "tasks",
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
