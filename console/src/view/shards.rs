//! The Leases view's Shards tab: one shard group's shards — owner, fencing token, state, lease
//! time left, moves in the last hour — then every group with its counts (the one shown
//! marked; `[` / `]` change it) and the shown group's members with the shards each owns.
//! Re-read about once a second while shown.
//!
//! ```text
//! ┌ Leases  Tasks | Locks | [Shards] · orders (8) sort ┐  the shards of the group shown
//! │ SHARD OWNER TOKEN STATE LEFT MOVES/H                │
//! ├ Shard groups (2) · [ ] change group ─────────────────┤  every group, the shown one marked
//! ├ Members of orders (2) ───────────────────────────────┤  agent: shards owned (state)
//! ```

use leasehold_shared::domain::MemberState;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Wrap};

use super::locks::{Holding, holding_cells, holding_columns};
use super::table::{self, Spec};
use super::text::untrusted;
use super::theme::Theme;
use super::{empty_text, title};
use crate::state::{State, View};

/// Most group rows the groups pane shows (it scrolls to keep the shown one in sight).
const GROUP_ROWS: usize = 4;

pub fn draw(frame: &mut Frame<'_>, area: Rect, state: &State, theme: Theme) -> usize {
    let data = state.data();
    let groups = data.group_rows();
    let current = state.current_group_name();
    let res = &data.resources;
    let members = data.shard_members(current);
    let (shards_area, groups_area, members_area) = if groups.is_empty() {
        (area, None, None)
    } else {
        let group_h = u16::try_from(groups.len().min(GROUP_ROWS) + 2).unwrap_or(6);
        let member_h = if members.is_empty() { 2 } else { 3 };
        let [s, g, m] = Layout::vertical([
            Constraint::Min(3),
            Constraint::Length(group_h),
            Constraint::Length(member_h),
        ])
        .areas(area);
        (s, Some(g), Some(m))
    };

    let t = state.table();
    let rows = data.shard_rows(current, &t.filter, state.sort_key(View::Shards), t.reverse);
    let selected = t
        .selected
        .as_deref()
        .and_then(|k| rows.iter().position(|s| s.shard.to_string() == k));
    let wide = area.width >= 124;
    let empty = if let Some(e) = &res.groups.error
        && !res.groups.loaded()
    {
        format!("cannot load the shard groups: {}", untrusted(e, 200))
    } else if !res.groups.loaded() {
        empty_text(state, "loading…").to_string()
    } else if groups.is_empty() {
        "no shard groups (create one with `leasehold shards create GROUP --count N`)".to_string()
    } else if let Some(e) = &res.shards.error {
        format!("cannot load the shards: {}", untrusted(e, 200))
    } else if !res.shards.loaded() {
        empty_text(state, "loading…").to_string()
    } else if t.filter.is_empty() {
        "the group has no shards".to_string()
    } else {
        "no shard matches the filter".to_string()
    };
    let ow: u16 = if wide { 32 } else { 22 };
    let (header, widths) = holding_columns("SHARD", 5, ow, 8, wide);
    let spec = Spec {
        title: title(state, View::Shards, rows.len(), theme),
        header,
        widths,
        total: rows.len(),
        offset: t.offset,
        selected,
        empty: &empty,
    };
    let range = table::visible(&spec, shards_area);
    let now = data.now_ms;
    let cells = rows[range.clone()]
        .iter()
        .map(|s| {
            let holding = Holding {
                owner: &s.owner,
                token: s.token,
                state: s.read_state(),
                lease_until_ms: s.lease_until_ms,
                heartbeat_at_ms: s.heartbeat_at_ms,
                acquired_at_ms: s.acquired_at_ms,
                moves_last_hour: s.moves_last_hour,
            };
            holding_cells(
                Cell::from(s.shard.to_string()),
                &holding,
                ow,
                wide,
                now,
                theme,
            )
        })
        .collect();
    table::draw(frame, shards_area, theme, spec, cells, range);

    if let Some(groups_area) = groups_area {
        draw_groups(frame, groups_area, &groups, current, theme);
    }
    if let Some(members_area) = members_area {
        draw_members(frame, members_area, state, current, theme);
    }
    table::page_rows(shards_area)
}

/// Every group with its counts; the one shown is selected.
fn draw_groups(
    frame: &mut Frame<'_>,
    area: Rect,
    groups: &[&leasehold_proto::v1::ShardGroup],
    current: Option<&str>,
    theme: Theme,
) {
    let selected = groups.iter().position(|g| Some(g.name.as_str()) == current);
    let title = Line::from(vec![
        Span::styled(format!(" Shard groups ({}) ", groups.len()), theme.title()),
        Span::styled("[ ] change group ", theme.dim()),
    ]);
    let spec = Spec {
        title,
        header: vec!["GROUP", "SHARDS", "OWNED", "MEMBERS", "MOVES/H"],
        widths: vec![
            Constraint::Length(32),
            Constraint::Length(6),
            Constraint::Length(6),
            Constraint::Length(7),
            Constraint::Min(7),
        ],
        total: groups.len(),
        offset: 0,
        selected,
        empty: "",
    };
    let range = table::visible(&spec, area);
    let cells = groups[range.clone()]
        .iter()
        .map(|g| {
            // Shards without a live owner are work nobody does: say so.
            let owned = g.owned.to_string();
            let owned = if g.owned < g.shard_count {
                Span::styled(owned, theme.warn())
            } else {
                Span::raw(owned)
            };
            vec![
                Cell::from(untrusted(&g.name, 32)),
                Cell::from(g.shard_count.to_string()),
                Cell::from(owned),
                Cell::from(g.members.to_string()),
                Cell::from(g.moves_last_hour.to_string()),
            ]
        })
        .collect();
    table::draw(frame, area, theme, spec, cells, range);
}

/// The shown group's members: `agent: N shards`, the state when it is not live.
fn draw_members(
    frame: &mut Frame<'_>,
    area: Rect,
    state: &State,
    current: Option<&str>,
    theme: Theme,
) {
    let data = state.data();
    let members = data.shard_members(current);
    let name = current.map_or_else(String::new, |g| untrusted(g, 32));
    let block = Block::new()
        .borders(Borders::TOP)
        .border_set(theme.border())
        .title(Span::styled(
            format!(" Members of {name} ({}) ", members.len()),
            theme.title(),
        ));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let mut spans = vec![Span::raw(" ")];
    if members.is_empty() {
        let text = if data.resources.shards.loaded() {
            format!("none (agents join with --shard-groups {name})")
        } else {
            "loading…".to_string()
        };
        spans.push(Span::styled(text, theme.dim()));
    }
    for (i, m) in members.iter().enumerate() {
        if i > 0 {
            spans.push(Span::styled(" · ", theme.dim()));
        }
        let shards = if m.shards == 1 {
            "1 shard".to_string()
        } else {
            format!("{} shards", m.shards)
        };
        let agent = untrusted(&m.agent, 32);
        let state = m.read_state();
        let (text, style) = match state.known() {
            Some(MemberState::Live) => (
                format!("{agent}: {shards}"),
                ratatui::style::Style::default(),
            ),
            Some(MemberState::Suspect) => (format!("{agent} (suspect): {shards}"), theme.error()),
            Some(MemberState::Gone) | None => (
                format!("{agent} ({}): {shards}", untrusted(&state.word(), 12)),
                theme.warn(),
            ),
        };
        spans.push(Span::styled(text, style));
    }
    frame.render_widget(
        Paragraph::new(Line::from(spans)).wrap(Wrap { trim: false }),
        inner,
    );
}
