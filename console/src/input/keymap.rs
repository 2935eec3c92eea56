//! Keys as data: one table says which key does what where, and the help screen (`?`) is
//! generated from it, so the two can never disagree.

use crate::state::View;

/// A key, as the console knows it (mapped from crossterm by [`super::key_of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Key {
    Char(char),
    Ctrl(char),
    Enter,
    Esc,
    Up,
    Down,
    Left,
    Right,
    PageUp,
    PageDown,
    Home,
    End,
    Tab,
    BackTab,
    Backspace,
    Delete,
}

impl Key {
    /// How the help screen writes it.
    pub fn label(self) -> String {
        match self {
            Key::Char(' ') => "space".into(),
            Key::Char(c) => c.to_string(),
            Key::Ctrl(c) => format!("ctrl-{c}"),
            Key::Enter => "enter".into(),
            Key::Esc => "esc".into(),
            Key::Up => "↑".into(),
            Key::Down => "↓".into(),
            Key::Left => "←".into(),
            Key::Right => "→".into(),
            Key::PageUp => "pgup".into(),
            Key::PageDown => "pgdn".into(),
            Key::Home => "home".into(),
            Key::End => "end".into(),
            Key::Tab => "tab".into(),
            Key::BackTab => "shift-tab".into(),
            Key::Backspace => "backspace".into(),
            Key::Delete => "del".into(),
        }
    }
}

/// What a key asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Quit,
    Back,
    Help,
    Redraw,
    Show(View),
    NextView,
    PrevView,
    /// The Shards tab's next or previous shard group.
    NextGroup,
    PrevGroup,
    Up,
    Down,
    PageUp,
    PageDown,
    Top,
    Bottom,
    Open,
    Mark,
    MarkAll,
    ClearMarks,
    Cancel,
    Requeue,
    RequeueMatching,
    /// The Tasks view: make the task(s) due now.
    RunNow,
    /// The Tasks view: delete the task(s).
    Delete,
    /// The Tasks view's next or previous state tab.
    NextState,
    PrevState,
    LimitUp,
    LimitDown,
    LimitTyped,
    GlobalLimit,
    TogglePause,
    Drain,
    EnableSchedule,
    DisableSchedule,
    TriggerSchedule,
    ReleaseLock,
    Filter,
    Command,
    SortNext,
    SortReverse,
    Freeze,
    ActionLog,
    Refresh,
}

/// Where a binding applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Everywhere (no dialog open).
    Global,
    /// In any table view.
    Tables,
    /// In views whose rows are tasks.
    Tasks,
    /// In these views only.
    Views(&'static [View]),
}

impl Scope {
    pub fn applies(self, view: View) -> bool {
        match self {
            Scope::Global | Scope::Tables => true,
            Scope::Tasks => view.has_tasks(),
            Scope::Views(views) => views.contains(&view),
        }
    }

    /// The help screen's heading for it.
    pub fn heading(self) -> &'static str {
        match self {
            Scope::Global => "Everywhere",
            Scope::Tables => "Tables",
            Scope::Tasks => "Task views (Leases, Slow, Renewals, Dead letters)",
            Scope::Views(v) if v == LIVE => "Live lease views (Leases, Slow, Renewals)",
            Scope::Views(v) if v == [View::Dead] => "Dead letters",
            Scope::Views(v) if v == [View::Types] => "Types",
            Scope::Views(v) if v == [View::Agents] => "Agents",
            Scope::Views(v) if v == LIMITS => "Types and Agents",
            Scope::Views(v) if v == [View::Schedules] => "Schedules",
            // Every table but Schedules, whose `e` enables: still "Tables" in the help.
            Scope::Views(v) if v == NOT_SCHEDULES => "Tables",
            Scope::Views(v) if v == [View::Locks] => "Leases: Locks",
            Scope::Views(v) if v == [View::Shards] => "Leases: Shards",
            Scope::Views(v) if v == [View::Tasks] => "Tasks",
            Scope::Views(_) => "Some views",
        }
    }
}

/// A binding: keys, what they do, where, and the help line.
#[derive(Debug, Clone, Copy)]
pub struct Binding {
    pub keys: &'static [Key],
    pub action: Action,
    pub scope: Scope,
    pub help: &'static str,
    /// Changes something (refused in read-only mode).
    pub acts: bool,
}

