//! The header: the cluster at a glance (agents up / suspect / down, leases whose renewal the
//! database says is overdue, running against the global
//! limit, queued, retrying, dead letters, leader and its term, badges), the view tabs with the filter,
//! marks and the circuit breakers that are open or half-open, and the throughput sparkline with
//! each agent's connection.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use super::text::{dur, untrusted};
use super::theme::Theme;
use crate::output::text::width;
use crate::state::{Breakers, Link, State, View};

/// Lines the header takes.
pub const HEIGHT: u16 = 3;

pub fn draw(frame: &mut Frame<'_>, area: Rect, state: &State, theme: Theme) {
    let data = state.data();
    let sep = || Span::styled(theme.sep(), theme.dim());
    let (up, suspect, down) = data.health_counts();
    let totals = data.totals();
    // Narrow terminals get short labels so the whole line fits 80 columns.
    let narrow = area.width < 110;
    let mut first = Vec::new();
    if !narrow {
        first.push(Span::styled("Leasehold", theme.title()));
        first.push(Span::raw(" "));
    }
    if state.read_only.is_some() {
        first.push(Span::styled(" RO ", theme.badge()));
        first.push(Span::raw(" "));
    }
    if state.frozen.is_some() {
        first.push(Span::styled(" FROZEN ", theme.badge()));
        first.push(Span::raw(" "));
    }
    let (l_agents, l_suspect, l_running, l_retry) = if narrow {
        ("", "sus", "run", "retry")
    } else {
        ("agents ", "suspect", "running", "retrying")
    };
    first.push(Span::raw(format!("{l_agents}{up} up ")));
    let count = |n: usize, word: &str, style| {
        if n > 0 {
            Span::styled(format!("{n} {word}"), style)
        } else {
            Span::raw(format!("{n} {word}"))
        }
    };
    first.push(count(suspect, l_suspect, theme.warn()));
    first.push(Span::raw(" "));
    first.push(count(down, "down", theme.error()));
    // Leases the database says are overdue: shown only when there are some (the Renewals view
    // lists them).
    let overdue = data.overdue_count();
    if overdue > 0 {
        first.push(Span::raw(" "));
        first.push(count(
            overdue,
            if narrow { "late" } else { "overdue" },
            theme.error(),
        ));
    }
    first.push(sep());
    let limit = totals.global_limit.map_or_else(
        || if theme.unicode { "∞" } else { "-" }.to_string(),
        |n| n.to_string(),
    );
    let running = if totals.known {
        totals.running
    } else {
        data.lease_count() as u64
    };
    first.push(Span::raw(format!("{l_running} {running}/{limit}")));
    if totals.global_paused {
        first.push(Span::styled(" PAUSED", theme.warn()));
    }
    if totals.known {
        first.push(sep());
        first.push(Span::raw(format!("queued {}", totals.queued)));
        first.push(sep());
        first.push(Span::raw(format!("{l_retry} {}", totals.retrying)));
        first.push(sep());
        let dead = format!("dead {}", totals.dead);
        first.push(if totals.dead > 0 {
            Span::styled(dead, theme.error())
        } else {
            Span::raw(dead)
        });
    }
    first.push(sep());
    first.push(Span::raw(format!(
        "{} {}",
        if narrow { "lead" } else { "leader" },
        data.leader()
            .map_or_else(|| "-".to_string(), |l| untrusted(l, 24))
    )));
    // The leader lease's term, where the line has room for it.
    if let Some(term) = data.leader_term() {
        let term = Span::raw(format!(" term {term}"));
        let used: usize = first.iter().map(Span::width).sum();
        if used + term.width() <= usize::from(area.width) {
            first.push(term);
        }
    }

    let mut tabs = Vec::new();
    for view in View::ALL {
        // Narrow terminals get short tab names so eight tabs and a filter fit 80 columns.
        let name = if narrow {
            view.short_title()
        } else {
            view.title()
        };
        let label = format!("{} {name}", view.index() + 1);
        // Narrow: one space between tabs (the brackets mark the current one), so eight
        // tabs leave room for the filter or the marks on 80 columns.
        if narrow && !tabs.is_empty() {
            tabs.push(Span::raw(" "));
        }
        if view == state.view.numbered() {
            tabs.push(Span::styled(format!("[{label}]"), theme.active_tab()));
        } else if narrow {
            tabs.push(Span::raw(label));
        } else {
            tabs.push(Span::raw(format!(" {label} ")));
        }
    }
    let filter = &state.table().filter;
    if !filter.is_empty() {
        tabs.push(sep());
        tabs.push(Span::styled(
            format!("filter: {}", untrusted(filter, 30)),
            theme.warn(),
        ));
    }
    if !state.marks.is_empty() {
        tabs.push(sep());
        tabs.push(Span::styled(
            format!("{} marked", state.marks.len()),
            theme.warn(),
        ));
    }
    // Open and half-open circuit breakers: by name where the line has room, else counted (the
    // Types view has each one).
    let breakers = data.breakers();
    if !breakers.is_empty() {
        tabs.push(sep());
        let used: usize = tabs.iter().map(Span::width).sum();
        let room = usize::from(area.width).saturating_sub(used);
        let style = if breakers.open.is_empty() {
            theme.warn()
        } else {
            theme.error()
        };
        tabs.push(Span::styled(breaker_text(&breakers, room), style));
    }

    let rate = data.throughput.back().copied().unwrap_or(0);
    let samples: Vec<u64> = data.throughput.iter().copied().collect();
    let mut third = vec![
        Span::raw("done/s "),
        Span::styled(theme.sparkline(&samples, 20), theme.good()),
        Span::raw(format!(" {rate:>5}")),
        sep(),
    ];
    let local = state.local_ms();
    if narrow {
        let live = data.conns.values().filter(|c| c.link.is_live()).count();
        third.push(Span::styled(
            format!("{live}/{} streams live", data.conns.len()),
            theme.good(),
        ));
    }
    let shown = data.conns.values().filter(|c| !narrow || !c.link.is_live());
    for (i, conn) in shown.enumerate() {
        if i > 0 || narrow {
            third.push(Span::raw("  "));
        }
        let name = untrusted(conn.name(), 18);
        let (word, style) = match &conn.link {
            Link::Live => (
                format!(
                    "{name} live {}",
                    conn.updated_ms
                        .map_or_else(|| "-".into(), |u| format!("{} ago", dur(local - u)))
                ),
                theme.good(),
            ),
            Link::Lost {
                since_ms,
                retry_at_ms,
                ..
            } => (
                if narrow {
                    format!("{name} LOST {}", dur(local - since_ms))
                } else {
                    format!(
                        "{name} LOST {} (retry in {})",
                        dur(local - since_ms),
                        dur((retry_at_ms - local).max(0))
                    )
                },
                theme.error(),
            ),
            other => (format!("{name} {}", other.word()), theme.warn()),
        };
        third.push(Span::styled(word, style));
    }
    let lines = vec![Line::from(first), Line::from(tabs), Line::from(third)];
    frame.render_widget(Paragraph::new(lines), area);
}

