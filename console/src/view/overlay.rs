//! What is drawn over a view: the task detail pane, the confirm dialog, help, the action log
//! and the prompt line.

use ratatui::Frame;
use ratatui::layout::{Constraint, Flex, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Wrap};

use super::text::{ago, clock, datetime, untrusted, wrap};
use super::theme::Theme;
use leasehold_proto::v1 as pb;

use crate::convert::task::{offered_actions, progress_of};
use crate::event::LimitScope;
use crate::input::help_sections;
use crate::output::text::progress;
use crate::state::{Confirm, Detail, Focus, Prompt, PromptKind, State};

/// Longest payload value shown, in characters (the rest is cut with `…`).
pub const PAYLOAD_VALUE_CHARS: usize = 120;
/// Most payload lines shown.
pub const PAYLOAD_LINES: usize = 200;

fn centered(area: Rect, width_pct: u16, height: u16) -> Rect {
    let [row] = Layout::vertical([Constraint::Length(height.min(area.height))])
        .flex(Flex::Center)
        .areas(area);
    let [cell] = Layout::horizontal([Constraint::Percentage(width_pct)])
        .flex(Flex::Center)
        .areas(row);
    cell
}

/// The rectangle of a full pane (detail, help, log) over the view: all but a line above and
/// below; the whole width on a narrow terminal, else 96% of it. The rows it spans are cleared
/// from edge to edge, so no cut-off table text shows beside it.
fn full_pane(frame: &mut Frame<'_>, area: Rect) -> Rect {
    let height = area.height.saturating_sub(2);
    let rect = if area.width < 100 {
        centered(area, 100, height)
    } else {
        centered(area, 96, height)
    };
    let band = Rect {
        x: area.x,
        width: area.width,
        ..rect
    };
    frame.render_widget(Clear, band);
    rect
}

fn pane<'a>(title: String, theme: Theme) -> Block<'a> {
    Block::new()
        .borders(Borders::ALL)
        .border_set(theme.border())
        .title(Span::styled(title, theme.title()))
}

