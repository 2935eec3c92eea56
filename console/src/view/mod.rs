//! Rendering: one function per view and overlay, each drawing from `&State` only — no I/O, no
//! state change. [`draw`] lays out header, view, footer and overlays, and returns how many
//! rows a page of the view's table shows (the app uses it for paging).
//!
//! ```text
//! ┌ header: cluster at a glance · tabs · throughput and links ┐
//! │ banner, only when no agent is reachable: why              │
//! │ view (a table; Renewals adds its event pane)              │
//! │ overlays: detail / confirm / help / action log            │
//! └ footer: status line, or the prompt being typed           ┘
//! ```

pub mod agents;
pub mod dead;
pub mod header;
pub mod history;
pub mod leases;
pub mod locks;
pub mod overlay;
pub mod schedules;
pub mod shards;
pub mod table;
pub mod tasks;
pub mod text;
pub mod theme;
pub mod types;

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use crate::state::{Overlay, SortKey, State, View, sort_keys};
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
    // With no agent reachable, every view says so and why, above what it last heard.
    let body = match unreachable_text(state) {
        Some(text) => {
            let lines = if crate::output::text::width(&text) > usize::from(body.width) {
                2
            } else {
                1
            };
            let [banner, rest] =
                Layout::vertical([Constraint::Length(lines), Constraint::Min(3)]).areas(body);
            frame.render_widget(
                Paragraph::new(Line::from(Span::styled(text, theme.error())))
                    .wrap(ratatui::widgets::Wrap { trim: false }),
                banner,
            );
            rest
        }
        None => body,
    };
    let page_rows = match state.view {
        View::Leases | View::Slow | View::Renewals => leases::draw(frame, body, state, theme),
        View::Dead => dead::draw(frame, body, state, theme),
        View::Types => types::draw(frame, body, state, theme),
        View::Agents => agents::draw(frame, body, state, theme),
        View::Schedules => schedules::draw(frame, body, state, theme),
        View::Locks => locks::draw(frame, body, state, theme),
        View::Shards => shards::draw(frame, body, state, theme),
        View::Tasks => tasks::draw(frame, body, state, theme),
    };
    footer(frame, foot, state, theme);
    for o in &state.overlays {
        match o {
            Overlay::Detail(d) => overlay::detail(frame, body, d, theme),
            Overlay::Confirm(c) => overlay::confirm(frame, body, c, theme),
            Overlay::Help { scroll } => overlay::help(frame, body, *scroll, theme),
            Overlay::Log { selected, expanded } => {
                overlay::log(frame, body, state, *selected, *expanded, theme)
            }
            Overlay::Prompt(p) => overlay::prompt(frame, foot, p, theme),
        }
    }
    if !theme.unicode {
        ascii_only(frame);
    }
    Drawn { page_rows }
}

/// The banner of an unreachable fleet: `no agent reachable (retry in 2s): <why>`, naming the
/// agent when the reason does not.
pub fn unreachable_text(state: &State) -> Option<String> {
    let u = crate::state::fleet::unreachable(&state.live.conns)?;
    let retry = (u.retry_at_ms - state.local_ms()).max(0);
    let who = if u.reason.contains(&u.addr) || u.reason.contains(&u.name) {
        String::new()
    } else {
        format!("{}: ", u.name)
    };
    let others = match u.lost {
        0 | 1 => String::new(),
        n => format!(", {n} agents lost"),
    };
    Some(text::untrusted(
        &format!(
            "no agent reachable (retry in {}{others}): {who}{}",
            text::dur(retry),
            u.reason
        ),
        300,
    ))
}

/// A view's text for "nothing to show": `normal` while an agent answers; when none does, that
/// nothing is known — an empty table would claim there is nothing.
pub fn empty_text<'a>(state: &State, normal: &'a str) -> &'a str {
    if crate::state::fleet::unreachable(&state.live.conns).is_some() {
        "unknown: no agent reachable (see above)"
    } else {
        normal
    }
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
        Span::styled(
            format!("sort: {}, {} ", key.word(), order_words(key, t.reverse)),
            theme.dim(),
        ),
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

/// The order a sort key puts rows in, in words (`most first`, `a-z`), so the title names the
/// order the table shows — never an arrow that leaves "ascending what?" to the reader.
///
/// Each key's order without `S` is the one `state` sorts by (`Data::lease_order`,
/// `dead_rows`, `type_rows`, `agent_rows`, `schedule_rows`, `lock_rows`, `shard_rows`);
/// `S` reverses it. The snapshot tests check the words against the rows shown.
pub fn order_words(key: SortKey, reverse: bool) -> &'static str {
    let (natural, reversed) = match key {
        SortKey::TimeLeft => ("least first", "most first"),
        // The earliest start first: the longest running.
        SortKey::Age => ("oldest first", "newest first"),
        SortKey::Type | SortKey::Agent | SortKey::Code | SortKey::Name | SortKey::Owner => {
            ("a-z", "z-a")
        }
        SortKey::Id | SortKey::Shard => ("lowest first", "highest first"),
        SortKey::DiedAt => ("newest first", "oldest first"),
        SortKey::Attempts
        | SortKey::Queued
        | SortKey::Running
        | SortKey::Dead
        | SortKey::Active
        | SortKey::Moves => ("most first", "fewest first"),
        SortKey::Health => ("worst first", "best first"),
        SortKey::NextFire => ("soonest first", "latest first"),
        SortKey::LastFire => ("latest first", "earliest first"),
    };
    if reverse { reversed } else { natural }
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
                    "+/- limit · = type a limit · p pause/resume · C global limit · ? help · q quit"
                }
                View::Agents => "+/- local limit · = type a limit · D drain · ? help · q quit",
                View::Schedules => {
                    "e enable · d disable · t trigger · / filter · s sort · ? help · q quit"
                }
                View::Tasks => {
                    "[ ] state · n run now · x cancel · r requeue · d delete · / filter · ? help"
                }
            };
            Line::from(Span::styled(text::untrusted(hints, width), theme.dim()))
        }
    };
    frame.render_widget(Paragraph::new(line), area);
}
