//! View 7: cron schedules — name, cron, type, enabled, next and last fire (relative to the
//! database clock), and the outcome of the last tick's task — from the agent the console is
//! connected to, re-read about once a second while shown.

use leasehold_proto::v1 as pb;
use leasehold_shared::TaskStatus;
use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::Style;
use ratatui::text::Span;
use ratatui::widgets::Cell;

use super::table::{self, Spec};
use super::text::{ago, untrusted};
use super::theme::Theme;
use super::title;
use crate::state::{State, View};

pub fn draw(frame: &mut Frame<'_>, area: Rect, state: &State, theme: Theme) -> usize {
    let data = state.data();
    let t = state.table();
    let rows = data.schedule_rows(&t.filter, state.sort_key(View::Schedules), t.reverse);
    let selected = t
        .selected
        .as_deref()
        .and_then(|k| rows.iter().position(|s| s.name == k));
    let wide = area.width >= 120;
    let schedules = &data.schedules;
    let empty = if let Some(e) = &schedules.error {
        format!("cannot load the schedules: {}", untrusted(e, 200))
    } else if !schedules.loaded {
        "loading…".to_string()
    } else if t.filter.is_empty() {
        "no schedules (add one with `leasehold schedules add`)".to_string()
    } else {
        "no schedule matches the filter".to_string()
    };
    let (nw, cw, yw): (u16, u16, u16) = if wide { (24, 20, 20) } else { (14, 14, 11) };
    let mut header = vec!["NAME", "CRON"];
    let mut widths = vec![Constraint::Length(nw), Constraint::Length(cw)];
    if wide {
        header.push("TZ");
        widths.push(Constraint::Length(16));
    }
    header.extend(["TYPE", "ON", "NEXT", "LAST", "LAST OUTCOME"]);
    widths.extend([
        Constraint::Length(yw),
        Constraint::Length(3),
        Constraint::Length(if wide { 10 } else { 9 }),
        Constraint::Length(10),
        Constraint::Min(8),
    ]);
    let spec = Spec {
        title: title(state, View::Schedules, rows.len(), theme),
        header,
        widths,
        total: rows.len(),
        offset: t.offset,
        selected,
        empty: &empty,
    };
    let range = table::visible(&spec, area);
    // Columns before the outcome, their gaps and the selection mark.
    let used: u16 = nw + cw + yw + 3 + 10 + if wide { 16 + 10 + 8 } else { 9 + 7 };
    let outcome_w = usize::from(area.width.saturating_sub(used)).max(8);
    let now = data.now_ms;
    let cells = rows[range.clone()]
        .iter()
        .map(|s| {
            let (outcome, style) = outcome(s, wide, theme);
            let mut cells = vec![
                Cell::from(untrusted(&s.name, nw.into())),
                Cell::from(untrusted(&s.cron, cw.into())),
            ];
            if wide {
                let zone = if s.time_zone.is_empty() {
                    "UTC"
                } else {
                    s.time_zone.as_str()
                };
                cells.push(Cell::from(untrusted(zone, 16)));
            }
            cells.extend([
                Cell::from(untrusted(&s.task_type, yw.into())),
                Cell::from(if s.enabled {
                    Span::raw("yes")
                } else {
                    Span::styled("no", theme.warn())
                }),
                Cell::from(if s.enabled {
                    ago(now, s.next_fire_at_ms)
                } else {
                    "-".to_string()
                }),
                Cell::from(ago(now, s.last_fired_at_ms)),
                Cell::from(Span::styled(untrusted(&outcome, outcome_w), style)),
            ]);
            cells
        })
        .collect();
    table::draw(frame, area, theme, spec, cells, range);
    table::page_rows(area)
}

/// The last firing in words and its style: `error: …` when it could not enqueue, else the
/// status of its task (with the task id when wide), else `-`.
fn outcome(s: &pb::Schedule, wide: bool, theme: Theme) -> (String, Style) {
    if !s.last_error.is_empty() {
        return (format!("error: {}", s.last_error), theme.error());
    }
    let Ok(status) = crate::convert::schedule::opt_status(s.last_task_status) else {
        return ("unknown status".to_string(), theme.warn());
    };
    let Some(status) = status else {
        return ("-".to_string(), theme.dim());
    };
    let style = match status {
        TaskStatus::Succeeded => theme.good(),
        TaskStatus::Dead | TaskStatus::Cancelled => theme.error(),
        TaskStatus::PartiallySucceeded | TaskStatus::RetryWait => theme.warn(),
        _ => Style::default(),
    };
    let text = if wide && s.last_task_id > 0 {
        format!("{} (task {})", status.as_str(), s.last_task_id)
    } else {
        status.as_str().to_string()
    };
    (text, style)
}
