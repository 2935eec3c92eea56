//! The table frame every view uses: a titled top rule, a header row, and only the visible
//! rows built (10,000 leases cost what one page costs).

use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Row, Table, TableState};

use super::theme::Theme;

/// One table to draw.
pub struct Spec<'a> {
    pub title: Line<'a>,
    pub header: Vec<&'static str>,
    pub widths: Vec<Constraint>,
    /// Total rows (only `visible` are built).
    pub total: usize,
    pub offset: usize,
    pub selected: Option<usize>,
    /// Shown when there are no rows.
    pub empty: &'a str,
}

/// Rows the table shows in `area` (title and header take two lines).
pub fn page_rows(area: Rect) -> usize {
    usize::from(area.height.saturating_sub(2))
}

/// The range of row indexes visible for `spec` in `area`.
pub fn visible(spec: &Spec<'_>, area: Rect) -> std::ops::Range<usize> {
    let page = page_rows(area).max(1);
    let mut offset = spec.offset.min(spec.total.saturating_sub(1));
    if let Some(sel) = spec.selected {
        if sel < offset {
            offset = sel;
        } else if sel >= offset + page {
            offset = sel + 1 - page;
        }
    }
    offset..(offset + page).min(spec.total)
}

/// Draws `rows` (the visible ones, in order) as `spec` says.
pub fn draw(
    frame: &mut Frame<'_>,
    area: Rect,
    theme: Theme,
    spec: Spec<'_>,
    rows: Vec<Vec<Cell<'_>>>,
    range: std::ops::Range<usize>,
) {
    let block = Block::new()
        .borders(Borders::TOP)
        .border_set(theme.border())
        .title(spec.title);
    if spec.total == 0 {
        let inner = block.inner(area);
        frame.render_widget(block, area);
        frame.render_widget(
            ratatui::widgets::Paragraph::new(Line::from(Span::styled(spec.empty, theme.dim()))),
            inner,
        );
        return;
    }
    let header = Row::new(spec.header.into_iter().map(Cell::from)).style(theme.header());
    let selected = spec
        .selected
        .filter(|s| range.contains(s))
        .map(|s| s - range.start);
    let table = Table::new(rows.into_iter().map(Row::new), spec.widths)
        .header(header)
        .block(block)
        .column_spacing(1)
        .row_highlight_style(theme.selected())
        // The selection is also a symbol, not only a style.
        .highlight_symbol(">")
        .highlight_spacing(ratatui::widgets::HighlightSpacing::Always);
    let mut state = TableState::default().with_selected(selected);
    frame.render_stateful_widget(table, area, &mut state);
}
