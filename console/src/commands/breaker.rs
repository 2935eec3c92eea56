//! `leasehold breaker set|clear|ls`: SetBreaker, and the circuit breakers of GetOverview.
//!
//! Checked locally before connecting (exit 2, no call): the task type, `--failures`
//! (1..=1,000,000), `--within` (1 ms..=24 h) and `--cooldown` (1 ms..=7 days), whole
//! milliseconds ([`crate::cli::values::breaker_within`], [`crate::cli::values::breaker_cooldown`]).
//! A viewer token is refused by the agent (permission denied, exit 4); whatever else the agent
//! refuses maps as every command's errors do ([`crate::exit`]).
//!
//! `ls` reads the same cached overview as `leasehold types`, so a state is at most 1 s old;
//! past the overview's first 1,000 types a breaker may go unlisted, and `ls` says so.

use leasehold_proto::v1;
use leasehold_shared::domain::policy::duration_text;
use serde::Serialize;

use crate::cli::{BreakerSetArgs, TypeArgs};
use crate::client::Agent;
use crate::convert::breaker::{BreakerStatusView, BreakerView};
use crate::convert::overview::TypeList;
use crate::convert::{Timestamp, WireError};
use crate::error::{Error, Result};
use crate::exit;
use crate::output::Out;
use crate::output::table::{Column, Table, WIDTH};
use crate::output::text::{short_duration, shown};

/// The request of `breaker set` (the numbers were checked when parsed).
pub fn prepare_set(args: &BreakerSetArgs) -> v1::SetBreakerRequest {
    let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    v1::SetBreakerRequest {
        task_type: args.task_type.clone(),
        failures: args.failures,
        within_ms: ms(args.within),
        cooldown_ms: ms(args.cooldown),
        clear: false,
    }
}

/// The request of `breaker clear`.
pub fn prepare_clear(args: &TypeArgs) -> v1::SetBreakerRequest {
    v1::SetBreakerRequest {
        task_type: args.task_type.clone(),
        clear: true,
        ..Default::default()
    }
}

/// The JSON of `breaker set` and `clear`; a `null` breaker means none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Changed {
    pub task_type: String,
    /// The breaker now in force (`null` after a clear).
    pub breaker: Option<BreakerView>,
    pub previous: Option<BreakerView>,
}

impl Changed {
    /// The change a reply reports for `request`: a set must come back with a breaker, a clear
    /// without one.
    pub fn from_reply(
        request: &v1::SetBreakerRequest,
        reply: &v1::SetBreakerResponse,
    ) -> Result<Self, WireError> {
        let now = BreakerView::from_wire_opt(reply.breaker.as_ref())?;
        match (request.clear, &now) {
            (false, None) => return Err(WireError::MissingField("breaker")),
            (true, Some(b)) => {
                return Err(WireError::Broken(format!(
                    "a circuit breaker ({}) still in force after clearing it",
                    b.text
                )));
            }
            _ => {}
        }
        Ok(Self {
            task_type: request.task_type.clone(),
            breaker: now,
            previous: BreakerView::from_wire_opt(reply.previous.as_ref())?,
        })
    }
}

/// Runs `breaker set` or `breaker clear` (one RPC, SetBreaker).
pub async fn run_set(agent: &Agent, request: v1::SetBreakerRequest, out: &mut Out) -> Result<u8> {
    let reply = agent.set_breaker(request.clone()).await?;
    let changed = Changed::from_reply(&request, &reply)
        .map_err(|e| Error::bad_wire("set the circuit breaker", e))?;
    super::print_change(out, &reply.warnings, &changed, line)
}

