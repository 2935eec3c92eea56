//! Rendering: one function per view and overlay, each drawing from `&State` only — no I/O, no
//! state change. [`draw`] lays out header, view, footer and overlays, and returns how many
//! rows a page of the view's table shows (the app uses it for paging).
//!
//! ```text
//! ┌ header: cluster at a glance · tabs · throughput and links ┐
//! │ view (a table; Renewals adds its event pane)              │
//! │ overlays: detail / confirm / help / action log            │
//! └ footer: status line, or the prompt being typed           ┘
//! ```

pub mod agents;
pub mod dead;
pub mod header;
pub mod leases;
pub mod locks;
pub mod overlay;
pub mod schedules;
pub mod shards;
pub mod table;
pub mod text;
pub mod theme;
pub mod types;

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use crate::state::{Overlay, State, View, sort_keys};
use theme::Theme;

/// What drawing found out about the layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drawn {
    /// Rows a page of the current table shows.
    pub page_rows: usize,
}

/// Draws the whole screen.
pub fn draw(frame: &mut Frame<'_>, state: &State) -> Drawn {
    let theme = Theme::new(state.settings);
    let area = frame.area();
    let [head, body, foot] = Layout::vertical([
        Constraint::Length(header::HEIGHT),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(area);
    header::draw(frame, head, state, theme);
    let page_rows = match state.view {
        View::Leases | View::Slow | View::Renewals => leases::draw(frame, body, state, theme),
        View::Dead => dead::draw(frame, body, state, theme),
        View::Types => types::draw(frame, body, state, theme),
        View::Agents => agents::draw(frame, body, state, theme),
        View::Schedules => schedules::draw(frame, body, state, theme),
        View::Locks => locks::draw(frame, body, state, theme),
        View::Shards => shards::draw(frame, body, state, theme),
    };
    footer(frame, foot, state, theme);
    for o in &state.overlays {
        match o {
            Overlay::Detail(d) => overlay::detail(frame, body, d, theme),
            Overlay::Confirm(c) => overlay::confirm(frame, body, c, theme),
            Overlay::Help { scroll } => overlay::help(frame, body, *scroll, theme),
            Overlay::Log { scroll } => overlay::log(frame, body, state, *scroll, theme),
            Overlay::Prompt(p) => overlay::prompt(frame, foot, p, theme),
        }
    }
    if !theme.unicode {
        ascii_only(frame);
    }
    Drawn { page_rows }
}

/// The ASCII mode's last pass: whatever is still not ASCII (a cut mark, a name in another
/// script) becomes `~` for a cut and `?` otherwise, so a terminal without Unicode shows no
/// mojibake.
fn ascii_only(frame: &mut Frame<'_>) {
    let buffer = frame.buffer_mut();
    let area = buffer.area;
    for y in area.top()..area.bottom() {
        for x in area.left()..area.right() {
            let cell = &mut buffer[(x, y)];
            if !cell.symbol().is_ascii() {
                let replacement = if cell.symbol() == "…" { "~" } else { "?" };
                cell.set_symbol(replacement);
            }
        }
    }
}

/// The title of a view's table: name (the Leases view's with its tabs, the current one in
/// brackets), row count, sort, and what went wrong reading it.
pub fn title<'a>(state: &State, view: View, rows: usize, theme: Theme) -> Line<'a> {
    let t = &state.tables[view.index()];
    let key = sort_keys(view)[t.sort % sort_keys(view).len()];
    let arrow = match (t.reverse, theme.unicode) {
        (false, true) => "↑",
        (true, true) => "↓",
        (false, false) => "asc",
        (true, false) => "desc",
    };
    let mut spans = Vec::new();
    if view.is_lease_tab() {
        spans.push(Span::styled(" Leases ", theme.title()));
        for (i, tab) in View::LEASE_TABS.into_iter().enumerate() {
            if i > 0 {
                spans.push(Span::styled(" | ", theme.dim()));
            }
            if tab == view {
                spans.push(Span::styled(
                    format!("[{}]", tab.tab_title()),
                    theme.active_tab(),
                ));
            } else {
                spans.push(Span::raw(tab.tab_title()));
            }
        }
        spans.push(Span::raw(" "));
        if view == View::Shards
            && let Some(group) = state.current_group_name()
        {
            spans.push(Span::styled(
                format!("{} ", text::untrusted(group, 24)),
                theme.title(),
            ));
        }
    } else {
        spans.push(Span::styled(format!(" {} ", view.title()), theme.title()));
    }
    spans.extend([
        Span::raw(format!("({rows}) ")),
        Span::styled(format!("sort: {} {arrow} ", key.word(),), theme.dim()),
    ]);
    if view == View::Dead {
        let dead = &state.data().dead;
        if dead.next_before_id != 0 {
            spans.push(Span::styled("more below ", theme.dim()));
        }
        if dead.loading {
            spans.push(Span::styled("loading… ", theme.dim()));
        }
    }
    let res = &state.data().resources;
    let failed = match view {
        View::Schedules => {
            let schedules = &state.data().schedules;
            schedules
                .error
                .as_ref()
                .filter(|_| !schedules.rows.is_empty())
        }
        View::Locks => res.locks.error.as_ref().filter(|_| res.locks.loaded()),
        // The groups pane and the shards table share the title.
        View::Shards => res
            .groups
            .error
            .as_ref()
            .filter(|_| res.groups.loaded())
            .or_else(|| res.shards.error.as_ref().filter(|_| res.shards.loaded())),
        _ => None,
    };
    if let Some(e) = failed {
        spans.push(Span::styled(
            format!("last read failed: {} ", text::untrusted(e, 60)),
            theme.error(),
        ));
    }
    Line::from(spans)
}

/// The status line, or key hints when there is no status.
fn footer(frame: &mut Frame<'_>, area: ratatui::layout::Rect, state: &State, theme: Theme) {
    let width = usize::from(area.width);
    let line = match &state.status {
        Some(s) => {
            let style = if s.error { theme.error() } else { theme.good() };
            let tag = if s.error { "error: " } else { "" };
            Line::from(Span::styled(
                text::untrusted(&format!("{tag}{}", s.text), width),
                style,
            ))
        }
        None => {
            let hints = match state.view {
                View::Leases => {
                    "tab locks · enter open · x cancel · space mark · / filter · ? help · q quit"
                }
                View::Slow | View::Renewals => {
                    "enter open · x cancel · space mark · / filter · s sort · ? help · q quit"
                }
                View::Locks => {
                    "tab shards · x release (forced) · / filter · s sort · ? help · q quit"
                }
                View::Shards => "[ ] group · shift-tab locks · / filter · s sort · ? help · q quit",
                View::Dead => {
                    "enter open · r requeue · R requeue all matching · / filter · ? help · q quit"
                }
                View::Types => {
                    "+/- limit · = type a limit · p pause/resume · G global · ? help · q quit"
                }
                View::Agents => "+/- local limit · = type a limit · D drain · ? help · q quit",
                View::Schedules => {
                    "e enable · d disable · t trigger · / filter · s sort · ? help · q quit"
                }
            };
            Line::from(Span::styled(text::untrusted(hints, width), theme.dim()))
        }
    };
    frame.render_widget(Paragraph::new(line), area);
}
