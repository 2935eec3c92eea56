//! View 8: every task in the database by state. A tab bar names each state with its live
//! count (the current one in brackets), then the current state's tasks, newest first,
//! keyset-paged as the selection nears the last row loaded; the filter is pushed to the agent.
//!
//! Cost: only the rows on screen are built. Their text was cut and made inert when their page
//! arrived, and the columns' widths were kept then ([`crate::state::tasks::Widths`]), so a frame
//! with 100,000 rows loaded costs what a frame with one page costs.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph};

use super::empty_text;
use super::table::{self, Fit, Spec};
use super::text::{dur, stale_counts, untrusted};
use super::theme::Theme;
use crate::output::text::width;
use crate::state::tasks::{TaskTab, count_text};
use crate::state::{State, View};

/// Below this width the tab bar uses short state names.
const WIDE: u16 = 100;

pub fn draw(frame: &mut Frame<'_>, area: Rect, state: &State, theme: Theme) -> usize {
    let [bar, body] = Layout::vertical([Constraint::Length(1), Constraint::Min(2)]).areas(area);
    frame.render_widget(Paragraph::new(tab_bar(state, bar.width, theme)), bar);
    draw_table(frame, body, state, theme)
}

/// The short name of a state, for a narrow tab bar.
fn short_name(tab: TaskTab) -> &'static str {
    match tab {
        TaskTab::Retrying => "retry",
        TaskTab::Running => "run",
        TaskTab::Succeeded => "success",
        TaskTab::Cancelled => "cancel",
        other => other.name(),
    }
}

/// ` queued 12.3k  later 4  …`, the shown state in brackets, counts not known as `?`.
fn tab_bar(state: &State, area_width: u16, theme: Theme) -> Line<'static> {
    let tasks = &state.data().tasks;
    let counts = tasks
        .counts
        .as_ref()
        .filter(|_| tasks.counts_filter == state.tables[View::Tasks.index()].filter);
    let mut spans = Vec::new();
    for tab in TaskTab::ALL {
        let name = if area_width >= WIDE {
            tab.name()
        } else {
            short_name(tab)
        };
        let label = format!("{name} {}", count_text(tab, counts));
        if tab == state.task_tab {
            spans.push(Span::styled(format!("[{label}]"), theme.active_tab()));
        } else {
            spans.push(Span::raw(format!(" {label} ")));
        }
    }
    if let Some(e) = &tasks.counts_error {
        spans.push(Span::styled(
            format!(" counts: {}", untrusted(e, 60)),
            theme.error(),
        ));
    }
    Line::from(spans)
}

/// The table's title: the state, the rows loaded, the order, paging, and what went wrong.
fn title(state: &State, rows: usize, theme: Theme) -> Line<'static> {
    let tasks = &state.data().tasks;
    let mut spans = vec![
        Span::styled(format!(" Tasks: {} ", state.task_tab.name()), theme.title()),
        Span::raw(format!("({rows}) ")),
        Span::styled("newest first ", theme.dim()),
    ];
    if tasks.next_before_id != 0 {
        spans.push(Span::styled("more below ", theme.dim()));
    }
    if tasks.asked.is_some() {
        spans.push(Span::styled("loading… ", theme.dim()));
    }
    if let Some(old) = tasks
        .counts
        .as_ref()
        .filter(|_| tasks.counts_filter == state.tables[View::Tasks.index()].filter)
        .and_then(|c| stale_counts(state.data().now_ms, c.now_ms))
    {
        spans.push(Span::styled(old, theme.warn()));
    }
    if let Some(e) = tasks.error.as_ref().filter(|_| !tasks.rows.is_empty()) {
        spans.push(Span::styled(
            format!("last read failed: {} ", untrusted(e, 60)),
            theme.error(),
        ));
    }
    Line::from(spans)
}

/// A column as wide as its widest cell (kept as rows arrived) or its header.
fn fit(header: &str, widest: usize, min: u16, max: u16) -> Fit {
    let natural = u16::try_from(widest.max(width(header)))
        .unwrap_or(u16::MAX)
        .clamp(min, max.max(min));
    Fit { natural, min }
}

fn draw_table(frame: &mut Frame<'_>, area: Rect, state: &State, theme: Theme) -> usize {
    let data = state.data();
    let tasks = &data.tasks;
    let tab = state.task_tab;
    let t = &state.tables[View::Tasks.index()];
    // Rows of another tab or filter are not this tab's (a switch whose first page is on its
    // way): show none rather than the wrong ones.
    let current = tasks.answers(tab, &t.filter);
    let rows: &[crate::state::tasks::TaskRow] = if current { &tasks.rows } else { &[] };
    let selected = t
        .selected
        .as_deref()
        .and_then(|k| k.parse::<i64>().ok())
        .and_then(|id| {
            if current {
                tasks.ids.iter().position(|i| *i == id)
            } else {
                None
            }
        });
    let empty = if let Some(e) = tasks.error.as_ref().filter(|_| current) {
        format!("cannot load the tasks: {}", untrusted(e, 200))
    } else if !current || !tasks.loaded {
        empty_text(state, "loading…").to_string()
    } else if t.filter.is_empty() {
        format!("no {} tasks", tab.name())
    } else {
        format!("no {} tasks match the filter", tab.name())
    };
    let w = tasks.widths;
    let when = tab.when_header();
    let widths = table::fit(
        area.width,
        &[
            Fit::fixed(1),
            fit("TASK", w.id, 4, 20),
            fit("TYPE", w.task_type, 6, 64),
            fit("PRI", w.priority, 3, 6),
            fit("ATT", w.attempts, 3, 11),
            fit(when, 6, 5, 12),
            fit("CODE", w.code, 4, 40),
            fit("MESSAGE", w.message, 10, 300),
        ],
        7,
    );
    let spec = Spec {
        title: title(state, rows.len(), theme),
        header: vec![" ", "TASK", "TYPE", "PRI", "ATT", when, "CODE", "MESSAGE"],
        widths: widths.iter().map(|w| Constraint::Length(*w)).collect(),
        total: rows.len(),
        offset: t.offset,
        selected,
        empty: &empty,
    };
    let range = table::visible(&spec, area);
    let cut = |s: &str, i: usize| untrusted(s, usize::from(widths[i]));
    let now = data.now_ms;
    let cells = range
        .clone()
        .map(|i| {
            let row = &rows[i];
            let mark = if state.marks.contains(&row.id) {
                theme.mark()
            } else {
                " "
            };
            let when = match tab {
                _ if row.at_ms <= 0 => "-".to_string(),
                TaskTab::Later | TaskTab::Retrying if row.at_ms <= now => "due".to_string(),
                TaskTab::Later | TaskTab::Retrying => dur(row.at_ms - now),
                _ => dur(now - row.at_ms),
            };
            let code_style = if row.code == "-" {
                theme.dim()
            } else {
                theme.error()
            };
            vec![
                Cell::from(mark),
                Cell::from(row.id_text.clone()),
                Cell::from(cut(&row.task_type, 2)),
                Cell::from(row.priority.clone()),
                Cell::from(row.attempts.clone()),
                Cell::from(when),
                Cell::from(Span::styled(cut(&row.code, 6), code_style)),
                Cell::from(cut(&row.message, 7)),
            ]
        })
        .collect();
    table::draw(frame, area, theme, spec, cells, range);
    table::page_rows(area)
}
