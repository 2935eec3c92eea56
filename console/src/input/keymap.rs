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
    LimitUp,
    LimitDown,
    LimitTyped,
    GlobalLimit,
    TogglePause,
    Drain,
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
    bind(&[Char('q')], Action::Quit, Scope::Global, "quit"),
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
        "redraw the screen",
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
        "Types: counts, limits, pauses",
    ),
    bind(
        &[Char('6')],
        Action::Show(View::Agents),
        Scope::Global,
        "Agents: state, load, heartbeat",
    ),
    bind(&[Tab], Action::NextView, Scope::Global, "next view"),
    bind(&[BackTab], Action::PrevView, Scope::Global, "previous view"),
    bind(
        &[Char(':')],
        Action::Command,
        Scope::Global,
        "command: :leases :slow :renewals :dlq :types :agents :q",
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
    acts(
        &[Char('G')],
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
    bind(&[Char('e'), End], Action::Bottom, Scope::Tables, "last row"),
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
        "type a limit (none: unlimited)",
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
        for view in View::ALL {
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
    fn every_binding_is_in_the_help() {
        let lines: usize = help_sections().iter().map(|(_, l)| l.len()).sum();
        assert_eq!(lines, KEYMAP.len());
    }
}