/// The task detail pane.
pub fn detail(frame: &mut Frame<'_>, area: Rect, d: &Detail, theme: Theme) {
    let rect = full_pane(frame, area);
    let block = pane(format!(" Task {} ", d.id), theme)
        .title_bottom(Span::styled(detail_keys(d), theme.dim()));
    let width = usize::from(rect.width.saturating_sub(2));
    let mut lines: Vec<Line<'_>> = Vec::new();
    match (&d.reply, &d.error) {
        (_, Some(e)) => lines.push(Line::from(Span::styled(
            format!("cannot load the task: {}", untrusted(e, 300)),
            theme.error(),
        ))),
        (None, None) => lines.push(Line::from(Span::styled("loading…", theme.dim()))),
        (Some(r), None) => {
            let now = r.now_ms;
            if let Some(t) = &r.task {
                let status = crate::convert::status(t.status)
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_else(|_| "unknown".into());
                lines.push(Line::from(vec![
                    Span::styled("status ", theme.dim()),
                    Span::styled(status, theme.title()),
                    Span::styled("  type ", theme.dim()),
                    Span::raw(untrusted(&t.task_type, 64)),
                    Span::styled("  attempt ", theme.dim()),
                    Span::raw(format!("{}/{}", t.attempt, t.max_attempts)),
                    Span::styled("  priority ", theme.dim()),
                    Span::raw(t.priority.to_string()),
                ]));
                lines.push(Line::from(vec![
                    Span::styled("created ", theme.dim()),
                    Span::raw(format!(
                        "{} ({})",
                        datetime(t.created_at_ms),
                        ago(now, t.created_at_ms)
                    )),
                    Span::styled("  due ", theme.dim()),
                    Span::raw(ago(now, t.available_at_ms)),
                ]));
                if !t.concurrency_key.is_empty() {
                    lines.push(Line::from(vec![
                        Span::styled("concurrency key ", theme.dim()),
                        Span::raw(untrusted(
                            &t.concurrency_key,
                            width.saturating_sub(16).max(20),
                        )),
                    ]));
                }
                let held = t.status == pb::TaskStatus::Running as i32
                    || t.status == pb::TaskStatus::CancelRequested as i32;
                if held {
                    lines.push(Line::from(vec![
                        Span::styled("held by ", theme.dim()),
                        Span::raw(untrusted(&t.lease_owner, 60)),
                        Span::styled("  epoch ", theme.dim()),
                        Span::raw(t.lease_epoch.to_string()),
                        Span::styled("  lease until ", theme.dim()),
                        Span::raw(clock(t.lease_until_ms)),
                    ]));
                }
                if !r.why_not_running.is_empty() {
                    lines.push(Line::from(vec![
                        Span::styled("why not running: ", theme.warn()),
                        Span::raw(untrusted(
                            &r.why_not_running,
                            width.saturating_sub(18).max(20),
                        )),
                    ]));
                    for b in r.blockers.iter().skip(1) {
                        lines.push(Line::from(format!(
                            "  also: {}",
                            untrusted(&b.message, width.saturating_sub(8))
                        )));
                    }
                }
                if let Some(e) = &t.last_error {
                    lines.push(Line::from(vec![
                        Span::styled("last error ", theme.dim()),
                        Span::styled(untrusted(&e.code, 40), theme.error()),
                        Span::raw(": "),
                        Span::raw(untrusted(&e.message, width.saturating_sub(20).max(20))),
                    ]));
                }
                if !t.progress_json.is_empty() {
                    lines.push(Line::from(vec![
                        Span::styled("progress ", theme.dim()),
                        Span::raw(untrusted(
                            &progress_text(&t.progress_json),
                            width.saturating_sub(10),
                        )),
                    ]));
                }
                lines.push(Line::from(""));
                lines.push(Line::from(Span::styled("Attempts", theme.header())));
                let current = current_attempt(r);
                if r.attempts.is_empty() && current.is_none() {
                    lines.push(Line::from(Span::styled("  none yet", theme.dim())));
                }
                for a in &r.attempts {
                    let error = a
                        .error
                        .as_ref()
                        .map(|e| {
                            format!(" {}: {}", untrusted(&e.code, 30), untrusted(&e.message, 80))
                        })
                        .unwrap_or_default();
                    let text = format!(
                        "  #{} epoch {} {} {} → {} {}{error}",
                        a.attempt,
                        a.epoch,
                        untrusted(&a.agent, 30),
                        clock(a.started_at_ms),
                        clock(a.finished_at_ms),
                        untrusted(&a.read_outcome().word(), 20),
                    );
                    lines.push(Line::from(untrusted(&text, width)));
                }
                if let Some(line) = current {
                    lines.push(Line::from(Span::styled(
                        untrusted(&line, width),
                        theme.good(),
                    )));
                }
                lines.push(Line::from(""));
                lines.push(Line::from(Span::styled("Payload", theme.header())));
                for l in payload_lines(&t.payload_json, width) {
                    lines.push(Line::from(l));
                }
                if !t.result_json.is_empty() {
                    lines.push(Line::from(""));
                    lines.push(Line::from(Span::styled("Result", theme.header())));
                    for l in payload_lines(&t.result_json, width) {
                        lines.push(Line::from(l));
                    }
                }
            }
        }
    }
    let p = Paragraph::new(lines)
        .block(block)
        .wrap(Wrap { trim: false })
        .scroll((d.scroll, 0));
    frame.render_widget(p, rect);
}

/// The pane's key hints: the actions the task's status allows (none until it loaded).
fn detail_keys(d: &Detail) -> String {
    let status = d
        .reply
        .as_ref()
        .and_then(|r| r.task.as_ref())
        .and_then(|t| crate::convert::status(t.status).ok());
    let mut keys = vec!["esc back", "j/k scroll"];
    if let Some(status) = status {
        let offered = offered_actions(status);
        if offered.cancel {
            keys.push("x cancel");
        }
        if offered.requeue {
            keys.push("r requeue");
        }
    }
    format!(" {} ", keys.join(" · "))
}

/// The task's progress in words, or its JSON when that is not the documented object.
fn progress_text(json: &str) -> String {
    serde_json::from_str::<serde_json::Value>(json)
        .ok()
        .as_ref()
        .and_then(progress_of)
        .map_or_else(|| json.to_string(), |p| progress(&p))
}

/// The attempt running now, as an attempts line, when the task is held and the database has
/// no row for it yet (a row is written when an attempt ends).
fn current_attempt(r: &pb::GetTaskResponse) -> Option<String> {
    let t = r.task.as_ref()?;
    let held = t.status == pb::TaskStatus::Running as i32
        || t.status == pb::TaskStatus::CancelRequested as i32;
    if !held || r.attempts.iter().any(|a| a.epoch == t.lease_epoch) {
        return None;
    }
    let what = if t.status == pb::TaskStatus::CancelRequested as i32 {
        "cancelling"
    } else {
        "running"
    };
    Some(format!(
        "  #{} epoch {} {} {} ({}) → {what}",
        t.attempt,
        t.lease_epoch,
        untrusted(&t.lease_owner, 30),
        clock(t.started_at_ms),
        ago(r.now_ms, t.started_at_ms),
    ))
}

