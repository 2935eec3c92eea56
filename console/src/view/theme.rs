//! Styles and symbols: colour unless NO_COLOR (or `--no-color`), Unicode unless `--ascii`.
//! Every state that has a colour also has a word or a symbol, so nothing is told by colour
//! alone; without colour, emphasis uses bold, reverse and underline only.

use ratatui::style::{Color, Modifier, Style};

use crate::state::Settings;

/// Styles and symbols for one frame.
#[derive(Debug, Clone, Copy)]
pub struct Theme {
    pub color: bool,
    pub unicode: bool,
}

impl Theme {
    pub fn new(settings: Settings) -> Self {
        Self {
            color: settings.color,
            unicode: settings.unicode,
        }
    }

    fn fg(self, color: Color) -> Style {
        if self.color {
            Style::new().fg(color)
        } else {
            Style::new()
        }
    }

    pub fn title(self) -> Style {
        self.fg(Color::Cyan).add_modifier(Modifier::BOLD)
    }
    pub fn header(self) -> Style {
        Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED)
    }
    pub fn selected(self) -> Style {
        Style::new().add_modifier(Modifier::REVERSED)
    }
    pub fn error(self) -> Style {
        self.fg(Color::Red).add_modifier(Modifier::BOLD)
    }
    pub fn warn(self) -> Style {
        self.fg(Color::Yellow)
    }
    pub fn good(self) -> Style {
        self.fg(Color::Green)
    }
    pub fn dim(self) -> Style {
        if self.color {
            Style::new().fg(Color::DarkGray)
        } else {
            Style::new()
        }
    }
    pub fn key(self) -> Style {
        self.fg(Color::Cyan).add_modifier(Modifier::BOLD)
    }
    pub fn active_tab(self) -> Style {
        self.fg(Color::Black)
            .bg(if self.color {
                Color::Cyan
            } else {
                Color::Reset
            })
            .add_modifier(Modifier::BOLD | Modifier::REVERSED)
    }
    pub fn badge(self) -> Style {
        self.fg(Color::Magenta)
            .add_modifier(Modifier::BOLD | Modifier::REVERSED)
    }

    /// The mark of a marked row.
    pub fn mark(self) -> &'static str {
        if self.unicode { "●" } else { "*" }
    }
    /// Separator between header items.
    pub fn sep(self) -> &'static str {
        if self.unicode { " │ " } else { " | " }
    }
    /// The border set of panes.
    pub fn border(self) -> ratatui::symbols::border::Set<'static> {
        if self.unicode {
            ratatui::symbols::border::ROUNDED
        } else {
            ratatui::symbols::border::Set {
                top_left: "+",
                top_right: "+",
                bottom_left: "+",
                bottom_right: "+",
                vertical_left: "|",
                vertical_right: "|",
                horizontal_top: "-",
                horizontal_bottom: "-",
            }
        }
    }

    /// A text gauge of `width` cells filled to `fraction` (0..=1).
    pub fn gauge(self, fraction: f64, width: usize) -> String {
        let fraction = if fraction.is_finite() {
            fraction.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let cells = fraction * width as f64;
        let full = cells.floor() as usize;
        let mut out = String::with_capacity(width * 3);
        if self.unicode {
            const PARTS: [&str; 8] = ["", "▏", "▎", "▍", "▌", "▋", "▊", "▉"];
            out.push_str(&"█".repeat(full));
            let part = ((cells - full as f64) * 8.0).floor() as usize;
            let mut used = full;
            if full < width && part > 0 {
                out.push_str(PARTS[part.min(7)]);
                used += 1;
            }
            out.push_str(&"░".repeat(width - used));
        } else {
            out.push_str(&"#".repeat(full));
            out.push_str(&".".repeat(width - full));
        }
        out
    }

    /// A sparkline of `values` (newest last) in `width` cells, scaled to their maximum.
    pub fn sparkline(self, values: &[u64], width: usize) -> String {
        let bars: &[char] = if self.unicode {
            &[' ', '▁', '▂', '▃', '▄', '▅', '▆', '▇', '█']
        } else {
            &[' ', '.', '.', ':', ':', '|', '|', '#', '#']
        };
        let shown = &values[values.len().saturating_sub(width)..];
        let max = shown.iter().copied().max().unwrap_or(0).max(1);
        let mut out: String = " ".repeat(width - shown.len());
        for v in shown {
            let level = ((*v as f64 / max as f64) * 8.0).ceil() as usize;
            out.push(bars[level.min(8)]);
        }
        out
    }
}
