//! View 4: the dead-letter queue, from the database, newest first, keyset-paged (the next page
//! loads when the selection reaches the last row); the filter is pushed to the agent. Columns
//! are as wide as their text over the loaded rows; the message takes the rest.

use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::text::Span;
use ratatui::widgets::Cell;

use leasehold_proto::v1 as pb;

use super::table::{self, Fit, Spec};
use super::text::{ago, dur, untrusted};
use super::theme::Theme;
use super::{empty_text, title};
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
        empty_text(state, "loading…").to_string()
    } else {
        "the dead-letter queue is empty".to_string()
    };
    let died = |t: &pb::Task| {
        if wide {
            ago(data.now_ms, t.finished_at_ms)
        } else {
            dur(data.now_ms - t.finished_at_ms)
        }
    };
    // Every column as wide as its text (over every loaded row, so widths hold still while
    // scrolling); the message takes the rest.
    let ids: Vec<String> = rows.iter().map(|t| t.id.to_string()).collect();
    let types: Vec<String> = rows.iter().map(|t| untrusted(&t.task_type, 64)).collect();
    let codes: Vec<String> = rows.iter().map(|t| untrusted(error(t).0, 64)).collect();
    let attempts: Vec<String> = rows
        .iter()
        .map(|t| format!("{}/{}", t.attempt, t.max_attempts))
        .collect();
    let ages: Vec<String> = rows.iter().map(|t| died(t)).collect();
    let messages: Vec<String> = rows.iter().map(|t| untrusted(error(t).1, 1000)).collect();
    let died_header = if wide { "DIED" } else { "DIED AGO" };
    let widths = table::fit(
        area.width,
        &[
            Fit::fixed(1),
            Fit::of("TASK", &ids, 4, 20),
            Fit::of("TYPE", &types, 6, 64),
            Fit::of("CODE", &codes, 6, 64),
            Fit::of("ATT", &attempts, 3, 11),
            Fit::of(died_header, &ages, 5, 16),
            Fit::of("MESSAGE", &messages, 10, 1000),
        ],
        6,
    );
    let spec = Spec {
        title: title(state, View::Dead, rows.len(), theme),
        header: vec![" ", "TASK", "TYPE", "CODE", "ATT", died_header, "MESSAGE"],
        widths: widths.iter().map(|w| Constraint::Length(*w)).collect(),
        total: rows.len(),
        offset: t.offset,
        selected,
        empty: &empty,
    };
    let range = table::visible(&spec, area);
    let cut = |s: &str, i: usize| untrusted(s, usize::from(widths[i]));
    let cells = range
        .clone()
        .map(|i| {
            let task = rows[i];
            let mark = if state.marks.contains(&task.id) {
                theme.mark()
            } else {
                " "
            };
            vec![
                Cell::from(mark),
                Cell::from(ids[i].clone()),
                Cell::from(cut(&types[i], 2)),
                Cell::from(Span::styled(cut(&codes[i], 3), theme.error())),
                Cell::from(attempts[i].clone()),
                Cell::from(ages[i].clone()),
                Cell::from(cut(&messages[i], 6)),
            ]
        })
        .collect();
    table::draw(frame, area, theme, spec, cells, range);
    table::page_rows(area)
}

/// A dead letter's error code and message (`-` and nothing when it has none).
fn error(t: &pb::Task) -> (&str, &str) {
    t.last_error
        .as_ref()
        .map_or(("-", ""), |e| (e.code.as_str(), e.message.as_str()))
}
