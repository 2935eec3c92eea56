//! Views 1–3: Leases (every live lease, least time left first), Slow (past the slow threshold,
//! longest first) and Renewals (suspect leases — the streams' own, and those the database says
//! are overdue, marked `overdue (db)` — then renewal problems as they happened).

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph};

use super::table::{self, Spec};
use super::text::{ago, clock, dur, untrusted};
use super::theme::Theme;
use super::{empty_text, title};
use crate::convert::task::progress_of_wire;
use crate::convert::watch::SlowRuleView;
use crate::output::text::progress_short;
use crate::state::{LeaseRow, RenewalKind, State, Suspect, View};

/// Draws the Leases, Slow or Renewals view; the rows a page shows.
pub fn draw(frame: &mut Frame<'_>, area: Rect, state: &State, theme: Theme) -> usize {
    let view = state.view;
    let (table_area, events_area) = if view == View::Renewals {
        let events = (area.height / 3).clamp(4, 12);
        let [t, e] = Layout::vertical([Constraint::Min(3), Constraint::Length(events)]).areas(area);
        (t, Some(e))
    } else {
        (area, None)
    };
    let data = state.data();
    let t = state.table();
    let rows = state.lease_order(view);
    let selected_id: Option<i64> = t.selected.as_deref().and_then(|k| k.parse().ok());
    let selected = selected_id.and_then(|id| rows.iter().position(|r| r.task_id == id));
    let wide = area.width >= 124;
    let spec = Spec {
        title: title(state, view, rows.len(), theme),
        header: if wide {
            vec![
                " ",
                "TASK",
                "TYPE",
                "AGENT",
                "EP",
                "PRI",
                "AGE",
                "LEASE LEFT",
                "RENEWED",
                "PROGRESS",
                "ATT",
                "STATE",
            ]
        } else {
            vec![
                " ", "TASK", "TYPE", "AGENT", "EP", "AGE", "LEFT", "RENEW", "PROG", "AT", "STATE",
            ]
        },
        widths: if wide {
            vec![
                Constraint::Length(1),
                Constraint::Length(8),
                Constraint::Length(16),
                Constraint::Length(16),
                Constraint::Length(4),
                Constraint::Length(4),
                Constraint::Length(7),
                Constraint::Length(17),
                Constraint::Length(8),
                Constraint::Length(16),
                Constraint::Length(3),
                Constraint::Min(10),
            ]
        } else {
            vec![
                Constraint::Length(1),
                Constraint::Length(6),
                Constraint::Length(10),
                Constraint::Length(10),
                Constraint::Length(3),
                Constraint::Length(6),
                Constraint::Length(11),
                Constraint::Length(5),
                Constraint::Length(4),
                Constraint::Length(2),
                Constraint::Min(6),
            ]
        },
        total: rows.len(),
        offset: t.offset,
        selected,
        empty: empty_text(
            state,
            match view {
                View::Slow => "no task is running past its slow threshold",
                View::Renewals => "every lease is renewing on time",
                _ => "no live leases",
            },
        ),
    };
    let range = table::visible(&spec, table_area);
    let cells = rows[range.clone()]
        .iter()
        .filter_map(|r| data.lease_row(*r))
        .map(|r| row(&r, state, theme, wide, data.now_ms))
        .collect();
    table::draw(frame, table_area, theme, spec, cells, range);
    if let Some(events_area) = events_area {
        draw_events(frame, events_area, state, theme);
    }
    table::page_rows(table_area)
}