const LIVE: &[View] = &[View::Leases, View::Slow, View::Renewals];
const LIMITS: &[View] = &[View::Types, View::Agents];
const NOT_SCHEDULES: &[View] = &[
    View::Leases,
    View::Slow,
    View::Renewals,
    View::Dead,
    View::Types,
    View::Agents,
    View::Tasks,
    View::Locks,
    View::Shards,
];

const fn bind(keys: &'static [Key], action: Action, scope: Scope, help: &'static str) -> Binding {
    Binding {
        keys,
        action,
        scope,
        help,
        acts: false,
    }
}

const fn acts(keys: &'static [Key], action: Action, scope: Scope, help: &'static str) -> Binding {
    Binding {
        keys,
        action,
        scope,
        help,
        acts: true,
    }
}

use Key::*;

/// Every binding, in help order.
pub const KEYMAP: &[Binding] = &[
    bind(
        &[Char('q')],
        Action::Quit,
        Scope::Global,
        "quit (the demo asks first); in a dialog or pane: close it",
    ),
    bind(
        &[Esc],
        Action::Back,
        Scope::Global,
        "back out (close a pane or dialog, clear marks)",
    ),
    bind(&[Char('?')], Action::Help, Scope::Global, "this help"),
    bind(
        &[Ctrl('l')],
        Action::Redraw,
        Scope::Global,
        "redraw, and read everything again now",
    ),
    bind(
        &[Char('1')],
        Action::Show(View::Leases),
        Scope::Global,
        "Leases: every live lease, least time left first",
    ),
    bind(
        &[Char('2')],
        Action::Show(View::Slow),
        Scope::Global,
        "Slow: running past the slow threshold, longest first",
    ),
    bind(
        &[Char('3')],
        Action::Show(View::Renewals),
        Scope::Global,
        "Renewals: failing renewals and suspect leases",
    ),
    bind(
        &[Char('4')],
        Action::Show(View::Dead),
        Scope::Global,
        "Dead letters (from the database)",
    ),
    bind(
        &[Char('5')],
        Action::Show(View::Types),
        Scope::Global,
        "Types: counts, limits, pauses; the selected type's last hour",
    ),
    bind(
        &[Char('6')],
        Action::Show(View::Agents),
        Scope::Global,
        "Agents: state, load, heartbeat",
    ),
    bind(
        &[Char('7')],
        Action::Show(View::Schedules),
        Scope::Global,
        "Schedules: cron, next and last fire, last outcome",
    ),
    bind(
        &[Char('8')],
        Action::Show(View::Tasks),
        Scope::Global,
        "Tasks: every task by state (from the database)",
    ),
    bind(
        &[Tab],
        Action::NextView,
        Scope::Global,
        "next view; in Leases its tabs first (Tasks, Locks, Shards)",
    ),
    bind(
        &[BackTab],
        Action::PrevView,
        Scope::Global,
        "previous view or tab",
    ),
    bind(
        &[Char(':')],
        Action::Command,
        Scope::Global,
        "command: a view (:leases … :dlq … :locks), :help, :q",
    ),
    bind(
        &[Char('Z')],
        Action::Freeze,
        Scope::Global,
        "freeze / unfreeze the screen",
    ),
    bind(
        &[Char('@')],
        Action::ActionLog,
        Scope::Global,
        "the log of actions sent",
    ),
    // `C`, not `G`: vim's `G` is the last row.
    acts(
        &[Char('C')],
        Action::GlobalLimit,
        Scope::Global,
        "set the global concurrency limit",
    ),
    bind(&[Char('j'), Down], Action::Down, Scope::Tables, "next row"),
    bind(&[Char('k'), Up], Action::Up, Scope::Tables, "previous row"),
    bind(
        &[PageDown, Ctrl('f')],
        Action::PageDown,
        Scope::Tables,
        "next page",
    ),
    bind(
        &[PageUp, Ctrl('b')],
        Action::PageUp,
        Scope::Tables,
        "previous page",
    ),
    bind(&[Char('g'), Home], Action::Top, Scope::Tables, "first row"),
    bind(
        &[Char('G'), Char('e'), End],
        Action::Bottom,
        Scope::Views(NOT_SCHEDULES),
        "last row (Schedules: G and end only)",
    ),
    bind(
        &[Char('G'), End],
        Action::Bottom,
        Scope::Views(&[View::Schedules]),
        "last row",
    ),
    bind(
        &[Char('/')],
        Action::Filter,
        Scope::Tables,
        "filter (Dead letters: type:NAME code:CODE words)",
    ),
    bind(
        &[Char('s')],
        Action::SortNext,
        Scope::Tables,
        "next sort key",
    ),
    bind(
        &[Char('S')],
        Action::SortReverse,
        Scope::Tables,
        "reverse the sort",
    ),
    bind(
        &[Ctrl('r')],
        Action::Refresh,
        Scope::Tables,
        "reload from the database",
    ),
    bind(
        &[Enter],
        Action::Open,
        Scope::Tasks,
        "open the task: payload, attempts, why not running",
    ),
    bind(
        &[Char(' ')],
        Action::Mark,
        Scope::Tasks,
        "mark / unmark the row (actions apply to the marked)",
    ),
    bind(
        &[Char('a')],
        Action::MarkAll,
        Scope::Tasks,
        "mark every row shown",
    ),
    bind(
        &[Char('u')],
        Action::ClearMarks,
        Scope::Tasks,
        "clear the marks",
    ),
    acts(
        &[Char('x')],
        Action::Cancel,
        Scope::Views(LIVE),
        "cancel the task(s)",
    ),
    acts(
        &[Char('r')],
        Action::Requeue,
        Scope::Views(&[View::Dead]),
        "requeue the task(s)",
    ),
    acts(
        &[Char('R')],
        Action::RequeueMatching,
        Scope::Views(&[View::Dead]),
        "requeue all matching the filter",
    ),
    acts(
        &[Char('+')],
        Action::LimitUp,
        Scope::Views(LIMITS),
        "raise the limit by one",
    ),
    acts(
        &[Char('-')],
        Action::LimitDown,
        Scope::Views(LIMITS),
        "lower the limit by one",
    ),
    acts(
        &[Char('=')],
        Action::LimitTyped,
        Scope::Views(LIMITS),
        "type a limit (empty or none: unlimited)",
    ),
    acts(
        &[Char('p')],
        Action::TogglePause,
        Scope::Views(&[View::Types]),
        "pause / resume the type",
    ),
    acts(
        &[Char('D')],
        Action::Drain,
        Scope::Views(&[View::Agents]),
        "drain the agent",
    ),
    acts(
        &[Char('x')],
        Action::ReleaseLock,
        Scope::Views(&[View::Locks]),
        "release the lock (forced: frees it from its holder)",
    ),
    bind(
        &[Char(']'), Right],
        Action::NextState,
        Scope::Views(&[View::Tasks]),
        "next state: queued, later, retrying, running, succeeded, cancelled, dead",
    ),
    bind(
        &[Char('['), Left],
        Action::PrevState,
        Scope::Views(&[View::Tasks]),
        "previous state",
    ),
    acts(
        &[Char('n')],
        Action::RunNow,
        Scope::Views(&[View::Tasks]),
        "run now: make the task(s) due (later, retrying)",
    ),
    acts(
        &[Char('x')],
        Action::Cancel,
        Scope::Views(&[View::Tasks]),
        "cancel the task(s) (waiting: at once; running: the holder stops)",
    ),
    acts(
        &[Char('r')],
        Action::Requeue,
        Scope::Views(&[View::Tasks]),
        "requeue the task(s) (succeeded, cancelled, dead)",
    ),
    acts(
        &[Char('d')],
        Action::Delete,
        Scope::Views(&[View::Tasks]),
        "delete the task(s) with their attempts (any not running)",
    ),
    bind(
        &[Char(']')],
        Action::NextGroup,
        Scope::Views(&[View::Shards]),
        "next shard group",
    ),
    bind(
        &[Char('[')],
        Action::PrevGroup,
        Scope::Views(&[View::Shards]),
        "previous shard group",
    ),
    acts(
        &[Char('e')],
        Action::EnableSchedule,
        Scope::Views(&[View::Schedules]),
        "enable the schedule (fires from its next tick)",
    ),
    acts(
        &[Char('d')],
        Action::DisableSchedule,
        Scope::Views(&[View::Schedules]),
        "disable the schedule",
    ),
    acts(
        &[Char('t')],
        Action::TriggerSchedule,
        Scope::Views(&[View::Schedules]),
        "trigger the schedule: enqueue its task once, now",
    ),
];

