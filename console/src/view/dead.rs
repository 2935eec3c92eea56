//! View 4: the dead-letter queue, from the database, newest first, keyset-paged (the next page
//! loads when the selection reaches the last row); the filter is pushed to the agent.

use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::text::Span;
use ratatui::widgets::Cell;

use super::table::{self, Spec};
use super::text::{ago, dur, untrusted};
use super::theme::Theme;
use super::title;
use crate::state::{State, View};

pub fn draw(frame: &mut Frame<'_>, area: Rect, state: &State, theme: Theme) -> usize {
    let data = state.data();
    let t = state.table();
    let rows = data.dead_rows(state.sort_key(View::Dead), t.reverse);
    let selected = t
        .selected
        .as_deref()
        .and_then(|k| rows.iter().position(|r| r.id.to_string() == k));
    let wide = area.width >= 120;
    let dead = &data.dead;
    let empty = if let Some(e) = &dead.error {
        format!("cannot load the dead letters: {}", untrusted(e, 200))
    } else if !dead.loaded {
        "loading…".to_string()
    } else {
        "the dead-letter queue is empty".to_string()
    };
    let (tw, cw) = if wide { (20, 22) } else { (12, 14) };
    let spec = Spec {
        title: title(state, View::Dead, rows.len(), theme),
        header: vec![
            " ",
            "TASK",
            "TYPE",
            "CODE",
            "ATT",
            if wide { "DIED" } else { "DIED AGO" },
            "MESSAGE",
        ],
        widths: vec![
            Constraint::Length(1),
            Constraint::Length(if wide { 9 } else { 6 }),
            Constraint::Length(tw),
            Constraint::Length(cw),
            Constraint::Length(5),
            Constraint::Length(if wide { 12 } else { 9 }),
            Constraint::Min(10),
        ],
        total: rows.len(),
        offset: t.offset,
        selected,
        empty: &empty,
    };
    let range = table::visible(&spec, area);
    let msg_w = usize::from(area.width)
        .saturating_sub(if wide { 80 } else { 55 })
        .max(10);
    let cells = rows[range.clone()]
        .iter()
        .map(|task| {
            let mark = if state.marks.contains(&task.id) {
                theme.mark()
            } else {
                " "
            };
            let (code, message) = task
                .last_error
                .as_ref()
                .map(|e| (e.code.as_str(), e.message.as_str()))
                .unwrap_or(("-", ""));
            vec![
                Cell::from(mark),
                Cell::from(task.id.to_string()),
                Cell::from(untrusted(&task.task_type, tw.into())),
                Cell::from(Span::styled(untrusted(code, cw.into()), theme.error())),
                Cell::from(format!("{}/{}", task.attempt, task.max_attempts)),
                Cell::from(if wide {
                    ago(data.now_ms, task.finished_at_ms)
                } else {
                    dur(data.now_ms - task.finished_at_ms)
                }),
                Cell::from(untrusted(message, msg_w)),
            ]
        })
        .collect();
    table::draw(frame, area, theme, spec, cells, range);
    table::page_rows(area)
}
