//! The Leases view's Locks tab: every named lock — owner, fencing token, state, lease time
//! left (a gauge, as for task leases), moves in the last hour — from the agent the console is
//! connected to, re-read about once a second while shown. Suspect and expired locks are
//! drawn as failing renewals are elsewhere (red, bold, and named by their state word).

use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::Cell;

use super::table::{self, Spec};
use super::text::{ago, dur, untrusted};
use super::theme::Theme;
use super::{empty_text, title};
use leasehold_proto::wire::Read;
use leasehold_shared::domain::ResourceState;

use crate::state::resources::time_left;
use crate::state::{State, View};

/// The style of a lock's or shard's state word: suspect and expired as failing renewals,
/// released (held on until its lock_at_least_for) as a warning, free dimmed.
/// A state this build does not know is a warning.
pub fn state_style(state: &Read<ResourceState>, theme: Theme) -> Style {
    match state.known() {
        Some(ResourceState::Suspect | ResourceState::Expired) => theme.error(),
        Some(ResourceState::Released) | None => theme.warn(),
        Some(ResourceState::Free) => theme.dim(),
        Some(ResourceState::Held) => theme.good(),
    }
}

/// The lease-time-left cell: a gauge of what is left of the last renewal's span, then the
/// time (`-3s` once past it); `-` without a lease time.
pub fn left_cell<'a>(
    state: &Read<ResourceState>,
    lease_until_ms: i64,
    heartbeat_at_ms: i64,
    now_ms: i64,
    gauge_w: usize,
    theme: Theme,
) -> Line<'a> {
    let Some(left) = time_left(lease_until_ms, now_ms) else {
        return Line::from(Span::styled("-", theme.dim()));
    };
    // What is left of the span since the last renewal; none known: drawn full.
    let fraction = if heartbeat_at_ms > 0 {
        let span_ms = lease_until_ms.saturating_sub(heartbeat_at_ms).max(1);
        left as f64 / span_ms as f64
    } else {
        1.0
    };
    let failing = matches!(
        state.known(),
        Some(ResourceState::Suspect | ResourceState::Expired)
    );
    let style = if left < 0 || failing {
        theme.error()
    } else if fraction < 0.34 {
        theme.warn()
    } else {
        theme.good()
    };
    let text = if left < 0 {
        format!("-{}", dur(left))
    } else {
        dur(left)
    };
    Line::from(vec![
        Span::styled(theme.gauge(fraction, gauge_w), style),
        Span::raw(" "),
        Span::styled(text, if left < 0 { style } else { Style::default() }),
    ])
}

/// What a lock row and a shard row both show after their first column.
pub struct Holding<'a> {
    pub owner: &'a str,
    pub token: i64,
    /// Read from the wire's enum, or an older agent's word.
    pub state: Read<ResourceState>,
    pub lease_until_ms: i64,
    pub heartbeat_at_ms: i64,
    pub acquired_at_ms: i64,
    pub moves_last_hour: u32,
}

/// The header and widths of a holdings table: `first` (a name or shard number, `first_w`
/// wide), then owner, token, state, time left, (wide: renewed, held for) and moves.
pub fn holding_columns(
    first: &'static str,
    first_w: u16,
    owner_w: u16,
    token_w: u16,
    wide: bool,
) -> (Vec<&'static str>, Vec<Constraint>) {
    let mut header = vec![first, "OWNER", "TOKEN", "STATE", "LEFT"];
    let mut widths = vec![
        Constraint::Length(first_w),
        Constraint::Length(owner_w),
        Constraint::Length(token_w),
        Constraint::Length(8),
        Constraint::Length(if wide { 17 } else { 10 }),
    ];
    if wide {
        header.extend(["RENEWED", "HELD FOR"]);
        widths.extend([Constraint::Length(9), Constraint::Length(9)]);
    }
    header.push("MOVES/H");
    widths.push(Constraint::Min(7));
    (header, widths)
}

/// One row of a holdings table (see [`holding_columns`]) after its `first` cell.
pub fn holding_cells<'a>(
    first: Cell<'a>,
    h: &Holding<'_>,
    owner_w: u16,
    wide: bool,
    now: i64,
    theme: Theme,
) -> Vec<Cell<'a>> {
    let owner = if h.owner.is_empty() {
        Span::styled("-", theme.dim())
    } else {
        Span::raw(untrusted(h.owner, owner_w.into()))
    };
    let mut cells = vec![
        first,
        Cell::from(owner),
        Cell::from(h.token.to_string()),
        Cell::from(Span::styled(
            untrusted(&h.state.word(), 8),
            state_style(&h.state, theme),
        )),
        Cell::from(left_cell(
            &h.state,
            h.lease_until_ms,
            h.heartbeat_at_ms,
            now,
            if wide { 10 } else { 3 },
            theme,
        )),
    ];
    if wide {
        let held_for = if h.owner.is_empty() || h.acquired_at_ms <= 0 {
            "-".to_string()
        } else {
            dur(now.saturating_sub(h.acquired_at_ms).max(0))
        };
        cells.extend([
            Cell::from(ago(now, h.heartbeat_at_ms)),
            Cell::from(held_for),
        ]);
    }
    cells.push(Cell::from(h.moves_last_hour.to_string()));
    cells
}

pub fn draw(frame: &mut Frame<'_>, area: Rect, state: &State, theme: Theme) -> usize {
    let data = state.data();
    let t = state.table();
    let rows = data.lock_rows(&t.filter, state.sort_key(View::Locks), t.reverse);
    let selected = t
        .selected
        .as_deref()
        .and_then(|k| rows.iter().position(|l| l.name == k));
    let wide = area.width >= 124;
    let locks = &data.resources.locks;
    let empty = if let Some(e) = &locks.error {
        format!("cannot load the locks: {}", untrusted(e, 200))
    } else if !locks.loaded() {
        empty_text(state, "loading…").to_string()
    } else if t.filter.is_empty() {
        "no locks (a lock is listed once something takes it)".to_string()
    } else {
        "no lock matches the filter".to_string()
    };
    let (nw, ow, kw): (u16, u16, u16) = if wide { (32, 24, 8) } else { (22, 16, 6) };
    let (header, widths) = holding_columns("NAME", nw, ow, kw, wide);
    let spec = Spec {
        title: title(state, View::Locks, rows.len(), theme),
        header,
        widths,
        total: rows.len(),
        offset: t.offset,
        selected,
        empty: &empty,
    };
    let range = table::visible(&spec, area);
    let now = data.now_ms;
    let cells = rows[range.clone()]
        .iter()
        .map(|l| {
            let holding = Holding {
                owner: &l.owner,
                token: l.token,
                state: l.read_state(),
                lease_until_ms: l.lease_until_ms,
                heartbeat_at_ms: l.heartbeat_at_ms,
                acquired_at_ms: l.acquired_at_ms,
                moves_last_hour: l.moves_last_hour,
            };
            let name = Cell::from(untrusted(&l.name, nw.into()));
            holding_cells(name, &holding, ow, wide, now, theme)
        })
        .collect();
    table::draw(frame, area, theme, spec, cells, range);
    table::page_rows(area)
}
