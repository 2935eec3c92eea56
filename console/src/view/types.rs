//! View 5: task types — queued, scheduled, retrying, running against the limit, the per-key
//! limit, starts against the rate limit, dead, shed, the circuit breaker, paused, and the last
//! minute's rate — from the agent's cached overview; the global rate limit and its fill ride
//! in the title.
//!
//! Columns are as wide as their text; counts, per-key limits, rates, shed and breaker cells are
//! never cut. The PER-KEY column (running tasks allowed per concurrency key) is there when some
//! type has a per-key limit, the RATE column when some type has a rate limit, the SHED/M column
//! (shed in the last minute, `>` the shed-after duration: `4 >30s`) when some type sheds or
//! shed in the last minute, the BREAKER column (`closed`, `half-open`, `open 12s` with the time
//! left until it half-opens) when some type has a circuit breaker. When the columns do not
//! fit, the name gives way first, then the state word; if the counts and the optional columns
//! still do not fit whole, PER-KEY (a setting, where the others are live) is left out, then
//! RATE, then SHED/M, then BREAKER (last: an open breaker stops the whole type; the header
//! names open ones too), as in `leasehold types` (`12/50/…` would mislead), and the counts
//! stay.
//!
//! Under the table, one line gives the selected type's retry, timeout and attempt settings in
//! force (`attempts 5 · backoff 2s..5m ×2 ±0.2 · timeout 30s · slow 1m · snoozes 100`), from
//! the same overview (nothing from an agent older than per-type policies).
//!
//! Under that, the history pane (view/history.rs): the selected type's last hour (every type
//! summed when none is selected).

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph};

use leasehold_proto::v1 as pb;

use super::table::{self, Fit, Spec};
use super::text::{stale_counts, untrusted};
use super::theme::Theme;
use super::{empty_text, title};
use crate::convert::breaker;
use crate::convert::overview::TypeState;
use crate::convert::rate::FillView;
use crate::convert::shed::{after_text, shed_after_ms};
use crate::state::{State, View};

/// A rate cell: `12/50/1s` (12 started of 50/1s), `-` without a rate limit, `?` for one the wire breaks; and
/// whether its window is full.
fn rate_cell(fill: Option<&pb::RateFill>) -> (String, bool) {
    match fill.map(FillView::from_wire) {
        None => ("-".to_string(), false),
        Some(Ok(f)) => (f.text(), f.full()),
        Some(Err(_)) => ("?".to_string(), false),
    }
}

/// A SHED/M cell: shed in the last minute, then `>` the shed-after duration of a type that
/// sheds (`4 >30s`), `-` when it neither sheds nor shed, `?` for a setting the wire breaks;
/// and whether any was shed.
fn shed_cell(ty: &pb::TypeSummary) -> (String, bool) {
    let n = ty.shed_last_minute;
    let text = match ty
        .shed_after_ms
        .map(|ms| shed_after_ms("shed_after_ms", ms))
    {
        None if n == 0 => "-".to_string(),
        None => n.to_string(),
        Some(Ok(ms)) => format!("{n} >{}", after_text(ms)),
        Some(Err(_)) => format!("{n} >?"),
    };
    (text, n > 0)
}

/// A BREAKER cell at `now_ms`: `closed`, `half-open`, `open 12s`, `-` without a breaker, `?` for
/// a state the wire breaks; and how it reads (0 closed or none, 1 half-open, 2 open).
fn breaker_cell(ty: &pb::TypeSummary, now_ms: i64) -> (String, u8) {
    let Some(b) = &ty.breaker else {
        return ("-".to_string(), 0);
    };
    match breaker::state(&b.state) {
        Ok(state) => {
            let until = (b.until_ms > 0).then_some(b.until_ms);
            let level = match state {
                leasehold_shared::domain::BreakerState::Closed => 0,
                leasehold_shared::domain::BreakerState::HalfOpen => 1,
                leasehold_shared::domain::BreakerState::Open => 2,
            };
            (breaker::cell(state, until, now_ms), level)
        }
        Err(_) => ("?".to_string(), 0),
    }
}

/// The selected type's settings line, or `None` when the agent sent none (or not all).
pub fn settings_line(ty: &pb::TypeSummary) -> Option<String> {
    use leasehold_shared::domain::policy::duration_text;
    let value = |name: &str| ty.settings.iter().find(|s| s.name == name).map(|s| s.value);
    let d = |name: &str| {
        value(name).map(|ms| duration_text(std::time::Duration::from_millis(ms.max(0.0) as u64)))
    };
    Some(format!(
        "attempts {} · backoff {}..{} ×{} ±{} · timeout {} · slow {} · snoozes {}",
        value("max_attempts")? as u64,
        d("retry_base_ms")?,
        d("retry_max_ms")?,
        value("retry_multiplier")?,
        value("retry_jitter")?,
        d("timeout_ms")?,
        d("slow_after_ms")?,
        value("max_snoozes")? as u64,
    ))
}

