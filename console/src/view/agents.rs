//! View 6: agents — health (up / suspect / down), the console's connection, active against the
//! local limit, heartbeat age, version, leader.

use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::text::Span;
use ratatui::widgets::Cell;

use super::table::{self, Spec};
use super::text::{ago, dur, untrusted};
use super::theme::Theme;
use super::{empty_text, title};
use crate::state::{Health, Link, State, View};

pub fn draw(frame: &mut Frame<'_>, area: Rect, state: &State, theme: Theme) -> usize {
    let data = state.data();
    let t = state.table();
    let rows = data.agent_rows(&t.filter, state.sort_key(View::Agents), t.reverse);
    let selected = t
        .selected
        .as_deref()
        .and_then(|k| rows.iter().position(|r| r.key == k));
    let wide = area.width >= 140;
    let nw: u16 = if wide { 28 } else { 16 };
    let spec = Spec {
        title: title(state, View::Agents, rows.len(), theme),
        header: if wide {
            vec![
                "AGENT",
                "STATE",
                "LINK",
                "ACTIVE",
                "HEARTBEAT",
                "VERSION",
                "LEAD",
                "HOST",
                "ADDRESS",
            ]
        } else {
            vec![
                "AGENT", "STATE", "LINK", "ACTIVE", "BEAT", "VERSION", "LEAD",
            ]
        },
        widths: if wide {
            vec![
                Constraint::Length(nw),
                Constraint::Length(16),
                Constraint::Length(14),
                Constraint::Length(9),
                Constraint::Length(10),
                Constraint::Length(9),
                Constraint::Length(4),
                Constraint::Length(16),
                Constraint::Min(10),
            ]
        } else {
            vec![
                Constraint::Length(nw),
                Constraint::Length(15),
                Constraint::Length(10),
                Constraint::Length(7),
                Constraint::Length(6),
                Constraint::Length(8),
                Constraint::Min(4),
            ]
        },
        total: rows.len(),
        offset: t.offset,
        selected,
        empty: empty_text(state, "no agents known yet"),
    };
    let range = table::visible(&spec, area);
    let local = state.local_ms();
    let cells = rows[range.clone()]
        .iter()
        .map(|r| {
            let (health_style, health) = match r.health {
                Health::Up => (theme.good(), "up"),
                Health::Suspect => (theme.warn(), "suspect"),
                Health::Down => (theme.error(), "down"),
            };
            let lifecycle = r.info.map_or("?".into(), |i| i.read_state().word());
            let state_text = format!("{health} {}", untrusted(&lifecycle, 10));
            let link = match r.conn.map(|c| &c.link) {
                None => "-".to_string(),
                Some(Link::Lost { since_ms, .. }) => format!("lost {}", dur(local - since_ms)),
                // The agent's local socket (where it knows this user's uid) says so.
                Some(Link::Live)
                    if r.conn
                        .and_then(|c| c.route.as_deref())
                        .is_some_and(|v| v.starts_with("unix:")) =>
                {
                    "live unix".to_string()
                }
                Some(l) => l.word().to_string(),
            };
            let active = match (r.info, r.conn.and_then(|c| c.stats.as_ref())) {
                (_, Some(s)) => format!("{}/{}", s.active, s.local_limit),
                (Some(i), None) => format!("{}/{}", i.active, i.local_concurrency),
                _ => "-".into(),
            };
            let beat = r.info.map_or_else(
                || "-".into(),
                |i| {
                    if wide {
                        ago(data.registry.now_ms, i.heartbeat_at_ms)
                    } else {
                        dur(data.registry.now_ms - i.heartbeat_at_ms)
                    }
                },
            );
            let leader = if r.info.is_some_and(|i| i.leader) {
                "yes"
            } else {
                ""
            };
            let mut cells = vec![
                Cell::from(untrusted(&r.key, nw.into())),
                Cell::from(Span::styled(state_text, health_style)),
                Cell::from(link),
                Cell::from(active),
                Cell::from(beat),
                Cell::from(untrusted(
                    r.info.map(|i| i.version.as_str()).unwrap_or("-"),
                    9,
                )),
                Cell::from(leader),
            ];
            if wide {
                cells.push(Cell::from(untrusted(
                    r.info.map(|i| i.host.as_str()).unwrap_or("-"),
                    16,
                )));
                let addr = r
                    .info
                    .map(|i| i.grpc_address.as_str())
                    .or(r.conn.map(|c| c.addr.as_str()))
                    .unwrap_or("-");
                cells.push(Cell::from(untrusted(addr, 30)));
            }
            cells
        })
        .collect();
    table::draw(frame, area, theme, spec, cells, range);
    table::page_rows(area)
}
