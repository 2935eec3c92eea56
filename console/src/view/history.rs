//! The history pane of the Types view: the last hour of the selected type (of every type summed
//! when the cursor is on none) as the leader recorded it (GetHistory) — throughput (tasks succeeded per minute), failures (failed
//! attempts per minute) and depth (tasks waiting at each minute's end).
//!
//! Narrow (under 120 columns, or under 36 rows) each series is one line: its name, the latest
//! value, the hour's max, and a sparkline of the hour. Wide, each is a line chart with the
//! time (minutes ago) and the value on labelled axes. Minutes the sampler has not written yet,
//! and depths it could not know, are gaps (not zeros) and never the latest value.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Style;
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Block, Chart, Dataset, GraphType, Paragraph, Sparkline};

use leasehold_proto::v1 as pb;

use super::text::untrusted;
use super::theme::Theme;

/// Rows the narrow pane takes (title and three series).
pub const NARROW_HEIGHT: u16 = 4;
/// Rows the wide pane takes.
pub const WIDE_HEIGHT: u16 = 12;

/// One series of the hour, oldest first; `None` where unknown.
struct Series {
    name: &'static str,
    unit: &'static str,
    values: Vec<Option<u64>>,
}

impl Series {
    fn latest(&self) -> Option<u64> {
        self.values.iter().rev().find_map(|v| *v)
    }
    fn max(&self) -> u64 {
        self.values.iter().flatten().copied().max().unwrap_or(0)
    }
}

fn series(h: &pb::GetHistoryResponse) -> [Series; 3] {
    let counted = |p: &pb::HistoryPoint, v: u64| p.counted.then_some(v);
    [
        Series {
            name: "throughput",
            unit: "/min",
            values: h.points.iter().map(|p| counted(p, p.succeeded)).collect(),
        },
        Series {
            name: "failures",
            unit: "/min",
            values: h.points.iter().map(|p| counted(p, p.failed)).collect(),
        },
        Series {
            name: "depth",
            unit: "",
            values: h.points.iter().map(|p| p.waiting).collect(),
        },
    ]
}

/// The pane's height for an area of `area` (0: no room, or nothing to show).
pub fn height(area: Rect, history: Option<&pb::GetHistoryResponse>) -> u16 {
    if history.is_none_or(|h| h.points.is_empty()) {
        0
    } else if wide(area) {
        WIDE_HEIGHT
    } else if area.height >= 12 {
        NARROW_HEIGHT
    } else {
        0
    }
}

fn wide(area: Rect) -> bool {
    area.width >= 120 && area.height >= 30
}

fn value_text(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

pub fn draw(frame: &mut Frame<'_>, area: Rect, history: &pb::GetHistoryResponse, theme: Theme) {
    let all = series(history);
    let minutes = history.points.len();
    let whose = if history.task_type.is_empty() {
        "all types".to_string()
    } else {
        format!("type {}", untrusted(&history.task_type, 40))
    };
    let title = format!(" last {minutes} min of {whose} (recorded by the leader)");
    if area.height == WIDE_HEIGHT && area.width >= 120 {
        let [title_area, charts] =
            Layout::vertical([Constraint::Length(1), Constraint::Min(0)]).areas(area);
        frame.render_widget(
            Paragraph::new(Line::from(Span::styled(title, theme.dim()))),
            title_area,
        );
        let cols = Layout::horizontal([Constraint::Ratio(1, 3); 3]).split(charts);
        for (s, col) in all.iter().zip(cols.iter()) {
            draw_chart(frame, *col, s, minutes, theme);
        }
        return;
    }
    let rows = Layout::vertical([Constraint::Length(1); 4]).split(area);
    frame.render_widget(
        Paragraph::new(Line::from(Span::styled(title, theme.dim()))),
        rows[0],
    );
    for (s, row) in all.iter().zip(rows.iter().skip(1)) {
        let label = format!(
            " {:<10} {:>6}{:<4} max {:>6} ",
            s.name,
            value_text(s.latest()),
            s.unit,
            s.max()
        );
        let width = u16::try_from(label.chars().count()).unwrap_or(u16::MAX);
        let [text, spark] =
            Layout::horizontal([Constraint::Length(width), Constraint::Min(0)]).areas(*row);
        frame.render_widget(Paragraph::new(label), text);
        // The newest minutes, as many as fit; an unknown minute is a gap, not a zero.
        let start = s.values.len().saturating_sub(usize::from(spark.width));
        frame.render_widget(
            Sparkline::default()
                .data(s.values[start..].iter().copied())
                .max(s.max().max(1))
                .style(theme.header()),
            spark,
        );
    }
}

fn draw_chart(frame: &mut Frame<'_>, area: Rect, s: &Series, minutes: usize, theme: Theme) {
    let n = minutes.max(1) as f64;
    // Unknown minutes are left out (the line joins the known ones), not drawn as zeros.
    let points: Vec<(f64, f64)> = s
        .values
        .iter()
        .enumerate()
        .filter_map(|(i, v)| v.map(|v| (i as f64 - (n - 1.0), v as f64)))
        .collect();
    let top = s.max().max(1) as f64;
    let title = format!(
        " {} {}{} (max {}) ",
        s.name,
        value_text(s.latest()),
        s.unit,
        s.max()
    );
    let dataset = Dataset::default()
        .marker(Marker::Braille)
        .graph_type(GraphType::Line)
        .style(theme.header())
        .data(&points);
    let chart = Chart::new(vec![dataset])
        .block(Block::bordered().title(title))
        .x_axis(
            Axis::default()
                .bounds([-(n - 1.0), 0.0])
                .labels([
                    format!("-{}m", minutes.saturating_sub(1)),
                    "now".to_string(),
                ])
                .style(Style::default()),
        )
        .y_axis(
            Axis::default()
                .bounds([0.0, top])
                .labels(["0".to_string(), s.max().to_string()]),
        );
    frame.render_widget(chart, area);
}
