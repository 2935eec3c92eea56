//! Plain-text tables that fit a terminal width (80 columns for every headless command).
//!
//! Cells are untrusted text: the table makes each one inert before measuring it, so no
//! caller can forget. Columns get their natural width (header or widest cell), capped by the
//! column's `max`; when the row is still too wide the widest shrinkable column gives up a
//! column at a time, down to its `min`. Cut cells end in `…`. As a last guard every rendered
//! line is cut to the width, so a line never exceeds it whatever the columns say.
//!
//! ```text
//! ID     TYPE        STATUS     ERROR
//! 42     email.send  dead       smtp_timeout: connection timed o…
//! ```

use super::text::{inert, truncate, width};

/// The width every headless table fits.
pub const WIDTH: usize = 80;
/// Spaces between two columns.
const GAP: usize = 2;

/// How a column's cells line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// One column: its header and width bounds.
#[derive(Debug, Clone)]
pub struct Column {
    header: &'static str,
    min: usize,
    max: usize,
    align: Align,
}

impl Column {
    /// A left-aligned column between `min` and `max` columns wide.
    pub fn new(header: &'static str, min: usize, max: usize) -> Self {
        Self {
            header,
            min: min.max(1),
            max: max.max(min.max(1)),
            align: Align::Left,
        }
    }

    /// The same column, right-aligned (numbers).
    pub fn right(mut self) -> Self {
        self.align = Align::Right;
        self
    }
}

/// A table: columns, then rows of cells (raw text; made inert when rendered).
#[derive(Debug, Clone)]
pub struct Table {
    columns: Vec<Column>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table with these columns.
    pub fn new(columns: Vec<Column>) -> Self {
        Self {
            columns,
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells are blank and extra cells are ignored.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The narrowest line this table renders without cutting a column below its minimum:
    /// the minimums and the gaps. A caller whose columns do not fit can leave one out first.
    pub fn min_width(&self) -> usize {
        self.columns.iter().map(|c| c.min).sum::<usize>()
            + GAP * self.columns.len().saturating_sub(1)
    }

    /// True when no row was added.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The header line and one line per row, each at most `max_width` columns, without
    /// trailing spaces.
    pub fn render(&self, max_width: usize) -> Vec<String> {
        let n = self.columns.len();
        let cells: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|row| {
                (0..n)
                    .map(|i| {
                        row.get(i)
                            .map(|c| inert(c).into_owned())
                            .unwrap_or_default()
                    })
                    .collect()
            })
            .collect();
        let widths = self.widths(&cells, max_width);
        let mut lines = Vec::with_capacity(cells.len() + 1);
        let header: Vec<String> = self.columns.iter().map(|c| c.header.to_owned()).collect();
        lines.push(self.line(&header, &widths, max_width));
        for row in &cells {
            lines.push(self.line(row, &widths, max_width));
        }
        lines
    }

    fn widths(&self, cells: &[Vec<String>], max_width: usize) -> Vec<usize> {
        let mut widths: Vec<usize> = self
            .columns
            .iter()
            .enumerate()
            .map(|(i, col)| {
                let widest = cells
                    .iter()
                    .map(|row| width(&row[i]))
                    .chain([width(col.header)])
                    .max()
                    .unwrap_or(0);
                widest.clamp(col.min, col.max)
            })
            .collect();
        let gaps = GAP * self.columns.len().saturating_sub(1);
        while widths.iter().sum::<usize>() + gaps > max_width {
            let shrinkable = widths
                .iter()
                .enumerate()
                .filter(|(i, w)| **w > self.columns[*i].min)
                .max_by_key(|(i, w)| (**w, usize::MAX - i))
                .map(|(i, _)| i);
            match shrinkable {
                Some(i) => widths[i] -= 1,
                None => break,
            }
        }
        widths
    }

    fn line(&self, cells: &[String], widths: &[usize], max_width: usize) -> String {
        let mut line = String::new();
        let last = self.columns.len().saturating_sub(1);
        for (i, col) in self.columns.iter().enumerate() {
            let cell = truncate(&cells[i], widths[i]);
            let pad = widths[i].saturating_sub(width(&cell));
            if i > 0 {
                line.push_str(&" ".repeat(GAP));
            }
            match col.align {
                Align::Left => {
                    line.push_str(&cell);
                    if i < last {
                        line.push_str(&" ".repeat(pad));
                    }
                }
                Align::Right => {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(&cell);
                }
            }
        }
        let line = line.trim_end().to_owned();
        truncate(&line, max_width).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Table {
        let mut t = Table::new(vec![
            Column::new("ID", 2, 12).right(),
            Column::new("TYPE", 4, 24),
            Column::new("MESSAGE", 10, 200),
        ]);
        t.row(vec!["7".into(), "noop".into(), "fine".into()]);
        t.row(vec![
            "12345".into(),
            "email.send".into(),
            "bad\u{1b}[2J".into(),
        ]);
        t
    }

    #[test]
    fn columns_line_up() {
        let lines = sample().render(WIDTH);
        assert_eq!(lines[0], "   ID  TYPE        MESSAGE");
        assert_eq!(lines[1], "    7  noop        fine");
        assert_eq!(lines[2], "12345  email.send  bad\\u{1b}[2J");
    }

    #[test]
    fn wide_inputs_never_pass_80_columns() {
        let mut t = Table::new(vec![
            Column::new("ID", 2, 20).right(),
            Column::new("TYPE", 4, 64),
            Column::new("STATUS", 6, 20),
            Column::new("OWNER", 5, 200),
            Column::new("ERROR", 5, 1000),
        ]);
        let huge = "x".repeat(500);
        let wide = "日本語".repeat(100);
        let escapes = "\u{1b}\u{7}\u{202e}".repeat(100);
        t.row(vec![
            i64::MAX.to_string(),
            huge.clone(),
            "cancel_requested".into(),
            wide.clone(),
            escapes.clone(),
        ]);
        t.row(vec![huge.clone(), wide, escapes, huge.clone(), huge]);
        for line in t.render(WIDTH) {
            assert!(width(&line) <= WIDTH, "{} columns: {line}", width(&line));
            assert!(line.chars().count() <= WIDTH);
            assert!(!line.chars().any(char::is_control), "{line}");
        }
    }

    #[test]
    fn a_table_whose_minimums_do_not_fit_is_still_cut_to_the_width() {
        let cols = (0..10).map(|_| Column::new("COLUMN", 12, 12)).collect();
        let mut t = Table::new(cols);
        t.row((0..10).map(|i| format!("value-{i}-long")).collect());
        for line in t.render(WIDTH) {
            assert!(width(&line) <= WIDTH);
        }
    }

    #[test]
    fn the_minimum_width_is_the_minimums_and_the_gaps() {
        assert_eq!(sample().min_width(), 2 + 4 + 10 + 2 * GAP);
        assert_eq!(Table::new(vec![]).min_width(), 0);
    }

    #[test]
    fn missing_cells_are_blank() {
        let mut t = Table::new(vec![Column::new("A", 1, 5), Column::new("B", 1, 5)]);
        t.row(vec!["x".into()]);
        assert_eq!(t.render(WIDTH)[1], "x");
    }
}
