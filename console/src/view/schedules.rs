//! View 7: cron schedules — name, cron, type, enabled, next and last fire (relative to the
//! database clock), and the outcome of the last tick's task — from the agent the console is
//! connected to, re-read about once a second while shown. Columns are as wide as their text
//! (a cron is never cut while others can give way); the last outcome takes the rest.

use leasehold_proto::v1 as pb;
use leasehold_shared::TaskStatus;
use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::Style;
use ratatui::text::Span;
use ratatui::widgets::Cell;

use super::table::{self, Fit, Spec};
use super::text::{ago, untrusted};
use super::theme::Theme;
use super::{empty_text, title};
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
        empty_text(state, "loading…").to_string()
    } else if t.filter.is_empty() {
        "no schedules (add one with `leasehold schedules add`)".to_string()
    } else {
        "no schedule matches the filter".to_string()
    };
    let now = data.now_ms;
    let zone = |s: &pb::Schedule| {
        if s.time_zone.is_empty() {
            "UTC".to_string()
        } else {
            untrusted(&s.time_zone, 40)
        }
    };
    let next = |s: &pb::Schedule| {
        if s.enabled {
            ago(now, s.next_fire_at_ms)
        } else {
            "-".to_string()
        }
    };
    // Every column as wide as its text; the last outcome takes the rest.
    let names: Vec<String> = rows.iter().map(|s| untrusted(&s.name, 64)).collect();
    let crons: Vec<String> = rows.iter().map(|s| untrusted(&s.cron, 64)).collect();
    let zones: Vec<String> = rows.iter().map(|s| zone(s)).collect();
    let types: Vec<String> = rows.iter().map(|s| untrusted(&s.task_type, 64)).collect();
    let nexts: Vec<String> = rows.iter().map(|s| next(s)).collect();
    let lasts: Vec<String> = rows.iter().map(|s| ago(now, s.last_fired_at_ms)).collect();
    let outcomes: Vec<(String, Style)> = rows
        .iter()
        .map(|s| {
            let (text, style) = outcome(s, wide, theme);
            (untrusted(&text, 1000), style)
        })
        .collect();
    let mut header = vec!["NAME", "CRON"];
    let mut fits = vec![
        Fit::of("NAME", &names, 10, 64),
        // A cut cron says nothing: it keeps its width (up to 24) while others give way.
        {
            let cron = Fit::of("CRON", &crons, 8, 64);
            Fit {
                min: cron.natural.min(24),
                ..cron
            }
        },
    ];
    if wide {
        header.push("TZ");
        fits.push(Fit::of("TZ", &zones, 3, 40));
    }
    header.extend(["TYPE", "ON", "NEXT", "LAST", "LAST OUTCOME"]);
    fits.extend([
        Fit::of("TYPE", &types, 6, 64),
        Fit::fixed(3),
        Fit::of("NEXT", &nexts, 4, 16),
        Fit::of("LAST", &lasts, 4, 16),
        Fit::of(
            "LAST OUTCOME",
            outcomes.iter().map(|(o, _)| o.as_str()),
            9,
            1000,
        ),
    ]);
    let flex = fits.len() - 1;
    let widths = table::fit(area.width, &fits, flex);
    let spec = Spec {
        title: title(state, View::Schedules, rows.len(), theme),
        header,
        widths: widths.iter().map(|w| Constraint::Length(*w)).collect(),
        total: rows.len(),
        offset: t.offset,
        selected,
        empty: &empty,
    };
    let range = table::visible(&spec, area);
    let cut = |s: &str, i: usize| untrusted(s, usize::from(widths[i]));
    // Column indexes after the optional time zone.
    let after = usize::from(wide);
    let cells = range
        .clone()
        .map(|i| {
            let s = rows[i];
            let mut cells = vec![Cell::from(cut(&names[i], 0)), Cell::from(cut(&crons[i], 1))];
            if wide {
                cells.push(Cell::from(cut(&zones[i], 2)));
            }
            let (outcome, style) = &outcomes[i];
            cells.extend([
                Cell::from(cut(&types[i], 2 + after)),
                Cell::from(if s.enabled {
                    Span::raw("yes")
                } else {
                    Span::styled("no", theme.warn())
                }),
                Cell::from(nexts[i].clone()),
                Cell::from(lasts[i].clone()),
                Cell::from(Span::styled(cut(outcome, flex), *style)),
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