/// `type payment.charge circuit breaker: 5 failures within 1m, cooldown 30s (was none)`,
/// `type payment.charge circuit breaker cleared (was …)`, …
pub fn line(c: &Changed) -> String {
    let t = shown(&c.task_type, 64);
    let was = c.previous.as_ref().map_or("none", |b| b.text.as_str());
    match (&c.breaker, &c.previous) {
        (Some(now), Some(before)) if now == before => {
            format!("type {t} circuit breaker: {} (unchanged)", now.text)
        }
        (Some(now), _) => format!("type {t} circuit breaker: {} (was {was})", now.text),
        (None, Some(_)) => format!("type {t} circuit breaker cleared (was {was})"),
        (None, None) => format!("type {t} had no circuit breaker (nothing changed)"),
    }
}

/// One breaker, as `breaker ls` lists it: the type's name, then the same object as `breaker`
/// in `leasehold types --output json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BreakerRow {
    pub task_type: String,
    #[serde(flatten)]
    pub breaker: BreakerStatusView,
}

/// The breakers of an overview, in the list's order (by name).
pub fn rows(list: &TypeList) -> Vec<BreakerRow> {
    list.types
        .iter()
        .filter_map(|t| {
            t.breaker.as_ref().map(|b| BreakerRow {
                task_type: t.task_type.clone(),
                breaker: b.clone(),
            })
        })
        .collect()
}

/// What `ls` says when the overview was cut: a type past it may have a breaker too.
fn cut_note(list: &TypeList) -> Option<String> {
    list.truncated.then(|| {
        format!(
            "only the first {} by name were read; later ones may have circuit breakers too",
            super::plural(list.types.len() as u64, "type", "types")
        )
    })
}

/// Runs `breaker ls`.
pub async fn run_ls(agent: &Agent, out: &mut Out) -> Result<u8> {
    let reply = agent.get_overview().await?;
    let list = TypeList::from_wire(&reply).map_err(|e| Error::bad_wire("get the overview", e))?;
    let rows = rows(&list);
    if out.json_mode() {
        out.json(&rows)?;
        // stdout stays the array; the cut is said on stderr.
        if let Some(note) = cut_note(&list) {
            out.note(&note);
        }
    } else {
        out.lines(ls_table(&rows, list.now))?;
        if let Some(note) = cut_note(&list) {
            out.line(&note)?;
        }
    }
    Ok(exit::OK)
}

/// An UNTIL cell, seen at `now` (database time): `11:20:12 (in 12s)` for an open breaker,
/// `11:20:12 (due)` once that time passed (it half-opens at the leader's next tick), `-`
/// otherwise.
fn until_cell(b: &BreakerStatusView, now: Timestamp) -> String {
    let Some(until) = b.until else {
        return "-".to_owned();
    };
    let clock = until.rfc3339().get(11..19).unwrap_or_default().to_owned();
    let left = until.millis().saturating_sub(now.millis());
    if left > 0 {
        format!("{clock} (in {})", short_duration(left))
    } else {
        format!("{clock} (due)")
    }
}

/// The table of `breaker ls`. Only the type name gives way on 80 columns; the setting, the
/// state and the time are never cut.
pub fn ls_table(rows: &[BreakerRow], now: Timestamp) -> Vec<String> {
    if rows.is_empty() {
        return vec!["no circuit breakers".to_owned()];
    }
    let ms = |ms: u64| duration_text(std::time::Duration::from_millis(ms));
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let b = &r.breaker;
            vec![
                r.task_type.clone(),
                b.failures.to_string(),
                ms(b.within_ms),
                ms(b.cooldown_ms),
                b.state.as_str().replace('_', "-"),
                until_cell(b, now),
            ]
        })
        .collect();
    let whole = |header: &'static str, i: usize| {
        let w = cells
            .iter()
            .map(|r| r[i].len())
            .max()
            .unwrap_or(0)
            .max(header.len());
        Column::new(header, w, w)
    };
    let mut table = Table::new(vec![
        Column::new("TYPE", 4, 64),
        whole("FAILURES", 1).right(),
        whole("WITHIN", 2).right(),
        whole("COOLDOWN", 3).right(),
        whole("STATE", 4),
        whole("UNTIL", 5),
    ]);
    for row in cells {
        table.row(row);
    }
    table.render(WIDTH)
}

#[cfg(test)]
mod tests;