/// The action of `key` in `view`, when a binding has it.
pub fn action_of(key: Key, view: View) -> Option<&'static Binding> {
    KEYMAP
        .iter()
        .find(|b| b.keys.contains(&key) && b.scope.applies(view))
}

/// The help screen's lines: (heading, [(keys, help)]), headings in first-use order.
pub fn help_sections() -> Vec<(&'static str, Vec<(String, &'static str)>)> {
    let mut sections: Vec<(&'static str, Vec<(String, &'static str)>)> = Vec::new();
    for b in KEYMAP {
        let keys = b
            .keys
            .iter()
            .map(|k| k.label())
            .collect::<Vec<_>>()
            .join(" ");
        let heading = b.scope.heading();
        match sections.iter_mut().find(|(h, _)| *h == heading) {
            Some((_, lines)) => lines.push((keys, b.help)),
            None => sections.push((heading, vec![(keys, b.help)])),
        }
    }
    sections
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_key_means_two_things_in_one_view() {
        for view in View::EVERY {
            let mut seen = std::collections::HashMap::new();
            for b in KEYMAP.iter().filter(|b| b.scope.applies(view)) {
                for k in b.keys {
                    let other = seen.insert(*k, b.action);
                    assert!(
                        other.is_none(),
                        "{k:?} in {view:?} is both {other:?} and {:?}",
                        b.action
                    );
                }
            }
        }
    }

    #[test]
    fn schedules_take_e_d_t_and_other_tables_keep_e_for_the_last_row() {
        let e = Char('e');
        assert_eq!(
            action_of(e, View::Schedules).map(|b| b.action),
            Some(Action::EnableSchedule)
        );
        assert_eq!(
            action_of(e, View::Leases).map(|b| b.action),
            Some(Action::Bottom)
        );
        assert_eq!(
            action_of(End, View::Schedules).map(|b| b.action),
            Some(Action::Bottom)
        );
        assert_eq!(
            action_of(Char('d'), View::Schedules).map(|b| b.action),
            Some(Action::DisableSchedule)
        );
        assert_eq!(
            action_of(Char('t'), View::Schedules).map(|b| b.action),
            Some(Action::TriggerSchedule)
        );
        assert!(action_of(Char('t'), View::Leases).is_none());
        for key in ['e', 'd', 't'] {
            assert!(action_of(Char(key), View::Schedules).is_some_and(|b| b.acts));
        }
        assert_eq!(
            action_of(Char('7'), View::Leases).map(|b| b.action),
            Some(Action::Show(View::Schedules))
        );
    }

    #[test]
    fn the_lease_tabs_keys() {
        for view in View::EVERY {
            assert_eq!(
                action_of(Tab, view).map(|b| b.action),
                Some(Action::NextView)
            );
        }
        // x releases a lock (an action), cancels a task in Leases, and is nothing in Shards.
        assert!(
            action_of(Char('x'), View::Locks)
                .is_some_and(|b| b.action == Action::ReleaseLock && b.acts)
        );
        assert_eq!(
            action_of(Char('x'), View::Leases).map(|b| b.action),
            Some(Action::Cancel)
        );
        assert!(action_of(Char('x'), View::Shards).is_none());
        assert_eq!(
            action_of(Char(']'), View::Shards).map(|b| b.action),
            Some(Action::NextGroup)
        );
        // The tabs are read-only but for x: nothing else that acts applies there.
        for view in [View::Locks, View::Shards] {
            let acting: Vec<Action> = KEYMAP
                .iter()
                .filter(|b| b.acts && b.scope.applies(view))
                .map(|b| b.action)
                .collect();
            let expected: &[Action] = if view == View::Locks {
                &[Action::GlobalLimit, Action::ReleaseLock]
            } else {
                &[Action::GlobalLimit]
            };
            assert_eq!(acting, expected, "{view:?}");
        }
        for key in [Enter, Char(' '), Char('a')] {
            assert!(action_of(key, View::Locks).is_none(), "{key:?}");
        }
    }

    #[test]
    fn g_is_the_last_row_as_in_vim_and_c_sets_the_global_limit() {
        for view in View::EVERY {
            assert_eq!(
                action_of(Char('G'), view).map(|b| b.action),
                Some(Action::Bottom),
                "{view:?}"
            );
            assert_eq!(
                action_of(Char('g'), view).map(|b| b.action),
                Some(Action::Top),
                "{view:?}"
            );
            assert!(
                action_of(Char('C'), view)
                    .is_some_and(|b| b.action == Action::GlobalLimit && b.acts),
                "{view:?}"
            );
        }
    }

    #[test]
    fn every_binding_is_in_the_help() {
        let lines: usize = help_sections().iter().map(|(_, l)| l.len()).sum();
        assert_eq!(lines, KEYMAP.len());
    }
}