/// JSON pretty-printed, each line inert and cut, long string values truncated.
pub fn payload_lines(json: &str, width: usize) -> Vec<String> {
    let pretty = match serde_json::from_str::<serde_json::Value>(json) {
        Ok(mut v) => {
            cut_strings(&mut v);
            serde_json::to_string_pretty(&v).unwrap_or_else(|_| json.to_string())
        }
        Err(_) => json.to_string(),
    };
    let mut lines: Vec<String> = pretty
        .lines()
        .take(PAYLOAD_LINES)
        .map(|l| format!("  {}", untrusted(l, width.saturating_sub(2))))
        .collect();
    if pretty.lines().count() > PAYLOAD_LINES {
        lines.push(format!(
            "  … {} more lines",
            pretty.lines().count() - PAYLOAD_LINES
        ));
    }
    lines
}

fn cut_strings(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::String(s) if s.chars().count() > PAYLOAD_VALUE_CHARS => {
            let total = s.chars().count();
            let kept: String = s.chars().take(PAYLOAD_VALUE_CHARS).collect();
            *s = format!("{kept}… ({total} chars)");
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(cut_strings),
        serde_json::Value::Object(o) => o.values_mut().for_each(cut_strings),
        _ => {}
    }
}

/// The confirm dialog.
pub fn confirm(frame: &mut Frame<'_>, area: Rect, c: &Confirm, theme: Theme) {
    let rect = centered(area, 70, 9);
    frame.render_widget(Clear, rect);
    let title = format!(" {} {}? ", c.verb.word(), c.what());
    let block = pane(
        untrusted(&title, usize::from(rect.width).saturating_sub(4)),
        theme,
    );
    let mut lines = vec![Line::from(vec![
        Span::styled(format!("{} ", c.verb.word()), theme.error()),
        Span::raw(c.what()),
    ])];
    if let Some(ids) = c.first_ids() {
        lines.push(Line::from(format!("ids: {ids}")));
    }
    if let Some(note) = c.verb.note() {
        lines.push(Line::from(Span::styled(note, theme.dim())));
    }
    if let Some(e) = &c.error {
        lines.push(Line::from(Span::styled(
            format!("cannot count: {}", untrusted(e, 120)),
            theme.error(),
        )));
    }
    if c.needs_typed_count() {
        let prompt = match c.count {
            Some(n) => format!("type {n} to confirm: "),
            None => "counting…".to_string(),
        };
        lines.push(Line::from(vec![
            Span::raw(prompt),
            Span::styled(format!("{}_", c.typed.text()), theme.key()),
        ]));
    } else {
        lines.push(Line::from(Span::styled(
            "y confirms · n or esc cancels",
            theme.dim(),
        )));
    }
    lines.push(Line::from(""));
    let button = |label: &str, focused: bool| {
        let text = if focused {
            format!("[ {label} ]")
        } else {
            format!("  {label}  ")
        };
        Span::styled(
            text,
            if focused {
                theme.selected()
            } else {
                Style::default()
            },
        )
    };
    let yes = format!("Yes, {}", c.verb.word().to_lowercase());
    lines.push(Line::from(vec![
        button("No", c.focus == Focus::Cancel),
        Span::raw("   "),
        button(&yes, c.focus == Focus::Confirm),
    ]));
    frame.render_widget(
        Paragraph::new(lines)
            .block(block)
            .wrap(Wrap { trim: false }),
        rect,
    );
}

use ratatui::style::Style;

/// The help screen, generated from the keymap.
pub fn help(frame: &mut Frame<'_>, area: Rect, scroll: u16, theme: Theme) {
    let rect = full_pane(frame, area);
    let block = pane(" Keys (esc closes) ".into(), theme);
    // Keys in a column of 16; a long help wraps under its own start, never cut.
    let room = usize::from(rect.width.saturating_sub(2)).saturating_sub(16);
    let mut lines = Vec::new();
    for (heading, bindings) in help_sections() {
        lines.push(Line::from(Span::styled(heading, theme.header())));
        for (keys, help) in bindings {
            for (i, part) in wrap(help, room).into_iter().enumerate() {
                let keys = if i == 0 { keys.as_str() } else { "" };
                lines.push(Line::from(vec![
                    Span::styled(format!("  {keys:<14}"), theme.key()),
                    Span::raw(part),
                ]));
            }
        }
    }
    frame.render_widget(Paragraph::new(lines).block(block).scroll((scroll, 0)), rect);
}

