//! The table frame every view uses: a titled top rule, a header row, and only the visible
//! rows built (10,000 leases cost what one page costs).

use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Row, Table, TableState};

use super::theme::Theme;
use crate::output::text::width;

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

/// One column's claim on the width, for [`fit`]: the columns its text needs (the widest of
/// its header and cells) and the fewest it may be cut to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fit {
    pub natural: u16,
    pub min: u16,
}

impl Fit {
    /// A column as wide as the widest of `header` and `cells`, never below `min` nor above
    /// `max`.
    pub fn of<S: AsRef<str>>(
        header: &str,
        cells: impl IntoIterator<Item = S>,
        min: u16,
        max: u16,
    ) -> Self {
        let widest = cells
            .into_iter()
            .map(|c| width(c.as_ref()))
            .chain([width(header)])
            .max()
            .unwrap_or(0);
        let natural = u16::try_from(widest)
            .unwrap_or(u16::MAX)
            .clamp(min, max.max(min));
        Self { natural, min }
    }

    /// A column of fixed width.
    pub fn fixed(width: u16) -> Self {
        Self {
            natural: width,
            min: width,
        }
    }
}

/// Column widths for a table `area_width` wide (the selection mark and the one-column gaps
/// taken out): each column gets what its text needs; the `flex` column also gets what is
/// left over; when the text does not fit, the widest column gives up a column at a time, down
/// to its minimum — so room goes to the text that needs it, never to a fixed guess.
pub fn fit(area_width: u16, columns: &[Fit], flex: usize) -> Vec<u16> {
    let gaps = u16::try_from(columns.len().saturating_sub(1)).unwrap_or(u16::MAX);
    // The selection mark's column.
    let room = area_width.saturating_sub(gaps).saturating_sub(1);
    let mut widths: Vec<u16> = columns.iter().map(|c| c.natural).collect();
    let total = |w: &[u16]| w.iter().map(|n| u32::from(*n)).sum::<u32>();
    while total(&widths) > u32::from(room) {
        let widest = widths
            .iter()
            .enumerate()
            .filter(|(i, w)| **w > columns[*i].min)
            .max_by_key(|(i, w)| (**w, usize::MAX - i))
            .map(|(i, _)| i);
        match widest {
            Some(i) => widths[i] -= 1,
            None => break,
        }
    }
    let used = total(&widths);
    if let Some(w) = widths.get_mut(flex) {
        let spare = u32::from(room).saturating_sub(used);
        *w = w.saturating_add(u16::try_from(spare).unwrap_or(u16::MAX));
    }
    widths
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_get_what_their_text_needs_and_the_flex_column_the_rest() {
        let cols = [
            Fit::fixed(1),
            Fit::of("TYPE", ["mail", "export:csv"], 4, 40),
            Fit::of("MESSAGE", ["short"], 10, 400),
        ];
        // 1 mark + 2 gaps; 1 + 10 + the rest.
        assert_eq!(fit(120, &cols, 2), vec![1, 10, 120 - 3 - 11]);
    }

    #[test]
    fn when_text_does_not_fit_the_widest_column_gives_way_first() {
        let long = "m".repeat(200);
        let cols = [
            Fit::of("TYPE", ["export:csv"], 4, 40),
            Fit::of("CODE", ["deadline_exceeded"], 6, 40),
            Fit::of("MESSAGE", [long.as_str()], 10, 400),
        ];
        let w = fit(80, &cols, 2);
        assert_eq!(w, vec![10, 17, 80 - 3 - 27]);
        // Narrower than the needs of all: the widest shrink together, none below its minimum.
        let w = fit(30, &cols, 2);
        assert_eq!(w.iter().sum::<u16>(), 30 - 3);
        assert!(w[0] >= 4 && w[1] >= 6 && w[2] >= 10, "{w:?}");
        // Narrower than the minimums: every column at its minimum.
        assert_eq!(fit(10, &cols, 2), vec![4, 6, 10]);
    }
}