/// The header's breaker words in at most `room` columns where they fit: by name (`breaker
/// open: payment.charge · half-open: sms.send`), else counted (`1 breaker open, 1 half-open`),
/// else the open ones alone (`1 breaker open`, or `1 brk open` in less room) or, with none
/// open, `1 brk half-open`.
pub fn breaker_text(b: &Breakers, room: usize) -> String {
    let names = |list: &[String]| {
        let shown: Vec<String> = list.iter().map(|n| untrusted(n, 24)).collect();
        shown.join(", ")
    };
    let open_word = if b.open.len() == 1 {
        "breaker open"
    } else {
        "breakers open"
    };
    let named = match (b.open.is_empty(), b.half_open.is_empty()) {
        (false, true) => format!("{open_word}: {}", names(&b.open)),
        (false, false) => format!(
            "{open_word}: {} · half-open: {}",
            names(&b.open),
            names(&b.half_open)
        ),
        (true, _) => {
            let word = if b.half_open.len() == 1 {
                "breaker"
            } else {
                "breakers"
            };
            format!("{word} half-open: {}", names(&b.half_open))
        }
    };
    if width(&named) <= room {
        return named;
    }
    let (open, half) = (b.open.len(), b.half_open.len());
    let open_count = match open {
        1 => "1 breaker open".to_owned(),
        n => format!("{n} breakers open"),
    };
    let counted = match (open, half) {
        (0, 1) => "1 breaker half-open".to_owned(),
        (0, n) => format!("{n} breakers half-open"),
        (_, 0) => open_count.clone(),
        (_, h) => format!("{open_count}, {h} half-open"),
    };
    if width(&counted) <= room {
        return counted;
    }
    // Shortest: the open ones alone (they stop their type; a half-open one is already
    // trying), or the half-open count in the narrow header's abbreviations.
    if open > 0 && width(&open_count) <= room {
        open_count
    } else if open > 0 {
        format!("{open} brk open")
    } else {
        format!("{half} brk half-open")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breakers(open: &[&str], half_open: &[&str]) -> Breakers {
        let owned = |l: &[&str]| l.iter().map(|s| (*s).to_owned()).collect();
        Breakers {
            open: owned(open),
            half_open: owned(half_open),
        }
    }

    #[test]
    fn breakers_are_named_where_they_fit_else_counted() {
        let one = breakers(&["payment.charge"], &[]);
        assert_eq!(breaker_text(&one, 80), "breaker open: payment.charge");
        assert_eq!(breaker_text(&one, 15), "1 breaker open");
        assert_eq!(breaker_text(&one, 13), "1 brk open");
        let both = breakers(&["a", "b"], &["c"]);
        assert_eq!(
            breaker_text(&both, 80),
            "breakers open: a, b · half-open: c"
        );
        assert_eq!(breaker_text(&both, 30), "2 breakers open, 1 half-open");
        assert_eq!(breaker_text(&both, 15), "2 breakers open");
        let half = breakers(&[], &["sms.send"]);
        assert_eq!(breaker_text(&half, 80), "breaker half-open: sms.send");
        assert_eq!(breaker_text(&half, 20), "1 breaker half-open");
        assert_eq!(breaker_text(&half, 15), "1 brk half-open");
        let odd = breakers(&["x\u{1b}[2J"], &[]);
        assert!(!breaker_text(&odd, 80).contains('\u{1b}'));
    }
}