fn row<'a>(
    r: &LeaseRow<'_>,
    state: &State,
    theme: Theme,
    wide: bool,
    now_ms: i64,
) -> Vec<Cell<'a>> {
    let l = r.lease();
    let mark = if state.marks.contains(&l.task_id) {
        theme.mark()
    } else {
        " "
    };
    let span_ms = l.lease_until_ms.saturating_sub(l.heartbeat_at_ms).max(1);
    let fraction = r.left_ms as f64 / span_ms as f64;
    let gauge_w = if wide { 10 } else { 4 };
    let left_text = if r.left_ms < 0 {
        format!("-{}", dur(r.left_ms))
    } else {
        dur(r.left_ms)
    };
    let gauge_style = match &r.suspect {
        Some(_) => theme.error(),
        None if fraction < 0.34 => theme.warn(),
        None => theme.good(),
    };
    let left = Line::from(vec![
        Span::styled(theme.gauge(fraction, gauge_w), gauge_style),
        Span::raw(" "),
        Span::raw(left_text),
    ]);
    // Processed of total, with failures and skips, where there is room; a percentage in the
    // narrow column.
    let progress = match (&l.progress, wide) {
        (Some(p), true) => progress_short(&progress_of_wire(p)),
        (Some(p), false) if p.total > 0 => {
            format!("{}%", p.processed.saturating_mul(100) / p.total)
        }
        (Some(p), false) => p.processed.to_string(),
        (None, _) => "-".into(),
    };
    let mut words: Vec<String> = Vec::new();
    if let Some(s) = &r.suspect {
        words.push(match (s, wide) {
            (
                Suspect::Failing {
                    consecutive,
                    reason,
                },
                true,
            ) => {
                format!("renewal failing x{consecutive}: {}", untrusted(reason, 40))
            }
            (Suspect::Overdue { since_ms }, true) => {
                format!("overdue (db): no renewal for {}", dur(*since_ms))
            }
            // The narrow STATE column has 10 columns at 80; RENEW says how long.
            (Suspect::Overdue { .. }, false) => "db overdue".into(),
            (s, _) => s.word(),
        });
    }
    if l.cancel_requested {
        words.push("cancelling".into());
    }
    if l.slow {
        // Which rule fired: the type's p95 or its fixed threshold (the narrow column has
        // room for the rule's name only).
        words.push(
            match (
                SlowRuleView::from_wire(l.slow_rule, l.slow_limit_ms, l.slow_history_runs),
                wide,
            ) {
                (Some(rule), true) => format!("slow ({})", rule.short()),
                (Some(rule), false) if rule.history_runs.is_some() => "slow p95".into(),
                _ => "slow".into(),
            },
        );
    }
    if r.held.fenced.is_some() {
        words.push("fenced".into());
    }
    let state_style = if r.suspect.is_some() {
        theme.error()
    } else if l.cancel_requested || l.slow {
        theme.warn()
    } else {
        theme.dim()
    };
    let state_text = if words.is_empty() {
        "ok".to_string()
    } else {
        words.join(", ")
    };
    let (tw, aw) = if wide { (16, 16) } else { (10, 10) };
    let mut cells = vec![
        Cell::from(mark),
        Cell::from(l.task_id.to_string()),
        Cell::from(untrusted(&l.task_type, tw)),
        Cell::from(untrusted(r.conn.name(), aw)),
        Cell::from(l.epoch.to_string()),
    ];
    if wide {
        cells.push(Cell::from(l.priority.to_string()));
    }
    // A lease only the database reported has no start or attempt known here.
    let known = l.started_at_ms > 0;
    cells.extend([
        Cell::from(if known { dur(r.age_ms) } else { "-".into() }),
        Cell::from(left),
        Cell::from(if wide {
            ago(now_ms, l.heartbeat_at_ms)
        } else {
            dur(r.since_renewal_ms)
        }),
        Cell::from(untrusted(&progress, if wide { 16 } else { 4 })),
        Cell::from(if known {
            l.attempt.to_string()
        } else {
            "-".into()
        }),
        Cell::from(Span::styled(state_text, state_style)),
    ]);
    cells
}

/// The Renewals view's lower pane: renewal problems as they happened, newest first.
fn draw_events(frame: &mut Frame<'_>, area: Rect, state: &State, theme: Theme) {
    let data = state.data();
    let block = Block::new()
        .borders(Borders::TOP)
        .border_set(theme.border())
        .title(Span::styled(
            format!(
                " Renewal problems as they happened ({}) ",
                data.renewals.len()
            ),
            theme.title(),
        ));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let width = usize::from(inner.width);
    let lines: Vec<Line<'_>> = if data.renewals.is_empty() {
        vec![Line::from(Span::styled(
            "none since the console started",
            theme.dim(),
        ))]
    } else {
        data.renewals
            .iter()
            .rev()
            .take(usize::from(inner.height))
            .map(|e| {
                let what = match &e.kind {
                    RenewalKind::Failed {
                        reason,
                        consecutive,
                    } => format!("renewal failed x{consecutive}: {}", untrusted(reason, 60)),
                    RenewalKind::Fenced { write } => {
                        format!("{} refused: fenced", untrusted(write, 20))
                    }
                    RenewalKind::Lost { outcome } => {
                        format!("lease ended: {}", untrusted(outcome, 20))
                    }
                    RenewalKind::AgentLost { reason } => {
                        format!("agent lost: {}", untrusted(reason, 60))
                    }
                };
                let text = format!(
                    "{} task {} ({}) epoch {} on {}: {what}",
                    clock(e.at_ms),
                    e.task_id,
                    untrusted(&e.task_type, 20),
                    e.epoch,
                    untrusted(&e.agent_id, 24),
                );
                Line::from(untrusted(&text, width))
            })
            .collect()
    };
    frame.render_widget(Paragraph::new(lines), inner);
}
