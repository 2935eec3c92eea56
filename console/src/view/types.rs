//! View 5: task types — queued, scheduled, retrying, running against the limit, dead, paused,
//! and the last minute's rate — from the agent's cached overview.

use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::text::Span;
use ratatui::widgets::Cell;

use super::table::{self, Spec};
use super::text::untrusted;
use super::theme::Theme;
use super::{empty_text, title};
use crate::convert::overview::TypeState;
use crate::state::{State, View};

pub fn draw(frame: &mut Frame<'_>, area: Rect, state: &State, theme: Theme) -> usize {
    let data = state.data();
    let t = state.table();
    let rows = data.type_rows(&t.filter, state.sort_key(View::Types), t.reverse);
    let selected = t
        .selected
        .as_deref()
        .and_then(|k| rows.iter().position(|r| r.task_type == k));
    let wide = area.width >= 120;
    let tw: u16 = if wide { 32 } else { 16 };
    let spec = Spec {
        title: title(state, View::Types, rows.len(), theme),
        header: vec![
            "TYPE", "QUEUED", "LATER", "RETRY", "RUNNING", "DEAD", "DONE/M", "STATE",
        ],
        widths: vec![
            Constraint::Length(tw),
            Constraint::Length(7),
            Constraint::Length(6),
            Constraint::Length(6),
            Constraint::Length(11),
            Constraint::Length(6),
            Constraint::Length(6),
            Constraint::Min(6),
        ],
        total: rows.len(),
        offset: t.offset,
        selected,
        empty: if data.overview.is_some() {
            "no task types yet"
        } else {
            empty_text(state, "loading…")
        },
    };
    let range = table::visible(&spec, area);
    let cells = rows[range.clone()]
        .iter()
        .map(|ty| {
            let limit = ty.limit.map_or_else(|| "-".to_string(), |n| n.to_string());
            let running = format!("{}/{limit}", ty.running);
            let state = TypeState::of(ty);
            let style = match state {
                TypeState::Paused | TypeState::AtLimit => theme.warn(),
                TypeState::Active => theme.dim(),
            };
            let word = state.word();
            vec![
                Cell::from(untrusted(&ty.task_type, tw.into())),
                Cell::from(ty.queued.to_string()),
                Cell::from(ty.scheduled.to_string()),
                Cell::from(ty.retrying.to_string()),
                Cell::from(running),
                Cell::from(if ty.dead > 0 {
                    Span::styled(ty.dead.to_string(), theme.error())
                } else {
                    Span::raw("0")
                }),
                Cell::from(ty.finished_last_minute.to_string()),
                Cell::from(Span::styled(word, style)),
            ]
        })
        .collect();
    table::draw(frame, area, theme, spec, cells, range);
    table::page_rows(area)
}