/// The log of actions sent, newest first: one line an entry (cut to the pane), the selected
/// one marked; an expanded entry shows its whole action and answer under it, inert and
/// wrapped. The pane scrolls to keep the selected entry in sight.
pub fn log(
    frame: &mut Frame<'_>,
    area: Rect,
    state: &State,
    selected: usize,
    expanded: bool,
    theme: Theme,
) {
    let rect = full_pane(frame, area);
    let keys = if expanded {
        " enter/esc collapse · j/k select · q close "
    } else {
        " enter expand · j/k select · esc close "
    };
    let block = pane(format!(" Actions sent ({}) ", state.log.len()), theme)
        .title_bottom(Span::styled(keys, theme.dim()));
    let width = usize::from(rect.width.saturating_sub(2));
    let height = usize::from(rect.height.saturating_sub(2));
    let selected = selected.min(state.log.len().saturating_sub(1));
    let mut lines = Vec::new();
    if state.log.is_empty() {
        lines.push(Line::from(Span::styled("no action sent yet", theme.dim())));
    }
    // The lines the selected entry takes, expansion included.
    let mut shown = 0..0;
    for (i, e) in state.log.iter().rev().enumerate() {
        let (result, style) = match &e.result {
            None => ("waiting…".to_string(), theme.dim()),
            Some(Ok(s)) => (s.clone(), theme.good()),
            Some(Err(s)) => (s.clone(), theme.error()),
        };
        let is_selected = i == selected;
        let marker = if is_selected { "> " } else { "  " };
        let text = format!("{marker}{} {} → ", clock(e.at_ms), e.what);
        let left = untrusted(&text, width);
        let rest = width.saturating_sub(crate::output::text::width(&left));
        let start = lines.len();
        let mut line = Line::from(vec![
            Span::raw(left),
            Span::styled(untrusted(&result, rest), style),
        ]);
        if is_selected {
            line = line.style(theme.selected());
        }
        lines.push(line);
        if is_selected && expanded {
            let answer = match &e.result {
                Some(Err(_)) => "error",
                _ => "answer",
            };
            lines.extend(labelled(width, "action", &e.what, Style::default(), theme));
            lines.extend(labelled(width, answer, &result, style, theme));
        }
        if is_selected {
            shown = start..lines.len();
        }
    }
    // Lowest scroll that shows the whole selected entry; its first line when it cannot fit.
    let scroll = if shown.len() > height {
        shown.start
    } else {
        shown.end.saturating_sub(height)
    };
    let scroll = u16::try_from(scroll).unwrap_or(u16::MAX);
    frame.render_widget(Paragraph::new(lines).block(block).scroll((scroll, 0)), rect);
}

/// `label: text` with the untrusted `text` made inert and wrapped under its own start, indented
/// under a log entry; never cut.
fn labelled<'a>(
    width: usize,
    label: &str,
    text: &str,
    style: Style,
    theme: Theme,
) -> Vec<Line<'a>> {
    let head = format!("    {label}: ");
    let indent = crate::output::text::width(&head);
    let room = width.saturating_sub(indent).max(10);
    wrap(&untrusted(text, usize::MAX), room)
        .into_iter()
        .enumerate()
        .map(|(i, part)| {
            let lead = if i == 0 {
                Span::styled(head.clone(), theme.dim())
            } else {
                Span::raw(" ".repeat(indent))
            };
            Line::from(vec![lead, Span::styled(part, style)])
        })
        .collect()
}

/// The prompt line (replaces the footer).
pub fn prompt(frame: &mut Frame<'_>, area: Rect, p: &Prompt, theme: Theme) {
    let label = match &p.kind {
        PromptKind::Filter => "/".to_string(),
        PromptKind::Command => ":".to_string(),
        PromptKind::Limit(LimitScope::Global) => "global limit (number or unlimited): ".to_string(),
        PromptKind::Limit(LimitScope::Type(t)) => {
            format!("limit of {} (number or unlimited): ", untrusted(t, 30))
        }
        PromptKind::Limit(LimitScope::Agent { agent_id, .. }) => {
            format!(
                "local limit of {} (1-{}): ",
                untrusted(agent_id, 30),
                crate::app::MAX_LOCAL_LIMIT
            )
        }
    };
    let text = p.input.text();
    frame.render_widget(Clear, area);
    let line = Line::from(vec![
        Span::styled(label.clone(), theme.key()),
        Span::raw(text.clone()),
    ]);
    frame.render_widget(Paragraph::new(line), area);
    // Why the entry was refused, on the line above: the prompt covers the status line.
    if let Some(why) = &p.error
        && area.y > 0
    {
        let above = Rect {
            y: area.y - 1,
            height: 1,
            ..area
        };
        frame.render_widget(Clear, above);
        let why = untrusted(why, usize::from(area.width).saturating_sub(7));
        frame.render_widget(
            Paragraph::new(Span::styled(format!("error: {why}"), theme.error())),
            above,
        );
    }
    let before: String = text.chars().take(p.input.cursor()).collect();
    let x = area.x
        + u16::try_from(crate::output::text::width(&label) + crate::output::text::width(&before))
            .unwrap_or(0);
    frame.set_cursor_position((x.min(area.right().saturating_sub(1)), area.y));
}