/// A column as wide as its widest cell, never cut.
fn whole<S: AsRef<str>>(header: &str, cells: impl IntoIterator<Item = S>) -> Fit {
    Fit::fixed(Fit::of(header, cells, 1, u16::MAX).natural)
}

pub fn draw(frame: &mut Frame<'_>, area: Rect, state: &State, theme: Theme) -> usize {
    let data = state.data();
    let t = state.table();
    let rows = data.type_rows(&t.filter, state.sort_key(View::Types), t.reverse);
    let selected = t
        .selected
        .as_deref()
        .and_then(|k| rows.iter().position(|r| r.task_type == k));
    let detail = selected.and_then(|i| settings_line(rows[i]));
    // The queue's last hour under the table (view/history.rs), when there is room.
    let pane = super::history::height(area, data.history.as_ref());
    let area = match &data.history {
        Some(h) if pane > 0 => {
            let [rest, pane_area] =
                Layout::vertical([Constraint::Min(0), Constraint::Length(pane)]).areas(area);
            super::history::draw(frame, pane_area, h, theme);
            rest
        }
        _ => area,
    };
    let area = match &detail {
        Some(line) if area.height > 4 => {
            let [table_area, line_area] =
                Layout::vertical([Constraint::Min(0), Constraint::Length(1)]).areas(area);
            let width = usize::from(line_area.width).saturating_sub(1);
            let text = format!(" {}", untrusted(line, width));
            frame.render_widget(
                Paragraph::new(Line::from(Span::styled(text, theme.dim()))),
                line_area,
            );
            table_area
        }
        _ => area,
    };
    let wide = area.width >= 120;
    let names: Vec<String> = rows.iter().map(|ty| untrusted(&ty.task_type, 64)).collect();
    let counts: Vec<[String; 6]> = rows
        .iter()
        .map(|ty| {
            let limit = ty.limit.map_or_else(|| "-".to_string(), |n| n.to_string());
            [
                ty.queued.to_string(),
                ty.scheduled.to_string(),
                ty.retrying.to_string(),
                format!("{}/{limit}", ty.running),
                ty.dead.to_string(),
                ty.finished_last_minute.to_string(),
            ]
        })
        .collect();
    let per_keys: Vec<String> = rows
        .iter()
        .map(|ty| {
            ty.per_key_limit
                .map_or_else(|| "-".to_string(), |n| n.to_string())
        })
        .collect();
    let rates: Vec<(String, bool)> = rows.iter().map(|ty| rate_cell(ty.rate.as_ref())).collect();
    let sheds: Vec<(String, bool)> = rows.iter().map(|ty| shed_cell(ty)).collect();
    let breakers: Vec<(String, u8)> = rows
        .iter()
        .map(|ty| breaker_cell(ty, data.now_ms))
        .collect();
    let states: Vec<TypeState> = rows.iter().map(|ty| TypeState::of(ty)).collect();
    let count = |header: &str, i: usize| whole(header, counts.iter().map(|c| c[i].as_str()));
    let all_fits = [
        Fit::of("TYPE", &names, 8, if wide { 32 } else { 16 }),
        count("QUEUED", 0),
        count("LATER", 1),
        count("RETRY", 2),
        count("RUNNING", 3),
        whole("PER-KEY", &per_keys),
        whole("RATE", rates.iter().map(|r| r.0.as_str())),
        count("DEAD", 4),
        count("DONE/M", 5),
        whole("SHED/M", sheds.iter().map(|r| r.0.as_str())),
        whole("BREAKER", breakers.iter().map(|r| r.0.as_str())),
        Fit::of("STATE", states.iter().map(|s| s.word()), 6, 12),
    ];
    let all_headers = [
        "TYPE", "QUEUED", "LATER", "RETRY", "RUNNING", "PER-KEY", "RATE", "DEAD", "DONE/M",
        "SHED/M", "BREAKER", "STATE",
    ];
    // PER-KEY is there when some type has a per-key limit, RATE when some type has a rate
    // limit, SHED/M when some type sheds or shed in the last minute, BREAKER when some type
    // has a circuit breaker (all of them, not only those the filter leaves, so a column does
    // not come and go while typing), and when it fits whole beside the counts with the name
    // and the state at their narrowest (the mark column and one-column gaps counted as
    // `table::fit` counts them): PER-KEY gives way first, then RATE, then SHED/M, then
    // BREAKER.
    let types = || data.overview.iter().flat_map(|o| o.types.iter());
    let wanted = |i: usize| match i {
        PER_KEY => types().any(|ty| ty.per_key_limit.is_some()),
        RATE => types().any(|ty| ty.rate.is_some()),
        BREAKER => types().any(|ty| ty.breaker.is_some()),
        _ => types().any(|ty| ty.shed_after_ms.is_some() || ty.shed_last_minute > 0),
    };
    let mut shown: Vec<usize> = GIVE_WAY.into_iter().filter(|i| wanted(*i)).collect();
    let kept = |shown: &[usize], i: usize| !GIVE_WAY.contains(&i) || shown.contains(&i);
    let least = |shown: &[usize]| -> u32 {
        let fits = all_fits.iter().enumerate().filter(|(i, _)| kept(shown, *i));
        fits.map(|(_, f)| u32::from(f.min) + 1).sum()
    };
    for column in GIVE_WAY {
        if shown.contains(&column) && least(&shown) > u32::from(area.width) {
            shown.retain(|i| *i != column);
        }
    }
    let fits: Vec<Fit> = all_fits
        .iter()
        .enumerate()
        .filter(|(i, _)| kept(&shown, *i))
        .map(|(_, f)| *f)
        .collect();
    let header: Vec<&str> = all_headers
        .iter()
        .enumerate()
        .filter(|(i, _)| kept(&shown, *i))
        .map(|(_, h)| *h)
        .collect();
    let flex = fits.len() - 1;
    let widths = table::fit(area.width, &fits, flex);
    let mut title = title(state, View::Types, rows.len(), theme);
    if let Some(global) = data.overview.as_ref().and_then(|o| o.global_rate.as_ref()) {
        let (text, full) = rate_cell(Some(global));
        let style = if full { theme.warn() } else { theme.dim() };
        title
            .spans
            .push(Span::styled(theme.sep().trim_start(), theme.dim()));
        title
            .spans
            .push(Span::styled(format!("global rate {text} "), style));
    }
    if let Some(old) = data
        .overview
        .as_ref()
        .and_then(|o| stale_counts(data.now_ms, o.now_ms))
    {
        title
            .spans
            .push(Span::styled(theme.sep().trim_start(), theme.dim()));
        title.spans.push(Span::styled(old, theme.warn()));
    }
    let spec = Spec {
        title,
        header,
        widths: widths.iter().map(|w| Constraint::Length(*w)).collect(),
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
    let cells = range
        .clone()
        .map(|i| {
            let ty = rows[i];
            let state = states[i];
            let style = match state {
                TypeState::Paused | TypeState::AtLimit | TypeState::RateLimited => theme.warn(),
                TypeState::Active => theme.dim(),
            };
            let [queued, later, retry, running, dead, done] = counts[i].clone();
            let (rate, full) = rates[i].clone();
            let (shed, any) = sheds[i].clone();
            let (breaker, level) = breakers[i].clone();
            let all = [
                Cell::from(untrusted(&names[i], usize::from(widths[0]))),
                Cell::from(queued),
                Cell::from(later),
                Cell::from(retry),
                Cell::from(running),
                Cell::from(per_keys[i].clone()),
                Cell::from(if full {
                    Span::styled(rate, theme.warn())
                } else {
                    Span::raw(rate)
                }),
                Cell::from(if ty.dead > 0 {
                    Span::styled(dead, theme.error())
                } else {
                    Span::raw(dead)
                }),
                Cell::from(done),
                Cell::from(if any {
                    Span::styled(shed, theme.warn())
                } else {
                    Span::raw(shed)
                }),
                Cell::from(match level {
                    2 => Span::styled(breaker, theme.error()),
                    1 => Span::styled(breaker, theme.warn()),
                    _ => Span::raw(breaker),
                }),
                Cell::from(Span::styled(
                    untrusted(state.word(), usize::from(widths[flex])),
                    style,
                )),
            ];
            all.into_iter()
                .enumerate()
                .filter(|(i, _)| kept(&shown, *i))
                .map(|(_, c)| c)
                .collect::<Vec<Cell<'_>>>()
        })
        .collect();
    table::draw(frame, area, theme, spec, cells, range);
    table::page_rows(area)
}

/// Where the optional columns are among the columns (before any is left out).
const PER_KEY: usize = 5;
const RATE: usize = 6;
const SHED: usize = 9;
const BREAKER: usize = 10;
/// The optional columns in the order they give way when they do not fit.
const GIVE_WAY: [usize; 4] = [PER_KEY, RATE, SHED, BREAKER];
